"""Exact linear pieces of a 1-D piecewise-linear network (``docs/theory.md`` §2.2: the breakpoint lemma,
:func:`breakpoint_bound`, and how :func:`count_pieces` counts).

:func:`count_pieces` propagates the per-piece (slope, intercept) of every unit through the affine layers;
before each activation (ReLU, leaky ReLU, absolute value) it splits a piece at every zero ``x* = -c / s`` of a
unit's pre-activation (in float64) and reads the gate at the refined pieces' midpoints; at the end it merges
neighbours whose slopes and intercepts coincide (to a tolerance), so the count is that of the *maximal* pieces.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from smaso.student.activations import Activation, get_activation

__all__ = [
    "Abs",
    "PieceCount",
    "breakpoint_bound",
    "count_pieces",
    "hidden_widths",
    "min_widths_for_pieces",
    "network_layers",
]


class Abs(nn.Module):
    """Pointwise absolute value |u| as a module (an activation :func:`count_pieces` understands)."""

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return u.abs()


@dataclass
class PieceCount:
    """The maximal linear pieces of a 1-D network on ``[lo, hi]``.

    :ivar edges: float64 array of length ``count + 1``: lo, the interior breakpoints, hi.
    :ivar slopes: float64 array of length ``count``: the slope of the output on each piece.
    :ivar intercepts: float64 array of length ``count``: f(x) = slope * x + intercept on the piece.
    :ivar count: number of maximal linear pieces.
    :ivar raw_count: number of pieces before merging collinear neighbours.
    :ivar widths: the hidden-layer widths m_1..m_L of the network.
    :ivar bound: :func:`breakpoint_bound` of ``widths`` (for ReLU, leaky ReLU and abs alike).
    """

    edges: np.ndarray
    slopes: np.ndarray
    intercepts: np.ndarray
    count: int
    raw_count: int
    widths: tuple[int, ...]
    bound: int

    @property
    def breakpoints(self) -> np.ndarray:
        """The interior points where the slope changes (``count - 1`` of them)."""
        return self.edges[1:-1]

    def __call__(self, x: npt.ArrayLike) -> np.ndarray:
        """Evaluate the piecewise-linear function at ``x`` (inside [lo, hi])."""
        x = np.asarray(x, dtype=np.float64)
        i = np.clip(np.searchsorted(self.edges, x, side="right") - 1, 0, self.count - 1)
        return self.slopes[i] * x + self.intercepts[i]


def breakpoint_bound(widths: Sequence[int]) -> int:
    """The lecture's bound 2^(L-1) (m_1 + 1) m_2 ... m_L on the number of linear pieces.

    Convention (as in the lecture notes, seed ``001``, "ReLU Breakpoints"): ``widths`` are the
    widths m_1..m_L of the L *hidden* layers of a network R -> R (input and output layer not
    counted); L = 1 gives m_1 + 1 (a combination of m_1 ReLUs). With no hidden layer (an
    affine map) the bound is 1. The proof only uses that an activation at most doubles the
    pieces of its input, so it holds for leaky ReLU and absolute value too.
    """
    widths = [int(m) for m in widths]
    if any(m < 1 for m in widths):
        raise ValueError(f"widths: expected positive hidden widths, got {widths}")
    if not widths:
        return 1
    return 2 ** (len(widths) - 1) * (widths[0] + 1) * math.prod(widths[1:])


def min_widths_for_pieces(pieces: int, depth: int) -> tuple[int, ...]:
    """The hidden widths m_1..m_depth with the fewest nodes m_1 + ... + m_depth whose
    :func:`breakpoint_bound` reaches ``pieces``: by the lemma, no ReLU network of this depth with
    fewer nodes has ``pieces`` linear pieces (a necessary condition, not a sufficient one).

    The search is exact: the bound of (m_1..m_L) is 2 m_L times the bound of (m_1..m_{L-1}), so
    the least nodes for depth L and P pieces is min over m_L of m_L + (least nodes for depth
    L - 1 and ceil(P / (2 m_L)) pieces), with m_1 = P - 1 at depth 1. Ties go to the narrower
    last layers.

    :param pieces: the number of pieces to reach, >= 1.
    :param depth: the number of hidden layers L, >= 1.
    """
    if isinstance(pieces, bool) or not isinstance(pieces, int | np.integer) or pieces < 1:
        raise ValueError(f"pieces: expected a positive integer, got {pieces!r}")
    if isinstance(depth, bool) or not isinstance(depth, int | np.integer) or depth < 1:
        raise ValueError(f"depth: expected a positive integer, got {depth!r}")

    @functools.cache
    def best(L: int, P: int) -> tuple[int, ...]:
        if L == 1:
            return (max(1, P - 1),)
        out: tuple[int, ...] = ()
        # m_L beyond ceil(P / 2) cannot help: the rest needs a bound of 1 already at m_L = ceil(P / 2)
        for m in range(1, max(1, -(-P // 2)) + 1):
            cand = (*best(L - 1, -(-P // (2 * m))), m)
            if not out or sum(cand) < sum(out):
                out = cand
        return out

    return best(int(depth), int(pieces))


# ---------------------------------------------------------------------------------------------
# Layers: ("affine", W, b) with W of shape (out, in), or ("act", Activation)


def _as_activation(obj: object) -> Activation | None:
    """The piecewise-linear Activation a module or name stands for, or None when it is not one."""
    if isinstance(obj, nn.ReLU):
        return Activation("relu")
    if isinstance(obj, nn.LeakyReLU):
        return Activation("leaky_relu", nu=float(obj.negative_slope))
    if isinstance(obj, Abs):
        return Activation("abs")
    if isinstance(obj, nn.Identity):
        return Activation("linear")
    spec = obj if isinstance(obj, str | Activation) else getattr(obj, "activation", None)
    if spec is None:
        return None
    act = get_activation(spec)
    if act.name == "swish":
        if act.beta != 1.0:
            raise ValueError(f"activation {spec!r}: not piecewise linear (only relu, leaky_relu, abs, linear)")
        return Activation("relu")
    return act


def _flatten(module: nn.Module) -> list[nn.Module]:
    """The leaf modules in order (a custom container's children: checked against its forward later)."""
    seq = isinstance(module, nn.Sequential | nn.ModuleList)
    children = list(module if seq else module.children())  # type: ignore[arg-type]  # iterating keeps a module used twice (children() does not)
    if seq or (children and not isinstance(module, nn.Linear) and _as_activation(module) is None):
        return [leaf for m in children for leaf in _flatten(m)]
    return [module]


def network_layers(net: nn.Module | Sequence[nn.Module], activation: str | Activation = "relu") -> list[tuple]:
    """Normalise ``net`` to a list of ``("affine", W, b)`` / ``("act", Activation)`` in float64.

    :param net: an ``nn.Sequential`` (or ``nn.ModuleList``, nested allowed) of ``nn.Linear``,
        ``nn.ReLU``, ``nn.LeakyReLU``, :class:`Abs`, ``nn.Identity`` or any module with an
        ``activation`` attribute (a name or :class:`~smaso.student.activations.Activation`); or a plain
        list of ``(W, b)`` pairs (W of shape (out, in)), with ``activation`` applied between them.
    """
    layers: list[tuple] = []
    if isinstance(net, nn.Module):
        for m in _flatten(net):
            if isinstance(m, nn.Linear):
                W = m.weight.detach().to(torch.float64).cpu()
                b = torch.zeros(W.shape[0], dtype=torch.float64) if m.bias is None else m.bias.detach().to(W)
                layers.append(("affine", W, b))
                continue
            act = _as_activation(m)
            if act is None:
                raise TypeError(f"unsupported layer {type(m).__name__}: expected nn.Linear, nn.ReLU, nn.LeakyReLU, "
                                "Abs, nn.Identity or a module with an `activation` attribute")
            layers.append(("act", act))
        return layers
    if isinstance(net, Iterable) and not isinstance(net, str | torch.Tensor):
        act = _as_activation(activation)
        if act is None:
            raise TypeError(f"activation: expected a name or Activation, got {activation!r}")
        pairs = list(net)
        for i, pair in enumerate(pairs):
            try:
                W, b = pair  # type: ignore[misc]  # an iterable of (W, b) pairs, not a module
            except (TypeError, ValueError):
                raise TypeError(f"layer {i}: expected a (W, b) pair, got {type(pair).__name__}") from None
            W = torch.as_tensor(W, dtype=torch.float64)
            b = torch.as_tensor(b, dtype=torch.float64)
            if W.ndim == 1:
                W = W[:, None]
            if W.ndim != 2 or b.shape != (W.shape[0],):
                raise ValueError(f"layer {i}: W must be (out, in) and b (out,), got {tuple(W.shape)} and "
                                 f"{tuple(b.shape)}")
            layers.append(("affine", W, b))
            if i < len(pairs) - 1:
                layers.append(("act", act))
        return layers
    raise TypeError(f"net: expected an nn.Sequential or a list of (W, b) pairs, got {type(net).__name__}")


def hidden_widths(layers: list[tuple]) -> tuple[int, ...]:
    """Widths of the layers that an activation acts on (the m_i of :func:`breakpoint_bound`).

    Each non-linear activation counts as one hidden layer of the width it acts on (also one
    applied to the input, or right after another activation), which keeps the bound valid.
    """
    widths, width = [], 1
    for layer in layers:
        if layer[0] == "affine":
            width = layer[1].shape[0]
        elif layer[1].name != "linear":
            widths.append(width)  # every activation may double the pieces (the lemma's claim)
    return tuple(widths)


def _gate(act: Activation, z: np.ndarray) -> np.ndarray:
    if act.name == "relu":
        return (z > 0).astype(np.float64)
    if act.name == "leaky_relu":
        return np.where(z > 0, 1.0, act.nu)
    if act.name == "abs":
        return np.sign(z)
    return np.ones_like(z)


def _dedupe(points: np.ndarray, tol: float) -> np.ndarray:
    """Sorted points with neighbours closer than ``tol`` collapsed (the first one kept)."""
    points = np.sort(points)
    if points.size <= 1:
        return points
    keep = np.concatenate([[True], np.diff(points) > tol])
    return points[keep]


def count_pieces(net: nn.Module | Sequence[nn.Module], lo: float = 0.0, hi: float = 1.0, *,
                 activation: str | Activation = "relu", tol: float = 1e-9,
                 check: bool = True) -> PieceCount:
    """Exact maximal linear pieces of the 1-D network ``net`` on ``[lo, hi]``.

    :param net: see :func:`network_layers`.
    :param lo, hi: the interval, ``lo < hi``.
    :param activation: for a list of (W, b) pairs: the activation between layers.
    :param tol: relative tolerance: crossings closer than ``tol * (hi - lo)`` to a breakpoint are
        the breakpoint itself; neighbours whose slopes and intercepts agree within
        ``tol * max(1, scale)`` are one piece.
    :param check: for a module, evaluate it (in float64) at the piece midpoints and raise if it
        disagrees with the propagated pieces (catches containers whose ``forward`` is not the
        sequential composition of their children).
    :raises ValueError: input or output not 1-D, ``lo >= hi``, non-finite bounds.
    :raises TypeError: unsupported layers.
    """
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"interval: expected finite bounds, got [{lo}, {hi}]")
    if lo >= hi:
        raise ValueError(f"interval: expected lo < hi, got lo={lo}, hi={hi}")
    layers = network_layers(net, activation)
    affine = [layer for layer in layers if layer[0] == "affine"]
    if affine and affine[0][1].shape[1] != 1:
        raise ValueError(f"network input is {affine[0][1].shape[1]}-D: piece counting needs a scalar (1-D) input")
    width = 1
    for _, W, _ in affine:
        if W.shape[1] != width:
            raise ValueError(f"layer shapes do not chain: expected in_features={width}, got {W.shape[1]}")
        width = W.shape[0]
    if width != 1:
        raise ValueError(f"network output is {width}-D: piece counting needs a scalar (1-D) output")

    span = hi - lo
    edges = np.array([lo, hi])
    S = np.ones((1, 1))  # per-piece, per-unit slope
    C = np.zeros((1, 1))  # per-piece, per-unit intercept
    for layer in layers:
        if layer[0] == "affine":
            W, b = layer[1].numpy(), layer[2].numpy()
            S, C = S @ W.T, C @ W.T + b
            continue
        act = layer[1]
        if act.name == "linear":
            continue
        left, right = edges[:-1, None], edges[1:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            xs = -C / S
        inside = (S != 0) & (xs > left) & (xs < right)
        new = xs[inside]
        if new.size:
            new = _dedupe(new, tol * span)
            j = np.searchsorted(edges, new)  # edges[j - 1] < new < edges[j]: the two nearest edges
            gap = np.minimum(new - edges[np.maximum(j - 1, 0)], edges[np.minimum(j, edges.size - 1)] - new)
            near = np.abs(gap) <= tol * span
            edges = _dedupe(np.concatenate([edges, new[~near]]), 0.0)
        mids = 0.5 * (edges[:-1] + edges[1:])
        parent = np.clip(np.searchsorted(left[:, 0], mids, side="right") - 1, 0, S.shape[0] - 1)
        S, C = S[parent], C[parent]
        g = _gate(act, S * mids[:, None] + C)
        S, C = S * g, C * g
    slopes, intercepts = S[:, 0], C[:, 0]
    raw = slopes.size

    # merge collinear neighbours
    s_scale = max(1.0, float(np.abs(slopes).max()))
    c_scale = max(1.0, float(np.abs(intercepts).max()))
    same = (np.abs(np.diff(slopes)) <= tol * s_scale) & (np.abs(np.diff(intercepts)) <= tol * c_scale)
    keep_edge = np.concatenate([[True], ~same, [True]])
    first = np.concatenate([[True], ~same])
    widths = hidden_widths(layers)
    result = PieceCount(edges[keep_edge], slopes[first], intercepts[first], int(first.sum()), int(raw), widths,
                        breakpoint_bound(widths))
    if check and isinstance(net, nn.Module):
        _check_against_module(net, result, edges, tol)
    return result


def _check_against_module(net: nn.Module, result: PieceCount, raw_edges: np.ndarray, tol: float) -> None:
    model = copy.deepcopy(net).to(torch.float64)
    x = 0.5 * (raw_edges[:-1] + raw_edges[1:])
    x = np.concatenate([x, raw_edges])
    with torch.no_grad():
        y = model(torch.as_tensor(x, dtype=torch.float64)[:, None]).reshape(-1).numpy()
    want = result(x)
    # float64 round-off, plus what dropping crossings closer than tol * span to an edge can cost
    allowed = 1e-7 * max(1.0, float(np.abs(want).max()))
    allowed += 100 * tol * (raw_edges[-1] - raw_edges[0]) * max(1.0, float(np.abs(result.slopes).max()))
    err = float(np.abs(y - want).max())
    if not err <= allowed:
        raise ValueError(f"the network's forward disagrees with its layers composed in order (max error {err:.3g}); "
                         "pass an nn.Sequential or a list of (W, b)")
