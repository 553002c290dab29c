"""Ladder specification files (JSON or TOML) and the atomic-write helper.

A spec file holds an explicit ladder (the fields of :meth:`Ladder.to_dict`, arrays as nested lists), a
region-graph ladder (``parents``), or a generator description (``{"kind": "random", "depth": 4, ...}``, the
keyword arguments of a constructor such as :meth:`Ladder.random`).  ``docs/spec-format.md`` documents every
field with examples; ``teachers/ladder_spec.schema.json`` (:mod:`teachers.spec_schema`) is its JSON Schema.

:func:`save_spec` writes ``.toml`` files as TOML and any other name as JSON, both with one table row per line
(:mod:`teachers.spec_text`); :func:`load_spec` reads either (by the suffix), checks every field
(:mod:`teachers.spec_check`) and the schema, and builds the ladder.  A bad file gives one
:class:`~teachers.ladder.LadderSpecError` line naming the field by its path.  Version 1 files and
``smaso-graph-ladder`` version 1 files load unchanged.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from .ladder import GRAPH_FORMAT_V1, Ladder, LadderSpecError
from .spec_check import MAX_NESTING, check_spec
from .spec_schema import check_spec_schema
from .spec_text import spec_text

__all__ = ["atomic_write", "graph_from_spec", "load_spec", "remove_stale_temps", "save_spec", "spec_file_format",
           "spec_to_jsonable", "temp_path"]


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:  # alive, another user's
        return True
    except OSError:  # no such process (ProcessLookupError), or no way to tell
        return False
    return True


def temp_path(path: str | os.PathLike, pid: int | None = None) -> Path:
    """Where :func:`atomic_write` writes ``path`` before renaming it into place:
    ``<parent>/.<name>.tmp-<pid>`` (deterministic, so a later write of the same path finds what a
    killed process left)."""
    path = Path(path)
    return path.parent / f".{path.name}.tmp-{os.getpid() if pid is None else pid}"


def remove_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Delete the temporary files of ``path`` (``.<name>.tmp-<pid>[-<k>]``) left by processes that
    are no longer alive (a killed write: SIGKILL, power loss); those of live processes stay.

    :returns: the files deleted.
    """
    path = Path(path)
    pattern = re.compile(re.escape(f".{path.name}.tmp-") + r"(\d+)(?:-\d+)?")
    removed: list[Path] = []
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m is None or _pid_alive(int(m.group(1))):
            continue
        try:
            if entry.is_file(follow_symlinks=False) or entry.is_symlink():
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except FileNotFoundError:  # another writer removed it first
            pass
    return removed


def _create_temp(path: Path) -> tuple[int, Path]:
    """Open a new temporary file for ``path`` (mode ``0666 & ~umask``, like any new file)."""
    base = temp_path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    for k in itertools.count():
        tmp = base if k == 0 else base.with_name(f"{base.name}-{k}")  # another thread of this process
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            if k > 1000:
                raise
    raise AssertionError("unreachable")


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], object], *, name: str = "out") -> Path:
    """Call ``write(f)`` on a temporary file beside ``path``, fsync it, then rename it over
    ``path``: a reader never sees a half-written file, and a failed write leaves nothing.

    The temporary file is ``.<name>.tmp-<pid>`` beside ``path`` (:func:`temp_path`).  It is deleted
    on every exit this process sees (an exception, KeyboardInterrupt); one left by a process killed
    outright (SIGKILL) is deleted by the next write of the same path (:func:`remove_stale_temps`).
    The file is created with mode ``0666 & ~umask``, as ``open(path, "w")`` would.

    :param name: the argument's name in error messages (a directory, or a missing parent).
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{name}: {str(path)!r} is a directory, expected a file name")
    if not path.parent.exists():
        raise ValueError(f"{name}: directory {str(path.parent)!r} does not exist")
    remove_stale_temps(path)
    tmp = None
    try:
        fd, tmp = _create_temp(path)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    finally:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return path


def spec_to_jsonable(obj: Any) -> Any:
    """Tensors, arrays and numpy scalars to nested lists and Python numbers (for JSON and TOML)."""
    if isinstance(obj, (torch.Tensor, np.ndarray, np.generic)):
        return obj.tolist()
    if isinstance(obj, dict):
        return {k: spec_to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [spec_to_jsonable(v) for v in obj]
    return obj


def spec_file_format(path: str | os.PathLike) -> str:
    """``"toml"`` for a ``.toml`` file name (any case), ``"json"`` for any other."""
    return "toml" if Path(path).suffix.lower() == ".toml" else "json"


def save_spec(ladder: Ladder, path: str | os.PathLike) -> Path:
    """Write ``ladder`` as a spec file (format ``smaso-ladder`` version 2), atomically: TOML for a ``.toml``
    name, JSON for any other, one table row per line (:func:`teachers.spec_text.spec_text`).
    :func:`load_spec` reads it back to the same ladder (equal :meth:`~Ladder.fingerprint`)."""
    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
    text = spec_text(spec_to_jsonable(ladder.to_dict()), spec_file_format(path))
    return atomic_write(path, lambda f: f.write(text.encode()))


def load_spec(path: str | os.PathLike) -> Ladder:
    """Read a JSON or TOML (``.toml``) spec file of any version, check it field by field
    (:func:`~teachers.spec_check.check_spec`, whose messages are the most specific) and against the JSON Schema
    (:func:`~teachers.spec_schema.check_spec_schema`), and build the ladder.

    :raises LadderSpecError: naming the offending field, or the file's syntax error.
    """
    path = Path(path)
    if not path.is_file():
        raise LadderSpecError(f"spec: no such file {str(path)!r}")
    toml = spec_file_format(path) == "toml"
    try:
        text = path.read_bytes().decode()
        data = tomllib.loads(text) if toml else json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except RecursionError:
        raise LadderSpecError(f"spec: {str(path)!r} is nested too deeply (a spec is at most "
                              f"{MAX_NESTING} levels deep)") from None
    except ValueError as e:  # JSONDecodeError, TOMLDecodeError, UnicodeDecodeError, integers of > 4300 digits
        msg = " ".join(str(e).split())  # one line
        raise LadderSpecError(f"spec: {str(path)!r} is not valid {'TOML' if toml else 'JSON'}: {msg}") from None
    try:
        check_spec(data)
    except LadderSpecError as e:
        raise LadderSpecError(" ".join(str(e).split())) from None  # one line
    check_spec_schema(data)
    if isinstance(data, dict) and (data.get("format") == GRAPH_FORMAT_V1 or "parents" in data):
        return graph_from_spec(data)
    return Ladder.from_dict(data)


def graph_from_spec(data: dict) -> Ladder:
    """Build a region-graph :class:`Ladder` from a parsed graph spec (``smaso-graph-ladder`` version 1, or
    ``smaso-ladder`` version 2 with ``parents``), every failure one :class:`LadderSpecError` line naming the
    field: :meth:`Ladder.from_dict`'s checks, and any other exception a malformed value makes the constructor
    raise (a number where a list belongs) is reported as a spec error rather than escaping.
    """
    try:
        return Ladder.from_dict(data)
    except LadderSpecError as e:
        raise LadderSpecError(" ".join(str(e).split())) from None  # one line
    except (TypeError, ValueError, IndexError, KeyError, AttributeError, OverflowError, RuntimeError) as e:
        raise LadderSpecError(f"spec: malformed graph spec field ({type(e).__name__}: "
                              f"{' '.join(str(e).split())})") from None


def _no_duplicate_keys(pairs: list) -> dict:
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {k!r} appears twice in one object")
        out[k] = v
    return out
