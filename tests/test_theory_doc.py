"""``docs/theory.md`` names only code that exists, and keeps the section numbering the docstrings cite.

Every inline code span of the page that is a dotted name under ``smaso.``, ``teachers.`` or
``inference.`` (optionally followed by a call's ``(...)``) must resolve: the longest importable
module prefix is imported and the rest is looked up attribute by attribute (attributes of classes
included).  Every ``tests/test_*.py`` the page names must exist.  Fenced code blocks hold formulas,
not names, and are skipped.  The docstrings cite the page as ``docs/theory.md §1`` / ``§2`` / ``§3``, so
those three top-level sections must be there, in that order (a ``§0`` of conventions may precede them).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "theory.md"

PACKAGES = ("smaso", "teachers", "inference")
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# a dotted name under one of the packages, optionally followed by a call's arguments
DOTTED = re.compile(rf"^((?:{'|'.join(PACKAGES)})(?:\.{_IDENT})+)(?:\(.*\))?$")
TEST_FILE = re.compile(r"^tests/test_\w+\.py$")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
SPAN = re.compile(r"(`+)(.+?)\1", re.S)


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def _spans(text: str) -> list[str]:
    """The inline code spans of ``text`` (fenced blocks removed), stripped."""
    return [m.group(2).strip() for m in SPAN.finditer(FENCE.sub("", text))]


def cited_paths(text: str) -> list[str]:
    """Dotted names the page cites, each once, in order of first appearance."""
    seen: dict[str, None] = {}
    for span in _spans(text):
        m = DOTTED.match(span)
        if m:
            seen.setdefault(m.group(1), None)
    return list(seen)


def cited_test_files(text: str) -> list[str]:
    return list(dict.fromkeys(s for s in _spans(text) if TEST_FILE.match(s)))


def resolve(path: str):
    """Import the longest importable module prefix of ``path``, then getattr the remaining parts."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as e:
            # only "this prefix is not a module" moves on to a shorter prefix; a module that exists
            # but fails to import (a missing dependency, a broken import inside it) is an error
            if e.name is not None and (e.name == name or name.startswith(e.name + ".")):
                continue
            raise
        break
    else:  # pragma: no cover - the top-level packages always import
        raise ImportError(f"no importable prefix of {path!r}")
    for k, attr in enumerate(parts[i:], start=i):
        if not hasattr(obj, attr):
            raise AttributeError(f"{'.'.join(parts[:k])} has no attribute {attr!r} (citing {path!r})")
        obj = getattr(obj, attr)
    return obj


_PATHS = cited_paths(_text()) if DOC.exists() else []


def test_page_exists_and_cites_code():
    assert DOC.is_file(), f"{DOC} is missing"
    assert len(_PATHS) >= 100, f"only {len(_PATHS)} dotted names cited: did the span extraction break?"
    assert {p.split(".")[0] for p in _PATHS} == set(PACKAGES)


@pytest.mark.parametrize("path", _PATHS, ids=_PATHS)
def test_cited_path_resolves(path):
    resolve(path)


def test_cited_test_files_exist():
    files = cited_test_files(_text())
    assert files, "the page names no test file"
    missing = [f for f in files if not (ROOT / f).is_file()]
    assert not missing, f"test files named in docs/theory.md do not exist: {missing}"


def test_section_numbering():
    """Top-level sections §1 (framework paper), §2 (depth lecture), §3 (From Hard to Soft), §4 (the Random
    Hierarchy Model), in order, each exactly once; only a §0 may come before them."""
    numbers = [int(n) for n in re.findall(r"^## §(\d+)\b", FENCE.sub("", _text()), re.M)]
    assert numbers in ([1, 2, 3, 4], [0, 1, 2, 3, 4]), f"top-level § sections are {numbers}"


def test_resolver_on_known_names():
    """The resolver itself: modules, functions, classes, methods of classes; and clear failures."""
    import smaso.splines.maso as maso

    assert resolve("smaso.splines.maso") is maso
    assert resolve("smaso.splines.maso.MASO") is maso.MASO
    assert resolve("smaso.splines.maso.MASO.forward") is maso.MASO.forward
    assert callable(resolve("inference.posterior.posterior"))  # a function named like its module
    with pytest.raises(AttributeError, match="no_such_name"):
        resolve("smaso.splines.maso.no_such_name")
    with pytest.raises(AttributeError, match="no_such_module"):
        resolve("smaso.splines.no_such_module.f")
    text = "`smaso.a.b(x, y)` and `teachers.c`, not `numpy.d`, `smaso`, nor a fenced block:\n```\n`smaso.e`\n```\n"
    assert cited_paths(text) == ["smaso.a.b", "teachers.c"]
