"""Figures of depth (``docs/theory.md`` §2, seed ``001``): the tent map, linear pieces, depth separation.

- :func:`plot_tent_powers`: tau^k and the exact depth-k width-2 ReLU network that computes it.
- :func:`plot_piece_counts`: exact piece counts of networks against the breakpoint lemma's bound
  2^(L-1) (m_1 + 1) m_2 ... m_L.
- :func:`plot_nodes_needed`: the fewest hidden nodes the lemma allows for 2^k pieces at each depth.
- :func:`plot_depth`: the depth-separation experiment (:func:`smaso.depth.separation.depth_separation`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from matplotlib.ticker import NullFormatter, ScalarFormatter
from torch import nn

from smaso.depth.pieces import count_pieces, min_widths_for_pieces
from smaso.depth.separation import DT, LECTURE_BOUND, DepthRow, PieceRecord, _widths_label
from teachers.tent import TentNetwork, tent_power

from ._base import finish_figure, plt

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure, SubFigure

__all__ = ["nodes_needed", "plot_depth", "plot_nodes_needed", "plot_piece_counts", "plot_tent_powers"]

_KINDS = {  # marker, colour, legend label
    "random": ("o", "C0", "random init"),
    "trained": ("^", "C2", "after SGD"),
    "tent": ("*", "C3", "tent network"),
}


def _check_ks(ks: Iterable[int], name: str = "ks") -> list[int]:
    ks = list(ks)
    if not ks or any(isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1 for k in ks):
        raise ValueError(f"{name}: expected a non-empty list of integers >= 1, got {ks!r}")
    return [int(k) for k in ks]


def plot_tent_powers(
    ks: Sequence[int] = (1, 2, 3, 4),
    networks: Mapping[int, nn.Module] | None = None,
    *,
    n_grid: int = 2**12 + 1,
    path: str | os.PathLike | None = None,
) -> Figure:
    """tau^k on [0, 1] for each k, with a network's output drawn over it (docs/theory.md §2: tau^k has
    2^(k-1) teeth and 2^k linear pieces, and a depth-k width-2 ReLU network computes it exactly).

    Titles: the network's exact piece count (:func:`smaso.depth.pieces.count_pieces`) and largest deviation.

    :param ks: the compositions k >= 1, one panel each.
    :param networks: k -> a 1-D network (``(N, 1) -> (N, 1)``); default the exact
        :class:`teachers.tent.TentNetwork` of each k.
    :param n_grid: grid points on [0, 1] (>= 2); 2^j + 1 puts every breakpoint i / 2^k, k <= j, on it.
    """
    ks = _check_ks(ks)
    if networks is not None and not isinstance(networks, Mapping):
        raise ValueError(f"networks: expected a mapping k -> network, got {type(networks).__name__}")
    missing = [k for k in ks if networks is not None and k not in networks]
    if missing:
        raise ValueError(f"networks: no network for k = {missing}")
    if isinstance(n_grid, bool) or not isinstance(n_grid, int) or n_grid < 2:
        raise ValueError(f"n_grid: expected an integer >= 2, got {n_grid!r}")
    x = torch.linspace(0, 1, n_grid, dtype=DT)
    ncols = min(len(ks), 4)
    nrows = -(-len(ks) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 3.0 * nrows), squeeze=False)
    for ax, k in zip(axes.flat, ks, strict=False):
        net = networks[k] if networks is not None else TentNetwork(k)
        with torch.no_grad():
            h = net.to(DT)(x[:, None]).reshape(-1)
        target = tent_power(x, k)
        pc = count_pieces(net, 0.0, 1.0)
        ax.plot(x, target, color="k", lw=3.0, alpha=0.35, label=f"tau^{k}")
        ax.plot(x, h, color="C3", lw=1.2, ls="--", label=f"network ({pc.count} pieces)")
        bx = np.arange(2**k + 1) / 2**k
        ax.plot(bx, tent_power(bx, k), "o", color="k", ms=max(1.5, 5 - 0.6 * k))
        err = float((h - target).abs().max())
        ax.set_title(f"k = {k}: 2^{k} = {2**k} pieces\nnetwork {pc.count} pieces, max |diff| = {err:.1e}",
                     fontsize=9)
        ax.set_xlabel("x")
        ax.set_ylim(-0.08, 1.25)
        ax.legend(fontsize=7, loc="upper right", ncol=2, handlelength=1.5)
    for ax in list(axes.flat)[len(ks):]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("tau^k(x)")
    return finish_figure(fig, path)


def _check_records(records: Iterable[PieceRecord]) -> list[PieceRecord]:
    records = list(records)
    if not records:
        raise ValueError("records: nothing to plot")
    for r in records:
        if not isinstance(r, PieceRecord):
            raise ValueError(
                f"records: expected PieceRecord entries (smaso.depth.separation.piece_survey), got {type(r).__name__}"
            )
        if r.kind not in _KINDS:
            raise ValueError(f"records: unknown kind {r.kind!r} (expected one of {', '.join(_KINDS)})")
    return records


def plot_piece_counts(records: Sequence[PieceRecord], path: str | os.PathLike | None = None) -> Figure:
    """Exact piece counts against the breakpoint lemma (docs/theory.md §2: a ReLU network with hidden widths
    m_1..m_L has at most 2^(L-1) (m_1 + 1) m_2 ... m_L linear pieces).

    Left: per architecture, the bound (black bar) and every network's measured pieces (log scale).  Right:
    pieces against hidden nodes (one hidden layer of m nodes: at most m + 1; the tent network: 2^k with 2k).

    :param records: :class:`smaso.depth.separation.PieceRecord` entries, e.g. from
        :func:`smaso.depth.separation.piece_survey`.
    """
    records = _check_records(records)
    archs = sorted({r.widths for r in records}, key=lambda w: (len(w), sum(w), w))
    pos = {w: i for i, w in enumerate(archs)}
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(14, 5), gridspec_kw={"width_ratios": [1.6, 1]})
    bounds = {r.widths: r.bound for r in records}
    ax.scatter([pos[w] for w in archs], [bounds[w] for w in archs], marker="_", s=500, color="k", lw=2,
               label="bound 2^(L-1)(m_1+1)m_2...m_L", zorder=3)
    for kind, (marker, color, label) in _KINDS.items():
        mine = [r for r in records if r.kind == kind]
        if not mine:
            continue
        # spread repeated seeds sideways so that equal counts stay visible
        offsets = {"random": -0.15, "trained": 0.15, "tent": 0.0}[kind]
        xs = [pos[r.widths] + offsets for r in mine]
        size = 140 if kind == "tent" else 30
        ax.scatter(xs, [r.pieces for r in mine], marker=marker, color=color, s=size, alpha=0.75, label=label,
                   zorder=4)
        ax2.scatter([r.nodes for r in mine], [r.pieces for r in mine], marker=marker, color=color, s=size,
                    alpha=0.75, label=label, zorder=4)
    ax.set_yscale("log")
    ax.set_xticks(range(len(archs)), [_widths_label(w) for w in archs], rotation=60, fontsize=8)
    ax.set_xlabel("hidden widths (m^L: L layers of width m)")
    ax.set_ylabel("linear pieces on [0, 1] (log)")
    ax.set_title("Exact linear pieces vs the breakpoint bound", fontsize=10)
    ax.grid(alpha=0.3, which="major", axis="y")
    ax.legend(fontsize=8, loc="upper left")
    nodes = np.array(sorted({r.nodes for r in records}))
    ax2.plot(nodes, nodes + 1, ":", color="0.4", label="one hidden layer: at most m + 1")
    tents = sorted((r for r in records if r.kind == "tent"), key=lambda r: r.nodes)
    if tents:
        ax2.plot([r.nodes for r in tents], [r.pieces for r in tents], "-", color="C3", lw=0.8)
        last = tents[-1]
        ax2.annotate(f"tent: 2^{last.k} pieces with {last.nodes} nodes", (last.nodes, last.pieces), fontsize=8,
                     xytext=(-12, 0), textcoords="offset points", ha="right", va="center")
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.xaxis.set_major_formatter(ScalarFormatter())
    ax2.xaxis.set_minor_formatter(NullFormatter())
    ax2.set_xlabel("hidden nodes m_1 + ... + m_L (log)")
    ax2.set_ylabel("linear pieces on [0, 1] (log)")
    ax2.set_title("Pieces per node: depth multiplies, width adds", fontsize=10)
    ax2.grid(alpha=0.3, which="major")
    ax2.legend(fontsize=8, loc="lower right")
    return finish_figure(fig, path)


def nodes_needed(ks: Sequence[int], depths: Sequence[int]) -> dict[int, list[int]]:
    """Depth L -> for each k the fewest hidden nodes whose breakpoint bound reaches 2^k
    (:func:`smaso.depth.pieces.min_widths_for_pieces`); the numbers :func:`plot_nodes_needed` draws."""
    ks, depths = _check_ks(ks), _check_ks(depths, "depths")
    return {L: [sum(min_widths_for_pieces(2**k, L)) for k in ks] for L in depths}


def plot_nodes_needed(
    ks: Sequence[int] = tuple(range(1, 13)),
    depths: Sequence[int] = (1, 2, 3, 4),
    path: str | os.PathLike | None = None,
) -> Figure:
    """The depth-separation count (docs/theory.md §2): fewest hidden nodes a depth-L ReLU network needs
    to have the 2^k linear pieces of tau^k, by the breakpoint lemma, against the 2k nodes of the
    exact depth-k tent network. Depth 1 needs 2^k - 1 nodes; depth L about L 2^(k/L).

    :param ks: the targets tau^k (x axis), integers >= 1.
    :param depths: the depths L drawn, integers >= 1.
    """
    ks = _check_ks(ks)
    needed = nodes_needed(ks, depths)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, (L, ys) in enumerate(needed.items()):
        ax.plot(ks, ys, "o-", color=f"C{i}", ms=4, label=f"depth L = {L} (lemma's minimum)")
    ax.plot(ks, [2 * k for k in ks], "*-", color="k", ms=9, label="depth k, width 2: tent network (exact)")
    ax.set_yscale("log")
    ax.set_xlabel("k (target tau^k, 2^k linear pieces)")
    ax.set_ylabel("hidden nodes (log)")
    ax.set_title("Nodes needed for 2^k pieces: exponential at fixed depth, linear with depth", fontsize=10)
    ax.set_xticks(ks)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return finish_figure(fig, path)


def plot_depth(rows: Sequence[DepthRow], path: str | os.PathLike | None = None) -> Figure:
    """The depth-separation experiment (docs/theory.md §2, seed 001: every depth-L ReLU network with at most
    2^L nodes has integral_0^1 |tau^(L^2) - h| >= 1/8).

    Per L (one row of panels, its legend below them): tau^k with the best theorem student, the warm-start and the
    best random-start deep student; and every row's L1 error (bars by role) with its bracket (certified lower
    bound, tick, to the explicit network of its widths, cross) and, shaded, the bracket on the theorem class's best
    error.

    :param rows: :class:`smaso.depth.separation.DepthRow` entries from :func:`smaso.depth.separation.depth_separation`.
    :param path: save the figure here (written atomically by suffix); None: only return it.
    :returns: the matplotlib ``Figure``.
    """
    rows = list(rows)
    if any(not isinstance(r, DepthRow) for r in rows):
        raise ValueError("rows: expected DepthRow entries (smaso.depth.separation.depth_separation)")
    Ls = sorted({r.L for r in rows})
    if not Ls:
        raise ValueError("rows: nothing to plot")
    colors = {"theorem": "C0", "control": "C2", "deep": "C3"}
    row_height = 1.0 + max(3.2, 0.32 * max(sum(r.L == L for r in rows) for L in Ls))  # + 1 inch for the legend
    fig = plt.figure(figsize=(13, 0.3 + row_height * len(Ls)), layout="constrained")
    for sub, L in zip(fig.subfigures(len(Ls), 1, squeeze=False).ravel(), Ls, strict=True):
        ax, ax_bar = sub.subplots(1, 2, gridspec_kw={"width_ratios": [2, 1.2]})
        mine = [r for r in rows if r.L == L]
        k = max(r.k for r in mine)
        right = min(1.0, 16 / 2**k)  # at most 8 teeth, so that the curves can be told apart
        x = torch.linspace(0, right, 4001, dtype=DT)
        small = [r for r in mine if r.role == "theorem" and r.net is not None]
        warm = [r for r in mine if r.role == "deep" and "warm" in r.student and r.net is not None]
        cold = [r for r in mine if r.role == "deep" and "random" in r.student and r.net is not None]
        picks = ([(min(small, key=lambda r: r.l1), "C0")] if small else []) + \
            ([(warm[0], "C3")] if warm else []) + ([(min(cold, key=lambda r: r.l1), "C1")] if cold else [])
        for r, color in picks:
            with torch.no_grad():
                y = r.net.to(DT)(x[:, None]).reshape(-1)  # type: ignore[union-attr]  # picks have a net (above)
            ax.plot(x, y, color=color, lw=1.6,
                    label=f"{r.student} {_widths_label(r.widths)}: L1 {r.l1:.3f}, {r.pieces} pieces")
        ax.plot(x, tent_power(x, k), "k--", lw=0.8, label=f"target tau^{k} ({2**k} pieces)")
        window = "" if right == 1.0 else f" (x in [0, {right:.3g}]; L1 over [0, 1])"
        ax.set_title(f"L = {L}: depth-{L} students with <= {2**L} nodes vs tau^{k}{window}", fontsize=10)
        ax.set_xlabel("x")
        ax.set_ylabel("tau^k(x), h(x)")
        ax.set_ylim(-0.05, 1.08)
        names = [f"{'' if r.student.startswith(r.role) else r.role + ': '}{r.student} {_widths_label(r.widths)} "
                 f"on tau^{r.k}" for r in mine]
        pos = range(len(mine))
        ax_bar.barh(pos, [r.l1 for r in mine], color=[colors.get(r.role, "0.5") for r in mine])
        ax_bar.plot([0 if math.isnan(r.lower) else r.lower for r in mine], pos, "k|", ms=12, mew=2,
                    label="certified lower bound (its widths)")
        own = [(i, r) for i, r in zip(pos, mine, strict=True) if not math.isnan(r.upper) and not math.isnan(r.lower)]
        if own:
            ax_bar.hlines([i for i, _ in own], [r.lower for _, r in own], [r.upper for _, r in own], color="k", lw=0.8)
            ax_bar.plot([r.upper for _, r in own], [i for i, _ in own], "kx", ms=5,
                        label="explicit network of its widths (its bracket's upper end)")
        on_target = [r for r in mine if r.k == k and not math.isnan(r.class_lower)]
        if on_target:
            lo, hi = on_target[0].class_lower, on_target[0].class_upper
            ax_bar.axvspan(lo, hi, color="0.85", zorder=0, label=f"class bracket on tau^{k}: [{lo:.3f}, {hi:.3f}]")
        ax_bar.axvline(LECTURE_BOUND, color="k", ls="--", lw=1, label="lecture bound 1/8")
        ax_bar.axvline(0.25, color="0.5", ls=":", lw=1, label="constant 1/2: 1/4")
        ax_bar.set_yticks(list(pos), names, fontsize=7)
        ax_bar.invert_yaxis()
        ax_bar.set_xlim(0, 0.27)
        ax_bar.set_xlabel("integral_0^1 |tau^k - h|")
        _row_legend(sub, ax, ax_bar)
    return finish_figure(fig, path, tight=False)  # constrained layout


def _row_legend(sub: SubFigure, *axes: Axes) -> None:
    """One legend for a row of panels, below them, outside the axes (constrained layout makes room for it)."""
    handles, labels = [], []
    for ax in axes:
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    sub.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=7, frameon=False)
