"""Dataset files: a ladder sample with its specification, in one versioned ``.npz``.

Format ``smaso-ladder-dataset`` version 1 (a plain, uncompressed or deflated NumPy ``.npz``;
no pickled objects; ``np.load(path, allow_pickle=False)`` reads it):

=================  =============================================================
member             content
=================  =============================================================
``meta``           0-d unicode array: JSON with ``format``, ``version``, ``n``
                   (rows in this file), ``start`` and ``total`` (its place in the
                   full stream: a shard holds rows ``[start, start + n)``),
                   ``seed``, ``shard`` ``[i, n]``, ``block_size``,
                   ``stream_version``, ``x_stored``, ``sha256`` of every data
                   member, ``spec``: the ladder's :meth:`Ladder.to_dict` with
                   every array replaced by ``{"__array__": member name}``,
                   ``spec_sha256`` (per spec member: ``dtype``, ``shape``,
                   ``sha256``) and ``metadata_sha256`` (``{"all", "fields"}``:
                   SHA-256 of the canonical JSON of every other field, and of
                   each one, so that an edited field is named)
``z``              ``(n, total_regions)`` events of every region, breadth-first
                   (uint8 when every region has <= 256 events)
``y``              ``(n,)`` int64 labels (= ``z[:, 0]``)
``x``              ``(n, R_d, dim)`` float32 inputs; absent for one-hot leaves,
                   whose x is exactly ``one_hot(z[:, leaves])`` (built on load)
``spec.<path>``    the ladder's arrays (tables, lookup tables, emission means)
=================  =============================================================

A file alone reproduces its statistics (:func:`load_dataset` rebuilds the ladder).  Writes
are atomic (temporary file ``.<name>.tmp-<pid>`` + rename; see :func:`teachers.spec_io.atomic_write`).
Loading checks the format and the version, the metadata checksum (naming an edited field),
every spec array's checksum, every data member's checksum, then every field on its own: types
and ranges, ``start + n <= total``, z in the ladder's event dtype with every region's events in
``[0, m)``, y equal to z's root column, x float32 and finite; it raises
:class:`DatasetFormatError` (a ``ValueError``, naming the file and the field) on a corrupted,
truncated, edited or foreign file, never a ``KeyError`` or a NumPy error.  Files written before
the metadata and spec checksums (no ``metadata_sha256``) still load, validated field by field,
with an :class:`UnverifiedDatasetWarning`.  A set of shards that is not the whole stream is
refused unless ``partial=True``.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from .emission import one_hot
from .formats import (
    FORMAT,
    META_CHECKSUM,
    DatasetFormatError,
    _events_out_of_range,
    _field_int,
    _is_int,
    _sha256,
    _split_arrays,
    check_contiguous,
    check_coverage,
    check_metadata_checksum,
    check_stream_fields,
    ladder_from_spec,
    metadata_checksum,
    stored_spec,
)
from .ladder import Ladder
from .sampling import LadderSample
from .spec_io import atomic_write
from .store_reader import open_dataset


def _event_dtype(ladder: Ladder) -> np.dtype:
    return np.dtype(str(ladder.event_dtype()).removeprefix("torch."))

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
            "spec_sha256": {k: {"dtype": np.asarray(v).dtype.str, "shape": list(np.shape(v)),
                                "sha256": _sha256(np.asarray(v))} for k, v in arrays.items()}}
    meta = json.loads(json.dumps(meta))  # as a reader will parse it (tuples become lists)
    meta[META_CHECKSUM] = metadata_checksum(meta)
    members = {"meta": np.array(json.dumps(meta)), **data, **arrays}
    saver = np.savez_compressed if compress else np.savez
    return atomic_write(path, lambda f: saver(f, **members))


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
                check_metadata_checksum(meta, where, required=False)
                arrays = {k: npz[k] for k in npz.files if k != "meta"}
    except DatasetFormatError:
        raise
    except Exception as e:  # any failure to parse the zip, a member or the JSON: a corrupted file
        raise DatasetFormatError(f"{where} is corrupted or truncated ({type(e).__name__}: {e})") from None
    return meta, arrays


def _validate_meta(meta: dict, where: str) -> None:
    """Every field a ladder dataset's meta needs, of the right type and range."""
    check_stream_fields(meta, where)
    for key in ("x_stored", "sha256", "spec"):
        if key not in meta:
            raise DatasetFormatError(f"{where}: metadata lacks field {key!r}")
    if not isinstance(meta["x_stored"], bool):
        raise DatasetFormatError(f"{where}: metadata field 'x_stored' is {meta['x_stored']!r}, expected true/false")
    sums = meta["sha256"]
    keys = ("z", "y") + (("x",) if meta["x_stored"] else ())
    if not isinstance(sums, dict) or any(not isinstance(sums.get(k), str) for k in keys):
        raise DatasetFormatError(f"{where}: metadata field 'sha256' must give the SHA-256 of {list(keys)}")
    if not isinstance(meta["spec"], dict):
        raise DatasetFormatError(f"{where}: metadata field 'spec' is not an object")
    if "shard" in meta:
        sh = meta["shard"]
        if not (isinstance(sh, list) and len(sh) == 2 and all(_is_int(v) for v in sh) and 0 <= sh[0] < sh[1]):
            raise DatasetFormatError(f"{where}: metadata field 'shard' is {sh!r}, expected [i, k] with 0 <= i < k")
    _field_int(meta, "block_size", where, minimum=1, optional=True)
    _field_int(meta, "stream_version", where, optional=True)
    spec_sums = meta.get("spec_sha256")
    if spec_sums is not None and (not isinstance(spec_sums, dict) or any(
            not isinstance(v, dict) or not isinstance(v.get("sha256"), str) for v in spec_sums.values())):
        raise DatasetFormatError(f"{where}: metadata field 'spec_sha256' is malformed")


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


def _check(path: Path, meta: dict, arrays: dict[str, np.ndarray], ladder: Ladder):
    where = f"dataset: {str(path)!r}"
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
    if META_CHECKSUM not in meta:
        warnings.warn(f"{where} was written before dataset files had metadata checksums: its metadata and "
                      "specification are validated but not checksummed; save it again to add them",
                      UnverifiedDatasetWarning, stacklevel=3)
    _validate_meta(meta, where)
    _check_spec_arrays(meta, arrays, where)
    ladder = ladder_from_spec(meta["spec"], arrays, where)
    _check(p, meta, arrays, ladder)
    return meta, arrays, ladder


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
    if not isinstance(partial, bool):
        raise TypeError(f"partial: expected a bool, got {type(partial).__name__}")
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = list(paths)
    if not paths:
        raise ValueError("paths: expected at least one dataset file")
    is_store = [Path(p).is_dir() or Path(p).suffix == ".zarr" for p in paths]
    if any(is_store):
        if not all(is_store):
            raise DatasetFormatError("dataset: cannot join version-1 .npz files and version-2 stores "
                                     f"({[str(p) for p in paths]})")
        if device is not None:
            raise ValueError("device: a version-2 store opens lazily; move its chunks with LadderSample.to")
        return open_dataset(paths, partial=partial)
    parts = []
    for p in paths:
        p = Path(p)
        meta, arrays, ladder = _load_part(p)
        parts.append((meta, arrays, ladder, p))
    parts.sort(key=lambda t: t[0]["start"])
    meta0, _, ladder0, p0 = parts[0]
    if len(parts) > 1:
        spec0 = json.dumps(meta0["spec"], sort_keys=True)
        for meta, arrays, _, p in parts:
            same = (meta["seed"], meta["total"], json.dumps(meta["spec"], sort_keys=True)) == (
                meta0["seed"], meta0["total"], spec0)
            a0 = parts[0][1]
            spec_arrays_equal = sorted(k for k in arrays if k.startswith("spec.")) == sorted(
                k for k in a0 if k.startswith("spec.")) and all(
                arrays[k].dtype == a0[k].dtype and np.array_equal(arrays[k], a0[k])
                for k in arrays if k.startswith("spec."))
            if not (same and spec_arrays_equal and meta["x_stored"] == meta0["x_stored"]):
                raise DatasetFormatError(f"dataset: {str(p)!r} is not a shard of the same stream as {str(p0)!r} "
                                         "(ladder, seed or total differ)")
        check_contiguous([(meta, p) for meta, _, _, p in parts])
    n = sum(m["n"] for m, *_ in parts)
    check_coverage([p for *_, p in parts], meta0["start"], n, meta0["total"], partial)
    z = torch.as_tensor(np.concatenate([a["z"] for _, a, _, _ in parts]))
    x = None
    if meta0["x_stored"]:
        x = torch.as_tensor(np.concatenate([a["x"] for _, a, _, _ in parts]))
    if device is not None:
        z = z.to(device)
        x = x.to(device) if x is not None else None
    extra = {k: meta0[k] for k in ("shard", "block_size", "stream_version") if k in meta0}
    extra["files"] = [str(p) for *_, p in parts]
    return LadderSample(ladder0, z, x, seed=meta0["seed"], start=meta0["start"], total=meta0["total"], meta=extra)


class LadderDataset(torch.utils.data.Dataset):
    """A :class:`torch.utils.data.Dataset` over a ladder sample: item i is ``(x_i, y_i, z_i)``.

    ``x_i`` is ``(R_d, dim)`` float32 (one-hot leaves are built on the fly, so a million
    one-hot examples cost only their uint8 events in memory), ``y_i`` an int64 scalar and
    ``z_i`` the ``(total_regions,)`` int64 events of every region.

    :param source: a :class:`LadderSample` or dataset file path(s).
    :param partial: as for :func:`load_dataset`.
    """

    def __init__(self, source: LadderSample | str | os.PathLike | Sequence[str | os.PathLike], *,
                 partial: bool = False):
        self.sample = source if isinstance(source, LadderSample) else load_dataset(source, partial=partial)
        lad = self.sample.ladder
        self._leaf_offset = lad.level_offsets[-2]
        self._m = lad.events[-1]

    def __len__(self) -> int:
        return len(self.sample)

    def __getitem__(self, i):
        s = self.sample
        z = s.z[i].long()
        x = s.x[i].float() if s.x is not None else one_hot(z[..., self._leaf_offset:], self._m, torch.float32)
        return x, z[..., 0], z
