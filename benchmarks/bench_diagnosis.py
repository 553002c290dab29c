"""Benchmark: the diagnosis of one checkpoint with the jackknife's noise floors, its K replicates reformulated one
by one against as one batched call (issue 39).

The setup is one checkpoint of ``smaso demo``'s student (its options, parsed by the ``smaso demo`` parser: the
default ladder, the readout student, ``--eval-examples`` rows of float64 statistics in ``--noise-groups`` row groups,
the demo's loss and ``P_source``), at initialisation (the diagnosis's cost does not depend on the weights).  Each
contender produces :func:`~smaso.student.diagnosis.compare_statistics_to_theory`'s report of that checkpoint:

- ``one_by_one``: the report without floors, then every replicate's terms by its own pair of ``reformulate`` calls
  (propagated, local) and the floors from the K values: the diagnosis's floors block before issue 39, verbatim
  (:func:`one_by_one`), 2 (K + 1) ``reformulate`` calls;
- ``batched``: ``compare_statistics_to_theory(..., replicates=...)`` as the library runs it now: the K replicates
  stacked (:func:`~smaso.student.noise.stack_statistics`) and reformulated in one batched call, 4 calls;
- ``no_floors``: the report without noise floors (2 calls): the floor that batching the replicates can approach;
- ``replicates``: ``list(stats.leave_one_out())`` alone, the K leave-one-out statistics both floor contenders read
  (the demo pays it at every checkpoint; not part of the contenders' times).

Timing: every contender once untimed, then ``--repeats`` interleaved rounds (one_by_one, batched, no_floors,
replicates, ...), ``time.perf_counter``, best and median; ``x_one_by_one`` = one_by_one's seconds / the contender's
(best of each, and median of each).  ``demo_seed_s`` projects a demo seed's diagnosis time: best seconds x the
checkpoints of one run (steps / eval_every + 1) x 2 runs (the seed and its shuffled-label control).  The machine is
shared: the JSON keeps the load average at the start and the end.

``demo_seed`` (unless ``--demo-rounds 0``): the same two floor contenders in a real demo seed, its run and its
shuffled-label control (``compare_student`` with the demo's configs, without the alignment, ``--demo-steps`` steps,
default the demo's 3 000: 2 x 13 checkpoints), the diagnosis of every checkpoint done by the contender
(``compare_statistics_to_theory`` as ``compare_student`` calls it, replaced by the contender): ``diagnosis_s`` sums
the contender's time over the checkpoints, ``seed_s`` is the seed's wall time (run and control), ``replicates_s``
the time spent building the leave-one-out statistics; ``--demo-rounds`` interleaved rounds (one_by_one, batched),
best of each.  Training does not depend on the diagnosis, so both contenders see the same statistics; their
reports are compared checkpoint by checkpoint as below (``demo_correctness``).

Correctness (``correctness``): the batched report's numbers other than the floors are bit for bit the one-by-one
report's (``same_numbers``), its floors equal the one-by-one floors to float64 round-off: ``max_floor_abs_diff``
over every floor (each floor is a ratio ||se(v)|| / ||m||, so round-off is ~1e-16 of ||v|| / ||m||) and
``max_floor_rel_diff`` over the floors above :data:`FLOOR_NOISE` (those of sampling noise; a number that is itself
round-off, an identity up to the float32 student's arithmetic, has a floor of round-off whose relative difference
says nothing), and the ``within_noise`` lists are equal (``same_within_noise``).

    python benchmarks/bench_diagnosis.py --record    # the recorded results (about 2 minutes on 2 cores)
    python benchmarks/bench_diagnosis.py --quick     # a smoke run (1 024 rows, 3 rounds, a 40-step demo seed)
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

import smaso.student.diagnosis as diagnosis
from smaso.cli import build_parser
from smaso.cli_student import _configs
from smaso.student.diagnosis import _comparison_terms, _norm, compare_statistics_to_theory
from smaso.student.frequency import collect_statistics
from smaso.student.network import LadderStudent
from smaso.student.noise import ROUNDOFF, WITHIN_NOISE, norm_floor
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder
from teachers.statistics import exact_statistics

CONTENDERS = ("one_by_one", "batched", "no_floors", "replicates")
RESULT_KEYS = ("contender", "times_s", "best_s", "median_s", "reformulate_calls", "x_one_by_one",
               "x_one_by_one_median", "demo_seed_s")
#: Floors above this are of sampling noise (below: floors of numbers that are themselves round-off, of the float32
#: student's activations, whose floors are round-off too), compared relatively.
FLOOR_NOISE = 1e-6
QUICK = {"eval_examples": 1024, "repeats": 3, "demo_steps": 40, "demo_rounds": 1}
FULL = {"eval_examples": None, "repeats": 15, "demo_steps": None, "demo_rounds": 1}  # None: the demo's own
DEMO_CONTENDERS = ("one_by_one", "batched")
DEMO_KEYS = ("contender", "seed_s", "diagnosis_s", "replicates_s", "checkpoints", "x_one_by_one", "rounds")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-examples", type=int, default=None, help="evaluation rows (default: the demo's, 8192)")
    p.add_argument("--repeats", type=int, default=None, help="interleaved timed rounds (default 15; --quick 3)")
    p.add_argument("--seed", type=int, default=1, help="the evaluation sample's seed")
    p.add_argument("--demo-steps", type=int, default=None, help="the demo seed's training steps (default: the demo's)")
    p.add_argument("--demo-rounds", type=int, default=None,
                   help="interleaved rounds of the demo seed (default 1; 0: no demo seed)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, as a demo worker)")
    _common.add_quick_out_args(p, "a smoke run (1 024 rows, 3 rounds)", _common.default_out("diagnosis"))
    args = p.parse_args(argv)
    _common.fill_defaults(args, QUICK, FULL)
    # the demo seed's sample size and checkpoints: the demo's own, or (--quick) a small sample evaluated every 20
    # steps, still 3 checkpoints a run
    args.demo_n, args.demo_eval_every = (6000, 20) if args.quick else (None, None)
    return args


def one_by_one(student: LadderStudent, stats: Any, replicates: list, P_source: str, loss: str) -> dict:
    """The report with its noise floors from one pair of ``reformulate`` calls per replicate: the floors block of
    ``compare_statistics_to_theory`` before issue 39, verbatim, on the report without floors and its terms (captured
    from that report's own ``_comparison_terms`` call, so that the full statistics are reformulated once, as then)."""
    captured = []
    real = diagnosis._comparison_terms

    def capture(*a: Any, **k: Any) -> Any:
        captured.append(real(*a, **k))
        return captured[-1]

    diagnosis._comparison_terms = capture
    try:
        out = compare_statistics_to_theory(student, stats, P_source=P_source, loss=loss)
    finally:
        diagnosis._comparison_terms = real
    (levels_t, leaves_t), = captured
    levels, leaves, lad = out["levels"], out["leaves"], stats.ladder
    exact = exact_statistics(stats.ladder) if P_source == "exact" else None
    reps = [_comparison_terms(student, st, st.P if exact is None else exact, loss) for st in replicates]
    has_bn = any(student.bn_params(l) is not None for l in range(lad.depth))
    for l, (row, terms) in enumerate([*zip(levels, levels_t, strict=True), (leaves, leaves_t)]):
        rep_terms = [r[0][l] if l < lad.depth else r[1] for r in reps]
        for k, t in terms.items():
            row[f"{k}_floor"] = norm_floor([r[k].v for r in rep_terms], _norm(t.m, t.mask), t.mask)
        inflated = {k for k in terms if has_bn and l < lad.depth and (k.endswith("_propagated") or (
            student.bn_params(l) is not None and k in ("F_local", "G_local")))}
        row["within_noise"] = [k for k in terms if k not in inflated
                               and row[k] <= WITHIN_NOISE * row[f"{k}_floor"] + ROUNDOFF]
        if inflated:
            row["floor_over_estimated"] = sorted(inflated)
    out["noise_groups"] = len(replicates)
    return out


def _rows(report: dict) -> list[dict]:
    return [*report["levels"], report["leaves"]]


def correctness(ref: dict, got: dict) -> dict:
    """The batched report against the one-by-one one (module docstring)."""
    same, worst_abs, worst_rel, floors = True, 0.0, 0.0, 0
    for a, b in zip(_rows(ref), _rows(got), strict=True):
        for k, v in a.items():
            if k.endswith("_floor"):
                if math.isfinite(v):
                    worst_abs = max(worst_abs, abs(b[k] - v))
                    if v > FLOOR_NOISE:
                        worst_rel, floors = max(worst_rel, abs(b[k] - v) / v), floors + 1
            elif k not in ("within_noise", "floor_over_estimated"):
                same &= v == b[k] or (isinstance(v, float) and math.isnan(v) and math.isnan(b[k]))
    within = [r.get("within_noise") for r in _rows(ref)] == [r.get("within_noise") for r in _rows(got)]
    return {"same_numbers": bool(same), "max_floor_abs_diff": worst_abs, "max_floor_rel_diff": worst_rel,
            "floors_compared": floors, "same_within_noise": within}


def demo_seed(contender: str, args: argparse.Namespace) -> tuple[dict, list]:
    """One demo seed, its run and its shuffled-label control, the diagnosis of every checkpoint by ``contender``
    (module docstring): its row and the reports of its checkpoints."""
    import smaso.student.compare as compare
    from smaso.student.frequency import FrequencyStatistics

    argv = ["demo"] + ([] if args.demo_n is None else ["-n", str(args.demo_n)])
    if args.demo_steps is not None:
        argv += ["--steps", str(args.demo_steps)]
    if args.demo_eval_every is not None:
        argv += ["--eval-every", str(args.demo_eval_every), "--eval-examples", str(args.eval_examples)]
    demo = build_parser().parse_args(argv)
    lad = Ladder.default()
    sample = sample_ladder(lad, demo.n, demo.seed, progress=False)
    evaluation = sample_ladder(lad, demo.eval_examples, demo.seed + 1, progress=False)
    spent = {"diagnosis": 0.0, "replicates": 0.0, "checkpoints": 0}
    reports = []
    real_compare, real_loo = compare.compare_statistics_to_theory, FrequencyStatistics.leave_one_out

    def diagnose(student: LadderStudent, stats: Any, *, P_source: str = "empirical", loss: str = "squared",
                 replicates: Any = None) -> dict:
        t0 = time.perf_counter()
        out = (one_by_one(student, stats, list(replicates), P_source, loss) if contender == "one_by_one" else
               real_compare(student, stats, P_source=P_source, loss=loss, replicates=replicates))
        spent["diagnosis"] += time.perf_counter() - t0
        spent["checkpoints"] += 1
        reports.append(out)
        return out

    def leave_one_out(stats: FrequencyStatistics) -> Any:
        t0 = time.perf_counter()
        reps = list(real_loo(stats))
        spent["replicates"] += time.perf_counter() - t0
        return iter(reps)

    compare.compare_statistics_to_theory = diagnose
    setattr(FrequencyStatistics, "leave_one_out", leave_one_out)  # noqa: B010  (a method replaced for the run)
    try:
        t0 = time.perf_counter()
        for shuffle in (False, True):
            compare.compare_student(sample, *_configs(demo, evaluation, alignment=False, shuffle_labels=shuffle))
        seed_s = time.perf_counter() - t0
    finally:
        compare.compare_statistics_to_theory = real_compare
        setattr(FrequencyStatistics, "leave_one_out", real_loo)  # noqa: B010
    return {"contender": contender, "seed_s": seed_s, "diagnosis_s": spent["diagnosis"],
            "replicates_s": spent["replicates"], "checkpoints": spent["checkpoints"]}, reports


def _calls(f: Any) -> int:
    """How many times ``f()`` calls the diagnosis's ``reformulate``."""
    real, n = diagnosis.reformulate, [0]

    def counted(*a: Any, **k: Any) -> Any:
        n[0] += 1
        return real(*a, **k)

    diagnosis.reformulate = counted
    try:
        f()
    finally:
        diagnosis.reformulate = real
    return n[0]


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    _common.require_positive(argparse.ArgumentParser(), args, ["repeats"])
    wall0 = _common.start(args.threads)
    demo = build_parser().parse_args(["demo"])
    student_cfg, training, evaluation = _configs(demo, True)
    n_eval = int(args.eval_examples or evaluation.eval_examples or 8192)
    lad = Ladder.default()
    ev = sample_ladder(lad, n_eval, args.seed, progress=False)
    net = LadderStudent(lad, student_cfg.width, activation=student_cfg.activation, batch_norm=student_cfg.batch_norm,
                        bias=student_cfg.bias, seed=training.seed, shared=student_cfg.shared,
                        readout=student_cfg.readout)
    stats = collect_statistics(net, ev.inputs(dtype=torch.float32), ev.y, ev.z, loss=training.loss,
                               dtype=torch.float64, groups=evaluation.noise_groups)
    reps = list(stats.leave_one_out())
    P_source, loss = evaluation.P_source, training.loss
    print(f"bench_diagnosis: {_common.torch_summary()}, {n_eval} rows, {len(reps)} replicates, "
          f"load {_common.loadavg()}")
    runs: dict[str, Callable[[], Any]] = {
        "one_by_one": lambda: one_by_one(net, stats, reps, P_source, loss),
        "batched": lambda: compare_statistics_to_theory(net, stats, replicates=reps, P_source=P_source, loss=loss),
        "no_floors": lambda: compare_statistics_to_theory(net, stats, P_source=P_source, loss=loss),
        "replicates": lambda: list(stats.leave_one_out()),
    }
    calls = {k: _calls(f) for k, f in runs.items()}  # (also the untimed first run of each)
    times: dict[str, list[float]] = {k: [] for k in CONTENDERS}
    for _ in range(args.repeats):
        for k in CONTENDERS:
            t0 = time.perf_counter()
            runs[k]()
            times[k].append(time.perf_counter() - t0)
    checkpoints = training.steps // evaluation.eval_every + 1
    base_best, base_med = min(times["one_by_one"]), statistics.median(times["one_by_one"])
    results = []
    for k in CONTENDERS:
        best, med = min(times[k]), statistics.median(times[k])
        row = {"contender": k, "times_s": times[k], "best_s": best, "median_s": med, "reformulate_calls": calls[k],
               "x_one_by_one": base_best / best, "x_one_by_one_median": base_med / med,
               "demo_seed_s": best * checkpoints * 2}
        results.append(row)
        print(f"  {k:11s} best {best * 1e3:7.2f} ms  median {med * 1e3:7.2f} ms  reformulate x{calls[k]:2d}  "
              f"x_one_by_one {row['x_one_by_one']:5.2f} (median {row['x_one_by_one_median']:5.2f})  "
              f"demo seed {row['demo_seed_s']:.2f} s")
    check = correctness(runs["one_by_one"](), runs["batched"]())
    print(f"  correctness: {check}")
    demo_rows: list[dict] = []
    demo_check = None
    if args.demo_rounds:
        seed_runs: dict[str, list[tuple[dict, list[dict]]]] = {k: [] for k in DEMO_CONTENDERS}
        for _ in range(args.demo_rounds):
            for k in DEMO_CONTENDERS:
                seed_runs[k].append(demo_seed(k, args))
        for k in DEMO_CONTENDERS:
            fastest = min((r for r, _ in seed_runs[k]), key=lambda r: r["diagnosis_s"])
            demo_rows.append({**fastest, "rounds": args.demo_rounds})
        base = demo_rows[0]["diagnosis_s"]
        for row in demo_rows:
            row["x_one_by_one"] = base / row["diagnosis_s"]
            print(f"  demo seed {row['contender']:11s} diagnosis {row['diagnosis_s']:.2f} s over {row['checkpoints']} "
                  f"checkpoints (x_one_by_one {row['x_one_by_one']:.2f}); replicates {row['replicates_s']:.2f} s; "
                  f"seed and control {row['seed_s']:.1f} s")
        pairs = [correctness(a, b) for a, b in zip(seed_runs["one_by_one"][0][1], seed_runs["batched"][0][1],
                                                   strict=True)]
        demo_check = {"same_numbers": all(c["same_numbers"] for c in pairs),
                      "max_floor_abs_diff": max(c["max_floor_abs_diff"] for c in pairs),
                      "max_floor_rel_diff": max(c["max_floor_rel_diff"] for c in pairs),
                      "floors_compared": sum(c["floors_compared"] for c in pairs),
                      "same_within_noise": all(c["same_within_noise"] for c in pairs)}
        print(f"  demo correctness: {demo_check}")
    machine = _common.machine_info(pyro=False)
    total = _common.finish(machine, wall0)
    config = {"quick": args.quick, "repeats": args.repeats, "threads": args.threads, "eval_examples": n_eval,
              "groups": evaluation.noise_groups, "replicates": len(reps), "width": student_cfg.width,
              "readout": student_cfg.readout, "loss": training.loss, "P_source": evaluation.P_source,
              "checkpoints_per_run": checkpoints, "runs_per_seed": 2, "seed": args.seed,
              "demo_steps": args.demo_steps or training.steps, "demo_rounds": args.demo_rounds}
    data = _common.record("diagnosis", argv, {"config": config}, machine, results,
                          {"correctness": check, "demo_seed": demo_rows, "demo_correctness": demo_check}, total)
    _common.write_json(args.out, data)
    _common.print_done(total, args.out)
    return data


if __name__ == "__main__":
    main()
