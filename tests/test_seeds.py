"""Students as replicates (smaso.student.seeds): one value per seed (its last checkpoints averaged first), the median,
range and an order-statistic interval over seeds with its exact coverage, within noise against the larger of the
jackknife floor and the seeds' standard error, undefined values counted with their reasons, the init and
shuffled-label controls, identities apart."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

import pytest

from smaso.cli import build_parser, main
from smaso.student.compare import compare_student
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.seeds import (
    CONDITION_KEYS,
    INTERVAL_LEVEL,
    TERM_KEYS,
    compare_seeds,
    median_interval,
    order_statistic_coverage,
    summarize_seeds,
)
from teachers import Ladder, sample_ladder

STUDENT = StudentConfig(width=4, readout=4)
TRAINING = TrainingConfig(steps=8, lr=0.3, batch_size=64)
EVALUATION = EvaluationConfig(eval_every=2, eval_examples=400, noise_groups=4)
KW = dict(student=STUDENT, training=TRAINING, evaluation=EVALUATION)


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


def test_summary_is_one_value_per_seed_then_median_range_floor_and_seed_error():
    runs = [_run([9.0, 0.10, 0.20, 0.30], [1, 0.01, 0.02, 0.03]), _run([9.0, 0.4, 0.5, 0.6], [1, 0.04, 0.05, 0.06]),
            _run([9.0, 0.9, 0.9, 0.9], [1, 0.1, 0.1, 0.1])]
    s = summarize_seeds(runs, seeds=[3, 7, 8], last=3)
    row = s.levels[0]
    means = [0.2, 0.5, 0.9]  # each seed's last 3 checkpoints averaged first (the first one is not among them)
    assert row["per_seed"]["F_propagated"] == pytest.approx(means)
    assert row["F_propagated"] == pytest.approx(0.5)
    assert (row["F_propagated_min"], row["F_propagated_max"]) == pytest.approx((0.2, 0.9))
    assert row["F_propagated_interval"] == pytest.approx([0.2, 0.9]) and row["F_propagated_coverage"] == 0.75
    assert row["per_seed"]["F_propagated_floor"] == pytest.approx([0.02, 0.05, 0.1])
    assert row["F_propagated_floor"] == pytest.approx(0.05)
    se = statistics.stdev(means) / math.sqrt(3)
    assert row["F_propagated_seed_se"] == pytest.approx(se)
    assert row["F_propagated"] > 2 * max(se, row["F_propagated_floor"]) and row["within_noise"] == []
    assert s.seeds == [3, 7, 8] and s.steps == [[1, 2, 3]] * 3 and s.evaluation == "held-out"
    assert s.accuracy["per_seed"] == [0.5] * 3 and s.accuracy["median"] == 0.5
    assert s.leaves["within_noise"] == ["focus"]  # 0 is within any noise, round-off included
    # the init control: every run's step 0
    assert s.controls["init"]["levels"][0]["per_seed"]["F_propagated"] == [9.0] * 3
    assert s.controls["init"]["steps"] == [[0]] * 3 and "shuffled" not in s.controls
    # a median within 2x the larger of floor and seed error is within noise: here the seeds disagree
    noisy = summarize_seeds([_run([0.1, 0.1, 0.1], [1e-3] * 3), _run([0.5, 0.5, 0.5], [1e-3] * 3)], last=3)
    assert noisy.levels[0]["F_propagated_seed_se"] == pytest.approx(0.2)
    assert "F_propagated" in noisy.levels[0]["within_noise"]
    # one seed: the floor alone judges, and there is no interval
    one = summarize_seeds([_run([0.1, 0.1], [0.06, 0.06])], last=2)
    assert one.levels[0]["F_propagated_seed_se"] == 0.0 and "F_propagated" in one.levels[0]["within_noise"]
    assert one.levels[0]["F_propagated_interval"] is None and "one seed: no interval" in one.table()
    json.dumps(s.to_dict(), allow_nan=False)
    assert "covers the median over seeds with probability 75.00% (order statistics, K = 3)" in s.table()


def test_a_seed_counts_once_however_many_checkpoints_it_has():
    """Checkpoints of one run are not replicates: a seed with 5 identical checkpoints weighs as much as a seed with
    one.  (Pooling the checkpoints gave the median 0.1 of [0.1 x 5, 0.5, 0.9] and a range over checkpoints.)"""
    runs = [_run([0.1] * 5, [0.01] * 5), _run([0.5], [0.01]), _run([0.9], [0.01])]
    row = summarize_seeds(runs, last=5).levels[0]
    assert row["F_propagated"] == pytest.approx(0.5)
    assert row["per_seed"]["F_propagated"] == pytest.approx([0.1, 0.5, 0.9])
    # within noise is decided on the per-seed values: the seeds' standard error of [0.1, 0.5, 0.9], not of 7 values
    assert row["F_propagated_seed_se"] == pytest.approx(statistics.stdev([0.1, 0.5, 0.9]) / math.sqrt(3))


@pytest.mark.parametrize("k", range(2, 16))
def test_order_statistic_coverage_is_the_binomial_one(k):
    """1 - 2 P(Bin(k, 1/2) <= j - 1), against scipy's binomial, and the interval picks the narrowest j reaching 95%."""
    binom = pytest.importorskip("scipy.stats").binom
    for j in range(1, (k + 1) // 2 + 1):
        assert order_statistic_coverage(k, j) == pytest.approx(1 - 2 * binom.cdf(j - 1, k, 0.5), abs=1e-14)
    lo, hi, cov = median_interval(list(range(k)))  # the values 0..k-1: the interval's ranks (0-based)
    lo, hi = int(lo), int(hi)
    j = lo + 1
    assert hi == k - j and cov == order_statistic_coverage(k, j)
    assert cov >= INTERVAL_LEVEL or j == 1
    assert j == (k + 1) // 2 or order_statistic_coverage(k, j + 1) < INTERVAL_LEVEL
    assert order_statistic_coverage(5, 1) == 1 - 2 / 2**5 == 0.9375


@pytest.mark.parametrize(("k", "coverage"), [(5, 0.9375), (3, 0.75), (9, 1 - 2 * 10 / 2**9), (12, 1 - 2 * 79 / 2**12)])
def test_median_interval_covers_the_median_as_stated(k, coverage):
    """Coverage by simulation: K draws of a skewed law of known median (lognormal, median 1), 20 000 repeats
    (fixed seed); the fraction of intervals holding 1 agrees with the exact coverage within 4 binomial standard
    errors of a fraction (about 0.007)."""
    np = pytest.importorskip("numpy")
    trials = 20_000
    draws = np.sort(np.exp(np.random.default_rng(36 + k).normal(size=(trials, k))), axis=1)
    lo, hi, cov = median_interval(list(range(k)))  # the ranks (0-based) the interval takes for K values
    lo, hi = int(lo), int(hi)
    assert cov == pytest.approx(coverage, abs=1e-15)
    hit = float(np.mean((draws[:, lo] <= 1.0) & (draws[:, hi] >= 1.0)))
    assert abs(hit - coverage) <= 4 * math.sqrt(coverage * (1 - coverage) / trials)
    # the interval of one repeat's values is those order statistics
    got = median_interval(draws[0].tolist())
    assert got[:2] == (draws[0, lo], draws[0, hi])


def test_bad_interval_arguments():
    for k, j in ((3, 0), (3, 3), (True, 1), (4, 1.0)):
        with pytest.raises(ValueError, match="k, j"):
            order_statistic_coverage(k, j)
    for level in (0, 1, 1.5, True):
        with pytest.raises(ValueError, match="level"):
            median_interval([1.0, 2.0], level)
    with pytest.raises(ValueError, match="finite"):
        median_interval([1.0, math.nan])
    assert median_interval([3.0]) is None


def test_an_undefined_value_is_counted_with_its_reason_never_dropped():
    """The diagnosis' contract: an undefined statistic is NaN (JSON null after a round trip) with
    ``row["undefined"][key]`` its reason.  The seed's value is then undefined, the summary says in how many seeds
    and why, the median is over the other seeds, and the table prints n/a with a numbered note."""
    dead = "level 0: all 8 nodes dead over 8192 rows"
    runs = [_run([0.2, 0.2], [0.01, 0.01]), _run([0.4, 0.4], [0.01, 0.01]), _run([0.3, 0.3], [0.01, 0.01])]
    bad = runs[1]["history"][-1]["levels"][0]
    bad["F_propagated"], bad["undefined"] = math.nan, {"F_propagated": dead}
    none = runs[2]["history"][-1]["levels"][0]  # as read back from JSON: null
    none["F_propagated"], none["undefined"] = None, {"F_propagated": dead}
    s = summarize_seeds(runs, seeds=[0, 1, 2], last=2)
    row = s.levels[0]
    assert row["per_seed"]["F_propagated"] == [pytest.approx(0.2), None, None]
    assert row["undefined"]["F_propagated"] == {"seeds": [1, 2], "of": 3, "reasons": [dead, dead]}
    assert row["F_propagated"] == pytest.approx(0.2) and "F_propagated" not in row["within_noise"]
    text = s.table()
    assert f"(1) F_propagated at level 0, trained: undefined in 2 of 3 seeds (seed 1: {dead}; seed 2: {dead})" in text
    # undefined in every seed: n/a (NaN in memory, null in the JSON), never 0
    for r in runs:
        r["history"][-1]["levels"][0].update(F_propagated=math.nan, undefined={"F_propagated": dead})
    row = summarize_seeds(runs, last=2).levels[0]
    assert math.isnan(row["F_propagated"]) and row["per_seed"]["F_propagated"] == [None] * 3
    assert row["undefined"]["F_propagated"]["seeds"] == [0, 1, 2]
    table = summarize_seeds(runs, last=2).table()
    assert "n/a (1)" in table and "undefined in 3 of 3 seeds" in table
    # an infinite value without a reason is undefined too, and says so
    runs[0]["history"][-1]["levels"][0].update(F_propagated=math.inf, undefined={})
    assert summarize_seeds(runs, last=2).levels[0]["undefined"]["F_propagated"]["reasons"][0] == "infinite"


def _arm_run(rows, steps=None):
    """A fake run whose checkpoints have one level with the given rows (and accuracy 0.5)."""
    steps = list(range(len(rows))) if steps is None else steps
    return {"history": [{"step": st, "accuracy": 0.5, "loss": 1.0, "levels": [{"level": 0, **r}],
                         "leaves": {"focus": 0.0}} for st, r in zip(steps, rows, strict=True)]}


def test_controls_and_identities():
    """Trained, init (step 0) and shuffled-label control side by side; a number at round-off in every row of every
    arm is an identity (it holds for any weights), and a one-step error whose other part is such a 0 equals its
    part; a number at round-off only after training is not."""
    def row(f_loc, focus, decor, g=1e-15):
        return {"F_local": f_loc, "F_local_focus": focus, "F_local_decorrelation": decor, "G_propagated": g}

    trained = [_arm_run([row(0.7, 1e-16, 0.7), row(0.6, 2e-16, 0.6), row(0.6, 1e-16, 0.6)]),
               _arm_run([row(0.7, 1e-16, 0.7), row(0.5, 1e-16, 0.5), row(0.5, 3e-16, 0.5)])]
    # at step 0 G_propagated is not 0: it is not an identity, however small after training
    trained[0]["history"][0]["levels"][0]["G_propagated"] = 0.3
    shuffled = [_arm_run([row(0.7, 1e-16, 0.7), row(0.9, 1e-16, 0.9)]), _arm_run([row(0.7, 1e-16, 0.7)] * 2)]
    s = summarize_seeds(trained, last=2, shuffled=shuffled)
    assert set(s.controls) == {"init", "shuffled"}
    lv, init, shuf = s.levels[0], s.controls["init"]["levels"][0], s.controls["shuffled"]["levels"][0]
    assert lv["identity"] == {"F_local_focus": "0", "F_local": "F_local_decorrelation"} == init["identity"]
    assert lv["per_seed"]["F_local"] == pytest.approx([0.6, 0.5]) and init["per_seed"]["F_local"] == [0.7, 0.7]
    assert shuf["per_seed"]["F_local"] == pytest.approx([0.8, 0.7]) and shuf["F_local"] == pytest.approx(0.75)
    assert "G_propagated" not in lv["identity"] and "G_propagated" in lv["within_noise"]
    text = s.table()
    assert "init (step 0)" in text and "shuffled labels" in text and "0 (identity)" in text
    assert "identity: F one step = its decorrelation part" in text
    # without a control nothing is called an identity: training alone may have driven it to 0
    alone = summarize_seeds([{"history": h["history"][1:]} for h in trained], last=2)
    assert "identity" not in alone.levels[0] and "init" not in alone.controls
    with pytest.raises(ValueError, match="one control run per seed"):
        summarize_seeds(trained, shuffled=shuffled[:1])


def test_the_split_is_checked_in_every_row():
    """|one step - one part| <= the other part in every row (the split is exact), or the summary does not say so."""
    def r(q, a, b):
        return {"F_local": q, "F_local_focus": a, "F_local_decorrelation": b}

    ok = [_arm_run([r(0.6, 0.01, 0.605), r(0.5, 0.02, 0.49)])]
    assert summarize_seeds(ok, last=1).levels[0]["split_holds"] == ["F_local"]
    broken = [_arm_run([r(0.6, 0.01, 0.605), r(0.5, 0.02, 0.3)])]
    assert "split_holds" not in summarize_seeds(broken, last=1).levels[0]


def test_compare_seeds_are_the_single_runs(data):
    summary, runs = compare_seeds(data, [0, 5], last=2, shuffled=True, **KW)
    for seed, run in zip((0, 5), runs, strict=True):
        alone = compare_student(data, STUDENT, dataclasses.replace(TRAINING, seed=seed), EVALUATION)
        assert run["seed"] == seed and run["history"] == alone.history
        control = compare_student(data, STUDENT, dataclasses.replace(TRAINING, seed=seed, shuffle_labels=True),
                                  dataclasses.replace(EVALUATION, alignment=False))
        assert run["shuffled"]["history"] == control.history
    assert summary.seeds == [0, 5] and len(summary.levels) == len(runs[0]["history"][-1]["levels"])
    acc = [statistics.fmean(h["accuracy"] for h in r["history"][-2:]) for r in runs]
    assert summary.accuracy["per_seed"] == pytest.approx(acc)
    assert summary.accuracy["median"] == pytest.approx(statistics.median(acc))
    assert summary.controls["init"]["accuracy"]["per_seed"] == [r["history"][0]["accuracy"] for r in runs]
    assert summary.controls["shuffled"]["accuracy"]["per_seed"] == pytest.approx(
        [statistics.fmean(h["accuracy"] for h in r["shuffled"]["history"][-2:]) for r in runs])
    assert set(summary.levels[1]) >= {*TERM_KEYS, *(f"{k}_floor" for k in TERM_KEYS), *CONDITION_KEYS}
    text = summary.table()
    assert "over 2 student seeds [0, 5]" in text and "shuffled labels" in text
    assert sum(line[9:].lstrip().startswith(("F one step ", "G~ one step ", "dW one step "))
               for line in text.splitlines()) == 3 * len(summary.levels)
    # the first run given as a ComparisonResult: the same summary
    first = compare_student(data, STUDENT, dataclasses.replace(TRAINING, seed=0), EVALUATION)
    assert summarize_seeds([first, runs[1]], seeds=[0, 5], last=2).to_dict() == \
        summarize_seeds(runs, seeds=[0, 5], last=2).to_dict()


def test_bad_seeds(data):
    for bad, err in ((0, ValueError), (True, TypeError), ([1, 1], ValueError), ([-1], ValueError), ([], ValueError)):
        with pytest.raises(err, match="seeds"):
            compare_seeds(data, bad, **KW)
    with pytest.raises(TypeError, match="'seed' is set by compare_seeds"):
        compare_seeds(data, 2, seed=3, **KW)
    with pytest.raises(TypeError, match="'shuffle_labels' is set by compare_seeds"):
        compare_seeds(data, 2, shuffle_labels=True, **KW)
    with pytest.raises(TypeError, match="'shuffle_labels' is set by compare_seeds"):
        compare_seeds(data, 2, **{**KW, "training": dataclasses.replace(TRAINING, shuffle_labels=True)})
    with pytest.raises(TypeError, match="shuffled: expected a bool"):
        compare_seeds(data, 2, shuffled="yes", **KW)
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


@pytest.mark.slow  # three seeds through the CLI (about 3 s) (slow tier: default-tier budget)
def test_cli_compare_with_seeds(tmp_path, capsys):
    data = str(tmp_path / "d.npz")
    assert main(["sample", "ladder", "-n", "1500", "--depth", "2", "--out", data, "-q"]) == 0
    out = tmp_path / "out"
    assert main(["compare", data, "--steps", "6", "--eval-every", "2", "--eval-examples", "500", "--width", "4",
                 "--seeds", "2", "--noise-groups", "4", "--shuffled-control", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "over 2 student seeds [0, 1]: each seed's value is the mean over its last 3 checkpoints" in text
    assert "held-out acc" in text
    saved = json.loads((out / "comparison.json").read_text())
    assert saved["seeds"]["seeds"] == [0, 1] and saved["student"]["seeds"] == 2
    assert set(saved["seeds"]["controls"]) == {"init", "shuffled"} and "shuffled labels" in text
    # the demo's replicates: at least 5 seeds by default, with both controls
    assert build_parser().parse_args(["demo"]).seeds == 5
    assert saved["history"][-1]["evaluation"] == "held-out"
    with pytest.raises(SystemExit) as exit_:
        main(["compare", data, "--eval-examples", "1500"])
    assert exit_.value.code == 2
    assert "--eval-examples: the 1500 held-out rows leave none" in capsys.readouterr().err


def test_the_interval_of_many_seeds_names_its_order_statistics_in_words():
    """With 9 or more seeds the interval is between inner order statistics; the table printed them as floats
    ("the 2.0th and 8.0th of the 9 seeds' values")."""
    runs = [_run([float(i), float(i)], [1e-3, 1e-3]) for i in range(9)]
    text = summarize_seeds(runs, last=1).table()
    lo, hi, _ = median_interval(range(9))
    assert (lo, hi) == (1, 7)
    assert "the 2nd and 8th of the 9 seeds' values" in text and ".0th" not in text
    from smaso.student.seeds import _ordinal

    assert [_ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"]
