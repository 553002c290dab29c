"""The jackknife's row groups as an axis of one accumulation (issue 39):
:func:`~smaso.student.row_groups.add_row_groups` adds every group of a batch at once, and its sums equal adding each
group's rows (:func:`record_rows`, strided Delta W) to its own accumulator, the path ``ReplicateAccumulator.add``
took before: float64 to round-off, float32 to its round-off, the counts exact."""

from __future__ import annotations

import pytest
import torch

from smaso.student.frequency import _RECORD, FrequencyAccumulator, ReplicateAccumulator, record_rows
from smaso.student.network import LadderStudent
from smaso.student.row_groups import add_row_groups, groups_at_once
from teachers import Ladder, sample_ladder

F64 = torch.float64


def _one_group_at_a_time(st, rec, z, bounds, dtype):
    """The reference: each group's rows as a record of their own into a fresh accumulator (the old bounds path)."""
    parts = [FrequencyAccumulator(st, dtype) for _ in range(len(bounds) - 1)]
    for part, lo, hi in zip(parts, bounds[:-1], bounds[1:], strict=True):
        if hi > lo:
            part.add(record_rows(rec, slice(lo, hi), None, strided=True), z[lo:hi])
    return parts


@pytest.mark.parametrize("emission, dtype, biases", [("onehot", F64, True), ("gaussian", F64, False),
                                                     ("onehot", torch.float32, True)])
def test_groups_at_once_equal_one_group_at_a_time(emission, dtype, biases):
    lad = Ladder.random(depth=3, branching=3, events=4, seed=2, emission=emission,
                        sigma=0.5 if emission == "gaussian" else None)
    s = sample_ladder(lad, 300, seed=1)
    st = LadderStudent(lad, 5, dtype=dtype, seed=0, bias=biases)
    rec = st.forward_backward(s.inputs(dtype=dtype), s.y, stacked=True)
    bounds = [0, 40, 40, 130, 131, 300]  # an empty group and a group of one row among them
    ref = _one_group_at_a_time(st, rec, s.z, bounds, dtype)
    acc = ReplicateAccumulator(st, dtype, groups=5)
    assert groups_at_once(acc.parts[0], rec, [_RECORD[k] for k in acc.parts[0].summed], 256)
    add_row_groups(acc.parts, rec, s.z, bounds, [_RECORD[k] for k in acc.parts[0].summed])
    tol = 1e-12 if dtype == F64 else 2e-6
    for g, (mine, theirs) in enumerate(zip(acc.parts, ref, strict=True)):
        a, b = mine.state_dict(), theirs.state_dict()
        assert a["n"] == b["n"] == bounds[g + 1] - bounds[g]
        assert a["loss_sum"] == b["loss_sum"]
        for key in FrequencyAccumulator._SUMS:
            for l, (x, y) in enumerate(zip(a[key], b[key], strict=True)):
                if y is None:
                    assert x is None
                elif key in ("counts", "joint_counts"):
                    assert torch.equal(x, y), f"group {g} {key}[{l}]"
                else:
                    err = float((x - y).abs().max())
                    assert err <= tol * (1 + float(y.abs().max())), f"group {g} {key}[{l}]: {err:.3g}"


def test_replicate_accumulator_takes_the_groups_at_once(monkeypatch):
    """``ReplicateAccumulator.add`` with bounds goes through the group axis on a tree (not one record per group)."""
    import smaso.student.frequency as frequency

    lad = Ladder.random(depth=2, branching=2, events=3, seed=0)
    s = sample_ladder(lad, 64, seed=0)
    st = LadderStudent(lad, 3, dtype=torch.float32, seed=0)
    rec = st.forward_backward(s.inputs(), s.y, stacked=True)
    calls = []
    monkeypatch.setattr(frequency, "record_rows", lambda *a, **k: calls.append(a))  # the old path would call it
    acc = ReplicateAccumulator(st, groups=2)
    acc.add(rec, s.z, [0, 30, 64])
    assert not calls and [p.n for p in acc.parts] == [30, 34]
