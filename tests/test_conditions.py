"""Thm 2's knowledge conditions on the teacher (smaso/theorems/conditions.py) against brute-force
enumeration of the whole joint (``brute`` of conftest.py, numpy loops written from the ladder's
definitions), scipy's entropies, Pyro's TraceEnum_ELBO, and their own Monte-Carlo estimates."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from pyro import poutine
from pyro.infer import TraceEnum_ELBO, config_enumerate
from scipy.special import logsumexp
from scipy.stats import entropy

from smaso.theorems import conditions
from smaso.theorems.conditions import format_conditions, knowledge_conditions, knowledge_terms
from teachers import Ladder, LadderModel, sample_ladder
from teachers.statistics import exact_statistics

ONE_HOT = ["td", "td-uneven", "td-zeros", "td-depth1", "factorized", "bu", "bu-uneven", "bu-depth1",
           "fully-informative"]


def _leaves_under(lad: Ladder, level: int, region: int) -> np.ndarray:
    """Global (z-column) indices of the leaves under one region, from the breadth-first numbering."""
    L = int(np.prod(lad.branching[level:], dtype=np.int64))
    return lad.level_offsets[-2] + np.arange(region * L, (region + 1) * L)


def _H(p: np.ndarray) -> float:
    return float(entropy(p.reshape(-1))) if p.sum() > 0 else 0.0


def _brute_conditions(lad: Ladder, brute) -> list[dict[str, np.ndarray]]:
    """I(x_b; z_a | z_b) and I(x_a; z_b | z_a) of every pair from the joint over all events (one-hot leaves,
    so x_S is the tuple of the leaf events in S), with scipy's entropies."""
    configs, logp = brute.joint(lad)
    p = np.exp(logp)
    off = lad.level_offsets
    out = []
    for l in range(1, lad.depth + 1):
        rows = {"focus": [], "broadness": [], "H_pc": [], "H_cp": []}
        for beta in range(lad.num_regions[l]):
            alpha = beta // lad.branching[l - 1]
            a, b = configs[:, off[l - 1] + alpha], configs[:, off[l] + beta]
            for cond, (lev, reg) in (("focus", (l, beta)), ("broadness", (l - 1, alpha))):
                _, k = np.unique(configs[:, _leaves_under(lad, lev, reg)], axis=0, return_inverse=True)
                k = k.reshape(-1)
                J = np.zeros((lad.events[l - 1], lad.events[l], k.max() + 1))
                np.add.at(J, (a, b, k), p)
                if cond == "focus":  # I(x; a | b) = H(b, x) + H(a, b) - H(b) - H(a, b, x)
                    i = _H(J.sum(0)) + _H(J.sum(2)) - _H(J.sum((0, 2))) - _H(J)
                else:  # I(x; b | a) = H(a, x) + H(a, b) - H(a) - H(a, b, x)
                    i = _H(J.sum(1)) + _H(J.sum(2)) - _H(J.sum((1, 2))) - _H(J)
                rows[cond].append(i)
            P = np.zeros((lad.events[l - 1], lad.events[l]))
            np.add.at(P, (a, b), p)
            rows["H_pc"].append(_H(P) - _H(P.sum(0)))
            rows["H_cp"].append(_H(P) - _H(P.sum(1)))
        out.append({key: np.array(v) for key, v in rows.items()})
    return out


# ---------------------------------------------------------------------- exact vs the whole joint
@pytest.mark.parametrize("name", ONE_HOT)
def test_exact_equals_brute_force_enumeration(make_ladder, brute, name):
    lad = make_ladder(name)
    rows = knowledge_conditions(lad)
    ref = _brute_conditions(lad, brute)
    assert [r["level"] for r in rows] == list(range(1, lad.depth + 1))
    for row, want in zip(rows, ref, strict=True):
        l = row["level"]
        assert row["method"] == "exact" and row["n"] is None
        assert torch.equal(row["parent"], lad.parent_index(l))
        for key in ("focus", "broadness", "H_parent_given_child", "H_child_given_parent"):
            assert row[key].dtype == torch.float64 and row[key].shape == (lad.num_regions[l],), key
        np.testing.assert_allclose(row["focus"].numpy(), want["focus"], rtol=0, atol=1e-12)
        np.testing.assert_allclose(row["broadness"].numpy(), want["broadness"], rtol=0, atol=1e-12)
        np.testing.assert_allclose(row["H_parent_given_child"].numpy(), want["H_pc"], rtol=0, atol=1e-12)
        np.testing.assert_allclose(row["H_child_given_parent"].numpy(), want["H_cp"], rtol=0, atol=1e-12)
        h = want["H_cp"]
        norm = np.where(h > conditions.ENTROPY_TOL, want["broadness"] / np.where(h > 0, h, 1), 0.0)
        np.testing.assert_allclose(row["broadness_normalized"].numpy(), norm, rtol=0, atol=1e-10)
        assert row["broadness_max"] == pytest.approx(want["broadness"].max(), abs=1e-12)
        assert row["broadness_mean"] == pytest.approx(want["broadness"].mean(), abs=1e-12)
        assert row["focus_max"] == pytest.approx(want["focus"].max(), abs=1e-12)


# ---------------------------------------------------------------------- the facts the module states
def test_fully_informative_ladder_satisfies_both_conditions(make_ladder):
    """Thm 3's delta case: 0 to round-off, exactly and by Monte Carlo, one-hot or Gaussian leaves."""
    for lad in (Ladder.fully_informative(depth=2, branching=2, leaf_events=2),
                Ladder.fully_informative(depth=3, branching=2, leaf_events=2, concentration=1.0, seed=3)):
        for row in knowledge_conditions(lad):
            assert row["focus"].abs().max() < 1e-12 and row["broadness"].abs().max() < 1e-12
            assert (row["H_child_given_parent"] < 1e-12).all()  # z_beta is a function of z_alpha
    for lad in (make_ladder("fully-informative"), make_ladder("fully-informative-gauss")):
        for row in knowledge_conditions(lad, method="monte_carlo", n=500, seed=1):
            assert row["focus"].abs().max() < 1e-12 and row["broadness"].abs().max() < 1e-12
            assert row["broadness_stderr"].max() < 1e-12


@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
def test_focus_holds_exactly_in_tree_ladders(mode, make_ladder):
    """x_beta's subtree meets z_alpha only through z_beta: I(x_beta; z_alpha | z_beta) = 0, while
    H(z_alpha | z_beta) > 0 (the condition is not trivial)."""
    for seed in (0, 1):
        lad = Ladder.random(depth=3, branching=2, events=3, mode=mode, concentration=0.6, seed=seed)
        for row in knowledge_conditions(lad):
            assert row["focus"].abs().max() < 1e-12
            assert row["H_parent_given_child"].max() > 0.1
    lad = make_ladder("td-gauss" if mode == "topdown" else "bu-gauss")
    for t in knowledge_terms(lad, *_sample(lad, 300, seed=2)):
        assert t["focus"].abs().max() < 1e-10  # every example's term, not just their mean


def test_bottomup_onehot_broadness_is_the_conditional_entropy():
    """With one-hot leaves x_alpha determines z_beta: I(x_alpha; z_beta | z_alpha) = H(z_beta | z_alpha),
    > 0 when the parent's summary is not injective (m^b > m)."""
    lad = Ladder.summarization(depth=2, branching=2, events=3, seed=4)
    for row in knowledge_conditions(lad):
        assert (row["H_child_given_parent"] > 0.1).all()
        torch.testing.assert_close(row["broadness"], row["H_child_given_parent"], rtol=0, atol=1e-12)
        torch.testing.assert_close(row["broadness_normalized"], torch.ones_like(row["broadness"]), rtol=0, atol=1e-12)


def test_topdown_broadness_fails_and_leaves_reveal_leaf_events():
    lad = Ladder.random(depth=3, branching=2, events=3, mode="topdown", concentration=0.7, seed=5)
    rows = knowledge_conditions(lad)
    for row in rows:
        assert (row["broadness"] > 0.01).all()
        assert (row["broadness_normalized"] <= 1 + 1e-12).all()
    inner = rows[0]["broadness_normalized"]  # x_alpha reveals z_beta only partly above the leaves
    assert (inner < 0.99).all()
    torch.testing.assert_close(rows[-1]["broadness_normalized"], torch.ones(lad.num_regions[-1], dtype=torch.float64),
                               rtol=0, atol=1e-12)


# ---------------------------------------------------------------------- Monte Carlo
def _sample(lad: Ladder, n: int, seed: int):
    s = sample_ladder(lad, n, seed=seed)
    return s.inputs(dtype=torch.float64), s.z


@pytest.mark.parametrize("name", ["td", "bu-uneven"])
def test_monte_carlo_agrees_with_exact_within_standard_errors(make_ladder, name):
    """Within 4 standard errors at n = 1000 and n = 16000, and the error bars shrink like 1/sqrt(n)."""
    lad = make_ladder(name)
    exact = knowledge_conditions(lad)
    small = knowledge_conditions(lad, method="monte_carlo", n=1000, seed=3)
    large = knowledge_conditions(lad, method="monte_carlo", n=16000, seed=4)
    for e, s, g in zip(exact, small, large, strict=True):
        for mc in (s, g):
            assert mc["method"] == "monte_carlo"
            se = mc["broadness_stderr"]
            assert (se > 0).all()
            assert ((mc["broadness"] - e["broadness"]).abs() <= 4 * se).all(), (mc["n"], mc["level"])
            assert abs(mc["broadness_mean"] - e["broadness_mean"]) <= 4 * mc["broadness_mean_stderr"]
            assert abs(mc["focus_mean"]) < 1e-12
        ratio = s["broadness_stderr"] / g["broadness_stderr"]
        assert ((ratio > 3.0) & (ratio < 5.3)).all(), ratio  # sqrt(16) = 4


@pytest.mark.parametrize("name", ["td-gauss", "bu-gauss", "td-zeros"])
def test_terms_equal_brute_force_posteriors(make_ladder, brute, name):
    """Each example's focus and broadness term from the joint over all events and scipy's Gaussian densities."""
    lad = make_ladder(name)
    x, z = _sample(lad, 12, seed=6)
    terms = knowledge_terms(lad, x, z)
    configs, logp = brute.joint(lad)
    ll = brute.leaf_log_likelihood(lad, x)  # (N, R_d, m_d)
    off, d = lad.level_offsets, lad.depth
    p = np.exp(logp)
    for l in range(1, d + 1):
        for beta in range(lad.num_regions[l]):
            alpha = beta // lad.branching[l - 1]
            ca, cb = configs[:, off[l - 1] + alpha], configs[:, off[l] + beta]
            P = np.zeros((lad.events[l - 1], lad.events[l]))
            np.add.at(P, (ca, cb), p)
            for i in range(x.shape[0]):
                a, b = int(z[i, off[l - 1] + alpha]), int(z[i, off[l] + beta])
                got = {}
                for cond, (lev, reg) in (("focus", (l, beta)), ("broadness", (l - 1, alpha))):
                    cols = _leaves_under(lad, lev, reg)
                    lx = logp + ll[i, cols - off[d], configs[:, cols]].sum(-1)  # log p(config, x_S)
                    if cond == "focus":  # log p(a | x_beta, b) - log P(a | b)
                        got[cond] = (logsumexp(lx[(ca == a) & (cb == b)]) - logsumexp(lx[cb == b])
                                     - math.log(P[a, b] / P[:, b].sum()))
                    else:  # log p(b | x_alpha, a) - log P(b | a)
                        got[cond] = (logsumexp(lx[(ca == a) & (cb == b)]) - logsumexp(lx[ca == a])
                                     - math.log(P[a, b] / P[a].sum()))
                    assert terms[l - 1][cond][i, beta].item() == pytest.approx(got[cond], abs=1e-9), (cond, l, beta, i)


@pytest.mark.parametrize("name", ["td-gauss", "bu-gauss"])
def test_root_broadness_terms_equal_pyro_trace_enum(make_ladder, name, float64):
    """At the root pair x_alpha is all of x: log p(z_beta | x, z_alpha) from Pyro's exact enumeration of the
    plain per-region model, conditioned on the sampled events (TraceEnum_ELBO's loss is -log p(obs))."""
    lad = make_ladder(name)
    x, z = _sample(lad, 3, seed=8)
    terms = knowledge_terms(lad, x, z)[0]["broadness"]
    P = exact_statistics(lad).joints[1]
    model = config_enumerate(LadderModel(lad).plain_model)
    elbo = TraceEnum_ELBO(max_plate_nesting=1)
    for i in range(x.shape[0]):
        for beta in range(lad.num_regions[1]):
            a, b = z[i, 0].long().reshape(1), z[i, 1 + beta].long().reshape(1)
            both = -elbo.loss(poutine.condition(model, {"z_0": a, f"z_{1 + beta}": b}), lambda *a, **k: None,
                              x=x[i: i + 1])
            parent = -elbo.loss(poutine.condition(model, {"z_0": a}), lambda *a, **k: None, x=x[i: i + 1])
            want = both - parent - math.log(P[beta, a, b].item() / P[beta, a].sum().item())
            assert terms[i, beta].item() == pytest.approx(want, abs=1e-8)


def test_monte_carlo_is_seeded_and_leaves_the_global_rng_alone(make_ladder):
    lad = make_ladder("td-gauss")
    state = torch.random.get_rng_state()
    one = knowledge_conditions(lad, method="monte_carlo", n=400, seed=5)
    two = knowledge_conditions(lad, method="monte_carlo", n=400, seed=5)
    other = knowledge_conditions(lad, method="monte_carlo", n=400, seed=6)
    assert torch.equal(torch.random.get_rng_state(), state)
    for a, b, c in zip(one, two, other, strict=True):
        assert torch.equal(a["broadness"], b["broadness"]) and a["n"] == 400
        assert not torch.equal(a["broadness"], c["broadness"])
        for key in ("focus", "broadness", "focus_normalized", "broadness_normalized"):
            assert a[f"{key}_stderr"].shape == a[key].shape
            assert math.isfinite(a[f"{key}_max_stderr"]) and math.isfinite(a[f"{key}_mean_stderr"])


def test_format_conditions(make_ladder):
    lad = make_ladder("td")
    text = format_conditions(knowledge_conditions(lad))
    lines = text.splitlines()
    assert "exact" in lines[0] and len(lines) == 2 + lad.depth
    text = format_conditions(knowledge_conditions(lad, method="monte_carlo", n=200))
    assert "Monte Carlo, n = 200" in text and "±" in text
    with pytest.raises(TypeError, match="rows"):
        format_conditions("not rows")


# ---------------------------------------------------------------------- errors
def test_errors_name_the_argument(make_ladder):
    lad = make_ladder("td")
    with pytest.raises(TypeError, match="ladder"):
        knowledge_conditions("ladder")
    with pytest.raises(ValueError, match="method"):
        knowledge_conditions(lad, method="bayes")
    with pytest.raises(ValueError, match="n:"):
        knowledge_conditions(lad, n=100)
    with pytest.raises(ValueError, match="n:"):
        knowledge_conditions(lad, method="monte_carlo", n=0)
    with pytest.raises(ValueError, match="seed"):
        knowledge_conditions(lad, method="monte_carlo", n=10, seed=-1)
    with pytest.raises(ValueError, match="max_configs"):
        knowledge_conditions(lad, max_configs=0)
    with pytest.raises(ValueError, match=r"max_configs.*2\^4 = 16"):
        knowledge_conditions(lad, max_configs=15)  # broadness at level 1: 4 leaves of 2 events under the root
    with pytest.raises(ValueError, match=r"method.*monte_carlo"):
        knowledge_conditions(make_ladder("td-gauss"))
    x, z = _sample(lad, 5, seed=0)
    with pytest.raises(ValueError, match="z:"):
        knowledge_terms(lad, x, z[:, :3])
    with pytest.raises(ValueError, match="z:"):
        knowledge_terms(lad, x, z.double())
    zeros = make_ladder("td-zeros")
    xz, zz = _sample(zeros, 5, seed=0)
    bad = zz.clone().long()
    bad[:, 0] = 0
    bad[:, 1] = 2  # label 0 never produces event 2 at level 1
    with pytest.raises(ValueError, match="probability 0"):
        knowledge_terms(zeros, xz, bad)
