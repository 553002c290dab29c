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
import datetime
import gc
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyro
import torch

from inference.factorial import exact_joint_map, factorized_map
from smaso.orthogonality import orthogonality_defect

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "factorial_map.json"
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
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (default: torch's own choice, recorded in the JSON)")
    p.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK}")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help="JSON results file (default: benchmarks/results/factorial_map.json of this repository)")
    args = p.parse_args(argv)
    defaults = QUICK if args.quick else {"k": 1024, "d": 1024, "n": 4096, "repeats": 5, "enum_max_k": 22}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in ("k", "d", "n", "repeats", "enum_max_k", "enum_d", "enum_batch"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
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
    times, cpu = [], []
    for _ in range(repeats):
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    best = min(times)
    return {"contender": name, "description": description, "shape": None, "repeats": repeats, "times_s": times,
            "process_cpu_s": cpu, "best_s": best, "median_s": statistics.median(times), "gflops": flops / best / 1e9,
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
def machine_info() -> dict:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "pyro": pyro.__version__,
        "numpy": np.__version__,
        "loadavg_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def write_json_atomic(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file ordinary permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    wall0 = time.perf_counter()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    dtype = torch.float32 if args.dtype == "float32" else torch.float64
    g = torch.Generator().manual_seed(args.seed)
    k, d, n = args.k, args.d, args.n
    print(f"factorial SMASO: ReLU layer K={k} units, D={d} inputs, orthogonal rows; batch N={n}; {args.dtype}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    info = machine_info()
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

    print(f"\n{'contender':<26} {'shape (N, D, out)':>20} {'best s':>9} {'GFLOP/s':>9} {'x floor':>8}")
    for r in rows:
        print(f"{r['contender']:<26} {tuple(r['shape'])!s:>20} {r['best_s']:>9.4f} {r['gflops']:>9.1f} "
              f"{r['x_floor']:>8.2f}")
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
    total_s = time.perf_counter() - wall0
    info["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    print(f"\ntotal wall time {total_s:.1f} s; results -> {args.out}")
    result = {
        "benchmark": "factorial_map",
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "argv": list(sys.argv[1:] if argv is None else argv),
        "config": {"k": k, "d": d, "n": n, "r": 2, "repeats": args.repeats, "dtype": args.dtype, "seed": args.seed,
                   "threads": args.threads, "quick": args.quick, "enum_max_k": args.enum_max_k,
                   "enum_d": args.enum_d, "enum_batch": args.enum_batch, "enum_time_limit": args.enum_time_limit,
                   "rate_statistic": "best"},
        "layer": {"kind": "ReLU MASO, orthonormal rows of W (torch.linalg.qr)", "orthogonality_defect": defect,
                  "factorized_map_is_relu_gate": agrees},
        "machine": info,
        "results": rows,
        "enumeration": enum,
        "enumeration_projection": projection,
        "targets": targets,
        "total_wall_s": total_s,
    }
    write_json_atomic(args.out, result)
    return result


if __name__ == "__main__":
    main()
