"""Smoke test of ``benchmarks/bench_sweep_population.py``: it runs, writes well-formed results, and the members of
the population end where the same members trained alone end (never timings: they depend on the machine)."""

from __future__ import annotations

import pytest
from bench_smoke_helpers import load_bench, run_quick


@pytest.mark.slow  # a benchmark script end to end (the slow tier)
def test_bench_sweep_population_quick(tmp_path):
    bench = load_bench("bench_sweep_population")
    data = run_quick(bench, tmp_path)
    assert data["benchmark"] == "sweep_population" and data["config"]["sizes"] == list(bench.QUICK_SIZES)
    rows = data["results"]
    assert [(r["contender"], r["r"]) for r in rows] == [(c, R) for R in bench.QUICK_SIZES for c in ("alone",
                                                                                                  "population")]
    assert all(r["s_per_member"] > 0 and r["x_alone"] > 0 for r in rows)
    assert all(r["max_abs_param_diff"] < 1e-10 for r in rows)
