"""Disentangled representations on factorized binary ladders (§5.2, appendix §7.7; ``docs/theory.md`` §1.10
states Defs 3-5, Thm 8-9 (:func:`forward_region`, :func:`weight_update`), the backward of Eq 111
(:func:`backward_g_tilde`) and Eq 115 (:func:`eq115_best_distance`), and maps each to its demo here).

A region alpha carries n binary factors (m = 2^n events, factor 0 the most significant bit of the event
index, as in :meth:`teachers.ladder.Ladder.factorized_binary`); the Def 3-5 checks, distances and random
objects are in :mod:`smaso.theorems.factors` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy.typing as npt
import torch

from smaso import _ladder_parts
from smaso.student.reformulation import _weighted_bn
from smaso.theorems.factors import (
    _check_p_factors,
    _check_stochastic,
    _expand,
    _kron_all,
    _matrix,
    check_groups,
    disentangled_F_distance,
    disentangled_G_distance,
    factor_marginals,
    is_disentangled_F,
    is_disentangled_G,
    is_separable,
    random_disentangled_F,
    random_disentangled_G,
    random_separable_W,
    separability_distance,
)
from teachers.ladder import _independent_children

if TYPE_CHECKING:
    from teachers.ladder import Ladder

__all__ = [
    "BackwardDemo",
    "Eq115Result",
    "ForwardDemo",
    "MultiParentDemo",
    "UpdateDemo",
    "backward_disentangle_distance",
    "backward_g_tilde",
    "check_groups",
    "disentangled_F_distance",
    "disentangled_G_distance",
    "eq115_best_distance",
    "eq115_from_statistics",
    "factor_marginals",
    "forward_disentangled_demo",
    "forward_region",
    "is_disentangled_F",
    "is_disentangled_G",
    "is_separable",
    "multi_parent_backward_demo",
    "random_disentangled_F",
    "random_disentangled_G",
    "random_parent_conditionals",
    "random_separable_W",
    "region_marginals",
    "separability_distance",
    "separable_update_demo",
    "weight_update",
]


# ---------------------------------------------------------------------------- Thm 8 / 9 / Eq 111
def _edge_sum(P_ab: Sequence, X: Sequence, W_ba: Sequence, x_name: str, forward: bool) -> torch.Tensor:
    """sum_i P_i X_i W_i (``forward``: X = F_b, one entry per child) or sum_i P_i^T X_i W_i^T (X = G~_a, one
    entry per parent), every entry validated."""
    kind, rows_of, what = ("child", 1, "rows (child") if forward else ("parent", 0, "columns (parent")
    if not (len(P_ab) == len(X) == len(W_ba)) or not P_ab:
        raise ValueError(f"P_ab/{x_name}/W_ba: expected one entry per {kind}, got {len(P_ab)}, {len(X)}, {len(W_ba)}")
    out: torch.Tensor | None = None
    for i, (P, M, W) in enumerate(zip(P_ab, X, W_ba, strict=True)):
        P = _check_stochastic(P, f"P_ab[{i}]")
        M = _matrix(M, f"{x_name}[{i}]")
        W = _matrix(W, f"W_ba[{i}]")
        if M.shape[0] != P.shape[rows_of]:
            raise ValueError(f"{x_name}[{i}]: expected {P.shape[rows_of]} rows ({kind} events), got {M.shape[0]}")
        if W.shape[1 - rows_of] != M.shape[1]:
            raise ValueError(f"W_ba[{i}]: expected {M.shape[1]} {what} neurons), got shape {tuple(W.shape)}")
        term = P @ M @ W if forward else P.T @ M @ W.T
        if out is not None and term.shape != out.shape:
            raise ValueError(f"W_ba[{i}]: shape {tuple(W.shape)} does not match the other {kind} entries' "
                             f"output {tuple(out.shape)}")
        out = term if out is None else out + term
    assert out is not None, "P_ab is not empty (checked above)"
    return out


def forward_region(P_ab: Sequence, F_b: Sequence, W_ba: Sequence, *, bias: npt.ArrayLike | None = None,
                   relu: bool = True,
                   bn_p: torch.Tensor | None = None, bn_scale: torch.Tensor | None = None,
                   bn_shift: torch.Tensor | None = None, bn_eps: float = 1e-5) -> torch.Tensor:
    """Eq 9 forward at one region (Thm 8): F_a = D o (sum_b P_ab F_b W_ba + 1 bias^T), D the ReLU gates
    of that pre-activation (``relu=False``: D = 1), then optionally the P-weighted BN of Eq 12 with
    weights ``bn_p`` ``(m_a,)`` (= P(z_a)) and per-column ``bn_scale``, ``bn_shift`` ``(n_a,)``.

    ``P_ab[i]`` ``(m_a, m_b)`` row-stochastic, ``F_b[i]`` ``(m_b, n_b)``, ``W_ba[i]`` ``(n_b, n_a)``.
    Returns ``(m_a, n_a)``.
    """
    U = _edge_sum(P_ab, F_b, W_ba, "F_b", True)
    if bias is not None:
        b = torch.as_tensor(bias, dtype=torch.float64)
        if b.shape != (U.shape[1],):
            raise ValueError(f"bias: expected shape ({U.shape[1]},), got {tuple(b.shape)}")
        U = U + b
    out = U.clamp_min(0) if relu else U
    if bn_p is not None:
        p = _check_stochastic(torch.as_tensor(bn_p, dtype=torch.float64)[None], "bn_p")[0]
        if p.shape != (U.shape[0],):
            raise ValueError(f"bn_p: expected shape ({U.shape[0]},), got {tuple(p.shape)}")
        n = U.shape[1]
        c1 = torch.ones(n, dtype=torch.float64) if bn_scale is None else torch.as_tensor(bn_scale, dtype=torch.float64)
        c0 = torch.zeros(n, dtype=torch.float64) if bn_shift is None else torch.as_tensor(bn_shift, dtype=torch.float64)
        if c1.shape != (n,) or c0.shape != (n,):
            raise ValueError(f"bn_scale/bn_shift: expected shape ({n},)")
        out = _weighted_bn(out[None], p[None], c1[None], c0[None], bn_eps)[0][0]
    return out


def weight_update(P_ab: npt.ArrayLike, F_b: npt.ArrayLike, G_tilde_a: npt.ArrayLike) -> torch.Tensor:
    """Eq 9 update (Thm 9): Delta W_ba = (P_ab F_b)^T G~_a, ``(n_b, n_a)`` from ``P_ab`` ``(m_a, m_b)``,
    ``F_b`` ``(m_b, n_b)``, ``G_tilde_a`` ``(m_a, n_a)``."""
    P = _check_stochastic(P_ab, "P_ab")
    F = _matrix(F_b, "F_b")
    G = _matrix(G_tilde_a, "G_tilde_a")
    if F.shape[0] != P.shape[1]:
        raise ValueError(f"F_b: expected {P.shape[1]} rows (child events), got {F.shape[0]}")
    if G.shape[0] != P.shape[0]:
        raise ValueError(f"G_tilde_a: expected {P.shape[0]} rows (parent events), got {G.shape[0]}")
    return (P @ F).T @ G


def backward_g_tilde(P_ab: Sequence, G_tilde_a: Sequence, W_ba: Sequence,
                     D_b: npt.ArrayLike | None = None) -> torch.Tensor:
    """Eq 9 backward / Eq 104-111 at one child region: G~_b = D_b o sum_a P_ab^T G~_a W_ba^T.

    ``P_ab[i]`` ``(m_a, m_b)``, ``G_tilde_a[i]`` ``(m_a, n_a)``, ``W_ba[i]`` ``(n_b, n_a)``; ``D_b``
    ``(m_b, n_b)`` gates (None: no gating).  Returns ``(m_b, n_b)``.
    """
    out = _edge_sum(P_ab, G_tilde_a, W_ba, "G_tilde_a", False)
    if D_b is not None:
        D = _matrix(D_b, "D_b")
        if D.shape != out.shape:
            raise ValueError(f"D_b: expected shape {tuple(out.shape)}, got {tuple(D.shape)}")
        out = D * out
    return out


# ---------------------------------------------------------------------------- ladder demos
def _factorization(ladder: Ladder) -> Any:
    fac = getattr(ladder, "factorization", None)
    if fac is None or ladder.tables is None:
        raise ValueError("ladder: expected a top-down ladder from Ladder.factorized_binary (no factorization)")
    # the factor tables describe children drawn independently; Thm 8's demos read the tables as such
    _independent_children(ladder, "the disentanglement demos (Thm 8)")
    return fac


def region_marginals(ladder: Ladder) -> list[torch.Tensor]:
    """P(z) of every region, level by level: ``[(R_l, m_l)]`` (top-down: p_b = P_ab^T p_a)."""
    _factorization(ladder)
    tables = _ladder_parts.stacked_tables(ladder)
    p = [_ladder_parts.prior(ladder).to(torch.float64)[None]]
    for l in range(1, ladder.depth + 1):
        par = p[-1][ladder.parent_index(l)]
        p.append(torch.einsum("ca,cab->cb", par, tables[l - 1].to(torch.float64)))
    return p


def _check_weights(ladder: Ladder, weights: Sequence, fac: Any) -> list[torch.Tensor]:
    if len(weights) != ladder.depth:
        raise ValueError(f"weights: expected {ladder.depth} tensors (one per level), got {len(weights)}")
    out = []
    for l, W in enumerate(weights):
        W = torch.as_tensor(W, dtype=torch.float64)
        want = (ladder.num_regions[l + 1], fac.factors[l + 1], fac.factors[l])
        if tuple(W.shape) != want:
            raise ValueError(f"weights[{l}]: expected shape {want} (child regions, child factors, parent factors), "
                             f"got {tuple(W.shape)}")
        out.append(W)
    return out


def _random_weights(ladder: Ladder, fac: Any, gen: torch.Generator, separable: bool) -> list[torch.Tensor]:
    out = []
    for l in range(ladder.depth):
        R, nb, na = ladder.num_regions[l + 1], fac.factors[l + 1], fac.factors[l]
        if separable:
            out.append(torch.stack([random_separable_W(fac.groups(l + 1), gen, nb) for _ in range(R)]))
        else:
            out.append(torch.randn(R, nb, na, generator=gen, dtype=torch.float64))
    return out


@dataclass
class ForwardDemo:
    """Result of :func:`forward_disentangled_demo`: ``F[l]`` ``(R_l, 2^n_l, n_l)``, the weights
    ``[(R_{l+1}, n_{l+1}, n_l)]``, ``distance[l]`` = max Def 3 distance over the regions of level l,
    ``separability[l]`` = max Def 5 distance of ``weights[l]``."""

    F: list
    weights: list
    distance: list
    separability: list


def forward_disentangled_demo(ladder: Ladder, weights: Sequence | None = None, *, seed: int = 0,
                              separable: bool = True, relu: bool = True,
                              bn: bool = False, bias: bool = True) -> ForwardDemo:
    """Thm 8 on a :meth:`~teachers.ladder.Ladder.factorized_binary` ladder: random Def 3 leaf
    activations, ``weights`` (default random, separable w.r.t. the factorization's S_i if
    ``separable``), Eq 9 forward with ReLU gates / random bias / P-weighted BN (Eq 12, weights
    P(z_a), random scale and shift) up to the root; reports the Def 3 distance of every level.
    """
    fac = _factorization(ladder)
    gen = torch.Generator().manual_seed(int(seed))
    d = ladder.depth
    W = _random_weights(ladder, fac, gen, separable) if weights is None else _check_weights(ladder, weights, fac)
    p = region_marginals(ladder)
    tables = _ladder_parts.stacked_tables(ladder)
    F: list[Any] = [None] * (d + 1)
    F[d] = torch.stack([random_disentangled_F(fac.factors[d], gen) for _ in range(ladder.num_regions[d])])
    for l in range(d - 1, -1, -1):
        par = ladder.parent_index(l + 1)
        n = fac.factors[l]
        regs = []
        for r in range(ladder.num_regions[l]):
            kids = (par == r).nonzero().flatten().tolist()
            b = torch.randn(n, generator=gen, dtype=torch.float64) if bias else None
            kw: dict[str, Any] = {}
            if bn:
                kw = dict(bn_p=p[l][r], bn_scale=torch.rand(n, generator=gen, dtype=torch.float64) + 0.5,
                          bn_shift=torch.randn(n, generator=gen, dtype=torch.float64))
            regs.append(forward_region([tables[l][c] for c in kids], [F[l + 1][c] for c in kids],
                                       [W[l][c] for c in kids], bias=b, relu=relu, **kw))
        F[l] = torch.stack(regs)
    dist = [max(disentangled_F_distance(f, fac.factors[l]) for f in F[l]) for l in range(d + 1)]
    sep = [max(separability_distance(w, fac.groups(l + 1)) for w in W[l]) for l in range(d)]
    return ForwardDemo(F, W, dist, sep)


@dataclass
class UpdateDemo:
    """Result of :func:`separable_update_demo` at one parent level: ``dW`` ``(R_{l+1}, n_{l+1}, n_l)``,
    ``separability`` ``(R_{l+1},)`` Def 5 distances, ``G_distance`` the max Def 4 distance of the
    G~_a used (0 by construction), ``col_sums`` max |1^T G~_a|."""

    dW: torch.Tensor
    separability: torch.Tensor
    G_distance: float
    col_sums: float


def separable_update_demo(ladder: Ladder, level: int = 0, *, seed: int = 0, centered: bool = True) -> UpdateDemo:
    """Thm 9 at parent level ``level``: random Def 3 F_b, random Def 4 G~_a (per-factor marginals of
    P(z_a); ``centered``: 1^T G~_a = 0), Delta W_ba = (P_ab F_b)^T G~_a for every child b."""
    fac = _factorization(ladder)
    if not 0 <= level < ladder.depth:
        raise ValueError(f"level: expected a parent level in 0..{ladder.depth - 1}, got {level}")
    gen = torch.Generator().manual_seed(int(seed))
    p = region_marginals(ladder)
    na, nb = fac.factors[level], fac.factors[level + 1]
    G = [random_disentangled_G(factor_marginals(p[level][r], na), gen, centered)
         for r in range(ladder.num_regions[level])]
    par = ladder.parent_index(level + 1).tolist()
    tables = _ladder_parts.stacked_tables(ladder)
    dW = torch.stack([weight_update(tables[level][c], random_disentangled_F(nb, gen), G[par[c]])
                      for c in range(ladder.num_regions[level + 1])])
    groups = fac.groups(level + 1)
    sep = torch.tensor([separability_distance(w, groups) for w in dW], dtype=torch.float64)
    gd = max(disentangled_G_distance(g, factor_marginals(p[level][r], na)) for r, g in enumerate(G))
    cs = max(float(g.sum(0).abs().max()) for g in G)
    return UpdateDemo(dW, sep, gd, cs)


def _random_gates(n: int, gen: torch.Generator) -> torch.Tensor:
    """Def 3 ReLU gates ``(2^n, n)``: column j = 1 x d[j] x 1, d[j] uniform over the three non-dead
    patterns [1, 1], [1, 0], [0, 1] (a dead column has zero gradient, trivially disentangled)."""
    patterns = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    d = patterns[torch.randint(3, (n,), generator=gen)]
    return _expand(d, torch.ones(n, 2, dtype=torch.float64))


@dataclass
class BackwardDemo:
    """Result of :func:`backward_disentangle_distance`: ``G_tilde`` ``(R_{l+1}, m, n)`` and its Def 4
    distances ``distance`` ``(R_{l+1},)`` (w.r.t. the per-factor marginals of P(z_b)); ``parent_distance``
    is the max Def 4 distance of the parents' G~_a (0 by construction)."""

    G_tilde: torch.Tensor
    distance: torch.Tensor
    parent_distance: float


def backward_disentangle_distance(ladder: Ladder, level: int = 1, *, seed: int = 0, gated: bool = True) -> BackwardDemo:
    """§7.7.1 / Eq 111: G~_b = D_b o P_ab^T G~_a W_ba^T at child level ``level`` (>= 1) with P_ab
    Kronecker, W_ba separable (random), G~_a a random centered Def 4 matrix and (``gated``) D_b the
    random Def 3 ReLU gates with no all-off column (disentangled, Lemma 1).  Every hypothesis of
    Thm 8/9 holds, yet the returned Def 4 distances of G~_b are generically non-zero: the paper
    shows this (Eq 111, "no longer disentangled") and leaves a fix to future work.
    """
    fac = _factorization(ladder)
    if not 1 <= level <= ladder.depth:
        raise ValueError(f"level: expected a child level in 1..{ladder.depth}, got {level}")
    gen = torch.Generator().manual_seed(int(seed))
    p = region_marginals(ladder)
    na, nb = fac.factors[level - 1], fac.factors[level]
    G = [random_disentangled_G(factor_marginals(p[level - 1][r], na), gen, True)
         for r in range(ladder.num_regions[level - 1])]
    pd = max(disentangled_G_distance(g, factor_marginals(p[level - 1][r], na)) for r, g in enumerate(G))
    tables = _ladder_parts.stacked_tables(ladder)
    par = ladder.parent_index(level).tolist()
    out, dist = [], []
    for c in range(ladder.num_regions[level]):
        W = random_separable_W(fac.groups(level), gen, nb)
        D = _random_gates(nb, gen) if gated else None
        g = backward_g_tilde([tables[level - 1][c]], [G[par[c]]], [W], D)
        out.append(g)
        dist.append(disentangled_G_distance(g, factor_marginals(p[level][c], nb)))
    return BackwardDemo(torch.stack(out), torch.tensor(dist, dtype=torch.float64), pd)


# ---------------------------------------------------------------------------- §7.7.1 / Eq 115
def _def4_column_vectors(p: torch.Tensor, factor: int) -> torch.Tensor:
    """The two vectors ``(2^s, 2)`` spanning the Def 4 column form for ``factor``:
    b_k = p[0] x ... x e_k (position factor) x ... x p[s-1], k = 0, 1, so that
    {p[0] x ... x h x ... x p[s-1] : h in R^2} = {b h}.  They have disjoint supports (orthogonal)."""
    eye = torch.eye(2, dtype=torch.float64)
    return torch.stack([_kron_all([eye[k] if i == factor else p[i] for i in range(p.shape[0])]) for k in range(2)], 1)


def _column_distance(u: torch.Tensor, Q: torch.Tensor, zero: float) -> float:
    """||Q u|| / ||u||, NaN when ||u|| <= ``zero`` (no direction to measure)."""
    nu = float(torch.linalg.norm(u))
    return float(torch.linalg.norm(Q @ u)) / nu if nu > zero else float("nan")


@dataclass
class Eq115Result:
    """Result of :func:`eq115_best_distance` (one child region beta, one column ``factor`` of S_1).

    ``distance``: min over c != 0 of ||Q u(c)|| / ||u(c)||, u(c) = sum_a c_a (v+_a - v-_a), Q the
    projector onto the complement of the Def 4 column form (NaN if every difference is 0; then
    ``rank`` = 0, ``c`` = e_0, ``u`` = ``h`` = 0).
    ``c`` ``(K,)`` an optimal c (unit norm, minimum norm among the c giving the optimal u, largest
    entry positive); ``u`` ``(2^s,)`` = sum_a c_a (v+_a - v-_a); ``h`` ``(2,)`` the least-squares Def 4
    fit, u ~ p[0] x ... x h x ... x p[s-1].  ``ones_distance``: the distance for c = 1 (all parents
    weighted alike); ``single_distance`` ``(K,)``: each parent alone (NaN where v+_a = v-_a).  ``rank``:
    the dimension of the span of the differences (at most 2^s - 1, they sum to 0)."""

    distance: float
    c: torch.Tensor
    u: torch.Tensor
    h: torch.Tensor
    ones_distance: float
    single_distance: torch.Tensor
    rank: int
    factor: int


def eq115_best_distance(v_plus: npt.ArrayLike, v_minus: npt.ArrayLike, p_factors: npt.ArrayLike, factor: int = 0, *,
                        rtol: float | None = None) -> Eq115Result:
    """§7.7.1 / Eq 115: how close the multi-parent backward column can be brought to Def 4 by the
    parents' weights.

    For a child region beta whose column ``factor`` (a child factor in S_1) receives from parents a,
    Eq 115 reads sum_a P_{a,S_1}^T g~^a_1 w_{a,k}^T = sum_a c_a (v+_a - v-_a), because 1^T g~^a_1 = 0;
    c_a = g~^a_1[1] w_{a,k} is free through the weights.  The paper hopes ("future work") that a c
    exists making this a rank-1 (Def 4) tensor when the parents are "informative in a diverse way".

    :param v_plus: ``(K, 2^s)``, row a = P(z_beta[S_1] | z_a[1] = 1), a distribution over the 2^s joint
        events of the s binary factors of S_1 (factor 0 the most significant bit).
    :param v_minus: ``(K, 2^s)``, row a = P(z_beta[S_1] | z_a[1] = 0).
    :param p_factors: ``(s, 2)`` the child's per-factor marginals p[i] = [P(z[i]=0), P(z[i]=1)].
    :param factor: which factor of S_1 the column belongs to; the Def 4 form is the 2-dim subspace
        {p[0] x ... x h (position ``factor``) x ... x p[s-1] : h in R^2}.
    :param rtol: singular values of U = (v+ - v-)^T below ``rtol * max`` count as 0 (default
        ``max(2^s, K) * eps``, numpy's matrix-rank rule); also the threshold under which a u is 0.

    The minimum is the smallest generalized eigenvalue (square-rooted) of (U^T Q U, U^T U), computed stably
    on U's column space (U = V_r S_r W_r^T: the smallest singular value of Q V_r, c = W_r S_r^-1 y), also for
    rank-deficient U, in float64.  0 once K >= 2^s - 1 differences span the sum-zero space, the parent's own
    Def 4 distance for K = 1 (a tree), never larger with more parents, 0 for s = 1 (``tests/test_eq115.py``).
    """
    vp = _check_stochastic(v_plus, "v_plus")
    vm = _check_stochastic(v_minus, "v_minus")
    if vp.shape != vm.shape:
        raise ValueError(f"v_minus: expected shape {tuple(vp.shape)} (that of v_plus), got {tuple(vm.shape)}")
    K, m = vp.shape
    if K < 1:
        raise ValueError("v_plus: expected at least one parent (row), got 0")
    p = torch.as_tensor(p_factors, dtype=torch.float64)
    if p.dim() != 2 or p.shape[1] != 2 or p.shape[0] < 1:
        raise ValueError(f"p_factors: expected shape (s, 2) with s >= 1, got {tuple(p.shape)}")
    s = p.shape[0]
    if m != 2**s:
        raise ValueError(f"p_factors: s = {s} factors (2^s = {2**s} joint events) but v_plus/v_minus have "
                         f"{m} columns")
    p = _check_p_factors(p, s)
    if isinstance(factor, bool) or int(factor) != factor or not 0 <= int(factor) < s:
        raise ValueError(f"factor: expected an index in 0..{s - 1} (a factor of S_1), got {factor!r}")
    factor = int(factor)
    if rtol is not None and not 0 <= float(rtol) < 1:
        raise ValueError(f"rtol: expected a relative singular-value threshold in [0, 1), got {rtol!r}")
    b = _def4_column_vectors(p, factor)
    nb2 = (b * b).sum(0)  # > 0: every p[i] sums to 1
    Q = torch.eye(m, dtype=torch.float64) - (b / nb2) @ b.T
    U = (vp - vm).T  # (2^s, K)
    Uv, S, Wh = torch.linalg.svd(U, full_matrices=False)
    smax = float(S[0])
    tol = smax * (max(m, K) * torch.finfo(torch.float64).eps if rtol is None else float(rtol))
    r = int((S > tol).sum()) if smax > 0 else 0
    ones_d = _column_distance(U.sum(1), Q, tol * K**0.5)
    single = torch.tensor([_column_distance(U[:, a], Q, tol) for a in range(K)], dtype=torch.float64)
    if r == 0:
        c = torch.zeros(K, dtype=torch.float64)
        c[0] = 1.0
        return Eq115Result(float("nan"), c, torch.zeros(m, dtype=torch.float64), torch.zeros(2, dtype=torch.float64),
                           ones_d, single, 0, factor)
    Vr = Uv[:, :r]
    _, _, yh = torch.linalg.svd(Q @ Vr, full_matrices=False)  # (2^s, r), r <= 2^s - 1: last = smallest
    y = yh[-1]
    c = Wh[:r].T @ (y / S[:r])
    c = c / torch.linalg.norm(c)
    if c[int(c.abs().argmax())] < 0:
        c = -c
    u = U @ c
    h = (b.T @ u) / nb2
    return Eq115Result(_column_distance(u, Q, 0.0), c, u, h, ones_d, single, r, factor)


def eq115_from_statistics(conditionals: Sequence[npt.ArrayLike] | torch.Tensor, p_child: npt.ArrayLike,
                          factor: int = 0, *,
                          p_parents: npt.ArrayLike | None = None, atol: float = 1e-9,
                          rtol: float | None = None) -> Eq115Result:
    """:func:`eq115_best_distance` from a child region's statistics.

    :param conditionals: K tables P(z_beta[S_1] | z_a[1]) of shape ``(2, 2^s)`` (a list, or a
        ``(K, 2, 2^s)`` tensor), row 0 = v-_a (z_a[1] = 0), row 1 = v+_a (z_a[1] = 1).
    :param p_child: P(z_beta[S_1]) ``(2^s,)``; the Def 4 marginals are its :func:`factor_marginals`.
    :param p_parents: optional ``(K,)`` P(z_a[1] = 1); if given, the total-probability rule
        (1 - q_a) v-_a + q_a v+_a = P(z_beta[S_1]) (Eq 112) is checked to ``atol`` for every parent.
    """
    if isinstance(conditionals, torch.Tensor) and conditionals.dim() != 3:
        raise ValueError(f"conditionals: expected K tables of shape (2, 2^s), got a tensor of shape "
                         f"{tuple(conditionals.shape)}")
    tables = list(conditionals)
    if not tables:
        raise ValueError("conditionals: expected at least one parent table, got none")
    pc = torch.as_tensor(p_child, dtype=torch.float64)
    if pc.dim() != 1:
        raise ValueError(f"p_child: expected a vector (2^s,), got shape {tuple(pc.shape)}")
    pc = _check_stochastic(pc[None], "p_child")[0]
    m = pc.numel()
    s = m.bit_length() - 1
    if s < 1 or m != 2**s:
        raise ValueError(f"p_child: expected 2^s entries (s >= 1 binary factors), got {m}")
    rows = []
    for i, T in enumerate(tables):
        T = _check_stochastic(T, f"conditionals[{i}]")
        if T.shape != (2, m):
            raise ValueError(f"conditionals[{i}]: expected shape (2, {m}) (rows z_a = 0, 1; the {m} events of "
                             f"p_child), got {tuple(T.shape)}")
        rows.append(T)
    P = torch.stack(rows)  # (K, 2, 2^s)
    if p_parents is not None:
        q = torch.as_tensor(p_parents, dtype=torch.float64)
        if q.shape != (len(rows),):
            raise ValueError(f"p_parents: expected shape ({len(rows)},), got {tuple(q.shape)}")
        if (q < 0).any() or (q > 1).any():
            raise ValueError("p_parents: expected probabilities P(z_a[1] = 1) in [0, 1]")
        mix = (1 - q)[:, None] * P[:, 0] + q[:, None] * P[:, 1]
        dev = (mix - pc).abs().amax(1)
        if (dev > atol).any():
            a = int(dev.argmax())
            raise ValueError(f"conditionals[{a}]: (1 - q) v- + q v+ differs from p_child by {float(dev[a]):.3g} "
                             f"(total probability, Eq 112; q = p_parents[{a}])")
    return eq115_best_distance(P[:, 1], P[:, 0], factor_marginals(pc, s), factor, rtol=rtol)


def random_parent_conditionals(p_child: npt.ArrayLike, k: int, generator: torch.Generator | None = None,
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    """K random parents of a child with joint P(z_beta[S_1]) = ``p_child`` ``(2^s,)``, consistent with it:
    q_a = P(z_a[1] = 1) ~ U(0.2, 0.8), a random sum-zero direction d_a (no Kronecker structure) and
    v-_a = p - q_a t_a d_a, v+_a = p + (1 - q_a) t_a d_a with t_a a random fraction (0.3 .. 0.9) of the
    largest step keeping both non-negative, so (1 - q_a) v-_a + q_a v+_a = p exactly (Eq 112).
    Returns ``(conditionals (K, 2, 2^s), p_parents (K,))``; the first K' parents do not depend on K."""
    p = _check_stochastic(torch.as_tensor(p_child, dtype=torch.float64)[None], "p_child")[0]
    if int(k) != k or k < 1:
        raise ValueError(f"k: expected a positive number of parents, got {k!r}")
    m = p.numel()
    out, qs = [], []
    for _ in range(int(k)):
        q = 0.2 + 0.6 * float(torch.rand((), generator=generator, dtype=torch.float64))
        d = torch.randn(m, generator=generator, dtype=torch.float64)
        d = d - d.mean()
        frac = 0.3 + 0.6 * float(torch.rand((), generator=generator, dtype=torch.float64))
        # largest t with p - q t d >= 0 and p + (1 - q) t d >= 0
        lim = [float((p[d > 0] / (q * d[d > 0])).min()), float((p[d < 0] / ((1 - q) * -d[d < 0])).min())]
        t = frac * min(lim)
        out.append(torch.stack([p - q * t * d, p + (1 - q) * t * d]))
        qs.append(q)
    return torch.stack(out), torch.tensor(qs, dtype=torch.float64)


def _random_child_joint(m: int, gen: torch.Generator) -> torch.Tensor:
    """A random strictly positive joint ``(m,)``, Dirichlet(1) (normalized exponentials)."""
    e = -torch.log(torch.rand(m, generator=gen, dtype=torch.float64).clamp_min(1e-300))
    return e / e.sum()


@dataclass
class MultiParentDemo:
    """Result of :func:`multi_parent_backward_demo`: for K = ``k[i]`` parents (the first K of one random
    family), ``distance[i]`` the Eq 115 best distance, ``ones_distance[i]`` for c = 1, ``single_min[i]``
    the best single parent among the first K, ``backward_distance[i]`` the Def 4 distance of G~_b from
    :func:`backward_g_tilde` at the optimal weights (the same number, through the module's Eq 104
    backward and :func:`disentangled_G_distance`); ``p_child`` ``(2^s,)``, ``conditionals``
    ``(K_max, 2, 2^s)``, ``p_parents`` ``(K_max,)``, ``G_tilde`` the K_max backward ``(2^s, s)``."""

    k: list
    distance: torch.Tensor
    ones_distance: torch.Tensor
    single_min: torch.Tensor
    backward_distance: torch.Tensor
    p_child: torch.Tensor
    conditionals: torch.Tensor
    p_parents: torch.Tensor
    G_tilde: torch.Tensor


def multi_parent_backward_demo(s: int = 2, *, k_max: int | None = None, seed: int = 0,
                               factor: int = 0) -> MultiParentDemo:
    """§7.7.1 / Eq 115 on random statistics: a child with s binary factors (one group S_1) and a random
    joint P(z_beta) (not a product of marginals), K = 1 .. ``k_max`` (default 2^s) single-factor parents
    from :func:`random_parent_conditionals`.  For each K the best c is turned into weights: parent a
    sends G~_a = g_a [-1, 1]^T (centered, Def 4 for one factor) with W_a[factor, 0] = c_a / g_a (other
    rows 0), and G~_b = sum_a P_a^T G~_a W_a^T (Eq 104, :func:`backward_g_tilde`).  The distance is
    generically > 0 for K < 2^s - 1 and 0 (rounding) from K = 2^s - 1 on: Eq 115's hope holds once the
    parents span the sum-zero space."""
    if int(s) != s or s < 1:
        raise ValueError(f"s: expected a number of child factors >= 1, got {s!r}")
    s = int(s)
    m = 2**s
    k_max = m if k_max is None else k_max
    if int(k_max) != k_max or k_max < 1:
        raise ValueError(f"k_max: expected a positive number of parents, got {k_max!r}")
    k_max = int(k_max)
    gen = torch.Generator().manual_seed(int(seed))
    pc = _random_child_joint(m, gen)
    P, q = random_parent_conditionals(pc, k_max, gen)
    g = 0.5 + torch.rand(k_max, generator=gen, dtype=torch.float64)
    pf = factor_marginals(pc, s)
    ks, dist, ones, single, back, G_b = list(range(1, k_max + 1)), [], [], [], [], None
    for K in ks:
        res = eq115_from_statistics(P[:K], pc, factor, p_parents=q[:K])
        dist.append(res.distance)
        ones.append(res.ones_distance)
        single.append(float(res.single_distance.min()))
        G_a = [g[a] * torch.tensor([[-1.0], [1.0]], dtype=torch.float64) for a in range(K)]
        W_a = torch.zeros(K, s, 1, dtype=torch.float64)
        W_a[:, factor, 0] = res.c / g[:K]
        G_b = backward_g_tilde(list(P[:K]), G_a, list(W_a))
        back.append(disentangled_G_distance(G_b, pf))
    assert G_b is not None, "ks = 1 .. k_max is not empty"
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    return MultiParentDemo(ks, t(dist), t(ones), t(single), t(back), pc, P, q, G_b)
