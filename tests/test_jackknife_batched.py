"""The jackknife's replicates as one batched reformulation (issue 39): :func:`~smaso.student.noise.stack_statistics`
stacks the K leave-one-out statistics along a leading axis, :func:`~smaso.student.reformulation.reformulate` runs once
for all of them, equal to K one-by-one calls to float64 round-off, and
:func:`~smaso.student.diagnosis.compare_statistics_to_theory` gets every noise floor from that one batched call."""

from __future__ import annotations

import pytest
import torch

import smaso.student.diagnosis as diagnosis
from smaso.student.diagnosis import _comparison_terms, _norm, compare_statistics_to_theory
from smaso.student.frequency import collect_statistics
from smaso.student.network import LadderStudent
from smaso.student.noise import StackedStatistics, jackknife_se, norm_floor, stack_statistics
from smaso.student.reformulation import reformulate
from teachers import Ladder, sample_ladder
from teachers.statistics import exact_statistics

F64 = torch.float64
FIELDS = ("U", "F", "Fbar", "G_tilde", "dW", "db")


def _close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    """Equal to float64 round-off relative to the tensor's scale (a BN level's db is a sum that is 0 up to round-off:
    its scale is then the round-off itself, so the floor 1e-14 absolute)."""
    err = float((a - b).abs().max()) if a.numel() else 0.0
    assert err <= 1e-12 * float(b.abs().max()) + 1e-14, f"{what}: {err:.3g}"


def _stats(lad: Ladder, n: int, width: int, batch_norm: object, loss: str = "squared", groups: int = 4):
    s = sample_ladder(lad, n, seed=3)
    st = LadderStudent(lad, width, batch_norm=batch_norm, activation="silu", dtype=F64, seed=1)
    return st, collect_statistics(st, s.inputs(dtype=F64), s.y, s.z, dtype=F64, groups=groups, loss=loss)


LADDERS = {
    "tree-gauss": lambda: Ladder.random(depth=3, branching=2, events=3, mode="topdown", concentration=1.0, seed=5,
                                        emission="gaussian", sigma=0.7),
    "conv1d": lambda: Ladder.conv1d(6, [3, 2, 3], [1, 1, 1], [3, 3, 2, 2], sigma=0.5, seed=10),
}


@pytest.mark.parametrize("which, batch_norm, loss", [("tree-gauss", False, "cross_entropy"),
                                                     ("tree-gauss", "before", "squared"),
                                                     ("conv1d", "after", "squared")])
def test_batched_reformulation_equals_one_by_one(which, batch_norm, loss):
    st, stats = _stats(LADDERS[which](), 1500, 3, batch_norm, loss)
    each = [stats, *stats.leave_one_out()]
    S = stack_statistics(each)
    assert isinstance(S, StackedStatistics) and S.sizes.tolist() == [s.num_examples for s in each]
    for l, p in enumerate(S.p):  # each replicate normalized by its own size, bit for bit
        assert all(torch.equal(p[i], s.p[l]) for i, s in enumerate(each))
    exact = exact_statistics(stats.ladder)
    for P_source in ("empirical", "exact"):  # the exact P is one table shared by (broadcast over) the replicates
        for propagate in (True, False):
            batched = reformulate(st, S.P if P_source == "empirical" else exact, S, propagate=propagate, loss=loss)
            for i, s in enumerate(each):
                one = reformulate(st, s.P if P_source == "empirical" else exact, s, propagate=propagate, loss=loss)
                for k in FIELDS:
                    for l, (a, b) in enumerate(zip(getattr(batched, k), getattr(one, k), strict=True)):
                        if b is None:
                            assert a is None
                            continue
                        assert a.shape == (len(each), *b.shape)
                        _close(a[i], b, f"{P_source} propagate={propagate} replicate {i} {k}[{l}]")


def test_floors_from_one_batched_call_equal_the_one_by_one_floors(monkeypatch):
    st, stats = _stats(LADDERS["tree-gauss"](), 1200, 3, False, groups=5)
    reps = list(stats.leave_one_out())
    calls = []
    real = diagnosis.reformulate

    def counted(*a, **k):
        calls.append(k.get("propagate"))
        return real(*a, **k)

    monkeypatch.setattr(diagnosis, "reformulate", counted)
    report = compare_statistics_to_theory(st, stats, replicates=reps)
    # the full statistics (propagated, local) and all replicates at once (propagated, local): not 2 (K + 1) calls
    assert len(calls) == 4
    monkeypatch.setattr(diagnosis, "reformulate", real)
    # reference: the replicates one by one (the diagnosis's terms of each, then the floors from the K values)
    levels_t, leaves_t = _comparison_terms(st, stats, stats.P, "squared")
    one_by_one = [_comparison_terms(st, r, r.P, "squared") for r in reps]
    d = stats.ladder.depth
    checked = 0
    for l, (row, terms) in enumerate([*zip(report["levels"], levels_t, strict=True), (report["leaves"], leaves_t)]):
        for k, t in terms.items():
            ref = norm_floor([(r[0][l] if l < d else r[1])[k].v for r in one_by_one], _norm(t.m, t.mask), t.mask)
            got = row[f"{k}_floor"]
            assert got == pytest.approx(ref, rel=1e-10, abs=1e-15), (l, k)
            checked += got > 1e-6
    assert checked > 20  # real floors (of sampling noise, not of round-off) were compared
    # replicates given already stacked: the same report
    assert compare_statistics_to_theory(st, stats, replicates=stack_statistics(reps)) == report


def test_jackknife_se_of_a_stacked_tensor_equals_that_of_its_list():
    t = torch.randn(6, 4, 3, generator=torch.Generator().manual_seed(0), dtype=F64)
    assert torch.equal(jackknife_se(t), jackknife_se(list(t)))
    assert norm_floor(t, 2.0, torch.tensor([True, False, True, True])) == norm_floor(
        list(t), 2.0, torch.tensor([True, False, True, True]))


def test_stack_statistics_refuses_what_cannot_be_stacked():
    _, stats = _stats(LADDERS["tree-gauss"](), 300, 2, False)
    _, other = _stats(LADDERS["conv1d"](), 300, 2, False)
    with pytest.raises(ValueError, match="stats: expected a non-empty"):
        stack_statistics([])
    with pytest.raises(ValueError, match="stats: expected a non-empty"):
        stack_statistics([stats, stats.P])
    with pytest.raises(ValueError, match="different ladders"):
        stack_statistics([stats, other])
