"""The deprecated names of smaso 0.2 (removed in 0.4): one warning, and aliases for functions and classes, for
every shim module (``teachers.graph_*``, ``inference.{ladder,graph}_posterior``, ``smaso.student.graph_*``)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["AliasMeta", "alias", "deprecated", "warn"]


def warn(old: str, new: str, stacklevel: int = 3) -> None:
    """A :class:`DeprecationWarning`: ``old`` is deprecated since smaso 0.3 and removed in 0.4; use ``new``."""
    warnings.warn(f"{old} is deprecated since smaso 0.3 and will be removed in 0.4; use {new}", DeprecationWarning,
                  stacklevel=stacklevel)


def deprecated(fn: Callable, old: str, new: str) -> Callable:
    """``fn`` under the old name ``old``: every call warns (naming ``new``), then returns ``fn``'s result."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        warn(old, new)
        return fn(*args, **kwargs)

    wrapper.__name__ = wrapper.__qualname__ = old.rsplit(".", 1)[-1].split("(")[0]
    wrapper.__doc__ = f"Deprecated: use :func:`{new.split('(')[0]}`.\n\n{fn.__doc__ or ''}"
    return wrapper


class AliasMeta(type):
    """Metaclass of a deprecated alias class: ``isinstance(x, Alias)`` is ``isinstance(x, Alias._target)``."""

    _target: type

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, cls._target)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls._target)


def alias(target: type, old: str, new: str, build: Callable | None = None, **attrs: Any) -> type:
    """A deprecated class name: calling it warns (naming ``new``) and returns ``build(*args, **kwargs)``
    (default: ``target(...)``); ``isinstance`` and ``issubclass`` against it test ``target``; ``attrs`` are
    further class attributes (deprecated constructors)."""

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        warn(old, new)
        return (build or target)(*args, **kwargs)

    doc = f"Deprecated alias: ``{old}`` is ``{new}``."
    return AliasMeta(old.split("(")[0], (), {"__new__": __new__, "_target": target, "__doc__": doc, **attrs})
