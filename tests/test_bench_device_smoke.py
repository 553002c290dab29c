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


def test_recorded_gpu_run_is_a_gpu_run_and_its_numbers_hold():
    """The recorded file comes from a GPU run, names the commit it measured, and says why if a section failed; every
    section that ran holds what the script checks: the device's numbers against the CPU's, the syncs counted."""
    data = json.loads((BENCHMARKS / "results" / "device.json").read_text())
    assert data["summary"]["accelerator"] is True and data["machine"]["device"].startswith("cuda")
    assert data["commit"]
    rows = {r["section"]: r for r in data["results"]}
    assert set(rows) == set(load_bench("bench_device").SECTIONS)
    failed = {name for name, row in rows.items() if row["error"]}
    assert failed == set(data["summary"]["errors"])
    if failed:  # a partial recording says what it is
        assert "re-record" in data["provenance"]
    ran = {name: row for name, row in rows.items() if name not in failed}
    for row in ran.values():
        assert row["cuda_s"] > 0 and row["cpu_s"] > 0 and math.isclose(row["x_cpu"], row["cpu_s"] / row["cuda_s"])
    for name in ("sampling", "train_ladder_student", "compare_student"):
        if name in ran:
            assert isinstance(ran[name]["syncs"], int) and sum(ran[name]["sync_sites"].values()) <= ran[name]["syncs"]
    if "training_step" in ran:
        assert ran["training_step"]["sync_error"] is None and ran["training_step"]["weights_rel_diff"] < 1e-3
    if "sampling" in ran:
        assert ran["sampling"]["label_freq_max_abs_diff"] < ran["sampling"]["label_freq_tolerance"]
    if "posterior" in ran:
        for case in ran["posterior"].values():
            if isinstance(case, dict):
                assert case["log_px_max_abs_diff"] < 1e-9 and case["p_y_max_abs_diff"] < 1e-9
    if "statistics_pass" in ran:
        assert ran["statistics_pass"]["counts_equal"] is True and ran["statistics_pass"]["F_rel_diff"] < 1e-4
    if "compare_student" in ran:
        assert ran["compare_student"]["final_loss_accuracy_max_abs_diff"] < 1e-6
