"""The graph ladder's sampler and Pyro model against exact references (issue 17).

The brute-force reference enumerates every joint configuration of a tiny graph ladder with numpy, from
the definitions in ``teachers/graph_ladder.py``'s module docstring (topdown: prior times each region's
table row at the mixed-radix code of its parents, first parent most significant; bottomup: independent
leaves, parents by lookup of the code of all their children); it shares no code with the sampler.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from pyro import poutine
from pyro.infer import Predictive, TraceEnum_ELBO, config_enumerate

from teachers.graph_ladder import GraphLadder
from teachers.graph_pyro_model import GraphLadderModel
from teachers.graph_sampling import sample_graph_ladder
from teachers.ladder import Ladder
from teachers.sampling import BLOCK_SIZE
from teachers.statistics import exact_statistics

N_STAT = 200_000
TOL = 5 / math.sqrt(N_STAT)


# ---------------------------------------------------------------------- brute force
def _code(z: np.ndarray, sizes) -> np.ndarray:
    code = np.zeros(z.shape[0], dtype=np.int64)
    for j, m in enumerate(sizes):
        code = code * m + z[:, j]
    return code


def brute_force(g: GraphLadder) -> tuple[np.ndarray, np.ndarray]:
    """Every configuration with nonzero probability of the latent events ``(K, total_regions)`` and its
    probability ``(K,)``."""
    off = g.level_offsets
    ev = [m for lvl in g.events for m in lvl]
    if g.mode == "topdown":
        conf = np.array(list(itertools.product(*[range(m) for m in ev])), dtype=np.int64)
        p = g.prior.numpy()[conf[:, 0]]
        for l in range(1, g.depth + 1):
            for i, ps in enumerate(g.parents[l]):
                code = _code(conf[:, [off[l - 1] + q for q in ps]], [g.events[l - 1][q] for q in ps])
                p = p * g.tables[l][i].numpy()[code, conf[:, off[l] + i]]
        return conf, p
    leaves = np.array(list(itertools.product(*[range(m) for m in g.events[-1]])), dtype=np.int64)
    conf = np.zeros((leaves.shape[0], g.total_regions), dtype=np.int64)
    conf[:, off[-2]:] = leaves
    p = np.ones(leaves.shape[0])
    for i in range(g.num_regions[-1]):
        p = p * g.leaf_priors[i].numpy()[leaves[:, i]]
    for l in range(g.depth - 1, -1, -1):
        for i in range(g.num_regions[l]):
            ch = [c for c, ps in enumerate(g.parents[l + 1]) if i in ps]
            code = _code(conf[:, [off[l + 1] + c for c in ch]], [g.events[l + 1][c] for c in ch])
            conf[:, off[l] + i] = g.lookups[l][i].numpy()[code]
    return conf, p


def pairs(g: GraphLadder) -> list[tuple[int, int, int, int]]:
    """``(global parent, global child, m_parent, m_child)`` of every edge."""
    off = g.level_offsets
    return [(off[l - 1] + p, off[l] + i, g.events[l - 1][p], g.events[l][i]) for l, p, i in g.edges()]


def check_frequencies(g: GraphLadder, z: torch.Tensor, tol: float) -> None:
    """Every region's marginal and every edge's joint frequency within ``tol`` of brute force."""
    conf, p = brute_force(g)
    z = z.long().numpy()
    n = z.shape[0]
    ev = [m for lvl in g.events for m in lvl]
    for r, m in enumerate(ev):
        exact = np.bincount(conf[:, r], weights=p, minlength=m)
        freq = np.bincount(z[:, r], minlength=m) / n
        assert np.abs(freq - exact).max() < tol, (r, freq, exact)
    for a, b, ma, mb in pairs(g):
        exact = np.bincount(conf[:, a] * mb + conf[:, b], weights=p, minlength=ma * mb)
        freq = np.bincount(z[:, a] * mb + z[:, b], minlength=ma * mb) / n
        assert np.abs(freq - exact).max() < tol, (a, b, freq, exact)


def log_emission(g: GraphLadder, x: np.ndarray, leaves: np.ndarray) -> np.ndarray:
    """log p(x_n | leaves_k) for a Gaussian emission: ``(N, K)`` from x ``(N, R, dim)`` and leaves ``(K, R)``."""
    mu = g.emission.means.numpy()  # (R, m, dim)
    s2 = float(g.emission.sigma) ** 2
    dim = mu.shape[-1]
    r = np.arange(leaves.shape[1])
    means = mu[r[None, :], leaves]  # (K, R, dim)
    sq = ((x[:, None] - means[None]) ** 2).sum(-1)  # (N, K, R)
    return (-0.5 * sq / s2 - 0.5 * dim * math.log(2 * math.pi * s2)).sum(-1)


DAGS = [dict(width=5, kernels=[3, 3], strides=[1, 1], events=[3, 3, 2]),
        dict(width=6, kernels=[3, 4], strides=[1, 1], events=[2, 3, 2])]
TINY = dict(width=4, kernels=[2, 3], strides=[1, 1], events=[2, 2, 2])


def _dag(spec: dict, mode: str, seed: int = 3, sigma: float | None = None) -> GraphLadder:
    return GraphLadder.conv1d(spec["width"], spec["kernels"], spec["strides"], spec["events"], mode=mode,
                              seed=seed, sigma=sigma, concentration=0.7)


# ---------------------------------------------------------------------- the sampler
@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
def test_tree_frequencies_match_exact_statistics(mode):
    ladder = Ladder.random(depth=2, branching=2, events=3, seed=0, mode=mode)
    g = GraphLadder.from_ladder(ladder)
    z = sample_graph_ladder(g, N_STAT, seed=11).z.long()
    stats = exact_statistics(ladder)
    off = ladder.level_offsets
    for l in range(ladder.depth + 1):
        m = ladder.events[l]
        for i in range(ladder.num_regions[l]):
            freq = torch.bincount(z[:, off[l] + i], minlength=m).double() / N_STAT
            assert (freq - stats.marginals[l][i]).abs().max() < TOL, (l, i)
            if l:
                p, mp = off[l - 1] + i // ladder.branching[l - 1], ladder.events[l - 1]
                joint = torch.bincount(z[:, p] * m + z[:, off[l] + i], minlength=mp * m).double() / N_STAT
                assert (joint.reshape(mp, m) - stats.joints[l][i]).abs().max() < TOL, (l, i)


@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
@pytest.mark.parametrize("spec", DAGS, ids=["w5", "w6"])
def test_dag_frequencies_match_brute_force(spec, mode):
    g = _dag(spec, mode)
    assert not g.is_tree()
    check_frequencies(g, sample_graph_ladder(g, N_STAT, seed=5).z, TOL)


@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
def test_sampled_configurations_are_consistent(mode):
    """Every sampled row is a configuration of nonzero probability (bottomup: parents are the lookups)."""
    g = _dag(DAGS[0], mode)
    conf, p = brute_force(g)
    support = {tuple(c) for c in conf[p > 0]}
    z = sample_graph_ladder(g, 3000, seed=1).z.long().numpy()
    assert all(tuple(row) in support for row in z)


@pytest.mark.parametrize("sigma", [None, 0.4])
def test_same_seed_same_rows_whatever_chunk_size(sigma):
    g = _dag(DAGS[0], "topdown", sigma=sigma)
    n = 2 * BLOCK_SIZE + 123
    ref = sample_graph_ladder(g, n, seed=7)
    for chunk in (1, BLOCK_SIZE, 3 * BLOCK_SIZE, 10**6):
        other = sample_graph_ladder(g, n, seed=7, chunk_size=chunk)
        assert torch.equal(ref.z, other.z)
        assert (ref.x is None) == (sigma is None)
        if sigma is not None:
            assert torch.equal(ref.x, other.x)
    prefix = sample_graph_ladder(g, BLOCK_SIZE + 5, seed=7)
    assert torch.equal(prefix.z, ref.z[: BLOCK_SIZE + 5])
    assert not torch.equal(sample_graph_ladder(g, n, seed=8).z, ref.z)
    assert ref.z.dtype == torch.uint8 and ref.z.shape == (n, g.total_regions)
    x = ref.inputs(dtype=torch.float64)
    assert x.shape == (n, g.num_regions[-1], g.leaf_events) and x.dtype == torch.float64
    if sigma is None:
        assert torch.equal(x.argmax(-1), ref.leaves)


def test_global_rng_untouched():
    g = _dag(DAGS[0], "topdown", sigma=0.3)
    state = torch.get_rng_state()
    sample_graph_ladder(g, 5000, seed=0)
    sample_graph_ladder(_dag(DAGS[0], "bottomup"), 5000, seed=0)
    assert torch.equal(state, torch.get_rng_state())


def test_bad_arguments():
    g = _dag(TINY, "topdown")
    for bad in (0, -3, 1.5, True, "10"):
        with pytest.raises(ValueError, match="num_examples"):
            sample_graph_ladder(g, bad)
    for bad in (-1, 1.0, "s", False):
        with pytest.raises(ValueError, match="seed"):
            sample_graph_ladder(g, 10, bad)
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="chunk_size"):
            sample_graph_ladder(g, 10, 0, chunk_size=bad)
    with pytest.raises(ValueError, match="device"):
        sample_graph_ladder(g, 10, 0, device="no-such-device")
    with pytest.raises(TypeError, match="GraphLadder"):
        sample_graph_ladder(Ladder.random(depth=1, seed=0), 10)
    model = GraphLadderModel(g)
    with pytest.raises(ValueError, match="num_examples"):
        model.model(0)
    with pytest.raises(ValueError, match="num_examples"):
        model.model()
    with pytest.raises(ValueError, match="x"):
        model.model(x=torch.zeros(3, 5, 2))
    with pytest.raises(ValueError, match="z"):
        model.site_values(torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="missing"):
        model.to_z({"z_0_g0": torch.zeros(3, 1)})


# ---------------------------------------------------------------------- the Pyro model
@pytest.mark.parametrize("group_regions", [True, False])
@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
def test_trace_log_prob_is_brute_force_log_joint(mode, group_regions):
    g = _dag(DAGS[0], mode, sigma=0.5)
    s = sample_graph_ladder(g, 40, seed=2)
    model = GraphLadderModel(g, group_regions=group_regions)
    x = s.inputs(dtype=torch.float64)
    data = model.site_values(s.z)
    tr = poutine.trace(poutine.condition(model.model, data=data)).get_trace(x=x)
    conf, p = brute_force(g)
    index = {tuple(c): k for k, c in enumerate(conf)}
    z = s.z.long().numpy()
    rows = [index[tuple(r)] for r in z]
    expected = np.log(p[rows]).sum() + np.diag(log_emission(g, x.numpy(), z[:, g.level_offsets[-2]:])).sum()
    assert float(tr.log_prob_sum()) == pytest.approx(expected, abs=1e-8)
    # the trace's values map back to the same event matrix (bottomup: parents recomputed by the model)
    values = {name: site["value"] for name, site in tr.nodes.items() if name.startswith("z_")}
    assert torch.equal(model.to_z(values), s.z.long())


@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
def test_enumerated_log_evidence_is_brute_force(mode):
    g = _dag(TINY, mode, sigma=0.6)
    x = sample_graph_ladder(g, 12, seed=4).inputs(dtype=torch.float64)
    conf, p = brute_force(g)
    lj = np.log(p)[None] + log_emission(g, x.numpy(), conf[:, g.level_offsets[-2]:])  # (N, K)
    top = lj.max(1, keepdims=True)
    expected = float((top[:, 0] + np.log(np.exp(lj - top).sum(1))).sum())
    model = GraphLadderModel(g, group_regions=False)
    elbo = TraceEnum_ELBO(max_plate_nesting=model.max_plate_nesting)
    got = -elbo.loss(config_enumerate(model.model), lambda *a, **k: None, x=x)
    assert got == pytest.approx(expected, abs=1e-8)
    # the vectorised form refuses enumeration instead of a silently wrong answer
    with pytest.raises(ValueError, match="group_regions=False"):
        elbo.loss(config_enumerate(GraphLadderModel(g).model), lambda *a, **k: None, x=x)


@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
def test_predictive_frequencies(mode):
    g = _dag(DAGS[0], mode)
    model = GraphLadderModel(g)
    n = 40_000
    with torch.no_grad():
        out = Predictive(model.model, num_samples=1)(n, emit=False)
    z = model.to_z(out)
    assert z.shape == (n, g.total_regions)
    check_frequencies(g, z, 5 / math.sqrt(n))


def test_site_names_map_to_regions():
    g = _dag(DAGS[0], "topdown")
    model = GraphLadderModel(g)
    covered = []
    for name in model.site_names():
        level, regions = model.regions_of(name)
        covered += [g.level_offsets[level] + i for i in regions]
        if level:  # a group shares its signature
            assert len({(g.parent_sizes(level, i), g.events[level][i]) for i in regions}) == 1
    assert sorted(covered) == list(range(g.total_regions))
    single = GraphLadderModel(g, group_regions=False)
    assert single.regions_of("z_2_g3") == (2, (3,))
    with pytest.raises(ValueError, match="site"):
        model.regions_of("z_9_g0")


def test_a_graph_whose_sampling_block_cannot_fit_is_refused(monkeypatch):
    from teachers.graph_ladder import GraphLadder
    from teachers.graph_sampling import sample_graph_ladder

    g = GraphLadder.conv1d(6, kernels=[3, 4], strides=[1, 1], events=[2, 2, 2])
    monkeypatch.setattr("teachers.sampling._available_bytes", lambda device: 1000)
    with pytest.raises(ValueError, match="ladder: sampling draws whole blocks of 4,096 rows"):
        sample_graph_ladder(g, 3, seed=0)


# ---------------------------------------------------------------------- irregular graphs (the vectorised plan)
IRREGULAR = dict(events=[[3], [2, 3, 2], [2, 2, 2, 2]],
                 parents=[[()], [(0,), (0,), (0,)], [(0, 2), (1,), (0, 1, 2), (2,)]])


@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
def test_irregular_dag_with_mixed_events_matches_brute_force(mode):
    """Regions of one level with different parent counts, event counts and non-strided links."""
    g = GraphLadder.random(IRREGULAR["events"], IRREGULAR["parents"], mode=mode, seed=4, concentration=0.7)
    check_frequencies(g, sample_graph_ladder(g, N_STAT, seed=9).z, TOL)


@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
@pytest.mark.parametrize("spec", [IRREGULAR, None], ids=["irregular", "conv"])
def test_plan_rows_are_mixed_radix_codes(spec, mode):
    """The plan's strided row computation equals the definition: table offset + mixed-radix code."""
    from teachers.graph_ladder import mixed_radix
    from teachers.graph_sampling import _Plan

    g = (GraphLadder.random(spec["events"], spec["parents"], mode=mode, seed=1) if spec else
         GraphLadder.conv1d(9, kernels=[3, 3, 3], strides=[1, 2, 1], events=[2, 3, 2, 2], mode=mode, seed=1))
    z = sample_graph_ladder(g, 500, seed=3).z
    off = g.level_offsets
    for lvl in _Plan(g, torch.device("cpu")).levels:
        l = off.index(lvl.lo)
        got = lvl.rows(z).long()
        start = 0
        for i in range(g.num_regions[l]):
            if g.mode == "topdown":
                links, base = (g.parents[l][i], off[l - 1]) if l else ((), 0)
                size = g.tables[l][i].shape[0] if l else 1
            else:
                links, base = (g.children[l][i], off[l + 1]) if l < g.depth else ((), 0)
                size = g.lookups[l][i].numel() if l < g.depth else 1
            sizes = [g.events[off.index(base)][c] for c in links]
            code = mixed_radix(z[:, [base + c for c in links]].long(), sizes) if links else 0
            assert torch.equal(got[:, i], start + code + torch.zeros(len(z), dtype=torch.long)), (l, i)
            start += size


def test_strided_runs_of_trees_and_convolutions():
    from teachers.graph_sampling import strided_runs

    tree = GraphLadder.from_ladder(Ladder.random(depth=2, branching=3, events=2, seed=0))
    assert strided_runs(tree.children[1]) == [(0, 3, 1, [(0, 3), (1, 3), (2, 3)])]  # one run, stride = branching
    conv = GraphLadder.conv1d(9, [3, 4], [2, 1], [2, 2, 2])
    assert strided_runs(conv.children[1]) == [(0, 4, 1, [(0, 2), (1, 2), (2, 2)])]  # kernel 3, stride 2
    assert strided_runs([(0, 1), (0, 1), (2, 3), (2, 3)]) == [(0, 2, 2, [(0, 2), (1, 2)])]  # shared links: rep 2
    irregular = [(0,), (0, 1), (2,)]
    runs = strided_runs(irregular)
    covered = [i0 + t * rep + r for i0, q, rep, _ in runs for t in range(q) for r in range(rep)]
    assert covered == [0, 1, 2]
    for i0, q, rep, places in runs:  # every region's links are the strided places of its run
        for t in range(q):
            for r in range(rep):
                assert tuple(a + s * t for a, s in places) == irregular[i0 + t * rep + r]
