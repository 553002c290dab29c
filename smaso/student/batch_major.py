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

from smaso.student import connectivity
from smaso.student.connectivity import _one_hot_rows_major, one_hot_rows
from smaso.student.leaf_kernels import LeafKernel
from smaso.student.scratch import scratch_dict

__all__ = ["ReluOneHotLeaves", "TreeLevel", "one_hot_events", "student_forward", "tree_level"]


class TreeLevel(torch.autograd.Function):
    """u ``(N, R, n_l)`` = per parent r, ``inputs[:, r] @ W_r`` + bias_r (Eq 1, forward, batch-major), with
    ``inputs`` ``(N, R, b n_{l+1})`` the children's outputs grouped by parent and ``W`` ``(R b, n_{l+1}, n_l)`` the
    edge weights (W_r = its rows r b .. r b + b - 1 stacked, ``(b n_{l+1}, n_l)``); ``bias`` ``(R, n_l)`` or None.

    Backward from g = dLoss/du ``(N, R, n_l)``: dW_r = (g_r^T inputs_r)^T (Eq 2 summed over the batch), db = sum_x g,
    d inputs_r = g_r W_r^T (Eq 1, backward).  Every product is one batched matmul over the parents on transposed
    views; nothing is transposed in memory but dW (a few KB).
    """

    @staticmethod
    def forward(ctx: Any, inputs: torch.Tensor, W: torch.Tensor, bias: torch.Tensor | None,
                scratch: dict | None = None) -> torch.Tensor:
        # ctx in forward, not a setup_context: that binds the arguments with inspect.signature on every call,
        # about 50 us a level (a tenth of a small batch's step)
        N, R, K = inputs.shape
        u = inputs.new_empty(N, R, W.shape[-1])
        torch.bmm(inputs.transpose(0, 1), W.reshape(R, K, -1), out=u.transpose(0, 1))
        if bias is not None:
            u += bias  # the fresh product: in place, one pass
        ctx.save_for_backward(inputs, W)
        ctx.has_bias, ctx.scratch = bias is not None, scratch
        return u

    @staticmethod
    @once_differentiable  # a plain pair of matmuls: a second derivative through it is refused, not wrong
    def backward(ctx: Any, g: torch.Tensor) -> tuple:
        x, W = ctx.saved_tensors
        N, R, K = x.shape
        gt = g.transpose(0, 1)  # (R, N, n_l)
        dx = dW = db = None
        if ctx.needs_input_grad[0]:
            # into a buffer kept from call to call when given one: the gradient of an inner level's outputs is
            # read once, by the level below's backward, and a fresh 4 MB is faulted in page by page (glibc hands
            # freed large blocks back to the system: about 2,000 page faults a step of the default benchmark)
            dx = g.new_empty(N, R, K) if ctx.scratch is None else _buffer(ctx.scratch, "level_grad", (N, R, K), g)
            torch.bmm(gt, W.reshape(R, K, -1).transpose(1, 2), out=dx.transpose(0, 1))
        if ctx.needs_input_grad[1]:
            # g^T @ inputs per parent (R, n_l, b n_{l+1}), then W's layout: ~1.7x faster here than inputs^T @ g
            dW = torch.bmm(gt.transpose(1, 2), x.transpose(0, 1)).transpose(1, 2).reshape(W.shape)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = g.sum(0)
        return dx, dW, db, None


def tree_level(inputs: torch.Tensor, W: torch.Tensor, bias: torch.Tensor | None, scratch: dict | None = None
               ) -> torch.Tensor:
    """:class:`TreeLevel` applied: u ``(N, R, n_l)`` from the grouped children ``inputs`` ``(N, R, b n_{l+1})``, the
    edge weights ``W`` ``(R b, n_{l+1}, n_l)`` and ``bias`` ``(R, n_l)`` or None (Eq 1, forward); ``scratch``: a
    dict whose buffer the backward writes the inputs' gradient into, reused from call to call (only for inputs
    that no caller keeps a gradient of)."""
    return TreeLevel.apply(inputs, W, bias, scratch)


class ReluOneHotLeaves(torch.autograd.Function):
    """f = ReLU(u) of a uniform tree's level d - 1 whose children are one-hot leaves given by their events: u the
    gather of weight rows (:func:`~smaso.student.connectivity.one_hot_pre_activation`, Eq 1 on one-hot inputs; the
    bias added to the table's rows of each parent's first child, which every sum picks once), batch-major flat
    ``(N R, n)``, the ReLU applied in place.

    ``ReluOneHotLeaves.apply(W, bias, rows, events, width, num_parents, scratch, kernel)`` with ``W``
    ``(R b, width, n)``, ``bias`` ``(R, n)`` or None, ``rows`` :func:`~smaso.student.connectivity.one_hot_rows` of
    the ``events`` ``(N, R b)``; ``scratch``: a dict of buffers the backward reuses from one call to the next;
    ``kernel``: the student's :class:`~smaso.student.leaf_kernels.LeafKernel` (compiled: the gather and the weight
    gradient below as :func:`~smaso.student.leaf_kernels.gather_relu` and
    :func:`~smaso.student.leaf_kernels.gated_segment_sum`).

    Backward from dLoss/df: g = dLoss/df f'(u) (the ReLU's gate, from f) into a reused ``(N, R, n)`` buffer, then
    per block of parents dW = sum_x onehot(z_c) g_p^T (Eq 2 summed over the batch, autograd's weight gradient:
    :func:`~smaso.student.connectivity.one_hot_tree_weight_grad`'s matmul on the block's node-major one-hot) and
    db = sum_v dW_{p c}[v] = sum_x g_p (a child's one-hot sums to 1).  The gate in its own autograd node would write
    a fresh 4 MB per batch of 1024 in the default benchmark, faulted in page by page.
    """

    @staticmethod
    def forward(ctx: Any, W: torch.Tensor, bias: torch.Tensor | None, rows: torch.Tensor, events: torch.Tensor,
                width: int, num_parents: int, scratch: dict, kernel: LeafKernel | None = None) -> torch.Tensor:
        if bias is not None:
            # the bias folded into the rows of each parent's first child (every bag picks exactly one of them):
            # 16 K adds on the table instead of one more pass over u (N R n, 1 M values a batch of 1024 here)
            table = W.clone(memory_format=torch.contiguous_format)
            table.view(num_parents, -1, width, W.shape[-1])[:, 0] += bias[:, None]
        size = None if kernel is None else kernel.size(rows)  # one decision per step, forward and backward
        src = W if bias is None else table
        if kernel is None or size is None:
            f = connectivity.one_hot_pre_activation(src, rows, None, num_parents, None, batch_major=True).relu_()
        else:  # gather, bag sums and gate in one compiled loop (smaso.student.leaf_kernels)
            f = kernel.forward(size, src.reshape(-1, W.shape[-1]), rows, num_parents)
        ctx.save_for_backward(W, events, f, rows)
        ctx.width, ctx.num_parents, ctx.scratch, ctx.has_bias = width, num_parents, scratch, bias is not None
        ctx.kernel, ctx.size = kernel, size
        return f

    @staticmethod
    @once_differentiable  # a gate and a matmul: a second derivative through it is refused, not wrong
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        W, events, f, rows = ctx.saved_tensors
        need_w, need_b = ctx.needs_input_grad[0], ctx.has_bias and ctx.needs_input_grad[1]
        if not (need_w or need_b):
            return (None,) * 8
        N, R, m, n = events.shape[0], ctx.num_parents, ctx.width, f.shape[-1]
        b = W.shape[0] // R
        grad, f = grad.reshape(N, R, n), f.view(N, R, n)
        if ctx.size is not None:  # the segment sum compiled (smaso.student.leaf_kernels): no one-hot, no gate pass
            dW = ctx.kernel.weight_grad(ctx.size, rows, grad, f, W.shape[0] * m).view(R, b * m, n)
            db = dW.view(R, b, m, n)[:, 0].sum(1) if need_b else None
            return dW.view(W.shape) if need_w else None, db, None, None, None, None, None, None
        block = max(1, min(R, connectivity.ONE_HOT_BLOCK_BYTES // max(1, b * m * N * f.element_size())))
        events_t = events.T.contiguous()  # (R b, N)
        dW = f.new_empty(R, b * m, n)  # W's layout: the matmul writes each block in place
        scratch = ctx.scratch
        # the gate over the whole contiguous (N, R, n) at once (3x faster than block by block through transposed
        # views); the matmul reads each parent's (N, n) through a strided view of it.  In place where dLoss/df is
        # the level above's reused buffer (TreeLevel's "level_grad", which only this backward reads: 4 MB a batch
        # not written again, ~3% of the step), else into a reused buffer of its own
        level_grad = scratch.get("level_grad")
        own = level_grad is not None and grad.is_contiguous() and grad.data_ptr() == level_grad.data_ptr()
        g = torch.ops.aten.threshold_backward.grad_input(
            grad, f, 0, grad_input=grad if own else _buffer(scratch, "leaf_gate_batch_major", (N, R, n), f)
        ).transpose(0, 1)
        for p0 in range(0, R, block):
            p1 = min(R, p0 + block)
            oh = _one_hot_rows_major(events_t[p0 * b: p1 * b], m, f.dtype,
                                     _buffer(scratch, "one_hot_block", (block * b, m, N), f)[: (p1 - p0) * b])
            torch.bmm(oh.view(p1 - p0, b * m, N), g[p0:p1], out=dW[p0:p1])
        db = dW.view(R, b, m, n)[:, 0].sum(1) if need_b else None
        return dW.view(W.shape) if need_w else None, db, None, None, None, None, None, None


def _buffer(scratch: dict, key: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """``scratch[key]``: a buffer of at least ``shape[0]`` rows of ``shape[1:]`` in ``like``'s dtype and device, kept
    from call to call (its first ``shape[0]`` rows)."""
    buf = scratch.get(key)
    if buf is None or buf.shape[0] < shape[0] or buf.shape[1:] != shape[1:] or buf.dtype != like.dtype \
            or buf.device != like.device:
        buf = scratch[key] = like.new_empty(shape)
    return buf[: shape[0]]


def one_hot_events(x: torch.Tensor) -> torch.Tensor:
    """The leaf events ``(N, R_d)`` of one-hot inputs ``x`` ``(N, R_d, dim)``: ``x @ (0, 1, .., dim - 1)``, one read of
    the inputs (a matrix-vector product: an argmax over the last axis runs about 6x slower on the CPU), exact on
    one-hot rows (one nonzero term; an argmax where the dtype cannot hold every event, such as bfloat16 past 256);
    uint8 where dim <= 256, else int64.  ``x`` is trusted to be one-hot: a row that is not gives a meaningless
    event."""
    dim = x.shape[-1]
    if dim - 1 > 2 / torch.finfo(x.dtype).eps:  # every integer up to 2^(mantissa bits + 1) is exact
        return x.argmax(-1)
    events = torch.matmul(x, torch.arange(dim, dtype=x.dtype, device=x.device))
    return events.to(torch.uint8 if dim <= 256 else torch.int64)


def student_forward(student: Any, events: torch.Tensor) -> torch.Tensor:
    """:meth:`~smaso.student.network.LadderStudent.forward` of a student on a uniform tree (its fast path) whose
    one-hot leaves are given by their events ``(N, R_d)`` (checked by the caller), batch-major: outputs f_0
    ``(N, n_0)``.  Level d - 1's u is the gather of weight rows
    (:class:`~smaso.student.connectivity.OneHotLeaves`, batch-major; with a ReLU above it and no BN, gather and gate
    are one :class:`ReluOneHotLeaves`), level l's above it :func:`tree_level` of the level below's outputs
    ``(N, R_{l+1}, n_{l+1})`` grouped by parent (a view)."""
    lad, N, d = student.ladder, events.shape[0], student.ladder.depth
    before = student.bn_placement == "before"
    scratch = scratch_dict(student)  # buffers reused from one backward to the next
    fused = student.act(d - 1).name == "relu" and not student.batch_norm
    if fused:
        h = ReluOneHotLeaves.apply(student.edge_weights(d - 1),
                                   None if student.biases is None else student.biases[d - 1],
                                   one_hot_rows(events, student.widths[-1], None, dtype=torch.int32), events,
                                   student.widths[-1], lad.num_regions[d - 1], scratch, student.leaf_kernel)
    else:
        h = student._one_hot_leaves(events, True)  # u of level d - 1, flat (N R_{d-1}, n_{d-1})
    for l in range(d - 1, -1, -1):
        if l < d - 1:
            # the level just above the leaves writes its inputs' gradient (4 MB here) into a reused buffer
            h = tree_level(h.reshape(N, lad.num_regions[l], -1), student.edge_weights(l),
                           None if student.biases is None else student.biases[l], scratch if l == d - 2 else None)
        elif fused:
            continue  # ReluOneHotLeaves applied the gate
        bn = student._batch_norm(l, h, True) if before else None
        h = student.act(l).apply_(h if bn is None else bn[0])  # u (or BN(u)) is a fresh temporary: in place
        bn = None if before else student._batch_norm(l, h, True)
        h = h if bn is None else bn[0]
    return h.view(N, -1)
