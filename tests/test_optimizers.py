"""Any torch.optim optimizer steps on the explicit backward's gradient (TrainingConfig(optimizer=...)): SGD
through .grad takes exactly the plain Eq 2 step, Adam trains, the recorded Delta W stays Eq 2's gradient, a
schedule changes the rate, and a loss plateau stops the run early at a checkpoint."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from smaso.student.compare import compare_student
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.network import LadderStudent
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

F64 = torch.float64


@pytest.fixture(scope="module")
def sample():
    return sample_ladder(Ladder.default(), 2000, 0)


def _weights(r):
    return [w.detach().clone() for w in r.student.weights]


def test_sgd_through_grad_is_the_plain_step(sample):
    student, training = StudentConfig(width=4, readout=6), TrainingConfig(steps=12, lr=0.3, weight_decay=0.01)
    evaluation = EvaluationConfig(eval_every=12, noise_groups=None, held_out=False)
    plain = compare_student(sample, student, training, evaluation)
    through_grad = dataclasses.replace(training, optimizer=lambda p: torch.optim.SGD(p, lr=0.3))
    torch_sgd = compare_student(sample, student, through_grad, evaluation)
    for a, b in zip(_weights(plain), _weights(torch_sgd), strict=True):
        assert torch.allclose(a, b, atol=1e-14, rtol=0)


def test_fill_grad_is_minus_eq2_update(sample):
    st = LadderStudent(sample.ladder, 3, readout=4, batch_norm=True, seed=1, dtype=F64)
    x, y = sample.inputs(dtype=F64)[:300], sample.y[:300]
    rec = st.forward_backward(x, y)
    st.fill_grad(rec, weight_decay=0.1)
    grads = torch.autograd.grad(st.loss(st(x), y), list(st.weights))
    for W, g in zip(st.weights, grads, strict=True):
        assert torch.allclose(W.grad, g + 0.2 * W.detach(), atol=1e-12, rtol=0)
    assert torch.equal(st.bn_scale[0].grad, -rec.dc1[1])


def test_adam_with_a_schedule_trains_and_stops_at_a_plateau(sample):
    # (the 2000 rows: 1000 held out for the accuracy, 1000 trained on)
    r = compare_student(sample, student=StudentConfig(width=8, readout=16),
                        training=TrainingConfig(steps=400, lr=0.01, optimizer="adam", lr_schedule="cosine",
                                                loss="cross_entropy"),
                        evaluation=EvaluationConfig(eval_examples=1000, eval_every=200, noise_groups=None))
    assert r.history[-1]["accuracy"] > r.history[0]["accuracy"] + 0.2 and r.stopped_at is None
    flat = compare_student(sample, student=StudentConfig(width=4),
                           training=TrainingConfig(steps=2000, lr=1e-9, plateau=50),
                           evaluation=EvaluationConfig(held_out=False, eval_every=1000, noise_groups=None))
    assert flat.stopped_at is not None and flat.stopped_at < 200
    assert flat.history[-1]["step"] == flat.stopped_at


def test_bad_optimizer_arguments(sample):
    with pytest.raises(ValueError, match="optimizer"):
        compare_student(sample, training=TrainingConfig(steps=1, optimizer="lbfgsx"))
    with pytest.raises(TypeError, match="optimizer"):
        compare_student(sample, training=TrainingConfig(steps=1, optimizer=lambda p: 3))
    with pytest.raises(ValueError, match="lr_schedule"):
        compare_student(sample, training=TrainingConfig(steps=1, lr_schedule="step:0:0.5"))
    with pytest.raises(ValueError, match="plateau"):
        compare_student(sample, training=TrainingConfig(steps=1, plateau=0))
