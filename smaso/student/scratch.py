"""Scratch buffers kept per object outside its state: memory a hot loop writes again on every call, reused instead
of allocated afresh (a fresh allocation of tens of MB faults in its pages on every call), never pickled or copied
with the object, and freed with it."""

from __future__ import annotations

import weakref
from typing import Any

import torch

__all__ = ["scratch_buffer", "scratch_dict", "scratch_out"]

_BUFFERS: weakref.WeakKeyDictionary[Any, dict[str, torch.Tensor]] = weakref.WeakKeyDictionary()


def scratch_dict(owner: Any) -> dict[str, torch.Tensor]:
    """``owner``'s scratch buffers by name (a dict kept beside the object, not in it; freed with it)."""
    return _BUFFERS.setdefault(owner, {})


def scratch_buffer(owner: Any, name: str, shape: tuple[int, ...], dtype: torch.dtype,
                   device: torch.device) -> torch.Tensor:
    """``owner``'s buffer ``name`` of ``shape``, ``dtype`` on ``device`` (uninitialized): the one returned last time
    when it fits, else a new one that replaces it.  Two users of one owner's buffer must not run at once."""
    mine = scratch_dict(owner)
    buf = mine.get(name)
    if buf is None or tuple(buf.shape) != tuple(shape) or buf.dtype != dtype or buf.device != torch.device(device):
        buf = mine[name] = torch.empty(shape, dtype=dtype, device=device)
    return buf


def scratch_out(owner: Any, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor | None:
    """An op's ``out=``: ``owner``'s buffer ``name`` of ``shape`` in ``like``'s dtype and device
    (:func:`scratch_buffer`), or None without an owner (then the op allocates its result)."""
    return None if owner is None else scratch_buffer(owner, name, shape, like.dtype, like.device)
