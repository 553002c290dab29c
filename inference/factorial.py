"""Joint inference of the region variables in the factorial SMASO of a layer (docs/theory.md §3, Eq 10-11).

The layer (A ``(K, R, D)``, B ``(K, R)``) with noise sigma defines the factorial mixture
:func:`smaso.splines.mixture.factorial_mixture_model` with ``pi = pi_from_offsets(A, B, sigma)``.  With
``s[n, k, r] = <A[k, r], x[n]> + B[k, r]`` and the Gram blocks ``G[k, r, k', r'] = <A[k, r], A[k', r']>``,
its log joint is, up to a term that does not depend on the configuration t = (t_1, ..., t_K)::

    log p(t, x) = (1 / sigma^2) [ sum_k s[k, t_k]  -  1/2 sum_{k != k'} G[k, t_k, k', t_k'] ]  + const(x)

so its joint MAP does not depend on sigma, and when the layer is orthogonal (Eq 11: G = 0 across
units) the cross term vanishes and the joint MAP is the per-unit MAP, the MASO argmax.

By enumeration of the R^K configurations: the exact joint MAP (:func:`exact_joint_map`) and posterior
(:func:`exact_posterior`); the per-unit MAP (:func:`factorized_map`, exact under Eq 11), mean field
(:func:`mean_field_map`) and their distance to the exact MAP (:func:`factorial_gap`); the same answers by Pyro
inference, for checking (:func:`joint_map_pyro`, :func:`mean_field_svi`, :func:`factorial_posterior_draws`,
:meth:`MeanField.draws`).

All functions take ``x`` ``(N, D)``; configurations are ``(N, K)`` int64 region indices.  Tensors are created
on A's device in A's dtype; a ``seed`` runs inside :func:`inference.rng.seeded_rng` (every global RNG state is
left as it was).  ArviZ draws hold the one-hot ``posterior["t_onehot"]`` ``(chain, draw, example, unit,
category)``, whose ``az.summary`` means are ``p(t_k = r | x)``, and the region labels ``posterior["t"]`` as a
coordinate (nominal: a mean or HDI of a region index means nothing, so the default summary skips them).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.infer import SVI, Predictive, TraceEnum_ELBO, config_enumerate, infer_discrete

from inference.mixture import (
    check_finite,
    check_maso,
    check_sigma,
    check_x,
    factorial_mixture_model,
    log_pi_from_offsets,
    orthogonality_defect,
    region_scores,
)
from inference.rng import check_seed, seeded_rng

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
_EXPONENTIAL = ", a cost exponential in the number of units K"


def _check_layer(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor) -> None:
    """The layer ``(A, B)`` and finite inputs ``x`` ``(N, D)`` (a ``ValueError`` naming the argument)."""
    check_maso(A, B)
    check_x(x, A, finite=True)
    check_finite(B, "B")


def _check(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma: float | torch.Tensor) -> torch.Tensor:
    _check_layer(A, B, x)
    return check_sigma(sigma, scalar_only=True)


def _check_positive(**values: int) -> None:
    """A ``ValueError`` naming the first of ``values`` that is not a positive ``int``."""
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected a positive integer, got {v!r}")


def _guide_draws(probs: torch.Tensor, num_draws: int, num_chains: int, seed: int | None) -> torch.Tensor:
    """Draws ``(num_chains, num_draws, N, K)`` from a mean-field ``probs`` ``(N, K, R)``: ``Predictive`` over a guide
    with the site ``"t"`` under the plates ``"data"`` (dim -2) and ``"units"`` (dim -1), under ``seeded_rng(seed)``."""
    n, k, _ = probs.shape

    def guide() -> None:
        with pyro.plate("data", n, dim=-2), pyro.plate("units", k, dim=-1):
            pyro.sample("t", dist.Categorical(probs=probs))

    with seeded_rng(seed, probs.device), torch.no_grad():
        t = Predictive(guide, num_samples=num_draws * num_chains, parallel=True, return_sites=["t"])()["t"]
    return t.reshape(num_chains, num_draws, n, k)


def _check_configs(K: int, R: int, max_configs: int, what: str, cost: str, advice: str) -> None:
    """A ``ValueError`` when the R^K configurations that ``what`` enumerates exceed ``max_configs``."""
    if R**K > max_configs:
        raise ValueError(f"{what} enumerates R^K = {R}^{K} = {float(R**K):.4g} configurations{cost} (limit "
                         f"max_configs={max_configs}); {advice}")


def _config_scores(A: torch.Tensor, log_pi: torch.Tensor, x: torch.Tensor, configs: torch.Tensor,
                   s2: float) -> torch.Tensor:
    """log p(t, x) ``(N, C)`` of configurations ``configs`` ``(C, K)`` without the t-independent
    -||x||^2 / (2 sigma^2) and the normalizer."""
    units = torch.arange(A.shape[0], device=A.device)
    mean = A[units, configs].sum(-2)  # (C, D)
    return log_pi[units, configs].sum(-1) + (x @ mean.T - 0.5 * mean.pow(2).sum(-1)) / s2


def _initial_q(s: torch.Tensor, s2: float, init: torch.Tensor | None) -> torch.Tensor:
    """The start of mean field: ``init`` ``(N, K, R)`` (a copy), else the per-unit posteriors softmax(s / sigma^2)."""
    if init is None:
        return torch.softmax(s / s2, dim=-1)
    if init.shape != s.shape:
        raise ValueError(f"init: expected shape (N, K, R) = {tuple(s.shape)}, got {tuple(init.shape)}")
    return init.to(dtype=s.dtype, device=s.device).clone()


def factorial_log_joint(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, t: torch.Tensor,
                        sigma: float | torch.Tensor = 1.0) -> torch.Tensor:
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


def exact_joint_map(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma: float | torch.Tensor = 1.0, *,
                    max_configs: int = DEFAULT_MAX_CONFIGS,
                    return_log_joint: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
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
    _check_configs(K, R, max_configs, "exact joint MAP", _EXPONENTIAL, "use factorized_map (the per-unit MAP, exact "
                   "when the layer is orthogonal, Eq 11) or mean_field_map (mean-field variational inference) instead")
    n_configs = R**K
    x = x.to(A.dtype)
    n = x.shape[0]
    log_pi = log_pi_from_offsets(A, B, sig)
    best = torch.full((n,), -torch.inf, dtype=A.dtype, device=A.device)
    best_code = torch.zeros(n, dtype=torch.long, device=A.device)
    chunk = max(1, min(n_configs, _CHUNK_ELEMENTS // max(K * D, n, 1)))
    for start in range(0, n_configs, chunk):
        codes = torch.arange(start, min(start + chunk, n_configs), device=A.device)
        val, idx = _config_scores(A, log_pi, x, _digits(codes, K, R), float(sig) ** 2).max(-1)
        better = val > best
        best = torch.where(better, val, best)
        best_code = torch.where(better, codes[idx], best_code)
    t = _digits(best_code, K, R)
    if not return_log_joint:
        return t
    return t, factorial_log_joint(A, B, x, t, sig)


def factorized_map(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma: float | torch.Tensor = 1.0, *,
                   check_orthogonality: bool = True, tol: float = DEFAULT_ORTHOGONALITY_TOL) -> torch.Tensor:
    """Factorized joint MAP: every unit's own MAP ``argmax_r s[n, k, r]`` (the layer's hard VQ), exact under Eq 11.

    One matmul: for R = 2 the comparison ``<A[k,1] - A[k,0], x> + B[k,1] - B[k,0] > 0`` (an N x D x K
    product), otherwise the scores of all K * R regions.  Ties go to the first region.

    :param check_orthogonality: measure the relative orthogonality defect (a (K R)^2 D Gram product: skip it on
        repeated calls with one checked layer) and warn when it exceeds ``tol`` (then it need not be the joint MAP).
    :returns: ``t`` ``(N, K)`` int64.
    """
    _check(A, B, x, sigma)
    if check_orthogonality:
        defect = orthogonality_defect(A).relative
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

        ``Predictive`` over a guide with the model's site ``"t"`` and plates, named and shaped as the draws of
        :func:`factorial_posterior_draws`.

        :param seed: the draws' seed (:func:`inference.rng.seeded_rng`); None: a fresh seed from OS entropy.
        :param x: the inputs ``(N, D)`` stored as ``observed_data["x"]``; default: those of the fit
            (:attr:`x`, set by :func:`mean_field_map` and :func:`mean_field_svi`).
        :returns: ``posterior["t_onehot"]`` ``(chain, draw, example, unit, category)``, the labels
            ``posterior["t"]`` ``(chain, draw, example, unit)`` int64 (a coordinate) and, when x is known,
            ``observed_data["x"]``.
        """
        _check_positive(num_draws=num_draws, num_chains=num_chains)
        n = self.probs.shape[0]
        x = self.x if x is None else x
        if x is not None and (not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[0] != n):
            raise ValueError(f"x: expected the ({n}, D) inputs of the fit, got "
                             f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
        return _inference_data(_guide_draws(self.probs, num_draws, num_chains, seed), x, self.probs.shape[-1])


def mean_field_map(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma: float | torch.Tensor = 1.0, *,
                   tol: float = 1e-8,
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
    _check_positive(max_iter=max_iter)
    K, R, D = A.shape
    x = x.to(A.dtype)
    s2 = float(sig) ** 2
    s = region_scores(A, B, x)  # (N, K, R)
    G = (A.reshape(K * R, D) @ A.reshape(K * R, D).T).reshape(K, R, K, R)
    G = G * (1 - torch.eye(K, dtype=A.dtype, device=A.device))[:, None, :, None]  # cross-unit blocks only
    q = _initial_q(s, s2, init)
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


def _mean_field_elbo(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, q: torch.Tensor,
                     sig: torch.Tensor) -> torch.Tensor:
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
def _sequential_model(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sig: torch.Tensor, max_configs: int,
                      what: str) -> Callable[[], dict[str, torch.Tensor]]:
    """The enumerable (sequential) layout of the factorial Pyro model on inputs x, after the size check."""
    _check_configs(A.shape[0], A.shape[1], max_configs, what, ", one tensor dimension per unit",
                   "use the hand-written routines (factorized_map, mean_field_map) for large K")
    log_pi = log_pi_from_offsets(A, B, sig)
    xx = x.to(A.dtype)

    def model() -> dict[str, torch.Tensor]:
        return factorial_mixture_model(A, None, sig, xx, layout="sequential", log_pi=log_pi)

    return model


def joint_map_pyro(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma: float | torch.Tensor = 1.0, *,
                   max_configs: int = DEFAULT_MAX_DRAW_CONFIGS) -> torch.Tensor:
    """The exact joint MAP of :func:`exact_joint_map` by Pyro: ``infer_discrete(temperature=0)`` (max-product,
    Viterbi-like) on :func:`smaso.splines.mixture.factorial_mixture_model`'s sequential layout (sites ``"t_0"``,
    ..., ``"t_<K-1>"`` enumerated in parallel, one tensor dimension per unit, R^K joint configurations).

    Deterministic (no draws, no RNG).  Ties may be broken differently from :func:`exact_joint_map` (which
    takes the smallest code).

    :param max_configs: refuse (``ValueError``) when R^K exceeds it.
    :returns: ``t`` ``(N, K)`` int64 on A's device.
    """
    sig = _check(A, B, x, sigma)
    model = _sequential_model(A, B, x, sig, max_configs, "joint_map_pyro")
    with torch.no_grad():
        t = infer_discrete(config_enumerate(model), first_available_dim=-2, temperature=0)()["t"]
    return t.expand(x.shape[0], A.shape[0]).long()


def mean_field_svi(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma: float | torch.Tensor = 1.0, *,
                   num_steps: int = 500,
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

    Both maximize the same ELBO over the same family and reach the same CAVI fixed point on the tests' problems
    (SVI to ~1e-2 in probability: Adam's last digits come slowly where q saturates); CAVI is the fast one.

    :param num_steps: largest number of SVI steps.
    :param lr: initial Adam learning rate on the logits.
    :param tol: stop when no probability changed by more than ``tol`` in a step.
    :param init: initial q ``(N, K, R)`` (strictly positive), like :func:`mean_field_map`'s.
    :param max_configs: refuse (``ValueError``) when R^K exceeds it.
    :returns: a :class:`MeanField` (``iterations`` = SVI steps, ``elbo`` the exact ELBO of the final q).
    """
    sig = _check(A, B, x, sigma)
    _check_positive(num_steps=num_steps)
    if not tol > 0:
        raise ValueError(f"tol: expected a positive tolerance, got {tol!r}")
    if not lr > 0:
        raise ValueError(f"lr: expected a positive learning rate, got {lr!r}")
    model = _sequential_model(A, B, x, sig, max_configs, "mean_field_svi")
    K = A.shape[0]
    xx = x.to(A.dtype)
    n = xx.shape[0]
    q = _initial_q(region_scores(A, B, xx), float(sig) ** 2, init)
    logits0 = q.clamp_min(torch.finfo(A.dtype).tiny).log().detach()

    def guide() -> None:
        logits = pyro.param("logits", lambda: logits0.clone())
        with pyro.plate("data", n, dim=-1):
            for k in range(K):
                pyro.sample(f"t_{k}", dist.Categorical(logits=logits[:, k]), infer={"enumerate": "parallel"})

    store = pyro.get_param_store()
    converged, it = False, 0
    with store.scope():
        store.clear()
        optim = pyro.optim.Adam({"lr": lr})  # type: ignore[attr-defined]  # built by pyro.optim at import
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


def factorial_gap(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma: float | torch.Tensor = 1.0, *,
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
    out: dict[str, Any] = {"orthogonality_defect": orthogonality_defect(A).relative, "n": int(x.shape[0]),
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
    _check_positive(K=K, R=R)
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


def exact_posterior(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma: float | torch.Tensor = 1.0, *,
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
    _check_configs(K, R, max_configs, "exact_posterior", _EXPONENTIAL, "use mean_field_map for an approximation")
    x = x.to(A.dtype)
    configs = configurations(K, R, device=A.device)
    s2 = float(sig) ** 2
    log_joint = (_config_scores(A, log_pi_from_offsets(A, B, sig), x, configs, s2)
                 - 0.5 * x.pow(2).sum(-1, keepdim=True) / s2 - 0.5 * D * math.log(2 * math.pi * s2))  # (N, C)
    log_evidence = torch.logsumexp(log_joint, -1)
    log_probs = log_joint - log_evidence[:, None]
    onehot = torch.nn.functional.one_hot(configs, R).to(A.dtype)  # (C, K, R)
    marginals = torch.einsum("nc,ckr->nkr", log_probs.exp(), onehot)
    return FactorialPosterior(configs=configs, log_probs=log_probs, marginals=marginals, log_evidence=log_evidence)


def _inference_data(t: torch.Tensor, x: torch.Tensor | None, num_regions: int) -> az.InferenceData:
    """``InferenceData`` with ``posterior["t"]`` from ``t`` ``(chain, draw, example, unit)``, its one-hot
    indicators ``posterior["t_onehot"]`` (``category`` dim: ``az.summary``'s means are ``p(t_k = r | x)``) and,
    when x is given, ``observed_data["x"]`` ``(example, feature)``."""
    import arviz as az

    n, k = t.shape[2], t.shape[3]
    draws = t.detach().cpu().numpy()
    onehot = (draws[..., None] == np.arange(num_regions)).astype(np.float64)
    coords = {"example": np.arange(n), "unit": np.arange(k), "category": np.arange(num_regions)}
    dims = {"t": ["example", "unit"], "t_onehot": ["example", "unit", "category"]}
    observed = None
    if x is not None:
        coords["feature"] = np.arange(x.shape[1])
        dims["x"] = ["example", "feature"]
        observed = {"x": x.detach().cpu().numpy()}
    idata = az.from_dict(posterior={"t": draws, "t_onehot": onehot}, observed_data=observed, coords=coords, dims=dims)
    # nominal labels: a non-index coordinate, which ``posterior["t"]`` still reaches and ``az.summary`` (over data
    # variables only) skips, as the ladder's event labels (inference.event_draws)
    labels = idata.posterior["t"].assign_attrs(kind="categorical", num_categories=num_regions)
    idata.posterior = idata.posterior.drop_vars("t").assign_coords(t=labels)
    return idata


def factorial_posterior_draws(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma: float | torch.Tensor = 1.0,
                              num_draws: int = 500,
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
    :param seed: the draws' seed (:func:`inference.rng.seeded_rng`); None: a fresh seed from OS entropy.
    :param max_configs: refuse (``ValueError``) when R^K exceeds it (the enumeration's cost and memory).
    :param method: ``"pyro"`` (``infer_discrete``, above) or ``"enumeration"``: categorical draws over the
        configurations with the probabilities of :func:`exact_posterior` (the same distribution).  Pyro's
        log-space contraction underflows when configurations differ by more than ~700 nats (sharp posteriors:
        large ``|A| / sigma``); it then fails with a ``ValueError`` that points to ``method="enumeration"``.
    :returns: ``posterior["t_onehot"]`` ``(chain, draw, example, unit, category)``, the labels ``posterior["t"]``
        ``(chain, draw, example, unit)`` int64 (a coordinate: ``az.summary(idata)`` skips them) and
        ``observed_data["x"]`` ``(example, feature)``.  ``az.summary(idata, var_names=["t_onehot"])`` gives the
        marginals ``p(t_k = r | x)``.
    """
    sig = _check(A, B, x, sigma)
    _check_positive(num_draws=num_draws, num_chains=num_chains)
    if method not in ("pyro", "enumeration"):
        raise ValueError(f"method: expected 'pyro' or 'enumeration', got {method!r}")
    K, R, _ = A.shape
    _check_configs(K, R, max_configs, "factorial_posterior_draws", "",
                   "draws from the mean-field approximation: mean_field_map(...).draws()")
    total = num_draws * num_chains
    check_seed(seed)
    rng = seeded_rng(seed, A.device)
    if method == "enumeration":
        post = exact_posterior(A, B, x, sig, max_configs=max_configs)
        with rng, torch.no_grad():
            codes = torch.distributions.Categorical(logits=post.log_probs).sample((total,))  # (total, N)
        t = post.configs[codes]
    else:
        model = _sequential_model(A, B, x, sig, max_configs, "factorial_posterior_draws")  # within max_configs

        def particles() -> dict[str, torch.Tensor]:
            with pyro.plate("particles", total, dim=-2):
                return model()

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
