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
(:mod:`smaso.student.noise`): the K replicates stacked along a leading axis
(:func:`~smaso.student.noise.stack_statistics`) and reformulated, and their terms computed, in one batched call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from smaso._ladder_parts import at_level
from smaso.student.frequency import FrequencyStatistics, PerEventMeans
from smaso.student.network import LadderStudent
from smaso.student.noise import ROUNDOFF, WITHIN_NOISE, StackedStatistics, norm_floor, stack_statistics
from smaso.student.reformulation import eq7_signs, reformulate, statistics_device
from teachers.statistics import EventStatistics, exact_statistics, level_edge_index

__all__ = ["CONTRIBUTIONS", "compare_statistics_to_theory", "dead_nodes", "degenerate", "diagnose",
           "nonfinite_statistics"]


class _Term(NamedTuple):
    """A reported number ``||v[mask]|| / ||m[mask]||``: the difference vector ``v``, the measured statistic ``m``
    it is relative to, the rows ``mask`` that enter both norms (None: all), and ``what`` names ``m`` (``"level 2:
    G~"``) for the reason given when the number is undefined."""

    v: torch.Tensor
    m: torch.Tensor
    mask: torch.Tensor | None
    what: str


def _norm(t: torch.Tensor, mask: torch.Tensor | None) -> float:
    return float((t if mask is None else t[mask]).norm())


def dead_nodes(stats: PerEventMeans) -> list[torch.Tensor]:
    """The nodes whose gate is off on every row measured: ``(R_l, n_l)`` bool per level ``l = 0..d-1``.

    A node is dead when E[s | z] = 0 at every event seen (s its gate, ``D``): for ReLU-type gates, s(u) = 1[u > 0]
    was 0 on each of the ``stats.num_examples`` rows, so the node's output and its gradient are 0 there.  (The
    linear output level and gates that are never exactly 0, such as SiLU's, have no dead nodes.)
    """
    out = []
    for cnt, d in zip(stats.counts, stats.means["D"], strict=False):
        if d is None:
            continue
        seen = (cnt > 0)[..., None]
        out.append(((d == 0) | ~seen).all(-2) & seen.any(-2))
    return out


def nonfinite_statistics(stats: FrequencyStatistics) -> list[str]:
    """The measured statistics holding a NaN or an infinity, named ``"G at level 2"`` (and ``"loss"``): a diverged
    run, never a degenerate one (whose statistics are finite and some of whose ratios are 0/0)."""
    named = [(f"{k} at level {l}", t) for k, ts in stats.means.items() for l, t in enumerate(ts)]
    named += [(f"{k} at level {l}", t) for k in ("Fc", "Gp_tilde", "dW") for l, t in enumerate(getattr(stats, k))]
    present = [(name, t) for name, t in named if t is not None]
    finite = torch.stack([torch.isfinite(t).all().cpu() for _, t in present]).tolist()  # one read, not one per tensor
    return [name for (name, _), ok in zip(present, finite, strict=True) if not ok] + \
        ([] if math.isfinite(stats.loss) else ["loss"])


def _liveness(stats: PerEventMeans) -> list[str]:
    """Each level with dead nodes, in words: what explains a number that is 0/0."""
    out = []
    for l, dead in enumerate(dead_nodes(stats)):
        k, total = int(dead.sum()), dead.numel()
        if k:
            out.append(f"level {l}: {'every node' if k == total else f'{k} of {total} nodes'} dead (gate off on all "
                       f"{stats.num_examples} rows)")
    return out


#: Why a number is undefined, by the state of its terms (``_measure``).
_WHY = {"nonfinite": "not finite", "unseen": "no event seen", "zero": "= 0 at every event seen",
        "zero_pred": "= 0 at every event seen while its prediction is not"}


def _measure(term: _Term) -> tuple[float, str | None]:
    """``(||v|| / ||m||, None)``, or ``(NaN, reason)`` where that ratio is 0/0, infinite or not finite."""
    num, den = _norm(term.v, term.mask), _norm(term.m, term.mask)
    why = ("nonfinite" if not (math.isfinite(num) and math.isfinite(den)) else
           "unseen" if term.mask is not None and not bool(term.mask.any()) else
           None if den > 0 else "zero" if num == 0 else "zero_pred")
    return (num / den, None) if why is None else (math.nan, f"{term.what} {_WHY[why]}")


def _measure_row(terms: dict[str, _Term]) -> dict:
    """The numbers of one row, with ``undefined`` (key -> reason) for those that are NaN."""
    row: dict[str, Any] = {}
    undefined: dict[str, str] = {}
    for k, t in terms.items():
        row[k], why = _measure(t)
        if why is not None:
            undefined[k] = why
    if undefined:
        row["undefined"] = undefined
    return row


def degenerate(levels: Sequence[dict], leaves: dict | None = None, causes: Sequence[str] = ()) -> list[str]:
    """Why some numbers of ``levels`` and ``leaves`` (rows of :func:`compare_statistics_to_theory` or
    :func:`diagnose`) are undefined, in words: empty when every number is defined.  Otherwise ``causes`` (such as
    the dead levels) first, then the undefined statistics grouped by reason (``"level 1 Fbar, level 1 G~ = 0 at
    every event seen"``).  A comparison with any is degenerate: its NaNs say nothing about the reformulation
    (a dead level's 0/0 is not an exact prediction)."""
    grouped: dict[str, dict[str, None]] = {}
    for row in [*levels, *([] if leaves is None else [leaves])]:
        for why in row.get("undefined", {}).values():
            what, reason = next((why[: -len(r) - 1], r) for r in _WHY.values() if why.endswith(r))
            grouped.setdefault(reason, {})[what] = None
    if not grouped:
        return []
    return [*causes, *(f"{', '.join(whats)} {reason}" for reason, whats in grouped.items())]


def _condition_terms(stats: FrequencyStatistics, bn_before: Sequence[bool] | None = None,
                     P: EventStatistics | None = None, dtype: torch.dtype | None = None) -> list[dict[str, _Term]]:
    """Thm 2's conditions per level as difference vectors, per edge for focus and broadness (module docstring).
    Statistics stacked along a leading replicate axis (:func:`~smaso.student.noise.stack_statistics`) give every
    vector and mask that axis too.

    :param bn_before: per level, whether BN sits between the linear map and the gate there (then the
        gate acts on F = E[BN(u) | z] and the forward decorrelation compares D o F with Fbar; the backward
        one would need E[g_raw | z], which is not accumulated, and is left out).
    :param P: the event statistics of the focus and broadness terms (default: the sample's own, ``stats.P``).
    :param dtype: the terms' dtype (default float64), on the statistics' device (:func:`statistics_device`).
    """
    lad = stats.ladder
    d = lad.depth
    dt, dev = torch.float64 if dtype is None else dtype, statistics_device(stats)
    P_down = [None if t is None else t.to(dev) for t in (stats.P if P is None else P).P_down]
    G_tilde = [None if t is None else t.to(dt) for t in stats.G_tilde]
    m = {k: [None if t is None else t.to(dt) for t in stats.means[k]] for k in ("Fbar", "F", "D", "U", "G", "Gf", "Dp")}
    edges = [tuple(t.to(dev) for t in level_edge_index(lad, l)) for l in range(d)]
    seen = [c > 0 for c in stats.counts]  # (padding events are never seen)

    def mean(k: str, l: int) -> torch.Tensor:
        """``m[k][l]``, defined at the levels it is read at (the leaves' are None but Fbar's)."""
        return at_level(m[k], l, k)

    out = []
    for l in range(d + 1):
        row: dict[str, _Term] = {}
        if l < d:
            if bn_before is not None and bn_before[l]:
                Fbar = mean("Fbar", l)
                row["decorrelation_fwd"] = _Term(mean("D", l) * mean("F", l) - Fbar, Fbar, seen[l],
                                                 f"level {l} Fbar")
            else:
                F, G = mean("F", l), mean("G", l)
                row["decorrelation_fwd"] = _Term(mean("D", l) * mean("U", l) - F, F, seen[l],
                                                 f"level {l} F")
                row["decorrelation_bwd"] = _Term(mean("Dp", l) * mean("Gf", l) - G, G, seen[l],
                                                 f"level {l} G")
            # Delta W = E[f_k g_j] = sum_a P(a) E[f_k | a] E[g_j | a] needs f_k, g_j uncorrelated given
            # z_alpha (the step from Eq 63 to Eq 64): E[fbar_child | z_parent]^T G~_parent against Delta W, per edge
            fcg = torch.einsum("...eak,...eaj->...ekj", at_level(stats.Fc, l + 1, "Fc").to(dt),
                               at_level(G_tilde, l, "G~").index_select(-3, edges[l][0]))
            dW = stats.dW[l].to(dt)
            row["decorrelation_dW"] = _Term(fcg - dW, dW, None, f"level {l} Delta W")
        if l >= 1:
            par, chi = edges[l - 1]
            Pd = at_level(P_down, l, "P_down").to(dt)
            fc = at_level(stats.Fc, l, "Fc").to(dt)
            row["focus"] = _Term(torch.einsum("...eab,...ebk->...eak", Pd, mean("Fbar", l).index_select(-3, chi)) - fc,
                                 fc, seen[l - 1].index_select(-2, par),
                                 f"level {l} E[fbar | z_parent]")
            gp = at_level(stats.Gp_tilde, l, "Gp_tilde").to(dt)
            G_par = at_level(G_tilde, l - 1, "G~").index_select(-3, par)
            row["broadness"] = _Term(torch.einsum("...eab,...eaj->...ebj", Pd, G_par) - gp,
                                     gp, seen[l].index_select(-2, chi),
                                     f"level {l} G~ of the parents")
        out.append(row)
    return out


def _bn_before(student: LadderStudent) -> list[bool]:
    return [getattr(student, "bn_placement", None) == "before" and student.bn_params(l) is not None
            for l in range(student.ladder.depth)]


def diagnose(stats: FrequencyStatistics, student: LadderStudent | None = None, *,
             dtype: torch.dtype | None = None) -> list[dict]:
    """Thm 2's conditions measured from the data, per level: the relative size of each condition's error term
    (``docs/theory.md`` §1.5).

    :param student: the student, needed only when its BN sits before the gate (``batch_norm="before"``).
    :param dtype: the dtype the terms are computed in (default float64), on the statistics' device.
    """
    terms = _condition_terms(stats, None if student is None else _bn_before(student), dtype=dtype)
    return [{"level": l, **_measure_row(row)} for l, row in enumerate(terms)]


#: The one-step error of each quantity and the two exact parts it splits into (module docstring).
CONTRIBUTIONS = {"F_local": ("focus", "decorrelation"), "G_local": ("broadness", "decorrelation"),
                 "dW_local": ("focus", "decorrelation")}


def _comparison_terms(student: LadderStudent, stats: FrequencyStatistics, P: Any, loss: str,
                      dtype: torch.dtype | None = None) -> tuple[list, dict]:
    """Every reported number of :func:`compare_statistics_to_theory` as a :data:`_Term`, per level (of each
    replicate, along a leading axis, for stacked statistics: :func:`~smaso.student.noise.stack_statistics`), in
    ``dtype`` (default float64) on the statistics' device."""
    lad = stats.ladder
    d = lad.depth
    dt = torch.float64 if dtype is None else dtype
    preds = {k: reformulate(student, P, stats, propagate=k == "propagated", loss=loss, dtype=dt)
             for k in ("propagated", "local")}
    local = preds["local"]
    conditions = _condition_terms(stats, _bn_before(student), P, dt)
    G_meas = [None if t is None else t.to(dt) for t in stats.G_tilde]
    p = [t.to(dt) for t in stats.p]
    levels = []
    for l in range(d):
        seen = stats.counts[l] > 0
        Fm, dWm = stats.Fbar[l].to(dt), stats.dW[l].to(dt)
        Gm = at_level(G_meas, l, "G~")
        D, Dp = stats.D[l].to(dt), stats.Dp[l].to(dt)
        row: dict[str, _Term] = {}
        what = {"F": f"level {l} Fbar", "G": f"level {l} G~", "dW": f"level {l} Delta W"}
        for kind, pr in preds.items():
            row[f"F_{kind}"] = _Term(pr.Fbar[l] - Fm, Fm, seen, what["F"])
            row[f"G_{kind}"] = _Term(pr.G_tilde[l] - Gm, Gm, seen, what["G"])
            row[f"dW_{kind}"] = _Term(pr.dW[l] - dWm, dWm, None, what["dW"])
        # the one-step errors split exactly into a part per condition, pred - meas = a + b (docs/theory.md §1.5)
        if student.bn_params(l) is None:
            row["F_local_focus"] = _Term(D * (local.U[l] - stats.U[l].to(dt)), Fm, seen, what["F"])
            row["F_local_decorrelation"] = _Term(conditions[l]["decorrelation_fwd"].v, Fm, seen, what["F"])
        if l == 0 or student.bn_params(l) is None:
            gf_tilde = stats.Gf[l].to(dt) * p[l][..., None]
            row["G_local_broadness"] = _Term(local.G_tilde[l] - Dp * gf_tilde, Gm, seen, what["G"])
            row["G_local_decorrelation"] = _Term(Dp * gf_tilde - Gm, Gm, seen, what["G"])
        par = student.edge_index(l)[0].to(Gm.device)
        row["dW_local_focus"] = _Term(torch.einsum("...eak,...eaj->...ekj", conditions[l + 1]["focus"].v,
                                                   Gm.index_select(-3, par)), dWm, None, what["dW"])
        row["dW_local_decorrelation"] = _Term(conditions[l]["decorrelation_dW"].v, dWm, None, what["dW"])
        row.update(conditions[l])
        levels.append(row)
    return levels, conditions[d]


def compare_statistics_to_theory(student: LadderStudent, stats: FrequencyStatistics, *, P_source: str = "empirical",
                                 loss: str = "squared",
                                 replicates: Sequence[FrequencyStatistics] | StackedStatistics | None = None,
                                 dtype: torch.dtype | None = None) -> dict:
    """Relative errors of the reformulation against measured statistics, per level, plus the diagnosis.

    :param replicates: leave-one-out statistics of a jackknife
        (:meth:`~smaso.student.noise.ReplicateAccumulator.leave_one_out`), or the same already stacked
        (:func:`~smaso.student.noise.stack_statistics`); with them every number
        ``key`` gets ``key_floor``, its noise floor (:mod:`smaso.student.noise`), and each row lists
        in ``within_noise`` the keys at most :data:`~smaso.student.noise.WITHIN_NOISE` times their floor.
    :returns: ``levels`` (per level l < d: ``F_/G_/dW_propagated`` and ``_local``, the parts of each
        one-step error, ``{q}_local_{part}`` for the parts of :data:`CONTRIBUTIONS` (the norm of each part over
        the same denominator, so the one-step error is at most their sum; absent for F and G~ at a BN level,
        where Eq 12's normalization makes the split non-additive) and Thm 2's conditions of :func:`diagnose`),
        ``leaves`` (focus and broadness of the leaf level), ``loss``, ``P_source``, ``num_examples`` and, with
        replicates, ``noise_groups``.
    :param dtype: the dtype the reformulation and the terms are computed in (default float64), on the statistics'
        device (:func:`~smaso.student.reformulation.statistics_device`); the numbers reported are floats.
    :raises ValueError: an unknown ``P_source``.
    """
    if P_source not in ("empirical", "exact"):
        raise ValueError(f"P_source: expected 'empirical' or 'exact', got {P_source!r}")
    exact = exact_statistics(stats.ladder) if P_source == "exact" else None
    lad = stats.ladder
    masks = stats.event_mask
    levels_t, leaves_t = _comparison_terms(student, stats, stats.P if exact is None else exact, loss, dtype)
    levels, leaves = [], {"level": lad.depth, **_measure_row(leaves_t)}
    dead = dead_nodes(stats)
    for l, terms in enumerate(levels_t):
        levels.append({"level": l, "regions": lad.num_regions[l], "events": lad.events[l],
                       "edges": student.num_edges(l), "nodes": student.widths[l],
                       "empty_events": int(((stats.counts[l] == 0) & masks[l]).sum()),
                       "dead_nodes": int(dead[l].sum()), **_measure_row(terms)})
    out = {"levels": levels, "leaves": leaves, "loss": stats.loss, "P_source": P_source,
           "num_examples": stats.num_examples, "degenerate": degenerate(levels, leaves, _liveness(stats))}
    if student.widths[0] == lad.events[0]:
        # g_j(y = j) > 0 > g_j(y != j) per class (Eq 7): guaranteed for softmax cross-entropy, not for the squared
        # loss (it needs E[f_j | y = j] < 1 and E[f_j | y != j] > 0; docs/theory.md §1.0), so measured for both
        e7 = eq7_signs(stats)
        out["eq7"] = {"loss": loss, "holds": e7["holds"], "worst_margin": e7["worst_margin"],
                      "worst_class": int(e7["worst_class"]),
                      "margin": [None if math.isnan(v) else float(v) for v in e7["margin"].tolist()]}  # None: unseen
    if isinstance(replicates, StackedStatistics) or replicates:
        # every replicate in one batched reformulation and one set of terms, along a leading axis
        stacked = replicates if isinstance(replicates, StackedStatistics) else stack_statistics(replicates)
        rep_levels, rep_leaves = _comparison_terms(student, stacked, stacked.P if exact is None else exact, loss,
                                                   dtype)
        has_bn = any(student.bn_params(l) is not None for l in range(lad.depth))
        for l, (row, terms) in enumerate([*zip(levels, levels_t, strict=True), (leaves, leaves_t)]):
            rep_terms = rep_levels[l] if l < lad.depth else rep_leaves
            for k, t in terms.items():
                row[f"{k}_floor"] = norm_floor(rep_terms[k].v, _norm(t.m, t.mask), t.mask)
            # predictions through Eq 12 renormalize each replicate, so their floors are over-estimates
            # (smaso.student.noise): never call such a number "within noise"
            inflated = {k for k in terms if has_bn and l < lad.depth and (k.endswith("_propagated") or (
                student.bn_params(l) is not None and k in ("F_local", "G_local")))}
            row["within_noise"] = [k for k in terms if k not in inflated
                                   and row[k] <= WITHIN_NOISE * row[f"{k}_floor"] + ROUNDOFF]
            if inflated:
                row["floor_over_estimated"] = sorted(inflated)
        out["noise_groups"] = len(stacked.sizes)
    return out
