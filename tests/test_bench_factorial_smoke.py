"""Smoke test of ``benchmarks/bench_factorial_map.py``: it runs and writes well-formed results.

Only the structure and positivity of the numbers are checked, never timings against the targets
(those depend on the machine and its load).
"""

from __future__ import annotations

import math

import pytest
from bench_smoke_helpers import load_bench, run_quick


@pytest.mark.slow  # a benchmark script end to end (the slow tier)
def test_bench_factorial_map_quick(tmp_path):
    bench = load_bench("bench_factorial_map")
    data = run_quick(bench, tmp_path)

    for key in ("benchmark", "config", "layer", "machine", "results", "enumeration", "enumeration_projection",
                "targets", "total_wall_s"):
        assert key in data
    config = data["config"]
    assert config["quick"] and config["k"] == bench.QUICK["k"] and config["n"] == bench.QUICK["n"]
    assert config["repeats"] == 1
    for key in ("torch", "torch_threads", "platform", "python", "pyro"):
        assert key in data["machine"]
    # what is timed is right: an orthogonal ReLU layer whose factorized MAP is the ReLU gate
    assert data["layer"]["orthogonality_defect"] < 1e-10 and data["layer"]["factorized_map_is_relu_gate"]

    rows = {r["contender"]: r for r in data["results"]}
    assert {"factorized_map", "matmul floor", "matmul floor (contiguous)", "factorized_map (checked)",
            "all-region scores matmul"} <= set(rows)
    for row in rows.values():
        assert set(bench.RESULT_KEYS) <= set(row)
        assert len(row["times_s"]) == row["repeats"] == 1
        for key in ("best_s", "median_s", "gflops", "x_floor"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["contender"], key)
    assert rows["factorized_map"]["target"]
    assert min(rows["matmul floor"]["x_floor"], rows["matmul floor (contiguous)"]["x_floor"]) == 1.0

    enum = data["enumeration"]
    assert [r["k"] for r in enum] == list(range(1, bench.QUICK["enum_max_k"] + 1))
    for r in enum:
        assert r["configs"] == 2 ** r["k"] and r["time_s"] > 0 and r["orthogonal_check"]
    assert math.isfinite(data["enumeration_projection"]["log10_seconds_per_example"])

    target = data["targets"]["factorized_vs_matmul"]
    assert math.isfinite(target["value"]) and target["value"] > 0 and isinstance(target["pass"], bool)


def test_bench_factorial_map_rejects_bad_arguments(tmp_path):
    bench = load_bench("bench_factorial_map")
    for argv in (["--k", "0"], ["--k", "64", "--d", "32"], ["--enum-time-limit", "0"]):
        with pytest.raises(SystemExit):
            bench.parse_args([*argv, "--out", str(tmp_path / "b.json")])
