"""Benchmark: the Random Hierarchy Model at the issue's size with the library's own pieces (issue 38's "v = m = 64,
L = 5 builds, samples 10^6 rows and answers p(y | x) exactly on 10^4 of them, time and memory recorded").

The ladder is ``Ladder.rhm(v, n_c=v, m=v, s, L)`` (default v = 64, s = 2, L = 5: 32 positions, 63 regions, 64
productions per symbol, P_max = n_c m^(2^L - 1) = 64^32 ~ 6.3e57 distinct data).  Phases, each run in a fresh
subprocess so that its peak resident memory is its own (``resource.getrusage(RUSAGE_SELF).ru_maxrss`` of the
child: ``rss_before`` after the imports, the ladder and the phase's inputs, ``peak_rss`` right after the phase's
call, before its checks (which hold copies of their own); ``added`` = their difference bounds what the phase's
own work held at its peak):

- ``build``: ``Ladder.rhm`` (the rules and probabilities: the productions' size, not v^s per symbol);
- ``sample``: ``teachers.sampling.sample_ladder`` of ``--n-sample`` rows (10^6), with replacement;
- ``distinct``: ``teachers.derivations.sample_distinct`` of ``--n-sample`` rows (distinct derivations), checked
  distinct (inputs compared after the timing);
- ``split``: ``teachers.derivations.train_test_split`` with ``--n-sample`` training and ``--n-posterior`` test
  rows, checked disjoint;
- ``posterior``: ``inference.posterior.posterior`` (automatic chunk) on the first ``--n-posterior`` rows (10^4)
  of the sample's stream (``sample_rows(ladder, seed, 0, n)``: the same bytes as those rows of the ``sample``
  phase, checked there), p(y | x) checked one-hot on the true class on every row (accuracy 1, max |p(y | x) -
  onehot(y)|) and log p(x) = -log P_max (each input has exactly one derivation, all equally likely).

The phases' subprocesses run round robin over ``--repeats`` rounds (medians and best times, process CPU times of
the child, its system time and minor page faults, load average at the start and the end).  Then ``chunks``: in
this process, the posterior's time on the same rows for its automatic chunk against fixed ``--chunk-sizes``
(round robin; system time and minor page faults too: the per-chunk temporaries come from, and go back to, the
allocator), and on a few smaller RHMs (``--chunk-ladders``) for chunks around the automatic one: the automatic
chunk's median over the best median.

Run it with::

    python benchmarks/bench_rhm.py            # full run (v = 64, L = 5, 10^6 rows, 10^4 posteriors, 3 rounds)
    python benchmarks/bench_rhm.py --quick    # smoke run (v = 8, L = 3, 4096 rows, 256 posteriors, 1 round)
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

from inference.posterior import _tree_chunk, posterior
from inference.sum_product import tree_plan
from teachers.derivations import sample_distinct, train_test_split
from teachers.ladder import Ladder
from teachers.sampling import LadderSample, sample_ladder, sample_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common beside this script, also when loaded by path
import _common as common

NAME = "rhm"
DEFAULT_OUT = common.default_out(NAME)
JOBS = ("build", "sample", "distinct", "split", "posterior")
QUICK = {"v": 8, "L": 3, "n_sample": 4096, "n_posterior": 256, "repeats": 1, "chunk_sizes": "auto,16,1024",
         "chunk_ladders": "4:3:2048"}
FULL = {"v": 64, "L": 5, "n_sample": 10**6, "n_posterior": 10**4, "repeats": 3,
        "chunk_sizes": "auto,4,8,16,32,64,128,1024", "chunk_ladders": "8:3:200000,4:4:200000,32:4:20000,16:5:40000"}
RESULT_KEYS = ("job", "rows", "repeats", "times_s", "process_cpu_s", "sys_s", "minor_faults", "best_s", "median_s",
               "rows_per_s", "rss_before_mib", "peak_rss_mib", "added_mib", "checks")
CHUNK_KEYS = ("v", "L", "rows", "auto_chunk", "chunks", "best_chunk", "auto_over_best")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--v", type=int, default=None, help="vocabulary = classes = synonyms (default 64; 8 --quick)")
    p.add_argument("--s", type=int, default=2, help="patch size (default 2)")
    p.add_argument("--L", type=int, default=None, help="depth (default 5; 3 with --quick)")
    p.add_argument("--seed", type=int, default=0, help="seed of the rules and of the rows (default 0)")
    p.add_argument("--n-sample", type=int, default=None, help="rows sampled (default 10^6; 4096 with --quick)")
    p.add_argument("--n-posterior", type=int, default=None,
                   help="rows answered exactly (default 10^4; 256 with --quick)")
    p.add_argument("--chunk-sizes", default=None,
                   help="comma-separated chunk sizes of posterior compared on the main RHM ('auto': its own; "
                        f"default {FULL['chunk_sizes']!r})")
    p.add_argument("--chunk-ladders", default=None,
                   help="comma-separated v:L:rows of further RHMs (v = n_c = m) whose chunks around the automatic "
                        f"one are compared ('' for none; default {FULL['chunk_ladders']!r})")
    p.add_argument("--repeats", type=int, default=None, help="rounds (default 3; 1 with --quick)")
    common.add_threads_arg(p)
    common.add_quick_out_args(p, f"smoke run: v = m = n_c = {QUICK['v']}, L = {QUICK['L']}, "
                                 f"{QUICK['n_sample']} rows, {QUICK['n_posterior']} posteriors, "
                                 f"repeats = {QUICK['repeats']}", DEFAULT_OUT)
    p.add_argument("--child", nargs=2, metavar=("JOB", "CONFIG"), help=argparse.SUPPRESS)  # one phase (internal)
    args = p.parse_args(argv)
    if args.child:
        return args
    common.fill_defaults(args, QUICK, FULL)
    common.require_positive(p, args, ("v", "s", "L", "n_sample", "n_posterior", "repeats"))
    try:
        args.chunks = [None if c.strip() == "auto" else int(c) for c in args.chunk_sizes.split(",")]
        args.ladders = [tuple(int(f) for f in t.split(":")) for t in args.chunk_ladders.split(",") if t.strip()]
    except ValueError:
        p.error(f"--chunk-sizes / --chunk-ladders: expected integers ('auto'; v:L:rows), got "
                f"{args.chunk_sizes!r} / {args.chunk_ladders!r}")
    if any(c is not None and c < 1 for c in args.chunks) or any(len(t) != 3 or min(t) < 1 for t in args.ladders):
        p.error("--chunk-sizes must be >= 1 and --chunk-ladders entries v:L:rows of positive integers")
    return args


def rhm(v: int, s: int, L: int, seed: int) -> Ladder:
    """The benchmark's RHM: vocabulary, classes and synonyms all ``v``."""
    return Ladder.rhm(v, v, v, s, L, seed=seed)


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _distinct_inputs(leaves: torch.Tensor) -> int:
    """How many distinct rows ``leaves`` ``(N, R_d)`` has."""
    return len(torch.unique(leaves, dim=0))


def _inputs(lad: Ladder, rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``rows`` rows of the stream ``sample_ladder(lad, ..., seed)`` (:func:`sample_rows`: the same
    bytes): inputs ``(rows, R_d, v)`` float32 (``LadderSample.inputs()``) and classes ``(rows,)``."""
    z, _ = sample_rows(lad, seed, 0, rows)
    sample = LadderSample(lad, z)
    return sample.inputs(), sample.y


def posterior_checks(lad: Ladder, x: torch.Tensor, y: torch.Tensor, chunk: int | None = None) -> dict:
    """``posterior(lad, x, chunk_size=chunk)`` against the truth of an RHM: accuracy, max |p(y | x) - onehot(y)|,
    max |log p(x) + log P_max|."""
    post = posterior(lad, x, chunk_size=chunk)
    onehot = torch.nn.functional.one_hot(y, lad.num_classes).to(torch.float64)
    log_p_max = math.log(lad.rhm_params.num_data)  # a Python int past int64: math.log takes it exactly
    return {"accuracy": (post.predict() == y).double().mean().item(),
            "max_label_error": (post.label - onehot).abs().max().item(),
            "max_log_evidence_error": (post.log_evidence + log_p_max).abs().max().item()}


def job(name: str, cfg: dict) -> dict:
    """One phase (module docstring) in this process: its seconds, CPU seconds, peak RSS before and after, checks."""
    torch.set_num_threads(cfg["threads"] or torch.get_num_threads())
    v, s, L, seed, n, n_post = (cfg[k] for k in ("v", "s", "L", "seed", "n_sample", "n_posterior"))
    checks: dict = {}
    if name == "build":
        use0, rss0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF), _peak_rss_mib(), time.process_time(), \
            time.perf_counter()
        lad = rhm(v, s, L, seed)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        checks["productions_bytes"] = sum(t.numel() * t.element_size() for p in lad.productions
                                          for t in (p.rules, p.probs))
        checks["regions"], checks["log10_p_max"] = lad.total_regions, math.log10(lad.rhm_params.num_data)
        rows = 0  # no rows: the ladder itself
    else:
        lad = rhm(v, s, L, seed)
        if name == "posterior":
            x, y = _inputs(lad, n_post, seed + 1)
            checks["inputs_mib"] = x.numel() * x.element_size() / 2**20
        use0, rss0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF), _peak_rss_mib(), time.process_time(), \
            time.perf_counter()
        if name == "sample":
            out = sample_ladder(lad, n, seed=seed + 1)
        elif name == "distinct":
            out = sample_distinct(lad, n, seed=seed + 1)
        elif name == "split":
            out = train_test_split(lad, n, n_post, seed=seed + 1)
        elif name == "posterior":
            checks.update(posterior_checks(lad, x, y))
            checks["auto_chunk"] = _tree_chunk(tree_plan(lad, x.device), x.device)
        else:
            raise ValueError(f"job: unknown {name!r}")
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        op_peak = _peak_rss_mib()  # before the checks below, which hold copies of their own
        rows = n_post if name == "posterior" else n
        if name == "sample":  # the posterior's rows are this stream's first rows
            first, _ = sample_rows(lad, seed + 1, 0, min(n, n_post))
            checks["posterior_rows_are_its_first"] = bool(torch.equal(first, out.z[: len(first)]))
            checks["z_mib"] = out.z.numel() * out.z.element_size() / 2**20
        elif name == "distinct":
            checks["distinct_inputs"] = _distinct_inputs(out.leaves)
        elif name == "split":
            train, test = out
            checks["distinct_inputs"] = _distinct_inputs(torch.cat([train.leaves, test.leaves]))
            checks["train_rows"], checks["test_rows"] = len(train), len(test)
    if name == "build":
        op_peak = _peak_rss_mib()
    use = resource.getrusage(resource.RUSAGE_SELF)
    return {"job": name, "rows": rows, "seconds": seconds, "cpu_s": cpu, "rss_before_mib": rss0,
            "peak_rss_mib": op_peak, "peak_rss_with_checks_mib": _peak_rss_mib(),
            "sys_s": use.ru_stime - use0.ru_stime,
            "minor_faults": use.ru_minflt - use0.ru_minflt, "checks": checks}


def _run_child(name: str, cfg: dict) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, json.dumps(cfg)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"child {name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def phases(cfg: dict, repeats: int) -> list[dict]:
    """Every job of :data:`JOBS` in its own subprocess, round robin over ``repeats`` rounds: one row per job."""
    runs: dict[str, list[dict]] = {j: [] for j in JOBS}
    for r in range(repeats):
        print(f"  phases, round {r + 1}/{repeats}", flush=True)
        for j in JOBS:
            runs[j].append(_run_child(j, cfg))
    rows = []
    for j, rs in runs.items():
        ts = [r["seconds"] for r in rs]
        best, median = common.best_median(ts)
        rows.append({"job": j, "rows": rs[0]["rows"], "repeats": repeats, "times_s": ts,
                     "process_cpu_s": [r["cpu_s"] for r in rs], "sys_s": [r["sys_s"] for r in rs],
                     "minor_faults": [r["minor_faults"] for r in rs], "best_s": best, "median_s": median,
                     "rows_per_s": None if j == "build" else rs[0]["rows"] / median,
                     "rss_before_mib": max(r["rss_before_mib"] for r in rs),
                     "peak_rss_mib": max(r["peak_rss_mib"] for r in rs),
                     "peak_rss_with_checks_mib": max(r["peak_rss_with_checks_mib"] for r in rs),
                     "added_mib": max(r["peak_rss_mib"] - r["rss_before_mib"] for r in rs), "checks": rs[0]["checks"]})
    return rows


def compare_chunks(lad: Ladder, rows: int, seed: int, chunks: list[int | None], repeats: int, label: str) -> dict:
    """The posterior on ``rows`` rows of ``lad``'s sample stream for each chunk of ``chunks`` (None: automatic),
    round robin; every run checked one-hot.  Returns the ``chunks`` entry (:data:`CHUNK_KEYS`)."""
    x, y = _inputs(lad, rows, seed + 1)
    auto = _tree_chunk(tree_plan(lad, x.device), x.device)
    worst = {"accuracy": 1.0, "max_label_error": 0.0, "max_log_evidence_error": 0.0}

    faults: dict[int | None, list[tuple[float, int]]] = {c: [] for c in chunks}

    def run(chunk: int | None) -> float:
        use0, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        c = posterior_checks(lad, x, y, chunk)
        elapsed = time.perf_counter() - t
        use = resource.getrusage(resource.RUSAGE_SELF)
        faults[chunk].append((use.ru_stime - use0.ru_stime, use.ru_minflt - use0.ru_minflt))
        worst["accuracy"] = min(worst["accuracy"], c["accuracy"])
        worst["max_label_error"] = max(worst["max_label_error"], c["max_label_error"])
        worst["max_log_evidence_error"] = max(worst["max_log_evidence_error"], c["max_log_evidence_error"])
        return elapsed

    times, cpu = common.round_robin([lambda c=c: run(c) for c in chunks], repeats,
                                    on_round=lambda r: print(f"  chunks of {label}, round {r + 1}/{repeats}",
                                                             flush=True))
    out = []
    for chunk, ts, cs in zip(chunks, times, cpu, strict=True):
        best, median = common.best_median(ts)
        out.append({"chunk_size": "auto" if chunk is None else chunk, "effective_chunk": auto if chunk is None
                    else chunk, "times_s": ts, "process_cpu_s": cs, "sys_s": [f[0] for f in faults[chunk]],
                    "minor_faults": [f[1] for f in faults[chunk]], "best_s": best, "median_s": median,
                    "rows_per_s": rows / median})
    fixed = [r for r in out if r["chunk_size"] != "auto"] or out
    best_row = min(fixed, key=lambda r: r["median_s"])
    auto_row = next((r for r in out if r["chunk_size"] == "auto"), None)
    return {"ladder": lad.name, "v": lad.events[0], "L": lad.depth, "rows": rows, "auto_chunk": auto, "chunks": out,
            "best_chunk": best_row["chunk_size"],
            "auto_over_best": None if auto_row is None else auto_row["median_s"] / best_row["median_s"],
            "checks": worst}


def _around(auto: int) -> list[int | None]:
    """Chunks compared on the smaller RHMs: the automatic one, and a quarter, half, twice and four times it."""
    return [None, *sorted({max(1, auto // 4), max(1, auto // 2), 2 * auto, 4 * auto})]


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(job(args.child[0], json.loads(args.child[1]))))
        return {}
    wall0 = common.start(args.threads)
    info = common.machine_info(pyro=False)
    cfg = {"v": args.v, "s": args.s, "L": args.L, "seed": args.seed, "n_sample": args.n_sample,
           "n_posterior": args.n_posterior, "threads": args.threads}
    lad = rhm(args.v, args.s, args.L, args.seed)
    print(f"{lad.name}: {lad.total_regions} regions, P_max = {lad.rhm_params.num_data:.3e}; {common.torch_summary()}",
          flush=True)
    rows = phases(cfg, args.repeats)
    print()
    common.print_table(TABLE, rows, TABLE_NOTE)
    chunks = [compare_chunks(lad, args.n_posterior, args.seed, args.chunks, args.repeats, lad.name)]
    for v, L, n in args.ladders:
        small = rhm(v, args.s, L, args.seed)
        auto = _tree_chunk(tree_plan(small, torch.device("cpu")), torch.device("cpu"))
        chunks.append(compare_chunks(small, n, args.seed, _around(auto), args.repeats, small.name))
    print()
    for c in chunks:
        cells = ", ".join(f"{r['chunk_size']}{'=' + str(c['auto_chunk']) if r['chunk_size'] == 'auto' else ''}: "
                          f"{r['median_s']:.2f}" for r in c["chunks"])
        print(f"{c['ladder']}, {c['rows']} rows, median s: {cells}; best {c['best_chunk']}, auto/best "
              f"{c['auto_over_best']:.2f}, accuracy {c['checks']['accuracy']}")
    total_s = common.finish(info, wall0)
    print(f"load average: start {info['loadavg_start']}, end {info['loadavg_end']}")
    common.print_done(total_s, args.out)
    sections = {
        "config": {**cfg, "n_classes": args.v, "m": args.v, "chunk_sizes": args.chunk_sizes,
                   "chunk_ladders": args.chunk_ladders, "repeats": args.repeats, "quick": args.quick,
                   "rate_statistic": "median",
                   "memory_method": "each phase in a fresh subprocess; ru_maxrss of the child after its imports, "
                                    "ladder and inputs (rss_before_mib) and right after the phase's call, before its "
                                    "checks (peak_rss_mib; peak_rss_with_checks_mib after them); added_mib = "
                                    "peak_rss_mib - rss_before_mib, the most over the rounds"},
        "ladder": {"name": lad.name, "regions": lad.total_regions, "positions": lad.rhm_params.num_positions,
                   "log10_p_max": math.log10(lad.rhm_params.num_data), "productions_per_event": args.v},
    }
    result = common.record(NAME, argv, sections, info, rows, {"chunks": chunks}, total_s)
    return common.write_json(args.out, result)


TABLE = (common.Column("phase", 9, "job", align="<"),
         common.Column("rows", 9, "rows"),
         common.Column("median s", 9, "median_s", ".3f"),
         common.Column("best s", 8, "best_s", ".3f"),
         common.Column("rows/s", 11, "rows_per_s", ",.0f"),
         common.Column("peak MiB", 9, "peak_rss_mib", ".0f"),
         common.Column("added MiB", 9, "added_mib", ".0f"),
         common.Column("checks", 0, lambda r: json.dumps(r["checks"]), align="<"))
TABLE_NOTE = ("(each phase in its own subprocess; peak = the child's ru_maxrss, added = peak minus that after its "
              "imports, ladder and inputs)")


if __name__ == "__main__":
    main()
