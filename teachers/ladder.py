"""The summarization ladder: the framework paper's teacher (§3.1; ``docs/theory.md`` §1), one model for every
region graph.

Every receptive field (region) alpha of the input carries a discrete latent event z_alpha with m_alpha
values; the top region omega is the whole input and its event is the label y = z_omega; the leaf regions
emit the observed input x.  A :class:`Ladder` is *layered*, like the layers of a CNN: level 0 is the label's
one region, level ``d`` the leaves, and every region of level ``l >= 1`` has one or more parents in level
``l - 1`` (``parents[l][i]``, :mod:`teachers.regions`).  Regions of several parents are overlapping
receptive fields (a convolution whose stride is smaller than its kernel).  A *uniform tree* -- every region
of level l has the same number of events m_l and of children b_l, children numbered breadth-first (region
i of level l has children ``i*b_l .. i*b_l + b_l - 1``) -- is the special case the paper draws; its
``branching`` is ``(b_0, ..., b_{d-1})`` and its tables stack into one tensor per level.

Two ways to relate events across levels, both exact and sampled by the same code:

``mode="topdown"`` (generative)
    y ~ P(y) = ``prior``; every region r of level l >= 1 draws z_r from row ``code(z_parents(r))`` of its
    table P(z_r | z_parents(r)) (``region_tables[l][i]``, shape ``(prod_p m_p, m_r)``; on a tree the rows
    are the parent's events, and ``tables[l-1]`` stacks them: ``(R_l, m_{l-1}, m_l)``).
``mode="bottomup"`` (summarization, as in the paper)
    leaf events are drawn independently from ``leaf_prior`` ``(R_d, m_d)``, and each region above is a
    deterministic function of *all* its children's events: ``lookups[l][i][code(z_children(r))]``, an
    integer table of ``prod_c m_c`` entries (``lookup[l]`` stacks them, ``(R_l, m_{l+1}^b_l)`` on a tree).

Codes are mixed-radix with the first parent (child) most significant (:func:`teachers.regions.mixed_radix`).

Constructors (:mod:`teachers.constructors`) and spec files of every version (:mod:`teachers.ladder_spec`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import torch

from .constructors import LadderConstructors
from .emission import Emission
from .ladder_spec import FORMAT, GRAPH_FORMAT_V1, SPEC_VERSION, LadderSpecIO
from .productions import Productions, level_productions
from .regions import _check_graph_sizes, _parse_parents, children_of, tree_parents
from .rhm import RHMParams
from .spec_check import emission_from_spec
from .validation import (
    BOTTOMUP,
    MAX_DEPTH,
    MAX_EVENTS,
    MAX_LOOKUP,
    MAX_REGIONS,
    MAX_TABLE_ENTRIES,
    MODES,
    ROW_SUM_TOL,
    TOPDOWN,
    Factorization,
    LadderSpecError,
    _as_float64,
    _as_int_tuple,
    _check_dense_sizes,
    _check_layout,
    _check_mode_tables,
    _check_rows,
    _is_int,
    _lookup_size,
    _per_region,
    _short,
    make_emission,
)

__all__ = ["BOTTOMUP", "FORMAT", "GRAPH_FORMAT_V1", "MAX_DEPTH", "MAX_EVENTS", "MAX_LOOKUP", "MAX_REGIONS",
           "MAX_TABLE_ENTRIES", "MODES", "ROW_SUM_TOL", "SPEC_VERSION", "TOPDOWN", "Factorization", "Ladder",
           "LadderSpecError"]


_T = TypeVar("_T")


def _known(value: _T | None, name: str, holder: str) -> _T:
    """``value``, a ladder's attribute read where an invariant says it is set (``name`` such as ``"prior"`` or
    ``"branching"``, which only ``holder``, such as ``"a top-down ladder"`` or ``"a uniform tree"``, has): the one
    place that narrows it for the type checker, and a clear ValueError, not a TypeError on None further on, if the
    invariant is ever broken."""
    if value is None:
        raise ValueError(f"ladder.{name}: set only on {holder}")
    return value


def _stacked(levels: Sequence[torch.Tensor | tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor | None, ...]:
    """Each level's stacked tensor, None for a level held as a tuple of per-region tensors."""
    return tuple(t if isinstance(t, torch.Tensor) else None for t in levels)


class Ladder(LadderConstructors, LadderSpecIO):
    """A layered summarization ladder on any region graph (see the module docstring).

    Two ways to give the graph:

    - a uniform tree: ``branching`` ``(b_0, ..., b_{d-1})`` and ``events`` ``(m_0, ..., m_d)``; then
      ``tables[l-1]`` is ``(R_l, m_{l-1}, m_l)`` or ``(m_{l-1}, m_l)`` shared by the level, ``leaf_prior``
      ``(R_d, m_d)`` or ``(m_d,)``, ``lookup[l]`` ``(R_l, m_{l+1}^b_l)`` or ``(m_{l+1}^b_l,)``;
    - any layered region graph: ``parents`` (``parents[l][i]`` the sorted parents in level ``l - 1`` of region
      i of level l, ``[[]]`` at level 0) and ``events`` (per level one count, or a list with one per region);
      then ``tables[l-1]`` is a list of per-region ``(prod parent m, m_i)`` tables (or one stacked array),
      ``leaf_prior`` ``(R_d, m)`` (or a list of ``(m,)``), ``lookup[l]`` a list of per-region
      ``(prod child m,)`` integer tables (or one stacked array).

    :param mode: ``"topdown"`` (``prior`` P(y) ``(m_0,)`` and ``tables``) or ``"bottomup"`` (``leaf_prior``
        and ``lookup``).
    :param emission: leaf observation model (default: one-hot, Thm 3's delta case); all leaves share one
        event count.
    :param name: free-form label kept in dataset files.
    :param factorization: the binary-factor structure of :meth:`factorized_binary` (trees only).
    :param region_names: one distinct name per region in global order (trees only).
    :param productions: top-down on a uniform tree: one entry per level above the leaves, None where the
        children are drawn on their own, else that level's joint child draws (a
        :class:`~teachers.productions.Productions`, a ``(rules, probs)`` pair or the rules alone); ``tables``
        then holds None at that level (its marginals are derived).  The Random Hierarchy Model is built so
        (:meth:`rhm`).
    """

    # The layout: a uniform tree sets _branching and builds _parents and _region_events on first use (the
    # properties); a region graph sets _parents and _region_events, and _branching only when it is a uniform tree.
    _branching: tuple[int, ...] | None
    _parents: tuple[tuple[tuple[int, ...], ...], ...] | None
    _region_events: tuple[tuple[int, ...], ...] | None
    _region_names: list[str] | None
    # Per level below the root (tables) or above the leaves (lookups): the stacked tensor, or a tuple of the
    # regions' tensors where their shapes differ (_level_tables); None in the other mode, as are prior/_leaf_prior.
    _tables: tuple[torch.Tensor | tuple[torch.Tensor, ...], ...] | None
    _lookup: tuple[torch.Tensor | tuple[torch.Tensor, ...], ...] | None
    prior: torch.Tensor | None
    _leaf_prior: torch.Tensor | None
    # Per level above the leaves: its joint child draws, or None; None for the whole ladder when no level has any
    # (a class default, so that ladders built field by field, as the spec readers do, have none).
    _productions: tuple[Productions | None, ...] | None = None
    #: the Random Hierarchy Model's parameters when :meth:`rhm` built this ladder, else None
    rhm_params: RHMParams | None = None
    #: set (to the teacher's name) on a ladder that keeps only another's pairwise laws, such as the shallow
    #: student's flat view (:func:`smaso.student.shallow.flat_ladder`): its joint law is not the teacher's, so
    #: sampling it, its Pyro model and its posterior refuse (:func:`_joint_law`)
    pairwise_view_of: str | None = None

    def __init__(self, branching: Sequence[int] | None = None, events: Sequence | None = None, *,
                 parents: Sequence | None = None, mode: str = TOPDOWN, prior: Any = None, tables: Any = None,
                 leaf_prior: Any = None,
                 lookup: Any = None, emission: Emission | dict | str | None = None, name: str = "ladder",
                 factorization: Factorization | None = None, region_names: Sequence[str] | None = None,
                 productions: Sequence | None = None) -> None:
        if not isinstance(mode, str) or mode not in MODES:
            raise LadderSpecError(f"mode: expected 'topdown' or 'bottomup', got {_short(mode)}")
        self.mode = mode
        self.name = str(name)
        self.factorization = factorization
        self._cache: dict = {}
        if (branching is None) == (parents is None):
            raise LadderSpecError("branching, parents: give exactly one (branching for a uniform tree, parents for "
                                  "any region graph)")
        if events is None:
            raise LadderSpecError("events: missing (events per level, root first)")
        if parents is None:
            assert branching is not None  # exactly one of the two, checked above
            self._init_tree_layout(branching, events)
        else:
            if factorization is not None or region_names is not None:
                raise LadderSpecError("factorization, region_names: only for a ladder given by its branching")
            self._init_graph_layout(parents, events)
            _check_graph_sizes(self.parents, self.region_events, self.num_regions, mode)
        self._region_names = self._check_names(region_names)
        given = {"prior": prior, "tables": tables, "factorization": factorization, "leaf_prior": leaf_prior,
                 "lookup": lookup}
        _check_mode_tables({k: v for k, v in given.items() if v is not None}, mode)
        self._productions = self._check_productions(productions)
        if mode == TOPDOWN:
            self._init_topdown(prior, tables)
        else:
            self._init_bottomup(leaf_prior, lookup)
        self.emission = self._check_emission(emission)

    def _check_productions(self, given: Sequence | None) -> tuple[Productions | None, ...] | None:
        """The levels' productions (:mod:`teachers.productions`), checked against the layout; None when every
        child is drawn on its own."""
        levels = level_productions(given, self.depth)
        if levels is None:
            return None
        if self.mode != TOPDOWN:
            raise LadderSpecError("productions: only for mode='topdown' (children drawn jointly from their parent)")
        if self._branching is None:
            raise LadderSpecError("productions: only on a uniform tree (give branching, or parents of a uniform "
                                  "tree): a region draws its own children jointly")
        for l, p in enumerate(levels):
            if p is not None:
                p.check(self.num_regions[l], self.events[l], self._branching[l], self.events[l + 1])
        return tuple(levels)

    # ------------------------------------------------------------------ layout
    def _init_tree_layout(self, branching: Sequence[int], events: Sequence) -> None:
        branching = _as_int_tuple(branching, "branching")
        d = len(branching)
        if d < 1:
            raise LadderSpecError("branching: a ladder needs at least one level below the root (depth >= 1)")
        if d > MAX_DEPTH:  # before events are read against it
            raise LadderSpecError(f"branching: at most {MAX_DEPTH} levels below the root, got {d}")
        events = _as_int_tuple(events, "events", d + 1)
        self.num_regions = tuple(_check_layout(branching, events))
        _check_dense_sizes(self.num_regions, events, self.mode)
        self._branching, self.events = branching, events
        self._region_events = None  # built on first use (a tree may have millions of regions)
        self._parents = None
        self.level_offsets = tuple(int(v) for v in np.concatenate([[0], np.cumsum(self.num_regions)]))

    def _init_graph_layout(self, parents: Sequence, events: Sequence) -> None:
        parents, num_regions = _parse_parents(parents)
        if isinstance(events, (str, bytes)) or not isinstance(events, Sequence) or len(events) != len(parents):
            raise LadderSpecError(f"events: expected {len(parents)} entries (one per level, root first), got "
                                  f"{_short(events)}")
        region_events = []
        for l, (m, n) in enumerate(zip(events, num_regions, strict=True)):
            if isinstance(m, Sequence | np.ndarray | torch.Tensor) and not isinstance(m, str | bytes) \
                    and len(m) != n:
                if l == 0:
                    raise LadderSpecError(f"events[0]: the top level holds exactly one region (the label), got "
                                          f"{len(m)} event counts")
                raise LadderSpecError(f"events[{l}]: expected {n} event counts (one per region of level {l}), got "
                                      f"{_short(list(m))}")
            if _is_int(m) and not 1 <= m <= MAX_EVENTS:
                raise LadderSpecError(f"events[{l}]: expected 1..{MAX_EVENTS} events, got {_short(int(m))}")
            lvl = _as_int_tuple(m, f"events[{l}]", n)  # one count for the level, or one per region
            for i, v in enumerate(lvl):
                if not 1 <= v <= MAX_EVENTS:
                    raise LadderSpecError(f"events[{l}][{i}]: expected 1..{MAX_EVENTS} events, got {v}")
            region_events.append(lvl)
        if region_events[0][0] < 2:
            raise LadderSpecError(f"events[0]: the label needs at least 2 classes, got {region_events[0][0]}")
        if len(set(region_events[-1])) != 1:
            raise LadderSpecError(f"events[{len(parents) - 1}]: every leaf needs the same number of events (one "
                                  f"emission model), got {sorted(set(region_events[-1]))}")
        self.num_regions = num_regions
        self.level_offsets = tuple(int(v) for v in np.concatenate([[0], np.cumsum(num_regions)]))
        self._region_events = tuple(region_events)
        self._parents = parents
        self.events = tuple(max(lvl) for lvl in region_events)
        self._branching = self._uniform_branching()

    def _uniform_branching(self) -> tuple[int, ...] | None:
        """The branching when the graph is a uniform tree in breadth-first order, else None."""
        if any(len(set(lvl)) != 1 for lvl in self.region_events):
            return None
        out = []
        for l in range(1, len(self.num_regions)):
            b, rem = divmod(self.num_regions[l], self.num_regions[l - 1])
            if rem or any(ps != (i // b,) for i, ps in enumerate(self.parents[l])):
                return None
            out.append(b)
        return tuple(out)

    def _check_names(self, region_names: Sequence[str] | None) -> list[str] | None:
        if region_names is None:
            return None
        if isinstance(region_names, (str, bytes)) or not isinstance(region_names, Sequence):
            raise LadderSpecError(f"region_names: expected a list of {self.total_regions} names, "
                                  f"got {type(region_names).__name__}")
        region_names = [str(v) for v in region_names]
        if len(region_names) != self.total_regions or len(set(region_names)) != len(region_names):
            raise LadderSpecError(f"region_names: expected {self.total_regions} distinct names")
        return region_names

    def _check_emission(self, emission: Emission | dict | str | None) -> Emission:
        if emission is None or isinstance(emission, str):
            emission = make_emission(emission, self.num_regions[-1], self.events[-1], None)
        if isinstance(emission, dict):
            emission = emission_from_spec(emission, self.num_regions[-1], self.events[-1])
        if not isinstance(emission, Emission):
            raise LadderSpecError(f"emission: expected an Emission or a dict, got {type(emission).__name__}")
        if (emission.num_regions, emission.num_events) != (self.num_regions[-1], self.events[-1]):
            raise LadderSpecError(
                f"emission: covers {emission.num_regions} regions x {emission.num_events} events, but the "
                f"ladder's leaf level has {self.num_regions[-1]} regions x {self.events[-1]} events")
        return emission

    # ------------------------------------------------------------------ tables
    def _init_topdown(self, prior: Any, tables: Any) -> None:
        d, m = self.depth, self.events
        prior = _as_float64(prior, "prior")
        if prior.shape != (m[0],):
            raise LadderSpecError(f"prior: expected shape ({m[0]},) (events[0]), got {tuple(prior.shape)}")
        self.prior = _check_rows(prior, "prior", "P(y)")
        if not isinstance(tables, (list, tuple)) or len(tables) != d:
            raise LadderSpecError(f"tables: expected a list of {d} tables (one per level below the root)")

        def rows(t: torch.Tensor, name: str, l: int, i: int) -> torch.Tensor:
            return _check_rows(t, name, f"index = [{'' if i is not None else 'region, '}parent configuration]")

        out: list[torch.Tensor | tuple[torch.Tensor, ...]] = []
        for l in range(1, d + 1):
            name = f"tables[{l - 1}]"
            joint = self._productions[l - 1] if self._productions is not None else None
            if joint is not None:  # the children's marginal tables, what pairwise statistics read
                if tables[l - 1] is not None:
                    raise LadderSpecError(f"{name}: give None where productions[{l - 1}] draws the children of level "
                                          f"{l - 1} jointly (their tables are the productions' marginals)")
                out.append(joint.marginals(self.num_regions[l - 1], m[l]))
                continue
            if tables[l - 1] is None:
                raise LadderSpecError(f"{name}: missing (give a table, or productions[{l - 1}])")
            if self._parents is None:  # a uniform tree: sizes checked with the layout
                shapes = [(m[l - 1], m[l])]
            else:
                shapes = [(math.prod(self.parent_sizes(l, i)), self.region_events[l][i])
                          for i in range(self.num_regions[l])]
                for i, (r, mi) in enumerate(shapes):
                    if r * mi > MAX_TABLE_ENTRIES:
                        raise LadderSpecError(f"{name}[{i}]: {r} parent configurations x {mi} events is more than "
                                              f"{MAX_TABLE_ENTRIES} entries")
            out.append(self._level_tables(tables[l - 1], l, name, shapes, _as_float64, rows, "table",
                                          f"regions of level {l}, events of level {l - 1}, events of level {l}"))
        self._tables = tuple(out)
        self._leaf_prior = None
        self._lookup = None
        self.tables  # noqa: B018 -- built now, so that with_emission's copies share this one tuple

    def _init_bottomup(self, leaf_prior: Any, lookup: Any) -> None:
        d, m = self.depth, self.events
        per_leaf = isinstance(leaf_prior, (list, tuple)) and leaf_prior
        if per_leaf and isinstance(leaf_prior[0], torch.Tensor | np.ndarray):
            if len({tuple(p.shape) for p in leaf_prior}) != 1:
                raise LadderSpecError(f"leaf_prior: expected one prior of {m[d]} events per leaf")
            leaf_prior = torch.stack([_as_float64(p, f"leaf_prior[{i}]") for i, p in enumerate(leaf_prior)])
        p = _per_region(_as_float64(leaf_prior, "leaf_prior"), (self.num_regions[d], m[d]), "leaf_prior",
                        "leaf regions, leaf events")
        self._leaf_prior = _check_rows(p, "leaf_prior", "index = [leaf region]")
        if not isinstance(lookup, (list, tuple)) or len(lookup) != d:
            raise LadderSpecError(f"lookup: expected a list of {d} tables (one per non-leaf level)")
        out = []
        for l in range(d):
            name = f"lookup[{l}]"
            if self._parents is None:  # a uniform tree: m_{l+1}^b_l child configurations per region
                shapes = [(_lookup_size(m, _known(self._branching, "branching", "a uniform tree"), self.num_regions,
                                        l),)]
            else:
                shapes = [(math.prod(self.child_sizes(l, i)),) for i in range(self.num_regions[l])]
                for i, (size,) in enumerate(shapes):
                    if size > MAX_LOOKUP:
                        raise LadderSpecError(f"{name}[{i}]: {size} child configurations is more than {MAX_LOOKUP}")
            out.append(self._level_tables(lookup[l], l, name, shapes, self._as_lookup, self._in_range, "lookup",
                                          f"regions of level {l}, events[{l + 1}]^branching[{l}]"))
        self._lookup = tuple(out)
        self.prior = None
        self._tables = None
        self.lookup  # noqa: B018 -- built now, so that with_emission's copies share this one tuple

    _REGION_DIMS = {"table": "parent configurations, events", "lookup": "one event per configuration of the children"}

    def _level_tables(self, given: Any, l: int, name: str, shapes: Sequence[tuple[int, ...]], convert: Callable[...,
                      torch.Tensor], check: Callable[..., torch.Tensor], what: str,
                      dims: str) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Level l's tables or lookups, ``shapes[i]`` that of region i (one shape on a uniform tree): on a region
        graph a list with one per region, or on any ladder one array of them all when they share one shape (on a
        uniform tree also one shared by the level; ``dims`` names the array's dimensions).  ``convert(t, name)``
        reads one, ``check(t, name, l, i)`` checks its values (``i`` None for the array).  Returns the stacked
        tensor, or a tuple of the regions' tensors where their shapes differ."""
        n, shape = self.num_regions[l], shapes[0] if len(set(shapes)) == 1 else None
        if self._parents is not None and isinstance(given, (list, tuple)):  # one per region
            if len(given) != n:
                raise LadderSpecError(f"{name}: expected one {what} per region ({n}), got {len(given)}")
            region = []
            for i, t in enumerate(given):
                t = convert(t, f"{name}[{i}]")
                if tuple(t.shape) != shapes[i]:
                    raise LadderSpecError(f"{name}[{i}]: expected shape {shapes[i]} ({self._REGION_DIMS[what]}), "
                                          f"got {tuple(t.shape)}")
                region.append(check(t, f"{name}[{i}]", l, i))
            return torch.stack(region) if shape is not None else tuple(region)
        t = convert(given, name)
        if self._parents is None:
            t = _per_region(t, (n, *shapes[0]), name, dims)  # a uniform tree: the level's one shape
        elif shape is None or tuple(t.shape) != (n, *shape):
            raise LadderSpecError(f"{name}: expected a list of {n} {what}s (one per region) or one array of them, "
                                  f"got shape {tuple(t.shape)}")
        return check(t, name, l, None)

    @staticmethod
    def _as_lookup(t: Any, name: str) -> torch.Tensor:
        arr = np.asarray(t.detach().cpu() if isinstance(t, torch.Tensor) else t)
        if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and np.all(np.mod(arr, 1) == 0)):
            raise LadderSpecError(f"{name}: expected integer event indices, got dtype {arr.dtype}")
        return torch.as_tensor(arr.astype(np.int64))

    def _in_range(self, t: torch.Tensor, name: str, l: int, i: int | None) -> torch.Tensor:
        """Lookup ``t`` of region i of level l (``i`` None: ``(R_l, K)`` of the whole level) within its events."""
        hi: int | torch.Tensor
        if i is not None:
            hi = self.region_events[l][i]
        else:
            hi = self.events[l] if self._parents is None else torch.tensor(self.region_events[l])[:, None]
        bad = (t < 0) | (t >= hi)
        if i is not None and bad.any():
            raise LadderSpecError(f"{name}: events must lie in [0, {hi})")
        if i is None and bad.any():
            r, c = bad.nonzero()[0].tolist()
            mr = self.region_events[l][r]
            raise LadderSpecError(f"{name}[{r}, {c}]: event {t[r, c].item()} outside [0, {mr})"
                                  + (f" (events[{l}] = {mr})" if self._parents is None else ""))
        return t

    # ------------------------------------------------------------------ structure
    @property
    def depth(self) -> int:
        """Number of levels below the root (leaves are at level ``depth``)."""
        return len(self.num_regions) - 1

    @property
    def total_regions(self) -> int:
        """Number of regions over all levels (the width of an event matrix z)."""
        return self.level_offsets[-1]

    @property
    def num_classes(self) -> int:
        """Number of labels: the events of the top region (z_omega = y)."""
        return self.events[0]

    @property
    def leaf_events(self) -> int:
        """The one event count every leaf has."""
        return self.events[-1]

    @property
    def branching(self) -> tuple[int, ...] | None:
        """``(b_0, ..., b_{d-1})`` of a uniform tree (breadth-first numbering); None for any other graph."""
        return self._branching

    def is_uniform(self) -> bool:
        """Whether this is a uniform tree: :attr:`branching` is set and its tables stack per level."""
        return self._branching is not None

    def is_tree(self) -> bool:
        """Whether every region below the top has exactly one parent."""
        return self._branching is not None or all(len(ps) == 1 for lvl in self.parents[1:] for ps in lvl)

    @property
    def region_events(self) -> tuple[tuple[int, ...], ...]:
        """``region_events[l][i]``: m of region i of level l (``events[l]`` is the level's largest)."""
        if self._region_events is None:
            self._region_events = tuple((m,) * n for m, n in zip(self.events, self.num_regions, strict=True))
        return self._region_events

    @property
    def parents(self) -> tuple[tuple[tuple[int, ...], ...], ...]:
        """``parents[l][i]``: the sorted indices in level ``l - 1`` of the parents of region i of level l
        (``((),)`` at level 0)."""
        if self._parents is None:
            self._parents = tree_parents(_known(self._branching, "branching", "a uniform tree"))  # one without parents
        return self._parents

    @property
    def children(self) -> tuple[tuple[tuple[int, ...], ...], ...]:
        """``children[l][i]``: the sorted indices in level ``l + 1`` of the children of region i of level l
        (``()`` for the leaves)."""
        if "children" not in self._cache:
            kids = children_of(self.parents, self.num_regions)
            self._cache["children"] = (*map(tuple, kids), tuple(() for _ in range(self.num_regions[-1])))
        return self._cache["children"]

    def parent_sizes(self, level: int, i: int) -> tuple[int, ...]:
        """Event counts of the parents of region i of ``level`` (the radices of its table's rows)."""
        return tuple(self.region_events[level - 1][p] for p in self.parents[level][i])

    def child_sizes(self, level: int, i: int) -> tuple[int, ...]:
        """Event counts of the children of region i of ``level`` (the radices of its lookup)."""
        return tuple(self.region_events[level + 1][c] for c in self.children[level][i])

    def edges(self) -> list[tuple[int, int, int]]:
        """Every parent-child edge as ``(level of the child, parent index, child index)``."""
        return [(l, p, i) for l in range(1, self.depth + 1) for i, ps in enumerate(self.parents[l]) for p in ps]

    def parent_index(self, level: int) -> torch.Tensor:
        """Index (within level ``level - 1``) of the one parent of each region of ``level`` of a tree: ``(R_l,)``."""
        if not 1 <= level <= self.depth:
            raise ValueError(f"level: expected 1..{self.depth}, got {level}")
        if self._branching is not None:
            return torch.arange(self.num_regions[level]) // self._branching[level - 1]
        if not self.is_tree():
            raise ValueError("parent_index: regions of this ladder have several parents; use parents[level]")
        return torch.tensor([ps[0] for ps in self.parents[level]], dtype=torch.int64)

    def region_level(self) -> torch.Tensor:
        """Level of every region, in global order: ``(total_regions,)``."""
        return torch.repeat_interleave(torch.arange(self.depth + 1), torch.tensor(self.num_regions))

    def region_names(self) -> list[str]:
        """Region names in global order: those of the spec's region tree, else ``"l.i"`` for
        region i of level l (``"0.0"`` is the root / label)."""
        if self._region_names is not None:
            return list(self._region_names)
        return [f"{l}.{i}" for l in range(self.depth + 1) for i in range(self.num_regions[l])]

    def leaves_under(self, level: int) -> int:
        """How many leaf regions lie under one region of ``level`` of a uniform tree."""
        if self._branching is None:
            raise ValueError("leaves_under: only for a uniform tree (regions of this ladder see different "
                             "numbers of leaves)")
        return int(np.prod(self._branching[level:], dtype=np.int64))

    def event_dtype(self) -> torch.dtype:
        """Smallest integer dtype that holds every event index (storage dtype of samples)."""
        top = max(self.events)
        return torch.uint8 if top <= 256 else torch.int16 if top <= 2**15 else torch.int32

    # ------------------------------------------------------------------ tables, stacked and per region
    def _per_level(self, key: str, levels: Sequence[Any] | None, build: Callable[..., Any]) -> Any:
        """``build(levels)``, cached under ``key`` (one tuple, shared by with_emission's copies as the tables
        are); None for the other mode."""
        if levels is not None and key not in self._cache:
            self._cache[key] = build(levels)
        return None if levels is None else self._cache[key]

    @property
    def tables(self) -> tuple[torch.Tensor | None, ...] | None:
        """Top-down: ``tables[l-1]`` P(z | parents) of level l stacked, ``(R_l, rows, m_l)`` (a tree:
        ``(R_l, m_{l-1}, m_l)``), or None for a level whose regions' tables differ in shape."""
        return self._per_level("tables", self._tables, _stacked)

    @property
    def region_tables(self) -> tuple[tuple[torch.Tensor, ...], ...] | None:
        """Top-down: ``region_tables[l][i]`` ``(prod parent m, m_i)`` (``region_tables[0] == ()``)."""
        return self._per_level("region_tables", self._tables, lambda levels: ((), *map(tuple, levels)))

    @property
    def productions(self) -> tuple[Productions | None, ...] | None:
        """Top-down: ``productions[l]`` the joint child draws of the regions of level l
        (:class:`~teachers.productions.Productions`), None where their children are drawn on their own; None when
        no level draws jointly (the common case).  On such a level ``tables[l]`` holds the children's marginals."""
        return self._productions

    def joint_levels(self) -> tuple[int, ...]:
        """The levels whose regions draw their children jointly (empty for most ladders)."""
        return tuple(l for l, p in enumerate(self._productions or ()) if p is not None)

    @property
    def leaf_prior(self) -> torch.Tensor | None:
        """Bottom-up: the leaves' priors ``(R_d, m_d)``."""
        return self._leaf_prior

    @property
    def leaf_priors(self) -> tuple[torch.Tensor, ...] | None:
        """Bottom-up: ``leaf_priors[i]`` ``(m_d,)`` of leaf i."""
        return None if self._leaf_prior is None else tuple(self._leaf_prior)

    @property
    def lookup(self) -> tuple[torch.Tensor | None, ...] | None:
        """Bottom-up: ``lookup[l]`` of level l stacked ``(R_l, prod child m)``, or None for a level whose
        regions' lookups differ in size."""
        return self._per_level("lookup", self._lookup, _stacked)

    @property
    def lookups(self) -> tuple[tuple[torch.Tensor, ...], ...] | None:
        """Bottom-up: ``lookups[l][i]`` ``(prod child m,)`` int64 for every region above the leaves."""
        return self._per_level("lookups", self._lookup, lambda levels: tuple(map(tuple, levels)))

    def state_key(self) -> tuple:
        """A key that changes whenever the teacher might: the identity and version counter of every tensor that
        defines it (prior or leaf priors, every level's tables or lookups, the emission's parameters), so that an
        in-place edit of a table, or a table or emission put in place of another, is seen.  Caches of values
        computed from the tables (:meth:`fingerprint`, :func:`inference.sum_product.tree_plan`) are keyed by it
        and never serve a stale value."""
        tensors = [self.prior, self._leaf_prior]
        tensors += [t for p in self._productions or () if p is not None for t in (p.rules, p.probs)]
        for levels in (self._tables, self._lookup):
            for t in levels or ():
                tensors += [t] if isinstance(t, torch.Tensor) else list(t)
        tensors += [v for v in vars(self.emission).values() if isinstance(v, torch.Tensor)]
        # (rhm_params and pairwise_view_of: the spec, hence the fingerprint, carries them)
        return (id(self.emission), self.rhm_params, self.pairwise_view_of,
                *((id(t), t._version) for t in tensors if isinstance(t, torch.Tensor)))

    # ------------------------------------------------------------------ for people
    def describe(self) -> str:
        """A few lines for people: mode, depth, regions, events and branching (or parents) per level."""
        kind = "" if self.is_uniform() else ", tree" if self.is_tree() else ", DAG"
        lines = [f"Ladder {self.name!r}: mode={self.mode}, depth={self.depth}, "
                 f"{self.total_regions} regions, {self.num_classes} classes{kind}, emission={self.emission.kind}"]
        for l in range(self.depth + 1):
            if self._branching is not None:  # is_uniform()
                b = f", {self._branching[l]} children each" if l < self.depth else " (leaves)"
                joint = self._productions[l] if self._productions is not None and l < self.depth else None
                if joint is not None:
                    b += f" drawn jointly ({joint.num_productions} productions per event)"
                lines.append(f"  level {l}: {self.num_regions[l]} regions x {self.events[l]} events{b}")
            else:
                ms = sorted(set(self.region_events[l]))
                npar = sorted({len(ps) for ps in self.parents[l]}) if l else [0]
                lines.append(f"  level {l}: {self.num_regions[l]} regions, events {ms}, parents per region {npar}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        if self._branching is not None:  # is_uniform()
            joint = f", productions at levels {list(self.joint_levels())}" if self._productions else ""
            return (f"Ladder(mode={self.mode!r}, branching={list(self._branching)}, events={list(self.events)}"
                    f"{joint}, emission={self.emission.kind!r})")
        return (f"Ladder(mode={self.mode!r}, regions per level={list(self.num_regions)}, "
                f"{'tree' if self.is_tree() else 'DAG'}, emission={self.emission.kind!r})")

    def __getstate__(self) -> dict:
        """The ladder's fields without its cache, for pickling (an engine's task).  A process pool pickles a task's
        arguments in a feeder thread while this process goes on working with the same ladder and filling its cache;
        pickling that dict as it grows raised "dictionary changed size during iteration" (seen once in the demo,
        whose other seeds run in worker processes).  ``dict(self.__dict__)`` is one C-level copy, atomic under the
        GIL; the worker rebuilds whatever cached value it needs."""
        state = dict(self.__dict__)
        state["_cache"] = {}
        return state

    def with_emission(self, emission: Emission | dict) -> Ladder:
        """The same events with another leaf observation model."""
        new = object.__new__(Ladder)
        new.__dict__.update(self.__dict__)
        new._cache = {k: v for k, v in self._cache.items() if k != "fingerprint"}  # the emission is hashed too
        new.emission = self._check_emission(emission)
        return new

    def independent_children(self) -> Ladder:
        """The independent-children twin of a ladder whose levels draw their children jointly (an RHM): the same
        tree, prior, emission and per-child marginal tables P(z_child | z_parent) (:attr:`tables`, which on a
        production level hold the children's marginals), but every child drawn on its own given its parent.

        Every pairwise law along an edge (and so every product of them along a path: P(z_leaf | y), what the
        reformulation and the shallow student's flat view read) is the teacher's; the siblings' joint law is not.
        On an RHM the twin's s-tuples are no longer the m productions of their parent but any product of the
        children's supports, so the rules stop being unambiguous: the class is no longer a function of the input,
        and its Bayes error is above 0.  It is the control "the same students on a ladder with independent
        children" (data drawn with replacement: the twin has no derivations to split).

        :returns: the twin, named ``independent(<name>)``; ``rhm_params`` is not carried (P_max and n_c m^L count
            derivations the twin does not have).
        :raises ValueError: a ladder without productions (a bottom-up one included).
        """
        if self.mode != TOPDOWN or self._productions is None:
            raise ValueError("ladder: expected a top-down ladder whose children are drawn jointly (productions, e.g. "
                             "Ladder.rhm); this one already draws every child on its own" if self.mode == TOPDOWN
                             else "ladder: expected a top-down ladder with productions, got a bottom-up one")
        tables = [t.clone() for t in _known(self.tables, "tables", "a top-down ladder") if t is not None]
        return Ladder(self._branching, self.events, prior=self.prior, tables=tables, emission=self.emission,
                      name=f"independent({self.name})")

    @classmethod
    def _layout_only(cls, events: Sequence, parents: Sequence, mode: str | None = None) -> Ladder:
        """A ladder object holding only a checked graph layout (for constructors that draw tables for it); with
        ``mode``, the sizes of the tables that mode needs checked too (:func:`~teachers.regions._check_graph_sizes`)."""
        lay = object.__new__(cls)
        lay.mode, lay._cache = TOPDOWN, {}
        lay._init_graph_layout(parents, events)
        if mode is not None:
            _check_graph_sizes(lay.parents, lay.region_events, lay.num_regions, mode)
        return lay


def _independent_children(ladder: Ladder, what: str) -> Ladder:
    """``ladder`` itself, or a ValueError where ``what`` (a function that reads only the per-child tables) would
    treat jointly drawn children as independent, which would be silently wrong."""
    if ladder.productions is not None:
        raise ValueError(f"{what}: this ladder draws the children of levels {list(ladder.joint_levels())} jointly "
                         f"(productions); {what} treats children as independent given their parents and does not "
                         f"take productions yet")
    return ladder


def _joint_law(ladder: Ladder, what: str) -> Ladder:
    """``ladder`` itself, or a ValueError where ``what`` needs the joint law of all events and ``ladder`` is only a
    pairwise view of another teacher (:attr:`Ladder.pairwise_view_of`)."""
    if ladder.pairwise_view_of is not None:
        raise ValueError(f"{what}: this ladder is a pairwise view of {ladder.pairwise_view_of!r} (the same P(z_leaf "
                         f"| y) per leaf, not the same joint law); sample, model or condition on that teacher "
                         f"instead")
    return ladder


def _check_ladder(ladder: object) -> Ladder:
    """``ladder`` itself, or a TypeError naming the argument (the one check of every entry point taking a ladder)."""
    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
    return ladder
