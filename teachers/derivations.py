"""Derivations of a ladder whose every level draws its children jointly (an RHM): enumeration, sampling without
replacement, disjoint train/test sets, the authors' index of a datum, and synonym exchange.

A *derivation* is the class and one production per internal node (:mod:`teachers.productions`): on a ladder of
depth L whose level l has R_l regions and K_l productions per event, it is the digit row

    d = (y, k_{0,0}, k_{1,0}, ..., k_{1,R_1-1}, ..., k_{L-1,R_{L-1}-1})     (class, then breadth-first nodes)

with y in [0, m_0) and k_{l,r} in [0, K_l); its events follow top-down, z_children(r) = rules[r, z_r, k_{l,r}],
and its probability is P(d) = prior[y] prod_{l,r} probs[r, z_r, k_{l,r}].  There are

    P_max = m_0 prod_l K_l^{R_l}                                       (= n_c m^((s^L - 1)/(s - 1)) for an RHM)

digit rows.  Read as one mixed-radix number, class most significant, a digit row is the index the authors'
public code (pcsl-epfl/hierarchy-learning, ``sample_data_from_paths``) gives the datum: class ``index //
(P_max / n_c)``, then level by level the base-m digits of each node's production, breadth-first
(:func:`derivation_index`, :func:`index_derivations`; checked against data that code drew,
``tests/data/rhm_pcsl_rules.json``).  On an RHM every derivation has probability 1/P_max, and since the rules
are unambiguous distinct derivations are distinct inputs.

- :func:`enumerate_derivations`: every derivation with its probability (P_max <= ``max_rows``).
- :func:`sample_derivations`, :func:`sample_distinct`: distinct derivations, uniformly without replacement,
  when all are equally likely (an RHM); :func:`train_test_split` makes the test set the first ``num_test`` of
  them and the training set the next ``num_train``, so the two are disjoint by construction, the test set is the
  same for every ``num_train`` and the training sets are nested.  The draws are a fixed stream of the seed:
  for P_max <= :data:`PERMUTE_MAX` a ``torch.randperm`` of the indices, above it blocks of uniform digit rows
  whose first occurrences are kept in order (a uniform random order of the derivations: each new one is
  uniform among those not yet drawn); asking for more rows gives a longer prefix of the same order.
- :func:`exchange_synonyms`: keep the events at levels <= ``level``, redraw every level below from the ladder's
  laws (the productions, or the tables of a level whose children are independent) -- the paper's synonym
  exchange, ``seed_reset_layer = level`` in the authors' code, which permutes the production digits of the
  levels below across data (the same law on an RHM up to drawing without replacement).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .categorical import BlockRNG
from .emission import sampler_events
from .joint_draws import production_children
from .ladder import TOPDOWN, Ladder, _check_ladder
from .productions import Productions
from .sampling import BLOCK_SIZE, LadderSample, SamplingPlan, _count, _sample_call, block_generator

__all__ = ["DRAW_BLOCK", "ENUMERATE_MAX", "PERMUTE_MAX", "derivation_index", "derivation_probs", "derivation_rows",
           "enumerate_derivations", "exchange_synonyms", "index_derivations", "num_derivations",
           "row_derivations", "sample_derivations", "sample_distinct", "train_test_split"]

#: Rows unpacked and expanded at a time by the distinct draws (their int64 digits and events stay this small).
ROWS_CHUNK = 2**16
#: The most derivations :func:`enumerate_derivations` lists by default.
ENUMERATE_MAX = 2**20
#: Up to this many derivations, distinct draws are a prefix of one ``torch.randperm`` of the indices.
PERMUTE_MAX = 2**22
#: Digit rows per generator block of the distinct draws above :data:`PERMUTE_MAX`.
DRAW_BLOCK = 2**14
# streams of block_generator, so that one seed's uses do not share random numbers
_DISTINCT_STREAM, _EMISSION_STREAM, _EXCHANGE_STREAM = 0x52484D01, 0x52484D02, 0x52484D03
# a word of packed digits stays below this, so that word * radix + digit never overflows int64
_WORD_MAX = 2**62


@dataclass(frozen=True)
class _Layout:
    """The digit columns of a ladder's derivations: ``radices[c]`` of column c, and the columns packed into each
    int64 word (``words[w] = (start, stop)``, consecutive columns whose radices multiply to < 2^62)."""

    radices: tuple[int, ...]
    words: tuple[tuple[int, int], ...]
    total: int

    def word_size(self, w: int) -> int:
        a, b = self.words[w]
        return int(np.prod([self.radices[c] for c in range(a, b)], dtype=object))

    def pack(self, digits: torch.Tensor) -> torch.Tensor:
        """Digit rows ``(n, D)`` as ``(n, W)`` int64 words (mixed radix, first column most significant)."""
        out = torch.zeros(digits.shape[0], len(self.words), dtype=torch.int64, device=digits.device)
        for w, (a, b) in enumerate(self.words):
            for c in range(a, b):
                out[:, w].mul_(self.radices[c]).add_(digits[:, c])
        return out

    def unpack(self, keys: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`pack`: ``(n, W)`` words to ``(n, D)`` int64 digits."""
        out = torch.empty(keys.shape[0], len(self.radices), dtype=torch.int64, device=keys.device)
        for w, (a, b) in enumerate(self.words):
            acc = keys[:, w].clone()
            for c in range(b - 1, a - 1, -1):
                out[:, c] = acc % self.radices[c]
                acc.div_(self.radices[c], rounding_mode="floor")
        return out


def _joint_levels(ladder: Ladder, what: str) -> list[Productions]:
    """Every level's productions, or a ValueError: derivations need joint draws at every level."""
    _check_ladder(ladder)
    prods = list(ladder.productions or (None,) * ladder.depth)
    missing = [l for l, p in enumerate(prods) if p is None]
    if ladder.mode != TOPDOWN or missing:
        raise ValueError(f"ladder: {what} needs a top-down ladder whose every level draws its children jointly "
                         f"(productions, as Ladder.rhm builds); levels {missing or 'all'} do not")
    return [p for p in prods if p is not None]


def _layout(ladder: Ladder, what: str = "derivations") -> _Layout:
    prods = _joint_levels(ladder, what)
    radices = [ladder.events[0]]
    for l, p in enumerate(prods):
        radices += [p.num_productions] * ladder.num_regions[l]
    words, start, size = [], 0, 1
    for c, r in enumerate(radices):
        if size * r >= _WORD_MAX:
            words.append((start, c))
            start, size = c, 1
        size *= r
    words.append((start, len(radices)))
    return _Layout(tuple(radices), tuple(words), int(np.prod(radices, dtype=object)))


def num_derivations(ladder: Ladder) -> int:
    """P_max = m_0 prod_l K_l^{R_l}: the derivations of ``ladder`` (a Python int; module docstring)."""
    return _layout(ladder).total


def _check_digits(lay: _Layout, digits: Any) -> torch.Tensor:
    if not isinstance(digits, torch.Tensor) or digits.dtype.is_floating_point or digits.dtype == torch.bool \
            or digits.dim() != 2 or digits.shape[1] != len(lay.radices):
        raise ValueError(f"digits: expected an integer tensor of shape (n, {len(lay.radices)}) (class, then one "
                         f"production per internal node), got {_describe(digits)}")
    digits = digits.long()
    high = torch.tensor(lay.radices, device=digits.device)
    bad = (digits < 0) | (digits >= high)
    if bad.any():
        i, c = (int(v) for v in bad.nonzero()[0])
        raise ValueError(f"digits[{i}, {c}]: expected 0..{lay.radices[c] - 1}, got {int(digits[i, c])}")
    return digits


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__


def derivation_rows(ladder: Ladder, digits: torch.Tensor) -> torch.Tensor:
    """The events ``z`` ``(n, total_regions)`` (the ladder's event dtype) of derivations ``digits`` ``(n, D)``:
    the class, then top-down ``z_children(r) = rules[r, z_r, k_r]`` (module docstring)."""
    prods = _joint_levels(ladder, "derivation_rows")
    digits = _check_digits(_layout(ladder), digits)
    off = ladder.level_offsets
    z = torch.empty(digits.shape[0], ladder.total_regions, dtype=torch.int64, device=digits.device)
    z[:, 0] = digits[:, 0]
    for l, p in enumerate(prods):
        k = digits[:, off[l] + 1: off[l + 1] + 1]  # level l's nodes follow the class and the levels above
        z[:, off[l + 1]: off[l + 2]] = production_children(p.to(digits.device), z[:, off[l]: off[l + 1]], k)
    return z.to(ladder.event_dtype())


def row_derivations(ladder: Ladder, z: torch.Tensor, chunk_rows: int = 4096) -> torch.Tensor:
    """The inverse of :func:`derivation_rows`: the digits ``(n, D)`` int64 of event rows ``z``
    ``(n, total_regions)``, each node's production the first whose rule gives its children.

    :raises ValueError: a row whose children are no production of their parent's event (not a derivation of this
        ladder), or a bad shape."""
    prods = _joint_levels(ladder, "row_derivations")
    if not isinstance(z, torch.Tensor) or z.dim() != 2 or z.shape[1] != ladder.total_regions:
        raise ValueError(f"z: expected a tensor of shape (n, {ladder.total_regions}), got {_describe(z)}")
    off, z = ladder.level_offsets, z.long()
    high = torch.repeat_interleave(torch.tensor(ladder.events), torch.tensor(ladder.num_regions)).to(z.device)
    bad = (z < 0) | (z >= high)
    if bad.any():
        i, c = (int(v) for v in bad.nonzero()[0])
        raise ValueError(f"z[{i}, {c}]: expected an event in 0..{int(high[c]) - 1}, got {int(z[i, c])}")
    out = torch.empty(z.shape[0], 1 + off[-2], dtype=torch.int64, device=z.device)
    out[:, 0] = z[:, 0]
    for l, p in enumerate(prods):
        r, b = ladder.num_regions[l], p.arity
        rules = p.region_rules(r).to(z.device)  # (R, m, K, b)
        region = torch.arange(r, device=z.device)
        for lo in range(0, z.shape[0], chunk_rows):
            zc = z[lo: lo + chunk_rows]
            parents = zc[:, off[l]: off[l + 1]]
            kids = zc[:, off[l + 1]: off[l + 2]].reshape(-1, r, 1, b)
            match = (rules[region, parents] == kids).all(-1) & (p.region_probs(r).to(z.device)[region, parents] > 0)
            found = match.any(-1)
            if not found.all():
                i, j = (int(v) for v in (~found).nonzero()[0])
                raise ValueError(f"z[{lo + i}]: the children of region {j} of level {l} are no production of its "
                                 f"event {int(zc[i, off[l] + j])} (not a derivation of this ladder)")
            out[lo: lo + chunk_rows, off[l] + 1: off[l + 1] + 1] = match.to(torch.int8).argmax(-1)
    return out


def derivation_index(ladder: Ladder, digits: torch.Tensor) -> torch.Tensor | list[int]:
    """The authors' index of each derivation (module docstring): ``(n,)`` int64 when P_max < 2^62, else a list of
    Python ints (P_max overflows int64 soon: 2^192 for v = m = 64, L = 5)."""
    lay = _layout(ladder)
    keys = lay.pack(_check_digits(lay, digits))
    if len(lay.words) == 1:
        return keys[:, 0]
    out = np.zeros(keys.shape[0], dtype=object)
    for w in range(len(lay.words)):
        out = out * lay.word_size(w) + keys[:, w].cpu().numpy().astype(object)
    return [int(v) for v in out]


def index_derivations(ladder: Ladder, index: torch.Tensor | list[int]) -> torch.Tensor:
    """The derivations ``(n, D)`` int64 of indices in ``[0, P_max)`` (an int64 tensor, or Python ints for any
    P_max): the inverse of :func:`derivation_index`."""
    lay = _layout(ladder)
    if isinstance(index, torch.Tensor) and len(lay.words) == 1 and index.dim() == 1 \
            and index.dtype in (torch.int32, torch.int64):  # the index is the one packed word
        if len(index) and (int(index.min()) < 0 or int(index.max()) >= lay.total):
            raise ValueError(f"index: expected integers in [0, P_max = {lay.total}), got "
                             f"{int(index.min())}..{int(index.max())}")
        return lay.unpack(index.long().cpu()[:, None])
    vals = np.asarray(index.cpu().tolist() if isinstance(index, torch.Tensor) else list(index), dtype=object)
    if vals.ndim != 1 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in vals):
        raise ValueError(f"index: expected a 1-D sequence of integers, got {_describe(index)}")
    if len(vals) and (min(vals) < 0 or max(vals) >= lay.total):
        raise ValueError(f"index: expected integers in [0, P_max = {lay.total}), got {min(vals)}..{max(vals)}")
    keys = torch.empty(len(vals), len(lay.words), dtype=torch.int64)
    for w in range(len(lay.words) - 1, -1, -1):
        size = lay.word_size(w)
        keys[:, w] = torch.tensor([int(v) for v in vals % size], dtype=torch.int64)
        vals = vals // size
    return lay.unpack(keys)


def derivation_probs(ladder: Ladder, digits: torch.Tensor) -> torch.Tensor:
    """P(d) = prior[y] prod_{l,r} probs[r, z_r, k_{l,r}] ``(n,)`` float64 of derivations ``digits`` ``(n, D)``."""
    prods = _joint_levels(ladder, "derivation_probs")
    digits = _check_digits(_layout(ladder), digits)
    z, off = derivation_rows(ladder, digits).long(), ladder.level_offsets
    assert ladder.prior is not None  # top-down, checked by _joint_levels
    out = ladder.prior.to(digits.device)[digits[:, 0]].clone()
    for l, p in enumerate(prods):
        r = ladder.num_regions[l]
        region = torch.arange(r, device=digits.device)
        probs = p.region_probs(r).to(digits.device)
        out *= probs[region, z[:, off[l]: off[l + 1]], digits[:, off[l] + 1: off[l + 1] + 1]].prod(-1)
    return out


def _derivable(ladder: Ladder, what: str) -> None:
    if not ladder.emission.derivable:
        raise ValueError(f"ladder: {what} lists latent derivations, but this ladder's emission "
                         f"({ladder.emission.kind}) draws x at random; use ladder.with_emission('onehot')")


def enumerate_derivations(ladder: Ladder, max_rows: int = ENUMERATE_MAX) -> tuple[LadderSample, torch.Tensor]:
    """Every derivation, in index order (row i is index i), and its probability.

    :returns: ``(sample, probs)``: a :class:`~teachers.sampling.LadderSample` of P_max rows and ``probs``
        ``(P_max,)`` float64 (summing to 1; 0 for derivations that use a production of probability 0).
    :raises ValueError: P_max > ``max_rows``, a ladder that is not joint at every level, or a random emission.
    """
    lay = _layout(ladder, "enumerate_derivations")
    _derivable(ladder, "enumerate_derivations")
    max_rows = _count(max_rows, "max_rows")
    if lay.total > max_rows:
        raise ValueError(f"ladder: {lay.total} derivations is more than max_rows = {max_rows}")
    digits = lay.unpack(torch.arange(lay.total, dtype=torch.int64)[:, None])
    sample = LadderSample(ladder, derivation_rows(ladder, digits), None, None, 0, lay.total,
                          {"derivations": "all", "num_derivations": lay.total})
    return sample, derivation_probs(ladder, digits)


def _equally_likely(ladder: Ladder, prods: list[Productions]) -> None:
    """A ValueError unless every derivation has probability 1/P_max (uniform prior and productions)."""
    assert ladder.prior is not None
    laws = [("prior", ladder.prior)] + [(f"productions[{l}].probs", p.probs) for l, p in enumerate(prods)]
    for name, t in laws:
        if not torch.allclose(t, torch.full_like(t, 1.0 / t.shape[-1]), rtol=0, atol=1e-12):
            raise ValueError(f"ladder: sampling without replacement needs equally likely derivations (uniform "
                             f"prior and productions, as an RHM's); {name} is not uniform")


def _uniform_digits(lay: _Layout, g: torch.Generator, n: int) -> torch.Tensor:
    """``(n, D)`` independent uniform digit rows from ``g``: one randint per run of equal radices."""
    parts, c = [], 0
    while c < len(lay.radices):
        e = c
        while e < len(lay.radices) and lay.radices[e] == lay.radices[c]:
            e += 1
        parts.append(torch.randint(0, lay.radices[c], (n, e - c), generator=g))
        c = e
    return torch.cat(parts, 1)


def _distinct_keys(lay: _Layout, num: int, seed: int) -> torch.Tensor:
    """The first ``num`` distinct derivations (packed words ``(num, W)``) of the stream of uniform digit rows,
    blocks of :data:`DRAW_BLOCK` rows from ``block_generator(seed, k)``, in order of first occurrence."""
    have = torch.empty(0, len(lay.words), dtype=torch.int64)
    block = 0
    while have.shape[0] < num:
        want = num - have.shape[0]
        blocks = range(block, block + -(-(want + want // 16 + 64) // DRAW_BLOCK))
        block = blocks.stop
        new = torch.cat([lay.pack(_uniform_digits(lay, block_generator(seed, k, stream=_DISTINCT_STREAM),
                                                  DRAW_BLOCK)) for k in blocks])
        keys = torch.cat([have, new])
        _, inverse = torch.unique(keys, dim=0, return_inverse=True)
        first = torch.full((int(inverse.max()) + 1,), keys.shape[0], dtype=torch.int64)
        first.scatter_reduce_(0, inverse, torch.arange(keys.shape[0]), "amin")
        fresh = first[first >= have.shape[0]].sort().values[:want]
        have = torch.cat([have, keys[fresh]])
    return have


def sample_derivations(ladder: Ladder, num_examples: int, seed: int = 0) -> torch.Tensor:
    """``num_examples`` distinct derivations ``(num_examples, D)`` int64, uniformly without replacement, in a
    random order that is a fixed stream of ``seed`` (a larger ``num_examples`` extends it; module docstring).

    :raises ValueError: ``num_examples`` > P_max, derivations that are not equally likely, or a ladder that is not
        joint at every level."""
    lay, keys = _distinct(ladder, num_examples, seed)
    return lay.unpack(keys)


def _distinct(ladder: Ladder, num_examples: int, seed: int) -> tuple[_Layout, torch.Tensor]:
    """:func:`sample_derivations`' derivations as packed words ``(num_examples, W)``, W int64 per row (a few,
    where the digits take D int64), with the ladder's layout."""
    lay = _layout(ladder, "sampling without replacement")
    _equally_likely(ladder, _joint_levels(ladder, "sampling without replacement"))
    num, seed = _count(num_examples, "num_examples", 0), _count(seed, "seed", 0)
    if num > lay.total:
        raise ValueError(f"num_examples: at most P_max = {lay.total} distinct derivations exist, got {num}")
    if lay.total <= PERMUTE_MAX:
        perm = torch.randperm(lay.total, generator=block_generator(seed, 0, stream=_DISTINCT_STREAM))
        return lay, perm[:num, None]
    return lay, _distinct_keys(lay, num, seed)


def _rows_of_keys(ladder: Ladder, lay: _Layout, keys: torch.Tensor) -> torch.Tensor:
    """The events ``z`` of packed derivations ``keys`` ``(n, W)``, unpacked and expanded :data:`ROWS_CHUNK` rows
    at a time, so that the int64 digits and events of all n rows are never held at once."""
    z = torch.empty(keys.shape[0], ladder.total_regions, dtype=ladder.event_dtype())
    for lo in range(0, keys.shape[0], ROWS_CHUNK):
        z[lo: lo + ROWS_CHUNK] = derivation_rows(ladder, lay.unpack(keys[lo: lo + ROWS_CHUNK]))
    return z


def _sample_of(ladder: Ladder, z: torch.Tensor, seed: int, meta: dict) -> LadderSample:
    """The events ``z`` as a sample; x (for a random emission) drawn in blocks of :data:`BLOCK_SIZE` rows,
    block k from ``block_generator(seed, k)`` of its own stream, so row i's x depends on (seed, i) only."""
    x = None
    if not ladder.emission.derivable:
        leaves, n = z[:, ladder.level_offsets[-2]:].long(), z.shape[0]
        sizes = [min(BLOCK_SIZE, n - lo) for lo in range(0, n, BLOCK_SIZE)]
        rng = BlockRNG([block_generator(seed, k, stream=_EMISSION_STREAM) for k in range(len(sizes))], sizes)
        with sampler_events():  # the derivations' own events, in range by construction
            parts = [ladder.emission.sample(zb, gen).to(torch.float32) for zb, gen in rng.split(leaves)]
        x = torch.cat(parts) if parts else torch.empty(0, ladder.num_regions[-1], ladder.emission.dim)
    return LadderSample(ladder, z, x, seed=seed, start=0, total=z.shape[0], meta=meta)


def sample_distinct(ladder: Ladder, num_examples: int, seed: int = 0) -> LadderSample:
    """``num_examples`` distinct derivations (:func:`sample_derivations`) as a
    :class:`~teachers.sampling.LadderSample`: distinct inputs on an RHM, whose rules are unambiguous."""
    lay, keys = _distinct(ladder, num_examples, seed)
    return _sample_of(ladder, _rows_of_keys(ladder, lay, keys), seed, {"derivations": "distinct"})


def train_test_split(ladder: Ladder, num_train: int, num_test: int, seed: int = 0) -> tuple[LadderSample,
                                                                                          LadderSample]:
    """A training and a test set with no derivation (no input, on an RHM) in common.

    The test set is the first ``num_test`` distinct derivations of :func:`sample_derivations`' stream and the
    training set the next ``num_train``: disjoint by construction, the test set the same for every
    ``num_train`` (a sweep over the training-set size P compares on one test set) and the training sets nested.

    :returns: ``(train, test)``, two :class:`~teachers.sampling.LadderSample` of ``num_train`` and ``num_test``
        rows.
    :raises ValueError: ``num_train + num_test`` > P_max, ``num_train`` < 1, ``num_test`` < 0, or a ladder
        whose derivations are not equally likely.
    """
    num_train, num_test = _count(num_train, "num_train"), _count(num_test, "num_test", 0)
    lay = _layout(ladder, "train_test_split")
    if num_train + num_test > lay.total:
        raise ValueError(f"num_train, num_test: {num_train} + {num_test} distinct derivations asked, but only "
                         f"P_max = {lay.total} exist")
    lay, keys = _distinct(ladder, num_train + num_test, seed)
    both = _sample_of(ladder, _rows_of_keys(ladder, lay, keys), seed, {})
    x = both.x

    def part(lo: int, hi: int, name: str) -> LadderSample:
        return LadderSample(ladder, both.z[lo:hi], None if x is None else x[lo:hi], seed, 0, hi - lo,
                            {"derivations": "distinct", "split": name})

    return part(num_test, num_test + num_train, "train"), part(0, num_test, "test")


def exchange_synonyms(ladder: Ladder, z: torch.Tensor | LadderSample, level: int,
                      seed: int = 0) -> torch.Tensor | LadderSample:
    """Synonym exchange: keep every event at levels <= ``level`` and redraw the levels below from the ladder's laws
    (productions where the children are drawn jointly, else the tables), as the sampler draws them.

    On an RHM the exchanged datum has the same symbols at ``level`` and above, written with other synonyms below
    (the authors' ``seed_reset_layer = level``).  Random numbers come in whole blocks of :data:`BLOCK_SIZE` rows
    of ``z``, block k from ``block_generator(seed, k)`` of its own stream: row i's exchange depends on (seed, i,
    its kept events) only.

    :param z: events ``(N, total_regions)``, or a :class:`~teachers.sampling.LadderSample` of ``ladder``.
    :param level: 0..depth; ``depth`` returns the rows unchanged (x of a random emission redrawn).
    :returns: the same kind as ``z``: events in the ladder's event dtype, or a LadderSample (x redrawn when the
        emission is random).
    """
    _check_ladder(ladder)
    if ladder.mode != TOPDOWN:
        raise ValueError("ladder: exchange_synonyms redraws levels top-down; this ladder is bottom-up")
    if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 0 <= level <= ladder.depth:
        raise ValueError(f"level: expected an integer in 0..{ladder.depth}, got {level!r}")
    seed = _count(seed, "seed", 0)
    sample = z if isinstance(z, LadderSample) else None
    if sample is not None:
        if sample.ladder is not ladder and sample.ladder.fingerprint() != ladder.fingerprint():
            raise ValueError("z: a sample of another ladder")
        z = sample.z
    if not isinstance(z, torch.Tensor) or z.dim() != 2 or z.shape[1] != ladder.total_regions:
        raise ValueError(f"z: expected events of shape (N, {ladder.total_regions}) or a LadderSample, "
                         f"got {_describe(z)}")
    plan = SamplingPlan(ladder, z.device)
    buf = z.to(ladder.event_dtype()).clone()
    xs = []
    with torch.no_grad():
        for k, lo in enumerate(range(0, buf.shape[0], BLOCK_SIZE)):
            rows = buf[lo: lo + BLOCK_SIZE]
            n = rows.shape[0]
            # a whole block whatever n (a short one padded with event 0): each level's uniforms are laid out by
            # block row, so that row i's draws never depend on how many rows follow it
            block = rows if n == BLOCK_SIZE else torch.cat([rows, rows.new_zeros(BLOCK_SIZE - n, rows.shape[1])])
            rng = BlockRNG([block_generator(seed, k, z.device, stream=_EXCHANGE_STREAM)], [BLOCK_SIZE])
            xk = _sample_call(plan, rng, block, start=level + 1)
            if block is not rows:
                rows.copy_(block[:n])
            xs.append(None if xk is None else xk[:n])
    if sample is None:
        return buf
    x = None
    if not ladder.emission.derivable:
        x = torch.cat([v for v in xs if v is not None]) if xs else sample.x
    return LadderSample(ladder, buf, x, seed, sample.start, sample.total,
                        {**sample.meta, "exchanged_below": int(level), "exchange_seed": seed})
