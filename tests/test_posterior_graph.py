"""Exact inference on region graphs whose regions have several parents (``inference.posterior`` through
``inference.junction_tree``, issue 17), and the exact event statistics of any ladder.

References: brute-force enumeration of every joint configuration of every region (``posterior_brute``, written
from the definitions in ``teachers/ladder.py``'s docstring) on small DAGs, in both modes, one-hot and Gaussian
leaves; Pyro's ``TraceEnum_ELBO`` and ``infer_discrete`` on a hand-written Pyro model of a tiny DAG and on the
library's ``LadderModel`` (one site per region, ``group_regions=False``, and ``plain_model``); on trees
``teachers.statistics.exact_statistics`` and the scaled tree path.
"""

from __future__ import annotations

import math

import numpy as np
import posterior_brute as bf
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import TraceEnum_ELBO, config_enumerate, infer_discrete

from inference.posterior import (
    Posterior,
    bayes_optimal_accuracy,
    elimination_order,
    graph_statistics,
    map_events,
    posterior,
    treewidth_cost,
)
from teachers.elimination import _factors, _query_joint
from teachers.ladder import Ladder
from teachers.pyro_model import LadderModel
from teachers.sampling import sample_ladder
from teachers.statistics import exact_statistics

pytestmark = pytest.mark.usefixtures("one_thread")


def _no_guide(*args, **kwargs):
    return None


# ------------------------------------------------------------------------------------ trees
TREES = [("topdown", None), ("topdown", 0.7), ("bottomup", None), ("bottomup", 0.7)]


@pytest.mark.parametrize(("mode", "sigma"), TREES)
def test_tree_statistics_and_both_paths(mode, sigma):
    lad = Ladder.random(depth=2, branching=2, events=3, seed=0, mode=mode, emission="gaussian" if sigma else None,
                        sigma=sigma)
    x = bf.inputs(lad, 40, seed=1)
    ref = posterior(lad, x, marginals=True)
    post = posterior(lad, x, marginals=True, method="junction-tree")
    bf.close(post.label, ref.label, 1e-10)
    bf.close(post.log_evidence, ref.log_evidence, 1e-10)
    for l in range(lad.depth + 1):
        for i in range(lad.num_regions[l]):
            bf.close(post.region_marginal(l, i), ref.marginals[l][:, i], 1e-10)
    es, gs = exact_statistics(lad), graph_statistics(lad)
    for l in range(lad.depth + 1):
        for i in range(lad.num_regions[l]):
            bf.close(gs.p[l][i], es.marginals[l][i], 1e-12)
    for (l, a, i) in lad.edges():
        bf.close(gs.pair[(l, a, i)], es.joints[l][i], 1e-12)
        bf.close(gs.cond[(l, a, i)], es.P_down[l][i], 1e-12)
        bf.close(gs.parents_joint[l][i], es.marginals[l - 1][a], 1e-12)


def test_map_on_trees_is_the_brute_force_map(make_ladder):
    for name in ("td-gauss", "bu-gauss", "td-uneven"):
        lad = make_ladder(name)
        x = bf.inputs(lad, 30, seed=2)
        _, _, zb, lj, _ = bf.posterior(lad, x)
        z, best = map_events(lad, x)
        bf.close(best, lj.max(1), 1e-10)
        np.testing.assert_array_equal(z.numpy(), zb)


# ------------------------------------------------------------------------------------ small DAGs
DAGS = {
    "conv1d-td": lambda: Ladder.conv1d(width=5, kernels=[3, 3], strides=[1, 1], events=[2, 3, 2], sigma=0.7),
    "conv1d-td-onehot": lambda: Ladder.conv1d(width=5, kernels=[3, 3], strides=[1, 1], events=[2, 3, 2], seed=3,
                                              concentration=0.5),
    "conv1d-bu": lambda: Ladder.conv1d(width=5, kernels=[3, 3], strides=[1, 1], events=[2, 3, 2], sigma=0.7,
                                       mode="bottomup", seed=1),
    "conv1d-bu-onehot": lambda: Ladder.conv1d(width=5, kernels=[3, 3], strides=[1, 1], events=[2, 3, 2],
                                              mode="bottomup", seed=2),
    "conv2d-td": lambda: Ladder.conv2d((3, 3), [2, 2], [1, 1], [2, 2, 2], sigma=0.7, seed=4),
    "conv2d-bu": lambda: Ladder.conv2d((3, 3), [2, 2], [1, 1], [2, 2, 2], sigma=0.7, mode="bottomup", seed=5),
    # per-region event counts and irregular parents
    "irregular-td": lambda: Ladder.random(events=[[3], [2, 3, 2], [2, 2, 2, 2]], sigma=0.6, seed=6,
                                          parents=[[()], [(0,), (0,), (0,)], [(0, 2), (1,), (0, 1, 2), (2,)]]),
    "irregular-bu": lambda: Ladder.random(events=[[3], [2, 3, 2], [2, 2, 2, 2]], mode="bottomup", seed=7,
                                          parents=[[()], [(0,), (0,), (0,)], [(0, 2), (1,), (0, 1, 2), (2,)]]),
}


@pytest.fixture(scope="module", params=sorted(DAGS))
def dag(request):
    g = DAGS[request.param]()
    assert not g.is_tree()
    x = bf.inputs(g, 12, seed=7)
    return g, x, bf.posterior(g, x), bf.statistics(g)


def test_dag_posterior_matches_brute_force(dag):
    g, x, (log_z, marg, _, _, _), _ = dag
    post = posterior(g, x, marginals=True)
    assert isinstance(post, Posterior) and post.method == "junction-tree" and post.cost is not None
    bf.close(post.log_evidence, log_z, 1e-10)
    bf.close(post.label, marg[0][0], 1e-10)
    for l in range(g.depth + 1):
        assert post.marginals[l].shape == (12, g.num_regions[l], g.events[l])
        for i in range(g.num_regions[l]):
            bf.close(post.region_marginal(l, i), marg[l][i], 1e-10)
            assert (post.marginals[l][:, i, g.region_events[l][i]:] == 0).all()
    post2 = posterior(g, x, chunk_size=5)  # chunking changes nothing; the label only by default
    assert not post2.has_marginals
    bf.close(post2.label, post.label, 1e-12)
    acc = bayes_optimal_accuracy(g, x, post.predict())
    assert acc.empirical == 1.0 and acc.n == x.shape[0]
    bf.close(acc.expected, marg[0][0].max(1).mean(), 1e-10)


def test_dag_map_matches_brute_force(dag):
    g, x, (_, _, _, joint, _), _ = dag
    z, best = map_events(g, x)
    bf.close(best, joint.max(1), 1e-10)
    # the configuration found has the maximal joint (ties aside, it is the brute-force argmax)
    codes = np.zeros(len(x), dtype=np.int64)
    for v, m in enumerate(bf.sizes(g)):
        codes = codes * m + z[:, v].numpy()
    bf.close(joint[np.arange(len(x)), codes], joint.max(1), 1e-10)


def test_dag_statistics_match_brute_force(dag):
    g, _, _, (p, pair, pj) = dag
    gs = graph_statistics(g)
    for l in range(g.depth + 1):
        for i in range(g.num_regions[l]):
            bf.close(gs.p[l][i], p[l][i], 1e-10)
            bf.close(gs.parents_joint[l][i], pj[l][i], 1e-10)
    for e in g.edges():
        bf.close(gs.pair[e], pair[e], 1e-10)
        s = pair[e].sum(1, keepdims=True)
        bf.close(gs.cond[e], np.where(s > 0, pair[e] / np.where(s > 0, s, 1), 0), 1e-10)


def test_query_joint_by_elimination_matches_brute_force(dag):
    """The elimination with regions kept (used for parent sets that no clique holds) on arbitrary sets."""
    g, _, _, _ = dag
    conf, logw = bf.joint(g, None)
    w = np.exp(logw)
    off = g.level_offsets
    sizes = bf.sizes(g)
    for q in ([off[1], off[1] + 2], [off[-2], off[-1] - 1, 0], [off[1] + 1]):
        code = np.zeros(len(conf), dtype=np.int64)
        for v in q:
            code = code * sizes[v] + conf[:, v]
        ref = np.bincount(code, weights=w, minlength=math.prod(sizes[v] for v in q))
        bf.close(_query_joint(g, _factors(g, None), q, 2**22).reshape(-1), ref, 1e-10)


def test_impossible_input_is_refused():
    g = Ladder.conv1d(width=5, kernels=[3, 3], strides=[1, 1], events=[2, 3, 2])
    x = bf.inputs(g, 3, seed=0)
    x[1, 0] = 0.5  # not one-hot
    for fn in (posterior, map_events):
        with pytest.raises(ValueError, match=r"^x: example\(s\) \[1\] have probability 0 under the ladder"):
            fn(g, x)


# ------------------------------------------------------------------------------------ Pyro
def _pyro_model(g: Ladder, x: torch.Tensor):
    """The topdown graph ladder as a Pyro model of one example ``x`` ``(R_d, dim)``, Gaussian leaves."""
    off, ev = g.level_offsets, g.region_events

    def model():
        z = {0: pyro.sample("z_0_0", dist.Categorical(g.prior), infer={"enumerate": "parallel"})}
        for l in range(1, g.depth + 1):
            for i, ps in enumerate(g.parents[l]):
                code = 0
                for p in ps:
                    code = code * ev[l - 1][p] + z[off[l - 1] + p]
                z[off[l] + i] = pyro.sample(f"z_{l}_{i}", dist.Categorical(g.region_tables[l][i][code]),
                                            infer={"enumerate": "parallel"})
        em = g.emission
        for j in range(g.num_regions[-1]):
            pyro.sample(f"x_{j}", dist.Normal(em.means[j][z[off[-2] + j]], em.sigma).to_event(1), obs=x[j])

    return model


def test_hand_written_pyro_enumeration_agrees():
    g = Ladder.conv1d(width=3, kernels=[2, 2], strides=[1, 1], events=[2, 3, 2], sigma=0.6, seed=11,
                      concentration=0.3)
    x = bf.inputs(g, 4, seed=3)
    post = posterior(g, x)
    zmap, _ = map_events(g, x)
    _, _, zb, _, _ = bf.posterior(g, x)
    elbo = TraceEnum_ELBO(max_plate_nesting=0)
    names = [f"z_{a}_{b}" for a, b in (r.split(".") for r in g.region_names())]
    for n in range(x.shape[0]):
        model = _pyro_model(g, x[n])
        loss = elbo.loss(model, lambda: None)
        assert abs(loss + post.log_evidence[n].item()) < 1e-8
        tr = poutine.trace(infer_discrete(model, first_available_dim=-1, temperature=0)).get_trace()
        z_pyro = np.array([int(tr.nodes[s]["value"]) for s in names])
        np.testing.assert_array_equal(z_pyro, zb[n])
        np.testing.assert_array_equal(zmap[n].numpy(), zb[n])


SIGMA = 0.6
GRAPHS = {
    "conv1d-w5-k3.3": lambda mode: Ladder.conv1d(5, [3, 3], [1, 1], events=[3, 2, 2], mode=mode, seed=1,
                                                 sigma=SIGMA, concentration=0.7),
    "conv1d-w7-k3.2.2-s2.1.1": lambda mode: Ladder.conv1d(7, [3, 2, 2], [2, 1, 1], events=[2, 3, 2, 2], mode=mode,
                                                          seed=2, sigma=SIGMA),
    "conv2d-3x3-k2.2": lambda mode: Ladder.conv2d((3, 3), [2, 2], [1, 1], events=[2, 2, 2], mode=mode, seed=3,
                                                  sigma=SIGMA, concentration=0.5),
}
CASES = [(key, mode) for key in GRAPHS for mode in ("topdown", "bottomup")] + [("fully-informative", "bottomup")]


def _graph(key: str, mode: str) -> Ladder:
    if key == "fully-informative":
        return Ladder.fully_informative_conv1d(4, [2, 3], [1, 1], concentration=0.8, seed=4, sigma=SIGMA)
    return GRAPHS[key](mode)


@pytest.mark.parametrize(("key", "mode"), CASES)
def test_enumerated_log_evidence_of_the_ladder_model_is_the_posterior_s(key, mode):
    g = _graph(key, mode)
    assert not g.is_tree() and g.mode == mode
    x = sample_ladder(g, 6, seed=7).inputs(dtype=torch.float64)
    model = LadderModel(g, group_regions=False)
    elbo = TraceEnum_ELBO(max_plate_nesting=model.max_plate_nesting)
    enumerated = config_enumerate(model.model)
    ref = posterior(g, x).log_evidence
    per = torch.tensor([-elbo.loss(enumerated, _no_guide, x=x[k: k + 1]) for k in range(x.shape[0])],
                       dtype=torch.float64)
    assert torch.allclose(per, ref, rtol=0, atol=1e-8), (per - ref).abs().max()
    # the whole batch at once (the data plate sums the examples), with num_examples given as well
    total = -elbo.loss(enumerated, _no_guide, x.shape[0], x=x)
    assert total == pytest.approx(float(ref.sum()), abs=1e-8)
    # the plain model (one Categorical per region under one data plate): the marginals too
    post = posterior(g, x, marginals=True)
    plain = config_enumerate(LadderModel(g).plain_model)
    elbo1 = TraceEnum_ELBO(max_plate_nesting=1)
    assert -elbo1.loss(plain, _no_guide, x=x) == pytest.approx(float(ref.sum()), abs=1e-8)
    marg = elbo1.compute_marginals(plain, _no_guide, x=x)
    for l in range(g.depth + 1):
        for i in range(g.num_regions[l]):
            got = marg[f"z_{g.level_offsets[l] + i}"].probs.reshape(6, -1)
            assert (got - post.region_marginal(l, i)).abs().max().item() < 1e-10, (l, i)


@pytest.mark.parametrize(("key", "mode"), CASES)
def test_infer_discrete_map_is_map_events(key, mode):
    g = _graph(key, mode)
    x = sample_ladder(g, 8, seed=11).inputs(dtype=torch.float64)
    model = LadderModel(g, group_regions=False)
    decoder = infer_discrete(config_enumerate(model.model), first_available_dim=-(model.max_plate_nesting + 1),
                             temperature=0)
    tr = poutine.trace(decoder).get_trace(x=x)
    values = {name: site["value"] for name, site in tr.nodes.items() if name.startswith("z_")}
    z_map, best = map_events(g, x)
    assert torch.equal(model.to_z(values), z_map)
    assert float(tr.log_prob_sum()) == pytest.approx(float(best.sum()), abs=1e-8)


# ------------------------------------------------------------------------------------ cost and refusal
def test_order_cost_and_refusal():
    g = Ladder.conv2d((4, 4), [2, 2, 2], [1, 1, 1], [2, 2, 2, 2])
    order = elimination_order(g)
    assert sorted(order) == sorted((l, i) for l in range(g.depth + 1) for i in range(g.num_regions[l]))
    kept = elimination_order(g, query=[(0, 0), (1, 2)])
    assert len(kept) == g.total_regions - 2 and (0, 0) not in kept and (1, 2) not in kept
    cost = treewidth_cost(g)
    assert cost.width == len(cost.clique) - 1 >= 2
    assert cost.clique_entries == 2 ** len(cost.clique)
    assert cost.log2_work >= math.log2(cost.clique_entries)
    x = bf.inputs(g, 2, seed=0)
    with pytest.raises(ValueError, match=rf"induced width {cost.width}.*{cost.clique_entries} entries"):
        posterior(g, x, max_clique=cost.clique_entries - 1)
    with pytest.raises(ValueError, match=r"induced width"):
        graph_statistics(g, max_clique=4)
    with pytest.raises(ValueError, match=r"induced width"):
        map_events(g, x, max_clique=4)
    post = posterior(g, x, max_clique=cost.clique_entries)  # at the limit: allowed
    assert post.label.shape == (2, 2)
    torch.testing.assert_close(post.label.sum(1), torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"^query: no region 9 at level 1"):
        elimination_order(g, query=[(1, 9)])


def test_min_fill_order_is_the_greedy_one_recomputed_at_every_step():
    """The heap with keys refreshed around each eliminated region gives exactly the order of recomputing
    every key at every step (the definition: min-fill, then the smaller clique table, then the index)."""
    from teachers.elimination import _greedy_order, _interaction_graph, _sizes

    def naive(adj, sizes):
        adj = [set(a) for a in adj]
        left, order = set(range(len(adj))), []
        while left:
            def key(v):
                nb = list(adj[v])
                fill = sum(1 for a in range(len(nb)) for b in range(a + 1, len(nb)) if nb[b] not in adj[nb[a]])
                return (fill, math.prod(sizes[u] for u in nb) * sizes[v], v)
            best = min(left, key=key)
            nb = sorted(adj[best])
            for a in nb:
                adj[a].update(b for b in nb if b != a)
                adj[a].discard(best)
            adj[best] = set()
            left.discard(best)
            order.append(best)
        return order

    for g in (Ladder.conv2d((4, 4), [2, 2, 2], [1, 1, 1], [2, 3, 2, 2], seed=0),
              Ladder.conv1d(9, [3, 3, 5], [1, 1, 1], [2, 2, 3, 2], mode="bottomup", seed=1),
              Ladder.random(depth=3, branching=3, events=3, mode="bottomup", seed=2), *DAGS.values()):
        g = g() if callable(g) else g
        adj = _interaction_graph(g)
        assert _greedy_order(adj, _sizes(g))[0] == naive(adj, _sizes(g))


def test_device_argument_and_results_on_it():
    """``device=`` is where the work happens and where the results are; a bad name is one clear error.
    (CPU here; the same code path serves CUDA, checked on the device machine when one is lent.)"""
    g = Ladder.conv1d(width=3, kernels=[2, 2], strides=[1, 1], events=[2, 3, 2], sigma=0.6, seed=11)
    x = bf.inputs(g, 5, seed=3)
    a, b = posterior(g, x), posterior(g, x, device="cpu")
    assert torch.equal(a.log_evidence, b.log_evidence) and b.label.device == x.device
    za, _ = map_events(g, x)
    zb, _ = map_events(g, x, device=torch.device("cpu"))
    assert torch.equal(za, zb) and zb.device == x.device
    for fn in (posterior, map_events):
        with pytest.raises(ValueError, match="device: expected a torch device"):
            fn(g, x, device="no-such-device")
    with pytest.raises(TypeError, match=r"^ladder: expected a Ladder, got str"):
        map_events("g", x)
