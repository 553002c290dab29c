"""Smoke test of ``benchmarks/bench_factorial_map.py``: it runs and writes well-formed results.

Only the structure and positivity of the numbers are checked, never timings against the targets
(those depend on the machine and its load).
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_factorial_map.py"


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_factorial_map", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_factorial_map_quick(tmp_path):
    bench = _load_bench()
    out = tmp_path / "b.json"
    returned = bench.main(["--quick", "--out", str(out)])
    data = json.loads(out.read_text())
    assert data["results"] == json.loads(json.dumps(returned["results"]))
    assert not [p.name for p in tmp_path.iterdir() if p.name != "b.json"], "temporary file left behind"

    for key in ("benchmark", "config", "layer", "machine", "results", "enumeration", "enumeration_projection",
                "targets", "total_wall_s"):
        assert key in data
    config = data["config"]
    assert config["quick"] and config["k"] == bench.QUICK["k"] and config["n"] == bench.QUICK["n"]
    assert config["repeats"] == 1
    for key in ("torch", "torch_threads", "platform", "python", "pyro"):
        assert key in data["machine"]
    # what is timed is right: an orthogonal ReLU layer whose factorized MAP is the ReLU gate
    assert data["layer"]["orthogonality_defect"] < 1e-10 and data["layer"]["factorized_map_is_relu_gate"]

    rows = {r["contender"]: r for r in data["results"]}
    assert {"factorized_map", "matmul floor", "matmul floor (contiguous)", "factorized_map (checked)",
            "all-region scores matmul"} <= set(rows)
    for row in rows.values():
        assert set(bench.RESULT_KEYS) <= set(row)
        assert len(row["times_s"]) == row["repeats"] == 1
        for key in ("best_s", "median_s", "gflops", "x_floor"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["contender"], key)
    assert rows["factorized_map"]["target"]
    assert min(rows["matmul floor"]["x_floor"], rows["matmul floor (contiguous)"]["x_floor"]) == 1.0

    enum = data["enumeration"]
    assert [r["k"] for r in enum] == list(range(1, bench.QUICK["enum_max_k"] + 1))
    for r in enum:
        assert r["configs"] == 2 ** r["k"] and r["time_s"] > 0 and r["orthogonal_check"]
    assert math.isfinite(data["enumeration_projection"]["log10_seconds_per_example"])

    target = data["targets"]["factorized_vs_matmul"]
    assert math.isfinite(target["value"]) and target["value"] > 0 and isinstance(target["pass"], bool)


def test_bench_factorial_map_rejects_bad_arguments(tmp_path):
    bench = _load_bench()
    for argv in (["--k", "0"], ["--k", "64", "--d", "32"], ["--enum-time-limit", "0"]):
        with pytest.raises(SystemExit):
            bench.parse_args([*argv, "--out", str(tmp_path / "b.json")])
