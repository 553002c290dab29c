"""The reformulation and the diagnosis run where the statistics are, in the dtype asked for (issue 39): statistics on
the meta device (no values: a move to the host or a host read fails there) give a prediction and the diagnosis's
terms on meta, with the CPU run's shapes; ``dtype=float32`` computes in float32 what float64 computes (to float32
round-off), and float64 stays the default."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from smaso.student.diagnosis import _comparison_terms, compare_statistics_to_theory
from smaso.student.frequency import FrequencyStatistics, collect_statistics
from smaso.student.network import LadderStudent
from smaso.student.reformulation import Reformulation, reformulate
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder
from teachers.statistics import exact_statistics

LAD = Ladder.random(depth=2, branching=[2, 3], events=[3, 4, 2], mode="topdown", concentration=0.6, seed=3)


def _moved(v: object, device: str) -> object:
    if isinstance(v, torch.Tensor):
        return v.to(device)
    if isinstance(v, list):
        return [_moved(t, device) for t in v]
    if isinstance(v, dict):
        return {k: _moved(t, device) for k, t in v.items()}
    return v


def _stats_on(stats: FrequencyStatistics, device: str) -> FrequencyStatistics:
    P = dataclasses.replace(stats.P, marginals=_moved(stats.P.marginals, device), joints=_moved(stats.P.joints, device))
    return dataclasses.replace(stats, **{k: _moved(getattr(stats, k), device)
                                         for k in ("counts", "means", "Fc", "Gp_tilde", "dW", "db")}, P=P)


@pytest.fixture(scope="module", params=[{}, {"batch_norm": True}, {"batch_norm": "before"}],
                ids=["plain", "bn", "bn_before"])
def trained(request):
    st = LadderStudent(LAD, 4, seed=0, dtype=torch.float64, **request.param)
    s = sample_ladder(LAD, 200, 2)
    return st, collect_statistics(st, s.inputs(dtype=torch.float64), s.y, s.z)


def _tensors(pred: Reformulation) -> list[torch.Tensor]:
    return [t for k in ("U", "F", "Fbar", "G_tilde", "dW", "db") for t in getattr(pred, k) if t is not None]


@pytest.mark.parametrize(("propagate", "loss"), [(True, "squared"), (False, "cross_entropy")])
def test_reformulate_runs_on_the_statistics_device(trained, propagate, loss) -> None:
    st, stats = trained
    meta = _stats_on(stats, "meta")
    for P in (meta.P, exact_statistics(LAD)):  # the exact statistics live on the host: moved to the statistics'
        for dtype in (None, torch.float32):
            got = reformulate(st, P, meta, propagate=propagate, loss=loss, dtype=dtype)
            want = reformulate(st, stats.P, stats, propagate=propagate, loss=loss, dtype=dtype)
            for g, w in zip(_tensors(got), _tensors(want), strict=True):
                assert g.device.type == "meta" and g.shape == w.shape and g.dtype == w.dtype
                assert w.dtype == (torch.float64 if dtype is None else dtype)


def test_comparison_terms_run_on_the_statistics_device(trained) -> None:
    st, stats = trained
    levels, leaves = _comparison_terms(st, _stats_on(stats, "meta"), exact_statistics(LAD), "squared")
    want_levels, want_leaves = _comparison_terms(st, stats, exact_statistics(LAD), "squared")
    for row, want in zip([*levels, leaves], [*want_levels, want_leaves], strict=True):
        assert row.keys() == want.keys()
        for k, term in row.items():
            assert term.v.device.type == "meta" and term.v.shape == want[k].v.shape, k
            assert term.m.device.type == "meta" and term.m.shape == want[k].m.shape, k


def test_float32_computes_what_float64_does(trained) -> None:
    st, stats = trained
    for propagate in (True, False):
        want = reformulate(st, stats.P, stats, propagate=propagate)
        assert all(torch.equal(a, b) for a, b in zip(_tensors(reformulate(st, stats.P, stats, propagate=propagate,
                                                                         dtype=torch.float64)),
                                                     _tensors(want), strict=True))
        # float32 round-off (6e-8) times the conditioning of Eq 12's normalization, on the prediction's scale (a
        # quantity that BN makes 0 exactly, such as db below BN before the gate, is float32 round-off of it)
        scale = max(float(w.abs().max()) for w in _tensors(want))
        for g, w in zip(_tensors(reformulate(st, stats.P, stats, propagate=propagate, dtype=torch.float32)),
                        _tensors(want), strict=True):
            assert g.dtype == torch.float32
            torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-5 * scale)
    got, want = (compare_statistics_to_theory(st, stats, dtype=dt) for dt in (torch.float32, None))
    for a, b in zip(got["levels"], want["levels"], strict=True):
        for k in ("F_propagated", "G_propagated", "dW_propagated", "F_local", "G_local", "dW_local"):
            assert a[k] == pytest.approx(b[k], abs=1e-4), k


@pytest.mark.parametrize("bad", ["float64", torch.int64, 3])
def test_a_dtype_that_is_no_floating_dtype_is_refused(bad):
    """``dtype=`` of the reformulation and the comparison: a string, an integer dtype or a number is a clear ValueError
    naming the argument, not a cast or a deep torch error."""
    lad = Ladder.random(depth=2, branching=2, events=3, seed=0)
    s = sample_ladder(lad, 64, 0, progress=False)
    st = LadderStudent(lad, 4, dtype=torch.float64)
    stats = collect_statistics(st, s.inputs(dtype=torch.float64), s.y, s.z)
    with pytest.raises(ValueError, match=r"dtype: expected a floating torch\.dtype"):
        reformulate(st, stats.P, stats, dtype=bad)
    with pytest.raises(ValueError, match=r"dtype: expected a floating torch\.dtype"):
        compare_statistics_to_theory(st, stats, dtype=bad)
