"""The exact posterior on trees (``inference.posterior.posterior``, the scaled sum-product of
``inference.sum_product``) against brute-force enumeration, Pyro's TraceEnum_ELBO / compute_marginals /
infer_discrete on the ladder's Pyro models, and the junction tree; the Bayes-optimal accuracy; chunking,
devices and inputs.  Region graphs with several parents per region: ``tests/test_posterior_graph.py``."""

from __future__ import annotations

import math

import numpy as np
import posterior_brute as bf
import pyro
import pytest
import torch
from pyro.infer import TraceEnum_ELBO, config_enumerate, infer_discrete

from inference import posterior as posterior_module
from inference.posterior import bayes_optimal_accuracy, posterior
from teachers import GaussianEmission, Ladder, LadderModel, sample_ladder


def _guide(*args, **kwargs):
    pass


def _inputs(ladder: Ladder, n: int, seed: int) -> tuple[torch.Tensor, object]:
    s = sample_ladder(ladder, n, seed=seed)
    return s.inputs(dtype=torch.float64), s


# ---------------------------------------------------------------------- brute force
def test_posterior_equals_brute_force(tiny_ladder, brute):
    x, _ = _inputs(tiny_ladder, 40, seed=7)
    post = posterior(tiny_ladder, x, marginals=True)
    ref = brute.posterior(tiny_ladder, x)
    assert post.log_evidence.dtype == torch.float64 and post.log_evidence.shape == (40,)
    np.testing.assert_allclose(post.log_evidence.numpy(), ref["log_evidence"], rtol=0, atol=1e-10)
    assert post.label.shape == (40, tiny_ladder.num_classes)
    np.testing.assert_allclose(post.label.numpy(), ref["marginals"][0][:, 0], rtol=0, atol=1e-10)
    assert len(post.marginals) == tiny_ladder.depth + 1
    for l in range(tiny_ladder.depth + 1):
        assert post.marginals[l].shape == (40, tiny_ladder.num_regions[l], tiny_ladder.events[l])
        np.testing.assert_allclose(post.marginals[l].numpy(), ref["marginals"][l], rtol=0, atol=1e-10)
    assert torch.equal(post.predict(), post.label.argmax(-1))


def test_posterior_with_per_region_sigma_and_random_means(brute):
    em = GaussianEmission.random_means(4, 3, 2, sigma=torch.tensor([0.4, 0.8, 1.5, 0.6]),
                                       generator=torch.Generator().manual_seed(3))
    for mode in ("topdown", "bottomup"):
        lad = Ladder.random(depth=2, branching=2, events=[3, 3, 3], mode=mode, seed=8, emission=em)
        x, _ = _inputs(lad, 25, seed=1)
        post = posterior(lad, x, marginals=True)
        ref = brute.posterior(lad, x)
        np.testing.assert_allclose(post.log_evidence.numpy(), ref["log_evidence"], rtol=0, atol=1e-10)
        for l in range(lad.depth + 1):
            np.testing.assert_allclose(post.marginals[l].numpy(), ref["marginals"][l], rtol=0, atol=1e-10)


def test_posterior_of_arbitrary_onehot_leaves(make_ladder, brute):
    """Every leaf configuration, not only sampled ones (with zeros in the tables, some are impossible)."""
    lad = make_ladder("td-zeros")
    leaves = torch.tensor(list(np.ndindex(*(2,) * lad.num_regions[-1])))
    x = torch.nn.functional.one_hot(leaves, 2).double()
    post = posterior(lad, x, marginals=True)
    ref = brute.posterior(lad, x)
    possible = np.isfinite(ref["log_evidence"])
    assert possible.all()  # leaves alone are never impossible here; the tables' zeros only prune paths
    np.testing.assert_allclose(post.log_evidence.numpy(), ref["log_evidence"], rtol=0, atol=1e-10)
    for l in range(lad.depth + 1):
        np.testing.assert_allclose(post.marginals[l].numpy(), ref["marginals"][l], rtol=0, atol=1e-10)
    # exact zeros of the posterior where the brute force has zeros (no -inf arithmetic leaks)
    assert (post.marginals[1].numpy()[ref["marginals"][1] == 0] == 0).all()


def test_impossible_input_is_a_clear_error_not_nan(make_ladder):
    lad = make_ladder("bu")
    x = torch.zeros(3, 4, 2, dtype=torch.float64)
    x[:, :, 0] = 1
    x[1] = 0  # not one-hot: impossible under one-hot leaves
    with pytest.raises(ValueError, match=r"^x: example\(s\) \[1\] have probability 0 under the ladder"):
        posterior(lad, x, chunk_size=2)  # the index is global, not within the chunk
    post = posterior(lad, x[[0, 2]], marginals=True)
    assert torch.isfinite(post.log_evidence).all() and torch.isfinite(post.label).all()


BOTTOMUP_ONEHOT = ["bu", "bu-uneven", "bu-depth1", "fully-informative"]


@pytest.mark.parametrize("name", BOTTOMUP_ONEHOT)
def test_bottomup_onehot_posterior_is_the_true_configuration(make_ladder, name):
    """With one-hot leaves every event of a bottom-up ladder is a function of x: the posterior
    marginals are one-hot at the sampled events."""
    lad = make_ladder(name)
    x, s = _inputs(lad, 500, seed=2)
    post = posterior(lad, x, marginals=True)
    for l in range(lad.depth + 1):
        truth = torch.nn.functional.one_hot(s.events(l), lad.events[l]).double()
        assert (post.marginals[l] - truth).abs().max().item() < 1e-12


def test_topdown_marginals_sum_to_one_and_root_is_label(make_ladder):
    lad = Ladder.default(emission="gaussian", sigma=0.8)
    x, _ = _inputs(lad, 200, seed=0)
    post = posterior(lad, x, marginals=True)
    assert torch.equal(post.marginals[0][:, 0], post.label)
    for m in post.marginals:
        assert (m.sum(-1) - 1).abs().max().item() < 1e-12 and (m >= 0).all()


# ---------------------------------------------------------------------- Pyro references
TOPDOWN_FOR_PYRO = ["td", "td-uneven", "td-zeros", "td-gauss", "factorized"]


@pytest.mark.parametrize("name", TOPDOWN_FOR_PYRO)
def test_evidence_and_label_equal_trace_enum_on_plated_model(make_ladder, name, float64):
    lad = make_ladder(name)
    lm = LadderModel(lad)
    x, _ = _inputs(lad, 30, seed=3)
    post = posterior(lad, x)
    elbo = TraceEnum_ELBO(max_plate_nesting=lad.depth + 1)
    model = config_enumerate(lm.model)
    log_px = -elbo.loss(model, _guide, x=x)
    assert log_px == pytest.approx(post.log_evidence.sum().item(), abs=1e-9)
    marg = elbo.compute_marginals(model, _guide, x=x)
    label = marg["z_0"].probs.reshape(30, lad.num_classes)
    assert (label - post.label).abs().max().item() < 1e-10


@pytest.mark.parametrize("name", ["td", "td-zeros", "td-gauss", "bu", "bu-gauss", "bu-uneven", "fully-informative"])
def test_evidence_and_marginals_equal_trace_enum_on_plain_model(make_ladder, name, float64):
    lad = make_ladder(name)
    lm = LadderModel(lad)
    x, _ = _inputs(lad, 20, seed=4)
    post = posterior(lad, x, marginals=True)
    elbo = TraceEnum_ELBO(max_plate_nesting=1)
    model = config_enumerate(lm.plain_model)
    # bottom-up parents are one-hot Categoricals, which Pyro clamps at eps ~ 2e-16: still ~1e-13 exact
    assert -elbo.loss(model, _guide, x=x) == pytest.approx(post.log_evidence.sum().item(), abs=1e-9)
    marg = elbo.compute_marginals(model, _guide, x=x)
    for l in range(lad.depth + 1):
        for i in range(lad.num_regions[l]):
            g = lad.level_offsets[l] + i
            got = marg[f"z_{g}"].probs.reshape(20, lad.events[l])
            assert (got - post.marginals[l][:, i]).abs().max().item() < 1e-10, (l, i)


def test_infer_discrete_posterior_samples_match_label_posterior(make_ladder, tv):
    """infer_discrete(temperature=1) on the plated model: 4 inputs, each repeated 5000 times,
    are 5000 exact posterior draws of y per input; their frequencies are within the BHC TV
    bound sqrt((m log 2 + log 1e6) / 2n) of our p(y | x)."""
    lad = make_ladder("td-gauss")
    lm = LadderModel(lad)
    x, _ = _inputs(lad, 4, seed=5)
    reps = 5000
    post = posterior(lad, x)
    assert (post.label.max(-1).values < 0.99).all()  # the posteriors are not degenerate
    pyro.set_rng_seed(11)
    sampler = infer_discrete(config_enumerate(lm.model), first_available_dim=-(lad.depth + 2), temperature=1)
    y = sampler(x=x.repeat_interleave(reps, 0))["z_0"].reshape(4, reps)
    for i in range(4):
        freq = torch.bincount(y[i], minlength=lad.num_classes).double() / reps
        assert 0.5 * (freq - post.label[i]).abs().sum().item() < tv(lad.num_classes, reps)


def test_infer_discrete_bottomup_plain_model_samples(make_ladder, tv):
    lad = make_ladder("bu-gauss")
    lm = LadderModel(lad)
    x, _ = _inputs(lad, 3, seed=6)
    reps = 3000
    post = posterior(lad, x, marginals=True)
    pyro.set_rng_seed(12)
    sampler = infer_discrete(config_enumerate(lm.plain_model), first_available_dim=-2, temperature=1)
    out = sampler(x=x.repeat_interleave(reps, 0))
    for g, (l, i) in {0: (0, 0), 2: (1, 1), 5: (2, 2)}.items():
        z = out[f"z_{g}"].reshape(3, reps)
        for n in range(3):
            freq = torch.bincount(z[n], minlength=lad.events[l]).double() / reps
            assert 0.5 * (freq - post.marginals[l][n, i]).abs().sum().item() < tv(lad.events[l], reps)


def test_infer_discrete_map_equals_brute_force_joint_map(make_ladder, brute):
    """temperature=0 is the joint MAP (Viterbi), which can differ from the argmax of the
    marginals; on both models it equals the brute-force argmax of log p(z, x)."""
    lad = make_ladder("td-gauss")
    lm = LadderModel(lad)
    x, _ = _inputs(lad, 60, seed=8)
    ref = brute.posterior(lad, x)
    top2 = np.sort(ref["log_joint"], axis=1)[:, -2:]
    assert (top2[:, 1] - top2[:, 0] > 1e-6).all()  # no ties
    out = infer_discrete(config_enumerate(lm.model), first_available_dim=-(lad.depth + 2), temperature=0)(x=x)
    np.testing.assert_array_equal(lm.flatten(out).numpy(), ref["map"])
    bu = make_ladder("bu-gauss")
    xb, _ = _inputs(bu, 30, seed=9)
    ref_b = brute.posterior(bu, xb)
    out = infer_discrete(config_enumerate(LadderModel(bu).plain_model), first_available_dim=-2, temperature=0)(x=xb)
    got = np.stack([out[f"z_{g}"].numpy() for g in range(bu.total_regions)], 1)
    np.testing.assert_array_equal(got, ref_b["map"])
    # the label of the joint MAP is not always the Bayes-optimal label: it is a different quantity
    post = posterior(lad, x)
    assert (post.predict().numpy() == ref["map"][:, 0]).mean() > 0.5


# ---------------------------------------------------------------------- Bayes-optimal accuracy
@pytest.mark.parametrize("name", BOTTOMUP_ONEHOT)
def test_bayes_accuracy_is_one_for_bottomup_onehot(make_ladder, name):
    lad = make_ladder(name)
    _, s = _inputs(lad, 3000, seed=1)
    res = bayes_optimal_accuracy(lad, s.inputs(), s.y)
    assert res.expected == 1.0 and res.empirical == 1.0 and res.stderr == 0.0 and res.n == 3000


@pytest.mark.parametrize("name", ["bu-gauss", "fully-informative-gauss", "td-gauss", "td"])
def test_bayes_accuracy_noisy_or_topdown_below_one_and_consistent(make_ladder, name):
    """'empirical' - 'expected' = mean of (1[argmax = y] - max_y p(y|x)): each term has mean 0
    given x and variance q(1-q), q = max_y p(y|x); so |difference| < 5 sqrt(sum q(1-q)) / n
    (a z-score bound; 'stderr' is the spread of 'expected' itself, not of this difference)."""
    lad = make_ladder(name)
    n = 20_000
    s = sample_ladder(lad, n, seed=3)
    x = s.inputs()
    res = bayes_optimal_accuracy(lad, x, s.y)
    q = posterior(lad, x).label.max(-1).values
    assert res.expected == pytest.approx(q.mean().item(), abs=1e-12)
    assert res.stderr == pytest.approx(q.std().item() / math.sqrt(n), rel=1e-9)
    assert 1 / lad.num_classes <= res.expected < 0.999
    assert abs(res.empirical - res.expected) < 5 * math.sqrt((q * (1 - q)).sum().item()) / n
    assert bayes_optimal_accuracy(lad, x[:10]).empirical is None


def test_bayes_accuracy_falls_with_noise(make_ladder):
    lad = make_ladder("fully-informative")
    acc = []
    for sigma in (0.2, 0.6, 1.5):
        g = lad.with_emission({"kind": "gaussian", "sigma": sigma})
        s = sample_ladder(g, 4000, seed=0)
        acc.append(bayes_optimal_accuracy(g, s.x).expected)
    # expected accuracies (stderr < 0.01 each) strictly ordered with margins far above the noise
    assert acc[0] > acc[1] + 0.05 > acc[2] + 0.1 and acc[0] > 0.9


# ---------------------------------------------------------------------- chunking and inputs
@pytest.mark.parametrize("name", ["td-gauss", "bu-uneven"])
def test_chunk_size_does_not_change_results(make_ladder, name):
    lad = make_ladder(name)
    x, _ = _inputs(lad, 37, seed=2)
    ref = posterior(lad, x, marginals=True)
    for chunk in (1, 5, 36, 37, 1000):
        got = posterior(lad, x, marginals=True, chunk_size=chunk)
        assert (got.log_evidence - ref.log_evidence).abs().max().item() < 1e-12
        assert (got.label - ref.label).abs().max().item() < 1e-12
        for a, b in zip(got.marginals, ref.marginals, strict=True):
            assert (a - b).abs().max().item() < 1e-12
    on_cpu = posterior(lad, x, device="cpu")
    assert torch.equal(on_cpu.label, ref.label)


def test_float32_inputs_give_the_same_posterior(make_ladder):
    lad = make_ladder("bu")
    x, _ = _inputs(lad, 50, seed=0)
    a, b = posterior(lad, x), posterior(lad, x.float())
    assert b.label.dtype == torch.float64 and torch.equal(a.label, b.label)


def test_posterior_bad_inputs(make_ladder):
    lad = make_ladder("td")
    x, s = _inputs(lad, 10, seed=0)
    with pytest.raises(ValueError, match=r"^x: expected shape \(N, 4, 2\), got \(10, 3, 2\)"):
        posterior(lad, x[:, :3])
    with pytest.raises(ValueError, match=r"^x: expected shape \(N, 4, 2\), got \(10, 4, 3\)"):
        posterior(lad, torch.zeros(10, 4, 3))
    with pytest.raises(ValueError, match=r"^x: expected shape \(N, 4, 2\), got \(4, 2\)"):
        posterior(lad, x[0])
    with pytest.raises(TypeError, match=r"^x: expected a torch\.Tensor, got ndarray"):
        posterior(lad, x.numpy())
    with pytest.raises(TypeError, match=r"^ladder: expected a Ladder, got str"):
        posterior("td", x)
    for bad in (0, -2):
        with pytest.raises(ValueError, match=rf"^chunk_size: expected a positive integer, got {bad}"):
            posterior(lad, x, chunk_size=bad)
    with pytest.raises(ValueError, match=r"^y: expected shape \(10,\), got \(9,\)"):
        bayes_optimal_accuracy(lad, x, s.y[:9])
    with pytest.raises(ValueError, match=r"^chunk_size"):
        bayes_optimal_accuracy(lad, x, chunk_size=0)


def test_posterior_argument_checks(make_ladder):
    lad = make_ladder("bu")
    x = sample_ladder(lad, 4, seed=0).inputs(dtype=torch.float64)
    with pytest.raises(ValueError, match=r"^chunk_size: expected a positive integer, got 2.5"):
        posterior(lad, x, chunk_size=2.5)
    assert torch.equal(posterior(lad, x, chunk_size=np.int64(3)).label, posterior(lad, x).label)


def test_bayes_stderr_empirical_matches_binomial_spread():
    lad = Ladder.random(depth=2, branching=2, events=3, concentration=0.5, seed=1, emission="gaussian", sigma=0.7)
    s = sample_ladder(lad, 3000, seed=2)
    acc = bayes_optimal_accuracy(lad, s.inputs(dtype=torch.float64), s.y)
    q = posterior(lad, s.inputs(dtype=torch.float64)).label.max(-1).values
    assert acc.stderr_empirical == pytest.approx(math.sqrt((q * (1 - q)).sum().item()) / 3000, rel=1e-12)
    # given x, the labels are posterior draws: the fraction correct is within a few of its own stderr
    assert abs(acc.empirical - acc.expected) < 4 * acc.stderr_empirical


# ---------------------------------------------------------------------- trees beyond the uniform ones
def _uneven(mode: str, sigma: float | None) -> Ladder:
    """A tree with per-region branching (1 to 3 children) and per-region event counts."""
    return Ladder.tree([[3], [2, 1, 2], [1, 2, 1, 1, 1]], [3, [2, 3, 2], [2, 2, 2, 3, 2], 2], mode=mode,
                       seed=3, sigma=sigma)


def _scrambled(mode: str, sigma: float | None) -> Ladder:
    """A tree given by parents lists in which siblings are not contiguous."""
    parents = [[()], [(0,), (0,)], [(1,), (0,), (1,), (0,)], [(3,), (0,), (2,), (1,), (0,), (2,), (1,), (3,)]]
    return Ladder.random(events=[2, [3, 2], 2, 2], parents=parents, mode=mode, seed=4, sigma=sigma)


TREES = [(kind, mode, sigma) for kind in ("uneven", "scrambled") for mode in ("topdown", "bottomup")
         for sigma in (None, 0.7)]


def _tree(kind, mode, sigma):
    return (_uneven if kind == "uneven" else _scrambled)(mode, sigma)


@pytest.mark.parametrize(("kind", "mode", "sigma"), TREES)
def test_any_tree_equals_brute_force_and_the_junction_tree(kind, mode, sigma):
    lad = _tree(kind, mode, sigma)
    assert lad.is_tree() and not lad.is_uniform()
    x = bf.inputs(lad, 25, seed=1)
    post = posterior(lad, x, marginals=True)
    assert post.method == "tree" and post.cost is None
    log_z, marg, _, _, _ = bf.posterior(lad, x)
    bf.close(post.log_evidence, log_z, 1e-10)
    bf.close(post.label, marg[0][0], 1e-10)
    for l in range(lad.depth + 1):
        assert post.marginals[l].shape == (25, lad.num_regions[l], lad.events[l])
        for i in range(lad.num_regions[l]):
            m = lad.region_events[l][i]
            bf.close(post.region_marginal(l, i), marg[l][i], 1e-10)
            assert (post.marginals[l][:, i, m:] == 0).all()  # padding
    jt = posterior(lad, x, marginals=True, method="junction-tree")
    assert jt.method == "junction-tree" and jt.cost is not None
    bf.close(jt.log_evidence, post.log_evidence, 1e-12)
    for a, b in zip(jt.marginals, post.marginals, strict=True):
        bf.close(a, b, 1e-12)
    assert [[t.shape for t in lvl] for lvl in post.region_marginals()] == \
        [[(25, m) for m in lvl] for lvl in lad.region_events]


@pytest.mark.parametrize("name", ["td", "td-uneven", "td-zeros", "td-gauss", "td-depth1", "bu", "bu-uneven", "bu-gauss",
                                  "bu-depth1", "fully-informative", "factorized"])
def test_scaled_tree_path_equals_the_junction_tree(make_ladder, name):
    lad = make_ladder(name)
    x, _ = _inputs(lad, 30, seed=9)
    a = posterior(lad, x, marginals=True)
    b = posterior(lad, x, marginals=True, method="junction-tree")
    assert a.method == "tree" and b.method == "junction-tree"
    assert (a.log_evidence - b.log_evidence).abs().max().item() < 1e-12
    assert (a.label - b.label).abs().max().item() < 1e-12
    for p, q in zip(a.marginals, b.marginals, strict=True):
        assert (p - q).abs().max().item() < 1e-12


@pytest.mark.parametrize(("kind", "mode", "sigma"), [t for t in TREES if t[2] is not None])
def test_any_tree_equals_trace_enum_on_plain_model(kind, mode, sigma, float64):
    lad = _tree(kind, mode, sigma)
    x = bf.inputs(lad, 5, seed=2)
    post = posterior(lad, x, marginals=True)
    elbo = TraceEnum_ELBO(max_plate_nesting=1)
    model = config_enumerate(LadderModel(lad).plain_model)
    assert -elbo.loss(model, _guide, x=x) == pytest.approx(post.log_evidence.sum().item(), abs=1e-9)
    marg = elbo.compute_marginals(model, _guide, x=x)
    for l in range(lad.depth + 1):
        for i in range(lad.num_regions[l]):
            got = marg[f"z_{lad.level_offsets[l] + i}"].probs.reshape(5, -1)
            assert (got - post.region_marginal(l, i)).abs().max().item() < 1e-10, (l, i)


def test_underflowing_messages_are_recomputed_in_log_space():
    """Leaf event 1 has probability 1e-200 under every parent event: a region whose three leaves all show it
    sends 1e-600 up, which underflows to 0 in the scaled pass; those examples come back from the log-space
    junction tree instead of being called impossible."""
    from inference.sum_product import leaf_factors, tree_plan, upward

    base = Ladder.random(depth=2, branching=3, events=2, seed=0)
    t2 = torch.tensor([[1 - 1e-200, 1e-200], [1 - 1e-200, 1e-200]], dtype=torch.float64).expand(9, 2, 2)
    lad = Ladder(base.branching, base.events, prior=base.prior, tables=[base.tables[0], t2])
    x = torch.zeros(6, 9, 2, dtype=torch.float64)
    x[:2, :, 1] = 1  # every leaf at event 1
    x[2:, :, 0] = 1
    x[2:, ::3] = torch.tensor([0.0, 1.0], dtype=torch.float64)  # one leaf of three at event 1
    plan = tree_plan(lad, x.device)
    scaled = upward(plan, *leaf_factors(plan, x)).log_z
    assert torch.isneginf(scaled[:2]).all() and torch.isfinite(scaled[2:]).all()  # the underflow
    post = posterior(lad, x, marginals=True)
    ref = posterior(lad, x, marginals=True, method="junction-tree")
    assert torch.isfinite(post.log_evidence).all() and (post.log_evidence[:2] < -4000).all()
    assert (post.log_evidence - ref.log_evidence).abs().max().item() < 1e-10
    for p, q in zip(post.marginals, ref.marginals, strict=True):
        assert (p - q).abs().max().item() < 1e-10


def test_far_inputs_stay_exact_through_the_per_leaf_rescaling():
    """Gaussian leaves ~1e5 nats from every mean: each leaf is rescaled by its own max before exp."""
    lad = Ladder.random(depth=2, branching=3, events=2, seed=0, emission="gaussian", sigma=0.05)
    x = bf.inputs(lad, 6, seed=0) * 40.0
    post = posterior(lad, x, marginals=True)
    ref = posterior(lad, x, marginals=True, method="junction-tree")
    assert torch.isfinite(post.log_evidence).all() and (post.log_evidence < -1e5).all()
    # log space carries ~1e-16 of |log p(x_r | z_r)| ~ 1e5 into the junction tree's probabilities
    assert ((post.log_evidence - ref.log_evidence).abs() / ref.log_evidence.abs()).max().item() < 1e-13
    for p, q in zip(post.marginals, ref.marginals, strict=True):
        assert (p - q).abs().max().item() < 1e-8


def test_one_query_at_a_time_equals_the_batch(make_ladder):
    for name in ("td-gauss", "bu-gauss"):
        lad = make_ladder(name)
        x, _ = _inputs(lad, 6, seed=3)
        batch = posterior(lad, x, marginals=True)
        for n in range(6):
            one = posterior(lad, x[n: n + 1], marginals=True)
            assert (one.log_evidence - batch.log_evidence[n]).abs().max().item() < 1e-12
            for a, b in zip(one.marginals, batch.marginals, strict=True):
                assert (a[0] - b[n]).abs().max().item() < 1e-12
    # one example of a wide level uses a product and a sum in place of the batched matmul
    lad = Ladder.random(depth=2, branching=6, events=5, seed=2, emission="gaussian", sigma=0.8)
    x = bf.inputs(lad, 3, seed=4)
    batch = posterior(lad, x)
    for n in range(3):
        assert (posterior(lad, x[n: n + 1]).label - batch.label[n]).abs().max().item() < 1e-14


def test_default_chunks_follow_the_device_budget(make_ladder, monkeypatch):
    lad = make_ladder("td-gauss")
    x, _ = _inputs(lad, 40, seed=5)
    ref = posterior(lad, x, marginals=True)
    monkeypatch.setattr(posterior_module, "_CHUNK_ELEMENTS_CPU", 1)  # one example per pass
    got = posterior(lad, x, marginals=True)
    assert (got.log_evidence - ref.log_evidence).abs().max().item() < 1e-12
    for a, b in zip(got.marginals, ref.marginals, strict=True):
        assert (a - b).abs().max().item() < 1e-12


def test_method_argument(make_ladder):
    lad = make_ladder("td")
    x, _ = _inputs(lad, 4, seed=0)
    with pytest.raises(ValueError, match=r"^method: expected one of \['auto', 'tree', 'junction-tree'\]"):
        posterior(lad, x, method="fast")
    dag = Ladder.conv1d(5, [3, 3], [1, 1], [2, 3, 2], seed=0)
    with pytest.raises(ValueError, match=r"^method: 'tree' needs"):
        posterior(dag, bf.inputs(dag, 2, seed=0), method="tree")
    with pytest.raises(ValueError, match="marginals: not computed"):
        posterior(lad, x).region_marginal(0, 0)
    with pytest.raises(ValueError, match=r"^device: expected a torch device"):
        posterior(lad, x, device="no-such-device")


def test_plan_follows_in_place_changes_of_the_tables():
    """The prepared tables are cached per ladder object; an in-place change of a table rebuilds them."""
    lad = Ladder.random(depth=2, branching=2, events=3, seed=6, emission="gaussian", sigma=0.7)
    x = bf.inputs(lad, 5, seed=1)
    before = posterior(lad, x).label
    with torch.no_grad():
        lad.prior.copy_(torch.tensor([0.98, 0.01, 0.01], dtype=torch.float64))
    after = posterior(lad, x).label
    fresh = posterior(Ladder(lad.branching, lad.events, prior=lad.prior.clone(), tables=list(lad.tables),
                             emission=lad.emission), x).label
    assert not torch.allclose(before, after) and torch.equal(after, fresh)


def test_empty_input(make_ladder):
    for name in ("td", "bu"):
        lad = make_ladder(name)
        post = posterior(lad, torch.zeros(0, lad.num_regions[-1], lad.emission.dim), marginals=True)
        assert post.label.shape == (0, lad.num_classes) and post.log_evidence.shape == (0,)
        acc = bayes_optimal_accuracy(lad, torch.zeros(0, lad.num_regions[-1], lad.emission.dim))
        assert acc.n == 0 and math.isnan(acc.expected) and math.isnan(acc.stderr)
