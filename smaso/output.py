"""Where notebooks, examples and benchmarks write what they produce (figures, results files).

Outputs never go into the source tree by default: they go under ``$SMASO_OUTPUT`` when that is set,
and otherwise under ``smaso-output/`` in the current directory (ignored by this repository's
``.gitignore``).  The benchmarks' recorded results in ``benchmarks/results/`` change only when a
benchmark is run with ``--record``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ENV", "output_dir"]

ENV = "SMASO_OUTPUT"


def output_dir(*parts: str, create: bool = True) -> Path:
    """The output folder ``$SMASO_OUTPUT/<parts...>`` (default root: ``./smaso-output``).

    :param parts: sub-folders, e.g. ``output_dir("figures", "05_depth")``.
    :param create: create the folder (and its parents) if it does not exist.
    :raises ValueError: ``$SMASO_OUTPUT`` names an existing file, or a part is absolute or contains ``..``.
    """
    for part in parts:
        p = Path(part)
        if p.is_absolute() or ".." in p.parts or not str(part):
            raise ValueError(f"parts: expected relative folder names without '..', got {part!r}")
    root = Path(os.environ.get(ENV) or "smaso-output").expanduser()
    if root.exists() and not root.is_dir():
        raise ValueError(f"{ENV}: {str(root)!r} is a file, expected a folder")
    path = root.joinpath(*parts)
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path
