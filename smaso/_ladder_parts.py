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
from teachers.productions import Productions

__all__ = ["at_level", "leaf_prior", "leaf_priors", "lookups", "prior", "production_log_messages", "region_tables",
           "stacked_lookups", "stacked_tables", "topdown_log_messages", "uniform_branching"]

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
    """Top-down: ``tables[l-1]`` of level l stacked, ``(R_l, rows, m_l)``, every level's regions of one shape.
    Where the level above draws its children jointly (``ladder.productions``) these are the children's
    marginal tables P(z_child | z_parent): right for anything pairwise along edges, wrong for the siblings'
    joint law (read the productions for that, e.g. :func:`production_log_messages`)."""
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


def production_log_messages(joint: Productions, lam: torch.Tensor, num_regions: int) -> torch.Tensor:
    """The upward message through a level whose regions draw their ``b`` children jointly
    (:mod:`teachers.productions`): log p(x below r | z_r = a) = log sum_k probs[r, a, k]
    exp(sum_j lam[:, r b + j, rules[r, a, k, j]]), from the children's ``lam`` ``(n, R b, m_child)`` (log-space,
    -inf allowed): ``(n, R, m)`` float64.  The siblings' joint law enters here, not their marginal tables."""
    rules, probs = joint.region_rules(num_regions), joint.region_probs(num_regions)  # (R, m, K, b), (R, m, K)
    n, b = lam.shape[0], joint.arity
    own = lam.reshape(n, num_regions, b, -1)
    # gather each child's message at its event in every production: (n, R, m, K, b)
    at = own[:, torch.arange(num_regions)[:, None, None, None], torch.arange(b), rules]
    return torch.logsumexp(probs.log() + at.sum(-1), -1)


def topdown_log_messages(ladder: Ladder, ll: torch.Tensor) -> list[torch.Tensor]:
    """Top-down uniform tree: lambda of every level, log p(x below r | z_r) ``(n, R_l, m_l)`` float64, from the
    leaf log-likelihoods ``ll`` ``(n, R_d, m_d)`` (0 = an unobserved leaf), through tables or productions
    (:func:`production_log_messages`) level by level.  (:func:`inference.sum_product.log_messages` is the scaled
    pass for ladders without productions.)"""
    b = uniform_branching(ladder)
    tables, joint = stacked_tables(ladder), ladder.productions or (None,) * ladder.depth
    lam = [ll.double()]
    for l in range(ladder.depth - 1, -1, -1):
        R = ladder.num_regions[l]
        level = joint[l]
        if level is not None:
            up = production_log_messages(level, lam[0], R)
        else:  # independent children: each sends logsumexp_c log T(c | a) + lam(c); the parent sums them
            msg = torch.logsumexp(tables[l].log()[None] + lam[0][:, :, None, :], -1)  # (n, R_{l+1}, m_l)
            up = msg.reshape(msg.shape[0], R, b[l], -1).sum(2)
        lam.insert(0, up)
    return lam
