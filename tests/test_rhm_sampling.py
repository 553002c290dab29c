"""Sampling ladders whose children are drawn jointly (an RHM): the block-seeded sampler against the enumeration of
every derivation, sampling without replacement, disjoint splits, the authors' index of a datum, synonym exchange
and stores."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch
from scipy import stats

import teachers.derivations as der
from teachers import Ladder, sample_ladder
from teachers.derivations import (
    derivation_index,
    derivation_rows,
    enumerate_derivations,
    exchange_synonyms,
    index_derivations,
    num_derivations,
    row_derivations,
    sample_derivations,
    sample_distinct,
    train_test_split,
)
from teachers.sampling import BLOCK_SIZE

DATA = Path(__file__).parent / "data" / "rhm_pcsl_rules.json"


def _row_law(rows: torch.Tensor, probs: torch.Tensor) -> dict[tuple, float]:
    """The law of whole event rows: the enumeration's probabilities summed over derivations giving one row."""
    law: dict[tuple, float] = {}
    for row, p in zip(map(tuple, rows.long().tolist()), probs.tolist(), strict=True):
        law[row] = law.get(row, 0.0) + p
    return law


def _check_against(law: dict[tuple, float], rows: torch.Tensor) -> None:
    """Sampled rows against an exact law: no row outside its support, every row's frequency within 5 sigma
    (a tolerance like 1/sqrt(N)), and a chi-square p-value above 1e-3 (fixed seeds)."""
    n = rows.shape[0]
    uniq, counts = torch.unique(rows.long(), dim=0, return_counts=True)
    seen = dict(zip(map(tuple, uniq.tolist()), counts.tolist(), strict=True))
    assert set(seen) <= {k for k, p in law.items() if p > 0}
    keys = [k for k, p in law.items() if p > 0]
    p = torch.tensor([law[k] for k in keys], dtype=torch.float64)
    f = torch.tensor([seen.get(k, 0) for k in keys], dtype=torch.float64)
    assert ((f / n - p).abs() <= 5 * (p * (1 - p) / n).sqrt() + 1e-12).all()
    assert stats.chisquare(f.numpy(), (p * n).numpy()).pvalue > 1e-3


def _mixed_ladder() -> Ladder:
    """Non-uniform prior, per-region productions with a padding production of probability 0, and a level of
    independent children below."""
    g = torch.Generator().manual_seed(5)
    rules = torch.randint(0, 3, (1, 2, 3, 2), generator=g)  # R=1 root, 2 classes, K=3 productions, b=2
    probs = torch.tensor([[[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]], dtype=torch.float64)
    table = torch.tensor([[0.9, 0.1], [0.4, 0.6], [0.25, 0.75]], dtype=torch.float64)
    return Ladder((2, 2), (2, 3, 2), prior=[0.3, 0.7], tables=[None, table], productions=[(rules, probs), None])


def _all_joint_ladder() -> Ladder:
    g = torch.Generator().manual_seed(2)
    r0 = torch.randint(0, 3, (2, 3, 2), generator=g)  # shared: 2 classes, K=3, b=2 children of 3 events
    p0 = torch.tensor([[0.1, 0.6, 0.3], [0.0, 0.5, 0.5]], dtype=torch.float64)
    r1 = torch.randint(0, 2, (2, 3, 2, 2), generator=g)  # per region: R=2, 3 events, K=2, b=2 of 2 events
    p1 = torch.rand(2, 3, 2, generator=g, dtype=torch.float64)
    return Ladder((2, 2), (2, 3, 2), prior=[0.45, 0.55], tables=[None, None],
                  productions=[(r0, p0), (r1, p1 / p1.sum(-1, keepdim=True))])


# ---------------------------------------------------------------- the sampler, with replacement

@pytest.mark.parametrize("ladder", [Ladder.rhm(3, 2, 2, 2, 2, seed=1), Ladder.rhm(4, 2, 2, 3, 2, seed=4),
                                    _all_joint_ladder()], ids=["rhm-s2", "rhm-s3", "weighted"])
def test_sampled_rows_follow_the_enumeration(ladder: Ladder) -> None:
    every, probs = enumerate_derivations(ladder)
    assert abs(float(probs.sum()) - 1) < 1e-12
    _check_against(_row_law(every.z, probs), sample_ladder(ladder, 20_000, seed=7).z)


def test_a_joint_level_above_independent_children_brute_force() -> None:
    lad = _mixed_ladder()
    prods, table = lad.productions[0], lad.tables[1]
    law = {}
    for y, (a, b), leaves in itertools.product(range(2), itertools.product(range(3), repeat=2),
                                               itertools.product(range(2), repeat=4)):
        joint = sum(float(p) for k, p in enumerate(prods.probs[0, y]) if prods.rules[0, y, k].tolist() == [a, b])
        leaf = torch.prod(torch.stack([table[i, [a, a, b, b][i], v] for i, v in enumerate(leaves)]))
        law[(y, a, b, *leaves)] = [0.3, 0.7][y] * joint * float(leaf)
    assert abs(sum(law.values()) - 1) < 1e-12
    _check_against(law, sample_ladder(lad, 20_000, seed=3).z)


def test_rhm_rows_are_the_same_bytes_whatever_the_chunk_size_or_shard() -> None:
    lad = Ladder.rhm(8, 4, 2, 2, 3, seed=2)
    n = 3 * BLOCK_SIZE + 17
    full = sample_ladder(lad, n, seed=11)
    assert torch.equal(sample_ladder(lad, n, seed=11, chunk_size=2 * BLOCK_SIZE).z, full.z)
    parts = [sample_ladder(lad, n, seed=11, shard=(i, 3), chunk_size=BLOCK_SIZE) for i in range(3)]
    assert torch.equal(torch.cat([p.z for p in parts]), full.z)
    row_derivations(lad, full.z)  # every row is a derivation of the rules (raises otherwise)


# ---------------------------------------------------------------- the authors' index of a datum

def test_index_to_rows_matches_the_authors_code() -> None:
    """x, y of tests/data/rhm_pcsl_rules.json were drawn by pcsl-epfl/hierarchy-learning's sample_data_from_paths
    for the given indices (P_max up to 7e7); rows -> index inverts it."""
    for case in json.loads(DATA.read_text())["configs"]:
        c = case["params"]
        lad = Ladder.rhm(c["v"], c["nc"], c["m"], c["s"], c["L"], seed=c["seed"], rules="pcsl")
        assert num_derivations(lad) == case["P_max"]
        z = derivation_rows(lad, index_derivations(lad, case["indices"])).long()
        assert z[:, lad.level_offsets[-2]:].tolist() == case["x"] and z[:, 0].tolist() == case["y"]
        assert derivation_index(lad, row_derivations(lad, z)).tolist() == case["indices"]


def test_index_round_trip_past_int64() -> None:
    lad = Ladder.rhm(64, 64, 64, 2, 5)
    p_max = num_derivations(lad)
    assert p_max == lad.rhm_params.num_data == 2**192
    idx = [0, 1, p_max - 1, 2**100 + 12345, 3 * 2**186 + 7]
    digits = index_derivations(lad, idx)
    assert digits.shape == (5, 32) and digits[2].tolist() == [63] * 32 and digits[4, 0] == 3
    assert derivation_index(lad, row_derivations(lad, derivation_rows(lad, digits))) == idx


# ---------------------------------------------------------------- enumeration

def test_enumeration_lists_every_derivation_once_equally_likely_on_an_rhm() -> None:
    lad = Ladder.rhm(4, 2, 2, 2, 2, seed=3)
    every, probs = enumerate_derivations(lad)
    assert len(every) == num_derivations(lad) == 2 * 2**3
    assert torch.allclose(probs, torch.full_like(probs, 1 / 16), rtol=0, atol=1e-15)
    assert len(torch.unique(every.leaves, dim=0)) == 16  # unambiguous rules: distinct inputs
    assert derivation_index(lad, row_derivations(lad, every.z)).tolist() == list(range(16))


def test_enumeration_probabilities_brute_force() -> None:
    lad = _all_joint_ladder()
    every, probs = enumerate_derivations(lad)
    p0, p1 = lad.productions[0], lad.productions[1]
    for i in range(len(every)):
        y, k0, ka, kb = index_derivations(lad, [i])[0].tolist()
        z = every.z[i].long().tolist()
        want = [0.45, 0.55][y] * float(p0.probs[y, k0] * p1.probs[0, z[1], ka] * p1.probs[1, z[2], kb])
        assert abs(float(probs[i]) - want) < 1e-15
        assert z[1:3] == p0.rules[y, k0].tolist() and z[3:5] == p1.rules[0, z[1], ka].tolist()


# ---------------------------------------------------------------- without replacement

@pytest.mark.parametrize("permute", [True, False], ids=["randperm", "blocks"])
def test_distinct_draws_are_distinct_uniform_and_a_fixed_stream(permute: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    if not permute:
        monkeypatch.setattr(der, "PERMUTE_MAX", 0)  # the block stream of a large P_max, on a small ladder
        monkeypatch.setattr(der, "DRAW_BLOCK", 64)
    lad = Ladder.rhm(3, 2, 2, 2, 2, seed=1)  # P_max = 16
    everything = sample_derivations(lad, 16, seed=4)
    assert sorted(derivation_index(lad, everything).tolist()) == list(range(16))
    assert torch.equal(sample_derivations(lad, 5, seed=4), everything[:5])  # a prefix of one order
    # each derivation equally likely to be among the first 8: inclusion counts over 250 seeds
    counts = torch.zeros(16)
    for seed in range(250):
        counts[derivation_index(lad, sample_derivations(lad, 8, seed))] += 1
    assert stats.chisquare(counts.numpy(), torch.full((16,), 250 * 8 / 16).numpy()).pvalue > 1e-3


def test_distinct_rows_of_a_large_rhm() -> None:
    lad = Ladder.rhm(8, 8, 4, 2, 4, seed=0)  # P_max = 8 * 4^15 = 2^33: the block stream
    s = sample_distinct(lad, 10_000, seed=2)
    assert len(s) == 10_000 and len(torch.unique(s.leaves, dim=0)) == 10_000
    row_derivations(lad, s.z)
    assert torch.equal(sample_distinct(lad, 4_000, seed=2).z, s.z[:4_000])


def test_train_and_test_are_disjoint_and_nested() -> None:
    lad = Ladder.rhm(4, 2, 2, 2, 3, seed=0)  # P_max = 256
    train, test = train_test_split(lad, 200, 56, seed=9)
    assert (len(train), len(test)) == (200, 56)
    rows = torch.cat([train.leaves, test.leaves])
    assert len(torch.unique(rows, dim=0)) == 256  # disjoint, and together every datum
    small, test2 = train_test_split(lad, 50, 56, seed=9)
    assert torch.equal(test2.z, test.z) and torch.equal(small.z, train.z[:50])
    other, _ = train_test_split(lad, 50, 56, seed=10)
    assert not torch.equal(other.z, small.z)
    assert train.inputs().shape == (200, 8, 4) and torch.equal(train.y, train.z[:, 0].long())


def test_noisy_inputs_are_drawn_per_row_from_the_seed() -> None:
    lad = Ladder.rhm(8, 4, 2, 2, 4, seed=0, emission="gaussian", sigma=0.5)  # P_max = 2^17
    a = sample_distinct(lad, 5000, seed=1)
    b = sample_distinct(lad, 4200, seed=1)
    assert a.x is not None and b.x is not None and torch.equal(a.x[:4200], b.x)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: sample_derivations(Ladder.rhm(3, 2, 2, 2, 2), 17), "at most P_max = 16"),
    (lambda: train_test_split(Ladder.rhm(3, 2, 2, 2, 2), 10, 7), "only P_max = 16 exist"),
    (lambda: train_test_split(Ladder.rhm(3, 2, 2, 2, 2), 0, 7), "num_train: expected a positive"),
    (lambda: sample_derivations(_all_joint_ladder(), 2), "equally likely"),
    (lambda: sample_derivations(_mixed_ladder(), 2), "levels \\[1\\] do not"),
    (lambda: sample_derivations(Ladder.default(), 2), "draws its children jointly"),
    (lambda: enumerate_derivations(Ladder.rhm(4, 2, 2, 2, 3), max_rows=100), "256 derivations is more than"),
    (lambda: enumerate_derivations(Ladder.rhm(3, 2, 2, 2, 2, emission="gaussian", sigma=0.1)), "draws x at random"),
    (lambda: index_derivations(Ladder.rhm(3, 2, 2, 2, 2), [16]), "in \\[0, P_max = 16\\)"),
    (lambda: derivation_rows(Ladder.rhm(3, 2, 2, 2, 2), torch.tensor([[0, 2, 0, 0]])), "digits\\[0, 1\\]"),
    (lambda: derivation_rows(Ladder.rhm(3, 2, 2, 2, 2), torch.zeros(2, 3)), "shape \\(n, 4\\)"),
    (lambda: row_derivations(Ladder.rhm(3, 2, 2, 2, 2), torch.zeros(1, 7, dtype=torch.long)), "not a derivation"),
    (lambda: row_derivations(Ladder.rhm(3, 2, 2, 2, 2), torch.tensor([[0, 1, 3, 0, 0, 0, 0]])),
     "z\\[0, 2\\]: expected an event in 0..2"),
    (lambda: index_derivations(Ladder.rhm(3, 2, 2, 2, 2), torch.tensor([3, -1])), "got -1..3"),
    (lambda: exchange_synonyms(Ladder.rhm(3, 2, 2, 2, 2), torch.zeros(1, 7), 3), "level: expected an integer"),
])
def test_bad_arguments_are_named(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------- synonym exchange

def test_exchange_keeps_the_levels_above_and_redraws_below_from_the_productions() -> None:
    lad = Ladder.rhm(4, 2, 2, 2, 3, seed=5)
    every, probs = enumerate_derivations(lad)
    off = lad.level_offsets
    z0 = every.z[37]
    n = 8000
    out = exchange_synonyms(lad, z0.expand(n, -1).clone(), 1, seed=3)
    assert (out[:, : off[2]] == z0[: off[2]]).all()
    # the law of the redrawn rows: the enumeration restricted to the kept levels, renormalised
    keep = (every.z[:, : off[2]] == z0[: off[2]]).all(1)
    law = _row_law(every.z[keep], probs[keep] / probs[keep].sum())
    _check_against(law, out)
    assert torch.equal(exchange_synonyms(lad, every.z, lad.depth, seed=1), every.z)


def test_exchange_of_a_sample_is_row_by_row() -> None:
    lad = Ladder.rhm(8, 4, 2, 2, 3, seed=2)
    s = sample_ladder(lad, BLOCK_SIZE + 100, seed=0)
    e = exchange_synonyms(lad, s, 0, seed=5)
    assert e.meta["exchanged_below"] == 0 and torch.equal(e.y, s.y)
    assert (e.leaves != s.leaves).any(1).float().mean() > 0.9  # a fresh datum of the same class
    head = exchange_synonyms(lad, s.z[:50], 0, seed=5)
    assert torch.equal(head, e.z[:50])
    row_derivations(lad, e.z)


def test_exchange_on_independent_children() -> None:
    lad = Ladder.random(depth=3, seed=0)
    s = sample_ladder(lad, 300, seed=0)
    e = exchange_synonyms(lad, s, 1, seed=0)
    off = lad.level_offsets
    assert torch.equal(e.z[:, : off[2]], s.z[:, : off[2]]) and not torch.equal(e.z, s.z)


# ---------------------------------------------------------------- stores

def test_an_rhm_store_holds_the_sampled_rows(tmp_path: Path) -> None:
    from teachers.chunked import sample_to_store
    from teachers.store_reader import open_dataset

    lad = Ladder.rhm(8, 2, 2, 2, 3, seed=1)
    path = sample_to_store(lad, BLOCK_SIZE + 10, tmp_path / "rhm.zarr", seed=3, chunk_rows=BLOCK_SIZE)
    data = open_dataset(path)
    assert data.ladder.fingerprint() == lad.fingerprint()
    z = torch.cat([c.z for c in data.iter_chunks()])
    assert torch.equal(z, sample_ladder(lad, BLOCK_SIZE + 10, seed=3).z)
