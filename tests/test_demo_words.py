"""The demo's words are the README's (issue 37): every column defined where it is printed ("recursion", the
README's "F one step"), each control named for what it is ([nbr], the neighbouring regions' events; the
shuffled-label control), NaN with its reason (MI at level 0, [nbr] at one-region levels), Eq 7's failure said in
words, the two held-out accuracies told apart, figures labelled in words, docs/cli.md's numbers the parser's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib
import pytest

from smaso.cli import build_parser
from smaso.student.compare import ERROR_WORDS, compare_student
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from teachers import Ladder, sample_ladder

matplotlib.use("Agg")
ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def run():
    data = sample_ladder(Ladder.default(), 1500, 0)
    return compare_student(data, StudentConfig(width=4, readout=8), TrainingConfig(steps=4, lr=0.2, batch_size=64),
                           EvaluationConfig(eval_every=2, eval_examples=600, noise_groups=4))


def test_recursion_and_one_step_are_defined_where_printed(run):
    text = run.table()
    assert "recursion = the full recursion of Eq 9" in text and "one step = one level predicted from its" in text
    assert text.index("recursion =") < text.index("level             recursion")  # defined before the column


def test_eq7_failure_is_said_in_words(run):
    last = run.history[-1]
    saved = last.get("eq7")
    last["eq7"] = {"holds": False, "worst_margin": -0.0265, "worst_class": 3, "loss": "squared"}
    try:
        text = run.table()
    finally:
        last.pop("eq7") if saved is None else last.update(eq7=saved)
    assert "FAILS" not in text
    assert "does not hold: at class 3 an output gradient has the wrong sign" in text
    assert "does not assume it" in text  # what the failure implies for the reformulation's errors


def test_alignment_controls_named_and_nan_explained(run):
    text = run.alignment_table(legend=True)
    assert "[ctrl]" not in text and "[nbr]" in text.splitlines()[0]
    assert "nan" not in text  # undefined entries print n/a, each with its reason below
    assert "n/a: MI at level 0: the linear output nodes have no gate" in text
    assert re.search(r"n/a: \[nbr\] at levels 0, 1: a level of one region \(the root's\) has no neighbouring", text)
    assert "[nbr] = the same\n  against the neighbouring regions' events" in text


def test_seed_summary_rows_use_the_readme_column_names(run):
    from smaso.student.seeds import summarize_seeds

    text = summarize_seeds([run, run], seeds=[0, 1], last=2).table()
    readme = (ROOT / "README.md").read_text()
    for name in ("F one step", "F focus part", "F decorrelation part", "G~ one step", "G~ broadness part",
                 "G~ decorrelation part"):
        assert f"| {name} |" in readme or f" {name} |" in readme  # the README's column ...
        assert re.search(rf"^\s+(\d+)?\s+{re.escape(name)} ", text, re.M), name  # ... is the demo's row
    assert ERROR_WORDS in text and "each seed's mean over its last 2 checkpoints" in text
    assert "decorrelation_fwd" not in text


def test_errors_against_n_figure_labelled_in_words():
    from smaso.plots import plot_errors_against_n

    rows = [{"n": n, "levels": [{"level": 0, "F_local": 0.1, "F_local_floor": 0.01, "G_local": 0.1,
                                 "dW_local": 0.2, "decorrelation_fwd": 0.3, "focus": 0.01, "broadness": 0.2}]}
            for n in (1024, 2048)]
    fig = plot_errors_against_n(rows)
    titles = " ".join(ax.get_title() for ax in fig.axes)
    labels = " ".join(ax.get_ylabel() for ax in fig.axes)
    assert "F_local" not in titles + labels and "decorrelation_fwd" not in titles + labels
    assert "F, one-step error" in titles and "decorrelation (forward: gate vs activation)" in titles


def test_docs_cli_says_the_demo_defaults():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    demo = {a.dest: a.default for a in sub.choices["demo"]._actions}
    text = " ".join((ROOT / "docs" / "cli.md").read_text().split())
    assert f"measured every `--eval-every` steps, {demo['eval_every']} by default" in text
    for option, dest in (("--readout", "readout"), ("--steps", "steps"), ("--lr", "lr"),
                         ("--eval-every", "eval_every")):
        assert f"`{option} {demo[dest]}`" in text, option


@pytest.mark.slow  # (two small end-to-end demos: about 40 s)
def test_demo_output_same_bytes_whatever_the_workers(tmp_path, capsys):
    from smaso.cli import main

    argv = ["demo", "-n", "2048", "--bayes-n", "50", "--steps", "4", "--eval-every", "2", "--eval-examples", "512",
            "--seeds", "3"]
    outs = []
    for w in (0, 2):
        assert main([*argv, "--workers", str(w), "--out", str(tmp_path / str(w))]) == 0
        text = capsys.readouterr().out
        outs.append(re.sub(r"\(\d+\.\d s in all\)|/\S+/\d/", "", text))

    def strip(v):  # every timing out, all else kept
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k not in ("seconds", "seed_workers")}
        return [strip(x) for x in v] if isinstance(v, list) else v

    a, b = (strip(json.loads((tmp_path / str(w) / "comparison.json").read_text())) for w in (0, 2))
    assert a.pop("student")["alignment"] and b.pop("student")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert outs[0] == outs[1]
    # with workers the errors against N are measured and drawn in the pool (issue 39: off the main process's
    # critical path): the same files byte for byte as drawn here
    for name in ("errors_vs_n.json", "errors_vs_n.png", "comparison.png", "alignment.png"):
        assert (tmp_path / "0" / name).read_bytes() == (tmp_path / "2" / name).read_bytes(), name
    # the demo's words: both accuracies said, the shuffled-label control named, no capitals verdict
    assert "two accuracies: the summary over seeds" in outs[0] and "shuffled-label control: the same student" in outs[0]
