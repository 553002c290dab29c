"""The text of a ladder spec file: compact JSON, or TOML, one table row per line.

``json.dumps(..., indent=1)`` puts every number on a line of its own (738 lines for the 28-region
``Ladder.random(3, [3, 2, 3], 4)``; 184 in this layout, ``tests/test_spec_files.py``).  :func:`spec_text`
writes the same document with each innermost list (a table row, a region's parents) on one line, and a list
of lists on one line too when that line stays under :data:`WIDTH` characters; objects keep one field per
line.  The numbers are Python's shortest round-trip ``repr``, so reading the file back gives the very same
float64 tables.

TOML (1.0) is written by hand: Python reads it with :mod:`tomllib` but has no writer, and a spec needs only
strings, integers, finite floats, booleans, arrays (nested, of any length, over several lines) and tables;
arrays of tables (a region tree's ``regions``) are written as inline tables, one per line.  TOML has no
null, so a field set to ``None`` is refused with its name (leave the field out instead).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["SPEC_FORMATS", "WIDTH", "spec_text"]

#: The text formats of a spec file, chosen by the file's suffix (anything but ``.toml`` is JSON).
SPEC_FORMATS = ("json", "toml")
#: Longest line a list of lists is joined into (a list of numbers is one line, however long).
WIDTH = 100
_INDENT = "  "
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_TOML_INT = (-(2**63), 2**63)


def spec_text(doc: dict, fmt: str = "json") -> str:
    """The text of a spec document ``doc`` (plain lists, numbers, strings and dicts, as
    :func:`teachers.spec_io.spec_to_jsonable` makes them) in ``fmt`` (``"json"`` or ``"toml"``), ending
    in a newline.

    :raises ValueError: an unknown ``fmt``; a value the format cannot hold (NaN or infinity; in TOML, a
        ``None`` or an integer outside 64 bits), naming the field by its path.
    :raises TypeError: a value that is not part of a spec document, naming the field.
    """
    if fmt not in SPEC_FORMATS:
        raise ValueError(f"fmt: expected one of {SPEC_FORMATS}, got {fmt!r}")
    if not isinstance(doc, dict):
        raise TypeError(f"doc: expected a dict (a spec document), got {type(doc).__name__}")
    if fmt == "json":
        return _Writer(toml=False).value(doc, "", 0) + "\n"
    return _Writer(toml=True).toml_document(doc)


class _Writer:
    """Renders values in JSON or TOML syntax (they share the syntax of numbers, booleans and arrays)."""

    def __init__(self, *, toml: bool):
        self.toml = toml

    # ------------------------------------------------------------------ scalars
    def scalar(self, v: Any, path: str) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            if self.toml and not _TOML_INT[0] <= v < _TOML_INT[1]:
                raise ValueError(f"{path}: the integer {v} does not fit TOML's 64 bits; write a .json spec")
            return str(v)
        if isinstance(v, float):
            if not math.isfinite(v):
                raise ValueError(f"{path}: expected a finite number, got {v}")
            return repr(v)  # the shortest text that reads back as the same float64 (valid JSON and TOML)
        if isinstance(v, str):
            return self.string(v)
        if v is None:
            if self.toml:
                raise ValueError(f"{path}: TOML has no null; leave the field out, or write a .json spec")
            return "null"
        raise TypeError(f"{path}: expected a number, string, list or table in a spec, got {type(v).__name__}")

    def string(self, s: str) -> str:
        # JSON's escapes (\" \\ \n \t \uXXXX ...) are TOML's too; TOML also wants DEL escaped
        text = json.dumps(s, ensure_ascii=False)
        return text.replace("\x7f", "\\u007f") if self.toml else text

    def key(self, k: object) -> str:
        if not isinstance(k, str):
            raise TypeError(f"a spec's field names are strings, got {type(k).__name__} {k!r}")
        return k if self.toml and _BARE_KEY.fullmatch(k) else self.string(k)

    # ------------------------------------------------------------------ compound values
    def value(self, v: Any, path: str, depth: int) -> str:
        if isinstance(v, dict):
            return self.table(v, path, depth)
        if isinstance(v, (list, tuple)):
            return self.array(v, path, depth)
        return self.scalar(v, path)

    def inline(self, v: Any, path: str) -> str:
        """``v`` on one line."""
        if isinstance(v, dict):
            sep = " = " if self.toml else ": "
            return "{" + ", ".join(self.key(k) + sep + self.inline(x, _join(path, k)) for k, x in v.items()) + "}"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(self.inline(x, f"{path}[{i}]") for i, x in enumerate(v)) + "]"
        return self.scalar(v, path)

    def array(self, v: list[Any] | tuple[Any, ...], path: str, depth: int) -> str:
        """One line for a list of scalars (a table row), or for any list whose line fits in WIDTH; otherwise
        one element per line."""
        one = self.inline(v, path)
        nested = any(isinstance(x, (list, tuple, dict)) for x in v)
        if not nested or len(_INDENT) * depth + len(one) <= WIDTH:
            return one
        pad = _INDENT * (depth + 1)
        items = [pad + (self.inline(x, f"{path}[{i}]") if isinstance(x, dict) else
                        self.value(x, f"{path}[{i}]", depth + 1)) for i, x in enumerate(v)]
        return "[\n" + ",\n".join(items) + "\n" + _INDENT * depth + "]"

    def table(self, d: dict, path: str, depth: int) -> str:
        """A JSON object, one field per line."""
        if not d:
            return "{}"
        pad = _INDENT * (depth + 1)
        fields = [pad + self.key(k) + ": " + self.value(x, _join(path, k), depth + 1) for k, x in d.items()]
        return "{\n" + ",\n".join(fields) + "\n" + _INDENT * depth + "}"

    def toml_document(self, d: dict, header: str = "", path: str = "") -> str:
        """The key/value lines of ``d``, then each of its tables as a ``[header]`` section."""
        lines = [f"[{header}]"] if header else []
        for k, x in d.items():
            if not isinstance(x, dict):
                lines.append(f"{self.key(k)} = {self.value(x, _join(path, k), 0)}")
        text = "\n".join(lines) + "\n" if lines else ""
        for k, x in d.items():
            if isinstance(x, dict):
                sub = f"{header}.{self.key(k)}" if header else self.key(k)
                text += "\n" + self.toml_document(x, sub, _join(path, k))
        return text


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)
