"""Chunked, out-of-core ladder datasets: format ``smaso-ladder-dataset`` version 2, a zarr v3 store.

A version-2 dataset is a zarr v3 *directory* store (conventionally named ``*.zarr``) that holds
any number of examples without ever holding them in memory: it is written chunk by chunk as the
sampler produces rows, and read chunk by chunk, each chunk verified by its SHA-256 when read.

It holds either kind of teacher: a uniform tree :class:`~teachers.ladder.Ladder` (rows of
:func:`~teachers.sampling.sample_ladder`) or any layered region graph,
:class:`~teachers.graph_ladder.GraphLadder` (rows of :func:`~teachers.graph_sampling.sample_graph_ladder`;
regions may have different event counts, the event dtype is
:func:`~teachers.graph_sampling.event_dtype`'s).  The format name and version are the same for both; the
stored spec's ``format`` field says which it is (``"smaso-ladder"``, or ``"smaso-graph-ladder"``), so
stores written before graph ladders existed open unchanged.  Every function below takes either, and a
graph store's chunks read as :class:`~teachers.graph_sampling.GraphSample` s (the fields and row access
of :class:`~teachers.sampling.LadderSample`).

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
``spec``              the ladder's :meth:`~teachers.ladder.Ladder.to_dict`, arrays replaced by
                      ``{"__array__": "spec.<path>"}``; a graph ladder's
                      :meth:`~teachers.graph_ladder.GraphLadder.to_dict` with ``"packed": true``
                      and its tables (lookups) in one flat array per level (:func:`_store_spec`);
                      its ``format`` field names the kind of ladder
``spec_sha256``       per spec array: ``{"dtype", "shape", "sha256"}`` of its raw C-order bytes
``chunk_sha256``      ``{"z": [...], "y": [...], "x": [...]}``: SHA-256 of the raw C-order bytes of
                      the rows of every chunk of every data array, computed when it was written
``complete``          ``true`` once every chunk and checksum is in place (written last)
``metadata_sha256``   ``{"all": sha256, "fields": {name: sha256}}`` of the canonical JSON (sorted
                      keys, no spaces) of every other attribute, and of each one (and of each key of
                      a dict-valued one, ``"spec.emission"``), so that an edit is named
====================  ===========================================================================

A graph ladder's store also has ``graph_stream_version``
(:data:`~teachers.graph_sampling.GRAPH_STREAM_VERSION`, the version of the graph sampler's stream).

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
   ``start + lo .. start + hi``; :func:`~teachers.sampling.sample_rows` samples them, or
   :func:`~teachers.graph_sampling.sample_graph_rows` for a graph ladder) and returns
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

import bisect
import hashlib
import itertools
import json
import os
import re
import shutil
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from .dataset import (
    FORMAT,
    DatasetFormatError,
    _canonical,
    _events_out_of_range,
    _join_arrays,
    _split_arrays,
    check_contiguous,
    check_coverage,
    check_metadata_checksum,
    ladder_from_spec,
)
from .dataset import metadata_checksum as _metadata_checksum
from .emission import one_hot
from .graph_ladder import FORMAT as GRAPH_FORMAT
from .graph_ladder import GraphLadder, children_of
from .graph_sampling import GRAPH_STREAM_VERSION, GraphSample, sample_graph_rows, sampling_plan
from .graph_sampling import event_dtype as graph_event_dtype
from .ladder import TOPDOWN, Ladder
from .pyro_model import LadderModel
from .sampling import (
    BLOCK_SIZE,
    DEFAULT_CHUNK_ROWS,
    STREAM_VERSION,
    LadderSample,
    check_working_memory,
    parse_shard,
    sample_rows,
)

#: What a store can hold: a uniform tree :class:`~teachers.ladder.Ladder` or any layered region graph,
#: :class:`~teachers.graph_ladder.GraphLadder`.
Teacher = Ladder | GraphLadder
#: What a chunk of either is read as (the same row access: ``z``, ``x``, ``y``, ``inputs()``, ``start``, ...).
Sample = LadderSample | GraphSample

__all__ = [
    "CHUNK_BYTES",
    "DEFAULT_CHUNK_ROWS",
    "DEFAULT_COMPRESSION",
    "VERSION",
    "ChunkDataset",
    "ChunkedLadderData",
    "StreamingLadderDataset",
    "as_chunks",
    "chunk_bounds",
    "create_partial",
    "default_chunk_rows",
    "finalize",
    "open_dataset",
    "partial_path",
    "row_bytes",
    "sample_to_store",
    "write_chunk",
]

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
    if not isinstance(ladder, (Ladder, GraphLadder)):
        raise TypeError(f"{name}: expected a Ladder or a GraphLadder, got {type(ladder).__name__}")


def _event_dtype(ladder: Teacher) -> torch.dtype:
    """The storage dtype of the events of ``ladder`` (a tree's ``event_dtype()``, a graph's
    :func:`teachers.graph_sampling.event_dtype`: the smallest that holds its largest event count)."""
    return graph_event_dtype(ladder) if isinstance(ladder, GraphLadder) else ladder.event_dtype()


def _region_events(ladder: Teacher) -> np.ndarray:
    """Event count of every region in global order, ``(total_regions,)`` int64."""
    if isinstance(ladder, GraphLadder):
        return np.asarray([m for lvl in ladder.events for m in lvl], dtype=np.int64)
    return np.repeat(np.asarray(ladder.events, dtype=np.int64), ladder.num_regions)


#: Target size of one chunk's rows in memory, for :func:`default_chunk_rows`.
CHUNK_BYTES = 32 * 2**20


def row_bytes(ladder: Teacher) -> int:
    """Bytes of one example in memory: its events and label, and its inputs when they are stored
    (a :class:`~teachers.ladder.Ladder` or a :class:`~teachers.graph_ladder.GraphLadder`)."""
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


# ---------------------------------------------------------------------- the stored spec
def _store_spec(ladder: Teacher) -> dict:
    """The spec a store keeps (before :func:`~teachers.dataset._split_arrays` turns its arrays into
    ``spec/<path>`` arrays): a tree's :meth:`~teachers.ladder.Ladder.to_dict`; a graph's
    :meth:`~teachers.graph_ladder.GraphLadder.to_dict` with ``"packed": true`` and its tables in one flat
    float64 array per level (``tables[l]``: every region's ``(prod parent m, m)`` table, C order, regions in
    order; ``tables[0] = []``), its leaf priors as one ``(leaves, m)`` array and its lookups in one flat
    int64 array per level, so that a graph of thousands of regions is a few arrays, not thousands."""
    if isinstance(ladder, Ladder):
        return ladder.to_dict()
    d = ladder.to_dict()
    d["packed"] = True
    d["emission"] = ladder.emission.to_dict()  # its arrays (Gaussian means, sigma) as arrays
    if ladder.mode == TOPDOWN:
        d["prior"] = ladder.prior.numpy()
        d["tables"] = [[]] + [torch.cat([t.reshape(-1) for t in lvl]).numpy() for lvl in ladder.tables[1:]]
    else:
        d["leaf_priors"] = torch.stack(list(ladder.leaf_priors)).numpy()
        d["lookups"] = [torch.cat([t.reshape(-1) for t in lvl]).numpy() for lvl in ladder.lookups]
    return d


def _unpack(flat, shapes: list[tuple[int, ...]], name: str) -> list[torch.Tensor]:
    flat = torch.as_tensor(flat).reshape(-1)
    sizes = [int(np.prod(s)) for s in shapes]
    if flat.numel() != sum(sizes):
        raise DatasetFormatError(f"spec array {name!r} holds {flat.numel()} values, the graph needs {sum(sizes)}")
    return [t.reshape(s) for t, s in zip(torch.split(flat, sizes), shapes, strict=True)]


def _graph_from_spec(spec: dict, arrays: dict, where: str) -> GraphLadder:
    """The graph ladder of a store's spec (:func:`_store_spec`'s form); any failure a
    :class:`DatasetFormatError` naming the store."""
    try:
        d = _join_arrays(spec, arrays, where)
        if d.pop("packed", False):
            events, parents = d["events"], d["parents"]
            if d["mode"] == TOPDOWN:
                d["tables"] = [[]] + [
                    _unpack(d["tables"][l], [(int(np.prod([events[l - 1][p] for p in ps])), events[l][i])
                                             for i, ps in enumerate(parents[l])], f"spec.tables.{l}")
                    for l in range(1, len(events))]
            else:
                d["leaf_priors"] = list(torch.as_tensor(d["leaf_priors"]))
                children = children_of(parents, [len(lvl) for lvl in events])
                d["lookups"] = [
                    _unpack(d["lookups"][l], [(int(np.prod([events[l + 1][c] for c in cs])),) for cs in children[l]],
                            f"spec.lookups.{l}")
                    for l in range(len(events) - 1)]
        return GraphLadder.from_dict(d)
    except DatasetFormatError as e:
        if str(e).startswith(where):
            raise
        raise DatasetFormatError(f"{where} holds an invalid graph ladder spec (metadata field 'spec'): {e}") from None
    except Exception as e:  # LadderSpecError, or anything a malformed spec makes the constructor raise
        raise DatasetFormatError(f"{where} holds an invalid graph ladder spec (metadata field 'spec'): "
                                 f"{type(e).__name__}: {e}") from None


def _teacher_from_spec(spec: dict, arrays: dict, where: str) -> Teacher:
    """A store's ladder: a :class:`GraphLadder` when its spec's ``format`` is ``smaso-graph-ladder``, else
    (every store written before graph ladders, and every tree store) a :class:`Ladder`."""
    if isinstance(spec, dict) and spec.get("format") == GRAPH_FORMAT:
        return _graph_from_spec(spec, arrays, where)
    return ladder_from_spec(spec, arrays, where)


def _rows(ladder: Teacher, seed: int, lo: int, hi: int, *, sampler=None, device=None):
    """Stream rows ``[lo, hi)`` of either kind of ladder: ``(z, x)`` (``sampler``: a prebuilt
    :class:`~teachers.pyro_model.LadderModel` or :func:`~teachers.graph_sampling.sampling_plan`)."""
    if isinstance(ladder, GraphLadder):
        return sample_graph_rows(ladder, seed, lo, hi, plan=sampler, device=device)
    return sample_rows(ladder, seed, lo, hi, model=sampler, device=device)


def _sampler(ladder: Teacher, device: torch.device):
    return sampling_plan(ladder, device) if isinstance(ladder, GraphLadder) else LadderModel(ladder, device=device)


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
    if isinstance(ladder, GraphLadder):
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
    ladder, N, seed and shard, whatever ``chunk_rows`` is; for a :class:`~teachers.graph_ladder.GraphLadder`,
    those of :func:`~teachers.graph_sampling.sample_graph_ladder` (its rows are sampled by
    :func:`~teachers.graph_sampling.sample_graph_rows`).  With ``shard="i/k"`` the store holds
    that shard's rows only (with ``start``/``total`` set); :func:`open_dataset` joins a set of them.

    :param chunk_rows: rows per chunk, a multiple of ``BLOCK_SIZE`` (default :func:`default_chunk_rows`:
        65536, fewer when a chunk would pass 32 MiB).
    :param compress: see the module docstring (default ``True`` = ``"zstd:1"``).
    :param device: where to sample (the rows are written from the CPU).
    :param progress: a tqdm bar (default: when more than 2^18 rows and stderr is a terminal).
    :param ladder: a :class:`~teachers.ladder.Ladder` or a :class:`~teachers.graph_ladder.GraphLadder`.
    :param engine: ``None``: every chunk sampled and written here, one after the other (one
        :class:`~teachers.pyro_model.LadderModel`, or one graph :func:`~teachers.graph_sampling.sampling_plan`,
        reused); else a :class:`~teachers.engine.SerialEngine`
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
        if isinstance(ladder, GraphLadder) and not (_is_int(attrs.get("graph_stream_version"))
                                                    and attrs["graph_stream_version"] >= 1):
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

    A store of a :class:`~teachers.graph_ladder.GraphLadder` reads the same way: :attr:`ladder` is then
    the graph ladder (:attr:`is_graph` is true) and chunks are :class:`~teachers.graph_sampling.GraphSample`
    s, with the same fields and row access as :class:`~teachers.sampling.LadderSample` (``z``, ``x``,
    ``y``, ``inputs()``, ``events(l)``, ``start``, ``total``, ``seed``, ``meta``).
    """

    def __init__(self, stores: list[_Store]):
        if not stores:
            raise ValueError("stores: expected at least one store (use open_dataset)")
        self._stores = stores
        s0 = stores[0]
        #: the teacher: a :class:`~teachers.ladder.Ladder`, or a :class:`~teachers.graph_ladder.GraphLadder`
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
        """Whether the store holds a :class:`~teachers.graph_ladder.GraphLadder` (its spec's format is
        ``smaso-graph-ladder``) rather than a uniform tree :class:`~teachers.ladder.Ladder`."""
        return isinstance(self.ladder, GraphLadder)

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
        """Chunk ``i``, verified, as a :class:`LadderSample` (a :class:`GraphSample` for a graph ladder) whose
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
        """Every row in memory, as one :class:`LadderSample` or :class:`GraphSample` (for small data and tests)."""
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


# ---------------------------------------------------------------------- PyTorch datasets
def _make_sample(ladder: Teacher, z: torch.Tensor, x: torch.Tensor | None, *, seed, start: int, total, meta: dict
                 ) -> Sample:
    """Rows of either kind of ladder as its sample class (the same fields)."""
    if isinstance(ladder, GraphLadder):
        return GraphSample(ladder, z, x, seed=seed, meta=meta, start=start, total=total)
    return LadderSample(ladder, z, x, seed=seed, start=start, total=total, meta=meta)


class _SampleChunks:
    """An in-memory :class:`LadderSample` (or :class:`GraphSample`) seen as chunks of ``chunk_rows`` rows
    (the interface of :class:`ChunkedLadderData` that chunk-by-chunk passes use)."""

    def __init__(self, sample: Sample, chunk_rows: int):
        if not _is_int(chunk_rows) or chunk_rows <= 0:
            raise ValueError(f"chunk_rows: expected a positive integer, got {chunk_rows!r}")
        self.sample, self.chunk_rows, self.ladder = sample, int(chunk_rows), sample.ladder
        self.seed, self.start, self.total = sample.seed, sample.start, sample.total
        self.x_stored = sample.x is not None
        self.is_graph = isinstance(sample, GraphSample)
        self.num_chunks = -(-len(sample) // self.chunk_rows)

    def __len__(self) -> int:
        return len(self.sample)

    def __repr__(self) -> str:
        return f"as_chunks({len(self)} rows in memory, {self.num_chunks} chunks of {self.chunk_rows})"

    def chunk_bounds(self, i: int) -> tuple[int, int]:
        """Rows ``(lo, hi)`` of chunk ``i``."""
        if not _is_int(i):
            raise TypeError(f"i: expected an integer chunk index, got {type(i).__name__}")
        if not -self.num_chunks <= i < self.num_chunks:
            raise IndexError(f"i: chunk {i} out of range for {self.num_chunks} chunks")
        lo = (int(i) % self.num_chunks) * self.chunk_rows
        return lo, min(len(self.sample), lo + self.chunk_rows)

    def chunk(self, i: int) -> Sample:
        """Chunk ``i`` (views of the sample's tensors)."""
        s = self.sample
        lo, hi = self.chunk_bounds(i)
        return _make_sample(s.ladder, s.z[lo:hi], None if s.x is None else s.x[lo:hi], seed=s.seed, start=s.start + lo,
                            total=s.total, meta=dict(s.meta))

    def iter_chunks(self, chunk_rows: int | None = None, progress: bool = False) -> Iterator[Sample]:
        """The chunks in order (or windows of ``chunk_rows`` rows), as :meth:`ChunkedLadderData.iter_chunks`."""
        return self.sample.iter_chunks(self.chunk_rows if chunk_rows is None else chunk_rows)


def as_chunks(source, chunk_rows: int = DEFAULT_CHUNK_ROWS, *,
              partial: bool = False) -> ChunkedLadderData | _SampleChunks:
    """Any dataset as chunks, for passes that run chunk by chunk (one task per chunk).

    The result has ``ladder``, ``seed``, ``start``, ``total``, ``num_chunks``, ``len()``,
    ``chunk(i) -> LadderSample`` (a :class:`GraphSample` for a graph ladder; with its stream
    ``start``), ``chunk_bounds(i)`` and ``iter_chunks()``, and pickles (to send to Dask workers).

    :param source: a :class:`ChunkedLadderData` (returned as is), dataset path(s) (version-2
        stores open lazily; version-1 ``.npz`` files load in memory), or a :class:`LadderSample`
        or :class:`GraphSample`.
    :param chunk_rows: rows per chunk of an in-memory sample (a store keeps its own chunks).
    :param partial: for path(s): accept an incomplete set of shards (see :func:`open_dataset`).
    """
    if isinstance(source, (ChunkedLadderData, _SampleChunks)):
        return source
    if isinstance(source, (LadderSample, GraphSample)):
        return _SampleChunks(source, chunk_rows)
    if isinstance(source, (str, os.PathLike)) or (isinstance(source, Sequence) and not isinstance(source, bytes)):
        from .dataset import load_dataset

        data = load_dataset(source, partial=partial)
        return data if isinstance(data, ChunkedLadderData) else _SampleChunks(data, chunk_rows)
    raise TypeError(f"source: expected a ChunkedLadderData, a LadderSample, a GraphSample or dataset path(s), "
                    f"got {type(source).__name__}")


def _check_dtype(dtype) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype: expected a floating-point torch.dtype, got {dtype!r}")
    return dtype


def _triple(ladder: Teacher, z: torch.Tensor, x: torch.Tensor | None, dtype: torch.dtype):
    z = z.long()
    if x is None:
        x = one_hot(z[:, ladder.level_offsets[-2]:], ladder.emission.num_events, dtype)
    else:
        x = x.to(dtype)
    return x, z[:, 0], z


class ChunkDataset(torch.utils.data.Dataset):
    """Map-style dataset whose item i is chunk i as ``(x, y, z)`` tensors: ``x`` ``(rows, R_d, dim)``
    in ``dtype`` (one-hot leaves built from z for this chunk only), ``y`` ``(rows,)`` int64, ``z``
    ``(rows, total_regions)`` int64 (as :class:`~teachers.dataset.LadderDataset` gives per row).

    For ``DataLoader(ds, batch_size=None, num_workers=k)``: each worker reads (and verifies) whole
    chunks.  A one-hot chunk is ``rows * R_d * m`` floats: pick ``chunk_rows`` accordingly, or use
    :class:`StreamingLadderDataset`, which builds x per batch.

    :param source: a :class:`ChunkedLadderData` (of a tree or a graph ladder), dataset path(s) (v2 store(s)
        or v1 ``.npz``), or a :class:`LadderSample` or :class:`GraphSample` (cut into chunks of ``chunk_rows`` rows).
    :param partial: for path(s): accept an incomplete set of shards (see :func:`open_dataset`).
    """

    def __init__(self, source, dtype: torch.dtype = torch.float32, *, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                 partial: bool = False):
        self.source = as_chunks(source, chunk_rows, partial=partial)
        self.dtype = _check_dtype(dtype)

    def __len__(self) -> int:
        return self.source.num_chunks

    def __getitem__(self, i: int):
        if not _is_int(i):
            raise TypeError(f"i: expected an integer chunk index, got {type(i).__name__}")
        if not 0 <= i < len(self):
            raise IndexError(f"i: chunk {i} out of range for {len(self)} chunks")
        c = self.source.chunk(int(i))
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

    :param source: as for :class:`ChunkDataset`.
    :param partial: as for :class:`ChunkDataset`.
    """

    def __init__(self, source, batch_size: int, dtype: torch.dtype = torch.float32, shuffle: bool = False,
                 seed: int = 0, *, drop_last: bool = False, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                 partial: bool = False):
        if not _is_int(batch_size) or batch_size <= 0:
            raise ValueError(f"batch_size: expected a positive integer, got {batch_size!r}")
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle: expected a bool, got {type(shuffle).__name__}")
        if not isinstance(drop_last, bool):
            raise TypeError(f"drop_last: expected a bool, got {type(drop_last).__name__}")
        self.source = as_chunks(source, chunk_rows, partial=partial)
        self.batch_size = int(batch_size)
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

    def __iter__(self):
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
                x = None if x is None else torch.cat([carry_x, x])
            full = len(z) - len(z) % bs
            for a in range(0, full, bs):
                yield _triple(ladder, z[a: a + bs], None if x is None else x[a: a + bs], self.dtype)
            carry_z, carry_x = z[full:].clone(), None if x is None else x[full:].clone()
        if carry_z is not None and len(carry_z) and not self.drop_last:
            yield _triple(ladder, carry_z, carry_x, self.dtype)

