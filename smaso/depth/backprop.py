"""Back-propagation written out (``docs/theory.md`` §2.5, seed ``001``: the lecture's delta recursion) for a
plain MLP h_0 = x, a_i = h_{i-1} W_i^T + b_i, h_i = g_i(a_i) with the batch-averaged squared loss and the
optional Frobenius regularizer (§2.4); :func:`chain_rule_example` is the notes' warm-up (§2.6).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "ForwardCache",
    "activation_pair",
    "backprop",
    "chain_rule_example",
    "forward_pass",
    "sgd_step",
]

Params = Sequence[tuple[torch.Tensor, torch.Tensor]]


def activation_pair(spec: str) -> tuple[Callable, Callable]:
    """(g, g') for ``"relu"``, ``"leaky_relu"`` / ``"leaky_relu:nu"``, ``"tanh"``, ``"sigmoid"``,
    ``"abs"``, ``"linear"``. At a kink the derivative is the one autograd uses (0 for ReLU at 0)."""
    name, _, arg = spec.partition(":")
    if name == "relu":
        return torch.relu, lambda a: (a > 0).to(a.dtype)
    if name == "leaky_relu":
        nu = float(arg) if arg else 0.01
        return (
            lambda a: torch.where(a > 0, a, nu * a),
            lambda a: torch.where(a > 0, torch.ones_like(a), torch.full_like(a, nu)),
        )
    if name == "tanh":
        return torch.tanh, lambda a: 1 - torch.tanh(a) ** 2
    if name == "sigmoid":
        return torch.sigmoid, lambda a: torch.sigmoid(a) * (1 - torch.sigmoid(a))
    if name == "abs":
        return torch.abs, torch.sign
    if name == "linear":
        return (lambda a: a), torch.ones_like
    raise ValueError(f"activation: expected relu, leaky_relu[:nu], tanh, sigmoid, abs or linear, got {spec!r}")


def _activations(activations: str | Sequence[str], n_layers: int) -> list[str]:
    """One name per layer; a single name means that activation on the hidden layers, linear output."""
    if isinstance(activations, str):
        return [activations] * (n_layers - 1) + ["linear"]
    activations = list(activations)
    if len(activations) != n_layers:
        raise ValueError(f"activations: expected {n_layers} names (one per layer), got {len(activations)}")
    return activations


@dataclass
class ForwardCache:
    """What the forward pass stores: ``h[0] = x``, ``h[i]`` and ``gprime[i - 1] = g_i'(a_i)``."""

    h: list[torch.Tensor]
    gprime: list[torch.Tensor]

    @property
    def output(self) -> torch.Tensor:
        """The network output h_L ``(N, width_L)`` (the last recorded layer)."""
        return self.h[-1]


def _check(params: Params, x: torch.Tensor) -> None:
    if not params:
        raise ValueError("params: expected at least one (W, b) layer")
    if x.ndim != 2:
        raise ValueError(f"x: expected a (batch, features) tensor, got shape {tuple(x.shape)}")
    width = x.shape[1]
    for i, (W, b) in enumerate(params):
        if W.ndim != 2 or W.shape[1] != width or b.shape != (W.shape[0],):
            raise ValueError(f"layer {i}: expected W of shape (out, {width}) and b of shape (out,), "
                             f"got {tuple(W.shape)} and {tuple(b.shape)}")
        width = W.shape[0]


def forward_pass(params: Params, x: torch.Tensor, activations: str | Sequence[str] = "relu") -> ForwardCache:
    """Forward pass storing every h_u and g'(a_u). ``params``: list of (W, b), W of shape (out, in)."""
    _check(params, x)
    names = _activations(activations, len(params))
    h, gprime = [x], []
    for (W, b), name in zip(params, names, strict=True):
        g, dg = activation_pair(name)
        a = h[-1] @ W.T + b
        h.append(g(a))
        gprime.append(dg(a))
    return ForwardCache(h, gprime)


def backprop(params: Params, x: torch.Tensor, y: torch.Tensor, activations: str | Sequence[str] = "relu", *,
             frobenius: float = 0.0) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """Batch-averaged squared loss and its gradients by the delta recursion.

    :param params: list of (W, b), W of shape (out, in).
    :param x: (batch, in) inputs; ``y``: (batch, out) targets (or (batch,) for one output).
    :param activations: one name per layer, or one name for the hidden layers (output linear).
    :param frobenius: lambda of the regularizer lambda sum ||W||_F^2 (added to loss and gradients).
    :returns: (loss, [(dL/dW_i, dL/db_i)]) with loss = mean_batch ||h_F - y||^2 + lambda sum ||W||_F^2.
    """
    cache = forward_pass(params, x, activations)
    out = cache.output
    if y.ndim == 1 and out.shape[1] == 1:
        y = y[:, None]
    if y.shape != out.shape:
        raise ValueError(f"y: expected shape {tuple(out.shape)}, got {tuple(y.shape)}")
    batch = x.shape[0]
    delta = 2 * (out - y) * cache.gprime[-1]  # delta[F]
    grads: list[tuple[torch.Tensor, torch.Tensor]] = []
    for i in range(len(params) - 1, -1, -1):
        W = params[i][0]
        dW = delta.T @ cache.h[i] / batch  # dL/dw[u -> v] = delta[v] h_u
        db = delta.mean(dim=0)  # dL/db[v] = delta[v]
        if frobenius:
            dW = dW + 2 * frobenius * W
        grads.append((dW, db))
        if i > 0:
            delta = cache.gprime[i - 1] * (delta @ W)  # delta[u] = g'(a_u) sum_v delta[v] w[u -> v]
    grads.reverse()
    loss = ((out - y) ** 2).sum(dim=1).mean()
    if frobenius:
        loss = loss + frobenius * sum((W**2).sum() for W, _ in params)
    return loss, grads


def sgd_step(params: Params, x: torch.Tensor, y: torch.Tensor, activations: str | Sequence[str] = "relu", *,
             lr: float = 0.01, frobenius: float = 0.0) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """One SGD step theta <- theta - lr grad (loss + lambda Omega); returns (loss, new params)."""
    loss, grads = backprop(params, x, y, activations, frobenius=frobenius)
    new = [(W - lr * dW, b - lr * db) for (W, b), (dW, db) in zip(params, grads, strict=True)]
    return loss, new


# ---------------------------------------------------------------------------------------------
# The chain-rule warm-up


_GRAPH = {"w": ("g1", "g2"), "g1": ("h1", "h2"), "g2": ("h1", "h2"), "h1": ("f",), "h2": ("f",)}


def _paths(node: str = "w") -> list[tuple[str, ...]]:
    if node == "f":
        return [("f",)]
    return [(node, *rest) for child in _GRAPH[node] for rest in _paths(child)]


def chain_rule_example(w: float = 1.0) -> dict:
    """The lecture's warm-up graph w -> (g1, g2) -> (h1, h2) -> f, differentiated two ways.

    g1 = 3w - 2, g2 = w^2 + 1, h1 = g1 g2, h2 = g2^3 - g1^2, f = h1^2 h2. At w = 1: g1 = 1,
    g2 = 2, h1 = 2, h2 = 7, f = 28; the path w -> g2 -> h1 -> f contributes 56 and df/dw = 296.

    :returns: dict with ``values`` (forward pass), ``partials`` (the 8 edge derivatives keyed by
        (child, parent)), ``paths`` (each path from w to f and its product of partials),
        ``df_dw`` (their sum) and ``autograd`` (df/dw from torch autograd, float64).
    """
    g1 = 3 * w - 2
    g2 = w**2 + 1
    h1 = g1 * g2
    h2 = g2**3 - g1**2
    f = h1**2 * h2
    values = {"w": w, "g1": g1, "g2": g2, "h1": h1, "h2": h2, "f": f}
    partials = {
        ("g1", "w"): 3.0,
        ("g2", "w"): 2 * w,
        ("h1", "g1"): g2,
        ("h1", "g2"): g1,
        ("h2", "g1"): -2 * g1,
        ("h2", "g2"): 3 * g2**2,
        ("f", "h1"): 2 * h1 * h2,
        ("f", "h2"): h1**2,
    }
    paths = {p: math.prod(partials[(b, a)] for a, b in itertools.pairwise(p)) for p in _paths()}

    wt = torch.tensor(float(w), dtype=torch.float64, requires_grad=True)
    tg1, tg2 = 3 * wt - 2, wt**2 + 1
    tf = (tg1 * tg2) ** 2 * (tg2**3 - tg1**2)
    (grad,) = torch.autograd.grad(tf, wt)
    return {"values": values, "partials": partials, "paths": paths, "df_dw": sum(paths.values()),
            "autograd": float(grad)}
