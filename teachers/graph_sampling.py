"""Fast, reproducible sampling of examples from a :class:`~teachers.graph_ladder.GraphLadder` (issue 17).

The sampler is vectorised over examples and over *all* the regions of a level, like the uniform-tree
sampler :func:`teachers.sampling.sample_ladder` (``benchmarks/bench_graph_sampling.py`` compares them):

- topdown: the tables of a level's regions are stacked into one
  :class:`~teachers.categorical.AliasTable` (rows padded to the level's largest m with zero-probability
  events); a region's row is its first row plus the mixed-radix code of its parents' events (first
  parent most significant, :func:`teachers.graph_ladder.mixed_radix`), and each event is one alias draw
  from one uniform (float32 when the level's largest m <= 256, as in :mod:`teachers.categorical`).
- bottomup: the leaves are drawn from their priors (one alias table, the same draw); every region above
  is the lookup of its children's code (one concatenated lookup table per level), no random numbers.

The codes are computed on strided views of the ``(N, total_regions)`` event array, not by gathers: a
level's regions are split into runs whose linked regions are evenly spaced (a tree level, or a
convolution's level, is one run plus its edges).

Random numbers follow :mod:`teachers.sampling`'s block scheme: examples come in blocks of
:data:`~teachers.sampling.BLOCK_SIZE` rows, block ``k`` draws from ``block_generator(seed, k, device)``
and always draws the whole block: one ``(BLOCK_SIZE, R_l)`` uniform array per drawn level, in sampling
order (then the emission, when x is not derivable), so row ``i`` depends only on ``(graph, seed, i)``:
the same seed gives the same rows whatever ``chunk_size``.  (Streams are per device type, as in
:mod:`teachers.sampling`.)  Torch's global RNG is never used.  :func:`signature_groups` no longer defines
the stream; it names the sites of :class:`teachers.graph_pyro_model.GraphLadderModel`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .categorical import AliasTable, BlockRNG
from .graph_ladder import GraphLadder
from .ladder import TOPDOWN
from .sampling import BLOCK_SIZE, STREAM_VERSION, EventRows, block_generator, check_working_memory

__all__ = ["GRAPH_STREAM_VERSION", "GraphSample", "event_dtype", "sample_graph_ladder", "signature_groups"]

#: Version of the graph sampler's stream (2: alias draws, one uniform array per level; 1 was the
#: inverse CDF on float64 uniforms per :func:`signature_groups` group); changing the scheme changes
#: every sampled byte.
GRAPH_STREAM_VERSION = 2


def signature_groups(g: GraphLadder, level: int) -> list[tuple[tuple, tuple[int, ...]]]:
    """The regions of ``level`` grouped by signature: ``[(signature, region indices), ...]``.

    topdown: signature ``(parent event counts, m)`` (level 0: ``((), m_0)``); bottomup: the tuple of the
    children's event counts (``()`` for the leaves).  Groups are ordered by their first region and hold
    their regions in increasing order; this order defines the Pyro site names
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
class GraphSample(EventRows):
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

    @property
    def teacher(self) -> GraphLadder:
        """The graph ladder (what :class:`~teachers.sampling.EventRows` reads the layout from)."""
        return self.graph


def _runs(links) -> list[tuple[int, int, int, list[tuple[int, int]]]]:
    """Split a level's regions into runs whose linked regions are strided slices of the level above/below.

    A run ``(i0, q, rep, [(a_j, s_j), ...])`` covers regions ``i0 .. i0 + q * rep - 1``; region
    ``i0 + t * rep + r`` (``0 <= r < rep``) links, in place ``j``, to region ``a_j + s_j * t``.  A tree
    level is one run (``rep`` = branching), a convolution's level one run plus its edges.
    """
    runs, i0, n = [], 0, len(links)
    while i0 < n:
        first = links[i0]
        rep = 1
        while i0 + rep < n and links[i0 + rep] == first:
            rep += 1
        nxt = links[i0 + rep] if i0 + rep < n else None
        steps = None if nxt is None or len(nxt) != len(first) else [b - a for a, b in zip(first, nxt, strict=True)]
        if steps is not None and min(steps, default=0) < 0:  # torch slices cannot step backwards
            steps = None
        q = 1
        while steps is not None and i0 + (q + 1) * rep <= n:
            want = tuple(a + s * q for a, s in zip(first, steps, strict=True))
            if any(links[i0 + q * rep + r] != want for r in range(rep)):
                break
            q += 1
        runs.append((i0, q, rep, [(a, s) for a, s in zip(first, steps or [0] * len(first), strict=True)]))
        i0 += q * rep
    return runs


class _Level:
    """One level's sampling plan: every region of the level in one vectorised step.

    ``runs``: :func:`_runs` of the regions' parents (topdown) or children (bottomup), as global columns
    of the ``(n, total_regions)`` buffer, with ``(q, rep)`` int32 mixed-radix weights per linked place
    (first most significant) and the regions' first rows ``(q, rep)`` in ``table``: a region's row (or
    lookup index) is its offset plus the weighted sum of its linked events, computed on strided views
    of the buffer (no gather).  topdown (and the bottomup leaves): ``table`` is one
    :class:`~teachers.categorical.AliasTable` of every region's rows, padded to the level's largest m
    with zero-probability events; bottomup above the leaves: the concatenated lookups (1-D).
    """

    def __init__(self, lo: int, r: int, runs, offset, table, draw: bool):
        self.lo, self.hi, self.r, self.runs, self.offset = lo, lo + r, r, runs, offset
        self.table, self.draw = table, draw

    def rows(self, buf: torch.Tensor) -> torch.Tensor:
        """Row (topdown) or lookup (bottomup) index ``(n, R)`` int32 of every region of every example."""
        n = buf.shape[0]
        if not self.runs:
            return self.offset.expand(n, self.r)
        out = None if len(self.runs) == 1 else torch.empty(n, self.r, dtype=torch.int32, device=buf.device)
        for i0, q, rep, off, terms in self.runs:
            code = None
            for col, step, w in terms:
                part = buf[:, col: col + step * (q - 1) + 1: step] if step else buf[:, col: col + 1].expand(n, q)
                part = part.unsqueeze(-1)  # (n, q, 1), a view of the buffer
                term = part if w is None else part * w
                code = term + off if code is None else code.add_(term)
            if out is None:
                return code.reshape(n, self.r)
            out[:, i0: i0 + q * rep] = code.reshape(n, q * rep)
        return out


def _pad_rows(probs: torch.Tensor, m: int) -> torch.Tensor:
    """``(rows, m_r)`` float64 rows, normalised and padded with zeros to ``m`` events."""
    p = probs.to(torch.float64).reshape(-1, probs.shape[-1])
    p = p / p.sum(-1, keepdim=True)
    return torch.nn.functional.pad(p, (0, m - p.shape[-1]))


class _Plan:
    """Per-level tensors of one graph on one device (built once per call of the sampler)."""

    def __init__(self, g: GraphLadder, device: torch.device):
        self.g, self.device = g, device
        off = g.level_offsets
        self.levels: list[_Level] = []
        order = range(g.depth + 1) if g.mode == TOPDOWN else range(g.depth, -1, -1)
        for l in order:
            r = g.num_regions[l]
            if g.mode == TOPDOWN:
                links = g.parents[l] if l else ((),) * r
                base = off[l - 1] if l else 0
                above = g.events[l - 1] if l else ()
                m = max(g.events[l])
                probs = [g.prior] if l == 0 else list(g.tables[l])
                table = AliasTable(torch.cat([_pad_rows(p, m) for p in probs]), device=device)
                sizes = [int(p.reshape(-1, p.shape[-1]).shape[0]) for p in probs]
                draw = True
            elif l == g.depth:
                links, base, above = ((),) * r, 0, ()
                m = max(g.events[l])
                table = AliasTable(torch.cat([_pad_rows(p, m) for p in g.leaf_priors]),
                                   device=device)
                sizes, draw = [1] * r, True
            else:
                links, base, above = g.children[l], off[l + 1], g.events[l + 1]
                lookups = [t.reshape(-1) for t in g.lookups[l]]
                table = torch.cat(lookups).to(device=device, dtype=event_dtype(g))
                sizes, draw = [t.numel() for t in lookups], False
            first_row = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
            offset = torch.as_tensor(first_row, dtype=torch.int32, device=device)[None]
            runs = []
            for i0, q, rep, places in (_runs(links) if any(links) else []):
                regs = np.arange(i0, i0 + q * rep)

                def t(v, q=q, rep=rep):
                    return torch.as_tensor(np.asarray(v).reshape(q, rep), dtype=torch.int32, device=device)

                weights = np.ones((len(places), q * rep), dtype=np.int64)
                for j in range(len(places) - 2, -1, -1):
                    weights[j] = weights[j + 1] * np.array([above[links[i][j + 1]] for i in regs])
                terms = [(base + a, s, None if (weights[j] == 1).all() else t(weights[j]))
                         for j, (a, s) in enumerate(places)]
                runs.append((i0, q, rep, t(first_row[regs]), terms))
            self.levels.append(_Level(off[l], r, runs, offset, table, draw))


def _sample_call(plan: _Plan, rng: BlockRNG, buf: torch.Tensor) -> torch.Tensor | None:
    """All events of ``rng.total`` rows written into ``buf`` ``(n, total_regions)`` (the event dtype), and x
    when the emission is not derivable.

    Per level, one alias draw for every region at once: the uniforms are ``(n, R_l)`` per level (float32
    when the level's largest m <= 256), drawn block by block through ``rng`` (the stream's definition).
    """
    g = plan.g
    for lvl in plan.levels:
        row = lvl.rows(buf)
        if lvl.draw:
            ev = lvl.table.sample(row, rng)
        else:
            ev = lvl.table.index_select(0, row.reshape(-1)).reshape(row.shape)
        buf[:, lvl.lo: lvl.hi] = ev
    if g.emission.derivable:
        return None
    leaves = buf[:, g.level_offsets[-2]:].long()
    return torch.cat([g.emission.sample(zb, gen).to(torch.float32) for zb, gen in rng.split(leaves)])


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
    z = torch.empty(n, g.total_regions, dtype=event_dtype(g), device=device)
    x = None if g.emission.derivable else torch.empty(n, g.num_regions[-1], g.emission.dim, device=device)
    last = -(-n // BLOCK_SIZE)
    with torch.no_grad():
        for first in range(0, last, blocks_per_call):
            blocks = range(first, min(first + blocks_per_call, last))
            rng = BlockRNG([block_generator(seed, k, device) for k in blocks], [BLOCK_SIZE] * len(blocks))
            a, b = first * BLOCK_SIZE, min(n, first * BLOCK_SIZE + rng.total)
            # whole calls are sampled in place; the last, partial one through a buffer
            buf = z[a:b] if b - a == rng.total else torch.empty(rng.total, g.total_regions, dtype=z.dtype,
                                                                  device=device)
            xs = _sample_call(plan, rng, buf)
            if b - a != rng.total:
                z[a:b] = buf[: b - a]
            if x is not None:
                x[a:b] = xs[: b - a]
    return GraphSample(g, z, x, seed=seed, meta={"block_size": BLOCK_SIZE, "stream_version": STREAM_VERSION,
                                                 "graph_stream_version": GRAPH_STREAM_VERSION})
