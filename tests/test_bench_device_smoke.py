"""Smoke test of ``benchmarks/bench_device.py`` on the CPU (CI has no GPU): it runs every section and writes
well-formed results.

On the CPU there are no device syncs to count (``syncs`` is absent or ``None``) and no device side to compare;
the CUDA run's numbers are recorded in ``benchmarks/results/device.json`` when a GPU was lent, and that file is
checked here for what a GPU run must hold. Timings are never judged.
"""

from __future__ import annotations

import json
import math

import pytest
from bench_smoke_helpers import BENCHMARKS, load_bench, run_quick


@pytest.mark.slow  # a benchmark script end to end (the slow tier)
def test_bench_device_quick_on_the_cpu(tmp_path):
    bench = load_bench("bench_device")
    data = run_quick(bench, tmp_path)
    assert data["benchmark"] == "device" and data["config"]["device"] == "cpu" and data["config"]["quick"]
    assert data["summary"]["accelerator"] is False and "no accelerator" in data["summary"]["note"]
    assert data["summary"]["errors"] == {}
    rows = {r["section"]: r for r in data["results"]}
    assert set(rows) == set(bench.SECTIONS)
    for name, row in rows.items():
        timed = [row] if "cpu_s" in row else [v for v in row.values() if isinstance(v, dict)]
        assert timed, name
        for r in timed:
            assert math.isfinite(r["cpu_s"]) and r["cpu_s"] > 0 and r["x_cpu"] == 1.0, name
            assert not any(k.startswith("cuda") for k in r), name


def test_sync_helpers_are_inert_off_cuda():
    import torch

    bench = load_bench("bench_device")
    box: dict = {}
    with bench.count_syncs(torch.device("cpu"), box):
        torch.ones(3).sum().item()
    assert box == {"syncs": None, "sync_sites": None}
    assert bench.sync_error(torch.device("cpu"), lambda: None).startswith("n/a")


def test_recorded_gpu_run_is_whole():
    """The recorded file comes from a GPU run: every section ran without an error, on CUDA, with its syncs counted,
    and the device's numbers agree with the CPU's."""
    data = json.loads((BENCHMARKS / "results" / "device.json").read_text())
    assert data["summary"]["accelerator"] is True and data["machine"]["device"].startswith("cuda")
    assert data["summary"]["errors"] == {}
    rows = {r["section"]: r for r in data["results"]}
    assert set(rows) == set(load_bench("bench_device").SECTIONS)
    for name in ("training_step", "statistics_pass"):
        assert rows[name]["sync_error"] is None, (name, rows[name]["sync_error"])
    for name in ("sampling", "train_ladder_student", "compare_student"):
        assert isinstance(rows[name]["syncs"], int) and rows[name]["cuda_s"] > 0, name
    for case in rows["posterior"].values():
        if isinstance(case, dict):
            assert case["log_px_max_abs_diff"] < 1e-9 and case["p_y_max_abs_diff"] < 1e-9
    assert rows["sampling"]["label_freq_max_abs_diff"] < rows["sampling"]["label_freq_tolerance"]
    assert rows["statistics_pass"]["counts_equal"] is True and rows["statistics_pass"]["F_rel_diff"] < 1e-4
