"""The dtype of beta in the beta-VQ modules (``smaso.splines.modules``): a learnable beta is a parameter made
and cast like any other; a fixed beta is a float64 constant that casting the module never changes."""

from __future__ import annotations

import copy

import pytest
import torch

from smaso.splines.functional import beta_abs, beta_leaky_relu, beta_swish
from smaso.splines.modules import BetaAbs, BetaLeakyReLU, BetaSwish, SoftmaxPool1d

F64 = torch.float64
MODULES = [
    (BetaSwish, {}),
    (BetaLeakyReLU, {"nu": 0.1}),
    (BetaAbs, {}),
    (SoftmaxPool1d, {"kernel_size": 2}),
]
IDS = [cls.__name__ for cls, _ in MODULES]


def _make(cls, kwargs, beta, **extra):
    return cls(beta=beta, **kwargs, **extra)


@pytest.mark.parametrize(("cls", "kwargs"), MODULES, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_learnable_beta_is_made_in_the_requested_dtype(cls, kwargs, dtype):
    m = _make(cls, kwargs, 0.7, learnable=True, dtype=dtype)
    assert m.theta.dtype == dtype and m.beta.dtype == dtype
    assert float(m.beta.detach()) == pytest.approx(0.7, rel=1e-15 if dtype == F64 else 1e-7)
    per_channel = _make(cls, kwargs, 0.7, learnable=True, num_channels=3, dtype=dtype)
    assert per_channel.theta.dtype == dtype and per_channel.theta.shape == (3,)


@pytest.mark.parametrize(("cls", "kwargs"), MODULES, ids=IDS)
def test_learnable_beta_follows_the_default_dtype_and_module_casts(cls, kwargs):
    assert _make(cls, kwargs, 0.3, learnable=True).theta.dtype == torch.get_default_dtype()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(F64)
    try:
        assert _make(cls, kwargs, 0.3, learnable=True).theta.dtype == F64
    finally:
        torch.set_default_dtype(previous)
    m = _make(cls, kwargs, 0.3, learnable=True)
    assert m.double().theta.dtype == F64 and m.float().theta.dtype == torch.float32  # a weight: it is cast


@pytest.mark.parametrize(("cls", "kwargs"), MODULES, ids=IDS)
@pytest.mark.parametrize("cast", ["half", "bfloat16", "float", "double"])
def test_casting_the_module_never_moves_a_fixed_beta(cls, kwargs, cast):
    for num_channels in (None, 2):
        m = _make(cls, kwargs, 0.7, num_channels=num_channels)
        before = m.beta_value.clone()
        getattr(m, cast)()
        assert m.beta_value.dtype == F64
        assert torch.equal(m.beta_value, before)  # bit for bit: 0.7 stays 0.7, not 0.7002 (float16)
        m.to(torch.float16)
        assert m.beta_value.dtype == F64 and torch.equal(m.beta_value, before)


def test_a_cast_fixed_module_computes_what_the_uncast_one_did():
    x = torch.linspace(-6, 6, 97, dtype=F64)
    for beta in (0.0, 0.3, 0.7, 1.0):
        for m, ref in ((BetaSwish(beta), beta_swish(x, beta)),
                       (BetaLeakyReLU(beta, nu=0.1), beta_leaky_relu(x, beta, 0.1)),
                       (BetaAbs(beta), beta_abs(x, beta))):
            cast = copy.deepcopy(m).half()
            torch.testing.assert_close(cast(x), ref, rtol=1e-15, atol=0)  # the temperature is still the exact beta
            torch.testing.assert_close(cast(x.half()), m(x.half()), rtol=0, atol=0)


def test_fixed_and_learnable_beta_agree_in_float64():
    x = torch.linspace(-8, 8, 129, dtype=F64)
    for beta in (0.2, 0.5, 0.9):
        fixed = BetaSwish(beta)
        learnable = BetaSwish(beta, learnable=True, dtype=F64)
        torch.testing.assert_close(learnable(x), fixed(x), rtol=1e-14, atol=1e-300)


def test_a_fixed_beta_survives_the_state_dict_and_a_cast_module_loads_it():
    m = BetaSwish(0.7, num_channels=3)
    state = m.state_dict()
    assert state["beta_value"].dtype == F64
    other = BetaSwish(0.2, num_channels=3).half()
    other.load_state_dict(state)
    assert other.beta_value.dtype == F64 and torch.equal(other.beta_value, m.beta_value)


def test_learnable_beta_rejects_a_non_floating_dtype():
    with pytest.raises(TypeError, match="dtype"):
        BetaSwish(0.5, learnable=True, dtype=torch.int64)
