"""The `smaso` command line: help on every subcommand, sample/inspect round trips, clear errors."""

import json
import re
import subprocess
import sys

import pytest
import torch

from smaso.cli import main
from teachers.dataset import load_dataset


@pytest.mark.parametrize("argv", [["--help"], ["demo", "--help"], ["sample", "--help"],
                                  ["sample", "ladder", "--help"], ["inspect", "--help"], ["spec", "--help"],
                                  ["compare", "--help"]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    assert "usage: smaso" in capsys.readouterr().out


def _help(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse's line breaks as spaces


@pytest.mark.slow  # a whole demo run (about 3.5 s) (slow tier: default-tier budget)
def test_every_file_the_demo_writes_is_named_in_its_help(capsys, tmp_path):
    """Issue 27: the demo's --help names every file it writes into --out (errors_vs_n.* too)."""
    text = _help(capsys, ["demo"])
    out_dir = tmp_path / "demo"
    assert main(["demo", "-n", "2048", "--bayes-n", "100", "--steps", "2", "--eval-every", "1", "--eval-examples",
                 "512", "--seeds", "1", "--out", str(out_dir)]) == 0
    written = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*"))
    assert written == ["alignment.png", "comparison.json", "comparison.png", "errors_vs_n.json", "errors_vs_n.png"]
    assert [name for name in written if name not in text] == []


def test_sample_ladder_help_names_both_formats(capsys):
    """Issue 27: the default output is a chunked store; the help said ".npz dataset file" only."""
    text = _help(capsys, ["sample", "ladder"])
    assert "into a versioned .npz dataset file" not in text
    assert "a chunked store (format 2, e.g. data.zarr; any --out not ending in .npz)" in text
    assert "a .npz file (format 1) when --out ends in .npz" in text


def test_demo_runs_the_main_job(capsys, tmp_path):
    out_dir = tmp_path / "demo"
    assert main(["demo", "-n", "6000", "--bayes-n", "300", "--steps", "30", "--eval-every", "10",
                 "--eval-examples", "2000", "--seeds", "2", "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert "Bayes-optimal accuracy" in out and "all within bounds: True" in out
    assert "decorr. fwd" in out and "recursion" in out and "one step" in out
    assert "the paper's summarization ladder" in out
    assert re.search(r"Bayes-optimal accuracy of the teacher \(exact posterior of x\) +1\.0000", out)
    # the ceilings beside Bayes: the linear top's cap (0.873) and the readout's (Bayes), the student's held-out rows
    assert re.search(r"linear top \(additive\) +0\.873\d", out) and re.search(r"readout >= 16 nodes +1\.0000", out)
    assert "held-out rows" in out and "event alignment of the hidden nodes" in out and "shuffled labels" in out
    # every number comes with its noise floor, and the one-step errors with their two parts
    assert re.search(r"\[\de-\d\d\]", out) and "within noise" in out and "part: decorrelation" in out
    thm3 = float(re.search(r"largest relative error ([0-9.e+-]+)", out).group(1))
    assert thm3 < 1e-9
    report = json.loads((out_dir / "comparison.json").read_text())
    assert report["ladder_report"]["n"] == 6000 and sum(report["ladder_report"]["label_counts"]) == 6000
    assert [h["step"] for h in report["history"]] == [0, 10, 20, 30]
    assert report["student"]["readout"] == 32 and report["accuracy"]["ceiling_of_this_student"] == 1.0
    assert abs(report["accuracy"]["ceiling_linear_top"] - 0.8734) < 1e-4
    assert report["accuracy"]["ceiling_linear_top_certified"] is True  # issue 36: proven, lower = upper bound
    assert 0 <= report["accuracy"]["held_out_accuracy"] <= 1 and report["accuracy"]["held_out_rows"] == 10_000
    assert [r["level"] for r in report["history"][-1]["alignment"]] == [0, 1, 2, 3]
    assert len(report["alignment_control_shuffled_labels"]) == 4
    # the reformulation over seeds, one value per seed, beside the same seeds at step 0 and on shuffled labels
    seeds = report["seeds"]
    assert seeds["seeds"] == [0, 1] and set(seeds["controls"]) == {"init", "shuffled"}
    assert seeds["controls"]["init"]["steps"] == [[0], [0]]
    assert seeds["controls"]["shuffled"]["steps"] == [[10, 20, 30]] * 2
    assert len(seeds["levels"][2]["per_seed"]["F_local_decorrelation"]) == 2
    assert "trained vs controls" in out and "init (step 0)" in out and "0 (identity)" in out
    last = report["history"][-1]
    assert last["noise_groups"] == 10 and all("F_local_floor" in r and "within_noise" in r for r in last["levels"])
    assert report["thm3_fully_informative_max_error"] == thm3 or abs(report["thm3_fully_informative_max_error"]
                                                                     - thm3) < 1e-10
    assert (out_dir / "comparison.png").stat().st_size > 10_000
    by_n = json.loads((out_dir / "errors_vs_n.json").read_text())
    assert [r["n"] for r in by_n] == [1024, 2048, 4096] and (out_dir / "errors_vs_n.png").stat().st_size > 10_000


def test_compare_on_a_dataset_file(tmp_path, capsys):
    data = tmp_path / "fi.npz"
    assert main(["sample", "ladder", "-n", "3000", "--kind", "fully_informative", "--depth", "2", "--events", "2",
                 "--concentration", "1", "--out", str(data)]) == 0
    assert main(["compare", str(data), "--width", "3", "--readout", "0", "--bn", "--steps", "20", "--eval-every", "10",
                 "--eval-examples", "1000", "--out", str(tmp_path / "cmp")]) == 0  # (Thm 3's student: no readout)
    out = capsys.readouterr().out
    assert "Thm 2's conditions, measured" in out
    # Thm 3: fully informative + one-hot leaves -> every reformulation error ~ 0, with BN too
    report = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    levels = report["history"][-1]["levels"]
    errors = [v for r in levels for k, v in r.items() if isinstance(v, float) and not k.endswith("_floor")]
    assert len(levels) == 2 and len(errors) >= 2 * 11 and max(errors) < 1e-9
    assert all("dW_local" in r["within_noise"] for r in levels)
    # BN at level 1: its one-step F and G~ pass through Eq 12, whose floors are over-estimates
    assert {"F_local", "G_local"} <= set(levels[0]["within_noise"]) and "F_local" not in levels[1]["within_noise"]
    assert set(levels[1]["floor_over_estimated"]) >= {"F_local", "G_local", "F_propagated"}


def test_compare_rejects_a_student_of_another_shape(tmp_path):
    data = tmp_path / "d.npz"
    assert main(["sample", "ladder", "-n", "100", "--out", str(data)]) == 0
    with pytest.raises(SystemExit) as e:
        main(["compare", str(data), "--width", "3,4,5", "--steps", "1"])
    assert e.value.code == 2


def test_sample_inspect_round_trip(tmp_path, capsys):
    out = tmp_path / "d.npz"
    assert main(["sample", "ladder", "-n", "6000", "--seed", "4", "--depth", "2", "--branching", "3",
                 "--events", "3,4,5", "--emission", "gaussian", "--sigma", "0.5", "--out", str(out)]) == 0
    s = load_dataset(out)
    assert len(s) == 6000 and s.x.shape == (6000, 9, 5) and s.ladder.events == (3, 4, 5)
    assert main(["inspect", str(out), "--bayes-n", "500"]) == 0
    text = capsys.readouterr().out
    assert "6000 examples" in text and "Bayes-optimal accuracy" in text


def test_cli_shards_equal_full_run(tmp_path):
    common = ["sample", "ladder", "-n", "9000", "--seed", "1", "--kind", "fully_informative", "--depth", "2",
              "--branching", "2", "--events", "3"]
    assert main([*common, "--out", str(tmp_path / "full.npz")]) == 0
    for i in range(3):
        assert main([*common, "--shard", f"{i}/3", "--chunk-size", "5000", "--out", str(tmp_path / f"s{i}.npz")]) == 0
    full = load_dataset(tmp_path / "full.npz")
    joined = load_dataset([tmp_path / f"s{i}.npz" for i in range(3)])
    assert torch.equal(full.z, joined.z)


def test_spec_then_sample(tmp_path):
    spec = tmp_path / "l.json"
    assert main(["spec", "--kind", "factorized_binary", "--depth", "2", "--factors", "1,2,4", "--out", str(spec)]) == 0
    assert main(["sample", "ladder", "--spec", str(spec), "-n", "100", "--out", str(tmp_path / "d.npz")]) == 0
    assert load_dataset(tmp_path / "d.npz").ladder.events == (2, 4, 16)


@pytest.mark.parametrize("argv,match", [
    (["sample", "ladder", "-n", "0", "--out", "X"], "expected a positive integer"),
    (["sample", "ladder", "-n", "10", "--seed", "-1", "--out", "X"], "non-negative integer"),
    (["sample", "ladder", "-n", "10", "--shard", "3/2", "--out", "X"], "shard: expected 0 <= i < n"),
    (["sample", "ladder", "-n", "10", "--emission", "gaussian", "--sigma", "0", "--out", "X"], "sigma"),
    (["sample", "ladder", "-n", "10", "--events", "1,4,4,4", "--out", "X"], "events"),
    (["sample", "ladder", "-n", "10", "--spec", "missing.json", "--out", "X"], "no such file"),
    (["inspect", "missing.npz"], "no such file"),
])
def test_bad_input_exits_2_and_writes_nothing(argv, match, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert match in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_console_script_installed():
    r = subprocess.run([sys.executable, "-m", "smaso.cli", "sample", "ladder", "--help"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "--shard" in r.stdout


def test_chunked_store_round_trip_sample_inspect_compare(capsys, tmp_path):
    """Format 2 at the command line: a store written chunk by chunk, shards that open as one, the same
    inspect report as the .npz of the same rows, and compare streaming over the store."""
    common = ["--depth", "2", "--branching", "2", "--events", "3", "-n", "9000", "--seed", "2"]
    store, npz = tmp_path / "d.zarr", tmp_path / "d.npz"
    assert main(["sample", "ladder", *common, "--out", str(store), "--chunk-rows", "4096", "--no-progress"]) == 0
    assert main(["sample", "ladder", *common, "--out", str(npz), "--no-progress"]) == 0
    parts = [tmp_path / f"p{i}.zarr" for i in range(2)]
    for i, p in enumerate(parts):
        assert main(["sample", "ladder", *common, "--out", str(p), "--shard", f"{i}/2", "--chunk-rows", "4096",
                     "--no-progress"]) == 0
    capsys.readouterr()
    reports = []
    for files in ([store], [npz], parts):
        out = tmp_path / "r.json"
        assert main(["inspect", *map(str, files), "--bayes-n", "200", "--json", str(out), "--no-progress"]) == 0
        reports.append(json.loads(out.read_text()))
    for r in reports[1:]:
        assert r["label_counts"] == reports[0]["label_counts"] and r["statistics"] == reports[0]["statistics"]
        assert r["bayes_optimal"] == reports[0]["bayes_optimal"]
    assert sum(reports[0]["label_counts"]) == 9000
    assert torch.equal(load_dataset(store).to_sample().z, load_dataset(npz).z)
    assert main(["compare", str(store), "--width", "3", "--steps", "6", "--eval-every", "3", "--eval-examples",
                 "1000", "--out", str(tmp_path / "cmp")]) == 0
    assert (tmp_path / "cmp" / "comparison.json").is_file()


def test_engine_options_are_checked(capsys, tmp_path):
    base = ["sample", "ladder", "--depth", "2", "--branching", "2", "--events", "3", "-n", "100"]
    with pytest.raises(SystemExit) as e:
        main([*base, "--out", str(tmp_path / "a.zarr"), "--workers", "2"])
    assert e.value.code == 2 and "apply to --engine dask only" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main([*base, "--out", str(tmp_path / "a.npz"), "--engine", "dask"])
    assert e.value.code == 2 and "one process" in capsys.readouterr().err
    for extra, expect in ((["--scheduler-timeout", "3"], "--scheduler/--scheduler-timeout/--workers: they apply to "
                                                          "--engine dask only"),
                          (["--engine", "dask", "--scheduler-timeout", "0"],
                           "--scheduler-timeout: expected a positive number of seconds, got 0.0"),
                          (["--engine", "dask", "--scheduler-timeout", "inf"],
                           "--scheduler-timeout: expected a positive number of seconds, got inf")):
        with pytest.raises(SystemExit) as e:
            main([*base, "--out", str(tmp_path / "a.zarr"), *extra])
        out, err = capsys.readouterr()
        assert e.value.code == 2 and out == "" and err == f"smaso: error: {expect}\n"  # refused before any output
    assert not (tmp_path / "a.zarr").exists()


@pytest.mark.slow  # a whole demo run (about 3 s) (slow tier: default-tier budget)
def test_demo_with_bn_before_the_gate_and_cross_entropy(tmp_path, capsys):
    assert main(["demo", "-n", "3000", "--bayes-n", "200", "--steps", "10", "--eval-every", "10", "--eval-examples",
                 "1000", "--bn", "before", "--loss", "cross_entropy", "--noise-groups", "0", "--seeds", "1",
                 "--out", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "BN before the gate" in out and "Eq 7 (softmax" in out and "[" not in out.split("Thm 2's")[1][:200]
    report = json.loads((tmp_path / "d" / "comparison.json").read_text())
    assert report["history"][-1]["eq7"]["holds"] and "noise_groups" not in report["history"][-1]
    assert not (tmp_path / "d" / "errors_vs_n.png").exists()  # no floors asked for: no floor figure
