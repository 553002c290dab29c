"""Marginalized gradients and their recursion (framework paper §2.3: Eq 3, Eq 5, Thm 1 / Eq 18;
``docs/theory.md`` §1.2 states both sides, how each is marginalized and what else is returned).

The ladder must have one-hot leaves: all m_d^{R_d} leaf configurations are enumerated (at most
:data:`MAX_CONFIGS`) with their exact P(x, y), those with P(x) = 0 dropped.  The student runs on the batch
of all pairs with P(x, y) > 0, each once (with BN this batch sets the BN statistics); in a top-down ladder
the per-example gradient g_j(x, y) (``LadderStudent.forward_backward``, g = -dLoss/du) is averaged over
the label's posterior.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from smaso import _ladder_parts
from smaso.student.network import LadderStudent
from teachers.ladder import TOPDOWN, Ladder

__all__ = ["MAX_CONFIGS", "MarginalizedGradient", "enumerate_inputs", "marginalized_gradient"]

#: Largest number of leaf configurations m_d^{R_d} enumerated.
MAX_CONFIGS = 2**16


def _check_ladder(ladder: Ladder) -> None:
    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
    if ladder.emission.kind != "onehot":
        raise ValueError(f"ladder: exact marginalization needs discrete (one-hot) leaves, got the "
                         f"{ladder.emission.kind!r} emission")
    total = ladder.events[-1] ** ladder.num_regions[-1]
    if total > MAX_CONFIGS:
        raise ValueError(f"ladder: {ladder.events[-1]}^{ladder.num_regions[-1]} = {total} leaf configurations "
                         f"exceed {MAX_CONFIGS}; use a smaller ladder")


@torch.no_grad()
def enumerate_inputs(ladder: Ladder) -> tuple[torch.Tensor, torch.Tensor]:
    """All leaf configurations and their exact joint with the label.

    :returns: ``(configs, p_xy)``: ``configs`` ``(K, R_d)`` int64 leaf events in lexicographic order
        (leaf region 0 most significant; configurations of probability 0 dropped), ``p_xy``
        ``(K, m_0)`` float64 P(x, y), summing to 1.
    """
    _check_ladder(ladder)
    d, m, R = ladder.depth, ladder.events, ladder.num_regions
    configs = torch.tensor(list(itertools.product(range(m[d]), repeat=R[d])), dtype=torch.int64).reshape(-1, R[d])
    branching = _ladder_parts.uniform_branching(ladder)
    if ladder.mode == TOPDOWN:
        tables = _ladder_parts.stacked_tables(ladder)
        joint = ladder.productions or (None,) * d
        lam = F.one_hot(configs, m[d]).double()  # (K, R_l, m_l): P(x under region | z_region)
        for l in range(d, 0, -1):
            level = joint[l - 1]
            if level is not None:  # children drawn jointly: through the productions, not the marginals
                lam = _ladder_parts.production_log_messages(level, lam.log(), R[l - 1]).exp()
                continue
            msg = torch.einsum("cae,kce->kca", tables[l - 1], lam)  # (K, R_l, m_{l-1})
            lam = msg.reshape(len(configs), R[l - 1], branching[l - 1], m[l - 1]).prod(2)
        p_xy = _ladder_parts.prior(ladder)[None] * lam[:, 0]
    else:
        lookup = _ladder_parts.stacked_lookups(ladder)
        p_x = _ladder_parts.leaf_prior(ladder).gather(1, configs.T).prod(0)  # (K,)
        z = configs
        for l in range(d - 1, -1, -1):
            b = branching[l]
            radix = m[l + 1] ** torch.arange(b - 1, -1, -1)
            code = (z.reshape(len(configs), R[l], b) * radix).sum(-1)  # (K, R_l)
            z = lookup[l].gather(1, code.T).T
        p_xy = p_x[:, None] * F.one_hot(z[:, 0], m[0]).double()
    keep = p_xy.sum(1) > 0
    return configs[keep], p_xy[keep]


def _codes(configs: torch.Tensor, lo: int, hi: int, m: int) -> torch.Tensor:
    """Mixed-radix code of ``configs[:, lo:hi]`` (first column most significant): ``(K,)``."""
    radix = m ** torch.arange(hi - lo - 1, -1, -1)
    return (configs[:, lo:hi] * radix).sum(-1)


def _conditional_mean(values: torch.Tensor, weights: torch.Tensor, codes: torch.Tensor,
                      size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """E[values | code] for every code in 0..size-1 (0 where the code has probability 0), and P(code)."""
    mass = torch.zeros(size, dtype=torch.float64).index_add_(0, codes, weights)
    w = weights.reshape(-1, *([1] * (values.dim() - 1)))
    sums = torch.zeros(size, *values.shape[1:], dtype=torch.float64).index_add_(0, codes, w * values)
    safe = torch.where(mass > 0, mass, 1.0).reshape(-1, *([1] * (values.dim() - 1)))
    return torch.where((mass > 0).reshape(safe.shape), sums / safe, 0.0), mass


@dataclass
class MarginalizedGradient:
    """Result of :func:`marginalized_gradient` (level l = 0..d-1 is the level of node j; its child
    regions k are the regions of level l+1; ``S_l = m_d^{leaves under a region of level l}``).

    :ivar configs: ``(K, R_d)`` leaf configurations with P(x) > 0.
    :ivar p_x: ``(K,)`` P(x).  :ivar p_y_given_x: ``(K, m_0)`` P(y | x).
    :ivar g: ``g[l]`` ``(K, R_l, n_l)`` g_j(x) = E_{y|x}[g_j(x, y)].
    :ivar fbar: ``fbar[l]`` ``(K, R_l, n_l)`` node outputs (level d: the one-hot inputs).
    :ivar deriv: ``deriv[l]`` ``(K, R_l, n_l)`` f'_j(x).
    :ivar region: ``region[l]`` ``(R_l, S_l, n_l)`` g_j(x_j), indexed by the code of x_j.
    :ivar p_region: ``p_region[l]`` ``(R_l, S_l)`` P(x_j) (l = 0..d).
    :ivar direct: ``direct[l]`` ``(R_{l+1}, S_{l+1}, n_l)``: ``[c, a, j]`` = g_j(x_c = a) by Eq 3, for
        node j of the parent region of c.
    :ivar recursive: same shape, by Thm 1 from ``region[l]`` and ``p_region[l]`` only.
    :ivar delta_w: ``delta_w[l]`` ``(R_{l+1}, n_{l+1}, n_l)`` E_x[fbar_k(x) g_j(x)] (Eq 2, P-weighted).
    :ivar delta_w_marginal: same, as E_{x_k}[fbar_k(x_k) g_j(x_k)] (Eq 3).
    :ivar locality_error: max over levels of |fbar_k(x) - E[fbar_k | x_k]|: 0 for a locally
        connected student (fbar_k depends on x_k only).
    """

    configs: torch.Tensor
    p_x: torch.Tensor
    p_y_given_x: torch.Tensor
    g: list
    fbar: list
    deriv: list
    region: list
    p_region: list
    direct: list
    recursive: list
    delta_w: list
    delta_w_marginal: list
    locality_error: float

    def max_error(self) -> float:
        """max |Eq 3 - Thm 1| over every node, child region and x_k."""
        return max((a - b).abs().max().item() for a, b in zip(self.direct, self.recursive, strict=True))


@torch.no_grad()
def marginalized_gradient(student: LadderStudent, ladder: Ladder | None = None, *,
                          loss: str = "squared") -> MarginalizedGradient:
    """Marginalized gradients g_j(x_k) of every node j and child region k, two ways (Eq 3, Thm 1).

    ``direct`` marginalizes g_j(x) over all of x_-k given x_k (Eq 3); ``recursive`` first forms
    g_j(x_j) = E_{x_-j|x_j}[g_j(x)] and then marginalizes over x_{j,-k} given x_k on the table
    P(x_j) (Thm 1, Eq 18 of the framework paper).  See the module docstring for the inputs
    (every one-hot leaf configuration, exact P(x, y)) and for g_j(x) = E_{y|x}[g_j(x, y)].

    :param student: a :class:`~smaso.student.network.LadderStudent` of ``ladder`` (its current weights).
    :param ladder: the teacher (default: ``student.ladder``); must have one-hot leaves and at
        most :data:`MAX_CONFIGS` leaf configurations.
    :param loss: ``"squared"`` or ``"cross_entropy"``.
    """
    if not isinstance(student, LadderStudent):
        raise TypeError(f"student: expected a LadderStudent, got {type(student).__name__}")
    ladder = student.ladder if ladder is None else ladder
    _check_ladder(ladder)
    sl = student.ladder
    if (sl.branching, sl.num_regions, sl.num_classes) != (ladder.branching, ladder.num_regions, ladder.num_classes) \
            or student.widths[-1] != ladder.events[-1]:
        raise ValueError(f"student: its weights do not match the ladder (student built for {sl!r}, input width "
                         f"{student.widths[-1]}; ladder {ladder!r})")
    d, m_d = ladder.depth, ladder.events[-1]
    configs, p_xy = enumerate_inputs(ladder)
    p_x = p_xy.sum(1)
    post = p_xy / p_x[:, None]
    K = len(configs)
    # every pair (x, y) with P(x, y) > 0, once
    xi, yi = (p_xy > 0).nonzero(as_tuple=True)
    x = F.one_hot(configs[xi], m_d).to(student.weights[0].dtype)
    rec = student.forward_backward(x, yi, loss=loss)
    wpair = post[xi, yi]
    first = torch.full((K,), -1, dtype=torch.int64).scatter_reduce_(0, xi, torch.arange(len(xi)), "amax")

    def per_x(t: torch.Tensor) -> torch.Tensor:  # average over y|x of a per-pair quantity
        w = wpair.reshape(-1, *([1] * (t.dim() - 1)))
        return torch.zeros(K, *t.shape[1:], dtype=torch.float64).index_add_(0, xi, w * t.double())

    g = [per_x(rec.g[l]) for l in range(d)]
    fbar = [rec.fbar[l][first].double() for l in range(d + 1)]  # outputs depend on x only
    deriv = [rec.deriv[l][first].double() for l in range(d)]
    region, p_region, direct, recursive, dw, dw_marg = [], [], [], [], [], []
    locality = 0.0
    for l in range(d + 1):
        lu = ladder.leaves_under(l)
        reg, preg = [], []
        for r in range(ladder.num_regions[l]):
            codes = _codes(configs, r * lu, (r + 1) * lu, m_d)
            vals = g[l][:, r] if l < d else torch.zeros(K, 0, dtype=torch.float64)
            mean, mass = _conditional_mean(vals, p_x, codes, m_d**lu)
            reg.append(mean)
            preg.append(mass)
            if l >= 1:  # locality: fbar of region r depends on x_r only
                fmean, _ = _conditional_mean(fbar[l][:, r], p_x, codes, m_d**lu)
                locality = max(locality, (fbar[l][:, r] - fmean[codes]).abs().max().item())
        p_region.append(torch.stack(preg))
        if l < d:
            region.append(torch.stack(reg))
    branching = _ladder_parts.uniform_branching(ladder)
    for l in range(d):
        b, lu, lu_c = branching[l], ladder.leaves_under(l), ladder.leaves_under(l + 1)
        # digits of every x_j code, to find the x_k sub-codes inside x_j (for Thm 1's second step)
        digits = torch.tensor(list(itertools.product(range(m_d), repeat=lu)), dtype=torch.int64).reshape(-1, lu)
        dl, rl, dwl, dwm = [], [], [], []
        for c in range(ladder.num_regions[l + 1]):
            r, i = divmod(c, b)
            codes_c = _codes(configs, c * lu_c, (c + 1) * lu_c, m_d)
            g_xk, p_xk = _conditional_mean(g[l][:, r], p_x, codes_c, m_d**lu_c)  # Eq 3
            dl.append(g_xk)
            sub = _codes(digits, i * lu_c, (i + 1) * lu_c, m_d)
            rl.append(_conditional_mean(region[l][r], p_region[l][r], sub, m_d**lu_c)[0])  # Thm 1
            f_c = fbar[l + 1][:, c]  # (K, n_{l+1})
            dwl.append(torch.einsum("k,kq,kj->qj", p_x, f_c, g[l][:, r]))
            f_xk, _ = _conditional_mean(f_c, p_x, codes_c, m_d**lu_c)
            dwm.append(torch.einsum("a,aq,aj->qj", p_xk, f_xk, g_xk))
        direct.append(torch.stack(dl))
        recursive.append(torch.stack(rl))
        dw.append(torch.stack(dwl))
        dw_marg.append(torch.stack(dwm))
    return MarginalizedGradient(configs, p_x, post, g, fbar, deriv, region, p_region, direct, recursive, dw, dw_marg,
                                locality)
