"""Teachers with known hidden structure: the summarization ladder (framework paper §3;
:class:`~teachers.ladder.Ladder`, on any layered region graph -- overlapping receptive fields included --
with the uniform tree as its special case) and the tent map tau^k (a deep 1-D target with exactly 2^k linear
pieces, ``docs/theory.md`` §2).

Modules: :mod:`~teachers.ladder` (the model, §3.1), :mod:`~teachers.regions` (region graphs and mixed-radix
codes), :mod:`~teachers.validation` and :mod:`~teachers.spec_check` (limits and spec checks),
:mod:`~teachers.emission` (p(x_r | z_r)), :mod:`~teachers.categorical` (alias sampling),
:mod:`~teachers.sampling` (the block-seeded sampler), :mod:`~teachers.pyro_model` (the Pyro model) and
:mod:`~teachers.pyro_sites` (its emission and point-mass sites),
:mod:`~teachers.statistics` (P(z_beta | z_alpha), exact and counted), :mod:`~teachers.elimination` (the
ladder's factor graph and junction tree: exact statistics and joints of any region graph, no evidence),
:mod:`~teachers.dataset` /
:mod:`~teachers.chunked` (files and zarr stores), :mod:`~teachers.engine` (serial and Dask engines),
:mod:`~teachers.spec_io` (spec files), :mod:`~teachers.leak` (exact I(x_b; z_a | z_b) per edge of any region
graph: how far ``Ladder.leaky(eps)`` breaks focus), :mod:`~teachers.tent` (tau^k).  ``teachers.graph_ladder``,
``teachers.graph_sampling`` and ``teachers.graph_pyro_model`` are deprecated aliases (0.3).

The names below are imported on first use (PEP 562), so that ``import teachers`` (and ``smaso --help``)
does not import torch or pyro.  ``teachers.GraphLadder`` (deprecated, 0.3) is still importable from here and warns
on every access; it is not in ``__all__``."""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

#: public name -> the submodule that defines it
_EXPORTS = {
    "AliasTable": "categorical", "BlockRNG": "categorical", "CategoricalTable": "categorical",
    "IndexedCategorical": "categorical",
    "ChunkDataset": "chunked", "ChunkedLadderData": "chunked", "StreamingLadderDataset": "chunked",
    "open_dataset": "chunked", "sample_to_store": "chunked",
    "DatasetFormatError": "dataset", "LadderDataset": "dataset", "load_dataset": "dataset", "save_dataset": "dataset",
    "EliminationCost": "elimination", "GraphStatistics": "elimination", "elimination_order": "elimination",
    "graph_statistics": "elimination", "region_joint": "elimination", "treewidth_cost": "elimination",
    "Emission": "emission", "GaussianEmission": "emission", "OneHotEmission": "emission",
    "Factorization": "ladder", "Ladder": "ladder", "LadderSpecError": "ladder",
    "EmissionDistribution": "pyro_model", "LadderModel": "pyro_model",
    "edge_focus": "leak", "focus_by_edge": "leak",
    "Productions": "productions", "RHMParams": "rhm", "rhm_rules": "rhm",
    "enumerate_derivations": "derivations", "exchange_synonyms": "derivations", "num_derivations": "derivations",
    "sample_distinct": "derivations", "train_test_split": "derivations",
    "BLOCK_SIZE": "sampling", "LadderSample": "sampling", "sample_ladder": "sampling", "sample_rows": "sampling",
    "sampling_plan": "sampling",
    "load_spec": "spec_io", "save_spec": "spec_io",
    "EventCounts": "statistics", "EventStatistics": "statistics", "compare_statistics": "statistics",
    "count_events": "statistics", "empirical_statistics": "statistics", "exact_statistics": "statistics",
    "TentNetwork": "tent", "TentSample": "tent", "sample_tent": "tent", "tent": "tent", "tent_power": "tent",
}
#: deprecated public names -> (the submodule that defines them, the name to use): still importable from here, with a
#: DeprecationWarning on every access, and never in ``__all__``
_DEPRECATED = {"GraphLadder": ("graph_ladder", "teachers.Ladder")}

__all__ = [
    "BLOCK_SIZE",
    "AliasTable",
    "BlockRNG",
    "CategoricalTable",
    "ChunkDataset",
    "ChunkedLadderData",
    "DatasetFormatError",
    "EliminationCost",
    "Emission",
    "EmissionDistribution",
    "EventCounts",
    "EventStatistics",
    "Factorization",
    "GaussianEmission",
    "GraphStatistics",
    "IndexedCategorical",
    "Ladder",
    "LadderDataset",
    "LadderModel",
    "LadderSample",
    "LadderSpecError",
    "OneHotEmission",
    "Productions",
    "RHMParams",
    "StreamingLadderDataset",
    "TentNetwork",
    "TentSample",
    "compare_statistics",
    "count_events",
    "edge_focus",
    "elimination_order",
    "empirical_statistics",
    "enumerate_derivations",
    "exact_statistics",
    "exchange_synonyms",
    "focus_by_edge",
    "graph_statistics",
    "load_dataset",
    "load_spec",
    "num_derivations",
    "open_dataset",
    "region_joint",
    "rhm_rules",
    "sample_distinct",
    "sample_ladder",
    "sample_rows",
    "sample_tent",
    "sample_to_store",
    "sampling_plan",
    "save_dataset",
    "save_spec",
    "tent",
    "tent_power",
    "train_test_split",
    "treewidth_cost",
]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily
    from .categorical import AliasTable, BlockRNG, CategoricalTable, IndexedCategorical
    from .chunked import ChunkDataset, ChunkedLadderData, StreamingLadderDataset, open_dataset, sample_to_store
    from .dataset import DatasetFormatError, LadderDataset, load_dataset, save_dataset
    from .elimination import (
        EliminationCost,
        GraphStatistics,
        elimination_order,
        graph_statistics,
        region_joint,
        treewidth_cost,
    )
    from .emission import Emission, GaussianEmission, OneHotEmission
    from .ladder import Factorization, Ladder, LadderSpecError
    from .leak import edge_focus, focus_by_edge
    from .pyro_model import EmissionDistribution, LadderModel
    from .sampling import BLOCK_SIZE, LadderSample, sample_ladder, sample_rows, sampling_plan
    from .spec_io import load_spec, save_spec
    from .statistics import (
        EventCounts,
        EventStatistics,
        compare_statistics,
        count_events,
        empirical_statistics,
        exact_statistics,
    )
    from .tent import TentNetwork, TentSample, sample_tent, tent, tent_power


def __getattr__(name: str) -> Any:
    """Import a public name, or a submodule, on first use (PEP 562); a deprecated name warns on every access."""
    if name in _DEPRECATED:
        from ._deprecation import warn

        module, new = _DEPRECATED[name]
        warn(f"teachers.{name}", new)
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    exported = _EXPORTS.get(name)
    if exported is None:
        if name.startswith("__"):
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        try:  # a submodule not imported yet (``teachers.spec_io`` after a bare ``import teachers``)
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{exported}"), name)
    if name != "tent":  # (``tent`` is the function; see _Package)
        globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


_UNSET = object()


class _Package(types.ModuleType):
    """``teachers.tent`` is the function tau (as when this package imported its names eagerly), not the
    submodule of the same name that the import system binds here on its first import."""

    @property
    def tent(self) -> Any:
        override = self.__dict__.get("_tent_override", _UNSET)
        return importlib.import_module(f"{__name__}.tent").tent if override is _UNSET else override

    @tent.setter
    def tent(self, value: object) -> None:
        if not isinstance(value, types.ModuleType):  # the import system's binding of the submodule is ignored
            self.__dict__["_tent_override"] = value


sys.modules[__name__].__class__ = _Package
