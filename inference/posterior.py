"""One exact posterior for every ladder (``docs/theory.md`` §1.13): :func:`posterior` (log p(x), p(y | x), every
region's p(z_alpha | x)), :func:`map_events` (the joint MAP), :func:`bayes_optimal_accuracy`,
:func:`posterior_event_draws` and the exact event statistics :func:`graph_statistics`.

The algorithm is chosen by the graph, both exact in float64: on a tree, sum-product in scaled probabilities
batched over the examples and a level's regions (:mod:`inference.sum_product`); on any other region graph, the
junction tree of a min-fill order (:mod:`inference.junction_tree`; :func:`treewidth_cost` states its cost,
refused beyond ``max_clique``).  A tree example whose scaled evidence is 0 (impossible, or underflowed past the
per-level rescaling) is recomputed by the junction tree in log space and refused (:func:`raise_impossible`) only
if its log p(x) is -inf there too: the one host synchronization, after the whole batch.  Results live on the
computation's device (``device=``, default x's).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import torch

from teachers.ladder import Ladder, _joint_law

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

__all__ = ["MAX_CLIQUE", "METHODS", "BayesAccuracy", "EliminationCost", "GraphStatistics", "MapEvents",
           "MarginalsNotComputed", "Posterior", "bayes_optimal_accuracy", "elimination_order", "graph_statistics",
           "map_events", "posterior", "posterior_event_draws", "raise_impossible", "treewidth_cost"]

#: ``posterior(method=...)``: ``"auto"`` (the tree path on trees, else the junction tree), or either one.
METHODS = ("auto", "tree", "junction-tree")
# float64 values of the largest temporary per chunk of examples: on a CPU small enough to stay in the caches
# (2 MiB; the emission's temporary twice that), elsewhere ~256 MiB
_CHUNK_ELEMENTS_CPU = 2**18
_CHUNK_ELEMENTS = 2**25
# a level of productions never runs on fewer examples per pass than this (_tree_chunk)
_PRODUCTION_MIN_ROWS = 16


class MarginalsNotComputed(AttributeError, ValueError):
    """:attr:`Posterior.marginals` read from a posterior computed without them (``posterior(..., marginals=True)``
    computes them).  An ``AttributeError`` (so ``hasattr(post, "marginals")`` is False) and a ``ValueError`` (what
    :meth:`Posterior.region_marginal` raised before)."""


@dataclass
class Posterior:
    """Result of :func:`posterior` (float64, on the computation's device).

    :ivar log_evidence: ``(N,)`` log p(x).
    :ivar label: ``(N, m_0)`` p(y | x).
    :ivar marginals: ``marginals[l]`` ``(N, R_l, events[l])`` p(z_{l,i} = k | x), zero beyond a region's own event
        count (regions of a level may differ; :meth:`region_marginal` slices them).  Computed only when asked for
        (``posterior(..., marginals=True)``: they cost a downward pass and ``N * total_regions * events`` values);
        reading it otherwise raises :class:`MarginalsNotComputed`, never a silent None.
    :ivar method: ``"tree"`` (scaled sum-product) or ``"junction-tree"``.
    :ivar cost: the junction tree's :class:`EliminationCost` (None on the tree path).
    :ivar region_events: ``region_events[l][i]`` the event counts (``Ladder.region_events``).
    """

    log_evidence: torch.Tensor
    label: torch.Tensor
    # the marginals as computed (None: not asked for); read them through the ``marginals`` property
    _marginals: list[torch.Tensor] | None = field(default=None, repr=False)
    method: str = "tree"
    cost: EliminationCost | None = None
    region_events: tuple[tuple[int, ...], ...] | None = field(default=None, repr=False)

    @property
    def has_marginals(self) -> bool:
        """Whether the region marginals were computed (``posterior(..., marginals=True)``)."""
        return self._marginals is not None

    @property
    def marginals(self) -> list[torch.Tensor]:
        """``[(N, R_l, events[l]) for every level l]``: p(z_{l,i} = k | x) (see the class docstring).

        :raises MarginalsNotComputed: the posterior was computed without ``marginals=True``.
        """
        if self._marginals is None:
            raise MarginalsNotComputed("marginals: not computed; call posterior(ladder, x, marginals=True) for every "
                                       "region's p(z | x) (only p(y | x), .label, is computed by default)")
        return self._marginals

    def predict(self) -> torch.Tensor:
        """Bayes-optimal labels ``(N,)``: argmax_y p(y | x)."""
        return self.label.argmax(-1)

    def region_marginal(self, level: int, i: int) -> torch.Tensor:
        """p(z_{level,i} | x) ``(N, m_{level,i})`` (a view of :attr:`marginals`; :class:`MarginalsNotComputed`
        without them)."""
        m = self.marginals[level]
        return m[:, i, : self.region_events[level][i]] if self.region_events is not None else m[:, i]

    def region_marginals(self) -> list[list[torch.Tensor]]:
        """``[[p(z_{l,i} | x) (N, m_{l,i}) for every region i of level l] for every level l]``."""
        return [[self.region_marginal(l, i) for i in range(m.shape[1])] for l, m in enumerate(self.marginals)]


class MapEvents(NamedTuple):
    """Result of :func:`map_events`: the joint MAP configuration argmax_z p(z | x) and its log joint probability
    (a named tuple: ``z, log_joint = map_events(ladder, x)`` unpacks it).

    :ivar z: ``(N, total_regions)`` int64 events in global region order (``Ladder.level_offsets``).
    :ivar log_joint: ``(N,)`` float64 log p(z_map, x).
    """

    z: torch.Tensor
    log_joint: torch.Tensor


@dataclass(frozen=True)
class BayesAccuracy:
    """Result of :func:`bayes_optimal_accuracy`: the accuracy of the Bayes-optimal classifier argmax_y p(y | x).

    :ivar expected: mean over the inputs of max_y p(y | x), the exact accuracy the Bayes classifier has on average
        on these inputs (lower variance than counting); NaN for N = 0.
    :ivar stderr: its standard error as an estimate of the ladder's accuracy (the spread of max_y p(y | x) over
        inputs, / sqrt(N)); NaN for N < 2.
    :ivar stderr_empirical: the standard deviation of :attr:`empirical` around :attr:`expected` given these inputs,
        sqrt(sum_i q_i (1 - q_i)) / N with q_i = max_y p(y | x_i); NaN for N = 0.
    :ivar n: the number of inputs N.
    :ivar empirical: the fraction of argmax_y p(y | x) equal to the labels (None when no labels were given; NaN for
        N = 0).
    """

    expected: float
    stderr: float
    stderr_empirical: float
    n: int
    empirical: float | None = None

    def as_dict(self) -> dict[str, float | int]:
        """The fields as a dict (``"empirical"`` left out when no labels were given): the former return value, and
        what a JSON report records."""
        return {k: v for k, v in asdict(self).items() if not (k == "empirical" and v is None)}

    def __getitem__(self, key: str) -> float | int:
        """Deprecated: the result was a dict; read the attribute (``result.expected``) or :meth:`as_dict`."""
        warnings.warn(f"bayes_optimal_accuracy(...)[{key!r}] is deprecated (the result is a BayesAccuracy, no longer a "
                      f"dict): read the attribute, result.{key}, or result.as_dict()", DeprecationWarning, stacklevel=2)
        return self.as_dict()[key]


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
    _joint_law(check_ladder(ladder), "the posterior")
    ladder.emission.check_input(x, "x")
    dev = check_device(device, x)
    if method not in METHODS:
        raise ValueError(f"method: expected one of {list(METHODS)}, got {method!r}")
    if method == "tree" and not ladder.is_tree():
        raise ValueError("method: 'tree' needs a ladder whose regions have one parent each; use 'junction-tree'")
    shapes = [(), (ladder.num_classes,), *(zip(ladder.num_regions, ladder.events, strict=True) if marginals else [])]
    if method == "junction-tree" or not ladder.is_tree():
        jt = JunctionTree(ladder, max_clique)
        log_z, label, *margs = _passes(lambda xc: junction_posterior(ladder, jt, xc, dev, marginals), x,
                                       check_chunk_size(chunk_size, jt.chunk), dev, shapes)
        raise_impossible(log_z)
        return Posterior(log_z, label, margs or None, "junction-tree", jt.cost, ladder.region_events)
    plan = tree_plan(ladder, dev)
    step = check_chunk_size(chunk_size, _tree_chunk(plan, dev))

    def tree_pass(xc: torch.Tensor) -> list[torch.Tensor]:
        up = upward(plan, *leaf_factors(plan, xc), keep=marginals)
        return [up.log_z, up.label, *([q.transpose(0, 1) for q in downward(plan, up)] if marginals else [])]

    log_z, label, *margs = _passes(tree_pass, x, step, dev, shapes)
    bad = torch.isneginf(log_z)
    # the one host sync after the passes (none on the meta device, which has no values to decide on)
    if log_z.device.type != "meta" and bool(bad.any()):  # impossible, or underflowed: the junction tree decides
        rows = bad.nonzero().flatten()
        try:
            jt = JunctionTree(ladder, max_clique)
        except ValueError:  # beyond max_clique: the scaled pass's verdict stands
            raise_impossible(log_z)
            raise
        fix = _passes(lambda xc: junction_posterior(ladder, jt, xc, dev, marginals), x[rows.to(x.device)], jt.chunk,
                      dev, shapes)
        for out, t in zip([log_z, label, *margs], fix, strict=True):
            out[rows] = t
        raise_impossible(log_z)
    return Posterior(log_z, label, margs or None, "tree", None, ladder.region_events)


def _tree_chunk(plan: TreePlan, dev: torch.device) -> int:
    """Examples per pass of the tree path, from a model of each level's working set (float64 values per example).

    Every temporary is laid out ``(rows, n)`` or ``(R_l, n, M_l)`` for a chunk of n examples, and the chunk keeps
    the largest within the device's budget (``_CHUNK_ELEMENTS_CPU``: 2 MiB, in the CPU's caches):

    - a level without productions: its messages and lambda, ``R_l max(M_l, M_{l-1})`` values per example
      (``plan.per_example``, with the inputs' ``R_d dim``); a non-one-hot emission's ``(R_d, m_d, dim)``
      temporary gets twice the budget;
    - a level of productions (:func:`inference.sum_product._production_products`): the products conf_a(j, k) and
      the child place being gathered into them, ``R_l m_l K`` values each per example
      (``plan.production_elements``), both alive at once.  Each gather copies ``R_l m_l K`` rows of n values
      (the examples innermost), so a row's fixed cost dominates when n is small: such a level gets at least
      ``_PRODUCTION_MIN_ROWS`` examples (128-byte rows), past the budget if need be.

    Measured (benchmarks/bench_rhm.py, recorded in benchmarks/results/rhm.json's ``chunks``: medians of 5, 2 shared
    cores of an AMD EPYC, 1 MiB L2 per core, 32 MiB L3, glibc), 10^4 rows of the RHM v = m = n_c = 64, s = 2,
    L = 5 (R_4 m K = 2^16, so the budget alone gives 4 examples): 16 examples (the floor) 3.08 s, 8 3.48 s, 32
    3.11 s, 4 5.51 s (the rows' fixed cost), 64 9.98 s and 128 (the chunk before this model, 2^18 // R_l K)
    12.58 s: from 64 examples on a temporary is >= 32 MiB, above glibc's largest mmap threshold, so every chunk
    maps and page-faults it afresh (6.4 of the 9.98 s are system time).  On smaller RHMs, (v, L) = (8, 3), (4, 4),
    (32, 4), (16, 5), the budget's chunk took 0.95-1.02x the best of a quarter to four times it.
    Ladders without productions: ``production_elements`` is 0 and the chunk is what it was before productions.
    """
    budget = _CHUNK_ELEMENTS_CPU if dev.type == "cpu" else _CHUNK_ELEMENTS
    step = min(budget // max(1, plan.per_example), 2 * budget // max(1, plan.emission_elements))
    if plan.production_elements:
        step = min(step, max(_PRODUCTION_MIN_ROWS, budget // plan.production_elements))
    return max(1, step)


def _passes(one_pass: Callable[[torch.Tensor], Sequence[torch.Tensor]], x: torch.Tensor, step: int, dev: torch.device,
            shapes: Sequence[tuple[int, ...]]) -> list[torch.Tensor]:
    """``one_pass`` on chunks of ``step`` examples of ``x`` on ``dev``, its outputs joined: ``(N, *shape)`` each."""
    n = x.shape[0]
    out = [torch.empty(n, *shape, dtype=torch.float64, device=dev) for shape in shapes]
    for s in range(0, n, step):
        for o, t in zip(out, one_pass(x[s: s + step].detach().to(dev)), strict=True):
            o[s: s + step] = t
    return out


def map_events(ladder: Ladder, x: torch.Tensor, *, max_clique: int = MAX_CLIQUE,
               device: torch.device | str | None = None) -> MapEvents:
    """The joint MAP configuration argmax_z p(z | x) of any ladder, by max-product elimination on its junction
    tree and traceback (:func:`inference.junction_tree.junction_map`).

    :param device: where to compute and return the results (default: ``x``'s device).
    :returns: a :class:`MapEvents` named tuple: ``z`` ``(N, total_regions)`` int64 in global region order and
        ``log_joint`` = log p(z_map, x) ``(N,)`` (ties between equally probable configurations go to the smallest
        event).
    :raises ValueError: bad shapes, a clique beyond ``max_clique``, an example of probability 0.
    """
    _joint_law(check_ladder(ladder), "the posterior")
    ladder.emission.check_input(x, "x")
    z, best = junction_map(ladder, x, check_device(device, x), max_clique=max_clique)
    raise_impossible(best)
    return MapEvents(z, best)


def bayes_optimal_accuracy(ladder: Ladder, x: torch.Tensor, y: torch.Tensor | None = None, *,
                           batch_size: int | None = None, **kwargs: Any) -> BayesAccuracy:
    """Accuracy of the Bayes-optimal classifier argmax_y p(y | x) on a sample (any ladder).

    :param batch_size: examples per :func:`posterior` call (None: all at once; :func:`posterior` bounds its
        own memory by ``chunk_size`` anyway).
    :param kwargs: :func:`posterior`'s ``chunk_size``, ``device``, ``max_clique``, ``method``.
    :returns: a :class:`BayesAccuracy` (``expected``, ``stderr``, ``stderr_empirical``, ``n``, and ``empirical``
        when ``y`` is given; NaN statistics for N = 0).
    """
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size: expected a positive integer or None, got {batch_size!r}")
    _joint_law(check_ladder(ladder), "the posterior").emission.check_input(x, "x")
    if y is not None and tuple(y.shape) != (x.shape[0],):
        raise ValueError(f"y: expected shape ({x.shape[0]},), got {tuple(y.shape)}")
    step = max(1, x.shape[0] if batch_size is None else batch_size)
    labels = [posterior(ladder, x[s: s + step], **kwargs).label for s in range(0, max(x.shape[0], 1), step)]
    best, pred = torch.cat(labels).max(-1)  # max_y p(y | x) and the Bayes-optimal labels (first max on ties)
    n = best.numel()
    nan = float("nan")
    empirical = None if y is None else (pred == y.long().to(pred.device)).double().mean().item() if n else nan
    return BayesAccuracy(expected=best.mean().item() if n else nan,
                         stderr=(best.std() / n**0.5).item() if n > 1 else nan,
                         stderr_empirical=((best * (1 - best)).sum().sqrt() / n).item() if n else nan, n=n,
                         empirical=empirical)
