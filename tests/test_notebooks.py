"""Every notebook in ``examples/`` runs top to bottom (nbclient), in its quick mode.

The notebooks read ``CI`` from the environment and shrink their sample sizes and training
lengths when it is set, so that the whole set stays within CI's time; without it they run the
full-size experiments (each under ~2 minutes on 2 CPU cores).  Each notebook writes its figures
with the library's plotting helpers into ``$SMASO_OUTPUT/figures/<notebook>/`` (``smaso.output``;
never the source tree); the test checks that they were written there and nowhere else, that no
notebook calls a deprecated API (a DeprecationWarning the notebook's own code triggers is an error),
and that notebooks are stored without outputs (small diffs, nothing stale).
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

EXAMPLES = Path(__file__).parents[1] / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 5, [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{path.name}: outputs kept in git"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "2"))
    out = tmp_path / "out"
    monkeypatch.setenv("SMASO_OUTPUT", str(out))
    run_dir = tmp_path / "cwd"
    run_dir.mkdir()
    nb = nbformat.read(path, as_version=4)
    # a deprecated call in a notebook is an error: the warning names the notebook's own line (stacklevel), whose
    # module is the kernel's __main__; warnings inside other libraries keep their filters
    nb.cells.insert(0, nbformat.v4.new_code_cell(
        'import warnings\nwarnings.filterwarnings("error", category=DeprecationWarning, module="__main__")'))
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(run_dir)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    figures = sorted((out / "figures" / path.stem).glob("*.png"))
    assert figures, f"{path.name} wrote no figure into $SMASO_OUTPUT/figures/{path.stem}/"
    assert all(f.stat().st_size > 5000 for f in figures), figures
    assert not any(run_dir.iterdir()), f"{path.name} wrote into its working directory: {list(run_dir.iterdir())}"
