"""Ceilings of a student class: the best accuracy any of its weights can reach, proven (issues 25, 36).

The student's top computes its outputs from the node groups of the root's children b_1..b_k.  Without a
readout (:class:`~smaso.student.network.LadderStudent`'s default) the top is linear, so its score of class y
is *additive* over the children,

    s_y(x) = sum_b a_{b,y}(x_b) + c_y,

and on a tree, where each child's input x_b is independent of everything else given its event z_b, no
additive score of the inputs does better than the best additive score of the child events: averaging an
x-additive score over independent representatives x_b ~ p(x_b | z_b) gives z-additive scores whose mean
accuracy is the x-score's.  So the **additive ceiling**

    A* = max_{a}  sum_{z_1..z_k} P(z_1..z_k, y = argmax_y sum_b a_{b,y}(z_b))

bounds every weight setting of that student on a tree, and a student wide enough to encode its children's
events (width >= their event counts, and lower levels that can compute them) attains it.

**How A* is certified** (:func:`additive_ceiling`).  A labeling c -> y_c of a set S of child configurations
(cells) is *realizable* when some additive score puts y_c strictly first on every c in S.  Strict inequalities
are scale-free, so realizability is the feasibility of the linear program ``M_S a >= 1`` (one row
(d_c ⊗ (e_{y_c} - e_{y'})) per c in S and y' != y_c, d_c the one-hot code of c): no bound on the scores is
assumed.  Ties broken towards the lowest class (torch's argmax) realize nothing more: adding -eps y to every
score turns such a labeling into a strictly realized one.  So A* is the largest sum_{c in S} P(c, y_c) over
realizable labelings, found by a combinatorial Benders (no-good cut) loop:

1. a *master* binary program over x_{c,y} (at most one label per cell, maximise sum P(c, y) x_{c,y}, the cuts
   so far) is solved by HiGHS (``scipy.optimize.milp``, relative and absolute gap 0); its dual bound is an
   upper bound on A* because every realizable labeling satisfies every cut;
2. its labeling is checked by the LP; if infeasible, Gordan's alternative gives lambda >= 0, lambda != 0 with
   lambda^T M_S = 0.  A vertex of {lambda >= 0, lambda^T M_S = 0, sum lambda = 1} (HiGHS's dual simplex) has a
   small support T; its exact rational null vector is recomputed and checked to be positive (so the cut does
   not rest on floating point), and the (cell, label) pairs of T give the cut sum x <= |pairs| - 1 (every
   labeling holding those pairs holds the rows T, so it is not realizable).  Each cut is lifted by the class's
   symmetries (renamed child events, permuted children of one size, permuted labels map additive scores to
   additive scores, so every image of an unrealizable set is unrealizable: :func:`_images`).  The cells of T are
   dropped and the rest re-checked, so one master solve yields several cuts and a realizable sub-labeling;
3. a realizable labeling's LP scores are evaluated by their argmax directly, over every cell: a lower bound
   attained by explicit scores (:attr:`AdditiveCeiling.scores`); so are, first, the best constant class, the
   squared-loss fit and issue 25's big-M program with scores bounded by :data:`HEURISTIC_BOUND` (a lower bound
   only: a bound on the scores can be too small, 1 on the default teacher gives 0.8273 for 0.8734).

The loop ends when the lower bound meets the upper bound (:attr:`AdditiveCeiling.certified`), or at its
iteration or time limit with both bounds (then everything prints ``lower <= ceiling <= upper``, never a value).

With a readout (a hidden group at the root, then a linear map) the top is any function of the children's
events once the group has one node per child configuration of positive probability (a ReLU of the summed
one-hot indicators minus k - 1 is the indicator of one configuration), so its ceiling is the Bayes accuracy
of the label given the children's events, sum_z max_y P(z, y) (:func:`children_bayes`,
:func:`readout_ceiling`).

:func:`squared_loss_optimum` gives the accuracy of the loss-optimal additive top (the weights squared-loss
training converges to given perfect child events), which may lie far below the ceiling.

The joint P(z_{b_1}, ..., z_{b_k}, y) (:func:`top_joint`): on a top-down ladder the product
P(y) prod_b P(z_b | y) (the root's children have the root as their only parent); on a bottom-up one the exact
junction-tree elimination of :mod:`inference.junction_tree` (on a DAG the additive ceiling is the ceiling given
perfect child events, not a bound over inputs, and :attr:`Ceiling.is_bound` says so).  When the joint has more
than ``max_joint`` entries, :func:`architecture_ceiling` degrades instead of failing: the readout ceiling is
exact where it needs no joint (bottom-up: y is a function of the children's events, so it is 1; top-down up to
``max_enumerated`` entries, summed chunk by chunk), else a Monte Carlo estimate over sampled child events with
P(y | z) exact per sample and its 95% interval; the additive ceiling and the loss-optimal top are then not
computed, and :attr:`Ceiling.not_computed` says why.
"""

from __future__ import annotations

import itertools
import math
import re
import time
import warnings
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from smaso import _ladder_parts
from teachers.ladder import TOPDOWN, Ladder

if TYPE_CHECKING:
    from smaso.student.network import LadderStudent

__all__ = ["MAX_CELLS", "MAX_ENUMERATED", "MAX_JOINT", "MC_SAMPLES", "AdditiveCeiling", "Ceiling", "ReadoutCeiling",
           "additive_ceiling", "architecture_ceiling", "children_bayes", "constructed_student", "readout_ceiling",
           "squared_loss_optimum", "top_joint"]

#: Largest (child configurations x classes) the exact combinatorial program is attempted on.
MAX_CELLS = 4096
#: Largest explicit joint P(z_children, y) (entries) :func:`architecture_ceiling` builds (the junction tree's
#: default ``max_clique``).
MAX_JOINT = 2**22
#: Largest P(z_children, y) (entries) whose readout ceiling is summed exactly, chunk by chunk, on a top-down
#: ladder; above it, a Monte Carlo estimate.
MAX_ENUMERATED = 2**26
#: Sampled child configurations of the Monte Carlo readout ceiling.
MC_SAMPLES = 200_000
#: lower >= upper - CERT_TOL counts as met (the two are sums of the same probabilities in different orders).
CERT_TOL = 1e-9
METHOD = ("exact: HiGHS master over labelings, LP realizability cuts from Farkas certificates checked in exact "
          "rational arithmetic")
# a Farkas multiplier counts as in the support above this (HiGHS's vertex: the rest are exactly 0)
_SUPPORT_TOL = 1e-9
#: Scores bound of the primal heuristic (:func:`_bounded_scores`): a lower bound only, whatever its value.
HEURISTIC_BOUND = 100.0
#: Largest number of candidate symmetry maps a cut is lifted by (:func:`_images`).
MAX_IMAGES = 2**18
# the chunk of cells x classes summed at once by the enumerated readout ceiling
_CHUNK = 2**20


def _check_ladder(ladder: object) -> Ladder:
    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
    return ladder


def _child_sizes(ladder: Ladder) -> list[int]:
    return [ladder.region_events[1][c] for c in ladder.children[0][0]]


def _topdown_factors(ladder: Ladder) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """P(y) ``(m_0,)`` and P(z_b | y) ``(m_0, m_b)`` of the root's children (their only parent is the root).
    Their product is P(z, y) only when the root's children are drawn independently: callers first ask
    :func:`_root_productions`."""
    tables = _ladder_parts.region_tables(ladder)[1]
    return _ladder_parts.prior(ladder).double(), [tables[c].double() for c in ladder.children[0][0]]


def top_joint(ladder: Ladder, *, max_joint: int = MAX_JOINT) -> torch.Tensor:
    """Exact P(z_{b_1}, ..., z_{b_k}, y) over the root's children b_1..b_k (in ``ladder.children[0][0]``
    order) and the label, float64 ``(m_{b_1}, ..., m_{b_k}, m_0)``.

    :raises ValueError: the table has more than ``max_joint`` entries, or (bottom-up, not a tree) the
        elimination's cliques do.
    """
    from inference.junction_tree import region_joint

    _check_ladder(ladder)
    sizes, m = _child_sizes(ladder), ladder.num_classes
    if math.prod(sizes) * m > max_joint:
        raise ValueError(f"top_joint: the joint of the root's children and the label has "
                         f"{math.prod(sizes) * m} entries, more than max_joint={max_joint}")
    root = _root_productions(ladder)
    if root is not None:  # the children drawn jointly: P(z, y) only on the configurations the productions give
        codes, w = root
        dense = torch.zeros(math.prod(sizes), m, dtype=torch.float64)
        dense[codes] = w
        return dense.reshape(*sizes, m)
    if ladder.mode == TOPDOWN:  # P(y) prod_b P(z_b | y): no elimination (the rest sums to 1)
        prior, tables = _topdown_factors(ladder)
        joint = prior.reshape((1,) * len(sizes) + (m,))
        for j, t in enumerate(tables):
            joint = joint * t.T.reshape([1] * j + [sizes[j]] + [1] * (len(sizes) - j - 1) + [m])
        return joint.contiguous()
    return region_joint(ladder, [(1, c) for c in ladder.children[0][0]] + [(0, 0)], max_clique=max_joint)


def _check_joint(joint: torch.Tensor) -> np.ndarray:
    if not isinstance(joint, torch.Tensor) or joint.dim() < 2 or not joint.is_floating_point():
        raise TypeError("joint: expected a floating tensor (m_1, ..., m_k, classes) of probabilities")
    p = joint.detach().double().cpu().numpy()
    if not np.isfinite(p).all() or (p < 0).any() or abs(p.sum() - 1.0) > 1e-9:
        raise ValueError(f"joint: expected finite probabilities >= 0 summing to 1, got sum {p.sum():.12g}")
    return p


def children_bayes(joint: torch.Tensor) -> float:
    """sum_z max_y P(z, y): the best accuracy of any function of the children's events (the readout's
    ceiling)."""
    p = _check_joint(joint)
    return float(p.reshape(-1, p.shape[-1]).max(-1).sum())


def _one_hot_design(sizes: tuple[int, ...]) -> np.ndarray:
    """``(cells, sum sizes)``: row c is the concatenated one-hot codes of configuration c (C order)."""
    offs = np.cumsum([0, *sizes[:-1]])
    cells = np.array(list(itertools.product(*[range(s) for s in sizes])), dtype=np.int64).reshape(-1, len(sizes))
    design = np.zeros((len(cells), sum(sizes)))
    np.put_along_axis(design, cells + offs, 1.0, axis=1)
    return design


def squared_loss_optimum(joint: torch.Tensor) -> tuple[float, float]:
    """The additive top that minimizes the squared loss 1/2 E|onehot(y) - s(z)|^2 given the children's events
    (weighted least squares on one-hot features and a bias): ``(its accuracy, its loss)``."""
    return _squared_loss_fit(_check_joint(joint))[:2]


def _squared_loss_fit(p: np.ndarray) -> tuple[float, float, np.ndarray]:
    """:func:`squared_loss_optimum` and its coefficients ``(sum sizes + 1, classes)`` (the bias last)."""
    m = p.shape[-1]
    pc = p.reshape(-1, m)
    w = pc.sum(1)
    design = np.c_[_one_hot_design(p.shape[:-1]), np.ones(len(pc))]
    target = pc / np.where(w > 0, w, 1.0)[:, None]  # E[onehot(y) | z]
    sw = np.sqrt(w)[:, None]
    coef = np.linalg.lstsq(design * sw, target * sw, rcond=None)[0]
    s = design @ coef
    # E|e_y - s|^2 = |E[e_y|z] - s|^2 + (1 - |E[e_y|z]|^2) per configuration
    loss = 0.5 * float((w * (((target - s) ** 2).sum(1) + 1.0 - (target ** 2).sum(1))).sum())
    return float(pc[np.arange(len(pc)), s.argmax(1)].sum()), loss, coef


# ------------------------------------------------------------------------------------------ the certificate
def _floor(x: float, digits: int) -> float:
    return math.floor(x * 10**digits + 1e-9) / 10**digits


def _ceil(x: float, digits: int) -> float:
    return math.ceil(x * 10**digits - 1e-9) / 10**digits


def _digits(spec: str) -> int:
    found = re.search(r"\.(\d+)f", spec)
    return int(found.group(1)) if found else 4


@dataclass(frozen=True, eq=False)
class AdditiveCeiling:
    """The additive ceiling A* with its certificate (module docstring).

    :ivar lower: the accuracy of :attr:`scores`, evaluated by their argmax over every cell: A* >= lower.
    :ivar upper: the master program's dual bound, proven: A* <= upper.
    :ivar certified: lower and upper meet (to :data:`CERT_TOL`): A* = lower, exactly.
    :ivar scores: ``scores[b]`` ``(m_b, classes)``, the score tables that attain :attr:`lower`.
    :ivar status: ``"optimal"``, ``"iteration limit"``, ``"time limit"`` or what stopped the loop.
    :ivar iterations: master programs solved; :attr:`cuts` the cuts they carried at the end.
    :ivar mip_gap: HiGHS's relative gap of the last master program (0 when it was solved to optimality).
    """

    lower: float
    upper: float
    certified: bool
    scores: list[np.ndarray] = field(repr=False)
    status: str
    iterations: int
    cuts: int
    seconds: float
    mip_gap: float | None
    method: str = METHOD

    @property
    def value(self) -> float | None:
        """A*, where certified; None where only the bounds are known."""
        return self.lower if self.certified else None

    def text(self, digits: int = 4) -> str:
        """``"0.8734"`` where certified, else ``"0.8733 <= ceiling <= 0.9001"`` (the lower bound rounded down,
        the upper one up)."""
        if self.certified:
            return f"{self.lower:.{digits}f}"
        return f"{_floor(self.lower, digits):.{digits}f} <= ceiling <= {_ceil(self.upper, digits):.{digits}f}"

    def __format__(self, spec: str) -> str:
        return self.text(_digits(spec))

    def __str__(self) -> str:
        return self.text()

    def to_dict(self) -> dict:
        """The certificate as JSON: bounds, whether they meet, how, and what it took."""
        return {"lower": self.lower, "upper": self.upper, "certified": self.certified, "status": self.status,
                "method": self.method, "iterations": self.iterations, "cuts": self.cuts,
                "mip_gap": self.mip_gap, "seconds": self.seconds}


def _pair_rows(design: np.ndarray, pairs: np.ndarray, m: int) -> Any:
    """The rows (d_c ⊗ (e_y - e_{y'})) of M_S for labeled cells ``pairs`` ``(n, 2)`` (cell, label), as a sparse
    ``(n (m-1), features m)`` matrix (rows pair by pair, y' increasing), and the pair each row belongs to."""
    from scipy.sparse import csr_matrix

    k = int(design[0].sum())
    feats = np.nonzero(design)[1].reshape(len(design), k)[pairs[:, 0]]  # (n, k): each cell's one-hot features
    ys = pairs[:, 1]
    others = np.array([[y2 for y2 in range(m) if y2 != y] for y in range(m)]).reshape(m, m - 1)[ys]  # (n, m-1)
    plus = np.broadcast_to(feats[:, None, :] * m + ys[:, None, None], (len(pairs), m - 1, k))
    minus = feats[:, None, :] * m + others[:, :, None]
    cols = np.concatenate([plus, minus], axis=2).reshape(-1)
    vals = np.tile(np.r_[np.ones(k), -np.ones(k)], len(pairs) * (m - 1))
    rows = np.repeat(np.arange(len(pairs) * (m - 1)), 2 * k)
    a = csr_matrix((vals, (rows, cols)), shape=(len(pairs) * (m - 1), design.shape[1] * m))
    return a, np.repeat(np.arange(len(pairs)), m - 1)


def _realize(design: np.ndarray, pairs: np.ndarray, m: int) -> Any:
    """Is the labeling ``pairs`` ``(n, 2)`` (cell, label) realizable?  ``("feasible", scores (features, m))``: an
    LP solution putting each pair's label strictly first on its cell (margin 1, no bound on the scores);
    ``("infeasible", (pairs of the Farkas certificate's support, indices into pairs; whether it checked
    exactly))``; ``("error", message)`` when HiGHS fails."""
    from scipy.optimize import linprog

    if len(pairs) == 0:
        return "feasible", np.zeros((design.shape[1], m))
    a, owner = _pair_rows(design, pairs, m)
    nv = a.shape[1]
    res = linprog(np.zeros(nv), A_ub=-a, b_ub=-np.ones(a.shape[0]), bounds=(None, None), method="highs")
    if res.status == 0:
        return "feasible", res.x.reshape(-1, m)
    if res.status != 2:
        return "error", f"the realizability LP ended with status {res.status}: {res.message}"
    # Gordan: lambda >= 0, lambda^T M = 0, sum lambda = 1; a vertex (dual simplex) has a small support
    from scipy.sparse import vstack

    eq = vstack([a.T, np.ones((1, a.shape[0]))]).tocsr()
    far = linprog(np.zeros(a.shape[0]), A_eq=eq, b_eq=np.r_[np.zeros(nv), 1.0], bounds=(0, None),
                  method="highs-ds")
    if far.status != 0:
        return "error", f"the LP is infeasible but its Farkas certificate was not found (status {far.status})"
    support = np.flatnonzero(far.x > _SUPPORT_TOL)
    exact = _exact_positive_null(a[support].toarray().astype(np.int64), far.x[support])
    return "infeasible", (np.unique(owner[support]), exact)


def _exact_positive_null(rows: np.ndarray, lam: np.ndarray) -> bool:
    """Is there an exactly rational lambda > 0 with lambda^T rows = 0 (``rows`` integer ``(t, n)``)?  First the
    float vertex ``lam`` rounded to small fractions, checked in integers; else the exact null space by Gaussian
    elimination in fractions, checked for a positive vector when one-dimensional."""
    ratios = [Fraction(float(v / lam.min())).limit_denominator(10**6) for v in lam]
    scale = math.lcm(*(r.denominator for r in ratios))
    ints = [int(r * scale) for r in ratios]
    if all(v > 0 for v in ints) and not (np.array(ints, dtype=object) @ rows.astype(object)).any():
        return True  # (Python integers: no overflow)
    # the null space of rows^T, exactly: reduce rows^T (n, t) to echelon form
    mat = [[Fraction(int(x)) for x in col] for col in rows.T]
    t, pivots, r = rows.shape[0], [], 0
    for j in range(t):
        piv = next((i for i in range(r, len(mat)) if mat[i][j] != 0), None)
        if piv is None:
            continue
        mat[r], mat[piv] = mat[piv], mat[r]
        mat[r] = [v / mat[r][j] for v in mat[r]]
        for i in range(len(mat)):
            if i != r and mat[i][j] != 0:
                f = mat[i][j]
                mat[i] = [a - f * b for a, b in zip(mat[i], mat[r], strict=True)]
        pivots.append(j)
        r += 1
    free = [j for j in range(t) if j not in pivots]
    if len(free) != 1:
        return False
    vec = [Fraction(0)] * t
    vec[free[0]] = Fraction(1)
    for i, j in enumerate(pivots):
        vec[j] = -mat[i][free[0]]
    return all(v > 0 for v in vec) or all(v < 0 for v in vec)


def _images(chosen: np.ndarray, sizes: tuple[int, ...], m: int, live: np.ndarray) -> np.ndarray:
    """Every image of an unrealizable set of (cell, label) pairs ``chosen`` ``(t, 2)`` under the symmetries of
    the additive class: an injective renaming of each child's events (and, where the children have one size, a
    permutation of the children) and of the labels maps an additive score to an additive score, so each image
    is unrealizable too.  Only images whose pairs all have positive probability (``live`` ``(cells, m)``) are
    kept; ``(images, t)`` flat pair codes cell * m + label, the identity among them.  Above :data:`MAX_IMAGES`
    candidate maps, the set alone."""
    coords = np.stack(np.unravel_index(chosen[:, 0], sizes), 1)  # (t, k)
    k = len(sizes)
    orders = list(itertools.permutations(range(k))) if len(set(sizes)) == 1 else [tuple(range(k))]
    labels, lab_idx = np.unique(chosen[:, 1], return_inverse=True)
    used = [np.unique(coords[:, b], return_inverse=True) for b in range(k)]
    count = len(orders) * math.perm(m, len(labels)) * math.prod(math.perm(sizes[b], len(used[b][0]))
                                                                 for b in range(k))
    if count > MAX_IMAGES:
        return (chosen[:, 0] * m + chosen[:, 1])[None]
    strides = np.array([math.prod(sizes[b + 1:]) for b in range(k)])
    out = []
    for order in orders:
        flat = np.zeros((1, len(chosen)), dtype=np.int64)
        for place, b in enumerate(order):  # child b's events go to place ``place`` (equal sizes)
            maps = np.array(list(itertools.permutations(range(sizes[place]), len(used[b][0]))))  # (P, |U_b|)
            flat = (flat[:, None, :] + maps[:, used[b][1]][None] * strides[place]).reshape(-1, len(chosen))
        lab_maps = np.array(list(itertools.permutations(range(m), len(labels))))[:, lab_idx]  # (Q, t)
        codes = (flat[:, None, :] * m + lab_maps[None]).reshape(-1, len(chosen))
        out.append(codes[live.reshape(-1)[codes].all(1)])
    return np.unique(np.sort(np.concatenate(out), 1), axis=0)


def _accuracy(pc: np.ndarray, design: np.ndarray, a: np.ndarray) -> float:
    return float(pc[np.arange(len(pc)), (design @ a).argmax(1)].sum())


def _bounded_scores(pc: np.ndarray, design: np.ndarray, pairs: np.ndarray, one: Any,
                    time_limit: float) -> np.ndarray | None:
    """A primal heuristic: the best labeling realizable with scores |a| <= :data:`HEURISTIC_BOUND` and margin 1
    (a big-M program, issue 25's method), within ``time_limit`` seconds; its scores, or None.  Any bound gives a
    lower bound (the scores are evaluated directly); none proves an upper one."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_matrix, hstack

    m, n = pc.shape[1], len(pairs)
    rows, owner = _pair_rows(design, pairs, m)
    nv, k = rows.shape[1], int(design[0].sum())
    big_m = 2 * k * HEURISTIC_BOUND + 1
    pick = csr_matrix((np.full(len(owner), -big_m), (np.arange(len(owner)), owner)), shape=(len(owner), n))
    cons = [LinearConstraint(hstack([rows, pick]), 1 - big_m, np.inf),
            LinearConstraint(hstack([csr_matrix((one.shape[0], nv)), one]), -np.inf, 1)]
    res = milp(np.r_[np.zeros(nv), -pc[pairs[:, 0], pairs[:, 1]]], constraints=cons,
               integrality=np.r_[np.zeros(nv), np.ones(n)],
               bounds=Bounds(np.r_[np.full(nv, -HEURISTIC_BOUND), np.zeros(n)],
                             np.r_[np.full(nv, HEURISTIC_BOUND), np.ones(n)]),
               options={"time_limit": time_limit})
    return None if res.x is None else res.x[:nv].reshape(-1, m)


def _check_limit(name: str, v: object, kind: type) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float) if kind is float else int) or not v > 0:
        raise ValueError(f"{name}: expected a positive {'number' if kind is float else 'integer'}, got {v!r}")


def additive_ceiling(joint: torch.Tensor, *, max_iterations: int = 10_000,
                     time_limit: float = 60.0) -> AdditiveCeiling:
    """The best accuracy A* of an additive score s_y(z) = sum_b a_{b,y}(z_b), certified (module docstring).

    :param joint: P(z_1, ..., z_k, y) ``(m_1, ..., m_k, classes)``.
    :param max_iterations: master programs solved at most; ``time_limit``: seconds at most.  At either limit
        the result carries both bounds, not certified.
    :returns: :class:`AdditiveCeiling`: ``lower`` (attained by ``scores``, evaluated directly), ``upper``
        (proven), ``certified`` when they meet.
    :raises ValueError: more than :data:`MAX_CELLS` configurations x classes; a limit not positive.
    :raises RuntimeError: HiGHS fails on a master program (a status other than optimal or a limit).
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    p = _check_joint(joint)
    _check_limit("max_iterations", max_iterations, int)
    _check_limit("time_limit", time_limit, float)
    t0 = time.perf_counter()
    sizes, m = p.shape[:-1], p.shape[-1]
    pc = p.reshape(-1, m)
    cells = len(pc)
    if cells * m > MAX_CELLS:
        raise ValueError(f"joint: {cells} child configurations x {m} classes is more than MAX_CELLS={MAX_CELLS} "
                         "for the exact program")
    design = _one_hot_design(sizes)
    splits = np.cumsum(sizes)[:-1]
    # incumbents: the best constant class, and the squared-loss-optimal top (its bias folded into child 0)
    const = np.zeros((design.shape[1], m))
    const[:, int(pc.sum(0).argmax())] = 1.0
    coef = _squared_loss_fit(p)[2]
    fitted = coef[:-1] + np.r_[np.ones(sizes[0]), np.zeros(design.shape[1] - sizes[0])][:, None] * coef[-1]
    upper = float(pc.max(1).sum())  # sum_c max_y P(c, y): no labeling does better
    pairs = np.argwhere(pc > 0)  # (cell, label) of positive probability: the master's variables
    n = len(pairs)
    one = coo_matrix((np.ones(n), (np.unique(pairs[:, 0], return_inverse=True)[1], np.arange(n)))).tocsr()
    heuristic = _bounded_scores(pc, design, pairs, one, time_limit / 4)
    best = max(((_accuracy(pc, design, a), a) for a in (const, fitted, heuristic) if a is not None),
               key=lambda t: t[0])
    cut_rows: list[np.ndarray] = []
    codes, seen = pairs[:, 0] * m + pairs[:, 1], set()  # pairs' flat codes, increasing (argwhere's order)
    status, gap, it, exact_cuts = "iteration limit", None, 0, True
    while it < max_iterations:
        left = time_limit - (time.perf_counter() - t0)
        if left <= 0:
            status = "time limit"
            break
        it += 1
        cons = [LinearConstraint(one, -np.inf, 1)]
        if cut_rows:
            ri = np.concatenate([np.full(len(r), i) for i, r in enumerate(cut_rows)])
            cut = coo_matrix((np.ones(len(ri)), (ri, np.concatenate(cut_rows))), shape=(len(cut_rows), n))
            cons.append(LinearConstraint(cut, -np.inf, np.array([len(r) - 1 for r in cut_rows], dtype=float)))
        with warnings.catch_warnings():  # mip_abs_gap is passed to HiGHS verbatim (scipy warns that it does)
            warnings.filterwarnings("ignore", message="Unrecognized options", category=RuntimeWarning)
            res = milp(-pc[pairs[:, 0], pairs[:, 1]], constraints=cons, integrality=np.ones(n), bounds=Bounds(0, 1),
                       options={"mip_rel_gap": 0.0, "mip_abs_gap": 0.0, "time_limit": left})
        if res.status not in (0, 1) or res.mip_dual_bound is None:
            raise RuntimeError(f"additive_ceiling: the master program ended with status {res.status}: {res.message}")
        upper, gap = min(upper, -float(res.mip_dual_bound)), res.mip_gap
        if res.status == 1:
            status = "time limit"
            break
        labeled = pairs[np.flatnonzero(res.x > 0.5)]
        while True:  # cut, drop the certificate's cells, re-check the rest: several cuts per master solve
            verdict, out = _realize(design, labeled, m)
            if verdict == "error":
                status = out
                break
            if verdict == "feasible":
                acc = _accuracy(pc, design, out)
                if acc > best[0]:
                    best = (acc, out)
                break
            owners, exact = out
            exact_cuts &= exact
            chosen = labeled[owners]
            for image in _images(chosen, sizes, m, pc > 0):
                key = image.tobytes()
                if key not in seen:
                    seen.add(key)
                    cut_rows.append(np.searchsorted(codes, image))
            labeled = labeled[~np.isin(labeled[:, 0], chosen[:, 0])]
        if best[0] >= upper - CERT_TOL or verdict == "error":
            status = "optimal" if verdict != "error" else status
            break
    certified = best[0] >= upper - CERT_TOL and exact_cuts
    if not exact_cuts:
        status += "; a cut's certificate did not check in exact arithmetic"
    return AdditiveCeiling(best[0], max(upper, best[0]), certified, np.split(best[1], splits), status, it,
                           len(cut_rows), time.perf_counter() - t0, gap)


# ------------------------------------------------------------------------------------------ the readout
@dataclass(frozen=True)
class ReadoutCeiling:
    """sum_z max_y P(z, y), exact or a Monte Carlo estimate (module docstring).

    :ivar value: the ceiling (exact) or its estimate.
    :ivar method: ``"exact"`` or ``"Monte Carlo"``; :attr:`how` says how in words.
    :ivar interval: the 95% interval of the estimate (normal approximation); ``(value, value)`` when exact.
    :ivar samples: sampled child configurations (None when exact).
    """

    value: float
    method: str
    interval: tuple[float, float]
    samples: int | None
    how: str

    @property
    def exact(self) -> bool:
        """Whether :attr:`value` is the exact ceiling (else a Monte Carlo estimate within :attr:`interval`)."""
        return self.method == "exact"

    def text(self, digits: int = 4) -> str:
        """The value where exact; else the estimate, its sample count and its 95% interval."""
        if self.exact:
            return f"{self.value:.{digits}f}"
        lo, hi = self.interval
        return (f"{self.value:.{digits}f} (Monte Carlo, {self.samples} samples, 95% interval "
                f"[{_floor(lo, digits):.{digits}f}, {_ceil(hi, digits):.{digits}f}])")

    def __format__(self, spec: str) -> str:
        return self.text(_digits(spec))

    def __str__(self) -> str:
        return self.text()

    def to_dict(self) -> dict:
        """The estimate as plain JSON-able data (the report's ``ceiling_readout_estimate``)."""
        return {"value": self.value, "method": self.method, "interval": list(self.interval),
                "samples": self.samples, "how": self.how}


def _root_productions(ladder: Ladder) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Where the root draws its children jointly (``ladder.productions[0]``; the Random Hierarchy Model), the child
    configurations of positive probability as codes ``(C,)`` (first child most significant, C order over
    the children's events) and P(z, y) of each ``(C, m_0)`` float64, from the productions, not the product of
    the children's marginal tables (which would treat them as independent given y); None otherwise.  Levels
    below do not matter: the root's children's law given y is the root's productions alone."""
    joint = ladder.productions[0] if ladder.productions is not None else None
    if joint is None:
        return None
    m = ladder.num_classes
    codes = joint.codes(ladder.events[1]).reshape(m, -1)  # (m_0, K): the root is region 0
    w = _ladder_parts.prior(ladder).double()[:, None] * joint.region_probs(1)[0]  # P(y) P(production k | y)
    live = w > 0
    uniq, inv = torch.unique(codes[live], return_inverse=True)
    out = torch.zeros(len(uniq), m, dtype=torch.float64)
    out.index_put_((inv, live.nonzero()[:, 0]), w[live], accumulate=True)
    return uniq, out


def _topdown_posterior(prior: torch.Tensor, tables: list[torch.Tensor], z: torch.Tensor) -> torch.Tensor:
    """P(z, y) ``(n, m_0)`` for child configurations ``z`` ``(n, k)``: P(y) prod_b P(z_b | y)."""
    w = prior[None].expand(len(z), -1)
    for j, t in enumerate(tables):
        w = w * t.T[z[:, j]]
    return w


def readout_ceiling(ladder: Ladder, *, max_enumerated: int = MAX_ENUMERATED, samples: int = MC_SAMPLES,
                    seed: int = 0) -> tuple[ReadoutCeiling, int, bool]:
    """sum_z max_y P(z, y) over the root's children's events without building the joint: exact where cheap,
    else a Monte Carlo estimate (module docstring).  Also the readout width that suffices (configurations of
    positive probability where counted, else all of them) and whether it was counted.

    Bottom-up: y = lookup(z), so the ceiling is 1, exactly.  Top-down: P(z, y) = P(y) prod_b P(z_b | y); summed
    over every configuration, ``_CHUNK`` entries at a time, when there are at most ``max_enumerated`` entries;
    else ``samples`` configurations z ~ P(z) (y ~ P(y), then z_b ~ P(z_b | y), torch generator of ``seed``) and
    the mean of max_y P(y | z) with a normal 95% interval.
    """
    _check_ladder(ladder)
    _check_limit("samples", samples, int)
    sizes, m = _child_sizes(ladder), ladder.num_classes
    cells = math.prod(sizes)
    if ladder.mode != TOPDOWN:
        return ReadoutCeiling(1.0, "exact", (1.0, 1.0), None, "y is a function of the children's events"), \
            cells, False
    root = _root_productions(ladder)
    if root is not None:  # exact whatever the size: only the configurations the productions give have mass
        w = root[1]
        total = float(w.max(1).values.sum())
        how = f"summed over the {len(w)} child configurations the root's productions give"
        return ReadoutCeiling(total, "exact", (total, total), None, how), len(w), True
    prior, tables = _topdown_factors(ladder)
    if cells * m <= max_enumerated:
        total, live, step = 0.0, 0, max(1, _CHUNK // m)
        for lo in range(0, cells, step):
            flat = torch.arange(lo, min(lo + step, cells))
            z = torch.stack(torch.unravel_index(flat, tuple(sizes)), 1)
            w = _topdown_posterior(prior, tables, z)
            total += float(w.max(1).values.sum())
            live += int((w.sum(1) > 0).sum())
        how = f"summed over {cells} child configurations"
        return ReadoutCeiling(total, "exact", (total, total), None, how), live, True
    g = torch.Generator().manual_seed(seed)
    parts = []
    step = max(1, _CHUNK // max(m, *sizes))
    for lo in range(0, samples, step):
        n = min(step, samples - lo)
        y = torch.multinomial(prior, n, replacement=True, generator=g)
        z = torch.stack([torch.multinomial(t[y], 1, generator=g)[:, 0] for t in tables], 1)
        w = _topdown_posterior(prior, tables, z)
        parts.append(w.max(1).values / w.sum(1))  # max_y P(y | z) of each sampled z
    q = torch.cat(parts)
    mean, half = float(q.mean()), 1.96 * float(q.std()) / math.sqrt(samples)
    how = (f"{cells * m} entries are more than {max_enumerated}: mean of max_y P(y | z) over {samples} sampled "
           f"child configurations (seed {seed})")
    return ReadoutCeiling(mean, "Monte Carlo", (mean - half, mean + half), samples, how), cells, False


# ------------------------------------------------------------------------------------------ the class
@dataclass(frozen=True)
class Ceiling:
    """The ceilings of a student class on a ladder (module docstring).

    :ivar additive: the linear top's (no readout) certificate, or None when not computed (:attr:`not_computed`
        says why).
    :ivar readout: the best accuracy of a readout top wide enough (sum_z max_y P(z, y)), exact or estimated.
    :ivar loss_optimal: accuracy of the squared-loss-optimal linear top; ``loss_optimal_loss`` its loss (None
        when not computed).
    :ivar is_bound: True on a tree (the ceilings bound every weight setting, given any inputs); on a DAG they
        are the ceilings given perfect child events.
    :ivar readout_width: nodes that suffice for the readout group to reach :attr:`readout`: the child
        configurations of positive probability where :attr:`readout_width_counted`, else all of them.
    :ivar not_computed: ``{"additive" | "loss_optimal": why}`` for what was not computed.
    """

    additive: AdditiveCeiling | None
    readout: ReadoutCeiling
    loss_optimal: float | None
    loss_optimal_loss: float | None
    is_bound: bool
    readout_width: int
    readout_width_counted: bool = True
    not_computed: dict[str, str] = field(default_factory=dict)

    def for_student(self, readout: bool) -> float | None:
        """A proven upper bound on the accuracy of the class with or without a readout (given the children's
        events): its ceiling where certified or exact, else the additive certificate's upper bound, else (a linear
        top is one function of the children's events) the exact readout ceiling; None where none is known."""
        exact = self.readout.value if self.readout.exact else None
        if readout or self.additive is None:
            return exact
        return self.additive.upper


def architecture_ceiling(ladder: Ladder, *, max_iterations: int = 10_000, time_limit: float = 60.0,
                         max_joint: int = MAX_JOINT, max_enumerated: int = MAX_ENUMERATED,
                         samples: int = MC_SAMPLES, seed: int = 0) -> Ceiling:
    """The ceilings of the students of ``ladder`` with and without a readout (module docstring): exact and
    certified where the joint P(z_children, y) has at most ``max_joint`` entries (and the additive program at
    most :data:`MAX_CELLS` cells x classes), otherwise what can be had without it (:func:`readout_ceiling`) and
    the reasons for the rest.  ``max_iterations``, ``time_limit``: :func:`additive_ceiling`'s."""
    _check_ladder(ladder)
    sizes, m = _child_sizes(ladder), ladder.num_classes
    cells = math.prod(sizes)
    why = ""  # set where joint is None
    try:
        joint: torch.Tensor | None = top_joint(ladder, max_joint=max_joint)
    except ValueError as e:
        joint, why = None, " ".join(str(e).split())
    if joint is None:
        readout, width, counted = readout_ceiling(ladder, max_enumerated=max_enumerated, samples=samples, seed=seed)
        return Ceiling(None, readout, None, None, ladder.is_tree(), width, counted,
                       {"additive": why, "loss_optimal": why})
    not_computed = {}
    acc: float | None
    loss: float | None
    live = int((joint.reshape(cells, -1).sum(-1) > 0).sum())
    readout = ReadoutCeiling(children_bayes(joint), "exact", (children_bayes(joint),) * 2, None,
                             f"summed over {cells} child configurations")
    if cells * (sum(sizes) + 1) <= max_joint:  # the least-squares design, dense
        acc, loss = squared_loss_optimum(joint)
    else:
        acc = loss = None
        not_computed["loss_optimal"] = (f"its design has {cells} x {sum(sizes) + 1} entries, more than "
                                        f"max_joint={max_joint}")
    if cells * m <= MAX_CELLS:
        additive = additive_ceiling(joint, max_iterations=max_iterations, time_limit=time_limit)
    else:
        additive = None
        not_computed["additive"] = (f"{cells} child configurations x {m} classes is more than MAX_CELLS="
                                    f"{MAX_CELLS} for the exact program")
    return Ceiling(additive, readout, acc, loss, ladder.is_tree(), live, True, not_computed)


def constructed_student(ladder: Ladder, *, readout: bool = True, dtype: torch.dtype = torch.float64) -> LadderStudent:
    """A :class:`~smaso.student.network.LadderStudent` built by hand that attains its class's ceiling: the
    constructive half of the ceilings (module docstring), on a bottom-up uniform tree with one-hot leaves.

    Every hidden region's group holds the indicators of its children's joint configurations (width
    ``prod_b m_b``): node C = ReLU(sum_b 1[z_b = C_b] - (k - 1)), where 1[z_b = e] is the leaf input itself or,
    higher up, the sum of the child's configuration nodes that its lookup maps to e.  The top is linear in the
    root's children's groups with the scores of :func:`additive_ceiling` (over the readout ladder's single
    child, the label, with ``readout=True``), so its accuracy is exactly their lower bound: the Bayes accuracy 1
    with a readout, the additive ceiling without (where certified).
    """
    from smaso.student.network import LadderStudent
    from smaso.student.readout import readout_ladder

    _check_ladder(ladder)
    if ladder.mode == "topdown" or not ladder.is_uniform() or ladder.emission.kind != "onehot":
        raise ValueError("ladder: the construction needs a bottom-up uniform tree with one-hot leaves")
    lad = readout_ladder(ladder) if readout else ladder
    d, b, m = lad.depth, _ladder_parts.uniform_branching(lad), lad.events
    widths = [m[l + 1] ** b[l] for l in range(1, d)]
    st = LadderStudent(ladder, widths[1:] if readout else widths, readout=widths[0] if readout else None,
                       dtype=dtype)
    codes = [torch.tensor(list(itertools.product(range(m[l + 1]), repeat=b[l]))) for l in range(d)]  # (C, b_l)
    lookup = _ladder_parts.stacked_lookups(lad)
    biases = st.biases
    assert biases is not None, "LadderStudent's default is bias=True"
    with torch.no_grad():
        for l in range(d - 1, -1, -1):
            # the event child b of a region of level l reads from its node c: the node's own event at the
            # leaves (one-hot inputs), else its lookup of configuration c (per child region)
            child_events = torch.arange(m[d])[None].expand(lad.num_regions[d], -1) if l == d - 1 else \
                lookup[l + 1].long()  # (R_{l+1}, n_{l+1})
            if l == 0:
                a = additive_ceiling(top_joint(lad)).scores  # a[j] (m_j, classes) per child place
                w = torch.stack([torch.as_tensor(a[j], dtype=dtype)[child_events[j]] for j in range(b[0])])
                st.weights[0].copy_(w)
                biases[0].zero_()
                continue
            place = torch.arange(lad.num_regions[l + 1]) % b[l]  # child region -> its place j among siblings
            # weights[l][child, c, C] = 1[event of child's node c == C_j]
            w = (child_events[:, :, None] == codes[l].T[place][:, None, :]).to(dtype)
            st.weights[l].copy_(w)
            biases[l].fill_(-(b[l] - 1))
    return st
