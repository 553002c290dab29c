"""The per-event sums of one batch: the body of :meth:`~smaso.student.frequency.FrequencyAccumulator.add`.

Per batch and level the counts, the (parent, child) pair counts, the per-event sums of the stacked quantities and the
edges' Fc and Gp~ sums (``docs/theory.md`` §1.4), and the sums that follow from the edge sums by the weights (U; Gf
without BN).  Eager torch here (one-hot batched matmuls, ``index_add_``); on the uniform tree with a stacked record,
``kernel="compiled"`` takes the sums, the counts and the pair counts from :mod:`smaso.student.event_kernels` instead.
:class:`BatchSums` is the mixin that holds these methods; the accumulator's state and its constructor stay in
:mod:`smaso.student.frequency`.
"""

from __future__ import annotations

from typing import Any

import torch

from smaso import _ladder_parts
from smaso.student.bn_sums import bn_event_sums
from smaso.student.compiled import check_expected_rows, check_kernel, use_compiled
from smaso.student.connectivity import take_rows
from smaso.student.event_kernels import MAX_EVENTS, padded_tree_sums
from smaso.student.mergeable import event_counts, tree_pair_index
from smaso.student.network import LadderStudent, StudentRecord

__all__ = ["AUTO_ROWS", "TOTAL_DTYPE", "BatchSums", "scatter_sums"]


# per-level quantities, in the order they are stacked for the single scatter per level,
# and the StudentRecord field each one averages
_RECORD = {"Fbar": "fbar", "F": "f", "D": "slope", "Dp": "deriv", "U": "u", "G": "g", "Gf": "g_f"}

_ONE_HOT_MAX_EVENTS = 256

#: ``kernel="auto"`` compiles when the caller will add at least this many rows: where the eager sums would cost at
#: least what a compilation with inductor's disk cache cold does (the rows are known beforehand, so no ski-rental
#: is needed).  Since the record is written batch-major for them (issue 39, seventh round) the compiled sums save
#: 3.2 us per row in memory with float one-hot inputs (``bench_student.py``'s "stats f32 compiled" against
#: "stats f32", recorded: 1.45 against 1.66 s per 65,536 rows, 1 thread) and 8-16 us in a streaming pass on leaf
#: events (``accumulate_statistics`` without groups, 341 regions, float32, 1 thread: ``bench_out_of_core.py``'s
#: eval_pass rows, recorded 2026-12-07 at N = 2e5, 52.6k against 29.5k examples/s, best of 2; 18.7 against 27.0 us
#: per row over 10^6 rows in a scratch run).  A first compilation took 3.0-4.1 s with the cache warm (the same
#: rows' ``compile_s``) and 18.1 s cold (a fresh ``TORCHINDUCTOR_CACHE_DIR``, load ~1, scratch): 18.1 s / 3.2 us =
#: 5.7 million rows.  (It was 5e7 while the compiled sums saved only 1-2%.)  With BN after the
#: gate they were no faster (0.97-1.04x of the pass): "auto" stays eager there.
AUTO_ROWS = 6_000_000

#: The dtype of an accumulator's totals (and of its statistics), whatever the dtype of its batch sums.
TOTAL_DTYPE = torch.float64


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



class BatchSums:
    """The per-batch sums of :class:`~smaso.student.frequency.FrequencyAccumulator` (module docstring); the
    attributes below are set by its constructor."""

    student: LadderStudent
    ladder: Any
    dtype: torch.dtype
    device: torch.device
    summed: list[str]
    onehot_leaves: bool
    counts: list[torch.Tensor]
    own: list[torch.Tensor]
    joint_counts: list[torch.Tensor | None]
    fc: list[torch.Tensor | None]
    gp: list[torch.Tensor | None]
    _edge_base: list[torch.Tensor | None]
    _num_stacked: int
    _derived: list[tuple[str, ...]]
    _bn_derived: list[tuple[str, ...]]
    _direct_runs: list[list[tuple[int, int]]]
    _plain_runs: list[list[tuple[int, int]]]
    _one_hot_buffers: dict[tuple[int, int], torch.Tensor]
    _event_values: dict[int, torch.Tensor]
    _kernel_on: bool
    _kernel_rows: int | None
    _rows_buffers: list[torch.Tensor] | None

    def _init_kernel(self, kernel: str, expected_rows: int | None) -> None:
        """Whether the batch sums run compiled (:mod:`smaso.student.event_kernels`): ``kernel`` as
        :func:`~smaso.student.compiled.use_compiled` decides, ``"auto"`` worth it from :data:`AUTO_ROWS`
        ``expected_rows`` on (None: unknown, eager; eager too with BN after the gate, where they were no faster), and
        only where the kernels apply: a uniform tree (the student's fast path) with one-hot leaves and fewer than
        255 events per region."""
        check_kernel(kernel)
        check_expected_rows(expected_rows)
        fits = self._kernels_fit() and "g" in self.student.stacked_fields()
        worth_it = expected_rows is not None and expected_rows >= AUTO_ROWS \
            and "fbar" in self.student.stacked_fields()
        self._kernel_on = fits and use_compiled(kernel, self.device, worth_it=worth_it)
        self._kernel_rows = None  # the rows of every compiled call: the first compiled batch's
        self._rows_buffers: list[torch.Tensor] | None = None  # the examples-major rows, kept between batches

    def _kernels_fit(self) -> bool:
        """Whether the compiled sums (:mod:`smaso.student.event_kernels`) take this ladder: a uniform tree on the
        student's fast path (which implies it), one-hot leaves, at most :data:`~smaso.student.event_kernels.MAX_EVENTS`
        events per level.  Also the condition of :meth:`~smaso.student.frequency.ReplicateAccumulator.record_layout`'s
        batch-major records."""
        return self.student.fast_path and self.onehot_leaves and max(self.ladder.events) <= MAX_EVENTS

    def _compiled_sums(self, rec: StudentRecord, z: torch.Tensor, n: int) -> list[dict] | None:
        """The batch's sums from the compiled kernels, per level a dict of ``own``, ``counts``, ``fc``, ``gp``,
        ``pairs`` (:func:`~smaso.student.event_kernels.padded_tree_sums`, the pad segments dropped; the leaves: pairs
        and counts), or None where the eager path runs (kernel off, or more rows than the compiled shape).

        Every call takes the first compiled batch's rows N_k: a shorter batch is padded to N_k with rows of event M
        (dropped segments), so one compile serves it.  ``rec`` holds a stacked record; ``z`` ``(n, regions)``
        checked events."""
        if not self._kernel_on or rec.stacked is None or rec.stacked_fields is None:
            return None
        if self._kernel_rows is None:
            self._kernel_rows = n
        nk = self._kernel_rows
        if n > nk:
            return None
        lad, dt = self.ladder, self.dtype
        d = lad.depth
        fields = rec.stacked_fields
        if rec.stacked_layout == "batch":  # summed as it is (fbar always stacked: no BN)
            stacked, rows = list(rec.stacked[:d]), None
        else:
            # the stacked records (R, k, n, N) and, where fbar is not stacked (BN after the gate), the record's fbar
            # as its node-major (R, 1, n, N) storage: all written as examples-major rows by one kernel
            stacked = list(rec.stacked[:d]) if "fbar" in fields else \
                list(rec.stacked[:d]) + [f.permute(1, 2, 0).unsqueeze(1) for f in rec.fbar[:d]]
            rows = self._rows_buffers
            if rows is None or rows[0].shape[1] != nk:
                rows = self._rows_buffers = [torch.empty(v.shape[0], nk, v.shape[1] * v.shape[2], dtype=dt,
                                                         device=v.device) for v in stacked]
        sums = padded_tree_sums(z, stacked, rows, tuple(lad.events), tuple(lad.level_offsets), len(fields),
                                fields.index("fbar") if "fbar" in fields else -1, fields.index("g"), nk,
                                layout=rec.stacked_layout)
        out: list[dict] = []
        for l, level in enumerate(sums):  # (one group)
            one = {k: None if v is None else v[0] for k, v in level.items()}
            if l > 0:
                one["counts"] = level["pairs"][0].sum(1)
            out.append(one)
        return out

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
                  small: list[bool], stacked: bool, n: int, pre: list[dict] | None = None) -> None:
        """Counts, joint counts and per-event sums of one batch (the body of :meth:`add`); ``pre``: the compiled
        kernels' sums of the batch (:meth:`_compiled_sums`), taken instead of the eager ones where given."""
        lad, dt = self.ladder, self.dtype
        d = lad.depth
        tree = self.student.fast_path  # the edge sums take the uniform tree's layout
        cnt: list[torch.Tensor | None] = [None] * (d + 1)  # this batch's counts per level
        for l in range(d + 1):
            R, m = lad.num_regions[l], lad.events[l]
            # counts: on a tree below the root the margins of the (parent, child) counts below (R M M_p values
            # instead of the scatter matrix's R M N); else row sums of the scatter matrix where there is one (0/1
            # sums, exact in float32 up to 2^24 examples per batch), or a plain count
            if pre is not None:  # (the hidden levels' in the batch dtype, as the eager path's one-hot row sums)
                cnt[l] = pre[l]["counts"] if l == d else pre[l]["counts"].to(dt)
            elif one_hot[l] is not None and (l == 0 or not tree):
                cnt[l] = one_hot[l].sum(-1)
            elif l == 0 or not tree:
                code = bins[l].long() + torch.arange(R, device=self.device) * m
                cnt[l] = event_counts(code, R * m).view(R, m)
            bn = l < d and bool(self._bn_derived[l]) and len(rec.mu) > l and rec.mu[l] is not None
            f_sums = None  # with bn: this batch's F sums, for BN's maps
            if l < d:
                w, i_f = self.student.widths[l], self.summed.index("F") if bn else -1
                for i0, i1 in (self._direct_runs if bn else self._plain_runs)[l]:
                    if pre is not None and i1 <= self._num_stacked:
                        part = pre[l]["own"][..., i0 * w: i1 * w]
                    elif small[l] and stacked and rec.stacked is not None and i1 <= self._num_stacked:
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
                pairs, fc, gp = self._add_edges(l, rec, levels, bins, one_hot, small, n, tree,
                                                None if pre is None else pre[l])
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
                   n: int, tree: bool, pre: dict | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
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
        if pre is not None:  # the compiled kernels' (edge = child region on the tree)
            pairs = pre["pairs"]
        else:
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
        if pre is not None:
            fc, gp = pre["fc"].to(dt), pre["gp"].to(dt)
        elif not (small[l] and small[l - 1]):  # many events: index_add_ per edge
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
