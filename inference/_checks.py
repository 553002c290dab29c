"""Argument checks and the one error for impossible inputs, shared by the exact-inference modules
(:mod:`inference.sum_product`, :mod:`inference.junction_tree`, :mod:`inference.event_draws`,
:mod:`inference.posterior`)."""

from __future__ import annotations

import torch

from teachers.ladder import _check_ladder as check_ladder
from teachers.sampling import _count

__all__ = ["check_chunk_size", "check_device", "check_ladder", "raise_impossible"]


def raise_impossible(log_z: torch.Tensor, start: int = 0, teacher: str = "the ladder") -> None:
    """Raise a ValueError naming the examples (rows ``start + i``) whose log evidence ``log_z`` ``(B,)`` is -inf:
    impossible under ``teacher`` (e.g. a leaf input that is not one-hot for a one-hot emission).

    The one host sync of an exact-inference call, after its passes; skipped on the meta device, which holds no
    values to check (the meta tier runs the passes to find syncs and device mismatches inside them)."""
    if log_z.device.type == "meta":
        return
    bad = torch.isneginf(log_z).nonzero().flatten()
    if len(bad):
        first = (bad[:5] + start).tolist()
        raise ValueError(f"x: example(s) {first}{' ...' if len(bad) > 5 else ''} have probability 0 under "
                         f"{teacher} (e.g. a leaf input that is not one-hot for a one-hot emission); their "
                         "posterior is undefined")


def check_device(device: torch.device | str | None, x: torch.Tensor) -> torch.device:
    """The device to compute on: ``device``, else ``x``'s (a bad name is a ValueError naming the argument)."""
    if device is None:
        return x.device
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device: expected a torch device, got {device!r} ({e})") from None


def check_chunk_size(chunk_size: int | None, default: int) -> int:
    """``chunk_size`` as an int (``default`` when None), or a ValueError: a positive integer is required."""
    if chunk_size is None:
        return max(1, int(default))
    return _count(chunk_size, "chunk_size")
