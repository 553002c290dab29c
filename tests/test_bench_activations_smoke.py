"""Smoke test of ``benchmarks/bench_activations.py``: it runs and writes well-formed results.

Only the structure and positivity of the numbers are checked, never timings against the targets
(those depend on the machine and its load).
"""

from __future__ import annotations

import math

import pytest
from bench_smoke_helpers import load_bench, run_quick


@pytest.mark.slow  # a benchmark script end to end (the slow tier)
def test_bench_activations_quick(tmp_path):
    bench = load_bench("bench_activations")
    data = run_quick(bench, tmp_path, "a.json")

    for key in ("benchmark", "config", "machine", "results", "targets", "speedups", "total_wall_s"):
        assert key in data
    assert data["config"]["n"] == 100_000 and data["config"]["repeats"] == 2 and data["config"]["quick"]
    for key in ("torch", "torch_threads", "platform", "python", "loadavg_start", "loadavg_end"):
        assert key in data["machine"]

    rows = {r["contender"]: r for r in data["results"]}
    assert {"silu", "beta-swish", "naive", "beta-swish-learnable", "naive-learnable",
            "beta-swish-per-channel"} <= set(rows)
    assert rows["silu"]["x_silu"] == 1.0
    for row in rows.values():
        assert set(bench.RESULT_KEYS) <= set(row)
        assert len(row["times_s"]) == row["repeats"] == 2
        for key in ("best_s", "median_s", "elements_per_s", "x_silu", "x_silu_median"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["contender"], key)
    assert rows["beta-swish-per-channel"]["n"] == 100_000 // 64 * 64 and not rows["beta-swish-per-channel"]["target"]
    compiled = {"beta-swish-compiled", "beta-swish-learnable-compiled"} & set(rows)
    assert compiled in (set(), {"beta-swish-compiled", "beta-swish-learnable-compiled"})  # both, or none where
    assert data["config"]["compile"]  # torch.compile cannot run
    for key in ("fixed_vs_silu", "learnable_vs_silu") + (("fixed_compiled_vs_silu", "learnable_compiled_vs_silu")
                                                         if compiled else ()):
        target = data["targets"][key]
        assert math.isfinite(target["value"]) and target["value"] > 0 and isinstance(target["pass"], bool)
    assert all(math.isfinite(v) and v > 0 for v in data["speedups"].values())


def test_bench_activations_rejects_bad_arguments():
    bench = load_bench("bench_activations")
    for argv in (["--beta", "1.0"], ["--beta", "0"], ["--n", "0"], ["--channels", "-1"]):
        with pytest.raises(SystemExit):
            bench.parse_args(argv)
