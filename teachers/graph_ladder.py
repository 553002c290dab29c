"""Deprecated: region-graph ladders are :class:`teachers.ladder.Ladder` itself since 0.3.

``GraphLadder(events, parents, mode, emission, ...)`` and its constructors still work for one release, with a
:class:`DeprecationWarning` naming the new spelling; each returns a :class:`~teachers.ladder.Ladder`, and every
ladder is an instance of ``GraphLadder``.  The graph helpers (:func:`mixed_radix`, :func:`conv1d_parents`, ...)
live in :mod:`teachers.regions`.  A GraphLadder's ``events[l][i]`` is now ``region_events[l][i]`` (``events[l]``
is the level's largest count) and ``tables[l][i]`` is ``region_tables[l][i]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._deprecation import alias, deprecated
from .ladder import Ladder
from .regions import children_of, conv1d_parents, conv2d_parents, conv_children, mixed_radix

if TYPE_CHECKING:
    from teachers.emission import Emission

__all__ = ["FORMAT", "GraphLadder", "children_of", "conv1d_parents", "conv2d_parents", "conv_children", "mixed_radix"]

FORMAT = "smaso-graph-ladder"
VERSION = 1


def _build(events: Sequence[int], parents: Sequence, mode: str, emission: Emission | dict | str | None,
           prior: Any = None, tables: Any = None, leaf_priors: Any = None, lookups: Any = None,
           name: str = "graph-ladder") -> Ladder:
    return Ladder(events=events, parents=parents, mode=mode, emission=emission, prior=prior,
                  tables=None if tables is None else list(tables)[1:], leaf_prior=leaf_priors, lookup=lookups,
                  name=name)


def _itself(ladder: Ladder) -> Ladder:
    return ladder


def _random(events: Sequence[int], parents: Sequence, **kwargs: Any) -> Ladder:
    return Ladder.random(events=events, parents=parents, **{"name": "random-graph", **kwargs})


def _fully_informative(parents: Sequence, leaf_events: int = 2, **kwargs: Any) -> Ladder:
    return Ladder.fully_informative(parents=parents, leaf_events=leaf_events, **kwargs)


_SAME = ("tree", "conv1d", "conv2d", "fully_informative_conv1d", "fully_informative_conv2d", "from_dict")
GraphLadder = alias(
    Ladder, "GraphLadder(events, parents, mode, emission, ...)",
    "Ladder(events=..., parents=..., mode=..., emission=..., tables=tables[1:], leaf_prior=..., lookup=...) "
    "(a region graph is a Ladder)", _build,
    random=staticmethod(deprecated(_random, "GraphLadder.random(events, parents, ...)",
                                   "Ladder.random(events=..., parents=..., ...)")),
    fully_informative=staticmethod(deprecated(_fully_informative, "GraphLadder.fully_informative(parents, ...)",
                                              "Ladder.fully_informative(parents=..., ...)")),
    from_ladder=staticmethod(deprecated(_itself, "GraphLadder.from_ladder(ladder)",
                                        "the ladder itself")),
    **{n: staticmethod(deprecated(getattr(Ladder, n), f"GraphLadder.{n}", f"Ladder.{n}")) for n in _SAME})
