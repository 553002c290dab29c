"""Benchmark: the locally connected student's training epoch, with and without frequency statistics.

What is measured, in one process, on ``Ladder.random(depth, branching, events, seed=seed)`` (341 regions,
one-hot leaves of 16 for the defaults), a ``LadderStudent(ladder, width, dtype=torch.float32)`` and
N examples drawn with ``teachers.sampling.sample_ladder`` (default N = 65536), in minibatches of
``--batch-size`` (default 1024); the squared loss throughout.  One *epoch* = one pass over the N examples
at fixed weights (no optimizer step: every contender does the same forward and backward work).

Target 1 -- frequency statistics cost at most 1.3x a plain epoch:

- ``plain``: per minibatch ``student.zero_grad(set_to_none=True)``, ``loss = student.loss(student(x), y)``,
  ``loss.backward()`` (autograd; what an ordinary training epoch costs);
- ``stats f32`` (judged) / ``stats f64``: per minibatch ``rec = student.forward_backward(x, y)`` and
  ``acc.add(rec, z)`` on a ``smaso.frequency.FrequencyAccumulator`` with float32 (its default for a
  float32 student) or float64 (on request) accumulation, plus building the accumulator and one
  ``acc.result()`` at the end of the epoch;
- ``explicit fwd+bwd`` (reference row): ``student.forward_backward(x, y)`` alone, no accumulation.

The same four rows are run for a Batch-Norm student (``batch_norm=True``); the BN float32 ratio is a
target too, its float64 ratio is reported only.

Target 2 -- the locally connected (LC) forward+backward at most 1.5x a dense network of equal work:
the LC contender is the ``plain`` row above (``student(x)`` + backward, float32).  Level l of the student
does R_l * (b_l * n_{l+1}) * n_l = R_{l+1} * n_{l+1} * n_l multiply-adds (MACs) per example.  The dense
reference ``dense`` is a chain of ``nn.Linear(K_l, J_l)`` (with bias), one per level, with
K_l * J_l = that level's MACs and each layer's input the previous layer's output: J_0 = n_0 (classes),
K_l = MACs_l / J_l, J_{l+1} = K_l (for the defaults 256 -> 256 -> 64 -> 64 -> 16).  It uses the student's
own activation objects (hidden ``student.activation``, top ``student.top_activation``), the same squared
loss, the same batch size and labels, a float32 Gaussian input of width K_d drawn outside the timing, and
is timed the same way.  Equal MACs at every layer means the dense net has fewer activations than the
LC one (its input is K_d = 256 wide, the student's R_d * n_d = 4096): moving the LC layer's larger,
region-batched activations is part of what the ratio measures.

Timing: the one-hot inputs x of each minibatch (and the dense input) are built outside the timed region;
each epoch's time is the sum of its per-minibatch times (plus building the accumulator and
``acc.result()`` for the stats rows).  Every contender is warmed up on ``--warmup-batches`` minibatches,
then the contenders are run round-robin ``--repeats`` times (so that a burst of load from other processes
hits all of them alike).  Targets are judged on the best (shortest) epoch; the median epoch is recorded
too, and so is a noise-robust floor, ``batch_min_sum_s`` = the sum over the minibatches of each one's
fastest time over the repeats (ratios of it: ``value_batch_min``), as is each epoch's process CPU time.
On a shared machine, epochs far apart in time or ratios that disagree between best, median and
batch-min mean the cores were busy elsewhere: re-run.  All numbers and machine information go
to ``--out`` (JSON, written atomically).

Run it with::

    python benchmarks/bench_student.py            # full run (N = 65536), about 1.5 minutes on 2 cores
    python benchmarks/bench_student.py --no-bn    # skip the Batch-Norm rows
    python benchmarks/bench_student.py --quick    # smoke run (N = 2048, 1 repeat)
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
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
from torch import nn

from smaso.frequency import FrequencyAccumulator
from smaso.student import LadderStudent
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "student.json"
QUICK_N, QUICK_REPEATS = 2048, 1
STATS_TARGET = 1.3  # instrumented epoch (float64 accumulation) over the plain epoch, at most
DENSE_TARGET = 1.5  # LC forward+backward over the equal-MACs dense forward+backward, at most
JUDGED_ACCUMULATION = "float32"  # the accumulator's default: the student's dtype (float64 when asked)
RESULT_KEYS = ("contender", "description", "batch_norm", "accumulation", "n", "batches", "batch_size", "repeats",
               "times_s", "process_cpu_s", "best_s", "median_s", "batch_min_sum_s", "examples_per_s", "ms_per_batch",
               "x_plain", "target")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=None, help=f"examples per epoch (default 65536; {QUICK_N} with --quick)")
    p.add_argument("--batch-size", type=int, default=1024, help="examples per minibatch (default 1024)")
    p.add_argument("--depth", type=int, default=4, help="levels below the root (default 4)")
    p.add_argument("--branching", type=int, default=4, help="children per region (default 4)")
    p.add_argument("--events", type=int, default=16, help="events per region (default 16)")
    p.add_argument("--width", type=int, default=16, help="student nodes per hidden region (default 16)")
    p.add_argument("--seed", type=int, default=0, help="seed of the ladder, the sample and the weights (default 0)")
    p.add_argument("--repeats", type=int, default=None, help="timed epochs per contender (default 3; 1 with --quick)")
    p.add_argument("--warmup-batches", type=int, default=2, help="untimed minibatches per contender (default 2)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (default: torch's own choice, recorded in the JSON)")
    p.add_argument("--no-bn", action="store_true", help="skip the Batch-Norm rows")
    p.add_argument("--quick", action="store_true", help=f"smoke run: N={QUICK_N}, repeats={QUICK_REPEATS}")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help="JSON results file (default: benchmarks/results/student.json of this repository)")
    args = p.parse_args(argv)
    if args.n is None:
        args.n = QUICK_N if args.quick else 65536
    if args.repeats is None:
        args.repeats = QUICK_REPEATS if args.quick else 3
    for name in ("n", "batch_size", "depth", "branching", "events", "width", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup_batches < 0:
        p.error("--warmup-batches must be >= 0")
    if args.depth < 2:
        p.error("--depth must be >= 2 (the student needs a hidden level)")
    return args


# ---------------------------------------------------------------------- data
class Batches:
    """Minibatches of one sample; the one-hot inputs are built on demand (outside the timed region)."""

    def __init__(self, sample, batch_size: int, dense_width: int, seed: int):
        self.sample, self.batch_size = sample, batch_size
        self.y = sample.y
        self.starts = list(range(0, len(sample), batch_size))
        self.dense_width, self.seed = dense_width, seed

    def __len__(self) -> int:
        return len(self.starts)

    def bounds(self, i: int) -> slice:
        s = self.starts[i]
        return slice(s, min(s + self.batch_size, len(self.sample)))

    def x(self, i: int) -> torch.Tensor:
        return self.sample.inputs(self.bounds(i), dtype=torch.float32)

    def dense_x(self, i: int) -> torch.Tensor:
        sl = self.bounds(i)
        g = torch.Generator().manual_seed(self.seed * 100_003 + i)
        return torch.randn(sl.stop - sl.start, self.dense_width, generator=g, dtype=torch.float32)


# ---------------------------------------------------------------------- contenders
# Each returns run(batch_indices) -> seconds: the summed times of the timed parts of the minibatches.

def plain_runner(student: LadderStudent, data: Batches) -> Callable[[list[int]], list[float]]:
    def run(batches: list[int]) -> list[float]:
        times = []
        for i in batches:
            x, y = data.x(i), data.y[data.bounds(i)]
            t0 = time.perf_counter()
            student.zero_grad(set_to_none=True)
            loss = student.loss(student(x), y)
            loss.backward()
            times.append(time.perf_counter() - t0)
        assert torch.isfinite(loss)
        return times
    return run


def explicit_runner(student: LadderStudent, data: Batches) -> Callable[[list[int]], list[float]]:
    def run(batches: list[int]) -> list[float]:
        times = []
        for i in batches:
            x, y = data.x(i), data.y[data.bounds(i)]
            t0 = time.perf_counter()
            rec = student.forward_backward(x, y)
            times.append(time.perf_counter() - t0)
        assert np.isfinite(rec.loss)
        return times
    return run


def stats_runner(student: LadderStudent, data: Batches, dtype: torch.dtype) -> Callable[[list[int]], list[float]]:
    """Per-minibatch times, then one last entry: building the accumulator plus ``acc.result()``."""
    def run(batches: list[int]) -> list[float]:
        t0 = time.perf_counter()
        acc = FrequencyAccumulator(student, dtype)
        setup = time.perf_counter() - t0
        times = []
        for i in batches:
            sl = data.bounds(i)
            x, y, z = data.x(i), data.y[sl], data.sample.z[sl]
            t0 = time.perf_counter()
            rec = student.forward_backward(x, y)
            acc.add(rec, z)
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        stats = acc.result()
        times.append(setup + time.perf_counter() - t0)
        assert stats.num_examples == sum(data.bounds(i).stop - data.bounds(i).start for i in batches)
        return times
    return run


class DenseNet(nn.Module):
    """Chain of nn.Linear layers (dims[0] -> dims[1] -> ... -> dims[-1]) with the student's activations."""

    def __init__(self, dims: list[int], student: LadderStudent, seed: int):
        super().__init__()
        with torch.random.fork_rng():  # nn.Linear's default init, seeded, without touching the global stream
            torch.manual_seed(seed)
            self.layers = nn.ModuleList([nn.Linear(dims[i], dims[i + 1]) for i in range(len(dims) - 1)])
        self.hidden, self.top = student.activation, student.top_activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = (self.top if i == len(self.layers) - 1 else self.hidden)(layer(x))
        return x


def dense_dims(student: LadderStudent) -> tuple[list[int], list[int]]:
    """Input -> output widths of the equal-MACs dense chain (bottom to top), and the student's MACs per level.

    Level l does macs[l] = R_{l+1} n_{l+1} n_l MACs per example; J_0 = n_0, K_l = macs[l] / J_l (rounded when
    not divisible), J_{l+1} = K_l.
    """
    lad, n = student.ladder, student.widths
    macs = [lad.num_regions[l + 1] * n[l + 1] * n[l] for l in range(lad.depth)]
    out_w, ins = n[0], []
    for l in range(lad.depth):
        k = max(1, round(macs[l] / out_w))
        ins.append(k)
        out_w = k
    return [*reversed(ins), n[0]], macs


def dense_runner(net: DenseNet, student: LadderStudent, data: Batches) -> Callable[[list[int]], list[float]]:
    def run(batches: list[int]) -> list[float]:
        times = []
        for i in batches:
            x, y = data.dense_x(i), data.y[data.bounds(i)]
            t0 = time.perf_counter()
            net.zero_grad(set_to_none=True)
            loss = student.loss(net(x), y)
            loss.backward()
            times.append(time.perf_counter() - t0)
        assert torch.isfinite(loss)
        return times
    return run


def measure_round_robin(contenders: list[dict], num_batches: int, repeats: int, warmup_batches: int) -> None:
    """Warm up every contender, then time ``repeats`` epochs of each, round-robin; fills in the timing keys."""
    all_batches = list(range(num_batches))
    for c in contenders:
        print(f"  warm-up: {c['contender']} ({min(warmup_batches, num_batches)} minibatch(es))", flush=True)
        if warmup_batches:
            c["run"](all_batches[:warmup_batches])
        c["times_s"], c["process_cpu_s"], c["part_times"] = [], [], []
    for r in range(repeats):
        print(f"  epoch {r + 1}/{repeats}:", end="", flush=True)
        for c in contenders:
            gc.collect()
            c0 = time.process_time()
            parts = c["run"](all_batches)
            c["process_cpu_s"].append(time.process_time() - c0)
            c["part_times"].append(parts)
            c["times_s"].append(sum(parts))
            print(f" {c['contender']} {c['times_s'][-1]:.2f}s;", end="", flush=True)
        print()


def finish_row(c: dict, n: int, num_batches: int, batch_size: int, repeats: int) -> dict:
    best, median = min(c["times_s"]), statistics.median(c["times_s"])
    # noise-robust floor: every minibatch (and the stats rows' setup + result()) at its fastest over the repeats
    floor = sum(min(ts) for ts in zip(*c["part_times"], strict=True))
    row = {k: v for k, v in c.items() if k not in ("run", "part_times")}
    row.update({"n": n, "batches": num_batches, "batch_size": batch_size, "repeats": repeats, "best_s": best,
                "median_s": median, "batch_min_sum_s": floor, "examples_per_s": n / best,
                "ms_per_batch": 1e3 * best / num_batches, "x_plain": None})
    if len(c["part_times"][0]) > num_batches:  # stats rows: the epoch-level part, at its fastest
        row["setup_and_result_s"] = min(ts[-1] for ts in c["part_times"])
    return row


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


def print_table(rows: list[dict]) -> None:
    head = (f"{'contender':<21} {'BN':>3} {'accum':>7} {'seconds':>8} {'median':>8} {'b-min':>8} {'CPU s':>7} "
            f"{'ms/batch':>9} {'examples/s':>11} {'x plain':>8}")
    print(head)
    print("-" * len(head))
    for r in rows:
        x = "" if r["x_plain"] is None else f"{r['x_plain']:.2f}"
        cpu = r["process_cpu_s"][r["times_s"].index(r["best_s"])]
        print(f"{r['contender']:<21} {'yes' if r['batch_norm'] else 'no':>3} {r['accumulation'] or '-':>7} "
              f"{r['best_s']:>8.3f} {r['median_s']:>8.3f} {r['batch_min_sum_s']:>8.3f} {cpu:>7.2f} "
              f"{r['ms_per_batch']:>9.2f} "
              f"{r['examples_per_s']:>11.4g} {x:>8}")
    print("(seconds = best epoch of the repeats; b-min = sum over the minibatches of each one's fastest time; "
          "CPU s = process CPU time of the best epoch, all threads and the untimed input building included; "
          "x plain = seconds / seconds of the plain autograd epoch with the same BN setting)")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    wall0 = time.perf_counter()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    ladder = Ladder.random(args.depth, args.branching, args.events, seed=args.seed)
    t0 = time.perf_counter()
    sample = sample_ladder(ladder, args.n, args.seed, progress=False)
    sample_s = time.perf_counter() - t0
    students = {False: LadderStudent(ladder, width=args.width, dtype=torch.float32, seed=args.seed)}
    if not args.no_bn:
        students[True] = LadderStudent(ladder, width=args.width, dtype=torch.float32, batch_norm=True,
                                       seed=args.seed)
    student = students[False]
    dims, macs = dense_dims(student)
    dense_macs = [dims[i] * dims[i + 1] for i in range(len(dims) - 1)][::-1]  # per level, top (0) first
    data = Batches(sample, args.batch_size, dims[0], args.seed)
    net = DenseNet(dims, student, args.seed)
    print(f"ladder: depth {args.depth}, branching {args.branching}, {args.events} events, "
          f"{ladder.total_regions} regions, leaves {ladder.num_regions[-1]} x {ladder.emission.dim}; "
          f"student widths {student.widths}")
    print(f"N = {args.n} examples in {len(data)} minibatch(es) of {args.batch_size}, {args.repeats} repeat(s); "
          f"sampled in {sample_s:.2f} s; torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    print(f"MACs per example, level 0..{args.depth}: student {macs} (total {sum(macs)}); dense chain "
          f"{' -> '.join(map(str, dims))}: {dense_macs} (total {sum(dense_macs)})")
    info = machine_info()

    contenders = []
    for bn, st in students.items():
        tag = " (BN)" if bn else ""
        contenders.append({"contender": "plain" + tag, "description": "student(x), student.loss, loss.backward() "
                           "(autograd), zero_grad per minibatch", "batch_norm": bn, "accumulation": None,
                           "target": True, "run": plain_runner(st, data)})
        contenders.append({"contender": "explicit fwd+bwd" + tag, "description": "student.forward_backward(x, y) "
                           "alone (no accumulation)", "batch_norm": bn, "accumulation": None, "target": False,
                           "run": explicit_runner(st, data)})
        for name, short, dt in (("float64", "f64", torch.float64), ("float32", "f32", torch.float32)):
            contenders.append({"contender": f"stats {short}" + tag,
                               "description": f"forward_backward + FrequencyAccumulator({name}).add per minibatch, "
                               "result() once", "batch_norm": bn, "accumulation": name,
                               "target": name == JUDGED_ACCUMULATION, "run": stats_runner(st, data, dt)})
    contenders.append({"contender": "dense", "description": "chain of nn.Linear with the student's per-level MACs "
                       f"({' -> '.join(map(str, dims))}), autograd", "batch_norm": False, "accumulation": None,
                       "target": True, "run": dense_runner(net, student, data), "dims": dims,
                       "macs_per_level": dense_macs})
    measure_round_robin(contenders, len(data), args.repeats, args.warmup_batches)
    rows = [finish_row(c, args.n, len(data), args.batch_size, args.repeats) for c in contenders]

    by_name = {r["contender"]: r for r in rows}
    for r in rows:
        base = by_name["plain (BN)" if r["batch_norm"] else "plain"]
        r["x_plain"] = r["best_s"] / base["best_s"]

    def ratio(num: str, den: str, limit: float | None, judged: bool) -> dict:
        a, b = by_name[num], by_name[den]
        out = {"numerator": num, "denominator": den, "value": a["best_s"] / b["best_s"],
               "value_median": a["median_s"] / b["median_s"],
               "value_batch_min": a["batch_min_sum_s"] / b["batch_min_sum_s"], "judged": judged}
        if limit is not None:
            out["target"] = f"<= {limit:g}"
            out["pass"] = out["value"] <= limit
        return out

    targets = {"stats_overhead": ratio("stats f32", "plain", STATS_TARGET, True),
               "stats_overhead_float64": ratio("stats f64", "plain", STATS_TARGET, False),
               "explicit_backward_overhead": ratio("explicit fwd+bwd", "plain", None, False)}
    if not args.no_bn:
        targets["stats_overhead_bn"] = ratio("stats f32 (BN)", "plain (BN)", STATS_TARGET, True)
        targets["stats_overhead_bn_float64"] = ratio("stats f64 (BN)", "plain (BN)", STATS_TARGET, False)
        targets["explicit_backward_overhead_bn"] = ratio("explicit fwd+bwd (BN)", "plain (BN)", None, False)
    targets["locally_connected_vs_dense"] = ratio("plain", "dense", DENSE_TARGET, True)

    print()
    print_table(rows)
    print()
    labels = {"stats_overhead": "stats (float32 accum, default) / plain",
              "stats_overhead_float64": "stats (float64 accum) / plain",
              "explicit_backward_overhead": "explicit fwd+bwd / plain",
              "stats_overhead_bn": "BN: stats (float32 accum, default) / plain",
              "stats_overhead_bn_float64": "BN: stats (float64 accum) / plain",
              "explicit_backward_overhead_bn": "BN: explicit fwd+bwd / plain",
              "locally_connected_vs_dense": "locally connected / dense (same MACs)"}
    for key, t in targets.items():
        verdict = ("PASS" if t["pass"] else "FAIL") if t["judged"] else "(not judged)" if "pass" in t else ""
        tgt = f"target {t['target']}x" if "target" in t else ""
        print(f"{labels[key]:<40} {t['value']:7.2f}x  (median {t['value_median']:5.2f}x, batch-min "
              f"{t['value_batch_min']:5.2f}x)  {tgt:<14} {verdict}".rstrip())
    print(f"(judged on the best epochs; the statistics targets on {JUDGED_ACCUMULATION} accumulation, the "
          "accumulator's default; batch-min: ratio of the sums of per-minibatch minima over the repeats)")
    total_s = time.perf_counter() - wall0
    info["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    print(f"\ntotal wall time {total_s:.1f} s; results -> {args.out}")

    result = {
        "benchmark": "student",
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "argv": list(sys.argv[1:] if argv is None else argv),
        "config": {"n": args.n, "batch_size": args.batch_size, "batches": len(data), "depth": args.depth,
                   "branching": args.branching, "events": args.events, "width": args.width, "seed": args.seed,
                   "repeats": args.repeats, "warmup_batches": args.warmup_batches, "threads": args.threads,
                   "quick": args.quick, "batch_norm_rows": not args.no_bn, "loss": "squared",
                   "student_dtype": "float32", "judged_accumulation": JUDGED_ACCUMULATION,
                   "time_statistic": "best", "order": "round-robin"},
        "ladder": {"total_regions": ladder.total_regions, "num_regions": list(ladder.num_regions),
                   "events": list(ladder.events), "branching": list(ladder.branching),
                   "input_dim": ladder.emission.dim, "sample_s": sample_s},
        "student": {"widths": list(student.widths), "activation": student.activation.name,
                    "macs_per_level": macs, "macs_per_example": sum(macs)},
        "dense": {"dims": dims, "macs_per_level": dense_macs, "macs_per_example": sum(dense_macs)},
        "machine": info,
        "results": rows,
        "targets": targets,
        "total_wall_s": total_s,
    }
    write_json_atomic(args.out, result)
    return result


if __name__ == "__main__":
    main()
