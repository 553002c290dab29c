"""Frequency statistics of a population's members in one batched pass: a member axis over the same rows.

The members of :func:`~smaso.student.population.compare_population` (seeds and shuffled-label controls) are
measured at each checkpoint on the SAME evaluation rows and events, so everything that depends on the events
alone is built once for every member and checkpoint (:class:`MemberRows`): the rows put group-major (the
jackknife's row groups: the K blocks ``g N_b // K`` of every batch, as
:meth:`~smaso.student.frequency.ReplicateAccumulator.add`, each group's rows contiguous), each group's event counts
and (parent, child) pair counts, and the one-hot scatter matrices [z[n, r] = a] of each run of rows.  Per
checkpoint (:class:`MemberSums`) the members' explicit forward and backward (Eq 1, the fields of
:meth:`~smaso.student.network.LadderStudent.forward_backward`) run as one network of M R_l regions per level, as
the population trains, writing into one ``(M, R_l, k, n_l, N)`` buffer per level; then per run, group and level
one product gives every member's per-event sums

    own_r[l] += onehot_l (R_l, m_l, N_g) @ Q_{r,l} (R_l, N_g, k n_l)    for every member r at once

(:func:`torch.matmul` broadcasting the one-hot over the members), and likewise the edges' Fc and Gp~ sums, Delta W
(Eq 2: sum_n fbar_child g_parent^T) and the biases' sums.  U and Gf are summed per example with the other fields
(the accumulator maps its edge sums through the weights instead).  The loss sums are each batch's mean loss times
its rows in the group, the accumulator's.  So each member's :class:`~smaso.student.frequency.FrequencyAccumulator`
(or :class:`~smaso.student.frequency.ReplicateAccumulator` of the row groups) holds the same sums as its own
:func:`~smaso.student.frequency.accumulate_statistics` pass, added in another order: equal to float64 round-off,
the counts exactly (``tests/test_member_statistics.py``).

The batched pass covers the uniform tree's kernels without Batch Norm or shared weights, one-hot leaves, at most
256 events per level, a pass whose row groups are cut batch by batch (float64 batch sums, or no groups:
:func:`~smaso.student.frequency._regroup`) and at most :data:`MAX_ROWS` rows; :func:`member_statistics_supported`
says why not otherwise, and the caller then measures the members one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from smaso import _ladder_parts
from smaso.student.connectivity import tree_pre_activation
from smaso.student.frequency import (
    _ONE_HOT_MAX_EVENTS,
    _RECORD,
    TOTAL_DTYPE,
    FrequencyAccumulator,
    ReplicateAccumulator,
    _check_label_range,
    _one_hot_events,
    _regroup,
    _student_chunks,
    _student_events,
)
from smaso.student.mergeable import event_counts, event_flags, tree_pair_index
from smaso.student.network import LadderStudent, _check_float_dtype, student_loss

if TYPE_CHECKING:
    from teachers.chunked import DataSource

__all__ = ["MAX_ROWS", "MemberRows", "MemberSums", "member_statistics", "member_statistics_supported"]


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


#: Rows of a pass at most for the batched one (it holds them, group-major, between checkpoints).
MAX_ROWS = 1 << 17


class MemberRows:
    """The rows of one evaluation pass, built once for every checkpoint: what depends on the events alone.

    The rows are those :func:`~smaso.student.frequency.accumulate_statistics` runs (chunk by chunk, batches of
    ``batch_size``), each batch's K row blocks ``g N_b // K`` its groups; here they are put group-major (group g's
    rows contiguous, in pass order), so that a run of ``batch_size`` rows touches one or two groups: per run and
    group one product per level instead of one per batch and group.  Each group's event counts and (parent,
    child) pair counts, and each run's one-hot matrices per group segment, are built here once.

    :param net: a student of the members' architecture; ``source``: the rows (at most :data:`MAX_ROWS`).
    :param groups: K >= 2 row groups of every batch (the jackknife's), or None (one group).
    """

    def __init__(self, net: LadderStudent, source: DataSource, *, loss: str = "squared", batch_size: int = 4096,
                 groups: int | None = None, dtype: torch.dtype | None = None) -> None:
        why = member_statistics_supported(net, dtype, groups)
        if why is not None:
            raise ValueError(f"net: the members cannot be measured in one batched pass ({why})")
        chunks = _student_chunks(net, source)
        if len(chunks) > MAX_ROWS:
            raise ValueError(f"source: {len(chunks)} rows, more than the batched pass holds ({MAX_ROWS})")
        self.loss, self.groups, self.K = loss, groups, groups or 1
        self.dtype = _check_float_dtype(dtype or net.weights[0].dtype)
        #: the record fields whose per-event sums the accumulator holds, in its columns' order (``own[l]``)
        self.fields = [_RECORD[k] for k in FrequencyAccumulator(net, self.dtype).summed]
        if "fbar" not in self.fields or "g" not in self.fields:  # (without BN both are summed)
            raise ValueError("net: its accumulator sums no Fbar or G per example")
        wdt, dev, K = net.weights[0].dtype, net.weights[0].device, self.K
        xs, ys, zs, gid, sizes = [], [], [], [], []  # sizes: per batch its K blocks' rows
        for c in range(chunks.num_chunks):
            part = chunks.chunk(c)
            _check_label_range(net, part.y, loss)
            for lo in range(0, len(part), batch_size):
                rows = slice(lo, min(lo + batch_size, len(part)))
                n = rows.stop - rows.start
                xs.append(part.inputs(rows, wdt))
                ys.append(part.y[rows])
                zs.append(part.z[rows])
                sizes.append([(g + 1) * n // K - g * n // K for g in range(K)])
                gid.append(torch.repeat_interleave(torch.arange(K), torch.tensor(sizes[-1])))
        if not xs:
            raise ValueError("source: the dataset has no rows")
        order = torch.argsort(torch.cat(gid), stable=True)  # group-major, pass order within a group
        batch = torch.repeat_interleave(torch.arange(len(xs)), torch.tensor([len(t) for t in ys]))[order]
        self.x = torch.cat(xs)[order].to(dev)
        self.y = torch.cat(ys)[order].to(dev)
        z = _student_events(net, torch.cat(zs)[order]).to(dev)
        lad = self.ladder = net.ladder
        d, off = lad.depth, lad.level_offsets
        bins = [z[:, off[l]: off[l + 1]] for l in range(d + 1)]
        event_flags(bins, lad.events, [None if lad.is_uniform() else torch.tensor(lad.region_events[l], device=dev)
                                       for l in range(d + 1)])  # (the CPU raises a bad row's error here)
        ev = [b.long() for b in bins]
        #: (K, batches) rows of group g in batch b; per batch its rows' positions here (the batch-mean losses)
        self.sizes = torch.tensor(sizes, dtype=TOTAL_DTYPE).T
        self.batches = [torch.nonzero(batch == b).flatten() for b in range(len(xs))]
        per_group = self.sizes.sum(1).long().tolist()
        self.n = per_group
        bounds = [sum(per_group[:g]) for g in range(K + 1)]
        self.counts = [torch.zeros(K, lad.num_regions[l], lad.events[l], dtype=TOTAL_DTYPE, device=dev)
                       for l in range(d + 1)]
        self.joint_counts: list[torch.Tensor | None] = [None] + [
            torch.zeros(K, lad.num_regions[l], lad.events[l - 1], lad.events[l], dtype=TOTAL_DTYPE, device=dev)
            for l in range(1, d + 1)]
        for g in range(K):  # integers: exact in any order
            e = [t[bounds[g]: bounds[g + 1]] for t in ev]
            for l in range(d + 1):
                R, m = lad.num_regions[l], lad.events[l]
                self.counts[l][g] = event_counts(e[l] + torch.arange(R, device=dev) * m, R * m).view(R, m)
                if l:
                    mp = lad.events[l - 1]
                    pair = tree_pair_index(e[l - 1], e[l], m, torch.arange(R, device=dev) * (mp * m))
                    jc = self.joint_counts[l]
                    assert jc is not None
                    jc[g] = event_counts(pair, R * mp * m).view(R, mp, m)
        #: runs of ``batch_size`` rows ``(lo, hi, segments)``, each segment ``(g, a, b, one-hot per level)``: rows
        #: a:b of the run, of group g
        self.runs: list[tuple[int, int, list[tuple[int, int, int, list[torch.Tensor]]]]] = []
        N = self.x.shape[0]
        for lo in range(0, N, batch_size):
            hi, segs = min(lo + batch_size, N), []
            for g in range(K):
                a, e_ = max(lo, bounds[g]), min(hi, bounds[g + 1])
                if e_ > a:
                    segs.append((g, a - lo, e_ - lo, [_one_hot_events(t[a:e_], lad.events[l], self.dtype)
                                                      for l, t in enumerate(ev)]))
            self.runs.append((lo, hi, segs))


class MemberSums:
    """The per-event sums of M members of one architecture over one pass's :class:`MemberRows` (module
    docstring): every :class:`~smaso.student.frequency.FrequencyAccumulator` sum with leading ``(M, K)`` axes, in
    float64 totals, the event counts the rows'.

    U and Gf are summed per example like the other fields (one product per level for every field; the accumulator
    maps its edge sums through the weights instead: the same sums to round-off).

    :param nets: the M members (one architecture, :func:`member_statistics_supported`), at their weights.
    :param rows: the pass's rows, built for a student of that architecture.
    """

    def __init__(self, nets: Sequence[LadderStudent], rows: MemberRows) -> None:
        if not nets:
            raise ValueError("nets: expected at least one member")
        net = nets[0]
        for r, m in enumerate(nets):
            why = member_statistics_supported(m, rows.dtype, rows.groups)
            if why is not None:
                raise ValueError(f"nets[{r}]: the members cannot be measured in one batched pass ({why})")
            if m.widths != net.widths or m.ladder.fingerprint() != rows.ladder.fingerprint() \
                    or m.stacked_fields() != net.stacked_fields() or (m.biases is None) != (net.biases is None):
                raise ValueError(f"nets[{r}]: every member must have the architecture of nets[0] and of the rows")
        self.nets, self.rows, self.dtype = list(nets), rows, rows.dtype
        lad, n, dev = net.ladder, net.widths, net.weights[0].device
        d, M, K = lad.depth, len(nets), rows.K
        E = [net.num_edges(l) for l in range(d)]
        keys = rows.fields

        def zeros(*shape: int) -> torch.Tensor:
            return torch.zeros(*shape, dtype=TOTAL_DTYPE, device=dev)

        self.own = [zeros(M, K, lad.num_regions[l], lad.events[l], len(keys) * n[l]) for l in range(d)]
        self.fc = [None] + [zeros(M, K, E[l - 1], lad.events[l - 1], n[l]) for l in range(1, d)]
        self.gp = [None] + [zeros(M, K, E[l - 1], lad.events[l], n[l - 1]) for l in range(1, d + 1)]
        self.dW = [zeros(M, K, E[l], n[l + 1], n[l]) for l in range(d)]
        self.db = [zeros(M, K, lad.num_regions[l], n[l]) for l in range(d)]
        self._slot_fbar, self._slot_g = keys.index("fbar"), keys.index("g")
        # the members' weights and biases as one level of M R_l regions, member-major (as the population trains)
        self._W = [torch.stack([m.edge_weights(l).detach() for m in nets]).flatten(0, 1) for l in range(d)]
        biases = [m.biases for m in nets]  # (all or none: checked above)
        self._b = None if net.biases is None else [torch.stack([b[l].detach() for b in biases if b is not None])
                                                   .flatten(0, 1) for l in range(d)]
        N = rows.x.shape[0]
        out = torch.empty(M, N, n[0], dtype=net.weights[0].dtype, device=dev)  # the members' outputs
        buffers: dict[int, list[torch.Tensor]] = {}
        with torch.no_grad():
            for lo, hi, segs in rows.runs:
                S = buffers.get(hi - lo)
                if S is None:
                    S = buffers[hi - lo] = [torch.empty(M, lad.num_regions[l], len(keys), n[l], hi - lo,
                                                        dtype=net.weights[0].dtype, device=dev) for l in range(d)]
                out[:, lo:hi] = self._forward_backward(rows.x[lo:hi], rows.y[lo:hi], S).transpose(1, 2)
                for g, a, b, oh in segs:
                    self._add_segment(g, oh, [s[..., a:b] for s in S])
            # each batch's mean loss (the record's), times its rows in each group: the accumulator's loss sums
            loss_b = torch.stack([torch.stack([student_loss(out[r, idx], rows.y[idx], rows.loss)
                                               for idx in rows.batches]) for r in range(M)]).to(TOTAL_DTYPE)
            self.loss_sum = loss_b @ rows.sizes.T.to(dev)  # (M, K)
            self.correct = (out.argmax(-1) == rows.y).sum(-1)

    def _forward_backward(self, x: torch.Tensor, y: torch.Tensor, S: list[torch.Tensor]) -> torch.Tensor:
        """Every member's explicit forward and backward pass on one run of rows ``x`` ``(n, R_d, dim)``, ``y``
        ``(n,)`` at once (Eq 1; :meth:`~smaso.student.network.LadderStudent.forward_backward`'s fields without
        Batch Norm, each member's regions a block of one level of M R_l regions, as
        :func:`~smaso.student.population.train_ladder_population`), the fields the accumulator sums
        (:attr:`MemberRows.fields`) written into ``S[l]`` ``(M, R_l, k, n_l, n)``.  Returns the members' outputs
        ``(M, n_0, n)``."""
        net, keys, M = self.nets[0], self.rows.fields, len(self.nets)
        lad, d, n = net.ladder, net.ladder.depth, x.shape[0]

        def put(l: int, key: str, value: torch.Tensor) -> torch.Tensor:
            """``value`` ``(M R_l, n_l, n)`` into its slot of the buffer (a view) where it is summed."""
            return S[l][:, :, keys.index(key)].flatten(0, 1).copy_(value) if key in keys else value

        leaves = x.permute(1, 2, 0).reshape(lad.num_regions[d - 1], -1, n)  # grouped by parent: the same for all
        h = leaves.expand(M, *leaves.shape).reshape(-1, *leaves.shape[1:])
        deriv: list[torch.Tensor] = [h] * d
        for l in range(d - 1, -1, -1):
            u = put(l, "u", tree_pre_activation(self._W[l], h, None if self._b is None else self._b[l]))
            a = net.act(l)
            s = put(l, "slope", a.slope(u))
            deriv[l] = put(l, "deriv", s if a.homogeneous else a.derivative(u))
            h = put(l, "fbar", torch.mul(s, u))  # (the next level's input, grouped by parent below)
            if l:
                h = h.reshape(M * lad.num_regions[l - 1], -1, n)
        out = h  # (M, n_0, n): R_0 = 1
        target = F.one_hot(y.long(), out.shape[1]).to(out.dtype).T
        g_raw = target - (out if self.rows.loss == "squared" else out.softmax(1))  # (as _output_gradient)
        for l in range(d):
            g = put(l, "g", torch.mul(deriv[l], put(l, "g_f", g_raw)))
            if l + 1 < d:  # the children's raw gradient W g (Eq 1; tree_backward's second product)
                W = self._W[l]
                g_raw = torch.bmm(W.reshape(g.shape[0], -1, g.shape[1]), g).reshape(W.shape[0], W.shape[1], n)
        return out

    def _add_segment(self, g: int, oh: list[torch.Tensor], S: list[torch.Tensor]) -> None:
        """Rows of group ``g`` in one run: their one-hot matrices ``oh[l]`` ``(R_l, m_l, n)`` and the members'
        stacked rows ``S[l]`` ``(M, R_l, k, n_l, n)``."""
        lad, dt, M = self.rows.ladder, self.dtype, len(self.nets)
        widths, d = self.nets[0].widths, lad.depth
        br = _ladder_parts.uniform_branching(lad)
        n = oh[0].shape[-1]
        fb, gs = self._slot_fbar, self._slot_g
        for l in range(d + 1):
            R, m = lad.num_regions[l], lad.events[l]
            if l < d:  # every field of the level in one product: (R, m, n) @ (M, R, n, k n_l)
                q = S[l].reshape(M, R, -1, n).to(dt)
                self.own[l][:, g] += torch.matmul(oh[l], q.transpose(-1, -2))
                self.db[l][:, g] += S[l][:, :, gs].to(dt).sum(-1)
            if l == 0:
                continue
            Rp, b = lad.num_regions[l - 1], br[l - 1]
            g_par = S[l - 1][:, :, gs].to(dt).transpose(-1, -2)  # (M, R_{l-1}, n, n_{l-1})
            gp = torch.matmul(oh[l].reshape(Rp, b * m, n), g_par).reshape(M, R, m, -1)
            gp_sum = self.gp[l]
            assert gp_sum is not None
            gp_sum[:, g] += gp
            if l == d:  # x = one-hot(z): sum_n [z_c = k] g_parent is also Delta W's sum
                self.dW[l - 1][:, g] += gp
                continue
            child = S[l][:, :, fb].to(dt).reshape(M, Rp, b, widths[l], n)  # child c of parent p: region p b + c
            fc_sum = self.fc[l]
            assert fc_sum is not None
            fc_sum[:, g] += torch.matmul(oh[l - 1][:, None], child.transpose(-1, -2)).reshape(M, R, lad.events[l - 1],
                                                                                              widths[l])
            self.dW[l - 1][:, g] += torch.matmul(child, g_par[:, :, None]).reshape(M, R, widths[l], widths[l - 1])

    def accumulator(self, r: int, student: LadderStudent | None = None
                    ) -> FrequencyAccumulator | ReplicateAccumulator:
        """Member ``r``'s sums as the accumulator its one-by-one pass gives (a
        :class:`~smaso.student.frequency.ReplicateAccumulator` with ``groups``), for ``student`` (default: the
        member's net; the one whose statistics they are, at these weights)."""
        student = self.nets[r] if student is None else student
        rows = self.rows
        parts = []
        for g in range(rows.K):
            acc = FrequencyAccumulator(student, self.dtype)
            for l in range(len(acc.counts)):
                acc.counts[l] += rows.counts[l][g]
                for mine, ours in ((acc.joint_counts, rows.joint_counts[l]), (acc.gp, self.gp[l]),
                                   (acc.fc, self.fc[l] if l < len(self.fc) else None)):
                    if ours is not None:
                        _ladder_parts.at_level(mine, l, "sums").add_(ours[g] if ours is rows.joint_counts[l]
                                                                     else ours[r, g])
            for l in range(len(self.own)):
                acc.own[l] += self.own[l][r, g]
                acc.dW[l] += self.dW[l][r, g]
                acc.db[l] += self.db[l][r, g]
            acc.n = rows.n[g]
            acc.loss_sum = self.loss_sum[r, g].clone()
            parts.append(acc)
        if rows.groups is None:
            return parts[0]
        rep = ReplicateAccumulator(student, self.dtype, rows.groups)
        rep.parts = parts
        return rep


def member_statistics(nets: Sequence[LadderStudent], source: DataSource, *, loss: str = "squared",
                      batch_size: int = 4096, dtype: torch.dtype | None = None, groups: int | None = None
                      ) -> list[tuple[FrequencyAccumulator | ReplicateAccumulator, int]]:
    """:func:`~smaso.student.frequency.accumulate_statistics` of every member of ``nets`` over ``source``, in one
    batched pass (module docstring): per member ``(accumulator, correct)``, equal to its own pass's to round-off.
    """
    sums = MemberSums(nets, MemberRows(nets[0], source, loss=loss, batch_size=batch_size, groups=groups,
                                       dtype=dtype))
    correct = sums.correct.tolist()
    return [(sums.accumulator(r), correct[r]) for r in range(len(nets))]
