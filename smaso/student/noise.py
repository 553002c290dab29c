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

Intervals: ``theta +- t_{K-1, 0.975} se(theta)`` are 95% intervals (Student's t with K - 1 degrees
of freedom; for ``K = 10``, t = 2.262); tests/test_noise.py checks their coverage on quantities
known exactly (event frequencies and E[x | z] of Gaussian leaves).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from smaso.student.frequency import DEFAULT_GROUPS, ReplicateAccumulator

__all__ = ["DEFAULT_GROUPS", "ROUNDOFF", "WITHIN_NOISE", "ReplicateAccumulator", "jackknife_se", "norm_floor",
           "t_quantile"]

#: A number at most this many times its noise floor is reported as within noise.
WITHIN_NOISE = 2.0
#: ... or below this (float64 round-off of an exact identity, where the floor is round-off too).
ROUNDOFF = 1e-12


def jackknife_se(replicates: Sequence[torch.Tensor | float]) -> torch.Tensor:
    """Jackknife standard error of a quantity from its leave-one-out values ``(K, ...)``.

    ``sqrt((K - 1) / K * sum_i (theta_(i) - mean theta_(i))^2)``, component-wise.  Non-finite
    components (e.g. a mean over an event that one replicate never saw) give a NaN there, so a
    caller can tell "no floor" from "floor 0".
    """
    t = torch.stack([torch.as_tensor(r, dtype=torch.float64) for r in replicates])
    k = t.shape[0]
    if k < 2:
        raise ValueError(f"replicates: expected at least 2 leave-one-out values, got {k}")
    return ((k - 1) / k * (t - t.mean(0)).pow(2).sum(0)).sqrt()


def norm_floor(replicates: Sequence[torch.Tensor], denominator: float, mask: torch.Tensor | None = None) -> float:
    """Noise floor ``||se(v)|| / denominator`` of a reported ``||v|| / denominator`` (module docstring).

    :param replicates: the leave-one-out values of the vector v (each of v's shape).
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
    from scipy.stats import t

    return float(t.ppf(level, groups - 1))
