"""Students of one architecture trained as one batched population, each member on its own training set.

A sample-complexity sweep (:mod:`smaso.sweep`) trains one student per (training-set size P, seed); the runs of
one architecture differ in their initial weights, their training rows and their minibatch order, not in their
shapes.  :func:`train_student_population` stacks the members' parameters (``torch.func.stack_module_state``) and makes
one step of every member one vmapped forward pass and one backward pass of the *sum* of the members' losses:

    L(theta_1, ..., theta_R) = sum_r [ loss_r(theta_r; x_r[B_r], y_r[B_r]) + lambda sum_W ||W_r||_F^2 ],

where B_r is member r's own minibatch.  Member r's parameters enter only its own term, so dL / d theta_r is the
gradient member r would compute alone, and the optimizers offered (:data:`OPTIMIZERS`: SGD, Adam, AdamW,
RMSprop) update every entry from that entry's own gradient history, so member r takes exactly the steps it would
take alone.  ``tests/test_sweep.py`` checks member by member against
:func:`~smaso.student.training.train_ladder_student` (the explicit backward of Eq 2, trained one at a time) to
1e-10 in float64.  The minibatches are drawn as that function draws them (:class:`Minibatches`).

Members must share their minibatch size (a member with fewer rows than the minibatch trains full-batch, so
members of different sizes below the minibatch go in different populations: :func:`effective_batch`).  A
student whose forward pass cannot run under ``torch.vmap`` is trained with ``batched=False``: the same steps, one
member after the other.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from smaso.student.network import LOSSES, _check_int, student_loss
from smaso.student.training import check_hyper

__all__ = ["OPTIMIZERS", "Minibatches", "PopulationFit", "classification_error", "effective_batch",
           "train_student_population"]

#: Optimizers whose update of an entry reads only that entry's gradients (so a stacked population is exact).
OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop")


def effective_batch(n: int, batch_size: int | None) -> int:
    """The minibatch a member with ``n`` training rows trains on: ``min(batch_size, n)`` (``n`` for None: full batch),
    as :func:`~smaso.student.training.train_ladder_student` does."""
    n = _check_int(n, "n", 1)
    return n if batch_size is None else min(_check_int(batch_size, "batch_size", 1), n)


class Minibatches:
    """The row indices of every step for ``n`` rows, minibatch ``batch_size`` (None: every row each step): epochs
    of ``torch.randperm(n)`` from a ``torch.Generator`` seeded ``seed``, a new epoch when the current one has fewer
    than a minibatch left (the order :func:`~smaso.student.training.train_ladder_student` visits rows in)."""

    def __init__(self, n: int, batch_size: int | None, seed: int) -> None:
        self.n = _check_int(n, "n", 1)
        self.batch = effective_batch(self.n, batch_size)
        self._gen = torch.Generator().manual_seed(_check_int(seed, "seed", 0))
        self._order, self._pos = torch.arange(self.n), self.n

    def next(self) -> torch.Tensor:
        """The next step's row indices, int64 ``(batch,)``."""
        if self.batch == self.n:
            return self._order
        if self._pos + self.batch > self.n:
            self._order, self._pos = torch.randperm(self.n, generator=self._gen), 0
        idx = self._order[self._pos: self._pos + self.batch]
        self._pos += self.batch
        return idx


def _decayed_default(name: str) -> bool:
    """The Frobenius regularizer's parameters: weight matrices (``weights.i`` of a ladder student, ``*.weight`` of
    ``nn.Linear``), not biases nor Batch Norm's scales."""
    return name.split(".")[0] == "weights" or name.endswith("weight")


@dataclass
class PopulationFit:
    """What :func:`train_student_population` returns.

    :ivar students: the trained members, each a separate module (copies; the inputs are not changed).
    :ivar losses: ``(steps, R)`` float64: each member's minibatch loss before each step (without the regularizer).
    :ivar diverged: per member, the first step whose loss was not finite (None: it stayed finite).
    :ivar batched: whether the members were stepped together (vmapped) or one after the other.
    """

    students: list[nn.Module]
    losses: torch.Tensor
    diverged: list[int | None]
    batched: bool


def _check_members(students: Sequence[nn.Module], xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor],
                   seeds: Sequence[int]) -> int:
    R = len(students)
    if R == 0:
        raise ValueError("students: expected at least one member")
    for name, v in (("xs", xs), ("ys", ys), ("seeds", seeds)):
        if len(v) != R:
            raise ValueError(f"{name}: expected one per student ({R}), got {len(v)}")
    first = [(k, p.shape, p.dtype) for k, p in students[0].named_parameters()]
    for r, (s, x, y) in enumerate(zip(students, xs, ys, strict=True)):
        if not isinstance(s, nn.Module):
            raise TypeError(f"students[{r}]: expected an nn.Module, got {type(s).__name__}")
        if type(s) is not type(students[0]) or [(k, p.shape, p.dtype) for k, p in s.named_parameters()] != first:
            raise ValueError(f"students[{r}]: every member must have the architecture of students[0]")
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or x.shape[0] != y.shape[0] \
                or x.shape[0] == 0:
            raise ValueError(f"xs[{r}], ys[{r}]: expected tensors with the same positive number of rows")
        if x.shape[1:] != xs[0].shape[1:]:
            raise ValueError(f"xs[{r}]: expected rows of shape {tuple(xs[0].shape[1:])}, got {tuple(x.shape[1:])}")
    return R


def train_student_population(students: Sequence[nn.Module], xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor], *,
                     steps: int, lr: float, seeds: Sequence[int], batch_size: int | None = None,
                     loss: str = "squared", optimizer: str = "sgd", weight_decay: float = 0.0,
                     decayed: Callable[[str], bool] = _decayed_default, batched: bool = True) -> PopulationFit:
    """Train R students of one architecture, member r on its own ``(xs[r], ys[r])`` (module docstring).

    :param students: R modules of one class and parameter shapes, each ``x (N, ...) -> scores (N, classes)``.
    :param xs, ys: member r's training inputs ``(n_r, ...)`` and integer labels ``(n_r,)``.
    :param steps, lr, batch_size, loss, weight_decay: as :func:`~smaso.student.training.train_ladder_student`
        (``loss``: ``"squared"`` or ``"cross_entropy"``, :func:`~smaso.student.network.student_loss`); the
        regularizer ``weight_decay * sum ||W||_F^2`` covers the parameters whose name ``decayed`` accepts.
    :param seeds: member r's minibatch order (:class:`Minibatches`).
    :param optimizer: one of :data:`OPTIMIZERS` (torch.optim's, at ``lr``).
    :param batched: step the members together under ``torch.vmap`` (False: one after the other, the same steps).
    :raises ValueError: members of different architectures or minibatch sizes, bad hyper-parameters.
    """
    R = _check_members(students, xs, ys, seeds)
    steps = _check_int(steps, "steps", 0)
    check_hyper("lr", lr, positive=True)
    check_hyper("weight_decay", weight_decay, positive=False)
    if loss not in LOSSES:
        raise ValueError(f"loss: expected one of {LOSSES}, got {loss!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer: expected one of {OPTIMIZERS} (elementwise, so members stay independent), "
                         f"got {optimizer!r}")
    if not batched:
        fits = [train_student_population([s], [x], [y], steps=steps, lr=lr, seeds=[sd], batch_size=batch_size,
                                         loss=loss, optimizer=optimizer, weight_decay=weight_decay, decayed=decayed,
                                         batched=True)
                for s, x, y, sd in zip(students, xs, ys, seeds, strict=True)]
        return PopulationFit([f.students[0] for f in fits], torch.cat([f.losses for f in fits], dim=1),
                             [f.diverged[0] for f in fits], batched=False)
    batches = {effective_batch(x.shape[0], batch_size) for x in xs}
    if len(batches) != 1:
        raise ValueError(f"xs: members of one population need one minibatch size, got {sorted(batches)} (members "
                         "with fewer rows than batch_size train full-batch: put them in populations of their own)")
    orders = [Minibatches(x.shape[0], batch_size, _check_int(sd, "seeds", 0)) for x, sd in zip(xs, seeds, strict=True)]
    trained = [copy.deepcopy(s) for s in students]
    params, buffers = torch.func.stack_module_state(trained)
    base = copy.deepcopy(trained[0]).to("meta")  # the architecture only: functional_call supplies every tensor
    dev = next(iter(params.values())).device
    X = torch.cat(list(xs)).to(dev)
    Y = torch.cat(list(ys)).to(dev)
    offsets = torch.tensor([0, *[x.shape[0] for x in xs]], device=dev).cumsum(0)[:-1]
    names = [k for k in params if decayed(k)]

    def member_loss(p: dict, b: dict, xb: torch.Tensor, yb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        data = student_loss(torch.func.functional_call(base, (p, b), (xb,)), yb, loss)
        reg = sum((p[k] ** 2).sum() for k in names) if weight_decay else 0.0
        return data + weight_decay * reg, data

    step_losses = torch.func.vmap(member_loss)
    # plain SGD by hand: the step torch.optim.SGD takes (p -= lr grad), without its first step's import of
    # torch._dynamo (a second or more)
    opt = None if optimizer == "sgd" else {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW,
                                           "rmsprop": torch.optim.RMSprop}[optimizer](list(params.values()), lr=lr)
    history = torch.empty(steps, R, dtype=torch.float64)
    for step in range(steps):
        idx = torch.stack([o.next().to(dev) for o in orders]) + offsets[:, None]  # (R, batch) rows of X
        total, data = step_losses(params, buffers, X[idx], Y[idx])
        for p in params.values():
            p.grad = None
        total.sum().backward()
        if opt is None:
            with torch.no_grad():
                for p in params.values():
                    p.add_(p.grad, alpha=-lr)
        else:
            opt.step()
        history[step] = data.detach().to(torch.float64).cpu()
    finite = torch.isfinite(history)
    diverged = [None if bool(finite[:, r].all()) else int((~finite[:, r]).nonzero()[0, 0]) for r in range(R)]
    with torch.no_grad():
        for r, s in enumerate(trained):
            for k, p in s.named_parameters():
                p.copy_(params[k][r])
    return PopulationFit(trained, history, diverged, batched=R > 1)


@torch.no_grad()
def classification_error(student: nn.Module, x: torch.Tensor, y: torch.Tensor, *, chunk: int = 4096) -> float:
    """The fraction of rows whose highest score is not the label, in chunks of ``chunk`` rows moved to the student's
    device and dtype (a student with Batch Norm normalizes by each chunk's statistics); NaN for a student whose
    scores are not finite on some row, and ``ValueError`` for no rows."""
    chunk = _check_int(chunk, "chunk", 1)
    if x.shape[0] == 0:
        raise ValueError("x: no rows to measure an error on")
    param = next(student.parameters())
    wrong = 0
    for lo in range(0, x.shape[0], chunk):
        out = student(x[lo: lo + chunk].to(device=param.device, dtype=param.dtype))
        if not bool(torch.isfinite(out).all()):
            return math.nan
        wrong += int((out.argmax(-1).cpu() != y[lo: lo + chunk].cpu()).sum())
    return wrong / x.shape[0]
