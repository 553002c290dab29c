"""The fully informative graph ladder (``Ladder.fully_informative(parents=...)``, Thm 3 of the framework paper on a
DAG).

References written here from the definition: receptive fields by a walk down the children, the leaf
pattern's mixed-radix code (first leaf most significant), consistency of overlapping children by brute
force; exact statistics from ``inference.posterior.graph_statistics``; sampled rows from
``teachers.sampling.sample_ladder``; the tree case against ``Ladder.fully_informative``.
"""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from inference.posterior import graph_statistics
from teachers import Ladder
from teachers.ladder import MAX_EVENTS, MAX_LOOKUP, LadderSpecError
from teachers.regions import conv1d_parents, conv2d_parents
from teachers.sampling import sample_ladder
from teachers.spec_io import spec_to_jsonable

IRREGULAR = [[()], [(0,), (0,), (0,)], [(0, 2), (1,), (0, 1, 2), (2,)]]


def _fields(g: Ladder) -> list[list[tuple[int, ...]]]:
    """``fields[l][i]``: the sorted leaves below region l.i (a walk down the children)."""
    def below(l, i):
        if l == g.depth:
            return {i}
        return set().union(*(below(l + 1, c) for c in g.children[l][i]))

    return [[tuple(sorted(below(l, i))) for i in range(n)] for l, n in enumerate(g.num_regions)]


def _code(leaves: torch.Tensor, m: int) -> torch.Tensor:
    """Mixed-radix code of leaf patterns ``(N, k)`` (first leaf most significant): ``(N,)``."""
    code = torch.zeros(leaves.shape[0], dtype=torch.int64)
    for j in range(leaves.shape[1]):
        code = code * m + leaves[:, j].long()
    return code


def _digits(code: int, m: int, k: int) -> tuple[int, ...]:
    return tuple((code // m ** (k - 1 - j)) % m for j in range(k))


GRAPHS = {
    "conv1d-w4-k2.2.2": lambda **kw: Ladder.fully_informative_conv1d(4, [2, 2, 2], [1, 1, 1], **kw),
    "conv1d-w4-k2.3": lambda **kw: Ladder.fully_informative_conv1d(4, [2, 3], [1, 1], **kw),
    "conv1d-w7-k3.3-s2.1": lambda **kw: Ladder.fully_informative_conv1d(7, [3, 3], [2, 1], **kw),
    "conv1d-w3-k2.2-m3": lambda **kw: Ladder.fully_informative_conv1d(3, [2, 2], [1, 1], 3, **kw),
    "conv2d-3x3-k2.2": lambda **kw: Ladder.fully_informative_conv2d((3, 3), [2, 2], [1, 1], **kw),
    "irregular": lambda **kw: Ladder.fully_informative(parents=IRREGULAR, leaf_events=2, **kw),
}


def test_event_counts_are_leaf_events_to_the_receptive_field_size():
    g = GRAPHS["conv1d-w4-k2.2.2"]()
    assert g.mode == "bottomup" and not g.is_tree() and g.emission.kind == "onehot"
    assert g.region_events == ((16,), (8, 8), (4, 4, 4), (2, 2, 2, 2))
    assert GRAPHS["conv1d-w3-k2.2-m3"]().region_events == ((27,), (9, 9), (3, 3, 3))
    assert GRAPHS["conv2d-3x3-k2.2"]().region_events == ((512,), (16,) * 4, (2,) * 9)
    g = GRAPHS["irregular"]()
    f = _fields(g)
    assert f[1] == [(0, 2), (1, 2), (0, 2, 3)] and g.region_events == ((16,), (4, 4, 8), (2, 2, 2, 2))
    for l in range(g.depth + 1):
        assert g.region_events[l] == tuple(g.leaf_events ** len(r) for r in f[l])
    assert f[0] == [tuple(range(g.num_regions[-1]))]  # the label sees every leaf: m_0 = leaf_events ** leaves


@pytest.mark.parametrize("key", sorted(GRAPHS))
def test_every_sampled_region_is_the_code_of_its_leaf_pattern(key):
    g = GRAPHS[key](concentration=0.7, seed=5)
    z = sample_ladder(g, 3000, seed=1).z.long()
    leaves = z[:, g.level_offsets[-2]:]
    for l, fields in enumerate(_fields(g)):
        for i, f in enumerate(fields):
            assert torch.equal(z[:, g.level_offsets[l] + i], _code(leaves[:, list(f)], g.leaf_events)), (key, l, i)


@pytest.mark.parametrize("key", ["conv1d-w4-k2.2.2", "conv1d-w4-k2.3", "conv1d-w7-k3.3-s2.1", "conv1d-w3-k2.2-m3",
                                 "irregular"])
@pytest.mark.parametrize("concentration", [None, 0.5])
def test_exact_statistics_every_edge_is_deterministic(key, concentration):
    """P(z_child | z_parent) is one-hot on every event of positive probability, at the restriction of the
    parent's leaf pattern to the child's field (so P(x_rf | z_r) is a delta, by composition), and
    P(z_r = pattern) is the product of the leaf priors on the pattern."""
    g = GRAPHS[key](concentration=concentration, seed=2)
    st = graph_statistics(g)
    fields, m = _fields(g), g.leaf_events
    for (l, a, i) in g.edges():
        cond, pair = st.cond[(l, a, i)], st.pair[(l, a, i)]
        fp, fc = fields[l - 1][a], fields[l][i]
        live = pair.sum(-1) > 0
        assert bool(live.all())  # every pattern has positive probability (positive leaf priors)
        for code in range(g.region_events[l - 1][a]):
            digits = dict(zip(fp, _digits(code, m, len(fp)), strict=True))
            want = sum(digits[leaf] * m ** (len(fc) - 1 - j) for j, leaf in enumerate(fc))
            expected = torch.zeros(g.region_events[l][i], dtype=torch.float64)
            expected[want] = 1.0
            assert torch.allclose(cond[code], expected, atol=1e-12), (l, a, i, code)
    for l, fs in enumerate(fields):
        for i, f in enumerate(fs):
            expected = torch.tensor([math.prod(float(g.leaf_priors[leaf][d]) for leaf, d in
                                               zip(f, _digits(c, m, len(f)), strict=True))
                                     for c in range(g.region_events[l][i])], dtype=torch.float64)
            assert torch.allclose(st.p[l][i], expected, atol=1e-12)


def test_inconsistent_children_configurations_map_to_zero():
    g = GRAPHS["conv1d-w4-k2.3"]()  # the top's children see leaves (0, 1), (1, 2), (2, 3)
    fields = _fields(g)
    look = g.lookups[0][0]
    assert look.shape == (64,)
    hits = []
    for code, conf in enumerate(itertools.product(range(4), repeat=3)):
        pattern = {}
        ok = True
        for c, e in zip(g.children[0][0], conf, strict=True):
            for leaf, d in zip(fields[1][c], _digits(e, 2, 2), strict=True):
                ok &= pattern.setdefault(leaf, d) == d
        if ok:
            hits.append(int(look[code]))
            assert int(look[code]) == sum(pattern[leaf] * 2 ** (3 - leaf) for leaf in range(4))
        else:
            assert int(look[code]) == 0
    assert sorted(hits) == list(range(16))  # consistent configurations: a bijection onto the top's patterns


@pytest.mark.parametrize(("depth", "branching", "leaf_events"), [(1, 3, 2), (2, 2, 2), (2, [2, 3], 2), (2, 2, 3)])
def test_on_a_tree_it_is_the_uniform_ladder_teacher_with_identical_codes(depth, branching, leaf_events):
    """A uniform tree's children are contiguous leaf blocks, so children codes and leaf pattern codes coincide:
    identical events, lookups (the identity), leaf priors (same generator and draws) and emission."""
    lad = Ladder.fully_informative(depth=depth, branching=branching, leaf_events=leaf_events, concentration=0.8,
                                   seed=4, emission="gaussian", sigma=0.5)
    tree = lad
    g = Ladder.fully_informative(parents=tree.parents, leaf_events=leaf_events, concentration=0.8, seed=4, sigma=0.5)
    assert g.region_events == tree.region_events and g.parents == tree.parents and g.is_tree()
    for la, lb in zip(g.lookups, tree.lookups, strict=True):
        for a, b in zip(la, lb, strict=True):
            assert torch.equal(a, b) and torch.equal(a, torch.arange(a.numel()))
    assert all(torch.equal(a, b) for a, b in zip(g.leaf_priors, tree.leaf_priors, strict=True))
    assert g.emission.kind == tree.emission.kind == "gaussian"
    assert torch.equal(g.emission.means, tree.emission.means) and torch.equal(g.emission.sigma, tree.emission.sigma)


def test_conv_constructors_share_the_graph():
    assert Ladder.fully_informative_conv1d(7, [3, 3], [2, 1]).parents == \
        Ladder.conv1d(7, [3, 3], [2, 1], events=[2, 2, 2]).parents == conv1d_parents(7, [3, 3], [2, 1])
    assert Ladder.fully_informative_conv2d((3, 3), [2, 2], [1, 1]).parents == \
        Ladder.conv2d((3, 3), [2, 2], [1, 1], events=[2, 2, 2]).parents == conv2d_parents((3, 3), [2, 2], [1, 1])
    g = Ladder.fully_informative_conv1d(4, [2, 3], [1, 1], sigma=0.6, name="fi")
    assert g.name == "fi" and g.emission.kind == "gaussian"
    assert torch.allclose(g.leaf_priors[0], torch.full((2,), 0.5, dtype=torch.float64))
    back = Ladder.from_dict(json.loads(json.dumps(spec_to_jsonable(g.to_dict()))))  # an ordinary bottom-up spec
    assert back.region_events == g.region_events
    assert all(torch.equal(a, b) for la, lb in zip(back.lookups, g.lookups, strict=True)
               for a, b in zip(la, lb, strict=True))


def test_limits_and_bad_arguments_are_refused_by_name():
    assert MAX_EVENTS == 2**16 and MAX_LOOKUP == 2**22
    with pytest.raises(LadderSpecError, match=r"events\[0\]\[0\]: region 0\.0 sees 17 leaves.*2\^17 events.*65536"):
        Ladder.fully_informative_conv1d(17, [17], [1])
    with pytest.raises(LadderSpecError, match=r"events\[0\]\[0\]: region 0\.0 sees 11 leaves.*3\^11"):
        Ladder.fully_informative_conv1d(11, [11], [1], 3)
    # the top sees 16 leaves (2^16 events: allowed) through two children of 15 leaves each: 2^30 entries
    with pytest.raises(LadderSpecError, match=r"lookups\[0\]\[0\]: region 0\.0 has 2 children seeing 30 leaves.*"
                                              r"2\^30 entries.*4194304"):
        Ladder.fully_informative_conv1d(16, [15, 2], [1, 1])
    for bad in (1, 0, True, 2.0, "2", MAX_EVENTS + 1):
        with pytest.raises(LadderSpecError, match="leaf_events"):
            Ladder.fully_informative(parents=IRREGULAR, leaf_events=bad)
    with pytest.raises(LadderSpecError, match=r"parents\[2\]\[1\]: every region below"):
        Ladder.fully_informative(parents=[[()], [(0,)], [(0,), ()]])
    with pytest.raises(LadderSpecError, match=r"parents\[0\]"):
        Ladder.fully_informative(parents=[[(0,)], [(0,)]])
    with pytest.raises(LadderSpecError, match="parents: expected nested lists"):
        Ladder.fully_informative(parents=[[()], ["a"]])
    with pytest.raises(LadderSpecError, match="parents: expected at least two"):
        Ladder.fully_informative(parents=[[()]])
    with pytest.raises(LadderSpecError, match="concentration"):
        Ladder.fully_informative(parents=IRREGULAR, concentration=0)
    with pytest.raises(LadderSpecError, match="seed"):
        Ladder.fully_informative(parents=IRREGULAR, seed=-1)
    with pytest.raises(LadderSpecError, match="sigma"):
        Ladder.fully_informative(parents=IRREGULAR, sigma=-1.0)
    with pytest.raises(LadderSpecError, match="conv1d: the top level has 2 regions"):
        Ladder.fully_informative_conv1d(8, [3, 4], [1, 2])
