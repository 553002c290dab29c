"""The three packages form a line, never a circle: ``teachers`` (the models) <- ``inference`` (inference in those
models) <- ``smaso`` (students, theorems, splines, plots, CLI).

A module may import its own package and those below it, never one above.  Imports are read from the source with
:mod:`ast`: every ``import`` and ``from ... import`` anywhere in a module (inside functions and ``TYPE_CHECKING``
blocks too: a type-level dependency still means the lower package cannot be read or checked without the upper one),
and every ``importlib.import_module`` / ``__import__`` of a constant name.  Relative imports are resolved against
the module's package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: bottom to top: a package may import those at its own index or lower
LAYERS = ("teachers", "inference", "smaso")
_DYNAMIC = {"import_module", "__import__"}


def _module_name(path: Path) -> tuple[str, str]:
    """``(module, package)`` of a source file: ``teachers/leak.py`` -> ``("teachers.leak", "teachers")``."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        name = ".".join(parts[:-1])
        return name, name
    name = ".".join(parts)
    return name, name.rpartition(".")[0]


def imported_names(source: str, package: str) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in ``source`` (a module of ``package``)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            out.append((node.lineno, base))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            f = node.func
            if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)) in _DYNAMIC:
                out.append((node.lineno, node.args[0].value))
    return out


def upward_imports(source: str, module: str, package: str) -> list[str]:
    """``"module:line imports target"`` for every import of ``source`` into a package above ``module``'s."""
    own = LAYERS.index(module.split(".")[0])
    bad = []
    for line, target in imported_names(source, package):
        top = target.split(".")[0]
        if top in LAYERS and LAYERS.index(top) > own:
            bad.append(f"{module}:{line} imports {target}")
    return bad


def _sources():
    for pkg in LAYERS:
        yield from sorted((ROOT / pkg).rglob("*.py"))


@pytest.mark.parametrize("pkg", LAYERS[:-1])
def test_no_module_imports_a_package_above_its_own(pkg):
    bad = []
    for path in _sources():
        module, package = _module_name(path)
        if module.split(".")[0] == pkg:
            bad += upward_imports(path.read_text(encoding="utf-8"), module, package)
    assert bad == [], "upward imports (teachers <- inference <- smaso):\n" + "\n".join(bad)


def test_the_checker_sees_every_kind_of_import():
    src = '''
import inference.posterior
from smaso.splines import maso
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from smaso._lazy import lazy_submodules
def f():
    from inference.junction_tree import region_joint
    return importlib.import_module("smaso.student")
from . import ladder
from .. import whatever
'''
    assert sorted(t for _, t in imported_names(src, "teachers")) == sorted([
        "inference.posterior", "smaso.splines", "typing", "smaso._lazy", "inference.junction_tree", "smaso.student",
        "teachers", ""])
    assert len(upward_imports(src, "teachers.x", "teachers")) == 5
    assert sorted(upward_imports(src, "inference.x", "inference")) == [
        "inference.x:3 imports smaso.splines", "inference.x:6 imports smaso._lazy",
        "inference.x:9 imports smaso.student"]
    assert upward_imports(src, "smaso.x", "smaso") == []
    # relative imports resolve against the package: ``from .posterior import x`` in inference/ is inference's
    assert imported_names("from .posterior import posterior", "inference") == [(1, "inference.posterior")]
    assert imported_names("from ..splines import maso", "smaso.student") == [(1, "smaso.splines")]
