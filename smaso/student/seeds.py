"""Students as replicates: one comparison over K student seeds, with its controls and an honest interval.

The jackknife floor of :mod:`smaso.student.noise` covers the evaluation rows of *one* set of weights; a reported
error also moves with the student's initialisation and minibatch order.  :func:`compare_seeds` trains K students
(one task each on an engine: this process, or Dask workers), each optionally with its shuffled-label control, and
:func:`summarize_seeds` reports every number of :func:`~smaso.student.diagnosis.compare_statistics_to_theory`
(:class:`SeedSummary`):

- **one value per seed**: a seed's last ``last`` checkpoints are averaged *within the seed* first.  Checkpoints
  of one run are correlated (the same weights a few hundred steps apart), not replicates: a seed counts once
  however many checkpoints it has;
- the **median and range** (min..max) over the K per-seed values, every per-seed value kept (``per_seed``), and
  an interval for the median over seeds that is exact for K seeds (:func:`median_interval`: order statistics;
  with K = 5, [min, max] covers it with probability 1 - 2/2^5 = 93.75%);
- beside them the jackknife floor (the median over seeds of each seed's mean floor) and the seeds' standard
  error std_s(v_s) / sqrt(K), and "within noise" decided from these per-seed values (``docs/theory.md`` §1.5);
- the same numbers for two **controls**: the same seeds at initialisation (every run's step-0 checkpoint) and,
  when given, the same students trained on shuffled labels
  (:func:`~smaso.student.compare.compare_student` with ``shuffle_labels=True``);
- **identities apart**: a number at float64 round-off (:data:`~smaso.student.noise.ROUNDOFF`) in every seed and
  checkpoint of the trained students *and* of their controls holds for any weights: it is an identity of the
  teacher and the architecture (focus where a child's input is a function of its event, broadness where a
  parent's event determines its child's, the decorrelation of a level without a gate), not a finding, and
  where one part of a one-step error is such a 0 the error *equals* its other part (the split of
  ``docs/theory.md`` §1.5 is exact); the summary names both (``identity``) and the table says "identity".

A statistic undefined in a seed (NaN, JSON null or infinite in a checkpoint row, its reason in the row's
``undefined`` dict, e.g. a dead level) makes that seed's value undefined: it is never dropped silently; the
summary says in how many seeds and why (``undefined``), the median is over the seeds where it is defined, and the
table prints ``n/a`` (or the value over the other seeds) with a numbered note.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard

from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.diagnosis import CONTRIBUTIONS
from smaso.student.noise import ROUNDOFF, WITHIN_NOISE

if TYPE_CHECKING:
    import torch

    from teachers.chunked import DataSource
    from teachers.engine import DaskEngine, SerialEngine

__all__ = ["ARMS", "CONDITION_KEYS", "INTERVAL_LEVEL", "TERM_KEYS", "SeedSummary", "compare_seeds",
           "median_interval", "order_statistic_coverage", "summarize_seeds"]

#: Per-level errors of Eq 9 and the parts of Thm 2's one-step error, in the order :meth:`SeedSummary.table`
#: prints them.
TERM_KEYS = tuple(k for q in ("F", "G", "dW") for k in (f"{q}_propagated", f"{q}_local",
                                                       *(f"{q}_local_{p}" for p in CONTRIBUTIONS[f"{q}_local"])))
#: Thm 2's conditions, measured (0 when the condition holds), per level and at the leaves.
CONDITION_KEYS = ("decorrelation_fwd", "decorrelation_bwd", "decorrelation_dW", "focus", "broadness")
#: The coverage the interval for the median over seeds aims at (:func:`median_interval`).
INTERVAL_LEVEL = 0.95
#: What a summary holds: the trained students and their two controls (:class:`SeedSummary`).
ARMS = ("trained", "init", "shuffled")


def order_statistic_coverage(k: int, j: int) -> float:
    """The probability that ``[x_(j), x_(k+1-j)]`` (order statistics of k independent draws of a continuous law)
    holds the law's median m: each draw falls below m with probability 1/2, so the number B below m is
    Binomial(k, 1/2) and the interval misses m exactly when B < j or B > k - j,

        P(x_(j) <= m <= x_(k+1-j)) = 1 - 2 P(B <= j - 1) = 1 - 2^(1-k) sum_{i<j} C(k, i).

    For a law with atoms the closed interval covers at least this.  With k = 5, j = 1: 1 - 2/32 = 0.9375.
    """
    if isinstance(k, bool) or not isinstance(k, int) or isinstance(j, bool) or not isinstance(j, int) \
            or not 1 <= j <= (k + 1) // 2:
        raise ValueError(f"k, j: expected integers with 1 <= j <= (k + 1) // 2, got k={k!r}, j={j!r}")
    return 1.0 - 2.0 * sum(math.comb(k, i) for i in range(j)) / 2.0**k


def _ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ..., ``11th``, ``12th``, ``13th``, ``21st``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def median_interval(values: Sequence[float], level: float = INTERVAL_LEVEL) -> tuple[float, float, float] | None:
    """A distribution-free confidence interval for the median of the law the per-seed values are drawn from:
    ``(x_(j), x_(K+1-j), coverage)`` for the largest j whose exact coverage
    (:func:`order_statistic_coverage`) is at least ``level``, or ``j = 1`` (the range ``[min, max]``) with its
    smaller coverage when K is too small for ``level`` (K = 5: 93.75%; K = 4: 87.5%; K = 3: 75%); None for K < 2.

    Why this interval and not a t-interval for the mean over seeds: it needs only that the seeds are independent
    draws of one law (the student's seed is), while a t-interval with K - 1 degrees of freedom needs the per-seed
    values to be nearly normal, which relative errors (positive, skewed, a seed now and then far out) are not,
    and at K = 5 nothing can check it; its coverage is then unknown, this one is exact; and it is an interval for
    the median, the central value the summary reports.  tests/test_seeds.py measures its coverage by simulation.

    :param values: the K per-seed values (finite).
    :param level: the coverage aimed at, in (0, 1).
    """
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level: expected a coverage in (0, 1), got {level!r}")
    x = sorted(float(v) for v in values)
    if not all(math.isfinite(v) for v in x):
        raise ValueError(f"values: expected finite per-seed values, got {x}")
    k = len(x)
    if k < 2:
        return None
    j = 1
    while j + 1 <= (k + 1) // 2 and order_statistic_coverage(k, j + 1) >= level:
        j += 1
    return x[j - 1], x[k - j], order_statistic_coverage(k, j)


def _history(run: dict) -> list[dict]:
    history = run.history if hasattr(run, "history") else run.get("history") if isinstance(run, dict) else None
    if not history:
        raise ValueError("runs: every run must be a ComparisonResult (or its dict) with at least one checkpoint")
    return history


def _finite(v: object) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _finite_mean(values: Sequence[object]) -> float | None:
    """The mean of ``values`` (one seed's checkpoints) where there is one and each is a finite number, else None."""
    finite = [v for v in values if _finite(v)]
    return statistics.fmean(finite) if finite and len(finite) == len(values) else None


def _why_undefined(row: dict, key: str) -> str | None:
    """Why ``row[key]`` is not a number (NaN, JSON null, infinite or missing), in the row's words where it gives
    them (its ``undefined`` dict), or None when it is one."""
    v = row.get(key)
    if _finite(v):
        return None
    reason = (row.get("undefined") or {}).get(key)
    if reason:
        return str(reason)
    return "not measured in this checkpoint" if key not in row else "infinite" if isinstance(v, float) and \
        math.isinf(v) else "undefined (no reason given)"


def _seed_value(rows: list[dict], key: str) -> tuple[float | None, str | None]:
    """One seed's value of ``key``: the mean over its checkpoint rows ``rows``, or ``(None, why)`` when it is
    undefined at any of them (a dead level at one checkpoint is not averaged away)."""
    why = [w for w in (_why_undefined(r, key) for r in rows) if w]
    if why:
        return None, "; ".join(dict.fromkeys(why))
    return statistics.fmean(r[key] for r in rows), None


def _center(values: list[float | None]) -> dict:
    """Median, range, interval and standard error of the defined per-seed values (NaN when none is)."""
    defined = [v for v in values if v is not None]
    if not defined:
        return {"median": math.nan, "min": math.nan, "max": math.nan, "interval": None, "coverage": None,
                "seed_se": math.nan, "seeds_defined": 0}
    iv = median_interval(defined)
    se = statistics.stdev(defined) / math.sqrt(len(defined)) if len(defined) >= 2 else 0.0
    return {"median": statistics.median(defined), "min": min(defined), "max": max(defined),
            "interval": None if iv is None else [iv[0], iv[1]], "coverage": None if iv is None else iv[2],
            "seed_se": se, "seeds_defined": len(defined)}


def _summarize(rows_by_seed: list[list[dict]], keys: Sequence[str], seeds: list[int]) -> dict:
    """One level's summary of ``keys``: ``rows_by_seed[s]`` are that level's rows at seed s's checkpoints.

    Per key: the median over seeds (under the key), ``_min``, ``_max``, ``_interval`` and ``_coverage``
    (:func:`median_interval`), ``_seed_se``, ``_floor``; ``per_seed[key]`` (and ``per_seed[key_floor]``) the
    per-seed values (None where undefined); ``undefined[key]`` the seeds where it is undefined and why;
    ``within_noise`` the keys whose median is at most WITHIN_NOISE times the larger of floor and seed error
    (never a key undefined in some seed)."""
    out: dict = {"per_seed": {}}
    within, inflated, undefined = [], [], {}
    for key in keys:
        if not any(key in r for rows in rows_by_seed for r in rows):
            continue  # not measured in this setting at all (e.g. the F parts at a BN level)
        vals = [_seed_value(rows, key) for rows in rows_by_seed]
        per_seed = [v for v, _ in vals]
        checkpoint_floors = [[r.get(f"{key}_floor") for r in rows] for rows in rows_by_seed]
        floors = [_finite_mean(f) for f in checkpoint_floors]
        out["per_seed"][key] = per_seed
        missing = [(s, why) for s, (_, why) in zip(seeds, vals, strict=True) if why is not None]
        if missing:
            undefined[key] = {"seeds": [s for s, _ in missing], "of": len(seeds),
                              "reasons": [why for _, why in missing]}
        c = _center(per_seed)
        out[key], out[f"{key}_min"], out[f"{key}_max"] = c["median"], c["min"], c["max"]
        out[f"{key}_interval"], out[f"{key}_coverage"], out[f"{key}_seed_se"] = (c["interval"], c["coverage"],
                                                                                 c["seed_se"])
        defined_floors = [f for f in floors if f is not None]
        floor = statistics.median(defined_floors) if defined_floors else None
        if any(f is not None for f in floors):
            out["per_seed"][f"{key}_floor"] = floors
            out[f"{key}_floor"] = floor
        noise = max(floor or 0.0, c["seed_se"] if math.isfinite(c["seed_se"]) else 0.0)
        if not missing and (floor is not None or c["seeds_defined"] >= 2) \
                and c["median"] <= WITHIN_NOISE * noise + ROUNDOFF:
            within.append(key)
        if any(key in r.get("floor_over_estimated", ()) for rows in rows_by_seed for r in rows):
            inflated.append(key)
    out["within_noise"] = within
    if inflated:
        out["floor_over_estimated"] = inflated
    if undefined:
        out["undefined"] = undefined
    return out


def _spread(values_by_seed: list[list[float]]) -> dict:
    """A per-checkpoint scalar (accuracy, loss) as one value per seed (its checkpoints' mean) and their center."""
    per_seed = [_finite_mean(vs) for vs in values_by_seed]
    c = _center(per_seed)
    return {"median": c["median"], "min": c["min"], "max": c["max"], "interval": c["interval"],
            "coverage": c["coverage"], "per_seed": per_seed}


def _identities(rows_by_arm: list[list[dict]], keys: Sequence[str]) -> dict[str, str]:
    """The keys that are identities over every row of every arm (module docstring): ``{key: "0"}`` where the
    number is at round-off everywhere, and ``{q_local: part}`` where the one-step error equals its ``part`` to
    round-off everywhere because the other part is such a 0."""
    rows = [r for arm in rows_by_arm for r in arm]
    if len(rows_by_arm) < 2 or not rows:
        return {}  # the trained students alone do not tell an identity from a number that training drove to 0
    out = {k: "0" for k in keys if all(_finite(r.get(k)) and abs(r[k]) <= ROUNDOFF for r in rows)}
    for q, parts in CONTRIBUTIONS.items():
        if q in out or q not in keys:
            continue
        for zero, other in (parts, parts[::-1]):
            a, b = f"{q}_{zero}", f"{q}_{other}"
            if out.get(a) == "0" and all(_finite(r.get(q)) and _finite(r.get(b)) and abs(r[q] - r[b]) <= ROUNDOFF
                                         for r in rows):
                out[q] = b
    return out


def _split_holds(rows_by_arm: list[list[dict]]) -> list[str]:
    """The one-step errors ``q`` whose exact split q_local = a + b (as vectors, ``docs/theory.md`` §1.5) shows in
    every row of every arm as the triangle inequalities |q - b| <= a and |q - a| <= b, to round-off.  Where a
    part is small (focus within noise) the one-step error therefore equals the other part up to it: a
    consequence of the split, not a finding."""
    rows = [r for arm in rows_by_arm for r in arm]
    out = []
    for q, (pa, pb) in CONTRIBUTIONS.items():
        a, b = f"{q}_{pa}", f"{q}_{pb}"
        have = [r for r in rows if all(_finite(r.get(k)) for k in (q, a, b))]
        if have and all(abs(r[q] - r[b]) <= r[a] + ROUNDOFF and abs(r[q] - r[a]) <= r[b] + ROUNDOFF for r in have):
            out.append(q)
    return out


def _fmt(v: float | None, spec: str = "7.1e") -> str:
    return "n/a" if v is None or not math.isfinite(v) else format(v, spec)


#: How :meth:`SeedSummary.table` names the arms.
ARM_LABELS = {"trained": "trained", "init": "init (step 0)", "shuffled": "shuffled labels"}
#: How :meth:`SeedSummary.table` names the rows of a quantity.
_ROW_NAMES = {"propagated": "recursion", "local": "one step"}
#: Thm 2's conditions in the table's header (the words of ``ComparisonResult.table``).
_CONDITION_NAMES = {"decorrelation_fwd": "decorrelation fwd", "decorrelation_bwd": "decorrelation bwd",
                    "decorrelation_dW": "decorrelation dW"}
#: The name of a part of a one-step error (the README's column names: "F focus part", ...).
_PART_NAMES = {"focus": "focus part", "broadness": "broadness part", "decorrelation": "decorrelation part"}


@dataclass
class SeedSummary:
    """Every reported number over K student seeds, one value per seed (:func:`summarize_seeds`; module docstring).

    ``levels[i]`` (and ``leaves``) hold, for each key of :data:`TERM_KEYS` and :data:`CONDITION_KEYS` measured:
    the median over seeds (under the key itself; NaN when undefined in every seed), ``*_min``, ``*_max``,
    ``*_interval`` ([lo, hi], the interval for the median over seeds of :func:`median_interval`) and
    ``*_coverage`` (its exact coverage), ``*_floor`` (the median over seeds of each seed's mean jackknife floor),
    ``*_seed_se`` (std over seeds / sqrt(K)), and ``per_seed`` (``{key: [one value per seed, None where
    undefined]}``, floors under ``key_floor``); ``within_noise`` (the keys whose median is at most
    :data:`~smaso.student.noise.WITHIN_NOISE` (2) times the larger of floor and seed error, or below float64
    round-off, and defined in every seed); ``undefined`` (``{key: {"seeds", "of", "reasons"}}``);
    ``identity`` (``{key: "0"}`` or ``{one-step key: the part it equals}``, over the trained students and their
    controls) and ``split_holds`` (the one-step errors whose exact split shows in every row).

    ``controls`` holds the same summaries (``levels``, ``leaves``, ``accuracy``, ``loss``, ``steps``) for
    ``"init"`` (every seed's step-0 checkpoint) and, when given, ``"shuffled"`` (the shuffled-label students'
    last ``last`` checkpoints).
    """

    seeds: list[int]
    last: int
    levels: list[dict] = field(default_factory=list)
    leaves: dict = field(default_factory=dict)
    accuracy: dict = field(default_factory=dict)
    loss: dict = field(default_factory=dict)
    steps: list[list[int]] = field(default_factory=list)
    evaluation: str | None = None
    controls: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The summary as plain data (NaN where undefined: the CLI and the benchmarks write it as JSON null)."""
        return {"seeds": self.seeds, "last_checkpoints": self.last, "steps": self.steps, "evaluation": self.evaluation,
                "interval_level": INTERVAL_LEVEL, "accuracy": self.accuracy, "loss": self.loss, "levels": self.levels,
                "leaves": self.leaves, "controls": self.controls}

    def arms(self) -> dict[str, dict]:
        """``{arm: {"levels", "leaves", "accuracy", ...}}`` for the trained students and each control present."""
        return {"trained": {"levels": self.levels, "leaves": self.leaves, "accuracy": self.accuracy,
                            "loss": self.loss, "steps": self.steps}, **self.controls}

    @staticmethod
    def _cell(row: dict, key: str, note: Callable[[], int], *, noise: bool, width: int) -> str:
        """``median [min..max]`` of one key of one arm's row, with ``(noise)*`` for the trained students;
        ``n/a`` where undefined in every seed and ``(n)`` (a note) where undefined in some; ``0 (identity)``."""
        if key not in row:
            return f"{'-':>{width}}"
        if row.get("identity", {}).get(key) == "0":
            return f"{'0 (identity)':>{width}}"
        med = row[key]
        if not math.isfinite(med):
            text = "n/a"
        else:
            lo, hi = row[f"{key}_min"], row[f"{key}_max"]
            text = f"{med:7.1e} [{lo:7.1e}..{hi:7.1e}]"
            iv = row.get(f"{key}_interval")
            if iv and (iv[0], iv[1]) != (lo, hi):  # K >= 9: the interval is narrower than the range
                text += f" {{{iv[0]:.1e}..{iv[1]:.1e}}}"
            if noise:
                floor = row.get(f"{key}_floor")
                floor = floor if floor is not None and math.isfinite(floor) else 0.0
                star = "*" if key in row["within_noise"] else "?" if key in row.get("floor_over_estimated", ()) \
                    else " "
                text += f" ({max(floor, row[f'{key}_seed_se']):5.0e}){star}"
        if key in row.get("undefined", {}):
            text += f" ({note()})"
        return f"{text:>{width}}"

    def table(self) -> str:
        """The summary as text (what ``smaso demo`` and ``compare --seeds K`` print): accuracy, then per level and
        quantity the recursion's error, the one-step error and its two parts, for the trained students and each
        control, each as ``median [min..max]`` over seeds (the trained ones with ``(noise)`` and ``*`` where
        within noise), identities said as identities; then Thm 2's conditions of the trained students; numbered
        notes for undefined numbers."""
        from smaso.student.compare import ERROR_WORDS

        k = len(self.seeds)
        arms = self.arms()
        iv = median_interval(range(k))
        if iv is None:  # k < 2
            interval = "one seed: no interval"
        elif iv[:2] == (0, k - 1):
            interval = (f"[min..max] covers the median over seeds with probability "
                        f"{order_statistic_coverage(k, 1):.2%} (order statistics, K = {k})")
        else:
            lo, hi, cov = int(iv[0]), int(iv[1]), iv[2]
            interval = (f"{{lo..hi}}: the {_ordinal(lo + 1)} and {_ordinal(hi + 1)} of the {k} seeds' values (in "
                        f"increasing order), an interval for the "
                        f"median over seeds with probability {cov:.2%} (order statistics)")
        ev = f"{self.evaluation} " if self.evaluation else ""
        controls = ["init (step 0) = the same seeds before training"]
        if "shuffled" in arms:
            controls.append("shuffled labels = the same students trained on permuted labels (same initialisation, "
                            "minibatches and evaluation rows)")
        lines = [f"over {k} student seeds {self.seeds}: each seed's value is the mean over its last {self.last} "
                 f"checkpoints; median [min..max] over the seeds; {interval}",
                 f"controls: {'; '.join(controls)}",
                 f"(noise): the larger of the jackknife floor and the seeds' standard error; * = within noise "
                 f"(median <= {WITHIN_NOISE:g} x noise); identity = at float64 round-off in every seed and "
                 "checkpoint, trained and controls: it holds for any weights",
                 ERROR_WORDS,
                 f"accuracy on the {ev}rows (each seed's mean over its last {self.last} checkpoints; median "
                 "[min..max] over seeds): " + " | ".join(
                     f"{ARM_LABELS[name]} {_fmt(a['accuracy']['median'], '.4f')} "
                     f"[{_fmt(a['accuracy']['min'], '.4f')}..{_fmt(a['accuracy']['max'], '.4f')}]"
                     for name, a in arms.items())]
        notes: list[tuple[str, object, str]] = []

        def note(arm: str, level: int | None, key: str) -> Callable[[], int]:
            def add() -> int:
                notes.append((arm, level, key))
                return len(notes)
            return add

        ctl = [name for name in arms if name != "trained"]
        lines.append(f"{'level':>5} {'':3} {'':22} {ARM_LABELS['trained']:>45}"
                     + "".join(f" {ARM_LABELS[name]:>30}" for name in ctl))
        for i, r in enumerate(self.levels):
            for q, label in (("F", "F"), ("G", "G~"), ("dW", "dW")):
                keys = [f"{q}_propagated", f"{q}_local", *(f"{q}_local_{p}" for p in CONTRIBUTIONS[f"{q}_local"])]
                for j, key in enumerate(k_ for k_ in keys if k_ in r):
                    tail = key.removeprefix(f"{q}_")
                    part = tail.removeprefix("local_")
                    name = f"{label} {_ROW_NAMES.get(tail) or _PART_NAMES.get(part, part + ' part')}"
                    lead = (f"{r['level']:5d}" if q == "F" and j == 0 else " " * 5) + " " * 4
                    cells = [self._cell(r, key, note("trained", r["level"], key), noise=True, width=45)]
                    cells += [self._cell(arms[n]["levels"][i], key, note(n, r["level"], key), noise=False, width=30)
                              for n in ctl]
                    lines.append(f"{lead} {name:22} " + " ".join(cells))
            eq = [f"{key.replace('G_', 'G~_').replace('_local', ' one step')} = its {part.rsplit('_', 1)[1]} part"
                  for key, part in r.get("identity", {}).items() if part != "0"]
            if eq:
                lines.append(f"{'':9} identity: {', '.join(eq)} (the other part is 0 in every run)")
        split = [q.removesuffix("_local").replace("G", "G~") for q in CONTRIBUTIONS
                 if self.levels and all(q in r.get("split_holds", ()) for r in self.levels)]
        if split:
            lines.append(f"the split is exact ({', '.join(split)}): |one step - one part| <= the other part in every "
                         "row of every run, so a one-step error equals one part up to the other")
        lines += ["Thm 2's conditions (0 when the condition holds), trained: median [min..max], * = within noise",
                  f"{'level':>6} " + " ".join(f"{_CONDITION_NAMES.get(c, c):>27}" for c in CONDITION_KEYS)]
        for r in [*self.levels, {**self.leaves, "level": "leaves"}]:
            lines.append(f"{r['level']:>6} " + " ".join(
                self._cell(r, c, note("trained", r["level"], c), noise=False, width=27) for c in CONDITION_KEYS))
        for n, (arm, level, key) in enumerate(notes, 1):
            src = arms[arm]
            row = src["leaves"] if level == "leaves" else next(x for x in src["levels"] if x["level"] == level)
            bad = row["undefined"][key]
            why = "; ".join(f"seed {s}: {w}" for s, w in zip(bad["seeds"], bad["reasons"], strict=True))
            lines.append(f"({n}) {key} at level {level}, {ARM_LABELS[arm]}: undefined in {len(bad['seeds'])} of "
                         f"{bad['of']} seeds ({why})")
        return "\n".join(lines)


def _arm(histories: list[list[dict]], seeds: list[int], depth: int) -> dict:
    """One arm's summary: per level, the leaves, accuracy, loss and steps from each seed's checkpoint rows."""
    keys = (*TERM_KEYS, *CONDITION_KEYS)
    levels = []
    for i in range(depth):
        row = _summarize([[c["levels"][i] for c in h] for h in histories], keys, seeds)
        levels.append({"level": histories[0][-1]["levels"][i]["level"], **row})
    leaves = _summarize([[c["leaves"] for c in h] for h in histories], CONDITION_KEYS, seeds)
    return {"levels": levels, "leaves": leaves,
            "accuracy": _spread([[c["accuracy"] for c in h] for h in histories]),
            "loss": _spread([[c["loss"] for c in h] for h in histories]),
            "steps": [[c["step"] for c in h] for h in histories]}


def summarize_seeds(runs: Sequence, *, seeds: Sequence[int] | None = None, last: int = 3,
                    shuffled: Sequence | None = None) -> SeedSummary:
    """Summarize comparisons of one setting over student seeds, one value per seed (module docstring).

    :param runs: :class:`~smaso.student.compare.ComparisonResult` objects (or dicts with their ``history``), one
        per student seed, of the same ladder and student class.  Their step-0 checkpoints form the
        initialisation control (where every run has one).
    :param seeds: the runs' seeds, for the report (default ``0..K-1``).
    :param last: how many of each run's last checkpoints are averaged into its seed's value (fewer where a run has
        fewer).
    :param shuffled: the shuffled-label control, one run per seed in the order of ``runs``
        (:func:`~smaso.student.compare.compare_student` with ``shuffle_labels=True``); its last ``last``
        checkpoints are averaged like the trained runs'.
    """
    if isinstance(last, bool) or not isinstance(last, int) or last < 1:
        raise ValueError(f"last: expected a positive integer number of checkpoints, got {last!r}")
    full = [_history(r) for r in runs]
    if not full:
        raise ValueError("runs: expected at least one comparison")
    seeds = list(range(len(full))) if seeds is None else [int(s) for s in seeds]
    if len(seeds) != len(full):
        raise ValueError(f"seeds: expected one seed per run ({len(full)}), got {len(seeds)}")
    arms = {"trained": [h[-last:] for h in full]}
    if all(h[0].get("step") == 0 for h in full):
        arms["init"] = [h[:1] for h in full]
    if shuffled is not None:
        control = [_history(r) for r in shuffled]
        if len(control) != len(full):
            raise ValueError(f"shuffled: expected one control run per seed ({len(full)}), got {len(control)}")
        arms["shuffled"] = [h[-last:] for h in control]
    depths = {len(c["levels"]) for hs in arms.values() for h in hs for c in h}
    if len(depths) != 1:
        raise ValueError(f"runs: the runs have different numbers of levels ({sorted(depths)}); compare one setting")
    depth = depths.pop()
    out = {name: _arm(hs, seeds, depth) for name, hs in arms.items()}
    # identities over every row of every arm: what holds for any weights (module docstring)
    for i in range(depth + 1):
        rows = [[c["levels"][i] if i < depth else c["leaves"] for h in hs for c in h] for hs in arms.values()]
        keys = (*TERM_KEYS, *CONDITION_KEYS) if i < depth else CONDITION_KEYS
        found, split = _identities(rows, keys), _split_holds(rows) if i < depth else []
        for summary in out.values():
            row = summary["levels"][i] if i < depth else summary["leaves"]
            if found:
                row["identity"] = found
            if split:
                row["split_holds"] = split
    t = out.pop("trained")
    evaluation = {c.get("evaluation") for h in arms["trained"] for c in h}
    return SeedSummary(seeds=seeds, last=last, levels=t["levels"], leaves=t["leaves"], accuracy=t["accuracy"],
                       loss=t["loss"], steps=t["steps"], evaluation=evaluation.pop() if len(evaluation) == 1 else None,
                       controls=out)


def _seed_run(seed: int, sample: DataSource, configs: tuple, shuffled: bool = False,
              device: torch.device | str | None = None) -> dict:
    """One student of :func:`compare_seeds` (a task of its engine: any process): its history, without tensors,
    and with ``shuffled`` that of its shuffled-label control under ``"shuffled"`` (without the alignment); the two
    trained as one population (:func:`_population_runs`)."""
    return _population_runs([seed], sample, configs, shuffled, device)[0]


def _population_runs(seeds: Sequence[int], sample: DataSource, configs: tuple, shuffled: bool = False,
                     device: torch.device | str | None = None, last: int | None = None) -> list[dict]:
    """:func:`_seed_run` of every seed in ``seeds``, the students (and with ``shuffled`` their controls) trained as
    one batched population (:func:`~smaso.student.population.compare_population`: the runs one by one give the
    same weights bit for bit, the same histories to float64 round-off).  ``last``: measure each run's first
    checkpoint and its last this many only (what :func:`summarize_seeds` with that ``last`` reads; None: all)."""
    from smaso.student.population import compare_population

    student, training, evaluation = configs
    trainings = [dataclasses.replace(training, seed=s) for s in seeds]
    evaluations = [evaluation] * len(seeds)
    if shuffled:
        trainings += [dataclasses.replace(training, seed=s, shuffle_labels=True) for s in seeds]
        evaluations += [dataclasses.replace(evaluation, alignment=False)] * len(seeds)
    options = None if last is None else [{"_last_checkpoints": last}] * len(trainings)
    return _run_dicts(seeds, compare_population(sample, student, trainings, evaluations, device=device,
                                                _member_options=options), shuffled)


def _run_dicts(seeds: Sequence[int], results: Sequence, shuffled: bool) -> list[dict]:
    """:func:`_seed_run`'s dicts from ComparisonResults: ``results`` the K seeds' runs, then (``shuffled``) their K
    controls in the same order."""
    out = [{"seed": s, "history": r.history, "stopped_at": r.stopped_at, "seconds": r.seconds}
           for s, r in zip(seeds, results, strict=False)]
    if shuffled:
        for o, ctl in zip(out, results[len(seeds):], strict=True):
            o["shuffled"] = {"history": ctl.history, "stopped_at": ctl.stopped_at, "seconds": ctl.seconds}
    return out


def compare_seeds(sample: DataSource, seeds: int | Sequence[int] = 3, *, last: int = 3,
                  engine: SerialEngine | DaskEngine | None = None, progress: bool = False,
                  shuffled: bool = False, student: StudentConfig | None = None,
                  training: TrainingConfig | None = None, evaluation: EvaluationConfig | None = None,
                  device: torch.device | str | None = None,
                  **legacy: Any) -> tuple[SeedSummary, list[dict]]:
    """Train one student per seed on ``sample`` with :func:`~smaso.student.compare.compare_student` and summarize.

    Each seed is one task of ``engine`` (``None``: here, every seed and control trained as one batched population,
    :mod:`smaso.student.population`, the same runs as one after the other; a
    :class:`~teachers.engine.ProcessEngine` or :class:`~teachers.engine.DaskEngine`: in other processes); the
    runs do not depend on where they ran.  A student's seed sets its initial weights and its minibatch order; the
    data and the evaluation rows are the same for all.

    :param sample: a :class:`~teachers.sampling.LadderSample`, a chunked dataset or a path (sent to each task).
    :param seeds: K (the seeds ``0..K-1``) or the seeds themselves.
    :param last: checkpoints per run averaged into its seed's value (:func:`summarize_seeds`).
    :param shuffled: also train each seed's shuffled-label control (``training.shuffle_labels=True``, the
        same options without the alignment; in the same task) and summarize it beside the trained students.
    :param student: :func:`~smaso.student.compare.compare_student`'s ``student``
        (:class:`~smaso.student.config.StudentConfig`; None: the defaults).
    :param training: its ``training``; the seed is each task's, ``shuffle_labels`` must be False.
    :param evaluation: its ``evaluation``; each task evaluates in its own process (``engine`` here places the
        seeds, not a run's evaluation).
    :param device: torch device of every run (None: cpu).
    :param legacy: deprecated: the configs' fields as keywords (a :class:`DeprecationWarning`).
    :returns: ``(summary, runs)``: the :class:`SeedSummary` and each seed's ``{"seed", "history", "stopped_at",
        "seconds"}`` (with ``shuffled``: and ``"shuffled"``, the control's ``{"history", "stopped_at",
        "seconds"}``).
    """
    from smaso.student.compare import _configs

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
    if not isinstance(shuffled, bool):
        raise TypeError(f"shuffled: expected a bool, got {type(shuffled).__name__}")
    for name in ("seed", "shuffle_labels"):
        if name in legacy or (training is not None and name == "shuffle_labels" and training.shuffle_labels):
            raise TypeError(f"{name!r} is set by compare_seeds (one task per seed"
                            f"{', shuffled=True for the control' if name == 'shuffle_labels' else ''}), "
                            "not passed through")
    configs = _configs(student, training, evaluation, legacy, "compare_seeds")
    from teachers.engine import get_engine

    if engine is None:  # here: every seed (and control) trained as one batched population
        runs = _population_runs(seeds, sample, configs, shuffled, device)
    else:
        runs = get_engine(engine).map(_seed_run, seeds, sample, configs, shuffled, device,
                                      progress="student seeds" if progress else None)
    return summarize_seeds(runs, seeds=seeds, last=last,
                           shuffled=[r["shuffled"] for r in runs] if shuffled else None), runs
