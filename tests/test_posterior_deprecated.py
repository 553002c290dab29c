"""The old import paths of the exact posterior (``inference.ladder_posterior``, ``inference.graph_posterior``)
work for one release: each function warns a DeprecationWarning naming the new one when called and returns the
same numbers as :mod:`inference.posterior`; the modules import silently."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import posterior_brute as bf
import pytest
import torch

import inference.posterior as new
from teachers.ladder import Ladder


def _tree():
    return Ladder.random(depth=2, branching=2, events=3, seed=1, emission="gaussian", sigma=0.7)


def _dag():
    return Ladder.conv1d(5, [3, 3], [1, 1], [2, 3, 2], sigma=0.7, seed=2)


def test_old_modules_import_silently_and_keep_every_name():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lp = importlib.reload(importlib.import_module("inference.ladder_posterior"))
        gp = importlib.reload(importlib.import_module("inference.graph_posterior"))
    for name in lp.__all__ + gp.__all__:
        assert getattr(lp if name in lp.__all__ else gp, name) is not None, name
    assert lp.LadderPosterior is new.Posterior
    assert gp.GraphStatistics is new.GraphStatistics and gp.EliminationCost is new.EliminationCost
    assert gp.MAX_CLIQUE == new.MAX_CLIQUE
    assert issubclass(gp.GraphPosterior, new.Posterior)


def test_ladder_posterior_names_warn_and_agree():
    from inference import ladder_posterior as lp

    lad = _tree()
    x = bf.inputs(lad, 20, seed=0)
    ref = new.posterior(lad, x, marginals=True)
    with pytest.warns(DeprecationWarning, match=r"ladder_posterior is deprecated .* inference\.posterior\.posterior"):
        old = lp.ladder_posterior(lad, x, marginals=True)
    assert isinstance(old, lp.LadderPosterior)
    assert torch.equal(old.log_evidence, ref.log_evidence) and torch.equal(old.label, ref.label)
    assert all(torch.equal(a, b) for a, b in zip(old.marginals, ref.marginals, strict=True))
    with pytest.warns(DeprecationWarning, match=r"use inference\.posterior\.bayes_optimal_accuracy"):
        acc = lp.bayes_optimal_accuracy(lad, x, old.predict())
    assert acc == new.bayes_optimal_accuracy(lad, x, ref.predict())
    with pytest.warns(DeprecationWarning, match=r"use inference\.posterior\.posterior_event_draws"):
        a = lp.posterior_event_draws(lad, x[:2], num_draws=5, seed=3).posterior["z"].values
    assert np.array_equal(a, new.posterior_event_draws(lad, x[:2], num_draws=5, seed=3).posterior["z"].values)
    with pytest.warns(DeprecationWarning, match=r"use inference\.posterior\.raise_impossible"), \
            pytest.raises(ValueError, match=r"example\(s\) \[1\]"):
        lp.raise_impossible(torch.tensor([0.0, -torch.inf]), 0, "the ladder")
    assert lp.ladder_posterior.__name__ == "ladder_posterior" and "Deprecated" in lp.ladder_posterior.__doc__


@pytest.mark.parametrize("make", [_tree, _dag])
def test_graph_posterior_names_warn_and_agree(make):
    from inference import graph_posterior as gp

    g = make()
    x = bf.inputs(g, 10, seed=1)
    ref = new.posterior(g, x, marginals=True)
    with pytest.warns(DeprecationWarning, match=r"graph_posterior is deprecated .* inference\.posterior\.posterior"):
        old = gp.graph_posterior(g, x)  # marginals=True by default, as before
    assert isinstance(old, gp.GraphPosterior)
    assert torch.equal(old.log_evidence, ref.log_evidence) and torch.equal(old.label, ref.label)
    for l in range(g.depth + 1):
        for i in range(g.num_regions[l]):
            assert old.marginals[l][i].shape == (10, g.region_events[l][i])
            assert torch.equal(old.marginals[l][i], ref.region_marginal(l, i))
            assert torch.equal(old.region_marginal(l, i), old.marginals[l][i])
    assert old.region_marginals() is old.marginals
    with pytest.warns(DeprecationWarning):
        assert gp.graph_posterior(g, x, marginals=False).marginals is None
    with pytest.warns(DeprecationWarning, match=r"use inference\.posterior\.map_events"):
        z, best = gp.graph_map(g, x)
    z2, best2 = new.map_events(g, x)
    assert torch.equal(z, z2) and torch.equal(best, best2)
    with pytest.warns(DeprecationWarning, match=r"use inference\.posterior\.bayes_optimal_accuracy"):
        assert gp.graph_bayes_accuracy(g, x).expected == new.bayes_optimal_accuracy(g, x).expected
    with pytest.warns(DeprecationWarning, match=r"use inference\.posterior\.graph_statistics"):
        st = gp.graph_statistics(g)
    assert all(torch.equal(a, b) for a, b in zip(st.p[-1], new.graph_statistics(g).p[-1], strict=True))
    with pytest.warns(DeprecationWarning, match=r"use inference\.posterior\.elimination_order"):
        assert gp.elimination_order(g) == new.elimination_order(g)
    with pytest.warns(DeprecationWarning, match=r"use inference\.posterior\.treewidth_cost"):
        assert gp.treewidth_cost(g) == new.treewidth_cost(g)
