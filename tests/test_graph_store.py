"""Graph ladders in the out-of-core format and the CLI (issue 17): a region-graph :class:`Ladder` store is written,
verified and read exactly as a tree's, its rows are those of :func:`sample_ladder` whatever the chunking,
sharding or engine, its frequencies match the exact junction-tree statistics, and ``smaso spec --graph`` /
``sample ladder --spec graph.json`` / ``inspect`` work end to end, bad input being one error line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr

from inference.posterior import graph_statistics
from smaso.cli import main
from teachers.chunked import (
    ChunkDataset,
    StreamingLadderDataset,
    as_chunks,
    create_partial,
    default_chunk_rows,
    finalize,
    open_dataset,
    row_bytes,
    sample_to_store,
    write_chunk,
)
from teachers.dataset import DatasetFormatError, load_dataset
from teachers.emission import one_hot
from teachers.engine import SerialEngine
from teachers.ladder import FORMAT, SPEC_VERSION, Ladder, LadderSpecError
from teachers.sampling import (
    BLOCK_SIZE,
    GRAPH_STREAM_VERSION,
    LadderSample,
    sample_ladder,
    sample_rows,
    sampling_plan,
)
from teachers.spec_io import load_spec, save_spec, spec_to_jsonable

pytestmark = pytest.mark.usefixtures("one_thread")


def _conv(mode: str = "topdown", sigma: float | None = None, seed: int = 1) -> Ladder:
    """8 leaves; kernel 3 stride 1, kernel 2 stride 2, kernel 3: regions [1, 3, 6, 8], leaves with 1..3 parents."""
    return Ladder.conv1d(8, [3, 2, 3], [1, 2, 1], [2, 3, 3, 2], mode=mode, seed=seed, sigma=sigma)


def _mixed(mode: str = "topdown") -> Ladder:
    """An irregular DAG whose regions have different event counts, one of them above 256 (int16 events)."""
    events = [[3], [300, 2, 4], [2, 2, 2, 2]]
    parents = [[[]], [[0], [0], [0]], [[0, 1], [1], [1, 2], [0, 2]]]
    return Ladder.random(events=events, parents=parents, mode=mode, seed=5)


def _attrs(store: Path) -> dict:
    return json.loads((store / "zarr.json").read_text())["attributes"]


def _edit_attrs(store: Path, **changes) -> None:
    meta = json.loads((store / "zarr.json").read_text())
    meta["attributes"].update(changes)
    (store / "zarr.json").write_text(json.dumps(meta))


def _spec(lad: Ladder) -> dict:
    """The spec with its tables as nested lists (equal lists: the same float64 values bit for bit)."""
    return spec_to_jsonable(lad.to_dict())


def _same(a, b) -> None:
    assert torch.equal(a.z, b.z)
    assert (a.x is None and b.x is None) or torch.equal(a.x, b.x)


# ---------------------------------------------------------------------- the library
@pytest.mark.parametrize("sigma", [None, 0.5])
@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
def test_round_trip_rebuilds_the_graph_and_its_rows(tmp_path, mode, sigma):
    g = _conv(mode, sigma)
    n = 2 * BLOCK_SIZE + 1234
    path = sample_to_store(g, n, tmp_path / "g.zarr", seed=7, chunk_rows=BLOCK_SIZE)
    attrs = _attrs(path)
    assert (attrs["format"], attrs["version"]) == ("smaso-ladder-dataset", 2)  # the format is unchanged
    assert (attrs["spec"]["format"], attrs["spec"]["version"]) == (FORMAT, SPEC_VERSION) == ("smaso-ladder", 2)
    assert attrs["graph_stream_version"] == GRAPH_STREAM_VERSION
    assert attrs["x_stored"] == (sigma is not None) and attrs["event_dtype"] == "uint8"
    arrays = {p.name for p in (path / "spec").iterdir() if p.is_dir()}  # one packed array per level, not per region
    tables = {"prior", "tables.0", "tables.1", "tables.2"} if mode == "topdown" else {
        "leaf_prior", "lookup.0", "lookup.1", "lookup.2"}
    assert arrays == tables | ({"emission.means", "emission.sigma"} if sigma else set())
    data = open_dataset(path)
    assert data.is_graph and data.teacher is data.ladder and isinstance(data.ladder, Ladder)
    assert not data.ladder.is_uniform() and not data.ladder.is_tree()
    assert _spec(data.ladder) == _spec(g)  # tables bit for bit
    assert data.meta["graph_stream_version"] == GRAPH_STREAM_VERSION
    ref = sample_ladder(g, n, 7)
    whole = data.to_sample()
    assert isinstance(whole, LadderSample) and (whole.start, whole.total, whole.seed) == (0, n, 7)
    _same(whole, ref)
    assert torch.equal(whole.y, ref.y) and torch.equal(whole.inputs(), ref.inputs())
    assert torch.equal(whole.leaves, ref.events(g.depth))
    c1 = data.chunk(1)
    assert isinstance(c1, LadderSample) and c1.start == BLOCK_SIZE
    assert torch.equal(c1.z, ref.z[BLOCK_SIZE: 2 * BLOCK_SIZE])
    part = data.read(4000, 9000)
    assert part.start == 4000 and torch.equal(part.z, ref.z[4000:9000])
    windows = list(data.iter_chunks(3000))
    assert [w.start for w in windows] == list(range(0, n, 3000))
    assert torch.equal(torch.cat([w.z for w in windows]), ref.z)
    assert torch.equal(load_dataset(path).to_sample().z, ref.z)  # through the format-agnostic loader too
    assert data.verify()["rows"] == n


def test_mixed_event_counts_use_the_graph_event_dtype(tmp_path):
    for mode in ("topdown", "bottomup"):
        g = _mixed(mode)
        assert g.event_dtype() == torch.int16
        path = sample_to_store(g, 5000, tmp_path / f"{mode}.zarr", seed=2, chunk_rows=BLOCK_SIZE)
        assert _attrs(path)["event_dtype"] == "int16"
        back = open_dataset(path).to_sample()
        assert back.z.dtype == torch.int16
        _same(back, sample_ladder(g, 5000, 2))
        limits = torch.tensor([m for lvl in g.region_events for m in lvl])
        assert bool((back.z.long() < limits).all())
    assert row_bytes(_mixed()) == (_mixed().total_regions + 1) * 2


def test_same_bytes_whatever_the_chunking_the_shards_and_the_engine(tmp_path):
    g, n = _conv("topdown", 0.7), 3 * BLOCK_SIZE + 77
    ref = sample_ladder(g, n, 11)
    for rows in (BLOCK_SIZE, 2 * BLOCK_SIZE, 16 * BLOCK_SIZE):
        _same(open_dataset(sample_to_store(g, n, tmp_path / f"c{rows}.zarr", seed=11, chunk_rows=rows)).to_sample(),
              ref)
    engine = open_dataset(sample_to_store(g, n, tmp_path / "e.zarr", seed=11, chunk_rows=BLOCK_SIZE,
                                          engine=SerialEngine())).to_sample()
    _same(engine, ref)
    shards = [sample_to_store(g, n, tmp_path / f"s{i}.zarr", seed=11, shard=(i, 3), chunk_rows=BLOCK_SIZE)
              for i in range(3)]
    joined = open_dataset(shards[::-1])  # any order: sorted by start
    assert joined.num_chunks == sum(open_dataset(s, partial=True).num_chunks for s in shards)
    _same(joined.to_sample(), ref)
    one = open_dataset(shards[1], partial=True)
    assert not one.covers_stream and one.start == n // 3
    # the in-memory sampler's shard is the same rows
    mid = sample_ladder(g, n, 11, shard="1/3")
    assert (mid.start, mid.total, mid.meta["shard"]) == (n // 3, n, [1, 3])
    assert torch.equal(mid.z, ref.z[n // 3: 2 * n // 3]) and torch.equal(mid.x, ref.x[n // 3: 2 * n // 3])
    _same(one.to_sample(), mid)
    # shards of another graph or seed do not join
    other = sample_to_store(_conv("topdown", 0.7, seed=2), n, tmp_path / "o.zarr", seed=11, shard=(2, 3),
                            chunk_rows=BLOCK_SIZE)
    with pytest.raises(DatasetFormatError, match="not a shard of the same stream"):
        open_dataset([shards[0], shards[1], other])


@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
def test_any_row_range_is_the_same_bytes_as_the_full_sample(mode):
    g = _conv(mode, 0.4 if mode == "topdown" else None)
    n = 3 * BLOCK_SIZE + 5
    ref = sample_ladder(g, n, 3)
    plan = sampling_plan(g)
    for lo, hi in ((0, n), (1, 2), (BLOCK_SIZE - 3, BLOCK_SIZE + 3), (100, 2 * BLOCK_SIZE + 100), (n - 1, n),
                   (7, 7)):
        for chunk_size in (None, 1, 3 * BLOCK_SIZE):
            z, x = sample_rows(g, 3, lo, hi, plan=plan, chunk_size=chunk_size)
            assert torch.equal(z, ref.z[lo:hi]), (lo, hi, chunk_size)
            assert (x is None) == (ref.x is None) and (x is None or torch.equal(x, ref.x[lo:hi]))
    z, _ = sample_rows(g, 3, 5, 9)  # no plan: built here
    assert torch.equal(z, ref.z[5:9])
    with pytest.raises(ValueError, match="hi"):
        sample_rows(g, 3, 9, 5)
    with pytest.raises(ValueError, match="lo"):
        sample_rows(g, 3, -1, 5)
    with pytest.raises(TypeError, match="plan"):
        sample_rows(g, 3, 0, 5, plan=sampling_plan(_conv(mode, seed=9)))
    with pytest.raises(TypeError, match="ladder: expected a Ladder"):
        sample_rows(object(), 0, 0, 5)
    with pytest.raises(ValueError, match="shard"):
        sample_ladder(g, 10, 0, shard="3/3")


def test_graph_samples_have_the_row_access_of_ladder_samples():
    g = _conv()
    s = sample_ladder(g, 1000, 0)
    assert s.ladder is g and s.teacher is g and (s.start, s.total) == (0, 1000)
    parts = list(s.iter_chunks(300))
    assert [len(p) for p in parts] == [300, 300, 300, 100] and [p.start for p in parts] == [0, 300, 600, 900]
    assert all(isinstance(p, LadderSample) for p in parts) and torch.equal(torch.cat([p.z for p in parts]), s.z)
    moved = s.to("cpu")
    assert isinstance(moved, LadderSample) and torch.equal(moved.z, s.z)
    chunks = as_chunks(s, 256)
    assert chunks.num_chunks == 4 and chunks.is_graph and isinstance(chunks.chunk(3), LadderSample)
    assert chunks.chunk(3).start == 768 and torch.equal(chunks.chunk(3).z, s.z[768:])
    # the PyTorch datasets build one-hot leaves from z as for a tree
    xs, ys, zs = ChunkDataset(s, chunk_rows=256)[1]
    assert zs.dtype == torch.int64 and torch.equal(ys, zs[:, 0])
    assert torch.equal(xs, one_hot(zs[:, g.level_offsets[-2]:], g.leaf_events, torch.float32))
    batches = list(StreamingLadderDataset(s, batch_size=128, chunk_rows=256))
    assert sum(len(b[1]) for b in batches) == 1000 and batches[0][0].shape == (128, 8, 2)


def test_tree_stores_are_unchanged(tmp_path):
    lad = Ladder.random(depth=2, branching=2, events=3, seed=0)
    path = sample_to_store(lad, 5000, tmp_path / "t.zarr", chunk_rows=BLOCK_SIZE)
    attrs = _attrs(path)
    assert "graph_stream_version" not in attrs and attrs["spec"]["format"] == "smaso-ladder"
    data = open_dataset(path)
    assert not data.is_graph and isinstance(data.chunk(0), LadderSample)
    with pytest.raises(DatasetFormatError, match="graph_stream_version"):  # a tree and a graph never join
        open_dataset([path, sample_to_store(_conv(), 5000, tmp_path / "g.zarr")])


def test_row_bytes_default_chunk_rows_and_working_memory(tmp_path, monkeypatch):
    g, gauss = _conv(), _conv(sigma=0.5)
    assert row_bytes(g) == g.total_regions + 1  # uint8 events and label, one-hot x rebuilt
    assert row_bytes(gauss) == gauss.total_regions + 1 + 8 * 2 * 4  # + float32 x
    assert default_chunk_rows(g) == 16 * BLOCK_SIZE
    wide = Ladder.conv1d(64, [64], [1], [2, 64], seed=0, sigma=1.0)  # 64 leaves x 64 floats: 16 KiB of x
    assert default_chunk_rows(wide) == BLOCK_SIZE
    with pytest.raises(TypeError, match="ladder: expected a Ladder"):
        row_bytes("ladder")
    import teachers.sampling as sampling

    monkeypatch.setattr(sampling, "_available_bytes", lambda device: 1000)
    with pytest.raises(ValueError, match="working memory"):
        sample_to_store(g, 10, tmp_path / "m.zarr")
    assert list(tmp_path.iterdir()) == []  # refused before the store (or its partial) was made


def test_write_contract_and_checksums(tmp_path):
    g, n = _conv("bottomup"), 2 * BLOCK_SIZE + 10
    partial = create_partial(tmp_path / "w.zarr", g, n=n, seed=4, chunk_rows=BLOCK_SIZE)
    sums = []
    for c in (2, 0, 1):  # any order, as from other processes
        lo, hi = c * BLOCK_SIZE, min(n, (c + 1) * BLOCK_SIZE)
        z, x = sample_rows(g, 4, lo, hi)
        sums.append(write_chunk(partial, c, z, x))
    with pytest.raises(ValueError, match="z: chunk 0 expects shape"):
        write_chunk(partial, 0, torch.zeros(BLOCK_SIZE, g.total_regions, dtype=torch.int16))
    path = finalize(partial, tmp_path / "w.zarr", sums)
    _same(open_dataset(path).to_sample(), sample_ladder(g, n, 4))
    # a corrupted chunk is named when read
    f = path / "z" / "c" / "1" / "0"
    raw = bytearray(f.read_bytes())
    raw[len(raw) // 2] ^= 0x5A
    f.write_bytes(bytes(raw))
    data = open_dataset(path)
    assert len(data.chunk(0)) == BLOCK_SIZE
    with pytest.raises(DatasetFormatError, match=r"array 'z' chunk 1 \(rows \[4096, 8192\).*(SHA-256|decoded)"):
        data.chunk(1)
    with pytest.raises(DatasetFormatError, match="1 of 3 chunks fail verification"):
        data.verify()


def test_edited_metadata_and_spec_are_named(tmp_path):
    g = _conv()
    path = sample_to_store(g, 3000, tmp_path / "a.zarr")
    spec = _attrs(path)["spec"]
    spec["mode"] = "bottomup"
    _edit_attrs(path, spec=spec)
    with pytest.raises(DatasetFormatError, match=r"field\(s\) 'spec.mode' changed"):
        open_dataset(path)
    path = sample_to_store(g, 3000, tmp_path / "b.zarr")
    _edit_attrs(path, graph_stream_version=1)
    with pytest.raises(DatasetFormatError, match=r"'graph_stream_version' changed"):
        open_dataset(path)
    # a table edited into another valid probability row fails its spec array's checksum
    path = sample_to_store(g, 3000, tmp_path / "c.zarr")
    table = zarr.open_array(str(path / "spec" / "tables.1"), mode="r+")  # level 2's tables
    t = table[...]
    t[:3] = t[:3][::-1]
    table[...] = t
    with pytest.raises(DatasetFormatError, match=r"spec array 'spec.tables.1' fails its SHA-256 check"):
        open_dataset(path)


def test_frequencies_match_the_exact_graph_statistics(tmp_path):
    n = 60_000
    tol = 5 / math.sqrt(n)
    for mode in ("topdown", "bottomup"):
        g = _conv(mode, seed=3)
        data = open_dataset(sample_to_store(g, n, tmp_path / f"{mode}.zarr", seed=1, chunk_rows=4 * BLOCK_SIZE))
        exact = graph_statistics(g)
        off = g.level_offsets
        counts = [np.zeros(m) for lvl in g.region_events for m in lvl]
        pairs = {e: np.zeros((g.region_events[e[0] - 1][e[1]], g.region_events[e[0]][e[2]])) for e in g.edges()}
        for chunk in data.iter_chunks():  # streamed, one chunk at a time
            z = chunk.z.long().numpy()
            for r in range(g.total_regions):
                counts[r] += np.bincount(z[:, r], minlength=len(counts[r]))
            for (l, p, i), tab in pairs.items():
                np.add.at(tab, (z[:, off[l - 1] + p], z[:, off[l] + i]), 1)
        for l in range(g.depth + 1):
            for i in range(g.num_regions[l]):
                assert np.abs(counts[off[l] + i] / n - exact.p[l][i].numpy()).max() < tol, (mode, l, i)
        for e, tab in pairs.items():
            assert np.abs(tab / n - exact.pair[e].numpy()).max() < tol, (mode, e)


def test_graph_spec_files_round_trip_and_bad_fields_are_one_line(tmp_path):
    g = _conv()
    assert _spec(load_spec(save_spec(g, tmp_path / "g.json"))) == _spec(g)
    good = _spec(g)
    bad = {
        "unknown field": ({**good, "colour": "red"}, "colour: unknown field"),
        "a field of the old format": ({**good, "lookups": []}, "lookups: unknown field"),
        "other mode's tables": ({**good, "lookup": []},
                                "lookup: only for mode='bottomup'; a topdown ladder takes prior and tables"),
        "a number for a list": ({**good, "tables": 5}, "tables: expected a list"),
        "a level not a list": ({**good, "tables": [good["tables"][0], 5, good["tables"][2]]},
                               r"tables\[1\]: expected a list"),
        "wrong table size": ({**good, "tables": [[[[0.5, 0.5]]] * 3, *good["tables"][1:]]},
                             r"tables\[0\]\[0\]: expected shape \(2, 3\)"),
        "too few levels": ({**good, "tables": good["tables"][:2]},
                           r"tables: expected a list of 3 tables \(one per level below the root\)"),
        "a parent out of range": ({**good, "parents": [*good["parents"][:3], [[0, 9], *good["parents"][3][1:]]]},
                                  r"parents\[3\]\[0\]: indices must lie in"),
        "bad events": ({**good, "events": [2, [3, "x", 3], 3, 2]}, r"events\[1\]\[1\]: expected an integer"),
        "NaN prior": ({**good, "prior": [math.nan, 1.0]}, "prior: contains NaN or infinity"),
        "bad emission": ({**good, "emission": {"kind": "gaussian", "sigma": -1}}, "emission.sigma"),
        "bad version": ({**good, "version": 7}, "format, version"),
    }
    for what, (spec, expect) in bad.items():
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(spec))
        with pytest.raises(LadderSpecError, match=expect) as e:
            load_spec(path)
        assert "\n" not in str(e.value), what


# ---------------------------------------------------------------------- the command line
def _error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("smaso: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.slow  # a graph spec through three commands (about 4 s) (slow tier: default-tier budget)
def test_cli_spec_sample_inspect_end_to_end(tmp_path, capsys):
    spec = tmp_path / "g.json"
    assert main(["-q", "spec", "--graph", "conv1d", "--width", "8", "--kernels", "3,2,3", "--strides", "1,2,1",
                 "--events", "2,3,3,2", "--ladder-seed", "1", "--out", str(spec)]) == 0
    g = load_spec(spec)
    assert isinstance(g, Ladder) and g.fingerprint() == _conv(seed=1).fingerprint()
    assert main(["sample", "ladder", "--spec", str(spec), "-n", "20000", "--seed", "5", "--chunk-rows", "8192",
                 "--no-progress", "--out", str(tmp_path / "g.zarr")]) == 0
    assert "DAG" in capsys.readouterr().out  # the ladder's description
    data = open_dataset(tmp_path / "g.zarr")
    _same(data.to_sample(), sample_ladder(g, 20000, 5))
    # a shard from the command line is the same rows
    assert main(["-q", "sample", "ladder", "--spec", str(spec), "-n", "20000", "--seed", "5", "--shard", "1/2",
                 "--out", str(tmp_path / "s1.zarr")]) == 0
    assert torch.equal(open_dataset(tmp_path / "s1.zarr", partial=True).to_sample().z, data.to_sample().z[10000:])
    assert main(["inspect", str(tmp_path / "g.zarr"), "--bayes-n", "500", "--no-progress",
                 "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "all within bounds: True" in out and "Bayes-optimal accuracy" in out and "27 parent-child edges" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["teacher"] == "ladder" and report["n"] == 20000 and sum(report["label_counts"]) == 20000
    assert report["statistics"]["within_bound"] and report["regions_per_level"] == [1, 3, 6, 8]
    assert 0.5 <= report["bayes_optimal"]["expected"] <= 1
    # -q and --json -: only the JSON on stdout
    assert main(["-q", "inspect", str(tmp_path / "g.zarr"), "--bayes-n", "0", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 20000
    # a 2-D graph, bottom-up, with Gaussian leaves, straight from the options; --spec --emission overrides
    assert main(["-q", "sample", "ladder", "--graph", "conv2d", "--width", "4", "--kernels", "2,3", "--mode",
                 "bottomup", "--emission", "gaussian", "--sigma", "0.5", "-n", "3000",
                 "--out", str(tmp_path / "c2.zarr")]) == 0
    c2 = open_dataset(tmp_path / "c2.zarr")
    assert c2.x_stored and c2.ladder.num_regions == (1, 9, 16) and c2.ladder.mode == "bottomup"
    assert main(["-q", "sample", "ladder", "--spec", str(spec), "--emission", "gaussian", "--sigma", "0.3",
                 "-n", "100", "--out", str(tmp_path / "gx.zarr")]) == 0
    assert open_dataset(tmp_path / "gx.zarr").x_stored
    # the one student trains on it with Batch Norm too (0.2 refused --bn on a graph)
    assert main(["-q", "compare", str(tmp_path / "g.zarr"), "--steps", "2", "--eval-every", "1", "--bn",
                 "--out", str(tmp_path / "cmp")]) == 0
    assert (tmp_path / "cmp" / "comparison.json").is_file()
    # a version-1 file holds a graph too (0.2 refused it): the same rows as the store
    assert main(["-q", "sample", "ladder", "--spec", str(spec), "-n", "20000", "--seed", "5",
                 "--out", str(tmp_path / "g.npz")]) == 0
    _same(load_dataset(tmp_path / "g.npz"), data.to_sample())


@pytest.mark.parametrize("argv, expect", [
    (["spec", "--graph", "conv1d", "--width", "8", "--kernels", "3,3,2", "--strides", "1,2,1", "--out", "{tmp}/a.json"],
     "--graph conv1d (--width/--height, --kernels, --strides, --events): conv: kernel 3 and stride 2"),
    (["spec", "--graph", "conv1d", "--kernels", "3", "--out", "{tmp}/a.json"], "--width: required with --graph"),
    (["spec", "--graph", "conv1d", "--width", "8", "--out", "{tmp}/a.json"], "--kernels: required with --graph"),
    (["spec", "--width", "8", "--out", "{tmp}/a.json"], "--width: only applies with --graph"),
    (["spec", "--graph", "conv1d", "--width", "8", "--kernels", "3,2,3", "--strides", "1,2", "--out",
      "{tmp}/a.json"], "--strides: expected 3 values"),
    (["spec", "--graph", "conv1d", "--width", "8", "--kernels", "3,2,3", "--strides", "1,2,1", "--events", "2,3",
      "--out", "{tmp}/a.json"], "--events: expected one value or 4"),
    (["spec", "--graph", "conv1d", "--width", "4", "--kernels", "4", "--height", "2", "--out", "{tmp}/a.json"],
     "--height: only applies with --graph conv2d"),
    (["sample", "ladder", "--spec", "{tmp}/good.json", "--graph", "conv1d", "-n", "10", "--out", "{tmp}/a.zarr"],
     "--graph cannot be used with --spec"),
    (["sample", "ladder", "--spec", "{tmp}/bad.json", "-n", "10", "--out", "{tmp}/a.zarr"],
     r"tables[0][0]: expected shape (2, 3)"),
    (["sample", "ladder", "--spec", "{tmp}/unknown.json", "-n", "10", "--out", "{tmp}/a.zarr"],
     "colour: unknown field of a region-graph ladder spec"),
])
def test_cli_bad_input_is_one_line_and_leaves_nothing(tmp_path, capsys, argv, expect):
    g = _conv()
    save_spec(g, tmp_path / "good.json")
    sample_to_store(g, 100, tmp_path / "good.zarr")
    good = spec_to_jsonable(g.to_dict())
    (tmp_path / "bad.json").write_text(json.dumps({**good, "tables": [[[[0.5, 0.5]]] * 3, *good["tables"][1:]]}))
    (tmp_path / "unknown.json").write_text(json.dumps({**good, "colour": "red"}))
    before = sorted(p.name for p in tmp_path.iterdir())
    err = _error(capsys, [a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert expect in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output, no partial, no temporary file
