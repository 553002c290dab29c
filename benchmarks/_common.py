"""Shared pieces of the benchmark scripts in ``benchmarks/``: timing loops, machine information,
the common command-line options, the JSON results file and the results table.

Each ``bench_*.py`` script keeps only what is specific to it (its contenders, its rows and its
targets) and imports this module as ``_common``.  The scripts run as ``python benchmarks/bench_x.py``
(this directory is then ``sys.path[0]``) and are also loaded by path with ``importlib`` by the smoke
tests, so each script puts its own directory on ``sys.path`` before ``import _common``.
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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from teachers.spec_io import atomic_write

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
JSON_MODE = 0o644  # results files are readable by everyone (mkstemp alone would leave them 0600)


# ---------------------------------------------------------------------- command line and output path
def default_out(name: str) -> Path:
    """Default results file of a benchmark: ``<output>/benchmarks/<name>.json``, outside the tracked
    files (:func:`smaso.output.output_dir`: ``$SMASO_OUTPUT``, or ``./smaso-output``).  ``--record``
    writes the recorded ``benchmarks/results/<name>.json`` of this repository instead."""
    from smaso.output import output_dir

    return output_dir("benchmarks", create=False) / f"{name}.json"


def recorded_out(name: str) -> Path:
    """The recorded (tracked) results file of a benchmark: ``benchmarks/results/<name>.json``."""
    return RESULTS_DIR / f"{name}.json"


def add_threads_arg(p: argparse.ArgumentParser) -> None:
    """Add ``--threads`` (torch intra-op threads; ``None``, torch's own choice, by default)."""
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (default: torch's own choice, recorded in the JSON)")


def add_quick_out_args(p: argparse.ArgumentParser, quick_help: str, default: Path) -> None:
    """Add ``--quick`` (a smoke run, described by ``quick_help``), ``--out`` (the JSON results file) and
    ``--record`` (write the recorded results file of this repository, the only way to change it)."""
    recorded = recorded_out(default.stem)
    p.add_argument("--quick", action="store_true", help=quick_help)
    p.add_argument("--out", type=Path, default=default,
                   help=f"JSON results file (default: {default}, outside the tracked files; $SMASO_OUTPUT moves it)")
    p.add_argument("--record", dest="out", action="store_const", const=recorded,
                   help=f"write the recorded results, {recorded.relative_to(REPO_ROOT).as_posix()} (same as --out "
                        "with that path)")


def fill_defaults(args: argparse.Namespace, quick: dict, full: dict) -> None:
    """Set every option of ``args`` left at ``None`` to its value in ``quick`` (under ``--quick``) or
    ``full`` (otherwise): the defaults that depend on ``--quick``."""
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def require_positive(p: argparse.ArgumentParser, args: argparse.Namespace, names: Sequence[str]) -> None:
    """Exit through ``p.error`` unless every option in ``names`` (attribute names) is >= 1."""
    for name in names:
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")


# ---------------------------------------------------------------------- run bookkeeping
def start(threads: int | None) -> float:
    """Start a benchmark run: apply ``--threads`` (when given) and return the wall clock's start."""
    wall0 = time.perf_counter()
    if threads is not None:
        torch.set_num_threads(threads)
    return wall0


def torch_summary() -> str:
    """``torch <version>, <threads> thread(s)``, for the scripts' opening lines."""
    return f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)"


def loadavg() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, or ``None`` where the platform has none."""
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def machine_info(pyro: bool = True, **extra: Any) -> dict:
    """Python, platform, CPU count, torch (version and threads), pyro (unless ``pyro=False``) and numpy
    versions, any ``extra`` entries, and the load average now (``loadavg_start``).

    ``finish`` adds ``loadavg_end``.
    """
    info = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
    }
    if pyro:
        import pyro as pyro_module

        info["pyro"] = pyro_module.__version__
    info["numpy"] = np.__version__
    info.update(extra)
    info["loadavg_start"] = loadavg()
    return info


def finish(info: dict, wall0: float) -> float:
    """End a run: record ``loadavg_end`` in ``info`` and return the wall time since ``wall0`` (seconds)."""
    total_s = time.perf_counter() - wall0
    info["loadavg_end"] = loadavg()
    return total_s


def print_done(total_s: float, out: Path) -> None:
    """The closing line: total wall time and where the results go."""
    print(f"\ntotal wall time {total_s:.1f} s; results -> {out}")


def record(benchmark: str, argv: list[str] | None, sections: dict, machine: dict, results: list[dict],
           after: dict, total_wall_s: float) -> dict:
    """A results file's contents, in the order every benchmark writes them: ``benchmark``, ``timestamp``
    (UTC, now), ``argv`` (the command-line arguments, ``sys.argv[1:]`` when ``main`` was given none),
    the ``sections`` (``config`` and what describes the setup), ``machine``, ``results``, the ``after``
    entries (``targets`` and the like) and ``total_wall_s``."""
    return {
        "benchmark": benchmark,
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "argv": list(sys.argv[1:] if argv is None else argv),
        **sections,
        "machine": machine,
        "results": results,
        **after,
        "total_wall_s": total_wall_s,
    }


def write_json(path: Path, data: dict) -> dict:
    """Write ``data`` as indented JSON (plus a final newline) to ``path`` atomically, with mode 0644;
    return ``data``.

    The directory is created first; ``teachers.spec_io.atomic_write`` writes a temporary file beside
    ``path`` and renames it over ``path``, so a reader never sees a half-written file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=2) + "\n"

    def write(f) -> None:
        f.write(text.encode())
        os.fchmod(f.fileno(), JSON_MODE)

    atomic_write(path, write)
    return data


# ---------------------------------------------------------------------- timing
def best_median(times: Sequence[float]) -> tuple[float, float]:
    """The best (shortest) and the median of ``times``."""
    return min(times), statistics.median(times)


def timed(fn: Callable[[], object]) -> Callable[[], float]:
    """Wrap ``fn`` into a callable that runs it once and returns its wall time (``time.perf_counter``)."""
    def run() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    return run


def cpu_timed(run: Callable[[], Any]) -> tuple[Any, float]:
    """``gc.collect()``, then ``run()``: its result and the process CPU time (all threads) it took."""
    gc.collect()
    c0 = time.process_time()
    out = run()
    return out, time.process_time() - c0


def repeat(run: Callable[[], Any], repeats: int) -> tuple[list, list[float]]:
    """Call ``run`` ``repeats`` times through ``cpu_timed``: its results and the CPU times, in order.

    ``run`` times its own work (it returns seconds, or per-part seconds), so that setup it does
    outside its timed region is not counted.
    """
    results, cpu = [], []
    for _ in range(repeats):
        out, c = cpu_timed(run)
        results.append(out)
        cpu.append(c)
    return results, cpu


def round_robin(runs: Sequence[Callable[[], Any]], repeats: int,
                on_round: Callable[[int], None] | None = None,
                on_run: Callable[[int, int, Any], None] | None = None) -> tuple[list[list], list[list[float]]]:
    """``repeats`` rounds in which every run of ``runs`` is called once, in turn, through ``cpu_timed``.

    Round-robin order spreads a change of the machine's load over all contenders alike (the cores
    may be shared), instead of charging it to whichever contender happened to be running.
    ``on_round(r)`` is called before round ``r`` and ``on_run(r, i, result)`` after each run (progress
    output).  Returns, per run, its results and its CPU times, in round order.
    """
    results = [[] for _ in runs]
    cpu = [[] for _ in runs]
    for r in range(repeats):
        if on_round is not None:
            on_round(r)
        for i, run in enumerate(runs):
            out, c = cpu_timed(run)
            results[i].append(out)
            cpu[i].append(c)
            if on_run is not None:
                on_run(r, i, out)
    return results, cpu


# ---------------------------------------------------------------------- reporting
@dataclass(frozen=True)
class Column:
    """One column of a results table: ``header``, ``width``, ``align`` ('<' or '>', header and cells),
    and the cell of a row: ``fmt`` (a format spec) applied to ``row[value]`` (``value`` a key) or to
    ``value(row)`` (``value`` a function); ``None`` prints empty."""

    header: str
    width: int
    value: str | Callable[[dict], Any]
    fmt: str = ""
    align: str = ">"

    def cell(self, row: dict) -> str:
        v = row[self.value] if isinstance(self.value, str) else self.value(row)
        return f"{'' if v is None else format(v, self.fmt):{self.align}{self.width}}"


def print_table(columns: Sequence[Column], rows: Sequence[dict], note: str | None = None, rule: bool = True) -> None:
    """Print a header line, a rule of dashes (unless ``rule=False``), one line per row and ``note``."""
    head = " ".join(f"{c.header:{c.align}{c.width}}" for c in columns)
    print(head)
    if rule:
        print("-" * len(head))
    for r in rows:
        print(" ".join(c.cell(r) for c in columns))
    if note is not None:
        print(note)
