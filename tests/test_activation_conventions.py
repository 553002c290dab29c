"""The beta-VQ activations (``smaso.splines.functional`` / ``smaso.splines.modules``) to PyTorch's conventions
(issue 16): no host read in forward (meta tensors, ``torch.compile(fullgraph=True)``, ``torch.export``),
``torch.func`` (vmap, grad, jacrev), double backward, learnable beta in half precision, ``inplace=``,
functional twins, and beta checked where it is set.

References are the plain formulas of Table 1 (``docs/theory.md`` §3) with PyTorch's own autograd, in float64:
swish u sigma(eta u), leaky u [nu + (1 - nu) sigma(eta (1 - nu) u)], abs u tanh(eta u), eta = beta / (1 - beta)
(= exp(theta) for a learnable beta).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, jacrev, vmap
from torch.utils._python_dispatch import TorchDispatchMode

from smaso.splines.functional import (
    beta_abs,
    beta_leaky_relu,
    beta_swish,
    softmax_pool1d,
    vq_probability_abs,
    vq_probability_pool,
    vq_probability_relu,
)
from smaso.splines.modules import BetaAbs, BetaLeakyReLU, BetaSwish, SoftmaxPool1d, VQSigmoid, VQSoftmax, VQTanh

F64 = torch.float64
NU = 0.1
TOL = {"rtol": 1e-10, "atol": 1e-10}
LIMIT_BETAS = [0.0, 0.3, 0.5, 0.8, 1.0]
ELEMENTWISE = {"swish": (BetaSwish, {}), "leaky": (BetaLeakyReLU, {"nu": NU}), "abs": (BetaAbs, {})}


def _formula(kind: str, u: torch.Tensor, eta) -> torch.Tensor:
    if kind == "swish":
        return u * torch.sigmoid(eta * u)
    if kind == "leaky":
        return u * (NU + (1 - NU) * torch.sigmoid(eta * (1 - NU) * u))
    return u * torch.tanh(eta * u)


def _exact(kind: str, u: torch.Tensor, beta: float) -> torch.Tensor:
    """The formula, with the limits beta = 0 / 1 written out (eta = 0 / inf)."""
    if beta == 1.0:
        return {"swish": torch.relu, "leaky": lambda v: F.leaky_relu(v, NU), "abs": torch.abs}[kind](u)
    return _formula(kind, u, beta / (1 - beta))


def _inputs(*shape, seed=0) -> torch.Tensor:
    """float64 inputs kept away from 0 (the kink of the hard limit, for finite differences)."""
    g = torch.Generator().manual_seed(seed)
    u = 3 * torch.randn(*shape, generator=g, dtype=F64)
    return u + 0.2 * torch.sign(u)


def _all_modules(dtype=F64):
    """One of each kind: fixed per layer, learnable per layer, per channel (3), and the pooling / VQ layers."""
    mods = []
    for kind, (cls, kw) in ELEMENTWISE.items():
        mods += [(f"{kind}-fixed", cls(0.7, **kw)), (f"{kind}-learnable", cls(0.7, **kw, learnable=True)),
                 (f"{kind}-channels", cls(0.7, **kw, learnable=True, num_channels=3)),
                 (f"{kind}-fixed-channels", cls(0.7, **kw, num_channels=3))]
    mods += [("pool-fixed", SoftmaxPool1d(2, beta=0.7)), ("pool-learnable", SoftmaxPool1d(2, beta=0.7, learnable=True)),
             ("vq-sigmoid", VQSigmoid(0.7)), ("vq-tanh", VQTanh(0.7)), ("vq-softmax", VQSoftmax(0.7))]
    return [(name, m.to(dtype)) for name, m in mods]


MODULE_IDS = [name for name, _ in _all_modules()]


def _module(name):
    return dict(_all_modules())[name]


# ---------------------------------------------------------------------- torch.func against the plain formula
@pytest.mark.parametrize("kind", list(ELEMENTWISE))
@pytest.mark.parametrize("beta", [0.3, 0.8])
def test_vmap_grad_jacrev_fixed_beta(kind, beta):
    cls, kw = ELEMENTWISE[kind]
    m = cls(beta, **kw)
    eta = beta / (1 - beta)
    x = _inputs(4, 5)
    ref = lambda v: _formula(kind, v, eta)  # noqa: E731
    torch.testing.assert_close(vmap(m)(x), ref(x), **TOL)
    torch.testing.assert_close(vmap(vmap(m))(x), ref(x), **TOL)
    xr = x.clone().requires_grad_()
    (g_ref,) = torch.autograd.grad(ref(xr).sum(), xr)
    torch.testing.assert_close(grad(lambda v: m(v).sum())(x), g_ref, **TOL)
    torch.testing.assert_close(jacrev(m)(x[0]), torch.autograd.functional.jacobian(ref, x[0]), **TOL)
    torch.testing.assert_close(vmap(jacrev(m))(x), vmap(jacrev(ref))(x), **TOL)
    # second order through torch.func: the Hessian of the sum (diagonal) equals the formula's
    torch.testing.assert_close(jacrev(jacrev(lambda v: m(v).sum()))(x[0]),
                               torch.autograd.functional.hessian(lambda v: ref(v).sum(), x[0]), **TOL)


@pytest.mark.parametrize("kind", list(ELEMENTWISE))
@pytest.mark.parametrize("num_channels", [None, 3])
def test_vmap_grad_jacrev_learnable_beta(kind, num_channels):
    cls, kw = ELEMENTWISE[kind]
    m = cls(0.6, **kw, learnable=True, num_channels=num_channels, dtype=F64)
    x = _inputs(2, 3, 4)
    shape = () if num_channels is None else (3, 1)

    def ref(v, theta):
        return _formula(kind, v, torch.exp(theta).reshape(shape))

    def call(theta, v):
        return functional_call(m, {"theta": theta}, (v,))

    theta = torch.randn(m.theta.shape, dtype=F64, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(call(theta, x), ref(x, theta), **TOL)
    tr, xr = theta.clone().requires_grad_(), x.clone().requires_grad_()
    g_theta, g_x = torch.autograd.grad(ref(xr, tr).pow(2).sum(), (tr, xr))
    got_theta, got_x = grad(lambda t, v: call(t, v).pow(2).sum(), argnums=(0, 1))(theta, x)
    torch.testing.assert_close(got_theta, g_theta, **TOL)
    torch.testing.assert_close(got_x, g_x, **TOL)
    torch.testing.assert_close(jacrev(call)(theta, x), jacrev(ref, argnums=1)(x, theta), **TOL)
    # a batch of betas at once (vmap over the parameter), and per-sample gradients (vmap of grad)
    thetas = torch.stack([theta, theta + 0.5, theta - 1.0])
    torch.testing.assert_close(vmap(call, in_dims=(0, None))(thetas, x), vmap(ref, in_dims=(None, 0))(x, thetas),
                               **TOL)
    per_sample = vmap(grad(lambda t, v: call(t, v[None]).sum()), in_dims=(None, 0))(theta, x)
    torch.testing.assert_close(per_sample, vmap(grad(lambda t, v: ref(v[None], t).sum()), in_dims=(None, 0))(theta, x),
                               **TOL)
    # grad of grad (theta, then x)
    torch.testing.assert_close(grad(lambda t: grad(lambda v: call(t, v).sum())(x).sum())(theta),
                               grad(lambda t: grad(lambda v: ref(v, t).sum())(x).sum())(theta), **TOL)


def test_functional_vmaps_over_a_tensor_beta_and_a_swapped_fixed_buffer():
    x = _inputs(5)
    betas = torch.tensor([0.0, 0.3, 0.5, 0.8, 1.0], dtype=F64)
    got = vmap(beta_swish, in_dims=(None, 0))(x, betas)
    for row, b in zip(got, betas.tolist(), strict=True):
        torch.testing.assert_close(row, _exact("swish", x, b), **TOL)
    g = vmap(grad(lambda b: beta_abs(x, b).sum()))(betas[1:4])
    expected = [torch.func.grad(lambda e: _formula("abs", x, e).sum())(torch.tensor(b / (1 - b), dtype=F64))
                / (1 - b) ** 2 for b in betas[1:4].tolist()]  # d eta / d beta = 1 / (1 - beta)^2
    torch.testing.assert_close(g, torch.stack(expected), **TOL)
    # a fixed module whose buffer torch.func swaps in: the swapped values are used (no stale float, no host read)
    m = BetaSwish(0.5)
    swapped = vmap(lambda b: functional_call(m, {"beta_value": b}, (x,)))(betas)
    torch.testing.assert_close(swapped, got, **TOL)


# ---------------------------------------------------------------------- gradcheck / gradgradcheck
@pytest.mark.parametrize("kind", [*ELEMENTWISE, "leaky-negative"])
@pytest.mark.parametrize("beta", LIMIT_BETAS)
def test_gradcheck_and_gradgradcheck_fixed_and_tensor_beta(kind, beta):
    nu = -0.5 if kind == "leaky-negative" else NU
    fns = {"swish": beta_swish, "abs": beta_abs}
    fn = fns.get(kind, lambda v, b: beta_leaky_relu(v, b, nu))
    u = _inputs(3, 4).requires_grad_()
    cls = ELEMENTWISE.get(kind, (BetaLeakyReLU,))[0]
    module = cls(beta, **({"nu": nu} if cls is BetaLeakyReLU else {}))
    for f in (module, lambda v: fn(v, beta)):
        assert torch.autograd.gradcheck(f, (u,))
        assert torch.autograd.gradgradcheck(f, (u,))
    # beta as a tensor (the tensor kernels, not the exact branches), per row
    rows = torch.full((3, 1), beta, dtype=F64)
    assert torch.autograd.gradcheck(fn, (u, rows))
    assert torch.autograd.gradgradcheck(fn, (u, rows))
    if 0 < beta < 1:  # and requiring grad, per layer and per row: gradients with respect to beta too
        for b in (torch.tensor(beta, dtype=F64), rows):
            b = b.clone().requires_grad_()
            assert torch.autograd.gradcheck(fn, (u, b))
            assert torch.autograd.gradgradcheck(fn, (u, b))
        return
    # at beta = 0 / 1 a central difference would leave [0, 1]: compare with a one-sided one
    b = torch.tensor(beta, dtype=F64, requires_grad=True)
    (d_beta,) = torch.autograd.grad(fn(u, b).sum(), b)
    eps = 1e-7
    inside = torch.tensor(beta + eps if beta == 0 else beta - eps, dtype=F64)
    with torch.no_grad():
        one_sided = (fn(u, inside).sum() - fn(u, b).sum()) / (inside - beta)
    torch.testing.assert_close(d_beta, one_sided, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", [*ELEMENTWISE, "pool"])
@pytest.mark.parametrize("beta", [1e-6, 0.3, 0.5, 0.8, 1 - 1e-6])
def test_gradcheck_and_gradgradcheck_learnable_beta(kind, beta):
    """Learnable beta (theta = logit beta), gradients with respect to theta and the input, near both limits too."""
    cls, kw = ELEMENTWISE.get(kind, (SoftmaxPool1d, {"kernel_size": 2}))
    m = cls(beta=beta, **kw, learnable=True, num_channels=4, dtype=F64)
    u = _inputs(2, 4, 5).requires_grad_()

    def f(v, theta):
        return functional_call(m, {"theta": theta}, (v,))

    theta = m.theta.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(f, (u, theta))
    assert torch.autograd.gradgradcheck(f, (u, theta))


# ---------------------------------------------------------------------- meta, compile, export: no host read
class _HostReads(TorchDispatchMode):
    """Counts ``aten._local_scalar_dense`` -- what ``.item()``, ``float()``, ``bool()`` of a tensor dispatch to."""

    def __init__(self):
        super().__init__()
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.reads += 1
        return func(*args, **(kwargs or {}))


def _input_for(name: str, device="cpu") -> torch.Tensor:
    if name.endswith("channels") or name.startswith("pool"):
        return torch.randn(2, 3, 6, dtype=F64).to(device)
    return torch.randn(4, dtype=F64).to(device)


@pytest.mark.parametrize("name", MODULE_IDS)
def test_no_host_read_in_forward_or_backward(name):
    m = _module(name)
    x = _input_for(name).requires_grad_()
    with _HostReads() as mode:
        y = m(x)
        y.pow(2).sum().backward()
    assert mode.reads == 0, name
    assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("name", MODULE_IDS)
def test_meta_tensors(name):
    m = copy.deepcopy(_module(name)).to("meta")
    y = m(_input_for(name, "meta"))
    ref = _module(name)(_input_for(name))
    assert y.device.type == "meta" and y.shape == ref.shape and y.dtype == ref.dtype
    if name.startswith(tuple(ELEMENTWISE)) and not name.endswith("channels"):
        assert m(torch.empty(4, device="meta", dtype=F64)).shape == (4,)  # the brief's example
    x = _input_for(name, "meta").requires_grad_()
    m(x).sum().backward()
    assert x.grad.device.type == "meta" and x.grad.shape == x.shape
    for p in m.parameters():
        assert p.grad is not None and p.grad.device.type == "meta"


@pytest.mark.parametrize("name", MODULE_IDS)
def test_compile_fullgraph_aot_eager(name):
    """fullgraph=True fails on any graph break (a host read would be one).  ``aot_eager`` traces the forward and
    the backward (AOTAutograd) without compiling C++; ``test_compile_fullgraph_inductor`` compiles for real."""
    torch._dynamo.reset()
    m = _module(name)
    x = _input_for(name)
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
    xc, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
    yc, ye = compiled(xc), m(xe)
    torch.testing.assert_close(yc, ye, **TOL)
    yc.pow(2).sum().backward()
    grads_c = [xc.grad] + [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    ye.pow(2).sum().backward()
    for a, b in zip(grads_c, [xe.grad] + [p.grad for p in m.parameters()], strict=True):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.slow
def test_compile_fullgraph_inductor():
    """One real inductor compile (C++ on this CPU) of a network using each elementwise kind, forward + backward."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 3), BetaSwish(0.7, learnable=True), BetaAbs(0.3),
                              BetaLeakyReLU(0.8, NU, learnable=True, num_channels=3), BetaSwish(0.5))
    x = torch.randn(6, 5)
    compiled = torch.compile(net, fullgraph=True)
    yc = compiled(x)
    torch.testing.assert_close(yc, net(x), rtol=1e-5, atol=1e-6)
    yc.pow(2).sum().backward()
    grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    net(x).pow(2).sum().backward()
    for a, p in zip(grads, net.parameters(), strict=True):
        torch.testing.assert_close(a, p.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", MODULE_IDS)
def test_export(name):
    m = _module(name)
    x = _input_for(name)
    ep = torch.export.export(m, (x,))
    assert "_local_scalar_dense" not in str(ep.graph) and "item" not in str(ep.graph)
    torch.testing.assert_close(ep.module()(x), m(x), **TOL)
    x2 = _input_for(name)
    torch.testing.assert_close(ep.module()(x2), m(x2), **TOL)


# ---------------------------------------------------------------------- half precision, learnable beta
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cls", [BetaSwish, BetaLeakyReLU, BetaAbs, SoftmaxPool1d])
@pytest.mark.parametrize("beta", [0.3, 0.7, 0.9999])
def test_half_learnable_beta_matches_float32(dtype, cls, beta):
    kw = {"kernel_size": 2} if cls is SoftmaxPool1d else {}
    m32 = cls(beta=beta, **kw, learnable=True)
    mh = copy.deepcopy(m32).to(dtype)
    assert mh.theta.dtype == dtype
    x = (3 * torch.randn(4, 3, 50, generator=torch.Generator().manual_seed(1))).to(dtype).float()
    x32, xh = x.clone().requires_grad_(), x.to(dtype).requires_grad_()
    y32, yh = m32(x32), mh(xh)
    assert yh.dtype == dtype and torch.isfinite(yh).all()
    tol = 4e-3 if dtype == torch.float16 else 3e-2
    assert ((yh.float() - y32).abs() <= tol * (1 + y32.abs())).all()
    g = torch.randn(y32.shape, generator=torch.Generator().manual_seed(2))
    y32.backward(g)
    yh.backward(g.to(dtype))
    assert torch.isfinite(xh.grad).all() and torch.isfinite(mh.theta.grad).all()
    assert xh.grad.dtype == dtype and mh.theta.grad.dtype == dtype
    assert ((xh.grad.float() - x32.grad).abs() <= tol * (1 + x32.grad.abs())).all()
    scale = 1 + m32.theta.grad.abs() + x32.grad.abs().mean()
    assert (mh.theta.grad.float() - m32.theta.grad).abs() <= 2 * tol * scale


# ---------------------------------------------------------------------- inplace
@pytest.mark.parametrize("kind", list(ELEMENTWISE))
@pytest.mark.parametrize("beta", [*LIMIT_BETAS, "learnable", "channels"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_inplace_equals_out_of_place(kind, beta, dtype):
    cls, kw = ELEMENTWISE[kind]
    if beta == "learnable":
        make = lambda **k: cls(0.7, **kw, learnable=True, **k)  # noqa: E731
    elif beta == "channels":
        make = lambda **k: cls(0.7, **kw, num_channels=3, **k)  # noqa: E731
    else:
        make = lambda **k: cls(beta, **kw, **k)  # noqa: E731
    out_of_place, inplace = make().to(dtype), make(inplace=True).to(dtype)
    assert "inplace=True" in repr(inplace) and "inplace" not in repr(out_of_place)
    x = (3 * torch.randn(2, 3, 7)).to(dtype)
    ref = out_of_place(x)
    with torch.no_grad():  # a parameter that requires grad: still the fast in-place path
        x1 = x.clone()
        y1 = inplace(x1)
        assert y1 is x1 and torch.equal(y1, ref)
    x2 = x.clone()
    y2 = inplace(x2)  # autograd on (learnable) or off: the same values, the same storage
    assert y2.data_ptr() == x2.data_ptr() and torch.equal(y2, ref)
    # with autograd through a non-leaf input: the same gradients as out of place
    leaf_a, leaf_b = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya = inplace(leaf_a * 1)
    yb = out_of_place(leaf_b * 1)
    assert torch.equal(ya, yb)
    g = torch.randn(x.shape).to(dtype)
    ya.backward(g)
    params_a = [p.grad.clone() for p in inplace.parameters()]
    yb.backward(g)
    torch.testing.assert_close(leaf_a.grad, leaf_b.grad, rtol=0, atol=0)
    for a, p in zip(params_a, out_of_place.parameters(), strict=True):
        torch.testing.assert_close(a, p.grad)
    with pytest.raises(RuntimeError, match="leaf"):  # as nn.SiLU(inplace=True)
        inplace(x.clone().requires_grad_())


def test_inplace_functionals():
    x = torch.randn(50, dtype=F64)
    for fn in (beta_swish, beta_abs, lambda v, b, **k: beta_leaky_relu(v, b, NU, **k)):
        for beta in (0.0, 0.3, 0.5, 1.0, torch.tensor(0.3, dtype=F64)):
            x1 = x.clone()
            assert fn(x1, beta, inplace=True) is x1 and torch.equal(x1, fn(x, beta))
    assert torch.equal(beta_swish(x.clone(), 0.5, inplace=True), F.silu(x))


def test_inplace_under_vmap():
    x = _inputs(3, 4)
    expected = BetaSwish(0.7)(x)
    torch.testing.assert_close(vmap(BetaSwish(0.7, inplace=True))(x.clone()), expected, **TOL)
    torch.testing.assert_close(grad(lambda v: BetaSwish(0.7, inplace=True)(v * 1).sum())(x),
                               grad(lambda v: BetaSwish(0.7)(v).sum())(x), **TOL)


# ---------------------------------------------------------------------- functional twins
@pytest.mark.parametrize("beta", LIMIT_BETAS)
def test_functional_twins_equal_modules(beta):
    x = torch.randn(2, 3, 8, dtype=F64)
    pairs = [(BetaSwish(beta), lambda v: beta_swish(v, beta)),
             (BetaLeakyReLU(beta, NU), lambda v: beta_leaky_relu(v, beta, NU)),
             (BetaAbs(beta), lambda v: beta_abs(v, beta)),
             (SoftmaxPool1d(3, 2, beta=beta), lambda v: softmax_pool1d(v, 3, 2, beta)),
             (VQSigmoid(beta), lambda v: vq_probability_relu(v, beta)),
             (VQTanh(beta), lambda v: vq_probability_abs(v, beta)),
             (VQSoftmax(beta, dim=1), lambda v: vq_probability_pool(v, beta, 1))]
    for module, fn in pairs:
        assert torch.equal(module(x), fn(x)), module
    if 0 < beta < 1:
        for module, fn in ((BetaSwish(beta, learnable=True, num_channels=3, dtype=F64), beta_swish),
                           (BetaAbs(beta, learnable=True, dtype=F64), beta_abs)):
            b = module.beta.reshape(-1, 1) if module.num_channels else module.beta
            torch.testing.assert_close(module(x), fn(x, b), **TOL)


# ---------------------------------------------------------------------- beta is checked where it is set
def test_beta_is_checked_when_set_and_followed_when_changed():
    x = torch.linspace(-6, 6, 97)
    m = BetaSwish(0.3)
    m.beta = 0.5
    assert torch.equal(m(x), F.silu(x)) and m.beta_value.item() == 0.5
    m.beta = torch.tensor(1.0)
    assert torch.equal(m(x), torch.relu(x))
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="beta"):
            m.beta = bad
    with pytest.raises(ValueError, match="strictly inside"):
        BetaSwish(0.3, learnable=True).beta = 1.0
    learn = BetaAbs(0.3, learnable=True, num_channels=3)
    learn.beta = torch.tensor([0.2, 0.5, 0.9])
    torch.testing.assert_close(learn.beta, torch.tensor([0.2, 0.5, 0.9]))
    with pytest.raises(ValueError, match="shape"):
        learn.beta = torch.tensor([0.2, 0.5])
    # load_state_dict checks the incoming value
    state = BetaSwish(0.4).state_dict()
    state["beta_value"] = torch.tensor(1.2, dtype=F64)
    with pytest.raises(ValueError, match="beta"):
        BetaSwish(0.4).load_state_dict(state)
    # loading, copying and casting keep the exact dispatch: BetaSwish(0.5) is F.silu, bit for bit
    loaded = BetaSwish(0.2)
    loaded.load_state_dict(BetaSwish(0.5).state_dict())
    for mod in (loaded, copy.deepcopy(loaded), copy.deepcopy(loaded).half().float()):
        assert torch.equal(mod(x), F.silu(x))
    # a buffer edited in place is followed (as a tensor, with no host read in forward)
    edited = BetaSwish(0.5)
    edited.beta_value.fill_(0.2)
    torch.testing.assert_close(edited(x), beta_swish(x, 0.2))
    assert "beta=0.2" in repr(edited)
    assert repr(BetaSwish(0.7).to("meta")) == "BetaSwish(beta=0.7)"
