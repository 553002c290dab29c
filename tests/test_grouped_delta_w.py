"""A pass cut into row groups computes no whole-batch Delta W (issue 39, the main job): each group's Delta W is summed
from the rows by ``ReplicateAccumulator.add``, so ``forward_backward(delta_w=False)`` leaves the batch's out, and the
rest of the record, the groups' sums and the streamed pass stay what they were, bit for bit."""

from __future__ import annotations

import pytest
import torch

from smaso.student.frequency import FrequencyAccumulator, ReplicateAccumulator, accumulate_statistics
from smaso.student.network import PER_EXAMPLE, LadderStudent
from teachers import Ladder, sample_ladder

F32 = torch.float32


@pytest.fixture(scope="module")
def tree():
    lad = Ladder.random(depth=3, branching=2, events=4, seed=3, emission="onehot")
    return lad, sample_ladder(lad, 200, seed=1)


def _events(s):
    return s.z[:, s.ladder.level_offsets[-2]:]  # the leaves' events: the one-hot inputs as integers


def test_forward_backward_without_delta_w_leaves_only_delta_w_out(tree):
    """Without Delta W the record is the same but for dW and, given leaf events, their one-hot (Delta W's only
    reader: rec.fbar[d] None)."""
    lad, s = tree
    d = lad.depth
    st = LadderStudent(lad, 4, dtype=F32, seed=0)
    for x in (s.inputs(dtype=F32), _events(s)):  # float one-hot inputs, and leaf events (the evaluation's)
        full = st.forward_backward(x, s.y, stacked=True)
        part = st.forward_backward(x, s.y, stacked=True, delta_w=False)
        assert all(w is None for w in part.dW) and all(w is not None for w in full.dW[:d])
        assert (part.fbar[d] is None) == (not x.is_floating_point()) and full.fbar[d] is not None
        part.fbar[d] = full.fbar[d]
        for key in (*PER_EXAMPLE, "db", "stacked"):
            for a, b in zip(getattr(full, key), getattr(part, key), strict=True):
                assert (a is None and b is None) or torch.equal(a, b), key
        assert torch.equal(full.loss_tensor, part.loss_tensor)


@pytest.mark.parametrize("stacked", [True, False])  # the groups at once (row_groups), or one record per group
def test_groups_sum_their_own_delta_w_from_a_record_without_the_batch_s(tree, stacked):
    lad, s = tree
    st = LadderStudent(lad, 4, dtype=F32, seed=0)
    bounds = [0, 50, 50, 120, 200]
    states = []
    for delta_w in (True, False):
        rec = st.forward_backward(_events(s), s.y, stacked=stacked, delta_w=delta_w)
        acc = ReplicateAccumulator(st, F32, groups=4)
        acc.add(rec, s.z, bounds)
        states.append(acc.state_dict()["groups"])
    for a, b in zip(*states, strict=True):
        assert a["n"] == b["n"]
        for key in FrequencyAccumulator._SUMS:
            for x, y in zip(a[key], b[key], strict=True):
                assert (x is None and y is None) or torch.equal(x, y), key
    assert sum(float(p["dW"][0].abs().sum()) for p in states[1]) > 0  # (Delta W summed, not left at zero)


def test_an_accumulator_refuses_a_record_without_delta_w_where_it_reads_the_batch_s(tree):
    lad, s = tree
    st = LadderStudent(lad, 4, dtype=F32, seed=0)
    rec = st.forward_backward(_events(s), s.y, stacked=True, delta_w=False)
    with pytest.raises(ValueError, match="delta_w=False"):
        FrequencyAccumulator(st, F32).add(rec, s.z)
    acc = FrequencyAccumulator(st, F32)
    acc.add(rec, s.z, rows=slice(0, 80))  # a row group of it: Delta W of those rows, from the rows
    ref = FrequencyAccumulator(st, F32)
    ref.add(st.forward_backward(_events(s), s.y, stacked=True), s.z, rows=slice(0, 80))
    assert all(torch.equal(a, b) for a, b in zip(acc.dW, ref.dW, strict=True))


@pytest.mark.parametrize("dtype, asked", [(F32, False), (torch.float64, True)])
def test_the_grouped_streaming_pass_asks_for_no_whole_batch_delta_w(tree, monkeypatch, dtype, asked):
    """The float32 pass with row groups (the main job's evaluation) makes its records without the batch's Delta W; a
    float64 pass (one batch at a time, bit for bit as before) with it; and the grouped pass's sums are those of
    records made with it."""
    lad, s = tree
    st = LadderStudent(lad, 4, dtype=dtype, seed=0)
    seen, real = [], LadderStudent.forward_backward

    def spy(self, *a, **k):
        seen.append(k.get("delta_w", True))
        return real(self, *a, **k)

    monkeypatch.setattr(LadderStudent, "forward_backward", spy)
    acc, correct = accumulate_statistics(st, s, batch_size=32, dtype=dtype, groups=3)
    assert seen and set(seen) == {asked}
    monkeypatch.setattr(LadderStudent, "forward_backward",
                        lambda self, *a, **k: real(self, *a, **{**k, "delta_w": True}))
    ref, ref_correct = accumulate_statistics(st, s, batch_size=32, dtype=dtype, groups=3)
    assert correct == ref_correct
    for a, b in zip(acc.state_dict()["groups"], ref.state_dict()["groups"], strict=True):
        for key in FrequencyAccumulator._SUMS:
            for x, y in zip(a[key], b[key], strict=True):
                assert (x is None and y is None) or torch.equal(x, y), key


def test_a_record_without_its_leaves_one_hot_is_completed_from_the_events_or_refused(tree):
    from smaso.student.mergeable import record_rows, with_leaves

    lad, s = tree
    st = LadderStudent(lad, 4, dtype=F32, seed=0)
    rec = st.forward_backward(_events(s), s.y, stacked=True, delta_w=False)
    with pytest.raises(ValueError, match="without their one-hot"):
        record_rows(rec, slice(0, 10))
    full = with_leaves(rec, s.z, st)
    assert rec.fbar[-1] is None and torch.equal(full.fbar[-1], s.inputs(dtype=F32))
    assert with_leaves(full, s.z, st) is full
