"""Datasets larger than memory, and the Dask engine (issue 12): memory against N, engine scaling, contention.

Sections (each in fresh subprocesses, so every peak RSS is that of one job alone):

- ``memory``: peak resident memory and examples/s of sampling into a chunked store, of ``inspect``
  (streaming event counts and statistics) and of a fixed student's statistics pass, against N on the
  341-region ladder (depth 4, branching 4, m = 16); and the in-memory path (``sample_ladder`` + counts)
  at ``--baseline-n`` for comparison.
- ``engine``: sampling throughput of one process at one thread against Dask with 1 and 2 worker
  processes of one thread each, on ``Ladder.default()`` (15 regions) and the 341-region ladder at every N of
  ``--engine-ns``: the cluster's start-up apart from the sampling on the warm cluster, the stores' bytes
  compared, the per-task overhead, and the crossover (:func:`crossover`: the N, and N x regions, from which
  two workers finish first, warm and counting the start-up).
- ``contention``: the sampler with 1 and 2 torch threads, on a quiet machine and with ``--busy`` busy
  processes competing for the cores.
- ``main_job``: ``compare_student`` streaming over a store of ``--main-n`` examples (evaluation over
  every example, sharded on a :class:`~teachers.engine.ProcessEngine` of ``--main-workers`` processes of one
  thread; 1: in the job's own process): time, examples/s against the issue's 40k target, CPU seconds of the job
  and its workers, and peak memory of each.  ``--main-n 1e6`` records it in minutes.  Before it, one evaluation
  pass alone over ``--pass-n`` rows per contender of :data:`EVAL_PASSES` (float64 or float32 batch sums, with or
  without the jackknife's 10 row groups, on 1 or 2 processes): where the job's time goes.

    python3 benchmarks/bench_out_of_core.py                       # everything (long: N up to 1e8)
    python3 benchmarks/bench_out_of_core.py --sections engine contention --quick
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common
import torch

LADDER = {"depth": 4, "branching": 4, "events": 16, "seed": 0}
SECTIONS = ("memory", "engine", "contention", "main_job")


def _ladder(emission: str = "onehot", kind: str = "random"):
    """The 341-region ladder (``kind="random"``, :data:`LADDER`), or ``Ladder.default()`` (``"default"``, 15
    regions), the two ends of the engine section's crossover."""
    from teachers import Ladder

    return Ladder.default() if kind == "default" else Ladder.random(**LADDER, emission=emission)


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------------- child jobs (one per subprocess)
def _child(job: str, path: str, n: int, threads: int, extra: dict) -> dict:
    torch.set_num_threads(threads)
    rss0 = _peak_rss_mib()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = usage.ru_utime + usage.ru_stime
    t0 = time.perf_counter()
    # child processes' CPU seconds not the job's: whatever ran before it (an import's helper processes) and, below,
    # a compilation's, timed apart
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    kids0 = kids.ru_utime + kids.ru_stime
    if job == "sample":
        from teachers.store import sample_to_store

        sample_to_store(_ladder(kind=extra.get("ladder", "random")), n, path, seed=0,
                        chunk_rows=extra.get("chunk_rows", 65536), progress=False)
    elif job == "sample_memory":
        from teachers.sampling import sample_ladder
        from teachers.statistics import empirical_statistics

        s = sample_ladder(_ladder(), n, seed=0, progress=False)
        empirical_statistics(s.ladder, s.z)
    elif job == "inspect":
        from smaso.reports import inspect_report
        from teachers.store_reader import open_dataset

        inspect_report(open_dataset(path), bayes_n=2000)
    elif job == "statistics":
        from smaso.student.frequency import accumulate_statistics
        from smaso.student.network import LadderStudent
        from teachers.store_reader import open_dataset

        data = open_dataset(path)
        student = LadderStudent(data.ladder, 16, dtype=torch.float32, seed=0)
        accumulate_statistics(student, data, batch_size=1024, dtype=torch.float64)
    elif job == "main_job":
        from smaso.student.compare import compare_student
        from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
        from teachers.engine import ProcessEngine
        from teachers.store_reader import open_dataset

        workers = extra.get("workers", 1)
        engine = ProcessEngine(workers) if workers > 1 else None
        try:
            # (the memory of streaming every row; the student and evaluation of the recorded runs: no readout, no
            # alignment, which issue 37 made the defaults)
            run = compare_student(open_dataset(path), StudentConfig(width=16, readout=None, dtype=torch.float32),
                                  TrainingConfig(steps=extra["steps"], lr=0.5, batch_size=1024),
                                  EvaluationConfig(eval_every=extra["steps"], eval_examples=None,
                                                   eval_batch_size=1024, held_out=False, alignment=False),
                                  engine=engine)
        finally:
            if engine is not None:
                engine.close()  # the workers joined: their CPU time and peak memory are in RUSAGE_CHILDREN
        extra["final_accuracy"] = run.final()["accuracy"]
        extra["checkpoint_seconds"] = run.seconds
    elif job == "eval_pass":
        from smaso.student.frequency import accumulate_statistics
        from smaso.student.network import LadderStudent
        from teachers.engine import ProcessEngine
        from teachers.store_reader import open_dataset

        # one of the main job's evaluations alone (its student at initialisation): the batch sums' dtype, the
        # jackknife's row groups and the processes it is sharded on, one at a time
        data = open_dataset(path)
        student = LadderStudent(data.ladder, 16, dtype=torch.float32, seed=0)
        workers, kernel = extra["workers"], extra["kernel"]
        kw = {"batch_size": 1024, "dtype": getattr(torch, extra["dtype"]), "groups": extra["groups"], "kernel": kernel}
        if kernel == "compiled":
            # this process's compilations timed apart (steady state is the pass's measure): one grouped batch of
            # the same shapes first, then the clocks restart; worker processes compile inside the pass
            from teachers import sample_ladder

            tc = time.perf_counter()
            accumulate_statistics(student, sample_ladder(data.ladder, 1024 * 4, seed=0), **kw)
            extra["compile_s"] = time.perf_counter() - tc
            usage, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu0, t0 = usage.ru_utime + usage.ru_stime, time.perf_counter()
            kids0 = extra["compile_child_cpu_s"] = kids.ru_utime + kids.ru_stime  # (the C++ compiler's processes)
        engine = ProcessEngine(workers) if workers > 1 else None
        try:
            accumulate_statistics(student, data, engine=engine, **kw)
        finally:
            if engine is not None:
                engine.close()
    else:
        raise ValueError(f"job: unknown {job!r}")
    seconds = time.perf_counter() - t0
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    if job in ("main_job", "eval_pass"):  # CPU seconds (a busy machine's wall clock overstates the job; these do not)
        extra["cpu_s"] = me.ru_utime + me.ru_stime - cpu0
        extra["worker_cpu_s"] = kids.ru_utime + kids.ru_stime - kids0
        extra["worker_peak_rss_mib"] = kids.ru_maxrss / 1024
    return {"job": job, "n": n, "threads": threads, "seconds": seconds, "examples_per_s": n / seconds,
            "peak_rss_mib": _peak_rss_mib(), "rss_before_mib": rss0, **extra}


def _run_child(job: str, path: Path | str, n: int, threads: int = 1, **extra) -> dict:
    cmd = [sys.executable, __file__, "--child", job, str(path), str(n), str(threads), json.dumps(extra)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"child {job} n={n} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


# ---------------------------------------------------------------------- sections
def bench_memory(ns: list[int], baseline_n: int, stats_max_n: int, work: Path) -> list[dict]:
    rows = []
    for n in ns:
        path = work / f"m{n}.zarr"
        r = _run_child("sample", path, n)
        r["bytes_per_example"] = _du(path) / n
        rows.append(r)
        print(f"sample     N={n:>11,}: {r['seconds']:8.1f} s {r['examples_per_s']:>11,.0f} ex/s  peak RSS "
              f"{r['peak_rss_mib']:7.0f} MiB  {r['bytes_per_example']:.0f} B/ex on disk", flush=True)
        r = _run_child("inspect", path, n)
        rows.append(r)
        print(f"inspect    N={n:>11,}: {r['seconds']:8.1f} s {r['examples_per_s']:>11,.0f} ex/s  peak RSS "
              f"{r['peak_rss_mib']:7.0f} MiB", flush=True)
        if n <= stats_max_n:
            r = _run_child("statistics", path, n)
            rows.append(r)
            print(f"statistics N={n:>11,}: {r['seconds']:8.1f} s {r['examples_per_s']:>11,.0f} ex/s  peak RSS "
                  f"{r['peak_rss_mib']:7.0f} MiB", flush=True)
        shutil.rmtree(path)
    r = _run_child("sample_memory", "-", baseline_n)
    rows.append(r)
    print(f"in-memory sample + counts N={baseline_n:,}: {r['examples_per_s']:,.0f} ex/s, peak RSS "
          f"{r['peak_rss_mib']:.0f} MiB", flush=True)
    return rows


def _noop(c: int, ladder) -> int:
    return c


def _dask_sample(n: int, path: Path, workers: int, chunk_rows: int, kind: str) -> dict:
    """One Dask run: the cluster's start-up (``DaskEngine`` entered, workers warm: imports done) apart from
    the sampling on the warm cluster, and the engine's own seconds per task (as many empty tasks, with the
    same scattered ladder, on the same cluster)."""
    from teachers.engine import DaskEngine
    from teachers.store import sample_to_store

    t0 = time.perf_counter()
    with DaskEngine(workers=workers, threads_per_worker=1) as engine:
        lad = _ladder(kind=kind)
        engine.map(_noop, list(range(workers)), lad)  # workers warm (imports) before the clock starts
        startup = time.perf_counter() - t0
        t0 = time.perf_counter()
        sample_to_store(lad, n, path, seed=0, chunk_rows=chunk_rows, engine=engine, progress=False)
        sec = time.perf_counter() - t0
        tasks = -(-n // chunk_rows)
        t0 = time.perf_counter()
        engine.map(_noop, list(range(tasks)), lad)
        return {"startup_s": startup, "seconds": sec, "empty_task_s": (time.perf_counter() - t0) / tasks}


def _chunk_sums(path: Path) -> dict:
    return json.loads((Path(path) / "zarr.json").read_text())["attributes"]["chunk_sha256"]


#: The engine section's ladders: (kind, regions).
ENGINE_LADDERS = (("default", 15), ("random", 341))


def bench_engine(ns: list[int], chunk_rows: int, work: Path, workers: tuple[int, ...] = (1, 2)) -> list[dict]:
    """Sampling on one process (1 thread) against Dask with 1 and 2 workers of 1 thread, on both ladders of
    :data:`ENGINE_LADDERS` and every N of ``ns``; the stores' bytes compared.  A row per (ladder, N,
    contender); the Dask rows carry the cluster's start-up apart from the sampling on the warm cluster."""
    rows = []
    for kind, regions in ENGINE_LADDERS:
        for n in ns:
            serial_path = work / "e_serial.zarr"
            serial = _run_child("sample", serial_path, n, chunk_rows=chunk_rows, ladder=kind)
            base = {"ladder": kind, "regions": regions, "n": n, "tasks": -(-n // chunk_rows)}
            rows.append({**base, "contender": "one process, 1 thread", "seconds": serial["seconds"],
                         "examples_per_s": serial["examples_per_s"]})
            ref = _chunk_sums(serial_path)
            for w in workers:
                path = work / f"e_dask{w}.zarr"
                r = _dask_sample(n, path, w, chunk_rows, kind)
                rows.append({**base, "contender": f"dask, {w} worker(s) x 1 thread", **r,
                             "examples_per_s": n / r["seconds"], "same_bytes": _chunk_sums(path) == ref,
                             "x_one_thread": serial["seconds"] / r["seconds"],
                             "x_one_thread_with_startup": serial["seconds"] / (r["seconds"] + r["startup_s"]),
                             "extra_s_per_task": (r["seconds"] * w - serial["seconds"]) / base["tasks"]})
                shutil.rmtree(path)
            shutil.rmtree(serial_path)
            for r in rows[-1 - len(workers):]:
                print(f"{kind:>7} ({regions:3d} regions) N={n:>10,} {r['contender']:<28} {r['seconds']:7.2f} s "
                      f"{r['examples_per_s']:>11,.0f} ex/s {r.get('x_one_thread', 1.0):5.2f}x"
                      + (f" ({r['x_one_thread_with_startup']:.2f}x with the {r['startup_s']:.1f} s start-up), "
                         f"same bytes: {r['same_bytes']}, empty task {1e3 * r['empty_task_s']:.1f} ms"
                         if "startup_s" in r else ""), flush=True)
    return rows


def crossover(rows: list[dict], workers: int = 2) -> list[dict]:
    """Per ladder, from its largest N: the rows per second of one process (r_1) and of ``workers`` warm
    workers (r_w), and the N from which the workers finish first, on a warm cluster (the fixed cost of a job
    on it, a = its seconds - N / r_w, over 1 / r_1 - 1 / r_w) and counting the cluster's start-up s
    ((a + s) / (1 / r_1 - 1 / r_w)); None where the workers are not faster per row.  ``n_x_regions``: the
    same crossovers in rows x regions, the unit the sampler's work scales with; ``serial_s``: as the seconds the
    one-process job takes at the crossover (the rule a user can apply: Dask pays off above it)."""
    out = []
    for kind, regions in ENGINE_LADDERS:
        mine = [r for r in rows if r.get("ladder") == kind]
        if not mine:
            continue
        n = max(r["n"] for r in mine)
        serial = next(r for r in mine if r["n"] == n and r["contender"].startswith("one process"))
        dask = next(r for r in mine if r["n"] == n and r["contender"].startswith(f"dask, {workers} "))
        r1, rw = serial["examples_per_s"], n / dask["seconds"]
        # the fixed cost of one job on the warm cluster: its time beyond the per-row rate of the larger N's
        small = [r for r in mine if r["contender"] == dask["contender"] and r["n"] < n]
        per_row = (dask["seconds"] - small[0]["seconds"]) / (n - small[0]["n"]) if small else 1 / rw
        fixed = max(dask["seconds"] - n * per_row, 0.0)
        gain = 1 / r1 - per_row
        warm = fixed / gain if gain > 0 else None
        cold = (fixed + dask["startup_s"]) / gain if gain > 0 else None
        out.append({"ladder": kind, "regions": regions, "workers": workers, "n": n,
                    "speedup_warm": serial["seconds"] / dask["seconds"],
                    "speedup_with_startup": serial["seconds"] / (dask["seconds"] + dask["startup_s"]),
                    "startup_s": dask["startup_s"], "fixed_s_per_job": fixed, "s_per_row_serial": 1 / r1,
                    "s_per_row_workers": per_row, "crossover_n_warm": warm, "crossover_n_with_startup": cold,
                    "crossover_n_x_regions_warm": None if warm is None else warm * regions,
                    "crossover_n_x_regions_with_startup": None if cold is None else cold * regions,
                    # the same crossovers as the one-process job's seconds: what a user can judge a job by
                    "crossover_serial_s_warm": None if warm is None else warm / r1,
                    "crossover_serial_s_with_startup": None if cold is None else cold / r1})
    return out


def _busy(k: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(k)]


def bench_contention(n: int, busy: int, work: Path) -> list[dict]:
    rows = []
    for label, k in (("quiet", 0), (f"{busy} busy processes", busy)):
        procs = _busy(k)
        try:
            time.sleep(0.5 if k else 0)
            for threads in (1, 2):
                r = _run_child("sample", work / "c.zarr", n, threads)
                shutil.rmtree(work / "c.zarr")
                rows.append({"machine": label, "threads": threads, "examples_per_s": r["examples_per_s"],
                             "seconds": r["seconds"]})
                print(f"{label:<20} {threads} thread(s): {r['examples_per_s']:>10,.0f} ex/s", flush=True)
        finally:
            for p in procs:
                p.kill()
                p.wait()
    return rows


#: The evaluation pass's contenders (``eval_pass`` rows of the main job's section): (batch sums' dtype, jackknife
#: row groups, worker processes, kernel); the first is the main job's evaluation before issue 39, the last ones after it
#: (``kernel="compiled"``: the groups' Delta W above the one-hot leaves compiled, ``leaf_kernels.GroupedLeafKernel``,
#: which the main job's ``"auto"`` picks on 10^7 rows; its compilation in the job's process timed apart, ``compile_s``,
#: a worker's inside the pass).
EVAL_PASSES = (("float64", 10, 1, "eager"), ("float32", None, 1, "eager"), ("float32", None, 1, "compiled"),
               ("float32", 10, 1, "eager"), ("float32", 10, 1, "compiled"), ("float32", 10, 2, "eager"),
               ("float32", 10, 2, "compiled"))


def bench_main_job(n: int, steps: int, work: Path, workers: int = 2, pass_n: int = 0, repeats: int = 1) -> list[dict]:
    """``compare_student`` on a store of ``n`` rows (0: none): ``steps`` SGD steps, the evaluation over every row at
    the first and the last step, sharded on ``workers`` processes (1: none); and (``pass_n`` > 0) one evaluation
    pass alone over the first ``pass_n`` rows' store per contender of :data:`EVAL_PASSES`, ``repeats`` interleaved
    rounds of them (a busy machine's noise hits every contender alike): where the job's time goes."""
    rows = []
    if pass_n:
        path = work / "pass.zarr"
        _run_child("sample", path, pass_n)
        for rep in range(repeats):
            for dtype, groups, w, kernel in EVAL_PASSES:
                r = _run_child("eval_pass", path, pass_n, dtype=dtype, groups=groups, workers=w, kernel=kernel)
                rows.append({**r, "repeat": rep, "loadavg": os.getloadavg()[0]})
                print(f"one evaluation pass, N={pass_n:,}, {dtype} batch sums, groups={groups}, {w} process(es), "
                      f"{kernel}: {r['seconds']:.1f} s = {r['examples_per_s']:,.0f} ex/s (CPU {r['cpu_s']:.1f} s + "
                      f"{r['worker_cpu_s']:.1f} s in workers; load {os.getloadavg()[0]:.1f})"
                      + (f"; compiled first in {r['compile_s']:.1f} s" if "compile_s" in r else ""), flush=True)
        for k, v in _pass_summary(rows).items():
            print(f"  {k}: best {v['best_examples_per_s']:,.0f} ex/s, median {v['median_examples_per_s']:,.0f}, best "
                  f"{v['best_examples_per_cpu_s']:,.0f} ex per CPU s", flush=True)
        shutil.rmtree(path)
    if not n:
        return rows
    path = work / "main.zarr"
    sample = _run_child("sample", path, n)
    r = _run_child("main_job", path, n, steps=steps, workers=workers)
    shutil.rmtree(path)
    print(f"main job on N={n:,} (341 regions, width 16, {steps} SGD steps, 2 full streamed evaluations on "
          f"{workers} process(es)): {r['seconds']:.1f} s = {r['examples_per_s']:,.0f} ex/s (CPU: {r['cpu_s']:.1f} s "
          f"here + {r['worker_cpu_s']:.1f} s in workers), peak RSS {r['peak_rss_mib']:.0f} MiB (workers "
          f"{r['worker_peak_rss_mib']:.0f} MiB) (sampling it took {sample['seconds']:.1f} s)", flush=True)
    return [*rows, {**r, "sample_seconds": sample["seconds"]}]


def _pass_summary(rows: list[dict]) -> dict:
    """Per contender of :data:`EVAL_PASSES` (``"float32, groups=10, 2 process(es)"``) the best and median examples/s
    of its ``eval_pass`` rows."""
    out: dict = {}
    for dtype, groups, w, kernel in EVAL_PASSES:
        mine = [r for r in rows if r.get("job") == "eval_pass" and r["dtype"] == dtype and r["groups"] == groups
                and r["workers"] == w and r.get("kernel", "eager") == kernel]
        if mine:
            rates = [r["examples_per_s"] for r in mine]
            # per CPU second of the job and its workers: what a busy machine's wall clock overstates
            cpu = [r["n"] / (r["cpu_s"] + r["worker_cpu_s"]) for r in mine]
            out[f"{dtype}, groups={groups}, {w} process(es)" + (", compiled" if kernel == "compiled" else "")] = {
                "best_examples_per_s": max(rates), "median_examples_per_s": statistics.median(rates),
                "best_examples_per_cpu_s": max(cpu), "repeats": len(rates)}
    return out


def _targets(results: list[dict]) -> dict:
    """The issue's goals against the measured rows: memory below 1.5 GB, 2 Dask workers >= 1.6x, the main job at
    >= 40k examples/s (issue 39, at the largest N recorded)."""
    out = {}
    passes = _pass_summary([r for r in results if r.get("section") == "main_job"])
    grouped, plain = passes.get("float32, groups=10, 1 process(es)"), passes.get("float32, groups=None, 1 process(es)")
    if grouped and plain:  # what the jackknife's row groups cost an evaluation pass (issue 39: an axis, not K passes)
        out["eval_pass_row_groups_cost"] = {
            "x_without_groups": plain["best_examples_per_s"] / grouped["best_examples_per_s"],
            "x_without_groups_cpu": plain["best_examples_per_cpu_s"] / grouped["best_examples_per_cpu_s"],
            "passes": passes}
    main = [r for r in results if r.get("section") == "main_job" and r.get("job") == "main_job"]
    if main:
        big = max(main, key=lambda r: r["n"])
        out["main_job_at_least_40k_examples_per_s"] = {"measured": big["examples_per_s"], "n": big["n"],
                                                       "workers": big.get("workers", 1),
                                                       "met": big["examples_per_s"] >= 40_000}
    mem = [r["peak_rss_mib"] for r in results if r.get("section") == "memory" and r.get("job") != "sample_memory"]
    if mem:
        out["streaming_peak_rss_below_1.5_GB"] = {"measured_max_mib": max(mem), "met": max(mem) * 2**20 < 1.5e9}
    two = [r for r in results if r.get("section") == "engine" and r.get("contender", "").startswith("dask, 2")
           and r.get("ladder") == "random"]
    if two:  # the 341-region ladder at the largest N, on a warm cluster (start-up reported apart)
        big = max(two, key=lambda r: r["n"])
        out["dask_2_workers_at_least_1.6x"] = {"measured": big["x_one_thread"], "n": big["n"],
                                               "with_startup": big["x_one_thread_with_startup"],
                                               "met": big["x_one_thread"] >= 1.6}
    return out


def main(argv: list[str] | None = None) -> dict:
    """Run the chosen sections and write the JSON results."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    p.add_argument("--ns", type=float, nargs="+", default=None, help="N of the memory section")
    p.add_argument("--baseline-n", type=float, default=None, help="N of the in-memory path")
    p.add_argument("--stats-max-n", type=float, default=None, help="largest N of the statistics pass")
    p.add_argument("--engine-n", type=float, default=None, help="N of the contention section")
    p.add_argument("--engine-ns", type=float, nargs="+", default=None,
                   help="the engine section's N, on both ladders (default 2e6 1e7; the largest gives the crossover)")
    p.add_argument("--chunk-rows", type=int, default=65536)
    p.add_argument("--busy", type=int, default=None, help="busy processes of the contention section (default 6)")
    p.add_argument("--main-n", type=float, default=None, help="N of the main job (0: the evaluation passes only)")
    p.add_argument("--main-steps", type=int, default=None)
    p.add_argument("--main-workers", type=int, default=2,
                   help="processes of one thread the main job's evaluation is sharded on (1: none; default 2)")
    p.add_argument("--pass-n", type=float, default=None,
                   help="N of the main job's section's single evaluation passes (EVAL_PASSES; 0: none; default 1e6)")
    p.add_argument("--pass-repeats", type=int, default=1,
                   help="interleaved rounds of the evaluation passes (best and median recorded; default 1)")
    p.add_argument("--workdir", type=Path, default=None, help="where the stores are written (default: a temp dir)")
    _common.add_quick_out_args(p, "small sizes, for the smoke test", _common.default_out("out_of_core"))
    args = p.parse_args(argv)
    _common.fill_defaults(args, quick={"ns": [2e4], "baseline_n": 2e4, "stats_max_n": 2e4, "engine_n": 3e4,
                                       "engine_ns": [2e4, 3e4],
                                       "main_n": 2e4, "main_steps": 4, "pass_n": 2e4, "chunk_rows": 8192,
                                       "busy": 1},
                          full={"ns": [1e5, 1e6, 1e7, 1e8], "baseline_n": 2e6, "stats_max_n": 1e7, "engine_n": 2e6,
                                "engine_ns": [2e6, 1e7],
                                "main_n": 1e7, "main_steps": 200, "pass_n": 1e6, "busy": 6})
    wall0 = _common.start(None)
    machine = _common.machine_info(pyro=False)
    work = Path(tempfile.mkdtemp(prefix="smaso-ooc-", dir=args.workdir))
    results: list[dict] = []
    try:
        if "memory" in args.sections:
            for r in bench_memory([int(n) for n in args.ns], int(args.baseline_n), int(args.stats_max_n), work):
                results.append({"section": "memory", **r})
        if "engine" in args.sections:
            results += [{"section": "engine", **r}
                        for r in bench_engine([int(n) for n in args.engine_ns], args.chunk_rows, work)]
        if "contention" in args.sections:
            results += [{"section": "contention", **r}
                        for r in bench_contention(int(args.engine_n), args.busy, work)]
        if "main_job" in args.sections:
            results += [{"section": "main_job", **r}
                        for r in bench_main_job(int(args.main_n), args.main_steps, work, args.main_workers,
                                                int(args.pass_n), args.pass_repeats)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    total = _common.finish(machine, wall0)
    when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    # each section's own date and load: a run of some sections keeps the other sections' rows of earlier runs
    runs = {s: {"argv": list(sys.argv[1:] if argv is None else argv), "wall_s": total, "timestamp": when,
                "loadavg_start": machine["loadavg_start"], "loadavg_end": machine["loadavg_end"]}
            for s in args.sections}
    if not args.quick and set(args.sections) != set(SECTIONS) and Path(args.out).is_file():
        # a run of some sections replaces only their rows (the 10^8 memory rows take an hour to redo)
        old = json.loads(Path(args.out).read_text())
        results = [r for r in old.get("results", []) if r.get("section") not in args.sections] + results
        runs = {**old.get("section_runs", {}), **runs}
    data = _common.record("out_of_core", argv, {"config": {**vars(args), "out": str(args.out),
                                                           "workdir": str(args.workdir), "ladder": LADDER}},
                          machine, results, {"targets": _targets(results), "section_runs": runs,
                                             "crossover": crossover([r for r in results
                                                                     if r.get("section") == "engine"])}, total)
    _common.write_json(args.out, data)
    _common.print_done(total, args.out)
    return data


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        job, path, n, threads, extra = sys.argv[2:7]
        print(json.dumps(_child(job, path, int(n), int(threads), json.loads(extra))))
    else:
        main()
        os._exit(0)  # the Dask cluster's threads may linger
