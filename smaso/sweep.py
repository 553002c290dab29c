"""The sample-complexity sweep: a student's test error against the training-set size P, and P*.

:func:`sample_complexity_sweep` trains one student per (P, seed) of a grid and measures its error on held-out rows
(the fraction whose highest class score is not the label).  The runs are tasks of an engine
(:mod:`teachers.engine`: this process, worker processes or a Dask cluster); the runs of one shape (one student
architecture, one minibatch size) are trained together as one batched population
(:func:`smaso.student.batched.train_student_population`: every member its own initial weights, training rows and
minibatch order, exactly the steps it would take alone).  Each task's runs are merged into a :class:`SweepResult` as
they arrive and, with ``stream=``, appended to a JSON-lines file at once (:func:`read_runs` reads it back).

**P\\*** (:meth:`SweepResult.p_star`, :class:`PStar`) is defined as in Petrini et al. (arXiv 2307.02129, Fig. 3):
the training-set size at which the test error falls below a threshold (10% by default).  Per seed, the curve is
read on the grid of P in increasing order; P*_seed is where it first reaches the threshold, interpolated linearly
in (log P, error) between the last grid point above the threshold and the first at or below it:

    log P* = log P_{i-1} + (e_{i-1} - t) / (e_{i-1} - e_i) * (log P_i - log P_{i-1}).

A seed whose error is already at or below t at the smallest P has P* below the grid, one that never reaches it
has P* above the grid: these are *censored*, not numbers.  The estimate is the median over seeds (censored seeds
ordered below or above every crossing) with the distribution-free interval of order statistics of
:func:`smaso.student.seeds.median_interval`; a median or an interval end that falls on a censored seed is NaN with
the reason named, never a grid end passed off as an estimate.

Students are named kinds (:data:`STUDENT_KINDS`, :func:`register_student`): ``"ladder"`` is the locally
connected :class:`~smaso.student.network.LadderStudent` (on :meth:`~teachers.ladder.Ladder.rhm`, the CNN with
filter s and stride s that follows the RHM's levels; ``shared=True`` shares its filters), ``"shallow"`` one hidden
layer on the flattened input (``smaso.student.shallow.shallow_student``); another module registers its students
the same way.  Data come from ``make_data(P, seed) -> (train, test)`` (objects with
``.inputs(dtype=...)`` and ``.y``, as :class:`~teachers.sampling.LadderSample`): by default
:class:`DisjointSplit` (distinct derivations, test disjoint from training: ``teachers.derivations``), or
:class:`IndependentDraws` (rows drawn with replacement, the test rows independent of the training rows).

**Per-run measures.**  ``measure(student, train, test, ladder) -> {name: float}`` (a picklable callable: a
module-level function or a frozen dataclass, as the engine sends it to workers) runs on every trained student that
did not diverge, inside the task; its numbers are kept in :attr:`SweepRun.measures` (NaN as null through JSON; a
value may also be a string, the reason a number is NaN) and read back as ``(seeds, sizes)`` arrays by
:meth:`SweepResult.measure_values`.  The built-in one for an RHM is
:class:`smaso.student.rhm_measures.RHMMeasures` (synonymic sensitivity, event alignment, Thm 2's conditions).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from smaso.output import json_safe
from smaso.student.config import StudentConfig, TrainingConfig
from smaso.student.seeds import INTERVAL_LEVEL, median_interval

if TYPE_CHECKING:
    import torch
    from torch import nn

    from teachers.engine import DaskEngine, ProcessEngine, SerialEngine
    from teachers.ladder import Ladder

__all__ = ["DEFAULT_THRESHOLD", "STUDENT_KINDS", "DisjointSplit", "IndependentDraws", "PStar", "StudentKind",
           "SweepResult", "SweepRun", "p_star_of_curve", "read_runs", "register_student", "sample_complexity_sweep"]

#: The test error whose crossing defines P* (the paper's 10%).
DEFAULT_THRESHOLD = 0.1


# ----------------------------------------------------------------------------------------------- students
@dataclass(frozen=True)
class StudentKind:
    """A kind of student the sweep can train.

    :param name: its name (``--student NAME``).
    :param build: ``build(ladder, seed, dtype, **options) -> nn.Module`` mapping inputs ``(N, R_d, dim)`` (a
        sample's ``.inputs()``) to class scores ``(N, num_classes)``; ``seed`` its initial weights.
    :param defaults: its options when none are given (the keys it accepts).
    :param batched: its forward pass runs under ``torch.vmap`` (members trained as one population).
    :param decayed: which parameter names the Frobenius regularizer (``weight_decay``) covers.
    """

    name: str
    build: Callable[..., nn.Module]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    batched: bool = True
    decayed: Callable[[str], bool] | None = None
    description: str = ""

    def make(self, ladder: Ladder, seed: int, dtype: torch.dtype, options: Mapping[str, Any] | None = None
             ) -> nn.Module:
        """A student of this kind with ``options`` over :attr:`defaults` (unknown keys: ``ValueError``)."""
        return self.build(ladder, seed, dtype, **self.options(options))

    def options(self, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """``options`` over :attr:`defaults`, refusing keys the kind does not take."""
        options = dict(options or {})
        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            raise ValueError(f"student_options: the {self.name!r} student takes {sorted(self.defaults)}, "
                             f"not {unknown}")
        return {**self.defaults, **options}


#: The registered student kinds by name (:func:`register_student`).
STUDENT_KINDS: dict[str, StudentKind] = {}


def register_student(kind: StudentKind, *, replace: bool = False) -> StudentKind:
    """Add ``kind`` to :data:`STUDENT_KINDS` (a second kind of the same name needs ``replace=True``)."""
    if not isinstance(kind, StudentKind):
        raise TypeError(f"kind: expected a StudentKind, got {type(kind).__name__}")
    if kind.name in STUDENT_KINDS and not replace:
        raise ValueError(f"kind: a student kind {kind.name!r} is already registered (replace=True to replace it)")
    STUDENT_KINDS[kind.name] = kind
    return kind


def _ladder_student(ladder: Ladder, seed: int, dtype: torch.dtype, **options: Any) -> nn.Module:
    from smaso.student.network import LadderStudent

    cfg = StudentConfig(**options)  # its checks and its defaults, the ones of `smaso compare`
    return LadderStudent(ladder, list(cfg.width) if isinstance(cfg.width, tuple) else cfg.width,
                         activation=cfg.activation, batch_norm=cfg.batch_norm, bn_eps=cfg.bn_eps, bias=cfg.bias,
                         shared=cfg.shared, readout=cfg.readout, seed=seed, dtype=dtype)


register_student(StudentKind(
    "ladder", _ladder_student,
    defaults={f.name: getattr(StudentConfig(), f.name) for f in dataclasses.fields(StudentConfig) if f.name != "dtype"},
    description="the locally connected ladder student (smaso.student.network.LadderStudent; on Ladder.rhm the CNN "
                "with filter s, stride s)"))


def _shallow_student(ladder: Ladder, seed: int, dtype: torch.dtype, **options: Any) -> nn.Module:
    from smaso.student.shallow import shallow_student  # (imported when used: the kind is registered without it)

    hidden = options.pop("hidden")
    return shallow_student(ladder, hidden, seed=seed, dtype=dtype, **options)


register_student(StudentKind(
    "shallow", _shallow_student, defaults={"hidden": 256, "activation": "relu", "bias": True, "batch_norm": False},
    description="one hidden layer on the flattened input (smaso.student.shallow.shallow_student: the ladder student on "
                "the teacher's flat view)"))


def _kind(student: str | StudentKind) -> StudentKind:
    if isinstance(student, StudentKind):
        return student
    if not isinstance(student, str) or student not in STUDENT_KINDS:
        raise ValueError(f"student: expected one of {sorted(STUDENT_KINDS)} or a StudentKind, got {student!r}")
    return STUDENT_KINDS[student]


# ----------------------------------------------------------------------------------------------- data
@dataclass(frozen=True)
class DisjointSplit:
    """The default ``make_data``: ``teachers.derivations.train_test_split(ladder, num_train=P, num_test=num_test,
    seed=seed)``: distinct derivations, the test rows disjoint from the training rows by construction."""

    ladder: Ladder
    num_test: int

    def __call__(self, P: int, seed: int) -> tuple[Any, Any]:
        try:
            from teachers.derivations import train_test_split
        except ImportError as e:
            raise ValueError(f"make_data: the disjoint split needs teachers.derivations ({e}); pass "
                             "make_data=IndependentDraws(ladder, num_test) or your own") from None
        return train_test_split(self.ladder, num_train=P, num_test=self.num_test, seed=seed)


@dataclass(frozen=True)
class IndependentDraws:
    """``make_data`` drawing rows with replacement (:func:`~teachers.sampling.sample_ladder`): P training rows and
    ``num_test`` test rows from two unrelated seeds of ``seed`` (the test rows the same for every P of a seed).  A
    test row may also be a training row (no disjointness: on a small input space that flatters the error)."""

    ladder: Ladder
    num_test: int

    def __call__(self, P: int, seed: int) -> tuple[Any, Any]:
        from smaso.depth.population import member_seed
        from teachers.sampling import sample_ladder

        return (sample_ladder(self.ladder, P, seed=member_seed(seed, 0), progress=False),
                sample_ladder(self.ladder, self.num_test, seed=member_seed(seed, 1), progress=False))


# ----------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class SweepRun:
    """One trained student of the grid.

    :ivar P: its training rows; ``seed``: its data, initial weights and minibatch order.
    :ivar test_error, train_error: fractions of rows misclassified (NaN when the run diverged: ``reason``).
    :ivar num_test: the test rows measured.
    :ivar final_loss: the mean minibatch loss of the last ``min(10, steps)`` steps (NaN without steps).
    :ivar population: the members trained with it as one population (1: alone).
    :ivar reason: why the errors are NaN (None when they are numbers).
    :ivar measures: what the sweep's ``measure`` returned for this run (empty without one, or when it diverged).
    """

    P: int
    seed: int
    test_error: float
    train_error: float
    num_test: int
    final_loss: float
    population: int = 1
    reason: str | None = None
    measures: dict[str, float | str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SweepRun:
        """The inverse of ``dataclasses.asdict`` after JSON (null -> NaN for the floats and the measures)."""
        nan = {k: math.nan if d.get(k) is None else float(d[k]) for k in ("test_error", "train_error", "final_loss")}
        measures = {str(k): math.nan if v is None else v if isinstance(v, str) else float(v)
                    for k, v in (d.get("measures") or {}).items()}
        return cls(P=int(d["P"]), seed=int(d["seed"]), num_test=int(d["num_test"]),
                   population=int(d.get("population", 1)), reason=d.get("reason"), measures=measures, **nan)


@dataclass(frozen=True)
class PStar:
    """P* with its interval over seeds (module docstring).

    :ivar value: the median over seeds of the per-seed P* (NaN: ``reason``).
    :ivar low, high: the order-statistics interval for it (NaN ends: ``interval_reason``), of exact coverage
        ``coverage`` (:func:`~smaso.student.seeds.median_interval`).
    :ivar per_seed: seed -> P*_seed (NaN where censored or undefined: ``per_seed_reason``).
    :ivar censored: seed -> ``"below"`` or ``"above"`` the grid, for the censored seeds.
    """

    threshold: float
    value: float
    low: float
    high: float
    coverage: float
    per_seed: dict[int, float]
    censored: dict[int, str]
    per_seed_reason: dict[int, str]
    reason: str | None = None
    interval_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN as null; seed keys as strings)."""
        d = dataclasses.asdict(self)
        for k in ("per_seed", "censored", "per_seed_reason"):
            d[k] = {str(s): v for s, v in d[k].items()}
        return json_safe(d)


def p_star_of_curve(P: Sequence[float], errors: Sequence[float], threshold: float = DEFAULT_THRESHOLD
                    ) -> tuple[float, str | None, str | None]:
    """One curve's P* (module docstring): ``(P*, censored, reason)``, ``censored`` ``"below"``/``"above"`` the grid
    or None, and P* NaN with ``reason`` unless the curve crosses inside the grid.  NaN errors (diverged runs) are
    left out of the curve."""
    p, e = np.asarray(P, dtype=np.float64), np.asarray(errors, dtype=np.float64)
    if p.shape != e.shape or p.ndim != 1:
        raise ValueError(f"P, errors: expected two 1-D sequences of one length, got {p.shape} and {e.shape}")
    keep = np.isfinite(e)
    p, e = p[keep], e[keep]
    order = np.argsort(p)
    p, e = p[order], e[order]
    if p.size == 0:
        return math.nan, None, "no defined test error (every run diverged or none ran)"
    below = np.flatnonzero(e <= threshold)
    if below.size == 0:
        return math.nan, "above", (f"never reached {threshold:g}: the smallest error is {e.min():.3g} "
                                   f"(P = {int(p[np.argmin(e)])}), P* lies above the grid")
    i = int(below[0])
    if i == 0:
        return math.nan, "below", (f"already {e[0]:.3g} <= {threshold:g} at the smallest P = {int(p[0])}: P* lies "
                                   "below the grid")
    frac = (e[i - 1] - threshold) / (e[i - 1] - e[i])
    return float(np.exp(np.log(p[i - 1]) + frac * (np.log(p[i]) - np.log(p[i - 1])))), None, None


@dataclass
class SweepResult:
    """The runs of a sweep, in (P, seed) order, with what produced them.

    :ivar student: the student kind's name; ``options``: its options; ``training``: the training settings;
        ``meta``: anything else recorded (data, dtype, ...).
    :ivar runs: the :class:`SweepRun` s.
    """

    student: str
    options: dict[str, Any]
    training: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    runs: list[SweepRun] = field(default_factory=list)

    def merge(self, other: SweepResult | Iterable[SweepRun]) -> SweepResult:
        """This result with ``other``'s runs added (a result of the same student and training, or runs), kept in
        (P, seed) order; a (P, seed) present in both is a ``ValueError``."""
        if isinstance(other, SweepResult):
            mine = (self.student, json_safe(self.options), json_safe(self.training))
            if mine != (other.student, json_safe(other.options), json_safe(other.training)):
                raise ValueError("other: a sweep of another student or training cannot be merged into this one")
            other = other.runs
        runs = [*self.runs, *other]
        keys = [(r.P, r.seed) for r in runs]
        if len(set(keys)) != len(keys):
            dup = sorted({k for k in keys if keys.count(k) > 1})
            raise ValueError(f"other: runs (P, seed) = {dup} are already in this sweep")
        return dataclasses.replace(self, runs=sorted(runs, key=lambda r: (r.P, r.seed)))

    @property
    def sizes(self) -> list[int]:
        """The grid of P, increasing."""
        return sorted({r.P for r in self.runs})

    @property
    def seeds(self) -> list[int]:
        """The seeds, increasing."""
        return sorted({r.seed for r in self.runs})

    def errors(self, which: str = "test") -> np.ndarray:
        """``(seeds, sizes)`` float64 test (or ``"train"``) errors, NaN where a run is missing or diverged."""
        if which not in ("test", "train"):
            raise ValueError(f"which: expected 'test' or 'train', got {which!r}")
        P, S = self.sizes, self.seeds
        out = np.full((len(S), len(P)), np.nan)
        for r in self.runs:
            out[S.index(r.seed), P.index(r.P)] = r.test_error if which == "test" else r.train_error
        return out

    def measure_values(self, key: str) -> np.ndarray:
        """``(seeds, sizes)`` float64 values of the per-run measure ``key`` (:attr:`SweepRun.measures`), NaN where
        a run is missing, diverged, or did not report it; a ValueError when no run has ``key``."""
        if not any(key in r.measures for r in self.runs):
            known = sorted({k for r in self.runs for k in r.measures})
            raise ValueError(f"key: no run has the measure {key!r}; measured: {known}")
        P, S = self.sizes, self.seeds
        out = np.full((len(S), len(P)), np.nan)
        for r in self.runs:
            v = r.measures.get(key)
            if isinstance(v, (int, float)):
                out[S.index(r.seed), P.index(r.P)] = v
        return out

    def median_curve(self) -> np.ndarray:
        """The median over seeds of the test error at each P (NaN where no seed is defined)."""
        e = self.errors()
        out = np.full(e.shape[1], np.nan)
        some = np.isfinite(e).any(axis=0)
        out[some] = np.nanmedian(e[:, some], axis=0)
        return out

    def p_star(self, threshold: float = DEFAULT_THRESHOLD, level: float = INTERVAL_LEVEL) -> PStar:
        """P* at ``threshold`` with its interval over seeds (module docstring)."""
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold < 1:
            raise ValueError(f"threshold: expected a test error in (0, 1), got {threshold!r}")
        per, cens, why = {}, {}, {}
        for s, row in zip(self.seeds, self.errors(), strict=True):
            v, c, reason = p_star_of_curve(self.sizes, row, threshold)
            per[s] = v
            if c:
                cens[s] = c
            if reason:
                why[s] = reason
        # censored seeds ordered below / above every crossing; seeds with no defined error left out
        keyed = sorted(-math.inf if cens.get(s) == "below" else math.inf if cens.get(s) == "above" else v
                       for s, v in per.items() if s in cens or math.isfinite(v))
        k = len(keyed)
        nan = math.nan
        if k == 0:
            return PStar(threshold, nan, nan, nan, nan, per, cens, why, reason="no seed has a defined test error",
                         interval_reason="no seed has a defined test error")
        mid = keyed[(k - 1) // 2: k // 2 + 1]  # the middle one (k odd) or two (k even)
        value = float(np.exp(np.mean(np.log(mid)))) if all(math.isfinite(v) for v in mid) else nan
        reason = None if math.isfinite(value) else (
            f"the median falls on a censored seed: {sum(v == -math.inf for v in keyed)} of {k} seeds below the grid,"
            f" {sum(v == math.inf for v in keyed)} above it")
        ranks = median_interval(list(range(k)), level)
        if ranks is None:
            return PStar(threshold, value, nan, nan, nan, per, cens, why, reason,
                         interval_reason="one seed: no interval over seeds")
        lo, hi, coverage = keyed[int(ranks[0])], keyed[int(ranks[1])], ranks[2]
        ends = [f"its {name} end is a seed {'below' if v < 0 else 'above'} the grid" for name, v in
                (("lower", lo), ("upper", hi)) if not math.isfinite(v)]
        return PStar(threshold, value, lo if math.isfinite(lo) else nan, hi if math.isfinite(hi) else nan, coverage,
                     per, cens, why, reason, interval_reason="; ".join(ends) or None)

    def to_dict(self, threshold: float = DEFAULT_THRESHOLD) -> dict[str, Any]:
        """JSON-ready: the settings, the runs, the grid, the median curve and P* at ``threshold``."""
        return json_safe({"student": self.student, "options": self.options, "training": self.training,
                          "meta": self.meta, "sizes": self.sizes, "seeds": self.seeds,
                          "median_test_error": self.median_curve().tolist(),
                          "p_star": self.p_star(threshold).to_dict(),
                          "runs": [dataclasses.asdict(r) for r in self.runs]})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SweepResult:
        """The inverse of :meth:`to_dict` (the derived fields are recomputed)."""
        return cls(d["student"], dict(d["options"]), dict(d["training"]), dict(d.get("meta", {})),
                   [SweepRun.from_dict(r) for r in d["runs"]])


def read_runs(path: str | os.PathLike) -> list[SweepRun]:
    """The runs streamed to a JSON-lines file by ``sample_complexity_sweep(stream=path)`` (one run per line)."""
    with open(path) as f:
        return [SweepRun.from_dict(json.loads(line)) for line in f if line.strip()]


# ----------------------------------------------------------------------------------------------- the sweep
@dataclass(frozen=True)
class _Task:
    """What every task of a sweep shares (scattered once to Dask workers)."""

    ladder: Ladder
    kind: StudentKind
    options: dict[str, Any]
    training: TrainingConfig
    make_data: Callable[[int, int], tuple[Any, Any]]
    dtype: torch.dtype
    eval_batch: int
    device: str | None
    measure: Callable[..., Mapping[str, float | str]] | None = None


def _measured(measure: Callable[..., Mapping[str, float | str]], net: nn.Module, train: Any, test: Any,
              ladder: Ladder) -> dict[str, float | str]:
    """``measure``'s numbers for one run, checked: a mapping of names to floats (or strings: reasons)."""
    got = measure(net, train, test, ladder)
    if not isinstance(got, Mapping):
        raise TypeError(f"measure: expected a mapping of names to floats, got {type(got).__name__}")
    out: dict[str, float | str] = {}
    for k, v in got.items():
        if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float, np.floating, str)):
            raise TypeError(f"measure: expected str keys and float (or str reason) values, got {k!r}: {v!r}")
        out[k] = v if isinstance(v, str) else float(v)
    return out


def _train_runs(runs: tuple[tuple[int, int], ...], task: _Task) -> list[SweepRun]:
    """One engine task: the (P, seed) runs ``runs`` of one shape, trained as one population."""
    import torch

    from smaso.depth.population import member_seed
    from smaso.student.batched import classification_error, train_student_population

    tr = task.training
    xs, ys, tests, students, data = [], [], [], [], []
    for P, seed in runs:
        train, test = task.make_data(P, seed)
        if task.measure is not None:
            data.append((train, test))
        x, y = train.inputs(dtype=task.dtype), torch.as_tensor(train.y).long()
        if x.shape[0] != P:
            raise ValueError(f"make_data: asked for P = {P} training rows (seed {seed}), got {x.shape[0]}")
        if tr.shuffle_labels:  # the shuffled-label control: the labels of the training rows permuted
            y = y[torch.randperm(P, generator=torch.Generator().manual_seed(member_seed(seed, P)))]
        xs.append(x)
        ys.append(y)
        tests.append((test.inputs(dtype=task.dtype), torch.as_tensor(test.y).long()))
        students.append(task.kind.make(task.ladder, seed, task.dtype, task.options).to(task.device))
    decayed = {} if task.kind.decayed is None else {"decayed": task.kind.decayed}
    fit = train_student_population(students, xs, ys, steps=tr.steps, lr=tr.lr, seeds=[s for _, s in runs],
                           batch_size=tr.batch_size, loss=tr.loss, optimizer=str(tr.optimizer),
                           weight_decay=tr.weight_decay, batched=task.kind.batched, **decayed)
    out = []
    tail = fit.losses[-min(10, tr.steps):] if tr.steps else fit.losses
    for r, ((P, seed), net) in enumerate(zip(runs, fit.students, strict=True)):
        final = float(tail[:, r].mean()) if tr.steps else math.nan
        reason: str | None
        if fit.diverged[r] is not None:
            reason = f"diverged: the training loss was not finite at step {fit.diverged[r]}"
            out.append(SweepRun(P, seed, math.nan, math.nan, tests[r][0].shape[0], final, len(runs), reason))
            continue
        dev = next(net.parameters()).device
        test_err = classification_error(net, tests[r][0].to(dev), tests[r][1], chunk=task.eval_batch)
        train_err = classification_error(net, xs[r].to(dev), ys[r], chunk=task.eval_batch)
        reason = None if math.isfinite(test_err) else "the trained student's scores are not finite on a test row"
        measures = {} if task.measure is None or reason else _measured(task.measure, net, *data[r], task.ladder)
        out.append(SweepRun(P, seed, test_err, train_err, tests[r][0].shape[0], final, len(runs), reason, measures))
    return out


def _describe_measure(measure: Callable[..., Any]) -> dict[str, Any]:
    """What the result's meta records of a measure: its name, and its fields when it is a dataclass."""
    name = getattr(measure, "__qualname__", type(measure).__qualname__)
    fields: dict[str, Any] = (json_safe(dataclasses.asdict(measure))
              if dataclasses.is_dataclass(measure) and not isinstance(measure, type) else {})
    return {"name": name, **({"fields": fields} if fields else {})}


def _check_training(training: TrainingConfig) -> None:
    from smaso.student.batched import OPTIMIZERS

    if not isinstance(training, TrainingConfig):
        raise TypeError(f"training: expected a TrainingConfig, got {type(training).__name__}")
    if training.optimizer not in OPTIMIZERS:
        raise ValueError(f"training.optimizer: the sweep trains with one of {OPTIMIZERS}, got {training.optimizer!r}")
    if training.lr_schedule is not None or training.plateau is not None:
        raise ValueError("training.lr_schedule/plateau: the sweep trains every run for `steps` steps at a constant "
                         "lr (members of a population stop together); leave them None")


def _check_grid(sizes: Sequence[int], seeds: int | Sequence[int]) -> tuple[list[int], list[int]]:
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence) or not sizes:
        raise ValueError(f"sizes: expected a non-empty sequence of training-set sizes, got {sizes!r}")
    for P in sizes:
        if isinstance(P, bool) or not isinstance(P, (int, np.integer)) or P < 1:
            raise ValueError(f"sizes: expected positive integers, got {P!r}")
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"sizes: expected distinct sizes, got {list(sizes)}")
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ValueError(f"seeds: expected a positive number of seeds or a list of seeds, got {seeds!r}")
        seeds = list(range(int(seeds)))
    if not isinstance(seeds, Sequence) or not seeds or any(
            isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0 for s in seeds) \
            or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: expected a positive count or distinct non-negative integers, got {seeds!r}")
    return sorted(int(P) for P in sizes), [int(s) for s in seeds]


def sample_complexity_sweep(ladder: Ladder, sizes: Sequence[int], seeds: int | Sequence[int] = 5, *,
                            student: str | StudentKind = "ladder", student_options: Mapping[str, Any] | None = None,
                            training: TrainingConfig | None = None,
                            make_data: Callable[[int, int], tuple[Any, Any]] | None = None, num_test: int = 2048,
                            engine: SerialEngine | ProcessEngine | DaskEngine | None = None,
                            population: int | None = None, dtype: torch.dtype | None = None, eval_batch: int = 4096,
                            device: str | None = None, stream: str | os.PathLike | None = None,
                            measure: Callable[..., Mapping[str, float | str]] | None = None,
                            progress: bool = False) -> SweepResult:
    """Test error against the training-set size P over ``sizes`` x ``seeds`` (module docstring).

    :param ladder: the teacher (the students are built on it; the default data are drawn from it).
    :param sizes: the grid of P; ``seeds``: how many (seeds 0..K-1) or which.
    :param student: a kind name of :data:`STUDENT_KINDS` or a :class:`StudentKind`; ``student_options`` its options.
    :param training: steps, lr, minibatch, loss, optimizer (SGD, Adam, AdamW, RMSprop), weight decay, the shuffled
        label control (default :class:`~smaso.student.config.TrainingConfig`; its ``seed`` is not used: run (P, s)
        starts from weights seeded s and visits its rows in an order seeded s).
    :param make_data: ``(P, seed) -> (train, test)`` (default :class:`DisjointSplit` ``(ladder, num_test)``).
    :param engine: where the tasks run (None: this process).
    :param population: at most this many runs per task, trained as one population (None: every run of one shape in
        one task; give about runs / workers to spread a sweep over workers).
    :param dtype: the students' dtype (default float64); ``eval_batch``: rows per forward pass when measuring.
    :param stream: append every run to this JSON-lines file as soon as its task is merged (the file is started
        afresh).
    :param measure: ``measure(student, train, test, ladder) -> {name: float}``, run on every trained student that
        did not diverge (module docstring); picklable for process and Dask engines.
    :param progress: a bar over the tasks.
    """
    import torch

    from smaso.student.batched import effective_batch
    from teachers.engine import get_engine
    from teachers.ladder import Ladder

    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
    sizes, seeds = _check_grid(sizes, seeds)
    kind = _kind(student)
    options = kind.options(student_options)
    training = TrainingConfig() if training is None else training
    _check_training(training)
    for name, v in (("num_test", num_test), ("eval_batch", eval_batch), ("population", population)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{name}: expected a positive integer{' or None' if name == 'population' else ''}, "
                             f"got {v!r}")
    dtype = torch.float64 if dtype is None else dtype
    if measure is not None and not callable(measure):
        raise TypeError(f"measure: expected a callable (student, train, test, ladder) -> dict, got "
                        f"{type(measure).__name__}")
    task = _Task(ladder, kind, options, training, make_data or DisjointSplit(ladder, num_test), dtype, eval_batch,
                 device, measure)
    kind.make(ladder, 0, dtype, options)  # bad options fail here, before any task
    # one shape per minibatch size (runs with fewer rows than a minibatch train full-batch)
    groups: dict[int, list[tuple[int, int]]] = {}
    for P in sizes:
        groups.setdefault(effective_batch(P, training.batch_size), []).extend((P, s) for s in seeds)
    cap = population if kind.batched else 1
    tasks = [tuple(g[i: i + (cap or len(g))]) for g in groups.values() for i in range(0, len(g), cap or len(g))]
    result = SweepResult(kind.name, json_safe(options), json_safe(dataclasses.asdict(training)),
                         {"dtype": str(dtype).removeprefix("torch."), "num_test": num_test, "tasks": len(tasks),
                          "make_data": type(task.make_data).__name__,
                          **({} if measure is None else {"measure": _describe_measure(measure)})})
    sink = None if stream is None else Path(stream)
    if sink is not None:
        sink.parent.mkdir(parents=True, exist_ok=True)
        sink.write_text("")

    def merge(acc: SweepResult, runs: list[SweepRun]) -> SweepResult:
        if sink is not None:
            with sink.open("a") as f:
                f.writelines(json.dumps(json_safe(dataclasses.asdict(r)), allow_nan=False) + "\n" for r in runs)
        return acc.merge(runs)

    return get_engine(engine).fold(_train_runs, tasks, task, merge=merge, init=result,
                                   progress="sweep" if progress else None)
