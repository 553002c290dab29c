"""Fast, reproducible, shardable sampling of labelled examples from a ladder.

Examples are generated in fixed blocks of :data:`BLOCK_SIZE`; block k draws from its own
``torch.Generator`` seeded by ``SeedSequence([seed, k])``, and always draws the whole block.
Example i therefore depends only on (ladder, seed, i): the same seed gives the same bytes
whatever ``chunk_size`` is, and ``shard=(i, n)`` returns exactly rows
``[i*N//n, (i+1)*N//n)`` of the unsharded sample.  (Bytes are reproducible per device type:
CUDA generators produce other streams than CPU ones.)

Each block is one call of the ladder's Pyro model (:class:`~teachers.pyro_model.LadderModel`)
under a plate of the block's size; its sample sites use the alias sampler, so the Pyro model
*is* the fast sampler.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np
import torch

from .categorical import BlockRNG
from .emission import one_hot
from .ladder import Ladder
from .pyro_model import LadderModel

__all__ = ["BLOCK_SIZE", "DEFAULT_CHUNK_ROWS", "EventRows", "LadderSample", "available_memory", "block_generator",
           "check_working_memory", "parse_shard", "sample_ladder", "sample_rows"]

#: Examples per RNG block.  Part of the sampling stream's definition (``STREAM_VERSION``):
#: changing it changes every sampled byte.
BLOCK_SIZE = 4096
STREAM_VERSION = 1
#: Rows per chunk of a chunked (version 2) dataset store, and of :meth:`LadderSample.iter_chunks`, by default.
DEFAULT_CHUNK_ROWS = 16 * BLOCK_SIZE


class EventRows:
    """Row access shared by :class:`LadderSample` and :class:`teachers.graph_sampling.GraphSample`: a
    subclass has ``z`` ``(N, total_regions)``, ``x`` (or None for one-hot leaves) and a ``teacher`` with
    ``depth``, ``level_offsets`` and ``emission``."""

    z: torch.Tensor
    x: torch.Tensor | None

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
        return one_hot(self.z[sel, t.level_offsets[-2]:], t.emission.num_events, dtype)


@dataclass
class LadderSample(EventRows):
    """A sample from a ladder: every latent event of every example, and the inputs.

    :ivar z: ``(N, total_regions)`` events of every region in global (breadth-first) order,
        stored in the ladder's ``event_dtype()`` (uint8 for m <= 256).  ``z[:, 0]`` is y.
    :ivar x: ``(N, R_d, dim)`` inputs, or ``None`` when the emission is derivable from the
        leaf events (one-hot leaves): then :meth:`inputs` builds them on demand.
    :ivar start: index of the first example in the full (unsharded) stream.
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

    def to(self, device: torch.device | str) -> LadderSample:
        """The same sample with its tensors on ``device``."""
        return LadderSample(self.ladder, self.z.to(device), None if self.x is None else self.x.to(device),
                            self.seed, self.start, self.total, dict(self.meta))

    def iter_chunks(self, chunk_rows: int = DEFAULT_CHUNK_ROWS):
        """Consecutive row slices of at most ``chunk_rows`` rows, each a :class:`LadderSample`
        (views, no copy) whose ``start`` is its first row's index in the full stream.

        :class:`teachers.chunked.ChunkedLadderData` has the same method, so one loop streams
        over an in-memory sample and a chunked store alike.
        """
        if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)) or chunk_rows <= 0:
            raise ValueError(f"chunk_rows: expected a positive integer, got {chunk_rows!r}")
        for lo in range(0, len(self), int(chunk_rows)):
            hi = min(len(self), lo + int(chunk_rows))
            yield LadderSample(self.ladder, self.z[lo:hi], None if self.x is None else self.x[lo:hi], self.seed,
                               self.start + lo, self.total, dict(self.meta))


def block_generator(seed: int, block: int, device: torch.device | str = "cpu") -> torch.Generator:
    """The generator of block ``block`` of the stream with ``seed`` (independent streams)."""
    state = np.random.SeedSequence([int(seed), int(block), STREAM_VERSION]).generate_state(2, np.uint32)
    g = torch.Generator(device=device)
    g.manual_seed(int(state[0]) << 32 | int(state[1]))
    return g


def parse_shard(shard: str | tuple[int, int] | None) -> tuple[int, int]:
    """``"i/n"`` or ``(i, n)`` with 0 <= i < n; ``None`` means ``(0, 1)``."""
    if shard is None:
        return 0, 1
    if isinstance(shard, str):
        parts = shard.split("/")
        try:
            i, n = (int(p) for p in parts)
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


def sample_ladder(ladder: Ladder, num_examples: int, seed: int = 0, *, shard: str | tuple[int, int] | None = None,
                  chunk_size: int | None = None, device: torch.device | str | None = None,
                  progress: bool | None = None, model: LadderModel | None = None) -> LadderSample:
    """Sample ``num_examples`` examples (or one shard of them) from ``ladder``.

    :param num_examples: N of the full stream (> 0).
    :param seed: stream seed (a non-negative integer).
    :param shard: ``"i/n"``: return only rows ``[i*N//n, (i+1)*N//n)`` of the full stream.
    :param chunk_size: examples generated per model call (rounded up to whole blocks); only
        memory and speed depend on it, never the bytes.
    :param device: where to sample (cpu default; cuda works, with CUDA's own RNG streams).
    :param progress: show a tqdm bar (default: when more than 2^18 examples are drawn and
        stderr is a terminal).
    :returns: a :class:`LadderSample` with ``z`` (and ``x`` when not derivable) on ``device``.
    """
    if isinstance(num_examples, bool) or not isinstance(num_examples, (int, np.integer)) or num_examples <= 0:
        raise ValueError(f"num_examples: expected a positive integer, got {num_examples!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer, got {seed!r}")
    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
    if chunk_size is not None and (not isinstance(chunk_size, (int, np.integer)) or chunk_size <= 0):
        raise ValueError(f"chunk_size: expected a positive integer, got {chunk_size!r}")
    num_examples, seed = int(num_examples), int(seed)
    i, n_shards = parse_shard(shard)
    lo, hi = i * num_examples // n_shards, (i + 1) * num_examples // n_shards
    device = torch.device(device) if device is not None else torch.device("cpu")
    model = model or LadderModel(ladder, device=device)
    emit = not ladder.emission.derivable
    blocks_per_call = max(1, -(-(chunk_size or BLOCK_SIZE) // BLOCK_SIZE))
    n = hi - lo
    z = torch.empty(n, ladder.total_regions, dtype=ladder.event_dtype(), device=device)
    x = torch.empty(n, ladder.num_regions[-1], ladder.emission.dim, device=device) if emit else None
    if progress is None:  # auto: large requests on an interactive terminal
        progress = n > 2**18 and sys.stderr.isatty()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n, unit="ex", unit_scale=True, desc="sampling ladder")
    _sample_into(ladder, seed, lo, hi, z, x, model, device, blocks_per_call, bar)
    if bar is not None:
        bar.close()
    return LadderSample(ladder, z, x, seed=seed, start=lo, total=num_examples,
                        meta={"shard": [i, n_shards], "block_size": BLOCK_SIZE, "stream_version": STREAM_VERSION})


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


def check_working_memory(ladder, blocks_per_call: int = 1, device: torch.device | str = "cpu") -> None:
    """Refuse, before any allocation, a ladder whose sampling working set does not fit in memory.

    The stream is drawn in whole blocks of :data:`BLOCK_SIZE` rows (whatever ``num_examples``), so even
    a few examples of a very wide ladder need ``BLOCK_SIZE x total_regions`` cells of temporaries.

    :param ladder: a :class:`~teachers.ladder.Ladder` or a :class:`~teachers.graph_ladder.GraphLadder`
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


def _sample_into(ladder: Ladder, seed: int, lo: int, hi: int, z: torch.Tensor, x: torch.Tensor | None,
                 model: LadderModel, device: torch.device, blocks_per_call: int, bar=None) -> None:
    """Fill ``z`` (and ``x`` when the emission is not derivable) with stream rows ``[lo, hi)``:
    one model call per ``blocks_per_call`` blocks, block k drawn from ``block_generator(seed, k)``."""
    check_working_memory(ladder, min(blocks_per_call, -(-(hi - lo) // BLOCK_SIZE) + 1), device)
    emit = not ladder.emission.derivable
    first, last = lo // BLOCK_SIZE, -(-hi // BLOCK_SIZE)  # blocks [first, last)
    with torch.no_grad():
        for call_start in range(first, last, blocks_per_call):
            blocks = range(call_start, min(call_start + blocks_per_call, last))
            rng = BlockRNG([block_generator(seed, k, device) for k in blocks], [BLOCK_SIZE] * len(blocks))
            vals = model.model(rng.total, emit=emit, generator=rng, compact=True)
            base = call_start * BLOCK_SIZE
            a, b = max(lo, base), min(hi, base + rng.total)
            for l in range(ladder.depth + 1):
                lvl = vals[f"z_{l}"].reshape(rng.total, ladder.num_regions[l])
                z[a - lo: b - lo, ladder.level_offsets[l]: ladder.level_offsets[l + 1]] = lvl[a - base: b - base]
            if emit:
                x[a - lo: b - lo] = vals["x"].reshape(rng.total, ladder.num_regions[-1], -1)[a - base: b - base]
            if bar is not None:
                bar.update(b - a)


def sample_rows(ladder: Ladder, seed: int, lo: int, hi: int, *, model: LadderModel | None = None,
                device: torch.device | str | None = None,
                chunk_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rows ``[lo, hi)`` of the stream with ``seed``: the same bytes as those rows of
    :func:`sample_ladder` (example i depends only on (ladder, seed, i)), for any ``lo``/``hi``.

    This is the unit a chunked writer samples (one chunk of a store, perhaps in another
    process): pass a prebuilt ``model`` (a :class:`LadderModel` of this ladder) to reuse its
    alias tables over many calls.

    :param chunk_size: examples per model call, as in :func:`sample_ladder` (memory and speed only).
    :returns: ``(z, x)``: ``z`` ``(hi - lo, total_regions)`` in the ladder's event dtype, ``x``
        ``(hi - lo, R_d, dim)`` or ``None`` when the emission is derivable from the events.
    """
    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer, got {seed!r}")
    for name, v in (("lo", lo), ("hi", hi)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{name}: expected a non-negative integer, got {v!r}")
    if hi < lo:
        raise ValueError(f"hi: expected hi >= lo, got lo={lo}, hi={hi}")
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer))
                                   or chunk_size <= 0):
        raise ValueError(f"chunk_size: expected a positive integer, got {chunk_size!r}")
    if model is not None and not isinstance(model, LadderModel):
        raise TypeError(f"model: expected a LadderModel, got {type(model).__name__}")
    if model is not None and (model.ladder.branching, model.ladder.events, model.ladder.mode) != (
            ladder.branching, ladder.events, ladder.mode):
        raise ValueError("model: a LadderModel of another ladder (branching, events or mode differ)")
    device = torch.device(device) if device is not None else model.device if model is not None else torch.device("cpu")
    model = model or LadderModel(ladder, device=device)
    lo, hi, seed = int(lo), int(hi), int(seed)
    z = torch.empty(hi - lo, ladder.total_regions, dtype=ladder.event_dtype(), device=device)
    x = None if ladder.emission.derivable else torch.empty(hi - lo, ladder.num_regions[-1], ladder.emission.dim,
                                                           device=device)
    _sample_into(ladder, seed, lo, hi, z, x, model, device, max(1, -(-(chunk_size or BLOCK_SIZE) // BLOCK_SIZE)))
    return z, x
