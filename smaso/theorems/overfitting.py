"""Over-fitting from finite samples (framework paper §5.3, Eq 14-17; ``docs/theory.md`` §1.11 has the
argument, the functions and the departures).

The paper's example as a ladder (:func:`overfitting_ladder`): the label y = z_omega = z_alpha (Eq 14) has
two child regions with one Gaussian leaf each, alpha barely separable, gamma easily separable and
independent of the label.  Eq 15: :func:`spurious_correlation`; Eq 16-17: :func:`update_magnitudes`,
:func:`update_curve`, :func:`update_crossing` (:func:`crossing_over_inits`: over initialization seeds); SGD's
perturbed P_hat: :func:`minibatch_tv`.  Over training rather than at the first step, with a control ladder, the
paper's second explanation and SGD: :func:`overfitting_curve`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import torch
import torch.nn.functional as F
from scipy import stats as sps
from scipy.special import gammaln

from smaso import _ladder_parts
from smaso.plots._base import finish_figure, plt
from smaso.student.frequency import collect_statistics
from smaso.student.network import LadderStudent
from smaso.theorems.conditions import _positive_int
from teachers.emission import GaussianEmission
from teachers.ladder import Ladder
from teachers.sampling import LadderSample, sample_ladder

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["ALPHA", "CONTROL_LADDER", "CROSSING_LADDER", "GAMMA", "TRAINING_LADDER", "crossing_over_inits",
           "default_student", "expected_abs_eps", "minibatch_tv", "overfitting_curve", "overfitting_ladder",
           "plot_overfitting", "spurious_correlation", "update_crossing", "update_curve",
           "update_magnitudes", "wilson_interval"]

#: Indices of the two child regions within level 1 of :func:`overfitting_ladder`.
ALPHA, GAMMA = 0, 1


def _positive(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name}: expected a positive number, got {value!r}")
    value = float(value)
    if not value > 0 or not math.isfinite(value):
        raise ValueError(f"{name}: expected a positive finite number, got {value!r}")
    return value


def overfitting_ladder(*, alpha_separation: float = 0.1, alpha_sigma: float = 1.0, gamma_separation: float = 2.0,
                       gamma_sigma: float = 0.1, dim: int = 1) -> Ladder:
    """The §5.3 example (Eq 14-15) as a bottom-up ladder of depth 2.

    Regions ``omega`` (label) -> ``alpha``, ``gamma`` (level 1, binary events) -> one leaf each
    (``x_alpha``, ``x_gamma``, binary events).  Leaf events are uniform and independent; each
    level-1 event equals its leaf's event, and y = z_alpha whatever z_gamma (``lookup[0] =
    [0, 0, 1, 1]`` with code = 2 z_alpha + z_gamma).  So P(y | z_alpha) is the identity (Eq 14)
    and z_gamma is independent of y.

    Leaf region r emits x ~ N(+-separation_r / 2 * u, sigma_r^2 I) (u = the unit diagonal of
    R^dim, sign by the event).  Defaults: alpha barely separable (0.1 apart, sigma 1: per-event
    feature means nearly equal, Eq 16), gamma easily separable (2 apart, sigma 0.1, Eq 17).
    """
    a_sep, a_sig = _positive(alpha_separation, "alpha_separation"), _positive(alpha_sigma, "alpha_sigma")
    g_sep, g_sig = _positive(gamma_separation, "gamma_separation"), _positive(gamma_sigma, "gamma_sigma")
    dim = _positive_int(dim, "dim")
    u = torch.ones(dim, dtype=torch.float64) / math.sqrt(dim)
    sign = torch.tensor([-0.5, 0.5], dtype=torch.float64)[:, None]
    means = torch.stack([a_sep * sign * u, g_sep * sign * u])  # (R=2, m=2, dim)
    emission = GaussianEmission(means, torch.tensor([a_sig, g_sig], dtype=torch.float64))
    return Ladder((2, 1), (2, 2, 2), mode="bottomup", leaf_prior=[0.5, 0.5],
                  lookup=[[0, 0, 1, 1], [0, 1]], emission=emission, name="overfitting-5.3",
                  region_names=["omega", "alpha", "gamma", "x_alpha", "x_gamma"])


def _check_sample(sample: object) -> LadderSample:
    if not isinstance(sample, LadderSample):
        raise ValueError(f"sample: expected a LadderSample (teachers.sampling.sample_ladder), "
                         f"got {type(sample).__name__}")
    lad = sample.ladder
    if lad.depth < 1 or lad.num_regions[1] != 2 or lad.events[0] != 2 or lad.events[1] != 2:
        raise ValueError("sample: expected a ladder with a binary label and two binary child regions "
                         f"(alpha, gamma) at level 1, as overfitting_ladder() builds; got {lad!r} with "
                         f"events {list(lad.events)} and regions {list(lad.num_regions)}")
    if len(sample) == 0:
        raise ValueError("sample: no examples")
    return sample


def spurious_correlation(sample: LadderSample) -> dict:
    """Empirical spurious correlation of the irrelevant region gamma with the label (§5.3, Eq 15).

    :returns: ``eps`` = P_hat(y=1 | z_gamma=1) - 1/2 (Eq 15's one-sided definition),
        ``eps_sym`` = (P_hat(y=1 | z_gamma=1) - P_hat(y=1 | z_gamma=0)) / 2 (the sign-symmetric
        version: Eq 15 with both conditionals at once; equals ``eps`` when the sample happens to
        satisfy Eq 15 exactly), and the counts ``n1``, ``n0`` of z_gamma = 1, 0.  A conditional
        with no example is NaN (probability 2^(1-N) for the default ladder).
    """
    s = _check_sample(sample)
    y = s.y
    zg = s.events(1)[:, GAMMA]
    n1, n0 = int((zg == 1).sum()), int((zg == 0).sum())
    p1 = float(y[zg == 1].double().mean()) if n1 else math.nan
    p0 = float(y[zg == 0].double().mean()) if n0 else math.nan
    return {"N": len(s), "eps": p1 - 0.5, "eps_sym": (p1 - p0) / 2, "n1": n1, "n0": n0}


def expected_abs_eps(n: int) -> dict:
    """E|eps| of Eq 15 for N examples when y and z_gamma are independent fair coins (§5.3).

    ``eps``: exact.  Given n1 = #{z_gamma = 1} ~ Bin(N, 1/2) (conditioned on n1 >= 1),
    K = #{y = 1, z_gamma = 1} ~ Bin(n1, 1/2) and E|eps| = E[MAD(n1) / n1] with the binomial mean
    absolute deviation MAD(n) = E|K - n/2| = 2 (1/2)^(n+1) (k+1) C(n, k+1), k = floor(n/2).
    For large N, sqrt(N) E|eps| -> 1/sqrt(pi) ~ 0.564 (P_hat has sd 1/(2 sqrt(n1)), n1 ~ N/2).

    ``eps_sym``: normal approximation given (n1, n0): sd^2 = (1/n1 + 1/n0) / 16, averaged over
    n1 ~ Bin(N, 1/2) with both cells non-empty; sqrt(N) E|eps_sym| -> 1/sqrt(2 pi) ~ 0.399.
    """
    n = _positive_int(n, "n")
    k1 = np.arange(1, n + 1)
    logw = gammaln(n + 1) - gammaln(k1 + 1) - gammaln(n - k1 + 1) - n * math.log(2)
    w = np.exp(logw)
    k = np.floor(k1 / 2)
    log_mad = math.log(2) + (k1 + 1) * math.log(0.5) + np.log(k + 1) + gammaln(k1 + 1) - gammaln(k + 2) \
        - gammaln(k1 - k)
    eps = float((w * np.exp(log_mad) / k1).sum() / w.sum())
    if n >= 2:
        k1 = np.arange(1, n)
        w2 = w[:-1]
        sd = np.sqrt((1 / k1 + 1 / (n - k1)) / 16)
        eps_sym = float(math.sqrt(2 / math.pi) * (w2 * sd).sum() / w2.sum())
    else:
        eps_sym = math.nan
    return {"N": n, "eps": eps, "eps_sym": eps_sym}


def default_student(ladder: Ladder, *, width: int = 8, seed: int = 0) -> LadderStudent:
    """The §5.3 student: ReLU hidden level of ``width`` nodes per region, float64, random
    hidden weights (``seed``), and zero top weights and biases, so that with cross entropy the
    first step's top gradient is g_0 = onehot(y) - 1/2: a function of the label only, as Eq 16-17
    assume."""
    st = LadderStudent(ladder, _positive_int(width, "width"), seed=seed, dtype=torch.float64)
    assert st.biases is not None, "LadderStudent's default is bias=True"
    with torch.no_grad():
        st.weights[0].zero_()
        st.biases[0].zero_()
    return st


def _as_list(branching: tuple[int, ...] | None) -> list[int] | None:
    """A branching as a list for a message; None for a ladder that is not a uniform tree."""
    return None if branching is None else list(branching)


def _check_student(student: object, ladder: Ladder) -> LadderStudent:
    if not isinstance(student, LadderStudent):
        raise ValueError(f"student: expected a LadderStudent, got {type(student).__name__}")
    sl = student.ladder
    if (sl.branching, sl.events, sl.emission.dim) != (ladder.branching, ladder.events, ladder.emission.dim):
        raise ValueError(f"student: built for a ladder with branching {_as_list(sl.branching)}, events "
                         f"{list(sl.events)}, input dim {sl.emission.dim}; the sample's ladder has "
                         f"{_as_list(ladder.branching)}, {list(ladder.events)}, {ladder.emission.dim}")
    return student


def update_magnitudes(sample: LadderSample, student: LadderStudent | None = None, *, width: int = 8,
                      init_seed: int = 0, loss: str = "cross_entropy") -> dict:
    """First-step weight updates into the top nodes from alpha and from gamma (§5.3, Eq 16-17).

    Runs :func:`~smaso.student.frequency.collect_statistics` (full batch, float64) on the sample and
    returns the Frobenius norms of Delta W_{alpha, omega} and Delta W_{gamma, omega}
    (``dW[0][ALPHA]``, ``dW[0][GAMMA]``: E_x[f_child g_0], Eq 2), their ratio gamma / alpha, and
    the feature distinctiveness per region, |F(z=1) - F(z=0)| (norm over the region's nodes of
    the per-event mean activations: ~0 for alpha, Eq 16; large for gamma, Eq 17).

    :param student: a :class:`LadderStudent` of a ladder shaped like the sample's (used as is);
        default :func:`default_student` with ``width`` and ``init_seed``.
    """
    s = _check_sample(sample)
    lad = s.ladder
    if lad.depth != 2:
        raise ValueError(f"sample: expected a depth-2 ladder (label, alpha/gamma, leaves), got depth {lad.depth}")
    st = default_student(lad, width=width, seed=init_seed) if student is None else _check_student(student, lad)
    x = s.inputs(dtype=st.weights[0].dtype)
    stats = collect_statistics(st, x, s.y, s.z.long(), loss=loss, dtype=torch.float64)
    dW = stats.dW[0]  # (R_1, n_1, n_0)
    F1 = stats.mean_at("Fbar", 1)  # (R_1, m_1, n_1); rows of unseen events are 0
    sep = (F1[:, 1] - F1[:, 0]).norm(dim=-1)
    a, g = float(dW[ALPHA].norm()), float(dW[GAMMA].norm())
    return {"N": len(s), "dW_alpha": a, "dW_gamma": g, "ratio": g / a if a > 0 else math.inf,
            "feature_sep_alpha": float(sep[ALPHA]), "feature_sep_gamma": float(sep[GAMMA])}


def _chunks(ladder: Ladder, n: int, reps: int, seed: int) -> Iterator[LadderSample]:
    """``reps`` independent samples of ``n`` examples: disjoint consecutive slices of one
    stream of n * reps i.i.d. examples."""
    big = sample_ladder(ladder, n * reps, seed)
    for r in range(reps):
        sl = slice(r * n, (r + 1) * n)
        yield LadderSample(ladder, big.z[sl], None if big.x is None else big.x[sl], seed=seed, start=r * n)


def update_curve(ns: Sequence[int], *, ladder: Ladder | None = None, student: LadderStudent | None = None,
                 reps: int = 20, width: int = 8, init_seed: int = 0, seed: int = 0) -> list[dict]:
    """Sweep of §5.3 over sample sizes N: per N, the means over ``reps`` independent samples of
    |eps|, |eps_sym| (Eq 15), |Delta W_alpha| and |Delta W_gamma| (Eq 16-17) at one fixed
    initialization (``student`` or :func:`default_student`), and ``ratio`` = mean
    |Delta W_gamma| / mean |Delta W_alpha|; ``expected_eps`` from :func:`expected_abs_eps`.
    Samples with an empty z_gamma cell are left out of the eps means (``eps_dropped``)."""
    lad = overfitting_ladder() if ladder is None else ladder
    reps = _positive_int(reps, "reps")
    ns = [_positive_int(n, "ns[]") for n in ns]
    if not ns:
        raise ValueError("ns: expected at least one sample size")
    st = default_student(lad, width=width, seed=init_seed) if student is None else _check_student(student, lad)
    rows = []
    for i, n in enumerate(ns):
        eps, eps_sym, a, g = [], [], [], []
        for chunk in _chunks(lad, n, reps, seed * 1_000_003 + i):
            e = spurious_correlation(chunk)
            eps.append(abs(e["eps"]))
            eps_sym.append(abs(e["eps_sym"]))
            u = update_magnitudes(chunk, st)
            a.append(u["dW_alpha"])
            g.append(u["dW_gamma"])
        a_m, g_m = float(np.mean(a)), float(np.mean(g))
        rows.append({"N": n, "reps": reps, "abs_eps": float(np.nanmean(eps)), "abs_eps_sym": float(np.nanmean(eps_sym)),
                     "eps_dropped": int(np.isnan(eps_sym).sum()), "expected_eps": expected_abs_eps(n)["eps"],
                     "dW_alpha": a_m, "dW_gamma": g_m, "ratio": g_m / a_m if a_m > 0 else math.inf,
                     "dW_alpha_sd": float(np.std(a)), "dW_gamma_sd": float(np.std(g))})
    return rows


class _LadderParams(TypedDict, total=False):
    """Keyword arguments of :func:`overfitting_ladder`."""

    alpha_separation: float
    alpha_sigma: float
    gamma_separation: float
    gamma_sigma: float
    dim: int


#: Ladder parameters of the regime where :func:`update_crossing` shows the §5.3 headline with the
#: default student (``init_seed=0``, width 8): alpha 0.3 apart at sigma 1 (separation / noise 0.3),
#: gamma 4 apart at sigma 0.1 (separation / noise 40).
CROSSING_LADDER: _LadderParams = {"alpha_separation": 0.3, "alpha_sigma": 1.0, "gamma_separation": 4.0,
                                  "gamma_sigma": 0.1}


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion k / n (``z`` = 1.96: 95%)."""
    n = _positive_int(n, "n")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= n:
        raise ValueError(f"k: expected an integer in [0, {n}], got {k!r}")
    z = _positive(z, "z")
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    # at k = 0 (k = n) the lower (upper) end is exactly 0 (1); the formula leaves roundoff there
    return 0.0 if k == 0 else max(0.0, mid - half), 1.0 if k == n else min(1.0, mid + half)


def _log_interp_crossing(ns: Sequence[float], values: Sequence[float], level: float) -> float:
    """First N at which ``values`` (one per N) go from >= level to < level, interpolated linearly in
    log N; NaN if they never do (or start below ``level``)."""
    if not values or not values[0] >= level:
        return math.nan
    for (n0, v0), (n1, v1) in zip(zip(ns, values, strict=True), zip(ns[1:], values[1:], strict=True), strict=False):
        if v1 < level:
            t = (v0 - level) / (v0 - v1) if v0 != v1 else 0.0
            return float(math.exp(math.log(n0) + t * (math.log(n1) - math.log(n0))))
    return math.nan


def _population_moments(student: LadderStudent, ladder: Ladder, n: int, seed: int) -> dict:
    """Per-example moments of the first-step update into the top from alpha and gamma:
    mu_r = E[f_r g_0^T] (n_1, n_0) and nu_r = E[|f_r|^2 |g_0|^2], from ``n`` fresh examples."""
    s = sample_ladder(ladder, n, seed)
    rec = student.forward_backward(s.inputs(dtype=student.weights[0].dtype), s.y, loss="cross_entropy")
    g0 = rec.g[0][:, 0].double()  # (N, n_0)
    out = {}
    for name, r in (("alpha", ALPHA), ("gamma", GAMMA)):
        f = rec.fbar[1][:, r].double()  # (N, n_1)
        out[f"mu2_{name}"] = float((f.T @ g0 / n).pow(2).sum())
        out[f"nu_{name}"] = float((f.pow(2).sum(1) * g0.pow(2).sum(1)).mean())
    return out


#: update_crossing's and crossing_over_inits' default grid of N, 8 .. 4096.  A module constant, not the
#: comprehension in the signature: mypy reports a comprehension's variable in a default as undefined
#: (python/mypy#9346).
_CROSSING_NS = tuple(2 ** k for k in range(3, 13))


def update_crossing(ns: Sequence[int] = _CROSSING_NS, *, ladder: Ladder | None = None,
                    student: LadderStudent | None = None, reps: int = 100, width: int = 8, init_seed: int = 0,
                    seed: int = 0, z: float = 1.96, moment_examples: int = 2 ** 17) -> dict:
    """Where the irrelevant region's first-step update stops beating the relevant one's (§5.3).

    For each repeat r in ``range(reps)`` one i.i.d. stream of sum(ns) examples is drawn from
    ``ladder`` (default ``overfitting_ladder(**CROSSING_LADDER)``) with stream seed
    ``seed * 1_000_003 + r`` and cut into disjoint slices of the sizes in ``ns`` (rows for different N
    are independent).  On each slice the first-step update Delta W_{r, omega} = E_hat[f_r g_0^T]
    (``rec.dW[0][r]``, (width, 2), full batch, cross entropy) of one fixed student (``student`` or
    :func:`default_student` with ``width``, ``init_seed``) is taken for r = alpha and gamma, and its
    Frobenius norm |Delta W_r| recorded.

    Prediction (exact for i.i.d. examples without batch norm): E|Delta W_r|^2 = |mu_r|^2 + (nu_r - |mu_r|^2) / N
    with mu_r = E[f_r g_0^T] and nu_r = E[|f_r|^2 |g_0|^2], estimated on ``moment_examples`` fresh examples
    (stream seed ``seed * 1_000_003 + reps``); mu_gamma ~ 0 (gamma is independent of the label), so gamma's
    update is sampling noise ~ 1/sqrt(N).  The predicted rms ratio rho(N) crosses 1 at
    N* = (nu_gamma - nu_alpha + |mu_alpha|^2 - |mu_gamma|^2) / (|mu_alpha|^2 - |mu_gamma|^2); if
    nu_gamma <= nu_alpha - |mu_alpha|^2 there is no crossing: alpha wins at every N.

    :returns: dict with ``rows`` (one per N, in the order of ``ns``): ``N``, ``reps``,
        ``gamma_wins`` (repeats with |Delta W_gamma| > |Delta W_alpha|), ``frac`` and its Wilson
        interval ``frac_lo``, ``frac_hi`` (level set by ``z``), ``ratio_gmean`` (geometric mean of
        the per-repeat ratio |Delta W_gamma| / |Delta W_alpha|) with ``ratio_lo``, ``ratio_hi``
        (normal interval of the mean log ratio, z standard errors), ``rms_ratio``
        (sqrt(mean |Delta W_gamma|^2 / mean |Delta W_alpha|^2)), ``predicted_ratio`` (rho(N)),
        ``abs_eps_sym`` (mean |eps_sym|, Eq 15, NaN-free repeats), ``expected_eps_sym``
        (:func:`expected_abs_eps`); ``crossing_N`` (first N where ``frac`` drops below 1/2,
        interpolated in log N; NaN if it does not), ``crossing_N_rms`` (same for ``rms_ratio``
        through 1), ``bracket`` ((largest N whose interval lies wholly above 1/2 before any row
        lies wholly below, smallest N whose interval lies wholly below 1/2); None where absent),
        ``predicted_crossing_N`` (N*, NaN if none), the moments ``mu2_alpha``, ``nu_alpha``,
        ``mu2_gamma``, ``nu_gamma``, and the seeds that drew the data: ``stream_seeds`` (one per repeat) and
        ``moment_seed`` (the moments' sample), so that a recorded table names every stream it came from.
    """
    lad = overfitting_ladder(**CROSSING_LADDER) if ladder is None else ladder
    reps = _positive_int(reps, "reps")
    ns = [_positive_int(n, "ns[]") for n in ns]
    if not ns:
        raise ValueError("ns: expected at least one sample size")
    if ns != sorted(set(ns)):
        raise ValueError(f"ns: expected strictly increasing sample sizes, got {ns}")
    z = _positive(z, "z")
    moment_examples = _positive_int(moment_examples, "moment_examples")
    st = default_student(lad, width=width, seed=init_seed) if student is None else _check_student(student, lad)
    if st.batch_norm:
        raise ValueError("student: batch norm couples the examples; update_crossing needs a student without it")
    dtype = st.weights[0].dtype
    starts = np.concatenate([[0], np.cumsum(ns)])
    a = np.empty((len(ns), reps))
    g = np.empty((len(ns), reps))
    eps = np.full((len(ns), reps), math.nan)
    streams, moment_seed = [seed * 1_000_003 + r for r in range(reps)], seed * 1_000_003 + reps
    for r, stream in enumerate(streams):
        big = sample_ladder(lad, int(starts[-1]), stream)
        # one pass over the whole stream: without BN each example's f and g_0 do not depend on the
        # others, so a slice's Delta W_r = sum over the slice of f_r g_0^T / N (= rec.dW[0][r] of
        # that slice alone, as update_magnitudes computes it)
        rec = st.forward_backward(big.inputs(dtype=dtype), big.y, loss="cross_entropy")
        g0 = rec.g[0][:, 0].double()  # (sum(ns), n_0)
        f1 = rec.fbar[1].double()  # (sum(ns), R_1, n_1)
        for i, n in enumerate(ns):
            sl = slice(int(starts[i]), int(starts[i + 1]))
            dw = torch.einsum("nrk,nc->rkc", f1[sl], g0[sl]) / n  # (R_1, n_1, n_0)
            a[i, r] = float(dw[ALPHA].norm())
            g[i, r] = float(dw[GAMMA].norm())
            chunk = LadderSample(lad, big.z[sl], None if big.x is None else big.x[sl])
            eps[i, r] = abs(spurious_correlation(chunk)["eps_sym"])
    mom = _population_moments(st, lad, moment_examples, moment_seed)
    rows = []
    for i, n in enumerate(ns):
        wins = int((g[i] > a[i]).sum())
        lo, hi = wilson_interval(wins, reps, z)
        with np.errstate(divide="ignore"):
            logr = np.log(g[i]) - np.log(a[i])
        finite = np.isfinite(logr)
        lm = float(logr[finite].mean()) if finite.any() else math.nan
        se = float(logr[finite].std(ddof=1) / math.sqrt(finite.sum())) if finite.sum() > 1 else math.nan
        ea2 = mom["mu2_alpha"] + (mom["nu_alpha"] - mom["mu2_alpha"]) / n
        eg2 = mom["mu2_gamma"] + (mom["nu_gamma"] - mom["mu2_gamma"]) / n
        rows.append({"N": n, "reps": reps, "gamma_wins": wins, "frac": wins / reps, "frac_lo": lo, "frac_hi": hi,
                     "ratio_gmean": math.exp(lm), "ratio_lo": math.exp(lm - z * se), "ratio_hi": math.exp(lm + z * se),
                     "rms_ratio": float(math.sqrt(np.mean(g[i] ** 2) / np.mean(a[i] ** 2))),
                     "predicted_ratio": math.sqrt(eg2 / ea2),
                     "abs_eps_sym": float(np.nanmean(eps[i])) if np.isfinite(eps[i]).any() else math.nan,
                     "expected_eps_sym": expected_abs_eps(n)["eps_sym"]})
    den = mom["mu2_alpha"] - mom["mu2_gamma"]
    num = mom["nu_gamma"] - mom["mu2_gamma"] - mom["nu_alpha"] + mom["mu2_alpha"]
    pred = num / den if den > 0 and num > 0 else math.nan
    above = below = None
    for row in rows:
        if row["frac_hi"] < 0.5:
            below = row["N"]
            break
        if row["frac_lo"] > 0.5:
            above = row["N"]
    return {"rows": rows, "crossing_N": _log_interp_crossing(ns, [r["frac"] for r in rows], 0.5),
            "crossing_N_rms": _log_interp_crossing(ns, [r["rms_ratio"] for r in rows], 1.0),
            "bracket": (above, below), "predicted_crossing_N": pred, **mom,
            "stream_seeds": streams, "moment_seed": moment_seed}


def minibatch_tv(sample: LadderSample, batch_sizes: Sequence[int], *, num_batches: int = 64, seed: int = 0) -> list:
    """SGD's perturbed P (§5.3): total-variation distance between the minibatch and full-data
    frequencies P_hat(z_omega, z_alpha, z_gamma) (the joint of the top events, whose marginals
    are the P_hat(z_alpha, z_beta) the reformulation's gradient reads), per batch size B.

    Batches are consecutive slices of random permutations of the sample (SGD epochs), at most
    ``num_batches`` per B.  ``predicted`` is the normal approximation
    1/2 sum_k sqrt(2/pi) sqrt(p_k (1 - p_k) / B * (N - B) / (N - 1)) (sampling without
    replacement), ~ 1/sqrt(B).
    """
    s = _check_sample(sample)
    n = len(s)
    num_batches = _positive_int(num_batches, "num_batches")
    bss = [_positive_int(b, "batch_sizes[]") for b in batch_sizes]
    if not bss:
        raise ValueError("batch_sizes: expected at least one batch size")
    if max(bss) > n:
        raise ValueError(f"batch_sizes: {max(bss)} exceeds the sample size {n}")
    z1 = s.events(1)
    code = s.y * 4 + z1[:, ALPHA] * 2 + z1[:, GAMMA]  # joint code of (y, z_alpha, z_gamma), in [0, 8)
    full = torch.bincount(code, minlength=8).double() / n
    g = torch.Generator().manual_seed(int(seed))
    rows = []
    for b in bss:
        tvs: list[float] = []
        while len(tvs) < num_batches:
            perm = torch.randperm(n, generator=g)
            for j in range(n // b):
                if len(tvs) == num_batches:
                    break
                p = torch.bincount(code[perm[j * b:(j + 1) * b]], minlength=8).double() / b
                tvs.append(0.5 * float((p - full).abs().sum()))
        fpc = (n - b) / (n - 1) if n > 1 else 0.0
        pred = 0.5 * math.sqrt(2 / math.pi) * float(torch.sqrt(full * (1 - full) / b * fpc).sum())
        rows.append({"batch_size": b, "tv": float(np.mean(tvs)), "predicted": pred, "batches": len(tvs)})
    return rows


def plot_overfitting(rows: Sequence[dict], path: str | os.PathLike | None = None, *,
                     tv_rows: Sequence[dict] | None = None) -> Figure:
    """Figure of §5.3: mean |Delta W_alpha|, |Delta W_gamma| and |eps| (Eq 15-17) against N on
    log-log axes with a 1/sqrt(N) guide, the ratio gamma / alpha, and (with ``tv_rows`` from
    :func:`minibatch_tv`) SGD's minibatch TV distance against B.  Written atomically when
    ``path`` is given; returns the figure."""
    rows = list(rows)
    if not rows or any(k not in r for r in rows for k in ("N", "dW_alpha", "dW_gamma", "abs_eps", "ratio")):
        raise ValueError("rows: expected the non-empty output of update_curve()")
    ns = np.array([r["N"] for r in rows], dtype=float)
    ncols = 3 if tv_rows else 2
    fig, axes = plt.subplots(1, ncols, figsize=(5.2 * ncols, 4.2))
    ax = axes[0]
    ax.loglog(ns, [r["dW_alpha"] for r in rows], "o-", label=r"$|\Delta W_\alpha|$ (relevant, barely separable)")
    ax.loglog(ns, [r["dW_gamma"] for r in rows], "s-", label=r"$|\Delta W_\gamma|$ (irrelevant, separable)")
    ax.loglog(ns, [r["abs_eps"] for r in rows], "^--", label=r"$|\epsilon|$ (Eq 15)")
    ax.loglog(ns, rows[0]["abs_eps"] * np.sqrt(ns[0] / ns), ":", color="gray", label=r"$\propto 1/\sqrt{N}$")
    ax.set_xlabel("training examples N")
    ax.set_ylabel("magnitude")
    ax.set_title("§5.3: first-step updates into the label")
    ax.legend(fontsize=7)
    ax = axes[1]
    ax.loglog(ns, [r["ratio"] for r in rows], "o-", color="C3")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("training examples N")
    ax.set_ylabel(r"$|\Delta W_\gamma| / |\Delta W_\alpha|$")
    ax.set_title("irrelevant / relevant update")
    if tv_rows:
        ax = axes[2]
        bs = [r["batch_size"] for r in tv_rows]
        ax.loglog(bs, [r["tv"] for r in tv_rows], "o-", label="measured")
        ax.loglog(bs, [r["predicted"] for r in tv_rows], ":", color="gray", label="normal approx.")
        ax.set_xlabel("batch size B")
        ax.set_ylabel(r"TV(minibatch $\hat P$, full $\hat P$)")
        ax.set_title("SGD: perturbed P")
        ax.legend(fontsize=7)
    return finish_figure(fig, path)


# ---------------------------------------------------------------------- §5.3 over training (not the first step)

#: The training measurement's ladder: alpha learnable but noisy (means 1 apart at sigma 1: Bayes error
#: Phi(-1/2) = 0.309), gamma irrelevant and easily separable (4 apart at sigma 0.1).
TRAINING_LADDER: _LadderParams = {"alpha_separation": 1.0, "alpha_sigma": 1.0, "gamma_separation": 4.0,
                                  "gamma_sigma": 0.1}
#: Its control: gamma as irrelevant but *not* easily separable (the same separation and noise as alpha), where
#: Eq 17's distinctive f_k(z_gamma) is absent.
CONTROL_LADDER: _LadderParams = {"alpha_separation": 1.0, "alpha_sigma": 1.0, "gamma_separation": 1.0,
                                 "gamma_sigma": 1.0}


def _contributions(student: LadderStudent, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The top output of a depth-2, one-leaf-per-child student split by child region: ``(bias (n_0,),
    contributions (N, R_1, n_0))`` with f_0 = bias + sum_r f_r W_{r, omega} (Eq 1 at the top, linear top)."""
    W1, W0 = student.weights[1], student.weights[0]  # (R_1, dim, n_1), (R_1, n_1, n_0)
    b1 = 0 if student.biases is None else student.biases[1]
    b0 = torch.zeros(W0.shape[-1], dtype=W0.dtype) if student.biases is None else student.biases[0][0]
    f1 = student.activation.apply_(torch.einsum("nrd,rdk->nrk", x, W1) + b1)
    return b0, torch.einsum("nrk,rkc->nrc", f1, W0)


def _logistic_loglik(u: torch.Tensor, y: torch.Tensor, ridge: float = 1e-3, iters: int = 30) -> torch.Tensor:
    """Maximized mean log-likelihood of y under P(y=1 | u) = sigmoid(a + b u), one fit per row: u, y ``(S, N)``
    (float64).  Newton's method on the 2-parameter model with a small ridge on b (keeps separable data finite)."""
    X = torch.stack([torch.ones_like(u), u], -1)  # (S, N, 2)
    theta = torch.zeros(u.shape[0], 2, dtype=u.dtype)
    reg = torch.diag(torch.tensor([0.0, ridge], dtype=u.dtype)) * u.shape[1]
    for _ in range(iters):
        p = torch.sigmoid((X @ theta[..., None])[..., 0])
        grad = (X * (y - p)[..., None]).sum(1) - theta @ reg
        H = torch.einsum("sni,snj,sn->sij", X, X, p * (1 - p)) + reg + 1e-12 * torch.eye(2, dtype=u.dtype)
        theta = theta + torch.linalg.solve(H, grad[..., None])[..., 0]
    logit = (X @ theta[..., None])[..., 0]
    return (y * F.logsigmoid(logit) + (1 - y) * F.logsigmoid(-logit)).mean(1)


def _t_interval(values: Sequence[float] | np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """Mean of ``values`` with its Student-t interval (NaN half-width for fewer than 2 values)."""
    v = np.asarray(values, dtype=float)
    m = float(v.mean())
    if v.size < 2:
        return m, math.nan, math.nan
    half = float(sps.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return m, m - half, m + half


def _checkpoints(steps: int, count: int) -> list[int]:
    """Step 0 and ``count - 1`` log-spaced steps up to ``steps`` (duplicates merged)."""
    return sorted({0, *np.rint(np.geomspace(1, steps, max(count - 1, 1))).astype(int).tolist()})


def _region_input(x: torch.Tensor, r: int) -> torch.Tensor:
    """Region r's leaf input projected on the emission's mean direction (the unit diagonal): ``(N,)``."""
    return x[:, r].sum(-1) / math.sqrt(x.shape[-1])


def _joint_code(s: LadderSample) -> torch.Tensor:
    """The joint event (y, z_alpha, z_gamma) of every example as a code in [0, 8)."""
    z1 = s.events(1)
    return s.y * 4 + z1[:, ALPHA] * 2 + z1[:, GAMMA]


def _population_joint(lad: Ladder) -> torch.Tensor:
    """Exact P(y, z_alpha, z_gamma) ``(8,)`` (code 4 y + 2 z_alpha + z_gamma) of a bottom-up depth-2 ladder with one
    binary leaf per level-1 region: the leaves are independent, each level-1 event a lookup of its leaf's."""
    lookups = _ladder_parts.lookups(lad)
    (pa, pg), (la, lg), top = _ladder_parts.leaf_priors(lad), lookups[1], lookups[0][0]
    p = torch.zeros(8, dtype=torch.float64)
    for a in range(2):
        for g in range(2):
            za, zg = int(la[a]), int(lg[g])
            p[4 * int(top[2 * za + zg]) + 2 * za + zg] += pa[a] * pg[g]
    return p


def _train_run(lad: Ladder, n: int, data_seed: int, init_seed: int, xt: torch.Tensor, yt: torch.Tensor, *,
               width: int, steps: int, lr: float, batch_size: int | None, ckpts: list[int],
               p_ref: torch.Tensor) -> dict:
    """One §5.3 training run (cross entropy, W += lr Delta W, Eq 2) with its records at the ``ckpts`` steps."""
    s = sample_ladder(lad, n, data_seed)
    p_hat = torch.bincount(_joint_code(s), minlength=8).double() / n
    tv_data = 0.5 * float((p_hat - p_ref).abs().sum())
    tv_batch = math.nan
    if batch_size is not None and batch_size < n:
        tv_batch = minibatch_tv(s, [batch_size], num_batches=64, seed=init_seed)[0]["tv"]
    x, y = s.inputs(dtype=torch.float64), s.y
    st = default_student(lad, width=width, seed=init_seed)
    gen = torch.Generator().manual_seed(init_seed)
    bs = n if batch_size is None else min(batch_size, n)
    order, pos = torch.arange(n), n
    out: dict[str, list[float]] = {k: [] for k in ("test_err", "test_err_ablated", "train_err", "w_alpha", "w_gamma")}
    for step in range(steps + 1):
        if step in ckpts:
            with torch.no_grad():
                b0, ct = _contributions(st, xt)
                _, cx = _contributions(st, x)
                # gamma's contribution replaced by its training mean: the network without its use of z_gamma
                ablated = b0 + ct[:, ALPHA] + cx[:, GAMMA].mean(0)
                out["test_err"].append(float(((b0 + ct.sum(1)).argmax(1) != yt).double().mean()))
                out["test_err_ablated"].append(float((ablated.argmax(1) != yt).double().mean()))
                out["train_err"].append(float(((b0 + cx.sum(1)).argmax(1) != y).double().mean()))
                out["w_alpha"].append(float(st.weights[0][ALPHA].norm()))
                out["w_gamma"].append(float(st.weights[0][GAMMA].norm()))
        if step == steps:
            break
        if bs < n:
            if pos + bs > n:
                order, pos = torch.randperm(n, generator=gen), 0
            idx = order[pos:pos + bs]
            pos += bs
            rec = st.forward_backward(x[idx], y[idx], "cross_entropy")
        else:
            rec = st.forward_backward(x, y, "cross_entropy")
        st.apply_update(rec, lr)
    yd = y.double()[None]
    ll_alpha = float(_logistic_loglik(_region_input(x, ALPHA)[None], yd)[0])
    ll_gamma = float(_logistic_loglik(_region_input(x, GAMMA)[None], yd)[0])
    eps = spurious_correlation(s)["eps_sym"]
    return {**out, "ll_alpha": ll_alpha, "ll_gamma": ll_gamma, "llr": ll_gamma - ll_alpha, "abs_eps_sym": abs(eps),
            "tv_data": tv_data, "tv_batch": tv_batch}


def overfitting_curve(ns: Sequence[int] = (8, 32, 128, 512, 2048), *, seeds: int = 20, steps: int = 3000,
                      lr: float = 0.5, width: int = 8, batch_size: int | None = None, ladder: Ladder | None = None,
                      test_examples: int = 20000, checkpoints: int = 13, seed: int = 0, level: float = 0.95) -> dict:
    """§5.3 over training: does the irrelevant, easily separable region's weight grow and hurt the test error at
    small N and not at large N?

    For every N in ``ns`` and every run s in ``range(seeds)``: a training set of N examples from ``ladder``
    (default ``overfitting_ladder(**TRAINING_LADDER)``; stream seed ``seed * 1_000_003 + 10_007 (i + 1) + s``,
    i = the index of N) and a fresh :func:`default_student` (width ``width``, init seed ``1000 seed + s``),
    trained for ``steps`` steps of W += lr Delta W (Eq 2, cross entropy; full batch, or minibatches of
    ``batch_size`` in reshuffled epochs: SGD).  At ``checkpoints`` log-spaced steps (and step 0) it records, on one
    held-out sample of ``test_examples`` (stream seed ``seed * 1_000_003``): the test error, the test error with
    gamma's contribution to the output replaced by its training-set mean (``test_err_ablated``: the same network
    without its use of z_gamma), the training error, and the Frobenius norms of the top weights from alpha and
    gamma (``w_alpha``, ``w_gamma``: the w_j, w_k of Eq 16-17).

    The paper's second explanation (§5.3): "there exists a second explanation: we could argue that z_gamma is a
    true but weak factor that contributes to the label, while z_alpha is a fictitious discriminative factor,
    since the appearance difference between z_alpha = 0 and z_alpha = 1 [...] could be purely due to noise and
    thus should be neglected.  With finite number of samples, these two cases are essentially indistinguishable.
    [...] For neural network, SGD prefers the second explanation but if under the pressure of training, it may
    also explore the first one by pushing gradient down to distinguish subtle difference in the input."  Computed
    per run on the training set alone: the maximized log-likelihood (nats per example) of the labels under a
    one-factor logistic model on gamma's input (``ll_gamma``: "gamma is a true weak factor") and on alpha's
    (``ll_alpha``: "label = z_alpha"), both 2-parameter fits; ``llr`` = ll_gamma - ll_alpha > 0 is a training
    set that favours the second explanation.  Whether it predicts the over-fitting: the Spearman correlation
    over runs, within each N, of ``llr`` with the harm (``test_err - test_err_ablated`` at the end).

    The section's "Gradient Descent: Stochastic or not?" paragraph: "SGD update with small batch size is
    equivalent to using a perturbed/noisy version of P(z_alpha, z_beta) at each iteration.  Such an approach
    naturally reduces aforementioned over-fitting issues".  Measured with ``batch_size`` (compare a full-batch
    call): per run ``tv_data``, the total-variation distance of the training set's P_hat(y, z_alpha, z_gamma) from
    the population's (exact), and ``tv_batch``, the
    mean distance of a minibatch's from the training set's (:func:`minibatch_tv`; NaN for full batch).

    :returns: dict with ``checkpoints`` (steps), ``bayes_err`` (Phi(-separation / (2 sigma)) of alpha, for a
        Gaussian ladder) and ``bayes_err_test`` (the Bayes rule's error on the held-out sample), ``rows`` (one
        per N: means over runs with ``level`` t-intervals ``*_lo``, ``*_hi`` of
        ``test_err_final``, ``test_err_best`` (the smallest over checkpoints), ``rise`` (final - best),
        ``train_err_final``, ``harm`` (final test_err - test_err_ablated), ``w_alpha``, ``w_gamma``, ``ratio``
        (geometric mean of w_gamma / w_alpha at the end, interval from the log), ``llr``; Wilson intervals of
        ``frac_harm`` (runs with harm > 0) and ``frac_second`` (runs with llr > 0); ``spearman_llr_harm``;
        ``abs_eps_sym``, ``tv_data``, ``tv_batch`` (means); and ``curve``: the per-checkpoint means over runs of
        each record) and ``runs`` (every run's
        records, for the JSON).
    """
    lad = overfitting_ladder(**TRAINING_LADDER) if ladder is None else ladder
    ns = [_positive_int(n, "ns[]") for n in ns]
    if not ns:
        raise ValueError("ns: expected at least one sample size")
    seeds, steps = _positive_int(seeds, "seeds"), _positive_int(steps, "steps")
    width, test_examples = _positive_int(width, "width"), _positive_int(test_examples, "test_examples")
    checkpoints = _positive_int(checkpoints, "checkpoints")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected an integer >= 0, got {seed!r}")
    lr = _positive(lr, "lr")
    if batch_size is not None:
        batch_size = _positive_int(batch_size, "batch_size")
    if not 0 < level < 1:
        raise ValueError(f"level: expected a confidence level in (0, 1), got {level!r}")
    if not isinstance(lad, Ladder) or lad.depth != 2 or list(lad.num_regions) != [1, 2, 2] or list(lad.events) != [
            2, 2, 2] or lad.leaf_priors is None:
        raise ValueError(f"ladder: expected a bottom-up ladder shaped like overfitting_ladder()'s (binary label, "
                         f"alpha and gamma, one binary leaf each), got {lad!r}")
    test = sample_ladder(lad, test_examples, seed * 1_000_003)
    xt, yt = test.inputs(dtype=torch.float64), test.y
    ckpts = _checkpoints(steps, checkpoints)
    z = float(sps.norm.ppf(0.5 + level / 2))
    p_ref = _population_joint(lad)
    rows, runs = [], []
    for i, n in enumerate(ns):
        rs = [_train_run(lad, n, seed * 1_000_003 + 10_007 * (i + 1) + s, 1000 * seed + s, xt, yt, width=width,
                         steps=steps, lr=lr, batch_size=batch_size, ckpts=ckpts, p_ref=p_ref) for s in range(seeds)]
        runs += [{"N": n, "run": s, **r} for s, r in enumerate(rs)]
        final = {k: np.array([r[k][-1] for r in rs]) for k in ("test_err", "test_err_ablated", "train_err",
                                                               "w_alpha", "w_gamma")}
        best = np.array([min(r["test_err"]) for r in rs])
        harm = final["test_err"] - final["test_err_ablated"]
        llr = np.array([r["llr"] for r in rs])
        row: dict[str, Any] = {"N": n, "runs": seeds}
        for name, v in (("test_err_final", final["test_err"]), ("test_err_best", best),
                        ("rise", final["test_err"] - best), ("train_err_final", final["train_err"]), ("harm", harm),
                        ("w_alpha", final["w_alpha"]), ("w_gamma", final["w_gamma"]), ("llr", llr)):
            row[name], row[f"{name}_lo"], row[f"{name}_hi"] = _t_interval(v, level)
        with np.errstate(divide="ignore"):
            logr = np.log(final["w_gamma"]) - np.log(final["w_alpha"])
        lm, llo, lhi = _t_interval(logr, level) if np.isfinite(logr).all() else (math.nan,) * 3
        row["ratio"], row["ratio_lo"], row["ratio_hi"] = math.exp(lm), math.exp(llo), math.exp(lhi)
        for name, count in (("frac_harm", int((harm > 0).sum())), ("frac_second", int((llr > 0).sum()))):
            row[name] = count / seeds
            row[f"{name}_lo"], row[f"{name}_hi"] = wilson_interval(count, seeds, z)
        rho = sps.spearmanr(llr, harm).statistic if seeds > 2 and np.ptp(harm) > 0 else math.nan
        row["spearman_llr_harm"] = float(rho)
        for k in ("abs_eps_sym", "tv_data", "tv_batch"):
            v = np.array([r[k] for r in rs], dtype=float)
            row[k] = float(np.nanmean(v)) if np.isfinite(v).any() else math.nan
        row["curve"] = {k: np.mean([r[k] for r in rs], 0).tolist() for k in ("test_err", "test_err_ablated",
                                                                             "train_err", "w_alpha", "w_gamma")}
        rows.append(row)
    em = lad.emission
    bayes = bayes_test = math.nan
    if isinstance(em, GaussianEmission):
        sep = float((em.means[ALPHA, 1] - em.means[ALPHA, 0]).norm())
        bayes = float(sps.norm.cdf(-sep / (2 * float(em.sigma.reshape(-1).expand(2)[ALPHA]))))
        # the Bayes rule (y = z_alpha: the nearer of alpha's two means) on the held-out sample every run is scored on
        d2 = (xt[:, ALPHA, None, :] - em.means[ALPHA][None]).pow(2).sum(-1)  # (N_test, 2)
        bayes_test = float((d2.argmin(1) != yt).double().mean())
    return {"checkpoints": ckpts, "bayes_err": bayes, "bayes_err_test": bayes_test, "rows": rows, "runs": runs}


def crossing_over_inits(inits: int = 20, ns: Sequence[int] = _CROSSING_NS, *,
                        ladder: Ladder | None = None, reps: int = 40, width: int = 8, seed: int = 0,
                        z: float = 1.96, moment_examples: int = 2 ** 15) -> dict:
    """The first-step crossing of §5.3 (:func:`update_crossing`) over initialization seeds 0 .. inits - 1 of
    :func:`default_student`, not at one seed.

    An init *crosses* when, on the ``ns`` grid, gamma's first-step update is larger in more than half of the
    ``reps`` repeats (Wilson interval wholly above 1/2) at some N and in fewer than half (wholly below) at a larger
    N (both ends of :func:`update_crossing`'s ``bracket``); ``gamma_never`` counts inits where no N has gamma
    winning (the interval is never wholly above 1/2: alpha's update is as large or larger from the smallest N on);
    ``predicted`` counts inits whose moments predict a crossing (finite ``predicted_crossing_N``).

    :returns: dict with ``inits``; ``crosses``, ``gamma_never``, ``predicted`` (counts) with ``*_frac`` and Wilson
        intervals ``*_lo``, ``*_hi``; ``per_init``: one dict per init (``init``, ``crosses``, ``bracket``,
        ``crossing_N``, ``predicted_crossing_N``).
    """
    inits = _positive_int(inits, "inits")
    lad = overfitting_ladder(**CROSSING_LADDER) if ladder is None else ladder
    per = []
    for k in range(inits):
        res = update_crossing(ns, ladder=lad, reps=reps, width=width, init_seed=k, seed=seed, z=z,
                              moment_examples=moment_examples)
        above, below = res["bracket"]
        per.append({"init": k, "crosses": above is not None and below is not None, "gamma_never": above is None,
                    "bracket": [above, below], "crossing_N": res["crossing_N"],
                    "predicted_crossing_N": res["predicted_crossing_N"]})
    out = {"inits": inits, "per_init": per}
    counts = {"crosses": sum(p["crosses"] for p in per), "gamma_never": sum(p["gamma_never"] for p in per),
              "predicted": sum(math.isfinite(p["predicted_crossing_N"]) for p in per)}
    for name, count in counts.items():
        lo, hi = wilson_interval(count, inits, z)
        out.update({name: count, f"{name}_frac": count / inits, f"{name}_lo": lo, f"{name}_hi": hi})
    return out
