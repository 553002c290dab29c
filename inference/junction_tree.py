"""Exact inference on any ladder by a junction tree: the general-graph engine of :mod:`inference.posterior`
(``docs/theory.md`` §1.13; a layered DAG of regions).

Factor graph.  One variable per region (its event; global index ``level_offsets[l] + i``) and the factors

- topdown: the prior over the label and one table over ``(parents, region)`` per region below the top;
- bottomup: one prior per leaf and, per region above the leaves, the deterministic factor over
  ``(children, region)``: log 1 where ``region = lookup(code(children))``, log 0 = -inf elsewhere;
- evidence (when ``x`` is given): ``emission.log_likelihood(x)`` on every leaf, batched over the examples.

Everything is in log space (``logsumexp``), float64, and batched: a factor carries a leading example
dimension (1 when it does not depend on x).

Elimination.  :func:`elimination_order` is the greedy min-fill order (ties: the smaller clique table, then
the smaller global index) on the interaction graph (regions sharing a factor are neighbours).  Eliminating
region v creates the clique ``C_v`` = v and its neighbours at that moment; :func:`treewidth_cost` states the
cost, and inference refuses with a ``ValueError`` when the largest clique table exceeds ``max_clique`` entries
per example.

Junction tree.  The cliques ``C_v`` with parent(C_v) = the clique of the first-eliminated region of
``C_v \\ {v}`` form a junction tree.  Every factor sits in the clique of the first eliminated region of its
scope.  The upward pass (leaves of the tree to its root) is exactly variable elimination and gives
``log p(x)``; one downward pass (Shafer-Shenoy: the message to a child omits that child's own message)
calibrates every clique, and every region's marginal is read off its own clique (:func:`junction_posterior`).
Cost: two passes, each ``O(N * sum_v (children(C_v) + 1) * |C_v table|)``, memory ``O(N * sum_v |C_v table|)``
per chunk of examples (chunks keep the largest temporary at ~2^24 float64 values).  The joint MAP
(:func:`junction_map`: max in place of logsumexp, then a traceback), the draws (:mod:`inference.event_draws`)
and :func:`graph_statistics` (no evidence) read the same tables.

Where.  The factor graph, the elimination order, the junction tree with its calibration and everything without
evidence (:func:`treewidth_cost`, :func:`region_joint`, :func:`graph_statistics`) are :mod:`teachers.elimination`'s,
since the model's own exact statistics need them, and are re-exported here; this module adds the evidence:
:func:`junction_posterior` and :func:`junction_map`.
"""

from __future__ import annotations

from typing import cast

import torch

from teachers.elimination import (  # the elimination machinery lives with the models (teachers <- inference)
    MAX_CLIQUE,
    EliminationCost,
    GraphStatistics,
    JunctionTree,
    _factors,
    _region,
    _sum_out,
    elimination_order,
    graph_statistics,
    region_joint,
    treewidth_cost,
)
from teachers.ladder import Ladder

__all__ = ["MAX_CLIQUE", "EliminationCost", "GraphStatistics", "JunctionTree", "elimination_order", "graph_statistics",
           "junction_map", "junction_posterior", "region_joint", "treewidth_cost"]


# ------------------------------------------------------------------------------------------ posterior, MAP
def junction_posterior(g: Ladder, jt: JunctionTree, x: torch.Tensor, dev: torch.device, marginals: bool
                       ) -> list[torch.Tensor]:
    """One pass of the junction tree ``jt`` of ``g`` on the examples ``x`` on ``dev``: ``[log p(x) (n,), p(y | x)
    (n, m_0)]`` and, when ``marginals``, p(z_{l,i} = k | x) ``(n, R_l, events[l])`` of every level l (zero beyond
    a region's own event count).  Impossible examples get log p(x) = -inf and nan marginals (the caller raises)."""
    n, levels = x.shape[0], zip(g.num_regions, g.events, strict=True)
    psi, up, dn = jt.calibrate(_factors(g, x, dev, jt.max_clique), n)
    out: list[torch.Tensor | None] = [jt.log_z(up, n), None]  # p(y | x) read at v = 0, which every pass reads
    out += [torch.zeros(n, r, m, dtype=torch.float64, device=dev) for r, m in levels] if marginals else []
    for v in range(g.total_regions) if marginals else [0]:
        k = jt.pos[v]
        lm = _sum_out(jt.belief(k, psi, up, dn, n), jt.cliques[k], {v}).t  # (n, m_v)
        q = (lm - torch.logsumexp(lm, -1, keepdim=True)).exp()
        if v == 0:
            out[1] = q
        if marginals:
            l, i = _region(g, v)
            cast(torch.Tensor, out[2 + l])[:, i, : q.shape[1]] = q
    return cast(list[torch.Tensor], out)


def junction_map(g: Ladder, x: torch.Tensor, dev: torch.device, *, max_clique: int = MAX_CLIQUE
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The joint MAP argmax_z p(z | x) by max-product elimination and traceback: ``z`` ``(N, total_regions)`` int64
    in global region order and ``log p(z_map, x)`` ``(N,)`` (-inf for an impossible example; ties between equally
    probable configurations go to the smallest event)."""
    jt = JunctionTree(g, max_clique)
    n = x.shape[0]
    psi, up, _ = jt.calibrate(_factors(g, x.detach().to(dev), dev, jt.max_clique), n, down=False, reduce=torch.amax)
    best = jt.log_z(up, n)
    z = torch.zeros(n, g.total_regions, dtype=torch.int64, device=dev)
    ar = torch.arange(n, device=dev)
    for k in reversed(range(len(jt.cliques))):  # the separator of clique k is eliminated after it
        c = jt.cliques[k]
        t = jt.conditional(k, psi, up, n)  # (n, m_v, *sep)
        idx: tuple[torch.Tensor | slice, ...] = (ar, slice(None), *(z[:, u] for u in c[1:]))
        z[:, c[0]] = t[idx].argmax(-1)
    return z, best
