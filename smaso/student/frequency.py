"""Frequency statistics: the student's activations, gates and gradients averaged per teacher event.

For every region alpha (level l) and node j of its group, over the examples of a dataset (framework paper Eq 6):
F, Fbar, D, Dp, G, G~, U, Gf per event of the region, and per parent-child edge e
(:func:`~teachers.statistics.level_edges` order: on a tree one per child region) Fc and Gp~ (the table:
``docs/theory.md`` §1.4).  On any ladder: event axes padded to the level's largest count M_l, as in
:mod:`teachers.statistics` (a region's events a >= m_r never occur, their counts and rows are 0).

All are per-event sums accumulated by one scatter per level and batch (a batched matmul with the events'
one-hot matrix, ~10x faster on CPU than ``index_add_``; ``index_add_`` for regions with more than 256 events),
so they stream over batches, in the student's dtype or float64.  U, and Gf at a level without BN, are not summed
per example: they are linear in the same batch's edge sums (Eq 1: u = sum_e W_e^T fbar_child + b and
g_f = g_raw = sum_e W_e g_parent), so each batch maps its Fc and Gp~ sums through the weights instead
(:meth:`FrequencyAccumulator._derivable`; equal to the per-example sums to round-off, tested); at a level with BN
after the gate, Fbar and Gf are BN's affine maps of the batch applied to the F sums and the raw gradient's
(:mod:`smaso.student.bn_sums`).  Events never
observed are reported in ``empty_events`` and their rows are zero, never 0/0.  ``dW`` is the measured
E_x[fbar_b g_a] per edge.

:class:`ReplicateAccumulator` keeps K such accumulators over row groups of the same batches, for the
jackknife's noise floors (:mod:`smaso.student.noise`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from smaso import _ladder_parts
from smaso.student.batch_record import as_node_major
from smaso.student.batch_sums import _ONE_HOT_MAX_EVENTS, _RECORD, TOTAL_DTYPE, BatchSums, _runs, scatter_sums
from smaso.student.batch_sums import _one_hot_events as _one_hot_events  # (re-exported: probe, alignment, members)
from smaso.student.compiled import check_expected_rows, check_kernel
from smaso.student.event_means import FrequencyStatistics, PerEventMeans
from smaso.student.leaf_kernels import GroupedLeafKernel
from smaso.student.mergeable import (
    MergeableSums,
    check_record_delta_w,
    check_record_weights,
    event_flags,
    negated_state,
    record_rows,
    with_leaves,
)
from smaso.student.network import LadderStudent, StudentRecord, _check_float_dtype, _check_student
from smaso.student.row_groups import DeferredDerivation, add_row_groups, grouped_batches, groups_at_once, settled
from smaso.student.rows import evaluation_inputs, leaf_event_inputs
from teachers.statistics import EventStatistics

if TYPE_CHECKING:
    from teachers.chunked import DataSource, _SampleChunks
    from teachers.engine import DaskEngine, SerialEngine
    from teachers.store_reader import ChunkedLadderData

__all__ = ["DEFAULT_GROUPS", "FrequencyAccumulator", "FrequencyStatistics", "MergeableSums", "PerEventMeans",
           "ReplicateAccumulator", "accumulate_statistics", "collect_statistics", "negated_state", "record_rows",
           "scatter_sums"]

#: Row groups of the jackknife by default (the standard error's own relative error is about
#: 1 / sqrt(2 (K - 1)) = 24%).
DEFAULT_GROUPS = 10


def _student_events(student: LadderStudent, z: torch.Tensor, rec: StudentRecord | None = None) -> torch.Tensor:
    """``z`` as the events of the student's ladder (:meth:`~LadderStudent.ladder_events`), refused unless it holds
    ``(N, total_regions)`` of them (with ``rec``: one row per example of that batch's record)."""
    z, lad = student.ladder_events(z), student.ladder
    if not isinstance(z, torch.Tensor) or z.dim() != 2 or z.shape[1] != lad.total_regions:
        raise ValueError(f"z: expected the (N, {lad.total_regions}) events of every region of the student's "
                         f"ladder, got {tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__}")
    if rec is not None and rec.fbar[0].shape[0] != z.shape[0]:
        raise ValueError(f"z: {z.shape[0]} rows for a record of {rec.fbar[0].shape[0]} examples")
    return z



class FrequencyAccumulator(BatchSums, MergeableSums):
    """Streams :class:`StudentRecord` batches into the per-event sums of the module docstring, on any ladder.

    Per batch and level one batched matmul of the events' one-hot matrix with each run of stacked quantities that
    are summed (those that coincide summed once; U and, without BN, Gf mapped from the batch's edge sums by the
    weights instead), per edge one count (``index_add_``) of (parent, child) event pairs; with one-hot leaves
    the leaf sums follow exactly from the counts and Delta W.  The weights are read when a batch is added: add
    batches of one fixed student (the sums describe that student).

    Precision contract: each batch is summed in ``dtype`` and added into float64 totals
    (:data:`TOTAL_DTYPE`), so only one batch's sums are rounded to ``dtype``, never the running total of N
    rows.  With a float32 student and float32 batch sums (the default), the statistics and every error of
    the comparison agree with float64 batch sums of the same student to 1e-6 relative
    (``tests/test_frequency.py``); float64 batch sums give the exact path.

    :param student: the student (gives the ladder, the edges and the widths).
    :param dtype: the batch sums' dtype (default: the student's; float64 for exact sums).
    :param kernel: ``"eager"`` (one-hot batched matmuls), ``"compiled"`` (on a uniform tree with one-hot leaves and a
        stacked record: the sums, counts and pair counts as compiled segment sums, :mod:`smaso.student.event_kernels`;
        elsewhere, and off the CPU or without a C++ compiler, eager) or ``"auto"`` (compiled from
        :data:`~smaso.student.batch_sums.AUTO_ROWS` ``expected_rows`` on, else eager).  Compiled and eager sums
        agree to the batch dtype's round-off (the order of a sum differs); a compiled accumulator takes every batch
        at its first batch's size (shorter ones padded; longer ones run eager).
    :param expected_rows: how many rows the caller will add (``"auto"``'s judgement; None: unknown, eager).
    """

    _SUMS = ("counts", "joint_counts", "own", "fc", "gp", "dW", "db")
    # per level; index 0 None in the edge sums (the root has no parent edge), _sizes None where a level's regions
    # share one event count
    joint_counts: list[torch.Tensor | None]
    fc: list[torch.Tensor | None]
    gp: list[torch.Tensor | None]
    _edge_base: list[torch.Tensor | None]
    _sizes: list[torch.Tensor | None]

    def __init__(self, student: LadderStudent, dtype: torch.dtype | None = None, *, kernel: str = "auto",
                 expected_rows: int | None = None) -> None:
        _check_student(student)
        dtype = _check_float_dtype(dtype or student.weights[0].dtype)
        self.student, self.ladder, self.dtype = student, student.ladder, dtype
        lad, n = self.ladder, student.widths
        dev = self.device = student.weights[0].device
        d, M, R = lad.depth, lad.events, lad.num_regions
        E = [student.num_edges(l) for l in range(lad.depth)]
        # which of _RECORD's quantities are summed (the others are copies of one of them): the stacked fields', in
        # their order (a run of them is a run of stacked slots), then Fbar, U and Gf where not stacked (at the hidden
        # levels mapped from the edge sums or BN's maps; the top level's summed from the record's own tensors)
        stacked_keys = [k for k in _RECORD if _RECORD[k] in student.stacked_fields()]
        self._num_stacked = len(stacked_keys)
        self.summed = stacked_keys + [k for k in ("Fbar", "U", "Gf") if k not in stacked_keys]
        self.onehot_leaves = lad.emission.kind == "onehot"
        self.counts = [torch.zeros(R[l], M[l], dtype=torch.float64, device=dev) for l in range(d + 1)]
        self.joint_counts = [None] + [torch.zeros(E[l - 1], M[l - 1], M[l], dtype=torch.float64, device=dev)
                                      for l in range(1, d + 1)]
        width = [len(self.summed) * n[l] for l in range(d)] + [n[d]]
        # each batch is summed in ``dtype`` (the fast matmuls) and added into float64 totals: the rounding of
        # one batch's sums, not of N rows' (the precision contract of the class docstring)
        tot = TOTAL_DTYPE
        self.own = [torch.zeros(R[l], M[l], width[l], dtype=tot, device=dev) for l in range(d + 1)]
        self.fc = [None] + [torch.zeros(E[l - 1], M[l - 1], n[l], dtype=tot, device=dev) for l in range(1, d + 1)]
        self.gp = [None] + [torch.zeros(E[l - 1], M[l], n[l - 1], dtype=tot, device=dev) for l in range(1, d + 1)]
        self.dW = [torch.zeros(E[l], n[l + 1], n[l], dtype=tot, device=dev) for l in range(d)]
        self.db = [torch.zeros(R[l], n[l], dtype=tot, device=dev) for l in range(d)]
        self.n = 0
        self.loss_sum = 0.0
        # flat count index of the (parent, child) event pair of edge e: (e M_p + a_p) M + a.  int32 (half the
        # memory traffic of int64, and the leaf level's index arithmetic is a large part of a batch's cost)
        # unless a level has 2^31 bins or more
        bins = max(E[l - 1] * M[l] * M[l - 1] if l else R[0] * M[0] for l in range(d + 1))
        self._index_dtype = torch.int32 if bins < 2**31 else torch.int64
        idt = self._index_dtype
        self._edge_base = [None] + [torch.arange(E[l - 1], device=dev, dtype=idt) * (M[l - 1] * M[l])
                                    for l in range(1, d + 1)]
        # per region where a level's event counts differ (the events a check needs), else None
        self._sizes = [None if lad.is_uniform() or len(set(lad.region_events[l])) == 1
                       else torch.tensor(lad.region_events[l], device=dev) for l in range(d + 1)]
        self._one_hot_buffers: dict[tuple[int, int], torch.Tensor] = {}
        self._event_values: dict[int, torch.Tensor] = {}  # per event count M: the values 0..M-1, (M, 1) uint8
        # the quantities of level l < d that follow from the edge sums by the weights rather than being summed
        # (_add_derived), and the runs [i0, i1) of the others' indices in self.summed (stacked slots)
        self._derived = [self._derivable(l) for l in range(d)]
        # at a level with BN after the gate, Fbar and Gf through BN's affine maps of the batch (bn_sums) from the F
        # sums and the raw gradient's (by the edge weights, as Gf without BN), where the record holds BN's mean
        self._bn_derived = [("Fbar", "Gf") if student.bn_placement == "after" and student.bn_params(l) is not None
                            and {"Fbar", "F", "Gf"} <= set(self.summed) else () for l in range(d)]
        self._direct_runs = [_runs([i for i, k in enumerate(self.summed) if k not in self._derived[l]
                                    + self._bn_derived[l]]) for l in range(d)]
        self._plain_runs = [_runs([i for i, k in enumerate(self.summed) if k not in self._derived[l]])
                            for l in range(d)]  # (a record without BN's mean: Fbar and Gf summed per example)
        self._init_kernel(kernel, expected_rows)

    def record_layout(self, grouped: bool = False) -> str:
        """The layout of the records this accumulator sums without a copy (``forward_backward``'s ``layout``):
        ``"batch"`` where its compiled kernels run (:mod:`~smaso.student.batch_record`), else ``"node"``; any record
        is taken (a batch-major one copied node-major where the eager sums read it).  ``grouped``: unused here (the
        signature of :meth:`ReplicateAccumulator.record_layout`)."""
        return "batch" if self._kernel_on else "node"

    def add(self, rec: StudentRecord, z: torch.Tensor, rows: slice | None = None) -> None:
        """Add one batch: ``rec`` from ``student.forward_backward`` and its events ``z`` ``(N, total_regions)``.

        :param rows: add only these rows of the batch (a ``slice`` with step 1; see :func:`record_rows`):
            how :class:`ReplicateAccumulator` splits a batch into groups without changing BN's batch statistics.
        """
        lad, dt = self.ladder, self.dtype
        z = _student_events(self.student, z, rec)
        check_record_weights(self.student, rec, any(self._derived))  # (U and Gf read the weights now)
        if rows is not None or not self.onehot_leaves:  # (one-hot leaves' sums follow from the counts and Delta W)
            rec = with_leaves(rec, z, self.student)
        if rows is not None:  # (Delta W recomputed from the rows)
            edges = None if lad.is_uniform() else [self.student.edge_index(l) for l in range(lad.depth)]
            rec, z = record_rows(rec, rows, edges), z[rows]
        check_record_delta_w(rec, lad.depth)
        d, off = lad.depth, lad.level_offsets
        n = z.shape[0]
        z = z.to(self.device, self._index_dtype)
        bins = [z[:, off[l]: off[l + 1]] for l in range(d + 1)]  # events, for the count index arithmetic
        # on the CPU a bad batch raises here; on a device the check is read back once, when the sums leave it
        self._defer_event_check(event_flags(bins, lad.events, self._sizes))
        small = [lad.events[l] <= _ONE_HOT_MAX_EVENTS for l in range(d + 1)]
        stacked = rec.stacked is not None and rec.stacked_fields is not None \
            and tuple(rec.stacked_fields) == tuple(_RECORD[k] for k in self.summed[:self._num_stacked])
        # int64 events where torch needs them (scatter indices); not the one-hot leaves, the widest level
        levels = [None if l == d and self.onehot_leaves else ev.long() for l, ev in enumerate(bins)]
        # levels[l] is None exactly at the one-hot leaves
        pre = self._compiled_sums(rec, z, n) if stacked else None  # (kernel="compiled": module batch_sums)
        if pre is None:  # the one-hot matmuls read node-major buffers
            rec = as_node_major(rec)
        built = [l for l, lev in enumerate(levels) if small[l] and lev is not None and pre is None]
        one_hot: list[torch.Tensor | None] = [None] * (d + 1)
        if built:
            # the scatter matrices' levels as one uint8 (regions, N) block (events < 256 there): comparing bytes
            # writes a whole matrix ~4x faster than setting its ones and resetting them after the batch
            top = off[built[-1] + 1]
            ev8 = z[:, :top].to(torch.uint8).T.contiguous()
            for l in built:
                one_hot[l] = self._set_one_hot(l, ev8[off[l]: off[l + 1]])
        self._add_sums(rec, levels, bins, one_hot, small, stacked, n, pre)
        for l in range(d):
            self.dW[l] += rec.dW[l].to(dt) * n
            self.db[l] += rec.db[l].to(dt) * n
        self.n += n
        self._add_loss(rec, n)  # on the device: read back once, by result or state_dict

    def result(self) -> FrequencyStatistics:
        """Normalize the sums into :class:`FrequencyStatistics` (on the CPU).

        :raises ValueError: no examples; or events added on another device than the CPU were out of range.
        """
        self._raise_event_flags()
        if self.n == 0:
            raise ValueError("no examples were added")
        lad, widths = self.ladder, self.student.widths
        d = lad.depth
        counts = [c.cpu() for c in self.counts]
        joints: list[torch.Tensor | None] = [None] + [
            _ladder_parts.at_level(self.joint_counts, l, "joint_counts").cpu() / self.n for l in range(1, d + 1)]
        P = EventStatistics(lad, [c / self.n for c in counts], joints, self.n)
        means: dict[str, list] = {k: [None] * (d + 1) for k in _RECORD}
        for l in range(d + 1):
            if l == d and self.onehot_leaves:  # x = one-hot(z): E[x | z] is the identity on the events seen
                eye = torch.eye(lad.events[d], dtype=TOTAL_DTYPE)
                means["Fbar"][l] = eye * (counts[l] > 0)[..., None]
                continue
            mean = self.own[l].cpu() / counts[l].clamp(min=1)[..., None]  # empty events: rows stay 0
            if l == d:
                means["Fbar"][l] = mean
                continue
            for i, key in enumerate(self.summed):
                means[key][l] = mean[..., i * widths[l]: (i + 1) * widths[l]]
            if means["F"][l] is None:
                means["F"][l] = means["Fbar"][l]
            if means["Dp"][l] is None:
                means["Dp"][l] = means["D"][l]
        fc, gp = [None] * (d + 1), [None] * (d + 1)  # type: list, list
        for l in range(1, d + 1):
            if l == d and self.onehot_leaves:
                # E[one-hot(z_c) | z_parent] = P(z_c | z_parent)
                fc[l] = _ladder_parts.at_level(P.P_down, l, "P_down").to(TOTAL_DTYPE)
            else:
                parent_counts = counts[l - 1].index_select(0, self.student.edge_index(l - 1)[0].cpu())  # (E, M_p)
                fc[l] = _ladder_parts.at_level(self.fc, l, "fc").cpu() / parent_counts.clamp(min=1)[..., None]
            gp[l] = _ladder_parts.at_level(self.gp, l, "gp").cpu() / self.n  # P(z_b) E[g | z_b] = sum / N
        return FrequencyStatistics(lad, self.n, counts, means, fc, gp,
                                   [w.cpu() / self.n for w in self.dW], [b.cpu() / self.n for b in self.db],
                                   P, self.loss_sum / self.n)


class ReplicateAccumulator:
    """``groups`` :class:`FrequencyAccumulator` s over disjoint row groups of the same batches.

    Each batch's rows are cut into ``groups`` contiguous blocks of (nearly) equal size, block g going
    to group g (:func:`record_rows`: BN's batch statistics are untouched); :meth:`result` is the statistics of
    every row, :meth:`leave_one_out` the jackknife's (:mod:`smaso.student.noise`).  States merge like the
    accumulator's own (:meth:`state_dict`, :meth:`merge_`).

    :param student: the student; ``dtype``: accumulation dtype (float64 for floors that do not
        suffer from cancellation in ``total - group``).
    :param groups: K >= 2.  ``kernel``, ``expected_rows``: how the groups' Delta W above one-hot leaves is summed
        (:class:`~smaso.student.leaf_kernels.GroupedLeafKernel`, from the rows the caller will add).
    :ivar parts: the K group accumulators.
    """

    _deferred: DeferredDerivation | None = None  # (a pass's chunk task: U and Gf mapped once from the chunk's sums)

    def __init__(self, student: LadderStudent, dtype: torch.dtype | None = None, groups: int = DEFAULT_GROUPS, *,
                 kernel: str = "auto", expected_rows: int | None = None) -> None:
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 2:
            raise ValueError(f"groups: expected an integer >= 2 (row groups of the jackknife), got {groups!r}")
        check_expected_rows(expected_rows)
        self.student, self.groups = student, groups
        self.parts = [FrequencyAccumulator(student, dtype) for _ in range(groups)]
        leaf_edges = student.num_edges(student.ladder.depth - 1) * (expected_rows or 0)  # (0: unknown, eager)
        self._leaf_kernel = GroupedLeafKernel(kernel, leaf_edges if expected_rows is not None else None)

    @property
    def n(self) -> int:
        """Examples added so far."""
        return sum(p.n for p in self.parts)

    def record_layout(self, grouped: bool = True) -> str:
        """The layout of the records this accumulator sums without a copy (``forward_backward``'s ``layout``):
        ``"batch"`` for batches added with ``bounds`` (``grouped``) where every group's sums run compiled (a uniform
        tree on the student's fast path, one-hot leaves, at most :data:`~smaso.student.event_kernels.MAX_EVENTS`
        events per level and a compiled leaf kernel: :func:`~smaso.student.row_groups.add_row_groups`), else
        ``"node"``."""
        part = self.parts[0]
        return "batch" if grouped and part._kernels_fit() and self._leaf_kernel.compiles(part.device) else "node"

    def add(self, rec: StudentRecord, z: torch.Tensor, bounds: list[int] | None = None) -> None:
        """Add one batch (as :meth:`FrequencyAccumulator.add`), its rows split over the groups.

        A batch of fewer rows than groups feeds its rows to groups 0, 1, ... (one each).

        :param bounds: the groups' rows, group g's being ``bounds[g]:bounds[g + 1]`` (``groups + 1`` non-decreasing
            integers from 0 to the batch's rows; on a tree every group at once, the groups an axis of one
            accumulation (:func:`~smaso.student.row_groups.add_row_groups`), elsewhere each group's Delta W by strided
            matmuls (:func:`record_rows`'s ``strided``): equal to the record dtype's round-off); None: the K blocks
            ``g N // K`` of the batch (bit for bit the sums of its rows added one group at a time).
        """
        n = z.shape[0]
        if bounds is None:
            bounds = [g * n // self.groups for g in range(self.groups + 1)]
            for part, lo, hi in zip(settled(self._deferred, self.parts), bounds[:-1], bounds[1:], strict=True):
                if hi > lo:
                    part.add(rec, z, rows=slice(lo, hi))
            return
        if len(bounds) != self.groups + 1 or bounds[0] != 0 or bounds[-1] != n \
                or any(b > a for a, b in zip(bounds[1:], bounds[:-1], strict=True)):
            raise ValueError(f"bounds: expected {self.groups + 1} non-decreasing row bounds from 0 to {n}, got "
                             f"{bounds!r}")
        # (the regrouped batches of a pass below float64: each group's Delta W by strided matmuls, within round-off;
        # on a tree every group's sums at once, the groups an axis of one accumulation)
        fields = [_RECORD[k] for k in self.parts[0].summed]
        if groups_at_once(self.parts[0], rec, fields, _ONE_HOT_MAX_EVENTS):
            events = _student_events(self.student, z, rec)
            add_row_groups(self.parts, rec, events, bounds, fields, self._deferred, self._leaf_kernel)
            return
        strided = self.student.ladder.is_uniform() and self.student.fast_path
        rec = with_leaves(rec, _student_events(self.student, z, rec), self.student)
        edges = None if self.student.ladder.is_uniform() else [self.student.edge_index(l)
                                                                for l in range(self.student.ladder.depth)]
        for part, lo, hi in zip(settled(self._deferred, self.parts), bounds[:-1], bounds[1:], strict=True):
            if hi > lo:
                part.add(record_rows(rec, slice(lo, hi), edges, strided=strided), z[lo:hi])

    def state_dict(self) -> dict:
        """``{"groups": [state of group 0, ...]}`` (see :meth:`FrequencyAccumulator.state_dict`)."""
        return {"groups": [p.state_dict() for p in settled(self._deferred, self.parts)]}

    def merge_(self, other: ReplicateAccumulator | dict) -> ReplicateAccumulator:
        """Add another replicate state group by group, in place; returns self."""
        state = other.state_dict() if isinstance(other, ReplicateAccumulator) else other
        if not isinstance(state, dict) or len(state.get("groups", ())) != self.groups:
            raise ValueError(f"other: expected the state of a ReplicateAccumulator with {self.groups} groups")
        for part, st in zip(settled(self._deferred, self.parts), state["groups"], strict=True):
            part.merge_(st)
        return self

    __iadd__ = merge_

    def total(self) -> FrequencyAccumulator:
        """One accumulator holding every group's rows."""
        out = FrequencyAccumulator(self.student, self.parts[0].dtype)
        for p in settled(self._deferred, self.parts):
            out.merge_(p)
        return out

    def result(self) -> FrequencyStatistics:
        """The statistics of every row (:meth:`FrequencyAccumulator.result` of :meth:`total`), carrying this
        accumulator as their ``jackknife`` (their :meth:`~FrequencyStatistics.leave_one_out` reads it, so rows
        added here afterwards change the replicates, not the statistics)."""
        stats = self.total().result()
        stats.jackknife = self
        return stats

    def leave_one_out(self) -> Iterator[FrequencyStatistics]:
        """The K statistics with one group left out, in group order (groups with no rows skipped)."""
        total = self.total().state_dict()
        for part in self.parts:
            if part.n == 0:
                continue
            rest = FrequencyAccumulator(self.student, part.dtype)
            rest.merge_(total)
            rest.merge_(negated_state(part.state_dict()))
            if rest.n > 0:
                yield rest.result()


def _check_batch_size(batch_size: object) -> int:
    """``batch_size`` if it is a positive integer, else a ValueError naming it."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive integer, got {batch_size!r}")
    return batch_size


def _student_chunks(student: LadderStudent, source: DataSource) -> ChunkedLadderData | _SampleChunks:
    """``source`` as chunks (:func:`~teachers.chunked.as_chunks`), refused unless it is a dataset of the
    student's teacher ladder: the check of every streaming pass of a fixed student."""
    from teachers.chunked import as_chunks

    chunks = as_chunks(source)
    if chunks.ladder is not student.teacher and chunks.ladder.fingerprint() != student.teacher.fingerprint():
        raise ValueError("source: the dataset's ladder is not the student's")
    return chunks


def _check_groups(groups: object) -> None:
    if groups is not None and (isinstance(groups, bool) or not isinstance(groups, int) or groups < 2):
        raise ValueError(f"groups: expected an integer >= 2, got {groups!r}")


def collect_statistics(student: LadderStudent, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, *,
                       loss: str = "squared", batch_size: int | None = None,
                       dtype: torch.dtype | None = None, groups: int | None = None,
                       kernel: str = "auto") -> FrequencyStatistics:
    """One pass over a dataset at fixed weights: forward, explicit backward, per-event sums.

    :param x: ``(N, R_d, dim)`` inputs; ``y``: ``(N,)`` labels; ``z``: ``(N, regions)`` events.
    :param batch_size: examples per batch (default: all at once, i.e. full-batch GD and BN
        statistics of the whole set, which is what the reformulation describes).  Without BN the result does
        not depend on it beyond round-off.
    :param dtype: accumulation dtype (default: the student's; pass float64 for exact sums).
    :param groups: ``K`` >= 2: also keep K row groups (every batch cut into K blocks) for the jackknife, so that
        the result's :meth:`~FrequencyStatistics.leave_one_out` gives the K leave-one-group-out statistics.
    :param kernel: the batch sums' kernels (:class:`FrequencyAccumulator`): ``"auto"`` compiles from
        :data:`~smaso.student.batch_sums.AUTO_ROWS` rows on; with ``groups``, the groups' Delta W above one-hot leaves
        (:class:`~smaso.student.leaf_kernels.GroupedLeafKernel`) from :data:`~smaso.student.leaf_kernels.
        AUTO_EDGE_ROWS` (row, leaf edge) pairs on.
    :returns: the :class:`FrequencyStatistics` of every row, with or without ``groups`` (one return type).
    """
    _check_student(student)
    check_kernel(kernel)
    z = _student_events(student, z)
    if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
        raise ValueError("x, y: expected tensors")
    if not (x.shape[0] == y.shape[0] == z.shape[0]):
        raise ValueError(f"x, y, z: expected the same number of examples, got {x.shape[0]}, {y.shape[0]}, {z.shape[0]}")
    if x.shape[0] == 0:
        raise ValueError("x: the dataset is empty")
    _check_groups(groups)
    bs = x.shape[0] if batch_size is None else _check_batch_size(batch_size)
    acc = _accumulator(student, dtype, groups, kernel, x.shape[0])
    _check_label_range(student, y, loss)
    _run_batches(student, ((x[s: s + bs], y[s: s + bs], z[s: s + bs]) for s in range(0, x.shape[0], bs)), loss,
                 acc.add, layout=acc.record_layout(grouped=False))
    return acc.result()


def _accumulator(student: LadderStudent, dtype: torch.dtype | None, groups: int | None, kernel: str = "auto",
                 rows: int | None = None) -> FrequencyAccumulator | ReplicateAccumulator:
    """A fresh accumulator of a pass; ``rows``: how many the process will add (``kernel="auto"``'s judgement)."""
    if groups is None:
        return FrequencyAccumulator(student, dtype, kernel=kernel, expected_rows=rows)
    return ReplicateAccumulator(student, dtype, groups, kernel=kernel, expected_rows=rows)


def _check_label_range(student: LadderStudent, y: torch.Tensor, loss: str) -> None:
    """The range check of a pass's labels ``y`` ``(N,)``, once where they enter it (one host read, none on the host
    tensors chunks hold), so that :func:`_run_batches` skips it per batch."""
    student._check_labels(y, y, loss)  # (only the first argument's length is read: y's own)


def _run_batches(student: LadderStudent, batches: Iterable[Any], loss: str, *adds: Any,
                 layout: str = "node") -> torch.Tensor:
    """Every ``(x, y, z)`` of ``batches`` through the student's explicit pass, each record and its events handed to
    every ``add`` (an accumulator's or a probe's); each batch writes into the previous one's stacked buffers (the
    same memory), in ``layout`` (``forward_backward``'s: ``"batch"`` where every ``add`` reads it, the accumulators'
    :meth:`~FrequencyAccumulator.record_layout`).  A batch ``(x, y, z, bounds)`` hands its row groups' bounds on
    too (``add(rec, z, bounds)``: :meth:`ReplicateAccumulator.add`).  Returns how many of the examples the student
    classifies correctly, as a 0-dim int64 tensor on the student's device: no host read per batch (the caller reads
    it once).  The labels' range must have been checked by the caller (:func:`_check_label_range`): a batch's is
    not (a host read per batch on a device)."""
    dev = student.weights[0].device
    correct = torch.zeros((), dtype=torch.int64, device=dev)  # on the device: read back once, after the last batch
    buffers: bool | list[torch.Tensor] = True
    with torch.no_grad():
        for x, y, z, *bounds in batches:
            # host batches copied without waiting for the device (a blocking copy synchronizes the stream)
            x, y, z = (t.to(dev, non_blocking=True) for t in (x, y, z))
            # (a batch cut into row groups: each group's Delta W is summed by ReplicateAccumulator.add, the whole
            # batch's by nobody)
            rec = student.forward_backward(x, y, loss, stacked=buffers, labels_checked=True, delta_w=not bounds,
                                           layout=layout)
            for add in adds:
                add(rec, z, *bounds)
            correct += (rec.fbar[0][:, 0].argmax(-1) == y).sum()
            buffers = rec.stacked if rec.stacked is not None else True  # set: the pass was asked for them
    return correct


def _chunk_statistics(c: int, student: LadderStudent, chunks: ChunkedLadderData | _SampleChunks, loss: str,
                      batch_size: int,
                      dtype: torch.dtype | None, groups: int | None = None, kernel: str = "auto",
                      expected_rows: int | None = None) -> tuple[dict, int]:
    """The task of one chunk (any process): its rows in batches of ``batch_size`` into a fresh accumulator.

    :returns: ``(state_dict, correct)``: the accumulator's state and how many of the chunk's examples
        the student classifies correctly.
    """
    part, wdt = chunks.chunk(c), student.weights[0].dtype
    acc = _accumulator(student, dtype, groups, kernel, expected_rows)
    if isinstance(acc, ReplicateAccumulator) and _regroup(student, dtype):  # (its batches' U, Gf once, at its end)
        acc._deferred = DeferredDerivation()
    _check_label_range(student, part.y, loss)  # (a chunk is read on the host: no device read)
    # one-hot leaves handed on as their events (checked here, once) where a pass may reorder its sums (_regroup):
    # the embedding sum of the picked weights is the one-hot matmul's to round-off; float64 and BN passes stay bit
    # for bit
    events = _regroup(student, dtype) and leaf_event_inputs(part, student)
    grouped = groups is not None and _regroup(student, dtype)
    if groups is not None and grouped:
        batches: Iterator[Any] = ((evaluation_inputs(part, idx, wdt, events), part.y[idx], part.z[idx], bounds)
                                  for idx, bounds in grouped_batches(len(part), batch_size, groups))
    else:
        rows = [slice(s, min(s + batch_size, len(part))) for s in range(0, len(part), batch_size)]
        batches = ((evaluation_inputs(part, r, wdt, events), part.y[r], part.z[r]) for r in rows)
    correct = _run_batches(student, batches, loss, acc.add, layout=acc.record_layout(grouped=grouped))
    return acc.state_dict(), int(correct)


def _regroup(student: LadderStudent, dtype: torch.dtype | None) -> bool:
    """Whether a streaming pass may reorder its sums: run :data:`~smaso.student.row_groups.GROUPED_BATCHES`
    batches at once with row groups (:func:`~smaso.student.row_groups.grouped_batches`), and take one-hot leaves as
    their events (:func:`~smaso.student.rows.leaf_event_inputs`): without BN (each row's record is then its own,
    whatever batch it runs in) and with batch sums below float64 (whose results are within their own round-off
    anyway: a float64 pass stays the same bit for bit)."""
    return not student.batch_norm and (dtype or student.weights[0].dtype) != torch.float64


def accumulate_statistics(student: LadderStudent, source: DataSource, *, loss: str = "squared", batch_size: int = 4096,
                          dtype: torch.dtype | None = None, engine: SerialEngine | DaskEngine | None = None,
                          groups: int | None = None, progress: bool = False,
                          kernel: str = "auto") -> tuple[FrequencyAccumulator | ReplicateAccumulator, int]:
    """One streaming pass of a fixed student over a dataset, chunk by chunk: the mergeable sums.

    Each chunk is one task (in this process, or on a Dask cluster with ``engine``); it runs its rows in
    batches of ``batch_size`` (BN normalizes each batch by its own statistics) into a fresh accumulator, and
    the chunks' states are merged in chunk order, so the result does not depend on the engine.  Memory is one
    chunk and one batch, whatever N is.  With ``groups``, batch sums below float64 and no BN, the batches run
    :data:`~smaso.student.row_groups.GROUPED_BATCHES` at a time, their rows reordered group by group
    (:func:`~smaso.student.row_groups.grouped_batches`: every group holds the rows it holds batch by batch; fewer,
    larger per-group sums, within the batch sums' round-off), and no whole-batch Delta W is computed (each group's
    is).

    :param source: a :class:`~teachers.sampling.LadderSample`, a :class:`~teachers.chunked.ChunkedLadderData`,
        or dataset path(s), of the student's ladder.
    :param dtype: accumulation dtype (default: the student's; float64 for exact sums).
    :param engine: None (this process), or a :class:`~teachers.engine.DaskEngine`.
    :param groups: ``K``: accumulate a :class:`ReplicateAccumulator` of K row groups instead (every batch split
        into K blocks), for the jackknife's noise floors.
    :param kernel: the batch sums' kernels in every chunk's accumulator (:class:`FrequencyAccumulator`; with
        ``groups``, the groups' Delta W above one-hot leaves, :class:`ReplicateAccumulator`): ``"auto"`` compiles
        where the whole source has :data:`~smaso.student.batch_sums.AUTO_ROWS` rows or more (with ``groups``:
        :data:`~smaso.student.leaf_kernels.AUTO_EDGE_ROWS` (row, leaf edge) pairs; a process compiles once, for all
        its chunks).
    :returns: ``(accumulator, correct)``: call ``accumulator.result()`` for the
        :class:`FrequencyStatistics`; ``correct`` counts the examples classified correctly.
    """
    from teachers.engine import get_engine

    _check_student(student)
    _check_batch_size(batch_size)
    _check_groups(groups)
    check_kernel(kernel)
    chunks = _student_chunks(student, source)

    def merge(total: tuple, part: tuple[dict, int]) -> tuple:
        return total[0].merge_(part[0]), total[1] + part[1]

    # chunk order: the same sums in the same order on every engine
    return get_engine(engine).fold(_chunk_statistics, range(chunks.num_chunks), student, chunks, loss, batch_size,
                                   dtype, groups, kernel, len(chunks), merge=merge,
                                   init=(_accumulator(student, dtype, groups), 0),
                                   progress="student statistics" if progress else None)
