"""Ladder specification files (JSON or TOML) and the atomic-write helper.

A spec file is either an explicit ladder (the fields of :meth:`Ladder.to_dict`, arrays as
nested lists)::

    {"format": "smaso-ladder", "version": 1, "mode": "topdown",
     "branching": [2, 2], "events": [2, 3, 3],
     "prior": [0.5, 0.5],
     "tables": [[[0.7, 0.2, 0.1], [0.1, 0.2, 0.7]],          # shared by level 1
                [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]],
     "emission": {"kind": "gaussian", "sigma": 0.5}}

or a generator description, e.g. ``{"kind": "random", "depth": 4, "branching": 4,
"events": 16, "concentration": 0.5, "seed": 1}`` (keyword arguments of the constructor
:meth:`Ladder.random`, :meth:`Ladder.fully_informative` or :meth:`Ladder.factorized_binary`).
TOML files use the same keys.

Version 2 holds any region graph too (``parents``, see :meth:`Ladder.to_dict`; ``smaso-graph-ladder`` version 1
files load unchanged).  A bad file gives one :class:`~teachers.ladder.LadderSpecError` line naming the field by
its path (:mod:`teachers.spec_check` checks every field before it is converted).
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
from .spec_check import MAX_NESTING

__all__ = ["atomic_write", "graph_from_spec", "load_spec", "remove_stale_temps", "save_spec", "spec_to_jsonable",
           "temp_path"]


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
    """Tensors and arrays to nested lists (for JSON)."""
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        return obj.tolist()
    if isinstance(obj, dict):
        return {k: spec_to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [spec_to_jsonable(v) for v in obj]
    return obj


def save_spec(ladder: Ladder, path: str | os.PathLike) -> Path:
    """Write ``ladder`` as a JSON spec file (atomically; format ``smaso-ladder`` version 2)."""
    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
    text = json.dumps(spec_to_jsonable(ladder.to_dict()), indent=1)
    return atomic_write(path, lambda f: f.write(text.encode()))


def load_spec(path: str | os.PathLike) -> Ladder:
    """Read a JSON (``.json``) or TOML (``.toml``) spec file of any version and build the ladder.

    :raises LadderSpecError: naming the offending field, or the file's syntax error.
    """
    path = Path(path)
    if not path.is_file():
        raise LadderSpecError(f"spec: no such file {str(path)!r}")
    toml = path.suffix.lower() == ".toml"
    try:
        text = path.read_bytes().decode()
        data = tomllib.loads(text) if toml else json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except RecursionError:
        raise LadderSpecError(f"spec: {str(path)!r} is nested too deeply (a spec is at most "
                              f"{MAX_NESTING} levels deep)") from None
    except ValueError as e:  # JSONDecodeError, TOMLDecodeError, UnicodeDecodeError, integers of > 4300 digits
        msg = " ".join(str(e).split())  # one line
        raise LadderSpecError(f"spec: {str(path)!r} is not valid {'TOML' if toml else 'JSON'}: {msg}") from None
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
