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
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np
import torch

from .ladder import Ladder, LadderSpecError

__all__ = ["atomic_write", "load_spec", "save_spec", "spec_to_jsonable"]


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None], *, name: str = "out") -> Path:
    """Call ``write(f)`` on a temporary file beside ``path``, fsync it, then rename it over
    ``path``: a reader never sees a half-written file, and a failed write leaves nothing.

    :param name: the argument's name in error messages (a directory, or a missing parent).
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{name}: {str(path)!r} is a directory, expected a file name")
    if not path.parent.exists():
        raise ValueError(f"{name}: directory {str(path.parent)!r} does not exist")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def spec_to_jsonable(obj):
    """Tensors and arrays to nested lists (for JSON)."""
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, dict):
        return {k: spec_to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [spec_to_jsonable(v) for v in obj]
    return obj


def save_spec(ladder: Ladder, path: str | os.PathLike) -> Path:
    """Write ``ladder`` as a JSON spec file (atomically)."""
    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
    text = json.dumps(spec_to_jsonable(ladder.to_dict()), indent=1)
    return atomic_write(path, lambda f: f.write(text.encode()))


def load_spec(path: str | os.PathLike) -> Ladder:
    """Read a JSON (``.json``) or TOML (``.toml``) spec file and build the ladder.

    :raises LadderSpecError: naming the offending field, or the file's syntax error.
    """
    path = Path(path)
    if not path.is_file():
        raise LadderSpecError(f"spec: no such file {str(path)!r}")
    raw = path.read_bytes()
    try:
        if path.suffix.lower() == ".toml":
            data = tomllib.loads(raw.decode())
        else:
            data = json.loads(raw.decode())
    except (UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        raise LadderSpecError(f"spec: {str(path)!r} is not valid {'TOML' if path.suffix == '.toml' else 'JSON'}: {e}") \
            from None
    return Ladder.from_dict(data)
