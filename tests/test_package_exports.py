"""Each package's ``__all__`` is complete and free of deprecated names (issue 37).

- Every name in the ``__all__`` of ``teachers``, ``inference``, ``smaso`` and smaso's subpackages resolves, and
  reading it warns nothing.
- No name in them is deprecated: a deprecated name warns on access (``teachers.GraphLadder``), or is a deprecated
  module, function or class, whose docstring says so (``teachers._deprecation`` writes "Deprecated" first).
- Every public class or function defined in a package's modules that ``docs/library.md`` mentions (in code, not in a
  file path) is exported by that package: ``getattr(package, name)`` is that object.  The one exception is
  ``inference.posterior``, the module, whose function of the same name stays ``inference.posterior.posterior``.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("teachers", "inference", "smaso")
SUBPACKAGES = ("smaso.depth", "smaso.plots", "smaso.splines", "smaso.student", "smaso.theorems")
FENCE = re.compile(r"```.*?```", re.S)


def _is_deprecated(obj) -> bool:
    return (inspect.getdoc(obj) or "").startswith("Deprecated")


def _modules(pkg: str):
    """The public, non-deprecated modules of ``pkg`` (the command line's modules are not a Python API)."""
    root = importlib.import_module(pkg)
    for info in pkgutil.walk_packages(root.__path__, pkg + "."):
        if any(p.startswith("_") for p in info.name.split(".")) or info.name.startswith("smaso.cli"):
            continue
        with warnings.catch_warnings():  # (smaso.student.graph_* warn when imported: skipped below)
            warnings.simplefilter("ignore", DeprecationWarning)
            mod = importlib.import_module(info.name)
        if not _is_deprecated(mod):
            yield mod


def mentioned(text: str) -> set[str]:
    """The identifiers ``text`` (markdown) names in code: fenced blocks and inline spans, file paths left out."""
    spans = FENCE.findall(text) + [s for s in re.findall(r"`([^`\n]+)`", FENCE.sub("", text)) if "/" not in s]
    return {w for s in spans for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", s)}


@pytest.mark.parametrize("name", PACKAGES + SUBPACKAGES)
def test_every_exported_name_resolves_without_a_warning_and_none_is_deprecated(name):
    pkg = importlib.import_module(name)
    assert len(pkg.__all__) == len(set(pkg.__all__)), "a name listed twice"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        values = {n: getattr(pkg, n) for n in pkg.__all__}
    deprecated = sorted(n for n, v in values.items() if _is_deprecated(v))
    assert deprecated == [], f"{name}.__all__ lists deprecated names"


def test_deprecated_names_stay_importable_out_of_all():
    import inference
    import smaso.student
    import teachers

    with pytest.warns(DeprecationWarning, match=r"teachers\.GraphLadder is deprecated .* use teachers\.Ladder"):
        alias = teachers.GraphLadder
    assert _is_deprecated(alias) and "GraphLadder" not in teachers.__all__
    with pytest.warns(DeprecationWarning):  # on every access: never cached in the package
        teachers.GraphLadder  # noqa: B018
    for pkg, name in ((inference, "ladder_posterior"), (inference, "graph_posterior"),
                      (smaso.student, "graph_network"), (smaso.student, "graph_frequency")):
        with warnings.catch_warnings():  # (smaso.student.graph_* warn when first imported)
            warnings.simplefilter("ignore", DeprecationWarning)
            module = getattr(pkg, name)
        assert _is_deprecated(module) and name not in pkg.__all__, name


@pytest.mark.parametrize("name", PACKAGES)
def test_every_public_name_the_library_page_mentions_is_exported(name):
    words = mentioned((ROOT / "docs" / "library.md").read_text(encoding="utf-8"))
    pkg = importlib.import_module(name)
    missing = []
    for mod in _modules(name):
        for n in getattr(mod, "__all__", ()):
            obj = getattr(mod, n)
            if n not in words or getattr(obj, "__module__", None) != mod.__name__:
                continue
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if n in pkg.__all__ and inspect.ismodule(getattr(pkg, n)) and getattr(pkg, n) is mod:
                continue  # inference.posterior: the module, and inference.posterior.posterior its function
            if n not in pkg.__all__ or getattr(pkg, n) is not obj:
                missing.append(f"{mod.__name__}.{n}")
    assert missing == [], f"{name}.__all__ lacks names docs/library.md mentions: {missing}"


def test_the_mention_scan_reads_code_not_paths():
    text = "Use `compare_student` in `smaso/student/compare.py`.\n```python\nfrom x import vq_map\n```\n"
    assert mentioned(text) == {"compare_student", "vq_map", "python", "from", "x", "import"}
