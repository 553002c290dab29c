"""``examples/graph_overlap.py`` (issue 17): a tree against overlapping receptive fields, in its quick mode.

The example's controls are asserted exactly (Thm 3 on fully informative ladders; Eq 115 with 2^s - 1
parents), its Eq 115 numbers against their definitions (one parent: best = equal weights = single; more
parents: best <= best single), and its measured numbers for structure and bounds (errors finite and
non-negative, floors present, the student's accuracy not above the Bayes-optimal one beyond sampling noise).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

EXAMPLE = Path(__file__).parents[1] / "examples" / "graph_overlap.py"


def _load():
    spec = importlib.util.spec_from_file_location("graph_overlap", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_graph_overlap_quick(tmp_path, capsys):
    mod = _load()
    n = 3000
    res = mod.main(["--quick", "--seeds", "1", "--n", str(n), "--steps", "200", "--json", str(tmp_path / "o.json"),
                    "--out", str(tmp_path / "o.png")])
    assert (tmp_path / "o.json").stat().st_size > 0 and (tmp_path / "o.png").stat().st_size > 0
    ctrl = res["controls"]
    assert ctrl["fully_informative_tree"] < 1e-10 and ctrl["fully_informative_overlap"] < 1e-10
    demo = dict(zip(ctrl["eq115_demo"]["K"], ctrl["eq115_demo"]["best"], strict=True))
    assert demo[1] > 0.1 and demo[2] > 1e-3 and demo[3] < 1e-10
    for run in res["runs"]:
        assert run["accuracy"] <= run["bayes"] + 4 / math.sqrt(n)
        for row in run["levels"]:
            for key in mod.KEYS:
                if key in row:
                    assert math.isfinite(row[key]) and row[key] >= 0
                    assert math.isfinite(row[f"{key}_floor"]) and row[f"{key}_floor"] >= 0
        for e in run["eq115"]:
            if e["K"] == 1:
                assert abs(e["best"] - e["best_single"]) < 1e-12 and abs(e["best"] - e["equal_weights"]) < 1e-12
            else:
                assert e["best"] <= e["best_single"] + 1e-12
    summary = res["summary"]
    assert set(summary["tree"]["eq115_by_parents"]) == set(summary["tree-matched"]["eq115_by_parents"]) == {1}
    assert set(summary["overlap"]["eq115_by_parents"]) == {1, 2}
    # the matched tree differs from the overlap ladder by the overlap alone: the same regions per level
    assert [r["regions"] for r in res["runs"]] == [[1, 3, 9, 27], [1, 6, 13, 27], [1, 6, 13, 27]]
    assert [r["max_parents"] for r in res["runs"]] == [1, 1, 2]
    for row in summary["overlap"]["levels"]:
        for key in ("F_propagated", "focus"):
            if key in row and math.isfinite(row[key]["median"]):
                assert set(row[key]["p_vs"]) == {"tree-matched", "tree"}
    out = capsys.readouterr().out
    assert "Eq 115" in out and "controls" in out
