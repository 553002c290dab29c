"""The beta-VQ family of "From Hard to Soft" (``docs/theory.md`` §3, Table 1) as stable functions.

A unit u = <W_k, x> + b_k of a MASO layer picks one of R affine pieces (Eq 1-2, hard VQ).  beta-VQ
inference (Eq 7-9) replaces the argmax by the region probabilities t = softmax(eta (<A,x> + B)),
eta = beta / (1 - beta), and outputs z = sum_r t_r (<A_r,x> + B_r).  For the layers of Table 1:

==============  ===============================================  ========================
unit            beta-VQ output                                   VQ probability
==============  ===============================================  ========================
ReLU            u sigma(eta u)  (swish; SiLU at beta = 1/2)     sigma(eta u)
leaky ReLU nu   u [nu + (1 - nu) sigma(eta (1 - nu) u)]          sigma(eta (1 - nu) u)
abs value       u tanh(eta u)                                    tanh(eta u) = t2 - t1
max pool        sum_i softmax(eta x)_i x_i  (softmax pooling)   softmax(eta x)
==============  ===============================================  ========================

beta = 1 is the hard MASO (ReLU, leaky ReLU, |u|, max) and beta = 0 the linear limit (u / 2,
(1 + nu) u / 2, 0, the average); both are computed exactly (dedicated branches), not approached.

Numerics.  eta is never formed by dividing by zero: a Python ``beta`` in (0, 1) gives a finite
eta in float64, clamped to the largest value of the compute dtype, and beta = 0 / 1 take the exact
branches (a tensor beta of exactly 1 gives eta = the largest float32, hard to rounding).  Inside,
v = eta u may overflow; it is clamped to the dtype's largest finite value, where sigma and tanh
are already exactly 0 / +-1, so outputs and input gradients are finite for every finite input, in
float16, bfloat16, float32 and float64.  float16 and bfloat16 inputs are computed in float32 and
rounded once at the end.  The gradient with respect to beta (learnable beta) is finite too except
where it genuinely overflows (|u| beyond about sqrt(dtype max) with a tiny eta).  The VQ
probabilities' own slope at u = 0 is eta / 4 (eta for tanh), which is unbounded as beta -> 1.

Speed.  Elementwise activations are memory-bound on CPU.  The sigmoid-gated units (swish, leaky)
run as one ``torch.autograd.Function``: forward v = eta u, s = sigma(v), y = s u (the exact value
``u * torch.sigmoid(eta * u)``, bit for bit); backward is PyTorch's fused ``silu_backward(g, v)``,
since d/du [u sigma(eta u)] = silu'(eta u) (the identity u sigma(eta u) = silu(eta u) / eta).  Each
direction allocates one output-sized tensor, as ``F.silu`` does; the other passes run in place.  The
gradient with respect to eta, when wanted, is sum g (y - nu u)(u - y) = sum g (1-nu)^2 u^2 s (1-s),
with no division.  ``benchmarks/bench_activations.py`` measures this against ``F.silu``.  These
functions are differentiable once (a double backward through them raises); beta = 0 / 1 and beta = 1/2
(``F.silu``) dispatch to PyTorch's own ops.
"""

from __future__ import annotations

import math
from numbers import Real

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

__all__ = [
    "beta_abs",
    "beta_leaky_relu",
    "beta_swish",
    "eta_from_beta",
    "softmax_pool",
    "softmax_pool1d",
    "vq_probability_abs",
    "vq_probability_leaky_relu",
    "vq_probability_pool",
    "vq_probability_relu",
]

_F32_MAX = torch.finfo(torch.float32).max
_HALF_TYPES = (torch.float16, torch.bfloat16)


# ---------------------------------------------------------------------- beta and eta
def _check_beta(beta) -> None:
    """ValueError unless every value of ``beta`` lies in [0, 1] (NaN rejected)."""
    if isinstance(beta, torch.Tensor):
        if not beta.is_floating_point():
            raise TypeError(f"beta: expected a floating-point tensor, got dtype {beta.dtype}")
        ok = bool(((beta >= 0) & (beta <= 1)).all())
        if not ok:
            bad = beta.detach()[~((beta >= 0) & (beta <= 1))].flatten()[0].item()
            raise ValueError(f"beta: expected values in [0, 1], got {bad}")
        return
    if not isinstance(beta, Real) or isinstance(beta, bool):
        raise TypeError(f"beta: expected a float or a tensor, got {type(beta).__name__}")
    if not 0.0 <= float(beta) <= 1.0:  # NaN fails both comparisons
        raise ValueError(f"beta: expected a value in [0, 1], got {beta}")


def eta_from_beta(beta):
    """eta = beta / (1 - beta) (Eq 9): 0 at beta = 0, 1 at beta = 1/2, ``inf`` at beta = 1 (hard VQ).

    :param beta: a number in [0, 1] (returns a float) or a floating tensor of them, any shape (returns a
        tensor of that shape and dtype, ``inf`` where beta = 1, with a zero, not NaN, gradient there).
    :raises ValueError: a value outside [0, 1] or NaN.  :raises TypeError: neither a number nor a floating tensor.
    """
    _check_beta(beta)
    if not isinstance(beta, torch.Tensor):
        beta = float(beta)
        return math.inf if beta == 1.0 else beta / (1.0 - beta)
    below = beta < 1
    return torch.where(below, beta / torch.where(below, 1 - beta, torch.ones_like(beta)), math.inf)


def _finite_eta(beta: torch.Tensor) -> torch.Tensor:
    """eta for a tensor beta, clamped to the largest float32 where beta = 1 (the kernels multiply it by u,
    and inf * 0 would be NaN); the gradient there is zero."""
    top = min(_F32_MAX, torch.finfo(beta.dtype).max)
    return eta_from_beta(beta).clamp(max=top)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in _HALF_TYPES else dtype


def _scalar_beta(beta) -> float | None:
    """A Python float for a number or a 0-dim tensor that needs no gradient; else None."""
    if isinstance(beta, torch.Tensor):
        if beta.dim() == 0 and not beta.requires_grad:
            return float(beta)
        return None
    return float(beta)


def _eta_operand(eta, dtype: torch.dtype):
    """eta as a float or a tensor of the compute dtype, finite (clamped to the dtype's max)."""
    top = torch.finfo(dtype).max
    if isinstance(eta, torch.Tensor):
        return eta.to(dtype).clamp(max=top)
    return min(float(eta), top)


def _eta_max(eta) -> float:
    return float(eta.detach().max()) if isinstance(eta, torch.Tensor) else float(eta)


# ---------------------------------------------------------------------- sigmoid gate (swish, leaky)
class _SigmoidGate(torch.autograd.Function):
    """y = u [nu + (1 - nu) sigma(c u)], c = eta (1 - nu), for eta in [0, inf) (float or tensor broadcastable to u).

    Memory traffic decides the speed on CPU (a fresh 40 MB output costs about as much as a sigmoid;
    an in-place pass far less), so each direction allocates one tensor, like ``F.silu``: forward
    y = sigma(c u) u built in place; backward recomputes v = c u into one scratch buffer and writes
    ``silu_backward(g, v)`` into it (the eta gradient, when wanted, uses the same buffer first).
    """

    @staticmethod
    def forward(ctx, u: torch.Tensor, eta, nu: float):
        out_dtype = u.dtype
        cdt = _compute_dtype(u.dtype)
        uc = u.to(cdt)
        top = torch.finfo(cdt).max
        eta_c = _eta_operand(eta, cdt)
        if nu == 0.0:
            c = eta_c
        elif isinstance(eta_c, torch.Tensor):
            c = (eta_c * (1.0 - nu)).clamp(max=top)
        else:
            c = min(eta_c * (1.0 - nu), top)
        y = torch.mul(uc, c)  # v = c u (may overflow to +-inf: sigma is exact there)
        y.sigmoid_()
        if nu != 0.0:
            y.mul_(1.0 - nu).add_(nu)
        y.mul_(uc)
        eta_needs_grad = isinstance(eta, torch.Tensor) and ctx.needs_input_grad[1]
        c_tensor = c if isinstance(c, torch.Tensor) else None
        ctx.save_for_backward(uc, y if eta_needs_grad else None, c_tensor, eta if eta_needs_grad else None)
        ctx.c = None if c_tensor is not None else c
        ctx.clamp = (1.0 - nu) * _eta_max(eta) > 1.0  # |c u| <= |u| otherwise: no overflow possible
        ctx.nu, ctx.out_dtype = nu, out_dtype
        return y.to(out_dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, g: torch.Tensor):
        uc, y, c_tensor, eta = ctx.saved_tensors
        c = ctx.c if c_tensor is None else c_tensor
        nu = ctx.nu
        gc = g.to(uc.dtype)
        grad_u = grad_eta = buf = None
        if eta is not None:
            # df/deta = (1 - nu)^2 u^2 s (1 - s) = (y - nu u)(u - y); for nu >= 0 both factors are at most |u|
            # (no overflow, no inf * 0); for nu < 0 use s (1 - s) u u (1 - nu)^2, zero first where s is 0 or 1
            if nu == 0.0:
                buf = torch.sub(uc, y)
                buf.mul_(y)
            elif nu > 0.0:
                buf = torch.sub(uc, y)
                buf.mul_(y - nu * uc)
            else:
                s = torch.sigmoid(uc * c)
                buf = (s * (1 - s)).mul_(uc).mul_(uc).mul_((1.0 - nu) ** 2)
            grad_eta = _reduce_like(buf, gc, eta)
        if ctx.needs_input_grad[0]:
            if buf is None or buf.shape != uc.shape:
                buf = torch.mul(uc, c)
            else:
                torch.mul(uc, c, out=buf)
            if ctx.clamp:
                top = torch.finfo(buf.dtype).max
                buf.clamp_(-top, top)  # v finite: silu_backward(g, +-inf) would be NaN
            grad_u = torch.ops.aten.silu_backward.grad_input(gc, buf, grad_input=buf)  # d/du [u sigma(cu)] = silu'(cu)
            if nu != 0.0:
                grad_u.mul_(1.0 - nu).add_(gc, alpha=nu)
            grad_u = grad_u.to(ctx.out_dtype)
        return grad_u, grad_eta, None


class _TanhGate(torch.autograd.Function):
    """y = u tanh(eta u) for eta in [0, inf) (float or tensor broadcastable to u)."""

    @staticmethod
    def forward(ctx, u: torch.Tensor, eta):
        out_dtype = u.dtype
        cdt = _compute_dtype(u.dtype)
        uc = u.to(cdt)
        v = uc * _eta_operand(eta, cdt)
        if _eta_max(eta) > 1.0:
            top = torch.finfo(cdt).max
            v.clamp_(-top, top)
        t = torch.tanh(v)
        y = t * uc
        eta_needs_grad = isinstance(eta, torch.Tensor) and ctx.needs_input_grad[1]
        ctx.save_for_backward(uc, v, t, eta if eta_needs_grad else None)
        ctx.out_dtype = out_dtype
        return y.to(out_dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, g: torch.Tensor):
        uc, v, t, eta = ctx.saved_tensors
        gc = g.to(uc.dtype)
        grad_u = grad_eta = None
        if ctx.needs_input_grad[0]:
            # f' = tanh(v) + v (1 - tanh(v)^2); v stays finite, and 1 - t^2 = 0 where |v| is large
            grad_u = (t + v * (1 - t * t)).mul_(gc).to(ctx.out_dtype)
        if eta is not None:
            grad_eta = _reduce_like((1 - t * t).mul_(uc).mul_(uc), gc, eta)  # df/deta = u^2 (1 - t^2)
        return grad_u, grad_eta, None


def _reduce_like(d: torch.Tensor, g: torch.Tensor, eta: torch.Tensor) -> torch.Tensor:
    """sum of g * d over the dimensions that eta was broadcast along, in eta's shape and dtype (overwrites d)."""
    if eta.numel() == 1 and d.is_contiguous() and g.is_contiguous() and d.dtype == g.dtype:
        total = torch.dot(d.reshape(-1), g.reshape(-1))
        return total.reshape(eta.shape).to(eta.dtype)
    return d.mul_(g).sum_to_size(eta.shape).to(eta.dtype)


def _swish_eta(u: torch.Tensor, eta) -> torch.Tensor:
    """u sigma(eta u) for eta = beta / (1 - beta) in [0, inf] given directly (float or tensor)."""
    if not isinstance(eta, torch.Tensor):
        if eta == 0.0:
            return u * 0.5
        if math.isinf(eta):
            return torch.relu(u)
        if eta == 1.0:
            return F.silu(u)
    return _SigmoidGate.apply(u, eta, 0.0)


def _leaky_eta(u: torch.Tensor, eta, nu: float) -> torch.Tensor:
    if not isinstance(eta, torch.Tensor):
        if eta == 0.0:
            return u * ((1.0 + nu) / 2.0)
        if math.isinf(eta):
            return F.leaky_relu(u, nu)
    return _SigmoidGate.apply(u, eta, nu)


def _abs_eta(u: torch.Tensor, eta) -> torch.Tensor:
    if not isinstance(eta, torch.Tensor):
        if eta == 0.0:
            return u * 0.0  # zeros that keep the graph (gradient 0)
        if math.isinf(eta):
            return torch.abs(u)
    return _TanhGate.apply(u, eta)


def _eta_arg(beta):
    """Validate beta; return eta as a float (fixed beta) or a tensor (beta needing a gradient / per entry)."""
    _check_beta(beta)
    fixed = _scalar_beta(beta)
    return eta_from_beta(fixed) if fixed is not None else _finite_eta(beta)


def _check_nu(nu) -> float:
    if not isinstance(nu, Real) or isinstance(nu, bool) or not -1.0 <= float(nu) <= 1.0:
        raise ValueError(f"nu: expected a leaky ReLU slope in [-1, 1], got {nu!r}")
    return float(nu)


# ---------------------------------------------------------------------- public activations
def beta_swish(u: torch.Tensor, beta=0.5) -> torch.Tensor:
    """beta-VQ ReLU (Table 1): u sigma(eta u), eta = beta / (1 - beta) -- the swish.

    beta = 1/2 is SiLU (``F.silu`` itself), beta = 1 is ``torch.relu`` and beta = 0 is u / 2, all
    exactly.  ``beta``: a float, or a tensor broadcastable to ``u`` (e.g. per channel); a tensor that
    requires grad receives its gradient.  Any shape; output has ``u``'s shape and dtype.
    :raises ValueError: beta outside [0, 1].
    """
    return _swish_eta(u, _eta_arg(beta))


def beta_leaky_relu(u: torch.Tensor, beta=0.5, nu: float = 0.01) -> torch.Tensor:
    """beta-VQ leaky ReLU (Table 1): u [nu + (1 - nu) sigma(eta (1 - nu) u)].

    beta = 1: ``F.leaky_relu(u, nu)`` = max(u, nu u); beta = 0: (1 + nu) u / 2; beta = 1/2 is the soft
    VQ.  nu in [-1, 1] (nu = -1 is the absolute value, nu = 0 the swish, nu = 1 the identity).
    :raises ValueError: beta outside [0, 1] or nu outside [-1, 1].
    """
    nu = _check_nu(nu)
    return _leaky_eta(u, _eta_arg(beta), nu)


def beta_abs(u: torch.Tensor, beta=0.5) -> torch.Tensor:
    """beta-VQ absolute value (Table 1): u tanh(eta u); beta = 1: |u|; beta = 0: 0 (exactly).

    :raises ValueError: beta outside [0, 1].
    """
    return _abs_eta(u, _eta_arg(beta))


def _pool_weights(x: torch.Tensor, eta, dim: int) -> torch.Tensor:
    """softmax(eta x) along ``dim`` in the compute dtype (hard: uniform over the tied maxima)."""
    cdt = _compute_dtype(x.dtype)
    xc = x.to(cdt)
    if not isinstance(eta, torch.Tensor) and math.isinf(eta):
        hit = (xc == xc.amax(dim, keepdim=True)).to(cdt)
        return hit / hit.sum(dim, keepdim=True)
    if not isinstance(eta, torch.Tensor) and eta == 0.0:
        return torch.full_like(xc, 1.0 / x.shape[dim])
    v = xc * _eta_operand(eta, cdt)
    top = torch.finfo(cdt).max
    return torch.softmax(v.clamp(-top, top), dim)


def softmax_pool(x: torch.Tensor, beta=0.5, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    """beta-VQ max pooling (Table 1): sum_i softmax(eta x)_i x_i over ``dim`` (softmax pooling).

    beta = 1: the max (``amax``), beta = 0: the mean, beta = 1/2: softmax pooling (soft VQ).  ``x``:
    any shape; ``dim`` is reduced (kept with size 1 if ``keepdim``).
    :raises ValueError: beta outside [0, 1].
    """
    eta = _eta_arg(beta)
    if not isinstance(eta, torch.Tensor) and math.isinf(eta):
        return x.amax(dim, keepdim=keepdim)
    p = _pool_weights(x, eta, dim)
    return (p * x.to(p.dtype)).sum(dim, keepdim=keepdim).to(x.dtype)


def softmax_pool1d(x: torch.Tensor, kernel_size: int, stride: int | None = None, beta=0.5) -> torch.Tensor:
    """Softmax pooling over 1-D windows of the last dimension, like ``F.max_pool1d`` (no padding).

    ``x``: ``(N, C, L)`` or ``(C, L)``; output ``(..., L_out)``, L_out = (L - kernel_size) // stride + 1.
    beta = 1 equals ``F.max_pool1d(x, kernel_size, stride)``, beta = 0 ``F.avg_pool1d``.
    :raises ValueError: bad kernel_size / stride, or a window longer than the input.
    """
    stride = kernel_size if stride is None else stride
    if not isinstance(kernel_size, int) or kernel_size < 1:
        raise ValueError(f"kernel_size: expected a positive int, got {kernel_size!r}")
    if not isinstance(stride, int) or stride < 1:
        raise ValueError(f"stride: expected a positive int, got {stride!r}")
    if x.dim() not in (2, 3):
        raise ValueError(f"x: expected shape (N, C, L) or (C, L), got {tuple(x.shape)}")
    if x.shape[-1] < kernel_size:
        raise ValueError(f"kernel_size: {kernel_size} is longer than the input length {x.shape[-1]}")
    return softmax_pool(x.unfold(-1, kernel_size, stride), beta, dim=-1)


# ---------------------------------------------------------------------- VQ probability layers
def vq_probability_relu(u: torch.Tensor, beta=0.5) -> torch.Tensor:
    """Region probability of the ReLU MASO's active piece, t2 = sigma(eta u) (Table 1: the sigmoid).

    beta = 1/2 is ``torch.sigmoid``; beta = 1 the hard VQ indicator (1/2 at the tie u = 0); beta = 0: 1/2.
    """
    eta = _eta_arg(beta)
    if not isinstance(eta, torch.Tensor):
        if math.isinf(eta):
            return (torch.sign(u) + 1) / 2  # 1, 1/2 at the tie, 0; zero gradient
        if eta == 1.0:
            return torch.sigmoid(u)
    cdt = _compute_dtype(u.dtype)
    v = u.to(cdt) * _eta_operand(eta, cdt)
    return torch.sigmoid(v).to(u.dtype)


def vq_probability_leaky_relu(u: torch.Tensor, beta=0.5, nu: float = 0.01) -> torch.Tensor:
    """Region probability of the leaky ReLU's slope-1 piece, sigma(eta (1 - nu) u)."""
    nu = _check_nu(nu)
    eta = _eta_arg(beta)
    if not isinstance(eta, torch.Tensor) and math.isinf(eta):
        if nu == 1.0:
            return torch.full_like(u, 0.5)
        return vq_probability_relu(u, 1.0)
    return vq_probability_relu(u * (1.0 - nu) if nu != 0.0 else u, beta)


def vq_probability_abs(u: torch.Tensor, beta=0.5) -> torch.Tensor:
    """t2 - t1 of the absolute value's two pieces, tanh(eta u) (Table 1: tanh); beta = 1: sign(u); beta = 0: 0."""
    eta = _eta_arg(beta)
    if not isinstance(eta, torch.Tensor):
        if math.isinf(eta):
            return torch.sign(u)
        if eta == 1.0:
            return torch.tanh(u)
    cdt = _compute_dtype(u.dtype)
    v = u.to(cdt) * _eta_operand(eta, cdt)
    return torch.tanh(v).to(u.dtype)


def vq_probability_pool(x: torch.Tensor, beta=0.5, dim: int = -1) -> torch.Tensor:
    """Region probabilities of max pooling over ``dim``: softmax(eta x) (Table 1: the softmax).

    beta = 1/2 is ``torch.softmax(x, dim)``; beta = 1 the one-hot argmax (ties shared equally); beta = 0
    uniform.  Same shape as ``x``.
    """
    eta = _eta_arg(beta)
    if not isinstance(eta, torch.Tensor) and eta == 1.0:
        return torch.softmax(x, dim)
    return _pool_weights(x, eta, dim).to(x.dtype)
