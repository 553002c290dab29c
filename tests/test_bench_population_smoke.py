"""Smoke test of ``benchmarks/bench_population.py``: it runs and writes well-formed results.

Only the structure and positivity of the numbers are checked, and that the population's members end
where the same members trained alone end; never timings against the target (those depend on the
machine and its load).  The run writes into ``tmp_path`` only, never ``benchmarks/results/``.
"""

from __future__ import annotations

import math

import pytest
from bench_smoke_helpers import load_bench, run_quick


@pytest.mark.slow  # a benchmark script end to end (the slow tier)
def test_bench_population_quick(tmp_path):
    bench = load_bench("bench_population")
    data = run_quick(bench, tmp_path)

    for key in ("benchmark", "config", "baseline", "machine", "results", "targets", "correctness", "total_wall_s"):
        assert key in data
    assert data["benchmark"] == "population"
    config = data["config"]
    assert config["quick"] and config["repeats"] == 1 and config["threads"] == 1
    assert config["sizes"] == list(bench.QUICK_SIZES) and config["steps"] == bench.QUICK_STEPS
    assert (config["batch"], config["n_train"], config["k"]) == (256, 8192, 4)
    assert (config["optimizer"], config["schedule"], config["loss"]) == ("adam", "onecycle", "l1")
    for key in ("torch", "torch_threads", "platform", "python", "loadavg_start", "loadavg_end"):
        assert key in data["machine"]

    rows = {(tuple(r["widths"]), r["r"], r["contender"]): r for r in data["results"]}
    assert set(rows) == {(w, s, c) for w in bench.WIDTHS for s in bench.QUICK_SIZES
                         for c in ("sequential", "population")}
    for key, row in rows.items():
        assert set(bench.RESULT_KEYS) <= set(row)
        assert len(row["times_s"]) == row["repeats"] == 1
        assert row["steps"] == bench.QUICK_STEPS
        for name in ("best_s", "median_s", "per_restart_s", "per_restart_s_median", "x_sequential"):
            assert math.isfinite(row[name]) and row[name] > 0, (key, name)
        if row["contender"] == "sequential":
            assert row["x_sequential"] == 1.0 and row["max_abs_param_diff"] is None
        else:
            assert row["members_timed"] == row["r"] and not row["extrapolated"]
            assert row["members_compared"] == min(row["r"], data["config"]["seq_members"])
            assert 0 <= row["max_abs_param_diff"] < 1e-10 and row["members_over_tolerance"] == 0, key

    correctness = data["correctness"]
    assert correctness["r"] == min(bench.QUICK_SIZES)
    assert 0 <= correctness["max_abs_param_diff"] < 1e-10 and correctness["pass"] is True
    assert set(correctness["per_widths"]) == {",".join(map(str, w)) for w in bench.WIDTHS}

    assert len(data["targets"]) == len(bench.WIDTHS)
    for target in data["targets"].values():
        assert target["r"] == max(bench.QUICK_SIZES)
        assert math.isfinite(target["value"]) and target["value"] > 0
        assert isinstance(target["pass"], bool)
