"""Exact posterior draws of latent events (``inference.posterior.posterior_event_draws``): frequencies against
the exact marginals and the brute-force joint posterior, on uniform and uneven trees (backward sampling down the
tree) and on DAGs (ancestral sampling on the junction tree); reproducibility, the ArviZ layout and input
validation."""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import posterior_brute as bf
import pytest
import torch

from inference.posterior import posterior, posterior_event_draws
from teachers import Ladder, sample_ladder


def _draws(idata) -> np.ndarray:
    """``(chains * draws, example, region)``."""
    z = idata.posterior["z"].values
    return z.reshape(-1, *z.shape[2:])


def test_draw_frequencies_match_exact_marginals_and_joint(tiny_ladder, brute, tv):
    s = sample_ladder(tiny_ladder, 3, seed=5)
    x = s.inputs(dtype=torch.float64)
    idata = posterior_event_draws(tiny_ladder, x, num_draws=3000, seed=1, num_chains=2)
    z = _draws(idata)
    n_draws = z.shape[0]
    assert z.dtype == np.int64 and z.shape == (6000, 3, tiny_ladder.total_regions)
    post = posterior(tiny_ladder, x, marginals=True)
    off = tiny_ladder.level_offsets
    for l in range(tiny_ladder.depth + 1):
        m = tiny_ladder.events[l]
        exact = post.marginals[l].numpy()  # (3, R_l, m)
        ev = z[:, :, off[l]: off[l + 1]]
        freq = (ev[..., None] == np.arange(m)).mean(0)
        tv_dist = 0.5 * np.abs(freq - exact).sum(-1)
        assert (tv_dist <= tv(m, n_draws)).all(), (l, tv_dist.max())
        # an event of posterior probability 0 is never drawn
        assert (freq[exact == 0] == 0).all()
    # whole configurations against the brute-force joint posterior p(z | x)
    ref = brute.posterior(tiny_ladder, x)
    w = np.exp(ref["log_joint"] - ref["log_evidence"][:, None])  # (3, K)
    configs = ref["configs"]
    for i in range(3):
        keys = {tuple(c): k for k, c in enumerate(configs)}
        counts = np.zeros(len(configs))
        for row in z[:, i]:
            counts[keys[tuple(row)]] += 1  # KeyError: a draw that is not a valid configuration
        support = w[i] > 0
        assert counts[~support].sum() == 0
        tv_joint = 0.5 * np.abs(counts / n_draws - w[i]).sum()
        assert tv_joint <= tv(int(support.sum()), n_draws), tv_joint


def test_frequencies_converge_like_one_over_sqrt_n(tv):
    lad = Ladder.random(depth=3, branching=2, events=4, concentration=0.5, seed=0, emission="gaussian", sigma=0.7)
    x = sample_ladder(lad, 1, seed=2).inputs(dtype=torch.float64)[0]
    exact = posterior(lad, x[None], marginals=True).marginals
    off = lad.level_offsets
    for n in (100, 10_000):
        z = _draws(posterior_event_draws(lad, x, num_draws=n, seed=7, num_chains=1))[:, 0]
        for l in range(lad.depth + 1):
            freq = (z[:, off[l]: off[l + 1], None] == np.arange(4)).mean(0)
            assert (0.5 * np.abs(freq - exact[l][0].numpy()).sum(-1) <= tv(4, n)).all()


def test_same_seed_same_draws_and_layout():
    lad = Ladder.random(depth=2, branching=2, events=3, concentration=0.8, seed=3, emission="gaussian", sigma=0.8)
    x = sample_ladder(lad, 2, seed=0).inputs(dtype=torch.float64)
    a = posterior_event_draws(lad, x, num_draws=50, seed=11)
    b = posterior_event_draws(lad, x, num_draws=50, seed=11)
    c = posterior_event_draws(lad, x, num_draws=50, seed=12)
    assert np.array_equal(a.posterior["z"].values, b.posterior["z"].values)
    assert not np.array_equal(a.posterior["z"].values, c.posterior["z"].values)
    assert a.posterior["z"].dims == ("chain", "draw", "example", "region")
    assert a.posterior["z"].shape == (2, 50, 2, lad.total_regions)
    # integer region index; the ladder's names ("1.1") are a non-index coordinate (issue 16)
    assert list(a.posterior["region"].values) == list(range(lad.total_regions))
    assert list(a.posterior["region_name"].values) == lad.region_names()
    np.testing.assert_array_equal(a.observed_data["x"].values, x.numpy())
    # the global RNGs are untouched
    state = torch.random.get_rng_state()
    posterior_event_draws(lad, x, num_draws=5, seed=1)
    assert torch.equal(state, torch.random.get_rng_state())
    # one observed input without a batch dimension is one example
    one = posterior_event_draws(lad, x[0], num_draws=50, seed=11)
    assert one.posterior["z"].shape == (2, 50, 1, lad.total_regions)
    summary = az.summary(one, var_names=["z_onehot_0"], kind="diagnostics")
    assert len(summary) == lad.events[0]


def test_default_summary_skips_the_nominal_labels_without_warnings():
    """Issue 27: ``az.summary(idata)`` summarised the event labels ``z`` (a mean and HDI of a category index)
    with a flood of RuntimeWarnings; ``z`` is now a coordinate of the posterior, which the summary skips."""
    lad = Ladder.random(depth=2, branching=2, events=3, concentration=5.0, seed=0, emission="gaussian", sigma=3.0)
    x = sample_ladder(lad, 2, seed=2).inputs(dtype=torch.float64)
    idata = posterior_event_draws(lad, x, num_draws=200, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = az.summary(idata)
    assert not [row for row in summary.index if row.startswith("z[")]
    assert len(summary) == 2 * sum(r * m for r, m in zip(lad.num_regions, lad.events, strict=True))
    # the labels are still where they were, and agree with the indicators that are summarised
    z = idata.posterior["z"]
    assert z.dims == ("chain", "draw", "example", "region") and z.dtype == np.int64
    assert z.attrs["kind"] == "categorical" and "z" not in idata.posterior.data_vars
    np.testing.assert_array_equal(z.sel(region=0).values, idata.posterior["z_onehot_0"].values.argmax(-1)[..., 0])
    mean_y = summary.loc[[f"z_onehot_0[{i}, 0, {k}]" for i in range(2) for k in range(3)], "mean"].to_numpy()
    freq = (z.sel(region=0).values[..., None] == np.arange(3)).mean((0, 1)).reshape(-1)
    np.testing.assert_allclose(mean_y, freq, atol=1e-3)


def test_fully_informative_onehot_draws_are_the_truth():
    """With one-hot leaves of the fully informative ladder every event is a function of x (Thm 3)."""
    lad = Ladder.fully_informative(depth=2, branching=2, leaf_events=2)
    s = sample_ladder(lad, 4, seed=3)
    z = _draws(posterior_event_draws(lad, s.inputs(dtype=torch.float64), num_draws=20, seed=0))
    assert (z == s.z.long().numpy()[None]).all()


def test_bad_input():
    lad = Ladder.random(depth=2, branching=2, events=3, seed=1)
    x = sample_ladder(lad, 2, seed=0).inputs(dtype=torch.float64)
    with pytest.raises(ValueError, match="num_draws"):
        posterior_event_draws(lad, x, num_draws=0)
    with pytest.raises(ValueError, match="num_chains"):
        posterior_event_draws(lad, x, num_draws=5, num_chains=True)
    with pytest.raises(ValueError, match="seed"):
        posterior_event_draws(lad, x, seed=-1)
    with pytest.raises(ValueError, match="x: expected shape"):
        posterior_event_draws(lad, x[:, :2])
    with pytest.raises(TypeError, match="ladder"):
        posterior_event_draws("ladder", x)
    bad = x.clone()
    bad[1] = 0  # not one-hot: impossible under one-hot leaves
    with pytest.raises(ValueError, match=r"^x: example\(s\) \[1\] have probability 0"):
        posterior_event_draws(lad, bad)


def test_draws_do_not_depend_on_the_pass_size(monkeypatch):
    import importlib

    module = importlib.import_module("inference.event_draws")
    ladders = [Ladder.random(depth=2, branching=2, events=3, mode=mode, seed=4, emission="gaussian", sigma=0.7)
               for mode in ("topdown", "bottomup")]
    ladders += [_uneven(mode) for mode in ("topdown", "bottomup")] + [_dag(mode) for mode in ("topdown", "bottomup")]
    for lad in ladders:
        x = sample_ladder(lad, 3, seed=1).inputs(dtype=torch.float64)
        a = posterior_event_draws(lad, x, num_draws=40, seed=3).posterior["z"].values
        with monkeypatch.context() as m:
            m.setattr(module, "_CHUNK_ELEMENTS", 50)  # many small passes
            b = posterior_event_draws(lad, x, num_draws=40, seed=3).posterior["z"].values
        assert np.array_equal(a, b)


# ---------------------------------------------------------------------- uneven trees and DAGs
def _uneven(mode: str) -> Ladder:
    return Ladder.tree([[2], [1, 3], [2, 1, 1, 2]], [3, [2, 3], [2, 2, 3, 2], 2], mode=mode, seed=5, sigma=0.7,
                       concentration=0.8)


def _dag(mode: str) -> Ladder:
    return Ladder.random(events=[[3], [2, 3, 2], [2, 2, 2, 2]], mode=mode, seed=6, sigma=0.7,
                         parents=[[()], [(0,), (0,), (0,)], [(0, 2), (1,), (0, 1, 2), (2,)]])


@pytest.mark.parametrize("kind", ["uneven", "dag"])
@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
def test_draws_of_any_ladder_match_the_brute_force_joint(kind, mode, tv):
    lad = (_uneven if kind == "uneven" else _dag)(mode)
    assert lad.is_tree() == (kind == "uneven") and not lad.is_uniform()
    x = bf.inputs(lad, 2, seed=3)
    z = _draws(posterior_event_draws(lad, x, num_draws=2000, seed=2, num_chains=2))
    n_draws = z.shape[0]
    post = posterior(lad, x, marginals=True)
    for l in range(lad.depth + 1):
        for i in range(lad.num_regions[l]):
            m = lad.region_events[l][i]
            freq = (z[:, :, lad.level_offsets[l] + i, None] == np.arange(m)).mean(0)  # (2, m)
            exact = post.region_marginal(l, i).numpy()
            assert (0.5 * np.abs(freq - exact).sum(-1) <= tv(m, n_draws)).all(), (l, i)
            assert (freq[exact == 0] == 0).all()
    _, _, _, lj, configs = bf.posterior(lad, x)
    keys = {tuple(c): k for k, c in enumerate(configs)}
    for n in range(2):
        w = np.exp(lj[n] - lj[n].max())
        w /= w.sum()
        counts = np.zeros(len(configs))
        for row in z[:, n]:
            counts[keys[tuple(row)]] += 1  # KeyError: a draw that is not a valid configuration
        assert counts[w == 0].sum() == 0
        assert 0.5 * np.abs(counts / n_draws - w).sum() <= tv(int((w > 0).sum()), n_draws)


def test_draws_of_a_dag_bad_input_and_fully_informative_truth():
    g = Ladder.fully_informative_conv1d(4, [2, 3], [1, 1], seed=4)
    s = sample_ladder(g, 3, seed=1)
    z = _draws(posterior_event_draws(g, s.inputs(dtype=torch.float64), num_draws=10, seed=0))
    assert (z == s.z.long().numpy()[None]).all()  # one-hot leaves of a fully informative DAG: x determines z
    bad = s.inputs(dtype=torch.float64).clone()
    bad[2] = 0
    with pytest.raises(ValueError, match=r"^x: example\(s\) \[2\] have probability 0"):
        posterior_event_draws(g, bad)
    with pytest.raises(ValueError, match="induced width"):
        posterior_event_draws(_dag("topdown"), bf.inputs(_dag("topdown"), 1, seed=0), max_clique=2)
