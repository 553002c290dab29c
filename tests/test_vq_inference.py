"""Hard / soft / beta-VQ (inference/vq.py) in closed form and as Pyro inference, and joint inference in the
factorial mixture (inference/factorial.py), against torch.relu / silu / swish and brute-force enumeration."""

from __future__ import annotations

import itertools
import math
import warnings

import arviz as az
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import SVI, Trace_ELBO, TraceEnum_ELBO, config_enumerate, infer_discrete
from torch.distributions import constraints

import inference.factorial as fac
from inference.factorial import (
    exact_joint_map,
    factorial_gap,
    factorial_log_joint,
    factorized_map,
    mean_field_map,
)
from inference.vq import posterior_region_draws, svi_vq, vq_map
from smaso.splines.functional import eta_from_beta
from smaso.splines.maso import hard_regions, region_probabilities, region_scores, vq_outputs
from smaso.splines.mixture import factorial_mixture_model, log_pi_from_offsets
from smaso.splines.orthogonality import orthogonality_defect

F64 = torch.float64
BETAS = [0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95]


def relu_maso(W, b):
    """ReLU as a MASO (docs/theory.md §3): (A, B)[k, 0] = (0, 0), (A, B)[k, 1] = (W_k, b_k)."""
    K, D = W.shape
    A = torch.zeros(K, 2, D, dtype=W.dtype)
    A[:, 1] = W
    B = torch.zeros(K, 2, dtype=W.dtype)
    B[:, 1] = b
    return A, B


def _relu_grid(n=201, lim=6.0):
    """Identity ReLU units over a grid of u: A, B for K = 1, D = 1, and x = u."""
    u = torch.linspace(-lim, lim, n, dtype=F64)
    A, B = relu_maso(torch.ones(1, 1, dtype=F64), torch.zeros(1, dtype=F64))
    return A, B, u[:, None], u


def _random_layer(K=4, R=3, D=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(K, R, D, generator=g, dtype=F64), torch.randn(K, R, generator=g, dtype=F64)


def _quiet_summary(idata):
    with warnings.catch_warnings():  # constant draws give NaN r_hat with a RuntimeWarning
        warnings.simplefilter("ignore", RuntimeWarning)
        return az.summary(idata)


# ---------------------------------------------------------------------- closed forms
def test_closed_forms_are_relu_silu_swish():
    """Table 1, ReLU row, float64 to 1e-12: hard = relu, soft = silu, beta = u sigmoid(eta u), limits."""
    W = torch.randn(5, 3, dtype=F64)
    b = torch.randn(5, dtype=F64)
    A, B = relu_maso(W, b)
    x = 3 * torch.randn(400, 3, dtype=F64)
    u = x @ W.T + b
    s = region_scores(A, B, x)
    torch.testing.assert_close(vq_outputs(hard_regions(A, B, x), s), torch.relu(u), rtol=0, atol=1e-12)
    soft = region_probabilities(A, B, x)  # beta = 1/2
    torch.testing.assert_close(vq_outputs(soft, s), torch.nn.functional.silu(u), rtol=0, atol=1e-12)
    torch.testing.assert_close(soft[..., 1], torch.sigmoid(u), rtol=0, atol=1e-12)  # the VQ probability
    for beta in BETAS:
        eta = beta / (1 - beta)
        z = vq_outputs(region_probabilities(A, B, x, beta), s)
        torch.testing.assert_close(z, u * torch.sigmoid(eta * u), rtol=0, atol=1e-12)
    torch.testing.assert_close(vq_outputs(region_probabilities(A, B, x, 1.0), s), torch.relu(u), rtol=0, atol=1e-12)
    torch.testing.assert_close(vq_outputs(region_probabilities(A, B, x, 0.0), s), u / 2, rtol=0, atol=1e-12)
    # near the limits the family approaches them continuously
    assert (vq_outputs(region_probabilities(A, B, x, 1e-12), s) - u / 2).abs().max() < 1e-9
    assert (vq_outputs(region_probabilities(A, B, x, 1 - 1e-9), s) - torch.relu(u)).abs().max() < 1e-6
    # per-unit beta
    betas = torch.tensor([0.0, 0.25, 0.5, 0.9, 1.0], dtype=F64)
    eta = eta_from_beta(betas)
    finite_eta = torch.where(torch.isinf(eta), 0, eta)
    expected = torch.where(torch.isinf(eta), torch.relu(u), u * torch.sigmoid(finite_eta * u))
    torch.testing.assert_close(vq_outputs(region_probabilities(A, B, x, betas), s), expected, rtol=0, atol=1e-12)


def test_closed_forms_on_a_general_maso():
    A, B = _random_layer()
    x = torch.randn(50, 6, dtype=F64)
    s = torch.einsum("krd,nd->nkr", A, x) + B
    torch.testing.assert_close(region_scores(A, B, x), s, rtol=0, atol=1e-12)
    t = hard_regions(A, B, x)
    assert torch.equal(t.argmax(-1), s.argmax(-1)) and torch.equal(t.sum(-1), torch.ones(50, 4, dtype=F64))
    torch.testing.assert_close(vq_outputs(t, s), s.max(-1).values, rtol=0, atol=1e-12)
    torch.testing.assert_close(region_probabilities(A, B, x, 0.8), torch.softmax(4.0 * s, -1), rtol=0, atol=1e-12)
    torch.testing.assert_close(region_probabilities(A, B, x, 0.0), torch.full_like(s, 1 / 3), rtol=0, atol=1e-15)
    assert eta_from_beta(0.5) == 1.0 and eta_from_beta(0.0) == 0.0 and math.isinf(eta_from_beta(1.0))
    assert eta_from_beta(0.75) == pytest.approx(3.0)


def test_beta_and_shape_errors():
    A, B = _random_layer()
    x = torch.randn(5, 6, dtype=F64)
    for beta in (-0.1, 1.1, float("nan"), torch.full((3,), 0.5)):
        with pytest.raises(ValueError, match="beta"):
            region_probabilities(A, B, x, beta)
    with pytest.raises(ValueError, match="beta"):
        eta_from_beta(2.0)
    with pytest.raises(ValueError, match="B"):
        hard_regions(A, B[:3], x)
    with pytest.raises(ValueError, match="x"):
        region_probabilities(A, B, x[:, :5])
    with pytest.raises(ValueError, match="sigma"):
        vq_map(A, B, x, sigma=0.0)
    with pytest.raises(ValueError, match="beta"):
        svi_vq(A, B, x, beta=1.0, num_steps=1)
    with pytest.raises(ValueError, match="beta"):
        posterior_region_draws(A, B, x, beta=1.0)
    with pytest.raises(ValueError, match="tempering"):
        svi_vq(A, B, x, tempering="power", num_steps=1)


# ---------------------------------------------------------------------- MAP (infer_discrete)
@pytest.mark.parametrize("sigma", [0.2, 1.0, 3.0])
def test_vq_map_is_hard_vq(sigma):
    A, B = _random_layer(seed=1)
    x = 2 * torch.randn(80, 6, dtype=F64)
    assert torch.equal(vq_map(A, B, x, sigma), hard_regions(A, B, x))
    A, B, x, u = _relu_grid(n=50)  # no exact ties on this grid
    torch.testing.assert_close(vq_outputs(vq_map(A, B, x, sigma), region_scores(A, B, x))[:, 0], torch.relu(u),
                               rtol=0, atol=1e-12)


# ---------------------------------------------------------------------- SVI
def test_svi_beta_vq_gives_silu_and_swish_over_a_grid_of_beta():
    """One SVI fit, one ReLU unit per beta (per-unit tempering by poutine.scale): outputs = u sigmoid(eta u)."""
    betas = torch.tensor(BETAS, dtype=F64)
    eta = betas / (1 - betas)
    u = torch.linspace(-4, 4, 33, dtype=F64)
    A, B = relu_maso(torch.ones(len(BETAS), 1, dtype=F64), torch.zeros(len(BETAS), dtype=F64))
    fit = svi_vq(A, B, u[:, None], betas, num_steps=300, lr=0.1, seed=0)
    target = torch.sigmoid(eta * u[:, None])
    assert (fit.probs[..., 1] - target).abs().max() < 0.01
    assert (fit.outputs - u[:, None] * target).abs().max() < 0.03  # stated tolerance for 300 Adam steps
    silu = fit.outputs[:, BETAS.index(0.5)]
    assert (silu - torch.nn.functional.silu(u)).abs().max() < 1e-4  # eta = 1 converges fastest
    assert fit.losses[-1] < fit.losses[0]
    # guide draws as InferenceData
    idata = fit.draws(num_draws=300, num_chains=2, seed=0)
    assert idata.posterior["t"].shape == (2, 300, 33, len(BETAS))
    summary = _quiet_summary(idata)
    assert len(summary) == 33 * len(BETAS) and "r_hat" in summary.columns
    mean = torch.as_tensor(idata.posterior["t"].values.mean((0, 1)))
    assert (mean - fit.probs[..., 1]).abs().max() < 0.1  # 600 draws: 4.9 standard errors at p = 1/2


def test_svi_likelihood_tempering_agrees_with_scale():
    A, B = _random_layer(K=2, R=3, D=2, seed=4)
    x = torch.randn(6, 2, dtype=F64)
    target = region_probabilities(A, B, x, 0.3)
    fits = [svi_vq(A, B, x, 0.3, num_steps=200, lr=0.1, tempering=t) for t in ("scale", "likelihood")]
    for fit in fits:
        assert (fit.probs - target).abs().max() < 0.01
    assert (fits[0].probs - fits[1].probs).abs().max() < 1e-6


def test_svi_progress_bar_changes_nothing_but_the_output(capsys):
    A, B = _random_layer(K=2, R=3, D=2, seed=5)
    x = torch.randn(4, 2, dtype=F64)
    quiet = svi_vq(A, B, x, 0.6, num_steps=20, lr=0.1)
    assert capsys.readouterr().err == ""
    loud = svi_vq(A, B, x, 0.6, num_steps=20, lr=0.1, progress=True)
    assert "SVI" in capsys.readouterr().err
    assert loud.losses == quiet.losses
    assert torch.equal(loud.probs, quiet.probs)


# ---------------------------------------------------------------------- posterior draws (infer_discrete, T = 1)
def test_posterior_region_draws_are_beta_vq_draws():
    u = torch.linspace(-3, 3, 13, dtype=F64)
    A, B = relu_maso(torch.ones(3, 1, dtype=F64), torch.zeros(3, dtype=F64))
    betas = torch.tensor([0.3, 0.5, 0.8], dtype=F64)
    idata = posterior_region_draws(A, B, u[:, None], num_draws=1000, num_chains=2, beta=betas, seed=0)
    t = idata.posterior["t"]
    assert t.shape == (2, 1000, 13, 3) and t.dims == ("chain", "draw", "example", "unit")
    assert "x" in idata.observed_data
    mean = torch.as_tensor(t.values.mean((0, 1)))
    target = region_probabilities(A, B, u[:, None], betas)[..., 1]
    assert (mean - target).abs().max() < 0.06  # 2000 draws: ~5.4 standard errors at p = 1/2
    summary = _quiet_summary(idata)
    assert len(summary) == 13 * 3
    assert summary["mean"].to_numpy() == pytest.approx(mean.numpy().reshape(-1), abs=1e-2)


# ---------------------------------------------------------------------- factorial mixture (Eq 10-11)
def _orthogonal_layer(K, R, D, seed, scale=2.0):
    """Units in mutually orthogonal subspaces (rows of a QR factor): Eq 11 holds."""
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(D, D, generator=g, dtype=F64))
    per = D // K
    A = torch.empty(K, R, D, dtype=F64)
    for k in range(K):
        basis = Q[:, k * per:(k + 1) * per].T  # (per, D), orthonormal, disjoint across units
        A[k] = scale * torch.randn(R, per, generator=g, dtype=F64) @ basis
    return A, torch.randn(K, R, generator=g, dtype=F64)


def _brute_map(A, B, x, sigma):
    K, R, _ = A.shape
    configs = torch.tensor(list(itertools.product(range(R), repeat=K)))
    logs = torch.stack([factorial_log_joint(A, B, x, c.expand(x.shape[0], K), sigma) for c in configs], -1)
    return configs[logs.argmax(-1)], logs


@pytest.mark.parametrize("seed", range(3))
def test_factorized_map_is_the_joint_map_on_orthogonal_layers(seed):
    A, B = _orthogonal_layer(K=4, R=3, D=12, seed=seed)
    assert orthogonality_defect(A).relative < 1e-28
    x = 2 * torch.randn(300, 12, dtype=F64)
    brute, _ = _brute_map(A, B, x, 0.7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no orthogonality warning
        t = factorized_map(A, B, x, 0.7)
    assert torch.equal(t, brute) and torch.equal(exact_joint_map(A, B, x, 0.7), brute)
    # ReLU layer with orthogonal rows of W (K <= D)
    g = torch.Generator().manual_seed(10 + seed)
    Q, _ = torch.linalg.qr(torch.randn(8, 8, generator=g, dtype=F64))
    A, B = relu_maso(3 * Q[:5], torch.randn(5, generator=g, dtype=F64))
    x = torch.randn(300, 8, dtype=F64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(factorized_map(A, B, x), _brute_map(A, B, x, 1.0)[0])
    # mean field is exact too: its q is the exact posterior of each unit
    mf = mean_field_map(A, B, x, 0.8)
    assert mf.converged
    torch.testing.assert_close(mf.probs, torch.softmax(region_scores(A, B, x) / 0.64, -1), rtol=0, atol=1e-12)


def test_factorized_map_differs_on_non_orthogonal_layers_and_warns():
    A, B = _random_layer(K=5, R=2, D=4, seed=2)
    x = 2 * torch.randn(400, 4, dtype=F64)
    with pytest.warns(UserWarning, match=r"orthogonality defect 0\.\d+"):
        t = factorized_map(A, B, x, 1.0)
    brute, _ = _brute_map(A, B, x, 1.0)
    frac = (t != brute).any(-1).double().mean().item()
    assert frac > 0.1
    assert torch.equal(exact_joint_map(A, B, x, 1.0), brute)
    gap = factorial_gap(A, B, x, 1.0)
    assert gap["factorized"]["fraction_differs"] == pytest.approx(frac)
    assert gap["orthogonality_defect"] == pytest.approx(orthogonality_defect(A).relative)
    assert gap["orthogonality_defect"] > 0.1
    for name in ("factorized", "mean_field"):
        assert gap[name]["log_joint_gap_mean"] >= -1e-12 and gap[name]["log_joint_gap_max"] >= -1e-12
    assert gap["factorized"]["log_joint_gap_mean"] > 0
    assert gap["mean_field"]["converged"]
    assert gap["mean_field"]["log_joint_gap_mean"] < gap["factorized"]["log_joint_gap_mean"]


def test_exact_joint_map_matches_infer_discrete_and_reports_log_joint():
    A, B = _random_layer(K=3, R=3, D=4, seed=5)
    x = torch.randn(20, 4, dtype=F64)
    sigma = 0.6
    t, lj = exact_joint_map(A, B, x, sigma, return_log_joint=True)
    brute, logs = _brute_map(A, B, x, sigma)
    assert torch.equal(t, brute)
    torch.testing.assert_close(lj, logs.max(-1).values, rtol=0, atol=1e-10)
    model = infer_discrete(config_enumerate(factorial_mixture_model), first_available_dim=-2, temperature=0)
    pyro_t = model(A, None, sigma, x, layout="sequential", log_pi=log_pi_from_offsets(A, B, sigma))["t"]
    assert torch.equal(pyro_t, t)
    # small chunks give the same answer
    old = fac._CHUNK_ELEMENTS
    fac._CHUNK_ELEMENTS = 8
    try:
        assert torch.equal(exact_joint_map(A, B, x, sigma), t)
    finally:
        fac._CHUNK_ELEMENTS = old


def test_mean_field_elbo_is_the_enumerated_svi_elbo_and_bounds_the_evidence():
    """The CAVI answer's ELBO equals Pyro's TraceEnum_ELBO with the same mean-field guide, and <= log p(x)."""
    A, B = _random_layer(K=3, R=2, D=3, seed=6)
    x = 1.5 * torch.randn(10, 3, dtype=F64)
    sigma = 0.9
    mf = mean_field_map(A, B, x, sigma, tol=1e-10)
    again = mean_field_map(A, B, x, sigma, tol=1e-10)
    assert mf.converged and torch.equal(mf.probs, again.probs)  # deterministic
    _, logs = _brute_map(A, B, x, sigma)
    assert (mf.elbo <= torch.logsumexp(logs, -1) + 1e-10).all()
    log_pi = log_pi_from_offsets(A, B, sigma)

    def guide(xx):
        with pyro.plate("data", xx.shape[0], dim=-1):
            for k in range(3):
                pyro.sample(f"t_{k}", dist.Categorical(probs=mf.probs[:, k]), infer={"enumerate": "parallel"})

    loss = TraceEnum_ELBO(max_plate_nesting=1).loss(
        lambda xx: factorial_mixture_model(A, None, sigma, xx, layout="sequential", log_pi=log_pi), guide, x)
    assert -loss == pytest.approx(mf.elbo.sum().item(), rel=1e-10)


def test_factorial_errors():
    A, B = _random_layer(K=20, R=2, D=3)
    x = torch.randn(4, 3, dtype=F64)
    with pytest.raises(ValueError, match=r"R\^K = 2\^20 .*exponential.*factorized_map.*orthogonal.*mean_field_map"):
        exact_joint_map(A, B, x)
    with pytest.raises(ValueError, match=r"R\^K"):
        factorial_gap(A, B, x)
    assert exact_joint_map(A[:10], B[:10], x).shape == (4, 10)
    for fn in (exact_joint_map, factorized_map, mean_field_map):
        for sigma in (0.0, -1.0):
            with pytest.raises(ValueError, match="sigma"):
                fn(A[:3], B[:3], x, sigma)
        with pytest.raises(ValueError, match="B"):
            fn(A[:3], B[:2], x)
        with pytest.raises(ValueError, match="x"):
            fn(A[:3], B[:3], x[:, :2])
    with pytest.raises(ValueError, match="t"):
        factorial_log_joint(A[:3], B[:3], x, torch.zeros(4, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="init"):
        mean_field_map(A[:3], B[:3], x, init=torch.ones(4, 3, 3))


def test_svi_on_the_factorial_model_reaches_the_mean_field_answer():
    """SVI (enumerated mean-field guide, TraceEnum_ELBO) on the sequential layout converges to the CAVI fixed
    point; the plate layout trains with a sampled guide (Trace_ELBO)."""
    A, B = _random_layer(K=3, R=2, D=3, seed=6)
    x = 1.5 * torch.randn(10, 3, dtype=F64)
    sigma = 0.9
    log_pi = log_pi_from_offsets(A, B, sigma)
    mf = mean_field_map(A, B, x, sigma)
    _, logs = _brute_map(A, B, x, sigma)

    def model(xx, layout):
        return factorial_mixture_model(A, None, sigma, xx, layout=layout, log_pi=log_pi)

    def guide(xx, layout):
        q = pyro.param(f"q_{layout}", lambda: torch.full((10, 3, 2), 0.5, dtype=F64), constraint=constraints.simplex)
        if layout == "sequential":
            with pyro.plate("data", 10, dim=-1):
                for k in range(3):
                    pyro.sample(f"t_{k}", dist.Categorical(probs=q[:, k]), infer={"enumerate": "parallel"})
        else:
            with pyro.plate("data", 10, dim=-2), pyro.plate("units", 3, dim=-1):
                pyro.sample("t", dist.Categorical(probs=q))

    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.15}), TraceEnum_ELBO(max_plate_nesting=1))
    losses = [svi.step(x, "sequential") for _ in range(120)]
    assert (pyro.param("q_sequential") - mf.probs).abs().max() < 0.02
    assert -losses[-1] <= torch.logsumexp(logs, -1).sum().item() + 1e-9
    assert -losses[-1] == pytest.approx(mf.elbo.sum().item(), abs=0.1)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.05}),
              Trace_ELBO(num_particles=32, vectorize_particles=True, max_plate_nesting=2))
    losses = [svi.step(x, "plate") for _ in range(30)]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
