"""Shared setup of the benchmark smoke tests (``tests/test_*bench*_smoke.py``).

``load_bench`` loads a ``benchmarks/bench_*.py`` script by path (the scripts are not a package);
``run_quick`` runs its ``main`` with ``--quick`` into ``tmp_path`` and checks what every benchmark
must do: the JSON file holds the returned results, and no temporary file is left behind.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_bench(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py``, imported as the module ``name``."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_quick(bench: ModuleType, tmp_path: Path, file_name: str = "b.json") -> dict:
    """Run ``bench.main(["--quick", "--out", tmp_path / file_name])`` and return the JSON it wrote."""
    out = tmp_path / file_name
    returned = bench.main(["--quick", "--out", str(out)])
    data = json.loads(out.read_text())
    assert data["results"] == json.loads(json.dumps(returned["results"]))
    assert not [p.name for p in tmp_path.iterdir() if p.name != file_name], "temporary file left behind"
    return data
