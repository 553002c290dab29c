"""The beta-VQ activations of Table 1 (``docs/theory.md`` §3.6) as ``nn.Module`` s, shaped like ``nn.SiLU``: each is
the functional of :mod:`smaso.splines.functional` with its beta held by the module.

- fixed beta (``learnable=False``, the default): a float64 buffer ``beta_value`` (shape ``()``, or ``(C,)``
  with ``num_channels=C``), any value in [0, 1].  A cast (``.half()``) moves it but keeps its float64 value,
  so a cast never changes the activation (computed in the input's dtype, float32 for half inputs).
- learnable beta (``learnable=True``): a parameter ``theta`` = logit(beta) = log(eta) (shape ``()`` or
  ``(C,)``, with the ``dtype`` / ``device`` factory arguments); ``module.beta`` reads beta back.  The initial
  beta must lie strictly inside (0, 1).

No host sync in forward: beta is checked where it is set (construction, ``module.beta = value``,
``load_state_dict``).  A per-layer fixed beta is also kept as a Python float, tied to its buffer's version
counter, to dispatch the exact branches (0, 1/2, 1); a buffer edited in place or swapped (e.g. by
``torch.func.functional_call``) is used as a tensor instead.  Per-channel beta broadcasts along dim 1 of an
``(N, C, *)`` input, like ``nn.BatchNorm``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from smaso.splines.functional import (
    _F32_MAX,
    _abs_eta,
    _check_beta,
    _check_nu,
    _compute_dtype,
    _eta_tensor,
    _leaky_eta,
    _pool1d_windows,
    _softmax_pool_eta,
    _swish_eta,
    eta_from_beta,
    vq_probability_abs,
    vq_probability_pool,
    vq_probability_relu,
)

if TYPE_CHECKING:
    from typing import Self

__all__ = ["BetaAbs", "BetaLeakyReLU", "BetaSwish", "SoftmaxPool1d", "VQSigmoid", "VQSoftmax", "VQTanh"]

def _version(t: torch.Tensor) -> int:
    """The in-place version counter of ``t`` (-1 for an inference tensor, which has none)."""
    return -1 if t.is_inference() else t._version


def _readable(t: torch.Tensor) -> bool:
    return t.device.type != "meta"


class _BetaModule(nn.Module):
    """Holds beta: a buffer (fixed) or a logit parameter ``theta`` (learnable), per layer or per channel."""

    theta: torch.Tensor  # the parameter (learnable) ...
    beta_value: torch.Tensor  # ... or the buffer (fixed): declared for type checkers, which see Tensor | Module
    _fixed: tuple[torch.Tensor, int, float] | None

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
        self._fixed = None  # (buffer, its version, its value as a float) for a per-layer fixed beta
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
            self._remember_fixed(beta)

    # ------------------------------------------------------------------ the per-layer fixed beta as a float
    def _remember_fixed(self, value: float | None = None) -> None:
        """Record the per-layer fixed beta as a float tied to the current buffer (read it if not given)."""
        b = self._buffers.get("beta_value")
        if b is None or b.dim() != 0:
            self._fixed = None
            return
        if value is None:
            if not _readable(b):
                self._fixed = None
                return
            value = float(b)  # a host read, outside forward
        self._fixed = (b, _version(b), float(value))

    def _fixed_float(self, b: torch.Tensor) -> float | None:
        """The remembered per-layer fixed beta if it still describes buffer ``b``; no host read."""
        f = self._fixed
        if f is None or f[0] is not b:
            return None
        if not torch.compiler.is_compiling() and f[1] != _version(b):
            return None  # edited in place since: use the tensor
        return f[2]

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Self:
        fixed = self._buffers.get("beta_value")
        remembered = self._fixed_float(fixed) if fixed is not None else None
        super()._apply(fn, recurse)
        moved = self._buffers.get("beta_value")
        if fixed is not None and moved is not None and moved.dtype != fixed.dtype:
            # a cast moves the layer's weights, not the temperature it was built with
            self._buffers["beta_value"] = fixed.to(device=moved.device)
        if fixed is not None:
            self._remember_fixed(remembered)
        return self

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, local_metadata: dict[str, Any],
                              strict: bool, missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        key = prefix + "beta_value"
        incoming = state_dict.get(key)
        if not self.learnable and isinstance(incoming, torch.Tensor) and _readable(incoming):
            _check_beta(incoming)  # checked where it is set, not in forward
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        if not self.learnable:
            value = float(incoming) if (isinstance(incoming, torch.Tensor) and incoming.dim() == 0
                                        and _readable(incoming)) else None
            self._remember_fixed(value)

    def __setstate__(self, state: dict[str, Any]) -> None:  # unpickling / deepcopy: tie the float to the new buffer
        super().__setstate__(state)
        if not self.__dict__.get("learnable", True):
            b = self._buffers.get("beta_value")
            if b is not None and b.dim() == 0:
                known = getattr(self, "_fixed", None)  # absent in a module pickled by an older version
                self._remember_fixed(None if _readable(b) else (known[2] if known else None))

    # ------------------------------------------------------------------ beta
    @property
    def beta(self) -> torch.Tensor:
        """beta in [0, 1] (in (0, 1) when learnable), shape ``()`` or ``(C,)``.

        Assigning ``module.beta = value`` (a number or a tensor of shape ``()`` / ``(C,)``) checks the value
        and sets the buffer (fixed) or ``theta`` = logit(value) (learnable; strictly inside (0, 1))."""
        return torch.sigmoid(self.theta) if self.learnable else self.beta_value

    @beta.setter
    def beta(self, value: float | torch.Tensor) -> None:
        value = value.detach() if isinstance(value, torch.Tensor) else value
        _check_beta(value)
        shape = () if self.num_channels is None else (self.num_channels,)
        target = self.theta if self.learnable else self.beta_value
        new = torch.as_tensor(value, dtype=torch.float64).to("cpu")
        if new.dim() > len(shape) or (new.dim() and tuple(new.shape) != shape):
            raise ValueError(f"beta: expected shape () or {shape}, got {tuple(new.shape)}")
        with torch.no_grad():
            if self.learnable:
                if not bool(((new > 0) & (new < 1)).all()):
                    raise ValueError(f"beta: a learnable beta lies strictly inside (0, 1), got {value}")
                target.copy_((torch.log(new) - torch.log1p(-new)).expand(shape))
            else:
                target.copy_(new.expand(shape))
                self._remember_fixed(float(new) if new.dim() == 0 and not shape else None)

    def _eta(self, u: torch.Tensor) -> float | torch.Tensor:
        """eta for input ``u``: a float (fixed, per layer) or a tensor broadcastable to ``u``; no host read."""
        if self.learnable:
            theta = self.theta
            eta = torch.exp(theta.to(_compute_dtype(theta.dtype))).clamp(max=_F32_MAX)
        else:
            b = self.beta_value
            fixed = self._fixed_float(b) if self.num_channels is None else None
            if fixed is not None:
                return eta_from_beta(fixed)
            eta = _eta_tensor(b)
        if self.num_channels is None:
            return eta
        if u.dim() < 2 or u.shape[1] != self.num_channels:
            raise ValueError(f"input: expected shape (N, {self.num_channels}, *) for a per-channel beta, "
                             f"got {tuple(u.shape)}")
        return eta.reshape(self.num_channels, *([1] * (u.dim() - 2)))

    def extra_repr(self) -> str:
        parts = []
        if self.num_channels is None:
            fixed = None if self.learnable else self._fixed_float(self.beta_value)
            if fixed is None:
                b = self.beta.detach()
                fixed = float(b) if _readable(b) else None
            parts.append(f"beta={fixed:.4g}" if fixed is not None else "beta=?")
        else:
            parts.append(f"num_channels={self.num_channels}")
        if self.learnable:
            parts.append("learnable=True")
        if getattr(self, "inplace", False):
            parts.append("inplace=True")
        return ", ".join(parts)


class _PointwiseBetaModule(_BetaModule):
    """A pointwise beta-VQ activation: :class:`_BetaModule` plus ``inplace`` (write the result into the input)."""

    __constants__ = ["inplace"]
    inplace: bool

    def __init__(self, beta: float = 0.5, learnable: bool = False, num_channels: int | None = None, *,
                 inplace: bool = False, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__(beta, learnable, num_channels, device=device, dtype=dtype)
        self.inplace = bool(inplace)


class BetaSwish(_PointwiseBetaModule):
    r"""beta-VQ ReLU (Table 1): u sigma(eta u), eta = beta / (1 - beta) -- the swish.  Functional: ``beta_swish``.

    ``BetaSwish(0.5)`` is ``nn.SiLU``; ``BetaSwish(1.0)`` is ``nn.ReLU``; ``BetaSwish(0.0)`` is u / 2.
    ``inplace=True`` writes the result into the input (as ``nn.SiLU(inplace=True)``).

    Shape: input ``(*)`` (``(N, C, *)`` with ``num_channels``), output the same.

    Examples::

        >>> m = BetaSwish(0.7, learnable=True)
        >>> y = m(torch.randn(4, 3))
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return _swish_eta(input, self._eta(input), self.inplace)


class BetaLeakyReLU(_PointwiseBetaModule):
    """beta-VQ leaky ReLU (Table 1): u [nu + (1 - nu) sigma(eta (1 - nu) u)]; beta = 1 is ``nn.LeakyReLU(nu)``.

    Functional: ``beta_leaky_relu``.

    :param nu: negative slope in [-1, 1].
    :param inplace: write the result into the input.
    """

    __constants__ = ["inplace", "nu"]
    inplace: bool

    def __init__(self, beta: float = 0.5, nu: float = 0.01, learnable: bool = False,
                 num_channels: int | None = None, *, inplace: bool = False,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__(beta, learnable, num_channels, inplace=inplace, device=device, dtype=dtype)
        self.nu = _check_nu(nu)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return _leaky_eta(input, self._eta(input), self.nu, self.inplace)

    def extra_repr(self) -> str:
        base = super().extra_repr().replace(", inplace=True", "")
        return f"{base}, nu={self.nu:g}" + (", inplace=True" if self.inplace else "")


class BetaAbs(_PointwiseBetaModule):
    """beta-VQ absolute value (Table 1): u tanh(eta u); beta = 1 is |u|, beta = 0 is 0.  Functional: ``beta_abs``.

    :param inplace: write the result into the input.
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return _abs_eta(input, self._eta(input), self.inplace)


class SoftmaxPool1d(_BetaModule):
    """beta-VQ max pooling over 1-D windows of the last dimension (Table 1: softmax pooling).

    Each window of ``kernel_size`` entries (step ``stride``, default ``kernel_size``, no padding) gives
    sum_i softmax(eta x)_i x_i; beta = 1 is ``nn.MaxPool1d``, beta = 0 ``nn.AvgPool1d``; functional: ``softmax_pool1d``.

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
        windows = _pool1d_windows(input, self.kernel_size, self.stride, "input")
        return _softmax_pool_eta(windows, self._eta(windows), dim=-1)

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
