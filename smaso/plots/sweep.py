"""The sample-complexity sweep's figure: test error against the training-set size P, and P* with its interval."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

import numpy as np

from smaso.plots._base import finish_figure, plt

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from smaso.sweep import SweepResult

__all__ = ["plot_sweep"]


def plot_sweep(result: SweepResult, path: str | os.PathLike | None = None, *, threshold: float | None = None,
               title: str | None = None) -> Figure:
    """Test error against P on a log axis: one thin line per seed, the median over seeds thick, the threshold
    dashed, and P* (:meth:`~smaso.sweep.SweepResult.p_star`) as a vertical line with its interval shaded; when P*
    is undefined (a censored median) the figure says why instead of drawing a line.

    :param result: a :class:`~smaso.sweep.SweepResult`.
    :param threshold: the error defining P* (default :data:`~smaso.sweep.DEFAULT_THRESHOLD`).
    :returns: the matplotlib ``Figure``.
    """
    from smaso.sweep import DEFAULT_THRESHOLD, SweepResult

    if not isinstance(result, SweepResult):
        raise TypeError(f"result: expected a SweepResult, got {type(result).__name__}")
    if not result.runs:
        raise ValueError("result: the sweep has no runs to draw")
    threshold = DEFAULT_THRESHOLD if threshold is None else threshold
    star = result.p_star(threshold)
    P, errors = np.asarray(result.sizes, dtype=float), result.errors()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for seed, row in zip(result.seeds, errors, strict=True):
        ok = np.isfinite(row)
        ax.plot(P[ok], row[ok], "-o", ms=2.5, lw=0.8, alpha=0.45, color="C0",
                label="one seed" if seed == result.seeds[0] else None)
    median = result.median_curve()
    ok = np.isfinite(median)
    ax.plot(P[ok], median[ok], "-o", ms=4, lw=2.2, color="C0", label=f"median over {len(result.seeds)} seeds")
    ax.axhline(threshold, ls="--", color="0.4", lw=1, label=f"threshold {threshold:g}")
    if math.isfinite(star.value):
        ax.axvline(star.value, color="C3", lw=1.5, label=f"P* = {star.value:.3g}")
        if math.isfinite(star.low) and math.isfinite(star.high):
            ax.axvspan(star.low, star.high, color="C3", alpha=0.12,
                       label=f"{100 * star.coverage:.1f}% interval [{star.low:.3g}, {star.high:.3g}]")
        else:
            ax.text(0.02, 0.03, f"interval: {star.interval_reason}", transform=ax.transAxes, fontsize=7, color="C3")
    else:
        ax.text(0.02, 0.03, f"P* undefined: {star.reason}", transform=ax.transAxes, fontsize=7, color="C3",
                wrap=True)
    ax.set_xscale("log")
    ax.set_xticks(P, [f"{int(p)}" for p in P], rotation=45 if len(P) > 6 else 0, fontsize=8)  # the grid itself
    ax.minorticks_off()
    ax.set(xlabel="training-set size P", ylabel="test error", ylim=(0, max(1.0, float(np.nanmax(errors)) * 1.05)
                                                                     if np.isfinite(errors).any() else (0, 1)))
    ax.legend(fontsize=7)
    return finish_figure(fig, path, title or f"{result.student} student: test error against P")
