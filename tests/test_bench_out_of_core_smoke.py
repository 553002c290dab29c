"""Smoke test of ``benchmarks/bench_out_of_core.py``: the memory and contention sections run in their
subprocesses and write well-formed results (never judged against the targets: they depend on the machine)."""

from __future__ import annotations

import json
import math

import pytest
from bench_smoke_helpers import load_bench

pytestmark = pytest.mark.slow


def test_bench_out_of_core_quick(tmp_path):
    bench = load_bench("bench_out_of_core")
    out = tmp_path / "b.json"
    returned = bench.main(["--quick", "--sections", "memory", "contention", "--out", str(out)])
    data = json.loads(out.read_text())
    assert data["results"] == json.loads(json.dumps(returned["results"]))
    jobs = {(r["section"], r.get("job"), r.get("machine"), r.get("threads")) for r in data["results"]}
    assert {("memory", "sample", None, 1), ("memory", "inspect", None, 1), ("memory", "statistics", None, 1),
            ("memory", "sample_memory", None, 1)} <= jobs
    assert {("contention", None, "quiet", 1), ("contention", None, "quiet", 2)} <= jobs
    for r in data["results"]:
        assert math.isfinite(r["examples_per_s"]) and r["examples_per_s"] > 0
        if r["section"] == "memory":
            assert 50 < r["peak_rss_mib"] < 4096
    sample = next(r for r in data["results"] if r.get("job") == "sample")
    assert 50 < sample["bytes_per_example"] < 400  # 341 events per example, zstd-compressed
    assert [p.name for p in tmp_path.iterdir()] == ["b.json"]
