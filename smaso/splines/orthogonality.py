"""Orthogonal MASO layers (``docs/theory.md`` §3.8, Eq 11: <A[k,r,:], A[k',r',:]> = 0 for k != k', the
penalty, and what it buys the factorial mixture): penalty, defect measure, reparametrizations.

Convolutions.  A convolution weight ``(K, C, kh, kw)`` (any ``nn.Conv1d/2d/3d``) is treated as its K
*filters* flattened to rows ``(K, C*kh*kw)``: the penalty, Gram-Schmidt and ``orthogonal`` act on those
rows, so the filters become mutually orthogonal (K <= C*kh*kw needed, as K <= D for a ``Linear``).  That is
the usual "orthogonal filters" of a CNN.  It is not all of Eq 11 for the layer's convolution matrix,
whose rows are the shifted copies of the filters (not orthogonal in general; the paper's Appendix E.4
asks for non-overlapping or apodized filters for that).

Classical Gram-Schmidt loses orthogonality in floating point when the rows are nearly dependent
(error ~ eps * cond(W)^2); check :func:`orthogonality_defect` or prefer :func:`register_orthogonal`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils import parametrize

__all__ = [
    "GramSchmidt",
    "OrthogonalityDefect",
    "gram_schmidt",
    "model_orthogonality_penalty",
    "orthogonality_defect",
    "orthogonality_penalty",
    "register_gram_schmidt",
    "register_orthogonal",
]


def _pieces(A) -> torch.Tensor:
    """Slopes as ``(K, R, D)`` from a MASO, a ``(K, R, D)`` tensor or a ``(K, D)`` weight (R = 1)."""
    from smaso.splines.maso import MASO

    if isinstance(A, MASO):
        A = A.A
    if not isinstance(A, torch.Tensor) or not A.is_floating_point():
        raise TypeError(f"A: expected a MASO or a floating-point tensor, got {type(A).__name__}")
    if A.dim() == 2:
        return A[:, None, :]
    if A.dim() != 3:
        raise ValueError(f"A: expected slopes (K, R, D) or a weight (K, D), got shape {tuple(A.shape)}")
    return A


def _cross_gram(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gram matrix of all pieces ``(K*R, K*R)`` and the mask of pairs from different units."""
    K, R, D = A.shape
    flat = A.reshape(K * R, D)
    gram = flat @ flat.T
    unit = torch.arange(K, device=A.device).repeat_interleave(R)
    return gram, unit[:, None] != unit[None, :]


def orthogonality_penalty(A, lam: float = 1.0) -> torch.Tensor:
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


@dataclass(frozen=True)
class OrthogonalityDefect:
    """Distance of a MASO layer from Eq 11.

    :ivar penalty: sum_{k != k'} sum_{r,r'} <A[k,r], A[k',r']>^2 (lambda = 1).
    :ivar relative: penalty / sum_{k != k'} sum_{r,r'} |A[k,r]|^2 |A[k',r']|^2, in [0, 1] (0 iff Eq 11).
    :ivar max_abs_cosine: max |cos(A[k,r], A[k',r'])| over k != k' (zero pieces count as orthogonal).
    """

    penalty: float
    relative: float
    max_abs_cosine: float

    @property
    def orthogonal(self) -> bool:
        """Eq 11 up to rounding (max |cosine| below 1e-6)."""
        return self.max_abs_cosine < 1e-6


def orthogonality_defect(A) -> OrthogonalityDefect:
    """:class:`OrthogonalityDefect` of a MASO, slopes ``(K, R, D)`` or a weight ``(K, D)`` (no gradient)."""
    with torch.no_grad():
        A = _pieces(A)
        gram, cross = _cross_gram(A)
        sq = torch.diagonal(gram)
        penalty = (gram.pow(2) * cross).sum()
        scale = (torch.outer(sq, sq) * cross).sum()
        norms = sq.clamp(min=0).sqrt()
        nonzero = norms > 0
        safe = torch.where(nonzero, norms, torch.ones_like(norms))
        cos = (gram / torch.outer(safe, safe)) * (cross & nonzero[:, None] & nonzero[None, :])
        relative = float(penalty / scale) if float(scale) > 0 else 0.0
        return OrthogonalityDefect(float(penalty), relative, float(cos.abs().max()) if cos.numel() else 0.0)


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


def register_orthogonal(module: nn.Module, name: str = "weight", **kwargs) -> nn.Module:
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
    inner = holder.parametrizations["weight"][0]
    parametrize.register_parametrization(module, name, _FlattenedFilters(inner, W.shape), unsafe=True)
    return module


def model_orthogonality_penalty(model: nn.Module, lam: float = 1.0) -> torch.Tensor:
    """Sum of :func:`orthogonality_penalty` over the weights of every ``nn.Linear`` and convolution
    (``nn.Conv1d/2d/3d``, filters flattened to rows ``(out_channels, in_channels/groups * kernel size)``)
    in ``model``; a model with neither gives 0."""
    terms = [orthogonality_penalty(m.weight.flatten(1), lam) for m in model.modules()
             if isinstance(m, nn.Linear) or _is_conv(m)]
    return sum(terms[1:], terms[0]) if terms else torch.zeros(())
