"""Every public module, function, class and method of the library has a docstring.

(The docstrings name the equation or theorem each piece implements; that part is read by people,
not by this test.)  Methods that override a documented base method (``forward``, ``log_prob``,
...) inherit its docstring, as ``inspect.getdoc`` and ``help()`` do.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

PACKAGES = ("smaso", "teachers", "inference")


def _modules():
    for pkg in PACKAGES:
        root = importlib.import_module(pkg)
        yield root
        for info in pkgutil.walk_packages(root.__path__, pkg + "."):
            if not info.name.rsplit(".", 1)[-1].startswith("_"):
                yield importlib.import_module(info.name)


MODULES = list(_modules())


def _undocumented(mod) -> list[str]:
    missing = [] if inspect.getdoc(mod) else [mod.__name__]
    for name, obj in vars(mod).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
            continue
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        if not inspect.getdoc(obj):
            missing.append(f"{mod.__name__}.{name}")
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_") or not (inspect.isfunction(member) or isinstance(member, property)):
                    continue
                if not inspect.getdoc(getattr(obj, attr, member)):
                    missing.append(f"{mod.__name__}.{name}.{attr}")
    return missing


@pytest.mark.parametrize("mod", MODULES, ids=[m.__name__ for m in MODULES])
def test_public_api_is_documented(mod):
    assert _undocumented(mod) == []
