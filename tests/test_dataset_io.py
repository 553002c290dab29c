"""Dataset files and spec files: round trips, sharding, atomic writes, and every bad input."""

import json
import zipfile

import numpy as np
import pytest
import torch

from teachers import GaussianEmission, Ladder, LadderSpecError, sample_ladder
from teachers.dataset import DatasetFormatError, LadderDataset, load_dataset, save_dataset
from teachers.spec_io import atomic_write, load_spec, save_spec
from teachers.statistics import empirical_statistics, exact_statistics


@pytest.fixture
def ladder():
    return Ladder.random(depth=2, branching=3, events=[3, 4, 5], concentration=0.5, seed=7)


def test_round_trip_onehot(tmp_path, ladder):
    s = sample_ladder(ladder, 5000, seed=3)
    path = save_dataset(s, tmp_path / "d.npz")
    back = load_dataset(path)
    assert back.x is None  # one-hot inputs are derived, not stored
    assert torch.equal(back.z, s.z) and back.z.dtype == torch.uint8
    assert torch.equal(back.inputs(), s.inputs())
    assert back.seed == 3 and back.start == 0 and back.total == 5000
    # the file alone reproduces the exact statistics: the ladder is rebuilt bit for bit
    for a, b in zip(exact_statistics(back.ladder).joints[1:], exact_statistics(ladder).joints[1:], strict=True):
        assert torch.equal(a, b)
    e1, e2 = empirical_statistics(back.ladder, back.z), empirical_statistics(ladder, s.z)
    assert all(torch.equal(a, b) for a, b in zip(e1.marginals, e2.marginals, strict=True))


def test_round_trip_gaussian_and_bottomup(tmp_path):
    lad = Ladder.random(depth=2, branching=2, events=[3, 3, 2], mode="bottomup", seed=1).with_emission(
        GaussianEmission.random_means(4, 2, dim=5, sigma=0.3, generator=torch.Generator().manual_seed(0)))
    s = sample_ladder(lad, 3000, seed=0)
    back = load_dataset(save_dataset(s, tmp_path / "g.npz", compress=True))
    assert back.x is not None and torch.equal(back.x, s.x)
    assert torch.equal(back.z, s.z)
    assert torch.equal(back.ladder.emission.means, lad.emission.means)
    assert all(torch.equal(a, b) for a, b in zip(back.ladder.lookup, lad.lookup, strict=True))


def test_factorized_spec_survives(tmp_path):
    lad = Ladder.factorized_binary(depth=2, branching=2, factors=(1, 2, 4), seed=2)
    back = load_dataset(save_dataset(sample_ladder(lad, 100, seed=0), tmp_path / "f.npz")).ladder
    assert back.factorization is not None
    assert back.factorization.factors == (1, 2, 4)
    assert all(torch.equal(a, b) for a, b in zip(back.factorization.factor_tables,
                                                 lad.factorization.factor_tables, strict=True))


@pytest.mark.parametrize("n,shards", [(10_000, 3), (5_000, 7), (4096 * 2, 2)])
def test_shards_join_to_the_full_stream(tmp_path, ladder, n, shards):
    full = sample_ladder(ladder, n, seed=11)
    paths = [save_dataset(sample_ladder(ladder, n, seed=11, shard=f"{i}/{shards}"), tmp_path / f"p{i}.npz")
             for i in range(shards)]
    joined = load_dataset(list(reversed(paths)))  # order of the arguments does not matter
    assert torch.equal(joined.z, full.z)
    if shards > 2:
        with pytest.raises(DatasetFormatError, match="gap or overlap"):
            load_dataset(paths[:1] + paths[2:])
    other = save_dataset(sample_ladder(ladder, n, seed=12, shard=f"1/{shards}"), tmp_path / "other.npz")
    with pytest.raises(DatasetFormatError, match="not a shard of the same stream"):
        load_dataset([paths[0], other])


def test_torch_dataset(ladder, tmp_path):
    s = sample_ladder(ladder, 300, seed=0)
    ds = LadderDataset(save_dataset(s, tmp_path / "d.npz"))
    assert len(ds) == 300
    x, y, z = ds[17]
    assert x.shape == (9, 5) and x.dtype == torch.float32
    assert torch.equal(x, s.inputs()[17])
    assert y.item() == s.y[17].item() and torch.equal(z, s.z[17].long())
    xb, yb, zb = next(iter(torch.utils.data.DataLoader(ds, batch_size=64)))
    assert xb.shape == (64, 9, 5) and torch.equal(yb, s.y[:64]) and torch.equal(zb, s.z[:64].long())


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")

    def boom(f):
        f.write(b"partial")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        atomic_write(target, boom)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_atomic_write_bad_destination(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        atomic_write(tmp_path / "missing" / "f.npz", lambda f: None)
    with pytest.raises(ValueError, match="is a directory"):
        atomic_write(tmp_path, lambda f: None)


def test_truncated_file(tmp_path, ladder):
    path = save_dataset(sample_ladder(ladder, 2000, seed=0), tmp_path / "d.npz")
    data = path.read_bytes()
    (tmp_path / "t.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetFormatError, match="corrupted or truncated"):
        load_dataset(tmp_path / "t.npz")


def test_corrupted_member_detected(tmp_path, ladder):
    s = sample_ladder(ladder, 2000, seed=0)
    path = save_dataset(s, tmp_path / "d.npz")
    # rewrite the archive with z altered but the stored checksum kept
    with np.load(path, allow_pickle=False) as npz:
        members = {k: npz[k] for k in npz.files}
    members["z"] = members["z"].copy()
    members["z"][5, 3] ^= 1
    np.savez(tmp_path / "bad.npz", **members)
    with pytest.raises(DatasetFormatError, match="SHA-256"):
        load_dataset(tmp_path / "bad.npz")
    # flipping a byte inside the zip payload is caught by the archive's CRC or the checksum
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (tmp_path / "flip.npz").write_bytes(bytes(raw))
    with pytest.raises(DatasetFormatError):
        load_dataset(tmp_path / "flip.npz")


def test_foreign_and_versioned_files(tmp_path, ladder):
    np.savez(tmp_path / "plain.npz", a=np.arange(3))
    with pytest.raises(DatasetFormatError, match="no 'meta' member"):
        load_dataset(tmp_path / "plain.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(DatasetFormatError, match="corrupted or truncated"):
        load_dataset(tmp_path / "text.npz")
    path = save_dataset(sample_ladder(ladder, 100, seed=0), tmp_path / "d.npz")
    with np.load(path, allow_pickle=False) as npz:
        members = {k: npz[k] for k in npz.files}
    meta = json.loads(str(members["meta"][()]))
    meta["version"] = 99
    members["meta"] = np.array(json.dumps(meta))
    np.savez(tmp_path / "v99.npz", **members)
    with pytest.raises(DatasetFormatError, match="version 99"):
        load_dataset(tmp_path / "v99.npz")
    meta["version"], meta["format"] = 1, "something-else"
    members["meta"] = np.array(json.dumps(meta))
    np.savez(tmp_path / "fmt.npz", **members)
    with pytest.raises(DatasetFormatError, match="not a smaso-ladder-dataset"):
        load_dataset(tmp_path / "fmt.npz")
    with pytest.raises(DatasetFormatError, match="no such file"):
        load_dataset(tmp_path / "nope.npz")


def test_no_pickle_in_files(tmp_path, ladder):
    path = save_dataset(sample_ladder(ladder, 50, seed=0), tmp_path / "d.npz")
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            with zf.open(name) as f:
                header = f.read(128)
            assert b"'descr': '|O'" not in header and b"<O" not in header  # no object arrays


def test_spec_files_json_and_toml(tmp_path, ladder):
    p = save_spec(ladder, tmp_path / "l.json")
    back = load_spec(p)
    assert all(torch.equal(a, b) for a, b in zip(back.tables, ladder.tables, strict=True))
    (tmp_path / "r.toml").write_text('kind = "random"\ndepth = 2\nbranching = 3\nevents = 4\nseed = 5\n')
    lad = load_spec(tmp_path / "r.toml")
    assert lad.events == (4, 4, 4) and lad.num_regions == (1, 3, 9)
    assert torch.equal(lad.tables[1], Ladder.random(depth=2, branching=3, events=4, seed=5).tables[1])
    (tmp_path / "explicit.toml").write_text(
        'mode = "topdown"\nbranching = [2]\nevents = [2, 2]\nprior = [0.5, 0.5]\n'
        'tables = [[[0.9, 0.1], [0.2, 0.8]]]\n[emission]\nkind = "gaussian"\nsigma = 0.5\n')
    lad = load_spec(tmp_path / "explicit.toml")
    assert lad.emission.kind == "gaussian" and lad.tables[0].shape == (2, 2, 2)


@pytest.mark.parametrize("text,match", [
    ('{"mode": "topdown", "branching": [2], "events": [2, 2], "prior": [0.5, 0.6], '
     '"tables": [[[0.5, 0.5], [0.5, 0.5]]]}', r"prior: row sums to 1.1"),
    ('{"mode": "topdown", "branching": [2], "events": [2, 2], "prior": [0.5, 0.5], '
     '"tables": [[[0.5, 0.5], [1.5, -0.5]]]}', r"tables\[0\]\[\d, 1, 1\]: probability -0.5 is negative"),
    ('{"mode": "topdown", "branching": [2], "events": [2, 3], "prior": [0.5, 0.5], '
     '"tables": [[[0.5, 0.5], [0.5, 0.5]]]}', r"tables\[0\]: expected shape \(2, 2, 3\)"),
    ('{"mode": "bottomup", "branching": [2], "events": [2, 2], "leaf_prior": [0.5, 0.5], '
     '"lookup": [[0, 1, 1, 2]]}', r"lookup\[0\]\[\d, 3\]: event 2 outside \[0, 2\)"),
    ('{"mode": "topdown", "branching": [2], "events": [2, 2], "prior": [0.5, 0.5], '
     '"tables": [[[0.5, 0.5], [0.5, 0.5]]], "emission": {"kind": "gaussian", "sigma": -1}}', "sigma"),
    ('{"mode": "sideways", "branching": [2], "events": [2, 2]}', "mode"),
    ('{"mode": "topdown", "branching": [2], "events": [2, 2], "colour": 3}', "unknown field"),
    ('{"kind": "random", "depth": 0}', "depth"),
    ('{"mode": "topdown", "branching": [2]', "not valid JSON"),
])
def test_bad_spec_files(tmp_path, text, match):
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(LadderSpecError, match=match):
        load_spec(p)


def test_region_tree_spec(tmp_path):
    spec = {"mode": "topdown", "prior": [0.5, 0.5], "tables": [[[0.7, 0.2, 0.1], [0.1, 0.2, 0.7]]],
            "regions": [{"name": "image", "events": 2, "children": ["left", "right"]},
                        {"name": "left", "events": 3}, {"name": "right", "events": 3, "children": []}]}
    (tmp_path / "tree.json").write_text(json.dumps(spec))
    lad = load_spec(tmp_path / "tree.json")
    assert lad.branching == (2,) and lad.events == (2, 3) and lad.region_names() == ["image", "left", "right"]
    back = load_dataset(save_dataset(sample_ladder(lad, 10, seed=0), tmp_path / "d.npz")).ladder
    assert back.region_names() == ["image", "left", "right"]


@pytest.mark.parametrize("regions,match", [
    ([{"name": "r", "events": 2, "children": ["a", "ghost"]}, {"name": "a", "events": 3}],
     "child 'ghost' that is not a defined region"),
    ([{"name": "r", "events": 2, "children": ["a", "b"]}, {"name": "a", "events": 3, "children": ["b"]},
      {"name": "b", "events": 3}], "child of both"),
    ([{"name": "r", "events": 2, "children": ["a"]}, {"name": "a", "events": 3},
      {"name": "x", "events": 2, "children": ["y"]}, {"name": "y", "events": 2, "children": ["x"]}],
     "cannot be reached from the root"),
    ([{"name": "r", "events": 2, "children": ["a", "b"]}, {"name": "a", "events": 3, "children": ["c"]},
      {"name": "b", "events": 3}, {"name": "c", "events": 2}], "same branching"),
    ([{"name": "r", "events": 2, "children": ["a", "b"]}, {"name": "a", "events": 3}, {"name": "b", "events": 4}],
     "different event counts"),
    ([{"name": "r", "events": 2, "children": ["a"]}, {"name": "r", "events": 3}], "used twice"),
])
def test_bad_region_trees(regions, match):
    with pytest.raises(LadderSpecError, match=match):
        Ladder.from_dict({"mode": "topdown", "regions": regions, "prior": [0.5, 0.5],
                          "tables": [[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]]})


def test_custom_emission_end_to_end(tmp_path):
    from teachers.emission import Emission

    class Squared(Emission):
        def __init__(self, num_regions, num_events):
            self.num_regions, self.num_events, self.dim = num_regions, num_events, 1

        def sample(self, z, generator=None):
            noise = torch.randn(*z.shape, 1, generator=generator)
            return (z.float()[..., None] + 1) ** 2 + 0.1 * noise

        def log_likelihood(self, x):
            mu = (torch.arange(self.num_events, dtype=torch.float64) + 1) ** 2
            return torch.distributions.Normal(mu, 0.1).log_prob(x.double())

    from inference.posterior import posterior

    lad = Ladder.random(depth=1, branching=3, events=[2, 3], seed=0).with_emission(Squared(3, 3))
    s = sample_ladder(lad, 500, seed=0)
    assert s.x.shape == (500, 3, 1)
    # noise 0.1 vs spacing >= 3: the posterior recovers every leaf event
    post = posterior(lad, s.x.double(), marginals=True)
    assert torch.equal(post.marginals[1].argmax(-1), s.leaves)
    back = load_dataset(save_dataset(s, tmp_path / "c.npz"))
    assert torch.equal(back.x, s.x) and back.ladder.emission.kind == "custom"
    with pytest.raises(NotImplementedError, match="was not saved with the data"):
        posterior(back.ladder, back.x)
