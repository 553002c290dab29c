"""Fast categorical sampling from many precomputed rows (Walker's alias method), exact to a stated resolution.

A ladder's conditional tables hold a few thousand rows P(z_child | z_parent = a) but are sampled hundreds of
millions of times; the alias method needs one uniform number, two table look-ups and a comparison per draw,
whatever the number of events (``benchmarks/bench_ladder_sampling.py`` compares it with
``torch.multinomial``).  :class:`AliasTable` holds the tables of a stack of rows; :class:`IndexedCategorical` is
the Pyro distribution of row ``row[i]`` of a shared :class:`CategoricalTable`, never materialized per draw.
The block sampler (:mod:`teachers.sampling`) draws through :meth:`AliasTable.sample_into`: temporaries reused
over its blocks (:class:`AliasWork`) and, on the CPU for m a power of two, the draw computed from the uniform's
24-bit integer with one table look-up (:meth:`AliasTable.sample_from_bits`); the same draws as
:meth:`AliasTable.sample`.

Resolution.  A draw is a function of one uniform u, and torch's uniforms lie on a grid: ``i 2^-24`` in float32
(rows of at most 256 events, for speed), ``i 2^-53`` in float64 (more events).  So the sampler's distribution is
the table's only up to :attr:`AliasTable.resolution`, ``m 2^-23`` (float32) or ``m 2^-52`` (float64) per event
in absolute terms (an event of probability 1e-9 in a 4-event row is drawn with probability 0 or 2^-24 = 6e-8,
not 1e-9).  ``tests/test_caches_and_resolution.py`` checks the bound on the exact distribution of the float32
sampler, enumerated over all 2^24 uniforms.  Tables that need finer probabilities than that are sampled at
that resolution: the likelihoods, posteriors and exact statistics (:mod:`inference`, :mod:`teachers.statistics`)
use the tables themselves, in float64.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from pyro.distributions import TorchDistribution, constraints

__all__ = ["AliasTable", "AliasWork", "BlockRNG", "IndexedCategorical", "alias_setup", "fill_bits", "fill_uniform",
           "uniform"]

# float32 uniforms carry 24 random bits; u * m keeps 24 - log2(m) of them for the
# within-cell comparison.  Above this many events per row we draw float64 uniforms.
_FLOAT32_MAX_EVENTS = 256


class BlockRNG:
    """Random numbers for consecutive blocks of examples, each block with its own generator.

    A tensor of shape ``(N, ...)`` is drawn as the concatenation along dim 0 of draws of
    shape ``(sizes[k], ...)`` from ``generators[k]``; so each block's numbers do not depend
    on how many blocks are drawn together (the dataset sampler's chunk size).
    """

    def __init__(self, generators: list[torch.Generator], sizes: list[int]) -> None:
        if len(generators) != len(sizes):
            raise ValueError("generators and sizes must have the same length")
        self.generators, self.sizes = list(generators), [int(s) for s in sizes]
        self.total = sum(self.sizes)

    def split(self, t: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Generator]]:
        """Pairs ``(rows of block k, generator k)`` of a tensor whose dim 0 covers the blocks."""
        if t.shape[0] != self.total:
            raise ValueError(f"BlockRNG covers {self.total} examples along dim 0, got {t.shape[0]}")
        return zip(t.split(self.sizes), self.generators, strict=True)

    def _draw(self, fn: Callable[..., torch.Tensor], shape: Sequence[int], dtype: torch.dtype | None,
              device: torch.device | str | None) -> torch.Tensor:
        shape = torch.Size(shape)
        if len(shape) == 0 or shape[0] != self.total:
            raise ValueError(f"BlockRNG covers {self.total} examples along dim 0, asked for shape {tuple(shape)}")
        parts = [fn((s, *shape[1:]), generator=g, dtype=dtype, device=device)
                 for g, s in zip(self.generators, self.sizes, strict=True)]
        return parts[0] if len(parts) == 1 else torch.cat(parts)


def uniform(shape: Sequence[int], generator: torch.Generator | BlockRNG | None, dtype: torch.dtype = torch.float32,
            device: torch.device | str | None = None) -> torch.Tensor:
    """``torch.rand`` that also accepts a :class:`BlockRNG`."""
    if isinstance(generator, BlockRNG):
        return generator._draw(torch.rand, shape, dtype, device)
    return torch.rand(shape, generator=generator, dtype=dtype, device=device)


def fill_uniform(out: torch.Tensor, generator: torch.Generator | BlockRNG | None) -> torch.Tensor:
    """Fill ``out`` (contiguous, dim 0 covering a :class:`BlockRNG`'s examples) in place with the numbers
    :func:`uniform` would return for its shape and dtype (``torch.rand`` is ``empty().uniform_()``: the same
    stream), without allocating: the sampler reuses one buffer over its blocks."""
    if isinstance(generator, BlockRNG):
        for part, g in generator.split(out):
            part.uniform_(generator=g)
    else:
        out.uniform_(generator=generator)
    return out


#: Random bits per float32 uniform: torch's CPU ``rand`` is ``(random() & (2^24 - 1)) * 2^-24``.
UNIFORM_BITS = 24


def fill_bits(out: torch.Tensor, generator: torch.Generator | BlockRNG | None) -> torch.Tensor:
    """Fill the int32 ``out`` in place with the integers ``i = u * 2^24`` of the float32 uniforms ``u`` that
    :func:`fill_uniform` would give on the CPU: ``random_(0, 2^24)`` draws ``random() % 2^24``, the same 32-bit
    numbers masked the same way, one per element in the same order (``tests/test_alias_sampler.py`` checks the
    identity).  Only the CPU's generators: a CUDA ``rand`` is not ``randint`` scaled."""
    if isinstance(generator, BlockRNG):
        for part, g in generator.split(out):
            part.random_(0, 1 << UNIFORM_BITS, generator=g)
    else:
        out.random_(0, 1 << UNIFORM_BITS, generator=generator)
    return out


class AliasWork:
    """Reusable temporaries of :meth:`AliasTable.sample_into`: one flat buffer per (name, dtype), grown on demand.

    A sampler that draws block after block passes the same work to every draw: fresh multi-megabyte temporaries
    per draw cost the page faults of new memory on every block (about a third of the sampler's time on CPU),
    reused ones do not.

    :param device: where the buffers live.
    """

    def __init__(self, device: torch.device | str | None = None) -> None:
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self._buffers: dict[tuple[str, torch.dtype], torch.Tensor] = {}

    def get(self, name: str, n: int, dtype: torch.dtype) -> torch.Tensor:
        """A 1-D buffer of ``n`` elements of ``dtype`` (uninitialised), the same memory on every call that fits."""
        key = (name, dtype)
        b = self._buffers.get(key)
        if b is None or b.numel() < n:
            b = self._buffers[key] = torch.empty(n, dtype=dtype, device=self.device)
        return b[:n]


def alias_setup(probs: np.ndarray | torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Vose's alias tables for every row of ``probs``, all rows in lock-step.

    :param probs: ``(rows, m)`` non-negative rows summing to one.
    :returns: ``(threshold, alias)``, both ``(rows, m)``: draw ``k`` uniform in ``[0, m)``
        and a uniform ``v`` in ``[0, 1)``; the event is ``k`` if ``v < threshold[k]`` else
        ``alias[k]``.  Exact up to float64 rounding.
    """
    p = probs.detach().cpu().double().numpy() if isinstance(probs, torch.Tensor) else np.asarray(probs, np.float64)
    if p.ndim != 2:
        raise ValueError(f"probs: expected a (rows, m) array, got shape {p.shape}")
    rows, m = p.shape
    q = p * m
    threshold = np.ones((rows, m))
    alias = np.tile(np.arange(m), (rows, 1))
    is_small = q < 1.0
    order = np.argsort(~is_small, axis=1, kind="stable")  # small cells first, then large
    n_small = is_small.sum(1)
    small = order.copy()  # stack: small[r, :n_small[r]]
    # large stack: order[r, n_small[r]:], shifted to start at column 0
    cols = (np.arange(m)[None, :] + n_small[:, None]) % m
    large = np.take_along_axis(order, cols, axis=1)
    n_large = m - n_small
    r_all = np.arange(rows)
    for _ in range(m):
        active = (n_small > 0) & (n_large > 0)
        if not active.any():
            break
        r = r_all[active]
        s = small[r, n_small[r] - 1]
        n_small[r] -= 1
        g = large[r, n_large[r] - 1]
        threshold[r, s] = q[r, s]
        alias[r, s] = g
        q[r, g] -= 1.0 - q[r, s]
        moved = q[r, g] < 1.0
        rm, gm = r[moved], g[moved]
        n_large[rm] -= 1
        small[rm, n_small[rm]] = gm
        n_small[rm] += 1
    # cells left on either stack keep threshold 1 (rounding leftovers are exact to ~1e-16)
    return threshold, alias


class AliasTable:
    """Alias tables for a stack of categorical rows, ready to sample on a device.

    :param probs: ``(rows, m)`` tensor or array of probability rows (float64 recommended).
    :param device: where sampling happens.
    """

    def __init__(self, probs: torch.Tensor | np.ndarray, device: torch.device | str | None = None) -> None:
        threshold, alias = alias_setup(probs)
        self.rows, self.num_events = threshold.shape
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        m = self.num_events
        self.uniform_dtype = torch.float32 if m <= _FLOAT32_MAX_EVENTS else torch.float64
        #: The most any event's probability under :meth:`sample` can differ from its table value (module docstring)
        self.resolution = m * 2.0 ** (-23 if self.uniform_dtype == torch.float32 else -52)
        # Store k + threshold[k]: the draw u*m lands in cell k = floor(u*m) and keeps the
        # cell when u*m < k + threshold[k], which saves one subtraction per draw.
        cut = np.arange(m)[None, :] + threshold
        # never let float32 rounding of k + 1 exceed the next cell's start
        cut = np.minimum(cut, np.arange(m)[None, :] + 1.0)
        self.cut = torch.as_tensor(cut.reshape(-1), dtype=self.uniform_dtype, device=self.device)
        self.index_dtype = torch.int32 if self.rows * m < 2**31 else torch.int64
        # u * m is exact (so < m) when m is a power of two: no clamp needed
        self._exact_scale = m & (m - 1) == 0
        # events are computed in the narrowest dtype: the blend below is exact modulo 2^8.
        self.event_dtype = torch.uint8 if m <= 256 else torch.int32
        self.alias = torch.as_tensor(alias.reshape(-1), dtype=self.event_dtype, device=self.device)
        #: The draws from the uniforms' integers (:meth:`sample_from_bits`), on the CPU for 2 <= m <= 256 a power
        #: of two: the shift of the cell, one gather of ``packed`` and integer compares instead of the float scale,
        #: its conversion and two gathers; the same draws.
        self.packed: torch.Tensor | None = None
        if self.uniform_dtype == torch.float32 and self._exact_scale and m >= 2 and self.index_dtype == torch.int32:
            self._shift = UNIFORM_BITS - (m.bit_length() - 1)
            # u * m = i 2^(b - 24) exactly (m = 2^b), in cell k = i >> shift, kept iff i 2^(b - 24) < cut, i.e.
            # iff frac = i - (k << shift) <= last = ceil(cut 2^shift) - 1 - (k << shift), in [-1, 2^shift - 1]:
            # packed = last * 256 + alias fits int32 (< 2^31 for shift <= 23), the alias is its low byte
            cut32 = cut.astype(np.float32).astype(np.float64)  # the cut as self.cut holds it (IEEE rounding)
            cell = np.arange(m, dtype=np.int64) << self._shift
            last = np.ceil(cut32 * 2.0**self._shift).astype(np.int64) - 1 - cell
            self.packed = torch.as_tensor((last * 256 + alias).reshape(-1), dtype=torch.int32, device=self.device)

    def sample(self, row: torch.Tensor, generator: torch.Generator | BlockRNG | None = None) -> torch.Tensor:
        """One draw per entry of ``row`` (any shape, integer row indices).

        :returns: event indices, same shape as ``row``, dtype ``event_dtype`` (uint8 when
            m <= 256, else int32).
        """
        u = uniform(row.shape, generator, dtype=self.uniform_dtype, device=self.device)
        return self.sample_from_uniforms(u, row)

    def sample_into(self, out: torch.Tensor, row: torch.Tensor, generator: torch.Generator | BlockRNG | None,
                    work: AliasWork) -> torch.Tensor:
        """:meth:`sample` written into ``out`` (``event_dtype``, the shape of ``row``, any strides: a column slice
        of the sampler's event buffer), its uniforms and temporaries taken from ``work``: the same draws, no
        allocation once ``work`` has grown to the largest call; on the CPU, from the uniforms' integers when the
        table has them (:meth:`sample_from_bits`).  Returns ``out``."""
        if self.packed is not None and self.device.type == "cpu":  # the uniforms' integers (fill_bits: CPU only)
            bits = work.get("bits", row.numel(), torch.int32)
            fill_bits(bits.view(row.shape), generator)
            return self._draw_bits(bits, row.reshape(-1), out, work)
        u = work.get("u", row.numel(), self.uniform_dtype)
        fill_uniform(u.view(row.shape), generator)
        return self._draw(u, row.reshape(-1), out, work)

    def sample_from_bits(self, bits: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
        """The draws of the uniforms ``bits * 2^-24`` (``bits`` int32 in ``[0, 2^24)``, one per entry of ``row``):
        :meth:`sample_from_uniforms` of those uniforms, computed in integers (tables with ``packed`` only).
        ``bits`` is overwritten."""
        if self.packed is None:
            raise ValueError(f"bits: integer draws need 2 <= m <= 256 a power of two (and int32 rows), this table "
                             f"has m = {self.num_events}")
        out = torch.empty(row.shape, dtype=self.event_dtype, device=row.device)
        return self._draw_bits(bits.reshape(-1), row.reshape(-1), out, AliasWork(row.device))

    def sample_from_uniforms(self, u: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
        """The draws that the uniforms ``u`` in [0, 1) (``uniform_dtype``, one per entry of ``row``) give: what
        :meth:`sample` does with its own uniforms.  Over every uniform of the grid (all ``i 2^-24`` for float32),
        it gives the sampler's exact distribution (:attr:`resolution`).  ``u`` is overwritten."""
        out = torch.empty(row.shape, dtype=self.event_dtype, device=row.device)
        return self._draw(u.reshape(-1), row.reshape(-1), out, AliasWork(row.device))

    def _draw(self, um: torch.Tensor, row: torch.Tensor, out: torch.Tensor, work: AliasWork) -> torch.Tensor:
        """The draws of uniforms ``um`` (flat, overwritten) for rows ``row`` (flat) into ``out``."""
        n, m = um.numel(), self.num_events
        um.mul_(m)
        k = work.get("k", n, self.index_dtype).copy_(um)  # float -> int32 is ~4x faster than float -> uint8 on CPU
        if not self._exact_scale:
            k.clamp_(max=m - 1)  # u < 1 always, but u * m can round up to m
        flat = torch.add(k, row.to(self.index_dtype), alpha=m,  # k + m * row in one pass
                         out=work.get("flat", n, self.index_dtype))
        keep = torch.lt(um, torch.index_select(self.cut, 0, flat, out=work.get("cut", n, self.uniform_dtype)),
                        out=work.get("keep", n, self.event_dtype))  # 0/1 in the events' dtype: no bool cast
        alias = torch.index_select(self.alias, 0, flat, out=work.get("alias", n, self.event_dtype))
        ev = work.get("event", n, self.event_dtype).copy_(k)
        # alias + keep * (k - alias), exact even when k - alias wraps around in uint8; it is
        # ~5x faster than torch.where on CPU.
        ev.sub_(alias).mul_(keep)
        return torch.add(ev.view(out.shape), alias.view(out.shape), out=out)

    def _draw_bits(self, bits: torch.Tensor, row: torch.Tensor, out: torch.Tensor, work: AliasWork) -> torch.Tensor:
        """The draws of the uniforms' integers ``bits`` (flat int32, overwritten) for rows ``row`` into ``out``."""
        assert self.packed is not None
        n, shift = bits.numel(), self._shift
        flat = torch.bitwise_right_shift(bits, shift, out=work.get("flat", n, torch.int32))  # the cell k
        ev = work.get("event", n, self.event_dtype).copy_(flat)
        flat.add_(row.to(torch.int32), alpha=self.num_events)  # k + m * row
        packed = torch.index_select(self.packed, 0, flat, out=work.get("packed", n, torch.int32))
        alias = work.get("alias", n, self.event_dtype).copy_(packed)  # the low byte (int32 -> uint8 wraps)
        keep = torch.le(bits.bitwise_and_((1 << shift) - 1), packed.bitwise_right_shift_(8),
                        out=work.get("keep", n, torch.uint8))  # 0/1 as uint8: the blend multiplies without a cast
        ev.sub_(alias).mul_(keep)  # the blend of _draw
        return torch.add(ev.view(out.shape), alias.view(out.shape), out=out)


class IndexedCategorical(TorchDistribution):
    r"""Categorical distribution whose batch element ``i`` is row ``row[i]`` of a shared table.

    ``IndexedCategorical(table, row)`` equals ``Categorical(probs=table.probs[row])`` but
    never materializes the ``batch_shape + (m,)`` probabilities: ``sample`` uses the alias
    tables, ``log_prob(value)`` gathers ``log_probs[row, value]`` with broadcasting (so
    enumerated values of shape ``(m, 1, ..., 1)`` and enumerated ``row`` tensors work as in
    Pyro's :class:`~pyro.ops.indexing.Vindex` semantics).

    :param table: a :class:`CategoricalTable` (shared rows, their logs and alias tables).
    :param row: integer tensor of row indices; its shape is the batch shape.
    :param generator: optional ``torch.Generator`` (or :class:`BlockRNG`) used by ``sample``
        (Pyro's global RNG otherwise); this is how a dataset sampler makes a Pyro model
        reproducible per block.
    :param compact: ``sample`` returns the alias table's narrow dtype (uint8 for m <= 256)
        instead of Categorical's int64; the dataset sampler's fast path.
    :param validate_args: as in ``torch.distributions``: None follows the global default
        (``pyro.enable_validation`` / ``Distribution.set_default_validate_args``); when on,
        ``log_prob`` raises torch's own ``ValueError`` ("Expected value argument ... to be within
        the support ...") for values outside ``{0, ..., m - 1}`` or of a non-broadcastable shape.
        ``sample`` is never validated (it is the hot path), and ``enumerate_support``'s values are
        in the support by construction.
    """

    arg_constraints = {}
    has_enumerate_support = True

    def __new__(cls, table: CategoricalTable | None = None, row: torch.Tensor | None = None,
                generator: torch.Generator | BlockRNG | None = None, compact: bool = False,
                validate_args: bool | None = None, *, logits: torch.Tensor | None = None,
                probs: torch.Tensor | None = None) -> Any:
        # Pyro rebuilds distributions as ``type(d)(logits=...)`` (e.g. TraceEnum_ELBO's
        # compute_marginals); those are ordinary dense categoricals.
        if logits is not None or probs is not None:
            from pyro.distributions import Categorical

            return Categorical(logits=logits, probs=probs, validate_args=validate_args)
        return super().__new__(cls)

    def __init__(self, table: CategoricalTable, row: torch.Tensor, generator: torch.Generator | BlockRNG | None = None,
                 compact: bool = False, validate_args: bool | None = None, **_dense: object) -> None:
        self.table, self.row, self.generator, self.compact = table, row, generator, compact
        # no arg_constraints: validation costs nothing here, only log_prob checks its value
        super().__init__(batch_shape=row.shape, event_shape=torch.Size(), validate_args=validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self) -> constraints.Constraint:
        return constraints.integer_interval(0, self.table.num_events - 1)

    def expand(self, batch_shape: Sequence[int], _instance: IndexedCategorical | None = None) -> IndexedCategorical:
        new = self._get_checked_instance(IndexedCategorical, _instance)
        new.table, new.generator, new.compact = self.table, self.generator, self.compact
        new.row = self.row.expand(batch_shape)
        super(IndexedCategorical, new).__init__(batch_shape=torch.Size(batch_shape), event_shape=torch.Size(),
                                                validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def logits(self) -> torch.Tensor:
        """Log-probabilities of the selected rows: ``batch_shape + (m,)`` (gathered, so it costs memory)."""
        return self.table.log_probs[self.row]

    @property
    def probs(self) -> torch.Tensor:
        """Probabilities of the selected rows: ``batch_shape + (m,)`` (gathered, so it costs memory)."""
        return self.table.probs[self.row]

    def sample(self, sample_shape: Sequence[int] = torch.Size()) -> torch.Tensor:
        row = self.row.expand(torch.Size(sample_shape) + self.batch_shape)
        with torch.no_grad():
            z = self.table.alias.sample(row, self.generator)
        return z if self.compact else z.long()

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        row, value = torch.broadcast_tensors(self.row, value.long())
        return self.table.log_probs[row, value]

    def enumerate_support(self, expand: bool = True) -> torch.Tensor:
        m = self.table.num_events
        values = torch.arange(m, device=self.row.device).reshape((m,) + (1,) * len(self.batch_shape))
        if expand:
            values = values.expand((m, *self.batch_shape))
        return values

    @property
    def mean(self) -> torch.Tensor:
        raise NotImplementedError("IndexedCategorical has no mean: events are labels, not numbers")


class CategoricalTable:
    """A stack of categorical rows with their log-probabilities and alias tables.

    :param probs: ``(rows, m)`` probability rows (validated by the caller).
    :param device: device for sampling and log-probabilities.
    """

    def __init__(self, probs: torch.Tensor, device: torch.device | str | None = None) -> None:
        probs = torch.as_tensor(probs, dtype=torch.float64)
        self.device = torch.device(device) if device is not None else probs.device
        self.probs = probs.to(self.device)
        self.num_events = probs.shape[-1]
        # log(0) = -inf is the exact answer; enumeration contracts it with logsumexp.
        self.log_probs = self.probs.log()
        self.alias = AliasTable(probs, device=self.device)
