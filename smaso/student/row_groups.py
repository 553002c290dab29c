"""The jackknife's row groups as an axis of one accumulation (issue 39): one batch's per-event sums of every row group
at once, added into the groups' :class:`~smaso.student.frequency.FrequencyAccumulator` s.

A batch whose groups are contiguous blocks of rows (:meth:`~smaso.student.frequency.ReplicateAccumulator.add`'s
``bounds``) is checked, converted and scattered into the levels' one-hot matrices once, not once per group; the
event counts and the (parent, child) pair counts of every group are one count each, the group being one more digit
of the count's flat index; each group's per-event sums are batched matmuls on column slices of the shared one-hot
matrices and of the record's node-major buffers (views, no copies).  What stays per group is what differs per group:
its matmuls (Delta W, the per-event and edge sums: one per level each, every child place of a parent at once) and
the weights' map of its edge sums (:meth:`~smaso.student.frequency.FrequencyAccumulator._add_derived`; in a streaming
pass's chunk task once per chunk, :class:`DeferredDerivation`).  The same sums as adding each group's
:func:`~smaso.student.mergeable.record_rows` to its accumulator, to the batch sums' round-off (the same sums in another
order; the counts exact): ``tests/test_row_groups.py``, ``tests/test_deferred_derivation.py``.

Where the groups' leaf kernel runs compiled (:class:`~smaso.student.leaf_kernels.GroupedLeafKernel`: a pass long
enough to repay a compilation, one-hot leaves), every group's counts, pair counts, per-event and edge sums come from
the compiled segment sums of :func:`~smaso.student.event_kernels.tree_sums` instead, the group one more digit of each
segment (:func:`_compiled_group_sums`): one pass over the record written examples-major, whose gated-gradient slot
is also what the leaves' Delta W reads, where the matmuls run once per group (``tests/test_grouped_leaf_kernel.py``:
equal to the eager sums to 1e-12 in float64).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch

from smaso import _ladder_parts
from smaso.student.batch_record import as_node_major
from smaso.student.connectivity import one_hot_tree_weight_grad
from smaso.student.event_kernels import MAX_EVENTS, padded_tree_sums
from smaso.student.mergeable import check_record_weights, event_counts, event_flags, tree_pair_index
from smaso.student.scratch import scratch_buffer, scratch_dict

if TYPE_CHECKING:
    from smaso.student.frequency import FrequencyAccumulator
    from smaso.student.leaf_kernels import GroupedLeafKernel
    from smaso.student.network import StudentRecord

__all__ = ["GROUPED_BATCHES", "DeferredDerivation", "add_row_groups", "grouped_batches", "groups_at_once",
           "settled"]


#: Batches of ``batch_size`` rows run together by :func:`grouped_batches` (the row groups' sums then cost a
#: quarter of the per-group calls per row; memory: this many batches' records).
GROUPED_BATCHES = 4


def grouped_batches(n: int, batch_size: int, groups: int) -> Iterator[tuple[torch.Tensor, list[int]]]:
    """The rows of a chunk of ``n`` rows as runs of :data:`GROUPED_BATCHES` batches of ``batch_size``, each run's
    rows reordered group by group: ``(rows, bounds)``, group g's rows (block g of each batch, the K blocks
    ``g N_b // K`` of :meth:`~smaso.student.frequency.ReplicateAccumulator.add`) at ``bounds[g]:bounds[g + 1]`` of
    ``rows``.  So every group holds the rows it holds batch by batch, in 1/GROUPED_BATCHES of the per-group calls."""
    step = batch_size * GROUPED_BATCHES
    for lo in range(0, n, step):
        starts = range(lo, min(lo + step, n), batch_size)
        cuts = [[s + g * (min(s + batch_size, n) - s) // groups for g in range(groups + 1)] for s in starts]
        rows = torch.cat([torch.arange(c[g], c[g + 1]) for g in range(groups) for c in cuts])
        sizes = [sum(c[g + 1] - c[g] for c in cuts) for g in range(groups)]
        yield rows, [sum(sizes[:g]) for g in range(groups + 1)]


def groups_at_once(acc: FrequencyAccumulator, rec: StudentRecord, fields: Sequence[str], max_events: int) -> bool:
    """Whether :func:`add_row_groups` takes this record into accumulators like ``acc``: a uniform tree on the
    student's fast path, every level's events at most ``max_events`` (one-hot matmuls), and the record's stacked
    buffers holding the first summed quantities (``fields``: each one's record field) in their order (elsewhere the
    groups are added one at a time)."""
    lad, k = acc.ladder, acc._num_stacked
    return (lad.is_uniform() and acc.student.fast_path and max(lad.events) <= max_events
            and rec.stacked is not None and rec.stacked_fields is not None
            and tuple(rec.stacked_fields) == tuple(fields[:k]))


def add_row_groups(parts: Sequence[FrequencyAccumulator], rec: StudentRecord, z: torch.Tensor,
                   bounds: Sequence[int], fields: Sequence[str], deferred: DeferredDerivation | None = None,
                   leaf_kernel: GroupedLeafKernel | None = None) -> None:
    """Add one batch's rows ``bounds[g]:bounds[g + 1]`` to ``parts[g]`` for every group g at once.

    :param parts: the groups' accumulators (one student, one dtype), on a uniform tree on the student's fast path with
        every level's events few enough for one-hot matmuls (:meth:`~smaso.student.frequency.ReplicateAccumulator.
        add` checks it, and the record's stacked buffers).
    :param rec: the batch's record ``(N, ...)``; ``z``: its events ``(N, total_regions)`` of the student's ladder
        (checked by the caller).
    :param bounds: ``len(parts) + 1`` non-decreasing row bounds from 0 to N (checked by the caller).
    :param fields: the record's field of each of the accumulators' ``summed`` quantities.
    :param deferred: None: map this batch's edge sums to its derived sums (U, Gf) now; else leave them pending there
        (:class:`DeferredDerivation`: mapped once from the sums of many batches).
    :param leaf_kernel: with one-hot leaves, how every group's Delta W of the level above them is summed (compiled or
        eager: :class:`~smaso.student.leaf_kernels.GroupedLeafKernel`); None: eager.
    """
    if deferred is not None:
        deferred.before(parts)
    acc = parts[0]
    st, lad = acc.student, acc.ladder
    check_record_weights(st, rec, any(acc._derived))
    d, off, R, M = lad.depth, lad.level_offsets, lad.num_regions, lad.events
    G, n_all = len(parts), z.shape[0]
    spans = [(g, lo, hi) for g, (lo, hi) in enumerate(itertools.pairwise(bounds)) if hi > lo]
    # the flat count indices gain the group as a digit: int64 where G times the widest level's bins overflow int32
    widest = max(R[l] * M[l] * (M[l - 1] if l else 1) for l in range(d + 1))
    idt = acc._index_dtype if G * widest < 2**31 else torch.int64
    z = z.to(acc.device, idt)
    bins = [z[:, off[l]: off[l + 1]] for l in range(d + 1)]
    flags = event_flags(bins, M, acc._sizes)  # (raises here on the CPU; on a device kept by every group with rows)
    for g, _, _ in spans:
        parts[g]._defer_event_check(flags)
    # each row's group as one more digit of the flat count indices: every group's counts in one count per level
    sizes = torch.tensor([b - a for a, b in itertools.pairwise(bounds)], device=acc.device)
    group = torch.repeat_interleave(torch.arange(G, device=acc.device, dtype=idt), sizes,
                                    output_size=n_all)[:, None]
    # with one-hot leaves and the leaf kernel compiled, every level's sums too, as segment sums with the group as a
    # digit (:func:`_compiled_group_sums`); else the scatter matrices, written whole from the levels' uint8 events
    # (regions, N) as FrequencyAccumulator.add does, for the groups' matmuls
    size = None if leaf_kernel is None or not acc.onehot_leaves else leaf_kernel.size(bins[d])
    pre = None if size is None else _compiled_group_sums(acc, rec, z, group[:, 0], G, size)
    if pre is None:  # the one-hot matmuls read node-major buffers
        rec = as_node_major(rec)
    # (compiled: only levels summing a quantity outside the stacked buffers, e.g. the root's Gf, need a matrix)
    built = [l for l in range(d + 1) if not (l == d and acc.onehot_leaves)
             and (pre is None or (l < d and any(i1 > acc._num_stacked for _, i1 in acc._plain_runs[l])))]
    one_hot: list[torch.Tensor | None] = [None] * (d + 1)
    if built:
        ev8 = z[:, :off[built[-1] + 1]].to(torch.uint8).T.contiguous()
        for l in built:
            one_hot[l] = acc._set_one_hot(l, ev8[off[l]: off[l + 1]])
    _add_level_sums(parts, rec, bins, one_hot, group, spans, fields, deferred is None, leaf_kernel, size, pre)
    for g, lo, hi in spans:
        parts[g].n += hi - lo
        parts[g]._add_loss(rec, hi - lo)  # the batch's mean loss for its rows, as record_rows keeps it
    if deferred is not None:
        deferred.added(parts)


def _compiled_group_sums(acc: FrequencyAccumulator, rec: StudentRecord, z: torch.Tensor, group: torch.Tensor,
                         groups: int, size: int) -> list[dict] | None:
    """Every group's counts, pair counts, per-event and edge sums of one batch from the compiled segment sums
    (:func:`~smaso.student.event_kernels.tree_sums` with the group as a digit: one pass over the record, where the
    eager path runs a one-hot matmul per group, level and run of quantities): per level a dict of ``own``
    ``(G, R_l, M_l, k n_l)`` (hidden levels), ``counts`` ``(G, R_0, M_0)`` (the root), ``fc`` ``(G, R_l, M_{l-1},
    n_l)``, ``gp`` ``(G, R_l, M_l, n_{l-1})`` (hidden levels below the root), ``pairs`` ``(G, R_l, M_{l-1}, M_l)``
    float64, views with the pad segments dropped, and at every hidden level its gated gradient as summed, padded
    (``g_rows`` ``(R, size, n)`` region-major, or ``g_batch`` ``(size, R, n)`` for a batch-major record: what the
    leaf kernel's Delta W reads at level d - 1); None where the record's stacked buffers lack fbar or g (eager).

    ``z`` ``(N, regions)`` the batch's checked events, ``group`` ``(N,)`` its rows' groups; the batch is padded to
    ``size`` rows (the compiled size, :meth:`~smaso.student.leaf_kernels.LeafKernel.size`) by
    :func:`~smaso.student.event_kernels.padded_tree_sums`, as the statistics accumulator's compiled sums are."""
    fields = rec.stacked_fields
    if rec.stacked is None or fields is None or "fbar" not in fields or "g" not in fields \
            or max(acc.ladder.events) > MAX_EVENTS:
        return None
    d = acc.ladder.depth
    stacked = list(rec.stacked[:d])
    batch = rec.stacked_layout == "batch"  # (summed as it is: no examples-major copy)
    rows = None if batch else [scratch_buffer(acc, f"group_rows{l}", (v.shape[0], size, v.shape[1] * v.shape[2]),
                                              acc.dtype, v.device) for l, v in enumerate(stacked)]
    return padded_tree_sums(z, stacked, rows, tuple(acc.ladder.events), tuple(acc.ladder.level_offsets),
                            len(fields), fields.index("fbar"), fields.index("g"), size, group, groups,
                            rec.stacked_layout)


def _add_level_sums(parts: Sequence[FrequencyAccumulator], rec: StudentRecord, bins: list[torch.Tensor],
                    one_hot: list, group: torch.Tensor, spans: list[tuple[int, int, int]],
                    fields: Sequence[str], derive: bool = True, leaf_kernel: GroupedLeafKernel | None = None,
                    size: int | None = None, pre: list[dict] | None = None) -> None:
    """The counts, pair counts, per-event sums, edge sums, Delta W and bias sums of every group (the body of
    :func:`add_row_groups`; the tree path of :meth:`FrequencyAccumulator._add_sums` with a group axis); ``size``:
    the leaf kernel's compiled size (None: eager), ``pre``: the compiled sums (:func:`_compiled_group_sums`), taken
    instead of the one-hot matmuls where given."""
    acc = parts[0]
    st, lad, dt = acc.student, acc.ladder, acc.dtype
    d, R, M, G = lad.depth, lad.num_regions, lad.events, len(parts)
    if rec.stacked is None:
        raise ValueError("rec: expected a record with stacked buffers (groups_at_once)")
    stacked = rec.stacked
    n_all = group.shape[0]
    branching = _ladder_parts.uniform_branching(lad)
    # node-major views: the children of parent r are regions r b .. r b + b - 1, so grouped by parent they are a view
    # ``(R_l, b n_{l+1}, N)``, and each group's Delta W of level l is one matmul on its columns (Eq 2)
    # (one-hot leaves: none; their Delta W is their events' one-hot matmul, built block by block in the caches)
    grouped: list[Any] = [None if l == d - 1 and acc.onehot_leaves
                          else rec.fbar[l + 1].permute(1, 2, 0).reshape(R[l], -1, n_all) for l in range(d)]
    grads = [rec.g[l].permute(1, 2, 0) for l in range(d)]  # (R_l, n_l, N)
    scratch = scratch_dict(acc)
    # above one-hot leaves every group's Delta W at once where compiled (a segment sum; None: eager)
    leaf_dw = None if grouped[d - 1] is not None or leaf_kernel is None or size is None \
        else leaf_kernel.weight_grads(size, bins[d], group[:, 0], grads[d - 1], M[d], G,
                                      grad_rows=None if pre is None else pre[d - 1].get("g_rows"),
                                      grad_batch=None if pre is None else pre[d - 1].get("g_batch"))

    def delta_w(l: int, g: int, lo: int, hi: int) -> torch.Tensor:
        """Level l's Delta W ``(E_l, n_{l+1}, n_l)`` (Eq 2) summed over group g's rows lo:hi (the sum, not the mean:
        the accumulators add sums)."""
        if grouped[l] is None:
            if leaf_dw is not None:
                return leaf_dw[g].view(acc.dW[l].shape)
            return one_hot_tree_weight_grad(acc.dW[l], grads[l][..., lo:hi], bins[d][lo:hi], M[d], scratch)
        return torch.bmm(grouped[l][..., lo:hi], grads[l][..., lo:hi].transpose(1, 2)).reshape(acc.dW[l].shape)

    dW = {g: [delta_w(l, g, lo, hi).to(dt) for l in range(d)] for g, lo, hi in spans}
    # each group's bias sums sum_n g (Eq 2) are its per-event sums of G added over the events (every row has one
    # event per region): an (R, M, n) sum instead of a pass over the batch's gradients (a matmul by the rows' group
    # indicator was 6% of the grouped pass)
    i_g = acc.summed.index("G")
    db: dict[int, list] = {g: [None] * d for g, _, _ in spans}
    cnt: list = [None] * (d + 1)  # (G, R_l, M_l) float64 counts of this batch
    cnt_dt: list = [None] * (d + 1)  # the same in the batch sums' dtype (the leaves' stay float64)
    for l in range(d + 1):
        if pre is not None and l == 0:
            cnt[l] = pre[0]["counts"]
            cnt_dt[l] = cnt[l].to(dt)
        elif one_hot[l] is not None or l == 0:
            code = bins[l] + torch.arange(R[l], device=acc.device, dtype=bins[l].dtype) * M[l] + group * (R[l] * M[l])
            cnt[l] = event_counts(code, G * R[l] * M[l]).view(G, R[l], M[l])
            cnt_dt[l] = cnt[l].to(dt) if l < d else cnt[l]
        if l < d:
            w = st.widths[l]
            buf = stacked[l]  # (R, k, n, N): the summed quantities' slots side by side
            for i0, i1 in acc._plain_runs[l]:  # (no BN here: every run but the derived quantities summed)
                if pre is not None and i1 <= acc._num_stacked:
                    cols = None  # (summed by the compiled kernels)
                elif i1 <= acc._num_stacked:  # (a view: the slots of a region are contiguous)
                    cols = buf[:, i0:i1].reshape(R[l], -1, n_all)
                else:  # quantities outside the stacked buffer: the record's own tensors, node-major
                    cols = torch.cat([getattr(rec, f)[l] for f in fields[i0:i1]], -1).permute(1, 2, 0)
                for g, lo, hi in spans:
                    sums = cast(list, pre)[l]["own"][g, ..., i0 * w: i1 * w] if cols is None \
                        else torch.bmm(one_hot[l][..., lo:hi], cols[..., lo:hi].transpose(1, 2).to(dt))
                    parts[g].own[l][..., i0 * w: i1 * w] += sums
                    if i0 <= i_g < i1:
                        db[g][l] = sums[..., (i_g - i0) * w: (i_g - i0 + 1) * w].sum(1)  # (R_l, n_l)
        elif not acc.onehot_leaves:  # the leaves' sums are E[x | z]'s
            leaves = rec.fbar[l].transpose(0, 1).to(dt)  # (R_d, N, dim)
            for g, lo, hi in spans:
                parts[g].own[l] += torch.bmm(one_hot[l][..., lo:hi], leaves[:, lo:hi])
        if l == 0:
            continue
        m, mp, Rp, b = M[l], M[l - 1], R[l - 1], branching[l - 1]
        E = R[l]  # a tree: one edge per child region
        edge_base = _ladder_parts.at_level(acc._edge_base, l, "edge_base")
        if pre is not None:
            pairs = pre[l]["pairs"]
            cnt[l] = pairs.sum(2)
            cnt_dt[l] = cnt[l].to(dt) if l < d else cnt[l]
        else:
            pair = tree_pair_index(bins[l - 1], bins[l], m, edge_base) \
                + group[:, :, None] * (E * mp * m)
            pairs = event_counts(pair, G * E * mp * m).view(G, E, mp, m)
        if cnt[l] is None:  # the leaves without a scatter matrix: the margins of their pairs
            cnt[l] = cnt_dt[l] = pairs.sum(2)
        onehot_leaf = l == d and acc.onehot_leaves
        if not onehot_leaf and pre is None:
            children, g_par = grouped[l - 1], grads[l - 1]
            oh_children = one_hot[l].reshape(Rp, b * m, n_all)  # grouped by parent region (a view)
        for g, lo, hi in spans:
            part = parts[g]
            _ladder_parts.at_level(part.joint_counts, l, "joint_counts").add_(pairs[g])
            if onehot_leaf:
                # x = one-hot(z): sum_n [z_c = k] g_parent = n Delta W[e, k, :] exactly
                gp, fc = dW[g][l - 1], None
            elif pre is not None:
                gp, fc = pre[l]["gp"][g], pre[l]["fc"][g]
                _ladder_parts.at_level(part.fc, l, "fc").add_(fc)
            else:
                gp = torch.bmm(oh_children[..., lo:hi], g_par[..., lo:hi].transpose(1, 2).to(dt)).reshape(E, m, -1)
                # every child place of a parent in one matmul: (R_{l-1}, M_{l-1}, b n_l), children then split out
                fc = torch.bmm(one_hot[l - 1][..., lo:hi], children[..., lo:hi].transpose(1, 2).to(dt))
                fc = fc.view(Rp, mp, b, -1).transpose(1, 2).reshape(E, mp, -1)
                _ladder_parts.at_level(part.fc, l, "fc").add_(fc)
            _ladder_parts.at_level(part.gp, l, "gp").add_(gp)
            if derive:  # (the derived sums read the parents' counts in the batch sums' dtype, as the one-group path)
                part._add_derived(l, pairs[g] if fc is None else fc, gp, [None if c is None else c[g] for c in cnt_dt])
    for g, _, _ in spans:
        part = parts[g]
        for l in range(d + 1):
            part.counts[l] += cnt[l][g]
        for l in range(d):
            part.dW[l] += dW[g][l]
            part.db[l] += db[g][l]


class DeferredDerivation:
    """The derived sums (U, Gf: linear maps of the edge sums by the weights, Eq 1;
    :meth:`~smaso.student.frequency.FrequencyAccumulator._add_derived`) of row groups' accumulators mapped once from
    the edge sums of many batches instead of once per group per batch (the map's ~10 torch calls per group and level
    were 5% of a grouped float32 pass): the same linear map of the same sums, each rounded once to the batch sums'
    dtype instead of batch by batch (float32 round-off; float64 passes do not defer).

    What is pending is what the totals gained since the last :meth:`settle` (a snapshot of the edge sums and counts,
    taken by :meth:`before` the next deferred batch; none while every total is still zero, a fresh accumulator's case):
    :meth:`before` and :meth:`added` around each deferred batch, :meth:`settle` before the sums are read or merged or
    a batch derives its own.  The weights must not change while sums are pending (checked at :meth:`settle`, as
    :func:`~smaso.student.mergeable.check_record_weights` checks a record).
    """

    def __init__(self) -> None:
        self._base: list[dict] | None = None  # the parts' edge sums and counts when last settled (None: zeros)
        self._stale = False  # the totals changed without a snapshot: take one before the next deferred batch
        self._version: object = None  # the weights' version of the pending batches; None: nothing pending

    @staticmethod
    def _edge_sums(part: FrequencyAccumulator) -> dict:
        return {"fc": part.fc, "gp": part.gp, "joint_counts": part.joint_counts, "counts": part.counts}

    def before(self, parts: Sequence[FrequencyAccumulator]) -> None:
        """Before a deferred batch is added to ``parts``: the snapshot of their sums, if they changed since settled."""
        if self._stale and self._version is None:
            self._base = [{k: [None if t is None else t.clone() for t in v] for k, v in self._edge_sums(p).items()}
                          for p in parts]
            self._stale = False

    def added(self, parts: Sequence[FrequencyAccumulator]) -> None:
        """After a deferred batch was added to ``parts``: the weights' version its pending sums need."""
        self._version = parts[0].student.params_version()

    def settle(self, parts: Sequence[FrequencyAccumulator]) -> None:
        """Add the pending derived sums to ``parts``: call before their sums are read, merged, or added to by a batch
        that derives its own (their totals may change after it: the next deferred batch snapshots them first)."""
        if self._version is None:
            self._stale = True
            return
        st = parts[0].student
        if st.params_version() != self._version:
            raise ValueError("the student's weights changed while row groups' sums were pending (an update between "
                             "add and reading the sums); read them before updating the weights")
        d = parts[0].ladder.depth
        for i, part in enumerate(parts):
            now = self._edge_sums(part)
            base = None if self._base is None else self._base[i]
            pending = {k: [t if t is None or base is None else t - base[k][l] for l, t in enumerate(v)]
                       for k, v in now.items()}
            for l in range(1, d + 1):
                fc = pending["joint_counts" if l == d and part.onehot_leaves else "fc"][l]
                part._add_derived(l, fc, pending["gp"][l], pending["counts"])
        self._version = None
        self._stale = True


def settled(deferred: DeferredDerivation | None,
            parts: list[FrequencyAccumulator]) -> list[FrequencyAccumulator]:
    """``parts``, their pending derived sums added where ``deferred`` holds some (:meth:`DeferredDerivation.settle`):
    what a replicate accumulator reads, merges into, or adds a self-deriving batch to."""
    if deferred is not None:
        deferred.settle(parts)
    return parts
