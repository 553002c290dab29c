"""Training a student by minibatch SGD with its explicit backward pass (framework paper Eq 2: W += lr Delta W).

:func:`~smaso.student.compare.compare_student` has its own loop (streaming, checkpoints); both stop with
:class:`TrainingDiverged`.
"""

from __future__ import annotations

import math
import numbers

import torch

from smaso.student.network import LadderStudent, _check_int, _check_student

__all__ = ["TrainingDiverged", "check_hyper", "train_ladder_student"]


class TrainingDiverged(RuntimeError):
    """Training produced a non-finite loss, weight or statistic (the message names the step)."""


def check_hyper(name: str, v: object, *, positive: bool) -> None:
    """Raise a ValueError unless ``v`` is a finite real number >= 0 (> 0 with ``positive``), naming ``name``."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0 or (positive and v == 0):
        want = "a finite number > 0" if positive else "a finite number >= 0"
        raise ValueError(f"{name}: expected {want}, got {v!r}")


def train_ladder_student(student: LadderStudent, x: torch.Tensor, y: torch.Tensor, *, steps: int, lr: float,
                  batch_size: int | None = None, loss: str = "squared", weight_decay: float = 0.0,
                  seed: int = 0) -> list[float]:
    """Minibatch SGD on ``(x, y)`` with the explicit backward pass (:meth:`LadderStudent.forward_backward`, then
    :meth:`~LadderStudent.apply_update`: W += lr (Delta W - 2 weight_decay W), Eq 2).

    Each epoch visits the rows in a random order drawn from a local ``torch.Generator`` seeded with ``seed``
    (the global RNG is untouched); ``batch_size=None`` is full-batch gradient descent.

    :param x: ``(N, leaves, dim)`` inputs; ``y``: ``(N,)`` labels, on any device: they are moved to the student's
        once, and each minibatch is gathered there.
    :returns: the loss of every step (the batch's mean loss before that step's update).
    :raises TrainingDiverged: a non-finite loss or weight (the message names the step). The step itself never
        waits for the device: the labels are range-checked once before the loop, and the losses and finite checks
        stay on the device until a checkpoint (every :data:`CHECK_EVERY` steps and the last), which raises for the
        first bad step as a per-step check would.
    """
    _check_student(student)
    steps = _check_int(steps, "steps", 0)
    check_hyper("lr", lr, positive=True)
    check_hyper("weight_decay", weight_decay, positive=False)
    student.check_inputs(x)
    n = x.shape[0]
    if n == 0:
        raise ValueError("x: the dataset is empty")
    bs = n if batch_size is None else _check_int(batch_size, "batch_size", 1)
    bs = min(bs, n)
    gen = torch.Generator().manual_seed(_check_int(seed, "seed", 0))
    student._check_labels(x, y, loss)  # the labels' range once, here where the data enters, not per step
    dev = student.weights[0].device
    # the dataset on the student's device once (no copy where it is already), batches gathered there: no host
    # copy per step; the epoch's order is drawn on the host (the generator's stream, the same batches on every
    # device) and moved once per epoch
    x, y = x.to(dev), y.to(dev)
    # per step, kept on the device and read at checkpoints: the loss, and whether a weight left the finite range
    losses = torch.empty(steps, dtype=student.weights[0].dtype, device=dev)
    weight_bad = torch.zeros(steps, dtype=torch.bool, device=dev)
    history: list[float] = []
    order, pos = torch.arange(n), n
    for step in range(steps):
        if bs < n:
            if pos + bs > n:
                order, pos = torch.randperm(n, generator=gen).to(dev, non_blocking=True), 0
            idx = order[pos: pos + bs]
            pos += bs
            xb, yb = x[idx], y[idx]
        else:
            xb, yb = x, y
        rec = student.forward_backward(xb, yb, loss, labels_checked=True)
        lt = rec.loss_tensor
        losses[step] = lt if lt is not None else rec.loss  # (forward_backward always leaves the tensor)
        student.apply_update(rec, lr, weight_decay)
        weight_bad[step] = torch.stack([torch.isfinite(w).all() for w in student.weights]).logical_not().any()
        if (step + 1) % CHECK_EVERY == 0 or step + 1 == steps:
            _checkpoint(losses, weight_bad, len(history), step + 1, history)
    return history


#: Steps between two host reads of the deferred finite checks (each a sync on an accelerator); a diverged run
#: stops at most this many steps after the step it names.
CHECK_EVERY = 256


def _checkpoint(losses: torch.Tensor, weight_bad: torch.Tensor, start: int, stop: int, history: list[float]) -> None:
    """Read steps ``start .. stop-1``'s losses and weight flags from the device (one sync), append the losses to
    ``history`` and raise :class:`TrainingDiverged` at the first non-finite one, with the message a per-step check
    gives (the loss, read before the step's update, is checked before its weights). Meta tensors hold no values:
    nothing is read and ``history`` gets NaN."""
    if losses.device.type == "meta":
        history.extend([math.nan] * (stop - start))
        return
    # one transfer for both: bool -> the loss dtype is exact (0/1), and the values read back are the loss floats
    vals, bad = torch.stack([losses[start:stop], weight_bad[start:stop].to(losses.dtype)]).tolist()
    for step, (value, weight) in enumerate(zip(vals, bad, strict=True), start):
        if not math.isfinite(value):
            raise TrainingDiverged(f"step {step}: the loss is {value}")
        history.append(value)
        if weight:
            raise TrainingDiverged(f"step {step}: a weight is no longer finite")
