"""The whole posterior of the factorial mixture (inference/factorial.py: configurations, exact_posterior,
factorial_posterior_draws, MeanField.draws) against brute-force enumeration written here from docs/theory.md §3 (Eq 10),
Pyro's own enumeration, and, for the draws, the exact probabilities with tolerances that shrink like 1/sqrt(N)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import warnings

import arviz as az
import numpy as np
import pytest
import torch
from pyro.infer import TraceEnum_ELBO, config_enumerate

from inference.factorial import (
    DEFAULT_MAX_DRAW_CONFIGS,
    configurations,
    exact_joint_map,
    exact_posterior,
    factorial_posterior_draws,
    mean_field_map,
)
from smaso.splines.mixture import factorial_mixture_model, log_pi_from_offsets

F64 = torch.float64


def _random_layer(K=3, R=2, D=4, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(K, R, D, generator=g, dtype=F64), torch.randn(K, R, generator=g, dtype=F64)


def _orthogonal_relu_layer(K=3, D=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(D, D, generator=g, dtype=F64))
    A = torch.zeros(K, 2, D, dtype=F64)
    A[:, 1] = 1.5 * Q[:K]
    B = torch.zeros(K, 2, dtype=F64)
    B[:, 1] = torch.randn(K, generator=g, dtype=F64) - 1.0
    return A, B


def _brute_log_joint(A, B, x, sigma):
    """log p(t, x) ``(N, R^K)`` and the configurations, from the definitions: pi = softmax((B + |A|^2/2) / sigma^2)
    (docs/theory.md §3), x ~ Normal(sum_k A[k, t_k], sigma^2 I); plain loops over itertools.product."""
    K, R, D = A.shape
    An, Bn, xn = A.numpy(), B.numpy(), x.numpy()
    logits = (Bn + 0.5 * (An**2).sum(-1)) / sigma**2
    log_pi = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    configs = list(itertools.product(range(R), repeat=K))
    out = np.empty((xn.shape[0], len(configs)))
    for c, cfg in enumerate(configs):
        mean = sum(An[k, r] for k, r in enumerate(cfg))
        lp = sum(log_pi[k, r] for k, r in enumerate(cfg))
        out[:, c] = lp - 0.5 * ((xn - mean) ** 2).sum(-1) / sigma**2 - 0.5 * D * math.log(2 * math.pi * sigma**2)
    return np.array(configs), out


def test_configurations_are_in_code_order():
    for K, R in ((1, 1), (1, 4), (3, 2), (2, 3), (4, 3)):
        c = configurations(K, R)
        assert c.dtype == torch.int64 and c.shape == (R**K, K)
        assert c.tolist() == [list(t) for t in itertools.product(range(R), repeat=K)]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="K"):
            configurations(bad, 2)
        with pytest.raises(ValueError, match="R"):
            configurations(2, bad)


@pytest.mark.parametrize(("K", "R", "sigma"), [(3, 3, 1.1), (4, 2, 0.7), (1, 3, 2.0)])
def test_exact_posterior_matches_brute_force_and_pyro(K, R, sigma):
    A, B = _random_layer(K=K, R=R, D=4, seed=K + R)
    x = 1.5 * torch.randn(7, 4, dtype=F64, generator=torch.Generator().manual_seed(1))
    post = exact_posterior(A, B, x, sigma)
    configs, log_joint = _brute_log_joint(A, B, x, sigma)
    assert np.array_equal(post.configs.numpy(), configs)
    log_ev = np.log(np.exp(log_joint - log_joint.max(1, keepdims=True)).sum(1)) + log_joint.max(1)
    np.testing.assert_allclose(post.log_evidence.numpy(), log_ev, rtol=0, atol=1e-10)
    np.testing.assert_allclose(post.log_probs.numpy(), log_joint - log_ev[:, None], rtol=0, atol=1e-10)
    np.testing.assert_allclose(post.probs.sum(-1).numpy(), 1.0, atol=1e-12)
    marg = np.zeros((7, K, R))
    for c, cfg in enumerate(configs):
        for k, r in enumerate(cfg):
            marg[:, k, r] += np.exp(log_joint[:, c] - log_ev)
    np.testing.assert_allclose(post.marginals.numpy(), marg, rtol=0, atol=1e-12)
    # the most probable configuration is the joint MAP
    assert torch.equal(post.configs[post.log_probs.argmax(-1)], exact_joint_map(A, B, x, sigma))
    # Pyro's enumeration of the sequential layout gives the same evidence
    log_pi = log_pi_from_offsets(A, B, sigma)
    log_px = -TraceEnum_ELBO(max_plate_nesting=1).loss(
        config_enumerate(lambda xx: factorial_mixture_model(A, None, sigma, xx, layout="sequential", log_pi=log_pi)),
        lambda xx: None, x)
    assert log_px == pytest.approx(post.log_evidence.sum().item(), rel=1e-12)


def test_exact_posterior_factorizes_on_orthogonal_layers():
    """Eq 11: the posterior is the product of the per-unit posteriors softmax(s / sigma^2), and mean field is exact."""
    A, B = _orthogonal_relu_layer(K=3, D=6, seed=2)
    x = torch.randn(20, 6, dtype=F64, generator=torch.Generator().manual_seed(3))
    sigma = 0.8
    post = exact_posterior(A, B, x, sigma)
    per_unit = torch.softmax((torch.einsum("krd,nd->nkr", A, x) + B) / sigma**2, -1)
    torch.testing.assert_close(post.marginals, per_unit, rtol=0, atol=1e-12)
    product = torch.ones(20, 1, dtype=F64)
    for k in range(3):
        product = (product[:, :, None] * per_unit[:, k, None, :]).reshape(20, -1)
    torch.testing.assert_close(post.probs, product, rtol=0, atol=1e-12)
    torch.testing.assert_close(mean_field_map(A, B, x, sigma).probs, post.marginals, rtol=0, atol=1e-10)


def test_exact_posterior_does_not_factorize_without_eq_11():
    A, B = _random_layer(K=3, R=2, D=2, seed=4, scale=1.5)
    x = 1.5 * torch.randn(30, 2, dtype=F64, generator=torch.Generator().manual_seed(5))
    post = exact_posterior(A, B, x, 1.0)
    m = post.marginals
    product = (m[:, 0, :, None, None] * m[:, 1, None, :, None] * m[:, 2, None, None, :]).reshape(30, -1)
    assert (post.probs - product).abs().max() > 0.05


@pytest.mark.parametrize(("K", "R"), [(3, 2), (2, 3)])
def test_draws_follow_the_exact_posterior(K, R, tv):
    A, B = _random_layer(K=K, R=R, D=3, seed=7, scale=1.2)
    x = 1.5 * torch.randn(4, 3, dtype=F64, generator=torch.Generator().manual_seed(8))
    sigma = 0.9
    num_draws, num_chains = 3000, 2
    S = num_draws * num_chains
    idata = factorial_posterior_draws(A, B, x, sigma, num_draws=num_draws, num_chains=num_chains, seed=11)
    t = idata.posterior["t"]
    assert t.dims == ("chain", "draw", "example", "unit") and t.shape == (num_chains, num_draws, 4, K)
    assert np.issubdtype(t.dtype, np.integer)
    np.testing.assert_array_equal(idata.observed_data["x"].values, x.numpy())
    post = exact_posterior(A, B, x, sigma)
    t = t.values.reshape(S, 4, K)
    codes = (t * R ** np.arange(K - 1, -1, -1)).sum(-1)
    for n in range(4):
        freq = np.bincount(codes[:, n], minlength=R**K) / S
        p = post.probs[n].numpy()
        assert 0.5 * np.abs(freq - p).sum() < tv(R**K, S)  # total variation, ~ 1/sqrt(S)
        for k in range(K):
            for r in range(R):
                q = post.marginals[n, k, r].item()
                assert abs((t[:, n, k] == r).mean() - q) <= 5 * math.sqrt(q * (1 - q) / S) + 1e-12
    # ArviZ reads it: the posterior mean of a binary unit is its marginal, the draws are independent
    with warnings.catch_warnings():
        # an indicator never drawn is constant, and ArviZ's r_hat of a constant divides by zero
        warnings.filterwarnings("ignore", "invalid value", RuntimeWarning)
        summary = az.summary(idata, var_names=["t_onehot"], kind="all")
        default = az.summary(idata)
    marginals = post.marginals.reshape(-1).numpy()
    np.testing.assert_allclose(summary["mean"].to_numpy(), marginals, atol=5 / math.sqrt(S))
    varies = (marginals > 0.01) & (marginals < 0.99)
    assert varies.sum() >= 4  # the r_hat check below has something to check
    assert (summary["r_hat"][varies] < 1.01).all() and (summary["ess_bulk"][varies] > 0.7 * S).all()
    # the default summary skips the nominal labels (a coordinate): the indicators only
    assert list(default.index) == list(summary.index)
    assert idata.posterior["t"].attrs["kind"] == "categorical" and "t" not in idata.posterior.data_vars


def test_draws_are_reproducible_and_leave_the_global_rng_alone():
    A, B = _random_layer(K=3, R=2, D=3, seed=1)
    x = torch.randn(2, 3, dtype=F64, generator=torch.Generator().manual_seed(2))
    state = torch.get_rng_state()
    a = factorial_posterior_draws(A, B, x, num_draws=200, seed=5).posterior["t"].values
    assert torch.equal(torch.get_rng_state(), state)
    b = factorial_posterior_draws(A, B, x, num_draws=200, seed=5).posterior["t"].values
    c = factorial_posterior_draws(A, B, x, num_draws=200, seed=6).posterior["t"].values
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    # the two chains are different draws, not copies
    assert not np.array_equal(a[0], a[1])
    mf = mean_field_map(A, B, x)
    d1, d2 = mf.draws(100, seed=3).posterior["t"].values, mf.draws(100, seed=3).posterior["t"].values
    assert np.array_equal(d1, d2) and torch.equal(torch.get_rng_state(), state)


def test_deterministic_units_broadcast_to_every_draw():
    """A unit whose posterior is a point mass still gets one value per draw and input."""
    A, B = _orthogonal_relu_layer(K=2, D=4, seed=0)
    A = 5 * A  # posteriors of 0 or 1 to machine precision
    x = torch.cat([A[:, 1].sum(0, keepdim=True), -A[:, 1].sum(0, keepdim=True)])  # all on, all off
    for method in ("pyro", "enumeration"):
        t = factorial_posterior_draws(A, B, x, num_draws=50, num_chains=3, seed=0, method=method).posterior["t"]
        assert t.shape == (3, 50, 2, 2)
        assert (t.values[:, :, 0] == 1).all() and (t.values[:, :, 1] == 0).all()


def test_very_sharp_posteriors_need_the_enumeration_method():
    """Pyro's log-space contraction underflows when configurations differ by thousands of nats: a clear error that
    names the alternative, which samples the same posterior without underflow."""
    A, B = _orthogonal_relu_layer(K=2, D=4, seed=0)
    A = 40 * A
    x = torch.cat([A[:, 1].sum(0, keepdim=True), -A[:, 1].sum(0, keepdim=True)])  # all on, all off
    with pytest.raises(ValueError, match="method='enumeration'"):
        factorial_posterior_draws(A, B, x, num_draws=10, seed=0)
    t = factorial_posterior_draws(A, B, x, num_draws=50, seed=0, method="enumeration").posterior["t"].values
    assert (t[:, :, 0] == 1).all() and (t[:, :, 1] == 0).all()


def test_enumeration_method_follows_the_exact_posterior(tv):
    A, B = _random_layer(K=3, R=3, D=3, seed=12, scale=1.2)
    x = 1.5 * torch.randn(3, 3, dtype=F64, generator=torch.Generator().manual_seed(13))
    S = 6000
    t = factorial_posterior_draws(A, B, x, num_draws=S, num_chains=1, seed=1, method="enumeration").posterior["t"]
    codes = (t.values[0] * 3 ** np.arange(2, -1, -1)).sum(-1)  # (S, N)
    probs = exact_posterior(A, B, x).probs.numpy()
    for n in range(3):
        assert 0.5 * np.abs(np.bincount(codes[:, n], minlength=27) / S - probs[n]).sum() < tv(27, S)


def test_mean_field_draws_follow_q():
    A, B = _random_layer(K=3, R=3, D=3, seed=9)
    x = torch.randn(5, 3, dtype=F64, generator=torch.Generator().manual_seed(1))
    mf = mean_field_map(A, B, x)
    idata = mf.draws(num_draws=2000, num_chains=2, seed=0, x=x)
    t = idata.posterior["t"]
    assert t.dims == ("chain", "draw", "example", "unit") and t.shape == (2, 2000, 5, 3)
    np.testing.assert_array_equal(idata.observed_data["x"].values, x.numpy())
    t = t.values.reshape(4000, 5, 3)
    q = mf.probs.numpy()
    for r in range(3):
        freq = (t == r).mean(0)
        assert (np.abs(freq - q[..., r]) <= 5 * np.sqrt(q[..., r] * (1 - q[..., r]) / 4000) + 1e-12).all()
    # the fit's inputs are observed data by default (issue 16); a MeanField built without x has none
    np.testing.assert_array_equal(mf.draws(num_draws=5, seed=0).observed_data["x"].values, x.numpy())
    bare = dataclasses.replace(mf, x=None)
    assert "observed_data" not in bare.draws(num_draws=5, seed=0).groups()


def test_errors():
    A, B = _random_layer(K=3, R=2, D=3)
    x = torch.randn(2, 3, dtype=F64)
    for kw in ({"num_draws": 0}, {"num_draws": True}, {"num_chains": 0}, {"num_chains": 1.5}):
        name = next(iter(kw))
        with pytest.raises(ValueError, match=name):
            factorial_posterior_draws(A, B, x, **kw)
        with pytest.raises(ValueError, match=name):
            mean_field_map(A, B, x).draws(**kw)
    with pytest.raises(ValueError, match="seed"):
        factorial_posterior_draws(A, B, x, seed=1.5)
    with pytest.raises(ValueError, match="method"):
        factorial_posterior_draws(A, B, x, method="mcmc")
    with pytest.raises(ValueError, match="sigma"):
        factorial_posterior_draws(A, B, x, sigma=0.0)
    with pytest.raises(ValueError, match="sigma"):
        exact_posterior(A, B, x, sigma=-1.0)
    with pytest.raises(ValueError, match="x"):
        exact_posterior(A, B, x[:, :2])
    with pytest.raises(ValueError, match="B"):
        factorial_posterior_draws(A, B[:2], x)
    with pytest.raises(ValueError, match="x"):
        mean_field_map(A, B, x).draws(x=x[:1])
    big_A, big_B = _random_layer(K=13, R=2, D=3)
    assert 2**13 > DEFAULT_MAX_DRAW_CONFIGS
    with pytest.raises(ValueError, match=r"R\^K = 2\^13.*mean_field_map"):
        factorial_posterior_draws(big_A, big_B, x)
    with pytest.raises(ValueError, match=r"R\^K = 2\^13.*max_configs=100"):
        exact_posterior(big_A, big_B, x, max_configs=100)
