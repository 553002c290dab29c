"""Reading chunked stores (format ``smaso-ladder-dataset`` version 2, :mod:`teachers.store`): one store or a
set of shards opened lazily as a :class:`ChunkedLadderData`, every chunk verified by its SHA-256 when read,
every metadata field checked when opened."""

from __future__ import annotations

import bisect
import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from .formats import (
    FORMAT,
    DatasetFormatError,
    _canonical,
    _events_out_of_range,
    check_contiguous,
    check_coverage,
    check_metadata_checksum,
)
from .sampling import (
    BLOCK_SIZE,
)
from .store import (
    _REQUIRED,
    VERSION,
    Sample,
    Teacher,
    _chunk_file,
    _event_dtype,
    _is_int,
    _make_sample,
    _read_json,
    _region_events,
    _root_attrs,
    _sha256,
    _teacher_from_spec,
    _zarr,
)

__all__ = ["ChunkedLadderData", "open_dataset"]

# ---------------------------------------------------------------------- reading
class _Store:
    """One version-2 store: its verified metadata, and zarr handles opened lazily per process."""

    def __init__(self, path: Path):
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
        self._check_metadata(attrs, where)
        missing = [k for k in _REQUIRED if k not in attrs]
        if missing:
            raise DatasetFormatError(f"{where}: metadata lacks field(s) {missing}")
        self.attrs = attrs
        self.n, self.start, self.total = attrs["n"], attrs["start"], attrs["total"]
        self.chunk_rows, self.num_chunks = attrs["chunk_rows"], attrs["num_chunks"]
        self.x_stored = attrs["x_stored"]
        if not isinstance(self.x_stored, bool):
            raise DatasetFormatError(f"{where}: metadata field 'x_stored' is {self.x_stored!r}, expected true/false")
        for key in ("compression", "event_dtype"):
            if not isinstance(attrs[key], str):
                raise DatasetFormatError(f"{where}: metadata field {key!r} is {attrs[key]!r}, expected a string")
        self.names = ["z", "y"] + (["x"] if self.x_stored else [])
        self.ladder = self._rebuild_ladder(attrs, where)
        self._limit = _region_events(self.ladder)  # (total_regions,) event counts, for the range check
        self._check_arrays(where)
        self._arrays: dict | None = None
        self._pid: int | None = None

    # -- open-time checks
    @staticmethod
    def _check_metadata(attrs: dict, where: str) -> None:
        check_metadata_checksum(attrs, where)

    def _rebuild_ladder(self, attrs: dict, where: str) -> Teacher:
        for key in ("n", "start", "total", "seed", "chunk_rows", "num_chunks", "block_size", "stream_version"):
            if not _is_int(attrs[key]) or attrs[key] < 0:
                raise DatasetFormatError(f"{where}: metadata field {key!r} is not a non-negative integer")
        n, cr = attrs["n"], attrs["chunk_rows"]
        if cr <= 0 or cr % BLOCK_SIZE or attrs["num_chunks"] != len(range(0, n, cr)):
            raise DatasetFormatError(f"{where}: metadata fields 'chunk_rows'/'num_chunks' are inconsistent with n={n}")
        if attrs["start"] + n > attrs["total"]:
            raise DatasetFormatError(f"{where}: metadata fields 'start'/'n'/'total' are inconsistent")
        sums = attrs["chunk_sha256"]
        if not isinstance(sums, dict) or sorted(sums) != sorted(self.names) or any(
                not isinstance(sums[k], list) or len(sums[k]) != attrs["num_chunks"] for k in self.names):
            raise DatasetFormatError(f"{where}: metadata field 'chunk_sha256' does not list every chunk of "
                                     f"{self.names}")
        zarr = _zarr()
        arrays = {}
        spec_sums = attrs["spec_sha256"]
        if not isinstance(spec_sums, dict) or any(not isinstance(v, dict) for v in spec_sums.values()) \
                or not isinstance(attrs["spec"], dict):
            raise DatasetFormatError(f"{where}: metadata field 'spec_sha256' or 'spec' is malformed")
        for name, want in spec_sums.items():
            try:
                a = zarr.open_array(str(self.path / "spec" / name.removeprefix("spec.")), mode="r")[...]
                a = np.asarray(a)
            except Exception as e:  # any failure to read it: a corrupted store
                raise DatasetFormatError(f"{where}: spec array {name!r} is missing or unreadable "
                                         f"({type(e).__name__}: {e})") from None
            if (a.dtype.name, list(a.shape), _sha256(a)) != (want.get("dtype"), want.get("shape"), want.get("sha256")):
                raise DatasetFormatError(f"{where}: spec array {name!r} fails its SHA-256 check (corrupted or edited)")
            arrays[name] = a
        ladder = _teacher_from_spec(attrs["spec"], arrays, where)
        graph_spec = "parents" in attrs["spec"] or attrs["spec"].get("format") == "smaso-graph-ladder"
        if graph_spec and not (_is_int(attrs.get("graph_stream_version")) and attrs["graph_stream_version"] >= 1):
            raise DatasetFormatError(f"{where}: metadata field 'graph_stream_version' (a graph ladder's stream) is "
                                     f"{attrs.get('graph_stream_version')!r}, expected a positive integer")
        if ladder.emission.derivable == bool(attrs["x_stored"]):
            raise DatasetFormatError(f"{where}: metadata field 'x_stored' contradicts the ladder's emission")
        dtype = str(_event_dtype(ladder)).removeprefix("torch.")
        if attrs["event_dtype"] != dtype:
            raise DatasetFormatError(f"{where}: metadata field 'event_dtype' is {attrs['event_dtype']!r}, the "
                                     f"ladder's is {dtype!r}")
        i, k = attrs["shard"] if isinstance(attrs["shard"], list) and len(attrs["shard"]) == 2 else (None, None)
        if not (_is_int(i) and _is_int(k) and 0 <= i < k and (attrs["start"], attrs["start"] + n) == (
                i * attrs["total"] // k, (i + 1) * attrs["total"] // k)):
            raise DatasetFormatError(f"{where}: metadata field 'shard' {attrs['shard']!r} is inconsistent with "
                                     f"start={attrs['start']}, n={n}, total={attrs['total']}")
        return ladder

    def _check_arrays(self, where: str) -> None:
        lad, n, cr = self.ladder, self.n, self.chunk_rows
        dtype = self.attrs["event_dtype"]
        want = {"z": ((n, lad.total_regions), dtype), "y": ((n,), dtype),
                "x": ((n, lad.num_regions[-1], lad.emission.dim), "float32")}
        self.array_meta = {}
        for name in self.names:
            try:
                meta = _read_json(self.path / name / "zarr.json")
            except (FileNotFoundError, NotADirectoryError):
                raise DatasetFormatError(f"{where}: array {name!r} is missing") from None
            shape, dt = want[name]
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

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_arrays"], state["_pid"] = None, None
        return state

    def read_chunk(self, c: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Rows of chunk ``c``, every array checked against its SHA-256."""
        lo, hi = c * self.chunk_rows, min(self.n, (c + 1) * self.chunk_rows)
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


def _same_stream(s: _Store, s0: _Store) -> None:
    for key in ("seed", "total", "block_size", "stream_version", "graph_stream_version", "x_stored", "event_dtype"):
        if s.attrs.get(key) != s0.attrs.get(key):
            raise DatasetFormatError(f"dataset: {str(s.path)!r} is not a shard of the same stream as "
                                     f"{str(s0.path)!r} ({key} differs: {s.attrs.get(key)!r} vs "
                                     f"{s0.attrs.get(key)!r})")
    if _canonical(s.attrs["spec"]) != _canonical(s0.attrs["spec"]) or s.attrs["spec_sha256"] != s0.attrs["spec_sha256"]:
        raise DatasetFormatError(f"dataset: {str(s.path)!r} is not a shard of the same stream as {str(s0.path)!r} "
                                 "(the ladders differ)")


def open_dataset(paths: str | os.PathLike | Sequence[str | os.PathLike], *, partial: bool = False,
                 require_full: bool | None = None) -> ChunkedLadderData:
    """Open a version-2 store, or a set of shard stores of one stream, lazily (metadata only).

    :param partial: accept stores that do not hold the whole stream ``[0, total)`` (a lone
        shard, or a set missing its first or last shards); by default they are refused, naming
        the missing rows.  Gaps between the given shards are always refused.
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
    if not isinstance(partial, bool):
        raise TypeError(f"partial: expected a bool, got {type(partial).__name__}")
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if isinstance(paths, (bytes, dict)) or not isinstance(paths, Iterable):
        raise TypeError(f"paths: expected a path or a sequence of paths, got {type(paths).__name__}")
    paths = list(paths)
    if not paths:
        raise ValueError("paths: expected at least one dataset store")
    for p in paths:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"paths: expected paths, got {type(p).__name__}")
    stores = sorted((_Store(Path(os.path.abspath(p))) for p in paths), key=lambda s: (s.start, s.n))
    for s in stores[1:]:
        _same_stream(s, stores[0])
    try:
        check_contiguous([(s.attrs, s.path) for s in stores])
    except DatasetFormatError as e:
        for a, b in itertools.pairwise(stores):
            if b.start > a.start + a.n:
                raise DatasetFormatError(f"{e}: stream rows [{a.start + a.n}, {b.start}) are missing (a shard "
                                         f"between {str(a.path)!r} and {str(b.path)!r} was not given)") from None
            if b.start < a.start + a.n:
                raise DatasetFormatError(f"{e}: stream rows [{b.start}, {a.start + a.n}) are in both "
                                         f"{str(a.path)!r} and {str(b.path)!r}") from None
        raise
    data = ChunkedLadderData(stores)
    check_coverage(data.paths, data.start, len(data), data.total, partial)
    return data


class ChunkedLadderData:
    """A version-2 dataset (one store or a set of shard stores of one stream), read lazily.

    Built by :func:`open_dataset`; only the metadata (and the ladder's spec arrays) are read when
    it is opened.  Rows are numbered from 0 within the dataset; row r is stream row
    ``start + r``.  Chunks are numbered across the stores in stream order.  Each chunk is
    verified (SHA-256 of each array) whenever it is read.  Picklable, and safe to use from
    DataLoader workers: zarr handles are opened lazily in each process.

    Chunks are :class:`~teachers.sampling.LadderSample` s (``z``, ``x``, ``y``, ``inputs()``, ``events(l)``,
    ``start``, ``total``, ``seed``, ``meta``), whatever the ladder's graph (:attr:`is_graph`: not a uniform
    tree).
    """

    def __init__(self, stores: list[_Store]):
        if not stores:
            raise ValueError("stores: expected at least one store (use open_dataset)")
        self._stores = stores
        s0 = stores[0]
        #: the teacher
        self.ladder: Teacher = s0.ladder
        self.seed: int = s0.attrs["seed"]
        self.start: int = s0.start
        self.total: int = s0.total
        self.x_stored: bool = bool(s0.x_stored)
        #: rows per chunk (the largest among the stores when shards were written with others)
        self.chunk_rows: int = max(s.chunk_rows for s in stores)
        self.paths: list[Path] = [s.path for s in stores]
        self._chunks = [(s, c) for s in stores for c in range(s.num_chunks)]
        offsets, pos = [], 0
        for s in stores:
            offsets.extend(pos + c * s.chunk_rows for c in range(s.num_chunks))
            pos += s.n
        self._offsets = offsets
        self._len = pos
        self.meta = {"block_size": s0.attrs["block_size"], "stream_version": s0.attrs["stream_version"],
                     "shards": [s.attrs["shard"] for s in stores], "files": [str(p) for p in self.paths],
                     "compression": sorted({s.attrs["compression"] for s in stores})}
        if "graph_stream_version" in s0.attrs:
            self.meta["graph_stream_version"] = s0.attrs["graph_stream_version"]
        if len(stores) == 1:
            self.meta["shard"] = s0.attrs["shard"]

    @property
    def teacher(self) -> Teacher:
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
        out = []
        if self.start > 0:
            out.append((0, self.start))
        if self.start + len(self) < self.total:
            out.append((self.start + len(self), self.total))
        return out

    def chunk_bounds(self, i: int) -> tuple[int, int]:
        """Rows ``(lo, hi)`` of chunk ``i`` within the dataset."""
        i = self._check_chunk(i)
        s, c = self._chunks[i]
        return self._offsets[i], self._offsets[i] + min(s.n, (c + 1) * s.chunk_rows) - c * s.chunk_rows

    def _check_chunk(self, i) -> int:
        if not _is_int(i):
            raise TypeError(f"i: expected an integer chunk index, got {type(i).__name__}")
        if not -self.num_chunks <= i < self.num_chunks:
            raise IndexError(f"i: chunk {i} out of range for {self.num_chunks} chunks")
        return int(i) % self.num_chunks

    def _sample(self, z: np.ndarray, x: np.ndarray | None, row: int, **extra) -> Sample:
        return _make_sample(self.ladder, torch.from_numpy(z), None if x is None else torch.from_numpy(x),
                            seed=self.seed, start=self.start + row, total=self.total, meta={**self.meta, **extra})

    def chunk(self, i: int) -> Sample:
        """Chunk ``i``, verified, as a :class:`LadderSample` whose
        ``start`` is its first stream row."""
        i = self._check_chunk(i)
        s, c = self._chunks[i]
        z, x = s.read_chunk(c)
        return self._sample(z, x, self._offsets[i], chunk=i)

    def iter_chunks(self, chunk_rows: int | None = None, progress: bool = False) -> Iterator[Sample]:
        """The stored chunks in order (``chunk_rows=None``), or consecutive windows of
        ``chunk_rows`` rows (the last may be short), as :meth:`LadderSample.iter_chunks` gives for
        an in-memory sample; every chunk read once and verified."""
        if chunk_rows is not None and (not _is_int(chunk_rows) or chunk_rows <= 0):
            raise ValueError(f"chunk_rows: expected a positive integer or None, got {chunk_rows!r}")
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(self), unit="ex", unit_scale=True, desc="reading chunks")
        try:
            if chunk_rows is None:
                for i in range(self.num_chunks):
                    part = self.chunk(i)
                    yield part
                    if bar is not None:
                        bar.update(len(part))
                return
            buf_z: list[np.ndarray] = []
            buf_x: list[np.ndarray] = []
            filled, pos = 0, 0
            for i in range(self.num_chunks):
                s, c = self._chunks[i]
                z, x = s.read_chunk(c)
                off = 0
                while off < len(z):
                    take = min(chunk_rows - filled, len(z) - off)
                    buf_z.append(z[off: off + take])
                    if x is not None:
                        buf_x.append(x[off: off + take])
                    filled, off = filled + take, off + take
                    if filled == chunk_rows:
                        yield self._window(buf_z, buf_x, pos)
                        pos += filled
                        buf_z, buf_x, filled = [], [], 0
                if bar is not None:
                    bar.update(len(z))
            if filled:
                yield self._window(buf_z, buf_x, pos)
        finally:
            if bar is not None:
                bar.close()

    def _window(self, buf_z, buf_x, pos) -> Sample:
        z = buf_z[0] if len(buf_z) == 1 else np.concatenate(buf_z)
        x = None if not buf_x else buf_x[0] if len(buf_x) == 1 else np.concatenate(buf_x)
        return self._sample(z, x, pos)

    def read(self, lo: int, hi: int) -> Sample:
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
                x[u - lo: v - lo] = cx[u - a: v - a]
        return self._sample(z, x, lo)

    def to_sample(self) -> Sample:
        """Every row in memory, as one :class:`LadderSample` (for small data and tests)."""
        return self.read(0, len(self))

    def verify(self, progress: bool = False) -> dict:
        """Read and check every chunk of every store.

        :returns: ``{"rows", "chunks", "stores", "covers_stream", "missing_rows"}`` (the set's
            coverage of the stream is reported, not raised).
        :raises DatasetFormatError: listing every chunk that fails.
        """
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=self.num_chunks, unit="chunk", desc="verifying")
        errors = []
        try:
            for s, c in self._chunks:
                try:
                    s.read_chunk(c)
                except DatasetFormatError as e:
                    errors.append(str(e))
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        if errors:
            more = f"\n... and {len(errors) - 20} more" if len(errors) > 20 else ""
            raise DatasetFormatError(f"dataset: {len(errors)} of {self.num_chunks} chunks fail verification:\n"
                                     + "\n".join(errors[:20]) + more)
        return {"rows": len(self), "chunks": self.num_chunks, "stores": len(self._stores),
                "covers_stream": self.covers_stream, "missing_rows": self.missing_rows}
