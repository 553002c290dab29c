"""Issue 37, messages: every CLI error is one ``smaso: error:`` line naming the option as the user typed it, checked
before any work; the activation list comes from one source (with ``silu``); a misspelt option is one line with the
nearest option, not the usage; a spec given where a dataset belongs says what it is and how to sample from it; no
message speaks of pickles, and no loader allows them."""

from __future__ import annotations

import ast
import shlex
from pathlib import Path

import pytest

from smaso.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def _error(capsys, argv: list[str]) -> tuple[str, str]:
    """(stdout, stderr) of a command that must fail with status 2."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    out, err = capsys.readouterr()
    assert e.value.code == 2, (argv, out, err)
    return out, err


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A 300-row dataset of a depth-2 ladder (one hidden level: --width takes one value)."""
    from teachers import Ladder, sample_ladder
    from teachers.dataset import save_dataset

    path = tmp_path_factory.mktemp("data") / "d.npz"
    return save_dataset(sample_ladder(Ladder.random(depth=2, branching=2, events=3, seed=0), 300, seed=0), path)


@pytest.mark.parametrize("options, expect", [
    (["--width", "0"], "--width: expected positive integers, got '0'"),
    (["--width", "4,4"], "--width: expected one value or 1 (one per hidden level 1..1 of the ladder), got 2: 4,4"),
    (["--activation", "rleu"], "--activation: expected relu, silu, swish:BETA, leaky_relu:NU, abs or linear, got "
                               "'rleu'"),
    (["--activation", "swish:2"], "--activation 'swish:2': beta: expected a value in [0, 1], got 2.0"),
    (["--lr-schedule", "step:0:1"], "--lr-schedule: expected None, 'none', 'cosine' or 'step:N:GAMMA' (N > 0, "
                                    "0 < GAMMA <= 1), got 'step:0:1'"),
    (["--noise-groups", "1"], "--noise-groups: expected 0 (no floors) or at least 2 groups, got 1"),
    (["--readout", "-1"], "--readout: expected a non-negative integer, got '-1'"),
])
def test_compare_refuses_bad_student_options_before_describing_the_data(capsys, data, options, expect):
    """``compare DATA --width 0`` (or ``--activation rleu``, ...) printed the ladder's description, then
    ``width: ...`` (the library's name); now one line naming the option, and nothing else."""
    out, err = _error(capsys, ["compare", str(data), "--eval-examples", "100", *options])
    assert (out, err) == ("", f"smaso: error: {expect}\n")


@pytest.mark.parametrize("options", [["--width", "0"], ["--width", "3,3,3"], ["--activation", "rleu"]])
def test_demo_refuses_bad_student_options_before_sampling(capsys, tmp_path, options):
    out, err = _error(capsys, ["demo", "--out", str(tmp_path / "d"), *options])
    assert out == "" and err.startswith(f"smaso: error: {options[0]}") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


def test_the_activation_list_has_one_source():
    """``--help`` offers what the library reads and its messages list (``silu`` was missing from the latter)."""
    from smaso.student._activation_names import ACTIVATION_SPECS, activation_choices
    from smaso.student.activations import get_activation

    for spec in ACTIVATION_SPECS:
        get_activation(spec.replace("BETA", "0.7").replace("NU", "0.1"))
    assert "silu" in ACTIVATION_SPECS
    with pytest.raises(ValueError) as e:
        get_activation("rleu")
    assert str(e.value) == f"activation: expected {activation_choices()}, got 'rleu'"
    assert all(spec in str(e.value) for spec in ACTIVATION_SPECS)
    for command in ("compare", "demo"):
        parser = build_parser()._subparsers._group_actions[0].choices[command]
        (action,) = [a for a in parser._actions if a.dest == "activation"]
        assert action.help == activation_choices()


@pytest.mark.parametrize("argv, expect", [
    (["compare", "data.zarr", "--widht", "3"], "unrecognized arguments: --widht 3 (did you mean --width?)"),
    (["inspect", "data.zarr", "--bayse-n", "0"], "unrecognized arguments: --bayse-n 0 (did you mean --bayes-n?)"),
    (["dmeo"], "COMMAND: invalid choice: 'dmeo' (choose from 'demo', 'compare', 'sample', 'spec', 'inspect', "
               "'sweep') "
               "(did you mean demo?)"),
    (["compare", "data.zarr", "--bn", "afer"], "--bn: invalid choice: 'afer' (choose from 'after', 'before') "
                                               "(did you mean after?)"),
    (["sample", "ladder", "--out", "a.zarr"], "the following arguments are required: -n"),
])
def test_a_parse_error_is_one_line_without_the_usage(capsys, argv, expect):
    """argparse printed ~20 lines of usage before the error line; ``--help`` still prints the usage."""
    out, err = _error(capsys, argv)
    assert (out, err) == ("", f"smaso: error: {expect}\n")
    command = argv[:2] if argv[0] == "sample" else argv[:1] if argv[0] != "dmeo" else []
    with pytest.raises(SystemExit) as e:
        main([*command, "--help"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith(" ".join(["usage: smaso", *command]))


def test_compare_on_a_spec_file_says_what_it_is_and_how_to_sample_from_it(tmp_path, capsys, monkeypatch):
    """``smaso compare graph.json`` (a spec) said the dataset was "corrupted or truncated (... pickled (object)
    data ... allow_pickle=...)"; now what ``inspect`` says for the same file, whose command runs as printed."""
    monkeypatch.chdir(tmp_path)
    assert main(["spec", "--depth", "2", "--events", "3", "--out", "graph.json"]) == 0
    capsys.readouterr()
    out, err = _error(capsys, ["compare", "graph.json", "--steps", "1"])
    assert out == "" and err == ("smaso: error: graph.json is a ladder spec, not a dataset; sample from it with: "
                                 "smaso sample ladder --spec graph.json -n 100000 --out data.zarr\n")
    assert err == _error(capsys, ["inspect", "graph.json"])[1]  # the same words as inspect's
    assert main([*shlex.split(err.split("with: ", 1)[1])[1:], "-q"]) == 0 and (tmp_path / "data.zarr").is_dir()


@pytest.mark.parametrize("command", ["compare", "inspect"])
def test_a_file_that_is_not_a_dataset_is_named_without_pickle_words(tmp_path, capsys, command):
    """numpy reads a file without the zip header as a pickle, and its refusal ("pickled (object) data ... load it
    unsafely using the allow_pickle= keyword") suggested an unsafe fix for a file that is no pickle at all."""
    path = tmp_path / "junk.bin"
    path.write_bytes(bytes(range(7, 250)))
    out, err = _error(capsys, [command, str(path)])
    assert out == "" and err == (f"smaso: error: dataset: {str(path)!r} is not a dataset file, or is corrupted or "
                                 "truncated: a .npz dataset file is a zip archive, and this file does not start like "
                                 "one\n")
    assert "pickle" not in err.lower()


def _own_sources() -> list[Path]:
    return [p for pkg in ("smaso", "teachers", "inference") for p in sorted((ROOT / pkg).rglob("*.py"))]


def test_no_loader_allows_pickles_and_no_message_speaks_of_them():
    """A guard over the sources: no ``allow_pickle=True``, and no pickle wording in what the library raises, warns
    or prints."""
    worded = []
    for path in _own_sources():
        text = path.read_text()
        assert "allow_pickle=True" not in text, path
        if "pickl" not in text.lower():
            continue
        for node in ast.walk(ast.parse(text)):
            call = node.exc if isinstance(node, ast.Raise) else node if isinstance(node, ast.Call) else None
            if call is None or (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(
                    node.func, "id", None)) not in ("warn", "print", "error", "exit")):
                continue
            worded += [f"{path.name}:{node.lineno}" for c in ast.walk(call)
                       if isinstance(c, ast.Constant) and isinstance(c.value, str) and "pickl" in c.value.lower()]
    assert worded == []


@pytest.mark.parametrize("argv, option", [
    ("spec --depth 0", "--depth"),
    ("spec --branching 0", "--branching"),
    ("spec --depth 2 --branching 2,2,2", "--branching"),
    ("spec --events 1", "--events (entry 0)"),
    ("spec --concentration 0", "--concentration"),  # (was read as 1, without a word)
    ("spec --emission gaussian --sigma 0", "--sigma"),
    ("spec --ladder-seed -1", "--ladder-seed"),
    ("spec --kind factorized_binary --factors 1,1", "--factors"),
    ("sample ladder -n 10 --out d.zarr --chunk-rows 100", "--chunk-rows"),
    ("sample ladder -n 10 --out d.zarr --compress bogus", "--compress"),
    ("sample ladder -n 10 --out d.npz --shard 3/2", "--shard"),
    ("sample tent --k 2 -n 10 --out t.npz --noise -1", "--noise"),
    ("sample tent --k 2 -n 10 --out t.npz --noise nan", "--noise"),
    ("sample tent --k 2 -n 10 --out t.npz --shard x", "--shard"),
    ("inspect d.npz --bayes-n -1", "--bayes-n"),
])
def test_every_command_names_the_option_it_refuses(tmp_path, capsys, monkeypatch, argv, option):
    """The library's argument names (``depth:``, ``seed:``, ``chunk_rows:``, ``argument --bayes-n:``) became the
    options as typed, in one line, before anything is written."""
    monkeypatch.chdir(tmp_path)
    argv = shlex.split(argv) + (["--out", "-"] if argv.startswith("spec") else [])
    out, err = _error(capsys, argv)
    assert out == "" and err.startswith(f"smaso: error: {option}: ") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []
