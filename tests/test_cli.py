"""The `smaso` command line: help on every subcommand, sample/inspect round trips, clear errors."""

import json
import subprocess
import sys

import pytest
import torch

from smaso.cli import main
from teachers.dataset import load_dataset


@pytest.mark.parametrize("argv", [["--help"], ["demo", "--help"], ["sample", "--help"],
                                  ["sample", "ladder", "--help"], ["inspect", "--help"], ["spec", "--help"]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    assert "usage: smaso" in capsys.readouterr().out


def test_demo_prints_statistics(capsys, tmp_path):
    assert main(["demo", "-n", "20000", "--bayes-n", "300", "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "Bayes-optimal accuracy" in out and "all within bounds: True" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["n"] == 20000 and sum(report["label_counts"]) == 20000
    assert 0 < report["bayes_optimal"]["expected"] <= 1


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
