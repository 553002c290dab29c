"""Depth (the lecture on depth and optimization): linear pieces, back-propagation, depth separation.

- :mod:`smaso.depth.pieces`: exact counting of the linear pieces of a 1-D ReLU / leaky ReLU / abs
  network, the breakpoint bound 2^(L-1) (m_1 + 1) m_2 ... m_L, the fewest nodes for a piece count.
- :mod:`smaso.depth.backprop`: back-propagation written out (the delta recursion) and the chain-rule
  warm-up.
- :mod:`smaso.depth.separation`: depth-L students with at most 2^L nodes against tau^(L^2).

The tent-map teacher tau^k and its exact network are in :mod:`teachers.tent`; ``docs/theory.md`` maps
every equation to its function.
"""

from . import backprop, pieces, separation

__all__ = ["backprop", "pieces", "separation"]
