"""Joint inference of the region variables in the factorial SMASO of a layer (docs/theory.md §3, Eq 10-11).

The layer (A ``(K, R, D)``, B ``(K, R)``) with noise sigma defines the factorial mixture
:func:`smaso.splines.mixture.factorial_mixture_model` with ``pi = pi_from_offsets(A, B, sigma)``.  With
``s[n, k, r] = <A[k, r], x[n]> + B[k, r]`` and the Gram blocks ``G[k, r, k', r'] = <A[k, r], A[k', r']>``,
its log joint is, up to a term that does not depend on the configuration t = (t_1, ..., t_K)::

    log p(t, x) = (1 / sigma^2) [ sum_k s[k, t_k]  -  1/2 sum_{k != k'} G[k, t_k, k', t_k'] ]  + const(x)

so its joint MAP does not depend on sigma, and when the layer is orthogonal (Eq 11: G = 0 across
units) the cross term vanishes and the joint MAP is the per-unit MAP, the MASO argmax.

- :func:`exact_joint_map`: brute force over the R^K configurations, vectorized in chunks; refuses
  R^K above ``max_configs`` (the cost is exponential in K);
- :func:`factorized_map`: the per-unit MAP ``argmax_r s`` (one matmul), exact under Eq 11; it warns
  with the measured defect (``smaso.splines.orthogonality.orthogonality_defect(A).relative``: the squared cross-unit
  inner products normalized by the products of the squared norms, a weighted mean of squared cosines in
  [0, 1], 0 iff Eq 11) when the layer is far from orthogonal;
- :func:`mean_field_map`: mean-field variational inference q(t) = prod_k q_k(t_k) by coordinate
  ascent (deterministic, stops at a tolerance), then the argmax of each q_k;
- :func:`joint_map_pyro` and :func:`mean_field_svi`: the same two answers (joint MAP, mean-field q) as Pyro
  inference on the factorial Pyro model, for checking and for users who build on Pyro: ``infer_discrete``
  at temperature 0 on the sequential layout, and ``SVI`` with an enumerated mean-field guide under
  ``TraceEnum_ELBO`` (the tests check them equal to the fast routines);
- :func:`factorial_gap`: how far the factorized and mean-field answers are from the exact MAP;
- :func:`exact_posterior`: the whole posterior p(t | x) over the R^K configurations, its per-unit
  marginals and log p(x), by the same enumeration (what mean field approximates);
- :func:`factorial_posterior_draws`: exact draws from p(t | x) by Pyro's ``infer_discrete(temperature=1)``
  on the enumerable (sequential) layout of the model, and :meth:`MeanField.draws`: draws from the
  mean-field q, both as ArviZ ``InferenceData`` (``posterior["t"]`` ``(chain, draw, example, unit)``).

All functions take ``x`` ``(N, D)``; configurations are ``(N, K)`` int64 region indices.  Tensors are created
on A's device in A's dtype; a ``seed`` seeds Python's, NumPy's and torch's RNGs for that call only (every
global RNG state, CUDA's included, is restored afterwards).  ArviZ draws hold the integer regions
``posterior["t"]`` and their one-hot indicators ``posterior["t_onehot"]`` ``(chain, draw, example, unit,
category)``, whose means ``az.summary`` reports as the per-category probabilities ``p(t_k = r | x)`` (with
MCSE and ESS), where the mean and HDI of an integer label would mean nothing.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.infer import SVI, Predictive, TraceEnum_ELBO, config_enumerate, infer_discrete

from inference.rng import check_seed, seeded_rng
from smaso.splines.mixture import (
    check_finite,
    check_maso,
    check_sigma,
    check_x,
    factorial_mixture_model,
    log_pi_from_offsets,
)
from smaso.splines.orthogonality import orthogonality_defect

if TYPE_CHECKING:  # arviz is imported where draws are packaged: importing this module stays light for the MAP paths
    import arviz as az

__all__ = [
    "DEFAULT_MAX_CONFIGS",
    "DEFAULT_MAX_DRAW_CONFIGS",
    "FactorialPosterior",
    "MeanField",
    "configurations",
    "exact_joint_map",
    "exact_posterior",
    "factorial_gap",
    "factorial_log_joint",
    "factorial_posterior_draws",
    "factorized_map",
    "joint_map_pyro",
    "mean_field_map",
    "mean_field_svi",
]

DEFAULT_MAX_CONFIGS = 2**16  # largest R^K that exact_joint_map enumerates by default
DEFAULT_MAX_DRAW_CONFIGS = 2**12  # largest R^K that factorial_posterior_draws enumerates (one tensor dim per unit)
DEFAULT_ORTHOGONALITY_TOL = 1e-6  # defect above which factorized_map warns
_CHUNK_ELEMENTS = 2**24  # elements of the largest temporary per chunk of configurations


def _check(A, B, x, sigma) -> torch.Tensor:
    check_maso(A, B)
    check_x(x, A, finite=True)
    check_finite(B, "B")
    return check_sigma(sigma, scalar_only=True)


def _defect(A: torch.Tensor) -> float:
    """The relative defect of :func:`smaso.splines.orthogonality.orthogonality_defect` (0 iff Eq 11, at most 1)."""
    return orthogonality_defect(A).relative


def factorial_log_joint(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, t: torch.Tensor, sigma=1.0) -> torch.Tensor:
    """Exact ``log p(t, x)`` ``(N,)`` of configurations ``t`` ``(N, K)`` in the factorial mixture (Eq 10).

    ``sum_k log pi[k, t_k] + log Normal(x; sum_k A[k, t_k], sigma^2 I)`` with ``pi = pi_from_offsets(A, B, sigma)``
    (the log density of :func:`smaso.splines.mixture.factorial_mixture_model`).
    """
    sig = _check(A, B, x, sigma)
    K, R, D = A.shape
    if t.shape != (x.shape[0], K):
        raise ValueError(f"t: expected configurations of shape (N, K) = {(x.shape[0], K)}, got {tuple(t.shape)}")
    if t.is_floating_point() or bool((t < 0).any()) or bool((t >= R).any()):
        raise ValueError(f"t: expected integer region indices in [0, {R})")
    log_pi = log_pi_from_offsets(A, B, sig)
    units = torch.arange(K, device=A.device)
    mean = A[units, t].sum(-2)  # (N, D)
    s2 = float(sig) ** 2
    log_lik = -0.5 * (x.to(A.dtype) - mean).pow(2).sum(-1) / s2 - 0.5 * D * math.log(2 * math.pi * s2)
    return log_pi[units, t].sum(-1) + log_lik


def _digits(codes: torch.Tensor, K: int, R: int) -> torch.Tensor:
    """Mixed-radix digits ``(C, K)`` of configuration codes, unit 0 most significant."""
    powers = R ** torch.arange(K - 1, -1, -1, device=codes.device)
    return (codes[:, None] // powers) % R


def exact_joint_map(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma=1.0, *,
                    max_configs: int = DEFAULT_MAX_CONFIGS, return_log_joint: bool = False):
    """Exact joint MAP ``argmax_t log p(t, x)`` by enumerating all R^K configurations (Eq 10).

    Vectorized over examples and over chunks of configurations; memory is bounded per chunk, time
    grows like N * R^K * (K + D).  Ties go to the configuration with the smallest code (unit 0 most
    significant).

    :param max_configs: refuse (``ValueError``) when R^K exceeds it.
    :param return_log_joint: also return ``log p(t_map, x)`` ``(N,)``.
    :returns: ``t`` ``(N, K)`` int64, or ``(t, log_joint)``.
    """
    sig = _check(A, B, x, sigma)
    K, R, D = A.shape
    n_configs = R**K
    if n_configs > max_configs:
        raise ValueError(
            f"exact joint MAP enumerates R^K = {R}^{K} = {float(n_configs):.4g} configurations, a cost exponential in "
            f"the number of units K (limit max_configs={max_configs}); use factorized_map (the per-unit MAP, exact "
            f"when the layer is orthogonal, Eq 11) or mean_field_map (mean-field variational inference) instead")
    x = x.to(A.dtype)
    n = x.shape[0]
    log_pi = log_pi_from_offsets(A, B, sig)
    s2 = float(sig) ** 2
    units = torch.arange(K, device=A.device)
    best = torch.full((n,), -torch.inf, dtype=A.dtype, device=A.device)
    best_code = torch.zeros(n, dtype=torch.long, device=A.device)
    chunk = max(1, min(n_configs, _CHUNK_ELEMENTS // max(K * D, n, 1)))
    for start in range(0, n_configs, chunk):
        codes = torch.arange(start, min(start + chunk, n_configs), device=A.device)
        digits = _digits(codes, K, R)  # (C, K)
        mean = A[units, digits].sum(-2)  # (C, D)
        prior = log_pi[units, digits].sum(-1)  # (C,)
        # log p(t, x) without the t-independent -||x||^2 / (2 sigma^2) and the normalizer
        score = prior + (x @ mean.T - 0.5 * mean.pow(2).sum(-1)) / s2  # (N, C)
        val, idx = score.max(-1)
        better = val > best
        best = torch.where(better, val, best)
        best_code = torch.where(better, codes[idx], best_code)
    t = _digits(best_code, K, R)
    if not return_log_joint:
        return t
    return t, factorial_log_joint(A, B, x, t, sig)


def factorized_map(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma=1.0, *,
                   check_orthogonality: bool = True, tol: float = DEFAULT_ORTHOGONALITY_TOL) -> torch.Tensor:
    """Factorized joint MAP: every unit's own MAP ``argmax_r s[n, k, r]`` (the layer's hard VQ), exact under Eq 11.

    One matmul: for R = 2 the comparison ``<A[k,1] - A[k,0], x> + B[k,1] - B[k,0] > 0`` (an N x D x K
    product), otherwise the scores of all K * R regions.  Ties go to the first region.

    :param check_orthogonality: measure the relative orthogonality defect (a (K R)^2 D Gram product, a property
        of the layer: skip it when calling repeatedly on one checked layer) and warn when it exceeds ``tol``,
        since the factorized MAP then need not be the joint MAP.
    :returns: ``t`` ``(N, K)`` int64.
    """
    _check(A, B, x, sigma)
    if check_orthogonality:
        defect = _defect(A)
        if defect > tol:
            warnings.warn(
                f"factorized_map: the layer is not orthogonal (Eq 11): orthogonality defect {defect:.3g} > tol {tol:g} "
                f"(squared cross-unit inner products, normalized); the per-unit MAP may differ from the joint "
                f"MAP: use exact_joint_map (small K), mean_field_map, or factorial_gap to measure the difference",
                stacklevel=2)
    K, R, D = A.shape
    x = x.to(A.dtype)
    if R == 2:
        return torch.addmm(B[:, 1] - B[:, 0], x, (A[:, 1] - A[:, 0]).T).gt_(0).long()
    return torch.addmm(B.reshape(-1), x, A.reshape(K * R, D).T).reshape(-1, K, R).argmax(-1)


@dataclass
class MeanField:
    """Result of :func:`mean_field_map`.

    :ivar probs: q_k(t_k = r) ``(N, K, R)``.
    :ivar t: ``argmax_r q`` ``(N, K)`` int64.
    :ivar elbo: ``E_q[log p(t, x)] + H(q)`` ``(N,)``, a lower bound on log p(x).
    :ivar iterations: sweeps over the units done.
    :ivar converged: whether the largest change of q in the last sweep was below the tolerance.
    :ivar x: the inputs ``(N, D)`` of the fit (stored as ``observed_data["x"]`` by :meth:`draws`), or None.
    """

    probs: torch.Tensor
    t: torch.Tensor
    elbo: torch.Tensor
    iterations: int
    converged: bool
    x: torch.Tensor | None = None

    def draws(self, num_draws: int = 500, num_chains: int = 2, seed: int | None = None,
              x: torch.Tensor | None = None) -> az.InferenceData:
        """Draws of the regions from the mean-field ``q(t) = prod_k q_k(t_k)``, as ``InferenceData``.

        ``Predictive`` over a guide with the model's site ``"t"`` under the plates ``"data"`` (dim -2) and
        ``"units"`` (dim -1), the layout of :func:`smaso.splines.mixture.factorial_mixture_model`'s plate layout;
        their summaries sit next to those of :func:`factorial_posterior_draws` (same names and dims).

        :param seed: seeds the RNGs for these draws only (:func:`inference.rng.seeded_rng`: every global
            RNG state is left as it was); None: a fresh seed from OS entropy.
        :param x: the inputs ``(N, D)`` stored as ``observed_data["x"]``; default: those of the fit
            (:attr:`x`, set by :func:`mean_field_map` and :func:`mean_field_svi`).
        :returns: ``posterior["t"]`` ``(chain, draw, example, unit)`` int64, ``posterior["t_onehot"]``
            ``(chain, draw, example, unit, category)`` and, when x is known, ``observed_data["x"]``.
        """
        _check_counts(num_draws, num_chains)
        n, k, _ = self.probs.shape
        if x is None:
            x = self.x
        if x is not None and (not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[0] != n):
            raise ValueError(f"x: expected the ({n}, D) inputs of the fit, got "
                             f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
        probs = self.probs

        def guide():
            with pyro.plate("data", n, dim=-2), pyro.plate("units", k, dim=-1):
                pyro.sample("t", dist.Categorical(probs=probs))

        total = num_draws * num_chains
        with seeded_rng(seed, probs.device), torch.no_grad():
            t = Predictive(guide, num_samples=total, parallel=True, return_sites=["t"])()["t"]
        return _inference_data(t.reshape(num_chains, num_draws, n, k), x, probs.shape[-1])


def mean_field_map(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma=1.0, *, tol: float = 1e-8,
                   max_iter: int = 1000, init: torch.Tensor | None = None) -> MeanField:
    """Mean-field variational inference in the factorial mixture by coordinate ascent (CAVI).

    Each sweep updates the units in order, each to its optimum given the others::

        q_k(r) = softmax_r( (s[k, r] - sum_{k' != k} sum_r' G[k, r, k', r'] q_k'(r')) / sigma^2 )

    which never decreases the ELBO.  Deterministic; starts from the per-unit posteriors
    ``softmax(s / sigma^2)`` (exact when the layer is orthogonal) unless ``init`` ``(N, K, R)`` is given;
    stops when a sweep changes no probability by more than ``tol`` or after ``max_iter`` sweeps.
    """
    sig = _check(A, B, x, sigma)
    if not tol > 0:
        raise ValueError(f"tol: expected a positive tolerance, got {tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter: expected a positive integer, got {max_iter!r}")
    K, R, D = A.shape
    x = x.to(A.dtype)
    s2 = float(sig) ** 2
    s = (x @ A.reshape(K * R, D).T).reshape(-1, K, R) + B  # (N, K, R)
    G = (A.reshape(K * R, D) @ A.reshape(K * R, D).T).reshape(K, R, K, R)
    G = G * (1 - torch.eye(K, dtype=A.dtype, device=A.device))[:, None, :, None]  # cross-unit blocks only
    if init is None:
        q = torch.softmax(s / s2, dim=-1)
    else:
        if init.shape != s.shape:
            raise ValueError(f"init: expected shape (N, K, R) = {tuple(s.shape)}, got {tuple(init.shape)}")
        q = init.to(A.dtype).clone()
    converged, it = False, 0
    for it in range(1, max_iter + 1):  # noqa: B007 - `it` is reported
        change = 0.0
        for k in range(K):
            field = torch.einsum("rjq,njq->nr", G[k], q)  # (N, R)
            new = torch.softmax((s[:, k] - field) / s2, dim=-1)
            change = max(change, float((new - q[:, k]).abs().max()))
            q[:, k] = new
        if change < tol:
            converged = True
            break
    return MeanField(probs=q, t=q.argmax(-1), elbo=_mean_field_elbo(A, B, x, q, sig), iterations=it,
                     converged=converged, x=x)


def _mean_field_elbo(A, B, x, q, sig) -> torch.Tensor:
    """``E_q[log p(t, x)] + H(q)`` for a factorized q ``(N, K, R)``, exactly."""
    D = A.shape[2]
    s2 = float(sig) ** 2
    log_pi = log_pi_from_offsets(A, B, sig)
    mean = torch.einsum("nkr,krd->nd", q, A)  # E_q[sum_k A[k, t_k]]
    var = (q * A.pow(2).sum(-1)).sum((-1, -2)) - torch.einsum("nkr,krd->nkd", q, A).pow(2).sum((-1, -2))
    expected_sq = (x - mean).pow(2).sum(-1) + var  # E_q ||x - sum_k A[k, t_k]||^2
    safe = torch.where(q > 0, q, torch.ones((), dtype=q.dtype, device=q.device))
    entropy = -(q * safe.log()).sum((-1, -2))
    prior = torch.where(q > 0, q * log_pi, torch.zeros((), dtype=q.dtype, device=q.device)).sum((-1, -2))
    return prior - 0.5 * expected_sq / s2 - 0.5 * D * math.log(2 * math.pi * s2) + entropy


# ---------------------------------------------------------------------- the same answers by Pyro inference
def _sequential_model(A, B, x, sig, max_configs: int, what: str):
    """The enumerable (sequential) layout of the factorial Pyro model on inputs x, after the size check."""
    K, R, _ = A.shape
    if R**K > max_configs:
        raise ValueError(f"{what} enumerates R^K = {R}^{K} = {float(R**K):.4g} configurations, one tensor dimension "
                         f"per unit (limit max_configs={max_configs}); use the hand-written routines "
                         f"(factorized_map, mean_field_map) for large K")
    log_pi = log_pi_from_offsets(A, B, sig)
    xx = x.to(A.dtype)

    def model():
        return factorial_mixture_model(A, None, sig, xx, layout="sequential", log_pi=log_pi)

    return model


def joint_map_pyro(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma=1.0, *,
                   max_configs: int = DEFAULT_MAX_DRAW_CONFIGS) -> torch.Tensor:
    """The exact joint MAP of :func:`exact_joint_map` by Pyro: ``infer_discrete(temperature=0)`` (max-product,
    Viterbi-like) on :func:`smaso.splines.mixture.factorial_mixture_model`'s sequential layout (sites ``"t_0"``,
    ..., ``"t_<K-1>"`` enumerated in parallel, one tensor dimension per unit, R^K joint configurations).

    Deterministic (no draws, no RNG).  Ties may be broken differently from :func:`exact_joint_map` (which
    takes the smallest code); the tests check that both give identical assignments on random problems.

    :param max_configs: refuse (``ValueError``) when R^K exceeds it.
    :returns: ``t`` ``(N, K)`` int64 on A's device.
    """
    sig = _check(A, B, x, sigma)
    model = _sequential_model(A, B, x, sig, max_configs, "joint_map_pyro")
    with torch.no_grad():
        t = infer_discrete(config_enumerate(model), first_available_dim=-2, temperature=0)()["t"]
    return t.expand(x.shape[0], A.shape[0]).long()


def mean_field_svi(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma=1.0, *, num_steps: int = 500,
                   lr: float = 0.2, tol: float = 1e-6, init: torch.Tensor | None = None,
                   max_configs: int = DEFAULT_MAX_DRAW_CONFIGS) -> MeanField:
    """Mean-field variational inference (the q of :func:`mean_field_map`) by Pyro's ``SVI``.

    Model: :func:`smaso.splines.mixture.factorial_mixture_model`, sequential layout.  Guide: the mean-field
    family ``q(t) = prod_{n,k} Categorical(t_k; softmax(logits[n, k]))``, one site ``"t_<k>"`` per unit under
    the model's ``"data"`` plate, enumerated in parallel (``infer={"enumerate": "parallel"}``), so
    ``TraceEnum_ELBO`` computes the ELBO and its gradient exactly (no score-function noise; cost R^K per
    example and step).  ``pyro.optim.Adam`` on the logits from the initialisation of :func:`mean_field_map`
    (``softmax(s / sigma^2)``, or ``init``).  Deterministic; runs in a private param-store scope (the global
    Pyro param store is left as it was).

    Both routines maximize the same ELBO over the same family.  From the same start on the tests' problems
    SVI lands in the basin of the same CAVI fixed point (probabilities within ~1e-2 after a few hundred
    steps, ELBO within ~1e-3; :func:`mean_field_map` started from SVI's q returns to CAVI's fixed point to
    1e-6), but Adam's last digits come slowly where q saturates: CAVI is exact at its fixed point in a few
    cheap sweeps, SVI is the reference written in Pyro (each step costs R^K per example).

    :param num_steps: largest number of SVI steps.
    :param lr: initial Adam learning rate on the logits.
    :param tol: stop when no probability changed by more than ``tol`` in a step.
    :param init: initial q ``(N, K, R)`` (strictly positive), like :func:`mean_field_map`'s.
    :param max_configs: refuse (``ValueError``) when R^K exceeds it.
    :returns: a :class:`MeanField` (``iterations`` = SVI steps, ``elbo`` the exact ELBO of the final q).
    """
    sig = _check(A, B, x, sigma)
    for name, v in (("num_steps", num_steps),):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected a positive integer, got {v!r}")
    if not tol > 0:
        raise ValueError(f"tol: expected a positive tolerance, got {tol!r}")
    if not lr > 0:
        raise ValueError(f"lr: expected a positive learning rate, got {lr!r}")
    model = _sequential_model(A, B, x, sig, max_configs, "mean_field_svi")
    K, R, D = A.shape
    xx = x.to(A.dtype)
    n = xx.shape[0]
    s2 = float(sig) ** 2
    if init is None:
        q = torch.softmax(((xx @ A.reshape(K * R, D).T).reshape(-1, K, R) + B) / s2, dim=-1)
    else:
        if init.shape != (n, K, R):
            raise ValueError(f"init: expected shape (N, K, R) = {(n, K, R)}, got {tuple(init.shape)}")
        q = init.to(dtype=A.dtype, device=A.device)
    logits0 = q.clamp_min(torch.finfo(A.dtype).tiny).log().detach()

    def guide():
        logits = pyro.param("logits", lambda: logits0.clone())
        with pyro.plate("data", n, dim=-1):
            for k in range(K):
                pyro.sample(f"t_{k}", dist.Categorical(logits=logits[:, k]), infer={"enumerate": "parallel"})

    store = pyro.get_param_store()
    converged, it = False, 0
    with store.scope():
        store.clear()
        optim = pyro.optim.Adam({"lr": lr})
        svi = SVI(model, guide, optim, TraceEnum_ELBO(max_plate_nesting=1))
        for it in range(1, num_steps + 1):  # noqa: B007 - `it` is reported
            svi.step()
            new = torch.softmax(store["logits"].detach(), -1)
            change = float((new - q).abs().max())
            q = new
            if change < tol:
                converged = True
                break
    return MeanField(probs=q, t=q.argmax(-1), elbo=_mean_field_elbo(A, B, xx, q, sig), iterations=it,
                     converged=converged, x=xx)


def factorial_gap(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma=1.0, *,
                  max_configs: int = DEFAULT_MAX_CONFIGS, tol: float = 1e-8, max_iter: int = 1000) -> dict:
    """How far the factorized and the mean-field MAP are from the exact joint MAP on inputs x.

    :returns: a dict with ``"orthogonality_defect"`` (relative, see :func:`factorized_map`), ``"n"``,
        ``"exact_log_joint_mean"`` and, for ``"factorized"`` and ``"mean_field"``: ``"fraction_differs"``
        (examples whose configuration differs from the exact joint MAP), ``"log_joint_gap_mean"`` and
        ``"log_joint_gap_max"`` (log p(t_exact, x) - log p(t_method, x) >= 0); mean-field adds
        ``"iterations"`` and ``"converged"``.
    """
    sig = _check(A, B, x, sigma)
    t_exact, lj_exact = exact_joint_map(A, B, x, sig, max_configs=max_configs, return_log_joint=True)
    out = {"orthogonality_defect": _defect(A), "n": int(x.shape[0]),
           "exact_log_joint_mean": float(lj_exact.mean())}
    mf = mean_field_map(A, B, x, sig, tol=tol, max_iter=max_iter)
    for name, t in (("factorized", factorized_map(A, B, x, sig, check_orthogonality=False)), ("mean_field", mf.t)):
        gap = lj_exact - factorial_log_joint(A, B, x, t, sig)
        out[name] = {"fraction_differs": float((t != t_exact).any(-1).double().mean()),
                     "log_joint_gap_mean": float(gap.mean()), "log_joint_gap_max": float(gap.max())}
    out["mean_field"].update(iterations=mf.iterations, converged=mf.converged)
    return out


# ---------------------------------------------------------------------- the whole posterior
def configurations(K: int, R: int, device: torch.device | str | None = None) -> torch.Tensor:
    """All R^K configurations ``(R^K, K)`` int64 in code order (unit 0 most significant), the order of the
    columns of :attr:`FactorialPosterior.log_probs` and of the ties of :func:`exact_joint_map`.

    :param device: where to create them (default: torch's default device)."""
    for name, v in (("K", K), ("R", R)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected a positive integer, got {v!r}")
    return _digits(torch.arange(R**K, device=device), K, R)


@dataclass
class FactorialPosterior:
    """Result of :func:`exact_posterior`.

    :ivar configs: the configurations ``(C, K)``, C = R^K, in code order (:func:`configurations`).
    :ivar log_probs: ``log p(t = configs[c] | x[n])`` ``(N, C)``.
    :ivar marginals: ``p(t_k = r | x[n])`` ``(N, K, R)``.
    :ivar log_evidence: ``log p(x[n])`` ``(N,)``.
    """

    configs: torch.Tensor
    log_probs: torch.Tensor
    marginals: torch.Tensor
    log_evidence: torch.Tensor

    @property
    def probs(self) -> torch.Tensor:
        """``p(t = configs[c] | x[n])`` ``(N, C)``."""
        return self.log_probs.exp()


def exact_posterior(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma=1.0, *,
                    max_configs: int = DEFAULT_MAX_CONFIGS) -> FactorialPosterior:
    """The exact posterior ``p(t | x)`` of the factorial mixture (Eq 10) over all R^K configurations.

    Same enumeration as :func:`exact_joint_map` (``pi = pi_from_offsets(A, B, sigma)``); unlike the MAP it
    depends on sigma.  Under Eq 11 it is the product of the per-unit posteriors ``softmax_r(s / sigma^2)``;
    otherwise the units compete to explain x (explaining away) and it does not factorize, which is what
    mean field (:func:`mean_field_map`) cannot represent.  Memory N * R^K.

    :param max_configs: refuse (``ValueError``) when R^K exceeds it.
    """
    sig = _check(A, B, x, sigma)
    K, R, D = A.shape
    if R**K > max_configs:
        raise ValueError(f"exact_posterior enumerates R^K = {R}^{K} = {float(R**K):.4g} configurations, a cost "
                         f"exponential in the number of units K (limit max_configs={max_configs}); use mean_field_map "
                         f"for an approximation")
    x = x.to(A.dtype)
    configs = configurations(K, R, device=A.device)
    log_pi = log_pi_from_offsets(A, B, sig)
    s2 = float(sig) ** 2
    units = torch.arange(K, device=A.device)
    mean = A[units, configs].sum(-2)  # (C, D)
    log_joint = (log_pi[units, configs].sum(-1) + (x @ mean.T - 0.5 * mean.pow(2).sum(-1)) / s2
                 - 0.5 * x.pow(2).sum(-1, keepdim=True) / s2 - 0.5 * D * math.log(2 * math.pi * s2))  # (N, C)
    log_evidence = torch.logsumexp(log_joint, -1)
    log_probs = log_joint - log_evidence[:, None]
    onehot = torch.nn.functional.one_hot(configs, R).to(A.dtype)  # (C, K, R)
    marginals = torch.einsum("nc,ckr->nkr", log_probs.exp(), onehot)
    return FactorialPosterior(configs=configs, log_probs=log_probs, marginals=marginals, log_evidence=log_evidence)


def _check_counts(num_draws, num_chains) -> None:
    for name, v in (("num_draws", num_draws), ("num_chains", num_chains)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected a positive integer, got {v!r}")


def _inference_data(t: torch.Tensor, x: torch.Tensor | None, num_regions: int) -> az.InferenceData:
    """``InferenceData`` with ``posterior["t"]`` from ``t`` ``(chain, draw, example, unit)``, its one-hot
    indicators ``posterior["t_onehot"]`` (``category`` dim: ``az.summary``'s means are ``p(t_k = r | x)``) and,
    when x is given, ``observed_data["x"]`` ``(example, feature)``."""
    import arviz as az

    n, k = t.shape[2], t.shape[3]
    t = t.detach().cpu().numpy()
    onehot = (t[..., None] == np.arange(num_regions)).astype(np.float64)
    coords = {"example": np.arange(n), "unit": np.arange(k), "category": np.arange(num_regions)}
    dims = {"t": ["example", "unit"], "t_onehot": ["example", "unit", "category"]}
    observed = None
    if x is not None:
        coords["feature"] = np.arange(x.shape[1])
        dims["x"] = ["example", "feature"]
        observed = {"x": x.detach().cpu().numpy()}
    return az.from_dict(posterior={"t": t, "t_onehot": onehot}, observed_data=observed, coords=coords, dims=dims)


def factorial_posterior_draws(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma=1.0, num_draws: int = 500,
                              num_chains: int = 2, seed: int | None = None, *,
                              max_configs: int = DEFAULT_MAX_DRAW_CONFIGS, method: str = "pyro") -> az.InferenceData:
    """Exact draws from the factorial mixture's posterior ``p(t | x)`` (Eq 10), as ArviZ ``InferenceData``.

    ``infer_discrete(temperature=1)`` on :func:`smaso.splines.mixture.factorial_mixture_model` in its sequential
    layout (sites ``"t_0"``, ..., ``"t_<K-1>"``, ``pi = pi_from_offsets(A, B, sigma)``), enumerated by Pyro
    (one tensor dimension per unit, R^K joint configurations), with all draws from one model call under a
    ``"particles"`` plate (dim -2).  Draws are independent (no Markov chain): ``num_chains`` only splits them
    so that ``az.summary`` can report r_hat (about 1) next to the effective sample size (about the number of
    draws).  The draws' frequencies converge to :func:`exact_posterior` (checked in the tests).

    :param num_draws: draws per chain.
    :param num_chains: chains.
    :param seed: seeds the RNGs for these draws only (:func:`inference.rng.seeded_rng`: every global RNG
        state is left as it was); None: a fresh seed from OS entropy.
    :param max_configs: refuse (``ValueError``) when R^K exceeds it (the enumeration's cost and memory).
    :param method: ``"pyro"`` (``infer_discrete``, above) or ``"enumeration"``: categorical draws over the
        configurations with the probabilities of :func:`exact_posterior` (the same distribution).  Pyro's
        log-space contraction underflows when configurations differ by more than ~700 nats (sharp posteriors:
        large ``|A| / sigma``); it then fails with a ``ValueError`` that points to ``method="enumeration"``.
    :returns: ``posterior["t"]`` ``(chain, draw, example, unit)`` int64, ``posterior["t_onehot"]``
        ``(chain, draw, example, unit, category)`` and ``observed_data["x"]`` ``(example, feature)``.
    """
    sig = _check(A, B, x, sigma)
    _check_counts(num_draws, num_chains)
    if method not in ("pyro", "enumeration"):
        raise ValueError(f"method: expected 'pyro' or 'enumeration', got {method!r}")
    K, R, _ = A.shape
    if R**K > max_configs:
        raise ValueError(f"factorial_posterior_draws enumerates R^K = {R}^{K} = {float(R**K):.4g} configurations "
                         f"(limit max_configs={max_configs}); draws from the mean-field approximation: "
                         f"mean_field_map(...).draws()")
    total = num_draws * num_chains
    check_seed(seed)
    rng = seeded_rng(seed, A.device)
    if method == "enumeration":
        post = exact_posterior(A, B, x, sig, max_configs=max_configs)
        with rng, torch.no_grad():
            codes = torch.distributions.Categorical(logits=post.log_probs).sample((total,))  # (total, N)
        t = post.configs[codes]
    else:
        log_pi = log_pi_from_offsets(A, B, sig)
        xx = x.to(A.dtype)

        def particles():
            with pyro.plate("particles", total, dim=-2):
                return factorial_mixture_model(A, None, sig, xx, layout="sequential", log_pi=log_pi)

        sampler = infer_discrete(config_enumerate(particles), first_available_dim=-3, temperature=1)
        try:
            with rng, torch.no_grad():
                t = sampler()["t"]  # (total, N, K), or smaller where a unit's draws broadcast
        except (ValueError, RuntimeError) as exc:
            raise ValueError(
                "factorial_posterior_draws: Pyro's enumeration failed (its log-space contraction underflows when "
                "the posterior is very sharp, |A| / sigma large); method='enumeration' draws from the same posterior "
                f"through exact_posterior ({type(exc).__name__}: {str(exc)[:120]})") from exc
    t = t.expand(total, x.shape[0], K).reshape(num_chains, num_draws, x.shape[0], K)
    return _inference_data(t, x, R)
