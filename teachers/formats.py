"""What the dataset formats share: the error type, the spec stored beside the rows, metadata checksums,
and the checks of row ranges (used by :mod:`teachers.dataset` (version-1 files) and :mod:`teachers.chunked`
(version-2 stores); a module of its own so that neither imports the other's internals).

A store or file keeps its ladder's spec (:func:`stored_spec`): a uniform tree's :meth:`Ladder.to_dict`, or any
other graph's with ``"packed": true`` and its per-region tables in one flat array per level (``tables[l-1]``:
every region's ``(prod parent m, m)`` table, C order, regions in order; ``lookup[l]`` likewise), so that a
graph of thousands of regions is a few arrays, not thousands.  :func:`teacher_from_spec` reads that and every
earlier form: tree specs of version 1, and the packed ``smaso-graph-ladder`` specs of 0.2 stores
(``tables[0] = []``, ``leaf_priors``, ``lookups``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Literal, overload

import numpy as np
import torch

from .ladder import GRAPH_FORMAT_V1, TOPDOWN, Ladder, _known
from .validation import _is_int

__all__ = ["FORMAT", "META_CHECKSUM", "DatasetFormatError", "check_contiguous", "check_coverage", "check_ladder_fields",
           "check_load_args", "check_metadata_checksum", "check_npz_head", "check_shards", "check_stream_fields",
           "metadata_checksum", "missing_rows", "region_events", "stored_spec", "teacher_from_spec"]

#: The ``format`` field of every dataset file and store (version 1: ``.npz``; version 2: zarr store).
FORMAT = "smaso-ladder-dataset"


class DatasetFormatError(ValueError):
    """A dataset file is corrupted, truncated, of another format, or of another version."""


#: The first bytes of a zip archive (a ``.npz``; an empty one) and of a bare ``.npy`` array.
_NPZ_MAGIC = (b"PK\x03\x04", b"PK\x05\x06", b"\x93NUMPY")


def check_npz_head(fh: BinaryIO, where: str) -> None:
    """Refuse a file that does not start like a ``.npz`` (a zip archive) or an ``.npy`` array, before numpy reads
    it: numpy takes any other file for a pickle and says so, which is not what the file is (text, a spec, another
    binary).  ``fh``: a binary file at its start, left there; an empty file is left to the reader (truncated)."""
    head = fh.read(len(_NPZ_MAGIC[-1]))
    fh.seek(0)
    if head and not head.startswith(_NPZ_MAGIC):
        raise DatasetFormatError(f"{where} is not a dataset file, or is corrupted or truncated: a .npz dataset file "
                                 "is a zip archive, and this file does not start like one")


def _split_arrays(obj: Any, prefix: str, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(obj, torch.Tensor | np.ndarray):
        name = f"spec.{prefix}"
        arrays[name] = obj.detach().cpu().numpy() if isinstance(obj, torch.Tensor) else obj
        return {"__array__": name}
    if isinstance(obj, dict):
        return {k: _split_arrays(v, f"{prefix}.{k}" if prefix else k, arrays) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_split_arrays(v, f"{prefix}.{i}", arrays) for i, v in enumerate(obj)]
    return obj


def _join_arrays(obj: Any, arrays: Mapping[str, np.ndarray], where: str = "dataset") -> Any:
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


def _canonical(obj: Any) -> bytes:
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


def _check_int(v: Any, name: str, *, minimum: int = 0) -> int:
    """``v`` as an int, or a ValueError naming the argument ``name`` (``minimum``: the least value)."""
    if not _is_int(v) or v < minimum:
        what = "a positive" if minimum == 1 else "a non-negative" if minimum == 0 else f"an integer >= {minimum}"
        raise ValueError(f"{name}: expected {what} integer, got {v!r}")
    return int(v)


@overload
def _field_int(meta: dict, key: str, where: str, *, minimum: int = 0, optional: Literal[False] = False,
               none_ok: Literal[False] = False) -> int: ...
@overload
def _field_int(meta: dict, key: str, where: str, *, minimum: int = 0, optional: bool = False,
               none_ok: bool = False) -> int | None: ...
def _field_int(meta: dict, key: str, where: str, *, minimum: int = 0, optional: bool = False,
               none_ok: bool = False) -> int | None:
    """``meta[key]``, an integer >= ``minimum``; None only where allowed (``optional``: the field may be missing,
    ``none_ok``: it may be null), so a required field is typed ``int`` (the overloads)."""
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


def check_contiguous(shards: list[tuple[dict, Path]]) -> None:
    """Shards ``(meta, path)`` sorted by ``start`` must tile their rows without gaps or overlaps (the error
    names the rows missing, or in two shards)."""
    for (a, pa), (b, pb) in itertools.pairwise(shards):
        end = a["start"] + a["n"]
        if b["start"] != end:
            rows = (f"[{end}, {b['start']}) are missing (a shard between {str(pa)!r} and {str(pb)!r} was not given)"
                    if b["start"] > end else f"[{b['start']}, {end}) are in both {str(pa)!r} and {str(pb)!r}")
            raise DatasetFormatError(f"dataset: shards leave a gap or overlap at example {end} ({str(pb)!r} starts "
                                     f"at {b['start']}): stream rows {rows}")


def check_shards(shards: list[tuple[dict, Path, dict]], partial: bool) -> None:
    """Shards ``(meta, path, stream)`` sorted by ``start`` must be of one stream (``stream``: what the shards of
    a stream share, by name; the error names the first that differs), tile their rows (:func:`check_contiguous`)
    and (unless ``partial``) the whole stream (:func:`check_coverage`)."""
    meta0, p0, s0 = shards[0]
    for _, p, s in shards[1:]:
        key = next((k for k in s0 if s.get(k) != s0[k]), None)
        if key is not None:
            what = "the ladders differ" if key == "ladder" else f"{key} differs: {s.get(key)!r} vs {s0[key]!r}"
            raise DatasetFormatError(f"dataset: {str(p)!r} is not a shard of the same stream as {str(p0)!r} ({what})")
    check_contiguous([(m, p) for m, p, _ in shards])
    n = sum(m["n"] for m, _, _ in shards)
    check_coverage([p for _, p, _ in shards], meta0["start"], n, meta0["total"], partial)


def missing_rows(start: int, n: int, total: int) -> list[tuple[int, int]]:
    """Stream rows ``(lo, hi)`` of ``[0, total)`` outside the contiguous rows ``[start, start + n)``."""
    return [(lo, hi) for lo, hi in ((0, start), (start + n, total)) if lo < hi]


def check_coverage(files: Sequence, start: int, n: int, total: int, partial: bool) -> None:
    """Refuse (unless ``partial``) files whose rows ``[start, start + n)`` are not the whole stream."""
    missing = missing_rows(start, n, total)
    if missing and not partial:
        names = ", ".join(repr(str(p)) for p in files)
        verb = "holds" if len(files) == 1 else "hold"
        raise DatasetFormatError(
            f"dataset: {names} {verb} stream rows [{start}, {start + n}) of {total}: rows "
            f"{', '.join(f'[{a}, {b})' for a, b in missing)} are missing (shard(s) not given); pass partial=True "
            "(at the command line: --partial) to load an incomplete set of shards")


def _events_out_of_range(z: np.ndarray, ladder: Ladder, limit: np.ndarray | None = None) -> str | None:
    """A description of the first event of ``z`` ``(rows, total_regions)`` outside its region's range
    ``[0, limit[r])``, or ``None``.  ``limit``: every region's event count (default: :func:`region_events`)."""
    if len(z) == 0:
        return None
    if limit is None:
        limit = region_events(ladder)
    lo, hi = z.min(axis=0).astype(np.int64), z.max(axis=0).astype(np.int64)
    bad = np.flatnonzero((lo < 0) | (hi >= limit))
    if not len(bad):
        return None
    r = int(bad[0])
    level = int(np.searchsorted(ladder.level_offsets, r, side="right") - 1)
    v = int(lo[r]) if lo[r] < 0 else int(hi[r])
    row = int(np.flatnonzero(z[:, r] == v)[0])
    return (f"region {r} (level {level}) has event {v} in row {row}, outside its range [0, {int(limit[r])})")


def check_stream_fields(meta: dict, where: str, *, null_seed: bool = True) -> tuple[int, int, int]:
    """``(n, start, total)`` of a dataset's metadata, checked: integers with ``start + n <= total``, a ``seed``
    that is an integer >= 0 (or null, if ``null_seed``), and when present a ``shard`` ``[i, k]`` with ``0 <= i < k``, a
    ``block_size`` >= 1 and a ``stream_version`` >= 0; the one check of these fields in every format.

    :raises DatasetFormatError: naming ``where``, the field, its value and what was expected.
    """
    n, start, total = (_field_int(meta, key, where) for key in ("n", "start", "total"))
    if start + n > total:
        raise DatasetFormatError(f"{where}: metadata field 'total' is {total}, less than start + n = "
                                 f"{start} + {n}: the rows do not fit in the stream")
    _field_int(meta, "seed", where, none_ok=null_seed)
    sh = meta.get("shard", [0, 1])
    if not (isinstance(sh, list) and len(sh) == 2 and all(_is_int(v) for v in sh) and 0 <= sh[0] < sh[1]):
        raise DatasetFormatError(f"{where}: metadata field 'shard' is {sh!r}, expected [i, k] with 0 <= i < k")
    _field_int(meta, "block_size", where, minimum=1, optional=True)
    _field_int(meta, "stream_version", where, optional=True)
    return n, start, total


def check_ladder_fields(meta: dict, where: str, *, null_seed: bool = True) -> tuple[int, int, int]:
    """:func:`check_stream_fields`, and a ladder dataset's ``x_stored`` (a bool), ``spec`` (an object) and
    ``spec_sha256`` (null, or ``{name: {"sha256": str, ...}}``); shared by the .npz and the store readers."""
    fields = check_stream_fields(meta, where, null_seed=null_seed)
    for key in ("x_stored", "spec"):
        if key not in meta:
            raise DatasetFormatError(f"{where}: metadata lacks field {key!r}")
    if not isinstance(meta["x_stored"], bool):
        raise DatasetFormatError(f"{where}: metadata field 'x_stored' is {meta['x_stored']!r}, expected true/false")
    if not isinstance(meta["spec"], dict):
        raise DatasetFormatError(f"{where}: metadata field 'spec' is not an object")
    spec_sums = meta.get("spec_sha256")
    if spec_sums is not None and (not isinstance(spec_sums, dict) or any(
            not isinstance(v, dict) or not isinstance(v.get("sha256"), str) for v in spec_sums.values())):
        raise DatasetFormatError(f"{where}: metadata field 'spec_sha256' is malformed")
    return fields


def check_load_args(paths: str | os.PathLike | Sequence[str | os.PathLike], partial: bool, what: str) -> list:
    """``paths`` (a path or a sequence of paths) as a non-empty list, and ``partial`` a bool, checked for the
    loaders (``what``: the kind of path, for the error)."""
    if not isinstance(partial, bool):
        raise TypeError(f"partial: expected a bool, got {type(partial).__name__}")
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if isinstance(paths, (bytes, dict)) or not isinstance(paths, Iterable):
        raise TypeError(f"paths: expected a path or a sequence of paths, got {type(paths).__name__}")
    paths = list(paths)
    if not paths:
        raise ValueError(f"paths: expected at least one {what}")
    for p in paths:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"paths: expected paths, got {type(p).__name__}")
    return paths


def _event_dtype(ladder: Ladder) -> np.dtype:
    """The numpy dtype of the ladder's events (:meth:`Ladder.event_dtype`)."""
    return np.dtype(str(ladder.event_dtype()).removeprefix("torch."))


def region_events(ladder: Ladder) -> np.ndarray:
    """Event count of every region in global order, ``(total_regions,)`` int64."""
    if ladder.is_uniform():
        return np.repeat(np.asarray(ladder.events, dtype=np.int64), ladder.num_regions)
    return np.asarray([m for lvl in ladder.region_events for m in lvl], dtype=np.int64)


def stored_spec(ladder: Ladder) -> dict:
    """The spec a file or store keeps (module docstring), before its arrays are split off."""
    d = ladder.to_dict()
    if ladder.is_uniform():  # (productions exist only on uniform trees: to_dict writes them, and rhm)
        return d
    d["packed"] = True
    key, levels = (("tables", _known(ladder.region_tables, "region_tables", "a top-down ladder")[1:])
                   if ladder.mode == TOPDOWN else ("lookup", _known(ladder.lookups, "lookups", "a bottom-up ladder")))
    d[key] = [torch.cat([t.reshape(-1) for t in lvl]).numpy() for lvl in levels]
    return d


def _unpack(flat: torch.Tensor | np.ndarray, shapes: list[tuple[int, ...]], name: str) -> list[torch.Tensor]:
    flat = torch.as_tensor(flat).reshape(-1)
    sizes = [int(np.prod(s)) for s in shapes]
    if flat.numel() != sum(sizes):
        raise DatasetFormatError(f"spec array {name!r} holds {flat.numel()} values, the graph needs {sum(sizes)}")
    return [t.reshape(s) for t, s in zip(torch.split(flat, sizes), shapes, strict=True)]


def _unpacked(d: dict) -> dict:
    """A packed graph spec (this version's or 0.2's ``smaso-graph-ladder``) with its per-region tables."""
    v1 = d.get("format") == GRAPH_FORMAT_V1
    layout = Ladder._layout_only(d["events"], d["parents"])
    ev, parents, children = layout.region_events, layout.parents, layout.children
    if d["mode"] == TOPDOWN:
        flat = d["tables"][1:] if v1 else d["tables"]
        tables = [_unpack(flat[l - 1], [(int(np.prod([ev[l - 1][p] for p in ps])), ev[l][i])
                                        for i, ps in enumerate(parents[l])], f"spec.tables.{l - int(not v1)}")
                  for l in range(1, len(ev))]
        d["tables"] = [[], *tables] if v1 else tables
    else:
        key = "lookups" if v1 else "lookup"
        d[key] = [_unpack(d[key][l], [(int(np.prod([ev[l + 1][c] for c in cs])),) for cs in children[l]],
                          f"spec.{key}.{l}") for l in range(len(ev) - 1)]
        if v1:
            d["leaf_priors"] = list(torch.as_tensor(d["leaf_priors"]))
    return d


def teacher_from_spec(spec: dict, arrays: dict, where: str) -> Ladder:
    """The ladder of a dataset's stored spec (its tables from ``arrays``), of any version; any failure a
    :class:`DatasetFormatError` naming the file (shared by the .npz and the chunked formats)."""
    try:
        d = _join_arrays(spec, arrays, where)
        if isinstance(d, dict) and d.pop("packed", False):
            d = _unpacked(d)
        return Ladder.from_dict(d)
    except DatasetFormatError as e:
        if str(e).startswith(where):
            raise
        raise DatasetFormatError(f"{where} holds an invalid ladder spec (metadata field 'spec'): {e}") from None
    except Exception as e:  # LadderSpecError, or anything a malformed spec makes the constructor raise
        kind = "graph ladder" if isinstance(spec, dict) and "parents" in spec else "ladder"
        raise DatasetFormatError(f"{where} holds an invalid {kind} spec (metadata field 'spec'): "
                                 f"{type(e).__name__}: {e}") from None

