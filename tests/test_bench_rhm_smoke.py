"""Smoke test of ``benchmarks/bench_rhm.py``: it runs and writes well-formed results whose checks hold (the
posterior one-hot on the sampled rows, distinct and disjoint draws), and its phases are right in-process.

Only the structure and the exactness checks are asserted, never timings (they depend on the machine and its load).
"""

from __future__ import annotations

import math

import pytest
from bench_smoke_helpers import load_bench, run_quick


@pytest.mark.slow  # a benchmark script end to end, its phases in subprocesses (the slow tier)
def test_bench_rhm_quick(tmp_path):
    bench = load_bench("bench_rhm")
    data = run_quick(bench, tmp_path)
    for key in ("benchmark", "config", "ladder", "machine", "results", "chunks", "total_wall_s"):
        assert key in data
    assert data["benchmark"] == "rhm" and data["config"]["quick"] and data["config"]["repeats"] == 1
    assert "subprocess" in data["config"]["memory_method"]
    for key in ("loadavg_start", "loadavg_end", "torch_threads"):
        assert key in data["machine"]
    rows = {r["job"]: r for r in data["results"]}
    assert list(rows) == list(bench.JOBS)
    for row in rows.values():
        assert set(bench.RESULT_KEYS) <= set(row)
        assert len(row["times_s"]) == row["repeats"] == 1 and row["median_s"] > 0
        assert row["peak_rss_mib"] >= row["rss_before_mib"] > 0 and row["added_mib"] >= 0
    n, n_post = data["config"]["n_sample"], data["config"]["n_posterior"]
    assert rows["sample"]["rows"] == rows["distinct"]["rows"] == n and rows["posterior"]["rows"] == n_post
    assert rows["sample"]["checks"]["posterior_rows_are_its_first"]
    assert rows["distinct"]["checks"]["distinct_inputs"] == n
    assert rows["split"]["checks"]["distinct_inputs"] == n + n_post  # disjoint, each distinct
    post = rows["posterior"]["checks"]
    assert post["accuracy"] == 1.0 and post["max_label_error"] == 0.0 and post["max_log_evidence_error"] < 1e-10
    assert post["auto_chunk"] == 1024  # v = m = 8, L = 3: 2^18 // (R_2 m K = 4 * 8 * 8)
    chunks = data["chunks"]
    assert [c["chunk_size"] for c in chunks[0]["chunks"]] == ["auto", 16, 1024]
    assert [(c["v"], c["L"]) for c in chunks] == [(8, 3), (4, 3)]
    for c in chunks:
        assert set(bench.CHUNK_KEYS) <= set(c)
        assert c["checks"]["accuracy"] == 1.0 and c["checks"]["max_label_error"] == 0.0
        assert math.isfinite(c["auto_over_best"]) and c["auto_over_best"] > 0
        assert c["chunks"][0]["effective_chunk"] == c["auto_chunk"]
        for r in c["chunks"]:
            assert len(r["times_s"]) == len(r["sys_s"]) == len(r["minor_faults"]) == 1 and r["minor_faults"][0] >= 0


def test_phases_in_process():
    """Each phase's checks on a small RHM, run here rather than in a subprocess (the default tier)."""
    bench = load_bench("bench_rhm")
    cfg = {"v": 4, "s": 2, "L": 3, "seed": 1, "n_sample": 300, "n_posterior": 50, "threads": None}
    out = {j: bench.job(j, cfg) for j in bench.JOBS}
    assert out["build"]["checks"]["regions"] == 15 and out["build"]["checks"]["log10_p_max"] == pytest.approx(
        math.log10(4 * 4**7))
    assert out["sample"]["checks"]["posterior_rows_are_its_first"]
    assert out["distinct"]["checks"]["distinct_inputs"] == 300
    assert out["split"]["checks"]["distinct_inputs"] == 350
    post = out["posterior"]["checks"]
    assert post["accuracy"] == 1.0 and post["max_label_error"] == 0.0 and post["max_log_evidence_error"] < 1e-10
    with pytest.raises(ValueError, match="unknown"):
        bench.job("nope", cfg)
    assert bench._around(64) == [None, 16, 32, 128, 256]
    with pytest.raises(SystemExit):
        bench.parse_args(["--chunk-ladders", "8:3"])  # v:L:rows wanted
