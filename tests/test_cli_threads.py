"""Every command defaults to one torch thread and takes ``--threads`` (issue 37: ``demo``, ``compare`` and
``inspect`` kept torch's default of one thread per core, which loses most of the throughput beside other jobs;
``benchmarks/bench_out_of_core.py``'s contention section measures it)."""

from __future__ import annotations

import pytest
import torch

import smaso.cli_student as cli_student
from smaso.cli import build_parser, main
from teachers import Ladder, sample_ladder
from teachers.dataset import save_dataset


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("threads") / "d.npz"
    save_dataset(sample_ladder(Ladder.random(depth=2, branching=2, events=3, mode="bottomup", seed=0), 600, 0), path)
    return str(path)


@pytest.mark.parametrize("argv", [["inspect", "{data}", "--bayes-n", "50"],
                                  ["compare", "{data}", "--steps", "2", "--eval-every", "2", "--eval-examples", "200",
                                   "--noise-groups", "0"]])
def test_commands_run_on_one_thread_unless_told(argv, data, two_threads, capsys):
    assert main([a.format(data=data) for a in argv]) == 0
    assert torch.get_num_threads() == 1
    assert main([a.format(data=data) for a in argv] + ["--threads", "2"]) == 0
    assert torch.get_num_threads() == 2


def test_the_demo_takes_threads_and_sets_one_first(monkeypatch, two_threads):
    assert build_parser().parse_args(["demo", "--threads", "3"]).threads == 3

    class Stop(Exception):
        pass

    def first(*args, **kwargs):  # the demo's first step: the thread count, before any work
        raise Stop(kwargs)

    monkeypatch.setattr(cli_student, "_check_memory", first)
    with pytest.raises(Stop):
        cli_student._cmd_demo(build_parser().parse_args(["demo"]))
    assert torch.get_num_threads() == 1


def test_idle_cores_are_the_usable_cores_less_the_busy_ones_and_this_one(monkeypatch):
    import teachers.engine as engine

    monkeypatch.setattr(engine, "_usable_cores", lambda: 4)
    assert [engine.idle_cores(b) for b in (0.0, 0.4, 1.6, 2.0, 3.0, 9.0)] == [3, 3, 1, 1, 0, 0]


def test_busy_processes_reads_two_spinning_processes():
    """Two processes spinning beside this one read as (at least) two busy ones: the reading the demo's default
    ``--workers`` rests on sees jobs started a second ago (the 1-minute load average would not)."""
    import subprocess
    import sys
    import time

    from teachers.engine import busy_processes

    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.5)
        assert busy_processes(samples=10) >= 1.5
    finally:
        for p in spin:
            p.kill()
            p.wait()


def test_busy_processes_without_proc_falls_back_to_the_load_average(monkeypatch):
    import builtins
    import os

    import teachers.engine as engine

    def no_proc(*a, **k):
        raise OSError("no /proc here")

    monkeypatch.setattr(builtins, "open", no_proc)
    monkeypatch.setattr(os, "getloadavg", lambda: (2.5, 1.0, 0.5))
    assert engine.busy_processes(samples=2, interval=0.0) == 2.5


@pytest.mark.parametrize(("argv", "idle", "expected"), [
    ([], 1, 1),                        # a quiet 2-core machine: the other seeds in one process beside this one
    ([], 0, 0),                        # two jobs beside it: every seed here, one after another
    ([], 8, 4),                        # never more than one per other seed
    (["--seeds", "1"], 8, 0),
    (["--workers", "3"], 0, 3),        # asked for: given, whatever the load
    (["--workers", "9"], 0, 4),
])
def test_the_demos_workers_follow_the_idle_cores_unless_given(monkeypatch, argv, idle, expected):
    import teachers.engine as engine

    monkeypatch.setattr(engine, "idle_cores", lambda busy=None: idle)
    assert cli_student._workers(build_parser().parse_args(["demo", *argv])) == expected
