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
from smaso.student.bn_sums import bn_event_sums
from smaso.student.connectivity import take_rows
from smaso.student.event_means import FrequencyStatistics, PerEventMeans
from smaso.student.mergeable import (
    MergeableSums,
    check_record_delta_w,
    check_record_weights,
    event_counts,
    event_flags,
    negated_state,
    record_rows,
    tree_pair_index,
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

# per-level quantities, in the order they are stacked for the single scatter per level,
# and the StudentRecord field each one averages
_RECORD = {"Fbar": "fbar", "F": "f", "D": "slope", "Dp": "deriv", "U": "u", "G": "g", "Gf": "g_f"}

_ONE_HOT_MAX_EVENTS = 256

#: The dtype of an accumulator's totals (and of its statistics), whatever the dtype of its batch sums.
TOTAL_DTYPE = torch.float64


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


def _one_hot_events(z: torch.Tensor, m: int, dtype: torch.dtype) -> torch.Tensor:
    """``(R, m, N)`` with entry [r, a, n] = [z[n, r] = a] (the scatter matrix of one level)."""
    n, r = z.shape
    return torch.zeros(r, m, n, dtype=dtype, device=z.device).scatter_(1, z.T.unsqueeze(1), 1.0)


def scatter_sums(z: torch.Tensor, q: torch.Tensor, m: int, dtype: torch.dtype,
                 one_hot: torch.Tensor | None = None) -> torch.Tensor:
    """Per-event sums: ``out[r, a] = sum_n [z[n, r] = a] q[n, r]``.

    :param z: ``(N, R)`` events in [0, m); ``q``: ``(N, R, K)``.
    :param one_hot: the level's ``_one_hot_events`` when already built.
    :returns: ``(R, m, K)`` in ``dtype``.
    """
    n, r = z.shape
    q = q.to(dtype)
    if m <= _ONE_HOT_MAX_EVENTS:
        one_hot = _one_hot_events(z, m, dtype) if one_hot is None else one_hot
        return torch.bmm(one_hot, q.transpose(0, 1))
    out = torch.zeros(r * m, q.shape[-1], dtype=dtype, device=q.device)
    idx = (z + torch.arange(r, device=z.device) * m).reshape(-1)
    return out.index_add_(0, idx, q.reshape(n * r, -1)).reshape(r, m, -1)


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """Sorted ``indices`` as maximal runs ``[(i0, i1), ...]`` of consecutive integers (i1 exclusive)."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


class FrequencyAccumulator(MergeableSums):
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
    """

    _SUMS = ("counts", "joint_counts", "own", "fc", "gp", "dW", "db")
    # per level; index 0 None in the edge sums (the root has no parent edge), _sizes None where a level's regions
    # share one event count
    joint_counts: list[torch.Tensor | None]
    fc: list[torch.Tensor | None]
    gp: list[torch.Tensor | None]
    _edge_base: list[torch.Tensor | None]
    _sizes: list[torch.Tensor | None]

    def __init__(self, student: LadderStudent, dtype: torch.dtype | None = None) -> None:
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

    def add(self, rec: StudentRecord, z: torch.Tensor, rows: slice | None = None) -> None:
        """Add one batch: ``rec`` from ``student.forward_backward`` and its events ``z`` ``(N, total_regions)``.

        :param rows: add only these rows of the batch (a ``slice`` with step 1; see :func:`record_rows`):
            how :class:`ReplicateAccumulator` splits a batch into groups without changing BN's batch statistics.
        """
        lad, dt = self.ladder, self.dtype
        z = _student_events(self.student, z, rec)
        check_record_weights(self.student, rec, any(self._derived))  # (U and Gf read the weights now)
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
        built = [l for l, lev in enumerate(levels) if small[l] and lev is not None]
        one_hot: list[torch.Tensor | None] = [None] * (d + 1)
        if built:
            # the scatter matrices' levels as one uint8 (regions, N) block (events < 256 there): comparing bytes
            # writes a whole matrix ~4x faster than setting its ones and resetting them after the batch
            top = off[built[-1] + 1]
            ev8 = z[:, :top].to(torch.uint8).T.contiguous()
            for l in built:
                one_hot[l] = self._set_one_hot(l, ev8[off[l]: off[l + 1]])
        self._add_sums(rec, levels, bins, one_hot, small, stacked, n)
        for l in range(d):
            self.dW[l] += rec.dW[l].to(dt) * n
            self.db[l] += rec.db[l].to(dt) * n
        self.n += n
        self._add_loss(rec, n)  # on the device: read back once, by result or state_dict

    def _derivable(self, level: int) -> tuple[str, ...]:
        """The per-event sums of ``level`` (< d) that are linear maps of the edge sums of the same batch, so that
        summing them per example would repeat work (what :meth:`_add_derived` computes instead):

        - U: u_r = sum_{e: parent r} W_e^T fbar_{child(e)} + b_r (Eq 1), so sum_x [z_r = a] u_r is
          sum_e W_e^T (the edge's Fc sum) + b_r count(a);
        - Gf at a hidden level without BN: g_f = g_raw = sum_{e: child r} W_e g_{parent(e)} (Eq 1), so its sums are
          sum_e W_e (the edge's Gp~ sum) (with BN g_f = BN'(g_raw) is not linear in them: summed).
        """
        derived: tuple[str, ...] = ("U",) if "U" in self.summed else ()
        if 0 < level and self.student.bn_params(level) is None and "Gf" in self.summed:
            derived += ("Gf",)
        return derived

    def _add_derived(self, l: int, fc: torch.Tensor, gp: torch.Tensor, cnt: list,
                     bn: bool = False) -> torch.Tensor | None:
        """The derived sums (:meth:`_derivable`) of one batch from its edge sums into level ``l`` >= 1: U of the
        parents' level l - 1 from ``fc`` ``(E, M_{l-1}, n_l)``, Gf of the children's level l from ``gp``
        ``(E, M_l, n_{l-1})``; ``cnt[l - 1]``: the parents' event counts of the batch ``(R_{l-1}, M_{l-1})``.
        In the batch sums' dtype, like every batch sum: E M n_l n_{l-1} multiply-adds, a small fraction of the
        R M N n per-example sums they replace.  With ``bn`` (BN's maps at level l, :mod:`~smaso.student.bn_sums`)
        returns the raw gradient's sums of level l ``(R_l, M_l, n_l)`` instead of adding them, else None."""
        st, dt = self.student, self.dtype
        W = st.edge_weights(l - 1).detach().to(dt)  # (E, n_l, n_{l-1}); detached: sums are data, not a graph
        par, chi = st.edge_index(l - 1)
        if "U" in self._derived[l - 1]:
            u_cols = self._own_columns(l - 1, "U")
            fc = fc.to(dt)
            if st.fast_path:  # per parent its b children's sums side by side times its stacked edge weights
                Rp, mp, n_l = u_cols.shape[0], fc.shape[1], fc.shape[2]
                u_cols += torch.bmm(fc.view(Rp, -1, mp, n_l).transpose(1, 2).reshape(Rp, mp, -1),
                                    W.reshape(Rp, -1, W.shape[-1]))
            else:
                u_cols.index_add_(0, par, torch.bmm(fc, W).to(TOTAL_DTYPE))
            if st.biases is not None:
                u_cols += cnt[l - 1][..., None] * st.biases[l - 1].detach().to(dt)[:, None, :]
        if bn:  # the raw gradient's sums, by the same map as Gf's without BN; BN's map is the caller's
            graw = torch.bmm(gp.to(dt), W.transpose(1, 2))  # (E, M_l, n_l)
            return graw if st.fast_path else graw.new_zeros(self.own[l].shape[:2] + graw.shape[-1:]).index_add_(
                0, chi, graw)
        if l < self.ladder.depth and "Gf" in self._derived[l]:
            gf_cols, gf = self._own_columns(l, "Gf"), torch.bmm(gp.to(dt), W.transpose(1, 2))  # (E, M_l, n_l)
            if st.fast_path:  # one parent edge per child region
                gf_cols += gf
            else:
                gf_cols.index_add_(0, chi, gf.to(TOTAL_DTYPE))
        return None

    def _own_columns(self, level: int, key: str) -> torch.Tensor:
        """The columns of quantity ``key`` in the level's per-event sums ``own[level]`` (a view)."""
        i, w = self.summed.index(key), self.student.widths[level]
        return self.own[level][..., i * w: (i + 1) * w]

    def _set_one_hot(self, level: int, ev: torch.Tensor) -> torch.Tensor:
        """The level's ``(R, M, N)`` scatter matrix [z[n, r] = a] from its events ``ev`` ``(R, N)`` (uint8, M <= 256),
        written whole (a comparison with the event values) into a buffer kept between batches (a fresh R M N
        allocation costs page faults on every batch; nothing of a previous batch survives the write)."""
        R, m = self.ladder.num_regions[level], self.ladder.events[level]
        key = (level, ev.shape[1])  # by size too: groups of a batch alternate between two sizes
        buf = self._one_hot_buffers.get(key)
        if buf is None:
            if len(self._one_hot_buffers) > 4 * (self.ladder.depth + 1):
                self._one_hot_buffers.clear()
            buf = self._one_hot_buffers[key] = torch.empty(R, m, ev.shape[1], dtype=self.dtype, device=self.device)
        values = self._event_values.get(m)
        if values is None:
            values = self._event_values[m] = torch.arange(m, dtype=torch.uint8, device=self.device)[:, None]
        return torch.eq(ev[:, None, :], values, out=buf)

    def _add_sums(self, rec: StudentRecord, levels: list, bins: list[torch.Tensor], one_hot: list,
                  small: list[bool], stacked: bool, n: int) -> None:
        """Counts, joint counts and per-event sums of one batch (the body of :meth:`add`)."""
        lad, dt = self.ladder, self.dtype
        d = lad.depth
        tree = self.student.fast_path  # the edge sums take the uniform tree's layout
        cnt: list[torch.Tensor | None] = [None] * (d + 1)  # this batch's counts per level
        for l in range(d + 1):
            R, m = lad.num_regions[l], lad.events[l]
            # counts: on a tree below the root the margins of the (parent, child) counts below (R M M_p values
            # instead of the scatter matrix's R M N); else row sums of the scatter matrix where there is one (0/1
            # sums, exact in float32 up to 2^24 examples per batch), or a plain count
            if one_hot[l] is not None and (l == 0 or not tree):
                cnt[l] = one_hot[l].sum(-1)
            elif l == 0 or not tree:
                code = bins[l].long() + torch.arange(R, device=self.device) * m
                cnt[l] = event_counts(code, R * m).view(R, m)
            bn = l < d and bool(self._bn_derived[l]) and len(rec.mu) > l and rec.mu[l] is not None
            f_sums = None  # with bn: this batch's F sums, for BN's maps
            if l < d:
                w, i_f = self.student.widths[l], self.summed.index("F") if bn else -1
                for i0, i1 in (self._direct_runs if bn else self._plain_runs)[l]:
                    if small[l] and stacked and rec.stacked is not None and i1 <= self._num_stacked:
                        # the summed quantities of the level, one run of stacked slots at a time:
                        # (R, m, N) @ (R, N, k n); one wide matmul is ~2.5x faster than k narrow ones (n = 16
                        # columns each) on CPU
                        buf = rec.stacked[l][:, i0:i1].to(dt)
                        part = torch.bmm(one_hot[l], buf.reshape(R, -1, n).transpose(1, 2))
                    else:
                        q = torch.cat([getattr(rec, _RECORD[k])[l] for k in self.summed[i0:i1]], -1)
                        part = scatter_sums(levels[l], q, m, dt, one_hot[l])
                    self.own[l][..., i0 * w: i1 * w] += part
                    if i0 <= i_f < i1:
                        f_sums = part[..., (i_f - i0) * w: (i_f - i0 + 1) * w]
            elif not self.onehot_leaves:  # the leaves' sums are E[x | z]'s
                self.own[l] += scatter_sums(levels[l], rec.fbar[l], m, dt, one_hot[l])
            if l > 0:
                pairs, fc, gp = self._add_edges(l, rec, levels, bins, one_hot, small, n, tree)
                if cnt[l] is None:  # a tree: the margins of its pairs (the scatter matrix's dtype where it has one)
                    cnt[l] = pairs.sum(1) if one_hot[l] is None else pairs.sum(1).to(one_hot[l].dtype)
                graw = self._add_derived(l, pairs if fc is None else fc, gp, cnt, bn)
            level_counts = cnt[l]
            if level_counts is None:
                raise RuntimeError(f"level {l}: no event counts were computed for this batch")  # (unreachable)
            if bn and f_sums is not None and graw is not None:  # (both set with bn, at a hidden level l >= 1)
                c1, c0 = self.student.bn_params(l)  # type: ignore[misc]  # bn: the level has BN
                fbar, gf = bn_event_sums(f_sums, graw, level_counts, c1, c0, rec.mu[l], rec.sigma[l], rec.dc1[l],
                                         rec.dc0[l], TOTAL_DTYPE)
                self._own_columns(l, "Fbar").add_(fbar)
                self._own_columns(l, "Gf").add_(gf)
            self.counts[l] += level_counts

    def _add_edges(self, l: int, rec: StudentRecord, levels: list, bins: list, one_hot: list, small: list[bool],
                   n: int, tree: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Pair counts, focus and broadness sums of the edges into level ``l`` (parents in l - 1).

        :returns: this batch's ``(pairs, fc, gp)``: the (parent, child) event counts ``(E, M_{l-1}, M_l)`` and the
            edges' Fc and Gp~ sums (``fc`` None at one-hot leaves, where it is ``pairs``: x = one-hot(z)).
        """
        lad, dt = self.ladder, self.dtype
        m, mp = lad.events[l], lad.events[l - 1]
        # the edges into level l >= 1: set (in place below, as the lists' own tensors)
        joint_counts, fc_sum, gp_sum, edge_base = (_ladder_parts.at_level(v, l, name) for v, name in (
            (self.joint_counts, "joint_counts"), (self.fc, "fc"), (self.gp, "gp"), (self._edge_base, "edge_base")))
        E = joint_counts.shape[0]
        par, chi = self.student.edge_index(l - 1)
        b = _ladder_parts.uniform_branching(lad)[l - 1] if tree else 0  # read on the tree path only
        if tree:  # edge = child region; child c of parent p is region p b + c: views, no gathers
            pair = tree_pair_index(bins[l - 1], bins[l], m, edge_base)
        else:
            pair = (bins[l - 1][:, par] * m + bins[l][:, chi]) + edge_base
        pairs = event_counts(pair, E * mp * m).view(E, mp, m)
        joint_counts += pairs
        if l == lad.depth and self.onehot_leaves:
            # x = one-hot(z): E[x | z_parent] follows from the joint counts, and
            # sum_n [z_c = k] g_parent = N * Delta W[e, k, :] exactly
            gp = rec.dW[l - 1].to(dt) * n
            gp_sum += gp
            return pairs, None, gp
        if not (small[l] and small[l - 1]):  # many events: index_add_ per edge
            fc = scatter_sums(levels[l - 1].index_select(1, par), rec.fbar[l].index_select(1, chi), mp, dt)
            gp = scatter_sums(levels[l].index_select(1, chi), rec.g[l - 1].index_select(1, par), m, dt)
        else:
            fc, gp = self._edge_matmuls(l, rec, one_hot, n, tree, b)
        fc_sum += fc
        gp_sum += gp
        return pairs, fc, gp

    def _edge_matmuls(self, l: int, rec: StudentRecord, one_hot: list, n: int, tree: bool,
                      b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The Fc and Gp~ sums of one batch's edges into level ``l`` by batched matmuls with the levels' scatter
        matrices (few events): ``(E, M_{l-1}, n_l)`` and ``(E, M_l, n_{l-1})`` in the batch sums' dtype."""
        lad, dt = self.ladder, self.dtype
        R, m, mp, Rp = lad.num_regions[l], lad.events[l], lad.events[l - 1], lad.num_regions[l - 1]
        par, chi = self.student.edge_index(l - 1)
        child = rec.fbar[l].permute(1, 2, 0).to(dt)  # node-major (R_l, n_l, N): bmm reads it transposed
        g_par = rec.g[l - 1].permute(1, 2, 0).to(dt)  # (R_{l-1}, n_{l-1}, N)
        if tree:
            # grouped by parent region: no per-child copies of the parents' tensors
            gp = torch.bmm(one_hot[l].reshape(Rp, b * m, n), g_par.transpose(1, 2)).reshape(R, m, -1)
            # child position c of every parent: a strided batch of the children's node-major outputs
            fc = torch.stack([torch.bmm(one_hot[l - 1], child[c::b].transpose(1, 2)) for c in range(b)], 1)
            return fc.view(R, mp, -1), gp
        plan = self.student._plans[l - 1]
        if plan is None:  # irregular level: gather each edge's one-hot matrices and outputs
            return (torch.bmm(one_hot[l - 1].index_select(0, par), child.index_select(0, chi).transpose(1, 2)),
                    torch.bmm(one_hot[l].index_select(0, chi), g_par.index_select(0, par).transpose(1, 2)))
        E = par.shape[0]
        fc = child.new_zeros(E, mp, child.shape[1])
        gp = child.new_zeros(E, m, g_par.shape[1])
        for ps, places in plan:  # strided runs: views, no gathers
            oh_p, g_p = one_hot[l - 1][ps], g_par[ps].transpose(1, 2)
            for es, (a, st, q) in places:
                fc[es] += torch.bmm(oh_p, take_rows(child, a, st, q).transpose(1, 2))
                gp[es] += torch.bmm(take_rows(one_hot[l], a, st, q), g_p)
        return fc, gp

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
    :param groups: K >= 2.
    :ivar parts: the K group accumulators.
    """

    _deferred: DeferredDerivation | None = None  # (a pass's chunk task: U and Gf mapped once from the chunk's sums)

    def __init__(self, student: LadderStudent, dtype: torch.dtype | None = None, groups: int = DEFAULT_GROUPS) -> None:
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 2:
            raise ValueError(f"groups: expected an integer >= 2 (row groups of the jackknife), got {groups!r}")
        self.student, self.groups = student, groups
        self.parts = [FrequencyAccumulator(student, dtype) for _ in range(groups)]

    @property
    def n(self) -> int:
        """Examples added so far."""
        return sum(p.n for p in self.parts)

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
            if self._deferred is None:
                add_row_groups(self.parts, rec, events, bounds, fields)
            else:
                add_row_groups(self.parts, rec, events, bounds, fields, self._deferred)
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
                       dtype: torch.dtype | None = None, groups: int | None = None) -> FrequencyStatistics:
    """One pass over a dataset at fixed weights: forward, explicit backward, per-event sums.

    :param x: ``(N, R_d, dim)`` inputs; ``y``: ``(N,)`` labels; ``z``: ``(N, regions)`` events.
    :param batch_size: examples per batch (default: all at once, i.e. full-batch GD and BN
        statistics of the whole set, which is what the reformulation describes).  Without BN the result does
        not depend on it beyond round-off.
    :param dtype: accumulation dtype (default: the student's; pass float64 for exact sums).
    :param groups: ``K`` >= 2: also keep K row groups (every batch cut into K blocks) for the jackknife, so that
        the result's :meth:`~FrequencyStatistics.leave_one_out` gives the K leave-one-group-out statistics.
    :returns: the :class:`FrequencyStatistics` of every row, with or without ``groups`` (one return type).
    """
    _check_student(student)
    z = _student_events(student, z)
    if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
        raise ValueError("x, y: expected tensors")
    if not (x.shape[0] == y.shape[0] == z.shape[0]):
        raise ValueError(f"x, y, z: expected the same number of examples, got {x.shape[0]}, {y.shape[0]}, {z.shape[0]}")
    if x.shape[0] == 0:
        raise ValueError("x: the dataset is empty")
    _check_groups(groups)
    bs = x.shape[0] if batch_size is None else _check_batch_size(batch_size)
    acc = _accumulator(student, dtype, groups)
    _check_label_range(student, y, loss)
    _run_batches(student, ((x[s: s + bs], y[s: s + bs], z[s: s + bs]) for s in range(0, x.shape[0], bs)), loss,
                 acc.add)
    return acc.result()


def _accumulator(student: LadderStudent, dtype: torch.dtype | None,
                 groups: int | None) -> FrequencyAccumulator | ReplicateAccumulator:
    return FrequencyAccumulator(student, dtype) if groups is None else ReplicateAccumulator(student, dtype, groups)


def _check_label_range(student: LadderStudent, y: torch.Tensor, loss: str) -> None:
    """The range check of a pass's labels ``y`` ``(N,)``, once where they enter it (one host read, none on the host
    tensors chunks hold), so that :func:`_run_batches` skips it per batch."""
    student._check_labels(y, y, loss)  # (only the first argument's length is read: y's own)


def _run_batches(student: LadderStudent, batches: Iterable[Any], loss: str, *adds: Any) -> torch.Tensor:
    """Every ``(x, y, z)`` of ``batches`` through the student's explicit pass, each record and its events handed to
    every ``add`` (an accumulator's or a probe's); each batch writes into the previous one's stacked buffers (the
    same memory).  A batch ``(x, y, z, bounds)`` hands its row groups' bounds on too (``add(rec, z, bounds)``:
    :meth:`ReplicateAccumulator.add`).  Returns how many of the examples the student classifies correctly, as a
    0-dim int64 tensor on the student's device: no host read per batch (the caller reads it once).  The labels'
    range must have been checked by the caller (:func:`_check_label_range`): a batch's is not (a host read per
    batch on a device)."""
    dev = student.weights[0].device
    correct = torch.zeros((), dtype=torch.int64, device=dev)  # on the device: read back once, after the last batch
    buffers: bool | list[torch.Tensor] = True
    with torch.no_grad():
        for x, y, z, *bounds in batches:
            # host batches copied without waiting for the device (a blocking copy synchronizes the stream)
            x, y, z = (t.to(dev, non_blocking=True) for t in (x, y, z))
            # (a batch cut into row groups: each group's Delta W is summed by ReplicateAccumulator.add, the whole
            # batch's by nobody)
            rec = student.forward_backward(x, y, loss, stacked=buffers, labels_checked=True, delta_w=not bounds)
            for add in adds:
                add(rec, z, *bounds)
            correct += (rec.fbar[0][:, 0].argmax(-1) == y).sum()
            buffers = rec.stacked if rec.stacked is not None else True  # set: the pass was asked for them
    return correct


def _chunk_statistics(c: int, student: LadderStudent, chunks: ChunkedLadderData | _SampleChunks, loss: str,
                      batch_size: int,
                      dtype: torch.dtype | None, groups: int | None = None) -> tuple[dict, int]:
    """The task of one chunk (any process): its rows in batches of ``batch_size`` into a fresh accumulator.

    :returns: ``(state_dict, correct)``: the accumulator's state and how many of the chunk's examples
        the student classifies correctly.
    """
    part, wdt = chunks.chunk(c), student.weights[0].dtype
    acc = _accumulator(student, dtype, groups)
    if isinstance(acc, ReplicateAccumulator) and _regroup(student, dtype):  # (its batches' U, Gf once, at its end)
        acc._deferred = DeferredDerivation()
    _check_label_range(student, part.y, loss)  # (a chunk is read on the host: no device read)
    # one-hot leaves handed on as their events (checked here, once) where a pass may reorder its sums (_regroup):
    # the embedding sum of the picked weights is the one-hot matmul's to round-off; float64 and BN passes stay bit
    # for bit
    events = _regroup(student, dtype) and leaf_event_inputs(part, student)
    if groups is not None and _regroup(student, dtype):
        batches: Iterator[Any] = ((evaluation_inputs(part, idx, wdt, events), part.y[idx], part.z[idx], bounds)
                                  for idx, bounds in grouped_batches(len(part), batch_size, groups))
    else:
        rows = [slice(s, min(s + batch_size, len(part))) for s in range(0, len(part), batch_size)]
        batches = ((evaluation_inputs(part, r, wdt, events), part.y[r], part.z[r]) for r in rows)
    correct = _run_batches(student, batches, loss, acc.add)
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
                          groups: int | None = None,
                          progress: bool = False) -> tuple[FrequencyAccumulator | ReplicateAccumulator, int]:
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
    :returns: ``(accumulator, correct)``: call ``accumulator.result()`` for the
        :class:`FrequencyStatistics`; ``correct`` counts the examples classified correctly.
    """
    from teachers.engine import get_engine

    _check_student(student)
    _check_batch_size(batch_size)
    _check_groups(groups)
    chunks = _student_chunks(student, source)

    def merge(total: tuple, part: tuple[dict, int]) -> tuple:
        return total[0].merge_(part[0]), total[1] + part[1]

    # chunk order: the same sums in the same order on every engine
    return get_engine(engine).fold(_chunk_statistics, range(chunks.num_chunks), student, chunks, loss, batch_size,
                                   dtype, groups, merge=merge, init=(_accumulator(student, dtype, groups), 0),
                                   progress="student statistics" if progress else None)
