"""A ladder's layout- and mode-dependent parts, and per-level entries, typed as set.

:class:`~teachers.ladder.Ladder` holds ``branching`` only for a uniform tree, ``prior`` and ``tables`` only
top-down, ``leaf_prior(s)`` and ``lookup(s)`` only bottom-up, and a stacked ``tables[l]`` / ``lookup[l]`` only for
a level whose regions share one shape; elsewhere they are None.  Code that has already checked the layout or mode
(or builds the ladder itself) reads them through these functions: each returns the part typed as set, or raises a
ValueError naming what the ladder lacks, in one place instead of an assert at every read.  :func:`at_level` does
the same for per-level lists whose undefined entries are None (``EventStatistics.joints[0]``, ``P_down[0]``, a
statistic at the leaves).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch

from teachers.ladder import Ladder

__all__ = ["at_level", "leaf_prior", "leaf_priors", "lookups", "prior", "region_tables", "stacked_lookups",
           "stacked_tables", "uniform_branching"]

_T = TypeVar("_T")


def at_level(levels: Sequence[_T | None], level: int, name: str) -> _T:
    """``levels[level]`` of a per-level list, typed as set.

    :raises ValueError: ``levels[level]`` is None (undefined at that level), naming ``name[level]``.
    """
    value = levels[level]
    if value is None:
        raise ValueError(f"{name}[{level}]: undefined (None) at level {level}")
    return value


def _lacks(ladder: Ladder, what: str, expected: str) -> ValueError:
    return ValueError(f"ladder: {what} is set only for {expected}; got {ladder!r}")


def uniform_branching(ladder: Ladder) -> tuple[int, ...]:
    """``(b_0, ..., b_{d-1})`` of a uniform tree."""
    if ladder.branching is None:
        raise _lacks(ladder, "branching", "a uniform tree")
    return ladder.branching


def prior(ladder: Ladder) -> torch.Tensor:
    """Top-down: P(y) ``(m_0,)``."""
    p: torch.Tensor | None = ladder.prior
    if p is None:
        raise _lacks(ladder, "prior", "a top-down ladder")
    return p


def stacked_tables(ladder: Ladder) -> tuple[torch.Tensor, ...]:
    """Top-down: ``tables[l-1]`` of level l stacked, ``(R_l, rows, m_l)``, every level's regions of one shape."""
    tables = ladder.tables
    if tables is None:
        raise _lacks(ladder, "tables", "a top-down ladder")
    out = tuple(t for t in tables if t is not None)
    if len(out) != len(tables):
        raise _lacks(ladder, "a stacked tables[l]", "a level whose regions' tables share one shape")
    return out


def region_tables(ladder: Ladder) -> tuple[tuple[torch.Tensor, ...], ...]:
    """Top-down: ``region_tables[l][i]`` ``(prod parent m, m_i)`` (``region_tables[0] == ()``)."""
    tables = ladder.region_tables
    if tables is None:
        raise _lacks(ladder, "region_tables", "a top-down ladder")
    return tables


def leaf_prior(ladder: Ladder) -> torch.Tensor:
    """Bottom-up: the leaves' priors ``(R_d, m_d)``."""
    p = ladder.leaf_prior
    if p is None:
        raise _lacks(ladder, "leaf_prior", "a bottom-up ladder")
    return p


def leaf_priors(ladder: Ladder) -> tuple[torch.Tensor, ...]:
    """Bottom-up: ``leaf_priors[i]`` ``(m_d,)`` of leaf i."""
    p = ladder.leaf_priors
    if p is None:
        raise _lacks(ladder, "leaf_priors", "a bottom-up ladder")
    return p


def stacked_lookups(ladder: Ladder) -> tuple[torch.Tensor, ...]:
    """Bottom-up: ``lookup[l]`` of level l stacked ``(R_l, prod child m)``, every level's regions of one size."""
    lookup = ladder.lookup
    if lookup is None:
        raise _lacks(ladder, "lookup", "a bottom-up ladder")
    out = tuple(t for t in lookup if t is not None)
    if len(out) != len(lookup):
        raise _lacks(ladder, "a stacked lookup[l]", "a level whose regions' lookups share one size")
    return out


def lookups(ladder: Ladder) -> tuple[tuple[torch.Tensor, ...], ...]:
    """Bottom-up: ``lookups[l][i]`` ``(prod child m,)`` int64 for every region above the leaves."""
    lk = ladder.lookups
    if lk is None:
        raise _lacks(ladder, "lookups", "a bottom-up ladder")
    return lk
