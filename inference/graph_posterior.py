"""Deprecated since 0.3: exact inference on every ladder, region graphs included, is :mod:`inference.posterior`
(its junction tree is :mod:`inference.junction_tree`).

Old name -> new one: ``graph_posterior`` -> :func:`inference.posterior.posterior` (this wrapper keeps the old
default ``marginals=True`` and returns a :class:`GraphPosterior`, whose ``marginals[l][i]`` is ``(N, m_{l,i})``
per region as before), ``graph_map`` -> :func:`inference.posterior.map_events`, ``graph_bayes_accuracy`` ->
:func:`inference.posterior.bayes_optimal_accuracy`; ``graph_statistics``, ``elimination_order``,
``treewidth_cost`` keep their names in :mod:`inference.posterior`, as do ``GraphStatistics``,
``EliminationCost`` and ``MAX_CLIQUE``.  Every function here warns a :class:`DeprecationWarning` naming the new
one when it is called (the module itself imports silently); removed in 0.4.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch

from teachers._deprecation import deprecated, warn

from . import posterior as _new
from .posterior import MAX_CLIQUE, EliminationCost, GraphStatistics, Posterior

if TYPE_CHECKING:
    from teachers.ladder import Ladder

__all__ = ["MAX_CLIQUE", "EliminationCost", "GraphPosterior", "GraphStatistics", "elimination_order",
           "graph_bayes_accuracy", "graph_map", "graph_posterior", "graph_statistics", "treewidth_cost"]


@dataclass
class GraphPosterior(Posterior):
    """Deprecated result of :func:`graph_posterior`: a :class:`inference.posterior.Posterior` whose ``marginals``
    is ``marginals[l][i]`` ``(N, m_{l,i})``, one tensor per region (``Posterior.region_marginals()``), and None
    when not computed, as in 0.2."""

    # Deprecated, and unlike its base on purpose (0.2's per-region lists, None when not computed; removed in 0.4):
    # graph_posterior stores the per-region lists in the base's _marginals, so the types differ from Posterior's.
    @property
    def marginals(self) -> list[list[torch.Tensor]] | None:  # type: ignore[override]  # 0.2's type, see above
        """The per-region marginals as stored (None when not computed: this deprecated class keeps 0.2's behaviour)."""
        return cast("list[list[torch.Tensor]] | None", self._marginals)

    def region_marginal(self, level: int, i: int) -> torch.Tensor:
        """p(z_{level,i} | x) ``(N, m_{level,i})``."""
        if self.marginals is None:
            raise ValueError("marginals: not computed; call graph_posterior(..., marginals=True)")
        return self.marginals[level][i]

    def region_marginals(self) -> list[list[torch.Tensor]]:
        """The per-region marginals, as stored."""
        if self.marginals is None:
            raise ValueError("marginals: not computed; call graph_posterior(..., marginals=True)")
        return self.marginals


def graph_posterior(g: Ladder, x: torch.Tensor, *, marginals: bool = True, max_clique: int = MAX_CLIQUE,
                    chunk_size: int | None = None, device: torch.device | str | None = None) -> GraphPosterior:
    """Deprecated: use :func:`inference.posterior.posterior` (``marginals=True`` was this function's default)."""
    warn("inference.graph_posterior.graph_posterior", "inference.posterior.posterior(ladder, x, marginals=True) "
         "(Posterior.region_marginals() gives the per-region list)")
    post = _new.posterior(g, x, marginals=marginals, max_clique=max_clique, chunk_size=chunk_size, device=device)
    per_region = cast("list[torch.Tensor] | None", post.region_marginals() if marginals else None)  # see marginals
    return GraphPosterior(post.log_evidence, post.label, per_region,
                          post.method, post.cost, post.region_events)


graph_map = deprecated(_new.map_events, "inference.graph_posterior.graph_map", "inference.posterior.map_events")
graph_bayes_accuracy = deprecated(_new.bayes_optimal_accuracy, "inference.graph_posterior.graph_bayes_accuracy",
                                  "inference.posterior.bayes_optimal_accuracy")
graph_statistics = deprecated(_new.graph_statistics, "inference.graph_posterior.graph_statistics",
                              "inference.posterior.graph_statistics")
elimination_order = deprecated(_new.elimination_order, "inference.graph_posterior.elimination_order",
                               "inference.posterior.elimination_order")
treewidth_cost = deprecated(_new.treewidth_cost, "inference.graph_posterior.treewidth_cost",
                            "inference.posterior.treewidth_cost")
