"""One exact posterior for every ladder: p(y | x), log p(x), p(z_alpha | x) of every region, the joint MAP,
exact draws, the Bayes-optimal accuracy and the exact event statistics (``docs/theory.md`` §1.13).

The algorithm is chosen inside, by the ladder's graph:

- a tree (``ladder.is_tree()``, every region below the top has one parent): sum-product in scaled probabilities,
  batched over the examples and over the regions of a level (:mod:`inference.sum_product`: one ``bmm`` per
  level top-down, one ``scatter_add`` per level bottom-up, every message rescaled to max 1 and the log scales
  summed into log p(x));
- any other region graph (regions of several parents): the junction tree of a min-fill elimination order
  (:mod:`inference.junction_tree`, log space; its cost is stated by :func:`treewidth_cost` and refused beyond
  ``max_clique``).

Both are exact (float64; the two agree to ~1e-13 on trees).  The tree path's scaled evidence of an example
can come out 0 only if the example is impossible or its messages underflowed past the per-level rescaling;
those rows are recomputed in log space by the junction tree, and an example whose log p(x) is -inf there too is
refused (:func:`raise_impossible`).  Results live on the computation's device (``device=``, default x's);
the only host synchronization is that one check, after the whole batch.

- :func:`posterior` -> :class:`Posterior` (log p(x), p(y | x), the padded per-level marginals, ``predict``);
- :func:`map_events`: the joint MAP configuration argmax_z p(z | x) and log p(z_map, x) (max-product);
- :func:`bayes_optimal_accuracy`: the accuracy of argmax_y p(y | x), the ceiling of any student;
- :func:`posterior_event_draws` (:mod:`inference.event_draws`): exact draws of every event, ArviZ;
- :func:`graph_statistics` / :class:`GraphStatistics`: exact P(z_r), P(z_parent, z_child), P(z_child |
  z_parent) and P(z_pa(r)) of any ladder; :func:`elimination_order`, :func:`treewidth_cost`,
  :class:`EliminationCost`, :data:`MAX_CLIQUE` (:mod:`inference.junction_tree`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from teachers.ladder import Ladder

from ._checks import check_chunk_size, check_device, check_ladder, raise_impossible
from .event_draws import posterior_event_draws
from .junction_tree import (
    MAX_CLIQUE,
    EliminationCost,
    GraphStatistics,
    JunctionTree,
    elimination_order,
    graph_statistics,
    junction_map,
    junction_posterior,
    treewidth_cost,
)
from .sum_product import TreePlan, downward, leaf_factors, tree_plan, upward

__all__ = ["MAX_CLIQUE", "METHODS", "EliminationCost", "GraphStatistics", "Posterior", "bayes_optimal_accuracy",
           "elimination_order", "graph_statistics", "map_events", "posterior", "posterior_event_draws",
           "raise_impossible", "treewidth_cost"]

#: ``posterior(method=...)``: ``"auto"`` (the tree path on trees, else the junction tree), or either one.
METHODS = ("auto", "tree", "junction-tree")
# float64 values of the largest temporary per chunk of examples: on a CPU small enough to stay in the caches
# (2 MiB; the emission's temporary twice that), elsewhere ~256 MiB
_CHUNK_ELEMENTS_CPU = 2**18
_CHUNK_ELEMENTS = 2**25
_TEACHER = "the ladder"


@dataclass
class Posterior:
    """Result of :func:`posterior` (float64, on the computation's device).

    :ivar log_evidence: ``(N,)`` log p(x).
    :ivar label: ``(N, m_0)`` p(y | x).
    :ivar marginals: when requested, ``marginals[l]`` ``(N, R_l, events[l])`` p(z_{l,i} = k | x), zero beyond a
        region's own event count (regions of a level may differ; :meth:`region_marginal` slices them).
    :ivar method: ``"tree"`` (scaled sum-product) or ``"junction-tree"``.
    :ivar cost: the junction tree's :class:`EliminationCost` (None on the tree path).
    :ivar region_events: ``region_events[l][i]`` the event counts (``Ladder.region_events``).
    """

    log_evidence: torch.Tensor
    label: torch.Tensor
    marginals: list[torch.Tensor] | None = None
    method: str = "tree"
    cost: EliminationCost | None = None
    region_events: tuple[tuple[int, ...], ...] | None = field(default=None, repr=False)

    def predict(self) -> torch.Tensor:
        """Bayes-optimal labels ``(N,)``: argmax_y p(y | x)."""
        return self.label.argmax(-1)

    def region_marginal(self, level: int, i: int) -> torch.Tensor:
        """p(z_{level,i} | x) ``(N, m_{level,i})`` (a view of :attr:`marginals`)."""
        if self.marginals is None:
            raise ValueError("marginals: not computed; call posterior(..., marginals=True)")
        m = self.marginals[level]
        return m[:, i, : self.region_events[level][i]] if self.region_events is not None else m[:, i]

    def region_marginals(self) -> list[list[torch.Tensor]]:
        """``[[p(z_{l,i} | x) (N, m_{l,i}) for every region i of level l] for every level l]``."""
        if self.marginals is None:
            raise ValueError("marginals: not computed; call posterior(..., marginals=True)")
        return [[self.region_marginal(l, i) for i in range(m.shape[1])] for l, m in enumerate(self.marginals)]


def posterior(ladder: Ladder, x: torch.Tensor, *, marginals: bool = False, chunk_size: int | None = None,
              device: torch.device | str | None = None, max_clique: int = MAX_CLIQUE, method: str = "auto"
              ) -> Posterior:
    """Exact log p(x), p(y | x) and (when ``marginals``) p(z_alpha | x) of every region, in float64 (module
    docstring: scaled sum-product on a tree, the junction tree on any other graph).

    :param ladder: the ladder.
    :param x: ``(N, R_d, dim)`` observed inputs (``LadderSample.inputs()``).
    :param marginals: also return every region's posterior marginal (the label's is always computed).
    :param chunk_size: examples per pass (default: sized to the caches on a CPU, to ~256 MiB of temporaries
        elsewhere; the junction tree's to ~2^24 values per clique table).
    :param device: where to compute and return the results (default: x's device).
    :param max_clique: the junction tree: refuse (``ValueError`` naming the induced width and the clique) when
        the largest clique table has more entries than this, per example.
    :param method: ``"auto"``, ``"tree"`` (trees only) or ``"junction-tree"`` (any ladder; :data:`METHODS`).
    :raises ValueError: bad shapes or arguments, an example of probability 0 (:func:`raise_impossible`).
    """
    check_ladder(ladder)
    ladder.emission.check_input(x, "x")
    dev = check_device(device, x)
    if method not in METHODS:
        raise ValueError(f"method: expected one of {list(METHODS)}, got {method!r}")
    if method == "tree" and not ladder.is_tree():
        raise ValueError("method: 'tree' needs a ladder whose regions have one parent each; use 'junction-tree'")
    if method == "junction-tree" or not ladder.is_tree():
        return _junction(ladder, x, dev, marginals, chunk_size, max_clique)
    plan = tree_plan(ladder, dev)
    step = check_chunk_size(chunk_size, _tree_chunk(plan, dev))
    n = x.shape[0]
    if n <= step:  # one pass, no copies
        up = upward(plan, *leaf_factors(plan, x.detach().to(dev)), keep=marginals)
        log_z, label = up.log_z, up.label
        margs = [q.transpose(0, 1).contiguous() for q in downward(plan, up)] if marginals else None
    else:
        log_z = torch.empty(n, dtype=torch.float64, device=dev)
        label = torch.empty(n, ladder.num_classes, dtype=torch.float64, device=dev)
        margs = ([torch.empty(n, r, m, dtype=torch.float64, device=dev) for r, m in zip(plan.R, plan.M, strict=True)]
                 if marginals else None)
        for s in range(0, n, step):
            e = min(n, s + step)
            up = upward(plan, *leaf_factors(plan, x[s:e].detach().to(dev)), keep=marginals)
            log_z[s:e] = up.log_z
            label[s:e] = up.label
            if marginals:
                for l, q in enumerate(downward(plan, up)):
                    margs[l][s:e] = q.transpose(0, 1)
    out = Posterior(log_z, label, margs, "tree", None, ladder.region_events)
    bad = torch.isneginf(log_z)
    if bool(bad.any()):  # impossible, or underflowed: the log-space junction tree decides
        _recompute(ladder, x, dev, out, bad.nonzero().flatten(), max_clique)
    return out


def _tree_chunk(plan: TreePlan, dev: torch.device) -> int:
    """Default examples per pass of the tree path: the largest per-level temporary within the budget."""
    budget = _CHUNK_ELEMENTS_CPU if dev.type == "cpu" else _CHUNK_ELEMENTS
    return max(1, min(budget // max(1, plan.per_example), 2 * budget // max(1, plan.emission_elements)))


def _recompute(ladder: Ladder, x: torch.Tensor, dev: torch.device, out: Posterior, rows: torch.Tensor,
               max_clique: int) -> None:
    """Rows whose scaled evidence is 0: their junction-tree results in place, or the impossibility error (also
    when the junction tree is beyond ``max_clique``: then the scaled pass's verdict stands)."""
    try:
        log_z, marg, _ = junction_posterior(ladder, x[rows.to(x.device)], dev, marginals=out.marginals is not None,
                                            max_clique=max_clique)
    except ValueError:
        raise_impossible(out.log_evidence, 0, _TEACHER)
        raise
    full = out.log_evidence.clone()
    full[rows] = log_z
    raise_impossible(full, 0, _TEACHER)
    out.log_evidence[rows] = log_z
    out.label[rows] = marg[0][0]
    if out.marginals is not None:
        for l, lvl in enumerate(marg):
            for i, t in enumerate(lvl):
                out.marginals[l][rows, i, : t.shape[1]] = t


def _junction(ladder: Ladder, x: torch.Tensor, dev: torch.device, marginals: bool, chunk_size, max_clique: int
              ) -> Posterior:
    jt = JunctionTree(ladder, max_clique)
    step = None if chunk_size is None else check_chunk_size(chunk_size, 1)
    log_z, marg, cost = junction_posterior(ladder, x, dev, marginals=marginals, max_clique=max_clique,
                                           chunk_size=step, jt=jt)
    raise_impossible(log_z, 0, _TEACHER)
    padded = None
    if marginals:
        padded = []
        for l, lvl in enumerate(marg):
            t = torch.zeros(x.shape[0], ladder.num_regions[l], ladder.events[l], dtype=torch.float64, device=dev)
            for i, q in enumerate(lvl):
                t[:, i, : q.shape[1]] = q
            padded.append(t)
    return Posterior(log_z, marg[0][0], padded, "junction-tree", cost, ladder.region_events)


def map_events(ladder: Ladder, x: torch.Tensor, *, max_clique: int = MAX_CLIQUE,
               device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The joint MAP configuration argmax_z p(z | x) of any ladder, by max-product elimination on its junction
    tree and traceback (:func:`inference.junction_tree.junction_map`).

    :param device: where to compute and return the results (default: ``x``'s device).
    :returns: ``z`` ``(N, total_regions)`` int64 in global region order and ``log p(z_map, x)`` ``(N,)`` (ties
        between equally probable configurations go to the smallest event).
    :raises ValueError: bad shapes, a clique beyond ``max_clique``, an example of probability 0.
    """
    check_ladder(ladder)
    ladder.emission.check_input(x, "x")
    z, best = junction_map(ladder, x, check_device(device, x), max_clique=max_clique)
    raise_impossible(best, 0, _TEACHER)
    return z, best


def bayes_optimal_accuracy(ladder: Ladder, x: torch.Tensor, y: torch.Tensor | None = None, *,
                           batch_size: int | None = None, **kwargs) -> dict:
    """Accuracy of the Bayes-optimal classifier argmax_y p(y | x) on a sample (any ladder).

    :param batch_size: examples per :func:`posterior` call (None: all at once; :func:`posterior` bounds its
        own memory by ``chunk_size`` anyway).
    :param kwargs: :func:`posterior`'s ``chunk_size``, ``device``, ``max_clique``, ``method``.
    :returns: a dict with

        - ``"expected"``: mean over the inputs of max_y p(y|x), the exact accuracy the Bayes classifier has on
          average on these inputs (lower variance than counting);
        - ``"stderr"``: its standard error as an estimate of the ladder's accuracy (the spread of max_y p(y|x)
          over inputs, / sqrt(N));
        - ``"empirical"`` (when ``y`` is given): the fraction of argmax_y p(y|x) equal to y;
        - ``"stderr_empirical"``: the standard deviation of ``"empirical"`` around ``"expected"`` given these
          inputs, sqrt(sum_i q_i (1 - q_i)) / N with q_i = max p;
        - ``"n"`` (NaN statistics for N = 0).
    """
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size: expected a positive integer or None, got {batch_size!r}")
    check_ladder(ladder).emission.check_input(x, "x")
    if y is not None and tuple(y.shape) != (x.shape[0],):
        raise ValueError(f"y: expected shape ({x.shape[0]},), got {tuple(y.shape)}")
    step = max(1, x.shape[0] if batch_size is None else batch_size)
    best_parts, pred_parts = [], []
    for s in range(0, max(x.shape[0], 1), step):
        post = posterior(ladder, x[s: s + step], **kwargs)
        best_parts.append(post.label.max(-1).values)
        pred_parts.append(post.predict())
    best = torch.cat(best_parts)
    n = best.numel()
    nan = float("nan")
    out = {"expected": best.mean().item() if n else nan, "stderr": (best.std() / n**0.5).item() if n > 1 else nan,
           "stderr_empirical": ((best * (1 - best)).sum().sqrt() / n).item() if n else nan, "n": n}
    if y is not None:
        pred = torch.cat(pred_parts)
        out["empirical"] = (pred == y.long().to(pred.device)).double().mean().item() if n else nan
    return out
