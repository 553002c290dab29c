"""The exact focus of knowledge of every parent-child edge of any region graph (Thm 2's first condition,
framework paper §3.2; ``docs/theory.md`` §1.5), for the leak of :meth:`Ladder.leaky
<teachers.constructors.LadderConstructors.leaky>` and any other ladder with one-hot leaves.

For an edge alpha -> beta (alpha of level l-1, beta of level l), in nats::

    I_focus = I(x_beta; z_alpha | z_beta) = H(a, b) + H(b, x) - H(b) - H(a, b, x),

x_beta the leaves below beta (its receptive field on the graph: every leaf reached through children), which
with one-hot leaves are the leaf events themselves.  The joint P(z_alpha, z_beta, z_leaves) comes from
:func:`teachers.elimination.region_joint` (exact elimination, on trees and region graphs alike), so this
extends :func:`smaso.theorems.conditions.knowledge_conditions`' focus (uniform trees only) to every graph,
edge by edge.  On a uniform tree the two agree to round-off (``tests/test_leak_teacher.py``).
"""

from __future__ import annotations

import torch

from teachers.elimination import MAX_CLIQUE, region_joint
from teachers.emission import OneHotEmission
from teachers.ladder import Ladder, _check_ladder

__all__ = ["edge_focus", "focus_by_edge", "receptive_field"]


def receptive_field(ladder: Ladder, level: int, index: int) -> tuple[int, ...]:
    """The leaves below region ``index`` of ``level`` (sorted leaf indices; a leaf's field is itself)."""
    _check_ladder(ladder)
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= ladder.depth:
        raise ValueError(f"level: expected an integer in 0..{ladder.depth}, got {level!r}")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < ladder.num_regions[level]:
        raise ValueError(f"index: expected an integer in 0..{ladder.num_regions[level] - 1} (regions of level "
                         f"{level}), got {index!r}")
    below = {index}
    for l in range(level, ladder.depth):
        below = {c for r in below for c in ladder.children[l][r]}
    return tuple(sorted(below))


def _entropy(p: torch.Tensor) -> float:
    return float(-torch.special.xlogy(p, p).sum())


def edge_focus(ladder: Ladder, level: int, parent: int, child: int, *, max_clique: int = MAX_CLIQUE) -> float:
    """I(x_child; z_parent | z_child) in nats (>= 0; 0 exactly when focus holds on this edge), exact.

    :param level: the child's level (1..depth); ``parent`` indexes level ``level - 1``, ``child`` level ``level``.
    :param max_clique: the largest table the elimination may build (:func:`~teachers.elimination.region_joint`);
        the joint itself has ``m_parent * m_child * m_leaf ** len(field)`` entries.
    :raises ValueError: leaves that are not one-hot, or ``parent`` not a parent of ``child``.
    """
    _check_ladder(ladder)
    if not isinstance(ladder.emission, OneHotEmission):
        raise ValueError(f"ladder: the exact focus needs one-hot leaves (x a function of the leaf events); this "
                         f"ladder's emission is {ladder.emission.kind!r}")
    if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= ladder.depth:
        raise ValueError(f"level: expected the child's level, an integer in 1..{ladder.depth}, got {level!r}")
    field_ = receptive_field(ladder, level, child)
    if isinstance(parent, bool) or not isinstance(parent, int) or parent not in ladder.parents[level][child]:
        raise ValueError(f"parent: expected a parent of region {level}.{child} (one of "
                         f"{list(ladder.parents[level][child])}), got {parent!r}")
    if level == ladder.depth:  # x_child is the one-hot of z_child itself: nothing is left to know
        return 0.0
    # region_joint's elimination (teachers.elimination) reads the siblings' joint law: it refuses productions
    # until it takes them, so this is never computed from the marginal tables alone
    joint = region_joint(ladder, [(level - 1, parent), (level, child), *((ladder.depth, k) for k in field_)],
                         max_clique=max_clique)
    j = joint.to(torch.float64)
    h_abx = _entropy(j)
    h_bx = _entropy(j.sum(0))
    h_ab = _entropy(j.flatten(2).sum(2))
    h_b = _entropy(j.flatten(2).sum((0, 2)))
    # a sum of entropies of tables that sum to 1: round-off of a few ulps of the largest, never negative in truth
    return max(0.0, h_ab + h_bx - h_b - h_abx)


def focus_by_edge(ladder: Ladder, *, max_clique: int = MAX_CLIQUE) -> dict[tuple[int, int, int], float]:
    """:func:`edge_focus` of every edge, keyed ``(level of the child, parent, child)`` in
    :meth:`Ladder.edges <teachers.ladder.Ladder.edges>` order (the leaf level's edges are 0: one-hot leaves)."""
    _check_ladder(ladder)
    return {e: edge_focus(ladder, *e, max_clique=max_clique) for e in ladder.edges()}
