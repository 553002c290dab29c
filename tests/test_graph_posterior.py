"""Exact inference on graph ladders (``inference.graph_posterior``, issue 17).

References: the tree sum-product (``inference.ladder_posterior``) and ``teachers.statistics`` on trees;
brute-force enumeration of every joint configuration of every region, written here from the definitions
in ``teachers/graph_ladder.py``'s docstring, on small DAGs; Pyro's ``TraceEnum_ELBO`` and
``infer_discrete`` on a hand-written Pyro model of a tiny DAG.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import TraceEnum_ELBO, infer_discrete
from scipy.special import logsumexp

from inference.graph_posterior import (
    elimination_order,
    graph_bayes_accuracy,
    graph_map,
    graph_posterior,
    graph_statistics,
    treewidth_cost,
)
from inference.ladder_posterior import ladder_posterior
from teachers.graph_ladder import GraphLadder
from teachers.ladder import Ladder
from teachers.statistics import exact_statistics


def _inputs(g: GraphLadder, n: int, seed: int) -> torch.Tensor:
    """Inputs from random leaf events (every leaf configuration has positive probability in these ladders)."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.randint(0, g.leaf_events, (n, g.num_regions[-1]), generator=gen)
    return g.emission.sample(z, generator=gen).double()


# ------------------------------------------------------------------------------------ brute force
def _brute(g: GraphLadder, x: torch.Tensor | None):
    """Every joint configuration ``(C, V)`` and its log weight ``(C,)`` / log joint with x ``(N, C)``."""
    sizes = [m for lvl in g.events for m in lvl]
    off = g.level_offsets
    conf = np.array(list(itertools.product(*[range(m) for m in sizes])), dtype=np.int64)
    with np.errstate(divide="ignore"):
        if g.mode == "topdown":
            logw = np.log(g.prior.numpy())[conf[:, 0]]
            for l in range(1, g.depth + 1):
                for i, ps in enumerate(g.parents[l]):
                    code = np.zeros(len(conf), dtype=np.int64)
                    for p in ps:
                        code = code * g.events[l - 1][p] + conf[:, off[l - 1] + p]
                    logw = logw + np.log(g.tables[l][i].numpy()[code, conf[:, off[l] + i]])
        else:
            logw = np.zeros(len(conf))
            for i, pr in enumerate(g.leaf_priors):
                logw = logw + np.log(pr.numpy())[conf[:, off[-2] + i]]
            for l in range(g.depth):
                for i, cs in enumerate(g.children[l]):
                    code = np.zeros(len(conf), dtype=np.int64)
                    for c in cs:
                        code = code * g.events[l + 1][c] + conf[:, off[l + 1] + c]
                    ok = g.lookups[l][i].numpy()[code] == conf[:, off[l] + i]
                    logw = np.where(ok, logw, -np.inf)
    if x is None:
        return conf, logw
    ll = g.emission.log_likelihood(x).numpy()  # (N, R, m)
    joint = np.broadcast_to(logw, (x.shape[0], len(conf))).copy()
    for j in range(g.num_regions[-1]):
        joint = joint + ll[:, j, conf[:, off[-2] + j]]
    return conf, joint


def _brute_posterior(g, x):
    conf, joint = _brute(g, x)
    log_z = logsumexp(joint, axis=1)
    post = np.exp(joint - log_z[:, None])  # (N, C)
    off = g.level_offsets
    marg = [[np.stack([post[:, conf[:, off[l] + i] == k].sum(1) for k in range(g.events[l][i])], 1)
             for i in range(g.num_regions[l])] for l in range(g.depth + 1)]
    return log_z, marg, conf[joint.argmax(1)], joint


def _brute_statistics(g):
    conf, logw = _brute(g, None)
    w = np.exp(logw)
    off = g.level_offsets
    p = [[np.bincount(conf[:, off[l] + i], weights=w, minlength=g.events[l][i]) for i in range(g.num_regions[l])]
         for l in range(g.depth + 1)]
    pair = {}
    for (l, a, i) in g.edges():
        t = np.zeros((g.events[l - 1][a], g.events[l][i]))
        np.add.at(t, (conf[:, off[l - 1] + a], conf[:, off[l] + i]), w)
        pair[(l, a, i)] = t
    pj = [[np.ones(1)]]
    for l in range(1, g.depth + 1):
        row = []
        for ps in g.parents[l]:
            code = np.zeros(len(conf), dtype=np.int64)
            for q in ps:
                code = code * g.events[l - 1][q] + conf[:, off[l - 1] + q]
            row.append(np.bincount(code, weights=w, minlength=math.prod(g.events[l - 1][q] for q in ps)))
        pj.append(row)
    return p, pair, pj


def _close(a, b, tol):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert np.abs(a - b).max() <= tol, np.abs(a - b).max()


# ------------------------------------------------------------------------------------ trees
TREES = [("topdown", None), ("topdown", 0.7), ("bottomup", None), ("bottomup", 0.7)]


@pytest.mark.parametrize(("mode", "sigma"), TREES)
def test_tree_matches_ladder_posterior_and_statistics(mode, sigma):
    lad = Ladder.random(depth=2, branching=2, events=3, seed=0, mode=mode,
                        emission="gaussian" if sigma else None, sigma=sigma)
    g = GraphLadder.from_ladder(lad)
    assert g.is_tree()
    x = _inputs(g, 40, seed=1)
    ref = ladder_posterior(lad, x, marginals=True)
    post = graph_posterior(g, x)
    _close(post.label, ref.label, 1e-10)
    _close(post.log_evidence, ref.log_evidence, 1e-10)
    for l in range(g.depth + 1):
        for i in range(g.num_regions[l]):
            _close(post.marginals[l][i], ref.marginals[l][:, i], 1e-10)
    es, gs = exact_statistics(lad), graph_statistics(g)
    for l in range(g.depth + 1):
        for i in range(g.num_regions[l]):
            _close(gs.p[l][i], es.marginals[l][i], 1e-12)
    for (l, a, i) in g.edges():
        _close(gs.pair[(l, a, i)], es.joints[l][i], 1e-12)
        _close(gs.cond[(l, a, i)], es.P_down[l][i], 1e-12)
        _close(gs.parents_joint[l][i], es.marginals[l - 1][a], 1e-12)


# ------------------------------------------------------------------------------------ small DAGs
DAGS = {
    "conv1d-td": lambda: GraphLadder.conv1d(width=5, kernels=[3, 3], strides=[1, 1], events=[2, 3, 2], sigma=0.7),
    "conv1d-td-onehot": lambda: GraphLadder.conv1d(width=5, kernels=[3, 3], strides=[1, 1], events=[2, 3, 2],
                                                   seed=3, concentration=0.5),
    "conv1d-bu": lambda: GraphLadder.conv1d(width=5, kernels=[3, 3], strides=[1, 1], events=[2, 3, 2], sigma=0.7,
                                            mode="bottomup", seed=1),
    "conv1d-bu-onehot": lambda: GraphLadder.conv1d(width=5, kernels=[3, 3], strides=[1, 1], events=[2, 3, 2],
                                                   mode="bottomup", seed=2),
    "conv2d-td": lambda: GraphLadder.conv2d((3, 3), [2, 2], [1, 1], [2, 2, 2], sigma=0.7, seed=4),
    "conv2d-bu": lambda: GraphLadder.conv2d((3, 3), [2, 2], [1, 1], [2, 2, 2], sigma=0.7, mode="bottomup", seed=5),
}


@pytest.fixture(scope="module", params=sorted(DAGS))
def dag(request):
    g = DAGS[request.param]()
    assert not g.is_tree()
    x = _inputs(g, 12, seed=7)
    return g, x, _brute_posterior(g, x), _brute_statistics(g)


def test_dag_posterior_matches_brute_force(dag):
    g, x, (log_z, marg, _, _), _ = dag
    post = graph_posterior(g, x)
    _close(post.log_evidence, log_z, 1e-10)
    _close(post.label, marg[0][0], 1e-10)
    for l in range(g.depth + 1):
        for i in range(g.num_regions[l]):
            _close(post.marginals[l][i], marg[l][i], 1e-10)
    post2 = graph_posterior(g, x, marginals=False, chunk_size=5)  # chunking changes nothing
    assert post2.marginals is None
    _close(post2.label, post.label, 1e-12)
    acc = graph_bayes_accuracy(g, x, post.predict())
    assert acc["empirical"] == 1.0 and acc["n"] == x.shape[0]
    _close(acc["expected"], marg[0][0].max(1).mean(), 1e-10)


def test_dag_map_matches_brute_force(dag):
    g, x, (_, _, _, joint), _ = dag
    z, best = graph_map(g, x)
    _close(best, joint.max(1), 1e-10)
    # the configuration found has the maximal joint (ties aside, it is the brute-force argmax)
    codes = np.zeros(len(x), dtype=np.int64)
    for v, m in enumerate([m for lvl in g.events for m in lvl]):
        codes = codes * m + z[:, v].numpy()
    _close(joint[np.arange(len(x)), codes], joint.max(1), 1e-10)


def test_dag_statistics_match_brute_force(dag):
    g, _, _, (p, pair, pj) = dag
    gs = graph_statistics(g)
    for l in range(g.depth + 1):
        for i in range(g.num_regions[l]):
            _close(gs.p[l][i], p[l][i], 1e-10)
            _close(gs.parents_joint[l][i], pj[l][i], 1e-10)
    for e in g.edges():
        _close(gs.pair[e], pair[e], 1e-10)
        s = pair[e].sum(1, keepdims=True)
        _close(gs.cond[e], np.where(s > 0, pair[e] / np.where(s > 0, s, 1), 0), 1e-10)


def test_impossible_input_is_refused():
    g = GraphLadder.conv1d(width=5, kernels=[3, 3], strides=[1, 1], events=[2, 3, 2])
    x = _inputs(g, 3, seed=0)
    x[1, 0] = 0.5  # not one-hot
    with pytest.raises(ValueError, match=r"example\(s\) \[1\]"):
        graph_posterior(g, x)


# ------------------------------------------------------------------------------------ Pyro
def _pyro_model(g: GraphLadder, x: torch.Tensor):
    """The topdown graph ladder as a Pyro model of one example ``x`` ``(R_d, dim)``, Gaussian leaves."""
    off = g.level_offsets

    def model():
        z = {0: pyro.sample("z_0_0", dist.Categorical(g.prior), infer={"enumerate": "parallel"})}
        for l in range(1, g.depth + 1):
            for i, ps in enumerate(g.parents[l]):
                code = 0
                for p in ps:
                    code = code * g.events[l - 1][p] + z[off[l - 1] + p]
                z[off[l] + i] = pyro.sample(f"z_{l}_{i}", dist.Categorical(g.tables[l][i][code]),
                                            infer={"enumerate": "parallel"})
        em = g.emission
        for j in range(g.num_regions[-1]):
            pyro.sample(f"x_{j}", dist.Normal(em.means[j][z[off[-2] + j]], em.sigma).to_event(1), obs=x[j])

    return model


def test_pyro_enumeration_agrees():
    g = GraphLadder.conv1d(width=3, kernels=[2, 2], strides=[1, 1], events=[2, 3, 2], sigma=0.6, seed=11,
                           concentration=0.3)
    x = _inputs(g, 4, seed=3)
    post = graph_posterior(g, x)
    zmap, _ = graph_map(g, x)
    _, _, zb, _ = _brute_posterior(g, x)
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


# ------------------------------------------------------------------------------------ cost and refusal
def test_order_cost_and_refusal():
    g = GraphLadder.conv2d((4, 4), [2, 2, 2], [1, 1, 1], [2, 2, 2, 2])
    order = elimination_order(g)
    assert sorted(order) == sorted((l, i) for l in range(g.depth + 1) for i in range(g.num_regions[l]))
    kept = elimination_order(g, query=[(0, 0), (1, 2)])
    assert len(kept) == g.total_regions - 2 and (0, 0) not in kept and (1, 2) not in kept
    cost = treewidth_cost(g)
    assert cost.width == len(cost.clique) - 1 >= 2
    assert cost.clique_entries == 2 ** len(cost.clique)
    assert cost.log2_work >= math.log2(cost.clique_entries)
    x = _inputs(g, 2, seed=0)
    with pytest.raises(ValueError, match=rf"induced width {cost.width}.*{cost.clique_entries} entries"):
        graph_posterior(g, x, max_clique=cost.clique_entries - 1)
    with pytest.raises(ValueError, match=r"induced width"):
        graph_statistics(g, max_clique=4)
    post = graph_posterior(g, x, max_clique=cost.clique_entries)  # at the limit: allowed
    assert post.label.shape == (2, 2)
    torch.testing.assert_close(post.label.sum(1), torch.ones(2, dtype=torch.float64))


def test_query_joint_by_elimination_matches_brute_force(dag):
    """The elimination with regions kept (used for parent sets that no clique holds) on arbitrary sets."""
    from inference.graph_posterior import _factors, _query_joint

    g, _, _, _ = dag
    conf, logw = _brute(g, None)
    w = np.exp(logw)
    off = g.level_offsets
    sizes = [m for lvl in g.events for m in lvl]
    for q in ([off[1], off[1] + 2], [off[-2], off[-1] - 1, 0], [off[1] + 1]):
        code = np.zeros(len(conf), dtype=np.int64)
        for v in q:
            code = code * sizes[v] + conf[:, v]
        ref = np.bincount(code, weights=w, minlength=math.prod(sizes[v] for v in q))
        _close(_query_joint(g, _factors(g, None), q, 2**22).reshape(-1), ref, 1e-10)


def test_device_argument_and_results_on_it():
    """``device=`` is where the work happens and where the results are; a bad name is one clear error.
    (CPU here; the same code path serves CUDA, checked on the device machine when one is lent.)"""
    g = GraphLadder.conv1d(width=3, kernels=[2, 2], strides=[1, 1], events=[2, 3, 2], sigma=0.6, seed=11)
    x = _inputs(g, 5, seed=3)
    a, b = graph_posterior(g, x), graph_posterior(g, x, device="cpu")
    assert torch.equal(a.log_evidence, b.log_evidence) and b.label.device == x.device
    za, _ = graph_map(g, x)
    zb, _ = graph_map(g, x, device=torch.device("cpu"))
    assert torch.equal(za, zb) and zb.device == x.device
    for fn in (graph_posterior, graph_map):
        with pytest.raises(ValueError, match="device: expected a torch device"):
            fn(g, x, device="no-such-device")
