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
from .sampling import (
    BLOCK_SIZE,
    DEFAULT_CHUNK_ROWS,
    STREAM_VERSION,
    EventRows,
    block_generator,
    check_working_memory,
    parse_shard,
)

__all__ = ["GRAPH_STREAM_VERSION", "GraphSample", "event_dtype", "sample_graph_ladder", "sample_graph_rows",
           "sampling_plan", "signature_groups", "strided_runs"]

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
    """Examples sampled from a graph ladder (the row access of :class:`~teachers.sampling.LadderSample`:
    ``len``, ``y``, ``events(l)``, ``leaves``, ``inputs()``, ``iter_chunks()``, ``to()``, ``start``/``total``).

    :ivar z: ``(N, total_regions)`` events of every region in global order (``level_offsets[l] + i``),
        in :func:`event_dtype` (uint8 for m <= 256).  ``z[:, 0]`` is the label y.
    :ivar x: ``(N, leaves, dim)`` float32 inputs, or ``None`` when the emission is derivable from the
        leaf events (one-hot): then :meth:`inputs` builds them.
    :ivar start: index of the first example in the full (unsharded) stream.
    :ivar total: examples in the full stream (``None``: unknown).
    """

    graph: GraphLadder
    z: torch.Tensor
    x: torch.Tensor | None = None
    seed: int | None = None
    meta: dict = field(default_factory=dict)
    start: int = 0
    total: int | None = None

    @property
    def teacher(self) -> GraphLadder:
        """The graph ladder (what :class:`~teachers.sampling.EventRows` reads the layout from)."""
        return self.graph

    @property
    def ladder(self) -> GraphLadder:
        """The graph ladder, under the name :class:`~teachers.sampling.LadderSample` uses (so code reading
        ``sample.ladder`` works on both)."""
        return self.graph

    def _rows(self, lo: int, hi: int) -> GraphSample:
        return GraphSample(self.graph, self.z[lo:hi], None if self.x is None else self.x[lo:hi], self.seed,
                           dict(self.meta), self.start + lo, self.total)

    def to(self, device: torch.device | str) -> GraphSample:
        """The same sample with its tensors on ``device``."""
        return GraphSample(self.graph, self.z.to(device), None if self.x is None else self.x.to(device), self.seed,
                           dict(self.meta), self.start, self.total)

    def iter_chunks(self, chunk_rows: int = DEFAULT_CHUNK_ROWS):
        """Consecutive row slices of at most ``chunk_rows`` rows, each a :class:`GraphSample` (views, no
        copy) whose ``start`` is its first row's index in the full stream (as
        :meth:`teachers.sampling.LadderSample.iter_chunks` and
        :meth:`teachers.chunked.ChunkedLadderData.iter_chunks`)."""
        rows = _positive_int(chunk_rows, "chunk_rows")
        for lo in range(0, len(self), rows):
            yield self._rows(lo, min(len(self), lo + rows))


def strided_runs(links) -> list[tuple[int, int, int, list[tuple[int, int]]]]:
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

    ``runs``: :func:`strided_runs` of the regions' parents (topdown) or children (bottomup), as global columns
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
            for i0, q, rep, places in (strided_runs(links) if any(links) else []):
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


def _nonneg_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name}: expected a non-negative integer, got {value!r}")
    return int(value)


def _device(device) -> torch.device:
    try:
        return torch.device(device) if device is not None else torch.device("cpu")
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device: expected a torch device, got {device!r} ({e})") from None


def _blocks_per_call(chunk_size) -> int:
    return 1 if chunk_size is None else -(-_positive_int(chunk_size, "chunk_size") // BLOCK_SIZE)


def sampling_plan(g: GraphLadder, device: torch.device | str | None = None) -> _Plan:
    """The sampler's per-level tensors of ``g`` on ``device`` (alias tables, mixed-radix weights), built once:
    pass it as ``plan=`` to :func:`sample_graph_rows` to reuse it over many calls (one chunk each).

    :raises TypeError: ``g`` is not a GraphLadder.
    """
    if not isinstance(g, GraphLadder):
        raise TypeError(f"g: expected a GraphLadder, got {type(g).__name__}")
    return _Plan(g, _device(device))


def _sample_into(plan: _Plan, seed: int, lo: int, hi: int, z: torch.Tensor, x: torch.Tensor | None,
                 blocks_per_call: int) -> None:
    """Fill ``z`` ``(hi - lo, total_regions)`` (and ``x`` ``(hi - lo, leaves, dim)`` when the emission is not
    derivable) with stream rows ``[lo, hi)``: blocks ``lo // BLOCK_SIZE .. ceil(hi / BLOCK_SIZE)`` are drawn whole,
    ``blocks_per_call`` per pass, block k from ``block_generator(seed, k)``, and the rows kept are copied out.

    A pass whose rows all lie in ``[lo, hi)`` is sampled in place; the others (the first and last ones of an
    unaligned range) through a buffer of the pass's rows.
    """
    g, device = plan.g, plan.device
    first, last = lo // BLOCK_SIZE, -(-hi // BLOCK_SIZE)  # blocks [first, last)
    with torch.no_grad():
        for call in range(first, last, blocks_per_call):
            blocks = range(call, min(call + blocks_per_call, last))
            rng = BlockRNG([block_generator(seed, k, device) for k in blocks], [BLOCK_SIZE] * len(blocks))
            base = call * BLOCK_SIZE
            a, b = max(lo, base), min(hi, base + rng.total)
            inside = (a, b) == (base, base + rng.total)
            buf = z[a - lo: b - lo] if inside else torch.empty(rng.total, g.total_regions, dtype=z.dtype,
                                                                 device=device)
            xs = _sample_call(plan, rng, buf)
            if not inside:
                z[a - lo: b - lo] = buf[a - base: b - base]
            if x is not None:
                x[a - lo: b - lo] = xs[a - base: b - base]


def _rows_buffers(g: GraphLadder, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    z = torch.empty(n, g.total_regions, dtype=event_dtype(g), device=device)
    x = None if g.emission.derivable else torch.empty(n, g.num_regions[-1], g.emission.dim, device=device)
    return z, x


def sample_graph_rows(g: GraphLadder, seed: int, lo: int, hi: int, *, plan: _Plan | None = None,
                      device: torch.device | str | None = None,
                      chunk_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rows ``[lo, hi)`` of the stream of ``g`` with ``seed``: the same bytes as those rows of
    :func:`sample_graph_ladder` (row i depends only on (graph, seed, i)), for any ``lo``/``hi``, whatever
    ``chunk_size`` (as :func:`teachers.sampling.sample_rows` for a tree: the unit a chunked writer samples).

    :param plan: a :func:`sampling_plan` of ``g`` to reuse over many calls (its device is used).
    :param chunk_size: rows drawn per pass (rounded up to whole blocks): memory and speed only.
    :returns: ``(z, x)``: ``z`` ``(hi - lo, total_regions)`` in :func:`event_dtype`, ``x`` ``(hi - lo, leaves,
        dim)`` float32, or ``None`` when the emission is derivable from the events.
    :raises TypeError: ``g`` is not a GraphLadder, or ``plan`` is not one of ``g``.
    :raises ValueError: a bad ``seed``, ``lo``, ``hi``, ``chunk_size`` or ``device``.
    """
    if not isinstance(g, GraphLadder):
        raise TypeError(f"g: expected a GraphLadder, got {type(g).__name__}")
    seed, lo, hi = _nonneg_int(seed, "seed"), _nonneg_int(lo, "lo"), _nonneg_int(hi, "hi")
    if hi < lo:
        raise ValueError(f"hi: expected hi >= lo, got lo={lo}, hi={hi}")
    blocks_per_call = _blocks_per_call(chunk_size)
    if plan is not None and (not isinstance(plan, _Plan) or plan.g is not g):
        raise TypeError("plan: expected a sampling_plan of this graph ladder")
    device = plan.device if plan is not None and device is None else _device(device)
    if plan is not None and plan.device != device:
        raise ValueError(f"device: the plan is on {plan.device}, not {device}")
    check_working_memory(g, min(blocks_per_call, -(-(hi - lo) // BLOCK_SIZE) + 1), device)
    z, x = _rows_buffers(g, hi - lo, device)
    if hi > lo:
        _sample_into(plan or _Plan(g, device), seed, lo, hi, z, x, blocks_per_call)
    return z, x


def sample_graph_ladder(g: GraphLadder, num_examples: int, seed: int = 0, *, device: torch.device | str | None = None,
                        chunk_size: int | None = None, shard: str | tuple[int, int] | None = None) -> GraphSample:
    """Sample ``num_examples`` examples (or one shard of them) from a graph ladder (module docstring for the scheme).

    :param g: the :class:`~teachers.graph_ladder.GraphLadder`.
    :param num_examples: N of the full stream (a positive integer).
    :param seed: stream seed (a non-negative integer).
    :param device: where to sample and keep the result (cpu by default).
    :param chunk_size: rows drawn per pass (rounded up to whole blocks of ``BLOCK_SIZE``); only memory and
        speed depend on it, never the rows.
    :param shard: ``"i/k"``: only rows ``[i*N//k, (i+1)*N//k)`` of the full stream (the same bytes as those
        rows of the unsharded sample; ``start``/``total`` say where they are).
    :returns: a :class:`GraphSample` (``z`` in :func:`event_dtype`, ``x`` float32 or ``None`` for one-hot).
    :raises TypeError: ``g`` is not a GraphLadder.
    :raises ValueError: a bad ``num_examples``, ``seed``, ``chunk_size``, ``shard`` or ``device``.
    """
    if not isinstance(g, GraphLadder):
        raise TypeError(f"g: expected a GraphLadder, got {type(g).__name__}")
    n = _positive_int(num_examples, "num_examples")
    seed = _nonneg_int(seed, "seed")
    blocks_per_call = _blocks_per_call(chunk_size)
    i, k = parse_shard(shard)
    lo, hi = i * n // k, (i + 1) * n // k
    device = _device(device)
    # whole blocks are drawn whatever n is: refuse a graph whose block cannot fit, before allocating
    check_working_memory(g, min(blocks_per_call, -(-(hi - lo) // BLOCK_SIZE) + 1), device)
    z, x = _rows_buffers(g, hi - lo, device)
    if hi > lo:
        _sample_into(_Plan(g, device), seed, lo, hi, z, x, blocks_per_call)
    return GraphSample(g, z, x, seed=seed, start=lo, total=n,
                       meta={"shard": [i, k], "block_size": BLOCK_SIZE, "stream_version": STREAM_VERSION,
                             "graph_stream_version": GRAPH_STREAM_VERSION})
