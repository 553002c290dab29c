"""Pointwise activations seen as max-affine splines: value, forward slope and derivative.

The framework paper writes a ReLU node as f = f' * u with f' in {0, 1} the gate (Eq 1).  Every
activation of the beta-VQ family (SMASO, ``docs/theory.md`` §3, Table 1) has the same form
f(u) = s(u) * u with a *soft* gate s(u) in [0, 1] or [-1, 1] (the region probability of the
spline's VQ), so the reformulation carries over with two gate matrices:

- ``slope(u)`` = s(u) = f(u) / u, the forward gate (D in F_a = D o sum P F W);
- ``derivative(u)`` = f'(u), the backward gate (D in G~_b = D o sum P^T G~ W^T).

For ReLU both are the 0/1 gate.  All functions are numerically stable at any |u| and exact at
the limits (``beta = 0`` linear-like, ``beta = 1`` hard).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from smaso.student._activation_names import ACTIVATION_SPECS, activation_choices

__all__ = ["ACTIVATION_SPECS", "Activation", "get_activation"]


@dataclass(frozen=True)
class Activation:
    """A pointwise activation f(u) = slope(u) * u.

    :param name: ``"relu"``, ``"linear"``, ``"leaky_relu"``, ``"abs"`` or ``"swish"``.
    :param nu: leaky ReLU negative slope.
    :param beta: swish: beta-VQ temperature in [0, 1], eta = beta / (1 - beta) (Eq 7-9 of
        "From Hard to Soft"); beta = 1/2 is SiLU, beta = 1 is ReLU, beta = 0 is u / 2.
    """

    name: str = "relu"
    nu: float = 0.01
    beta: float = 0.5

    def __post_init__(self) -> None:
        if self.name not in ("relu", "linear", "leaky_relu", "abs", "swish"):
            raise ValueError(f"activation: expected relu, linear, leaky_relu, abs or swish, got {self.name!r}")
        if self.name == "swish" and not 0.0 <= self.beta <= 1.0:
            raise ValueError(f"beta: expected a value in [0, 1], got {self.beta}")

    @property
    def eta(self) -> float:
        """Inverse temperature eta = beta / (1 - beta) of the beta-VQ swish (inf at beta = 1: ReLU)."""
        return math.inf if self.beta == 1.0 else self.beta / (1.0 - self.beta)

    @property
    def homogeneous(self) -> bool:
        """f(u) = f'(u) u exactly (ReLU, leaky ReLU, abs, linear): forward and backward gates agree."""
        return self.name != "swish" or self.beta == 1.0

    def slope(self, u: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """s(u) with f(u) = s(u) u: the forward gate.

        :param out: write it here (a tensor of u's shape and dtype, e.g. a slot of a stacked buffer).
        """
        if self.name == "relu" or (self.name == "swish" and self.beta == 1.0):
            # the 0/1 gate in u's dtype, one pass, without a bool temporary
            return torch.gt(u, 0, out=torch.empty_like(u) if out is None else out)
        if out is not None:
            return out.copy_(self.slope(u))
        if self.name == "linear":
            return torch.ones_like(u)
        if self.name == "leaky_relu":
            return torch.where(u > 0, torch.ones_like(u), torch.full_like(u, self.nu))  # nu in u's precision
        if self.name == "abs":
            return torch.sign(u)
        return torch.sigmoid(self.eta * u)  # beta = 0: sigmoid(0) = 1/2 exactly

    def __call__(self, u: torch.Tensor) -> torch.Tensor:
        if self.name == "relu" or (self.name == "swish" and self.beta == 1.0):
            return torch.relu(u)  # one fused op (autograd's backward too)
        if self.name == "linear":
            return u
        return self.slope(u) * u

    def apply_(self, u: torch.Tensor) -> torch.Tensor:
        """f(u), overwriting ``u`` where that is exact and autograd allows it (ReLU, leaky ReLU: their
        backward needs only the output); otherwise a new tensor.  For a fresh pre-activation: saves
        one allocation per layer (on CPU, fresh pages are a large part of a small layer's cost)."""
        if self.name == "relu" or (self.name == "swish" and self.beta == 1.0):
            return torch.relu_(u)
        if self.name == "leaky_relu" and self.nu > 0:  # nu <= 0 would make the output ambiguous for autograd
            return torch.nn.functional.leaky_relu_(u, self.nu)
        return self(u)

    def derivative(self, u: torch.Tensor) -> torch.Tensor:
        """f'(u): the backward gate."""
        if self.homogeneous:
            return self.slope(u)
        # v = eta u may overflow; clamped to the dtype's range, s (1 - s) is exactly 0 there, so the term
        # vanishes instead of inf * 0 = NaN
        top = torch.finfo(u.dtype).max
        v = (self.eta * u).clamp(-top, top)
        s = torch.sigmoid(v)
        return s + v * s * (1 - s)


def get_activation(spec: str | Activation) -> Activation:
    """``"relu"``, ``"silu"``, ``"swish:0.7"`` (beta), ``"leaky_relu:0.1"`` (nu), ``"abs"``, ``"linear"``."""
    if isinstance(spec, Activation):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"activation: expected a name or an Activation, got {type(spec).__name__}")
    name, colon, arg = spec.partition(":")
    if name not in {s.partition(":")[0] for s in ACTIVATION_SPECS}:
        raise ValueError(f"activation: expected {activation_choices()}, got {spec!r}")
    if name not in ("swish", "leaky_relu") and colon:
        raise ValueError(f"activation: {name!r} takes no parameter, got {spec!r}")
    if name == "silu":
        return Activation("swish", beta=0.5)
    if name in ("swish", "leaky_relu") and arg:
        try:
            value = float(arg)
        except ValueError:
            raise ValueError(f"activation: cannot read the parameter of {spec!r} as a number") from None
        try:
            return Activation("swish", beta=value) if name == "swish" else Activation("leaky_relu", nu=value)
        except ValueError as e:
            raise ValueError(f"activation {spec!r}: {e}") from None
    return Activation(name)
