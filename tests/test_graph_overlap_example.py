"""``examples/graph_overlap.py`` (issue 17): a tree against overlapping receptive fields, in its quick mode.

The example's controls are asserted exactly (Thm 3 on fully informative ladders; Eq 115 with 2^s - 1
parents), its Eq 115 numbers against their definitions (one parent: best = equal weights = single; more
parents: best <= best single), and its measured numbers for structure and bounds (errors finite and
non-negative, floors present, the student's accuracy not above the Bayes-optimal one beyond sampling noise).
The ``shared-input`` control has the matched tree's law exactly (its exact statistics, samples and Bayes
classifier are the tree's) on the overlap ladder's graph.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).parents[1] / "examples" / "graph_overlap.py"


def _load():
    spec = importlib.util.spec_from_file_location("graph_overlap", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow  # the example's quick run (about 3 s) (slow tier: default-tier budget)
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
    summary = res["summary"]["ladders"]
    assert set(summary["tree"]["eq115_by_parents"]) == set(summary["tree-matched"]["eq115_by_parents"]) == {1}
    assert set(summary["overlap"]["eq115_by_parents"]) == set(summary["shared-input"]["eq115_by_parents"]) == {1, 2}
    # the matched tree has the overlap ladder's regions per level; shared-input has its graph
    assert [r["regions"] for r in res["runs"]] == [[1, 3, 9, 27], [1, 6, 13, 27], [1, 6, 13, 27], [1, 6, 13, 27]]
    assert [r["max_parents"] for r in res["runs"]] == [1, 1, 2, 2]
    by = {r["ladder"]: r for r in res["runs"]}
    assert by["shared-input"]["bayes"] == by["tree-matched"]["bayes"]  # the same law, the same test data
    assert [(t["a"], t["b"], t["paired"]) for t in res["summary"]["tests"]] == [
        (a, b, paired) for a, b, paired in mod.COMPARISONS]
    assert res["bonferroni"]["tests"] == len(mod.TABLE_ROWS) * len(mod.COMPARISONS)
    # strict JSON (NaN as null), with the machine, its load and the table the doc renders from it
    record = json.loads((tmp_path / "o.json").read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}"))
    assert record["machine"]["loadavg_start"] is not None and record["wall_s"] > 0
    assert mod.errors_table(record).count("\n") == len(mod.TABLE_ROWS) + 1
    out = capsys.readouterr().out
    assert "Eq 115" in out and "controls" in out


def test_shared_input_ladder_has_the_tree_law_on_the_overlap_graph():
    mod = _load()
    from teachers.regions import conv1d_parents
    from teachers.sampling import sample_ladder
    from teachers.statistics import exact_statistics

    tree = mod.ladder("tree-matched", 4, 0.5)
    shared = mod.ladder("shared-input", 4, 0.5)
    assert shared.parents == conv1d_parents(27, [3, 3, 6], [2, 2, 1])
    a, b = exact_statistics(shared), exact_statistics(tree)
    for la, lb in zip(a.marginals, b.marginals, strict=True):
        for x, y in zip(la, lb, strict=True):
            torch.testing.assert_close(x, y, rtol=0, atol=1e-12)
    # every table row is the tree's row of the tree parent's event, whatever the other parent's event
    for l in range(1, 4):
        for i, ps in enumerate(shared.parents[l]):
            (tp,) = tree.parents[l][i]
            t = shared.region_tables[l][i].reshape(*(shared.events[l - 1],) * len(ps), -1)
            rows = t.movedim(ps.index(tp), 0)
            torch.testing.assert_close(rows, tree.region_tables[l][i].reshape(-1, *(1,) * (len(ps) - 1), rows.shape[-1])
                                       .expand_as(rows), rtol=0, atol=0)
    assert torch.equal(sample_ladder(shared, 500, 1).z, sample_ladder(tree, 500, 1).z)


def test_shared_input_ladder_refuses_a_graph_without_the_tree_parent():
    mod = _load()
    from teachers.regions import conv1d_parents

    tree = mod.ladder("tree", 0, 0.5)  # 27, 9, 3, 1 regions: not the overlap graph's
    with pytest.raises(ValueError, match="regions"):
        mod.shared_input_ladder(tree, conv1d_parents(27, [3, 3, 6], [2, 2, 1]))
    matched = mod.ladder("tree-matched", 0, 0.5)
    parents = list(conv1d_parents(27, [3, 3, 6], [2, 2, 1]))
    parents[2] = tuple((0,) for _ in parents[2])  # every level-2 region under region 0 alone
    with pytest.raises(ValueError, match="tree parent"):
        mod.shared_input_ladder(matched, parents)
