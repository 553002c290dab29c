"""Orthogonal MASO layers (``docs/theory.md`` §3, Eq 11): penalty, defect measure, reparametrizations.

Eq 11 asks <A[k,r,:], A[k',r',:]> = 0 for every pair of different units k != k' and all pieces r, r';
then the factorial mixture's joint MAP splits into the K per-unit MAPs (the layer's MASO).  For a
fully connected ReLU layer (pieces 0 and W_k) it says: the rows of W are mutually orthogonal, which
needs K <= D.  Tools:

- :func:`orthogonality_penalty`: the paper's lambda sum_{k != k'} sum_{r,r'} <A[k,r], A[k',r']>^2 (added
  to the loss in its experiment, lambda = 1); differentiable.
- :func:`orthogonality_defect`: how far from Eq 11 -- the penalty, the penalty normalized by
  sum_{k != k'} sum_{r,r'} |A[k,r]|^2 |A[k',r']|^2 (a weighted mean of squared cosines, in [0, 1]: 0 iff
  Eq 11 holds, 1 iff all pieces are parallel), and the max |cosine| between pieces of different units.
- :func:`gram_schmidt` / :class:`GramSchmidt` / :func:`register_gram_schmidt`: the authors' exact
  alternative, unnormalized classical Gram-Schmidt of the rows (each row keeps its own length),
  differentiable, as a ``torch.nn.utils.parametrize`` parametrization of a ``Linear`` weight.
- :func:`register_orthogonal`: PyTorch's own ``torch.nn.utils.parametrizations.orthogonal`` (orthonormal
  rows; maintained upstream, numerically the safer choice) wired to the same convention.

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
        denom = torch.outer(torch.where(nonzero, norms, torch.ones_like(norms)),
                            torch.where(nonzero, norms, torch.ones_like(norms)))
        cos = (gram / denom) * (cross & nonzero[:, None] & nonzero[None, :])
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
    """Parametrization weight = :func:`gram_schmidt` (original weight), for ``torch.nn.utils.parametrize``."""

    def forward(self, W: torch.Tensor) -> torch.Tensor:
        return gram_schmidt(W)


def _check_linear(module: nn.Module, name: str) -> torch.Tensor:
    if not isinstance(module, nn.Module):
        raise TypeError(f"module: expected an nn.Module, got {type(module).__name__}")
    W = getattr(module, name, None)
    if not isinstance(W, torch.Tensor) or W.dim() != 2:
        raise ValueError(f"module.{name}: expected a 2-D weight (out_features, in_features), got "
                         f"{None if W is None else tuple(W.shape)}")
    if W.shape[0] > W.shape[1]:
        raise ValueError(f"Eq 11 needs out_features <= in_features (mutually orthogonal rows), got "
                         f"out_features = {W.shape[0]} > in_features = {W.shape[1]}")
    return W


def register_gram_schmidt(module: nn.Module, name: str = "weight") -> nn.Module:
    """Reparametrize ``module.<name>`` (e.g. ``nn.Linear.weight``) by :class:`GramSchmidt`; returns ``module``.

    The stored ``module.parametrizations.<name>.original`` is what the optimizer updates; reading
    ``module.<name>`` gives its Gram-Schmidt rows.
    :raises ValueError: out_features > in_features.
    """
    _check_linear(module, name)
    parametrize.register_parametrization(module, name, GramSchmidt())
    return module


def register_orthogonal(module: nn.Module, name: str = "weight", **kwargs) -> nn.Module:
    """PyTorch's ``torch.nn.utils.parametrizations.orthogonal`` on ``module.<name>``: orthonormal rows.

    ``kwargs`` go to ``orthogonal`` (``orthogonal_map``, ``use_trivialization``).  Rows have unit norm
    (unlike :func:`register_gram_schmidt`); follow the layer by a scale if the norms matter.
    :raises ValueError: out_features > in_features (``orthogonal`` would make the *columns* orthonormal).
    """
    _check_linear(module, name)
    return torch.nn.utils.parametrizations.orthogonal(module, name, **kwargs)


def model_orthogonality_penalty(model: nn.Module, lam: float = 1.0) -> torch.Tensor:
    """Sum of :func:`orthogonality_penalty` over the weights of every ``nn.Linear`` in ``model``."""
    total = None
    for m in model.modules():
        if isinstance(m, nn.Linear):
            p = orthogonality_penalty(m.weight, lam)
            total = p if total is None else total + p
    if total is None:
        return torch.zeros(())
    return total
