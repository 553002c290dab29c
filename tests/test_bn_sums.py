"""Per-event sums through BN's affine maps of a batch (smaso/student/bn_sums.py): BN's output and the gradient at
its input summed from the sums of BN's input and of the raw gradient, instead of per example.

References: per-example sums of :func:`smaso.student.batchnorm.bn_forward` / ``bn_backward`` (Eq 10, Thm 5) by a
one-hot contraction over the rows, and the accumulator's per-example path (a record without BN's mean).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest_student import assert_close

import smaso.student.batch_sums as batch_sums
from smaso.student.batchnorm import bn_backward, bn_forward
from smaso.student.bn_sums import bn_event_sums
from smaso.student.frequency import FrequencyAccumulator, ReplicateAccumulator
from smaso.student.network import LadderStudent
from teachers import Ladder, sample_ladder


def test_bn_event_sums_equal_the_per_example_sums():
    g = torch.Generator().manual_seed(0)
    N, R, M, n = 200, 3, 5, 4
    f = torch.randn(N, R, n, generator=g, dtype=torch.float64) * 2 + 1.5  # an offset: mu far from 0
    graw = torch.randn(N, R, n, generator=g, dtype=torch.float64)
    c1 = torch.rand(R, n, generator=g, dtype=torch.float64) + 0.5
    c0 = torch.randn(R, n, generator=g, dtype=torch.float64)
    z = torch.randint(0, M, (N, R), generator=g)
    z[0] = M - 1  # every event of some region seen, and (below) one event of region 0 never
    z[:, 0] = z[:, 0].clamp(max=M - 2)
    fbar, f_tilde, mu, sigma = bn_forward(f, c1, c0)
    gf, dc1, dc0 = bn_backward(graw, f_tilde, sigma, c1)
    one_hot = torch.nn.functional.one_hot(z, M).to(torch.float64)  # (N, R, M)

    def sums(q):
        return torch.einsum("nra,nrj->raj", one_hot, q)

    got_fbar, got_gf = bn_event_sums(sums(f), sums(graw), one_hot.sum(0), c1, c0, mu, sigma, dc1 / N, dc0 / N)
    assert_close(got_fbar, sums(fbar), 1e-12, "fbar")
    assert_close(got_gf, sums(gf), 1e-12, "g_f")
    assert torch.equal(got_fbar[0, M - 1], torch.zeros(n, dtype=torch.float64))  # an unseen event sums to 0


def _bn_batches(batch_norm, dtype=torch.float64):
    lad = Ladder.random(depth=3, branching=2, events=4, seed=2)
    s = sample_ladder(lad, 300, seed=4)
    st = LadderStudent(lad, 5, batch_norm=batch_norm, dtype=dtype, seed=1)
    with torch.no_grad():  # BN scales and shifts away from 1 and 0
        for l in range(lad.depth):
            for p in st.bn_params(l) or ():
                p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(7 + l), dtype=dtype))
    x = s.inputs(dtype=dtype)
    recs = [st.forward_backward(x[a: a + 100], s.y[a: a + 100], stacked=True) for a in (0, 100, 200)]
    return st, recs, [s.z[a: a + 100] for a in (0, 100, 200)]


def _states_close(a: dict, b: dict, tol: float) -> None:
    for key, va in a.items():
        if isinstance(va, list):
            for l, (x, y) in enumerate(zip(va, b[key], strict=True)):
                if x is not None:
                    assert_close(x, y, tol, f"{key}[{l}]")


@pytest.mark.parametrize("groups", [None, 3])
def test_bn_levels_map_the_batch_sums_equal_the_per_example_path(groups, monkeypatch):
    """With BN after the gate the accumulator maps F's and the raw gradient's sums through BN (one call per BN
    level and batch, or row group), and its state equals the per-example path's (records without BN's mean) to
    float64 round-off, also for row groups (the batch's BN constants, not the group's)."""
    st, recs, zs = _bn_batches(True)
    calls = []
    monkeypatch.setattr(batch_sums, "bn_event_sums", lambda *a: calls.append(1) or bn_event_sums(*a))

    def run(records):
        acc = FrequencyAccumulator(st) if groups is None else ReplicateAccumulator(st, groups=groups)
        for rec, z in zip(records, zs, strict=True):
            acc.add(rec, z)
        return acc.state_dict()

    mapped = run(recs)
    bn_levels = [l for l in range(st.ladder.depth) if st.bn_params(l) is not None]
    assert bn_levels and len(calls) == len(bn_levels) * len(recs) * (groups or 1)
    calls.clear()
    summed = run([dataclasses.replace(rec, mu=[]) for rec in recs])
    assert not calls
    for a, b in zip(mapped.get("groups", [mapped]), summed.get("groups", [summed]), strict=True):
        _states_close(a, b, 1e-12)


def test_bn_before_the_gate_and_no_bn_sum_per_example(monkeypatch):
    """Only BN after the gate has the affine maps of this module (before it, fbar = s o BN(u) is not affine)."""
    monkeypatch.setattr(batch_sums, "bn_event_sums", lambda *a: pytest.fail("BN's maps taken"))
    for batch_norm in ("before", False):
        st, recs, zs = _bn_batches(batch_norm)
        acc = FrequencyAccumulator(st)
        for rec, z in zip(recs, zs, strict=True):
            acc.add(rec, z)
        assert acc.n == 300
