"""Figures of the factorial mixture (smaso/plots/factorial.py): they are drawn and saved, bad input raises
ValueError naming the argument, and the numbers they compute from draws match references written here."""

from __future__ import annotations

import itertools

import arviz as az
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from inference.factorial import exact_posterior, factorial_gap, factorial_posterior_draws, mean_field_map
from smaso.plots._base import plt
from smaso.plots.factorial import (
    configuration_frequencies,
    marginal_frequencies,
    mean_field_configuration_probs,
    plot_configuration_posterior,
    plot_gap_vs_defect,
    plot_marginal_forest,
)

F64 = torch.float64


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _layer(K=3, D=4, seed=0, orthogonal=False):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(K, D, generator=g, dtype=F64)
    if orthogonal:
        W = 1.5 * torch.linalg.qr(W.T)[0].T
    A = torch.zeros(K, 2, D, dtype=F64)
    A[:, 1] = W
    B = torch.zeros(K, 2, dtype=F64)
    B[:, 1] = 0.5 * torch.randn(K, generator=g, dtype=F64)
    return A, B


def _idata(t):
    return az.from_dict(posterior={"t": t})


def _random_draws(chains=2, draws=300, n=3, k=3, r=2, seed=0):
    return np.random.default_rng(seed).integers(0, r, size=(chains, draws, n, k))


# ---------------------------------------------------------------------- numbers
def test_marginal_frequencies_count_the_draws():
    t = _random_draws(r=3)
    freq, mcse = marginal_frequencies(_idata(t), 3)
    ref = np.zeros((3, 3, 3))
    for n, k, r in itertools.product(range(3), range(3), range(3)):
        ref[n, k, r] = sum(int(v == r) for v in t[:, :, n, k].ravel()) / t[:, :, n, k].size
    np.testing.assert_allclose(freq, ref, atol=1e-15)
    # independent draws: the Monte Carlo standard error of a mean is about sd / sqrt(draws)
    sd = np.sqrt(ref * (1 - ref))
    np.testing.assert_allclose(mcse, sd / np.sqrt(600), rtol=0.3)
    # a region never (or always) drawn has no spread: error 0, not NaN
    freq, mcse = marginal_frequencies(_idata(np.zeros((2, 50, 1, 2), dtype=np.int64)), 2)
    assert (freq[..., 0] == 1).all() and (mcse == 0).all()


def test_configuration_frequencies_and_mean_field_product():
    t = _random_draws(n=2, k=3, r=2, seed=1)
    freq = configuration_frequencies(_idata(t), 2)
    configs = list(itertools.product(range(2), repeat=3))
    for n in range(2):
        flat = t[:, :, n].reshape(-1, 3)
        ref = [np.mean([tuple(row) == c for row in flat]) for c in configs]
        np.testing.assert_allclose(freq[n], ref, atol=1e-15)
    q = np.random.default_rng(2).dirichlet(np.ones(3), size=(2, 4))  # (N=2, K=4, R=3)
    prod = mean_field_configuration_probs(q)
    ref = np.array([[np.prod([q[n, k, r] for k, r in enumerate(c)]) for c in itertools.product(range(3), repeat=4)]
                    for n in range(2)])
    np.testing.assert_allclose(prod, ref, rtol=1e-13)
    np.testing.assert_allclose(mean_field_configuration_probs(torch.as_tensor(q)), ref, rtol=1e-13)


def test_number_helpers_reject_bad_input():
    t = _random_draws()
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="num_regions"):
            marginal_frequencies(_idata(t), bad)
        with pytest.raises(ValueError, match="num_regions"):
            configuration_frequencies(_idata(t), bad)
    with pytest.raises(ValueError, match="num_regions"):
        marginal_frequencies(_idata(t + 1), 2)  # region 2 out of range
    with pytest.raises(ValueError, match="draws"):
        marginal_frequencies(t, 2)  # a bare array, not InferenceData
    with pytest.raises(ValueError, match="draws"):
        marginal_frequencies(az.from_dict(posterior={"z": t}), 2)
    with pytest.raises(ValueError, match="draws"):
        marginal_frequencies(_idata(t.astype(float)), 2)
    with pytest.raises(ValueError, match="q"):
        mean_field_configuration_probs(np.ones((2, 3)))


# ---------------------------------------------------------------------- figures
def _gaps():
    out = []
    for seed, ortho in ((0, True), (1, False), (2, False)):
        A, B = _layer(seed=seed, orthogonal=ortho)
        x = torch.randn(60, 4, dtype=F64, generator=torch.Generator().manual_seed(seed))
        out.append(factorial_gap(A, B, x))
    return out


def test_plot_gap_vs_defect(tmp_path):
    gaps = _gaps()
    path = tmp_path / "gap.png"
    fig = plot_gap_vs_defect(gaps, path, marginal_tv=[0.0, 0.01, 0.02], title="t")
    assert isinstance(fig, Figure) and len(fig.axes) == 3
    assert path.exists() and path.stat().st_size > 5000
    assert len(plot_gap_vs_defect(gaps).axes) == 2
    with pytest.raises(ValueError, match="gaps"):
        plot_gap_vs_defect([])
    with pytest.raises(ValueError, match="gaps"):
        plot_gap_vs_defect(gaps[0])  # one dict, not a list of them
    with pytest.raises(ValueError, match=r"gaps\[1\]"):
        plot_gap_vs_defect([gaps[0], {"orthogonality_defect": 0.1}])
    with pytest.raises(ValueError, match="marginal_tv"):
        plot_gap_vs_defect(gaps, marginal_tv=[0.0])
    with pytest.raises(ValueError, match="marginal_tv"):
        plot_gap_vs_defect(gaps, marginal_tv=[0.0, np.nan, 0.1])


def _posterior_panel(orthogonal, seed=0):
    A, B = _layer(seed=seed, orthogonal=orthogonal)
    x = torch.randn(2, 4, dtype=F64, generator=torch.Generator().manual_seed(seed))
    return (factorial_posterior_draws(A, B, x, num_draws=100, seed=seed), exact_posterior(A, B, x),
            mean_field_map(A, B, x))


def test_plot_marginal_forest(tmp_path):
    d1, e1, m1 = _posterior_panel(True)
    d2, e2, m2 = _posterior_panel(False, seed=1)
    path = tmp_path / "forest.png"
    fig = plot_marginal_forest([d1, d2], [e1.marginals, e2.marginals], [m1.probs, m2.probs], path,
                               titles=["orthogonal", "free"], title="t")
    assert isinstance(fig, Figure) and path.exists() and path.stat().st_size > 5000
    # the plotted points are the exact marginals (black crosses) of region 1, one per (input, unit)
    offsets = fig.axes[0].collections[1].get_offsets()
    np.testing.assert_allclose(np.asarray(offsets)[:, 0], e1.marginals[..., 1].reshape(-1).numpy())
    plot_marginal_forest(d1, e1.marginals, m1.probs, titles="one panel", region=0)  # a single panel
    with pytest.raises(ValueError, match="region"):
        plot_marginal_forest(d1, e1.marginals, m1.probs, region=2)
    with pytest.raises(ValueError, match="mean_field"):
        plot_marginal_forest(d1, e1.marginals, m1.probs[:1])
    with pytest.raises(ValueError, match="exact"):
        plot_marginal_forest(d1, e1.marginals[0], m1.probs)
    with pytest.raises(ValueError, match="draws"):
        plot_marginal_forest([d1, d2], [e1.marginals], [m1.probs])
    with pytest.raises(ValueError, match="titles"):
        plot_marginal_forest([d1, d2], [e1.marginals, e2.marginals], [m1.probs, m2.probs], titles=["a"])
    with pytest.raises(ValueError, match="draws"):
        plot_marginal_forest(d1, e2.marginals[:1], m2.probs[:1])  # draws of 2 inputs, 1 input given
    with pytest.raises(ValueError, match="draws"):
        plot_marginal_forest(e1.marginals, e1.marginals, m1.probs)


def test_plot_configuration_posterior(tmp_path):
    d, e, m = _posterior_panel(False, seed=3)
    path = tmp_path / "configs.png"
    fig = plot_configuration_posterior(e.configs, e.probs, m.probs, path, draws=d, top=5, titles=["a", "b"],
                                       title="t")
    assert isinstance(fig, Figure) and path.exists() and path.stat().st_size > 5000
    # the bars are the exact probabilities, most probable first, then draws, then the mean-field product
    bars = [p.get_height() for p in fig.axes[0].patches]
    order = np.argsort(-e.probs[0].numpy(), kind="stable")[:5]
    np.testing.assert_allclose(bars[:5], e.probs[0].numpy()[order])
    np.testing.assert_allclose(bars[10:15], mean_field_configuration_probs(m.probs)[0][order])
    plot_configuration_posterior(e.configs, e.probs[0], m.probs[0], top=None)  # one input, all configurations
    with pytest.raises(ValueError, match="configs"):
        plot_configuration_posterior(e.configs.flip(0), e.probs, m.probs)
    with pytest.raises(ValueError, match="configs"):
        plot_configuration_posterior(e.configs[:4], e.probs, m.probs)
    with pytest.raises(ValueError, match="mean_field"):
        plot_configuration_posterior(e.configs, e.probs, m.probs[:1])
    with pytest.raises(ValueError, match="top"):
        plot_configuration_posterior(e.configs, e.probs, m.probs, top=0)
    with pytest.raises(ValueError, match="titles"):
        plot_configuration_posterior(e.configs, e.probs, m.probs, titles=["a"])
    with pytest.raises(ValueError, match="draws"):
        plot_configuration_posterior(e.configs, e.probs[:1], m.probs[:1], draws=d)
    with pytest.raises(ValueError, match="exact"):
        plot_configuration_posterior(e.configs, np.full((2, 8), np.nan), m.probs)
