"""Chunked, out-of-core ladder datasets: the PyTorch datasets over any source (:class:`ChunkDataset`,
:class:`StreamingLadderDataset`), :func:`as_chunks` (any dataset as chunks), and -- under their 0.2 import
path -- the writer (:mod:`teachers.store`, which documents the format) and the reader
(:mod:`teachers.store_reader`) of the version-2 zarr stores.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from .dataset import _triple, load_dataset
from .formats import _check_int
from .sampling import DEFAULT_CHUNK_ROWS, LadderSample
from .store import (
    CHUNK_BYTES,
    DEFAULT_COMPRESSION,
    VERSION,
    _bounds,
    chunk_bounds,
    create_partial,
    default_chunk_rows,
    finalize,
    partial_path,
    row_bytes,
    sample_to_store,
    write_chunk,
)
from .store_reader import ChunkedLadderData, _chunk_index, open_dataset

__all__ = ["CHUNK_BYTES", "DEFAULT_CHUNK_ROWS", "DEFAULT_COMPRESSION", "VERSION", "ChunkDataset", "ChunkedLadderData",
           "StreamingLadderDataset", "as_chunks", "chunk_bounds", "create_partial", "default_chunk_rows", "finalize",
           "open_dataset", "partial_path", "row_bytes", "sample_to_store", "write_chunk"]

# ---------------------------------------------------------------------- PyTorch datasets
class _SampleChunks:
    """An in-memory :class:`LadderSample` seen as chunks of ``chunk_rows`` rows
    (the interface of :class:`ChunkedLadderData` that chunk-by-chunk passes use)."""

    def __init__(self, sample: LadderSample, chunk_rows: int) -> None:
        self.sample, self.ladder = sample, sample.ladder
        self.chunk_rows = _check_int(chunk_rows, "chunk_rows", minimum=1)
        self.seed, self.start, self.total = sample.seed, sample.start, sample.total
        self.x_stored = sample.x is not None
        self.is_graph = not sample.ladder.is_uniform()
        self.num_chunks = -(-len(sample) // self.chunk_rows)

    def __len__(self) -> int:
        return len(self.sample)

    def __repr__(self) -> str:
        return f"as_chunks({len(self)} rows in memory, {self.num_chunks} chunks of {self.chunk_rows})"

    def chunk_bounds(self, i: int) -> tuple[int, int]:
        """Rows ``(lo, hi)`` of chunk ``i``."""
        return _bounds(_chunk_index(i, self.num_chunks), self.chunk_rows, len(self.sample))

    def chunk(self, i: int) -> LadderSample:
        """Chunk ``i`` (views of the sample's tensors)."""
        s = self.sample
        lo, hi = self.chunk_bounds(i)
        return LadderSample(s.ladder, s.z[lo:hi], None if s.x is None else s.x[lo:hi], seed=s.seed, start=s.start + lo,
                            total=s.total, meta=dict(s.meta))

    def iter_chunks(self, chunk_rows: int | None = None, progress: bool = False) -> Iterator[LadderSample]:
        """The chunks in order (or windows of ``chunk_rows`` rows), as :meth:`ChunkedLadderData.iter_chunks`."""
        return self.sample.iter_chunks(self.chunk_rows if chunk_rows is None else chunk_rows)


#: What every chunk-by-chunk pass reads (for type hints): a sample in memory, an open store, or dataset path(s).
DataSource = LadderSample | ChunkedLadderData | _SampleChunks | str | os.PathLike | Sequence[str | os.PathLike]


def as_chunks(source: DataSource,
              chunk_rows: int = DEFAULT_CHUNK_ROWS, *,
              partial: bool = False) -> ChunkedLadderData | _SampleChunks:
    """Any dataset as chunks, for passes that run chunk by chunk (one task per chunk).

    The result has ``ladder``, ``seed``, ``start``, ``total``, ``num_chunks``, ``len()``,
    ``chunk(i) -> LadderSample`` (with its stream ``start``), ``chunk_bounds(i)`` and ``iter_chunks()``, and
    pickles (to send to Dask workers).

    :param source: a :class:`ChunkedLadderData` (returned as is), dataset path(s) (version-2
        stores open lazily; version-1 ``.npz`` files load in memory), or a :class:`LadderSample`.
    :param chunk_rows: rows per chunk of an in-memory sample (a store keeps its own chunks).
    :param partial: for path(s): accept an incomplete set of shards (see :func:`open_dataset`).
    """
    if isinstance(source, (ChunkedLadderData, _SampleChunks)):
        return source
    if isinstance(source, LadderSample):
        return _SampleChunks(source, chunk_rows)
    if isinstance(source, (str, os.PathLike)) or (isinstance(source, Sequence) and not isinstance(source, bytes)):
        data = load_dataset(source, partial=partial)
        return data if isinstance(data, ChunkedLadderData) else _SampleChunks(data, chunk_rows)
    raise TypeError(f"source: expected a ChunkedLadderData, a LadderSample or dataset path(s), "
                    f"got {type(source).__name__}")


def _check_dtype(dtype: object) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype: expected a floating-point torch.dtype, got {dtype!r}")
    return dtype


class ChunkDataset(torch.utils.data.Dataset):
    """Map-style dataset whose item i is chunk i as ``(x, y, z)`` tensors: ``x`` ``(rows, R_d, dim)``
    in ``dtype`` (one-hot leaves built from z for this chunk only), ``y`` ``(rows,)`` int64, ``z``
    ``(rows, total_regions)`` int64 (as :class:`~teachers.dataset.LadderDataset` gives per row).

    For ``DataLoader(ds, batch_size=None, num_workers=k)``: each worker reads (and verifies) whole
    chunks.  A one-hot chunk is ``rows * R_d * m`` floats: pick ``chunk_rows`` accordingly, or use
    :class:`StreamingLadderDataset`, which builds x per batch.

    :param source, chunk_rows, partial: as for :func:`as_chunks` (of a tree or a graph ladder).
    """

    def __init__(self, source: DataSource,
                 dtype: torch.dtype = torch.float32, *, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                 partial: bool = False) -> None:
        self.source = as_chunks(source, chunk_rows, partial=partial)
        self.dtype = _check_dtype(dtype)

    def __len__(self) -> int:
        return self.source.num_chunks

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        c = self.source.chunk(_chunk_index(i, len(self), negative=False))
        return _triple(c.ladder, c.z, c.x, self.dtype)


def _generator(*keys: int) -> torch.Generator:
    state = np.random.SeedSequence([int(k) for k in keys]).generate_state(2, np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


class StreamingLadderDataset(torch.utils.data.IterableDataset):
    """Iterable dataset of ``(x, y, z)`` batches (shapes as :class:`ChunkDataset`, ``batch_size``
    rows), read chunk by chunk so memory stays at about a chunk per worker.

    With DataLoader workers (``DataLoader(ds, batch_size=None, num_workers=k)``) the chunks are
    split among the workers (``torch.utils.data.get_worker_info``), so every row is yielded exactly
    once per epoch.  Within a worker, rows left over at the end of a chunk start the next batch;
    each worker's last batch may be short (dropped with ``drop_last``).

    With ``shuffle``, the chunk order and the rows within each chunk are permuted by
    ``torch.Generator`` s seeded from ``(seed, epoch)`` and ``(seed, epoch, chunk)`` (never the
    global RNG): the same seed, epoch and number of workers give the same batches;
    :meth:`set_epoch` picks another, reproducible, order.  (Call it before iterating; with
    ``persistent_workers=True`` the workers keep the epoch they started with.)

    :param source, chunk_rows, partial: as for :func:`as_chunks`.
    """

    def __init__(self, source: DataSource,
                 batch_size: int, dtype: torch.dtype = torch.float32, shuffle: bool = False,
                 seed: int = 0, *, drop_last: bool = False, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                 partial: bool = False) -> None:
        for name, v in (("shuffle", shuffle), ("drop_last", drop_last)):
            if not isinstance(v, bool):
                raise TypeError(f"{name}: expected a bool, got {type(v).__name__}")
        self.source = as_chunks(source, chunk_rows, partial=partial)
        self.batch_size = _check_int(batch_size, "batch_size", minimum=1)
        self.dtype = _check_dtype(dtype)
        self.shuffle, self.drop_last = shuffle, drop_last
        self.seed = _check_int(seed, "seed")
        self.epoch = 0

    @property
    def num_rows(self) -> int:
        """Rows per epoch (over all workers)."""
        return len(self.source)

    def set_epoch(self, epoch: int) -> None:
        """Use the shuffling order of epoch ``epoch`` from the next iteration on."""
        self.epoch = _check_int(epoch, "epoch")

    def chunk_order(self) -> list[int]:
        """The chunk order of the current epoch (before it is split among workers)."""
        n = self.source.num_chunks
        if not self.shuffle:
            return list(range(n))
        return torch.randperm(n, generator=_generator(self.seed, self.epoch)).tolist()

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        ladder, bs = self.source.ladder, self.batch_size
        carry_z = carry_x = None
        for ci in self.chunk_order()[worker::workers]:
            c = self.source.chunk(ci)
            z, x = c.z, c.x
            if self.shuffle:
                perm = torch.randperm(len(z), generator=_generator(self.seed, self.epoch, ci))
                z, x = z[perm], None if x is None else x[perm]
            if carry_z is not None and len(carry_z):
                z = torch.cat([carry_z, z])
                x = None if x is None else torch.cat([carry_x, x])  # type: ignore[list-item]  # x stored: so is carry_x
            full = len(z) - len(z) % bs
            for a in range(0, full, bs):
                yield _triple(ladder, z[a: a + bs], None if x is None else x[a: a + bs], self.dtype)
            carry_z, carry_x = z[full:].clone(), None if x is None else x[full:].clone()
        if carry_z is not None and len(carry_z) and not self.drop_last:
            yield _triple(ladder, carry_z, carry_x, self.dtype)

