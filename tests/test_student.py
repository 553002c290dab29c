"""The ladder student (smaso/student/network.py) and its activations (smaso/student/activations.py).

References: torch's own pointwise functions and autograd (activations); a loop-based forward
pass on the student's parameters with ``torch.nn.functional.batch_norm`` and torch autograd
(student's explicit backward pass); see ``tests/conftest_student.py``.  Exact identities are
checked in float64 to 1e-10.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from conftest_student import (
    assert_close,
    autograd_reference,
    one_torch_thread,  # noqa: F401 (fixture)
    perturb_params,
    ref_activation,
    reference_forward,
)

from smaso.student.activations import Activation, get_activation
from smaso.student.network import LadderStudent
from teachers import Ladder, sample_ladder

# ====================================================================== activations

# leaky ReLU with nu = 0.25 (exact in float32): other nu hit the float32 rounding bug of
# test_leaky_relu_float64_matches_torch
ALL_ACTS = [Activation("relu"), Activation("linear"), Activation("leaky_relu", nu=0.25), Activation("abs"),
            Activation("swish", beta=0.0), Activation("swish", beta=0.3), Activation("swish", beta=0.5),
            Activation("swish", beta=0.9), Activation("swish", beta=0.999999), Activation("swish", beta=1 - 1e-15),
            Activation("swish", beta=1.0)]


def _grid(dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    u = torch.cat([torch.randn(200, generator=g, dtype=dtype) * 3, torch.tensor([-1.0, -1e-3, 1e-3, 1.0], dtype=dtype)])
    return u


@pytest.mark.parametrize("act", ALL_ACTS, ids=lambda a: f"{a.name}-{a.beta if a.name == 'swish' else a.nu}")
def test_activation_value_is_slope_times_u_and_matches_torch(act):
    u = _grid()
    ref = ref_activation(act, u)
    assert_close(act(u), ref, 1e-12, "f")
    assert_close(act.slope(u) * u, ref, 1e-12, "slope*u")


@pytest.mark.parametrize("act", ALL_ACTS, ids=lambda a: f"{a.name}-{a.beta if a.name == 'swish' else a.nu}")
def test_activation_derivative_equals_autograd(act):
    u = _grid().requires_grad_(True)
    (grad,) = torch.autograd.grad(ref_activation(act, u).sum(), u)
    assert_close(act.derivative(u.detach()), grad, 1e-12, "f'")
    # and the library's own f, differentiated by autograd
    u2 = _grid().requires_grad_(True)
    (grad2,) = torch.autograd.grad(act(u2).sum(), u2)
    if act.homogeneous:  # f = s(u) u with a piecewise-constant s: autograd sees s as the derivative
        assert_close(act.derivative(u2.detach()), grad2, 1e-12, "f' (library f)")


def test_swish_limits():
    u = _grid()
    # beta = 0: u / 2 exactly (eta = 0, sigmoid(0) = 1/2)
    assert torch.equal(Activation("swish", beta=0.0)(u), u / 2)
    assert torch.equal(Activation("swish", beta=0.0).derivative(u), torch.full_like(u, 0.5))
    # beta = 1/2: SiLU
    assert_close(Activation("swish", beta=0.5)(u), F.silu(u), 1e-14)
    assert_close(get_activation("silu")(u), F.silu(u), 1e-14)
    # beta = 1: ReLU, values and derivative
    assert torch.equal(Activation("swish", beta=1.0)(u), torch.relu(u))
    assert torch.equal(Activation("swish", beta=1.0).derivative(u), (u > 0).double())
    # beta -> 1 approaches ReLU: |u sigmoid(eta u) - relu(u)| <= max_t t sigmoid(-eta t) <= 1/(e eta)
    a = Activation("swish", beta=0.999)
    assert (a(u) - torch.relu(u)).abs().max().item() <= 1 / (2.718 * a.eta)
    assert Activation("swish", beta=0.75).eta == pytest.approx(3.0)
    assert Activation("swish", beta=1.0).eta == float("inf")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("act", ALL_ACTS, ids=lambda a: f"{a.name}-{a.beta if a.name == 'swish' else a.nu}")
def test_activation_finite_at_large_inputs(act, dtype):
    u = torch.tensor([-1e4, -1e3, -50.0, -1e-30, 0.0, 1e-30, 50.0, 1e3, 1e4], dtype=dtype)
    for name, v in (("f", act(u)), ("slope", act.slope(u)), ("derivative", act.derivative(u))):
        assert v.dtype == dtype, name
        assert torch.isfinite(v).all(), f"{name}: {v}"
    # the large-|u| asymptotes
    if act.name == "swish" and act.beta > 0:
        d = act.derivative(u)
        assert d[-1].item() == pytest.approx(1.0, abs=1e-6) and d[0].item() == pytest.approx(0.0, abs=1e-6)
        assert act(u)[-1].item() == pytest.approx(1e4, rel=1e-6) and abs(act(u)[0].item()) <= 1e-6


def test_get_activation_parsing():
    assert get_activation("relu") == Activation("relu")
    assert get_activation("linear") == Activation("linear")
    assert get_activation("abs") == Activation("abs")
    assert get_activation("silu") == Activation("swish", beta=0.5)
    assert get_activation("swish") == Activation("swish", beta=0.5)
    assert get_activation("swish:0.7") == Activation("swish", beta=0.7)
    assert get_activation("swish:1") == Activation("swish", beta=1.0)
    assert get_activation("swish:0") == Activation("swish", beta=0.0)
    assert get_activation("leaky_relu") == Activation("leaky_relu", nu=0.01)
    assert get_activation("leaky_relu:0.2") == Activation("leaky_relu", nu=0.2)
    a = Activation("abs")
    assert get_activation(a) is a
    assert Activation("relu").homogeneous and not Activation("swish", beta=0.5).homogeneous
    assert Activation("swish", beta=1.0).homogeneous


@pytest.mark.parametrize("spec, exc, match", [
    ("tanh", ValueError, "activation"),
    ("swish:abc", ValueError, "swish:abc"),
    ("swish:1.5", ValueError, "swish:1.5"),
    ("swish:-0.1", ValueError, "swish"),
    ("leaky_relu:x", ValueError, "leaky_relu:x"),
    ("", ValueError, "activation"),
    (3, TypeError, "int"),
    (None, TypeError, "NoneType"),
])
def test_get_activation_errors(spec, exc, match):
    with pytest.raises(exc, match=match):
        get_activation(spec)


def test_activation_constructor_errors():
    with pytest.raises(ValueError, match="beta"):
        Activation("swish", beta=1.5)
    with pytest.raises(ValueError, match="beta"):
        Activation("swish", beta=float("nan"))
    with pytest.raises(ValueError, match="activation"):
        Activation("softplus")


def test_leaky_relu_float64_matches_torch():
    assert torch.get_default_dtype() == torch.float32  # the tests' default
    u = _grid()
    for nu in (0.01, 0.1):
        a = Activation("leaky_relu", nu=nu)
        assert_close(a(u), F.leaky_relu(u, nu), 1e-14, f"leaky_relu float64, nu={nu}")


# ====================================================================== student vs autograd

def _td_ladder(emission=None):
    return Ladder.random(depth=3, branching=[2, 2, 2], events=[3, 3, 3, 2], mode="topdown", concentration=0.8,
                         seed=7, emission=emission, sigma=0.5 if emission == "gaussian" else None)


def _data(lad, n=48, seed=1):
    s = sample_ladder(lad, n, seed=seed)
    return s.inputs(dtype=torch.float64), s.y, s.z


def _check_record_against_autograd(st, x, y, loss):
    rec = st.forward_backward(x, y, loss)
    ref = autograd_reference(st, x, y, loss)
    d = st.ladder.depth
    assert rec.loss == pytest.approx(ref["loss"], rel=1e-12, abs=1e-14)
    with torch.no_grad():
        assert_close(st(x), ref["out"], 1e-12, "forward")
        assert rec.loss == pytest.approx(st.loss(st(x), y, loss).item(), rel=1e-12, abs=1e-14)
    assert torch.equal(rec.fbar[d], x)
    for l in range(d):
        assert_close(rec.u[l], ref["u"][l], 1e-12, f"u[{l}]")
        assert_close(rec.f[l], ref["f"][l], 1e-12, f"f[{l}]")
        assert_close(rec.fbar[l], ref["fbar"][l], 1e-12, f"fbar[{l}]")
        assert_close(rec.g[l], ref["g"][l], 1e-10, f"g[{l}]")
        assert_close(rec.g_f[l], ref["g_f"][l], 1e-10, f"g_f[{l}]")
        assert_close(rec.g_raw[l], ref["g_raw"][l], 1e-10, f"g_raw[{l}]")
        assert_close(rec.dW[l], ref["dW"][l], 1e-10, f"dW[{l}]")
        if st.biases is not None:
            assert_close(rec.db[l], ref["db"][l], 1e-10, f"db[{l}]")
        a = st.act(l)
        assert_close(rec.slope[l], a.slope(rec.u[l]), 0, f"slope[{l}]")
        assert_close(rec.deriv[l], a.derivative(rec.u[l]), 0, f"deriv[{l}]")
    if st.batch_norm:
        for l in range(1, d):
            assert_close(rec.dc1[l], ref["dc1"][l - 1], 1e-10, f"dc1[{l}]")
            assert_close(rec.dc0[l], ref["dc0"][l - 1], 1e-10, f"dc0[{l}]")
        assert rec.dc1[0] is None and rec.dc0[0] is None
    return rec


CASES = list(itertools.product(["relu", "swish:0.7", "abs"], [False, True], [False, True],
                               ["squared", "cross_entropy"], ["onehot", "gaussian"]))


@pytest.mark.parametrize("activation, batch_norm, bias, loss, emission", CASES,
                         ids=["-".join(str(v) for v in c) for c in CASES])
def test_forward_backward_equals_autograd(activation, batch_norm, bias, loss, emission):
    lad = _td_ladder(emission)
    x, y, _ = _data(lad)
    st = LadderStudent(lad, [4, 5], activation=activation, batch_norm=batch_norm, bias=bias, dtype=torch.float64,
                       seed=2)
    perturb_params(st, shift=0.5)
    rec = _check_record_against_autograd(st, x, y, loss)
    # the gradients are not trivially zero (the check above would be empty otherwise)
    assert all(rec.dW[l].abs().max() > 1e-6 for l in range(lad.depth))


@pytest.mark.parametrize("top", ["swish:0.5", "relu", "abs"])
def test_forward_backward_nonlinear_top_and_bn_eps0(top):
    lad = _td_ladder("gaussian")
    x, y, _ = _data(lad, n=40)
    st = LadderStudent(lad, [3, 4], activation="swish:0.6", top_activation=top, batch_norm=True, bn_eps=0.0,
                       dtype=torch.float64, seed=4)
    perturb_params(st, shift=0.5)
    _check_record_against_autograd(st, x, y, "squared")


def test_forward_backward_depth1_and_float32():
    lad = Ladder.random(depth=1, branching=3, events=[4, 3], mode="bottomup", seed=14)
    x, y, _ = _data(lad, n=30)
    st = LadderStudent(lad, [], activation="relu", dtype=torch.float64, seed=0)
    _check_record_against_autograd(st, x, y, "cross_entropy")
    # float32 student: same quantities, float32 tolerance (~1e-6 relative)
    st32 = LadderStudent(lad, [], activation="relu", seed=0)
    rec32 = st32.forward_backward(x.float(), y)
    rec64 = st.forward_backward(x, y)
    assert rec32.dW[0].dtype == torch.float32
    assert_close(rec32.dW[0].double(), rec64.dW[0], 1e-5, "float32 dW")


def test_record_layout():
    lad = _td_ladder()
    x, y, _ = _data(lad, n=10)
    st = LadderStudent(lad, [4, 5], batch_norm=True, dtype=torch.float64)
    rec = st.forward_backward(x, y)
    d = lad.depth
    assert st.widths == [3, 4, 5, 2]
    for l in range(d):
        for name in ("u", "f", "fbar", "slope", "deriv", "g_raw", "g_f", "g"):
            assert getattr(rec, name)[l].shape == (10, lad.num_regions[l], st.widths[l]), (name, l)
        assert rec.dW[l].shape == (lad.num_regions[l + 1], st.widths[l + 1], st.widths[l])
        assert rec.db[l].shape == (lad.num_regions[l], st.widths[l])
    assert rec.u[d] is None and rec.g[d] is None


def test_batchnorm_output_is_standardized():
    """With c1 = 1, c0 = 0 and eps = 0 every hidden BN output has batch mean 0 and variance 1 per node."""
    lad = _td_ladder("gaussian")
    x, y, _ = _data(lad, n=64)
    st = LadderStudent(lad, [4, 5], activation="abs", batch_norm=True, bn_eps=0.0, dtype=torch.float64)
    rec = st.forward_backward(x, y)
    for l in range(1, lad.depth):
        assert rec.fbar[l].mean(0).abs().max().item() < 1e-12
        assert (rec.fbar[l].pow(2).mean(0) - 1).abs().max().item() < 1e-12


# ====================================================================== updates

@pytest.mark.parametrize("batch_norm, bias, wd", [(False, True, 0.0), (True, True, 0.05), (True, False, 0.1),
                                                   (False, False, 0.02)])
def test_apply_update_is_one_sgd_step(batch_norm, bias, wd):
    """W += lr (dW - 2 wd W): gradient descent on mean loss + wd sum ||W||_F^2 (biases and BN
    parameters are not regularized)."""
    lad = _td_ladder()
    x, y, _ = _data(lad)
    st = LadderStudent(lad, [4, 5], activation="swish:0.7", batch_norm=batch_norm, bias=bias, dtype=torch.float64)
    perturb_params(st, shift=0.5)
    lr = 0.3
    # reference: torch.optim.SGD on autograd gradients of the regularized loss, on a copy
    ref = LadderStudent(lad, [4, 5], activation="swish:0.7", batch_norm=batch_norm, bias=bias, dtype=torch.float64)
    ref.load_state_dict(st.state_dict())
    opt = torch.optim.SGD(ref.parameters(), lr=lr)
    opt.zero_grad()
    L = ref.loss(ref(x), y) + wd * sum(w.pow(2).sum() for w in ref.weights)
    L.backward()
    opt.step()
    before = {k: v.clone() for k, v in st.state_dict().items()}
    rec = st.forward_backward(x, y)
    st.apply_update(rec, lr, wd)
    after, want = st.state_dict(), ref.state_dict()
    assert set(after) == set(want)
    for k in after:
        assert_close(after[k], want[k], 1e-12, k)
        assert not torch.equal(after[k], before[k]), f"{k} did not move"


# ====================================================================== locality

@pytest.mark.parametrize("batch_norm", [False, True])
def test_network_is_locally_connected(batch_norm):
    """Perturbing the input of one leaf region changes only its ancestors' activations."""
    lad = _td_ladder("gaussian")
    x, y, _ = _data(lad, n=20)
    st = LadderStudent(lad, [4, 5], activation="swish:0.7", batch_norm=batch_norm, dtype=torch.float64)
    perturb_params(st, shift=0.5)
    base = st.forward_backward(x, y)
    d = lad.depth
    for leaf in range(lad.num_regions[d]):
        x2 = x.clone()
        x2[:, leaf] += torch.linspace(-2, 3, x.shape[0], dtype=torch.float64)[:, None]
        rec = st.forward_backward(x2, y)
        for l in range(d):
            ancestor = leaf // lad.leaves_under(l)
            for r in range(lad.num_regions[l]):
                same = torch.equal(rec.fbar[l][:, r], base.fbar[l][:, r])
                if r == ancestor:
                    assert not same, f"leaf {leaf}: ancestor region {r} of level {l} did not change"
                else:
                    assert same, f"leaf {leaf}: region {r} of level {l} is not an ancestor but changed"


# ====================================================================== bad inputs

def test_bad_inputs():
    lad = _td_ladder()
    other = Ladder.random(depth=3, branching=[2, 2, 3], events=[3, 3, 3, 2], seed=1)
    x_other = sample_ladder(other, 8, seed=0).inputs(dtype=torch.float64)
    st = LadderStudent(lad, [4, 5], dtype=torch.float64)
    y = torch.zeros(8, dtype=torch.long)
    with pytest.raises(ValueError, match=r"x: expected shape \(N, 8, 2\)"):
        st.forward_backward(x_other, y)
    with pytest.raises(ValueError, match="x: expected shape"):
        st(x_other)
    with pytest.raises(ValueError, match="x: expected shape"):
        st(torch.zeros(8, 16))  # flattened input
    with pytest.raises(TypeError, match=r"x: expected a torch\.Tensor"):
        st(x_other.numpy())
    x, y, _ = _data(lad, n=8)
    with pytest.raises(ValueError, match="loss"):
        st.forward_backward(x, y, "hinge")
    with pytest.raises(ValueError, match="loss"):
        st.loss(st(x), y, "hinge")
    with pytest.raises(ValueError, match="y: expected shape"):
        st.forward_backward(x, y[:5])
    for width in ([4], [4, 5, 6], [4, 0], [-1, 3]):
        with pytest.raises(ValueError, match="width"):
            LadderStudent(lad, width)
    with pytest.raises(ValueError, match="width"):
        LadderStudent(lad, 0)
    with pytest.raises(TypeError, match="ladder"):
        LadderStudent("not a ladder")
    with pytest.raises(ValueError, match="activation"):
        LadderStudent(lad, 4, activation="tanh")


def test_reference_forward_matches_student_forward_float32():
    """Sanity of the loop reference itself in the default dtype (guards the reference)."""
    lad = _td_ladder()
    x, _, _ = _data(lad, n=12)
    st = LadderStudent(lad, [4, 5], batch_norm=True)
    with torch.no_grad():
        out = reference_forward(st, x.float())["out"]
        assert_close(st(x.float()), out, 1e-5)


def test_questionable_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="takes no parameter"):
        get_activation("relu:3")
    with pytest.raises(ValueError, match=r"beta: expected a value in \[0, 1\]"):
        get_activation("swish:2")
    lad = Ladder.random(depth=2, branching=2, events=3, seed=0)
    st = LadderStudent(lad, 3, batch_norm=True, bn_eps=0.0, dtype=torch.float64)
    with torch.no_grad():
        st.biases[1][0, 0] = -100.0  # a dead ReLU: constant 0 over the batch
    x = torch.nn.functional.one_hot(torch.randint(0, 3, (50, 4)), 3).double()
    with pytest.raises(ValueError, match="constant over the batch"):
        st.forward_backward(x, torch.zeros(50, dtype=torch.long))
    st2 = LadderStudent(lad, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"y: labels must lie in \[0, 3\)"):
        st2.forward_backward(x, torch.full((50,), 7))


@pytest.mark.parametrize("name", ["relu", "leaky_relu:0.2", "swish:1", "swish:0.7", "abs", "linear"])
def test_in_place_activation_equals_out_of_place_with_gradients(name):
    """``Activation.apply_`` (used by the student's forward on its fresh pre-activations) gives the same
    values and, through autograd, the same gradients as ``Activation.__call__``."""
    a = get_activation(name)
    w = torch.randn(7, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(4), requires_grad=True)
    x = torch.randn(11, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    ref = a(x @ w)
    (g_ref,) = torch.autograd.grad(ref.pow(2).sum(), w)
    got = a.apply_(x @ w)
    (g_got,) = torch.autograd.grad(got.pow(2).sum(), w)
    assert torch.equal(got, ref) and torch.equal(g_got, g_ref)


def test_swish_backward_gate_is_finite_where_eta_u_overflows():
    from smaso.student.activations import Activation

    for beta, dtype in ((0.9, torch.float32), (0.999, torch.float32), (0.999, torch.float64)):
        act = Activation("swish", beta=beta)
        top = torch.finfo(dtype).max
        u = torch.tensor([-top, -1e37, -3.0, 0.0, 3.0, 1e37, top], dtype=dtype)
        d = act.derivative(u)
        assert torch.isfinite(d).all()
        assert d[0] == 0 and d[-1] == 1  # the hard limits of the gate far from 0
        eta = beta / (1 - beta)
        s = torch.sigmoid(torch.tensor(eta * 3.0, dtype=torch.float64))
        assert d[4].item() == pytest.approx((s + eta * 3.0 * s * (1 - s)).item(), rel=1e-6)
