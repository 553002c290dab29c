"""Smoke test of ``benchmarks/bench_event_sums.py``: it runs, every formulation of the per-event sums agrees with
float64 sums of the same values, and the results are well formed (never timings against a target)."""

from __future__ import annotations

import importlib.util
import math

import pytest
from bench_smoke_helpers import load_bench, run_quick


@pytest.mark.slow  # a benchmark script end to end (the slow tier)
def test_bench_event_sums_quick(tmp_path):
    bench = load_bench("bench_event_sums")
    data = run_quick(bench, tmp_path)

    for key in ("benchmark", "config", "problems", "machine", "results", "estimates", "total_wall_s"):
        assert key in data
    assert data["config"]["quick"] and data["config"]["repeats"] == 1
    # depth 4: own sums at the 4 hidden levels, Fc and Gp~ sums into levels 1..3
    names = [p["name"] for p in data["problems"]]
    assert sorted(names) == sorted([f"own {l}" for l in range(4)] + [f"{k} {l}" for k in ("fc", "gp")
                                                                     for l in range(1, 4)])
    rows = {r["contender"]: r for r in data["results"]}
    segments = {"segment sums (batch-major)", "segment sums (region-major)"}
    # the native sums (numba, not a dependency of the library) where numba is installed, else a reason
    native = set(bench.NATIVE.values())
    has_numba = importlib.util.find_spec("numba") is not None
    assert set(bench.SUMS) | segments | {"plain", "explicit stacked", "explicit stacked (batch-major)",
                                         "accumulator add", "accumulator sums", "accumulator add (compiled)",
                                         "compiled transpose", "compiled sums from rows", "transpose",
                                         "read floor"} | (native if has_numba else set()) == set(rows)
    info = data["estimates"]["native"]
    if has_numba:
        # every own, fc and gp sum and every pair count of the batch against float64 sums of the same values: the
        # float64 totals of one batch to float64 round-off, float32 sums to float32 round-off
        assert 0 <= rows[bench.NATIVE["totals"]]["max_rel_err"] < 1e-12
        for key in ("batch", "node"):
            assert 0 <= rows[bench.NATIVE[key]]["max_rel_err"] < 1e-5, key
            for name in (f"stats_over_plain_native_{key}", f"stats_over_plain_native_{key}_floor",
                         f"native_{key}_over_accumulator_sums"):
                assert math.isfinite(info[name]) and info[name] > 0, name
            assert info[f"stats_over_plain_native_{key}_floor"] < info[f"stats_over_plain_native_{key}"]
        for name in ("compile_s", "explicit_batch_major_over_plain", "explicit_node_major_over_plain"):
            assert math.isfinite(info[name]) and info[name] > 0, name
    else:
        assert "numba is not installed" in info["reason"]
    # the compiled batch sums (kernel="compiled") against the eager ones of the same batch: float32 round-off
    assert 0 <= rows["accumulator add (compiled)"]["max_rel_err"] < 1e-5
    for name in segments:  # every problem's sums at once: within float32 round-off of the float64 sums
        assert 0 <= rows[name]["max_rel_err"] < 1e-5, name
    for name in bench.SUMS:  # float32 sums of 256 rows: within float32 round-off of the float64 sums
        assert 0 <= rows[name]["max_rel_err"] < 1e-5, name
        assert set(rows[name]["per_problem_best_ms"]) == set(names)
    for row in rows.values():
        assert len(row["times_s"]) == 1 and math.isfinite(row["best_ms"]) and row["best_ms"] > 0
    est = data["estimates"]
    assert est["fastest_examples_major"] in bench.EXAMPLES_MAJOR and est["target"] == bench.STATS_TARGET
    for key in ("stats_over_plain_now", "stats_over_plain_scatter_add", "stats_over_plain_read_floor",
                "stats_over_plain_segment_sums", "stats_over_plain_examples_major_record",
                "stats_over_plain_examples_major_with_transpose", "accumulation_budget_ms_at_target",
                "stats_over_plain_compiled", "compiled_add_over_eager_add", "compile_s",
                "stats_over_plain_compiled_examples_major_record"):
        assert math.isfinite(est[key]), key
