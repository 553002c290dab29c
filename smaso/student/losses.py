"""The student's losses and the backward signal at its top (Eq 1's g at level 0): squared (G_omega = I - F_omega)
or cross-entropy, shared by :class:`~smaso.student.network.LadderStudent` (which re-exports them) and the batched
students."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["LOSSES", "output_gradient", "student_loss"]

LOSSES = ("squared", "cross_entropy")


def student_loss(out: torch.Tensor, y: torch.Tensor, kind: str = "squared") -> torch.Tensor:
    """Mean loss of outputs ``out`` ``(N, m_0)`` against labels ``y`` ``(N,)``: ``"squared"``
    1/2 |f_0 - onehot(y)|^2 (G_omega = I - F_omega) or ``"cross_entropy"`` (softmax)."""
    if kind == "squared":
        return 0.5 * (out - F.one_hot(y.long(), out.shape[-1]).to(out.dtype)).pow(2).sum(-1).mean()
    if kind == "cross_entropy":
        return F.cross_entropy(out, y.long())
    raise ValueError(f"loss: expected one of {LOSSES}, got {kind!r}")


def output_gradient(out: torch.Tensor, y: torch.Tensor, loss: str) -> tuple[torch.Tensor, float]:
    """The backward signal at the top, ``-N dLoss/df_0``, and the loss, for outputs ``out`` ``(n_0, N)``.

    ``"squared"``: ``onehot(y) - f_0`` (G_omega = I - F_omega); ``"cross_entropy"``: ``onehot(y) - softmax(f_0)``.
    :returns: ``((n_0, N) gradient, the mean loss as a float)``.
    """
    grad, value = _output_gradient(out, y, loss)
    return grad, value.item()


def _output_gradient(out: torch.Tensor, y: torch.Tensor, loss: str) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`output_gradient` with the loss as a 0-dim tensor on ``out``'s device (no host read)."""
    target = F.one_hot(y.long(), out.shape[0]).to(out.dtype).T
    return target - (out if loss == "squared" else out.softmax(0)), student_loss(out.T, y, loss)
