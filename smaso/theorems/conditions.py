"""Thm 2's knowledge conditions measured on the teacher alone, before any student (framework paper §3.2,
Thm 2; ``docs/theory.md`` §1.5 has the definitions, both methods and the measured values).

For a region alpha of level l-1 and a child region beta of level l, in nats (0 exactly when the condition
holds): I_focus = I(x_beta; z_alpha | z_beta) and I_broad = I(x_alpha; z_beta | z_alpha); ``focus_normalized``
and ``broadness_normalized`` divide them by H(z_alpha | z_beta) and H(z_beta | z_alpha) (0 where the entropy is
at most ``ENTROPY_TOL``).  ``method="exact"`` takes I = H(u, x) + H(u, v) - H(u) - H(u, v, x), u the
conditioning event, over the enumerated leaf configurations (at most ``max_configs``); ``method="monte_carlo"``
averages :func:`knowledge_terms` over n seeded examples, standard error std / sqrt(n).

Pair tables (both methods): T[a, b] = log p(z_alpha = a, z_beta = b, x_S), S the observed leaves; top-down
log P(a) + log P(b | a) + lambda_beta(b) + sum_{siblings s} msg_s(a), bottom-up a logsumexp over alpha's
child configurations c with lookup(c) = a and c_beta = b of sum_i lambda_i(c_i).  Where alpha draws its
children jointly (``ladder.productions``, the Random Hierarchy Model) the siblings are not independent given
alpha, so the pair table reads the productions: log P(a) + logsumexp over alpha's productions k with
rules[a, k, beta] = b of log probs[a, k] + lambda_beta(b) + sum_{siblings s} lambda_s(rules[a, k, s]); and the
messages lambda pass through such a level the same way (:func:`smaso._ladder_parts.topdown_log_messages`).
The pairwise statistics (P(a, b), the entropies) are exact from the children's marginal tables.

Shapes: per level l = 1..depth, pair tensors are ``(R_l,)`` indexed by the child region beta (its parent is
``ladder.parent_index(l)[beta]``); tables are ``(n, R_l, m_{l-1}, m_l)``.  Everything is float64.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from inference.sum_product import log_messages
from smaso import _ladder_parts
from teachers.emission import OneHotEmission, one_hot
from teachers.ladder import TOPDOWN, Ladder
from teachers.sampling import sample_ladder
from teachers.statistics import EventStatistics, exact_statistics

__all__ = ["DEFAULT_MAX_CONFIGS", "DEFAULT_SAMPLES", "ENTROPY_TOL", "format_conditions", "knowledge_conditions",
           "knowledge_terms"]

#: Largest number of leaf configurations under one region that ``method="exact"`` enumerates by default.
DEFAULT_MAX_CONFIGS = 2**16
#: Examples drawn by ``method="monte_carlo"`` when ``n`` is not given.
DEFAULT_SAMPLES = 10_000
#: Conditional entropies (nats) at or below this are treated as 0 when normalizing.
ENTROPY_TOL = 1e-12
# elements of the largest temporary per pass (float64): ~32 MiB
_CHUNK_ELEMENTS = 2**22
METHODS = ("exact", "monte_carlo")
CONDITIONS = ("focus", "broadness")


# ---------------------------------------------------------------------- validation
def _check_ladder(ladder: object) -> Ladder:
    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
    if not ladder.is_uniform():
        raise ValueError("ladder: Thm 2's conditions are measured here on uniform trees (one parent per region, "
                         "the same branching and events across a level)")
    return ladder


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return int(value)


# ---------------------------------------------------------------------- messages and pair tables
class _Params:
    """The ladder's tables as the pair tables read them: ``log_tables[l]`` ``(R_l, m_{l-1}, m_l)`` for l >= 1
    (top-down; empty bottom-up), ``lookup[l]`` ``(R_l, m_{l+1}^b_l)`` (bottom-up; empty top-down), ``branching``
    (of the uniform tree :func:`_check_ladder` admits)."""

    def __init__(self, ladder: Ladder) -> None:
        self.ladder = ladder
        self.branching = _ladder_parts.uniform_branching(ladder)
        self.log_tables: dict[int, torch.Tensor] = {}
        self.lookup: list[torch.Tensor] = []
        if ladder.mode == TOPDOWN:
            self.log_tables = {l: t.log() for l, t in enumerate(_ladder_parts.stacked_tables(ladder), 1)}
        else:
            self.lookup = list(_ladder_parts.stacked_lookups(ladder))


def _child_configs(lam_child: torch.Tensor, R: int, b: int) -> torch.Tensor:
    """Sum of children's log-messages for every child configuration: ``(n, R, mc^b)``."""
    n, _, mc = lam_child.shape
    lc = lam_child.reshape(n, R, b, mc)
    conf = lc[:, :, 0]
    for c in range(1, b):
        conf = (conf[:, :, :, None] + lc[:, :, c, None, :]).reshape(n, R, -1)
    return conf


def _scatter_logsumexp(values: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """out[..., j] = logsumexp of values[..., i] over i with index[..., i] = j (``-inf`` if none)."""
    shape = (*values.shape[:-1], size)
    mx = torch.full(shape, -torch.inf, dtype=values.dtype, device=values.device)
    mx = mx.scatter_reduce(-1, index, values, reduce="amax", include_self=True)
    mx_safe = torch.where(torch.isneginf(mx), 0.0, mx)
    e = (values - mx_safe.gather(-1, index)).exp()
    s = torch.zeros(shape, dtype=values.dtype, device=values.device).scatter_add_(-1, index, e)
    return s.log() + mx_safe


def _prior_lambdas(params: _Params) -> list[torch.Tensor]:
    """lambda with no leaf observed: ``(1, R_l, m_l)`` per level (top-down 0, bottom-up log P(z)).

    lambda of every level ``(n, R_l, m_l)`` comes from the leaf log-likelihoods ``(n, R_d, m_d)`` (0 = unobserved
    leaf) by :func:`inference.sum_product.log_messages`, the exact posterior's upward pass: top-down
    log p(x_obs below | z), bottom-up log p(x_obs below, z)."""
    lad = params.ladder
    return _messages(lad, torch.zeros(1, lad.num_regions[-1], lad.events[-1], dtype=torch.float64))


def _messages(lad: Ladder, ll: torch.Tensor) -> list[torch.Tensor]:
    """lambda of every level from the leaf log-likelihoods (:func:`_prior_lambdas`): the exact posterior's scaled
    upward pass, or, on a ladder with productions (which that pass does not take yet), the plain log-space one."""
    return log_messages(lad, ll) if lad.productions is None else _ladder_parts.topdown_log_messages(lad, ll)


def _others_sum(v: torch.Tensor, b: int) -> torch.Tensor:
    """``v`` ``(n, R * b, m)`` -> for each child, the sum over its siblings (not itself): same shape."""
    n, rb, m = v.shape
    w = v.reshape(n, rb // b, b, m)
    zero = torch.zeros_like(w[:, :, 0])
    return torch.stack([sum((w[:, :, s] for s in range(b) if s != c), zero) for c in range(b)], 2).reshape(n, rb, m)


def _pair_tables(params: _Params, stats: EventStatistics, lam_obs: list[torch.Tensor],
                 lam_sib: list[torch.Tensor], l: int) -> torch.Tensor:
    """log p(z_alpha = a, z_beta = b, x_S) for every child region beta of level ``l``: ``(n, R_l, m_{l-1}, m_l)``.

    beta's own message is ``lam_obs[l]``, its siblings' are ``lam_sib[l]`` (module docstring)."""
    lad = params.ladder
    n = lam_obs[l].shape[0]
    b, mp, mc = params.branching[l - 1], lad.events[l - 1], lad.events[l]
    R = lad.num_regions[l - 1]
    sib_lam = lam_sib[l].expand(n, -1, -1)
    joint = lad.productions[l - 1] if lad.productions is not None else None
    if joint is not None:
        return _production_pair_tables(joint, stats, lad, lam_obs[l], sib_lam, l)
    if lad.mode == TOPDOWN:
        log_t = params.log_tables[l]  # (R_l, mp, mc)
        msg = torch.logsumexp(log_t[None] + sib_lam[:, :, None, :], -1)  # (n, R_l, mp)
        log_pa = stats.marginals[l - 1][lad.parent_index(l)].log()  # (R_l, mp)
        return (log_pa[None, :, :, None] + log_t[None] + lam_obs[l][:, :, None, :]
                + _others_sum(msg, b)[:, :, :, None])
    obs = lam_obs[l].reshape(n, R, b, mc)
    sib = sib_lam.reshape(n, R, b, mc)
    codes = torch.arange(mc**b)
    same = _child_configs(lam_obs[l], R, b) if lam_sib is lam_obs else None  # every child observed
    out = []
    for c in range(b):
        if same is None:
            mixed = sib.clone()
            mixed[:, :, c] = obs[:, :, c]  # child c observed, its siblings as in lam_sib
            conf = _child_configs(mixed.reshape(n, R * b, mc), R, b)  # (n, R, mc^b)
        else:
            conf = same
        digit = (codes // mc ** (b - 1 - c)) % mc
        index = (params.lookup[l - 1] * mc + digit).expand(n, -1, -1)
        out.append(_scatter_logsumexp(conf, index, mp * mc).reshape(n, R, mp, mc))
    return torch.stack(out, 2).reshape(n, R * b, mp, mc)


def _production_pair_tables(joint: Any, stats: EventStatistics, lad: Ladder, obs: torch.Tensor, sib: torch.Tensor,
                            l: int) -> torch.Tensor:
    """:func:`_pair_tables` where the regions of level ``l - 1`` draw their children jointly (module docstring):
    ``(n, R_l, m_{l-1}, m_l)``, beta's message ``obs`` and its siblings' ``sib``, both ``(n, R_l, m_l)``."""
    R, mc = lad.num_regions[l - 1], lad.events[l]
    n, b = obs.shape[0], joint.arity
    rules, probs = joint.region_rules(R), joint.region_probs(R)  # (R, m, K, b), (R, m, K)
    where = (torch.arange(R)[:, None, None, None], torch.arange(b), rules)
    own = obs.reshape(n, R, b, mc)[(slice(None), *where)]  # (n, R, m, K, b): beta = child j's own message
    others = sib.reshape(n, R, b, mc)[(slice(None), *where)]
    # the siblings of child j at production k (a sum without j, not total - own: messages may be -inf)
    others = torch.stack([others[..., [s for s in range(b) if s != j]].sum(-1) for j in range(b)], -1)
    val = probs.log()[None, :, :, :, None] + own + others  # (n, R, m, K, b)
    # child j of production k has event rules[r, a, k, j]: logsumexp over the productions that give it event b
    out = _scatter_logsumexp(val.permute(0, 1, 4, 2, 3), rules.permute(0, 3, 1, 2).expand(n, -1, -1, -1, -1), mc)
    out = out.reshape(n, R * b, rules.shape[1], mc)  # (n, R_l, m_{l-1}, m_l), child r b + j
    log_pa = stats.marginals[l - 1][lad.parent_index(l)].log()  # (R_l, m_{l-1})
    return log_pa[None, :, :, None] + out


# ---------------------------------------------------------------------- per-example terms
def knowledge_terms(ladder: Ladder, x: torch.Tensor, z: torch.Tensor) -> list[dict[str, Any]]:
    """Per-example terms of the Monte-Carlo estimates of Thm 2's conditions, from exact posteriors: for every
    child region beta (parent alpha), ``"focus"`` log P(z_alpha | x_beta, z_beta) - log P(z_alpha | z_beta)
    (mean: I_focus) and ``"broadness"`` log P(z_beta | x_alpha, z_alpha) - log P(z_beta | z_alpha) (mean: I_broad).

    :param ladder: the ladder (any emission with a ``log_likelihood``).
    :param x: ``(N, R_d, dim)`` inputs (``LadderSample.inputs()``).
    :param z: ``(N, total_regions)`` the examples' events (``LadderSample.z``); must have positive
        probability jointly with x.
    :returns: ``[{"level": l, "focus": (N, R_l), "broadness": (N, R_l)} for l in 1..depth]``, float64.
    :raises ValueError: shapes, or an example that is impossible under the ladder.
    """
    lad = _check_ladder(ladder)
    lad.emission.check_input(x, "x")
    if not isinstance(z, torch.Tensor) or z.dim() != 2 or z.shape != (x.shape[0], lad.total_regions):
        shape = tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__
        raise ValueError(f"z: expected an ({x.shape[0]}, {lad.total_regions}) tensor of events, got {shape}")
    if z.is_floating_point() or z.dtype == torch.bool:
        raise ValueError(f"z: expected integer events, got dtype {z.dtype}")
    x, z = x.detach().cpu(), z.detach().cpu().long()
    params = _Params(lad)
    stats = exact_statistics(lad)
    lam_prior = _prior_lambdas(params)
    step = max(1, _CHUNK_ELEMENTS // max(1, _per_example_elements(lad)))
    parts: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(lad.depth + 1)]
    off = lad.level_offsets
    for s in range(0, x.shape[0], step):
        xc, zc = x[s: s + step], z[s: s + step]
        n = xc.shape[0]
        lam = _messages(lad, lad.emission.log_likelihood(xc).double())
        for l in range(1, lad.depth + 1):
            a = zc[:, off[l - 1]: off[l]][:, lad.parent_index(l)]  # (n, R_l) parent event of each child
            b = zc[:, off[l]: off[l + 1]]
            r = torch.arange(lad.num_regions[l])[None].expand(n, -1)
            log_j = _ladder_parts.at_level(stats.joints, l, "joints").log()[r, a, b]  # log P(a, b)
            log_pa = stats.marginals[l - 1][lad.parent_index(l)].log()[r, a]
            log_pb = stats.marginals[l].log()[r, b]
            ii = torch.arange(n)[:, None].expand(-1, lad.num_regions[l])
            tf = _pair_tables(params, stats, lam, lam_prior, l)  # focus: siblings unobserved
            focus = (tf[ii, r, a, b] - torch.logsumexp(tf, 2)[ii, r, b]) - (log_j - log_pb)
            tb = _pair_tables(params, stats, lam, lam, l)
            broad = (tb[ii, r, a, b] - torch.logsumexp(tb, 3)[ii, r, a]) - (log_j - log_pa)
            bad = ~(torch.isfinite(focus) & torch.isfinite(broad))
            if bad.any():
                i = int(bad.any(1).nonzero()[0, 0]) + s
                raise ValueError(f"x, z: example {i} has probability 0 under the ladder (events inconsistent "
                                 "with the tables or with x); its terms are undefined")
            parts[l].append((focus, broad))
    return [{"level": l, "focus": torch.cat([p[0] for p in parts[l]]), "broadness": torch.cat([p[1] for p in parts[l]])}
            for l in range(1, lad.depth + 1)]


def _per_example_elements(lad: Ladder) -> int:
    m, R = lad.events, lad.num_regions
    if lad.mode == TOPDOWN:
        return max(R[l] * m[l - 1] * m[l] for l in range(1, lad.depth + 1))
    b = _ladder_parts.uniform_branching(lad)
    return max(R[l] * m[l + 1] ** b[l] * max(2, b[l]) for l in range(lad.depth))


# ---------------------------------------------------------------------- exact enumeration
def _exact_level(params: _Params, stats: EventStatistics, lam_prior: list[torch.Tensor], l: int, condition: str,
                 max_configs: int) -> torch.Tensor:
    """Exact I per child region of level ``l`` ``(R_l,)`` for one-hot leaves, by enumerating the leaf
    configurations under the observed region (beta for focus, alpha for broadness)."""
    lad = params.ladder
    md = lad.events[-1]
    obs_level = l if condition == "focus" else l - 1
    L = lad.leaves_under(obs_level)
    total = md**L
    if total > max_configs:
        raise ValueError(f"max_configs: the exact {condition} of level {l} enumerates {md}^{L} = {total} leaf "
                         f"configurations under a region of level {obs_level}, more than max_configs = {max_configs}; "
                         "raise max_configs or use method='monte_carlo'")
    Rl, mp, mc = lad.num_regions[l], lad.events[l - 1], lad.events[l]
    step = max(1, _CHUNK_ELEMENTS // max(1, _per_example_elements(lad), Rl * mp * mc * 2))
    radix = md ** torch.arange(L - 1, -1, -1)
    h_joint = torch.zeros(Rl, dtype=torch.float64)  # H(a, b, x)
    h_ux = torch.zeros(Rl, dtype=torch.float64)  # H(u, x), u = conditioning event
    p_ab = torch.zeros(Rl, mp, mc, dtype=torch.float64)
    for s in range(0, total, step):
        k = torch.arange(s, min(total, s + step))
        leaf_events = (k[:, None] // radix) % md  # (K, L): config of the leaves under one region
        leaves = leaf_events.repeat(1, lad.num_regions[obs_level])  # every region of obs_level gets it
        ll = lad.emission.log_likelihood(one_hot(leaves, md, torch.float64))
        lam = _messages(lad, ll.double())
        sib = lam_prior if condition == "focus" else lam
        J = _pair_tables(params, stats, lam, sib, l).exp()  # (K, R_l, mp, mc)
        h_joint -= torch.special.xlogy(J, J).sum((0, 2, 3))
        u_x = J.sum(2) if condition == "focus" else J.sum(3)  # (K, R_l, m_u)
        h_ux -= torch.special.xlogy(u_x, u_x).sum((0, 2))
        p_ab += J.sum(0)
    p_u = p_ab.sum(1) if condition == "focus" else p_ab.sum(2)
    h_ab = -torch.special.xlogy(p_ab, p_ab).sum((1, 2))
    h_u = -torch.special.xlogy(p_u, p_u).sum(1)
    return h_ux + h_ab - h_u - h_joint


def _conditional_entropies(stats: EventStatistics, l: int) -> tuple[torch.Tensor, torch.Tensor]:
    """H(z_alpha | z_beta) and H(z_beta | z_alpha) per child region of level l, ``(R_l,)`` each (nats)."""
    j = _ladder_parts.at_level(stats.joints, l, "joints")
    h_ab = -torch.special.xlogy(j, j).sum((1, 2))
    pa, pb = j.sum(2), j.sum(1)
    h_a = -torch.special.xlogy(pa, pa).sum(1)
    h_b = -torch.special.xlogy(pb, pb).sum(1)
    return (h_ab - h_b).clamp_min(0.0), (h_ab - h_a).clamp_min(0.0)


def _normalized(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    return torch.where(h > ENTROPY_TOL, i / torch.where(h > ENTROPY_TOL, h, 1.0), 0.0)


# ---------------------------------------------------------------------- the public measurement
def knowledge_conditions(ladder: Ladder, *, method: str = "exact", n: int | None = None, seed: int = 0,
                         max_configs: int = DEFAULT_MAX_CONFIGS) -> list[dict]:
    """Focus and broadness of knowledge (Thm 2's conditions) of every parent/child region pair of the teacher.

    :param ladder: the ladder.
    :param method: ``"exact"`` (one-hot leaves; enumeration of leaf configurations) or ``"monte_carlo"``
        (any emission; ``n`` seeded examples and exact posteriors).
    :param n: Monte-Carlo examples (default :data:`DEFAULT_SAMPLES`); only for ``method="monte_carlo"``.
    :param seed: Monte-Carlo sample seed (:func:`teachers.sampling.sample_ladder`; no global RNG is used).
    :param max_configs: exact: the most leaf configurations enumerated under one region.
    :returns: one dict per level l = 1..depth with

        - ``"level"``, ``"method"``, ``"parent"`` ``(R_l,)`` (index of alpha in level l-1), ``"n"`` (None if exact);
        - ``"focus"``, ``"broadness"`` ``(R_l,)``: I(x_beta; z_alpha | z_beta), I(x_alpha; z_beta | z_alpha) (nats);
        - ``"H_parent_given_child"`` = H(z_alpha | z_beta), ``"H_child_given_parent"`` = H(z_beta | z_alpha);
        - ``"focus_normalized"`` = I_focus / H(z_alpha | z_beta), ``"broadness_normalized"`` =
          I_broad / H(z_beta | z_alpha) (0 where the entropy is 0; module docstring);
        - summaries ``"<key>_max"``, ``"<key>_mean"`` over the pairs (floats) for the four keys above;
        - Monte Carlo: ``"<key>_stderr"`` ``(R_l,)`` and ``"<key>_max_stderr"`` (that of the argmax pair),
          ``"<key>_mean_stderr"`` (of the per-example mean over the pairs), for the four keys.
    :raises TypeError: ``ladder`` is not a Ladder.
    :raises ValueError: a bad ``method``, ``n``, ``seed`` or ``max_configs``; ``method="exact"`` on leaves
        that are not one-hot; an enumeration larger than ``max_configs``.
    """
    lad = _check_ladder(ladder)
    if method not in METHODS:
        raise ValueError(f"method: expected 'exact' or 'monte_carlo', got {method!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer, got {seed!r}")
    stats = exact_statistics(lad)
    rows = []
    if method == "exact":
        if n is not None:
            raise ValueError("n: only for method='monte_carlo' (the exact method draws no sample)")
        max_configs = _positive_int(max_configs, "max_configs")
        if not isinstance(lad.emission, OneHotEmission):
            raise ValueError(f"method: 'exact' needs one-hot leaves (x a function of the leaf events); this "
                             f"ladder's emission is {lad.emission.kind!r}: use method='monte_carlo'")
        params = _Params(lad)
        lam_prior = _prior_lambdas(params)
        for l in range(1, lad.depth + 1):
            vals = {c: _exact_level(params, stats, lam_prior, l, c, max_configs) for c in CONDITIONS}
            rows.append(_row(lad, stats, l, "exact", None, vals, None))
        return rows
    n = DEFAULT_SAMPLES if n is None else _positive_int(n, "n")
    sample = sample_ladder(lad, n, seed=int(seed))
    terms = knowledge_terms(lad, sample.inputs(dtype=torch.float64), sample.z)
    for l, t in enumerate(terms, start=1):
        rows.append(_row(lad, stats, l, "monte_carlo", n, {c: t[c].mean(0) for c in CONDITIONS}, t))
    return rows


def _row(lad: Ladder, stats: EventStatistics, l: int, method: str, n: int | None, vals: dict,
         terms: dict | None) -> dict:
    h_pc, h_cp = _conditional_entropies(stats, l)
    row = {"level": l, "method": method, "n": n, "parent": lad.parent_index(l), "focus": vals["focus"],
           "broadness": vals["broadness"], "H_parent_given_child": h_pc, "H_child_given_parent": h_cp,
           "focus_normalized": _normalized(vals["focus"], h_pc),
           "broadness_normalized": _normalized(vals["broadness"], h_cp)}
    scale = {"focus": h_pc, "broadness": h_cp}
    for key in ("focus", "broadness", "focus_normalized", "broadness_normalized"):
        v = row[key]
        top = int(v.argmax())
        row[f"{key}_max"], row[f"{key}_mean"] = float(v[top]), float(v.mean())
        if terms is not None:
            base = key.split("_")[0]
            t = terms[base]
            if key != base:  # normalized: each pair's terms divided by its (exact) entropy
                t = _normalized(t, scale[base])
            se = _stderr(t)
            row[f"{key}_stderr"] = se
            row[f"{key}_max_stderr"] = float(se[top])
            row[f"{key}_mean_stderr"] = float(_stderr(t.mean(1, keepdim=True))[0])
    return row


def _stderr(t: torch.Tensor) -> torch.Tensor:
    """std of the per-example terms / sqrt(N) per column ``(N, R)`` -> ``(R,)`` (NaN for N = 1)."""
    N = t.shape[0]
    if N < 2:
        return torch.full(t.shape[1:], math.nan, dtype=torch.float64)
    return t.std(0) / math.sqrt(N)


def format_conditions(rows: list[dict]) -> str:
    """A table of :func:`knowledge_conditions`' rows: per level, the max and mean over the pairs of
    I_focus and I_broad (nats) and of the normalized broadness, with standard errors for Monte Carlo."""
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "level" in r for r in rows):
        raise TypeError("rows: expected the list of dicts returned by knowledge_conditions")
    mc = any(r.get("method") == "monte_carlo" for r in rows)

    def cell(r: dict, key: str) -> str:
        s = f"{r[key]:.3g}"
        if mc and f"{key}_stderr" in r:
            s += f"±{r[f'{key}_stderr']:.1g}"
        return s

    head = (f"{'level':>5} {'pairs':>5}  {'focus max':>16} {'focus mean':>16}  {'broad max':>16} {'broad mean':>16}"
            f"  {'broad/H max':>16} {'broad/H mean':>16}")
    lines = [("Thm 2's conditions on the teacher (nats; I(x_b; z_a | z_b), I(x_a; z_b | z_a); "
              + (f"Monte Carlo, n = {rows[0]['n']}, ± one standard error)" if mc and rows else "exact)")), head]
    for r in rows:
        vals = [cell(r, "focus_max"), cell(r, "focus_mean"), cell(r, "broadness_max"), cell(r, "broadness_mean"),
                cell(r, "broadness_normalized_max"), cell(r, "broadness_normalized_mean")]
        lines.append(f"{r['level']:>5} {len(r['focus']):>5}  {vals[0]:>16} {vals[1]:>16}  {vals[2]:>16} "
                     f"{vals[3]:>16}  {vals[4]:>16} {vals[5]:>16}")
    return "\n".join(lines)
