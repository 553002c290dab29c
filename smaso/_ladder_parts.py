"""A ladder's layout- and mode-dependent parts, and per-level entries, typed as set.

:class:`~teachers.ladder.Ladder` holds ``branching`` only for a uniform tree, ``prior`` and ``tables`` only
top-down, ``leaf_prior(s)`` and ``lookup(s)`` only bottom-up, and a stacked ``tables[l]`` / ``lookup[l]`` only for
a level whose regions share one shape; elsewhere they are None.  Code that has already checked the layout or mode
(or builds the ladder itself) reads them through these functions: each returns the part typed as set, or raises a
ValueError naming what the ladder lacks, instead of an assert at every read.  The check and its message are
:func:`teachers.ladder._known`'s, which the teachers and inference packages use for the same reads (one format,
``ladder.<part>: set only on <holder>``, made in one place).  :func:`at_level` does the same for per-level lists
whose undefined entries are None (``EventStatistics.joints[0]``, ``P_down[0]``, a statistic at the leaves).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch

from teachers.ladder import Ladder, _known

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


def uniform_branching(ladder: Ladder) -> tuple[int, ...]:
    """``(b_0, ..., b_{d-1})`` of a uniform tree."""
    return _known(ladder.branching, "branching", "a uniform tree")


def prior(ladder: Ladder) -> torch.Tensor:
    """Top-down: P(y) ``(m_0,)``."""
    return _known(ladder.prior, "prior", "a top-down ladder")


def stacked_tables(ladder: Ladder) -> tuple[torch.Tensor, ...]:
    """Top-down: ``tables[l-1]`` of level l stacked, ``(R_l, rows, m_l)``, every level's regions of one shape."""
    tables = _known(ladder.tables, "tables", "a top-down ladder")
    return tuple(_known(t, f"tables[{l - 1}]", f"a level whose regions' tables share one shape (level {l}'s do not)")
                 for l, t in enumerate(tables, 1))


def region_tables(ladder: Ladder) -> tuple[tuple[torch.Tensor, ...], ...]:
    """Top-down: ``region_tables[l][i]`` ``(prod parent m, m_i)`` (``region_tables[0] == ()``)."""
    return _known(ladder.region_tables, "region_tables", "a top-down ladder")


def leaf_prior(ladder: Ladder) -> torch.Tensor:
    """Bottom-up: the leaves' priors ``(R_d, m_d)``."""
    return _known(ladder.leaf_prior, "leaf_prior", "a bottom-up ladder")


def leaf_priors(ladder: Ladder) -> tuple[torch.Tensor, ...]:
    """Bottom-up: ``leaf_priors[i]`` ``(m_d,)`` of leaf i."""
    return _known(ladder.leaf_priors, "leaf_priors", "a bottom-up ladder")


def stacked_lookups(ladder: Ladder) -> tuple[torch.Tensor, ...]:
    """Bottom-up: ``lookup[l]`` of level l stacked ``(R_l, prod child m)``, every level's regions of one size."""
    lookup = _known(ladder.lookup, "lookup", "a bottom-up ladder")
    return tuple(_known(t, f"lookup[{l}]", f"a level whose regions' lookups share one size (level {l}'s do not)")
                 for l, t in enumerate(lookup))


def lookups(ladder: Ladder) -> tuple[tuple[torch.Tensor, ...], ...]:
    """Bottom-up: ``lookups[l][i]`` ``(prod child m,)`` int64 for every region above the leaves."""
    return _known(ladder.lookups, "lookups", "a bottom-up ladder")
