"""Reads of a value that an invariant says is set (a mode's tables, a uniform tree's branching, the per-edge
tables below the top) give a ValueError naming what is missing, not a TypeError or AttributeError on None
(issue 37, types: the checks mypy needs are the ones a user meets)."""

from __future__ import annotations

import pytest
import torch

from inference.sum_product import leaf_factors, tree_plan
from teachers import Ladder
from teachers.statistics import exact_statistics


def test_known_returns_the_value_and_names_a_missing_one() -> None:
    from teachers.ladder import _known

    t = torch.zeros(2)
    assert _known(t, "prior", "a top-down ladder") is t
    lad = Ladder.random(depth=2, branching=2, events=3, mode="bottomup", seed=0)
    with pytest.raises(ValueError, match=r"^ladder\.prior: set only on a top-down ladder$"):
        _known(lad.prior, "prior", "a top-down ladder")


def test_p_ab_of_level_0_says_no_edge_enters_it() -> None:
    stats = exact_statistics(Ladder.random(depth=2, branching=2, events=3, seed=0))
    assert torch.equal(stats.P_ab(1, 0), stats.P_down[1][0])  # the edges below the top still read
    with pytest.raises(ValueError, match=r"P_down\[0\]: no table \(no edge enters level 0\)"):
        stats.P_ab(0, 0)


def test_leaf_factors_without_x_or_ll_names_both() -> None:
    lad = Ladder.random(depth=2, branching=2, events=3, seed=0)
    plan = tree_plan(lad, torch.device("cpu"))  # holds its ladder weakly: lad keeps it alive
    with pytest.raises(ValueError, match=r"leaf_factors: expected x or ll, got neither"):
        leaf_factors(plan)


def test_ladder_parts_read_through_known_with_its_one_message() -> None:
    # smaso._ladder_parts and teachers.ladder._known were written for the same job: the parts read in smaso give
    # _known's message (one format, made in one place), and a set part is returned as it is
    from smaso import _ladder_parts as lp

    top = Ladder.tree([[2], [1, 2]], [2, [2, 3], 2], seed=0)  # no branching; no stacked tables (shapes differ)
    bottom = Ladder.tree([[2], [1, 2]], [2, 2, 2], seed=0, mode="bottomup")  # lookup[1] not stacked (sizes 2, 4)
    assert lp.prior(top) is top.prior and lp.region_tables(top) is top.region_tables
    assert lp.leaf_prior(bottom) is bottom.leaf_prior and lp.lookups(bottom) is bottom.lookups
    assert all(torch.equal(a, b) for a, b in zip(lp.leaf_priors(bottom), bottom.leaf_priors, strict=True))
    cases = [
        (lp.uniform_branching, top, r"branching: set only on a uniform tree"),
        (lp.prior, bottom, r"prior: set only on a top-down ladder"),
        (lp.region_tables, bottom, r"region_tables: set only on a top-down ladder"),
        (lp.stacked_tables, bottom, r"tables: set only on a top-down ladder"),
        (lp.stacked_tables, top, r"tables\[0\]: set only on a level whose regions' tables share one shape "
                                 r"\(level 1's do not\)"),
        (lp.leaf_prior, top, r"leaf_prior: set only on a bottom-up ladder"),
        (lp.leaf_priors, top, r"leaf_priors: set only on a bottom-up ladder"),
        (lp.lookups, top, r"lookups: set only on a bottom-up ladder"),
        (lp.stacked_lookups, top, r"lookup: set only on a bottom-up ladder"),
        (lp.stacked_lookups, bottom, r"lookup\[1\]: set only on a level whose regions' lookups share one size "
                                     r"\(level 1's do not\)"),
    ]
    for read, lad, message in cases:
        with pytest.raises(ValueError, match=rf"^ladder\.{message}$"):
            read(lad)
