"""PEP 562 lazy submodules for the package ``__init__``s: importing a package stays cheap (no torch)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence


def lazy_submodules(package: str, names: Sequence[str],
                    namespace: dict) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for a package whose public names are its submodules ``names``.

    :param package: the package's ``__name__``.
    :param namespace: the package's ``globals()`` (for ``__dir__``).
    """
    public = frozenset(names)

    def __getattr__(name: str):
        """Import a submodule on first use (PEP 562), so that importing the package stays cheap."""
        if name in public:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*namespace, *public})

    return __getattr__, __dir__
