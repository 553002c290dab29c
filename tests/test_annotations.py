"""Every public callable of the library is fully annotated (issue 37: "type hints on every public callable").

The packages ship ``py.typed``, so a user's type checker reads these signatures as the API.  Public
callables are the names in each package's ``__all__`` and, in every public module, the public functions and
the public classes' public methods, properties, ``__init__`` and ``__call__``: each parameter but
``self`` / ``cls`` and the return must carry an annotation.  (mypy's ``disallow_untyped_defs`` in
pyproject.toml checks the same of every function, private ones included; this test states the promise
without the type checker.)
"""

from __future__ import annotations

import importlib
import inspect

import pytest
from test_docstrings import MODULES, PACKAGES

_METHODS = ("__init__", "__call__")


def _missing(qualname: str, fn) -> list[str]:
    """The unannotated parts of ``fn``'s signature, as ``qualname(param)`` / ``qualname->``."""
    fn = inspect.unwrap(fn)
    if not inspect.isfunction(fn):  # a builtin or C slot wrapper: nothing of ours to annotate
        return []
    out = []
    params = list(inspect.signature(fn, eval_str=False).parameters.values())
    for i, p in enumerate(params):
        if i == 0 and p.name in ("self", "cls", "mcs"):
            continue
        if p.annotation is inspect.Parameter.empty:
            out.append(f"{qualname}({p.name})")
    if fn.__name__ != "__init__" and inspect.signature(fn).return_annotation is inspect.Signature.empty:
        out.append(f"{qualname}->")
    return out


def _class_missing(qualname: str, cls: type) -> list[str]:
    out = []
    for attr, member in vars(cls).items():
        if attr.startswith("_") and attr not in _METHODS:
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if isinstance(member, property):
            member = member.fget
        if inspect.isfunction(member):
            out += _missing(f"{qualname}.{attr}", member)
    return out


def _unannotated(mod) -> list[str]:
    missing = []
    for name, obj in vars(mod).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
            continue
        if inspect.isfunction(obj):
            missing += _missing(f"{mod.__name__}.{name}", obj)
        elif inspect.isclass(obj):
            missing += _class_missing(f"{mod.__name__}.{name}", obj)
    return missing


@pytest.mark.parametrize("mod", MODULES, ids=[m.__name__ for m in MODULES])
def test_public_callables_are_annotated(mod):
    assert _unannotated(mod) == []


@pytest.mark.parametrize("pkg", PACKAGES)
def test_package_exports_are_annotated(pkg):
    """The names a package re-exports in ``__all__`` (wherever they are defined)."""
    root = importlib.import_module(pkg)
    missing = []
    for name in getattr(root, "__all__", ()):
        obj = getattr(root, name)
        if inspect.isfunction(obj):
            missing += _missing(f"{pkg}.{name}", obj)
        elif inspect.isclass(obj):
            missing += _class_missing(f"{pkg}.{name}", obj)
    assert missing == []


def test_the_check_sees_a_missing_annotation():
    """The checker itself: a parameter, a return and a method without annotations are each reported."""

    def f(a: int, b) -> int:
        return a

    def g(a: int):
        return a

    class C:
        def m(self, x: int): ...

        @property
        def p(self): ...

    assert _missing("f", f) == ["f(b)"]
    assert _missing("g", g) == ["g->"]
    assert _class_missing("C", C) == ["C.m->", "C.p->"]
