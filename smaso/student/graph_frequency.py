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

from smaso.student._deprecated import AliasMeta, warn
from smaso.student.frequency import (
    FrequencyAccumulator,
    FrequencyStatistics,
    ReplicateAccumulator,
    accumulate_statistics,
    collect_statistics,
)
from teachers.ladder import Ladder
from teachers.statistics import EventStatistics, exact_statistics

__all__ = ["GraphEventStatistics", "GraphFrequencyAccumulator", "GraphFrequencyStatistics", "GraphReplicates",
           "accumulate_graph_statistics", "collect_graph_statistics", "padded_events"]

warn("smaso.student.graph_frequency", "smaso.student.frequency")


class GraphFrequencyAccumulator(metaclass=AliasMeta):
    """Deprecated alias: ``GraphFrequencyAccumulator(student, dtype)`` builds a ``FrequencyAccumulator``."""

    _target = FrequencyAccumulator

    def __new__(cls, student, dtype=None) -> FrequencyAccumulator:
        warn("GraphFrequencyAccumulator", "smaso.student.frequency.FrequencyAccumulator")
        return FrequencyAccumulator(student, dtype)


class GraphFrequencyStatistics(metaclass=AliasMeta):
    """Deprecated alias of :class:`~smaso.student.frequency.FrequencyStatistics` (``graph`` is ``ladder``)."""

    _target = FrequencyStatistics

    def __new__(cls, graph, *args, **kwargs) -> FrequencyStatistics:
        warn("GraphFrequencyStatistics", "smaso.student.frequency.FrequencyStatistics")
        return FrequencyStatistics(graph, *args, **kwargs)


class GraphReplicates(metaclass=AliasMeta):
    """Deprecated alias: ``GraphReplicates(student, dtype, groups)`` builds a ``ReplicateAccumulator``."""

    _target = ReplicateAccumulator

    def __new__(cls, student, dtype, groups) -> ReplicateAccumulator:
        warn("GraphReplicates", "smaso.student.frequency.ReplicateAccumulator")
        return ReplicateAccumulator(student, dtype, groups)


class GraphEventStatistics(metaclass=AliasMeta):
    """Deprecated alias: ``GraphEventStatistics(graph, marginals, joints, P_down, num_examples)`` builds
    ``EventStatistics(graph, marginals, joints, num_examples)`` (``P_down`` follows from the joints)."""

    _target = EventStatistics

    def __new__(cls, graph, marginals, joints, P_down=None, num_examples=None) -> EventStatistics:
        warn("GraphEventStatistics", "teachers.statistics.EventStatistics")
        return EventStatistics(graph, marginals, joints, num_examples)

    @staticmethod
    def exact(g: Ladder, **kwargs) -> EventStatistics:
        """Deprecated: :func:`teachers.statistics.exact_statistics`."""
        warn("GraphEventStatistics.exact(g)", "teachers.statistics.exact_statistics(ladder)")
        return exact_statistics(g, **kwargs)


def padded_events(g: Ladder) -> list[int]:
    """Deprecated: ``list(g.events)``, the largest event count of every level (the padded event axis)."""
    warn("padded_events(g)", "list(ladder.events)")
    return list(g.events)


def collect_graph_statistics(student, x, y, z, **kwargs):
    """Deprecated: :func:`smaso.student.frequency.collect_statistics` (the same arguments)."""
    warn("collect_graph_statistics", "smaso.student.frequency.collect_statistics")
    return collect_statistics(student, x, y, z, **kwargs)


def accumulate_graph_statistics(student, source, **kwargs):
    """Deprecated: :func:`smaso.student.frequency.accumulate_statistics` (the same arguments)."""
    warn("accumulate_graph_statistics", "smaso.student.frequency.accumulate_statistics")
    return accumulate_statistics(student, source, **kwargs)
