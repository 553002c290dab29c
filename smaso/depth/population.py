"""Many random restarts trained as one: a population of 1-D ReLU students (``docs/theory.md`` §2.3, "Many
restarts as one network": why member r ends where it would if trained alone, checked against ``torch.optim``).

:class:`StudentPopulation` holds R networks as batched weights, :func:`train_population` trains them with one
step per minibatch, :func:`population_l1_error` finds the best of R; member r is seeded by
:func:`member_seed` ``(seed, r)`` alone.

Initialisations (``init=``): ``"torch"`` (PyTorch's default, as :func:`smaso.depth.training.make_student`),
``"spread"`` (``make_student(init="spread")``), ``"data"``: every hidden unit gets N(0, 1) input weights, a
bias putting its kink at a fraction U(0.05, 0.95) of the range of its pre-activation over the grid
``(i + 1/2) / 256`` of [0, 1], and is rescaled to unit standard deviation there (no unit starts dead); the
readout starts near the constant 1/2 (weights N(0, 0.1^2), bias 1/2).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from smaso.depth.bracket import _check_int, _check_widths
from smaso.depth.training import make_student, optimise
from teachers.tent import tent_power

__all__ = [
    "INITS",
    "LOSSES",
    "StudentPopulation",
    "member_seed",
    "population_l1_error",
    "train_population",
]

INITS = ("torch", "spread", "data")
LOSSES = ("l1", "squared")
_INIT_GRID = 256


def member_seed(seed: int, member: int) -> int:
    """The seed of member ``member`` of a population seeded ``seed``: a 63-bit hash of the pair
    (NumPy's ``SeedSequence``), so members of nearby population seeds are unrelated."""
    seed, member = _check_int("seed", seed, 0), _check_int("member", member, 0)
    return int(np.random.SeedSequence([seed, member]).generate_state(1, np.uint64)[0] >> np.uint64(1))


class StudentPopulation(nn.Module):
    """R independent ReLU networks R -> R with hidden widths ``widths``, held as batched weights.

    :param widths: hidden widths m_1..m_L (L >= 1).
    :param size: R, the number of members.
    :param seed: member r is initialised from :func:`member_seed` ``(seed, r)``.
    :param init: ``"torch"``, ``"spread"`` or ``"data"`` (module docstring).
    :param dtype, device: of the parameters (default float64 on the CPU).

    Parameters: ``weights[i]`` of shape ``(R, m_{i+1}, m_i)`` and ``biases[i]`` of shape
    ``(R, m_{i+1})`` with m_0 = 1 and m_{L+1} = 1.
    """

    def __init__(self, widths: Sequence[int], size: int, *, seed: int = 0, init: str = "data",
                 dtype: torch.dtype = torch.float64, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.widths = _check_widths(widths)
        self.size = _check_int("size", size, 1)
        if init not in INITS:
            raise ValueError(f"init: expected one of {INITS}, got {init!r}")
        if not dtype.is_floating_point:
            raise TypeError(f"dtype: expected a floating dtype, got {dtype}")
        self.seed, self.init = _check_int("seed", seed, 0), init
        members = [self._initial_member(r) for r in range(self.size)]
        linears = [[m for m in net if isinstance(m, nn.Linear)] for net in members]
        self.weights = nn.ParameterList(
            nn.Parameter(torch.stack([lin[i].weight.detach() for lin in linears]).to(device=device, dtype=dtype))
            for i in range(len(self.widths) + 1))
        self.biases = nn.ParameterList(
            nn.Parameter(torch.stack([lin[i].bias.detach() for lin in linears]).to(device=device, dtype=dtype))
            for i in range(len(self.widths) + 1))

    def _initial_member(self, r: int) -> nn.Sequential:
        s = member_seed(self.seed, r)
        if self.init != "data":
            return make_student(self.widths, s, init=self.init)
        net = make_student(self.widths, s)  # the shapes; every number is redrawn below
        gen = torch.Generator().manual_seed(s)
        h = (torch.arange(_INIT_GRID, dtype=torch.float64)[:, None] + 0.5) / _INIT_GRID
        linears = [m for m in net if isinstance(m, nn.Linear)]
        with torch.no_grad():
            for lin in linears[:-1]:
                W = torch.randn(lin.weight.shape, generator=gen, dtype=torch.float64)
                z = h @ W.T  # (grid, units)
                # the kink strictly inside the range of the unit's input, so it is live on both sides
                u = 0.05 + 0.9 * torch.rand(W.shape[0], generator=gen, dtype=torch.float64)
                lo, hi = z.min(dim=0).values, z.max(dim=0).values
                b = -(lo + u * (hi - lo))
                scale = (z + b).std(dim=0).clamp_min(1e-6)  # a constant input (std 0) keeps its scale
                lin.weight.copy_(W / scale[:, None])
                lin.bias.copy_(b / scale)
                h = torch.relu(lin(h))
            out = linears[-1]
            out.weight.copy_(0.1 * torch.randn(out.weight.shape, generator=gen, dtype=torch.float64))
            out.bias.fill_(0.5)
        return net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Every member on the inputs ``x``.

        :param x: ``(n, 1)`` (the same inputs for every member) or ``(R, n, 1)``.
        :returns: ``(R, n, 1)``.
        """
        if x.dim() not in (2, 3) or x.shape[-1] != 1 or (x.dim() == 3 and x.shape[0] != self.size):
            raise ValueError(f"x: expected shape (n, 1) or ({self.size}, n, 1), got {tuple(x.shape)}")
        h = x
        last = len(self.weights) - 1
        for i, (W, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = torch.matmul(h, W.transpose(1, 2)) + b[:, None, :]
            if i < last:
                h = torch.relu(h)
        return h

    def member(self, r: int) -> nn.Sequential:
        """A detached copy of member ``r`` as a plain ``Linear``/``ReLU`` ``nn.Sequential``."""
        r = _check_int("r", r, 0)
        if r >= self.size:
            raise ValueError(f"r: expected a member index < {self.size}, got {r}")
        layers: list[nn.Module] = []
        for i, (W, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            lin = nn.Linear(W.shape[2], W.shape[1], dtype=W.dtype, device="meta").to_empty(device=W.device)
            with torch.no_grad():
                lin.weight.copy_(W[r])
                lin.bias.copy_(b[r])
            layers.append(lin)
            if i < len(self.weights) - 1:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)

    def frobenius(self) -> torch.Tensor:
        """sum_i ||W_i||_F^2 per member, ``(R,)`` (biases not penalised, as in the lecture)."""
        return sum((W**2).sum(dim=(1, 2)) for W in self.weights)

    def extra_repr(self) -> str:
        return f"widths={self.widths}, size={self.size}, seed={self.seed}, init={self.init!r}"


def train_population(pop: StudentPopulation, k: int, *, steps: int = 3000, batch: int = 256, n_train: int = 8192,
                     lr: float = 0.1, loss: str = "l1", optimizer: str = "adam", schedule: str = "onecycle",
                     frobenius: float = 0.0, seed: int = 0, progress: bool = False,
                     desc: str | None = None) -> torch.Tensor:
    """Train every member of ``pop`` on tau^k, in place, as independent networks.

    Data: a fixed sample x ~ U[0, 1] of ``n_train`` points drawn from a generator seeded ``seed``
    (``torch.rand(n_train, 1)``), then ``steps`` minibatches ``torch.randint(0, n_train, (batch,))``
    from the same generator, shared by all members.  Member r minimises
    ``mean_batch ell(h_r(x) - tau^k(x)) + frobenius * sum_i ||W_{r,i}||_F^2`` with ell = |.|
    (``loss="l1"``, the error the experiment reports) or (.)^2 (``"squared"``, the lecture's ERM).

    :param optimizer: ``"adam"`` or ``"sgd"``, with (peak) learning rate ``lr``.
    :param schedule: ``"onecycle"`` (PyTorch's ``OneCycleLR``: warm-up, then cosine decay to ~0)
        or ``"constant"``.
    :param progress: a tqdm bar over the steps.
    :returns: the minibatch losses every ``max(1, steps // 20)`` steps, ``(records, R)``, on the CPU.
    """
    if not isinstance(pop, StudentPopulation):
        raise TypeError(f"pop: expected a StudentPopulation, got {type(pop).__name__}")
    k = _check_int("k", k, 0)
    steps, batch, n_train = (_check_int(name, v, 1) for name, v in (("steps", steps), ("batch", batch),
                                                                      ("n_train", n_train)))
    if loss not in LOSSES:
        raise ValueError(f"loss: expected one of {LOSSES}, got {loss!r}")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr: expected a positive finite learning rate, got {lr!r}")
    if not (math.isfinite(frobenius) and frobenius >= 0):
        raise ValueError(f"frobenius: expected a non-negative finite weight, got {frobenius!r}")
    W0 = pop.weights[0]
    gen = torch.Generator().manual_seed(_check_int("seed", seed, 0))
    x = torch.rand(n_train, 1, generator=gen, dtype=torch.float64)
    y = tent_power(x, k).to(device=W0.device, dtype=W0.dtype)
    x = x.to(device=W0.device, dtype=W0.dtype)
    def objective() -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.randint(0, n_train, (batch,), generator=gen).to(x.device)
        r = pop(x[idx]) - y[idx]
        per_member = (r.abs() if loss == "l1" else r**2).mean(dim=(1, 2))
        total = per_member.sum()  # the members' own losses: member r's gradient is its own
        if frobenius:
            total = total + frobenius * pop.frobenius().sum()
        return total, per_member

    history = optimise(pop.parameters(), objective, steps=steps, lr=lr, optimizer=optimizer, schedule=schedule,
                       progress=progress, desc=desc or f"{pop.size} students on tau^{k}",
                       summary=lambda h: f"best={float(h.min()):.3g}")
    return torch.stack(history).cpu()


def population_l1_error(pop: StudentPopulation, k: int, n_grid: int | None = None) -> torch.Tensor:
    """integral_0^1 |tau^k - h_r| for every member, ``(R,)`` float64 on the CPU: the midpoint rule on
    the grid of :func:`smaso.depth.separation.l1_error` (the same numbers to rounding, member by member)."""
    k = _check_int("k", k, 0)
    if n_grid is None:
        n_grid = min(2**22, max(2**16, 64 * 2**k))
    n_grid = _check_int("n_grid", n_grid, 1)
    W0 = pop.weights[0]
    # a chunk of the grid at a time: R x chunk x widest layer numbers resident
    chunk = max(1, 2**22 // (pop.size * max(pop.widths)))
    total = torch.zeros(pop.size, dtype=torch.float64, device=W0.device)
    with torch.no_grad():
        for lo, hi in itertools.pairwise([*range(0, n_grid, chunk), n_grid]):
            x = (torch.arange(lo, hi, dtype=torch.float64, device=W0.device)[:, None] + 0.5) / n_grid
            h = pop(x.to(W0.dtype)).to(torch.float64)
            total += (h - tent_power(x, k)).abs().sum(dim=(1, 2))
    return (total / n_grid).cpu()
