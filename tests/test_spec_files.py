"""Spec files a person can write and read (issue 37): ``.toml`` written as TOML, one table row per line, the JSON
Schema the loader checks, the documented examples of docs/spec-format.md, and the CLI options ``--spec`` makes
meaningless refused with both names."""

from __future__ import annotations

import json
import re
import tomllib
from collections import deque
from pathlib import Path

import jsonschema
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from test_cli_errors import _error  # one smaso: error: line, exit status 2

from smaso.cli import main
from teachers import Ladder
from teachers.spec_check import check_spec
from teachers.spec_io import load_spec, save_spec, spec_to_jsonable
from teachers.spec_schema import _validator, check_spec_schema, spec_schema
from teachers.spec_text import WIDTH, spec_text
from teachers.validation import LadderSpecError

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "spec-format.md"
LEGACY = sorted((ROOT / "tests" / "data" / "legacy").glob("*_spec_v1.json"))


def _ladders() -> dict[str, Ladder]:
    """One ladder of every kind the library writes: both modes, per-region and shared tables, Gaussian leaves
    (one sigma and one per leaf), a factorization, region names, region graphs with per-region tables."""
    tree = Ladder.random(2, 2, 3, seed=3)
    overlap = [[[]], [[0], [0], [0]], [[0], [0, 1], [1, 2], [2]]]  # per-region event counts and table shapes
    return {
        "random-topdown": tree,
        "random-bottomup-28": Ladder.random(3, [3, 2, 3], 4, mode="bottomup", seed=1),
        "default": Ladder.default(),
        "topdown-default": Ladder.default(mode="topdown"),
        "fully-informative": Ladder.fully_informative(2, 2, 3, concentration=0.5, seed=2),
        "factorized": Ladder.factorized_binary(2, 2, [1, 2, 2], seed=4),
        "gaussian": Ladder.random(2, [2, 3], [3, 2, 4], emission="gaussian", sigma=0.25),
        "gaussian-per-leaf": tree.with_emission({"kind": "gaussian", "sigma": [0.1, 0.2, 0.3, 0.4], "scale": 2.0}),
        "named": Ladder([2, 2], [3, 3, 3], mode="topdown", prior=tree.prior, tables=tree.to_dict()["tables"],
                        region_names=["root", "a", "b", "a.1", "a.2", "b.1", "b.2"],
                        name='quote " tab\t newline\n del\x7f \u00e9 \U0001f600'),
        "conv1d": Ladder.conv1d(8, [3, 2, 3], [1, 2, 1], [2, 3, 3, 2], seed=1),
        "graph-bottomup": Ladder.random(events=[2, [2, 3, 2], 2], parents=overlap, mode="bottomup",
                                        emission="gaussian", sigma=0.7, seed=2),
        "graph-topdown": Ladder.random(events=[2, [2, 3, 2], 2], parents=overlap, seed=2),
        "conv2d": Ladder.conv2d((4, 4), [2, 2], [2, 2], [2, 3, 2], mode="bottomup", sigma=0.3),
        "rhm": Ladder.rhm(4, 2, 2, 2, 2, seed=1, rules="pcsl"),  # productions, and the rhm table
    }


LADDERS = _ladders()


# ---------------------------------------------------------------------- files: TOML, JSON, round trip
@pytest.mark.parametrize("name", sorted(LADDERS))
def test_every_ladder_round_trips_through_both_formats(tmp_path, name):
    lad = LADDERS[name]
    doc = spec_to_jsonable(lad.to_dict())
    for suffix in (".json", ".toml") if name != "named" else (".json", ".toml", ".TOML", ".spec"):
        path = save_spec(lad, tmp_path / f"ladder{suffix}")
        text = path.read_text()
        parsed = tomllib.loads(text) if suffix.lower() == ".toml" else json.loads(text)  # each format's own parser
        assert parsed == doc
        back = load_spec(path)
        assert back.fingerprint() == lad.fingerprint()  # every table's dtype, shape and bytes
        assert spec_to_jsonable(back.to_dict()) == doc


def test_cli_spec_toml_is_read_back_by_sample(tmp_path, capsys):
    """The issue's report: `spec --out x.toml` wrote JSON, which `sample ladder --spec x.toml` then refused."""
    spec, data = tmp_path / "x.toml", tmp_path / "d.npz"
    assert main(["-q", "spec", "--depth", "2", "--events", "3", "--out", str(spec)]) == 0
    assert tomllib.loads(spec.read_text())["branching"] == [2, 2]
    assert main(["-q", "sample", "ladder", "--spec", str(spec), "-n", "64", "--out", str(data)]) == 0
    assert load_spec(spec).fingerprint() == Ladder.random(2, 2, 3, seed=0).fingerprint()
    # and converting: a JSON file rewritten as TOML is the same ladder
    assert main(["-q", "spec", "--spec", str(spec), "--out", str(tmp_path / "y.json")]) == 0
    assert load_spec(tmp_path / "y.json").fingerprint() == load_spec(spec).fingerprint()
    capsys.readouterr()
    assert main(["spec", "--spec", str(spec), "--out", "-"]) == 0
    assert json.loads(capsys.readouterr().out) == spec_to_jsonable(load_spec(spec).to_dict())


@pytest.mark.parametrize("doc, fmt, field", [
    ({"kind": "random", "concentration": None}, "toml", "concentration: TOML has no null"),
    ({"kind": "random", "seed": 2**64}, "toml", "seed: the integer 18446744073709551616 does not fit"),
    ({"kind": "random", "concentration": float("nan")}, "json", "concentration: expected a finite number"),
    ({"mode": "topdown", "prior": [0.5, float("inf")]}, "toml", "prior[1]: expected a finite number"),
    ({"emission": {"sigma": torch.tensor(1.0)}}, "json", "emission.sigma: expected a number, string"),
])
def test_writer_refuses_what_the_format_cannot_hold_naming_the_field(doc, fmt, field):
    with pytest.raises((ValueError, TypeError), match=re.escape(field)):
        spec_text(doc, fmt)


_SCALARS = (st.text() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
            | st.floats(allow_nan=False, allow_infinity=False))
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner,
                                                                                             max_size=3), max_leaves=12)


@settings(max_examples=examples(2000))
@given(st.dictionaries(st.text(), _VALUES, max_size=5))
def test_both_writers_give_text_their_standard_parser_reads_back(doc):
    """Any document of strings (any characters), booleans, 64-bit integers, finite floats, lists and tables."""
    assert json.loads(spec_text(doc, "json")) == doc
    assert tomllib.loads(spec_text(doc, "toml")) == doc


# ---------------------------------------------------------------------- layout
def test_layout_is_one_table_row_per_line(tmp_path):
    lad = Ladder.random(3, [3, 2, 3], 4)  # 28 regions
    doc = spec_to_jsonable(lad.to_dict())
    before, after = json.dumps(doc, indent=1), spec_text(doc)  # before: what save_spec wrote
    assert save_spec(lad, tmp_path / "a.json").read_text() == after
    lines = {line.strip().rstrip(",") for line in after.splitlines()}
    rows = [row for t in doc["tables"] for region in t for row in region]
    assert len(rows) == 27 * 4 and all(f"[{', '.join(map(repr, row))}]" in lines for row in rows)
    assert len(before.splitlines()) == 738 and len(after.splitlines()) == 184  # docs/spec-format.md's numbers
    assert round(1 - len(after) / len(before), 2) == 0.17
    # a list of lists on one line only where it fits
    graph = spec_text(spec_to_jsonable(LADDERS["conv1d"].to_dict()))
    assert "    [[0], [0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5], [5]]" in graph.splitlines()
    assert max(len(line) for line in graph.splitlines() if "[[" in line) <= WIDTH
    toml = spec_text(doc, "toml")
    assert len(toml.splitlines()) <= len(after.splitlines()) and toml.count("\n[emission]\n") == 1


# ---------------------------------------------------------------------- the JSON Schema
def _generators() -> list[dict]:
    return [{"kind": "random", "depth": 2, "branching": [2, 3], "events": [3, 2, 2], "mode": "bottomup",
             "concentration": 0.5, "seed": 7, "name": "g"},
            {"kind": "summarization", "events": 4, "emission": "gaussian", "sigma": 0.5},
            {"kind": "fully_informative", "depth": 2, "leaf_events": 3, "concentration": 1.0, "seed": 1},
            {"kind": "factorized_binary", "factors": [1, 2, 2], "format": "smaso-ladder", "version": 2},
            {"kind": "default", "mode": "topdown", "emission": {"kind": "gaussian", "sigma": 0.3}},
            {"kind": "rhm", "v": 4, "n_classes": 2, "m": 2, "s": 2, "L": 2, "seed": 1, "rules": "pcsl"}]


@pytest.mark.parametrize("doc", [spec_to_jsonable(lad.to_dict()) for lad in LADDERS.values()]
                         + [json.loads(p.read_text()) for p in LEGACY] + _generators(),
                         ids=[*LADDERS, *(p.stem for p in LEGACY), *(g["kind"] for g in _generators())])
def test_schema_accepts_every_spec_the_library_writes_and_reads(doc):
    check_spec_schema(doc)
    Ladder.from_dict(doc)


_TREE = spec_to_jsonable(Ladder.random(2, 2, 3).to_dict())
_UP = spec_to_jsonable(Ladder.random(2, 2, 3, mode="bottomup").to_dict())
_GRAPH = spec_to_jsonable(LADDERS["conv1d"].to_dict())
_V1 = json.loads(LEGACY[0].read_text()) if LEGACY else {}
_FACT = spec_to_jsonable(LADDERS["factorized"].to_dict())
_GAUSS = spec_to_jsonable(LADDERS["gaussian"].to_dict())

MALFORMED = [  # (document, the field the message must start with)
    ([1, 2], "ladder spec"),
    ({**_TREE, "colour": "red"}, "ladder spec: unknown field(s) ['colour']"),
    ({k: v for k, v in _TREE.items() if k != "mode"}, "mode:"),
    ({**_TREE, "mode": "sideways"}, "mode:"),
    ({**_TREE, "format": "other"}, "format:"),
    ({**_TREE, "version": 3}, "version:"),
    ({**_TREE, "version": True}, "version:"),
    ({**_TREE, "name": 5}, "name:"),
    ({**_TREE, "branching": 2}, "branching:"),
    ({**_TREE, "branching": [2, "2"]}, "branching[1]:"),
    ({**_TREE, "branching": [2, 0]}, "branching[1]:"),
    ({**_TREE, "events": [3, 3, 70000]}, "events[2]:"),
    ({**_TREE, "prior": "uniform"}, "prior:"),
    ({**_TREE, "prior": [0.5, None, 0.5]}, "prior[1]:"),
    ({**_TREE, "tables": [_TREE["tables"][0], [[[0.5, "x", 0.5]]]]}, "tables[1][0][0][1]:"),
    ({**_TREE, "tables": [[[[0.5, True, 0.5]]]]}, "tables[0][0][0][1]:"),
    ({**_TREE, "leaf_prior": [[0.5, 0.5]]}, "leaf_prior:"),
    ({k: v for k, v in _TREE.items() if k != "tables"}, "tables:"),
    ({**_UP, "prior": [1.0]}, "prior:"),
    ({**_UP, "lookup": [[[0, 1.5]], _UP["lookup"][1]]}, "lookup[0][0][1]:"),
    ({**_TREE, "emission": "gaussian"}, "emission:"),
    ({**_TREE, "emission": {"kind": "laplace"}}, "emission.kind:"),
    ({**_TREE, "emission": {"kind": "gaussian"}}, "emission.sigma:"),
    ({**_TREE, "emission": {"kind": "gaussian", "sigma": -1.0}}, "emission.sigma:"),
    ({**_TREE, "emission": {"kind": "onehot", "sigma": 1.0}}, "emission:"),
    ({**_GAUSS, "emission": {**_GAUSS["emission"], "scale": 2.0}}, "emission.scale:"),
    ({**_TREE, "region_names": ["a", 2]}, "region_names[1]:"),
    ({**_FACT, "factorization": {**_FACT["factorization"], "factors": [1, 2, 17]}}, "factorization.factors[2]:"),
    ({**_FACT, "factorization": {"factors": [1, 2, 2]}}, "factorization.root_factor_priors:"),
    ({"mode": "topdown", "prior": [1.0], "tables": [[[1.0]]], "regions": [{"name": "r", "events": 1, "kids": []}]},
     "regions[0]:"),
    ({"mode": "topdown", "prior": [1.0], "tables": [[[1.0]]], "regions": [{"name": "r", "events": "1"}]},
     "regions[0].events:"),
    ({"mode": "topdown", "prior": [1.0], "tables": [[[1.0]]], "branching": [1],
      "regions": [{"name": "r", "events": 1}]}, "branching:"),
    ({**_GRAPH, "version": 1}, "version:"),
    ({**_GRAPH, "parents": [[[]], [[0], ["0"]]]}, "parents[1][1][0]:"),
    ({**_GRAPH, "parents": [[[]], [[-1]]]}, "parents[1][0][0]:"),
    ({**_GRAPH, "events": [2, "3", 3, 2]}, "events[1]:"),
    ({**_GRAPH, "emission": "onehot"}, "emission:"),
    ({**_GRAPH, "lookup": [[0]]}, "lookup:"),
    ({**_V1, "leaf_priors": [[1.0]]}, "leaf_priors:"),
    ({"kind": "randm"}, "kind:"),
    ({"kind": "random", "leaf_events": 3}, "ladder spec: unknown field(s) ['leaf_events']"),
    ({"kind": "summarization", "mode": "topdown"}, "ladder spec: unknown field(s) ['mode']"),
    ({"kind": "random", "depth": 0}, "depth:"),
    ({"kind": "random", "depth": 65}, "depth:"),
    ({"kind": "random", "branching": [2, "x"]}, "branching[1]:"),
    ({"kind": "random", "concentration": 0}, "concentration:"),
    ({"kind": "random", "seed": -1}, "seed:"),
    ({"kind": "random", "emission": "gaussian"}, "sigma:"),
    ({"kind": "random", "sigma": 0.5}, "sigma: only applies with emission = 'gaussian'"),
    ({"kind": "random", "emission": "laplace"}, "emission:"),
    ({"kind": "factorized_binary", "factors": [1, 2, 32]}, "factors[2]:"),
]


@pytest.mark.parametrize("doc, field", MALFORMED, ids=[f for _, f in MALFORMED])
def test_schema_rejects_each_malformed_spec_naming_the_field(doc, field):
    with pytest.raises(LadderSpecError) as e:
        check_spec_schema(doc)
    message = str(e.value)
    assert message.startswith(field), message
    assert "\n" not in message, message
    assert any(w in message for w in ("expected", "unknown", "only", "missing", "give either", "does not apply")), \
        message  # and says what was expected
    with pytest.raises(LadderSpecError):  # the field checks refuse it too: the two never disagree here
        check_spec(doc)
        Ladder.from_dict(doc)


@pytest.mark.parametrize("table", [[[0.5, "x"]], [[0.5], [[True]]], [[1, None], 2.0], [[[{}]]], [0.25, [[0.5, []]]]])
@pytest.mark.parametrize("key", ["prior", "lookup"])
def test_fast_leaf_check_gives_the_plain_validators_error(table, key):
    """The loop that checks the tables' entries (teachers.spec_schema) finds the error jsonschema itself finds."""
    small = Ladder.random(1, 2, 2, mode="topdown" if key == "prior" else "bottomup").to_dict()
    doc = {**spec_to_jsonable(small), key: table if key == "prior" else [table]}
    plain = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(spec_schema()).iter_errors(doc))
    fast = jsonschema.exceptions.best_match(_validator().iter_errors(doc))
    assert (plain is None) == (fast is None)
    if plain is not None:
        assert fast.absolute_path == plain.absolute_path and fast.validator == plain.validator
        assert fast.instance == plain.instance


def test_the_loader_checks_the_schema(tmp_path, monkeypatch):
    """load_spec refuses what the schema refuses: with a schema that also requires 'name', a file without one."""
    import teachers.spec_schema as spec_schema_module

    path = save_spec(Ladder.random(2, 2, 3), tmp_path / "a.json")
    doc = json.loads(path.read_text())
    del doc["name"]
    path.write_text(json.dumps(doc))
    load_spec(path)
    strict = json.loads(json.dumps(spec_schema()))
    strict["required"] = ["name"]
    monkeypatch.setattr(spec_schema_module, "spec_schema", lambda: strict)
    spec_schema_module._validator.cache_clear()
    try:
        with pytest.raises(LadderSpecError, match=r"^name: missing"):
            load_spec(path)
    finally:
        monkeypatch.undo()
        spec_schema_module._validator.cache_clear()
    assert deque(_validator().iter_errors(doc), maxlen=1) == deque()


# ---------------------------------------------------------------------- the documented examples
def _doc_blocks() -> list[tuple[str, str, str | None]]:
    """(language, text, the error the next ``text`` block states, for blocks tagged ``invalid``)."""
    text = DOC.read_text() if DOC.exists() else ""
    blocks = re.findall(r"^```(\w+)( invalid)?\n(.*?)^```\n(?:\n```text\n(.*?)\n```)?", text, re.M | re.S)
    return [(lang, body, error if bad else None) for lang, bad, body, error in blocks if lang in ("json", "toml")]


def test_the_doc_has_examples_of_every_form():
    blocks = _doc_blocks()
    assert len(blocks) >= 8
    assert {lang for lang, _, _ in blocks} == {"json", "toml"}
    assert sum(err is not None for _, _, err in blocks) == 2
    texts = " ".join(body for _, body, _ in blocks)
    for field in ("kind", "parents", "regions", "lookup", "leaf_prior", "tables", "sigma"):
        assert field in texts


@pytest.mark.parametrize("lang, body, error", _doc_blocks(), ids=lambda v: v if v in ("json", "toml") else None)
def test_every_example_of_the_doc_loads_or_gives_its_stated_error(tmp_path, lang, body, error):
    path = tmp_path / f"example.{lang}"
    path.write_text(body)
    doc = tomllib.loads(body) if lang == "toml" else json.loads(body)
    if error is not None:
        with pytest.raises(LadderSpecError) as e:
            load_spec(path)
        assert str(e.value) == error
        return
    check_spec_schema(doc)
    lad = load_spec(path)
    # its own file, written back in both formats, is the same ladder
    for suffix in (".json", ".toml"):
        assert load_spec(save_spec(lad, tmp_path / f"back{suffix}")).fingerprint() == lad.fingerprint()


# ---------------------------------------------------------------------- the CLI: options --spec replaces
@pytest.mark.parametrize("option", [["--depth", "5"], ["--depth", "3"], ["--kind", "random"], ["--mode", "bottomup"],
                                    ["--branching", "3"], ["--events", "4"], ["--factors", "1,2"],
                                    ["--concentration", "0.5"], ["--ladder-seed", "1"], ["--graph", "conv1d"],
                                    ["--width", "8"], ["--height", "2"], ["--kernels", "3"], ["--strides", "1"]])
def test_options_the_spec_replaces_are_refused_with_both_names(tmp_path, capsys, option):
    spec = save_spec(Ladder.random(2, 2, 3), tmp_path / "x.toml")
    before = sorted(p.name for p in tmp_path.iterdir())
    for command in (["sample", "ladder", "-n", "10", "--out", str(tmp_path / "d.npz")],
                    ["spec", "--out", str(tmp_path / "s.json")])[:2 if option[0] == "--depth" else 1]:
        err = _error(capsys, [*command, "--spec", str(spec), *option])
        assert err.startswith(f"smaso: error: {option[0]} cannot be used with --spec ("), err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_emission_options_apply_to_the_spec(tmp_path):
    spec = save_spec(Ladder.random(2, 2, 3, emission="gaussian", sigma=0.5), tmp_path / "g.json")
    out = tmp_path / "o.toml"
    assert main(["-q", "spec", "--spec", str(spec), "--emission", "gaussian", "--sigma", "0.25",
                 "--out", str(out)]) == 0
    assert load_spec(out).emission.to_dict()["sigma"].item() == 0.25
    assert main(["-q", "spec", "--spec", str(spec), "--emission", "onehot", "--out", str(out)]) == 0
    assert load_spec(out).emission.kind == "onehot"
    assert main(["-q", "spec", "--spec", str(spec), "--out", str(out)]) == 0  # unchanged without the options
    assert load_spec(out).fingerprint() == load_spec(spec).fingerprint()
