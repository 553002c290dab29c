"""Smoke test of ``benchmarks/bench_diagnosis.py``: it runs and writes well-formed results.

Only the structure and positivity of the numbers are checked, and that the batched diagnosis's report is the
one-by-one report (numbers bit for bit, floors to round-off); never timings (those depend on the machine and its
load).  The run writes into ``tmp_path`` only, never ``benchmarks/results/``.
"""

from __future__ import annotations

import math

import pytest
from bench_smoke_helpers import load_bench, run_quick


@pytest.mark.slow  # a benchmark script end to end (the slow tier)
def test_bench_diagnosis_quick(tmp_path):
    bench = load_bench("bench_diagnosis")
    data = run_quick(bench, tmp_path)

    for key in ("benchmark", "config", "machine", "results", "correctness", "total_wall_s"):
        assert key in data
    assert data["benchmark"] == "diagnosis"
    config = data["config"]
    assert config["quick"] and config["repeats"] == 3 and config["eval_examples"] == 1024
    assert config["groups"] == config["replicates"] == 10 and config["checkpoints_per_run"] == 13
    for key in ("torch", "torch_threads", "loadavg_start", "loadavg_end"):
        assert key in data["machine"]
    rows = {r["contender"]: r for r in data["results"]}
    assert tuple(rows) == bench.CONTENDERS
    for row in rows.values():
        assert set(bench.RESULT_KEYS) <= set(row) and len(row["times_s"]) == 3
        for name in ("best_s", "median_s", "x_one_by_one", "demo_seed_s"):
            assert math.isfinite(row[name]) and row[name] > 0
    assert [rows[k]["reformulate_calls"] for k in bench.CONTENDERS] == [22, 4, 2, 0]
    check = data["correctness"]
    assert check["same_numbers"] and check["same_within_noise"] and check["floors_compared"] > 20
    assert check["max_floor_abs_diff"] <= 1e-14 and check["max_floor_rel_diff"] <= 1e-10
    # the demo seed (run and control, 3 checkpoints each), the diagnosis by each contender
    assert config["demo_steps"] == 40 and config["demo_rounds"] == 1
    demo = {r["contender"]: r for r in data["demo_seed"]}
    assert tuple(demo) == bench.DEMO_CONTENDERS
    for row in demo.values():
        assert set(bench.DEMO_KEYS) <= set(row) and row["checkpoints"] == 6
        for name in ("seed_s", "diagnosis_s", "replicates_s", "x_one_by_one"):
            assert math.isfinite(row[name]) and row[name] > 0
    check = data["demo_correctness"]
    assert check["same_numbers"] and check["same_within_noise"] and check["floors_compared"] > 100
    assert check["max_floor_abs_diff"] <= 1e-14 and check["max_floor_rel_diff"] <= 1e-10
