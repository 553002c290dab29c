"""Sampling noise of the frequency statistics: a delete-one-group jackknife over row groups.

Every measured statistic (F, G~, Delta W, the event frequencies P), every relative error of the
reformulation and every Thm 2 term is a function of per-event means estimated from N examples, so
it carries sampling noise of order 1/sqrt(N).  Its size is measured here by the jackknife: the rows
of every batch are split into ``K`` contiguous groups
(:class:`~smaso.student.frequency.ReplicateAccumulator`, re-exported here, the same
forward/backward pass, so BN's batch statistics are untouched), the statistics are recomputed K
times with one group left out (``ReplicateAccumulator.leave_one_out``), and

    se(theta) = sqrt((K - 1) / K * sum_i (theta_(i) - mean_i theta_(i))^2)

is the standard error of any quantity theta computed from them (Efron & Stein; Quenouille): it needs only K
mergeable states, works unchanged for the *nonlinear* functions of the means that every reported number is,
and costs K extra event-level evaluations per checkpoint (no pass over the data).

Noise floor of a norm.  A reported error or term is ``||v|| / ||m||`` for a difference vector v
(predicted minus measured, or the two sides of one of Thm 2's conditions) whose population value
may be exactly 0.  Its *floor* is ``||se(v)|| / ||m||`` (the component-wise jackknife standard
errors of v, in the same norm): what the number would read from sampling noise alone, since
E||v_hat||^2 = ||v||^2 + sum_i se(v_i)^2.  A number is *within noise* when it is at most
:data:`WITHIN_NOISE` = 2 times its floor (for a v that is truly 0 the ratio concentrates near 1),
or below :data:`ROUNDOFF` (1e-12: an exact identity in float64).
Floors fall like 1/sqrt(N) (tests/test_noise.py measures the slope).

Batch Norm couples the rows of a batch (a group left out was normalized with the whole batch's statistics,
while a replicate's reformulation renormalizes with its own frequencies), so through a BN level the floors
are over-estimates (0.04-0.64 on the fully informative ladder, where every error is 0); without BN the
jackknife is the textbook one.

Batched replicates.  :func:`stack_statistics` stacks the K replicates (and the full statistics) along a leading
axis, so that :func:`~smaso.student.reformulation.reformulate` and the diagnosis's terms run once for all of them
(:func:`~smaso.student.diagnosis.compare_statistics_to_theory`), equal to the one-by-one results to float64
round-off.

Intervals: ``theta +- t_{K-1, 0.975} se(theta)`` are 95% intervals (Student's t with K - 1 degrees
of freedom; for ``K = 10``, t = 2.262); tests/test_noise.py checks their coverage on quantities
known exactly (event frequencies and E[x | z] of Gaussian leaves).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from smaso.student.frequency import DEFAULT_GROUPS, FrequencyStatistics, ReplicateAccumulator
from smaso.student.reformulation import _same_layout
from teachers.statistics import EventStatistics

__all__ = ["DEFAULT_GROUPS", "ROUNDOFF", "WITHIN_NOISE", "ReplicateAccumulator", "StackedStatistics", "jackknife_se",
           "norm_floor", "stack_statistics", "t_quantile"]

#: A number at most this many times its noise floor is reported as within noise.
WITHIN_NOISE = 2.0
#: ... or below this (float64 round-off of an exact identity, where the floor is round-off too).
ROUNDOFF = 1e-12


def jackknife_se(replicates: Sequence[torch.Tensor | float] | torch.Tensor) -> torch.Tensor:
    """Jackknife standard error of a quantity from its leave-one-out values ``(K, ...)`` (a sequence of K values,
    or one tensor whose dim 0 is the replicate).

    ``sqrt((K - 1) / K * sum_i (theta_(i) - mean theta_(i))^2)``, component-wise.  Non-finite
    components (e.g. a mean over an event that one replicate never saw) give a NaN there, so a
    caller can tell "no floor" from "floor 0".
    """
    t = replicates.to(torch.float64) if isinstance(replicates, torch.Tensor) else torch.stack(
        [torch.as_tensor(r, dtype=torch.float64) for r in replicates])
    k = t.shape[0]
    if k < 2:
        raise ValueError(f"replicates: expected at least 2 leave-one-out values, got {k}")
    return ((k - 1) / k * (t - t.mean(0)).pow(2).sum(0)).sqrt()


def norm_floor(replicates: Sequence[torch.Tensor] | torch.Tensor, denominator: float,
               mask: torch.Tensor | None = None) -> float:
    """Noise floor ``||se(v)|| / denominator`` of a reported ``||v|| / denominator`` (module docstring).

    :param replicates: the leave-one-out values of the vector v (each of v's shape; or stacked, ``(K, *v.shape)``).
    :param mask: the rows of v that enter the norm (events that occur), as in the reported number.
    """
    se = jackknife_se(replicates)
    if mask is not None:
        se = se[mask]
    se = torch.nan_to_num(se, nan=0.0)  # an event missing from some replicate: no information there
    num = float(se.norm())
    if denominator == 0 or not math.isfinite(denominator):  # the number itself is undefined (diagnosis: NaN)
        return math.nan
    return num / denominator


def t_quantile(groups: int, level: float = 0.975) -> float:
    """Student's t quantile with ``groups - 1`` degrees of freedom (the jackknife interval's factor)."""
    # scipy.special's inverse of the t CDF, what scipy.stats.t.ppf evaluates (the same bits), without importing
    # scipy.stats (about 0.4 s, in every process of smaso demo)
    from scipy.special import stdtrit

    return float(stdtrit(groups - 1, level))


@dataclass(repr=False)
class StackedStatistics(FrequencyStatistics):
    """K :class:`~smaso.student.frequency.FrequencyStatistics` of one student and ladder stacked along a leading
    replicate axis (:func:`stack_statistics`): every tensor of the fields ``counts``, ``means``, ``Fc``,
    ``Gp_tilde``, ``dW``, ``db`` and of ``P`` (marginals, joints) is ``(K, *shape)``, ``(K, R_l, M_l, n_l)`` for a
    mean.  ``sizes`` ``(K,)``: each replicate's sample size, by which :attr:`p` (hence ``G_tilde``) normalizes;
    ``losses`` ``(K,)``: each one's loss.  ``num_examples`` and ``loss`` are the first replicate's.
    """

    sizes: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.int64))
    losses: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.float64))

    def __repr__(self) -> str:
        return f"StackedStatistics(replicates={len(self.sizes)}, sizes={self.sizes.tolist()})"

    @property
    def p(self) -> list[torch.Tensor]:
        """Empirical P(z_alpha) of each replicate: ``(K, R_l, m_l)`` per level."""
        # the same division as FrequencyStatistics.p, replicate by replicate (so the same bits)
        n = self.sizes.to(self.counts[0])[:, None, None]  # (the counts' dtype and device)
        return [c / n for c in self.counts]


def _stack(ts: Sequence[torch.Tensor | None]) -> torch.Tensor | None:
    if ts[0] is None:
        return None
    return torch.stack(list(ts))  # type: ignore[arg-type]  # (a level's tensor is set in every replicate or in none)


def stack_statistics(stats: Sequence[FrequencyStatistics]) -> StackedStatistics:
    """The statistics ``stats`` (of one student and ladder: the full statistics and their jackknife replicates,
    :meth:`~smaso.student.frequency.FrequencyStatistics.leave_one_out`) stacked along a leading axis of size
    ``len(stats)``, for one batched :func:`~smaso.student.reformulation.reformulate` (replicate i of its result is
    ``reformulate`` of ``stats[i]`` to float64 round-off).

    :raises ValueError: no statistics; statistics of different ladders (region graphs), quantities or shapes.
    """
    stats = list(stats)
    if not stats or not all(isinstance(s, FrequencyStatistics) for s in stats):
        raise ValueError(f"stats: expected a non-empty sequence of FrequencyStatistics, got "
                         f"{[type(s).__name__ for s in stats]}")
    first = stats[0]
    for s in stats[1:]:
        if s.ladder is not first.ladder and not _same_layout(s.ladder, first.ladder):
            raise ValueError("stats: statistics of different ladders (region graphs) cannot be stacked")
        if set(s.means) != set(first.means) or [tuple(c.shape) for c in s.counts] != [
                tuple(c.shape) for c in first.counts]:
            raise ValueError("stats: statistics of different quantities or layouts cannot be stacked")

    def each(lists: Iterable[Sequence[torch.Tensor | None]]) -> list:
        """One stacked tensor (or None) per level of the replicates' per-level ``lists``."""
        return [_stack(level) for level in zip(*lists, strict=True)]

    P = EventStatistics(first.ladder, each(s.P.marginals for s in stats), each(s.P.joints for s in stats),
                        first.P.num_examples)
    means = {k: each(s.means[k] for s in stats) for k in first.means}
    db = None if first.db is None else each(s.db or [] for s in stats)
    return StackedStatistics(
        first.ladder, first.num_examples, each(s.counts for s in stats), means, each(s.Fc for s in stats),
        each(s.Gp_tilde for s in stats), each(s.dW for s in stats), db, P, first.loss,
        sizes=torch.tensor([s.num_examples for s in stats], dtype=torch.int64, device=first.counts[0].device),
        losses=torch.tensor([s.loss for s in stats], dtype=torch.float64))
