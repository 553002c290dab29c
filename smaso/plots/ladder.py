"""Figures of the summarization ladder (framework paper §3.1, ``docs/theory.md`` §1): its tables P_ab of Eq 9,
sampled vs exact statistics against N, the Bayes-optimal accuracy against leaf noise, posterior draws of the
events.  Every function returns a matplotlib ``Figure`` and writes it atomically when given ``path``."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from ._base import finish_figure, plt

if TYPE_CHECKING:
    import arviz as az
    from matplotlib.artist import Artist
    from matplotlib.figure import Figure

    from teachers.ladder import Ladder

__all__ = ["event_frequencies", "plot_bayes_accuracy", "plot_event_posterior", "plot_ladder_tables",
           "plot_tv_convergence"]


def plot_ladder_tables(ladder: Ladder, path: str | os.PathLike | None = None, *, max_regions: int = 4,
                       annotate: bool | None = None, title: str | None = None) -> Figure:
    """Heatmaps of P(z_child | z_parent) (the m_alpha x m_beta matrices P_ab of Thm 4 / Eq 9).

    One row per level l = 1..depth, one column per child region of that level (the first
    ``max_regions``), each an ``(m_{l-1}, m_l)`` heatmap with parent events as rows.  The
    matrices are :func:`teachers.statistics.exact_statistics`' ``P_down``: the ladder's tables for
    a top-down ladder, the lookup tables pushed through the leaf priors for a bottom-up one.
    Rows of parent events of probability 0 are zero.

    :param ladder: a :class:`teachers.Ladder`.
    :param max_regions: child regions shown per level (>= 1).
    :param annotate: write the probabilities in the cells (default: when m <= 6 on both axes).
    """
    from smaso._ladder_parts import at_level
    from teachers.ladder import Ladder
    from teachers.statistics import exact_statistics

    if not isinstance(ladder, Ladder):
        raise ValueError(f"ladder: expected a teachers.Ladder, got {type(ladder).__name__}")
    if isinstance(max_regions, bool) or not isinstance(max_regions, (int, np.integer)) or max_regions < 1:
        raise ValueError(f"max_regions: expected a positive integer, got {max_regions!r}")
    P = exact_statistics(ladder).P_down
    d = ladder.depth
    cols = min(int(max_regions), max(ladder.num_regions[1:]))
    fig, axes = plt.subplots(d, cols, figsize=(2.9 * cols + 1.2, 2.7 * d + 0.4), squeeze=False, layout="constrained")
    names = ladder.region_names()
    im = None
    for l in range(1, d + 1):
        mp, mc = ladder.events[l - 1], ladder.events[l]
        show = annotate if annotate is not None else max(mp, mc) <= 6
        for c in range(cols):
            ax = axes[l - 1][c]
            if c >= ladder.num_regions[l]:
                ax.axis("off")
                continue
            mat = at_level(P, l, "P_down")[c].numpy()
            im = ax.imshow(mat, vmin=0, vmax=1, cmap="viridis", aspect="auto")
            parent = names[ladder.level_offsets[l - 1] + int(ladder.parent_index(l)[c])]
            ax.set_title(f"P(z[{names[ladder.level_offsets[l] + c]}] | z[{parent}])", fontsize=9)
            ax.set_xlabel(f"child event (level {l})", fontsize=8)
            ax.set_ylabel(f"parent event (level {l - 1})", fontsize=8)
            ax.set(xticks=range(mc) if mc <= 16 else [], yticks=range(mp) if mp <= 16 else [])
            ax.tick_params(labelsize=7)
            if show:
                for i in range(mp):
                    for j in range(mc):
                        ax.text(j, i, f"{mat[i, j]:.2f}", ha="center", va="center", fontsize=7,
                                color="white" if mat[i, j] < 0.6 else "black")
    if im is not None:
        fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, label="probability")
    return finish_figure(fig, path, title, tight=False)


def plot_tv_convergence(reports: Sequence[Mapping], path: str | os.PathLike | None = None, *,
                        title: str | None = None) -> Figure:
    """Sampled frequencies against the exact statistics: TV distance and its bound against N, log-log.

    Per level and sample size N, the largest total-variation distance over the level's regions and its
    multinomial bound, shrinking like 1/sqrt(N) (:func:`teachers.statistics.compare_statistics`).  Left:
    marginals P(z_alpha); right: parent/child joints P(z_alpha, z_beta); solid: measured, dashed: the bound (same
    colour, per level); dotted grey: a 1/sqrt(N) guide through the first measured point.  The legend gives the
    fitted log-log slope of the worst level.

    :param reports: ``compare_statistics`` results, at least two distinct ``num_examples``.
    """
    if isinstance(reports, Mapping) or not isinstance(reports, Sequence) or len(reports) < 2:
        raise ValueError("reports: expected a list of at least two compare_statistics results")
    for i, r in enumerate(reports):
        if not isinstance(r, Mapping) or "num_examples" not in r or "per_level" not in r:
            raise ValueError(f"reports[{i}]: expected a compare_statistics result (num_examples, per_level)")
    reports = sorted(reports, key=lambda r: r["num_examples"])
    ns = np.array([r["num_examples"] for r in reports], dtype=np.float64)
    if len(set(ns.tolist())) != len(ns):
        raise ValueError(f"reports: sample sizes must be distinct, got {ns.astype(int).tolist()}")
    levels = [row["level"] for row in reports[0]["per_level"]]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, kind, label in ((axes[0], "marginal", "marginals P(z_alpha)"),
                            (axes[1], "joint", "parent/child joints P(z_alpha, z_beta)")):
        worst = np.zeros(len(ns))
        bounds: dict[tuple, list] = {}  # levels with the same number of cells share one bound curve
        for i, l in enumerate(levels):
            if f"max_tv_{kind}" not in reports[0]["per_level"][i]:
                continue  # the root has no parent: no joint
            tv = np.array([r["per_level"][i][f"max_tv_{kind}"] for r in reports])
            bound = tuple(r["per_level"][i][f"bound_{kind}"] for r in reports)
            worst = np.maximum(worst, tv)
            col = colors[i % len(colors)]
            ax.plot(ns, np.maximum(tv, 1e-12), "o-", color=col, label=f"level {l}: measured")
            bounds.setdefault(bound, []).append((l, col))
        for bound, owners in bounds.items():
            col = owners[0][1] if len(owners) == 1 else "black"
            which = ", ".join(str(l) for l, _ in owners)
            ax.plot(ns, bound, "--", color=col, lw=1.2, label=f"bound, level{'s' if len(owners) > 1 else ''} {which}")
        ok = worst > 0
        if ok.sum() >= 2:
            slope = np.polyfit(np.log(ns[ok]), np.log(worst[ok]), 1)[0]
            first = np.flatnonzero(ok)[0]
            ax.plot(ns, worst[first] * np.sqrt(ns[first] / ns), ":", color="grey",
                    label=f"1/sqrt(N) guide (worst level slope {slope:.2f})")
        ax.set(xscale="log", yscale="log", xlabel="sample size N", ylabel="max TV distance over the level's regions",
               title=f"{label}: sampled vs exact")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="upper right")
    return finish_figure(fig, path, title)


def plot_bayes_accuracy(sigmas: Sequence[float], curves: Mapping[str, Sequence[Mapping]],
                        path: str | os.PathLike | None = None, *, chance: float | None = None,
                        xscale: str = "log", title: str | None = None) -> Figure:
    """Bayes-optimal accuracy against the leaf noise sigma (Gaussian emission), one curve per ladder.

    The accuracy of argmax_y p(y | x) with the exact posterior (sum-product,
    :func:`inference.posterior.bayes_optimal_accuracy`) is the ceiling of any student on
    the ladder's data: with one-hot-like leaves (sigma -> 0) it is that of the leaf events
    (Thm 3's delta case), with large sigma it falls to the prior's majority class.  Lines: the
    expected accuracy mean_x max_y p(y | x) with +-2 standard errors; markers: the fraction of
    correct predictions on the sampled labels.

    :param sigmas: ``(S,)`` leaf noise levels (> 0 for ``xscale="log"``).
    :param curves: label -> ``S`` results of ``bayes_optimal_accuracy`` (:class:`~inference.posterior.BayesAccuracy`,
        or mappings with keys ``"expected"``, ``"stderr"``, optionally ``"empirical"``).
    :param chance: draw a horizontal line at this accuracy (e.g. 1 / classes).
    """
    s = np.asarray(sigmas, dtype=np.float64)
    if s.ndim != 1 or len(s) < 1 or not np.isfinite(s).all() or (s < 0).any():
        raise ValueError(f"sigmas: expected a non-empty list of sigma >= 0, got {sigmas!r}")
    if xscale not in ("log", "linear"):
        raise ValueError(f"xscale: expected 'log' or 'linear', got {xscale!r}")
    if xscale == "log" and (s <= 0).any():
        raise ValueError("sigmas: must be > 0 on a log axis (or pass xscale='linear')")
    if not isinstance(curves, Mapping) or not curves:
        raise ValueError("curves: expected a non-empty mapping label -> list of bayes_optimal_accuracy results")
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, rows) in enumerate(curves.items()):
        rows = [r.as_dict() if hasattr(r, "as_dict") else r for r in rows]  # a BayesAccuracy read as a dict
        if len(rows) != len(s) or not all(isinstance(r, Mapping) and "expected" in r for r in rows):
            raise ValueError(f"curves[{label!r}]: expected {len(s)} bayes_optimal_accuracy results")
        acc = np.array([r["expected"] for r in rows])
        err = np.array([r.get("stderr", 0.0) for r in rows])
        col = colors[i % len(colors)]
        ax.errorbar(s, acc, yerr=2 * np.nan_to_num(err), fmt="-", color=col, capsize=3,
                    label=f"{label}: E_x max_y p(y|x)")
        if all("empirical" in r for r in rows):
            ax.plot(s, [r["empirical"] for r in rows], "o", color=col, mfc="none",
                    label=f"{label}: fraction correct")
    if chance is not None:
        ax.axhline(chance, color="grey", ls=":", label=f"chance ({chance:.2f})")
    ax.set(xscale=xscale, xlabel="leaf noise sigma (Gaussian emission around one-hot)",
           ylabel="Bayes-optimal accuracy", ylim=(0, 1.02))
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return finish_figure(fig, path, title)


def event_frequencies(draws: np.ndarray, events: Sequence[int]) -> list[np.ndarray]:
    """Frequencies of each event per region in posterior draws.

    :param draws: ``(D, total_regions)`` integer events, regions in global (breadth-first) order,
        level by level.
    :param events: m_l of every region, in the same order (``total_regions`` entries).
    :returns: one ``(m,)`` array per region.
    """
    return [np.bincount(draws[:, r], minlength=m)[:m] / draws.shape[0] for r, m in enumerate(events)]


def plot_event_posterior(idata: az.InferenceData, marginals: Sequence[torch.Tensor | np.ndarray],
                         path: str | os.PathLike | None = None,
                         *, example: int = 0, title: str | None = None) -> Figure:
    """Posterior draws of every region's event given one input, against the exact marginals.

    Draws of z ~ p(z | x) (:func:`inference.posterior.posterior_event_draws`) counted per
    region: bars are the draws' frequencies of each event with +-2 binomial standard errors
    (they shrink like 1/sqrt(draws)), black ticks the exact marginals p(z_alpha | x) of the
    sum-product (:func:`inference.posterior.posterior` with ``marginals=True``).
    One panel per level, level 0 being the label y; the x axis counts the level's regions 0, 1, ... (integer ticks).

    :param idata: ``InferenceData`` with ``posterior["z"]`` ``(chain, draw, example, region)``.
    :param marginals: ``marginals[l]`` ``(N, R_l, m_l)`` or ``(R_l, m_l)`` per level (``LadderPosterior.marginals``).
    :param example: which example of ``idata`` (and of ``marginals``) to show.
    """
    post = getattr(idata, "posterior", None)
    if post is None or "z" not in post:
        raise ValueError("idata: expected InferenceData with posterior['z'] (posterior_event_draws)")
    z = np.asarray(post["z"].values)
    if z.ndim != 4:
        raise ValueError(f"idata: posterior['z'] must be (chain, draw, example, region), got shape {z.shape}")
    if isinstance(example, bool) or not isinstance(example, (int, np.integer)) or not 0 <= example < z.shape[2]:
        raise ValueError(f"example: expected an integer in [0, {z.shape[2]}), got {example!r}")
    if not isinstance(marginals, Sequence) or not marginals:
        raise ValueError("marginals: expected a list with one (N, R_l, m_l) array per level")
    exact = []
    for l, m in enumerate(marginals):
        a = m.detach().cpu().numpy() if isinstance(m, torch.Tensor) else np.asarray(m)
        if a.ndim == 3:
            if not 0 <= example < a.shape[0]:
                raise ValueError(f"marginals[{l}]: has {a.shape[0]} examples, example={example}")
            a = a[example]
        if a.ndim != 2:
            raise ValueError(f"marginals[{l}]: expected shape (N, R_l, m_l) or (R_l, m_l), got {a.shape}")
        exact.append(a)
    sizes = [a.shape[0] for a in exact]
    if sum(sizes) != z.shape[3]:
        raise ValueError(f"marginals: cover {sum(sizes)} regions, the draws have {z.shape[3]}")
    draws = z[:, :, example].reshape(-1, z.shape[3])
    events = [a.shape[1] for a in exact for _ in range(a.shape[0])]
    if draws.min() < 0 or any(draws[:, r].max() >= m for r, m in enumerate(events)):
        raise ValueError("idata: posterior['z'] holds events outside the marginals' range")
    freq = event_frequencies(draws, events)
    n = draws.shape[0]
    max_m = max(a.shape[1] for a in exact)
    cmap = plt.get_cmap("tab10" if max_m <= 10 else "tab20")
    widths = [max(4.0, 0.22 * a.shape[0] * (a.shape[1] + 1)) for a in exact]
    fig, axes = plt.subplots(len(exact), 1, figsize=(min(16.0, max(widths) + 3.0), 2.5 * len(exact) + 0.4),
                             squeeze=False, layout="constrained")
    offset = 0
    dots = None
    for l, a in enumerate(exact):
        ax = axes[l][0]
        r_l, m_l = a.shape
        w = 0.8 / m_l
        for r in range(r_l):
            f = freq[offset + r]
            xs = r + (np.arange(m_l) - (m_l - 1) / 2) * w
            err = 2 * np.sqrt(np.maximum(f * (1 - f), 1 / n) / n)
            ax.bar(xs, f, width=w, color=[cmap(k % cmap.N) for k in range(m_l)], yerr=err,
                   error_kw={"elinewidth": 0.8, "capsize": 1.5, "ecolor": "0.35"}, label=None)
            dots = ax.scatter(xs, a[r], marker="o", s=22, facecolors="none", edgecolors="black", linewidths=1.1,
                              zorder=3)
        ax.set_xticks(range(r_l), [str(r) for r in range(r_l)], fontsize=8)  # integers, not '1.1'-style names
        pad = max(0.0, (4 - r_l) / 2)  # a level with few regions keeps bars of the same width
        ax.set(xlim=(-0.6 - pad, r_l - 0.4 + pad), ylim=(0, 1.05), ylabel="probability",
               xlabel=f"region (index within level {l})")
        ax.set_title(f"level {l}" + (" (label y)" if l == 0 else "") + f": {m_l} events per region, "
                     f"bars = frequencies in {n} draws", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
        offset += r_l
    handles: list[Artist] = [plt.Rectangle((0, 0), 1, 1, color=cmap(k % cmap.N)) for k in range(max_m)]
    labels = [f"event {k}" for k in range(max_m)]
    if dots is not None:  # (always: every level has a region, the draws cover them)
        handles.append(dots)
        labels.append("exact p(z_alpha | x)")
    fig.legend(handles, labels, loc="outside right upper", fontsize=8, ncol=math.ceil(len(labels) / 17))
    return finish_figure(fig, path, title, tight=False)
