"""Chunked, out-of-core ladder datasets: format ``smaso-ladder-dataset`` version 2, a zarr v3 store.

A version-2 dataset is a zarr v3 *directory* store (conventionally named ``*.zarr``) that holds
any number of examples without ever holding them in memory: it is written chunk by chunk as the
sampler produces rows, and read chunk by chunk, each chunk verified by its SHA-256 when read.

It holds any :class:`~teachers.ladder.Ladder` -- a uniform tree or any layered region graph (regions may have
different event counts; the event dtype is the ladder's ``event_dtype()``) -- and the rows of
:func:`~teachers.sampling.sample_ladder`.  Stores of 0.2 open unchanged: their spec is a tree spec of
version 1 or a packed ``"smaso-graph-ladder"`` spec (:mod:`teachers.formats`).  Chunks read as
:class:`~teachers.sampling.LadderSample` s.

Layout (every data array is chunked along the examples only, ``chunk_rows`` rows per chunk, a
multiple of :data:`~teachers.sampling.BLOCK_SIZE`; the last chunk may be short, and zarr stores it
padded to a whole chunk, which costs nothing once compressed)::

    data.zarr/
      zarr.json          group; its attributes are the metadata (below)
      z/                 (n, total_regions) events of every region, breadth-first (a graph: level by
                         level, ``level_offsets[l] + i``), event dtype
      y/                 (n,) labels, the same dtype (= z[:, 0])
      x/                 (n, R_d, dim) float32 inputs; only when the emission is not derivable
                         (one-hot leaves are rebuilt from z)
      spec/<path>        the ladder's arrays (tables, lookup tables, emission means), one small
                         uncompressed zarr array each, named as in version 1 (``spec.tables.0`` is
                         ``spec/tables.0``)

Attributes of the root group:

====================  ===========================================================================
``format``            ``"smaso-ladder-dataset"``
``version``           ``2``
``n``                 rows in this store; it holds stream rows ``[start, start + n)``
``start``, ``total``  its place in the full stream of ``total`` examples
``seed``, ``shard``   the stream's seed; ``[i, k]``: this store is shard i of k
``block_size``,       the stream's definition (:data:`~teachers.sampling.BLOCK_SIZE`,
``stream_version``    ``STREAM_VERSION``)
``x_stored``          whether ``x`` is stored
``chunk_rows``,       rows per chunk (chunk c holds rows ``[c * chunk_rows, min(n, (c + 1) *
``num_chunks``        chunk_rows))`` of the store), and how many chunks
``event_dtype``       numpy name of the event dtype (``"uint8"`` for <= 256 events per region)
``compression``       the codec label (``"none"``, ``"zstd:1"``, ``"zarr-default"``, ...)
``spec``              the ladder's :func:`~teachers.formats.stored_spec` (its ``to_dict``; a graph
                      other than a uniform tree with ``"packed": true`` and its tables (lookups)
                      in one flat array per level), arrays replaced by ``{"__array__": "spec.<path>"}``
``spec_sha256``       per spec array: ``{"dtype", "shape", "sha256"}`` of its raw C-order bytes
``chunk_sha256``      ``{"z": [...], "y": [...], "x": [...]}``: SHA-256 of the raw C-order bytes of
                      the rows of every chunk of every data array, computed when it was written
``complete``          ``true`` once every chunk and checksum is in place (written last)
``metadata_sha256``   ``{"all": sha256, "fields": {name: sha256}}`` of the canonical JSON (sorted
                      keys, no spaces) of every other attribute, and of each one (and of each key of
                      a dict-valued one, ``"spec.emission"``), so that an edit is named
====================  ===========================================================================

A graph ladder's store also has ``graph_stream_version``
(:data:`~teachers.sampling.GRAPH_STREAM_VERSION`, the version of the per-level scheme on graphs).

Reading (:func:`open_dataset`) checks the format and version, ``complete``, the metadata
checksum (naming the edited field), every spec array's checksum, the ladder's rebuild and every
array's shape, dtype and chunking; it reads nothing else.  Each chunk is checked against its
SHA-256 when it is read, so a corrupted chunk raises :class:`~teachers.dataset.DatasetFormatError`
naming the array, the chunk and its rows.

Writing is split in three pure steps, so that it can run in one process
(:func:`sample_to_store`) or be driven from many (Dask tasks, a job array):

1. :func:`create_partial` (once, by the driver): deletes a left-over partial of the same path,
   creates the partial store ``<parent>/.<name>.partial`` (a deterministic name beside ``path``,
   so the final rename stays on one filesystem) with every attribute except the chunk checksums,
   the empty arrays and the spec arrays, and returns its path.
2. :func:`write_chunk` (once per chunk, in any process, in any order): writes exactly one whole
   chunk ``c`` (rows :func:`chunk_bounds` ``(n, chunk_rows)[c]`` of the store, i.e. stream rows
   ``start + lo .. start + hi``; :func:`~teachers.sampling.sample_rows` samples them) and returns
   its checksums as a small JSON-able dict.  Chunks are aligned, so two calls for different chunks
   never touch the same file; it never writes the metadata.  Writing the same chunk twice rewrites
   it with the same bytes (the stream is deterministic), so a retried task is harmless.
3. :func:`finalize` (once, by the driver, after every chunk): takes the dicts of every chunk (any
   order), writes the checksums, then ``complete`` and the metadata checksum, and renames the
   partial into place.  An existing dataset at ``path`` is replaced only then: renamed aside to
   ``<parent>/.<name>.old``, the new one renamed in, the old one deleted.

A killed run (even SIGKILL) therefore leaves at most a partial, which never loads (it is not at
``path``, and it has no ``complete``); the next :func:`create_partial` of the same path deletes it
(and restores ``.<name>.old`` if a run was killed between the two renames).  Two writers of the
*same* path at the same time are not supported.

Sets of shard stores (``smaso sample ... --shard i/k`` style, each its own store) open as one
dataset: :func:`open_dataset` checks that they are of the same stream (ladder, seed, total,
stream), sorts them by ``start`` and refuses gaps and overlaps between them.  A set that does not
start at row 0 or end at ``total`` (a lone shard, or some leading or trailing shards not given) is
refused, naming the missing rows, unless ``open_dataset(..., partial=True)``: then
:attr:`ChunkedLadderData.covers_stream` is false, :attr:`ChunkedLadderData.missing_rows` lists
what is missing and :meth:`ChunkedLadderData.verify` reports it.

Compression (``compress=``): ``False``/``"none"`` (raw), ``True`` (the default, ``"zstd:1"``),
``"zstd"`` (= ``"zstd:1"``), ``"zstd:<level>"`` (level -7..22), ``"zarr"`` (zarr's default codecs,
zstd level 0 = zstd's default 3).  Measured on the 341-region, 16-event ladder
(``Ladder.random(depth=4, branching=4, events=16, seed=0)``, 2^20 rows in chunks of 65536, 2 cores):

===============  ===============  ======================  ==================
codecs           bytes / example  write only (example/s)  sample + write
===============  ===============  ======================  ==================
none             343              0.7-1.0 M               0.3-0.49 M
zarr's default   179              0.4-0.6 M               0.22-0.27 M
zstd level 1     172              1.0-1.9 M               0.33-0.40 M
===============  ===============  ======================  ==================

(the sampler alone: 0.35-0.44 M examples/s), hence the default zstd level 1: half the bytes of raw
chunks, writes faster than the sampler, and reads with verification at ~3 M examples/s.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

from .formats import (
    FORMAT,
    DatasetFormatError,
    _split_arrays,
    region_events,
    stored_spec,
    teacher_from_spec,
)
from .formats import metadata_checksum as _metadata_checksum
from .ladder import Ladder
from .sampling import (
    BLOCK_SIZE,
    DEFAULT_CHUNK_ROWS,
    GRAPH_STREAM_VERSION,
    STREAM_VERSION,
    LadderSample,
    check_working_memory,
    parse_shard,
    sample_rows,
    sampling_plan,
)

#: What a store holds (any :class:`~teachers.ladder.Ladder`: a uniform tree or any layered region graph); the
#: name of 0.2, when it was a union of two classes.
Teacher = Ladder
#: What a chunk is read as.
Sample = LadderSample

__all__ = ["CHUNK_BYTES", "DEFAULT_CHUNK_ROWS", "DEFAULT_COMPRESSION", "VERSION", "chunk_bounds", "create_partial",
           "default_chunk_rows", "finalize", "partial_path", "row_bytes", "sample_to_store", "write_chunk"]

VERSION = 2
#: What ``compress=True`` means (chosen by measurement, see the module docstring).
DEFAULT_COMPRESSION = "zstd:1"

_META_CHECKSUM = "metadata_sha256"
_REQUIRED = ("format", "version", "n", "start", "total", "seed", "shard", "block_size", "stream_version",
             "x_stored", "chunk_rows", "num_chunks", "event_dtype", "compression", "spec", "spec_sha256",
             "chunk_sha256", "complete")


def _zarr():
    import zarr  # imported on first use: `import teachers` stays cheap

    _one_codec_thread(zarr)
    return zarr


def _one_codec_thread(zarr) -> None:
    """Run zarr's codecs on one thread, unless the user configured ``threading.max_workers``.

    zarr (de)compresses every chunk on a thread pool (min(32, cores + 4) threads by default), and
    each pool thread's glibc arena keeps a freed chunk-sized buffer: reading chunk after chunk, the
    resident set climbed by one chunk every few chunks (392 to 538 MiB over 66 chunks of 31 MiB,
    measured), towards one chunk per thread.  This module reads and writes one chunk at a time, so a
    single codec thread is as fast (measured) and keeps memory at a few chunks.  Only applied before
    zarr has created its pool, and never over a value the user set.
    """
    from zarr.core import sync

    if getattr(sync, "_executor", None) is None and zarr.config.get("threading.max_workers", None) is None:
        zarr.config.set({"threading.max_workers": 1})


# ---------------------------------------------------------------------- small helpers
def _is_int(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, np.integer))


def _check_int(v, name: str, *, minimum: int = 0) -> int:
    if not _is_int(v) or v < minimum:
        what = "a positive" if minimum == 1 else "a non-negative" if minimum == 0 else f"an integer >= {minimum}"
        raise ValueError(f"{name}: expected {what} integer, got {v!r}")
    return int(v)


def _check_chunk_rows(chunk_rows) -> int:
    if not _is_int(chunk_rows) or chunk_rows <= 0 or chunk_rows % BLOCK_SIZE:
        raise ValueError(f"chunk_rows: expected a positive multiple of BLOCK_SIZE={BLOCK_SIZE}, got {chunk_rows!r}")
    return int(chunk_rows)


def _check_teacher(ladder, name: str = "ladder") -> None:
    if not isinstance(ladder, Ladder):
        raise TypeError(f"{name}: expected a Ladder, got {type(ladder).__name__}")


def _event_dtype(ladder: Ladder) -> torch.dtype:
    """The storage dtype of the events of ``ladder`` (the smallest that holds its largest event count)."""
    return ladder.event_dtype()


_region_events = region_events


#: Target size of one chunk's rows in memory, for :func:`default_chunk_rows`.
CHUNK_BYTES = 32 * 2**20


def row_bytes(ladder: Teacher) -> int:
    """Bytes of one example in memory: its events and label, and its inputs when they are stored
    (a :class:`~teachers.ladder.Ladder`)."""
    _check_teacher(ladder)
    item = torch.empty(0, dtype=_event_dtype(ladder)).element_size()
    x = 0 if ladder.emission.derivable else ladder.num_regions[-1] * ladder.emission.dim * 4  # float32
    return (ladder.total_regions + 1) * item + x


def default_chunk_rows(ladder: Teacher) -> int:
    """Rows per chunk of a new store of ``ladder``: ``DEFAULT_CHUNK_ROWS`` (65536) unless a chunk would
    then pass :data:`CHUNK_BYTES` (32 MiB) in memory, else the largest multiple of ``BLOCK_SIZE`` under
    it (at least one block).  The 341-region ladder with one-hot leaves keeps 65536 rows (22 MB);
    with Gaussian leaves (16 KiB of x per row) it gets 4096 rows, 67 MB, instead of a 1 GB chunk."""
    rows = CHUNK_BYTES // row_bytes(ladder) // BLOCK_SIZE * BLOCK_SIZE
    return int(min(DEFAULT_CHUNK_ROWS, max(BLOCK_SIZE, rows)))


def _sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).data).hexdigest()


def chunk_bounds(n: int, chunk_rows: int) -> list[tuple[int, int]]:
    """Rows ``(lo, hi)`` of every chunk of a store of ``n`` rows: chunk c is
    ``[c * chunk_rows, min(n, (c + 1) * chunk_rows))`` (the write contract's layout)."""
    n, chunk_rows = _check_int(n, "n"), _check_chunk_rows(chunk_rows)
    return [(lo, min(n, lo + chunk_rows)) for lo in range(0, n, chunk_rows)]


def partial_path(path: str | os.PathLike) -> Path:
    """Where the store for ``path`` is written before it is renamed into place:
    ``<parent>/.<name>.partial`` (deterministic, so the next write finds a left-over one)."""
    path = Path(os.path.abspath(path))
    return path.parent / f".{path.name}.partial"


def _old_path(path: Path) -> Path:
    return path.parent / f".{path.name}.old"


_ZSTD = re.compile(r"zstd(?::(-?\d+))?")


def _compression(compress) -> tuple[str, object]:
    """(label, zarr ``compressors=`` argument) for a ``compress`` value."""
    if compress is True:
        compress = DEFAULT_COMPRESSION
    if compress is False or compress == "none":
        return "none", None
    if compress == "zarr":
        return "zarr-default", "auto"
    if isinstance(compress, str) and (m := _ZSTD.fullmatch(compress)):
        level = 1 if m.group(1) is None else int(m.group(1))
        if not -7 <= level <= 22:
            raise ValueError(f"compress: zstd level must be in -7..22, got {level}")
        from zarr.codecs import ZstdCodec

        return f"zstd:{level}", [ZstdCodec(level=level)]
    raise ValueError(f"compress: expected False, True, 'none', 'zstd', 'zstd:<level>' or 'zarr', got {compress!r}")


def _read_json(path: Path) -> dict:
    try:
        obj = json.loads(path.read_bytes())
    except (FileNotFoundError, NotADirectoryError):
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetFormatError(f"dataset: {str(path)!r} is not valid JSON ({type(e).__name__}: {e})") from None
    if not isinstance(obj, dict):
        raise DatasetFormatError(f"dataset: {str(path)!r} does not hold a JSON object")
    return obj


def _root_attrs(store: Path) -> dict | None:
    """The root group's attributes, or ``None`` when ``store`` is no zarr v3 group."""
    try:
        meta = _read_json(store / "zarr.json")
    except (FileNotFoundError, NotADirectoryError):
        return None
    if meta.get("zarr_format") != 3 or meta.get("node_type") != "group":
        return None
    attrs = meta.get("attributes", {})
    return attrs if isinstance(attrs, dict) else None


def _is_v2_store(path: Path) -> bool:
    attrs = _root_attrs(path)
    return attrs is not None and attrs.get("format") == FORMAT and attrs.get("version") == VERSION


def _to_numpy(t, name: str) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().cpu().numpy()
    if isinstance(t, np.ndarray):
        return t
    raise TypeError(f"{name}: expected a torch.Tensor or a numpy array, got {type(t).__name__}")


# ---------------------------------------------------------------------- the stored spec and the rows
_store_spec = stored_spec
_teacher_from_spec = teacher_from_spec


def _rows(ladder: Ladder, seed: int, lo: int, hi: int, *, sampler=None, device=None):
    """Stream rows ``[lo, hi)``: ``(z, x)`` (``sampler``: a prebuilt :func:`~teachers.sampling.sampling_plan`)."""
    return sample_rows(ladder, seed, lo, hi, plan=sampler, device=device)


def _sampler(ladder: Ladder, device: torch.device):
    return sampling_plan(ladder, device)


# ---------------------------------------------------------------------- writing
def _recover(path: Path) -> None:
    """Undo what a killed write of ``path`` left: a finished swap's old copy, or an unfinished
    one's (the old dataset is put back: it was complete)."""
    old = _old_path(path)
    if old.exists():
        if path.exists():
            shutil.rmtree(old)
        else:
            os.replace(old, path)


def create_partial(path: str | os.PathLike, ladder: Teacher, *, n: int, start: int = 0, total: int | None = None,
                   seed: int = 0, shard: str | tuple[int, int] | None = None, chunk_rows: int | None = None,
                   compress: bool | str = True) -> Path:
    """Step 1 of a write (see the module docstring): create the partial store of ``path``.

    :param path: the final store (a directory, ``*.zarr`` by convention); it must not exist, be an
        empty directory, or be a version-2 store (replaced at :func:`finalize`).
    :param n: rows of this store: stream rows ``[start, start + n)`` of ``total`` (default ``n``).
    :param shard: ``"i/k"``: this is shard i of k, so ``[start, start + n)`` must be that shard's
        rows ``[i * total // k, (i + 1) * total // k)``.
    :param chunk_rows: rows per chunk, a multiple of ``BLOCK_SIZE`` (default :func:`default_chunk_rows`).
    :param compress: see the module docstring.
    :returns: the partial's path (``partial_path(path)``), for :func:`write_chunk` and :func:`finalize`.
    """
    _check_teacher(ladder)
    n, start, seed = _check_int(n, "n"), _check_int(start, "start"), _check_int(seed, "seed")
    total = n if total is None else _check_int(total, "total")
    if start + n > total:
        raise ValueError(f"total: rows [{start}, {start + n}) do not fit in a stream of total={total}")
    i, k = parse_shard(shard)
    if (start, start + n) != (i * total // k, (i + 1) * total // k):
        raise ValueError(f"shard: {i}/{k} of a stream of {total} is rows [{i * total // k}, {(i + 1) * total // k}), "
                         f"not start={start}, n={n}")
    chunk_rows = default_chunk_rows(ladder) if chunk_rows is None else _check_chunk_rows(chunk_rows)
    label, compressors = _compression(compress)
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: expected a path, got {type(path).__name__}")
    path = Path(os.path.abspath(path))
    if not path.parent.is_dir():
        raise ValueError(f"path: directory {str(path.parent)!r} does not exist")
    _recover(path)
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"path: {str(path)!r} exists and is not a directory store; refusing to replace it")
        if any(path.iterdir()) and not _is_v2_store(path):
            raise ValueError(f"path: {str(path)!r} is a non-empty directory that is not a {FORMAT} version {VERSION} "
                             "store; refusing to replace it")
    partial = partial_path(path)
    if partial.is_dir() and not partial.is_symlink():  # left over by a killed write of the same path
        shutil.rmtree(partial)
    elif partial.exists() or partial.is_symlink():
        partial.unlink()

    zarr = _zarr()
    spec_arrays: dict[str, np.ndarray] = {}
    spec = _split_arrays(_store_spec(ladder), "", spec_arrays)
    x_stored = not ladder.emission.derivable
    dtype = np.dtype(str(_event_dtype(ladder)).removeprefix("torch."))
    attrs = {"format": FORMAT, "version": VERSION, "n": n, "start": start, "total": total, "seed": seed,
             "shard": [i, k], "block_size": BLOCK_SIZE, "stream_version": STREAM_VERSION, "x_stored": x_stored,
             "chunk_rows": chunk_rows, "num_chunks": len(range(0, n, chunk_rows)), "event_dtype": dtype.name,
             "compression": label, "spec": spec, "complete": False}
    if not ladder.is_uniform():
        attrs["graph_stream_version"] = GRAPH_STREAM_VERSION
    config = {"write_empty_chunks": True}  # every chunk has its file: a missing one is an error, not zeros
    try:
        root = zarr.open_group(str(partial), mode="w-")
        R, leaves, dim = ladder.total_regions, ladder.num_regions[-1], ladder.emission.dim
        root.create_array("z", shape=(n, R), chunks=(chunk_rows, R), dtype=dtype, compressors=compressors,
                          fill_value=0, config=config)
        root.create_array("y", shape=(n,), chunks=(chunk_rows,), dtype=dtype, compressors=compressors,
                          fill_value=0, config=config)
        if x_stored:
            root.create_array("x", shape=(n, leaves, dim), chunks=(chunk_rows, leaves, dim), dtype="float32",
                              compressors=compressors, fill_value=0.0, config=config)
        group = root.create_group("spec")
        spec_sums = {}
        for name, arr in spec_arrays.items():
            arr = np.asarray(arr, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
            a = group.create_array(name.removeprefix("spec."), shape=arr.shape, dtype=arr.dtype,
                                   chunks=tuple(max(1, s) for s in arr.shape), compressors=None, config=config)
            a[...] = arr
            spec_sums[name] = {"dtype": arr.dtype.name, "shape": list(arr.shape), "sha256": _sha256(arr)}
        attrs["spec_sha256"] = spec_sums
        root.attrs.update(attrs)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return partial


def _partial_info(partial: Path, name: str = "partial") -> dict:
    attrs = _root_attrs(partial)
    if attrs is None or attrs.get("format") != FORMAT or attrs.get("version") != VERSION:
        raise ValueError(f"{name}: {str(partial)!r} is not a partial {FORMAT} version {VERSION} store "
                         "(made by create_partial)")
    if attrs.get("complete") is True:
        raise ValueError(f"{name}: {str(partial)!r} is already finalized")
    return attrs


def _open_for_write(array: Path):
    # every chunk gets its file, even one equal to the fill value (zarr's default would skip it):
    # a missing chunk file is then an error, never silent zeros
    return _zarr().open_array(str(array), mode="r+").with_config({"write_empty_chunks": True})


def write_chunk(partial: str | os.PathLike, chunk_index: int, z, x=None) -> dict:
    """Step 2 of a write (see the module docstring): write chunk ``chunk_index`` of the partial store.

    :param z: the chunk's events, ``(rows, total_regions)`` in the ladder's event dtype (a tensor
        or an array; ``rows`` is that of :func:`chunk_bounds`), e.g. from
        :func:`~teachers.sampling.sample_rows` of stream rows ``[start + lo, start + hi)``.
    :param x: the chunk's inputs ``(rows, R_d, dim)`` (stored as float32) when the store keeps x;
        ``None`` otherwise.
    :returns: ``{"chunk": c, "rows": [lo, hi], "sha256": {"z": ..., "y": ..., "x": ...}}``, to hand
        to :func:`finalize` (plain JSON: it can cross processes).
    """
    partial = Path(os.path.abspath(partial))
    attrs = _partial_info(partial)
    num_chunks, chunk_rows, n = attrs["num_chunks"], attrs["chunk_rows"], attrs["n"]
    if not _is_int(chunk_index) or not 0 <= chunk_index < num_chunks:
        raise ValueError(f"chunk_index: expected an integer in [0, {num_chunks}), got {chunk_index!r}")
    c = int(chunk_index)
    lo, hi = c * chunk_rows, min(n, (c + 1) * chunk_rows)
    z_arr = _open_for_write(partial / "z")
    z = _to_numpy(z, "z")
    if z.dtype != z_arr.dtype or z.shape != (hi - lo, z_arr.shape[1]):
        raise ValueError(f"z: chunk {c} expects shape ({hi - lo}, {z_arr.shape[1]}) of {z_arr.dtype}, "
                         f"got {z.shape} of {z.dtype}")
    data = {"z": np.ascontiguousarray(z), "y": np.ascontiguousarray(z[:, 0])}
    if attrs["x_stored"]:
        if x is None:
            raise ValueError("x: this store keeps the inputs (the emission is not derivable); x is required")
        x = _to_numpy(x, "x")
        if x.dtype.kind != "f":
            raise ValueError(f"x: expected floating-point inputs, got {x.dtype}")
        data["x"] = np.ascontiguousarray(x, dtype=np.float32)
    elif x is not None:
        raise ValueError("x: this store rebuilds the inputs from z (derivable emission); pass x=None")
    sums = {}
    for name, arr in data.items():
        a = z_arr if name == "z" else _open_for_write(partial / name)
        if arr.shape[1:] != a.shape[1:] or arr.shape[0] != hi - lo:
            raise ValueError(f"{name}: chunk {c} expects shape {(hi - lo, *a.shape[1:])}, got {arr.shape}")
        a[lo:hi] = arr
        sums[name] = _sha256(arr)
    return {"chunk": c, "rows": [lo, hi], "sha256": sums}


def _chunk_file(store: Path, name: str, arr_meta: dict, c: int) -> Path:
    ndim = len(arr_meta["shape"])
    sep = arr_meta.get("chunk_key_encoding", {}).get("configuration", {}).get("separator", "/")
    return store / name / ("c" + sep + sep.join(str(v) for v in (c,) + (0,) * (ndim - 1)))


def _swap_into_place(partial: Path, path: Path) -> None:
    old = _old_path(path)
    if path.exists():
        if old.exists():
            shutil.rmtree(old)
        os.replace(path, old)
    os.replace(partial, path)
    if old.exists():
        shutil.rmtree(old)


def finalize(partial: str | os.PathLike, path: str | os.PathLike, checksums: Iterable[dict]) -> Path:
    """Step 3 of a write (see the module docstring): record the chunks' checksums, mark the store
    complete and rename it into place at ``path`` (replacing a dataset there only now).

    :param checksums: the dicts :func:`write_chunk` returned, one per chunk, in any order.
    :raises ValueError: a chunk missing, given twice with other checksums, or of other rows.
    """
    path = Path(os.path.abspath(path))
    partial = Path(os.path.abspath(partial))
    if partial != partial_path(path):
        raise ValueError(f"partial: {str(partial)!r} is not the partial of {str(path)!r} "
                         f"(expected {str(partial_path(path))!r})")
    attrs = _partial_info(partial)
    num_chunks, chunk_rows, n = attrs["num_chunks"], attrs["chunk_rows"], attrs["n"]
    names = ["z", "y"] + (["x"] if attrs["x_stored"] else [])
    if isinstance(checksums, dict):
        raise TypeError("checksums: expected the list of write_chunk's results, got one dict")
    got: dict[int, dict] = {}
    for entry in checksums:
        try:
            c, rows, sums = entry["chunk"], list(entry["rows"]), entry["sha256"]
        except (TypeError, KeyError):
            raise ValueError(f"checksums: expected write_chunk's results, got {entry!r}") from None
        if not _is_int(c) or not 0 <= c < num_chunks:
            raise ValueError(f"checksums: chunk {c!r} outside [0, {num_chunks})")
        if rows != [c * chunk_rows, min(n, (c + 1) * chunk_rows)] or sorted(sums) != sorted(names):
            raise ValueError(f"checksums: chunk {c} has rows {rows} and arrays {sorted(sums)}, expected rows "
                             f"{[c * chunk_rows, min(n, (c + 1) * chunk_rows)]} and arrays {sorted(names)}")
        if c in got and got[c] != sums:
            raise ValueError(f"checksums: chunk {c} given twice with different checksums")
        got[int(c)] = dict(sums)
    missing = [c for c in range(num_chunks) if c not in got]
    if missing:
        raise ValueError(f"checksums: chunk(s) {missing[:10]}{' ...' if len(missing) > 10 else ''} missing "
                         f"({len(missing)} of {num_chunks})")
    for name in names:
        arr_meta = _read_json(partial / name / "zarr.json")
        for c in range(num_chunks):
            if not _chunk_file(partial, name, arr_meta, c).is_file():
                raise ValueError(f"checksums: chunk {c} of {name!r} was reported written but has no file in "
                                 f"{str(partial)!r}")
    root = _zarr().open_group(str(partial), mode="r+")
    root.attrs.update({"chunk_sha256": {name: [got[c][name] for c in range(num_chunks)] for name in names}})
    attrs = _root_attrs(partial)  # as a reader will parse it
    attrs["complete"] = True
    attrs.pop(_META_CHECKSUM, None)
    root.attrs.update({"complete": True, _META_CHECKSUM: _metadata_checksum(attrs)})  # written last
    _swap_into_place(partial, path)
    return path


def _sample_chunk_task(c: int, partial: str, ladder: Teacher, seed: int, start: int, n: int, chunk_rows: int,
                       device: str) -> dict:
    """One task of :func:`sample_to_store` on an engine (any process): sample chunk ``c`` and write it."""
    lo, hi = c * chunk_rows, min(n, (c + 1) * chunk_rows)
    z, x = _rows(ladder, seed, start + lo, start + hi, device=device)
    return write_chunk(partial, c, z, x)


def sample_to_store(ladder: Teacher, num_examples: int, path: str | os.PathLike, seed: int = 0, *,
                    shard: str | tuple[int, int] | None = None, chunk_rows: int | None = None,
                    compress: bool | str = True, device: torch.device | str | None = None,
                    progress: bool | None = None, engine=None) -> Path:
    """Sample ``num_examples`` examples (or one shard of them) from ``ladder`` straight into a
    version-2 store at ``path``, one chunk at a time: memory stays at a few chunks whatever N is.

    The bytes of z (and x) equal those of :func:`~teachers.sampling.sample_ladder` with the same
    ladder, N, seed and shard, whatever ``chunk_rows`` is (its rows are sampled by
    :func:`~teachers.sampling.sample_rows`).  With ``shard="i/k"`` the store holds
    that shard's rows only (with ``start``/``total`` set); :func:`open_dataset` joins a set of them.

    :param chunk_rows: rows per chunk, a multiple of ``BLOCK_SIZE`` (default :func:`default_chunk_rows`:
        65536, fewer when a chunk would pass 32 MiB).
    :param compress: see the module docstring (default ``True`` = ``"zstd:1"``).
    :param device: where to sample (the rows are written from the CPU).
    :param progress: a tqdm bar (default: when more than 2^18 rows and stderr is a terminal).
    :param ladder: a :class:`~teachers.ladder.Ladder`.
    :param engine: ``None``: every chunk sampled and written here, one after the other (one
        :func:`~teachers.sampling.sampling_plan` reused); else a :class:`~teachers.engine.SerialEngine`
        or :class:`~teachers.engine.DaskEngine`: one task per chunk (:func:`write_chunk` in the
        worker; the workers must see ``path``'s directory).  The bytes are the same either way.
    :returns: ``path``.  On an exception nothing is left but what was at ``path`` before.
    """
    _check_teacher(ladder)
    num_examples = _check_int(num_examples, "num_examples", minimum=1)
    seed = _check_int(seed, "seed")
    chunk_rows = default_chunk_rows(ladder) if chunk_rows is None else _check_chunk_rows(chunk_rows)
    i, k = parse_shard(shard)
    lo, hi = i * num_examples // k, (i + 1) * num_examples // k
    device = torch.device(device) if device is not None else torch.device("cpu")
    check_working_memory(ladder, 1, device)  # a ladder whose block cannot be sampled: refused before any file
    partial = create_partial(path, ladder, n=hi - lo, start=lo, total=num_examples, seed=seed, shard=(i, k),
                             chunk_rows=chunk_rows, compress=compress)
    if progress is None:
        progress = hi - lo > 2**18 and sys.stderr.isatty()
    bar = None
    done = False
    try:
        if progress and engine is None:  # (an engine shows its own bar over the chunks)
            from tqdm.auto import tqdm

            bar = tqdm(total=hi - lo, unit="ex", unit_scale=True, desc="sampling ladder to store")
        bounds = chunk_bounds(hi - lo, chunk_rows)
        if engine is None:
            sampler = _sampler(ladder, device)
            sums = []
            for c, (a, b) in enumerate(bounds):
                z, x = _rows(ladder, seed, lo + a, lo + b, sampler=sampler, device=device)
                sums.append(write_chunk(partial, c, z, x))
                del z, x
                if bar is not None:
                    bar.update(b - a)
        else:
            from .engine import get_engine

            sums = get_engine(engine).map(_sample_chunk_task, list(range(len(bounds))), str(partial), ladder, seed,
                                          lo, hi - lo, chunk_rows, str(device),
                                          progress="sampling ladder to store" if progress else None)
        path = finalize(partial, path, sums)
        done = True
    finally:
        if bar is not None:
            bar.close()
        if not done:
            shutil.rmtree(partial, ignore_errors=True)
    return path


def _make_sample(ladder: Teacher, z: torch.Tensor, x: torch.Tensor | None, *, seed, start: int, total, meta: dict
                 ) -> Sample:
    """Rows of a ladder as a :class:`~teachers.sampling.LadderSample`."""
    return LadderSample(ladder, z, x, seed=seed, start=start, total=total, meta=meta)
