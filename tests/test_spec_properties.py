"""The ladder spec loader on any input (issue 14): every bad document is one LadderSpecError naming the field.

Property tests (hypothesis) feed :meth:`Ladder.from_dict` and :func:`teachers.spec_io.load_spec` arbitrary
JSON-like documents, generator descriptions with arbitrary options, mutations of valid specs (a field
replaced by a wrong-typed or out-of-range value, a key deleted, an unknown key inserted at any level, a
field nested thousands of levels deep) and arbitrary file contents.  The only failure allowed is
:class:`LadderSpecError` with a one-line message; whatever loads must survive ``to_dict``/``from_dict``
and a JSON file unchanged (same fingerprint).  Plain tests below pin one message per class of problem
found by the audit.
"""

from __future__ import annotations

import copy
import json
import math
import re
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from teachers import GaussianEmission, Ladder, LadderSpecError
from teachers.ladder import MAX_DEPTH, MAX_EVENTS, MAX_LOOKUP, MAX_REGIONS, MAX_TABLE_ENTRIES
from teachers.spec_check import MAX_NESTING
from teachers.spec_io import load_spec, save_spec, spec_to_jsonable

EXAMPLES = settings(max_examples=examples(2000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
TMP = Path(tempfile.mkdtemp(prefix="smaso-spec-properties-"))

KINDS = ("random", "fully_informative", "factorized_binary", "summarization", "default")
KEYS = ("format", "version", "name", "mode", "branching", "events", "regions", "region_names", "emission", "prior",
        "tables", "leaf_prior", "lookup", "factorization", "kind", "depth", "concentration", "seed", "sigma",
        "leaf_events", "factors", "children", "means", "scale", "num_regions", "num_events", "dim",
        "factor_tables", "root_factor_priors")
WORDS = ("topdown", "bottomup", "onehot", "gaussian", "custom", "smaso-ladder", *KINDS)


def _face_ladder() -> Ladder:
    regions = [{"name": "face", "events": 2, "children": ["eyes", "mouth"]},
               {"name": "eyes", "events": 3}, {"name": "mouth", "events": 3, "children": []}]
    return Ladder.from_dict({"mode": "topdown", "regions": regions, "prior": [0.4, 0.6],
                             "tables": [[[0.7, 0.2, 0.1], [0.1, 0.2, 0.7]]]})


def _valid_ladders() -> list[Ladder]:
    return [
        Ladder.random(depth=2, branching=2, events=[2, 3, 2], seed=1),
        Ladder.random(depth=2, branching=[2, 1], events=[3, 2, 2], mode="bottomup", seed=2),
        Ladder.random(depth=1, branching=2, events=[2, 2], seed=3, emission="gaussian", sigma=0.5),
        Ladder.fully_informative(depth=1, branching=2, leaf_events=2),
        Ladder.factorized_binary(depth=1, branching=2, factors=(1, 2), seed=4),
        Ladder.summarization(depth=1, branching=2, events=[3, 2], seed=5),
        Ladder.random(depth=1, branching=2, events=[2, 2], seed=6).with_emission(
            GaussianEmission(torch.arange(8.0).reshape(2, 2, 2), torch.tensor([0.5, 2.0]))),
        _face_ladder(),
    ]


VALID = _valid_ladders()
GENERATORS = [
    {"kind": "random", "depth": 2, "branching": 2, "events": [2, 3, 2], "seed": 1, "concentration": 0.5},
    {"kind": "random", "depth": 1, "branching": [3], "events": 2, "mode": "bottomup", "emission": "gaussian",
     "sigma": 0.3, "name": "r"},
    {"kind": "fully_informative", "depth": 1, "branching": 2, "leaf_events": 2, "concentration": 1.0, "seed": 2},
    {"kind": "factorized_binary", "depth": 1, "branching": 2, "factors": [1, 2], "seed": 3,
     "emission": {"kind": "gaussian", "sigma": 0.5}},
    {"kind": "summarization", "depth": 1, "branching": 2, "events": [3, 2], "concentration": 2.0, "seed": 4},
    {"kind": "default", "mode": "topdown", "format": "smaso-ladder", "version": 1},
]
BASES = [lad.to_dict() for lad in VALID] + [spec_to_jsonable(lad.to_dict()) for lad in VALID] + GENERATORS


# ---------------------------------------------------------------------- strategies
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 7), st.integers(), st.floats(),
    st.sampled_from([0, -1, 2**31, 2**63, 2**64 + 1, 10**400, math.inf, -math.inf, math.nan, 1e308, 0.5, 2.0]),
    st.text(max_size=6), st.sampled_from(WORDS),
)
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=6))
json_values = st.recursive(
    scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(keys, kids, max_size=4), max_leaves=10)
documents = st.one_of(st.dictionaries(keys, json_values, max_size=8), json_values)
generator_documents = st.builds(
    lambda kind, options: {"kind": kind, **options}, st.sampled_from([*KINDS, "tree", ["random"], 1]),
    st.dictionaries(st.sampled_from(KEYS), json_values, max_size=5))


def _paths(obj, prefix=()):
    """Every (container path, key) inside a document (dicts and lists, not tensors)."""
    out = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        out.append((*prefix, k))
        out += _paths(v, (*prefix, k))
    return out


def _containers(obj, prefix=()):
    out = [prefix] if isinstance(obj, dict) else []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        out += _containers(v, (*prefix, k))
    return out


def _at(obj, path):
    for k in path:
        obj = obj[k]
    return obj


def _nearby(value):
    """Values close to a valid one: off by one, empty, truncated or extended, a scalar for a list."""
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if isinstance(value, bool):
        return st.just(not value)
    if isinstance(value, int):
        return st.sampled_from([value - 1, value + 1, 0, -value, value * 1000,
                                float(value) if abs(value) < 2**1000 else 0.5, str(value)])
    if isinstance(value, float):
        whole = int(value) if math.isfinite(value) else 0
        return st.sampled_from([-value, 0.0, value * 1e300, math.nan, math.inf, whole])
    if isinstance(value, list):
        return st.sampled_from([[], value[:-1], [*value, *value[-1:]], [value], value[0] if value else 0, str(value)])
    if isinstance(value, str):
        return st.sampled_from(["", value.upper(), value + "x", [value], list(value)])
    return st.just(None)


@st.composite
def mutated_specs(draw):
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 2))):
        op = draw(st.sampled_from(["replace", "nearby", "delete", "insert", "nest"]))
        paths = _paths(doc)
        if op in ("replace", "nearby", "delete", "nest") and paths:
            path = draw(st.sampled_from(paths))
            parent, key = _at(doc, path[:-1]), path[-1]
            if op == "delete":
                del parent[key]
            elif op == "replace":
                parent[key] = draw(json_values)
            elif op == "nearby":
                parent[key] = draw(_nearby(parent[key]))
            else:
                value = parent[key]
                for wrap in draw(st.lists(st.booleans(), min_size=1, max_size=40)):
                    value = [value] if wrap else {"x": value}
                parent[key] = value
        else:
            target = _at(doc, draw(st.sampled_from(_containers(doc))))
            target[draw(keys)] = draw(json_values)
    return doc


@st.composite
def valid_specs(draw):
    """A valid spec: a generator description with small random options, or the explicit dict of such a
    ladder (tensors or nested lists, possibly with arbitrary distinct region names)."""
    kind = draw(st.sampled_from(KINDS))
    d = {"kind": kind}
    emission = draw(st.sampled_from(["none", "onehot", "gaussian", "table"]))
    sigma = draw(st.floats(0.01, 10.0))
    if emission == "onehot":
        d["emission"] = "onehot"
    elif emission == "gaussian":
        d.update(emission="gaussian", sigma=sigma)
    elif emission == "table":
        d["emission"] = {"kind": "gaussian", "sigma": sigma, "scale": draw(st.floats(0.1, 3.0))}
    if kind == "default":
        d["mode"] = draw(st.sampled_from(["topdown", "bottomup"]))
    else:
        depth = draw(st.integers(1, 2 if kind == "fully_informative" else 3))
        top = 2 if kind == "fully_informative" else 3
        branching = draw(st.lists(st.integers(1, top), min_size=depth, max_size=depth))
        d.update(depth=depth, branching=branching if draw(st.booleans()) or len(set(branching)) > 1 else branching[0],
                 seed=draw(st.integers(0, 2**64)), concentration=draw(st.floats(0.05, 50.0)))
        if draw(st.booleans()):
            d["name"] = draw(st.text(max_size=8))
        if kind in ("random", "summarization"):
            mode = "bottomup" if kind == "summarization" else draw(st.sampled_from(["topdown", "bottomup"]))
            if kind == "random":
                d["mode"] = mode
            events = [draw(st.integers(1, 4))]
            for b in reversed(branching):  # bottom-up: a parent's m is at most m_child ** b
                most = min(4, events[0] ** b) if mode == "bottomup" else 4
                events.insert(0, draw(st.integers(1, most)))
            assume(events[0] >= 2)
            d["events"] = events
        elif kind == "fully_informative":
            d["leaf_events"] = draw(st.integers(2, 3))
        else:
            factors = [draw(st.integers(1, 2))]
            for _ in range(depth):  # at most 3 factors (8 events) per region: small tables
                factors.append(factors[-1] * draw(st.integers(1, 3 // factors[-1])))
            d["factors"] = factors
    if draw(st.booleans()):
        return d
    lad = Ladder.from_dict(d)
    explicit = lad.to_dict()
    if draw(st.booleans()):
        names = draw(st.lists(st.text(max_size=5), min_size=lad.total_regions, max_size=lad.total_regions,
                              unique=True))
        explicit["region_names"] = names
    return spec_to_jsonable(explicit) if draw(st.booleans()) else explicit


# ---------------------------------------------------------------------- helpers
def _one_line_spec_error(call):
    """Run ``call``: returns the ladder, or None after a LadderSpecError with a one-line message."""
    try:
        return call()
    except LadderSpecError as e:
        assert str(e) and "\n" not in str(e), repr(str(e))
        return None


def _check_round_trip(lad: Ladder) -> None:
    back = Ladder.from_dict(lad.to_dict())
    assert back.fingerprint() == lad.fingerprint()
    assert back.region_names() == lad.region_names()
    via_json = Ladder.from_dict(json.loads(json.dumps(spec_to_jsonable(lad.to_dict()))))
    assert via_json.fingerprint() == lad.fingerprint()


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v) if isinstance(v, float) else str(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value("null" if e is None else e) for e in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_value(str(k))} = {_toml_value(e)}" for k, e in v.items()
                               if e is not None) + "}"
    return json.dumps(str(v))


def _to_toml(doc: dict) -> str:
    return "".join(f"{_toml_value(str(k))} = {_toml_value(v)}\n" for k, v in doc.items() if v is not None)


def _write(name: str, text: str) -> Path:
    p = TMP / name
    p.write_text(text, encoding="utf-8")
    return p


# ---------------------------------------------------------------------- properties
def _loads_and_round_trips_or_refuses(doc) -> None:
    """The property of every document target: one-line LadderSpecError, or a ladder that round-trips."""
    lad = _one_line_spec_error(lambda: Ladder.from_dict(doc))
    if lad is not None:
        _check_round_trip(lad)


@EXAMPLES
@given(documents)
def test_any_document_is_a_ladder_or_a_spec_error(doc):
    _loads_and_round_trips_or_refuses(doc)


@EXAMPLES
@given(generator_documents)
def test_any_generator_description_is_a_ladder_or_a_spec_error(doc):
    _loads_and_round_trips_or_refuses(doc)


@EXAMPLES
@given(mutated_specs())
def test_mutated_valid_specs_fail_cleanly_or_round_trip(doc):
    _loads_and_round_trips_or_refuses(doc)


@EXAMPLES
@given(valid_specs())
def test_valid_specs_load_and_round_trip(doc):
    lad = Ladder.from_dict(doc)  # no error allowed
    _check_round_trip(lad)
    if "region_names" in doc:
        assert lad.region_names() == list(doc["region_names"])
    assert load_spec(save_spec(lad, TMP / "valid.json")).fingerprint() == lad.fingerprint()


@EXAMPLES
@given(st.one_of(documents, mutated_specs().map(spec_to_jsonable)), st.booleans())
def test_any_spec_file_is_a_ladder_or_a_spec_error(doc, toml):
    if toml:
        assume(isinstance(doc, dict))
        path = _write("doc.toml", _to_toml(doc))
    else:
        path = _write("doc.json", json.dumps(doc))
    lad = _one_line_spec_error(lambda: load_spec(path))
    if lad is not None:
        _check_round_trip(lad)
        assert load_spec(save_spec(lad, TMP / "back.json")).fingerprint() == lad.fingerprint()


@EXAMPLES
@given(st.one_of(st.text(max_size=60), st.binary(max_size=60).map(lambda b: b.decode("latin-1"))),
       st.sampled_from(["raw.json", "raw.toml"]))
def test_any_file_text_is_a_ladder_or_a_spec_error(text, name):
    lad = _one_line_spec_error(lambda: load_spec(_write(name, text)))
    if lad is not None:
        _check_round_trip(lad)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 20_000), st.sampled_from(["[", "{\"a\": "]), st.sampled_from(["prior", "emission", "x"]),
       st.booleans())
def test_deeply_nested_files_and_documents(depth, opener, field, toml):
    closer = "]" if opener == "[" else "}"
    if toml:
        opener = "[" if opener == "[" else "{a = "
        text = f'mode = "topdown"\n{field} = {opener * depth}1{closer * depth}\n'
    else:
        text = f'{{"mode": "topdown", "{field}": {opener * depth}1{closer * depth}}}'
    _one_line_spec_error(lambda: load_spec(_write("deep.toml" if toml else "deep.json", text)))
    value = 1
    for _ in range(depth):
        value = [value]
    _one_line_spec_error(lambda: Ladder.from_dict({"mode": "topdown", field: value}))


# ---------------------------------------------------------------------- one plain test per class
def _spec(**changes):
    d = spec_to_jsonable(Ladder.random(depth=2, branching=2, events=[2, 3, 2], seed=1).to_dict())
    d.update(changes)
    return d


def _tree(*regions, **changes):
    d = _spec(**changes)
    del d["branching"], d["events"]
    d["regions"] = list(regions)
    return d


ROOT = {"name": "root", "events": 2, "children": ["a", "b"]}
A, B = {"name": "a", "events": 3, "children": ["c", "d"]}, {"name": "b", "events": 3, "children": ["e", "f"]}
LEAVES = [{"name": n, "events": 2} for n in "cdef"]


def raises(match: str):
    return pytest.raises(LadderSpecError, match="^" + match)


def test_wrong_types_are_named_before_any_conversion():
    with raises(r"kind: expected one of \[.*\], got \['random'\]"):
        Ladder.from_dict({"kind": ["random"]})
    with raises(r"regions\[1\]\.children: expected a list of region names, got an integer \(3\)"):
        Ladder.from_dict(_tree(ROOT, dict(A, children=3), B, *LEAVES))
    with raises(r"regions\[0\]\.events: expected an integer in 1\.\.65536, got a string \('2'\)"):
        Ladder.from_dict(_tree(dict(ROOT, events="2"), A, B, *LEAVES))
    with raises(r"regions\[0\]\.name: expected a region name \(a string\), got a list"):
        Ladder.from_dict(_tree(dict(ROOT, name=["root"]), A, B, *LEAVES))
    with raises(r"tables\[1\]\[0\]\[2\]\[1\]: expected a number, got a string \('0\.5'\)"):
        d = _spec()
        d["tables"][1][0][2][1] = "0.5"
        Ladder.from_dict(d)
    with raises(r"prior\[0\]: expected a number, got a boolean \(true\)"):
        Ladder.from_dict(_spec(prior=[True, 0.0]))
    with raises(r"branching: expected an integer or a list of 2 integers .*, got a table"):
        Ladder.from_dict({"kind": "random", "depth": 2, "branching": {"b": 2}})
    with raises(r"emission\.sigma: expected a number > 0, or a list of one per leaf region, got a string"):
        Ladder.from_dict(_spec(emission={"kind": "gaussian", "sigma": "0.5"}))
    with raises(r"concentration: must be > 0 and finite, got a string \('1'\)"):
        Ladder.from_dict({"kind": "random", "depth": 1, "concentration": "1"})
    with raises(r"name: expected a string, got an integer \(3\)"):
        Ladder.from_dict(_spec(name=3))


def test_infinity_and_huge_numbers_never_reach_an_integer_conversion():
    with raises(r"events\[1\]: expected events per region in 1\.\.65536, got a number \(inf\)"):
        Ladder.from_dict({"kind": "random", "depth": 1, "events": [2, math.inf]})
    with raises(r"depth: expected an integer >= 1, got inf"):
        Ladder.from_dict({"kind": "random", "depth": math.inf})
    with raises(r"events\[2\]: expected an integer in 1\.\.65536, got a number \(inf\)"):
        Ladder.from_dict(_spec(events=[2, 3, math.inf]))
    with raises(r"regions\[0\]\.events: expected an integer in 1\.\.65536, got a number \(-inf\)"):
        Ladder.from_dict(_tree(dict(ROOT, events=-math.inf), A, B, *LEAVES))
    with raises(r"prior\[1\]: expected a finite number, got a number \(inf\)"):
        Ladder.from_dict(_spec(prior=[0.5, math.inf]))
    with raises(r"prior\[1\]: expected a finite number, got an integer \(<a 1329-bit integer>\)"):
        Ladder.from_dict(_spec(prior=[0.5, 10**400]))
    with raises(r"seed: expected a non-negative integer, got a number \(inf\)"):
        Ladder.from_dict({"kind": "random", "depth": 1, "seed": math.inf})
    with raises(r"branching: expected a list of integers, got \[inf\]"):  # the constructor, called directly
        Ladder([math.inf], [2, 2], prior=[0.5, 0.5], tables=[[[0.5, 0.5]] * 2])
    d = spec_to_jsonable(Ladder.random(depth=1, events=[2, 2], mode="bottomup", seed=0).to_dict())
    d["lookup"][0][0][1] = math.inf
    with raises(r"lookup\[0\]\[0\]\[1\]: expected an integer event index, got a number \(inf\)"):
        Ladder.from_dict(d)


def test_zero_events_is_a_spec_error_not_numpys():
    with raises(r"events\[1\]: expected events per region in 1\.\.65536, got 0"):
        Ladder.from_dict({"kind": "random", "depth": 1, "events": [2, 0]})
    with raises(r"events\[1\]: expected an integer in 1\.\.65536, got 0"):
        Ladder.from_dict(_spec(events=[2, 0, 2]))
    with raises(r"leaf_events: expected an integer in 1\.\.65536, got 0"):
        Ladder.from_dict({"kind": "fully_informative", "depth": 1, "leaf_events": 0})
    with raises(r"events: every entry must be >= 1, got \[2, 0\]"):  # the constructors, called directly
        Ladder.random(depth=1, events=[2, 0])
    with raises(r"events: every entry must be >= 1"):
        Ladder.summarization(depth=1, events=[2, 0])


def test_deep_nesting_is_a_spec_error_not_a_recursion_error():
    value = 0.5
    for _ in range(100_000):
        value = [value]
    with raises(rf"prior\[0\]\[0\]\.\.\.: nested more than {MAX_NESTING} levels deep"):
        Ladder.from_dict(_spec(prior=value))
    with raises(rf"spec: '.*deep\.json' is nested too deeply \(a spec is at most {MAX_NESTING} levels deep\)"):
        load_spec(_write("deep.json", '{"mode": "topdown", "prior": ' + "[" * 100_000 + "]" * 100_000 + "}"))
    with raises(r"spec: '.*deep\.toml' is nested too deeply"):
        load_spec(_write("deep.toml", "prior = " + "[" * 100_000 + "]" * 100_000 + "\n"))


def test_unknown_keys_are_rejected_at_every_level():
    with raises(r"ladder spec: unknown field\(s\) \['colour'\]"):
        Ladder.from_dict(_spec(colour=1))
    with raises(r"emission: unknown field\(s\) \['colour'\]"):
        Ladder.from_dict(_spec(emission={"kind": "onehot", "colour": 1}))
    with raises(r"regions\[2\]: unknown field\(s\) \['colour'\]"):
        Ladder.from_dict(_tree(ROOT, A, dict(B, colour="red"), *LEAVES))
    d = spec_to_jsonable(Ladder.factorized_binary(depth=1, factors=(1, 2)).to_dict())
    d["factorization"]["colour"] = 1
    with raises(r"factorization: unknown field\(s\) \['colour'\]"):
        Ladder.from_dict(d)
    with raises(r"ladder spec of kind 'random': unexpected keyword argument 'colour'"):
        Ladder.from_dict({"kind": "random", "colour": 1})
    with raises(r"emission: unknown field\(s\) \['colour'\]"):
        Ladder.from_dict({"kind": "random", "depth": 1, "emission": {"kind": "gaussian", "sigma": 1, "colour": 1}})


def test_string_children_are_not_a_list_of_letters():
    with raises(r"regions\[1\]\.children: expected a list of region names, got a string \('cd'\)"):
        Ladder.from_dict(_tree(ROOT, dict(A, children="cd"), B, *LEAVES))
    with raises(r"regions\[1\]\.children\[1\]: expected a region name \(a string\), got an integer \(4\)"):
        Ladder.from_dict(_tree(ROOT, dict(A, children=["c", 4]), B, *LEAVES))
    with raises(r"region_names: expected a list of strings, got a string"):
        Ladder.from_dict(_spec(region_names="abcdefg"))


def test_options_that_do_not_apply_are_rejected():
    with raises(r"sigma: only applies with emission = 'gaussian' \(the leaves are one-hot\)"):
        Ladder.from_dict({"kind": "random", "depth": 1, "sigma": 0.5})
    with raises(r"sigma: only applies with emission = 'gaussian'"):
        Ladder.from_dict({"kind": "default", "sigma": 0.5})
    with raises(r"sigma: only applies with emission = 'gaussian' \(the emission table carries its own sigma\)"):
        Ladder.from_dict({"kind": "random", "depth": 1, "emission": {"kind": "gaussian", "sigma": 1}, "sigma": 1})
    with raises(r"sigma: a gaussian emission needs a finite sigma > 0, got null"):
        Ladder.from_dict({"kind": "summarization", "depth": 1, "events": [2, 2], "emission": "gaussian"})
    with raises(r"seed: only applies with concentration"):
        Ladder.from_dict({"kind": "fully_informative", "depth": 1, "seed": 3})
    with raises(r"concentration: must be > 0 and finite, got null"):
        Ladder.from_dict({"kind": "random", "depth": 1, "concentration": None})
    with raises(r"ladder spec of kind 'summarization': unexpected keyword argument 'mode' \(its mode is fixed\)"):
        Ladder.from_dict({"kind": "summarization", "mode": "topdown"})
    with raises(r"ladder spec of kind 'default': unexpected keyword argument 'concentration'"):
        Ladder.from_dict({"kind": "default", "concentration": 1.0})
    with raises(r"emission\.sigma: does not apply to a 'onehot' emission"):
        Ladder.from_dict(_spec(emission={"kind": "onehot", "sigma": 1.0}))
    with raises(r"emission\.scale: does not apply when emission\.means is given"):
        Ladder.from_dict(_spec(emission={"kind": "gaussian", "sigma": 1.0, "scale": 2.0, "means": [[[0.0]]]}))
    with raises(r"emission: 'gaussian' needs a sigma"):
        Ladder.from_dict(_spec(emission="gaussian"))
    with raises(r"leaf_prior: only for mode='bottomup'; a topdown ladder takes prior and tables"):
        Ladder.from_dict(_spec(leaf_prior=[0.5, 0.5]))
    bu = spec_to_jsonable(Ladder.random(depth=1, mode="bottomup", events=[2, 2]).to_dict())
    with raises(r"factorization: only for mode='topdown'"):
        Ladder.from_dict(dict(bu, factorization={"factors": [1, 1]}))
    with raises(r"region_names: does not apply with a region tree"):
        Ladder.from_dict(_tree(ROOT, A, B, *LEAVES, region_names=list("rabcdef")))


def test_sizes_are_bounded_before_allocation():
    with raises(rf"depth: at most {MAX_DEPTH} levels, got 1000000"):
        Ladder.from_dict({"kind": "random", "depth": 10**6})
    with raises(rf"branching: \[10, 10, .*\] gives more than {MAX_REGIONS} regions"):
        Ladder.from_dict({"kind": "random", "depth": 30, "branching": 10})
    with raises(rf"branching: expected 1\.\.{MAX_DEPTH} entries"):
        Ladder.from_dict(_spec(branching=[1] * 100, events=[2] * 101))
    with raises(rf"events\[1\]: expected an integer in 1\.\.{MAX_EVENTS}, got {MAX_EVENTS + 1}"):
        Ladder.from_dict(_spec(events=[2, MAX_EVENTS + 1, 2]))
    with raises(rf"lookup\[0\]: events\[1\]\^branching\[0\] = 2\^1000000 = over 2\^64 .*exceeds {MAX_LOOKUP}"):
        Ladder.from_dict({"kind": "summarization", "depth": 1, "branching": 10**6, "events": [2, 2]})
    with raises(rf"emission: gaussian means around one-hot, 2 leaf regions x 65536 x 65536 = \d+ entries exceeds "
                rf"{MAX_TABLE_ENTRIES}"):
        Ladder.from_dict({"kind": "random", "depth": 1, "events": [2, 65536], "emission": "gaussian", "sigma": 1})
    with raises(rf"tables\[0\]: 2 regions x 65536 x 65536 events = \d+ entries exceeds {MAX_TABLE_ENTRIES}"):
        Ladder.random(depth=1, events=[65536, 65536])
    with raises(r"fully informative ladder: level 0 would need 2\^1000000 events"):
        Ladder.from_dict({"kind": "fully_informative", "depth": 1, "branching": 10**6})
    chain = [{"name": f"r{i}", "events": 2, "children": [f"r{i + 1}"]} for i in range(100)]
    with raises(rf"regions: the tree is more than {MAX_DEPTH} levels deep below the root 'r0'"):
        Ladder.from_dict(_tree(*chain, {"name": "r100", "events": 2}))


def test_file_level_errors_are_one_line():
    with raises(r"spec: '.*dup\.json' is not valid JSON: key 'mode' appears twice in one object"):
        load_spec(_write("dup.json", '{"mode": "topdown", "mode": "bottomup"}'))
    with raises(r"spec: '.*long\.json' is not valid JSON: Exceeds the limit \(4300 digits\)"):
        load_spec(_write("long.json", "1" * 5000))
    with raises(r"ladder spec: expected a table/object, got list"):
        load_spec(_write("list.json", "[1, 2]"))
    with raises(r"prior\[1\]: expected a finite number, got a number \(nan\)"):
        load_spec(_write("nan.json", json.dumps(_spec(prior=[0.5, math.nan]))))


def test_spec_error_messages_in_this_file_name_their_field():
    """Every message above starts with a field path (or 'spec:' / 'ladder spec' for the whole file)."""
    field = re.compile(r"^([A-Za-z_][\w.]*(\[\d+\])*(\.[A-Za-z_]\w*(\[\d+\])*)*|ladder spec|spec|fully informative "
                       r"ladder)[:\s]")
    for doc in ({"kind": ["random"]}, _spec(prior=[True]), _tree(ROOT, dict(A, children="cd"), B, *LEAVES)):
        with pytest.raises(LadderSpecError) as e:
            Ladder.from_dict(doc)
        assert field.match(str(e.value)), str(e.value)
