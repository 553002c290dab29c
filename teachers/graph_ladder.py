"""Ladders beyond uniform trees: any layered region graph, with regions of several parents (issue 17).

A :class:`GraphLadder` keeps the summarization ladder's levels (level 0 is the label's single region,
level ``d`` the leaves) but lets every region have its own number of events ``m_r`` and its own set
of parents in the level above (a layered DAG).  Overlapping receptive fields, as in a convolution
with stride smaller than its kernel, are regions of the level below with several parents.

Indexing: region ``i`` of level ``l`` has global index ``level_offsets[l] + i``; ``parents[l][i]``
is the sorted tuple of its parents' indices in level ``l - 1`` (empty at level 0), and
``children[l][i]`` (derived) the sorted tuple of the regions of level ``l + 1`` that list it.
A spec cannot hold a cycle: a parent index names a region of the level directly above, so every edge
points one level up (indices outside that level are refused); validation also refuses a region above
the leaves without children and a region below the top without parents (unreachable regions).

Mixed-radix codes (first index most significant, as in :class:`teachers.ladder.Ladder`): for a tuple of
regions ``(r_1, ..., r_k)`` with event counts ``(m_1, ..., m_k)``, the configuration
``(z_1, ..., z_k)`` has code ``sum_j z_j prod_{j' > j} m_j'`` (:func:`mixed_radix`).

``mode="topdown"`` (generative)
    ``z_top ~ prior`` ``(m_0,)``; every region ``r`` of level ``l >= 1`` draws ``z_r`` from row
    ``code(z_parents(r))`` of ``tables[l][i]``, shape ``(prod_{p in parents} m_p, m_r)``.
``mode="bottomup"`` (summarization)
    every leaf draws ``z_r ~ leaf_priors[i]`` ``(m_r,)`` independently; every region ``r`` above the
    leaves is a deterministic function of *all* its children: ``z_r = lookups[l][i][code(z_children(r))]``,
    an integer table of length ``prod_{c in children} m_c``.  A leaf shared by several parents feeds all
    of them.

Leaves emit the input through a :mod:`teachers.emission` model, so all leaves share one event count.

Constructors: :meth:`GraphLadder.from_ladder` (a uniform tree :class:`~teachers.ladder.Ladder`, for
checks against the existing code), :meth:`GraphLadder.tree` (any tree: per-region branching and events),
:meth:`GraphLadder.random` (given the graph, Dirichlet tables),
:meth:`GraphLadder.conv1d` / :meth:`GraphLadder.conv2d` (kernel and stride per level; overlap when
stride < kernel; their graphs alone: :func:`conv1d_parents` / :func:`conv2d_parents`),
:meth:`GraphLadder.fully_informative` (bottom-up; every region's event is the pattern of the leaves of its
receptive field, so Thm 3 of the framework paper holds on the DAG; ``fully_informative_conv1d`` /
``fully_informative_conv2d`` on the convolution graphs) and :meth:`GraphLadder.from_dict` (explicit region
graphs in spec files).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .emission import Emission, GaussianEmission, OneHotEmission, emission_from_dict
from .ladder import (
    BOTTOMUP,
    MAX_EVENTS,
    MAX_LOOKUP,
    MAX_REGIONS,
    MAX_TABLE_ENTRIES,
    MODES,
    ROW_SUM_TOL,
    TOPDOWN,
    Ladder,
    LadderSpecError,
    _check_concentration,
    _dirichlet,
    _rng,
)

__all__ = ["FORMAT", "GraphLadder", "children_of", "conv1d_parents", "conv2d_parents", "conv_children", "mixed_radix"]

FORMAT = "smaso-graph-ladder"
VERSION = 1


def mixed_radix(z: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """Codes of configurations ``z`` ``(..., k)`` with radices ``sizes`` (first most significant): ``(...,)`` int64."""
    code = torch.zeros(z.shape[:-1], dtype=torch.int64, device=z.device)
    for j, m in enumerate(sizes):
        code = code * int(m) + z[..., j].long()
    return code


def conv_children(n_below: int, kernel: int, stride: int) -> list[tuple[int, ...]]:
    """Children of each region of a 1-D convolution-like level: region j covers ``[j s, j s + k)`` of the
    ``n_below`` regions below (``floor((n_below - k) / s) + 1`` regions; every region below covered)."""
    if kernel < 1 or stride < 1 or kernel > n_below:
        raise LadderSpecError(f"conv: expected 1 <= kernel <= {n_below} regions below and stride >= 1, got "
                              f"kernel={kernel}, stride={stride}")
    n = (n_below - kernel) // stride + 1
    if (n - 1) * stride + kernel != n_below:
        raise LadderSpecError(f"conv: kernel {kernel} and stride {stride} leave regions {(n - 1) * stride + kernel}.."
                              f"{n_below - 1} of the level below uncovered (need (n_below - kernel) % stride == 0)")
    return [tuple(range(j * stride, j * stride + kernel)) for j in range(n)]


def _invert(children: list[tuple[int, ...]], n_below: int) -> tuple[tuple[int, ...], ...]:
    parents: list[list[int]] = [[] for _ in range(n_below)]
    for j, ch in enumerate(children):
        for c in ch:
            parents[c].append(j)
    return tuple(tuple(p) for p in parents)


def _conv_levels(first: int, kernels: Sequence[int], strides: Sequence[int], what: str, split) -> tuple:
    """Shared upward construction: ``split(n_below_state, k, s)`` returns ``(children, n_below, state)``."""
    if len(kernels) != len(strides) or not kernels:
        raise LadderSpecError(f"{what}: expected len(kernels) == len(strides) >= 1, got {len(kernels)}, "
                              f"{len(strides)}")
    state, parents_up = first, []
    for k, s in zip(kernels, strides, strict=True):
        children, n_below, state = split(state, int(k), int(s))
        parents_up.append(_invert(children, n_below))
    return state, (((),), *parents_up[::-1])


def conv1d_parents(width: int, kernels: Sequence[int], strides: Sequence[int]
                   ) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """The graph of :meth:`GraphLadder.conv1d`: ``parents[l][i]`` (top first, ``parents[0] == ((),)``).

    Level by level from the ``width`` leaves up, region j covers ``[j s, j s + k)`` of the level below
    (:func:`conv_children` with ``kernels[t]``, ``strides[t]``); the top level must be one region."""
    def split(n, k, s):
        children = conv_children(n, k, s)
        return children, n, len(children)

    top, parents = _conv_levels(int(width), kernels, strides, "conv1d", split)
    if top != 1:
        raise LadderSpecError(f"conv1d: the top level has {top} regions, expected 1 (choose the last "
                              "kernel to cover the level below)")
    return parents


def conv2d_parents(shape: tuple[int, int], kernels: Sequence[int], strides: Sequence[int]
                   ) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """The graph of :meth:`GraphLadder.conv2d` on an ``(H, W)`` grid (row-major regions): square ``k x k``
    windows with stride ``s`` per level from the leaves up; the top level must be ``(1, 1)``."""
    def split(hw, k, s):
        h, w = hw
        rows, cols = conv_children(h, k, s), conv_children(w, k, s)
        return [tuple(r * w + c for r in rr for c in cc) for rr in rows for cc in cols], h * w, (len(rows), len(cols))

    top, parents = _conv_levels((int(shape[0]), int(shape[1])), kernels, strides, "conv2d", split)
    if top != (1, 1):
        raise LadderSpecError(f"conv2d: the top level is {top}, expected (1, 1)")
    return parents


def _conv1d_name(width, kernels, strides) -> str:
    return f"conv1d-w{width}-k{'.'.join(map(str, kernels))}-s{'.'.join(map(str, strides))}"


def _pattern_lookup(field_: tuple[int, ...], child_fields: list[tuple[int, ...]], m: int) -> np.ndarray:
    """The fully informative lookup ``(prod_c m ** len(child_fields[c]),)`` int64: every configuration of
    the children (mixed-radix, first child most significant; child c's event the mixed-radix code of its
    leaves ``child_fields[c]``) to the code of the leaf pattern on ``field_``; 0 where two children
    disagree on a shared leaf (an impossible configuration)."""
    sizes = [m ** len(f) for f in child_fields]
    codes = np.arange(math.prod(sizes), dtype=np.int64)
    z = [None] * len(sizes)
    for j in reversed(range(len(sizes))):  # decode the children's events
        z[j], codes = codes % sizes[j], codes // sizes[j]
    out = np.zeros_like(z[0]) if z else np.zeros(1, dtype=np.int64)
    bad = np.zeros(out.shape, dtype=bool)
    for leaf in field_:
        value = None
        for j, f in enumerate(child_fields):
            if leaf in f:
                digit = (z[j] // m ** (len(f) - 1 - f.index(leaf))) % m
                if value is None:
                    value = digit
                else:
                    bad |= digit != value
        out = out * m + value
    out[bad] = 0
    return out


def children_of(parents: Sequence[Sequence[Sequence[int]]], num_regions: Sequence[int]) -> list[list[tuple[int, ...]]]:
    """``children[l][j]``: the sorted regions of level ``l + 1`` that list region j of level l as a parent, for
    the levels above the leaves (the inverse of ``parents``)."""
    return [[tuple(i for i, ps in enumerate(parents[l + 1]) if j in ps) for j in range(num_regions[l])]
            for l in range(len(num_regions) - 1)]


def _check_parents(parents: tuple[tuple[tuple[int, ...], ...], ...], num_regions: Sequence[int]) -> None:
    """The layered-DAG rules on ``parents`` (one tuple per region of each level, top first)."""
    if parents[0] != ((),):
        raise LadderSpecError("parents[0]: the top region has no parents: expected [[]]")
    for l in range(1, len(num_regions)):
        n_above = num_regions[l - 1]
        covered = set()
        for i, ps in enumerate(parents[l]):
            if not ps:
                raise LadderSpecError(f"parents[{l}][{i}]: every region below the top needs at least one parent "
                                      "(otherwise it is not part of the ladder)")
            if list(ps) != sorted(set(ps)):
                raise LadderSpecError(f"parents[{l}][{i}]: expected sorted distinct indices, got {list(ps)}")
            if ps[0] < 0 or ps[-1] >= n_above:
                raise LadderSpecError(f"parents[{l}][{i}]: indices must lie in [0, {n_above}) (level {l - 1}), "
                                      f"got {list(ps)}")
            covered.update(ps)
        missing = sorted(set(range(n_above)) - covered)
        if missing:
            raise LadderSpecError(f"parents[{l}]: regions {missing[:8]} of level {l - 1} have no child, so the "
                                  "leaves never see them (unreachable from the input)")



@dataclass(eq=False)
class GraphLadder:
    """A layered region graph with latent events (module docstring).

    :ivar events: ``events[l][i]`` = m of region i of level l.
    :ivar parents: ``parents[l][i]`` = sorted indices (in level l - 1) of its parents; ``()`` at level 0.
    :ivar mode: ``"topdown"`` or ``"bottomup"``.
    :ivar prior: topdown: ``(m_0,)`` float64.
    :ivar tables: topdown: ``tables[l][i]`` ``(prod parent m, m_i)`` float64 for l >= 1 (``tables[0] = ()``).
    :ivar leaf_priors: bottomup: ``leaf_priors[i]`` ``(m_i,)`` float64 for each leaf.
    :ivar lookups: bottomup: ``lookups[l][i]`` ``(prod child m,)`` int64 for l < d.
    :ivar emission: the leaves' emission model (all leaves share one event count).
    """

    events: tuple[tuple[int, ...], ...]
    parents: tuple[tuple[tuple[int, ...], ...], ...]
    mode: str
    emission: Emission
    prior: torch.Tensor | None = None
    tables: tuple[tuple[torch.Tensor, ...], ...] | None = None
    leaf_priors: tuple[torch.Tensor, ...] | None = None
    lookups: tuple[tuple[torch.Tensor, ...], ...] | None = None
    name: str = "graph-ladder"
    children: tuple[tuple[tuple[int, ...], ...], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.events = tuple(tuple(int(m) for m in lvl) for lvl in self.events)
        self.parents = tuple(tuple(tuple(int(p) for p in ps) for ps in lvl) for lvl in self.parents)
        self._validate_graph()
        self.children = (*map(tuple, children_of(self.parents, [len(lvl) for lvl in self.events])),
                         tuple(() for _ in self.events[-1]))
        self._validate_tables()

    # -------------------------------------------------------------------------------- structure
    @property
    def depth(self) -> int:
        """Number of levels below the top (the leaves are level ``depth``)."""
        return len(self.events) - 1

    @property
    def num_regions(self) -> tuple[int, ...]:
        """Regions per level."""
        return tuple(len(lvl) for lvl in self.events)

    @property
    def level_offsets(self) -> tuple[int, ...]:
        """``level_offsets[l]`` = global index of region 0 of level l; the last entry is the total."""
        return tuple(int(v) for v in np.concatenate([[0], np.cumsum(self.num_regions)]))

    @property
    def total_regions(self) -> int:
        """Regions over all levels."""
        return sum(self.num_regions)

    @property
    def num_classes(self) -> int:
        """Events of the top region (the label)."""
        return self.events[0][0]

    @property
    def leaf_events(self) -> int:
        """The one event count every leaf has."""
        return self.events[-1][0]

    def is_tree(self) -> bool:
        """Whether every region below the top has exactly one parent."""
        return all(len(ps) == 1 for lvl in self.parents[1:] for ps in lvl)

    def parent_sizes(self, level: int, i: int) -> tuple[int, ...]:
        """Event counts of the parents of region i of ``level`` (the radices of its table's rows)."""
        return tuple(self.events[level - 1][p] for p in self.parents[level][i])

    def child_sizes(self, level: int, i: int) -> tuple[int, ...]:
        """Event counts of the children of region i of ``level`` (the radices of its lookup)."""
        return tuple(self.events[level + 1][c] for c in self.children[level][i])

    def edges(self) -> list[tuple[int, int, int]]:
        """Every parent-child edge as ``(level of the child, parent index, child index)``."""
        return [(l, p, i) for l in range(1, self.depth + 1) for i, ps in enumerate(self.parents[l]) for p in ps]

    def region_names(self) -> list[str]:
        """``"l.i"`` for every region, in global order (as :meth:`teachers.ladder.Ladder.region_names`)."""
        return [f"{l}.{i}" for l, n in enumerate(self.num_regions) for i in range(n)]

    def describe(self) -> str:
        """A few lines: mode, levels, regions, events, parents per region."""
        lines = [f"GraphLadder {self.name!r}: mode={self.mode}, depth={self.depth}, {self.total_regions} regions, "
                 f"{self.num_classes} classes, {'tree' if self.is_tree() else 'DAG'}, emission={self.emission.kind}"]
        for l in range(self.depth + 1):
            ms = sorted(set(self.events[l]))
            npar = sorted({len(ps) for ps in self.parents[l]}) if l else [0]
            lines.append(f"  level {l}: {self.num_regions[l]} regions, events {ms}, parents per region {npar}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"GraphLadder(mode={self.mode!r}, regions per level={list(self.num_regions)}, "
                f"{'tree' if self.is_tree() else 'DAG'}, emission={self.emission.kind!r})")

    # -------------------------------------------------------------------------------- validation
    def _validate_graph(self) -> None:
        if self.mode not in MODES:
            raise LadderSpecError(f"mode: expected one of {MODES}, got {self.mode!r}")
        if len(self.events) < 2:
            raise LadderSpecError(f"events: expected at least two levels (the label and the leaves), got "
                                  f"{len(self.events)}")
        if len(self.parents) != len(self.events):
            raise LadderSpecError(f"parents: expected one entry per level ({len(self.events)}), got "
                                  f"{len(self.parents)}")
        if len(self.events[0]) != 1:
            raise LadderSpecError(f"events[0]: the top level holds exactly one region (the label), got "
                                  f"{len(self.events[0])}")
        if sum(len(lvl) for lvl in self.events) > MAX_REGIONS:
            raise LadderSpecError(f"events: more than {MAX_REGIONS} regions")
        for l, lvl in enumerate(self.events):
            if not lvl:
                raise LadderSpecError(f"events[{l}]: a level needs at least one region")
            for i, m in enumerate(lvl):
                if not 2 <= m <= MAX_EVENTS:
                    raise LadderSpecError(f"events[{l}][{i}]: expected 2..{MAX_EVENTS} events, got {m}")
            if len(self.parents[l]) != len(lvl):
                raise LadderSpecError(f"parents[{l}]: expected one parent tuple per region ({len(lvl)}), got "
                                      f"{len(self.parents[l])}")
        if len(set(self.events[-1])) != 1:
            raise LadderSpecError(f"events[{self.depth}]: every leaf needs the same number of events (one emission "
                                  f"model), got {sorted(set(self.events[-1]))}")
        _check_parents(self.parents, self.num_regions)

    def _validate_tables(self) -> None:
        if self.emission.num_regions != self.num_regions[-1] or self.emission.num_events != self.leaf_events:
            raise LadderSpecError(f"emission: expected {self.num_regions[-1]} leaf regions x {self.leaf_events} "
                                  f"events, got {self.emission.num_regions} x {self.emission.num_events}")
        if self.mode == TOPDOWN:
            if self.prior is None or self.tables is None:
                raise LadderSpecError("prior, tables: a topdown ladder needs both")
            self.prior = _prob_vector(self.prior, self.num_classes, "prior")
            if len(self.tables) != len(self.events):
                raise LadderSpecError(f"tables: expected one entry per level ({len(self.events)}; tables[0] = []), "
                                      f"got {len(self.tables)}")
            tables = [()]
            for l in range(1, len(self.events)):
                if len(self.tables[l]) != self.num_regions[l]:
                    raise LadderSpecError(f"tables[{l}]: expected one table per region ({self.num_regions[l]}), got "
                                          f"{len(self.tables[l])}")
                row = []
                for i, t in enumerate(self.tables[l]):
                    rows = math.prod(self.parent_sizes(l, i))
                    if rows * self.events[l][i] > MAX_TABLE_ENTRIES:
                        raise LadderSpecError(f"tables[{l}][{i}]: {rows} parent configurations x {self.events[l][i]} "
                                              f"events is more than {MAX_TABLE_ENTRIES} entries")
                    row.append(_prob_table(t, (rows, self.events[l][i]), f"tables[{l}][{i}]"))
                tables.append(tuple(row))
            self.tables = tuple(tables)
        else:
            if self.leaf_priors is None or self.lookups is None:
                raise LadderSpecError("leaf_priors, lookups: a bottomup ladder needs both")
            if len(self.leaf_priors) != self.num_regions[-1]:
                raise LadderSpecError(f"leaf_priors: expected one per leaf ({self.num_regions[-1]}), got "
                                      f"{len(self.leaf_priors)}")
            self.leaf_priors = tuple(_prob_vector(p, self.leaf_events, f"leaf_priors[{i}]")
                                     for i, p in enumerate(self.leaf_priors))
            if len(self.lookups) != self.depth:
                raise LadderSpecError(f"lookups: expected one entry per level above the leaves ({self.depth}), got "
                                      f"{len(self.lookups)}")
            lookups = []
            for l in range(self.depth):
                if len(self.lookups[l]) != self.num_regions[l]:
                    raise LadderSpecError(f"lookups[{l}]: expected one lookup per region ({self.num_regions[l]}), got "
                                          f"{len(self.lookups[l])}")
                row = []
                for i, t in enumerate(self.lookups[l]):
                    size = math.prod(self.child_sizes(l, i))
                    if size > MAX_LOOKUP:
                        raise LadderSpecError(f"lookups[{l}][{i}]: {size} child configurations is more than "
                                              f"{MAX_LOOKUP}")
                    t = torch.as_tensor(np.asarray(t), dtype=torch.int64)
                    if t.shape != (size,):
                        raise LadderSpecError(f"lookups[{l}][{i}]: expected shape ({size},) (one event per "
                                              f"configuration of children {self.children[l][i]}), got {tuple(t.shape)}")
                    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.events[l][i]):
                        raise LadderSpecError(f"lookups[{l}][{i}]: events must lie in [0, {self.events[l][i]})")
                    row.append(t)
                lookups.append(tuple(row))
            self.lookups = tuple(lookups)

    # -------------------------------------------------------------------------------- constructors
    @classmethod
    def random(cls, events: Sequence[Sequence[int]], parents: Sequence[Sequence[Sequence[int]]], *,
               mode: str = TOPDOWN, concentration: float = 1.0, seed: int = 0, sigma: float | None = None,
               name: str = "random-graph") -> GraphLadder:
        """Random tables for a given graph: Dirichlet(``concentration``) rows (topdown) or leaf priors and
        uniformly random lookups (bottomup); one-hot leaves, or Gaussian ones around one-hot means with
        ``sigma``.  Seeded with a local ``numpy`` generator."""
        if not (isinstance(concentration, (int, float)) and concentration > 0 and math.isfinite(concentration)):
            raise LadderSpecError(f"concentration: expected a positive finite number, got {concentration!r}")
        rng = np.random.default_rng(seed)
        events = tuple(tuple(int(m) for m in lvl) for lvl in events)
        parents = tuple(tuple(tuple(int(p) for p in ps) for ps in lvl) for lvl in parents)
        emission = _emission(len(events[-1]), events[-1][0] if events[-1] else 0, sigma)
        if mode == TOPDOWN:
            prior = rng.dirichlet([concentration] * events[0][0])
            tables: list[tuple] = [()]
            for l in range(1, len(events)):
                tables.append(tuple(rng.dirichlet([concentration] * events[l][i],
                                                  size=math.prod(events[l - 1][p] for p in parents[l][i]))
                                    for i in range(len(events[l]))))
            return cls(events, parents, mode, emission, prior=torch.as_tensor(prior), tables=tuple(tables), name=name)
        if mode == BOTTOMUP:
            children = children_of(parents, [len(lvl) for lvl in events])
            leaf_priors = tuple(torch.as_tensor(rng.dirichlet([concentration] * m)) for m in events[-1])
            lookups = tuple(tuple(torch.as_tensor(rng.integers(0, events[l][j], math.prod(
                events[l + 1][c] for c in children[l][j]))) for j in range(len(events[l])))
                for l in range(len(events) - 1))
            return cls(events, parents, mode, emission, leaf_priors=leaf_priors, lookups=lookups, name=name)
        raise LadderSpecError(f"mode: expected one of {MODES}, got {mode!r}")

    @classmethod
    def tree(cls, branching: Sequence[Sequence[int]], events: Sequence[int | Sequence[int]], **kwargs) -> GraphLadder:
        """Any tree: ``branching[l][i]`` children for region i of level l (top first; level 0 is the one root),
        the children of a level numbered in their parents' order.  ``events[l]``: one event count for every
        region of level l, or a list with one per region (the leaves share one count, as every leaf emission
        does).

        :param kwargs: :meth:`random`'s ``mode``, ``concentration``, ``seed``, ``sigma``, ``name``.
        :raises LadderSpecError: a branching below 1, a level whose region count disagrees with the level above's
            branching, or ``events`` of the wrong length.
        """
        if isinstance(branching, (str, bytes)) or not isinstance(branching, Sequence) or not branching:
            raise LadderSpecError(f"branching: expected one list of children counts per level above the leaves, "
                                  f"got {branching!r}")
        sizes, parents = [1], [((),)]
        for l, lvl in enumerate(branching):
            if isinstance(lvl, (str, bytes)) or not isinstance(lvl, Sequence) or len(lvl) != sizes[-1]:
                raise LadderSpecError(f"branching[{l}]: expected {sizes[-1]} children counts (one per region of "
                                      f"level {l}), got {lvl!r}")
            counts = []
            for i, b in enumerate(lvl):
                if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1:
                    raise LadderSpecError(f"branching[{l}][{i}]: expected an integer >= 1, got {b!r}")
                counts.append(int(b))
            parents.append(tuple((i,) for i, b in enumerate(counts) for _ in range(b)))
            sizes.append(sum(counts))
        if isinstance(events, (str, bytes)) or not isinstance(events, Sequence) or len(events) != len(sizes):
            raise LadderSpecError(f"events: expected {len(sizes)} entries (levels 0..{len(sizes) - 1}), got {events!r}")
        ev = []
        for l, (m, n) in enumerate(zip(events, sizes, strict=True)):
            if isinstance(m, Sequence) and not isinstance(m, (str, bytes)):
                if len(m) != n:
                    raise LadderSpecError(f"events[{l}]: expected {n} event counts (one per region), got {list(m)}")
                ev.append(tuple(m))
            else:
                ev.append((m,) * n)
        kwargs.setdefault("name", "tree")
        return cls.random(ev, parents, **kwargs)

    @classmethod
    def conv1d(cls, width: int, kernels: Sequence[int], strides: Sequence[int], events: Sequence[int], **kwargs
               ) -> GraphLadder:
        """A 1-D convolution-like ladder: ``width`` leaves; level by level upwards, region j covers regions
        ``[j s, j s + k)`` of the level below (``kernels[t]``, ``strides[t]`` from the leaves up), so regions
        below have several parents when ``s < k``.  The top level must come out as one region.

        :param events: events per level, top first (``len(kernels) + 1`` entries).
        :param kwargs: :meth:`random`'s ``mode``, ``concentration``, ``seed``, ``sigma``, ``name``.
        """
        if len(kernels) != len(strides) or len(events) != len(kernels) + 1:
            raise LadderSpecError(f"conv1d: expected len(kernels) == len(strides) == len(events) - 1, got "
                                  f"{len(kernels)}, {len(strides)}, {len(events)}")
        parents = conv1d_parents(width, kernels, strides)
        ev = tuple(tuple([int(events[l])] * len(lvl)) for l, lvl in enumerate(parents))
        kwargs.setdefault("name", _conv1d_name(width, kernels, strides))
        return cls.random(ev, parents, **kwargs)

    @classmethod
    def conv2d(cls, shape: tuple[int, int], kernels: Sequence[int], strides: Sequence[int], events: Sequence[int],
               **kwargs) -> GraphLadder:
        """A 2-D convolution-like ladder on an ``(H, W)`` grid of leaves (row-major region order): square
        ``k x k`` windows with stride ``s`` per level, from the leaves up; the top must be one region."""
        if len(kernels) != len(strides) or len(events) != len(kernels) + 1:
            raise LadderSpecError("conv2d: expected len(kernels) == len(strides) == len(events) - 1")
        parents = conv2d_parents(shape, kernels, strides)
        ev = tuple(tuple([int(events[l])] * len(lvl)) for l, lvl in enumerate(parents))
        kwargs.setdefault("name", f"conv2d-{shape[0]}x{shape[1]}")
        return cls.random(ev, parents, **kwargs)

    @classmethod
    def fully_informative(cls, parents: Sequence[Sequence[Sequence[int]]], leaf_events: int = 2, *,
                          concentration: float | None = None, seed: int = 0, sigma: float | None = None,
                          name: str | None = None) -> GraphLadder:
        """The bottom-up graph ladder whose every region holds all the information of its receptive field
        (Thm 3 of the framework paper on a DAG: P(x_rf(r) | z_r) is a delta for every region r).

        The receptive field ``rf(r)`` of a region is the sorted tuple of the leaves below it (a leaf's is
        itself; above, the union over its children).  Its event is the joint pattern of the leaf events on
        ``rf(r)``, coded mixed-radix over those sorted leaves (first leaf most significant), so
        ``m_r = leaf_events ** len(rf(r))`` and the label is the pattern of all the leaves
        (``m_0 = leaf_events ** leaves``).  ``lookups[l][i]`` ``(prod_{c in children} m_c,)`` maps each
        configuration of the children (mixed-radix, first child most significant) to the code of the
        pattern it spells on ``rf(r)``.  When children overlap (a leaf below two of them), configurations
        in which they disagree on a shared leaf cannot occur (probability zero under every leaf prior);
        their lookup entries are set to 0 and never matter.  On a tree whose children are contiguous
        blocks (:meth:`from_ladder`) every lookup is the identity, as in
        :meth:`teachers.ladder.Ladder.fully_informative`.

        :param parents: ``parents[l][i]`` = the sorted parents (in level l - 1) of region i of level l,
            ``[[]]`` at the top, as :class:`GraphLadder`'s ``parents`` (e.g. another ladder's).
        :param leaf_events: m of every leaf (>= 2).
        :param concentration: leaf priors ``(m,)`` ~ Dirichlet(concentration) per leaf (a local ``numpy``
            generator seeded with ``seed``); uniform when ``None``.
        :param sigma: Gaussian leaves around one-hot means with this sigma; one-hot leaves when ``None``.
        :raises LadderSpecError: a bad argument, or a region whose event count exceeds ``MAX_EVENTS`` or
            whose lookup exceeds ``MAX_LOOKUP`` entries (the message names the region and the size).
        """
        try:
            parents = tuple(tuple(tuple(int(p) for p in ps) for ps in lvl) for lvl in parents)
        except (TypeError, ValueError) as e:
            raise LadderSpecError(f"parents: expected nested lists of integers ({e})") from None
        if len(parents) < 2 or any(not lvl for lvl in parents):
            raise LadderSpecError(f"parents: expected at least two non-empty levels (the label and the leaves), "
                                  f"got {[len(lvl) for lvl in parents]} regions per level")
        num_regions = [len(lvl) for lvl in parents]
        if sum(num_regions) > MAX_REGIONS:
            raise LadderSpecError(f"parents: more than {MAX_REGIONS} regions")
        _check_parents(parents, num_regions)
        if isinstance(leaf_events, (bool, np.bool_)) or not isinstance(leaf_events, (int, np.integer)) \
                or not 2 <= leaf_events <= MAX_EVENTS:
            raise LadderSpecError(f"leaf_events: expected an integer in 2..{MAX_EVENTS}, got {leaf_events!r}")
        m_leaf, depth = int(leaf_events), len(parents) - 1
        children = children_of(parents, num_regions)
        rf: list[list[tuple[int, ...]]] = [[] for _ in range(depth)] + [[(i,) for i in range(num_regions[-1])]]
        events: list[list[int]] = [[] for _ in range(depth)] + [[m_leaf] * num_regions[-1]]
        lookups: list[tuple[torch.Tensor, ...]] = [() for _ in range(depth)]
        log_m = math.log2(m_leaf)
        for l in reversed(range(depth)):
            look = []
            for i, cs in enumerate(children[l]):
                field_ = tuple(sorted({leaf for c in cs for leaf in rf[l + 1][c]}))
                if len(field_) * log_m > math.log2(MAX_EVENTS) + 1e-9:
                    raise LadderSpecError(
                        f"events[{l}][{i}]: region {l}.{i} sees {len(field_)} leaves, so a fully informative "
                        f"ladder needs {m_leaf}^{len(field_)} events (more than {MAX_EVENTS}); use fewer leaves "
                        "below it or fewer leaf_events")
                n_conf = sum(len(rf[l + 1][c]) for c in cs)  # the lookup has m_leaf ** n_conf entries
                if n_conf * log_m > math.log2(MAX_LOOKUP) + 1e-9:
                    raise LadderSpecError(
                        f"lookups[{l}][{i}]: region {l}.{i} has {len(cs)} children seeing {n_conf} leaves in all "
                        f"(with repeats), so its lookup needs {m_leaf}^{n_conf} entries (more than {MAX_LOOKUP}); "
                        "use less overlap, fewer leaves or fewer leaf_events")
                rf[l].append(field_)
                events[l].append(m_leaf ** len(field_))
                look.append(torch.from_numpy(_pattern_lookup(field_, [rf[l + 1][c] for c in cs], m_leaf)))
            lookups[l] = tuple(look)
        rng = _rng(seed)
        if concentration is None:
            leaf_priors = tuple(torch.full((m_leaf,), 1.0 / m_leaf, dtype=torch.float64)
                                for _ in range(num_regions[-1]))
        else:
            p = _dirichlet(rng, _check_concentration(concentration), (num_regions[-1],), m_leaf)
            leaf_priors = tuple(torch.as_tensor(row) for row in p)
        emission = Ladder._emission(None if sigma is None else "gaussian", num_regions[-1], m_leaf, sigma)
        return cls(events, parents, BOTTOMUP, emission, leaf_priors=leaf_priors, lookups=tuple(lookups),
                   name=name or f"fully-informative-graph-d{depth}")

    @classmethod
    def fully_informative_conv1d(cls, width: int, kernels: Sequence[int], strides: Sequence[int],
                                 leaf_events: int = 2, **kwargs) -> GraphLadder:
        """:meth:`fully_informative` on :meth:`conv1d`'s graph (same ``width``, ``kernels``, ``strides``).

        :param kwargs: :meth:`fully_informative`'s ``concentration``, ``seed``, ``sigma``, ``name``.
        """
        kwargs.setdefault("name", "fully-informative-" + _conv1d_name(width, kernels, strides))
        return cls.fully_informative(conv1d_parents(width, kernels, strides), leaf_events, **kwargs)

    @classmethod
    def fully_informative_conv2d(cls, shape: tuple[int, int], kernels: Sequence[int], strides: Sequence[int],
                                 leaf_events: int = 2, **kwargs) -> GraphLadder:
        """:meth:`fully_informative` on :meth:`conv2d`'s graph (an ``(H, W)`` grid of leaves, row-major).

        :param kwargs: :meth:`fully_informative`'s ``concentration``, ``seed``, ``sigma``, ``name``.
        """
        kwargs.setdefault("name", f"fully-informative-conv2d-{shape[0]}x{shape[1]}")
        return cls.fully_informative(conv2d_parents(shape, kernels, strides), leaf_events, **kwargs)

    @classmethod
    def from_ladder(cls, ladder: Ladder) -> GraphLadder:
        """The same teacher as a uniform tree :class:`~teachers.ladder.Ladder` (tables copied)."""
        events = tuple((ladder.events[l],) * ladder.num_regions[l] for l in range(ladder.depth + 1))
        parents = ((),), *(tuple((i // ladder.branching[l - 1],) for i in range(ladder.num_regions[l]))
                           for l in range(1, ladder.depth + 1))
        if ladder.mode == TOPDOWN:
            tables = ((), *(tuple(ladder.tables[l - 1][i].double() for i in range(ladder.num_regions[l]))
                            for l in range(1, ladder.depth + 1)))
            return cls(events, parents, TOPDOWN, ladder.emission, prior=ladder.prior.double(), tables=tables,
                       name=f"{ladder.name}-graph")
        lookups = tuple(tuple(ladder.lookup[l][i] for i in range(ladder.num_regions[l])) for l in range(ladder.depth))
        leaf_priors = tuple(ladder.leaf_prior[i].double() for i in range(ladder.num_regions[-1]))
        return cls(events, parents, BOTTOMUP, ladder.emission, leaf_priors=leaf_priors, lookups=lookups,
                   name=f"{ladder.name}-graph")

    # -------------------------------------------------------------------------------- spec files
    def to_dict(self) -> dict:
        """A JSON-ready spec (format ``smaso-graph-ladder``, version 1): the explicit region graph and tables."""
        out = {"format": FORMAT, "version": VERSION, "name": self.name, "mode": self.mode,
               "events": [list(lvl) for lvl in self.events],
               "parents": [[list(ps) for ps in lvl] for lvl in self.parents],
               "emission": {k: v.tolist() if isinstance(v, torch.Tensor) else v
                            for k, v in self.emission.to_dict().items()}}
        if self.mode == TOPDOWN:
            out["prior"] = self.prior.tolist()
            out["tables"] = [[t.tolist() for t in lvl] for lvl in self.tables]
        else:
            out["leaf_priors"] = [p.tolist() for p in self.leaf_priors]
            out["lookups"] = [[t.tolist() for t in lvl] for lvl in self.lookups]
        return out

    @classmethod
    def from_dict(cls, spec: dict) -> GraphLadder:
        """Build from :meth:`to_dict`'s form; every missing or inconsistent field is a :class:`LadderSpecError`."""
        if not isinstance(spec, dict):
            raise LadderSpecError(f"spec: expected a mapping, got {type(spec).__name__}")
        if spec.get("format") != FORMAT or spec.get("version") != VERSION:
            raise LadderSpecError(f"format, version: expected {FORMAT!r} version {VERSION}, got "
                                  f"{spec.get('format')!r} version {spec.get('version')!r}")
        for key in ("mode", "events", "parents", "emission"):
            if key not in spec:
                raise LadderSpecError(f"{key}: missing")
        try:
            events = [[int(m) for m in lvl] for lvl in spec["events"]]
            parents = [[[int(p) for p in ps] for ps in lvl] for lvl in spec["parents"]]
        except (TypeError, ValueError) as e:
            raise LadderSpecError(f"events, parents: expected nested lists of integers ({e})") from None
        if not events or not events[-1]:
            raise LadderSpecError("events: expected levels of regions, the leaves last")
        try:
            emission = emission_from_dict(spec["emission"], len(events[-1]), events[-1][0])
        except LadderSpecError:
            raise
        except ValueError as e:
            raise LadderSpecError(str(e)) from None
        mode = spec["mode"]
        if mode not in MODES:
            raise LadderSpecError(f"mode: expected one of {MODES}, got {mode!r}")
        if mode == TOPDOWN:
            for key in ("prior", "tables"):
                if key not in spec:
                    raise LadderSpecError(f"{key}: missing (a topdown ladder needs prior and tables)")
            return cls(events, parents, mode, emission, prior=spec["prior"], tables=spec["tables"],
                       name=str(spec.get("name", "graph-ladder")))
        for key in ("leaf_priors", "lookups"):
            if key not in spec:
                raise LadderSpecError(f"{key}: missing (a bottomup ladder needs leaf_priors and lookups)")
        return cls(events, parents, mode, emission, leaf_priors=spec["leaf_priors"], lookups=spec["lookups"],
                   name=str(spec.get("name", "graph-ladder")))


def _emission(num_leaves: int, m: int, sigma: float | None) -> Emission:
    if sigma is None:
        return OneHotEmission(num_leaves, m)
    return GaussianEmission.around_one_hot(num_leaves, m, sigma)


def _prob_vector(p, m: int, name: str) -> torch.Tensor:
    return _prob_table(p, (m,), name)


def _prob_table(t, shape: tuple[int, ...], name: str) -> torch.Tensor:
    try:
        t = torch.as_tensor(np.asarray(t, dtype=np.float64))
    except (TypeError, ValueError) as e:
        raise LadderSpecError(f"{name}: expected numbers ({e})") from None
    if tuple(t.shape) != shape:
        raise LadderSpecError(f"{name}: expected shape {shape}, got {tuple(t.shape)}")
    if not torch.isfinite(t).all() or (t < 0).any():
        raise LadderSpecError(f"{name}: expected finite non-negative probabilities")
    sums = t.sum(-1)
    if (sums - 1).abs().max() > ROW_SUM_TOL:
        raise LadderSpecError(f"{name}: every row must sum to 1 (within {ROW_SUM_TOL}), got sums in "
                              f"[{float(sums.min()):.6g}, {float(sums.max()):.6g}]")
    return t  # as given (rows within ROW_SUM_TOL of 1): a spec round-trips bit for bit
