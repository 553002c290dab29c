"""Deprecated: sampling a region graph is :func:`teachers.sampling.sample_ladder` since 0.3 (one sampler for
every ladder, the same bytes as this module's sampler gave).

``sample_graph_ladder``, ``sample_graph_rows``, ``event_dtype`` and ``GraphSample`` still work for one release,
with a :class:`DeprecationWarning` naming the new spelling; ``strided_runs``, ``signature_groups``,
``sampling_plan``, ``GRAPH_STREAM_VERSION`` are re-exported from :mod:`teachers.sampling`.
"""

from __future__ import annotations

from typing import Any

from ._deprecation import deprecated, warn
from .ladder import Ladder
from .sampling import (
    GRAPH_STREAM_VERSION,
    LadderSample,
    sample_ladder,
    sample_rows,
    sampling_plan,
    signature_groups,
    strided_runs,
)

__all__ = ["GRAPH_STREAM_VERSION", "event_dtype", "sample_graph_ladder", "sample_graph_rows",
           "sampling_plan", "signature_groups", "strided_runs"]

sample_graph_ladder = deprecated(sample_ladder, "teachers.graph_sampling.sample_graph_ladder",
                                 "teachers.sampling.sample_ladder")
sample_graph_rows = deprecated(sample_rows, "teachers.graph_sampling.sample_graph_rows",
                               "teachers.sampling.sample_rows")
event_dtype = deprecated(Ladder.event_dtype, "teachers.graph_sampling.event_dtype(g)",
                         "g.event_dtype() (teachers.ladder.Ladder.event_dtype)")


def __getattr__(name: str) -> Any:
    """``GraphSample`` is :class:`teachers.sampling.LadderSample` (``.graph`` is its ``.ladder``), with a warning."""
    if name == "GraphSample":
        warn("teachers.graph_sampling.GraphSample", "teachers.sampling.LadderSample")
        return LadderSample
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
