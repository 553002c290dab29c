"""Smoke test of ``benchmarks/bench_ladder_sampling.py``: it runs and writes well-formed results.

Only the structure and positivity of the numbers are checked, never timings against the targets
(those depend on the machine and its load).
"""

from __future__ import annotations

import math

import pytest
from bench_smoke_helpers import load_bench, run_quick


@pytest.mark.slow  # a benchmark script end to end (the slow tier)
def test_bench_ladder_sampling_quick(tmp_path):
    bench = load_bench("bench_ladder_sampling")
    data = run_quick(bench, tmp_path)

    for key in ("benchmark", "config", "ladder", "machine", "results", "targets", "total_wall_s"):
        assert key in data
    assert data["config"]["n"] == 20000 and data["config"]["repeats"] == 1 and data["config"]["quick"]
    assert data["ladder"]["total_regions"] == 341
    for key in ("torch", "torch_threads", "platform", "python", "pyro"):
        assert key in data["machine"]

    rows = {r["contender"]: r for r in data["results"]}
    assert {"sampler", "plain-pyro", "floor"} <= set(rows)
    for row in rows.values():
        assert set(bench.RESULT_KEYS) <= set(row)
        assert row["n"] > 0 and row["draws"] > 0
        assert len(row["times_s"]) == row["repeats"] >= 1
        for key in ("best_s", "median_s", "examples_per_s", "draws_per_s", "x_floor"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["contender"], key)
    assert rows["sampler"]["draws"] == 20000 * 341
    if "sampler (bottom-up)" in rows:
        assert rows["sampler (bottom-up)"]["draws"] == 20000 * 256

    for key in ("speedup_over_plain_pyro", "slowdown_vs_floor"):
        target = data["targets"][key]
        assert math.isfinite(target["value"]) and target["value"] > 0
        assert isinstance(target["pass"], bool)
