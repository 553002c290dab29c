"""Event statistics (teachers/statistics.py): exact tables against brute-force enumeration,
sample counts against hand counting, sampled vs exact within a multinomial TV bound, and
the fully informative ladder's delta property (Thm 3)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from teachers import Ladder, LadderModel, sample_ladder
from teachers.statistics import compare_statistics, empirical_statistics, exact_statistics


def _consistency(ladder: Ladder):
    st = exact_statistics(ladder)
    d = ladder.depth
    assert st.num_examples is None and st.joints[0] is None
    for l in range(d + 1):
        m = st.marginals[l]
        assert m.shape == (ladder.num_regions[l], ladder.events[l]) and m.dtype == torch.float64
        assert (m >= 0).all()
        assert (m.sum(-1) - 1).abs().max().item() < 1e-12
    for l in range(1, d + 1):
        j = st.joints[l]
        assert j.shape == (ladder.num_regions[l], ladder.events[l - 1], ladder.events[l])
        # sum over the child = the parent's marginal; sum over the parent = the child's marginal
        assert (j.sum(-1) - st.marginals[l - 1][ladder.parent_index(l)]).abs().max().item() < 1e-12
        assert (j.sum(-2) - st.marginals[l]).abs().max().item() < 1e-12
        pd, pu = st.P_down[l], st.P_up[l]
        par_pos = st.marginals[l - 1][ladder.parent_index(l)] > 0  # (R_l, m_{l-1})
        assert (pd.sum(-1)[par_pos] - 1).abs().max().item() < 1e-12
        assert (pd[~par_pos] == 0).all()
        child_pos = st.marginals[l] > 0
        assert (pu.sum(-1)[child_pos] - 1).abs().max().item() < 1e-12
        assert (pu[~child_pos] == 0).all()
        for c in (0, ladder.num_regions[l] - 1):
            assert torch.equal(st.P_ab(l, c), pd[c])
    assert torch.equal(st.region_marginal(d, 1), st.marginals[d][1])
    return st


def test_exact_statistics_are_consistent(tiny_ladder):
    _consistency(tiny_ladder)


@pytest.mark.parametrize("ladder", [
    Ladder.default(),
    Ladder.random(depth=3, branching=[3, 2, 2], events=[5, 4, 3, 6], mode="bottomup", concentration=0.3, seed=1),
    Ladder.fully_informative(depth=2, branching=[3, 2], leaf_events=3, concentration=0.5, seed=2),
    Ladder.factorized_binary(depth=3, branching=2, factors=(1, 2, 2, 4), seed=3),
], ids=["default", "bottomup-deep", "fully-informative", "factorized"])
def test_exact_statistics_consistent_on_larger_ladders(ladder):
    _consistency(ladder)


def test_exact_statistics_equal_brute_force(tiny_ladder, brute):
    st = exact_statistics(tiny_ladder)
    marg, joints = brute.statistics(tiny_ladder)
    for l in range(tiny_ladder.depth + 1):
        np.testing.assert_allclose(st.marginals[l].numpy(), marg[l], rtol=0, atol=1e-12)
        if l:
            np.testing.assert_allclose(st.joints[l].numpy(), joints[l], rtol=0, atol=1e-12)


def test_topdown_P_down_is_the_table(tiny_topdown):
    st = exact_statistics(tiny_topdown)
    for l in range(1, tiny_topdown.depth + 1):
        pos = st.marginals[l - 1][tiny_topdown.parent_index(l)] > 0
        assert (st.P_down[l][pos] - tiny_topdown.tables[l - 1][pos]).abs().max().item() < 1e-12


def test_exact_statistics_rejects_non_ladder():
    with pytest.raises(TypeError, match=r"^ladder: expected a Ladder, got str"):
        exact_statistics("default")


# ---------------------------------------------------------------------- empirical
def _count_by_hand(ladder: Ladder, z: np.ndarray):
    n = len(z)
    off = ladder.level_offsets
    marg, joints = [], [None]
    for l in range(ladder.depth + 1):
        mm = np.zeros((ladder.num_regions[l], ladder.events[l]))
        for i in range(ladder.num_regions[l]):
            for k in range(ladder.events[l]):
                mm[i, k] = np.sum(z[:, off[l] + i] == k) / n
        marg.append(mm)
        if l:
            jj = np.zeros((ladder.num_regions[l], ladder.events[l - 1], ladder.events[l]))
            for i in range(ladder.num_regions[l]):
                par = z[:, off[l - 1] + i // ladder.branching[l - 1]]
                for a, k in itertools.product(range(ladder.events[l - 1]), range(ladder.events[l])):
                    jj[i, a, k] = np.sum((par == a) & (z[:, off[l] + i] == k)) / n
            joints.append(jj)
    return marg, joints


@pytest.mark.parametrize("name", ["td-uneven", "bu", "fully-informative"])
def test_empirical_statistics_equal_hand_counts(make_ladder, name):
    lad = make_ladder(name)
    s = sample_ladder(lad, 3000, seed=0)
    marg, joints = _count_by_hand(lad, s.z.numpy())
    for chunk in (2**18, 7, 1000):
        st = empirical_statistics(lad, s.z, chunk_size=chunk)
        assert st.num_examples == 3000
        for l in range(lad.depth + 1):
            np.testing.assert_allclose(st.marginals[l].numpy(), marg[l], rtol=0, atol=1e-15)
            if l:
                np.testing.assert_allclose(st.joints[l].numpy(), joints[l], rtol=0, atol=1e-15)


def test_empirical_statistics_bad_input(make_ladder):
    lad = make_ladder("td")
    with pytest.raises(ValueError, match=r"^z: expected an \(N, 7\) tensor of events, got \(10, 6\)"):
        empirical_statistics(lad, torch.zeros(10, 6, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^z: expected an \(N, 7\) tensor of events, got ndarray"):
        empirical_statistics(lad, np.zeros((10, 7)))
    with pytest.raises(ValueError, match=r"^z: the sample is empty"):
        empirical_statistics(lad, torch.zeros(0, 7, dtype=torch.long))
    z = torch.zeros(10, 7, dtype=torch.long)
    z[3, 5] = 2  # leaves have 2 events
    with pytest.raises(ValueError, match=r"^z: level 2 has events outside \[0, 2\)"):
        empirical_statistics(lad, z)
    z[3, 5] = -1
    with pytest.raises(ValueError, match=r"^z: level 2 has events outside"):
        empirical_statistics(lad, z)
    with pytest.raises(ValueError, match=r"^empirical: expected statistics counted from a sample"):
        compare_statistics(exact_statistics(lad), exact_statistics(lad))


@pytest.mark.parametrize("name", ["td", "td-zeros", "bu-uneven", "factorized", "fully-informative"])
def test_empirical_matches_exact_within_tv_bound(make_ladder, name, tv):
    """N = 2e5: per region, TV(empirical, exact) < sqrt((k log 2 + log 1e6) / 2N) (BHC bound,
    k cells), which holds with probability >= 1 - 1e-6 per region and shrinks like 1/sqrt(N)."""
    lad = make_ladder(name)
    n = 200_000
    s = sample_ladder(lad, n, seed=17)
    ex, em = exact_statistics(lad), empirical_statistics(lad, s.z)
    res = compare_statistics(ex, em)
    assert res["within_bound"], res
    assert res["num_examples"] == n and res["confidence"] == 1e-6
    assert res["min_chi2_pvalue"] > 1e-6
    # our own bound computation agrees with the library's, level by level
    for l, lev in enumerate(res["per_level"]):
        assert lev["bound_marginal"] == pytest.approx(tv(lad.events[l], n), rel=1e-12)
        tv_m = 0.5 * (ex.marginals[l] - em.marginals[l]).abs().sum(-1)
        assert tv_m.max().item() == pytest.approx(lev["max_tv_marginal"], abs=1e-15)
        assert tv_m.max().item() < tv(lad.events[l], n)
        if l:
            k = lad.events[l - 1] * lad.events[l]
            assert lev["bound_joint"] == pytest.approx(tv(k, n), rel=1e-12)
            tv_j = 0.5 * (ex.joints[l] - em.joints[l]).abs().sum((-1, -2))
            assert tv_j.max().item() < tv(k, n)
    # impossible events are never seen
    for l in range(lad.depth + 1):
        assert (em.marginals[l][ex.marginals[l] == 0] == 0).all()


def test_tv_bound_shrinks_like_inverse_sqrt_n(make_ladder):
    lad = make_ladder("td")
    small = compare_statistics(exact_statistics(lad), empirical_statistics(lad, sample_ladder(lad, 20_000, seed=1).z))
    large = compare_statistics(exact_statistics(lad), empirical_statistics(lad, sample_ladder(lad, 200_000, seed=1).z))
    for a, b in zip(small["per_level"], large["per_level"], strict=True):
        assert b["bound_marginal"] / a["bound_marginal"] == pytest.approx(10**-0.5, rel=1e-12)
    assert small["within_bound"] and large["within_bound"]
    # the measured error shrinks too (expected factor sqrt(10) ~ 3.2; 1.5 leaves ample room)
    assert large["max_tv_joint"] < small["max_tv_joint"] / 1.5


def test_compare_statistics_detects_the_wrong_ladder():
    """Power check: a sample of one ladder is far outside the bound for another ladder."""
    a = Ladder.random(depth=2, branching=2, events=[3, 3, 2], seed=1)
    b = Ladder.random(depth=2, branching=2, events=[3, 3, 2], seed=2)
    s = sample_ladder(a, 50_000, seed=0)
    res = compare_statistics(exact_statistics(b), empirical_statistics(b, s.z))
    assert not res["within_bound"] and res["min_chi2_pvalue"] < 1e-6
    # an impossible event in the sample gives p-value 0
    lad = Ladder(a.branching, a.events, prior=[1.0, 0.0, 0.0], tables=list(a.tables))
    res = compare_statistics(exact_statistics(lad), empirical_statistics(lad, s.z))
    assert res["min_chi2_pvalue"] == 0.0 and not res["within_bound"]


def test_many_events_float64_alias_path(tv):
    """m = 300 > 256 events per leaf: the sampler draws float64 uniforms."""
    lad = Ladder.random(depth=1, branching=2, events=[3, 300], concentration=2.0, seed=4)
    n = 200_000
    s = sample_ladder(lad, n, seed=5)
    ex, em = exact_statistics(lad), empirical_statistics(lad, s.z)
    res = compare_statistics(ex, em)
    assert res["within_bound"] and res["min_chi2_pvalue"] > 1e-6
    assert (0.5 * (ex.marginals[1] - em.marginals[1]).abs().sum(-1)).max().item() < tv(300, n)


# ---------------------------------------------------------------------- Thm 3: delta property
def _leaf_block(ladder: Ladder, level: int, region: int) -> slice:
    """Global columns of the leaves under region ``region`` of ``level``."""
    per = ladder.leaves_under(level)
    start = ladder.level_offsets[-2] + region * per
    return slice(start, start + per)


def test_fully_informative_delta_property_in_sample(make_ladder):
    """Every z_alpha seen in a sample corresponds to exactly one configuration of the one-hot
    leaves under alpha: P(x_alpha | z_alpha) is a delta (Thm 3)."""
    lad = Ladder.fully_informative(depth=2, branching=[2, 3], leaf_events=2)  # uniform leaves: P(root event) = 1/64
    s = sample_ladder(lad, 20_000, seed=1)
    z = s.z.long().numpy()
    x = s.inputs().numpy()  # (N, R_d, 2) one-hot leaves
    for l in range(lad.depth + 1):
        for i in range(lad.num_regions[l]):
            ev = z[:, lad.level_offsets[l] + i]
            cols = _leaf_block(lad, l, i)
            xa = x[:, cols.start - lad.level_offsets[-2]: cols.stop - lad.level_offsets[-2]].reshape(len(z), -1)
            pairs = np.unique(np.concatenate([ev[:, None], xa], 1), axis=0)
            assert len(pairs) == len(np.unique(ev)), (l, i)  # one x_alpha per event
            assert len(np.unique(xa, axis=0)) == len(np.unique(ev))  # and one event per x_alpha
    # all 64 root events occur (P(some event missing) <= 64 (63/64)^20000 ~ 1e-134): not vacuous
    assert len(np.unique(z[:, 0])) == 64


@pytest.mark.parametrize(("depth", "branching", "leaf_events"), [(1, 3, 3), (2, 2, 2), (2, [3, 2], 2), (3, 2, 2)])
def test_fully_informative_event_to_leaves_map_is_bijective(depth, branching, leaf_events):
    """Exactly: over all leaf configurations under alpha, the map leaves -> z_alpha is a
    bijection onto the m_alpha events, and z_alpha is the mixed-radix code of the tuple."""
    lad = Ladder.fully_informative(depth=depth, branching=branching, leaf_events=leaf_events)
    lm = LadderModel(lad)
    r_d, m_d = lad.num_regions[-1], lad.events[-1]
    leaves = torch.tensor(list(itertools.product(range(m_d), repeat=r_d)), dtype=torch.long)
    assert len(leaves) <= 2**16
    flat = leaves
    for l in range(lad.depth - 1, -1, -1):
        flat = lm.parent_events(l, flat)
        per = lad.leaves_under(l)
        for i in range(lad.num_regions[l]):
            under = leaves[:, i * per:(i + 1) * per]
            code = (under * m_d ** torch.arange(per - 1, -1, -1)).sum(-1)
            assert torch.equal(flat[:, i], code)  # z_alpha is the tuple of the leaves under alpha
            uniq = torch.unique(torch.cat([flat[:, i:i + 1], under], 1), dim=0)
            assert len(uniq) == len(torch.unique(flat[:, i])) == lad.events[l]  # injective and onto


def test_fully_informative_P_down_is_deterministic():
    """Exact consequence of the delta property: every child event is a function of its
    parent's event, so each row of P(z_child | z_parent) is one-hot."""
    lad = Ladder.fully_informative(depth=2, branching=2, leaf_events=3, concentration=1.0, seed=3)
    st = exact_statistics(lad)
    for l in range(1, lad.depth + 1):
        pd = st.P_down[l]
        pos = st.marginals[l - 1][lad.parent_index(l)] > 0
        rows = pd[pos]
        assert torch.equal(rows.max(-1).values, torch.ones(len(rows), dtype=torch.float64))
        assert ((rows == 0) | (rows == 1)).all()
    # a random bottom-up ladder is not fully informative: some rows are not one-hot
    other = exact_statistics(Ladder.random(depth=2, branching=2, events=[3, 3, 2], mode="bottomup", seed=0))
    assert (other.P_down[2].max(-1).values < 1 - 1e-9).any()
