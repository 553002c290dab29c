"""A tighter certified lower bound on the best L1 error of T-piece functions against tau^k, by dynamic
programming over the cells that hold the breakpoints (``docs/theory.md`` §2.3, "The cell bound").

The quantity bounded is

    E*(k, T) = min over continuous piecewise-linear h on [0, 1] with at most T pieces of integral_0^1 |tau^k - h|.

**The argument.**  Cut [0, 1] into M = 2^k c equal cells of width w = 2^-k / c.  Let
A(s, e) = min over affine l of integral_s^e |tau^k - l| (the best affine L1 fit on [s, e]).

1. *Relax continuity.*  Every piece of h is affine on its own interval, so
   ``integral |tau^k - h| >= sum over pieces A(piece)``; the minimum of the right-hand side over every
   placement of the T - 1 breakpoints is a lower bound on E*, continuous or not.
2. *Discretise the breakpoints.*  A breakpoint t lies in a (closed) cell [i w, (i + 1) w].  A piece from a
   breakpoint in cell i to one in cell j > i + 1 contains [(i + 1) w, j w]; A is monotone under inclusion
   (the integrand is >= 0), so that piece costs >= A((i + 1) w, j w); a piece between breakpoints of the
   same or adjacent cells costs >= 0.  The first piece costs >= A(0, i w), the last >= A((i + 1) w, 1).
   The least total over all non-decreasing cell sequences (at most T - 1 breakpoints) is found exactly by
   a dynamic programme (:func:`_cell_dp`, O(T M^2)): it is the exhaustive branch and bound over breakpoint
   boxes of width w, with every node's bound shared between the nodes that agree on one piece.
3. *Certify each A.*  By L1 duality ``A(s, e) >= integral psi tau^k`` for every |psi| <= 1 orthogonal to
   1 and x on [s, e].  A LP (HiGHS) finds the best psi constant on q sub-cells per cell; psi is then
   projected onto the exact orthogonal complement and rescaled to |psi| <= 1, and the remaining float
   residuals rho_0 = |integral psi|, rho_1 = |integral psi (x - m)| (m the midpoint, lambda = e - s) enter
   through the minimiser's size: l* beats the constant 1/2, so ``integral |l*| <= lambda/2 + lambda`` and,
   since an affine function obeys ``sup |l| <= 4 integral |l| / lambda``, ``|l*(m)| <= 6`` and
   ``|slope| <= 12 / lambda``.  Hence ``A >= integral psi tau^k - 6 rho_0 - 12 rho_1 / lambda - margin``
   (margin: 1e-14 per sub-cell for float64 sums of at most n terms of total size <= 1).  All cell and sub-cell
   edges are dyadic (c, q powers of two), so tau^k is evaluated exactly and is linear on every sub-cell.
4. *Periodicity and long pieces.*  Call the 2^k linear pieces of tau^k (width 2^-k) its windows.  tau^k has
   period 2^(1-k) = 2c cells, so A depends on the start's phase mod 2c and the length, and A scales exactly
   with 2^-k, so one table serves every k; lengths up to ``max_run`` windows are solved, longer intervals are
   cut into chunks of ``max_run`` windows and their bounds added (A is superadditive: the best line on the
   whole interval is a line on each chunk).

Only the breakpoint placement is relaxed to cells and continuity is dropped; the bound rises with c and
converges to the best *discontinuous* T-piece fit, which lies below E*.  The upper end is any continuous
h with T pieces whose exact error is computed (:func:`pwl_l1_to_tent`): the
breakpoints of the optimal cell sequence at the cells' centres with the values of the L1 regression
(optionally polished by Powell's method on the exact error).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["CellBound", "cell_lower_bound", "follow_then_flat", "interval_fit_bound", "pwl_l1_to_tent"]

SUB_MARGIN = 1e-14  # per sub-cell: float64 sums of n terms of total size <= 1 err by far less


def _check_int(name: str, value: object, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < lo:
        raise ValueError(f"{name}: expected an integer >= {lo}, got {value!r}")
    return int(value)


# exact L1 distance between tau^k and a continuous piecewise-linear function, and the explicit member's
# function (used by smaso.depth.bracket, which imports them from here)
def _tent_power_np(x: np.ndarray, k: int) -> np.ndarray:
    """tau^k on [0, 1] as the triangle wave 1 - |2 frac(2^(k-1) x) - 1| (exact at dyadic points)."""
    if k == 0:
        return np.asarray(x, dtype=np.float64).copy()
    y = np.ldexp(np.asarray(x, dtype=np.float64), k - 1)
    return 1.0 - np.abs(2.0 * (y - np.floor(y)) - 1.0)


def _abs_integral(ga: np.ndarray, gb: np.ndarray, width: np.ndarray) -> np.ndarray:
    """integral of |g| over intervals where g is linear from ``ga`` to ``gb``."""
    aa, ab = np.abs(ga), np.abs(gb)
    same = ga * gb >= 0
    tot = aa + ab
    crossing = np.divide(ga * ga + gb * gb, 2.0 * tot, out=np.zeros_like(tot), where=tot > 0)
    return width * np.where(same, 0.5 * tot, crossing)


def pwl_l1_to_tent(knots: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray, k: int) -> float:
    """Exact ``integral_0^1 |tau^k - h|`` for the continuous piecewise-linear h through ``(knots, values)``.

    :param knots: increasing abscissae with ``knots[0] = 0`` and ``knots[-1] = 1`` (shape (n,)).
    :param values: h at the knots (shape (n,)).
    :param k: the tent power, >= 0.

    Both functions are linear between consecutive points of the union of ``knots`` and the 2^k + 1
    breakpoints of tau^k, so the integral is a sum of exact integrals of |linear| (no quadrature).
    """
    k = _check_int("k", k, 0)
    t = np.asarray(knots, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if t.ndim != 1 or t.shape != v.shape or len(t) < 2:
        raise ValueError(f"knots, values: expected two 1-D arrays of the same length >= 2, got {t.shape}, {v.shape}")
    if t[0] != 0.0 or t[-1] != 1.0 or np.any(np.diff(t) < 0):
        raise ValueError("knots: expected a non-decreasing array from 0 to 1")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(v))):
        raise ValueError("knots, values: expected finite numbers")
    x = np.union1d(t, np.arange(2**k + 1, dtype=np.float64) / 2**k)
    g = np.interp(x, t, v) - _tent_power_np(x, k)
    return float(_abs_integral(g[:-1], g[1:], np.diff(x)).sum())


def follow_then_flat(K: int, units: int) -> tuple[np.ndarray, np.ndarray]:
    """Knots and values of the function that follows tau^K exactly on its first ``units - 1``
    monotone pieces and half of the next one, and is 1/2 after: ``units`` interior knots, a flat
    last piece (so ``units`` ReLUs realise it), error ``(1/4) (1 - (units - 1/2) 2^-K)``.
    """
    K = _check_int("K", K, 0)
    m = _check_int("units", units, 1)
    if K == 0:
        raise ValueError("K: expected >= 1 (tau^0 is the identity, a single unit fits it)")
    m = min(m, 2**K)
    s = 2.0**-K
    follow = np.arange(1, m, dtype=np.float64) * s  # knots at the first m - 1 kinks of tau^K
    last = (m - 0.5) * s  # halfway down (or up) the m-th piece, where tau^K = 1/2
    knots = np.concatenate([[0.0], follow, [last, 1.0]])
    values = np.concatenate([_tent_power_np(knots[:-2], K), [0.5, 0.5]])
    return knots, values


def _check_pow2(name: str, value: object, lo: int = 1) -> int:
    value = _check_int(name, value, lo)
    if value & (value - 1):
        raise ValueError(f"{name}: expected a power of two (dyadic cell edges keep tau^k exact), got {value}")
    return value


@functools.lru_cache(maxsize=65536)
def _interval_dual(k: int, start: int, length: int, sub: int) -> float:
    """Certified lower bound on A(start / (2^k sub), (start + length) / (2^k sub)) from a dual psi constant on
    sub-cells of width 2^-k / sub (module docstring, step 3)."""
    from scipy.optimize import linprog

    w = 2.0**-k / sub  # dyadic: every edge below is exact
    edges = (start + np.arange(length + 1, dtype=np.float64)) * w
    lam = length * w
    fa, fb = _tent_power_np(edges[:-1], k), _tent_power_np(edges[1:], k)
    f_int = 0.5 * (fa + fb) * w  # tau^k is linear on every sub-cell: the trapezoid is its exact integral
    centred = 0.5 * (edges[:-1] + edges[1:]) - 0.5 * (edges[0] + edges[-1])
    A = np.stack([np.full(length, w), centred * w])  # integral of psi and of psi (x - m), psi constant per cell
    res = linprog(-f_int, A_eq=A, b_eq=np.zeros(2), bounds=(-1.0, 1.0), method="highs")
    if res.status != 0:  # pragma: no cover - psi = 0 is feasible and |psi| <= 1 keeps it bounded
        raise RuntimeError(f"interval_fit_bound: the LP failed: {res.message}")
    psi = res.x - A.T @ np.linalg.solve(A @ A.T, A @ res.x)
    psi = psi / max(1.0, float(np.abs(psi).max()))
    rho0, rho1 = abs(float(A[0] @ psi)), abs(float(A[1] @ psi))
    value = float(f_int @ psi) - 6.0 * rho0 - 12.0 * rho1 / lam - SUB_MARGIN * length
    return max(0.0, value)


def interval_fit_bound(k: int, s: float, e: float, *, sub: int = 64) -> float:
    """Certified ``A(s, e) = min over affine l of integral_s^e |tau^k - l|`` >= the value returned
    (module docstring, step 3).

    :param k: the tent power, >= 1.
    :param s, e: the interval, multiples of 2^-k / ``sub`` with 0 <= s < e <= 1.
    :param sub: sub-cells per window (linear piece of tau^k) for the dual function (a power of two).
    """
    k = _check_int("k", k, 1)
    sub = _check_pow2("sub", sub)
    if any(isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) for v in (s, e)):
        raise ValueError(f"s, e: expected two real numbers, got {s!r}, {e!r}")
    i, j = s * 2**k * sub, e * 2**k * sub
    if not (0 <= i < j <= 2**k * sub) or i != int(i) or j != int(j):
        raise ValueError(f"s, e: expected multiples of 2^-k / sub with 0 <= s < e <= 1, got {s!r}, {e!r}")
    return _interval_dual(k, int(i), int(j - i), sub)


UNIT_K = 8  # the piece table is computed for tau^8 (256 windows) and rescaled: A scales exactly with 2^-k


@functools.lru_cache(maxsize=32)
def _unit_table(cells: int, q: int, max_run: int) -> np.ndarray:
    """``tab[p, L]``: certified A over L cells starting at phase p (mod 2 ``cells``), L <= ``max_run`` windows,
    in window units (times 2^k; module docstring, step 4).

    tau^k on [s, e] is tau^K on [s 2^(k-K), e 2^(k-K)] stretched by 2^(K-k), so the same table serves every k
    (the scale factors are powers of two: exact).
    """
    period, lmax = 2 * cells, max_run * cells
    K = max(UNIT_K, int(np.ceil(np.log2(max_run + 2))) + 1)
    tab = np.zeros((period, lmax + 1))
    for p in range(period):
        for L in range(1, lmax + 1):
            tab[p, L] = _interval_dual(K, p * q, L * q, cells * q) * 2.0**K
    return tab


def _cell_dp(tab: np.ndarray, n_cells: int, pieces: int) -> tuple[float, list[int]]:
    """The least sum of piece bounds over every placement of at most ``pieces - 1`` breakpoints in cells
    (module docstring, step 2), and the cells of one optimal placement.  ``tab`` as :func:`_unit_table`, scaled."""
    period, lmax = tab.shape[0], tab.shape[1] - 1
    lengths = np.arange(n_cells + 1)
    whole, rest = np.divmod(lengths, lmax)
    # G[p, L]: bound on L cells from phase p (lmax is a multiple of the period: every chunk keeps the phase)
    G = whole[None, :] * tab[:, lmax][:, None] + tab[:, rest]
    G[:, 0] = 0.0
    first = G[0, :n_cells]  # [0, i w]: the first breakpoint in cell i
    idx = np.arange(n_cells)
    last = G[(idx + 1) % period, n_cells - idx - 1]  # [(i + 1) w, 1]: the last breakpoint in cell i
    # step[i, j] = A((i + 1) w, j w) (breakpoint in cell i, the next in cell j): 0 if j = i or i + 1, inf if j < i
    step = np.full((n_cells, n_cells), np.inf)
    for i in range(n_cells):
        step[i, i:i + 2] = 0.0
        step[i, i + 2:] = G[(i + 1) % period, 1:n_cells - i - 1]
    best, arg = float(G[0, n_cells]), (0, -1)  # one piece
    D, back = first, []
    for j in range(1, pieces):
        total = D + last
        i_best = int(np.argmin(total))
        if total[i_best] < best:
            best, arg = float(total[i_best]), (j, i_best)
        if j == pieces - 1:
            break
        cand = D[:, None] + step
        back.append(np.argmin(cand, axis=0))
        D = cand[back[-1], idx]
    n_break, i = arg
    placement = []
    if n_break:
        placement = [i]
        for b in reversed(back[: n_break - 1]):
            i = int(b[i])
            placement.append(i)
    return best, placement[::-1]


def _regression_values(k: int, knots: np.ndarray, samples: int) -> np.ndarray:
    """Knot values of the L1 regression of tau^k on ``samples`` midpoints (a LP, HiGHS)."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix, hstack, identity, vstack

    x = (np.arange(samples) + 0.5) / samples
    y = _tent_power_np(x, k)
    j = np.clip(np.searchsorted(knots, x, side="right") - 1, 0, len(knots) - 2)
    u = (x - knots[j]) / (knots[j + 1] - knots[j])
    rows = np.concatenate([np.arange(samples)] * 2)
    basis = csr_matrix((np.concatenate([1 - u, u]), (rows, np.concatenate([j, j + 1]))), shape=(samples, len(knots)))
    eye = identity(samples, format="csr")
    A = vstack([hstack([basis, -eye]), hstack([-basis, -eye])])
    c = np.concatenate([np.zeros(len(knots)), np.full(samples, 1.0 / samples)])
    res = linprog(c, A_ub=A, b_ub=np.concatenate([y, -y]), bounds=[(None, None)] * len(knots) + [(0, None)] * samples,
                  method="highs")
    return res.x[: len(knots)]


@dataclass(frozen=True)
class CellBound:
    """A certified interval ``lower <= E*(k, T) <= upper`` (module docstring).

    :ivar lower: the cell bound at the finest level reached (the levels' bounds are all valid; the largest is kept).
    :ivar upper: the exact error of ``knots``/``values``, a continuous function with at most T pieces.
    :ivar cells: cells per kink window at the finest level reached.
    :ivar levels: ``(cells, lower, seconds)`` of every level run.
    :ivar lps: interval LPs solved; ``states``: DP states (cell pairs) evaluated, summed over levels.
    :ivar stopped: ``"gap"``, ``"time"`` or ``"cells"`` (the ``max_cells`` level was reached).
    """

    k: int
    pieces: int
    lower: float
    upper: float
    cells: int
    levels: tuple[tuple[int, float, float], ...]
    lps: int
    states: int
    stopped: str
    knots: np.ndarray
    values: np.ndarray

    @property
    def gap(self) -> float:
        """The certified interval's width, ``upper - lower`` (0 when the bound is exact)."""
        return self.upper - self.lower


def cell_lower_bound(k: int, pieces: int, *, cells: int = 2, max_cells: int = 8, sub: int = 8, max_run: int = 24,
                     gap: float = 0.0, time_budget: float = 60.0, samples_per_window: int = 16,
                     polish: int = 0) -> CellBound:
    """Certified interval on ``E*(k, T)``, the least ``integral_0^1 |tau^k - h|`` over continuous
    piecewise-linear h with at most T = ``pieces`` pieces (module docstring: the cell bound).

    Levels of ``cells`` = 2, 4, ... (from ``cells`` up to ``max_cells``) cells per window (linear piece of
    tau^k, width 2^-k) are run in turn;
    each gives a certified lower bound (every level is valid, the largest is returned) and a feasible h
    (the least exact error is returned).  It stops after the level that brings ``upper - lower <= gap``, after
    ``max_cells``, or when the next level would start past ``time_budget`` seconds.  Cost per level: the
    2 c * ``max_run`` c interval LPs (each with up to ``max_run`` c ``sub`` variables, cached across calls) and
    a O(T M^2) dynamic programme on M = 2^k c cells (memory ~ 3 M^2 floats).

    :param k: the tent power, >= 1.
    :param pieces: T >= 1.
    :param cells: cells per window of the first level (a power of two).
    :param max_cells: the finest level (a power of two >= ``cells``).
    :param sub: dual sub-cells per cell (a power of two).
    :param max_run: windows solved by one LP (even, so chunks keep their phase); longer pieces are chunked.
    :param gap: stop once ``upper - lower <= gap``.
    :param time_budget: seconds; no new level starts after it.
    :param samples_per_window: samples of the L1 regression that sets the upper end's knot values.
    :param polish: at most this many evaluations of Powell's method on the exact error over the upper end's
        knots and values (0: none); only lowers ``upper``, the lower end is untouched.
    """
    k = _check_int("k", k, 1)
    T = _check_int("pieces", pieces, 1)
    c = _check_pow2("cells", cells)
    c_max = _check_pow2("max_cells", max_cells)
    if c_max < c:
        raise ValueError(f"max_cells: expected >= cells = {c}, got {c_max}")
    q = _check_pow2("sub", sub)
    max_run = _check_int("max_run", max_run, 2)
    if max_run % 2:
        raise ValueError(f"max_run: expected an even number of windows (chunks keep their phase), got {max_run}")
    samples = _check_int("samples_per_window", samples_per_window, 1) * 2**k
    polish = _check_int("polish", polish, 0)
    if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not gap >= 0:
        raise ValueError(f"gap: expected a number >= 0, got {gap!r}")
    if isinstance(time_budget, bool) or not isinstance(time_budget, (int, float)) or not time_budget > 0:
        raise ValueError(f"time_budget: expected a number of seconds > 0, got {time_budget!r}")

    start = time.perf_counter()
    if T >= 2**k:  # tau^k itself has 2^k pieces: E* = 0
        knots = np.arange(2**k + 1, dtype=np.float64) / 2**k
        values = _tent_power_np(knots, k)
        return CellBound(k, T, 0.0, pwl_l1_to_tent(knots, values, k), c, (), 0, 0, "gap", knots, values)
    # a first feasible h: follow tau^k on its first pieces, then 1/2 (follow_then_flat)
    knots, values = follow_then_flat(k, T - 1) if T > 1 else (np.array([0.0, 1.0]), np.array([0.5, 0.5]))
    upper = pwl_l1_to_tent(knots, values, k)
    lower, levels, lps, states, stopped = 0.0, [], 0, 0, "cells"
    while True:
        t0 = time.perf_counter()
        unit = _unit_table(c, q, max_run)
        n_cells = 2**k * c
        bound, placement = _cell_dp(unit * 2.0**-k, n_cells, T)
        lps += unit.size - unit.shape[0]
        states += T * n_cells * n_cells
        lower = max(lower, bound - 1e-14 * T)  # float64 sums of at most T piece bounds
        # the placement's cells' centres as breakpoints of a continuous h (distinct, inside (0, 1))
        t_mid = np.unique((np.asarray(placement, dtype=np.float64) + 0.5) / n_cells)
        cand_knots = np.concatenate([[0.0], t_mid, [1.0]])
        cand_values = _regression_values(k, cand_knots, samples)
        cand = pwl_l1_to_tent(cand_knots, cand_values, k)
        if cand < upper:
            knots, values, upper = cand_knots, cand_values, cand
        levels.append((c, bound, time.perf_counter() - t0))
        if upper - lower <= gap:
            stopped = "gap"
            break
        if 2 * c > c_max:
            break
        if time.perf_counter() - start > time_budget:
            stopped = "time"
            break
        c *= 2
    if polish:
        knots, values, upper = _polish(k, knots, values, upper, polish)
    return CellBound(k, T, lower, upper, c, tuple(levels), lps, states, stopped, knots, values)


def _polish(k: int, knots: np.ndarray, values: np.ndarray, error: float, evals: int
            ) -> tuple[np.ndarray, np.ndarray, float]:
    """Powell's method on the exact error over the interior knots (sorted, clipped to [0, 1]) and the values."""
    from scipy.optimize import minimize

    n = len(knots) - 2

    def unpack(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.concatenate([[0.0], np.sort(np.clip(p[:n], 0.0, 1.0)), [1.0]]), p[n:]

    res = minimize(lambda p: pwl_l1_to_tent(*unpack(p), k), np.concatenate([knots[1:-1], values]), method="Powell",
                   options={"maxfev": evals, "xtol": 1e-10, "ftol": 1e-14})
    new_knots, new_values = unpack(res.x)
    new_error = pwl_l1_to_tent(new_knots, new_values, k)  # recomputed: the upper end is this function's error
    return (new_knots, new_values.copy(), new_error) if new_error < error else (knots, values, error)
