"""The graphs of a ladder's regions: who is whose parent, and the mixed-radix codes of their events.

A ladder is layered: region ``i`` of level ``l`` has global index ``level_offsets[l] + i``; ``parents[l][i]``
is the sorted tuple of its parents' indices in level ``l - 1`` (``((),)`` at level 0) and ``children[l][i]``
(:func:`children_of`) the sorted tuple of the regions of level ``l + 1`` that list it.  A uniform tree with
branching ``(b_0, ..., b_{d-1})`` numbers its regions breadth-first, so region i of level l has the parent
``i // b_{l-1}`` (:func:`tree_parents`).

Mixed-radix codes (first index most significant): for regions ``(r_1, ..., r_k)`` with event counts
``(m_1, ..., m_k)``, the configuration ``(z_1, ..., z_k)`` has code ``sum_j z_j prod_{j' > j} m_j'``
(:func:`mixed_radix`); the rows of a region's table and the entries of its lookup are in this order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from .validation import (
    MAX_DEPTH,
    MAX_LOOKUP,
    MAX_REGIONS,
    MAX_TABLE_ENTRIES,
    TOPDOWN,
    LadderSpecError,
    _as_int,
    _as_int_tuple,
    _check_entries,
)

__all__ = ["check_parents", "children_of", "conv1d_parents", "conv2d_parents", "conv_children", "mixed_radix",
           "parse_region_tree", "tree_parents"]


def tree_parents(branching: Sequence[int]) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """``parents[l][i]`` of the uniform tree with ``branching`` (breadth-first numbering: parent ``i // b``)."""
    out: list[tuple[tuple[int, ...], ...]] = [((),)]
    n = 1
    for b in branching:
        out.append(tuple((i // b,) for i in range(n * b)))
        n *= b
    return tuple(out)


def mixed_radix(z: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """Codes of configurations ``z`` ``(..., k)`` with radices ``sizes`` (first most significant): ``(...,)`` int64."""
    code = torch.zeros(z.shape[:-1], dtype=torch.int64, device=z.device)
    for j, m in enumerate(sizes):
        code = code * int(m) + z[..., j].long()
    return code


def conv_children(n_below: int, kernel: int, stride: int) -> list[tuple[int, ...]]:
    """Children of each region of a 1-D convolution-like level: region j covers ``[j s, j s + k)`` of the
    ``n_below`` regions below (``floor((n_below - k) / s) + 1`` regions; every region below covered)."""
    n = _conv_count(n_below, kernel, stride)
    return [tuple(range(j * stride, j * stride + kernel)) for j in range(n)]


def _conv_count(n_below: int, kernel: int, stride: int) -> int:
    """The number of regions of :func:`conv_children`'s level, computed (nothing built), its arguments checked."""
    if kernel < 1 or stride < 1 or kernel > n_below:
        raise LadderSpecError(f"conv: expected 1 <= kernel <= {n_below} regions below and stride >= 1, got "
                              f"kernel={kernel}, stride={stride}")
    n = (n_below - kernel) // stride + 1
    if (n - 1) * stride + kernel != n_below:
        raise LadderSpecError(f"conv: kernel {kernel} and stride {stride} leave regions {(n - 1) * stride + kernel}.."
                              f"{n_below - 1} of the level below uncovered (need (n_below - kernel) % stride == 0)")
    return n


def _conv_shapes(first: tuple[int, ...], kernels: Sequence[int], strides: Sequence[int], what: str
                ) -> list[tuple[int, ...]]:
    """The regions per dimension of each level of a convolution-like graph, leaves first, computed from its
    arguments before any region list is built: ``first`` the leaves' shape (``(width,)`` or ``(H, W)``); every
    level checked as :func:`conv_children` does, and the total against MAX_REGIONS (the message names ``what``)."""
    kernels, strides = _as_int_tuple(kernels, "kernels"), _as_int_tuple(strides, "strides")
    if len(kernels) != len(strides) or not kernels:
        raise LadderSpecError(f"{what}: expected len(kernels) == len(strides) >= 1, got {len(kernels)}, "
                              f"{len(strides)}")
    shapes = [tuple(first)]
    for k, s in zip(kernels, strides, strict=True):
        shapes.append(tuple(_conv_count(n, k, s) for n in shapes[-1]))
    total = sum(math.prod(shape) for shape in shapes)
    if total > MAX_REGIONS:
        leaves = f"width {first[0]}" if len(first) == 1 else f"shape {'x'.join(map(str, first))}"
        raise LadderSpecError(f"{what}: {leaves} with kernels {list(kernels)} and strides {list(strides)} gives "
                              f"{total} regions, more than {MAX_REGIONS}; use fewer leaves or larger strides")
    return shapes


def _invert(children: list[tuple[int, ...]], n_below: int) -> tuple[tuple[int, ...], ...]:
    parents: list[list[int]] = [[] for _ in range(n_below)]
    for j, ch in enumerate(children):
        for c in ch:
            parents[c].append(j)
    return tuple(tuple(p) for p in parents)


def _conv_levels(first: int | tuple[int, ...], kernels: Sequence[int], strides: Sequence[int], what: str,
                 split: Callable[..., Any]) -> tuple:
    """Shared upward construction: ``split(n_below_state, k, s)`` returns ``(children, n_below, state)``; ``kernels``
    and ``strides`` are lists of integers (integral floats accepted, LadderSpecError otherwise)."""
    kernels, strides = _as_int_tuple(kernels, "kernels"), _as_int_tuple(strides, "strides")
    if len(kernels) != len(strides) or not kernels:
        raise LadderSpecError(f"{what}: expected len(kernels) == len(strides) >= 1, got {len(kernels)}, "
                              f"{len(strides)}")
    state, parents_up = first, []
    for k, s in zip(kernels, strides, strict=True):
        children, n_below, state = split(state, k, s)
        parents_up.append(_invert(children, n_below))
    return state, (((),), *parents_up[::-1])


def conv1d_parents(width: int, kernels: Sequence[int], strides: Sequence[int]
                   ) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """The graph of :meth:`teachers.ladder.Ladder.conv1d`: ``parents[l][i]`` (top first, ``parents[0] == ((),)``).

    Level by level from the ``width`` leaves up, region j covers ``[j s, j s + k)`` of the level below
    (:func:`conv_children` with ``kernels[t]``, ``strides[t]``); the top level must be one region."""
    def split(n: int, k: int, s: int) -> Any:
        children = conv_children(n, k, s)
        return children, n, len(children)

    width = _as_int(width, "width")
    _conv_shapes((width,), kernels, strides, "conv1d")  # sizes first: nothing built for a graph too large
    top, parents = _conv_levels(width, kernels, strides, "conv1d", split)
    if top != 1:
        raise LadderSpecError(f"conv1d: the top level has {top} regions, expected 1 (choose the last "
                              "kernel to cover the level below)")
    return parents


def conv2d_parents(shape: Sequence[int], kernels: Sequence[int], strides: Sequence[int]
                   ) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """The graph of :meth:`teachers.ladder.Ladder.conv2d` on an ``(H, W)`` grid (row-major regions): square ``k x k``
    windows with stride ``s`` per level from the leaves up; the top level must be ``(1, 1)``."""
    def split(hw: tuple[int, int], k: int, s: int) -> Any:
        h, w = hw
        rows, cols = conv_children(h, k, s), conv_children(w, k, s)
        return [tuple(r * w + c for r in rr for c in cc) for rr in rows for cc in cols], h * w, (len(rows), len(cols))

    shape = _as_int_tuple(shape, "shape", 2)
    _conv_shapes(shape, kernels, strides, "conv2d")  # sizes first: nothing built for a graph too large
    top, parents = _conv_levels(shape, kernels, strides, "conv2d", split)
    if top != (1, 1):
        raise LadderSpecError(f"conv2d: the top level is {top}, expected (1, 1)")
    return parents


def _conv1d_name(width: int, kernels: Sequence[int], strides: Sequence[int]) -> str:
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
        out = out * m + value  # type: ignore[operator]  # every leaf of field_ lies in some child's field
    out[bad] = 0
    return out


def children_of(parents: Sequence[Sequence[Sequence[int]]], num_regions: Sequence[int]) -> list[list[tuple[int, ...]]]:
    """``children[l][j]``: the sorted regions of level ``l + 1`` that list region j of level l as a parent, for
    the levels above the leaves (the inverse of ``parents``; one pass over the edges)."""
    out = []
    for l in range(len(num_regions) - 1):
        kids: list[list[int]] = [[] for _ in range(num_regions[l])]
        for i, ps in enumerate(parents[l + 1]):  # i increases, so every list comes out sorted
            for p in ps:
                kids[p].append(i)
        out.append([tuple(k) for k in kids])
    return out


def _parse_parents(parents: Any) -> tuple[tuple[tuple[tuple[int, ...], ...], ...], tuple[int, ...]]:
    """``parents`` as nested tuples of ints, checked (sizes, then :func:`check_parents`): ``(parents, num_regions)``."""
    try:
        parents = tuple(tuple(tuple(int(p) for p in ps) for ps in lvl) for lvl in parents)
    except (TypeError, ValueError) as e:
        raise LadderSpecError(f"parents: expected nested lists of integers, one list of parent lists per level "
                              f"({e})") from None
    if len(parents) < 2:
        raise LadderSpecError(f"parents: expected at least two levels (the label and the leaves), got {len(parents)}")
    if len(parents) > MAX_DEPTH + 1:
        raise LadderSpecError(f"parents: at most {MAX_DEPTH} levels below the root, got {len(parents) - 1}")
    num_regions = tuple(len(lvl) for lvl in parents)
    if sum(num_regions) > MAX_REGIONS:
        raise LadderSpecError(f"parents: more than {MAX_REGIONS} regions")
    check_parents(parents, num_regions)
    return parents, num_regions


def check_parents(parents: tuple[tuple[tuple[int, ...], ...], ...], num_regions: Sequence[int]) -> None:
    """The layered-DAG rules on ``parents`` (one tuple per region of each level, top first)."""
    if parents[0] != ((),):
        raise LadderSpecError("parents[0]: the top region has no parents: expected [[]]")
    for l in range(1, len(num_regions)):
        n_above = num_regions[l - 1]
        covered: set[int] = set()
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


def parse_region_tree(regions: Sequence[dict[str, Any]]) -> tuple[list[int], list[int], list[str]]:
    """An explicit region tree -> (branching, events, names in breadth-first order).

    ``regions`` is a list of ``{"name": str, "events": int, "children": [names]}`` (leaves
    have no or empty ``children``); the root is the one region that is nobody's child.
    The tree must be layered: every region of a level has the same number of events and of
    children, and all leaves are at the same depth.  Tables are then given in the
    breadth-first order of this tree (children in the order listed).  The fields' types are those
    :func:`teachers.spec_check.check_spec` checks.
    """
    by_name: dict[str, dict] = {}
    for i, r in enumerate(regions):
        name = str(r["name"])
        if name in by_name:
            raise LadderSpecError(f"regions[{i}]: region name {name!r} is used twice")
        by_name[name] = r
    parent: dict[str, str] = {}
    for name, r in by_name.items():
        for c in r.get("children") or []:
            c = str(c)
            if c not in by_name:
                raise LadderSpecError(f"regions: region {name!r} has a child {c!r} that is not a defined region")
            if c in parent:
                raise LadderSpecError(f"regions: region {c!r} is a child of both {parent[c]!r} and {name!r}")
            parent[c] = name
    roots = [n for n in by_name if n not in parent]
    if len(roots) != 1:
        raise LadderSpecError(f"regions: expected exactly one root (a region that is nobody's child), found {roots}")
    order, level, depth_of = [], [roots[0]], {roots[0]: 0}
    branching: list[int] = []
    events: list[int] = []
    while level:
        ev = {int(by_name[n]["events"]) for n in level}
        if len(ev) != 1:
            raise LadderSpecError(f"regions: regions at depth {len(events)} have different event counts {sorted(ev)}; "
                                  "a ladder needs the same m at every region of a level")
        events.append(ev.pop())
        if len(events) > MAX_DEPTH + 1:
            raise LadderSpecError(f"regions: the tree is more than {MAX_DEPTH} levels deep below the root "
                                  f"{roots[0]!r}")
        order += level
        kids = [len(by_name[n].get("children") or []) for n in level]
        if len(set(kids)) != 1:
            raise LadderSpecError(f"regions: regions at depth {len(events) - 1} have {sorted(set(kids))} children; "
                                  "a ladder needs the same branching at every region of a level "
                                  "(and all leaves at the same depth)")
        nxt = [str(c) for n in level for c in by_name[n].get("children") or []]
        for c in nxt:
            depth_of[c] = len(events)
        if kids[0]:
            branching.append(kids[0])
        level = nxt
    unreachable = [n for n in by_name if n not in depth_of]
    if unreachable:  # only possible through a cycle that avoids the root
        raise LadderSpecError(f"regions: region(s) {unreachable} cannot be reached from the root {roots[0]!r}")
    return branching, events, order


def _radix_product(sizes: Iterable[int], cap: int = 2**64) -> int | None:
    """The product of ``sizes``, or None once it exceeds ``cap`` (never a huge integer)."""
    out = 1
    for m in sizes:
        out *= m
        if out > cap:
            return None
    return out


def _check_graph_sizes(parents: Sequence[Sequence[Sequence[int]]], region_events: Sequence[Sequence[int]],
                       num_regions: Sequence[int], mode: str) -> None:
    """The tables a region graph's ``mode`` needs, refused from the graph before any is drawn or read: top-down,
    each region's table (its parents' configurations x its events) and each level's tables together at most
    MAX_TABLE_ENTRIES entries; bottom-up, each region's lookup (its children's configurations) at most
    MAX_LOOKUP, each level's lookups and the leaf priors at most MAX_TABLE_ENTRIES (as for a uniform tree)."""
    if mode == TOPDOWN:
        for l in range(1, len(num_regions)):
            total = 0
            for i, ps in enumerate(parents[l]):
                r, mi = _radix_product(region_events[l - 1][p] for p in ps), region_events[l][i]
                if r is None or r * mi > MAX_TABLE_ENTRIES:
                    raise LadderSpecError(f"tables[{l - 1}][{i}]: {r or 'over 2^64'} parent configurations x {mi} "
                                          f"events is more than {MAX_TABLE_ENTRIES} entries")
                total += r * mi
            _check_entries(total, f"tables[{l - 1}]", f"the {num_regions[l]} tables of level {l} together")
        return
    for l, kids in enumerate(children_of(parents, num_regions)):
        total = 0
        for j, ch in enumerate(kids):
            size = _radix_product(region_events[l + 1][c] for c in ch)
            if size is None or size > MAX_LOOKUP:
                raise LadderSpecError(f"lookup[{l}][{j}]: {size or 'over 2^64'} child configurations is more than "
                                      f"{MAX_LOOKUP}")
            total += size
        _check_entries(total, f"lookup[{l}]", f"the {num_regions[l]} lookups of level {l} together")
    _check_entries(sum(region_events[-1]), "leaf_prior", f"{num_regions[-1]} leaf regions x {region_events[-1][0]} "
                   "events")
