"""compare_student's training loop without a host read per step (issue 39): the labels' range is checked once where
the data enters, each step's loss stays on the device until a checkpoint reads a run of them, and a diverged run
still stops with the per-step check's error (the same step and numbers: the messages below are those the loop
gave before the deferral, recorded from that code), at most :data:`~smaso.student.training.CHECK_EVERY` steps
later."""

from __future__ import annotations

import pytest
import torch

from smaso.student import training
from smaso.student.compare import TrainingDiverged, compare_student
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.network import LadderStudent, StudentRecord
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

EVAL = {"held_out": False, "alignment": False, "noise_groups": None}


@pytest.fixture(scope="module")
def sample():
    return sample_ladder(Ladder.default(), 2000, seed=0)


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the host reads of a record's loss and of the labels' range, and the training steps."""
    counts = {"loss": 0, "labels": 0, "steps": 0}
    prop = StudentRecord.loss
    check = LadderStudent._check_labels
    fb = LadderStudent.forward_backward

    def get(rec):
        counts["loss"] += 1
        return prop.fget(rec)

    def labels(self, x, y, loss, *, values=True):
        counts["labels"] += values
        return check(self, x, y, loss, values=values)

    def step(self, *a, **k):
        counts["steps"] += 1
        return fb(self, *a, **k)

    monkeypatch.setattr(StudentRecord, "loss", property(get, prop.fset))
    monkeypatch.setattr(LadderStudent, "_check_labels", labels)
    monkeypatch.setattr(LadderStudent, "forward_backward", step)
    return counts


def test_training_steps_read_nothing_back(sample, monkeypatch):
    # (a torch optimizer steps on the same records: not run here, torch.optim's first step imports for seconds)
    counts = _counting(monkeypatch)
    res = compare_student(sample, StudentConfig(width=4), TrainingConfig(steps=40, lr=0.05, batch_size=32),
                          EvaluationConfig(eval_every=20, eval_batch_size=1000, **EVAL))
    assert [h["step"] for h in res.history] == [0, 20, 40]
    assert counts["loss"] == 0  # before: one read per step (40)
    # the labels' range: once for the training data, once per evaluation pass (3 checkpoints, 1 chunk each)
    assert counts["labels"] == 1 + 3
    assert counts["steps"] == 40 + 3 * 2  # 40 training steps, 3 passes of 2 evaluation batches


@pytest.mark.parametrize("check_every", [256, 3])
@pytest.mark.parametrize(("student", "training_cfg", "eval_every", "message"), [
    ({}, {"lr": 1e6, "steps": 100}, 50,
     "step 1: the training loss is 1.15e+38 (first minibatch: 0.533); the run diverged: lower lr=1000000.0, "
     "add weight_decay or BN"),
    ({"dtype": torch.float64}, {"lr": 50.0, "steps": 200}, 100,  # finite, but 1e8 times the first loss
     "step 2: the training loss is 2.2e+24 (first minibatch: 0.533); the run diverged: lower lr=50.0, "
     "add weight_decay or BN"),
    ({"dtype": torch.float64}, {"lr": 50.0, "steps": 200, "plateau": 10**6}, 100,  # read every step: plateau
     "step 2: the training loss is 2.2e+24 (first minibatch: 0.533); the run diverged: lower lr=50.0, "
     "add weight_decay or BN"),
])
def test_divergence_raises_the_per_step_error(sample, student, training_cfg, eval_every, message, check_every,
                                              monkeypatch):
    monkeypatch.setattr(training, "CHECK_EVERY", check_every)
    counts = _counting(monkeypatch)
    with pytest.raises(TrainingDiverged) as got:
        compare_student(sample, StudentConfig(width=8, **student), TrainingConfig(**training_cfg),
                        EvaluationConfig(eval_every=eval_every, eval_batch_size=2000, **EVAL))
    assert str(got.value) == message
    bad = int(message.split(":")[0].split()[1])

    def ceil_to(k: int, m: int) -> int:
        return -(-k // m) * m

    # stopped at the first read after the bad step: the next checkpoint or CHECK_EVERY steps on (every step with a
    # plateau rule); the step-0 checkpoint evaluated one batch
    read_at = bad + 1 if "plateau" in training_cfg else min(ceil_to(bad + 1, eval_every), ceil_to(bad + 1,
                                                                                                 check_every))
    assert bad < counts["steps"] - 1 <= read_at
