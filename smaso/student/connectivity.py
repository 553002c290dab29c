"""The wiring of a locally connected student: one weight block per parent-child edge (framework paper Eq 1-2).

Level l of a ladder has edges (p, c), p in level l, c in level l + 1, in :func:`~teachers.statistics.level_edges`
order (parent-major; on a uniform tree edge e joins child region e to its parent e // b_l).  Edge e carries
W_e ``(n_{l+1}, n_l)`` = W_ba of Eq 9 (child group b to parent group a), so that, node-major
(``(R, n, N)``: regions, nodes, examples):

    u_p  = sum_{c in ch(p)} W_pc^T f_c + bias_p            (Eq 1, forward)
    raw_c = sum_{p in pa(c)} W_pc g_p                      (Eq 1, backward: the sum over every parent)
    Delta W_pc = E_x[f_c g_p^T]                             (Eq 2)

Three implementations of these two level operations, the same numbers to round-off:

- :func:`tree_pre_activation` / :func:`tree_backward`: a uniform tree, where the children of parent r are
  regions r b .. r b + b - 1, so a parent's inputs are one contiguous block: a reshape (a view) and one
  batched matmul per level (the fast path of :class:`~smaso.student.network.LadderStudent`);
- the strided plan (:func:`strided_plan`): where a level's children are strided slices of the level below
  (trees, 1-D convolutions; a 2-D convolution is one run per row), one batched matmul per child place on a
  strided *view* of the children, no gather and no scatter;
- otherwise one gather of the children, one batched matmul over the edges and one ``index_add`` into the
  parents (backward: the same with W, added into the children).

One-hot children given by their events z (``(N, R_{l+1})`` integers, f_c = onehot(z_c)) need no matmul forward:
W_pc^T onehot(z_c) is row z_c of W_pc, so u_p is a sum of gathered weight rows (an embedding-bag sum,
:func:`one_hot_pre_activation`), 4096 multiply-adds fewer per example and region of the default benchmark for
every one it keeps.  Backward, Delta W of a one-hot child is a scatter of g by z; on the CPU torch's scatters
(index_add_, embedding backward) run several times slower than the one-hot matmul, so :class:`OneHotLeaves`
builds the one-hot node-major (:func:`one_hot_node_major`, contiguous over the batch, the layout the matmul
reads fastest) and hands it to the level's own Delta W code.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from smaso.student.scratch import scratch_buffer, scratch_out
from teachers.sampling import strided_runs
from teachers.statistics import level_children, level_edge_index, level_edges

__all__ = ["MAX_RUNS", "ONE_HOT_BLOCK_BYTES", "OneHotLeaves", "graph_backward", "graph_pre_activation",
           "level_children", "level_edge_index", "level_edges", "one_hot_node_major", "one_hot_pre_activation",
           "one_hot_rows", "one_hot_tree_weight_grad", "strided_plan", "take_rows", "tree_backward",
           "tree_pre_activation"]

#: A level split into more strided runs than this takes the gather / index_add path instead.
MAX_RUNS = 64


def take_rows(t: torch.Tensor, a: int, step: int, q: int) -> torch.Tensor:
    """Rows ``a, a + step, ..., a + (q - 1) step`` of ``t`` as a view (``step = 0``: row a, q times)."""
    if step == 0:
        return t[a: a + 1].expand(q, *t.shape[1:])
    return t[a: a + (q - 1) * step + 1: step]


def strided_plan(children: tuple[tuple[int, ...], ...]) -> list | None:
    """A level's edges as strided runs (:func:`teachers.sampling.strided_runs` of the parents' children), or
    None when that takes more than :data:`MAX_RUNS` runs.

    Each entry ``(parents, [(edges, (a, step, q)), ...])``: the parent slice, and per child place j the slice
    of the edge list (parent-major) and the children ``a + step * t`` (t < q) of those parents, in order.
    """
    runs = strided_runs(children)
    if sum(rep for _, _, rep, _ in runs) > MAX_RUNS:
        return None
    first_edge = [0, *itertools.accumulate(len(ch) for ch in children)]
    plan = []
    for i0, q, rep, places in runs:
        k = len(places)
        for r in range(rep):
            ps = slice(i0 + r, i0 + r + (q - 1) * rep + 1, rep)
            e0 = first_edge[i0 + r]
            plan.append((ps, [(slice(e0 + j, e0 + j + (q - 1) * rep * k + 1, rep * k), (a, s if q > 1 else 1, q))
                              for j, (a, s) in enumerate(places)]))
    return plan


# ---------------------------------------------------------------------- uniform trees
def group_by_parent(child: torch.Tensor, num_parents: int, *, owner: object = None, name: str = "grouped"
                    ) -> torch.Tensor:
    """The children's outputs ``(R b, n_{l+1}, N)`` of a uniform-tree level grouped by parent, ``(R, b n_{l+1}, N)``
    (the b children of parent r are regions rb .. rb+b-1): a view where ``child``'s strides allow one (node-major
    outputs, the leaves' view of x), else a copy; ``owner``: the copy written into its scratch buffer ``name``
    (overwritten by the next call with that name)."""
    shape = (num_parents, -1, child.shape[-1])
    # a region's rows follow the previous region's (else a slot of a stacked buffer: other slots lie between)
    if owner is None or child.stride(0) == child.shape[1] * child.stride(1):
        return child.reshape(shape)
    return scratch_buffer(owner, name, tuple(child.shape), child.dtype, child.device).copy_(child).view(shape)


def tree_pre_activation(W: torch.Tensor, grouped: torch.Tensor, bias: torch.Tensor | None, *, owner: object = None,
                        name: str = "u") -> torch.Tensor:
    """u of a uniform-tree level ``(R, n_l, N)`` from edge weights ``W`` ``(R b, n_{l+1}, n_l)`` and the children's
    outputs grouped by parent ``grouped`` ``(R, b n_{l+1}, N)`` (a view of ``(R b, n_{l+1}, N)``): one batched
    matmul, the bias added by the same call.  ``owner``: written into its scratch buffer ``name`` (overwritten by
    the next call with that name; the same values bit for bit)."""
    R, n_l = grouped.shape[0], W.shape[-1]
    Wt = W.reshape(R, -1, n_l).transpose(1, 2)  # (R, n_l, b n_{l+1})
    out = scratch_out(owner, name, (R, n_l, grouped.shape[-1]), grouped)
    if bias is None:
        return torch.bmm(Wt, grouped, out=out)
    return torch.baddbmm(bias.unsqueeze(-1), Wt, grouped, out=out)


def tree_backward(W: torch.Tensor, g: torch.Tensor, grouped: torch.Tensor, need_raw: bool, *, mean: bool = True,
                  delta_w: bool = True, owner: object = None, name: str = ""
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Delta W ``(R b, n_{l+1}, n_l)`` = E_x[f_c g_p^T] (Eq 2) and, if ``need_raw``, the children's raw gradient
    ``(R b, n_{l+1}, N)`` = W g (Eq 1; one parent each) of a uniform-tree level, from the gated gradient ``g``
    ``(R, n_l, N)`` and the grouped children's outputs ``(R, b n_{l+1}, N)`` (``mean=False``: the sum over the
    batch, not the mean: autograd's weight gradient; ``delta_w=False``: no Delta W, None in its place).  ``owner``:
    both written into its scratch buffers named after ``name`` (overwritten by the next call with that name; the
    same values bit for bit): a batch's fresh megabytes would otherwise fault in their pages again on every call."""
    R, n_l, N = g.shape
    raw = None if not need_raw else torch.bmm(
        W.reshape(R, -1, n_l), g, out=scratch_out(owner, name + "raw", (R, grouped.shape[1], N), g)
    ).view(W.shape[0], W.shape[1], N)
    if not delta_w:
        return cast(torch.Tensor, None), raw  # (typed as the default's: a caller asking for none reads none)
    # per parent region, g times its children's grouped outputs transposed, a contraction over the batch (in
    # this order the leaf view of x is read row by row: ~1.5x faster than child @ g^T)
    prod = torch.bmm(g, grouped.transpose(1, 2), out=scratch_out(owner, name + "dW_t", (R, n_l, grouped.shape[1]), g))
    # with an owner the transposed product is laid out in W's layout by the division itself (or a copy)
    out = scratch_out(owner, name + "dW", (R, grouped.shape[1], n_l), g)
    if out is None:
        dW = (prod.transpose(1, 2) / N if mean else prod.transpose(1, 2)).reshape(W.shape)
    else:
        dW = (torch.div(prod.transpose(1, 2), N, out=out) if mean else out.copy_(prod.transpose(1, 2))).view(W.shape)
    return dW, raw


# ---------------------------------------------------------------------- any region graph
def graph_pre_activation(W: torch.Tensor, child: torch.Tensor, bias: torch.Tensor | None, num_parents: int,
                         plan: list | None, edges: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """u ``(R_l, n_l, N)`` of any level from edge weights ``W`` ``(E, n_{l+1}, n_l)`` and the children's outputs
    ``child`` ``(R_{l+1}, n_{l+1}, N)``: the strided ``plan`` of the level, or (None) the gather / index_add
    path over ``edges`` = ``(parents, children)``."""
    Wt = W.transpose(1, 2)  # (E, n_l, n_{l+1})
    N = child.shape[-1]
    if plan is None:  # irregular level: one gather, one batched matmul, one index_add
        par, chi = edges
        msg = torch.bmm(Wt, child.index_select(0, chi))  # (E, n_l, N)
        u = msg.new_zeros(num_parents, W.shape[-1], N).index_add_(0, par, msg)
    else:  # strided runs (trees, convolutions): views of the children, no gather or scatter
        u = child.new_empty(num_parents, W.shape[-1], N)
        for ps, places in plan:
            acc = None
            for es, (a, st, q) in places:
                m = torch.bmm(Wt[es], take_rows(child, a, st, q))
                acc = m if acc is None else acc.add_(m)
            u[ps] = acc  # type: ignore[assignment]  # every parent has children: acc is a tensor
    return u if bias is None else u + bias.unsqueeze(-1)


def graph_backward(W: torch.Tensor, g: torch.Tensor, child: torch.Tensor, need_raw: bool, plan: list | None,
                   edges: tuple[torch.Tensor, torch.Tensor], *, mean: bool = True
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Delta W of every edge ``(E, n_{l+1}, n_l)`` = E_x[f_c g_p^T] (Eq 2) and, if ``need_raw``, the children's raw
    gradient ``(R_{l+1}, n_{l+1}, N)`` = sum over each child's parents of W_pc g_p (Eq 1), from the gated gradient
    ``g`` ``(R_l, n_l, N)`` and the children's outputs ``child`` ``(R_{l+1}, n_{l+1}, N)`` (``mean=False``: the sum
    over the batch, not the mean)."""
    N = g.shape[-1] if mean else 1
    shape = (child.shape[0], W.shape[1], N)
    if plan is None:
        par, chi = edges
        ge = g.index_select(0, par)  # (E, n_l, N)
        dW = torch.bmm(child.index_select(0, chi), ge.transpose(1, 2)) / N
        raw = g.new_zeros(shape).index_add_(0, chi, torch.bmm(W, ge)) if need_raw else None
        return dW, raw
    dW = torch.empty(W.shape, dtype=g.dtype, device=g.device)
    raw = g.new_zeros(shape) if need_raw else None
    for ps, places in plan:
        gp = g[ps]
        gpt = gp.transpose(1, 2)
        for es, (a, st, q) in places:
            dW[es] = torch.bmm(take_rows(child, a, st, q), gpt) / N
            if need_raw:
                back = torch.bmm(W[es], gp)  # (q, n_{l+1}, N)
                if st == 0:
                    raw[a] += back.sum(0)  # type: ignore[index]  # need_raw: raw is a tensor
                else:
                    raw[a: a + (q - 1) * st + 1: st] += back  # type: ignore[index]  # need_raw: raw is a tensor
    return dW, raw


# ---------------------------------------------------------------------- one-hot children given by their events
def one_hot_node_major(events: torch.Tensor, width: int, dtype: torch.dtype, *, out: torch.Tensor | None = None,
                       owner: object = None) -> torch.Tensor:
    """The one-hot inputs of events ``events`` ``(N, R)`` (integers in [0, width)) node-major, ``(R, width, N)``
    contiguous: ``one_hot_node_major(z, m, dt).permute(2, 0, 1)`` equals ``one_hot(z, m, dt)``
    (:func:`teachers.emission.one_hot`) value for value.  One vectorized comparison written in ``dtype`` (a
    scatter_ of the ones runs several times slower on the CPU); ``out``: a buffer of that shape and dtype to write
    into (a reused one saves faulting in fresh pages: 16 MB per batch of 1024 in the default benchmark); ``owner``:
    write into its kept scratch buffer (:func:`~smaso.student.scratch.scratch_buffer`; overwritten by its next call)."""
    if owner is not None:
        out = scratch_buffer(owner, "one_hot_node_major", (events.shape[1], int(width), events.shape[0]), dtype,
                             events.device)
    # the events transposed contiguous first: the comparison broadcast over a strided view runs ~6x slower
    return _one_hot_rows_major(events.T.contiguous(), width, dtype, out)


def _one_hot_rows_major(events_t: torch.Tensor, width: int, dtype: torch.dtype, out: torch.Tensor | None
                        ) -> torch.Tensor:
    """:func:`one_hot_node_major` from the events already transposed, ``(R, N)`` contiguous."""
    levels = torch.arange(int(width), device=events_t.device).to(events_t.dtype)[:, None]  # (width, 1)
    shape = (events_t.shape[0], int(width), events_t.shape[1])
    if out is None or tuple(out.shape) != shape or out.dtype != dtype or out.device != events_t.device:
        out = torch.empty(shape, dtype=dtype, device=events_t.device)
    return torch.eq(events_t.unsqueeze(1), levels, out=out)


#: The one-hot block that :func:`one_hot_tree_weight_grad` builds at a time, in bytes: it stays in the caches between
#: its comparison and its matmul (the whole one-hot, 16 MB in the default benchmark, is written to memory and read
#: back: about 2x slower on the CPU, more on a busy one).  1 and 2 MiB ran alike; 2 halves the Python loop's steps.
ONE_HOT_BLOCK_BYTES = 2 << 20


def one_hot_tree_weight_grad(W: torch.Tensor, g: torch.Tensor, events: torch.Tensor, width: int, scratch: dict
                             ) -> torch.Tensor:
    """N E_x[f_c g_p^T] (Eq 2 summed over the batch, autograd's weight gradient) of a uniform-tree level whose
    children are one-hot, from their ``events`` ``(N, R b)`` and the gated gradient ``g`` ``(R, n_l, N)``:
    :func:`tree_backward`'s matmul, over blocks of parents whose one-hot (:func:`one_hot_node_major`, written
    into ``scratch["one_hot_block"]``) fits :data:`ONE_HOT_BLOCK_BYTES`.  ``(R b, width, n_l)`` like ``W``."""
    R, n_l, N = g.shape
    b = W.shape[0] // R
    block = max(1, min(R, ONE_HOT_BLOCK_BYTES // max(1, b * width * N * g.element_size())))
    events_t = events.T.contiguous()  # (R b, N)
    dW = g.new_empty(R, b * width, n_l)  # W's layout: the matmul writes each block in place
    for p0 in range(0, R, block):
        p1 = min(R, p0 + block)
        buf = scratch.get("one_hot_block")
        child = _one_hot_rows_major(events_t[p0 * b: p1 * b], width, g.dtype,
                                    buf[: (p1 - p0) * b] if buf is not None and buf.shape[0] >= (p1 - p0) * b
                                    and buf.shape[2] == N and buf.dtype == g.dtype else None)
        if p0 == 0:
            scratch["one_hot_block"] = child
        # one-hot @ g^T: (b m x N) @ (N x n_l) per parent, ~10% faster than tree_backward's g @ one-hot^T here
        torch.bmm(child.view(p1 - p0, b * width, N), g[p0:p1].transpose(1, 2), out=dW[p0:p1])
    return dW.view(W.shape)


def one_hot_rows(events: torch.Tensor, width: int, children: torch.Tensor | None, *,
                 dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """Per example and edge e, the row of the flattened edge weights ``W.reshape(E * width, n_l)`` that a one-hot
    child picks: ``e * width + z_{child(e)}``, ``(N, E)`` int64 (or ``dtype``: int32, 4x faster to write, for tables
    of fewer than 2^31 rows) from the children's events ``(N, R_{l+1})`` (``children``: each edge's child, or None
    when edge e joins child e, as on a uniform tree)."""
    z = events if children is None else events.index_select(1, children)
    # one pass: the integer offsets promote the (often uint8) events as they are added
    return torch.arange(0, z.shape[1] * width, width, dtype=dtype, device=z.device) + z


def _bag_sums(W: torch.Tensor, rows: torch.Tensor, num_parents: int, first_edge: torch.Tensor | None
              ) -> torch.Tensor:
    """Per example and parent the sum of the picked rows of the flattened edge weights, batch-major and flat
    ``(N R_l, n_l)`` (not a view: a custom Function may return it): one embedding-bag sum (bags of E / R_l edges, or
    starting at ``first_edge``)."""
    N, E = rows.shape
    table = W.reshape(-1, W.shape[-1])
    if first_edge is None:
        u = F.embedding_bag(rows.reshape(N * num_parents, E // num_parents), table, mode="sum")
    else:
        offsets = torch.arange(0, N * E, E, dtype=torch.int64, device=rows.device)[:, None] + first_edge
        u = F.embedding_bag(rows.reshape(-1), table, offsets.reshape(-1), mode="sum")
    return u


def one_hot_pre_activation(W: torch.Tensor, rows: torch.Tensor, bias: torch.Tensor | None, num_parents: int,
                           first_edge: torch.Tensor | None, *, batch_major: bool = False) -> torch.Tensor:
    """u ``(R_l, n_l, N)`` (Eq 1, forward) of a level whose children are one-hot: per parent the sum of the weight
    rows that its children's events pick (``rows`` ``(N, E)`` from :func:`one_hot_rows`), one embedding-bag sum
    over the flattened edge weights ``W`` ``(E, m, n_l)``, plus the bias ``(R_l, n_l)``.

    ``first_edge``: ``(R_l,)`` the first edge of every parent (edges are parent-major), or None when every parent
    has E / R_l children.  The gather is batch-major; the result is transposed once to node-major, contiguous over
    the batch (the layout the levels above and Delta W read fastest), or with ``batch_major`` returned as it is,
    flat ``(N R_l, n_l)``: ``.view(N, R_l, n_l)`` is the layout of :mod:`smaso.student.batch_major` (flat, it is
    no view, so that :class:`OneHotLeaves` may return it and an activation run in place on it).
    """
    flat = _bag_sums(W, rows, num_parents, first_edge)
    u = flat.view(rows.shape[0], num_parents, -1)
    if bias is not None:
        u += bias  # the gather's fresh output: in place
    return flat if batch_major else _node_major(u)


def _node_major(u: torch.Tensor) -> torch.Tensor:
    """A batch-major ``(N, R, n)`` tensor copied node-major ``(R, n, N)``: one 2-D transpose (torch's blocked
    transpose kernel; a 3-D permute copy runs about 4x slower)."""
    N, R, n = u.shape
    out = u.new_empty(R, n, N)  # not a view: the activation above runs in place on it
    out.view(R * n, N).copy_(u.reshape(N, R * n).t())
    return out


class OneHotLeaves(torch.autograd.Function):
    """:func:`one_hot_pre_activation` differentiable in the weights and the bias, whose weight gradient is the
    level's own matmul on the node-major one-hot (:func:`one_hot_node_major`) instead of torch's embedding-bag
    backward (a scatter, several times slower on the CPU).

    ``OneHotLeaves.apply(W, bias, rows, events, width, num_parents, first_edge, weight_grad, batch_major)``:
    ``weight_grad(W, g, events)`` is the level's Delta W summed over the batch (autograd's weight gradient), from
    the incoming gradient node-major ``g`` ``(R_l, n_l, N)`` (with ``batch_major``, u is ``(N, R_l, n_l)`` and g a
    node-major view of its gradient) and the children's events ``(N, R_{l+1})`` (:func:`one_hot_tree_weight_grad`,
    or :func:`graph_backward` with ``mean=False`` on their one-hot).  No gradient flows to the events.
    """

    @staticmethod
    def forward(ctx: Any, W: torch.Tensor, bias: torch.Tensor | None, rows: torch.Tensor, events: torch.Tensor,
                width: int, num_parents: int, first_edge: torch.Tensor | None,
                weight_grad: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
                batch_major: bool = False) -> torch.Tensor:
        ctx.save_for_backward(W, events)
        ctx.weight_grad, ctx.has_bias, ctx.batch_major = weight_grad, bias is not None, batch_major
        ctx.num_parents, ctx.fixed_bags = num_parents, first_edge is None
        return one_hot_pre_activation(W, rows, bias, num_parents, first_edge, batch_major=batch_major)

    @staticmethod
    @once_differentiable  # its backward is a plain matmul: a second derivative through it is refused, not wrong
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        W, events = ctx.saved_tensors
        if ctx.batch_major:  # the flat (N R_l, n_l) gradient: node-major (R_l, n_l, N) as a view
            grad = grad.view(events.shape[0], -1, grad.shape[-1]).permute(1, 2, 0)
        dW = ctx.weight_grad(W, grad, events) if ctx.needs_input_grad[0] else None
        db = None
        if ctx.has_bias and ctx.needs_input_grad[1]:
            if dW is not None and ctx.fixed_bags:
                # a child's one-hot sums to 1 over its events: sum_v dW_{p c}[v] = sum_x g_p, from the few KB of dW
                # rather than another pass over the (R_l, n_l, N) gradient (equal to round-off)
                db = dW.view(ctx.num_parents, -1, *W.shape[1:])[:, 0].sum(1)
            else:
                db = grad.sum(-1)
        return dW, db, None, None, None, None, None, None, None
