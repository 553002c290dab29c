"""train_ladder_student builds its minibatches on the student's device (issue 39): the dataset crosses to the device
once and each epoch's order once, instead of a host gather and a copy from pageable memory every step.  Checked on
a meta student fed host data, counting every ``Tensor.to`` that changes device (a TorchFunctionMode sees them all);
the CPU run's losses and weights are the host-batched loop's bit for bit."""

from __future__ import annotations

import math

import torch
from torch.overrides import TorchFunctionMode

from smaso.student.network import LadderStudent
from smaso.student.training import train_ladder_student
from teachers.ladder import Ladder

LAD = Ladder.default()


class _Transfers(TorchFunctionMode):
    """Records the shape of every tensor that ``Tensor.to`` moves to another device."""

    def __init__(self) -> None:
        super().__init__()
        self.moved: list[tuple[int, ...]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.Tensor.to and isinstance(out, torch.Tensor) and out.device != args[0].device:
            self.moved.append(tuple(args[0].shape))
        return out


def _data(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, LAD.num_regions[-1], LAD.emission.dim, generator=g),
            torch.randint(0, LAD.num_classes, (n,), generator=g))


def test_the_data_crosses_to_the_device_once() -> None:
    st = LadderStudent(LAD, 4, device="meta")
    x, y = _data(20)
    with _Transfers() as mode:
        history = train_ladder_student(st, x, y, steps=12, lr=0.1, batch_size=4)  # 5 batches an epoch: 3 epochs
    assert len(history) == 12 and all(math.isnan(v) for v in history)
    # the dataset (x, y) once and each epoch's order (20,) once; before, a (4, ...) batch pair every step
    assert sorted(mode.moved) == sorted([tuple(x.shape), (20,), (20,), (20,), (20,)])


def _host_batched(student: LadderStudent, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float, bs: int,
                  seed: int) -> list[float]:
    """The loop before issue 39, batches gathered on the host (the reference of the CPU results)."""
    gen, n = torch.Generator().manual_seed(seed), x.shape[0]
    order, pos, out = torch.arange(n), n, []
    for _ in range(steps):
        if pos + bs > n:
            order, pos = torch.randperm(n, generator=gen), 0
        idx = order[pos: pos + bs]
        pos += bs
        rec = student.forward_backward(x[idx], y[idx])
        out.append(rec.loss)
        student.apply_update(rec, lr)
    return out


def test_cpu_results_unchanged_bit_for_bit() -> None:
    x, y = _data(50, seed=1)
    for dtype in (torch.float32, torch.float64):
        got, want = LadderStudent(LAD, 4, seed=2, dtype=dtype), LadderStudent(LAD, 4, seed=2, dtype=dtype)
        assert train_ladder_student(got, x, y, steps=30, lr=0.05, batch_size=8, seed=3) == \
            _host_batched(want, x, y, 30, 0.05, 8, 3)
        assert all(torch.equal(a, b) for a, b in zip(got.parameters(), want.parameters(), strict=True))
