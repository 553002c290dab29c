"""Write the legacy fixtures of ``tests/test_legacy_fixtures.py`` (run once, with smaso 0.2.0 at 05be504).

The files were written by the code *before* the tree and region-graph ladders became one class, so the
test proves that data a user already has still loads and gives the same rows.  Kept for the record; do
not rerun it with newer code (the point is that these bytes come from the old writer).

    python tests/data/legacy/make_fixtures.py tests/data/legacy
"""

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from teachers import GraphLadder, Ladder, sample_ladder, sample_to_store
from teachers.dataset import save_dataset
from teachers.graph_sampling import sample_graph_ladder
from teachers.spec_io import save_spec


def digest(a) -> str:
    a = np.ascontiguousarray(a.numpy() if hasattr(a, "numpy") else a)
    return hashlib.sha256(a.tobytes()).hexdigest()


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    manifest = {}
    tree_gauss = Ladder.default(emission="gaussian", sigma=0.5)
    s = sample_ladder(tree_gauss, 300, seed=5)
    save_dataset(s, out / "tree_gaussian_v1.npz")
    manifest["tree_gaussian_v1.npz"] = {"n": 300, "z": digest(s.z), "x": digest(s.x), "z_dtype": str(s.z.dtype),
                                        "fingerprint_v1": tree_gauss.fingerprint()}
    tree_td = Ladder.random(depth=2, branching=3, events=3, mode="topdown", seed=4)
    sample_to_store(tree_td, 9000, out / "tree_topdown_v2.zarr", seed=7, chunk_rows=4096, compress="zstd:1")
    s = sample_ladder(tree_td, 9000, seed=7)
    manifest["tree_topdown_v2.zarr"] = {"n": 9000, "z": digest(s.z), "x": None}
    g = GraphLadder.conv1d(7, kernels=[3, 3], strides=[2, 1], events=[3, 2, 2], mode="topdown", seed=3, sigma=0.7)
    sample_to_store(g, 5000, out / "conv1d_gaussian_v2.zarr", seed=2, chunk_rows=4096, compress="zstd:1")
    s = sample_graph_ladder(g, 5000, seed=2)
    manifest["conv1d_gaussian_v2.zarr"] = {"n": 5000, "z": digest(s.z), "x": digest(s.x)}
    gb = GraphLadder.fully_informative_conv1d(5, kernels=[3, 3], strides=[1, 1], leaf_events=2, concentration=1.5)
    sample_to_store(gb, 4100, out / "fully_informative_conv1d_v2.zarr", seed=1, chunk_rows=4096, compress="none")
    s = sample_graph_ladder(gb, 4100, seed=1)
    manifest["fully_informative_conv1d_v2.zarr"] = {"n": 4100, "z": digest(s.z), "x": None}
    save_spec(tree_td, out / "tree_topdown_spec_v1.json")
    save_spec(Ladder.default(), out / "tree_default_spec_v1.json")
    save_spec(g, out / "conv1d_spec_v1.json")
    save_spec(gb, out / "fully_informative_conv1d_spec_v1.json")
    for name, lad in [("tree_topdown_spec_v1.json", tree_td), ("tree_default_spec_v1.json", Ladder.default()),
                      ("conv1d_spec_v1.json", g), ("fully_informative_conv1d_spec_v1.json", gb)]:
        sampler = sample_ladder if isinstance(lad, Ladder) else sample_graph_ladder
        s = sampler(lad, 5000, seed=11)
        manifest[name] = {"n": 5000, "seed": 11, "z": digest(s.z), "x": None if s.x is None else digest(s.x)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
