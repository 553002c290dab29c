"""Benchmark: the beta-VQ ReLU (swish, ``smaso.splines.functional.beta_swish``) forward + backward against ``F.silu``.

What is measured, in one process, on ``--n`` float32 elements (default 10^7), each contender doing one
forward pass y = f(u) and one backward pass ``y.backward(g)`` with a fixed upstream gradient g:

1. ``silu``: ``torch.nn.functional.silu`` -- the fused floor (one kernel each way);
2. ``beta-swish``: ``BetaSwish(beta)`` with a fixed beta (default 0.7, eta = 7/3; beta = 1/2 would
   dispatch to ``F.silu`` itself), the project's custom autograd function;
3. ``naive``: ``u * torch.sigmoid(eta * u)`` with plain autograd, the same function written directly;
4. ``beta-swish-learnable``: ``BetaSwish(beta, learnable=True)``, one beta for the layer (its gradient
   is computed too);
5. ``naive-learnable``: ``u * torch.sigmoid(torch.exp(theta) * u)`` with a parameter theta;
6. ``beta-swish-per-channel`` (reference, no target): learnable beta per channel on ``(n / C, C)``;
7. ``beta-swish-compiled`` and ``beta-swish-learnable-compiled`` (unless ``--no-compile``): the same two modules
   under ``torch.compile`` (inductor fuses each direction into one kernel, as ``F.silu`` is; the compilation,
   several seconds, happens in the warm-up and is not timed).

Where the eager module's time goes (issue 26): at 10^7 float32 elements a fresh output-sized tensor costs
about 11 ms of first-touch page faults (40 MB is above glibc's largest mmap threshold, so every such tensor
is mapped afresh), and each direction of both ``F.silu`` and the module allocates one.  The module then makes
three passes each way (v = eta u; sigmoid; times u / silu_backward) where ``F.silu`` makes one, and the
learnable beta adds its gradient's pass and reduction.  That puts the eager module at about 1.1-1.2x (fixed)
and 1.4-1.5x (learnable) of ``F.silu``; fusing the passes is what ``torch.compile`` does.

Each contender is warmed up once, then all are timed in ``--repeats`` round-robin rounds (one run of
each per round, so a change of load on shared cores hits all alike) with ``time.perf_counter``; ratios use
the best (shortest) time and the median is recorded too, as is each run's process CPU time (a wall
time far above the CPU time / threads means the cores were busy elsewhere; the load average at start
and end is recorded).  Targets: fixed beta within 1.15x of ``F.silu``, learnable beta within 1.4x.  All
numbers and machine information go to ``--out`` (JSON, written atomically).

Run it with::

    python benchmarks/bench_activations.py            # full run (n = 1e7, 7 repeats), about a minute on 2 cores
    python benchmarks/bench_activations.py --quick    # smoke run (n = 1e5, 2 repeats)
    python benchmarks/bench_activations.py --record   # full run written to benchmarks/results/activations.json

On shared cores the ratios depend on whether the second core is free: with one core effectively busy
elsewhere (process CPU time close to the wall time for ``silu``) every custom kernel loses ground
against the fused ``F.silu`` (about 1.45x fixed, 2.0x learnable), so record on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from smaso.splines.modules import BetaSwish

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common beside this script, also when loaded by path
import _common as common

DEFAULT_OUT = common.default_out("activations")
QUICK_N, QUICK_REPEATS = 100_000, 2
FIXED_TARGET = 1.15  # beta-swish (fixed beta) time / F.silu time, at most (issue 26)
LEARNABLE_TARGET = 1.4  # beta-swish (learnable beta) time / F.silu time, at most (issue 26)
RESULT_KEYS = ("contender", "description", "n", "repeats", "times_s", "process_cpu_s", "best_s", "median_s",
               "elements_per_s", "x_silu", "x_silu_median", "target")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=None, help="elements per pass (default 10_000_000; 100000 with --quick)")
    p.add_argument("--beta", type=float, default=0.7, help="beta of the swish (default 0.7; in (0, 1))")
    p.add_argument("--channels", type=int, default=64, help="channels of the per-channel row (default 64; 0 skips)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per contender (default 7; 2 with --quick)")
    p.add_argument("--seed", type=int, default=0, help="seed of the input and upstream gradient (default 0)")
    p.add_argument("--no-compile", dest="compile", action="store_false",
                   help="skip the torch.compile rows (they compile for several seconds in the warm-up)")
    common.add_threads_arg(p)
    common.add_quick_out_args(p, f"smoke run: n={QUICK_N}, repeats={QUICK_REPEATS}", DEFAULT_OUT)
    args = p.parse_args(argv)
    common.fill_defaults(args, {"n": QUICK_N, "repeats": QUICK_REPEATS}, {"n": 10_000_000, "repeats": 7})
    common.require_positive(p, args, ("n", "repeats"))
    if not 0.0 < args.beta < 1.0:
        p.error(f"--beta must lie strictly inside (0, 1), got {args.beta}")
    if args.channels < 0:
        p.error("--channels must be >= 0")
    return args


# ---------------------------------------------------------------------- contenders
# Each is a function u -> y on a leaf u that requires grad; the timed step is y = f(u); y.backward(g).

def contenders(beta: float, channels: int, compile: bool = False) -> list[
        tuple[str, str, Callable[[torch.Tensor], torch.Tensor], bool, tuple[int, ...] | None]]:
    eta = beta / (1.0 - beta)
    fixed = BetaSwish(beta)
    learnable = BetaSwish(beta, learnable=True)
    theta = torch.nn.Parameter(torch.tensor(float(np.log(eta))))
    rows = [
        ("silu", "torch.nn.functional.silu (fused floor)", F.silu, True, None),
        ("beta-swish", f"smaso BetaSwish({beta:g}), fixed beta, custom autograd function", fixed, True, None),
        ("naive", "u * torch.sigmoid(eta * u), plain autograd", lambda u: u * torch.sigmoid(eta * u), True, None),
        ("beta-swish-learnable", f"smaso BetaSwish({beta:g}, learnable=True), one beta per layer", learnable,
         True, None),
        ("naive-learnable", "u * torch.sigmoid(torch.exp(theta) * u), theta a parameter, plain autograd",
         lambda u: u * torch.sigmoid(torch.exp(theta) * u), True, None),
    ]
    compiled = [_compiled(BetaSwish(beta)), _compiled(BetaSwish(beta, learnable=True))] if compile else []
    if compiled and all(m is not None for m in compiled):
        rows += [("beta-swish-compiled", f"torch.compile(BetaSwish({beta:g})), fixed beta", compiled[0], False, None),
                 ("beta-swish-learnable-compiled", f"torch.compile(BetaSwish({beta:g}, learnable=True))", compiled[1],
                  False, None)]
    if channels:
        per_channel = BetaSwish(beta, learnable=True, num_channels=channels)
        rows.append(("beta-swish-per-channel", f"BetaSwish({beta:g}, learnable=True, num_channels={channels}) "
                     f"on (n / {channels}, {channels})", per_channel, False, (channels,)))
    return rows


def _compiled(module: torch.nn.Module) -> torch.nn.Module | None:
    """``torch.compile(module)`` (static shapes), or None with a printed reason where this machine cannot compile
    (inductor needs a C++ compiler on CPU): the benchmark then runs without the compiled rows."""
    compiled = torch.compile(module, dynamic=False)
    try:
        u = torch.randn(8, requires_grad=True)
        compiled(u).sum().backward()
    except Exception as e:  # any backend failure means: no compiled rows here
        print(f"  torch.compile unavailable here, compiled rows skipped: {type(e).__name__}: {e}"[:300])
        return None
    return compiled


def make_step(fn: Callable[[torch.Tensor], torch.Tensor], u0: torch.Tensor, g0: torch.Tensor,
              channels: tuple[int, ...] | None) -> tuple[Callable[[], float], int]:
    """A timed step (one forward + backward, seconds) on the first n // C * C elements, and that count."""
    n = u0.numel()
    m = n // channels[0] * channels[0] if channels else n
    shape = (m // channels[0], channels[0]) if channels else (m,)
    u = u0[:m].reshape(shape).clone().requires_grad_()
    g = g0[:m].reshape(shape)

    def step() -> float:
        u.grad = None
        t0 = time.perf_counter()
        y = fn(u)
        y.backward(g)
        dt = time.perf_counter() - t0
        del y
        return dt

    return step, m


def measure_all(specs: list[tuple], u0: torch.Tensor, g0: torch.Tensor, repeats: int) -> list[dict]:
    """Warm each contender up once, then time ``repeats`` rounds in which every contender runs once
    (``_common.round_robin``)."""
    steps = []
    for name, description, fn, _, channels in specs:
        step, m = make_step(fn, u0, g0, channels)
        print(f"  {name}: warm-up on {m} elements", flush=True)
        step()
        steps.append((name, description, step, m))
    print(f"  {repeats} round(s) of forward + backward, contenders in turn ...", flush=True)
    all_times, all_cpu = common.round_robin([step for _, _, step, _ in steps], repeats)
    rows = []
    for (name, description, _, m), times, cpu in zip(steps, all_times, all_cpu, strict=True):
        best, median = common.best_median(times)
        rows.append({"contender": name, "description": description, "n": m, "repeats": repeats,
                     "times_s": times, "process_cpu_s": cpu, "best_s": best, "median_s": median,
                     "elements_per_s": m / best, "x_silu": None, "x_silu_median": None, "target": False})
    return rows


# ---------------------------------------------------------------------- reporting
TABLE = (common.Column("contender", 24, "contender", align="<"),
         common.Column("n", 10, "n"),
         common.Column("best s", 9, "best_s", ".4f"),
         common.Column("median s", 9, "median_s", ".4f"),
         common.Column("elements/s", 12, "elements_per_s", ".4g"),
         common.Column("x silu", 8, "x_silu", ".2f"))
TABLE_NOTE = "(forward + backward; seconds = best of the repeats; x silu = time / F.silu's time)"


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    wall0 = common.start(args.threads)
    gen = torch.Generator().manual_seed(args.seed)
    u0 = 4 * torch.randn(args.n, generator=gen)
    g0 = torch.randn(args.n, generator=gen)
    eta = args.beta / (1 - args.beta)
    print(f"beta-VQ ReLU (swish) forward + backward: n = {args.n} float32 elements, beta = {args.beta:g} "
          f"(eta = {eta:.4g}), {args.repeats} repeat(s); {common.torch_summary()}")
    info = common.machine_info(pyro=False)

    rows = measure_all(contenders(args.beta, args.channels, args.compile), u0, g0, args.repeats)
    targeted = {name for name, _, _, t, _ in contenders(args.beta, 0) if t}
    by_name = {r["contender"]: r for r in rows}
    silu = by_name["silu"]
    for r in rows:
        r["x_silu"] = r["best_s"] / silu["best_s"] * (silu["n"] / r["n"])
        r["x_silu_median"] = r["median_s"] / silu["median_s"] * (silu["n"] / r["n"])
        r["target"] = r["contender"] in targeted

    def ratio(a: str, b: str, key: str = "best_s") -> float:
        return by_name[a][key] / by_name[b][key]

    targets = {
        "fixed_vs_silu": {"value": ratio("beta-swish", "silu"), "value_median": ratio("beta-swish", "silu",
                                                                                         "median_s"),
                          "target": f"<= {FIXED_TARGET:g}", "pass": ratio("beta-swish", "silu") <= FIXED_TARGET},
        "learnable_vs_silu": {"value": ratio("beta-swish-learnable", "silu"),
                              "value_median": ratio("beta-swish-learnable", "silu", "median_s"),
                              "target": f"<= {LEARNABLE_TARGET:g}",
                              "pass": ratio("beta-swish-learnable", "silu") <= LEARNABLE_TARGET},
    }
    for key, name, target in (("fixed_compiled_vs_silu", "beta-swish-compiled", FIXED_TARGET),
                              ("learnable_compiled_vs_silu", "beta-swish-learnable-compiled", LEARNABLE_TARGET)):
        if name in by_name:
            targets[key] = {"value": ratio(name, "silu"), "value_median": ratio(name, "silu", "median_s"),
                            "target": f"<= {target:g}", "pass": ratio(name, "silu") <= target}
    speedups = {
        "fixed_vs_naive": ratio("naive", "beta-swish"),
        "learnable_vs_naive": ratio("naive-learnable", "beta-swish-learnable"),
    }

    print()
    common.print_table(TABLE, rows, TABLE_NOTE)
    print()
    for key, label in (("fixed_vs_silu", "fixed beta vs F.silu"), ("learnable_vs_silu", "learnable beta vs F.silu"),
                       ("fixed_compiled_vs_silu", "fixed beta, torch.compile"),
                       ("learnable_compiled_vs_silu", "learnable, torch.compile")):
        if key not in targets:
            continue
        t = targets[key]
        print(f"{label:<28} {t['value']:6.2f}x  (median {t['value_median']:.2f}x)  target {t['target']}x  "
              f"{'PASS' if t['pass'] else 'FAIL'}")
    print(f"{'speedup over naive (fixed)':<28} {speedups['fixed_vs_naive']:6.2f}x")
    print(f"{'speedup over naive (learn.)':<28} {speedups['learnable_vs_naive']:6.2f}x")
    total_s = common.finish(info, wall0)
    print(f"\nload average {info['loadavg_start'][0]:.2f} -> {info['loadavg_end'][0]:.2f} on {os.cpu_count()} "
          f"CPU(s); total wall time {total_s:.1f} s; results -> {args.out}")

    sections = {
        "config": {"n": args.n, "beta": args.beta, "eta": eta, "channels": args.channels, "repeats": args.repeats,
                   "seed": args.seed, "threads": args.threads, "quick": args.quick, "dtype": "float32",
                   "compile": args.compile,
                   "rate_statistic": "best"},
    }
    result = common.record("activations", argv, sections, info, rows, {"targets": targets, "speedups": speedups},
                           total_s)
    return common.write_json(args.out, result)


if __name__ == "__main__":
    main()
