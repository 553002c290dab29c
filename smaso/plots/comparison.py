"""Figures of the student-versus-reformulation comparison (matplotlib, headless-safe).

:func:`plot_comparison` draws, for a :class:`~smaso.compare.ComparisonResult`, the relative
error of every level over training for F, G~ and Delta W (solid: full recursion, dashed: one
step from measured neighbours) and, at the last checkpoint, predicted against measured
entries of F and G~ per level (on the diagonal when the reformulation is exact).  The same
function serves scripts, the CLI and notebooks.
"""

from __future__ import annotations

import os

from ._base import plt, save_figure

__all__ = ["plot_comparison"]

_QUANTITIES = (("F", "activations Fbar"), ("G", "gradients G~"), ("dW", "weight updates ΔW"))


def plot_comparison(result, path: str | os.PathLike | None = None, *, title: str | None = None):
    """Error curves over training and predicted-vs-measured scatter plots.

    :param result: a :class:`~smaso.compare.ComparisonResult`.
    :param path: save the figure here (PNG/PDF/SVG by suffix, written atomically); None: only return it.
    :returns: the matplotlib ``Figure``.
    """
    hist = result.history
    if not hist:
        raise ValueError("result: the comparison has no checkpoints")
    levels = [row["level"] for row in hist[0]["levels"]]
    steps = [h["step"] for h in hist]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (key, label) in zip(axes[0], _QUANTITIES, strict=True):
        for i, l in enumerate(levels):
            for kind, style in (("propagated", "-"), ("local", "--")):
                vals = [max(h["levels"][i][f"{key}_{kind}"], 1e-17) for h in hist]
                ax.plot(steps, vals, style, color=colors[i % len(colors)],
                        label=f"level {l}" if kind == "propagated" else None)
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel("relative Frobenius error")
        ax.set_title(f"{label}: reformulation vs measured")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(title="solid: recursion, dashed: one step", fontsize=8)
    stats, pred = result.final_stats, result.final_prediction
    for ax, (name, meas, prd) in zip(axes[1][:2], (("Fbar", stats.Fbar, pred.Fbar),
                                                    ("G~", stats.G_tilde, pred.G_tilde)), strict=True):
        lo, hi = float("inf"), float("-inf")
        for i, l in enumerate(levels):
            seen = stats.counts[l] > 0
            m, p = meas[l][seen].flatten(), prd[l][seen].flatten()
            ax.scatter(m, p, s=6, alpha=0.6, color=colors[i % len(colors)], label=f"level {l}")
            lo, hi = min(lo, m.min().item(), p.min().item()), max(hi, m.max().item(), p.max().item())
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.set_xlabel(f"measured {name}(z)")
        ax.set_ylabel(f"predicted {name}(z)")
        ax.set_title(f"{name} at step {hist[-1]['step']}: predicted vs measured")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    ax = axes[1][2]
    for key, label in (("decorrelation_fwd", "decorrelation (fwd)"), ("decorrelation_bwd", "decorrelation (bwd)"),
                       ("focus", "focus"), ("broadness", "broadness")):
        xs = [row["level"] for row in hist[-1]["levels"] if key in row]
        ys = [max(row[key], 1e-17) for row in hist[-1]["levels"] if key in row]
        if xs:
            ax.plot(xs, ys, "o-", label=label)
    ax.set_yscale("log")
    ax.set_xlabel("level (0 = label)")
    ax.set_ylabel("relative size of the error term")
    ax.set_title("Thm 2's conditions, measured (0 = holds)")
    ax.set_xticks(levels)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig
