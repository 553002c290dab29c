"""Frequency statistics of a population's members in one batched pass: a member axis over the same rows.

The members of :func:`~smaso.student.population.compare_population` (seeds and shuffled-label controls) are
measured at each checkpoint on the SAME evaluation rows and events, so everything that depends on the events
alone is built once for all of them -- the one-hot scatter matrices [z[n, r] = a] of each level, the event
counts and the (parent, child) pair counts -- and the per-event sums of every member are one batched product
per level and row group, the members on a leading axis:

    own_r[l] += onehot_l (R_l, m_l, N_g) @ Q_{r,l} (R_l, N_g, k n_l)    for every member r at once

(:func:`torch.matmul` broadcasting the one-hot over the members; Q the member's stacked buffers of
:meth:`~smaso.student.network.LadderStudent.forward_backward`, written in place into one ``(M, R_l, k, n_l, N)``
buffer per level, so no copies).  The edges' Fc and Gp~ sums, Delta W (Eq 2: sum_n fbar_child g_parent^T),
the biases' sums and the derived U and Gf (Eq 1: linear maps of the edge sums through each member's weights,
:meth:`~smaso.student.frequency.FrequencyAccumulator._derivable`) likewise.  Each member's forward and backward
runs on the batches :func:`~smaso.student.frequency.accumulate_statistics` runs (the same records, the same
per-batch losses); only the order of the additions inside the sums differs, so each member's
:class:`~smaso.student.frequency.FrequencyAccumulator` (or :class:`~smaso.student.frequency.ReplicateAccumulator`
of the jackknife's row groups: the K blocks ``g N_b // K`` of every batch, as its ``add``) equals the one-by-one
pass's to float64 round-off (``tests/test_member_statistics.py``).

The batched pass covers the uniform tree's kernels without Batch Norm or shared weights, one-hot leaves, at most
256 events per level and a pass whose row groups are cut batch by batch (float64 batch sums, or no groups:
:func:`~smaso.student.frequency._regroup`); :func:`member_statistics_supported` says why not otherwise, and the
caller then measures the members one by one.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from smaso import _ladder_parts
from smaso.student.frequency import (
    _ONE_HOT_MAX_EVENTS,
    TOTAL_DTYPE,
    FrequencyAccumulator,
    ReplicateAccumulator,
    _check_label_range,
    _one_hot_events,
    _regroup,
    _student_chunks,
    _student_events,
)
from smaso.student.mergeable import event_counts, event_flags
from smaso.student.network import LadderStudent, _check_float_dtype

if TYPE_CHECKING:
    from teachers.chunked import DataSource

__all__ = ["MemberSums", "member_statistics", "member_statistics_supported", "member_sums"]


def member_statistics_supported(net: LadderStudent, dtype: torch.dtype | None, groups: int | None) -> str | None:
    """Why the members of ``net``'s architecture cannot be measured in one batched pass (a sentence), or None."""
    lad = net.ladder
    if not net.fast_path or net.batch_norm or net.shared:
        return "a student off the uniform tree's kernels, with Batch Norm or with shared weights"
    if lad.emission.kind != "onehot":
        return "leaves that are not one-hot"
    if max(lad.events) > _ONE_HOT_MAX_EVENTS:
        return f"a level with more than {_ONE_HOT_MAX_EVENTS} events"
    if groups is not None and _regroup(net, dtype):
        return "row groups regrouped over several batches (batch sums below float64)"
    return None


class MemberSums:
    """The per-event sums of M members of one architecture over the same batches, K row groups each (module
    docstring): every :class:`~smaso.student.frequency.FrequencyAccumulator` sum with leading ``(M, K)`` axes
    (the event-only ones, counts and pair counts, with a leading ``(K,)``), in float64 totals.

    :param nets: the M members (one architecture, :func:`member_statistics_supported`), at their weights.
    :param dtype: the batch sums' dtype (default: the students').
    :param groups: K >= 2 row groups of every batch (the jackknife's), or None (one group).
    """

    def __init__(self, nets: Sequence[LadderStudent], dtype: torch.dtype | None = None,
                 groups: int | None = None) -> None:
        if not nets:
            raise ValueError("nets: expected at least one member")
        net = nets[0]
        why = member_statistics_supported(net, dtype, groups)
        if why is not None:
            raise ValueError(f"nets: the members cannot be measured in one batched pass ({why})")
        for r, m in enumerate(nets):
            if m.widths != net.widths or m.ladder.fingerprint() != net.ladder.fingerprint() \
                    or m.stacked_fields() != net.stacked_fields() or (m.biases is None) != (net.biases is None):
                raise ValueError(f"nets[{r}]: every member must have the architecture of nets[0]")
        self.nets, self.groups = list(nets), groups
        self.dtype = _check_float_dtype(dtype or net.weights[0].dtype)
        # the layout of the sums (which quantities are summed, which derived): the accumulator's own
        self.template = tmpl = FrequencyAccumulator(net, self.dtype)
        lad, dev = net.ladder, tmpl.device
        d, M, K = lad.depth, len(nets), groups or 1
        self.M, self.K = M, K

        def zeros(*shape: int) -> torch.Tensor:
            return torch.zeros(*shape, dtype=TOTAL_DTYPE, device=dev)

        self.counts = [zeros(K, *c.shape) for c in tmpl.counts]
        self.joint_counts = [None] + [zeros(K, *_ladder_parts.at_level(tmpl.joint_counts, l, "joint_counts").shape)
                                      for l in range(1, d + 1)]
        self.own = [zeros(M, K, *t.shape) for t in tmpl.own[:d]]
        self.fc = [None] + [zeros(M, K, *_ladder_parts.at_level(tmpl.fc, l, "fc").shape) for l in range(1, d)]
        self.gp = [None] + [zeros(M, K, *_ladder_parts.at_level(tmpl.gp, l, "gp").shape) for l in range(1, d + 1)]
        self.dW = [zeros(M, K, *t.shape) for t in tmpl.dW]
        self.db = [zeros(M, K, *t.shape) for t in tmpl.db]
        self.loss_sum = zeros(M, K)
        self.n = [0] * K
        self.correct = torch.zeros(M, dtype=torch.int64, device=dev)
        self._buffers: dict[int, list[torch.Tensor]] = {}
        keys = net.stacked_fields()
        self._slot_fbar, self._slot_g = keys.index("fbar"), keys.index("g")
        self._k = len(keys)

    def _stacked(self, N: int) -> list[torch.Tensor]:
        """Per level l < d the members' stacked buffers ``(M, R_l, k, n_l, N)`` (member r's is ``[r]``, contiguous:
        its forward_backward writes there), kept per batch size."""
        buf = self._buffers.get(N)
        if buf is None:
            net, lad = self.nets[0], self.nets[0].ladder
            buf = self._buffers[N] = [
                torch.empty(self.M, lad.num_regions[l], self._k, net.widths[l], N, dtype=net.weights[0].dtype,
                            device=self.template.device) for l in range(lad.depth)]
        return buf

    @torch.no_grad()
    def add(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, loss: str = "squared") -> None:
        """One batch ``(x (N, R_d, dim), y (N,), z (N, total_regions))`` through every member's explicit pass
        (labels already range-checked: :func:`~smaso.student.frequency._check_label_range`), its K row blocks into
        the sums of their groups."""
        nets, tmpl, dt = self.nets, self.template, self.dtype
        lad, d, off = tmpl.ladder, tmpl.ladder.depth, tmpl.ladder.level_offsets
        dev = tmpl.device
        N = x.shape[0]
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        z = _student_events(nets[0], z).to(dev, non_blocking=True)  # (the student's ladder: a readout level too)
        bins = [z[:, off[l]: off[l + 1]].to(tmpl._index_dtype) for l in range(d + 1)]
        event_flags(bins, lad.events, tmpl._sizes)  # (the CPU raises a bad batch's error here)
        S = self._stacked(N)
        losses = []
        for r, net in enumerate(nets):
            rec = net.forward_backward(x, y, loss, stacked=[s[r] for s in S], labels_checked=True)
            if rec.stacked is None or any(a.data_ptr() != s[r].data_ptr() for a, s in zip(rec.stacked, S,
                                                                                          strict=True)):
                raise RuntimeError("forward_backward did not write into the members' stacked buffers")  # (a bug)
            losses.append(rec.loss_tensor if rec.loss_tensor is not None else torch.tensor(rec.loss))
            self.correct[r] += (rec.fbar[0][:, 0].argmax(-1) == y).sum()
        loss_b = torch.stack([t.to(TOTAL_DTYPE) for t in losses])  # (M,) the batches' mean losses
        # the members' weights and biases, (M, E, n_{l+1}, n_l) and (M, R_l, n_l), in the batch sums' dtype
        W = [torch.stack([m.edge_weights(l).detach() for m in nets]).to(dt) for l in range(d)]
        B = None if nets[0].biases is None else [torch.stack([m.biases[l].detach() for m in nets]).to(dt)
                                                 for l in range(d)]
        ev = [b.long() for b in bins]
        bounds = [g * N // self.K for g in range(self.K + 1)]
        for g, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            if hi > lo:
                self._add_group(g, [t[lo:hi] for t in ev], [s[..., lo:hi] for s in S], W, B)
                self.loss_sum[:, g] += loss_b * (hi - lo)
                self.n[g] += hi - lo

    def _add_group(self, g: int, ev: list[torch.Tensor], S: list[torch.Tensor], W: list[torch.Tensor],
                   B: list[torch.Tensor] | None) -> None:
        """Row group ``g`` of one batch: events ``ev[l]`` ``(n, R_l)``, the members' stacked rows ``S[l]``
        ``(M, R_l, k, n_l, n)``, weights ``W`` and biases ``B`` (per level, member-major)."""
        tmpl, dt = self.template, self.dtype
        lad, widths, M = tmpl.ladder, self.nets[0].widths, self.M
        d, n = lad.depth, ev[0].shape[0]
        b = _ladder_parts.uniform_branching(lad)
        oh = [_one_hot_events(e, lad.events[l], dt) for l, e in enumerate(ev)]  # (R_l, m_l, n): shared
        cnt = [o.sum(-1) for o in oh]
        fb, gs = self._slot_fbar, self._slot_g
        for l in range(d + 1):
            self.counts[l][g] += cnt[l]
            R, m = lad.num_regions[l], lad.events[l]
            if l < d:
                w = widths[l]
                for i0, i1 in tmpl._direct_runs[l]:
                    q = S[l][:, :, i0:i1].reshape(M, R, (i1 - i0) * w, n).to(dt)
                    self.own[l][:, g, ..., i0 * w: i1 * w] += torch.matmul(oh[l], q.transpose(-1, -2))
            if l == 0:
                continue
            Rp, mp, bl = lad.num_regions[l - 1], lad.events[l - 1], b[l - 1]
            pair = (ev[l - 1][:, :, None] * m + torch.arange(R, device=oh[l].device).view(Rp, bl) * (mp * m)) \
                + ev[l].view(n, Rp, bl)
            pairs = event_counts(pair, R * mp * m).view(R, mp, m)
            jc = self.joint_counts[l]
            assert jc is not None
            jc[g] += pairs
            g_par = S[l - 1][:, :, gs].to(dt).transpose(-1, -2)  # (M, R_{l-1}, n, n_{l-1})
            gp = torch.matmul(oh[l].reshape(Rp, bl * m, n), g_par).reshape(M, R, m, -1)
            gp_sum = self.gp[l]
            assert gp_sum is not None
            gp_sum[:, g] += gp
            if l == d:  # x = one-hot(z): sum_n [z_c = k] g_parent is Delta W's sum, and E[x | z_parent] the pairs'
                self.dW[l - 1][:, g] += gp
                fc = pairs.to(dt).expand(M, R, mp, m)
            else:
                child = S[l][:, :, fb].to(dt)  # (M, R_l, n_l, n)
                fc = torch.stack([torch.matmul(oh[l - 1], child[:, c::bl].transpose(-1, -2)) for c in range(bl)], 2)
                fc = fc.reshape(M, R, mp, -1)
                fc_sum = self.fc[l]
                assert fc_sum is not None
                fc_sum[:, g] += fc
                dw = torch.stack([torch.matmul(child[:, c::bl], g_par) for c in range(bl)], 2)
                self.dW[l - 1][:, g] += dw.reshape(M, R, widths[l], widths[l - 1])
            self._add_derived(g, l, fc, gp, cnt, W, B)
        for l in range(d):
            self.db[l][:, g] += S[l][:, :, gs].to(dt).sum(-1)

    def _add_derived(self, g: int, l: int, fc: torch.Tensor, gp: torch.Tensor, cnt: list[torch.Tensor],
                     W: list[torch.Tensor], B: list[torch.Tensor] | None) -> None:
        """U of level l - 1 and Gf of level l from the group's edge sums (as
        :meth:`~smaso.student.frequency.FrequencyAccumulator._add_derived` on the tree, every member at once)."""
        tmpl, widths = self.template, self.nets[0].widths
        lad, M = tmpl.ladder, self.M
        Rp, mp, n_l = lad.num_regions[l - 1], lad.events[l - 1], fc.shape[-1]
        w = W[l - 1]  # (M, E, n_l, n_{l-1})
        if "U" in tmpl._derived[l - 1]:
            i = tmpl.summed.index("U")
            cols = self.own[l - 1][:, g, ..., i * widths[l - 1]: (i + 1) * widths[l - 1]]
            cols += torch.matmul(fc.reshape(M, Rp, -1, mp, n_l).transpose(2, 3).reshape(M, Rp, mp, -1),
                                 w.reshape(M, Rp, -1, w.shape[-1]))
            if B is not None:
                cols += cnt[l - 1][..., None] * B[l - 1][:, :, None, :]
        if l < lad.depth and "Gf" in tmpl._derived[l]:
            i = tmpl.summed.index("Gf")
            self.own[l][:, g, ..., i * widths[l]: (i + 1) * widths[l]] += torch.matmul(gp, w.transpose(-1, -2))

    def accumulator(self, r: int, student: LadderStudent | None = None
                    ) -> FrequencyAccumulator | ReplicateAccumulator:
        """Member ``r``'s sums as the accumulator its one-by-one pass gives (a
        :class:`~smaso.student.frequency.ReplicateAccumulator` with ``groups``), for ``student`` (default: the
        member's net; the one whose statistics they are, at these weights)."""
        student = self.nets[r] if student is None else student
        parts = []
        for g in range(self.K):
            acc = FrequencyAccumulator(student, self.dtype)
            for l in range(len(acc.counts)):
                acc.counts[l] += self.counts[l][g]
                jc, gp = self.joint_counts[l], self.gp[l]
                if jc is not None:
                    _ladder_parts.at_level(acc.joint_counts, l, "joint_counts").add_(jc[g])
                if gp is not None:
                    _ladder_parts.at_level(acc.gp, l, "gp").add_(gp[r, g])
                fc = self.fc[l] if l < len(self.fc) else None
                if fc is not None:
                    _ladder_parts.at_level(acc.fc, l, "fc").add_(fc[r, g])
            for l in range(len(self.own)):
                acc.own[l] += self.own[l][r, g]
                acc.dW[l] += self.dW[l][r, g]
                acc.db[l] += self.db[l][r, g]
            acc.n = self.n[g]
            acc.loss_sum = self.loss_sum[r, g].clone()
            parts.append(acc)
        if self.groups is None:
            return parts[0]
        rep = ReplicateAccumulator(student, self.dtype, self.groups)
        rep.parts = parts
        return rep


def member_statistics(nets: Sequence[LadderStudent], source: DataSource, *, loss: str = "squared",
                      batch_size: int = 4096, dtype: torch.dtype | None = None, groups: int | None = None
                      ) -> list[tuple[FrequencyAccumulator | ReplicateAccumulator, int]]:
    """:func:`~smaso.student.frequency.accumulate_statistics` of every member of ``nets`` over ``source``, in one
    batched pass (module docstring): per member ``(accumulator, correct)``, equal to its own pass's to round-off.

    The rows run chunk by chunk in batches of ``batch_size`` as that function's (each batch's K row blocks the
    jackknife's groups), in this process.
    """
    sums = member_sums(nets, source, loss=loss, batch_size=batch_size, dtype=dtype, groups=groups)
    correct = sums.correct.tolist()
    return [(sums.accumulator(r), correct[r]) for r in range(len(nets))]


def member_sums(nets: Sequence[LadderStudent], source: DataSource, *, loss: str = "squared", batch_size: int = 4096,
                dtype: torch.dtype | None = None, groups: int | None = None) -> MemberSums:
    """The :class:`MemberSums` of :func:`member_statistics` (each member's accumulator by
    :meth:`MemberSums.accumulator`, its correct count in ``correct``)."""
    sums = MemberSums(nets, dtype, groups)
    chunks = _student_chunks(nets[0], source)
    wdt = nets[0].weights[0].dtype
    for c in range(chunks.num_chunks):
        part = chunks.chunk(c)
        _check_label_range(nets[0], part.y, loss)
        for s in range(0, len(part), batch_size):
            rows = slice(s, min(s + batch_size, len(part)))
            sums.add(part.inputs(rows, wdt), part.y[rows], part.z[rows], loss)
    return sums
