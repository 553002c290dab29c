"""The beta-VQ activations of Table 1 (``docs/theory.md`` §3) as ``nn.Module`` s, shaped like ``nn.SiLU``.

Each module is the functional of :mod:`smaso.splines.functional` with its beta held by the module:

- fixed beta (``learnable=False``, the default): a float64 buffer ``beta_value`` (shape ``()``, or ``(C,)``
  with ``num_channels=C``), any value in [0, 1]; beta = 0 / 1 are the exact linear / hard limits and
  ``BetaSwish(0.5)`` *is* ``F.silu``.  A fixed beta is a constant of the layer, not a weight: casting the
  module (``.half()``, ``.to(torch.float32)``) moves it to the new device but keeps its exact float64
  value, so a cast never changes which activation the module computes (the computation itself runs in
  the input's dtype, float32 for float16 / bfloat16 inputs).
- learnable beta (``learnable=True``): a parameter ``theta`` = logit(beta) = log(eta) (shape ``()`` per
  layer or ``(C,)`` per channel), so beta = sigmoid(theta) lies in (0, 1) for every theta and
  eta = beta / (1 - beta) = exp(theta) needs no division.  This plain logit parameter is used rather than
  ``torch.nn.utils.parametrize`` because the kernels want eta, not beta, and exp(theta) is its exact,
  cheapest form; ``module.beta`` reads beta back.  The initial beta must lie strictly inside (0, 1).
  Like every ``nn.Module`` parameter, ``theta`` is made with the ``dtype`` / ``device`` factory arguments
  (default: ``torch.get_default_dtype()``) and follows the module when it is cast.

Per-channel beta broadcasts along dim 1 of an ``(N, C, *)`` input, like ``nn.BatchNorm``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from smaso.splines.functional import (
    _F32_MAX,
    _abs_eta,
    _check_beta,
    _check_nu,
    _finite_eta,
    _leaky_eta,
    _swish_eta,
    eta_from_beta,
    softmax_pool,
    vq_probability_abs,
    vq_probability_pool,
    vq_probability_relu,
)

__all__ = ["BetaAbs", "BetaLeakyReLU", "BetaSwish", "SoftmaxPool1d", "VQSigmoid", "VQSoftmax", "VQTanh"]


class _BetaModule(nn.Module):
    """Holds beta: a buffer (fixed) or a logit parameter ``theta`` (learnable), per layer or per channel."""

    def __init__(self, beta: float = 0.5, learnable: bool = False, num_channels: int | None = None, *,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        _check_beta(beta)
        beta = float(beta)
        if num_channels is not None and (not isinstance(num_channels, int) or isinstance(num_channels, bool)
                                         or num_channels < 1):
            raise ValueError(f"num_channels: expected a positive int or None, got {num_channels!r}")
        self.learnable = bool(learnable)
        self.num_channels = num_channels
        shape = () if num_channels is None else (num_channels,)
        if self.learnable:
            if not 0.0 < beta < 1.0:
                raise ValueError(f"beta: a learnable beta starts strictly inside (0, 1), got {beta}")
            if dtype is not None and not dtype.is_floating_point:
                raise TypeError(f"dtype: a learnable beta needs a floating dtype, got {dtype}")
            theta = math.log(beta) - math.log1p(-beta)  # logit(beta) = log(eta), in float64
            self.theta = nn.Parameter(torch.full(shape, theta, device=device, dtype=dtype))
        else:
            self.register_buffer("beta_value", torch.full(shape, beta, dtype=torch.float64, device=device))

    def _apply(self, fn, recurse: bool = True):
        fixed = self._buffers.get("beta_value")
        super()._apply(fn, recurse)
        moved = self._buffers.get("beta_value")
        if fixed is not None and moved is not None and moved.dtype != fixed.dtype:
            # a cast moves the layer's weights, not the temperature it was built with
            self._buffers["beta_value"] = fixed.to(device=moved.device)
        return self

    @property
    def beta(self) -> torch.Tensor:
        """beta in [0, 1] (in (0, 1) when learnable), shape ``()`` or ``(C,)``."""
        return torch.sigmoid(self.theta) if self.learnable else self.beta_value

    def _eta(self, u: torch.Tensor):
        """eta for input ``u``: a float (fixed, per layer) or a tensor broadcastable to ``u``."""
        if self.learnable:
            eta = torch.exp(self.theta).clamp(max=_F32_MAX)
        elif self.num_channels is None:
            return eta_from_beta(float(self.beta_value))
        else:
            eta = _finite_eta(self.beta_value)
        if self.num_channels is None:
            return eta
        if u.dim() < 2 or u.shape[1] != self.num_channels:
            raise ValueError(f"input: expected shape (N, {self.num_channels}, *) for a per-channel beta, "
                             f"got {tuple(u.shape)}")
        return eta.reshape(self.num_channels, *([1] * (u.dim() - 2)))

    def extra_repr(self) -> str:
        parts = []
        if self.num_channels is None:
            parts.append(f"beta={float(self.beta):.4g}")
        else:
            parts.append(f"num_channels={self.num_channels}")
        if self.learnable:
            parts.append("learnable=True")
        return ", ".join(parts)


class BetaSwish(_BetaModule):
    r"""beta-VQ ReLU (Table 1): u sigma(eta u), eta = beta / (1 - beta) -- the swish.

    ``BetaSwish(0.5)`` is ``nn.SiLU``; ``BetaSwish(1.0)`` is ``nn.ReLU``; ``BetaSwish(0.0)`` is u / 2.

    Shape: input ``(*)`` (``(N, C, *)`` with ``num_channels``), output the same.

    Examples::

        >>> m = BetaSwish(0.7, learnable=True)
        >>> y = m(torch.randn(4, 3))
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return _swish_eta(input, self._eta(input))


class BetaLeakyReLU(_BetaModule):
    """beta-VQ leaky ReLU (Table 1): u [nu + (1 - nu) sigma(eta (1 - nu) u)]; beta = 1 is ``nn.LeakyReLU(nu)``.

    :param nu: negative slope in [-1, 1].
    """

    def __init__(self, beta: float = 0.5, nu: float = 0.01, learnable: bool = False,
                 num_channels: int | None = None, *, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__(beta, learnable, num_channels, device=device, dtype=dtype)
        self.nu = _check_nu(nu)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return _leaky_eta(input, self._eta(input), self.nu)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, nu={self.nu:g}"


class BetaAbs(_BetaModule):
    """beta-VQ absolute value (Table 1): u tanh(eta u); beta = 1 is |u|, beta = 0 is 0."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return _abs_eta(input, self._eta(input))


class SoftmaxPool1d(_BetaModule):
    """beta-VQ max pooling over 1-D windows of the last dimension (Table 1: softmax pooling).

    Each window of ``kernel_size`` entries (step ``stride``, default ``kernel_size``, no padding) gives
    sum_i softmax(eta x)_i x_i.  beta = 1 is ``nn.MaxPool1d(kernel_size, stride)``, beta = 0
    ``nn.AvgPool1d(kernel_size, stride)``.

    Shape: input ``(N, C, L)`` or ``(C, L)``; output ``(..., L_out)``, L_out = (L - kernel_size) // stride + 1.
    """

    def __init__(self, kernel_size: int, stride: int | None = None, beta: float = 0.5, learnable: bool = False,
                 num_channels: int | None = None, *, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__(beta, learnable, num_channels, device=device, dtype=dtype)
        stride = kernel_size if stride is None else stride
        for name, value in (("kernel_size", kernel_size), ("stride", stride)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: expected a positive int, got {value!r}")
        self.kernel_size, self.stride = kernel_size, stride

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if input.dim() not in (2, 3):
            raise ValueError(f"input: expected shape (N, C, L) or (C, L), got {tuple(input.shape)}")
        if input.shape[-1] < self.kernel_size:
            raise ValueError(f"kernel_size: {self.kernel_size} is longer than the input length {input.shape[-1]}")
        windows = input.unfold(-1, self.kernel_size, self.stride)
        if not self.learnable and self.num_channels is None:
            return softmax_pool(windows, self.beta_value, dim=-1)
        eta = self._eta(windows)
        w = windows.float() if windows.dtype in (torch.float16, torch.bfloat16) else windows
        top = torch.finfo(w.dtype).max
        p = torch.softmax((w * eta.to(w.dtype)).clamp(-top, top), dim=-1)
        return (p * w).sum(-1).to(input.dtype)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, {super().extra_repr()}"


class _FixedBeta(nn.Module):
    def __init__(self, beta: float = 0.5) -> None:
        super().__init__()
        _check_beta(beta)
        self.beta = float(beta)

    def extra_repr(self) -> str:
        return f"beta={self.beta:g}"


class VQSigmoid(_FixedBeta):
    """VQ-probability layer of the ReLU MASO: outputs t2 = sigma(eta u), the probability of the active piece.

    beta = 1/2 is ``nn.Sigmoid`` (the soft-VQ posterior); beta = 1 the hard indicator [u > 0] (1/2 at 0).
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return vq_probability_relu(input, self.beta)


class VQTanh(_FixedBeta):
    """VQ-probability layer of the absolute-value MASO: t2 - t1 = tanh(eta u); beta = 1/2 is ``nn.Tanh``."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return vq_probability_abs(input, self.beta)


class VQSoftmax(_FixedBeta):
    """VQ-probability layer of max pooling over ``dim``: softmax(eta x); beta = 1/2 is ``nn.Softmax(dim)``."""

    def __init__(self, beta: float = 0.5, dim: int = -1) -> None:
        super().__init__(beta)
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise ValueError(f"dim: expected an int, got {dim!r}")
        self.dim = dim

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return vq_probability_pool(input, self.beta, self.dim)

    def extra_repr(self) -> str:
        return f"beta={self.beta:g}, dim={self.dim}"
