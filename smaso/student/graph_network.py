"""Deprecated: the graph student is :class:`smaso.student.network.LadderStudent` itself since smaso 0.3.

One student class runs on every ladder (a uniform tree, any tree, any layered region graph), with Batch Norm
(both placements), shared weights, every activation and both losses.  The old names still work for one release,
each with a :class:`DeprecationWarning` naming the new one:

- ``GraphStudent(g, width, ...)`` -> ``LadderStudent(g, width, ...)`` (the same keywords, plus ``batch_norm``);
  ``GraphStudent.from_ladder_student(s)`` -> ``s`` itself; ``isinstance(x, GraphStudent)`` is True for every
  LadderStudent;
- ``GraphStudentRecord`` -> :class:`~smaso.student.network.StudentRecord`;
- ``train_graph_student`` -> :func:`smaso.student.training.train_ladder_student`.

What changed for code that read a GraphStudent's tensors: the weights of an edge are ``(n_child, n_parent)``
(W_ba of Eq 9, the tree student's layout; before: its transpose), so ``weights[l]``, ``edge_weights(l)`` and
``rec.dW[l]`` are ``(E_l, n_{l+1}, n_l)``; ``level_edges`` and ``level_edge_index`` are unchanged (now in
:mod:`teachers.statistics`, re-exported by :mod:`smaso.student.connectivity`).
"""

from __future__ import annotations

from smaso.student.connectivity import level_edge_index, level_edges
from smaso.student.network import LadderStudent, StudentRecord
from smaso.student.training import train_ladder_student
from teachers._deprecation import alias, deprecated, warn

__all__ = ["GraphStudent", "GraphStudentRecord", "level_edge_index", "level_edges", "train_graph_student"]

warn("smaso.student.graph_network", "smaso.student.network")


def _itself(student: LadderStudent) -> LadderStudent:
    if not isinstance(student, LadderStudent):
        raise TypeError(f"student: expected a LadderStudent, got {type(student).__name__}")
    return student


GraphStudent = alias(LadderStudent, "GraphStudent(g, ...)", "smaso.student.network.LadderStudent(ladder, ...)",
                     from_ladder_student=staticmethod(deprecated(_itself, "GraphStudent.from_ladder_student(student)",
                                                                 "the student itself")))
GraphStudentRecord = alias(StudentRecord, "GraphStudentRecord", "smaso.student.network.StudentRecord")
train_graph_student = deprecated(train_ladder_student, "train_graph_student",
                                 "smaso.student.training.train_ladder_student")
