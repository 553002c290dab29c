"""Deprecated: sampling a region graph is :func:`teachers.sampling.sample_ladder` since 0.3 (one sampler for
every ladder, the same bytes as this module's sampler gave).

``sample_graph_ladder``, ``sample_graph_rows`` and ``GraphSample`` still work for one release, with a
:class:`DeprecationWarning` naming the new spelling; ``strided_runs``, ``signature_groups``,
``sampling_plan``, ``GRAPH_STREAM_VERSION`` are re-exported from :mod:`teachers.sampling`.
"""

from __future__ import annotations

import warnings

import torch

from .ladder import Ladder
from .sampling import (
    GRAPH_STREAM_VERSION,
    LadderSample,
    SamplingPlan,
    sample_ladder,
    sample_rows,
    sampling_plan,
    signature_groups,
    strided_runs,
)

__all__ = ["GRAPH_STREAM_VERSION", "event_dtype", "sample_graph_ladder", "sample_graph_rows",
           "sampling_plan", "signature_groups", "strided_runs"]

def _warn(old: str, new: str, stacklevel: int = 3) -> None:
    warnings.warn(f"teachers.graph_sampling.{old} is deprecated since smaso 0.3 and will be removed in 0.4; use "
                  f"{new}", DeprecationWarning, stacklevel=stacklevel)


def __getattr__(name: str):
    """``GraphSample`` is :class:`teachers.sampling.LadderSample` (``.graph`` is its ``.ladder``), with a warning."""
    if name == "GraphSample":
        _warn("GraphSample", "teachers.sampling.LadderSample")
        return LadderSample
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def event_dtype(g: Ladder) -> torch.dtype:
    """Deprecated: ``g.event_dtype()``."""
    _warn("event_dtype(g)", "g.event_dtype() (teachers.ladder.Ladder.event_dtype)")
    return g.event_dtype()


def sample_graph_ladder(g: Ladder, num_examples: int, seed: int = 0, **kwargs) -> LadderSample:
    """Deprecated: :func:`teachers.sampling.sample_ladder`."""
    _warn("sample_graph_ladder", "teachers.sampling.sample_ladder")
    return sample_ladder(g, num_examples, seed, **kwargs)


def sample_graph_rows(g: Ladder, seed: int, lo: int, hi: int, *, plan: SamplingPlan | None = None,
                      **kwargs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Deprecated: :func:`teachers.sampling.sample_rows`."""
    _warn("sample_graph_rows", "teachers.sampling.sample_rows")
    return sample_rows(g, seed, lo, hi, plan=plan, **kwargs)
