"""Pyro's own tools and ArviZ on the ladder's Pyro models, unmodified (issue 37).

- ``pyro.infer.inspect.get_model_relations`` gives every site's true parents, read from the ladder's own
  parent (top-down) or children (bottom-up) lists, in every layout of :class:`teachers.pyro_model.LadderModel`
  (``"plates"``, ``"groups"``, ``"groups"`` with ``group_regions=False``) and in ``plain_model``, with no latent
  event listed as observed; ``pyro.render_model`` draws exactly those edges (it only builds a
  ``graphviz.Digraph``: no ``dot`` binary is needed).
- ``Ladder.default()``'s model, a bottom-up uniform tree in the ``"plates"`` layout, refuses enumeration with a
  ``ValueError`` naming the layout that enumerates, and that layout's enumeration is exact (against
  :mod:`inference.posterior`).
- :func:`inference.posterior.posterior_event_draws` puts the indicators of the events x determines (one-hot
  leaves, and every level of a bottom-up ladder above them) in ``observed_data``, so ``az.summary`` runs with
  every warning an error.
"""

from __future__ import annotations

import re
import tomllib
import warnings
from pathlib import Path

import arviz as az
import graphviz
import numpy as np
import pyro
import pytest
import torch
from pyro.infer import TraceEnum_ELBO, config_enumerate, infer_discrete
from pyro.infer.inspect import get_model_relations

from inference.posterior import map_events, posterior, posterior_event_draws
from teachers import Ladder, sample_ladder
from teachers.pyro_model import LadderModel
from teachers.pyro_sites import deterministic_site

pytestmark = pytest.mark.usefixtures("one_thread")

BOTH = ("topdown", "bottomup")
FORMS = ("plates", "groups", "regions", "plain")


def _tree(mode: str) -> Ladder:
    return Ladder.random(depth=2, branching=2, events=[3, 3, 2], mode=mode, concentration=0.7, seed=13,
                         emission="gaussian", sigma=0.6)


def _dag(mode: str) -> Ladder:
    """Regions of several parents and uneven events: signature groups of more than one region."""
    return Ladder.random(events=[[3], [2, 3, 2], [2, 2, 2, 2]], parents=[[()], [(0,), (0,), (0,)],
                                                                         [(0, 2), (1,), (0, 1, 2), (2,)]],
                         mode=mode, seed=4, concentration=0.7, sigma=0.6)


def _model_fn(lad: Ladder, form: str):
    """``(model function, site of (level, region))`` of one form."""
    off = lad.level_offsets
    if form == "plain":
        return LadderModel(lad, layout="groups").plain_model, lambda l, i: f"z_{off[l] + i}"
    lm = (LadderModel(lad, layout="plates") if form == "plates" else
          LadderModel(lad, group_regions=False) if form == "regions" else LadderModel(lad, layout="groups"))
    site = {(l, i): name for name, l, idx in lm._sites() for i in idx}
    return lm.model, lambda l, i: site[(l, i)]


def _true_parents(lad: Ladder, site_of) -> dict[str, set[str]]:
    """Every event site's parents from the ladder's own structure (top-down: the parents' sites; bottom-up: the
    children's, whose lookup the region is), and the inputs' parents: every leaf site."""
    d = lad.depth
    want: dict[str, set[str]] = {}
    for l in range(d + 1):
        for i in range(lad.num_regions[l]):
            if lad.mode == "topdown":
                src = {site_of(l - 1, p) for p in lad.parents[l][i]} if l > 0 else set()
            else:
                src = {site_of(l + 1, c) for c in lad.children[l][i]} if l < d else set()
            want.setdefault(site_of(l, i), set()).update(src)
    return want


def _cases():
    return [(kind, form, mode) for kind in ("tree", "dag") for form in FORMS for mode in BOTH
            if not (kind == "dag" and form == "plates")]


@pytest.mark.parametrize(("kind", "form", "mode"), _cases())
def test_model_relations_are_the_ladders_parents_and_render_model_draws_them(kind, form, mode):
    lad = (_tree if kind == "tree" else _dag)(mode)
    model, site_of = _model_fn(lad, form)
    rel = get_model_relations(model, model_kwargs={"num_examples": 2})
    want = _true_parents(lad, site_of)
    leaf_sites = {site_of(lad.depth, i) for i in range(lad.num_regions[-1])}
    x_sites = ["x"] if form != "plain" else [f"x_{i}" for i in range(lad.num_regions[-1])]
    for x_site in x_sites:  # plain: x_i reads leaf i alone
        want[x_site] = leaf_sites if form != "plain" else {site_of(lad.depth, int(x_site[2:]))}
    got = {name: set(parents) for name, parents in rel["sample_sample"].items()}
    assert got == want
    assert rel["observed"] == []  # nothing observed: every event is latent, however it is computed
    # render_model draws exactly these edges (a graphviz.Digraph: no `dot` binary involved)
    graph = pyro.render_model(model, model_kwargs={"num_examples": 2})
    assert isinstance(graph, graphviz.Digraph)
    edges = set(re.findall(r"^\s*(\w+) -> (\w+)", graph.source, flags=re.M))
    assert edges == {(p, c) for c, ps in want.items() for p in ps}


@pytest.mark.parametrize("mode", BOTH)
def test_conditioned_model_observes_x_alone_and_every_region_has_its_exact_marginal(mode, float64):
    lad = _dag(mode)
    lm = LadderModel(lad, group_regions=False)
    x = sample_ladder(lad, 3, seed=1).inputs(dtype=torch.float64)
    rel = get_model_relations(lm.condition_on(x=x))
    assert rel["observed"] == ["x"]
    assert set(rel["sample_sample"]["x"]) == {lm.site_name(lad.depth, i) for i in range(lad.num_regions[-1])}
    # bottom-up parents are enumerated sites too: Pyro's marginals of every region are the exact ones
    marginals = TraceEnum_ELBO(max_plate_nesting=2).compute_marginals(config_enumerate(lm.condition_on(x=x)),
                                                                      lambda: None)
    exact = posterior(lad, x, marginals=True)
    for name, l, (i,) in lm._sites():
        torch.testing.assert_close(marginals[name].probs.reshape(3, -1), exact.region_marginal(l, i).double(),
                                   atol=1e-10, rtol=0)


def test_default_ladder_refuses_enumeration_in_plates_and_enumerates_in_the_layout_it_names():
    lad = Ladder.default()
    assert lad.mode == "bottomup" and LadderModel(lad).layout == "plates"
    s = sample_ladder(lad, 5, seed=1)
    x = s.inputs(dtype=torch.float64)
    elbo = TraceEnum_ELBO(max_plate_nesting=LadderModel(lad).max_plate_nesting)
    for given in ({"x": x}, {"x": x, "leaves": s.leaves}):  # leaves given: the parent levels would be enumerated
        with pytest.raises(ValueError, match=r"layout='plates'.*LadderModel\(ladder, group_regions=False\)"):
            elbo.loss(config_enumerate(LadderModel(lad).condition_on(**given)), lambda: None)
    # the layout the message names enumerates, exactly
    lm = LadderModel(lad, group_regions=False)
    conditioned = config_enumerate(lm.condition_on(x=x))
    evidence = -TraceEnum_ELBO(max_plate_nesting=lm.max_plate_nesting).loss(conditioned, lambda: None)
    assert evidence == pytest.approx(float(posterior(lad, x).log_evidence.sum()), abs=1e-9)
    z_map = lm.to_z(infer_discrete(conditioned, first_available_dim=-(lm.max_plate_nesting + 1), temperature=0)())
    assert torch.equal(z_map, map_events(lad, x)[0]) and torch.equal(z_map, s.z.long())  # one-hot leaves: the truth


def test_deterministic_site_is_what_pyro_deterministic_builds():
    def model():
        with pyro.plate("data", 3):
            a = pyro.sample("a", pyro.distributions.Categorical(probs=torch.tensor([0.25, 0.75])))
            return deterministic_site("b", 2 * a)

    rel = get_model_relations(model, include_deterministic=True)  # main: AttributeError (a bare Delta)
    assert rel["sample_dist"]["b"] == "Deterministic" and rel["sample_sample"]["b"] == ["a"]
    site = pyro.poutine.trace(model).get_trace().nodes["b"]
    assert site["infer"] == {"_deterministic": True} and site["fn"]._mask is False
    assert site["value"].dtype == torch.float64


# ---------------------------------------------------------------------- ArviZ
def _onehot(z: np.ndarray, m: int) -> np.ndarray:
    return (z[..., None] == np.arange(m)).astype(np.uint8)


@pytest.mark.parametrize("mode", BOTH)
def test_event_draws_put_what_x_determines_in_observed_data_and_summarise_quietly(mode):
    lad = Ladder.random(depth=2, branching=2, events=3, mode=mode, concentration=5.0, seed=0)  # one-hot leaves
    assert lad.emission.kind == "onehot"
    s = sample_ladder(lad, 2, seed=2)
    idata = posterior_event_draws(lad, s.inputs(dtype=torch.float64), num_draws=200, seed=0)
    off, d = lad.level_offsets, lad.depth
    if mode == "topdown":  # the symptom first: "invalid value encountered in scalar divide"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            summary = az.summary(idata)
        assert len(summary) == 2 * sum(lad.num_regions[l] * lad.events[l] for l in range(d))
        assert not summary["r_hat"].isna().any()
    observed = [d] if mode == "topdown" else list(range(d + 1))  # bottom-up: every parent is a lookup of leaves
    assert set(idata.posterior.data_vars) == {f"z_onehot_{l}" for l in range(d + 1) if l not in observed}
    assert set(idata.observed_data.data_vars) == {"x"} | {f"z_onehot_{l}" for l in observed}
    z = s.z.long().numpy()
    for l in observed:
        got = idata.observed_data[f"z_onehot_{l}"]
        assert got.dims == ("example", f"region_{l}", f"event_{l}")
        np.testing.assert_array_equal(got.values, _onehot(z[:, off[l]: off[l + 1]], lad.events[l]))
    assert idata.posterior["z"].shape == (2, 200, 2, lad.total_regions)  # every region's draws stay reachable


def test_event_draws_keep_latent_leaves_in_the_posterior():
    lad = _tree("topdown")  # Gaussian leaves: x does not determine them
    idata = posterior_event_draws(lad, sample_ladder(lad, 2, seed=2).inputs(dtype=torch.float64), num_draws=20)
    assert set(idata.posterior.data_vars) == {f"z_onehot_{l}" for l in range(lad.depth + 1)}
    assert set(idata.observed_data.data_vars) == {"x"}


def test_graphviz_is_in_the_test_extra():
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert any(re.match(r"graphviz\b", dep) for dep in project["optional-dependencies"]["test"])
