"""Ceilings of a student class: the best accuracy any of its weights can reach, exact (issue 25).

The student's top computes its outputs from the node groups of the root's children b_1..b_k.  Without a
readout (:class:`~smaso.student.network.LadderStudent`'s default) the top is linear, so its score of class y
is *additive* over the children,

    s_y(x) = sum_b a_{b,y}(x_b) + c_y,

and on a tree, where each child's input x_b is independent of everything else given its event z_b, no
additive score of the inputs does better than the best additive score of the child events: averaging an
x-additive score over independent representatives x_b ~ p(x_b | z_b) gives z-additive scores whose mean
accuracy is the x-score's.  So the **additive ceiling**

    max_{a}  sum_{z_1..z_k} P(z_1..z_k, y = argmax_y sum_b a_{b,y}(z_b))

bounds every weight setting of that student on a tree, and a student wide enough to encode its children's
events (width >= their event counts, and lower levels that can compute them) attains it.  It is computed
exactly as a mixed-integer program (:func:`additive_ceiling`): one binary per (child configuration, label)
chooses the argmax, big-M constraints make the chosen label win by a margin of 1 (scores bounded by
``bound``), HiGHS (``scipy.optimize.milp``) proves optimality; the returned scores are checked by evaluating
their argmax directly.

With a readout (a hidden group at the root, then a linear map) the top is any function of the children's
events once the group has one node per child configuration of positive probability (a ReLU of the summed
one-hot indicators minus k - 1 is the indicator of one configuration), so its ceiling is the Bayes accuracy
of the label given the children's events, sum_z max_y P(z, y) (:func:`children_bayes`).

:func:`squared_loss_optimum` gives the accuracy of the loss-optimal additive top (the weights squared-loss
training converges to given perfect child events), which may lie far below the ceiling.

The joint P(z_{b_1}, ..., z_{b_k}, y) comes from the exact junction-tree elimination of
:mod:`inference.junction_tree` (any ladder; on a DAG the additive ceiling is the ceiling given perfect child
events, not a bound over inputs, and :attr:`Ceiling.is_bound` says so).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

from teachers.ladder import Ladder

__all__ = ["MAX_CELLS", "Ceiling", "additive_ceiling", "architecture_ceiling", "children_bayes",
           "constructed_student", "squared_loss_optimum", "top_joint"]

#: Largest (child configurations x classes) the exact mixed-integer program is attempted on.
MAX_CELLS = 4096


def top_joint(ladder: Ladder) -> torch.Tensor:
    """Exact P(z_{b_1}, ..., z_{b_k}, y) over the root's children b_1..b_k (in ``ladder.children[0][0]``
    order) and the label, float64 ``(m_{b_1}, ..., m_{b_k}, m_0)``."""
    from inference.junction_tree import region_joint

    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
    return region_joint(ladder, [(1, c) for c in ladder.children[0][0]] + [(0, 0)])


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
    p = _check_joint(joint)
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
    return float(pc[np.arange(len(pc)), s.argmax(1)].sum()), loss


def additive_ceiling(joint: torch.Tensor, *, bound: float = 100.0) -> tuple[float, list[np.ndarray]]:
    """The best accuracy of an additive score s_y(z) = sum_b a_{b,y}(z_b), exact (module docstring).

    :param joint: P(z_1, ..., z_k, y) ``(m_1, ..., m_k, classes)``.
    :param bound: |a_{b,y}(e)| <= bound (the big-M of the program is 2 k bound + 1).
    :returns: ``(accuracy, a)``, ``a[b]`` ``(m_b, classes)`` the optimal score tables; the accuracy is that of
        the argmax of their sum, evaluated directly.
    :raises ValueError: more than :data:`MAX_CELLS` configurations x classes.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    p = _check_joint(joint)
    sizes, m = p.shape[:-1], p.shape[-1]
    pc = p.reshape(-1, m)
    cells = len(pc)
    if cells * m > MAX_CELLS:
        raise ValueError(f"joint: {cells} child configurations x {m} classes is more than MAX_CELLS={MAX_CELLS} "
                         "for the exact program")
    design = _one_hot_design(sizes)
    na, k = design.shape[1] * m, len(sizes)
    big_m = 2 * k * bound + 1
    live = np.flatnonzero(pc.sum(1) > 0)
    # score(c, y) = design[c] @ a[:, y] with a flattened (feature, class) -> feature * m + class
    rows = []
    for c in live:
        for y, y2 in itertools.permutations(range(m), 2):
            row = np.zeros(na + cells * m)
            row[:na] = np.kron(design[c], np.eye(m)[y] - np.eye(m)[y2])
            row[na + c * m + y] = -big_m
            rows.append(row)
    one_label = np.zeros((len(live), na + cells * m))
    for j, c in enumerate(live):
        one_label[j, na + c * m: na + (c + 1) * m] = 1.0
    constraints = [LinearConstraint(np.array(rows), 1 - big_m, np.inf), LinearConstraint(one_label, -np.inf, 1)]
    cost = np.r_[np.zeros(na), -pc.reshape(-1)]
    lo = np.r_[-bound * np.ones(na), np.zeros(cells * m)]
    hi = np.r_[bound * np.ones(na), np.ones(cells * m)]
    res = milp(cost, constraints=constraints, integrality=np.r_[np.zeros(na), np.ones(cells * m)],
               bounds=Bounds(lo, hi))
    if res.status != 0:  # pragma: no cover - HiGHS always solves these bounded, feasible programs
        raise RuntimeError(f"additive_ceiling: the mixed-integer program ended with status {res.status}: "
                           f"{res.message}")
    a = res.x[:na].reshape(-1, m)
    scores = design @ a
    return float(pc[np.arange(cells), scores.argmax(1)].sum()), np.split(a, np.cumsum(sizes)[:-1])


@dataclass(frozen=True)
class Ceiling:
    """The ceilings of a student class on a ladder (module docstring).

    :ivar additive: the best accuracy of a linear top (no readout), or None when too large to compute.
    :ivar readout: the best accuracy of a readout top wide enough (sum_z max_y P(z, y)).
    :ivar loss_optimal: accuracy of the squared-loss-optimal linear top; ``loss_optimal_loss`` its loss.
    :ivar is_bound: True on a tree (the ceilings bound every weight setting, given any inputs); on a DAG they
        are the ceilings given perfect child events.
    :ivar readout_width: nodes the readout group needs for :attr:`readout` (child configurations of positive
        probability).
    """

    additive: float | None
    readout: float
    loss_optimal: float
    loss_optimal_loss: float
    is_bound: bool
    readout_width: int

    def for_student(self, readout: bool) -> float | None:
        """The ceiling of the student class with or without a readout."""
        return self.readout if readout else self.additive


def architecture_ceiling(ladder: Ladder) -> Ceiling:
    """The exact ceilings of the students of ``ladder`` with and without a readout (module docstring)."""
    joint = top_joint(ladder)
    cells = math.prod(joint.shape[:-1])
    additive = additive_ceiling(joint)[0] if cells * joint.shape[-1] <= MAX_CELLS else None
    acc, loss = squared_loss_optimum(joint)
    width = int((joint.reshape(cells, -1).sum(-1) > 0).sum())
    return Ceiling(additive, children_bayes(joint), acc, loss, ladder.is_tree(), width)


def constructed_student(ladder: Ladder, *, readout: bool = True, dtype: torch.dtype = torch.float64):
    """A :class:`~smaso.student.network.LadderStudent` built by hand that attains its class's ceiling: the
    constructive half of the ceilings (module docstring), on a bottom-up uniform tree with one-hot leaves.

    Every hidden region's group holds the indicators of its children's joint configurations (width
    ``prod_b m_b``): node C = ReLU(sum_b 1[z_b = C_b] - (k - 1)), where 1[z_b = e] is the leaf input itself or,
    higher up, the sum of the child's configuration nodes that its lookup maps to e.  The top is linear in the
    root's children's groups with the optimal scores of :func:`additive_ceiling` (over the readout ladder's
    single child, the label, with ``readout=True``), so its accuracy is exactly the ceiling: the Bayes
    accuracy 1 with a readout, the additive ceiling without.
    """
    from smaso.student.network import LadderStudent
    from smaso.student.readout import readout_ladder

    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
    if ladder.mode == "topdown" or not ladder.is_uniform() or ladder.emission.kind != "onehot":
        raise ValueError("ladder: the construction needs a bottom-up uniform tree with one-hot leaves")
    lad = readout_ladder(ladder) if readout else ladder
    d, b, m = lad.depth, lad.branching, lad.events
    widths = [m[l + 1] ** b[l] for l in range(1, d)]
    st = LadderStudent(ladder, widths[1:] if readout else widths, readout=widths[0] if readout else None,
                       dtype=dtype)
    codes = [torch.tensor(list(itertools.product(range(m[l + 1]), repeat=b[l]))) for l in range(d)]  # (C, b_l)
    with torch.no_grad():
        for l in range(d - 1, -1, -1):
            # the event child b of a region of level l reads from its node c: the node's own event at the
            # leaves (one-hot inputs), else its lookup of configuration c (per child region)
            child_events = torch.arange(m[d])[None].expand(lad.num_regions[d], -1) if l == d - 1 else \
                lad.lookup[l + 1].long()  # (R_{l+1}, n_{l+1})
            if l == 0:
                joint = top_joint(lad)
                a = additive_ceiling(joint)[1]  # a[j] (m_j, classes) per child place
                w = torch.stack([torch.as_tensor(a[j], dtype=dtype)[child_events[j]] for j in range(b[0])])
                st.weights[0].copy_(w)
                st.biases[0].zero_()
                continue
            place = torch.arange(lad.num_regions[l + 1]) % b[l]  # child region -> its place j among siblings
            # weights[l][child, c, C] = 1[event of child's node c == C_j]
            w = (child_events[:, :, None] == codes[l].T[place][:, None, :]).to(dtype)
            st.weights[l].copy_(w)
            st.biases[l].fill_(-(b[l] - 1))
    return st
