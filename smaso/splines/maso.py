"""Max-affine spline operators (MASO, ``docs/theory.md`` §3.1-3.2, Eq 1-2) and the layers they write exactly.

A MASO with slopes A ``(K, R, D)`` and offsets B ``(K, R)`` maps x in R^D to [z]_k = max_r (<A[k,r,:], x> +
B[k,r]) (Eq 1); its hard VQ (Eq 2) is the one-hot of that argmax.  The ``MASO.from_linear_*``, ``max_pool`` and
``avg_pool`` constructors write ReLU, leaky ReLU, absolute value, max (or channel) pooling and average pooling
exactly as MASOs.  Pooling acts on a flattened input: a ``(C, L)`` feature map is x = ``x.reshape(N, C * L)``
(channel c, position l at index c * L + l), and :func:`pool_windows_1d` / :func:`channel_pool_windows` list
the index sets in the order of ``F.max_pool1d(x).reshape(N, -1)`` / the pooled channels.

:func:`region_scores`, :func:`vq_outputs` and :func:`check_unit_beta` are defined in :mod:`inference.mixture` (the
SMASO mixtures' posteriors are written in them, and inference does not import smaso) and are this module's too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from inference.mixture import check_finite, check_maso, check_unit_beta, check_x, region_scores, vq_outputs
from smaso.splines.functional import softmax_pool, vq_probability_pool

__all__ = [
    "MASO",
    "channel_pool_windows",
    "check_unit_beta",
    "hard_regions",
    "pool_windows_1d",
    "region_probabilities",
    "region_scores",
    "vq_outputs",
]


def _floating(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got dtype {t.dtype}")
    return t


def hard_regions(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Hard VQ (Eq 2): the one-hot ``t_H`` of ``argmax_r s`` ``(N, K, R)``, the first region on ties.

    :raises ValueError: non-finite x or A (argmax would pick region 0 for a NaN score).
    """
    check_maso(A, B)
    check_x(x, A, finite=True)
    check_finite(B, "B")
    s = region_scores(A, B, x)
    return torch.nn.functional.one_hot(s.argmax(-1), A.shape[1]).to(s.dtype)


def region_probabilities(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor,
                         beta: float | torch.Tensor = 0.5) -> torch.Tensor:
    """beta-VQ (Eq 7-9): the region probabilities ``t = softmax_r(eta s)`` ``(N, K, R)``, eta = beta / (1 - beta).

    The maximizer of ``beta <t, s> + (1 - beta) H(t)`` over the simplex.  beta = 1/2 is soft VQ (Eq 5-6,
    ``softmax(s)``); beta = 0 gives the uniform 1/R and beta = 1 the hard VQ with ties shared equally (the
    limit of the softmax; :func:`hard_regions` breaks ties to the first region instead), both exactly.

    :param beta: a number in [0, 1] for the layer, or a ``(K,)`` tensor (one per unit; gradients flow).
    """
    s = region_scores(A, B, x)
    b = check_unit_beta(beta, A.shape[0], s.dtype)
    if b.dim() == 0 and not b.requires_grad:
        return vq_probability_pool(s, float(b), dim=-1)
    b = b.to(s.dtype)
    bk = b[:, None] if b.dim() == 1 else b  # against (N, K, R)
    hard = bk == 1
    eta = torch.where(hard, 0.0, bk / torch.where(hard, 1.0, 1 - bk))  # finite everywhere, and so its gradient
    tied = (s == s.amax(-1, keepdim=True)).to(s.dtype)
    return torch.where(hard, tied / tied.sum(-1, keepdim=True), torch.softmax(eta * s, dim=-1))


class MASO:
    """A max-affine spline operator R^D -> R^K with R pieces per output (Eq 1).

    :param A: slopes ``(K, R, D)``.
    :param B: offsets ``(K, R)``, same dtype and device as ``A``.
    :raises ValueError: wrong number of dimensions, K/R mismatch between A and B, an empty axis, or
        non-finite entries.  :raises TypeError: non-tensor or non-floating input, or A/B dtypes differ.
    """

    def __init__(self, A: torch.Tensor, B: torch.Tensor) -> None:
        A, B = _floating("A", A), _floating("B", B)
        if A.dim() != 3:
            raise ValueError(f"A: expected slopes of shape (K, R, D), got {tuple(A.shape)}")
        if B.dim() != 2:
            raise ValueError(f"B: expected offsets of shape (K, R), got {tuple(B.shape)}")
        if tuple(B.shape) != tuple(A.shape[:2]):
            raise ValueError(f"A/B shape mismatch: A is (K, R, D) = {tuple(A.shape)}, so B must be "
                             f"{tuple(A.shape[:2])}, got {tuple(B.shape)}")
        if 0 in A.shape:
            raise ValueError(f"A: every axis needs at least one entry, got shape {tuple(A.shape)}")
        if A.dtype != B.dtype:
            raise TypeError(f"A/B dtype mismatch: A is {A.dtype}, B is {B.dtype}")
        if A.device != B.device:
            raise ValueError(f"A/B device mismatch: A on {A.device}, B on {B.device}")
        if not (bool(torch.isfinite(A).all()) and bool(torch.isfinite(B).all())):
            raise ValueError("A, B: expected finite slopes and offsets")
        self.A, self.B = A, B

    # ------------------------------------------------------------------ shape
    @property
    def K(self) -> int:
        """Number of output units K (Eq 1: one max-affine spline per unit)."""
        return self.A.shape[0]

    @property
    def R(self) -> int:
        """Number of regions R per unit (affine pieces of each max-affine spline)."""
        return self.A.shape[1]

    @property
    def D(self) -> int:
        """Input dimension D."""
        return self.A.shape[2]

    def __repr__(self) -> str:
        return f"MASO(K={self.K}, R={self.R}, D={self.D}, dtype={self.A.dtype})"

    def _check_x(self, x: torch.Tensor) -> torch.Tensor:
        x = _floating("x", x)
        if x.dim() != 2 or x.shape[1] != self.D:
            raise ValueError(f"x: expected shape (N, D) with D = {self.D}, got {tuple(x.shape)}")
        if x.dtype != self.A.dtype:
            raise TypeError(f"x: expected dtype {self.A.dtype} (the MASO's), got {x.dtype}")
        return x

    # ------------------------------------------------------------------ Eq 1-2, 5-9
    def region_scores(self, x: torch.Tensor) -> torch.Tensor:
        """<A[k,r], x> + B[k,r] for ``x`` ``(N, D)``: ``(N, K, R)`` (:func:`region_scores`)."""
        return region_scores(self.A, self.B, self._check_x(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Eq 1: max over the R pieces, ``(N, D)`` -> ``(N, K)``."""
        return self.region_scores(x).amax(-1)

    __call__ = forward

    def hard_regions(self, x: torch.Tensor) -> torch.Tensor:
        """Eq 2: one-hot ``(N, K, R)`` of the argmax region (the first one on ties) (:func:`hard_regions`)."""
        return hard_regions(self.A, self.B, self._check_x(x))

    def region_probabilities(self, x: torch.Tensor, beta: float | torch.Tensor = 0.5) -> torch.Tensor:
        """beta-VQ region probabilities softmax_r(eta s) ``(N, K, R)`` (Eq 5-9, :func:`region_probabilities`)."""
        return region_probabilities(self.A, self.B, self._check_x(x), beta)

    def vq_outputs(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """z_k = sum_r t[k,r] (<A[k,r],x> + B[k,r]) for region weights ``t`` ``(N, K, R)`` (:func:`vq_outputs`)."""
        return vq_outputs(t, self.region_scores(x))

    def beta_vq_outputs(self, x: torch.Tensor, beta: float | torch.Tensor = 0.5) -> torch.Tensor:
        """Unit outputs of beta-VQ, sum_r t_r s_r with t = :meth:`region_probabilities`, ``(N, K)`` (Table 1).

        One beta for the layer is computed as softmax pooling over the R scores (one stable kernel, exact at
        beta = 0 and 1); a ``(K,)`` beta (one per unit) goes through :meth:`region_probabilities`.  Either
        way it equals ``vq_outputs(x, region_probabilities(x, beta))``.
        """
        if isinstance(beta, torch.Tensor) and beta.dim() > 0:
            return vq_outputs(self.region_probabilities(x, beta), self.region_scores(x))
        return softmax_pool(self.region_scores(x), beta, dim=-1)

    def reproduction_error(self, layer: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> float:
        """max |MASO(x) - layer(x)| over ``x`` ``(N, D)``: 0 (up to rounding) when the MASO writes ``layer``.

        ``layer`` maps ``(N, D)`` to anything with N * K entries (e.g. ``(N, C, L_out)`` for a pooling
        layer applied to the un-flattened input; wrap it so that it receives ``(N, D)``).
        """
        z = self.forward(x)
        ref = layer(x)
        if ref.numel() != z.numel():
            raise ValueError(f"layer: returned {tuple(ref.shape)} ({ref.numel()} entries), expected N * K = "
                             f"{z.numel()}")
        return float((z - ref.reshape(z.shape).to(z.dtype)).abs().max()) if z.numel() else 0.0

    # ------------------------------------------------------------------ constructors
    @staticmethod
    def _linear(W: torch.Tensor, b: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        W = _floating("W", W)
        if W.dim() != 2:
            raise ValueError(f"W: expected a weight of shape (K, D), got {tuple(W.shape)}")
        if b is None:
            b = torch.zeros(W.shape[0], dtype=W.dtype, device=W.device)
        b = _floating("b", b)
        if tuple(b.shape) != (W.shape[0],):
            raise ValueError(f"b: expected a bias of shape ({W.shape[0]},) to match W {tuple(W.shape)}, "
                             f"got {tuple(b.shape)}")
        if b.dtype != W.dtype:
            raise TypeError(f"W/b dtype mismatch: W is {W.dtype}, b is {b.dtype}")
        return W, b

    @classmethod
    def _two_piece(cls, W: torch.Tensor, b: torch.Tensor | None, low_scale: float) -> MASO:
        W, b = cls._linear(W, b)
        A = torch.stack([low_scale * W, W], 1)
        B = torch.stack([low_scale * b, b], 1)
        return cls(A, B)

    @classmethod
    def from_linear_relu(cls, W: torch.Tensor, b: torch.Tensor | None = None) -> MASO:
        """relu(x W^T + b): pieces (0, 0) and (W_k, b_k).  ``W`` ``(K, D)``, ``b`` ``(K,)`` or None."""
        return cls._two_piece(W, b, 0.0)

    @classmethod
    def from_linear_leaky_relu(cls, W: torch.Tensor, b: torch.Tensor | None = None, nu: float = 0.01) -> MASO:
        """leaky_relu(x W^T + b, nu) = max(u, nu u) for nu <= 1: pieces (nu W_k, nu b_k) and (W_k, b_k)."""
        if not isinstance(nu, int | float) or isinstance(nu, bool) or not -math.inf < nu <= 1.0:
            raise ValueError(f"nu: expected a finite slope <= 1 (leaky ReLU = max(u, nu u)), got {nu!r}")
        return cls._two_piece(W, b, float(nu))

    @classmethod
    def from_linear_abs(cls, W: torch.Tensor, b: torch.Tensor | None = None) -> MASO:
        """|x W^T + b|: pieces (-W_k, -b_k) and (W_k, b_k)."""
        return cls._two_piece(W, b, -1.0)

    @staticmethod
    def _windows(D: int, windows: Sequence[Sequence[int]]) -> list[list[int]]:
        if not isinstance(D, int) or isinstance(D, bool) or D < 1:
            raise ValueError(f"D: expected a positive int input dimension, got {D!r}")
        out = [[int(i) for i in w] for w in windows]
        if not out:
            raise ValueError("windows: expected at least one index set")
        for k, w in enumerate(out):
            if not w:
                raise ValueError(f"windows[{k}]: empty index set")
            if min(w) < 0 or max(w) >= D:
                raise ValueError(f"windows[{k}]: indices must lie in [0, {D}), got {w}")
        return out

    @classmethod
    def max_pool(cls, D: int, windows: Sequence[Sequence[int]], dtype: torch.dtype = torch.float64) -> MASO:
        """Max over each index set R_k of x (max or channel pooling): A[k,r,:] = e_{i_r}, B = 0.

        Sets of unequal size are padded by repeating their first index (a duplicate piece leaves the max
        unchanged); R = the largest set size.
        """
        ws = cls._windows(D, windows)
        R = max(len(w) for w in ws)
        A = torch.zeros(len(ws), R, D, dtype=dtype)
        for k, w in enumerate(ws):
            padded = w + [w[0]] * (R - len(w))
            A[k, torch.arange(R), torch.tensor(padded)] = 1.0
        return cls(A, torch.zeros(len(ws), R, dtype=dtype))

    @classmethod
    def avg_pool(cls, D: int, windows: Sequence[Sequence[int]], dtype: torch.dtype = torch.float64) -> MASO:
        """Mean over each index set R_k: R = 1, A[k,0,:] = mean of e_i over R_k, B = 0."""
        ws = cls._windows(D, windows)
        A = torch.zeros(len(ws), 1, D, dtype=dtype)
        for k, w in enumerate(ws):
            A[k, 0].index_add_(0, torch.tensor(w), torch.full((len(w),), 1.0 / len(w), dtype=dtype))
        return cls(A, torch.zeros(len(ws), 1, dtype=dtype))


def pool_windows_1d(channels: int, length: int, kernel_size: int, stride: int | None = None) -> list[list[int]]:
    """Index sets of 1-D pooling windows over a flattened ``(channels, length)`` map, like ``F.max_pool1d``.

    Window (c, j) covers positions j * stride ... j * stride + kernel_size - 1 of channel c (no padding),
    listed channel-major, so the MASO's output equals ``F.max_pool1d(x, kernel_size, stride).reshape(N, -1)``.
    """
    stride = kernel_size if stride is None else stride
    for name, v in (("channels", channels), ("length", length), ("kernel_size", kernel_size), ("stride", stride)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name}: expected a positive int, got {v!r}")
    if kernel_size > length:
        raise ValueError(f"kernel_size: {kernel_size} is longer than length {length}")
    n_out = (length - kernel_size) // stride + 1
    return [[c * length + j * stride + i for i in range(kernel_size)] for c in range(channels) for j in range(n_out)]


def channel_pool_windows(channels: int, length: int, group: int) -> list[list[int]]:
    """Index sets of channel pooling over a flattened ``(channels, length)`` map: groups of ``group`` channels.

    Output (g, l) pools channels g * group ... g * group + group - 1 at position l (the order of
    ``x.reshape(N, channels // group, group, length).amax(2).reshape(N, -1)``).
    """
    for name, v in (("channels", channels), ("length", length), ("group", group)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name}: expected a positive int, got {v!r}")
    if channels % group:
        raise ValueError(f"group: {group} does not divide channels = {channels}")
    return [[(g * group + j) * length + pos for j in range(group)]
            for g in range(channels // group) for pos in range(length)]
