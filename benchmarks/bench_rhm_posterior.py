"""Benchmark: the exact posterior p(y | x) of a Random Hierarchy Model (``Ladder.rhm``; :mod:`teachers.rhm`) whose
children are drawn jointly, by :func:`inference.posterior.posterior`'s tree sum-product over production factors.

The issue's case: ``Ladder.rhm(v=64, n_classes=64, m=64, s=2, L=5)`` (32 positions, 63 regions, P_max = 64^32
distinct data), p(y | x) exact on 10^4 rows.  The rows are derivations drawn here with torch (a uniform class,
then at every region one production drawn from its event's row of probabilities; the children are its rules), so
the benchmark needs no sampler.  The same code over dense tables would hold m_child^s = 4096 child pairs per
event and region; over productions it holds m K = 4096 (event, production) pairs per region, and its per-example
work is O(sum_l R_l m K s).

Measured: the ladder's build and the draw (once each); then ``posterior(ladder, x)`` on every row, for each
``--chunk-sizes`` entry (``auto``: posterior's own, sized to the CPU caches), timed round robin over
``--repeats`` rounds with ``time.perf_counter`` (medians and best times, process CPU times, load average at the
start and the end).  Checked on every row and recorded: p(y | x) is one-hot on the true class (max |p(y | x) -
onehot(y)| and the accuracy), and log p(x) = -log P_max (each input has exactly one derivation, all of equal
probability under uniform productions).  Peak resident memory (``ru_maxrss``) before the first posterior call
(ladder, rows) and at the end; their difference bounds what the posterior added.

Run it with::

    python benchmarks/bench_rhm_posterior.py               # full run (v = m = n_c = 64, L = 5, 10^4 rows, 3 rounds)
    python benchmarks/bench_rhm_posterior.py --quick       # smoke run (v = m = n_c = 8, L = 3, 256 rows, 1 round)
"""

from __future__ import annotations

import argparse
import math
import resource
import sys
import time
from pathlib import Path

import torch

from inference.posterior import posterior
from teachers.ladder import Ladder

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common beside this script, also when loaded by path
import _common as common

DEFAULT_OUT = common.default_out("rhm_posterior")
QUICK = {"n": 256, "v": 8, "L": 3, "repeats": 1}
FULL = {"n": 10_000, "v": 64, "L": 5, "repeats": 3}
RESULT_KEYS = ("chunk_size", "rows", "repeats", "times_s", "process_cpu_s", "best_s", "median_s", "rows_per_s",
               "max_label_error", "accuracy", "max_log_evidence_error")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=None, help="rows (default 10^4; 256 with --quick)")
    p.add_argument("--v", type=int, default=None, help="vocabulary = classes = synonyms (default 64; 8 --quick)")
    p.add_argument("--s", type=int, default=2, help="patch size (default 2)")
    p.add_argument("--L", type=int, default=None, help="depth (default 5; 3 with --quick)")
    p.add_argument("--seed", type=int, default=0, help="seed of the rules and of the rows (default 0)")
    p.add_argument("--chunk-sizes", default="auto,16,1024",
                   help="comma-separated chunk sizes of posterior ('auto': its own; default 'auto,16,1024')")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds (default 3; 1 with --quick)")
    common.add_threads_arg(p)
    common.add_quick_out_args(p, f"smoke run: v = m = n_c = {QUICK['v']}, L = {QUICK['L']}, N = {QUICK['n']}, "
                                 f"repeats = {QUICK['repeats']}", DEFAULT_OUT)
    args = p.parse_args(argv)
    common.fill_defaults(args, QUICK, FULL)
    common.require_positive(p, args, ("n", "v", "s", "L", "repeats"))
    try:
        args.chunks = [None if c.strip() == "auto" else int(c) for c in args.chunk_sizes.split(",")]
    except ValueError:
        p.error(f"--chunk-sizes: expected comma-separated integers or 'auto', got {args.chunk_sizes!r}")
    if any(c is not None and c < 1 for c in args.chunks):
        p.error("--chunk-sizes must be >= 1")
    return args


def draw_derivations(ladder: Ladder, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` derivations of a ladder whose every level draws its children by productions, top-down with a
    seeded torch generator: leaf events ``(n, R_d)`` int64 and classes ``(n,)``."""
    g = torch.Generator().manual_seed(seed)
    y = torch.multinomial(ladder.prior.expand(n, -1), 1, generator=g).view(n)
    z = y[:, None]  # (n, R_l): the events of level l
    joints = ladder.productions or (None,) * ladder.depth
    for l, joint in enumerate(joints):
        if joint is None:
            raise ValueError(f"draw_derivations: level {l} draws its children independently; every level needs "
                             "productions (an RHM)")
        R = ladder.num_regions[l]
        region = torch.arange(R).expand(n, R)
        probs = joint.region_probs(R)[region, z]  # (n, R_l, K)
        k = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=g).view(n, R)
        z = joint.region_rules(R)[region, z, k].reshape(n, -1)  # (n, R_l * s): each production's children
    return z, y


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    wall0 = common.start(args.threads)
    info = common.machine_info(pyro=False)
    t0 = time.perf_counter()
    lad = Ladder.rhm(args.v, args.v, args.v, args.s, args.L, seed=args.seed)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    leaves, y = draw_derivations(lad, args.n, args.seed + 1)
    x = torch.nn.functional.one_hot(leaves, args.v).to(torch.float64)  # (n, s^L, v)
    draw_s = time.perf_counter() - t0
    params = lad.rhm_params
    log_p_max = math.log(params.num_data)  # a Python int past int64: math.log takes it exactly
    print(f"{lad.name}: {lad.total_regions} regions, P_max = {params.num_data:.3e}; built in {build_s:.2f} s, "
          f"{args.n} rows drawn in {draw_s:.2f} s; {common.torch_summary()}", flush=True)
    rss_before = _peak_rss_mib()
    onehot = torch.nn.functional.one_hot(y, args.v).to(torch.float64)
    checks = {}

    def run(chunk: int | None) -> float:
        t = time.perf_counter()
        post = posterior(lad, x, chunk_size=chunk)
        elapsed = time.perf_counter() - t
        checks[chunk] = ((post.label - onehot).abs().max().item(), (post.predict() == y).double().mean().item(),
                         (post.log_evidence + log_p_max).abs().max().item())
        return elapsed

    runs = [lambda c=c: run(c) for c in args.chunks]
    times, cpu = common.round_robin(runs, args.repeats,
                                    on_round=lambda r: print(f"  round {r + 1}/{args.repeats}", flush=True))
    rss_after = _peak_rss_mib()
    rows = []
    for chunk, ts, cs in zip(args.chunks, times, cpu, strict=True):
        best, median = common.best_median(ts)
        err, acc, lerr = checks[chunk]
        rows.append({"chunk_size": "auto" if chunk is None else chunk, "rows": args.n, "repeats": args.repeats,
                     "times_s": ts, "process_cpu_s": cs, "best_s": best, "median_s": median,
                     "rows_per_s": args.n / median, "max_label_error": err, "accuracy": acc,
                     "max_log_evidence_error": lerr})
    print()
    common.print_table(TABLE, rows, TABLE_NOTE)
    print(f"peak RSS: {rss_before:.0f} MiB before the posterior (ladder, rows), {rss_after:.0f} MiB at the end")
    total_s = common.finish(info, wall0)
    print(f"load average: start {info['loadavg_start']}, end {info['loadavg_end']}")
    common.print_done(total_s, args.out)
    sections = {
        "config": {"n": args.n, "v": args.v, "n_classes": args.v, "m": args.v, "s": args.s, "L": args.L,
                   "seed": args.seed, "chunk_sizes": ["auto" if c is None else c for c in args.chunks],
                   "repeats": args.repeats, "threads": args.threads, "quick": args.quick, "rate_statistic": "median"},
        "ladder": {"name": lad.name, "regions": lad.total_regions, "positions": params.num_positions,
                   "log10_p_max": log_p_max / math.log(10), "productions_per_event": args.v,
                   "build_s": build_s, "draw_s": draw_s},
        "memory": {"peak_rss_mib_before_posterior": rss_before, "peak_rss_mib_end": rss_after,
                   "posterior_added_mib_at_most": rss_after - rss_before},
    }
    result = common.record("rhm_posterior", argv, sections, info, rows, {}, total_s)
    return common.write_json(args.out, result)


TABLE = (common.Column("chunk", 6, "chunk_size"),
         common.Column("rows", 6, "rows"),
         common.Column("median s", 9, "median_s", ".2f"),
         common.Column("best s", 8, "best_s", ".2f"),
         common.Column("rows/s", 8, "rows_per_s", ",.0f"),
         common.Column("accuracy", 8, "accuracy", ".4f"),
         common.Column("max |p(y|x)-1[y]|", 17, "max_label_error", ".1e"),
         common.Column("max |log p(x)+log P_max|", 24, "max_log_evidence_error", ".1e"))
TABLE_NOTE = ("(p(y | x) over every row against one-hot on the true class; log p(x) against -log P_max, each input "
              "having one derivation)")


if __name__ == "__main__":
    main()
