"""ReLU versus linear networks on the summarization ladder (framework paper §5.1, Thm 6 and Thm 7;
``docs/theory.md`` §1.9 states vert(P), the theorems and the departures, and maps each to its function).

vert(P) is one feasibility LP per row (``scipy.optimize.linprog``); Thm 6's ReLU side builds weights with
ReLU(sum_b P_ab F_b W_ba + 1 bias_a^T) = I (:func:`relu_identity_weights`, :func:`relu_identity_ladder`),
its linear side bounds the loss by Eckart-Young (:func:`linear_loss_lower_bound`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch
from scipy.optimize import linprog

from smaso import _ladder_parts
from smaso.plots._base import finish_figure, plt
from smaso.theorems.conditions import _positive_int
from teachers.ladder import Ladder
from teachers.statistics import EventStatistics, exact_statistics

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "ReluIdentityConstruction",
    "all_vert",
    "best_linear_loss",
    "eckart_young_loss",
    "is_vertex",
    "ladder_linear_loss_lower_bound",
    "ladder_linear_rank_bounds",
    "linear_loss_lower_bound",
    "plot_relu_vs_linear",
    "propagate_relu",
    "relu_identity_ladder",
    "relu_identity_weights",
    "relu_region_forward",
    "relu_vs_linear_curve",
    "spherical_table",
    "vert",
    "vertices",
]

ROW_SUM_TOL = 1e-6
SPLITS = ("per_child", "joint")


# --------------------------------------------------------------------------- input checks
def _as_matrix(P: npt.ArrayLike, name: str = "P", *, require_stochastic: bool = False) -> np.ndarray:
    """``P`` as a finite float64 ``(m, n)`` array; with ``require_stochastic`` its rows must be
    distributions (non-negative, summing to 1 within ``ROW_SUM_TOL``)."""
    if isinstance(P, torch.Tensor):
        P = P.detach().cpu().numpy()
    try:
        A = np.asarray(P, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: expected a 2-D array of numbers ({e})") from None
    if A.ndim != 2 or A.shape[0] < 1 or A.shape[1] < 1:
        raise ValueError(f"{name}: expected a non-empty 2-D array (m x n), got shape {A.shape}")
    if not np.isfinite(A).all():
        raise ValueError(f"{name}: contains NaN or infinity")
    if require_stochastic:
        neg = np.argwhere(A < 0)
        if len(neg):
            i, j = neg[0]
            raise ValueError(f"{name}[{i}, {j}] = {A[i, j]:.6g} is negative: rows of a conditional "
                             "probability matrix P_ab = P(z_b | z_a) must be distributions")
        s = A.sum(1)
        bad = np.flatnonzero(np.abs(s - 1) > ROW_SUM_TOL)
        if len(bad):
            raise ValueError(f"{name}: row {bad[0]} sums to {s[bad[0]]:.9g}, expected 1 (tolerance {ROW_SUM_TOL:g}): "
                             "rows of a conditional probability matrix P_ab = P(z_b | z_a) must be distributions")
    return A


# --------------------------------------------------------------------------- vertices (Thm 6/7's vert)
def _hull_residual(P: np.ndarray, i: int) -> float:
    """min over a in the simplex of ||p_i - sum_{j != i} a_j p_j||_1 (0 iff p_i is not a vertex)."""
    m, n = P.shape
    if m == 1:
        return np.inf  # the hull of no other rows is empty: the single row is a vertex
    Q = np.delete(P, i, axis=0)  # (m-1, n)
    k = m - 1
    # variables [a (k), s_plus (n), s_minus (n)] >= 0; Q^T a + s+ - s- = p_i, 1^T a = 1
    A_eq = np.zeros((n + 1, k + 2 * n))
    A_eq[:n, :k] = Q.T
    A_eq[:n, k:k + n] = np.eye(n)
    A_eq[:n, k + n:] = -np.eye(n)
    A_eq[n, :k] = 1.0
    b_eq = np.concatenate([P[i], [1.0]])
    c = np.concatenate([np.zeros(k), np.ones(2 * n)])
    res = linprog(c, A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    if res.status != 0:  # pragma: no cover - the LP is always feasible and bounded
        raise RuntimeError(f"linprog failed on row {i}: {res.message}")
    a = np.clip(res.x[:k], 0, None)
    a = a / a.sum()
    # the LP's own objective is only as exact as its feasibility tolerance: re-measure
    return float(min(res.fun, np.abs(Q.T @ a - P[i]).sum()))


def _tol(P: np.ndarray, tol: float) -> float:
    return tol * max(1.0, float(np.abs(P).max()))


def is_vertex(P: npt.ArrayLike, i: int, *, tol: float = 1e-7, require_stochastic: bool = False) -> bool:
    """Whether row ``i`` of ``P`` (``m x n``) is a vertex of the convex hull of the rows (Thm 6/7).

    Solved as a linear program: p_i is *not* a vertex iff p_i = sum_{j != i} a_j p_j for some
    a >= 0 with sum a = 1; the LP minimizes the L1 residual of that equation, and p_i is a vertex
    iff the minimum exceeds ``tol * max(1, max|P|)``.  A row equal to another row is not a vertex.

    :param P: ``(m, n)`` array (numpy, torch or nested lists).
    :param i: row index, ``0 <= i < m``.
    :param require_stochastic: also require the rows to be distributions (a P_ab); ValueError naming P if not.
    """
    A = _as_matrix(P, require_stochastic=require_stochastic)
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < A.shape[0]:
        raise ValueError(f"i: expected a row index in [0, {A.shape[0]}), got {i!r}")
    return _hull_residual(A, int(i)) > _tol(A, tol)


def vertices(P: npt.ArrayLike, *, tol: float = 1e-7, require_stochastic: bool = False) -> np.ndarray:
    """Boolean mask ``(m,)``: which rows of ``P`` (``m x n``) are vertices of the hull of the rows."""
    A = _as_matrix(P, require_stochastic=require_stochastic)
    t = _tol(A, tol)
    return np.array([_hull_residual(A, i) > t for i in range(A.shape[0])], dtype=bool)


def vert(P: npt.ArrayLike, *, tol: float = 1e-7, require_stochastic: bool = False) -> int:
    """vert(P) of Thm 6/7: the number of rows of ``P`` (``m x n``) that are vertices of the hull of the rows."""
    return int(vertices(P, tol=tol, require_stochastic=require_stochastic).sum())


def all_vert(P: npt.ArrayLike, *, tol: float = 1e-7, require_stochastic: bool = False) -> bool:
    """Whether ``P`` (``m x n``) is all-vert (Thm 6's hypothesis): vert(P) = m."""
    return bool(vertices(P, tol=tol, require_stochastic=require_stochastic).all())


# --------------------------------------------------------------------------- Thm 6: ReLU construction
def _region_inputs(P_list: Sequence[npt.ArrayLike], F_list: Sequence[npt.ArrayLike] | None, name_p: str = "P_list",
                   name_f: str = "F_list") -> tuple[list[np.ndarray], list[np.ndarray]]:
    if isinstance(P_list, (np.ndarray, torch.Tensor)) and np.ndim(P_list) == 2:
        P_list = [P_list]
    if not isinstance(P_list, Sequence) and not isinstance(P_list, (np.ndarray, torch.Tensor)):
        raise ValueError(f"{name_p}: expected a sequence of m_a x m_b matrices, got {type(P_list).__name__}")
    Ps = [_as_matrix(P, f"{name_p}[{b}]", require_stochastic=True) for b, P in enumerate(P_list)]
    if not Ps:
        raise ValueError(f"{name_p}: a parent region needs at least one child")
    m = Ps[0].shape[0]
    for b, P in enumerate(Ps):
        if P.shape[0] != m:
            raise ValueError(f"{name_p}[{b}]: has {P.shape[0]} rows (parent events), {name_p}[0] has {m}")
    if F_list is None:
        Fs = [np.eye(P.shape[1]) for P in Ps]
    else:
        if isinstance(F_list, (np.ndarray, torch.Tensor)) and np.ndim(F_list) == 2:
            F_list = [F_list]
        Fs = [_as_matrix(F, f"{name_f}[{b}]") for b, F in enumerate(F_list)]
        if len(Fs) != len(Ps):
            raise ValueError(f"{name_f}: {len(Fs)} child inputs for {len(Ps)} children")
        for b, (P, F) in enumerate(zip(Ps, Fs, strict=True)):
            if F.shape[0] != P.shape[1]:
                raise ValueError(f"{name_f}[{b}]: expected {P.shape[1]} rows (child events m_b), got {F.shape[0]}")
    return Ps, Fs


def _separating_hyperplane(Q: np.ndarray, i: int, target: float, margin: float) -> tuple[np.ndarray, float] | None:
    """w, c with Q[i] w + c = target and Q[j] w + c <= -margin (j != i), of least ||w||_1; None if none."""
    m, n = Q.shape
    others = np.delete(np.arange(m), i)
    # variables [w+ (n), w- (n), c (free)]
    c_obj = np.concatenate([np.ones(2 * n), [0.0]])
    A_ub = np.hstack([Q[others], -Q[others], np.ones((len(others), 1))]) if len(others) else None
    b_ub = np.full(len(others), -margin) if len(others) else None
    A_eq = np.concatenate([Q[i], -Q[i], [1.0]])[None]
    bounds = [(0, None)] * (2 * n) + [(None, None)]
    res = linprog(c_obj, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=[target], bounds=bounds, method="highs")
    if res.status != 0:
        return None
    w = res.x[:n] - res.x[n:2 * n]
    c = target - float(Q[i] @ w)  # polish: the equality exactly, not to the LP's tolerance
    if len(others) and (Q[others] @ w + c).max() > -0.5 * margin:
        return None
    return w, c


def relu_identity_weights(P_list: Sequence[npt.ArrayLike], F_list: Sequence[npt.ArrayLike] | None = None, *,
                          split: str = "per_child",
                          margin: float = 1.0) -> tuple[list[np.ndarray], np.ndarray]:
    """Thm 6's construction for one parent region a: weights W_ba and bias with
    ReLU(sum_b P_ab F_b W_ba + 1 bias^T) = I (``m_a x m_a``, so n_a = m_a).

    ``split="per_child"`` follows the paper's proof (appendix, Thm 6): for every child b the rows q_i of
    Q_b = P_ab F_b (``m_a x n_b``) must be all-vert (Thm 7); for each event i an LP finds the least-L1
    hyperplane (w_i^b, c_i^b) with w_i^b . q_i + c_i^b = 1/|ch(a)| and w_i^b . q_j + c_i^b <= -margin for
    j != i; column i of W_ba is w_i^b and bias_i = sum_b c_i^b, so the summed pre-activation is 1 on the
    diagonal (the bias polished to rounding) and <= -|ch(a)| margin / 2 off it.  ``split="joint"`` does
    the same on the concatenated input [Q_1 ... Q_k] with value 1, needing only its rows all-vert (as on
    the fully informative ladder, whose single P_ab have repeated rows).

    :param P_list: the parent's P_ab = P(z_b | z_a), one ``(m_a, m_b)`` row-stochastic matrix per child.
    :param F_list: the children's inputs F_b ``(m_b, n_b)``; default identities (one-hot leaves).
    :param margin: required depth of the off-diagonal pre-activations below 0 (> 0; the scale is free).
    :returns: ``(W_list, bias)``: ``W_list[b]`` of shape ``(n_b, m_a)`` and ``bias`` of shape ``(m_a,)``.
    :raises ValueError: naming the argument, when the P are not row-stochastic or do not fit, or
        when the inputs are not all-vert (no separating hyperplane exists).
    """
    if split not in SPLITS:
        raise ValueError(f"split: expected one of {SPLITS}, got {split!r}")
    if not margin > 0 or not np.isfinite(margin):
        raise ValueError(f"margin: must be > 0 and finite, got {margin!r}")
    Ps, Fs = _region_inputs(P_list, F_list)
    Qs = [P @ F for P, F in zip(Ps, Fs, strict=True)]
    m, k = Ps[0].shape[0], len(Ps)
    bias = np.zeros(m)
    blocks = Qs if split == "per_child" else [np.hstack(Qs)]
    Ws = []
    for b, Q in enumerate(blocks):
        W = np.zeros((Q.shape[1], m))
        for i in range(m):
            sol = _separating_hyperplane(Q, i, 1.0 / k if split == "per_child" else 1.0, margin)
            if sol is None and split == "per_child":
                raise ValueError(f"P_list[{b}]: row {i} of P_ab F_b is not a vertex of the hull of the rows "
                                 "(Thm 6 needs every P_ab F_b all-vert; try split='joint')")
            if sol is None:
                raise ValueError(f"P_list: row {i} of the concatenated input [P_ab F_b]_b is not a vertex of the hull "
                                 "of the rows, so no ReLU unit can single it out")
            W[:, i], c = sol
            bias[i] += c
        Ws.append(W)
    if split == "per_child":
        return Ws, bias
    splits = np.cumsum([Qb.shape[1] for Qb in Qs])[:-1]
    return list(np.split(Ws[0], splits, axis=0)), bias


def relu_region_forward(P_list: Sequence[npt.ArrayLike], F_list: Sequence[npt.ArrayLike] | None,
                        W_list: Sequence[npt.ArrayLike], bias: npt.ArrayLike | None = None) -> tuple[np.ndarray,
                        np.ndarray]:
    """Eq 9 forward for one region: U = sum_b P_ab F_b W_ba + 1 bias^T ``(m_a, n_a)`` and F_a = ReLU(U).

    ``F_list=None``: identities.  ``W_list[b]``: ``(n_b, n_a)``; ``bias``: ``(n_a,)`` or None.
    """
    Ps, Fs = _region_inputs(P_list, F_list)
    if len(W_list) != len(Ps):
        raise ValueError(f"W_list: {len(W_list)} weight matrices for {len(Ps)} children")
    Ws = [_as_matrix(W, f"W_list[{b}]") for b, W in enumerate(W_list)]
    n_a = Ws[0].shape[1]
    U = np.zeros((Ps[0].shape[0], n_a))
    for b, (P, F, W) in enumerate(zip(Ps, Fs, Ws, strict=True)):
        if W.shape != (F.shape[1], n_a):
            raise ValueError(f"W_list[{b}]: expected shape {(F.shape[1], n_a)} (n_b x n_a), got {W.shape}")
        U += P @ F @ W
    if bias is not None:
        bias = np.asarray(bias, dtype=np.float64)
        if bias.shape != (n_a,):
            raise ValueError(f"bias: expected shape {(n_a,)}, got {bias.shape}")
        U += bias[None]
    return U, np.maximum(U, 0.0)


@dataclass
class ReluIdentityConstruction:
    """Thm 6's weights for a whole ladder and the propagated statistics (float64, level l = 0..d).

    ``weights[l]``: ``(R_{l+1}, n_{l+1}, n_l)`` (the student's W_ba layout), ``biases[l]``:
    ``(R_l, n_l)``; ``U[l]`` and ``F[l]``: ``(R_l, m_l, n_l)`` pre-activations and ReLU outputs
    (``F[d]`` = the leaf inputs, ``U[d]`` None); ``loss`` = ||F_omega - I||_F^2.
    """

    weights: list[torch.Tensor]
    biases: list[torch.Tensor]
    U: list
    F: list
    loss: float


def _statistics(ladder_or_stats: Ladder | EventStatistics) -> EventStatistics:
    # Thm 6/7 read only P(z_child | z_parent) per edge (the reformulation's recursion is pairwise), which
    # exact_statistics gives right on ladders with productions too (tests/test_rhm_readers.py)
    if isinstance(ladder_or_stats, Ladder):
        return exact_statistics(ladder_or_stats)
    if isinstance(ladder_or_stats, EventStatistics):
        return ladder_or_stats
    raise ValueError(f"ladder: expected a Ladder or EventStatistics, got {type(ladder_or_stats).__name__}")


def _leaf_inputs(lad: Ladder, leaf_inputs: torch.Tensor | None) -> torch.Tensor:
    R, m = lad.num_regions[-1], lad.events[-1]
    if leaf_inputs is None:
        return torch.eye(m, dtype=torch.float64).expand(R, m, m).clone()
    t = torch.as_tensor(np.asarray(leaf_inputs, dtype=np.float64))
    if t.ndim != 3 or t.shape[:2] != (R, m):
        raise ValueError(f"leaf_inputs: expected shape ({R}, {m}, n_d), got {tuple(t.shape)}")
    return t


def propagate_relu(P_down: Sequence, weights: Sequence, biases: Sequence, leaf_inputs: torch.Tensor,
                   branching: Sequence[int]) -> tuple[list, list]:
    """The reformulation's forward recursion (Eq 9, no BN) with D = the ReLU gates [U > 0]:
    U_a = sum_b P_ab F_b W_ba + 1 bias_a^T, F_a = D o U_a, batched per level as in
    :func:`smaso.student.reformulation.reformulate`.

    ``P_down[l]`` ``(R_l, m_{l-1}, m_l)`` (index 0 unused), ``weights[l]`` ``(R_{l+1}, n_{l+1}, n_l)``,
    ``biases[l]`` ``(R_l, n_l)`` or None, ``leaf_inputs`` ``(R_d, m_d, n_d)``.  Returns ``(U, F)`` lists.
    """
    d = len(weights)
    U, F_ = [None] * (d + 1), [None] * (d + 1)  # type: list, list
    F_[d] = leaf_inputs.to(torch.float64)
    for l in range(d - 1, -1, -1):
        P = P_down[l + 1].to(torch.float64)
        W = weights[l].to(torch.float64)
        if P.shape[0] != W.shape[0] or W.shape[1] != F_[l + 1].shape[-1]:
            raise ValueError(f"weights[{l}]: shape {tuple(W.shape)} does not match the ladder "
                             f"({P.shape[0]} child regions with {F_[l + 1].shape[-1]} nodes)")
        contrib = torch.einsum("cab,cbk,ckj->caj", P, F_[l + 1], W)
        R_l = P.shape[0] // branching[l]
        U[l] = contrib.reshape(R_l, branching[l], P.shape[1], -1).sum(1)
        if biases[l] is not None:
            U[l] = U[l] + biases[l].to(torch.float64)[:, None, :]
        F_[l] = (U[l] > 0).to(torch.float64) * U[l]
    return U, F_


def relu_identity_ladder(ladder: Ladder | EventStatistics, *, leaf_inputs: torch.Tensor | None = None,
                         split: str = "per_child",
                         margin: float = 1.0) -> ReluIdentityConstruction:
    """Thm 6 for a whole ladder: weights and biases, built level by level from the leaves with
    :func:`relu_identity_weights` (on the *propagated* F_b of the level below, Thm 7), such that
    F_alpha = I at every level and Loss_ReLU = ||F_omega - I||_F^2 = 0; n_l = m_l nodes.

    The result is checked by :func:`propagate_relu` (the reformulation's recursion, D the ReLU
    gates of the constructed pre-activations); ``loss`` is the propagated one.

    :param ladder: a :class:`~teachers.ladder.Ladder` (exact statistics are used) or its
        :class:`~teachers.statistics.EventStatistics`; P_down must have distributions as rows
        (every event of positive probability).
    :param leaf_inputs: E[x | z] at the leaves ``(R_d, m_d, n_d)``, full row rank; default I.
    :param split: ``"per_child"`` (the paper's proof) or ``"joint"``; see :func:`relu_identity_weights`.
    """
    stats = _statistics(ladder)
    lad = stats.ladder
    d = lad.depth
    branching = _ladder_parts.uniform_branching(lad)
    # down[l] = P_down[l + 1], the tables from level l to its children
    down = [_ladder_parts.at_level(stats.P_down, l, "P_down").to(torch.float64) for l in range(1, d + 1)]
    F_below = _leaf_inputs(lad, leaf_inputs)
    weights: list = [None] * d
    biases: list = [None] * d
    for l in range(d - 1, -1, -1):
        b_l, R_l, m_l = branching[l], lad.num_regions[l], lad.events[l]
        W_l = torch.zeros(R_l * b_l, F_below.shape[-1], m_l, dtype=torch.float64)
        bias_l = torch.zeros(R_l, m_l, dtype=torch.float64)
        for r in range(R_l):
            kids = range(r * b_l, (r + 1) * b_l)
            try:
                Ws, bias = relu_identity_weights([down[l][c].numpy() for c in kids],
                                                 [F_below[c].numpy() for c in kids], split=split, margin=margin)
            except ValueError as e:
                raise ValueError(f"ladder: level {l} region {r}: {e}") from None
            for j, c in enumerate(kids):
                W_l[c] = torch.from_numpy(Ws[j])
            bias_l[r] = torch.from_numpy(bias)
        weights[l], biases[l] = W_l, bias_l
        # the next level up sees what this level really outputs
        _, F_l = propagate_relu([None, down[l]], [W_l], [bias_l], F_below, [b_l])
        F_below = F_l[0]
    U, F_ = propagate_relu([None, *down], weights, biases, _leaf_inputs(lad, leaf_inputs), branching)
    eye = torch.eye(lad.events[0], dtype=torch.float64)
    loss = float((F_[0][0] - eye).pow(2).sum())
    return ReluIdentityConstruction(weights, biases, U, F_, loss)


# --------------------------------------------------------------------------- Thm 6: linear side
def eckart_young_loss(target: npt.ArrayLike, rank: int) -> float:
    """min ||X - target||_F^2 over rank(X) <= rank (Eckart-Young-Mirsky): the sum of the squared
    singular values of ``target`` (``m x n``) beyond the first ``rank``; m - rank for target = I_m."""
    T = _as_matrix(target, "target")
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 0:
        raise ValueError(f"rank: expected a non-negative integer, got {rank!r}")
    s = np.linalg.svd(T, compute_uv=False)
    return float((s[int(rank):] ** 2).sum())


def linear_loss_lower_bound(P_list: Sequence[npt.ArrayLike], F_list: Sequence[npt.ArrayLike] | None = None, *,
                            bias: bool = True) -> float:
    """Thm 6's lower bound on the loss ||F_a - I||_F^2 of any linear (affine, with ``bias``) map on
    one level, F_a = sum_b P_ab F_b W_ba + 1 bias^T: rank(F_a) <= r = sum_b rank(F_b) (+1), so by
    Eckart-Young the loss is >= m_a - min(r, m_a).

    :param P_list: ``(m_a, m_b)`` row-stochastic matrices, one per child; ``F_list``: ``(m_b, n_b)``, default I.
    """
    Ps, Fs = _region_inputs(P_list, F_list)
    r = sum(int(np.linalg.matrix_rank(F)) for F in Fs) + int(bool(bias))
    return eckart_young_loss(np.eye(Ps[0].shape[0]), r)


def best_linear_loss(P_list: Sequence[npt.ArrayLike], F_list: Sequence[npt.ArrayLike] | None = None, *,
                     bias: bool = True) -> tuple[float, list[np.ndarray], np.ndarray]:
    """The exact minimum over W_ba (and bias) of ||sum_b P_ab F_b W_ba + 1 bias^T - I||_F^2 for one
    level (a linear network with n_a = m_a outputs; least squares on X = [P_a1 F_1, ..., 1]).

    Equals m_a - rank(X) >= :func:`linear_loss_lower_bound`.

    :returns: ``(loss, W_list, bias)`` with ``W_list[b]`` ``(n_b, m_a)`` and ``bias`` ``(m_a,)``
        (zeros if not ``bias``).
    """
    Ps, Fs = _region_inputs(P_list, F_list)
    m = Ps[0].shape[0]
    blocks = [P @ F for P, F in zip(Ps, Fs, strict=True)]
    X = np.hstack([*blocks, np.ones((m, 1))] if bias else blocks)
    sol, *_ = np.linalg.lstsq(X, np.eye(m), rcond=None)
    loss = float(((X @ sol - np.eye(m)) ** 2).sum())
    splits = np.cumsum([B.shape[1] for B in blocks])
    parts = np.split(sol, splits, axis=0)
    return loss, parts[:len(blocks)], (parts[-1][0] if bias else np.zeros(m))


def ladder_linear_rank_bounds(ladder: Ladder | EventStatistics, *, leaf_rank: int | None = None,
                              bias: bool = True) -> list[int]:
    """Rank bounds of a linear ladder network with n_l = m_l nodes (Thm 6): r_d = ``leaf_rank``
    (default m_d, one-hot leaves) and r_l = min(m_l, b_l r_{l+1} + bias).  Returns ``[r_0, ..., r_d]``."""
    lad = _statistics(ladder).ladder
    d = lad.depth
    r = [0] * (d + 1)
    r[d] = lad.events[d] if leaf_rank is None else int(leaf_rank)
    if r[d] < 0:
        raise ValueError(f"leaf_rank: must be >= 0, got {leaf_rank!r}")
    b = _ladder_parts.uniform_branching(lad)
    for l in range(d - 1, -1, -1):
        r[l] = min(lad.events[l], b[l] * r[l + 1] + int(bool(bias)))
    return r


def ladder_linear_loss_lower_bound(ladder: Ladder | EventStatistics, *, leaf_rank: int | None = None,
                                   bias: bool = True) -> float:
    """Eckart-Young lower bound on ||F_omega - I||_F^2 of any linear ladder network: m_omega - r_omega."""
    r = ladder_linear_rank_bounds(ladder, leaf_rank=leaf_rank, bias=bias)
    return float(_statistics(ladder).ladder.events[0] - r[0])


# --------------------------------------------------------------------------- the figure
def spherical_table(m: int, m_child: int, *, seed: int = 0, radius: float = 0.9, frequency: int = 1) -> np.ndarray:
    """A row-stochastic, all-vert P_ab ``(m, m_child)`` with any number m of rows (m_child >= 3, or
    m <= 2): its rows lie on a sphere around the uniform distribution inside the simplex (points on
    a sphere are all vertices of their hull).  ``radius`` in (0, 1] is the fraction of the largest
    ball inside the simplex.  With m_child = 3 the rows are m evenly spaced points of a circle, row i
    at angle t_0 + 2 pi ``frequency`` i / m (``frequency`` coprime to m keeps them distinct; children
    with different frequencies span different Fourier subspaces, so their P_ab have independent
    columns)."""
    m = _positive_int(m, "m")
    if isinstance(m_child, bool) or not isinstance(m_child, (int, np.integer)) or m_child < 2:
        raise ValueError(f"m_child: expected an integer >= 2, got {m_child!r}")
    if m_child == 2 and m > 2:
        raise ValueError(f"m_child: 2 child events give at most 2 vertices, m = {m} needs m_child >= 3")
    if isinstance(frequency, bool) or not isinstance(frequency, (int, np.integer)) or np.gcd(frequency, m) != 1:
        raise ValueError(f"frequency: expected an integer coprime to m = {m}, got {frequency!r}")
    if not 0 < radius <= 1:
        raise ValueError(f"radius: expected a value in (0, 1], got {radius!r}")
    rng = np.random.default_rng(seed)
    # orthonormal basis of the sum-zero subspace
    basis = np.linalg.qr(np.eye(m_child) - 1.0 / m_child)[0][:, :m_child - 1]
    if m_child == 3:  # evenly spaced on the circle, randomly rotated: well separated
        t = rng.uniform(0, 2 * np.pi) + 2 * np.pi * frequency * np.arange(m) / m
        u = np.stack([np.cos(t), np.sin(t)], 1)
    else:
        u = rng.standard_normal((m, m_child - 1))
        u /= np.linalg.norm(u, axis=1, keepdims=True)
    # the inscribed ball of the simplex has radius 1 / sqrt(m_child (m_child - 1))
    r = radius / np.sqrt(m_child * (m_child - 1))
    P = 1.0 / m_child + r * u @ basis.T
    P = np.clip(P, 0, None)
    return P / P.sum(1, keepdims=True)


def _frequencies(m: int, k: int) -> list[int]:
    """k frequencies coprime to m, pairwise different modulo +-m where possible (else repeated)."""
    out: list[int] = []
    for f in range(1, max(m, 2)):
        if np.gcd(f, m) == 1 and all(f % m not in (g % m, (-g) % m) for g in out):
            out.append(f)
    out = out or [1]
    return [out[b % len(out)] for b in range(k)]


def relu_vs_linear_curve(ms: Sequence[int], *, children: int = 2, child_events: int = 3,
                         seed: int = 0) -> list[dict]:
    """For each region size m: a parent with ``children`` one-hot leaf children of ``child_events``
    events each and all-vert P_ab = :func:`spherical_table` (different frequencies per child); the ReLU
    loss of Thm 6's construction (0 up to rounding), the best linear loss and its Eckart-Young lower
    bound.  One dict per m."""
    if not ms:
        raise ValueError("ms: expected at least one region size")
    children = _positive_int(children, "children")
    rows = []
    for m in ms:
        freqs = _frequencies(int(m), children)
        Ps = [spherical_table(m, child_events, seed=seed + 1000 * b + m, frequency=f) for b, f in enumerate(freqs)]
        Ws, bias = relu_identity_weights(Ps)
        _, F_a = relu_region_forward(Ps, None, Ws, bias)
        lin, _, _ = best_linear_loss(Ps)
        rows.append({"m": int(m), "relu_loss": float(((F_a - np.eye(m)) ** 2).sum()), "linear_loss": lin,
                     "lower_bound": linear_loss_lower_bound(Ps)})
    return rows


def plot_relu_vs_linear(ms: Sequence[int], path: str | os.PathLike | None = None, *, children: int = 2,
                        child_events: int = 3, seed: int = 0) -> tuple[Figure, list[dict]]:
    """Figure of Thm 6: Loss_ReLU (0) against the best linear loss and its Eckart-Young lower bound,
    as functions of the region size m (see :func:`relu_vs_linear_curve`).

    :param path: save here (format by suffix, written atomically); None: only return the figure.
    :returns: ``(fig, rows)``.
    """
    rows = relu_vs_linear_curve(ms, children=children, child_events=child_events, seed=seed)
    x = [r["m"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.plot(x, [r["linear_loss"] for r in rows], "o-", label="best linear (least squares)")
    ax.plot(x, [r["lower_bound"] for r in rows], "s--", label="Eckart-Young lower bound")
    ax.plot(x, [r["relu_loss"] for r in rows], "^-", label="ReLU, Thm 6 construction")
    ax.set_xlabel("region size m (events = nodes of the parent)")
    ax.set_ylabel(r"$\|F_\omega - I\|_F^2$")
    ax.set_title(f"ReLU vs linear (Thm 6): {children} children x {child_events} events, all-vert P")
    ax.grid(alpha=0.3)
    ax.legend()
    return finish_figure(fig, path), rows
