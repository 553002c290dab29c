"""Inference routines, one module per model.

- :mod:`inference.ladder_posterior`: exact posteriors of the ladder teacher (sum-product on the region
  tree), the Bayes-optimal accuracy, exact posterior draws of the latent events (ArviZ).
- :mod:`inference.vq`: hard, soft and beta-VQ as inference in the SMASO mixture of a layer (MAP by
  ``infer_discrete``, tempered SVI, exact posterior draws), which produce ReLU, SiLU and swish; the
  closed forms they reproduce are in :mod:`smaso.splines.maso`.
- :mod:`inference.factorial`: the factorial mixture of a whole layer: exact joint MAP by enumeration,
  factorized MAP, mean field, and their gaps (Eq 10, Eq 11); the same answers by Pyro inference.
- :mod:`inference.graph_posterior`: exact inference on ladders over any layered region graph
  (:class:`teachers.graph_ladder.GraphLadder`): a junction tree from a min-fill elimination order, its
  cost stated and refused when too large; exact event statistics over every parent-child edge.
- :mod:`inference.rng`: the local RNG scope every seeded call runs in.

The submodules are the API (``from inference.vq import svi_vq``); this package re-exports nothing, so
``inference.ladder_posterior`` is the module, not its function of the same name.
"""

from smaso._lazy import lazy_submodules

__all__ = ["factorial", "ladder_posterior", "vq"]
__getattr__, __dir__ = lazy_submodules(__name__, __all__, globals())
