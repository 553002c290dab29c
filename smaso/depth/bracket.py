"""How well *any* network of a class can approximate tau^k: a certified bracket (``docs/theory.md`` §2.3
states both bounds, their arguments and the recorded brackets).

The depth-separation theorem (seed ``001``) bounds the L1 error ``integral_0^1 |tau^k - h|`` of every
ReLU network h of depth L with at most 2^L nodes.  This module brackets the best error a member of such
a class can reach:

- **Lower bound, certified** (:func:`l1_lower_bound`): every member has at most T linear pieces
  (:func:`class_max_pieces`); the *teeth* bound ``(2^(k-1) - (T - 1))_+ 2^(1-k) / 4`` and the *runs* bound
  ``2^-k ((2^k - T) / 4 - D)``, D the largest total deficit (:func:`_deficit_line_bound`) of the kink-window
  runs (:func:`run_deficit`, an L1-duality certificate).  :func:`brute_force_min` (small k and T) shows
  the gap to the true minimum.  Optionally (``cell_bound=``) also the tighter *cell* bound of
  :func:`smaso.depth.pwl_bound.cell_lower_bound` (a dynamic programme over breakpoint cells).
- **Upper bound, explicit** (:func:`class_upper_bound`, :func:`architecture_upper_bound`): a member built
  by hand, j width-2 tent layers then a layer that follows tau^(k-j) on its first pieces and stays at 1/2
  (:func:`follow_then_flat`), its error recomputed exactly from the network's pieces (:func:`pieces_l1_to_tent`).

``pwl_l1_to_tent`` and ``follow_then_flat`` live in :mod:`smaso.depth.pwl_bound` (the cell bound uses them) and
are exported here too.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from smaso.depth.pieces import PieceCount, breakpoint_bound, count_pieces
from smaso.depth.pwl_bound import (
    _abs_integral,
    _check_int,
    _tent_power_np,
    cell_lower_bound,
    follow_then_flat,
    pwl_l1_to_tent,
)

__all__ = [
    "Bracket",
    "L1LowerBound",
    "Member",
    "architecture_upper_bound",
    "brute_force_min",
    "class_bracket",
    "class_max_pieces",
    "class_upper_bound",
    "follow_then_flat",
    "l1_lower_bound",
    "pieces_l1_to_tent",
    "pwl_l1_to_tent",
    "run_deficit",
]

DT = torch.float64
MARGIN = 1e-12  # per kink window, for float64 sums in the certified bound


def _check_widths(widths: Sequence[int]) -> tuple[int, ...]:
    if isinstance(widths, (str, bytes)) or not isinstance(widths, Sequence) or not widths:
        raise ValueError(f"widths: expected at least one positive hidden width, got {widths!r}")
    if any(isinstance(m, bool) or not isinstance(m, (int, np.integer)) or int(m) < 1 for m in widths):
        raise ValueError(f"widths: expected positive integer hidden widths, got {list(widths)}")
    return tuple(int(m) for m in widths)


# ---------------------------------------------------------------------------------------------
# exact L1 distance between tau^k and a network (a piecewise-linear function: pwl_bound.pwl_l1_to_tent)
# ---------------------------------------------------------------------------------------------


def pieces_l1_to_tent(pc: PieceCount, k: int) -> float:
    """Exact ``integral |tau^k - net|`` over ``[pc.edges[0], pc.edges[-1]]`` of a counted network
    (:func:`smaso.depth.pieces.count_pieces`), from its pieces' slopes and intercepts."""
    k = _check_int("k", k, 0)
    lo, hi = float(pc.edges[0]), float(pc.edges[-1])
    kinks = np.arange(2**k + 1, dtype=np.float64) / 2**k
    x = np.union1d(pc.edges, kinks[(kinks > lo) & (kinks < hi)])
    mid = 0.5 * (x[:-1] + x[1:])
    i = np.clip(np.searchsorted(pc.edges, mid, side="right") - 1, 0, pc.count - 1)
    ha = pc.slopes[i] * x[:-1] + pc.intercepts[i]
    hb = pc.slopes[i] * x[1:] + pc.intercepts[i]
    ga, gb = ha - _tent_power_np(x[:-1], k), hb - _tent_power_np(x[1:], k)
    return float(_abs_integral(ga, gb, np.diff(x)).sum())


# ---------------------------------------------------------------------------------------------
# the certified lower bound
# ---------------------------------------------------------------------------------------------


GLUE_BASE = 24  # runs longer than this reuse the dual of a run of 24 (or 25) windows, extended


@functools.lru_cache(maxsize=128)
def _run_dual(r: int, cells: int) -> tuple[float, float, np.ndarray]:
    """The LP dual of a run of r windows: ``(integral phi f, orthogonality residual, phi)``.

    ``phi`` has shape (r, cells), |phi| <= 1, projected onto the orthogonal complement of the hats.
    """
    from scipy.optimize import linprog

    edges = np.arange(r * cells + 1, dtype=np.float64) / cells
    a, b = edges[:-1], edges[1:]
    window = np.minimum(np.floor(a), r - 1)
    f_int = 0.5 * (_window_f(a, window) + _window_f(b, window)) / cells  # f is linear on each cell
    knots = np.arange(r + 1, dtype=np.float64)[:, None]
    hat_a, hat_b = np.maximum(0.0, 1.0 - np.abs(a - knots)), np.maximum(0.0, 1.0 - np.abs(b - knots))
    A = 0.5 * (hat_a + hat_b) / cells  # (r + 1, r * cells): integral of each hat over each cell
    res = linprog(-f_int, A_eq=A, b_eq=np.zeros(r + 1), bounds=(-1.0, 1.0), method="highs")
    if res.status != 0:  # pragma: no cover - the LP is always feasible (phi = 0) and bounded
        raise RuntimeError(f"run_deficit: the LP failed: {res.message}")
    phi = res.x - A.T @ np.linalg.solve(A @ A.T, A @ res.x)
    phi = phi / max(1.0, float(np.abs(phi).max()))
    return float(f_int @ phi), float(np.abs(A @ phi).max()), phi.reshape(r, cells)


def _window_f(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """f on the unit windows of a run: an apex 1/2 -> 1 -> 1/2 on even windows, a valley on odd ones."""
    return 0.5 + 0.5 * np.where(w % 2 == 0, 1.0, -1.0) * (1.0 - np.abs(2.0 * (x - w) - 1.0))


def _moments(phi_w: np.ndarray, cells: int) -> tuple[float, float]:
    """``(integral phi (1 - y), integral phi y)`` over one window (y in [0, 1], phi on ``cells`` cells):
    its shares of the hats at the window's left and right boundary."""
    y = (np.arange(cells) + 0.5) / cells  # both weights are linear, so the midpoint rule is exact
    return float(phi_w @ (1.0 - y)) / cells, float(phi_w @ y) / cells


@functools.lru_cache(maxsize=4096)
def run_deficit(r: int, cells: int = 64) -> float:
    """A certified upper bound d(r) on the deficit r/4 - G(r) of a run of r kink windows.

    G(r) is the least ``integral |f - h|`` over r unit windows on which f alternates between an
    apex (1/2 -> 1 -> 1/2) and a valley (1/2 -> 0 -> 1/2), over continuous h affine on every window.
    By L1 duality ``G(r) >= integral phi f`` for every |phi| <= 1 orthogonal to the r + 1 boundary hat
    functions; a LP finds the best phi constant on ``cells`` equal cells per window.  For
    r > ``GLUE_BASE`` the dual of a run of 24 or 25 windows (the parity of r) is cut in the middle and
    r - 24 (or r - 25) windows of +-1 are inserted (each pair adds exactly 1/2).  The orthogonality
    residual rho enters as ``4 r rho`` (an h with error <= r/4 has sum |h(knots)| <= 4 r) and a float64
    margin of 1e-12 per cell is subtracted, so ``G(r) >= r/4 - run_deficit(r)`` rigorously (for a run
    starting at an apex or a valley alike).
    """
    r = _check_int("r", r, 1)
    cells = _check_int("cells", cells, 2)
    if cells % 2:
        raise ValueError(f"cells: expected an even number (a cell edge at every apex), got {cells}")
    if r <= GLUE_BASE + 1:
        value, rho, _ = _run_dual(r, cells)
    else:
        base = GLUE_BASE + (r - GLUE_BASE) % 2
        value, rho, phi = _run_dual(base, cells)
        cut = base // 2  # windows [0, cut) of the base dual, then r - base windows of +-1, then the rest
        sign = 1.0 if cut % 2 == 0 else -1.0  # the inserted window after the cut has phi = sign
        left_share = _moments(phi[cut - 1], cells)[1]  # window cut - 1's share of the hat at the cut
        right_share = _moments(phi[cut], cells)[0]  # window cut's share of the hat at the far cut
        rho = max(rho, abs(left_share + sign / 2), abs(-sign / 2 + right_share))
        value += (r - base) / 4
    return r / 4 - (value - 4.0 * r * rho - MARGIN * r * cells)


def _deficit_line_bound(n_windows: int, n_runs: int, cells: int) -> float:
    """Largest total deficit of at most ``n_runs`` runs with ``n_windows`` windows in all.

    Every run of r windows has deficit <= d(r) (:func:`run_deficit`).  For any line
    mu + lambda r above d with mu >= 0 the total is <= n_runs mu + lambda n_windows; the best such
    line (an edge of the upper concave hull of d) is used.
    """
    if n_windows <= 0:
        return 0.0
    m = min(n_runs, n_windows)
    r_all = np.arange(1, n_windows + 1, dtype=np.float64)
    d = np.array([run_deficit(int(r), cells) for r in r_all])
    hull: list[int] = []  # upper concave hull of (r, d(r)), monotone chain
    for i in range(n_windows):
        while len(hull) >= 2:
            i0, i1 = hull[-2], hull[-1]
            if (d[i1] - d[i0]) * (r_all[i] - r_all[i0]) <= (d[i] - d[i0]) * (r_all[i1] - r_all[i0]):
                hull.pop()
            else:
                break
        hull.append(i)
    best = m * float(d.max())  # the flat line mu = max d
    for i0, i1 in itertools.pairwise(hull):
        lam = (d[i1] - d[i0]) / (r_all[i1] - r_all[i0])
        mu = d[i0] - lam * r_all[i0]
        if mu >= 0:
            best = min(best, m * mu + lam * n_windows)
    return best


@dataclass(frozen=True)
class L1LowerBound:
    """A certified lower bound on ``integral_0^1 |tau^k - h|`` over h with at most ``pieces`` pieces.

    :ivar value: the bound, ``max(teeth, runs)``.
    :ivar teeth: the teeth argument's bound.
    :ivar runs: the kink-window runs argument's bound.
    :ivar method: ``"teeth"``, ``"runs"`` or ``"cell"``, whichever is largest (``"exact"`` when pieces >= 2^k: 0).
    :ivar cell: the cell bound (:func:`smaso.depth.pwl_bound.cell_lower_bound`), 0 when not asked for.
    """

    k: int
    pieces: int
    value: float
    teeth: float
    runs: float
    method: str
    cell: float = 0.0


def l1_lower_bound(k: int, pieces: int, *, cells: int = 64, cell_bound: int = 0) -> L1LowerBound:
    """Certified ``min integral_0^1 |tau^k - h|`` >= value over continuous piecewise-linear h with at
    most ``pieces`` linear pieces on [0, 1] (module docstring: the teeth and runs arguments, and the cell bound).

    :param k: the tent power, >= 1.
    :param pieces: T >= 1, e.g. :func:`class_max_pieces` of a network class.
    :param cells: cells per window of the LP's piecewise-constant dual function.
    :param cell_bound: 0 (default) skips the cell bound; a power of two c also runs
        :func:`smaso.depth.pwl_bound.cell_lower_bound` up to c cells per piece of tau^k and keeps the largest
        bound.  Its cost: about 2 c * 24 c interval LPs once (cached; ~50 s at c = 8) and a O(T M^2)
        dynamic programme on M = 2^k c cells (memory ~ 2 M^2 floats: k = 9 and c = 8 take ~0.3 GB).
    """
    k = _check_int("k", k, 1)
    T = _check_int("pieces", pieces, 1)
    c = _check_int("cell_bound", cell_bound, 0)
    if T >= 2**k:
        return L1LowerBound(k, T, 0.0, 0.0, 0.0, "exact")
    teeth = max(0, 2 ** (k - 1) - (T - 1)) * 2.0 ** (1 - k) / 4
    n_free = 2**k - T
    deficit = _deficit_line_bound(n_free, T, cells)
    runs = max(0.0, (n_free / 4 - deficit) / 2**k)
    cell = 0.0
    if c:
        cell = cell_lower_bound(k, T, cells=min(2, c), max_cells=c, time_budget=float("inf")).lower
    method = max((teeth, "teeth"), (runs, "runs"), (cell, "cell"), key=lambda pair: pair[0])[1]
    return L1LowerBound(k, T, max(teeth, runs, cell), teeth, runs, method, cell)


def class_max_pieces(depth: int, nodes: int) -> tuple[int, tuple[int, ...]]:
    """The largest breakpoint bound (:func:`~smaso.depth.pieces.breakpoint_bound`) of a ReLU network
    with at most ``depth`` hidden layers and at most ``nodes`` hidden nodes, and widths reaching it.

    Every member of the class has at most that many linear pieces on any interval.
    """
    depth = _check_int("depth", depth, 1)
    nodes = _check_int("nodes", nodes, 1)
    best: tuple[int, tuple[int, ...]] = (0, ())
    for L in range(1, min(depth, nodes) + 1):
        # compositions of n <= nodes into L positive parts: the bound grows with every width
        for cuts in itertools.combinations(range(1, nodes), L - 1):
            widths = tuple(b - a for a, b in itertools.pairwise((0, *cuts, nodes)))
            bound = breakpoint_bound(widths)
            if bound > best[0]:
                best = (bound, widths)
    return best


# ---------------------------------------------------------------------------------------------
# the explicit upper bound
# ---------------------------------------------------------------------------------------------


def _empty_linear(a: int, b: int) -> nn.Linear:
    """A float64 ``Linear(a, b)`` whose weights are set next (built on meta: no draw from the global RNG)."""
    return nn.Linear(a, b, dtype=DT, device="meta").to_empty(device="cpu")


def _shallow_from_knots(knots: np.ndarray, values: np.ndarray) -> nn.Sequential:
    """A one-hidden-layer ReLU network equal on [0, 1] to the piecewise-linear function through
    ``(knots, values)`` whose last piece is flat: h = v_last + sum_i a_i ReLU(t_i - x), one unit
    per interior knot t_i (a_i = the slope change there)."""
    t, v = knots[1:-1], values
    slopes = np.diff(v) / np.diff(knots)
    if abs(slopes[-1]) > 1e-12:
        raise ValueError("values: the last piece must be flat")
    # slope on piece i is -sum_{j >= i} a_j  =>  a_i = slope_{i+1} - slope_i
    a = slopes[1:] - slopes[:-1]
    first = _empty_linear(1, len(t))
    out = _empty_linear(len(t), 1)
    with torch.no_grad():
        first.weight.copy_(torch.full((len(t), 1), -1.0, dtype=DT))
        first.bias.copy_(torch.as_tensor(t, dtype=DT))
        out.weight.copy_(torch.as_tensor(a, dtype=DT)[None])
        out.bias.fill_(float(v[-1]))
    return nn.Sequential(first, nn.ReLU(), out)


def _compose_tent(j: int, top: nn.Sequential) -> nn.Sequential:
    """``top(tau^j(x))`` as one Linear/ReLU network: j width-2 tent layers, then ``top``'s hidden layer."""
    from teachers.tent import TentNetwork

    if j == 0:
        return top
    tent = list(TentNetwork(j, dtype=DT))
    readout, first = cast(nn.Linear, tent[-1]), cast(nn.Linear, top[0])  # nn.Sequential items read as Module
    merged = _empty_linear(readout.in_features, first.out_features)
    with torch.no_grad():  # first(readout(h)) = W1 (w h + b) + b1
        merged.weight.copy_(first.weight @ readout.weight)
        merged.bias.copy_(first.weight @ readout.bias + first.bias)
    return nn.Sequential(*tent[:-1], merged, *list(top)[1:])


@dataclass
class Member:
    """An explicit network of a class with its exact error against tau^k.

    :ivar widths: hidden widths (2 for each tent layer, then the fitted layer).
    :ivar tent_layers: j, the number of tent layers.
    :ivar l1: exact ``integral |tau^k - net|`` from the network's pieces.
    :ivar formula: the same from ``(1/4) (1 - (m - 1/2) 2^(j-k))``.
    :ivar pieces: the network's exact piece count on [0, 1].
    """

    widths: tuple[int, ...]
    tent_layers: int
    l1: float
    formula: float
    pieces: int
    net: nn.Module


def class_upper_bound(k: int, depth: int, nodes: int) -> Member:
    """The best explicit member (module docstring) of the ReLU networks with at most ``depth``
    hidden layers and ``nodes`` hidden nodes against tau^k: j tent layers and one fitted layer of
    ``nodes - 2 j`` units, the best j <= depth - 1 (its error recomputed from its exact pieces)."""
    k = _check_int("k", k, 1)
    depth = _check_int("depth", depth, 1)
    nodes = _check_int("nodes", nodes, 1)
    best: Member | None = None
    if k <= depth and 2 * k <= nodes:  # the class holds the exact tent network
        from teachers.tent import TentNetwork

        tent = TentNetwork(k, dtype=DT)
        pc = count_pieces(tent, 0.0, 1.0)
        return Member((2,) * k, k, pieces_l1_to_tent(pc, k), 0.0, pc.count, tent)
    for j in range(0, min(depth - 1, (nodes - 1) // 2, k - 1) + 1):
        m = nodes - 2 * j
        knots, values = follow_then_flat(k - j, m)
        net = _compose_tent(j, _shallow_from_knots(knots, values))
        pc = count_pieces(net, 0.0, 1.0)
        used = len(knots) - 2
        formula = 0.25 * (1 - (used - 0.5) * 2.0 ** (j - k)) if used < 2 ** (k - j) else 0.0
        member = Member((2,) * j + (used,), j, pieces_l1_to_tent(pc, k), formula, pc.count, net)
        if best is None or member.l1 < best.l1:
            best = member
    assert best is not None
    return best


def _architecture_network(widths: tuple[int, ...], roles: Sequence[str], k: int) -> nn.Sequential:
    """The network of hidden widths ``widths`` whose layer i plays ``roles[i]``.

    A *signal* s(x) in [0, 1] is carried as an affine readout ``a . h + c`` of the previous layer
    (s = x at first).  ``"tent"`` (width >= 2): units ReLU(s), ReLU(s - 1/2), the signal becomes
    tau(s) = 2 ReLU(s) - 4 ReLU(s - 1/2).  ``"pass"``: ReLU(s) = s.  ``"fit"``: :func:`follow_then_flat`
    of K = k - (tent layers before) with units ReLU(t_i - s), or tau^K exactly with its 2^K units
    ReLU(s - t_i), t_0 = 0.  Spare units are dead (zero weights and bias).
    """
    a, c = np.ones(1), 0.0
    tents = 0
    layers: list[nn.Module] = []
    for m, role in zip(widths, roles, strict=True):
        if role == "tent":
            shifts, readout, tents = np.array([0.0, -0.5]), np.array([2.0, -4.0]), tents + 1
            signs = np.ones(2)
        elif role == "pass":
            shifts, readout, signs = np.zeros(1), np.ones(1), np.ones(1)
        else:
            K = k - tents
            if m >= 2**K:  # tau^K itself: slope changes at 0 and at its 2^K - 1 interior kinks
                t = np.arange(2**K, dtype=np.float64) / 2**K
                slopes = np.where(np.arange(2**K) % 2 == 0, 1.0, -1.0) * 2.0**K
                shifts, signs = -t, np.ones(2**K)
                readout, new_c = np.diff(slopes, prepend=0.0), 0.0
            else:
                knots, values = follow_then_flat(K, m)
                slopes = np.diff(values) / np.diff(knots)
                shifts, signs = knots[1:-1], -np.ones(len(knots) - 2)
                readout, new_c = slopes[1:] - slopes[:-1], float(values[-1])
        lin = _empty_linear(len(a), m)
        with torch.no_grad():
            lin.weight.zero_()
            lin.bias.zero_()
            n = len(shifts)  # unit u: ReLU(sign_u s + shift_u), s = a . h + c
            lin.weight[:n] = torch.as_tensor(signs[:, None] * a[None, :], dtype=DT)
            lin.bias[:n] = torch.as_tensor(signs * c + shifts, dtype=DT)
        layers += [lin, nn.ReLU()]
        a = np.zeros(m)
        a[: len(readout)] = readout
        c = new_c if role == "fit" else 0.0
    out = _empty_linear(len(a), 1)
    with torch.no_grad():
        out.weight.copy_(torch.as_tensor(a, dtype=DT)[None])
        out.bias.fill_(c)
    return nn.Sequential(*layers, out)


def architecture_upper_bound(k: int, widths: Sequence[int]) -> Member:
    """The best explicit network with exactly the hidden widths ``widths`` against tau^k.

    For each choice of the *fitted* layer f: every layer before f of width >= 2 is a tent layer
    (up to k of them), the layers after f pass the signal through, and layer f follows
    tau^(k - j) on its first ``widths[f] - 1`` monotone pieces and then stays at 1/2 (or equals
    it, with enough units); the best f is kept (:func:`_architecture_network`).  Its error,
    recomputed from the network's exact pieces, bounds from above the best error any network of
    these widths can reach; next to :func:`l1_lower_bound` of
    :func:`~smaso.depth.pieces.breakpoint_bound` ``(widths)`` it brackets that best error.
    """
    k = _check_int("k", k, 1)
    widths = _check_widths(widths)
    best: Member | None = None
    for f in range(len(widths)):
        wide = [i for i in range(f) if widths[i] >= 2][:k]
        j = len(wide)
        roles = ["tent" if i in wide else "pass" for i in range(f)] + ["fit" if j < k else "pass"]
        roles += ["pass"] * (len(widths) - f - 1)
        net = _architecture_network(widths, roles, k)
        pc = count_pieces(net, 0.0, 1.0)
        K, m = k - j, widths[f]
        formula = 0.0 if j == k or m >= 2**K else 0.25 * (1 - (m - 0.5) * 2.0**-K)
        member = Member(widths, j, pieces_l1_to_tent(pc, k), formula, pc.count, net)
        if best is None or member.l1 < best.l1 - 1e-15:
            best = member
    assert best is not None
    return best


@dataclass
class Bracket:
    """The best L1 error any member of a depth-separation class can reach lies in [lower, upper].

    :ivar L: the class: depth <= L, at most 2^L hidden nodes.
    :ivar k: the target tau^k.
    :ivar max_pieces: the largest breakpoint bound in the class (reached by ``max_widths``).
    :ivar lower: the certified lower bound for ``max_pieces`` pieces.
    :ivar upper: the best explicit member (its exact error is ``upper.l1``).
    """

    L: int
    k: int
    nodes: int
    max_pieces: int
    max_widths: tuple[int, ...]
    lower: L1LowerBound
    upper: Member

    def contains(self, l1: float, tol: float = 1e-9) -> bool:
        """Whether an error is consistent with the bracket's lower end (every member's error is >= lower)."""
        return l1 >= self.lower.value - tol


def class_bracket(L: int, k: int | None = None, *, nodes: int | None = None, cell_bound: int = 0) -> Bracket:
    """The bracket of the theorem's class for depth L (at most 2^L nodes; target k = L^2 by default).

    ``cell_bound`` = c > 0 adds the cell bound to the lower end (:func:`l1_lower_bound`, which states its cost:
    seconds for L = 2, about a minute for L = 3 at c = 8; out of reach for L = 4, M = 2^16 c cells).
    """
    L = _check_int("L", L, 1)
    k = L * L if k is None else _check_int("k", k, 1)
    nodes = 2**L if nodes is None else _check_int("nodes", nodes, 1)
    T, widths = class_max_pieces(L, nodes)
    lower = l1_lower_bound(k, T, cell_bound=cell_bound)
    return Bracket(L, k, nodes, T, widths, lower, class_upper_bound(k, L, nodes))


# ---------------------------------------------------------------------------------------------
# brute force (small k and T): the reference the certified bound is checked against
# ---------------------------------------------------------------------------------------------


def brute_force_min(k: int, pieces: int, *, grid: int = 32, refine: int = 4, samples: int = 2048,
                    seed: int = 0) -> float:
    """The least error found over h with ``pieces`` pieces by exhaustive search: an upper estimate of
    the true minimum (a value some h reaches), close to it for small k and T.

    Every set of ``pieces - 1`` interior knots on a grid of step 1/``grid`` is tried with the knot
    values of the L1 regression on ``samples`` midpoints (a linear programme, HiGHS); each
    candidate is scored by its *exact* error (:func:`pwl_l1_to_tent`), and the ``refine`` best are
    polished over knots and values together (Nelder-Mead on the exact error).  Exponential in
    ``pieces``: meant for pieces <= 4.
    """
    from scipy.optimize import linprog, minimize

    k = _check_int("k", k, 1)
    T = _check_int("pieces", pieces, 1)
    grid = _check_int("grid", grid, 2)
    rng = np.random.default_rng(seed)
    x = (np.arange(samples) + 0.5) / samples
    y = _tent_power_np(x, k)

    def exact(t: npt.ArrayLike, v: np.ndarray) -> float:
        return pwl_l1_to_tent(np.concatenate([[0.0], t, [1.0]]), v, k)

    def l1_regression(t: npt.ArrayLike) -> np.ndarray:
        knots = np.concatenate([[0.0], t, [1.0]])
        basis = np.stack([np.interp(x, knots, np.eye(len(knots))[i]) for i in range(len(knots))], axis=1)
        n, p = basis.shape  # variables: values (p, free), residual bounds e (n, >= 0): min sum e
        A = np.block([[basis, -np.eye(n)], [-basis, -np.eye(n)]])
        res = linprog(np.concatenate([np.zeros(p), np.full(n, 1.0 / n)]), A_ub=A, b_ub=np.concatenate([y, -y]),
                      bounds=[(None, None)] * p + [(0, None)] * n, method="highs")
        return res.x[:p]

    candidates = []
    for t in itertools.combinations(np.arange(1, grid) / grid, T - 1):
        t = np.asarray(t)  # type: ignore[assignment]  # the combination as an array
        v = l1_regression(t)
        candidates.append((exact(t, v), t, v))
    candidates.sort(key=lambda c: c[0])
    best = candidates[0][0]
    for _, t, v in candidates[:refine]:
        def joint(p: np.ndarray, n: int = len(t)) -> float:
            return exact(np.sort(np.clip(p[:n], 0.0, 1.0)), p[n:])
        p0 = np.concatenate([t, v]) + 1e-6 * rng.standard_normal(len(t) + len(v))
        r = minimize(joint, p0, method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-13, "maxiter": 20000})
        best = min(best, float(r.fun))
    return best
