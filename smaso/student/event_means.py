"""Measured per-event statistics, the result of a pass of :mod:`smaso.student.frequency`'s accumulators:
:class:`PerEventMeans` (counts and per-level means by name) and :class:`FrequencyStatistics` (every sum the
reformulation reads, the empirical P, and the jackknife that gives the replicates).

Kept apart from the accumulators so that readers of statistics (the reformulation, the diagnosis, the noise
floors) need not import how they are summed.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from teachers.ladder import Ladder
from teachers.statistics import EventStatistics, event_mask

if TYPE_CHECKING:
    from smaso.student.frequency import ReplicateAccumulator

__all__ = ["FrequencyStatistics", "PerEventMeans"]


class PerEventMeans:
    """What measured per-event statistics share: ``counts`` ``(R_l, m_l)`` per level, ``num_examples`` and the
    dict ``means`` of per-level means, each of which also reads as an attribute (``stats.G``)."""

    counts: list[torch.Tensor]
    num_examples: int
    means: dict[str, list[torch.Tensor | None]]

    def __getattr__(self, name: str) -> Any:
        means = self.__dict__.get("means")
        if means is not None and name in means:
            return means[name]
        raise AttributeError(name)

    def mean_at(self, name: str, level: int) -> torch.Tensor:
        """``means[name][level]``, typed as set: ``(R_l, M_l, n_l)``.

        :raises ValueError: the quantity is undefined (None) at that level (at the leaves only ``Fbar`` is defined).
        """
        mean = self.means[name][level]
        if mean is None:
            raise ValueError(f"{name}[{level}]: undefined at level {level} (at the leaves only Fbar = E[x | z] is)")
        return mean

    @property
    def p(self) -> list[torch.Tensor]:
        """Empirical P(z_alpha): ``(R_l, m_l)`` per level."""
        return [c / self.num_examples for c in self.counts]

    @property
    def G_tilde(self) -> list[torch.Tensor | None]:
        """G~ = diag(P(z)) G (Eq 6): ``(R_l, m_l, n_l)``."""
        return [None if g is None else g * p[..., None].to(g) for g, p in zip(self.means["G"], self.p, strict=True)]


@dataclass
class FrequencyStatistics(PerEventMeans):
    """Measured per-event statistics of a student on a dataset (see the module docstring).

    Dicts map a quantity name to a list over levels ``l = 0..d`` of ``(R_l, M_l, n_l)`` tensors
    (None where undefined: at the leaves only ``Fbar`` = E[x | z]).  ``Fc[l]`` is
    ``(E_{l-1}, M_{l-1}, n_l)`` and ``Gp_tilde[l]`` is ``(E_{l-1}, M_l, n_{l-1})`` (l >= 1), per edge into level l
    (on a tree E_{l-1} = R_l).  ``dW[l]``: ``(E_l, n_{l+1}, n_l)`` per edge, ``db[l]``: ``(R_l, n_l)``.
    ``counts[l]``: ``(R_l, M_l)`` example counts; ``P``: the empirical event statistics.
    ``jackknife``: the :class:`ReplicateAccumulator` of row groups these statistics were collected with
    (``collect_statistics(..., groups=K)``), which :meth:`leave_one_out` reads; None without groups.
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
    jackknife: ReplicateAccumulator | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        sizes = [int(c.shape[0]) for c in self.counts]
        return (f"FrequencyStatistics(num_examples={self.num_examples}, levels={len(self.counts)}, "
                f"regions per level={sizes}, quantities={sorted(self.means)}, loss={self.loss:.4g})")

    @property
    def groups(self) -> int | None:
        """K, the row groups of the jackknife these statistics carry (None: collected without ``groups``)."""
        return None if self.jackknife is None else self.jackknife.groups

    def leave_one_out(self) -> Iterator[FrequencyStatistics]:
        """The K statistics with one row group left out, in group order (:meth:`ReplicateAccumulator.leave_one_out`):
        the replicates of the jackknife's noise floors (:mod:`smaso.student.noise`).

        :raises ValueError: the statistics were collected without row groups.
        """
        if self.jackknife is None:
            raise ValueError("groups: these statistics were collected without row groups; pass "
                             "collect_statistics(..., groups=K) (K >= 2) for the jackknife's leave-one-out replicates")
        return self.jackknife.leave_one_out()

    def result(self) -> FrequencyStatistics:
        """``self``: statistics are their own result, as an accumulator's :meth:`FrequencyAccumulator.result` is its
        statistics, so code written for either (``collect_statistics(..., groups=K)`` returned the accumulator
        before it returned these statistics) reads them the same way."""
        return self

    @property
    def event_mask(self) -> list[torch.Tensor]:
        """``(R_l, M_l)`` bool per level: the events that exist (the rest is padding)."""
        return event_mask(self.ladder)

    @property
    def empty_events(self) -> list[list[tuple[int, int]]]:
        """``[(region, event), ...]`` per level: events that exist but were never observed in the data."""
        return [[tuple(v) for v in ((c == 0) & m).nonzero().tolist()]
                for c, m in zip(self.counts, self.event_mask, strict=True)]

    @property
    def graph(self) -> Ladder:
        """Deprecated: :attr:`ladder`."""
        warnings.warn("FrequencyStatistics.graph is deprecated since smaso 0.3; use .ladder", DeprecationWarning,
                      stacklevel=2)
        return self.ladder
