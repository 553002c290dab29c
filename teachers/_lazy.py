"""PEP 562 lazy submodules for the package ``__init__``s: importing a package stays cheap (no torch).

It lives in the lowest package, :mod:`teachers`, so that :mod:`inference` and :mod:`smaso` use it without importing
a package above their own (``tests/test_layering.py``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence


def lazy_submodules(package: str, names: Sequence[str], namespace: dict, entry_points: Mapping[str, str] | None = None
                    ) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for a package whose public names are its submodules ``names``.

    :param package: the package's ``__name__``.
    :param namespace: the package's ``globals()`` (for ``__dir__``).
    :param entry_points: further public names, each imported from its module (name -> module) on first use and
        then kept in ``namespace``.
    """
    public, entry_points = frozenset(names), entry_points or {}

    def __getattr__(name: str) -> object:
        """Import a submodule or an entry point on first use (PEP 562), so that importing the package stays cheap."""
        if name in public:
            return importlib.import_module(f"{package}.{name}")
        if name not in entry_points:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value = getattr(importlib.import_module(entry_points[name]), name)
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *public, *entry_points})

    return __getattr__, __dir__
