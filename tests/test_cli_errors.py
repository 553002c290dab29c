"""The CLI's error boundary (issue 14): every failure a user can cause is one ``smaso: error:`` line and exit
status 2, checked before any work where it can be; ``--debug`` shows the traceback; training stops at the first
non-finite loss, naming the step."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from smaso.cli import main
from smaso.student.compare import TrainingDiverged, compare_student
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from teachers import Ladder, sample_ladder

ROOT = Path(__file__).resolve().parents[1]


def _error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("smaso: error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("argv, expect", [
    (["sample", "ladder", "-n", "10", "--device", "blah", "--out", "{tmp}/a.zarr"], "--device: expected"),
    (["sample", "ladder", "-n", "10", "--device", "meta", "--out", "{tmp}/a.zarr"], "--device: expected 'cpu'"),
    (["sample", "ladder", "-n", "1e12", "--out", "{tmp}/a.npz"], "-n: 1,000,000,000,000 examples held in memory"),
    (["sample", "ladder", "-n", "1e13", "--out", "{tmp}/a.zarr"], "-n: 10,000,000,000,000 examples need at least"),
    (["demo", "-n", "1e11", "--out", "{tmp}/d"], "write a .zarr store instead"),
    (["demo", "--out", "{tmp}/file"], "exists and is not a directory"),
    (["demo", "-n", "2000", "--lr", "nan", "--out", "{tmp}/d"], "lr: expected a finite number > 0"),
    (["demo", "-n", "2000", "--weight-decay", "-1", "--out", "{tmp}/d"], "--weight-decay: expected a finite"),
    (["demo", "-n", "2000", "--lr", "1e6", "--steps", "60", "--out", "{tmp}/d"], "the run diverged"),
])
def test_bad_requests_are_one_line_before_any_work(tmp_path, capsys, argv, expect):
    (tmp_path / "file").write_text("x")
    err = _error(capsys, [a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert expect in err, err
    assert not list(tmp_path.glob("a.*")) and not (tmp_path / "d" / "comparison.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_on_a_cpu_machine_and_debug_shows_the_traceback(tmp_path, capsys):
    argv = ["sample", "ladder", "-n", "10", "--device", "cuda", "--out", str(tmp_path / "a.zarr")]
    assert "no CUDA device" in _error(capsys, argv)
    with pytest.raises(ValueError, match="no CUDA device"):
        main([*argv, "--debug"])
    with pytest.raises(ValueError, match="no CUDA device"):
        main(["--debug", *argv])


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_unwritable_out_is_refused_before_sampling(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert "permission denied" in _error(capsys, ["sample", "ladder", "-n", "10", "--out", str(locked / "a.zarr")])


@pytest.mark.slow  # a command in a fresh process (about 2.5 s) (slow tier: default-tier budget)
def test_a_full_disk_is_one_line(tmp_path):
    # a file-size limit of 64 KiB: the store's first chunk cannot be written (EFBIG), nothing is left behind
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536)); "
            "import signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "from smaso.cli import main; sys.exit(main(sys.argv[1:]))")
    out = subprocess.run([sys.executable, "-c", code, "sample", "ladder", "-n", "200000", "--compress", "none",
                          "--out", str(tmp_path / "big.zarr")], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("smaso: error: cannot write") and "Traceback" not in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_training_stops_at_the_first_non_finite_loss():
    s = sample_ladder(Ladder.default(), 2000, seed=0)
    with pytest.raises(TrainingDiverged, match=r"step \d+: the training loss is .* the run diverged"):
        compare_student(s, student=StudentConfig(width=8), training=TrainingConfig(lr=1e6, steps=100),
                        evaluation=EvaluationConfig(held_out=False, eval_every=50))
    for name, bad in (("lr", {"lr": float("inf")}), ("lr", {"lr": 0}),
                      ("weight_decay", {"weight_decay": float("nan")})):
        with pytest.raises(ValueError, match=name):
            compare_student(s, training=TrainingConfig(steps=1, **bad))
    with pytest.raises(ValueError, match="bn_eps"):
        compare_student(s, StudentConfig(bn_eps=-1e-5), TrainingConfig(steps=1))


def test_map_routines_and_the_tent_sampler_refuse_what_they_cannot_represent(capsys, tmp_path):
    from inference.factorial import factorized_map
    from inference.vq import vq_map
    from smaso.splines.maso import hard_regions
    from teachers.tent import MAX_SAMPLE_K, sample_tent

    A = torch.randn(2, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    B = torch.zeros(2, 3, dtype=torch.float64)
    x = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    x[3, 1] = float("nan")
    for fn in (vq_map, hard_regions, factorized_map):
        with pytest.raises(ValueError, match=r"x: expected finite values, got nan at index \[3, 1\]"):
            fn(A, B, x)
    A[0, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="A: expected finite"):
        hard_regions(A, B, torch.zeros(2, 4, dtype=torch.float64))
    assert len(sample_tent(10, MAX_SAMPLE_K)) == 10
    with pytest.raises(ValueError, match="k: at most 40"):
        sample_tent(10, MAX_SAMPLE_K + 1)
    assert "k: at most 40" in _error(capsys, ["sample", "tent", "-n", "10", "--k", "60", "--out",
                                              str(tmp_path / "t.npz")])


def test_json_outputs_hold_no_nan():
    import json

    from smaso.output import json_safe as _json_safe

    obj = {"a": float("nan"), "b": [1.0, float("inf"), {"c": -float("inf")}], "t": torch.tensor([0.5, float("nan")])}
    assert json.loads(json.dumps(_json_safe(obj), allow_nan=False)) == {"a": None, "b": [1.0, None, {"c": None}],
                                                                        "t": [0.5, None]}


def test_an_incomplete_shard_set_needs_partial(tmp_path, capsys):
    shard = str(tmp_path / "s0.zarr")
    assert main(["sample", "ladder", "-n", "4000", "--depth", "2", "--shard", "0/2", "--out", shard]) == 0
    capsys.readouterr()
    assert "--partial" in _error(capsys, ["inspect", shard, "--bayes-n", "100"])
    assert main(["inspect", shard, "--bayes-n", "100", "--partial"]) == 0


@pytest.mark.parametrize("extra, expect", [(["--sigma", "0.3"], "--sigma: only applies with --emission gaussian"),
                                           (["--emission", "gaussian"], "--sigma: required with --emission gaussian")])
def test_sigma_must_match_the_emission(tmp_path, capsys, extra, expect):
    assert expect in _error(capsys, ["sample", "ladder", "-n", "10", *extra, "--out", str(tmp_path / "a.zarr")])


def test_offsets_must_be_finite_and_a_finite_but_exploding_loss_stops_training():
    from inference.vq import vq_map
    from smaso.splines.maso import hard_regions

    A = torch.randn(2, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    B = torch.zeros(2, 3, dtype=torch.float64)
    B[1, 2] = float("nan")
    x = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for fn in (vq_map, hard_regions):
        with pytest.raises(ValueError, match=r"B: expected finite values, got nan at index \[1, 2\]"):
            fn(A, B, x)
    # float64 keeps an exploding run finite for many steps: it is stopped once the loss is 1e8 times its start
    s = sample_ladder(Ladder.default(), 2000, seed=0)
    with pytest.raises(TrainingDiverged, match=r"step \d+: the training loss is .*first minibatch"):
        compare_student(s, student=StudentConfig(width=8, dtype=torch.float64),
                        training=TrainingConfig(lr=50.0, steps=200),
                        evaluation=EvaluationConfig(held_out=False, eval_every=100))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the signal mask from /proc")
@pytest.mark.parametrize("suffix", [".zarr", ".npz"])
def test_sigterm_leaves_nothing_behind(tmp_path, suffix):
    import signal
    import time

    out = tmp_path / f"big{suffix}"
    proc = subprocess.Popen([sys.executable, "-m", "smaso.cli", "sample", "ladder", "-n", "20000000", "--depth", "4",
                             "--branching", "4", "--events", "16", "--no-progress", "--out", str(out)],
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60

    def catches_sigterm() -> bool:  # the CLI's handler is installed (Linux: the SigCgt mask of /proc)
        with open(f"/proc/{proc.pid}/status") as f:
            mask = next(line for line in f if line.startswith("SigCgt:")).split()[1]
        return bool(int(mask, 16) >> (signal.SIGTERM - 1) & 1)

    while time.time() < deadline and not catches_sigterm():
        time.sleep(0.02)
    while time.time() < deadline and suffix == ".zarr" and not list(tmp_path.iterdir()):
        time.sleep(0.02)  # a partial store exists: the write is under way
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "smaso: terminated" in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_new_arguments_refuse_wrong_values(capsys, tmp_path):
    from smaso.student.compare import errors_against_n
    from smaso.student.network import LadderStudent
    from teachers.engine import make_engine

    s = sample_ladder(Ladder.default(), 3000, seed=0)
    for bad in (1, 0, True, 2.5):
        with pytest.raises(ValueError, match="noise_groups"):
            compare_student(s, training=TrainingConfig(steps=1), evaluation=EvaluationConfig(noise_groups=bad))
    st = LadderStudent(s.ladder, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="n_min"):
        errors_against_n(st, s, n_min=0)
    with pytest.raises(ValueError, match="batch_size"):
        errors_against_n(st, s, batch_size=-1)
    with pytest.raises(ValueError, match="engine: expected 'serial' or 'dask'"):
        make_engine("threads")
    with pytest.raises(ValueError, match="scheduler/workers"):
        make_engine("serial", workers=2)
    assert "--noise-groups: expected 0" in _error(capsys, ["demo", "-n", "2000", "--noise-groups", "1",
                                                           "--out", str(tmp_path / "d")])
    with pytest.raises(SystemExit) as e:
        main(["demo", "--bn", "sideways"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_a_termination_whose_unwinding_raises_is_still_a_termination(monkeypatch, capsys, tmp_path):
    """SIGTERM can land inside a third-party context manager's bookkeeping (Pyro's handler stack); unwinding
    then raises that library's own error in place of the termination.  The CLI still reports a termination
    (exit 143), not an error (seen once in CI: "This Messenger is not on the bottom of the stack")."""
    import smaso.cli as cli

    def interrupted(args):
        cli._Terminated.received = True  # what the SIGTERM handler records before raising
        raise ValueError("This Messenger is not on the bottom of the stack")

    monkeypatch.setattr(cli, "_cmd_spec", interrupted)
    with pytest.raises(SystemExit) as e:
        cli.main(["spec", "--out", str(tmp_path / "s.json")])
    assert e.value.code == 143 and "smaso: terminated" in capsys.readouterr().err
    monkeypatch.setattr(cli, "_cmd_spec", lambda args: (_ for _ in ()).throw(ValueError("a real error")))
    with pytest.raises(SystemExit) as e:  # a fresh command: no termination recorded, a plain error
        cli.main(["spec", "--out", str(tmp_path / "s.json")])
    assert e.value.code == 2 and "smaso: error: a real error" in capsys.readouterr().err


@pytest.mark.parametrize("argv, near", [
    (["compare", "data.zarr", "--widht", "3"], "--width"),
    (["sample", "ladder", "-n", "10", "--out", "a.zarr", "--seeed", "1"], "--seed")])
def test_a_misspelt_option_is_one_line_from_the_subcommands_parser(capsys, argv, near):
    """Issue 27: the subcommand's parser reports its unknown option (argparse hands it up to the top-level parser,
    which knows none of the subcommand's options), in the CLI's one ``smaso: error:`` line (argparse would write
    ``smaso compare: error:``); issue 37: without the usage before it, with the subcommand's nearest option."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err == f"smaso: error: unrecognized arguments: {' '.join(argv[-2:])} (did you mean {near}?)\n", err


@pytest.mark.parametrize("command", [["demo", "-n", "2000", "--out", "{tmp}/d"], ["compare", "{tmp}/missing.zarr"]])
@pytest.mark.parametrize("option, value, expect", [("--lr", "-1", "--lr: expected a finite number > 0, got -1.0"),
                                                   ("--lr", "nan", "--lr: expected a finite number > 0, got nan"),
                                                   ("--lr", "0", "--lr: expected a finite number > 0, got 0.0"),
                                                   ("--weight-decay", "-1",
                                                    "--weight-decay: expected a finite number >= 0, got -1.0")])
def test_bad_training_numbers_are_refused_before_any_output(tmp_path, capsys, command, option, value, expect):
    """Issue 27: --lr and --weight-decay are checked before the ladder is described (or the dataset read)."""
    with pytest.raises(SystemExit) as e:
        main([a.replace("{tmp}", str(tmp_path)) for a in command] + [option, value])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == "" and err == f"smaso: error: {expect}\n"
    assert list(tmp_path.iterdir()) == []


def test_inspect_on_a_spec_file_says_how_to_sample_from_it(tmp_path, capsys, monkeypatch):
    """Issue 27: a ladder spec given to inspect is named as such, with the command that samples from it (not
    numpy's complaint about pickled data)."""
    monkeypatch.chdir(tmp_path)
    assert main(["spec", "--depth", "2", "--out", "ladder.json"]) == 0
    capsys.readouterr()
    (tmp_path / "ladder").write_bytes((tmp_path / "ladder.json").read_bytes())  # a spec without its suffix
    (tmp_path / "gen.cfg").write_text('kind = "random"\ndepth = 2\n')  # a generator description in TOML
    for name in ("ladder.json", "ladder", "gen.cfg"):
        assert _error(capsys, ["inspect", name]) == (f"smaso: error: {name} is a ladder spec, not a dataset; sample "
                                                      f"from it with: smaso sample ladder --spec {name} -n 100000 "
                                                      "--out data.zarr\n")
    # the suggested command runs as printed
    suggestion = _error(capsys, ["inspect", "ladder.json"]).split("with: ", 1)[1]
    assert main(shlex.split(suggestion)[1:]) == 0 and (tmp_path / "data.zarr").is_dir()
    assert main(["sample", "ladder", "--spec", "ladder.json", "-n", "100", "--out", "d.npz"]) == 0
    assert main(["inspect", "d.npz", "--bayes-n", "0"]) == 0  # a dataset is still a dataset
    (tmp_path / "notes.txt").write_text("not a spec, not a dataset\n")
    assert "corrupted or truncated" in _error(capsys, ["inspect", "notes.txt"])


def test_a_tent_sample_too_large_for_memory_is_refused_up_front(tmp_path, capsys, monkeypatch):
    """Issue 27: ``sample tent -n 1e12`` is refused before any allocation, naming -n and how many examples fit
    (not the allocator's text); a shard that fits is still sampled."""
    import importlib

    # the module (teachers.tent, the attribute, is the tent function)
    monkeypatch.setattr(importlib.import_module("teachers.tent"), "available_memory", lambda: 10**9)
    out = tmp_path / "t.npz"
    err = _error(capsys, ["sample", "tent", "--k", "3", "-n", "1e12", "--out", str(out)])
    assert err.startswith("smaso: error: -n: 1,000,000,000,000 tent examples held in memory need about"), err
    assert "1 GB are available (about 17,857,142 examples fit)" in err and "--shard" in err, err
    assert "alloc" not in err and not out.exists()
    assert main(["sample", "tent", "--k", "3", "-n", "1e12", "--shard", "0/1000000", "--out", str(out)]) == 0


@pytest.mark.parametrize("out", [".", "..", "./", "{cwd}", "{cwd}/empty", "empty", "other"])
def test_sample_ladder_refuses_a_directory_that_is_not_a_store(tmp_path, capsys, monkeypatch, out):
    """Issue 27: a store replaces its whole directory, so ``--out .`` (the working directory), ``..`` and an
    existing directory that is not a dataset store are refused naming --out, with nothing written."""
    cwd = tmp_path / "work"
    (cwd / "empty").mkdir(parents=True)
    (cwd / "other").mkdir()
    (cwd / "other" / "notes.txt").write_text("mine")
    monkeypatch.chdir(cwd)
    out = out.replace("{cwd}", str(cwd))
    err = _error(capsys, ["sample", "ladder", "--depth", "2", "-n", "10", "--out", out])
    assert err.startswith(f"smaso: error: --out: {out!r} is "), err
    assert ("the working directory or one above it" in err) == (out in (".", "..", "./", str(cwd))), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    assert sorted(p.name for p in cwd.iterdir()) == ["empty", "other"]
    assert not any((cwd / "empty").iterdir()) and [p.name for p in (cwd / "other").iterdir()] == ["notes.txt"]


def test_sample_ladder_still_replaces_a_store(tmp_path, capsys, monkeypatch):
    """A store of this format at --out is replaced, as before (issue 27's refusal is for other directories)."""
    monkeypatch.chdir(tmp_path)
    assert main(["sample", "ladder", "--depth", "2", "-n", "10", "--out", "d.zarr"]) == 0
    assert main(["sample", "ladder", "--depth", "2", "-n", "20", "--seed", "1", "--out", "d.zarr"]) == 0
    assert "sampled 20 examples" in capsys.readouterr().out
