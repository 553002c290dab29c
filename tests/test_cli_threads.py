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


@pytest.mark.parametrize(("argv", "cores", "expected"), [
    ([], 2, 1),                        # 2 cores: the other seeds in one process beside this one
    ([], 1, 0),                        # one core: every seed here, one after another
    ([], 16, 4),                       # never more than one per other seed
    (["--seeds", "1"], 16, 0),
    (["--workers", "3"], 1, 3),        # asked for: given
    (["--workers", "9"], 2, 4),
])
def test_the_demos_workers_are_one_per_core_beside_this_one_unless_given(monkeypatch, argv, cores, expected):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert cli_student._workers(build_parser().parse_args(["demo", *argv])) == expected
