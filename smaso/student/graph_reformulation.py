"""Deprecated: the reformulation and Thm 2's diagnosis of every ladder are :mod:`smaso.student.reformulation` and
:mod:`smaso.student.diagnosis` since smaso 0.3 (Eq 9 summed over every parent; on a tree the paper's recursion).

The old names still work for one release, each with a :class:`DeprecationWarning` naming the new one:
``graph_reformulate`` -> :func:`~smaso.student.reformulation.reformulate`, ``graph_conditions`` ->
:func:`~smaso.student.diagnosis.diagnose`, ``compare_graph_statistics_to_theory`` ->
:func:`~smaso.student.diagnosis.compare_statistics_to_theory`.
"""

from __future__ import annotations

from smaso.student._deprecated import warn
from smaso.student.diagnosis import compare_statistics_to_theory, diagnose
from smaso.student.reformulation import reformulate

__all__ = ["compare_graph_statistics_to_theory", "graph_conditions", "graph_reformulate"]

warn("smaso.student.graph_reformulation", "smaso.student.reformulation")


def graph_reformulate(student, P, measured, **kwargs):
    """Deprecated: :func:`smaso.student.reformulation.reformulate` (the same arguments)."""
    warn("graph_reformulate", "smaso.student.reformulation.reformulate")
    return reformulate(student, P, measured, **kwargs)


def graph_conditions(stats) -> list[dict]:
    """Deprecated: :func:`smaso.student.diagnosis.diagnose`."""
    warn("graph_conditions", "smaso.student.diagnosis.diagnose")
    return diagnose(stats)


def compare_graph_statistics_to_theory(student, stats, **kwargs) -> dict:
    """Deprecated: :func:`smaso.student.diagnosis.compare_statistics_to_theory` (the same arguments)."""
    warn("compare_graph_statistics_to_theory", "smaso.student.diagnosis.compare_statistics_to_theory")
    return compare_statistics_to_theory(student, stats, **kwargs)
