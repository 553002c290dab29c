"""Smoke test of ``benchmarks/bench_out_of_core.py``: the memory and contention sections run in their
subprocesses and write well-formed results (never judged against the targets: they depend on the machine)."""

from __future__ import annotations

import json
import math

import pytest
from bench_smoke_helpers import load_bench

pytestmark = pytest.mark.slow


def test_bench_out_of_core_quick(tmp_path):
    bench = load_bench("bench_out_of_core")
    out = tmp_path / "b.json"
    returned = bench.main(["--quick", "--sections", "memory", "contention", "--out", str(out)])
    data = json.loads(out.read_text())
    assert data["results"] == json.loads(json.dumps(returned["results"]))
    jobs = {(r["section"], r.get("job"), r.get("machine"), r.get("threads")) for r in data["results"]}
    assert {("memory", "sample", None, 1), ("memory", "inspect", None, 1), ("memory", "statistics", None, 1),
            ("memory", "sample_memory", None, 1)} <= jobs
    assert {("contention", None, "quiet", 1), ("contention", None, "quiet", 2)} <= jobs
    for r in data["results"]:
        assert math.isfinite(r["examples_per_s"]) and r["examples_per_s"] > 0
        if r["section"] == "memory":
            assert 50 < r["peak_rss_mib"] < 4096
    sample = next(r for r in data["results"] if r.get("job") == "sample")
    assert 50 < sample["bytes_per_example"] < 400  # 341 events per example, zstd-compressed
    assert [p.name for p in tmp_path.iterdir()] == ["b.json"]


def test_bench_out_of_core_main_job_quick(tmp_path):
    """The main job's section: compare_student over a store, its evaluation sharded on 2 worker processes; the row
    carries the CPU seconds of the job and of its workers, the workers' peak memory, and the 40k ex/s target."""
    bench = load_bench("bench_out_of_core")
    out = tmp_path / "m.json"
    data = bench.main(["--quick", "--sections", "main_job", "--out", str(out)])
    (row,) = [r for r in data["results"] if r["section"] == "main_job" and r["job"] == "main_job"]
    passes = [r for r in data["results"] if r["section"] == "main_job" and r["job"] == "eval_pass"]
    assert [(r["dtype"], r["groups"], r["workers"], r["kernel"]) for r in passes] == list(bench.EVAL_PASSES)
    assert all(r["n"] == 20000 and r["cpu_s"] > 0 for r in passes)
    assert passes[-1]["worker_cpu_s"] > 0 == passes[0]["worker_cpu_s"]  # sharded: the pass ran in the workers
    assert row["workers"] == 2 and row["n"] == 20000 and 0 < row["final_accuracy"] <= 1
    assert row["cpu_s"] > 0 and row["worker_cpu_s"] > 0  # the evaluation ran in the workers
    assert 50 < row["worker_peak_rss_mib"] < 4096 and 50 < row["peak_rss_mib"] < 4096
    target = data["targets"]["main_job_at_least_40k_examples_per_s"]
    assert target["measured"] == row["examples_per_s"] and target["met"] == (row["examples_per_s"] >= 40_000)


def test_bench_out_of_core_evaluation_passes_alone_quick(tmp_path):
    """``--main-n 0`` runs the evaluation passes alone, ``--pass-repeats`` interleaved rounds of them; the targets
    carry the row groups' cost (groups=10 against none, best of the rounds) and every contender's best and median."""
    bench = load_bench("bench_out_of_core")
    out = tmp_path / "p.json"
    data = bench.main(["--quick", "--sections", "main_job", "--main-n", "0", "--pass-n", "6000", "--pass-repeats", "2",
                       "--out", str(out)])
    passes = [r for r in data["results"] if r["section"] == "main_job"]
    assert all(r["job"] == "eval_pass" for r in passes)  # no main job
    assert [(r["repeat"], r["dtype"], r["groups"], r["workers"], r["kernel"]) for r in passes] == [
        (rep, *c) for rep in range(2) for c in bench.EVAL_PASSES]
    cost = data["targets"]["eval_pass_row_groups_cost"]
    best = {k: v["best_examples_per_s"] for k, v in cost["passes"].items()}
    assert cost["x_without_groups"] == pytest.approx(best["float32, groups=None, 1 process(es)"]
                                                     / best["float32, groups=10, 1 process(es)"])
    assert all(v["repeats"] == 2 and v["median_examples_per_s"] <= v["best_examples_per_s"]
               and v["best_examples_per_cpu_s"] > 0 for v in cost["passes"].values())
    assert cost["x_without_groups_cpu"] > 0
