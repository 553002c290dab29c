"""Shared matplotlib set-up for the figure modules: headless-safe backend, atomic saving."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np

if not os.environ.get("MPLBACKEND") and "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # scripts and CI have no display; notebooks keep their inline backend
import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["finish_figure", "plot_arviz", "plt", "quiet_arviz", "save_figure"]


def save_figure(fig: Figure, path: str | os.PathLike, dpi: int = 110) -> Path:
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


def finish_figure(fig: Figure, path: str | os.PathLike | None, title: str | None = None, *,
                  tight: bool | tuple = True) -> Figure:
    """The common end of every plot: optional suptitle, tight layout, save when given a path.

    :param tight: ``True``: ``fig.tight_layout()``; a ``(left, bottom, right, top)`` tuple: the same within
        that ``rect``; ``False``: no layout step (a figure with its own layout engine, or ArviZ's).
    :returns: ``fig``.
    """
    if title:
        fig.suptitle(title)
    if tight:
        fig.tight_layout(**({} if tight is True else {"rect": tight}))  # type: ignore[arg-type]
    if path is not None:
        save_figure(fig, path)
    return fig


@contextlib.contextmanager
def quiet_arviz() -> Iterator[None]:
    """Filter the known, harmless warnings that ArviZ's plots and diagnostics emit here, and only those.

    - matplotlib's ``MatplotlibDeprecationWarning`` "Passing a dict or None as alias_mapping to
      normalize_kwargs is deprecated ...", raised once per artist by ArviZ 0.23's matplotlib backend on
      matplotlib >= 3.11 (hundreds per ``az.plot_trace``);
    - numpy's ``RuntimeWarning`` "invalid value / divide by zero encountered" raised inside ``arviz`` modules
      for the r_hat / ESS of a constant chain (an event indicator that is always 0 or always 1), and ArviZ's
      ``UserWarning`` "Your data appears to have a single value ..." when it draws the density of one.

    Every other warning still shows (the filters match category, message and, for numpy's, the module).
    """
    from matplotlib import MatplotlibDeprecationWarning

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Passing a dict or None as alias_mapping to normalize_kwargs",
                                category=MatplotlibDeprecationWarning)
        warnings.filterwarnings("ignore", message=r"(invalid value|divide by zero) encountered",
                                category=RuntimeWarning, module=r"arviz")
        warnings.filterwarnings("ignore", message=r"Your data appears to have a single value or no finite values",
                                category=UserWarning, module=r"arviz")
        yield


def plot_arviz(plot: Callable[..., Any], *args: Any, path: str | os.PathLike | None = None, title: str | None = None,
               **kwargs: Any) -> Figure:
    """An ArviZ plot inside :func:`quiet_arviz` (no warning flood in notebooks and tests), as a ``Figure``.

    :param plot: the ArviZ function (e.g. ``az.plot_trace``) or its name without ``plot_`` (``"trace"``,
        ``"forest"``, ``"posterior"``, ``"rank"``, ...); ``args`` / ``kwargs`` go to it unchanged.
    :param path: save the figure here (format by suffix, written atomically); None: only return it.
    :param title: a figure title (``suptitle``).
    :returns: the matplotlib ``Figure`` of the axes ArviZ returned.
    """
    if isinstance(plot, str):
        import arviz as az

        fn = getattr(az, f"plot_{plot}", None)
        if fn is None:
            raise ValueError(f"plot: expected an ArviZ plotting function or the name of one (az.plot_<name>), "
                             f"got {plot!r}")
        plot = fn
    if not callable(plot):
        raise ValueError(f"plot: expected an ArviZ plotting function, got {type(plot).__name__}")
    with quiet_arviz():
        axes = plot(*args, **kwargs)
        first = np.ravel(np.asarray(axes, dtype=object))[0]
        fig = first.get_figure() if hasattr(first, "get_figure") else plt.gcf()
        if fig.get_layout_engine() is None:  # ArviZ sets none: its outer tick labels would fall off the canvas
            fig.set_layout_engine("constrained")
        return finish_figure(fig, path, title, tight=False)
