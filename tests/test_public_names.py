"""One name, one idea: no public function or class is defined under the same name in two modules of the
three packages (a second definition with the same name has, so far, always meant something different)."""

from __future__ import annotations

import importlib
import inspect
from collections import defaultdict

from test_docstrings import MODULES  # every public module of smaso, teachers and inference


def test_no_public_name_is_defined_twice():
    where = defaultdict(set)
    for mod in MODULES:
        for name, obj in vars(mod).items():
            if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            if getattr(obj, "__module__", None) == mod.__name__:  # defined here, not imported
                where[name].add(mod.__name__)
    twice = {name: sorted(mods) for name, mods in where.items() if len(mods) > 1}
    assert twice == {}


def test_the_top_level_surface_resolves_lazily():
    import smaso

    for name in smaso.__all__:
        assert getattr(smaso, name) is not None, name
    assert set(smaso.__all__) <= set(dir(smaso))
    assert smaso.__version__ == importlib.import_module("smaso._version").__version__
