"""Figures of hard, soft and beta-VQ (*From Hard to Soft*, ``docs/theory.md`` §3, Eq 1-9 and Table 1).

Every curve and image is computed by the library (:class:`~smaso.splines.maso.MASO` and the closed forms of
:mod:`inference.vq`), so a figure is also a check of the code that drew it.  :func:`plot_arviz` and
:func:`quiet_arviz` are re-exported from :mod:`smaso.plots._base`.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from inference.vq import VQFit
from smaso.splines.functional import eta_from_beta
from smaso.splines.maso import MASO, hard_regions, region_probabilities, region_scores, vq_outputs

from ._base import finish_figure, plot_arviz, plt, quiet_arviz

if TYPE_CHECKING:
    import xarray as xr
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "plot_activation_family",
    "plot_arviz",
    "plot_region_draws",
    "plot_table1",
    "plot_vq_partition",
    "quiet_arviz",
    "table1_curves",
    "vq_partition",
]

F64 = torch.float64
TABLE1_COLUMNS = ("hard VQ (β = 1)", "soft VQ (β = 1/2)", "β-VQ", "VQ probability")


# ---------------------------------------------------------------------- validation helpers
def _check_layer(layer: object, name: str = "layer") -> MASO:
    if not isinstance(layer, MASO):
        raise TypeError(f"{name}: expected a smaso.splines.maso.MASO, got {type(layer).__name__}")
    return layer


def _check_beta_value(beta: object, name: str = "beta", *, open_interval: bool = False) -> float:
    if isinstance(beta, bool) or not isinstance(beta, int | float) or math.isnan(beta):
        raise ValueError(f"{name}: expected a number in [0, 1], got {beta!r}")
    b = float(beta)
    if open_interval and not 0.0 < b < 1.0:
        raise ValueError(f"{name}: expected a number in (0, 1), got {beta!r}")
    if not 0.0 <= b <= 1.0:
        raise ValueError(f"{name}: expected a number in [0, 1], got {beta!r}")
    return b


def _check_betas(betas: object) -> list[float]:
    if isinstance(betas, str | bytes) or not isinstance(betas, Sequence) or len(betas) == 0:
        raise ValueError(f"betas: expected a non-empty sequence of numbers in [0, 1], got {betas!r}")
    return [_check_beta_value(b, f"betas[{i}]") for i, b in enumerate(betas)]


def _beta_label(beta: float) -> str:
    eta = eta_from_beta(beta)
    eta_s = "∞" if math.isinf(eta) else f"{eta:.3g}"
    return f"β = {beta:g} (η = {eta_s})"


# ---------------------------------------------------------------------- the family of curves (Eq 7-9)
def _points_of(name: str, value: Any, layer: MASO) -> tuple[torch.Tensor, torch.Tensor]:
    """(x (M, 1), t (M, 1, R)) from a VQFit or an (x, t) pair."""
    if isinstance(value, VQFit):
        x, t = value.x, value.probs
    elif isinstance(value, tuple | list) and len(value) == 2:
        x, t = value
    else:
        raise ValueError(f"points[{name}]: expected a VQFit or an (x, t) pair, got {type(value).__name__}")
    if not (isinstance(x, torch.Tensor) and isinstance(t, torch.Tensor)):
        raise ValueError(f"points[{name}]: x and t must be tensors")
    if x.dim() != 2 or x.shape[1] != 1 or tuple(t.shape) != (x.shape[0], 1, layer.R):
        raise ValueError(f"points[{name}]: expected x (M, 1) and region probabilities t (M, 1, {layer.R}), got "
                         f"{tuple(x.shape)} and {tuple(t.shape)}")
    return x.to(layer.A.dtype), t.to(layer.A.dtype)


def plot_activation_family(layer: MASO, betas: Sequence[float], x: torch.Tensor, *,
                           points: Mapping[float, VQFit | tuple[torch.Tensor, torch.Tensor]] | None = None,
                           path: str | os.PathLike | None = None, title: str | None = None) -> Figure:
    """The beta-VQ family of one unit (Eq 7-9): outputs and VQ probability for every beta, inference as points.

    For the ReLU MASO: ReLU (beta = 1) -> swish ``u sigmoid(eta u)`` -> SiLU (beta = 1/2) -> ``u / 2`` (beta = 0).
    Left: unit output ``z = sum_r t_r s_r`` with ``t = region_probabilities(A, B, x, beta)``; right: the
    probability of the unit's last region ``t[..., -1]`` (for ReLU the active piece, ``sigmoid(eta u)``).

    :param layer: a MASO with one unit and one input (``K = 1``, ``D = 1``), e.g.
        ``MASO.from_linear_relu(torch.ones(1, 1), torch.zeros(1))``.
    :param betas: the values of beta in [0, 1] to draw (one curve each).
    :param x: the input grid ``(N, 1)``.
    :param points: optional ``{beta: fit}`` drawn as markers on the curve of that beta; ``fit`` is a
        :class:`~inference.vq.VQFit` of this layer or a pair ``(x (M, 1), t (M, 1, R))`` of inputs and region
        probabilities found by any inference (e.g. ``vq_map``'s one-hot at beta = 1).
    :param path: save the figure here (format by suffix, written atomically); None: only return it.
    :returns: the matplotlib ``Figure``.
    """
    layer = _check_layer(layer)
    if layer.K != 1 or layer.D != 1:
        raise ValueError(f"layer: expected one unit with one input (K = D = 1), got K = {layer.K}, D = {layer.D}")
    bs = _check_betas(betas)
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != 1 or x.shape[0] < 2:
        raise ValueError(f"x: expected an input grid of shape (N, 1) with N >= 2, got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    points = {} if points is None else points
    if not isinstance(points, Mapping):
        raise ValueError(f"points: expected a mapping beta -> fit, got {type(points).__name__}")
    for b in points:
        _check_beta_value(b, f"points key {b!r}")
    A, B = layer.A, layer.B
    xg = x.to(A.dtype)
    s = region_scores(A, B, xg)
    xs = xg[:, 0].cpu().numpy()
    fig, (ax_z, ax_t) = plt.subplots(1, 2, figsize=(12.5, 4.8))
    cmap = plt.get_cmap("viridis")
    names = {1.0: "hard VQ: ReLU", 0.5: "soft VQ: SiLU", 0.0: "linear"}
    for b in sorted(bs, reverse=True):
        color = cmap(0.9 * (1 - b))
        t = region_probabilities(A, B, xg, b)
        z = vq_outputs(t, s)[:, 0]
        label = _beta_label(b) + (f"  {names[b]}" if b in names else "")
        lw = 2.4 if b in names else 1.5
        ax_z.plot(xs, z.cpu().numpy(), color=color, lw=lw, label=label)
        ax_t.plot(xs, t[:, 0, -1].cpu().numpy(), color=color, lw=lw)
    first = True
    for b, value in sorted(points.items(), key=lambda kv: -float(kv[0])):
        px, pt = _points_of(repr(b), value, layer)
        pz = vq_outputs(pt, region_scores(A, B, px))[:, 0]
        color = cmap(0.9 * (1 - float(b)))
        kw = {"marker": "o", "s": 26, "facecolors": "white", "edgecolors": color, "linewidths": 1.4, "zorder": 3}
        ax_z.scatter(px[:, 0].cpu().numpy(), pz.cpu().numpy(), label="inference (MAP / SVI)" if first else None,
                     **kw)
        ax_t.scatter(px[:, 0].cpu().numpy(), pt[:, 0, -1].cpu().numpy(), **kw)
        first = False
    ax_z.set_xlabel("input x (u = <W, x> + b)")
    ax_z.set_ylabel("unit output z = Σ_r t_r (<A_r, x> + B_r)")
    ax_z.set_title("β-VQ outputs: ReLU → swish → SiLU → linear")
    ax_z.legend(fontsize=8, loc="upper left")
    ax_t.set_xlabel("input x")
    ax_t.set_ylabel("VQ probability of the last region t_R")
    ax_t.set_title("region probability: step → sigmoid(ηu) → 1/R")
    ax_t.set_ylim(-0.03, 1.03)
    for ax in (ax_z, ax_t):
        ax.grid(alpha=0.3)
    return finish_figure(fig, path, title)


# ---------------------------------------------------------------------- Table 1
def _table1_layers(nu: float, pool_with: float) -> list[tuple[str, MASO, str]]:
    """(row name, MASO, how to read the VQ probability) for Table 1's rows; inputs x = u or (u, pool_with)."""
    one, zero = torch.ones(1, 1, dtype=F64), torch.zeros(1, dtype=F64)
    return [
        ("ReLU", MASO.from_linear_relu(one, zero), "last"),
        (f"leaky ReLU (ν = {nu:g})", MASO.from_linear_leaky_relu(one, zero, nu=nu), "last"),
        ("absolute value", MASO.from_linear_abs(one, zero), "difference"),
        (f"max pool of (u, {pool_with:g})", MASO.max_pool(2, [[0, 1]]), "first"),
        (f"avg pool of (u, {pool_with:g})", MASO.avg_pool(2, [[0, 1]]), "first"),
    ]


def table1_curves(u: torch.Tensor, beta: float = 0.8, *, nu: float = 0.1,
                  pool_with: float = 1.0) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Table 1 computed by the library: every MASO layer kind under hard, soft and beta-VQ (Eq 2, 5-6, 7-9).

    Rows (:class:`~smaso.splines.maso.MASO`'s constructors with W = 1, b = 0): ReLU, leaky ReLU (slope ``nu``),
    absolute value, max pool and average pool of the pair ``(u, pool_with)``.  Each row holds the outputs
    ``z = sum_r t_r s_r`` (``t`` from :func:`~smaso.splines.maso.region_probabilities`) and the VQ probability:
    ``t`` of the last region (ReLU, leaky), ``t_2 - t_1`` (absolute value) or the weight of ``u`` in the pool.

    :param u: the input grid ``(N,)``.
    :param beta: the beta of the beta-VQ column, in (0, 1).
    :param nu: the leaky ReLU slope, in [0, 1).
    :param pool_with: the other entry of the pooled pair.
    :returns: ``{row: {"hard" | "soft" | "beta" | "linear": {"z": (N,), "t": (N,)}}}`` numpy arrays ("linear":
        the beta = 0 limit, Table 1's last line).
    """
    if not isinstance(u, torch.Tensor) or u.dim() != 1 or u.numel() < 2:
        raise ValueError(f"u: expected a 1-D input grid with at least 2 points, got "
                         f"{tuple(u.shape) if isinstance(u, torch.Tensor) else type(u).__name__}")
    beta = _check_beta_value(beta, open_interval=True)
    if isinstance(nu, bool) or not isinstance(nu, int | float) or not 0.0 <= nu < 1.0:
        raise ValueError(f"nu: expected a leaky ReLU slope in [0, 1), got {nu!r}")
    if isinstance(pool_with, bool) or not isinstance(pool_with, int | float) or not math.isfinite(pool_with):
        raise ValueError(f"pool_with: expected a finite number, got {pool_with!r}")
    u64 = u.to(F64)
    x1 = u64[:, None]
    x2 = torch.stack([u64, torch.full_like(u64, float(pool_with))], 1)
    out: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for name, layer, read in _table1_layers(float(nu), float(pool_with)):
        x = x1 if layer.D == 1 else x2
        s = region_scores(layer.A, layer.B, x)
        row = {}
        for col, b in (("hard", 1.0), ("soft", 0.5), ("beta", beta), ("linear", 0.0)):
            t = region_probabilities(layer.A, layer.B, x, b)
            z = vq_outputs(t, s)[:, 0]
            tk = t[:, 0]
            prob = {"last": tk[:, -1], "first": tk[:, 0], "difference": tk[:, -1] - tk[:, 0]}[read]
            row[col] = {"z": z.numpy(), "t": prob.numpy()}
        out[name] = row
    return out


_TABLE1_FORMULAS = {
    "ReLU": ("max(u, 0)", "u σ(u)  (SiLU)", "u σ(ηu)  (swish)", "σ(ηu)"),
    "leaky": ("max(u, νu)", "u[ν + (1-ν)σ((1-ν)u)]", "u[ν + (1-ν)σ(η(1-ν)u)]", "σ(η(1-ν)u)"),
    "absolute": ("|u|", "u tanh(u)", "u tanh(ηu)", "t₂ - t₁ = tanh(ηu)"),
    "max": ("max(u, c)", "softmax pooling", "softmax(η·)-weighted mean", "softmax(η·)_u"),
    "avg": ("(u + c)/2", "unchanged (R = 1)", "unchanged (R = 1)", "1 (one region)"),
}


def plot_table1(u: torch.Tensor, beta: float = 0.8, *, nu: float = 0.1, pool_with: float = 1.0,
                path: str | os.PathLike | None = None, title: str | None = None) -> Figure:
    """Table 1 of *From Hard to Soft* drawn: rows = MASO layer kind, columns = hard / soft / beta-VQ / VQ probability.

    Each panel is a curve of :func:`table1_curves` (same parameters), titled with Table 1's closed form; the soft
    and beta columns repeat the hard curve in grey, the beta column adds the beta -> 0 limit (dotted), and the
    VQ-probability column draws beta = 1, 1/2 and ``beta`` together.

    :returns: the matplotlib ``Figure``.
    """
    curves = table1_curves(u, beta, nu=nu, pool_with=pool_with)
    us = u.detach().cpu().double().numpy()
    rows = list(curves)
    eta = eta_from_beta(beta)
    fig, axes = plt.subplots(len(rows), 4, figsize=(14, 2.45 * len(rows)), sharex=True)
    colors = {"hard": "#1f77b4", "soft": "#2ca02c", "beta": "#d62728"}
    for i, name in enumerate(rows):
        formulas = next(f for key, f in _TABLE1_FORMULAS.items() if name.startswith(key))
        for j, col in enumerate(("hard", "soft", "beta")):
            ax = axes[i, j]
            if col != "hard":
                ax.plot(us, curves[name]["hard"]["z"], color="0.6", lw=1.0, ls="--", label="hard VQ")
            if col == "beta":
                ax.plot(us, curves[name]["linear"]["z"], color="0.45", lw=1.0, ls=":", label="β → 0 limit")
            ax.plot(us, curves[name][col]["z"], color=colors[col], lw=2.0)
            ax.set_title(formulas[j], fontsize=9)
        ax = axes[i, 3]
        for col, lab in (("hard", "β = 1"), ("soft", "β = 1/2"), ("beta", f"β = {beta:g}")):
            ax.plot(us, curves[name][col]["t"], color=colors[col], lw=1.6, label=lab)
        ax.set_title(formulas[3], fontsize=9)
        axes[i, 0].set_ylabel(name, fontsize=10, fontweight="bold")
        for ax in axes[i]:
            ax.grid(alpha=0.3)
            ax.axhline(0, color="k", lw=0.5)
            ax.axvline(0, color="k", lw=0.5)
    for j, head in enumerate(TABLE1_COLUMNS):
        extra = f" (β = {beta:g}, η = {eta:.3g})" if j == 2 else ""
        axes[0, j].annotate(head + extra, xy=(0.5, 1.32), xycoords="axes fraction", ha="center", fontsize=11,
                            fontweight="bold")
    for j in (3, 1, 2):
        axes[0, j].legend(fontsize=7, loc="upper left")
    for ax in axes[-1]:
        ax.set_xlabel("u")
    return finish_figure(fig, path, title)


# ---------------------------------------------------------------------- the VQ partition of a 2-D layer
def vq_partition(layer: MASO, betas: Sequence[float] = (0.5,), *, extent: Sequence[float] = (-3.0, 3.0, -3.0, 3.0),
                 resolution: int = 200) -> dict:
    """The VQ partition of a layer with two inputs over a grid of the input plane (Eq 2 and Eq 7-9).

    Hard VQ: per-unit argmax region and the layer's region code ``sum_k r_k R^k``.  For each beta: per-unit
    beta-VQ probabilities and the probability that x's regions are its hard ones, ``prod_k t_k[r_k]`` (the
    per-unit SMASO's posteriors are independent, Eq 3).  Row i of the grids is ``x_2 = ys[i]``, column j is x_1 = xs[j].

    :param layer: a MASO with ``D = 2``.
    :param betas: values in [0, 1].
    :param extent: ``(x1_min, x1_max, x2_min, x2_max)``.
    :param resolution: grid points per axis (>= 2).
    :returns: dict with ``xs``, ``ys`` ``(resolution,)``, ``regions`` ``(H, W, K)`` int, ``code`` ``(H, W)`` int,
        ``probs`` ``{beta: (H, W, K, R)}``, ``hard_region_prob`` ``{beta: (H, W)}`` (numpy).
    """
    layer = _check_layer(layer)
    if layer.D != 2:
        raise ValueError(f"layer: expected a layer with 2 inputs (D = 2), got D = {layer.D}")
    bs = _check_betas(betas)
    if (not isinstance(extent, Sequence) or len(extent) != 4 or not all(math.isfinite(float(e)) for e in extent)
            or not (extent[0] < extent[1] and extent[2] < extent[3])):
        raise ValueError(f"extent: expected (x1_min, x1_max, x2_min, x2_max) with min < max, got {extent!r}")
    if isinstance(resolution, bool) or not isinstance(resolution, int) or resolution < 2:
        raise ValueError(f"resolution: expected an integer >= 2, got {resolution!r}")
    dtype = layer.A.dtype
    xs = torch.linspace(float(extent[0]), float(extent[1]), resolution, dtype=dtype)
    ys = torch.linspace(float(extent[2]), float(extent[3]), resolution, dtype=dtype)
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    pts = torch.stack([gx.reshape(-1), gy.reshape(-1)], 1)
    K, R = layer.K, layer.R
    shape = (resolution, resolution)
    regions = hard_regions(layer.A, layer.B, pts).argmax(-1)  # (H*W, K)
    code = (regions * (R ** torch.arange(K))).sum(-1)
    probs, joint = {}, {}
    for b in bs:
        t = region_probabilities(layer.A, layer.B, pts, b)  # (H*W, K, R)
        probs[b] = t.reshape(*shape, K, R).numpy()
        joint[b] = t.gather(-1, regions[..., None])[..., 0].prod(-1).reshape(shape).numpy()
    return {"xs": xs.numpy(), "ys": ys.numpy(), "regions": regions.reshape(*shape, K).numpy(),
            "code": code.reshape(shape).numpy(), "probs": probs, "hard_region_prob": joint}


def _pattern(code: int, K: int, R: int) -> str:
    return "".join(str((code // R ** k) % R) for k in range(K))


def plot_vq_partition(layer: MASO, betas: Sequence[float] = (0.5,), *,
                      extent: Sequence[float] = (-3.0, 3.0, -3.0, 3.0), resolution: int = 200,
                      points: torch.Tensor | None = None, path: str | os.PathLike | None = None,
                      title: str | None = None) -> Figure:
    """The VQ partition of a 2-input layer: hard regions (Eq 2) as a categorical image, beta-VQ probabilities as images.

    Top row: each unit's hard region and, last, the layer's partition, one colour per region code labelled by
    the units' regions (``"101"``: unit 0 in region 1, unit 1 in region 0, ...).  One row per beta: each unit's
    probability of its last region (R = 2) or of its hard region (R > 2); last, ``prod_k t_k[r_k]``.  Black
    lines: the units' region boundaries.  Data (and the other parameters) from :func:`vq_partition`.

    :param points: optional inputs ``(M, 2)`` marked and numbered on the partition.
    :returns: the matplotlib ``Figure``.
    """
    data = vq_partition(layer, betas, extent=extent, resolution=resolution)
    if points is not None and (not isinstance(points, torch.Tensor) or points.dim() != 2 or points.shape[1] != 2):
        raise ValueError(f"points: expected a tensor (M, 2), got "
                         f"{tuple(points.shape) if isinstance(points, torch.Tensor) else type(points).__name__}")
    K, R = layer.K, layer.R
    bs = list(data["probs"])
    ext = [float(e) for e in extent]
    fig, axes = plt.subplots(1 + len(bs), K + 1, figsize=(3.2 * (K + 1) + 1.0, 3.0 * (1 + len(bs))), squeeze=False,
                             layout="constrained")
    regions, code = data["regions"], data["code"]
    img_kw = {"origin": "lower", "extent": ext, "aspect": "auto", "interpolation": "nearest"}

    def boundaries(ax: Axes, color: str = "k", own: int | None = None) -> None:
        # the unit's own boundary solid, the other units' dotted (all solid on the layer panels: own=None)
        for k in range(K):
            if np.unique(regions[..., k]).size > 1:
                faint = own is not None and k != own
                ax.contour(data["xs"], data["ys"], regions[..., k], levels=np.arange(R - 1) + 0.5,
                           colors="0.45" if faint else color, linewidths=0.7 if faint else 1.1,
                           linestyles=":" if faint else "-")

    for k in range(K):
        ax = axes[0, k]
        ax.imshow(regions[..., k], cmap=plt.get_cmap("Greys", R), vmin=-0.5, vmax=R - 0.5, alpha=0.55, **img_kw)
        boundaries(ax, own=k)
        ax.set_title(f"unit {k}: hard region (grey = {R - 1 if R == 2 else 'higher'})", fontsize=9)
    # categorical image: consecutive colours for the codes that occur
    present = np.unique(code)
    index = np.searchsorted(present, code)
    cmap = plt.get_cmap("tab20" if present.size > 10 else "tab10", max(present.size, 2))
    ax = axes[0, K]
    ax.imshow(index, cmap=cmap, vmin=-0.5, vmax=max(present.size, 2) - 0.5, **img_kw)
    boundaries(ax)
    for i, c in enumerate(present):
        rows, cols = np.nonzero(index == i)
        ax.text(data["xs"][int(cols.mean().round())], data["ys"][int(rows.mean().round())], _pattern(int(c), K, R),
                ha="center", va="center", fontsize=8, fontweight="bold",
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "alpha": 0.7, "lw": 0})
    ax.set_title(f"layer partition: {present.size} regions", fontsize=9)
    if points is not None:
        p = points.detach().cpu().double().numpy()
        ax.scatter(p[:, 0], p[:, 1], marker="*", s=90, c="k", edgecolors="white", linewidths=0.6, zorder=3)
        for m, (px, py) in enumerate(p):
            ax.annotate(f"x{m}", (px, py), xytext=(4, 4), textcoords="offset points", fontsize=8)
    for i, b in enumerate(bs, start=1):
        pr = data["probs"][b]
        for k in range(K):
            ax = axes[i, k]
            if R == 2:
                img, what = pr[..., k, 1], "P(t = last region)"
            else:
                img = np.take_along_axis(pr[..., k, :], regions[..., k][..., None], -1)[..., 0]
                what = "P(t = hard region)"
            im = ax.imshow(img, cmap="RdBu_r", vmin=0, vmax=1, **img_kw)
            boundaries(ax, own=k)
            ax.set_title(f"unit {k}: {what}", fontsize=9)
        ax = axes[i, K]
        im2 = ax.imshow(data["hard_region_prob"][b], cmap="magma", vmin=0, vmax=1, **img_kw)
        boundaries(ax, color="w")
        ax.set_title("P(x's hard region) = Π_k t_k[r_k]", fontsize=9)
        fig.colorbar(im, ax=list(axes[i, :K]), shrink=0.9, pad=0.01)
        fig.colorbar(im2, ax=axes[i, K], shrink=0.9, pad=0.02)
        axes[i, 0].set_ylabel(f"{_beta_label(b)}\nx₂", fontsize=9)
    axes[0, 0].set_ylabel("hard VQ (β = 1)\nx₂", fontsize=9)
    for ax in axes[-1]:
        ax.set_xlabel("x₁")
    return finish_figure(fig, path, title, tight=False)  # constrained layout


# ---------------------------------------------------------------------- posterior region draws (ArviZ)
def _region_indicator(t: xr.DataArray, region: int, R: int) -> xr.DataArray:
    """``1[t == region]`` ``(chain, draw, example, unit)`` from labels or from one-hot with a ``region`` dim."""
    if "region" in t.dims:
        if t.sizes["region"] != R:
            raise ValueError(f"posterior['t'] has {t.sizes['region']} regions, probs has {R}")
        return t.isel(region=region).astype(float)
    return (t == region).astype(float)


def plot_region_draws(draws: Mapping[str, object], probs: torch.Tensor, *, region: int = 1,
                      path: str | os.PathLike | None = None, title: str | None = None) -> Figure:
    """Frequencies of posterior region draws against the closed-form beta-VQ probabilities (Eq 7-9).

    For every (example, unit) pair: the fraction of draws in which ``t == region`` +- 2 ArviZ Monte Carlo
    standard errors (``az.mcse``), next to the exact ``probs[..., region]``.  Bottom: ``(frequency - p) / mcse``,
    which should stay within a few units.

    :param draws: ``{label: InferenceData}`` with ``posterior["t"]`` ``(chain, draw, example, unit)`` labels or
        ``(chain, draw, example, unit, region)`` one-hot, e.g. from :func:`inference.vq.posterior_region_draws`
        and :meth:`inference.vq.VQFit.draws` (either ``categorical=``).
    :param probs: region probabilities ``(N, K, R)`` of the same examples and units.
    :param region: the region whose frequency is shown (for ReLU, 1 = the active piece).
    :returns: the matplotlib ``Figure``.
    """
    import arviz as az

    if not isinstance(draws, Mapping) or not draws:
        raise ValueError("draws: expected a non-empty mapping label -> InferenceData")
    if not isinstance(probs, torch.Tensor) or probs.dim() != 3:
        raise ValueError(f"probs: expected region probabilities (N, K, R), got "
                         f"{tuple(probs.shape) if isinstance(probs, torch.Tensor) else type(probs).__name__}")
    N, K, R = probs.shape
    if isinstance(region, bool) or not isinstance(region, int) or not 0 <= region < R:
        raise ValueError(f"region: expected an integer in [0, {R}), got {region!r}")
    stats = {}
    for label, idata in draws.items():
        post = getattr(idata, "posterior", None)
        if post is None or "t" not in post:
            raise ValueError(f"draws[{label!r}]: expected InferenceData with posterior['t']")
        t = post["t"]
        if tuple(t.shape[2:4]) != (N, K) or t.ndim != (5 if "region" in t.dims else 4):
            raise ValueError(f"draws[{label!r}]: posterior['t'] is {tuple(t.shape)}, expected (chain, draw, {N}, {K}) "
                             f"to match probs {tuple(probs.shape)}")
        ind = _region_indicator(t, region, R)
        freq = ind.mean(("chain", "draw")).values
        with quiet_arviz(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=RuntimeWarning, module="numpy")  # constant indicators
            mcse = az.mcse(ind.to_dataset(name="ind"))["ind"].values
        stats[label] = (freq.reshape(-1), np.nan_to_num(mcse.reshape(-1), nan=0.0))
    p = probs[..., region].detach().cpu().double().numpy().reshape(-1)
    pos = np.arange(N * K)
    fig, (ax, ax_d) = plt.subplots(2, 1, figsize=(max(7.0, 0.45 * N * K + 2), 6.5), sharex=True,
                                   gridspec_kw={"height_ratios": [2.2, 1]})
    ax.scatter(pos, p, marker="_", s=400, c="k", lw=2.0, label=f"exact P(t = {region} | x) (β-VQ)", zorder=3)
    width = 0.5 / max(len(stats), 1)
    for i, (label, (freq, mcse)) in enumerate(stats.items()):
        off = (i - (len(stats) - 1) / 2) * width
        ax.errorbar(pos + off, freq, yerr=2 * mcse, fmt="o", ms=4, capsize=2, label=f"{label} (± 2 MCSE)")
        dev = np.where(mcse > 0, (freq - p) / np.where(mcse > 0, mcse, 1.0), 0.0)
        ax_d.bar(pos + off, dev, width=width * 0.9, label=label)
    ax.set_ylabel(f"frequency of t = {region}")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax.set_title("posterior region draws vs the closed-form β-VQ probabilities")
    for lim in (-3, 3):
        ax_d.axhline(lim, color="0.5", ls="--", lw=0.8)
    ax_d.axhline(0, color="k", lw=0.6)
    ax_d.set_ylabel("(freq − p) / MCSE")
    ax_d.set_xticks(pos)
    ax_d.set_xticklabels([f"x{n}·u{k}" for n in range(N) for k in range(K)], rotation=90, fontsize=7)
    ax_d.set_xlabel("example · unit")
    ax_d.grid(alpha=0.3, axis="y")
    return finish_figure(fig, path, title)
