"""Orthogonal MASO layers (``docs/theory.md`` §3.8, Eq 11: <A[k,r,:], A[k',r',:]> = 0 for k != k', the
penalty, and what it buys the factorial mixture): penalty, defect measure, reparametrizations.

Convolutions.  A convolution weight ``(K, C, kh, kw)`` (any ``nn.Conv1d/2d/3d``) is treated as its K
*filters* flattened to rows ``(K, C*kh*kw)``: the penalty, Gram-Schmidt and ``orthogonal`` act on those
rows, so the filters become mutually orthogonal (K <= C*kh*kw needed, as K <= D for a ``Linear``).  That is
the usual "orthogonal filters" of a CNN.  It is not all of Eq 11 for the layer's convolution matrix,
whose rows are the shifted copies of the filters (not orthogonal in general; the paper's Appendix E.4
asks for non-overlapping or apodized filters for that).  Eq 11 proper, over every (filter, position) row
of the convolution matrix: :func:`conv_orthogonality_penalty` and :func:`conv_orthogonality_defect` (from
the filters' truncated correlations, without building the matrix), and :func:`register_conv_orthogonal`
(non-overlapping convolutions, where orthogonal filters suffice).

Classical Gram-Schmidt loses orthogonality in floating point when the rows are nearly dependent
(error ~ eps * cond(W)^2); check :func:`orthogonality_defect` or prefer :func:`register_orthogonal`.

:func:`orthogonality_defect` and :class:`OrthogonalityDefect` are defined in :mod:`inference.mixture` (the factorial
inference checks Eq 11 with them, and inference does not import smaso) and are this module's too.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.utils import parametrize

from inference.mixture import OrthogonalityDefect, _cross_gram, _pieces, orthogonality_defect

__all__ = [
    "GramSchmidt",
    "OrthogonalityDefect",
    "conv_orthogonality_defect",
    "conv_orthogonality_penalty",
    "gram_schmidt",
    "model_orthogonality_penalty",
    "orthogonality_defect",
    "orthogonality_penalty",
    "register_conv_orthogonal",
    "register_gram_schmidt",
    "register_orthogonal",
]


def orthogonality_penalty(A: torch.Tensor | nn.Module, lam: float = 1.0) -> torch.Tensor:
    """lambda sum_{k != k'} sum_{r,r'} <A[k,r,:], A[k',r',:]>^2 (both orders of each pair counted).

    ``A``: a MASO, slopes ``(K, R, D)``, or a linear layer's weight ``(K, D)`` (for linear + ReLU the zero
    piece adds nothing, so this is the penalty on the rows of W).  Differentiable; a 0-dim tensor.
    :raises ValueError: lam < 0 or a bad shape.
    """
    if not lam >= 0:
        raise ValueError(f"lam: expected a weight >= 0, got {lam}")
    A = _pieces(A)
    if A.shape[1] == 1:  # weight rows: the off-diagonal of W W^T (zeroed diagonal: no cancellation)
        W = A[:, 0, :]
        gram = W @ W.T
        return lam * (gram - torch.diag_embed(torch.diagonal(gram))).pow(2).sum()
    gram, cross = _cross_gram(A)
    return lam * (gram.pow(2) * cross).sum()


def gram_schmidt(W: torch.Tensor) -> torch.Tensor:
    """Unnormalized classical Gram-Schmidt of the rows of ``W`` ``(K, D)``, K <= D (the authors' variant).

    v_k = w_k - sum_{j<k} (<w_k, v_j> / <v_j, v_j>) v_j: the rows become mutually orthogonal and row k
    keeps its component orthogonal to the earlier rows (no normalization).  Differentiable.  A row that
    is (numerically) in the span of the earlier ones becomes zero and later rows skip it.
    :raises ValueError: W not 2-D, or K > D (at most D mutually orthogonal nonzero rows exist).
    """
    if not isinstance(W, torch.Tensor) or not W.is_floating_point():
        raise TypeError(f"W: expected a floating-point tensor, got {type(W).__name__}")
    if W.dim() != 2:
        raise ValueError(f"W: expected a weight of shape (out_features, in_features), got {tuple(W.shape)}")
    K, D = W.shape
    if K > D:
        raise ValueError(f"Gram-Schmidt needs out_features <= in_features (at most {D} mutually orthogonal "
                         f"rows in R^{D}), got out_features = {K}")
    rows: list[torch.Tensor] = []
    tiny = torch.finfo(W.dtype).tiny
    for k in range(K):
        w = W[k]
        if rows:
            V = torch.stack(rows)  # (k, D)
            sq = (V * V).sum(1)
            coeff = torch.where(sq > tiny, (V @ w) / sq.clamp(min=tiny), torch.zeros_like(sq))
            w = w - coeff @ V
        rows.append(w)
    return torch.stack(rows)


class GramSchmidt(nn.Module):
    """Parametrization weight = :func:`gram_schmidt` (original weight), for ``torch.nn.utils.parametrize``.

    A weight with more than two dimensions (a convolution's ``(K, C, kh, kw)``) is orthogonalized as its
    K filters flattened to rows ``(K, C*kh*kw)`` and reshaped back.
    """

    def forward(self, W: torch.Tensor) -> torch.Tensor:
        return gram_schmidt(W.flatten(1)).reshape(W.shape)  # a 2-D weight passes through unchanged in shape


class _FlattenedFilters(nn.Module):
    """A matrix parametrization ``inner`` of a convolution weight's filters flattened to rows ``(K, C*kh*kw)``
    (the stored original), its output reshaped back to the weight's ``shape``."""

    inner: Any  # PyTorch's orthogonal parametrization (a module with right_inverse)

    def __init__(self, inner: nn.Module, shape: torch.Size) -> None:
        super().__init__()
        self.inner = inner
        self.shape = torch.Size(shape)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.inner(X).reshape(self.shape)

    @torch.no_grad()
    def right_inverse(self, W: torch.Tensor) -> torch.Tensor:
        return self.inner.right_inverse(W.reshape(self.shape[0], -1))


def _is_conv(module: nn.Module) -> bool:
    """A convolution whose weight is ``(out_channels, in_channels/groups, *kernel)`` (not a transposed one)."""
    return isinstance(module, nn.Conv1d | nn.Conv2d | nn.Conv3d)


def _check_linear(module: nn.Module, name: str) -> torch.Tensor:
    """The weight ``module.<name>`` checked for Eq 11: 2-D (K, D), or a convolution's (K, C, *kernel) with
    K <= C*prod(kernel) (its filters flattened to rows)."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"module: expected an nn.Module, got {type(module).__name__}")
    W = getattr(module, name, None)
    if _is_conv(module) and isinstance(W, torch.Tensor) and W.dim() >= 3:
        K, D = W.shape[0], W[0].numel()
        if K > D:
            raise ValueError(f"Eq 11 needs out_channels <= in_channels/groups * kernel size (mutually orthogonal "
                             f"filters: at most {D} in R^{D}), got out_channels = {K} > {D} "
                             f"(weight {tuple(W.shape)})")
        return W
    if not isinstance(W, torch.Tensor) or W.dim() != 2:
        raise ValueError(f"module.{name}: expected a 2-D weight (out_features, in_features) or a convolution "
                         f"weight, got {None if W is None else tuple(W.shape)}")
    if W.shape[0] > W.shape[1]:
        raise ValueError(f"Eq 11 needs out_features <= in_features (mutually orthogonal rows), got "
                         f"out_features = {W.shape[0]} > in_features = {W.shape[1]}")
    return W


def register_gram_schmidt(module: nn.Module, name: str = "weight") -> nn.Module:
    """Reparametrize ``module.<name>`` (e.g. ``nn.Linear.weight``) by :class:`GramSchmidt`; returns ``module``.

    The optimizer updates ``module.parametrizations.<name>.original``; ``module.<name>`` reads its Gram-Schmidt
    rows.  For a convolution the filters, flattened to rows, are orthogonalized (the original keeps its shape).
    :raises ValueError: out_features > in_features (for a convolution: more filters than filter entries).
    """
    _check_linear(module, name)
    parametrize.register_parametrization(module, name, GramSchmidt())
    return module


def register_orthogonal(module: nn.Module, name: str = "weight", **kwargs: Any) -> nn.Module:
    """PyTorch's ``torch.nn.utils.parametrizations.orthogonal`` on ``module.<name>``: orthonormal rows.

    ``kwargs`` go to ``orthogonal`` (``orthogonal_map``, ``use_trivialization``).  Rows have unit norm (unlike
    :func:`register_gram_schmidt`).  For a convolution the filters flattened to rows ``(K, C*prod(kernel))``
    are parametrized (applied to the 4-D weight, ``orthogonal`` would treat it as a batch of ``kh x kw``
    matrices).  Given more rows than columns ``orthogonal`` makes the *columns* orthonormal, which is not
    Eq 11, so this function refuses it.  A non-square initialization draws from torch's global RNG.
    :raises ValueError: out_features > in_features (for a convolution: out_channels > C*prod(kernel)).
    """
    W = _check_linear(module, name)
    if W.dim() == 2:
        return torch.nn.utils.parametrizations.orthogonal(module, name, **kwargs)
    # PyTorch's parametrization object, built by its public function on a holder of the flattened filters
    holder = nn.Module()
    holder.register_parameter("weight", nn.Parameter(W.detach().flatten(1).clone()))
    torch.nn.utils.parametrizations.orthogonal(holder, "weight", **kwargs)
    # torch types a module's attributes Tensor | Module: the parametrization list reads as a tensor
    inner: nn.Module = holder.parametrizations["weight"][0]  # type: ignore[index, assignment]
    parametrize.register_parametrization(module, name, _FlattenedFilters(inner, W.shape), unsafe=True)
    return module


def model_orthogonality_penalty(model: nn.Module, lam: float = 1.0) -> torch.Tensor:
    """Sum of :func:`orthogonality_penalty` over the weights of every ``nn.Linear`` and convolution
    (``nn.Conv1d/2d/3d``, filters flattened to rows ``(out_channels, in_channels/groups * kernel size)``)
    in ``model``; a model with neither gives 0."""
    terms = [orthogonality_penalty(m.weight.flatten(1), lam) for m in model.modules()  # type: ignore[operator]
             if isinstance(m, nn.Linear) or _is_conv(m)]
    return sum(terms[1:], terms[0]) if terms else torch.zeros(())


# ---------------------------------------------------------------------------------------------------------------
# Eq 11 for a convolution's matrix: every (filter, output position) is a unit, its row the filter at that shift
# ---------------------------------------------------------------------------------------------------------------

_Size = int | tuple[int, ...] | list[int]


@dataclass(frozen=True)
class _ConvGeometry:
    """Per spatial dimension: input size, kernel size, stride, left/right zero padding, dilation; output size."""

    input_size: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    pad_left: tuple[int, ...]
    pad_right: tuple[int, ...]
    dilation: tuple[int, ...]

    @property
    def output_size(self) -> tuple[int, ...]:
        return tuple((i + pl + pr - d * (k - 1) - 1) // s + 1 for i, k, s, pl, pr, d in
                     zip(self.input_size, self.kernel, self.stride, self.pad_left, self.pad_right, self.dilation,
                         strict=True))


def _tuple(name: str, value: int | Sequence[int] | str, nd: int, minimum: int) -> tuple[int, ...]:
    vals = (value,) * nd if isinstance(value, int) else tuple(value) if isinstance(value, tuple | list) else None
    if vals is None or len(vals) != nd or not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        raise TypeError(f"{name}: expected an int or {nd} ints, got {value!r}")
    if any(v < minimum for v in vals):
        raise ValueError(f"{name}: expected values >= {minimum}, got {value!r}")
    return vals


def _conv_geometry(conv: nn.Module | torch.Tensor, input_size: _Size, stride: int | Sequence[int] | None,
                   padding: int | Sequence[int] | str | None,
                   dilation: int | Sequence[int] | None) -> tuple[torch.Tensor, _ConvGeometry]:
    """The weight ``(K, C, *kernel)`` and the geometry of a Conv1d/2d module or a raw weight (groups = 1)."""
    if isinstance(conv, nn.Module):
        if not isinstance(conv, nn.Conv1d | nn.Conv2d):
            raise TypeError(f"conv: expected an nn.Conv1d, nn.Conv2d or a weight tensor, got {type(conv).__name__}")
        if stride is not None or padding is not None or dilation is not None:
            raise ValueError("stride/padding/dilation: given a module they are read from it; pass None")
        if conv.groups != 1:
            raise ValueError(f"conv: only groups = 1 is supported (one matrix over all input channels), "
                             f"got groups = {conv.groups}")
        if conv.padding_mode != "zeros":
            raise ValueError(f"conv: only padding_mode 'zeros' is supported, got {conv.padding_mode!r}")
        W, stride, padding, dilation = conv.weight, conv.stride, conv.padding, conv.dilation
    else:
        W = conv
        stride = 1 if stride is None else stride
        padding = 0 if padding is None else padding
        dilation = 1 if dilation is None else dilation
    if not isinstance(W, torch.Tensor) or not W.is_floating_point():
        raise TypeError(f"conv: expected a convolution module or a floating-point weight, got {type(W).__name__}")
    if W.dim() not in (3, 4):
        raise ValueError(f"conv: expected a Conv1d weight (K, C, k) or a Conv2d weight (K, C, kh, kw), "
                         f"got shape {tuple(W.shape)}")
    nd = W.dim() - 2
    kernel = tuple(W.shape[2:])
    size = _tuple("input_size", input_size, nd, 1)
    stride = _tuple("stride", stride, nd, 1)
    dilation = _tuple("dilation", dilation, nd, 1)
    if padding == "valid":
        left = right = (0,) * nd
    elif padding == "same":
        if any(s != 1 for s in stride):
            raise ValueError(f"padding: 'same' needs stride 1 (as in PyTorch), got stride {stride}")
        total = [d * (k - 1) for d, k in zip(dilation, kernel, strict=True)]
        left = tuple(t // 2 for t in total)  # PyTorch puts the odd extra zero on the right
        right = tuple(t - t // 2 for t in total)
    else:
        left = right = _tuple("padding", padding, nd, 0)
    geo = _ConvGeometry(size, kernel, stride, left, right, dilation)
    if any(o < 1 for o in geo.output_size):
        raise ValueError(f"input_size {size}: smaller than the dilated kernel {kernel} (dilation {dilation}) plus "
                         f"padding {left}/{right}; no output position")
    return W, geo


@functools.lru_cache(maxsize=256)
def _windows(size: int, k: int, s: int, pl: int, d: int, out: int) -> torch.Tensor:
    """``(out, k)`` bool: kernel tap a of output position i lands inside the unpadded input."""
    y = torch.arange(out)[:, None] * s - pl + torch.arange(k)[None, :] * d
    return (y >= 0) & (y < size)


@functools.lru_cache(maxsize=256)  # pure function of ints; a training loop asks for the same geometry each step
def _pair_patterns(size: int, k: int, s: int, pl: int, d: int, out: int, windows: bool) -> Any:
    """One spatial dimension's output-position pairs (i, i'), grouped by how their rows overlap.

    The rows of positions i and i' share input pixel y = i s - pl + a d = i' s - pl + a' d, inside the input,
    for the tap pairs E[a, a'] = 1.  Pairs with the same (i = i', E) have the same inner products; with
    ``windows`` also the same windows of i and i' (the taps inside the input: the two rows' norms, for the
    cosines).  Pairs that share no pixel are dropped (they add nothing to the penalty).  Returns the unique
    E ``(n, k, k)``, windows of i and i' ``(n, k)`` each (all ones unless ``windows``), ``same`` ``(n,)``
    (i = i'; never merged with i != i', whose E is off the diagonal) and counts ``(n,)``.
    """
    win = _windows(size, k, s, pl, d, out)  # (O, k)
    y = torch.arange(out)[:, None] * s - pl + torch.arange(k)[None, :] * d  # (O, k)
    E = (y[:, None, :, None] == y[None, :, None, :]) & win[:, None, :, None]  # (O, O, k, k)
    same = torch.eye(out, dtype=torch.bool)
    key = torch.cat([same.reshape(-1, 1), win[:, None, :].expand(out, out, k).reshape(-1, k),
                     win[None, :, :].expand(out, out, k).reshape(-1, k), E.reshape(-1, k * k)], 1)
    key = key[E.reshape(-1, k * k).any(1)]
    if not windows:
        key[:, 1:1 + 2 * k] = True
    uniq, counts = torch.unique(key.to(torch.int8), dim=0, return_counts=True)
    uniq = uniq.bool()
    return (uniq[:, 1 + 2 * k:].reshape(-1, k, k), uniq[:, 1:1 + k], uniq[:, 1 + k:1 + 2 * k], uniq[:, 0],
            counts)


_TAPS = ("pq", "uv")  # einsum letters of the kernel taps of the two filters of a pair (1 or 2 spatial dims)
_PATTERNS = "AB"


def _conv_gram_blocks(W: torch.Tensor, geo: _ConvGeometry, windows: bool = True) -> Any:
    """The convolution matrix's row Gram matrix, compressed: ``(C, same, counts, n1, n2)`` where for every
    combination of per-dimension pair patterns (A, B, ...), ``C[A, B, k, k']`` is the inner product of the rows
    (filter k, position x) and (filter k', position x') for any position pair of that pattern, ``counts[A, B]``
    how many ordered position pairs have it, ``same[A, B]`` whether they are the same position, and ``n1``,
    ``n2`` ``(..., K)`` the squared norms of the two rows (truncated filters at the input's boundary; only
    with ``windows``, which splits the patterns by the rows' windows, else fewer patterns).
    """
    nd = W.dim() - 2
    pats = [_pair_patterns(geo.input_size[i], geo.kernel[i], geo.stride[i], geo.pad_left[i], geo.dilation[i],
                           geo.output_size[i], windows) for i in range(nd)]
    t1, t2, P = _TAPS[0][:nd], _TAPS[1][:nd], _PATTERNS[:nd]
    E = [p[0].to(W.dtype) for p in pats]
    terms = ",".join(f"{P[i]}{t1[i]}{t2[i]}" for i in range(nd))
    # sum_c over channels and over the tap pairs each pattern allows: the truncated filters' correlation
    C = torch.einsum(f"kz{t1},lz{t2},{terms}->{P}kl", W, W, *E)
    sq = W.pow(2)
    wins1 = ",".join(f"{P[i]}{t1[i]}" for i in range(nd))
    n1 = torch.einsum(f"kz{t1},{wins1}->{P}k", sq, *[p[1].to(W.dtype) for p in pats])
    n2 = torch.einsum(f"kz{t1},{wins1}->{P}k", sq, *[p[2].to(W.dtype) for p in pats])
    same, counts = pats[0][3], pats[0][4]
    for p in pats[1:]:
        same = same[..., None] & p[3]
        counts = counts[..., None] * p[4]
    return C, same, counts.to(W.dtype), n1, n2


def _offdiagonal(C: torch.Tensor, same: torch.Tensor) -> torch.Tensor:
    """``C`` with the entries of a row with itself (same position, same filter) set to zero (not subtracted:
    no cancellation)."""
    K = C.shape[-1]
    own = same[..., None, None] & torch.eye(K, dtype=torch.bool, device=C.device)
    return torch.where(own, torch.zeros((), dtype=C.dtype, device=C.device), C)


def conv_orthogonality_penalty(conv: nn.Module | torch.Tensor, input_size: _Size, *, stride: _Size | None = None,
                               padding: _Size | str | None = None, dilation: _Size | None = None,
                               lam: float = 1.0) -> torch.Tensor:
    """Eq 11's penalty on the rows of a convolution's matrix, lambda sum over ordered pairs of distinct rows
    of <row, row'>^2, without building the matrix.

    The matrix ``M`` ``(K*prod(out), C*prod(input_size))`` of a convolution with zero padding maps the
    flattened input to the flattened output; its row (k, x) is filter k placed at output position x, with
    the taps that fall into the padding cut off (a truncated filter at the boundary).  Every (k, x) is a
    unit of the layer, so distinct rows include the same filter at two positions.  Computed from the
    filters' (truncated) auto- and cross-correlations: per spatial dimension, the ordered pairs of output
    positions (i, i') are grouped by the taps they share inside the input (offset (i - i') * stride and
    the boundary windows); each group's correlation ``C[k, k']`` is weighted by its number of position
    pairs, and the product of these counts over the dimensions weights ``C^2``.  Equal to
    ``orthogonality_penalty(M)`` (tested against the explicit matrix).

    :param conv: an ``nn.Conv1d`` / ``nn.Conv2d`` (groups = 1, zero padding; stride, padding, dilation are
        read from it) or its weight ``(K, C, k)`` / ``(K, C, kh, kw)``.
    :param input_size: the input's spatial size, an int or one int per spatial dimension.
    :param stride, padding, dilation: with a weight: ints or tuples (padding also 'valid' / 'same');
        defaults 1, 0, 1.  With a module: None.
    :returns: a differentiable 0-dim tensor.
    :raises ValueError / TypeError: lam < 0, groups != 1, a padding mode other than zeros, bad sizes.
    """
    if not lam >= 0:
        raise ValueError(f"lam: expected a weight >= 0, got {lam}")
    W, geo = _conv_geometry(conv, input_size, stride, padding, dilation)
    C, same, counts, _, _ = _conv_gram_blocks(W, geo, windows=False)
    nd = W.dim() - 2
    P = _PATTERNS[:nd]
    return lam * torch.einsum(f"{P},{P}kl->", counts, _offdiagonal(C, same).pow(2))


def conv_orthogonality_defect(conv: nn.Module | torch.Tensor, input_size: _Size, *, stride: _Size | None = None,
                              padding: _Size | str | None = None, dilation: _Size | None = None
                              ) -> OrthogonalityDefect:
    """:class:`OrthogonalityDefect` of a convolution's matrix rows (Eq 11 over every (filter, position) unit).

    Same convention as :func:`orthogonality_defect` of the explicit matrix ``M`` (arguments as in
    :func:`conv_orthogonality_penalty`): ``penalty`` = sum over ordered pairs of distinct rows of
    <r, r'>^2; ``relative`` = penalty / sum over the same pairs of |r|^2 |r'|^2, in [0, 1], 0 iff Eq 11,
    where the denominator is (sum_r |r|^2)^2 - sum_r |r|^4; ``max_abs_cosine`` over distinct rows (zero rows
    count as orthogonal).  No gradient.
    """
    W, geo = _conv_geometry(conv, input_size, stride, padding, dilation)
    with torch.no_grad():
        W = W.detach()
        C, same, counts, n1, n2 = _conv_gram_blocks(W, geo)
        nd = W.dim() - 2
        P = _PATTERNS[:nd]
        off = _offdiagonal(C, same)
        penalty = torch.einsum(f"{P},{P}kl->", counts, off.pow(2))
        # every row's squared norm: positions grouped by their window (the taps inside the input), per dimension
        sq = W.pow(2)
        t1 = _TAPS[0][:nd]
        wins, wcounts = [], []
        for i in range(nd):
            w, c = torch.unique(_windows(geo.input_size[i], geo.kernel[i], geo.stride[i], geo.pad_left[i],
                                         geo.dilation[i], geo.output_size[i]).to(torch.int8), dim=0,
                                return_counts=True)
            wins.append(w.to(W.dtype))
            wcounts.append(c.to(W.dtype))
        norms = torch.einsum(f"kz{t1}," + ",".join(f"{P[i]}{t1[i]}" for i in range(nd)) + f"->{P}k", sq, *wins)
        mult = torch.einsum(",".join(P) + f"->{P}", *wcounts) if nd > 1 else wcounts[0]
        total = torch.einsum(f"{P},{P}k->", mult, norms)
        fourth = torch.einsum(f"{P},{P}k->", mult, norms.pow(2))
        scale = total.pow(2) - fourth
        den = (n1[..., :, None] * n2[..., None, :]).clamp(min=0).sqrt()
        nonzero = den > 0
        cos = torch.where(nonzero, off / torch.where(nonzero, den, torch.ones_like(den)), torch.zeros_like(off))
        relative = float(penalty / scale) if float(scale) > 0 else 0.0
        return OrthogonalityDefect(float(penalty), relative, float(cos.abs().max()) if cos.numel() else 0.0)


def register_conv_orthogonal(module: nn.Module, input_size: _Size, *, method: str = "orthogonal",
                             **kwargs: Any) -> nn.Module:
    """Make the rows of a convolution's matrix orthogonal (Eq 11 for every (filter, position) unit), where
    orthogonal flattened filters are enough; returns ``module``.

    Supported: non-overlapping convolutions whose filters are never cut by the padding, i.e. in every spatial
    dimension stride >= dilation * (kernel - 1) + 1 and every output position's taps lie inside the
    unpadded input (e.g. padding 0).  Then rows at different positions have disjoint supports, and the
    rows at one position are the K filters themselves, so :func:`register_orthogonal` (``method =
    "orthogonal"``, orthonormal filters, ``kwargs`` passed on) or :func:`register_gram_schmidt` (``method =
    "gram_schmidt"``) on the flattened filters gives Eq 11 exactly.  Apodized (overlapping, tapered)
    filters, the paper's other case, are not implemented.

    :param module: an ``nn.Conv1d`` / ``nn.Conv2d`` with groups = 1 and zero padding.
    :param input_size: the input's spatial size (int or one per dimension).
    :raises ValueError: impossible (K * prod(output size) rows > C * prod(input_size) input entries: at most
        that many mutually orthogonal nonzero rows), unsupported (overlapping rows, or filters truncated
        by the padding), K > C * prod(kernel), or an unknown ``method``.
    """
    if method not in ("orthogonal", "gram_schmidt"):
        raise ValueError(f"method: expected 'orthogonal' or 'gram_schmidt', got {method!r}")
    W, geo = _conv_geometry(module, input_size, None, None, None)
    K, C = W.shape[:2]
    rows = K * math.prod(geo.output_size)
    entries = C * math.prod(geo.input_size)
    if rows > entries:
        raise ValueError(f"Eq 11 is impossible for this convolution: {K} filters x {math.prod(geo.output_size)} "
                         f"output positions {geo.output_size} = {rows} rows > {C} channels x input "
                         f"{geo.input_size} = {entries} input entries")
    span = tuple(d * (k - 1) + 1 for d, k in zip(geo.dilation, geo.kernel, strict=True))
    if any(s < e for s, e in zip(geo.stride, span, strict=True)):
        raise ValueError(f"unsupported: overlapping rows (stride {geo.stride} < dilated kernel extent {span}); "
                         "orthogonal filters do not make shifted copies orthogonal, and apodized filters are "
                         "not implemented")
    for i in range(len(geo.kernel)):
        if not bool(_windows(geo.input_size[i], geo.kernel[i], geo.stride[i], geo.pad_left[i], geo.dilation[i],
                             geo.output_size[i]).all()):
            raise ValueError(f"unsupported: the padding {geo.pad_left}/{geo.pad_right} cuts filters at the "
                             f"boundary of input {geo.input_size} (truncated orthogonal filters are not "
                             "orthogonal in general); use padding 0")
    if method == "orthogonal":
        return register_orthogonal(module, **kwargs)
    if kwargs:
        raise TypeError(f"register_conv_orthogonal: method 'gram_schmidt' takes no options, got {sorted(kwargs)}")
    return register_gram_schmidt(module)
