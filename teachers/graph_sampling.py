"""Fast, reproducible sampling of examples from a :class:`~teachers.graph_ladder.GraphLadder` (issue 17).

The sampler is vectorised over examples and over the regions of a level: the regions of a level are
grouped by *signature* (:func:`signature_groups`) and every group is drawn with one tensor operation.

- topdown: signature ``(parent event counts, m)``.  The group's tables are stacked into ``(G, rows, m)``
  cumulative rows; the parents' events ``(N, G, k)`` give the row codes (mixed radix, first parent most
  significant, :func:`teachers.graph_ladder.mixed_radix`); each event is drawn by inverse CDF from one
  float64 uniform: ``z = #{j < m - 1 : cdf[row, j] <= u}``.
- bottomup: the leaves are drawn from their priors (one group, the same inverse CDF); every region above
  is the lookup of its children's code (signature: the children's event counts), no random numbers.

Random numbers follow :mod:`teachers.sampling`'s block scheme: examples come in blocks of
:data:`~teachers.sampling.BLOCK_SIZE` rows, block ``k`` draws from ``block_generator(seed, k, device)``
and always draws the whole block, level by level and group by group (then the emission, when x is not
derivable), so row ``i`` depends only on ``(graph, seed, i)``: the same seed gives the same rows whatever
``chunk_size``.  (Streams are per device type, as in :mod:`teachers.sampling`.)  Torch's global RNG is
never used.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .categorical import BlockRNG, uniform
from .emission import one_hot
from .graph_ladder import GraphLadder
from .ladder import TOPDOWN
from .sampling import BLOCK_SIZE, STREAM_VERSION, block_generator, check_working_memory

__all__ = ["GRAPH_STREAM_VERSION", "GraphSample", "event_dtype", "sample_graph_ladder", "signature_groups"]

#: Version of the graph sampler's stream (inverse CDF on float64 uniforms, groups in
#: :func:`signature_groups` order); changing the scheme changes every sampled byte.
GRAPH_STREAM_VERSION = 1


def signature_groups(g: GraphLadder, level: int) -> list[tuple[tuple, tuple[int, ...]]]:
    """The regions of ``level`` grouped by signature: ``[(signature, region indices), ...]``.

    topdown: signature ``(parent event counts, m)`` (level 0: ``((), m_0)``); bottomup: the tuple of the
    children's event counts (``()`` for the leaves).  Groups are ordered by their first region and hold
    their regions in increasing order; this order defines the sampling stream and the Pyro site names
    ``z_{level}_g{j}`` of :class:`teachers.graph_pyro_model.GraphLadderModel`.
    """
    if not 0 <= level <= g.depth:
        raise ValueError(f"level: expected 0..{g.depth}, got {level}")
    groups: dict[tuple, list[int]] = {}
    for i in range(g.num_regions[level]):
        if g.mode == TOPDOWN:
            key = (g.parent_sizes(level, i) if level else (), g.events[level][i])
        else:
            key = g.child_sizes(level, i) if level < g.depth else ()
        groups.setdefault(key, []).append(i)
    return [(key, tuple(idx)) for key, idx in groups.items()]  # dicts keep first-seen order


def event_dtype(g: GraphLadder) -> torch.dtype:
    """Smallest integer dtype that holds every event of ``g`` (storage dtype of :attr:`GraphSample.z`)."""
    top = max(max(lvl) for lvl in g.events)
    return torch.uint8 if top <= 256 else torch.int16 if top <= 2**15 else torch.int32


@dataclass
class GraphSample:
    """Examples sampled from a graph ladder.

    :ivar z: ``(N, total_regions)`` events of every region in global order (``level_offsets[l] + i``),
        in :func:`event_dtype` (uint8 for m <= 256).  ``z[:, 0]`` is the label y.
    :ivar x: ``(N, leaves, dim)`` float32 inputs, or ``None`` when the emission is derivable from the
        leaf events (one-hot): then :meth:`inputs` builds them.
    """

    graph: GraphLadder
    z: torch.Tensor
    x: torch.Tensor | None = None
    seed: int | None = None
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return self.z.shape[0]

    @property
    def y(self) -> torch.Tensor:
        """Labels ``(N,)`` int64 (the top region's events)."""
        return self.z[:, 0].long()

    def events(self, level: int) -> torch.Tensor:
        """Events of level ``level``: ``(N, R_l)`` int64."""
        g = self.graph
        if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 0 <= level <= g.depth:
            raise ValueError(f"level: expected an integer in 0..{g.depth}, got {level!r}")
        off = g.level_offsets
        return self.z[:, off[level]: off[level + 1]].long()

    @property
    def leaves(self) -> torch.Tensor:
        """Leaf events ``(N, R_d)`` int64."""
        return self.events(self.graph.depth)

    def inputs(self, index: torch.Tensor | slice | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Inputs x ``(n, R_d, dim)`` for the selected examples (all by default)."""
        sel = slice(None) if index is None else index
        if self.x is not None:
            return self.x[sel].to(dtype)
        return one_hot(self.z[sel, self.graph.level_offsets[-2]:], self.graph.leaf_events, dtype)


class _Plan:
    """Per-level, per-group tensors of one graph on one device (built once per call of the sampler)."""

    def __init__(self, g: GraphLadder, device: torch.device):
        self.g, self.device = g, device
        # levels in sampling order; each entry: (level, [(region idx (G,), source idx (G, k), radices, table)])
        self.levels = []
        order = range(g.depth + 1) if g.mode == TOPDOWN else range(g.depth, -1, -1)
        for l in order:
            groups = []
            for _key, idx in signature_groups(g, l):
                regions = torch.tensor(idx, dtype=torch.int64, device=device)
                if g.mode == TOPDOWN:
                    if l == 0:
                        src, sizes, probs = None, (), g.prior[None, None]
                    else:
                        src = torch.tensor([g.parents[l][i] for i in idx], dtype=torch.int64, device=device)
                        sizes = g.parent_sizes(l, idx[0])
                        probs = torch.stack([g.tables[l][i] for i in idx])
                    groups.append((regions, src, sizes, _cdf(probs, device)))
                elif l == g.depth:
                    probs = torch.stack([g.leaf_priors[i] for i in idx])[:, None]
                    groups.append((regions, None, (), _cdf(probs, device)))
                else:
                    src = torch.tensor([g.children[l][i] for i in idx], dtype=torch.int64, device=device)
                    sizes = g.child_sizes(l, idx[0])
                    lookup = torch.stack([g.lookups[l][i] for i in idx]).to(device)  # (G, prod sizes)
                    groups.append((regions, src, sizes, lookup))
            self.levels.append((l, groups))


def _cdf(probs: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``(G, rows, m)`` probability rows -> ``(G * rows, m - 1)`` float64 cumulative sums (rows normalised)."""
    p = probs.to(torch.float64)
    c = p.cumsum(-1)
    c = c / c[..., -1:]
    return c[..., :-1].reshape(-1, p.shape[-1] - 1).contiguous().to(device)


def _draw(cdf: torch.Tensor, flat_row: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse CDF: events ``(...)`` for rows ``flat_row`` of ``cdf`` and uniforms ``u`` (same shape)."""
    rows = cdf.index_select(0, flat_row.reshape(-1))  # (n, m - 1)
    return (rows <= u.reshape(-1, 1)).sum(-1).reshape(flat_row.shape)


def _radix(parts: torch.Tensor, sizes) -> torch.Tensor:
    """Mixed-radix code ``(G, n)`` of ``parts`` ``(k, G, n)`` (contiguous rows: the hot loop)."""
    code = parts[0].clone()
    for j in range(1, len(sizes)):
        code.mul_(int(sizes[j])).add_(parts[j])
    return code


def _sample_call(plan: _Plan, rng: BlockRNG) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """All events of ``rng.total`` rows: one int64 tensor ``(n, R_l)`` per level, and x when not derivable.

    Levels are built transposed, ``(R_l, n)``, so that gathering parents and writing a group's events move
    contiguous rows; the uniforms are still drawn ``(n, G)`` per group (the stream's definition).
    """
    g, device, n = plan.g, plan.device, rng.total
    zt: list[torch.Tensor | None] = [None] * (g.depth + 1)
    for l, groups in plan.levels:
        lvl = torch.empty(g.num_regions[l], n, dtype=torch.int64, device=device)
        for regions, src, sizes, table in groups:
            gsize = regions.numel()
            if g.mode == TOPDOWN or l == g.depth:
                if src is None:  # the top region, or bottomup leaves: row 0 of each region's table
                    flat = torch.arange(gsize, device=device)[:, None].expand(gsize, n)
                else:
                    parents = zt[l - 1].index_select(0, src.t().reshape(-1)).reshape(-1, gsize, n)  # (k, G, n)
                    rows = int(np.prod(sizes))
                    flat = _radix(parents, sizes).add_(torch.arange(gsize, device=device)[:, None] * rows)
                u = uniform((n, gsize), rng, dtype=torch.float64, device=device).t()
                ev = _draw(table, flat, u)
            else:
                children = zt[l + 1].index_select(0, src.t().reshape(-1)).reshape(-1, gsize, n)
                size = table.shape[1]
                flat = _radix(children, sizes).add_(torch.arange(gsize, device=device)[:, None] * size)
                ev = table.reshape(-1).index_select(0, flat.reshape(-1)).reshape(gsize, n)
            lvl.index_copy_(0, regions, ev)
        zt[l] = lvl
    z = [t.t() for t in zt]
    x = None
    if not g.emission.derivable:
        x = torch.cat([g.emission.sample(zb, gen).to(torch.float32) for zb, gen in rng.split(z[-1].contiguous())])
    return z, x


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return int(value)


def sample_graph_ladder(g: GraphLadder, num_examples: int, seed: int = 0, *, device: torch.device | str | None = None,
                        chunk_size: int | None = None) -> GraphSample:
    """Sample ``num_examples`` examples from a graph ladder (module docstring for the scheme).

    :param g: the :class:`~teachers.graph_ladder.GraphLadder`.
    :param num_examples: N (a positive integer).
    :param seed: stream seed (a non-negative integer).
    :param device: where to sample and keep the result (cpu by default).
    :param chunk_size: rows drawn per pass (rounded up to whole blocks of ``BLOCK_SIZE``); only memory and
        speed depend on it, never the rows.
    :returns: a :class:`GraphSample` (``z`` in :func:`event_dtype`, ``x`` float32 or ``None`` for one-hot).
    :raises TypeError: ``g`` is not a GraphLadder.
    :raises ValueError: a bad ``num_examples``, ``seed``, ``chunk_size`` or ``device``.
    """
    if not isinstance(g, GraphLadder):
        raise TypeError(f"g: expected a GraphLadder, got {type(g).__name__}")
    n = _positive_int(num_examples, "num_examples")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer, got {seed!r}")
    seed = int(seed)
    blocks_per_call = 1 if chunk_size is None else -(-_positive_int(chunk_size, "chunk_size") // BLOCK_SIZE)
    try:
        device = torch.device(device) if device is not None else torch.device("cpu")
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device: expected a torch device, got {device!r} ({e})") from None
    # whole blocks are drawn whatever n is: refuse a graph whose block cannot fit, before allocating
    check_working_memory(g, min(blocks_per_call, -(-n // BLOCK_SIZE) + 1), device)
    plan = _Plan(g, device)
    off = g.level_offsets
    z = torch.empty(n, g.total_regions, dtype=event_dtype(g), device=device)
    x = None if g.emission.derivable else torch.empty(n, g.num_regions[-1], g.emission.dim, device=device)
    last = -(-n // BLOCK_SIZE)
    with torch.no_grad():
        for first in range(0, last, blocks_per_call):
            blocks = range(first, min(first + blocks_per_call, last))
            rng = BlockRNG([block_generator(seed, k, device) for k in blocks], [BLOCK_SIZE] * len(blocks))
            levels, xs = _sample_call(plan, rng)
            a, b = first * BLOCK_SIZE, min(n, first * BLOCK_SIZE + rng.total)
            for l, lvl in enumerate(levels):
                z[a:b, off[l]: off[l + 1]] = lvl[: b - a]
            if x is not None:
                x[a:b] = xs[: b - a]
    return GraphSample(g, z, x, seed=seed, meta={"block_size": BLOCK_SIZE, "stream_version": STREAM_VERSION,
                                                 "graph_stream_version": GRAPH_STREAM_VERSION})
