"""A degenerate run is said, never scored (issue 36): a number of the comparison that is 0/0 or infinite is NaN with
a named reason, a dead level is never reported as an exact reformulation, and non-finite statistics stop the run."""

from __future__ import annotations

import json
import math

import pytest
import torch

import smaso.student.compare as compare_mod
from smaso.output import json_safe as _json_safe
from smaso.student.compare import ComparisonResult, TrainingDiverged, compare_student
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.diagnosis import (
    _measure,
    _Term,
    compare_statistics_to_theory,
    dead_nodes,
    diagnose,
    nonfinite_statistics,
)
from smaso.student.frequency import ReplicateAccumulator, collect_statistics
from smaso.student.network import LadderStudent
from smaso.student.noise import norm_floor
from teachers import Ladder, sample_ladder

TERMS = ("F_propagated", "G_propagated", "dW_propagated", "F_local", "G_local", "dW_local", "F_local_focus",
         "F_local_decorrelation", "G_local_broadness", "G_local_decorrelation", "dW_local_focus",
         "dW_local_decorrelation", "decorrelation_fwd", "decorrelation_bwd", "decorrelation_dW")


@pytest.fixture(scope="module")
def dead_run():
    """The issue's case: ``LadderStudent(Ladder.default(), 8)`` with the biases of levels 1 and 2 at -100."""
    lad = Ladder.default()
    student = LadderStudent(lad, 8, seed=0)
    with torch.no_grad():
        student.biases[1].fill_(-100.0)
        student.biases[2].fill_(-100.0)
        student.biases[0].fill_(0.5)  # a constant output, which the reformulation predicts exactly
    s = sample_ladder(lad, 3000, seed=0)
    acc = ReplicateAccumulator(student, torch.float64, 4)
    rec = student.forward_backward(s.inputs(dtype=torch.float64), s.y, "squared")
    acc.add(rec, s.z)
    stats = acc.result()
    report = compare_statistics_to_theory(student, stats, replicates=list(acc.leave_one_out()))
    return student, stats, report


def test_a_dead_level_is_undefined_with_its_reason_not_exact(dead_run):
    # today's code reported every one of these as 0.0, the picture of Thm 3's exactness
    _, _, report = dead_run
    for row in report["levels"][1:]:
        for k in TERMS:
            assert math.isnan(row[k]), (row["level"], k, row[k])
            assert "= 0 at every event seen" in row["undefined"][k]
            assert math.isnan(row[f"{k}_floor"]) and k not in row["within_noise"]
        assert row["dead_nodes"] == row["regions"] * row["nodes"]
    assert report["degenerate"][:2] == ["level 1: every node dead (gate off on all 3000 rows)",
                                        "level 2: every node dead (gate off on all 3000 rows)"]
    assert "level 1 Fbar" in report["degenerate"][2] and "level 2 G~" in report["degenerate"][2]
    # the output level's bias-only F is predicted exactly: a real 0-ish number, not undefined
    assert report["levels"][0]["F_propagated"] < 1e-12 and "F_propagated" not in report["levels"][0].get(
        "undefined", {})
    # the leaves' focus is about the inputs, which are alive: defined
    assert report["leaves"]["focus"] == 0.0 and math.isnan(report["leaves"]["broadness"])


def test_diagnose_and_dead_nodes_agree(dead_run):
    _, stats, _ = dead_run
    dead = dead_nodes(stats)
    assert [bool(d.all()) for d in dead] == [False, True, True] and not bool(dead[0].any())
    rows = diagnose(stats)
    assert math.isnan(rows[1]["decorrelation_fwd"]) and "decorrelation_fwd" in rows[1]["undefined"]


def test_a_partly_dead_level_is_measured_and_counted():
    lad = Ladder.default()
    student = LadderStudent(lad, 8, seed=0)
    with torch.no_grad():
        student.biases[2][:, :3] = -100.0  # 3 of 8 nodes of every level-2 region
    s = sample_ladder(lad, 2000, seed=1)
    stats = collect_statistics(student, s.inputs(dtype=torch.float64), s.y, s.z, dtype=torch.float64)
    report = compare_statistics_to_theory(student, stats)
    assert report["levels"][2]["dead_nodes"] == 3 * lad.num_regions[2]
    assert report["degenerate"] == [] and all(math.isfinite(r[k]) for r in report["levels"] for k in TERMS)


def test_the_table_and_the_json_say_undefined(dead_run):
    _, _, report = dead_run
    res = ComparisonResult(history=[{"step": 0, "accuracy": 0.25, "evaluation": "held-out", **report}])
    text = res.table()
    assert "n/a" in text and "level 1: every node dead (gate off on all 3000 rows)" in text
    assert "a 0/0, not an exact prediction" in text
    assert math.isnan(res.max_error())  # a degenerate run is never exact
    payload = json.loads(json.dumps(_json_safe(res.history), allow_nan=False))
    assert payload[0]["levels"][1]["F_propagated"] is None
    assert payload[0]["levels"][1]["undefined"]["F_propagated"] == "level 1 Fbar = 0 at every event seen"


def test_an_infinite_ratio_is_nan_with_its_reason():
    # ||v|| > 0 over ||m|| = 0: today's _value returned inf, which compare_student let through
    v, m = torch.ones(2, 3), torch.zeros(2, 3)
    value, why = _measure(_Term(v, m, None, "level 1 Fbar"))
    assert math.isnan(value) and why == "level 1 Fbar = 0 at every event seen while its prediction is not"
    value, why = _measure(_Term(v, torch.full((2, 3), math.inf), None, "level 1 G~"))
    assert math.isnan(value) and why == "level 1 G~ not finite"
    value, why = _measure(_Term(v, m, torch.zeros(2, 3, dtype=torch.bool), "level 2 F"))
    assert math.isnan(value) and why == "level 2 F no event seen"
    assert math.isnan(norm_floor([v, 2 * v], 0.0)) and norm_floor([v, v], 0.0) != 0.0


def test_nonfinite_statistics_stop_the_run(monkeypatch):
    # an inf in a statistic is a diverged run (today only a NaN in the report stopped it)
    s = sample_ladder(Ladder.default(), 600, seed=0)
    real = compare_mod.collect_statistics

    def poisoned(*args, **kwargs):
        st = real(*args, **kwargs)
        st = st.result() if hasattr(st, "result") else st
        st.means["G"][1][0, 0, 0] = math.inf
        return st

    monkeypatch.setattr(compare_mod, "collect_statistics", poisoned)
    with pytest.raises(TrainingDiverged, match=r"not finite \(G at level 1"):
        compare_student(s, student=StudentConfig(batch_norm=True), training=TrainingConfig(steps=1),
                        evaluation=EvaluationConfig(eval_every=1, eval_examples=200, noise_groups=None))


def test_nonfinite_statistics_names_them(dead_run):
    _, stats, _ = dead_run
    assert nonfinite_statistics(stats) == []
    stats.means["U"][2][0, 0, 0] = math.nan
    try:
        assert nonfinite_statistics(stats) == ["U at level 2"]
    finally:
        stats.means["U"][2][0, 0, 0] = 0.0
