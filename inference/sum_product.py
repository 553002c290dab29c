"""Exact sum-product on a tree-shaped ladder, in scaled probabilities: the tree path of :mod:`inference.posterior`
(``docs/theory.md`` §1.13).

Layout.  One tensor per level, ``(R_l, n, M_l)``: the level's regions, the examples, the events padded with
zeros to the level's largest count ``M_l = ladder.events[l]``; so one ``bmm`` (top-down) or one ``scatter_add``
(bottom-up) serves every region of a level.  A :class:`TreePlan` holds the tables in this layout, once per
ladder and device (cached, weakly, by the ladder object and the versions of its tensors).

Upward pass (examples batched, every message rescaled to max 1 so that nothing under- or overflows):

top-down
    at a leaf r: phi_r(k) = p(x_r | z_r = k) / c_r, log c_r = max_k log p(x_r | z_r = k);
    msg_r(j) = sum_k P(z_r = k | z_a = j) phi_r(k) for the parent a of r (one ``bmm`` per level),
    lambda_a(j) = prod_{children r of a} msg_r(j), phi_a = lambda_a / s_a with s_a = max_j lambda_a(j);
    log p(x) = log sum_y P(y) phi_root(y) + sum of every log c_r and log s_a;
    on a level whose regions draw their b children jointly (:mod:`teachers.productions`: production k of event j
    of region a has the children rules[a, j, k] and probability probs[a, j, k]), the children's product replaces
    the product of messages: conf_a(j, k) = probs[a, j, k] prod_i phi_{c_i}(rules[a, j, k, i]) and
    lambda_a(j) = sum_k conf_a(j, k), in O(m K b) per region and example (K productions), not O(m m_child^b);
bottom-up
    at a leaf r: phi_r(k) = P(z_r = k) p(x_r | z_r = k) / c_r; for a region a with children c_1..c_b,
    conf_a(k_1..k_b) = prod_i phi_{c_i}(k_i) (outer products, first child most significant) and
    lambda_a(j) = sum_{lookup_a(k) = j} conf_a(k), phi_a = lambda_a / s_a;
    log p(x) = log sum_y phi_root(y) + the log scales.

Downward pass (the posterior marginals q_r(k) = p(z_r = k | x); every scale cancels in the ratios):

top-down
    q_r(k) = phi_r(k) sum_j q_a(j) P(z_r = k | z_a = j) / msg_r(j)   (one ``bmm`` per level);
    productions: w_a(j, k) = q_a(j) conf_a(j, k) / lambda_a(j), the posterior of (z_a, production), and
    q_{c_i}(c) = sum of w_a(j, k) over rules[a, j, k, i] = c (one ``scatter_add`` per child place);
bottom-up
    w_a(k) = conf_a(k) q_a(lookup_a(k)) / lambda_a(lookup_a(k)), and q_{c_i}(k_i) = the sum of w_a over the other
    children's digits.

Both are exact (the same numbers as log-space sum-product to ~1e-14).  Trees whose regions differ in their
number of children or events are padded (top-down) or split into groups of regions of one shape (bottom-up);
a uniform tree is one group per level and its children are views, not gathers.  A scaled evidence of 0 is
impossible or underflowed (:mod:`inference.posterior` decides in log space).

One-hot leaves (:class:`teachers.emission.OneHotEmission`): phi_r is the indicator of x_r's event, computed from
x directly (the same 0/1 values as exp of the emission's 0/-inf log-likelihood, without the exp).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from teachers.emission import OneHotEmission
from teachers.ladder import TOPDOWN, Ladder, _known

__all__ = ["TINY", "TreePlan", "Upward", "downward", "leaf_factors", "log_messages", "tree_plan", "upward"]

#: Smallest positive float64: scales are clamped to it, so a region that is all zeros divides as 0 / TINY = 0.
TINY = torch.finfo(torch.float64).tiny
_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


# ---------------------------------------------------------------------- plan (tables in the level layout)
@dataclass
class _Group:
    """Bottom-up: regions of one level with the same child count, child event counts and event count.

    ``regions`` ``(G,)`` (None: every region of the level, in order), ``children`` ``(G * b,)`` region-major indices
    in the level below (None: region g's children are ``g*b .. g*b + b - 1``), ``sizes`` the children's event
    counts, ``events`` the regions' own count, ``index`` ``(G, 1, K)`` their lookups (``K = prod(sizes)``)."""

    regions: torch.Tensor | None
    children: torch.Tensor | None
    sizes: tuple[int, ...]
    events: int
    index: torch.Tensor


@dataclass(eq=False)
class TreePlan:
    """A tree ladder's tables on one device in the level layout (module docstring); build with :func:`tree_plan`.

    Top-down: ``prior`` ``(m_0,)``, ``T[l]`` ``(R_l, M_{l-1}, M_l)`` and ``Tt[l]`` (its transpose, contiguous),
    zero-padded; ``parent[l]`` ``(R_l,)``; ``branch[l]`` b when region a of level l has the children
    ``a*b .. a*b + b - 1`` of level l + 1, else None and ``kids[l]`` ``(R_l * b_max,)`` their indices padded
    with ``R_{l+1}`` (a row of ones); ``prods[l]`` None, or where the regions of level l draw their children
    jointly ``(rows, probs)``: ``rows`` ``(b, R_l * m_l * K)`` int64, ``rows[i, (a * m_l + j) * K + k]`` =
    ``a * M_{l+1} + rules[a, j, k, i]`` (child i's event as a row of the level's ``(R_l * M_{l+1}, n)`` layout
    of place i), and ``probs`` ``(R_l, m_l, K, 1)``.
    Bottom-up: ``leaf_prior`` ``(R_d, 1, m_d)``, ``groups[l]``.
    ``per_example``: float64 values of the largest temporary per example of a level without productions (and of
    the inputs), ``production_elements`` the largest R_l m_l K of a level of productions (its products conf and
    each gathered child place hold that many per example; 0 without productions), ``emission_elements`` those of
    the emission's ``(R_d, m_d, dim)`` temporary (0 for one-hot leaves, which skip it): for chunking
    (:mod:`inference.posterior`).
    """

    ladder_ref: weakref.ref
    device: torch.device
    mode: str
    depth: int
    R: tuple[int, ...]
    M: tuple[int, ...]
    prior: torch.Tensor | None = None
    T: list = field(default_factory=list)
    Tt: list = field(default_factory=list)
    parent: list = field(default_factory=list)
    branch: list = field(default_factory=list)
    kids: list = field(default_factory=list)
    prods: list = field(default_factory=list)
    leaf_prior: torch.Tensor | None = None
    groups: list = field(default_factory=list)
    key: tuple = ()
    per_example: int = 0
    production_elements: int = 0
    emission_elements: int = 0

    @property
    def ladder(self) -> Ladder:
        """The plan's ladder.  Held weakly: the plans are cached per ladder in a weak-key dictionary, and a plan
        that held its ladder would keep it (and its device tables) alive forever."""
        lad = self.ladder_ref()
        if lad is None:  # pragma: no cover - a plan is only reached through its (live) ladder
            raise RuntimeError("TreePlan: its ladder no longer exists")
        return lad


def tree_plan(ladder: Ladder, device: torch.device) -> TreePlan:
    """The :class:`TreePlan` of a tree ladder on ``device`` (cached per ladder object, device and table versions)."""
    key = ladder.state_key()
    per = _PLANS.setdefault(ladder, {})
    plan = per.get(device)
    if plan is None or plan.key != key:
        plan = per[device] = _build(ladder, device, key)
    return plan


def _build(ladder: Ladder, device: torch.device, key: tuple) -> TreePlan:
    if not ladder.is_tree():
        raise ValueError("tree_plan: regions of this ladder have several parents; use the junction tree")
    d, R, M = ladder.depth, ladder.num_regions, ladder.events
    p = TreePlan(weakref.ref(ladder), device, ladder.mode, d, tuple(R), tuple(M), key=key)
    f64: dict[str, Any] = dict(device=device, dtype=torch.float64)
    if ladder.mode == TOPDOWN:
        p.prior = _known(ladder.prior, "prior", "a top-down ladder").to(**f64)
        p.T, p.Tt, p.parent = [None], [None], [None]
        for l in range(1, d + 1):
            t = _known(ladder.tables, "tables", "a top-down ladder")[l - 1]
            if t is None or tuple(t.shape) != (R[l], M[l - 1], M[l]):
                t = torch.zeros(R[l], M[l - 1], M[l], dtype=torch.float64)
                for i, ti in enumerate(_known(ladder.region_tables, "region_tables", "a top-down ladder")[l]):
                    t[i, : ti.shape[0], : ti.shape[1]] = ti
            t = t.to(**f64)
            p.T.append(t)
            p.Tt.append(t.transpose(1, 2).contiguous())
            p.parent.append(ladder.parent_index(l).to(device))
        p.prods = [_plan_productions(ladder, l, device) for l in range(d)]
    else:
        p.leaf_prior = _known(ladder.leaf_prior, "leaf_prior", "a bottom-up ladder").to(**f64)[:, None, :]
        for l in range(d):
            p.groups.append(_groups(ladder, l, device))
    for l in range(d):  # how level l's regions find their children in level l + 1
        kids = ladder.children[l]
        b = len(kids[0])
        if all(ks == tuple(range(i * b, i * b + b)) for i, ks in enumerate(kids)):
            p.branch.append(b)
            p.kids.append(None)
        else:
            bmax = max(len(ks) for ks in kids)
            pad = [list(ks) + [R[l + 1]] * (bmax - len(ks)) for ks in kids]
            p.branch.append(None)
            p.kids.append(torch.tensor(pad, dtype=torch.int64, device=device).reshape(-1))
    if p.mode == TOPDOWN:
        size = max(R[l] * max(M[l], M[l - 1]) for l in range(1, d + 1))
        p.production_elements = max([0] + [pr[1].numel() for pr in p.prods if pr])  # probs (R_l, m_l, K, 1)
    else:
        size = max(sum(g.index.shape[0] * g.index.shape[2] for g in lvl) for lvl in p.groups)
    p.per_example = max(size, R[-1] * ladder.emission.dim)
    p.emission_elements = 0 if type(ladder.emission) is OneHotEmission else R[-1] * M[-1] * ladder.emission.dim
    return p


def _plan_productions(ladder: Ladder, l: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(rows, probs)`` of level l in the plan's layout (:class:`TreePlan`), or None when its children are
    drawn on their own."""
    joint = ladder.productions[l] if ladder.productions is not None else None
    if joint is None:
        return None
    # productions exist only on uniform top-down trees (Ladder checks it), so region a's children are a*b .. a*b+b-1
    R, m, K = ladder.num_regions[l], joint.num_events, joint.num_productions
    rules = joint.region_rules(R).reshape(R, m * K, joint.arity).transpose(1, 2)  # (R, b, m K)
    # the row of child i's event in its level's (R_l * M_{l+1}, n) layout of place i: row copies, not gathers
    rows = (rules + torch.arange(R)[:, None, None] * ladder.events[l + 1]).transpose(0, 1).reshape(joint.arity, -1)
    probs = joint.region_probs(R).reshape(R, m, K, 1)
    return (rows.contiguous().to(device), probs.to(device, torch.float64))


def _groups(ladder: Ladder, l: int, device: torch.device) -> list[_Group]:
    by_shape: dict[tuple, list[int]] = {}
    for i in range(ladder.num_regions[l]):
        by_shape.setdefault((ladder.child_sizes(l, i), ladder.region_events[l][i]), []).append(i)
    lookups = _known(ladder.lookups, "lookups", "a bottom-up ladder")[l]
    out = []
    for (sizes, m), regions in by_shape.items():
        kids = [ladder.children[l][i] for i in regions]
        b = len(sizes)
        every = regions == list(range(ladder.num_regions[l]))
        contiguous = every and all(ks == tuple(range(g * b, g * b + b)) for g, ks in enumerate(kids))
        index = torch.stack([lookups[i] for i in regions]).to(device)[:, None, :]
        out.append(_Group(None if every else torch.tensor(regions, device=device),
                          None if contiguous else torch.tensor([c for ks in kids for c in ks], device=device),
                          tuple(sizes), int(m), index))
    return out


# ---------------------------------------------------------------------- leaves
def leaf_factors(plan: TreePlan, x: torch.Tensor | None = None, ll: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled leaf factors ``phi`` ``(R_d, n, m_d)`` (max 1 per leaf and example, or all 0) and their log scales
    ``log_c`` ``(R_d, n, 1)``, from inputs ``x`` ``(n, R_d, dim)`` or log-likelihoods ``ll`` ``(n, R_d, m_d)``.

    Top-down: phi = p(x_r | z_r) / c_r; bottom-up: phi = P(z_r) p(x_r | z_r) / c_r (module docstring)."""
    em = plan.ladder.emission
    if ll is None:
        if x is None:
            raise ValueError("leaf_factors: expected x or ll, got neither")
        if type(em) is OneHotEmission:
            match = (x == 1) & (x.sum(-1, keepdim=True) == 1)  # the emission's definition of p(x_r | z_r = k) = 1
            phi = torch.empty(match.shape[1], match.shape[0], match.shape[2], dtype=torch.float64, device=x.device)
            phi.copy_(match.transpose(0, 1))
            if plan.mode == TOPDOWN:
                return phi, torch.zeros(phi.shape[0], phi.shape[1], 1, dtype=torch.float64, device=x.device)
            phi.mul_(_known(plan.leaf_prior, "leaf_prior", "a bottom-up ladder"))
            c = phi.amax(-1, keepdim=True).clamp_(min=TINY)
            return phi.div_(c), c.log_()
        ll = em.log_likelihood(x)
    llt = ll.to(torch.float64).transpose(0, 1)  # (R_d, n, m)
    if plan.mode != TOPDOWN:
        llt = llt + _known(plan.leaf_prior, "leaf_prior", "a bottom-up ladder").log()
    c = llt.amax(-1, keepdim=True).clamp_(min=-1e300)  # an all -inf leaf stays -inf below, not nan
    phi = torch.empty(llt.shape, dtype=torch.float64, device=llt.device)
    torch.sub(llt, c, out=phi).exp_()
    return phi, c


# ---------------------------------------------------------------------- upward
@dataclass
class Upward:
    """The upward pass of one batch (module docstring), layout ``(R_l, n, M_l)``.

    :ivar phi: ``phi[l]`` the scaled messages of level l (max 1 per region and example).
    :ivar msg: top-down: ``msg[l]`` ``(R_l, n, M_{l-1})`` each region's message to its parent (phi[l]'s scale).
    :ivar lam: bottom-up: ``lam[l]`` ``(R_l, n, M_l)`` before rescaling (the scale of its children's phi).
    :ivar conf: bottom-up: ``conf[l][g]`` ``(G, n, K)`` of every group of level l; top-down, on a level of
        productions: ``conf[l]`` ``(R_l, M_l, K, n)`` the weighted products conf_a(j, k) (module docstring).
    :ivar log_scale: ``log_scale[l]`` ``(R_l, n, 1)`` the total log scale of region's subtree (``cumulative``).
    :ivar log_z: ``(n,)`` log p(x).
    :ivar label: ``(n, m_0)`` p(y | x) (nan where p(x) = 0).
    """

    phi: list
    msg: list
    lam: list
    conf: list
    log_scale: list | None
    log_z: torch.Tensor
    label: torch.Tensor


def _children(plan: TreePlan, l: int, t: torch.Tensor, fill: float) -> torch.Tensor:
    """``t`` ``(R_{l+1}, n, K)`` arranged per region of level l: ``(R_l, b, n, K)`` (missing children = ``fill``)."""
    b = plan.branch[l]
    if b is not None:
        return t.view(plan.R[l], b, *t.shape[1:])
    pad = torch.full((1, *t.shape[1:]), fill, dtype=t.dtype, device=t.device)
    return torch.cat([t, pad]).index_select(0, plan.kids[l]).view(plan.R[l], -1, *t.shape[1:])


def upward(plan: TreePlan, phi: torch.Tensor, log_c: torch.Tensor, *, keep: bool = False,
           cumulative: bool = False) -> Upward:
    """The upward pass from :func:`leaf_factors`' ``phi``, ``log_c``: log p(x) and p(y | x) (module docstring).

    :param keep: keep every level's messages (for :func:`downward` and the draws); else only the root's.
    :param cumulative: also return each region's total log scale (for :func:`log_messages`).
    """
    d = plan.depth
    phis, msgs, lams, confs = [None] * (d + 1), [None] * (d + 1), [None] * (d + 1), [None] * (d + 1)  # type: list, list, list, list
    phis[d] = phi
    logs = log_c.sum(0)  # (n, 1)
    cum: list | None = [None] * d + [log_c.contiguous()] if cumulative else None  # a list exactly when cumulative
    for l in range(d - 1, -1, -1):
        if plan.mode == TOPDOWN and plan.prods[l] is not None:
            products = _production_products(plan, l, phi)
            lam = products.sum(2).transpose(1, 2).contiguous()  # (R_l, n, M_l)
            if keep:
                confs[l] = products
        elif plan.mode == TOPDOWN:
            tt = plan.Tt[l + 1]
            if phi.shape[1] == 1 and tt.shape[0] >= 32:  # one example: a product and a sum beat many tiny gemms
                msg = (phi.transpose(1, 2) * tt).sum(1, keepdim=True)
            else:
                msg = torch.bmm(phi, tt)  # (R_{l+1}, n, M_l)
            lam = _children(plan, l, msg, 1.0).prod(1)  # (R_l, n, M_l)
            if keep:
                msgs[l + 1] = msg
        else:
            lam, conf = _bottomup_level(plan, l, phi)
            if keep:
                lams[l], confs[l] = lam, conf
        s = lam.amax(-1, keepdim=True).clamp_(min=TINY)
        phi = lam.div_(s) if not keep or plan.mode == TOPDOWN else lam / s
        log_s = s.log_()
        logs = logs + log_s.sum(0)
        if cum is not None:  # cumulative
            cum[l] = _children(plan, l, cum[l + 1], 0.0).sum(1) + log_s
        if keep:
            phis[l] = phi
    root = phi[0]  # (n, m_0)
    joint = root * _known(plan.prior, "prior", "a top-down ladder") if plan.mode == TOPDOWN else root
    tot = joint.sum(-1, keepdim=True)
    return Upward(phis, msgs, lams, confs, cum, (logs + tot.log()).view(-1), joint / tot)


def _production_products(plan: TreePlan, l: int, phi: torch.Tensor) -> torch.Tensor:
    """conf_a(j, k) = probs[a, j, k] prod_i phi_{c_i}(rules[a, j, k, i]) of every region a of level l
    ``(R_l, M_l, K, n)`` (examples last: the gathers are row copies), from ``phi`` ``(R_{l+1}, n, M_{l+1})`` of its
    children (module docstring)."""
    rows, probs = plan.prods[l]
    R, n = plan.R[l], phi.shape[1]
    ch = phi.view(R, rows.shape[0], n, phi.shape[-1]).permute(1, 0, 3, 2)  # (b, R_l, M_{l+1}, n): a uniform tree
    out: torch.Tensor | None = None
    for i in range(rows.shape[0]):
        t = ch[i].reshape(-1, n).index_select(0, rows[i])  # (R_l m K, n)
        out = t if out is None else out.mul_(t)
    assert out is not None  # every region has at least one child
    return out.view(*probs.shape[:-1], n).mul_(probs)


def _bottomup_level(plan: TreePlan, l: int, phi: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """lambda of level l ``(R_l, n, M_l)`` (unscaled) and the configurations of every group, from ``phi`` of l + 1."""
    n = phi.shape[1]
    lam: torch.Tensor | None = None
    confs = []
    for g in plan.groups[l]:
        G = g.index.shape[0]
        shape = (G, len(g.sizes), n, phi.shape[-1])
        ch = phi.view(shape) if g.children is None else phi.index_select(0, g.children).view(shape)
        parts = [t if m == t.shape[-1] else t[..., :m] for t, m in zip(ch.unbind(1), g.sizes, strict=True)]
        conf = parts[0]
        for t in parts[1:]:  # outer products, the first child most significant
            conf = (conf.unsqueeze(-1) * t.unsqueeze(-2)).flatten(-2)
        confs.append(conf)
        part = torch.zeros(G, n, g.events, dtype=torch.float64, device=phi.device)
        part.scatter_add_(-1, g.index.expand(G, n, -1), conf)
        if g.regions is None and g.events == plan.M[l]:
            lam = part
        else:
            if lam is None:
                lam = torch.zeros(plan.R[l], n, plan.M[l], dtype=torch.float64, device=phi.device)
            lam[:, :, : g.events].index_copy_(0, g.regions if g.regions is not None else
                                              torch.arange(G, device=phi.device), part)
    assert lam is not None  # every level above the leaves has at least one group
    return lam, confs


# ---------------------------------------------------------------------- downward
def downward(plan: TreePlan, up: Upward) -> list[torch.Tensor]:
    """Posterior marginals p(z_r = k | x) of every level, ``(R_l, n, M_l)`` (zeros on padding), from an
    :func:`upward` pass run with ``keep=True`` (module docstring)."""
    q = up.label[None]  # (1, n, m_0)
    out = [q]
    for l in range(1, plan.depth + 1):
        if plan.mode == TOPDOWN and plan.prods[l - 1] is not None:
            q = _production_down(plan, l - 1, q, up)
        elif plan.mode == TOPDOWN:
            w = q.index_select(0, plan.parent[l]).div_(up.msg[l].clamp(min=TINY))
            q = torch.bmm(w, plan.T[l]).mul_(up.phi[l])
        else:
            q = _bottomup_down(plan, l - 1, q, up)
        q = q.div_(q.sum(-1, keepdim=True).clamp_(min=TINY))  # exact already; removes rounding
        out.append(q)
    return out


def _production_down(plan: TreePlan, l: int, q: torch.Tensor, up: Upward) -> torch.Tensor:
    """Marginals of level l + 1 ``(R_{l+1}, n, M_{l+1})`` from those of level l, through its productions: w_a(j, k)
    = q_a(j) conf_a(j, k) / lambda_a(j) summed into each child place by its rules (module docstring)."""
    rows, _ = plan.prods[l]
    R, n, M = plan.R[l], q.shape[1], plan.M[l + 1]
    conf = up.conf[l]  # (R_l, M_l, K, n)
    ratio = q / conf.sum(2).transpose(1, 2).clamp(min=TINY)  # (R_l, n, M_l)
    w = conf.mul(ratio.transpose(1, 2).unsqueeze(2)).view(-1, n)  # (R_l M_l K, n)
    b = rows.shape[0]
    out = torch.zeros(b, R * M, n, dtype=torch.float64, device=q.device)
    for i in range(b):
        out[i].index_add_(0, rows[i], w)
    return out.view(b, R, M, n).permute(1, 0, 3, 2).reshape(R * b, n, M)


def _bottomup_down(plan: TreePlan, l: int, q: torch.Tensor, up: Upward) -> torch.Tensor:
    """Marginals of level l + 1 from those of level l (bottom-up: through every group's configurations)."""
    n = q.shape[1]
    ratio = q / up.lam[l].clamp(min=TINY)  # (R_l, n, M_l)
    out: torch.Tensor | None = None
    for g, conf in zip(plan.groups[l], up.conf[l], strict=True):
        G, b = g.index.shape[0], len(g.sizes)
        r = ratio if g.regions is None else ratio.index_select(0, g.regions)
        w = r[:, :, : g.events].gather(-1, g.index.expand(G, n, -1)).mul_(conf).view(G, n, *g.sizes)
        dims = range(2, 2 + b)
        parts = [w.sum(tuple(k for k in dims if k != 2 + c)) if b > 1 else w for c in range(b)]
        if g.children is None and all(m == plan.M[l + 1] for m in g.sizes):
            out = torch.stack(parts, 1).view(G * b, n, plan.M[l + 1])
            continue
        if out is None:
            out = torch.zeros(plan.R[l + 1], n, plan.M[l + 1], dtype=torch.float64, device=q.device)
        kids = g.children.view(G, b) if g.children is not None else \
            torch.arange(G * b, device=q.device).view(G, b)
        for c in range(b):
            out[:, :, : g.sizes[c]].index_copy_(0, kids[:, c], parts[c])
    assert out is not None  # every level above the leaves has at least one group
    return out


# ---------------------------------------------------------------------- log messages
def log_messages(ladder: Ladder, ll: torch.Tensor) -> list[torch.Tensor]:
    """Log-space messages lambda of every level, ``(n, R_l, M_l)``, from leaf log-likelihoods ``ll``
    ``(n, R_d, m_d)`` (0 = an unobserved leaf): top-down log p(x below r | z_r), bottom-up log p(x below r, z_r).

    The scaled pass's phi times its regions' cumulative scales (used by :mod:`smaso.theorems.conditions`)."""
    plan = tree_plan(ladder, ll.device)
    phi, log_c = leaf_factors(plan, ll=ll)
    up = upward(plan, phi, log_c, keep=True, cumulative=True)
    log_scale = up.log_scale
    assert log_scale is not None  # cumulative=True
    return [(up.phi[l].log() + log_scale[l]).transpose(0, 1) for l in range(ladder.depth + 1)]
