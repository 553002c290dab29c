"""One-hot leaves reach a streamed evaluation pass as their events (issue 39): ``accumulate_statistics`` hands
``forward_backward`` the chunk's integer leaf events instead of building one-hot x per batch where the pass may
reorder its sums (no BN, batch sums below float64), with the sums of the one-hot pass to float32 round-off; a
float64 pass still builds x (bit for bit as before), and bad leaf events are refused once per chunk."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from smaso.student.frequency import accumulate_statistics
from smaso.student.network import LadderStudent
from teachers import Ladder, sample_ladder


def _inputs_seen(monkeypatch) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    real = LadderStudent.forward_backward

    def spy(self, x, *a, **k):
        seen.append(x.dtype)
        return real(self, x, *a, **k)

    monkeypatch.setattr(LadderStudent, "forward_backward", spy)
    return seen


@pytest.mark.parametrize("groups", [None, 3])
def test_a_float32_pass_takes_leaf_events_with_the_one_hot_sums(monkeypatch, groups):
    lad = Ladder.random(depth=2, branching=3, events=4, seed=1)
    s = sample_ladder(lad, 500, seed=2)
    st = LadderStudent(lad, 4, dtype=torch.float32, seed=0)
    ref, _ = accumulate_statistics(st, dataclasses.replace(s, x=s.inputs()), batch_size=128, groups=groups)
    seen = _inputs_seen(monkeypatch)
    got, _ = accumulate_statistics(st, s, batch_size=128, groups=groups)
    assert seen and all(not dt.is_floating_point for dt in seen)  # the events, never a one-hot x
    a, b = got.result(), ref.result()
    for key in ("Fbar", "G", "D"):
        for x, y in zip(a.means[key], b.means[key], strict=True):
            if y is not None:
                assert (x - y).abs().max() <= 1e-6 * (1 + y.abs().max()), key
    assert all(torch.equal(x, y) for x, y in zip(a.counts, b.counts, strict=True))


def test_a_float64_pass_still_builds_one_hot_inputs(monkeypatch):
    lad = Ladder.random(depth=2, branching=2, events=3, seed=0)
    st = LadderStudent(lad, 3, dtype=torch.float32, seed=0)
    seen = _inputs_seen(monkeypatch)
    accumulate_statistics(st, sample_ladder(lad, 64, seed=0), batch_size=32, dtype=torch.float64, groups=2)
    assert seen == [torch.float32, torch.float32]


def test_bad_leaf_events_are_refused_before_the_pass():
    lad = Ladder.random(depth=2, branching=2, events=3, seed=0)
    s = sample_ladder(lad, 40, seed=0)
    z = s.z.clone()
    z[5, -1] = 3  # a leaf event outside [0, 3)
    st = LadderStudent(lad, 3, dtype=torch.float32, seed=0)
    with pytest.raises(ValueError, match=r"z: level 2 \(the leaves\), region 3 holds event 3 \(row 5\)"):
        accumulate_statistics(st, dataclasses.replace(s, z=z), batch_size=16)


def test_reused_buffers_reuse_the_leaves_one_hot_too():
    """forward_backward with a previous record's buffers writes the leaves' node-major one-hot into the same memory
    (no fresh allocation per batch), with the values of a fresh pass; without reuse a record keeps its own."""
    lad = Ladder.random(depth=2, branching=2, events=3, seed=0)
    st = LadderStudent(lad, 3, dtype=torch.float32, seed=0)
    leaves = [sample_ladder(lad, 32, seed=k).leaves for k in range(2)]
    y = torch.zeros(32, dtype=torch.long)
    first = st.forward_backward(leaves[0], y, stacked=True)
    kept = first.fbar[-1].clone()
    again = st.forward_backward(leaves[0], y, stacked=first.stacked)
    second = st.forward_backward(leaves[1], y, stacked=again.stacked)
    fresh = st.forward_backward(leaves[1], y, stacked=True)
    assert second.fbar[-1].data_ptr() == again.fbar[-1].data_ptr() != fresh.fbar[-1].data_ptr()
    assert torch.equal(second.fbar[-1], fresh.fbar[-1]) and torch.equal(first.fbar[-1], kept)
    assert all(b is None or torch.equal(a, b) for a, b in zip(second.dW, fresh.dW, strict=True))


def test_the_chunk_s_leaf_events_are_checked_as_stored_not_widened(monkeypatch):
    """``leaf_event_inputs`` reads the range of the leaf events in their stored dtype (uint8 in a store): no int64
    copy of the chunk's leaves (``part.leaves``: 8 bytes a leaf, ~130 MB per chunk of the 341-region ladder), and a
    bad stored event is still refused, named."""
    from smaso.student.rows import leaf_event_inputs
    from teachers.sampling import EventRows

    lad = Ladder.random(depth=2, branching=3, events=4, seed=1)
    s = sample_ladder(lad, 50, seed=2)
    part = dataclasses.replace(s, z=s.z.to(torch.uint8))
    st = LadderStudent(lad, 4, dtype=torch.float32, seed=0)
    widened: list[int] = []
    real = EventRows.events
    monkeypatch.setattr(EventRows, "events", lambda self, level: widened.append(level) or real(self, level))
    assert leaf_event_inputs(part, st) and not widened
    z = part.z.clone()
    z[7, lad.level_offsets[-2] + 2] = 4  # one past the leaves' 4 events
    with pytest.raises(ValueError, match=r"region 2 holds event 4 \(row 7\)"):
        leaf_event_inputs(dataclasses.replace(part, z=z), st)
