"""The student's training step without host reads (issue 39): :meth:`LadderStudent.forward_backward`,
:meth:`~LadderStudent.apply_update` and :func:`train_ladder_student` run end to end on ``device="meta"``, where
tensors have shapes but no values, so any host sync (``.item()``, ``bool(tensor)``, a comparison read in Python)
raises; and the deferred finite checks raise the per-step loop's error, at the same step, on the CPU."""

from __future__ import annotations

import math

import pytest
import torch

from smaso.student import training
from smaso.student.network import LadderStudent
from smaso.student.training import TrainingDiverged, train_ladder_student
from teachers.ladder import Ladder

LAD = Ladder.default()
CONFIGS = [({}, "squared"), ({"batch_norm": True}, "cross_entropy"), ({"batch_norm": "before"}, "squared"),
           ({"shared": True, "activation": "silu"}, "cross_entropy")]


def _data(student: LadderStudent, n: int, device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    if device == "meta":
        return (torch.empty(n, LAD.num_regions[-1], student.widths[-1], device="meta"),
                torch.empty(n, dtype=torch.long, device="meta"))
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, LAD.num_regions[-1], student.widths[-1], generator=g),
            torch.randint(0, student.widths[0], (n,), generator=g))


def test_meta_detects_a_host_read():
    # the premise of this file: reading a meta tensor's value fails (so the runs below prove there is none)
    st = LadderStudent(LAD, 4, device="meta")
    rec = st.forward_backward(*_data(st, 8, "meta"), labels_checked=True)
    with pytest.raises(RuntimeError, match="meta"):
        _ = rec.loss
    with pytest.raises(RuntimeError, match="meta"):
        bool(torch.isfinite(st.weights[0]).all())


@pytest.mark.parametrize(("kw", "loss"), CONFIGS)
@pytest.mark.parametrize("fast", [True, False])
def test_forward_backward_and_update_on_meta(kw, loss, fast):
    st = LadderStudent(LAD, 4, device="meta", dtype=torch.float64, **kw)
    st.fast_path = fast
    ref = LadderStudent(LAD, 4, dtype=torch.float64, **kw)  # the CPU twin gives every shape
    ref.fast_path = fast
    rec = st.forward_backward(*_data(st, 8, "meta"), loss, stacked=True, labels_checked=True)
    want = ref.forward_backward(*_data(ref, 8, "cpu"), loss, stacked=True)
    assert rec.loss_tensor.device.type == "meta" and rec.loss_tensor.shape == ()
    for name in ("fbar", "u", "g", "dW", "db", "dc1", "stacked"):
        for got, exp in zip(getattr(rec, name), getattr(want, name), strict=True):
            assert (got is None) == (exp is None)
            if got is not None:
                assert got.device.type == "meta" and got.shape == exp.shape and got.dtype == exp.dtype
    st.apply_update(rec, 0.1, weight_decay=1e-3)
    assert all(w.device.type == "meta" for w in st.parameters())


@pytest.mark.parametrize(("kw", "loss"), CONFIGS[:3])
@pytest.mark.parametrize("batch_size", [None, 3])
def test_train_on_meta(kw, loss, batch_size, monkeypatch):
    monkeypatch.setattr(training, "CHECK_EVERY", 2)  # checkpoints mid-run too (they read nothing on meta)
    st = LadderStudent(LAD, 4, device="meta", **kw)
    history = train_ladder_student(st, *_data(st, 10, "meta"), steps=5, lr=0.1, batch_size=batch_size, loss=loss,
                                   weight_decay=1e-3)
    assert len(history) == 5 and all(math.isnan(v) for v in history)  # no values on meta
    assert all(w.device.type == "meta" for w in st.parameters())


def test_labels_range_checked_once(monkeypatch):
    # the range check (a host read) runs once where the data enters, never per step
    calls = []
    check = LadderStudent._check_labels

    def spy(self, x, y, loss, *, values=True):
        calls.append(values)
        return check(self, x, y, loss, values=values)

    monkeypatch.setattr(LadderStudent, "_check_labels", spy)
    st = LadderStudent(LAD, 4)
    x, y = _data(st, 20, "cpu")
    train_ladder_student(st, x, y, steps=7, lr=0.1, batch_size=4)
    assert calls == [True] + [False] * 7
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 4\), got \[0, 4\]"):
        train_ladder_student(st, x, torch.arange(20) % 5, steps=1, lr=0.1)


def _per_step(student, x, y, steps, lr):
    """The per-step loop before issue 39 (host reads every step): the reference for the error raised."""
    for step in range(steps):
        rec = student.forward_backward(x, y)
        if not math.isfinite(rec.loss):
            raise TrainingDiverged(f"step {step}: the loss is {rec.loss}")
        student.apply_update(rec, lr)
        if not all(bool(torch.isfinite(w).all()) for w in student.weights):
            raise TrainingDiverged(f"step {step}: a weight is no longer finite")


@pytest.mark.parametrize(("init_scale", "lr", "check_every"),
                         [(50.0, 1e6, 256), (50.0, 1e6, 3), (1.0, 1e38, 4), (10.0, 3e38, 5)])
def test_divergence_raises_the_per_step_error(init_scale, lr, check_every, monkeypatch):
    # the cases give "step 1: the loss is inf", "... is nan" and "step 0: a weight is no longer finite"
    monkeypatch.setattr(training, "CHECK_EVERY", check_every)
    st = LadderStudent(LAD, 4, init_scale=init_scale)
    x, y = _data(st, 16, "cpu")
    with pytest.raises(TrainingDiverged) as want:
        _per_step(LadderStudent(LAD, 4, init_scale=init_scale), x, y, 200, lr)
    steps = []
    fb = LadderStudent.forward_backward

    def counting(self, *a, **k):
        steps.append(1)
        return fb(self, *a, **k)

    monkeypatch.setattr(LadderStudent, "forward_backward", counting)
    with pytest.raises(TrainingDiverged) as got:
        train_ladder_student(st, x, y, steps=200, lr=lr)
    assert str(got.value) == str(want.value)
    bad = int(str(want.value).split(":")[0].split()[1])
    assert len(steps) <= (bad // check_every + 1) * check_every  # stopped at the first checkpoint after it


@pytest.mark.parametrize("fast", [True, False])
def test_declared_one_hot_inputs_run_as_events_on_meta(fast, monkeypatch):
    """``student(x, one_hot_checked=True)`` reads no value: its events (one matrix-vector product) and the gather
    path's forward and autograd backward run on ``device="meta"`` (the events path taken, where the tree has one)."""
    from smaso.student import batch_major

    calls = []
    real = batch_major.student_forward
    monkeypatch.setattr("smaso.student.network.student_forward", lambda s, ev: calls.append(ev.dtype) or real(s, ev))
    lad = Ladder.random(depth=3, branching=2, events=4, seed=0)
    st = LadderStudent(lad, 4, device="meta")
    st.fast_path = fast
    x = torch.empty(8, lad.num_regions[-1], st.widths[-1], device="meta")
    st.loss(st(x, one_hot_checked=True), torch.empty(8, dtype=torch.long, device="meta")).backward()
    assert all(p.grad is not None and p.grad.device.type == "meta" and p.grad.shape == p.shape
               for p in st.parameters())
    assert calls == ([torch.uint8] if fast else [])
