"""The README's benchmark and demo figures come from the recorded JSON (``benchmarks/readme_rows.py``)."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def readme_rows():
    spec = importlib.util.spec_from_file_location("readme_rows", ROOT / "benchmarks" / "readme_rows.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_rows_match_the_recorded_results(readme_rows):
    readme = (ROOT / "README.md").read_text()
    for row in readme_rows.rows() + readme_rows.demo_rows():
        assert row in readme, f"README.md lacks the row (run benchmarks/readme_rows.py):\n{row}"


def test_readme_demo_claims_hold_on_the_recorded_demo(readme_rows):
    claims = readme_rows.demo_claims()
    assert len(claims) >= 7
    assert all(claims.values()), [c for c, holds in claims.items() if not holds]
