"""The variable f_j of a node as a student's record holds it (:func:`node_variable`, :data:`VARIABLES`): which record
field is the output, the activation, the pre-activation or the gate's input, for either BN placement.  Moved out of
:mod:`smaso.student.network` (whose names re-export it) to keep that module under the line limit."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from smaso.student.network import LadderStudent, StudentRecord

__all__ = ["VARIABLES", "node_variable"]


#: What a node's "f_j" is (:func:`node_variable`): ``"output"`` (default) the node's output as the next level sees
#: it, the record's ``fbar`` (after the gate, after BN where BN follows the gate); ``"activation"`` the gate's
#: output before any BN after it (BN's input for ``batch_norm="after"``); ``"preactivation"`` the linear map's
#: output u (BN's input for ``batch_norm="before"``); ``"gate_input"`` what the gate reads (u, or BN(u) before
#: the gate).  Before issue 36 this module measured the record's ``f``: the activation, or BN(u) before the gate.
VARIABLES = ("output", "activation", "preactivation", "gate_input")


def _check_variable(variable: object) -> str:
    if not isinstance(variable, str) or variable not in VARIABLES:
        raise ValueError(f"variable: expected one of {VARIABLES}, got {variable!r}")
    return variable


def node_variable(student: LadderStudent, rec: StudentRecord, level: int, variable: str = "output") -> torch.Tensor:
    """The variable f_j of every node of level ``level`` in one batch's record, ``(N, R_l, n_l)`` (:data:`VARIABLES`).

    :param student: the student that made ``rec`` (its BN placement says which record field is which).
    """
    _check_variable(variable)
    before = student.bn_placement == "before"
    if variable == "output":
        return rec.fbar[level]
    if variable == "preactivation":
        return rec.u[level]
    if variable == "activation":  # before the gate BN's output is f and the gate's output fbar; else f = s(u) u
        return rec.fbar[level] if before else rec.f[level]
    return rec.f[level] if before and rec.sigma[level] is not None else rec.u[level]
