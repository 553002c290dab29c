"""Named results, one return type per function (issue 37): ``map_events`` a named tuple, ``bayes_optimal_accuracy``
a dataclass, ``posterior(...).marginals`` computed when asked for and an error otherwise (never a silent None), and
``collect_statistics`` the same :class:`FrequencyStatistics` with or without ``groups``."""

from __future__ import annotations

import dataclasses
import math
import warnings

import pytest
import torch

from inference.posterior import (
    BayesAccuracy,
    MapEvents,
    MarginalsNotComputed,
    bayes_optimal_accuracy,
    map_events,
    posterior,
)
from smaso.student.frequency import FrequencyStatistics, ReplicateAccumulator, collect_statistics
from smaso.student.network import LadderStudent
from teachers import Ladder, sample_ladder

F64 = torch.float64


@pytest.fixture(scope="module")
def data():
    lad = Ladder.random(depth=2, branching=2, events=3, seed=1, emission="gaussian", sigma=0.7)
    s = sample_ladder(lad, 200, seed=0)
    return lad, s, s.inputs(dtype=F64)


def test_map_events_is_a_named_tuple_that_still_unpacks(data):
    lad, _, x = data
    res = map_events(lad, x)
    assert isinstance(res, MapEvents) and res._fields == ("z", "log_joint")
    z, log_joint = res
    assert z is res.z and log_joint is res.log_joint and res[0] is z
    assert res.z.shape == (200, lad.total_regions) and res.z.dtype == torch.int64 and res.log_joint.dtype == F64
    # log p(z_map, x) <= log p(x) = log sum_z p(z, x), with equality only where one z carries all the mass
    gap = posterior(lad, x).log_evidence - res.log_joint
    assert bool((gap >= -1e-10).all()) and float(gap.max()) > 0.1


def test_marginals_are_computed_when_asked_and_an_error_otherwise(data):
    lad, _, x = data
    bare = posterior(lad, x)
    assert not bare.has_marginals and not hasattr(bare, "marginals")
    for read in (lambda: bare.marginals, lambda: bare.region_marginal(1, 0), bare.region_marginals):
        with pytest.raises(MarginalsNotComputed, match=r"marginals=True"):
            read()
    assert issubclass(MarginalsNotComputed, ValueError) and issubclass(MarginalsNotComputed, AttributeError)
    full = posterior(lad, x, marginals=True)
    assert full.has_marginals and len(full.marginals) == lad.depth + 1
    assert [tuple(m.shape) for m in full.marginals] == [(200, r, m) for r, m in zip(lad.num_regions, lad.events,
                                                                                      strict=True)]
    # the root's marginal is p(y | x), computed both ways: identical to round-off
    assert (full.marginals[0][:, 0] - bare.label).abs().max().item() < 1e-12
    assert "_marginals" not in repr(full)


def test_bayes_optimal_accuracy_is_a_named_result(data):
    lad, s, x = data
    acc = bayes_optimal_accuracy(lad, x, s.y)
    assert isinstance(acc, BayesAccuracy) and dataclasses.is_dataclass(acc)
    q = posterior(lad, x).label.max(-1).values
    assert acc.n == 200 and acc.expected == pytest.approx(q.mean().item(), abs=1e-12)
    assert acc.stderr == pytest.approx(q.std().item() / math.sqrt(200), rel=1e-12)
    assert acc.empirical == pytest.approx((posterior(lad, x).predict() == s.y).double().mean().item(), abs=0)
    assert acc.as_dict() == {"expected": acc.expected, "stderr": acc.stderr, "stderr_empirical": acc.stderr_empirical,
                             "n": 200, "empirical": acc.empirical}
    with pytest.raises(dataclasses.FrozenInstanceError):
        acc.expected = 1.0
    no_labels = bayes_optimal_accuracy(lad, x)
    assert no_labels.empirical is None and "empirical" not in no_labels.as_dict()
    # the former dict's item access still answers, with a DeprecationWarning naming the attribute
    with pytest.warns(DeprecationWarning, match=r"result\.expected"):
        assert acc["expected"] == acc.expected
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(KeyError):
            no_labels["empirical"]


def test_collect_statistics_has_one_return_type(data):
    lad, s, x = data
    st = LadderStudent(lad, 3, dtype=F64, seed=0)
    plain = collect_statistics(st, x, s.y, s.z, dtype=F64)
    grouped = collect_statistics(st, x, s.y, s.z, dtype=F64, groups=4)
    assert type(plain) is type(grouped) is FrequencyStatistics
    assert plain.groups is None and grouped.groups == 4 and isinstance(grouped.jackknife, ReplicateAccumulator)
    # the row groups change nothing in the statistics of every row
    for key in ("F", "G"):
        for a, b in zip(getattr(plain, key), getattr(grouped, key), strict=True):
            assert (a is None and b is None) or (a - b).abs().max().item() < 1e-12
    loo = list(grouped.leave_one_out())
    assert [r.num_examples for r in loo] == [150, 150, 150, 150]
    assert all(type(r) is FrequencyStatistics and r.groups is None for r in loo)
    with pytest.raises(ValueError, match=r"groups=K"):
        plain.leave_one_out()
    assert grouped.result() is grouped  # code written for the former accumulator return reads the same
