"""The explicit forward and backward pass written batch-major: ``forward_backward(..., layout="batch")``.

:meth:`~smaso.student.network.LadderStudent.forward_backward` computes node-major (``(R_l, n_l, N)``, contiguous
over the batch), the layout the eager per-event sums read fastest (one-hot matmuls over the batch).  The compiled
segment sums (:mod:`smaso.student.event_kernels`) read the other way, one example's row of values at a time, so a
node-major record is first copied examples-major, and the one-hot leaves' gather, which yields batch-major sums, is
first transposed node-major: together about a quarter of a compiled evaluation pass (issue 39's profile).

Here the same pass writes every stacked field of level l into one buffer ``(N, k, R_l, n_l)``: slot i of it,
``buf[:, i]``, is the field's ``(N, R_l, n_l)``, the layout of :class:`~smaso.student.network.StudentRecord`'s fields
themselves.  On a uniform tree the children of parent r are regions r b .. r b + b - 1, so a level's input grouped by
parent, ``(N, R_l, b n_{l+1})``, is a view of the children's fbar slot, and each level is one batched matmul over
the parents on transposed views (as :mod:`smaso.student.batch_major`'s autograd forward): Eq 1 forward
``u = inputs W + b``, Eq 1 backward ``g_raw(children) = g W^T``, Eq 2 ``Delta W = E_x[fbar_child g_parent^T]``.
Nothing is transposed in memory.  The results equal the node-major pass's to the dtype's round-off (the same
products, summed in another order; tests/test_batch_record.py).

Where it runs: a uniform tree on the student's fast path without BN (:func:`supports_batch_layout`); elsewhere
``layout="batch"`` falls back to the node-major pass, and ``rec.stacked_layout`` says which layout a record has.
Readers of ``rec.stacked`` that need node-major buffers take :func:`as_node_major` of the record.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import torch

from smaso.student.connectivity import one_hot_pre_activation, one_hot_tree_weight_grad
from smaso.student.losses import _output_gradient
from smaso.student.record_buffers import RecordBuffers
from smaso.student.scratch import scratch_buffer, scratch_dict

__all__ = ["LAYOUTS", "as_node_major", "batch_forward_backward", "supports_batch_layout"]

#: The layouts of a record's stacked buffers: ``"node"`` ``(R_l, k, n_l, N)``, ``"batch"`` ``(N, k, R_l, n_l)``.
LAYOUTS: tuple[str, ...] = ("node", "batch")


def supports_batch_layout(student: Any) -> bool:
    """Whether ``student.forward_backward(..., layout="batch")`` writes batch-major buffers: a uniform tree on its
    fast path, without BN."""
    return bool(student.fast_path) and not student.batch_norm


def _buffer(owner: object, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """A batch-sized temporary: the owner's scratch buffer when the pass reuses buffers, else a fresh tensor."""
    if owner is None:
        return like.new_empty(shape)
    return scratch_buffer(owner, name, shape, like.dtype, like.device)


@torch.no_grad()
def batch_forward_backward(student: Any, x: torch.Tensor, y: torch.Tensor, loss: str, stacked: Any,
                           delta_w: bool) -> dict[str, Any]:
    """:meth:`~smaso.student.network.LadderStudent.forward_backward` batch-major (module docstring): the fields of
    the same :class:`~smaso.student.network.StudentRecord` (its keyword arguments), the stacked buffers
    ``(N, k, R_l, n_l)`` (``stacked_layout="batch"``); the caller has checked the inputs and labels and
    :func:`supports_batch_layout`.

    :param x: the inputs ``(N, R_d, dim)``, or one-hot leaves given by their events ``(N, R_d)`` (then the leaf
        level is a gather of weight rows and ``rec.fbar[d]`` is None: :func:`~smaso.student.mergeable.with_leaves`
        builds it for a reader that needs it).
    :param stacked: as ``forward_backward``'s (True, or a previous batch-major record's ``rec.stacked`` to reuse).
    :param delta_w: False: leave ``rec.dW`` None (a caller summing Delta W per row group from the record).
    """
    lad = student.ladder
    d, N, R = lad.depth, x.shape[0], lad.num_regions
    W0 = student.weights[0]
    dtype, dev = W0.dtype, W0.device
    events = not (x.is_floating_point() or x.is_complex())
    keys = student.stacked_fields()
    bufs = RecordBuffers(student, stacked if stacked is not False else True, keys,
                         [(N, len(keys), R[l], student.widths[l]) for l in range(d)], dtype, dev)
    slot, put, owner = bufs.slot, bufs.put, bufs.owner
    leaves = None if events else x.to(dtype)  # (N, R_d, dim)
    u: list[Any] = [None] * (d + 1)
    fbar: list[Any] = [None] * (d + 1)
    slope: list[Any] = [None] * (d + 1)
    deriv: list[Any] = [None] * (d + 1)
    inputs: list[Any] = [None] * d  # level l's input grouped by parent (N, R_l, b n_{l+1}); None: leaf events
    rows: torch.Tensor | None = None  # leaf events: their weight rows, read by the gather and by Delta W
    for l in range(d - 1, -1, -1):
        W = student.edge_weights(l)  # (R_l b, n_{l+1}, n_l)
        bias = None if student.biases is None else student.biases[l]
        if events and l == d - 1:
            _, _, rows, first = student._one_hot_args(x, True)
            ul = one_hot_pre_activation(W, rows, bias, R[l], first, batch_major=True).view(N, R[l], -1)
        else:
            below: Any = leaves if l == d - 1 else fbar[l + 1]
            inputs[l] = below.reshape(N, R[l], -1)  # a view: the children of a parent are adjacent regions
            ul = _buffer(owner, f"batch_u{l}", (N, R[l], W.shape[-1]), W)
            torch.bmm(inputs[l].transpose(0, 1), W.reshape(R[l], -1, W.shape[-1]), out=ul.transpose(0, 1))
            if bias is not None:
                ul += bias
        u[l] = ul
        a = student.act(l)
        s = slope[l] = a.slope(ul, out=slot(l, "slope"))
        deriv[l] = put(l, "deriv", s if a.homogeneous else a.derivative(ul))
        fbar[l] = torch.mul(s, ul, out=slot(l, "fbar"))
    g_top, loss_value = _output_gradient(fbar[0][:, 0].T, y, loss)  # (n_0, N)
    g_raw: list[Any] = [None] * (d + 1)
    g: list[Any] = [None] * (d + 1)
    dW: list[Any] = [None] * (d + 1)
    db: list[Any] = [None] * (d + 1)
    g_raw[0] = g_top.T[:, None]  # (N, 1, n_0)
    for l in range(d):
        W = student.edge_weights(l)
        gl = g[l] = torch.mul(deriv[l], g_raw[l], out=slot(l, "g"))  # Eq 1: the gated gradient
        Wp = W.reshape(R[l], -1, W.shape[-1])  # (R_l, b n_{l+1}, n_l)
        if l + 1 < d:  # the children's raw gradient W g (Eq 1, backward), per parent
            raw = g_raw[l + 1] = _buffer(owner, f"batch_raw{l + 1}", (N, R[l + 1], W.shape[1]), W)
            torch.bmm(gl.transpose(0, 1), Wp.transpose(1, 2), out=raw.view(N, R[l], -1).transpose(0, 1))
        if delta_w:  # Eq 2 per edge: E_x[fbar_child g_parent^T] in W's layout
            if inputs[l] is None:
                dW[l] = _leaf_weight_grad(student, W, gl, x, cast(torch.Tensor, rows)) / N
            else:  # g^T @ inputs per parent, then W's layout (batch_major.TreeLevel's orientation)
                dW[l] = (torch.bmm(gl.permute(1, 2, 0), inputs[l].transpose(0, 1)) / N).transpose(1, 2) \
                    .reshape(W.shape)
        db[l] = gl.mean(0)
    f = [*fbar[:d], None]  # without BN f is fbar; the leaves have only fbar = x
    fbar[d] = leaves
    none = [None] * (d + 1)
    fields: dict[str, Any] = {"u": u, "f": f, "fbar": fbar, "slope": slope, "deriv": deriv, "f_tilde": list(none),
            "g_raw": g_raw, "g_f": list(g_raw), "g": g, "sigma": list(none), "mu": list(none), "dW": dW, "db": db,
            "dc1": list(none), "dc0": list(none), "loss": loss_value,  # (the tensor: the record's property keeps it)
            "stacked": bufs.buffers, "stacked_fields": keys, "params_version": student.params_version(),
            "stacked_layout": "batch"}
    return fields


def _leaf_weight_grad(student: Any, W: torch.Tensor, g: torch.Tensor, events: torch.Tensor, rows: torch.Tensor
                      ) -> torch.Tensor:
    """N Delta W of the level above one-hot leaves given by their ``events`` ``(N, R_d)`` (``rows``: the weight rows
    they pick, the gather's), from its gated gradient ``g`` ``(N, R, n)``: the student's compiled segment sum where
    its leaf kernel runs compiled, else the one-hot matmul
    (:func:`~smaso.student.connectivity.one_hot_tree_weight_grad`); ``(E, m, n)`` like ``W``."""
    width = student.widths[-1]
    size = student.leaf_kernel.size(rows)
    if size is not None:
        return student.leaf_kernel.weight_grad(size, rows, g, None, W.shape[0] * width).view(W.shape)
    return one_hot_tree_weight_grad(W, g.permute(1, 2, 0), events, width, scratch_dict(student))


def as_node_major(rec: Any) -> Any:
    """``rec`` with node-major stacked buffers ``(R_l, k, n_l, N)``: a batch-major record's copied (its stacked
    fields then views of the copies), any other returned as it is; for readers of ``rec.stacked`` that sum over the
    batch with one-hot matmuls (the eager paths)."""
    if rec.stacked is None or rec.stacked_layout != "batch":
        return rec
    keys = rec.stacked_fields
    stacked = [b.permute(2, 1, 3, 0).contiguous() for b in rec.stacked]
    fields: dict[str, list] = {}
    for i, key in enumerate(keys):
        fields[key] = [v if l >= len(stacked) else stacked[l][:, i].permute(2, 0, 1)
                       for l, v in enumerate(getattr(rec, key))]
    if "fbar" in fields:  # without BN f is fbar
        fields["f"] = list(fields["fbar"])
    if "slope" in fields and "deriv" not in keys and all(a is b for a, b in zip(rec.deriv, rec.slope, strict=True)):
        fields["deriv"] = list(fields["slope"])
    loss = rec.loss if rec.loss_tensor is None else rec.loss_tensor  # (replace would read ``loss``: a sync)
    return dataclasses.replace(rec, **fields, stacked=stacked, stacked_layout="node", loss=cast(float, loss))
