"""Reading chunked (version-2) stores: chunks, windows, row ranges, pickling, and the PyTorch
datasets over them (map-style per chunk, streaming batches split among DataLoader workers)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from teachers import sample_ladder
from teachers.chunked import ChunkDataset, StreamingLadderDataset, open_dataset, sample_to_store
from teachers.dataset import save_dataset
from teachers.sampling import BLOCK_SIZE

N = 10_000  # three chunks of BLOCK_SIZE rows, the last one short


@pytest.fixture(scope="module")
def store(ladder, tmp_path_factory):
    return sample_to_store(ladder, N, tmp_path_factory.mktemp("s") / "d.zarr", seed=3, chunk_rows=BLOCK_SIZE)


@pytest.fixture(scope="module")
def ref(ladder):
    return sample_ladder(ladder, N, seed=3)


@pytest.fixture(scope="module")
def shards(ladder, tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    return [sample_to_store(ladder, N, root / f"p{i}.zarr", seed=3, shard=f"{i}/2", chunk_rows=BLOCK_SIZE)
            for i in range(2)]


def _sorted_rows(z: torch.Tensor) -> np.ndarray:
    a = z.numpy()
    return a[np.lexsort(a.T[::-1])]


# ---------------------------------------------------------------------- chunks, windows, ranges
def test_chunks_and_their_places(store, ref):
    data = open_dataset(store)
    assert data.num_chunks == 3 and len(data) == N
    assert [data.chunk_bounds(i) for i in range(3)] == [(0, 4096), (4096, 8192), (8192, N)]
    for i in range(3):
        c = data.chunk(i)
        lo, hi = data.chunk_bounds(i)
        assert c.start == lo and c.total == N and c.seed == 3 and torch.equal(c.z, ref.z[lo:hi])
    assert torch.equal(data.chunk(-1).z, data.chunk(2).z)
    with pytest.raises(IndexError, match="chunk 3 out of range"):
        data.chunk(3)
    with pytest.raises(TypeError, match="integer chunk index"):
        data.chunk(1.0)
    assert "3 chunks" in repr(data)


def test_chunk_starts_are_stream_rows_in_a_shard_set(shards, ref):
    second = open_dataset(shards[1], partial=True)
    assert second.start == N // 2 and [c.start for c in second.iter_chunks()] == [5000, 9096]
    both = open_dataset(shards)
    assert both.num_chunks == 4 and both.chunk_rows == BLOCK_SIZE
    assert [c.start for c in both.iter_chunks()] == [0, 4096, 5000, 9096]
    assert torch.equal(both.read(4000, 6000).z, ref.z[4000:6000])  # across the two stores


@pytest.mark.parametrize("lo,hi", [(0, 0), (0, 1), (4095, 4097), (100, N), (8192, N), (5000, 5001)])
def test_read_any_row_range(store, ref, lo, hi):
    s = open_dataset(store).read(lo, hi)
    assert s.start == lo and len(s) == hi - lo and torch.equal(s.z, ref.z[lo:hi])


def test_read_checks_its_arguments(store):
    data = open_dataset(store)
    for lo, hi in [(-1, 5), (5, 4), (0, N + 1), (0.0, 5)]:
        with pytest.raises(ValueError, match="lo, hi"):
            data.read(lo, hi)


@pytest.mark.parametrize("chunk_rows", [1000, 4096, 5000, 20_000])
def test_one_loop_over_a_store_and_a_sample(store, ref, chunk_rows):
    from_store = list(open_dataset(store).iter_chunks(chunk_rows))
    from_memory = list(ref.iter_chunks(chunk_rows))
    assert [(c.start, len(c)) for c in from_store] == [(c.start, len(c)) for c in from_memory]
    assert all(torch.equal(a.z, b.z) for a, b in zip(from_store, from_memory, strict=True))
    assert torch.equal(torch.cat([c.z for c in from_store]), ref.z)


def test_sample_iter_chunks(ref):
    parts = list(ref.iter_chunks(3000))
    assert [p.start for p in parts] == [0, 3000, 6000, 9000] and len(parts[-1]) == 1000
    assert parts[1].z.data_ptr() == ref.z[3000:].data_ptr()  # views, no copy
    shard = sample_ladder(ref.ladder, N, seed=3, shard="1/2")
    assert [p.start for p in shard.iter_chunks(4096)] == [5000, 9096]
    assert len(list(ref.iter_chunks())) == 1
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="chunk_rows"):
            list(ref.iter_chunks(bad))


def test_gaussian_chunks_carry_x(gaussian, tmp_path):
    ref = sample_ladder(gaussian, 5000, seed=1)
    data = open_dataset(sample_to_store(gaussian, 5000, tmp_path / "g.zarr", seed=1, chunk_rows=BLOCK_SIZE))
    c = data.chunk(1)
    assert c.x.dtype == torch.float32 and torch.equal(c.x, ref.x[4096:])
    w = list(data.iter_chunks(3000))
    assert torch.equal(torch.cat([p.x for p in w]), ref.x)
    assert torch.equal(data.read(10, 4200).inputs(), ref.inputs()[10:4200])


def test_pickles_and_opens_lazily_again(store, ref):
    data = open_dataset(store)
    data.chunk(0)  # zarr handles now open in this process
    back = pickle.loads(pickle.dumps(data))
    assert torch.equal(back.chunk(2).z, ref.z[8192:])


# ---------------------------------------------------------------------- PyTorch datasets
def test_chunk_dataset_items(store, ref):
    ds = ChunkDataset(store)
    assert len(ds) == 3
    x, y, z = ds[1]
    assert x.shape == (4096, 9, 5) and x.dtype == torch.float32 and y.dtype == torch.int64 and z.dtype == torch.int64
    assert torch.equal(x, ref.inputs()[4096:8192]) and torch.equal(y, ref.y[4096:8192])
    assert torch.equal(z, ref.z[4096:8192].long())
    assert ds[0][0].dtype == torch.float32
    assert ChunkDataset(store, dtype=torch.float64)[2][0].dtype == torch.float64
    with pytest.raises(IndexError):
        ds[3]
    with pytest.raises(TypeError, match="dtype"):
        ChunkDataset(store, dtype=torch.int32)
    with pytest.raises(TypeError, match="source"):
        ChunkDataset(42)


def test_chunk_dataset_with_workers(store, ref):
    loader = DataLoader(ChunkDataset(store), batch_size=None, num_workers=2)
    zs = [z for _, _, z in loader]
    assert [len(z) for z in zs] == [4096, 4096, N - 8192]
    assert torch.equal(torch.cat(zs), ref.z.long())


def test_chunk_dataset_over_a_sample_and_a_v1_file(ref, tmp_path):
    ds = ChunkDataset(ref, chunk_rows=3000)
    assert len(ds) == 4 and torch.equal(ds[3][2], ref.z[9000:].long())
    v1 = ChunkDataset(save_dataset(ref, tmp_path / "d.npz"), chunk_rows=5000)
    assert len(v1) == 2 and torch.equal(v1[1][1], ref.y[5000:])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_streaming_yields_every_row_once(store, ref, num_workers):
    ds = StreamingLadderDataset(store, batch_size=1000)
    assert ds.num_rows == N
    batches = list(DataLoader(ds, batch_size=None, num_workers=num_workers))
    z = torch.cat([b[2] for b in batches])
    assert len(z) == N
    assert np.array_equal(_sorted_rows(z), _sorted_rows(ref.z.long()))
    x, y, zb = batches[0]
    assert x.shape == (1000, 9, 5) and torch.equal(y, zb[:, 0])
    assert torch.equal(x, torch.nn.functional.one_hot(zb[:, ref.ladder.level_offsets[-2]:], 5).float())
    if num_workers == 0:
        assert torch.equal(z, ref.z.long())  # unshuffled: stream order
    short = [len(b[2]) for b in batches if len(b[2]) != 1000]
    assert len(short) <= max(1, num_workers)  # each worker's last batch only


def test_streaming_shuffle_is_reproducible(store, ref):
    def epoch(seed, e, workers=2):
        ds = StreamingLadderDataset(store, batch_size=512, shuffle=True, seed=seed)
        ds.set_epoch(e)
        return torch.cat([b[2] for b in DataLoader(ds, batch_size=None, num_workers=workers)])

    a, b = epoch(0, 0), epoch(0, 0)
    assert torch.equal(a, b)
    assert not torch.equal(a, epoch(0, 1)) and not torch.equal(a, epoch(1, 0))
    assert not torch.equal(a, ref.z.long())
    for z in (a, epoch(0, 1)):
        assert np.array_equal(_sorted_rows(z), _sorted_rows(ref.z.long()))
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    ds = StreamingLadderDataset(store, batch_size=512, shuffle=True, seed=0)
    alone = torch.cat([b[2] for b in ds])  # iterated without a DataLoader (which draws its own base seed)
    assert torch.equal(torch.rand(3), before)  # the dataset never touches the global RNG
    assert torch.equal(alone, torch.cat([b[2] for b in ds]))


def test_streaming_over_shards_samples_and_gaussian(shards, ref, gaussian, tmp_path):
    ds = StreamingLadderDataset(shards, batch_size=3000, drop_last=True)
    sizes = [len(b[2]) for b in DataLoader(ds, batch_size=None, num_workers=2)]
    assert all(s == 3000 for s in sizes) and sum(sizes) >= N - 2 * 3000
    mem = StreamingLadderDataset(ref, batch_size=700, chunk_rows=2048, shuffle=True, seed=5)
    z = torch.cat([b[2] for b in DataLoader(mem, batch_size=None, num_workers=2)])
    assert np.array_equal(_sorted_rows(z), _sorted_rows(ref.z.long()))
    g = sample_ladder(gaussian, 3000, seed=2)
    gs = StreamingLadderDataset(sample_to_store(gaussian, 3000, tmp_path / "g.zarr", seed=2), batch_size=1024,
                                dtype=torch.float64)
    xs = torch.cat([b[0] for b in gs])
    assert xs.dtype == torch.float64 and torch.equal(xs, g.x.double())


def test_streaming_checks_its_arguments(store):
    for kwargs, err, match in [({"batch_size": 0}, ValueError, "batch_size"),
                               ({"batch_size": 10, "shuffle": 1}, TypeError, "shuffle"),
                               ({"batch_size": 10, "seed": -1}, ValueError, "seed"),
                               ({"batch_size": 10, "dtype": torch.long}, TypeError, "dtype")]:
        with pytest.raises(err, match=match):
            StreamingLadderDataset(store, **kwargs)
    with pytest.raises(ValueError, match="epoch"):
        StreamingLadderDataset(store, 10).set_epoch(-1)


# ---------------------------------------------------------------------- as_chunks, and writing through an engine
def test_as_chunks_of_every_source(store, ref, tmp_path):
    from teachers.chunked import ChunkedLadderData, as_chunks

    data = open_dataset(store)
    assert as_chunks(data) is data
    assert isinstance(as_chunks(store), ChunkedLadderData) and as_chunks([store]).num_chunks == 3
    mem = as_chunks(ref, chunk_rows=3000)
    assert (mem.num_chunks, len(mem), mem.start, mem.total, mem.seed) == (4, N, 0, N, 3)
    assert mem.chunk_bounds(3) == (9000, N) and mem.chunk(-1).start == 9000
    assert [len(c) for c in mem.iter_chunks()] == [3000, 3000, 3000, 1000]
    back = pickle.loads(pickle.dumps(mem))
    assert torch.equal(back.chunk(1).z, ref.z[3000:6000])
    v1 = as_chunks(save_dataset(ref, tmp_path / "d.npz"), chunk_rows=4096)
    assert v1.num_chunks == 3 and torch.equal(v1.chunk(2).z, ref.z[8192:])
    with pytest.raises(IndexError):
        mem.chunk(4)
    with pytest.raises(TypeError, match="source"):
        as_chunks(3.5)


def test_sample_to_store_through_an_engine(ladder, ref, tmp_path):
    engine = pytest.importorskip("teachers.engine")
    path = sample_to_store(ladder, N, tmp_path / "e.zarr", seed=3, chunk_rows=BLOCK_SIZE,
                           engine=engine.SerialEngine())
    assert torch.equal(open_dataset(path).to_sample().z, ref.z)
    with pytest.raises(TypeError, match="engine"):
        sample_to_store(ladder, N, tmp_path / "f.zarr", engine="dask")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.zarr"]


@pytest.mark.parametrize("preset", [None, 3])
def test_zarr_codecs_run_on_one_thread_unless_the_user_chose(tmp_path, preset):
    # each zarr pool thread's malloc arena kept a chunk-sized buffer: resident memory climbed by a chunk
    # every few chunks read (tests/test_mergeable_statistics.py measures the pass's memory)
    code = textwrap.dedent(f"""
        import sys, zarr
        from teachers import Ladder
        from teachers.chunked import open_dataset, sample_to_store
        if {preset!r} is not None:
            zarr.config.set({{"threading.max_workers": {preset!r}}})
        p = sample_to_store(Ladder.random(depth=1, branching=2, events=2, seed=0), 5000, sys.argv[1])
        open_dataset(p).to_sample()
        from zarr.core import sync
        print(zarr.config.get("threading.max_workers"), sync._executor._max_workers)
    """)
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "d.zarr")], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [str(preset or 1)] * 2
