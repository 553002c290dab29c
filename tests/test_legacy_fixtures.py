"""Data written before the tree and region-graph ladders became one class still loads and gives the same rows.

The files under ``tests/data/legacy/`` were written by smaso 0.2 (commit 05be504, by
``tests/data/legacy/make_fixtures.py``), with the SHA-256 of their rows in ``manifest.json``: a format-1
``.npz`` dataset, format-2 zarr stores of a tree and of two convolution graphs (one with Gaussian leaves), and
spec files of version 1 (trees) and ``smaso-graph-ladder`` version 1 (graphs).  Each must open with today's
code, hold the same rows, and -- for the spec files -- sample the same rows today as the old sampler did.
"""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from teachers.chunked import open_dataset, sample_to_store
from teachers.dataset import load_dataset, save_dataset
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder
from teachers.spec_io import load_spec, save_spec

DATA = Path(__file__).parent / "data" / "legacy"
MANIFEST = json.loads((DATA / "manifest.json").read_text())


def digest(a) -> str:
    a = np.ascontiguousarray(a.numpy() if hasattr(a, "numpy") else a)
    return hashlib.sha256(a.tobytes()).hexdigest()


def test_format1_dataset_loads_with_the_same_rows():
    want = MANIFEST["tree_gaussian_v1.npz"]
    s = load_dataset(DATA / "tree_gaussian_v1.npz")
    assert isinstance(s.ladder, Ladder) and s.ladder.is_uniform() and len(s) == want["n"]
    assert digest(s.z) == want["z"] and digest(s.x) == want["x"] and str(s.z.dtype) == want["z_dtype"]
    # the stored ladder is the one that wrote it: re-sampling gives the same bytes
    again = sample_ladder(s.ladder, want["n"], seed=5)
    assert digest(again.z) == want["z"] and digest(again.x) == want["x"]


@pytest.mark.parametrize("name", ["tree_topdown_v2.zarr", "conv1d_gaussian_v2.zarr",
                                  "fully_informative_conv1d_v2.zarr"])
def test_format2_stores_load_with_the_same_rows(name):
    want = MANIFEST[name]
    data = open_dataset(DATA / name)
    assert len(data) == want["n"]
    s = data.to_sample()
    assert digest(s.z) == want["z"]
    assert (s.x is None) == (want["x"] is None) and (want["x"] is None or digest(s.x) == want["x"])
    assert data.verify()["chunks"] == data.num_chunks
    again = sample_ladder(data.ladder, want["n"], seed=data.seed)
    assert digest(again.z) == want["z"]
    assert data.is_graph == (name != "tree_topdown_v2.zarr")


@pytest.mark.parametrize("name", ["tree_topdown_spec_v1.json", "tree_default_spec_v1.json", "conv1d_spec_v1.json",
                                  "fully_informative_conv1d_spec_v1.json"])
def test_old_spec_files_load_and_sample_the_same_rows(name, tmp_path):
    want = MANIFEST[name]
    lad = load_spec(DATA / name)
    s = sample_ladder(lad, want["n"], seed=want["seed"])
    assert digest(s.z) == want["z"]
    assert (s.x is None) == (want["x"] is None) and (want["x"] is None or digest(s.x) == want["x"])
    # written in the one format (version 2) and read back: the same teacher
    save_spec(lad, tmp_path / "again.json")
    spec = json.loads((tmp_path / "again.json").read_text())
    assert (spec["format"], spec["version"]) == ("smaso-ladder", 2)
    back = load_spec(tmp_path / "again.json")
    assert back.fingerprint() == lad.fingerprint()
    assert digest(sample_ladder(back, want["n"], seed=want["seed"]).z) == want["z"]


def test_a_graph_store_written_today_round_trips(tmp_path):
    g = load_spec(DATA / "conv1d_spec_v1.json")
    sample_to_store(g, 5000, tmp_path / "g.zarr", seed=11, chunk_rows=4096)
    data = open_dataset(tmp_path / "g.zarr")
    assert data.ladder.fingerprint() == g.fingerprint()
    assert digest(data.to_sample().z) == MANIFEST["conv1d_spec_v1.json"]["z"]
    # and a version-1 file of a graph, which 0.2 could not write
    save_dataset(sample_ladder(g, 300, seed=1), tmp_path / "g.npz")
    back = load_dataset(tmp_path / "g.npz")
    assert back.ladder.fingerprint() == g.fingerprint()
    assert digest(back.z) == digest(sample_ladder(g, 300, seed=1).z)


def test_fixtures_are_read_only_inputs(tmp_path):
    """Opening a fixture must not modify it (copy, open, compare every file's bytes)."""
    src = DATA / "tree_topdown_v2.zarr"
    copy = tmp_path / "copy.zarr"
    shutil.copytree(src, copy)
    open_dataset(copy).verify()
    for f in src.rglob("*"):
        if f.is_file():
            assert (copy / f.relative_to(src)).read_bytes() == f.read_bytes()
