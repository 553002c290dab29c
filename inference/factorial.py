"""Joint inference of the region variables in the factorial SMASO of a layer (MATH.md §3, Eq 10-11).

The layer (A ``(K, R, D)``, B ``(K, R)``) with noise sigma defines the factorial mixture
:func:`smaso.mixture.factorial_mixture_model` with ``pi = pi_from_offsets(A, B, sigma)``.  With
``s[n, k, r] = <A[k, r], x[n]> + B[k, r]`` and the Gram blocks ``G[k, r, k', r'] = <A[k, r], A[k', r']>``,
its log joint is, up to a term that does not depend on the configuration t = (t_1, ..., t_K)::

    log p(t, x) = (1 / sigma^2) [ sum_k s[k, t_k]  -  1/2 sum_{k != k'} G[k, t_k, k', t_k'] ]  + const(x)

so its joint MAP does not depend on sigma, and when the layer is orthogonal (Eq 11: G = 0 across
units) the cross term vanishes and the joint MAP is the per-unit MAP, the MASO argmax.

- :func:`exact_joint_map`: brute force over the R^K configurations, vectorized in chunks; refuses
  R^K above ``max_configs`` (the cost is exponential in K);
- :func:`factorized_map`: the per-unit MAP ``argmax_r s`` (one matmul), exact under Eq 11; it warns
  with the measured defect (``smaso.orthogonality.orthogonality_defect(A).relative``: the squared cross-unit
  inner products normalized by the products of the squared norms, a weighted mean of squared cosines in
  [0, 1], 0 iff Eq 11) when the layer is far from orthogonal;
- :func:`mean_field_map`: mean-field variational inference q(t) = prod_k q_k(t_k) by coordinate
  ascent (deterministic, stops at a tolerance), then the argmax of each q_k;
- :func:`factorial_gap`: how far the factorized and mean-field answers are from the exact MAP.

All functions take ``x`` ``(N, D)``; configurations are ``(N, K)`` int64 region indices.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

from smaso.mixture import check_maso, check_sigma, check_x, log_pi_from_offsets
from smaso.orthogonality import orthogonality_defect

__all__ = [
    "DEFAULT_MAX_CONFIGS",
    "MeanField",
    "exact_joint_map",
    "factorial_gap",
    "factorial_log_joint",
    "factorized_map",
    "mean_field_map",
]

DEFAULT_MAX_CONFIGS = 2**16  # largest R^K that exact_joint_map enumerates by default
DEFAULT_ORTHOGONALITY_TOL = 1e-6  # defect above which factorized_map warns
_CHUNK_ELEMENTS = 2**24  # elements of the largest temporary per chunk of configurations


def _check(A, B, x, sigma) -> torch.Tensor:
    check_maso(A, B)
    check_x(x, A)
    return check_sigma(sigma, scalar_only=True)


def _defect(A: torch.Tensor) -> float:
    """The relative defect of :func:`smaso.orthogonality.orthogonality_defect` (0 iff Eq 11, at most 1)."""
    return orthogonality_defect(A).relative


def factorial_log_joint(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, t: torch.Tensor, sigma=1.0) -> torch.Tensor:
    """Exact ``log p(t, x)`` ``(N,)`` of configurations ``t`` ``(N, K)`` in the factorial mixture (Eq 10).

    ``sum_k log pi[k, t_k] + log Normal(x; sum_k A[k, t_k], sigma^2 I)`` with ``pi = pi_from_offsets(A, B, sigma)``
    (the log density of :func:`smaso.mixture.factorial_mixture_model`).
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
    """

    probs: torch.Tensor
    t: torch.Tensor
    elbo: torch.Tensor
    iterations: int
    converged: bool


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
                     converged=converged)


def _mean_field_elbo(A, B, x, q, sig) -> torch.Tensor:
    """``E_q[log p(t, x)] + H(q)`` for a factorized q ``(N, K, R)``, exactly."""
    D = A.shape[2]
    s2 = float(sig) ** 2
    log_pi = log_pi_from_offsets(A, B, sig)
    mean = torch.einsum("nkr,krd->nd", q, A)  # E_q[sum_k A[k, t_k]]
    var = (q * A.pow(2).sum(-1)).sum((-1, -2)) - torch.einsum("nkr,krd->nkd", q, A).pow(2).sum((-1, -2))
    expected_sq = (x - mean).pow(2).sum(-1) + var  # E_q ||x - sum_k A[k, t_k]||^2
    safe = torch.where(q > 0, q, torch.ones((), dtype=q.dtype))
    entropy = -(q * safe.log()).sum((-1, -2))
    prior = torch.where(q > 0, q * log_pi, torch.zeros((), dtype=q.dtype)).sum((-1, -2))
    return prior - 0.5 * expected_sq / s2 - 0.5 * D * math.log(2 * math.pi * s2) + entropy


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
