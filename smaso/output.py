"""Where notebooks, examples and benchmarks write what they produce (figures, results files).

Outputs never go among the source files: they go under ``$SMASO_OUTPUT`` when that is set, and otherwise
under ``smaso-output/`` in the current directory, except that anywhere inside this project's source checkout
(a notebook's kernel runs in ``examples/``) it is the checkout's top-level ``smaso-output/`` (ignored by its
``.gitignore``), the same folder whichever sub-folder a notebook, example or command runs in.  The
benchmarks' recorded results in ``benchmarks/results/`` change only when a benchmark is run with ``--record``.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["ENV", "RunRecord", "json_safe", "output_dir", "output_root", "write_strict_json"]

ENV = "SMASO_OUTPUT"


#: The source checkout this module runs from (None when installed: no ``pyproject.toml`` beside the package).
_HERE = Path(__file__).resolve().parents[1]
_CHECKOUT: Path | None = _HERE if (_HERE / "pyproject.toml").is_file() else None
DEFAULT_ROOT = "smaso-output"


def output_root() -> Path:
    """The root of every default output: ``$SMASO_OUTPUT`` when set, else ``smaso-output`` in the current
    directory, or the checkout's own ``smaso-output`` when the current directory is inside the source checkout
    (so that a notebook run in ``examples/`` writes where one run from the top does, not among the sources)."""
    env = os.environ.get(ENV)
    if env:
        return Path(env).expanduser()
    try:
        cwd = Path.cwd().resolve()
    except OSError:  # a working directory removed under the process: the relative default, as before
        return Path(DEFAULT_ROOT)
    if _CHECKOUT is not None and cwd.is_relative_to(_CHECKOUT) and cwd != _CHECKOUT:
        return _CHECKOUT / DEFAULT_ROOT
    return Path(DEFAULT_ROOT)


def output_dir(*parts: str, create: bool = True) -> Path:
    """The output folder ``<root>/<parts...>``, ``<root>`` being :func:`output_root` (``$SMASO_OUTPUT``, else
    ``./smaso-output``, or the checkout's ``smaso-output`` anywhere inside the source checkout).

    :param parts: sub-folders, e.g. ``output_dir("figures", "05_depth")``.
    :param create: create the folder (and its parents) if it does not exist.
    :raises ValueError: ``$SMASO_OUTPUT`` names an existing file, or a part is absolute or contains ``..``.
    """
    for part in parts:
        p = Path(part)
        if p.is_absolute() or ".." in p.parts or not str(part):
            raise ValueError(f"parts: expected relative folder names without '..', got {part!r}")
    root = output_root()
    if root.exists() and not root.is_dir():
        raise ValueError(f"{ENV}: {str(root)!r} is a file, expected a folder")
    path = root.joinpath(*parts)
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def json_safe(obj: Any, digits: int | None = None) -> Any:
    """``obj`` with every non-finite float as ``None`` (JSON's null), tuples as lists, and numpy or torch
    scalars and arrays as plain Python values: what strict JSON (``allow_nan=False``) accepts.  A NaN is
    "not measured" or "undefined", and a strict reader refuses a bare ``NaN``.  ``digits``: round every finite
    float to that many significant digits (the file's size; None keeps every digit)."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return None
        return float(f"{obj:.{digits}g}") if digits is not None and obj != 0 else float(obj)
    if isinstance(obj, dict):
        return {str(k): json_safe(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v, digits) for v in obj]
    if hasattr(obj, "tolist"):  # numpy and torch scalars and arrays (neither imported for the check)
        return json_safe(obj.tolist(), digits)
    raise TypeError(f"obj: {type(obj).__name__} is not JSON serializable")


def write_strict_json(path: str | os.PathLike, data: Any, *, name: str = "path", digits: int | None = None,
                      compact: bool = False) -> Path:
    """Write ``json_safe(data, digits)`` as strict JSON (plus a final newline) to ``path`` atomically (a
    temporary file renamed over it), creating its folder; returns the path.  ``name``: the argument's name in
    error messages (e.g. ``"--json"``); ``compact``: no indentation or spaces (large files), else indented."""
    from teachers.spec_io import atomic_write

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    layout = {"separators": (",", ":")} if compact else {"indent": 1}
    text = json.dumps(json_safe(data, digits), allow_nan=False, **layout) + "\n"
    atomic_write(path, lambda f: f.write(text.encode()), name=name)
    return path


def _loadavg() -> list[float] | None:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


class RunRecord:
    """The bookkeeping of a recorded experiment: when and how it ran, on what, under which load.

    Created at the start of a run; :meth:`finish` returns ``{"experiment", "timestamp" (UTC, ISO),
    "argv", "machine" (python, platform, CPU count, torch version and threads, the load average at the start
    and at the end), **sections, "wall_s", "cpu_s"}``.  ``cpu_s`` is this process's CPU time (all its
    threads), not that of worker processes; the machine may be shared, so ``wall_s`` is read with the load.
    """

    def __init__(self, experiment: str, argv: list[str] | None = None) -> None:
        import torch

        self.experiment = experiment
        self.argv = list(sys.argv[1:] if argv is None else argv)
        self.timestamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        self.machine = {"python": sys.version.split()[0], "platform": platform.platform(),
                        "cpu_count": os.cpu_count(), "torch": torch.__version__,
                        "torch_threads": torch.get_num_threads(), "loadavg_start": _loadavg()}
        self._wall0, self._cpu0 = time.perf_counter(), time.process_time()

    def finish(self, **sections: Any) -> dict:
        """The record of the run so far (see the class docstring), with ``sections`` in the middle."""
        machine = {**self.machine, "loadavg_end": _loadavg()}
        return {"experiment": self.experiment, "timestamp": self.timestamp, "argv": self.argv, "machine": machine,
                **sections, "wall_s": time.perf_counter() - self._wall0, "cpu_s": time.process_time() - self._cpu0}
