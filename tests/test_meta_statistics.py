"""The statistics and alignment accumulation on torch's meta device (issue 39): a meta tensor has no values, so
any host sync in the per-batch path (``.item()``, ``bool(t)``, ``torch.bincount``, ``one_hot``'s range check)
raises; what runs here end to end runs on a GPU without stalling per batch.

The frequency accumulators take the meta student's own records (they derive U and Gf from its weights); the
alignment's are the CPU student's, moved to meta.  Bad events still raise: at once on the CPU, and from the
deferred device-side flag when the sums leave the device."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from smaso.student.alignment import AlignmentAccumulator
from smaso.student.frequency import FrequencyAccumulator, ReplicateAccumulator
from smaso.student.mergeable import event_counts, event_flags
from smaso.student.network import LadderStudent, StudentRecord
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

LADDERS = {
    "tree": lambda: Ladder.random(depth=2, branching=2, events=3, seed=2),
    "ragged": lambda: Ladder.random(depth=2, branching=[2, 3], events=[3, 4, 2], mode="topdown", concentration=0.6,
                                    seed=3),
    "gaussian": lambda: Ladder.random(depth=1, branching=3, events=[3, 2], seed=0, emission="gaussian", sigma=0.5),
    "many_events": lambda: Ladder.random(depth=1, branching=2, events=[300, 3], seed=1),
}


def _to(rec: StudentRecord, device: str) -> StudentRecord:
    """Every tensor of the record on ``device`` (the per-example lists, the sums and the stacked buffers)."""
    def move(v: object) -> object:
        if isinstance(v, torch.Tensor):
            return v.to(device)
        if isinstance(v, list):
            return [move(t) for t in v]
        return v
    return dataclasses.replace(rec, **{f.name: move(getattr(rec, f.name)) for f in dataclasses.fields(rec)})


def _batches(name: str, dtype: torch.dtype = torch.float32, n: int = 64, bn: bool = False):
    lad = LADDERS[name]()
    s = sample_ladder(lad, 2 * n, 1)
    st = LadderStudent(lad, 4, seed=0, dtype=dtype, batch_norm=bn)
    x, z = s.inputs(dtype=dtype), s.z.long()
    recs = [st.forward_backward(x[b: b + n], z[b: b + n, 0], stacked=True) for b in (0, n)]
    return lad, st, recs, [z[:n], z[n:]]


def _meta_records(student: LadderStudent, name: str, n: int = 64) -> list[StudentRecord]:
    """``_batches``' two batches through the meta ``student``'s own explicit pass (its accumulator derives U and Gf
    from its own weights, so it takes only its own records)."""
    s = sample_ladder(LADDERS[name](), 2 * n, 1)
    x, z = s.inputs(dtype=student.weights[0].dtype).to("meta"), s.z.long().to("meta")
    return [student.forward_backward(x[b: b + n], z[b: b + n, 0], stacked=True, labels_checked=True) for b in (0, n)]


@pytest.mark.parametrize("name", sorted(LADDERS))
def test_frequency_accumulation_runs_on_meta(name: str) -> None:
    lad, st, recs, zs = _batches(name)
    cpu = FrequencyAccumulator(st)
    meta_student = LadderStudent(lad, 4, seed=0, dtype=torch.float32, device="meta")
    acc, rep = FrequencyAccumulator(meta_student), ReplicateAccumulator(meta_student, groups=3)
    for rec, meta_rec, z in zip(recs, _meta_records(meta_student, name), zs, strict=True):
        cpu.add(rec, z)
        acc.add(meta_rec, z.to("meta"))
        rep.add(meta_rec, z.to("meta"))
    assert acc.n == cpu.n == 128 and rep.n == 128
    for key in FrequencyAccumulator._SUMS:
        for m, c in zip(getattr(acc, key), getattr(cpu, key), strict=True):
            assert (m is None) == (c is None)
            if m is not None:
                assert m.device.type == "meta" and m.shape == c.shape and m.dtype == c.dtype, key
    # the events were checked on the device: one pending (levels, 2) flag, never read back
    assert acc._event_flags is not None and acc._event_flags.device.type == "meta"
    assert tuple(acc._event_flags.shape) == (lad.depth + 1, 2)


@pytest.mark.parametrize("name", ["tree", "ragged", "many_events"])
def test_alignment_accumulation_runs_on_meta(name: str) -> None:
    lad, st, recs, zs = _batches(name, torch.float64)
    cpu = AlignmentAccumulator(st)
    acc = AlignmentAccumulator(LadderStudent(lad, 4, seed=0, dtype=torch.float64, device="meta"))
    for rec, z in zip(recs, zs, strict=True):
        cpu.add(rec, z)
        acc.add(_to(rec, "meta"), z.to("meta"))
    assert acc.n == cpu.n == 128
    for key in AlignmentAccumulator._SUMS:
        for m, c in zip(getattr(acc, key), getattr(cpu, key), strict=True):
            assert m.device.type == "meta" and m.shape == c.shape and m.dtype == c.dtype, key
    assert acc._event_flags is not None and tuple(acc._event_flags.shape) == (lad.depth, 2)


def test_event_counts_are_bincounts() -> None:
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 50, (1000,), generator=g)
    want = torch.bincount(idx, minlength=60).to(torch.float64)
    assert torch.equal(event_counts(idx, 60), want)
    assert torch.equal(event_counts(idx.int().view(10, 100), 60), want)
    assert event_counts(idx.to("meta"), 60).shape == (60,)


def test_event_counts_refuse_an_index_past_the_bins() -> None:
    """On the CPU the counts are torch.bincount's: an index at or past ``size`` is a named error, not a longer
    vector."""
    with pytest.raises(ValueError, match=r"index: expected flat indices in \[0, 3\), got 5"):
        event_counts(torch.tensor([0, 5, 1]), 3)


def _bad_events(name: str, level: int, value: int):
    lad, st, recs, zs = _batches(name, n=16)
    z = zs[0].clone()
    z[3, lad.level_offsets[level]] = value
    return lad, st, recs[0], z


@pytest.mark.parametrize(("name", "level", "value", "match"), [
    ("tree", 1, 3, r"level 1 holds events outside \[0, 3\)"),
    ("tree", 2, -1, r"level 2 holds events outside \[0, 3\)"),
])
def test_bad_events_raise_at_once_on_cpu_and_deferred_elsewhere(name: str, level: int, value: int,
                                                                  match: str) -> None:
    lad, st, rec, z = _bad_events(name, level, value)
    with pytest.raises(ValueError, match=match):
        FrequencyAccumulator(st).add(rec, z)
    if level < lad.depth:
        with pytest.raises(ValueError, match=match):
            AlignmentAccumulator(st).add(rec, z)
    # off the CPU (the flags, as a device would hold them): nothing raises per batch, the read-back does
    bins = [z[:, lad.level_offsets[l]: lad.level_offsets[l + 1]] for l in range(lad.depth + 1)]
    sizes_t = [None if len(set(r)) == 1 else torch.tensor(r) for r in lad.region_events]
    flags = event_flags([b.to("meta") for b in bins], lad.events, [None if s is None else s.to("meta")
                                                                   for s in sizes_t])
    assert flags is not None and flags.device.type == "meta"
    acc = FrequencyAccumulator(st)
    acc._defer_event_check(torch.tensor([[False, False]] * lad.depth + [[False, False]]))
    acc.add(rec, zs_ok := _batches(name, n=16)[3][0])
    assert acc.state_dict()["n"] == len(zs_ok)
    cpu_flags = torch.stack([torch.stack([((b < 0) | (b >= m)).any(),
                                          torch.tensor(False) if s is None else (b >= s).any()])
                             for b, m, s in zip(bins, lad.events, sizes_t, strict=True)])
    acc._defer_event_check(cpu_flags)
    with pytest.raises(ValueError, match=match):
        acc.state_dict()
    with pytest.raises(ValueError, match=match):
        acc.result()


def test_events_past_their_regions_own_count() -> None:
    """Regions of one level with different event counts m_r: an event in [m_r, M_l) is refused on the CPU at once
    and flagged (column 1) on the device."""
    ev, sizes = torch.tensor([[0, 1], [2, 1]]), torch.tensor([3, 2])
    assert event_flags([ev], [3], [sizes]) is None
    bad = torch.tensor([[0, 2]])
    with pytest.raises(ValueError, match=r"level 0 holds events outside its regions' ranges \[0, m_r\)"):
        event_flags([bad], [3], [sizes])
    flags = event_flags([bad.to("meta")], [3], [sizes.to("meta")])
    assert flags is not None and flags.device.type == "meta" and tuple(flags.shape) == (1, 2)


def test_row_groups_at_once_run_on_meta(monkeypatch: pytest.MonkeyPatch) -> None:
    """The jackknife's row groups as one accumulation (``smaso.student.row_groups``, what an evaluation pass with
    bounds runs on a tree) end to end on meta: the same sums' shapes and dtypes as on the CPU, no host read."""
    import smaso.student.frequency as frequency

    taken: list[str] = []
    real = frequency.add_row_groups

    def spy(parts, rec, z, bounds, fields, *rest):  # type: ignore[no-untyped-def]
        taken.append(z.device.type)
        return real(parts, rec, z, bounds, fields, *rest)

    monkeypatch.setattr(frequency, "add_row_groups", spy)
    lad, st, recs, zs = _batches("tree")
    cpu = ReplicateAccumulator(st, groups=3)
    meta = ReplicateAccumulator(LadderStudent(lad, 4, seed=0, dtype=torch.float32, device="meta"), groups=3)
    bounds = [0, 20, 41, 64]
    for rec, meta_rec, z in zip(recs, _meta_records(meta.student, "tree"), zs, strict=True):
        cpu.add(rec, z, bounds)
        meta.add(meta_rec, z.to("meta"), bounds)
    assert taken == ["cpu", "meta", "cpu", "meta"]
    assert [p.n for p in meta.parts] == [p.n for p in cpu.parts] == [40, 42, 46]
    for mp, cp in zip(meta.parts, cpu.parts, strict=True):
        for key in FrequencyAccumulator._SUMS:
            for m, c in zip(getattr(mp, key), getattr(cp, key), strict=True):
                assert (m is None) == (c is None)
                if m is not None:
                    assert m.device.type == "meta" and m.shape == c.shape and m.dtype == c.dtype, key


def test_members_measured_at_once_run_on_meta() -> None:
    """A population's members measured in one batched pass (``smaso.student.member_statistics``: the rows built
    once, the members' forward and backward and their sums) on meta: each member's accumulator has the sums' shapes
    and dtypes of its own CPU pass, on the device; only the pass's count of correct examples is read back, once
    (as ``accumulate_statistics`` reads its own), so that read is left out here."""
    from smaso.student.frequency import accumulate_statistics
    from smaso.student.member_statistics import MemberRows, MemberSums

    lad = LADDERS["tree"]()
    s = sample_ladder(lad, 200, 1)
    nets = [LadderStudent(lad, 4, seed=i, dtype=torch.float64, device="meta") for i in range(3)]
    sums = MemberSums(nets, MemberRows(nets[0], s, batch_size=64, groups=3))
    cpu, _ = accumulate_statistics(LadderStudent(lad, 4, seed=0, dtype=torch.float64), s, batch_size=64, groups=3)
    assert sums.correct.device.type == "meta" and tuple(sums.correct.shape) == (3,)
    rep = sums.accumulator(1)
    for mp, cp in zip(rep.parts, cpu.parts, strict=True):
        assert mp.n == cp.n
        for key in FrequencyAccumulator._SUMS:
            for m, c in zip(getattr(mp, key), getattr(cp, key), strict=True):
                assert (m is None) == (c is None)
                if m is not None:
                    assert m.device.type == "meta" and m.shape == c.shape and m.dtype == c.dtype, key
