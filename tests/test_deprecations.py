"""The deprecated names of 0.2's region-graph modules (``teachers.graph_ladder``, ``teachers.graph_sampling``): each
still works for one release, warns with a DeprecationWarning naming its replacement, and gives what the new API
gives (one small test per name)."""

from __future__ import annotations

import pytest
import torch

from teachers.ladder import Ladder
from teachers.sampling import LadderSample, sample_ladder, sample_rows, sampling_plan

EVENTS = [[3], [2, 3, 2], [2, 2, 2, 2]]
PARENTS = [[()], [(0,), (0,), (0,)], [(0, 2), (1,), (0, 1, 2), (2,)]]


def _same(a: Ladder, b: Ladder) -> None:
    """The same teacher: the same spec, tables bit for bit (the fingerprint hashes every table's bytes)."""
    assert isinstance(a, Ladder) and isinstance(b, Ladder)
    assert a.fingerprint() == b.fingerprint()


def test_graph_ladder_constructor():
    from teachers.graph_ladder import GraphLadder

    ref = Ladder.random(events=EVENTS, parents=PARENTS, seed=3)
    bu = Ladder.random(events=EVENTS, parents=PARENTS, mode="bottomup", seed=3)
    with pytest.warns(DeprecationWarning, match=r"Ladder\(events=\.\.\., parents=\.\.\."):
        g = GraphLadder(EVENTS, PARENTS, "topdown", ref.emission, prior=ref.prior, tables=list(ref.region_tables),
                        name=ref.name)
    _same(g, ref)
    with pytest.warns(DeprecationWarning, match=r"Ladder\(events=\.\.\., parents=\.\.\."):
        b = GraphLadder(EVENTS, PARENTS, "bottomup", bu.emission, leaf_priors=list(bu.leaf_priors),
                        lookups=list(bu.lookups), name=bu.name)
    _same(b, bu)


def test_graph_ladder_conv1d():
    from teachers.graph_ladder import GraphLadder

    with pytest.warns(DeprecationWarning, match=r"Ladder\.conv1d"):
        g = GraphLadder.conv1d(6, [3, 4], [1, 1], [2, 3, 2], seed=1)
    _same(g, Ladder.conv1d(6, [3, 4], [1, 1], [2, 3, 2], seed=1))


def test_graph_ladder_conv2d():
    from teachers.graph_ladder import GraphLadder

    with pytest.warns(DeprecationWarning, match=r"Ladder\.conv2d"):
        g = GraphLadder.conv2d((3, 3), [2, 2], [1, 1], [2, 2, 2], mode="bottomup", seed=2)
    _same(g, Ladder.conv2d((3, 3), [2, 2], [1, 1], [2, 2, 2], mode="bottomup", seed=2))


def test_graph_ladder_from_ladder():
    from teachers.graph_ladder import GraphLadder

    lad = Ladder.random(depth=2, branching=2, events=3, seed=0)
    with pytest.warns(DeprecationWarning, match="the ladder itself"):
        g = GraphLadder.from_ladder(lad)
    assert g is lad


def test_graph_ladder_random():
    from teachers.graph_ladder import GraphLadder

    for mode in ("topdown", "bottomup"):
        with pytest.warns(DeprecationWarning, match=r"Ladder\.random\(events=\.\.\., parents=\.\.\."):
            g = GraphLadder.random(EVENTS, PARENTS, mode=mode, seed=4, concentration=0.7)
        _same(g, Ladder.random(events=EVENTS, parents=PARENTS, mode=mode, seed=4, concentration=0.7))


def test_graph_ladder_fully_informative():
    from teachers.graph_ladder import GraphLadder

    with pytest.warns(DeprecationWarning, match=r"Ladder\.fully_informative\(parents=\.\.\."):
        g = GraphLadder.fully_informative(PARENTS, 2, concentration=0.5, seed=1)
    _same(g, Ladder.fully_informative(parents=PARENTS, leaf_events=2, concentration=0.5, seed=1))


def test_graph_ladder_fully_informative_conv():
    from teachers.graph_ladder import GraphLadder

    with pytest.warns(DeprecationWarning, match=r"Ladder\.fully_informative_conv1d"):
        g = GraphLadder.fully_informative_conv1d(4, [2, 3], [1, 1])
    _same(g, Ladder.fully_informative_conv1d(4, [2, 3], [1, 1]))
    with pytest.warns(DeprecationWarning, match=r"Ladder\.fully_informative_conv2d"):
        g = GraphLadder.fully_informative_conv2d((3, 3), [2, 2], [1, 1])
    _same(g, Ladder.fully_informative_conv2d((3, 3), [2, 2], [1, 1]))


def test_graph_ladder_tree():
    from teachers.graph_ladder import GraphLadder

    with pytest.warns(DeprecationWarning, match=r"Ladder\.tree"):
        g = GraphLadder.tree([[3], [2, 1, 4]], [2, [3, 4, 2], 3], seed=1)
    _same(g, Ladder.tree([[3], [2, 1, 4]], [2, [3, 4, 2], 3], seed=1))


def test_graph_ladder_from_dict():
    from teachers.graph_ladder import GraphLadder

    spec = Ladder.conv1d(4, [2, 3], [1, 1], [2, 2, 2], seed=0).to_dict()
    with pytest.warns(DeprecationWarning, match=r"Ladder\.from_dict"):
        g = GraphLadder.from_dict(spec)
    _same(g, Ladder.from_dict(spec))


def test_isinstance_graph_ladder_is_any_ladder():
    from teachers.graph_ladder import GraphLadder

    assert isinstance(Ladder.random(depth=1, seed=0), GraphLadder)
    assert isinstance(Ladder.conv1d(4, [2, 3], [1, 1], [2, 2, 2]), GraphLadder)
    assert not isinstance("ladder", GraphLadder)


def test_graph_sampling_sample_graph_ladder():
    from teachers.graph_sampling import sample_graph_ladder

    g = Ladder.random(events=EVENTS, parents=PARENTS, seed=2)
    with pytest.warns(DeprecationWarning, match=r"teachers\.sampling\.sample_ladder"):
        s = sample_graph_ladder(g, 5000, 7, shard="1/2")
    ref = sample_ladder(g, 5000, 7, shard="1/2")
    assert isinstance(s, LadderSample) and torch.equal(s.z, ref.z) and (s.start, s.total) == (ref.start, ref.total)


def test_graph_sampling_sample_graph_rows():
    from teachers.graph_sampling import sample_graph_rows

    g = Ladder.conv1d(6, [3, 4], [1, 1], [2, 3, 2], seed=1, sigma=0.5)
    plan = sampling_plan(g)
    with pytest.warns(DeprecationWarning, match=r"teachers\.sampling\.sample_rows"):
        z, x = sample_graph_rows(g, 3, 100, 5000, plan=plan)
    rz, rx = sample_rows(g, 3, 100, 5000, plan=plan)
    assert torch.equal(z, rz) and torch.equal(x, rx)


def test_graph_sampling_event_dtype():
    from teachers.graph_sampling import event_dtype

    for events, want in ((EVENTS, torch.uint8), ([[3], [300, 2, 4], [2, 2, 2, 2]], torch.int16)):
        g = Ladder.random(events=events, parents=PARENTS, seed=0)
        with pytest.warns(DeprecationWarning, match=r"g\.event_dtype\(\)"):
            got = event_dtype(g)
        assert got == g.event_dtype() == want


def test_graph_sampling_graph_sample():
    import teachers.graph_sampling as graph_sampling

    with pytest.warns(DeprecationWarning, match=r"teachers\.sampling\.LadderSample"):
        cls = graph_sampling.GraphSample
    assert cls is LadderSample


def test_sampler_model_argument():
    from teachers.pyro_model import LadderModel

    lad = Ladder.random(depth=2, branching=2, events=3, seed=0)
    with pytest.warns(DeprecationWarning, match=r"plan=sampling_plan\(ladder\)"):
        z, _ = sample_rows(lad, 1, 0, 100, model=LadderModel(lad))
    assert torch.equal(z, sample_rows(lad, 1, 0, 100)[0])
    with pytest.warns(DeprecationWarning, match=r"plan=sampling_plan\(ladder\)"), \
            pytest.raises(ValueError, match="model: a LadderModel of another ladder"):
        sample_rows(lad, 0, 0, 5, model=LadderModel(Ladder.default()))
