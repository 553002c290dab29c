"""The SMASO mixtures as Pyro models (smaso/splines/mixture.py): conversions (A, B, sigma) <-> pi, the per-unit
mixture (Eq 3) and the factorial mixture (Eq 10) under Predictive, poutine.trace, TraceEnum_ELBO and
infer_discrete, checked against closed forms and brute-force enumeration written here."""

from __future__ import annotations

import itertools
import math

import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import Predictive, TraceEnum_ELBO, config_enumerate, infer_discrete

from smaso.splines.mixture import (
    factorial_mixture_model,
    log_pi_from_offsets,
    offsets_from_pi,
    pi_from_offsets,
    unit_mixture_model,
)

F64 = torch.float64


def _layer(K=3, R=4, D=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(K, R, D, generator=g, dtype=F64), torch.randn(K, R, generator=g, dtype=F64)


def _scores(A, B, x):
    return torch.einsum("krd,nd->nkr", A, x) + B


def _gauss_logpdf(x, mean, sigma):
    """log N(x; mean, sigma^2 I) summed over the last dim, written out."""
    d = x.shape[-1]
    return -0.5 * ((x - mean) ** 2).sum(-1) / sigma**2 - 0.5 * d * math.log(2 * math.pi * sigma**2)


# ---------------------------------------------------------------------- conversions
@pytest.mark.parametrize("sigma", [0.3, 1.0, 2.5, "per-unit"])
def test_conversions_round_trip(sigma):
    A, B = _layer()
    if sigma == "per-unit":
        sigma = torch.tensor([0.5, 1.0, 1.7], dtype=F64)
    pi = pi_from_offsets(A, B, sigma)
    assert pi.shape == (3, 4)
    torch.testing.assert_close(pi.sum(-1), torch.ones(3, dtype=F64), rtol=0, atol=1e-12)
    # pi -> B' -> pi: the same priors
    torch.testing.assert_close(pi_from_offsets(A, offsets_from_pi(A, pi, sigma), sigma), pi, rtol=0, atol=1e-12)
    # B -> pi -> B': B up to a per-unit constant
    diff = offsets_from_pi(A, pi, sigma) - B
    torch.testing.assert_close(diff, diff[:, :1].expand_as(diff), rtol=0, atol=1e-10)
    # the formula itself
    s2 = sigma**2 if not isinstance(sigma, torch.Tensor) else (sigma**2)[:, None]
    torch.testing.assert_close(pi, torch.softmax((B + 0.5 * (A**2).sum(-1)) / s2, -1), rtol=0, atol=1e-14)


def test_offsets_from_pi_zero_prior_is_never_chosen():
    A, _ = _layer(K=2, R=3, D=2)
    pi = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], dtype=F64)
    B = offsets_from_pi(A, pi, 1.0)
    assert torch.isneginf(B[0, 2]) and torch.isfinite(B[1]).all()
    x = torch.randn(50, 2, dtype=F64) * 10
    assert (_scores(A, B, x).argmax(-1)[:, 0] != 2).all()


@pytest.mark.parametrize("sigma", [0.3, 1.0, 2.5])
def test_map_of_t_is_the_maso_argmax(sigma):
    """infer_discrete(temperature=0) on the per-unit model with pi_from_offsets(A, B, sigma) = argmax_r <A,x>+B."""
    A, B = _layer()
    x = 2 * torch.randn(64, 5, dtype=F64)
    model = infer_discrete(config_enumerate(unit_mixture_model), first_available_dim=-3, temperature=0)
    log_pi = log_pi_from_offsets(A, B, sigma)
    torch.testing.assert_close(log_pi.exp(), pi_from_offsets(A, B, sigma), rtol=0, atol=1e-15)
    t = model(A, None, sigma, x, log_pi=log_pi)["t"]
    assert t.shape == (64, 3)
    assert torch.equal(t, _scores(A, B, x).argmax(-1))
    if sigma >= 1:  # with probabilities (at sigma = 0.3 some pi underflow to exact zeros: use log_pi)
        assert torch.equal(model(A, pi_from_offsets(A, B, sigma), sigma, x)["t"], t)


def test_map_with_offsets_from_pi_is_the_gmm_map():
    """Conversely: the MASO with offsets_from_pi(A, pi, sigma) picks the mixture's MAP component."""
    A, _ = _layer()
    pi = torch.softmax(torch.randn(3, 4, dtype=F64), -1)
    sigma = 0.8
    x = 2 * torch.randn(64, 5, dtype=F64)
    log_post = pi.log() + _gauss_logpdf(x[:, None, None, :], A, sigma)  # (N, K, R)
    assert torch.equal(_scores(A, offsets_from_pi(A, pi, sigma), x).argmax(-1), log_post.argmax(-1))


# ---------------------------------------------------------------------- per-unit model (Eq 3)
def test_unit_model_posterior_and_evidence_by_enumeration():
    """TraceEnum_ELBO on the per-unit model: log p(x) and p(t_k | x) = softmax((<A,x>+B)/sigma^2)."""
    A, B = _layer()
    sigma = 0.9
    x = torch.randn(7, 5, dtype=F64)
    pi = pi_from_offsets(A, B, sigma)
    model = config_enumerate(unit_mixture_model)
    elbo = TraceEnum_ELBO(max_plate_nesting=2)
    log_px = -elbo.loss(model, lambda *a, **k: None, A, pi, sigma, x)
    comp = pi.log() + _gauss_logpdf(x[:, None, None, :], A, sigma)  # (N, K, R)
    assert log_px == pytest.approx(float(torch.logsumexp(comp, -1).sum()), rel=1e-12)
    marg = elbo.compute_marginals(model, lambda *a, **k: None, A, pi, sigma, x)["t"]
    post = marg.log_prob(torch.arange(4)[:, None, None]).exp().permute(1, 2, 0)  # (N, K, R)
    torch.testing.assert_close(post, torch.softmax(_scores(A, B, x) / sigma**2, -1), rtol=0, atol=1e-12)


def test_unit_model_samples_and_traces():
    A, B = _layer(K=2, R=3, D=2)
    sigma = torch.tensor([0.5, 1.5], dtype=F64)  # one noise per unit
    pi = pi_from_offsets(A, B, sigma)
    pyro.set_rng_seed(1)
    n = 40_000
    out = unit_mixture_model(A, pi, sigma, num_examples=n)
    t, x = out["t"], out["x"]
    assert t.shape == (n, 2) and x.shape == (n, 2, 2)
    freq = torch.stack([torch.bincount(t[:, k], minlength=3) for k in range(2)]).to(F64) / n
    assert (freq - pi).abs().max() < 0.015  # ~ 6 standard errors
    resid = x - A[torch.arange(2), t]
    torch.testing.assert_close(resid.std(dim=(0, 2)), sigma, rtol=0.02, atol=0)
    # trace: shapes of every site's log-density, observed x broadcast to all units
    xo = torch.randn(6, 2, dtype=F64)
    tr = poutine.trace(unit_mixture_model).get_trace(A, pi, sigma, xo)
    tr.compute_log_prob()
    assert tr.nodes["t"]["log_prob"].shape == (6, 2) and tr.nodes["x"]["log_prob"].shape == (6, 2)
    assert tr.nodes["x"]["is_observed"]
    samples = Predictive(unit_mixture_model, num_samples=5)(A, pi, sigma, None, 4)
    assert samples["t"].shape == (5, 4, 2) and samples["x"].shape == (5, 4, 2, 2)


# ---------------------------------------------------------------------- factorial model (Eq 10)
def _brute_factorial(A, pi, sigma, x):
    """Every configuration and its log p(t, x), by itertools (independent of the library)."""
    K, R, _ = A.shape
    configs = torch.tensor(list(itertools.product(range(R), repeat=K)))
    logs = []
    for c in configs:
        mean = A[torch.arange(K), c].sum(0)
        logs.append(pi[torch.arange(K), c].log().sum() + _gauss_logpdf(x, mean, sigma))
    return configs, torch.stack(logs, -1)  # (C, K), (N, C)


def test_factorial_model_layouts_sample_and_trace():
    A, B = _layer(K=3, R=2, D=4)
    pi = pi_from_offsets(A, B, 0.7)
    for layout in ("plate", "sequential"):
        pyro.set_rng_seed(0)
        out = factorial_mixture_model(A, pi, 0.7, num_examples=20_000, layout=layout)
        t, x = out["t"], out["x"]
        assert t.shape == (20_000, 3)
        x = x.reshape(20_000, 4)
        resid = x - A[torch.arange(3), t].sum(-2)
        assert resid.std().item() == pytest.approx(0.7, rel=0.02)
        assert (t.to(F64).mean(0) - pi[:, 1]).abs().max() < 0.02
    samples = Predictive(factorial_mixture_model, num_samples=3)(A, pi, 0.7, None, 5)
    assert samples["t"].shape == (3, 5, 3) and samples["x"].shape == (3, 5, 1, 4)
    # the sequential layout's trace log-density is log p(t, x) of Eq 10
    x = torch.randn(6, 4, dtype=F64)
    tr = poutine.trace(factorial_mixture_model).get_trace(A, pi, 0.7, x, layout="sequential")
    t = torch.stack([tr.nodes[f"t_{k}"]["value"] for k in range(3)], -1)
    expected = pi[torch.arange(3), t].log().sum(-1) + _gauss_logpdf(x, A[torch.arange(3), t].sum(-2), 0.7)
    assert tr.log_prob_sum().item() == pytest.approx(expected.sum().item(), rel=1e-12)
    tr = poutine.trace(factorial_mixture_model).get_trace(A, pi, 0.7, x, layout="plate")
    tr.compute_log_prob()
    t = tr.nodes["t"]["value"]
    expected = pi[torch.arange(3), t].log().sum(-1) + _gauss_logpdf(x, A[torch.arange(3), t].sum(-2), 0.7)
    assert tr.log_prob_sum().item() == pytest.approx(expected.sum().item(), rel=1e-12)


def test_factorial_sequential_enumeration_matches_brute_force():
    A, B = _layer(K=3, R=3, D=4, seed=3)
    sigma = 1.1
    pi = pi_from_offsets(A, B, sigma)
    x = 1.5 * torch.randn(9, 4, dtype=F64)
    configs, logs = _brute_factorial(A, pi, sigma, x)
    model = config_enumerate(factorial_mixture_model)
    log_px = -TraceEnum_ELBO(max_plate_nesting=1).loss(model, lambda *a, **k: None, A, pi, sigma, x,
                                                       layout="sequential")
    assert log_px == pytest.approx(torch.logsumexp(logs, -1).sum().item(), rel=1e-12)
    t = infer_discrete(model, first_available_dim=-2, temperature=0)(A, pi, sigma, x, layout="sequential")["t"]
    assert torch.equal(t, configs[logs.argmax(-1)])


def test_factorial_plate_layout_is_not_enumerable():
    """The plate layout's x depends on every unit of the plate: Pyro would silently give all units one
    enumerated value, so the model refuses."""
    A, B = _layer(K=3, R=2, D=4)
    pi = pi_from_offsets(A, B, 1.0)
    x = torch.randn(4, 4, dtype=F64)
    with pytest.raises(ValueError, match="sequential"):
        TraceEnum_ELBO(max_plate_nesting=2).loss(config_enumerate(factorial_mixture_model), lambda *a, **k: None,
                                                 A, pi, 1.0, x)


# ---------------------------------------------------------------------- errors
def test_bad_inputs_raise_value_errors():
    A, B = _layer()
    pi = pi_from_offsets(A, B, 1.0)
    x = torch.randn(4, 5, dtype=F64)
    for sigma in (0.0, -1.0, float("nan"), float("inf"), torch.tensor([1.0, 0.0, 1.0])):
        with pytest.raises(ValueError, match="sigma"):
            pi_from_offsets(A, B, sigma)
    with pytest.raises(ValueError, match="sigma"):
        unit_mixture_model(A, pi, -0.5, x)
    with pytest.raises(ValueError, match="sigma"):
        pi_from_offsets(A, B, torch.ones(2))  # wrong number of units
    with pytest.raises(ValueError, match="sigma"):
        factorial_mixture_model(A, pi, torch.ones(3, dtype=F64), x)  # one noise per layer
    with pytest.raises(ValueError, match="B"):
        pi_from_offsets(A, B[:, :3], 1.0)
    with pytest.raises(ValueError, match="A"):
        pi_from_offsets(A[0], B, 1.0)
    with pytest.raises(ValueError, match="pi"):
        offsets_from_pi(A, pi[:2], 1.0)
    with pytest.raises(ValueError, match="pi"):
        unit_mixture_model(A, pi * 2, 1.0, x)
    with pytest.raises(ValueError, match="x"):
        unit_mixture_model(A, pi, 1.0, x[:, :4])
    with pytest.raises(ValueError, match="num_examples"):
        unit_mixture_model(A, pi, 1.0)
    with pytest.raises(ValueError, match="num_examples"):
        factorial_mixture_model(A, pi, 1.0, x, num_examples=3)
    with pytest.raises(ValueError, match="layout"):
        factorial_mixture_model(A, pi, 1.0, x, layout="dense")
    with pytest.raises(ValueError, match="pi"):
        unit_mixture_model(A, pi, 1.0, x, log_pi=pi.log())  # both
    with pytest.raises(ValueError, match="log_pi"):
        unit_mixture_model(A, None, 1.0, x, log_pi=pi.log() + 1)  # not normalized


# ---------------------------------------------------------------------- per-unit data; Pyro's validation
def test_unit_model_conditions_on_its_own_per_unit_samples():
    """A sampled x is (N, K, D), one dataset per unit; conditioning on it gives each unit its own likelihood."""
    A, B = _layer(K=2, R=3, D=2, seed=3)
    pi = pi_from_offsets(A, B, 0.7)
    x = unit_mixture_model(A, pi, 0.7, num_examples=6)["x"]
    assert x.shape == (6, 2, 2)
    tr = poutine.trace(config_enumerate(unit_mixture_model)).get_trace(A, pi, 0.7, x)
    assert torch.equal(tr.nodes["x"]["value"], x)
    # evidence by enumeration = sum over units of log sum_r pi[k, r] N(x[:, k]; A[k, r], 0.49 I)
    loss = TraceEnum_ELBO(max_plate_nesting=2).loss(config_enumerate(unit_mixture_model), lambda *a, **k: None,
                                                    A, pi, 0.7, x)
    comp = _gauss_logpdf(x[:, :, None, :], A[None], 0.7) + pi.log()  # (N, K, R)
    assert -loss == pytest.approx(torch.logsumexp(comp, -1).sum().item(), rel=1e-10)
    with pytest.raises(ValueError, match=r"x: expected shape \(N, D\) or \(N, K, D\)"):
        unit_mixture_model(A, pi, 0.7, x[:, :1])
    with pytest.raises(ValueError, match="num_examples"):
        unit_mixture_model(A, pi, 0.7, x, num_examples=5)


def test_model_distributions_honour_validate_args():
    """The models use Pyro's own distributions (no custom ones forcing validate_args=False): their
    ``validate_args`` follows ``pyro.validation_enabled``, and with validation on an out-of-support region
    raises torch's 'within the support' ValueError."""
    A, B = _layer(K=2, R=3, D=2, seed=4)
    pi = pi_from_offsets(A, B, 1.0)
    x = torch.randn(3, 2, dtype=F64)
    for model, kw in ((unit_mixture_model, {}), (factorial_mixture_model, {"layout": "plate"})):
        for on in (True, False):
            with pyro.validation_enabled(on):
                tr = poutine.trace(model).get_trace(A, None, 1.0, x, log_pi=pi.log(), **kw)
            for name in ("t", "x"):
                fn = tr.nodes[name]["fn"]
                assert type(fn).__module__.startswith("pyro.distributions")
                assert fn._validate_args is on or getattr(fn, "base_dist", fn)._validate_args is on
        with pyro.validation_enabled(True):
            fn = poutine.trace(model).get_trace(A, pi, 1.0, x, **kw).nodes["t"]["fn"]
            with pytest.raises(ValueError, match="within the support"):
                fn.log_prob(torch.full((3, 2), 3))  # R = 3: region 3 does not exist
