"""Noise sweep (smaso.student.compare.noise_sweep): Thm 3 at sigma = 0, Thm 2's failure as the leaves get noisy."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from conftest_student import one_torch_thread  # noqa: F401 (fixture)

from smaso.student.compare import compare_student, noise_sweep
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from teachers import Ladder, sample_ladder
from teachers.emission import GaussianEmission

ERROR_KEYS = ("F_propagated", "G_propagated", "dW_propagated", "F_local", "G_local", "dW_local")
TERMS = ("decorrelation_fwd", "decorrelation_bwd", "focus", "broadness")
STUDENT = StudentConfig(width=4, readout=None)
TRAINING = TrainingConfig(steps=4, lr=0.2, batch_size=64)
EVALUATION = EvaluationConfig(eval_every=2, eval_examples=None, held_out=False, alignment=False)
CONFIGS = {"student": STUDENT, "training": TRAINING, "evaluation": EVALUATION}


@pytest.fixture(scope="module")
def fi():
    return Ladder.fully_informative(depth=2, branching=2, leaf_events=2, concentration=1.0, seed=0)


@pytest.fixture(scope="module")
def sweep(fi):
    return noise_sweep(fi, [0.0, 0.1, 0.6], 400, seed=2, student_seed=1, **CONFIGS)


def test_sigma_zero_is_exact_and_noise_breaks_it(fi, sweep):
    assert [r["sigma"] for r in sweep] == [0.0, 0.1, 0.6]
    for r in sweep:
        assert set(r) == {"sigma", "step", "accuracy", "loss", "levels", "leaves", "max_error", "seconds"}
        assert r["step"] == TRAINING.steps and 0 <= r["accuracy"] <= 1 and r["loss"] > 0
        assert [row["level"] for row in r["levels"]] == list(range(fi.depth))
        # max_error is the worst over the run, so at least the worst of the last checkpoint
        assert r["max_error"] >= max(row[k] for row in r["levels"] for k in ERROR_KEYS)
    exact = sweep[0]
    # Thm 3: one-hot leaves on the fully informative ladder, float64: every error and every term is round-off
    assert exact["max_error"] < 1e-10
    for row in exact["levels"]:
        for k in TERMS:
            if k in row:
                assert row[k] < 1e-10, (row["level"], k, row[k])
    noisy = sweep[-1]
    assert noisy["max_error"] > 1e-2
    assert max(row["F_propagated"] for row in noisy["levels"]) > 1e-2
    # the condition that fails is decorrelation (the gates see the within-event noise) ...
    assert noisy["levels"][1]["decorrelation_fwd"] > 1e-2
    # ... while broadness still holds (a parent's event is its children's tuple, whatever the leaf noise)
    assert noisy["levels"][1]["broadness"] < 1e-10
    assert sweep[1]["max_error"] > 1e3 * exact["max_error"]


def test_rows_equal_direct_compare_student(fi, sweep):
    """Each row is compare_student on a sample of the ladder with Gaussian leaves of that sigma."""
    lad = fi.with_emission(GaussianEmission.around_one_hot(fi.num_regions[-1], fi.events[-1], 0.6))
    res = compare_student(sample_ladder(lad, 400, 2), STUDENT, dataclasses.replace(TRAINING, seed=1), EVALUATION)
    assert res.final()["levels"] == sweep[-1]["levels"]
    assert res.final()["accuracy"] == sweep[-1]["accuracy"]
    worst = max(row[k] for h in res.history for row in h["levels"] for k in ERROR_KEYS)
    assert sweep[-1]["max_error"] == worst


def test_factory_same_events_and_batch_norm(fi):
    """A factory gets each sigma; the events z are the same draw at every sigma; BN stays exact at 0 (Eq 12)."""
    seen = []
    bn = {**CONFIGS, "student": dataclasses.replace(STUDENT, batch_norm=True)}

    def factory(sigma):
        seen.append(sigma)
        if sigma == 0:
            return fi
        return fi.with_emission(GaussianEmission.around_one_hot(fi.num_regions[-1], fi.events[-1], sigma))

    rows = noise_sweep(factory, (0, 0.3), 300, seed=5, **bn)
    assert seen == [0, 0.3]
    assert rows[0]["max_error"] < 1e-10 and rows[1]["max_error"] > 1e-3
    again = noise_sweep(fi, [0.0, 0.3], 300, seed=5, **bn)
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in rows]
    assert strip == [{k: v for k, v in r.items() if k != "seconds"} for r in again]
    z0 = sample_ladder(factory(0), 300, 5).z
    z1 = sample_ladder(factory(0.3), 300, 5).z
    assert torch.equal(z0, z1)


def test_progress_bar(fi, capsys):
    rows = noise_sweep(fi, [0.0], 100, progress=True, student=StudentConfig(width=2), training=TrainingConfig(steps=1),
                       evaluation=EvaluationConfig(eval_every=1))
    assert len(rows) == 1
    assert "noise sweep" in capsys.readouterr().err


@pytest.mark.parametrize("sigmas", [[], [-0.1], [0.1, math.nan], [math.inf], [0.2, 0.2], [True], ["0.1"]])
def test_bad_sigmas(fi, sigmas):
    with pytest.raises(ValueError, match="sigmas"):
        noise_sweep(fi, sigmas, 50, training=TrainingConfig(steps=1))


def test_bad_arguments(fi):
    with pytest.raises(TypeError, match="sigmas"):
        noise_sweep(fi, "0.1", 50)
    with pytest.raises(TypeError, match="sigmas"):
        noise_sweep(fi, 0.1, 50)
    for n in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="n:"):
            noise_sweep(fi, [0.0], n)
    with pytest.raises(ValueError, match="seed"):
        noise_sweep(fi, [0.0], 50, seed=-1)
    with pytest.raises(TypeError, match="ladder"):
        noise_sweep("fully_informative", [0.0], 50)
    with pytest.raises(TypeError, match="factory returned"):
        noise_sweep(lambda s: None, [0.0], 50)
    # the student's own arguments are checked by compare_student
    with pytest.raises(ValueError, match="P_source"):
        noise_sweep(fi, [0.0], 50, training=TrainingConfig(steps=1), evaluation=EvaluationConfig(P_source="bogus"))
    # tensor / numpy noise levels are accepted
    import numpy as np

    rows = noise_sweep(fi, torch.tensor([0.0, 0.2]), 60, student=StudentConfig(width=2),
                       training=TrainingConfig(steps=1), evaluation=EvaluationConfig(eval_every=1))
    assert [r["sigma"] for r in rows] == [0.0, pytest.approx(0.2)]
    rows = noise_sweep(fi, np.array([0.1]), 60, student=StudentConfig(width=2), training=TrainingConfig(steps=1),
                       evaluation=EvaluationConfig(eval_every=1))
    assert rows[0]["sigma"] == pytest.approx(0.1) and isinstance(rows[0]["sigma"], float)
