"""Call-time deprecation wrappers for the old import paths of :mod:`inference` (``inference.ladder_posterior``,
``inference.graph_posterior``: one release, then removed)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

__all__ = ["deprecated"]


def deprecated(fn: Callable, old: str, new: str) -> Callable:
    """``fn`` under the old name ``old`` (``"module.name"``): every call warns a :class:`DeprecationWarning`
    naming ``new`` (what to call instead), then returns ``fn``'s result."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        warnings.warn(f"{old} is deprecated since smaso 0.3 and will be removed in 0.4; use {new}",
                      DeprecationWarning, stacklevel=2)
        return fn(*args, **kwargs)

    wrapper.__name__ = wrapper.__qualname__ = old.rsplit(".", 1)[-1]
    wrapper.__module__ = __name__
    wrapper.__doc__ = f"Deprecated: use :func:`{new.split('(')[0]}`.\n\n{fn.__doc__ or ''}"
    return wrapper
