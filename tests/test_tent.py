"""The tent-map teacher: exact network, 2^k pieces, reproducible sharded sampling, dataset files, CLI."""

import json
import math
import re

import numpy as np
import pytest
import torch
from torch import nn

from smaso.cli import main
from teachers import Ladder, sample_ladder
from teachers.dataset import DatasetFormatError, load_dataset, save_dataset
from teachers.sampling import BLOCK_SIZE, block_generator
from teachers.tent import (
    MAX_BREAKPOINT_K,
    TentNetwork,
    TentSample,
    dataset_format,
    load_tent_dataset,
    sample_tent,
    save_tent_dataset,
    tent,
    tent_breakpoints,
    tent_power,
)

# --- the map -------------------------------------------------------------------------------


def test_tent_values_and_types():
    x = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 0.3], dtype=torch.float64)
    assert torch.equal(tent(x), torch.tensor([0.0, 0.5, 1.0, 0.5, 0.0, 0.6], dtype=torch.float64))
    assert torch.equal(tent(x), torch.minimum(2 * x, 2 - 2 * x))  # exact on [0, 1]
    assert tent(0.75) == 0.5 and isinstance(tent(0.75), float)
    a = np.array([0.1, 0.9])
    assert isinstance(tent(a), np.ndarray) and np.array_equal(tent(a), np.minimum(2 * a, 2 - 2 * a))
    assert tent(x.float()).dtype == torch.float32
    assert tent_power(0.3, 0) == 0.3 and torch.equal(tent_power(x, 0), x)
    assert tent_power(0.3, 2) == tent(tent(0.3))
    assert torch.equal(tent_power(x, 3), tent(tent(tent(x))))


@pytest.mark.parametrize("k", range(13))
def test_breakpoints(k):
    b = tent_breakpoints(k)
    assert b.dtype == torch.float64 and len(b) == 2**k + 1 and b[0] == 0 and b[-1] == 1
    assert torch.equal(b * 2**k, torch.arange(2**k + 1, dtype=torch.float64))
    if k > 0:  # tau^k is 0 at even breakpoints, 1 at odd ones
        assert torch.equal(tent_power(b, k), (torch.arange(2**k + 1) % 2).double())


@pytest.mark.parametrize("k", range(13))
def test_network_equals_tent_power_exactly(k):
    net = TentNetwork(k)
    g = torch.Generator().manual_seed(k)
    x = torch.cat([torch.linspace(0, 1, 20_001, dtype=torch.float64), tent_breakpoints(k),
                   torch.rand(5000, generator=g, dtype=torch.float64)])
    with torch.no_grad():
        out = net(x.unsqueeze(1))
        flat = net(x)
    assert out.shape == (len(x), 1) and flat.shape == (len(x),)
    assert torch.equal(out[:, 0], tent_power(x, k))  # bit for bit in float64
    assert torch.equal(flat, out[:, 0])
    b = tent_breakpoints(k)
    with torch.no_grad():
        assert torch.equal(net(b), tent_power(b, k))


@pytest.mark.parametrize("k", [0, 1, 2, 5])
def test_network_structure_and_weights(k):
    net = TentNetwork(k)
    assert isinstance(net, nn.Sequential) and net.k == net.depth == k
    linears = [m for m in net if isinstance(m, nn.Linear)]
    relus = [m for m in net if isinstance(m, nn.ReLU)]
    assert len(linears) == k + 1 and len(relus) == k
    assert all(lin.weight.dtype == torch.float64 for lin in linears)
    assert all(lin.out_features == 2 for lin in linears[:-1]) and linears[-1].out_features == 1
    if k == 0:
        assert linears[0].weight.item() == 1 and linears[0].bias.item() == 0
        return
    assert linears[0].weight.tolist() == [[1.0], [2.0]] and linears[0].bias.tolist() == [0.0, -1.0]
    for lin in linears[1:-1]:
        assert lin.weight.tolist() == [[2.0, -2.0], [4.0, -4.0]] and lin.bias.tolist() == [0.0, -1.0]
    assert linears[-1].weight.tolist() == [[2.0, -2.0]] and linears[-1].bias.tolist() == [0.0]


def test_network_float32_also_exact_on_dyadic_grid():
    x = torch.arange(2**12 + 1, dtype=torch.float32) / 2**12
    net = TentNetwork(6, dtype=torch.float32)
    with torch.no_grad():
        assert torch.equal(net(x), tent_power(x, 6))


def _pieces(y: torch.Tensor, h: float) -> tuple[int, torch.Tensor]:
    slopes = torch.diff(y) / h
    return 1 + int((slopes[1:] != slopes[:-1]).sum()), slopes


@pytest.mark.parametrize("k", range(13))
def test_two_to_the_k_pieces(k):
    """On a dyadic grid finer than the breakpoints every cell lies in one piece, so the
    slopes are exact and the count of slope changes is exact."""
    m = k + 3
    x = torch.arange(2**m + 1, dtype=torch.float64) / 2**m
    with torch.no_grad():
        y = TentNetwork(k)(x)
    pieces, slopes = _pieces(y, 2.0**-m)
    assert pieces == 2**k
    assert set(slopes.abs().unique().tolist()) == {2.0**k}
    if k > 0:  # 2^(k-1) teeth: interior maxima (value 1)
        assert int(((y[1:-1] > y[:-2]) & (y[1:-1] > y[2:])).sum()) == 2 ** (k - 1)


@pytest.mark.parametrize("bad", [-1, 1.5, 2.0, True, "3", None])
def test_bad_k(bad):
    for call in (lambda: tent_power(torch.zeros(3), bad), lambda: TentNetwork(bad), lambda: tent_breakpoints(bad),
                 lambda: sample_tent(10, bad, 0)):
        with pytest.raises(ValueError, match="k: expected a non-negative integer"):
            call()


def test_breakpoints_too_many():
    with pytest.raises(ValueError, match=f"k <= {MAX_BREAKPOINT_K}"):
        tent_breakpoints(MAX_BREAKPOINT_K + 1)


# --- sampling ------------------------------------------------------------------------------


def test_sample_basic_and_same_stream_scheme_as_the_ladder():
    s = sample_tent(10_000, 4, seed=2)
    assert isinstance(s, TentSample) and len(s) == 10_000 and s.pieces == 16
    assert s.x.shape == (10_000, 1) and s.y.shape == (10_000, 1)
    assert s.x.dtype == s.y.dtype == torch.float64
    assert float(s.x.min()) >= 0 and float(s.x.max()) < 1
    assert torch.equal(s.y, tent_power(s.x, 4)) and torch.equal(s.clean_y, s.y)
    assert (s.seed, s.start, s.total, s.noise) == (2, 0, 10_000, 0.0)
    assert s.meta == {"shard": [0, 1], "block_size": BLOCK_SIZE, "stream_version": 1}
    # block b is drawn whole from the ladder's block generator (seed, b)
    for b in range(3):
        block = torch.rand(BLOCK_SIZE, generator=block_generator(2, b), dtype=torch.float64)
        assert torch.equal(s.x[b * BLOCK_SIZE: (b + 1) * BLOCK_SIZE, 0], block[: 10_000 - b * BLOCK_SIZE])


def test_sample_deterministic_and_chunk_independent():
    ref = sample_tent(13_000, 3, seed=5)
    assert torch.equal(ref.x, sample_tent(13_000, 3, seed=5).x)
    assert not torch.equal(ref.x, sample_tent(13_000, 3, seed=6).x)
    for chunk in (1, 100, 5000, 8192, 10**6):
        s = sample_tent(13_000, 3, seed=5, chunk_size=chunk)
        assert torch.equal(s.x, ref.x) and torch.equal(s.y, ref.y)
    # a longer stream starts with the shorter one
    assert torch.equal(sample_tent(20_000, 3, seed=5).x[:13_000], ref.x)


@pytest.mark.parametrize("n,shards", [(10_000, 3), (9000, 4), (5, 5), (12_289, 2)])
def test_shards_concatenate_to_the_full_stream(n, shards):
    full = sample_tent(n, 7, seed=1, noise=0.05)
    parts = [sample_tent(n, 7, seed=1, shard=f"{i}/{shards}", chunk_size=1000, noise=0.05) for i in range(shards)]
    assert [p.start for p in parts] == [i * n // shards for i in range(shards)]
    assert all(p.total == n and p.meta["shard"] == [i, shards] for i, p in enumerate(parts))
    assert torch.equal(torch.cat([p.x for p in parts]), full.x)
    assert torch.equal(torch.cat([p.y for p in parts]), full.y)
    assert torch.equal(sample_tent(n, 7, seed=1, shard=(1, shards), noise=0.05).x, parts[1].x)


def test_label_noise():
    clean = sample_tent(50_000, 2, seed=0)
    noisy = sample_tent(50_000, 2, seed=0, noise=0.1)
    assert torch.equal(noisy.x, clean.x)  # x is drawn before the noise, whatever sigma is
    assert torch.equal(noisy.clean_y, clean.y)
    resid = noisy.y - clean.y
    assert abs(resid.std().item() - 0.1) < 0.003 and abs(resid.mean().item()) < 0.003
    assert torch.allclose(sample_tent(50_000, 2, seed=0, noise=0.2).y - clean.y, 2 * resid, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kwargs,match", [
    ({"num_examples": 0}, "num_examples: expected a positive integer"),
    ({"num_examples": 2.5}, "num_examples: expected a positive integer"),
    ({"seed": -1}, "seed: expected a non-negative integer"),
    ({"chunk_size": 0}, "chunk_size: expected a positive integer"),
    ({"shard": "3/2"}, "shard: expected 0 <= i < n"),
    ({"shard": "a/b"}, "shard: expected 'i/n' with integers"),
    ({"distribution": "normal"}, "distribution: expected one of 'uniform'"),
    ({"noise": -0.1}, "noise: expected a finite standard deviation"),
    ({"noise": math.nan}, "noise: expected a finite standard deviation"),
    ({"noise": math.inf}, "noise: expected a finite standard deviation"),
    # issue 27: refused from its size before any allocation (was the allocator's message, at the CLI only)
    ({"num_examples": 10**13}, r"num_examples: 10,000,000,000,000 tent examples held in memory need about 5.6e\+05 GB"),
])
def test_sample_bad_arguments(kwargs, match):
    args = {"num_examples": 10, "k": 2, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=match):
        sample_tent(args.pop("num_examples"), args.pop("k"), args.pop("seed"), **args)


# --- dataset files -------------------------------------------------------------------------


def test_round_trip(tmp_path):
    s = sample_tent(6000, 5, seed=3, noise=0.01)
    path = save_tent_dataset(s, tmp_path / "t.npz")
    assert dataset_format(path) == "smaso-tent-dataset"
    back = load_tent_dataset(path)
    assert torch.equal(back.x, s.x) and torch.equal(back.y, s.y)
    assert (back.k, back.seed, back.start, back.total, back.noise, back.distribution) == (5, 3, 0, 6000, 0.01,
                                                                                        "uniform")
    assert back.meta["shard"] == [0, 1] and back.meta["files"] == [str(path)]
    comp = load_tent_dataset(save_tent_dataset(s, tmp_path / "c.npz", compress=True))
    assert torch.equal(comp.y, s.y)
    with np.load(path, allow_pickle=False) as npz:  # no pickles; meta is plain JSON
        meta = json.loads(str(npz["meta"][()]))
        assert set(npz.files) == {"meta", "x", "y"}
    assert meta["format"] == "smaso-tent-dataset" and meta["version"] == 1 and set(meta["sha256"]) == {"x", "y"}
    assert list(tmp_path.glob(".*.tmp")) == []


def test_shard_files_join(tmp_path):
    full = sample_tent(9000, 6, seed=4)
    paths = [save_tent_dataset(sample_tent(9000, 6, seed=4, shard=f"{i}/3"), tmp_path / f"s{i}.npz")
             for i in range(3)]
    joined = load_tent_dataset(paths[::-1])  # any order: joined in stream order
    assert torch.equal(joined.x, full.x) and joined.start == 0 and joined.total == 9000
    with pytest.raises(DatasetFormatError, match="gap or overlap"):
        load_tent_dataset([paths[0], paths[2]])
    with pytest.raises(DatasetFormatError, match="gap or overlap"):
        load_tent_dataset([paths[0], paths[0]])
    other = save_tent_dataset(sample_tent(9000, 5, seed=4, shard="1/3"), tmp_path / "k5.npz")
    with pytest.raises(DatasetFormatError, match="not a shard of the same stream"):
        load_tent_dataset([paths[0], other])
    with pytest.raises(ValueError, match="at least one"):
        load_tent_dataset([])


def test_truncated_corrupted_foreign_and_versioned(tmp_path):
    path = save_tent_dataset(sample_tent(3000, 3, seed=0), tmp_path / "t.npz")
    data = path.read_bytes()
    (tmp_path / "trunc.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetFormatError, match="corrupted or truncated"):
        load_tent_dataset(tmp_path / "trunc.npz")
    with np.load(path, allow_pickle=False) as npz:
        members = {k: npz[k] for k in npz.files}
    bad = dict(members, y=members["y"].copy())
    bad["y"][7, 0] += 1e-9
    np.savez(tmp_path / "bad.npz", **bad)
    with pytest.raises(DatasetFormatError, match="SHA-256"):
        load_tent_dataset(tmp_path / "bad.npz")
    raw = bytearray(data)
    raw[len(raw) // 2] ^= 0xFF
    (tmp_path / "flip.npz").write_bytes(bytes(raw))
    with pytest.raises(DatasetFormatError):
        load_tent_dataset(tmp_path / "flip.npz")
    np.savez(tmp_path / "nox.npz", meta=members["meta"], y=members["y"])
    with pytest.raises(DatasetFormatError, match="lacks member 'x'"):
        load_tent_dataset(tmp_path / "nox.npz")
    meta = json.loads(str(members["meta"][()]))
    for change, match in (({"version": 99}, "version 99"), ({"format": "other"}, "not a smaso-tent-dataset")):
        np.savez(tmp_path / "m.npz", **dict(members, meta=np.array(json.dumps({**meta, **change}))))
        with pytest.raises(DatasetFormatError, match=match):
            load_tent_dataset(tmp_path / "m.npz")
    np.savez(tmp_path / "plain.npz", a=np.arange(3))
    with pytest.raises(DatasetFormatError, match="no 'meta' member"):
        load_tent_dataset(tmp_path / "plain.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(DatasetFormatError, match="corrupted or truncated"):
        load_tent_dataset(tmp_path / "text.npz")
    assert dataset_format(tmp_path / "text.npz") is None and dataset_format(tmp_path / "plain.npz") is None
    with pytest.raises(DatasetFormatError, match="no such file"):
        load_tent_dataset(tmp_path / "nope.npz")


def test_ladder_and_tent_files_do_not_mix(tmp_path):
    tent_file = save_tent_dataset(sample_tent(100, 2, seed=0), tmp_path / "t.npz")
    lad_file = save_dataset(sample_ladder(Ladder.random(depth=1, branching=2, events=2, seed=0), 100, seed=0),
                            tmp_path / "l.npz")
    with pytest.raises(DatasetFormatError, match="not a smaso-ladder-dataset file"):
        load_dataset(tent_file)
    with pytest.raises(DatasetFormatError, match="not a smaso-tent-dataset file"):
        load_tent_dataset(lad_file)
    assert dataset_format(lad_file) == "smaso-ladder-dataset"


def test_save_errors(tmp_path):
    with pytest.raises(TypeError, match="TentSample"):
        save_tent_dataset(object(), tmp_path / "t.npz")
    with pytest.raises(ValueError, match="does not exist"):
        save_tent_dataset(sample_tent(10, 1, 0), tmp_path / "missing" / "t.npz")
    assert list(tmp_path.iterdir()) == []


# --- command line --------------------------------------------------------------------------


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["sample", "tent", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "usage: smaso sample tent" in out and "--k" in out and "--shard" in out and "--noise" in out


def test_cli_sample_and_inspect(tmp_path, capsys):
    out = tmp_path / "t.npz"
    assert main(["sample", "tent", "--k", "6", "-n", "5000", "--seed", "2", "--out", str(out)]) == 0
    assert "64 linear pieces" in capsys.readouterr().out
    s = load_tent_dataset(out)
    assert torch.equal(s.x, sample_tent(5000, 6, seed=2).x) and s.k == 6
    assert main(["inspect", str(out), "--json", str(tmp_path / "r.json")]) == 0
    text = capsys.readouterr().out
    assert "tau^6" in text and "5000 examples" in text and "x range: [" in text
    rows = re.findall(r"^\[(\d\.\d), (\d\.\d)\)\s+(\d+)\s+([0-9.]+)$", text, flags=re.M)
    assert len(rows) == 10 and sum(int(r[2]) for r in rows) == 5000
    assert re.search(r"max \|y - tau\^6\(x\)\| = 0 \(exact labels\)", text)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["k"] == 6 and report["n"] == 5000 and report["max_abs_y_minus_target"] == 0
    assert report["x_histogram"]["counts"] == [int(r[2]) for r in rows]
    assert 0 <= report["x_min"] < report["x_max"] < 1


def test_cli_noise_shards_and_joined_inspect(tmp_path, capsys):
    common = ["sample", "tent", "--k", "3", "-n", "9000", "--seed", "1", "--noise", "0.05"]
    assert main([*common, "--out", str(tmp_path / "full.npz")]) == 0
    for i in range(3):
        assert main([*common, "--shard", f"{i}/3", "--chunk-size", "5000", "--out", str(tmp_path / f"s{i}.npz")]) == 0
    full = load_tent_dataset(tmp_path / "full.npz")
    joined = load_tent_dataset([tmp_path / f"s{i}.npz" for i in range(3)])
    assert torch.equal(full.x, joined.x) and torch.equal(full.y, joined.y) and full.noise == 0.05
    capsys.readouterr()
    assert main(["inspect", *(str(tmp_path / f"s{i}.npz") for i in range(3))]) == 0
    text = capsys.readouterr().out
    assert "9000 examples (rows 0..9000 of 9000" in text and "sigma 0.05" in text
    dev = float(re.search(r"max \|y - tau\^3\(x\)\| = ([0-9.e+-]+)", text).group(1))
    assert 0.1 < dev < 0.5 and "exact labels" not in text


@pytest.mark.parametrize("argv,match", [
    (["sample", "tent", "--k", "-1", "-n", "10", "--out", "X"], "--k: expected a non-negative integer, got '-1'"),
    (["sample", "tent", "--k", "1.5", "-n", "10", "--out", "X"], "--k: expected an integer"),
    (["sample", "tent", "-n", "10", "--out", "X"], "the following arguments are required: --k"),
    (["sample", "tent", "--k", "2", "-n", "0", "--out", "X"], "-n: expected a positive integer"),
    (["sample", "tent", "--k", "2", "-n", "-5", "--out", "X"], "-n: expected a positive integer"),
    (["sample", "tent", "--k", "2", "-n", "10", "--shard", "3/2", "--out", "X"], "shard: expected 0 <= i < n"),
    (["sample", "tent", "--k", "2", "-n", "10", "--shard", "one/two", "--out", "X"], "shard: expected 'i/n'"),
    (["sample", "tent", "--k", "2", "-n", "10", "--noise", "-1", "--out", "X"], "noise: expected a finite"),
    (["sample", "tent", "--k", "2", "-n", "10", "--seed", "-3", "--out", "X"], "non-negative integer"),
    (["sample", "tent", "--k", "2", "-n", "10", "--out", "nodir/X"], "does not exist"),
])
def test_cli_bad_input_exits_2_and_writes_nothing(argv, match, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert match in err and "error" in err
    assert list(tmp_path.iterdir()) == []


def test_cli_huge_k(tmp_path, capsys):
    # float64 x has 53 random bits and tau^k keeps 53 - k of them: a huge k is refused, not sampled as zeros
    out = tmp_path / "t.npz"
    with pytest.raises(SystemExit) as e:
        main(["sample", "tent", "--k", "20000", "-n", "10", "--out", str(out)])
    assert e.value.code == 2 and "k: at most 40" in capsys.readouterr().err and not out.exists()
    assert main(["sample", "tent", "--k", "40", "-n", "10", "--out", str(out)]) == 0
    assert f"{2**40} linear pieces" in capsys.readouterr().out
    assert main(["inspect", str(out)]) == 0
    assert f"{2**40} linear pieces" in capsys.readouterr().out


def test_cli_inspect_bad_tent_file(tmp_path, capsys):
    path = save_tent_dataset(sample_tent(100, 2, seed=0), tmp_path / "t.npz")
    with np.load(path, allow_pickle=False) as npz:
        members = {k: npz[k] for k in npz.files}
    members["x"] = members["x"] + 1e-3
    np.savez(tmp_path / "bad.npz", **members)
    with pytest.raises(SystemExit) as e:
        main(["inspect", str(tmp_path / "bad.npz")])
    assert e.value.code == 2 and "smaso: error: dataset:" in capsys.readouterr().err
