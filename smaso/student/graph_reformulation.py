"""The reformulation on a region graph: Eq 9 with the full sum over parents (issue 17; Thm 2 / Thm 4).

For a :class:`~smaso.student.graph_network.GraphStudent` on a :class:`~teachers.graph_ladder.GraphLadder`
(padded event layout of :mod:`smaso.student.graph_frequency`), with P_pc = P(z_c | z_p) for every edge
(p, c), W_pc ``(n_p, n_c)`` the edge's weights (u_p = sum_c W_pc f_c), D, D' the measured gates:

    U_p    = sum_{c in ch(p)} P_pc F_c W_pc^T + 1 b_p^T             raw activation given z_p
    F_p    = D_p o U_p                                               (Eq 9, forward)
    G~_c   = D'_c o sum_{p in pa(c)} P_pc^T G~_p W_pc                 (Eq 9, backward: every parent)
    Delta W_pc = G~_p^T (P_pc F_c),   Delta b_p = 1^T G~_p            (Eq 9, update)

with the top boundary of :func:`smaso.student.reformulation.top_gradient` and, at the leaves,
F = E[x | z] (the identity for one-hot leaves).  On a tree every region has one parent and this is
:func:`smaso.student.reformulation.reformulate` (tests/test_graph_reformulation.py checks it).

Thm 2's conditions, measured per edge (:func:`graph_conditions`): the forward/backward decorrelation
of each level, focus E[f_c | z_p] = P_pc E[f_c | z_c] and broadness P(z_c) E[g_p | z_c] = P_pc^T G~_p
for *each* parent p of c; on a fully informative ladder (Thm 3: z_r fixes the region's input, e.g.
:meth:`GraphLadder.fully_informative`) all of them vanish and the reformulation is exact.
:func:`compare_graph_statistics_to_theory` reports relative errors, their split into condition terms
and, with jackknife replicates, every number's noise floor (:mod:`smaso.student.noise`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from smaso.student.graph_frequency import GraphEventStatistics, GraphFrequencyStatistics
from smaso.student.graph_network import GraphStudent, level_edge_index
from smaso.student.reformulation import Reformulation, resolve_top, top_gradient

__all__ = ["compare_graph_statistics_to_theory", "graph_conditions", "graph_reformulate"]


def _check(student: GraphStudent, P: GraphEventStatistics, measured: GraphFrequencyStatistics) -> None:
    if not isinstance(student, GraphStudent):
        raise TypeError(f"student: expected a GraphStudent, got {type(student).__name__}")
    if not isinstance(P, GraphEventStatistics):
        raise TypeError(f"P: expected GraphEventStatistics, got {type(P).__name__}")
    if not isinstance(measured, GraphFrequencyStatistics):
        raise TypeError(f"measured: expected GraphFrequencyStatistics, got {type(measured).__name__}")
    g = student.graph
    for name, other in (("P", P.graph), ("measured", measured.graph)):
        if other is not g and (other.events != g.events or other.parents != g.parents):
            raise ValueError(f"{name}: statistics of another region graph than the student's")
    edge_shapes = [student.edge_weights(l).shape for l in range(g.depth)]
    if len(measured.dW) != len(edge_shapes) or any(m.shape != w for m, w in zip(measured.dW, edge_shapes, strict=True)):
        raise ValueError("measured: statistics of a student of other widths")


def graph_reformulate(student: GraphStudent, P: GraphEventStatistics, measured: GraphFrequencyStatistics, *,
                      propagate: bool = True, loss: str = "squared", leaf_inputs: torch.Tensor | None = None,
                      top: str | None = None) -> Reformulation:
    """Eq 9 on a region graph (module docstring): predicted U, F, Fbar (= F), G~, Delta W, Delta b.

    :param P: :meth:`GraphEventStatistics.exact` or the empirical ``measured.P``.
    :param measured: supplies the gates D, D', the leaf inputs E[x | z] and, with ``propagate=False``, each
        level's measured neighbours (one step of Eq 9 from the measured level below / above).
    :param leaf_inputs: override E[x | z] ``(R_d, M_d, dim)``.
    :param top: ``"predicted"`` (from the top activations) or ``"measured"`` (E[g_raw | y]); default as
        :func:`smaso.student.reformulation.reformulate`.
    :returns: a :class:`~smaso.student.reformulation.Reformulation` with lists over levels of
        ``(R_l, M_l, n_l)`` and ``dW[l]`` ``(E_l, n_l, n_{l+1})`` (GraphStudent's edge order), ``db[l]`` ``(R_l, n_l)``.
    """
    _check(student, P, measured)
    top = resolve_top(loss, top, propagate)
    g = student.graph
    d, dt = g.depth, torch.float64
    W = [student.edge_weights(l).detach().to(dt).cpu() for l in range(d)]
    bias = [None] * d if student.biases is None else [b.detach().to(dt).cpu() for b in student.biases]
    Pd = [None] + [t.to(dt) for t in P.P_down[1:]]
    p = [t.to(dt) for t in P.marginals]
    edges = [tuple(t.cpu() for t in student.edge_index(l)) for l in range(d)]
    meas_F = [None if t is None else t.to(dt) for t in measured.Fbar]
    U, F_ = [None] * (d + 1), [None] * (d + 1)
    F_[d] = (leaf_inputs if leaf_inputs is not None else meas_F[d]).to(dt)
    for l in range(d - 1, -1, -1):
        par, chi = edges[l]
        child = (F_[l + 1] if propagate or l + 1 == d else meas_F[l + 1]).index_select(0, chi)
        msg = torch.einsum("eab,ebk,ejk->eaj", Pd[l + 1], child, W[l])
        U[l] = msg.new_zeros(g.num_regions[l], msg.shape[1], msg.shape[2]).index_add_(0, par, msg)
        if bias[l] is not None:
            U[l] = U[l] + bias[l][:, None, :]
        F_[l] = measured.D[l].to(dt) * U[l]
    G = [None] * (d + 1)
    if top == "predicted":
        G_raw_top = p[0][..., None] * top_gradient(F_[0] if propagate else meas_F[0], loss)
    else:
        G_raw_top = measured.Gf[0].to(dt) * p[0][..., None]
    G[0] = measured.Dp[0].to(dt) * G_raw_top
    meas_G = measured.G_tilde
    dW, db = [None] * d, [None] * d
    for l in range(d):
        par, chi = edges[l]
        parent = G[l] if propagate or l == 0 else meas_G[l].to(dt)
        g_par = parent.index_select(0, par)  # (E, M_l, n_l)
        child = (F_[l + 1] if propagate or l + 1 == d else meas_F[l + 1]).index_select(0, chi)
        dW[l] = torch.einsum("eab,ebk,eaj->ejk", Pd[l + 1], child, g_par)
        db[l] = parent.sum(1)
        if l + 1 < d:
            back = torch.einsum("eab,eaj,ejk->ebk", Pd[l + 1], g_par, W[l])  # P_pc^T G~_p W_pc
            raw = back.new_zeros(g.num_regions[l + 1], back.shape[1], back.shape[2]).index_add_(0, chi, back)
            G[l + 1] = measured.Dp[l + 1].to(dt) * raw
    return Reformulation(U, list(F_), list(F_), G, dW, db)


# A reported number is ||v|| / ||m|| over the rows ``mask``: ``(v, m, mask)``.
_Term = tuple


def _value(term: _Term) -> float:
    v, m, mask = term
    if mask is not None:
        v, m = v[mask], m[mask]
    num, den = float(v.norm()), float(m.norm())
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return num / den


def _condition_terms(stats: GraphFrequencyStatistics, P: GraphEventStatistics | None = None) -> list[dict[str, _Term]]:
    """Thm 2's conditions per level as difference vectors (per edge for focus and broadness)."""
    g = stats.graph
    d = g.depth
    P = stats.P if P is None else P
    dt = torch.float64
    Gt = [None if t is None else t.to(dt) for t in stats.G_tilde]
    seen = [c > 0 for c in stats.counts]
    edges = [level_edge_index(g, l) for l in range(d)]  # (parents, children) of the edges below level l
    out = []
    for l in range(d + 1):
        row: dict[str, _Term] = {}
        if l < d:
            F_, U, D = (stats.means[k][l].to(dt) for k in ("F", "U", "D"))
            Gm, Gf, Dp = (stats.means[k][l].to(dt) for k in ("G", "Gf", "Dp"))
            row["decorrelation_fwd"] = (D * U - F_, F_, seen[l])
            row["decorrelation_bwd"] = (Dp * Gf - Gm, Gm, seen[l])
            fcg = torch.einsum("eak,eaj->ejk", stats.Fc[l + 1].to(dt), Gt[l].index_select(0, edges[l][0]))
            row["decorrelation_dW"] = (fcg - stats.dW[l].to(dt), stats.dW[l].to(dt), None)
        if l >= 1:
            par, chi = edges[l - 1]
            Pd = P.P_down[l].to(dt)
            fc = stats.Fc[l].to(dt)
            parent_seen = seen[l - 1].index_select(0, par)
            row["focus"] = (torch.einsum("eab,ebk->eak", Pd, stats.Fbar[l].to(dt).index_select(0, chi)) - fc, fc,
                            parent_seen)
            gp = stats.Gp_tilde[l].to(dt)
            row["broadness"] = (torch.einsum("eab,eaj->ebj", Pd, Gt[l - 1].index_select(0, par)) - gp, gp,
                                seen[l].index_select(0, chi))
        out.append(row)
    return out


def graph_conditions(stats: GraphFrequencyStatistics) -> list[dict]:
    """Thm 2's conditions measured from the data, per level (relative norms; module docstring)."""
    return [{"level": l, **{k: _value(t) for k, t in row.items()}} for l, row in enumerate(_condition_terms(stats))]


def _comparison_terms(student: GraphStudent, stats: GraphFrequencyStatistics, P: GraphEventStatistics,
                      loss: str) -> tuple[list, dict]:
    d = student.graph.depth
    dt = torch.float64
    preds = {k: graph_reformulate(student, P, stats, propagate=k == "propagated", loss=loss)
             for k in ("propagated", "local")}
    local = preds["local"]
    cond = _condition_terms(stats, P)
    G_meas = [None if t is None else t.to(dt) for t in stats.G_tilde]
    p = [t.to(dt) for t in stats.p]
    levels = []
    for l in range(d):
        seen = stats.counts[l] > 0
        Fm, dWm = stats.Fbar[l].to(dt), stats.dW[l].to(dt)
        row: dict[str, _Term] = {}
        for kind, pr in preds.items():
            row[f"F_{kind}"] = (pr.Fbar[l] - Fm, Fm, seen)
            row[f"G_{kind}"] = (pr.G_tilde[l] - G_meas[l], G_meas[l], seen)
            row[f"dW_{kind}"] = (pr.dW[l] - dWm, dWm, None)
        # the one-step errors split exactly into a part per condition (pred - meas = a + b), as on trees
        row["F_local_focus"] = (stats.D[l].to(dt) * (local.U[l] - stats.U[l].to(dt)), Fm, seen)
        row["F_local_decorrelation"] = (cond[l]["decorrelation_fwd"][0], Fm, seen)
        gf_tilde = stats.Gf[l].to(dt) * p[l][..., None]
        row["G_local_broadness"] = (local.G_tilde[l] - stats.Dp[l].to(dt) * gf_tilde, G_meas[l], seen)
        row["G_local_decorrelation"] = (stats.Dp[l].to(dt) * gf_tilde - G_meas[l], G_meas[l], seen)
        par, chi = student.edge_index(l)
        pf = torch.einsum("eab,ebk->eak", P.P_down[l + 1].to(dt), stats.Fbar[l + 1].to(dt).index_select(0, chi.cpu()))
        row["dW_local_focus"] = (torch.einsum("eak,eaj->ejk", pf - stats.Fc[l + 1].to(dt),
                                              G_meas[l].index_select(0, par.cpu())), dWm, None)
        row["dW_local_decorrelation"] = (cond[l]["decorrelation_dW"][0], dWm, None)
        row.update(cond[l])
        levels.append(row)
    return levels, cond[d]


def compare_graph_statistics_to_theory(student: GraphStudent, stats: GraphFrequencyStatistics, *,
                                       P_source: str = "empirical", loss: str = "squared",
                                       replicates: Sequence[GraphFrequencyStatistics] | None = None) -> dict:
    """Relative errors of the graph reformulation against measured statistics, per level, with Thm 2's terms.

    The keys follow :func:`smaso.student.compare.compare_statistics_to_theory`: per level ``F_``, ``G_``,
    ``dW_`` ``propagated`` / ``local``, the one-step errors' parts (``F_local_focus``,
    ``F_local_decorrelation``, ``G_local_broadness``, ``G_local_decorrelation``, ``dW_local_focus``,
    ``dW_local_decorrelation``: each one-step error is at most the sum of its two parts) and the
    conditions (``decorrelation_fwd/_bwd/_dW``, ``focus``, ``broadness``, over every edge of the level);
    ``leaves``: focus and broadness of the leaf level.  With jackknife ``replicates``
    (:meth:`~smaso.student.graph_frequency.GraphReplicates.leave_one_out`) every number gets ``key_floor``
    and each row lists ``within_noise`` (at most twice the floor, or below round-off).

    :param P_source: ``"empirical"`` (the sample's own frequencies) or ``"exact"`` (the teacher's).
    """
    from smaso.student.noise import ROUNDOFF, WITHIN_NOISE, norm_floor

    if P_source == "empirical":
        P_of = lambda st: st.P  # noqa: E731
    elif P_source == "exact":
        exact = GraphEventStatistics.exact(stats.graph)
        P_of = lambda st: exact  # noqa: E731
    else:
        raise ValueError(f"P_source: expected 'empirical' or 'exact', got {P_source!r}")
    g = stats.graph
    levels_t, leaves_t = _comparison_terms(student, stats, P_of(stats), loss)
    levels = []
    for l, terms in enumerate(levels_t):
        seen = (stats.counts[l] > 0) & stats.event_mask[l]
        levels.append({"level": l, "regions": g.num_regions[l], "edges": len(student.edges[l]),
                       "nodes": student.widths[l], "empty_events": int((~seen & stats.event_mask[l]).sum()),
                       **{k: _value(t) for k, t in terms.items()}})
    leaves = {"level": g.depth, **{k: _value(t) for k, t in leaves_t.items()}}
    out = {"levels": levels, "leaves": leaves, "loss": stats.loss, "P_source": P_source,
           "num_examples": stats.num_examples}
    if replicates:
        reps = [_comparison_terms(student, st, P_of(st), loss) for st in replicates]

        def floor(term: _Term, vals: list) -> float:
            _, m, mask = term
            den = float((m if mask is None else m[mask]).norm())
            return norm_floor(vals, den, mask)

        for l, (row, terms) in enumerate(zip(levels, levels_t, strict=True)):
            for k, t in terms.items():
                row[f"{k}_floor"] = floor(t, [r[0][l][k][0] for r in reps])
            row["within_noise"] = [k for k in terms if row[k] <= WITHIN_NOISE * row[f"{k}_floor"] + ROUNDOFF]
        for k, t in leaves_t.items():
            leaves[f"{k}_floor"] = floor(t, [r[1][k][0] for r in reps])
        leaves["within_noise"] = [k for k in leaves_t if leaves[k] <= WITHIN_NOISE * leaves[f"{k}_floor"] + ROUNDOFF]
        out["noise_groups"] = len(replicates)
    return out
