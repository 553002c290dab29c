"""Ladders on any layered region graph (teachers.ladder.Ladder): structure, constructors and spec validation."""

from __future__ import annotations

import json

import pytest
import torch

from teachers import Ladder
from teachers.ladder import LadderSpecError
from teachers.regions import conv_children, mixed_radix
from teachers.spec_io import spec_to_jsonable


def test_mixed_radix_first_index_most_significant():
    z = torch.tensor([[0, 0], [0, 2], [1, 0], [1, 2]])
    assert mixed_radix(z, (2, 3)).tolist() == [0, 2, 3, 5]
    every = torch.cartesian_prod(torch.arange(2), torch.arange(3), torch.arange(4))
    assert mixed_radix(every, (2, 3, 4)).tolist() == list(range(24))  # a bijection onto 0..23, in order


def test_conv_children_cover_the_level_below_with_overlap():
    assert conv_children(5, 3, 1) == [(0, 1, 2), (1, 2, 3), (2, 3, 4)]
    assert conv_children(6, 2, 2) == [(0, 1), (2, 3), (4, 5)]  # stride = kernel: a tree level
    with pytest.raises(LadderSpecError, match="uncovered"):
        conv_children(6, 3, 2)
    with pytest.raises(LadderSpecError, match="kernel"):
        conv_children(3, 4, 1)


def test_conv1d_parents_and_children_are_each_others_inverse():
    g = Ladder.conv1d(8, kernels=[3, 6], strides=[1, 1], events=[3, 3, 2], seed=1)
    assert g.num_regions == (1, 6, 8) and not g.is_tree()
    assert g.parents[2][:4] == ((0,), (0, 1), (0, 1, 2), (1, 2, 3))
    for l in range(1, g.depth + 1):
        for i, ps in enumerate(g.parents[l]):
            assert all(i in g.children[l - 1][p] for p in ps)
    assert len(g.edges()) == sum(len(ps) for lvl in g.parents[1:] for ps in lvl)
    for l in range(1, g.depth + 1):  # every table row is a distribution over the region's events
        for i, t in enumerate(g.region_tables[l]):
            assert t.shape == (3 ** len(g.parents[l][i]), g.region_events[l][i])
            assert torch.allclose(t.sum(-1), torch.ones(t.shape[0], dtype=t.dtype))


def test_conv2d_windows_on_a_grid():
    g = Ladder.conv2d((4, 4), kernels=[2, 3], strides=[1, 1], events=[2, 2, 2], mode="bottomup", seed=0)
    assert g.num_regions == (1, 9, 16)
    assert g.children[1][0] == (0, 1, 4, 5) and g.children[1][4] == (5, 6, 9, 10)
    assert sorted(len(ps) for ps in g.parents[2]) == [1] * 4 + [2] * 8 + [4] * 4  # corners, edges, centre
    assert all(t.shape == (2 ** len(g.children[l][i]),) for l in range(g.depth) for i, t in enumerate(g.lookups[l]))


def test_a_uniform_tree_ladder_becomes_a_graph_ladder_with_the_same_tables():
    lad = Ladder.random(depth=2, branching=2, events=3, seed=0)
    g = lad  # a uniform tree is a region graph: the same object, per-region views of its stacked tables
    assert g.is_tree() and g.num_regions == tuple(lad.num_regions) and g.region_names() == lad.region_names()
    assert torch.equal(g.region_tables[2][3], lad.tables[1][3].double())
    b = Ladder.default()  # bottom-up
    assert b.mode == "bottomup" and torch.equal(b.lookups[0][0], Ladder.default().lookup[0][0])


@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
def test_spec_round_trips_bit_for_bit(mode):
    g = Ladder.conv1d(6, kernels=[3, 4], strides=[1, 1], events=[2, 3, 2], mode=mode, seed=3, sigma=0.5)
    back = Ladder.from_dict(json.loads(json.dumps(spec_to_jsonable(g.to_dict()))))
    assert back.parents == g.parents and back.region_events == g.region_events and back.emission.kind == "gaussian"
    tables = (lambda x: [t for lvl in x.region_tables for t in lvl]) if mode == "topdown" else \
        (lambda x: [t for lvl in x.lookups for t in lvl] + list(x.leaf_priors))
    assert all(torch.equal(a, b) for a, b in zip(tables(g), tables(back), strict=True))


def _spec():
    return spec_to_jsonable(Ladder.conv1d(4, kernels=[2, 3], strides=[1, 1], events=[2, 2, 2], seed=0).to_dict())


@pytest.mark.parametrize(("edit", "match"), [
    (lambda s: s.update(parents=[[[]], [[0]] * 3, [[0], [0, 1], [1, 2], [3]]]), r"parents\[2\]\[3\]: indices must lie"),
    (lambda s: s.update(parents=[[[]], [[0]] * 3, [[0], [0], [1], [1]]]), r"regions \[2\] of level 1 have no child"),
    (lambda s: s.update(parents=[[[]], [[0]] * 3, [[0], [], [1, 2], [2]]]), r"parents\[2\]\[1\]: every region below"),
    (lambda s: s.update(parents=[[[]], [[0]] * 3, [[0], [1, 0], [1, 2], [2]]]), "sorted distinct"),
    (lambda s: s.update(parents=[[[0]], [[0]] * 3, [[0], [0, 1], [1, 2], [2]]]), r"parents\[0\]"),
    (lambda s: s["tables"][1].pop(), r"tables\[1\]: expected one table per region"),
    (lambda s: s["tables"][1].__setitem__(1, [[0.5, 0.5]]), r"tables\[1\]\[1\]: expected shape \(4, 2\)"),
    (lambda s: s["tables"][0].__setitem__(0, [[0.7, 0.7], [0.5, 0.5]]), r"tables\[0\]\[0\]\[0\]: row sums to 1.4"),
    (lambda s: s["tables"][0].__setitem__(0, [[1.5, -0.5], [0.5, 0.5]]),
     r"tables\[0\]\[0\]\[0, 1\]: probability -0.5 is negative"),
    (lambda s: s.pop("tables"), r"tables: missing \(a topdown ladder needs prior and tables\)"),
    (lambda s: s.update(events=[[2], [2, 2, 2], [2, 2, 3, 2]]), "same number of events"),
    (lambda s: s.update(events=[[2, 2], [2, 2, 2], [2, 2, 2, 2]]), r"events\[0\]: the top level holds exactly one"),
    (lambda s: s.update(events=[[2], [2, 0, 2], [2, 2, 2, 2]]), r"events\[1\]\[1\]: expected 1\.\.65536 events, got 0"),
    (lambda s: s.update(mode="sideways"), "mode: expected 'topdown' or 'bottomup'"),
    (lambda s: s.update(version=3), "format, version"),
    (lambda s: s.update(format="smaso-graph-ladder"), "format, version"),
    (lambda s: s.update(emission={"kind": "onehot", "num_regions": 5}), "emission"),
])
def test_bad_specs_name_the_field(edit, match):
    spec = _spec()
    edit(spec)
    with pytest.raises(LadderSpecError, match=match):
        Ladder.from_dict(spec)


def test_bad_bottomup_lookups_and_constructor_arguments():
    g = Ladder.conv1d(4, kernels=[2, 3], strides=[1, 1], events=[2, 2, 2], mode="bottomup", seed=0)
    spec = spec_to_jsonable(g.to_dict())
    spec["lookup"][1][0] = [0, 1, 2, 0]
    with pytest.raises(LadderSpecError, match=r"lookup\[1\]\[0\]: events must lie in \[0, 2\)"):
        Ladder.from_dict(spec)
    spec = spec_to_jsonable(g.to_dict())
    spec["lookup"][0][0] = [0, 1]
    with pytest.raises(LadderSpecError, match=r"lookup\[0\]\[0\]: expected shape \(8,\)"):
        Ladder.from_dict(spec)
    with pytest.raises(LadderSpecError, match="top level has 2 regions"):
        Ladder.conv1d(8, kernels=[3, 4], strides=[1, 2], events=[2, 2, 2])
    with pytest.raises(LadderSpecError, match="concentration"):
        Ladder.conv1d(4, kernels=[2, 3], strides=[1, 1], events=[2, 2, 2], concentration=0)
    with pytest.raises(LadderSpecError, match="len\\(kernels\\)"):
        Ladder.conv1d(4, kernels=[2], strides=[1, 1], events=[2, 2])


@pytest.mark.parametrize(("build", "match"), [
    (lambda: Ladder.conv1d(4, kernels=[2.5, 2], strides=[2, 1], events=[2, 2, 2]),
     r"^kernels: expected a list of integers, got \[2\.5, 2\]"),
    (lambda: Ladder.conv1d(4, kernels=[2, 2], strides=[2, True], events=[2, 2, 2]),
     r"^strides: expected a list of integers, got \[2, True\]"),
    (lambda: Ladder.conv1d(4.5, kernels=[2, 2], strides=[2, 1], events=[2, 2, 2]),
     r"^width: expected an integer, got a number \(4\.5\)"),
    (lambda: Ladder.conv1d(True, kernels=[1], strides=[1], events=[2, 2]),
     r"^width: expected an integer, got a boolean"),
    (lambda: Ladder.conv1d(4, kernels=[2, 2], strides=[2, 1], events=[2, 2.5, 2]),
     r"^events: expected a list of integers, got \[2, 2\.5, 2\]"),
    (lambda: Ladder.conv2d((4, 4.5), kernels=[2, 2], strides=[2, 1], events=[2, 2, 2]),
     r"^shape: expected a list of integers, got \[4, 4\.5\]"),
    (lambda: Ladder.conv2d((4, 4), kernels=[2, 2.5], strides=[2, 1], events=[2, 2, 2]),
     r"^kernels: expected a list of integers"),
    (lambda: Ladder.fully_informative_conv1d(4, kernels=[2, 2], strides=[1.5, 1]),
     r"^strides: expected a list of integers"),
])
def test_conv_sizes_must_be_integers(build, match):
    with pytest.raises(LadderSpecError, match=match):
        build()


def test_conv_sizes_accept_integral_floats():
    g = Ladder.conv1d(4.0, kernels=[2.0, 2], strides=[2, 1.0], events=[2, 2.0, 2], seed=0)
    assert g.name == "conv1d-w4-k2.2-s2.1" and g.events == (2, 2, 2) and g.num_regions == (1, 2, 4)


def test_describe_and_repr_are_short():
    g = Ladder.conv2d((4, 4), kernels=[2, 3], strides=[1, 1], events=[2, 2, 2])
    assert "DAG" in repr(g) and len(repr(g)) < 200
    assert g.describe().count("\n") == g.depth + 1 and "parents per region [1, 2, 4]" in g.describe()


# ------------------------------------------------------------------------------------ any tree
def test_tree_constructor_per_region_branching_and_events():
    from inference.posterior import posterior
    from teachers.sampling import sample_ladder

    g = Ladder.tree([[3], [2, 1, 4]], [2, [3, 4, 2], 3], seed=1, sigma=0.6)
    assert g.num_regions == (1, 3, 7) and g.is_tree()
    assert g.parents[2] == ((0,), (0,), (1,), (2,), (2,), (2,), (2,))
    assert g.region_events == ((2,), (3, 4, 2), (3,) * 7)
    assert [t.shape for t in g.region_tables[1]] == [(2, 3), (2, 4), (2, 2)]
    s = sample_ladder(g, 50, 0)
    assert posterior(g, s.inputs()).label.shape == (50, 2)
    b = Ladder.tree([[2], [1, 3]], [3, 2, 2], mode="bottomup", seed=0)
    assert [t.numel() for t in b.lookups[1]] == [2, 8] and b.num_regions == (1, 2, 4)
    for args, match in (
            (([[2], [1]], [2, 2, 2]), r"branching\[1\]: expected 2 children counts"),
            (([[0]], [2, 2]), r"branching\[0\]\[0\]: expected an integer >= 1"),
            (([[2]], [2]), r"events: expected 2 entries"),
            (([[2]], [2, [2, 2, 2]]), r"events\[1\]: expected 2 event counts"),
            (([], [2]), "branching: expected one list"),
            (([[2]], [2, [2, 3]]), "same number of events")):
        with pytest.raises(LadderSpecError, match=match):
            Ladder.tree(*args)


def test_the_two_forms_of_the_constructor_refuse_a_mix():
    """Ladder takes a tree by its branching or a graph by its parents, never both or neither."""
    parents = [[[]], [[0], [0]]]
    tables = [[torch.full((2, 2), 0.5), torch.full((2, 2), 0.5)]]
    for kwargs in ({"branching": [2], "parents": parents}, {}):
        with pytest.raises(LadderSpecError, match=r"^branching, parents: give exactly one"):
            Ladder(events=[2, 2], prior=[0.5, 0.5], tables=tables, **kwargs)
    with pytest.raises(LadderSpecError, match=r"^events: missing"):
        Ladder(parents=parents, prior=[0.5, 0.5], tables=tables)
    with pytest.raises(LadderSpecError, match=r"^factorization, region_names: only for a ladder given by its bran"):
        Ladder(events=[2, 2], parents=parents, prior=[0.5, 0.5], tables=tables, region_names=["a", "b", "c"])
    ok = Ladder(events=[2, 2], parents=parents, prior=[0.5, 0.5], tables=tables)
    assert ok.is_uniform() and ok.branching == (2,)  # a graph that is a uniform tree is recognised as one


_LEAF_OF_32 = [[[]], [[0]] * 32, [list(range(32))] * 4]  # 4 leaves with 32 parents each


@pytest.mark.parametrize("build, match", [
    (lambda: Ladder.conv1d(10**9, [10**9], [1], [2, 2]), r"conv1d: width 1000000000 with kernels \[1000000000\] and "
     r"strides \[1\] gives 1000000001 regions, more than 16777216"),
    (lambda: Ladder.conv2d((10**5, 10**5), [10**5], [1], [2, 2]), "conv2d: shape 100000x100000 with kernels "
     r"\[100000\] and strides \[1\] gives 10000000001 regions, more than 16777216"),
    (lambda: Ladder.fully_informative_conv1d(10**9, [10**9], [1]), "conv1d: width 1000000000 .* more than 16777216"),
    (lambda: Ladder.conv1d(20000, [10000, 10001], [1, 1], [2, 2, 2]), r"tables\[1\]: events\[1\]\^\(parents per "
     r"region\) x events\[2\] = 2\^10000 x 2 = over 2\^64 entries per region exceeds 134217728"),
    (lambda: Ladder.conv1d(20000, [10000, 10001], [1, 1], [2, 2, 2], mode="bottomup"), r"lookup\[1\]: events\[2\]"
     r"\^\(children per region\) = 2\^10000 = over 2\^64 child configurations per region exceeds 4194304"),
    (lambda: Ladder.conv2d((64, 64), [8, 57], [1, 1], [2, 2, 2], mode="bottomup"), r"lookup\[1\]: .* = 2\^64 = "
     r"18446744073709551616 child configurations per region exceeds 4194304"),
    (lambda: Ladder.random(events=[2, 2, 2], parents=_LEAF_OF_32), r"tables\[1\]\[0\]: 4294967296 parent "
     "configurations x 2 events is more than 134217728 entries"),
    (lambda: Ladder.random(events=[2, 2, 2], parents=_LEAF_OF_32, mode="bottomup"), r"lookup\[0\]\[0\]: 4294967296 "
     "child configurations is more than 4194304"),
    (lambda: Ladder.random(events=[2, 2, 2**14], parents=[[[]], [[0]] * 2, [[0, 1]] * 2**12]),
     r"tables\[1\]: the 4096 tables of level 2 together = 268435456 entries exceeds 134217728"),
    (lambda: Ladder.random(events=[2, 1, 2], parents=[[[]], [[0]] * 64, [[i // 22] for i in range(64 * 22)]],
                           mode="bottomup"),
     r"lookup\[1\]: the 64 lookups of level 1 together = 268435456 entries exceeds 134217728"),
])
def test_graphs_too_large_are_refused_from_their_size_before_anything_is_built(build, match):
    """Issue 27: a conv graph's regions and tables, computed from its arguments, and a region graph's tables,
    computed from its parent lists, are refused before any parent list or table is built (these ran for 30-55 s
    and ended in MemoryError), with the limit named."""
    with pytest.raises(LadderSpecError, match=match):
        build()


def test_a_graph_spec_whose_tables_are_too_large_is_refused(tmp_path):
    """Issue 27: load_spec / from_dict refuse a region-graph spec from its parent lists (32 parents per leaf:
    2^32 parent configurations), naming the table and the limit."""
    from teachers.spec_io import load_spec

    d = spec_to_jsonable(Ladder.random(events=[2, 2, 2], parents=[[[]], [[0]] * 3, [[0, 1, 2]] * 4]).to_dict())
    d["parents"] = _LEAF_OF_32
    match = r"tables\[1\]\[0\]: 4294967296 parent configurations x 2 events is more than 134217728 entries"
    with pytest.raises(LadderSpecError, match=match):
        Ladder.from_dict(d)
    (tmp_path / "big.json").write_text(json.dumps(d))
    with pytest.raises(LadderSpecError, match=match):
        load_spec(tmp_path / "big.json")


def test_conv_graphs_within_the_limits_still_build():
    assert Ladder.conv1d(8, [3, 3, 4], [1, 1, 1], [2, 2, 2, 2]).num_regions == (1, 4, 6, 8)
    assert Ladder.conv2d((6, 6), [3, 4], [1, 1], [2, 2, 2], mode="bottomup").num_regions == (1, 16, 36)
