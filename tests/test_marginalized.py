"""Marginalized gradients, Eq 3 and Thm 1 (smaso/theorems/marginalized.py), by exact enumeration.

References written here: P(x, y) by brute force over every latent configuration of a top-down
ladder, p(y | x) and p(x) from ``inference.posterior``, per-example gradients from torch
autograd (``conftest_student.autograd_reference``) and marginals by Python loops over tuples.
Exact identities in float64 to 1e-12 relative to the largest entry.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from conftest_student import assert_close, autograd_reference, one_torch_thread  # noqa: F401 (fixture)

from inference.posterior import posterior
from smaso.student.network import LadderStudent
from smaso.theorems.marginalized import MAX_CONFIGS, enumerate_inputs, marginalized_gradient
from teachers import Ladder

LADDERS = {
    "topdown-222": lambda: Ladder.random(depth=2, branching=2, events=[2, 2, 2], seed=0),
    "topdown-232": lambda: Ladder.random(depth=2, branching=2, events=[2, 3, 2], concentration=0.5, seed=4),
    "bottomup-232": lambda: Ladder.random(depth=2, branching=2, events=[2, 3, 2], mode="bottomup", seed=1),
    "topdown-d3": lambda: Ladder.random(depth=3, branching=2, events=2, seed=3),
    "fully-informative": lambda: Ladder.fully_informative(depth=2, branching=2, leaf_events=2),
}


def _student(lad, bn=False, seed=2, width=3):
    return LadderStudent(lad, width, batch_norm=bn, dtype=torch.float64, seed=seed)


def _brute_force_topdown(lad: Ladder) -> torch.Tensor:
    """P(x, y) for every leaf configuration (lexicographic), summing over every latent configuration."""
    d, m, R = lad.depth, lad.events, lad.num_regions
    out = torch.zeros(m[d] ** R[d], m[0], dtype=torch.float64)
    radix = [m[d] ** (R[d] - 1 - r) for r in range(R[d])]
    for y in range(m[0]):
        for mids in itertools.product(*[itertools.product(range(m[l]), repeat=R[l]) for l in range(1, d)]):
            z = [(y,), *mids]
            p = lad.prior[y].item()
            for l in range(1, d):
                for c in range(R[l]):
                    p *= lad.tables[l - 1][c, z[l - 1][c // lad.branching[l - 1]], z[l][c]].item()
            for leaves in itertools.product(range(m[d]), repeat=R[d]):
                q = p
                for c in range(R[d]):
                    q *= lad.tables[d - 1][c, z[d - 1][c // lad.branching[d - 1]], leaves[c]].item()
                out[sum(e * w for e, w in zip(leaves, radix, strict=True)), y] += q
    return out


@pytest.mark.parametrize("name", ["topdown-222", "topdown-232", "topdown-d3"])
def test_enumeration_matches_brute_force(name):
    lad = LADDERS[name]()
    configs, p_xy = enumerate_inputs(lad)
    ref = _brute_force_topdown(lad)
    assert len(configs) == len(ref)  # Dirichlet tables: every configuration has P > 0
    assert_close(p_xy, ref, 1e-13, "P(x, y)")
    assert abs(p_xy.sum().item() - 1) < 1e-12


@pytest.mark.parametrize("name", list(LADDERS))
def test_enumeration_matches_exact_posterior(name):
    lad = LADDERS[name]()
    configs, p_xy = enumerate_inputs(lad)
    post = posterior(lad, F.one_hot(configs, lad.events[-1]).double())
    assert_close(p_xy.sum(1), post.log_evidence.exp(), 1e-13, "P(x)")
    assert_close(p_xy / p_xy.sum(1, keepdim=True), post.label, 1e-12, "P(y | x)")
    assert abs(p_xy.sum().item() - 1) < 1e-12


@pytest.mark.parametrize("bn", [False, True])
@pytest.mark.parametrize("name", list(LADDERS))
def test_thm1_recursion_equals_direct_marginalization(name, bn):
    lad = LADDERS[name]()
    for seed in (0, 1):
        res = marginalized_gradient(_student(lad, bn, seed=seed))
        for l in range(lad.depth):
            n_j = 3 if l else lad.num_classes
            assert res.direct[l].shape == (lad.num_regions[l + 1], lad.events[-1] ** lad.leaves_under(l + 1), n_j)
            assert_close(res.recursive[l], res.direct[l], 1e-12, f"Thm 1, level {l}")
        assert res.max_error() <= 1e-12 * max(1.0, max(t.abs().max().item() for t in res.direct))
        # not a vacuous identity: g_j(x_k) depends on x_k somewhere
        assert max(t.std(1).max().item() for t in res.direct) > 1e-3


def test_direct_marginal_equals_loop_reference():
    lad = LADDERS["topdown-232"]()
    res = marginalized_gradient(_student(lad))
    m, lu = lad.events[-1], lad.leaves_under(1)
    for c in range(lad.num_regions[1]):
        for a, sub in enumerate(itertools.product(range(m), repeat=lu)):
            rows = [k for k, x in enumerate(res.configs.tolist()) if tuple(x[c * lu:(c + 1) * lu]) == sub]
            w = res.p_x[rows]
            ref = (w[:, None] * res.g[0][rows, 0]).sum(0) / w.sum()
            assert_close(res.direct[0][c, a], ref, 1e-12, f"g_j(x_{c} = {sub})")
    # g_j(x_j) of the top node is g_j(x) itself (x_j = x)
    assert_close(res.region[0][0][res.configs @ (m ** torch.arange(lad.num_regions[-1] - 1, -1, -1))],
                 res.g[0][:, 0], 1e-12, "top g_j(x_j)")


@pytest.mark.parametrize("name", ["topdown-232", "bottomup-232"])
def test_per_example_gradient_is_autograd_averaged_over_labels(name):
    """g_j(x) = sum_y P(y | x) g_j(x, y), g_j(x, y) from torch autograd (no BN: per-example
    gradients do not depend on the batch)."""
    lad = LADDERS[name]()
    st = _student(lad)
    res = marginalized_gradient(st)
    x = F.one_hot(res.configs, lad.events[-1]).double()
    for l in range(lad.depth):
        want = torch.zeros_like(res.g[l])
        for y in range(lad.num_classes):
            ref = autograd_reference(st, x, torch.full((len(x),), y))
            want += res.p_y_given_x[:, y, None, None] * ref["g"][l]
        assert_close(res.g[l], want, 1e-12, f"g level {l}")


@pytest.mark.parametrize("name", ["topdown-d3", "bottomup-232"])
def test_eq5_backward_on_marginalized_gradients(name):
    """Eq 5 (no BN): g_k(x_k) = f'_k(x_k) sum_j w_jk g_j(x_k) for every hidden node k."""
    lad = LADDERS[name]()
    st = _student(lad)
    res = marginalized_gradient(st)
    m = lad.events[-1]
    for l in range(1, lad.depth):  # level of k; parents j at level l-1
        lu = lad.leaves_under(l)
        for c in range(lad.num_regions[l]):
            codes = res.configs[:, c * lu:(c + 1) * lu] @ (m ** torch.arange(lu - 1, -1, -1))
            # g_k(x_k) by Eq 3, from the per-example g_k(x)
            p = torch.zeros(m**lu, dtype=torch.float64).index_add_(0, codes, res.p_x)
            g_k = torch.zeros(m**lu, st.widths[l], dtype=torch.float64).index_add_(
                0, codes, res.p_x[:, None] * res.g[l][:, c]) / p[:, None]
            deriv = torch.zeros(m**lu, st.widths[l], dtype=torch.float64)
            deriv[codes] = res.deriv[l][:, c]  # f'_k depends on x_k only
            assert_close(res.deriv[l][:, c], deriv[codes], 0.0, "f'_k local")
            rhs = deriv * (res.direct[l - 1][c] @ st.weights[l - 1][c].T)
            assert_close(g_k, rhs, 1e-12, f"Eq 5, region {c} of level {l}")


@pytest.mark.parametrize("bn", [False, True])
def test_eq2_through_eq3(bn):
    """Delta w_jk = E_x[fbar_k g_j] = E_{x_k}[fbar_k(x_k) g_j(x_k)]; on the fully informative ladder
    with uniform leaves (P(x) = 1/K, y = x) it is also the student's own batch update."""
    lad = LADDERS["fully-informative"]()
    st = _student(lad, bn)
    res = marginalized_gradient(st)
    assert res.locality_error <= 1e-13
    rec = st.forward_backward(F.one_hot(res.configs, lad.events[-1]).double(), res.p_y_given_x.argmax(1))
    for l in range(lad.depth):
        assert_close(res.delta_w_marginal[l], res.delta_w[l], 1e-12, f"Eq 3 form, level {l}")
        assert_close(res.delta_w[l], rec.dW[l], 1e-12, f"student dW, level {l}")


def test_bad_input():
    lad = LADDERS["topdown-222"]()
    with pytest.raises(TypeError, match="LadderStudent"):
        marginalized_gradient("student", lad)
    with pytest.raises(ValueError, match="one-hot"):
        g = Ladder.random(depth=2, branching=2, events=[2, 2, 2], emission="gaussian", sigma=0.3)
        marginalized_gradient(_student(g))
    with pytest.raises(ValueError, match="do not match"):
        marginalized_gradient(_student(lad), LADDERS["topdown-d3"]())
    with pytest.raises(ValueError, match="do not match"):
        marginalized_gradient(_student(lad), Ladder.random(depth=2, branching=2, events=[2, 2, 3], seed=0))
    big = Ladder.random(depth=2, branching=[2, 3], events=[2, 2, 7], seed=0)
    assert 7**6 > MAX_CONFIGS
    with pytest.raises(ValueError, match="leaf configurations"):
        enumerate_inputs(big)
