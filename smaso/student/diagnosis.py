"""Thm 2's diagnosis: the reformulation's errors against measured statistics, and the size of each condition.

:func:`compare_statistics_to_theory` reports per level the relative Frobenius error
||pred - meas||_F / ||meas||_F of

- ``F``: the activations Fbar (after BN when present), over the events that occur;
- ``G``: the P-weighted gated gradients G~;
- ``dW``: the weight updates Delta W into that level (every edge),

both for the full recursion (``propagated``) and for one step from the measured neighbours
(``local``) of :func:`~smaso.student.reformulation.reformulate`, with the one-step errors split into one
part per condition, and :func:`diagnose` measures Thm 2's conditions from the data, each the exact size of
the error term that condition's failure introduces (``decorrelation_fwd``, ``decorrelation_bwd``,
``decorrelation_dW``, ``focus``, ``broadness``; their definitions and the split of the one-step errors:
``docs/theory.md`` §1.5), focus and broadness over every parent-child edge of the level (on a region graph: for
*each* parent of a child).  On a fully informative ladder with one-hot leaves all of these are ~1e-15 (Thm 3),
on a tree or any region graph.  With jackknife replicates every number gets its noise floor
(:mod:`smaso.student.noise`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from smaso.student.frequency import FrequencyStatistics
from smaso.student.network import LadderStudent
from smaso.student.noise import ROUNDOFF, WITHIN_NOISE, norm_floor
from smaso.student.reformulation import eq7_signs, reformulate
from teachers.statistics import EventStatistics, exact_statistics, level_edge_index

__all__ = ["CONTRIBUTIONS", "compare_statistics_to_theory", "diagnose"]


# A measured number is ||v|| / ||m|| over rows ``mask``: ``_Term(v, m, mask)``.
_Term = tuple


def _norm(t: torch.Tensor, mask) -> float:
    return float((t if mask is None else t[mask]).norm())


def _value(term: _Term) -> float:
    v, m, mask = term
    num, den = _norm(v, mask), _norm(m, mask)
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return num / den


def _condition_terms(stats: FrequencyStatistics, bn_before: Sequence[bool] | None = None,
                     P: EventStatistics | None = None) -> list[dict[str, _Term]]:
    """Thm 2's conditions per level as difference vectors, per edge for focus and broadness (module docstring).

    :param bn_before: per level, whether BN sits between the linear map and the gate there (then the
        gate acts on F = E[BN(u) | z] and the forward decorrelation compares D o F with Fbar; the backward
        one would need E[g_raw | z], which is not accumulated, and is left out).
    :param P: the event statistics of the focus and broadness terms (default: the sample's own, ``stats.P``).
    """
    lad = stats.ladder
    d = lad.depth
    dt = torch.float64
    P_down = (stats.P if P is None else P).P_down
    G_tilde = [None if t is None else t.to(dt) for t in stats.G_tilde]
    m = {k: [None if t is None else t.to(dt) for t in stats.means[k]] for k in ("Fbar", "F", "D", "U", "G", "Gf", "Dp")}
    edges = [tuple(t.cpu() for t in level_edge_index(lad, l)) for l in range(d)]
    seen = [c > 0 for c in stats.counts]  # (padding events are never seen)
    out = []
    for l in range(d + 1):
        row: dict[str, _Term] = {}
        if l < d:
            if bn_before is not None and bn_before[l]:
                row["decorrelation_fwd"] = (m["D"][l] * m["F"][l] - m["Fbar"][l], m["Fbar"][l], seen[l])
            else:
                row["decorrelation_fwd"] = (m["D"][l] * m["U"][l] - m["F"][l], m["F"][l], seen[l])
                row["decorrelation_bwd"] = (m["Dp"][l] * m["Gf"][l] - m["G"][l], m["G"][l], seen[l])
            # Delta W = E[f_k g_j] = sum_a P(a) E[f_k | a] E[g_j | a] needs f_k, g_j uncorrelated given
            # z_alpha (the step from Eq 63 to Eq 64): E[fbar_child | z_parent]^T G~_parent against Delta W, per edge
            fcg = torch.einsum("eak,eaj->ekj", stats.Fc[l + 1].to(dt), G_tilde[l].index_select(0, edges[l][0]))
            dW = stats.dW[l].to(dt)
            row["decorrelation_dW"] = (fcg - dW, dW, None)
        if l >= 1:
            par, chi = edges[l - 1]
            Pd, fc = P_down[l].to(dt), stats.Fc[l].to(dt)
            row["focus"] = (torch.einsum("eab,ebk->eak", Pd, m["Fbar"][l].index_select(0, chi)) - fc, fc,
                            seen[l - 1].index_select(0, par))
            gp = stats.Gp_tilde[l].to(dt)
            row["broadness"] = (torch.einsum("eab,eaj->ebj", Pd, G_tilde[l - 1].index_select(0, par)) - gp, gp,
                                seen[l].index_select(0, chi))
        out.append(row)
    return out


def _bn_before(student: LadderStudent) -> list[bool]:
    return [getattr(student, "bn_placement", None) == "before" and student.bn_params(l) is not None
            for l in range(student.ladder.depth)]


def diagnose(stats: FrequencyStatistics, student: LadderStudent | None = None) -> list[dict]:
    """Thm 2's conditions measured from the data, per level: the relative size of each condition's error term
    (``docs/theory.md`` §1.5).

    :param student: the student, needed only when its BN sits before the gate (``batch_norm="before"``).
    """
    terms = _condition_terms(stats, None if student is None else _bn_before(student))
    return [{"level": l, **{k: _value(t) for k, t in row.items()}} for l, row in enumerate(terms)]


#: The one-step error of each quantity and the two exact parts it splits into (module docstring).
CONTRIBUTIONS = {"F_local": ("focus", "decorrelation"), "G_local": ("broadness", "decorrelation"),
                 "dW_local": ("focus", "decorrelation")}


def _comparison_terms(student: LadderStudent, stats: FrequencyStatistics, P, loss: str) -> tuple[list, dict]:
    """Every reported number of :func:`compare_statistics_to_theory` as a :data:`_Term`, per level."""
    lad = stats.ladder
    d = lad.depth
    dt = torch.float64
    preds = {k: reformulate(student, P, stats, propagate=k == "propagated", loss=loss)
             for k in ("propagated", "local")}
    local = preds["local"]
    conditions = _condition_terms(stats, _bn_before(student), P)
    G_meas = [None if t is None else t.to(dt) for t in stats.G_tilde]
    p = [t.to(dt) for t in stats.p]
    levels = []
    for l in range(d):
        seen = stats.counts[l] > 0
        Fm, dWm = stats.Fbar[l].to(dt), stats.dW[l].to(dt)
        D, Dp = stats.D[l].to(dt), stats.Dp[l].to(dt)
        row: dict[str, _Term] = {}
        for kind, pr in preds.items():
            row[f"F_{kind}"] = (pr.Fbar[l] - Fm, Fm, seen)
            row[f"G_{kind}"] = (pr.G_tilde[l] - G_meas[l], G_meas[l], seen)
            row[f"dW_{kind}"] = (pr.dW[l] - dWm, dWm, None)
        # the one-step errors split exactly into a part per condition, pred - meas = a + b (docs/theory.md §1.5)
        if student.bn_params(l) is None:
            row["F_local_focus"] = (D * (local.U[l] - stats.U[l].to(dt)), Fm, seen)
            row["F_local_decorrelation"] = (conditions[l]["decorrelation_fwd"][0], Fm, seen)
        if l == 0 or student.bn_params(l) is None:
            gf_tilde = stats.Gf[l].to(dt) * p[l][..., None]
            row["G_local_broadness"] = (local.G_tilde[l] - Dp * gf_tilde, G_meas[l], seen)
            row["G_local_decorrelation"] = (Dp * gf_tilde - G_meas[l], G_meas[l], seen)
        par = student.edge_index(l)[0].cpu()
        row["dW_local_focus"] = (torch.einsum("eak,eaj->ekj", conditions[l + 1]["focus"][0],
                                              G_meas[l].index_select(0, par)), dWm, None)
        row["dW_local_decorrelation"] = (conditions[l]["decorrelation_dW"][0], dWm, None)
        row.update(conditions[l])
        levels.append(row)
    return levels, conditions[d]


def compare_statistics_to_theory(student: LadderStudent, stats: FrequencyStatistics, *, P_source: str = "empirical",
                                 loss: str = "squared", replicates: Sequence[FrequencyStatistics] | None = None
                                 ) -> dict:
    """Relative errors of the reformulation against measured statistics, per level, plus the diagnosis.

    :param replicates: leave-one-out statistics of a jackknife
        (:meth:`~smaso.student.noise.ReplicateAccumulator.leave_one_out`); with them every number
        ``key`` gets ``key_floor``, its noise floor (:mod:`smaso.student.noise`), and each row lists
        in ``within_noise`` the keys at most :data:`~smaso.student.noise.WITHIN_NOISE` times their floor.
    :returns: ``levels`` (per level l < d: ``F_/G_/dW_propagated`` and ``_local``, the parts of each
        one-step error, ``{q}_local_{part}`` for the parts of :data:`CONTRIBUTIONS` (the norm of each part over
        the same denominator, so the one-step error is at most their sum; absent for F and G~ at a BN level,
        where Eq 12's normalization makes the split non-additive) and Thm 2's conditions of :func:`diagnose`),
        ``leaves`` (focus and broadness of the leaf level), ``loss``, ``P_source``, ``num_examples`` and, with
        replicates, ``noise_groups``.
    :raises ValueError: an unknown ``P_source``.
    """
    if P_source not in ("empirical", "exact"):
        raise ValueError(f"P_source: expected 'empirical' or 'exact', got {P_source!r}")
    exact = exact_statistics(stats.ladder) if P_source == "exact" else None
    lad = stats.ladder
    masks = stats.event_mask
    levels_t, leaves_t = _comparison_terms(student, stats, stats.P if exact is None else exact, loss)
    levels, leaves = [], {"level": lad.depth, **{k: _value(t) for k, t in leaves_t.items()}}
    for l, terms in enumerate(levels_t):
        levels.append({"level": l, "regions": lad.num_regions[l], "events": lad.events[l],
                       "edges": student.num_edges(l), "nodes": student.widths[l],
                       "empty_events": int(((stats.counts[l] == 0) & masks[l]).sum()),
                       **{k: _value(t) for k, t in terms.items()}})
    out = {"levels": levels, "leaves": leaves, "loss": stats.loss, "P_source": P_source,
           "num_examples": stats.num_examples}
    if student.widths[0] == lad.events[0]:
        # g_j(y = j) > 0 > g_j(y != j) per class (Eq 7): guaranteed for softmax cross-entropy, not for the squared
        # loss (it needs E[f_j | y = j] < 1 and E[f_j | y != j] > 0; docs/theory.md §1.0), so measured for both
        e7 = eq7_signs(stats)
        out["eq7"] = {"loss": loss, "holds": e7["holds"], "worst_margin": e7["worst_margin"],
                      "worst_class": int(e7["worst_class"]),
                      "margin": [None if math.isnan(v) else float(v) for v in e7["margin"].tolist()]}  # None: unseen
    if replicates:
        reps = [_comparison_terms(student, st, st.P if exact is None else exact, loss) for st in replicates]
        has_bn = any(student.bn_params(l) is not None for l in range(lad.depth))
        for l, (row, terms) in enumerate([*zip(levels, levels_t, strict=True), (leaves, leaves_t)]):
            rep_terms = [r[0][l] if l < lad.depth else r[1] for r in reps]
            for k, (_, m, mask) in terms.items():
                row[f"{k}_floor"] = norm_floor([r[k][0] for r in rep_terms], _norm(m, mask), mask)
            # predictions through Eq 12 renormalize each replicate, so their floors are over-estimates
            # (smaso.student.noise): never call such a number "within noise"
            inflated = {k for k in terms if has_bn and l < lad.depth and (k.endswith("_propagated") or (
                student.bn_params(l) is not None and k in ("F_local", "G_local")))}
            row["within_noise"] = [k for k in terms if k not in inflated
                                   and row[k] <= WITHIN_NOISE * row[f"{k}_floor"] + ROUNDOFF]
            if inflated:
                row["floor_over_estimated"] = sorted(inflated)
        out["noise_groups"] = len(replicates)
    return out
