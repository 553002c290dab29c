"""Inference routines, one module per job (``docs/theory.md`` for the equations).

- :mod:`inference.posterior`: the one exact posterior of every ladder (§1.13, beyond the paper): log p(x),
  p(y | x) and every region's p(z_alpha | x) (:func:`~inference.posterior.posterior`), the joint MAP
  (:func:`~inference.posterior.map_events`), the Bayes-optimal accuracy, exact draws of the events (ArviZ) and
  the exact event statistics P(z_r), P(z_parent, z_child) that Eq 6 and Eq 9 read (``graph_statistics``).  The
  algorithm is chosen by the graph:

  - :mod:`inference.sum_product`: trees, sum-product in scaled probabilities batched over a level's regions
    (lambda_a(j) = prod_children sum_k P(z_c = k | z_a = j) phi_c(k), rescaled to max 1 per level);
  - :mod:`inference.junction_tree`: any layered region graph, a junction tree from a min-fill elimination
    order, its cost stated and refused when too large (the elimination itself, and the exact statistics of every
    parent-child edge, are the models' own: :mod:`teachers.elimination`);
  - :mod:`inference.event_draws`: forward filtering, backward sampling on either.
- :mod:`inference.mixture`: the SMASO Gaussian mixtures of a layer (Eq 3, Eq 10) as Pyro models, the layer's
  region scores and VQ outputs, and its distance from Eq 11: the models the next two modules run inference in.
- :mod:`inference.vq`: hard, soft and beta-VQ as inference in the SMASO mixture of a layer (MAP by
  ``infer_discrete``, tempered SVI, exact posterior draws), which produce ReLU, SiLU and swish; the
  closed forms they reproduce are in :mod:`smaso.splines.maso`.
- :mod:`inference.factorial`: the factorial mixture of a whole layer: exact joint MAP by enumeration,
  factorized MAP, mean field, and their gaps (Eq 10, Eq 11); the same answers by Pyro inference.
- :mod:`inference.rng`: the local RNG scope every seeded call runs in.
- Deprecated (0.3, removed in 0.4; each function warns when called): :mod:`inference.ladder_posterior` and
  :mod:`inference.graph_posterior`, the former tree and graph posteriors, now names for
  :mod:`inference.posterior`'s.

The names below, every entry point of these modules, are importable from the package itself
(``from inference import map_events, vq_map``); they load on first use (PEP 562), so ``import inference`` stays
cheap.  One exception: ``inference.posterior`` is the module (as it always was), and its function of the same
name is ``inference.posterior.posterior``.  The deprecated modules are importable and not in ``__all__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from teachers._lazy import lazy_submodules

_SUBMODULES = ("event_draws", "factorial", "junction_tree", "mixture", "posterior", "rng", "sum_product", "vq")
_DEPRECATED_MODULES = ("graph_posterior", "ladder_posterior")  # 0.3: they import silently, their functions warn

#: public name -> the module that defines it (or, for the elimination's names, re-exports them from teachers)
_ENTRY_POINTS = {
    **dict.fromkeys(["MAX_CLIQUE", "BayesAccuracy", "EliminationCost", "GraphStatistics", "MapEvents",
                     "MarginalsNotComputed", "Posterior", "bayes_optimal_accuracy", "elimination_order",
                     "graph_statistics", "map_events", "treewidth_cost"], "inference.posterior"),
    "posterior_event_draws": "inference.event_draws",
    "region_joint": "inference.junction_tree",
    **dict.fromkeys(["FactorialPosterior", "MeanField", "configurations", "exact_joint_map", "exact_posterior",
                     "factorial_gap", "factorial_log_joint", "factorial_posterior_draws", "factorized_map",
                     "joint_map_pyro", "mean_field_map", "mean_field_svi"], "inference.factorial"),
    **dict.fromkeys(["OrthogonalityDefect", "factorial_mixture_model", "log_pi_from_offsets", "offsets_from_pi",
                     "orthogonality_defect", "pi_from_offsets", "region_scores", "unit_mixture_model",
                     "vq_outputs"], "inference.mixture"),
    "seeded_rng": "inference.rng",
    **dict.fromkeys(["VQFit", "posterior_region_draws", "region_summary", "svi_vq", "vq_map"], "inference.vq"),
}

__all__ = [  # the submodules and every entry point, as a literal (type checkers and linters read it)
    "MAX_CLIQUE",
    "BayesAccuracy",
    "EliminationCost",
    "FactorialPosterior",
    "GraphStatistics",
    "MapEvents",
    "MarginalsNotComputed",
    "MeanField",
    "OrthogonalityDefect",
    "Posterior",
    "VQFit",
    "bayes_optimal_accuracy",
    "configurations",
    "elimination_order",
    "event_draws",
    "exact_joint_map",
    "exact_posterior",
    "factorial",
    "factorial_gap",
    "factorial_log_joint",
    "factorial_mixture_model",
    "factorial_posterior_draws",
    "factorized_map",
    "graph_statistics",
    "joint_map_pyro",
    "junction_tree",
    "log_pi_from_offsets",
    "map_events",
    "mean_field_map",
    "mean_field_svi",
    "mixture",
    "offsets_from_pi",
    "orthogonality_defect",
    "pi_from_offsets",
    "posterior",
    "posterior_event_draws",
    "posterior_region_draws",
    "region_joint",
    "region_scores",
    "region_summary",
    "rng",
    "seeded_rng",
    "sum_product",
    "svi_vq",
    "treewidth_cost",
    "unit_mixture_model",
    "vq",
    "vq_map",
    "vq_outputs"
]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily
    from inference.event_draws import posterior_event_draws
    from inference.factorial import (
        FactorialPosterior,
        MeanField,
        configurations,
        exact_joint_map,
        exact_posterior,
        factorial_gap,
        factorial_log_joint,
        factorial_posterior_draws,
        factorized_map,
        joint_map_pyro,
        mean_field_map,
        mean_field_svi,
    )
    from inference.junction_tree import region_joint
    from inference.mixture import (
        OrthogonalityDefect,
        factorial_mixture_model,
        log_pi_from_offsets,
        offsets_from_pi,
        orthogonality_defect,
        pi_from_offsets,
        region_scores,
        unit_mixture_model,
        vq_outputs,
    )
    from inference.posterior import (
        MAX_CLIQUE,
        BayesAccuracy,
        EliminationCost,
        GraphStatistics,
        MapEvents,
        MarginalsNotComputed,
        Posterior,
        bayes_optimal_accuracy,
        elimination_order,
        graph_statistics,
        map_events,
        treewidth_cost,
    )
    from inference.rng import seeded_rng
    from inference.vq import VQFit, posterior_region_draws, region_summary, svi_vq, vq_map

__getattr__, __dir__ = lazy_submodules(__name__, (*_SUBMODULES, *_DEPRECATED_MODULES), globals(), _ENTRY_POINTS)
