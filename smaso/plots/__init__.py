"""Figures of the library, one module per topic; every function returns a matplotlib ``Figure`` and
saves it atomically when given a path, so the same plots serve scripts, the CLI and notebooks.

- :mod:`smaso.plots.comparison`: student statistics against the reformulation (Thm 2 / Thm 4).
"""

from ._base import plt, save_figure
from .comparison import plot_comparison

__all__ = ["plot_comparison", "plt", "save_figure"]
