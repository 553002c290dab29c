"""The framework's reformulation (Thm 2 / Thm 4, Eq 9; Batch Norm by Eq 12): the student's
per-event statistics predicted from the teacher's event frequencies and the student's weights.

Level by level from the leaves (F = I for one-hot leaves, E[x | z] in general) and top-down from the label, on
any ladder (a child's gradient sums over *every* parent; on a tree each region has one parent and this is the
paper's recursion): the equations, with Batch Norm after or before the gate, are ``docs/theory.md`` §1.7.  With
BN before the gate ``Reformulation.F`` holds BN_p(U), matching the measured F = E[BN(u) | z]
(:class:`~smaso.student.network.StudentRecord`).  Each level is one ``einsum`` over its edges and one
``index_add`` into the parents (backward: the children), on the padded event layout of :mod:`teachers.statistics`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from smaso._ladder_parts import at_level
from smaso.student.batchnorm import bn_backward_weighted, bn_forward_weighted
from smaso.student.einsum_paths import einsum
from smaso.student.frequency import FrequencyStatistics
from smaso.student.network import LadderStudent, _check_float_dtype, _check_student
from teachers.statistics import EventStatistics

if TYPE_CHECKING:
    from teachers.ladder import Ladder

__all__ = ["Reformulation", "eq7_check", "eq7_from_outputs", "eq7_gradient", "eq7_signs", "reformulate", "resolve_top",
           "top_gradient"]

TOPS = ("predicted", "measured")


@dataclass
class Reformulation:
    """Predicted statistics, same layouts as :class:`~smaso.student.frequency.FrequencyStatistics`.

    Lists over levels ``l = 0..d`` of ``(R_l, M_l, n_l)`` (``dW[l]``: ``(E_l, n_{l+1}, n_l)`` per edge,
    ``db[l]``: ``(R_l, n_l)``).  ``U``: the linear pre-activation; ``F``: the middle of a node's chain
    (D o U without BN or with BN after the gate; BN_p(U) with BN before it); ``Fbar``: the node's
    output; ``G_tilde``: the P-weighted gradient at U (the one of Delta W).
    """

    U: list
    F: list
    Fbar: list
    G_tilde: list
    dW: list
    db: list

    def __repr__(self) -> str:
        shapes = [None if f is None else tuple(f.shape) for f in self.Fbar]
        return f"Reformulation(levels={len(self.Fbar)}, Fbar shapes={shapes})"


def _weighted_bn(F_: torch.Tensor, p: torch.Tensor, c1: torch.Tensor, c0: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq 12 forward per region (:func:`~smaso.student.batchnorm.bn_forward_weighted` over the events): F_
    ``(..., R, m, n)``, p ``(..., R, m)``; returns ``(Fbar, F_tilde, sigma)``."""
    # the event axis first, as bn_forward_weighted sums over dim 0 (leading replicate axes ride along; p, of exact
    # statistics shared by the replicates, is expanded to them)
    fbar, f_tilde, _, sigma = bn_forward_weighted(F_.movedim(-2, 0), p.expand(F_.shape[:-1]).movedim(-1, 0), c1,
                                                  c0, eps)
    return fbar.movedim(0, -2), f_tilde.movedim(0, -2), sigma


def _weighted_bn_backward(G: torch.Tensor, F_tilde: torch.Tensor, p: torch.Tensor, sigma: torch.Tensor,
                          c1: torch.Tensor) -> torch.Tensor:
    """Eq 12 backward per region on P-weighted gradients ``(..., R, m, n)`` (of :func:`_weighted_bn`'s forward)."""
    return bn_backward_weighted(G.movedim(-2, 0), F_tilde.movedim(-2, 0), p.expand(G.shape[:-1]).movedim(-1, 0),
                                sigma, c1).movedim(0, -2)


def top_gradient(F_top: torch.Tensor, loss: str = "squared") -> torch.Tensor:
    """The top boundary of Eq 9 as a function of the top activations: G_omega from F_omega.

    ``F_top`` ``(..., m_0, n_0)``: row a = the output f_omega given the label y = a.  Squared loss
    (1/2 |f - onehot(y)|^2): G_omega = I - F_omega.  Softmax cross-entropy: G_omega = I -
    softmax(F_omega) row-wise (Eq 7's boundary: positive diagonal, negative off-diagonal).
    Un-weighted: multiply by P(y) for G~_omega.
    """
    eye = torch.eye(F_top.shape[-2], F_top.shape[-1], dtype=F_top.dtype, device=F_top.device)
    if loss == "squared":
        return eye - F_top
    if loss == "cross_entropy":
        return eye - F_top.softmax(-1)
    raise ValueError(f"loss: expected 'squared' or 'cross_entropy', got {loss!r}")


def resolve_top(loss: str, top: str | None, propagate: bool) -> str:
    """Check ``loss`` and return where the top gradient comes from: ``top``, or its default (``"measured"`` for
    cross-entropy in one-step mode, else ``"predicted"``; see :func:`reformulate`)."""
    if loss not in ("squared", "cross_entropy"):
        raise ValueError(f"loss: expected 'squared' or 'cross_entropy', got {loss!r}")
    if top is None:
        top = "measured" if loss == "cross_entropy" and not propagate else "predicted"
    if top not in TOPS:
        raise ValueError(f"top: expected one of {TOPS} or None, got {top!r}")
    return top


def reformulate(student: LadderStudent, P: EventStatistics, measured: FrequencyStatistics, *,
                propagate: bool = True, loss: str = "squared",
                leaf_inputs: torch.Tensor | None = None, top: str | None = None,
                dtype: torch.dtype | None = None) -> Reformulation:
    """Thm 4 / Eq 9 (and Eq 12 with BN, after or before the gate): predicted F, Fbar, G~, Delta W
    of every level.

    Replicates: ``measured`` (and ``P``) may carry a leading replicate axis, as the jackknife's leave-one-out
    statistics stacked by :func:`~smaso.student.noise.stack_statistics` do (``(K, R_l, M_l, n_l)`` means); then every
    output has it too (``(K, R_l, M_l, n_l)``, ``dW[l]`` ``(K, E_l, n_{l+1}, n_l)``), replicate i equal to this
    function on replicate i alone to float64 round-off, and an exact ``P`` without that axis is shared by all.

    :param student: the student (its weights, biases, BN parameters and BN placement are used).
    :param P: event statistics: ``exact_statistics(ladder)`` or the empirical ones
        (``measured.P``), per edge (:class:`~teachers.statistics.EventStatistics`).
    :param measured: measured frequency statistics; supplies the gates D, D' (the
        reformulation takes them as given), the leaf inputs E[x | z], and, when
        ``propagate=False``, the neighbouring levels' measured statistics (the BN statistics of
        a level from its measured F for BN after the gate, from its measured U for BN before it).
    :param leaf_inputs: override E[x | z] at the leaves ``(R_d, m_d, dim)`` (e.g. the
        emission's exact means).
    :param propagate: the full recursion (each level from the *predicted* level below/above), or (False) one
        step from the *measured* neighbours, which separates Thm 2's local error at a level from the error
        carried up or down.
    :param top: where the top gradient G_omega ``(1, m_0, n_0)`` comes from.  ``"predicted"``:
        :func:`top_gradient` of the top activations F_omega (the predicted ones when ``propagate``, the
        measured E[f_omega | y] otherwise).  ``"measured"``: E[g_raw_omega | y] (``measured.Gf[0]``).
        Default (None): ``"measured"`` for ``loss="cross_entropy"`` with ``propagate=False`` (the one-step
        error at level 0 is then the gate's alone), else ``"predicted"``.  When the two differ (for cross-entropy,
        by a Jensen gap): ``docs/theory.md`` §1.0, boundary conditions.
    :param dtype: the dtype of the prediction (default float64). It is computed on the device of ``measured``
        (:func:`statistics_device`): the student's parameters and ``P`` are moved there, not the statistics to
        the host.
    :raises TypeError, ValueError: ``P`` or ``measured`` are not statistics of the student's ladder and widths;
        an unknown ``loss`` or ``top``.
    """
    _check(student, P, measured)
    lad = student.ladder
    top = resolve_top(loss, top, propagate)
    before = student.bn_placement == "before"
    d = lad.depth
    dt, dev = _check_float_dtype(torch.float64 if dtype is None else dtype), statistics_device(measured)
    W = [student.edge_weights(l).detach().to(dev, dt) for l in range(d)]
    bias: list[Any] = [None] * d if student.biases is None else [b.detach().to(dev, dt) for b in student.biases]
    edges = [tuple(t.to(dev) for t in student.edge_index(l)) for l in range(d)]
    bn_par = [None if bn is None else (bn[0].detach().to(dev, dt), bn[1].detach().to(dev, dt))
              for bn in map(student.bn_params, range(d))]  # (c1, c0) per level, or None
    p = [m.to(dev, dt) for m in P.marginals]
    tables = P.P_down  # (a property that normalizes every level's joints: read once)
    P_down: list[torch.Tensor | None] = [None] + [at_level(tables, l, "P_down").to(dev, dt)
                                                  for l in range(1, d + 1)]
    P_edge = [at_level(P_down, l + 1, "P_down") for l in range(d)]  # (the joints below each level's edges)
    U, F_, Fbar = [None] * (d + 1), [None] * (d + 1), [None] * (d + 1)  # type: list, list, list
    F_tilde, sigma, child = [None] * (d + 1), [None] * (d + 1), [None] * d  # type: list, list, list
    Fbar[d] = (leaf_inputs if leaf_inputs is not None else measured.Fbar[d]).to(dev, dt)
    for l in range(d - 1, -1, -1):
        par, chi = edges[l]
        child[l] = (Fbar[l + 1] if propagate or l + 1 == d else measured.Fbar[l + 1].to(dt)).index_select(-3, chi)
        msg = einsum("...eab,...ebk,...ekj->...eaj", P_edge[l], child[l], W[l])  # P_ab Fbar_b W_ba per edge
        U[l] = msg.new_zeros(*msg.shape[:-3], lad.num_regions[l], *msg.shape[-2:]).index_add_(-3, par, msg)
        if bias[l] is not None:
            U[l] = U[l] + bias[l][..., None, :]
        D, bn = measured.D[l].to(dt), bn_par[l]
        if bn is None:
            F_[l] = Fbar[l] = D * U[l]
        elif before:  # Eq 12 on the pre-activation, then the gate
            F_[l], F_tilde[l], sigma[l] = _weighted_bn(U[l], p[l], *bn, student.bn_eps)
            Fbar[l] = D * F_[l]
        else:
            F_[l] = D * U[l]
            Fbar[l], F_tilde[l], sigma[l] = _weighted_bn(F_[l], p[l], *bn, student.bn_eps)
    G_tilde: list[Any] = [None] * (d + 1)
    if top == "predicted":
        G_raw_top = p[0][..., None] * top_gradient(Fbar[0] if propagate else measured.Fbar[0].to(dt), loss)
    else:
        G_raw_top = measured.mean_at("Gf", 0).to(dt) * p[0][..., None]
    G_tilde[0] = measured.Dp[0].to(dt) * G_raw_top
    dW, db = [None] * d, [None] * d  # type: list, list
    for l in range(d):
        par, chi = edges[l]
        parent = G_tilde[l] if propagate or l == 0 else (at_level(measured.G_tilde, l, "G~").to(dt))
        g_par = parent.index_select(-3, par)  # (..., E_l, M_l, n_l): each edge's parent
        dW[l] = einsum("...eab,...ebk,...eaj->...ekj", P_edge[l], child[l], g_par)  # (P_ab Fbar_b)^T G~_a
        db[l] = parent.sum(-2)
        if l + 1 < d:
            back = einsum("...eab,...eaj,...ekj->...ebk", P_edge[l], g_par, W[l])  # P_ab^T G~_a W_ba^T
            g_raw = back.new_zeros(*back.shape[:-3], lad.num_regions[l + 1], *back.shape[-2:]).index_add_(-3, chi,
                                                                                                         back)
            Dp, bn = measured.Dp[l + 1].to(dt), bn_par[l + 1]
            if bn is None:
                G_tilde[l + 1] = Dp * g_raw
                continue
            c1 = bn[0]
            if propagate:
                ft, sg = F_tilde[l + 1], sigma[l + 1]
            else:  # Eq 12 statistics of the measured BN input of that level (F after the gate, U before it)
                bn_in = measured.U[l + 1] if before else measured.F[l + 1]
                _, ft, sg = _weighted_bn(bn_in.to(dt), p[l + 1], c1, torch.zeros_like(c1), student.bn_eps)
            if before:  # the gate first, then Eq 12's projection at the pre-activation
                G_tilde[l + 1] = _weighted_bn_backward(Dp * g_raw, ft, p[l + 1], sg, c1)
            else:
                G_tilde[l + 1] = Dp * _weighted_bn_backward(g_raw, ft, p[l + 1], sg, c1)
    return Reformulation(U, F_, Fbar, G_tilde, dW, db)


def statistics_device(measured: Any) -> torch.device:
    """The device that holds frequency statistics (their level-0 gates ``measured.D[0]``): where
    :func:`reformulate` and the diagnosis compute."""
    return measured.D[0].device


def _same_layout(a: Ladder, b: Ladder) -> bool:
    """The same regions, edges and event counts (uniform trees: the same branching and events)."""
    if a.is_uniform() or b.is_uniform():
        return (a.branching, a.events) == (b.branching, b.events)
    return a.region_events == b.region_events and a.parents == b.parents


def _check(student: LadderStudent, P: EventStatistics, measured: FrequencyStatistics) -> None:
    """Raise unless ``P`` and ``measured`` are statistics of the student's ladder (and widths)."""
    _check_student(student)
    if not isinstance(P, EventStatistics):
        raise TypeError(f"P: expected EventStatistics, got {type(P).__name__}")
    if isinstance(measured, (EventStatistics, torch.Tensor)) or not hasattr(measured, "D"):
        raise TypeError(f"measured: expected FrequencyStatistics, got {type(measured).__name__}")
    lad = student.ladder
    # (measured may be any object with the fields reformulate reads: D, Dp, Fbar, ... ; check what it has)
    for name, other in (("P", P.ladder), ("measured", getattr(measured, "ladder", lad))):
        if other is not lad and not _same_layout(other, lad):
            raise ValueError(f"{name}: event statistics of another ladder (region graph) than the student's")
    shapes = [(student.num_edges(l), student.widths[l + 1], student.widths[l]) for l in range(lad.depth)]
    dW = getattr(measured, "dW", None)
    if dW is not None and [tuple(m.shape[-3:]) for m in dW] != shapes:  # (after any leading replicate axes)
        raise ValueError("measured: statistics of a student of other widths")


def eq7_check(G: torch.Tensor, *, node_class: torch.Tensor | None = None, seen: torch.Tensor | None = None) -> dict:
    """Eq 7's sign property on a per-label top gradient: g_j(y = c(j)) > 0 and g_j(y != c(j)) < 0 for every top node j.

    ``G`` ``(m_0, n_0)``: row y = E[g | y] (the framework's sign, g = -dLoss/df).  ``node_class`` ``(n_0,)``: the
    class c(j) of every node, in [0, m_0), or -1 for a node of no class (only the negative half applies to it);
    default the identity (needs n_0 = m_0: the paper's one node per class).  ``seen`` ``(m_0,)`` bool: the labels
    observed (default all); unseen labels are left out of the off-diagonal test, and a node whose own class was
    never observed has a NaN diagonal and fails.

    :returns: per node ``(n_0,)``: ``diagonal`` g_j(y = c(j)) (NaN for c(j) = -1), ``off_diagonal_max``
        max_{y != c(j)} g_j(y) (-inf if no other label was observed), ``positive`` (diagonal > 0; True for
        c(j) = -1), ``negative`` (all observed off-diagonal entries < 0), ``margin`` min(g_j(y = c(j)),
        -max_{y != c(j)} g_j(y)) (-max_{y != c(j)} g_j(y) for c(j) = -1; > 0 iff both hold); and ``G``, ``holds``
        (every node passes), ``worst_margin`` and ``worst_class`` (the node of the smallest margin).
    :raises ValueError: ``G`` not 2-D; ``node_class`` of the wrong length or out of range; no ``node_class`` and
        m_0 != n_0; ``seen`` of the wrong shape.
    """
    if not isinstance(G, torch.Tensor) or G.dim() != 2:
        raise ValueError(f"G: expected a (labels, top nodes) tensor, got "
                         f"{tuple(G.shape) if isinstance(G, torch.Tensor) else type(G).__name__}")
    G = G.to(torch.float64)
    m, n = G.shape
    if node_class is None:
        if m != n:
            raise ValueError(f"node_class: Eq 7 needs one top node per class, got {m} labels and {n} top nodes; "
                             "pass node_class (the class of every top node, -1 for none)")
        node_class = torch.arange(n)
    node_class = torch.as_tensor(node_class)
    if node_class.shape != (n,) or node_class.is_floating_point() or not bool(
            ((node_class >= -1) & (node_class < m)).all()):
        raise ValueError(f"node_class: expected ({n},) integer classes in [-1, {m}), got {node_class.tolist()}")
    seen = torch.ones(m, dtype=torch.bool) if seen is None else torch.as_tensor(seen)
    if seen.shape != (m,) or seen.dtype != torch.bool:
        raise ValueError(f"seen: expected a ({m},) bool tensor, got {tuple(seen.shape)} {seen.dtype}")
    has = node_class >= 0
    c = node_class.clamp(min=0)
    nan = torch.full((n,), math.nan, dtype=G.dtype)
    own = G[c, torch.arange(n)]
    diagonal = torch.where(has & seen[c], own, nan)
    is_own = (torch.arange(m)[:, None] == node_class[None, :])  # (m, n): y = c(j)
    off_max = G.masked_fill(is_own | ~seen[:, None], -math.inf).max(0).values
    positive = torch.where(has, diagonal > 0, torch.ones(n, dtype=torch.bool))
    negative = off_max < 0
    margin = torch.where(has, torch.minimum(diagonal, -off_max), -off_max)
    worst = int(torch.nan_to_num(margin, nan=-math.inf).argmin())
    return {"G": G, "diagonal": diagonal, "off_diagonal_max": off_max, "positive": positive, "negative": negative,
            "margin": margin, "holds": bool((positive & negative).all()), "worst_margin": float(margin[worst]),
            "worst_class": worst}


def eq7_signs(measured: FrequencyStatistics, *, gated: bool = False) -> dict:
    """Eq 7's sign property of the top gradient, measured per class from frequency statistics.

    For softmax cross-entropy every example has g_j = [y = j] - softmax_j(f) (the framework's sign,
    g = -dLoss/df), so g_j(y = j) > 0 and g_j(y != j) < 0, per example and hence per label; for
    the squared loss g_j = [y = j] - f_j and the signs can fail (``docs/theory.md`` §1.0, boundary
    conditions).  Reads G_omega[y, j] = E[g_raw_j | y] (``measured.Gf[0]``, the gradient at the top output;
    ``gated``: E[g_j | y] after the top gate, ``measured.G[0]``, the same for a linear top) and checks it
    with :func:`eq7_check` (one top node per class).  Labels never observed are left out of the off-diagonal
    test; a class whose own label was never observed has a NaN diagonal and fails.

    :returns: :func:`eq7_check`'s dict: ``G`` ``(m_0, n_0)`` the measured top gradient per label; per class j
        ``(n_0,)``: ``diagonal``, ``off_diagonal_max``, ``positive``, ``negative``, ``margin``; and ``holds``,
        ``worst_margin``, ``worst_class``.
    """
    G = (measured.G if gated else measured.Gf)[0][0].to(torch.float64)  # (m_0, n_0): the one top region
    m, n = G.shape
    if m != n:
        raise ValueError(f"measured: Eq 7 needs one top node per class, got {m} labels and {n} top nodes")
    return eq7_check(G, seen=measured.counts[0][0] > 0)


def eq7_gradient(f: torch.Tensor, y: torch.Tensor, *, loss: str = "cross_entropy",
                 node_class: torch.Tensor | None = None, readout: torch.Tensor | None = None,
                 num_classes: int | None = None) -> torch.Tensor:
    """Per-example top gradient g = -dLoss/df ``(N, n_0)`` of top outputs ``f`` ``(N, n_0)`` with labels ``y``
    ``(N,)``, for the top layouts of Eq 7's analysis (``docs/theory.md`` §1.0, boundary conditions).

    - Default (n_0 = m_0, one node per class): squared g = onehot(y) - f; cross entropy g = onehot(y) - softmax(f).
    - ``node_class`` ``(n_0,)`` (several nodes per class, -1 for a node of no class): squared loss with target
      t_j = [c(j) = y], g = t - f; cross entropy with the class probability the sum of its nodes' softmax,
      P_y = sum_{c(j) = y} s_j, so g_j = s_j ([c(j) = y] / P_y - 1).
    - ``readout`` ``(n_0, m_0)`` (a linear readout V, class scores f V): g = (onehot(y) - fV) V^T (squared) or
      (onehot(y) - softmax(fV)) V^T (cross entropy).

    :raises ValueError: bad shapes, labels out of range, both ``node_class`` and ``readout``, an unknown ``loss``.
    """
    if loss not in ("squared", "cross_entropy"):
        raise ValueError(f"loss: expected 'squared' or 'cross_entropy', got {loss!r}")
    if not isinstance(f, torch.Tensor) or f.dim() != 2 or not f.is_floating_point():
        raise ValueError(f"f: expected (N, n_0) floating top outputs, got "
                         f"{tuple(f.shape) if isinstance(f, torch.Tensor) else type(f).__name__}")
    n = f.shape[1]
    if node_class is not None and readout is not None:
        raise ValueError("node_class, readout: give at most one top layout")
    if readout is not None:
        readout = torch.as_tensor(readout, dtype=f.dtype)
        if readout.dim() != 2 or readout.shape[0] != n:
            raise ValueError(f"readout: expected ({n}, m_0), got {tuple(readout.shape)}")
        m = readout.shape[1]
    elif node_class is not None:
        node_class = torch.as_tensor(node_class)
        if node_class.shape != (n,) or node_class.is_floating_point() or bool((node_class < -1).any()):
            raise ValueError(f"node_class: expected ({n},) integer classes >= -1, got {node_class.tolist()}")
        m = int(node_class.max()) + 1 if num_classes is None else num_classes
    else:
        m = n
    if not isinstance(y, torch.Tensor) or y.shape != (f.shape[0],) or y.is_floating_point() or (
            y.numel() and not bool(((y >= 0) & (y < m)).all())):
        raise ValueError(f"y: expected ({f.shape[0]},) integer labels in [0, {m})")
    onehot = F.one_hot(y.long(), m).to(f.dtype)
    if readout is not None:
        s = f @ readout
        return (onehot - (s if loss == "squared" else s.softmax(-1))) @ readout.T
    if node_class is None:
        return onehot - (f if loss == "squared" else f.softmax(-1))
    own = (node_class[None, :] == y[:, None]).to(f.dtype)  # (N, n_0): [c(j) = y]
    if loss == "squared":
        return own - f
    sm = f.softmax(-1)
    p_y = (sm * own).sum(-1, keepdim=True)
    return sm * (own / p_y - 1)


def eq7_from_outputs(f: torch.Tensor, y: torch.Tensor, *, loss: str = "cross_entropy",
                     node_class: torch.Tensor | None = None, readout: torch.Tensor | None = None,
                     num_classes: int | None = None) -> dict:
    """Eq 7 measured from top outputs: :func:`eq7_gradient` averaged per label (G[y] = E[g | y], Eq 6 at the top)
    and checked by :func:`eq7_check`.  A readout node's class is the one it feeds most, argmax_c V[j, c].

    :returns: :func:`eq7_check`'s dict, plus ``per_example``: the fraction of examples whose own g has the sign
        pattern at every node (g_j > 0 for c(j) = y, < 0 otherwise).
    """
    g = eq7_gradient(f, y, loss=loss, node_class=node_class, readout=readout, num_classes=num_classes)
    if readout is not None:
        node_class = torch.as_tensor(readout).argmax(1)
        m = torch.as_tensor(readout).shape[1]
    elif node_class is not None:
        node_class = torch.as_tensor(node_class)
        m = int(node_class.max()) + 1 if num_classes is None else num_classes
    else:
        node_class, m = torch.arange(f.shape[1]), f.shape[1]
    yl = y.long()
    counts = torch.bincount(yl, minlength=m)
    G = torch.zeros(m, g.shape[1], dtype=torch.float64).index_add_(0, yl, g.to(torch.float64))
    G = G / counts.clamp(min=1)[:, None]
    out = eq7_check(G, node_class=node_class, seen=counts > 0)
    own = node_class[None, :] == yl[:, None]
    ok = torch.where(own, g > 0, g < 0).all(1)
    out["per_example"] = float(ok.double().mean()) if len(y) else math.nan
    return out


def one_hot_leaves(student: LadderStudent) -> torch.Tensor:
    """E[x | z] = I for one-hot leaves: ``(R_d, m_d, m_d)``."""
    lad = student.ladder
    return F.one_hot(torch.arange(lad.events[-1]), lad.events[-1]).to(torch.float64).expand(
        lad.num_regions[-1], -1, -1)
