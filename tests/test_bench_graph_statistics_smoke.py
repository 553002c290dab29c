"""Smoke test of ``benchmarks/bench_graph_statistics.py``: it runs and writes well-formed results.

Only the structure and positivity of the numbers are checked, never timings against the target.
"""

from __future__ import annotations

import math

import pytest
from bench_smoke_helpers import load_bench, run_quick


@pytest.mark.slow  # a benchmark script end to end (the slow tier)
def test_bench_graph_statistics_quick(tmp_path):
    bench = load_bench("bench_graph_statistics")
    data = run_quick(bench, tmp_path)
    for key in ("benchmark", "config", "graphs", "machine", "results", "targets", "total_wall_s"):
        assert key in data
    assert data["benchmark"] == "graph_statistics"
    assert data["config"]["n"] == 4096 and data["config"]["repeats"] == 1 and data["config"]["quick"]
    rows = {r["contender"]: r for r in data["results"]}
    trees = ("tree", "tree341", "default")
    assert set(rows) == {*(f"{c}-{t}" for c in ("reference", "one") for t in trees), "edges-tree", "dag"}
    for row in rows.values():
        assert set(bench.RESULT_KEYS) <= set(row)
        assert len(row["times_s"]) == row["repeats"] >= 1
        for key in ("best_s", "median_s", "examples_per_s", "macs_per_s", "x_tree_per_example", "x_tree_per_mac"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["contender"], key)
    assert rows["reference-tree"]["x_tree_per_mac"] == 1.0
    assert rows["reference-tree"]["regions"] == rows["one-tree"]["regions"] == rows["edges-tree"]["regions"] == 511
    assert rows["reference-tree341"]["regions"] == 341
    assert rows["one-tree"]["macs_per_example"] == rows["reference-tree"]["macs_per_example"]
    assert rows["dag"]["regions"] == 769 and rows["dag"]["edges"] == 1278
    assert rows["dag"]["macs_per_example"] > rows["one-tree"]["macs_per_example"]
    for key in ("dag_per_mac_vs_tree", *(f"one_vs_reference_{t}" for t in trees), "edges_vs_reference_tree"):
        target = data["targets"][key]
        assert math.isfinite(target["value"]) and target["value"] > 0, key
    for key in ("dag_per_mac_vs_tree", *(f"one_vs_reference_{t}" for t in trees)):
        assert data["targets"][key]["judged"] and isinstance(data["targets"][key]["pass"], bool)
    assert data["machine"]["loadavg_start"] is None or len(data["machine"]["loadavg_start"]) == 3
