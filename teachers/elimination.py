"""The factor graph of a ladder and its exact elimination: min-fill order, junction tree, calibration
(``docs/theory.md`` §1.13), and what they give without evidence: the exact event statistics of any ladder
(:func:`graph_statistics`) and the joint of any regions (:func:`region_joint`).

This is the machinery of :mod:`inference.junction_tree` (whose docstring states the algorithm: factors, min-fill
elimination, the junction tree, Shafer-Shenoy calibration), kept in the models' package because the model's own
exact statistics need it: :func:`teachers.statistics.exact_statistics` of a ladder that is not a uniform tree and
:mod:`teachers.leak`'s focus are eliminations without evidence.  The evidence (p(z | x), the MAP) is
:mod:`inference`'s, which builds on this module (``tests/test_layering.py``: teachers <- inference <- smaso).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, overload

import torch

from .ladder import TOPDOWN, Ladder, _known
from .ladder import _check_ladder as check_ladder

__all__ = ["MAX_CLIQUE", "EliminationCost", "GraphStatistics", "JunctionTree", "elimination_order", "graph_statistics",
           "region_joint", "treewidth_cost"]

#: Largest clique table (entries per example) exact inference accepts by default.
MAX_CLIQUE = 2**22
# float64 values of the largest temporary of one chunk of examples (~128 MiB)
_CHUNK_ELEMENTS = 2**24


# ------------------------------------------------------------------------------------------ factors
@dataclass
class _Factor:
    """A log-space table: ``t`` ``(B, *[m_v for v in vars])``, B = 1 (no evidence) or the examples."""

    vars: tuple[int, ...]
    t: torch.Tensor


def _align(f: _Factor, target: Sequence[int]) -> torch.Tensor:
    """``f.t`` with its variable axes in the order of ``target`` and singleton axes for the others."""
    pos = {v: j for j, v in enumerate(f.vars)}
    t = f.t.permute([0] + [1 + pos[v] for v in target if v in pos])
    return t.reshape([t.shape[0]] + [f.t.shape[1 + pos[v]] if v in pos else 1 for v in target])


def _product(factors: Sequence[_Factor], target: Sequence[int], sizes: Sequence[int], batch: int,
             device: torch.device | None = None) -> torch.Tensor:
    """Sum of the log factors over the variables ``target`` (every factor's scope within it): ``(B, ...)``, on the
    factors' device, or on ``device`` when there are none (a clique no factor was assigned to: a CPU zero there
    would meet the other cliques' tables on their device)."""
    dev = factors[0].t.device if factors else device
    out = torch.zeros((1,) * (len(target) + 1), dtype=torch.float64, device=dev)
    for f in factors:
        out = out + _align(f, target)
    return out.expand(batch if out.shape[0] == 1 else out.shape[0], *[sizes[v] for v in target])


def _sum_out(t: torch.Tensor, vars_: Sequence[int], keep: Collection[int]) -> _Factor:
    """logsumexp of ``t`` (axes ``vars_`` after the batch axis) over every variable not in ``keep``."""
    drop = [1 + j for j, v in enumerate(vars_) if v not in keep]
    kept = tuple(v for v in vars_ if v in keep)
    if drop:
        t = torch.logsumexp(t, dim=drop)
    return _Factor(kept, t)


def _factors(g: Ladder, x: torch.Tensor | None, device: torch.device | None = None,
             max_entries: int = MAX_CLIQUE) -> list[_Factor]:
    """The factor graph of ``g`` (module docstring), evidence on the leaves when ``x`` is given; every table on
    ``device`` (default: ``x``'s device, or the CPU without evidence).  A level of productions gives one dense
    factor per parent region over (children, parent): a ValueError when it has more than ``max_entries``
    entries."""
    off, sizes = g.level_offsets, _sizes(g)
    dev = device if device is not None else (x.device if x is not None else torch.device("cpu"))
    with torch.no_grad():
        priors = ([_known(g.prior, "prior", "a top-down ladder")] if g.mode == TOPDOWN
                  else _known(g.leaf_priors, "leaf_priors", "a bottom-up ladder"))
        top = 0 if g.mode == TOPDOWN else off[g.depth]
        out = [_Factor((top + i,), p.to(dev, torch.float64).log()[None]) for i, p in enumerate(priors)]
        for (l, i), scope in _scopes(g):
            if l < 0:  # productions of region i of level -l - 1 over (its children, itself)
                t = _production_factor(g, -l - 1, i, max_entries).to(dev)
            elif g.mode == TOPDOWN:
                t = _known(g.region_tables, "region_tables", "a top-down ladder")[l][i].to(dev, torch.float64).log()
            else:
                lookup = _known(g.lookups, "lookups", "a bottom-up ladder")[l][i]
                ind = lookup.to(dev, torch.int64)[:, None] == torch.arange(sizes[scope[-1]], device=dev)
                t = torch.where(ind, 0.0, -math.inf).to(torch.float64)
            out.append(_Factor(scope, t.reshape(1, *(sizes[v] for v in scope))))
        if x is not None:
            ll = g.emission.log_likelihood(x.to(dev)).double()  # (N, R_d, m)
            out += [_Factor((off[g.depth] + i,), ll[:, i]) for i in range(g.num_regions[-1])]
    return out


def _production_factor(g: Ladder, l: int, i: int, max_entries: int) -> torch.Tensor:
    """log P(z_children = t | z_a = j) of region i of level l, whose children are drawn jointly, as a dense
    ``(m_child^b, m_l)`` float64 table (children's code first child most significant, then the region's event):
    the productions' probabilities summed where two productions of one event give one tuple."""
    joint = _known(g.productions, "productions", "a ladder with productions")[l]
    assert joint is not None  # _scopes gives a production scope only where the level has productions
    m, mc, b = g.events[l], g.events[l + 1], joint.arity
    entries = m * mc**b
    if entries > max_entries:
        raise ValueError(f"ladder: the factor graph holds the productions of level {l} as one dense table over a "
                         f"region and its {b} children ({mc}^{b} x {m} = {entries} entries), more than "
                         f"max_clique={max_entries}; the exact posterior of this tree (inference.posterior, "
                         "method='tree') takes the productions without it")
    codes = joint.codes(mc)  # ([R,] m, K)
    codes, probs = (codes, joint.probs) if joint.shared else (codes[i], joint.probs[i])
    t = torch.zeros(m, mc**b, dtype=torch.float64)
    t.scatter_add_(1, codes, probs.to(torch.float64))
    return t.T.contiguous().log()


def _sizes(g: Ladder) -> list[int]:
    return [m for lvl in g.region_events for m in lvl]


def _region(g: Ladder, v: int) -> tuple[int, int]:
    off = g.level_offsets
    l = max(j for j in range(g.depth + 1) if off[j] <= v)
    return (l, v - off[l])


def _global(g: Ladder, r: int | tuple[int, int] | list[int]) -> int:
    off = g.level_offsets
    if isinstance(r, (tuple, list)) and len(r) == 2:
        l, i = int(r[0]), int(r[1])
        if not (0 <= l <= g.depth and 0 <= i < g.num_regions[l]):
            raise ValueError(f"query: no region {i} at level {l} (regions per level {list(g.num_regions)})")
        return off[l] + i
    raise ValueError(f"query: expected regions as (level, index) pairs, got {r!r}")


# ------------------------------------------------------------------------------------------ elimination
def _scopes(g: Ladder) -> list[tuple[tuple[int, int], tuple[int, ...]]]:
    """``((l, i), scope)`` of every region's table (top-down) or lookup (bottom-up) factor: the global indices of
    its parents (top-down) or children (bottom-up), then its own.  Where the regions of level l draw their
    children jointly (top-down productions), one factor per region i of level l instead, keyed ``(-l - 1, i)``:
    its children, then itself."""
    off = g.level_offsets
    if g.mode == TOPDOWN:
        joint = g.joint_levels()
        out = [((l, i), (*(off[l - 1] + p for p in ps), off[l] + i))
               for l in range(1, g.depth + 1) if l - 1 not in joint for i, ps in enumerate(g.parents[l])]
        return out + [((-l - 1, i), (*(off[l + 1] + c for c in cs), off[l] + i))
                      for l in joint for i, cs in enumerate(g.children[l])]
    return [((l, i), (*(off[l + 1] + c for c in cs), off[l] + i))
            for l in range(g.depth) for i, cs in enumerate(g.children[l])]


def _interaction_graph(g: Ladder) -> list[set[int]]:
    adj: list[set[int]] = [set() for _ in range(g.total_regions)]
    for _, s in _scopes(g):
        for a in s:
            adj[a].update(b for b in s if b != a)
    return adj


def _greedy_order(adj: list[set[int]], sizes: Sequence[int], keep: Iterable[int] = ()) -> tuple[list[int],
                                                                                                list[tuple[int, ...]]]:
    """Min-fill order of every variable not in ``keep``, and the clique (v first, then its neighbours) of each.

    At each step the region of the smallest key (fill-in edges, clique table, index) goes; only the keys of
    its neighbours and their neighbours can change, so only those are recomputed (a heap with stale entries
    skipped): the same order as recomputing every key at every step."""
    adj = [set(a) for a in adj]
    left = set(range(len(adj))) - set(keep)

    def key(v: int) -> tuple[int, int, int]:
        nb = list(adj[v])
        fill = sum(1 for a in range(len(nb)) for b in range(a + 1, len(nb)) if nb[b] not in adj[nb[a]])
        return (fill, math.prod(sizes[u] for u in nb) * sizes[v], v)

    keys = {v: key(v) for v in left}
    heap = list(keys.values())
    heapq.heapify(heap)
    order, cliques = [], []
    while left:
        k = heapq.heappop(heap)
        best = k[2]
        if best not in left or keys[best] != k:
            continue  # a stale entry
        nb = sorted(adj[best])
        for a in nb:
            adj[a].update(b for b in nb if b != a)
            adj[a].discard(best)
        adj[best] = set()
        left.discard(best)
        order.append(best)
        cliques.append((best, *nb))
        touched = set(nb).union(*(adj[a] for a in nb)) & left
        for u in touched:
            ku = key(u)
            if ku != keys[u]:
                keys[u] = ku
                heapq.heappush(heap, ku)
    return order, cliques


def elimination_order(g: Ladder, query: Iterable[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """Greedy min-fill elimination order of the regions of ``g`` as ``(level, index)`` pairs.

    :param query: regions kept (not eliminated): the order then covers every other region, and eliminating
        in that order leaves a factor over exactly the query regions.  Default: every region is ordered.
    """
    check_ladder(g)
    keep = {_global(g, r) for r in query}
    order, _ = _greedy_order(_interaction_graph(g), _sizes(g), keep)
    return [_region(g, v) for v in order]


@dataclass(frozen=True)
class EliminationCost:
    """What :func:`treewidth_cost` reports for a min-fill elimination of every region.

    :ivar order: the elimination order, ``(level, index)`` pairs.
    :ivar width: the induced width (regions of the largest clique minus 1).
    :ivar clique: the regions of the largest clique (largest table), ``(level, index)`` pairs.
    :ivar clique_entries: its table size, the product of its regions' event counts (per example).
    :ivar log2_work: log2 of the sum over all cliques of their table sizes (one pass, per example).
    """

    order: tuple[tuple[int, int], ...]
    width: int
    clique: tuple[tuple[int, int], ...]
    clique_entries: int
    log2_work: float


def _cost(g: Ladder, order: list[int], cliques: list[tuple[int, ...]]) -> EliminationCost:
    sizes = _sizes(g)
    entries = [math.prod(sizes[v] for v in c) for c in cliques]
    big = max(range(len(cliques)), key=lambda k: (entries[k], len(cliques[k])))
    return EliminationCost(tuple(_region(g, v) for v in order), max(len(c) for c in cliques) - 1,
                           tuple(_region(g, v) for v in sorted(cliques[big])), entries[big],
                           math.log2(sum(entries)))


def treewidth_cost(g: Ladder) -> EliminationCost:
    """Induced width, largest clique and total work of the min-fill elimination of every region of ``g``."""
    check_ladder(g)
    order, cliques = _greedy_order(_interaction_graph(g), _sizes(g))
    return _cost(g, order, cliques)


def _check_limit(cost: EliminationCost, max_clique: int) -> None:
    if isinstance(max_clique, bool) or not isinstance(max_clique, int) or max_clique < 1:
        raise ValueError(f"max_clique: expected a positive integer, got {max_clique!r}")
    if cost.clique_entries > max_clique:
        raise ValueError(f"ladder: exact inference needs induced width {cost.width}: its largest clique "
                         f"{[f'{a}.{b}' for a, b in cost.clique]} has a table of {cost.clique_entries} entries per "
                         f"example, more than max_clique={max_clique} (log2 total work {cost.log2_work:.1f})")


# ------------------------------------------------------------------------------------------ junction tree
class JunctionTree:
    """Cliques of the min-fill elimination of every region of ``g``, their tree, and calibration (module
    docstring); a ``ValueError`` when the largest clique table has more than ``max_clique`` entries."""

    def __init__(self, g: Ladder, max_clique: int = MAX_CLIQUE):
        check_ladder(g)
        self.sizes = _sizes(g)
        self.order, self.cliques = _greedy_order(_interaction_graph(g), self.sizes)
        self.cost = _cost(g, self.order, self.cliques)
        _check_limit(self.cost, max_clique)
        self.max_clique = max_clique  # what _factors allows a dense production factor
        self.chunk = max(1, _CHUNK_ELEMENTS // max(1, self.cost.clique_entries))  # default examples per pass
        self.pos = {v: k for k, v in enumerate(self.order)}
        self.parent = [min((self.pos[u] for u in c[1:]), default=None) for c in self.cliques]
        self.kids: list[list[int]] = [[] for _ in self.cliques]
        for k, p in enumerate(self.parent):
            if p is not None:
                self.kids[p].append(k)

    # The down messages are there exactly when asked for (down=True, the default), as the overloads say.
    @overload
    def calibrate(self, factors: list[_Factor], batch: int, *, down: Literal[True] = True, reduce: Callable[...,
                  torch.Tensor] = torch.logsumexp) -> tuple[list[torch.Tensor], list[_Factor],
                  list[_Factor | None]]: ...
    @overload
    def calibrate(self, factors: list[_Factor], batch: int, *, down: Literal[False], reduce: Callable[...,
                  torch.Tensor] = torch.logsumexp) -> tuple[list[torch.Tensor], list[_Factor], None]: ...
    @overload
    def calibrate(self, factors: list[_Factor], batch: int, *, down: bool = True, reduce: Callable[...,
                  torch.Tensor] = torch.logsumexp) -> tuple[list[torch.Tensor], list[_Factor],
                  list[_Factor | None] | None]: ...
    def calibrate(self, factors: list[_Factor], batch: int, *, down: bool = True, reduce: Callable[...,
                  torch.Tensor] = torch.logsumexp) -> tuple[list[torch.Tensor], list[_Factor],
                  list[_Factor | None] | None]:
        """Upward (and downward) messages; returns the clique potentials, up and down messages."""
        K = len(self.cliques)
        dev = factors[0].t.device if factors else None
        assigned: list[list[_Factor]] = [[] for _ in range(K)]
        for f in factors:  # a factor sits in the clique of the first eliminated region of its scope
            assigned[min(self.pos[v] for v in f.vars)].append(f)
        psi: list[torch.Tensor] = []  # psi[k], up[k] appended in elimination order, where clique k reads only
        up: list[_Factor] = []  # its own psi[k] and its children's up[j], j < k
        for k in range(K):  # elimination order: every child comes before its parent
            psi.append(_product(assigned[k], self.cliques[k], self.sizes, batch, dev))
            up.append(_Factor(self.cliques[k][1:], reduce(self.conditional(k, psi, up, batch), dim=1)))  # v_k: axis 1
        if not down:
            return psi, up, None
        dn: list[_Factor | None] = [None] * K
        for k in reversed(range(K)):
            c, d = self.cliques[k], dn[k]
            base = [_Factor(c, psi[k])] + ([d] if d is not None else [])
            for j in self.kids[k]:
                others = [up[i] for i in self.kids[k] if i != j]
                t = _product(base + others, c, self.sizes, batch)
                dn[j] = _sum_out(t, c, set(self.cliques[j][1:]))
        return psi, up, dn

    def belief(self, k: int, psi: list[torch.Tensor], up: list[_Factor], dn: list[_Factor | None],
               batch: int) -> torch.Tensor:
        """The calibrated log table of clique k (potential, children's upward and the downward message)."""
        t = self.conditional(k, psi, up, batch)
        d = dn[k]
        return t if d is None else t + _align(d, self.cliques[k])

    def conditional(self, k: int, psi: list[torch.Tensor], up: list[_Factor], batch: int) -> torch.Tensor:
        """The upward table of clique k before its region v_k is summed out: ``(batch, m_v, *separator)``, the log of
        p(z_v, x_below | separator) up to a factor of the separator (what the MAP traceback and the draws read)."""
        c = self.cliques[k]
        return _product([_Factor(c, psi[k]), *(up[j] for j in self.kids[k])], c, self.sizes, batch)

    def log_z(self, up: list[_Factor], batch: int) -> torch.Tensor:
        """Sum over the roots of the tree (one per connected component) of their upward totals: ``(B,)``."""
        z = torch.zeros(batch, dtype=torch.float64, device=up[0].t.device if up else None)
        for k, p in enumerate(self.parent):
            if p is None:
                z = z + up[k].t.reshape(-1)
        return z


# ------------------------------------------------------------------------------------------ statistics
@dataclass
class GraphStatistics:
    """Exact event statistics of any ladder (no evidence), float64.

    :ivar p: ``p[l][i]`` = P(z_{l,i}) ``(m_{l,i},)``.
    :ivar pair: ``pair[(l, p, i)]`` = P(z_{l-1,p} = a, z_{l,i} = b) ``(m_p, m_i)`` for every edge (l = the
        child's level, as :meth:`Ladder.edges`).
    :ivar cond: ``cond[(l, p, i)]`` = P(z_{l,i} = b | z_{l-1,p} = a), rows of zeros where P(z_p = a) = 0.
    :ivar parents_joint: ``parents_joint[l][i]`` = P(z_pa(l,i)) over the joint parent configuration
        ``(prod m_p,)`` in mixed-radix order (first parent most significant); ``[1.]`` at the top.
    """

    ladder: Ladder
    p: list[list[torch.Tensor]]
    pair: dict[tuple[int, int, int], torch.Tensor]
    cond: dict[tuple[int, int, int], torch.Tensor]
    parents_joint: list[list[torch.Tensor]]


def region_joint(g: Ladder, regions: Sequence[tuple[int, int]], *, max_clique: int = MAX_CLIQUE) -> torch.Tensor:
    """Exact joint P(z_r for r in ``regions``) (no evidence), float64 ``(m_r1, m_r2, ...)`` in the order given:
    one elimination of every other region, its cost refused above ``max_clique``.

    :param regions: ``(level, index)`` pairs.
    """
    return _query_joint(g, _factors(g, None, max_entries=max_clique), [_global(g, r) for r in regions], max_clique)


def _query_joint(g: Ladder, factors: list[_Factor], query: Sequence[int], max_clique: int) -> torch.Tensor:
    """exp of the normalized factor over ``query`` (in that order) left after eliminating everything else."""
    sizes = _sizes(g)
    order, cliques = _greedy_order(_interaction_graph(g), sizes, keep=query)
    if order:
        _check_limit(_cost(g, order, cliques), max_clique)
    fs = list(factors)
    for v in order:
        inv = [f for f in fs if v in f.vars]
        fs = [f for f in fs if v not in f.vars]
        scope = sorted({u for f in inv for u in f.vars})
        t = _product(inv, scope, sizes, 1)
        fs.append(_sum_out(t, scope, set(scope) - {v}))
    q = list(query)
    t = _product([f for f in fs if f.vars], q, sizes, 1)[0]
    if math.prod(t.shape) > max_clique:
        raise ValueError(f"parents_joint: the joint table of regions {q} has {math.prod(t.shape)} entries, more "
                         f"than max_clique={max_clique}")
    return (t - torch.logsumexp(t.reshape(-1), 0)).exp()


def _marginal_of(jt: JunctionTree, beliefs: dict, psi: list[torch.Tensor], up: list[_Factor],
                 dn: list[_Factor | None], want: Sequence[int]) -> torch.Tensor | None:
    """exp of the normalized marginal over ``want`` (that order) from a clique containing it, else None."""
    s = set(want)
    ks = [k for k, c in enumerate(jt.cliques) if s <= set(c)]
    if not ks:
        return None
    k = min(ks, key=lambda k: math.prod(jt.sizes[v] for v in jt.cliques[k]))
    if k not in beliefs:
        bel = jt.belief(k, psi, up, dn, 1)
        beliefs[k] = bel - torch.logsumexp(bel.reshape(1, -1), -1).reshape((1,) * bel.dim())
    f = _sum_out(beliefs[k], jt.cliques[k], s)
    return _align(f, list(want))[0].exp()


def graph_statistics(g: Ladder, *, max_clique: int = MAX_CLIQUE) -> GraphStatistics:
    """Exact P(z_r), P(z_parent, z_child) of every edge, P(z_child | z_parent) and P(z_pa(r)) (no evidence).

    One calibration of the junction tree without evidence; a pair or a parent set lying within one clique
    (always so for the edges, which lie in one factor) is read off it; a parent set that no clique holds
    (bottom-up ladders: the parents of a shared region meet in no factor) costs one elimination with those
    parents kept.
    """
    check_ladder(g)
    jt = JunctionTree(g, max_clique)
    factors = _factors(g, None, max_entries=max_clique)
    psi, up, dn = jt.calibrate(factors, 1)
    off = g.level_offsets
    beliefs: dict = {}

    def joint(regions: list[int]) -> torch.Tensor:
        t = _marginal_of(jt, beliefs, psi, up, dn, regions)
        return t if t is not None else _query_joint(g, factors, regions, max_clique)

    p = [[joint([off[l] + i]) for i in range(g.num_regions[l])] for l in range(g.depth + 1)]
    pair = {(l, a, i): joint([off[l - 1] + a, off[l] + i]) for (l, a, i) in g.edges()}
    sums = {e: j.sum(-1, keepdim=True) for e, j in pair.items()}
    cond = {e: torch.where(s > 0, pair[e] / torch.where(s > 0, s, 1.0), 0.0) for e, s in sums.items()}
    parents_joint = [[torch.ones(1, dtype=torch.float64)]]
    parents_joint += [[joint([off[l - 1] + a for a in ps]).reshape(-1) for ps in g.parents[l]]
                      for l in range(1, g.depth + 1)]
    return GraphStatistics(g, p, pair, cond, parents_joint)

