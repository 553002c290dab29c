"""Batch Normalization as a projection (framework paper §4: Eq 10-12, Thm 5; the formulas: ``docs/theory.md`` §1.8).

Eq 10 forward and Thm 5's backward over a batch (the gradient through BN is (c1 / sigma) P_perp_{f,1} g: zero-mean
and orthogonal to f), the projection P_perp_{f,1} itself, and Eq 12's form under the reformulation, where the
batch averages become P(z_alpha)-weighted averages over events.  All functions act column-wise on
``(N, ...)`` / ``(m, ...)`` tensors: dim 0 is the batch (or event) axis.
"""

from __future__ import annotations

import torch

from smaso.student.scratch import scratch_out

__all__ = ["bn_backward", "bn_backward_weighted", "bn_forward", "bn_forward_weighted", "projection_matrix"]


def bn_forward(f: torch.Tensor, c1: torch.Tensor, c0: torch.Tensor, eps: float = 0.0, *, owner: object = None,
               name: str = "bn") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq 10 over dim 0.  :returns: ``(fbar, f_tilde, mu, sigma)``.  ``owner`` (no autograd: in place): the
    batch-sized results written into its scratch buffers named after ``name``, laid out as ``f`` (the same values
    bit for bit; overwritten by the next call with that name)."""
    mu = f.mean(0)
    f_hat = torch.sub(f, mu, out=_out(owner, name + "f_tilde", f))
    sigma = (torch.pow(f_hat, 2, out=_out(owner, name + "square", f)).mean(0) + eps).sqrt()
    if eps == 0 and not bool((sigma > 0).all()):
        raise ValueError("batch norm: a node is constant over the batch (sigma = 0; e.g. a dead ReLU) and eps = 0; "
                         "use eps > 0")
    if owner is None:
        f_tilde = f_hat / sigma
        return c1 * f_tilde + c0, f_tilde, mu, sigma
    f_tilde = f_hat.div_(sigma)
    return torch.mul(c1, f_tilde, out=_out(owner, name + "out", f)).add_(c0), f_tilde, mu, sigma


def bn_backward(g: torch.Tensor, f_tilde: torch.Tensor, sigma: torch.Tensor, c1: torch.Tensor, *,
                owner: object = None, name: str = "bn") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Thm 5 / Eq 11: gradient at the BN input and at (c1, c0), from the gradient ``g`` at its output.

    :returns: ``(g_f, g_c1, g_c0)``; ``g_f`` has ``g``'s shape.  ``owner`` (no autograd: in place): the
    batch-sized results written into its scratch buffers named after ``name``, laid out as ``g`` (the same values
    bit for bit; overwritten by the next call with that name).
    """
    if owner is None:
        g_f = (c1 / sigma) * (g - g.mean(0) - f_tilde * (f_tilde * g).mean(0))
        return g_f, (f_tilde * g).sum(0), g.sum(0)
    prod = torch.mul(f_tilde, g, out=_out(owner, name + "prod", g))  # f~ o g: its mean and its sum (g_c1)
    g_f = torch.sub(g, g.mean(0), out=_out(owner, name + "g_f", g))
    g_f.sub_(torch.mul(f_tilde, prod.mean(0), out=_out(owner, name + "proj", g))).mul_(c1 / sigma)
    return g_f, prod.sum(0), g.sum(0)


def projection_matrix(f: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """P_perp_{f,1} = I - S S^T / N for one node's batch ``f`` ``(N,)`` (S = [f~, 1])."""
    n = f.shape[0]
    f_tilde = (f - f.mean()) / ((f - f.mean()).pow(2).mean() + eps).sqrt()
    s = torch.stack([f_tilde, torch.ones_like(f)], 1)
    return torch.eye(n, dtype=f.dtype, device=f.device) - s @ s.T / n


def bn_forward_weighted(F: torch.Tensor, p: torch.Tensor, c1: torch.Tensor, c0: torch.Tensor,
                        eps: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq 12 forward: ``F`` ``(m, ...)`` event-conditional activations, ``p`` ``(m,)`` = P(z_alpha) (or ``(m, R)``:
    one distribution per region of a ``(m, R, ...)`` batch of regions).

    :returns: ``(Fbar, F_tilde, mu, sigma)``.
    """
    w = p.reshape(*p.shape, *([1] * (F.dim() - p.dim())))
    mu = (w * F).sum(0)
    F_hat = F - mu
    sigma = ((w * F_hat.pow(2)).sum(0) + eps).sqrt()
    F_tilde = F_hat / sigma
    return c1 * F_tilde + c0, F_tilde, mu, sigma


def bn_backward_weighted(G_tilde: torch.Tensor, F_tilde: torch.Tensor, p: torch.Tensor, sigma: torch.Tensor,
                         c1: torch.Tensor) -> torch.Tensor:
    """Eq 12 backward on P-weighted gradients: G~_f = (c1/sigma)(G~ - p 1^T G~ - (p o F~) F~^T G~) (``p`` as in
    :func:`bn_forward_weighted`)."""
    w = p.reshape(*p.shape, *([1] * (G_tilde.dim() - p.dim())))
    return (c1 / sigma) * (G_tilde - w * G_tilde.sum(0) - w * F_tilde * (F_tilde * G_tilde).sum(0))


def _out(owner: object, name: str, like: torch.Tensor) -> torch.Tensor | None:
    """``owner``'s scratch buffer ``name`` with ``like``'s shape and dtype, laid out as an elementwise op's fresh
    result on ``like`` is (dense, in the order of ``like``'s strides: so reductions over it add in the same order),
    or None (a fresh result) without an owner."""
    buf = scratch_out(owner, name, (like.numel(),), like)
    return None if buf is None else buf.as_strided(like.shape, torch.empty_like(like, device="meta").stride())
