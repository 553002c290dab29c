"""The factorial mixture's joint MAP and mean field as Pyro inference (inference.factorial.joint_map_pyro,
mean_field_svi) against the fast hand-written routines (exact_joint_map, mean_field_map), issue 16."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import TraceEnum_ELBO

from inference.factorial import (
    exact_joint_map,
    exact_posterior,
    joint_map_pyro,
    mean_field_map,
    mean_field_svi,
)
from smaso.splines.mixture import factorial_mixture_model, log_pi_from_offsets

F64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")


def _problem(K, R, D=4, N=12, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    A = scale * torch.randn(K, R, D, dtype=F64, generator=g)
    B = torch.randn(K, R, dtype=F64, generator=g)
    x = 1.5 * torch.randn(N, D, dtype=F64, generator=g)
    return A, B, x


@pytest.mark.parametrize(("K", "R", "seed"), [(1, 3, 0), (2, 2, 1), (3, 2, 2), (3, 3, 3), (4, 2, 4), (5, 2, 5)])
def test_infer_discrete_map_equals_exact_joint_map(K, R, seed):
    A, B, x = _problem(K, R, N=25, seed=seed)
    for sigma in (0.7, 1.3):
        # no near-ties, so both answers are unique
        top2 = exact_posterior(A, B, x, sigma).log_probs.topk(min(2, R**K), -1).values
        if R**K > 1:
            assert (top2[:, 0] - top2[:, 1] > 1e-9).all()
        t = joint_map_pyro(A, B, x, sigma)
        assert t.dtype == torch.int64 and t.shape == (25, K)
        assert torch.equal(t, exact_joint_map(A, B, x, sigma))


def test_trace_enum_elbo_of_the_mean_field_guide_is_the_hand_written_elbo():
    """The exact ELBO that SVI optimizes (TraceEnum_ELBO with the enumerated mean-field guide) equals
    MeanField.elbo at CAVI's fixed point, to rounding."""
    A, B, x = _problem(3, 3, seed=7)
    sigma = 0.9
    mf = mean_field_map(A, B, x, sigma)
    log_pi = log_pi_from_offsets(A, B, torch.tensor(sigma, dtype=F64))

    def model():
        return factorial_mixture_model(A, None, sigma, x, layout="sequential", log_pi=log_pi)

    def guide():
        with pyro.plate("data", x.shape[0], dim=-1):
            for k in range(3):
                pyro.sample(f"t_{k}", dist.Categorical(probs=mf.probs[:, k]), infer={"enumerate": "parallel"})

    loss = TraceEnum_ELBO(max_plate_nesting=1).loss(model, guide)
    assert loss == pytest.approx(-mf.elbo.sum().item(), abs=1e-9)


@pytest.mark.parametrize(("K", "R", "seed"), [(3, 2, 11), (2, 3, 12)])
def test_svi_reaches_the_cavi_fixed_point(K, R, seed):
    """Same family, same ELBO, same start: SVI ends within ~1e-2 of CAVI's q and ~1e-3 of its ELBO per example,
    and CAVI started from SVI's answer returns to the very same fixed point (1e-6)."""
    A, B, x = _problem(K, R, N=6, seed=seed)
    mf = mean_field_map(A, B, x, tol=1e-12)
    svi = mean_field_svi(A, B, x, num_steps=300)
    assert svi.probs.shape == mf.probs.shape and svi.probs.dtype == F64
    assert (svi.probs - mf.probs).abs().max().item() < 2e-2
    assert (svi.elbo - mf.elbo).abs().max().item() < 2e-3
    assert (svi.elbo <= mf.elbo + 1e-9).all()  # CAVI's fixed point is the optimum of this basin
    again = mean_field_map(A, B, x, init=svi.probs, tol=1e-12)
    assert (again.probs - mf.probs).abs().max().item() < 1e-6
    assert torch.equal(svi.x, x) and svi.draws(num_draws=4, seed=0).observed_data["x"].shape == x.shape


def test_svi_is_deterministic_and_leaves_the_param_store_alone():
    A, B, x = _problem(2, 2, N=4, seed=3)
    pyro.param("user_param", torch.ones(3))
    before = dict(pyro.get_param_store().items())
    a = mean_field_svi(A, B, x, num_steps=20)
    b = mean_field_svi(A, B, x, num_steps=20)
    assert torch.equal(a.probs, b.probs) and a.iterations == 20 and not a.converged
    assert set(pyro.get_param_store().keys()) == set(before)
    assert torch.equal(pyro.param("user_param"), before["user_param"])


def test_errors():
    A, B, x = _problem(13, 2, N=2)
    with pytest.raises(ValueError, match="R\\^K = 2\\^13"):
        joint_map_pyro(A, B, x)
    with pytest.raises(ValueError, match="R\\^K = 2\\^13"):
        mean_field_svi(A, B, x)
    A, B, x = _problem(2, 2, N=3)
    with pytest.raises(ValueError, match="num_steps"):
        mean_field_svi(A, B, x, num_steps=0)
    with pytest.raises(ValueError, match="init: expected shape"):
        mean_field_svi(A, B, x, init=torch.ones(3, 2, 3))
