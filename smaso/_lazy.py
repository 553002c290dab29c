"""The lazy-submodule helper of smaso's package ``__init__``s: :func:`teachers._lazy.lazy_submodules` (it lives in the
lowest package so that :mod:`inference` can use it too without importing smaso)."""

from teachers._lazy import lazy_submodules

__all__ = ["lazy_submodules"]
