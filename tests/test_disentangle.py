"""Defs 3-5, Thm 8-9 and §7.7.1 / Eq 111 on factorized binary ladders (smaso.theorems.disentangle).

Tolerances: Thm 8 / Thm 9 are exact identities, so in float64 the measured distances are rounding
(~1e-16 .. 1e-14); 1e-12 leaves two orders of margin.  The negative results (non-separable W,
uncentered G~, Eq 111) are generic: measured values are 0.07 .. 0.99 on these seeds, and the tests
ask for > 1e-3 (well above rounding, below every observed case).
"""

from __future__ import annotations

import math

import pytest
import torch

from smaso.student.reformulation import _weighted_bn, _weighted_bn_backward
from smaso.theorems.disentangle import (
    backward_disentangle_distance,
    backward_g_tilde,
    check_groups,
    disentangled_F_distance,
    disentangled_G_distance,
    factor_marginals,
    forward_disentangled_demo,
    forward_region,
    is_disentangled_F,
    is_disentangled_G,
    is_separable,
    random_disentangled_F,
    random_disentangled_G,
    random_separable_W,
    region_marginals,
    separability_distance,
    separable_update_demo,
    weight_update,
)
from teachers.ladder import Ladder

EXACT = 1e-12
GENERIC = 1e-3
CASES = [((1, 2), 1), ((2, 4), 1), ((1, 2, 4), 2), ((2, 4, 8), 2)]


def _ladder(factors, depth, seed=0):
    return Ladder.factorized_binary(depth=depth, branching=2, factors=factors, seed=seed)


def _kron(*vs):
    out = torch.ones(1, dtype=torch.float64)
    for v in vs:
        out = torch.kron(out, torch.as_tensor(v, dtype=torch.float64))
    return out


# ---------------------------------------------------------------------------- Defs 3-5
def test_def3_known_cases():
    f0, f1 = torch.tensor([1.0, -2.0]), torch.tensor([0.5, 3.0])
    F = torch.stack([_kron(f0, [1, 1]), _kron([1, 1], f1)], 1)  # factor 0 = most significant bit
    assert is_disentangled_F(F, 2) and disentangled_F_distance(F, 2) < EXACT
    swapped = torch.stack([_kron([1, 1], f1), _kron(f0, [1, 1])], 1)  # columns in the wrong factor order
    assert not is_disentangled_F(swapped, 2)
    # e_0 as column of factor 0: projection [.5, .5, 0, 0], residual norm 1/sqrt(2)
    E = torch.zeros(4, 2, dtype=torch.float64)
    E[0, 0] = 1.0
    assert disentangled_F_distance(E, 2) == pytest.approx(1 / math.sqrt(2), abs=1e-15)
    assert disentangled_F_distance(torch.zeros(4, 2), 2) == 0.0


def test_def4_known_cases():
    p = torch.tensor([[0.3, 0.7], [0.6, 0.4]], dtype=torch.float64)
    g0, g1 = torch.tensor([1.0, -1.0]), torch.tensor([2.0, 0.5])
    G = torch.stack([_kron(g0, p[1]), _kron(p[0], g1)], 1)
    assert is_disentangled_G(G, p) and disentangled_G_distance(G, p) < EXACT
    other = torch.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=torch.float64)
    assert disentangled_G_distance(G, other) > 0.05  # Def 4 depends on the marginals
    # Def 3 is Def 4 with all-ones "marginals": a Def 3 matrix is not Def 4 for non-uniform p
    assert not is_disentangled_G(random_disentangled_F(2, torch.Generator().manual_seed(0)), p)


def test_def5_known_cases():
    groups = [[0, 1], [2]]
    W = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
    assert is_separable(W, groups)
    W2 = W.clone()
    W2[2, 0] = 1.0
    assert separability_distance(W2, groups) == pytest.approx(1 / math.sqrt(15), rel=1e-12)
    assert not is_separable(W2, groups)


def test_factor_marginals_and_region_marginals():
    pf = torch.tensor([[0.2, 0.8], [0.9, 0.1], [0.5, 0.5]], dtype=torch.float64)
    joint = _kron(pf[0], pf[1], pf[2])
    assert torch.allclose(factor_marginals(joint, 3), pf, atol=1e-15)
    lad = _ladder((1, 2, 4), 2)
    for l, p in enumerate(region_marginals(lad)):
        assert p.shape == (lad.num_regions[l], lad.events[l])
        assert torch.allclose(p.sum(1), torch.ones(lad.num_regions[l], dtype=torch.float64))


def test_ladder_tables_are_kronecker_products():
    """The premise of Thm 8/9: P_ab = kron_i P_{a[i], b[S_i]} (factor 0 = most significant bit)."""
    lad = _ladder((2, 4, 8), 2, seed=5)
    fac = lad.factorization
    for l in range(1, lad.depth + 1):
        for c in range(lad.num_regions[l]):
            ft = fac.factor_tables[l - 1][c]
            assert torch.allclose(_kron_mats(*ft), lad.tables[l - 1][c], atol=1e-14)


def _kron_mats(*ms):
    out = torch.ones(1, 1, dtype=torch.float64)
    for m in ms:
        out = torch.kron(out, m.to(torch.float64))
    return out


# ---------------------------------------------------------------------------- Thm 8
@pytest.mark.parametrize("factors,depth", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("relu,bn", [(True, False), (False, False), (True, True), (False, True)])
def test_thm8_forward_stays_disentangled(factors, depth, seed, relu, bn):
    lad = _ladder(factors, depth, seed=seed)
    demo = forward_disentangled_demo(lad, seed=seed + 10, relu=relu, bn=bn)
    assert max(demo.separability) == 0.0
    assert max(demo.distance) < EXACT, demo.distance
    for l in range(depth + 1):
        assert demo.F[l].shape == (lad.num_regions[l], 2 ** factors[l], factors[l])


@pytest.mark.parametrize("factors,depth", [((2, 4), 1), ((1, 2, 4), 2), ((2, 4, 8), 2)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_thm8_non_separable_weights_break_it(factors, depth, seed):
    lad = _ladder(factors, depth, seed=seed)
    demo = forward_disentangled_demo(lad, seed=seed, separable=False, relu=False)
    assert demo.separability[depth - 1] > 0.1  # (a single parent factor makes any W separable)
    # the first level above the leaves has >= 2 factors in every case; one factor is trivially Def 3
    assert demo.distance[depth - 1] > GENERIC, demo.distance


def test_thm8_explicit_weights_and_bn_region():
    lad = _ladder((2, 4), 1, seed=3)
    gen = torch.Generator().manual_seed(0)
    groups = lad.factorization.groups(1)
    W = torch.stack([random_separable_W(groups, gen) for _ in range(2)])
    demo = forward_disentangled_demo(lad, [W], seed=1, bn=True)
    assert demo.distance[0] < EXACT
    assert torch.equal(demo.weights[0], W)
    # BN output of forward_region: P(z_a)-weighted mean 0 per column before the shift
    p = region_marginals(lad)[0][0]
    F_b = [random_disentangled_F(4, gen) for _ in range(2)]
    out = forward_region(list(lad.tables[0]), F_b, list(W), relu=True, bn_p=p, bn_eps=0.0)
    assert torch.allclose(p @ out, torch.zeros(2, dtype=torch.float64), atol=1e-12)
    assert is_disentangled_F(out, 2)


# ---------------------------------------------------------------------------- Thm 9
@pytest.mark.parametrize("factors,depth", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_thm9_centered_update_is_separable(factors, depth, seed):
    lad = _ladder(factors, depth, seed=seed)
    for level in range(depth):
        demo = separable_update_demo(lad, level, seed=seed)
        assert demo.G_distance < EXACT and demo.col_sums < EXACT
        assert demo.dW.shape == (lad.num_regions[level + 1], factors[level + 1], factors[level])
        assert float(demo.separability.max()) < EXACT


@pytest.mark.parametrize("factors,depth", [((2, 4), 1), ((2, 4, 8), 2)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_thm9_uncentered_update_is_not_separable(factors, depth, seed):
    lad = _ladder(factors, depth, seed=seed)
    for level in range(depth):
        demo = separable_update_demo(lad, level, seed=seed, centered=False)
        assert demo.G_distance < EXACT and demo.col_sums > GENERIC
        assert float(demo.separability.min()) > GENERIC


def test_thm9_off_block_equals_paper_formula():
    """Eq 101: off-block (S_0 rows, column 1) = (P_0 f)^T p_a[0] * 1^T g~_1 (n_a = 2 root factors)."""
    lad = _ladder((2, 4), 1, seed=7)
    gen = torch.Generator().manual_seed(3)
    pa = factor_marginals(lad.prior, 2)
    G = random_disentangled_G(pa, gen, centered=False)
    F = random_disentangled_F(4, gen)
    dW = weight_update(lad.tables[0][0], F, G)
    g1 = G[:, 1].reshape(2, 2).sum(0)  # column 1 = p_a[0] x g~_1; summing out bit 0 leaves g~_1
    P0 = lad.factorization.factor_tables[0][0, 0].to(torch.float64)  # (2, 4): P(z_b[S_0] | z_a[0])
    f = F[:, :2].reshape(4, 4, 2)[:, 0, :]  # columns 0, 1 as functions of the S_0 bits (constant in S_1)
    expected = (P0 @ f).T @ pa[0] * g1.sum()
    assert torch.allclose(dW[:2, 1], expected, atol=1e-13)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_thm9_centering_supplied_by_bn_backward(seed):
    """§5.2: "centered gradient is guaranteed if we insert Batch Norm (Eq 12)": the Eq 12 backward
    projection makes 1^T G~ = 0.  Side finding: with one neuron per binary factor (Def 3/4 columns
    live in a 2-dim space) the projection removes both directions (p-weighted mean and F~), so only
    an O(eps) remainder of a Def 4 G~ survives."""
    lad = _ladder((2, 4), 1, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    p = region_marginals(lad)[0][0]
    pa = factor_marginals(p, 2)
    assert torch.allclose(p, _kron(pa[0], pa[1]), atol=1e-15)  # root factors are independent
    F = random_disentangled_F(2, gen)
    c1 = torch.rand(1, 2, generator=gen, dtype=torch.float64) + 0.5
    _, F_tilde, sigma = _weighted_bn(F[None], p[None], c1, torch.zeros(1, 2, dtype=torch.float64), 1e-12)
    G = random_disentangled_G(pa, gen, centered=False)
    Gbn = _weighted_bn_backward(G[None], F_tilde, p[None], sigma, c1)[0]
    assert G.sum(0).abs().max() > GENERIC
    assert Gbn.sum(0).abs().max() < EXACT * float(G.abs().max())
    assert torch.linalg.norm(Gbn) < 1e-6 * torch.linalg.norm(G)  # O(eps / sigma^2), eps = 1e-12


# ---------------------------------------------------------------------------- §7.7.1 / Eq 111
@pytest.mark.parametrize("factors,depth", CASES)
@pytest.mark.parametrize("gated", [True, False])
def test_eq111_backward_is_not_disentangled(factors, depth, gated):
    lad = _ladder(factors, depth, seed=1)
    for level in range(1, depth + 1):
        demo = backward_disentangle_distance(lad, level, seed=4, gated=gated)
        assert demo.parent_distance < EXACT  # hypotheses hold: G~_a is Def 4 ...
        assert demo.G_tilde.shape == (lad.num_regions[level], 2 ** factors[level], factors[level])
        assert float(demo.distance.min()) > GENERIC, demo.distance  # ... yet G~_b is not


def test_eq111_structure():
    """Eq 111 / 112 exactly: column k in S_0 = (P_0^T g~_0) w_k x p_b[S_1] with p_b[S_1] = P_1^T p_a[1]
    (a joint 4-vector over the S_1 bits, not a Kronecker product of per-factor marginals)."""
    lad = _ladder((2, 4), 1, seed=2)
    gen = torch.Generator().manual_seed(5)
    pa = factor_marginals(lad.prior, 2)
    G = random_disentangled_G(pa, gen)
    W = random_separable_W(lad.factorization.groups(1), gen)
    Gb = backward_g_tilde([lad.tables[0][0]], [G], [W])
    P0, P1 = (lad.factorization.factor_tables[0][0, i].to(torch.float64) for i in range(2))
    g0 = G[:, 0].reshape(2, 2).sum(1)  # contract p_a[1] (sums to 1) -> g~_0
    pb_S1 = P1.T @ pa[1]
    pb = region_marginals(lad)[1][0]
    assert torch.allclose(pb_S1, pb.reshape(4, 4).sum(0), atol=1e-14)  # Eq 112
    for k in (0, 1):
        assert torch.allclose(Gb[:, k], _kron(P0.T @ g0 * W[k, 0], pb_S1), atol=1e-13)
    assert disentangled_G_distance(Gb, factor_marginals(pb, 4)) > GENERIC


# ---------------------------------------------------------------------------- bad input
def test_groups_validation():
    with pytest.raises(ValueError, match="groups: index sets overlap"):
        check_groups([[0, 1], [1, 2]], 3)
    with pytest.raises(ValueError, match="groups: index sets do not cover"):
        check_groups([[0], [2]], 3)
    with pytest.raises(ValueError, match=r"groups\[1\]: index 5 outside"):
        check_groups([[0], [5]], 3)
    with pytest.raises(ValueError, match="groups: index sets overlap"):
        is_separable(torch.ones(3, 2), [[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="W: 2 columns but 3 groups"):
        separability_distance(torch.ones(3, 2), [[0], [1], [2]])


def test_stochastic_and_shape_validation():
    P = torch.tensor([[0.5, 0.6], [0.5, 0.5]])
    F, W, G = torch.ones(2, 1), torch.ones(1, 1), torch.ones(2, 1)
    with pytest.raises(ValueError, match=r"P_ab\[0\]: row 0 sums to"):
        forward_region([P], [F], [W])
    with pytest.raises(ValueError, match="P_ab: row 0 sums to"):
        weight_update(P, F, G)
    with pytest.raises(ValueError, match=r"P_ab\[0\]: has negative"):
        backward_g_tilde([torch.tensor([[1.5, -0.5], [0.5, 0.5]])], [G], [W])
    good = torch.full((2, 2), 0.5)
    with pytest.raises(ValueError, match=r"W_ba\[0\]: expected 1 rows"):
        forward_region([good], [F], [torch.ones(2, 1)])
    with pytest.raises(ValueError, match=r"W_ba\[0\]: expected 1 columns"):
        backward_g_tilde([good], [G], [torch.ones(1, 3)])
    with pytest.raises(ValueError, match="F: expected 2 columns"):
        disentangled_F_distance(torch.ones(4, 3), 2)
    with pytest.raises(ValueError, match="F: expected 2\\^n_factors = 8 rows"):
        disentangled_F_distance(torch.ones(4, 3), 3)
    with pytest.raises(ValueError, match=r"p_factors: expected shape \(2, 2\)"):
        disentangled_G_distance(torch.ones(4, 2), torch.full((3, 2), 0.5))
    with pytest.raises(ValueError, match="p_factors: every row must be a distribution"):
        disentangled_G_distance(torch.ones(4, 2), torch.ones(2, 2))
    with pytest.raises(ValueError, match="bn_p: row 0 sums to"):
        forward_region([good], [F], [W], bn_p=torch.ones(2))


def test_ladder_demo_validation():
    lad = _ladder((2, 4), 1)
    with pytest.raises(ValueError, match=r"weights\[0\]: expected shape \(2, 4, 2\)"):
        forward_disentangled_demo(lad, [torch.ones(2, 4, 3)])
    with pytest.raises(ValueError, match="weights: expected 1 tensors"):
        forward_disentangled_demo(lad, [])
    with pytest.raises(ValueError, match="level: expected a parent level"):
        separable_update_demo(lad, 1)
    with pytest.raises(ValueError, match="level: expected a child level"):
        backward_disentangle_distance(lad, 0)
    plain = Ladder.random(depth=1, branching=2, events=4, seed=0)
    with pytest.raises(ValueError, match=r"ladder: expected a top-down ladder from Ladder\.factorized_binary"):
        forward_disentangled_demo(plain)
