"""The autograd forward of a uniform-tree student, batch-major: every level's products on ``(N, R, n)`` tensors.

:meth:`~smaso.student.network.LadderStudent.forward` on a uniform tree (its fast path) runs here.  The children of
parent r are regions r b .. r b + b - 1, so in the batch-major layout ``(N, R_{l+1}, n_{l+1})`` (examples, regions,
nodes: the inputs' own layout, and the gather's of one-hot leaves) a level's input grouped by parent,
``(N, R_l, b n_{l+1})``, is a view, and so is its transpose ``(R_l, N, b n_{l+1})``: one batched matmul per level
(Eq 1, forward) writes u ``(N, R_l, n_l)`` in place through a transposed view, and the level above reads it
without a copy.  The node-major code (:func:`~smaso.student.connectivity.tree_pre_activation`, whose ``(R, n, N)``
layout the explicit :meth:`~smaso.student.network.LadderStudent.forward_backward` and the statistics read) would
need one transpose of the leaf level's gathered sums (4 MB per batch of 1024 in the default benchmark) and
autograd's matmul backward, which copies its transposed operands.

Each level is one :class:`TreeLevel` (a ``torch.autograd.Function``) whose backward writes the same products
batch-major too: Delta W = sum_x f_c g_p^T (Eq 2 summed over the batch, autograd's weight gradient) as
``g^T @ f`` per parent (the orientation whose operands the matmul reads fastest in this layout) and the children's
raw gradient W g (Eq 1, backward) into a transposed view of ``(N, R_{l+1}, n_{l+1})``.  One-hot leaves given by
their events are :class:`~smaso.student.connectivity.OneHotLeaves` with ``batch_major=True``.  The same products as
the node-major path up to the order of the sums: equal to float64 round-off (tests/test_batch_major.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable

__all__ = ["TreeLevel", "student_forward", "tree_level"]


class TreeLevel(torch.autograd.Function):
    """u ``(N, R, n_l)`` = per parent r, ``inputs[:, r] @ W_r`` + bias_r (Eq 1, forward, batch-major), with
    ``inputs`` ``(N, R, b n_{l+1})`` the children's outputs grouped by parent and ``W`` ``(R b, n_{l+1}, n_l)`` the
    edge weights (W_r = its rows r b .. r b + b - 1 stacked, ``(b n_{l+1}, n_l)``); ``bias`` ``(R, n_l)`` or None.

    Backward from g = dLoss/du ``(N, R, n_l)``: dW_r = (g_r^T inputs_r)^T (Eq 2 summed over the batch), db = sum_x g,
    d inputs_r = g_r W_r^T (Eq 1, backward).  Every product is one batched matmul over the parents on transposed
    views; nothing is transposed in memory but dW (a few KB).
    """

    @staticmethod
    def forward(ctx: Any, inputs: torch.Tensor, W: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        # ctx in forward, not a setup_context: that binds the arguments with inspect.signature on every call,
        # about 50 us a level (a tenth of a small batch's step)
        N, R, K = inputs.shape
        u = inputs.new_empty(N, R, W.shape[-1])
        torch.bmm(inputs.transpose(0, 1), W.reshape(R, K, -1), out=u.transpose(0, 1))
        if bias is not None:
            u += bias  # the fresh product: in place, one pass
        ctx.save_for_backward(inputs, W)
        ctx.has_bias = bias is not None
        return u

    @staticmethod
    @once_differentiable  # a plain pair of matmuls: a second derivative through it is refused, not wrong
    def backward(ctx: Any, g: torch.Tensor) -> tuple:
        x, W = ctx.saved_tensors
        N, R, K = x.shape
        gt = g.transpose(0, 1)  # (R, N, n_l)
        dx = dW = db = None
        if ctx.needs_input_grad[0]:
            dx = g.new_empty(N, R, K)
            torch.bmm(gt, W.reshape(R, K, -1).transpose(1, 2), out=dx.transpose(0, 1))
        if ctx.needs_input_grad[1]:
            # g^T @ inputs per parent (R, n_l, b n_{l+1}), then W's layout: ~1.7x faster here than inputs^T @ g
            dW = torch.bmm(gt.transpose(1, 2), x.transpose(0, 1)).transpose(1, 2).reshape(W.shape)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = g.sum(0)
        return dx, dW, db


def tree_level(inputs: torch.Tensor, W: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """:class:`TreeLevel` applied: u ``(N, R, n_l)`` from the grouped children ``inputs`` ``(N, R, b n_{l+1})``, the
    edge weights ``W`` ``(R b, n_{l+1}, n_l)`` and ``bias`` ``(R, n_l)`` or None (Eq 1, forward)."""
    return TreeLevel.apply(inputs, W, bias)


def student_forward(student: Any, events: torch.Tensor) -> torch.Tensor:
    """:meth:`~smaso.student.network.LadderStudent.forward` of a student on a uniform tree (its fast path) whose
    one-hot leaves are given by their events ``(N, R_d)`` (checked by the caller), batch-major: outputs f_0
    ``(N, n_0)``.  Level d - 1's u is the gather of weight rows
    (:class:`~smaso.student.connectivity.OneHotLeaves`, batch-major), level l's above it :func:`tree_level` of the
    level below's outputs ``(N, R_{l+1}, n_{l+1})`` grouped by parent (a view)."""
    lad, N = student.ladder, events.shape[0]
    before = student.bn_placement == "before"
    h: torch.Tensor = student._one_hot_leaves(events, True)  # u of level d - 1, flat (N R_{d-1}, n_{d-1})
    for l in range(lad.depth - 1, -1, -1):
        if l < lad.depth - 1:
            h = tree_level(h.reshape(N, lad.num_regions[l], -1), student.edge_weights(l),
                           None if student.biases is None else student.biases[l])
        bn = student._batch_norm(l, h, True) if before else None
        h = student.act(l).apply_(h if bn is None else bn[0])  # u (or BN(u)) is a fresh temporary: in place
        bn = None if before else student._batch_norm(l, h, True)
        h = h if bn is None else bn[0]
    return h.view(N, -1)
