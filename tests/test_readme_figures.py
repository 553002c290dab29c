"""The README's benchmark table and demo figures come from the recorded JSON (``benchmarks/report.py``)."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?")


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("report", ROOT / "benchmarks" / "report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_benchmark_table_is_the_generated_one(report):
    readme = (ROOT / "README.md").read_text()
    stale = "README.md's benchmark table is stale: run python benchmarks/report.py --write"
    assert report.readme_table(readme) == report.table(), stale


def test_readme_demo_rows_match_the_recorded_results(report):
    readme = (ROOT / "README.md").read_text()
    for row in report.demo_rows():
        assert row in readme, f"README.md lacks the row (run benchmarks/report.py):\n{row}"


def test_readme_demo_claims_hold_on_the_recorded_demo(report):
    claims = report.demo_claims()
    assert len(claims) >= 7
    assert all(claims.values()), [c for c, holds in claims.items() if not holds]


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
