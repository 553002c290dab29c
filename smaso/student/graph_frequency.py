"""Deprecated: frequency statistics of every ladder are :mod:`smaso.student.frequency` since smaso 0.3.

One accumulator (per-event sums on the padded event layout, per-edge focus and broadness sums, mergeable
states, the jackknife's row groups) serves trees and region graphs.  The old names still work for one release,
each with a :class:`DeprecationWarning` naming the new one:

- ``GraphFrequencyAccumulator`` -> :class:`~smaso.student.frequency.FrequencyAccumulator`;
- ``GraphFrequencyStatistics`` -> :class:`~smaso.student.frequency.FrequencyStatistics`;
- ``GraphReplicates`` -> :class:`~smaso.student.frequency.ReplicateAccumulator`;
- ``collect_graph_statistics`` / ``accumulate_graph_statistics`` -> :func:`~smaso.student.frequency.collect_statistics`
  / :func:`~smaso.student.frequency.accumulate_statistics`;
- ``GraphEventStatistics`` -> :class:`teachers.statistics.EventStatistics` (``GraphEventStatistics.exact(g)`` ->
  :func:`teachers.statistics.exact_statistics`);
- ``padded_events(g)`` -> ``list(g.events)`` (a Ladder's ``events[l]`` is the level's largest count).

``dW[l]`` is ``(E_l, n_{l+1}, n_l)`` now (the transpose of the old graph layout), ``statistics.ladder`` the ladder.
"""

from __future__ import annotations

from typing import Any

import torch

from smaso.student.frequency import (
    FrequencyAccumulator,
    FrequencyStatistics,
    ReplicateAccumulator,
    accumulate_statistics,
    collect_statistics,
)
from teachers._deprecation import alias, deprecated, warn
from teachers.ladder import Ladder
from teachers.statistics import EventStatistics, exact_statistics

__all__ = ["GraphEventStatistics", "GraphFrequencyAccumulator", "GraphFrequencyStatistics", "GraphReplicates",
           "accumulate_graph_statistics", "collect_graph_statistics", "padded_events"]

warn("smaso.student.graph_frequency", "smaso.student.frequency")

GraphFrequencyAccumulator = alias(FrequencyAccumulator, "GraphFrequencyAccumulator",
                                  "smaso.student.frequency.FrequencyAccumulator")
GraphFrequencyStatistics = alias(FrequencyStatistics, "GraphFrequencyStatistics",
                                 "smaso.student.frequency.FrequencyStatistics")
GraphReplicates = alias(ReplicateAccumulator, "GraphReplicates", "smaso.student.frequency.ReplicateAccumulator")


def _event_statistics(graph: Ladder, marginals: list[torch.Tensor], joints: Any, P_down: Any = None,
                      num_examples: int | None = None) -> EventStatistics:
    return EventStatistics(graph, marginals, joints, num_examples)  # P_down follows from the joints


GraphEventStatistics = alias(
    EventStatistics, "GraphEventStatistics", "teachers.statistics.EventStatistics", _event_statistics,
    exact=staticmethod(deprecated(exact_statistics, "GraphEventStatistics.exact(g)",
                                  "teachers.statistics.exact_statistics(ladder)")))


def _padded_events(g: Ladder) -> list[int]:
    return list(g.events)


padded_events = deprecated(_padded_events, "padded_events(g)", "list(ladder.events)")
collect_graph_statistics = deprecated(collect_statistics, "collect_graph_statistics",
                                      "smaso.student.frequency.collect_statistics")
accumulate_graph_statistics = deprecated(accumulate_statistics, "accumulate_graph_statistics",
                                         "smaso.student.frequency.accumulate_statistics")
