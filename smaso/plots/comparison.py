"""Figures of the student-versus-reformulation comparison (Thm 2 / Thm 4, Eq 9): over training, against the
leaves' noise (Thm 3 at sigma = 0) and against N."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ._base import finish_figure, plt

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from smaso.student.compare import ComparisonResult

__all__ = ["plot_comparison", "plot_errors_against_n", "plot_noise_sweep"]

_QUANTITIES = (("F", "activations Fbar"), ("G", "gradients G~"), ("dW", "weight updates ΔW"))


def plot_comparison(result: ComparisonResult, path: str | os.PathLike | None = None, *,
                    title: str | None = None) -> Figure:
    """Error curves over training and predicted-vs-measured scatter plots.

    Top row: the relative error of every level over training for F, G~ and Delta W (solid: full recursion,
    dashed: one step from measured neighbours); bottom row: at the last checkpoint, predicted against measured
    entries of F and G~ per level (on the diagonal when the reformulation is exact), and Thm 2's terms.

    :param result: a :class:`~smaso.student.compare.ComparisonResult`.
    :param path: save the figure here (PNG/PDF/SVG by suffix, written atomically); None: only return it.
    :returns: the matplotlib ``Figure``.
    """
    hist = result.history
    if not hist:
        raise ValueError("result: the comparison has no checkpoints")
    _, stats, pred = result._trained()  # (the last checkpoint's, scattered in the bottom row)
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
        ax.set(yscale="log", xlabel="training step", ylabel="relative Frobenius error",
               title=f"{label}: reformulation vs measured")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(title="solid: recursion, dashed: one step", fontsize=8)
    for ax, (name, meas, prd) in zip(axes[1][:2], (("Fbar", stats.Fbar, pred.Fbar),
                                                    ("G~", stats.G_tilde, pred.G_tilde)), strict=True):
        lo, hi = float("inf"), float("-inf")
        for i, l in enumerate(levels):
            seen = stats.counts[l] > 0
            m, p = meas[l][seen].flatten(), prd[l][seen].flatten()
            ax.scatter(m, p, s=6, alpha=0.6, color=colors[i % len(colors)], label=f"level {l}")
            lo, hi = min(lo, m.min().item(), p.min().item()), max(hi, m.max().item(), p.max().item())
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.set(xlabel=f"measured {name}(z)", ylabel=f"predicted {name}(z)",
               title=f"{name} at step {hist[-1]['step']}: predicted vs measured")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    ax = axes[1][2]
    for key, label in (("decorrelation_fwd", "decorrelation (fwd)"), ("decorrelation_bwd", "decorrelation (bwd)"),
                       ("focus", "focus"), ("broadness", "broadness")):
        xs = [row["level"] for row in hist[-1]["levels"] if key in row]
        ys = [max(row[key], 1e-17) for row in hist[-1]["levels"] if key in row]
        if xs:
            ax.plot(xs, ys, "o-", label=label)
    ax.set(yscale="log", xlabel="level (0 = label)", ylabel="relative size of the error term",
           title="Thm 2's conditions, measured (0 = holds)", xticks=levels)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return finish_figure(fig, path, title)


_FLOOR = 1e-17  # log axes: exact zeros (a condition that holds bit for bit) are drawn at the floor
_KINDS = {"propagated": "recursion", "local": "one step"}
_TERMS = (("decorrelation_fwd", "decorrelation, forward (gate vs raw activation)"),
          ("decorrelation_bwd", "decorrelation, backward (gate vs raw gradient)"),
          ("focus", "focus (solid) and broadness (dotted)"))
_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D")


def _check_sweep(rows: object, name: str) -> list[dict]:
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence) or not rows:
        raise ValueError(f"{name}: expected a non-empty list of noise_sweep rows, got {rows!r:.80}")
    for r in rows:
        if not isinstance(r, Mapping) or "sigma" not in r or "levels" not in r:
            raise ValueError(f"{name}: every row needs 'sigma' and 'levels' (a noise_sweep row), got {r!r:.80}")
        sig = r["sigma"]
        if isinstance(sig, bool) or not isinstance(sig, (int, float)) or not math.isfinite(sig) or sig < 0:
            raise ValueError(f"{name}: sigma must be a finite number >= 0, got {sig!r}")
    return sorted(rows, key=lambda r: r["sigma"])


def plot_noise_sweep(rows: Sequence[dict] | Mapping[str, Sequence[dict]], path: str | os.PathLike | None = None, *,
                     kinds: Sequence[str] = ("propagated", "local"), title: str | None = None) -> Figure:
    """Errors of the reformulation and Thm 2's measured terms against the leaves' noise sigma.

    Illustrates Thm 3 (sigma = 0, one-hot leaves on the fully informative ladder: every error is
    round-off) and what breaks as the delta condition is relaxed (Thm 2's conditions, measured by
    :func:`~smaso.student.compare.diagnose`).  Top row: relative Frobenius errors of Fbar, G~ and Delta W
    (Thm 4 / Eq 9) per level; bottom row: the sizes of Thm 2's error terms per level.  Colours are
    levels; line styles are the ``kinds`` (full recursion / one step from measured neighbours)
    and, when ``rows`` is a mapping, its series (e.g. without / with Batch Norm, Eq 12).  The x
    axis is linear between 0 and the smallest sigma > 0 and logarithmic above.

    :param rows: the list returned by :func:`~smaso.student.compare.noise_sweep` (one row per sigma, each
        with ``sigma`` and ``levels``, a list of per-level dicts), or a mapping label -> such list.
    :param path: save the figure here (PNG/PDF/SVG by suffix, written atomically); None: only return it.
    :param kinds: which errors to draw, a non-empty subset of ``("propagated", "local")``.
    :returns: the matplotlib ``Figure``.
    """
    if isinstance(rows, Mapping):
        if not rows:
            raise ValueError("rows: the mapping of series is empty")
        series = {str(k): _check_sweep(v, f"rows[{k!r}]") for k, v in rows.items()}
    else:
        series = {"": _check_sweep(rows, "rows")}
    if isinstance(kinds, str) or not kinds or any(k not in _KINDS for k in kinds) or len(set(kinds)) != len(kinds):
        raise ValueError(f"kinds: expected a non-empty subset of {tuple(_KINDS)}, got {kinds!r}")
    combos = [(label, kind) for label in series for kind in kinds]
    if len(combos) > len(_STYLES):
        raise ValueError(f"rows/kinds: at most {len(_STYLES)} (series, kind) line styles, got {len(combos)}")
    levels = [row["level"] for row in next(iter(series.values()))[0]["levels"]]
    if any([row["level"] for row in r["levels"]] != levels for v in series.values() for r in v):
        raise ValueError(f"rows: the {'series' if len(series) > 1 else 'rows'} do not all report the same levels")
    positive = [r["sigma"] for v in series.values() for r in v if r["sigma"] > 0]
    all_sigmas = sorted({r["sigma"] for v in series.values() for r in v})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5), sharex=True)

    def draw(ax: Axes, v: Sequence[dict], key: str, style: str, marker: str) -> set:
        """One curve per level; levels where ``key`` is exactly 0 at every sigma (e.g. the gate
        terms of a level without a gate) are left out and returned, to be named on the panel."""
        zero = set()
        for i, l in enumerate(levels):
            pts = [(r["sigma"], r["levels"][i][key]) for r in v if key in r["levels"][i]]
            if not pts:
                continue
            if all(y == 0 for _, y in pts):
                zero.add(l)
                continue
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, [max(y, _FLOOR) for y in ys], style, marker=marker, ms=4, color=colors[i % len(colors)])
        return zero

    def note_zero(ax: Axes, zero: set) -> None:
        if zero:
            ax.text(0.98, 0.03, f"exactly 0 at level {', '.join(map(str, sorted(zero)))} (not drawn)",
                    transform=ax.transAxes, ha="right", va="bottom", fontsize=8, color="0.3")

    for ax, (key, label) in zip(axes[0], _QUANTITIES, strict=True):
        zero: set = set()
        for j, (name, kind) in enumerate(combos):
            zero |= draw(ax, series[name], f"{key}_{kind}", _STYLES[j], _MARKERS[j])
        note_zero(ax, zero)
        ax.set(title=f"{label}: reformulation vs measured", ylabel="relative Frobenius error")
    for ax, (key, label) in zip(axes[1], _TERMS, strict=True):
        zero = set()
        for j, name in enumerate(series):
            zero |= draw(ax, series[name], key, _STYLES[j], _MARKERS[j])
            if key == "focus":
                zero |= draw(ax, series[name], "broadness", ":", "x")
        note_zero(ax, zero)
        ax.set_title(label, fontsize=10)
        ax.set_ylabel("relative size of the error term")
    for ax in axes.flat:
        ax.set_yscale("log")
        if positive:
            lin = min(positive)
            ax.set_xscale("symlog", linthresh=lin, linscale=0.5)
            ax.set_xlim(-0.4 * lin if min(all_sigmas) == 0 else 0.8 * lin, 1.15 * max(all_sigmas))
        ax.set_xticks(all_sigmas, [("0\n(one-hot)" if s == 0 else f"{s:g}") for s in all_sigmas], fontsize=8)
        ax.grid(alpha=0.3, which="major")
    for ax in axes[1]:
        ax.set_xlabel("leaf noise sigma")
    handles = [plt.Line2D([], [], color=colors[i % len(colors)], lw=3, label=f"level {l}")
               for i, l in enumerate(levels)]
    handles += [plt.Line2D([], [], color="k", ls=_STYLES[j], marker=_MARKERS[j], ms=4,
                           label=" / ".join(p for p in (name, _KINDS[kind]) if p))
                for j, (name, kind) in enumerate(combos)]
    if len(series) > 1:
        handles += [plt.Line2D([], [], color="0.4", ls=":", marker="x", ms=4, label="broadness (bottom right)")]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=9, frameon=False,
               bbox_to_anchor=(0.5, 0.955 if title else 0.995))
    return finish_figure(fig, path, title, tight=(0, 0, 1, 0.93 if title else 0.96))


#: What :func:`plot_errors_against_n` draws by default: the one-step errors and Thm 2's conditions.
N_KEYS = ("F_local", "G_local", "dW_local", "decorrelation_fwd", "focus", "broadness")
#: Each report key's name in words, the panels' titles (the README's and the demo's words; a key not here is
#: shown as it is).
N_LABELS = {"F_local": "F, one-step error", "G_local": "G~, one-step error", "dW_local": "dW, one-step error",
            "F_propagated": "F, error of the full recursion", "G_propagated": "G~, error of the full recursion",
            "dW_propagated": "dW, error of the full recursion",
            "decorrelation_fwd": "decorrelation (forward: gate vs activation)",
            "decorrelation_bwd": "decorrelation (backward: gate vs gradient)",
            "decorrelation_dW": "decorrelation (weight update)", "focus": "focus of knowledge (teacher)",
            "broadness": "broadness of knowledge (teacher)"}


def plot_errors_against_n(rows: Sequence[dict], path: str | os.PathLike | None = None, *,
                          keys: Sequence[str] = N_KEYS, title: str | None = None) -> Figure:
    """Errors and Thm 2's terms against N with their noise floors, on log-log axes.

    :param rows: the list returned by :func:`~smaso.student.compare.errors_against_n` (one report
        per N, each with ``n`` and ``levels`` holding ``key`` and ``key_floor``).
    :param keys: the numbers to draw, one panel each: solid lines the measured value per level,
        dashed its noise floor; a grey guide falls like 1/sqrt(N).  A condition that holds falls
        with its floor; one that fails levels off above it.
    :returns: the matplotlib ``Figure``.
    """
    if not rows or any("n" not in r or "levels" not in r for r in rows):
        raise ValueError("rows: expected the non-empty list of errors_against_n (dicts with 'n' and 'levels')")
    if isinstance(keys, str) or not keys:
        raise ValueError(f"keys: expected a non-empty sequence of report keys, got {keys!r}")
    ns = [r["n"] for r in rows]
    levels = [row["level"] for row in rows[0]["levels"]]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    cols = min(3, len(keys))
    fig, axes = plt.subplots(-(-len(keys) // cols), cols, figsize=(5 * cols, 4 * -(-len(keys) // cols)),
                             squeeze=False)
    for ax, key in zip(axes.flat, keys, strict=False):
        drawn = False
        for i, l in enumerate(levels):
            pts = [(r["n"], r["levels"][i][key], r["levels"][i].get(f"{key}_floor")) for r in rows
                   if key in r["levels"][i]]
            if not pts or all(v == 0 for _, v, _ in pts):
                continue
            c = colors[i % len(colors)]
            ax.plot([p[0] for p in pts], [max(p[1], _FLOOR) for p in pts], "-o", ms=3, color=c, label=f"level {l}")
            if all(p[2] is not None for p in pts):
                ax.plot([p[0] for p in pts], [max(p[2], _FLOOR) for p in pts], "--", color=c)
            drawn = True
        if not drawn:
            ax.text(0.5, 0.5, "exactly 0 at every level", transform=ax.transAxes, ha="center", color="0.3")
        else:
            top = max(row.get(key, 0.0) for row in rows[0]["levels"])
            ax.plot(ns, [max(top, _FLOOR) * math.sqrt(ns[0] / n) for n in ns], ":", color="0.5", label="∝ 1/√N")
            ax.set_yscale("log")
            ax.legend(fontsize=7)
        ax.set_xscale("log", base=2)
        ax.set(title=f"{N_LABELS.get(key, key)}\n(solid: measured, dashed: its noise floor)", xlabel="examples N",
               ylabel="relative size (0: exact / condition holds)")
    for ax in list(axes.flat)[len(keys):]:
        ax.set_visible(False)
    return finish_figure(fig, path, title or "errors and their noise floors against N")
