"""Dataset files: a ladder sample with its specification, in one versioned ``.npz``.

Format ``smaso-ladder-dataset`` version 1 (a plain, uncompressed or deflated NumPy ``.npz``;
no pickled objects; ``np.load(path, allow_pickle=False)`` reads it):

=================  =============================================================
member             content
=================  =============================================================
``meta``           0-d unicode array: JSON with the fields ``format`` to
                   ``x_stored``, ``spec``, ``spec_sha256`` (dtypes as
                   ``dtype.str``) and ``metadata_sha256`` of a version-2 store's
                   attributes (:mod:`teachers.store`), and ``sha256``: the
                   SHA-256 of every data member
``z``              ``(n, total_regions)`` events of every region, level by level
                   (uint8 when every region has <= 256 events)
``y``              ``(n,)`` int64 labels (= ``z[:, 0]``)
``x``              ``(n, R_d, dim)`` float32 inputs; absent for one-hot leaves,
                   whose x is exactly ``one_hot(z[:, leaves])`` (built on load)
``spec.<path>``    the ladder's arrays (tables, lookup tables, emission means)
=================  =============================================================

Writes are atomic (:func:`teachers.spec_io.atomic_write`).  Loading checks every checksum and every field
(types and ranges, events in each region's range, y = z's root column, x finite) and raises
:class:`DatasetFormatError` (naming the file and the field) on a corrupted, truncated, edited or foreign
file, never a ``KeyError`` or a NumPy error.  Files written before the metadata and spec checksums still
load, validated field by field, with an :class:`UnverifiedDatasetWarning`.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from .emission import one_hot
from .formats import (
    FORMAT,
    META_CHECKSUM,
    DatasetFormatError,
    _event_dtype,
    _events_out_of_range,
    _sha256,
    _split_arrays,
    check_ladder_fields,
    check_load_args,
    check_metadata_checksum,
    check_npz_head,
    check_shards,
    metadata_checksum,
    stored_spec,
)
from .formats import teacher_from_spec as ladder_from_spec
from .ladder import Ladder
from .sampling import LadderSample
from .spec_io import atomic_write
from .store_reader import open_dataset

if TYPE_CHECKING:
    from .store_reader import ChunkedLadderData

__all__ = ["FORMAT", "VERSION", "DatasetFormatError", "LadderDataset", "UnverifiedDatasetWarning", "load_dataset",
           "save_dataset"]

VERSION = 1


class UnverifiedDatasetWarning(UserWarning):
    """A dataset file written before metadata checksums: its metadata and spec are validated
    field by field, but an edit that keeps them consistent cannot be detected."""


def save_dataset(sample: LadderSample, path: str | os.PathLike, *, compress: bool = False) -> Path:
    """Write ``sample`` (and its ladder) to ``path`` atomically.

    :param compress: deflate the members (smaller, slower); default stores them raw.
    :returns: the path written.
    :raises ValueError: z of the wrong shape or with an event outside its region's range.
    """
    if not isinstance(sample, LadderSample):
        raise TypeError(f"sample: expected a LadderSample, got {type(sample).__name__}")
    if sample.x is None and not sample.ladder.emission.derivable:
        raise ValueError("sample: x is missing and the emission is not derivable from the events")
    lad = sample.ladder
    z = sample.z.detach().cpu().numpy()
    if z.ndim != 2 or z.shape[1] != lad.total_regions or z.dtype.kind not in "iu":
        raise ValueError(f"sample: z is {z.dtype} {z.shape}, expected integer events (n, {lad.total_regions})")
    bad = _events_out_of_range(z, lad)
    if bad:
        raise ValueError(f"sample: z: {bad}")
    z = z.astype(_event_dtype(lad), copy=False)
    arrays: dict[str, np.ndarray] = {}
    spec = _split_arrays(stored_spec(lad), "", arrays)
    data = {"z": z, "y": z[:, 0].astype(np.int64)}
    if sample.x is not None:
        data["x"] = sample.x.detach().cpu().to(torch.float32).numpy()
    meta = {"format": FORMAT, "version": VERSION, "n": len(sample), "start": sample.start,
            "total": sample.total if sample.total is not None else len(sample), "seed": sample.seed,
            "x_stored": sample.x is not None, "sha256": {k: _sha256(v) for k, v in data.items()},
            "spec": spec, **{k: v for k, v in sample.meta.items() if k in ("shard", "block_size", "stream_version")},
            "spec_sha256": {k: {"dtype": v.dtype.str, "shape": list(v.shape), "sha256": _sha256(v)}
                            for k, v in arrays.items()}}
    return _write(path, meta, {**data, **arrays}, compress)


def _write(path: str | os.PathLike, meta: dict, members: dict[str, np.ndarray], compress: bool) -> Path:
    """Write a versioned npz atomically: ``meta`` with its checksum (of it as a reader will parse it: tuples
    become lists) as member ``meta``, and ``members`` (shared by every dataset kind)."""
    meta = json.loads(json.dumps(meta))
    meta[META_CHECKSUM] = metadata_checksum(meta)
    members = {"meta": np.array(json.dumps(meta)), **members}
    saver = np.savez_compressed if compress else np.savez
    return atomic_write(path, lambda f: saver(f, **members))  # type: ignore[arg-type]  # numpy: **kwds vs allow_pickle


def _read(path: Path, fmt: str = FORMAT, version: int = VERSION) -> tuple[dict, dict[str, np.ndarray]]:
    """Meta and members of a versioned npz of format ``fmt`` (shared by every dataset kind).

    Every failure to read it (a bad zip, a bad member, pickled objects, bad JSON) is a
    :class:`DatasetFormatError`; the metadata checksum is checked when the file has one.
    """
    if not path.is_file():
        raise DatasetFormatError(f"dataset: no such file {str(path)!r}")
    where = f"dataset: {str(path)!r}"
    try:
        # (an open file: np.load leaks the one it opens when the zip fails to parse)
        with open(path, "rb") as fh:
            check_npz_head(fh, where)
            npz = np.load(fh, allow_pickle=False)
            if not isinstance(npz, np.lib.npyio.NpzFile):
                raise DatasetFormatError(f"{where} is a bare .npy array, not a {fmt} file")
            with npz:
                if "meta" not in npz.files:
                    raise DatasetFormatError(f"{where} has no 'meta' member: not a {fmt} file")
                raw = npz["meta"]
                if raw.shape != () or raw.dtype.kind != "U":
                    raise DatasetFormatError(f"{where}: member 'meta' is {raw.dtype} {raw.shape}, "
                                             "expected a 0-d string")
                meta = json.loads(str(raw[()]))
                if not isinstance(meta, dict) or meta.get("format") != fmt:
                    raise DatasetFormatError(f"{where} is not a {fmt} file "
                                             f"(format {meta.get('format') if isinstance(meta, dict) else None!r})")
                if meta.get("version") != version:
                    raise DatasetFormatError(f"{where} has format version {meta.get('version')!r}; "
                                             f"this library reads version {version}")
                checked = check_metadata_checksum(meta, where, required=False)
                arrays = {k: npz[k] for k in npz.files if k != "meta"}
    except DatasetFormatError:
        raise
    except Exception as e:  # any failure to parse the zip, a member or the JSON: a corrupted file
        raise DatasetFormatError(f"{where} is corrupted or truncated ({type(e).__name__}: {e})") from None
    if not checked:
        warnings.warn(f"{where} was written before dataset files had metadata checksums: its metadata is "
                      "validated but not checksummed; save it again to add them", UnverifiedDatasetWarning,
                      stacklevel=4)
    return meta, arrays


def _validate_meta(meta: dict, where: str) -> None:
    """Every field a ladder dataset's meta needs, of the right type and range."""
    check_ladder_fields(meta, where)
    if "sha256" not in meta:
        raise DatasetFormatError(f"{where}: metadata lacks field 'sha256'")
    sums = meta["sha256"]
    keys = ("z", "y") + (("x",) if meta["x_stored"] else ())
    if not isinstance(sums, dict) or any(not isinstance(sums.get(k), str) for k in keys):
        raise DatasetFormatError(f"{where}: metadata field 'sha256' must give the SHA-256 of {list(keys)}")


def _check_spec_arrays(meta: dict, arrays: dict[str, np.ndarray], where: str) -> None:
    spec_sums = meta.get("spec_sha256")
    if spec_sums is None:  # a file written before spec checksums
        return
    names = sorted(k for k in arrays if k.startswith("spec."))
    if names != sorted(spec_sums):
        extra, lost = sorted(set(names) - set(spec_sums)), sorted(set(spec_sums) - set(names))
        raise DatasetFormatError(f"{where}: spec arrays {extra or lost} are {'unlisted' if extra else 'missing'} "
                                 "(metadata field 'spec_sha256')")
    for name in names:
        a, want = arrays[name], spec_sums[name]
        if (a.dtype.str, list(a.shape), _sha256(a)) != (want.get("dtype"), want.get("shape"), want.get("sha256")):
            raise DatasetFormatError(f"{where}: spec array {name!r} fails its SHA-256 check (corrupted or edited)")


def _check(where: str, meta: dict, arrays: dict[str, np.ndarray], ladder: Ladder) -> None:
    for key in ("z", "y") + (("x",) if meta["x_stored"] else ()):
        if key not in arrays:
            raise DatasetFormatError(f"{where} lacks member {key!r}")
        if meta["sha256"][key] != _sha256(arrays[key]):
            raise DatasetFormatError(f"{where}: member {key!r} fails its SHA-256 check (corrupted)")
    if not meta["x_stored"] and not ladder.emission.derivable:
        raise DatasetFormatError(f"{where}: metadata field 'x_stored' is false, but the ladder's emission is not "
                                 "derivable from the events (x is required)")
    n = meta["n"]
    z, y = arrays["z"], arrays["y"]
    want = _event_dtype(ladder)
    if z.dtype != want:
        raise DatasetFormatError(f"{where}: z is {z.dtype}, expected the ladder's event dtype {want}")
    if z.shape != (n, ladder.total_regions) or y.shape != (n,):
        raise DatasetFormatError(f"{where}: z {z.shape} / y {y.shape} do not match n={n} and the "
                                 f"ladder's {ladder.total_regions} regions")
    bad = _events_out_of_range(z, ladder)
    if bad:
        raise DatasetFormatError(f"{where}: z: {bad}")
    if y.dtype != np.int64 or not np.array_equal(y, z[:, 0]):
        raise DatasetFormatError(f"{where}: y ({y.dtype}) is not z's root column z[:, 0] as int64")
    if meta["x_stored"]:
        x = arrays["x"]
        if x.shape != (n, ladder.num_regions[-1], ladder.emission.dim) or x.dtype != np.float32:
            raise DatasetFormatError(f"{where}: x is {x.dtype} {x.shape}, expected float32 "
                                     f"({n}, {ladder.num_regions[-1]}, {ladder.emission.dim})")
        if not np.isfinite(x).all():
            raise DatasetFormatError(f"{where}: x holds non-finite values")


def _load_part(p: Path) -> tuple[dict, dict[str, np.ndarray], Ladder]:
    where = f"dataset: {str(p)!r}"
    meta, arrays = _read(p)
    _validate_meta(meta, where)
    _check_spec_arrays(meta, arrays, where)
    ladder = ladder_from_spec(meta["spec"], arrays, where)
    _check(where, meta, arrays, ladder)
    return meta, arrays, ladder


def _stream(meta: dict, arrays: dict[str, np.ndarray]) -> dict:
    """What the shards of one stream share: seed, total, x_stored and the ladder (its spec and spec arrays)."""
    spec = sorted((k, a.dtype.str, a.shape, _sha256(a)) for k, a in arrays.items() if k.startswith("spec."))
    return {"seed": meta["seed"], "total": meta["total"], "x_stored": meta["x_stored"],
            "ladder": (json.dumps(meta["spec"], sort_keys=True), spec)}


def load_dataset(paths: str | os.PathLike | Sequence[str | os.PathLike], *,
                 device: torch.device | str | None = None, partial: bool = False) -> LadderSample | ChunkedLadderData:
    """Load one dataset file, or several shards of one stream (concatenated in stream order).

    Version-1 ``.npz`` files are read into memory: the result is a :class:`LadderSample`.
    Version-2 stores (zarr directories, ``*.zarr``; see :mod:`teachers.chunked`) open lazily
    with :func:`teachers.chunked.open_dataset`: the result is a
    :class:`~teachers.chunked.ChunkedLadderData` (read it by chunks; ``device`` must be ``None``).

    :param partial: accept files that do not hold the whole stream ``[0, total)`` (a lone
        shard, or a set missing its first or last shards); by default they are refused, naming
        the missing rows.  Gaps between the given shards are always refused.
    :raises DatasetFormatError: corrupted/truncated/foreign/edited file, wrong version, metadata
        that fails its checksum or its validation (naming the field), shards that do not belong
        together (other ladder, seed or total, gaps or overlaps), or an incomplete set of shards.
    """
    paths = check_load_args(paths, partial, "dataset file")
    is_store = [Path(p).is_dir() or Path(p).suffix == ".zarr" for p in paths]
    if any(is_store):
        if not all(is_store):
            raise DatasetFormatError("dataset: cannot join version-1 .npz files and version-2 stores "
                                     f"({[str(p) for p in paths]})")
        if device is not None:
            raise ValueError("device: a version-2 store opens lazily; move its chunks with LadderSample.to")
        return open_dataset(paths, partial=partial)
    parts = [(*_load_part(Path(p)), Path(p)) for p in paths]
    extra = _join_shards(parts, _stream, partial)
    meta0, _, ladder0, _ = parts[0]
    z = torch.as_tensor(np.concatenate([a["z"] for _, a, _, _ in parts]))
    x = torch.as_tensor(np.concatenate([a["x"] for _, a, _, _ in parts])) if meta0["x_stored"] else None
    sample = LadderSample(ladder0, z, x, seed=meta0["seed"], start=meta0["start"], total=meta0["total"], meta=extra)
    return sample if device is None else sample.to(device)


def _join_shards(parts: list[tuple], stream: Callable[[dict, dict], dict], partial: bool) -> dict:
    """Sort ``parts`` ``(meta, arrays, ..., path)`` by stream row and check them (:func:`check_shards`, with
    ``stream(meta, arrays)``); shared by every dataset kind.  :returns: the loaded sample's ``meta``."""
    parts.sort(key=lambda t: t[0]["start"])
    check_shards([(t[0], t[-1], stream(t[0], t[1])) for t in parts], partial)
    meta0 = parts[0][0]
    extra = {k: meta0[k] for k in ("shard", "block_size", "stream_version") if k in meta0}
    return {**extra, "files": [str(t[-1]) for t in parts]}


def _triple(ladder: Ladder, z: torch.Tensor, x: torch.Tensor | None, dtype: torch.dtype) -> tuple[torch.Tensor,
            torch.Tensor, torch.Tensor]:
    """``(x, y, z)`` of rows ``z`` (``(..., total_regions)``; x in ``dtype``, one-hot leaves built from z when
    ``x`` is None; y and z int64)."""
    z = z.long()
    x = one_hot(z[..., ladder.level_offsets[-2]:], ladder.emission.num_events, dtype) if x is None else x.to(dtype)
    return x, z[..., 0], z


class LadderDataset(torch.utils.data.Dataset):
    """A :class:`torch.utils.data.Dataset` over a ladder sample: item i is ``(x_i, y_i, z_i)``.

    ``x_i`` is ``(R_d, dim)`` float32 (one-hot leaves are built on the fly, so a million
    one-hot examples cost only their uint8 events in memory), ``y_i`` an int64 scalar and
    ``z_i`` the ``(total_regions,)`` int64 events of every region.

    :param source: a :class:`LadderSample` or dataset file path(s).
    :param partial: as for :func:`load_dataset`.
    """

    def __init__(self, source: LadderSample | str | os.PathLike | Sequence[str | os.PathLike], *,
                 partial: bool = False) -> None:
        sample = source if isinstance(source, LadderSample) else load_dataset(source, partial=partial)
        if not isinstance(sample, LadderSample):  # a chunked store: read by chunks, never held here whole
            raise ValueError(f"source: {str(source)!r} is a chunked store and LadderDataset holds a sample in memory; "
                             "use teachers.chunked.StreamingLadderDataset (or ChunkDataset) for a store")
        self.sample = sample

    def __len__(self) -> int:
        return len(self.sample)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s = self.sample
        return _triple(s.ladder, s.z[i], None if s.x is None else s.x[i], torch.float32)
