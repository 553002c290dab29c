"""Row groups' derived sums mapped once from many batches (issue 39, the main job):
:class:`~smaso.student.row_groups.DeferredDerivation` leaves U and Gf (linear maps of the edge sums by the weights,
Eq 1) pending while batches are added and maps them once when the sums are read, merged, or added to by a batch that
derives its own.  The state equals mapping every batch's (the reference, ``deferred=None``): float64 to round-off,
float32 to its round-off, the counts and edge sums bit for bit."""

from __future__ import annotations

import pytest
import torch

import smaso.student.frequency as frequency
from smaso.student.frequency import FrequencyAccumulator, ReplicateAccumulator, _chunk_statistics, _student_chunks
from smaso.student.network import LadderStudent
from smaso.student.row_groups import GROUPED_BATCHES, DeferredDerivation, settled
from teachers import Ladder, sample_ladder

F64 = torch.float64
GROUPS = 3


def _close(a: dict, b: dict, tol: float) -> None:
    """Two replicate states: counts and edge sums equal, every sum within ``tol`` of the larger's magnitude."""
    for g, (x, y) in enumerate(zip(a["groups"], b["groups"], strict=True)):
        assert x["n"] == y["n"] and x["loss_sum"] == y["loss_sum"]
        for key in FrequencyAccumulator._SUMS:
            for l, (u, v) in enumerate(zip(x[key], y[key], strict=True)):
                if v is None:
                    assert u is None
                elif key == "own":
                    err = float((u - v).abs().max())
                    assert err <= tol * (1 + float(v.abs().max())), f"group {g} own[{l}]: {err:.3g}"
                else:  # (not derived: the same adds in the same order)
                    assert torch.equal(u, v), f"group {g} {key}[{l}]"


def _batches(lad: Ladder, dtype: torch.dtype, st: LadderStudent, sizes: list[int]):
    """Per batch of ``sizes``: its record without Delta W (row groups sum their own), events, the groups' bounds, and
    its inputs and labels."""
    s = sample_ladder(lad, sum(sizes), seed=3)
    x, lo = s.inputs(dtype=dtype), 0
    for n in sizes:
        r = slice(lo, lo + n)
        lo += n
        rec = st.forward_backward(x[r], s.y[r], stacked=True, delta_w=False)
        yield rec, s.z[r], [g * n // GROUPS for g in range(GROUPS + 1)], (x[r], s.y[r])


@pytest.mark.parametrize(("emission", "dtype", "tol"), [("onehot", F64, 1e-12), ("gaussian", F64, 1e-12),
                                                        ("onehot", torch.float32, 2e-6)])
def test_derived_once_equal_batch_by_batch_through_reads_merges_and_own_derivations(emission, dtype, tol):
    lad = Ladder.random(depth=3, branching=2, events=4, seed=1, emission=emission,
                        sigma=0.5 if emission == "gaussian" else None)
    st = LadderStudent(lad, 4, dtype=dtype, seed=0, bias=True)
    ref, mine = ReplicateAccumulator(st, dtype, GROUPS), ReplicateAccumulator(st, dtype, GROUPS)
    mine._deferred = DeferredDerivation()
    other = ReplicateAccumulator(st, dtype, GROUPS)
    for rec, z, bounds, _ in _batches(lad, dtype, st, [50, 41]):
        other.add(rec, z, bounds)
    for i, (rec, z, bounds, xy) in enumerate(_batches(lad, dtype, st, [60, 37, 64, 30, 45, 52])):
        if i == 3:  # a batch that derives its own (no row bounds: each group through FrequencyAccumulator.add)
            rec = st.forward_backward(*xy, stacked=True)
        for acc in (ref, mine):
            acc.add(rec, z, None if i == 3 else bounds)
            if i == 1:  # read mid-way: settles; the next deferred batch snapshots
                acc.state_dict()
            if i == 4:
                acc.merge_(other.state_dict())
        if i in (0, 2, 5):
            _close(mine.state_dict(), ref.state_dict(), tol)
    assert float(mine.parts[0]._own_columns(0, "U").abs().max()) > 0  # (derived sums there, not zeros on both sides)
    # the statistics and the jackknife's replicates read the settled sums
    _close({"groups": [mine.total().state_dict()]}, {"groups": [ref.total().state_dict()]}, tol)


def test_weights_changed_while_sums_are_pending_are_refused():
    lad = Ladder.random(depth=2, branching=2, events=3, seed=0)
    st = LadderStudent(lad, 3, dtype=torch.float32, seed=0)
    acc = ReplicateAccumulator(st, torch.float32, GROUPS)
    acc._deferred = DeferredDerivation()
    rec, z, bounds, _ = next(_batches(lad, torch.float32, st, [40]))
    acc.add(rec, z, bounds)
    with torch.no_grad():
        st.weights[0].mul_(2.0)  # (an in-place update: the parameters' version counters move)
    with pytest.raises(ValueError, match="weights changed while row groups' sums were pending"):
        acc.state_dict()


def test_a_chunk_task_maps_the_derived_sums_once_per_group_and_level(monkeypatch):
    """The streaming pass's chunk task (float32 sums, row groups) maps each group's U and Gf once per level, not once
    per run of batches (the map's calls were 5% of the grouped pass); its state equals the per-batch map's."""
    lad = Ladder.random(depth=2, branching=2, events=3, seed=0)
    st = LadderStudent(lad, 3, dtype=torch.float32, seed=0)
    bs, runs = 64, 3
    chunks = _student_chunks(st, sample_ladder(lad, bs * GROUPED_BATCHES * runs, seed=1))
    calls = []
    original = FrequencyAccumulator._add_derived
    monkeypatch.setattr(FrequencyAccumulator, "_add_derived", lambda self, *a, **k: (calls.append(a[0]),
                                                                                       original(self, *a, **k))[1])
    state, _ = _chunk_statistics(0, st, chunks, "squared", bs, torch.float32, GROUPS)
    assert len(calls) == GROUPS * lad.depth  # (batch by batch: GROUPS x depth x runs)
    monkeypatch.setattr(frequency, "DeferredDerivation", lambda: None)  # the per-batch map, as before
    calls.clear()
    ref, _ = _chunk_statistics(0, st, chunks, "squared", bs, torch.float32, GROUPS)
    assert len(calls) == GROUPS * lad.depth * runs
    _close(state, ref, 2e-6)


def test_pending_derived_sums_settle_on_meta():
    """The deferred map on ``device="meta"`` (a GPU's path without one): no host read, the CPU's shapes and dtypes."""
    lad = Ladder.random(depth=2, branching=2, events=3, seed=0)
    s = sample_ladder(lad, 128, seed=1)
    x, z = s.inputs(), s.z.long()
    states = []
    for dev in ("cpu", "meta"):
        st = LadderStudent(lad, 3, dtype=torch.float32, seed=0, device=dev)
        acc = ReplicateAccumulator(st, torch.float32, GROUPS)
        acc._deferred = DeferredDerivation()
        for lo in (0, 64):
            rec = st.forward_backward(x[lo: lo + 64].to(dev), z[lo: lo + 64, 0].to(dev), stacked=True,
                                      labels_checked=True, delta_w=False)
            acc.add(rec, z[lo: lo + 64].to(dev), [0, 20, 41, 64])
            acc.merge_(ReplicateAccumulator(st, torch.float32, GROUPS))  # (settles; the next batch snapshots)
        states.append(settled(acc._deferred, acc.parts))  # (state_dict reads the event check back: not on meta)
    for cpu, meta in zip(*states, strict=True):
        for key in FrequencyAccumulator._SUMS:
            for c, m in zip(getattr(cpu, key), getattr(meta, key), strict=True):
                assert (c is None) == (m is None)
                if c is not None:
                    assert m.device.type == "meta" and (m.shape, m.dtype) == (c.shape, c.dtype)
