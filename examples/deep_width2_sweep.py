"""Width-2 deep students from a random start (docs/experiments.md, depth separation, "Deep students"): a sweep
of initialisations, learning rates, schedules and step counts, to see whether any of them finds the exact
width-2 tent network's fit (error 0) of tau^k at depth k.

For each depth k of ``--depths`` (target tau^k, hidden widths (2,) * k) and each configuration of the grid
``--inits`` x ``--lrs`` x ``--schedules`` x ``--steps``, ``--restarts`` random restarts are trained as one
:class:`~smaso.depth.population.StudentPopulation` (each member ends where it would trained alone): Adam on
the squared loss plus 1e-5 sum ||W||_F^2 (the deep students' training in ``examples/depth_separation.py``),
batch 128, 4096 samples x ~ U[0, 1].  Every restart's exact L1 error is recorded; the best per depth is the
figure docs/experiments.md quotes (:func:`sweep_text`).

    python examples/deep_width2_sweep.py --record    # the recorded benchmarks/results/deep_width2_sweep.json
    python examples/deep_width2_sweep.py --quick     # 2 configurations per depth, 300 steps: seconds
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from pathlib import Path

import torch

from smaso.depth.population import StudentPopulation, population_l1_error, train_population
from smaso.output import RunRecord, write_strict_json

RECORDED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "deep_width2_sweep.json"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--depths", default="3,4", help="depths k (target tau^k; default 3,4)")
    p.add_argument("--width", type=int, default=2, help="hidden width of every layer (default 2)")
    p.add_argument("--inits", default="torch,spread", help="initialisations: torch (PyTorch's default), spread "
                   "(He-normal weights, U(-1/2, 1/2) biases) (default both)")
    p.add_argument("--lrs", default="0.003,0.01,0.03", help="Adam learning rates (peak for one-cycle)")
    p.add_argument("--schedules", default="constant,onecycle", help="learning-rate schedules")
    p.add_argument("--steps", default="3000,12000", help="training steps")
    p.add_argument("--restarts", type=int, default=8, help="random restarts per configuration (default 8)")
    p.add_argument("--quick", action="store_true", help="one init, one lr, both schedules, 300 steps, 2 restarts")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--json", default="", help="write every restart's error, the config, machine and load here")
    p.add_argument("--record", dest="json", action="store_const", const=str(RECORDED),
                   help="write the recorded benchmarks/results/deep_width2_sweep.json")
    args = p.parse_args(argv)
    if args.quick:
        args.inits, args.lrs, args.steps, args.restarts = "spread", "0.01", "300", 2
    if args.restarts < 1 or args.width < 1 or args.threads < 1:
        p.error("--restarts, --width, --threads: expected positive integers")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    run = RunRecord("deep_width2_sweep", argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    grid = list(itertools.product([int(v) for v in args.depths.split(",")], args.inits.split(","),
                                  [float(v) for v in args.lrs.split(",")], args.schedules.split(","),
                                  [int(v) for v in args.steps.split(",")]))
    configs = []
    try:
        for i, (k, init, lr, schedule, steps) in enumerate(grid):
            pop = StudentPopulation((args.width,) * k, args.restarts, seed=i, init=init)
            train_population(pop, k, steps=steps, batch=128, n_train=max(4096, 8 * 2**k), lr=lr, loss="squared",
                             schedule=schedule, frobenius=1e-5, seed=i)
            errors = population_l1_error(pop, k).tolist()
            configs.append({"depth": k, "init": init, "lr": lr, "schedule": schedule, "steps": steps,
                            "seed": i, "errors": errors, "best": min(errors), "median": statistics.median(errors)})
            print(f"depth {k} {init:>6} lr {lr:<6g} {schedule:>8} {steps:>6} steps: best {min(errors):.4f}, "
                  f"median {statistics.median(errors):.4f}", flush=True)
    finally:
        torch.set_num_threads(threads)
    record = run.finish(config=vars(args), configs=configs, best=best_by_depth(configs))
    print(sweep_text(record))
    if args.json:
        write_strict_json(args.json, record, name="--json")
        print(f"wrote {args.json} ({record['wall_s']:.0f} s wall)")
    return record


def best_by_depth(configs: list[dict]) -> list[dict]:
    """Per depth: the number of restarts, the best error and the configuration that reached it."""
    out = []
    for k in sorted({c["depth"] for c in configs}):
        cs = [c for c in configs if c["depth"] == k]
        best = min(cs, key=lambda c: c["best"])
        out.append({"depth": k, "restarts": sum(len(c["errors"]) for c in cs), "best": best["best"],
                    "config": {key: best[key] for key in ("init", "lr", "schedule", "steps")}})
    return out


def sweep_text(record: dict) -> str:
    """The sentence docs/experiments.md quotes: restarts and best errors per depth."""
    b = record["best"]
    return (f"In {sum(v['restarts'] for v in b)} restarts their best errors were "
            + " and ".join(f"{v['best']:.3f} (depth {v['depth']})" for v in b))


if __name__ == "__main__":
    main()
