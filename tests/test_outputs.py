"""Issue 37: outputs only under ``$SMASO_OUTPUT`` (or a path the user gives), wherever a command, notebook or
example script runs from; with ``$SMASO_OUTPUT`` unset, ``./smaso-output``, or the checkout's own
``smaso-output`` anywhere inside the source checkout (a notebook's kernel runs in ``examples/``)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from smaso import cli
from smaso.output import ENV, output_dir

ROOT = Path(__file__).resolve().parents[1]


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_a_notebook_run_in_examples_writes_to_the_checkouts_output_folder(monkeypatch):
    """``jupyter nbconvert --execute examples/04_...`` runs its kernel in examples/: the notebooks'
    ``output_dir("figures", ...)`` is then the checkout's top-level smaso-output/, not examples/smaso-output/."""
    monkeypatch.delenv(ENV, raising=False)
    for cwd in (ROOT / "examples", ROOT / "smaso" / "plots"):
        monkeypatch.chdir(cwd)
        path = output_dir("figures", "04_student_vs_reformulation", create=False)
        assert path.resolve() == ROOT / "smaso-output" / "figures" / "04_student_vs_reformulation", (cwd, path)
    monkeypatch.chdir(ROOT)  # at the top: the same folder, named relative to it
    assert output_dir("figures", create=False) == Path("smaso-output", "figures")


def test_the_demos_default_out_is_under_smaso_output(tmp_path, monkeypatch):
    """``smaso demo`` without --out writes ``$SMASO_OUTPUT/demo`` (it wrote ./smaso-demo/ in any working
    directory); an --out the user gives is kept."""
    seen = []
    monkeypatch.setattr(cli, "_cmd_demo", lambda args: seen.append(args.out) or 0)
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv(ENV, str(out))
    assert cli.main(["demo", "-q"]) == 0 and cli.main(["demo", "-q", "--out", "mine"]) == 0
    assert seen == [str(out / "demo"), "mine"]
    monkeypatch.delenv(ENV)
    assert cli.main(["demo", "-q"]) == 0 and seen[-1] == str(Path("smaso-output", "demo"))
    assert _files(work) == set()  # (the stub writes nothing; the real run: the slow test below)
    demo_help = cli.build_parser()._subparsers._group_actions[0].choices["demo"].format_help()
    assert "(default: $SMASO_OUTPUT/demo, else smaso-output/demo)" in " ".join(demo_help.split())


@pytest.mark.slow
def test_the_demo_run_elsewhere_writes_only_under_smaso_output(tmp_path, monkeypatch):
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv(ENV, str(out))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    assert cli.main(["demo", "-q", "-n", "2048", "--steps", "2", "--eval-every", "1", "--seeds", "1", "--bayes-n",
                     "10", "--eval-examples", "256", "--noise-groups", "0"]) == 0
    assert _files(work) == set()
    assert _files(out) == {"demo", "demo/alignment.png", "demo/comparison.json", "demo/comparison.png"}


def test_example_scripts_name_no_file_in_the_working_directory_by_default():
    """Every example script's default output path is under the output root (smaso.output), none a bare file name
    (``--out bn_energy.png`` wrote into the working directory, the source tree when run from the checkout)."""
    bare = re.compile(r"""add_argument\(\s*"--[\w-]+",[^)]*default=["'][^"']+\.(png|pdf|svg|json|npz|zarr|toml)["']""")
    offenders = [p.name for p in sorted((ROOT / "examples").glob("*.py")) if bare.search(p.read_text())]
    assert offenders == []


def test_an_example_script_run_elsewhere_writes_only_under_smaso_output(tmp_path, monkeypatch, capsys):
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv(ENV, str(out))
    spec = importlib.util.spec_from_file_location("relu_vs_linear_outputs", ROOT / "examples" / "relu_vs_linear.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--ms", "4"])
    assert _files(work) == set() and _files(out) == {"figures", "figures/relu_vs_linear.png"}
