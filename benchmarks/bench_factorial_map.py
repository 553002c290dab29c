"""Benchmark: joint MAP in the factorial SMASO (Eq 10), factorized (per-unit) MAP vs its matmul floor, and exact
enumeration as the number of units grows.

What is measured, in one process (float32 unless ``--dtype float64``):

1. ``factorized_map``: ``inference.factorial.factorized_map(A, B, x, check_orthogonality=False)`` on the ReLU
   MASO of a fully connected layer with K units, D inputs and mutually orthogonal rows (``torch.linalg.qr``),
   so that the factorized MAP *is* the joint MAP (Eq 11), on a batch of N inputs.  For R = 2 it is one
   ``addmm`` of shape (N, D) x (D, K), a comparison and a cast to int64 region indices;
2. ``matmul floor``: ``torch.mm(x, W.T)``, one matmul of the same (N, D) x (D, K) shape, no bias, no
   comparison: the floor of any MAP that must look at every unit's score; timed with ``W.T`` as a
   transposed view (as ``F.linear``) and made contiguous, and the faster of the two is the floor;
3. references (not targets): ``factorized_map`` with its orthogonality check (a (K R)^2 D Gram product, a
   property of the layer, paid once per layer), and the matmul of all K * R region scores
   ``(N, D) x (D, K R)`` (what the general-R path computes).

Target: ``factorized_map`` within 1.5x of the floor (best of ``--repeats`` timed runs after one warm-up).

Exact enumeration (``inference.factorial.exact_joint_map``) on random (non-orthogonal) R = 2 layers with
K = 1 .. ``--enum-max-k`` units (default 22: 4.2 million configurations; ``max_configs`` is raised to 2^K,
above ``exact_joint_map``'s default limit of 2^16), D = ``--enum-d``, batch ``--enum-batch``: its time grows
like 2^K; the run stops early when one K takes more than ``--enum-time-limit`` seconds.  The JSON records
each K's time, the time per configuration and example, and the projected time at the benchmark's K (as
log10 seconds), plus a check that, on an orthogonal layer of each K, the enumerated MAP equals the
factorized one.  All numbers
and machine information go to ``--out`` (JSON, written atomically).

Run it with::

    python benchmarks/bench_factorial_map.py           # full run (K = D = 1024, N = 4096), about a minute on 2 cores
    python benchmarks/bench_factorial_map.py --quick   # smoke run (K = D = 128, N = 256, K <= 6 enumerated)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from inference.factorial import exact_joint_map, factorized_map
from smaso.splines.orthogonality import orthogonality_defect

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common beside this script, also when loaded by path
import _common as common

DEFAULT_OUT = common.default_out("factorial_map")
FLOOR_TARGET = 1.5  # factorized_map time / matmul time, at most
ENUM_REPEATS = 3  # timed runs per enumerated K (best kept), fewer once they add up to a second
QUICK = {"k": 128, "d": 128, "n": 256, "repeats": 1, "enum_max_k": 6}
RESULT_KEYS = ("contender", "description", "shape", "repeats", "times_s", "process_cpu_s", "best_s", "median_s",
               "gflops", "x_floor", "target")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--k", type=int, default=None, help="units of the layer (default 1024; 128 with --quick)")
    p.add_argument("--d", type=int, default=None, help="inputs of the layer (default 1024; 128 with --quick)")
    p.add_argument("--n", type=int, default=None, help="batch size (default 4096; 256 with --quick)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per contender (default 5; 1 with --quick)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="dtype (default float32)")
    p.add_argument("--enum-max-k", type=int, default=None, help="largest K enumerated (default 22; 6 with --quick)")
    p.add_argument("--enum-d", type=int, default=16, help="inputs of the enumerated layers (default 16)")
    p.add_argument("--enum-batch", type=int, default=64, help="batch of the enumerated layers (default 64)")
    p.add_argument("--enum-time-limit", type=float, default=20.0,
                   help="stop enumerating after a K that took longer than this many seconds (default 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of the layers and inputs (default 0)")
    common.add_threads_arg(p)
    common.add_quick_out_args(p, f"smoke run: {QUICK}", DEFAULT_OUT)
    args = p.parse_args(argv)
    common.fill_defaults(args, QUICK, {"k": 1024, "d": 1024, "n": 4096, "repeats": 5, "enum_max_k": 22})
    common.require_positive(p, args, ("k", "d", "n", "repeats", "enum_max_k", "enum_d", "enum_batch"))
    if args.k > args.d:
        p.error("--k must be <= --d (orthogonal rows of W need K <= D)")
    if not args.enum_time_limit > 0:
        p.error("--enum-time-limit must be > 0")
    return args


# ---------------------------------------------------------------------- layers
def orthogonal_relu_layer(k: int, d: int, dtype: torch.dtype, g: torch.Generator):
    """ReLU MASO (A[k, 0] = 0, A[k, 1] = W_k; B[k] = (0, b_k)) with orthonormal rows of W: Eq 11 holds."""
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    W = q[:k].to(dtype)
    b = (0.1 * torch.randn(k, generator=g, dtype=torch.float64)).to(dtype)
    A = torch.zeros(k, 2, d, dtype=dtype)
    A[:, 1] = W
    B = torch.zeros(k, 2, dtype=dtype)
    B[:, 1] = b
    return A, B, W


def measure(name: str, description: str, run: Callable[[], object], repeats: int, flops: float) -> dict:
    """One warm-up call, then ``repeats`` timed calls."""
    print(f"  {name}: warm-up, then {repeats} timed run(s) ...", flush=True)
    run()
    times, cpu = common.repeat(common.timed(run), repeats)
    best, median = common.best_median(times)
    return {"contender": name, "description": description, "shape": None, "repeats": repeats, "times_s": times,
            "process_cpu_s": cpu, "best_s": best, "median_s": median, "gflops": flops / best / 1e9,
            "x_floor": None, "target": False}


def enumeration_rows(args, dtype: torch.dtype) -> list[dict]:
    """exact_joint_map at K = 1 .. enum_max_k (R = 2), stopping after a K slower than the time limit."""
    rows = []
    g = torch.Generator().manual_seed(args.seed + 1)
    n, d = args.enum_batch, args.enum_d
    for k in range(1, args.enum_max_k + 1):
        A = torch.randn(k, 2, d, generator=g, dtype=dtype)
        B = torch.randn(k, 2, generator=g, dtype=dtype)
        x = torch.randn(n, d, generator=g, dtype=dtype)
        exact_joint_map(A, B, x, max_configs=2**k)  # warm-up
        times = []
        while len(times) < ENUM_REPEATS and sum(times) < 1.0:  # best of up to 3 runs, fewer when slow
            t0 = time.perf_counter()
            exact_joint_map(A, B, x, max_configs=2**k)
            times.append(time.perf_counter() - t0)
        dt = min(times)
        row = {"k": k, "configs": 2**k, "n": n, "d": d, "time_s": dt, "times_s": times,
               "ns_per_config_example": dt / (2**k * n) * 1e9}
        if k <= d:  # sanity: on an orthogonal layer the enumerated MAP is the factorized one
            Ao, Bo, _ = orthogonal_relu_layer(k, d, dtype, g)
            Ao[:, 1] *= 3.0
            row["orthogonal_check"] = bool(torch.equal(exact_joint_map(Ao, Bo, x, max_configs=2**k),
                                                       factorized_map(Ao, Bo, x, check_orthogonality=False)))
        rows.append(row)
        print(f"  exact enumeration K={k:>2}: {2**k:>6} configurations x {n} examples: {dt:9.4f} s", flush=True)
        if dt > args.enum_time_limit:
            print(f"  stopping: K={k} took more than --enum-time-limit={args.enum_time_limit:g} s")
            break
    return rows


# ---------------------------------------------------------------------- reporting
TABLE = (common.Column("contender", 26, "contender", align="<"),
         common.Column("shape (N, D, out)", 20, lambda r: str(tuple(r["shape"]))),
         common.Column("best s", 9, "best_s", ".4f"),
         common.Column("GFLOP/s", 9, "gflops", ".1f"),
         common.Column("x floor", 8, "x_floor", ".2f"))


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    wall0 = common.start(args.threads)
    dtype = torch.float32 if args.dtype == "float32" else torch.float64
    g = torch.Generator().manual_seed(args.seed)
    k, d, n = args.k, args.d, args.n
    print(f"factorial SMASO: ReLU layer K={k} units, D={d} inputs, orthogonal rows; batch N={n}; {args.dtype}; "
          f"{common.torch_summary()}")
    info = common.machine_info()
    A, B, W = orthogonal_relu_layer(k, d, dtype, g)
    x = torch.randn(n, d, generator=g, dtype=dtype)
    defect = orthogonality_defect(A).relative
    # correctness of what is timed: the factorized MAP is the ReLU gate
    t = factorized_map(A, B, x, check_orthogonality=False)
    agrees = bool(torch.equal(t, (x @ W.T + B[:, 1] > 0).long()))
    flops = 2.0 * n * d * k
    Wt = W.T.contiguous()
    rows = [
        measure("factorized_map", "inference.factorial.factorized_map(A, B, x, check_orthogonality=False): "
                "(N, K) int64",
                lambda: factorized_map(A, B, x, check_orthogonality=False), args.repeats, flops),
        measure("matmul floor", "torch.mm(x, W.T) with W.T a transposed view (as F.linear): one (N, D) x (D, K) "
                "matmul", lambda: torch.mm(x, W.T), args.repeats, flops),
        measure("matmul floor (contiguous)", "torch.mm(x, W.T.contiguous()): the other memory layout",
                lambda: torch.mm(x, Wt), args.repeats, flops),
        measure("factorized_map (checked)", "factorized_map with its orthogonality check ((K R)^2 D Gram product)",
                lambda: factorized_map(A, B, x), args.repeats, flops),
        measure("all-region scores matmul", "torch.mm(x, A.reshape(K R, D).T): (N, D) x (D, K R)",
                lambda: torch.mm(x, A.reshape(2 * k, d).T), args.repeats, 2 * flops),
    ]
    shapes = [[n, d, k], [n, d, k], [n, d, k], [n, d, k], [n, d, 2 * k]]
    fast = min(rows[1:3], key=lambda r: r["best_s"])  # the floor: the faster layout of the same matmul
    rows[0]["target"] = fast["target"] = True
    floor = fast["best_s"]
    for r, shape in zip(rows, shapes, strict=True):
        r["shape"] = shape
        r["x_floor"] = r["best_s"] / floor
    ratio = rows[0]["best_s"] / floor
    ratio_median = rows[0]["median_s"] / fast["median_s"]
    targets = {"factorized_vs_matmul": {"value": ratio, "value_median": ratio_median,
                                        "target": f"<= {FLOOR_TARGET:g}", "pass": ratio <= FLOOR_TARGET}}

    print()
    common.print_table(TABLE, rows, rule=False)
    t = targets["factorized_vs_matmul"]
    print(f"factorized MAP vs matmul floor: {t['value']:.2f}x (median {t['value_median']:.2f}x), target "
          f"{t['target']}x  {'PASS' if t['pass'] else 'FAIL'}; orthogonality defect {defect:.2e}\n")

    enum = enumeration_rows(args, dtype)
    last = enum[-1]
    per = last["time_s"] / (last["configs"] * last["n"])  # seconds per configuration-example at the largest K
    projection = {"k": k, "log10_configs": k * math.log10(2),
                  "log10_seconds_per_example": k * math.log10(2) + math.log10(per),
                  "from_k": last["k"], "seconds_per_config_example": per}
    print(f"exact enumeration at K={k} would take ~10^{projection['log10_seconds_per_example']:.0f} s per example "
          f"(2^{k} configurations at {per * 1e9:.1f} ns each)")
    total_s = common.finish(info, wall0)
    common.print_done(total_s, args.out)
    sections = {
        "config": {"k": k, "d": d, "n": n, "r": 2, "repeats": args.repeats, "dtype": args.dtype, "seed": args.seed,
                   "threads": args.threads, "quick": args.quick, "enum_max_k": args.enum_max_k,
                   "enum_d": args.enum_d, "enum_batch": args.enum_batch, "enum_time_limit": args.enum_time_limit,
                   "rate_statistic": "best"},
        "layer": {"kind": "ReLU MASO, orthonormal rows of W (torch.linalg.qr)", "orthogonality_defect": defect,
                  "factorized_map_is_relu_gate": agrees},
    }
    after = {"enumeration": enum, "enumeration_projection": projection, "targets": targets}
    result = common.record("factorial_map", argv, sections, info, rows, after, total_s)
    return common.write_json(args.out, result)


if __name__ == "__main__":
    main()
