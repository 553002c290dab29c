"""Benchmark: the one ladder sampler against 0.2's uniform-tree sampler, per draw, and on a DAG (issue 24).

What is measured, in one process, for each mode (``topdown`` and ``bottomup``):

1. ``reference``: the baseline, 0.2's tree sampler (``benchmarks/reference/tree_sampling.py``: every block
   drawn through the tree's Pyro model) on the tree ``Ladder.random(depth, branching, events, seed=seed,
   mode=mode)`` (the issue's 341-region ladder for the defaults: depth 4, branching 4, 16 events);
2. ``ladder-tree``: today's ``teachers.sampling.sample_ladder`` on the same tree (the same bytes);
3. ``ladder-dag``: ``sample_ladder`` on the conv1d DAG
   ``Ladder.conv1d(258, kernels=[3]+[2]*8, strides=[1]+[2]*8, events=[4]*10, mode=mode, seed=seed)``
   (769 regions; the 258 leaves have up to 3 parents).

Draws per example: every region topdown; the leaves only bottomup (the regions above them are lookups);
``regions_per_s`` counts every region filled.  Every timed call includes building the sampler's tables and
writing the ``(N, total_regions)`` array.  Each contender is warmed up once on a small N, then the
contenders are timed in turn (round robin, ``--repeats`` rounds) with ``time.perf_counter``; rates use the
best (shortest) time and the median; the targets are judged on the medians.  Each run's process CPU
time and the load average are recorded.
Targets: per draw, the tree at most 1.1x the reference's time and the DAG at most 1.5x (``x_reference`` =
reference draws/s / contender draws/s).  All numbers and machine information go to ``--out`` (JSON, written
atomically).

Run it with::

    python benchmarks/bench_sampling.py               # full run (N = 1e5, 5 repeats), about 1 minute
    python benchmarks/bench_sampling.py --threads 1   # the issue's setting
    python benchmarks/bench_sampling.py --quick       # smoke run (N = 8192, 1 repeat)
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from teachers.ladder import TOPDOWN, Ladder
from teachers.sampling import BLOCK_SIZE, GRAPH_STREAM_VERSION, sample_ladder

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common beside this script, also when loaded by path
sys.path.insert(0, str(Path(__file__).resolve().parent / "reference"))
import _common as common
from tree_sampling import sample_tree

DEFAULT_OUT = common.default_out("sampling")
QUICK_N, QUICK_REPEATS = 8192, 1
TREE_TARGET = 1.1  # the tree's time per draw over the reference's, at most
DAG_TARGET = 1.5  # the DAG's time per draw over the reference's, at most
WARMUP_N = 4096
MODES = ("topdown", "bottomup")
DAG_SPEC = {"width": 258, "kernels": [3] + [2] * 8, "strides": [1] + [2] * 8, "events": [4] * 10}
RESULT_KEYS = ("mode", "contender", "description", "n", "regions", "draws_per_example", "draws", "repeats",
               "times_s", "process_cpu_s", "best_s", "median_s", "examples_per_s", "draws_per_s", "regions_per_s",
               "examples_per_s_median", "draws_per_s_median", "x_reference", "target")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=None, help="examples per contender (default 100_000; 8192 with --quick)")
    p.add_argument("--depth", type=int, default=4, help="levels below the root of the tree (default 4)")
    p.add_argument("--branching", type=int, default=4, help="children per region of the tree (default 4)")
    p.add_argument("--events", type=int, default=16, help="events per region of the tree (default 16)")
    p.add_argument("--seed", type=int, default=0, help="seed of the tables and of every stream (default 0)")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds (default 5; 1 with --quick)")
    common.add_threads_arg(p)
    common.add_quick_out_args(p, f"smoke run: N={QUICK_N}, repeats={QUICK_REPEATS}", DEFAULT_OUT)
    args = p.parse_args(argv)
    common.fill_defaults(args, {"n": QUICK_N, "repeats": QUICK_REPEATS}, {"n": 100_000, "repeats": 5})
    common.require_positive(p, args, ("n", "repeats", "depth", "branching", "events"))
    return args


# ---------------------------------------------------------------------- contenders
# Each returns a callable run(n) -> seconds that times one sampler call.

def reference_runner(ladder: Ladder, seed: int) -> Callable[[int], float]:
    def run(n: int) -> float:
        t0 = time.perf_counter()
        z = sample_tree(ladder, n, seed)
        dt = time.perf_counter() - t0
        assert z.shape == (n, ladder.total_regions)
        return dt
    return run


def ladder_runner(ladder: Ladder, seed: int) -> Callable[[int], float]:
    def run(n: int) -> float:
        t0 = time.perf_counter()
        sample = sample_ladder(ladder, n, seed, progress=False)
        dt = time.perf_counter() - t0
        assert sample.z.shape == (n, ladder.total_regions)
        return dt
    return run


def contenders(mode: str, args: argparse.Namespace) -> list[tuple[str, str, Callable[[int], float], int, int]]:
    """``(name, description, run, regions, draws per example)`` of one mode, the baseline first."""
    tree = Ladder.random(depth=args.depth, branching=args.branching, events=args.events, seed=args.seed, mode=mode)
    dag = Ladder.conv1d(DAG_SPEC["width"], DAG_SPEC["kernels"], DAG_SPEC["strides"], DAG_SPEC["events"],
                        mode=mode, seed=args.seed)

    def draws(g) -> int:
        return g.total_regions if mode == TOPDOWN else g.num_regions[-1]

    return [("reference", "0.2's tree sampler (benchmarks/reference/tree_sampling.py) on the tree (baseline)",
             reference_runner(tree, args.seed), tree.total_regions, draws(tree)),
            ("ladder-tree", "teachers.sampling.sample_ladder on the tree",
             ladder_runner(tree, args.seed), tree.total_regions, draws(tree)),
            ("ladder-dag", "sample_ladder on Ladder.conv1d(258, kernels=[3]+[2]*8, strides=[1]+[2]*8)",
             ladder_runner(dag, args.seed), dag.total_regions, draws(dag))]


def measure_mode(mode: str, args: argparse.Namespace) -> list[dict]:
    """Warm every contender of ``mode`` up once, then time them round robin."""
    entries = contenders(mode, args)
    print(f"{mode}: " + ", ".join(f"{name} {regions} regions ({d} draws/example)"
                                 for name, _, _, regions, d in entries), flush=True)
    for _, _, run, _, _ in entries:
        run(min(WARMUP_N, args.n))
    runs = [(lambda run=run: run(args.n)) for _, _, run, _, _ in entries]
    times, cpu = common.round_robin(runs, args.repeats,
                                    on_round=lambda r: print(f"  round {r + 1}/{args.repeats}", flush=True))
    rows = []
    for (name, description, _, regions, d), ts, cs in zip(entries, times, cpu, strict=True):
        best, median = common.best_median(ts)
        n = args.n
        rows.append({"mode": mode, "contender": name, "description": description, "n": n, "regions": regions,
                     "draws_per_example": d, "draws": n * d, "repeats": args.repeats, "times_s": ts,
                     "process_cpu_s": cs, "best_s": best, "median_s": median, "examples_per_s": n / best,
                     "draws_per_s": n * d / best, "regions_per_s": n * regions / best,
                     "examples_per_s_median": n / median, "draws_per_s_median": n * d / median,
                     "x_reference": None, "target": name != "reference"})
    base = rows[0]
    for r in rows:
        r["x_reference"] = base["draws_per_s"] / r["draws_per_s"]
        r["x_reference_median"] = base["draws_per_s_median"] / r["draws_per_s_median"]
    return rows


# ---------------------------------------------------------------------- reporting
TABLE = (common.Column("mode", 9, "mode", align="<"),
         common.Column("contender", 12, "contender", align="<"),
         common.Column("regions", 8, "regions"),
         common.Column("N", 8, "n"),
         common.Column("seconds", 8, "best_s", ".3f"),
         common.Column("examples/s", 11, "examples_per_s", ".4g"),
         common.Column("draws/s", 10, "draws_per_s", ".4g"),
         common.Column("regions/s", 10, "regions_per_s", ".4g"),
         common.Column("x ref", 7, "x_reference", ".2f"))
TABLE_NOTE = ("(seconds = best of the repeats; draws = all regions topdown, the leaves bottomup; x ref = 0.2's tree "
              "sampler's draws/s / contender draws/s: time per draw relative to the reference)")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    wall0 = common.start(args.threads)
    print(f"N = {args.n} examples per contender, {args.repeats} round(s); {common.torch_summary()}")
    info = common.machine_info()

    rows = []
    for mode in MODES:
        rows += measure_mode(mode, args)

    targets = {}
    for mode in MODES:
        for name, key, bound in (("ladder-tree", "tree", TREE_TARGET), ("ladder-dag", "dag", DAG_TARGET)):
            row = next(r for r in rows if r["mode"] == mode and r["contender"] == name)
            targets[f"{key}_per_draw_vs_reference_{mode}"] = {  # judged on the medians of interleaved rounds
                "value": row["x_reference_median"], "value_best": row["x_reference"], "target": f"<= {bound:g}",
                "pass": row["x_reference_median"] <= bound}

    print()
    common.print_table(TABLE, rows, TABLE_NOTE)
    print()
    for key, t in targets.items():
        print(f"{key:<36} {t['value']:8.2f}x (median; best {t['value_best']:.2f}x)  target {t['target']}x  "
              f"{'PASS' if t['pass'] else 'FAIL'}")
    total_s = common.finish(info, wall0)
    common.print_done(total_s, args.out)

    sections = {
        "config": {"n": args.n, "depth": args.depth, "branching": args.branching, "events": args.events,
                   "seed": args.seed, "repeats": args.repeats, "threads": args.threads, "quick": args.quick,
                   "block_size": BLOCK_SIZE, "graph_stream_version": GRAPH_STREAM_VERSION, "rate_statistic": "best"},
        "graphs": {"tree": {"depth": args.depth, "branching": args.branching, "events": args.events},
                   "dag": {"constructor": "Ladder.conv1d", **DAG_SPEC}},
    }
    result = common.record("sampling", argv, sections, info, rows, {"targets": targets}, total_s)
    return common.write_json(args.out, result)


if __name__ == "__main__":
    main()
