"""Ladder specification: validation of every field, serialization round trips, constructors."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from teachers import GaussianEmission, Ladder, LadderSpecError, OneHotEmission, sample_ladder
from teachers.ladder import MAX_EVENTS, MAX_LOOKUP

UNIFORM2 = [[0.5, 0.5], [0.5, 0.5]]


def topdown(**overrides):
    """A valid 2-region top-down ladder, with fields overridden."""
    kw = dict(branching=[2], events=[2, 2], mode="topdown", prior=[0.5, 0.5], tables=[UNIFORM2])
    kw.update(overrides)
    return Ladder(kw.pop("branching"), kw.pop("events"), **kw)


def bottomup(**overrides):
    kw = dict(branching=[2], events=[2, 2], mode="bottomup", leaf_prior=[0.5, 0.5], lookup=[[0, 1, 1, 0]])
    kw.update(overrides)
    return Ladder(kw.pop("branching"), kw.pop("events"), **kw)


def raises_spec(match: str):
    """LadderSpecError (a ValueError) whose message names the field ``match`` (a regex)."""
    return pytest.raises(LadderSpecError, match=match)


# ---------------------------------------------------------------------- validation
def test_spec_error_is_value_error():
    assert issubclass(LadderSpecError, ValueError)


def test_valid_minimal_ladders():
    td, bu = topdown(), bottomup()
    assert td.depth == bu.depth == 1
    assert td.num_regions == (1, 2) and td.level_offsets == (0, 1, 3) and td.total_regions == 3
    assert bu.lookup[0].tolist() == [[0, 1, 1, 0]] and bu.lookup[0].dtype == torch.int64
    assert td.tables[0].dtype == torch.float64 and td.prior.dtype == torch.float64


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (dict(prior=[1.2, -0.2]), r"^prior\[1\]: probability -0\.2 is negative"),
        (dict(tables=[[[0.5, 0.5], [1.5, -0.5]]]), r"^tables\[0\]\[0, 1, 1\]: probability -0\.5 is negative"),
        (dict(tables=[[[0.5, 0.6], [0.5, 0.5]]]), r"^tables\[0\]\[0, 0\]: row sums to 1\.1, expected 1"),
        (dict(tables=[[[[0.5, 0.5], [0.5, 0.5]], [[0.5, 0.5], [0.4, 0.5]]]]), r"^tables\[0\]\[1, 1\]: row sums"),
        (dict(prior=[0.5, 0.4]), r"^prior(\[\])?: row sums to 0\.9"),
        (dict(prior=[0.5, 0.5, 0.0]), r"^prior: expected shape \(2,\) \(events\[0\]\), got \(3,\)"),
        # m mismatch: a child with 3 events against events[1] = 2
        (dict(tables=[[[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]]]), r"^tables\[0\]: expected shape \(2, 2, 2\)"),
        (dict(tables=[[[[0.5, 0.5]] * 2] * 3]), r"^tables\[0\]: expected shape \(2, 2, 2\).*got \(3, 2, 2\)"),
        (dict(tables=[[[float("nan"), 0.5], [0.5, 0.5]]]), r"^tables\[0\]: contains NaN"),
        (dict(tables=[[["a", "b"], [0.5, 0.5]]]), r"^tables\[0\]: expected an array of numbers"),
        (dict(tables=[UNIFORM2, UNIFORM2]), r"^tables: expected a list of 1 tables"),
        (dict(tables=np.array([UNIFORM2])), r"^tables: expected a list"),
        (dict(tables=None), r"^tables: missing \(a topdown ladder needs prior and tables\)"),
        (dict(lookup=[[0, 1, 1, 0]]), r"^lookup: only for mode='bottomup'; a topdown ladder takes prior and tables"),
        (dict(events=[1, 2], prior=[1.0]), r"^events\[0\]: the label needs at least 2 classes, got 1"),
        (dict(events=[2, 0]), r"^events: every entry must be >= 1"),
        (dict(events=[2, 2, 2]), r"^events: expected 2 entries, got 3"),
        (dict(events=[2, MAX_EVENTS + 1]), r"^events: at most 65536 events per region"),
        (dict(branching=[]), r"^branching: a ladder needs at least one level below the root \(depth >= 1\)"),
        (dict(branching=[0]), r"^branching: every entry must be >= 1"),
        (dict(branching=[2.5]), r"^branching: expected a list of integers, got \[2\.5\]"),
        (dict(branching=2), r"^branching: expected a list of integers, got 2"),
        (dict(branching=[None]), r"^branching: expected a list of integers"),
        (dict(events=[2.0, 2.5]), r"^events: expected a list of integers"),
        (dict(mode="sideways"), r"^mode: expected 'topdown' or 'bottomup', got 'sideways'"),
        (dict(emission="poisson"), r"^emission: expected 'onehot', 'gaussian', an Emission or a dict"),
        (dict(emission="gaussian"), r"^sigma: a gaussian emission needs a finite sigma > 0, got null"),
        (dict(emission=OneHotEmission(3, 2)), r"^emission: covers 3 regions x 2 events"),
    ],
)
def test_topdown_bad_input_names_field(overrides, field):
    with raises_spec(field):
        topdown(**overrides)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (dict(lookup=[[0, 1, 1, 2]]), r"^lookup\[0\]\[0, 3\]: event 2 outside \[0, 2\) \(events\[0\] = 2\)"),
        (dict(lookup=[[0, -1, 1, 0]]), r"^lookup\[0\]\[0, 1\]: event -1 outside \[0, 2\)"),
        (dict(lookup=[[0, 1, 1]]), r"^lookup\[0\]: expected shape \(1, 4\) .*events\[1\]\^branching\[0\].* got \(3,\)"),
        (dict(lookup=[[[0, 1, 1, 0]] * 2]), r"^lookup\[0\]: expected shape \(1, 4\)"),
        (dict(lookup=[[0, 1, 1, 0.5]]), r"^lookup\[0\]: expected integer event indices, got dtype float64"),
        (dict(lookup=[[True, False, True, False]]), r"^lookup\[0\]: expected integer event indices, got dtype bool"),
        (dict(lookup=[[0, 1, 1, 0], [0, 1, 1, 0]]), r"^lookup: expected a list of 1 tables"),
        (dict(leaf_prior=[0.5, 0.6]), r"^leaf_prior\[0\]: row sums to 1\.1"),  # shared row, checked per region
        (dict(leaf_prior=[[0.5, 0.5], [1.5, -0.5]]), r"^leaf_prior\[1, 1\]: probability -0\.5 is negative"),
        (dict(leaf_prior=[0.2, 0.3, 0.5]),
         r"^leaf_prior: expected shape \(2, 2\) \(leaf regions, leaf events\) or \(2,\), got \(3,\)"),
        (dict(leaf_prior=None), r"^leaf_prior: missing \(a bottomup ladder needs leaf_prior and lookup\)"),
        (dict(prior=[0.5, 0.5]), r"^prior: only for mode='topdown'; a bottomup ladder takes leaf_prior and lookup"),
        (dict(branching=[23], events=[2, 2], lookup=[[0]]),
         rf"^lookup\[0\]: events\[1\]\^branching\[0\] = 2\^23 = {2**23} .*exceeds {MAX_LOOKUP}"),
    ],
)
def test_bottomup_bad_input_names_field(overrides, field):
    with raises_spec(field):
        bottomup(**overrides)


def test_float_lookup_with_integer_values_is_accepted():
    lad = bottomup(lookup=[np.array([0.0, 1.0, 1.0, 0.0])])
    assert lad.lookup[0].dtype == torch.int64 and lad.lookup[0].tolist() == [[0, 1, 1, 0]]


def test_rows_within_tolerance_are_renormalized_exactly():
    lad = topdown(prior=[0.5, 0.5 + 5e-7], tables=[[[0.3, 0.7 - 4e-7], [1.0, 0.0]]])
    assert lad.prior.sum().item() == pytest.approx(1.0, abs=1e-15)
    assert (lad.tables[0].sum(-1) - 1).abs().max().item() < 1e-15
    # the renormalization is the only change
    assert lad.prior[0].item() == pytest.approx(0.5 / (1 + 5e-7), abs=1e-15)


def test_shared_tables_are_broadcast_to_every_region():
    shared = [[0.9, 0.1], [0.2, 0.8]]
    per_region = [shared, shared]
    a = topdown(tables=[shared])
    b = topdown(tables=[per_region])
    assert a.tables[0].shape == (2, 2, 2)
    assert torch.equal(a.tables[0], b.tables[0])
    # expanded tables own their memory (a real (2, 2, 2) tensor, not a stride-0 view)
    assert a.tables[0].is_contiguous() and a.tables[0].stride(0) == 4
    bu_shared = Ladder([2, 2], [3, 2, 2], mode="bottomup", leaf_prior=[0.25, 0.75],
                       lookup=[[0, 1, 2, 2], [0, 1, 1, 0]])
    assert bu_shared.leaf_prior.shape == (4, 2)
    assert torch.equal(bu_shared.leaf_prior, torch.tensor([[0.25, 0.75]] * 4, dtype=torch.float64))
    assert bu_shared.lookup[1].shape == (2, 4) and bu_shared.lookup[1].tolist() == [[0, 1, 1, 0]] * 2


def test_gaussian_sigma_must_be_positive():
    for sigma in (0, -1.0, None, float("nan")):
        with raises_spec(r"^sigma: a gaussian emission needs a finite sigma > 0"):
            Ladder.random(depth=1, emission="gaussian", sigma=sigma)
    with pytest.raises(ValueError, match=r"^emission.sigma: must be > 0 and finite"):
        GaussianEmission.around_one_hot(2, 2, 0.0)
    with pytest.raises(ValueError, match=r"^emission.sigma: expected a number or shape \(2,\)"):
        GaussianEmission(torch.zeros(2, 2, 2), torch.ones(3))
    with pytest.raises(ValueError, match=r"^emission.means: expected shape \(R, m, dim\)"):
        GaussianEmission(torch.zeros(2, 2), 1.0)


@pytest.mark.parametrize("shape", [(4, 2, 0), (4, 0, 3), (0, 2, 3)])
def test_gaussian_means_with_an_empty_dimension_are_refused(shape):
    msg = r"^emission.means: expected shape \(R, m, dim\) with R, m and dim >= 1 \(no empty dimension\), got " \
        + re.escape(str(shape))
    with pytest.raises(ValueError, match=msg):
        GaussianEmission(torch.zeros(shape), 0.5)
    lad = Ladder.random(depth=2, branching=2, events=[2, 3, 2], seed=0)
    with raises_spec(r"^emission.means: expected shape"):
        lad.with_emission({"kind": "gaussian", "means": torch.zeros(4, 2, 0), "sigma": 0.5})


def test_tables_that_require_grad_are_read_as_data():
    prior, table = torch.tensor([0.3, 0.7]), torch.tensor([[0.9, 0.1], [0.2, 0.8]])
    plain = Ladder(branching=[2], events=[2, 2], prior=prior, tables=[table])
    grad = Ladder(branching=[2], events=[2, 2], prior=prior.clone().requires_grad_(),
                  tables=[table.clone().requires_grad_()])
    assert torch.equal(grad.prior, plain.prior) and torch.equal(grad.tables[0], plain.tables[0])
    assert not grad.prior.requires_grad and not grad.tables[0].requires_grad
    bu = Ladder(branching=[2], events=[2, 2], mode="bottomup", leaf_prior=torch.full((2,), 0.5).requires_grad_(),
                lookup=[[0, 1, 1, 0]])
    assert torch.equal(bu.leaf_prior, torch.full((2, 2), 0.5, dtype=torch.float64))


@pytest.mark.parametrize(
    ("emission", "field"),
    [
        ({"kind": "gaussian", "sigma": 0}, r"^emission\.sigma: must be > 0"),
        ({"kind": "gaussian", "sigma": -1.0}, r"^emission\.sigma: must be > 0"),
        ({"kind": "gaussian", "sigma": [1.0, -1.0]}, r"^emission\.sigma: must be > 0 and finite"),
        ({"kind": "gaussian"}, r"^emission\.sigma: required"),
        ({"kind": "laplace"}, r"^emission\.kind: expected 'onehot' or 'gaussian'"),
        ({"sigma": 1}, r"^emission: expected a table with a 'kind' field"),
        ({"kind": "onehot", "num_events": 3}, r"^emission\.num_events: is 3"),
        ({"kind": "gaussian", "sigma": 1.0, "means": np.zeros((2, 3, 2))},
         r"^emission\.means: expected shape \(2, 2, dim\)"),
    ],
)
def test_bad_emission_dict_raises_spec_error(emission, field):
    with raises_spec(field):
        topdown(emission=emission)
    with raises_spec(field):
        topdown().with_emission(emission)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(depth=0), r"^depth: expected an integer >= 1, got 0"),
        (dict(depth=-1), r"^depth: expected an integer >= 1"),
        (dict(depth=2.0), r"^depth: expected an integer >= 1, got 2\.0"),
        (dict(depth=True), r"^depth: expected an integer >= 1, got True"),
        (dict(depth=2, branching=[2, 2.5]), r"^branching: expected a list of integers"),
        (dict(depth=2, branching=[2, 2, 2]), r"^branching: expected 2 entries, got 3"),
        (dict(depth=2, events=[2, 3]), r"^events: expected 3 entries, got 2"),
        (dict(depth=1, events=[1, 3]), r"^events\[0\]: the label needs at least 2 classes"),
        (dict(depth=1, concentration=0.0), r"^concentration: must be > 0 and finite, got a number \(0\.0\)"),
        (dict(depth=1, concentration=float("inf")), r"^concentration: must be > 0 and finite"),
        (dict(depth=1, mode="sideways"), r"^mode: expected 'topdown' or 'bottomup'"),
        (dict(depth=1, emission="laplace"), r"^emission: expected 'onehot', 'gaussian', an Emission or a dict"),
        (dict(depth=1, branching=2, events=[5, 2], mode="bottomup"),
         r"^events\[0\]: 5 parent events cannot all be reached from 2\^2 = 4 child configurations"),
        (dict(depth=1, branching=30, events=[5, 2], mode="bottomup"),
         rf"^lookup\[0\]: events\[1\]\^branching\[0\] = 2\^30 = {2**30} .*exceeds"),
    ],
)
def test_random_constructor_errors(kwargs, field):
    with raises_spec(field):
        Ladder.random(**kwargs)


def test_fully_informative_and_factorized_constructor_errors():
    with raises_spec(r"^fully informative ladder: level 0 would need 289\^2 events \(> 65536\)"):
        Ladder.fully_informative(depth=2, branching=2, leaf_events=17)
    with raises_spec(r"^leaf_events: expected an integer in 2\.\.65536 \(the label needs >= 2 classes\), got 0"):
        Ladder.fully_informative(depth=1, leaf_events=0)
    with raises_spec(r"^leaf_events: expected an integer in 2\.\.65536 \(the label needs >= 2 classes\), got 1"):
        Ladder.fully_informative(depth=1, branching=3, leaf_events=1)
    with raises_spec(r"^depth: expected an integer >= 1"):
        Ladder.fully_informative(depth=0)
    with raises_spec(r"^factors\[1\]: 3 child factors cannot be split into 2 equal groups \(factors\[0\] = 2\)"):
        Ladder.factorized_binary(depth=2, factors=(2, 3, 6))
    with raises_spec(r"^factors\[2\]: 5 child factors cannot be split into 2 equal groups"):
        Ladder.factorized_binary(depth=2, factors=(1, 2, 5))
    with raises_spec(r"^factors: 2\^17 events per region exceeds 65536"):
        Ladder.factorized_binary(depth=1, factors=(1, 17))
    with raises_spec(r"^factors: every level needs >= 1 binary factor"):
        Ladder.factorized_binary(depth=1, factors=(0, 2))
    with raises_spec(r"^factors: expected 3 entries, got 2"):
        Ladder.factorized_binary(depth=2, factors=(1, 2))


# ---------------------------------------------------------------------- serialization
def _assert_same_ladder(a: Ladder, b: Ladder):
    assert (a.mode, a.branching, a.events, a.name) == (b.mode, b.branching, b.events, b.name)
    assert a.num_regions == b.num_regions and a.level_offsets == b.level_offsets
    if a.mode == "topdown":
        assert torch.equal(a.prior, b.prior)
        assert all(torch.equal(s, t) for s, t in zip(a.tables, b.tables, strict=True))
        assert b.leaf_prior is None and b.lookup is None
    else:
        assert torch.equal(a.leaf_prior, b.leaf_prior)
        assert all(torch.equal(s, t) for s, t in zip(a.lookup, b.lookup, strict=True))
        assert b.prior is None and b.tables is None
    assert type(a.emission) is type(b.emission) and a.emission.dim == b.emission.dim
    if a.emission.kind == "gaussian":
        assert torch.equal(a.emission.means, b.emission.means) and torch.equal(a.emission.sigma, b.emission.sigma)


def test_to_dict_from_dict_round_trip(tiny_ladder):
    d = tiny_ladder.to_dict()
    assert d["format"] == "smaso-ladder" and d["version"] == 2
    back = Ladder.from_dict(d)
    _assert_same_ladder(tiny_ladder, back)
    # twice is a fixed point
    _assert_same_ladder(back, Ladder.from_dict(back.to_dict()))


def test_round_trip_through_plain_python_lists():
    """A spec read from JSON has lists, not tensors: the tables must come back bit for bit."""
    lad = Ladder.random(depth=2, branching=[2, 3], events=[3, 4, 2], mode="topdown", seed=3)
    d = lad.to_dict()
    d["prior"] = d["prior"].tolist()
    d["tables"] = [t.tolist() for t in d["tables"]]
    _assert_same_ladder(lad, Ladder.from_dict(d))
    bu = Ladder.random(depth=2, branching=2, events=[3, 3, 2], mode="bottomup", seed=3,
                       emission=GaussianEmission.random_means(4, 2, 3, 0.5, torch.Generator().manual_seed(0)))
    d = bu.to_dict()
    d["leaf_prior"] = d["leaf_prior"].tolist()
    d["lookup"] = [t.tolist() for t in d["lookup"]]
    d["emission"] = {k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in d["emission"].items()}
    _assert_same_ladder(bu, Ladder.from_dict(d))


def test_round_trip_keeps_factorization():
    lad = Ladder.factorized_binary(depth=2, branching=2, factors=(1, 2, 4), seed=9)
    back = Ladder.from_dict(lad.to_dict())
    f, g = lad.factorization, back.factorization
    assert f.factors == g.factors == (1, 2, 4)
    assert torch.equal(f.root_factor_priors, g.root_factor_priors)
    assert all(torch.equal(s, t) for s, t in zip(f.factor_tables, g.factor_tables, strict=True))


def test_round_trip_per_region_sigma():
    em = GaussianEmission(torch.randn(2, 2, 3, generator=torch.Generator().manual_seed(1)), torch.tensor([0.5, 2.0]))
    lad = topdown(emission=em)
    back = Ladder.from_dict(lad.to_dict())
    assert torch.equal(back.emission.sigma, torch.tensor([0.5, 2.0], dtype=torch.float64))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (dict(format="other"), r"^format: expected 'smaso-ladder', got 'other'"),
        (dict(version=3), r"^version: this library reads ladder spec versions 1 and 2, got 3"),
        (dict(colour="red"), r"^ladder spec: unknown field\(s\) \['colour'\]"),
        (dict(mode=None), r"^mode: expected 'topdown' or 'bottomup', got None"),
    ],
)
def test_from_dict_bad_fields(change, field):
    d = topdown().to_dict()
    d.update(change)
    with raises_spec(field):
        Ladder.from_dict(d)


def test_from_dict_missing_and_generator_specs():
    d = topdown().to_dict()
    del d["events"]
    with raises_spec(r"^events: missing from the ladder spec"):
        Ladder.from_dict(d)
    with raises_spec(r"^ladder spec: expected a table/object, got list"):
        Ladder.from_dict([1, 2])
    kinds = r"\['default', 'factorized_binary', 'fully_informative', 'random', 'rhm', 'summarization'\]"
    with raises_spec(r"^kind: expected one of " + kinds):
        Ladder.from_dict({"kind": "tree"})
    with raises_spec(r"^ladder spec of kind 'random': .*unexpected keyword argument 'colour'"):
        Ladder.from_dict({"kind": "random", "depth": 2, "colour": "red"})
    with raises_spec(r"^depth: expected an integer >= 1"):
        Ladder.from_dict({"kind": "random", "depth": 0})
    # generator descriptions give the same ladder as the constructor with those arguments
    _assert_same_ladder(Ladder.from_dict({"kind": "random", "depth": 2, "events": [3, 2, 2], "seed": 4,
                                          "format": "smaso-ladder", "version": 1}),
                        Ladder.random(depth=2, events=[3, 2, 2], seed=4))
    _assert_same_ladder(Ladder.from_dict({"kind": "default"}), Ladder.default())
    _assert_same_ladder(Ladder.from_dict({"kind": "fully_informative", "depth": 1, "branching": 3}),
                        Ladder.fully_informative(depth=1, branching=3))


def test_from_dict_non_numeric_version_names_field():
    d = topdown().to_dict()
    d["version"] = "one"
    with raises_spec(r"^version"):
        Ladder.from_dict(d)


def test_from_dict_incomplete_factorization_names_field():
    d = Ladder.factorized_binary(depth=1, factors=(1, 2)).to_dict()
    del d["factorization"]["root_factor_priors"]
    with raises_spec(r"^factorization"):
        Ladder.from_dict(d)


# ---------------------------------------------------------------------- structure
def test_structure_helpers():
    lad = Ladder.random(depth=3, branching=[2, 3, 2], events=[2, 3, 3, 4], seed=0)
    assert lad.num_regions == (1, 2, 6, 12) and lad.level_offsets == (0, 1, 3, 9, 21)
    assert lad.total_regions == 21 and lad.num_classes == 2 and lad.depth == 3
    assert lad.parent_index(1).tolist() == [0, 0]
    assert lad.parent_index(2).tolist() == [0, 0, 0, 1, 1, 1]
    assert lad.parent_index(3).tolist() == [i // 2 for i in range(12)]
    for bad in (0, 4):
        with pytest.raises(ValueError, match=r"^level: expected 1\.\.3"):
            lad.parent_index(bad)
    assert lad.region_level().tolist() == [0] + [1] * 2 + [2] * 6 + [3] * 12
    names = lad.region_names()
    assert names[0] == "0.0" and names[3] == "2.0" and names[-1] == "3.11" and len(names) == 21
    assert [lad.leaves_under(l) for l in range(4)] == [12, 6, 2, 1]
    assert lad.event_dtype() == torch.uint8
    assert Ladder.random(depth=1, events=[2, 257]).event_dtype() == torch.int16
    assert Ladder.random(depth=1, events=[2, 2**15 + 1]).event_dtype() == torch.int32
    assert "level 3: 12 regions x 4 events (leaves)" in lad.describe()
    assert re.fullmatch(r"Ladder\(mode='topdown', branching=\[2, 3, 2\], events=\[2, 3, 3, 4\], emission='onehot'\)",
                        repr(lad))


def test_with_emission():
    lad = Ladder.random(depth=2, branching=2, events=[3, 3, 2], seed=1)
    g = lad.with_emission({"kind": "gaussian", "sigma": 0.3})
    assert g.emission.kind == "gaussian" and lad.emission.kind == "onehot"
    assert g.tables is lad.tables and g.branching == lad.branching
    assert torch.equal(g.emission.means[2], torch.eye(2, dtype=torch.float64))
    with raises_spec(r"^emission: covers 3 regions x 2 events"):
        lad.with_emission(OneHotEmission(3, 2))


# ---------------------------------------------------------------------- constructors
def test_random_topdown_is_seeded_and_dirichlet_shaped():
    a = Ladder.random(depth=2, branching=[2, 3], events=[3, 4, 5], seed=7)
    b = Ladder.random(depth=2, branching=[2, 3], events=[3, 4, 5], seed=7)
    c = Ladder.random(depth=2, branching=[2, 3], events=[3, 4, 5], seed=8)
    _assert_same_ladder(a, b)
    assert not torch.equal(a.tables[1], c.tables[1])
    assert a.tables[0].shape == (2, 3, 4) and a.tables[1].shape == (6, 4, 5)
    # regions have their own tables (not one shared table)
    assert not torch.equal(a.tables[1][0], a.tables[1][1])
    assert (a.tables[1].sum(-1) - 1).abs().max().item() < 1e-12 and (a.tables[1] >= 0).all()
    assert a.emission.kind == "onehot" and a.name == "random-topdown-d2"


def test_random_concentration_controls_peakedness():
    """Mean max entry of a Dirichlet(c) row over 5 events: near 1 for c -> 0, near 1/5 for c -> inf."""
    peaked = Ladder.random(depth=1, branching=50, events=[5, 5], concentration=0.01, seed=0)
    flat = Ladder.random(depth=1, branching=50, events=[5, 5], concentration=1000.0, seed=0)
    assert peaked.tables[0].max(-1).values.mean().item() > 0.9
    assert flat.tables[0].max(-1).values.mean().item() < 0.3


def test_random_tiny_concentration_gives_valid_rows():
    lad = Ladder.random(depth=2, branching=3, events=[4, 6, 6], concentration=1e-8, seed=0)
    for t in lad.tables:
        assert (t.sum(-1) - 1).abs().max().item() < 1e-12
        assert torch.isfinite(t).all()


def test_random_bottomup_lookup_is_onto_every_event():
    lad = Ladder.random(depth=2, branching=[3, 2], events=[7, 3, 4], mode="bottomup", seed=5)
    assert lad.lookup[0].shape == (1, 27) and lad.lookup[1].shape == (3, 16)
    for l, t in enumerate(lad.lookup):
        for row in t:
            assert sorted(set(row.tolist())) == list(range(lad.events[l]))
    assert lad.leaf_prior.shape == (6, 4)
    # the lookup really is random: regions of one level differ
    assert not torch.equal(lad.lookup[1][0], lad.lookup[1][1])


def test_fully_informative_lookup_is_the_tuple_code():
    lad = Ladder.fully_informative(depth=2, branching=[2, 3], leaf_events=2)
    assert lad.events == (64, 8, 2) and lad.mode == "bottomup"
    assert torch.equal(lad.lookup[0], torch.arange(64)[None])
    assert torch.equal(lad.lookup[1], torch.arange(8).expand(2, 8))
    assert torch.equal(lad.leaf_prior, torch.full((6, 2), 0.5, dtype=torch.float64))
    noisy = Ladder.fully_informative(depth=1, branching=2, leaf_events=3, concentration=1.0, seed=2)
    assert noisy.events == (9, 3) and not torch.equal(noisy.leaf_prior[0], noisy.leaf_prior[1])


def test_factorized_binary_tables_are_kron_of_factor_tables():
    lad = Ladder.factorized_binary(depth=3, branching=[2, 1, 2], factors=(1, 2, 4, 4), seed=3)
    f = lad.factorization
    assert lad.events == (2, 4, 16, 16) and f.factors == (1, 2, 4, 4)
    prior = f.root_factor_priors[0]
    for row in f.root_factor_priors[1:]:
        prior = torch.kron(prior, row)
    assert (lad.prior - prior).abs().max().item() < 1e-15
    for l in range(1, lad.depth + 1):
        s = f.factors[l] // f.factors[l - 1]
        ft = f.factor_tables[l - 1]
        assert ft.shape == (lad.num_regions[l], f.factors[l - 1], 2, 2**s)
        for c in range(lad.num_regions[l]):
            k = ft[c, 0]
            for i in range(1, f.factors[l - 1]):
                k = torch.kron(k, ft[c, i])
            assert (lad.tables[l - 1][c] - k).abs().max().item() < 1e-15
        assert f.groups(l) == [list(range(i * s, (i + 1) * s)) for i in range(f.factors[l - 1])]
    # factor 0 is the most significant bit: parent factor 0 drives child bits {0, 1} of level 2
    t = lad.tables[1][0]  # (4, 16)
    pf = f.factor_tables[1][0]  # (2 parent factors, 2 values, 4 child-group values)
    for parent in range(4):
        f0, f1 = parent // 2, parent % 2
        for child in range(16):
            hi, lo = child // 4, child % 4
            assert t[parent, child].item() == pytest.approx(pf[0, f0, hi].item() * pf[1, f1, lo].item(), abs=1e-15)


def test_default_ladder_is_a_summarization_ladder():
    lad = Ladder.default()
    assert (lad.mode, lad.branching, lad.events, lad.name) == ("bottomup", (2, 2, 2), (4, 4, 4, 4), "default")
    _assert_same_ladder(lad, Ladder.summarization(depth=3, branching=2, events=4, concentration=2.0, seed=2,
                                                  name="default"))
    # every parent event is the image of exactly 4 of the 16 child configurations: not injective
    for t in lad.lookup:
        assert all(torch.equal(torch.bincount(row, minlength=4), torch.full((4,), 4)) for row in t)
    g = Ladder.default(emission="gaussian", sigma=0.25)
    assert g.emission.kind == "gaussian" and torch.equal(g.emission.sigma, torch.tensor(0.25, dtype=torch.float64))
    assert all(torch.equal(a, b) for a, b in zip(g.lookup, lad.lookup, strict=True))
    # y is a function of x: the root's event follows from the leaves through the lookups
    s = sample_ladder(lad, 3000, seed=0)
    z = s.leaves
    for l in range(lad.depth - 1, -1, -1):
        b, m = lad.branching[l], lad.events[l + 1]
        code = sum(z[:, c::b] * m ** (b - 1 - c) for c in range(b))  # child configuration index
        z = torch.stack([lad.lookup[l][r][code[:, r]] for r in range(lad.num_regions[l])], 1)
    assert torch.equal(z[:, 0], s.y.long())
    p_y = torch.bincount(s.y.long(), minlength=4) / 3000.0
    assert p_y.min() > 0.18  # balanced classes (exact: 0.227-0.273)


def test_top_down_default_stays_available_by_name():
    lad = Ladder.default(mode="topdown")
    assert (lad.mode, lad.name) == ("topdown", "default-topdown")
    _assert_same_ladder(lad, Ladder.random(depth=3, branching=2, events=4, concentration=0.5, seed=0,
                                           name="default-topdown"))
    _assert_same_ladder(Ladder.from_dict({"kind": "default", "mode": "topdown"}), lad)
    with pytest.raises(LadderSpecError, match="mode"):
        Ladder.default(mode="sideways")


def test_summarization_constructor_balances_and_checks():
    lad = Ladder.summarization(depth=2, branching=[3, 2], events=[5, 4, 3], seed=1)
    counts = torch.bincount(lad.lookup[0][0], minlength=5)  # 4^3 = 64 configurations onto 5 events
    assert counts.max() - counts.min() <= 1 and counts.sum() == 64
    _assert_same_ladder(Ladder.from_dict({"kind": "summarization", "depth": 2, "branching": [3, 2],
                                          "events": [5, 4, 3], "seed": 1}), lad)
    with pytest.raises(LadderSpecError, match="events"):
        Ladder.summarization(depth=1, branching=1, events=[4, 2])
    with pytest.raises(LadderSpecError, match="concentration"):
        Ladder.summarization(concentration=0.0)


# ---------------------------------------------------------------------- explicit region trees
FACE = [{"name": "face", "events": 2, "children": ["eyes", "mouth"]},
        {"name": "eyes", "events": 3, "children": ["left", "right"]},
        {"name": "mouth", "events": 3, "children": ["m0", "m1"]},
        {"name": "left", "events": 2}, {"name": "right", "events": 2},
        {"name": "m0", "events": 2, "children": []}, {"name": "m1", "events": 2}]


def _with_regions(regions):
    d = Ladder.random(depth=2, branching=2, events=[2, 3, 2], seed=1).to_dict()
    del d["branching"], d["events"]
    d["regions"] = regions
    return d


def test_region_tree_gives_layout_and_names():
    lad = Ladder.from_dict(_with_regions(FACE))
    assert lad.branching == (2, 2) and lad.events == (2, 3, 2)
    assert lad.region_names() == ["face", "eyes", "mouth", "left", "right", "m0", "m1"]
    back = Ladder.from_dict(lad.to_dict())
    assert back.region_names() == lad.region_names()
    _assert_same_ladder(lad, back)
    # listing order of the regions does not matter, only the tree
    assert Ladder.from_dict(_with_regions(FACE[::-1])).region_names() == lad.region_names()


@pytest.mark.parametrize(
    ("regions", "field"),
    [
        (FACE[1:], r"^regions: expected exactly one root .*\['eyes', 'mouth'\]"),
        ([*FACE, {"name": "m1", "events": 2}], r"^regions\[7\]: region name 'm1' is used twice"),
        ([dict(FACE[0], children=["eyes", "mouth", "nose"]), *FACE[1:]],
         r"^regions: region 'face' has a child 'nose' that is not a defined region"),
        ([FACE[0], dict(FACE[1], events=4), *FACE[2:]], r"^regions: regions at depth 1 have different event counts"),
        ([FACE[0], dict(FACE[1], children=["left"]), FACE[2], FACE[3], *FACE[5:]],
         r"^regions: regions at depth 1 have \[1, 2\] children"),
        ([FACE[0], dict(FACE[1], children=["left", "m0"]), *FACE[2:]], r"^regions: region 'm0' is a child of both"),
        ([{"name": "a"}], r"^regions\[0\]: expected a table with 'name', 'events'"),
        ([], r"^regions: expected a non-empty list"),
    ],
)
def test_region_tree_errors(regions, field):
    with raises_spec(field):
        Ladder.from_dict(_with_regions(regions))


def test_region_tree_and_branching_are_exclusive():
    d = _with_regions(FACE)
    d["branching"] = [2, 2]
    with raises_spec(r"^regions: give either a region tree or branching/events, not both"):
        Ladder.from_dict(d)
    with raises_spec(r"^region_names: expected 3 distinct names"):
        topdown(region_names=["a", "a", "b"])


def test_argument_types_are_checked():
    with raises_spec(r"^branching: expected a list of integers, got '22'"):
        Ladder("22", [2, 2, 2], prior=[0.5, 0.5], tables=[[[1.0, 0.0], [0.0, 1.0]]] * 2)
    with raises_spec(r"^seed: expected a non-negative integer, got an integer \(-1\)"):
        Ladder.random(depth=1, seed=-1)
    with raises_spec(r"^seed: expected a non-negative integer"):
        Ladder.fully_informative(depth=1, seed=1.5)
    lad = Ladder([2], [2, 2], prior=[0.5, 0.5], tables=[[[1.0, 0.0], [0.0, 1.0]]], emission="onehot")
    assert lad.emission.kind == "onehot"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("index_dtype", [torch.uint8, torch.int16, torch.int64])
def test_one_hot_matches_torch_one_hot_in_any_dtype(dtype, index_dtype):
    from teachers.emission import one_hot

    z = torch.randint(0, 7, (5, 3, 4), generator=torch.Generator().manual_seed(0)).to(index_dtype)
    got = one_hot(z, 7, dtype)
    assert got.dtype == dtype and got.shape == (5, 3, 4, 7)
    assert torch.equal(got, torch.nn.functional.one_hot(z.long(), 7).to(dtype))
    assert one_hot(z, 7).dtype == torch.get_default_dtype()
    with pytest.raises(RuntimeError):
        one_hot(torch.tensor([7]), 7)


def test_pickling_a_ladder_ignores_a_cache_filled_meanwhile():
    """A process pool pickles a task's arguments in a feeder thread while this process fills the same ladder's
    cache: the demo once failed with "dictionary changed size during iteration".  Here a cached value's reduction
    grows the cache while the pickler walks it, as that thread did; the ladder pickles without its cache."""
    import pickle

    from teachers import Ladder

    class Grows:
        def __init__(self, cache: dict) -> None:
            self.cache = cache

        def __reduce__(self):
            self.cache[object()] = 1  # another thread filling the cache meanwhile
            return (int, (0,))

    lad = Ladder.default()
    lad._cache["grows"] = Grows(lad._cache)
    lad._cache["more"] = 1
    clone = pickle.loads(pickle.dumps(lad))
    assert clone._cache == {} and clone.fingerprint() == lad.fingerprint()
