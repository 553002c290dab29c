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
