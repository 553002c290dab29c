"""One set of defaults (issue 37): ``smaso demo``, ``smaso compare`` and ``compare_student`` read theirs from
``smaso.student.config``; each of the old inconsistencies (readout 32 / 0 / None, steps 3000 / 600 / 200, lr 0.5 /
0.5 / 0.1, width 16 / 16 / 8, eval-every 250 / 50 / 20) has its test; the keyword form is deprecated, not broken;
the demo's seeds give the same results whatever the number of worker processes."""

from __future__ import annotations

import json
import warnings

import pytest

from smaso.cli import build_parser
from smaso.student.compare import compare_student
from smaso.student.config import LEGACY_FIELDS, EvaluationConfig, StudentConfig, TrainingConfig, _configs
from teachers import Ladder, sample_ladder


def _defaults(command: str) -> dict:
    """The argparse defaults of a subcommand, read from the parser itself (not from its --help text)."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    p = sub.choices[command]
    return {a.dest: a.default for a in p._actions if a.dest != "help"}


#: (CLI destination, config, field): every option both commands share with the library.
SHARED = [("width", StudentConfig, "width"), ("readout", StudentConfig, "readout"),
          ("activation", StudentConfig, "activation"), ("steps", TrainingConfig, "steps"),
          ("lr", TrainingConfig, "lr"), ("batch_size", TrainingConfig, "batch_size"),
          ("loss", TrainingConfig, "loss"), ("optimizer", TrainingConfig, "optimizer"),
          ("weight_decay", TrainingConfig, "weight_decay"), ("student_seed", TrainingConfig, "seed"),
          ("eval_every", EvaluationConfig, "eval_every"), ("eval_examples", EvaluationConfig, "eval_examples"),
          ("P_source", EvaluationConfig, "P_source"), ("noise_groups", EvaluationConfig, "noise_groups"),
          ("alignment", EvaluationConfig, "alignment")]


def _cli_value(dest: str, v):
    """A CLI default in the config's terms (--width is a list, --readout 0 and --batch-size 0 mean None)."""
    if dest == "width":
        return v[0] if len(v) == 1 else tuple(v)
    if dest in ("readout", "batch_size") and v == 0:
        return None
    return v


@pytest.mark.parametrize("dest,cls,name", SHARED, ids=[s[0] for s in SHARED])
def test_demo_compare_and_library_share_every_default(dest, cls, name):
    demo, cmp_ = _defaults("demo"), _defaults("compare")
    lib = getattr(cls(), name)
    assert _cli_value(dest, demo[dest]) == _cli_value(dest, cmp_[dest]) == lib


def test_compare_student_without_configs_is_the_configs_defaults():
    assert _configs(None, None, None, {}) == (StudentConfig(), TrainingConfig(), EvaluationConfig())


# one test per inconsistency of issue 37, each against the value chosen (the demo's: a student that learns)
@pytest.mark.parametrize("dest,value", [("readout", 32), ("steps", 3000), ("lr", 0.5), ("width", 16),
                                        ("eval_every", 250)])
def test_old_inconsistency_resolved(dest, value):
    cls, name = next((c, n) for d, c, n in SHARED if d == dest)
    assert getattr(cls(), name) == value
    assert _cli_value(dest, _defaults("demo")[dest]) == value
    assert _cli_value(dest, _defaults("compare")[dest]) == value


@pytest.fixture(scope="module")
def tiny():
    lad = Ladder.random(depth=2, branching=2, events=3, mode="bottomup", seed=1, emission="onehot")
    return sample_ladder(lad, 600, 0)


def test_compare_student_default_student_has_the_readout(tiny):
    res = compare_student(tiny, training=TrainingConfig(steps=0),
                          evaluation=EvaluationConfig(eval_examples=200, noise_groups=None, alignment=False))
    assert res.student.readout == StudentConfig().readout == 32
    assert [h["step"] for h in res.history] == [0]


def test_keywords_are_deprecated_and_mapped_onto_the_configs(tiny):
    ev = EvaluationConfig(eval_examples=200, noise_groups=None, alignment=False)
    new = compare_student(tiny, StudentConfig(width=3, readout=None), TrainingConfig(steps=4, lr=0.2, seed=2), ev)
    with pytest.warns(DeprecationWarning, match=r"student=StudentConfig\(width=\.\.\.\)"):
        old = compare_student(tiny, width=3, readout=None, steps=4, lr=0.2, seed=2, eval_examples=200,
                              noise_groups=None, alignment=None)
    assert json.dumps(old.history, default=str) == json.dumps(new.history, default=str)


def test_keyword_errors_name_what_to_use(tiny):
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'widht'.*StudentConfig"):
        compare_student(tiny, widht=3)
    with pytest.raises(TypeError, match=r"steps given both.*training=TrainingConfig"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            compare_student(tiny, training=TrainingConfig(), steps=3)
    with pytest.raises(TypeError, match="training: expected a TrainingConfig, got StudentConfig"):
        compare_student(tiny, training=StudentConfig())
    assert set(LEGACY_FIELDS) >= {"width", "readout", "steps", "lr", "eval_every", "held_out", "alignment", "seed"}


@pytest.mark.parametrize("cls,kw,match", [
    (StudentConfig, {"width": 0}, "width: expected a positive integer"),
    (StudentConfig, {"readout": -1}, "readout: expected None or a positive integer"),
    (StudentConfig, {"batch_norm": "middle"}, "batch_norm: expected"),
    (TrainingConfig, {"lr": 0}, "lr: expected a finite number > 0"),
    (TrainingConfig, {"steps": -1}, "steps: expected an integer >= 0"),
    (TrainingConfig, {"loss": "hinge"}, "loss: expected 'squared' or 'cross_entropy'"),
    (EvaluationConfig, {"eval_every": 0}, "eval_every: expected a positive integer"),
    (EvaluationConfig, {"noise_groups": 1}, "noise_groups: expected None or an integer >= 2"),
])
def test_configs_refuse_bad_fields_by_name(cls, kw, match):
    with pytest.raises(ValueError, match=match):
        cls(**kw)


def test_configs_are_frozen_and_readout_zero_is_none():
    with pytest.raises(AttributeError):
        StudentConfig().width = 3  # type: ignore[misc]
    assert StudentConfig(readout=0).readout is None and StudentConfig(width=[4]).width == 4
    assert StudentConfig(width=[4, 2]).width == (4, 2)


def test_alignment_on_by_default_in_compare_student(tiny):
    res = compare_student(tiny, StudentConfig(width=3), TrainingConfig(steps=2),
                          EvaluationConfig(eval_every=2, eval_examples=200, noise_groups=None))
    assert all("alignment" in h for h in res.history)
    assert [r["level"] for r in res.history[-1]["alignment"]] == [0, 1, 2]  # readout level + the teacher's two
    off = compare_student(tiny, StudentConfig(width=3), TrainingConfig(steps=2),
                          EvaluationConfig(eval_every=2, eval_examples=200, noise_groups=None, alignment=False))
    assert not any("alignment" in h for h in off.history)
    assert "--no-alignment" in build_parser()._subparsers._group_actions[0].choices["compare"].format_help()


def test_seeds_identical_whatever_the_number_of_worker_processes(tiny):
    from smaso.student.seeds import compare_seeds
    from teachers.engine import ProcessEngine

    cfg = dict(student=StudentConfig(width=3), training=TrainingConfig(steps=4, lr=0.2),
               evaluation=EvaluationConfig(eval_every=2, eval_examples=200, noise_groups=None, alignment=False))
    _, here = compare_seeds(tiny, [0, 1, 2], shuffled=True, **cfg)
    with ProcessEngine(2) as engine:
        _, pooled = compare_seeds(tiny, [0, 1, 2], shuffled=True, engine=engine, **cfg)

    def strip(runs):
        return json.dumps([{k: v for k, v in r.items() if k != "seconds"} | (
            {"shuffled": {k: v for k, v in r["shuffled"].items() if k != "seconds"}}) for r in runs], default=str)

    assert strip(here) == strip(pooled)
