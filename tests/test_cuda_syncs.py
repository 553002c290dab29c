"""The hot loops on CUDA under ``torch.cuda.set_sync_debug_mode("error")`` (issue 39): any synchronizing call in a
training step or an evaluation batch raises, while the reads the loops make on purpose (the deferred checks at a
checkpoint, the statistics leaving the device) are let through by name.  Skipped without a GPU (the meta-device
tests, ``tests/test_meta_*.py``, are the CPU tier's version of this check); results agree with the CPU's to float64
round-off."""

from __future__ import annotations

import contextlib
import functools
import math

import pytest
import torch

from smaso.student import compare as compare_mod
from smaso.student import training
from smaso.student.alignment import AlignmentAccumulator
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.frequency import FrequencyAccumulator, ReplicateAccumulator, _run_batches
from smaso.student.network import LadderStudent
from smaso.student.training import train_ladder_student
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
LAD = Ladder.default()


@contextlib.contextmanager
def _no_syncs():
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)


def _allowed(fn):
    """``fn`` as a sync the loop makes on purpose: the debug mode off while it runs."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode(0)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode(mode)
    return run


def _labels_checked_once(monkeypatch):
    """The labels' range check where the data enters (``values=True``: a read on purpose) let through; the per-step
    calls (``values=False``) stay watched."""
    check = LadderStudent._check_labels

    def labels(self, x, y, loss, *, values=True):
        return (_allowed(check) if values else check)(self, x, y, loss, values=values)

    monkeypatch.setattr(LadderStudent, "_check_labels", labels)


def test_training_loop_has_no_sync_per_step(monkeypatch):
    monkeypatch.setattr(training, "_checkpoint", _allowed(training._checkpoint))
    monkeypatch.setattr(training, "CHECK_EVERY", 16)
    _labels_checked_once(monkeypatch)
    s = sample_ladder(LAD, 256, 0)
    x, y = s.inputs(dtype=torch.float64), s.y
    st = LadderStudent(LAD, 8, seed=1, dtype=torch.float64, device="cuda")
    ref = LadderStudent(LAD, 8, seed=1, dtype=torch.float64)
    xd, yd = x.cuda(), y.cuda()  # (the data enter the device before: a blocking copy, once)
    with _no_syncs():
        got = train_ladder_student(st, xd, yd, steps=40, lr=0.05, batch_size=32, seed=2)
    want = train_ladder_student(ref, x, y, steps=40, lr=0.05, batch_size=32, seed=2)
    assert got == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_evaluation_loop_has_no_sync_per_batch(dtype):
    s = sample_ladder(LAD, 300, 3)
    st = LadderStudent(LAD, 8, seed=1, dtype=dtype, device="cuda")
    accs = [FrequencyAccumulator(st, torch.float64), ReplicateAccumulator(st, torch.float64, groups=3),
            AlignmentAccumulator(st)]
    x, y, z = s.inputs(dtype=dtype), s.y, s.z
    batches = [(x[a:a + 100], y[a:a + 100], z[a:a + 100]) for a in range(0, 300, 100)]
    with _no_syncs():
        correct = _run_batches(st, batches, "squared", *(a.add for a in accs))
    ref = LadderStudent(LAD, 8, seed=1, dtype=dtype)
    want = FrequencyAccumulator(ref, torch.float64)
    want_correct = _run_batches(ref, batches, "squared", want.add)
    assert int(correct) == int(want_correct)
    assert accs[0].loss_sum == pytest.approx(want.loss_sum, rel=1e-5 if dtype == torch.float32 else 1e-12)
    torch.testing.assert_close(accs[0].result().means["G"][1], want.result().means["G"][1],
                               rtol=1e-4 if dtype == torch.float32 else 1e-10, atol=1e-6)


def test_compare_student_training_steps_have_no_sync(monkeypatch):
    # the checkpoints' evaluation and the deferred reads are the syncs on purpose; every training step runs between
    for name in ("accumulate_statistics", "collect_statistics", "compare_statistics_to_theory", "nonfinite_statistics",
                 "accumulate_alignment", "_check_losses", "_check_weights", "reformulate", "LadderStudent"):
        # (LadderStudent: its weights are drawn on the host and copied to the device, once)
        monkeypatch.setattr(compare_mod, name, _allowed(getattr(compare_mod, name)))
    s = sample_ladder(LAD, 1200, 0)
    configs = (StudentConfig(width=6), TrainingConfig(steps=60, lr=0.05, batch_size=64),
               EvaluationConfig(eval_every=30, held_out=False, alignment=False, noise_groups=None))
    with _no_syncs():
        got = compare_student_on(s, configs, "cuda")
    want = compare_student_on(s, configs, None)
    assert [h["step"] for h in got.history] == [0, 30, 60]
    for a, b in zip(got.history, want.history, strict=True):
        assert a["accuracy"] == pytest.approx(b["accuracy"], abs=1e-12)
        assert math.isclose(a["loss"], b["loss"], rel_tol=1e-9)


def compare_student_on(sample, configs, device):
    return compare_mod.compare_student(sample, *configs, device=device)
