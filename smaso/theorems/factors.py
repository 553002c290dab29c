"""Factorized binary events and their disentangled forms (§5.2, appendix §7.7, Defs 3-5): the checks,
the distances from Def 3 / Def 4 / Def 5 and random objects of each form.  :mod:`smaso.theorems.disentangle`
builds Thm 8 / 9 and Eq 111 / 115 on them (and re-exports every name here).

A region carries n binary factors (m = 2^n events, factor 0 the most significant bit of the event index).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy.typing as npt
import torch

__all__ = [
    "check_groups",
    "disentangled_F_distance",
    "disentangled_G_distance",
    "factor_marginals",
    "is_disentangled_F",
    "is_disentangled_G",
    "is_separable",
    "random_disentangled_F",
    "random_disentangled_G",
    "random_separable_W",
    "separability_distance",
]

#: Tolerance of a stochastic matrix's row sums.
ROW_TOL = 1e-9


# ---------------------------------------------------------------------------- validation
def _matrix(x: npt.ArrayLike, name: str) -> torch.Tensor:
    t = torch.as_tensor(x, dtype=torch.float64)
    if t.dim() != 2:
        raise ValueError(f"{name}: expected a 2-D matrix, got shape {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name}: contains NaN or infinity")
    return t


def _n_factors(rows: int, n_factors: int, name: str) -> int:
    n = int(n_factors)
    if n < 1 or rows != 2**n:
        raise ValueError(f"{name}: expected 2^n_factors = {2**max(n, 0)} rows for n_factors = {n}, got {rows}")
    return n


def _check_stochastic(P: npt.ArrayLike, name: str) -> torch.Tensor:
    P = _matrix(P, name)
    if (P < -ROW_TOL).any():
        raise ValueError(f"{name}: has negative entries; rows must be probability distributions")
    dev = (P.sum(1) - 1).abs()
    if (dev > ROW_TOL).any():
        r = int(dev.argmax())
        raise ValueError(f"{name}: row {r} sums to {float(P[r].sum())}, not 1 (not row-stochastic)")
    return P


def _check_p_factors(p_factors: npt.ArrayLike, n: int, name: str = "p_factors") -> torch.Tensor:
    p = torch.as_tensor(p_factors, dtype=torch.float64)
    if p.shape != (n, 2):
        raise ValueError(f"{name}: expected shape ({n}, 2), got {tuple(p.shape)}")
    if (p < -ROW_TOL).any() or ((p.sum(1) - 1).abs() > ROW_TOL).any():
        raise ValueError(f"{name}: every row must be a distribution [P(z=0), P(z=1)]")
    return p


def check_groups(groups: Sequence[Sequence[int]], n_child: int, name: str = "groups") -> list[list[int]]:
    """Validate the index sets {S_i} of Def 5: disjoint and covering ``range(n_child)``."""
    try:
        out = [[int(k) for k in g] for g in groups]
    except TypeError:
        raise ValueError(f"{name}: expected a list of index lists, got {groups!r}") from None
    seen: dict[int, int] = {}
    for i, g in enumerate(out):
        for k in g:
            if not 0 <= k < n_child:
                raise ValueError(f"{name}[{i}]: index {k} outside the child's factors [0, {n_child})")
            if k in seen:
                raise ValueError(f"{name}: index sets overlap: child factor {k} is in S_{seen[k]} and S_{i}")
            seen[k] = i
    missing = sorted(set(range(n_child)) - set(seen))
    if missing:
        raise ValueError(f"{name}: index sets do not cover the child's factors; missing {missing}")
    return out


# ---------------------------------------------------------------------------- Defs 3-5
def _kron_all(vectors: Sequence[torch.Tensor]) -> torch.Tensor:
    """vectors[0] x vectors[1] x ... (Kronecker product, float64; ``[1]`` for none)."""
    return functools.reduce(torch.kron, vectors, torch.ones(1, dtype=torch.float64))


def _factor_form_residual(M: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    """Residual of each column j of ``M`` ``(2^n, n)`` after projection onto
    {q[0] x ... x g (position j) x ... x q[n-1] : g in R^2}, ``others`` = q ``(n, 2)``."""
    n = others.shape[0]
    R = torch.empty_like(M)
    for j in range(n):
        T = M[:, j].reshape([2] * n).movedim(j, 0).reshape(2, -1)
        Q = _kron_all([others[i] for i in range(n) if i != j])
        qq = Q @ Q
        g = T @ Q / qq if qq > 0 else torch.zeros(2, dtype=M.dtype)
        fit = torch.outer(g, Q).reshape([2] * n).movedim(0, j).reshape(-1)
        R[:, j] = M[:, j] - fit
    return R


def _relative(res: torch.Tensor, ref: torch.Tensor) -> float:
    den = float(torch.linalg.norm(ref))
    return float(torch.linalg.norm(res)) / den if den > 0 else 0.0


def disentangled_F_distance(F: npt.ArrayLike, n_factors: int) -> float:
    """Def 3 distance: ||F - proj(F)||_F / ||F||_F, ``F`` ``(2^n, n)``; column j is projected onto
    vectors depending only on bit j (factor j = j-th most significant bit) by averaging over the
    other bits.  0 for disentangled F (and for F = 0)."""
    F = _matrix(F, "F")
    n = _n_factors(F.shape[0], n_factors, "F")
    if F.shape[1] != n:
        raise ValueError(f"F: expected {n} columns (one per factor, Def 3), got {F.shape[1]}")
    return _relative(_factor_form_residual(F, torch.ones(n, 2, dtype=F.dtype)), F)


def is_disentangled_F(F: npt.ArrayLike, n_factors: int, tol: float = 1e-10) -> bool:
    """Def 3: column j of ``F`` ``(2^n, n)`` is 1 x ... x f[j] x ... x 1 (up to relative ``tol``)."""
    return disentangled_F_distance(F, n_factors) <= tol


def disentangled_G_distance(G_tilde: npt.ArrayLike, p_factors: npt.ArrayLike) -> float:
    """Def 4 distance of ``G_tilde`` ``(2^n, n)`` given ``p_factors`` ``(n, 2)`` (row i =
    [P(z[i]=0), P(z[i]=1)]): relative Frobenius residual after the least-squares projection of
    column j onto {p[1] x ... x g (position j) x ... x p[n]}."""
    G = _matrix(G_tilde, "G_tilde")
    n = G.shape[1]
    _n_factors(G.shape[0], n, "G_tilde")
    p = _check_p_factors(p_factors, n)
    return _relative(_factor_form_residual(G, p), G)


def is_disentangled_G(G_tilde: npt.ArrayLike, p_factors: npt.ArrayLike, tol: float = 1e-10) -> bool:
    """Def 4: column j of ``G_tilde`` ``(2^n, n)`` is p[1] x ... x g~[j] x ... x p[n]."""
    return disentangled_G_distance(G_tilde, p_factors) <= tol


def separability_distance(W: npt.ArrayLike, groups: Sequence[Sequence[int]]) -> float:
    """Def 5 distance of ``W`` ``(n_b, n_a)`` w.r.t. ``groups`` (n_a disjoint sets covering
    ``range(n_b)``): ||off-block part||_F / ||W||_F."""
    W = _matrix(W, "W")
    if len(groups) != W.shape[1]:
        raise ValueError(f"W: {W.shape[1]} columns but {len(groups)} groups (one set S_i per parent factor)")
    groups = check_groups(groups, W.shape[0])
    mask = torch.zeros_like(W, dtype=torch.bool)
    for i, g in enumerate(groups):
        mask[g, i] = True
    return _relative(W.masked_fill(mask, 0.0), W)


def is_separable(W: npt.ArrayLike, groups: Sequence[Sequence[int]], tol: float = 1e-10) -> bool:
    """Def 5: ``W`` ``(n_b, n_a)`` = diag(W[S_1, 1], ..., W[S_n, n_a]) (up to relative ``tol``)."""
    return separability_distance(W, groups) <= tol


def factor_marginals(p: npt.ArrayLike, n_factors: int) -> torch.Tensor:
    """Per-factor marginals ``(n, 2)`` of a joint distribution ``p`` ``(2^n,)`` over n binary factors."""
    p = torch.as_tensor(p, dtype=torch.float64)
    n = _n_factors(p.numel(), n_factors, "p")
    T = p.reshape([2] * n)
    return torch.stack([T.sum(dim=[i for i in range(n) if i != j]) if n > 1 else T for j in range(n)])


# ---------------------------------------------------------------------------- random objects
def random_disentangled_F(n_factors: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """A random Def 3 matrix ``(2^n, n)``: column j = 1 x ... x f[j] x ... x 1, f[j] ~ N(0, I_2)."""
    n = int(n_factors)
    f = torch.randn(n, 2, generator=generator, dtype=torch.float64)
    return _expand(f, torch.ones(n, 2, dtype=torch.float64))


def random_disentangled_G(p_factors: npt.ArrayLike, generator: torch.Generator | None = None,
                          centered: bool = True) -> torch.Tensor:
    """A random Def 4 matrix ``(2^n, n)`` for ``p_factors`` ``(n, 2)``; with ``centered`` each g~[j]
    sums to 0, so 1^T G~ = 0 (the hypothesis of Thm 9)."""
    p = torch.as_tensor(p_factors, dtype=torch.float64)
    if p.dim() != 2:
        raise ValueError(f"p_factors: expected shape (n, 2), got {tuple(p.shape)}")
    p = _check_p_factors(p, p.shape[0])
    g = torch.randn(p.shape[0], 2, generator=generator, dtype=torch.float64)
    if centered:
        g = g - g.mean(1, keepdim=True)
    return _expand(g, p)


def _expand(own: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    """``(2^n, n)``: column j = others[0] x ... x own[j] (position j) x ... x others[n-1]."""
    n = own.shape[0]
    return torch.stack([_kron_all([own[i] if i == j else others[i] for i in range(n)]) for j in range(n)], 1)


def random_separable_W(groups: Sequence[Sequence[int]], generator: torch.Generator | None = None,
                       n_child: int | None = None) -> torch.Tensor:
    """A random Def 5 matrix ``(n_b, n_a)``: N(0, 1) on the blocks W[S_i, i], 0 elsewhere."""
    n_child = sum(len(g) for g in groups) if n_child is None else n_child
    groups = check_groups(groups, n_child)
    W = torch.zeros(n_child, len(groups), dtype=torch.float64)
    for i, g in enumerate(groups):
        W[g, i] = torch.randn(len(g), generator=generator, dtype=torch.float64)
    return W
