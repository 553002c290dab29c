"""Field-by-field validation of ladder spec documents, before any conversion.

:func:`check_spec` walks a spec -- the dict of :meth:`Ladder.to_dict`, a generator description
``{"kind": ...}``, or whatever a JSON/TOML file held -- and raises
:class:`~teachers.ladder.LadderSpecError` at the first problem, with a one-line message that names
the field by its path (``regions[2].children``, ``emission.sigma``, ``tables[0][1][0]``) and says
what was expected: wrong types (checked before any ``int()``, ``float()`` or hashing), NaN and
infinity, out-of-range integers, unknown keys at every level, options that do not apply (``sigma``
without Gaussian leaves, ``leaf_prior`` in a top-down spec, ...), documents nested deeper than
:data:`MAX_NESTING` levels, and sizes beyond the library's limits (:data:`~teachers.ladder.MAX_DEPTH`
levels, :data:`~teachers.ladder.MAX_EVENTS` events per region, :data:`~teachers.ladder.MAX_REGIONS`
regions).  The constructors of :class:`~teachers.ladder.Ladder` keep the checks that need the layout
(shapes, row sums, lookup ranges, table sizes); this module makes sure only well-typed values reach
them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .emission import Emission, emission_from_dict
from .rhm import RHM_RULE_SOURCES
from .validation import (
    MAX_DEPTH,
    MAX_EVENTS,
    MAX_REGIONS,
    MAX_TABLE_ENTRIES,
    MODES,
    LadderSpecError,
    _check_concentration,
    _check_depth,
    _check_entries,
    _check_mode_tables,
    _check_seed,
    _check_sigma,
    _got,
    _is_int,
    _is_positive,
    _level_sizes,
)
from .validation import _short as short

if TYPE_CHECKING:
    from typing import NoReturn

__all__ = ["MAX_NESTING", "RHM_FIELDS", "check_emission_dict", "check_spec", "emission_from_spec"]

# Deepest nesting of tables and lists a spec document may have (the deepest real one, a per-region
# factor table inside ``factorization.factor_tables``, is 6 levels deep).
MAX_NESTING = 32
# Largest binary factor count per region of a factorized ladder (2^16 = MAX_EVENTS events).
MAX_FACTORS = int(math.log2(MAX_EVENTS))

HEADER = ("format", "version")
EXPLICIT_FIELDS = ("format", "version", "name", "mode", "branching", "events", "regions", "region_names",
                   "emission", "prior", "tables", "leaf_prior", "lookup", "factorization", "productions", "rhm",
                   "pairwise_view_of")
#: The fields of a spec's ``rhm`` table and of a ``{"kind": "rhm"}`` generator (those of
#: :class:`~teachers.rhm.RHMParams`); the first five are required.
RHM_FIELDS = ("v", "n_classes", "m", "s", "L", "seed", "rules")
PRODUCTION_FIELDS = ("rules", "probs")
GRAPH_FIELDS = ("format", "version", "name", "mode", "events", "parents", "emission")
# The tables of a region-graph spec by format: ``smaso-ladder`` version 2, ``smaso-graph-ladder`` version 1.
GRAPH_TABLES = {"smaso-ladder": {"topdown": ("prior", "tables"), "bottomup": ("leaf_prior", "lookup")},
                "smaso-graph-ladder": {"topdown": ("prior", "tables"), "bottomup": ("leaf_priors", "lookups")}}
GENERATOR_OPTIONS = {
    "random": ("depth", "branching", "events", "mode", "concentration", "seed", "emission", "sigma", "name"),
    "fully_informative": ("depth", "branching", "leaf_events", "concentration", "seed", "emission", "sigma", "name"),
    "factorized_binary": ("depth", "branching", "factors", "concentration", "seed", "emission", "sigma", "name"),
    "summarization": ("depth", "branching", "events", "concentration", "seed", "emission", "sigma", "name"),
    "default": ("emission", "sigma", "mode"),
    "rhm": (*RHM_FIELDS, "emission", "sigma", "name"),
}
DEFAULT_DEPTH = {"random": 3, "fully_informative": 2, "factorized_binary": 2, "summarization": 3}
REGION_FIELDS = ("name", "events", "children")
FACTORIZATION_FIELDS = ("factors", "root_factor_priors", "factor_tables")
EMISSION_FIELDS = {"onehot": ("kind", "num_regions", "num_events"), "gaussian": ("kind", "sigma", "means", "scale"),
                   "custom": ("kind", "name", "dim")}


# ---------------------------------------------------------------------- describing values
def _short(v: object) -> str:
    return short(v, 40)


def _fail(path: str, expected: str, v: object) -> NoReturn:
    raise LadderSpecError(f"{path}: expected {expected}, got {_got(v)}")


def _key(path: str, key: object) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}" if path else key
    return f"{path}[{_short(key)}]"


def _unknown(d: dict, known: Iterable[str], where: str, hint: str = "") -> None:
    extra = [k for k in d if k not in known]
    if extra:
        names = sorted(_short(k) if not isinstance(k, str) else k for k in extra)
        raise LadderSpecError(f"{where}: unknown field(s) {names}; known: {sorted(known)}{hint}")


# ---------------------------------------------------------------------- scalars
def _is_number(v: object) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _int(v: Any, path: str, lo: int, hi: int, *, what: str = "an integer", integral_float: bool = False) -> int:
    """An integer in [lo, hi]; with ``integral_float``, also 2.0 for 2 (as the constructors accept)."""
    if integral_float and isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v).is_integer():
        v = int(v)
    if not _is_int(v):
        _fail(path, f"{what} in {lo}..{hi}", v)
    if not lo <= int(v) <= hi:
        raise LadderSpecError(f"{path}: expected {what} in {lo}..{hi}, got {_short(int(v))}")
    return int(v)


def _string(v: object, path: str, what: str = "a string") -> str:
    if not isinstance(v, str):
        _fail(path, what, v)
    return v


def _int_or_list(v: Any, path: str, length: int, lo: int, hi: int, what: str) -> tuple[int, ...]:
    """One integer for every level, or a list of ``length`` integers."""
    if _is_int(v):
        return (_int(v, path, lo, hi, what=what),) * length
    if not isinstance(v, (list, tuple)):
        _fail(path, f"an integer or a list of {length} integers ({what} in {lo}..{hi})", v)
    if len(v) != length:
        raise LadderSpecError(f"{path}: expected {length} entries, got {len(v)}")
    return tuple(_int(x, f"{path}[{i}]", lo, hi, what=what, integral_float=True) for i, x in enumerate(v))


# ---------------------------------------------------------------------- arrays
def _index_path(path: str, idx: Sequence[int]) -> str:
    return path + "".join(f"[{int(i)}]" for i in idx)


def _plain_ok(e: Any, integer: bool) -> bool:
    """Fast check of a plain Python int or float entry (anything else goes to :func:`_scalar`)."""
    t = type(e)
    if t is float:
        return e - e == 0 and (not integer or e.is_integer())  # inf - inf and nan - nan are nan
    return t is int and -(2**63) <= e < 2**63


def _walk(v: Any, path: str, integer: bool) -> tuple[int, ...]:
    """Shape of nested lists of numbers, raising at the first entry that is not one, by its path."""
    if not isinstance(v, (list, tuple)):
        if isinstance(v, (torch.Tensor, np.ndarray)):
            return _array(v, path, integer=integer)
        _scalar(v, path, integer)
        return ()
    shape = None
    for i, e in enumerate(v):
        if isinstance(e, (list, tuple, torch.Tensor, np.ndarray)):
            s = _walk(e, f"{path}[{i}]", integer)
        else:
            if not _plain_ok(e, integer):
                _scalar(e, f"{path}[{i}]", integer)
            s = ()
        if shape is None:
            shape = s
        elif s != shape:
            if len(s) != len(shape) and not (s and shape):
                _fail(f"{path}[{i}]", f"{'a list' if shape else 'a number'} like {path}[0]", e)
            raise LadderSpecError(f"{path}[{i}]: has shape {s} but {path}[0] has shape {shape} "
                                  "(rows of different lengths)")
    return (len(v), *(shape or ()))


def _scalar(v: Any, path: str, integer: bool) -> None:
    if integer:
        if isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v).is_integer():
            v = int(v)
        if not _is_int(v) or not -(2**63) <= int(v) < 2**63:
            _fail(path, "an integer event index", v)
        return
    if not _is_number(v):
        _fail(path, "a number", v)
    if not math.isfinite(_float(v)):
        _fail(path, "a finite number", v)


def _array(v: Any, path: str, *, integer: bool = False) -> tuple[int, ...]:
    """Nested lists of finite numbers (integers with ``integer``), a tensor or an ndarray: returns the shape."""
    what = "an array of integer event indices" if integer else "an array of numbers"
    if isinstance(v, (list, tuple)):
        shape = _walk(v, path, integer)
    elif isinstance(v, (torch.Tensor, np.ndarray)):
        a = v.detach().cpu() if isinstance(v, torch.Tensor) else v
        a = (a.double() if a.is_floating_point() else a).numpy() if isinstance(a, torch.Tensor) else a
        if a.dtype.kind not in "iuf":
            _fail(path, what, v)
        if a.dtype.kind == "f":
            bad = ~np.isfinite(a)
            if integer:
                bad |= np.mod(np.where(bad, 0, a), 1) != 0
            if bad.any():
                idx = np.argwhere(bad)[0]
                _fail(_index_path(path, idx), "an integer event index" if integer else "a finite number",
                      float(a[tuple(idx)]))
        shape = a.shape
    else:
        _fail(path, what, v)
    if math.prod(shape) > MAX_TABLE_ENTRIES:
        raise LadderSpecError(f"{path}: {math.prod(shape)} entries, more than {MAX_TABLE_ENTRIES}")
    return tuple(shape)


def _array_list(v: Any, path: str, *, integer: bool = False) -> None:
    if not isinstance(v, (list, tuple)):
        _fail(path, "a list of tables (one per level)", v)
    if len(v) > MAX_DEPTH:
        raise LadderSpecError(f"{path}: {len(v)} tables, but a ladder has at most {MAX_DEPTH} levels")
    for i, t in enumerate(v):
        _array(t, f"{path}[{i}]", integer=integer)


# ---------------------------------------------------------------------- structure
def _check_nesting(doc: Any) -> None:
    """Iteratively: no table or list nested more than MAX_NESTING deep (a RecursionError otherwise).

    The message names the path down to the first few levels (``prior[0][0]...``)."""
    stack = [(doc, 0, "")] if isinstance(doc, (dict, list, tuple)) else []  # only tables and lists are pushed
    while stack:
        v, depth, path = stack.pop()
        if depth >= MAX_NESTING:
            raise LadderSpecError(f"{path or 'ladder spec'}: nested more than {MAX_NESTING} levels deep")
        for k, c in v.items() if isinstance(v, dict) else enumerate(v):
            if isinstance(c, (dict, list, tuple)):
                if depth >= 3:
                    sub = path if path.endswith("...") else path + "..."
                else:
                    sub = f"{path}[{k}]" if isinstance(k, int) else _key(path, k)
                stack.append((c, depth + 1, sub))


def _check_header(d: dict, mode_required: bool) -> None:
    """``format``, ``version``, ``mode`` and ``name``, the fields of every spec."""
    fmt = d.get("format", "smaso-ladder")
    if not isinstance(fmt, str) or fmt not in GRAPH_TABLES:  # a smaso-graph-ladder spec is a graph's
        raise LadderSpecError(f"format: expected 'smaso-ladder', got {_short(fmt)}")
    version = d.get("version", 1)
    if not _is_number(version) or version not in (1, 1.0, 2, 2.0):
        raise LadderSpecError(f"version: this library reads ladder spec versions 1 and 2, got {_short(version)}")
    if mode_required and "mode" not in d:
        raise LadderSpecError("mode: missing from the ladder spec")
    if "mode" in d and (not isinstance(d["mode"], str) or d["mode"] not in MODES):
        raise LadderSpecError(f"mode: expected 'topdown' or 'bottomup', got {_short(d['mode'])}")
    if d.get("name") is not None:
        _string(d["name"], "name")


def check_spec(d: object) -> None:
    """Check a ladder spec document field by field; raise :class:`LadderSpecError` naming the first bad field.

    Accepts what :meth:`Ladder.from_dict` accepts: an explicit ladder (arrays as nested lists,
    tensors or ndarrays), a region-graph spec (its fields; the constructor checks its graph and tables) or a
    generator description ``{"kind": ..., options}``.
    """
    _check_nesting(d)
    if not isinstance(d, dict):
        raise LadderSpecError(f"ladder spec: expected a table/object, got {type(d).__name__}")
    if "pairwise_view_of" in d and not isinstance(d["pairwise_view_of"], str):
        _fail("pairwise_view_of", "the name of the teacher this ladder is a pairwise view of", d["pairwise_view_of"])
    if d.get("format") == "smaso-graph-ladder" or ("parents" in d and "kind" not in d):
        _check_graph(d)
    elif "kind" in d:
        _check_generator(d)
    else:
        _check_explicit(d)


def _check_emission_option(d: dict) -> None:
    """``emission`` (and ``sigma``) of a generator description."""
    emission = d.get("emission")
    if emission is not None and not isinstance(emission, dict) and (
            not isinstance(emission, str) or emission not in ("onehot", "gaussian")):
        _fail("emission", "'onehot', 'gaussian' or a table {kind = ...}", emission)
    if isinstance(emission, dict):
        check_emission_dict(emission)
    if emission == "gaussian":
        _check_sigma(d.get("sigma"))
    elif "sigma" in d:
        why = ("the emission table carries its own sigma" if isinstance(emission, dict)
               else "the leaves are one-hot")
        raise LadderSpecError(f"sigma: only applies with emission = 'gaussian' ({why})")


def _float(v: Any) -> float:
    try:
        return float(v)
    except OverflowError:
        return math.inf


def _check_generator(d: dict) -> None:
    kind = d["kind"]
    if not isinstance(kind, str) or kind not in GENERATOR_OPTIONS:
        raise LadderSpecError(f"kind: expected one of {sorted(GENERATOR_OPTIONS)}, got {_short(kind)}")
    options = GENERATOR_OPTIONS[kind]
    extra = sorted((k for k in d if k not in (*options, "kind", *HEADER)), key=str)
    if extra:
        fixed = " (its mode is fixed)" if extra[0] == "mode" else ""
        raise LadderSpecError(f"ladder spec of kind {kind!r}: unexpected keyword argument {_short(extra[0])}"
                              f"{fixed}; the options are {sorted(options)}")
    _check_header(d, mode_required=False)
    _check_emission_option(d)
    if kind == "default":
        return
    if kind == "rhm":
        _check_rhm(d, "")
        return
    depth = _check_depth(d.get("depth", DEFAULT_DEPTH[kind]))
    branching = _int_or_list(d.get("branching", 2), "branching", depth, 1, MAX_REGIONS, "children per region")
    _level_sizes(branching)
    if kind in ("random", "summarization"):
        events = _int_or_list(d.get("events", 4), "events", depth + 1, 1, MAX_EVENTS, "events per region")
        if events[0] < 2:
            raise LadderSpecError(f"events[0]: the label needs at least 2 classes, got {events[0]}")
    elif kind == "fully_informative":
        _int(d.get("leaf_events", 2), "leaf_events", 1, MAX_EVENTS)
    else:
        factors = d.get("factors", (1, 2, 2))
        _int_or_list(factors, "factors", depth + 1, 1, MAX_FACTORS, "binary factors per region")
    concentration = d.get("concentration")
    if concentration is not None or (kind != "fully_informative" and "concentration" in d):
        _check_concentration(concentration)
    if "seed" in d:
        _check_seed(d["seed"])
        if kind == "fully_informative" and concentration is None:
            raise LadderSpecError("seed: only applies with concentration (without it a fully_informative ladder "
                                  "has uniform leaf priors and nothing random)")


def _check_explicit(d: dict) -> None:
    _unknown(d, EXPLICIT_FIELDS, "ladder spec")
    _check_header(d, mode_required=True)
    mode = d["mode"]
    if "regions" in d:
        if "branching" in d or "events" in d:
            raise LadderSpecError("regions: give either a region tree or branching/events, not both")
        if "region_names" in d:
            raise LadderSpecError("region_names: does not apply with a region tree (the tree names the regions)")
        _check_regions(d["regions"])
    else:
        for key in ("branching", "events"):
            if key not in d:
                raise LadderSpecError(f"{key}: missing from the ladder spec")
        branching = d["branching"]
        if not isinstance(branching, (list, tuple)):
            _fail("branching", "a list of integers (children per region at each level)", branching)
        if not 1 <= len(branching) <= MAX_DEPTH:
            raise LadderSpecError(f"branching: expected 1..{MAX_DEPTH} entries (one per level below the root), "
                                  f"got {len(branching)}")
        branching = tuple(_int(b, f"branching[{i}]", 1, MAX_REGIONS, integral_float=True)
                          for i, b in enumerate(branching))
        _level_sizes(branching)
        events = d["events"]
        if not isinstance(events, (list, tuple)):
            _fail("events", f"a list of {len(branching) + 1} integers (events per region at each level)", events)
        if len(events) != len(branching) + 1:
            raise LadderSpecError(f"events: expected {len(branching) + 1} entries, got {len(events)}")
        for i, m in enumerate(events):
            _int(m, f"events[{i}]", 1, MAX_EVENTS, integral_float=True)
        if "region_names" in d:
            names = d["region_names"]
            if not isinstance(names, (list, tuple)):
                _fail("region_names", "a list of strings", names)
            for i, n in enumerate(names):
                _string(n, f"region_names[{i}]")
    _check_mode_tables(d, mode)
    if "productions" in d or d.get("rhm") is not None:
        _check_joint(d)
    elif mode == "topdown":
        _array(d["prior"], "prior")
        _array_list(d["tables"], "tables")
    else:
        _array(d["leaf_prior"], "leaf_prior")
        _array_list(d["lookup"], "lookup", integer=True)
    emission = d.get("emission")
    if emission is not None:
        if emission == "gaussian":
            raise LadderSpecError("emission: 'gaussian' needs a sigma; write a table "
                                  "{kind = 'gaussian', sigma = ...}")
        if emission != "onehot" or not isinstance(emission, str):
            if not isinstance(emission, dict):
                _fail("emission", "'onehot' or a table {kind = ...}", emission)
            check_emission_dict(emission)
    if d.get("factorization") is not None:
        _check_factorization(d["factorization"])


def _placeholder(v: Any) -> bool:
    """A level's absent table or productions: null, [] or {} (TOML has no null; :meth:`Ladder.to_dict` writes
    [] and {})."""
    if isinstance(v, (list, tuple, dict)):
        return len(v) == 0
    if isinstance(v, (torch.Tensor, np.ndarray)):
        return v.size == 0 if isinstance(v, np.ndarray) else v.numel() == 0
    return v is None


def _check_joint(d: dict) -> None:
    """``productions`` (one entry per level above the leaves: ``{rules, probs}`` where that level's regions draw
    their children jointly, else ``{}`` or null) beside ``tables`` (``[]`` or null exactly where productions
    are given), and the ``rhm`` table."""
    if d["mode"] != "topdown":
        raise LadderSpecError("productions: only for mode 'topdown' (children drawn jointly from their parent)")
    if d.get("factorization") is not None:
        raise LadderSpecError("factorization: does not apply with productions (a factorization describes "
                              "independent children)")
    if "productions" not in d:
        raise LadderSpecError("rhm: describes a ladder's productions, but the spec has no productions field")
    joint, tables = d["productions"], d["tables"]
    _array(d["prior"], "prior")
    for key, v in (("productions", joint), ("tables", tables)):
        if not isinstance(v, (list, tuple)):
            _fail(key, "a list of one entry per level above the leaves", v)
    depth = len(d["branching"]) if "branching" in d else len(tables)
    for key, v in (("productions", joint), ("tables", tables)):
        if len(v) != depth:
            raise LadderSpecError(f"{key}: expected {depth} entries (one per level above the leaves), got {len(v)}")
    for l, (p, t) in enumerate(zip(joint, tables, strict=True)):
        if _placeholder(p) == _placeholder(t):
            raise LadderSpecError(
                f"tables[{l}], productions[{l}]: give exactly one of them (the other [] / {{}} or null): "
                f"a table where the children are drawn independently, productions where they are drawn jointly")
        if not _placeholder(t):
            _array(t, f"tables[{l}]")
            continue
        path = f"productions[{l}]"
        if not isinstance(p, dict):
            _fail(path, "a table {rules, probs}", p)
        _unknown(p, PRODUCTION_FIELDS, path, " (a level's productions: rules and their probs)")
        if "rules" not in p:
            raise LadderSpecError(f"{path}.rules: missing (the productions' child events)")
        shape = _array(p["rules"], f"{path}.rules", integer=True)
        if len(shape) not in (3, 4):
            raise LadderSpecError(f"{path}.rules: expected shape (events, productions, children) or (regions, "
                                  f"events, productions, children), got shape {shape}")
        if p.get("probs") is not None:
            want = _array(p["probs"], f"{path}.probs")
            if want != shape[:-1]:
                raise LadderSpecError(f"{path}.probs: expected shape {shape[:-1]} (the rules' without the "
                                      f"children), got {want}")
    if d.get("rhm") is not None:
        if not isinstance(d["rhm"], dict):
            _fail("rhm", "a table {v, n_classes, m, s, L, seed, rules}", d["rhm"])
        _unknown(d["rhm"], RHM_FIELDS, "rhm", " (the Random Hierarchy Model's parameters)")
        _check_rhm(d["rhm"], "rhm")


def _check_rhm(d: dict, where: str) -> None:
    """The Random Hierarchy Model's parameters (``rhm`` table, or a ``{"kind": "rhm"}`` generator)."""
    path = (lambda k: f"{where}.{k}") if where else (lambda k: k)
    for key, lo, hi, what in (("v", 1, MAX_EVENTS, "symbols per level"), ("n_classes", 2, MAX_EVENTS, "classes"),
                              ("m", 1, MAX_EVENTS ** 2, "synonyms (productions per symbol)"),
                              ("s", 2, MAX_REGIONS, "patch size (children per node)"),
                              ("L", 1, MAX_DEPTH, "depth (levels below the root)")):
        if key not in d:
            raise LadderSpecError(f"{path(key)}: missing (an RHM needs v, n_classes, m, s and L)")
        _int(d[key], path(key), lo, hi, what=f"an integer ({what})")
    if "seed" in d:
        try:
            _check_seed(d["seed"])
        except LadderSpecError as e:
            raise LadderSpecError(f"{path('seed')}{str(e).removeprefix('seed')}") from None
    if "rules" in d and d["rules"] not in RHM_RULE_SOURCES:
        _fail(path("rules"), f"one of {list(RHM_RULE_SOURCES)}", d["rules"])


def _check_graph(d: dict) -> None:
    """The fields of a region-graph spec: ``smaso-ladder`` version 2 with ``parents``, or ``smaso-graph-ladder``
    version 1 (``tables[0] = []``, ``leaf_priors``, ``lookups``)."""
    fmt, version = d.get("format", "smaso-ladder"), d.get("version")
    if not isinstance(fmt, str) or fmt not in GRAPH_TABLES or version != (1 if fmt == "smaso-graph-ladder" else 2):
        raise LadderSpecError(f"format, version: a spec with parents is 'smaso-ladder' version 2 (or "
                              f"'smaso-graph-ladder' version 1), got {_short(fmt)} version {_short(version)}")
    tables = GRAPH_TABLES[fmt]
    fields = (*GRAPH_FIELDS, *tables["topdown"], *tables["bottomup"])
    what = "region-graph ladder spec" if version == 2 else "smaso-graph-ladder spec"
    unknown = sorted(set(d) - set(fields), key=str)
    if unknown:
        raise LadderSpecError(f"{unknown[0]}: unknown field of a {what} (expected {', '.join(fields)})")
    _check_header(d, mode_required=True)
    for key in ("events", "parents", "emission"):
        if key not in d:
            raise LadderSpecError(f"{key}: missing from the ladder spec")
    check_emission_dict(d["emission"])
    _check_mode_tables(d, d["mode"], tables)


def _check_regions(regions: Any) -> None:
    if not isinstance(regions, (list, tuple)) or not regions:
        raise LadderSpecError(f"regions: expected a non-empty list of {{name, events, children}} tables, "
                              f"got {_got(regions)}")
    if len(regions) > MAX_REGIONS:
        raise LadderSpecError(f"regions: {len(regions)} regions, more than {MAX_REGIONS}")
    for i, r in enumerate(regions):
        path = f"regions[{i}]"
        if not isinstance(r, dict) or "name" not in r or "events" not in r:
            missing = "" if not isinstance(r, dict) else \
                f" ({', '.join(repr(k) for k in ('name', 'events') if k not in r)} missing)"
            raise LadderSpecError(f"{path}: expected a table with 'name', 'events' and optional 'children', "
                                  f"got {_got(r)}{missing}")
        _unknown(r, REGION_FIELDS, path, " (a region has a name, its events and its children)")
        _string(r["name"], f"{path}.name", "a region name (a string)")
        _int(r["events"], f"{path}.events", 1, MAX_EVENTS, integral_float=True)
        children = r.get("children")
        if children is None:
            continue
        if not isinstance(children, (list, tuple)):
            _fail(f"{path}.children", "a list of region names", children)
        for j, c in enumerate(children):
            _string(c, f"{path}.children[{j}]", "a region name (a string)")


def _check_factorization(f: Any) -> None:
    if not isinstance(f, dict):
        _fail("factorization", "a table {factors, root_factor_priors, factor_tables}", f)
    _unknown(f, FACTORIZATION_FIELDS, "factorization")
    missing = [k for k in FACTORIZATION_FIELDS if k not in f]
    if missing:
        raise LadderSpecError(f"factorization: missing field(s) {sorted(missing)}")
    factors = f["factors"]
    if not isinstance(factors, (list, tuple)) or not 2 <= len(factors) <= MAX_DEPTH + 1:
        _fail("factorization.factors", f"a list of 2..{MAX_DEPTH + 1} integers (binary factors per level)", factors)
    for i, n in enumerate(factors):
        _int(n, f"factorization.factors[{i}]", 1, MAX_FACTORS, integral_float=True)
    _array(f["root_factor_priors"], "factorization.root_factor_priors")
    _array_list(f["factor_tables"], "factorization.factor_tables")


def check_emission_dict(e: object, path: str = "emission") -> None:
    """Check an emission table (the dict of ``Emission.to_dict``) field by field."""
    if not isinstance(e, dict) or "kind" not in e:
        raise LadderSpecError(f"{path}: expected a table with a 'kind' field ('onehot' or 'gaussian'), got {_got(e)}")
    kind = e["kind"]
    if not isinstance(kind, str) or kind not in EMISSION_FIELDS:
        raise LadderSpecError(f"{path}.kind: expected 'onehot' or 'gaussian' ('custom' in dataset files), "
                              f"got {_short(kind)}")
    known = EMISSION_FIELDS[kind]
    for k in e:
        if k not in known:
            if any(k in fields for fields in EMISSION_FIELDS.values()):
                raise LadderSpecError(f"{_key(path, k)}: does not apply to a {kind!r} emission "
                                      f"(its fields: {', '.join(known)})")
            _unknown(e, known, path)
    if kind == "onehot":
        for k in ("num_regions", "num_events"):
            if k in e:
                _int(e[k], _key(path, k), 1, MAX_REGIONS if k == "num_regions" else MAX_EVENTS)
    elif kind == "custom":
        if "dim" not in e:
            raise LadderSpecError(f"{path}.dim: required for a custom emission")
        _int(e["dim"], f"{path}.dim", 1, MAX_TABLE_ENTRIES)
        if "name" in e:
            _string(e["name"], f"{path}.name")
    else:
        if "sigma" not in e:
            raise LadderSpecError(f"{path}.sigma: required for a gaussian emission")
        sigma = e["sigma"]
        if _is_number(sigma):
            if not _is_positive(sigma):
                raise LadderSpecError(f"{path}.sigma: must be > 0 and finite, got {_short(sigma)}")
        elif isinstance(sigma, (list, tuple, torch.Tensor, np.ndarray)):
            _array(sigma, f"{path}.sigma")
        else:
            _fail(f"{path}.sigma", "a number > 0, or a list of one per leaf region", sigma)
        if "means" in e:
            if "scale" in e:
                raise LadderSpecError(f"{path}.scale: does not apply when {path}.means is given")
            shape = _array(e["means"], f"{path}.means")
            if len(shape) != 3:
                raise LadderSpecError(f"{path}.means: expected an array of shape (regions, events, dim), "
                                      f"got shape {shape}")
        if "scale" in e and not _is_positive(e["scale"]):
            _fail(f"{path}.scale", "a finite number > 0", e["scale"])


def emission_from_spec(d: dict, num_regions: int, num_events: int) -> Emission:
    """An emission from its spec dict (checked field by field first)."""
    check_emission_dict(d)
    if d["kind"] == "gaussian" and "means" not in d:
        _check_entries(num_regions * num_events * num_events, "emission",
                       f"gaussian means around one-hot, {num_regions} leaf regions x {num_events} x {num_events}")
    try:
        return emission_from_dict(d, num_regions, num_events)
    except LadderSpecError:
        raise
    except (ValueError, TypeError) as e:
        raise LadderSpecError(str(e)) from None
