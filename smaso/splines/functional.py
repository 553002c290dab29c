"""The beta-VQ family of "From Hard to Soft" (``docs/theory.md`` §3.6, Table 1: the closed forms, their beta = 0 /
1 limits and the PyTorch conventions they follow) as stable functions: ``beta_swish``, ``beta_leaky_relu``,
``beta_abs``, ``softmax_pool`` and their VQ probabilities (``vq_probability_*``), with eta = beta / (1 - beta).
beta = 1 (hard) and beta = 0 (linear) are computed exactly by dedicated branches, not approached.

Numerics.  A Python ``beta`` in (0, 1) gives a finite float64 eta; a tensor beta of exactly 1 gives the
largest float32.  v = eta u is clamped to the dtype's largest finite value (where sigma and tanh are
already exactly 0 / +-1), so outputs and input gradients are finite for every finite input; float16 and
bfloat16 are computed in float32 and rounded once.  The beta gradient overflows only where it must
(|u| beyond about sqrt(dtype max) with a tiny eta).

Speed.  The sigmoid-gated units (swish, leaky) are one ``torch.autograd.Function`` whose forward is bit for
bit ``u * torch.sigmoid(eta * u)`` and whose backward is PyTorch's fused ``silu_backward(g, eta u)``
(d/du [u sigma(eta u)] = silu'(eta u)); each direction allocates one output-sized tensor, like ``F.silu``
(``benchmarks/bench_activations.py``).  A Python beta of 0, 1/2 or 1 dispatches to PyTorch's own ops.

Transforms.  No computation reads a tensor's values on the host.  A tensor beta's range is checked (and a
0-dim one without gradient dispatched exactly) only for an eager plain CPU tensor; elsewhere it is taken as
given (the modules of :mod:`smaso.splines.modules` check beta when it is set).  When a graph is being built the
backward is written in differentiable ops (double backward works); forward-mode AD is not implemented.
With ``inplace=True`` the input is first copied for the backward when a gradient is needed, as PyTorch's
in-place activations do.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Real
from typing import Any

import torch
import torch.nn.functional as F

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
_is_functorch_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)


# ---------------------------------------------------------------------- tensors that may be read / written eagerly
def _is_plain(t: torch.Tensor) -> bool:
    """An ordinary eager tensor: not a tensor subclass (fake, functional, ...) and not a ``torch.func`` wrapper.

    Callers check ``torch.compiler.is_compiling()`` first (dynamo and export tracing)."""
    return type(t) in _PLAIN_TYPES and not _is_functorch_wrapped(t)


def _host_readable(t: torch.Tensor) -> bool:
    """True when reading ``t``'s values costs no device sync and breaks no trace: an eager plain CPU tensor."""
    return not torch.compiler.is_compiling() and t.device.type == "cpu" and _is_plain(t)


# ---------------------------------------------------------------------- beta and eta
def _check_beta(beta: object) -> None:
    """ValueError unless every value of ``beta`` lies in [0, 1] (NaN rejected).  Reads a tensor's values:
    call it where a host read is allowed (construction, setting beta, CPU eager), never in a forward."""
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


def eta_from_beta(beta: float | torch.Tensor) -> float | torch.Tensor:
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


def _eta_tensor(beta: torch.Tensor) -> torch.Tensor:
    """eta for a tensor beta in [0, 1], unchecked and with no host read: beta / (1 - beta), and the largest
    float32 (not inf: the kernels multiply it by u, and inf * 0 would be NaN) where beta = 1, with a zero
    gradient there.  Same dtype and shape as ``beta``."""
    below = beta < 1
    top = min(_F32_MAX, torch.finfo(beta.dtype).max)
    return torch.where(below, beta / torch.where(below, 1 - beta, torch.ones_like(beta)), top)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in _HALF_TYPES else dtype


def _eta_operand(eta: float | torch.Tensor, dtype: torch.dtype) -> float | torch.Tensor:
    """eta as a float or a tensor of the compute dtype, finite (clamped to the dtype's max)."""
    top = torch.finfo(dtype).max
    if isinstance(eta, torch.Tensor):
        return eta.to(dtype).clamp(max=top)
    return min(float(eta), top)


def _reduce_like(d: torch.Tensor, g: torch.Tensor, eta: torch.Tensor) -> torch.Tensor:
    """sum of g * d over the dimensions that eta was broadcast along, in eta's shape and dtype (overwrites d)."""
    if eta.numel() == 1 and d.is_contiguous() and g.is_contiguous() and d.dtype == g.dtype:
        total = torch.dot(d.reshape(-1), g.reshape(-1))
        return total.reshape(eta.shape).to(eta.dtype)
    return d.mul_(g).sum_to_size(eta.shape).to(eta.dtype)


def _fast_backward(*tensors: torch.Tensor) -> bool:
    """Whether a backward may take the fused in-place path: first order (no graph being built) on ordinary
    eager tensors.  Otherwise it is written in differentiable, functorch-friendly ops (double backward,
    ``torch.func``, tracing)."""
    if torch.is_grad_enabled() or torch.compiler.is_compiling():
        return False
    return all(_is_plain(t) for t in tensors)


# ---------------------------------------------------------------------- sigmoid gate (swish, leaky)
def _gate_coefficient(eta_c: float | torch.Tensor, nu: float, top: float) -> float | torch.Tensor:
    """c = eta (1 - nu), finite, from eta already in the compute dtype (float or tensor)."""
    if nu == 0.0:
        return eta_c
    if isinstance(eta_c, torch.Tensor):
        return (eta_c * (1.0 - nu)).clamp(max=top)
    return min(eta_c * (1.0 - nu), top)


def _sigmoid_gate_forward(uc: torch.Tensor, c: float | torch.Tensor, nu: float, inplace: bool = False) -> torch.Tensor:
    """u [nu + (1 - nu) sigma(c u)] in the dtype of ``uc``, one fresh tensor (the other passes in place; with
    ``inplace`` the last one writes into ``uc``: bit for bit the same values)."""
    y = torch.mul(uc, c)  # v = c u (may overflow to +-inf: sigma is exact there)
    y.sigmoid_()
    if nu != 0.0:
        y.mul_(1.0 - nu).add_(nu)
    return uc.mul_(y) if inplace else y.mul_(uc)


class _SigmoidGate(torch.autograd.Function):
    """y = u [nu + (1 - nu) sigma(c u)], c = eta (1 - nu), for eta in [0, inf) (float or tensor broadcastable to u).

    Backward: :func:`_sigmoid_gate_backward_fused` (first order, plain tensors; one scratch buffer) or
    :func:`_sigmoid_gate_backward_graph` (differentiable ops: double backward, ``torch.func``, tracing).
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(u: torch.Tensor, eta: float | torch.Tensor, nu: float) -> torch.Tensor:
        cdt = _compute_dtype(u.dtype)
        top = torch.finfo(cdt).max
        c = _gate_coefficient(_eta_operand(eta, cdt), nu, top)
        return _sigmoid_gate_forward(u.to(cdt), c, nu).to(u.dtype)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        u, eta, nu = inputs
        eta_grad = isinstance(eta, torch.Tensor) and ctx.needs_input_grad[1]
        eta_t = eta if isinstance(eta, torch.Tensor) else None
        ctx.save_for_backward(u, eta_t, output if eta_grad else None)
        ctx.eta = None if eta_t is not None else float(eta)
        ctx.nu = nu

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        u, eta_t, y = ctx.saved_tensors
        eta = ctx.eta if eta_t is None else eta_t
        want_u, want_eta = ctx.needs_input_grad[0], eta_t is not None and ctx.needs_input_grad[1]
        if _fast_backward(g, u, *(t for t in (eta_t, y) if t is not None)):
            grad_u, grad_eta = _sigmoid_gate_backward_fused(g, u, eta, y, ctx.nu, want_u, want_eta)
        else:
            grad_u, grad_eta = _sigmoid_gate_backward_graph(g, u, eta, ctx.nu, want_u, want_eta)
        return grad_u, grad_eta, None


def _sigmoid_gate_backward_fused(g: torch.Tensor, u: torch.Tensor, eta: torch.Tensor, y: torch.Tensor,
                                 nu: float, want_u: bool, want_eta: bool) -> tuple[torch.Tensor | None,
                                 torch.Tensor | None]:
    """First-order backward of :class:`_SigmoidGate` in place (one fresh output-sized tensor)."""
    cdt = _compute_dtype(u.dtype)
    top = torch.finfo(cdt).max
    uc, gc = u.to(cdt), g.to(cdt)
    c = _gate_coefficient(_eta_operand(eta, cdt), nu, top)
    # |c u| <= |u| when c <= 1: no overflow possible; a tensor c is not read (no host sync): always clamp
    clamp = isinstance(c, torch.Tensor) or c > 1.0
    grad_u = grad_eta = buf = None
    if want_eta:
        # df/deta = (1 - nu)^2 u^2 s (1 - s) = (y - nu u)(u - y); for nu >= 0 both factors are at most |u|
        # (no overflow, no inf * 0); for nu < 0, or when y was rounded to a half type, use
        # s (1 - s) u u (1 - nu)^2, zero first where s is 0 or 1
        if nu >= 0.0 and y.dtype == cdt:
            buf = torch.sub(uc, y)
            buf.mul_(y if nu == 0.0 else y - nu * uc)
        else:
            s = torch.mul(uc, c)
            if clamp:
                s.clamp_(-top, top)
            s.sigmoid_()
            buf = (s * (1 - s)).mul_(uc).mul_(uc).mul_((1.0 - nu) ** 2)
        grad_eta = _reduce_like(buf, gc, eta)
    if want_u:
        if buf is None or buf.shape != uc.shape:
            buf = torch.mul(uc, c)
        else:
            torch.mul(uc, c, out=buf)
        if clamp:
            buf.clamp_(-top, top)  # v finite: silu_backward(g, +-inf) would be NaN
        grad_u = torch.ops.aten.silu_backward.grad_input(gc, buf, grad_input=buf)  # d/du [u sigma(cu)] = silu'(cu)
        if nu != 0.0:
            grad_u.mul_(1.0 - nu).add_(gc, alpha=nu)
        grad_u = grad_u.to(u.dtype)
    return grad_u, grad_eta


def _sigmoid_gate_backward_graph(g: torch.Tensor, u: torch.Tensor, eta: torch.Tensor, nu: float, want_u: bool,
                                 want_eta: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The same gradients in out-of-place differentiable ops (double backward, ``torch.func``, tracing)."""
    cdt = _compute_dtype(u.dtype)
    top = torch.finfo(cdt).max
    uc, gc = u.to(cdt), g.to(cdt)
    c = _gate_coefficient(_eta_operand(eta, cdt), nu, top)
    v = (uc * c).clamp(-top, top)
    s = torch.sigmoid(v)
    grad_u = grad_eta = None
    if want_u:
        du = s * (1 + v * (1 - s))  # silu'(v); v finite and 1 - s = 0 (or s = 0) where |v| is large
        if nu != 0.0:
            du = (1.0 - nu) * du + nu
        grad_u = (gc * du).to(u.dtype)
    if want_eta:
        d = s * (1 - s) * uc * uc * ((1.0 - nu) ** 2)  # s (1 - s) first: 0, not inf * 0, at large |u|
        grad_eta = (gc * d).sum_to_size(eta.shape).to(eta.dtype)
    return grad_u, grad_eta


# ---------------------------------------------------------------------- tanh gate (abs)
class _TanhGate(torch.autograd.Function):
    """y = u tanh(eta u) for eta in [0, inf) (float or tensor broadcastable to u); backward as :class:`_SigmoidGate`'s,
    recomputing v = eta u and tanh(v) from the saved input."""

    generate_vmap_rule = True

    @staticmethod
    def forward(u: torch.Tensor, eta: float | torch.Tensor) -> torch.Tensor:
        cdt = _compute_dtype(u.dtype)
        uc = u.to(cdt)
        e = _eta_operand(eta, cdt)
        y = torch.mul(uc, e)  # v = eta u (may overflow to +-inf: tanh is exactly +-1 there)
        y.tanh_()
        return y.mul_(uc).to(u.dtype)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        u, eta = inputs
        eta_t = eta if isinstance(eta, torch.Tensor) else None
        ctx.save_for_backward(u, eta_t)
        ctx.eta = None if eta_t is not None else float(eta)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        u, eta_t = ctx.saved_tensors
        eta = ctx.eta if eta_t is None else eta_t
        want_u, want_eta = ctx.needs_input_grad[0], eta_t is not None and ctx.needs_input_grad[1]
        cdt = _compute_dtype(u.dtype)
        top = torch.finfo(cdt).max
        uc, gc = u.to(cdt), g.to(cdt)
        e = _eta_operand(eta, cdt)
        grad_u = grad_eta = None
        if _fast_backward(g, u, *(t for t in (eta_t,) if t is not None)):
            v = torch.mul(uc, e)
            if isinstance(e, torch.Tensor) or e > 1.0:
                v.clamp_(-top, top)
            t = torch.tanh(v)
            sech2 = torch.mul(t, t).neg_().add_(1)  # 1 - tanh(v)^2: exactly 0 where |v| is large
            if want_eta:
                grad_eta = _reduce_like(torch.mul(sech2, uc).mul_(uc), gc, eta_t)  # df/deta = u^2 (1 - t^2)
            if want_u:
                grad_u = v.mul_(sech2).add_(t).mul_(gc).to(u.dtype)  # f' = tanh(v) + v (1 - tanh(v)^2)
            return grad_u, grad_eta
        v = (uc * e).clamp(-top, top)
        t = torch.tanh(v)
        sech2 = 1 - t * t
        if want_u:
            grad_u = (gc * (t + v * sech2)).to(u.dtype)
        if want_eta:
            grad_eta = (gc * (sech2 * uc * uc)).sum_to_size(eta_t.shape).to(eta_t.dtype)
        return grad_u, grad_eta


# ---------------------------------------------------------------------- dispatch (eta given)
def _needs_graph(u: torch.Tensor, eta: float | torch.Tensor) -> bool:
    return torch.is_grad_enabled() and (u.requires_grad or (isinstance(eta, torch.Tensor) and eta.requires_grad))


def _write_back(u: torch.Tensor, fn: Callable[..., torch.Tensor], eta: float | torch.Tensor,
                *args: Any) -> torch.Tensor:
    """In-place form of an out-of-place kernel ``fn(u, eta, *args)``: computes from a copy of ``u`` when the
    backward needs the original input (as PyTorch's in-place activations do), then writes into ``u``."""
    src = u.clone() if _needs_graph(u, eta) else u
    return u.copy_(fn(src, eta, *args))


def _swish_eta(u: torch.Tensor, eta: float | torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """u sigma(eta u) for eta = beta / (1 - beta) in [0, inf] given directly (float or tensor)."""
    if not isinstance(eta, torch.Tensor):
        if math.isinf(eta):
            return torch.relu_(u) if inplace else torch.relu(u)
        if eta == 1.0:
            return F.silu(u, inplace=inplace)
    return _leaky_eta(u, eta, 0.0, inplace)  # eta = 0: u / 2 there


def _leaky_eta(u: torch.Tensor, eta: float | torch.Tensor, nu: float, inplace: bool = False) -> torch.Tensor:
    if not isinstance(eta, torch.Tensor):
        if eta == 0.0:
            k = (1.0 + nu) / 2.0
            return u.mul_(k) if inplace else u * k
        if math.isinf(eta):
            return F.leaky_relu(u, nu, inplace=inplace)
    if not inplace:
        return _SigmoidGate.apply(u, eta, nu)
    if _needs_graph(u, eta) or u.dtype in _HALF_TYPES:
        return _write_back(u, _SigmoidGate.apply, eta, nu)
    cdt = _compute_dtype(u.dtype)
    return _sigmoid_gate_forward(u, _gate_coefficient(_eta_operand(eta, cdt), nu, torch.finfo(cdt).max), nu, True)


def _abs_eta(u: torch.Tensor, eta: float | torch.Tensor, inplace: bool = False) -> torch.Tensor:
    if not isinstance(eta, torch.Tensor):
        if eta == 0.0:
            return u.mul_(0.0) if inplace else u * 0.0  # zeros that keep the graph (gradient 0)
        if math.isinf(eta):
            return torch.abs_(u) if inplace else torch.abs(u)
    return _write_back(u, _TanhGate.apply, eta) if inplace else _TanhGate.apply(u, eta)


def _eta_arg(beta: float | torch.Tensor) -> float | torch.Tensor:
    """Validate beta; return eta as a float (a number, or a 0-dim CPU tensor without gradient) or a tensor.

    A tensor beta's values are checked (and a 0-dim one read) only where that costs no device sync and
    breaks no trace (:func:`_host_readable`); elsewhere it is used as given, with no host read."""
    if not isinstance(beta, torch.Tensor) or _host_readable(beta):
        _check_beta(beta)
        if not isinstance(beta, torch.Tensor) or (beta.dim() == 0 and not beta.requires_grad):
            return eta_from_beta(float(beta))
    elif not beta.is_floating_point():
        raise TypeError(f"beta: expected a floating-point tensor, got dtype {beta.dtype}")
    return _eta_tensor(beta)


def _check_nu(nu: object) -> float:
    if not isinstance(nu, Real) or isinstance(nu, bool) or not -1.0 <= float(nu) <= 1.0:
        raise ValueError(f"nu: expected a leaky ReLU slope in [-1, 1], got {nu!r}")
    return float(nu)


# ---------------------------------------------------------------------- public activations
def beta_swish(u: torch.Tensor, beta: float | torch.Tensor = 0.5, inplace: bool = False) -> torch.Tensor:
    """beta-VQ ReLU (Table 1): u sigma(eta u), eta = beta / (1 - beta) -- the swish.  Twin of ``BetaSwish``.

    beta = 1/2 is SiLU (``F.silu`` itself), beta = 1 is ``torch.relu`` and beta = 0 is u / 2, all
    exactly.  ``beta``: a float, or a tensor broadcastable to ``u`` (e.g. per channel); a tensor that
    requires grad receives its gradient.  Any shape; output has ``u``'s shape and dtype.  ``inplace``:
    write the result into ``u`` and return it (like ``F.silu(u, inplace=True)``).
    :raises ValueError: beta outside [0, 1].
    """
    return _swish_eta(u, _eta_arg(beta), inplace)


def beta_leaky_relu(u: torch.Tensor, beta: float | torch.Tensor = 0.5, nu: float = 0.01,
                    inplace: bool = False) -> torch.Tensor:
    """beta-VQ leaky ReLU (Table 1): u [nu + (1 - nu) sigma(eta (1 - nu) u)].  Twin of ``BetaLeakyReLU``.

    beta = 1: ``F.leaky_relu(u, nu)`` = max(u, nu u); beta = 0: (1 + nu) u / 2; beta = 1/2 is the soft
    VQ.  nu in [-1, 1] (nu = -1 is the absolute value, nu = 0 the swish, nu = 1 the identity).
    ``inplace``: write the result into ``u`` and return it.
    :raises ValueError: beta outside [0, 1] or nu outside [-1, 1].
    """
    nu = _check_nu(nu)
    return _leaky_eta(u, _eta_arg(beta), nu, inplace)


def beta_abs(u: torch.Tensor, beta: float | torch.Tensor = 0.5, inplace: bool = False) -> torch.Tensor:
    """beta-VQ absolute value (Table 1): u tanh(eta u); beta = 1: |u|; beta = 0: 0 (exactly).  Twin of ``BetaAbs``.

    ``inplace``: write the result into ``u`` and return it.
    :raises ValueError: beta outside [0, 1].
    """
    return _abs_eta(u, _eta_arg(beta), inplace)


def _pool_weights(x: torch.Tensor, eta: float | torch.Tensor, dim: int) -> torch.Tensor:
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


def softmax_pool(x: torch.Tensor, beta: float | torch.Tensor = 0.5, dim: int = -1,
                 keepdim: bool = False) -> torch.Tensor:
    """beta-VQ max pooling (Table 1): sum_i softmax(eta x)_i x_i over ``dim`` (softmax pooling).

    beta = 1: the max (``amax``), beta = 0: the mean, beta = 1/2: softmax pooling (soft VQ).  ``x``:
    any shape; ``dim`` is reduced (kept with size 1 if ``keepdim``).
    :raises ValueError: beta outside [0, 1].
    """
    return _softmax_pool_eta(x, _eta_arg(beta), dim, keepdim)


def _softmax_pool_eta(x: torch.Tensor, eta: float | torch.Tensor, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    """softmax pooling with eta given (float, exact at 0 and inf, or a tensor broadcastable to ``x``)."""
    if not isinstance(eta, torch.Tensor) and math.isinf(eta):
        return x.amax(dim, keepdim=keepdim)
    p = _pool_weights(x, eta, dim)
    return (p * x.to(p.dtype)).sum(dim, keepdim=keepdim).to(x.dtype)


def softmax_pool1d(x: torch.Tensor, kernel_size: int, stride: int | None = None,
                   beta: float | torch.Tensor = 0.5) -> torch.Tensor:
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
    return softmax_pool(_pool1d_windows(x, kernel_size, stride, "x"), beta, dim=-1)


def _pool1d_windows(x: torch.Tensor, kernel_size: int, stride: int, name: str) -> torch.Tensor:
    """``x`` ``(N, C, L)`` or ``(C, L)`` unfolded into windows ``(..., L_out, kernel_size)``, shape checked."""
    if x.dim() not in (2, 3):
        raise ValueError(f"{name}: expected shape (N, C, L) or (C, L), got {tuple(x.shape)}")
    if x.shape[-1] < kernel_size:
        raise ValueError(f"kernel_size: {kernel_size} is longer than the input length {x.shape[-1]}")
    return x.unfold(-1, kernel_size, stride)


# ---------------------------------------------------------------------- VQ probability layers
def _gate_probability(u: torch.Tensor, beta: float | torch.Tensor, gate: Callable[[torch.Tensor], torch.Tensor],
                      hard: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """gate(eta u) in the compute dtype; ``hard(u)`` at beta = 1 and ``gate(u)`` itself at beta = 1/2."""
    eta = _eta_arg(beta)
    if not isinstance(eta, torch.Tensor):
        if math.isinf(eta):
            return hard(u)
        if eta == 1.0:
            return gate(u)
    cdt = _compute_dtype(u.dtype)
    v = u.to(cdt) * _eta_operand(eta, cdt)
    return gate(v).to(u.dtype)


def vq_probability_relu(u: torch.Tensor, beta: float | torch.Tensor = 0.5) -> torch.Tensor:
    """Region probability of the ReLU MASO's active piece, t2 = sigma(eta u) (Table 1: the sigmoid).

    beta = 1/2 is ``torch.sigmoid``; beta = 1 the hard VQ indicator (1/2 at the tie u = 0); beta = 0: 1/2.
    """
    return _gate_probability(u, beta, torch.sigmoid, lambda v: (torch.sign(v) + 1) / 2)  # hard: zero gradient


def vq_probability_leaky_relu(u: torch.Tensor, beta: float | torch.Tensor = 0.5, nu: float = 0.01) -> torch.Tensor:
    """Region probability of the leaky ReLU's slope-1 piece, sigma(eta (1 - nu) u)."""
    nu = _check_nu(nu)
    eta = _eta_arg(beta)
    if not isinstance(eta, torch.Tensor) and math.isinf(eta):
        if nu == 1.0:
            return torch.full_like(u, 0.5)
        return vq_probability_relu(u, 1.0)
    return vq_probability_relu(u * (1.0 - nu) if nu != 0.0 else u, beta)


def vq_probability_abs(u: torch.Tensor, beta: float | torch.Tensor = 0.5) -> torch.Tensor:
    """t2 - t1 of the absolute value's two pieces, tanh(eta u) (Table 1: tanh); beta = 1: sign(u); beta = 0: 0."""
    return _gate_probability(u, beta, torch.tanh, torch.sign)


def vq_probability_pool(x: torch.Tensor, beta: float | torch.Tensor = 0.5, dim: int = -1) -> torch.Tensor:
    """Region probabilities of max pooling over ``dim``: softmax(eta x) (Table 1: the softmax).

    beta = 1/2 is ``torch.softmax(x, dim)``; beta = 1 the one-hot argmax (ties shared equally); beta = 0
    uniform.  Same shape as ``x``.
    """
    eta = _eta_arg(beta)
    if not isinstance(eta, torch.Tensor) and eta == 1.0:
        return torch.softmax(x, dim)
    return _pool_weights(x, eta, dim).to(x.dtype)
