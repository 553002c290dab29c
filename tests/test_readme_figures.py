"""The benchmark table (docs/benchmarks.md), the README's demo figures and its notebook times come from the
recorded JSON (``benchmarks/report.py``)."""

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS_DOC = ROOT / "docs" / "benchmarks.md"
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?")


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("report", ROOT / "benchmarks" / "report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_table_is_the_generated_one(report):
    doc = BENCHMARKS_DOC.read_text()
    stale = "docs/benchmarks.md's benchmark table is stale: run python benchmarks/report.py --write"
    assert report.readme_table(doc) == report.table(), stale


def test_write_targets_are_the_files_that_hold_each_generated_part(report):
    """``--write`` rewrites the README (the notebook table) and docs/benchmarks.md (the benchmark table); each
    part lives in exactly one of them, so no stale copy can hide in the other."""
    assert [p.resolve() for p in report.TARGETS] == [ROOT / "README.md", BENCHMARKS_DOC]
    readme = (ROOT / "README.md").read_text().split("\n")
    doc = BENCHMARKS_DOC.read_text().split("\n")
    assert readme.count(report.NOTEBOOKS_BEGIN) == 1 and report.BEGIN not in readme
    assert doc.count(report.BEGIN) == 1 and report.NOTEBOOKS_BEGIN not in doc


def test_readme_demo_rows_match_the_recorded_results(report):
    readme = (ROOT / "README.md").read_text()
    for row in report.demo_rows():
        assert row in readme, f"README.md lacks the row (run benchmarks/report.py):\n{row}"


def test_readme_demo_claims_hold_on_the_recorded_demo(report):
    claims = report.demo_claims()
    assert len(claims) >= 7
    assert all(claims.values()), [c for c, holds in claims.items() if not holds]


def test_the_reformulation_rows_say_identities_undefined_numbers_and_controls(report):
    """The README's reformulation rows from a summary (``SeedSummary.to_dict`` read back from JSON): trained, init
    and shuffled per level; an identity as "identity", a number undefined in every seed (null) as n/a, one undefined
    in some seeds with its count and reason; a summary without controls gives the trained rows alone."""
    from smaso.student.seeds import summarize_seeds

    dead = "level 0: all 8 nodes dead over 8192 rows"

    def run(v, focus, step_v):
        rows = [{"F_local": step_v, "F_local_focus": focus, "F_local_decorrelation": step_v, "G_local": v,
                 "G_local_floor": 0.01}, {"F_local": v, "F_local_focus": focus, "F_local_decorrelation": v,
                                          "G_local": v, "G_local_floor": 0.01}]
        return {"history": [{"step": i, "accuracy": 0.9, "loss": 0.1, "levels": [{"level": 0, **r}], "leaves": {}}
                            for i, r in enumerate(rows)]}

    runs = [run(0.5, 1e-16, 0.3), run(0.7, 2e-16, 0.2)]
    shuffled = [run(0.4, 1e-16, 0.3), run(0.6, 1e-16, 0.2)]
    runs[1]["history"][-1]["levels"][0].update(G_local=None, undefined={"G_local": dead})
    summary = json.loads(json.dumps(_strict(summarize_seeds(runs, last=1, shuffled=shuffled).to_dict())))
    rows = report.reformulation_rows(summary)
    assert [r.split(" | ")[1] for r in rows] == ["trained", "init", "shuffled labels"]
    trained = rows[0].strip("| ").split(" | ")
    assert trained[2:5] == ["= its decorrelation part (identity)", "0 (identity)", "0.6 [0.5..0.7] (1e-1)"]
    assert trained[5] == f"0.5 [0.5..0.5] (1e-2) (undefined in 1 of 2 seeds: {dead})"
    assert rows[2].strip("| ").split(" | ")[4] == "0.5 [0.4..0.6]"  # the shuffled control, no noise
    for r in runs:
        r["history"][-1]["levels"][0].update(G_local=None, undefined={"G_local": dead})
    alone = _strict(summarize_seeds([{"history": r["history"][1:]} for r in runs], last=1).to_dict())
    rows = report.reformulation_rows(json.loads(json.dumps(alone)))
    assert len(rows) == 1 and rows[0].split(" | ")[1] == "trained"
    assert rows[0].strip("| ").split(" | ")[5] == f"n/a (undefined in 2 of 2 seeds: {dead})"
    # without a control nothing is an identity: the number and its noise, within noise (round-off)
    assert rows[0].strip("| ").split(" | ")[3] == "1.5e-16 [1e-16..2e-16] (5e-17)*"


def _strict(obj):
    """``obj`` with NaN as None, as the benchmarks write it."""
    from smaso.output import json_safe as _json_safe

    return _json_safe(obj)


def test_the_table_reads_every_benchmark_results_file(report, monkeypatch):
    read = []
    load = report._load
    monkeypatch.setattr(report, "_load", lambda name: read.append(name) or load(name))
    report.table()
    assert set(read) == set(report.TABLE_FILES)
    assert {p.stem for p in (ROOT / "benchmarks" / "results").glob("*.json")} >= set(report.TABLE_FILES)


def _perturbed(value):
    """Every number of a results file moved (ints + 3, floats * 1.37 + 0.11, lists of floats such as the
    repeats' times one longer), the timestamp another date; strings and booleans kept."""
    if isinstance(value, bool) or isinstance(value, str) or value is None:
        return value
    if isinstance(value, int):
        return value + 3
    if isinstance(value, float):
        return value * 1.37 + 0.11
    if isinstance(value, list):
        out = [_perturbed(v) for v in value]
        timings = out and all(isinstance(v, float) for v in out)
        return [*out, out[-1]] if timings else out
    return {k: "2031-07-15T00:00:00+00:00" if k == "timestamp" else _perturbed(v) for k, v in value.items()}


def _numbers(row: str) -> list[str]:
    """The numbers of a row's "measured" column, code spans (names such as `stats f32`) left out."""
    return NUMBER.findall(re.sub(r"`[^`]*`", "", row.split(" | ")[1]))


def test_every_measured_number_is_derived_from_the_json(report, monkeypatch):
    """Each number of the "measured" column (figures, dates, loads, rounds) changes when the JSON does: none is
    typed into ``report.py``."""
    before = report.rows()
    load = report._load
    monkeypatch.setattr(report, "_load", lambda name: _perturbed(load(name)))
    after = report.rows()
    assert len(after) == len(before)
    for old, new in zip(before, after, strict=True):
        a, b = _numbers(old), _numbers(new)
        assert a and len(a) == len(b), (old, new)
        kept = [x for x, y in zip(a, b, strict=True) if x == y]
        assert not kept, f"numbers {kept} of the measured column do not follow the JSON:\n{old}\n{new}"


def test_write_replaces_only_the_marked_table(report, tmp_path):
    path = tmp_path / "README.md"
    path.write_text(f"# title\n\nbefore\n\n{report.BEGIN}\n| old | table |\n{report.END}\n\nafter\n")
    path.chmod(0o644)
    assert report.write(path)
    text = path.read_text()
    assert text == (f"# title\n\nbefore\n\n{report.BEGIN}\n" + "\n".join(report.table())
                    + f"\n{report.END}\n\nafter\n")
    assert path.stat().st_mode & 0o777 == 0o644
    assert not report.write(path)  # already up to date
    assert [p.name for p in tmp_path.iterdir()] == ["README.md"]  # no temporary file left
    with pytest.raises(ValueError, match="report"):
        report.replace_table("no markers\n", ["| x |"])


# ---------------------------------------------------------------------- the notebook table (bench_notebooks.py)
NOTEBOOK_STEMS = sorted(p.stem for p in (ROOT / "examples").glob("*.ipynb"))


def _synthetic_notebooks(tmp_path: Path, mode: str = "full") -> Path:
    """A results directory holding the recorded JSON files and a synthetic ``notebooks.json`` (notebook k: runs
    of 10k + 0.4, 10k + 1.2 and 10k + 2.6 s, median 10k + 1.2), for ``report.RESULTS``."""
    results = tmp_path / "results"
    results.mkdir()
    for p in (ROOT / "benchmarks" / "results").glob("*.json"):
        if p.name != "notebooks.json":
            (results / p.name).write_text(p.read_text())
    rows = [{"notebook": stem, "mode": mode, "seconds": [10 * k + 2.6, 10 * k + 0.4, 10 * k + 1.2],
             "median_s": 10 * k + 1.2} for k, stem in enumerate(NOTEBOOK_STEMS, 1)]
    data = {"benchmark": "notebooks", "timestamp": "2031-07-15T12:00:00+00:00",
            "config": {"quick": mode == "ci", "mode": mode, "repeats": 3},
            "machine": {"cpu_count": 2, "loadavg_start": [0.25, 0.2, 0.1], "loadavg_end": [0.44, 0.3, 0.2]},
            "results": rows, "total_wall_s": 200.0}
    (results / "notebooks.json").write_text(json.dumps(data))
    return results


def test_report_lists_every_notebook_in_order(report):
    assert [report.notebook_stem(link) for link, _ in report.NOTEBOOKS] == NOTEBOOK_STEMS


def test_readme_notebook_table_keeps_the_fixed_texts(report):
    """The README's notebook table lies between its markers and its rows are report.NOTEBOOKS' texts (the
    times apart), recorded or not."""
    part = report.readme_table((ROOT / "README.md").read_text(), report.NOTEBOOKS_BEGIN)
    rows = [line for line in part if line.startswith("| [")]
    assert [row.rsplit(" | ", 1)[0] + " |" for row in rows] == [f"| {a} | {b} |" for a, b in report.NOTEBOOKS]
    assert all(re.fullmatch(r"\d+ s", row.rsplit(" | ", 1)[1].removesuffix(" |")) for row in rows), rows


def test_readme_notebook_table_is_the_generated_one(report):
    if not report.notebooks_recorded():
        pytest.skip("benchmarks/results/notebooks.json is not recorded yet (python benchmarks/bench_notebooks.py "
                    "--record, then python benchmarks/report.py --write): the notebook times are still typed by hand")
    readme = (ROOT / "README.md").read_text()
    stale = "README.md's notebook table is stale: run python benchmarks/report.py --write"
    assert report.readme_table(readme, report.NOTEBOOKS_BEGIN) == report.notebook_table(), stale


def test_notebook_table_from_a_synthetic_recording(report, tmp_path, monkeypatch):
    monkeypatch.setattr(report, "RESULTS", _synthetic_notebooks(tmp_path))
    assert report.notebooks_recorded()
    times = report.notebook_times()
    assert times == {stem: f"{10 * k + 1} s" for k, stem in enumerate(NOTEBOOK_STEMS, 1)}
    lines = report.notebook_table()
    blank = lines.index("")
    sentence = " ".join(lines[:blank])
    assert all(len(line) <= report.NOTEBOOKS_WIDTH for line in lines[:blank])
    for part in ("the median of 3 runs", "`benchmarks/bench_notebooks.py`", "2031-07-15", "load 0.2-0.4",
                 "2 cores", "`benchmarks/report.py`"):
        assert part in sentence, (part, sentence)
    assert lines[blank + 1:blank + 3] == ["| notebook | what it shows | full mode |", "|---|---|---|"]
    assert lines[blank + 3:] == [f"| {link} | {what} | {times[report.notebook_stem(link)]} |"
                                 for link, what in report.NOTEBOOKS]
    assert lines[-1].endswith(f" | {10 * len(NOTEBOOK_STEMS) + 1} s |")


def test_notebook_table_refuses_ci_mode_times(report, tmp_path, monkeypatch):
    monkeypatch.setattr(report, "RESULTS", _synthetic_notebooks(tmp_path, mode="ci"))
    with pytest.raises(ValueError, match="CI-mode"):
        report.notebook_times()


def test_notebook_table_needs_every_notebook(report, tmp_path, monkeypatch):
    results = _synthetic_notebooks(tmp_path)
    data = json.loads((results / "notebooks.json").read_text())
    data["results"] = data["results"][1:]
    (results / "notebooks.json").write_text(json.dumps(data))
    monkeypatch.setattr(report, "RESULTS", results)
    with pytest.raises(ValueError, match=f"no time of \\['{NOTEBOOK_STEMS[0]}'\\]"):
        report.notebook_table()


def _readme_with_both_tables(report, path: Path) -> str:
    text = (f"# title\n\n{report.NOTEBOOKS_BEGIN}\nold sentence\n\n| notebook | what it shows | full mode |\n"
            f"| [x](examples/x.ipynb) | x | 14 s |\n{report.END}\n\nbetween\n\n{report.BEGIN}\n| old | table |\n"
            f"{report.END}\n\nafter\n")
    path.write_text(text)
    return text


def test_write_rewrites_the_notebook_table_from_a_synthetic_recording(report, tmp_path, monkeypatch):
    monkeypatch.setattr(report, "RESULTS", _synthetic_notebooks(tmp_path))
    path = tmp_path / "README.md"
    _readme_with_both_tables(report, path)
    notes = []
    assert report.write(path, notes=notes)
    assert notes == []
    assert path.read_text() == (f"# title\n\n{report.NOTEBOOKS_BEGIN}\n" + "\n".join(report.notebook_table())
                                + f"\n{report.END}\n\nbetween\n\n{report.BEGIN}\n" + "\n".join(report.table())
                                + f"\n{report.END}\n\nafter\n")
    assert not report.write(path)  # already up to date


def test_write_leaves_the_notebook_table_while_it_is_not_recorded(report, tmp_path, monkeypatch):
    results = _synthetic_notebooks(tmp_path)
    (results / "notebooks.json").unlink()
    monkeypatch.setattr(report, "RESULTS", results)
    assert not report.notebooks_recorded()
    path = tmp_path / "README.md"
    text = _readme_with_both_tables(report, path)
    notes = []
    assert report.write(path, notes=notes)
    assert len(notes) == 1 and "not recorded" in notes[0], notes
    assert path.read_text() == report.replace_table(text, report.table())
    assert report.readme_table(path.read_text(), report.NOTEBOOKS_BEGIN) == \
        report.readme_table(text, report.NOTEBOOKS_BEGIN)


def test_write_refuses_a_file_without_generated_parts(report, tmp_path):
    path = tmp_path / "README.md"
    path.write_text("# title\n\nno markers\n")
    with pytest.raises(ValueError, match="no generated part"):
        report.write(path)
    assert path.read_text() == "# title\n\nno markers\n"


def test_write_all_rewrites_each_target_in_its_own_part(report, tmp_path, monkeypatch):
    """A notebook-only README and a benchmark-only page: each gets its own table, and nothing else moves."""
    monkeypatch.setattr(report, "RESULTS", _synthetic_notebooks(tmp_path))
    readme, doc = tmp_path / "README.md", tmp_path / "benchmarks.md"
    readme.write_text(f"# r\n\n{report.NOTEBOOKS_BEGIN}\nold\n{report.END}\n\nafter\n")
    doc.write_text(f"# b\n\n{report.BEGIN}\n| old | table |\n{report.END}\n")
    monkeypatch.setattr(report, "TARGETS", (readme, doc))
    notes = []
    assert report.write_all(notes=notes) == [readme, doc]
    assert notes == []
    assert readme.read_text() == (f"# r\n\n{report.NOTEBOOKS_BEGIN}\n" + "\n".join(report.notebook_table())
                                  + f"\n{report.END}\n\nafter\n")
    assert doc.read_text() == f"# b\n\n{report.BEGIN}\n" + "\n".join(report.table()) + f"\n{report.END}\n"
    assert report.write_all() == []  # already up to date


def test_markers_delimit_each_generated_part(report):
    text = f"{report.NOTEBOOKS_BEGIN}\na\n{report.BEGIN}\nb\n{report.END}\n"  # the notebooks' END missing
    with pytest.raises(ValueError, match="notebooks"):
        report.readme_table(text, report.NOTEBOOKS_BEGIN)
    assert report.readme_table(text) == ["b"]


@pytest.mark.slow
def test_bench_notebooks_quick_one_notebook(tmp_path, monkeypatch):
    """``bench_notebooks.py --quick --only`` runs one notebook in a kernel (CI mode) and records its time."""
    from bench_smoke_helpers import load_bench

    monkeypatch.delenv("CI", raising=False)
    bench = load_bench("bench_notebooks")
    out = tmp_path / "notebooks.json"
    returned = bench.main(["--quick", "--only", "03_summarization_ladder", "--out", str(out)])
    data = json.loads(out.read_text())
    assert data["results"] == returned["results"]
    assert data["benchmark"] == "notebooks" and data["config"]["mode"] == "ci" and data["config"]["repeats"] == 1
    [row] = data["results"]
    assert row["notebook"] == "03_summarization_ladder" and row["mode"] == "ci"
    assert len(row["seconds"]) == 1 and row["median_s"] == row["seconds"][0] > 0
    assert "loadavg_end" in data["machine"]
    assert [p.name for p in tmp_path.iterdir()] == ["notebooks.json"]
    assert "CI" not in os.environ  # the kernel's environment restored


@pytest.mark.slow
def test_bench_notebooks_runs_the_kernel_in_full_mode(tmp_path, monkeypatch):
    """Without ``--quick`` the kernel has no ``CI`` at all (the notebooks test its presence), even when the
    caller has ``CI`` set; a failing notebook raises."""
    import nbformat
    from bench_smoke_helpers import load_bench

    bench = load_bench("bench_notebooks")
    examples = tmp_path / "examples"
    examples.mkdir()
    probe = "import os\nassert 'CI' not in os.environ, os.environ['CI']\nassert os.environ['MPLBACKEND'] == 'Agg'"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(probe)]), examples / "probe.ipynb")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")]), examples / "z_fails.ipynb")
    monkeypatch.setattr(bench, "EXAMPLES", examples)
    monkeypatch.setenv("CI", "true")
    data = bench.main(["--only", "probe", "--out", str(tmp_path / "probe.json")])
    assert [(r["notebook"], r["mode"]) for r in data["results"]] == [("probe", "full")]
    assert os.environ["CI"] == "true"  # restored
    with pytest.raises(RuntimeError, match="z_fails"):
        bench.main(["--only", "z_fails", "--out", str(tmp_path / "fails.json")])
