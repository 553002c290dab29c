"""The conserved row energy of Batch Norm (framework paper §7.5.1, Eq 80-81; ``docs/theory.md`` §1.12
has Eq 80 with the bias, why E_x[u_j g_j] = 0 at BN levels, the bias and bn_eps precisions and the
discrete-step drift rates).

A node's energy sums *all* its incoming weights: the column ``W[l][c, :, j]`` of every child region c of
j's region.  :func:`row_energies` (hidden levels 1..d-1; the top has no BN), :func:`energy_rates` and
:func:`ug_correlation` are the terms of Eq 80-81; :func:`energy_drift` trains a
:class:`~smaso.student.network.LadderStudent` by full-batch gradient descent and records the energies;
:func:`drift_exponent` fits the exponent; :func:`plot_energy` draws the energy over training with and
without BN.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from smaso import _ladder_parts
from smaso.student.network import LadderStudent, StudentRecord
from smaso.theorems.conditions import _positive_int
from teachers.sampling import LadderSample

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from torch import nn

__all__ = ["EnergyTrajectory", "drift_exponent", "energy_drift", "energy_rates", "plot_energy", "row_energies",
           "ug_correlation"]


def _check_student(student: object) -> None:
    if not isinstance(student, LadderStudent):
        raise TypeError(f"student: expected a LadderStudent, got {type(student).__name__}")


def _incoming(student: LadderStudent, level: int, W: torch.Tensor) -> torch.Tensor:
    """``(R_{l+1}, n_{l+1}, n_l)`` -> ``(R_l, b_l n_{l+1}, n_l)``: all incoming weights of each node."""
    lad = student.ladder
    b = _ladder_parts.uniform_branching(lad)[level]
    return W.reshape(lad.num_regions[level], b * student.widths[level + 1], student.widths[level])


def _levels(student: LadderStudent, levels: Sequence[int] | None) -> list[int]:
    d = student.ladder.depth
    if levels is None:
        return list(range(1, d))
    levels = [int(v) for v in levels]
    bad = [v for v in levels if not 0 <= v < d]
    if bad:
        raise ValueError(f"levels: expected levels in 0..{d - 1} (levels with incoming weights), got {bad}")
    return levels


@torch.no_grad()
def row_energies(student: LadderStudent, *, include_bias: bool = False,
                 levels: Sequence[int] | None = None) -> dict[int, torch.Tensor]:
    """Row energies E_j = 1/2 sum of squares of all incoming weights of node j (§7.5.1, Eq 81).

    :param include_bias: add 1/2 b_j^2 (the energy that is conserved when the student has biases).
    :param levels: levels to report (default: the hidden levels 1..d-1).
    :returns: ``{level: (R_l, n_l) tensor}``.
    """
    _check_student(student)
    return _per_node(student, levels, include_bias, student.weights, student.biases, 0.5)


@torch.no_grad()
def energy_rates(student: LadderStudent, rec: StudentRecord, *, include_bias: bool = False,
                 levels: Sequence[int] | None = None) -> dict[int, torch.Tensor]:
    """dE_j/dt under gradient flow: sum_k w_jk Delta w_jk (+ b_j Delta b_j), left side of Eq 80.

    :returns: ``{level: (R_l, n_l) tensor}``, from the weights the record ``rec`` was computed with.
    """
    _check_student(student)
    return _per_node(student, levels, include_bias, rec.dW, rec.db, 1.0)


def _per_node(student: LadderStudent, levels: Sequence[int] | None, include_bias: bool,
              dW: Sequence[torch.Tensor] | nn.ParameterList,
              db: Sequence[torch.Tensor | None] | nn.ParameterList | None, scale: float) -> dict[int, torch.Tensor]:
    """``{level: (R_l, n_l)}`` scale (sum_k w_jk dW_jk (+ b_j db_j)): the energy (dW = W, scale 1/2) or its rate."""
    out = {}
    for l in _levels(student, levels):
        W = student.weights[l].detach()
        r = scale * (_incoming(student, l, W) * _incoming(student, l, dW[l].detach())).sum(1)
        if include_bias and student.biases is not None and db is not None:  # db is None only without biases
            db_l = cast(torch.Tensor, db[l])  # the biases or a record's bias updates: set, as the student has biases
            r = r + scale * student.biases[l].detach() * db_l.detach()
        out[l] = r
    return out


def ug_correlation(rec: StudentRecord, levels: Iterable[int]) -> dict[int, torch.Tensor]:
    """E_x[u_j g_j] per node, right side of Eq 80 (= E_x[f_j g_f_j] for homogeneous activations).

    :returns: ``{level: (R_l, n_l) tensor}``.
    """
    return {l: (rec.u[l] * rec.g[l]).mean(0) for l in levels}


@dataclass
class EnergyTrajectory:
    """Result of :func:`energy_drift`.

    :ivar energies: ``{level: (steps + 1, R_l, n_l)}`` row energies before each step and at the end.
    :ivar relative_drift: ``(steps + 1,)`` max over nodes of |E_j(t) - E_j(0)| / E_j(0).
    :ivar max_relative_drift: max of ``relative_drift`` over the trajectory.
    :ivar predicted_increments: ``{level: (steps, R_l, n_l)}`` lr^2/2 (|Delta W_j.|^2 (+ Delta b_j^2))
        per step: the exact energy change of a step when the first-order term vanishes (BN).
    :ivar first_order: ``{level: (steps, R_l, n_l)}`` lr E_x[u_j g_j] per step (0 with BN).
    :ivar losses: ``(steps + 1,)`` training loss before each step (last: after training).
    """

    lr: float
    steps: int
    batch_norm: bool
    include_bias: bool
    energies: dict[int, torch.Tensor]
    relative_drift: torch.Tensor
    max_relative_drift: float
    predicted_increments: dict[int, torch.Tensor]
    first_order: dict[int, torch.Tensor]
    losses: torch.Tensor

    @property
    def time(self) -> float:
        """Continuous time lr * steps reached by the trajectory (the gradient-flow clock of §7.5.1)."""
        return self.lr * self.steps

    def total_energy(self) -> torch.Tensor:
        """``(steps + 1,)`` sum of the row energies of all reported nodes."""
        # started from zeros, so that no reported level gives (steps + 1,) zeros, not the int 0
        return sum((e.flatten(1).sum(1) for e in self.energies.values()),
                   torch.zeros(self.steps + 1, dtype=torch.float64))


def energy_drift(sample: LadderSample, lr: float, steps: int, batch_norm: bool, *, student: LadderStudent | None = None,
                 width: int | list[int] = 4, bias: bool = False, include_bias: bool | None = None,
                 activation: str = "relu", bn_eps: float = 0.0, init_scale: float = 1.0, seed: int = 0,
                 loss: str = "squared", num_examples: int | None = None, levels: Sequence[int] | None = None,
                 progress: bool = False) -> EnergyTrajectory:
    """Train by full-batch gradient descent and record the row energies (§7.5.1).

    Every step is ``rec = student.forward_backward(x, y); student.apply_update(rec, lr)`` on the
    whole sample (float64).  With BN (``batch_norm=True``, ``bn_eps=0``) and a homogeneous
    activation the energies of the hidden levels change only at second order per step.

    :param sample: a :class:`~teachers.sampling.LadderSample` (its first ``num_examples`` examples).
    :param lr: step size (> 0).
    :param steps: number of gradient steps (>= 1).
    :param batch_norm: BN after the activation of every hidden node.
    :param student: an existing float64 student to train in place (then ``width``, ``bias``,
        ``activation``, ``bn_eps``, ``init_scale``, ``seed`` and ``batch_norm`` are not used).
    :param include_bias: count 1/2 b_j^2 in the energy (default: whenever the student has biases).
    :param levels: levels to record (default: hidden levels 1..d-1).
    :param progress: show a tqdm bar over the steps.
    """
    if not isinstance(sample, LadderSample):
        raise TypeError(f"sample: expected a LadderSample, got {type(sample).__name__}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr: expected a finite positive number, got {lr!r}")
    steps = _positive_int(steps, "steps")
    if student is None:
        student = LadderStudent(sample.ladder, width, activation=activation, batch_norm=batch_norm, bias=bias,
                                bn_eps=bn_eps, init_scale=init_scale, seed=seed, dtype=torch.float64)
    _check_student(student)
    if student.ladder is not sample.ladder:
        raise ValueError("student: its ladder is not the sample's ladder")
    if student.weights[0].dtype != torch.float64:
        raise ValueError("student: energy conservation is checked in float64; build the student with dtype=float64")
    if include_bias is None:
        include_bias = student.biases is not None
    idx = slice(None) if num_examples is None else slice(0, int(num_examples))
    x, y = sample.inputs(idx, dtype=torch.float64), sample.y[idx]
    levels = _levels(student, levels)
    energies: dict[int, Any] = {l: [] for l in levels}  # lists of (R_l, n_l) per step, then stacked
    incr: dict[int, list[torch.Tensor]] = {l: [] for l in levels}
    first: dict[int, list[torch.Tensor]] = {l: [] for l in levels}
    losses = []
    step_range = range(steps)
    if progress:
        from tqdm.auto import tqdm

        step_range = tqdm(step_range, desc=f"gradient descent ({'BN' if student.batch_norm else 'no BN'})")
    for _ in step_range:
        for l, e in row_energies(student, include_bias=include_bias, levels=levels).items():
            energies[l].append(e)
        rec = student.forward_backward(x, y, loss=loss)
        losses.append(rec.loss)
        for l in levels:
            dw2 = _incoming(student, l, rec.dW[l]).pow(2).sum(1)
            if include_bias and student.biases is not None:
                dw2 = dw2 + rec.db[l].pow(2)
            incr[l].append(0.5 * lr**2 * dw2)
        for l, r in energy_rates(student, rec, include_bias=include_bias, levels=levels).items():
            first[l].append(lr * r)
        student.apply_update(rec, lr)
    for l, e in row_energies(student, include_bias=include_bias, levels=levels).items():
        energies[l].append(e)
    losses.append(student.forward_backward(x, y, loss=loss).loss)
    energies = {l: torch.stack(v) for l, v in energies.items()}
    rel = torch.stack([((e - e[:1]).abs() / e[:1]).flatten(1).amax(1) for e in energies.values()], 0).amax(0)
    return EnergyTrajectory(float(lr), int(steps), bool(student.batch_norm), bool(include_bias), energies, rel,
                            float(rel.max()), {l: torch.stack(v) for l, v in incr.items()},
                            {l: torch.stack(v) for l, v in first.items()}, torch.tensor(losses, dtype=torch.float64))


def drift_exponent(sample: LadderSample, lrs: Sequence[float], batch_norm: bool, *, steps: int | None = None,
                   time: float | None = None, **kwargs: Any) -> tuple[float, list[float]]:
    """Exponent p of max relative drift ~ lr^p from a least-squares fit of log drift on log lr.

    Give exactly one of ``steps`` (same number of steps for every lr: expect p = 2 with BN, 1
    without) or ``time`` (steps = round(time / lr): expect p = 1 with BN, ~0 without;
    ``docs/theory.md`` §1.12).  ``kwargs`` go to :func:`energy_drift` (same initialization for every lr).

    :returns: ``(p, drifts)``.
    """
    lrs = [float(v) for v in lrs]
    if len(lrs) < 2 or len(set(lrs)) < 2:
        raise ValueError(f"lrs: expected at least two distinct step sizes, got {lrs}")
    if (steps is None) == (time is None):
        raise ValueError("drift_exponent: give exactly one of steps= or time=")
    drifts = []
    for lr in lrs:
        n = steps if steps is not None else max(1, round(cast(float, time) / lr))  # time is set: checked above
        drifts.append(energy_drift(sample, lr, n, batch_norm, **kwargs).max_relative_drift)
    if not all(d > 0 for d in drifts):
        raise ValueError(f"drift_exponent: a drift is zero ({drifts}); no exponent to fit")
    p = np.polyfit(np.log(lrs), np.log(drifts), 1)[0]
    return float(p), drifts


def plot_energy(sample: LadderSample, lr: float = 0.05, steps: int = 400, path: str | os.PathLike | None = None,
                **kwargs: Any) -> tuple[Figure, dict[str, EnergyTrajectory]]:
    """Figure: total hidden-level row energy (relative to its start) over training, with and
    without BN, plus the training losses.  Writes ``path`` when given.

    :returns: ``(figure, {"bn": EnergyTrajectory, "no_bn": EnergyTrajectory})``.
    """
    from smaso.plots._base import plt, save_figure

    runs = {"bn": energy_drift(sample, lr, steps, True, **kwargs),
            "no_bn": energy_drift(sample, lr, steps, False, **kwargs)}
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in (("bn", "with BN"), ("no_bn", "without BN")):
        run = runs[key]
        t = np.arange(run.steps + 1) * run.lr
        e = run.total_energy().numpy()
        ax.plot(t, e / e[0], label=f"{label} (max row drift {run.max_relative_drift:.2g})")
        ax2.plot(t, run.losses.numpy(), label=label)
    ax.set_xlabel("training time lr x steps")
    ax.set_ylabel("hidden row energy / initial")
    ax.set_title(f"§7.5.1 row energy, lr = {lr:g}")
    ax.legend()
    ax2.set_xlabel("training time lr x steps")
    ax2.set_ylabel("loss")
    ax2.set_yscale("log")
    ax2.legend()
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path, dpi=120)
    return fig, runs
