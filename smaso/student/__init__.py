"""The framework paper's student and its reformulation (Tian et al., §2-§4: Eq 1-12, Thm 2-5), on any ladder.

One student class (:class:`~smaso.student.network.LadderStudent`) and one code path for every ladder: a uniform
tree (the paper's drawing; a fast path of reshapes), any tree, or any layered region graph with overlapping
receptive fields (a region with several parents).  One module per step of the paper's argument, in its order:

- :mod:`smaso.student.activations`: a node's activation f = s(u) u with its forward gate s and its
  backward gate f' (Eq 1; ReLU, leaky ReLU, abs, the beta-VQ swish).
- :mod:`smaso.student.connectivity`: the parent-child wiring, one weight block per edge: the level
  operations u = sum_c W^T f_c (Eq 1, forward), raw_c = sum_p W g_p (Eq 1, backward) and Delta W (Eq 2).
- :mod:`smaso.student.network`: the locally connected student of any ladder, its explicit forward and
  backward (Eq 1-2), Batch Norm after or before the gate (Eq 10-11, per region), shared weights, and the
  weight update Delta W (Eq 2).
- :mod:`smaso.student.batchnorm`: Batch Norm as a projection (Eq 10-11, Thm 5) and its P-weighted
  form (Eq 12).
- :mod:`smaso.student.training`: minibatch SGD with the explicit backward (Eq 2: W += lr Delta W).
- :mod:`smaso.student.mergeable`: the mergeable state of per-event sums and row groups of a record.
- :mod:`smaso.student.frequency`: frequency statistics F, D, G, G~ averaged per teacher event, per region
  and per edge (Eq 6), streamed and merged; K row groups for the jackknife.
- :mod:`smaso.student.row_groups`: the jackknife's row groups as an axis of one accumulation (every group of a
  batch at once).
- :mod:`smaso.student.scratch`: scratch buffers kept per object outside its state (reused by hot loops).
- :mod:`smaso.student.reformulation`: the matrix recursion over P(z_beta | z_alpha) (Thm 4, Eq 9, summed
  over every parent; Eq 12 with BN), Eq 7's signs.
- :mod:`smaso.student.noise`: the noise floor of every measured number (a delete-one-group jackknife).
- :mod:`smaso.student.diagnosis`: the reformulation's errors against measurements and Thm 2's conditions
  (decorrelation, focus, broadness per edge; Thm 3: all vanish on a fully informative ladder).
- :mod:`smaso.student.readout`: a hidden group at the root and a linear map to the classes, as one more
  ladder level whose event is the label (so Eq 1-12 and Thm 2-4 carry through to it).
- :mod:`smaso.student.ceiling`: the ceilings of a student class (the additive cap of a linear top, certified by
  a master program over labelings with LP cuts; the readout's Bayes given the children's events, exact or a Monte
  Carlo estimate on large ladders) and a network built to attain them.
- :mod:`smaso.student.alignment`: do hidden nodes become selective for their region's latent event (§3-4's
  question)?  eta^2, the on-state MI and the best-matching node's correlation, with controls and floors;
  linear probes on held-out rows.
- :mod:`smaso.student.shallow`: the shallow fully connected student (one hidden layer on the flattened input) as
  the ladder student on the teacher's flat view, and the error rate of any student.
- :mod:`smaso.student.sensitivity`: the synonymic sensitivity of every layer (the RHM paper's), mergeable.
- :mod:`smaso.student.config`: the one set of defaults of a run (student, training, evaluation), shared with
  ``smaso demo`` and ``smaso compare``.
- :mod:`smaso.student.compare`: train, measure, predict, compare (:func:`~smaso.student.compare.compare_student`),
  noise sweeps and errors against N.

The exact event statistics P(z_alpha), P(z_alpha, z_beta) the reformulation consumes are
:mod:`teachers.statistics`.  Deprecated (one release, with a warning naming the new name):
:mod:`smaso.student.graph_network`, :mod:`smaso.student.graph_frequency`, :mod:`smaso.student.graph_reformulation`.

The theorems built on top of these (Thm 1, 6-9, §5.3, §7.5.1) are in :mod:`smaso.theorems`;
``docs/theory.md`` maps every equation to its function.
"""

from smaso._lazy import lazy_submodules

__all__ = ["activations", "alignment", "batchnorm", "ceiling", "compare", "config", "connectivity", "diagnosis",
           "frequency", "mergeable", "network", "noise", "readout", "reformulation", "seeds", "sensitivity", "shallow",
           "training"]
_DEPRECATED = ("graph_frequency", "graph_network", "graph_reformulation")  # importable, not in __all__
__getattr__, __dir__ = lazy_submodules(__name__, (*__all__, *_DEPRECATED), globals())
