"""The certified bracket on the best L1 error of a network class against tau^k (smaso.depth.bracket).

References nobody here wrote: midpoint quadrature on a fine grid for the exact integrals; scipy's
minimisers for the primal run problem and brute force over knots for the true minimum (small
cases); Markov's criterion (the best affine L1 approximation of a tooth is the constant 1/2).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from smaso.depth.bracket import (
    GLUE_BASE,
    architecture_upper_bound,
    brute_force_min,
    class_bracket,
    class_max_pieces,
    class_upper_bound,
    follow_then_flat,
    l1_lower_bound,
    pieces_l1_to_tent,
    pwl_l1_to_tent,
    run_deficit,
)
from smaso.depth.pieces import breakpoint_bound, count_pieces, hidden_widths, network_layers
from smaso.depth.separation import l1_error, make_student, train_student
from teachers.tent import TentNetwork, tent_power


def _midpoint_l1(knots, values, k, n=2**21):
    x = (np.arange(n) + 0.5) / n
    return float(np.abs(np.interp(x, knots, values) - tent_power(torch.from_numpy(x), k).numpy()).mean())


@pytest.mark.parametrize("seed", range(4))
def test_exact_l1_of_a_piecewise_linear_function_matches_fine_quadrature(seed):
    rng = np.random.default_rng(seed)
    knots = np.concatenate([[0.0], np.sort(rng.uniform(0, 1, 5)), [1.0]])
    values = rng.uniform(-0.5, 1.5, len(knots))
    for k in (0, 1, 3, 6):
        assert pwl_l1_to_tent(knots, values, k) == pytest.approx(_midpoint_l1(knots, values, k), abs=2e-7)


def test_exact_l1_of_simple_functions():
    assert pwl_l1_to_tent([0.0, 1.0], [0.5, 0.5], 5) == pytest.approx(0.25, abs=1e-15)  # the constant 1/2
    assert pwl_l1_to_tent([0.0, 0.5, 1.0], [0.0, 1.0, 0.0], 1) == 0.0  # tau itself
    assert pwl_l1_to_tent([0.0, 1.0], [0.0, 0.0], 4) == pytest.approx(0.5, abs=1e-15)  # mean of tau^4


@pytest.mark.parametrize("widths", [(3,), (4, 4), (2, 3, 2)])
def test_exact_l1_of_a_network_matches_its_grid_error(widths):
    net = make_student(widths, seed=1)
    pc = count_pieces(net, 0.0, 1.0)
    for k in (2, 5):
        assert pieces_l1_to_tent(pc, k) == pytest.approx(l1_error(net, k, n_grid=2**20), abs=1e-7)
    assert pieces_l1_to_tent(count_pieces(TentNetwork(6), 0.0, 1.0), 6) == 0.0


def _primal_run(r: int, seed: int = 0) -> float:
    """min over continuous h, affine on each of r unit windows, of the exact error (scipy)."""
    knots = np.arange(r + 1, dtype=np.float64)
    fine = np.arange(2 * r + 1) / 2.0  # window boundaries and apexes / valleys
    f = np.where(np.arange(2 * r + 1) % 2 == 0, 0.5, np.where((np.arange(2 * r + 1) // 2) % 2 == 0, 1.0, 0.0))

    def err(u):
        g = np.interp(fine, knots, u) - f
        aa, ab = np.abs(g[:-1]), np.abs(g[1:])
        same = g[:-1] * g[1:] >= 0
        tot = aa + ab
        cross = np.divide(g[:-1] ** 2 + g[1:] ** 2, 2 * tot, out=np.zeros_like(tot), where=tot > 0)
        return float((0.5 * np.where(same, 0.5 * tot, cross)).sum())

    best = math.inf
    for s in range(3):
        u0 = 0.5 + 0.1 * np.random.default_rng(seed + s).standard_normal(r + 1)
        res = minimize(err, u0, method="Powell", options={"xtol": 1e-12, "ftol": 1e-15, "maxfev": 200000})
        best = min(best, res.fun)
    return best


def test_run_deficit_of_one_window_is_exactly_one_eighth():
    # one apex window: the best affine approximation is 3/4 (Markov), error 1/8, deficit 1/4 - 1/8
    assert run_deficit(1) == pytest.approx(1 / 8, abs=1e-9)
    assert 1 / 4 - run_deficit(1) <= 1 / 8


@pytest.mark.parametrize("r", [1, 2, 3, 5, 8])
def test_certified_run_bound_never_exceeds_the_primal_minimum(r):
    certified = r / 4 - run_deficit(r)
    primal = _primal_run(r)
    assert certified <= primal + 1e-12
    assert primal - certified < 5e-4  # and it is nearly tight (64 cells per window)


def test_run_bound_of_two_windows_against_its_closed_form():
    # the primal minimum for two windows is 1/2 - (3 - 2 sqrt 2) (found by minimisation, 1e-12)
    assert _primal_run(2) == pytest.approx(0.5 - (3 - 2 * math.sqrt(2)), abs=1e-9)
    assert 2 / 4 - run_deficit(2) <= 0.5 - (3 - 2 * math.sqrt(2))


def test_glued_runs_stay_below_their_primal_minimum_and_at_the_limit_deficit():
    for r in (GLUE_BASE + 2, GLUE_BASE + 3):
        assert r / 4 - run_deficit(r) <= _primal_run(r) + 1e-12
    limit = run_deficit(GLUE_BASE)
    for r in (GLUE_BASE + 2, GLUE_BASE + 3, 101, 1000, 2**16 - 1):
        assert limit - 1e-6 <= run_deficit(r) <= limit + 2e-4


def test_one_piece_bound_is_the_exact_affine_optimum():
    # Markov: the best affine L1 approximation of tau^k (k >= 1) is the constant 1/2, error 1/4
    for k in (1, 2, 5, 9):
        assert l1_lower_bound(k, 1).value == pytest.approx(0.25, abs=1e-15)


@pytest.mark.parametrize(("k", "T"), [(1, 2), (2, 2), (2, 3), (3, 2), (3, 3)])
def test_certified_bound_never_exceeds_brute_force(k, T):
    bound = l1_lower_bound(k, T).value
    found = brute_force_min(k, T, grid=8, refine=2, samples=256)
    assert bound <= found + 1e-12
    member = pwl_l1_to_tent(*follow_then_flat(k, T - 1), k)  # an explicit T-piece function
    assert bound <= member and found <= member + 1e-12  # the brute force finds at least as good a one


def test_bound_is_zero_exactly_when_tau_k_fits():
    assert l1_lower_bound(3, 8).value == 0.0
    assert l1_lower_bound(3, 7).value > 0.0
    assert brute_force_min(2, 4, grid=4, refine=1, samples=64) == pytest.approx(0.0, abs=1e-12)


def test_bound_does_not_increase_with_more_pieces():
    for k in (4, 7):
        values = [l1_lower_bound(k, T).value for T in range(1, 2**k + 1)]
        assert all(a >= b - 1e-12 for a, b in itertools.pairwise(values))


@pytest.mark.parametrize("k", [3, 4, 6])
def test_certified_bound_never_exceeds_any_random_or_trained_network(k):
    for widths, seed in itertools.product([(4,), (8,), (3, 3), (4, 4), (2, 2, 2), (6, 6, 6)], range(3)):
        net = make_student(widths, seed=seed)
        if seed == 2:
            train_student(net, k, steps=150, lr=1e-2, seed=seed, optimizer="adam")
        pc = count_pieces(net, 0.0, 1.0)
        assert pieces_l1_to_tent(pc, k) >= l1_lower_bound(k, pc.count).value - 1e-12
        assert pc.count <= breakpoint_bound(widths)


@pytest.mark.parametrize(("K", "units"), [(3, 1), (3, 4), (5, 7), (9, 14)])
def test_follow_then_flat_has_its_stated_error_and_beats_the_constant(K, units):
    knots, values = follow_then_flat(K, units)
    assert len(knots) - 2 == units  # interior knots = units
    err = pwl_l1_to_tent(knots, values, K)
    assert err == pytest.approx(0.25 * (1 - (units - 0.5) / 2**K), abs=1e-15)
    assert err >= l1_lower_bound(K, units + 1).value


@pytest.mark.parametrize("L", [1, 2, 3, 4])
def test_class_bracket_is_ordered_and_its_member_belongs_to_the_class(L):
    b = class_bracket(L)
    assert b.k == L * L and b.nodes == 2**L
    assert 0.0 <= b.lower.value <= b.upper.l1 <= 0.25
    member = b.upper
    widths = hidden_widths(network_layers(member.net))
    assert widths == member.widths and len(widths) <= L and sum(widths) <= 2**L
    assert member.l1 == pytest.approx(member.formula, abs=1e-12)
    assert member.l1 == pytest.approx(l1_error(member.net, b.k), abs=1e-6)
    assert member.pieces <= b.max_pieces


def test_class_brackets_of_the_theorem():
    # the numbers the notebook and README quote (certified to the digits shown)
    lows = {L: class_bracket(L).lower.value for L in (2, 3, 4)}
    assert lows[2] == pytest.approx(1 / 32, abs=1e-9)
    assert 0.160 < lows[3] < 0.1603 and 0.2333 < lows[4] < 0.2334
    assert class_bracket(1).upper.l1 == 0.0  # tau is a 2-node network


def test_class_max_pieces_against_every_width_tuple():
    for depth, nodes in [(1, 3), (2, 4), (3, 6), (3, 8)]:
        brute = max(breakpoint_bound(w) for d in range(1, depth + 1)
                    for w in itertools.product(range(1, nodes + 1), repeat=d) if sum(w) <= nodes)
        T, widths = class_max_pieces(depth, nodes)
        assert T == brute == breakpoint_bound(widths)


def test_upper_bound_uses_tent_layers_when_they_help():
    state = torch.random.get_rng_state()
    member = class_upper_bound(9, 3, 8)
    assert torch.equal(torch.random.get_rng_state(), state)  # networks built without the global RNG
    assert member.tent_layers == 2 and member.widths == (2, 2, 4)


ARCHITECTURES = [(4, (2, 2)), (4, (4,)), (4, (1, 3)), (2, (2, 2)), (2, (4,)), (3, (8,)), (3, (1, 8)), (3, (3, 3, 2)),
                 (5, (2, 1, 3)), (6, (3, 3)), (9, (2, 2, 2)), (9, (3, 3, 2)), (9, (8,)), (4, (2, 2, 2, 2)),
                 (5, (5, 4))]


@pytest.mark.parametrize(("k", "widths"), ARCHITECTURES)
def test_architecture_member_has_those_widths_and_its_stated_error(k, widths):
    state = torch.random.get_rng_state()
    member = architecture_upper_bound(k, widths)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert hidden_widths(network_layers(member.net)) == widths == member.widths
    pc = count_pieces(member.net, 0.0, 1.0)
    assert pc.count == member.pieces <= breakpoint_bound(widths)
    # the exact error three ways: from its pieces, its formula, and midpoint quadrature on a fine grid
    assert member.l1 == pytest.approx(member.formula, abs=1e-12)
    assert member.l1 == pytest.approx(l1_error(member.net, k, n_grid=2**20), abs=1e-6)
    # it is a member of the class its widths define: never below the certified bound for those widths
    assert member.l1 >= l1_lower_bound(k, breakpoint_bound(widths)).value - 1e-12


def test_architecture_member_fits_exactly_when_the_widths_can_and_matches_the_class_member():
    assert architecture_upper_bound(4, (2, 2, 2, 2)).l1 < 1e-12  # three tent layers, then tau exactly
    assert architecture_upper_bound(3, (8,)).l1 < 1e-12  # 2^3 units: every kink of tau^3
    assert architecture_upper_bound(3, (2, 2, 2)).tent_layers == 2
    for L in (2, 3, 4):  # the class's best explicit member is the architecture member of its widths
        b = class_bracket(L)
        assert architecture_upper_bound(b.k, b.upper.widths).l1 == pytest.approx(b.upper.l1, abs=1e-15)
    # more units in the fitted layer, or one more tent layer in front, never hurts
    assert architecture_upper_bound(9, (8,)).l1 < architecture_upper_bound(9, (4,)).l1
    assert architecture_upper_bound(9, (2, 2, 4)).l1 < architecture_upper_bound(9, (2, 4)).l1
    # a width-1 layer cannot fold: (1, 3) is no better than three units on their own
    assert architecture_upper_bound(4, (1, 3)).l1 == pytest.approx(architecture_upper_bound(4, (3,)).l1, abs=1e-15)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: l1_lower_bound(0, 3), "k: expected an integer >= 1"),
    (lambda: l1_lower_bound(3, 0), "pieces: expected an integer >= 1"),
    (lambda: l1_lower_bound(3, 2.5), "pieces"),
    (lambda: run_deficit(3, cells=7), "cells: expected an even number"),
    (lambda: pwl_l1_to_tent([0.0, 0.5], [0.0, 1.0], 2), "knots: expected a non-decreasing array from 0 to 1"),
    (lambda: pwl_l1_to_tent([0.0, 1.0], [0.0, float("nan")], 2), "finite"),
    (lambda: class_bracket(0), "L: expected an integer >= 1"),
    (lambda: follow_then_flat(0, 3), "K: expected >= 1"),
    (lambda: follow_then_flat(3, 0), "units: expected an integer >= 1"),
    (lambda: brute_force_min(2, 2, grid=1), "grid: expected an integer >= 2"),
    (lambda: class_max_pieces(0, 4), "depth: expected an integer >= 1"),
    (lambda: class_upper_bound(4, 2, 0), "nodes: expected an integer >= 1"),
    (lambda: architecture_upper_bound(4, ()), "widths: expected at least one positive hidden width"),
    (lambda: architecture_upper_bound(4, (2, 0)), "widths: expected positive integer hidden widths"),
    (lambda: architecture_upper_bound(0, (2,)), "k: expected an integer >= 1"),
])
def test_bad_arguments_raise_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
