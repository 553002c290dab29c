"""Exact inference on ladders whose children are drawn jointly (teachers.productions; the RHM, teachers.rhm):
the tree sum-product, the junction tree and the Pyro model against brute force over every configuration and
against Pyro's own enumeration, in float64; p(y | x) one-hot on every derivation of small RHMs."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from pyro import poutine
from pyro.infer import TraceEnum_ELBO, config_enumerate, infer_discrete
from pyro.infer.inspect import get_model_relations

from inference import posterior_event_draws
from inference.posterior import bayes_optimal_accuracy, map_events, posterior
from teachers import Ladder, LadderModel
from teachers.elimination import graph_statistics, region_joint
from teachers.emission import GaussianEmission

TOL = 1e-10


# ---------------------------------------------------------------------- ladders and brute force
def _joint_ladder(per_region: bool = False) -> Ladder:
    """Depth 2, branching (2, 2), events (2, 3, 2): level 0 draws its children jointly (non-uniform probs, one
    tuple produced by both classes, so p(y | x) is not one-hot), level 1 either independently (tables) or by
    per-region productions; Gaussian leaves so that every posterior is non-trivial."""
    g = torch.Generator().manual_seed(5)
    rules0 = torch.tensor([[[0, 1], [2, 2], [1, 0]], [[2, 2], [0, 0], [1, 2]]])  # (m=2, K=3, b=2); [2, 2] twice
    probs0 = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3]], dtype=torch.float64)
    if per_region:  # (R=2, m=3, K=2, b=2), one padding production of probability 0
        rules1 = torch.randint(0, 2, (2, 3, 2, 2), generator=g)
        probs1 = torch.tensor([[[0.7, 0.3], [1.0, 0.0], [0.4, 0.6]], [[0.2, 0.8], [0.5, 0.5], [0.0, 1.0]]],
                              dtype=torch.float64)
        prods, tables = [(rules0, probs0), (rules1, probs1)], [None, None]
    else:
        t = torch.rand(4, 3, 2, generator=g, dtype=torch.float64) + 0.1
        prods, tables = [(rules0, probs0), None], [None, t / t.sum(-1, keepdim=True)]
    em = GaussianEmission(torch.randn(4, 2, 3, generator=g, dtype=torch.float64), 0.8)
    return Ladder((2, 2), (2, 3, 2), prior=[0.4, 0.6], tables=tables, productions=prods, emission=em)


def _log_joint_table(lad: Ladder) -> tuple[torch.Tensor, torch.Tensor]:
    """Every configuration z ``(C, total_regions)`` of a small top-down uniform tree and log p(z) ``(C,)``, by brute
    force: the prior, then per level either each child's table or each region's productions summed over k."""
    sizes = [m for lvl in lad.region_events for m in lvl]
    conf = torch.tensor(list(itertools.product(*[range(m) for m in sizes])), dtype=torch.int64)
    off, b = lad.level_offsets, lad.branching
    logp = lad.prior.log()[conf[:, 0]]
    for l in range(lad.depth):
        joint = lad.productions[l] if lad.productions is not None else None
        for a in range(lad.num_regions[l]):
            za = conf[:, off[l] + a]
            kids = conf[:, off[l + 1] + a * b[l]: off[l + 1] + (a + 1) * b[l]]  # (C, b)
            if joint is None:
                for j in range(b[l]):
                    logp = logp + lad.region_tables[l + 1][a * b[l] + j][za, kids[:, j]].log()
                continue
            rules, probs = joint.region_rules(lad.num_regions[l])[a], joint.region_probs(lad.num_regions[l])[a]
            hit = (rules[za] == kids[:, None, :]).all(-1)  # (C, K)
            logp = logp + (probs[za] * hit).sum(-1).log()
    return conf, logp


def _brute(lad: Ladder, x: torch.Tensor) -> dict:
    conf, logp = _log_joint_table(lad)
    leaves = conf[:, lad.level_offsets[-2]:]
    ll = lad.emission.log_likelihood(x).double()  # (N, R_d, m)
    lx = logp[None] + ll.gather(-1, leaves.T[None].expand(x.shape[0], -1, -1)).sum(1)  # (N, C)
    log_z = torch.logsumexp(lx, 1)
    w = (lx - log_z[:, None]).exp()
    margs = [torch.zeros(x.shape[0], r, m, dtype=torch.float64) for r, m in zip(lad.num_regions, lad.events,
                                                                                   strict=True)]
    for v in range(lad.total_regions):
        l = max(j for j in range(lad.depth + 1) if lad.level_offsets[j] <= v)
        margs[l][:, v - lad.level_offsets[l]].index_add_(1, conf[:, v], w)
    return dict(log_z=log_z, label=margs[0][:, 0], margs=margs, map=conf[lx.argmax(1)], best=lx.max(1).values)


def _derivations(lad: Ladder) -> tuple[torch.Tensor, torch.Tensor]:
    """Every derivation of positive probability of a ladder whose every level has productions: leaf events
    ``(P, R_d)`` and classes ``(P,)``, expanded top-down from ``ladder.productions``."""
    rows: list[tuple[int, list[int]]] = []
    for y in range(lad.num_classes):
        level = [[y]]
        for l in range(lad.depth):
            joint = lad.productions[l]
            nxt = []
            for events in level:
                rules = joint.region_rules(len(events))
                probs = joint.region_probs(len(events))
                choices = [[k for k in range(joint.num_productions) if probs[a, e, k] > 0]
                           for a, e in enumerate(events)]
                for ks in itertools.product(*choices):
                    nxt.append([int(c) for a, (e, k) in enumerate(zip(events, ks, strict=True))
                                for c in rules[a, e, k]])
            level = nxt
        rows += [(y, ev) for ev in level]
    return torch.tensor([r for _, r in rows]), torch.tensor([y for y, _ in rows])


# ---------------------------------------------------------------------- the exact posterior
@pytest.mark.parametrize("per_region", [False, True])
@pytest.mark.parametrize("method", ["tree", "junction-tree"])
def test_posterior_with_productions_is_brute_force(per_region: bool, method: str) -> None:
    lad = _joint_ladder(per_region)
    x = torch.randn(7, 4, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    want = _brute(lad, x)
    post = posterior(lad, x, marginals=True, method=method)
    assert post.method == method
    assert torch.allclose(post.log_evidence, want["log_z"], atol=TOL, rtol=0)
    assert torch.allclose(post.label, want["label"], atol=TOL, rtol=0)
    for got, ref in zip(post.marginals, want["margs"], strict=True):
        assert torch.allclose(got, ref, atol=TOL, rtol=0)
    assert 0.05 < float(post.label.max(-1).values.min()) < 0.99  # not one-hot: the test reads the productions


def test_map_events_with_productions_is_brute_force() -> None:
    lad = _joint_ladder(True)
    x = torch.randn(9, 4, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    want = _brute(lad, x)
    z, best = map_events(lad, x)
    assert torch.equal(z, want["map"])
    assert torch.allclose(best, want["best"], atol=TOL, rtol=0)


def test_pairwise_tables_alone_would_be_wrong() -> None:
    """The children's marginals alone (independent children) give another p(x): the check above can fail."""
    lad = _joint_ladder()
    indep = Ladder((2, 2), (2, 3, 2), prior=lad.prior, tables=list(lad.tables), emission=lad.emission)
    x = torch.randn(7, 4, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert (posterior(indep, x).log_evidence - _brute(lad, x)["log_z"]).abs().max() > 1e-3


def test_event_draws_follow_the_joint_posterior() -> None:
    lad = _joint_ladder(True)
    x = torch.randn(1, 4, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    idata = posterior_event_draws(lad, x, num_draws=4000, num_chains=1, seed=0, onehot=False)
    z = torch.as_tensor(idata.posterior["z"].values).reshape(-1, lad.total_regions)
    conf, _ = _log_joint_table(lad)
    want = _brute(lad, x)
    # the frequency of the two children of the root jointly: the joint the productions fix
    code = z[:, 1] * 3 + z[:, 2]
    freq = torch.bincount(code, minlength=9).double() / z.shape[0]
    lx = _log_joint_table(lad)[1] + lad.emission.log_likelihood(x)[0].gather(-1, conf[:, 3:].T).sum(0)
    ref = torch.zeros(9, dtype=torch.float64).index_add_(0, conf[:, 1] * 3 + conf[:, 2],
                                                          (lx - want["log_z"][0]).exp())
    assert (freq - ref).abs().max() < 5 * (0.25 / z.shape[0]) ** 0.5


# ---------------------------------------------------------------------- statistics without evidence
def test_graph_statistics_and_region_joint_with_productions_are_brute_force() -> None:
    lad = _joint_ladder(True)
    conf, logp = _log_joint_table(lad)
    p = logp.exp()
    stats = graph_statistics(lad)
    for v in range(lad.total_regions):
        l = max(j for j in range(lad.depth + 1) if lad.level_offsets[j] <= v)
        want = torch.zeros(lad.events[l], dtype=torch.float64).index_add_(0, conf[:, v], p)
        assert torch.allclose(stats.p[l][v - lad.level_offsets[l]], want, atol=TOL, rtol=0)
    for (l, a, i), pair in stats.pair.items():
        u, v = lad.level_offsets[l - 1] + a, lad.level_offsets[l] + i
        want = torch.zeros(pair.shape, dtype=torch.float64).index_put_((conf[:, u], conf[:, v]), p, accumulate=True)
        assert torch.allclose(pair, want, atol=TOL, rtol=0)
    # siblings' joint: what the marginal tables cannot give
    got = region_joint(lad, [(1, 0), (1, 1)])
    want = torch.zeros(3, 3, dtype=torch.float64).index_put_((conf[:, 1], conf[:, 2]), p, accumulate=True)
    assert torch.allclose(got, want, atol=TOL, rtol=0)
    assert (got - torch.outer(want.sum(1), want.sum(0))).abs().max() > 0.05


def test_a_production_factor_beyond_max_clique_is_a_clear_error() -> None:
    lad = Ladder.rhm(8, 2, 2, 2, 2, seed=0)
    with pytest.raises(ValueError, match=r"productions of level 0 .*\(8\^2 x 2 = 128 entries\).*max_clique=100"):
        region_joint(lad, [(1, 0)], max_clique=100)


# ---------------------------------------------------------------------- the RHM: one-hot posterior
@pytest.mark.parametrize(("v", "n_c", "m", "s", "L", "rules"), [(4, 2, 2, 2, 2, "smaso"), (3, 3, 2, 2, 3, "smaso"),
                                                                  (4, 2, 2, 3, 2, "pcsl")])
def test_rhm_posterior_is_one_hot_on_every_derivation(v: int, n_c: int, m: int, s: int, L: int, rules: str) -> None:
    lad = Ladder.rhm(v, n_c, m, s, L, seed=1, rules=rules)
    leaves, y = _derivations(lad)
    assert leaves.shape[0] == lad.rhm_params.num_data  # every derivation, P_max of them
    x = torch.nn.functional.one_hot(leaves, v).double()
    post = posterior(lad, x)
    assert torch.equal(post.label, torch.nn.functional.one_hot(y, n_c).double())
    # each distinct input has probability (number of its derivations) / P_max: all distinct here
    assert torch.allclose(post.log_evidence, torch.full_like(post.log_evidence, -math.log(lad.rhm_params.num_data)),
                          atol=TOL, rtol=0)
    acc = bayes_optimal_accuracy(lad, x, y)
    assert acc.expected == 1.0 and acc.empirical == 1.0


# ---------------------------------------------------------------------- the Pyro model
def _no_guide(*args: object, **kwargs: object) -> None:
    pass


def _plain_z(values: dict, lad: Ladder) -> torch.Tensor:
    return torch.stack([values[f"z_{v}"].reshape(-1) for v in range(lad.total_regions)], 1).long()


@pytest.mark.parametrize("per_region", [False, True])
def test_pyro_enumeration_of_the_production_model_is_brute_force(per_region: bool) -> None:
    lad = _joint_ladder(per_region)
    x = torch.randn(5, 4, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    want = _brute(lad, x)
    model = LadderModel(lad)
    assert model.layout == "plates" and model.production_site_names() == (["prod_0", "prod_1"] if per_region
                                                                          else ["prod_0"])
    for fn, nest in [(model.model, model.max_plate_nesting), (model.plain_model, 1)]:
        got = -TraceEnum_ELBO(max_plate_nesting=nest).loss(config_enumerate(fn), _no_guide, x=x)
        assert got == pytest.approx(float(want["log_z"].sum()), abs=1e-9)
        tr = poutine.trace(infer_discrete(config_enumerate(fn), first_available_dim=-(nest + 1), temperature=0)
                           ).get_trace(x=x)
        values = {name: site["value"] for name, site in tr.nodes.items() if name.startswith("z_")}
        z = _plain_z(values, lad) if nest == 1 else model.to_z(values)
        assert torch.equal(z, want["map"])
    marg = TraceEnum_ELBO(max_plate_nesting=1).compute_marginals(config_enumerate(model.plain_model), _no_guide, x=x)
    assert torch.allclose(marg["z_0"].probs.double(), want["label"], atol=TOL, rtol=0)


def test_pyro_model_relations_show_the_true_parents() -> None:
    lad = _joint_ladder(True)
    rel = get_model_relations(LadderModel(lad).model, model_kwargs=dict(num_examples=3))
    deps = rel["sample_sample"]
    assert deps["prod_0"] == ["z_0"] and sorted(deps["z_1"]) == ["prod_0", "z_0"]
    assert deps["prod_1"] == ["z_1"] and sorted(deps["z_2"]) == ["prod_1", "z_1"] and deps["x"] == ["z_2"]
    plain = get_model_relations(LadderModel(lad).plain_model, model_kwargs=dict(num_examples=3))["sample_sample"]
    assert sorted(plain["z_1"]) == ["prod_0", "z_0"] and sorted(plain["z_4"]) == ["prod_1", "z_1"]


def test_pyro_model_draws_children_jointly() -> None:
    lad = _joint_ladder()
    model = LadderModel(lad)
    n = 40_000
    out = model.model(n, emit=False, generator=torch.Generator().manual_seed(0))
    z = model.to_z(out)
    conf, logp = _log_joint_table(lad)
    want = torch.zeros(2, 3, 3, dtype=torch.float64).index_put_((conf[:, 0], conf[:, 1], conf[:, 2]), logp.exp(),
                                                                accumulate=True)
    got = torch.zeros(2, 3, 3, dtype=torch.float64).index_put_((z[:, 0], z[:, 1], z[:, 2]),
                                                               torch.ones(n, dtype=torch.float64), accumulate=True) / n
    assert (got - want).abs().max() < 5 * (0.25 / n) ** 0.5
    assert model.sample_site_names() == ["z_0", "z_2"]


def test_groups_layout_refuses_productions() -> None:
    with pytest.raises(ValueError, match="'groups' does not take productions"):
        LadderModel(_joint_ladder(), layout="groups")
