"""Smoke test of ``benchmarks/bench_graph_sampling.py``: it runs and writes well-formed results.

Only the structure and positivity of the numbers are checked, never timings against the target
(those depend on the machine and its load).
"""

from __future__ import annotations

import math

from bench_smoke_helpers import load_bench, run_quick


def test_bench_graph_sampling_quick(tmp_path):
    bench = load_bench("bench_graph_sampling")
    data = run_quick(bench, tmp_path)

    for key in ("benchmark", "config", "graphs", "machine", "results", "targets", "total_wall_s"):
        assert key in data
    assert data["benchmark"] == "graph_sampling"
    assert data["config"]["n"] == 8192 and data["config"]["repeats"] == 1 and data["config"]["quick"]
    for key in ("torch", "torch_threads", "platform", "python", "pyro"):
        assert key in data["machine"]

    rows = {(r["mode"], r["contender"]): r for r in data["results"]}
    assert set(rows) == {(m, c) for m in ("topdown", "bottomup") for c in ("tree", "graph-tree", "graph-dag")}
    for row in rows.values():
        assert set(bench.RESULT_KEYS) <= set(row)
        assert row["n"] > 0 and row["draws"] == row["n"] * row["draws_per_example"]
        assert len(row["times_s"]) == row["repeats"] >= 1
        for key in ("best_s", "median_s", "examples_per_s", "draws_per_s", "regions_per_s", "x_tree"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["mode"], row["contender"], key)
    assert rows["topdown", "tree"]["x_tree"] == 1.0
    assert rows["topdown", "tree"]["draws_per_example"] == rows["topdown", "graph-tree"]["draws_per_example"] == 511
    assert rows["topdown", "graph-dag"]["draws_per_example"] == 769
    assert rows["bottomup", "tree"]["draws_per_example"] == 256
    assert rows["bottomup", "graph-dag"]["draws_per_example"] == 258

    for mode in ("topdown", "bottomup"):
        target = data["targets"][f"dag_per_draw_vs_tree_{mode}"]
        assert math.isfinite(target["value"]) and target["value"] > 0
        assert isinstance(target["pass"], bool)
