"""Compiled per-event sums of one statistics batch on a uniform tree (``FrequencyAccumulator(kernel="compiled")``).

The eager accumulator (:mod:`smaso.student.batch_sums`) forms each per-event sum
``S[r, a, :] = sum_n [z[n, r] = a] X[r, :, n]`` as a batched matmul with the events' one-hot matrix: M multiply-adds
per value summed.  Here each level's sums are true segment sums, compiled by inductor
(:func:`smaso.student.compiled.compiled`): each example's row of k n values (one event's) is added as one vector,
and the pair counts are one more sum over the pair index.  A node-major record ``(R, k, n, N)`` is first transposed
into examples-major rows ``(R, N, k n)`` (:func:`examples_major`); a batch-major one ``(N, k, R, n)``
(``forward_backward(layout="batch")``, :mod:`~smaso.student.batch_record`) is summed as it lies, example by example,
with no copy: per 4096-row batch of the main job's 341-region ladder in 10 row groups, 12.0 ms against 9.6 ms for the
examples-major sums plus 14.7 ms for the transpose that feeds them (median, 1 thread).  Same arithmetic as the eager
path (the order of each sum may differ: equal to float32 round-off, float64 round-off in float64); the two layouts
add every segment's rows in the same order, so they give the same bytes.

Two rules of the compiled kernels (``smaso.student.compiled``) shape these functions:

- one compile per shape: every call of an accumulator takes the same N rows (its first batch's).  A shorter batch
  is padded with rows whose event is M (one past the level's last event), which land in an extra segment per region
  that is dropped: segments are M + 1 per region, pairs (M_p + 1)(M + 1), always, so padded and full batches share
  one compiled graph.  Events must therefore be < 255 (uint8 with room for the pad value).
- the same bytes whatever the thread count: a scatter that inductor parallelises over rows adds with atomics, in no
  fixed order; the caller runs these kernels under one thread (:func:`serial`), where the order of every sum is the
  rows' order.
"""

from __future__ import annotations

from typing import cast

import torch

from smaso.student.compiled import run_compiled

__all__ = ["MAX_EVENTS", "examples_major", "padded_tree_sums", "tree_sums"]

#: The largest event count a compiled level takes (uint8 events plus the pad value M).
MAX_EVENTS = 254


def _ones(n: int, device: torch.device) -> torch.Tensor:
    return torch.ones((), dtype=torch.float64, device=device).expand(n)


def examples_major(stacked: list[torch.Tensor], out: list[torch.Tensor]) -> None:
    """Each level's stacked record ``(R, k, n, N)`` (and any other node-major ``(R, k, n, N)``: BN's unstacked fbar)
    written as examples-major rows ``(R, N, k n)`` into ``out`` (one event's row of k n values contiguous, in
    ``out``'s dtype), to be compiled: one read and one write of the record, a kernel of its own (fused into the
    sums' scatters, the transposed reads cost ~1.5x more: 2.7 against 1.8 ms on the benchmark's deepest level),
    into buffers the caller keeps between batches (no fresh ~13 MB per batch)."""
    for v, o in zip(stacked, out, strict=True):
        o.copy_(v.reshape(v.shape[0], -1, v.shape[-1]).transpose(1, 2))


def _slot(rows: torch.Tensor, i: int, n: int, batch_first: bool) -> torch.Tensor:
    """Slot ``i`` (n values per row) of a level's rows: ``(R, N, n)`` of examples-major rows ``(R, N, k n)``, or
    ``(N, R, n)`` of a batch-major buffer ``(N, k, R, n)``."""
    return rows[:, i] if batch_first else rows[:, :, i * n:(i + 1) * n]


def _per_child(t: torch.Tensor, b: int, batch_first: bool) -> torch.Tensor:
    """A parent level's ``(R_p, N, ...)`` (``batch_first``: ``(N, R_p, ...)``) repeated for each of its b children:
    ``(R_p b, N, ...)`` (``(N, R_p b, ...)``), child region r having parent r // b."""
    ax = 1 if batch_first else 0
    shape = list(t.shape)
    shape.insert(ax + 1, b)
    out = t.unsqueeze(ax + 1).expand(shape)
    return out.reshape(*shape[:ax], shape[ax] * b, *shape[ax + 2:])


def tree_sums(ev: torch.Tensor, rows: list[torch.Tensor], fbar: list[torch.Tensor | None], events: tuple[int, ...],
              offsets: tuple[int, ...], k: int, i_fbar: int, i_g: int, group: torch.Tensor | None = None,
              groups: int = 1, ev_batch: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Every per-event sum and pair count of one batch of a uniform tree (framework paper Eq 6 sums; module
    docstring), to be compiled.

    :param ev: ``(regions, N)`` uint8 events of every region (level l's rows ``offsets[l]:offsets[l+1]``), each in
        [0, M_l] where M_l = ``events[l]`` is the pad rows' value; child region r of a level has parent r // b.
    :param rows: per hidden level l < d its examples-major rows ``(R_l, N, k n_l)`` (:func:`examples_major`), or
        where ``ev_batch`` is given its batch-major record ``(N, k, R_l, n_l)`` (``forward_backward(layout=
        "batch")``), summed as it is: the rows (example, region) in that order, each a row of k n values.
    :param ev_batch: the same events ``(N, regions)`` (contiguous, as ``ev``: each order's keys read without
        strides) with a batch-major record, else None.
    :param fbar: per hidden level its fbar rows ``(R_l, N, n_l)`` where it is not a stacked slot (BN after the gate;
        :func:`examples_major` of the record's node-major fbar), else None (always None with ``ev_batch``).
    :param k: the stacked slots; ``i_fbar``, ``i_g``: those of fbar (where stacked) and g.
    :param group: ``(N,)`` int32 each row's row group in [0, ``groups``) (the jackknife's,
        :func:`~smaso.student.row_groups.add_row_groups`): every sum is then one per group, the group one more digit
        of its segment (a pad row's group is any: its segment is dropped); None: one group.
    :returns: flat, per hidden level l: ``own (G R_l, M_l+1, k n_l)``, then at the root ``counts (G R_0, M_0+1)``
        float64, below it ``fc (G R_l, M_{l-1}+1, n_l)``, ``gp (G R_l, M_l+1, n_{l-1})``, ``pairs (G R_l,
        M_{l-1}+1, M_l+1)`` float64; last the leaves' ``pairs``; G = ``groups``, group-major.  Pad segments last on
        every event axis.
    """
    out: list[torch.Tensor] = []
    d, bf = len(rows), ev_batch is not None
    for l in range(d + 1):
        m, mp = events[l], events[l - 1]
        GR = groups * (offsets[l + 1] - offsets[l])
        # the pair counts and counts read only the events: summed region by region whatever the record's order (a
        # region's segments close together in the cache; example by example was ~2x slower with row groups)
        e, key, key_p = _level_keys(ev, offsets, l, m, mp, group, False)
        if l < d:  # the record's sums, in its rows' order
            rk, rk_p = (key, key_p) if ev_batch is None else _level_keys(ev_batch, offsets, l, m, mp, group, True)[1:]
            R = e.shape[0]
            # (batch-major: index_put_ on the (N, R, k, n) view, ~20% faster compiled than index_add_ on its
            # reshape; the same order of every sum, so the same bytes)
            src = rows[l].permute(0, 2, 1, 3) if bf else rows[l]
            out.append(_segment_sum(src, rk, GR * (m + 1)).view(GR, m + 1, -1))
        if l == 0:
            out.append(torch.zeros(GR * (m + 1), dtype=torch.float64, device=ev.device).index_add_(
                0, key.reshape(-1), _ones(key.numel(), ev.device)).view(GR, m + 1))
            continue
        key_p = cast(torch.Tensor, key_p)  # (None only at the root)
        if l < d:
            b = R // (offsets[l] - offsets[l - 1])
            n = rows[l].shape[-1] if bf else rows[l].shape[-1] // k
            f = fbar[l]
            child = _slot(rows[l], i_fbar, n, bf) if f is None else f
            out.append(_segment_sum(child.to(rows[l].dtype), cast(torch.Tensor, rk_p), GR * (mp + 1))
                       .view(GR, mp + 1, n))
            n_p = rows[l - 1].shape[-1] if bf else rows[l - 1].shape[-1] // k
            g_par = _per_child(_slot(rows[l - 1], i_g, n_p, bf), b, bf)
            out.append(_segment_sum(g_par, rk, GR * (m + 1)).view(GR, m + 1, n_p))
        pair = ((key_p * (m + 1)) + e.to(torch.int32)).reshape(-1)
        out.append(torch.zeros(GR * (mp + 1) * (m + 1), dtype=torch.float64, device=ev.device).index_add_(
            0, pair, _ones(pair.numel(), ev.device)).view(GR, mp + 1, m + 1))
    return out


def _segment_sum(src: torch.Tensor, key: torch.Tensor, segments: int) -> torch.Tensor:
    """``out[s] = sum of src[i, j] over (i, j) with key[i, j] = s`` in the order of (i, j): ``src`` ``(A, B, ...)``
    (any strides), ``key`` ``(A, B)``; ``(segments, prod(...))``."""
    if src.dim() == 3 and src.is_contiguous():  # (examples-major rows: index_add_ on their flat view)
        return src.new_zeros(segments, src.shape[-1]).index_add_(0, key.reshape(-1), src.reshape(-1, src.shape[-1]))
    out = src.new_zeros(segments, *src.shape[2:])
    return out.index_put_((key,), src, accumulate=True).view(segments, -1)


def _level_keys(ev: torch.Tensor, offsets: tuple[int, ...], l: int, m: int, mp: int, group: torch.Tensor | None,
                batch_first: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Level l's events ``e`` ``(R, N)`` (``batch_first``: ``(N, R)``, from ``ev`` ``(N, regions)``), each row's
    segment ``(g R + r) (M + 1) + z`` and, below the root, its parent event's ``(g R + r) (M_p + 1) + z_parent``
    (None at the root), in the same shape: the group (where given) the segment's leading digit."""
    e = ev[:, offsets[l]: offsets[l + 1]] if batch_first else ev[offsets[l]: offsets[l + 1]]
    R = e.shape[1] if batch_first else e.shape[0]
    reg = torch.arange(R, device=ev.device, dtype=torch.int32)
    reg = reg[None, :] if batch_first else reg[:, None]
    if group is not None:
        g32 = group.to(torch.int32)
        reg = reg + (g32[:, None] if batch_first else g32[None, :]) * R
    key = e.to(torch.int32) + reg * (m + 1)
    if l == 0:
        return e, key, None
    ep = ev[:, offsets[l - 1]: offsets[l]] if batch_first else ev[offsets[l - 1]: offsets[l]]
    b = R // ep.shape[1 if batch_first else 0]
    return e, key, _per_child(ep.to(torch.int32), b, batch_first) + reg * (mp + 1)


def padded_tree_sums(z: torch.Tensor, stacked: list[torch.Tensor], rows: list[torch.Tensor] | None,
                     events: tuple[int, ...], offsets: tuple[int, ...], k: int, i_fbar: int, i_g: int, size: int,
                     group: torch.Tensor | None = None, groups: int = 1, layout: str = "node") -> list[dict]:
    """One batch's sums by the compiled kernels (:func:`examples_major`, then :func:`tree_sums`, each built and run
    by :func:`~smaso.student.compiled.run_compiled`), the batch padded to ``size`` rows so that one compilation
    serves every batch of at most that many: the shared body of the statistics accumulator's compiled sums and of
    the row groups' (:mod:`smaso.student.row_groups`).

    :param z: ``(N, regions)`` the batch's checked events, N <= ``size``; pad rows get each level's event M (one
        past its last), whose segments are dropped.
    :param stacked: the record's stacked buffers of the d hidden levels: node-major ``(R_l, k, n_l, N)``, then,
        where fbar is not stacked (``i_fbar`` -1: BN after the gate), its node-major fbar ``(R_l, 1, n_l, N)`` per
        hidden level; or with ``layout="batch"`` batch-major ``(N, k, R_l, n_l)``
        (:mod:`~smaso.student.batch_record`), summed as they are (no copy but a short batch's padding).
    :param rows: the caller's buffers ``(R_l, size, k' n_l)``, one per ``stacked`` entry (kept between batches:
        no fresh allocation per batch), written examples-major; None with ``layout="batch"``.
    :param group: ``(N,)`` each row's group in [0, ``groups``) (pad rows: group 0); None: one group.
    :returns: per level a dict, every tensor with the group axis first and its pad segments dropped (views):
        ``own`` ``(G, R_l, M_l, k n_l)`` (hidden levels; None at the leaves), at the root ``counts`` ``(G, R_0,
        M_0)`` float64, below it ``fc`` ``(G, R_l, M_{l-1}, n_l)`` and ``gp`` ``(G, R_l, M_l, n_{l-1})`` (None at
        the leaves) and ``pairs`` ``(G, R_l, M_{l-1}, M_l)`` float64; at the hidden levels also the gated gradient
        with its zero pad rows, a view of what was summed: ``g_rows`` ``(R_l, size, n_l)`` region-major (node
        layout) or ``g_batch`` ``(size, R_l, n_l)`` (batch layout).
    """
    d, N = len(events) - 1, z.shape[0]
    batch = layout == "batch"
    ev = z.to(torch.uint8)
    if size > N:
        pad = torch.tensor([events[l] for l in range(d + 1) for _ in range(offsets[l + 1] - offsets[l])],
                           dtype=torch.uint8, device=z.device)
        ev = torch.cat([ev, pad[None, :].expand(size - N, -1)])
        group = None if group is None else torch.cat([group, group.new_zeros(size - N)])
        stacked = [torch.cat([v, v.new_zeros((size - N, *v.shape[1:]))]) for v in stacked] if batch \
            else [torch.cat([v, v.new_zeros((*v.shape[:-1], size - N))], -1) for v in stacked]
    else:  # (a row slice's strides would be another compilation)
        stacked = [v.contiguous() for v in stacked]
    if batch:
        summed = stacked
        fbar: list[torch.Tensor | None] = [None] * d
    else:
        if rows is None:
            raise TypeError("rows: expected the examples-major buffers of a node-major record, got None")
        run_compiled(examples_major, stacked, rows)
        summed = rows[:d]
        fbar = [None] * d if i_fbar >= 0 else list(rows[d:])
    res = iter(run_compiled(tree_sums, ev.T.contiguous(), summed, fbar, events, offsets, k, i_fbar, i_g,
                            None if group is None else group.to(torch.int32), groups,
                            ev.contiguous() if batch else None))
    out: list[dict] = []
    for l in range(d + 1):
        m, mp, r = events[l], events[l - 1], offsets[l + 1] - offsets[l]
        own = next(res).view(groups, r, m + 1, -1)[:, :, :m] if l < d else None
        if l == 0:
            out.append({"own": own, "counts": next(res).view(groups, r, m + 1)[..., :m]})
        else:
            fc, gp = (next(res).view(groups, r, mp + 1, -1)[:, :, :mp],
                      next(res).view(groups, r, m + 1, -1)[:, :, :m]) if l < d else (None, None)
            out.append({"own": own, "fc": fc, "gp": gp,
                        "pairs": next(res).view(groups, r, mp + 1, m + 1)[:, :, :mp, :m]})
        if l < d:  # the gated gradient as summed, padded: ``(size, R_l, n_l)`` batch-major, else region-major
            n = summed[l].shape[-1] if batch else summed[l].shape[-1] // k
            out[l]["g_batch" if batch else "g_rows"] = _slot(summed[l], i_g, n, batch)
    return out
