"""Smoke test of ``benchmarks/bench_graph_statistics.py``: it runs and writes well-formed results.

Only the structure and positivity of the numbers are checked, never timings against the target.
"""

from __future__ import annotations

import math

from bench_smoke_helpers import load_bench, run_quick


def test_bench_graph_statistics_quick(tmp_path):
    bench = load_bench("bench_graph_statistics")
    data = run_quick(bench, tmp_path)
    for key in ("benchmark", "config", "graphs", "machine", "results", "targets", "total_wall_s"):
        assert key in data
    assert data["benchmark"] == "graph_statistics"
    assert data["config"]["n"] == 4096 and data["config"]["repeats"] == 1 and data["config"]["quick"]
    rows = {r["contender"]: r for r in data["results"]}
    assert set(rows) == {"tree", "graph-tree", "graph-dag"}
    for row in rows.values():
        assert set(bench.RESULT_KEYS) <= set(row)
        assert len(row["times_s"]) == row["repeats"] >= 1
        for key in ("best_s", "median_s", "examples_per_s", "macs_per_s", "x_tree_per_example", "x_tree_per_mac"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["contender"], key)
    assert rows["tree"]["x_tree_per_mac"] == 1.0
    assert rows["tree"]["regions"] == rows["graph-tree"]["regions"] == 511
    assert rows["tree"]["macs_per_example"] == rows["graph-tree"]["macs_per_example"]
    assert rows["graph-dag"]["regions"] == 769 and rows["graph-dag"]["edges"] == 1278
    assert rows["graph-dag"]["macs_per_example"] > rows["tree"]["macs_per_example"]
    target = data["targets"]["dag_per_mac_vs_tree"]
    assert math.isfinite(target["value"]) and isinstance(target["pass"], bool)
