"""Frequency statistics of a :class:`~smaso.student.graph_network.GraphStudent` (issue 17; framework Eq 6).

The graph version of :mod:`smaso.student.frequency`: a region graph's regions may have several parents
and their own event counts.  Per level ``l`` the events are padded to ``M_l = max_i m_{l,i}`` (the
events ``a >= m_{l,i}`` of a region never occur: their counts are 0 and their rows 0, as for an
event that was never observed; :attr:`GraphFrequencyStatistics.event_mask` tells the two apart), so
every quantity of a level is one tensor, for region r of level l and node j of its group:

    F[r, a, j]  = E[f_j | z_r = a]  (= Fbar: no Batch Norm)      D, Dp, U, G, Gf likewise (Eq 6)

and, for every parent-child edge e = (p, c) of level l (parent in l, child in l + 1, in
:attr:`GraphStudent.edges` order):

    Fc[l + 1][e, a, k]       = E[f_c,k | z_p = a]                 the child's output by its parent's event (focus)
    Gp_tilde[l + 1][e, b, j] = P(z_c = b) E[g_p,j | z_c = b]      the parent's gradient by the child's event
    P.joints[l + 1][e, a, b] = P(z_p = a, z_c = b)                (broadness: every parent of c, one by one)

Sums are accumulated by one batched matmul per level with the events' one-hot matrix (regions of one
level stacked, edges gathered by ``index_select``), so they stream over batches and merge across
chunks and processes (:meth:`GraphFrequencyAccumulator.state_dict` / :meth:`~GraphFrequencyAccumulator.merge_`).
Without Batch Norm every per-example quantity is independent of the batch, so a jackknife over
contiguous row groups (:func:`collect_graph_statistics` with ``groups``) is the textbook one
(:mod:`smaso.student.noise`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from inference.graph_posterior import MAX_CLIQUE, graph_statistics
from smaso.student.frequency import MergeableSums, PerEventMeans, negated_state
from smaso.student.graph_network import GraphStudent, GraphStudentRecord, _take, level_edges
from teachers.graph_ladder import GraphLadder

__all__ = ["GraphEventStatistics", "GraphFrequencyAccumulator", "GraphFrequencyStatistics", "GraphReplicates",
           "accumulate_graph_statistics", "collect_graph_statistics", "padded_events"]

# per-level quantities in stacking order, and the GraphStudentRecord field each one averages
_OWN = ("Fbar", "D", "Dp", "U", "G", "Gf")
_RECORD = {"Fbar": "f", "D": "slope", "Dp": "deriv", "U": "u", "G": "g", "Gf": "g_raw"}


def padded_events(g: GraphLadder) -> list[int]:
    """``M_l`` = the largest event count of level ``l``: the padded event axis of every level."""
    return [max(lvl) for lvl in g.events]


def _event_mask(g: GraphLadder) -> list[torch.Tensor]:
    """``(R_l, M_l)`` bool per level: event a exists in region r (a < m_r)."""
    M = padded_events(g)
    return [torch.arange(M[l])[None, :] < torch.tensor(g.events[l])[:, None] for l in range(g.depth + 1)]


def _conditionals(joints: torch.Tensor) -> torch.Tensor:
    """P(z_c | z_p) ``(E, M_p, M_c)`` from P(z_p, z_c); rows of zeros where P(z_p = a) = 0."""
    s = joints.sum(-1, keepdim=True)
    return torch.where(s > 0, joints / torch.where(s > 0, s, 1.0), 0.0)


@dataclass
class GraphEventStatistics:
    """Event statistics of a graph ladder on the padded layout (float64).

    :ivar marginals: ``(R_l, M_l)`` per level: P(z_r = a) (0 on padding).
    :ivar joints: ``[None, (E_0, M_0, M_1), ..., (E_{d-1}, M_{d-1}, M_d)]``: P(z_p = a, z_c = b) per edge of
        the level above (index = the child's level).
    :ivar P_down: the same layout: P(z_c = b | z_p = a), rows of zeros where P(z_p = a) = 0.
    :ivar num_examples: the sample size they were counted from, or None for the exact statistics.
    """

    graph: GraphLadder
    marginals: list[torch.Tensor]
    joints: list[torch.Tensor | None]
    P_down: list[torch.Tensor | None]
    num_examples: int | None = None

    @classmethod
    def exact(cls, g: GraphLadder, *, max_clique: int = MAX_CLIQUE) -> GraphEventStatistics:
        """The teacher's exact statistics (:func:`inference.graph_posterior.graph_statistics`), padded."""
        st = graph_statistics(g, max_clique=max_clique)
        M = padded_events(g)
        marg = []
        for l in range(g.depth + 1):
            t = torch.zeros(g.num_regions[l], M[l], dtype=torch.float64)
            for i, p in enumerate(st.p[l]):
                t[i, : p.numel()] = p
            marg.append(t)
        joints: list[torch.Tensor | None] = [None]
        for l in range(1, g.depth + 1):
            edges = level_edges(g, l - 1)
            t = torch.zeros(len(edges), M[l - 1], M[l], dtype=torch.float64)
            for e, (p, c) in enumerate(edges):
                j = st.pair[(l, p, c)]
                t[e, : j.shape[0], : j.shape[1]] = j
            joints.append(t)
        return cls(g, marg, joints, [None] + [_conditionals(j) for j in joints[1:]], None)

    def __repr__(self) -> str:
        src = "exact" if self.num_examples is None else f"empirical, N={self.num_examples}"
        return f"GraphEventStatistics({src}, regions per level={list(self.graph.num_regions)})"


@dataclass
class GraphFrequencyStatistics(PerEventMeans):
    """Measured per-event statistics of a graph student on a dataset (module docstring for the layout).

    ``means[k][l]`` ``(R_l, M_l, n_l)`` for k in Fbar, F (= Fbar), D, Dp, U, G, Gf (None at the leaves but
    ``Fbar[d]`` = E[x | z] ``(R_d, M_d, dim)``); ``Fc[l]`` ``(E_{l-1}, M_{l-1}, n_l)`` and ``Gp_tilde[l]``
    ``(E_{l-1}, M_l, n_{l-1})`` for l >= 1; ``dW[l]`` ``(E_l, n_l, n_{l+1})`` and ``db[l]`` ``(R_l, n_l)``: the
    measured E_x[g_p f_c^T] and E_x[g]; ``counts[l]`` ``(R_l, M_l)``; ``P``: the empirical event statistics.
    """

    graph: GraphLadder
    num_examples: int
    counts: list[torch.Tensor]
    means: dict[str, list[torch.Tensor | None]]
    Fc: list[torch.Tensor | None]
    Gp_tilde: list[torch.Tensor | None]
    dW: list[torch.Tensor]
    db: list[torch.Tensor] | None
    P: GraphEventStatistics
    loss: float

    def __repr__(self) -> str:
        return (f"GraphFrequencyStatistics(num_examples={self.num_examples}, regions per level="
                f"{list(self.graph.num_regions)}, loss={self.loss:.4g})")

    @property
    def event_mask(self) -> list[torch.Tensor]:
        """``(R_l, M_l)`` bool per level: the events that exist (the rest is padding)."""
        return _event_mask(self.graph)

    @property
    def empty_events(self) -> list[list[tuple[int, int]]]:
        """``[(region, event), ...]`` per level: events that exist but were never observed."""
        return [[tuple(v) for v in ((c == 0) & m).nonzero().tolist()] for c, m in zip(self.counts, self.event_mask,
                                                                                       strict=True)]


class GraphFrequencyAccumulator(MergeableSums):
    """Streams :class:`~smaso.student.graph_network.GraphStudentRecord` batches into per-event sums.

    Per batch and level: one ``(R_l, M_l, N)`` one-hot matrix of the events; the level's stacked
    per-example quantities through it (one batched matmul); per edge the parent's one-hot matrix
    against the child's outputs (focus), the child's against the parent's gradients (broadness) and
    against the parent's one-hot matrix (the pair counts).  The state adds up over disjoint rows
    (:meth:`merge_`) to the state of one pass.

    :param student: the student (gives the graph and the widths).
    :param dtype: accumulation dtype (default: the student's; float64 for exact sums).
    """

    _SUMS = ("counts", "joint_counts", "own", "fc", "gp", "dW", "db")

    def __init__(self, student: GraphStudent, dtype: torch.dtype | None = None):
        if not isinstance(student, GraphStudent):
            raise TypeError(f"student: expected a GraphStudent, got {type(student).__name__}")
        dtype = dtype or student.weights[0].dtype
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"dtype: expected a floating torch.dtype, got {dtype!r}")
        g, n = student.graph, student.widths
        self.student, self.graph, self.dtype = student, g, dtype
        dev = self.device = student.weights[0].device
        d, M, R = g.depth, padded_events(g), g.num_regions
        self._M = M
        E = [len(e) for e in student.edges]
        self.summed = [k for k in _OWN if not (k == "Dp" and student.activation.homogeneous
                                               and student.top_activation.homogeneous)]
        self.counts = [torch.zeros(R[l], M[l], dtype=torch.float64, device=dev) for l in range(d + 1)]
        self.joint_counts = [None] + [torch.zeros(E[l - 1], M[l - 1], M[l], dtype=torch.float64, device=dev)
                                      for l in range(1, d + 1)]
        width = [len(self.summed) * n[l] for l in range(d)] + [n[d]]
        self.own = [torch.zeros(R[l], M[l], width[l], dtype=dtype, device=dev) for l in range(d + 1)]
        self.fc = [None] + [torch.zeros(E[l - 1], M[l - 1], n[l], dtype=dtype, device=dev) for l in range(1, d + 1)]
        self.gp = [None] + [torch.zeros(E[l - 1], M[l], n[l - 1], dtype=dtype, device=dev) for l in range(1, d + 1)]
        self.dW = [torch.zeros(student.edge_weights(l).shape, dtype=dtype, device=dev) for l in range(d)]
        self.db = [torch.zeros(R[l], n[l], dtype=dtype, device=dev) for l in range(d)]
        self.n = 0
        self.loss_sum = 0.0
        # per region where a level's event counts differ, one number where they do not (a cheaper check)
        self._m = [torch.tensor(g.events[l], device=dev)[None, :] if len(set(g.events[l])) > 1
                   else torch.tensor(g.events[l][0], device=dev) for l in range(d + 1)]
        self.onehot_leaves = g.emission.kind == "onehot"
        self._buffers: dict[tuple[int, int], torch.Tensor] = {}

    def _one_hot(self, level: int, ev: torch.Tensor) -> torch.Tensor:
        """``(R_l, M_l, N)`` with [r, a, n] = [z_r = a] for events ``ev`` ``(R_l, N)`` int64, in a buffer kept
        between batches (a fresh R M N allocation costs a fill on every batch; :meth:`add` scatters the ones
        back to zero afterwards)."""
        key = (level, ev.shape[1])
        buf = self._buffers.get(key)
        if buf is None:
            if len(self._buffers) > 4 * (self.graph.depth + 1):
                self._buffers.clear()
            R, M = ev.shape[0], self._M[level]
            buf = self._buffers[key] = torch.zeros(R, M, ev.shape[1], dtype=self.dtype, device=ev.device)
        return buf.scatter_(1, ev.unsqueeze(1), 1.0)

    def add(self, rec: GraphStudentRecord, z: torch.Tensor) -> None:
        """Add one batch: ``rec`` from ``student.forward_backward`` and its events ``z`` ``(N, total_regions)``."""
        g = self.graph
        d, off = g.depth, g.level_offsets
        if not isinstance(z, torch.Tensor) or z.dim() != 2 or z.shape[1] != g.total_regions:
            raise ValueError(f"z: expected the (N, {g.total_regions}) events of every region of the student's graph, "
                             f"got {tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__}")
        n = z.shape[0]
        if rec.f[0].shape[0] != n:
            raise ValueError(f"z: {n} rows for a record of {rec.f[0].shape[0]} examples")
        # region-major (R_l, N) contiguous events: row gathers for the pair codes, contiguous scatter indices
        zt = z.to(self.device, torch.int64).T.contiguous()
        ev = [zt[off[l]: off[l + 1]] for l in range(d + 1)]
        for l in range(d + 1):
            if not ev[l].numel():
                continue
            lo, hi = torch.aminmax(ev[l])
            if lo < 0 or (hi >= self._m[l] if self._m[l].dim() == 0 else (ev[l] >= self._m[l].T).any()):
                raise ValueError(f"z: level {l} holds events outside its regions' ranges: the dataset's graph does "
                                 "not match the student's")
        # one-hot leaves: x is a function of z, so the leaf sums follow from counts and Delta W (no scatter)
        levels = range(d) if self.onehot_leaves else range(d + 1)
        oh = [self._one_hot(l, ev[l]) if l in levels else None for l in range(d + 1)]
        try:
            self._add_sums(rec, ev, oh, n)
        finally:
            for l in levels:  # put the buffers back to zero: N R writes, not R M N
                oh[l].scatter_(1, ev[l].unsqueeze(1), 0.0)
        for l in range(d):
            self.dW[l] += rec.dW[l].to(self.dtype) * n
            self.db[l] += rec.db[l].to(self.dtype) * n
        self.n += n
        self.loss_sum += rec.loss * n

    def _add_sums(self, rec: GraphStudentRecord, ev: list, oh: list, n: int) -> None:
        """Counts, pair counts and per-event sums of one batch (the body of :meth:`add`)."""
        g, dt = self.graph, self.dtype
        d, M = g.depth, self._M
        # node-major views (R_l, n_l, N) of the record: bmm reads them transposed, no copies
        nm = {k: [None if t is None else t.permute(1, 2, 0) for t in getattr(rec, _RECORD[k])] for k in self.summed}
        f_nm = [None if t is None else t.permute(1, 2, 0).to(dt) for t in rec.fbar]
        g_nm = [None if t is None else t.permute(1, 2, 0).to(dt) for t in rec.g]
        widths = self.student.widths
        for l in range(d + 1):
            if oh[l] is None:  # one-hot leaves: a bincount of (region, event)
                R = g.num_regions[l]
                code = ev[l] + (torch.arange(R, device=self.device) * M[l])[:, None]
                self.counts[l] += torch.bincount(code.reshape(-1), minlength=R * M[l]).reshape(R, M[l])
            else:
                self.counts[l] += oh[l].sum(-1).to(torch.float64)
            if l < d:
                for i, key in enumerate(self.summed):
                    w = widths[l]
                    self.own[l][..., i * w: (i + 1) * w] += torch.bmm(oh[l], nm[key][l].to(dt).transpose(1, 2))
            elif oh[l] is not None:
                self.own[l] += torch.bmm(oh[l], f_nm[d].transpose(1, 2))
            if l > 0:
                self._add_edges(l, ev, oh, f_nm, g_nm, rec)

    def _add_edges(self, l: int, ev: list, oh: list, f_nm: list, g_nm: list, rec: GraphStudentRecord) -> None:
        """Pair counts, focus and broadness sums of the edges into level ``l`` (parents in l - 1)."""
        M = self._M
        par, chi = self.student.edge_index(l - 1)
        E = par.numel()
        # pair counts: one bincount of (edge, parent event, child event) codes
        base = (torch.arange(E, device=self.device) * (M[l - 1] * M[l]))[:, None]
        code = ev[l - 1].index_select(0, par).mul_(M[l]).add_(ev[l].index_select(0, chi)).add_(base)  # (E, N)
        self.joint_counts[l] += torch.bincount(code.reshape(-1), minlength=E * M[l - 1] * M[l]).reshape(
            E, M[l - 1], M[l])
        if oh[l] is None:
            # one-hot leaves: sum_n [z_c = b] g_p = N Delta W_pc[:, b] exactly; the focus sums follow from the
            # pair counts (E[one-hot(z_c) | z_p] = P(z_c | z_p), in result())
            self.gp[l] += rec.dW[l - 1].to(self.dtype).transpose(1, 2) * ev[l].shape[1]
            return
        plan = self.student._plans[l - 1]
        if plan is None:  # irregular level: gather each edge's one-hot matrices and outputs
            oh_p, oh_c = oh[l - 1].index_select(0, par), oh[l].index_select(0, chi)  # (E, M_p, N), (E, M_c, N)
            self.fc[l] += torch.bmm(oh_p, f_nm[l].index_select(0, chi).transpose(1, 2))
            self.gp[l] += torch.bmm(oh_c, g_nm[l - 1].index_select(0, par).transpose(1, 2))
            return
        for ps, places in plan:  # strided runs: views, no gathers
            oh_p, g_p = oh[l - 1][ps], g_nm[l - 1][ps]
            for es, (a, st, q) in places:
                self.fc[l][es] += torch.bmm(oh_p, _take(f_nm[l], a, st, q).transpose(1, 2))
                self.gp[l][es] += torch.bmm(_take(oh[l], a, st, q), g_p.transpose(1, 2))

    def result(self) -> GraphFrequencyStatistics:
        """Normalize the sums into :class:`GraphFrequencyStatistics` (on the CPU)."""
        if self.n == 0:
            raise ValueError("no examples were added")
        g, widths = self.graph, self.student.widths
        d = g.depth
        counts = [c.cpu() for c in self.counts]
        joints = [None] + [j.cpu() / self.n for j in self.joint_counts[1:]]
        P = GraphEventStatistics(g, [c / self.n for c in counts], joints,
                                 [None] + [_conditionals(j) for j in joints[1:]], self.n)
        means: dict[str, list] = {k: [None] * (d + 1) for k in (*_OWN, "F")}
        for l in range(d + 1):
            if l == d and self.onehot_leaves:  # x = one-hot(z): E[x | z] is the identity on the events seen
                eye = torch.eye(self._M[d], dtype=self.dtype)
                means["Fbar"][l] = eye * (counts[l] > 0)[..., None].to(self.dtype)
                continue
            mean = self.own[l].cpu() / counts[l].clamp(min=1)[..., None].to(self.dtype)  # never-seen rows stay 0
            if l == d:
                means["Fbar"][l] = mean
                continue
            for i, key in enumerate(self.summed):
                means[key][l] = mean[..., i * widths[l]: (i + 1) * widths[l]]
            means["F"][l] = means["Fbar"][l]
            if means["Dp"][l] is None:
                means["Dp"][l] = means["D"][l]
        fc, gp = [None] * (d + 1), [None] * (d + 1)
        for l in range(1, d + 1):
            par, _ = self.student.edge_index(l - 1)
            parent_counts = counts[l - 1].index_select(0, par.cpu())  # (E, M_p)
            if l == d and self.onehot_leaves:  # E[one-hot(z_c) | z_p] = P(z_c | z_p)
                fc[l] = P.P_down[l].to(self.dtype)
            else:
                fc[l] = self.fc[l].cpu() / parent_counts.clamp(min=1)[..., None].to(self.dtype)
            gp[l] = self.gp[l].cpu() / self.n
        return GraphFrequencyStatistics(g, self.n, counts, means, fc, gp, [w.cpu() / self.n for w in self.dW],
                                        [b.cpu() / self.n for b in self.db], P, self.loss_sum / self.n)


class GraphReplicates:
    """K accumulators over contiguous row groups of every batch: the statistics and a delete-one-group
    jackknife (:mod:`smaso.student.noise`) without a second pass.

    :ivar parts: the K group accumulators.
    """

    def __init__(self, student: GraphStudent, dtype: torch.dtype | None, groups: int):
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 2:
            raise ValueError(f"groups: expected an integer >= 2, got {groups!r}")
        self.student, self.dtype = student, dtype
        self.parts = [GraphFrequencyAccumulator(student, dtype) for _ in range(groups)]

    def total(self) -> GraphFrequencyAccumulator:
        """The merged accumulator of every group."""
        out = GraphFrequencyAccumulator(self.student, self.dtype)
        for part in self.parts:
            out.merge_(part)
        return out

    def result(self) -> GraphFrequencyStatistics:
        """The statistics of all rows."""
        return self.total().result()

    def leave_one_out(self) -> Iterator[GraphFrequencyStatistics]:
        """The K statistics with one group left out, in group order (empty groups skipped)."""
        total = self.total().state_dict()
        for part in self.parts:
            if part.n == 0:
                continue
            rest = GraphFrequencyAccumulator(self.student, self.dtype).merge_(total)
            rest.merge_(negated_state(part.state_dict()))
            if rest.n > 0:
                yield rest.result()


def collect_graph_statistics(student: GraphStudent, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, *,
                             loss: str = "squared", batch_size: int | None = None, dtype: torch.dtype | None = None,
                             groups: int | None = None) -> GraphFrequencyStatistics | GraphReplicates:
    """One pass over a dataset at fixed weights: forward, explicit backward, per-event sums.

    :param x: ``(N, leaves, dim)`` inputs; ``y``: ``(N,)`` labels; ``z``: ``(N, total_regions)`` events.
    :param batch_size: examples per batch (default: all at once).  Without BN the result does not depend
        on it beyond round-off.
    :param dtype: accumulation dtype (default: the student's; float64 for exact sums).
    :param groups: ``K``: return :class:`GraphReplicates` of K contiguous row groups per batch (its
        ``result()`` is the statistics, its ``leave_one_out()`` the jackknife's replicates).
    """
    g = student.graph
    if not isinstance(z, torch.Tensor) or z.dim() != 2 or z.shape[1] != g.total_regions:
        raise ValueError(f"z: expected the (N, {g.total_regions}) events of every region of the student's graph, "
                         f"got {tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__}")
    if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape[0] == y.shape[0] == z.shape[0]):
        raise ValueError("x, y, z: expected tensors with the same number of examples")
    if x.shape[0] == 0:
        raise ValueError("x: the dataset is empty")
    bs = x.shape[0] if batch_size is None else batch_size
    if isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
        raise ValueError(f"batch_size: expected a positive integer, got {batch_size!r}")
    acc: GraphFrequencyAccumulator | GraphReplicates
    acc = GraphFrequencyAccumulator(student, dtype) if groups is None else GraphReplicates(student, dtype, groups)
    dev = student.weights[0].device
    for s in range(0, x.shape[0], bs):
        xs, ys, zs = x[s: s + bs].to(dev), y[s: s + bs].to(dev), z[s: s + bs]
        if groups is None:
            acc.add(student.forward_backward(xs, ys, loss), zs)
            continue
        # no BN: a group's own forward/backward equals the batch's rows of it
        for part, rows in zip(acc.parts, _group_rows(xs.shape[0], groups), strict=True):
            if rows.stop > rows.start:
                part.add(student.forward_backward(xs[rows], ys[rows], loss), zs[rows])
    return acc.result() if groups is None else acc


def _group_rows(n: int, k: int) -> list[slice]:
    """K contiguous row ranges of an ``n``-row batch (sizes differ by at most one)."""
    bounds = [math.floor(i * n / k) for i in range(k + 1)]
    return [slice(bounds[i], bounds[i + 1]) for i in range(k)]



def _same_graph(a: GraphLadder, b: GraphLadder) -> bool:
    """The same teacher: the same graph and the same tables (compared through their spec dicts)."""
    return a is b or (a.events == b.events and a.parents == b.parents and a.to_dict() == b.to_dict())


def _chunk_graph_statistics(c: int, student: GraphStudent, chunks, loss: str, batch_size: int,
                            dtype: torch.dtype | None, groups: int | None) -> tuple[dict | list[dict], int]:
    """The task of one chunk (any process): its rows in batches into fresh accumulator(s).

    :returns: ``(state, correct)``: the accumulator's state (a list of K group states with ``groups``) and how
        many of the chunk's examples the student classifies correctly.
    """
    part = chunks.chunk(c)
    dev, wdt = student.weights[0].device, student.weights[0].dtype
    acc = GraphFrequencyAccumulator(student, dtype) if groups is None else GraphReplicates(student, dtype, groups)
    correct = 0
    with torch.no_grad():
        for s in range(0, len(part), batch_size):
            rows = slice(s, min(s + batch_size, len(part)))
            x, y, z = part.inputs(rows, wdt).to(dev), part.y[rows].to(dev), part.z[rows]
            if groups is None:
                rec = student.forward_backward(x, y, loss)
                acc.add(rec, z)
                correct += int((rec.f[0][:, 0].argmax(-1) == y).sum())
                continue
            for p, r in zip(acc.parts, _group_rows(x.shape[0], groups), strict=True):
                if r.stop > r.start:
                    rec = student.forward_backward(x[r], y[r], loss)
                    p.add(rec, z[r])
                    correct += int((rec.f[0][:, 0].argmax(-1) == y[r]).sum())
    state = acc.state_dict() if groups is None else [p.state_dict() for p in acc.parts]
    return state, correct


def accumulate_graph_statistics(student: GraphStudent, source, *, loss: str = "squared", batch_size: int = 4096,
                                dtype: torch.dtype | None = None, engine=None, groups: int | None = None,
                                progress: bool = False) -> tuple[GraphFrequencyAccumulator | GraphReplicates, int]:
    """One streaming pass of a fixed graph student over a dataset, chunk by chunk: the mergeable sums.

    The graph twin of :func:`smaso.student.frequency.accumulate_statistics`: each chunk is one task (in this
    process, or on a Dask cluster with ``engine``), its rows run in batches of ``batch_size`` into a fresh
    accumulator, and the chunks' states are merged in chunk order, so memory is one chunk and one batch of
    records whatever N is, and the sums do not depend on the engine or its number of workers.

    :param source: a :class:`~teachers.graph_sampling.GraphSample`, a graph store
        (:class:`~teachers.chunked.ChunkedLadderData`) or its path(s).
    :param groups: ``K``: accumulate :class:`GraphReplicates` (K contiguous row groups per batch) for the
        jackknife's noise floors.
    :returns: ``(accumulator, correct)``: ``accumulator.result()`` is the :class:`GraphFrequencyStatistics`;
        ``correct`` counts the examples the student classifies correctly.
    """
    from teachers.chunked import as_chunks
    from teachers.engine import get_engine

    if not isinstance(student, GraphStudent):
        raise TypeError(f"student: expected a GraphStudent, got {type(student).__name__}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive integer, got {batch_size!r}")
    if groups is not None and (isinstance(groups, bool) or not isinstance(groups, int) or groups < 2):
        raise ValueError(f"groups: expected an integer >= 2, got {groups!r}")
    chunks = as_chunks(source)
    if not isinstance(chunks.ladder, GraphLadder) or not _same_graph(chunks.ladder, student.graph):
        raise ValueError("source: the dataset's teacher is not the student's graph ladder")

    def fresh():
        return GraphFrequencyAccumulator(student, dtype) if groups is None else GraphReplicates(student, dtype, groups)

    def merge(total, part):
        acc, state = total[0], part[0]
        if groups is None:
            acc.merge_(state)
        else:
            for p, s in zip(acc.parts, state, strict=True):
                p.merge_(s)
        return acc, total[1] + part[1]

    return get_engine(engine).fold(_chunk_graph_statistics, range(chunks.num_chunks), student, chunks, loss,
                                   batch_size, dtype, groups, merge=merge, init=(fresh(), 0),
                                   progress="graph student statistics" if progress else None)
