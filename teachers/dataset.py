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
                   member, and ``spec``: the ladder's :meth:`Ladder.to_dict` with
                   every array replaced by ``{"__array__": member name}``
``z``              ``(n, total_regions)`` events of every region, breadth-first
                   (uint8 when every region has <= 256 events)
``y``              ``(n,)`` int64 labels (= ``z[:, 0]``)
``x``              ``(n, R_d, dim)`` float32 inputs; absent for one-hot leaves,
                   whose x is exactly ``one_hot(z[:, leaves])`` (built on load)
``spec.<path>``    the ladder's arrays (tables, lookup tables, emission means)
=================  =============================================================

A file alone reproduces its statistics (:func:`load_dataset` rebuilds the ladder).  Writes
are atomic (temporary file + rename).  Loading checks the format, the version, the shapes
and the SHA-256 of the data, and raises :class:`DatasetFormatError` (a ``ValueError``) on a
corrupted, truncated or foreign file.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from .emission import one_hot
from .ladder import Ladder, LadderSpecError
from .sampling import LadderSample
from .spec_io import atomic_write

if TYPE_CHECKING:
    from .chunked import ChunkedLadderData

__all__ = ["FORMAT", "VERSION", "DatasetFormatError", "LadderDataset", "load_dataset", "save_dataset"]

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


def _join_arrays(obj, arrays):
    if isinstance(obj, dict):
        if set(obj) == {"__array__"}:
            name = obj["__array__"]
            if name not in arrays:
                raise DatasetFormatError(f"dataset: member {name!r} named by the spec is missing")
            return torch.as_tensor(arrays[name])
        return {k: _join_arrays(v, arrays) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_join_arrays(v, arrays) for v in obj]
    return obj


def _sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).data).hexdigest()


def save_dataset(sample: LadderSample, path: str | os.PathLike, *, compress: bool = False) -> Path:
    """Write ``sample`` (and its ladder) to ``path`` atomically.

    :param compress: deflate the members (smaller, slower); default stores them raw.
    :returns: the path written.
    """
    if not isinstance(sample, LadderSample):
        raise TypeError(f"sample: expected a LadderSample, got {type(sample).__name__}")
    if sample.x is None and not sample.ladder.emission.derivable:
        raise ValueError("sample: x is missing and the emission is not derivable from the events")
    arrays: dict[str, np.ndarray] = {}
    spec = _split_arrays(sample.ladder.to_dict(), "", arrays)
    data = {"z": sample.z.cpu().numpy(), "y": sample.y.cpu().numpy()}
    if sample.x is not None:
        data["x"] = sample.x.detach().cpu().to(torch.float32).numpy()
    meta = {"format": FORMAT, "version": VERSION, "n": len(sample), "start": sample.start,
            "total": sample.total if sample.total is not None else len(sample), "seed": sample.seed,
            "x_stored": sample.x is not None, "sha256": {k: _sha256(v) for k, v in data.items()},
            "spec": spec, **{k: v for k, v in sample.meta.items() if k in ("shard", "block_size", "stream_version")}}
    members = {"meta": np.array(json.dumps(meta)), **data, **arrays}
    saver = np.savez_compressed if compress else np.savez
    return atomic_write(path, lambda f: saver(f, **members))


def _read(path: Path, fmt: str = FORMAT, version: int = VERSION) -> tuple[dict, dict[str, np.ndarray]]:
    """Meta and members of a versioned npz of format ``fmt`` (shared by every dataset kind)."""
    if not path.is_file():
        raise DatasetFormatError(f"dataset: no such file {str(path)!r}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            if "meta" not in npz.files:
                raise DatasetFormatError(f"dataset: {str(path)!r} has no 'meta' member: not a {fmt} file")
            meta = json.loads(str(npz["meta"][()]))
            if not isinstance(meta, dict) or meta.get("format") != fmt:
                raise DatasetFormatError(f"dataset: {str(path)!r} is not a {fmt} file "
                                         f"(format {meta.get('format') if isinstance(meta, dict) else None!r})")
            if meta.get("version") != version:
                raise DatasetFormatError(f"dataset: {str(path)!r} has format version {meta.get('version')!r}; "
                                         f"this library reads version {version}")
            arrays = {k: npz[k] for k in npz.files if k != "meta"}
    except DatasetFormatError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, KeyError, json.JSONDecodeError) as e:
        raise DatasetFormatError(f"dataset: {str(path)!r} is corrupted or truncated ({type(e).__name__}: {e})") \
            from None
    return meta, arrays


def check_contiguous(shards: list[tuple[dict, Path]]) -> None:
    """Shards sorted by ``start`` must tile their rows without gaps or overlaps."""
    pos = shards[0][0]["start"]
    for meta, p in shards:
        if meta["start"] != pos:
            raise DatasetFormatError(f"dataset: shards leave a gap or overlap at example {pos} "
                                     f"({str(p)!r} starts at {meta['start']})")
        pos += meta["n"]


def _check(path: Path, meta: dict, arrays: dict[str, np.ndarray], ladder: Ladder):
    for key in ("z", "y") + (("x",) if meta.get("x_stored") else ()):
        if key not in arrays:
            raise DatasetFormatError(f"dataset: {str(path)!r} lacks member {key!r}")
        want = meta.get("sha256", {}).get(key)
        if want != _sha256(arrays[key]):
            raise DatasetFormatError(f"dataset: {str(path)!r}: member {key!r} fails its SHA-256 check (corrupted)")
    n = meta["n"]
    z, y = arrays["z"], arrays["y"]
    if z.shape != (n, ladder.total_regions) or y.shape != (n,):
        raise DatasetFormatError(f"dataset: {str(path)!r}: z {z.shape} / y {y.shape} do not match n={n} and the "
                                 f"ladder's {ladder.total_regions} regions")
    if meta.get("x_stored"):
        x = arrays["x"]
        if x.shape != (n, ladder.num_regions[-1], ladder.emission.dim):
            raise DatasetFormatError(f"dataset: {str(path)!r}: x has shape {x.shape}, expected "
                                     f"({n}, {ladder.num_regions[-1]}, {ladder.emission.dim})")


def load_dataset(paths: str | os.PathLike | Sequence[str | os.PathLike], *,
                 device: torch.device | str | None = None) -> LadderSample | ChunkedLadderData:
    """Load one dataset file, or several shards of one stream (concatenated in stream order).

    Version-1 ``.npz`` files are read into memory: the result is a :class:`LadderSample`.
    Version-2 stores (zarr directories, ``*.zarr``; see :mod:`teachers.chunked`) open lazily
    with :func:`teachers.chunked.open_dataset`: the result is a
    :class:`~teachers.chunked.ChunkedLadderData` (read it by chunks; ``device`` must be ``None``).

    :raises DatasetFormatError: corrupted/truncated/foreign file, wrong version, or shards
        that do not belong together (other ladder, seed or total, gaps or overlaps).
    """
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

        return open_dataset(paths)
    parts = []
    for p in paths:
        p = Path(p)
        meta, arrays = _read(p)
        try:
            ladder = Ladder.from_dict(_join_arrays(meta["spec"], arrays))
        except (LadderSpecError, KeyError, TypeError) as e:
            raise DatasetFormatError(f"dataset: {str(p)!r} holds an invalid ladder spec: {e}") from None
        _check(p, meta, arrays, ladder)
        parts.append((meta, arrays, ladder, p))
    parts.sort(key=lambda t: t[0]["start"])
    meta0, _, ladder0, p0 = parts[0]
    if len(parts) > 1:
        spec0 = json.dumps(meta0["spec"], sort_keys=True)
        for meta, arrays, _, p in parts:
            same = (meta["seed"], meta["total"], json.dumps(meta["spec"], sort_keys=True)) == (
                meta0["seed"], meta0["total"], spec0)
            spec_arrays_equal = all(np.array_equal(arrays[k], parts[0][1][k]) for k in arrays if k.startswith("spec."))
            if not (same and spec_arrays_equal):
                raise DatasetFormatError(f"dataset: {str(p)!r} is not a shard of the same stream as {str(p0)!r} "
                                         "(ladder, seed or total differ)")
        check_contiguous([(meta, p) for meta, _, _, p in parts])
    z = torch.as_tensor(np.concatenate([a["z"] for _, a, _, _ in parts]))
    x = None
    if meta0.get("x_stored"):
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
    """

    def __init__(self, source: LadderSample | str | os.PathLike | Sequence[str | os.PathLike]):
        self.sample = source if isinstance(source, LadderSample) else load_dataset(source)
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
