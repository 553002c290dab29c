"""Property-based tests of the CLI's argument paths (issue 14): whatever options a user types, ``smaso``
either succeeds or exits with status 2 and one ``smaso: error:`` line (or argparse's usage error), never
a traceback.  Sizes are kept small where an option is valid, so the runs that do work stay fast."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from smaso.cli import main

# values a user might type: mostly valid small ones (so that the deeper checks run), some edge cases and junk


def _mostly(valid: list[str], junk: list[str]):
    """A valid value nine times in ten, else an edge case or junk."""
    return st.integers(0, 9).flatmap(lambda i: st.sampled_from(valid if i else junk))


_JUNK_INT = ["-1", "1e30", "inf", "nan", "abc", "", "2.5", "99999999999999999999"]
_INTS = _mostly(["0", "1", "2", "3", "17"], _JUNK_INT)
_SMALL = _mostly(["1", "2", "3", "2,2", "3,2", "2,3,2"], ["0", "-2", "x", "3,0", "1e9", "64", "2,2,2,2,2,2,2,2"])
_FLOATS = _mostly(["0.5", "1", "2", "0.1"], ["0", "-1", "nan", "inf", "-inf", "1e-300", "1e300", "abc", ""])
_OPTIONS = {
    "--kind": _mostly(["random", "fully_informative", "factorized_binary", "default"], ["tree", ""]),
    "--mode": _mostly(["topdown", "bottomup"], ["sideways"]),
    "--depth": _SMALL,
    "--branching": _SMALL,
    "--events": _SMALL,
    "--factors": _SMALL,
    "--concentration": _FLOATS,
    "--ladder-seed": _INTS,
    "--emission": _mostly(["onehot", "gaussian"], ["laplace"]),
    "--sigma": _FLOATS,
}
_SAMPLE = {"-n": _mostly(["1", "7", "50"], ["0", "-5", "1e12", "1e15", "abc", "nan"]),
           "--seed": _INTS, "--shard": _mostly(["0/1", "1/2", "2/3"], ["2/2", "0/0", "a/b", "-1/3"]),
           "--chunk-rows": _mostly(["4096", "8192"], ["4095", "0", "-1"]),
           "--compress": _mostly(["zstd", "zstd:3", "none"], ["zstd:99", "bogus"])}


def _run(argv: list[str]) -> None:
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = main(argv)
    except SystemExit as e:
        code = e.code
        text = err.getvalue()
        assert code in (0, 2), (argv, code, text)
        if code == 2:
            assert "Traceback" not in text and ("smaso: error:" in text or "usage:" in text), (argv, text)
        return
    assert code == 0, (argv, code)


@st.composite
def _ladder_argv(draw, extra: dict) -> list[str]:
    argv = []
    for name, values in {**_OPTIONS, **extra}.items():
        if draw(st.booleans()):
            argv += [name, draw(values)]
    return argv


@pytest.mark.slow
@settings(max_examples=examples(2000), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_spec_command_accepts_or_refuses_cleanly(tmp_path, data):
    argv = data.draw(_ladder_argv({}))
    _run(["spec", *argv, "--out", str(tmp_path / "s.json")])


@pytest.mark.slow
@settings(max_examples=examples(2000), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_sample_command_accepts_or_refuses_cleanly(tmp_path, monkeypatch, data):
    # a 2 GB machine: wide ladders ("--branching 64": 266k regions, ~26 GB of sampler temporaries per
    # 4096-row block) are refused up front by teachers.sampling.check_working_memory, not run for a minute
    monkeypatch.setattr("teachers.sampling._available_bytes", lambda device: 2 * 10**9)
    argv = data.draw(_ladder_argv(_SAMPLE))
    if "-n" not in argv:
        argv += ["-n", "5"]
    suffix = data.draw(_mostly([".npz"], [".zarr"]))  # (a store costs 10x a small .npz: 55 ms against 5)
    _run(["sample", "ladder", *argv, "--no-progress", "--out", str(tmp_path / f"d{suffix}")])
