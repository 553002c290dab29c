"""Spec files, dataset files and stores carry a ladder's productions and an RHM's parameters (issue 38): the
spec of :meth:`Ladder.to_dict` reads back bit for bit (equal fingerprint) through JSON, TOML, the .npz and the
zarr store; ``rhm_params`` survive and are checked against the rules; ``{"kind": "rhm", ...}`` builds
:meth:`Ladder.rhm`; bad productions are refused naming the field."""

from __future__ import annotations

import json
import tomllib

import numpy as np
import pytest
import torch
from rhm_enumerate import enumerate_derivations

from teachers import Ladder
from teachers.dataset import load_dataset, save_dataset
from teachers.productions import Productions
from teachers.rhm import RHMParams
from teachers.sampling import BLOCK_SIZE, LadderSample
from teachers.spec_check import check_spec
from teachers.spec_io import load_spec, save_spec, spec_to_jsonable
from teachers.spec_schema import check_spec_schema
from teachers.store import create_partial, finalize, write_chunk
from teachers.store_reader import open_dataset
from teachers.validation import LadderSpecError


def _mixed() -> Ladder:
    """Per-region productions with irregular float64 probabilities (every bit must survive the text), then a
    level of independent children."""
    g = torch.Generator().manual_seed(5)
    rules = torch.randint(0, 3, (1, 3, 4, 2), generator=g)
    probs = torch.rand(1, 3, 4, generator=g, dtype=torch.float64)
    probs[0, 1, 3] = 0.0  # a padding production
    probs = probs / probs.sum(-1, keepdim=True)
    table = torch.rand(2, 3, 4, generator=g, dtype=torch.float64)
    return Ladder([2, 1], [3, 3, 4], prior=[0.2, 0.3, 0.5], tables=[None, table / table.sum(-1, keepdim=True)],
                  productions=[Productions(rules, probs), None], name="mixed")


LADDERS = {"rhm": Ladder.rhm(4, 2, 2, 2, 2, seed=1), "rhm-pcsl": Ladder.rhm(5, 3, 2, 2, 3, seed=3, rules="pcsl"),
           "mixed": _mixed()}


def _same(a: Ladder, b: Ladder) -> None:
    assert a.fingerprint() == b.fingerprint()
    assert a.rhm_params == b.rhm_params
    for p, q in zip(a.productions, b.productions, strict=True):
        assert (p is None) == (q is None)
        if p is not None:
            assert p.rules.dtype == q.rules.dtype == torch.int64 and torch.equal(p.rules, q.rules)
            assert p.probs.dtype == q.probs.dtype == torch.float64 and torch.equal(p.probs, q.probs)
    for s, t in zip(a.tables, b.tables, strict=True):  # the derived marginals too
        assert torch.equal(s, t)


@pytest.mark.parametrize("name", sorted(LADDERS))
def test_spec_round_trips_productions_and_rhm_params_bit_for_bit(tmp_path, name):
    lad = LADDERS[name]
    _same(Ladder.from_dict(lad.to_dict()), lad)
    doc = spec_to_jsonable(lad.to_dict())
    check_spec_schema(doc)
    for suffix in (".json", ".toml"):
        path = save_spec(lad, tmp_path / f"l{suffix}")
        parsed = tomllib.loads(path.read_text()) if suffix == ".toml" else json.loads(path.read_text())
        assert parsed == doc
        _same(load_spec(path), lad)
    assert "null" not in (tmp_path / "l.json").read_text()  # the placeholders are [] and {}, as TOML needs


def test_rhm_params_come_back_with_their_counts(tmp_path):
    lad = load_spec(save_spec(LADDERS["rhm-pcsl"], tmp_path / "r.toml"))
    assert lad.rhm_params == RHMParams(5, 3, 2, 2, 3, 3, "pcsl")
    assert lad.rhm_params.num_data == 3 * 2**7 and lad.rhm_params.p_star_scale == 3 * 2**3


def test_generator_spec_builds_the_rhm():
    doc = {"kind": "rhm", "v": 5, "n_classes": 3, "m": 2, "s": 2, "L": 3, "seed": 3, "rules": "pcsl"}
    check_spec_schema(doc)
    _same(Ladder.from_dict(doc), LADDERS["rhm-pcsl"])
    g = Ladder.from_dict({"kind": "rhm", "v": 4, "n_classes": 2, "m": 2, "s": 2, "L": 2, "emission": "gaussian",
                          "sigma": 0.5})
    assert g.emission.kind == "gaussian" and g.rhm_params == RHMParams(4, 2, 2, 2, 2)


def test_store_and_npz_keep_productions_and_rhm_params(tmp_path):
    lad = LADDERS["rhm-pcsl"]
    z, _ = enumerate_derivations(lad)  # every derivation, as a sampler would draw rows
    z = z.to(torch.uint8)
    part = create_partial(tmp_path / "d.zarr", lad, n=len(z), chunk_rows=BLOCK_SIZE)
    finalize(part, tmp_path / "d.zarr", [write_chunk(part, 0, z.numpy())])
    store = open_dataset(tmp_path / "d.zarr")
    _same(store.ladder, lad)
    path = save_dataset(LadderSample(lad, z), tmp_path / "d.npz")
    back = load_dataset(path)
    _same(back.ladder, lad)
    assert torch.equal(back.z, z)


def test_fingerprint_follows_rhm_params():
    lad = Ladder.rhm(4, 2, 2, 2, 2, seed=1)
    before = lad.fingerprint()
    lad.rhm_params = None  # the same rules, no longer said to be an RHM: another spec
    assert lad.fingerprint() != before and "rhm" not in lad.to_dict()


_RHM = spec_to_jsonable(LADDERS["rhm"].to_dict())
_MIX = spec_to_jsonable(LADDERS["mixed"].to_dict())
_P0 = _RHM["productions"][0]
_RHM_P = _RHM.get("rhm", {})  # (main before issue 38 wrote no rhm table)

BAD = [  # (document, the start of the message of the field checks)
    ({**_RHM, "tables": [[[0.5, 0.5]], []]}, "tables[0], productions[0]: give exactly one"),
    ({**_MIX, "productions": [{}, {}]}, "tables[0], productions[0]: give exactly one"),
    ({**_RHM, "productions": [_P0]}, "productions: expected 2 entries"),
    ({**_RHM, "productions": [{**_P0, "rules": [[[0.5, 1]]]}, _RHM["productions"][1]]},
     "productions[0].rules[0][0][0]: expected an integer event index"),
    ({**_RHM, "productions": [{"probs": _P0["probs"]}, _RHM["productions"][1]]}, "productions[0].rules: missing"),
    ({**_RHM, "productions": [{**_P0, "weights": 1}, _RHM["productions"][1]]}, "productions[0]: unknown field"),
    ({**_RHM, "productions": [{**_P0, "probs": [0.5, 0.5]}, _RHM["productions"][1]]},
     "productions[0].probs: expected shape (2, 2)"),
    ({**_RHM, "productions": [[1, 2], _RHM["productions"][1]]}, "productions[0]: expected a table"),
    ({**_RHM, "rhm": {**_RHM_P, "colour": 1}}, "rhm: unknown field"),
    ({**_RHM, "rhm": {**_RHM_P, "m": 0}}, "rhm.m: expected an integer"),
    ({**_RHM, "rhm": {**_RHM_P, "rules": "other"}}, "rhm.rules: expected one of"),
    ({k: v for k, v in _RHM.items() if k != "productions"}, "rhm: describes a ladder's productions"),
    ({"kind": "rhm", "v": 4, "n_classes": 2, "m": 2, "s": 2}, "L: missing"),
    ({"kind": "rhm", "v": 4, "n_classes": 2, "m": 2, "s": 1, "L": 2}, "s: expected an integer"),
    ({"kind": "rhm", "v": 4, "n_classes": 2, "m": 2, "s": 2, "L": 2, "depth": 2}, "ladder spec of kind 'rhm'"),
]


@pytest.mark.parametrize("doc, field", BAD, ids=[f for _, f in BAD])
def test_bad_productions_are_refused_naming_the_field(doc, field):
    with pytest.raises(LadderSpecError) as e:
        check_spec(doc)
    assert str(e.value).startswith(field), str(e.value)
    with pytest.raises(LadderSpecError):
        check_spec_schema(doc)
        Ladder.from_dict(doc)


def test_rhm_table_must_match_the_rules_it_names():
    """A loaded RHM knows its parameters only if they made its rules: another seed, or edited rules, refused."""
    with pytest.raises(LadderSpecError, match=r"^productions\[0\]: not the rules the rhm table deals"):
        Ladder.from_dict({**_RHM, "rhm": {**_RHM_P, "seed": 2}})
    rules = np.array(_P0["rules"])
    rules[0] = rules[0, ::-1]  # the same productions in another order: other rules, bit for bit
    edited = {**_RHM, "productions": [{**_P0, "rules": rules.tolist()}, _RHM["productions"][1]]}
    with pytest.raises(LadderSpecError, match=r"^productions\[0\]: not the rules"):
        Ladder.from_dict(edited)
    Ladder.from_dict({k: v for k, v in edited.items() if k != "rhm"})  # the same productions, no claim: fine
    with pytest.raises(LadderSpecError, match=r"^rhm: an RHM with s = 2, L = 2"):
        Ladder.from_dict({**_RHM, "rhm": {**_RHM_P, "v": 5}})
