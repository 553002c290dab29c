"""Chunked, out-of-core ladder datasets: format ``smaso-ladder-dataset`` version 2, a zarr v3 store (this is
the canonical description of the format; :mod:`teachers.store_reader` reads it, :mod:`teachers.chunked` has
the PyTorch datasets over it).

A version-2 dataset is a zarr v3 *directory* store (conventionally named ``*.zarr``) that holds
any number of examples without ever holding them in memory: it is written chunk by chunk as the
sampler produces rows, and read chunk by chunk, each chunk verified by its SHA-256 when read.
It holds any :class:`~teachers.ladder.Ladder` and the rows of :func:`~teachers.sampling.sample_ladder`;
stores of 0.2 open unchanged (their spec forms: :mod:`teachers.formats`).

Layout (every data array is chunked along the examples only, ``chunk_rows`` rows per chunk, a
multiple of :data:`~teachers.sampling.BLOCK_SIZE`; the last chunk may be short, and zarr stores it
padded to a whole chunk, which costs nothing once compressed)::

    data.zarr/
      zarr.json          group; its attributes are the metadata (below)
      z/                 (n, total_regions) events of every region, level by level
                         (``level_offsets[l] + i``), event dtype
      y/                 (n,) labels, the same dtype (= z[:, 0])
      x/                 (n, R_d, dim) float32 inputs; only when the emission is not derivable
                         (one-hot leaves are rebuilt from z)
      spec/<path>        the ladder's arrays, one small uncompressed zarr array each, named as in
                         version 1 (``spec.tables.0`` is ``spec/tables.0``)

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
``spec``              :func:`~teachers.formats.stored_spec`, arrays replaced by ``{"__array__": "spec.<path>"}``
``spec_sha256``       per spec array: ``{"dtype", "shape", "sha256"}`` of its raw C-order bytes
``chunk_sha256``      ``{"z": [...], "y": [...], "x": [...]}``: SHA-256 of the raw C-order bytes of
                      the rows of every chunk of every data array, computed when it was written
``complete``          ``true`` once every chunk and checksum is in place (written last)
``metadata_sha256``   :func:`~teachers.formats.metadata_checksum` of every other attribute
====================  ===========================================================================

A store of a ladder other than a uniform tree also has ``graph_stream_version``
(:data:`~teachers.sampling.GRAPH_STREAM_VERSION`).  :func:`~teachers.store_reader.open_dataset` checks
all of it when it opens a store (or a set of shard stores of one stream), and every chunk when it is read.

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

Compression (``compress=``): ``False``/``"none"`` (raw), ``True`` (the default, ``"zstd:1"``),
``"zstd"`` (= ``"zstd:1"``), ``"zstd:<level>"`` (level -7..22), ``"zarr"`` (zarr's default codecs,
zstd level 0 = zstd's default 3).  Measured on the 341-region, 16-event ladder
(``Ladder.random(depth=4, branching=4, events=16, seed=0)``, 2^20 rows in chunks of 65536, 2 cores), zstd
level 1 takes 172 bytes per example (raw: 343, zarr's default: 179) and writes 1.0-1.9 M examples/s (raw:
0.7-1.0 M, zarr's default 0.4-0.6 M), faster than the sampler (0.35-0.44 M examples/s); it reads with
verification at ~3 M examples/s.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from .engine import get_engine
from .formats import (
    FORMAT,
    META_CHECKSUM,
    DatasetFormatError,
    _check_int,
    _event_dtype,
    _is_int,
    _sha256,
    _split_arrays,
    metadata_checksum,
    stored_spec,
)
from .ladder import Ladder
from .sampling import (
    BLOCK_SIZE,
    DEFAULT_CHUNK_ROWS,
    GRAPH_STREAM_VERSION,
    STREAM_VERSION,
    check_working_memory,
    parse_shard,
    sample_rows,
    sampling_plan,
)

if TYPE_CHECKING:
    from types import ModuleType

    from teachers.engine import DaskEngine, SerialEngine
    from teachers.sampling import SamplingPlan

__all__ = ["CHUNK_BYTES", "DEFAULT_CHUNK_ROWS", "DEFAULT_COMPRESSION", "VERSION", "check_store_target", "chunk_bounds",
           "create_partial", "default_chunk_rows", "finalize", "partial_path", "row_bytes", "sample_to_store",
           "write_chunk"]

VERSION = 2
#: What ``compress=True`` means (chosen by measurement, see the module docstring).
DEFAULT_COMPRESSION = "zstd:1"


def _zarr() -> ModuleType:
    """zarr, imported on first use (``import teachers`` stays cheap), its codecs run on one thread unless the
    user configured ``threading.max_workers`` (set only before zarr creates its pool): each thread of zarr's
    pool keeps a freed chunk-sized buffer (392 to 538 MiB over 66 chunks of 31 MiB, measured), and chunks
    are read and written one at a time here, so one thread is as fast and keeps memory at a few chunks."""
    import zarr
    from zarr.core import sync

    if getattr(sync, "_executor", None) is None and zarr.config.get("threading.max_workers", None) is None:
        zarr.config.set({"threading.max_workers": 1})
    return zarr


# ---------------------------------------------------------------------- small helpers
def _check_chunk_rows(chunk_rows: Any) -> int:
    if not _is_int(chunk_rows) or chunk_rows <= 0 or chunk_rows % BLOCK_SIZE:
        raise ValueError(f"chunk_rows: expected a positive multiple of BLOCK_SIZE={BLOCK_SIZE}, got {chunk_rows!r}")
    return int(chunk_rows)


def _check_teacher(ladder: Ladder) -> None:
    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")


#: Target size of one chunk's rows in memory, for :func:`default_chunk_rows`.
CHUNK_BYTES = 32 * 2**20


def row_bytes(ladder: Ladder) -> int:
    """Bytes of one example in memory: its events and label, and its inputs when they are stored
    (a :class:`~teachers.ladder.Ladder`)."""
    _check_teacher(ladder)
    x = 0 if ladder.emission.derivable else ladder.num_regions[-1] * ladder.emission.dim * 4  # float32
    return (ladder.total_regions + 1) * _event_dtype(ladder).itemsize + x


def default_chunk_rows(ladder: Ladder) -> int:
    """Rows per chunk of a new store of ``ladder``: ``DEFAULT_CHUNK_ROWS`` (65536) unless a chunk would
    then pass :data:`CHUNK_BYTES` (32 MiB) in memory, else the largest multiple of ``BLOCK_SIZE`` under
    it (at least one block).  The 341-region ladder with one-hot leaves keeps 65536 rows (22 MB);
    with Gaussian leaves (16 KiB of x per row) it gets 4096 rows, 67 MB, instead of a 1 GB chunk."""
    rows = CHUNK_BYTES // row_bytes(ladder) // BLOCK_SIZE * BLOCK_SIZE
    return int(min(DEFAULT_CHUNK_ROWS, max(BLOCK_SIZE, rows)))


def _bounds(c: int, chunk_rows: int, n: int) -> tuple[int, int]:
    """Rows ``(lo, hi)`` of chunk ``c`` of a store of ``n`` rows."""
    return c * chunk_rows, min(n, (c + 1) * chunk_rows)


def chunk_bounds(n: int, chunk_rows: int) -> list[tuple[int, int]]:
    """Rows ``(lo, hi)`` of every chunk of a store of ``n`` rows: chunk c is
    ``[c * chunk_rows, min(n, (c + 1) * chunk_rows))`` (the write contract's layout)."""
    n, chunk_rows = _check_int(n, "n"), _check_chunk_rows(chunk_rows)
    return [_bounds(c, chunk_rows, n) for c in range(-(-n // chunk_rows))]


def partial_path(path: str | os.PathLike) -> Path:
    """Where the store for ``path`` is written before it is renamed into place:
    ``<parent>/.<name>.partial`` (deterministic, so the next write finds a left-over one)."""
    path = Path(os.path.abspath(path))
    return path.parent / f".{path.name}.partial"


def _old_path(path: Path) -> Path:
    return path.parent / f".{path.name}.old"


_ZSTD = re.compile(r"zstd(?::(-?\d+))?")


def _compression(compress: bool | str) -> tuple[str, object]:
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


def _v2_attrs(path: Path) -> dict | None:
    attrs = _root_attrs(path)
    return attrs if attrs is not None and attrs.get("format") == FORMAT and attrs.get("version") == VERSION else None


def _to_numpy(t: torch.Tensor | np.ndarray, name: str) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().cpu().numpy()
    if isinstance(t, np.ndarray):
        return t
    raise TypeError(f"{name}: expected a torch.Tensor or a numpy array, got {type(t).__name__}")


def _data_arrays(ladder: Ladder, n: int, dtype: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """Shape and dtype of every data array of a store of ``n`` rows of ``ladder`` (events in ``dtype``)."""
    out = {"z": ((n, ladder.total_regions), dtype), "y": ((n,), dtype)}
    if not ladder.emission.derivable:
        out["x"] = ((n, ladder.num_regions[-1], ladder.emission.dim), "float32")
    return out


# ---------------------------------------------------------------------- writing
def check_store_target(path: str | os.PathLike, *, arg: str = "path", allow_empty: bool = True) -> None:
    """Refuse, before anything is written, a store target that writing would damage: a store replaces its whole
    directory, so ``path`` may not be the working directory or one above it (``.``, ``..``), a file, or an
    existing directory that is not a store of this format (nor an empty one, unless ``allow_empty``); its
    parent must exist.  ``arg`` names the argument in the messages (``--out`` at the command line).

    :raises TypeError: ``path`` is not a path.
    :raises ValueError: any of the above.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{arg}: expected a path, got {type(path).__name__}")
    shown, target = os.fspath(path), Path(os.path.abspath(path))
    here = Path.cwd().resolve()
    if target.resolve() == here or target.resolve() in here.parents:
        raise ValueError(f"{arg}: {shown!r} is the working directory or one above it, and a store replaces its "
                         "whole directory; give a new path such as data.zarr")
    if not target.parent.is_dir():
        raise ValueError(f"{arg}: directory {str(target.parent)!r} does not exist")
    if target.exists() and not target.is_dir():
        raise ValueError(f"{arg}: {shown!r} exists and is not a directory store, and a store replaces its whole "
                         "directory; give a new path such as data.zarr")
    if target.is_dir() and (any(target.iterdir()) or not allow_empty):
        try:
            attrs = _v2_attrs(target)
        except ValueError:  # a zarr.json that is no JSON object
            attrs = None
        if attrs is None:
            raise ValueError(f"{arg}: {shown!r} is an existing directory that is not a {FORMAT} version {VERSION} "
                             "store, and a store replaces its whole directory; give a new path such as data.zarr")


def _recover(path: Path) -> None:
    """Undo what a killed write of ``path`` left: a finished swap's old copy, or an unfinished
    one's (the old dataset is put back: it was complete)."""
    old = _old_path(path)
    if old.exists():
        if path.exists():
            shutil.rmtree(old)
        else:
            os.replace(old, path)


def create_partial(path: str | os.PathLike, ladder: Ladder, *, n: int, start: int = 0, total: int | None = None,
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
    if isinstance(path, (str, os.PathLike)) and Path(os.path.abspath(path)).parent.is_dir():
        _recover(Path(os.path.abspath(path)))  # a swap killed between its renames: the old store back first
    check_store_target(path)
    path = Path(os.path.abspath(path))
    partial = partial_path(path)
    if partial.is_dir() and not partial.is_symlink():  # left over by a killed write of the same path
        shutil.rmtree(partial)
    elif partial.exists() or partial.is_symlink():
        partial.unlink()

    zarr = _zarr()
    spec_arrays: dict[str, np.ndarray] = {}
    spec = _split_arrays(stored_spec(ladder), "", spec_arrays)
    x_stored = not ladder.emission.derivable
    dtype = _event_dtype(ladder)
    attrs = {"format": FORMAT, "version": VERSION, "n": n, "start": start, "total": total, "seed": seed,
             "shard": [i, k], "block_size": BLOCK_SIZE, "stream_version": STREAM_VERSION, "x_stored": x_stored,
             "chunk_rows": chunk_rows, "num_chunks": len(range(0, n, chunk_rows)), "event_dtype": dtype.name,
             "compression": label, "spec": spec, "complete": False}
    if not ladder.is_uniform():
        attrs["graph_stream_version"] = GRAPH_STREAM_VERSION
    config = {"write_empty_chunks": True}  # every chunk has its file: a missing one is an error, not zeros
    try:
        root = zarr.open_group(str(partial), mode="w-")
        for name, (shape, dt) in _data_arrays(ladder, n, dtype.name).items():
            root.create_array(name, shape=shape, chunks=(chunk_rows, *shape[1:]), dtype=dt, compressors=compressors,
                              fill_value=0, config=config)
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
        _discard(partial)
        raise
    return partial


def _partial_info(partial: Path) -> dict:
    attrs = _v2_attrs(partial)
    if attrs is None:
        raise ValueError(f"partial: {str(partial)!r} is not a partial {FORMAT} version {VERSION} store "
                         "(made by create_partial)")
    if attrs.get("complete") is True:
        raise ValueError(f"partial: {str(partial)!r} is already finalized")
    return attrs


def _open_for_write(array: Path) -> Any:
    # every chunk gets its file, even one equal to the fill value (zarr's default would skip it):
    # a missing chunk file is then an error, never silent zeros
    return _zarr().open_array(str(array), mode="r+").with_config({"write_empty_chunks": True})


def write_chunk(partial: str | os.PathLike, chunk_index: int, z: torch.Tensor | np.ndarray,
                x: torch.Tensor | np.ndarray | None = None) -> dict:
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
    lo, hi = _bounds(c, chunk_rows, n)
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
    # every array is opened and checked before any is written: opening one after the store was abandoned
    # would fail between two writes and leave the first behind
    arrays = {name: z_arr if name == "z" else _open_for_write(partial / name) for name in data}
    for name, arr in data.items():
        if arr.shape[1:] != arrays[name].shape[1:] or arr.shape[0] != hi - lo:
            raise ValueError(f"{name}: chunk {c} expects shape {(hi - lo, *arrays[name].shape[1:])}, got {arr.shape}")
    sums = {}
    try:
        for name, arr in data.items():
            arrays[name][lo:hi] = arr
            sums[name] = _sha256(arr)
    except BaseException:
        _settle_writes()  # (an interrupted wait: the chunk's files are still being written)
        _remove_if_abandoned(partial)
        raise
    if _remove_if_abandoned(partial):
        raise ValueError(f"partial: {str(partial)!r} was removed while chunk {c} was written (the write was "
                         "abandoned)")
    return {"chunk": c, "rows": [lo, hi], "sha256": sums}


def _remove_if_abandoned(partial: Path) -> bool:
    """Whether the write was abandoned (:func:`_discard`) while a chunk was being written; if so, remove what
    writing it made again (zarr creates the folders a chunk file needs), since a Dask task outlives a lost
    scheduler and cannot be cancelled, and nobody else will."""
    if (partial / "zarr.json").exists():
        return False
    shutil.rmtree(partial, ignore_errors=True)
    return True


def _settle_writes(timeout: float = 30.0) -> None:
    """Wait until zarr has no write of this process in flight.  zarr runs each write as a task of its IO thread's
    event loop, which the calling thread only waits for: where that wait is interrupted (SIGTERM raised as an
    exception by the CLI, Ctrl-C), the write goes on, and its chunk file, with the folders it needs, lands after the
    caller removed the partial store (``tests/test_store_interrupted.py``).  Called before such a removal; a no-op
    where zarr has no IO loop running."""
    import asyncio
    import concurrent.futures

    from zarr.core import sync

    loop = getattr(sync, "loop", [None])[0]  # (zarr's IO loop, private: absent in some other zarr 3.x, skip)
    if loop is None or not loop.is_running():
        return

    async def drain() -> None:
        me = asyncio.current_task()
        await asyncio.gather(*(t for t in asyncio.all_tasks() if t is not me), return_exceptions=True)

    done = asyncio.run_coroutine_threadsafe(drain(), loop)
    try:
        done.result(timeout)
    except concurrent.futures.TimeoutError:  # (a stuck disk: remove what is there, as before)
        done.cancel()


def _discard(partial: Path) -> None:
    """Remove an abandoned partial store: zarr's writes in flight settled first (:func:`_settle_writes`), then
    renamed, so that a worker still writing a chunk into it finds its root gone and removes what it wrote
    (:func:`write_chunk`), then deleted."""
    _settle_writes()
    trash = partial.with_name(f"{partial.name}.discard-{os.getpid()}")
    try:
        os.replace(partial, trash)
    except OSError:
        trash = partial
    # a worker's chunk file created in a folder after rmtree listed it keeps that folder: list it again
    for attempt in range(5):
        shutil.rmtree(trash, ignore_errors=True)
        if not os.path.lexists(trash):
            return
        time.sleep(0.05 * (attempt + 1))


def _chunk_file(store: Path, name: str, arr_meta: dict, c: int) -> Path:
    sep = arr_meta.get("chunk_key_encoding", {}).get("configuration", {}).get("separator", "/")
    return store / name / ("c" + sep + sep.join(str(v) for v in (c,) + (0,) * (len(arr_meta["shape"]) - 1)))


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
        if rows != list(_bounds(c, chunk_rows, n)) or sorted(sums) != sorted(names):
            raise ValueError(f"checksums: chunk {c} has rows {rows} and arrays {sorted(sums)}, expected rows "
                             f"{list(_bounds(c, chunk_rows, n))} and arrays {sorted(names)}")
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
    attrs = cast("dict", _root_attrs(partial))  # as a reader will parse it (written above: not None)
    attrs["complete"] = True
    root.attrs.update({"complete": True, META_CHECKSUM: metadata_checksum(attrs)})  # written last
    _swap_into_place(partial, path)
    return path


def _sample_chunk_task(c: int, partial: str, ladder: Ladder, seed: int, start: int, n: int, chunk_rows: int,
                       device: str, plan: SamplingPlan | None = None) -> dict:
    """One task of :func:`sample_to_store` (any process): sample chunk ``c`` (with ``plan``, a prebuilt
    :func:`~teachers.sampling.sampling_plan`, if given) and write it."""
    lo, hi = _bounds(c, chunk_rows, n)
    z, x = sample_rows(ladder, seed, start + lo, start + hi, plan=plan, device=device)
    return write_chunk(partial, c, z, x)


def sample_to_store(ladder: Ladder, num_examples: int, path: str | os.PathLike, seed: int = 0, *,
                    shard: str | tuple[int, int] | None = None, chunk_rows: int | None = None,
                    compress: bool | str = True, device: torch.device | str | None = None,
                    progress: bool | None = None, engine: SerialEngine | DaskEngine | None = None) -> Path:
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
    try:
        plan = sampling_plan(ladder, device) if engine is None else None  # built once, for every chunk
        sums = get_engine(engine).map(_sample_chunk_task, list(range(-(-(hi - lo) // chunk_rows))), str(partial),
                                      ladder, seed, lo, hi - lo, chunk_rows, str(device), plan,
                                      progress="sampling ladder to store" if progress else None)
        return finalize(partial, path, sums)
    except BaseException:
        _discard(partial)
        raise
