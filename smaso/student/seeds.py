"""Students as replicates: one comparison over K student seeds, and floors that cover what varies.

The jackknife floor of :mod:`smaso.student.noise` covers the evaluation rows of *one* set of weights; a reported
error also moves with the student's initialisation and minibatch order, and between the last checkpoints of a
run.  :func:`compare_seeds` trains K students (one task each on an engine: this process, or Dask workers) and
:func:`summarize_seeds` reports every number of :func:`~smaso.student.diagnosis.compare_statistics_to_theory`
as its median and range over the K seeds x the last ``last`` checkpoints, beside the jackknife floor and the
seeds' standard error (:class:`SeedSummary`; why the standard error of the central value and not the spread of
one run: ``docs/theory.md`` §1.5).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from smaso.student.diagnosis import CONTRIBUTIONS
from smaso.student.noise import ROUNDOFF, WITHIN_NOISE

__all__ = ["CONDITION_KEYS", "TERM_KEYS", "SeedSummary", "compare_seeds", "summarize_seeds"]

#: Per-level errors of Eq 9 and the parts of Thm 2's one-step error, in the order :meth:`SeedSummary.table`
#: prints them.
TERM_KEYS = tuple(k for q in ("F", "G", "dW") for k in (f"{q}_propagated", f"{q}_local",
                                                       *(f"{q}_local_{p}" for p in CONTRIBUTIONS[f"{q}_local"])))
#: Thm 2's conditions, measured (0 when the condition holds), per level and at the leaves.
CONDITION_KEYS = ("decorrelation_fwd", "decorrelation_bwd", "decorrelation_dW", "focus", "broadness")


def _history(run) -> list[dict]:
    history = run.history if hasattr(run, "history") else run.get("history") if isinstance(run, dict) else None
    if not history:
        raise ValueError("runs: every run must be a ComparisonResult (or its dict) with at least one checkpoint")
    return history


def _summarize(rows_by_seed: list[list[dict]], keys: Sequence[str]) -> dict:
    """The summary of one level's ``keys``: ``rows_by_seed[s]`` are that level's rows at seed s's last checkpoints."""
    k_seeds = len(rows_by_seed)
    out: dict = {}
    within, inflated = [], []
    for key in keys:
        per_seed = [[r[key] for r in rows if key in r and r[key] is not None and math.isfinite(r[key])]
                    for rows in rows_by_seed]
        values = [v for vs in per_seed for v in vs]
        if not values:
            continue
        med = statistics.median(values)
        out[key], out[f"{key}_min"], out[f"{key}_max"] = med, min(values), max(values)
        floors = [r[f"{key}_floor"] for rows in rows_by_seed for r in rows if r.get(f"{key}_floor") is not None]
        floor = statistics.median(floors) if floors else None
        means = [statistics.fmean(vs) for vs in per_seed if vs]
        seed_se = statistics.stdev(means) / math.sqrt(len(means)) if len(means) >= 2 else 0.0
        out[f"{key}_seed_se"] = seed_se
        if floor is not None:
            out[f"{key}_floor"] = floor
        noise = max(floor or 0.0, seed_se)
        if (floor is not None or k_seeds >= 2) and med <= WITHIN_NOISE * noise + ROUNDOFF:
            within.append(key)
        if any(key in r.get("floor_over_estimated", ()) for rows in rows_by_seed for r in rows):
            inflated.append(key)
    out["within_noise"] = within
    if inflated:
        out["floor_over_estimated"] = inflated
    return out


@dataclass
class SeedSummary:
    """Every reported number over K student seeds x the last checkpoints (:func:`summarize_seeds`).

    ``levels[i]`` (and ``leaves``) hold, for each key of :data:`TERM_KEYS` and :data:`CONDITION_KEYS`: the median
    (under the key itself), ``*_min``, ``*_max``, ``*_floor`` (the jackknife's, median over runs), ``*_seed_se``
    (the standard error of the mean over seeds, std_s(mean_c v_{s,c}) / sqrt(K): each seed first averaged over
    its last checkpoints, so that correlated checkpoints of one run count once) and ``within_noise`` (the keys
    whose median is at most :data:`~smaso.student.noise.WITHIN_NOISE` (2) times the larger of the two, or below
    float64 round-off).
    """

    seeds: list[int]
    last: int
    levels: list[dict] = field(default_factory=list)
    leaves: dict = field(default_factory=dict)
    accuracy: dict = field(default_factory=dict)
    loss: dict = field(default_factory=dict)
    steps: list[list[int]] = field(default_factory=list)
    evaluation: str | None = None

    def to_dict(self) -> dict:
        """The summary as plain JSON-able data."""
        return {"seeds": self.seeds, "last_checkpoints": self.last, "steps": self.steps, "evaluation": self.evaluation,
                "accuracy": self.accuracy, "loss": self.loss, "levels": self.levels, "leaves": self.leaves}

    @staticmethod
    def _cell(row: dict, key: str, noise: bool = True) -> str:
        if key not in row:
            return f"{'-':>{35 if noise else 27}}"
        star = "*" if key in row["within_noise"] else "?" if key in row.get("floor_over_estimated", ()) else " "
        text = f"{row[key]:7.1e} [{row[f'{key}_min']:7.1e}..{row[f'{key}_max']:7.1e}]"
        if noise:
            text += f" ({max(row.get(f'{key}_floor') or 0.0, row[f'{key}_seed_se']):5.0e})"
        return text + star

    def table(self) -> str:
        """The summary as text (what ``smaso demo`` and ``compare --seeds K`` print): accuracy, then per level the
        recursion's error and the two parts of Thm 2's one-step error, then Thm 2's conditions, each as
        ``median [min..max] (noise)`` with ``*`` where within noise."""
        k = len(self.seeds)
        acc = self.accuracy
        ev = f"{self.evaluation} " if self.evaluation else ""
        lines = [f"over {k} student seeds {self.seeds} x the last {self.last} checkpoints: median [min..max] "
                 f"(noise: the larger of the jackknife floor and the seeds' standard error); * = within noise "
                 f"(median <= {WITHIN_NOISE:g} x noise)",
                 f"accuracy on the {ev}rows: {acc['median']:.4f} [{acc['min']:.4f}..{acc['max']:.4f}]",
                 f"{'level':>5} {'':3} {'recursion':>35} | {'part: focus / broadness':>35} "
                 f"{'part: decorrelation':>35}"]
        for r in self.levels:
            for q, label in (("F", "F"), ("G", "G~"), ("dW", "dW")):
                a, b = (f"{q}_local_{p}" for p in CONTRIBUTIONS[f"{q}_local"])
                head = f"{r['level']:5d}" if q == "F" else " " * 5
                lines.append(f"{head} {label:3} {self._cell(r, f'{q}_propagated')} | {self._cell(r, a)} "
                             f"{self._cell(r, b)}")
        lines += ["Thm 2's conditions (0 when the condition holds): median [min..max], * = within noise",
                  f"{'level':>6} " + " ".join(f"{c:>27}" for c in CONDITION_KEYS)]
        for r in [*self.levels, {**self.leaves, "level": "leaves"}]:
            lines.append(f"{r['level']:>6} " + " ".join(self._cell(r, c, noise=False) for c in CONDITION_KEYS))
        return "\n".join(lines)


def summarize_seeds(runs: Sequence, *, seeds: Sequence[int] | None = None, last: int = 3) -> SeedSummary:
    """Summarize comparisons of one setting over student seeds (module docstring).

    :param runs: :class:`~smaso.student.compare.ComparisonResult` objects (or dicts with their ``history``), one
        per student seed, of the same ladder and student class.
    :param seeds: the runs' seeds, for the report (default ``0..K-1``).
    :param last: how many of each run's last checkpoints enter every number (fewer where a run has fewer).
    """
    if isinstance(last, bool) or not isinstance(last, int) or last < 1:
        raise ValueError(f"last: expected a positive integer number of checkpoints, got {last!r}")
    histories = [_history(r)[-last:] for r in runs]
    if not histories:
        raise ValueError("runs: expected at least one comparison")
    seeds = list(range(len(histories))) if seeds is None else [int(s) for s in seeds]
    if len(seeds) != len(histories):
        raise ValueError(f"seeds: expected one seed per run ({len(histories)}), got {len(seeds)}")
    depth = {len(h[-1]["levels"]) for h in histories}
    if len(depth) != 1:
        raise ValueError(f"runs: the runs have different numbers of levels ({sorted(depth)}); compare one setting")
    keys = (*TERM_KEYS, *CONDITION_KEYS)
    levels = []
    for i in range(depth.pop()):
        row = _summarize([[c["levels"][i] for c in h] for h in histories], keys)
        levels.append({"level": histories[0][-1]["levels"][i]["level"], **row})
    leaves = _summarize([[c["leaves"] for c in h] for h in histories], CONDITION_KEYS)

    def spread(key: str) -> dict:
        values = [c[key] for h in histories for c in h]
        finals = [h[-1][key] for h in histories]
        return {"median": statistics.median(values), "min": min(values), "max": max(values),
                "final_by_seed": finals}

    evaluation = {c.get("evaluation") for h in histories for c in h}
    return SeedSummary(seeds=seeds, last=last, levels=levels, leaves=leaves, accuracy=spread("accuracy"),
                       loss=spread("loss"), steps=[[c["step"] for c in h] for h in histories],
                       evaluation=evaluation.pop() if len(evaluation) == 1 else None)


def _seed_run(seed: int, sample, kwargs: dict) -> dict:
    """One student of :func:`compare_seeds` (a task of its engine: any process): its history, without tensors."""
    from smaso.student.compare import compare_student

    res = compare_student(sample, seed=seed, progress=False, **kwargs)
    return {"seed": seed, "history": res.history, "stopped_at": res.stopped_at, "seconds": res.seconds}


def compare_seeds(sample, seeds: int | Sequence[int] = 3, *, last: int = 3, engine=None, progress: bool = False,
                  **student_kwargs) -> tuple[SeedSummary, list[dict]]:
    """Train one student per seed on ``sample`` with :func:`~smaso.student.compare.compare_student` and summarize.

    Each seed is one task of ``engine`` (``None``: here, one after the other; a
    :class:`~teachers.engine.DaskEngine`: on its workers); the runs do not depend on where they ran.  A student's
    seed sets its initial weights and its minibatch order; the data and the evaluation rows are the same for all.

    :param sample: a :class:`~teachers.sampling.LadderSample`, a chunked dataset or a path (sent to each task).
    :param seeds: K (the seeds ``0..K-1``) or the seeds themselves.
    :param last: checkpoints per run that enter the summary (:func:`summarize_seeds`).
    :param student_kwargs: :func:`~smaso.student.compare.compare_student`'s options but ``seed`` (the task's);
        each task evaluates in its own process (``engine`` here places the seeds, not a run's evaluation).
    :returns: ``(summary, runs)``: the :class:`SeedSummary` and each seed's ``{"seed", "history", "stopped_at",
        "seconds"}``.
    """
    if isinstance(seeds, bool):
        raise TypeError("seeds: expected a positive integer or a sequence of seeds, got a bool")
    if isinstance(seeds, int):
        if seeds < 1:
            raise ValueError(f"seeds: expected a positive number of students, got {seeds}")
        seeds = list(range(seeds))
    seeds = list(seeds)
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds) \
            or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: expected distinct non-negative integer seeds, got {seeds!r}")
    if "seed" in student_kwargs:
        raise TypeError("student_kwargs: 'seed' is set by compare_seeds (one task per seed), not passed through")
    from teachers.engine import get_engine

    runs = get_engine(engine).map(_seed_run, seeds, sample, dict(student_kwargs),
                                  progress="student seeds" if progress else None)
    return summarize_seeds(runs, seeds=seeds, last=last), runs
