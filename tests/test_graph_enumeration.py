"""Pyro enumeration of the library's graph ladder model (``teachers.graph_pyro_model.GraphLadderModel``, issue 17).

On small convolution DAGs (regions with several parents), in both modes, with Gaussian leaves:
``TraceEnum_ELBO``'s loss of the enumerated per-region model (``group_regions=False``) is -log p(x), equal
per example to the junction tree's ``graph_posterior(g, x).log_evidence``, and ``infer_discrete`` at
temperature 0 gives the joint MAP of ``graph_map`` (and its log p(z_map, x)).  Bottom-up regions above the
leaves are observed float64 ``Delta`` sites (deterministic), so only the leaves are enumerated.
"""

from __future__ import annotations

import pytest
import torch
from pyro import poutine
from pyro.infer import TraceEnum_ELBO, config_enumerate, infer_discrete

from inference.graph_posterior import graph_map, graph_posterior
from teachers.graph_ladder import GraphLadder
from teachers.graph_pyro_model import GraphLadderModel
from teachers.graph_sampling import sample_graph_ladder

SIGMA = 0.6
GRAPHS = {
    "conv1d-w5-k3.3": lambda mode: GraphLadder.conv1d(5, [3, 3], [1, 1], events=[3, 2, 2], mode=mode, seed=1,
                                                      sigma=SIGMA, concentration=0.7),
    "conv1d-w7-k3.2.2-s2.1.1": lambda mode: GraphLadder.conv1d(7, [3, 2, 2], [2, 1, 1], events=[2, 3, 2, 2],
                                                               mode=mode, seed=2, sigma=SIGMA),
    "conv2d-3x3-k2.2": lambda mode: GraphLadder.conv2d((3, 3), [2, 2], [1, 1], events=[2, 2, 2], mode=mode,
                                                       seed=3, sigma=SIGMA, concentration=0.5),
}
CASES = [(key, mode) for key in GRAPHS for mode in ("topdown", "bottomup")] + [("fully-informative", "bottomup")]


def _graph(key: str, mode: str) -> GraphLadder:
    if key == "fully-informative":
        return GraphLadder.fully_informative_conv1d(4, [2, 3], [1, 1], concentration=0.8, seed=4, sigma=SIGMA)
    return GRAPHS[key](mode)


def _no_guide(*args, **kwargs):
    return None


@pytest.mark.parametrize(("key", "mode"), CASES)
def test_enumerated_log_evidence_is_the_junction_tree_s_per_example(key, mode):
    g = _graph(key, mode)
    assert not g.is_tree() and g.mode == mode
    x = sample_graph_ladder(g, 6, seed=7).inputs(dtype=torch.float64)
    model = GraphLadderModel(g, group_regions=False)
    elbo = TraceEnum_ELBO(max_plate_nesting=GraphLadderModel.max_plate_nesting)
    enumerated = config_enumerate(model.model)
    ref = graph_posterior(g, x, marginals=False).log_evidence
    per = torch.tensor([-elbo.loss(enumerated, _no_guide, x=x[k: k + 1]) for k in range(x.shape[0])],
                       dtype=torch.float64)
    assert torch.allclose(per, ref, rtol=0, atol=1e-8), (per - ref).abs().max()
    # the whole batch at once (the data plate sums the examples), with num_examples given as well
    total = -elbo.loss(enumerated, _no_guide, x.shape[0], x=x)
    assert total == pytest.approx(float(ref.sum()), abs=1e-8)


@pytest.mark.parametrize(("key", "mode"), CASES)
def test_infer_discrete_map_is_graph_map(key, mode):
    g = _graph(key, mode)
    x = sample_graph_ladder(g, 8, seed=11).inputs(dtype=torch.float64)
    model = GraphLadderModel(g, group_regions=False)
    decoder = infer_discrete(config_enumerate(model.model), first_available_dim=-(model.max_plate_nesting + 1),
                             temperature=0)
    tr = poutine.trace(decoder).get_trace(x=x)
    values = {name: site["value"] for name, site in tr.nodes.items() if name.startswith("z_")}
    z_map, best = graph_map(g, x)
    assert torch.equal(model.to_z(values), z_map)
    assert float(tr.log_prob_sum()) == pytest.approx(float(best.sum()), abs=1e-8)
