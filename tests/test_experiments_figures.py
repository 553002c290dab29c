"""The experiment figures quoted in docs/experiments.md and the README are those of the recorded JSON
(``benchmarks/results/digits_table2.json``, ``overfitting.json``), not typed by hand."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = (ROOT / "docs" / "experiments.md").read_text()
README = (ROOT / "README.md").read_text()


def _json(name: str) -> dict:
    return json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text())


def _interval(row: dict, key: str, sign: str = "") -> str:
    return f"{row[key]:{sign}.3f} [{row[key + '_lo']:{sign}.3f}, {row[key + '_hi']:{sign}.3f}]"


def test_the_digits_tables_are_the_recorded_ones():
    assert _json("digits_table2")["table"].strip() in EXPERIMENTS


def test_the_overfitting_table_and_headline_follow_the_json():
    d = _json("overfitting")
    for r in d["training"]["main"]["rows"]:
        head = f"| {r['N']} | {_interval(r, 'test_err_final')} | {_interval(r, 'test_err_best')} | "
        assert head + _interval(r, "harm", "+") in EXPERIMENTS, head
    for r in d["training"]["control"]["rows"][:4]:
        assert _interval(r, "harm", "+") in EXPERIMENTS, r["N"]
    n32 = d["training"]["main"]["rows"][1]
    assert n32["N"] == 32 and _interval(n32, "harm", "+") in README
    c = d["crossing_over_inits"]
    assert (f"{c['crosses']} of {c['inits']} inits cross, {c['crosses_frac']:.2f} [{c['crosses_lo']:.2f}, "
            f"{c['crosses_hi']:.2f}]") in EXPERIMENTS
    assert f"{c['crosses']} of {c['inits']} initialisations cross" in README
