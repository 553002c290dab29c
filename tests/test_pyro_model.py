"""The one Pyro model of every ladder (:class:`teachers.pyro_model.LadderModel`) against exact references.

The brute-force reference enumerates every joint configuration of a tiny ladder with numpy, from the
definitions in ``teachers/ladder.py``'s module docstring (topdown: prior times each region's table row at
the mixed-radix code of its parents, first parent most significant; bottomup: independent leaves, parents by
lookup of the code of all their children) and a Gaussian emission written out by hand; it shares no code
with the model or with :mod:`inference`.  Every ladder is checked in each layout it has: ``"plates"`` (nested
plates; uniform trees), ``"groups"`` (vectorised signature groups), ``"regions"`` (``group_regions=False``,
one site per region: the enumerable grouped form) and ``"plain"`` (:meth:`LadderModel.plain_model`).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import Predictive, TraceEnum_ELBO, config_enumerate, infer_discrete
from scipy.special import logsumexp

from teachers.graph_pyro_model import GraphLadderModel
from teachers.ladder import Ladder
from teachers.pyro_model import LadderModel

pytestmark = pytest.mark.usefixtures("one_thread")

F64 = torch.float64
SIGMA = 0.6
IRREGULAR = dict(events=[[3], [2, 3, 2], [2, 2, 2, 2]],
                 parents=[[()], [(0,), (0,), (0,)], [(0, 2), (1,), (0, 1, 2), (2,)]])
LADDERS = {
    # a uniform tree (the "plates" layout by default)
    "tree": lambda mode: Ladder.random(depth=2, branching=2, events=[3, 3, 2], mode=mode, concentration=0.7, seed=13,
                                       emission="gaussian", sigma=SIGMA),
    # a tree with per-region branching and events (grouped sites)
    "uneven-tree": lambda mode: Ladder.tree([[2], [1, 3]], [3, [2, 3], 2], mode=mode, seed=5, sigma=SIGMA,
                                            concentration=0.7),
    # DAGs: regions with several parents
    "dag-w4": lambda mode: Ladder.conv1d(4, [2, 3], [1, 1], events=[2, 2, 2], mode=mode, seed=3, sigma=SIGMA,
                                         concentration=0.7),
    "dag-w5": lambda mode: Ladder.conv1d(5, [3, 3], [1, 1], events=[3, 3, 2], mode=mode, seed=3, sigma=SIGMA,
                                         concentration=0.7),
    "conv1d-w5-k3.3": lambda mode: Ladder.conv1d(5, [3, 3], [1, 1], events=[3, 2, 2], mode=mode, seed=1,
                                                 sigma=SIGMA, concentration=0.7),
    "conv1d-w7-k3.2.2-s2.1.1": lambda mode: Ladder.conv1d(7, [3, 2, 2], [2, 1, 1], events=[2, 3, 2, 2], mode=mode,
                                                          seed=2, sigma=SIGMA),
    "conv2d-3x3-k2.2": lambda mode: Ladder.conv2d((3, 3), [2, 2], [1, 1], events=[2, 2, 2], mode=mode, seed=3,
                                                  sigma=SIGMA, concentration=0.5),
    "irregular": lambda mode: Ladder.random(events=IRREGULAR["events"], parents=IRREGULAR["parents"], mode=mode,
                                            seed=4, concentration=0.7, sigma=SIGMA),
    "fully-informative": lambda mode: Ladder.fully_informative_conv1d(4, [2, 3], [1, 1], concentration=0.8, seed=4,
                                                                      sigma=SIGMA),
}
BOTH = ("topdown", "bottomup")
CASES = [(key, mode) for key in LADDERS if key != "fully-informative" for mode in BOTH] + [
    ("fully-informative", "bottomup")]
SMALL = ["tree", "uneven-tree", "dag-w4", "dag-w5", "irregular"]


def _ladder(key: str, mode: str) -> Ladder:
    lad = LADDERS[key](mode)
    assert lad.mode == mode
    return lad


def _model(lad: Ladder, form: str) -> LadderModel:
    """The model of one form: "plates", "groups", "regions" (group_regions=False) or "plain" (its plain_model)."""
    if form == "plates":
        return LadderModel(lad, layout="plates")
    if form == "regions":
        return LadderModel(lad, group_regions=False)
    return LadderModel(lad, layout="groups")


def _forms(lad: Ladder) -> list[str]:
    return (["plates"] if lad.is_uniform() else []) + ["groups", "regions", "plain"]


def _no_guide(*args, **kwargs):
    return None


# ---------------------------------------------------------------------- brute force
def _code(z: np.ndarray, sizes) -> np.ndarray:
    code = np.zeros(z.shape[0], dtype=np.int64)
    for j, m in enumerate(sizes):
        code = code * m + z[:, j]
    return code


def brute_force(g: Ladder) -> tuple[np.ndarray, np.ndarray]:
    """Every configuration of the latent events ``(K, total_regions)`` (bottomup: of the leaves, parents
    computed) and its log-probability ``(K,)`` (-inf for impossible ones)."""
    off, ev = g.level_offsets, g.region_events
    with np.errstate(divide="ignore"):
        if g.mode == "topdown":
            conf = np.array(list(itertools.product(*[range(m) for lvl in ev for m in lvl])), dtype=np.int64)
            logp = np.log(g.prior.numpy()[conf[:, 0]])
            for l in range(1, g.depth + 1):
                for i, ps in enumerate(g.parents[l]):
                    code = _code(conf[:, [off[l - 1] + q for q in ps]], [ev[l - 1][q] for q in ps])
                    logp = logp + np.log(g.region_tables[l][i].numpy()[code, conf[:, off[l] + i]])
            return conf, logp
        leaves = np.array(list(itertools.product(*[range(m) for m in ev[-1]])), dtype=np.int64)
        conf = np.zeros((leaves.shape[0], g.total_regions), dtype=np.int64)
        conf[:, off[-2]:] = leaves
        logp = np.zeros(leaves.shape[0])
        for i in range(g.num_regions[-1]):
            logp = logp + np.log(g.leaf_priors[i].numpy()[leaves[:, i]])
    for l in range(g.depth - 1, -1, -1):
        for i in range(g.num_regions[l]):
            ch = [c for c, ps in enumerate(g.parents[l + 1]) if i in ps]
            code = _code(conf[:, [off[l + 1] + c for c in ch]], [ev[l + 1][c] for c in ch])
            conf[:, off[l] + i] = g.lookups[l][i].numpy()[code]
    return conf, logp


def log_emission(g: Ladder, x: np.ndarray, leaves: np.ndarray) -> np.ndarray:
    """log p(x_n | leaves_k) for a Gaussian emission: ``(N, K)`` from x ``(N, R, dim)`` and leaves ``(K, R)``."""
    mu = g.emission.means.numpy()  # (R, m, dim)
    s2 = float(g.emission.sigma) ** 2
    dim = mu.shape[-1]
    r = np.arange(leaves.shape[1])
    means = mu[r[None, :], leaves]  # (K, R, dim)
    sq = ((x[:, None] - means[None]) ** 2).sum(-1)  # (N, K, R)
    return (-0.5 * sq / s2 - 0.5 * dim * math.log(2 * math.pi * s2)).sum(-1)


def log_joint(g: Ladder, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """``(configs (K, total_regions), log p(z_k, x_n) (N, K))``."""
    conf, logp = brute_force(g)
    return conf, logp[None] + log_emission(g, x.numpy(), conf[:, g.level_offsets[-2]:])


def check_frequencies(g: Ladder, z: torch.Tensor, tol: float) -> None:
    """Every region's marginal and every edge's joint frequency within ``tol`` of brute force."""
    conf, logp = brute_force(g)
    p = np.exp(logp)
    z = z.long().numpy()
    n = z.shape[0]
    ev = [m for lvl in g.region_events for m in lvl]
    for r, m in enumerate(ev):
        exact = np.bincount(conf[:, r], weights=p, minlength=m)
        freq = np.bincount(z[:, r], minlength=m) / n
        assert np.abs(freq - exact).max() < tol, (r, freq, exact)
    off = g.level_offsets
    for l, a, b in g.edges():
        a, b, mb = off[l - 1] + a, off[l] + b, ev[off[l] + b]
        exact = np.bincount(conf[:, a] * mb + conf[:, b], weights=p, minlength=ev[a] * mb)
        freq = np.bincount(z[:, a] * mb + z[:, b], minlength=ev[a] * mb) / n
        assert np.abs(freq - exact).max() < tol, (a, b, freq, exact)


def sample(g: Ladder, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(z (n, total_regions) int64, x (n, R_d, dim) float64)`` drawn by the model with a seeded generator."""
    lm = LadderModel(g)
    out = lm.model(n, generator=torch.Generator().manual_seed(seed))
    return lm.to_z(out), out["x"].reshape(n, g.num_regions[-1], g.emission.dim).to(F64)


def _label_shape(lm: LadderModel, n: int) -> tuple[int, ...]:
    return (n, *([1] * lm.ladder.depth)) if lm.layout == "plates" else (n, 1)


def _plain_z(values: dict[str, torch.Tensor], g: Ladder) -> torch.Tensor:
    """The event matrix of plain_model's per-region sites ``"z_<g>"`` ``(..., N)``."""
    return torch.stack([values[f"z_{r}"].reshape(-1) for r in range(g.total_regions)], 1).long()


# ---------------------------------------------------------------------- log densities
@pytest.mark.parametrize(("key", "mode"), [(k, m) for k in SMALL for m in BOTH])
def test_trace_log_prob_is_brute_force_log_joint(key, mode):
    g = _ladder(key, mode)
    z, x = sample(g, 40, seed=2)
    conf, lj = log_joint(g, x)
    index = {tuple(c): k for k, c in enumerate(conf)}
    expected = float(lj[np.arange(len(z)), [index[tuple(r)] for r in z.numpy()]].sum())
    assert np.isfinite(expected)
    for form in _forms(g):
        if form == "plain":
            data = {f"z_{r}": z[:, r] for r in range(g.total_regions)}
            tr = poutine.trace(poutine.condition(LadderModel(g).plain_model, data=data)).get_trace(x=x)
            assert float(tr.log_prob_sum()) == pytest.approx(expected, abs=1e-8), form
            continue
        model = _model(g, form)
        tr = poutine.trace(poutine.condition(model.model, data=model.site_values(z))).get_trace(x=x)
        assert float(tr.log_prob_sum()) == pytest.approx(expected, abs=1e-8), form
        # the trace's values map back to the same event matrix (bottomup: parents recomputed by the model)
        values = {name: site["value"] for name, site in tr.nodes.items() if name in model.site_names()}
        assert torch.equal(model.to_z(values), z), form
        # observing the leaves (bottomup: the whole configuration) through the model's own argument
        if mode == "bottomup":
            tr = poutine.trace(model.model).get_trace(x=x, leaves=z[:, g.level_offsets[-2]:])
            assert float(tr.log_prob_sum()) == pytest.approx(expected, abs=1e-8), form


@pytest.mark.parametrize(("key", "mode"), CASES)
def test_enumerated_log_evidence_is_brute_force(key, mode):
    g = _ladder(key, mode)
    _, x = sample(g, 6, seed=7)
    _, lj = log_joint(g, x)
    ref = logsumexp(lj, axis=1)  # (N,) log p(x_n)
    per_region = LadderModel(g, group_regions=False)
    elbo = TraceEnum_ELBO(max_plate_nesting=per_region.max_plate_nesting)
    enumerated = config_enumerate(per_region.model)
    per = np.array([-elbo.loss(enumerated, _no_guide, x=x[k: k + 1]) for k in range(x.shape[0])])
    assert np.abs(per - ref).max() < 1e-8
    # the whole batch at once (the data plate sums the examples), with num_examples given as well
    assert -elbo.loss(enumerated, _no_guide, x.shape[0], x=x) == pytest.approx(float(ref.sum()), abs=1e-8)
    plain = -TraceEnum_ELBO(max_plate_nesting=1).loss(config_enumerate(per_region.plain_model), _no_guide, x=x)
    assert plain == pytest.approx(float(ref.sum()), abs=1e-8)
    if g.is_uniform() and mode == "topdown":
        tree = LadderModel(g)
        assert tree.layout == "plates" and tree.max_plate_nesting == g.depth + 1
        got = -TraceEnum_ELBO(max_plate_nesting=tree.max_plate_nesting).loss(config_enumerate(tree.model), _no_guide,
                                                                              x=x)
        assert got == pytest.approx(float(ref.sum()), abs=1e-8)


@pytest.mark.parametrize("mode", BOTH)
def test_vectorised_groups_refuse_enumeration(mode):
    """The vectorised form raises instead of a silently wrong answer."""
    g = _ladder("conv1d-w5-k3.3", mode)
    _, x = sample(g, 4, seed=1)
    with pytest.raises(ValueError, match="group_regions=False"):
        TraceEnum_ELBO(max_plate_nesting=2).loss(config_enumerate(LadderModel(g).model), _no_guide, x=x)


@pytest.mark.parametrize(("key", "mode"), CASES)
def test_infer_discrete_map_is_brute_force_map(key, mode):
    g = _ladder(key, mode)
    _, x = sample(g, 8, seed=11)
    conf, lj = log_joint(g, x)
    z_map, best = torch.as_tensor(conf[lj.argmax(1)]), lj.max(1)
    forms = ["regions", "plain"] + (["plates"] if g.is_uniform() and mode == "topdown" else [])
    for form in forms:
        model = _model(g, form)
        fn, dim = (model.plain_model, -2) if form == "plain" else (model.model, -(model.max_plate_nesting + 1))
        tr = poutine.trace(infer_discrete(config_enumerate(fn), first_available_dim=dim, temperature=0)).get_trace(x=x)
        values = {name: site["value"] for name, site in tr.nodes.items() if name.startswith("z_")}
        got = _plain_z(values, g) if form == "plain" else model.to_z(values)
        assert torch.equal(got, z_map), form
        assert float(tr.log_prob_sum()) == pytest.approx(float(best.sum()), abs=1e-8), form


# ---------------------------------------------------------------------- sampling
@pytest.mark.parametrize(("key", "mode"), [(k, m) for k in ("tree", "dag-w5", "irregular") for m in BOTH])
def test_predictive_frequencies(key, mode):
    g = _ladder(key, mode)
    model = LadderModel(g)
    n = 40_000
    pyro.set_rng_seed(3)
    with torch.no_grad():
        out = Predictive(model.model, num_samples=1)(n, emit=False)
    z = model.to_z(out)
    assert z.shape == (n, g.total_regions)
    check_frequencies(g, z, 5 / math.sqrt(n))
    # the seeded generator draws from the same distribution, reproducibly, and compact= keeps uint8
    gen = model.model(n, emit=False, generator=torch.Generator().manual_seed(5), compact=True)
    assert all(v.dtype == torch.uint8 for name, v in gen.items() if name in model.sample_site_names())
    z = model.to_z(gen)
    check_frequencies(g, z, 5 / math.sqrt(n))
    again = model.to_z(model.model(n, emit=False, generator=torch.Generator().manual_seed(5)))
    assert torch.equal(again, z)


@pytest.mark.parametrize("mode", BOTH)
def test_plain_model_predictive_frequencies_on_a_dag(mode):
    g = _ladder("conv1d-w5-k3.3", mode)
    n = 40_000
    pyro.set_rng_seed(4)
    with torch.no_grad():
        out = Predictive(LadderModel(g).plain_model, num_samples=1)(n, emit=False)
    check_frequencies(g, _plain_z(out, g), 5 / math.sqrt(n))


# ---------------------------------------------------------------------- names and layouts
def test_site_names_map_to_regions():
    g = _ladder("conv1d-w5-k3.3", "topdown")
    model = LadderModel(g)
    assert model.layout == "groups" and model.max_plate_nesting == 2
    covered = []
    for name in model.site_names():
        level, regions = model.regions_of(name)
        covered += [g.level_offsets[level] + i for i in regions]
        if level:  # a group shares its signature
            assert len({(g.parent_sizes(level, i), g.region_events[level][i]) for i in regions}) == 1
    assert sorted(covered) == list(range(g.total_regions))
    single = LadderModel(g, group_regions=False)
    assert single.regions_of("z_2_g3") == (2, (3,))
    assert single.site_names() == [f"z_{l}_g{i}" for l in range(3) for i in range(g.num_regions[l])]
    for bad in ("z_9_g0", "z_1", "x", "z_1_g-1", 3):
        with pytest.raises(ValueError, match="site"):
            model.regions_of(bad)
    # a uniform tree: one site per level, covering the level
    tree = LadderModel(_ladder("tree", "bottomup"))
    assert tree.layout == "plates" and tree.site_names() == ["z_0", "z_1", "z_2"]
    assert tree.sample_site_names() == ["z_2"] and tree.site_name(1) == "z_1"
    assert tree.regions_of("z_1") == (1, (0, 1))
    for bad in ("z_3", "z_1_g0", "level_1"):
        with pytest.raises(ValueError, match=r"site: expected 'z_<level>'"):
            tree.regions_of(bad)
    with pytest.raises(ValueError, match="group"):
        tree.site_name(1, 1)


@pytest.mark.parametrize("mode", BOTH)
def test_layouts_of_a_tree_give_the_same_densities_and_matrices(mode):
    """Code written once: site_values / to_z / condition_on mean the same in both layouts of one tree."""
    g = _ladder("tree", mode)
    z, x = sample(g, 30, seed=8)
    sums = []
    for model in (LadderModel(g), LadderModel(g, layout="groups"), LadderModel(g, group_regions=False)):
        data = model.site_values(z)
        assert set(data) == set(model.sample_site_names())
        tr = poutine.trace(poutine.condition(model.model, data=data)).get_trace(x=x)
        sums.append(float(tr.log_prob_sum()))
        assert torch.equal(model.to_z({k: v for k, v in model.site_values(z, deterministic=True).items()}), z)
        assert torch.equal(model.flatten(model.site_values(z, deterministic=True)), z)
        with torch.no_grad():
            pred = Predictive(model.model, num_samples=3)(5, emit=False)
        assert model.to_z(pred).shape == (15, g.total_regions)
    assert sums == pytest.approx([sums[0]] * 3, abs=1e-9)
    assert LadderModel(g).site_values(z)[f"z_{g.depth}"].shape == (30, 2, 2)


def test_layout_errors_are_clear():
    dag, tree = _ladder("conv1d-w5-k3.3", "bottomup"), _ladder("tree", "bottomup")
    with pytest.raises(ValueError, match=r"^layout: 'plates' .* needs a uniform tree"):
        LadderModel(dag, layout="plates")
    with pytest.raises(ValueError, match=r"^layout: expected 'plates' or 'groups'"):
        LadderModel(tree, layout="tree")
    with pytest.raises(ValueError, match=r"^group_regions: only for layout='groups'"):
        LadderModel(tree, layout="plates", group_regions=False)
    with pytest.raises(TypeError, match=r"^ladder: expected a Ladder, got"):
        LadderModel("ladder")
    grouped = LadderModel(dag)
    for call, name in ((lambda: grouped.plates(3), "plates"), (lambda: grouped.leaf_shape(3), "leaf_shape"),
                       (lambda: grouped.parent_events(0, torch.zeros(2, 3)), "parent_events")):
        with pytest.raises(ValueError, match=rf"^{name}: only for layout='plates'"):
            call()
    with pytest.raises(ValueError, match=r"^plates: only for layout='plates'"):
        LadderModel(tree, layout="groups").plates(3)


def test_bad_arguments():
    g = _ladder("conv1d-w5-k3.3", "topdown")
    model = LadderModel(g)
    with pytest.raises(ValueError, match="num_examples"):
        model.model(0)
    with pytest.raises(ValueError, match="num_examples"):
        model.model()
    with pytest.raises(ValueError, match="x"):
        model.model(x=torch.zeros(3, 4, 2))
    with pytest.raises(ValueError, match="num_examples: inconsistent"):
        model.model(4, x=torch.zeros(3, 5, 2))
    with pytest.raises(ValueError, match="z"):
        model.site_values(torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="missing"):
        model.to_z({"z_0_g0": torch.zeros(3, 1)})


# ---------------------------------------------------------------------- the deprecated name
@pytest.mark.parametrize("group_regions", [True, False])
@pytest.mark.parametrize("key", ["tree", "conv1d-w5-k3.3"])
def test_old_name_warns_and_gives_the_same_values(key, group_regions):
    g = _ladder(key, "topdown")
    with pytest.warns(DeprecationWarning, match=r"teachers\.pyro_model\.LadderModel"):
        old = GraphLadderModel(g, group_regions=group_regions)
    new = LadderModel(g, layout="groups", group_regions=group_regions)
    assert isinstance(old, LadderModel) and old.graph is g and old.layout == "groups"
    assert old.max_plate_nesting == GraphLadderModel.max_plate_nesting == 2
    assert old.site_names() == new.site_names() and old.groups == new.groups
    assert GraphLadderModel.site_name(1, 2) == "z_1_g2"  # still a static method
    a = old.model(50, generator=torch.Generator().manual_seed(1))
    b = new.model(50, generator=torch.Generator().manual_seed(1))
    assert torch.equal(old.to_z(a), new.to_z(b)) and torch.equal(a["x"], b["x"])
    z, x = old.to_z(a), a["x"].to(F64)
    lp = [float(poutine.trace(poutine.condition(m.model, data=m.site_values(z))).get_trace(x=x).log_prob_sum())
          for m in (old, new)]
    assert lp[0] == pytest.approx(lp[1], abs=1e-12)
    with pytest.warns(DeprecationWarning):
        with pytest.raises(TypeError, match="GraphLadder"):
            GraphLadderModel(object())


# ---------------------------------------------------------------------- observations and conditioning
@pytest.mark.parametrize("key", ["tree", "conv1d-w5-k3.3"])
@pytest.mark.parametrize("mode", BOTH)
def test_out_of_support_observed_leaves_raise_pyros_error(key, mode):
    g = _ladder(key, mode)
    lm = LadderModel(g)
    leaves = torch.zeros(4, g.num_regions[-1], dtype=torch.long)
    leaves[1, 2] = 2  # leaves have 2 events
    with pyro.validation_enabled(True):
        with pytest.raises(ValueError, match=r"Expected value argument .* within the support"):
            poutine.trace(lm.model).get_trace(leaves=leaves, emit=False)
        with pytest.raises(ValueError, match="within the support"):
            lm.model(leaves=leaves.double() + 0.5, emit=False)
    # enumeration and exact inference still work with validation on
    if mode == "topdown":
        lm = LadderModel(g) if g.is_uniform() else LadderModel(g, group_regions=False)
        _, x = sample(g, 5, seed=3)
        with pyro.validation_enabled(True):
            loss = TraceEnum_ELBO(max_plate_nesting=lm.max_plate_nesting).loss(config_enumerate(lm.model),
                                                                               _no_guide, x=x)
        assert -loss == pytest.approx(float(logsumexp(log_joint(g, x)[1], axis=1).sum()), abs=1e-9)


@pytest.mark.parametrize("key", ["tree", "conv1d-w5-k3.3", "irregular"])
def test_condition_on_flat_labels_topdown_equals_poutine_condition(key, float64):
    g = _ladder(key, "topdown")
    lm = LadderModel(g) if g.is_uniform() else LadderModel(g, group_regions=False)
    z, x = sample(g, 12, seed=4)
    y, n = z[:, 0], z.shape[0]
    label = lm.site_name(0, 0)
    conditioned = lm.condition_on(y=y, x=x.reshape(n, -1))
    reference = poutine.condition(lm.model, data={label: y.reshape(_label_shape(lm, n))})
    tr = poutine.trace(conditioned).get_trace()
    ref = poutine.trace(poutine.replay(reference, trace=tr)).get_trace(x=x)
    tr.compute_log_prob()
    ref.compute_log_prob()
    for name in [*lm.site_names(), "x"]:
        assert torch.equal(tr.nodes[name]["log_prob"], ref.nodes[name]["log_prob"]), name
    assert tr.nodes[label]["is_observed"]
    # exact: log p(x, y), by brute force
    conf, lj = log_joint(g, x)
    want = float(sum(logsumexp(lj[k, conf[:, 0] == int(y[k])]) for k in range(n)))
    elbo = TraceEnum_ELBO(max_plate_nesting=lm.max_plate_nesting)
    assert -elbo.loss(config_enumerate(conditioned), _no_guide) == pytest.approx(want, abs=1e-9)
    assert -elbo.loss(config_enumerate(reference), _no_guide, x=x) == pytest.approx(want, abs=1e-9)
    # infer_discrete keeps the observed labels; Predictive runs it
    out = infer_discrete(config_enumerate(conditioned), first_available_dim=-(lm.max_plate_nesting + 1),
                         temperature=0)()
    assert torch.equal(out[label].reshape(n), y)
    pred = Predictive(conditioned, num_samples=3, parallel=True)()
    site = lm.site_name(1, 0)
    assert tuple(pred[site].shape) == ((3, n, 2, 1) if lm.layout == "plates" else (3, n, 1))
    if lm.layout == "groups":  # the vectorised grouped form conditions and samples too
        vec = LadderModel(g)
        tr = poutine.trace(vec.condition_on(y=y, x=x)).get_trace()
        assert tr.nodes[label]["is_observed"]
        assert torch.equal(vec.to_z({k: tr.nodes[k]["value"] for k in vec.site_names()})[:, 0], y)
        pred = Predictive(vec.condition_on(y=y), num_samples=2)()
        assert vec.to_z(pred).shape == (2 * n, g.total_regions) and pred["x"].shape == (2, n, g.num_regions[-1], 2)


@pytest.mark.parametrize("key", ["tree", "conv1d-w5-k3.3"])
def test_condition_on_bottomup_labels_is_an_indicator_factor(key, float64):
    g = _ladder(key, "bottomup")
    lm = LadderModel(g)
    z, x = sample(g, 12, seed=4)
    y, n, leaves = z[:, 0], z.shape[0], z[:, g.level_offsets[-2]:]
    tr = poutine.trace(lm.condition_on(y=y, x=x.reshape(n, -1), leaves=leaves)).get_trace()
    ref = poutine.trace(lm.model).get_trace(x=x, leaves=leaves)
    tr.compute_log_prob()
    ref.compute_log_prob()
    assert tr.log_prob_sum().item() == pytest.approx(ref.log_prob_sum().item(), abs=1e-12)
    wrong = y.clone()
    wrong[0] = (wrong[0] + 1) % g.num_classes
    tr = poutine.trace(lm.condition_on(y=wrong, x=x, leaves=leaves)).get_trace()
    tr.compute_log_prob()
    assert torch.isneginf(tr.nodes["z_0_observed"]["log_prob"]).sum() == 1
    if not g.is_uniform():  # enumerated over the leaves, the factor gives the exact log p(x, y)
        per_region = LadderModel(g, group_regions=False)
        conf, lj = log_joint(g, x)
        want = float(sum(logsumexp(lj[k, conf[:, 0] == int(y[k])]) for k in range(n)))
        got = -TraceEnum_ELBO(max_plate_nesting=2).loss(config_enumerate(per_region.condition_on(y=y, x=x)),
                                                        _no_guide)
        assert got == pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize("key", ["tree", "conv1d-w5-k3.3"])
def test_condition_on_shape_errors_name_the_argument(key):
    g = _ladder(key, "topdown")
    lm = LadderModel(g)
    z, x = sample(g, 5, seed=4)
    y, leaves = z[:, 0], z[:, g.level_offsets[-2]:]
    r, dim = g.num_regions[-1], g.emission.dim
    with pytest.raises(ValueError, match=r"^y: expected labels of shape \(N,\), got \(5, 1\)"):
        lm.condition_on(y=y[:, None], x=x)
    with pytest.raises(ValueError, match=rf"^x: expected shape \(N, {r * dim}\) .* or \(N, {r}, {dim}\), got \(5, 7\)"):
        lm.condition_on(y=y, x=x.reshape(5, -1)[:, :7])
    with pytest.raises(ValueError, match=rf"^leaves: expected shape \(N, {r}\), got \(5, 3\)"):
        lm.condition_on(leaves=leaves[:, :3])
    with pytest.raises(ValueError, match=r"^condition_on: inconsistent numbers of examples"):
        lm.condition_on(y=y[:4], x=x)
    with pytest.raises(ValueError, match=r"^y: expected integer labels in \[0, 3\), got dtype"):
        lm.condition_on(y=y.double())
    with pytest.raises(ValueError, match=r"^y: expected integer labels in \[0, 3\), got values"):
        lm.condition_on(y=y + 3)
    with pytest.raises(ValueError, match=r"^condition_on: give y, x or leaves"):
        lm.condition_on()
    with pytest.raises(ValueError, match=r"^y: expected labels of shape \(N,\) = \(5,\)"):
        lm.model(x=x, y=y[:3])
