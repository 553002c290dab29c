"""Event alignment over training (:mod:`smaso.student.alignment`): do the hidden nodes of region alpha become
selective for its latent event z_alpha (the framework paper's §3-§4 question)?  One row of panels per student
level, against training step."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ._base import finish_figure, plt

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from smaso.student.compare import ComparisonResult

__all__ = ["plot_alignment"]

#: Panels, left to right: (title, y label, [(row key, line label, style)], the control run's key).
PANELS = (
    ("eta² = Var E[f | z] / Var f", "median over nodes",
     (("eta2", "own event z_α", "-"), ("eta2_control", "neighbours' events (control)", "--"),
      ("floor_eta2", "null floor", ":")), "eta2"),
    ("I(1[f on]; z) (bits)", "median over nodes",
     (("mi", "own event z_α", "-"), ("mi_control", "neighbours' events (control)", "--"),
      ("floor_mi", "null floor", ":")), "mi"),
    ("best node's corr(f, 1[z = k])", "median over events",
     (("spec", "best-matching node", "-"), ("floor_spec", "null floor", ":")), "spec"),
    ("held-out linear probe for z_α", "accuracy, mean over regions",
     (("probe", "probe accuracy", "-"), ("probe_chance", "chance (majority event)", ":")), "probe"),
)
_KEYS = ("level", *(k for _, _, lines, _ in PANELS for k, _, _ in lines))
CONTROL_LABEL = "control run"


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_rows(rows: object, name: str) -> list[Mapping]:
    """One checkpoint's (or the control's) alignment rows: a non-empty list of dicts with every key, numbers."""
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence) or not rows:
        raise ValueError(f"{name}: expected a non-empty list of alignment rows (one dict per level, as "
                         f"alignment_report returns), got {rows!r:.80}")
    for r in rows:
        if not isinstance(r, Mapping) or any(k not in r for k in _KEYS):
            missing = [k for k in _KEYS if not isinstance(r, Mapping) or k not in r]
            raise ValueError(f"{name}: every row needs {', '.join(_KEYS)}; missing {', '.join(missing)}")
        bad = [k for k in _KEYS if not _is_number(r[k])]
        if bad:
            raise ValueError(f"{name}: {', '.join(bad)} must be numbers, got {[r[k] for k in bad]!r:.80}")
    return list(rows)


def _checkpoints(result_or_history: ComparisonResult | Sequence[Mapping]) -> list[Mapping]:
    hist = getattr(result_or_history, "history", result_or_history)
    if isinstance(hist, (str, bytes, Mapping)) or not isinstance(hist, Sequence):
        raise TypeError("result_or_history: expected a ComparisonResult or its history (a list of checkpoint "
                        f"dicts), got {type(result_or_history).__name__}")
    rows = [h for h in hist if isinstance(h, Mapping) and "alignment" in h]
    if not rows:
        raise ValueError("result_or_history: no checkpoint measured the alignment (EvaluationConfig(alignment=False) "
                         "turned it off)")
    for h in rows:
        if not _is_number(h.get("step")):
            raise ValueError(f"result_or_history: every checkpoint needs a numeric 'step', got {h.get('step')!r}")
        _check_rows(h["alignment"], f"result_or_history (step {h['step']})")
    levels = [r["level"] for r in rows[0]["alignment"]]
    if any([r["level"] for r in h["alignment"]] != levels for h in rows):
        raise ValueError("result_or_history: the checkpoints do not all report the same levels")
    return rows


def plot_alignment(result_or_history: ComparisonResult | Sequence[Mapping], path: str | os.PathLike | None = None, *,
                   title: str | None = None,
                   control: Sequence[Mapping] | None = None) -> Figure:
    """The event alignment of every student level against training step.

    One row per level (level 0: the output nodes against the label), four panels: the median eta^2 of the
    nodes with their own region's event (solid), with the neighbouring regions' events (dashed: the control)
    and its null floor (dotted, :meth:`~smaso.student.alignment.Alignment.floors`); the on-state mutual
    information likewise; the best-matching node's correlation with each event and its floor; the held-out
    linear probe's accuracy and the majority-event rate.  A node group that learns its event rises above the
    control and the floor.  Lines whose values are all NaN (a level of one region has no neighbours) are not
    drawn; a measured line that is 0 at every checkpoint (the MI of the linear outputs, which have no gate) is
    drawn and said so on the panel.

    :param result_or_history: a :class:`~smaso.student.compare.ComparisonResult` of
        ``compare_student`` (the alignment is on by default), or its ``history``: checkpoints with ``step`` and
        ``alignment`` (one :func:`~smaso.student.alignment.alignment_report` row per level).
    :param path: save the figure here (PNG/PDF/SVG by suffix, written atomically); None: only return it.
    :param control: the alignment rows of a control run (e.g. the student trained on shuffled labels), one
        per level with the history's levels: drawn as grey horizontal lines labelled ``"control run"``.
    :returns: the matplotlib ``Figure`` (``len(levels) x 4`` axes).
    """
    rows = _checkpoints(result_or_history)
    levels = [r["level"] for r in rows[0]["alignment"]]
    if control is not None:
        if isinstance(control, (str, bytes, Mapping)) or not isinstance(control, Sequence):
            raise TypeError(f"control: expected a list of alignment rows (one dict per level), got "
                            f"{type(control).__name__}")
        control = _check_rows(control, "control")
        if [r["level"] for r in control] != levels:
            raise ValueError(f"control: expected rows of levels {levels} (the history's), got "
                             f"{[r['level'] for r in control]}")
    steps = [h["step"] for h in rows]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(len(levels), len(PANELS), figsize=(4.2 * len(PANELS), 2.9 * len(levels)),
                             squeeze=False, sharex=True)
    for i, level in enumerate(levels):
        color = colors[i % len(colors)]
        for ax, (name, ylabel, lines, ctrl_key) in zip(axes[i], PANELS, strict=True):
            for key, label, style in lines:
                ys = [float(h["alignment"][i][key]) for h in rows]
                if all(math.isnan(y) for y in ys):
                    continue
                if style == "-" and all(y == 0 for y in ys):  # e.g. the MI of nodes without a gate (always on)
                    ax.text(0.5, 0.5, "exactly 0 at every checkpoint", transform=ax.transAxes, ha="center",
                            fontsize=8, color="0.3")
                ax.plot(steps, ys, style, marker="o" if style == "-" else None, ms=3,
                        color=color if style == "-" else "0.25", label=label)
            if control is not None and not math.isnan(control[i][ctrl_key]):
                ax.axhline(float(control[i][ctrl_key]), color="0.55", ls="-.", lw=1.2, label=CONTROL_LABEL)
            ax.set_ylim(bottom=min(0.0, ax.get_ylim()[0]))  # from 0: the floors sit near it
            ax.grid(alpha=0.3)
            ax.set_title(f"level {level}{' (outputs)' if level == 0 else ''}: {name}", fontsize=9)
            ax.set_ylabel(ylabel, fontsize=8)
    for col in axes.T:  # one legend per column, on the first level that draws all of its lines
        max(col, key=lambda a: len(a.get_lines())).legend(fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("training step")
    return finish_figure(fig, path, title)
