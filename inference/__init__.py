"""Inference routines, one module per job (``docs/theory.md`` for the equations).

- :mod:`inference.posterior`: the one exact posterior of every ladder (§1.13, beyond the paper): log p(x),
  p(y | x) and every region's p(z_alpha | x) (:func:`~inference.posterior.posterior`), the joint MAP
  (:func:`~inference.posterior.map_events`), the Bayes-optimal accuracy, exact draws of the events (ArviZ) and
  the exact event statistics P(z_r), P(z_parent, z_child) that Eq 6 and Eq 9 read (``graph_statistics``).  The
  algorithm is chosen by the graph:

  - :mod:`inference.sum_product`: trees, sum-product in scaled probabilities batched over a level's regions
    (lambda_a(j) = prod_children sum_k P(z_c = k | z_a = j) phi_c(k), rescaled to max 1 per level);
  - :mod:`inference.junction_tree`: any layered region graph, a junction tree from a min-fill elimination
    order, its cost stated and refused when too large (the elimination itself, and the exact statistics of every
    parent-child edge, are the models' own: :mod:`teachers.elimination`);
  - :mod:`inference.event_draws`: forward filtering, backward sampling on either.
- :mod:`inference.mixture`: the SMASO Gaussian mixtures of a layer (Eq 3, Eq 10) as Pyro models, the layer's
  region scores and VQ outputs, and its distance from Eq 11: the models the next two modules run inference in.
- :mod:`inference.vq`: hard, soft and beta-VQ as inference in the SMASO mixture of a layer (MAP by
  ``infer_discrete``, tempered SVI, exact posterior draws), which produce ReLU, SiLU and swish; the
  closed forms they reproduce are in :mod:`smaso.splines.maso`.
- :mod:`inference.factorial`: the factorial mixture of a whole layer: exact joint MAP by enumeration,
  factorized MAP, mean field, and their gaps (Eq 10, Eq 11); the same answers by Pyro inference.
- :mod:`inference.rng`: the local RNG scope every seeded call runs in.
- Deprecated (0.3, removed in 0.4; each function warns when called): :mod:`inference.ladder_posterior` and
  :mod:`inference.graph_posterior`, the former tree and graph posteriors, now names for
  :mod:`inference.posterior`'s.

The submodules are the API (``from inference.posterior import posterior``); this package re-exports nothing,
so ``inference.posterior`` is the module, not its function of the same name.
"""

from teachers._lazy import lazy_submodules

__all__ = ["event_draws", "factorial", "junction_tree", "ladder_posterior", "posterior", "sum_product", "vq"]
__getattr__, __dir__ = lazy_submodules(__name__, __all__, globals())
