"""Issue 39: the sampler's integer draws and reused temporaries (teachers/categorical.py) give the draws of the float
path they replace, bit for bit: ``fill_bits`` is ``torch.rand``'s stream scaled by 2^24, ``sample_from_bits`` is
``sample_from_uniforms`` of the same uniforms (at every cell's boundaries, and over all 2^24 uniforms in the slow
tier), and ``sample_into`` is ``sample``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from teachers.categorical import AliasTable, AliasWork, BlockRNG, fill_bits, fill_uniform
from teachers.ladder import Ladder
from teachers.sampling import sampling_plan


def rows_with_edges(m: int, rows: int, seed: int) -> np.ndarray:
    """Dirichlet rows, one with exact zeros, one one-hot and one uniform row (thresholds 0 and 1 exactly)."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(m, 0.5), size=rows)
    p[0, rng.permutation(m)[: m // 2]] = 0.0
    p[1] = np.eye(m)[rng.integers(m)]
    p[2] = 1.0 / m
    return p / p.sum(1, keepdims=True)


def boundary_bits(table: AliasTable) -> tuple[torch.Tensor, torch.Tensor]:
    """``(bits, row)``: for every cell k of every row, the integers at the cell's ends and around its cut
    ``ceil(cut 2^shift)`` (where the float draw switches from k to the alias), clipped into the cell."""
    m, shift = table.num_events, 24 - (table.num_events.bit_length() - 1)
    cut = table.cut.double().reshape(table.rows, m)
    lo = (torch.arange(m, dtype=torch.float64) * 2.0**shift).expand(table.rows, m)
    t = torch.ceil(cut * 2.0**shift)
    cand = torch.stack([lo, lo + 1, t - 2, t - 1, t, t + 1, lo + 2.0**shift - 2, lo + 2.0**shift - 1], -1)
    cand = torch.minimum(torch.maximum(cand, lo[..., None]), (lo + 2.0**shift - 1)[..., None])
    row = torch.arange(table.rows)[:, None, None].expand(cand.shape)
    return cand.reshape(-1).to(torch.int32), row.reshape(-1)


@pytest.mark.parametrize("m", [2, 4, 16, 64, 256])
def test_integer_draws_are_the_float_draws_at_every_cut(m: int) -> None:
    table = AliasTable(rows_with_edges(m, 6, m))
    assert table.packed is not None
    bits, row = boundary_bits(table)
    extra = torch.randint(0, 2**24, (20_000,), generator=torch.Generator().manual_seed(m), dtype=torch.int32)
    bits, row = torch.cat([bits, extra]), torch.cat([row, torch.arange(20_000) % table.rows])
    u = bits.double().mul_(2.0**-24).float()  # exact: bits < 2^24
    assert torch.equal(u.double() * 2**24, bits.double())
    want = table.sample_from_uniforms(u, row)
    got = table.sample_from_bits(bits.clone(), row)
    assert got.dtype == want.dtype == torch.uint8
    assert torch.equal(got, want)
    # the boundary values do reach both outcomes of a cell whose threshold is strictly between 0 and 1
    assert len(torch.unique(want)) > 1


@pytest.mark.slow
@pytest.mark.parametrize("m", [2, 16, 256])
def test_integer_draws_are_the_float_draws_over_all_uniforms(m: int) -> None:
    table = AliasTable(rows_with_edges(m, 3, 10 + m))
    bits = torch.arange(2**24, dtype=torch.int32)
    for r in range(table.rows):
        row = torch.full((2**24,), r, dtype=torch.int32)
        want = table.sample_from_uniforms(bits.double().mul_(2.0**-24).float(), row)
        assert torch.equal(table.sample_from_bits(bits.clone(), row), want)


def test_tables_without_integer_draws_say_so() -> None:
    for m in (1, 3, 300):  # one event, not a power of two, float64 uniforms
        table = AliasTable(np.full((2, m), 1.0 / m))
        assert table.packed is None
        with pytest.raises(ValueError, match="power of two"):
            table.sample_from_bits(torch.zeros(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int64))


def test_fill_bits_is_torch_rand_scaled() -> None:
    """The premise of the integer path: ``random_(0, 2^24)`` consumes the CPU generator as ``rand`` does, and
    gives ``rand * 2^24``, filled whole or piece by piece (the sampler fills block by block)."""
    shape = (3 * 1000, 37)
    u = torch.rand(shape, generator=torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    bits = fill_bits(torch.empty(shape, dtype=torch.int32), g)
    assert torch.equal(bits.double(), u.double() * 2**24)
    g2 = torch.Generator().manual_seed(5)
    torch.rand(shape, generator=g2)
    assert torch.equal(g.get_state(), g2.get_state())  # the same numbers consumed
    gens = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
    rng = BlockRNG(gens, [1000] * 3)
    want = torch.cat([torch.rand(1000, 37, generator=torch.Generator().manual_seed(s)) for s in (1, 2, 3)])
    got = fill_bits(torch.empty(shape, dtype=torch.int32), rng)
    assert torch.equal(got.double(), want.double() * 2**24)
    rng = BlockRNG([torch.Generator().manual_seed(s) for s in (1, 2, 3)], [1000] * 3)
    assert torch.equal(fill_uniform(torch.empty(shape), rng), want)


@pytest.mark.parametrize("m", [1, 2, 3, 16, 256, 300])
def test_sample_into_is_sample(m: int) -> None:
    """The sampler's path (integers where the table has them, reused temporaries, a strided output) draws what
    ``sample`` draws from the same generator."""
    table = AliasTable(rows_with_edges(m, 5, 2 * m) if m > 2 else np.full((5, m), 1.0 / m))
    row = torch.randint(0, 5, (300, 7), generator=torch.Generator().manual_seed(1)).to(torch.int32)
    want = table.sample(row, torch.Generator().manual_seed(9))
    buf = torch.full((300, 11), 7, dtype=table.event_dtype)
    work = AliasWork()
    for _ in range(2):  # the second time on the same temporaries
        got = table.sample_into(buf[:, 2:9], row, torch.Generator().manual_seed(9), work)
        assert got.data_ptr() == buf[:, 2:9].data_ptr()
        assert torch.equal(buf[:, 2:9], want)
        assert (buf[:, :2] == 7).all() and (buf[:, 9:] == 7).all()
    rng = BlockRNG([torch.Generator().manual_seed(s) for s in (4, 5, 6)], [100] * 3)
    want = table.sample(row, BlockRNG([torch.Generator().manual_seed(s) for s in (4, 5, 6)], [100] * 3))
    assert torch.equal(table.sample_into(torch.empty_like(want), row, rng, work), want)


def test_alias_work_reuses_its_buffers() -> None:
    work = AliasWork()
    a = work.get("x", 100, torch.int32)
    assert a.shape == (100,) and a.dtype == torch.int32
    assert work.get("x", 60, torch.int32).data_ptr() == a.data_ptr()  # a smaller request: the same memory
    assert work.get("x", 100, torch.float32).data_ptr() != a.data_ptr()  # another dtype: its own buffer
    b = work.get("x", 200, torch.int32)  # grown
    assert b.shape == (200,) and work.get("x", 150, torch.int32).data_ptr() == b.data_ptr()


@pytest.mark.parametrize(("depth", "branching", "events"), [(1, 2, 256), (1, 4, 256), (3, 4, 16), (2, 3, 5)])
def test_tree_rows_repeat_each_parent_event(depth: int, branching: int, events: int) -> None:
    """A tree level's table rows, ``i * m + z[parent(i)]``, whether built by repeating events in 16-bit lanes
    (2 or 4 children, events up to 255) or by the broadcast add (other branchings)."""
    lad = Ladder.random(depth=depth, branching=branching, events=events, seed=3)
    plan = sampling_plan(lad)
    buf = torch.randint(0, events, (50, lad.total_regions), generator=torch.Generator().manual_seed(0))
    buf = buf.to(lad.event_dtype())
    for level in range(1, depth + 1):
        parents = torch.tensor([p for (p,) in lad.parents[level]]) + lad.level_offsets[level - 1]
        want = torch.arange(lad.num_regions[level]) * events + buf[:, parents].long()
        got = plan.levels[level].rows(buf, AliasWork())
        assert got.dtype == torch.int32 and torch.equal(got.long(), want)


def test_one_hot_gathers_identity_rows() -> None:
    """``teachers.emission.one_hot`` (the leaves of every streamed batch): F.one_hot's values and a clear error for
    an event out of range (the meta device: tests/test_meta_training.py's batches)."""
    from teachers.emission import one_hot

    z = torch.randint(0, 16, (64, 256), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    assert torch.equal(one_hot(z, 16, torch.float32), torch.nn.functional.one_hot(z.long(), 16).float())
    assert one_hot(z[:0], 16, torch.float32).shape == (0, 256, 16)
    with pytest.raises(RuntimeError, match=r"z: events outside \[0, 16\)"):
        one_hot(torch.tensor([[3, 16]]), 16)
    with pytest.raises(RuntimeError, match="z: events outside"):
        one_hot(torch.tensor([-1]), 16)
