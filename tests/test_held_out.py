"""compare_student evaluates on rows it never trained on (held_out=True, a held-out dataset) or, on request, on
training rows (held_out=False)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest_student import index_rows

from smaso.student.compare import compare_student
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.rows import _training_batches
from teachers import Ladder, sample_ladder
from teachers.chunked import as_chunks, open_dataset, sample_to_store

STUDENT = StudentConfig(width=4)
TRAINING = TrainingConfig(steps=12, lr=0.3, batch_size=64, seed=2)


def _evaluation(**kw):
    """The tests' EvaluationConfig: every 6 steps, 4 row groups, and ``kw``."""
    return EvaluationConfig(eval_every=6, noise_groups=4, **kw)


@pytest.fixture(scope="module")
def data():
    lad = Ladder.random(depth=2, branching=2, events=3, mode="bottomup", seed=1, emission="gaussian", sigma=0.5)
    return lad, sample_ladder(lad, 1500, 0)


def _rows(s, lo, hi):
    return dataclasses.replace(s, z=s.z[lo:hi], x=None if s.x is None else s.x[lo:hi])


def _history(res):
    return [{k: v for k, v in h.items() if k != "evaluation"} for h in res.history]


def test_held_out_rows_are_never_trained_on(data):
    """The trained weights do not depend on the first eval_examples rows: replace them and train again."""
    lad, s = data
    other = sample_ladder(lad, 500, 9)
    swapped = dataclasses.replace(s, z=torch.cat([other.z, s.z[500:]]), x=torch.cat([other.x, s.x[500:]]))
    a = compare_student(s, STUDENT, TRAINING, _evaluation(eval_examples=500))
    b = compare_student(swapped, STUDENT, TRAINING, _evaluation(eval_examples=500))
    assert all(torch.equal(p, q) for p, q in zip(a.student.weights, b.student.weights, strict=True))
    assert a.history[-1]["accuracy"] != b.history[-1]["accuracy"] or a.history[-1]["levels"] != b.history[-1]["levels"]
    assert all(h["evaluation"] == "held-out" and h["num_examples"] == 500 for h in a.history)
    # ... while with held_out=False they are trained on
    c = compare_student(s, STUDENT, TRAINING, _evaluation(eval_examples=500, held_out=False))
    d = compare_student(swapped, STUDENT, TRAINING, _evaluation(eval_examples=500, held_out=False))
    assert not all(torch.equal(p, q) for p, q in zip(c.student.weights, d.student.weights, strict=True))
    assert all(h["evaluation"] == "training" for h in c.history)


def test_held_out_is_training_on_the_rest_and_evaluating_on_the_head(data):
    """held_out=True (one chunk) is exactly: train on rows k.., evaluate on a dataset of rows ..k."""
    s = data[1]
    k = 400
    a = compare_student(s, STUDENT, TRAINING, _evaluation(eval_examples=k))
    b = compare_student(_rows(s, k, len(s)), STUDENT, TRAINING, _evaluation(eval_examples=k, held_out=_rows(s, 0, k)))
    assert _history(a) == _history(b)
    assert all(torch.equal(p, q) for p, q in zip(a.student.weights, b.student.weights, strict=True))
    # and held_out=False is: train on every row, evaluate on a dataset of the first rows
    c = compare_student(s, STUDENT, TRAINING, _evaluation(eval_examples=k, held_out=False))
    d = compare_student(s, STUDENT, TRAINING, _evaluation(eval_examples=k, held_out=_rows(s, 0, k)))
    assert _history(c) == _history(d)
    # full-batch GD holds the rows out too
    e = compare_student(s, STUDENT, dataclasses.replace(TRAINING, batch_size=None), _evaluation(eval_examples=k))
    f = compare_student(_rows(s, k, len(s)), STUDENT, dataclasses.replace(TRAINING, batch_size=None),
                        _evaluation(eval_examples=k, held_out=_rows(s, 0, k)))
    assert _history(e) == _history(f)


def test_skipped_rows_across_chunks():
    """Over several chunks: an epoch visits every row from ``skip`` on once, and none before it."""
    lad = Ladder.random(depth=1, branching=2, events=3, seed=0)
    chunks = as_chunks(sample_ladder(lad, 1000, 0), 300)  # four chunks, the last one short
    Rows = index_rows(chunks)  # a source whose inputs and labels are the row index

    for skip in (0, 250, 300, 301, 999):
        batches = _training_batches(Rows, 1000 - skip, torch.Generator().manual_seed(3), torch.float64, skip)
        _, y = next(batches)
        assert sorted(y.tolist()) == list(range(skip, 1000))
    # skip = 0 draws the stream of the plain pass: the same batches as before held-out rows existed
    plain = _training_batches(Rows, 64, torch.Generator().manual_seed(3), torch.float64)
    gen = torch.Generator().manual_seed(3)
    want = []
    for c in torch.randperm(Rows.num_chunks, generator=gen).tolist():
        lo, hi = chunks.chunk_bounds(c)
        want += (torch.randperm(hi - lo, generator=gen) + lo).tolist()
    got = torch.cat([next(plain)[1] for _ in range(15)]).tolist()
    assert got == want[:960]


def test_a_held_out_store_is_streamed(tmp_path, data):
    lad, s = data
    store = open_dataset(sample_to_store(lad, 5000, tmp_path / "held.zarr", seed=5, chunk_rows=4096))
    res = compare_student(s, STUDENT, TRAINING, _evaluation(eval_examples=None, held_out=store, eval_batch_size=1024))
    assert res.final()["num_examples"] == 5000 and res.final()["evaluation"] == "held-out"
    again = compare_student(s, STUDENT, TRAINING, _evaluation(eval_examples=None, held_out=str(tmp_path / "held.zarr"),
                                                              eval_batch_size=1024))
    assert _history(again) == _history(res)


def test_bad_held_out(data):
    s = data[1]
    with pytest.raises(ValueError, match="held_out: evaluating on held-out rows needs eval_examples"):
        compare_student(s, STUDENT, TRAINING, _evaluation(eval_examples=None))
    with pytest.raises(ValueError, match="leave none of the sample's 1500 rows to train on"):
        compare_student(s, STUDENT, TRAINING, _evaluation(eval_examples=1500))
    with pytest.raises(ValueError, match="another ladder"):
        compare_student(s, STUDENT, TRAINING,
                        _evaluation(held_out=sample_ladder(Ladder.random(depth=2, seed=5), 50, 0)))
    with pytest.raises(TypeError, match="held_out: expected True, False or a dataset"):
        compare_student(s, STUDENT, TRAINING, _evaluation(held_out=3))
    with pytest.raises(ValueError, match="at least one row"):
        compare_student(s, STUDENT, TRAINING, _evaluation(held_out=_rows(s, 0, 0)))
