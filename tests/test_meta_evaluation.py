"""The evaluation pass of a fixed student without per-batch host reads (issue 39): a meta student's own records
(their loss a meta tensor, unlike ``tests/test_meta_statistics.py``'s CPU records moved to meta) through the
frequency, replicate and alignment accumulators and through :func:`~smaso.student.frequency._run_batches`, the
loop of ``collect_statistics`` and ``accumulate_statistics``: any ``.item()``, ``float(t)`` or ``bool(t)`` per batch
raises on meta.  On the CPU the loss totals, kept on the device now, are bit for bit the float sums of before."""

from __future__ import annotations

import math

import pytest
import torch

from smaso.student.alignment import AlignmentAccumulator
from smaso.student.frequency import (
    FrequencyAccumulator,
    ReplicateAccumulator,
    _run_batches,
    accumulate_statistics,
    collect_statistics,
)
from smaso.student.network import LadderStudent
from smaso.student.probe import LinearProbe
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

LAD = Ladder.random(depth=2, branching=[2, 3], events=[3, 4, 2], mode="topdown", concentration=0.6, seed=3)


def _meta_batches(student: LadderStudent, sizes: tuple[int, ...] = (8, 8, 5)):
    lad = student.ladder
    return [(torch.empty(n, lad.num_regions[-1], student.widths[-1], device="meta"),
             torch.empty(n, dtype=torch.long, device="meta"),
             torch.empty(n, lad.total_regions, dtype=torch.long, device="meta")) for n in sizes]


@pytest.mark.parametrize("batch_norm", [False, True])
def test_evaluation_loop_runs_on_meta(batch_norm: bool) -> None:
    st = LadderStudent(LAD, 4, seed=0, dtype=torch.float64, device="meta", batch_norm=batch_norm)
    freq, rep, ali = FrequencyAccumulator(st), ReplicateAccumulator(st, groups=3), AlignmentAccumulator(st)
    correct = _run_batches(st, _meta_batches(st), "squared", freq.add, rep.add, ali.add)
    # the count of correct answers stays on the device (read back once, by the caller, after the last batch)
    assert isinstance(correct, torch.Tensor) and correct.device.type == "meta" and correct.shape == ()
    assert freq.n == rep.n == ali.n == 21
    for total in (freq._loss_total, ali._loss_total, *(p._loss_total for p in rep.parts)):
        assert isinstance(total, torch.Tensor) and total.device.type == "meta" and total.dtype == torch.float64
    with pytest.raises(RuntimeError, match="meta"):
        _ = freq.loss_sum  # the read is where the sums leave the device, and only there
    # the linear probes of the alignment: fitting and scoring batches (one_hot read the events' range back)
    probe = LinearProbe(st)
    _run_batches(st, _meta_batches(st, (8, 8)), "squared", probe.add_fit)
    _run_batches(st, _meta_batches(st, (8, 5)), "squared", probe.add_score)
    assert probe.n_fit == 16 and probe.n_score == 13
    assert all(c.device.type == "meta" for c in [*probe.cross, *probe.counts, *probe.correct])


def _cpu_batches(dtype: torch.dtype):
    s = sample_ladder(LAD, 60, 1)
    x, y, z = s.inputs(dtype=dtype), s.y, s.z.long()
    return [(x[a:b], y[a:b], z[a:b]) for a, b in ((0, 16), (16, 37), (37, 60))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_loss_totals_are_the_float_sums_bit_for_bit(dtype: torch.dtype) -> None:
    st = LadderStudent(LAD, 4, seed=1, dtype=dtype)
    freq, rep, ali = FrequencyAccumulator(st, torch.float64), ReplicateAccumulator(st, groups=3), \
        AlignmentAccumulator(st)
    want, want_rep = 0.0, [0.0] * 3  # the accumulation before issue 39: Python floats, loss read per batch
    for x, y, z in _cpu_batches(dtype):
        rec = st.forward_backward(x, y, stacked=True)
        assert rec.loss_tensor is not None and rec.loss_tensor.dtype == dtype
        n = x.shape[0]
        want += rec.loss * n
        bounds = [g * n // 3 for g in range(4)]
        want_rep = [w + rec.loss * (hi - lo) for w, lo, hi in zip(want_rep, bounds[:-1], bounds[1:], strict=True)]
        for acc in (freq, rep, ali):
            acc.add(rec, z)
    assert freq.loss_sum == want and ali.loss_sum == want  # exact: the same float64 operations
    assert [p.loss_sum for p in rep.parts] == want_rep
    assert freq.state_dict()["loss_sum"] == want and isinstance(freq.state_dict()["loss_sum"], float)
    assert ali.state_dict()["loss_sum"] == want
    assert freq.result().loss == want / 60
    merged = FrequencyAccumulator(st, torch.float64).merge_(freq).merge_(freq.state_dict())
    assert merged.loss_sum == want + want


def test_statistics_entry_points_unchanged_on_cpu() -> None:
    # collect_statistics and accumulate_statistics give the loss and the count of correct answers as before
    st = LadderStudent(LAD, 4, seed=2, dtype=torch.float64)
    s = sample_ladder(LAD, 40, 5)
    x, y, z = s.inputs(dtype=torch.float64), s.y, s.z
    stats = collect_statistics(st, x, y, z, batch_size=16)
    recs = [st.forward_backward(x[a:a + 16], y[a:a + 16]) for a in range(0, 40, 16)]
    assert stats.loss == sum(r.loss * r.fbar[0].shape[0] for r in recs) / 40
    acc, correct = accumulate_statistics(st, s, batch_size=16)
    assert isinstance(correct, int)
    assert correct == sum(int((r.fbar[0][:, 0].argmax(-1) == y[a:a + 16]).sum()) for r, a in zip(recs, range(0, 40, 16),
                                                                                             strict=True))
    assert acc.result().loss == stats.loss and not math.isnan(stats.loss)


def test_labels_range_checked_once_per_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    # the labels' range (a host read on a device) is checked where they enter the pass: once for in-memory data,
    # once per chunk when streamed (a chunk sits on the host), never per batch
    from smaso.student.alignment import collect_alignment
    from teachers.chunked import as_chunks

    calls: list[bool] = []
    check = LadderStudent._check_labels

    def spy(self, x, y, loss, *, values=True):
        calls.append(values)
        return check(self, x, y, loss, values=values)

    monkeypatch.setattr(LadderStudent, "_check_labels", spy)
    st = LadderStudent(LAD, 4, seed=2, dtype=torch.float64)
    s = sample_ladder(LAD, 40, 5)
    x, y, z = s.inputs(dtype=torch.float64), s.y, s.z
    collect_statistics(st, x, y, z, batch_size=8)
    assert calls == [True] + [False] * 5
    calls.clear()
    accumulate_statistics(st, s, batch_size=8)
    assert calls.count(True) == as_chunks(s).num_chunks and calls.count(False) == 5
    calls.clear()
    collect_alignment(st, x, z, batch_size=8)
    assert calls.count(True) == 1 and calls.count(False) >= 5
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\), got \[0, 3\]"):
        collect_statistics(st, x, torch.arange(40) % 4, z, batch_size=8)
