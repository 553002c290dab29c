"""Event alignment: do the hidden nodes of region alpha become selective for its latent event z_alpha?

The framework paper's central question (§3-§4), measured as the paper authors' own research code measures
"student specialization" (facebookresearch/luckmatters, ``student_specialization/utils_corrs.py``: every
teacher node against every student node, ranked).  For every node j of region alpha at level l, from its
activation f_j (the record's ``f``: the activation, or BN's output for ``batch_norm="before"``) over a
dataset, with z_alpha the region's event:

    eta2[alpha, j]   = Var(E[f_j | z_alpha]) / Var(f_j)                        (correlation ratio)
    mi[alpha, j]     = I(1[f_j on]; z_alpha) in bits, "on" = gate s_j > 1/2    (a lower bound on I(f_j; z_alpha);
                                                                               NaN at the linear output level 0)
    spec[alpha, k]   = max_j corr(f_j, 1[z_alpha = k])                          (best-matching node per event)

and the same eta2 and mi against the events z_beta of ``controls`` *other* regions beta of the level (beta =
alpha + 1, ..., alpha + C mod R_l): a node selective for its own field scores higher against z_alpha than
against its neighbours'.  On a tree the neighbours' events are correlated with z_alpha through their common
ancestors, so the control is not zero; the analytic noise floors (:meth:`Alignment.floors`) are what a node
independent of every event reads from N examples.

All are functions of mergeable sums (:class:`AlignmentAccumulator`: counts, per-event sums of f and of the
on-state, sums of f and f^2), so they stream over batches, chunks and engines and merge exactly (float64).
:class:`LinearProbe` adds each region's linear-probe accuracy for z_alpha from its node group: least squares
on one-hot targets fitted on one set of rows (mergeable Gram sums), scored on held-out rows.

:func:`collect_alignment` runs a fixed student over in-memory tensors; :func:`accumulate_alignment` streams it
over any dataset (a sample, a chunked store, a path), one task per chunk on an engine (:mod:`teachers.engine`),
the chunks' states merged in chunk order, so the result does not depend on the engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from smaso.student.frequency import _check_batch_size, _run_batches, _student_chunks, _student_events, scatter_sums
from smaso.student.mergeable import MergeableSums
from smaso.student.network import LadderStudent, StudentRecord, _check_student

__all__ = ["DEFAULT_CONTROLS", "Alignment", "AlignmentAccumulator", "LinearProbe", "accumulate_alignment",
           "alignment_report", "alignment_rows", "collect_alignment"]

#: Other regions of the same level each region's control statistics use.
DEFAULT_CONTROLS = 4


def _entropy_bits(p: torch.Tensor, dim: int) -> torch.Tensor:
    return -(torch.where(p > 0, p * p.log2(), 0.0)).sum(dim)


@dataclass
class Alignment:
    """Event alignment of one student on one dataset (module docstring).  Per level ``l = 0..d-1`` (level 0:
    the output nodes against the label):

    :ivar eta2: ``(R_l, n_l)``; ``eta2_control``: ``(R_l, n_l)`` the mean over the control regions (NaN with
        one region).
    :ivar mi: ``(R_l, n_l)`` bits; ``mi_control`` likewise.
    :ivar spec: ``(R_l, M_l)`` max_j corr(f_j, 1[z = k]) (NaN for events never or always seen);
        ``spec_node``: ``(R_l, M_l)`` the best-matching node j.
    :ivar events: ``(R_l,)`` event counts m_alpha observed (events seen at least once).
    :ivar num_examples: N.
    """

    eta2: list[torch.Tensor]
    eta2_control: list[torch.Tensor]
    mi: list[torch.Tensor]
    mi_control: list[torch.Tensor]
    spec: list[torch.Tensor]
    spec_node: list[torch.Tensor]
    events: list[torch.Tensor]
    num_examples: int

    def floors(self, level: int) -> dict[str, float]:
        """What a node independent of every event reads from N examples (null expectations, level ``level``):
        eta2 (m - 1) / (N - 1); mi (m - 1) / (2 N ln 2) bits (Miller-Madow bias of the plug-in estimate);
        spec sqrt(2 ln(2 n) / N) (the largest of n null correlations); m the level's largest observed count."""
        n, m = self.num_examples, int(self.events[level].max())
        width = self.eta2[level].shape[-1]
        return {"eta2": (m - 1) / max(n - 1, 1), "mi": (m - 1) / (2 * n * math.log(2)),
                "spec": math.sqrt(2 * math.log(2 * width) / n)}

    def summary(self) -> list[dict[str, float]]:
        """Per level: the medians over nodes (eta2, mi, their controls) and over events (spec), and the
        floors."""
        out = []
        for l in range(len(self.eta2)):
            spec = self.spec[l][torch.isfinite(self.spec[l])]
            out.append({"level": l, "eta2": float(self.eta2[l].median()),
                        "eta2_control": float(self.eta2_control[l].nanmedian()),
                        "mi": float(self.mi[l].nanmedian()), "mi_control": float(self.mi_control[l].nanmedian()),
                        "spec": float(spec.median()) if spec.numel() else math.nan,
                        **{f"floor_{k}": v for k, v in self.floors(l).items()}})
        return out


class AlignmentAccumulator(MergeableSums):
    """Streams records into the sums of :class:`Alignment` (float64), for a student on any ladder.

    :param student: the student.
    :param controls: other regions of a level each region is also compared with (fewer where the level has
        fewer).
    """

    _SUMS = ("counts", "s", "on", "q", "t", "s_ctrl", "on_ctrl")

    def __init__(self, student: LadderStudent, controls: int = DEFAULT_CONTROLS):
        _check_student(student)
        if isinstance(controls, bool) or not isinstance(controls, int) or controls < 0:
            raise ValueError(f"controls: expected an integer >= 0, got {controls!r}")
        self.student, self.ladder = student, student.ladder
        lad, w, dev = self.ladder, student.widths, student.weights[0].device
        levels = range(lad.depth)
        self.controls = [min(controls, lad.num_regions[l] - 1) for l in levels]
        z64 = {"dtype": torch.float64, "device": dev}
        R, M = lad.num_regions, lad.events
        self.counts = [torch.zeros(R[l], M[l], **z64) for l in levels]
        self.s = [torch.zeros(R[l], M[l], w[l], **z64) for l in levels]
        self.on = [torch.zeros(R[l], M[l], w[l], **z64) for l in levels]
        self.q = [torch.zeros(R[l], w[l], **z64) for l in levels]
        self.t = [torch.zeros(R[l], w[l], **z64) for l in levels]
        self.s_ctrl = [torch.zeros(self.controls[l], R[l], M[l], w[l], **z64) for l in levels]
        self.on_ctrl = [torch.zeros(self.controls[l], R[l], M[l], w[l], **z64) for l in levels]
        self.n, self.loss_sum = 0, 0.0

    def add(self, rec: StudentRecord, z: torch.Tensor) -> None:
        """Add one batch: ``rec`` from ``student.forward_backward`` and its events ``z`` ``(N, total_regions)``."""
        lad = self.ladder
        z = _student_events(self.student, z, rec)
        off = lad.level_offsets
        z = z.to(self.counts[0].device, torch.int64)
        for l in range(lad.depth):
            ev, m = z[:, off[l]: off[l + 1]], lad.events[l]
            f = rec.f[l].to(torch.float64)  # (N, R, n)
            on = (rec.slope[l] > 0.5).to(torch.float64) if rec.slope[l] is not None else torch.ones_like(f)
            self.counts[l] += torch.nn.functional.one_hot(ev, m).sum(0).to(torch.float64)
            self.s[l] += scatter_sums(ev, f, m, torch.float64)
            self.on[l] += scatter_sums(ev, on, m, torch.float64)
            self.q[l] += f.square().sum(0)
            self.t[l] += f.sum(0)
            for c in range(self.controls[l]):
                other = ev.roll(-(c + 1), dims=1)  # region alpha's control: z of region alpha + c + 1
                self.s_ctrl[l][c] += scatter_sums(other, f, m, torch.float64)
                self.on_ctrl[l][c] += scatter_sums(other, on, m, torch.float64)
        self.n += z.shape[0]
        self.loss_sum += rec.loss * z.shape[0]

    def _eta2(self, counts: torch.Tensor, s: torch.Tensor, l: int) -> torch.Tensor:
        between = (s.square() / counts.clamp(min=1)[..., None]).sum(-2) - self.t[l].square() / self.n
        total = self.q[l] - self.t[l].square() / self.n
        return torch.where(total > 1e-12 * self.q[l].clamp(min=1e-300), between / total, 0.0).clamp(0, 1)

    def _mi(self, counts: torch.Tensor, on: torch.Tensor) -> torch.Tensor:
        pz = counts / self.n  # (R, M)
        p_on = on.sum(-2) / self.n  # (R, n)
        h = _entropy_bits(torch.stack([p_on, 1 - p_on]), 0)
        cond = on / counts.clamp(min=1)[..., None]  # P(on | z)
        h_cond = (pz[..., None] * _entropy_bits(torch.stack([cond, 1 - cond]), 0)).sum(-2)
        return (h - h_cond).clamp(min=0) + 0.0  # (no -0.0 where a node is never off)

    def result(self) -> Alignment:
        """The :class:`Alignment` of the rows added so far."""
        if self.n < 2:
            raise ValueError(f"the accumulator holds {self.n} example(s); alignment needs at least 2")
        eta2, eta2_c, mi, mi_c, spec, node, events = [], [], [], [], [], [], []
        for l in range(self.ladder.depth):
            cnt = self.counts[l]
            eta2.append(self._eta2(cnt, self.s[l], l))
            # the output level is linear (always "on"): its on-state MI is not defined
            mi.append(self._mi(cnt, self.on[l]) if l else torch.full_like(self.on[l][:, 0], math.nan))
            ctrl_counts = [cnt.roll(-(c + 1), dims=0) for c in range(self.controls[l])]
            eta2_c.append(torch.stack([self._eta2(k, s, l) for k, s in zip(ctrl_counts, self.s_ctrl[l],
                                                                             strict=True)]).mean(0)
                          if self.controls[l] else torch.full_like(eta2[-1], math.nan))
            mi_c.append(torch.stack([self._mi(k, o) for k, o in zip(ctrl_counts, self.on_ctrl[l], strict=True)])
                        .mean(0) if self.controls[l] and l else torch.full_like(mi[-1], math.nan))
            # corr(f_j, 1[z = k]) = (E[f 1_k] - E f P_k) / (sd_f sd_1k)
            p = cnt / self.n
            mean = self.t[l] / self.n
            sd_f = (self.q[l] / self.n - mean.square()).clamp(min=0).sqrt()
            cov = self.s[l] / self.n - p[..., None] * mean[:, None, :]
            denom = sd_f[:, None, :] * (p * (1 - p)).sqrt()[..., None]
            corr = torch.where(denom > 0, cov / denom.clamp(min=1e-300), math.nan)
            best, arg = corr.nan_to_num(-math.inf).max(-1)
            spec.append(torch.where(torch.isfinite(best), best, math.nan))
            node.append(arg)
            events.append((cnt > 0).sum(-1))
        return Alignment(eta2, eta2_c, mi, mi_c, spec, node, events, self.n)


class LinearProbe(MergeableSums):
    """Each region's linear-probe accuracy for its event z_alpha from its node group (level 0: the outputs).

    Fit: least squares of one-hot(z_alpha) on [f_alpha, 1] over the rows given to :meth:`add_fit` (ridge
    ``ridge`` times the mean diagonal of the Gram matrix, for groups with dead or copied nodes); score: the
    fraction of the rows given to :meth:`add_score` (held-out rows) whose argmax is z_alpha.  Both phases are
    sums over rows (the Gram sums, then the correct predictions and the scored rows' event counts), so chunks
    merge (:meth:`merge_`, also from a :meth:`state_dict` sent by another process).
    """

    _SUMS = ("gram", "cross", "correct", "counts")
    _COUNTS = {"n_fit": int, "n_score": int}

    def __init__(self, student: LadderStudent, ridge: float = 1e-8):
        _check_student(student)
        if not (isinstance(ridge, (int, float)) and math.isfinite(ridge) and ridge >= 0):
            raise ValueError(f"ridge: expected a finite number >= 0, got {ridge!r}")
        self.student, self.ladder, self.ridge = student, student.ladder, float(ridge)
        lad, w, dev = self.ladder, student.widths, student.weights[0].device
        z64 = {"dtype": torch.float64, "device": dev}
        self.gram = [torch.zeros(lad.num_regions[l], w[l] + 1, w[l] + 1, **z64) for l in range(lad.depth)]
        self.cross = [torch.zeros(lad.num_regions[l], w[l] + 1, lad.events[l], **z64) for l in range(lad.depth)]
        self.correct = [torch.zeros(lad.num_regions[l], **z64) for l in range(lad.depth)]
        self.counts = [torch.zeros(lad.num_regions[l], lad.events[l], **z64) for l in range(lad.depth)]
        self.n_fit, self.n_score, self.coef = 0, 0, None

    def _design(self, rec: StudentRecord, l: int) -> torch.Tensor:
        f = rec.f[l].to(torch.float64).transpose(0, 1)  # (R, N, n)
        return torch.cat([f, torch.ones(*f.shape[:2], 1, dtype=f.dtype, device=f.device)], -1)

    def add_fit(self, rec: StudentRecord, z: torch.Tensor) -> None:
        """Add fitting rows."""
        if self.coef is not None:
            raise RuntimeError("LinearProbe: already solved; add fitting rows before the first add_score")
        z = _student_events(self.student, z, rec)
        off = self.ladder.level_offsets
        for l in range(self.ladder.depth):
            x = self._design(rec, l)
            target = torch.nn.functional.one_hot(z[:, off[l]: off[l + 1]].long().T, self.ladder.events[l])
            self.gram[l] += x.transpose(1, 2) @ x
            self.cross[l] += x.transpose(1, 2) @ target.to(x)
        self.n_fit += z.shape[0]

    def _solve(self) -> None:
        if self.n_fit == 0:
            raise ValueError("LinearProbe: no fitting rows (call add_fit first)")
        self.coef = []
        for a, b in zip(self.gram, self.cross, strict=True):
            scale = a.diagonal(dim1=1, dim2=2).mean(-1).clamp(min=1e-300)[:, None, None]
            eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
            self.coef.append(torch.linalg.solve(a + self.ridge * scale * eye, b))

    def add_score(self, rec: StudentRecord, z: torch.Tensor) -> None:
        """Score held-out rows (solves the fit on the first call)."""
        z = _student_events(self.student, z, rec)
        if self.coef is None:
            self._solve()
        off = self.ladder.level_offsets
        for l in range(self.ladder.depth):
            ev = z[:, off[l]: off[l + 1]].long().to(self.counts[l].device)
            pred = (self._design(rec, l) @ self.coef[l]).argmax(-1)  # (R, N)
            self.correct[l] += (pred == ev.T.to(pred)).sum(-1).to(torch.float64)
            self.counts[l] += torch.nn.functional.one_hot(ev, self.ladder.events[l]).sum(0).to(torch.float64)
        self.n_score += z.shape[0]

    def merge_(self, other: LinearProbe | dict) -> LinearProbe:
        """Add another probe's sums (or its :meth:`state_dict`: the sums and the row counts ``n_fit``, ``n_score``,
        what a chunk's task sends back) of the same phase (fits before solving, scores after), in place; returns
        self.

        :raises TypeError: ``other`` is neither a probe of the same student nor a probe's state.
        :raises ValueError: the state's sums have other shapes or dtypes (another student or ladder).
        :raises RuntimeError: fitting rows merged into a probe already solved.
        """
        if isinstance(other, LinearProbe):
            if other.student is not self.student:
                raise TypeError("other: expected a LinearProbe of the same student")
            other = other.state_dict()
        if self.coef is not None and isinstance(other, dict) and other.get("n_fit"):
            raise RuntimeError("LinearProbe: already solved; merge fitting rows before the first add_score")
        return super().merge_(other)

    def accuracy(self) -> list[torch.Tensor]:
        """Held-out accuracy ``(R_l,)`` per level."""
        if self.n_score == 0:
            raise ValueError("LinearProbe: no held-out rows scored (call add_score)")
        return [c / self.n_score for c in self.correct]

    def chance(self, z: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The majority-event rate ``(R_l,)`` per level on events ``z`` ``(N, total_regions)``, by default on the
        rows scored so far: the probe's floor."""
        if z is None:
            if self.n_score == 0:
                raise ValueError("LinearProbe: no held-out rows scored (call add_score)")
            return [c.max(-1).values / self.n_score for c in self.counts]
        off, z = self.ladder.level_offsets, self.student.ladder_events(z)
        return [torch.nn.functional.one_hot(z[:, off[l]: off[l + 1]].long(), self.ladder.events[l]).double()
                .mean(0).max(-1).values for l in range(self.ladder.depth)]


def alignment_rows(alignment: Alignment | AlignmentAccumulator, probe: LinearProbe) -> list[dict]:
    """The report's rows, one per level: :meth:`Alignment.summary` plus ``probe`` (the mean held-out probe
    accuracy over the level's regions) and ``probe_chance`` (the mean majority-event rate of the scored rows,
    the probe's floor).  ``alignment_rows(*accumulate_alignment(student, source))`` is
    :func:`alignment_report` streamed.

    :param alignment: an :class:`Alignment` or the accumulator of one; ``probe``: a :class:`LinearProbe` that
        has scored rows.
    """
    if isinstance(alignment, AlignmentAccumulator):
        alignment = alignment.result()
    if not isinstance(alignment, Alignment):
        raise TypeError(f"alignment: expected an Alignment or an AlignmentAccumulator, got "
                        f"{type(alignment).__name__}")
    if not isinstance(probe, LinearProbe):
        raise TypeError(f"probe: expected a LinearProbe, got {type(probe).__name__}")
    return [{**row, "probe": float(p.mean()), "probe_chance": float(c.mean())}
            for row, p, c in zip(alignment.summary(), probe.accuracy(), probe.chance(), strict=True)]


def alignment_report(student: LadderStudent, x: torch.Tensor, z: torch.Tensor, **kwargs) -> list[dict]:
    """:func:`collect_alignment` as rows, one per level (:func:`alignment_rows`: the summary, ``probe`` and
    ``probe_chance``)."""
    return alignment_rows(*_collect(student, x, z, **kwargs))


def _check_fit_rows(fit_rows, n: int) -> int:
    fit = n // 2 if fit_rows is None else fit_rows
    if isinstance(fit, bool) or not isinstance(fit, int) or not 0 < fit < n:
        raise ValueError(f"fit_rows: expected an integer in 1..{n - 1}, got {fit_rows!r}")
    return fit


def _collect(student: LadderStudent, x: torch.Tensor, z: torch.Tensor, *, fit_rows: int | None = None,
             batch_size: int = 4096, controls: int = DEFAULT_CONTROLS) -> tuple[AlignmentAccumulator, LinearProbe]:
    """The accumulator and the scored probe of :func:`collect_alignment`."""
    _check_student(student)
    if not isinstance(x, torch.Tensor) or not isinstance(z, torch.Tensor) or x.shape[0] != z.shape[0]:
        raise ValueError("x, z: expected tensors with the same number of rows")
    n = x.shape[0]
    fit = _check_fit_rows(fit_rows, n)
    bs = _check_batch_size(batch_size)
    acc, probe = AlignmentAccumulator(student, controls), LinearProbe(student)
    for add, (lo, hi) in ((probe.add_fit, (0, fit)), (probe.add_score, (fit, n))):
        rows = [slice(s, min(s + bs, hi)) for s in range(lo, hi, bs)]
        _run_batches(student, ((x[r], z[r, 0], z[r]) for r in rows), "squared", acc.add, add)
    return acc, probe


def collect_alignment(student: LadderStudent, x: torch.Tensor, z: torch.Tensor, *, fit_rows: int | None = None,
                      batch_size: int = 4096, controls: int = DEFAULT_CONTROLS) -> tuple[Alignment, list]:
    """Alignment of a fixed student on ``(x, z)``, and the linear probes' held-out accuracies.

    :param x: ``(N, R_d, dim)`` inputs; ``z``: ``(N, total_regions)`` events (the label is ``z[:, 0]``).
    :param fit_rows: the first ``fit_rows`` rows fit the probes, the rest score them (default: half).
    :returns: ``(alignment over all rows, [probe accuracy (R_l,) per level])``.
    """
    acc, probe = _collect(student, x, z, fit_rows=fit_rows, batch_size=batch_size, controls=controls)
    return acc.result(), probe.accuracy()


def _chunk_alignment(c: int, student: LadderStudent, chunks, fit: int, batch_size: int, controls: int,
                     coef: list | None) -> tuple[dict, dict]:
    """The task of one chunk (any process): its rows of one phase, in batches of ``batch_size``, into fresh
    sums.  Phase fit (``coef`` None): the chunk's rows before row ``fit``; phase score: those from row ``fit`` on,
    scored with the solved coefficients ``coef``.

    :returns: the states of the :class:`AlignmentAccumulator` and the :class:`LinearProbe`.
    """
    lo, hi = chunks.chunk_bounds(c)
    a, b = (0, min(hi, fit) - lo) if coef is None else (max(lo, fit) - lo, hi - lo)  # rows of the chunk
    part = chunks.chunk(c)
    acc, probe = AlignmentAccumulator(student, controls), LinearProbe(student)
    probe.coef = coef
    wdt = student.weights[0].dtype
    rows = [slice(s, min(s + batch_size, b)) for s in range(a, b, batch_size)]
    _run_batches(student, ((part.inputs(r, wdt), part.z[r, 0].long(), part.z[r].long()) for r in rows), "squared",
                 acc.add, probe.add_fit if coef is None else probe.add_score)
    return acc.state_dict(), probe.state_dict()


def accumulate_alignment(student: LadderStudent, source, *, engine=None, fit_rows: int | None = None,
                         batch_size: int = 4096, controls: int = DEFAULT_CONTROLS,
                         progress: bool = False) -> tuple[AlignmentAccumulator, LinearProbe]:
    """:func:`collect_alignment` streamed over any dataset, chunk by chunk, on any engine: the mergeable sums.

    The first ``fit_rows`` rows of the stream fit the probes, the rest score them, in two phases: the chunks
    holding fitting rows (alignment sums and Gram sums), the solve, then the chunks holding scored rows
    (alignment sums and correct predictions; the chunk across the boundary takes part in both, each phase with
    its own rows).  So every row is run through the student once, and memory is one chunk and one batch per task
    plus the sums, whatever N is (one pass that also scored would have to keep the scored rows' activations
    until the solve).  Each chunk of a phase is one task (as :func:`~smaso.student.frequency.accumulate_statistics`),
    batched by ``batch_size`` within the chunk and phase (BN normalizes each batch by its own statistics), and
    the states are merged in chunk order: the sums do not depend on the engine, bit for bit.

    :param source: a :class:`~teachers.sampling.LadderSample`, a :class:`~teachers.chunked.ChunkedLadderData`
        or dataset path(s), of the student's teacher ladder (chunks: :func:`~teachers.chunked.as_chunks`).
    :param engine: None (this process), or a :class:`~teachers.engine.DaskEngine`.
    :param fit_rows: rows fitting the probes (default: half); ``controls``: as :class:`AlignmentAccumulator`.
    :returns: ``(accumulator, probe)``: ``accumulator.result()`` is the :class:`Alignment` of every row,
        ``probe.accuracy()`` and ``probe.chance()`` the held-out accuracies and their floors;
        :func:`alignment_rows` makes the report's rows of both.
    """
    from teachers.engine import get_engine

    _check_student(student)
    bs = _check_batch_size(batch_size)
    chunks = _student_chunks(student, source)
    fit = _check_fit_rows(fit_rows, len(chunks))
    acc, probe = AlignmentAccumulator(student, controls), LinearProbe(student)
    eng = get_engine(engine)

    def merge(total: tuple, part: tuple[dict, dict]) -> tuple:
        return total[0].merge_(part[0]), total[1].merge_(part[1])

    bounds = [chunks.chunk_bounds(c) for c in range(chunks.num_chunks)]
    for phase, todo in enumerate(([c for c, (lo, _) in enumerate(bounds) if lo < fit],
                                  [c for c, (_, hi) in enumerate(bounds) if hi > fit])):
        if phase:
            probe._solve()
        eng.fold(_chunk_alignment, todo, student, chunks, fit, bs, controls,
                 probe.coef, merge=merge, init=(acc, probe),
                 progress=f"alignment ({'score' if phase else 'fit'})" if progress else None)
    return acc, probe
