"""Frequency statistics: the student's activations, gates and gradients averaged per teacher event.

For every region alpha (level l) and node j of its group, over the examples of a dataset
(framework paper Eq 6):

    F[a, j]    = E[f_j | z_alpha = a]       Fbar: the same after BN (= F without BN)
    D[a, j]    = E[s_j | z_alpha = a]       forward gate, s = f / u (0/1 for ReLU)
    Dp[a, j]   = E[f'_j | z_alpha = a]      backward gate (= D for ReLU)
    G[a, j]    = E[g_j | z_alpha = a]       G~ = diag(P(z_alpha)) G
    U, Gf      = E[u | z], E[g_f | z]       raw activation and gradient (for the diagnosis)
    Fc[a, k]   = E[fbar_k | z_parent = a]   child k's output given its *parent's* event (focus)
    Gp~[b, j]  = P(z_b = b) E[g_j | z_child = b]   parent j's gradient given a child's event (broadness)

All are sums accumulated with ``index_add_`` (one scatter per level and batch), so they
stream over batches; they are kept in float64 by default.  Events never observed are
reported in ``empty_events`` and their rows are zero, never 0/0.  ``dW`` is the measured
weight update E_x[fbar_b g_a] averaged over the batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from teachers.ladder import Ladder
from teachers.statistics import EventStatistics, empirical_statistics

from .student import LadderStudent, StudentRecord

__all__ = ["FrequencyAccumulator", "FrequencyStatistics", "collect_statistics"]

# per-level quantities, in the order they are stacked for the single scatter per level
_OWN = ("Fbar", "F", "D", "Dp", "U", "G", "Gf")


@dataclass
class FrequencyStatistics:
    """Measured per-event statistics of a student on a dataset (see the module docstring).

    Dicts map a quantity name to a list over levels ``l = 0..d`` of ``(R_l, m_l, n_l)`` tensors
    (None where undefined: at the leaves only ``Fbar`` = E[x | z]).  ``Fc[l]`` is
    ``(R_l, m_{l-1}, n_l)`` and ``Gp_tilde[l]`` is ``(R_l, m_l, n_{l-1})`` (l >= 1).
    ``counts[l]``: ``(R_l, m_l)`` example counts; ``P``: the empirical event statistics.
    """

    ladder: Ladder
    num_examples: int
    counts: list[torch.Tensor]
    means: dict[str, list[torch.Tensor | None]]
    Fc: list[torch.Tensor | None]
    Gp_tilde: list[torch.Tensor | None]
    dW: list[torch.Tensor]
    db: list[torch.Tensor] | None
    P: EventStatistics
    loss: float

    def __getattr__(self, name):
        means = self.__dict__.get("means")
        if means is not None and name in means:
            return means[name]
        raise AttributeError(name)

    @property
    def p(self) -> list[torch.Tensor]:
        """Empirical P(z_alpha): ``(R_l, m_l)`` per level."""
        return [c / self.num_examples for c in self.counts]

    @property
    def G_tilde(self) -> list[torch.Tensor | None]:
        """G~ = diag(P(z)) G (Eq 6): ``(R_l, m_l, n_l)``."""
        return [None if g is None else g * p[..., None] for g, p in zip(self.means["G"], self.p, strict=True)]

    @property
    def empty_events(self) -> list[list[tuple[int, int]]]:
        """``[(region, event), ...]`` per level: events never observed in the data."""
        return [[tuple(v) for v in (c == 0).nonzero().tolist()] for c in self.counts]


class FrequencyAccumulator:
    """Streams :class:`StudentRecord` batches into per-event sums.

    :param student: the student (gives the widths).
    :param dtype: accumulation dtype (float64 default: the sums are exact to ~1e-16 relative).
    """

    def __init__(self, student: LadderStudent, dtype: torch.dtype = torch.float64):
        self.student, self.ladder, self.dtype = student, student.ladder, dtype
        lad, n = self.ladder, student.widths
        dev = student.weights[0].device
        self.device = dev
        d = lad.depth
        self.counts = [torch.zeros(lad.num_regions[l] * lad.events[l], dtype=dtype, device=dev) for l in range(d + 1)]
        width = [len(_OWN) * n[l] for l in range(d)] + [n[d]]
        self.own = [torch.zeros(lad.num_regions[l] * lad.events[l], width[l], dtype=dtype, device=dev)
                    for l in range(d + 1)]
        self.fc = [None] + [torch.zeros(lad.num_regions[l] * lad.events[l - 1], n[l], dtype=dtype, device=dev)
                            for l in range(1, d + 1)]
        self.gp = [None] + [torch.zeros(lad.num_regions[l] * lad.events[l], n[l - 1], dtype=dtype, device=dev)
                            for l in range(1, d + 1)]
        self.dW = [torch.zeros_like(w, dtype=dtype) for w in student.weights]
        self.db = [torch.zeros(w.shape[-1:], dtype=dtype, device=dev).expand(lad.num_regions[l], -1).clone()
                   for l, w in enumerate(student.weights)]
        self.z_all: list[torch.Tensor] = []
        self.n = 0
        self.loss_sum = 0.0

    def add(self, rec: StudentRecord, z: torch.Tensor) -> None:
        """Add one batch: ``rec`` from ``student.forward_backward`` and its events ``z`` ``(N, regions)``."""
        lad = self.ladder
        d, off = lad.depth, lad.level_offsets
        n = z.shape[0]
        z = z.to(self.device).long()
        levels = [z[:, off[l]: off[l + 1]] for l in range(d + 1)]
        for l, ev in enumerate(levels):
            if ev.numel() and (ev.min() < 0 or ev.max() >= lad.events[l]):
                raise ValueError(f"z: level {l} holds events outside [0, {lad.events[l]}): the dataset's ladder does "
                                 "not match the student's")
        for l in range(d + 1):
            R, m = lad.num_regions[l], lad.events[l]
            idx = (levels[l] + torch.arange(R, device=self.device) * m).reshape(-1)
            self.counts[l] += torch.bincount(idx, minlength=R * m).to(self.dtype)
            if l < d:
                f = rec.f[l]
                stack = torch.cat([rec.fbar[l], f, rec.slope[l], rec.deriv[l], rec.u[l], rec.g[l], rec.g_f[l]], -1)
            else:
                stack = rec.fbar[l]
            self.own[l].index_add_(0, idx, stack.reshape(n * R, -1).to(self.dtype))
            if l >= 1:
                par = levels[l - 1][:, lad.parents(l).to(self.device)]
                idx_p = (par + torch.arange(R, device=self.device) * lad.events[l - 1]).reshape(-1)
                self.fc[l].index_add_(0, idx_p, rec.fbar[l].reshape(n * R, -1).to(self.dtype))
                g_par = rec.g[l - 1].repeat_interleave(lad.branching[l - 1], dim=1)
                self.gp[l].index_add_(0, idx, g_par.reshape(n * R, -1).to(self.dtype))
        for l in range(d):
            self.dW[l] += rec.dW[l].to(self.dtype) * n
            self.db[l] += rec.db[l].to(self.dtype) * n
        self.z_all.append(z.cpu())
        self.n += n
        self.loss_sum += rec.loss * n

    def result(self) -> FrequencyStatistics:
        """Normalize the sums into :class:`FrequencyStatistics`."""
        if self.n == 0:
            raise ValueError("no examples were added")
        lad, widths = self.ladder, self.student.widths
        d = lad.depth
        counts = [c.reshape(lad.num_regions[l], lad.events[l]) for l, c in enumerate(self.counts)]
        means: dict[str, list] = {k: [None] * (d + 1) for k in _OWN}
        for l in range(d + 1):
            safe = counts[l].clamp(min=1)[..., None]  # empty events: sums are 0, rows stay 0
            mean = self.own[l].reshape(lad.num_regions[l], lad.events[l], -1) / safe
            if l == d:
                means["Fbar"][l] = mean
            else:
                for i, key in enumerate(_OWN):
                    means[key][l] = mean[..., i * widths[l]: (i + 1) * widths[l]]
        fc, gp = [None] * (d + 1), [None] * (d + 1)
        z = torch.cat(self.z_all)
        P = empirical_statistics(lad, z)
        for l in range(1, d + 1):
            R = lad.num_regions[l]
            parent_counts = counts[l - 1][lad.parents(l)]  # (R_l, m_{l-1})
            fc[l] = self.fc[l].reshape(R, lad.events[l - 1], -1) / parent_counts.clamp(min=1)[..., None].to(
                self.fc[l].device)
            gp[l] = self.gp[l].reshape(R, lad.events[l], -1) / self.n  # P(z_b) E[g | z_b] = sum / N
        return FrequencyStatistics(lad, self.n, [c.cpu() for c in counts],
                                   {k: [None if t is None else t.cpu() for t in v] for k, v in means.items()},
                                   [None if t is None else t.cpu() for t in fc],
                                   [None if t is None else t.cpu() for t in gp],
                                   [w.cpu() / self.n for w in self.dW], [b.cpu() / self.n for b in self.db],
                                   P, self.loss_sum / self.n)


def collect_statistics(student: LadderStudent, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, *,
                       loss: str = "squared", batch_size: int | None = None,
                       dtype: torch.dtype = torch.float64) -> FrequencyStatistics:
    """One pass over a dataset at fixed weights: forward, explicit backward, per-event sums.

    :param x: ``(N, R_d, dim)`` inputs; ``y``: ``(N,)`` labels; ``z``: ``(N, regions)`` events.
    :param batch_size: examples per batch (default: all at once, i.e. full-batch GD and BN
        statistics of the whole set, which is what the reformulation describes).
    """
    lad = student.ladder
    if not isinstance(z, torch.Tensor) or z.dim() != 2 or z.shape[1] != lad.total_regions:
        raise ValueError(f"z: expected the (N, {lad.total_regions}) events of every region of the student's ladder, "
                         f"got {tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__}")
    if not (x.shape[0] == y.shape[0] == z.shape[0]):
        raise ValueError(f"x, y, z: expected the same number of examples, got {x.shape[0]}, {y.shape[0]}, {z.shape[0]}")
    if x.shape[0] == 0:
        raise ValueError("x: the dataset is empty")
    acc = FrequencyAccumulator(student, dtype)
    bs = x.shape[0] if batch_size is None else int(batch_size)
    if bs <= 0:
        raise ValueError(f"batch_size: expected a positive integer, got {batch_size!r}")
    dev = student.weights[0].device
    for s in range(0, x.shape[0], bs):
        rec = student.forward_backward(x[s: s + bs].to(dev), y[s: s + bs].to(dev), loss)
        acc.add(rec, z[s: s + bs])
    return acc.result()
