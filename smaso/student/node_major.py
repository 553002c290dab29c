"""The autograd forward of a uniform-tree student on float inputs, node-major, with reused backward buffers.

:meth:`~smaso.student.network.LadderStudent.forward` on inputs ``(N, R_d, dim)`` reads them as the node-major view
``(R_d, dim, N)`` (the layout whose leaf matmul reads them fastest) and every level runs
:func:`~smaso.student.connectivity.tree_pre_activation`.  Through plain autograd the backward writes three fresh
tensors of the largest level per step (the gate's output, the gated gradient, the level above's gradient of its
inputs: 4 MB each per batch of 1024 in the default benchmark), and glibc hands freed blocks of that size back to the
system, so each step faults in a few thousand fresh pages (the dense network of equal MACs: none).  Here the level
above the leaves and the leaves with their ReLU are autograd Functions (:class:`TreeLevelNodeMajor`,
:class:`ReluTreeLeaves`) whose backward runs autograd's own products in the same order on the same operands,
into buffers kept from one call to the next: the same numbers bit for bit (tests/test_batch_major.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable

from smaso.student.batch_major import _buffer
from smaso.student.connectivity import tree_pre_activation
from smaso.student.scratch import scratch_dict

__all__ = ["ReluTreeLeaves", "TreeLevelNodeMajor", "node_major_forward"]


def _level_grads(ctx: Any, g: torch.Tensor, W: torch.Tensor, grouped: torch.Tensor, dx_out: torch.Tensor | None
                 ) -> tuple:
    """The gradients of :func:`~smaso.student.connectivity.tree_pre_activation` (``baddbmm(bias[..., None], Wt,
    grouped)`` with ``Wt = W.reshape(R, -1, n_l).transpose(1, 2)``) from dLoss/du ``g`` ``(R, n_l, N)``, as
    autograd's baddbmm backward forms them: d grouped = Wt^T g (into ``dx_out`` when given), dWt = g grouped^T,
    db = sum_x g (Eq 1 backward, Eq 2 summed over the batch)."""
    R, n_l = g.shape[0], g.shape[1]
    Wr = W.reshape(R, -1, n_l)
    dx = dW = db = None
    if ctx.needs_input_grad[2]:
        dx = torch.bmm(Wr, g) if dx_out is None else torch.bmm(Wr, g, out=dx_out)
    if ctx.needs_input_grad[0]:
        dW = torch.bmm(g, grouped.transpose(1, 2)).transpose(1, 2).reshape(W.shape)
    if ctx.has_bias and ctx.needs_input_grad[1]:
        db = g.sum(2)
    return dW, db, dx


class TreeLevelNodeMajor(torch.autograd.Function):
    """u = :func:`~smaso.student.connectivity.tree_pre_activation` ``(W, grouped, bias)`` ``(R, n_l, N)`` whose
    backward writes the gradient of ``grouped`` ``(R, b n_{l+1}, N)`` into ``scratch["level_grad"]`` (a buffer kept
    from call to call: only for inputs that no caller keeps a gradient of) and dW, db as autograd would."""

    @staticmethod
    def forward(ctx: Any, W: torch.Tensor, bias: torch.Tensor | None, grouped: torch.Tensor, scratch: dict
                ) -> torch.Tensor:
        ctx.save_for_backward(W, grouped)
        ctx.has_bias, ctx.scratch = bias is not None, scratch
        return tree_pre_activation(W, grouped, bias)

    @staticmethod
    @once_differentiable  # plain matmuls: a second derivative through them is refused, not wrong
    def backward(ctx: Any, g: torch.Tensor) -> tuple:
        W, grouped = ctx.saved_tensors
        dx_out = _buffer(ctx.scratch, "level_grad", tuple(grouped.shape), g)
        dW, db, dx = _level_grads(ctx, g, W, grouped, dx_out)
        return dW, db, dx, None


class ReluTreeLeaves(torch.autograd.Function):
    """f = ReLU(:func:`~smaso.student.connectivity.tree_pre_activation` ``(W, grouped, bias)``) ``(R, n_l, N)`` of
    the level above float leaves, ``grouped`` their node-major view ``(R, b dim, N)``.  Backward: the gate g =
    dLoss/df 1[f > 0] (autograd's ``threshold_backward``) into ``scratch["leaf_gate"]``, then the level's gradients
    as autograd forms them (the inputs' only when they require one, fresh)."""

    @staticmethod
    def forward(ctx: Any, W: torch.Tensor, bias: torch.Tensor | None, grouped: torch.Tensor, scratch: dict
                ) -> torch.Tensor:
        f = tree_pre_activation(W, grouped, bias).relu_()
        ctx.save_for_backward(W, grouped, f)
        ctx.has_bias, ctx.scratch = bias is not None, scratch
        return f

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        W, grouped, f = ctx.saved_tensors
        g = torch.ops.aten.threshold_backward.grad_input(grad, f, 0,
                                                         grad_input=_buffer(ctx.scratch, "leaf_gate", f.shape, f))
        dW, db, dx = _level_grads(ctx, g, W, grouped, None)
        return dW, db, dx, None


def node_major_forward(student: Any, x: torch.Tensor) -> torch.Tensor:
    """:meth:`~smaso.student.network.LadderStudent.forward` of a student on a uniform tree (its fast path) with ReLU
    hidden levels and no BN, on float inputs ``x`` ``(N, R_d, dim)``: outputs f_0 ``(N, n_0)``, the node-major
    autograd path's numbers bit for bit, with the leaves' level and the level above as :class:`ReluTreeLeaves` and
    :class:`TreeLevelNodeMajor`."""
    d = student.ladder.depth
    scratch = scratch_dict(student)  # buffers reused from one backward to the next
    h = student._leaves(x)
    for l in range(d - 1, -1, -1):
        W, bias = student.edge_weights(l), None if student.biases is None else student.biases[l]
        grouped = student._grouped(l, h)
        if l == d - 1:
            h = ReluTreeLeaves.apply(W, bias, grouped, scratch)
            continue
        u = TreeLevelNodeMajor.apply(W, bias, grouped, scratch) if l == d - 2 else tree_pre_activation(W, grouped,
                                                                                                     bias)
        h = student.act(l).apply_(u)
    return h[0].T
