"""Compiled per-event sums of one statistics batch on a uniform tree (``FrequencyAccumulator(kernel="compiled")``).

The eager accumulator (:mod:`smaso.student.batch_sums`) forms each per-event sum
``S[r, a, :] = sum_n [z[n, r] = a] X[r, :, n]`` as a batched matmul with the events' one-hot matrix: M multiply-adds
per value summed.  Here each level's sums are true segment sums, compiled by inductor
(:func:`smaso.student.compiled.compiled`): the level's stacked record ``(R, k, n, N)`` is transposed once into
examples-major rows ``(R, N, k n)`` (so that one event's row of k n values is added as one vector), then every sum of
the level is one ``index_add_`` over those rows, and the pair counts one more over the pair index.  Same arithmetic
as the eager path (the order of each sum may differ: equal to float32 round-off, float64 round-off in float64).

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


def tree_sums(ev: torch.Tensor, rows: list[torch.Tensor], fbar: list[torch.Tensor | None], events: tuple[int, ...],
              offsets: tuple[int, ...], k: int, i_fbar: int, i_g: int, group: torch.Tensor | None = None,
              groups: int = 1) -> list[torch.Tensor]:
    """Every per-event sum and pair count of one batch of a uniform tree (framework paper Eq 6 sums; module
    docstring), to be compiled.

    :param ev: ``(regions, N)`` uint8 events of every region (level l's rows ``offsets[l]:offsets[l+1]``), each in
        [0, M_l] where M_l = ``events[l]`` is the pad rows' value; child region r of a level has parent r // b.
    :param rows: per hidden level l < d its examples-major rows ``(R_l, N, k n_l)`` (:func:`examples_major`).
    :param fbar: per hidden level its fbar rows ``(R_l, N, n_l)`` where it is not a stacked slot (BN after the gate;
        :func:`examples_major` of the record's node-major fbar), else None.
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
    d = len(rows)
    for l in range(d + 1):
        e, m = ev[offsets[l]: offsets[l + 1]], events[l]
        R, N = e.shape
        reg = torch.arange(R, device=ev.device, dtype=torch.int32)[:, None]
        if group is not None:  # (R, N): the row's group as the segment's leading digit
            reg = reg + group.to(torch.int32)[None, :] * R
        GR = groups * R
        key = (e.to(torch.int32) + reg * (m + 1)).reshape(-1)  # segment (g R + r) (M + 1) + z
        if l < d:
            K = rows[l].shape[-1]
            out.append(rows[l].new_zeros(GR * (m + 1), K).index_add_(0, key, rows[l].reshape(R * N, K))
                       .view(GR, m + 1, K))
        if l == 0:
            out.append(torch.zeros(GR * (m + 1), dtype=torch.float64, device=ev.device).index_add_(
                0, key, _ones(R * N, ev.device)).view(GR, m + 1))
            continue
        mp, ep = events[l - 1], ev[offsets[l - 1]: offsets[l]]
        Rp = ep.shape[0]
        parent = ep.to(torch.int32)[:, None, :].expand(Rp, R // Rp, N).reshape(R, N)  # each child's parent events
        key_p = parent + reg * (mp + 1)
        if l < d:
            n = rows[l].shape[-1] // k
            f = fbar[l]
            child = rows[l][:, :, i_fbar * n:(i_fbar + 1) * n] if f is None else f
            out.append(rows[l].new_zeros(GR * (mp + 1), n).index_add_(
                0, key_p.reshape(-1), child.to(rows[l].dtype).reshape(R * N, n)).view(GR, mp + 1, n))
            n_p = rows[l - 1].shape[-1] // k
            g_par = rows[l - 1][:, :, i_g * n_p:(i_g + 1) * n_p][:, None].expand(Rp, R // Rp, N, n_p)
            out.append(rows[l].new_zeros(GR * (m + 1), n_p).index_add_(0, key, g_par.reshape(R * N, n_p))
                       .view(GR, m + 1, n_p))
        pair = ((key_p * (m + 1)) + e.to(torch.int32)).reshape(-1)
        out.append(torch.zeros(GR * (mp + 1) * (m + 1), dtype=torch.float64, device=ev.device).index_add_(
            0, pair, _ones(R * N, ev.device)).view(GR, mp + 1, m + 1))
    return out


def padded_tree_sums(z: torch.Tensor, node_major: list[torch.Tensor], rows: list[torch.Tensor],
                     events: tuple[int, ...], offsets: tuple[int, ...], k: int, i_fbar: int, i_g: int, size: int,
                     group: torch.Tensor | None = None, groups: int = 1) -> list[dict]:
    """One batch's sums by the compiled kernels (:func:`examples_major`, then :func:`tree_sums`, each built and run
    by :func:`~smaso.student.compiled.run_compiled`), the batch padded to ``size`` rows so that one compilation
    serves every batch of at most that many: the shared body of the statistics accumulator's compiled sums and of
    the row groups' (:mod:`smaso.student.row_groups`).

    :param z: ``(N, regions)`` the batch's checked events, N <= ``size``; pad rows get each level's event M (one
        past its last), whose segments are dropped.
    :param node_major: the record's stacked buffers ``(R_l, k, n_l, N)`` of the d hidden levels, then, where fbar is
        not stacked (``i_fbar`` -1: BN after the gate), its node-major fbar ``(R_l, 1, n_l, N)`` per hidden level.
    :param rows: the caller's buffers ``(R_l, size, k' n_l)``, one per ``node_major`` entry (kept between batches:
        no fresh allocation per batch), written examples-major.
    :param group: ``(N,)`` each row's group in [0, ``groups``) (pad rows: group 0); None: one group.
    :returns: per level a dict, every tensor with the group axis first and its pad segments dropped (views):
        ``own`` ``(G, R_l, M_l, k n_l)`` (hidden levels; None at the leaves), at the root ``counts`` ``(G, R_0,
        M_0)`` float64, below it ``fc`` ``(G, R_l, M_{l-1}, n_l)`` and ``gp`` ``(G, R_l, M_l, n_{l-1})`` (None at
        the leaves) and ``pairs`` ``(G, R_l, M_{l-1}, M_l)`` float64.
    """
    d, N = len(events) - 1, z.shape[0]
    ev = z.to(torch.uint8).T
    if size > N:
        pad = torch.tensor([events[l] for l in range(d + 1) for _ in range(offsets[l + 1] - offsets[l])],
                           dtype=torch.uint8, device=z.device)
        ev = torch.cat([ev, pad[:, None].expand(-1, size - N)], 1)
        group = None if group is None else torch.cat([group, group.new_zeros(size - N)])
        node_major = [torch.cat([v, v.new_zeros((*v.shape[:-1], size - N))], -1) for v in node_major]
    else:  # (a row slice's strides would be another compilation)
        node_major = [v.contiguous() for v in node_major]
    run_compiled(examples_major, node_major, rows)
    fbar: list[torch.Tensor | None] = [None] * d if i_fbar >= 0 else list(rows[d:])
    res = iter(run_compiled(tree_sums, ev.contiguous(), rows[:d], fbar, events, offsets, k, i_fbar, i_g,
                            None if group is None else group.to(torch.int32), groups))
    out: list[dict] = []
    for l in range(d + 1):
        m, mp, r = events[l], events[l - 1], offsets[l + 1] - offsets[l]
        own = next(res).view(groups, r, m + 1, -1)[:, :, :m] if l < d else None
        if l == 0:
            out.append({"own": own, "counts": next(res).view(groups, r, m + 1)[..., :m]})
            continue
        fc, gp = (next(res).view(groups, r, mp + 1, -1)[:, :, :mp], next(res).view(groups, r, m + 1, -1)[:, :, :m]) \
            if l < d else (None, None)
        out.append({"own": own, "fc": fc, "gp": gp, "pairs": next(res).view(groups, r, mp + 1, m + 1)[:, :, :mp, :m]})
    return out
