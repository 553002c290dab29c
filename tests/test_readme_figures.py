"""The README's benchmark rows of the one ladder come from the recorded JSON (``benchmarks/readme_rows.py``)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_rows_match_the_recorded_results():
    spec = importlib.util.spec_from_file_location("readme_rows", ROOT / "benchmarks" / "readme_rows.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    readme = (ROOT / "README.md").read_text()
    for row in mod.rows():
        assert row in readme, f"README.md lacks the row (run benchmarks/readme_rows.py):\n{row}"
