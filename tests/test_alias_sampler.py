"""The alias sampler (teachers/categorical.py): exact tables, exact and sampled frequencies,
the IndexedCategorical distribution, and BlockRNG."""

from __future__ import annotations

import numpy as np
import pyro.distributions as dist
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from teachers.categorical import AliasTable, BlockRNG, CategoricalTable, IndexedCategorical, alias_setup, uniform


def reconstruct(threshold: np.ndarray, alias: np.ndarray) -> np.ndarray:
    """Probability of each event under the alias tables: cell k keeps event k with mass
    threshold[k] / m and gives (1 - threshold[k]) / m to alias[k]."""
    rows, m = threshold.shape
    p = threshold.copy()
    for r in range(rows):
        np.add.at(p[r], alias[r], 1.0 - threshold[r])
    return p / m


def random_rows(rng: np.random.Generator, rows: int, m: int) -> np.ndarray:
    """Dirichlet rows with some exact zeros and one one-hot row."""
    p = rng.dirichlet(np.full(m, 0.5), size=rows)
    if m > 1:
        p[: rows // 3, rng.permutation(m)[: m // 2]] = 0.0
        p[rows // 3] = np.eye(m)[rng.integers(m)]
        p /= p.sum(1, keepdims=True)
    return p


# ---------------------------------------------------------------------- alias_setup
@pytest.mark.parametrize("m", [1, 2, 3, 5, 7, 16, 100, 255, 256, 257, 300, 1000])
def test_alias_setup_reconstructs_probabilities(m):
    p = random_rows(np.random.default_rng(m), 40, m)
    threshold, alias = alias_setup(p)
    assert threshold.shape == alias.shape == (40, m)
    assert ((threshold >= 0) & (threshold <= 1)).all()
    assert ((alias >= 0) & (alias < m)).all()
    assert np.abs(reconstruct(threshold, alias) - p).max() < 1e-12
    # an event of probability 0 is never kept in its own cell and never an alias target
    zero = p == 0
    assert (threshold[zero] == 0).all()
    used = (threshold < 1)
    assert not zero[np.arange(40)[:, None].repeat(m, 1)[used], alias[used]].any()


def test_alias_setup_special_rows():
    one_hot = np.eye(5)[[3]]
    th, al = alias_setup(one_hot)
    assert np.abs(reconstruct(th, al) - one_hot).max() < 1e-15
    assert th[0, 3] == 1.0 and (al[0, [0, 1, 2, 4]] == 3).all()
    uniform_row = np.full((1, 6), 1 / 6)
    th, al = alias_setup(uniform_row)
    assert np.abs(th - 1).max() < 1e-12  # every cell keeps its own event
    th, al = alias_setup(torch.tensor([[1.0]], dtype=torch.float64))
    assert th.tolist() == [[1.0]] and al.tolist() == [[0]]


def test_alias_setup_rejects_non_matrix():
    with pytest.raises(ValueError, match=r"^probs: expected a \(rows, m\) array, got shape \(3,\)"):
        alias_setup(np.ones(3) / 3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=40), min_size=1, max_size=6).filter(
    lambda rows: len({len(r) for r in rows}) == 1 and all(sum(r) > 0 for r in rows)))
def test_alias_setup_exact_for_arbitrary_rows(rows):
    """Integer weights (many ties and zeros) stress Vose's small/large bookkeeping."""
    w = np.array(rows, dtype=np.float64)
    p = w / w.sum(1, keepdims=True)
    th, al = alias_setup(p)
    assert np.abs(reconstruct(th, al) - p).max() < 1e-12


# ---------------------------------------------------------------------- AliasTable.sample
class GridRNG(BlockRNG):
    """A 'generator' whose uniforms are every float32 value torch.rand can return:
    k * 2^-24 for k = 0 .. 2^24 - 1, each once."""

    def __init__(self):
        self.total = 2**24

    def _draw(self, fn, shape, dtype, device):
        assert fn is torch.rand and dtype == torch.float32 and tuple(shape) == (2**24,)
        return torch.arange(2**24, dtype=torch.float64).mul_(2.0**-24).float()


def test_torch_rand_float32_is_the_2_pow_minus_24_grid():
    """The premise of the exact test below: float32 uniforms are multiples of 2^-24 in [0, 1)."""
    u = torch.rand(10**6, generator=torch.Generator().manual_seed(0)).double() * 2**24
    assert (u == u.floor()).all() and u.min() >= 0 and u.max() < 2**24


@pytest.mark.parametrize("m", [2, 3, 7, 100, 255, 256])
def test_alias_sampler_exact_distribution_over_all_float32_uniforms(m):
    """Push every possible float32 uniform through the sampler: the induced distribution is
    p up to the 24-bit resolution.  Each cell k can be off by a few grid points at its
    boundary, at its cut k + threshold[k] (rounded to float32: < 1 point of 2^-24 after the
    division by m) and in its alias part, so |P(j) - p_j| <= 4 (1 + #cells aliased to j) 2^-24."""
    rng = np.random.default_rng(100 + m)
    p = rng.dirichlet(np.ones(m))[None]
    p[0, 0] = 0.0
    p /= p.sum()
    table = AliasTable(p)
    s = table.sample(torch.zeros(2**24, dtype=torch.int64), GridRNG())
    freq = torch.bincount(s.long(), minlength=m).double().numpy() / 2**24
    th, al = alias_setup(p)
    n_alias = np.bincount(al[0][th[0] < 1], minlength=m)
    assert freq[0] == 0.0  # probability-0 event: never drawn
    assert (np.abs(freq - p[0]) <= 4 * (1 + n_alias) * 2.0**-24).all(), np.abs(freq - p[0]).max() * 2**24


@pytest.mark.parametrize("m", [3, 10, 256, 300])
def test_alias_sampler_frequencies_chi_square(m):
    """N draws per row: Pearson chi-square p-value > 1e-6 (false alarm 1e-6 per row if the
    sampler is exact), and TV(freq, p) within the Bretagnolle-Huber-Carol bound
    sqrt((m log 2 + log 1e6) / 2N) that shrinks like 1/sqrt(N)."""
    rows = 4
    p = random_rows(np.random.default_rng(m), rows, m)
    table = AliasTable(p)
    assert table.uniform_dtype == (torch.float32 if m <= 256 else torch.float64)
    assert table.event_dtype == (torch.uint8 if m <= 256 else torch.int32)
    n = 200 * m if m > 10 else 20_000
    row = torch.arange(rows).repeat_interleave(n).reshape(rows, n)
    s = table.sample(row, torch.Generator().manual_seed(m))
    assert s.shape == row.shape and s.dtype == table.event_dtype
    bound = float(np.sqrt((m * np.log(2) + np.log(1e6)) / (2 * n)))
    for r in range(rows):
        counts = torch.bincount(s[r].long(), minlength=m).numpy()
        assert counts.sum() == n
        assert (counts[p[r] == 0] == 0).all()
        pos = p[r] > 0
        tv = 0.5 * np.abs(counts / n - p[r]).sum()
        assert tv < bound, (r, tv, bound)
        if pos.sum() > 1:
            assert stats.chisquare(counts[pos], p[r][pos] * n).pvalue > 1e-6


def test_alias_sampler_single_event_and_shapes():
    table = AliasTable(np.ones((3, 1)))
    s = table.sample(torch.tensor([[0, 1], [2, 2]]), torch.Generator().manual_seed(0))
    assert s.shape == (2, 2) and (s == 0).all()
    # expanded (non-contiguous) row tensors are not modified and work like contiguous ones
    t = AliasTable(random_rows(np.random.default_rng(1), 3, 5))
    row = torch.tensor([2, 0, 1]).expand(4, 3)
    a = t.sample(row, torch.Generator().manual_seed(7))
    b = t.sample(row.contiguous(), torch.Generator().manual_seed(7))
    assert torch.equal(a, b) and torch.equal(row, torch.tensor([2, 0, 1]).expand(4, 3))


def test_alias_sampler_is_deterministic_given_generator():
    t = AliasTable(random_rows(np.random.default_rng(2), 5, 9))
    row = torch.randint(0, 5, (1000,), generator=torch.Generator().manual_seed(0))
    a = t.sample(row, torch.Generator().manual_seed(3))
    b = t.sample(row, torch.Generator().manual_seed(3))
    c = t.sample(row, torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)


# ---------------------------------------------------------------------- IndexedCategorical
@pytest.fixture
def table():
    p = random_rows(np.random.default_rng(5), 6, 4)
    p[1] = [0.0, 0.5, 0.0, 0.5]
    return CategoricalTable(torch.as_tensor(p))


def test_indexed_categorical_log_prob_matches_categorical(table):
    row = torch.tensor([[0, 1, 2], [3, 4, 5]])
    d = IndexedCategorical(table, row)
    ref = dist.Categorical(probs=table.probs[row])
    assert d.batch_shape == (2, 3) and d.event_shape == ()
    for v in range(4):
        value = torch.full((2, 3), v)
        lp, lp_ref = d.log_prob(value), ref.log_prob(value)
        pos = table.probs[row, v] > 0
        assert (lp[pos] - lp_ref[pos]).abs().max().item() < 1e-12
        # zero-probability events: exactly -inf (Categorical clamps them to log(eps))
        assert torch.isneginf(lp[~pos]).all()
    # broadcasting as under enumeration: values (m, 1, 1) against batch (2, 3)
    vals = d.enumerate_support(expand=False)
    assert vals.shape == (4, 1, 1)
    lp = d.log_prob(vals)
    assert lp.shape == (4, 2, 3)
    assert (lp.exp().sum(0) - 1).abs().max().item() < 1e-12
    assert torch.equal(d.logits, table.log_probs[row]) and torch.equal(d.probs, table.probs[row])


def test_indexed_categorical_enumerate_support_and_expand(table):
    d = IndexedCategorical(table, torch.tensor([0, 5, 2]))
    full = d.enumerate_support()
    assert full.shape == (4, 3) and torch.equal(full[:, 1], torch.arange(4))
    assert full.dtype == torch.int64
    e = d.expand((2, 3))
    assert e.batch_shape == (2, 3) and e.row.shape == (2, 3) and e.table is table
    assert torch.equal(e.log_prob(torch.ones(2, 3, dtype=torch.long)), d.log_prob(torch.ones(3, dtype=torch.long))
                       .expand(2, 3))
    assert d.has_enumerate_support and d.support.check(torch.tensor([0, 3])).all()
    assert not d.support.check(torch.tensor(4))
    with pytest.raises(RuntimeError, match="expanded size"):  # as torch's own Categorical.expand
        d.expand((4,))


def test_indexed_categorical_sample_dtype_and_shape(table):
    d = IndexedCategorical(table, torch.tensor([0, 1, 2]), generator=torch.Generator().manual_seed(0))
    s = d.sample()
    assert s.dtype == torch.int64 and s.shape == (3,)
    assert d.sample((5, 2)).shape == (5, 2, 3)
    c = IndexedCategorical(table, torch.tensor([0, 1, 2]), generator=torch.Generator().manual_seed(0), compact=True)
    sc = c.sample()
    assert sc.dtype == torch.uint8 and torch.equal(sc.long(), s)  # same draws, narrower dtype
    assert c.expand((4, 3)).sample().dtype == torch.uint8
    big = CategoricalTable(torch.full((2, 300), 1 / 300, dtype=torch.float64))
    assert IndexedCategorical(big, torch.tensor([1]), compact=True).sample().dtype == torch.int32
    assert IndexedCategorical(big, torch.tensor([1])).sample().dtype == torch.int64
    # row 1 has zeros at events 0 and 2: never drawn
    z = IndexedCategorical(table, torch.ones(10_000, dtype=torch.long)).sample()
    assert set(z.unique().tolist()) == {1, 3}


def test_indexed_categorical_uses_pyro_rng_without_generator(table):
    import pyro

    d = IndexedCategorical(table, torch.arange(6).repeat(100))
    pyro.set_rng_seed(1)
    a = d.sample()
    pyro.set_rng_seed(1)
    b = d.sample()
    assert torch.equal(a, b)


def test_indexed_categorical_dense_rebuild_is_categorical(table):
    """Pyro rebuilds distributions as type(d)(logits=...): that must be a dense Categorical."""
    d = IndexedCategorical(logits=torch.zeros(2, 3))
    assert type(d) is dist.Categorical and d.batch_shape == (2,)
    assert torch.allclose(d.probs, torch.full((2, 3), 1 / 3))
    with pytest.raises(NotImplementedError):
        _ = IndexedCategorical(table, torch.tensor([0])).mean


def test_indexed_categorical_sample_frequencies(table):
    """Counts of 40k draws per row vs the table: TV within the BHC bound (delta = 1e-6)."""
    n = 40_000
    d = IndexedCategorical(table, torch.arange(6).repeat_interleave(n), generator=torch.Generator().manual_seed(2))
    s = d.sample().reshape(6, n)
    bound = float(np.sqrt((4 * np.log(2) + np.log(1e6)) / (2 * n)))
    for r in range(6):
        freq = torch.bincount(s[r], minlength=4).double() / n
        assert 0.5 * (freq - table.probs[r]).abs().sum().item() < bound


# ---------------------------------------------------------------------- BlockRNG
def test_block_rng_blocks_are_independent_of_grouping():
    def gens(*seeds):
        return [torch.Generator().manual_seed(s) for s in seeds]

    together = BlockRNG(gens(1, 2, 3), [3, 5, 2])
    a1 = uniform((10, 4), together)
    a2 = uniform((10,), together)
    parts = [BlockRNG(gens(s), [n]) for s, n in ((1, 3), (2, 5), (3, 2))]
    b1 = torch.cat([uniform((p.total, 4), p) for p in parts])
    b2 = torch.cat([uniform((p.total,), p) for p in parts])
    assert torch.equal(a1, b1) and torch.equal(a2, b2)
    # and equal plain torch.rand on each generator
    g = gens(2)[0]
    assert torch.equal(a1[3:8], torch.rand((5, 4), generator=g))
    assert together.total == 10


def test_block_rng_in_alias_sampler_and_indexed_categorical():
    t = AliasTable(random_rows(np.random.default_rng(3), 4, 6))
    row = torch.randint(0, 4, (12, 3), generator=torch.Generator().manual_seed(0))
    rng = BlockRNG([torch.Generator().manual_seed(10), torch.Generator().manual_seed(11)], [5, 7])
    joint = t.sample(row, rng)
    first = t.sample(row[:5], BlockRNG([torch.Generator().manual_seed(10)], [5]))
    second = t.sample(row[5:], torch.Generator().manual_seed(11))
    assert torch.equal(joint, torch.cat([first, second]))


def test_block_rng_errors():
    with pytest.raises(ValueError, match=r"^generators and sizes must have the same length"):
        BlockRNG([torch.Generator()], [1, 2])
    rng = BlockRNG([torch.Generator()], [4])
    with pytest.raises(ValueError, match=r"^BlockRNG covers 4 examples along dim 0, asked for shape \(5, 2\)"):
        uniform((5, 2), rng)
    with pytest.raises(ValueError, match=r"^BlockRNG covers 4 examples"):
        uniform((), rng)
