"""Benchmark: the one student's statistics pass against today's tree code, on trees and on a DAG (issues 17, 24).

The statistics pass is what every comparison with the reformulation costs: a fixed student's forward
pass, its explicit backward pass and the per-event sums of every quantity (frequency statistics),
over N examples in batches of ``--batch-size``.  Measured in one process, all students float32, ReLU,
``--width`` nodes per hidden region, a linear top of one node per class:

- ``reference-<tree>``: today's tree-only code kept in ``benchmarks/reference/`` (``tree_student_network`` and
  ``tree_student_frequency``, copies of ``smaso/student/network.py`` and ``frequency.py`` at commit 3494c95):
  its ``collect_statistics``;
- ``one-<tree>``: :func:`smaso.student.frequency.collect_statistics` of the one
  :class:`~smaso.student.network.LadderStudent` (same weights) on the same tree: its uniform-tree fast path;
- ``edges-tree``: the same student with ``fast_path = False`` (the edge-list code of any ladder, on a tree);
- ``dag``: the one student on the conv1d DAG ``Ladder.conv1d(258, kernels=[3]+[2]*8, strides=[1]+[2]*8,
  events=[4]*10)`` (769 regions; the 258 leaves have up to 3 parents; 1278 edges).

The trees: ``tree`` = ``Ladder.random(depth, branching=2, events=4)`` (511 regions for the defaults),
``tree341`` = ``Ladder.random(depth=4, branching=4, events=16, mode="topdown")`` (341 regions) and
``default`` = ``Ladder.default()``.  MACs per example = sum over the edges of n_parent n_child (the forward
pass's multiply-adds; the backward and the statistics scale with the same edges).  Every contender is warmed
up once, then all are timed in turn (round robin, ``--repeats`` rounds); rates use the best time, the median
is recorded too, and so is the load average at the start and the end.  Targets: every ``one-<tree>`` at most
1.1x its reference's time per example (``x_reference``); the DAG at most 1.5x the reference tree's time per MAC
(``x_tree_per_mac``).  Results go to ``--out`` (JSON, written atomically).

Run it with::

    python benchmarks/bench_graph_statistics.py               # full run (N = 65536, 5 repeats), about 3 minutes
    python benchmarks/bench_graph_statistics.py --threads 1   # one thread
    python benchmarks/bench_graph_statistics.py --quick       # smoke run (N = 4096, 1 repeat)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from smaso.student.frequency import collect_statistics
from smaso.student.network import LadderStudent
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common beside this script, also when loaded by path
sys.path.insert(0, str(Path(__file__).resolve().parent / "reference"))  # today's tree code, the reference
import _common as common
import tree_student_frequency as reference_frequency
import tree_student_network as reference_network

DEFAULT_OUT = common.default_out("graph_statistics")
QUICK_N, QUICK_REPEATS = 4096, 1
DAG_TARGET = 1.5  # DAG time per MAC over the reference tree's, at most
REFERENCE_TARGET = 1.1  # the one student's time per example over today's tree code's on the same tree, at most
DAG_SPEC = {"width": 258, "kernels": [3] + [2] * 8, "strides": [1] + [2] * 8, "events": [4] * 10}
RESULT_KEYS = ("contender", "description", "ladder", "n", "regions", "edges", "macs_per_example", "repeats",
               "times_s", "process_cpu_s", "best_s", "median_s", "examples_per_s", "macs_per_s", "x_tree_per_example",
               "x_tree_per_mac", "x_tree_per_mac_median", "x_reference", "x_reference_median", "target")
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=None, help="examples per contender (default 65536; 4096 with --quick)")
    p.add_argument("--batch-size", type=int, default=4096, help="examples per batch (default 4096)")
    p.add_argument("--width", type=int, default=8, help="nodes per hidden region (default 8)")
    p.add_argument("--depth", type=int, default=8, help="levels below the root of the binary tree (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the teachers, the data and the students (default 0)")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds (default 5; 1 with --quick)")
    common.add_threads_arg(p)
    common.add_quick_out_args(p, f"smoke run: N={QUICK_N}, repeats={QUICK_REPEATS}", DEFAULT_OUT)
    args = p.parse_args(argv)
    common.fill_defaults(args, {"n": QUICK_N, "repeats": QUICK_REPEATS}, {"n": 65536, "repeats": 5})
    common.require_positive(p, args, ("n", "repeats", "depth", "width", "batch_size"))
    return args


def macs(student: LadderStudent) -> int:
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


def trees(args: argparse.Namespace) -> dict[str, Ladder]:
    """The uniform trees every code runs on (module docstring)."""
    return {"tree": Ladder.random(depth=args.depth, branching=2, events=4, seed=args.seed, mode="topdown"),
            "tree341": Ladder.random(depth=4, branching=4, events=16, seed=args.seed, mode="topdown"),
            "default": Ladder.default()}


def contenders(args: argparse.Namespace) -> list[dict]:
    """One dict per contender (name, description, ladder, run, regions, edges, MACs per example, reference),
    the baseline (``reference-tree``) first."""
    bs, out = args.batch_size, []
    for name, lad in trees(args).items():
        one = LadderStudent(lad, args.width, seed=args.seed)
        ref = reference_network.LadderStudent(lad, args.width, seed=args.seed)
        ref.load_state_dict(one.state_dict())  # the same weights (the same seeded init anyway)
        sample = sample_ladder(lad, args.n, args.seed, progress=False)
        common_keys = {"ladder": name, "regions": lad.total_regions, "edges": sum(map(len, one.edges)),
                       "macs_per_example": macs(one), "reference": f"reference-{name}"}
        out.append({"contender": f"reference-{name}", "description": f"today's tree code (benchmarks/reference) "
                    f"on {name}", "run": runner(reference_frequency.collect_statistics, ref, sample, bs),
                    **common_keys})
        out.append({"contender": f"one-{name}", "description": f"collect_statistics of the one LadderStudent on "
                    f"{name} (fast path)", "run": runner(collect_statistics, one, sample, bs), **common_keys})
        if name == "tree":
            edges = LadderStudent(lad, args.width, seed=args.seed)
            edges.fast_path = False
            out.append({"contender": "edges-tree", "description": "the same student with fast_path=False (the "
                        "edge-list code of any ladder)", "run": runner(collect_statistics, edges, sample, bs),
                        **common_keys})
    dag = Ladder.conv1d(DAG_SPEC["width"], DAG_SPEC["kernels"], DAG_SPEC["strides"], DAG_SPEC["events"],
                        mode="topdown", seed=args.seed)
    dag_student = LadderStudent(dag, args.width, seed=args.seed)
    out.append({"contender": "dag", "description": "collect_statistics of the one LadderStudent on Ladder.conv1d("
                "258, kernels=[3]+[2]*8, strides=[1]+[2]*8)", "ladder": "dag",
                "run": runner(collect_statistics, dag_student, sample_ladder(dag, args.n, args.seed, progress=False),
                              bs), "regions": dag.total_regions, "edges": sum(map(len, dag_student.edges)),
                "macs_per_example": macs(dag_student), "reference": None})
    return out


TABLE = (common.Column("contender", 17, "contender", align="<"),
         common.Column("regions", 8, "regions"),
         common.Column("edges", 6, "edges"),
         common.Column("MACs/ex", 8, "macs_per_example"),
         common.Column("seconds", 8, "best_s", ".3f"),
         common.Column("median", 8, "median_s", ".3f"),
         common.Column("examples/s", 11, "examples_per_s", ".4g"),
         common.Column("x ref", 6, "x_reference", ".3f"),
         common.Column("x tree/ex", 9, "x_tree_per_example", ".2f"),
         common.Column("x tree/MAC", 10, "x_tree_per_mac", ".2f"))
TABLE_NOTE = ("(seconds = best of the repeats for the whole pass; x ref = time / time of today's tree code on the "
              "same tree; x tree = the reference tree's rate over the contender's: time per example / per MAC)")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    wall0 = common.start(args.threads)
    print(f"N = {args.n} examples per contender in batches of {args.batch_size}, {args.repeats} round(s); "
          f"{common.torch_summary()}")
    info = common.machine_info()
    with torch.no_grad():
        entries = contenders(args)
        for e in entries:
            e["run"](min(args.n, args.batch_size))
        runs = [(lambda run=e["run"]: run(args.n)) for e in entries]
        times, cpu = common.round_robin(runs, args.repeats,
                                        on_round=lambda r: print(f"  round {r + 1}/{args.repeats}", flush=True))
    rows = []
    for e, ts, cs in zip(entries, times, cpu, strict=True):
        best, median = common.best_median(ts)
        mac = e["macs_per_example"]
        rows.append({"contender": e["contender"], "description": e["description"], "ladder": e["ladder"],
                     "n": args.n, "regions": e["regions"], "edges": e["edges"], "macs_per_example": mac,
                     "repeats": args.repeats, "times_s": ts, "process_cpu_s": cs, "best_s": best, "median_s": median,
                     "examples_per_s": args.n / best, "macs_per_s": args.n * mac / best,
                     "macs_per_s_median": args.n * mac / median, "reference_contender": e["reference"],
                     "target": e["contender"] == "dag" or e["contender"].startswith("one-")})
    by_name = {r["contender"]: r for r in rows}
    base = by_name["reference-tree"]
    for r in rows:
        r["x_tree_per_example"] = base["examples_per_s"] / r["examples_per_s"]
        r["x_tree_per_mac"] = base["macs_per_s"] / r["macs_per_s"]
        r["x_tree_per_mac_median"] = base["macs_per_s_median"] / r["macs_per_s_median"]
        ref = by_name.get(r["reference_contender"])
        r["x_reference"] = None if ref is None else r["best_s"] / ref["best_s"]
        r["x_reference_median"] = None if ref is None else r["median_s"] / ref["median_s"]
    dag = by_name["dag"]
    targets = {"dag_per_mac_vs_tree": {"value": dag["x_tree_per_mac"], "value_median": dag["x_tree_per_mac_median"],
                                       "target": f"<= {DAG_TARGET:g}", "pass": dag["x_tree_per_mac"] <= DAG_TARGET,
                                       "judged": True}}
    for name in trees(args):
        r = by_name[f"one-{name}"]
        targets[f"one_vs_reference_{name}"] = {"value": r["x_reference"], "value_median": r["x_reference_median"],
                                               "target": f"<= {REFERENCE_TARGET:g}", "judged": True,
                                               "pass": r["x_reference"] <= REFERENCE_TARGET}
    r = by_name["edges-tree"]
    targets["edges_vs_reference_tree"] = {"value": r["x_reference"], "value_median": r["x_reference_median"],
                                          "judged": False}
    print()
    common.print_table(TABLE, rows, TABLE_NOTE)
    print()
    for key, t in targets.items():
        verdict = ("PASS" if t["pass"] else "FAIL") if t["judged"] else "(reported)"
        tgt = f"target {t['target']}x" if "target" in t else ""
        print(f"{key:<26} {t['value']:8.3f}x  (median {t['value_median']:.3f}x)  {tgt:<14} {verdict}")
    total_s = common.finish(info, wall0)
    print(f"load average: {info.get('loadavg_start')} at the start, {info.get('loadavg_end')} at the end "
          f"({os.cpu_count()} cores)")
    common.print_done(total_s, args.out)
    sections = {
        "config": {"n": args.n, "batch_size": args.batch_size, "width": args.width, "depth": args.depth,
                   "seed": args.seed, "repeats": args.repeats, "threads": args.threads, "quick": args.quick,
                   "dtype": "float32", "activation": "relu", "rate_statistic": "best"},
        "graphs": {"tree": {"depth": args.depth, "branching": 2, "events": 4},
                   "tree341": {"depth": 4, "branching": 4, "events": 16, "mode": "topdown"},
                   "default": {"constructor": "Ladder.default"},
                   "dag": {"constructor": "Ladder.conv1d", **DAG_SPEC}},
    }
    result = common.record("graph_statistics", argv, sections, info, rows, {"targets": targets}, total_s)
    return common.write_json(args.out, result)


if __name__ == "__main__":
    main()
