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

import hashlib
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from .emission import one_hot
from .ladder import Ladder
from .sampling import LadderSample
from .spec_io import atomic_write

if TYPE_CHECKING:
    from .chunked import ChunkedLadderData

__all__ = ["FORMAT", "VERSION", "DatasetFormatError", "LadderDataset", "UnverifiedDatasetWarning", "load_dataset",
           "save_dataset"]

FORMAT = "smaso-ladder-dataset"
VERSION = 1


class DatasetFormatError(ValueError):
    """A dataset file is corrupted, truncated, of another format, or of another version."""


def _split_arrays(obj, prefix: str, arrays: dict[str, np.ndarray]):
    if isinstance(obj, torch.Tensor | np.ndarray):
        name = f"spec.{prefix}"
        arrays[name] = obj.detach().cpu().numpy() if isinstance(obj, torch.Tensor) else obj
        return {"__array__": name}
    if isinstance(obj, dict):
        return {k: _split_arrays(v, f"{prefix}.{k}" if prefix else k, arrays) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_split_arrays(v, f"{prefix}.{i}", arrays) for i, v in enumerate(obj)]
    return obj


def _join_arrays(obj, arrays, where: str = "dataset"):
    if isinstance(obj, dict):
        if set(obj) == {"__array__"}:
            name = obj["__array__"]
            if not isinstance(name, str) or name not in arrays:
                raise DatasetFormatError(f"{where}: member {name!r} named by the spec (metadata field 'spec') "
                                         "is missing")
            return torch.as_tensor(arrays[name])
        return {k: _join_arrays(v, arrays, where) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_join_arrays(v, arrays, where) for v in obj]
    return obj


def _sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).data).hexdigest()


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


#: The metadata field that holds the checksum of every other metadata field.
META_CHECKSUM = "metadata_sha256"


def metadata_checksum(meta: dict) -> dict:
    """``{"all": sha256, "fields": {name: sha256}}`` of the canonical JSON (sorted keys, no spaces)
    of every field of ``meta`` but :data:`META_CHECKSUM`, of each field, and of each key of a
    dict-valued field (``"spec.emission"``), so that an edit is named."""
    body = {k: v for k, v in meta.items() if k != META_CHECKSUM}
    fields = {}
    for k, v in body.items():
        fields[k] = hashlib.sha256(_canonical(v)).hexdigest()
        if isinstance(v, dict):
            for k2, v2 in v.items():
                fields[f"{k}.{k2}"] = hashlib.sha256(_canonical(v2)).hexdigest()
    return {"all": hashlib.sha256(_canonical(body)).hexdigest(), "fields": fields}


def check_metadata_checksum(meta: dict, where: str, *, required: bool = True) -> bool:
    """Check ``meta`` against its :data:`META_CHECKSUM` field, naming the edited field(s).

    :returns: whether the field was there (``required=False`` lets it be absent).
    :raises DatasetFormatError: a changed field, or a missing/malformed checksum when required.
    """
    stored = meta.get(META_CHECKSUM)
    if stored is None and not required:
        return False
    if not isinstance(stored, dict) or not isinstance(stored.get("fields"), dict):
        raise DatasetFormatError(f"{where}: metadata field {META_CHECKSUM!r} is missing or malformed")
    try:
        now = metadata_checksum(meta)
    except (TypeError, ValueError) as e:
        raise DatasetFormatError(f"{where}: metadata is not canonical JSON ({e})") from None
    if now["all"] == stored.get("all"):
        return True
    old = stored["fields"]
    changed = sorted(k for k in set(now["fields"]) | set(old) if now["fields"].get(k) != old.get(k))
    # name the most specific fields: "spec.emission" rather than also "spec"
    specific = [k for k in changed if not any(o.startswith(k + ".") for o in changed)]
    what = (f"field(s) {', '.join(repr(k) for k in specific)} changed" if specific
            else f"field {META_CHECKSUM!r} edited")
    raise DatasetFormatError(f"{where}: metadata {what} since the file was written (metadata checksum fails)")


def _is_int(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, np.integer))


def _field_int(meta: dict, key: str, where: str, *, minimum: int = 0, optional: bool = False,
               none_ok: bool = False) -> int | None:
    if key not in meta:
        if optional:
            return None
        raise DatasetFormatError(f"{where}: metadata lacks field {key!r}")
    v = meta[key]
    if v is None and none_ok:
        return None
    if not _is_int(v) or v < minimum:
        raise DatasetFormatError(f"{where}: metadata field {key!r} is {v!r}, expected an integer >= {minimum}"
                                 + (" or null" if none_ok else ""))
    return int(v)


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
    spec = _split_arrays(lad.to_dict(), "", arrays)
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


def check_contiguous(shards: list[tuple[dict, Path]]) -> None:
    """Shards sorted by ``start`` must tile their rows without gaps or overlaps."""
    pos = shards[0][0]["start"]
    for meta, p in shards:
        if meta["start"] != pos:
            raise DatasetFormatError(f"dataset: shards leave a gap or overlap at example {pos} "
                                     f"({str(p)!r} starts at {meta['start']})")
        pos += meta["n"]


def missing_rows(start: int, n: int, total: int) -> list[tuple[int, int]]:
    """Stream rows ``(lo, hi)`` of ``[0, total)`` outside the contiguous rows ``[start, start + n)``."""
    out = []
    if start > 0:
        out.append((0, start))
    if start + n < total:
        out.append((start + n, total))
    return out


def check_coverage(files: Sequence, start: int, n: int, total: int, partial: bool) -> None:
    """Refuse (unless ``partial``) files whose rows ``[start, start + n)`` are not the whole stream."""
    if not isinstance(partial, bool):
        raise TypeError(f"partial: expected a bool, got {type(partial).__name__}")
    missing = missing_rows(start, n, total)
    if missing and not partial:
        names = ", ".join(repr(str(p)) for p in files)
        verb = "holds" if len(files) == 1 else "hold"
        raise DatasetFormatError(
            f"dataset: {names} {verb} stream rows [{start}, {start + n}) of {total}: rows "
            f"{', '.join(f'[{a}, {b})' for a, b in missing)} are missing (shard(s) not given); pass partial=True "
            "(at the command line: --partial) to load an incomplete set of shards")


def _event_dtype(ladder: Ladder) -> np.dtype:
    return np.dtype(str(ladder.event_dtype()).removeprefix("torch."))


def _events_out_of_range(z: np.ndarray, ladder, limit: np.ndarray | None = None) -> str | None:
    """A description of the first event of ``z`` ``(rows, total_regions)`` outside its region's range
    ``[0, limit[r])``, or ``None``.  ``limit``: every region's event count (default: a tree ``Ladder``'s
    per-level counts; a graph ladder passes its own, region by region)."""
    if len(z) == 0:
        return None
    if limit is None:
        limit = np.repeat(np.asarray(ladder.events, dtype=np.int64), ladder.num_regions)
    lo, hi = z.min(axis=0).astype(np.int64), z.max(axis=0).astype(np.int64)
    bad = np.flatnonzero((lo < 0) | (hi >= limit))
    if not len(bad):
        return None
    r = int(bad[0])
    level = int(np.searchsorted(ladder.level_offsets, r, side="right") - 1)
    v = int(lo[r]) if lo[r] < 0 else int(hi[r])
    row = int(np.flatnonzero(z[:, r] == v)[0])
    return (f"region {r} (level {level}) has event {v} in row {row}, outside its range [0, {int(limit[r])})")


def ladder_from_spec(spec: dict, arrays: dict, where: str) -> Ladder:
    """The ladder of a dataset's stored spec (its tables from ``arrays``); any failure a
    :class:`DatasetFormatError` naming the file (shared by the .npz and the chunked formats)."""
    try:
        return Ladder.from_dict(_join_arrays(spec, arrays, where))
    except DatasetFormatError:
        raise
    except Exception as e:  # LadderSpecError, or anything a malformed spec makes the constructor raise
        raise DatasetFormatError(f"{where} holds an invalid ladder spec (metadata field 'spec'): "
                                 f"{type(e).__name__}: {e}") from None


def check_stream_fields(meta: dict, where: str) -> tuple[int, int, int]:
    """``(n, start, total)`` of a dataset's metadata, checked (integers, ``start + n <= total``, and a
    ``seed`` that is an integer >= 0 or null); shared by the ladder and tent formats."""
    n = _field_int(meta, "n", where)
    start = _field_int(meta, "start", where)
    total = _field_int(meta, "total", where)
    if start + n > total:
        raise DatasetFormatError(f"{where}: metadata field 'total' is {total}, less than start + n = "
                                 f"{start} + {n}: the rows do not fit in the stream")
    _field_int(meta, "seed", where, none_ok=True)
    return n, start, total


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
        from .chunked import open_dataset

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
