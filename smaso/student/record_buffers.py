"""Where :meth:`~smaso.student.network.LadderStudent.forward_backward` writes one batch's per-example tensors.

With ``stacked=True`` the fields that frequency statistics sum live in one buffer per level (``(R_l, k, n_l, N)``,
:class:`~smaso.student.network.StudentRecord`); a caller streaming over batches hands the previous record's
``rec.stacked`` back, and then the pass writes into the same memory.  A reused pass also writes its other
batch-sized tensors (the pre-activations u, the grouped copies of stacked outputs, the raw gradients, Delta W) into
the student's scratch buffers (:mod:`smaso.student.scratch`) instead of allocating them afresh: glibc hands freed
blocks of a few MB back to the system, so each fresh one faulted in its pages again on every batch (hundreds to
thousands of minor faults per batch of 1024 in ``bench_student``'s statistics pass, none after).  The values are
the same bit for bit; the previous record of that student is overwritten, every field of it, not only its stacked
ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["RecordBuffers"]


class RecordBuffers:
    """One pass's stacked buffers (new, reused, or none) and the owner of its scratch buffers.

    :param owner: whose scratch buffers a reused pass writes into (the student).
    :param stacked: ``forward_backward``'s argument: False (no stacked buffers), True (new ones), or a previous
        record's ``rec.stacked``, reused when every buffer has the shape of ``shapes``, ``dtype`` and ``device`` and is
        contiguous (else new ones are made, and nothing is reused).
    :param keys: the stacked fields, in the order of a buffer's slots.
    :param shapes: per level l < d the buffer's shape ``(R_l, k, n_l, N)``.
    """

    def __init__(self, owner: object, stacked: Any, keys: Sequence[str], shapes: Sequence[tuple[int, ...]],
                 dtype: torch.dtype, device: torch.device):
        if not isinstance(stacked, (bool, list, tuple)):
            raise TypeError(f"stacked: expected a bool or a previous record's buffers, got {type(stacked).__name__}")
        self.reuse = not isinstance(stacked, bool) and len(stacked) == len(shapes) and all(
            isinstance(b, torch.Tensor) and tuple(b.shape) == shape and b.dtype == dtype and b.device == device
            and b.is_contiguous() for b, shape in zip(stacked, shapes, strict=False))
        self.stacked = stacked is not False  # buffers to reuse also mean "stacked"
        self.keys = tuple(keys)
        self.buffers: list[Any] = (list(stacked) if self.reuse  # type: ignore[arg-type]  # reuse: a list
                                   else [torch.empty(shape, dtype=dtype, device=device) if self.stacked else None
                                         for shape in shapes])
        #: the owner of the pass's scratch buffers when it reuses stacked ones, else None (fresh tensors)
        self.owner = owner if self.reuse else None

    def slot(self, level: int, key: str) -> torch.Tensor | None:
        """Where field ``key`` of ``level`` is written: a slot of the stacked buffer, or None (a new tensor)."""
        return self.buffers[level][:, self.keys.index(key)] if self.stacked and key in self.keys else None

    def put(self, level: int, key: str, value: torch.Tensor) -> torch.Tensor:
        """``value`` copied into its slot (:meth:`slot`), or ``value`` itself where it has none."""
        out = self.slot(level, key)
        return value if out is None else out.copy_(value)
