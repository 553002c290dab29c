"""The beta-VQ activations (``smaso.splines.functional``, ``smaso.splines.modules``)
against Table 1 of ``docs/theory.md`` §3.

Closed forms are written here from the table (float64, eta = beta / (1 - beta)); the beta-VQ column is
also re-derived from the MASO of each layer (softmax(eta scores)-weighted pieces), which shares no code
with the activation kernels except for max pooling, whose MASO output is softmax pooling itself (that
kernel is checked against its closed form separately).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from smaso.splines.functional import (
    beta_abs,
    beta_leaky_relu,
    beta_swish,
    eta_from_beta,
    softmax_pool,
    softmax_pool1d,
    vq_probability_abs,
    vq_probability_leaky_relu,
    vq_probability_pool,
    vq_probability_relu,
)
from smaso.splines.maso import MASO, pool_windows_1d
from smaso.splines.modules import BetaAbs, BetaLeakyReLU, BetaSwish, SoftmaxPool1d, VQSigmoid, VQSoftmax, VQTanh

BETAS = [0.05, 0.2, 0.5, 0.7, 0.9, 0.99]
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
NU = 0.1


def _grid(dtype=torch.float64):
    return torch.linspace(-8, 8, 401, dtype=dtype)


def _eta(beta):
    return beta / (1 - beta)


# ---------------------------------------------------------------------- Table 1, closed forms
@pytest.mark.parametrize("beta", BETAS)
def test_table1_rows_closed_forms(beta):
    u, eta = _grid(), _eta(beta)
    s = torch.sigmoid
    torch.testing.assert_close(beta_swish(u, beta), u * s(eta * u), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(beta_leaky_relu(u, beta, NU), u * (NU + (1 - NU) * s(eta * (1 - NU) * u)),
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(beta_abs(u, beta), u * torch.tanh(eta * u), rtol=1e-12, atol=1e-12)
    x = torch.randn(5, 7, dtype=torch.float64)
    torch.testing.assert_close(softmax_pool(x, beta, dim=1), (torch.softmax(eta * x, 1) * x).sum(1))
    # VQ-probability column
    torch.testing.assert_close(vq_probability_relu(u, beta), s(eta * u))
    torch.testing.assert_close(vq_probability_leaky_relu(u, beta, NU), s(eta * (1 - NU) * u))
    torch.testing.assert_close(vq_probability_abs(u, beta), torch.tanh(eta * u))
    torch.testing.assert_close(vq_probability_pool(x, beta, 1), torch.softmax(eta * x, 1))


def test_soft_vq_is_silu_sigmoid_tanh_softmax():
    u = _grid(torch.float32)
    assert torch.equal(beta_swish(u, 0.5), F.silu(u))
    assert torch.equal(BetaSwish(0.5)(u), F.silu(u))
    assert torch.equal(vq_probability_relu(u, 0.5), torch.sigmoid(u))
    assert torch.equal(vq_probability_abs(u, 0.5), torch.tanh(u))
    x = torch.randn(3, 6)
    assert torch.equal(vq_probability_pool(x, 0.5, -1), torch.softmax(x, -1))
    torch.testing.assert_close(beta_abs(u, 0.5), u * torch.tanh(u))
    torch.testing.assert_close(beta_leaky_relu(u, 0.5, NU), u * (NU + (1 - NU) * torch.sigmoid((1 - NU) * u)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_exact_limits(dtype):
    u = _grid(dtype)
    x = torch.randn(4, 9).to(dtype)
    # beta = 1: hard MASO, exactly
    assert torch.equal(beta_swish(u, 1.0), torch.relu(u))
    assert torch.equal(beta_leaky_relu(u, 1.0, NU), F.leaky_relu(u, NU))
    assert torch.equal(beta_abs(u, 1.0), u.abs())
    assert torch.equal(softmax_pool(x, 1.0, dim=1), x.amax(1))
    assert torch.equal(vq_probability_abs(u, 1.0), torch.sign(u))
    assert torch.equal(vq_probability_relu(u, 1.0), (u > 0).to(dtype) + 0.5 * (u == 0).to(dtype))
    # beta = 0: the linear limits, exactly
    assert torch.equal(beta_swish(u, 0.0), u / 2)
    assert torch.equal(beta_abs(u, 0.0), torch.zeros_like(u))
    torch.testing.assert_close(beta_leaky_relu(u, 0.0, NU), (1 + NU) * u / 2)
    torch.testing.assert_close(softmax_pool(x, 0.0, dim=1), x.mean(1))
    assert torch.equal(vq_probability_relu(u, 0.0), torch.full_like(u, 0.5))


def test_limits_are_approached():
    u, x = _grid(), torch.randn(4, 9, dtype=torch.float64)
    lo, hi = 1e-9, 1 - 1e-9
    torch.testing.assert_close(beta_swish(u, lo), u / 2, atol=1e-7, rtol=0)
    torch.testing.assert_close(beta_leaky_relu(u, lo, NU), (1 + NU) * u / 2, atol=1e-7, rtol=0)
    torch.testing.assert_close(beta_abs(u, lo), torch.zeros_like(u), atol=1e-7, rtol=0)
    torch.testing.assert_close(softmax_pool(x, lo, 1), x.mean(1), atol=1e-7, rtol=0)
    # beta -> 1: eta = 1e9; away from the kink the hard value is reached to rounding
    far = u.abs() > 1e-6
    torch.testing.assert_close(beta_swish(u, hi)[far], torch.relu(u)[far])
    torch.testing.assert_close(beta_leaky_relu(u, hi, NU)[far], F.leaky_relu(u, NU)[far])
    torch.testing.assert_close(beta_abs(u, hi)[far], u.abs()[far])
    torch.testing.assert_close(softmax_pool(x, hi, 1), x.amax(1))


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 0.8, 1.0])
def test_table1_from_the_maso(beta):
    """Table 1's beta-VQ column = the softmax(eta scores)-weighted output of each layer's MASO."""
    g = torch.Generator().manual_seed(1)
    W, b = torch.randn(6, 4, generator=g, dtype=torch.float64), torch.randn(6, generator=g, dtype=torch.float64)
    x = torch.randn(50, 4, generator=g, dtype=torch.float64)
    u = x @ W.T + b
    torch.testing.assert_close(MASO.from_linear_relu(W, b).beta_vq_outputs(x, beta), beta_swish(u, beta))
    torch.testing.assert_close(MASO.from_linear_leaky_relu(W, b, NU).beta_vq_outputs(x, beta),
                               beta_leaky_relu(u, beta, NU))
    torch.testing.assert_close(MASO.from_linear_abs(W, b).beta_vq_outputs(x, beta), beta_abs(u, beta))
    probs = MASO.from_linear_relu(W, b).region_probabilities(x, beta)
    torch.testing.assert_close(probs[..., 1], vq_probability_relu(u, beta))
    abs_probs = MASO.from_linear_abs(W, b).region_probabilities(x, beta)
    torch.testing.assert_close(abs_probs[..., 1] - abs_probs[..., 0], vq_probability_abs(u, beta))
    maps = torch.randn(50, 3, 8, generator=g, dtype=torch.float64)
    pool = MASO.max_pool(24, pool_windows_1d(3, 8, 4, 2))
    torch.testing.assert_close(pool.beta_vq_outputs(maps.reshape(50, -1), beta),
                               softmax_pool1d(maps, 4, 2, beta).reshape(50, -1))


@settings(max_examples=60, deadline=None)
@given(u=st.floats(-1e6, 1e6, allow_nan=False), beta=st.floats(0.0, 1.0))
def test_swish_matches_definition(u, beta):
    eta = eta_from_beta(beta)
    t = torch.tensor([u], dtype=torch.float64)
    if math.isinf(eta):
        expected = torch.relu(t)
    else:
        expected = t * torch.sigmoid(torch.tensor(eta, dtype=torch.float64) * t)
    torch.testing.assert_close(beta_swish(t, beta), expected, rtol=1e-12, atol=1e-300)


# ---------------------------------------------------------------------- numerics
@pytest.mark.parametrize("dtype", DTYPES)
def test_no_nan_or_inf_at_any_magnitude(dtype):
    fi = torch.finfo(dtype)
    mags = [0.0, fi.tiny, 1e-3, 1.0, 30.0, 1e4, fi.max / 2, fi.max]
    u0 = torch.tensor([s * m for m in mags for s in (1, -1)], dtype=dtype)
    betas = [0.0, 1e-30, 1e-6, 0.3, 0.5, 0.75, 1 - 1e-6, 1 - 1e-15, 1.0]
    for beta in betas:
        for name, fn in (("swish", lambda v, b: beta_swish(v, b)),
                         ("leaky", lambda v, b: beta_leaky_relu(v, b, NU)),
                         ("abs", lambda v, b: beta_abs(v, b))):
            u = u0.clone().requires_grad_()
            y = fn(u, beta)
            assert y.dtype == dtype and torch.isfinite(y).all(), (name, beta, y)
            y.backward(torch.ones_like(y))
            assert torch.isfinite(u.grad).all(), (name, beta, u.grad)
        # VQ probabilities: values in [0, 1] / [-1, 1]; their slope at 0 is eta / 4 (eta), unbounded as beta -> 1
        for fn in (vq_probability_relu, vq_probability_abs):
            assert torch.isfinite(fn(u0, beta)).all()
        pooled = softmax_pool(u0.reshape(4, -1), beta, dim=1)
        assert torch.isfinite(pooled).all(), ("pool", beta, pooled)
        assert torch.isfinite(vq_probability_pool(u0.reshape(4, -1), beta, 1)).all()
    # the swish keeps its value where it must: u for huge positive u, ~0 for huge negative u
    y = beta_swish(u0, 0.75)
    assert y[mags.index(fi.max) * 2] == fi.max and y[mags.index(fi.max) * 2 + 1] == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_learnable_paths_finite_at_large_inputs(dtype):
    u = torch.tensor([0.0, 1e-30, -1e-30, 5.0, -5.0, 1e30, -1e30, torch.finfo(dtype).max], dtype=dtype)
    for module in (BetaSwish(0.9, learnable=True), BetaLeakyReLU(0.9, NU, learnable=True),
                   BetaAbs(0.9, learnable=True)):
        x = u.clone().requires_grad_()
        y = module.to(dtype)(x)
        assert torch.isfinite(y).all()
        y[:5].sum().backward()
        assert torch.isfinite(x.grad).all() and torch.isfinite(module.theta.grad).all()


def test_reduced_precision_matches_float64():
    u = torch.linspace(-20, 20, 2001, dtype=torch.float64)
    for dtype, tol in ((torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)):
        for beta in (0.2, 0.7, 0.95):
            ref = beta_swish(u, beta)
            got = beta_swish(u.to(dtype), beta).double()
            assert ((got - ref).abs() <= tol * (1 + ref.abs())).all(), (dtype, beta)


# ---------------------------------------------------------------------- gradients
def test_gradcheck_float64():
    g = torch.Generator().manual_seed(0)
    u = (3 * torch.randn(3, 4, 5, generator=g, dtype=torch.float64)).requires_grad_()
    for beta0 in (0.3, 0.8):
        beta = torch.full((4, 1), beta0, dtype=torch.float64).requires_grad_()
        scalar = torch.tensor(beta0, dtype=torch.float64, requires_grad=True)
        for fn in (beta_swish, beta_abs, lambda v, b: beta_leaky_relu(v, b, NU),
                   lambda v, b: softmax_pool(v, b, dim=-1), vq_probability_relu, vq_probability_abs):
            assert torch.autograd.gradcheck(fn, (u, beta))
            assert torch.autograd.gradcheck(fn, (u, scalar))
        assert torch.autograd.gradcheck(lambda v, b: beta_leaky_relu(v, b, -0.5), (u, beta))  # nu < 0 branch
        for fn in (lambda v, b=beta0: beta_swish(v, b), lambda v, b=beta0: beta_abs(v, b),
                   lambda v, b=beta0: beta_leaky_relu(v, b, -0.5), lambda v, b=beta0: softmax_pool1d(v, 2, 1, b)):
            assert torch.autograd.gradcheck(fn, (u,))
    # twice differentiable (issue 16): the second derivative is that of the plain formula
    (grad,) = torch.autograd.grad(beta_swish(u, 0.7).sum(), u, create_graph=True)
    (second,) = torch.autograd.grad(grad.sum(), u)
    ref = u.detach().clone().requires_grad_()
    (ref_grad,) = torch.autograd.grad((ref * torch.sigmoid(7 / 3 * ref)).sum(), ref, create_graph=True)
    torch.testing.assert_close(second, torch.autograd.grad(ref_grad.sum(), ref)[0], rtol=1e-10, atol=1e-12)
    for module in (BetaSwish(0.6, learnable=True, num_channels=4), BetaAbs(0.6, learnable=True),
                   BetaLeakyReLU(0.6, 0.2, learnable=True, num_channels=4),
                   SoftmaxPool1d(2, beta=0.6, learnable=True, num_channels=4)):
        module.double()
        assert torch.autograd.gradcheck(lambda v, th, m=module: torch.func.functional_call(m, {"theta": th}, (v,)),
                                        (u, module.theta.detach().clone().requires_grad_()))


@pytest.mark.parametrize("cls", [BetaSwish, BetaAbs, BetaLeakyReLU])
def test_learnable_beta_gets_gradients_and_stays_inside(cls):
    torch.manual_seed(0)
    m = cls(0.7, learnable=True, num_channels=3)
    assert isinstance(m.theta, torch.nn.Parameter) and m.theta.shape == (3,)
    torch.testing.assert_close(m.beta, torch.full((3,), 0.7))
    x = torch.randn(16, 3, 5)
    m(x).pow(2).sum().backward()
    assert m.theta.grad is not None and m.theta.grad.shape == (3,) and (m.theta.grad != 0).all()
    for sign in (1.0, -1.0):  # push beta hard towards 1, then towards 0: it stays strictly inside
        opt = torch.optim.Adam(m.parameters(), lr=0.5)
        for _ in range(40):
            opt.zero_grad()
            (sign * (m(x) - x / 2).pow(2).sum()).backward()
            opt.step()
            assert ((m.beta > 0) & (m.beta < 1)).all(), m.beta
    opt = torch.optim.SGD(m.parameters(), lr=1e4)  # violent steps: beta may round to 0 / 1, outputs stay finite
    for sign in (1.0, -1.0):
        opt.zero_grad()
        (sign * m(x).sum()).backward()
        opt.step()
        assert torch.isfinite(m.theta).all() and torch.isfinite(m(x)).all()
    per_layer = cls(0.4, learnable=True)
    assert per_layer.theta.shape == ()
    per_layer(x).sum().backward()
    assert per_layer.theta.grad is not None and per_layer.theta.grad != 0


def test_learnable_matches_fixed():
    x = torch.randn(8, 3, 4, dtype=torch.float64)
    for beta in (0.2, 0.5, 0.85):
        for fixed, learn in ((BetaSwish(beta), BetaSwish(beta, learnable=True, num_channels=3)),
                             (BetaAbs(beta), BetaAbs(beta, learnable=True)),
                             (BetaLeakyReLU(beta, NU), BetaLeakyReLU(beta, NU, learnable=True)),
                             (SoftmaxPool1d(2, beta=beta), SoftmaxPool1d(2, beta=beta, learnable=True))):
            torch.testing.assert_close(learn.double()(x), fixed(x))
    per_channel = BetaSwish(0.3, num_channels=3)
    per_channel.beta_value.copy_(torch.tensor([0.0, 0.5, 1.0]))
    y = per_channel(x)
    torch.testing.assert_close(y[:, 0], x[:, 0] / 2)
    torch.testing.assert_close(y[:, 1], F.silu(x[:, 1]))
    torch.testing.assert_close(y[:, 2], torch.relu(x[:, 2]))


# ---------------------------------------------------------------------- modules
def test_modules_shape_repr_and_pooling():
    x = torch.randn(2, 3, 10)
    assert torch.equal(BetaSwish(1.0)(x), torch.relu(x))
    assert torch.equal(SoftmaxPool1d(3, 2, beta=1.0)(x), F.max_pool1d(x, 3, 2))
    torch.testing.assert_close(SoftmaxPool1d(3, 2, beta=0.0)(x), F.avg_pool1d(x, 3, 2))
    torch.testing.assert_close(SoftmaxPool1d(3, beta=0.5)(x), softmax_pool(x.unfold(-1, 3, 3), 0.5))
    assert torch.equal(VQSigmoid()(x), torch.sigmoid(x)) and torch.equal(VQTanh()(x), torch.tanh(x))
    assert torch.equal(VQSoftmax(dim=1)(x), torch.softmax(x, 1))
    assert repr(BetaSwish(0.7)) == "BetaSwish(beta=0.7)"
    assert repr(BetaSwish(0.7, learnable=True, num_channels=4)) == "BetaSwish(num_channels=4, learnable=True)"
    assert "nu=0.2" in repr(BetaLeakyReLU(0.5, 0.2)) and "kernel_size=3" in repr(SoftmaxPool1d(3))
    assert "beta_value" in BetaSwish(0.3).state_dict() and "theta" in BetaSwish(0.3, learnable=True).state_dict()
    net = torch.nn.Sequential(torch.nn.Linear(5, 4), BetaSwish(0.6, learnable=True, num_channels=4),
                              torch.nn.Linear(4, 2))
    assert net(torch.randn(7, 5)).shape == (7, 2)


# ---------------------------------------------------------------------- errors
def test_bad_inputs_raise_clear_errors():
    u = torch.randn(4)
    for bad in (-0.1, 1.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="beta"):
            beta_swish(u, bad)
        with pytest.raises(ValueError, match="beta"):
            BetaSwish(bad)
    with pytest.raises(ValueError, match="beta"):
        beta_abs(u, torch.tensor([0.2, 1.5]))
    with pytest.raises(ValueError, match="beta"):
        softmax_pool(u, -1e-9)
    with pytest.raises(TypeError, match="beta"):
        beta_swish(u, "0.5")
    with pytest.raises(ValueError, match="nu"):
        beta_leaky_relu(u, 0.5, 1.5)
    with pytest.raises(ValueError, match="strictly inside"):
        BetaSwish(1.0, learnable=True)
    with pytest.raises(ValueError, match="strictly inside"):
        BetaAbs(0.0, learnable=True)
    with pytest.raises(ValueError, match="num_channels"):
        BetaSwish(0.5, num_channels=0)
    with pytest.raises(ValueError, match=r"\(N, 3, \*\)"):
        BetaSwish(0.5, learnable=True, num_channels=3)(torch.randn(2, 4))
    with pytest.raises(ValueError, match="kernel_size"):
        SoftmaxPool1d(0)
    with pytest.raises(ValueError, match="kernel_size"):
        softmax_pool1d(torch.randn(2, 3), 5)
