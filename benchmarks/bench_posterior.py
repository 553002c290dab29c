"""Benchmark: the one exact posterior (``inference.posterior.posterior``) against the plain scaled-product
sum-product a user writes and against the log-space tree code it replaced.

What is measured, in one process, on uniform trees ``Ladder.random(depth, branching, events, mode=mode,
seed=seed)`` (the issue's ladder: depth 4, branching 4, 16 events, top-down, 341 regions), per case:

- ``topdown-onehot``: that ladder with one-hot leaves;
- ``topdown-gaussian``: the same with Gaussian leaves around one-hot means (``--sigma``);
- ``bottomup-onehot``: the bottom-up ladder of the same shape with ``--bottomup-events`` events per region
  (16 would mean 16^4 child configurations per region).

Contenders (each returns log p(x) and p(y | x)):

1. ``posterior``: ``inference.posterior.posterior(ladder, x)`` (the tree path: scaled sum-product, chunked);
2. ``plain``: :func:`plain_posterior` below, the ~15-line scaled-product sum-product in plain torch on the whole
   batch (the best plain code: one ``bmm`` / ``scatter_add`` per level, rescaled to max 1) -- the baseline;
3. ``reference``: today's code before the merge, ``benchmarks/reference/ladder_posterior.py`` (log space,
   ``logsumexp`` everywhere).

Each contender runs in two settings: ``batched`` (one call on ``--n`` queries) and ``single`` (``--single``
calls of one query each, one at a time).  Times per query compare the settings.  Each contender is warmed up
once; then every run of a case is timed in turn (round robin, ``--repeats`` rounds) with ``time.perf_counter``,
and the ratios use the medians (the best times are recorded too, as are the process CPU times and the load
average at the start and the end).  Before timing, the contenders' log p(x) and p(y | x) are compared (max
absolute differences in the JSON).

Targets (the issue's "done when"): ``posterior`` at most 2x the plain baseline per query, batched and single,
in every case; and on the issue's ladder (``topdown-onehot``), batched, about 15x faster than the reference.

Run it with::

    python benchmarks/bench_posterior.py                 # full run (N = 4096, 256 single queries, 5 repeats)
    python benchmarks/bench_posterior.py --threads 1     # one thread
    python benchmarks/bench_posterior.py --quick         # smoke run (N = 256, 4 single queries, 1 repeat)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from inference.posterior import posterior
from teachers.emission import GaussianEmission
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common beside this script, also when loaded by path
import _common as common
from reference.ladder_posterior import ladder_posterior as reference_posterior

DEFAULT_OUT = common.default_out("posterior")
QUICK = {"n": 256, "single": 4, "repeats": 1}
FULL = {"n": 4096, "single": 256, "repeats": 5}
PLAIN_TARGET = 2.0  # posterior's time per query over the plain baseline's, at most
REFERENCE_TARGET = 15.0  # the reference's time per query over posterior's on the ladder, batched, about
CASES = (("topdown-onehot", "topdown", "onehot"), ("topdown-gaussian", "topdown", "gaussian"),
         ("bottomup-onehot", "bottomup", "onehot"))
CONTENDERS = ("posterior", "plain", "reference")
SETTINGS = ("batched", "single")
RESULT_KEYS = ("case", "mode", "emission", "contender", "setting", "queries", "repeats", "times_s", "process_cpu_s",
               "best_s", "median_s", "per_query_s", "per_query_s_best", "x_plain", "x_plain_best",
               "speedup_vs_reference", "batch_gain")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=None, help="queries of the batched setting (default 4096; 256 --quick)")
    p.add_argument("--single", type=int, default=None,
                   help="one-query calls per timed run of the single setting (default 256; 4 with --quick)")
    p.add_argument("--depth", type=int, default=4, help="levels below the root (default 4)")
    p.add_argument("--branching", type=int, default=4, help="children per region (default 4)")
    p.add_argument("--events", type=int, default=16, help="events per region, top-down (default 16)")
    p.add_argument("--bottomup-events", type=int, default=4, help="events per region, bottom-up (default 4)")
    p.add_argument("--sigma", type=float, default=0.5, help="noise of the Gaussian leaves (default 0.5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the tables and of the sample (default 0)")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds (default 5; 1 with --quick)")
    common.add_threads_arg(p)
    common.add_quick_out_args(p, f"smoke run: N={QUICK['n']}, single={QUICK['single']}, repeats={QUICK['repeats']}",
                              DEFAULT_OUT)
    args = p.parse_args(argv)
    common.fill_defaults(args, QUICK, FULL)
    common.require_positive(p, args, ("n", "single", "repeats", "depth", "branching", "events", "bottomup_events"))
    if args.sigma <= 0:
        p.error("--sigma must be > 0")
    return args


# ---------------------------------------------------------------------- the plain baseline
def plain_posterior(ladder: Ladder, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(x) ``(N,)`` and p(y | x) ``(N, m_0)`` of a uniform tree by scaled-product sum-product in plain torch."""
    ll = ladder.emission.log_likelihood(x).double()  # (N, R_d, m): log p(x_r | z_r)
    c = ll.amax(-1, keepdim=True)
    phi, log_z = (ll - c).exp().transpose(0, 1), c.sum((1, 2))  # (R_d, N, m), max 1 per leaf and example
    if ladder.mode == "bottomup":
        phi = phi * ladder.leaf_prior[:, None]
    for l in range(ladder.depth - 1, -1, -1):
        R, b, n = ladder.num_regions[l], ladder.branching[l], phi.shape[1]
        if ladder.mode == "topdown":  # lambda_a(j) = prod_children sum_k P(k | j) phi_c(k)
            lam = torch.bmm(phi, ladder.tables[l].transpose(1, 2)).reshape(R, b, n, -1).prod(1)
        else:  # lambda_a(j) = sum over child configurations k with lookup(k) = j of prod_i phi_i(k_i)
            ch = phi.reshape(R, b, n, -1)
            conf = ch[:, 0]
            for i in range(1, b):
                conf = (conf[..., :, None] * ch[:, i, :, None, :]).flatten(-2)
            lam = torch.zeros(R, n, ladder.events[l], dtype=torch.float64).scatter_add_(
                -1, ladder.lookup[l][:, None].expand(-1, n, -1), conf)
        s = lam.amax(-1, keepdim=True)
        phi, log_z = lam / s, log_z + s.log().sum((0, 2))
    joint = phi[0] * ladder.prior if ladder.mode == "topdown" else phi[0]
    return log_z + joint.sum(-1).log(), joint / joint.sum(-1, keepdim=True)


# ---------------------------------------------------------------------- contenders
def _call(name: str, ladder: Ladder) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    if name == "posterior":
        def run(x):
            post = posterior(ladder, x)
            return post.log_evidence, post.label
    elif name == "plain":
        def run(x):
            return plain_posterior(ladder, x)
    else:
        def run(x):
            post = reference_posterior(ladder, x)
            return post.log_evidence, post.label
    return run


def _timed(fn: Callable, x: torch.Tensor, setting: str, single: int) -> Callable[[], float]:
    """One timed run: the whole batch in one call, or ``single`` calls of one query each."""
    def run() -> float:
        t0 = time.perf_counter()
        if setting == "batched":
            fn(x)
        else:
            for i in range(single):
                fn(x[i: i + 1])
        return time.perf_counter() - t0
    return run


def _ladder(mode: str, emission: str, args: argparse.Namespace) -> Ladder:
    events = args.events if mode == "topdown" else args.bottomup_events
    lad = Ladder.random(depth=args.depth, branching=args.branching, events=events, mode=mode, seed=args.seed)
    if emission == "gaussian":
        lad = lad.with_emission(GaussianEmission.around_one_hot(lad.num_regions[-1], lad.events[-1], args.sigma))
    return lad


def measure_case(case: str, mode: str, emission: str, args: argparse.Namespace) -> tuple[list[dict], dict]:
    """Check the contenders agree, warm them up, then time every (contender, setting) round robin."""
    lad = _ladder(mode, emission, args)
    x = sample_ladder(lad, max(args.n, args.single), seed=args.seed + 1).inputs(dtype=torch.float64)
    xb = x[: args.n]
    fns = {name: _call(name, lad) for name in CONTENDERS}
    outs = {name: fn(xb) for name, fn in fns.items()}  # also the warm-up
    agree = {f"{name}_vs_reference": {"log_evidence": (outs[name][0] - outs["reference"][0]).abs().max().item(),
                                      "label": (outs[name][1] - outs["reference"][1]).abs().max().item()}
             for name in ("posterior", "plain")}
    keys = [(name, setting) for name in CONTENDERS for setting in SETTINGS]
    runs = [_timed(fns[name], xb, setting, args.single) for name, setting in keys]
    print(f"{case}: {lad.total_regions} regions, N = {args.n} batched, {args.single} single; "
          f"max |log p(x) - reference| = {agree['posterior_vs_reference']['log_evidence']:.1e}", flush=True)
    times, cpu = common.round_robin(runs, args.repeats,
                                    on_round=lambda r: print(f"  round {r + 1}/{args.repeats}", flush=True))
    rows = []
    for (name, setting), ts, cs in zip(keys, times, cpu, strict=True):
        q = args.n if setting == "batched" else args.single
        best, median = common.best_median(ts)
        rows.append({"case": case, "mode": mode, "emission": emission, "contender": name, "setting": setting,
                     "queries": q, "repeats": args.repeats, "times_s": ts, "process_cpu_s": cs, "best_s": best,
                     "median_s": median, "per_query_s": median / q, "per_query_s_best": best / q})
    by = {(r["contender"], r["setting"]): r for r in rows}
    for r in rows:
        plain, ref = by[("plain", r["setting"])], by[("reference", r["setting"])]
        r["x_plain"] = r["per_query_s"] / plain["per_query_s"]
        r["x_plain_best"] = r["per_query_s_best"] / plain["per_query_s_best"]
        r["speedup_vs_reference"] = ref["per_query_s"] / r["per_query_s"]
        r["batch_gain"] = by[(r["contender"], "single")]["per_query_s"] / by[(r["contender"], "batched")]["per_query_s"]
    return rows, {"regions": lad.total_regions, "events": list(lad.events), "agreement": agree}


# ---------------------------------------------------------------------- reporting
TABLE = (common.Column("case", 17, "case", align="<"),
         common.Column("contender", 10, "contender", align="<"),
         common.Column("setting", 8, "setting", align="<"),
         common.Column("queries", 7, "queries"),
         common.Column("ms/query", 9, lambda r: 1e3 * r["per_query_s"], ".4f"),
         common.Column("x plain", 8, "x_plain", ".2f"),
         common.Column("x faster than ref", 18, "speedup_vs_reference", ".1f"),
         common.Column("batch gain", 10, "batch_gain", ".1f"))
TABLE_NOTE = ("(ms/query = median time / queries; x plain = per-query time over the plain baseline's; x faster "
              "than ref = the reference's per-query time over the contender's; batch gain = single per-query time "
              "over batched)")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    wall0 = common.start(args.threads)
    print(f"N = {args.n} batched, {args.single} single queries, {args.repeats} round(s); {common.torch_summary()}")
    info = common.machine_info()
    rows, ladders = [], {}
    for case, mode, emission in CASES:
        r, lad = measure_case(case, mode, emission, args)
        rows += r
        ladders[case] = lad
    mine = {(r["case"], r["setting"]): r for r in rows if r["contender"] == "posterior"}
    targets = {}
    for case, _, _ in CASES:
        for setting in SETTINGS:
            row = mine[(case, setting)]
            targets[f"posterior_vs_plain_{case}_{setting}"] = {
                "value": row["x_plain"], "value_best": row["x_plain_best"], "target": f"<= {PLAIN_TARGET:g}",
                "pass": row["x_plain"] <= PLAIN_TARGET}
    row = mine[(CASES[0][0], "batched")]
    targets["speedup_vs_reference_topdown-onehot_batched"] = {
        "value": row["speedup_vs_reference"], "target": f">= {REFERENCE_TARGET:g} (about)",
        "pass": row["speedup_vs_reference"] >= REFERENCE_TARGET}
    print()
    common.print_table(TABLE, rows, TABLE_NOTE)
    print()
    for key, t in targets.items():
        print(f"{key:<50} {t['value']:8.2f}x  target {t['target']}x  {'PASS' if t['pass'] else 'FAIL'}")
    total_s = common.finish(info, wall0)
    print(f"load average: start {info['loadavg_start']}, end {info['loadavg_end']}")
    common.print_done(total_s, args.out)
    sections = {
        "config": {"n": args.n, "single": args.single, "depth": args.depth, "branching": args.branching,
                   "events": args.events, "bottomup_events": args.bottomup_events, "sigma": args.sigma,
                   "seed": args.seed, "repeats": args.repeats, "threads": args.threads, "quick": args.quick,
                   "rate_statistic": "median"},
        "ladders": ladders,
        "median_of_x_plain": statistics.median(r["x_plain"] for r in rows if r["contender"] == "posterior"),
    }
    result = common.record("posterior", argv, sections, info, rows, {"targets": targets}, total_s)
    return common.write_json(args.out, result)


if __name__ == "__main__":
    main()
