"""compare_student with TrainingConfig(shuffle_labels=True): the shuffled-label control.  The same student,
minibatch rows and evaluation rows, trained on a fixed permutation of the training rows' labels (never the held-out
ones)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest_student import index_rows

from smaso.student.compare import compare_student
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.rows import _all_training_labels, _training_batches, _training_labels
from teachers import Ladder, sample_ladder
from teachers.chunked import as_chunks

STUDENT = StudentConfig(width=4)
TRAINING = TrainingConfig(steps=12, lr=0.3, batch_size=64, seed=2)
SHUFFLED = dataclasses.replace(TRAINING, shuffle_labels=True)
EVALUATION = EvaluationConfig(eval_every=6, noise_groups=4, eval_examples=300)


@pytest.fixture(scope="module")
def data():
    lad = Ladder.random(depth=2, branching=2, events=3, mode="bottomup", seed=1)
    return sample_ladder(lad, 1200, 0)


#: A chunked source of 1000 rows whose input and label are the row index (4 chunks, the last one short).
_Rows = index_rows(as_chunks(sample_ladder(Ladder.random(depth=1, branching=2, events=3, seed=0), 1000, 0), 300))


@pytest.mark.parametrize("skip", [0, 250, 301])
def test_training_labels_are_a_fixed_permutation_of_the_training_rows_labels(skip):
    """Each row keeps one wrong label in every epoch; the labels are those of the same chunk's training rows,
    each once; the held-out rows neither lose their label nor lend it; the rows and batches are the plain run's."""
    n = 1000 - skip
    plain = _training_batches(_Rows, 100, torch.Generator().manual_seed(3), torch.float64, skip)
    shuf = _training_batches(_Rows, 100, torch.Generator().manual_seed(3), torch.float64, skip, shuffle_seed=7)
    epochs = 3 * n // 100  # three epochs (n is a multiple of 50 or not: rows carry over between batches)
    label_of: dict[int, int] = {}
    for _ in range(epochs):
        (x0, y0), (x1, y1) = next(plain), next(shuf)
        assert torch.equal(x0, x1) and torch.equal(y0, x0[:, 0].long())  # the same rows, in the same order
        for row, lab in zip(x1[:, 0].long().tolist(), y1.tolist(), strict=True):
            assert label_of.setdefault(row, lab) == lab  # the same label in every epoch
    assert sorted(label_of) == list(range(skip, 1000))
    assert sorted(label_of.values()) == list(range(skip, 1000))  # a permutation of the training rows' labels
    for row, lab in label_of.items():  # within the row's chunk
        assert (row // 300) == (lab // 300)
    moved = sum(row != lab for row, lab in label_of.items()) / n
    assert moved > 0.95  # a random permutation of ~300 rows fixes about one
    # full-batch GD trains on the same labels, in row order
    assert _all_training_labels(_Rows, skip, 7).tolist() == [label_of[r] for r in range(skip, 1000)]
    assert _all_training_labels(_Rows, skip, None).tolist() == list(range(skip, 1000))
    # drawn from the seed: another seed, another permutation; the same seed, the same one
    assert not torch.equal(_training_labels(_Rows.chunk(1), 1, 0, 7), _training_labels(_Rows.chunk(1), 1, 0, 8))
    assert torch.equal(_training_labels(_Rows.chunk(1), 1, 0, 7), _training_labels(_Rows.chunk(1), 1, 0, 7))


def test_shuffled_control_run(data):
    """Step 0 is the trained run's (same initial weights, same evaluation rows and labels); the rest differs; the
    run is reproducible from its seed; full-batch GD shuffles too."""
    a = compare_student(data, STUDENT, TRAINING, EVALUATION)
    b = compare_student(data, STUDENT, SHUFFLED, EVALUATION)
    assert b.history[0] == {**a.history[0], "shuffled_labels": True}
    assert all(h["shuffled_labels"] for h in b.history) and "shuffled_labels" not in a.history[-1]
    assert b.history[-1]["levels"] != a.history[-1]["levels"]
    assert compare_student(data, STUDENT, SHUFFLED, EVALUATION).history == b.history
    full = dataclasses.replace(TRAINING, batch_size=None)
    assert compare_student(data, STUDENT, dataclasses.replace(full, shuffle_labels=True), EVALUATION
                           ).history[-1]["loss"] != compare_student(data, STUDENT, full, EVALUATION).history[-1]["loss"]
    for bad in ("yes", 1, None):
        with pytest.raises(TypeError, match="shuffle_labels: expected a bool"):
            compare_student(data, STUDENT, dataclasses.replace(TRAINING, shuffle_labels=bad), EVALUATION)
