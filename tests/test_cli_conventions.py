"""The CLI's conventions (issue 16): lazy imports (``--help`` imports no torch), no third-party warnings in
normal runs, ``-q``, defaults in ``--help``, ``-`` for standard output where a text path is written,
``--device`` wherever tensors are made, and short reprs of result objects."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from smaso.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "pyro", "arviz", "zarr", "matplotlib", "numpy", "scipy", "dask", "tqdm")
HELPS = [["--help"], ["--version"], ["demo", "--help"], ["compare", "--help"], ["sample", "--help"],
         ["sample", "ladder", "--help"], ["sample", "tent", "--help"], ["inspect", "--help"], ["spec", "--help"],
         ["sweep", "--help"]]


def _python(code: str, *args: str, cwd=None, env=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


def _error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("smaso: error: ") and err.count("\n") == 1, err
    return err


def _subparsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        for child in action.choices.values():
            yield from _subparsers(child)


# -- lazy imports ------------------------------------------------------------------------------------------

def test_help_imports_no_heavy_module():
    code = f"""
import contextlib, io, sys
from smaso.cli import main
for argv in {HELPS!r}:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit as e:
            assert e.code == 0, (argv, e.code)
print(sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r})))
"""
    r = _python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_packages_import_lazily_and_keep_their_names():
    r = _python("import sys, smaso, smaso.cli, smaso.plots, smaso.student, smaso.splines, smaso.depth, "
                "smaso.theorems, teachers, inference; print('torch' in sys.modules, 'matplotlib' in sys.modules)")
    assert r.returncode == 0 and r.stdout.split() == ["False", "False"], r.stderr
    import inference
    import smaso.plots
    import smaso.student
    import teachers

    assert teachers.Ladder.__module__ == "teachers.ladder" and callable(smaso.plots.plot_comparison)
    assert inference.posterior.__name__ == "inference.posterior"  # the module, as documented
    assert smaso.student.compare.__name__ == "smaso.student.compare"
    import teachers.tent

    assert teachers.tent is teachers.tent_power.__globals__["tent"]  # the function, as before (not the module)
    assert set(teachers.__all__) <= set(dir(teachers))
    with pytest.raises(AttributeError):
        teachers.no_such_name  # noqa: B018


# -- defaults in --help ------------------------------------------------------------------------------------

def test_every_default_is_shown_in_help():
    for p in _subparsers(build_parser()):
        text = " ".join(p.format_help().split())
        for action in p._actions:
            d = action.default
            if not action.option_strings or d is None or isinstance(d, bool) or d == argparse.SUPPRESS:
                continue
            shown = ",".join(map(str, d)) if isinstance(d, list) else str(d)
            help_text = " ".join((action.help or "").split())
            assert "default" in help_text or f"(default: {shown})" in text, (p.prog, action.dest)
    helps = {tuple(a): " ".join(build_parser()._subparsers._group_actions[0].choices[a[0]].format_help().split())
             for a in (["demo"], ["compare"])}
    assert "(default: 3000)" in helps[("compare",)] and "(default: 50000)" in helps[("demo",)]
    assert "(default: $SMASO_OUTPUT/demo, else smaso-output/demo)" in helps[("demo",)]
    assert "(default: cpu)" in helps[("compare",)]


# -- -q ------------------------------------------------------------------------------------------------------

def test_quiet_prints_nothing_but_errors(tmp_path, capsys):
    data = str(tmp_path / "d.npz")
    assert main(["-q", "sample", "ladder", "-n", "500", "--depth", "2", "--out", data]) == 0
    assert main(["sample", "ladder", "-n", "500", "--depth", "2", "--out", str(tmp_path / "d.zarr"), "--quiet"]) == 0
    assert main(["inspect", data, "--bayes-n", "50", "-q"]) == 0
    assert main(["-q", "spec", "--depth", "1", "--out", str(tmp_path / "s.json")]) == 0
    assert main(["-q", "sample", "tent", "--k", "2", "-n", "50", "--out", str(tmp_path / "t.npz")]) == 0
    assert capsys.readouterr() == ("", "")
    assert "--device: expected" in _error(capsys, ["-q", "inspect", data, "--device", "blah"])
    assert main(["inspect", data, "--bayes-n", "50"]) == 0 and "Bayes-optimal" in capsys.readouterr().out


# -- '-' for standard output ---------------------------------------------------------------------------------

def test_dash_is_stdout_for_text_and_an_error_for_binary(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["sample", "ladder", "-n", "400", "--depth", "2", "--out", "d.npz"]) == 0
    capsys.readouterr()
    assert main(["inspect", "d.npz", "--bayes-n", "50", "--json", "-"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["n"] == 400  # stdout holds the JSON only (the printed report is left out)
    assert main(["spec", "--depth", "1", "--out", "-"]) == 0
    spec = capsys.readouterr().out
    (tmp_path / "spec.json").write_text(spec)
    from teachers.spec_io import load_spec

    assert load_spec(tmp_path / "spec.json").depth == 1
    assert main(["sample", "tent", "--k", "2", "-n", "30", "--out", "t.npz"]) == 0
    capsys.readouterr()
    assert main(["inspect", "t.npz", "--json", "-"]) == 0 and json.loads(capsys.readouterr().out)["k"] == 2
    for argv in (["sample", "ladder", "-n", "10", "--out", "-"], ["sample", "tent", "--k", "2", "-n", "10", "--out",
                                                                   "-"],
                 ["demo", "--out", "-"], ["compare", "d.npz", "--out", "-"]):
        assert "'-' (standard output)" in _error(capsys, argv)
    assert not (tmp_path / "-").exists()


# -- --device ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["demo"], ["compare", "{data}"], ["inspect", "{data}"]])
def test_device_is_checked_before_any_work(tmp_path, capsys, argv):
    data = tmp_path / "d.npz"
    argv = [a.replace("{data}", str(data)) for a in argv]
    assert "--device: expected" in _error(capsys, [*argv, "--device", "blah", "--out" if argv[0] != "inspect"
                                                   else "--json", str(tmp_path / "o")])
    assert not list(tmp_path.iterdir())


@pytest.mark.slow  # the CLI's device option through every command (about 8 s) (slow tier: default-tier budget)
def test_device_reaches_the_library(tmp_path, capsys, monkeypatch):
    import inference.posterior as lp
    import smaso.student.compare as cmp

    seen = []

    def spy(name):
        def f(*args, **kwargs):
            seen.append((name, kwargs.get("device")))
            raise ValueError(f"{name} saw device {kwargs.get('device')!r}")
        return f

    data = str(tmp_path / "d.npz")
    assert main(["sample", "ladder", "-n", "300", "--depth", "2", "--out", data]) == 0
    monkeypatch.setattr(cmp, "compare_student", spy("compare_student"))
    assert "compare_student saw device 'cpu'" in _error(capsys, ["compare", data, "--device", "cpu", "--evaluate",
                                                                "training"])
    monkeypatch.setattr(lp, "bayes_optimal_accuracy", spy("bayes"))
    assert "bayes saw device 'cpu'" in _error(capsys, ["inspect", data, "--device", "cpu"])
    assert "bayes saw device 'cpu'" in _error(capsys, ["demo", "-n", "300", "--device", "cpu", "--out",
                                                       str(tmp_path / "demo")])


# -- warnings ------------------------------------------------------------------------------------------------

_ARVIZ_IN_A_COMMAND = """
import sys
import smaso.cli as cli
spec = cli._cmd_spec
def cmd(args):  # a command that imports arviz, whose import warns once a day (a fresh cache: now)
    import arviz  # noqa: F401
    return spec(args)
cli._cmd_spec = cmd
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.slow  # commands in fresh processes (about 8 s) (slow tier: default-tier budget)
def test_third_party_warnings_are_filtered_at_the_cli_only(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    argv = ["spec", "--depth", "1", "--out", str(tmp_path / "s.json")]
    r = _python(_ARVIZ_IN_A_COMMAND, *argv, env=env)
    assert r.returncode == 0 and "Warning" not in r.stderr and "ArviZ" not in r.stderr, r.stderr
    fresh = {"XDG_CACHE_HOME": str(tmp_path / "cache2")}  # (the first run stamped its cache: no warning today)
    r = _python(_ARVIZ_IN_A_COMMAND, "--debug", *argv, env=fresh)  # --debug shows them
    assert r.returncode == 0 and "FutureWarning" in r.stderr, r.stderr
    before = list(warnings.filters)
    assert main(argv) == 0
    assert warnings.filters == before  # a program calling main() keeps its own filters


@pytest.mark.slow  # four commands in fresh processes (the slow tier)
def test_normal_runs_print_no_warning(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    code = "import sys; from smaso.cli import main; sys.exit(main(sys.argv[1:]))"
    for argv in (["sample", "ladder", "-n", "2000", "--out", "d.zarr"], ["inspect", "d.zarr", "--bayes-n", "50"],
                 ["compare", "d.zarr", "--steps", "2", "--eval-every", "2", "--eval-examples", "500",
                  "--noise-groups", "0", "--out", "c"],
                 ["demo", "-n", "2000", "--bayes-n", "50", "--steps", "2", "--eval-every", "2",
                  "--eval-examples", "500", "--noise-groups", "0", "--out", "demo"]):
        r = _python(code, *argv, cwd=tmp_path, env=env)
        assert r.returncode == 0, (argv, r.stderr)
        assert "Warning" not in r.stderr and "warning" not in r.stderr, (argv, r.stderr)


def test_the_librarys_own_warnings_are_one_line():
    import io

    from smaso.cli_support import _show_warning

    err = io.StringIO()
    _show_warning(UserWarning("d.npz was written before\nchecksums"), UserWarning, str(ROOT / "teachers" /
                                                                                       "dataset.py"), 1, file=err)
    assert err.getvalue() == "smaso: warning: d.npz was written before checksums\n"
    err = io.StringIO()
    _show_warning(DeprecationWarning("old"), DeprecationWarning, "/elsewhere/lib.py", 7, file=err)
    assert err.getvalue() == "smaso: warning: old (DeprecationWarning from /elsewhere/lib.py:7)\n"


# -- reprs ---------------------------------------------------------------------------------------------------

def test_comparison_result_repr_is_short():
    from smaso.student.compare import ComparisonResult, compare_student
    from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
    from teachers import Ladder, sample_ladder

    result = compare_student(sample_ladder(Ladder.default(), 1500, seed=0), student=StudentConfig(width=4),
                             training=TrainingConfig(steps=4),
                             evaluation=EvaluationConfig(eval_every=2, eval_examples=500))
    text = repr(result)
    assert len(text) < 2000 and text.count("\n") < 10, text
    assert "3 checkpoints" in text and "steps 0..4" in text and "accuracy" in text and "LadderStudent" in text
    assert repr(ComparisonResult()).startswith("ComparisonResult(0 checkpoints")
    from smaso.student.reformulation import reformulate

    stats = result.final_stats  # the statistics themselves print short too, not as full tensors
    for obj in (stats, reformulate(result.student, stats.P, stats)):
        assert len(repr(obj)) < 400 and type(obj).__name__ in repr(obj), repr(obj)[:500]


@pytest.mark.parametrize("command", ["compare", "demo"])
def test_training_shows_a_progress_bar_on_a_terminal_unless_no_progress(command, monkeypatch):
    from smaso import cli_student

    argv = [command, "data.zarr"] if command == "compare" else [command]
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert cli_student._progress(build_parser().parse_args(argv)) is True
    assert cli_student._progress(build_parser().parse_args([*argv, "--no-progress"])) is False
    assert cli_student._progress(build_parser().parse_args(["-q", *argv])) is False
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)  # a log file: no bar
    assert cli_student._progress(build_parser().parse_args(argv)) is False


def test_compare_passes_the_bar_to_the_training_loop(tmp_path, monkeypatch):
    import smaso.student.compare as compare_module

    seen = {}
    real = compare_module.compare_student

    def spy(*args, **kwargs):
        seen["progress"] = kwargs["progress"]
        return real(*args, **kwargs)

    monkeypatch.setattr(compare_module, "compare_student", spy)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["sample", "ladder", "-n", "600", "--out", str(tmp_path / "d.zarr"), "-q"]) == 0
    assert main(["compare", str(tmp_path / "d.zarr"), "--steps", "2", "--eval-every", "2", "--eval-examples", "200",
                 "--noise-groups", "0", "--no-progress", "-q"]) == 0
    assert seen["progress"] is False
