"""A population's members measured in one batched pass (smaso.student.member_statistics).

The reference: each member's own streaming pass, :func:`~smaso.student.frequency.accumulate_statistics` (its
forward_backward and FrequencyAccumulator / ReplicateAccumulator, batch by batch), and ``compare_student`` member
by member.  The event counts must agree exactly; the per-event sums, Delta W, the biases' sums and the losses (the
same products added in another order) to float64 round-off.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from history_compare import assert_same_history

import smaso.student.compare as compare
import smaso.student.frequency as frequency
from smaso.student.compare import compare_student
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.frequency import accumulate_statistics
from smaso.student.member_statistics import MemberRows, MemberSums, member_statistics, member_statistics_supported
from smaso.student.network import LadderStudent
from smaso.student.population import compare_population
from teachers.emission import GaussianEmission
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

COUNTS = ("counts", "joint_counts")


@pytest.fixture(scope="module")
def data():
    return sample_ladder(Ladder.default(), 1200, 5, progress=False)


def _parts(acc):
    return getattr(acc, "parts", [acc])


def _assert_same_sums(got, want):
    assert len(_parts(got)) == len(_parts(want))
    for a, b in zip(_parts(got), _parts(want), strict=True):
        assert a.n == b.n and a.student is b.student
        assert abs(a.loss_sum - b.loss_sum) <= 1e-12 * abs(b.loss_sum)
        for key in a._SUMS:
            for l, (u, v) in enumerate(zip(getattr(a, key), getattr(b, key), strict=True)):
                if v is None:
                    assert u is None
                elif key in COUNTS:  # integers: exact whatever the order
                    assert torch.equal(u, v), (key, l)
                else:
                    assert u.dtype == v.dtype == torch.float64 and u.shape == v.shape
                    assert (u - v).abs().max() <= 1e-12 * max(1.0, v.abs().max().item()), (key, l)


@pytest.mark.parametrize("activation, bias, groups", [("relu", True, 3), ("silu", False, None)])
def test_member_sums_equal_each_members_own_pass(data, activation, bias, groups):
    nets = [LadderStudent(data.ladder, 5, readout=4, activation=activation, bias=bias, seed=s, dtype=torch.float64)
            for s in range(3)]
    rows = sample_ladder(data.ladder, 350, 6, progress=False)  # batches of 100, 100, 100 and 50, each cut in K
    got = member_statistics(nets, rows, batch_size=100, groups=groups)
    for net, (acc, correct) in zip(nets, got, strict=True):
        want, want_correct = accumulate_statistics(net, rows, batch_size=100, groups=groups)
        assert correct == want_correct
        _assert_same_sums(acc, want)
        if groups is not None:  # the jackknife's replicates, as the one-by-one pass's
            for a, b in zip(acc.leave_one_out(), want.leave_one_out(), strict=True):
                assert torch.allclose(a.dW[1], b.dW[1], rtol=0, atol=1e-12)


def _counting(monkeypatch):
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[0])
        return accumulate_statistics(*args, **kwargs)

    monkeypatch.setattr(compare, "accumulate_statistics", counted)
    monkeypatch.setattr(frequency, "accumulate_statistics", counted)  # (what the population's fallback calls)
    return calls


def test_compare_population_measures_its_members_in_one_pass(data, monkeypatch):
    """No member runs its own statistics pass (before: one per member and checkpoint), and each member's history
    is its compare_student run's, to round-off (jackknife floors and the alignment included)."""
    student = StudentConfig(width=5, readout=4)
    trainings = [TrainingConfig(steps=12, lr=0.5, batch_size=40, seed=s, shuffle_labels=sh)
                 for s, sh in ((1, False), (1, True))]
    evaluation = EvaluationConfig(eval_every=6, eval_examples=250, eval_batch_size=128, noise_groups=3,
                                  alignment=False)
    # (as smaso demo: the first member's alignment measured too, which does not change the rows)
    evaluations = [dataclasses.replace(evaluation, alignment=True), evaluation]
    calls = _counting(monkeypatch)
    pop = compare_population(data, student, trainings, evaluations)
    assert calls == []
    for res, t, e in zip(pop, trainings, evaluations, strict=True):
        alone = compare_student(data, student, t, e)
        assert len(res.history) == 3 and assert_same_history(res.history, alone.history)
        assert "dW_local_floor" in res.history[-1]["levels"][1]
        assert torch.allclose(res.final_stats.dW[1], alone.final_stats.dW[1], rtol=0, atol=1e-12)


def test_a_pass_the_batch_does_not_cover_is_each_members_own(data, monkeypatch):
    """float32 batch sums with row groups regroup several batches (accumulate_statistics' own pass): each member
    then runs it, and the histories are the one-by-one runs' bit for bit."""
    student = StudentConfig(width=5, readout=4, dtype=torch.float32)
    trainings = [TrainingConfig(steps=6, lr=0.5, batch_size=40, seed=s) for s in (1, 2)]
    evaluation = EvaluationConfig(eval_every=6, eval_examples=300, noise_groups=3, alignment=False)
    calls = _counting(monkeypatch)
    pop = compare_population(data, student, trainings, evaluation)
    assert len(calls) == 4  # 2 members x 2 checkpoints
    for res, t in zip(pop, trainings, strict=True):
        assert res.history == compare_student(data, student, t, evaluation).history


def test_unsupported_members_are_refused_with_the_reason(data):
    lad = data.ladder
    net = LadderStudent(lad, 5, dtype=torch.float64)
    assert member_statistics_supported(net, None, 3) is None
    assert "below float64" in member_statistics_supported(net, torch.float32, 3)
    assert member_statistics_supported(net, torch.float32, None) is None
    gauss = lad.with_emission(GaussianEmission.around_one_hot(8, 4, 0.3))
    assert "one-hot" in member_statistics_supported(LadderStudent(gauss, 5), None, None)
    rows = sample_ladder(lad, 40, 7, progress=False)
    bn = LadderStudent(lad, 5, batch_norm=True, dtype=torch.float64)
    with pytest.raises(ValueError, match="Batch Norm"):
        MemberRows(bn, rows)
    built = MemberRows(net, rows, batch_size=16, groups=3)
    with pytest.raises(ValueError, match="architecture of nets"):
        MemberSums([net, LadderStudent(lad, 6, dtype=torch.float64)], built)
    with pytest.raises(ValueError, match="Batch Norm"):
        MemberSums([bn], built)
