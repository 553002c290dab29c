"""Benchmark: the graph student's statistics pass against the uniform-tree student's, per MAC (issue 17).

The statistics pass is what every comparison with the reformulation costs: a fixed student's forward
pass, its explicit backward pass and the per-event sums of every quantity (frequency statistics),
over N examples in batches of ``--batch-size``.  Measured in one process:

1. ``tree``: the baseline, :func:`smaso.student.frequency.collect_statistics` of a
   :class:`~smaso.student.network.LadderStudent` on the tree ``Ladder.random(depth, branching, events)``
   (511 regions for the defaults);
2. ``graph-tree``: :func:`smaso.student.graph_frequency.collect_graph_statistics` of
   ``GraphStudent.from_ladder_student`` of that student (the same network through the DAG code path);
3. ``graph-dag``: ``collect_graph_statistics`` of a ``GraphStudent`` on the conv1d DAG
   ``GraphLadder.conv1d(258, kernels=[3]+[2]*8, strides=[1]+[2]*8, events=[4]*10)`` (769 regions; the 258
   leaves have up to 3 parents; 1278 edges).

All students have ``--width`` nodes per hidden region, float32, ReLU, a linear top of one node per
class.  MACs per example = sum over the edges of n_parent n_child (the forward pass's multiply-adds;
the backward and the statistics scale with the same edges).  Every contender is warmed up once, then
the three are timed in turn (round robin, ``--repeats`` rounds); rates use the best time, the median
is recorded too.  Target: the DAG at most 1.5x the tree's time per MAC (``x_tree_per_mac``).  Results
go to ``--out`` (JSON, written atomically).

Run it with::

    python benchmarks/bench_graph_statistics.py               # full run (N = 65536, 5 repeats), about 1 minute
    python benchmarks/bench_graph_statistics.py --threads 1   # one thread
    python benchmarks/bench_graph_statistics.py --quick       # smoke run (N = 4096, 1 repeat)
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from smaso.student.frequency import collect_statistics
from smaso.student.graph_frequency import collect_graph_statistics
from smaso.student.graph_network import GraphStudent
from smaso.student.network import LadderStudent
from teachers.graph_ladder import GraphLadder
from teachers.graph_sampling import sample_graph_ladder
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common beside this script, also when loaded by path
import _common as common

DEFAULT_OUT = common.default_out("graph_statistics")
QUICK_N, QUICK_REPEATS = 4096, 1
DAG_TARGET = 1.5  # DAG time per MAC over the tree baseline's, at most
DAG_SPEC = {"width": 258, "kernels": [3] + [2] * 8, "strides": [1] + [2] * 8, "events": [4] * 10}
RESULT_KEYS = ("contender", "description", "n", "regions", "edges", "macs_per_example", "repeats", "times_s",
               "process_cpu_s", "best_s", "median_s", "examples_per_s", "macs_per_s", "x_tree_per_example",
               "x_tree_per_mac", "x_tree_per_mac_median", "target")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=None, help="examples per contender (default 65536; 4096 with --quick)")
    p.add_argument("--batch-size", type=int, default=4096, help="examples per batch (default 4096)")
    p.add_argument("--width", type=int, default=8, help="nodes per hidden region (default 8)")
    p.add_argument("--depth", type=int, default=8, help="levels below the root of the tree (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the teachers, the data and the students (default 0)")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds (default 5; 1 with --quick)")
    common.add_threads_arg(p)
    common.add_quick_out_args(p, f"smoke run: N={QUICK_N}, repeats={QUICK_REPEATS}", DEFAULT_OUT)
    args = p.parse_args(argv)
    common.fill_defaults(args, {"n": QUICK_N, "repeats": QUICK_REPEATS}, {"n": 65536, "repeats": 5})
    common.require_positive(p, args, ("n", "repeats", "depth", "width", "batch_size"))
    return args


def macs(student: GraphStudent) -> int:
    """Multiply-adds of one example's forward pass: sum over the edges of n_parent n_child."""
    return sum(len(e) * student.widths[l] * student.widths[l + 1] for l, e in enumerate(student.edges))


def runner(collect: Callable, student, sample, batch_size: int) -> Callable[[int], float]:
    x, y, z = sample.inputs(), sample.y, sample.z.long()

    def run(n: int) -> float:
        t0 = time.perf_counter()
        stats = collect(student, x[:n], y[:n], z[:n], batch_size=batch_size)
        dt = time.perf_counter() - t0
        assert stats.num_examples == n
        return dt
    return run


def contenders(args: argparse.Namespace) -> list[tuple[str, str, Callable[[int], float], int, int, int]]:
    """``(name, description, run, regions, edges, MACs per example)``, the baseline first."""
    ladder = Ladder.random(depth=args.depth, branching=2, events=4, seed=args.seed, mode="topdown")
    tree_student = LadderStudent(ladder, args.width, seed=args.seed)
    graph_tree = GraphStudent.from_ladder_student(tree_student)
    dag = GraphLadder.conv1d(DAG_SPEC["width"], DAG_SPEC["kernels"], DAG_SPEC["strides"], DAG_SPEC["events"],
                             mode="topdown", seed=args.seed)
    dag_student = GraphStudent(dag, args.width, seed=args.seed)
    tree_sample = sample_ladder(ladder, args.n, args.seed, progress=False)
    dag_sample = sample_graph_ladder(dag, args.n, args.seed)
    bs = args.batch_size
    return [("tree", "collect_statistics of a LadderStudent on the tree (baseline)",
             runner(collect_statistics, tree_student, tree_sample, bs), ladder.total_regions,
             sum(map(len, graph_tree.edges)), macs(graph_tree)),
            ("graph-tree", "collect_graph_statistics of GraphStudent.from_ladder_student (same network)",
             runner(collect_graph_statistics, graph_tree, tree_sample, bs), ladder.total_regions,
             sum(map(len, graph_tree.edges)), macs(graph_tree)),
            ("graph-dag", "collect_graph_statistics of a GraphStudent on GraphLadder.conv1d(258, kernels=[3]+[2]*8, "
                          "strides=[1]+[2]*8)",
             runner(collect_graph_statistics, dag_student, dag_sample, bs), dag.total_regions,
             sum(map(len, dag_student.edges)), macs(dag_student))]


TABLE = (common.Column("contender", 11, "contender", align="<"),
         common.Column("regions", 8, "regions"),
         common.Column("edges", 6, "edges"),
         common.Column("MACs/ex", 8, "macs_per_example"),
         common.Column("seconds", 8, "best_s", ".3f"),
         common.Column("examples/s", 11, "examples_per_s", ".4g"),
         common.Column("MACs/s", 10, "macs_per_s", ".4g"),
         common.Column("x tree/ex", 9, "x_tree_per_example", ".2f"),
         common.Column("x tree/MAC", 10, "x_tree_per_mac", ".2f"))
TABLE_NOTE = ("(seconds = best of the repeats for the whole pass; x tree = the tree baseline's rate over the "
              "contender's: time per example / per MAC relative to the tree)")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    wall0 = common.start(args.threads)
    print(f"N = {args.n} examples per contender in batches of {args.batch_size}, {args.repeats} round(s); "
          f"{common.torch_summary()}")
    info = common.machine_info()
    with torch.no_grad():
        entries = contenders(args)
        for _, _, run, *_ in entries:
            run(min(args.n, args.batch_size))
        runs = [(lambda run=run: run(args.n)) for _, _, run, *_ in entries]
        times, cpu = common.round_robin(runs, args.repeats,
                                        on_round=lambda r: print(f"  round {r + 1}/{args.repeats}", flush=True))
    rows = []
    for (name, description, _, regions, edges, mac), ts, cs in zip(entries, times, cpu, strict=True):
        best, median = common.best_median(ts)
        rows.append({"contender": name, "description": description, "n": args.n, "regions": regions, "edges": edges,
                     "macs_per_example": mac, "repeats": args.repeats, "times_s": ts, "process_cpu_s": cs,
                     "best_s": best, "median_s": median, "examples_per_s": args.n / best,
                     "macs_per_s": args.n * mac / best, "macs_per_s_median": args.n * mac / median,
                     "target": name == "graph-dag"})
    base = rows[0]
    for r in rows:
        r["x_tree_per_example"] = base["examples_per_s"] / r["examples_per_s"]
        r["x_tree_per_mac"] = base["macs_per_s"] / r["macs_per_s"]
        r["x_tree_per_mac_median"] = base["macs_per_s_median"] / r["macs_per_s_median"]
    dag = rows[-1]
    targets = {"dag_per_mac_vs_tree": {"value": dag["x_tree_per_mac"], "value_median": dag["x_tree_per_mac_median"],
                                       "target": f"<= {DAG_TARGET:g}", "pass": dag["x_tree_per_mac"] <= DAG_TARGET}}
    print()
    common.print_table(TABLE, rows, TABLE_NOTE)
    print()
    for key, t in targets.items():
        print(f"{key:<24} {t['value']:8.2f}x  (median {t['value_median']:.2f}x)  target {t['target']}x  "
              f"{'PASS' if t['pass'] else 'FAIL'}")
    total_s = common.finish(info, wall0)
    common.print_done(total_s, args.out)
    sections = {
        "config": {"n": args.n, "batch_size": args.batch_size, "width": args.width, "depth": args.depth,
                   "seed": args.seed, "repeats": args.repeats, "threads": args.threads, "quick": args.quick,
                   "dtype": "float32", "activation": "relu", "rate_statistic": "best"},
        "graphs": {"tree": {"depth": args.depth, "branching": 2, "events": 4},
                   "dag": {"constructor": "GraphLadder.conv1d", **DAG_SPEC}},
    }
    result = common.record("graph_statistics", argv, sections, info, rows, {"targets": targets}, total_s)
    return common.write_json(args.out, result)


if __name__ == "__main__":
    main()
