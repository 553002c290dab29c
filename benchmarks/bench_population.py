"""Benchmark: R restarts of a 1-D ReLU student trained as one population against one after the other.

What is measured, in one process, for each hidden widths in ``WIDTHS`` ((4,) and (3, 3, 2)) and each
population size R in ``--sizes`` (default 16, 64, 256), on tau^k (``--k``, default 4):

1. ``sequential``: the baseline, R restarts trained one after the other, each a plain ``nn.Sequential``
   (``pop.member(r)`` of an *untrained* ``StudentPopulation(widths, R, seed=seed)``, so both contenders
   train the same networks) by the loop of ``tests/test_population.py::_train_alone``, written out here
   (:func:`train_alone`): its own data exactly as ``train_population`` documents (a generator seeded
   ``seed``: ``torch.rand(n_train, 1)``, then ``torch.randint(0, n_train, (batch,))`` per step), Adam
   with peak learning rate ``--lr``, ``OneCycleLR``, the L1 loss, no Frobenius penalty (the reference
   loop's ``0 * sum ||W||^2`` term is left out, as ``train_population`` leaves it out at weight 0);
2. ``population``: ``smaso.depth.population.train_population`` on a copy of that untrained population:
   the same hyperparameters (Adam, one-cycle, L1, batch ``--batch`` = 256, ``--n-train`` = 8192, ``--steps``
   = 500 steps, the same data seed), all R members in one batched network.

The sequential baseline trains only the first ``min(R, --seq-members)`` members (default 16) in each timed
run, and its time per restart is extrapolated from them (every restart is the same network size and does
the same steps, so the time of R restarts is R times that); the JSON says how many members were timed
(``members_timed``) and whether the per-restart time was extrapolated (``extrapolated``).

Timing: building the networks (a ``copy.deepcopy`` of the untrained population, ``pop.member(r)``) is done
outside the timed region; each timed run covers drawing the data and all ``--steps`` steps.  Both
contenders are warmed up once on a few steps, then timed in turn (round robin, ``--repeats`` rounds) with
``time.perf_counter``; per-restart seconds use the best (shortest) run, the median is recorded too, as is
each run's process CPU time.  ``x_sequential`` = sequential seconds per restart / contender seconds per
restart (a speedup; 1 for the baseline).  Target: ``x_sequential >= 10`` for the population at R = 256
(judged at the largest R of the run) for both widths.

Correctness: the members trained by the population must end where the same members trained alone end;
every population row records the largest absolute parameter difference over the members the baseline
trained (``max_abs_param_diff``), and ``correctness`` holds it for the smallest R (every member trained
both ways there when R <= ``--seq-members``), with the number of members at or above 1e-8
(``members_over_tolerance``); it should be below 1e-8.  The two contenders differ only by float64
rounding (batched and plain matrix products sum in different orders), but training amplifies it (the
L1 loss's gradient flips sign where a member's output crosses the target): the difference grows with
``--steps`` (for widths (3, 3, 2), R = 16 it was about 2e-15 after 60 steps, 6e-14 after 200 and 3e-10
after 500, in one of the 16 members), hence a tolerance of 1e-8 at 500 steps; ``tests/test_population.py``
checks 1e-10 after 60 steps.  All numbers and machine information go to
``--out`` (JSON, written atomically).

Run it with::

    python benchmarks/bench_population.py --threads 1   # full run (R = 16, 64, 256; 500 steps), about 1.5 minutes
    python benchmarks/bench_population.py --quick       # smoke run (R = 2, 4; 20 steps; 1 repeat)

``--threads`` defaults to 1 here (one core per training, as a sweep of restarts would run).
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from smaso.depth.population import StudentPopulation, population_l1_error, train_population
from teachers.tent import tent_power

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common beside this script, also when loaded by path
import _common as common

DEFAULT_OUT = common.default_out("population")
WIDTHS = ((4,), (3, 3, 2))
FULL_SIZES, QUICK_SIZES = (16, 64, 256), (2, 4)
FULL_STEPS, QUICK_STEPS = 500, 20
FULL_REPEATS, QUICK_REPEATS = 3, 1
SPEEDUP_TARGET = 10.0  # x_sequential of the population at the largest R, at least
TOLERANCE = 1e-8  # max abs parameter difference, population member vs the same member alone (500 steps)
CHECK_KEYS = ("max_abs_param_diff", "members_compared", "members_over_tolerance")
WARMUP_STEPS = 20
RESULT_KEYS = ("widths", "r", "contender", "description", "steps", "members_timed", "extrapolated", "repeats",
               "times_s", "process_cpu_s", "best_s", "median_s", "per_restart_s", "per_restart_s_median",
               "x_sequential", "x_sequential_median", "max_abs_param_diff", "target")


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(s) for s in text.split(",") if s.strip())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=_sizes, default=None,
                   help="population sizes R, comma-separated (default 16,64,256; 2,4 with --quick)")
    p.add_argument("--steps", type=int, default=None, help=f"training steps (default {FULL_STEPS}; "
                                                           f"{QUICK_STEPS} with --quick)")
    p.add_argument("--repeats", type=int, default=None, help=f"timed rounds (default {FULL_REPEATS}; "
                                                             f"{QUICK_REPEATS} with --quick)")
    p.add_argument("--seq-members", type=int, default=16,
                   help="members the sequential baseline trains per timed run (default 16; extrapolated to R)")
    p.add_argument("--k", type=int, default=4, help="the teacher tau^k (default 4)")
    p.add_argument("--batch", type=int, default=256, help="minibatch size (default 256)")
    p.add_argument("--n-train", type=int, default=8192, help="training sample size (default 8192)")
    p.add_argument("--lr", type=float, default=0.1, help="peak learning rate of Adam (default 0.1)")
    p.add_argument("--init", default="data", help="StudentPopulation init (default 'data')")
    p.add_argument("--seed", type=int, default=0, help="seed of the population and of the data (default 0)")
    common.add_threads_arg(p)
    common.add_quick_out_args(p, f"smoke run: R in {QUICK_SIZES}, {QUICK_STEPS} steps, repeats={QUICK_REPEATS}",
                              DEFAULT_OUT)
    args = p.parse_args(argv)
    common.fill_defaults(args, {"sizes": QUICK_SIZES, "steps": QUICK_STEPS, "repeats": QUICK_REPEATS, "threads": 1},
                         {"sizes": FULL_SIZES, "steps": FULL_STEPS, "repeats": FULL_REPEATS, "threads": 1})
    common.require_positive(p, args, ("steps", "repeats", "seq_members", "k", "batch", "n_train", "threads"))
    if not args.sizes or min(args.sizes) < 1:
        p.error("--sizes must be positive integers")
    args.sizes = tuple(sorted(set(args.sizes)))
    if not args.lr > 0:
        p.error("--lr must be > 0")
    return args


# ---------------------------------------------------------------------- contenders
def train_alone(net: nn.Sequential, k: int, *, steps: int, batch: int, n_train: int, lr: float, seed: int) -> None:
    """The baseline: one student trained alone, in place (``tests/test_population.py::_train_alone`` with
    Adam, one-cycle, the L1 loss and no penalty), its data drawn as ``train_population`` documents."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n_train, 1, generator=gen, dtype=torch.float64)
    y = tent_power(x, k)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    for _ in range(steps):
        idx = torch.randint(0, n_train, (batch,), generator=gen)
        value = (net(x[idx]) - y[idx]).abs().mean()
        opt.zero_grad()
        value.backward()
        opt.step()
        sched.step()


def sequential_runner(pop0: StudentPopulation, members: int, args: argparse.Namespace,
                      steps: int) -> Callable[[], tuple[float, list[nn.Sequential]]]:
    """A run: the first ``members`` members of the untrained ``pop0``, trained one after the other."""
    def run() -> tuple[float, list[nn.Sequential]]:
        nets = [pop0.member(r) for r in range(members)]
        t0 = time.perf_counter()
        for net in nets:
            train_alone(net, args.k, steps=steps, batch=args.batch, n_train=args.n_train, lr=args.lr, seed=args.seed)
        return time.perf_counter() - t0, nets
    return run


def population_runner(pop0: StudentPopulation, args: argparse.Namespace,
                      steps: int) -> Callable[[], tuple[float, StudentPopulation]]:
    """A run: a copy of the untrained ``pop0``, all members trained as one by ``train_population``."""
    def run() -> tuple[float, StudentPopulation]:
        pop = copy.deepcopy(pop0)
        t0 = time.perf_counter()
        train_population(pop, args.k, steps=steps, batch=args.batch, n_train=args.n_train, lr=args.lr,
                         loss="l1", optimizer="adam", schedule="onecycle", seed=args.seed)
        return time.perf_counter() - t0, pop
    return run


def member_diffs(pop: StudentPopulation, nets: list[nn.Sequential]) -> list[float]:
    """Per member of ``nets``: the largest |population member's parameter - the same member trained alone|."""
    with torch.no_grad():
        return [max(float((a - b).abs().max()) for a, b in zip(pop.member(r).parameters(), net.parameters(),
                                                                 strict=True))
                for r, net in enumerate(nets)]


def measure(widths: tuple[int, ...], size: int, args: argparse.Namespace) -> list[dict]:
    """Warm both contenders up on (``widths``, R = ``size``), then time them round robin."""
    pop0 = StudentPopulation(widths, size, seed=args.seed, init=args.init)
    members = min(size, args.seq_members)
    print(f"widths {widths}, R = {size}: sequential on {members} member(s), population on {size}", flush=True)
    warm = min(WARMUP_STEPS, args.steps)
    sequential_runner(pop0, 1, args, warm)()
    population_runner(pop0, args, warm)()
    runs = [sequential_runner(pop0, members, args, args.steps), population_runner(pop0, args, args.steps)]
    out, cpu = common.round_robin(runs, args.repeats,
                                  on_round=lambda r: print(f"  round {r + 1}/{args.repeats}", flush=True))
    (seq_out, pop_out), (seq_cpu, pop_cpu) = out, cpu
    diffs = member_diffs(pop_out[-1][1], seq_out[-1][1])
    diff, over = max(diffs), sum(d >= TOLERANCE for d in diffs)
    best_l1 = float(population_l1_error(pop_out[-1][1], args.k).min())
    rows = []
    for name, description, results, cs, n in (
            ("sequential", "R x nn.Sequential pop.member(r), trained one after the other (baseline)",
             seq_out, seq_cpu, members),
            ("population", "train_population on StudentPopulation(widths, R): one batched network",
             pop_out, pop_cpu, size)):
        ts = [t for t, _ in results]
        best, median = common.best_median(ts)
        rows.append({"widths": list(widths), "r": size, "contender": name, "description": description,
                     "steps": args.steps, "members_timed": n, "extrapolated": n < size, "repeats": args.repeats,
                     "times_s": ts, "process_cpu_s": cs, "best_s": best, "median_s": median,
                     "per_restart_s": best / n, "per_restart_s_median": median / n,
                     "x_sequential": None, "x_sequential_median": None,
                     "max_abs_param_diff": diff if name == "population" else None,
                     "members_compared": members if name == "population" else None,
                     "members_over_tolerance": over if name == "population" else None,
                     "best_member_l1": best_l1 if name == "population" else None,
                     "target": name == "population" and size == max(args.sizes)})
    base = rows[0]
    for r in rows:
        r["x_sequential"] = base["per_restart_s"] / r["per_restart_s"]
        r["x_sequential_median"] = base["per_restart_s_median"] / r["per_restart_s_median"]
    return rows


# ---------------------------------------------------------------------- reporting
TABLE = (common.Column("widths", 10, lambda r: ",".join(map(str, r["widths"])), align="<"),
         common.Column("R", 5, "r"),
         common.Column("contender", 11, "contender", align="<"),
         common.Column("timed", 6, "members_timed"),
         common.Column("seconds", 8, "best_s", ".3f"),
         common.Column("s/restart", 10, "per_restart_s", ".4g"),
         common.Column("s/r median", 10, "per_restart_s_median", ".4g"),
         common.Column("x seq", 7, "x_sequential", ".2f"),
         common.Column("max|diff|", 10, "max_abs_param_diff", ".2e"))
TABLE_NOTE = ("(seconds = best of the repeats for the members timed; s/restart = seconds / members timed (the "
              "sequential baseline extrapolated from its first members); x seq = sequential s/restart / contender "
              "s/restart; max|diff| = largest parameter difference, population member vs the same member alone)")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    wall0 = common.start(args.threads)
    print(f"R in {list(args.sizes)}, {args.steps} steps, {args.repeats} round(s), tau^{args.k}; "
          f"{common.torch_summary()}")
    info = common.machine_info()

    rows = []
    for widths in WIDTHS:
        for size in args.sizes:
            rows += measure(widths, size, args)

    pops = [r for r in rows if r["contender"] == "population"]
    targets = {}
    for r in (r for r in pops if r["target"]):
        key = f"x_sequential_w{'-'.join(map(str, r['widths']))}_R{r['r']}"
        targets[key] = {"widths": r["widths"], "r": r["r"], "value": r["x_sequential"],
                        "value_median": r["x_sequential_median"], "target": f">= {SPEEDUP_TARGET:g}",
                        "pass": r["x_sequential"] >= SPEEDUP_TARGET}
    smallest = [r for r in pops if r["r"] == args.sizes[0]]
    worst = max(r["max_abs_param_diff"] for r in smallest)
    correctness = {"r": args.sizes[0], "statistic": "max abs parameter difference, population member vs the same "
                   "member trained alone (sequential baseline), over the members compared and both widths",
                   "per_widths": {",".join(map(str, r["widths"])): {key: r[key] for key in CHECK_KEYS}
                                  for r in smallest},
                   "max_abs_param_diff": worst, "tolerance": TOLERANCE, "pass": worst < TOLERANCE}

    print()
    common.print_table(TABLE, rows, TABLE_NOTE)
    print()
    for key, t in targets.items():
        print(f"{key:<28} {t['value']:8.2f}x  (median {t['value_median']:.2f}x)  target {t['target']}x  "
              f"{'PASS' if t['pass'] else 'FAIL'}")
    print(f"correctness at R = {correctness['r']}: max |diff| {worst:.3g}  (< {TOLERANCE:g}: "
          f"{'PASS' if correctness['pass'] else 'FAIL'})")
    total_s = common.finish(info, wall0)
    common.print_done(total_s, args.out)

    sections = {
        "config": {"widths": [list(w) for w in WIDTHS], "sizes": list(args.sizes), "k": args.k, "steps": args.steps,
                   "batch": args.batch, "n_train": args.n_train, "lr": args.lr, "optimizer": "adam",
                   "schedule": "onecycle", "loss": "l1", "frobenius": 0.0, "init": args.init, "dtype": "float64",
                   "seed": args.seed, "repeats": args.repeats, "seq_members": args.seq_members,
                   "threads": args.threads, "quick": args.quick, "rate_statistic": "best"},
        "baseline": {"sequential_members_timed": {str(s): min(s, args.seq_members) for s in args.sizes},
                     "extrapolated": "the sequential time per restart is measured on the first min(R, seq_members) "
                                     "members and applies to every restart (same network size, same steps)"},
    }
    result = common.record("population", argv, sections, info, rows,
                           {"targets": targets, "correctness": correctness}, total_s)
    return common.write_json(args.out, result)


if __name__ == "__main__":
    main()
