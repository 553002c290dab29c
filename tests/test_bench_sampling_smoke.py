"""Smoke test of ``benchmarks/bench_sampling.py``: it runs and writes well-formed results.

Only the structure and positivity of the numbers are checked, never timings against the target
(those depend on the machine and its load).
"""

from __future__ import annotations

import math

import pytest
from bench_smoke_helpers import load_bench, run_quick


@pytest.mark.slow  # a benchmark script end to end (the slow tier)
def test_bench_sampling_quick(tmp_path):
    bench = load_bench("bench_sampling")
    data = run_quick(bench, tmp_path)

    for key in ("benchmark", "config", "graphs", "machine", "results", "targets", "total_wall_s"):
        assert key in data
    assert data["benchmark"] == "sampling"
    assert data["config"]["n"] == 8192 and data["config"]["repeats"] == 1 and data["config"]["quick"]
    for key in ("torch", "torch_threads", "platform", "python", "pyro"):
        assert key in data["machine"]

    rows = {(r["mode"], r["contender"]): r for r in data["results"]}
    assert set(rows) == {(m, c) for m in ("topdown", "bottomup") for c in ("reference", "ladder-tree", "ladder-dag")}
    for row in rows.values():
        assert set(bench.RESULT_KEYS) <= set(row)
        assert row["n"] > 0 and row["draws"] == row["n"] * row["draws_per_example"]
        assert len(row["times_s"]) == row["repeats"] >= 1
        for key in ("best_s", "median_s", "examples_per_s", "draws_per_s", "regions_per_s", "x_reference"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["mode"], row["contender"], key)
    assert rows["topdown", "reference"]["x_reference"] == 1.0
    tree_draws = rows["topdown", "ladder-tree"]["draws_per_example"]
    assert rows["topdown", "reference"]["draws_per_example"] == tree_draws == 341
    assert rows["topdown", "ladder-dag"]["draws_per_example"] == 769
    assert rows["bottomup", "reference"]["draws_per_example"] == 256
    assert rows["bottomup", "ladder-dag"]["draws_per_example"] == 258

    for mode in ("topdown", "bottomup"):
        for key in ("tree", "dag"):
            target = data["targets"][f"{key}_per_draw_vs_reference_{mode}"]
            assert math.isfinite(target["value"]) and target["value"] > 0
            assert isinstance(target["pass"], bool)
