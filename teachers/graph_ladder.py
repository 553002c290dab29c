"""Deprecated: region-graph ladders are :class:`teachers.ladder.Ladder` itself since 0.3.

``GraphLadder(events, parents, mode, emission, ...)`` and its constructors still work for one release,
with a :class:`DeprecationWarning` naming the new spelling; each returns a :class:`~teachers.ladder.Ladder`.
The graph helpers (:func:`mixed_radix`, :func:`conv1d_parents`, ...) live in :mod:`teachers.regions`.

What changed for code that read a GraphLadder's attributes: ``events[l][i]`` is ``region_events[l][i]``
(``events[l]`` is now the level's largest count), ``tables[l][i]`` is ``region_tables[l][i]``, and
``leaf_priors``, ``lookups``, ``parents`` and ``children`` are unchanged.
"""

from __future__ import annotations

import warnings

from .ladder import Ladder
from .regions import children_of, conv1d_parents, conv2d_parents, conv_children, mixed_radix

__all__ = ["FORMAT", "GraphLadder", "children_of", "conv1d_parents", "conv2d_parents", "conv_children", "mixed_radix"]

FORMAT = "smaso-graph-ladder"
VERSION = 1


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated since smaso 0.3 and will be removed in 0.4; use {new} (a region graph is "
                  "a Ladder)", DeprecationWarning, stacklevel=3)


class _GraphLadderMeta(type):
    def __instancecheck__(cls, obj) -> bool:  # every ladder is a region graph
        return isinstance(obj, Ladder)


class GraphLadder(metaclass=_GraphLadderMeta):
    """Deprecated alias: ``GraphLadder(events, parents, mode, emission, prior=, tables=, leaf_priors=, lookups=)``
    builds ``Ladder(events=events, parents=parents, mode=mode, emission=emission, prior=prior,
    tables=tables[1:], leaf_prior=leaf_priors, lookup=lookups)``."""

    def __new__(cls, events, parents, mode, emission, prior=None, tables=None, leaf_priors=None, lookups=None,
                name: str = "graph-ladder") -> Ladder:
        _warn("GraphLadder(events, parents, mode, emission, ...)",
              "Ladder(events=..., parents=..., mode=..., emission=..., tables=tables[1:], leaf_prior=..., lookup=...)")
        return Ladder(events=events, parents=parents, mode=mode, emission=emission, prior=prior,
                      tables=None if tables is None else list(tables)[1:], leaf_prior=leaf_priors, lookup=lookups,
                      name=name)

    @staticmethod
    def random(events, parents, **kwargs) -> Ladder:
        _warn("GraphLadder.random(events, parents, ...)", "Ladder.random(events=..., parents=..., ...)")
        kwargs.setdefault("name", "random-graph")
        return Ladder.random(events=events, parents=parents, **kwargs)

    @staticmethod
    def tree(branching, events, **kwargs) -> Ladder:
        _warn("GraphLadder.tree", "Ladder.tree")
        return Ladder.tree(branching, events, **kwargs)

    @staticmethod
    def conv1d(*args, **kwargs) -> Ladder:
        _warn("GraphLadder.conv1d", "Ladder.conv1d")
        return Ladder.conv1d(*args, **kwargs)

    @staticmethod
    def conv2d(*args, **kwargs) -> Ladder:
        _warn("GraphLadder.conv2d", "Ladder.conv2d")
        return Ladder.conv2d(*args, **kwargs)

    @staticmethod
    def fully_informative(parents, leaf_events: int = 2, **kwargs) -> Ladder:
        _warn("GraphLadder.fully_informative(parents, ...)", "Ladder.fully_informative(parents=..., ...)")
        return Ladder.fully_informative(parents=parents, leaf_events=leaf_events, **kwargs)

    @staticmethod
    def fully_informative_conv1d(*args, **kwargs) -> Ladder:
        _warn("GraphLadder.fully_informative_conv1d", "Ladder.fully_informative_conv1d")
        return Ladder.fully_informative_conv1d(*args, **kwargs)

    @staticmethod
    def fully_informative_conv2d(*args, **kwargs) -> Ladder:
        _warn("GraphLadder.fully_informative_conv2d", "Ladder.fully_informative_conv2d")
        return Ladder.fully_informative_conv2d(*args, **kwargs)

    @staticmethod
    def from_ladder(ladder: Ladder) -> Ladder:
        _warn("GraphLadder.from_ladder(ladder)", "the ladder itself")
        return ladder

    @staticmethod
    def from_dict(spec: dict) -> Ladder:
        _warn("GraphLadder.from_dict", "Ladder.from_dict")
        return Ladder.from_dict(spec)
