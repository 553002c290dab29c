"""Smoke test of ``benchmarks/bench_student.py``: it runs and writes well-formed results.

Only the structure and positivity of the numbers are checked, never timings against the targets
(those depend on the machine and its load).
"""

from __future__ import annotations

import math

import pytest
from bench_smoke_helpers import load_bench, run_quick


@pytest.mark.slow  # a benchmark script end to end (the slow tier)
def test_bench_student_quick(tmp_path):
    bench = load_bench("bench_student")
    data = run_quick(bench, tmp_path)

    for key in ("benchmark", "config", "ladder", "student", "dense", "machine", "results", "targets", "total_wall_s"):
        assert key in data
    config = data["config"]
    assert config["n"] == bench.QUICK_N and config["repeats"] == 1 and config["quick"]
    assert config["judged_accumulation"] == "float32"
    assert config["batches"] == math.ceil(config["n"] / config["batch_size"])
    assert data["ladder"]["total_regions"] == 341
    for key in ("torch", "torch_threads", "platform", "python", "pyro"):
        assert key in data["machine"]

    # the dense reference does the student's multiply-adds, level by level
    assert data["dense"]["macs_per_level"] == data["student"]["macs_per_level"]
    assert data["dense"]["dims"][-1] == data["student"]["widths"][0]

    rows = {r["contender"]: r for r in data["results"]}
    expected = {"plain", "explicit fwd+bwd", "explicit stacked", "stats f64", "stats f32", "reference stats f32",
                "dense", "plain (leaf events)", "plain (one-hot x, declared)", "stats f32 compiled"}
    expected |= {f"{name} (BN)" for name in ("plain", "explicit fwd+bwd", "explicit stacked", "stats f64",
                                             "stats f32", "reference stats f32", "stats f32 compiled")}
    assert expected <= set(rows)
    for row in rows.values():
        assert set(bench.RESULT_KEYS) <= set(row)
        assert row["n"] == config["n"] and row["batches"] == config["batches"]
        assert len(row["times_s"]) == len(row["process_cpu_s"]) == row["repeats"] >= 1
        for key in ("best_s", "median_s", "batch_min_sum_s", "examples_per_s", "ms_per_batch", "x_plain"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["contender"], key)
    assert rows["stats f64"]["accumulation"] == "float64" and rows["stats f32"]["accumulation"] == "float32"
    assert rows["stats f64 (BN)"]["batch_norm"] and not rows["stats f64"]["batch_norm"]
    assert rows["plain"]["x_plain"] == 1.0

    for key in ("stats_overhead", "stats_overhead_float64", "explicit_backward_overhead", "stats_vs_reference",
                "stats_vs_reference_bn", "stats_overhead_bn",
                "stats_overhead_bn_float64", "stats_overhead_bn_vs_autograd", "explicit_backward_overhead_bn",
                "locally_connected_vs_dense", "locally_connected_vs_dense_out_of_place", "explicit_stacked_overhead",
                "stats_over_explicit_stacked", "stats_over_explicit_stacked_bn", "explicit_stacked_over_explicit_bn",
                "locally_connected_vs_dense_events", "locally_connected_vs_dense_one_hot_declared",
                "stats_overhead_compiled", "stats_compiled_over_eager", "stats_overhead_bn_compiled",
                "locally_connected_vs_dense_events_compiled", "locally_connected_vs_dense_one_hot_declared_compiled",
                "locally_connected_compiled_vs_dense_compiled"):
        target = data["targets"][key]
        assert math.isfinite(target["value"]) and target["value"] > 0
        for stat in ("value_median", "value_batch_min"):
            assert math.isfinite(target[stat]) and target[stat] > 0
    for key in ("stats_overhead", "stats_overhead_bn", "locally_connected_vs_dense", "stats_vs_reference",
                "stats_vs_reference_bn", "locally_connected_vs_dense_events"):
        assert data["targets"][key]["judged"] and isinstance(data["targets"][key]["pass"], bool)
    assert not data["targets"]["stats_overhead_float64"]["judged"]
    assert not data["targets"]["locally_connected_vs_dense_out_of_place"]["judged"]
    assert not data["targets"]["locally_connected_vs_dense_one_hot_declared"]["judged"]
    # the compiled LC rows: judged on leaf events, the one-off compilation recorded beside the steady state
    assert data["targets"]["locally_connected_vs_dense_events_compiled"]["judged"]
    assert not data["targets"]["locally_connected_compiled_vs_dense_compiled"]["judged"]
    for name in ("plain (leaf events, compiled)", "plain (one-hot x, declared, compiled)", "dense (torch.compile)"):
        assert math.isfinite(rows[name]["compile_s"]) and rows[name]["compile_s"] >= 0
    assert "amortised_after_batches" in rows["plain (leaf events, compiled)"]
    # the stats epoch less its accumulation: a reported floor, not a target
    assert data["targets"]["explicit_stacked_overhead"]["numerator"] == "explicit stacked"
    assert not data["targets"]["explicit_stacked_overhead"]["judged"] and "pass" not in data["targets"][
        "explicit_stacked_overhead"]
    # BN's statistics are judged against the library's explicit BN pass, not autograd's
    assert data["targets"]["stats_overhead_bn"]["denominator"] == "explicit fwd+bwd (BN)"
    assert not data["targets"]["stats_overhead_bn_vs_autograd"]["judged"]
    # the stats rows time the accumulator's setup and result() as part of the epoch
    stats = rows["stats f64"]
    assert 0 < stats["setup_and_result_s"] < stats["batch_min_sum_s"] <= stats["best_s"]
