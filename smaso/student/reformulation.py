"""The framework's reformulation (Thm 2 / Thm 4, Eq 9; Batch Norm by Eq 12): the student's
per-event statistics predicted from the teacher's event frequencies and the student's weights.

With P_ab = P(z_b | z_a) (``m_a x m_b``, one per child region b of a), the student's weights
W_ba (``n_b x n_a``) and its gates D (forward) and D' (backward), level by level from the
leaves (F = I for one-hot leaves, E[x | z] in general):

    U_a  = sum_{b in ch(a)} P_ab Fbar_b W_ba + 1 bias_a^T        raw activation given z_a
    F_a  = D_a o U_a                                               (Eq 9, forward)
    Fbar_a = BN_p(F_a)   (Eq 12: mean and variance weighted by p = P(z_a)), else F_a

and top-down from the label (squared loss: G_omega = I - F_omega, so G~_omega = diag(p) (I - F_omega)):

    G~raw_b = sum_{a in pa(b)} P_ab^T G~_a W_ba^T
    G~_b    = D'_b o BN'_p(G~raw_b)          (Eq 9 backward; BN'_p: the projection of Eq 12)
    Delta W_ba = (P_ab Fbar_b)^T G~_a,   Delta bias_a = 1^T G~_a          (Eq 9, update)

Everything is batched over the regions of a level with ``einsum``.  :func:`reformulate` runs
the full recursion (``propagate=True``: each level from the *predicted* level below/above),
or the one-step version (``propagate=False``: each level from the *measured* neighbours),
which separates the local error of Thm 2 at a level from the error carried up or down.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from smaso.student.frequency import FrequencyStatistics
from smaso.student.network import LadderStudent
from teachers.statistics import EventStatistics

__all__ = ["Reformulation", "reformulate"]


@dataclass
class Reformulation:
    """Predicted statistics, same layouts as :class:`~smaso.student.frequency.FrequencyStatistics`."""

    U: list
    F: list
    Fbar: list
    G_tilde: list
    dW: list
    db: list


def _weighted_bn(F_: torch.Tensor, p: torch.Tensor, c1, c0, eps: float):
    """Eq 12 forward per region: F_ ``(R, m, n)``, p ``(R, m)``."""
    w = p[..., None]
    mu = (w * F_).sum(1, keepdim=True)
    sigma = ((w * (F_ - mu).pow(2)).sum(1, keepdim=True) + eps).sqrt()
    F_tilde = (F_ - mu) / sigma
    return c1[:, None, :] * F_tilde + c0[:, None, :], F_tilde, sigma


def _weighted_bn_backward(G: torch.Tensor, F_tilde: torch.Tensor, p: torch.Tensor, sigma: torch.Tensor, c1):
    """Eq 12 backward per region on P-weighted gradients ``(R, m, n)``."""
    w = p[..., None]
    proj = G - w * G.sum(1, keepdim=True) - w * F_tilde * (F_tilde * G).sum(1, keepdim=True)
    return (c1[:, None, :] / sigma) * proj


def reformulate(student: LadderStudent, P: EventStatistics, measured: FrequencyStatistics, *,
                propagate: bool = True, loss: str = "squared",
                leaf_inputs: torch.Tensor | None = None) -> Reformulation:
    """Thm 4 / Eq 9 (and Eq 12 with BN): predicted F, Fbar, G~, Delta W of every level.

    :param student: the student (its weights, biases and BN parameters are used).
    :param P: event statistics: ``exact_statistics(ladder)`` or the empirical ones
        (``measured.P``).
    :param measured: measured frequency statistics; supplies the gates D, D' (the
        reformulation takes them as given), the leaf inputs E[x | z], and, when
        ``propagate=False``, the neighbouring levels' measured statistics.  With
        ``loss="cross_entropy"`` the top gradient is taken from it too (E[softmax(f) | y] is
        not a function of F).
    :param leaf_inputs: override E[x | z] at the leaves ``(R_d, m_d, dim)`` (e.g. the
        emission's exact means).
    """
    lad = student.ladder
    if P.ladder.total_regions != lad.total_regions or P.ladder.events != lad.events:
        raise ValueError("P: event statistics of another ladder than the student's")
    d = lad.depth
    dt = torch.float64
    W = [w.detach().to(dt).cpu() for w in student.weights]
    bias = [None] * d if student.biases is None else [b.detach().to(dt).cpu() for b in student.biases]
    p = [m.to(dt) for m in P.marginals]
    P_down = [None] + [t.to(dt) for t in P.P_down[1:]]
    U, F_, Fbar = [None] * (d + 1), [None] * (d + 1), [None] * (d + 1)
    F_tilde, sigma = [None] * (d + 1), [None] * (d + 1)
    Fbar[d] = (leaf_inputs if leaf_inputs is not None else measured.Fbar[d]).to(dt)
    for l in range(d - 1, -1, -1):
        child = Fbar[l + 1] if propagate or l + 1 == d else measured.Fbar[l + 1].to(dt)
        contrib = torch.einsum("cab,cbk,ckj->caj", P_down[l + 1], child, W[l])
        U[l] = contrib.reshape(lad.num_regions[l], lad.branching[l], lad.events[l], -1).sum(1)
        if bias[l] is not None:
            U[l] = U[l] + bias[l][:, None, :]
        F_[l] = measured.D[l].to(dt) * U[l]
        bn = student.bn_params(l)
        if bn is None:
            Fbar[l] = F_[l]
        else:
            c1, c0 = (t.detach().to(dt).cpu() for t in bn)
            Fbar[l], F_tilde[l], sigma[l] = _weighted_bn(F_[l], p[l], c1, c0, student.bn_eps)
    G_tilde = [None] * (d + 1)
    top = Fbar[0] if propagate else measured.Fbar[0].to(dt)
    if loss == "squared":
        eye = torch.eye(lad.events[0], lad.num_classes, dtype=dt)[None]
        G_raw_top = p[0][..., None] * (eye - top)
    elif loss == "cross_entropy":
        G_raw_top = measured.means["Gf"][0].to(dt) * p[0][..., None]
    else:
        raise ValueError(f"loss: expected 'squared' or 'cross_entropy', got {loss!r}")
    G_tilde[0] = measured.Dp[0].to(dt) * G_raw_top
    dW, db = [None] * d, [None] * d
    for l in range(d):
        parent = G_tilde[l] if propagate or l == 0 else (measured.G_tilde[l].to(dt))
        g_par = parent.repeat_interleave(lad.branching[l], dim=0)  # (R_{l+1}, m_l, n_l)
        child_out = Fbar[l + 1] if propagate or l + 1 == d else measured.Fbar[l + 1].to(dt)
        dW[l] = torch.einsum("cab,cbk,caj->ckj", P_down[l + 1], child_out, g_par)
        db[l] = parent.sum(1)
        if l + 1 < d:
            g_raw = torch.einsum("cab,caj,ckj->cbk", P_down[l + 1], g_par, W[l])
            bn = student.bn_params(l + 1)
            if bn is not None:
                c1 = bn[0].detach().to(dt).cpu()
                if propagate:
                    ft, sg = F_tilde[l + 1], sigma[l + 1]
                else:  # Eq 12 statistics of the measured F of that level
                    _, ft, sg = _weighted_bn(measured.F[l + 1].to(dt), p[l + 1], c1, torch.zeros_like(c1),
                                             student.bn_eps)
                g_raw = _weighted_bn_backward(g_raw, ft, p[l + 1], sg, c1)
            G_tilde[l + 1] = measured.Dp[l + 1].to(dt) * g_raw
    return Reformulation(U, F_, Fbar, G_tilde, dW, db)


def one_hot_leaves(student: LadderStudent) -> torch.Tensor:
    """E[x | z] = I for one-hot leaves: ``(R_d, m_d, m_d)``."""
    lad = student.ladder
    return F.one_hot(torch.arange(lad.events[-1]), lad.events[-1]).to(torch.float64).expand(
        lad.num_regions[-1], -1, -1)
