"""``torch.einsum`` of three or more operands with its contraction path computed once per equation and shapes.

``torch.einsum`` asks opt_einsum for the contraction path on every call (about 0.2 ms of Python for three operands,
more than the contraction itself on the diagnosis' small tensors: issue 39's profile of ``smaso demo``, where the
reformulation's per-edge products run tens of thousands of times).  :func:`einsum` asks once per
``(equation, shapes, strategy)`` and hands the path to the same kernel, so its result is ``torch.einsum``'s bit for
bit.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import torch
from torch.backends import opt_einsum
from torch.overrides import has_torch_function

__all__ = ["einsum"]


@lru_cache(maxsize=1024)
def _path(equation: str, shapes: tuple[tuple[int, ...], ...], strategy: str) -> list[int]:
    """The flattened contraction path ``torch.einsum`` computes for these operands' shapes (opt_einsum's path
    depends on the equation and the shapes only)."""
    _opt = opt_einsum.get_opt_einsum()
    return [*itertools.chain.from_iterable(_opt.contract_path(equation, *shapes, shapes=True, optimize=strategy)[0])]


def einsum(equation: str, *operands: torch.Tensor) -> torch.Tensor:
    """``torch.einsum(equation, *operands)``, the same kernel and contraction path (so the same bits), the path
    cached by the operands' shapes; where ``torch.einsum`` would not ask opt_einsum (two operands or fewer, or
    opt_einsum off or missing) or the operands override torch functions, ``torch.einsum`` itself."""
    if len(operands) <= 2 or not opt_einsum.enabled or not opt_einsum.is_available() or has_torch_function(operands):
        return torch.einsum(equation, *operands)
    path = _path(equation, tuple(tuple(o.shape) for o in operands), opt_einsum.strategy)
    return torch._VF.einsum(equation, operands, path=path)  # type: ignore[attr-defined]
