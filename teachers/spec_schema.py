"""The JSON Schema of a ladder spec file (``teachers/ladder_spec.schema.json``, shipped with the package).

:func:`check_spec_schema` validates a parsed spec document (JSON or TOML) against the schema with
`jsonschema <https://python-jsonschema.readthedocs.io>`_ (draft 2020-12) and turns the first error into one
:class:`~teachers.validation.LadderSpecError` line naming the field by its path (``emission.sigma``,
``tables[0][1][2]``) and what the schema expected there.  The schema states the document's structure:
which fields each kind of spec has, their types, ranges and enumerations, the tables each mode takes.  What
a schema cannot state -- table shapes against the layout, rows summing to 1, lookup indices in range -- is
checked when the ladder is built (:mod:`teachers.spec_check`, the constructors).

Two subschemas, ``#numbers`` and ``#integers`` (a number, or a list of them, nested to any depth: the
tables), are checked by a plain loop over the list (:func:`_leaves_errors`) instead of one
``jsonschema`` call per entry (seconds for the 87,056 numbers of ``Ladder.random(4, 4, 16)``, against
hundredths); the loop applies the same rule and yields the same errors in the same order
(``tests/test_spec_files.py`` compares the two).
"""

from __future__ import annotations

import functools
import json
from collections import deque
from collections.abc import Iterator
from importlib import resources
from typing import Any

from .validation import LadderSpecError, _got, _short

__all__ = ["SCHEMA_FILE", "check_spec_schema", "spec_schema"]

#: The schema's file name inside the ``teachers`` package.
SCHEMA_FILE = "ladder_spec.schema.json"
#: $anchor of a leaf-array subschema -> its leaves' type (the arrays a plain loop checks).
_FAST: dict[Any, str] = {"numbers": "number", "integers": "integer"}


@functools.cache
def spec_schema() -> dict:
    """The JSON Schema of a spec document (parsed once; do not modify the dict returned)."""
    return json.loads(resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


@functools.cache
def _validator() -> Any:
    import jsonschema

    base = jsonschema.Draft202012Validator
    items = base.VALIDATORS["items"]

    def fast_items(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        leaf = _FAST.get(schema.get("$anchor")) if isinstance(schema, dict) else None
        if leaf is None or not isinstance(instance, list):
            yield from items(validator, value, instance, schema)
            return
        yield from _leaves_errors(validator, instance, leaf, schema)

    cls = jsonschema.validators.extend(base, {"items": fast_items})
    return cls(spec_schema())


def _leaves_errors(validator: Any, instance: list, leaf: str, schema: dict) -> Iterator[Any]:
    """The errors ``{"type": [leaf, "array"], "items": <itself>}`` gives for the entries of ``instance``, in
    jsonschema's order (depth first, entries in order), nested lists walked by a loop."""
    import jsonschema

    allowed = [leaf, "array"]
    stack: list[tuple[Iterator[tuple[int, Any]], tuple[int, ...]]] = [(iter(enumerate(instance)), ())]
    while stack:
        entries, path = stack[-1]
        for i, e in entries:
            t = type(e)
            if t is list:
                stack.append((iter(enumerate(e)), (*path, i)))
                break
            if t is int or (t is float and (leaf == "number" or e.is_integer())) or validator.is_type(e, leaf):
                continue  # (validator.is_type: a bool is not a number for JSON Schema)
            yield jsonschema.ValidationError(
                f"{e!r} is not of type {', '.join(map(repr, allowed))}", path=deque((*path, i)),
                validator="type", validator_value=allowed, instance=e, schema=schema)
        else:
            stack.pop()


def check_spec_schema(doc: object) -> None:
    """Validate a parsed spec document against :func:`spec_schema`.

    :raises LadderSpecError: at the error :func:`jsonschema.exceptions.best_match` picks, one line naming the
        field by its path and what was expected.
    """
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(doc))
    if error is not None:
        raise LadderSpecError(_message(error))


def _field(path: Any) -> str:
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out


def _message(error: Any) -> str:
    """``<field path>: <what was expected>, got <what was there>`` for a jsonschema error."""
    path, schema, kind, value = _field(error.absolute_path), error.schema, error.validator, error.validator_value
    where = path or "ladder spec"
    described = schema.get("description") if isinstance(schema, dict) else None
    if kind == "required":
        missing = [k for k in value if k not in error.instance]
        return f"{_field([*error.absolute_path, missing[0]])}: missing" + (f" from {described}" if described else "")
    if kind == "additionalProperties":
        known = sorted(schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in known)
        return f"{where}: unknown field(s) {extra}; known: {known}"
    if kind == "not":
        return f"{where}: {described or 'does not apply here'}"
    if kind in ("minItems", "maxItems"):
        return f"{where}: expected {described or 'a list'}, got {len(error.instance)} entries"
    if kind in ("minimum", "maximum", "exclusiveMinimum") and not described:
        bound = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">"}[kind]
        return f"{where}: expected a number {bound} {value}, got {_short(error.instance, 40)}"
    expected = described or {"type": f"a value of type {value}", "enum": f"one of {value}",
                             "const": _short(value, 40)}.get(kind, error.message)
    return f"{where}: expected {expected}, got {_got(error.instance)}"
