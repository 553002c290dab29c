"""Student vs reformulation end to end (smaso/student/compare.py)."""

from __future__ import annotations

import pytest
import torch
from conftest_student import fi_sample, one_torch_thread, rel  # noqa: F401 (fixture)

from smaso.student.compare import ComparisonResult, compare_statistics_to_theory, compare_student, diagnose
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.frequency import collect_statistics
from smaso.student.network import LadderStudent
from smaso.student.reformulation import reformulate
from teachers import Ladder, LadderSample, sample_ladder

HISTORY_KEYS = {"step", "accuracy", "levels", "leaves", "loss", "P_source", "num_examples", "noise_groups",
                "degenerate", "evaluation"}
TERM_KEYS = {"F_propagated", "G_propagated", "dW_propagated", "F_local", "G_local", "dW_local", "F_local_focus",
             "F_local_decorrelation", "G_local_broadness", "G_local_decorrelation", "dW_local_focus",
             "dW_local_decorrelation", "decorrelation_fwd", "decorrelation_bwd", "decorrelation_dW"}
LEVEL_KEYS = {"level", "regions", "events", "edges", "nodes", "empty_events", "dead_nodes", "within_noise", *TERM_KEYS,
              *(f"{k}_floor" for k in TERM_KEYS)}
ERROR_KEYS = ("F_propagated", "G_propagated", "dW_propagated", "F_local", "G_local", "dW_local")


@pytest.fixture(scope="module")
def fi():
    return fi_sample(depth=2, branching=2, leaf_events=2, n=300, seed=3)


@pytest.mark.parametrize("batch_norm, activation", [(False, "relu"), (True, "relu"), (True, "swish:0.7")])
def test_compare_student_fully_informative(fi, batch_norm, activation):
    lad, s = fi
    res = compare_student(s, student=StudentConfig(width=4, activation=activation, batch_norm=batch_norm, readout=None),
                          training=TrainingConfig(steps=6, lr=0.2, batch_size=32, seed=1),
                          evaluation=EvaluationConfig(eval_every=2, eval_examples=200))  # (Thm 3's student: no readout)
    assert isinstance(res, ComparisonResult) and res.seconds > 0
    assert [h["step"] for h in res.history] == [0, 2, 4, 6]
    for h in res.history:
        # Eq 7's signs, measured where the top has one node per class (and, for the squared loss, not guaranteed)
        assert set(h) - {"eq7", "alignment"} == HISTORY_KEYS and "alignment" in h  # (on by default, issue 37)
        assert "eq7" not in h or (h["eq7"]["loss"] == "squared" and isinstance(h["eq7"]["holds"], bool))
        assert h["P_source"] == "empirical" and h["num_examples"] == 200
        assert 0.0 <= h["accuracy"] <= 1.0 and h["loss"] > 0
        assert [row["level"] for row in h["levels"]] == list(range(lad.depth))
        for row in h["levels"]:
            bn_level = batch_norm and 0 < row["level"]  # F and G~ do not split additively through Eq 12
            split = {"F_local_focus", "F_local_decorrelation", "G_local_broadness", "G_local_decorrelation"}
            want = LEVEL_KEYS - ({*split, *(f"{k}_floor" for k in split)} if bn_level else set())
            want |= {"focus", "broadness", "focus_floor", "broadness_floor"} if row["level"] >= 1 else set()
            inflated = set()
            if batch_norm:  # floors through Eq 12 are over-estimates: such numbers are never called noise
                inflated = {"F_propagated", "G_propagated", "dW_propagated"} | (
                    {"F_local", "G_local"} if bn_level else set())
                want |= {"floor_over_estimated"}
                assert set(row["floor_over_estimated"]) == inflated
            assert set(row) == want
            # Thm 3: every number exact, so every floor is round-off and every number within noise
            assert set(row["within_noise"]) == {k for k in want if k in TERM_KEYS | {"focus", "broadness"}} - inflated
            if not batch_norm:  # with BN the groups share the batch's normalization (smaso.student.noise)
                assert max(v for k, v in row.items() if k.endswith("_floor")) < 1e-9
            assert row["regions"] == lad.num_regions[row["level"]]
            assert row["events"] == lad.events[row["level"]]
            for k in ERROR_KEYS:
                assert row[k] < 1e-9, (h["step"], row["level"], k, row[k])
            for k in ("decorrelation_fwd", "decorrelation_bwd", "focus", "broadness"):
                if k in row:
                    assert row[k] < 1e-9, (h["step"], row["level"], k, row[k])
        assert set(h["leaves"]) == {"level", "focus", "broadness", "focus_floor", "broadness_floor",
                                    "within_noise"} and h["leaves"]["level"] == lad.depth
    assert res.final() is res.history[-1]
    # training happened: the final student differs from a fresh one with the same seed
    fresh = LadderStudent(lad, 4, activation=activation, batch_norm=batch_norm, seed=1, dtype=torch.float64)
    assert (res.student.weights[0] - fresh.weights[0]).abs().max().item() > 1e-4
    # the final statistics / prediction belong to the final weights
    stats = collect_statistics(res.student, s.inputs(dtype=torch.float64)[:200], s.y[:200], s.z[:200])
    assert torch.equal(stats.counts[0], res.final_stats.counts[0])
    assert rel(res.final_stats.dW[0], stats.dW[0]) < 1e-12
    assert rel(res.final_prediction.dW[0], stats.dW[0]) < 1e-9


def test_compare_student_full_batch_exact_P_and_cross_entropy(fi):
    _, s = fi
    res = compare_student(s, student=StudentConfig(width=3),
                          training=TrainingConfig(steps=2, lr=0.1, batch_size=None, loss="cross_entropy"),
                          evaluation=EvaluationConfig(eval_every=5, eval_examples=None, held_out=False,
                                                      P_source="exact"))
    assert [h["step"] for h in res.history] == [0, 2]
    h = res.history[-1]
    assert h["P_source"] == "exact" and h["num_examples"] == 300
    for row in h["levels"]:
        assert row["F_propagated"] < 1e-9  # Fbar does not depend on the frequencies (no BN)
        assert row["G_propagated"] > 1e-4  # G~ does (sampling noise with N = 300)
    assert h["levels"][0]["empty_events"] == int((res.final_stats.counts[0] == 0).sum())


def test_compare_statistics_to_theory_generic_ladder():
    """On a generic top-down ladder the propagated errors are O(1), and the row reports them."""
    lad = Ladder.random(depth=2, branching=2, events=3, mode="topdown", concentration=1.0, seed=3)
    s = sample_ladder(lad, 2000, seed=0)
    st = LadderStudent(lad, 5, dtype=torch.float64, seed=1)
    stats = collect_statistics(st, s.inputs(dtype=torch.float64), s.y, s.z)
    rep = compare_statistics_to_theory(st, stats)
    pred = reformulate(st, stats.P, stats)
    assert rep["levels"][1]["F_propagated"] == pytest.approx(rel(pred.Fbar[1], stats.Fbar[1]), rel=1e-12)
    assert rep["levels"][0]["dW_propagated"] == pytest.approx(rel(pred.dW[0], stats.dW[0]), rel=1e-12)
    assert rep["levels"][1]["F_propagated"] > 0.2
    assert rep["levels"][1]["decorrelation_fwd"] > 0.2
    d = diagnose(stats)
    assert rep["levels"][1]["focus"] == d[1]["focus"] and rep["leaves"] == d[2]


def test_missing_latents_and_bad_arguments(fi):
    lad, s = fi
    # a sample whose z lacks the hidden levels' columns
    keep = [0, *range(lad.level_offsets[-2], lad.total_regions)]
    partial = LadderSample(lad, s.z[:, keep], None)
    with pytest.raises(ValueError, match="every latent event z"):
        compare_student(partial, training=TrainingConfig(steps=1))
    with pytest.raises(ValueError, match="every latent event z"):
        compare_student(LadderSample(lad, s.z[:, :-1], None), training=TrainingConfig(steps=1))
    with pytest.raises(ValueError, match=r"P_source.*'bogus'"):
        compare_student(s, student=StudentConfig(width=2), training=TrainingConfig(steps=1),
                        evaluation=EvaluationConfig(P_source="bogus"))
    with pytest.raises(ValueError, match="loss"):
        compare_student(s, student=StudentConfig(width=2), training=TrainingConfig(steps=1, loss="hinge"),
                        evaluation=EvaluationConfig(held_out=False))
    with pytest.raises(ValueError, match="steps"):
        compare_student(s, training=TrainingConfig(steps=-1))
    with pytest.raises(ValueError, match="eval_every"):
        compare_student(s, evaluation=EvaluationConfig(eval_every=0))
    with pytest.raises(TypeError, match="LadderSample"):
        compare_student((s.inputs(), s.y))
    st = LadderStudent(lad, 2, dtype=torch.float64)
    stats = collect_statistics(st, s.inputs(dtype=torch.float64), s.y, s.z)
    with pytest.raises(ValueError, match="P_source"):
        compare_statistics_to_theory(st, stats, P_source="bogus")


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"dtype": torch.int64}, r"^dtype: expected a floating torch\.dtype \(such as torch\.float32 or torch\.float64\), "
                             r"got torch\.int64"),
    ({"dtype": "float64"}, r"^dtype: expected a floating torch\.dtype"),
    ({"device": "meta"}, r"^device: 'meta' tensors have no values"),
    ({"device": torch.device("meta")}, r"^device: device\(type='meta'\) tensors have no values"),
    ({"device": "nowhere"}, r"^device: expected a torch device"),
])
def test_dtype_and_device_are_refused_up_front(fi, kwargs, match):
    _, s = fi
    kw = dict(kwargs)  # (dtype is the student's, device compare_student's own)
    with pytest.raises(ValueError, match=match):
        compare_student(s, StudentConfig(dtype=kw.pop("dtype", None)), TrainingConfig(steps=1),
                        EvaluationConfig(held_out=False), **kw)


@pytest.mark.parametrize("training, evaluation", [({}, {}), ({}, {"held_out": False}),
                                                  ({"batch_size": None}, {"held_out": False}),
                                                  ({}, {"held_out": False, "eval_examples": None})])
def test_a_dataset_without_rows_is_refused(fi, training, evaluation):
    lad, s = fi
    with pytest.raises(ValueError, match=r"^sample: the dataset has no rows \(0 examples\)"):
        compare_student(LadderSample(lad, s.z[:0]), training=TrainingConfig(steps=1, **training),
                        evaluation=EvaluationConfig(**evaluation))


def test_compare_student_without_bias(fi):
    _, s = fi
    res = compare_student(s, student=StudentConfig(width=3, bias=False), training=TrainingConfig(steps=2),
                          evaluation=EvaluationConfig(eval_every=1, eval_examples=100))
    assert max(row["F_propagated"] for row in res.final()["levels"]) < 1e-9


def test_compare_student_bn_eps_reaches_the_student(fi):
    """bn_eps = 0 is Thm 5's exact projection; on the fully informative ladder the comparison stays exact,
    and the student built for it carries that eps (leaky ReLU: no dead node, so no sigma = 0)."""
    _, s = fi
    res = compare_student(s, student=StudentConfig(width=4, activation="leaky_relu:0.2", batch_norm=True, bn_eps=0.0),
                          training=TrainingConfig(steps=2, lr=0.1, batch_size=64, seed=2),
                          evaluation=EvaluationConfig(eval_every=2, eval_examples=200))
    assert res.student.bn_eps == 0.0
    assert max(row[k] for h in res.history for row in h["levels"] for k in ERROR_KEYS) < 1e-9


@pytest.mark.parametrize("loss", ["squared", "cross_entropy"])
def test_bn_before_the_gate_is_exact_on_the_fully_informative_ladder_and_eq7_is_reported(fi, loss):
    lad, s = fi
    res = compare_student(s, student=StudentConfig(width=4, batch_norm="before"),
                          training=TrainingConfig(loss=loss, steps=6, lr=0.2, batch_size=32, seed=2),
                          evaluation=EvaluationConfig(eval_every=3, eval_examples=200))
    for row in res.final()["levels"]:
        # Thm 3 with BN before the gate: the errors and the forward decorrelation (D o F against Fbar) vanish
        for k in ("F_propagated", "G_propagated", "dW_propagated", "F_local", "G_local", "dW_local",
                  "decorrelation_fwd", "decorrelation_dW"):
            assert row[k] < 1e-9, (row["level"], k, row[k])
        # the backward decorrelation would need E[g_raw | z] at a BN-before level: not reported there
        assert ("decorrelation_bwd" in row) == (row["level"] == 0)
    if loss == "cross_entropy":
        e7 = res.final()["eq7"]
        assert e7["holds"] and e7["worst_margin"] > 0 and len(e7["margin"]) == lad.num_classes
        assert "Eq 7" in res.table()
    else:  # measured and reported, with the condition it needs: the squared loss does not guarantee it
        e7 = res.final()["eq7"]
        assert e7["loss"] == "squared" and len(e7["margin"]) == lad.num_classes
        assert e7["holds"] == (e7["worst_margin"] > 0)
        assert "Eq 7 (squared loss: g_j(y=j) > 0 > g_j(y!=j), not guaranteed" in res.table()
