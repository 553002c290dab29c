"""Sampling a ladder: reproducibility, sharding, the Pyro models (which are the sampler),
conditioning, emissions, and bad inputs."""

from __future__ import annotations

import math

import numpy as np
import pyro
import pyro.poutine.runtime as pyro_runtime
import pytest
import torch
import torch.nn.functional as F
from pyro import poutine
from pyro.infer import Predictive
from scipy import stats

from teachers import BLOCK_SIZE, GaussianEmission, Ladder, LadderModel, LadderSample, sample_ladder
from teachers.categorical import BlockRNG
from teachers.pyro_sites import PointMassCategorical
from teachers.sampling import block_generator, parse_shard


def parents_by_hand(ladder: Ladder, z: np.ndarray) -> np.ndarray:
    """Bottom-up: recompute every non-leaf event of ``z`` ``(N, total_regions)`` from the leaves,
    with the lookup convention of the ladder docstring (first child most significant)."""
    out = z.astype(np.int64).copy()
    off, b, m = ladder.level_offsets, ladder.branching, ladder.events
    for l in range(ladder.depth - 1, -1, -1):
        lookup = ladder.lookup[l].numpy()
        for i in range(ladder.num_regions[l]):
            code = np.zeros(len(z), dtype=np.int64)
            for c in range(b[l]):
                code = code * m[l + 1] + out[:, off[l + 1] + i * b[l] + c]
            out[:, off[l] + i] = lookup[i, code]
    return out


def model_with_block_rng(ladder: Ladder, n: int, seed: int, *, compact: bool = True):
    """Run LadderModel.model on the block generators that sample_ladder uses for rows [0, n)."""
    blocks = range(-(-n // BLOCK_SIZE))
    rng = BlockRNG([block_generator(seed, k) for k in blocks], [BLOCK_SIZE] * len(blocks))
    lm = LadderModel(ladder)
    vals = lm.model(rng.total, emit=not ladder.emission.derivable, generator=rng, compact=compact)
    return lm.flatten(vals)[:n], (vals["x"].reshape(rng.total, ladder.num_regions[-1], -1)[:n] if "x" in vals else None)


# ---------------------------------------------------------------------- reproducibility
def test_same_seed_same_bytes_different_seed_differs(tiny_ladder):
    a = sample_ladder(tiny_ladder, 3000, seed=5)
    b = sample_ladder(tiny_ladder, 3000, seed=5)
    c = sample_ladder(tiny_ladder, 3000, seed=6)
    assert a.z.dtype == tiny_ladder.event_dtype() and a.z.shape == (3000, tiny_ladder.total_regions)
    assert torch.equal(a.z, b.z)
    # leaf events of different streams: P(all 3000 rows agree) is astronomically small
    assert not torch.equal(a.leaves, c.leaves)
    if tiny_ladder.emission.derivable:
        assert a.x is None and c.x is None
    else:
        assert a.x.shape == (3000, tiny_ladder.num_regions[-1], tiny_ladder.emission.dim)
        assert torch.equal(a.x, b.x) and not torch.equal(a.x, c.x)


@pytest.mark.parametrize("chunk_size", [1, 100, BLOCK_SIZE, BLOCK_SIZE + 1, 3 * BLOCK_SIZE, 10**7])
def test_chunk_size_does_not_change_bytes(make_ladder, chunk_size):
    for name in ("td-gauss", "bu"):
        lad = make_ladder(name)
        ref = sample_ladder(lad, 2 * BLOCK_SIZE + 123, seed=1)
        got = sample_ladder(lad, 2 * BLOCK_SIZE + 123, seed=1, chunk_size=chunk_size)
        assert torch.equal(ref.z, got.z)
        assert (ref.x is None and got.x is None) or torch.equal(ref.x, got.x)


@pytest.mark.parametrize("n", [1, 2, 100, BLOCK_SIZE, BLOCK_SIZE + 1, 3 * BLOCK_SIZE - 7])
@pytest.mark.parametrize("shards", [1, 2, 3, 7])
def test_shards_concatenate_to_unsharded_sample(make_ladder, n, shards):
    lad = make_ladder("td-gauss")
    full = sample_ladder(lad, n, seed=9)
    parts = [sample_ladder(lad, n, seed=9, shard=f"{i}/{shards}") for i in range(shards)]
    assert torch.equal(torch.cat([p.z for p in parts]), full.z)
    assert torch.equal(torch.cat([p.x for p in parts]), full.x)
    for i, p in enumerate(parts):
        assert p.start == i * n // shards and p.total == n and len(p) == (i + 1) * n // shards - i * n // shards
        assert p.meta["shard"] == [i, shards] and p.meta["block_size"] == BLOCK_SIZE
    # tuple form is the same shard
    assert torch.equal(sample_ladder(lad, n, seed=9, shard=(shards - 1, shards)).z, parts[-1].z)


def test_shards_bottomup_with_small_chunks(make_ladder):
    lad = make_ladder("bu-uneven")
    n = 2 * BLOCK_SIZE + 10
    full = sample_ladder(lad, n, seed=2)
    parts = [sample_ladder(lad, n, seed=2, shard=(i, 5), chunk_size=7) for i in range(5)]
    assert torch.equal(torch.cat([p.z for p in parts]), full.z)


def test_sample_equals_pyro_model_with_same_block_rng(tiny_ladder):
    """The Pyro model *is* the sampler: same generators, same draws."""
    n = BLOCK_SIZE + 300
    s = sample_ladder(tiny_ladder, n, seed=4)
    z, x = model_with_block_rng(tiny_ladder, n, seed=4)
    assert torch.equal(z.to(s.z.dtype), s.z)
    if x is not None:
        assert torch.equal(x, s.x)
    # compact=False draws the same events in int64
    z64, _ = model_with_block_rng(tiny_ladder, n, seed=4, compact=False)
    assert z64.dtype == torch.int64 and torch.equal(z64, s.z.long())


def test_sampling_under_float64_default(make_ladder, float64):
    lad = make_ladder("td-gauss")
    s = sample_ladder(lad, 1000, seed=3)
    assert s.x.dtype == torch.float64
    torch.set_default_dtype(torch.float32)
    ref = sample_ladder(lad, 1000, seed=3)
    assert torch.equal(s.z, ref.z) and torch.equal(s.x, ref.x.double())


def test_block_generator_streams():
    a = torch.rand(5, generator=block_generator(0, 0))
    assert torch.equal(a, torch.rand(5, generator=block_generator(0, 0)))
    assert not torch.equal(a, torch.rand(5, generator=block_generator(0, 1)))
    assert not torch.equal(a, torch.rand(5, generator=block_generator(1, 0)))


# ---------------------------------------------------------------------- content of a sample
def test_bottomup_parents_equal_lookup_of_children(tiny_bottomup):
    s = sample_ladder(tiny_bottomup, 5000, seed=0)
    z = s.z.numpy()
    np.testing.assert_array_equal(parents_by_hand(tiny_bottomup, z), z)


def test_events_in_range_and_zero_probability_events_never_drawn(make_ladder):
    lad = make_ladder("td-zeros")
    s = sample_ladder(lad, 20_000, seed=1)
    off = lad.level_offsets
    for l in range(lad.depth + 1):
        assert int(s.events(l).max()) < lad.events[l] and int(s.events(l).min()) >= 0
    # every (parent, child) pair drawn has positive probability in the table
    for l in range(1, lad.depth + 1):
        par = s.z[:, off[l - 1]:off[l]][:, lad.parent_index(l)].long()
        child = s.events(l)
        p = lad.tables[l - 1][torch.arange(lad.num_regions[l]), par, child]
        assert (p > 0).all()


def test_large_event_count_uses_wide_dtype():
    lad = Ladder.random(depth=1, branching=2, events=[3, 300], seed=0)
    s = sample_ladder(lad, 5000, seed=0)
    assert s.z.dtype == torch.int16
    assert int(s.leaves.max()) < 300 and len(s.leaves.unique()) > 200


def test_ladder_sample_accessors(make_ladder):
    lad = make_ladder("td-uneven")
    s = sample_ladder(lad, 50, seed=0)
    assert len(s) == 50 and s.y.dtype == torch.int64 and torch.equal(s.y, s.z[:, 0].long())
    assert torch.equal(s.events(1), s.z[:, 1:4].long()) and torch.equal(s.leaves, s.z[:, 4:].long())
    x = s.inputs()
    assert x.dtype == torch.float32 and torch.equal(x, F.one_hot(s.leaves, 2).float())
    assert torch.equal(s.inputs(slice(3, 5), dtype=torch.float64), F.one_hot(s.leaves[3:5], 2).double())
    assert torch.equal(s.inputs(torch.tensor([7, 2])), x[[7, 2]])
    for bad in (-1, 3):
        with pytest.raises(ValueError, match=r"^level: expected an integer in 0\.\.2"):
            s.events(bad)
    t = s.to("cpu")
    assert torch.equal(t.z, s.z) and t.seed == s.seed and t.meta == s.meta and t.meta is not s.meta


def test_gaussian_emission_statistics():
    """x_r | z_r = k ~ N(mu[r, k], sigma_r^2 I).  Per (region, event) cell with n samples:
    each coordinate mean within 5 sigma / sqrt(n) (two-sided normal tail 5.7e-7), pooled
    variance s^2 with dof = n*dim - dim within 5 sqrt(2/dof) sigma^2 (chi-square normal
    approximation); the standardized residuals pass a KS test against N(0, 1)."""
    em = GaussianEmission.random_means(4, 3, 5, sigma=torch.tensor([0.3, 0.5, 1.0, 2.0]),
                                       generator=torch.Generator().manual_seed(0))
    lad = Ladder.random(depth=2, branching=2, events=[2, 3, 3], seed=3, emission=em)
    n = 30_000
    s = sample_ladder(lad, n, seed=11)
    x, leaves = s.x.double(), s.leaves
    resid = torch.empty_like(x)
    for r in range(4):
        sigma = em.sigma[r].item()
        for k in range(3):
            sel = leaves[:, r] == k
            cnt = int(sel.sum())
            assert cnt > 500
            xs = x[sel, r]  # (cnt, dim)
            mean = xs.mean(0)
            assert ((mean - em.means[r, k]).abs() < 5 * sigma / math.sqrt(cnt)).all()
            dof = cnt * 5 - 5
            s2 = (xs - mean).pow(2).sum().item() / dof
            assert abs(s2 / sigma**2 - 1) < 5 * math.sqrt(2 / dof)
            resid[sel, r] = (xs - em.means[r, k]) / sigma
    assert stats.kstest(resid.reshape(-1).numpy(), "norm").pvalue > 1e-6


def test_leaf_events_outside_the_ladder_are_refused_naming_z():
    lad = Ladder.random(depth=2, branching=2, events=[2, 3, 2], seed=0)
    s = sample_ladder(lad, 8, 0)
    z = s.z.clone()
    z[1, lad.level_offsets[-2] + 3] = 5
    with pytest.raises(ValueError, match=r"^z: level 2 \(the leaves\), region 3 holds event 5 \(row 1\), outside "
                                         r"the allowed range \[0, 2\)"):
        LadderSample(lad, z).inputs()
    leaves = s.leaves.clone()
    leaves[0, 2] = 2
    for emission in (lad.emission, GaussianEmission.around_one_hot(4, 2, 0.5)):
        with pytest.raises(ValueError, match=r"^z: leaf region 2 holds event 2 \(row 0\), outside the allowed "
                                             r"range \[0, 2\)"):
            emission.sample(leaves)
        with pytest.raises(ValueError, match=r"^z: expected leaf events of shape \(N, 4\), got \(8, 3\)"):
            emission.sample(leaves[:, :3])
    assert torch.equal(LadderSample(lad, s.z).inputs(), s.inputs())  # in range: unchanged


def test_fully_informative_onehot_inputs_are_derived(make_ladder):
    lad = make_ladder("fully-informative")
    s = sample_ladder(lad, 100, seed=0)
    assert s.x is None and torch.equal(s.inputs().argmax(-1), s.leaves)


# ---------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (dict(num_examples=0), ValueError, r"^num_examples: expected a positive integer, got 0"),
        (dict(num_examples=-3), ValueError, r"^num_examples: expected a positive integer"),
        (dict(num_examples=10.0), ValueError, r"^num_examples: expected a positive integer, got 10\.0"),
        (dict(num_examples=True), ValueError, r"^num_examples: expected a positive integer"),
        (dict(seed=-1), ValueError, r"^seed: expected a non-negative integer, got -1"),
        (dict(seed=1.5), ValueError, r"^seed: expected a non-negative integer"),
        (dict(seed="0"), ValueError, r"^seed: expected a non-negative integer"),
        (dict(shard="3/2"), ValueError, r"^shard: expected 0 <= i < n, got 3/2"),
        (dict(shard="2/2"), ValueError, r"^shard: expected 0 <= i < n, got 2/2"),
        (dict(shard="-1/2"), ValueError, r"^shard: expected 0 <= i < n"),
        (dict(shard="0/0"), ValueError, r"^shard: expected 0 <= i < n, got 0/0"),
        (dict(shard="a/b"), ValueError, r"^shard: expected 'i/n' with integers, got 'a/b'"),
        (dict(shard="1/2/3"), ValueError, r"^shard: expected 'i/n' with integers"),
        (dict(shard="1"), ValueError, r"^shard: expected 'i/n' with integers"),
        (dict(shard=(1,)), ValueError, r"^shard: expected \(i, n\)"),
        (dict(shard=3), ValueError, r"^shard: expected \(i, n\), got 3"),
        (dict(chunk_size=0), ValueError, r"^chunk_size: expected a positive integer, got 0"),
        (dict(chunk_size=-5), ValueError, r"^chunk_size: expected a positive integer"),
        (dict(chunk_size=2.5), ValueError, r"^chunk_size: expected a positive integer"),
    ],
)
def test_sample_ladder_bad_inputs(kwargs, exc, match):
    lad = Ladder.random(depth=1, seed=0)
    kw = dict(num_examples=10, seed=0)
    kw.update(kwargs)
    with pytest.raises(exc, match=match):
        sample_ladder(lad, **kw)


def test_sample_ladder_rejects_non_ladder():
    with pytest.raises(TypeError, match=r"^ladder: expected a Ladder, got dict"):
        sample_ladder({"kind": "random"}, 10)


def test_parse_shard():
    assert parse_shard(None) == (0, 1)
    assert parse_shard("2/5") == (2, 5) and parse_shard((0, 1)) == (0, 1) and parse_shard(" 1/ 3") == (1, 3)
    assert parse_shard(np.array([1, 2])) == (1, 2)


def test_numpy_integers_are_accepted():
    lad = Ladder.random(depth=1, seed=0)
    a = sample_ladder(lad, np.int64(100), seed=np.uint32(3), chunk_size=np.int32(10))
    assert torch.equal(a.z, sample_ladder(lad, 100, seed=3).z)


def test_library_leaves_default_dtype_alone(make_ladder):
    from inference.posterior import posterior
    from teachers.statistics import empirical_statistics, exact_statistics

    lad = make_ladder("td-gauss")
    s = sample_ladder(lad, 100, seed=0)
    exact_statistics(lad), empirical_statistics(lad, s.z), posterior(lad, s.x, marginals=True)
    assert torch.get_default_dtype() == torch.float32


# ---------------------------------------------------------------------- the Pyro models
def test_trace_sites_and_shapes(tiny_ladder):
    lad = tiny_ladder
    d = lad.depth
    lm = LadderModel(lad)
    n = 6
    tr = poutine.trace(lm.model).get_trace(n)
    names = [k for k, v in tr.nodes.items() if v["type"] == "sample" and k.startswith(("z_", "x"))]
    assert sorted(names) == sorted([f"z_{l}" for l in range(d + 1)] + ["x"])
    for l in range(d + 1):
        site = tr.nodes[f"z_{l}"]
        want = (n, *lad.branching[:l], *([1] * (d - l)))
        assert tuple(site["value"].shape) == want, (l, site["value"].shape)
        assert site["value"].dtype == torch.int64
        assert [f.name for f in site["cond_indep_stack"]] == ["data"] + [f"level_{k}" for k in range(1, l + 1)]
        assert not site["is_observed"]  # issue 37: a bottom-up parent is a latent event, not observed data
        if lad.mode == "bottomup" and l < d:  # a point mass at the lookup of its children's events
            fn = site["fn"].base_dist if hasattr(site["fn"], "base_dist") else site["fn"]
            assert isinstance(fn, PointMassCategorical) and torch.equal(fn.value, site["value"])
            other = (site["value"] + 1) % lad.events[l]
            assert (fn.log_prob(site["value"]) == 0).all() and torch.isneginf(fn.log_prob(other)).all()
    x = tr.nodes["x"]
    assert tuple(x["value"].shape) == (n, *lad.branching, lad.emission.dim)
    assert x["fn"].event_shape == (lad.emission.dim,) and tuple(x["fn"].batch_shape) == (n, *lad.branching)
    # values returned by the model are the site values, and flatten gives the dataset layout
    out = poutine.replay(lm.model, trace=tr)(n)
    flat = lm.flatten(out)
    assert flat.shape == (n, lad.total_regions)
    for l in range(d + 1):
        assert torch.equal(flat[:, lad.level_offsets[l]:lad.level_offsets[l + 1]], tr.nodes[f"z_{l}"]["value"]
                           .reshape(n, -1))
    # emit=False drops x for any emission
    tr2 = poutine.trace(lm.model).get_trace(n, emit=False)
    assert "x" not in tr2.nodes


def test_trace_log_prob_equals_hand_computed_joint(make_ladder, brute):
    """log p(z, x) from a trace of the plated model with x and leaves observed equals the
    log-density written out by hand (tables, then scipy's normal density for x)."""
    for name in ("td-gauss", "bu-gauss", "td-zeros"):
        lad = make_ladder(name)
        lm = LadderModel(lad)
        s = sample_ladder(lad, 200, seed=1)
        x = s.inputs(dtype=torch.float64)
        tr = poutine.trace(lm.model).get_trace(x=x, leaves=s.leaves)
        assert tr.nodes["x"]["is_observed"] and torch.equal(tr.nodes["x"]["value"].reshape(x.shape), x)
        z_d = tr.nodes[f"z_{lad.depth}"]
        assert z_d["is_observed"] and torch.equal(z_d["value"].reshape(200, -1), s.leaves)
        if lad.mode == "topdown":
            # the non-leaf levels were drawn from the prior: read them from the trace
            z = LadderModel(lad).flatten({f"z_{l}": tr.nodes[f"z_{l}"]["value"] for l in range(lad.depth + 1)})
        else:
            z = s.z.long()
            assert torch.equal(LadderModel(lad).flatten({f"z_{l}": tr.nodes[f"z_{l}"]["value"]
                                                         for l in range(lad.depth + 1)}), z)
        ll = brute.leaf_log_likelihood(lad, x)
        off = lad.level_offsets
        zn = z.numpy()
        with np.errstate(divide="ignore"):
            if lad.mode == "topdown":
                hand = np.log(lad.prior.numpy()[zn[:, 0]])
                for l in range(1, lad.depth + 1):
                    for i in range(lad.num_regions[l]):
                        parent = zn[:, off[l - 1] + i // lad.branching[l - 1]]
                        hand = hand + np.log(lad.tables[l - 1].numpy()[i, parent, zn[:, off[l] + i]])
            else:
                hand = sum(np.log(lad.leaf_prior.numpy()[r, zn[:, off[-2] + r]]) for r in range(lad.num_regions[-1]))
        hand = hand + sum(ll[np.arange(200), r, zn[:, off[-2] + r]] for r in range(lad.num_regions[-1]))
        tr.compute_log_prob()
        got = sum(site["log_prob"].reshape(200, -1).sum(-1) for k, site in tr.nodes.items()
                  if site["type"] == "sample" and k.startswith(("z_", "x"))).numpy()
        finite = np.isfinite(hand)
        assert (np.isfinite(got) == finite).all()
        np.testing.assert_allclose(got[finite], hand[finite], rtol=0, atol=1e-9)


def test_observed_leaves_fix_the_bottomup_parents(make_ladder):
    lad = make_ladder("bu-uneven")
    lm = LadderModel(lad)
    leaves = torch.randint(0, 2, (300, 6), generator=torch.Generator().manual_seed(0))
    out = lm.model(leaves=leaves, emit=False)
    z = lm.flatten(out)
    assert torch.equal(z[:, lad.level_offsets[-2]:], leaves)
    np.testing.assert_array_equal(parents_by_hand(lad, z.numpy()), z.numpy())


def test_topdown_observed_leaves_and_x(make_ladder):
    lad = make_ladder("td")
    lm = LadderModel(lad)
    s = sample_ladder(lad, 100, seed=2)
    out = lm.model(leaves=s.leaves, x=s.inputs())
    assert torch.equal(out[f"z_{lad.depth}"].reshape(100, -1), s.leaves)
    assert torch.equal(out["x"].reshape(100, 4, 2), s.inputs())


def test_model_input_errors(make_ladder):
    lad = make_ladder("bu")
    lm = LadderModel(lad)
    with pytest.raises(ValueError, match=r"^num_examples: give num_examples, x or leaves"):
        lm.model()
    with pytest.raises(ValueError, match=r"^num_examples: expected a positive integer, got 0"):
        lm.model(0)
    with pytest.raises(ValueError, match=r"^num_examples: inconsistent sizes"):
        lm.model(5, leaves=torch.zeros(4, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^leaves: expected shape \(N, 4\), got \(5, 3\)"):
        lm.model(leaves=torch.zeros(5, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^x: expected shape \(N, 4, 2\), got \(5, 3, 2\)"):
        lm.model(x=torch.zeros(5, 3, 2))
    with pytest.raises(TypeError, match=r"^x: expected a torch\.Tensor, got list"):
        lm.model(x=[[0.0]])
    with pytest.raises(TypeError, match=r"^leaves: expected a torch\.Tensor"):
        lm.model(leaves=[[0]])
    with pytest.raises(ValueError, match=r"^x: expected shape"):
        lm.plain_model(x=torch.zeros(5, 4, 3))


def test_model_error_does_not_leak_plates(make_ladder):
    lad = make_ladder("bu")
    lm = LadderModel(lad)
    with pytest.raises(ValueError, match=r"^BlockRNG covers 4 examples"):
        lm.model(5, generator=BlockRNG([torch.Generator()], [4]))
    leaked = list(pyro_runtime._DIM_ALLOCATOR._stack)
    try:
        lm.model(5)  # must work after a failed call
    finally:
        assert leaked == [], f"plates left allocated: {leaked}"


@pytest.mark.parametrize("name", ["td-gauss", "bu", "bu-gauss", "td-depth1"])
def test_predictive_sequential(make_ladder, name):
    lad = make_ladder(name)
    lm = LadderModel(lad)
    d = lad.depth
    pred = Predictive(lm.model, num_samples=4)(7)
    for l in range(d + 1):
        assert tuple(pred[f"z_{l}"].shape) == (4, 7, *lad.branching[:l], *([1] * (d - l)))
    assert tuple(pred["x"].shape) == (4, 7, *lad.branching, lad.emission.dim)
    z = torch.stack([lm.flatten({k: v[i] for k, v in pred.items()}) for i in range(4)])
    for l in range(d + 1):
        lv = z[..., lad.level_offsets[l]:lad.level_offsets[l + 1]]
        assert int(lv.min()) >= 0 and int(lv.max()) < lad.events[l]
    if lad.mode == "bottomup":
        np.testing.assert_array_equal(parents_by_hand(lad, z.reshape(28, -1).numpy()), z.reshape(28, -1).numpy())
    if lad.emission.kind == "onehot":
        assert torch.equal(pred["x"].argmax(-1), pred[f"z_{d}"])


def test_predictive_parallel_topdown(make_ladder):
    lad = make_ladder("td-gauss")
    lm = LadderModel(lad)
    pred = Predictive(lm.model, num_samples=5, parallel=True)(7)
    assert tuple(pred["z_0"].shape) == (5, 7, 1, 1) and tuple(pred["z_2"].shape) == (5, 7, 2, 2)
    assert tuple(pred["x"].shape) == (5, 7, 2, 2, 2)


def test_predictive_parallel_bottomup(make_ladder):
    lad = make_ladder("bu")
    lm = LadderModel(lad)
    pred = Predictive(lm.model, num_samples=5, parallel=True)(7)
    assert tuple(pred["z_0"].shape) == (5, 7, 1, 1)


@pytest.mark.parametrize("name", ["td", "bu-gauss"])
@pytest.mark.parametrize("parallel", [False, True])
def test_predictive_plain_model(make_ladder, name, parallel):
    lad = make_ladder(name)
    lm = LadderModel(lad)
    pred = Predictive(lm.plain_model, num_samples=3, parallel=parallel)(9)
    assert sorted(k for k in pred if k.startswith("z_")) == sorted(f"z_{g}" for g in range(lad.total_regions))
    for g in range(lad.total_regions):
        assert tuple(pred[f"z_{g}"].shape) == (3, 9)
    for r in range(lad.num_regions[-1]):
        assert tuple(pred[f"x_{r}"].shape) == (3, 9, lad.emission.dim)
    if lad.mode == "bottomup":
        z = torch.stack([pred[f"z_{g}"] for g in range(lad.total_regions)], -1).reshape(27, -1)
        np.testing.assert_array_equal(parents_by_hand(lad, z.numpy()), z.numpy())


def test_plain_model_and_plated_model_agree_in_distribution(make_ladder, tv):
    """Label frequencies of the plain model (torch.multinomial) and of the plated alias
    sampler both match P(y) within the TV bound for N = 20000 (delta = 1e-6)."""
    lad = make_ladder("td-uneven")
    n = 20_000
    lm = LadderModel(lad)
    pyro.set_rng_seed(3)
    y_plain = lm.plain_model(n, emit=False)["z_0"]
    y_plated = sample_ladder(lad, n, seed=3).y
    p = lad.prior
    for y in (y_plain, y_plated):
        freq = torch.bincount(y, minlength=lad.num_classes).double() / n
        assert 0.5 * (freq - p).abs().sum().item() < tv(lad.num_classes, n)


def test_a_ladder_whose_sampling_block_cannot_fit_is_refused_before_allocating(monkeypatch):
    from teachers import Ladder, sample_ladder
    from teachers.sampling import BLOCK_SIZE, WORK_BYTES_PER_CELL, check_working_memory

    wide = Ladder.random(depth=3, branching=64, events=4, seed=0)  # 266,305 regions
    need = BLOCK_SIZE * wide.total_regions * WORK_BYTES_PER_CELL
    monkeypatch.setattr("teachers.sampling._available_bytes", lambda device: need - 1)
    with pytest.raises(ValueError, match=r"ladder: sampling draws whole blocks of 4,096 rows; .*\(266,305 regions\)"):
        sample_ladder(wide, 5, seed=0)  # refused at once: without the check, ~22 GB and a minute for 5 rows
    monkeypatch.setattr("teachers.sampling._available_bytes", lambda device: need)
    check_working_memory(wide)  # exactly enough: accepted
    monkeypatch.setattr("teachers.sampling._available_bytes", lambda device: None)
    check_working_memory(wide)  # unknown (not Linux): nothing refused
