"""Benchmark: the runs of a sample-complexity sweep trained as one population against one after the other.

The sweep (:mod:`smaso.sweep`) trains R students of one shape, each on its own training rows with its own
initial weights and minibatch order.  For each population size R in ``--sizes`` (default 4, 16, 64), on a ladder of
the RHM's shape (``Ladder.random(3, 2, 8)``: 8 leaves of 8 symbols, 8 classes) with the ladder student of
``smaso compare``'s defaults (width 16, a readout group of 32), P = ``--P`` rows per member, SGD at lr 0.5 on
minibatches of ``--batch`` for ``--steps`` steps, float64:

1. ``alone``: the baseline, the members trained one after the other by the project's own trainer,
   :func:`smaso.student.training.train_ladder_student` (the explicit backward of Eq 2);
2. ``population``: :func:`smaso.student.batched.train_student_population`, every member in one vmapped step.

Both train the same untrained networks on the same rows with the same minibatch order; ``max_abs_param_diff``
is the largest parameter difference between a member trained both ways (they agree to float64 rounding;
``tests/test_sweep.py`` checks 1e-10).  Timing: best (and median) of ``--repeats`` round-robin rounds of
``time.perf_counter`` around the training alone (data and networks made outside); ``x_alone`` = alone seconds
per member / population seconds per member.

Run it with::

    python benchmarks/bench_sweep_population.py --threads 1 --record   # about two minutes
    python benchmarks/bench_sweep_population.py --quick                # smoke run
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common beside this script, also when loaded by path
import _common as common

from smaso.student.batched import train_student_population
from smaso.student.network import LadderStudent
from smaso.student.training import train_ladder_student
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

QUICK_SIZES, FULL_SIZES = (2, 4), (4, 16, 64)
QUICK_STEPS, FULL_STEPS = 10, 200


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=lambda t: tuple(int(v) for v in t.split(",")), default=None,
                   help=f"population sizes R (default {','.join(map(str, FULL_SIZES))})")
    p.add_argument("--steps", type=int, default=None, help=f"SGD steps (default {FULL_STEPS})")
    p.add_argument("--P", type=int, default=512, help="training rows per member")
    p.add_argument("--batch", type=int, default=64, help="minibatch")
    p.add_argument("--repeats", type=int, default=None, help="round-robin rounds (default 3)")
    common.add_threads_arg(p)
    common.add_quick_out_args(p, "smoke run (R = 2, 4; 10 steps; 1 round)", common.default_out("sweep_population"))
    args = p.parse_args(argv)
    common.fill_defaults(args, {"sizes": QUICK_SIZES, "steps": QUICK_STEPS, "repeats": 1},
                         {"sizes": FULL_SIZES, "steps": FULL_STEPS, "repeats": 3})
    common.require_positive(p, args, ["steps", "P", "batch", "repeats"])
    return args


def measure(ladder: Ladder, R: int, args: argparse.Namespace) -> list[dict]:
    data = [sample_ladder(ladder, args.P, seed=100 + r, progress=False) for r in range(R)]
    xs, ys = [d.inputs(dtype=torch.float64) for d in data], [d.y.long() for d in data]
    nets = [LadderStudent(ladder, 16, readout=32, seed=r, dtype=torch.float64) for r in range(R)]
    kw = {"steps": args.steps, "lr": 0.5, "batch_size": args.batch}
    out: dict[str, list] = {"alone": [], "population": []}

    def alone() -> float:
        trained = [copy.deepcopy(n) for n in nets]
        t0 = time.perf_counter()
        for r, net in enumerate(trained):
            train_ladder_student(net, xs[r], ys[r], seed=r, **kw)
        out["alone"].append(trained)
        return time.perf_counter() - t0

    def population() -> float:
        t0 = time.perf_counter()
        fit = train_student_population(nets, xs, ys, seeds=list(range(R)), **kw)
        out["population"].append(fit.students)
        return time.perf_counter() - t0

    train_student_population(nets[:1], xs[:1], ys[:1], seeds=[0], steps=2, lr=0.5, batch_size=args.batch)  # warm up
    times, cpu = common.round_robin([alone, population], args.repeats)
    diff = max(float((a - b).abs().max()) for m1, m2 in zip(out["alone"][-1], out["population"][-1], strict=True)
               for a, b in zip(m1.parameters(), m2.parameters(), strict=True))
    rows = []
    best_alone = min(times[0]) / R
    for name, t, c in zip(("alone", "population"), times, cpu, strict=True):
        best, median = common.best_median(t)
        rows.append({"contender": name, "r": R, "s_per_member": best / R, "s_per_member_median": median / R,
                     "cpu_s": c, "x_alone": best_alone / (best / R),
                     "max_abs_param_diff": diff if name == "population" else 0.0})
    return rows


TABLE = [common.Column("contender", 11, "contender", align="<"), common.Column("R", 4, "r"),
         common.Column("s/member", 10, "s_per_member", ".4f"), common.Column("x alone", 8, "x_alone", ".2f"),
         common.Column("max|diff|", 10, "max_abs_param_diff", ".2g")]


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    wall0 = common.start(args.threads)
    print(f"R in {list(args.sizes)}, {args.steps} steps, P = {args.P}; {common.torch_summary()}")
    info = common.machine_info(pyro=False)
    ladder = Ladder.random(3, 2, 8, seed=0)
    rows = [row for R in args.sizes for row in measure(ladder, R, args)]
    print()
    common.print_table(TABLE, rows)
    total_s = common.finish(info, wall0)
    common.print_done(total_s, args.out)
    sections = {"config": {"ladder": repr(ladder), "student": "LadderStudent(width 16, readout 32)",
                           "sizes": list(args.sizes), "steps": args.steps, "P": args.P, "batch": args.batch,
                           "lr": 0.5, "optimizer": "sgd", "dtype": "float64", "repeats": args.repeats,
                           "threads": args.threads, "quick": args.quick, "rate_statistic": "best"}}
    return common.write_json(args.out, common.record("sweep_population", argv, sections, info, rows, {}, total_s))


if __name__ == "__main__":
    main()
