"""Smoke test of ``benchmarks/bench_demo.py``: it runs the demo's pipeline over seeds and writes well-formed
results (never timings against a target)."""

from __future__ import annotations

import math

import pytest
from bench_smoke_helpers import load_bench, run_quick

pytestmark = pytest.mark.slow  # (ten short trainings and one end-to-end `smaso demo`: about 40 s)


def test_bench_demo_quick(tmp_path):
    data = run_quick(load_bench("bench_demo"), tmp_path)
    assert data["benchmark"] == "demo" and data["config"]["quick"] and data["config"]["seeds"] == 5
    assert [r["seed"] for r in data["results"]] == [0, 1, 2, 3, 4]
    for r in data["results"]:
        assert 0 <= r["accuracy"]["held_out_accuracy"] <= 1 and r["accuracy"]["bayes"] == pytest.approx(1.0)
        assert [a["level"] for a in r["alignment_start"]] == [a["level"] for a in r["alignment_end"]] \
            == [a["level"] for a in r["control_end"]] == [0, 1, 2, 3]
        assert r["steps"][0] == 0 and r["steps"][-1] == 60
        assert [h["step"] for h in r["shuffled_history"]] == r["steps"]
    s = data["summary"]
    assert s["seeds"] == [0, 1, 2, 3, 4] and s["evaluation"] == "held-out" and len(s["levels"]) == 4
    assert set(s["controls"]) == {"init", "shuffled"} and len(s["levels"][1]["per_seed"]["F_local"]) == 5
    assert all(math.isfinite(s["levels"][1][k]) for k in ("F_propagated", "F_propagated_floor", "F_local_seed_se"))
    assert len(data["wall"]["seconds"]) == 1 and data["wall"]["median_s"] > 0
    m = data["measurement"]  # the batched statistics of the 10 students: their one-by-one sums to round-off
    assert m["members"] == 10 and m["groups"] == 10 and len(m["batched_cpu_s"]) == 3
    assert 0 <= m["max_relative_difference"] < 1e-12
    for key in ("loadavg_start", "loadavg_end"):
        assert key in data["machine"]
