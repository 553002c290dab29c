"""Figures of joint inference in the factorial SMASO of a layer (docs/theory.md §3, Eq 10-11).

- :func:`plot_gap_vs_defect`: factorized and mean-field MAP against the exact joint MAP, by orthogonality defect;
- :func:`plot_marginal_forest`: the posterior marginals ``p(t_k = r | x)``: exact, sampled and mean field;
- :func:`plot_configuration_posterior`: the joint posterior over the R^K configurations, exact vs mean field.

The numbers the figures compute from draws are public (:func:`marginal_frequencies`,
:func:`configuration_frequencies`, :func:`mean_field_configuration_probs`) so they can be checked.

ArviZ's own plots: :func:`~smaso.plots._base.plot_arviz` (also importable from here, with
:func:`~smaso.plots._base.quiet_arviz`); plot the one-hot indicators (``var_names=["t_onehot"]``) to see
per-category probabilities.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import torch

from ._base import finish_figure, plot_arviz, plt, quiet_arviz

if TYPE_CHECKING:
    import arviz as az
    from matplotlib.figure import Figure

__all__ = [
    "configuration_frequencies",
    "marginal_frequencies",
    "mean_field_configuration_probs",
    "plot_arviz",
    "plot_configuration_posterior",
    "plot_gap_vs_defect",
    "plot_marginal_forest",
    "quiet_arviz",
]

_METHODS = (("factorized", "factorized (per-unit) MAP", "C1", "o"), ("mean_field", "mean-field MAP", "C2", "s"))


def _array(v: npt.ArrayLike, name: str, ndim: int) -> np.ndarray:
    if isinstance(v, torch.Tensor):
        v = v.detach().cpu().numpy()
    try:
        a = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: expected a numeric array, got {type(v).__name__}") from exc
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name}: contains NaN or infinite values")
    return a


def _draws_t(draws: az.InferenceData, name: str = "draws", *, num_regions: int) -> np.ndarray:
    """``posterior["t"]`` of an ``InferenceData`` as ``(chain, draw, example, unit)`` int64, in [0, num_regions)."""
    if isinstance(num_regions, bool) or not isinstance(num_regions, int) or num_regions < 1:
        raise ValueError(f"num_regions: expected a positive integer, got {num_regions!r}")
    post = getattr(draws, "posterior", None)
    if post is None or "t" not in post:
        raise ValueError(f"{name}: expected an arviz InferenceData with posterior['t'] (chain, draw, example, unit), "
                         f"got {type(draws).__name__}")
    t = np.asarray(post["t"].values)
    if t.ndim != 4 or not np.issubdtype(t.dtype, np.integer):
        raise ValueError(f"{name}: posterior['t'] must be integer regions (chain, draw, example, unit), got "
                         f"shape {t.shape} dtype {t.dtype}")
    if t.min() < 0 or t.max() >= num_regions:
        raise ValueError(f"num_regions: draws hold regions outside [0, {num_regions})")
    return t


# ---------------------------------------------------------------------- numbers behind the figures
def marginal_frequencies(draws: az.InferenceData, num_regions: int) -> tuple[np.ndarray, np.ndarray]:
    """Frequencies of every region in posterior draws, and their Monte Carlo standard errors.

    :param draws: ``InferenceData`` with ``posterior["t"]`` ``(chain, draw, example, unit)`` (e.g. from
        :func:`inference.factorial.factorial_posterior_draws`).
    :param num_regions: R.
    :returns: ``(freq, mcse)``, both ``(N, K, R)``: the fraction of draws with ``t[n, k] = r`` and ArviZ's
        ``az.mcse`` of that indicator's mean.
    """
    import arviz as az

    t = _draws_t(draws, num_regions=num_regions)
    onehot = (t[..., None] == np.arange(num_regions)).astype(np.float64)  # (chain, draw, N, K, R)
    freq = onehot.mean((0, 1))
    if t.shape[1] < 4:  # az.mcse needs a few draws per chain
        return freq, np.full_like(freq, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"), quiet_arviz():
        mcse = az.mcse(az.convert_to_dataset({"p": onehot}), method="mean")["p"].values
    # a constant indicator (every draw in one region) has no spread: its error is 0, not NaN
    return freq, np.where(np.isfinite(mcse), mcse, 0.0)


def _codes(t: np.ndarray, num_regions: int) -> np.ndarray:
    """Configuration codes of ``t`` ``(..., K)``, unit 0 most significant (``inference.factorial.configurations``)."""
    K = t.shape[-1]
    return (t * num_regions ** np.arange(K - 1, -1, -1)).sum(-1)


def configuration_frequencies(draws: az.InferenceData, num_regions: int) -> np.ndarray:
    """Fraction of draws in each of the R^K configurations, ``(N, R^K)``, in code order (unit 0 most significant,
    the columns of :attr:`inference.factorial.FactorialPosterior.log_probs`)."""
    t = _draws_t(draws, num_regions=num_regions)
    _, _, n, k = t.shape
    codes = _codes(t, num_regions).reshape(-1, n)  # (S, N)
    C = num_regions**k
    out = np.stack([np.bincount(codes[:, i], minlength=C) for i in range(n)]).astype(np.float64)
    return out / codes.shape[0]


def mean_field_configuration_probs(q: npt.ArrayLike) -> np.ndarray:
    """Mean field's probability of every configuration, ``prod_k q[n, k, t_k]`` ``(N, R^K)`` in code order.

    :param q: mean-field marginals ``(N, K, R)`` (:attr:`inference.factorial.MeanField.probs`).
    """
    q = _array(q, "q", 3)
    n, k, _ = q.shape
    out = np.ones((n, 1))
    for unit in range(k):  # unit 0 most significant: append each unit as the next, less significant digit
        out = (out[:, :, None] * q[:, unit, None, :]).reshape(n, -1)
    return out


# ---------------------------------------------------------------------- figures
def plot_gap_vs_defect(gaps: Sequence[Mapping], path: str | os.PathLike | None = None, *,
                       marginal_tv: Sequence[float] | None = None, title: str | None = None) -> Figure:
    """Distance of the factorized and mean-field MAP from the exact joint MAP against the orthogonality defect.

    Illustrates Eq 11: when the cross-unit inner products vanish (defect 0) the factorial mixture's (Eq 10)
    joint MAP is the per-unit MAP, so both gaps are exactly 0; they grow with the defect.

    :param gaps: results of :func:`inference.factorial.factorial_gap`, one per layer.
    :param path: save the figure here (format by suffix, written atomically); None: only return it.
    :param marginal_tv: optional, one per layer: the mean over inputs and units of the total variation between
        mean field's marginals and the exact posterior marginals; drawn as a third panel.
    :param title: figure title.
    :returns: the matplotlib ``Figure``.
    """
    if isinstance(gaps, (str, bytes, Mapping)) or not isinstance(gaps, Sequence) or not gaps:
        raise ValueError("gaps: expected a non-empty list of factorial_gap results")
    for i, g in enumerate(gaps):
        if not isinstance(g, Mapping) or "orthogonality_defect" not in g or any(
                m not in g or "fraction_differs" not in g[m] or "log_joint_gap_mean" not in g[m] for m, *_ in _METHODS):
            raise ValueError(f"gaps[{i}]: expected a factorial_gap result (orthogonality_defect, factorized, "
                             f"mean_field)")
    defect = np.array([float(g["orthogonality_defect"]) for g in gaps])
    tv = None
    if marginal_tv is not None:
        tv = _array(marginal_tv, "marginal_tv", 1)
        if tv.shape[0] != len(gaps):
            raise ValueError(f"marginal_tv: expected one value per layer ({len(gaps)}), got {tv.shape[0]}")
    order = np.argsort(defect, kind="stable")
    ncols = 3 if tv is not None else 2
    fig, axes = plt.subplots(1, ncols, figsize=(5.2 * ncols, 4.3))
    panels = (("fraction_differs", "inputs whose MAP differs from the exact joint MAP"),
              ("log_joint_gap_mean", "mean log p(t_exact, x) - log p(t_method, x)"))
    for ax, (key, ylabel) in zip(axes[:2], panels, strict=True):
        for method, label, color, marker in _METHODS:
            y = np.array([float(g[method][key]) for g in gaps])
            ax.scatter(defect, y, s=22, color=color, marker=marker, alpha=0.75, label=label)
            ax.plot(defect[order], _running_median(defect[order], y[order]), color=color, lw=1.2, alpha=0.8)
        ax.set_ylabel(ylabel)
    axes[0].set_ylim(bottom=-0.02)
    axes[0].set_title("how often per-unit inference is wrong")
    axes[1].set_title("how much joint probability it loses")
    axes[0].legend(fontsize=8, loc="upper left")
    if tv is not None:
        ax = axes[2]
        ax.scatter(defect, tv, s=22, color="C2", marker="s", alpha=0.75)
        ax.plot(defect[order], _running_median(defect[order], tv[order]), color="C2", lw=1.2, alpha=0.8)
        ax.set_ylabel("mean TV(q_k, p(t_k | x))")
        ax.set_title("mean-field marginals vs exact marginals")
    for ax in axes:
        # square-root axis: the small defects, where the gaps rise fastest, get room
        ax.set_xscale("function", functions=(lambda v: np.sqrt(np.clip(v, 0, None)), np.square))
        ax.set_xlim(left=0)
        ticks = [v for v in _DEFECT_TICKS if v <= 1.05 * max(float(defect.max()), 1e-3)]
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{v:g}" for v in ticks])
        ax.set_xlabel("orthogonality defect (0 iff Eq 11; square-root axis)")
        ax.axvline(0, color="k", lw=0.6, ls=":")
        ax.grid(alpha=0.3)
    exact_zero = [float(g[m]["log_joint_gap_max"]) == 0.0 for g in gaps for m, *_ in _METHODS if
                  float(g["orthogonality_defect"]) < _ZERO_DEFECT]
    if exact_zero and all(exact_zero):
        axes[1].annotate("Eq 11: gaps exactly 0", xy=(0, 0), xytext=(0.04, 0.3), textcoords="axes fraction",
                         fontsize=8, arrowprops={"arrowstyle": "->", "color": "0.3"})
    return finish_figure(fig, path, title)


_ZERO_DEFECT = 1e-20  # relative defects below this are Eq 11 up to rounding (squared cosines ~ eps^2)
_DEFECT_TICKS = (0.0, 0.01, 0.03, 0.06, 0.1, 0.15, 0.2, 0.3, 0.45, 0.6, 0.8, 1.0)


def _running_median(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Median over a window of neighbours (points sorted by defect x): a guide for the eye across seeds.

    Layers with defect exactly 0 (Eq 11 to rounding) form their own window, so the line does not smear the
    exact zeros of orthogonal layers into their non-orthogonal neighbours."""
    zero = x < _ZERO_DEFECT
    out = np.empty_like(y)
    for mask in (zero, ~zero):
        v = y[mask]
        w = max(1, len(v) // 8)
        out[mask] = [np.median(v[max(0, i - w):i + w + 1]) for i in range(len(v))]
    return out


def _check_panels(draws: Any, exact: Any, mean_field: Any,
                  titles: Sequence[str] | str | None) -> tuple[list, list, list, Sequence[str] | None]:
    if not isinstance(draws, Sequence):
        draws, exact, mean_field = [draws], [exact], [mean_field]
        titles = None if titles is None else [titles] if isinstance(titles, str) else titles
    if not draws or not (len(draws) == len(exact) == len(mean_field)):
        raise ValueError(f"draws: expected as many draws, exact and mean_field panels, got {len(draws)}, {len(exact)}, "
                         f"{len(mean_field)}")
    if titles is not None and len(titles) != len(draws):
        raise ValueError(f"titles: expected one per panel ({len(draws)}), got {len(titles)}")
    return list(draws), list(exact), list(mean_field), titles


def plot_marginal_forest(draws: az.InferenceData | Sequence[az.InferenceData],
                         exact: npt.ArrayLike | Sequence[npt.ArrayLike],
                         mean_field: npt.ArrayLike | Sequence[npt.ArrayLike], path: str | os.PathLike | None = None, *,
                         region: int = 1,
                         titles: Sequence[str] | str | None = None, title: str | None = None,
                         unit_label: str = "unit") -> Figure:
    """Forest plot of the posterior marginals ``p(t_k = region | x_n)``: exact, sampled and mean field.

    For every input n and unit k (one row each), three estimates of the factorial mixture's (Eq 10) posterior
    marginal: exact enumeration (black cross), the frequency in posterior draws +-2 MCSE (blue bar,
    :func:`marginal_frequencies`) and mean field's ``q_k`` (orange circle); under Eq 11 the three coincide.

    :param draws: ``InferenceData`` with ``posterior["t"]`` ``(chain, draw, N, K)``, or a list of them (one
        panel each, side by side).
    :param exact: exact marginals ``(N, K, R)`` (:attr:`inference.factorial.FactorialPosterior.marginals`),
        or a list.
    :param mean_field: mean-field marginals ``(N, K, R)`` (:attr:`inference.factorial.MeanField.probs`), or a list.
    :param region: which region's probability to show (1: the active piece of a ReLU unit).
    :param titles: one title per panel.
    :returns: the matplotlib ``Figure``.
    """
    draws, exact, mean_field, titles = _check_panels(draws, exact, mean_field, titles)
    rows = []
    for i, (d, e, m) in enumerate(zip(draws, exact, mean_field, strict=True)):
        e = _array(e, f"exact[{i}]", 3)
        m = _array(m, f"mean_field[{i}]", 3)
        if e.shape != m.shape:
            raise ValueError(f"mean_field[{i}]: expected the shape of exact {e.shape}, got {m.shape}")
        n, k, r = e.shape
        if isinstance(region, bool) or not isinstance(region, int) or not 0 <= region < r:
            raise ValueError(f"region: expected an integer in [0, {r}), got {region!r}")
        freq, mcse = marginal_frequencies(d, r)
        if freq.shape != e.shape:
            raise ValueError(f"draws[{i}]: posterior['t'] covers {freq.shape[:2]} (example, unit), exact has {(n, k)}")
        rows.append((freq[..., region], mcse[..., region], e[..., region], m[..., region]))
    n, k = rows[0][0].shape
    fig, axes = plt.subplots(1, len(rows), figsize=(5.0 * len(rows), 0.8 + 0.28 * n * k), sharey=True, squeeze=False)
    y = np.arange(n * k)[::-1] + np.repeat(np.arange(n)[::-1], k) * 0.6  # a gap between inputs
    labels = [f"x{i}, {unit_label} {j}" for i in range(n) for j in range(k)]
    for p, (ax, (freq, mcse, e, m)) in enumerate(zip(axes[0], rows, strict=True)):
        if freq.shape != (n, k):
            raise ValueError(f"draws[{p}]: every panel needs the same (example, unit) shape {(n, k)}")
        ax.errorbar(freq.ravel(), y, xerr=2 * mcse.ravel(), fmt="|", color="C0", ms=10, capsize=3,
                    label="posterior draws (±2 MCSE)")
        ax.scatter(e.ravel(), y, marker="x", color="k", s=40, zorder=3, label="exact (enumeration)")
        ax.scatter(m.ravel(), y, marker="o", facecolors="none", edgecolors="C1", s=55, lw=1.4, zorder=3,
                   label="mean field q")
        ax.set_xlim(-0.04, 1.04)
        ax.set_xlabel(f"p(t_k = {region} | x)")
        ax.grid(alpha=0.3, axis="x")
        for i in range(1, n):
            ax.axhline(y[i * k] + 0.8, color="0.7", lw=0.6)
        if titles is not None:
            ax.set_title(titles[p])
    axes[0][0].set_yticks(y)
    axes[0][0].set_yticklabels(labels, fontsize=8)
    axes[0][0].set_ylabel(f"input, {unit_label}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    return finish_figure(fig, path, title, tight=(0, 0.3 / fig.get_figheight(), 1, 1))


def plot_configuration_posterior(configs: npt.ArrayLike, exact: npt.ArrayLike, mean_field: npt.ArrayLike,
                                 path: str | os.PathLike | None = None, *,
                                 draws: Any = None, top: int | None = 12, titles: Sequence[str] | str | None = None,
                                 title: str | None = None) -> Figure:
    """Joint posterior over configurations of one input per panel: exact against mean field's product.

    When Eq 11 fails the factorial mixture's posterior (Eq 10) couples the units (explaining away), which a
    product ``prod_k q_k(t_k)`` cannot match; under Eq 11 it is such a product and mean field is exact.

    :param configs: the configurations ``(C, K)`` in code order
        (:attr:`inference.factorial.FactorialPosterior.configs`).
    :param exact: exact posterior probabilities of the configurations, ``(P, C)`` (one row per panel) or ``(C,)``.
    :param mean_field: mean-field marginals ``(P, K, R)`` or ``(K, R)``; the product is
        :func:`mean_field_configuration_probs`.
    :param draws: optional ``InferenceData`` with ``posterior["t"]`` ``(chain, draw, P, K)``: the frequencies of
        the configurations in the draws are drawn too.
    :param top: show the ``top`` configurations most probable under the exact posterior (None: all).
    :param titles: one per panel.
    :returns: the matplotlib ``Figure``.
    """
    configs = _array(configs, "configs", 2).astype(np.int64)
    exact = _array(exact, "exact", 1) if np.ndim(exact) == 1 else _array(exact, "exact", 2)
    mf = _array(mean_field, "mean_field", 2) if np.ndim(mean_field) == 2 else _array(mean_field, "mean_field", 3)
    exact = exact[None] if exact.ndim == 1 else exact
    mf = mf[None] if mf.ndim == 2 else mf
    P, C = exact.shape
    K = configs.shape[1]
    if configs.shape[0] != C:
        raise ValueError(f"configs: expected one row per column of exact ({C}), got {configs.shape[0]}")
    if mf.shape[:2] != (P, K):
        raise ValueError(f"mean_field: expected (P, K, R) = ({P}, {K}, R), got {mf.shape}")
    R = mf.shape[2]
    if R**K != C or not np.array_equal(_codes(configs, R), np.arange(C)):
        raise ValueError("configs: expected all R^K configurations in code order (inference.factorial.configurations)")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ValueError(f"top: expected a positive integer or None, got {top!r}")
    if isinstance(titles, str):
        titles = [titles]
    if titles is not None and len(titles) != P:
        raise ValueError(f"titles: expected one per panel ({P}), got {len(titles)}")
    q = mean_field_configuration_probs(mf)
    sampled = None
    if draws is not None:
        sampled = configuration_frequencies(draws, R)
        if sampled.shape != (P, C):
            raise ValueError(f"draws: expected draws of {P} inputs and {K} units, got configuration frequencies "
                             f"of shape {sampled.shape}")
    show = C if top is None else min(top, C)
    ncols = min(P, 2)
    nrows = -(-P // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(5.0, 0.42 * show + 1.5) * ncols, 4.4 * nrows), squeeze=False)
    for ax in axes.ravel()[P:]:
        ax.set_visible(False)
    width = 0.27 if sampled is not None else 0.4
    for p, ax in enumerate(axes.ravel()[:P]):
        idx = np.argsort(-exact[p], kind="stable")[:show]
        xs = np.arange(show)
        ax.bar(xs - width, exact[p, idx], width, color="0.2", label="exact p(t | x)")
        if sampled is not None:
            ax.bar(xs, sampled[p, idx], width, color="C0", label="posterior draws")
        ax.bar(xs + (width if sampled is not None else 0), q[p, idx], width, color="C1",
               label="mean field prod_k q_k(t_k)")
        ax.set_xticks(xs)
        ax.set_xticklabels(["".join(str(v) for v in configs[c]) for c in idx], rotation=60, fontsize=8,
                           family="monospace")
        ax.set_xlabel("configuration t = (t_0 ... t_K-1)" if K > 1 else "region t_0")
        ax.set_ylabel("probability")
        ax.grid(alpha=0.3, axis="y")
        rest_exact, rest_q = 1 - exact[p, idx].sum(), 1 - q[p, idx].sum()
        note = f"not shown: exact {rest_exact:.2f}, mean field {rest_q:.2f}" if show < C else None
        ax.set_title((titles[p] if titles is not None else f"input {p}") + (f"\n({note})" if note else ""),
                     fontsize=10)
    axes[0][0].legend(fontsize=8)
    return finish_figure(fig, path, title)
