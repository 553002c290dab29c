"""Reading version-2 stores (the format: :mod:`teachers.store`): one store or a set of shards opened lazily as
a :class:`ChunkedLadderData`, every metadata field checked when opened, every chunk by its SHA-256 when read."""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .engine import _progress_bar
from .formats import (
    FORMAT,
    DatasetFormatError,
    _canonical,
    _event_dtype,
    _events_out_of_range,
    _field_int,
    _is_int,
    _sha256,
    check_ladder_fields,
    check_load_args,
    check_metadata_checksum,
    check_shards,
    missing_rows,
    region_events,
    teacher_from_spec,
)
from .ladder import Ladder
from .sampling import BLOCK_SIZE, LadderSample
from .store import VERSION, _bounds, _chunk_file, _data_arrays, _read_json, _root_attrs, _zarr

__all__ = ["ChunkedLadderData", "open_dataset"]

_REQUIRED = ("format", "version", "n", "start", "total", "seed", "shard", "block_size", "stream_version",
             "x_stored", "chunk_rows", "num_chunks", "event_dtype", "compression", "spec", "spec_sha256",
             "chunk_sha256", "complete")


def _chunk_index(i: int, num_chunks: int, *, negative: bool = True) -> int:
    """Chunk ``i`` of ``num_chunks`` (negative: from the end, unless ``negative`` is false), checked."""
    if not _is_int(i):
        raise TypeError(f"i: expected an integer chunk index, got {type(i).__name__}")
    if not (-num_chunks if negative else 0) <= i < num_chunks:
        raise IndexError(f"i: chunk {i} out of range for {num_chunks} chunks")
    return int(i) % num_chunks


class _Store:
    """One version-2 store: its verified metadata, and zarr handles opened lazily per process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        where = f"dataset: {str(path)!r}"
        if not path.exists():
            raise DatasetFormatError(f"dataset: no such dataset store {str(path)!r}")
        if not path.is_dir():
            raise DatasetFormatError(f"{where} is not a directory store (a version-2 dataset is a zarr directory; "
                                     "version-1 files are .npz, read by teachers.dataset.load_dataset)")
        attrs = _root_attrs(path)
        if attrs is None:
            raise DatasetFormatError(f"{where} is not a zarr v3 group store (no valid zarr.json)")
        if attrs.get("format") != FORMAT:
            raise DatasetFormatError(f"{where} is not a {FORMAT} store (format {attrs.get('format')!r})")
        if attrs.get("version") != VERSION:
            raise DatasetFormatError(f"{where} has format version {attrs.get('version')!r}; this reader reads "
                                     f"version {VERSION}")
        if attrs.get("complete") is not True:
            raise DatasetFormatError(f"{where} is incomplete (no 'complete: true'): a killed or unfinished write")
        check_metadata_checksum(attrs, where)
        missing = [k for k in _REQUIRED if k not in attrs]
        if missing:
            raise DatasetFormatError(f"{where}: metadata lacks field(s) {missing}")
        self.attrs = attrs
        self.n, self.start, self.total = check_ladder_fields(attrs, where, null_seed=False)
        self.chunk_rows, self.num_chunks = attrs["chunk_rows"], attrs["num_chunks"]
        self.x_stored = attrs["x_stored"]
        for key in ("compression", "event_dtype"):
            if not isinstance(attrs[key], str):
                raise DatasetFormatError(f"{where}: metadata field {key!r} is {attrs[key]!r}, expected a string")
        self.names = ["z", "y"] + (["x"] if self.x_stored else [])
        self.ladder = self._rebuild_ladder(attrs, where)
        self._limit = region_events(self.ladder)  # (total_regions,) event counts, for the range check
        self._check_arrays(where)
        self._arrays: dict | None = None
        self._pid: int | None = None

    def _rebuild_ladder(self, attrs: dict, where: str) -> Ladder:
        n, cr = attrs["n"], _field_int(attrs, "chunk_rows", where, minimum=1)
        if cr % BLOCK_SIZE or _field_int(attrs, "num_chunks", where) != len(range(0, n, cr)):
            raise DatasetFormatError(f"{where}: metadata fields 'chunk_rows'/'num_chunks' are inconsistent with n={n}")
        sums = attrs["chunk_sha256"]
        if not isinstance(sums, dict) or sorted(sums) != sorted(self.names) or any(
                not isinstance(sums[k], list) or len(sums[k]) != attrs["num_chunks"] for k in self.names):
            raise DatasetFormatError(f"{where}: metadata field 'chunk_sha256' does not list every chunk of "
                                     f"{self.names}")
        zarr = _zarr()
        arrays = {}
        for name, want in (attrs["spec_sha256"] or {}).items():
            try:
                a = np.asarray(zarr.open_array(str(self.path / "spec" / name.removeprefix("spec.")), mode="r")[...])
            except Exception as e:  # any failure to read it: a corrupted store
                raise DatasetFormatError(f"{where}: spec array {name!r} is missing or unreadable "
                                         f"({type(e).__name__}: {e})") from None
            if (a.dtype.name, list(a.shape), _sha256(a)) != (want.get("dtype"), want.get("shape"), want.get("sha256")):
                raise DatasetFormatError(f"{where}: spec array {name!r} fails its SHA-256 check (corrupted or edited)")
            arrays[name] = a
        ladder = teacher_from_spec(attrs["spec"], arrays, where)
        graph_spec = "parents" in attrs["spec"] or attrs["spec"].get("format") == "smaso-graph-ladder"
        if graph_spec and not (_is_int(attrs.get("graph_stream_version")) and attrs["graph_stream_version"] >= 1):
            raise DatasetFormatError(f"{where}: metadata field 'graph_stream_version' (a graph ladder's stream) is "
                                     f"{attrs.get('graph_stream_version')!r}, expected a positive integer")
        if ladder.emission.derivable == bool(attrs["x_stored"]):
            raise DatasetFormatError(f"{where}: metadata field 'x_stored' contradicts the ladder's emission")
        dtype = _event_dtype(ladder).name
        if attrs["event_dtype"] != dtype:
            raise DatasetFormatError(f"{where}: metadata field 'event_dtype' is {attrs['event_dtype']!r}, the "
                                     f"ladder's is {dtype!r}")
        i, k = attrs["shard"]
        if (attrs["start"], attrs["start"] + n) != (i * attrs["total"] // k, (i + 1) * attrs["total"] // k):
            raise DatasetFormatError(f"{where}: metadata field 'shard' {attrs['shard']!r} is inconsistent with "
                                     f"start={attrs['start']}, n={n}, total={attrs['total']}")
        return ladder

    def _check_arrays(self, where: str) -> None:
        cr = self.chunk_rows
        self.array_meta = {}
        for name, (shape, dt) in _data_arrays(self.ladder, self.n, self.attrs["event_dtype"]).items():
            try:
                meta = _read_json(self.path / name / "zarr.json")
            except (FileNotFoundError, NotADirectoryError):
                raise DatasetFormatError(f"{where}: array {name!r} is missing") from None
            try:
                chunks = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
                got = (tuple(meta["shape"]), meta["data_type"], chunks)
            except (KeyError, TypeError):
                raise DatasetFormatError(f"{where}: array {name!r} has malformed zarr metadata") from None
            if got != (shape, dt, (cr, *shape[1:])):
                raise DatasetFormatError(f"{where}: array {name!r} has shape {got[0]} of {got[1]} in chunks {got[2]}, "
                                         f"expected {shape} of {dt} in chunks {(cr, *shape[1:])}")
            self.array_meta[name] = meta

    # -- lazy zarr handles (per process: nothing opened before a fork is used after it)
    def arrays(self) -> dict:
        if self._arrays is None or self._pid != os.getpid():
            zarr = _zarr()
            self._arrays = {name: zarr.open_array(str(self.path / name), mode="r") for name in self.names}
            self._pid = os.getpid()
        return self._arrays

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_arrays"], state["_pid"] = None, None
        return state

    def read_chunk(self, c: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Rows of chunk ``c``, every array checked against its SHA-256."""
        lo, hi = _bounds(c, self.chunk_rows, self.n)
        arrays = self.arrays()
        out = {}
        for name in self.names:
            where = (f"dataset: {str(self.path)!r}: array {name!r} chunk {c} (rows [{lo}, {hi}) of the store, "
                     f"stream rows [{self.start + lo}, {self.start + hi}))")
            if not _chunk_file(self.path, name, self.array_meta[name], c).is_file():
                raise DatasetFormatError(f"{where}: the chunk's file is missing")
            try:
                a = np.ascontiguousarray(arrays[name][lo:hi])
            except Exception as e:  # a chunk that does not decode is corrupted
                raise DatasetFormatError(f"{where} cannot be decoded (corrupted: {type(e).__name__}: {e})") from None
            if _sha256(a) != self.attrs["chunk_sha256"][name][c]:
                raise DatasetFormatError(f"{where} fails its SHA-256 check (corrupted)")
            out[name] = a
        if not np.array_equal(out["y"], out["z"][:, 0]):
            raise DatasetFormatError(f"dataset: {str(self.path)!r}: chunk {c}: y differs from z[:, 0]")
        bad = _events_out_of_range(out["z"], self.ladder, self._limit)
        if bad:
            raise DatasetFormatError(f"dataset: {str(self.path)!r}: array 'z' chunk {c} (rows [{lo}, {hi}) of the "
                                     f"store): {bad} (rows counted within the chunk)")
        if "x" in out and not np.isfinite(out["x"]).all():
            raise DatasetFormatError(f"dataset: {str(self.path)!r}: array 'x' chunk {c} holds non-finite values")
        return out["z"], out.get("x")


def _stream(s: _Store) -> dict:
    """What the shard stores of one stream share (by name, for :func:`~teachers.formats.check_shards`)."""
    keys = ("seed", "total", "block_size", "stream_version", "graph_stream_version", "x_stored", "event_dtype")
    return {**{k: s.attrs.get(k) for k in keys}, "ladder": (_canonical(s.attrs["spec"]), s.attrs["spec_sha256"])}


def open_dataset(paths: str | os.PathLike | Sequence[str | os.PathLike], *, partial: bool = False,
                 require_full: bool | None = None) -> ChunkedLadderData:
    """Open a version-2 store, or a set of shard stores of one stream, lazily (metadata only).

    :param partial: as for :func:`~teachers.dataset.load_dataset`.
    :param require_full: the former spelling: ``True`` is ``partial=False`` (now the default),
        ``False`` is ``partial=True``.
    :raises DatasetFormatError: not a version-2 store, incomplete, corrupted metadata or spec,
        shards of other streams, gaps or overlaps between shards, or an incomplete set of
        shards (naming the missing rows).
    """
    if require_full is not None:
        if not isinstance(require_full, bool):
            raise TypeError(f"require_full: expected a bool, got {type(require_full).__name__}")
        partial = not require_full
    paths = check_load_args(paths, partial, "dataset store")
    stores = sorted((_Store(Path(os.path.abspath(p))) for p in paths), key=lambda s: (s.start, s.n))
    check_shards([(s.attrs, s.path, _stream(s)) for s in stores], partial)
    return ChunkedLadderData(stores)


class ChunkedLadderData:
    """A version-2 dataset (one store or a set of shard stores of one stream), read lazily.

    Built by :func:`open_dataset`; only the metadata (and the ladder's spec arrays) are read when
    it is opened.  Rows are numbered from 0 within the dataset; row r is stream row
    ``start + r``.  Chunks are numbered across the stores in stream order.  Each chunk is
    verified (SHA-256 of each array) whenever it is read.  Picklable, and safe to use from
    DataLoader workers: zarr handles are opened lazily in each process.

    Chunks are :class:`~teachers.sampling.LadderSample` s (``z``, ``x``, ``y``, ``inputs()``, ``events(l)``,
    ``start``, ``total``, ``seed``, ``meta``).
    """

    def __init__(self, stores: list[_Store]) -> None:
        if not stores:
            raise ValueError("stores: expected at least one store (use open_dataset)")
        self._stores = stores
        s0 = stores[0]
        self.ladder: Ladder = s0.ladder
        self.seed: int = s0.attrs["seed"]
        self.start: int = s0.start
        self.total: int = s0.total
        self.x_stored: bool = bool(s0.x_stored)
        #: rows per chunk (the largest among the stores when shards were written with others)
        self.chunk_rows: int = max(s.chunk_rows for s in stores)
        self.paths: list[Path] = [s.path for s in stores]
        self._chunks = [(s, c) for s in stores for c in range(s.num_chunks)]
        self._offsets = [s.start - self.start + c * s.chunk_rows for s, c in self._chunks]  # (the stores tile)
        self._len = sum(s.n for s in stores)
        self.meta = {"block_size": s0.attrs["block_size"], "stream_version": s0.attrs["stream_version"],
                     "shards": [s.attrs["shard"] for s in stores], "files": [str(p) for p in self.paths],
                     "compression": sorted({s.attrs["compression"] for s in stores})}
        if "graph_stream_version" in s0.attrs:
            self.meta["graph_stream_version"] = s0.attrs["graph_stream_version"]
        if len(stores) == 1:
            self.meta["shard"] = s0.attrs["shard"]

    @property
    def teacher(self) -> Ladder:
        """The ladder (tree or graph), under the name :class:`~teachers.sampling.EventRows` uses."""
        return self.ladder

    @property
    def is_graph(self) -> bool:
        """Whether the store's ladder is not a uniform tree (any other region graph)."""
        return not self.ladder.is_uniform()

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return (f"ChunkedLadderData({len(self)} rows [{self.start}, {self.start + len(self)}) of {self.total}, "
                f"{self.num_chunks} chunks, {len(self._stores)} store(s), {self.ladder!r})")

    @property
    def num_chunks(self) -> int:
        """Number of chunks over all stores."""
        return len(self._chunks)

    @property
    def covers_stream(self) -> bool:
        """Whether the rows are the whole stream ``[0, total)`` (false for a lone shard, or a set of
        shards missing its first or last ones)."""
        return self.start == 0 and len(self) == self.total

    @property
    def missing_rows(self) -> list[tuple[int, int]]:
        """Stream rows ``(lo, hi)`` not in this dataset (empty when :attr:`covers_stream`)."""
        return missing_rows(self.start, len(self), self.total)

    def chunk_bounds(self, i: int) -> tuple[int, int]:
        """Rows ``(lo, hi)`` of chunk ``i`` within the dataset."""
        i = _chunk_index(i, self.num_chunks)
        s, c = self._chunks[i]
        lo, hi = _bounds(c, s.chunk_rows, s.n)
        return self._offsets[i], self._offsets[i] + hi - lo

    def _sample(self, z: np.ndarray, x: np.ndarray | None, row: int, **extra: Any) -> LadderSample:
        return LadderSample(self.ladder, torch.from_numpy(z), None if x is None else torch.from_numpy(x),
                            seed=self.seed, start=self.start + row, total=self.total, meta={**self.meta, **extra})

    def chunk(self, i: int) -> LadderSample:
        """Chunk ``i``, verified, as a :class:`LadderSample` whose
        ``start`` is its first stream row."""
        i = _chunk_index(i, self.num_chunks)
        s, c = self._chunks[i]
        z, x = s.read_chunk(c)
        return self._sample(z, x, self._offsets[i], chunk=i)

    def iter_chunks(self, chunk_rows: int | None = None, progress: bool = False) -> Iterator[LadderSample]:
        """The stored chunks in order (``chunk_rows=None``), or consecutive windows of
        ``chunk_rows`` rows (the last may be short), as :meth:`LadderSample.iter_chunks` gives for
        an in-memory sample; every chunk read once and verified."""
        if chunk_rows is not None and (not _is_int(chunk_rows) or chunk_rows <= 0):
            raise ValueError(f"chunk_rows: expected a positive integer or None, got {chunk_rows!r}")
        from tqdm.auto import tqdm

        with tqdm(total=len(self), unit="ex", unit_scale=True, desc="reading chunks", disable=not progress) as bar:
            if chunk_rows is None:
                for i in range(self.num_chunks):
                    part = self.chunk(i)
                    yield part
                    bar.update(len(part))
                return
            buf: list[tuple[np.ndarray, np.ndarray | None]] = []  # the pieces (z, x) of the next window
            filled, pos = 0, 0
            for s, c in self._chunks:
                z, x = s.read_chunk(c)
                off = 0
                while off < len(z):
                    take = min(chunk_rows - filled, len(z) - off)
                    buf.append((z[off: off + take], None if x is None else x[off: off + take]))
                    filled, off = filled + take, off + take
                    if filled == chunk_rows:
                        yield self._window(buf, pos)
                        buf, filled, pos = [], 0, pos + chunk_rows
                bar.update(len(z))
            if filled:
                yield self._window(buf, pos)

    def _window(self, buf: list[tuple[np.ndarray, np.ndarray | None]], pos: int) -> LadderSample:
        zs, xs = zip(*buf, strict=True)
        z = zs[0] if len(zs) == 1 else np.concatenate(zs)
        x = None if xs[0] is None else xs[0] if len(xs) == 1 else np.concatenate(xs)
        return self._sample(z, x, pos)

    def read(self, lo: int, hi: int) -> LadderSample:
        """Rows ``[lo, hi)`` of the dataset (verifying every chunk they touch) in memory: ``z`` ``(hi - lo,
        total_regions)``, ``x`` ``(hi - lo, leaves, dim)`` or ``None``."""
        if not _is_int(lo) or not _is_int(hi) or not 0 <= lo <= hi <= len(self):
            raise ValueError(f"lo, hi: expected integers with 0 <= lo <= hi <= {len(self)}, got {lo!r}, {hi!r}")
        lo, hi = int(lo), int(hi)
        lad = self.ladder
        z = np.empty((hi - lo, lad.total_regions), dtype=self._stores[0].attrs["event_dtype"])
        x = np.empty((hi - lo, lad.num_regions[-1], lad.emission.dim), np.float32) if self.x_stored else None
        first = max(0, bisect.bisect_right(self._offsets, lo) - 1)
        for i in range(first, self.num_chunks):
            a, b = self.chunk_bounds(i)
            if a >= hi:
                break
            if b <= lo:
                continue
            s, c = self._chunks[i]
            cz, cx = s.read_chunk(c)
            u, v = max(a, lo), min(b, hi)
            z[u - lo: v - lo] = cz[u - a: v - a]
            if x is not None:
                assert cx is not None  # both exist exactly when x is stored
                x[u - lo: v - lo] = cx[u - a: v - a]
        return self._sample(z, x, lo)

    def to_sample(self) -> LadderSample:
        """Every row in memory, as one :class:`LadderSample` (for small data and tests)."""
        return self.read(0, len(self))

    def verify(self, progress: bool = False) -> dict:
        """Read and check every chunk of every store.

        :returns: ``{"rows", "chunks", "stores", "covers_stream", "missing_rows"}`` (the set's
            coverage of the stream is reported, not raised).
        :raises DatasetFormatError: listing every chunk that fails.
        """
        errors = []
        with _progress_bar(self.num_chunks, "verifying" if progress else None) as bar:
            for s, c in self._chunks:
                try:
                    s.read_chunk(c)
                except DatasetFormatError as e:
                    errors.append(str(e))
                bar.update(1)
        if errors:
            more = f"\n... and {len(errors) - 20} more" if len(errors) > 20 else ""
            raise DatasetFormatError(f"dataset: {len(errors)} of {self.num_chunks} chunks fail verification:\n"
                                     + "\n".join(errors[:20]) + more)
        return {"rows": len(self), "chunks": self.num_chunks, "stores": len(self._stores),
                "covers_stream": self.covers_stream, "missing_rows": self.missing_rows}
