"""Fast, reproducible, shardable sampling of labelled examples from any ladder (trees and region graphs alike).

Examples are generated in fixed blocks of :data:`BLOCK_SIZE`; block k draws from its own ``torch.Generator``
seeded by ``SeedSequence([seed, k, STREAM_VERSION])``, and always draws the whole block: one ``(BLOCK_SIZE,
R_l)`` uniform array per drawn level, in sampling order (then the emission, when x is not derivable).  Example
i therefore depends only on (ladder, seed, i): the same seed gives the same bytes whatever ``chunk_size`` is,
and ``shard=(i, n)`` returns exactly rows ``[i*N//n, (i+1)*N//n)`` of the unsharded sample.  (Bytes are
reproducible per device type: CUDA generators produce other streams than CPU ones.)  Torch's global RNG is
never used.

The sampler is vectorised over examples and over *all* the regions of a level (:func:`sampling_plan`):

- topdown: the tables of a level's regions are stacked into one :class:`~teachers.categorical.AliasTable`
  (rows padded to the level's largest m with zero-probability events); a region's row is its first row plus
  the mixed-radix code of its parents' events (first parent most significant), and each event is one alias
  draw from one uniform (float32 when the level's largest m <= 256, as in :mod:`teachers.categorical`);
- topdown, a level whose parents draw their children jointly (:attr:`~teachers.ladder.Ladder.productions`):
  one ``(BLOCK_SIZE, R_{l-1})`` uniform array, one alias draw of a production per parent region from the rows
  of its event, and the children read from the rules (:class:`teachers.joint_draws.JointLevel`);
- bottomup: the leaves are drawn from their priors (one alias table, the same draw); every region above is the
  lookup of its children's code (one concatenated lookup table per level), no random numbers.

The codes are computed on strided views of the ``(N, total_regions)`` event array, not by gathers: a level's
regions are split into runs whose linked regions are evenly spaced (:func:`strided_runs`).  On a uniform tree
the bytes are those of the tree sampler of versions <= 0.2 (stream version 1) for the same ladder, seed and rows.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import torch

from .categorical import AliasTable, AliasWork, BlockRNG
from .emission import _check_leaf_events, one_hot, sampler_events
from .joint_draws import JointLevel
from .ladder import TOPDOWN, Ladder, _check_ladder, _joint_law, _known

if TYPE_CHECKING:
    from teachers.pyro_model import LadderModel

__all__ = ["BLOCK_SIZE", "DEFAULT_CHUNK_ROWS", "GRAPH_STREAM_VERSION", "STREAM_VERSION", "EventRows", "LadderSample",
           "SamplingPlan", "available_memory", "block_generator", "check_working_memory", "parse_shard",
           "sample_ladder", "sample_rows", "sampling_plan", "signature_groups", "strided_runs"]

#: Examples per RNG block.  Part of the sampling stream's definition (``STREAM_VERSION``):
#: changing it changes every sampled byte.
BLOCK_SIZE = 4096
STREAM_VERSION = 1
#: Version of the per-level scheme on region graphs (2: alias draws, one uniform array per level; 1 was the
#: inverse CDF on float64 uniforms per :func:`signature_groups` group), recorded in graph stores.
GRAPH_STREAM_VERSION = 2
#: Rows per chunk of a chunked (version 2) dataset store, and of :meth:`LadderSample.iter_chunks`, by default.
DEFAULT_CHUNK_ROWS = 16 * BLOCK_SIZE


class EventRows:
    """Row access of a sample (the base of :class:`LadderSample`, kept for code of 0.2 that subclassed it): a
    subclass has ``z`` ``(N, total_regions)``, ``x`` (or None for one-hot leaves) and a ``teacher`` with
    ``depth``, ``level_offsets`` and ``emission``."""

    z: torch.Tensor
    x: torch.Tensor | None
    if TYPE_CHECKING:  # a subclass's

        @property
        def teacher(self) -> Ladder: ...

    def __len__(self) -> int:
        return self.z.shape[0]

    @property
    def y(self) -> torch.Tensor:
        """Labels ``(N,)`` int64 (= z of the root region)."""
        return self.z[:, 0].long()

    def events(self, level: int) -> torch.Tensor:
        """Events of level ``level``: ``(N, R_l)`` int64."""
        t = self.teacher
        if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 0 <= level <= t.depth:
            raise ValueError(f"level: expected an integer in 0..{t.depth}, got {level!r}")
        return self.z[:, t.level_offsets[level]: t.level_offsets[level + 1]].long()

    @property
    def leaves(self) -> torch.Tensor:
        """Leaf events z_d: ``(N, R_d)`` int64."""
        return self.events(self.teacher.depth)

    def inputs(self, index: torch.Tensor | slice | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Inputs x ``(n, R_d, dim)`` for the selected examples (all by default)."""
        sel = slice(None) if index is None else index
        if self.x is not None:
            return self.x[sel].to(dtype)
        t = self.teacher
        leaves = self.z[sel, t.level_offsets[-2]:]
        _check_leaf_events(leaves.reshape(-1, leaves.shape[-1]), t.emission.num_regions, t.emission.num_events,
                           t.depth)
        return one_hot(leaves, t.emission.num_events, dtype)


@dataclass
class LadderSample(EventRows):
    """A sample from a ladder: every latent event of every example, and the inputs.

    :ivar z: ``(N, total_regions)`` events of every region in global order (``level_offsets[l] + i``), stored
        in the ladder's ``event_dtype()`` (uint8 for m <= 256).  ``z[:, 0]`` is y.
    :ivar x: ``(N, R_d, dim)`` float32 inputs, or ``None`` when the emission is derivable from the leaf events
        (one-hot leaves): then :meth:`inputs` builds them on demand.
    :ivar start: index of the first example in the full (unsharded) stream.
    :ivar total: examples in the full stream (``None``: unknown).
    """

    ladder: Ladder
    z: torch.Tensor
    x: torch.Tensor | None = None
    seed: int | None = None
    start: int = 0
    total: int | None = None
    meta: dict = field(default_factory=dict)

    @property
    def teacher(self) -> Ladder:
        """The ladder (what :class:`EventRows` reads the layout from)."""
        return self.ladder

    @property
    def graph(self) -> Ladder:
        """The ladder, under the name ``GraphSample`` used before 0.3."""
        return self.ladder

    def to(self, device: torch.device | str) -> LadderSample:
        """The same sample with its tensors on ``device``."""
        return LadderSample(self.ladder, self.z.to(device), None if self.x is None else self.x.to(device),
                            self.seed, self.start, self.total, dict(self.meta))

    def iter_chunks(self, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[LadderSample]:
        """Consecutive row slices of at most ``chunk_rows`` rows, each a :class:`LadderSample`
        (views, no copy) whose ``start`` is its first row's index in the full stream.

        :class:`teachers.chunked.ChunkedLadderData` has the same method, so one loop streams
        over an in-memory sample and a chunked store alike.
        """
        chunk_rows = _count(chunk_rows, "chunk_rows")
        for lo in range(0, len(self), chunk_rows):
            hi = min(len(self), lo + chunk_rows)
            yield LadderSample(self.ladder, self.z[lo:hi], None if self.x is None else self.x[lo:hi], self.seed,
                               self.start + lo, self.total, dict(self.meta))


def block_generator(seed: int, block: int, device: torch.device | str = "cpu",
                    stream: int = STREAM_VERSION) -> torch.Generator:
    """The generator of block ``block`` of the stream with ``seed`` (independent streams); ``stream`` keys
    other uses of the same seed apart (:mod:`teachers.derivations`' draws)."""
    state = np.random.SeedSequence([int(seed), int(block), int(stream)]).generate_state(2, np.uint32)
    # the meta device has no generator of its own; its random ops take a CPU one (and draw nothing)
    g = torch.Generator(device="cpu" if torch.device(device).type == "meta" else device)
    g.manual_seed(int(state[0]) << 32 | int(state[1]))
    return g


def parse_shard(shard: str | tuple[int, int] | None) -> tuple[int, int]:
    """``"i/n"`` or ``(i, n)`` with 0 <= i < n; ``None`` means ``(0, 1)``."""
    if shard is None:
        return 0, 1
    if isinstance(shard, str):
        try:
            i, n = (int(p) for p in shard.split("/"))
        except ValueError:
            raise ValueError(f"shard: expected 'i/n' with integers, got {shard!r}") from None
    else:
        try:
            i, n = (int(v) for v in shard)
        except (TypeError, ValueError):
            raise ValueError(f"shard: expected (i, n), got {shard!r}") from None
    if n < 1 or not 0 <= i < n:
        raise ValueError(f"shard: expected 0 <= i < n, got {i}/{n}")
    return i, n


# bytes the sampler's temporaries take per (row, region) of one model call: the uniform, the cell index,
# the alias and threshold gathers, the kept mask and the events (peak RSS measured: 20.5 B on CPU)
WORK_BYTES_PER_CELL = 24


def available_memory() -> int | None:
    """Bytes of host memory available now (Linux's MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _available_bytes(device: torch.device) -> int | None:
    """Memory available on ``device`` now (:func:`available_memory`, or CUDA's free memory); None if unknown."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return available_memory()


def check_working_memory(ladder: Ladder, blocks_per_call: int = 1, device: torch.device | str = "cpu") -> None:
    """Refuse, before any allocation, a ladder whose sampling working set does not fit in memory.

    The stream is drawn in whole blocks of :data:`BLOCK_SIZE` rows (whatever ``num_examples``), so even
    a few examples of a very wide ladder need ``BLOCK_SIZE x total_regions`` cells of temporaries.

    :param ladder: a :class:`~teachers.ladder.Ladder`
        (anything with ``total_regions``, ``num_regions`` and ``emission``).

    :raises ValueError: the estimate exceeds the memory available on ``device``.
    """
    rows = BLOCK_SIZE * max(1, int(blocks_per_call))
    cells = ladder.total_regions + (0 if ladder.emission.derivable else ladder.num_regions[-1] * ladder.emission.dim)
    need = rows * cells * WORK_BYTES_PER_CELL
    have = _available_bytes(torch.device(device))
    if have is not None and need > have:
        raise ValueError(f"ladder: sampling draws whole blocks of {rows:,} rows; one block of this ladder "
                         f"({ladder.total_regions:,} regions) needs about {need / 1e9:.3g} GB of working memory "
                         f"and {have / 1e9:.3g} GB are available on {device}; use a ladder with fewer regions "
                         f"(smaller branching or depth)")


def signature_groups(g: Ladder, level: int) -> list[tuple[tuple, tuple[int, ...]]]:
    """The regions of ``level`` grouped by signature: ``[(signature, region indices), ...]``.

    topdown: signature ``(parent event counts, m)`` (level 0: ``((), m_0)``); bottomup: the tuple of the
    children's event counts (``()`` for the leaves).  Groups are ordered by their first region and hold
    their regions in increasing order; this order defines the Pyro site names
    ``z_{level}_g{j}`` of :class:`teachers.pyro_model.LadderModel` (its grouped layout).
    """
    if not 0 <= level <= g.depth:
        raise ValueError(f"level: expected 0..{g.depth}, got {level}")
    groups: dict[tuple, list[int]] = {}
    for i in range(g.num_regions[level]):
        key: tuple
        if g.mode == TOPDOWN:
            key = (g.parent_sizes(level, i) if level else (), g.region_events[level][i])
        else:
            key = g.child_sizes(level, i) if level < g.depth else ()
        groups.setdefault(key, []).append(i)
    return [(key, tuple(idx)) for key, idx in groups.items()]  # dicts keep first-seen order


def strided_runs(links: Sequence[Sequence[int]]) -> list[tuple[int, int, int, list[tuple[int, int]]]]:
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


# children per parent -> (wide dtype, multiplier) that repeats a uint8 event in each 16-bit lane of the wide
# integer (little-endian lanes: the int16 view of the product lists the event rep times, in order)
_REPEAT_LANES = ({2: (torch.int32, 0x0001_0001), 4: (torch.int64, 0x0001_0001_0001_0001)}
                 if sys.byteorder == "little" else {})


class _Level:
    """One level's sampling plan: every region of the level in one vectorised step (module docstring).

    ``runs``: :func:`strided_runs` of the regions' parents (topdown) or children (bottomup), as global columns
    of the ``(n, total_regions)`` buffer, with ``(q, rep)`` int32 mixed-radix weights per linked place and the
    regions' first rows ``(q, rep)`` in ``table`` (an :class:`~teachers.categorical.AliasTable` of every
    region's padded rows, or above bottomup leaves the concatenated 1-D lookups).
    """

    def __init__(self, lo: int, r: int, runs: list, offset: torch.Tensor, table: AliasTable | torch.Tensor) -> None:
        self.lo, self.hi, self.r, self.runs, self.offset = lo, lo + r, r, runs, offset
        self.table, self.draw = table, isinstance(table, AliasTable)

    def rows(self, buf: torch.Tensor, work: AliasWork | None = None) -> torch.Tensor:
        """Row (topdown) or lookup (bottomup) index ``(n, R)`` int32 of every region of every example (in
        ``work``'s buffers when given: the sampler reuses them over its blocks)."""
        n = buf.shape[0]
        if not self.runs:
            return self.offset.expand(n, self.r)
        work = AliasWork(buf.device) if work is None else work
        out = work.get("row", n * self.r, torch.int32).view(n, self.r)
        for i0, q, rep, off, terms in self.runs:
            (col, step, w), lanes = terms[0], _REPEAT_LANES.get(rep)
            if len(terms) == 1 and w is None and lanes is not None and buf.dtype == torch.uint8:
                # a tree's run: each parent's event repeated for its rep children, then the rows' offsets.  The
                # broadcast add of a (n, q, 1) view runs rep-element inner loops (3x slower); instead each event
                # is copied into a wide integer and multiplied by 0x0001...0001, which puts it in every 16-bit lane
                part = buf[:, col: col + step * (q - 1) + 1: step] if step else buf[:, col: col + 1].expand(n, q)
                wide = work.get("lanes", n * q, lanes[0]).view(n, q).copy_(part).mul_(lanes[1])
                torch.add(wide.view(torch.int16).view(n, q * rep), off.view(1, q * rep),
                          out=out[:, i0: i0 + q * rep])
                continue
            code = out[:, i0: i0 + q * rep].view(n, q, rep) if len(self.runs) == 1 else None
            for j, (col, step, w) in enumerate(terms):
                part = buf[:, col: col + step * (q - 1) + 1: step] if step else buf[:, col: col + 1].expand(n, q)
                part = part.unsqueeze(-1)  # (n, q, 1), a view of the buffer
                if w is not None:
                    part = torch.mul(part, w, out=work.get("term", n * q * rep, torch.int32).view(n, q, rep))
                if j == 0:
                    code = torch.add(part, off, out=work.get("code", n * q * rep, torch.int32).view(n, q, rep)
                                     if code is None else code)
                else:
                    assert code is not None
                    code.add_(part)
            assert code is not None  # every region of a run links at least one place (a parent or a child)
            if len(self.runs) > 1:
                out[:, i0: i0 + q * rep] = code.reshape(n, q * rep)
        return out


def _pad_rows(probs: torch.Tensor, m: int) -> torch.Tensor:
    """``(rows, m_r)`` float64 rows, normalised and padded with zeros to ``m`` events."""
    p = probs.to(torch.float64).reshape(-1, probs.shape[-1])
    p = p / p.sum(-1, keepdim=True)
    return torch.nn.functional.pad(p, (0, m - p.shape[-1]))


class SamplingPlan:
    """Per-level tensors of one graph on one device (built once per call of the sampler)."""

    def __init__(self, g: Ladder, device: torch.device) -> None:
        self.g, self.device = g, device
        _joint_law(g, "sampling")
        off = g.level_offsets
        self.levels: list[_Level | JointLevel] = []
        order = range(g.depth + 1) if g.mode == TOPDOWN else range(g.depth, -1, -1)
        joint = g.productions or (None,) * g.depth
        for l in order:
            r = g.num_regions[l]
            prod = joint[l - 1] if l else None
            if prod is not None:  # one production per parent region (teachers.joint_draws)
                self.levels.append(JointLevel(prod, off[l - 1], g.num_regions[l - 1], g.event_dtype(), device))
                continue
            table: AliasTable | torch.Tensor
            if g.mode == TOPDOWN:
                links, base, above = (g.parents[l], off[l - 1], g.region_events[l - 1]) if l else (((),) * r, 0, ())
                m = g.events[l]
                stacked = (_known(g.prior, "prior", "a top-down ladder")[None] if l == 0
                           else _known(g.tables, "tables", "a top-down ladder")[l - 1])
                probs = ([stacked] if stacked is not None  # stacked: one pad
                         else list(_known(g.region_tables, "region_tables", "a top-down ladder")[l]))
                table = AliasTable(torch.cat([_pad_rows(p, m) for p in probs]), device=device)
                sizes = [stacked.shape[-2]] * r if stacked is not None else [int(p.shape[0]) for p in probs]
            elif l == g.depth:
                links, base, above = ((),) * r, 0, ()
                m = g.events[l]
                leaf_prior = _known(g.leaf_prior, "leaf_prior", "a bottom-up ladder")
                table = AliasTable(_pad_rows(leaf_prior, m), device=device)
                sizes = [1] * r
            else:
                links, base, above = g.children[l], off[l + 1], g.region_events[l + 1]
                stacked = _known(g.lookup, "lookup", "a bottom-up ladder")[l]
                lookups = ([stacked.reshape(-1)] if stacked is not None
                           else [t.reshape(-1) for t in _known(g.lookups, "lookups", "a bottom-up ladder")[l]])
                table = torch.cat(lookups).to(device=device, dtype=g.event_dtype())
                sizes = [stacked.shape[-1]] * r if stacked is not None else [t.numel() for t in lookups]
            first_row = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
            offset = torch.as_tensor(first_row, dtype=torch.int32, device=device)[None]
            runs = []
            for i0, q, rep, places in (strided_runs(links) if any(links) else []):
                regs = np.arange(i0, i0 + q * rep)

                def t(v: npt.ArrayLike, q: int = q, rep: int = rep) -> torch.Tensor:
                    return torch.as_tensor(np.asarray(v).reshape(q, rep), dtype=torch.int32, device=device)

                weights = np.ones((len(places), q * rep), dtype=np.int64)
                for j in range(len(places) - 2, -1, -1):
                    weights[j] = weights[j + 1] * np.array([above[links[i][j + 1]] for i in regs])
                terms = [(base + a, s, None if (weights[j] == 1).all() else t(weights[j]))
                         for j, (a, s) in enumerate(places)]
                runs.append((i0, q, rep, t(first_row[regs]), terms))
            self.levels.append(_Level(off[l], r, runs, offset, table))


def _sample_call(plan: SamplingPlan, rng: BlockRNG, buf: torch.Tensor, start: int = 0,
                 work: AliasWork | None = None) -> torch.Tensor | None:
    """All events of ``rng.total`` rows written into ``buf`` ``(n, total_regions)`` (the event dtype), level by
    level as in the module docstring, and x when the emission is not derivable.  ``start``: the first of
    ``plan.levels`` to draw (the levels before it are already in ``buf``); ``work``: temporaries to reuse over
    the calls of one pass (:class:`~teachers.categorical.AliasWork`)."""
    g = plan.g
    work = AliasWork(buf.device) if work is None else work
    for lvl in plan.levels[start:]:
        if isinstance(lvl, JointLevel):
            lvl.sample(buf, rng, work)
            continue
        row = lvl.rows(buf, work)
        if isinstance(lvl.table, AliasTable):  # lvl.draw
            lvl.table.sample_into(buf[:, lvl.lo: lvl.hi], row, rng, work)
        else:
            ev = torch.index_select(lvl.table, 0, row.reshape(-1), out=work.get("lookup", row.numel(), buf.dtype))
            buf[:, lvl.lo: lvl.hi] = ev.view(row.shape)
    if g.emission.derivable:
        return None
    leaves = buf[:, g.level_offsets[-2]:].long()
    with sampler_events():  # drawn above, in range by construction: no range check (a host sync) per block
        return torch.cat([g.emission.sample(zb, gen).to(torch.float32) for zb, gen in rng.split(leaves)])


def _count(value: Any, name: str, low: int = 1) -> int:
    """``value`` as an int >= ``low`` (1: positive, 0: non-negative), or a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name}: expected a {'positive' if low else 'non-negative'} integer, got {value!r}")
    return int(value)


def _device(device: torch.device | str | None) -> torch.device:
    try:
        return torch.device(device) if device is not None else torch.device("cpu")
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device: expected a torch device, got {device!r} ({e})") from None


def _sample_rows(ladder: Ladder, seed: int, lo: int, hi: int, chunk_size: int | None, plan: SamplingPlan | None,
                 model: LadderModel | None, device: torch.device | str | None,
                 progress: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Stream rows ``[lo, hi)`` as new ``z`` ``(hi - lo, total_regions)`` and ``x`` ``(hi - lo, leaves, dim)`` (None
    when the emission is derivable): blocks ``lo // BLOCK_SIZE .. ceil(hi / BLOCK_SIZE)`` are drawn whole,
    ``chunk_size`` rows (rounded up to blocks) per pass, block k from ``block_generator(seed, k)``, and the rows
    kept are copied out.  A pass whose rows all lie in ``[lo, hi)`` is sampled in place; the others (the first
    and last ones of an unaligned range) through a buffer of the pass's rows.
    """
    blocks_per_call = 1 if chunk_size is None else -(-_count(chunk_size, "chunk_size") // BLOCK_SIZE)
    plan = _plan_for(ladder, plan, model, device)
    g, device = plan.g, plan.device
    # whole blocks are drawn whatever n is: refuse a ladder whose block cannot fit, before allocating
    check_working_memory(ladder, min(blocks_per_call, -(-(hi - lo) // BLOCK_SIZE) + 1), device)
    z = torch.empty(hi - lo, ladder.total_regions, dtype=ladder.event_dtype(), device=device)
    x = None if ladder.emission.derivable else torch.empty(hi - lo, ladder.num_regions[-1], ladder.emission.dim,
                                                          device=device)
    if hi == lo:
        return z, x
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=hi - lo, unit="ex", unit_scale=True, desc="sampling ladder")
    first, last = lo // BLOCK_SIZE, -(-hi // BLOCK_SIZE)  # blocks [first, last)
    work = AliasWork(device)  # one set of temporaries for every call: fresh ones cost page faults per block
    with torch.no_grad():
        for call in range(first, last, blocks_per_call):
            blocks = range(call, min(call + blocks_per_call, last))
            rng = BlockRNG([block_generator(seed, k, device) for k in blocks], [BLOCK_SIZE] * len(blocks))
            base = call * BLOCK_SIZE
            a, b = max(lo, base), min(hi, base + rng.total)
            inside = (a, b) == (base, base + rng.total)
            buf = z[a - lo: b - lo] if inside else torch.empty(rng.total, g.total_regions, dtype=z.dtype,
                                                                 device=device)
            xs = _sample_call(plan, rng, buf, work=work)
            if not inside:
                z[a - lo: b - lo] = buf[a - base: b - base]
            if x is not None:
                assert xs is not None  # both exist exactly when the emission is not derivable
                x[a - lo: b - lo] = xs[a - base: b - base]
            if bar is not None:
                bar.update(b - a)
    if bar is not None:
        bar.close()
    return z, x


def sampling_plan(ladder: Ladder, device: torch.device | str | None = None) -> SamplingPlan:
    """The sampler's per-level tensors of ``ladder`` on ``device`` (alias tables, mixed-radix weights), built
    once: pass it as ``plan=`` to :func:`sample_rows` to reuse it over many calls (one chunk each).

    :raises TypeError: ``ladder`` is not a Ladder.
    """
    return SamplingPlan(_check_ladder(ladder), _device(device))


def _plan_for(ladder: Ladder, plan: SamplingPlan | None, model: LadderModel | None,
              device: torch.device | str | None) -> SamplingPlan:
    """The plan to sample with: ``plan`` (checked), or a new one (``model=`` is the pre-0.3 spelling)."""
    if model is not None:
        warnings.warn("model= is deprecated since smaso 0.3 (the sampler no longer runs the Pyro model); pass "
                      "plan=sampling_plan(ladder) to reuse the sampler's tables", DeprecationWarning, stacklevel=4)
        if not isinstance(getattr(model, "ladder", None), Ladder):
            raise TypeError(f"model: expected a LadderModel, got {type(model).__name__}")
        if model.ladder is not ladder and model.ladder.fingerprint() != ladder.fingerprint():
            raise ValueError("model: a LadderModel of another ladder (branching, events or mode differ)")
        if device is None:
            device = model.device
    if plan is not None:
        if not isinstance(plan, SamplingPlan) or (plan.g is not ladder
                                                  and plan.g.fingerprint() != ladder.fingerprint()):
            raise TypeError("plan: expected a sampling_plan of this ladder")
        device = plan.device if device is None else _device(device)
        if plan.device != device:
            raise ValueError(f"device: the plan is on {plan.device}, not {device}")
        return plan
    return SamplingPlan(ladder, _device(device))


def sample_ladder(ladder: Ladder, num_examples: int, seed: int = 0, *, shard: str | tuple[int, int] | None = None,
                  chunk_size: int | None = None, device: torch.device | str | None = None,
                  progress: bool | None = None, plan: SamplingPlan | None = None,
                  model: LadderModel | None = None) -> LadderSample:
    """Sample ``num_examples`` examples (or one shard of them) from ``ladder`` (module docstring for the scheme).

    :param num_examples: N of the full stream (> 0).
    :param seed: stream seed (a non-negative integer).
    :param shard: ``"i/n"``: return only rows ``[i*N//n, (i+1)*N//n)`` of the full stream.
    :param chunk_size: examples drawn per pass (rounded up to whole blocks); only memory and speed depend on
        it, never the bytes.
    :param device: where to sample (cpu default; cuda works, with CUDA's own RNG streams).
    :param progress: show a tqdm bar (default: when more than 2^18 examples are drawn and stderr is a
        terminal).
    :param plan: a :func:`sampling_plan` of ``ladder`` to reuse (``model=``, a LadderModel, is deprecated).
    :returns: a :class:`LadderSample` with ``z`` (and ``x`` when not derivable) on ``device``.
    :raises TypeError: ``ladder`` is not a Ladder.
    :raises ValueError: a bad ``num_examples``, ``seed``, ``chunk_size``, ``shard`` or ``device``.
    """
    _check_ladder(ladder)
    n = _count(num_examples, "num_examples")
    seed = _count(seed, "seed", 0)
    i, k = parse_shard(shard)
    lo, hi = i * n // k, (i + 1) * n // k
    if progress is None:  # auto: large requests on an interactive terminal
        progress = hi - lo > 2**18 and sys.stderr.isatty()
    z, x = _sample_rows(ladder, seed, lo, hi, chunk_size, plan, model, device, progress)
    meta = {"shard": [i, k], "block_size": BLOCK_SIZE, "stream_version": STREAM_VERSION}
    if not ladder.is_uniform():
        meta["graph_stream_version"] = GRAPH_STREAM_VERSION
    return LadderSample(ladder, z, x, seed=seed, start=lo, total=n, meta=meta)


def sample_rows(ladder: Ladder, seed: int, lo: int, hi: int, *, plan: SamplingPlan | None = None,
                device: torch.device | str | None = None, chunk_size: int | None = None,
                model: LadderModel | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rows ``[lo, hi)`` of the stream with ``seed``: the same bytes as those rows of :func:`sample_ladder`
    (example i depends only on (ladder, seed, i)), for any ``lo``/``hi``.

    This is the unit a chunked writer samples (one chunk of a store, perhaps in another process): pass a
    prebuilt ``plan`` (:func:`sampling_plan`) to reuse its alias tables over many calls.

    :param chunk_size: examples per pass, as in :func:`sample_ladder` (memory and speed only).
    :returns: ``(z, x)``: ``z`` ``(hi - lo, total_regions)`` in the ladder's event dtype, ``x``
        ``(hi - lo, R_d, dim)`` float32 or ``None`` when the emission is derivable from the events.
    """
    _check_ladder(ladder)
    seed, lo, hi = _count(seed, "seed", 0), _count(lo, "lo", 0), _count(hi, "hi", 0)
    if hi < lo:
        raise ValueError(f"hi: expected hi >= lo, got lo={lo}, hi={hi}")
    return _sample_rows(ladder, seed, lo, hi, chunk_size, plan, model, device)
