"""The framework paper's student and its reformulation (Tian et al., §2-§4: Eq 1-12, Thm 2-5).

One module per step of the paper's argument, in its order:

- :mod:`smaso.student.activations`: a node's activation f = s(u) u with its forward gate s and its
  backward gate f' (Eq 1; ReLU, leaky ReLU, abs, the beta-VQ swish).
- :mod:`smaso.student.network`: the locally connected student that follows a ladder, its explicit
  forward and backward (Eq 1-2) and the weight update Delta W (Eq 2).
- :mod:`smaso.student.graph_network`: the same student on a ladder over any layered region graph
  (one weight block per parent-child edge; a child's gradient sums over its parents).
- :mod:`smaso.student.batchnorm`: Batch Norm as a projection (Eq 10-11, Thm 5) and its P-weighted
  form (Eq 12).
- :mod:`smaso.student.frequency`: frequency statistics F, D, G, G~ averaged per teacher event (Eq 6).
- :mod:`smaso.student.reformulation`: the matrix recursion over P(z_beta | z_alpha) (Thm 4, Eq 9).
- :mod:`smaso.student.graph_frequency`, :mod:`smaso.student.graph_reformulation`: the same two on a
  region graph (padded events; Eq 9 with the sum over every parent; Thm 2's terms per edge).
- :mod:`smaso.student.noise`: the noise floor of every measured number (a delete-one-group jackknife).
- :mod:`smaso.student.compare`: train, measure, predict, compare, and Thm 2's diagnosis.

The theorems built on top of these (Thm 1, 6-9, §5.3, §7.5.1) are in :mod:`smaso.theorems`;
``docs/theory.md`` maps every equation to its function.
"""

from smaso._lazy import lazy_submodules

__all__ = ["activations", "batchnorm", "compare", "frequency", "graph_frequency", "graph_network",
           "graph_reformulation", "network", "noise", "reformulation"]
__getattr__, __dir__ = lazy_submodules(__name__, __all__, globals())
