"""The readout: a hidden group at the root region and a linear map to the classes, as one more ladder level.

A student without a readout computes its class scores linearly from the node groups of the root's children,
so its scores are additive over them and its accuracy is capped by the additive ceiling
(:mod:`smaso.student.ceiling`: 0.873 on the default teacher, whose Bayes accuracy is 1).  The readout gives
the root region a hidden group of ``h`` nodes, with the student's hidden activation, and maps it linearly to
the classes.  It is built as a ladder of depth d + 1 (:func:`readout_ladder`): a new top region above the old
root, with the old root as its only child, and the identity between their events (the old root's event *is*
the label).  So everything the student does on a ladder -- the explicit backward (Eq 1-2), Batch Norm,
frequency statistics (Eq 6), the reformulation (Eq 9, one more level whose event is the label) and Thm 2's
diagnosis -- carries through to the readout level unchanged; its events are the teacher's with the label
repeated in front (:func:`readout_events`).
"""

from __future__ import annotations

from typing import Any

import torch

from smaso import _ladder_parts
from teachers.ladder import TOPDOWN, Ladder

__all__ = ["readout_events", "readout_ladder"]


def readout_ladder(ladder: Ladder) -> Ladder:
    """``ladder`` with a readout level on top: depth d + 1, a new one-region level 0 whose only child is the old
    root (now level 1), z_0 = z_1 = y (an identity table top-down, an identity lookup bottom-up); the other
    regions, tables, lookups, priors and the emission are ``ladder``'s.  A uniform tree stays a uniform tree
    (branching ``(1, b_0, ..., b_{d-1})``)."""
    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
    m = ladder.num_classes
    events = [[m], *ladder.region_events]
    parents = [[()], [(0,)], *ladder.parents[1:]]
    common: dict[str, Any] = {"events": events, "parents": parents, "mode": ladder.mode,
                              "emission": ladder.emission, "name": f"{ladder.name}+readout"}
    joint = ladder.productions
    if joint is not None:  # jointly drawn children stay so (only on uniform trees): the same levels
        eye = torch.eye(m, dtype=torch.float64)
        tables = _ladder_parts.stacked_tables(ladder)  # (None where the productions give the law)
        return Ladder([1, *_ladder_parts.uniform_branching(ladder)], [m, *ladder.events], prior=ladder.prior,
                      tables=[eye, *(None if p is not None else t for t, p in zip(tables, joint, strict=True))],
                      productions=[None, *joint], emission=ladder.emission, name=common["name"])
    if ladder.mode == TOPDOWN:
        eye = torch.eye(m, dtype=torch.float64)
        return Ladder(**common, prior=ladder.prior, tables=[[eye], *ladder.region_tables[1:]])  # type: ignore[index]  # top-down
    return Ladder(**common, leaf_prior=ladder.leaf_prior,
                  lookup=[[torch.arange(m)], *ladder.lookups])  # type: ignore[misc]  # bottom-up: lookups


def readout_events(z: torch.Tensor) -> torch.Tensor:
    """The events of :func:`readout_ladder`'s regions from the teacher's ``z`` ``(N, R)``: ``(N, R + 1)``, the
    label (``z[:, 0]``) repeated in front."""
    if not isinstance(z, torch.Tensor) or z.dim() != 2 or z.shape[1] < 1:
        raise ValueError(f"z: expected (N, regions) events, got "
                         f"{tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__}")
    return torch.cat([z[:, :1], z], 1)
