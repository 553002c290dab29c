"""Event statistics of a ladder: exact from its specification, or counted in a sample.

The framework paper's reformulation (Thm 2 / Thm 4, Eq 9) consumes, for every region alpha
and every parent-child edge (alpha, beta), the marginal P(z_alpha) and the conditional matrix
P_ab[a, b] = P(z_beta = b | z_alpha = a) (``m_alpha x m_beta``).  :class:`EventStatistics`
holds them level by level, batched over the regions and edges of the level, for any ladder
(a uniform tree or any layered region graph).  Event axes are *padded* to the level's largest
count ``M_l = ladder.events[l]`` (a region's events ``a >= m_r`` never occur: probability 0,
rows of zeros; :attr:`EventStatistics.event_mask` tells them apart); on a uniform tree nothing is padded.

- ``marginals[l]``: ``(R_l, M_l)``, P(z_alpha) for every region alpha of level l;
- ``joints[l]`` (l >= 1): ``(E_{l-1}, M_{l-1}, M_l)``, P(z_parent, z_child) of every edge into level l,
  in :func:`level_edges` order (parent-major; on a tree: one edge per child region, in child order);
- ``P_down[l]`` (l >= 1): the same layout, P(z_child | z_parent) (rows of parent events);
- ``P_up[l]`` (l >= 1): ``(E_{l-1}, M_l, M_{l-1})``, P(z_parent | z_child).

Conditionals of events that never occur (probability 0, or never seen in a sample) are rows
of zeros; ``marginals`` tells which.  :func:`exact_statistics` computes them in float64 from
the ladder, :func:`empirical_statistics` counts them in a sample with one ``bincount`` per level
(:class:`EventCounts`: the exact int64 state that batches, shards and workers add up), and
:func:`compare_statistics` measures their agreement against the sampling noise.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np
import torch
import torch.nn.functional as F

from .elimination import graph_statistics
from .ladder import TOPDOWN, Ladder, _check_ladder, _known

if TYPE_CHECKING:

    from teachers.chunked import DataSource, _SampleChunks
    from teachers.engine import DaskEngine, SerialEngine
    from teachers.store_reader import ChunkedLadderData

__all__ = [
    "EventCounts",
    "EventStatistics",
    "check_events",
    "compare_statistics",
    "count_events",
    "empirical_statistics",
    "event_mask",
    "exact_statistics",
    "level_children",
    "level_edge_index",
    "level_edges",
    "tv_bound",
]


def level_children(ladder: Ladder, level: int) -> tuple[tuple[int, ...], ...]:
    """``ladder.children[level]`` (the sorted children in level + 1 of every region of ``level``), in time linear in
    the edges: by arithmetic on a uniform tree (region r's children are r b .. r b + b - 1), else the ladder's
    cached ``children``."""
    if ladder.is_uniform():
        b = _known(ladder.branching, "branching", "a uniform tree")[level]
        return tuple(tuple(range(r * b, (r + 1) * b)) for r in range(ladder.num_regions[level]))
    return ladder.children[level]


def level_edges(ladder: Ladder, level: int) -> list[tuple[int, int]]:
    """The edges below ``level``: ``(parent in level, child in level + 1)``, parent-major, each parent's children
    in increasing order -- the edge order of every per-edge tensor (joints, a student's weights and Delta W,
    focus and broadness sums).  On a uniform tree edge e joins child region e to its parent."""
    return [(r, c) for r, ch in enumerate(level_children(ladder, level)) for c in ch]


def level_edge_index(ladder: Ladder, level: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`level_edges` as ``(parents, children)`` int64 tensors ``(E_level,)`` (a uniform tree's by arithmetic)."""
    if ladder.is_uniform():
        chi = torch.arange(ladder.num_regions[level + 1], dtype=torch.int64)
        return chi // _known(ladder.branching, "branching", "a uniform tree")[level], chi
    e = torch.tensor(level_edges(ladder, level), dtype=torch.int64).reshape(-1, 2)
    return e[:, 0].contiguous(), e[:, 1].contiguous()


def event_mask(ladder: Ladder) -> list[torch.Tensor]:
    """``(R_l, M_l)`` bool per level: event a exists in region r (a < m_r; all True on a uniform tree)."""
    M = ladder.events
    if ladder.is_uniform():
        return [torch.ones(ladder.num_regions[l], M[l], dtype=torch.bool) for l in range(ladder.depth + 1)]
    return [torch.arange(M[l])[None, :] < torch.tensor(ladder.region_events[l])[:, None]
            for l in range(ladder.depth + 1)]


def _edge_table(tables: Sequence[torch.Tensor | None], l: int, name: str) -> torch.Tensor:
    """``tables[l]`` of a per-edge list indexed by the child's level (``joints``, ``pairs``, ``P_down``): set for
    every l >= 1, None only at level 0, which no edge enters."""
    t = tables[l]
    if t is None:
        raise ValueError(f"{name}[{l}]: no table (no edge enters level {l})")
    return t


def _below_top(tables: Sequence[torch.Tensor | None], name: str) -> list[torch.Tensor]:
    """``tables[1:]`` of a per-edge list (:func:`_edge_table`), each one set."""
    return [_edge_table(tables, l, name) for l in range(1, len(tables))]


@dataclass
class EventStatistics:
    """Marginals and per-edge parent/child tables of every region (see the module docstring).

    :ivar ladder: the ladder they describe.
    :ivar marginals: ``(R_l, M_l)`` per level.
    :ivar joints: ``[None, (E_0, M_0, M_1), ..., (E_{d-1}, M_{d-1}, M_d)]`` (index = the child's level).
    :ivar num_examples: the sample size they were counted from, or None for the exact statistics.
    """

    ladder: Ladder
    marginals: list[torch.Tensor]
    joints: list[torch.Tensor | None]
    num_examples: int | None = None  # None: exact

    @classmethod
    def exact(cls, ladder: Ladder, *, max_clique: int | None = None) -> EventStatistics:
        """The teacher's exact statistics: :func:`exact_statistics`."""
        return exact_statistics(ladder, max_clique=max_clique)

    @property
    def P_down(self) -> list[torch.Tensor | None]:
        """P(z_child | z_parent): ``P_down[l][e]`` is the M_{l-1} x M_l matrix P_ab of Eq 9 of edge e."""
        return [None, *(_normalize(j, -1) for j in _below_top(self.joints, "joints"))]

    @property
    def P_up(self) -> list[torch.Tensor | None]:
        """P(z_parent | z_child): ``P_up[l][e]`` is M_l x M_{l-1}."""
        return [None, *(_normalize(j.transpose(-1, -2), -1) for j in _below_top(self.joints, "joints"))]

    @property
    def event_mask(self) -> list[torch.Tensor]:
        """``(R_l, M_l)`` bool per level: the events that exist (the rest is padding)."""
        return event_mask(self.ladder)

    @property
    def graph(self) -> Ladder:
        """Deprecated: :attr:`ladder` (the statistics of a region graph are those of its Ladder)."""
        warnings.warn("EventStatistics.graph is deprecated since smaso 0.3; use .ladder", DeprecationWarning,
                      stacklevel=2)
        return self.ladder

    def P_ab(self, child_level: int, edge: int) -> torch.Tensor:
        """P(z_beta | z_alpha) of edge ``edge`` into ``child_level`` (on a tree: child region ``edge``)."""
        return _edge_table(self.P_down, child_level, "P_down")[edge]

    def region_marginal(self, level: int, region: int) -> torch.Tensor:
        """P(z_alpha) of one region: ``(m_alpha,)`` (its own events, padding dropped)."""
        return self.marginals[level][region, : self.ladder.region_events[level][region]]

    def __repr__(self) -> str:
        src = "exact" if self.num_examples is None else f"empirical, N={self.num_examples}"
        return f"EventStatistics({src}, regions per level={list(self.ladder.num_regions)})"


def _normalize(t: torch.Tensor, dim: int) -> torch.Tensor:
    s = t.sum(dim, keepdim=True)
    return torch.where(s > 0, t / torch.where(s > 0, s, 1.0), 0.0)


def exact_statistics(ladder: Ladder, *, max_clique: int | None = None) -> EventStatistics:
    """Exact P(z_alpha) and P(z_parent, z_child) of every region and edge, in float64.

    A uniform tree in closed form.  Top-down: P(z_l) = P(z_{l-1}) P_ab and P(z_a, z_b) = diag(P(z_a)) P_ab.
    Bottom-up: the children of a region are independent (their leaf sets are disjoint), so the joint of
    (z_alpha, z_child_i) is the product of the children's marginals pushed through the lookup table, summed
    over the other children.  Any other ladder (regions of several parents, differing event counts) by one
    calibration of its junction tree (:func:`teachers.elimination.graph_statistics`; ``max_clique``
    bounds its cliques), padded to the layout of the module docstring.
    """
    _check_ladder(ladder)
    if not ladder.is_uniform():
        return _graph_exact(ladder, max_clique)
    d = ladder.depth
    marg: list[torch.Tensor | None] = [None] * (d + 1)
    joints: list[torch.Tensor | None] = [None] * (d + 1)
    if ladder.mode == TOPDOWN:
        # right on levels with productions too: every quantity here is pairwise along an edge, and the child's
        # law given its parent is the marginal table tables holds there (tests/test_rhm_readers.py)
        tables = _known(ladder.tables, "tables", "a top-down ladder")
        m = marg[0] = _known(ladder.prior, "prior", "a top-down ladder")[None].clone()
        for l in range(1, d + 1):
            parent = m[level_edge_index(ladder, l - 1)[0]]  # (R_l, m_{l-1}): each child's parent
            j = joints[l] = parent[:, :, None] * _known(tables[l - 1], f"tables[{l - 1}]", "a uniform tree")
            m = marg[l] = j.sum(1)
    else:
        m = marg[d] = _known(ladder.leaf_prior, "leaf_prior", "a bottom-up ladder").clone()
        for l in range(d - 1, -1, -1):
            joints[l + 1], m = _bottomup_level(ladder, l, m)
            marg[l] = m
    return EventStatistics(ladder, cast(list[torch.Tensor], marg), joints, None)  # every level filled above


def _graph_exact(ladder: Ladder, max_clique: int | None) -> EventStatistics:
    """:func:`exact_statistics` of a ladder that is not a uniform tree: the junction tree's, padded."""
    st = graph_statistics(ladder) if max_clique is None else graph_statistics(ladder, max_clique=max_clique)
    M = ladder.events
    marg = [torch.stack([F.pad(p.double(), (0, M[l] - p.numel())) for p in st.p[l]]) for l in range(ladder.depth + 1)]
    joints: list[torch.Tensor | None] = [None]
    for l in range(1, ladder.depth + 1):
        pairs = [st.pair[(l, p, c)].double() for p, c in level_edges(ladder, l - 1)]
        joints.append(torch.stack([F.pad(j, (0, M[l] - j.shape[1], 0, M[l - 1] - j.shape[0])) for j in pairs]))
    return EventStatistics(ladder, marg, joints, None)


def _bottomup_level(ladder: Ladder, l: int, child_marg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Joint P(z_parent, z_child) ``(R_{l+1}, m_l, m_{l+1})`` and parent marginals ``(R_l, m_l)``."""
    b, mc, mp, R = (_known(ladder.branching, "branching", "a uniform tree")[l], ladder.events[l + 1], ladder.events[l],
                    ladder.num_regions[l])
    cm = child_marg.reshape(R, b, mc)
    # probability of every child configuration, first child most significant: (R, mc^b)
    conf = cm[:, 0]
    for c in range(1, b):
        conf = (conf[:, :, None] * cm[:, c, None, :]).reshape(R, -1)
    table = _known(_known(ladder.lookup, "lookup", "a bottom-up ladder")[l], f"lookup[{l}]",
                   "a uniform tree")  # (R, mc^b)
    parent = torch.zeros(R, mp, dtype=torch.float64).scatter_add_(1, table, conf)
    codes = torch.arange(mc**b)
    joint = torch.zeros(R, b, mp * mc, dtype=torch.float64)
    for c in range(b):
        digit = (codes // mc ** (b - 1 - c)) % mc
        joint[:, c].scatter_add_(1, table * mc + digit, conf)
    return joint.reshape(R * b, mp, mc), parent


@dataclass
class EventCounts:
    """Event and parent/child pair counts of a sample: the exact, mergeable state behind
    :func:`empirical_statistics`.

    Counts are int64, so adding batches, shards or workers in any order and grouping gives the same
    integers; :meth:`statistics` turns them into frequencies.  Like a torchmetrics ``Metric``: state
    (``counts``, ``pairs``, ``num_examples``) that :meth:`update` grows and :meth:`merge` adds up.

    :ivar counts: ``counts[l]`` ``(R_l, M_l)``: examples with z_alpha = a, per region of level l.
    :ivar pairs: ``pairs[l]`` ``(E_{l-1}, M_{l-1}, M_l)`` (l >= 1; None at l = 0): examples with
        (z_parent, z_child) = (a, b), per edge into level l (:func:`level_edges` order; on a tree: per child).
    """

    ladder: Ladder
    counts: list[torch.Tensor]
    pairs: list[torch.Tensor | None]
    num_examples: int = 0

    @classmethod
    def zeros(cls, ladder: Ladder, device: torch.device | str | None = None) -> EventCounts:
        """An empty state for ``ladder`` (on ``device``, default CPU)."""
        _check_ladder(ladder)
        R, m = ladder.num_regions, ladder.events
        E = [R[l + 1] if ladder.is_uniform() else len(level_edges(ladder, l)) for l in range(ladder.depth)]
        counts = [torch.zeros(R[l], m[l], dtype=torch.int64, device=device) for l in range(ladder.depth + 1)]
        pairs = [None] + [torch.zeros(E[l - 1], m[l - 1], m[l], dtype=torch.int64, device=device)
                          for l in range(1, ladder.depth + 1)]
        return cls(ladder, counts, pairs, 0)

    #: rows counted per pass: the int64 index temporaries of a wide level stay at a few tens of MB
    ROWS_PER_PASS = 8192

    def update(self, z: torch.Tensor) -> EventCounts:
        """Count a batch of events ``z`` ``(N, total_regions)`` (any integer dtype) in place; returns self.

        :raises ValueError: wrong shape, or events outside a region's [0, m_r) at some level.
        """
        _check_shape(self.ladder, z)
        if z.is_floating_point() or z.dtype == torch.bool:
            raise ValueError(f"z: expected integer events, got dtype {z.dtype}")
        for s in range(0, z.shape[0], self.ROWS_PER_PASS):
            self._update(z[s: s + self.ROWS_PER_PASS])
        self.num_examples += z.shape[0]
        return self

    def _edge_index(self, l: int) -> tuple[torch.Tensor, torch.Tensor]:
        key = f"_edges_{l}"
        if key not in self.__dict__:
            dev = self.counts[0].device
            self.__dict__[key] = tuple(t.to(dev) for t in level_edge_index(self.ladder, l))
        return self.__dict__[key]

    def _update(self, z: torch.Tensor) -> None:
        lad = self.ladder
        dev = self.counts[0].device
        off = lad.level_offsets
        uniform = lad.is_uniform()
        parent: torch.Tensor | None = None  # the events of the level above
        for l in range(lad.depth + 1):
            R, m = lad.num_regions[l], lad.events[l]
            ev = z[:, off[l]: off[l + 1]].to(dev, torch.int64)  # int64 one level at a time, not all of z
            check_events(lad, l, ev)
            base = torch.arange(R, device=dev)
            if l == 0 or not uniform:
                self.counts[l] += torch.bincount((ev + base * m).reshape(-1), minlength=R * m).reshape(R, m)
            if l:  # one bincount of the (parent, child) pairs of every edge (on a tree: edge = child region)
                assert parent is not None  # l >= 1: set by the level above
                pairs_l = _edge_table(self.pairs, l, "pairs")
                mp, E = lad.events[l - 1], pairs_l.shape[0]
                par, chi = self._edge_index(l - 1)
                edge, child = (base, ev) if uniform else (torch.arange(E, device=dev), ev[:, chi])
                idx = (edge * mp + parent[:, par]) * m + child
                pairs = torch.bincount(idx.reshape(-1), minlength=E * mp * m).reshape(E, mp, m)
                pairs_l += pairs  # in place, in self.pairs
                if uniform:  # the child's counts are its pairs' margins
                    self.counts[l] += pairs.sum(1)
            parent = ev

    def merge(self, other: EventCounts) -> EventCounts:
        """The counts of both samples together (a new state; neither input changes).

        :raises ValueError: the other state counts another ladder's events.
        """
        if not isinstance(other, EventCounts):
            raise TypeError(f"other: expected EventCounts, got {type(other).__name__}")
        if [tuple(c.shape) for c in other.counts] != [tuple(c.shape) for c in self.counts] or (
                other.ladder is not self.ladder and other.ladder.fingerprint() != self.ladder.fingerprint()):
            raise ValueError("other: counts of a different ladder cannot be merged")
        dev = self.counts[0].device
        return EventCounts(self.ladder, [a + b.to(dev) for a, b in zip(self.counts, other.counts, strict=True)],
                           [None, *(a + b.to(dev) for a, b in zip(_below_top(self.pairs, "pairs"),
                                                                    _below_top(other.pairs, "pairs"), strict=True))],
                           self.num_examples + other.num_examples)

    __add__ = merge

    def statistics(self) -> EventStatistics:
        """Empirical frequencies (float64) as :class:`EventStatistics`.

        :raises ValueError: nothing was counted.
        """
        n = self.num_examples
        if n == 0:
            raise ValueError("z: the sample is empty")
        marg = [c.cpu().double() / n for c in self.counts]
        joints = [None, *(p.cpu().double() / n for p in _below_top(self.pairs, "pairs"))]
        return EventStatistics(self.ladder, marg, joints, n)


def check_events(ladder: Ladder, level: int, ev: torch.Tensor) -> None:
    """Raise a ValueError unless the events ``ev`` ``(N, R_level)`` of ``level`` lie in their regions' ranges
    [0, m_r) (one range check where a level's regions share their event count)."""
    if not ev.numel():
        return
    lo, hi = torch.aminmax(ev)
    m = ladder.events[level]
    if lo < 0 or hi >= m:
        raise ValueError(f"z: level {level} has events outside [0, {m})")
    sizes = ladder.region_events[level]
    if len(set(sizes)) > 1 and bool((ev >= torch.tensor(sizes, device=ev.device)).any()):
        raise ValueError(f"z: level {level} has events outside its regions' ranges [0, m_r) (m_r = {list(sizes)})")


def empirical_statistics(ladder: Ladder, z: torch.Tensor, *, chunk_size: int = 2**18) -> EventStatistics:
    """Frequency counts of events and parent/child pairs in a sample (:class:`EventCounts`, normalized).

    :param z: ``(N, total_regions)`` events in global order (``LadderSample.z``).
    :param chunk_size: examples counted per pass (memory only; the counts are exact).
    :returns: :class:`EventStatistics` with empirical frequencies (float64).
    """
    _check_shape(ladder, z)
    state = EventCounts.zeros(ladder)
    for s in range(0, z.shape[0], chunk_size):
        state.update(z[s: s + chunk_size])
    return state.statistics()  # raises for an empty sample


def _check_shape(ladder: Ladder, z: torch.Tensor) -> None:
    if not isinstance(z, torch.Tensor) or z.dim() != 2 or z.shape[1] != ladder.total_regions:
        shape = tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__
        raise ValueError(f"z: expected an (N, {ladder.total_regions}) tensor of events, got {shape}")


def _count_chunk(c: int, chunks: ChunkedLadderData | _SampleChunks) -> EventCounts:
    """The task of one chunk (any process): its event counts."""
    return EventCounts.zeros(chunks.ladder).update(chunks.chunk(c).z)


def count_events(source: DataSource, *,
                 engine: SerialEngine | DaskEngine | None = None, progress: bool = False) -> EventCounts:
    """Event and pair counts of a whole dataset, streamed chunk by chunk (one task per chunk).

    Memory is one chunk whatever N is; the counts are exact int64 and, merged in chunk order, the same
    on every engine and for any number of workers.

    :param source: a :class:`~teachers.sampling.LadderSample`, a :class:`~teachers.chunked.ChunkedLadderData`
        or dataset path(s).
    :param engine: None (this process) or a :class:`~teachers.engine.DaskEngine`.
    :param progress: a tqdm bar over the chunks.
    """
    from .chunked import as_chunks
    from .engine import get_engine

    chunks = as_chunks(source)

    def merge(total: EventCounts, part: EventCounts) -> EventCounts:  # in place: one running total
        for a, b in zip(total.counts + _below_top(total.pairs, "pairs"), part.counts + _below_top(part.pairs, "pairs"),
                        strict=True):
            a += b
        total.num_examples += part.num_examples
        return total

    return get_engine(engine).fold(_count_chunk, range(chunks.num_chunks), chunks, merge=merge,
                                   init=EventCounts.zeros(chunks.ladder),
                                   progress="counting events" if progress else None)


def compare_statistics(exact: EventStatistics, empirical: EventStatistics, *,
                       confidence: float = 1e-6) -> dict:
    """Agreement of sample frequencies with the exact tables, judged against sampling noise.

    For every region (marginal) and every parent/child pair (joint), the total-variation
    distance TV = 1/2 sum |p_hat - p| and a bound that holds with probability >= 1 -
    ``confidence`` under multinomial sampling (Bretagnolle-Huber-Carol):
    TV <= sqrt((k log 2 + log(1/confidence)) / (2N)), with k the number of cells, shrinking
    like 1/sqrt(N).  Also Pearson's chi-square p-value per region (scipy).

    :returns: ``{"max_tv_marginal", "max_tv_joint", "bound_marginal", "bound_joint",
        "within_bound", "min_chi2_pvalue", "per_level": [...]}``.
    """
    n = empirical.num_examples
    if n is None:
        raise ValueError("empirical: expected statistics counted from a sample (num_examples set)")
    out_levels = []
    ok = True
    worst = {"marginal": 0.0, "joint": 0.0}
    min_p = 1.0
    for l in range(exact.ladder.depth + 1):
        level: dict[str, float] = {"level": l}
        for kind, pe, qe in (("marginal", exact.marginals[l], empirical.marginals[l]),
                             ("joint", exact.joints[l], empirical.joints[l])):
            if pe is None:  # no edge into level 0
                continue
            assert qe is not None  # statistics of one ladder: joints set at the same levels
            tv = 0.5 * (pe - qe).abs().sum(tuple(range(1, pe.dim())))
            bound = tv_bound(pe[0].numel(), n, confidence)
            level.update({f"max_tv_{kind}": tv.max().item(), f"bound_{kind}": bound})
            ok &= bool((tv <= bound).all())
            worst[kind] = max(worst[kind], tv.max().item())
        # chi-square on each region's marginal, cells with positive expected count
        pm, qm = exact.marginals[l], empirical.marginals[l]
        for r in range(pm.shape[0]):
            e = pm[r] * n
            mask = e > 0
            if mask.sum() > 1:
                obs = qm[r][mask] * n
                if (qm[r][~mask] > 0).any():
                    min_p = 0.0
                    continue
                p = chisquare_pvalue(obs.numpy(), e[mask].numpy() * obs.sum().item() / e[mask].sum().item())
                min_p = min(min_p, p)
        out_levels.append(level)
    return {"num_examples": n, "max_tv_marginal": worst["marginal"], "max_tv_joint": worst["joint"],
            "within_bound": ok, "min_chi2_pvalue": min_p, "confidence": confidence, "per_level": out_levels}


def chisquare_pvalue(observed: np.ndarray, expected: np.ndarray) -> float:
    """Pearson's chi-square p-value of ``observed`` counts ``(k,)`` against ``expected`` ``(k,)`` (same total),
    k - 1 degrees of freedom: ``scipy.stats.chisquare(observed, expected).pvalue``, the same operations (the
    statistic sum((o - e)^2 / e), then the chi-square survival function ``scipy.special.chdtrc``), so the same bits,
    without importing scipy.stats (about 0.4 s of ``smaso demo``'s critical path)."""
    from scipy.special import chdtrc

    stat = np.sum((observed - expected) ** 2 / expected)
    return float(chdtrc(observed.shape[0] - 1, stat))


def tv_bound(cells: int, n: int, confidence: float) -> float:
    """The multinomial total-variation bound of a distribution over ``cells`` cells estimated from ``n`` draws:
    with probability at least 1 - ``confidence``, TV <= sqrt((cells log 2 + log(1/confidence)) / (2 n))."""
    return math.sqrt((cells * math.log(2) + math.log(1 / confidence)) / (2 * n))
