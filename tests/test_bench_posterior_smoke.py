"""Smoke test of ``benchmarks/bench_posterior.py``: it runs and writes well-formed results.

Only the structure and positivity of the numbers are checked, never timings against the targets
(those depend on the machine and its load).
"""

from __future__ import annotations

import math

import pytest
import torch
from bench_smoke_helpers import load_bench, run_quick

from teachers.ladder import Ladder


@pytest.mark.slow  # a benchmark script end to end (the slow tier)
def test_bench_posterior_quick(tmp_path):
    bench = load_bench("bench_posterior")
    data = run_quick(bench, tmp_path)
    for key in ("benchmark", "config", "ladders", "machine", "results", "targets", "total_wall_s"):
        assert key in data
    assert data["benchmark"] == "posterior" and data["config"]["quick"] and data["config"]["repeats"] == 1
    assert data["ladders"]["topdown-onehot"]["regions"] == 341
    for key in ("loadavg_start", "loadavg_end", "torch_threads"):
        assert key in data["machine"]
    rows = data["results"]
    assert len(rows) == len(bench.CASES) * len(bench.CONTENDERS) * len(bench.SETTINGS)
    for row in rows:
        assert set(bench.RESULT_KEYS) <= set(row)
        assert len(row["times_s"]) == row["repeats"] >= 1
        for key in ("median_s", "per_query_s", "x_plain", "speedup_vs_reference", "batch_gain"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["contender"], key)
    for case in data["ladders"].values():  # the contenders computed the same numbers
        for pair in case["agreement"].values():
            assert pair["label"] < 1e-10
    for t in data["targets"].values():
        assert math.isfinite(t["value"]) and isinstance(t["pass"], bool)


def test_plain_baseline_is_exact():
    """The baseline is the same posterior: it would not be a fair comparison otherwise."""
    from inference.posterior import posterior

    bench = load_bench("bench_posterior")
    for mode in ("topdown", "bottomup"):
        lad = Ladder.random(depth=2, branching=3, events=3, mode=mode, seed=1, emission="gaussian", sigma=0.7)
        x = torch.randn(20, 9, 3, dtype=torch.float64)
        log_z, label = bench.plain_posterior(lad, x)
        ref = posterior(lad, x)
        assert (log_z - ref.log_evidence).abs().max().item() < 1e-12
        assert (label - ref.label).abs().max().item() < 1e-12
