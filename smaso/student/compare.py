"""Student versus reformulation: train on a ladder sample, measure, predict, compare, diagnose.

At chosen training steps :func:`compare_student` collects the student's frequency statistics
(:mod:`smaso.student.frequency`), predicts them with the reformulation (:mod:`smaso.student.reformulation`),
and reports per level the relative errors of F, G~ and Delta W with Thm 2's diagnosis
(:func:`~smaso.student.diagnosis.compare_statistics_to_theory`, re-exported here with :func:`diagnose`), on any
ladder.  :func:`noise_sweep` relaxes Thm 3's delta condition (noisier leaves), :func:`errors_against_n` grows N.
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from smaso.student import training as _training
from smaso.student.alignment import TABLE_LEGEND, accumulate_alignment, alignment_rows, undefined_note
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig, _configs
from smaso.student.data_size import errors_against_n
from smaso.student.diagnosis import CONTRIBUTIONS, compare_statistics_to_theory, diagnose, nonfinite_statistics
from smaso.student.frequency import (
    FrequencyStatistics,
    _check_label_range,
    accumulate_statistics,
    collect_statistics,
)
from smaso.student.network import LadderStudent, _check_float_dtype, _check_int
from smaso.student.reformulation import Reformulation, reformulate
from smaso.student.rows import _all_training_labels, _evaluation_rows, _head, _training_batches
from smaso.student.training import TrainingDiverged, check_hyper
from teachers.emission import GaussianEmission, OneHotEmission
from teachers.ladder import Ladder
from teachers.sampling import LadderSample, _device, sample_ladder
from teachers.statistics import exact_statistics

if TYPE_CHECKING:
    from teachers.chunked import DataSource
    from teachers.engine import DaskEngine, SerialEngine

__all__ = ["CONTRIBUTIONS", "ComparisonResult", "EvaluationConfig", "StudentConfig", "TrainingConfig",
           "TrainingDiverged", "compare_statistics_to_theory", "compare_student", "diagnose", "errors_against_n",
           "noise_sweep"]


#: A training loss this many times its first value (or above it when that is below 1) stops the run.
DIVERGED = 1e8
#: ``optimizer=`` names of :func:`compare_student` (any other ``torch.optim`` optimizer: pass a callable).
OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop")
#: Relative improvement of the smoothed training loss that resets the plateau counter.
PLATEAU_TOL = 1e-3


def _optimizer(student: LadderStudent, optimizer: str | Callable[..., torch.optim.Optimizer], lr: float, steps: int,
               lr_schedule: str | None) -> Any:
    """``(torch optimizer, scheduler)`` for :func:`compare_student`, or ``(None, None)`` for the plain Eq 2 step."""
    if optimizer == "sgd" and lr_schedule is None:
        return None, None
    if isinstance(optimizer, str):
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer: expected one of {OPTIMIZERS} or a callable params -> torch.optim.Optimizer, "
                             f"got {optimizer!r}")
        opt = getattr(torch.optim, {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW", "rmsprop": "RMSprop"}[optimizer])(
            student.parameters(), lr=lr)
    elif callable(optimizer):
        opt = optimizer(student.parameters())
        if not isinstance(opt, torch.optim.Optimizer):
            raise TypeError(f"optimizer: the callable returned {type(opt).__name__}, expected a torch.optim.Optimizer")
    else:
        raise TypeError(f"optimizer: expected a name or a callable, got {type(optimizer).__name__}")
    schedule = _read_lr_schedule(lr_schedule)
    if schedule is None:
        return opt, None
    if schedule == "cosine":
        return opt, torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(steps, 1))
    return opt, torch.optim.lr_scheduler.StepLR(opt, *schedule)


def _read_lr_schedule(lr_schedule: str | None) -> str | tuple[int, float] | None:
    """``lr_schedule`` read: None (None or ``"none"``), ``"cosine"``, or ``(N, GAMMA)`` of ``"step:N:GAMMA"`` (lr
    times GAMMA every N steps); a ValueError naming ``lr_schedule`` otherwise (the CLI reads it before any work)."""
    if lr_schedule is None or lr_schedule == "none":
        return None
    if lr_schedule == "cosine":
        return "cosine"
    parts = lr_schedule.split(":") if isinstance(lr_schedule, str) else []
    try:
        if len(parts) == 3 and parts[0] == "step" and int(parts[1]) > 0 and 0 < float(parts[2]) <= 1:
            return int(parts[1]), float(parts[2])
    except ValueError:
        pass
    raise ValueError(f"lr_schedule: expected None, 'none', 'cosine' or 'step:N:GAMMA' (N > 0, 0 < GAMMA <= 1), got "
                     f"{lr_schedule!r}")


#: The comparison's columns in words (``smaso demo`` prints them where the columns appear; the README's words).
ERROR_WORDS = (
    "errors = ||predicted - measured||_F / ||measured||_F (0: exact; 1: as far off as predicting 0);\n"
    "recursion = the full recursion of Eq 9 (Thm 4): every level predicted from predicted neighbours, F from the "
    "leaves up and G~ from\n  the top down, so errors compound over levels (values above 1 are possible); "
    "one step = one level predicted from its\n  measured neighbours (Thm 2), at most the sum of its two parts: "
    "focus (F, dW) or broadness (G~) of the teacher's knowledge,\n  and the student's decorrelation")


def _num(v: float, width: int, digits: int) -> str:
    """``v`` in a column of ``width``, or ``n/a`` where undefined (NaN; the table's notes say why)."""
    return f"{'n/a':>{width}}" if v is None or math.isnan(v) else f"{v:{width}.{digits}f}"


def _alignment_na(rows: list[dict]) -> list[str]:
    """Why a whole column of the alignment table is undefined at some level, in words (NaN in the JSON)."""
    out = []
    one = [r["level"] for r in rows if math.isnan(r["eta2_control"])]
    if one:
        out.append(f"[nbr] at level{'s' if len(one) > 1 else ''} {', '.join(map(str, one))}: a level of one region "
                   "(the root's) has no neighbouring region whose events could serve as the control")
    if any(r["level"] == 0 and math.isnan(r["mi"]) for r in rows):
        out.append("MI at level 0: the linear output nodes have no gate, so no on/off state to carry information "
                   "about the event (MI is measured on the gate's state)")
    return out


def _mean_errors(levels: list[dict]) -> dict[str, float]:
    """The relative errors of Eq 9 (``F``, ``G``, ``dW``; the full recursion), averaged over ``levels``."""
    return {k: sum(r[f"{k}_propagated"] for r in levels) / len(levels) for k in ("F", "G", "dW")}


@dataclass
class ComparisonResult:
    """History of a training run with comparisons at checkpoints."""

    history: list[dict] = field(default_factory=list)
    student: LadderStudent | None = None
    final_stats: FrequencyStatistics | None = None
    final_prediction: Reformulation | None = None
    seconds: float = 0.0
    stopped_at: int | None = None

    def max_error(self, keys: Sequence[str] | None = None) -> float:
        """The largest of ``keys`` (default :data:`ERROR_KEYS`: the errors of Eq 9, full recursion and one step) over
        every level and checkpoint: the run's worst error, as Thm 3's exactness is checked.  NaN where any of them is
        undefined (a 0/0 of a dead level, ``history[i]["degenerate"]`` says why): a degenerate run is never exact."""
        values = [row[k] for h in self.history for row in h["levels"] for k in (ERROR_KEYS if keys is None else keys)
                  if k in row]
        if not values:
            raise ValueError("result: no checkpoint holds the errors asked for")
        return math.nan if any(math.isnan(v) for v in values) else max(values)

    def final(self) -> dict:
        """The last checkpoint's row of :attr:`history` (step, accuracy, per-level errors, diagnosis)."""
        return self.history[-1]

    def _trained(self) -> tuple[LadderStudent, FrequencyStatistics, Reformulation]:
        """``(student, final_stats, final_prediction)``, typed as set: :func:`compare_student` sets all three; a
        result built by hand (its history only) gets a ValueError naming those that are None."""
        student, stats, pred = self.student, self.final_stats, self.final_prediction
        if student is None or stats is None or pred is None:
            missing = [k for k, v in (("student", student), ("final_stats", stats), ("final_prediction", pred))
                       if v is None]
            raise ValueError(f"result: {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} None (set by "
                             "compare_student, which this result does not come from)")
        return student, stats, pred

    def __repr__(self) -> str:
        """A few lines: checkpoints, the last one's loss, accuracy and mean errors, and the sizes of the
        student and statistics (not their tensors; :meth:`table` prints the comparison in full)."""
        lines = [f"ComparisonResult({len(self.history)} checkpoints, {self.seconds:.2f} s"]
        if self.history:
            last = self.history[-1]
            lv = last.get("levels") or []
            lines[0] += f", steps {self.history[0].get('step')}..{last.get('step')}"
            lines.append(f"  final: loss {last.get('loss', float('nan')):.4g}, "
                         f"accuracy {last.get('accuracy', float('nan')):.4g}")
            if lv and all(f"{k}_propagated" in r for r in lv for k in ("F", "G", "dW")):
                mean = _mean_errors(lv)
                lines.append(f"  relative error of Eq 9, mean over {len(lv)} levels: F {mean['F']:.2e}, "
                             f"G~ {mean['G']:.2e}, dW {mean['dW']:.2e}")
        st = self.student
        if st is not None:
            lines.append(f"  student: {type(st).__name__}(widths={getattr(st, 'widths', '?')}, "
                         f"{sum(p.numel() for p in st.parameters())} parameters)")
        if self.final_stats is not None:
            lines.append(f"  final_stats: {type(self.final_stats).__name__}"
                         f"(num_examples={getattr(self.final_stats, 'num_examples', '?')})")
        if self.final_prediction is not None:
            lines.append(f"  final_prediction: {type(self.final_prediction).__name__}")
        return "\n".join(lines) + ")"

    def alignment_table(self, *, checkpoints: int | None = None, legend: bool = False) -> str:
        """Event alignment against training step, level by level (what ``smaso demo`` prints).  Columns: eta2, the
        median over nodes of the share of a node's variance explained by its region's event [nbr: the same against
        the neighbouring regions' events, a control] (the null floor); MI, the median on-state mutual information
        with the event in bits [nbr] (floor); spec, the median over event indicators 1[z = k] of the best node's
        correlation (floor); match, the indicators whose best node's correlation is at least the threshold (0.95,
        the paper authors'), of those with a defined best node; kept, the fraction of indicators whose best node
        is the one that was best at the first checkpoint; dead, the nodes whose gate is never on, of all; probe,
        the held-out linear probe's accuracy (the majority rate).  Medians leave out the entries not scored (NaN: a
        node with a constant value, a gate never or always on), and notes under the table say which at the last
        checkpoint shown.  Levels are the student's (with a readout, level 1
        is the readout group, whose event is the label, and level l + 1 the teacher's level l).

        :param checkpoints: show about this many checkpoints, evenly spaced, the first and the last among them
            (None: all).
        :param legend: end with the columns' definitions in plain words
            (:data:`~smaso.student.alignment.TABLE_LEGEND`).
        """
        rows = [h for h in self.history if "alignment" in h]
        if not rows:
            raise ValueError("result: no checkpoint measured the alignment (EvaluationConfig(alignment=False) turned "
                             "it off)")
        if checkpoints is not None and len(rows) > checkpoints > 1:
            rows = [rows[round(i * (len(rows) - 1) / (checkpoints - 1))] for i in range(checkpoints)]
        lines = ["step level |   eta2  [nbr]  (floor) |   MI bits [nbr]  (floor) |  spec (floor) |  match |  kept "
                 "|  dead | probe (chance)"]
        for h in rows:
            for r in h["alignment"]:
                match = f"{r['matched']:>3d}/{r['indicators']:<3d}" if "matched" in r else "    -   "
                kept = f"{r['kept']:5.2f}" if r.get("kept") is not None and r["kept"] == r["kept"] else "    -"
                dead = f"{r['dead']:>2d}/{r['nodes']:<3d}" if "dead" in r else "    -  "
                lines.append(f"{h['step']:4d} {r['level']:5d} | {_num(r['eta2'], 6, 3)} "
                             f"[{_num(r['eta2_control'], 5, 3)}] ({r['floor_eta2']:.0e}) | {_num(r['mi'], 6, 3)}   "
                             f"[{_num(r['mi_control'], 5, 3)}] "
                             f"({r['floor_mi']:.0e}) | {r['spec']:5.3f} ({r['floor_spec']:.3f}) | {match}| {kept} "
                             f"| {dead}| {r['probe']:5.3f} ({r['probe_chance']:.3f})")
        # the nodes not scored at the last checkpoint shown, in words, and why a whole column is n/a
        notes = [f"  step {rows[-1]['step']}, {note}" for r in rows[-1]["alignment"]
                 if "dead" in r and (note := undefined_note(r))]
        notes += [f"  n/a: {why}" for why in _alignment_na(rows[-1]["alignment"])]
        return "\n".join(lines + notes + ([TABLE_LEGEND] if legend else []))

    def table(self, *, every: int = 1, last_checkpoint: bool = True) -> str:
        """The comparison as text (what ``smaso demo`` prints): the training curve (mean relative
        error of Eq 9 over levels for F, G~, Delta W, every ``every``-th checkpoint and the last),
        then (``last_checkpoint``) the last checkpoint level by level: errors of the full recursion and of one
        step from measured neighbours, and the size of each of Thm 2's error terms (see :func:`diagnose`)."""
        if not self.history:
            raise ValueError("result: the comparison has no checkpoints")
        if every < 1:
            raise ValueError(f"every: expected a positive integer, got {every!r}")
        hist = self.history
        last = hist[-1]
        acc = {"held-out": "held-out acc", "training": " train acc"}.get(last.get("evaluation", ""), "  accuracy")
        lines = [f"step    loss {acc} | relative error of the reformulation, mean over levels (F / G~ / dW)"]
        for h in hist[::every] if hist[-1] in hist[::every] else [*hist[::every], hist[-1]]:
            mean = _mean_errors(h["levels"])
            lines.append(f"{h['step']:5d} {h['loss']:8.4f}   {h['accuracy']:10.4f} | "
                         + " ".join(f"{'n/a':>9}" if math.isnan(mean[q]) else f"{mean[q]:9.2e}" for q in mean))
        degenerate = [h for h in hist if h.get("degenerate")]
        if degenerate:
            lines.append(f"n/a: some numbers are undefined (a 0/0, not an exact prediction) at {len(degenerate)} of "
                         f"{len(hist)} checkpoints, steps {degenerate[0]['step']}..{degenerate[-1]['step']}"
                         + (" (why: below)" if last_checkpoint and last.get("degenerate") else
                            ": " + "; ".join(degenerate[-1]["degenerate"])))
        if not last_checkpoint:
            return "\n".join(lines)
        floors = "noise_groups" in last
        w = 17 if floors else 8
        lines += ["",
                  f"at step {last['step']} (P: {last['P_source']} frequencies of {last['num_examples']} examples"
                  + (f"; noise floors [in brackets] from a {last['noise_groups']}-group jackknife, * = within noise"
                     + (", ? = floor over-estimated through BN" if any("floor_over_estimated" in r
                                                                      for r in last["levels"]) else "")
                     if floors else "") + ")",
                  ERROR_WORDS,
                  f"{'level':>5} {'':3} {'recursion':>{w}} {'one step':>{w}} | "
                  f"{'part: focus / broadness':>{w + 10}} {'part: decorrelation':>{w + 14}}"]
        for r in last["levels"]:
            for q, label in (("F", "F"), ("G", "G~"), ("dW", "dW")):
                a, b = (f"{q}_local_{part}" for part in CONTRIBUTIONS[f"{q}_local"])
                head = f"{r['level']:5d}" if q == "F" else " " * 5
                lines.append(f"{head} {label:3} {self._fmt(r, f'{q}_propagated')} {self._fmt(r, f'{q}_local')} | "
                             f"{'focus' if q != 'G' else 'broad':>9} {self._fmt(r, a)} "
                             f"{'decorrelation':>13} {self._fmt(r, b)}")
            if r["empty_events"]:
                lines.append(f"{'':5} ({r['empty_events']} events never seen)")
        lines += ["", "Thm 2's conditions, measured (0 when the condition holds):",
                  f"{'level':>5} " + " ".join(f"{k:>{w}}" for k in
                                              ("decorr. fwd", "decorr. bwd", "decorr. dW", "focus", "broadness"))]
        keys = ("decorrelation_fwd", "decorrelation_bwd", "decorrelation_dW", "focus", "broadness")
        for r in [*last["levels"], {**last["leaves"], "level": "leaves"}]:
            lines.append(f"{r['level']:>5} " + " ".join(self._fmt(r, k) for k in keys))
        if last.get("degenerate"):
            lines += ["", "n/a: undefined (NaN in the JSON), which says nothing about the reformulation; why:",
                      *(f"  - {why}" for why in last["degenerate"])]
        if "eq7" in last:
            e7 = last["eq7"]
            ce = e7.get("loss", "cross_entropy") == "cross_entropy"
            why = ("softmax: g_j(y=j) > 0 > g_j(y!=j)" if ce else
                   "squared loss: g_j(y=j) > 0 > g_j(y!=j), not guaranteed: it needs E[f_j|y=j] < 1 and "
                   "E[f_j|y!=j] > 0")
            if e7["holds"]:
                lines.append(f"Eq 7 ({why}) holds for every class; smallest margin {e7['worst_margin']:.3g}")
            else:
                lines.append(
                    f"Eq 7 ({why}) does not hold: at class {e7['worst_class']} an output gradient has the wrong sign "
                    f"(margin {e7['worst_margin']:.3g}).\n  So the top gradient is not the paper's 'raise the own "
                    "class, lower the others' (a1 [j = y] - a2 [j != y]); the\n  reformulation above does not assume "
                    "it (it uses the measured top gradient I - F), so its errors stand")
        return "\n".join(lines)

    @staticmethod
    def _fmt(row: dict, key: str) -> str:
        """``value [floor]*`` (the star: within noise), or ``-`` where the number is not defined."""
        floors = f"{key}_floor" in row or "within_noise" in row
        if key not in row or math.isnan(row[key]):  # not measured here, or undefined (its reason is listed)
            return f"{'-' if key not in row else 'n/a':>{17 if floors else 8}}"
        if not floors:
            return f"{row[key]:8.2e}"
        star = "*" if key in row.get("within_noise", ()) else "?" if key in row.get("floor_over_estimated", ()) else " "
        return f"{row[key]:8.2e} [{row[f'{key}_floor']:5.0e}]{star}"


def _check_alignment(alignment: Any, ladder: Ladder) -> Any:
    """``compare_student``'s ``alignment`` rows as a dataset (a path loaded), or None."""
    if alignment is None:
        return None
    if isinstance(alignment, (str, bytes, list)) or hasattr(alignment, "__fspath__"):
        from teachers.dataset import load_dataset

        alignment = load_dataset(alignment)
    if not (isinstance(alignment, LadderSample) or hasattr(alignment, "chunk")) \
            or getattr(alignment, "z", True) is None or alignment.ladder.fingerprint() != ladder.fingerprint() \
            or len(alignment) < 4:
        raise ValueError("alignment: expected a dataset of at least 4 rows, with its events z, of the sample's "
                         "ladder")
    return alignment


def _check_dtype_device(dtype: Any, device: Any) -> None:
    """:func:`compare_student`'s ``dtype`` (a floating torch.dtype) and ``device`` (a torch device that holds
    values: not ``"meta"``), refused up front with a ValueError naming the argument."""
    _check_float_dtype(dtype)
    if _device(device).type == "meta":
        raise ValueError(f"device: {device!r} tensors have no values (the comparison reads the student's "
                         "statistics); expected a device such as 'cpu' or 'cuda'")


def compare_student(sample: DataSource, student: StudentConfig | None = None, training: TrainingConfig | None = None,
                    evaluation: EvaluationConfig | None = None, *, device: torch.device | str | None = None,
                    engine: SerialEngine | DaskEngine | None = None, progress: bool = False,
                    _replay: Callable[[LadderStudent, int], None] | None = None,
                    _statistics: Callable[..., tuple[Any, int]] | None = None, _alignment_ends: bool = False,
                    _last_checkpoints: int | None = None, **legacy: Any) -> ComparisonResult:
    """Train a :class:`LadderStudent` on ``sample`` by (S)GD and compare it with the reformulation.

    Training reads minibatches chunk by chunk (each epoch a seeded random order of the chunks and of their
    rows), so a chunked store of any size trains in the memory of one chunk; an in-memory sample is cut into
    chunks of ``DEFAULT_CHUNK_ROWS`` rows, so a ``.npz`` file and a store of the same rows give the same run.

    :param sample: a :class:`~teachers.sampling.LadderSample`, a :class:`~teachers.chunked.ChunkedLadderData`
        or dataset path(s); it needs every latent event z.
    :param student: the network, :class:`~smaso.student.config.StudentConfig` (None: its defaults).
    :param training: how it is trained, :class:`~smaso.student.config.TrainingConfig` (None: its defaults).
    :param evaluation: what is measured where, :class:`~smaso.student.config.EvaluationConfig` (None: its
        defaults).  The defaults are those of ``smaso demo`` and ``smaso compare`` (one set, in
        :mod:`smaso.student.config`).
    :param device: torch device of the student's training and evaluation (None: cpu).
    :param engine: where the streamed evaluation and the alignment run (None: this process; a
        :class:`~teachers.engine.DaskEngine`: one task per chunk).
    :param progress: a tqdm bar over the training steps.
    :param legacy: deprecated: the configs' fields as keywords (``width=16, steps=300``), mapped onto the configs
        with a :class:`DeprecationWarning`; a keyword that is no config field is a TypeError.
    :param _replay: private (:func:`~smaso.student.population.compare_population`): called as ``_replay(net, step)``
        in place of training step ``step``, it gives ``net`` the weights a batched population trained (or raises
        where that member diverged); the checkpoints measure them as they measure a trained student.
    :param _statistics: private (the same): called as ``_statistics(step, net, rows, **kw)`` in place of
        :func:`~smaso.student.frequency.accumulate_statistics` ``(net, rows, **kw)`` at a streamed checkpoint (a
        population's members measured in one batched pass, :mod:`smaso.student.member_statistics`).
    :param _alignment_ends: private (``smaso demo``'s shuffled-label control, whose last alignment alone is read,
        ranked at its first): the alignment at the first and the last checkpoint only, the same rows there.
    :param _last_checkpoints: private (``smaso demo``'s other seeds, of which the summary over seeds reads the first
        checkpoint and the last few): the first checkpoint and the last this many only, the same rows there.

    The configs' fields in detail (see also their classes):

    - ``student.bn_eps``: BN's eps (0: Thm 5's exact projection; fails on a node constant over the batch).
    - ``training.batch_size``: SGD minibatch (``None``: full-batch GD, for an in-memory sample only).
    - ``evaluation.eval_every``: compare every this many steps (and at steps 0 and ``steps``).
    - ``evaluation.eval_examples``: the first this many examples (of the evaluation rows, see ``held_out``) form the
        evaluation set; ``None``: every evaluation row.  Without BN the set is run in batches of
        ``eval_batch_size`` and their sums merged exactly (:func:`~smaso.student.frequency.accumulate_statistics`:
        the statistics of the whole set, in the memory of one batch).  With BN an in-memory evaluation set is
        one batch (the reformulation describes full-batch statistics), and a chunked dataset with ``None`` is
        streamed chunk by chunk in batches of ``eval_batch_size``, BN normalizing each batch by its own
        statistics.
    - ``evaluation.held_out``: where the statistics, the accuracy and every error are measured.  ``True`` (default):
        on the first ``eval_examples`` rows of ``sample``, which are then never trained on; ``False``: on the
        first ``eval_examples`` rows, trained on like the rest (the statistics of training rows: Thm 3's
        exactness under full-batch GD is a statement about them); a dataset of the same ladder (a
        :class:`~teachers.sampling.LadderSample`, a chunked dataset or a path): on its rows, and every row of
        ``sample`` is trained on.  History rows name it in ``"evaluation"`` (``"held-out"`` or
        ``"training"``).
    - ``evaluation.P_source``: ``"empirical"`` (frequencies of the evaluation set) or ``"exact"`` (the
        ladder's tables).
    - ``student.shared``: share the student's weights per child place (:class:`LadderStudent`'s ``shared``).
    - ``student.readout``: a readout group of this many nodes at the root (:class:`LadderStudent`'s ``readout``).
    - ``evaluation.alignment``: the event alignment of the hidden nodes at every checkpoint (on by default),
        streamed on ``engine`` (:func:`~smaso.student.alignment.accumulate_alignment`: the rows' first half fits the
        linear probes, the second half scores them), on the evaluation set (``True``: the rows of ``held_out``,
        held out unless ``held_out=False``) or on a dataset of the same ladder, never trained on; the history rows
        then carry ``"alignment"``, one dict per level (:meth:`ComparisonResult.alignment_table`).
    - ``evaluation.noise_groups``: row groups of the jackknife that gives every number its noise floor
        (:mod:`smaso.student.noise`); ``None``: no floors.
    - ``training.optimizer``: ``"sgd"`` (the plain step W += lr Delta W of Eq 2), ``"adam"``, ``"adamw"``,
        ``"rmsprop"``, or a callable ``params -> torch.optim.Optimizer``: the explicit backward fills ``.grad``
        (:meth:`LadderStudent.fill_grad`), so the recorded Delta W is Eq 2's gradient whatever steps on it.
    - ``training.lr_schedule``: None, ``"cosine"`` (to 0 at ``steps``) or ``"step:N:GAMMA"`` (lr times GAMMA every
        N steps).
    - ``training.plateau``: stop early once the smoothed training loss (an exponential average over about 20 steps) has
        not improved by :data:`PLATEAU_TOL` (relative) for this many steps; the stopping step is a checkpoint, and
        :attr:`ComparisonResult.stopped_at` names it.
    - ``training.shuffle_labels``: the shuffled-label control: train on the sample with its training rows' labels
        permuted (a fixed permutation drawn from ``seed``, per chunk, so the same in every epoch; held-out rows
        never enter it), everything else as without it: the same initial weights, minibatch rows and order,
        and the same evaluation rows, measured with their own labels and events z (so each number compares
        with the trained run's).  History rows then carry ``"shuffled_labels": True``.
    :returns: :class:`ComparisonResult` with one history row per checkpoint: step, loss,
        accuracy and the per-level errors and diagnosis.
    :raises TrainingDiverged: a non-finite or exploding loss, weight or statistic.
    """
    from tqdm.auto import tqdm

    from teachers.chunked import as_chunks

    cfg_s, cfg_t, cfg_e = _configs(student, training, evaluation, legacy)
    width, activation, batch_norm, bn_eps, bias, shared = (
        cfg_s.width, cfg_s.activation, cfg_s.batch_norm, cfg_s.bn_eps, cfg_s.bias, cfg_s.shared)
    dtype = torch.float64 if cfg_s.dtype is None else cfg_s.dtype
    readout = cfg_s.readout
    steps, lr, batch_size, loss, optimizer, lr_schedule, weight_decay, plateau, seed, shuffle_labels = (
        cfg_t.steps, cfg_t.lr, cfg_t.batch_size, cfg_t.loss, cfg_t.optimizer, cfg_t.lr_schedule, cfg_t.weight_decay,
        cfg_t.plateau, cfg_t.seed, cfg_t.shuffle_labels)
    eval_every, eval_examples, eval_batch_size, held_out, P_source, noise_groups, alignment = (
        cfg_e.eval_every, cfg_e.eval_examples, cfg_e.eval_batch_size, cfg_e.held_out, cfg_e.P_source,
        cfg_e.noise_groups, cfg_e.alignment)
    full = sample if isinstance(sample, LadderSample) else None  # an in-memory sample (full-batch GD needs one)
    if full is None and not hasattr(sample, "chunk"):
        raise TypeError(f"sample: expected a LadderSample or a ChunkedLadderData, got {type(sample).__name__}")
    _check_dtype_device(dtype, device)
    chunks = as_chunks(sample)
    lad = chunks.ladder
    if full is not None and (full.z is None or full.z.shape[1] != lad.total_regions):
        raise ValueError("sample: the dataset must hold every latent event z of its ladder")
    if len(chunks) == 0:
        raise ValueError("sample: the dataset has no rows (0 examples); compare_student needs at least one example "
                         "to train on and evaluate")
    if P_source not in ("empirical", "exact"):
        raise ValueError(f"P_source: expected 'empirical' or 'exact', got {P_source!r}")
    check_hyper("lr", lr, positive=True)
    check_hyper("weight_decay", weight_decay, positive=False)
    check_hyper("bn_eps", bn_eps, positive=False)
    if noise_groups is not None and (isinstance(noise_groups, bool) or not isinstance(noise_groups, int)
                                     or noise_groups < 2):
        raise ValueError(f"noise_groups: expected None or an integer >= 2, got {noise_groups!r}")
    if steps < 0 or eval_every <= 0:
        raise ValueError(f"steps/eval_every: expected steps >= 0 and eval_every > 0, got {steps}, {eval_every}")
    if batch_size is None and full is None:
        raise ValueError("batch_size: full-batch GD (None) needs an in-memory sample; give a minibatch size "
                         "to stream a chunked dataset")
    for name, v in (("batch_size", batch_size), ("eval_batch_size", eval_batch_size)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{name}: expected a positive integer, got {v!r}")
    alignment = None if alignment is False else alignment if alignment is True else _check_alignment(alignment, lad)
    if not isinstance(shuffle_labels, bool):
        raise TypeError(f"shuffle_labels: expected a bool, got {type(shuffle_labels).__name__}")
    if plateau is not None and (isinstance(plateau, bool) or not isinstance(plateau, int) or plateau < 1):
        raise ValueError(f"plateau: expected None or a positive integer, got {plateau!r}")
    net = LadderStudent(lad, width, activation=activation, batch_norm=batch_norm, bn_eps=bn_eps, bias=bias,
                        seed=seed, shared=shared, readout=readout, dtype=dtype, device=device)
    opt, schedule = _optimizer(net, optimizer, lr, steps, lr_schedule)
    ev_chunks, skip = _evaluation_rows(held_out, chunks, eval_examples, lad)
    n_eval = len(ev_chunks)
    streamed = eval_examples is None and not isinstance(getattr(ev_chunks, "sample", None), LadderSample)
    ev_engine = engine if streamed else None  # an in-memory evaluation set is summed in this process
    if not streamed:
        ev = _head(ev_chunks, n_eval if eval_examples is None else min(eval_examples, n_eval))
        n_eval = len(ev)
        if net.batch_norm:  # BN's statistics are the evaluation set's: one batch
            x_eval, y_eval, z_eval = ev.inputs(dtype=dtype), ev.y, ev.z
        else:  # the same sums batch by batch: memory of one eval batch, not of the set
            ev_chunks, streamed = ev, True
    if alignment is True:  # on the evaluation set itself (held out unless held_out=False)
        alignment = ev_chunks if streamed and eval_examples is None else ev
        if len(alignment) < 4:
            raise ValueError(f"evaluation.alignment: the event alignment needs at least 4 evaluation rows, got "
                             f"{len(alignment)}; give more (eval_examples) or alignment=False")
    evaluated_on = "training" if held_out is False else "held-out"
    batches: Iterator[tuple[torch.Tensor, torch.Tensor]]
    if batch_size is not None:
        batches = _training_batches(chunks, batch_size, torch.Generator().manual_seed(seed), dtype, skip,
                                    seed if shuffle_labels else None)
    else:  # full-batch GD: of an in-memory sample (a chunked dataset without batch_size was refused above)
        assert full is not None
        y = _all_training_labels(chunks, skip, seed) if shuffle_labels else full.y[skip:]
        batches = itertools.repeat((full.inputs(dtype=dtype)[skip:], y))
    if full is not None:  # the labels' range once, where they enter (a store's chunks are checked as they load)
        _check_label_range(net, full.y, loss)
    dev = net.weights[0].device
    # each step's loss stays on the device until a checkpoint reads a run of them (one sync; CHECK_EVERY steps at
    # most, and before every evaluation); the plateau rule alone reads every step's (it decides when to stop)
    losses = torch.empty(steps, dtype=net.weights[0].dtype, device=dev)
    checked: list[float] = []  # the losses read back so far (checked[0]: the first minibatch's)
    smooth, best, since = None, math.inf, 0
    result = ComparisonResult(student=net)
    aligned_at_start = None  # the alignment at the first checkpoint (initialisation)
    t0 = time.perf_counter()
    checkpoints = sorted({0, steps, *range(0, steps + 1, eval_every)})
    if _last_checkpoints is not None:  # (0 would slice every checkpoint: refused)
        checkpoints = sorted({0, *checkpoints[-_check_int(_last_checkpoints, "_last_checkpoints", 1):]})
    bar = tqdm(total=steps, desc="training student", disable=not progress)
    for step in range(steps + 1):
        # (a replayed population wrote no losses here: it checked its own, smaso.student.population)
        if _replay is None and (step in checkpoints or step - len(checked) >= _training.CHECK_EVERY):
            _check_losses(losses, checked, step, lr)
        if step in checkpoints:
            # batch sums in the student's dtype, into float64 totals: exact for a float64 student; a float32
            # student's agree with float64 batch sums to 1e-6 relative (FrequencyAccumulator's precision
            # contract) at a fraction of the cost (float64 batch sums were most of a float32 evaluation's time)
            if streamed:
                measure = accumulate_statistics if _statistics is None else functools.partial(_statistics, step)
                sums, correct = measure(net, ev_chunks, loss=loss, batch_size=eval_batch_size, dtype=dtype,
                                        engine=ev_engine, groups=noise_groups)
                stats, acc = sums.result(), correct / n_eval
            else:
                stats = collect_statistics(net, x_eval, y_eval, z_eval, loss=loss, dtype=dtype, groups=noise_groups)
                with torch.no_grad():
                    acc = (net(x_eval.to(dev)).argmax(-1).cpu() == y_eval).double().mean().item()
            reps = None if noise_groups is None else list(stats.leave_one_out())  # (read from stats.jackknife)
            report = compare_statistics_to_theory(net, stats, P_source=P_source, loss=loss, replicates=reps)
            # NaN or inf in a statistic is a diverged run; a number undefined by a 0/0 (a dead level) is reported as
            # NaN with its reason (report["degenerate"]), not raised: the run's state is what it is
            bad = nonfinite_statistics(stats)
            if bad:
                raise TrainingDiverged(f"step {step}: the statistics are not finite ({', '.join(bad[:3])}); "
                                       "lower lr, or use BN")
            row = {"step": step, "accuracy": acc, "evaluation": evaluated_on, **report}
            if shuffle_labels:
                row["shuffled_labels"] = True
            if alignment is not None and (not _alignment_ends or not result.history or step == steps
                                          or result.stopped_at is not None):  # (ranked at the first checkpoint's)
                moments, probe = accumulate_alignment(net, alignment, engine=engine)
                aligned = moments.result()
                aligned_at_start = aligned_at_start or aligned
                row["alignment"] = alignment_rows(aligned, probe, init=aligned_at_start)
            result.history.append(row)
            result.final_stats = stats
        if step == steps or result.stopped_at is not None:
            break
        if _replay is not None:  # a population trained this run (smaso.student.population): its weights, not a step
            _replay(net, step)
            continue
        x_b, y_b = next(batches)
        # (a host batch is copied without waiting for the device: a blocking copy synchronizes the stream)
        rec = net.forward_backward(x_b.to(dev, non_blocking=True), y_b.to(dev, non_blocking=True), loss,
                                   labels_checked=True)
        lt = rec.loss_tensor
        losses[step] = lt if lt is not None else rec.loss  # (forward_backward always leaves the tensor)
        if opt is None:
            net.apply_update(rec, lr, weight_decay)
        else:
            net.fill_grad(rec, weight_decay)
            opt.step()
            if schedule is not None:
                schedule.step()
        bar.update(1)
        if plateau is not None:  # whether to stop depends on this step's loss: read (and checked) every step
            _check_losses(losses, checked, step + 1, lr)
            value = checked[-1]
            smooth = value if smooth is None else 0.95 * smooth + 0.05 * value
            best, since = (smooth, 0) if smooth < best * (1 - PLATEAU_TOL) else (best, since + 1)
            if since >= plateau:
                result.stopped_at = step + 1
                checkpoints.append(step + 1)
    bar.close()
    _check_weights(net, steps, lr)
    # (stats: the last checkpoint's, result.final_stats; every run has its checkpoint 0 and a last one)
    P = stats.P if P_source == "empirical" else exact_statistics(net.ladder)
    result.final_prediction = reformulate(net, P, stats, loss=loss)
    result.seconds = time.perf_counter() - t0
    return result


def _check_weights(net: LadderStudent, steps: int, lr: float) -> None:
    """Raise :class:`TrainingDiverged` unless every weight and bias of the trained student is finite (one host
    read for all of them)."""
    if not bool(torch.stack([torch.isfinite(p).all() for p in [*net.weights, *(net.biases or [])]]).all()):
        raise TrainingDiverged(f"step {steps}: the weights are not finite (the run diverged; lower lr={lr})")


def _loss_ok(value: float, first: float) -> bool:
    """Whether a training loss is still that of a converging run: finite and at most :data:`DIVERGED` times the
    first minibatch's (or above that where the first is below 1). A loss 1e8 times its first value is a diverged
    run even while finite: its statistics would read as an exact reformulation of nonsense."""
    return math.isfinite(value) and not value > DIVERGED * max(first, 1.0)


def _check_losses(losses: torch.Tensor, checked: list[float], stop: int, lr: float) -> None:
    """Read the losses of steps ``len(checked) .. stop-1`` from the device (one sync), append them to ``checked``
    and raise :class:`TrainingDiverged` at the first one that :func:`_loss_ok` refuses, with the message the
    per-step check gave before the losses were deferred (the same step, the same numbers)."""
    start = len(checked)
    if stop <= start:
        return
    for step, value in enumerate(losses[start:stop].tolist(), start):
        first = checked[0] if checked else value
        if not _loss_ok(value, first):
            raise TrainingDiverged(_diverged_message(step, value, first, lr))
        checked.append(value)


def _diverged_message(step: int, value: float, first: float, lr: float) -> str:
    """What a run whose loss ``value`` at ``step`` :func:`_loss_ok` refuses raises (``first``: its first
    minibatch's loss); a population member says the same (:mod:`smaso.student.population`)."""
    return (f"step {step}: the training loss is {value:.3g} (first minibatch: {first:.3g}); the run diverged: "
            f"lower lr={lr}, add weight_decay or BN")


ERROR_KEYS = tuple(f"{q}_{kind}" for kind in ("propagated", "local") for q in ("F", "G", "dW"))


def _check_sigmas(sigmas: object) -> list[float]:
    if isinstance(sigmas, (str, bytes)) or not hasattr(sigmas, "__iter__"):
        raise TypeError(f"sigmas: expected a sequence of noise levels, got {type(sigmas).__name__}")
    out = []
    for s in list(sigmas):
        if isinstance(s, (torch.Tensor,)) and s.numel() == 1:  # numpy scalars are numbers.Real already
            s = s.item()
        if isinstance(s, bool) or not isinstance(s, numbers.Real) or not math.isfinite(s) or s < 0:
            raise ValueError(f"sigmas: every noise level must be a finite number >= 0, got {s!r}")
        out.append(float(s))
    if not out:
        raise ValueError("sigmas: expected at least one noise level")
    if len(set(out)) != len(out):
        raise ValueError(f"sigmas: noise levels must be distinct, got {out}")
    return out


def _leaves_at(ladder: Ladder, sigma: float) -> Ladder:
    """``ladder`` with one-hot leaves (sigma = 0) or Gaussian leaves N(one-hot(z), sigma^2 I)."""
    r, m = ladder.num_regions[-1], ladder.events[-1]
    if sigma == 0:
        return ladder.with_emission(OneHotEmission(r, m))
    return ladder.with_emission(GaussianEmission.around_one_hot(r, m, sigma))


def _noise_row(sigma: float, ladder: Ladder | Callable[[float], Ladder], n: int, seed: int,
               configs: tuple[StudentConfig, TrainingConfig, EvaluationConfig]) -> dict:
    """One row of :func:`noise_sweep` (a task of its engine: any process)."""
    import dataclasses

    lad = _leaves_at(ladder, sigma) if isinstance(ladder, Ladder) else ladder(sigma)
    if not isinstance(lad, Ladder):
        raise TypeError(f"ladder: the factory returned {type(lad).__name__} for sigma = {sigma}, expected a Ladder")
    sample = sample_ladder(lad, int(n), int(seed), progress=False)
    student, training, evaluation = configs
    if evaluation.held_out is True:  # evaluate on fresh rows (stream seed + 1), never trained on
        evaluation = dataclasses.replace(evaluation, held_out=sample_ladder(lad, int(n), int(seed) + 1,
                                                                            progress=False))
    res = compare_student(sample, student, training, evaluation)
    last = res.final()
    worst = res.max_error()
    return {"sigma": sigma, "step": last["step"], "accuracy": last["accuracy"], "loss": last["loss"],
            "levels": last["levels"], "leaves": last["leaves"], "max_error": worst, "seconds": res.seconds}


def noise_sweep(ladder: Ladder | Callable[[float], Ladder], sigmas: Sequence[float], n: int, seed: int = 0, *,
                student_seed: int = 0, progress: bool = False, engine: SerialEngine | DaskEngine | None = None,
                student: StudentConfig | None = None, training: TrainingConfig | None = None,
                evaluation: EvaluationConfig | None = None, **legacy: Any) -> list[dict]:
    """Student vs reformulation as the leaves get noisier: Thm 3's exactness and how Thm 2 fails.

    With one-hot leaves (the fully informative ladder) the reformulation is exact (Thm 3: every error is
    round-off); Gaussian leaves x_r ~ N(one-hot(z_r), sigma^2 I) break Thm 2's decorrelation and the errors
    grow with sigma.  For each sigma this samples ``n`` examples, trains a student with
    :func:`compare_student` and records its last checkpoint.

    The events z and the student's initial weights are the same at every sigma, so the rows differ only by
    the leaf noise.

    :param ladder: a :class:`~teachers.ladder.Ladder` whose leaves are replaced by one-hot
        (sigma = 0) or Gaussian leaves around one-hot means (sigma > 0); or a factory
        ``sigma -> Ladder`` that builds the ladder for each noise level itself.
    :param sigmas: distinct noise levels >= 0 (0: one-hot leaves).
    :param n: examples per noise level (> 0).
    :param seed: sample seed.
    :param student_seed: the student's seed (its initial weights and SGD minibatches): ``training.seed``.
    :param progress: a tqdm bar over the noise levels (the student's own bar stays off).
    :param engine: where the noise levels run: ``None`` (here, one after the other) or a
        :class:`~teachers.engine.SerialEngine` / :class:`~teachers.engine.DaskEngine`, one task per
        level (a factory ``ladder`` must then be picklable by cloudpickle); the rows do not depend on it.
    :param student: :func:`compare_student`'s ``student`` (the defaults of :mod:`smaso.student.config`).
    :param training: its ``training`` (the seed replaced by ``student_seed``).
    :param evaluation: its ``evaluation``; with ``held_out=True`` (the default) each level is evaluated on ``n``
        fresh rows (stream ``seed + 1``), never trained on.
    :param legacy: deprecated: the configs' fields as keywords (a :class:`DeprecationWarning`).
    :returns: one row per sigma, in the given order: ``sigma``, ``accuracy``, ``loss``, ``step``,
        ``levels`` and ``leaves`` (as in :func:`compare_statistics_to_theory`), ``max_error``
        (:meth:`ComparisonResult.max_error`: the largest of :data:`ERROR_KEYS` over every level and checkpoint of the
        run, NaN if one is undefined) and ``seconds``.
    """
    import dataclasses

    if "sample" in legacy:
        raise TypeError("sample: not a student option (noise_sweep samples each noise level)")
    student, training, evaluation = _configs(student, training, evaluation, legacy, "noise_sweep")
    training = dataclasses.replace(training, seed=student_seed)
    sig = _check_sigmas(sigmas)
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n <= 0:
        raise ValueError(f"n: expected a positive integer number of examples, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer, got {seed!r}")
    if not isinstance(ladder, Ladder) and not callable(ladder):
        raise TypeError(f"ladder: expected a Ladder or a callable sigma -> Ladder, got {type(ladder).__name__}")
    from teachers.engine import get_engine

    return get_engine(engine).map(_noise_row, sig, ladder, int(n), int(seed), (student, training, evaluation),
                                  progress="noise sweep" if progress else None)
