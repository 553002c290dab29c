"""Event alignment: do the hidden nodes of region alpha become selective for its latent event z_alpha?

The framework paper's central question (§3-§4), measured as the paper authors' own research code measures
"student specialization" (facebookresearch/luckmatters, ``student_specialization/utils_corrs.py``
``act2corrMat``: the Pearson correlation of every teacher node with every student node's *output*, ranked per
teacher node; ``stats_operator.py`` counts the student nodes above 0.9, ``visualization/visualize.py`` calls a
teacher node recovered when one is at or above 0.95).  Here the "teacher nodes" are the event indicators
1[z_alpha = k] of region alpha and the candidates the n nodes of its group.  For every node j of region alpha at
level l, from its variable f_j over a dataset of N rows (by default the node's output as the network uses it:
the record's ``fbar``, after the gate, after BN where BN follows the gate; :data:`VARIABLES`), with z_alpha the
region's event, n_k the rows with z_alpha = k, P_k = n_k / N, mu_k and mu the event's and the overall means:

    corr[alpha, k, j] = corr(f_j, 1[z_alpha = k]) = (mu_k - mu) sqrt(P_k / (1 - P_k)) / sd(f_j)
    eta2[alpha, j]    = Var(E[f_j | z_alpha]) / Var(f_j) = sum_k n_k (mu_k - mu)^2 / sum_rows (f_j - mu)^2
    mi[alpha, j]      = I(1[gate on]; z_alpha) in bits, "on" = gate s_j > 1/2   (a lower bound on I(f_j; z_alpha))
    spec[alpha, k]    = max_j corr[alpha, k, j]  (the best-matching node of each event indicator: ``spec_node``)

and the same eta2 and mi against the events z_beta of ``controls`` *other* regions beta of the level (beta =
alpha + 1, ..., alpha + C mod R_l): a node selective for its own field scores higher against z_alpha than
against its neighbours'.  On a tree the neighbours' events are correlated with z_alpha through their common
ancestors, so the control is not zero; the analytic noise floors (:meth:`Alignment.floors`) are what a node
independent of every event reads from N examples.  From the table ``corr`` (kept on :class:`Alignment`): every
indicator's nodes ranked (:meth:`Alignment.ranked`), every node's best event (:meth:`Alignment.best_event`), the
indicators matched at a threshold (:meth:`Alignment.matched`, default :data:`DEFAULT_THRESHOLD` = 0.95, the
authors' recovery threshold), and, from the alignment of the same student at initialisation, the rank there of
each trained best match (:func:`best_match_ranks`).

Undefined is said, never scored.  A node whose variable is constant over the rows (a dead ReLU: gate never on,
output 0; or a constant output) has eta2 and corr 0/0: NaN, marked in :attr:`Alignment.constant`; a node whose
gate is constant (never on: dead; or always on) has no on-state MI (NaN).  An indicator with no defined node, or
of an event never or always seen, has ``spec`` NaN and ``spec_node`` -1.  The summaries' medians are the usual
medians (the mean of the two middle values) of the defined entries, with the count of those left out, and
:meth:`Alignment.reasons` says in words which nodes are undefined and why.

Numerics.  The state is per (region, node) and per (region, event, node) counts, means and centred second moments
M2 (:class:`AlignmentAccumulator`, float64), never sums of squares minus squared sums: a batch's moments are two
passes over it (each mean corrected by the mean residual), about a shift K per node (the first row's value, so
x - K is exact for values within a factor 2 of it), and batches, chunks and workers merge by Chan, Golub &
LeVeque's formulas (mean_a + (mean_b - mean_a) n_b / n, M2_a + M2_b + (mean_b - mean_a)^2 n_a n_b / n).  For
values within a factor 2 of their batch's first value (an offset large against the spread) x - K and the shifts'
differences are exact (Sterbenz), and every later operation acts on numbers of the size of the spread: each
moment's relative error is at most about (log2 B + the number of batches merged) * 2^-52, whatever the offset
(B the batch size; the counts are exact).  So float32 values near 1e6 (exact in float64) give eta2 equal to
that of the same values shifted back by 1e6 to 1e-12 in the tests (bound 5e-14 there), and a float64 student
whose biases are shifted by 1e6 gives its unshifted eta2 to 1e-9 (its activations u + 1e6 are themselves
rounded to 1.2e-10; a float32 student rounds them to 1/16, which no accumulation can undo).  The order of the
merges is the chunks' order, so the result does not depend on the engine; other batchings change it by
round-off only.

:class:`LinearProbe` adds each region's linear-probe accuracy for z_alpha from its node group: least squares on
one-hot targets fitted on one set of rows (mergeable Gram sums), scored on held-out rows.

:func:`collect_alignment` runs a fixed student over in-memory tensors; :func:`accumulate_alignment` streams it
over any dataset (a sample, a chunked store, a path), one task per chunk on an engine (:mod:`teachers.engine`),
the chunks' states merged in chunk order, so the result does not depend on the engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from smaso.student.frequency import (
    _ONE_HOT_MAX_EVENTS,
    _check_batch_size,
    _check_label_range,
    _one_hot_events,
    _run_batches,
    _student_chunks,
    _student_events,
    scatter_sums,
)
from smaso.student.mergeable import MergeableSums, batch_loss_sum, event_counts, event_flags
from smaso.student.network import (
    VARIABLES,
    LadderStudent,
    StudentRecord,
    _check_student,
    _check_variable,
    node_variable,
)
from smaso.student.probe import LinearProbe

if TYPE_CHECKING:
    from teachers.chunked import DataSource, _SampleChunks
    from teachers.engine import DaskEngine, SerialEngine
    from teachers.store_reader import ChunkedLadderData

__all__ = ["DEFAULT_CONTROLS", "DEFAULT_THRESHOLD", "TABLE_LEGEND", "VARIABLES", "Alignment", "AlignmentAccumulator",
           "LinearProbe", "accumulate_alignment", "alignment_report", "alignment_rows", "best_match_ranks",
           "collect_alignment", "node_variable", "undefined_note"]

#: Other regions of the same level each region's control statistics use.
DEFAULT_CONTROLS = 4
#: An event indicator is matched when its best node's correlation is at least this (the paper authors' recovery
#: threshold: luckmatters ``student_specialization/visualization/visualize.py``; their training log counts
#: the nodes at or above 0.9).
DEFAULT_THRESHOLD = 0.95
#: The columns of :meth:`~smaso.student.compare.ComparisonResult.alignment_table`, in plain words (``smaso demo``
#: prints it under the table).
TABLE_LEGEND = (
    "columns: eta2 = share of a node's variance explained by its region's event (median over nodes); [nbr] = the "
    "same\n  against the neighbouring regions' events (a control: what a node reads from events not its own); "
    "(floor) =\n  what a node unrelated to every event reads; MI = bits its on/off state carries about the event; "
    "spec =\n  correlation of each event indicator 1[z = k] with its best-matching node (median over indicators); "
    f"match =\n  indicators whose best node correlates at {DEFAULT_THRESHOLD} or more, of those with one; kept = "
    "share of indicators\n  whose best node is the one that was best at step 0; dead = nodes whose gate is never on, "
    "of all; probe =\n  held-out accuracy of a linear read-out of the event from the region's nodes (chance: the "
    "majority event's rate)")
def _entropy_bits(p: torch.Tensor, dim: int) -> torch.Tensor:
    return -(torch.where(p > 0, p * p.log2(), 0.0)).sum(dim)


def _median(t: torch.Tensor) -> tuple[float, int]:
    """The usual median of the non-NaN entries of ``t`` (the mean of the two middle values for an even count;
    NaN when there are none) and how many entries were NaN."""
    v = t[~torch.isnan(t)].double().sort().values
    k = v.numel()
    return (float((v[(k - 1) // 2] + v[k // 2]) / 2) if k else math.nan), t.numel() - k


def undefined_note(row: dict) -> str | None:
    """In words, from a summary row of :meth:`Alignment.summary` (or :func:`alignment_rows`): the level's nodes
    that are not scored and why, or None when every node is."""
    parts, n, rows = [], int(row["nodes"]), int(row["rows"])
    if row["dead"]:
        parts.append(f"{int(row['dead'])} of {n} nodes dead (gate never on over {rows} rows)")
    if row.get("always_on"):
        parts.append(f"{int(row['always_on'])} of {n} with the gate always on")
    if row["constant"]:
        parts.append(f"{int(row['constant'])} of {n} with a constant {row.get('variable', 'output')}")
    if not parts:
        return None
    gate = bool(row["dead"] or row.get("always_on"))
    what = {(True, True): "eta2, corr and MI", (True, False): "eta2 and corr", (False, True): "MI"}[
        (bool(row["constant"]), gate)]
    return f"level {row['level']}: " + "; ".join(parts) + f": {what} NaN, left out of the medians"


@dataclass
class Alignment:
    """Event alignment of one student on one dataset (module docstring).  Per level ``l = 0..d-1`` (level 0:
    the output nodes against the label):

    :ivar eta2: ``(R_l, n_l)``; ``eta2_control``: ``(R_l, n_l)`` the mean over the control regions (NaN with
        one region).  NaN where the node's variable is constant.
    :ivar mi: ``(R_l, n_l)`` bits; ``mi_control`` likewise.  NaN at the linear output level 0 and where the gate is
        constant over the rows (never or always on).
    :ivar corr: ``(R_l, M_l, n_l)`` corr(f_j, 1[z = k]): NaN where the node's variable is constant or the event
        never or always seen.
    :ivar spec: ``(R_l, M_l)`` max_j corr (NaN where no node is defined); ``spec_node``: ``(R_l, M_l)`` the
        best-matching node j, -1 where ``spec`` is NaN.
    :ivar constant: ``(R_l, n_l)`` bool, the node's variable takes one value over the rows (eta2, corr undefined).
    :ivar on_rows: ``(R_l, n_l)`` int64, rows on which the node's gate is on (N at the linear output level): 0 is a
        dead node.
    :ivar events: ``(R_l,)`` event counts m_alpha observed (events seen at least once).
    :ivar num_examples: N.
    :ivar variable: the node variable measured (:data:`VARIABLES`).
    """

    eta2: list[torch.Tensor]
    eta2_control: list[torch.Tensor]
    mi: list[torch.Tensor]
    mi_control: list[torch.Tensor]
    spec: list[torch.Tensor]
    spec_node: list[torch.Tensor]
    events: list[torch.Tensor]
    num_examples: int
    corr: list[torch.Tensor]
    constant: list[torch.Tensor]
    on_rows: list[torch.Tensor]
    variable: str = "output"

    @property
    def dead(self) -> list[torch.Tensor]:
        """``(R_l, n_l)`` bool per level: the node's gate is never on over the rows (none at the output level 0)."""
        return [(on == 0) & (l > 0) for l, on in enumerate(self.on_rows)]

    def floors(self, level: int) -> dict[str, float]:
        """What a node independent of every event reads from N examples (null expectations, level ``level``):
        eta2 (m - 1) / (N - 1); mi (m - 1) / (2 N ln 2) bits (Miller-Madow bias of the plug-in estimate);
        spec sqrt(2 ln(2 n) / N) (the largest of n null correlations); m the level's largest observed count."""
        n, m = self.num_examples, int(self.events[level].max())
        width = self.eta2[level].shape[-1]
        return {"eta2": (m - 1) / max(n - 1, 1), "mi": (m - 1) / (2 * n * math.log(2)),
                "spec": math.sqrt(2 * math.log(2 * width) / n)}

    def ranked(self, level: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every event indicator's nodes ranked by correlation (the authors' ``corrMat2corrIdx``):
        ``(corr, node)``, both ``(R_l, M_l, n_l)``, ``corr`` descending along the last axis, undefined nodes last
        (NaN, node -1)."""
        c = self.corr[level]
        values, node = c.nan_to_num(-math.inf).sort(dim=-1, descending=True, stable=True)
        undefined = torch.isneginf(values)
        return torch.where(undefined, math.nan, values), torch.where(undefined, -1, node)

    def best_event(self, level: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every node's best-matching event indicator: ``(corr, event)``, both ``(R_l, n_l)``: the largest
        corr(f_j, 1[z = k]) over k and that k (NaN and -1 for a node with no defined correlation)."""
        best, arg = self.corr[level].nan_to_num(-math.inf).max(-2)
        bad = torch.isneginf(best)
        return torch.where(bad, math.nan, best), torch.where(bad, -1, arg)

    def match_counts(self, level: int, threshold: float = DEFAULT_THRESHOLD) -> torch.Tensor:
        """``(R_l, M_l)`` per event indicator, the nodes whose correlation with it is at least ``threshold`` (the
        authors' ``MatchCnt``)."""
        return (self.corr[level] >= _check_threshold(threshold)).sum(-1)

    def matched(self, level: int, threshold: float = DEFAULT_THRESHOLD) -> int:
        """How many event indicators of the level have a best match at or above ``threshold``."""
        return int((self.spec[level] >= _check_threshold(threshold)).sum())

    def reasons(self, level: int) -> list[str]:
        """In words, the level's undefined entries and why (empty when every node and indicator is defined)."""
        row = self._counts(level)
        note = undefined_note({**row, "level": level, "variable": self.variable})
        out = [] if note is None else [note]
        bad = int(torch.isnan(self.spec[level]).sum())
        if bad:
            out.append(f"level {level}: {bad} of {self.spec[level].numel()} event indicators without a defined "
                       "node or with an event never or always seen: spec NaN, spec_node -1")
        return out

    def _counts(self, level: int) -> dict[str, int]:
        always = (self.on_rows[level] == self.num_examples) & (level > 0)
        return {"rows": self.num_examples, "nodes": self.constant[level].numel(), "dead": int(self.dead[level].sum()),
                "always_on": int(always.sum()), "constant": int(self.constant[level].sum())}

    def summary(self, threshold: float = DEFAULT_THRESHOLD) -> list[dict[str, float]]:
        """Per level: the medians over nodes (eta2, mi, their controls) and over event indicators (spec), each
        the usual median of the defined entries (``eta2_nan``, ``mi_nan``, ``spec_nan``: how many were left
        out); ``nodes``, ``dead`` (gate never on), ``always_on`` (gate always on), ``constant`` (the variable
        constant: a dead ReLU's output, for one) and ``rows`` (N); ``indicators`` (event indicators with a defined
        best match),
        ``matched`` (those at or above ``threshold``) and ``threshold``; the floors."""
        out = []
        for l in range(len(self.eta2)):
            eta2, eta2_nan = _median(self.eta2[l])
            mi, mi_nan = _median(self.mi[l])
            spec, spec_nan = _median(self.spec[l])
            out.append({"level": l, "eta2": eta2, "eta2_control": _median(self.eta2_control[l])[0], "mi": mi,
                        "mi_control": _median(self.mi_control[l])[0], "spec": spec,
                        "eta2_nan": eta2_nan, "mi_nan": mi_nan, "spec_nan": spec_nan, **self._counts(l),
                        "indicators": self.spec[l].numel() - spec_nan, "matched": self.matched(l, threshold),
                        "threshold": float(threshold), **{f"floor_{k}": v for k, v in self.floors(l).items()}})
        return out


def _check_threshold(threshold: object) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not -1 <= threshold <= 1:
        raise ValueError(f"threshold: expected a correlation in [-1, 1], got {threshold!r}")
    return float(threshold)


def best_match_ranks(init: Alignment, end: Alignment) -> list[dict]:
    """The rank at initialisation of each trained best match (the authors' ``compareCorrIndices``), per level.

    :param init, end: the alignment of the same student (same widths, same rows' ladder, same variable) at
        initialisation and later.
    :returns: per level a dict: ``node`` ``(R_l, M_l)`` the end's best node of each event indicator (-1: none),
        ``rank`` ``(R_l, M_l)`` that node's rank among the indicator's nodes at initialisation (0: it was already
        the best; -1 where undefined at either end), ``indicators`` how many are ranked, ``kept`` how many of them
        keep their initial best node, ``kept_fraction`` kept / indicators (NaN for none), ``median_rank`` the
        usual median of the ranks (NaN for none).
    :raises TypeError, ValueError: not two alignments of one student and variable.
    """
    if not isinstance(init, Alignment) or not isinstance(end, Alignment):
        raise TypeError(f"init, end: expected two Alignment, got {type(init).__name__}, {type(end).__name__}")
    if init.variable != end.variable or [c.shape for c in init.corr] != [c.shape for c in end.corr]:
        raise ValueError("init, end: expected the alignments of one student (same widths and events) measured on "
                         f"the same variable; got variables {init.variable!r}, {end.variable!r} and shapes "
                         f"{[tuple(c.shape) for c in init.corr]}, {[tuple(c.shape) for c in end.corr]}")
    out = []
    for l in range(len(end.corr)):
        node = end.spec_node[l]
        _, order = init.ranked(l)  # (R, M, n): the nodes at init, best first (undefined last, -1)
        at = (order == node.clamp(min=0)[..., None]) & (order >= 0)
        found = at.any(-1) & (node >= 0)
        rank = torch.where(found, at.to(torch.int64).argmax(-1), -1)
        ranked = rank[rank >= 0]
        kept = int((ranked == 0).sum())
        out.append({"level": l, "node": node, "rank": rank, "indicators": ranked.numel(), "kept": kept,
                    "kept_fraction": kept / ranked.numel() if ranked.numel() else math.nan,
                    "median_rank": _median(ranked.double())[0]})
    return out


def _chan(na: torch.Tensor, ma: torch.Tensor, m2a: torch.Tensor, nb: torch.Tensor, mb: torch.Tensor,
          m2b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Chan, Golub & LeVeque's merge of two (count, mean, M2) of disjoint rows: the mean and M2 of their union.
    Exact for an empty side (an empty ``a`` holds mean 0): ``0 + (mb - 0) * 1 = mb``."""
    w = nb / (na + nb).clamp(min=1)
    delta = mb - ma
    return ma + delta * w, m2a + m2b + delta.square() * (na * w)


class AlignmentAccumulator(MergeableSums):
    """Streams records into the moments of :class:`Alignment` (float64, module docstring), for a student on any
    ladder.  Per level: ``shift`` ``(R, n)`` K, every mean below is relative to it; ``mean``, ``m2``
    ``(R, n)`` of every row; ``counts`` ``(R, M)`` rows per event; ``ev_mean``, ``ev_m2`` ``(R, M, n)`` per event;
    ``ctrl_mean``, ``ctrl_m2`` ``(C, R, M, n)`` per event of the control regions; ``on``, ``on_ctrl`` the rows with
    the gate on per event (integers); ``lo``, ``hi`` ``(R, n)`` the smallest and largest value.

    :param student: the student.
    :param controls: other regions of a level each region is also compared with (fewer where the level has
        fewer).
    :param variable: the node variable (:data:`VARIABLES`, default the output).
    """

    _SUMS = ("counts", "shift", "mean", "m2", "lo", "hi", "ev_mean", "ev_m2", "on", "ctrl_mean", "ctrl_m2",
             "on_ctrl")
    _META = ("variable",)
    # the sums __init__ sets by name (setattr), one tensor per level, declared for type checkers
    shift: list[torch.Tensor]
    mean: list[torch.Tensor]
    m2: list[torch.Tensor]
    ev_mean: list[torch.Tensor]
    ev_m2: list[torch.Tensor]
    on: list[torch.Tensor]
    ctrl_mean: list[torch.Tensor]
    ctrl_m2: list[torch.Tensor]
    on_ctrl: list[torch.Tensor]

    def __init__(self, student: LadderStudent, controls: int = DEFAULT_CONTROLS, *, variable: str = "output") -> None:
        _check_student(student)
        if isinstance(controls, bool) or not isinstance(controls, int) or controls < 0:
            raise ValueError(f"controls: expected an integer >= 0, got {controls!r}")
        self.variable = _check_variable(variable)
        self.student, self.ladder = student, student.ladder
        lad, w, dev = self.ladder, student.widths, student.weights[0].device
        levels = range(lad.depth)
        self.controls = [min(controls, lad.num_regions[l] - 1) for l in levels]
        z64 = {"dtype": torch.float64, "device": dev}
        R, M = lad.num_regions, lad.events
        self.counts = [torch.zeros(R[l], M[l], **z64) for l in levels]
        for key in ("shift", "mean", "m2"):
            setattr(self, key, [torch.zeros(R[l], w[l], **z64) for l in levels])
        self.lo = [torch.full((R[l], w[l]), math.inf, **z64) for l in levels]
        self.hi = [torch.full((R[l], w[l]), -math.inf, **z64) for l in levels]
        for key in ("ev_mean", "ev_m2", "on"):
            setattr(self, key, [torch.zeros(R[l], M[l], w[l], **z64) for l in levels])
        for key in ("ctrl_mean", "ctrl_m2", "on_ctrl"):
            setattr(self, key, [torch.zeros(self.controls[l], R[l], M[l], w[l], **z64) for l in levels])
        self.n, self.loss_sum = 0, 0.0
        # per level the regions' own event counts where they differ (what the event check needs), else None
        self._sizes = [None if len(set(lad.region_events[l])) == 1 else torch.tensor(lad.region_events[l], device=dev)
                       for l in levels]

    def add(self, rec: StudentRecord, z: torch.Tensor) -> None:
        """Add one batch: ``rec`` from ``student.forward_backward`` and its events ``z`` ``(N, total_regions)``.
        The batch's own moments (two passes about its first row), merged in (:meth:`merge_`)."""
        z = _student_events(self.student, z, rec).to(self.counts[0].device, torch.int64)
        lad, off = self.ladder, self.ladder.level_offsets
        # on the CPU a bad batch raises here; on a device the check is read back once, when the moments leave it
        self._defer_event_check(event_flags([z[:, off[l]: off[l + 1]] for l in range(lad.depth)],
                                            lad.events[: lad.depth], self._sizes))
        self.merge_(self._batch_state(rec, z))

    def _batch_state(self, rec: StudentRecord, z: torch.Tensor) -> dict:
        """The state of one batch alone (what a fresh accumulator holds after adding it)."""
        lad, off, n = self.ladder, self.ladder.level_offsets, z.shape[0]
        state: dict[str, Any] = {"n": n, "loss_sum": batch_loss_sum(rec, n), "variable": self.variable,
                                 **{k: [] for k in self._SUMS}}
        for l in range(lad.depth):
            ev, m, r_l = z[:, off[l]: off[l + 1]], lad.events[l], lad.num_regions[l]
            x = node_variable(self.student, rec, l, self.variable).to(torch.float64)  # (N, R, n)
            shift = x[0].clone()  # x - K exact for values within a factor 2 of K (Sterbenz)
            y = x - shift
            on = (rec.slope[l] > 0.5).to(torch.float64) if rec.slope[l] is not None else torch.ones_like(y)
            ybar = y.mean(0)
            d = y - ybar
            resid = d.sum(0)
            # the corrected two-pass moments: the residual's mean corrects the mean, its square M2
            state["mean"].append(ybar + resid / n)
            state["m2"].append((d.square().sum(0) - resid.square() / n).clamp(min=0))
            state["shift"].append(shift)
            state["lo"].append(x.amin(0))
            state["hi"].append(x.amax(0))
            one_hot = _one_hot_events(ev, m, torch.float64) if m <= _ONE_HOT_MAX_EVENTS else None
            # (R, M); on the device (one_hot reads the events' range back to the host)
            counts = event_counts(ev + torch.arange(r_l, device=ev.device) * m, r_l * m).view(r_l, m)
            state["counts"].append(counts)
            parts = []
            for c in range(self.controls[l] + 1):  # c = 0: the region's own event; c >= 1: region alpha + c's
                e = ev.roll(-c, dims=1) if c else ev
                oh = None if one_hot is None else (one_hot.roll(-c, dims=0) if c else one_hot)
                parts.append(_event_moments(y, on, e, counts.roll(-c, dims=0) if c else counts, m, oh))
            state["ev_mean"].append(parts[0][0])
            state["ev_m2"].append(parts[0][1])
            state["on"].append(parts[0][2])
            z0 = torch.zeros(0, r_l, m, x.shape[-1], dtype=torch.float64, device=x.device)
            for i, key in enumerate(("ctrl_mean", "ctrl_m2", "on_ctrl")):
                state[key].append(torch.stack([p[i] for p in parts[1:]]) if len(parts) > 1 else z0)
        return state

    def merge_(self, other: AlignmentAccumulator | dict) -> AlignmentAccumulator:
        """Merge another accumulator's moments (or its :meth:`state_dict`) of other rows into this one, in place
        (Chan, Golub & LeVeque; the counts add, the extremes take min and max); returns self.

        :raises TypeError: ``other`` is neither such an accumulator nor its state.
        :raises ValueError: the other state is of another student, teacher or variable.
        """
        b = self._checked_state(other)
        if b["n"] == 0:
            return self
        if self.n == 0:  # adopt the other's shift: the state is the other's, bit for bit
            for key in self._SUMS:
                setattr(self, key, [t.to(mine.device, copy=True) for mine, t in zip(getattr(self, key), b[key],
                                                                                  strict=True)])
        else:
            na, nb = torch.tensor(float(self.n), dtype=torch.float64), torch.tensor(float(b["n"]), dtype=torch.float64)
            for l in range(self.ladder.depth):
                dev = self.counts[l].device
                bl = {k: b[k][l].to(dev) for k in self._SUMS}
                dk = bl["shift"] - self.shift[l]  # the other's means in this shift (exact for nearby shifts)
                self.mean[l], self.m2[l] = _chan(na, self.mean[l], self.m2[l], nb, bl["mean"] + dk, bl["m2"])
                ca, cb = self.counts[l][..., None], bl["counts"][..., None]
                self.ev_mean[l], self.ev_m2[l] = _chan(ca, self.ev_mean[l], self.ev_m2[l], cb,
                                                       bl["ev_mean"] + dk[:, None], bl["ev_m2"])
                if self.controls[l]:
                    rolled = range(1, self.controls[l] + 1)
                    cca = torch.stack([self.counts[l].roll(-c, dims=0) for c in rolled])[..., None]
                    ccb = torch.stack([bl["counts"].roll(-c, dims=0) for c in rolled])[..., None]
                    self.ctrl_mean[l], self.ctrl_m2[l] = _chan(cca, self.ctrl_mean[l], self.ctrl_m2[l], ccb,
                                                               bl["ctrl_mean"] + dk[:, None], bl["ctrl_m2"])
                self.counts[l] = self.counts[l] + bl["counts"]
                self.on[l] = self.on[l] + bl["on"]
                self.on_ctrl[l] = self.on_ctrl[l] + bl["on_ctrl"]
                self.lo[l], self.hi[l] = torch.minimum(self.lo[l], bl["lo"]), torch.maximum(self.hi[l], bl["hi"])
        self.n += int(b["n"])
        self._merge_loss(b["loss_sum"])  # (a batch's is a device tensor: read back once, by state_dict)
        return self

    def _eta2(self, counts: torch.Tensor, mean: torch.Tensor, m2: torch.Tensor,
              constant: torch.Tensor) -> torch.Tensor:
        """eta2 = B / (B + W) of one partition of the rows: B = sum_k n_k (mu_k - mu)^2, W = sum_k M2_k."""
        c = counts[..., None]
        mu = (c * mean).sum(-2) / self.n
        between = (c * (mean - mu[..., None, :]).square()).sum(-2)
        total = between + m2.sum(-2)
        return torch.where(constant | (total <= 0), math.nan, between / total.clamp(min=1e-300))

    def _mi(self, counts: torch.Tensor, on: torch.Tensor) -> torch.Tensor:
        pz = counts / self.n  # (R, M)
        p_on = on.sum(-2) / self.n  # (R, n)
        h = _entropy_bits(torch.stack([p_on, 1 - p_on]), 0)
        cond = on / counts.clamp(min=1)[..., None]  # P(on | z)
        h_cond = (pz[..., None] * _entropy_bits(torch.stack([cond, 1 - cond]), 0)).sum(-2)
        # a constant gate (never or always on) carries no on-state information by construction: not scored
        return torch.where((p_on > 0) & (p_on < 1), (h - h_cond).clamp(min=0), math.nan)

    def result(self) -> Alignment:
        """The :class:`Alignment` of the rows added so far.

        :raises ValueError: fewer than 2 rows; or events added on another device than the CPU were out of range.
        """
        self._raise_event_flags()
        if self.n < 2:
            raise ValueError(f"the accumulator holds {self.n} example(s); alignment needs at least 2")
        eta2, eta2_c, mi, mi_c, spec, node, events, corrs, constants, on_rows = ([] for _ in range(10))
        for l in range(self.ladder.depth):
            cnt = self.counts[l]
            const = self.lo[l] == self.hi[l]
            eta2.append(self._eta2(cnt, self.ev_mean[l], self.ev_m2[l], const))
            # the output level is linear (always "on"): its on-state MI is not defined
            mi.append(self._mi(cnt, self.on[l]) if l else torch.full_like(self.m2[l], math.nan))
            ctrl_counts = [cnt.roll(-(c + 1), dims=0) for c in range(self.controls[l])]
            eta2_c.append(torch.stack([self._eta2(k, mu, m2, const) for k, mu, m2 in
                                       zip(ctrl_counts, self.ctrl_mean[l], self.ctrl_m2[l], strict=True)]).mean(0)
                          if self.controls[l] else torch.full_like(eta2[-1], math.nan))
            mi_c.append(torch.stack([self._mi(k, o) for k, o in zip(ctrl_counts, self.on_ctrl[l], strict=True)])
                        .mean(0) if self.controls[l] and l else torch.full_like(mi[-1], math.nan))
            # corr(f_j, 1[z = k]) = cov / (sd_f sd_1k), cov = P_k (mu_k - mu), sd_1k = sqrt(P_k (1 - P_k))
            p = cnt / self.n
            sd_f = (self.m2[l] / self.n).sqrt()
            ratio = (p / (1 - p)).sqrt()[..., None]
            corr = (self.ev_mean[l] - self.mean[l][:, None, :]) * ratio / sd_f[:, None, :]
            undefined = const[:, None, :] | ((p <= 0) | (p >= 1))[..., None] | (sd_f[:, None, :] <= 0)
            corr = torch.where(undefined, math.nan, corr)
            best, arg = corr.nan_to_num(-math.inf).max(-1)
            none = torch.isneginf(best)
            spec.append(torch.where(none, math.nan, best))
            node.append(torch.where(none, -1, arg))
            events.append((cnt > 0).sum(-1))
            corrs.append(corr)
            constants.append(const)
            on_rows.append(self.on[l].sum(-2).round().to(torch.int64))
        return Alignment(eta2, eta2_c, mi, mi_c, spec, node, events, self.n, corrs, constants, on_rows, self.variable)


def _event_moments(y: torch.Tensor, on: torch.Tensor, ev: torch.Tensor, counts: torch.Tensor, m: int,
                   one_hot: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-event corrected two-pass moments of one batch: ``y`` ``(N, R, n)`` (shifted values), ``on`` ``(N, R, n)``
    gates, ``ev`` ``(N, R)`` events in [0, m), ``counts`` ``(R, m)`` their counts.

    :returns: ``(mean, M2, on-count)``, each ``(R, m, n)`` (mean 0 and M2 0 for an event not in the batch).
    """
    def sums(q: torch.Tensor) -> torch.Tensor:  # (one product per quantity: the records' node-major layout is kept)
        return scatter_sums(ev, q, m, torch.float64, one_hot)

    c = counts.clamp(min=1)[..., None]
    mean = sums(y) / c
    idx = ev.T.unsqueeze(-1).expand(-1, -1, y.shape[-1])  # (R, N, n)
    d = y - mean.gather(1, idx).transpose(0, 1)
    resid = sums(d)
    return mean + resid / c, (sums(d.square()) - resid.square() / c).clamp(min=0), sums(on)


def alignment_rows(alignment: Alignment | AlignmentAccumulator, probe: LinearProbe, *, init: Alignment | None = None,
                   threshold: float = DEFAULT_THRESHOLD) -> list[dict]:
    """The report's rows, one per level: :meth:`Alignment.summary` plus ``probe`` (the mean held-out probe
    accuracy over the level's regions), ``probe_chance`` (the mean majority-event rate of the scored rows, the
    probe's floor), ``variable``, and with ``init`` (the same student's alignment at initialisation,
    :func:`best_match_ranks`): ``kept`` (the fraction of event indicators whose best node is the one that was
    best at initialisation), ``kept_of`` (the indicators ranked in both) and ``init_rank`` (the median rank at
    initialisation of the best node now, 0 = was already the best).  ``alignment_rows(*accumulate_alignment(
    student, source))`` is :func:`alignment_report` streamed.

    :param alignment: an :class:`Alignment` or the accumulator of one; ``probe``: a :class:`LinearProbe` that
        has scored rows.
    :param threshold: the correlation at which an indicator counts as ``matched``.
    """
    if isinstance(alignment, AlignmentAccumulator):
        alignment = alignment.result()
    if not isinstance(alignment, Alignment):
        raise TypeError(f"alignment: expected an Alignment or an AlignmentAccumulator, got "
                        f"{type(alignment).__name__}")
    if not isinstance(probe, LinearProbe):
        raise TypeError(f"probe: expected a LinearProbe, got {type(probe).__name__}")
    ranks = [{}] * len(alignment.eta2) if init is None else [
        {"kept": r["kept_fraction"], "kept_of": r["indicators"], "init_rank": r["median_rank"]}
        for r in best_match_ranks(init, alignment)]
    return [{**row, "variable": alignment.variable, "probe": float(p.mean()), "probe_chance": float(c.mean()), **k}
            for row, p, c, k in zip(alignment.summary(threshold), probe.accuracy(), probe.chance(), ranks,
                                    strict=True)]


def alignment_report(student: LadderStudent, x: torch.Tensor, z: torch.Tensor, *, init: Alignment | None = None,
                     threshold: float = DEFAULT_THRESHOLD, **kwargs: Any) -> list[dict]:
    """:func:`collect_alignment` as rows, one per level (:func:`alignment_rows`: the summary, ``probe`` and
    ``probe_chance``, and with ``init`` the ranks at initialisation of the best matches)."""
    acc, probe = _collect(student, x, z, **kwargs)
    return alignment_rows(acc, probe, init=init, threshold=threshold)


def _check_fit_rows(fit_rows: object, n: int) -> int:
    fit = n // 2 if fit_rows is None else fit_rows
    if isinstance(fit, bool) or not isinstance(fit, int) or not 0 < fit < n:
        raise ValueError(f"fit_rows: expected an integer in 1..{n - 1}, got {fit_rows!r}")
    return fit


def _collect(student: LadderStudent, x: torch.Tensor, z: torch.Tensor, *, fit_rows: int | None = None,
             batch_size: int = 4096, controls: int = DEFAULT_CONTROLS,
             variable: str = "output") -> tuple[AlignmentAccumulator, LinearProbe]:
    """The accumulator and the scored probe of :func:`collect_alignment`."""
    _check_student(student)
    if not isinstance(x, torch.Tensor) or not isinstance(z, torch.Tensor) or x.shape[0] != z.shape[0]:
        raise ValueError("x, z: expected tensors with the same number of rows")
    n = x.shape[0]
    fit = _check_fit_rows(fit_rows, n)
    bs = _check_batch_size(batch_size)
    acc, probe = AlignmentAccumulator(student, controls, variable=variable), LinearProbe(student, variable=variable)
    _check_label_range(student, z[:, 0], "squared")
    for add, (lo, hi) in ((probe.add_fit, (0, fit)), (probe.add_score, (fit, n))):
        rows = [slice(s, min(s + bs, hi)) for s in range(lo, hi, bs)]
        _run_batches(student, ((x[r], z[r, 0], z[r]) for r in rows), "squared", acc.add, add)
    return acc, probe


def collect_alignment(student: LadderStudent, x: torch.Tensor, z: torch.Tensor, *, fit_rows: int | None = None,
                      batch_size: int = 4096, controls: int = DEFAULT_CONTROLS,
                      variable: str = "output") -> tuple[Alignment, list]:
    """Alignment of a fixed student on ``(x, z)``, and the linear probes' held-out accuracies.

    :param x: ``(N, R_d, dim)`` inputs; ``z``: ``(N, total_regions)`` events (the label is ``z[:, 0]``).
    :param fit_rows: the first ``fit_rows`` rows fit the probes, the rest score them (default: half).
    :param variable: the node variable (:data:`VARIABLES`; default the output, what the next level reads).
    :returns: ``(alignment over all rows, [probe accuracy (R_l,) per level])``.
    """
    acc, probe = _collect(student, x, z, fit_rows=fit_rows, batch_size=batch_size, controls=controls,
                          variable=variable)
    return acc.result(), probe.accuracy()


def _chunk_alignment(c: int, student: LadderStudent, chunks: ChunkedLadderData | _SampleChunks, fit: int,
                     batch_size: int, controls: int,
                     coef: list | None, variable: str = "output") -> tuple[dict, dict]:
    """The task of one chunk (any process): its rows of one phase, in batches of ``batch_size``, into fresh
    moments.  Phase fit (``coef`` None): the chunk's rows before row ``fit``; phase score: those from row ``fit``
    on, scored with the solved coefficients ``coef``.

    :returns: the states of the :class:`AlignmentAccumulator` and the :class:`LinearProbe`.
    """
    lo, hi = chunks.chunk_bounds(c)
    a, b = (0, min(hi, fit) - lo) if coef is None else (max(lo, fit) - lo, hi - lo)  # rows of the chunk
    part = chunks.chunk(c)
    acc, probe = AlignmentAccumulator(student, controls, variable=variable), LinearProbe(student, variable=variable)
    probe.coef = coef
    wdt = student.weights[0].dtype
    rows = [slice(s, min(s + batch_size, b)) for s in range(a, b, batch_size)]
    _check_label_range(student, part.z[a:b, 0].long(), "squared")  # (a chunk is read on the host: no device read)
    _run_batches(student, ((part.inputs(r, wdt), part.z[r, 0].long(), part.z[r].long()) for r in rows), "squared",
                 acc.add, probe.add_fit if coef is None else probe.add_score)
    return acc.state_dict(), probe.state_dict()


def accumulate_alignment(student: LadderStudent, source: DataSource, *,
                         engine: SerialEngine | DaskEngine | None = None, fit_rows: int | None = None,
                         batch_size: int = 4096, controls: int = DEFAULT_CONTROLS, variable: str = "output",
                         progress: bool = False) -> tuple[AlignmentAccumulator, LinearProbe]:
    """:func:`collect_alignment` streamed over any dataset, chunk by chunk, on any engine: the mergeable moments.

    The first ``fit_rows`` rows of the stream fit the probes, the rest score them, in two phases: the chunks
    holding fitting rows (alignment moments and Gram sums), the solve, then the chunks holding scored rows
    (alignment moments and correct predictions; the chunk across the boundary takes part in both, each phase with
    its own rows).  So every row is run through the student once, and memory is one chunk and one batch per task
    plus the moments, whatever N is (one pass that also scored would have to keep the scored rows' activations
    until the solve).  Each chunk of a phase is one task (as :func:`~smaso.student.frequency.accumulate_statistics`),
    batched by ``batch_size`` within the chunk and phase (BN normalizes each batch by its own statistics), and
    the states are merged in chunk order: the result does not depend on the engine, bit for bit.

    :param source: a :class:`~teachers.sampling.LadderSample`, a :class:`~teachers.chunked.ChunkedLadderData`
        or dataset path(s), of the student's teacher ladder (chunks: :func:`~teachers.chunked.as_chunks`).
    :param engine: None (this process), or a :class:`~teachers.engine.DaskEngine`.
    :param fit_rows: rows fitting the probes (default: half); ``controls``, ``variable``: as
        :class:`AlignmentAccumulator`.
    :returns: ``(accumulator, probe)``: ``accumulator.result()`` is the :class:`Alignment` of every row,
        ``probe.accuracy()`` and ``probe.chance()`` the held-out accuracies and their floors;
        :func:`alignment_rows` makes the report's rows of both.
    """
    from teachers.engine import get_engine

    _check_student(student)
    bs = _check_batch_size(batch_size)
    chunks = _student_chunks(student, source)
    fit = _check_fit_rows(fit_rows, len(chunks))
    acc, probe = AlignmentAccumulator(student, controls, variable=variable), LinearProbe(student, variable=variable)
    eng = get_engine(engine)

    def merge(total: tuple, part: tuple[dict, dict]) -> tuple:
        return total[0].merge_(part[0]), total[1].merge_(part[1])

    bounds = [chunks.chunk_bounds(c) for c in range(chunks.num_chunks)]
    for phase, todo in enumerate(([c for c, (lo, _) in enumerate(bounds) if lo < fit],
                                  [c for c, (_, hi) in enumerate(bounds) if hi > fit])):
        if phase:
            probe._solve()
        eng.fold(_chunk_alignment, todo, student, chunks, fit, bs, controls,
                 probe.coef, variable, merge=merge, init=(acc, probe),
                 progress=f"alignment ({'score' if phase else 'fit'})" if progress else None)
    return acc, probe
