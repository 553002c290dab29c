"""The graph ladder's sampler against exact references (issue 17; the Pyro model's tests are in
``tests/test_pyro_model.py``).

The brute-force reference enumerates every joint configuration of a tiny graph ladder with numpy, from
the definitions in ``teachers/ladder.py``'s module docstring (topdown: prior times each region's
table row at the mixed-radix code of its parents, first parent most significant; bottomup: independent
leaves, parents by lookup of the code of all their children); it shares no code with the sampler.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from teachers.ladder import Ladder
from teachers.sampling import BLOCK_SIZE, sample_ladder
from teachers.statistics import exact_statistics

N_STAT = 200_000
TOL = 5 / math.sqrt(N_STAT)


# ---------------------------------------------------------------------- brute force
def _code(z: np.ndarray, sizes) -> np.ndarray:
    code = np.zeros(z.shape[0], dtype=np.int64)
    for j, m in enumerate(sizes):
        code = code * m + z[:, j]
    return code


def brute_force(g: Ladder) -> tuple[np.ndarray, np.ndarray]:
    """Every configuration with nonzero probability of the latent events ``(K, total_regions)`` and its
    probability ``(K,)``."""
    off = g.level_offsets
    ev = [m for lvl in g.region_events for m in lvl]
    if g.mode == "topdown":
        conf = np.array(list(itertools.product(*[range(m) for m in ev])), dtype=np.int64)
        p = g.prior.numpy()[conf[:, 0]]
        for l in range(1, g.depth + 1):
            for i, ps in enumerate(g.parents[l]):
                code = _code(conf[:, [off[l - 1] + q for q in ps]], [g.region_events[l - 1][q] for q in ps])
                p = p * g.region_tables[l][i].numpy()[code, conf[:, off[l] + i]]
        return conf, p
    leaves = np.array(list(itertools.product(*[range(m) for m in g.region_events[-1]])), dtype=np.int64)
    conf = np.zeros((leaves.shape[0], g.total_regions), dtype=np.int64)
    conf[:, off[-2]:] = leaves
    p = np.ones(leaves.shape[0])
    for i in range(g.num_regions[-1]):
        p = p * g.leaf_priors[i].numpy()[leaves[:, i]]
    for l in range(g.depth - 1, -1, -1):
        for i in range(g.num_regions[l]):
            ch = [c for c, ps in enumerate(g.parents[l + 1]) if i in ps]
            code = _code(conf[:, [off[l + 1] + c for c in ch]], [g.region_events[l + 1][c] for c in ch])
            conf[:, off[l] + i] = g.lookups[l][i].numpy()[code]
    return conf, p


def pairs(g: Ladder) -> list[tuple[int, int, int, int]]:
    """``(global parent, global child, m_parent, m_child)`` of every edge."""
    off = g.level_offsets
    return [(off[l - 1] + p, off[l] + i, g.region_events[l - 1][p], g.region_events[l][i]) for l, p, i in g.edges()]


def check_frequencies(g: Ladder, z: torch.Tensor, tol: float) -> None:
    """Every region's marginal and every edge's joint frequency within ``tol`` of brute force."""
    conf, p = brute_force(g)
    z = z.long().numpy()
    n = z.shape[0]
    ev = [m for lvl in g.region_events for m in lvl]
    for r, m in enumerate(ev):
        exact = np.bincount(conf[:, r], weights=p, minlength=m)
        freq = np.bincount(z[:, r], minlength=m) / n
        assert np.abs(freq - exact).max() < tol, (r, freq, exact)
    for a, b, ma, mb in pairs(g):
        exact = np.bincount(conf[:, a] * mb + conf[:, b], weights=p, minlength=ma * mb)
        freq = np.bincount(z[:, a] * mb + z[:, b], minlength=ma * mb) / n
        assert np.abs(freq - exact).max() < tol, (a, b, freq, exact)


DAGS = [dict(width=5, kernels=[3, 3], strides=[1, 1], events=[3, 3, 2]),
        dict(width=6, kernels=[3, 4], strides=[1, 1], events=[2, 3, 2])]
TINY = dict(width=4, kernels=[2, 3], strides=[1, 1], events=[2, 2, 2])


def _dag(spec: dict, mode: str, seed: int = 3, sigma: float | None = None) -> Ladder:
    return Ladder.conv1d(spec["width"], spec["kernels"], spec["strides"], spec["events"], mode=mode,
                         seed=seed, sigma=sigma, concentration=0.7)


# ---------------------------------------------------------------------- the sampler
@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
def test_tree_frequencies_match_exact_statistics(mode):
    ladder = Ladder.random(depth=2, branching=2, events=3, seed=0, mode=mode)
    g = ladder
    z = sample_ladder(g, N_STAT, seed=11).z.long()
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
    check_frequencies(g, sample_ladder(g, N_STAT, seed=5).z, TOL)


@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
def test_sampled_configurations_are_consistent(mode):
    """Every sampled row is a configuration of nonzero probability (bottomup: parents are the lookups)."""
    g = _dag(DAGS[0], mode)
    conf, p = brute_force(g)
    support = {tuple(c) for c in conf[p > 0]}
    z = sample_ladder(g, 3000, seed=1).z.long().numpy()
    assert all(tuple(row) in support for row in z)


@pytest.mark.parametrize("sigma", [None, 0.4])
def test_same_seed_same_rows_whatever_chunk_size(sigma):
    g = _dag(DAGS[0], "topdown", sigma=sigma)
    n = 2 * BLOCK_SIZE + 123
    ref = sample_ladder(g, n, seed=7)
    for chunk in (1, BLOCK_SIZE, 3 * BLOCK_SIZE, 10**6):
        other = sample_ladder(g, n, seed=7, chunk_size=chunk)
        assert torch.equal(ref.z, other.z)
        assert (ref.x is None) == (sigma is None)
        if sigma is not None:
            assert torch.equal(ref.x, other.x)
    prefix = sample_ladder(g, BLOCK_SIZE + 5, seed=7)
    assert torch.equal(prefix.z, ref.z[: BLOCK_SIZE + 5])
    assert not torch.equal(sample_ladder(g, n, seed=8).z, ref.z)
    assert ref.z.dtype == torch.uint8 and ref.z.shape == (n, g.total_regions)
    x = ref.inputs(dtype=torch.float64)
    assert x.shape == (n, g.num_regions[-1], g.leaf_events) and x.dtype == torch.float64
    if sigma is None:
        assert torch.equal(x.argmax(-1), ref.leaves)


def test_global_rng_untouched():
    g = _dag(DAGS[0], "topdown", sigma=0.3)
    state = torch.get_rng_state()
    sample_ladder(g, 5000, seed=0)
    sample_ladder(_dag(DAGS[0], "bottomup"), 5000, seed=0)
    assert torch.equal(state, torch.get_rng_state())


def test_bad_arguments():
    g = _dag(TINY, "topdown")
    for bad in (0, -3, 1.5, True, "10"):
        with pytest.raises(ValueError, match="num_examples"):
            sample_ladder(g, bad)
    for bad in (-1, 1.0, "s", False):
        with pytest.raises(ValueError, match="seed"):
            sample_ladder(g, 10, bad)
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="chunk_size"):
            sample_ladder(g, 10, 0, chunk_size=bad)
    with pytest.raises(ValueError, match="device"):
        sample_ladder(g, 10, 0, device="no-such-device")
    with pytest.raises(TypeError, match="ladder: expected a Ladder"):
        sample_ladder(object(), 10)


def test_a_graph_whose_sampling_block_cannot_fit_is_refused(monkeypatch):
    g = Ladder.conv1d(6, kernels=[3, 4], strides=[1, 1], events=[2, 2, 2])
    monkeypatch.setattr("teachers.sampling._available_bytes", lambda device: 1000)
    with pytest.raises(ValueError, match="ladder: sampling draws whole blocks of 4,096 rows"):
        sample_ladder(g, 3, seed=0)


# ---------------------------------------------------------------------- irregular graphs (the vectorised plan)
IRREGULAR = dict(events=[[3], [2, 3, 2], [2, 2, 2, 2]],
                 parents=[[()], [(0,), (0,), (0,)], [(0, 2), (1,), (0, 1, 2), (2,)]])


@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
def test_irregular_dag_with_mixed_events_matches_brute_force(mode):
    """Regions of one level with different parent counts, event counts and non-strided links."""
    g = Ladder.random(events=IRREGULAR["events"], parents=IRREGULAR["parents"], mode=mode, seed=4,
                      concentration=0.7)
    check_frequencies(g, sample_ladder(g, N_STAT, seed=9).z, TOL)


@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
@pytest.mark.parametrize("spec", [IRREGULAR, None], ids=["irregular", "conv"])
def test_plan_rows_are_mixed_radix_codes(spec, mode):
    """The plan's strided row computation equals the definition: table offset + mixed-radix code."""
    from teachers.regions import mixed_radix
    from teachers.sampling import sampling_plan

    g = (Ladder.random(events=spec["events"], parents=spec["parents"], mode=mode, seed=1) if spec else
         Ladder.conv1d(9, kernels=[3, 3, 3], strides=[1, 2, 1], events=[2, 3, 2, 2], mode=mode, seed=1))
    z = sample_ladder(g, 500, seed=3).z
    off = g.level_offsets
    for lvl in sampling_plan(g, "cpu").levels:
        l = off.index(lvl.lo)
        got = lvl.rows(z).long()
        start = 0
        for i in range(g.num_regions[l]):
            if g.mode == "topdown":
                links, base = (g.parents[l][i], off[l - 1]) if l else ((), 0)
                size = g.region_tables[l][i].shape[0] if l else 1
            else:
                links, base = (g.children[l][i], off[l + 1]) if l < g.depth else ((), 0)
                size = g.lookups[l][i].numel() if l < g.depth else 1
            sizes = [g.region_events[off.index(base)][c] for c in links]
            code = mixed_radix(z[:, [base + c for c in links]].long(), sizes) if links else 0
            assert torch.equal(got[:, i], start + code + torch.zeros(len(z), dtype=torch.long)), (l, i)
            start += size


def test_strided_runs_of_trees_and_convolutions():
    from teachers.sampling import strided_runs

    tree = Ladder.random(depth=2, branching=3, events=2, seed=0)
    assert strided_runs(tree.children[1]) == [(0, 3, 1, [(0, 3), (1, 3), (2, 3)])]  # one run, stride = branching
    conv = Ladder.conv1d(9, [3, 4], [2, 1], [2, 2, 2])
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
