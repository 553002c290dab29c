"""Every reader of a ladder's tables on a ladder whose children are drawn jointly (productions; issue 38): each is
checked against brute force over every derivation (tests/rhm_enumerate.py) of a small RHM and of a ladder with
per-region productions of irregular probabilities above a level of independent children.  Pairwise statistics
are right from the children's marginal tables; Thm 2's conditions, the ceilings' joint of the root's children,
the readout ladder and the enumerated P(x, y) read the productions; Thm 8's demos refuse them."""

from __future__ import annotations

import math

import pytest
import torch
from rhm_enumerate import enumerate_derivations
from test_rhm_spec import _mixed

from smaso.student.ceiling import readout_ceiling, top_joint
from smaso.student.readout import readout_events, readout_ladder
from smaso.theorems.conditions import knowledge_conditions, knowledge_terms
from smaso.theorems.disentangle import region_marginals
from smaso.theorems.marginalized import enumerate_inputs
from teachers import Ladder
from teachers.emission import one_hot
from teachers.productions import Productions
from teachers.statistics import exact_statistics

LADDERS = {"rhm": Ladder.rhm(3, 2, 2, 2, 2, seed=4), "rhm-pcsl": Ladder.rhm(4, 2, 2, 2, 2, seed=1, rules="pcsl"),
           "mixed": _mixed()}
BRUTE = {name: enumerate_derivations(lad) for name, lad in LADDERS.items()}
TOL = 1e-12


def _entropy(z: torch.Tensor, p: torch.Tensor, cols: list[int]) -> float:
    """H of the columns ``cols`` of the derivations ``z`` weighted by ``p`` (nats)."""
    if not cols:
        return 0.0
    _, inv = torch.unique(z[:, cols], dim=0, return_inverse=True)
    q = torch.zeros(int(inv.max()) + 1, dtype=torch.float64).index_add_(0, inv, p)
    return float(-torch.special.xlogy(q, q).sum())


def _cmi(z: torch.Tensor, p: torch.Tensor, u: list[int], v: list[int], x: list[int]) -> float:
    """I(U; X | V) = H(U, V) + H(V, X) - H(V) - H(U, V, X)."""
    return _entropy(z, p, u + v) + _entropy(z, p, v + x) - _entropy(z, p, v) - _entropy(z, p, u + v + x)


def _leaves(lad: Ladder, level: int, region: int) -> list[int]:
    """Columns of z of the leaves under a region (a uniform tree numbers them in contiguous blocks)."""
    n = math.prod(lad.branching[level:])
    return list(range(lad.level_offsets[-2] + region * n, lad.level_offsets[-2] + (region + 1) * n))


@pytest.mark.parametrize("name", sorted(LADDERS))
def test_exact_statistics_are_right_from_the_marginal_tables(name):
    """P(z_alpha) and P(z_parent, z_child) along every edge: pairwise, so the children's marginal tables give
    them exactly even where siblings are drawn jointly."""
    lad, (z, p) = LADDERS[name], BRUTE[name]
    st = exact_statistics(lad)
    off = lad.level_offsets
    for l in range(lad.depth + 1):
        for r in range(lad.num_regions[l]):
            want = torch.zeros(lad.events[l], dtype=torch.float64).index_add_(0, z[:, off[l] + r], p)
            assert torch.allclose(st.marginals[l][r], want, atol=TOL, rtol=0)
        if l == 0:
            continue
        for c, a in enumerate(lad.parent_index(l).tolist()):
            want = torch.zeros(lad.events[l - 1], lad.events[l], dtype=torch.float64)
            want.index_put_((z[:, off[l - 1] + a], z[:, off[l] + c]), p, accumulate=True)
            assert torch.allclose(st.joints[l][c], want, atol=TOL, rtol=0)


@pytest.mark.parametrize("name", sorted(LADDERS))
def test_thm2_conditions_exact_on_productions_match_brute_force(name):
    """focus I(x_beta; z_alpha | z_beta) and broadness I(x_alpha; z_beta | z_alpha) of every pair, and the
    conditional entropies, against the brute-force joint of every derivation; the broadness needs the siblings'
    joint law (it differs from what the marginal tables alone would give)."""
    lad, (z, p) = LADDERS[name], BRUTE[name]
    rows = knowledge_conditions(lad, method="exact")
    off = lad.level_offsets
    for row in rows:
        l = row["level"]
        for c, a in enumerate(lad.parent_index(l).tolist()):
            u, v = [off[l - 1] + a], [off[l] + c]
            focus = _cmi(z, p, u, v, _leaves(lad, l, c))
            broad = _cmi(z, p, v, u, _leaves(lad, l - 1, a))
            assert abs(float(row["focus"][c]) - focus) < 1e-10
            assert abs(float(row["broadness"][c]) - broad) < 1e-10
            h_pc = _entropy(z, p, u + v) - _entropy(z, p, v)
            assert abs(float(row["H_parent_given_child"][c]) - h_pc) < 1e-10
    assert max(float(r["broadness"].max()) for r in rows) > 0.1  # not a vacuous comparison
    if name != "rhm-pcsl":  # (whose rules happen to give the same level-1 broadness either way)
        same_tables = Ladder(lad.branching, lad.events, prior=lad.prior, tables=list(lad.tables))
        wrong = knowledge_conditions(same_tables, method="exact")[0]["broadness"]
        assert float((wrong - rows[0]["broadness"]).abs().max()) > 0.1  # the marginal tables alone are wrong


@pytest.mark.parametrize("name", sorted(LADDERS))
def test_knowledge_terms_average_to_the_exact_conditions(name):
    """The Monte-Carlo terms at every derivation, weighted by its probability, are the exact I (the sampler is not
    needed: the derivations are enumerated)."""
    lad, (z, p) = LADDERS[name], BRUTE[name]
    x = one_hot(z[:, lad.level_offsets[-2]:], lad.events[-1], torch.float64)
    terms = knowledge_terms(lad, x, z)
    for t, row in zip(terms, knowledge_conditions(lad, method="exact"), strict=True):
        for key in ("focus", "broadness"):
            assert torch.allclose(p @ t[key], row[key], atol=1e-10, rtol=0)


@pytest.mark.parametrize("name", sorted(LADDERS))
def test_ceilings_read_the_root_productions(name):
    """P(z_children, y) and the readout ceiling sum_z max_y P(z, y), against the brute-force joint."""
    lad, (z, p) = LADDERS[name], BRUTE[name]
    kids = [lad.level_offsets[1] + c for c in lad.children[0][0]]
    sizes = [lad.events[1]] * len(kids)
    want = torch.zeros(*sizes, lad.num_classes, dtype=torch.float64)
    want.index_put_((*z[:, kids].T, z[:, 0]), p, accumulate=True)
    assert torch.allclose(top_joint(lad), want, atol=TOL, rtol=0)
    ceiling, width, counted = readout_ceiling(lad)
    bayes = float(want.reshape(-1, lad.num_classes).max(1).values.sum())
    assert abs(ceiling.value - bayes) < TOL and ceiling.exact and counted
    assert width == int((want.reshape(-1, lad.num_classes).sum(1) > 0).sum())
    if name.startswith("rhm"):
        assert bayes == pytest.approx(1.0, abs=TOL)  # unambiguous rules: the children name the class


@pytest.mark.parametrize("name", sorted(LADDERS))
def test_readout_ladder_keeps_the_productions(name):
    """The readout ladder's derivations are the teacher's with the label repeated in front, probability for
    probability (not the teacher with its children made independent)."""
    lad, (z, p) = LADDERS[name], BRUTE[name]
    top = readout_ladder(lad)
    assert top.productions is not None and top.productions[1] is not None
    zr, pr = enumerate_derivations(top)

    def law(rows: torch.Tensor, probs: torch.Tensor) -> dict:
        return {tuple(r): round(float(q), 14) for r, q in zip(rows.tolist(), probs, strict=True)}

    assert law(zr, pr) == law(readout_events(z), p)


@pytest.mark.parametrize("name", sorted(LADDERS))
def test_enumerated_inputs_read_the_productions(name):
    """P(x, y) over every one-hot leaf configuration (Thm 1's marginalized gradient reads it)."""
    lad, (z, p) = LADDERS[name], BRUTE[name]
    configs, p_xy = enumerate_inputs(lad)
    leaves = z[:, lad.level_offsets[-2]:]
    radix = lad.events[-1] ** torch.arange(leaves.shape[1] - 1, -1, -1)
    want = torch.zeros(lad.events[-1] ** leaves.shape[1], lad.num_classes, dtype=torch.float64)
    want.index_put_(((leaves * radix).sum(1), z[:, 0]), p, accumulate=True)
    assert torch.allclose(p_xy, want[(configs * radix).sum(1)], atol=TOL, rtol=0)
    assert float(p_xy.sum()) == pytest.approx(1.0, abs=TOL) and len(configs) == int((want.sum(1) > 0).sum())


def test_thm8_demos_refuse_productions():
    """A factorization describes independent children: the disentanglement demos refuse a ladder with productions
    rather than read its marginal tables as independent."""
    fac = Ladder.factorized_binary(1, 2, [1, 1], seed=0).factorization
    lad = Ladder([2], [2, 2], prior=[0.5, 0.5], tables=[None], factorization=fac,
                 productions=[Productions([[[0, 1], [1, 0]], [[0, 0], [1, 1]]])])
    with pytest.raises(ValueError, match=r"jointly \(productions\)"):
        region_marginals(lad)
