"""Shared matplotlib set-up for the figure modules: headless-safe backend, atomic saving."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import matplotlib

if not os.environ.get("MPLBACKEND") and "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # scripts and CI have no display; notebooks keep their inline backend
import matplotlib.pyplot as plt

__all__ = ["finish_figure", "plt", "save_figure"]


def save_figure(fig, path: str | os.PathLike, dpi: int = 110) -> Path:
    """Write ``fig`` to ``path`` atomically, in the format of its suffix (PNG by default), creating
    missing parent folders.

    :returns: the path written.
    """
    from teachers.spec_io import atomic_write

    path = Path(path)
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    fmt = path.suffix.lstrip(".") or "png"
    return atomic_write(path, lambda f: fig.savefig(f, format=fmt, dpi=dpi), name="path")


def finish_figure(fig, path: str | os.PathLike | None, title: str | None = None):
    """The common end of every plot: optional suptitle, tight layout, save when given a path.

    :returns: ``fig``.
    """
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig
