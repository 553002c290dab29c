"""Smoke test of ``benchmarks/bench_rhm_posterior.py``: it runs and writes well-formed results, and its rows are
derivations of the RHM (the posterior is one-hot on their classes).

Only the structure and the exactness checks are asserted, never timings (they depend on the machine and its load).
"""

from __future__ import annotations

import math

import pytest
import torch
from bench_smoke_helpers import load_bench, run_quick

from teachers.ladder import Ladder


@pytest.mark.slow  # a benchmark script end to end (the slow tier)
def test_bench_rhm_posterior_quick(tmp_path):
    bench = load_bench("bench_rhm_posterior")
    data = run_quick(bench, tmp_path)
    for key in ("benchmark", "config", "ladder", "memory", "machine", "results", "total_wall_s"):
        assert key in data
    assert data["benchmark"] == "rhm_posterior" and data["config"]["quick"] and data["config"]["repeats"] == 1
    for key in ("loadavg_start", "loadavg_end", "torch_threads"):
        assert key in data["machine"]
    rows = data["results"]
    assert [r["chunk_size"] for r in rows] == ["auto", 16, 1024]
    for row in rows:
        assert set(bench.RESULT_KEYS) <= set(row)
        assert len(row["times_s"]) == row["repeats"] == 1
        assert math.isfinite(row["rows_per_s"]) and row["rows_per_s"] > 0
        assert row["accuracy"] == 1.0 and row["max_label_error"] == 0.0 and row["max_log_evidence_error"] < 1e-10
    assert data["memory"]["peak_rss_mib_end"] >= data["memory"]["peak_rss_mib_before_posterior"] > 0


def test_drawn_derivations_follow_the_rules():
    """Each drawn row is a derivation: every level's events are a production of their parents' (checked by
    climbing the rules back up), and the classes are the roots."""
    bench = load_bench("bench_rhm_posterior")
    lad = Ladder.rhm(4, 2, 2, 2, 3, seed=0)
    leaves, y = bench.draw_derivations(lad, 200, seed=3)
    assert leaves.shape == (200, 8) and y.shape == (200,)
    z = leaves
    for l in range(lad.depth - 1, -1, -1):
        rules = lad.productions[l].rules  # (m, K, s) shared by the level
        pairs = z.view(200, -1, 1, 1, 2) == rules[None, None]  # (n, R_l, m, K, s)
        hit = pairs.all(-1).any(-1)  # (n, R_l, m): which parent events produce each pair
        assert bool((hit.sum(-1) == 1).all())  # exactly one (the rules are unambiguous)
        z = hit.int().argmax(-1)
    assert torch.equal(z.view(-1), y)
    with pytest.raises(ValueError, match="every level needs productions"):
        bench.draw_derivations(Ladder.random(depth=2, branching=2, events=3, seed=0), 4, seed=0)
