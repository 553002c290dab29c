"""Depth (the lecture on depth and optimization): linear pieces, back-propagation, depth separation.

- :mod:`smaso.depth.pieces`: exact linear pieces of a 1-D network, the breakpoint bound 2^(L-1) (m_1 + 1) m_2 ... m_L.
- :mod:`smaso.depth.backprop`: back-propagation written out (the delta recursion) and the chain-rule warm-up.
- :mod:`smaso.depth.separation`: depth-L students with at most 2^L nodes against tau^(L^2).
- :mod:`smaso.depth.bracket`: the certified bracket on the best error of such a class against tau^k.
- :mod:`smaso.depth.pwl_bound`: the cell bound, a tighter certified lower bound on the best error of T-piece
  functions (a dynamic programme over breakpoint cells), with a T-piece function as its upper end.
- :mod:`smaso.depth.population`: many random restarts of a small student trained as one batched
  network (the best of R).
- :mod:`smaso.depth.training`: the seeded ReLU MLP and the one optimiser loop both of them train with.

The tent-map teacher tau^k and its exact network are in :mod:`teachers.tent`; ``docs/theory.md`` maps
every equation to its function.
"""

from smaso._lazy import lazy_submodules

__all__ = ["backprop", "bracket", "pieces", "population", "pwl_bound", "separation", "training"]
__getattr__, __dir__ = lazy_submodules(__name__, __all__, globals())
