"""The cell bound on the best L1 error of T-piece functions against tau^k (smaso.depth.pwl_bound).

References nobody here wrote: brute force over knots with exact errors (``brute_force_min``, and an
exhaustive enumeration of breakpoint cells for the dynamic programme), scipy's Nelder-Mead on a fine
midpoint quadrature for the best affine fit on an interval, and Markov's criterion for one tooth.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import minimize

from smaso.depth.bracket import (
    _tent_power_np,
    brute_force_min,
    class_bracket,
    follow_then_flat,
    l1_lower_bound,
    pwl_l1_to_tent,
)
from smaso.depth.pwl_bound import _cell_dp, _unit_table, cell_lower_bound, interval_fit_bound

SMALL = dict(cells=2, max_cells=2, max_run=8)  # a table of 64 LPs (cached): no chunking up to k = 3


def _best_affine_fit(k: int, s: float, e: float, n: int = 2**16) -> float:
    """min over affine l of integral_s^e |tau^k - l| by Nelder-Mead on midpoint quadrature (error ~1e-9)."""
    x = s + (e - s) * (np.arange(n) + 0.5) / n
    f = _tent_power_np(x, k)
    def err(p):
        return float(np.abs(f - p[0] - p[1] * (x - 0.5 * (s + e))).mean() * (e - s))
    best = min((minimize(err, p0, method="Nelder-Mead", options={"xatol": 1e-12, "fatol": 1e-14, "maxiter": 4000})
                for p0 in ([0.5, 0.0], [0.3, 2.0 / (e - s)], [0.7, -2.0 / (e - s)])), key=lambda r: r.fun)
    return float(best.fun)


@pytest.mark.parametrize(("k", "s_units", "e_units"), [(3, 0.5, 1.5), (3, 0.0, 3.0), (4, 0.25, 2.75), (5, 1.0, 6.5)])
def test_interval_bound_never_exceeds_the_best_affine_fit_and_is_nearly_tight(k, s_units, e_units):
    s, e = s_units * 2.0**-k, e_units * 2.0**-k
    bound = interval_fit_bound(k, s, e, sub=64)
    primal = _best_affine_fit(k, s, e)
    assert bound <= primal + 1e-9  # the quadrature's own error
    assert primal - bound < 2e-3 * 2.0**-k * (e_units - s_units)


def test_interval_bound_of_one_tooth_and_of_one_linear_piece():
    # one apex window (1/2 -> 1 -> 1/2): the best affine fit is the constant 3/4 (Markov), error 2^-k / 8
    for k in (1, 3, 6):
        assert 2.0**-k / 8 - 1e-6 * 2.0**-k <= interval_fit_bound(k, 0.5 * 2.0**-k, 1.5 * 2.0**-k) <= 2.0**-k / 8
    assert interval_fit_bound(4, 0.0, 2.0**-4) == pytest.approx(0.0, abs=1e-15)  # tau^k is linear there


def test_one_table_serves_every_k_by_exact_rescaling():
    # the table is solved on tau^8 and scaled by 2^(8 - k); solving directly on tau^k gives the same bound
    cells, q = 2, 8
    unit = _unit_table(cells, q, 2)
    for k in (2, 3, 5):
        for p, L in ((0, 1), (1, 2), (3, 4), (2, 3)):
            s, e = p / (cells * 2**k), (p + L) / (cells * 2**k)
            # up to the float margins, 1e-14 per sub-cell charged at the scale each LP is solved at
            assert unit[p, L] * 2.0**-k == pytest.approx(interval_fit_bound(k, s, e, sub=cells * q), abs=1e-10)


def test_cell_dp_equals_exhaustive_enumeration_of_breakpoint_cells():
    cells, k = 2, 3
    tab = _unit_table(cells, 4, 2) * 2.0**-k  # max_run = 2 windows: longer pieces are chunked
    n_cells = 2**k * cells
    period, lmax = tab.shape[0], tab.shape[1] - 1

    def A(i, j):  # the chunked table entry for cells [i, j), written out independently of the DP
        if j <= i:
            return 0.0
        total = 0.0
        while j - i > lmax:
            total, i = total + tab[i % period, lmax], i + lmax
        return total + tab[i % period, j - i]

    for T in (1, 2, 3, 4):
        brute = A(0, n_cells)
        for n_break in range(1, T):
            for cs in itertools.combinations_with_replacement(range(n_cells), n_break):
                total = A(0, cs[0]) + A(cs[-1] + 1, n_cells) + sum(A(a + 1, b) for a, b in itertools.pairwise(cs))
                brute = min(brute, total)
        value, placement = _cell_dp(tab, n_cells, T)
        assert value == pytest.approx(brute, abs=1e-13)
        assert len(placement) <= T - 1 and placement == sorted(placement)


@pytest.mark.parametrize(("k", "T"), [(1, 1), (2, 2), (2, 3), (3, 2), (3, 3)])
def test_certified_interval_holds_the_brute_force_minimum(k, T):
    b = cell_lower_bound(k, T, **SMALL)
    found = brute_force_min(k, T, grid=8, refine=1, samples=128)  # a value some T-piece h reaches
    assert b.lower <= found + 1e-12
    assert b.lower <= b.upper
    # the upper end is the exact error of a continuous function with at most T pieces
    assert len(b.knots) - 1 <= T
    assert b.upper == pytest.approx(pwl_l1_to_tent(b.knots, b.values, k), abs=1e-15)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_cell_bound_is_at_least_the_old_bound(k):
    for T in range(1, 2**k):
        old = l1_lower_bound(k, T).value
        new = cell_lower_bound(k, T, cells=2, max_cells=2, max_run=16)  # no chunking up to k = 4
        assert new.lower >= old - 1e-9, (k, T, old, new.lower)  # T = 1: old is exactly 1/4 (Markov)
        assert new.upper >= new.lower
        if T > 1:  # never worse than the explicit member it starts from
            assert new.upper <= pwl_l1_to_tent(*follow_then_flat(k, T - 1), k) + 1e-15


@pytest.mark.slow
def test_cell_bound_falls_below_the_teeth_bound_only_for_few_long_pieces():
    # pieces longer than max_run = 24 windows are chunked, which loses a little; the bracket keeps the max
    for k, top in ((5, 32), (6, 64), (7, 40)):
        for T in range(1, top):
            old = l1_lower_bound(k, T).value
            assert cell_lower_bound(k, T, cells=4, max_cells=4).lower >= old - 1e-9, (k, T)
    old, new = l1_lower_bound(8, 2), cell_lower_bound(8, 2, cells=4, max_cells=4).lower  # two pieces of 128
    assert old.method == "teeth" and old.value - 1e-3 < new < old.value
    assert l1_lower_bound(8, 2, cell_bound=4).value == old.value  # the teeth bound is kept


def test_cell_bound_is_strictly_tighter_on_the_issue_cases():
    # k = 3, T = 2..5: the old certified bounds 0.188 / 0.125 / 0.063 / 0.047
    for T, old in zip((2, 3, 4, 5), (0.1875, 0.125, 0.0625, 0.046875), strict=True):
        assert l1_lower_bound(3, T).value == pytest.approx(old, abs=1e-9)
        assert cell_lower_bound(3, T, **SMALL).lower > old + 0.005


def test_known_optima_lie_in_the_interval():
    # T >= 2^k: tau^k itself, error exactly 0
    b = cell_lower_bound(3, 8)
    assert b.lower == 0.0 == b.upper and b.lps == 0
    # T = 1: the best affine fit of tau^k is the constant 1/2, error 1/4 (Markov)
    for k in (1, 2, 4):
        b = cell_lower_bound(k, 1, **SMALL)
        assert b.lower <= 0.25 <= b.upper
        assert 0.25 - b.lower < 1e-3 and b.upper == pytest.approx(0.25, abs=1e-12)


def test_levels_refine_and_budgets_stop_early():
    levels = dict(cells=2, max_cells=4, max_run=4)  # 16 + 64 LPs
    b = cell_lower_bound(3, 4, **levels)
    assert [c for c, _, _ in b.levels] == [2, 4] and b.stopped == "cells"
    assert b.levels[1][1] >= b.levels[0][1] and b.lower == pytest.approx(max(v for _, v, _ in b.levels), abs=1e-12)
    wide = cell_lower_bound(3, 4, gap=1.0, **levels)
    assert wide.stopped == "gap" and len(wide.levels) == 1
    rushed = cell_lower_bound(3, 4, time_budget=1e-9, **levels)
    assert rushed.stopped == "time" and len(rushed.levels) == 1 and rushed.lower <= b.lower


def test_wired_into_l1_lower_bound_and_the_class_bracket():
    old = l1_lower_bound(3, 4)
    new = l1_lower_bound(3, 4, cell_bound=2)
    assert (new.teeth, new.runs) == (old.teeth, old.runs) and old.cell == 0.0
    assert new.value == max(new.teeth, new.runs, new.cell) > old.value and new.method == "cell"
    b = class_bracket(2, cell_bound=2)
    assert b.lower.value >= class_bracket(2).lower.value
    assert b.lower.value <= b.upper.l1


def test_polish_only_lowers_the_upper_end_and_keeps_an_exact_t_piece_function():
    plain = cell_lower_bound(3, 3, **SMALL)
    polished = cell_lower_bound(3, 3, polish=3000, **SMALL)
    assert polished.lower == plain.lower
    assert polished.upper < plain.upper - 1e-3  # 0.2031 -> about 0.199
    assert len(polished.knots) - 1 <= 3 and np.all(np.diff(polished.knots) >= 0)
    assert polished.upper == pytest.approx(pwl_l1_to_tent(polished.knots, polished.values, 3), abs=1e-15)
    assert polished.lower <= polished.upper


@pytest.mark.slow
def test_the_theorem_brackets_cannot_be_halved_by_a_piece_count_bound():
    # L = 3 (k = 9, T = 108), levels c = 2, 4: a certified lower end well above the old one, and a 108-piece
    # function whose error is below the 0.2017 that halving the old bracket [0.1602, 0.2432] would need
    b = cell_lower_bound(9, 108, cells=2, max_cells=4, time_budget=1e9)
    assert 0.1914 < b.lower and b.upper < 0.2017
    assert b.lower > l1_lower_bound(9, 108).value + 0.031


@pytest.mark.slow
def test_class_brackets_with_the_cell_bound():
    # the numbers docs/theory.md §2.3 records (certified to the digits shown)
    b2 = class_bracket(2, cell_bound=8)
    assert 0.0669 < b2.lower.value < 0.0670 and b2.lower.method == "cell"
    # no bound from the piece count alone can pass E*(4, 12) <= 0.0860: a 12-piece h reaches it
    assert cell_lower_bound(4, 12, cells=8, max_cells=8).upper < 0.0860


@pytest.mark.parametrize(("call", "match"), [
    (lambda: cell_lower_bound(0, 3), "k: expected an integer >= 1"),
    (lambda: cell_lower_bound(3, 0), "pieces: expected an integer >= 1"),
    (lambda: cell_lower_bound(3, 2, cells=3), "cells: expected a power of two"),
    (lambda: cell_lower_bound(3, 2, cells=4, max_cells=2), "max_cells: expected >= cells"),
    (lambda: cell_lower_bound(3, 2, sub=6), "sub: expected a power of two"),
    (lambda: cell_lower_bound(3, 2, max_run=5), "max_run: expected an even number"),
    (lambda: cell_lower_bound(3, 2, gap=-0.1), "gap: expected a number >= 0"),
    (lambda: cell_lower_bound(3, 2, time_budget=0), "time_budget: expected a number of seconds > 0"),
    (lambda: cell_lower_bound(3, 2.0), "pieces"),
    (lambda: cell_lower_bound(3, 2, polish=-1), "polish: expected an integer >= 0"),
    (lambda: interval_fit_bound(3, 0.3, 0.5), "s, e: expected multiples of 2"),
    (lambda: interval_fit_bound(3, 0.5, 0.25), "s, e"),
    (lambda: interval_fit_bound(3, "0", 0.25), "s, e: expected two real numbers"),
    (lambda: l1_lower_bound(3, 2, cell_bound=-1), "cell_bound: expected an integer >= 0"),
    (lambda: l1_lower_bound(3, 2, cell_bound=3), "max_cells: expected a power of two"),
])
def test_bad_arguments_raise_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
