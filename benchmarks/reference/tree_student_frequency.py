"""Reference copy of ``smaso/student/frequency.py`` as of commit 3494c95 (before the one student of every
ladder), kept for ``benchmarks/bench_student.py`` and ``benchmarks/bench_graph_statistics.py``: the
uniform-tree code the one student is timed against.  Only imports changed (the record and student from
:mod:`tree_student_network`) and ``ladder.parents(l)`` became ``ladder.parent_index(l)``.  Not part of the
library; uniform trees only.

Frequency statistics: the student's activations, gates and gradients averaged per teacher event.

For every region alpha (level l) and node j of its group, over the examples of a dataset
(framework paper Eq 6):

    F[a, j]    = E[f_j | z_alpha = a]       Fbar: the same after BN (= F without BN)
    D[a, j]    = E[s_j | z_alpha = a]       forward gate, s = f / u (0/1 for ReLU)
    Dp[a, j]   = E[f'_j | z_alpha = a]      backward gate (= D for ReLU)
    G[a, j]    = E[g_j | z_alpha = a]       G~ = diag(P(z_alpha)) G
    U, Gf      = E[u | z], E[g_f | z]       raw activation and gradient (for the diagnosis)
    Fc[a, k]   = E[fbar_k | z_parent = a]   child k's output given its *parent's* event (focus)
    Gp~[b, j]  = P(z_b = b) E[g_j | z_child = b]   parent j's gradient given a child's event (broadness)

All are per-event sums accumulated by one scatter per level and batch (a batched matmul with
the events' one-hot matrix, ~10x faster on CPU than ``index_add_``; ``index_add_`` for regions
with more than 256 events), so they stream over batches; they are kept in the student's dtype,
or in float64 when asked.  Events never observed are
reported in ``empty_events`` and their rows are zero, never 0/0.  ``dW`` is the measured
weight update E_x[fbar_b g_a] averaged over the batches.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from tree_student_network import LadderStudent, StudentRecord

from teachers.ladder import Ladder
from teachers.statistics import EventStatistics

__all__ = ["FrequencyAccumulator", "FrequencyStatistics", "MergeableSums", "PerEventMeans", "collect_statistics",
           "negated_state", "record_rows"]

# per-level quantities, in the order they are stacked for the single scatter per level,
# and the StudentRecord field each one averages
_OWN = ("Fbar", "F", "D", "Dp", "U", "G", "Gf")
_RECORD = {"Fbar": "fbar", "F": "f", "D": "slope", "Dp": "deriv", "U": "u", "G": "g", "Gf": "g_f"}


class PerEventMeans:
    """What measured per-event statistics share: ``counts`` ``(R_l, m_l)`` per level, ``num_examples`` and the
    dict ``means`` of per-level means, each of which also reads as an attribute (``stats.G``)."""

    counts: list[torch.Tensor]
    num_examples: int
    means: dict[str, list[torch.Tensor | None]]

    def __getattr__(self, name):
        means = self.__dict__.get("means")
        if means is not None and name in means:
            return means[name]
        raise AttributeError(name)

    @property
    def p(self) -> list[torch.Tensor]:
        """Empirical P(z_alpha): ``(R_l, m_l)`` per level."""
        return [c / self.num_examples for c in self.counts]

    @property
    def G_tilde(self) -> list[torch.Tensor | None]:
        """G~ = diag(P(z)) G (Eq 6): ``(R_l, m_l, n_l)``."""
        return [None if g is None else g * p[..., None].to(g) for g, p in zip(self.means["G"], self.p, strict=True)]


@dataclass
class FrequencyStatistics(PerEventMeans):
    """Measured per-event statistics of a student on a dataset (see the module docstring).

    Dicts map a quantity name to a list over levels ``l = 0..d`` of ``(R_l, m_l, n_l)`` tensors
    (None where undefined: at the leaves only ``Fbar`` = E[x | z]).  ``Fc[l]`` is
    ``(R_l, m_{l-1}, n_l)`` and ``Gp_tilde[l]`` is ``(R_l, m_l, n_{l-1})`` (l >= 1).
    ``counts[l]``: ``(R_l, m_l)`` example counts; ``P``: the empirical event statistics.
    """

    ladder: Ladder
    num_examples: int
    counts: list[torch.Tensor]
    means: dict[str, list[torch.Tensor | None]]
    Fc: list[torch.Tensor | None]
    Gp_tilde: list[torch.Tensor | None]
    dW: list[torch.Tensor]
    db: list[torch.Tensor] | None
    P: EventStatistics
    loss: float

    def __repr__(self) -> str:
        sizes = [int(c.shape[0]) for c in self.counts]
        return (f"FrequencyStatistics(num_examples={self.num_examples}, levels={len(self.counts)}, "
                f"regions per level={sizes}, quantities={sorted(self.means)}, loss={self.loss:.4g})")

    @property
    def empty_events(self) -> list[list[tuple[int, int]]]:
        """``[(region, event), ...]`` per level: events never observed in the data."""
        return [[tuple(v) for v in (c == 0).nonzero().tolist()] for c in self.counts]


_ONE_HOT_MAX_EVENTS = 256


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


_PER_EXAMPLE = ("u", "f", "fbar", "slope", "deriv", "f_tilde", "g_raw", "g_f", "g")


def record_rows(rec: StudentRecord, rows: slice) -> StudentRecord:
    """The rows ``rows`` of a batch's record, as a record of its own.

    Per-example fields (``(N, R_l, n_l)``) and the stacked buffers (``(R_l, k, n_l, N)``) are sliced
    (views); ``dW`` and ``db`` are recomputed as the means over these rows (Eq 2: E[fbar_b g_a]
    and E[g_a]).  Batch-level quantities stay those of the whole batch: BN's ``sigma`` and the
    parameter updates ``dc1``/``dc0`` (the rows were normalized with the batch's statistics), and
    ``loss`` (the batch mean; the record keeps no per-example loss).
    """
    if not isinstance(rows, slice) or rows.step not in (None, 1):
        raise TypeError(f"rows: expected a slice with step 1, got {rows!r}")
    n_all = rec.fbar[0].shape[0]
    lo, hi, _ = rows.indices(n_all)
    if hi <= lo:
        raise ValueError(f"rows: expected a non-empty range of the batch's {n_all} rows, got {rows!r}")
    sl = slice(lo, hi)
    per = {k: [None if t is None else t[sl] for t in getattr(rec, k)] for k in _PER_EXAMPLE}
    d = len(rec.fbar) - 1
    dW, db = [None] * len(rec.dW), [None] * len(rec.db)
    for l in range(d):
        g, child = per["g"][l], per["fbar"][l + 1]  # (n, R_l, n_l), (n, R_{l+1}, n_{l+1})
        grouped = child.reshape(hi - lo, g.shape[1], -1)  # children grouped by parent
        dW[l] = (torch.einsum("nrk,nrj->rkj", grouped, g) / (hi - lo)).reshape(rec.dW[l].shape)
        db[l] = g.mean(0)
    stacked = None if rec.stacked is None else [buf[..., sl] for buf in rec.stacked]
    return dataclasses.replace(rec, **per, dW=dW, db=db, stacked=stacked)


class MergeableSums:
    """The mergeable state of an accumulator (torchmetrics-style): an example count ``n``, a ``loss_sum``
    and the lists of per-level tensors named in ``_SUMS`` (None where a level has none).

    Two partial states over disjoint rows add up (:meth:`merge_`) to the state of one pass over all of
    them; :meth:`state_dict` is what moves between processes.
    """

    _SUMS: tuple[str, ...] = ()
    n: int
    loss_sum: float

    def state_dict(self) -> dict:
        """The accumulated state: example count, loss sum, and every per-event sum (cloned)."""
        return {"n": self.n, "loss_sum": self.loss_sum,
                **{k: [None if t is None else t.clone() for t in getattr(self, k)] for k in self._SUMS}}

    def merge_(self, other):
        """Add another accumulator's state (or its :meth:`state_dict`) to this one, in place; returns self.

        Exact for the counts; the sums are added in the accumulation dtype (use float64 for sums that
        agree with one pass to round-off).

        :raises TypeError: ``other`` is neither such an accumulator nor its state.
        :raises ValueError: the other state was accumulated for a student of other widths, another teacher or
            another accumulation dtype.
        """
        state = other.state_dict() if isinstance(other, type(self)) else other
        if not isinstance(state, dict) or set(state) != {"n", "loss_sum", *self._SUMS}:
            raise TypeError(f"other: expected a {type(self).__name__} or its state_dict()")
        for key in self._SUMS:
            shapes = [None if t is None else (tuple(t.shape), t.dtype) for t in getattr(self, key)]
            if shapes != [None if t is None else (tuple(t.shape), t.dtype) for t in state[key]]:
                raise ValueError(f"other: its {key!r} sums have other shapes or dtypes (another student, teacher "
                                 "or accumulation dtype)")
        for key in self._SUMS:
            for mine, theirs in zip(getattr(self, key), state[key], strict=True):
                if mine is not None:
                    mine += theirs.to(mine.device)
        self.n += int(state["n"])
        self.loss_sum += float(state["loss_sum"])
        return self

    __iadd__ = merge_


def negated_state(state: dict) -> dict:
    """``-state`` of a :meth:`MergeableSums.state_dict` (merging it subtracts those rows: the jackknife's
    leave-one-out states)."""
    return {k: (-v if k in ("n", "loss_sum") else [None if t is None else -t for t in v]) for k, v in state.items()}


class FrequencyAccumulator(MergeableSums):
    """Streams :class:`StudentRecord` batches into per-event sums.

    Per batch and level: one bincount of (parent, child) event pairs (event counts are the row
    sums of the level's one-hot event matrix, or the margins of the pair counts), and one batched
    matmul of that one-hot matrix with the stacked per-example quantities.  Quantities that
    coincide are summed once (F = Fbar without BN; D' = D for ReLU-like activations); with one-hot
    leaves the leaf sums follow from the counts and from Delta W exactly (x is a function of z), so
    the leaf level costs no scatter.

    :param student: the student (gives the widths).
    :param dtype: accumulation dtype (default: the student's; float64 for exact sums).
    """

    def __init__(self, student: LadderStudent, dtype: torch.dtype | None = None):
        dtype = dtype or student.weights[0].dtype
        self.student, self.ladder, self.dtype = student, student.ladder, dtype
        lad, n = self.ladder, student.widths
        dev = student.weights[0].device
        self.device = dev
        d = lad.depth
        # which of _OWN are summed (the others are copies of one of them)
        self.summed = [k for k in _OWN if not (k == "F" and not student.batch_norm)
                       and not (k == "Dp" and student.activation.homogeneous and student.top_activation.homogeneous)]
        self.onehot_leaves = lad.emission.kind == "onehot"
        self.counts = [torch.zeros(lad.num_regions[l], lad.events[l], dtype=torch.float64, device=dev)
                       for l in range(d + 1)]
        self.joint_counts = [None] + [torch.zeros(lad.num_regions[l], lad.events[l - 1], lad.events[l],
                                                  dtype=torch.float64, device=dev) for l in range(1, d + 1)]
        width = [len(self.summed) * n[l] for l in range(d)] + [n[d]]
        self.own = [torch.zeros(lad.num_regions[l], lad.events[l], width[l], dtype=dtype, device=dev)
                    for l in range(d + 1)]
        self.fc = [None] + [torch.zeros(lad.num_regions[l], lad.events[l - 1], n[l], dtype=dtype, device=dev)
                            for l in range(1, d + 1)]
        self.gp = [None] + [torch.zeros(lad.num_regions[l], lad.events[l], n[l - 1], dtype=dtype, device=dev)
                            for l in range(1, d + 1)]
        self.dW = [torch.zeros_like(w, dtype=dtype) for w in student.weights]
        self.db = [torch.zeros(lad.num_regions[l], n[l], dtype=dtype, device=dev) for l in range(d)]
        self.n = 0
        self.loss_sum = 0.0
        # flat bincount index of the (parent, child) event pair of child region r = (p, c) (parent p,
        # position c): (r m_p + a_p) m + a.  int32 (half the memory traffic of int64, and the leaf
        # level's index arithmetic is a large part of a batch's cost) unless a level has 2^31 bins or more
        bins = max(lad.num_regions[l] * lad.events[l] * (lad.events[l - 1] if l else 1) for l in range(d + 1))
        self._index_dtype = torch.int32 if bins < 2**31 else torch.int64
        idt = self._index_dtype
        self._pair_offset = [None] + [
            (torch.arange(lad.num_regions[l], device=dev, dtype=idt) * lad.events[l - 1] * lad.events[l]).view(
                lad.num_regions[l - 1], lad.branching[l - 1]) for l in range(1, d + 1)]
        self._one_hot_buffers: dict[tuple[int, int], torch.Tensor] = {}

    def add(self, rec: StudentRecord, z: torch.Tensor, rows: slice | None = None) -> None:
        """Add one batch: ``rec`` from ``student.forward_backward`` and its events ``z`` ``(N, regions)``.

        :param rows: add only these rows of the batch (a ``slice`` with step 1; see :func:`record_rows`):
            how :class:`~smaso.student.noise.ReplicateAccumulator` splits a batch into groups without
            changing BN's batch statistics.
        """
        if rows is not None:
            rec, z = record_rows(rec, rows), z[rows]
        lad, dt = self.ladder, self.dtype
        d, off = lad.depth, lad.level_offsets
        n = z.shape[0]
        z = z.to(self.device, self._index_dtype)
        bins = [z[:, off[l]: off[l + 1]] for l in range(d + 1)]  # events, for bincount arithmetic
        for l, ev in enumerate(bins):
            lo, hi = torch.aminmax(ev) if ev.numel() else (0, 0)
            if lo < 0 or hi >= lad.events[l]:
                raise ValueError(f"z: level {l} holds events outside [0, {lad.events[l]}): the dataset's ladder does "
                                 "not match the student's")
        small = [lad.events[l] <= _ONE_HOT_MAX_EVENTS for l in range(d + 1)]
        stacked = rec.stacked is not None and tuple(rec.stacked_fields) == tuple(_RECORD[k] for k in self.summed)
        # int64 events where torch needs them (scatter indices); not the one-hot leaves, the widest level
        levels = [None if l == d and self.onehot_leaves else ev.long() for l, ev in enumerate(bins)]
        try:
            one_hot = [self._set_one_hot(l, levels[l]) if small[l] and (l < d or not self.onehot_leaves)
                       else None for l in range(d + 1)]
            self._add_sums(rec, levels, bins, one_hot, small, stacked, n)
        except BaseException:
            self._one_hot_buffers.clear()  # a buffer may hold ones of this batch: rebuild from zeros next time
            raise
        for l, ev in enumerate(levels):  # put the one-hot buffers back to zero: N R writes, not R m N
            if one_hot[l] is not None:
                one_hot[l].scatter_(1, ev.T.unsqueeze(1), 0.0)
        for l in range(d):
            self.dW[l] += rec.dW[l].to(dt) * n
            self.db[l] += rec.db[l].to(dt) * n
        self.n += n
        self.loss_sum += rec.loss * n

    # ------------------------------------------------------------------ mergeable state
    _SUMS = ("counts", "joint_counts", "own", "fc", "gp", "dW", "db")

    def _set_one_hot(self, level: int, ev: torch.Tensor) -> torch.Tensor:
        """The level's ``(R, m, N)`` scatter matrix [z[n, r] = a], in a buffer kept between batches
        (a fresh R m N allocation costs page faults and a fill on every batch)."""
        R, m = self.ladder.num_regions[level], self.ladder.events[level]
        key = (level, ev.shape[0])  # by size too: groups of a batch alternate between two sizes
        buf = self._one_hot_buffers.get(key)
        if buf is None:
            if len(self._one_hot_buffers) > 4 * (self.ladder.depth + 1):
                self._one_hot_buffers.clear()
            buf = self._one_hot_buffers[key] = torch.zeros(R, m, ev.shape[0], dtype=self.dtype, device=self.device)
        return buf.scatter_(1, ev.T.unsqueeze(1), 1.0)

    def _add_sums(self, rec: StudentRecord, levels: list, bins: list[torch.Tensor], one_hot: list,
                  small: list[bool], stacked: bool, n: int) -> None:
        """Counts, joint counts and per-event sums of one batch (the body of :meth:`add`)."""
        lad, dt = self.ladder, self.dtype
        d = lad.depth
        for l in range(d + 1):
            R, m = lad.num_regions[l], lad.events[l]
            # counts: row sums of the scatter matrix where there is one (0/1 sums, exact in float32 up
            # to 2^24 examples per batch), else margins of the (parent, child) counts below; the
            # root (one region) without one is a plain bincount
            if one_hot[l] is not None:
                self.counts[l] += one_hot[l].sum(-1)
            elif l == 0:
                self.counts[0] += torch.bincount(bins[0].reshape(-1), minlength=m).reshape(1, m)
            if l < d and small[l] and stacked:
                # every quantity of the level at once: (R, m, N) @ (R, N, k n); one wide matmul is
                # ~2.5x faster than k narrow ones (n = 16 columns each) on CPU
                buf = rec.stacked[l].to(dt)
                self.own[l] += torch.bmm(one_hot[l], buf.reshape(buf.shape[0], -1, n).transpose(1, 2))
            elif l < d and small[l]:
                # one matmul per quantity on its transposed view: cheaper than concatenating them first
                w = self.student.widths[l]
                for i, key in enumerate(self.summed):
                    q = getattr(rec, _RECORD[key])[l].to(dt)
                    self.own[l][..., i * w: (i + 1) * w] += torch.bmm(one_hot[l], q.transpose(0, 1))
            elif l < d:
                stack = torch.cat([getattr(rec, _RECORD[k])[l] for k in self.summed], -1)
                self.own[l] += scatter_sums(levels[l], stack, m, dt)
            elif not self.onehot_leaves:
                self.own[l] += scatter_sums(levels[l], rec.fbar[l], m, dt, one_hot[l])
            if l == 0:
                continue
            b, mp, Rp = lad.branching[l - 1], lad.events[l - 1], lad.num_regions[l - 1]
            pair = (bins[l - 1][:, :, None] * m + self._pair_offset[l]) + bins[l].view(n, Rp, b)
            pairs = torch.bincount(pair.reshape(-1), minlength=R * mp * m).reshape(R, mp, m)
            self.joint_counts[l] += pairs
            if one_hot[l] is None:
                self.counts[l] += pairs.sum(1)
            if l == d and self.onehot_leaves:
                # x = one-hot(z): E[x | z_parent] follows from the joint counts, and
                # sum_n [z_c = k] g_parent = N * Delta W[c, k, :] exactly
                self.gp[l] += rec.dW[l - 1].to(dt) * n
                continue
            if small[l] and small[l - 1]:
                # grouped by parent region: no per-child copies of the parents' tensors
                g_par = rec.g[l - 1].transpose(0, 1).to(dt)  # (R_{l-1}, N, n_{l-1})
                self.gp[l] += torch.bmm(one_hot[l].reshape(Rp, b * m, n), g_par).reshape(R, m, -1)
                # child position c of every parent: a strided batch of the children's node-major outputs
                child = rec.fbar[l].permute(1, 2, 0).to(dt)  # (R_l, n_l, N)
                fc = self.fc[l].view(Rp, b, mp, -1)
                for c in range(b):
                    fc[:, c] += torch.bmm(one_hot[l - 1], child[c::b].transpose(1, 2))
            else:
                par = levels[l - 1].repeat_interleave(b, dim=1)  # each child's parent event
                self.fc[l] += scatter_sums(par, rec.fbar[l], mp, dt)
                self.gp[l] += scatter_sums(levels[l], rec.g[l - 1].repeat_interleave(b, dim=1), m, dt)

    def result(self) -> FrequencyStatistics:
        """Normalize the sums into :class:`FrequencyStatistics`."""
        if self.n == 0:
            raise ValueError("no examples were added")
        lad, widths = self.ladder, self.student.widths
        d = lad.depth
        counts = [c.cpu() for c in self.counts]
        joints = [None] + [j.cpu() / self.n for j in self.joint_counts[1:]]
        P = EventStatistics(lad, [c / self.n for c in counts], joints, self.n)
        means: dict[str, list] = {k: [None] * (d + 1) for k in _OWN}
        for l in range(d + 1):
            safe = counts[l].clamp(min=1)[..., None].to(self.own[l])  # empty events: sums are 0, rows stay 0
            if l == d and self.onehot_leaves:
                eye = torch.eye(lad.events[d], dtype=self.dtype)
                means["Fbar"][l] = eye * (counts[l] > 0)[..., None]
                continue
            mean = self.own[l].cpu() / safe.cpu()
            if l == d:
                means["Fbar"][l] = mean
                continue
            for i, key in enumerate(self.summed):
                means[key][l] = mean[..., i * widths[l]: (i + 1) * widths[l]]
            if means["F"][l] is None:
                means["F"][l] = means["Fbar"][l]
            if means["Dp"][l] is None:
                means["Dp"][l] = means["D"][l]
        fc, gp = [None] * (d + 1), [None] * (d + 1)
        for l in range(1, d + 1):
            if l == d and self.onehot_leaves:
                fc[l] = P.P_down[l].to(self.dtype)  # E[one-hot(z_c) | z_parent] = P(z_c | z_parent)
            else:
                parent_counts = counts[l - 1][lad.parent_index(l)]  # (R_l, m_{l-1})
                fc[l] = self.fc[l].cpu() / parent_counts.clamp(min=1)[..., None].to(self.dtype)
            gp[l] = self.gp[l].cpu() / self.n  # P(z_b) E[g | z_b] = sum / N
        return FrequencyStatistics(lad, self.n, counts, means, fc, gp,
                                   [w.cpu() / self.n for w in self.dW], [b.cpu() / self.n for b in self.db],
                                   P, self.loss_sum / self.n)


def collect_statistics(student: LadderStudent, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, *,
                       loss: str = "squared", batch_size: int | None = None,
                       dtype: torch.dtype | None = None, groups: int | None = None):
    """One pass over a dataset at fixed weights: forward, explicit backward, per-event sums.

    :param x: ``(N, R_d, dim)`` inputs; ``y``: ``(N,)`` labels; ``z``: ``(N, regions)`` events.
    :param batch_size: examples per batch (default: all at once, i.e. full-batch GD and BN
        statistics of the whole set, which is what the reformulation describes).
    :param dtype: accumulation dtype (default: the student's; pass float64 for exact sums).
    :param groups: ``K``: return the :class:`~smaso.student.noise.ReplicateAccumulator` of K row
        groups (its ``result()`` is the statistics; its ``leave_one_out()`` the jackknife's) instead
        of the :class:`FrequencyStatistics`.
    """
    lad = student.ladder
    if not isinstance(z, torch.Tensor) or z.dim() != 2 or z.shape[1] != lad.total_regions:
        raise ValueError(f"z: expected the (N, {lad.total_regions}) events of every region of the student's ladder, "
                         f"got {tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__}")
    if not (x.shape[0] == y.shape[0] == z.shape[0]):
        raise ValueError(f"x, y, z: expected the same number of examples, got {x.shape[0]}, {y.shape[0]}, {z.shape[0]}")
    if x.shape[0] == 0:
        raise ValueError("x: the dataset is empty")
    acc = _accumulator(student, dtype, groups)
    bs = x.shape[0] if batch_size is None else int(batch_size)
    if bs <= 0:
        raise ValueError(f"batch_size: expected a positive integer, got {batch_size!r}")
    dev = student.weights[0].device
    buffers: list | bool = True
    for s in range(0, x.shape[0], bs):
        rec = student.forward_backward(x[s: s + bs].to(dev), y[s: s + bs].to(dev), loss, stacked=buffers)
        acc.add(rec, z[s: s + bs])
        buffers = rec.stacked  # the next batch writes into the same memory
    return acc if groups is not None else acc.result()


def _accumulator(student: LadderStudent, dtype: torch.dtype | None, groups: int | None):
    if groups is None:
        return FrequencyAccumulator(student, dtype)
    from smaso.student.noise import ReplicateAccumulator

    return ReplicateAccumulator(student, dtype, groups)


def _chunk_statistics(c: int, student: LadderStudent, chunks, loss: str, batch_size: int,
                      dtype: torch.dtype | None, groups: int | None = None) -> tuple[dict, int]:
    """The task of one chunk (any process): its rows in batches of ``batch_size`` into a fresh accumulator.

    :returns: ``(state_dict, correct)``: the accumulator's state and how many of the chunk's examples
        the student classifies correctly.
    """
    part = chunks.chunk(c)
    acc = _accumulator(student, dtype, groups)
    dev = student.weights[0].device
    wdt = student.weights[0].dtype
    correct = 0
    buffers: list | bool = True
    with torch.no_grad():
        for s in range(0, len(part), batch_size):
            rows = slice(s, min(s + batch_size, len(part)))
            y = part.y[rows].to(dev)
            rec = student.forward_backward(part.inputs(rows, wdt).to(dev), y, loss, stacked=buffers)
            acc.add(rec, part.z[rows])
            correct += int((rec.fbar[0][:, 0].argmax(-1) == y).sum())
            buffers = rec.stacked
    return acc.state_dict(), correct


def accumulate_statistics(student: LadderStudent, source, *, loss: str = "squared", batch_size: int = 4096,
                          dtype: torch.dtype | None = None, engine=None, groups: int | None = None,
                          progress: bool = False) -> tuple[FrequencyAccumulator, int]:
    """One streaming pass of a fixed student over a dataset, chunk by chunk: the mergeable sums.

    Each chunk is one task (in this process, or on a Dask cluster with ``engine``); it runs its rows in
    batches of ``batch_size`` (BN normalizes each batch by its own statistics, as in training) into a
    fresh accumulator, and the chunks' states are merged in chunk order.  Memory is one chunk and one
    batch of per-example records, whatever N is; the result does not depend on the engine or its
    number of workers (the same per-chunk sums, added in the same order).

    :param source: a :class:`~teachers.sampling.LadderSample`, a :class:`~teachers.chunked.ChunkedLadderData`,
        or dataset path(s).
    :param dtype: accumulation dtype (default: the student's; float64 for exact sums).
    :param engine: None (this process), or a :class:`~teachers.engine.DaskEngine`.
    :param groups: ``K``: accumulate a :class:`~smaso.student.noise.ReplicateAccumulator` of K row
        groups instead (every batch split into K blocks), for the jackknife's noise floors.
    :returns: ``(accumulator, correct)``: call ``accumulator.result()`` for the
        :class:`FrequencyStatistics`; ``correct`` counts the examples classified correctly.
    """
    from teachers.chunked import as_chunks
    from teachers.engine import get_engine

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive integer, got {batch_size!r}")
    chunks = as_chunks(source)
    if chunks.ladder is not student.ladder and chunks.ladder.fingerprint() != student.ladder.fingerprint():
        raise ValueError("source: the dataset's ladder is not the student's")
    def merge(total: tuple[FrequencyAccumulator, int], part: tuple[dict, int]) -> tuple[FrequencyAccumulator, int]:
        return total[0].merge_(part[0]), total[1] + part[1]

    # chunk order: the same sums in the same order on every engine
    return get_engine(engine).fold(_chunk_statistics, range(chunks.num_chunks), student, chunks, loss, batch_size,
                                   dtype, groups, merge=merge, init=(_accumulator(student, dtype, groups), 0),
                                   progress="student statistics" if progress else None)
