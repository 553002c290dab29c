"""Deprecated: the reformulation and Thm 2's diagnosis of every ladder are :mod:`smaso.student.reformulation` and
:mod:`smaso.student.diagnosis` since smaso 0.3 (Eq 9 summed over every parent; on a tree the paper's recursion).

The old names still work for one release, each with a :class:`DeprecationWarning` naming the new one:
``graph_reformulate`` -> :func:`~smaso.student.reformulation.reformulate`, ``graph_conditions`` ->
:func:`~smaso.student.diagnosis.diagnose`, ``compare_graph_statistics_to_theory`` ->
:func:`~smaso.student.diagnosis.compare_statistics_to_theory`.
"""

from __future__ import annotations

from smaso.student.diagnosis import compare_statistics_to_theory, diagnose
from smaso.student.reformulation import reformulate
from teachers._deprecation import deprecated, warn

__all__ = ["compare_graph_statistics_to_theory", "graph_conditions", "graph_reformulate"]

warn("smaso.student.graph_reformulation", "smaso.student.reformulation")

graph_reformulate = deprecated(reformulate, "graph_reformulate", "smaso.student.reformulation.reformulate")
graph_conditions = deprecated(diagnose, "graph_conditions", "smaso.student.diagnosis.diagnose")
compare_graph_statistics_to_theory = deprecated(compare_statistics_to_theory, "compare_graph_statistics_to_theory",
                                                "smaso.student.diagnosis.compare_statistics_to_theory")
