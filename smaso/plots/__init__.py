"""Figures of the library, one module per topic; every ``plot_*`` function returns a matplotlib
``Figure`` and saves it atomically when given ``path=``, so the same plots serve scripts, the CLI and
the notebooks in ``examples/``.

- :mod:`smaso.plots.alignment`: event alignment of the student's hidden nodes against training step (eta^2,
  on-state MI, best-matching node, linear probe; controls and null floors).
- :mod:`smaso.plots.comparison`: student statistics against the reformulation (Thm 2 / Thm 4, Eq 9),
  over training and against leaf noise (Thm 3's delta case and beyond).
- :mod:`smaso.plots.vq`: hard, soft and beta-VQ inference of a MASO layer (Eq 2, 7-9): the family of
  activations, Table 1, the VQ partition of a 2-D layer, posterior region draws.
- :mod:`smaso.plots.factorial`: the factorial mixture (Eq 10): exact vs factorized vs mean-field
  inference against the orthogonality defect (Eq 11), posterior marginals and configurations.
- :mod:`smaso.plots.ladder`: the summarization ladder: its tables P(z_child | z_parent), sampled vs
  exact statistics against N, Bayes accuracy against leaf noise, posterior draws of the events.
- :mod:`smaso.plots.sweep`: the sample-complexity sweep: test error against the training-set size P, P* with its
  interval.
- :mod:`smaso.plots.depth`: the tent map, exact piece counts against the breakpoint bound, nodes
  needed for 2^k pieces, shallow vs deep students.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_SUBMODULES = ("alignment", "comparison", "depth", "factorial", "ladder", "sweep", "vq")

#: submodule -> the public names it defines
_DEFINED = {
    "_base": ("plt", "save_figure", "plot_arviz", "quiet_arviz"),
    "alignment": ("plot_alignment",),
    "comparison": ("plot_comparison", "plot_errors_against_n", "plot_noise_sweep"),
    "depth": ("nodes_needed", "plot_depth", "plot_nodes_needed", "plot_piece_counts", "plot_tent_powers"),
    "factorial": ("configuration_frequencies", "marginal_frequencies", "mean_field_configuration_probs",
                  "plot_configuration_posterior", "plot_gap_vs_defect", "plot_marginal_forest"),
    "ladder": ("event_frequencies", "plot_bayes_accuracy", "plot_event_posterior", "plot_ladder_tables",
               "plot_tv_convergence"),
    "sweep": ("plot_sweep",),
    "vq": ("plot_activation_family", "plot_region_draws", "plot_table1", "plot_vq_partition", "table1_curves",
           "vq_partition"),
}
#: public name -> the submodule that defines it
_EXPORTS = {name: module for module, names in _DEFINED.items() for name in names}

__all__ = [
    "configuration_frequencies",
    "event_frequencies",
    "marginal_frequencies",
    "mean_field_configuration_probs",
    "nodes_needed",
    "plot_activation_family",
    "plot_alignment",
    "plot_arviz",
    "plot_bayes_accuracy",
    "plot_comparison",
    "plot_configuration_posterior",
    "plot_depth",
    "plot_errors_against_n",
    "plot_event_posterior",
    "plot_gap_vs_defect",
    "plot_ladder_tables",
    "plot_marginal_forest",
    "plot_nodes_needed",
    "plot_noise_sweep",
    "plot_piece_counts",
    "plot_region_draws",
    "plot_sweep",
    "plot_table1",
    "plot_tent_powers",
    "plot_tv_convergence",
    "plot_vq_partition",
    "plt",
    "quiet_arviz",
    "save_figure",
    "table1_curves",
    "vq_partition",
]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily (matplotlib on first use)
    from ._base import plot_arviz, plt, quiet_arviz, save_figure
    from .alignment import plot_alignment
    from .comparison import plot_comparison, plot_errors_against_n, plot_noise_sweep
    from .depth import nodes_needed, plot_depth, plot_nodes_needed, plot_piece_counts, plot_tent_powers
    from .factorial import (
        configuration_frequencies,
        marginal_frequencies,
        mean_field_configuration_probs,
        plot_configuration_posterior,
        plot_gap_vs_defect,
        plot_marginal_forest,
    )
    from .ladder import (
        event_frequencies,
        plot_bayes_accuracy,
        plot_event_posterior,
        plot_ladder_tables,
        plot_tv_convergence,
    )
    from .sweep import plot_sweep
    from .vq import (
        plot_activation_family,
        plot_region_draws,
        plot_table1,
        plot_vq_partition,
        table1_curves,
        vq_partition,
    )


def __getattr__(name: str) -> Any:
    """Import a plotting function, ``plt`` or a submodule on first use (PEP 562), so that importing
    the package does not import matplotlib."""
    module = _EXPORTS.get(name)
    if module is None:
        if name in _SUBMODULES:
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBMODULES})
