"""Students as replicates (smaso.student.seeds): K seeds, each number the median and range over seeds and the last
checkpoints, within noise against the larger of the jackknife floor and the seeds' standard error."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from smaso.cli import main
from smaso.student.compare import compare_student
from smaso.student.seeds import CONDITION_KEYS, TERM_KEYS, compare_seeds, summarize_seeds
from teachers import Ladder, sample_ladder

KW = dict(width=4, readout=4, steps=8, lr=0.3, batch_size=64, eval_every=2, eval_examples=400, noise_groups=4)


@pytest.fixture(scope="module")
def data():
    lad = Ladder.random(depth=2, branching=2, events=3, mode="bottomup", seed=1, emission="gaussian", sigma=0.5)
    return sample_ladder(lad, 1200, 0)


def _run(values, floors, acc=0.5):
    """A fake run: one level whose ``F_propagated`` takes ``values`` (with ``floors``) at successive checkpoints."""
    return {"history": [{"step": i, "accuracy": acc, "loss": 1.0, "evaluation": "held-out",
                         "levels": [{"level": 0, "F_propagated": v, "F_propagated_floor": f}],
                         "leaves": {"focus": 0.0, "focus_floor": 0.0}}
                        for i, (v, f) in enumerate(zip(values, floors, strict=True))]}


def test_summary_is_median_range_floor_and_seed_error():
    runs = [_run([9.0, 0.10, 0.20, 0.30], [1, 0.01, 0.02, 0.03]), _run([9.0, 0.4, 0.5, 0.6], [1, 0.04, 0.05, 0.06])]
    s = summarize_seeds(runs, seeds=[3, 7], last=3)
    row = s.levels[0]
    values = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]  # (the first checkpoint of each run is not among the last 3)
    assert row["F_propagated"] == pytest.approx(statistics.median(values))
    assert (row["F_propagated_min"], row["F_propagated_max"]) == (0.1, 0.6)
    assert row["F_propagated_floor"] == pytest.approx(statistics.median([0.01, 0.02, 0.03, 0.04, 0.05, 0.06]))
    se = statistics.stdev([0.2, 0.5]) / math.sqrt(2)  # the seeds' means over their last checkpoints
    assert row["F_propagated_seed_se"] == pytest.approx(se)
    assert row["F_propagated"] > 2 * max(se, row["F_propagated_floor"]) and row["within_noise"] == []
    assert s.seeds == [3, 7] and s.steps == [[1, 2, 3], [1, 2, 3]] and s.evaluation == "held-out"
    assert s.leaves["within_noise"] == ["focus"]  # 0 is within any noise, round-off included
    # a median within 2x the larger of floor and seed error is within noise: here the seeds disagree
    noisy = summarize_seeds([_run([0.1, 0.1, 0.1], [1e-3] * 3), _run([0.5, 0.5, 0.5], [1e-3] * 3)], last=3)
    assert noisy.levels[0]["F_propagated_seed_se"] == pytest.approx(0.2)
    assert "F_propagated" in noisy.levels[0]["within_noise"]
    # one seed: the floor alone judges
    one = summarize_seeds([_run([0.1, 0.1], [0.06, 0.06])], last=2)
    assert one.levels[0]["F_propagated_seed_se"] == 0.0 and "F_propagated" in one.levels[0]["within_noise"]
    json.dumps(s.to_dict())


def test_compare_seeds_are_the_single_runs(data):
    summary, runs = compare_seeds(data, [0, 5], last=2, **KW)
    for seed, run in zip((0, 5), runs, strict=True):
        alone = compare_student(data, seed=seed, **KW)
        assert run["seed"] == seed and run["history"] == alone.history
    assert summary.seeds == [0, 5] and len(summary.levels) == len(runs[0]["history"][-1]["levels"])
    acc = [h["accuracy"] for r in runs for h in r["history"][-2:]]
    assert summary.accuracy["median"] == pytest.approx(statistics.median(acc))
    assert set(summary.levels[1]) >= {*TERM_KEYS, *(f"{k}_floor" for k in TERM_KEYS), *CONDITION_KEYS}
    text = summary.table()
    assert "over 2 student seeds [0, 5]" in text and text.count("\n") == 3 + 3 * len(summary.levels) + 2 + \
        len(summary.levels)
    # the first run given as a ComparisonResult: the same summary
    first = compare_student(data, seed=0, **KW)
    assert summarize_seeds([first, runs[1]], seeds=[0, 5], last=2).to_dict() == summary.to_dict()


def test_bad_seeds(data):
    for bad, err in ((0, ValueError), (True, TypeError), ([1, 1], ValueError), ([-1], ValueError), ([], ValueError)):
        with pytest.raises(err, match="seeds"):
            compare_seeds(data, bad, **KW)
    with pytest.raises(TypeError, match="'seed' is set by compare_seeds"):
        compare_seeds(data, 2, seed=3, **KW)
    with pytest.raises(ValueError, match="last"):
        summarize_seeds([_run([0.1], [0.1])], last=0)
    with pytest.raises(ValueError, match="one seed per run"):
        summarize_seeds([_run([0.1], [0.1])], seeds=[1, 2])
    with pytest.raises(ValueError, match="at least one checkpoint"):
        summarize_seeds([{"history": []}])
    deeper = _run([0.1], [0.1])
    deeper["history"][0]["levels"].append(deeper["history"][0]["levels"][0])
    with pytest.raises(ValueError, match="different numbers of levels"):
        summarize_seeds([_run([0.1], [0.1]), deeper])


def test_cli_compare_with_seeds(tmp_path, capsys):
    data = str(tmp_path / "d.npz")
    assert main(["sample", "ladder", "-n", "1500", "--depth", "2", "--out", data, "-q"]) == 0
    out = tmp_path / "out"
    assert main(["compare", data, "--steps", "6", "--eval-every", "2", "--eval-examples", "500", "--width", "4",
                 "--seeds", "2", "--noise-groups", "4", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "over 2 student seeds [0, 1] x the last 3 checkpoints" in text and "held-out acc" in text
    saved = json.loads((out / "comparison.json").read_text())
    assert saved["seeds"]["seeds"] == [0, 1] and saved["student"]["seeds"] == 2
    assert saved["history"][-1]["evaluation"] == "held-out"
    with pytest.raises(SystemExit) as exit_:
        main(["compare", data, "--eval-examples", "1500"])
    assert exit_.value.code == 2
    assert "--eval-examples: the 1500 held-out rows leave none" in capsys.readouterr().err
