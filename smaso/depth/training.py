"""The two pieces every depth experiment trains with: a seeded ReLU MLP R -> R (:func:`make_student`) and one
optimiser loop (:func:`optimise`), shared by :mod:`smaso.depth.separation` (one network at a time) and
:mod:`smaso.depth.population` (many restarts as one batched network)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

__all__ = ["DT", "INITS", "make_student", "optimise"]

DT = torch.float64


INITS = ("torch", "spread")


def make_student(widths: Sequence[int], seed: int = 0, dtype: torch.dtype = DT, *,
                 init: str = "torch") -> nn.Sequential:
    """A ReLU MLP R -> R with hidden widths ``widths``, seeded.

    :param init: ``"torch"`` (PyTorch's default init) or ``"spread"``: He-normal weights
        N(0, 2 / fan_in) and biases U(-1/2, 1/2), which puts the first layer's kinks inside
        [0, 1] and keeps fewer units dead in deep narrow networks (used for the random-start
        deep students).
    """
    if not widths or any(int(m) < 1 for m in widths):
        raise ValueError(f"widths: expected at least one positive hidden width, got {list(widths)}")
    if init not in INITS:
        raise ValueError(f"init: expected one of {INITS}, got {init!r}")
    # PyTorch's default init of every Linear, drawn from a local generator in the order nn.Linear
    # draws it (weight, then bias): the same numbers as torch.manual_seed(seed) + nn.Linear, without
    # touching the global RNG
    gen = torch.Generator().manual_seed(seed)
    dims = [1, *map(int, widths), 1]
    layers: list[nn.Module] = []
    for a, b in itertools.pairwise(dims):
        lin = nn.Linear(a, b, device="meta").to_empty(device="cpu")  # meta: its own init draws nothing
        with torch.no_grad():
            nn.init.kaiming_uniform_(lin.weight, a=math.sqrt(5), generator=gen)
            lin.bias.uniform_(-1 / math.sqrt(a), 1 / math.sqrt(a), generator=gen)
        layers += [lin, nn.ReLU()]
    net = nn.Sequential(*layers[:-1]).to(dtype)  # no ReLU after the output layer
    if init == "spread":
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for m in net:
                if isinstance(m, nn.Linear):
                    m.weight.copy_(torch.randn(m.weight.shape, generator=gen, dtype=dtype)
                                   * math.sqrt(2 / m.in_features))
                    m.bias.copy_(torch.rand(m.bias.shape, generator=gen, dtype=dtype) - 0.5)
    return net


def optimise(params: Iterable[torch.Tensor], objective: Callable[[], tuple[torch.Tensor, torch.Tensor]], *,
             steps: int, lr: float,
             optimizer: str, schedule: str, progress: bool,
             desc: str, summary: Callable[[torch.Tensor], str]) -> list[torch.Tensor]:
    """The training loop of :func:`train_student` and :func:`smaso.depth.population.train_population`.

    ``steps`` steps of ``optimizer`` (``"sgd"`` or ``"adam"``, learning rate ``lr``; with
    ``schedule="onecycle"`` PyTorch's ``OneCycleLR`` peaking at ``lr``) on ``objective() -> (value to
    minimise, value to record)``.  Returns the recorded values (detached) every ``max(1, steps // 20)``
    steps; with ``progress`` a tqdm bar shows ``summary(recorded)``.  Raises ValueError for another
    ``optimizer`` or ``schedule``.
    """
    if optimizer not in ("sgd", "adam"):
        raise ValueError(f"optimizer: expected 'sgd' or 'adam', got {optimizer!r}")
    if schedule not in ("constant", "onecycle"):
        raise ValueError(f"schedule: expected 'constant' or 'onecycle', got {schedule!r}")
    opt = (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam)(params, lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps) if schedule == "onecycle" else None
    every = max(1, steps // 20)
    history: list[torch.Tensor] = []
    bar = _bar(progress, steps, desc)
    for step in range(steps):
        total, record = objective()
        opt.zero_grad()
        total.backward()
        opt.step()
        if sched is not None:
            sched.step()
        if step % every == 0:
            history.append(record.detach())
            if bar is not None:
                bar.set_postfix_str(summary(history[-1]), refresh=False)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return history


def _bar(progress: bool, total: int, desc: str) -> Any:
    """A tqdm bar, or None when ``progress`` is off (tqdm is then not even imported)."""
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, leave=False)
