"""Deprecated alias (0.3): the Pyro model of every ladder is :class:`teachers.pyro_model.LadderModel`.

``GraphLadderModel(g, device, group_regions=...)`` warns a :class:`DeprecationWarning` and is
``LadderModel(g, device, layout="groups", group_regions=...)``: the grouped-site layout (sites
``"z_{l}_g{j}"``, ``max_plate_nesting = 2``) on every ladder, uniform trees included, as before.
"""

from __future__ import annotations

import torch

from ._deprecation import warn
from .ladder import Ladder
from .pyro_model import GROUPS, EmissionDistribution, LadderModel

__all__ = ["EmissionDistribution", "GraphLadderModel"]


class GraphLadderModel(LadderModel):
    """Deprecated: :class:`teachers.pyro_model.LadderModel` with ``layout="groups"`` (module docstring).

    :param g: the ladder.
    :param device: device of the tables (and of sampled values).
    :param group_regions: one vectorised site per signature group (default), or one site per region
        (``False``: the enumerable form).
    """

    max_plate_nesting = 2

    def __init__(self, g: Ladder, device: torch.device | str | None = None, *, group_regions: bool = True) -> None:
        warn("teachers.graph_pyro_model.GraphLadderModel", "teachers.pyro_model.LadderModel(ladder, layout='groups', "
             "group_regions=...) (its default layout on any ladder that is not a uniform tree)")
        if not isinstance(g, Ladder):
            raise TypeError(f"g: expected a GraphLadder (a teachers.ladder.Ladder), got {type(g).__name__}")
        super().__init__(g, device, layout=GROUPS, group_regions=group_regions)

    @property
    def graph(self) -> Ladder:
        """The ladder (the pre-0.3 name of :attr:`ladder`)."""
        return self.ladder

    @staticmethod
    def site_name(level: int, group: int = 0) -> str:
        """``"z_{level}_g{group}"``."""
        return f"z_{level}_g{group}"
