"""The README's and docs/benchmarks.md's figures, written from the recorded JSON in ``benchmarks/results/``
(never typed by hand).

- :func:`table`: the benchmark table of ``docs/benchmarks.md``, one or more rows per results file, each
  row naming its script, the date of the recording, the load average at the start and the end of the run
  and the statistic quoted (best or median of the rounds);
- :func:`demo_rows`: the README's "What the demo shows" (``demo.json`` of ``bench_demo.py``): the accuracy
  table, the seeds' sentence, the reformulation table, the alignment table and the wall time;
- :func:`demo_claims`: the README's sentences about the demo that carry no number, as checks on the same JSON;
- :func:`notebook_table`: the README's notebook table (section "Notebooks") with its opening sentence, the
  fixed texts of :data:`NOTEBOOKS` and each notebook's full-mode time (:func:`notebook_times`, from
  ``notebooks.json`` of ``bench_notebooks.py``).

``python benchmarks/report.py`` prints the tables, the demo rows and the claims; ``python benchmarks/report.py
--write`` rewrites, in place, the generated parts of each file of :data:`TARGETS`: the benchmark table between
the lines :data:`BEGIN` and :data:`END` (in ``docs/benchmarks.md``), and the notebook table between
:data:`NOTEBOOKS_BEGIN` and the next :data:`END` (in README.md; left as it is, with a note, while
``notebooks.json`` is not recorded).  ``tests/test_readme_figures.py`` checks that these files hold exactly
these tables and README.md these demo rows, and that every claim holds, so a re-recorded result must be carried
into them (``--write``; the demo rows, which are scattered through prose, by hand from this script's output).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
README = HERE.parent / "README.md"
BENCHMARKS_DOC = HERE.parent / "docs" / "benchmarks.md"
#: the files whose generated parts ``--write`` rewrites: the notebook table in the README, the benchmark table in
#: docs/benchmarks.md
TARGETS = (README, BENCHMARKS_DOC)
BEGIN = "<!-- report.py: benchmarks -->"
NOTEBOOKS_BEGIN = "<!-- report.py: notebooks -->"
END = "<!-- /report.py -->"  # ends every generated part: the first one after its opening line
MARKER = "<!-- report.py:"  # every generated part's opening line starts so
#: the results files the benchmark table is written from, in the table's order
TABLE_FILES = ("ladder_sampling", "student", "activations", "factorial_map", "out_of_core", "sampling", "posterior",
               "graph_statistics", "population", "rhm", "diagnosis", "device")
#: the results files recorded on another machine than the 2-core one (their rows name it): not in the header's count
OTHER_MACHINES = ("device",)


# ---------------------------------------------------------------------- reading and formatting
def _load(name: str) -> dict:
    """The recorded results file ``benchmarks/results/<name>.json``."""
    return json.loads((RESULTS / f"{name}.json").read_text())


def _load_avg(d: dict) -> str:
    """``load a-b``: the 1-minute load average at the start and at the end of the run."""
    a, b = d["machine"]["loadavg_start"][0], d["machine"]["loadavg_end"][0]
    return f"load {a:.1f}-{b:.1f}"


def _date(d: dict) -> str:
    """The recording's date, YYYY-MM-DD (its ``timestamp`` is UTC)."""
    return d["timestamp"][:10]


def _source(d: dict, script: str, statistic: str) -> str:
    """Where a row's numbers come from: ``(`script`, date, load a-b; statistic)``."""
    return f"(`{script}`, {_date(d)}, {_load_avg(d)}; {statistic})"


def _rounds(d: dict, statistic: str) -> str:
    """``<statistic> of N interleaved rounds`` (N = the run's ``config.repeats``: every contender once a round)."""
    return f"{statistic} of {d['config']['repeats']} interleaved rounds"


def _threads(n: int) -> str:
    """``1 thread``, ``2 threads``."""
    return f"{n} thread" + ("" if n == 1 else "s")


def _runs(n: int) -> str:
    """``1 run``, ``3 runs``."""
    return f"{n} run" + ("" if n == 1 else "s")


def _run_threads(d: dict) -> str:
    """The torch threads a run used (``machine.torch_threads``, recorded after ``--threads`` took effect)."""
    return _threads(d["machine"]["torch_threads"])


def _target(t: dict) -> str:
    """A recorded target (``"<= 1.5"``, ``">= 15 (about)"``) as a ratio: ``<= 1.5x``, ``>= 15x (about)``;
    `` (not met)`` added when the recording failed it."""
    bound, _, note = t["target"].partition(" (")
    text = f"{bound}x" + (f" ({note}" if note else "")
    return text if t.get("pass", True) else f"{text} (not met)"


def _count(n: float) -> str:
    """An example count: ``1e6`` for a power of ten, the integer otherwise."""
    n = round(n)
    text = f"{n:.0e}".replace("e+0", "e").replace("e+", "e")
    return text if n > 0 and float(text) == n else str(n)


def _millions(n: float) -> str:
    """A row count in millions to two figures: ``2.8M``, ``0.4M``."""
    return f"{n / 1e6:.2g}M"


def _rate(per_s: float) -> str:
    """Examples per second, in thousands to three figures: ``345k``, ``44.8k``."""
    return f"{per_s / 1e3:.3g}k"


def _span(values: list[float], fmt: str = ".2f") -> str:
    """``lo-hi`` of ``values`` in format ``fmt``, or one number when both print alike."""
    lo, hi = min(values), max(values)
    return f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}-{hi:{fmt}}"


def _row(benchmark: str, measured: str, target: str) -> str:
    """One table row."""
    return f"| {benchmark} | {measured} | {target} |"


# ---------------------------------------------------------------------- bench_ladder_sampling.py
def ladder_sampling_rows() -> list[str]:
    """The sampler against plain Pyro and against the ``torch.rand`` floor (best of the timed runs; the sampler and
    the floor in interleaved rounds where the recording says so, otherwise one contender after the other)."""
    d = _load("ladder_sampling")
    c, t = d["config"], d["targets"]
    order = ("the sampler and the floor in interleaved rounds" if c.get("interleaved")
             else "one contender after the other")
    source = _source(d, "bench_ladder_sampling.py", f"best of {_runs(c['repeats'])} each, {order}; "
                     f"plain Pyro: {_runs(c['baseline_repeats'])} of N = {_count(c['baseline_n'])}")
    speed, floor = t["speedup_over_plain_pyro"], t["slowdown_vs_floor"]
    return [
        _row(f"ladder sampler vs plain Pyro `dist.Categorical` model (N = {_count(c['n'])}, "
             f"{d['ladder']['total_regions']} regions, m = {c['events']}, {_run_threads(d)})",
             f"{speed['value']:.0f}x faster {source}", _target(speed)),
        _row("ladder sampler vs `torch.rand` of the same count", f"{floor['value']:.1f}x the floor {source}",
             _target(floor)),
    ]


# ---------------------------------------------------------------------- bench_student.py
def _ratio_name(t: dict) -> str:
    """``(`numerator` / `denominator`)``: the contenders a student ratio divides."""
    return f"(`{t['numerator']}` / `{t['denominator']}`)"


def student_rows() -> list[str]:
    """The statistics epoch against a plain epoch, and the locally connected student against a dense stack of
    the same MACs; the one student against 0.2's tree code when the recording has that target."""
    d = _load("student")
    c, t = d["config"], d["targets"]
    source = _source(d, "bench_student.py", _rounds(d, c["time_statistic"]))
    stats, lc = t["stats_overhead"], t["locally_connected_vs_dense"]
    setup = (f"{d['ladder']['total_regions']} regions, width {c['width']}, batch {c['batch_size']}, "
             f"{c['judged_accumulation']} accumulation, {_run_threads(d)}")
    measured = f"{stats['value']:.2f}x {_ratio_name(stats)}"
    target = _target(stats)
    if "stats_overhead_bn" in t:
        bn = t["stats_overhead_bn"]
        measured += f"; BN: {bn['value']:.2f}x {_ratio_name(bn)}"
        target += f"; BN: {_target(bn)}"
    rows = [
        _row(f"frequency statistics during an epoch vs the plain epoch ({setup})", f"{measured} {source}", target),
        _row(f"locally connected forward+backward vs dense `nn.Linear` stack of the same MACs "
             f"({' -> '.join(map(str, d['dense']['dims']))}; {_run_threads(d)})",
             f"{lc['value']:.2f}x {_ratio_name(lc)} {source}", _target(lc)),
    ]
    if "locally_connected_vs_dense_events" in t:  # recorded since issue 39: one-hot leaves given by their events
        ev = t["locally_connected_vs_dense_events"]
        rows.append(_row("the same on one-hot leaves given by their events (the leaf level a gather of weight rows)",
                         f"{ev['value']:.2f}x {_ratio_name(ev)} {source}", _target(ev)))
    if "locally_connected_vs_dense_one_hot_declared" in t:  # one-hot x declared: run as their events (issue 39)
        oh = t["locally_connected_vs_dense_one_hot_declared"]
        rows.append(_row("the same on one-hot x declared one-hot (`student(x, one_hot_checked=True)`: read as their "
                         "events inside the step)", f"{oh['value']:.2f}x {_ratio_name(oh)} {source}", _target(oh)))
    if "locally_connected_vs_dense_events_compiled" in t:  # the compiled leaf weight gradient (issue 39)
        co = t["locally_connected_vs_dense_events_compiled"]
        rows.append(_row("the same on leaf events with `LadderStudent(kernel=\"compiled\")` (the leaf weight "
                         "gradient an inductor-compiled segment sum; compilation excluded)",
                         f"{co['value']:.2f}x {_ratio_name(co)} {source}", _target(co)))
    if "stats_vs_reference" in t:  # recorded since the one student replaced the tree code (target 3)
        ref = t["stats_vs_reference"]
        measured, target = f"{ref['value']:.2f}x {_ratio_name(ref)}", _target(ref)
        if "stats_vs_reference_bn" in t:
            bn = t["stats_vs_reference_bn"]
            measured += f"; BN: {bn['value']:.2f}x"
            target += f"; BN: {_target(bn)}"
        rows.append(_row(f"the statistics epoch vs 0.2's tree code in `benchmarks/reference/` ({setup})",
                         f"{measured} {source}", target))
    return rows


# ---------------------------------------------------------------------- bench_activations.py
def activations_rows() -> list[str]:
    """beta-swish, fixed and learnable beta, forward+backward against ``F.silu``."""
    d = _load("activations")
    c, t = d["config"], d["targets"]
    source = _source(d, "bench_activations.py", _rounds(d, c["rate_statistic"]))
    fixed, learnable = t["fixed_vs_silu"], t["learnable_vs_silu"]
    rows = [
        _row(f"swish (beta-VQ ReLU; torch.func, compile, export, double backward supported), fixed beta = "
             f"{c['beta']:g}, forward+backward on {_count(c['n'])} elements vs `F.silu`, {_run_threads(d)}",
             f"{fixed['value']:.2f}x {source}", _target(fixed)),
        _row("swish with learnable beta vs `F.silu`", f"{learnable['value']:.2f}x {source}", _target(learnable)),
    ]
    for key, what in (("fixed_compiled_vs_silu", "fixed beta"), ("learnable_compiled_vs_silu", "learnable beta")):
        if key in t:  # the same module under torch.compile: inductor fuses each direction into one kernel
            rows.append(_row(f"swish, {what}, the module under `torch.compile` vs `F.silu`",
                             f"{t[key]['value']:.2f}x {source}", _target(t[key])))
    return rows


# ---------------------------------------------------------------------- bench_factorial_map.py
def factorial_map_rows() -> list[str]:
    """Factorized MAP against its matmul floor, and exact enumeration at the largest K recorded."""
    d = _load("factorial_map")
    c, t = d["config"], d["targets"]["factorized_vs_matmul"]
    last, before = d["enumeration"][-1], d["enumeration"][-2]
    growth = last["time_s"] / before["time_s"]
    enum_source = _source(d, "bench_factorial_map.py", f"best of {_runs(len(last['times_s']))} at that K")
    return [
        _row(f"factorized joint MAP, K = {c['k']}, D = {c['d']}, batch {c['n']}, vs one matmul of that shape, "
             f"{_run_threads(d)}",
             f"{t['value']:.2f}x " + _source(d, "bench_factorial_map.py",
                                            f"best of {_runs(c['repeats'])} each, one contender after the other"),
             _target(t)),
        _row(f"exact joint MAP by enumeration (R = {c['r']}, D = {last['d']}, batch {last['n']})",
             f"{last['time_s']:.1f} s at K = {last['k']}, x{growth:.2f} from K = {before['k']} {enum_source}", "-"),
    ]


# ---------------------------------------------------------------------- bench_out_of_core.py
def _ooc_source(d: dict, section: str) -> str:
    """The source of an out-of-core row: the date and load of the run that measured ``section`` (its
    ``section_runs`` entry, else the file's when its last run measured it); a run of some sections keeps the
    other sections' rows of earlier runs, whose date and load older recordings did not keep."""
    run = d.get("section_runs", {}).get(section, {})
    if "timestamp" in run:
        return _source({"timestamp": run["timestamp"], "machine": run}, "bench_out_of_core.py", "one run")
    if section in d["config"]["sections"]:
        return _source(d, "bench_out_of_core.py", "one run")
    return "(`bench_out_of_core.py`; one run, kept from an earlier run: its date and load are not recorded)"


def _ooc_regions(d: dict) -> int:
    """Regions of the out-of-core benchmark's uniform tree ladder (``config.ladder``: depth and branching)."""
    lad = d["config"]["ladder"]
    return sum(lad["branching"] ** level for level in range(lad["depth"] + 1))


def _ooc_memory_row(d: dict, job: str, what: str, note: str) -> str:
    """Throughput at the largest N and peak RSS over every N of one streamed ``memory`` job."""
    rows = [r for r in d["results"] if r["section"] == "memory" and r["job"] == job]
    big = max(rows, key=lambda r: r["n"])
    measured = (f"{_rate(big['examples_per_s'])} examples/s at {_count(big['n'])}{note(big)}; peak RSS "
                f"{_span([r['peak_rss_mib'] for r in rows], '.0f')} MiB at every N {_ooc_source(d, 'memory')}")
    small = min(rows, key=lambda r: r["n"])
    return _row(f"{what}, {_ooc_regions(d)} regions, {_threads(big['threads'])}, N = {_count(small['n'])} ... "
                f"{_count(big['n'])}", measured, "flat, < 1.5 GB")


def _ooc_engine_rows(d: dict) -> list[str]:
    """Dask sampling with 2 and 1 workers against one process at one thread on the 341-region ladder at the
    largest N (a warm cluster; with the start-up beside it), and where Dask pays off (``crossover``)."""
    rows = [r for r in d["results"] if r["section"] == "engine" and r.get("ladder", "random") == "random"]
    n = max(r.get("n", 0) for r in rows)
    at = {r["contender"]: r for r in rows if r.get("n", 0) == n}
    one = at["one process, 1 thread"]
    w1, w2 = at["dask, 1 worker(s) x 1 thread"], at["dask, 2 worker(s) x 1 thread"]
    same = "same bytes" if w1["same_bytes"] and w2["same_bytes"] else "NOT the same bytes"
    startup = (f", {w2['x_one_thread_with_startup']:.2f}x counting the cluster's {w2['startup_s']:.1f} s start-up"
               if "startup_s" in w2 else "")
    out = [_row(f"Dask sampling, 2 workers x 1 thread vs one process at 1 thread, {_ooc_regions(d)} regions "
                f"({_count(one['seconds'] * one['examples_per_s'])} rows, {same})",
                f"{w2['x_one_thread']:.2f}x on a running cluster{startup} (one worker: {w1['x_one_thread']:.2f}x; "
                f"empty task {1e3 * w2['empty_task_s']:.1f} ms) {_ooc_source(d, 'engine')}", ">= 1.6x")]
    cross = d.get("crossover", [])
    if cross and all(c.get("crossover_serial_s_warm") is not None for c in cross):
        out.append(_row(
            "when Dask pays off: 2 local workers finish first once the one-process job takes longer than "
            "(`crossover` of `bench_out_of_core.py`)",
            "; ".join(f"{c['regions']} regions: {c['crossover_serial_s_warm']:.1f} s on a running cluster "
                      f"({_millions(c['crossover_n_warm'])} rows), {c['crossover_serial_s_with_startup']:.1f} s "
                      f"counting its start-up ({_millions(c['crossover_n_with_startup'])} rows)" for c in cross)
            + f" {_ooc_source(d, 'engine')}", "measured"))
    return out


def _ooc_main_job_row(d: dict) -> str:
    """``compare_student`` streamed over a store: time, peak RSS (of its workers too, where sharded), and the
    single evaluation passes where recorded (issue 39: where the time goes)."""
    r = next(r for r in d["results"] if r["section"] == "main_job" and r.get("job", "main_job") == "main_job")
    workers = r.get("workers", 1)
    passes = [p for p in d["results"] if p["section"] == "main_job" and p.get("job") == "eval_pass"]
    shards = (f", the evaluations sharded on {workers} processes (their peak RSS {r['worker_peak_rss_mib']:.0f} "
              "MiB each at most)" if workers > 1 else "")
    # each contender once: its best rate over the interleaved repeats (and the median where repeated)
    by: dict[tuple, list[float]] = {}
    for p in passes:
        by.setdefault((p["dtype"], p["groups"], p["workers"], p.get("kernel", "eager")), []).append(p["examples_per_s"])
    one = ("; one evaluation pass alone at N = " + _count(passes[0]["n"]) + " (best" + (", median" if any(
        len(v) > 1 for v in by.values()) else "") + "): " + ", ".join(
        f"`{dt}` sums, {g or 'no'} groups, {w} process{'es' if w > 1 else ''}{', compiled' if k == 'compiled' else ''}"
        f" {_rate(max(v))}/s" + (f" ({_rate(statistics.median(v))})" if len(v) > 1 else "")
        for (dt, g, w, k), v in by.items()) if passes else "")
    return _row(f"the main job streamed (`compare_student`, {_ooc_regions(d)} regions, {r['steps']} SGD steps, "
                f"evaluations over every example), N = {_count(r['n'])}",
                f"{r['seconds']:.0f} s ({_rate(r['examples_per_s'])} examples/s over N; sampling the store: "
                f"{r['sample_seconds']:.0f} s more); peak RSS {r['peak_rss_mib']:.0f} MiB{shards}{one} "
                f"{_ooc_source(d, 'main_job')}", ">= 40k examples/s (issue 39); memory flat in N")


def _ooc_contention_row(d: dict) -> str:
    """The sampler at 1 and 2 threads, with busy processes and on a quiet machine."""
    rows = [r for r in d["results"] if r["section"] == "contention"]
    quiet = {r["threads"]: r["examples_per_s"] for r in rows if r["machine"] == "quiet"}
    busy_label = next(r["machine"] for r in rows if r["machine"] != "quiet")
    busy = {r["threads"]: r["examples_per_s"] for r in rows if r["machine"] == busy_label}
    return _row(f"sampler under contention ({busy_label}, {d['machine']['cpu_count']} cores): "
                f"{min(busy)} vs {max(busy)} threads",
                f"{_rate(busy[min(busy)])} vs {_rate(busy[max(busy)])} examples/s (quiet: "
                f"{_rate(quiet[min(quiet)])} vs {_rate(quiet[max(quiet)])}) {_ooc_source(d, 'contention')}",
                "near the fair share: 1 thread is the default")


def out_of_core_rows() -> list[str]:
    """Memory against N (sampling into a store, ``smaso inspect``), the Dask engine, the main job streamed and
    thread contention."""
    d = _load("out_of_core")

    def store_size(r: dict) -> str:
        return f" ({r['seconds']:.0f} s, {r['bytes_per_example'] * r['n'] / 1e9:.0f} GB)"

    return [
        _ooc_memory_row(d, "sample", "sample into a chunked store", store_size),
        _ooc_memory_row(d, "inspect", "`smaso inspect` streamed (its peak: the Bayes posterior of a subset of rows)",
                        lambda r: ""),
        *_ooc_engine_rows(d),
        _ooc_main_job_row(d),
        _ooc_contention_row(d),
    ]


# ---------------------------------------------------------------------- the one-ladder benchmarks
def sampling_row() -> str:
    """The one sampler per draw against 0.2's tree sampler, on the tree and on the conv1d DAG (medians)."""
    s = _load("sampling")
    t = s["targets"]
    regions = {r["contender"]: r["regions"] for r in s["results"]}
    tree, dag = t["tree_per_draw_vs_reference_topdown"], t["dag_per_draw_vs_reference_topdown"]
    return _row(
        f"the one sampler (`sample_ladder`) per draw vs 0.2's tree sampler (`benchmarks/reference/`), "
        f"{regions['ladder-tree']}-region ladder, and on the conv1d DAG ({regions['ladder-dag']} regions), "
        f"{_run_threads(s)}, N = {_count(s['config']['n'])}",
        f"tree: topdown {tree['value']:.2f}x, bottom-up {t['tree_per_draw_vs_reference_bottomup']['value']:.2f}x; "
        f"DAG: {dag['value']:.2f}x / {t['dag_per_draw_vs_reference_bottomup']['value']:.2f}x "
        + _source(s, "bench_sampling.py", _rounds(s, "median")),
        f"tree {_target(tree)}, DAG {_target(dag)}")


def posterior_row() -> str:
    """The exact posterior against a plain sum-product and against 0.2's tree posterior (medians)."""
    p = _load("posterior")
    c, t = p["config"], p["targets"]
    batched, single = t["posterior_vs_plain_topdown-onehot_batched"], t["posterior_vs_plain_topdown-onehot_single"]
    speed = t["speedup_vs_reference_topdown-onehot_batched"]
    return _row(
        f"exact posterior p(y, z given x) (`inference.posterior`), {p['ladders']['topdown-onehot']['regions']}-"
        "region top-down ladder, one-hot leaves, vs a plain scaled-product sum-product and the reference, 0.2's tree "
        f"posterior, {_run_threads(p)}",
        f"{c['n']} queries: {batched['value']:.2f}x, {c['single']} one at a time: {single['value']:.2f}x; "
        f"{speed['value']:.1f}x faster than the reference " + _source(p, "bench_posterior.py", _rounds(p, "median")),
        f"{_target(batched)}; {_target(speed)} faster")


def graph_statistics_row() -> str:
    """The one student's statistics pass against 0.2's tree code on trees, and per MAC on the DAG (best and
    median)."""
    g = _load("graph_statistics")
    t = g["targets"]
    regions = {r["contender"]: r["regions"] for r in g["results"]}

    def both(key: str) -> str:
        return f"{t[key]['value']:.2f}x ({t[key]['value_median']:.2f}x)"

    return _row(
        "the one student's statistics pass (forward, explicit backward, frequency statistics) on uniform trees vs "
        f"0.2's tree code (`benchmarks/reference/`), {_run_threads(g)}, "
        f"N = {g['config']['n']}",
        f"{regions['one-tree']} regions {both('one_vs_reference_tree')}, {regions['one-tree341']} regions "
        f"{both('one_vs_reference_tree341')}, `Ladder.default()` {both('one_vs_reference_default')}; on the DAG per "
        f"MAC {both('dag_per_mac_vs_tree')} "
        + _source(g, "bench_graph_statistics.py", _rounds(g, "best (median)")),
        f"trees {_target(t['one_vs_reference_tree'])}, DAG {_target(t['dag_per_mac_vs_tree'])}")


# ---------------------------------------------------------------------- bench_population.py
def population_row() -> str:
    """R restarts trained as one population against one after the other, at the largest and smallest R."""
    d = _load("population")
    c = d["config"]
    big, small = max(c["sizes"]), min(c["sizes"])
    pops = [r for r in d["results"] if r["contender"] == "population"]

    def speedup(widths: list[int], r: int) -> float:
        return next(p["x_sequential"] for p in pops if p["widths"] == widths and p["r"] == r)

    first, second = c["widths"]
    targets = list(d["targets"].values())
    return _row(
        f"{big} restarts of a 1-D ReLU student trained as one population vs one after the other ({c['optimizer']}, "
        f"{c['loss']} loss, {c['steps']} steps), {_run_threads(d)}, per restart",
        f"widths {tuple(first)}: {speedup(first, big):.1f}x faster; {tuple(second)}: {speedup(second, big):.1f}x "
        f"(R = {small}: {speedup(first, small):.1f}x / {speedup(second, small):.1f}x); members agree with the lone "
        f"networks to {d['correctness']['max_abs_param_diff']:.0e} "
        + _source(d, "bench_population.py", _rounds(d, c["rate_statistic"])),
        " / ".join(sorted({_target(t) for t in targets})))


def rhm_row() -> str:
    """The issue-38 case: an RHM of v = m = n_c = 64, L = 5, built, sampled and answered exactly (medians, each
    phase in its own process, the memory it added)."""
    d = _load("rhm")
    c, lad = d["config"], d["ladder"]
    ph = {r["job"]: r for r in d["results"]}
    main = d["chunks"][0]
    post = ph["posterior"]

    def phase(job: str, what: str) -> str:
        r = ph[job]
        return f"{what} {r['median_s']:.2f} s (+{r['added_mib']:.0f} MiB)"

    exact = post["checks"]["max_label_error"] == 0 and post["checks"]["accuracy"] == 1.0
    return _row(
        f"the Random Hierarchy Model `Ladder.rhm({c['v']}, {c['n_classes']}, {c['m']}, {c['s']}, {c['L']})` "
        f"(P_max = 10^{lad['log10_p_max']:.1f}): build, sample, distinct draws, exact p(y given x) over the "
        f"productions, {_run_threads(d)}",
        f"build {ph['build']['median_s']:.3f} s; " + phase("sample", f"{_count(ph['sample']['rows'])} rows")
        + "; " + phase("distinct", f"{_count(ph['distinct']['rows'])} distinct") + "; "
        + phase("posterior", f"posterior of {_count(post['rows'])} rows in a fresh process")
        + f", {main['chunks'][0]['median_s']:.2f} s warm (chunk {main['auto_chunk']}, "
        f"{main['auto_over_best']:.2f}x the best fixed chunk), one-hot on every row "
        + _source(d, "bench_rhm.py", _rounds(d, "median")),
        "built, sampled and answered exactly on 2 cores" + ("" if exact else " (not met)"))


# ---------------------------------------------------------------------- bench_device.py
def device_row() -> str:
    """The hot paths on a GPU against the same machine's CPU (best of the repeats), with the host syncs counted:
    recorded only from a run on a GPU (``bench_device.py --record``); a section that failed in the recording is
    named as failed, and the commit the recording measured is quoted."""
    d = _load("device")
    m, r = d["machine"], {row["section"]: row for row in d["results"]}
    if not d["summary"]["accelerator"]:
        raise ValueError("benchmarks/results/device.json: not a GPU run (record it on a GPU: bench_device.py --record)")
    dev = m["device"].split(":")[0]

    def x(row: dict) -> str:
        return f"{row['x_cpu']:.1f}x"

    def syncs(row: dict) -> str:
        return f"{row['syncs_per_step']:.2g} syncs per step"

    def hot(row: dict, key: str = "sync_error") -> str:
        return "no sync" if row.get(key) is None else "syncs"

    def part(name: str, text: Callable[[dict], str]) -> str:
        row = r.get(name)
        if row is None:
            return f"{name} not run"
        return f"{name} failed in this recording ({row['error'].split(':')[0]})" if row["error"] else text(row)

    def post(p: dict) -> str:
        worst = max(max(c["log_px_max_abs_diff"], c["p_y_max_abs_diff"]) for c in p.values() if isinstance(c, dict))
        return (f"posterior of {_count(p['tree']['rows'])} rows: tree {x(p['tree'])}, junction tree "
                f"{x(p['junction_tree'])}, within {worst:.0e} of the CPU's")

    parts = [
        part("sampling", lambda q: f"sampling {_count(q['rows'])} rows {x(q)}"),
        part("posterior", post),
        part("training_step", lambda q: f"training step {q[f'{dev}_ms_per_step']:.2f} ms ({x(q)}, {hot(q)})"),
        part("statistics_pass", lambda q: f"statistics pass {x(q)} ({hot(q)})"),
        part("train_ladder_student", lambda q: f"`train_ladder_student` {x(q)}, {syncs(q)}"),
        part("compare_student", lambda q: f"`compare_student` (the demo's run, {q['steps']} steps) {x(q)}, {syncs(q)}"),
    ]
    commit = d.get("commit")
    measured = ("; ".join(parts) + f" (`bench_device.py`, {_date(d)}" + (f", commit `{commit}`" if commit else "")
                + (", an earlier version of the code: `provenance` in the JSON" if d.get("provenance") else "")
                + f", `{m['gpu']}`, torch `{m['torch']}`; CPU side {_run_threads(d)} of {m['cpu_count']} cores; "
                f"best of {d['config']['repeats']})")
    met = all(k in r and not r[k]["error"] and r[k].get("sync_error") is None
              for k in ("training_step", "statistics_pass"))
    return _row("the hot paths on a GPU against the same machine's CPU, host syncs counted "
                "(`set_sync_debug_mode`)", measured,
                "runs on CUDA; no host sync in the training step and the statistics pass"
                + ("" if met else " (not met in this recording)"))


# ---------------------------------------------------------------------- bench_diagnosis.py
def diagnosis_row() -> str:
    """One demo checkpoint's diagnosis with its jackknife floors: the replicates in one batched reformulation
    against one by one (best and median), and what a demo seed spends on it."""
    d = _load("diagnosis")
    c, check = d["config"], d["correctness"]
    r = {row["contender"]: row for row in d["results"]}
    b, one = r["batched"], r["one_by_one"]
    seed = d["demo_seed"]  # (one_by_one, batched)
    ok = all(ch["same_numbers"] and ch["same_within_noise"] and ch["max_floor_rel_diff"] <= 1e-10
             for ch in (check, d["demo_correctness"]))
    return _row(
        f"`smaso demo`'s diagnosis of one checkpoint with the jackknife's noise floors ({c['replicates']} "
        f"replicates, {c['eval_examples']} rows), the replicates in one batched reformulation vs one by one, "
        f"{_run_threads(d)}",
        f"{b['x_one_by_one']:.1f}x faster ({b['x_one_by_one_median']:.1f}x median): {b['best_s'] * 1e3:.0f} ms vs "
        f"{one['best_s'] * 1e3:.0f} ms ({b['reformulate_calls']} vs {one['reformulate_calls']} `reformulate` calls; "
        f"without floors {r['no_floors']['best_s'] * 1e3:.0f} ms); in a demo seed (run and control, "
        f"{seed[0]['checkpoints']} checkpoints) {seed[0]['diagnosis_s']:.1f} s -> {seed[1]['diagnosis_s']:.1f} s "
        f"({seed[1]['x_one_by_one']:.1f}x); floors equal to {check['max_floor_rel_diff']:.0e} "
        + _source(d, "bench_diagnosis.py", _rounds(d, "best")),
        "one batched call, the same report to round-off" + ("" if ok else " (not met)"))


# ---------------------------------------------------------------------- the table
def rows() -> list[str]:
    """The benchmark table's rows (docs/benchmarks.md), in order."""
    return [*ladder_sampling_rows(), *student_rows(), *activations_rows(), *factorial_map_rows(),
            *out_of_core_rows(), sampling_row(), posterior_row(), graph_statistics_row(), population_row(), rhm_row(),
            diagnosis_row(), device_row()]


def table() -> list[str]:
    """The benchmark table (docs/benchmarks.md): header (the recording machines' core counts) and :func:`rows`."""
    cores = sorted({_load(name)["machine"]["cpu_count"] for name in TABLE_FILES if name not in OTHER_MACHINES})
    return [f"| benchmark | measured ({'/'.join(map(str, cores))} cores) | target |", "|---|---|---|", *rows()]


def _part(lines: list[str], begin: str) -> tuple[int, int]:
    """The indices in ``lines`` of the line ``begin`` (there must be one) and of the first :data:`END` after it,
    with no other generated part's opening line between them."""
    if lines.count(begin) == 1:
        start = lines.index(begin)
        end = next((i for i in range(start + 1, len(lines)) if lines[i] == END or lines[i].startswith(MARKER)), None)
        if end is not None and lines[end] == END:
            return start, end
    raise ValueError(f"expected one line {begin!r} followed by a line {END!r}")


def replace_table(text: str, lines: list[str], begin: str = BEGIN) -> str:
    """``text`` with the lines strictly between the line ``begin`` (:data:`BEGIN`: the benchmark table) and the
    next :data:`END` replaced by ``lines``."""
    old = text.split("\n")
    start, end = _part(old, begin)
    return "\n".join([*old[:start + 1], *lines, *old[end:]])


def readme_table(text: str, begin: str = BEGIN) -> list[str]:
    """The lines strictly between the line ``begin`` (:data:`BEGIN`: the benchmark table) and the next
    :data:`END` in ``text``."""
    old = text.split("\n")
    start, end = _part(old, begin)
    return old[start + 1:end]


def write(path: Path = BENCHMARKS_DOC, notes: list[str] | None = None) -> bool:
    """Rewrite the generated parts that ``path`` holds, atomically (a temporary file beside it, then
    ``os.replace``), keeping its mode; return whether anything changed.

    The benchmark table (between :data:`BEGIN` and :data:`END`) is rewritten where ``path`` has its markers;
    the notebook table (:func:`notebook_table`, between :data:`NOTEBOOKS_BEGIN` and :data:`END`) where
    ``path`` has its markers and ``notebooks.json`` is recorded: otherwise it is left as it is and a sentence
    saying why is appended to ``notes`` (when given).  A ``path`` with neither opening line is refused
    (``ValueError``): a target that lost its markers would otherwise go stale silently.
    """
    text = path.read_text()
    lines = text.split("\n")
    if BEGIN not in lines and NOTEBOOKS_BEGIN not in lines:
        raise ValueError(f"{path} has no generated part: expected a line {BEGIN!r} or {NOTEBOOKS_BEGIN!r}")
    new = replace_table(text, table()) if BEGIN in lines else text
    skipped = None
    if NOTEBOOKS_BEGIN in lines:
        if notebooks_recorded():
            new = replace_table(new, notebook_table(), NOTEBOOKS_BEGIN)
        else:
            skipped = (f"{RESULTS / 'notebooks.json'} is not recorded (python benchmarks/bench_notebooks.py "
                       "--record): the notebook table is left as it is")
    if skipped is not None and notes is not None:
        notes.append(skipped)
    if new == text:
        return False
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(new)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def write_all(notes: list[str] | None = None) -> list[Path]:
    """:func:`write` every file of :data:`TARGETS`; return those that changed."""
    return [path for path in TARGETS if write(path, notes=notes)]


# ---------------------------------------------------------------------- the notebook table
#: The README's notebook table (section "Notebooks"): per notebook of ``examples/``, in order, its link and what
#: it shows; the last column, "full mode", is its recorded time (:func:`notebook_times`).
NOTEBOOKS = (
    ("[01 From hard to soft](examples/01_hard_to_soft.ipynb)",
     "the SMASO mixture of a ReLU unit; MAP (`infer_discrete`) gives ReLU, variational inference SiLU, "
     "beta-tempered SVI swish; the family of curves as beta moves; Table 1 drawn; the VQ partition of a 2-D "
     "layer, hard and soft; ArviZ summary of posterior region draws"),
    ("[02 The factorial mixture](examples/02_factorial_mixture.ipynb)",
     "exact joint MAP (enumeration) vs factorized MAP vs mean field, with orthogonality (Eq 11) on and off; "
     "the gap against the orthogonality defect; ArviZ views of exact and mean-field posteriors"),
    ("[03 The summarization ladder](examples/03_summarization_ladder.ipynb)",
     "define a ladder (constructor, spec file), sample it reproducibly, sampled vs exact statistics against "
     "the 1/sqrt(N) bound, exact posterior of the label and Bayes accuracy vs leaf noise, ArviZ view of exact "
     "posterior draws of the latent events"),
    ("[04 Student vs reformulation](examples/04_student_vs_reformulation.ipynb)",
     "the summarization teacher and its conditions measured exactly (focus 0, broadness ~1 nat); train, "
     "measure, predict, compare, every number with its noise floor and every one-step error split into its "
     "parts; 5 student seeds against their initialisation and shuffled-label controls; the hidden nodes' "
     "event alignment; noise or failure as N doubles; Thm 3's exactness; the errors as the leaves get "
     "noisier, with and without BN; the top-down teacher for contrast"),
    ("[05 Depth](examples/05_depth.ipynb)",
     "the tent map and its exact network, exact piece counts against the breakpoint bound, the fewest nodes "
     "that can make 2^k pieces at each depth, back-propagation written out; depth separation bracketed "
     "(certified lower bound, explicit member; per class and per architecture) with SGD students and "
     "populations of 64 random restarts, controls on representable targets and random-start deep students"),
)
NOTEBOOKS_WIDTH = 110  # the notebook table's opening sentence is wrapped to lines of at most this many columns


def notebook_stem(link: str) -> str:
    """The notebook a link of :data:`NOTEBOOKS` points at: ``01_hard_to_soft`` for ``[..](examples/01_hard_to_soft
    .ipynb)``."""
    return link.rsplit("(examples/", 1)[1].removesuffix(".ipynb)")


def notebooks_recorded() -> bool:
    """Whether ``benchmarks/results/notebooks.json`` (``bench_notebooks.py --record``) exists."""
    return (RESULTS / "notebooks.json").exists()


def _notebooks() -> dict:
    """``results/notebooks.json``, checked to hold full-mode times (a CI-mode time is not one)."""
    d = _load("notebooks")
    ci = [r["notebook"] for r in d["results"] if r["mode"] != "full"]
    if d["config"]["quick"] or ci:
        raise ValueError(f"{RESULTS / 'notebooks.json'} holds CI-mode times ({', '.join(ci) or '--quick'}): "
                         "record full mode, python benchmarks/bench_notebooks.py --record")
    return d


def notebook_times() -> dict[str, str]:
    """``{stem: "NN s"}``: each notebook's median full-mode time, rounded to whole seconds, from
    ``results/notebooks.json``."""
    return {r["notebook"]: f"{round(r['median_s'])} s" for r in _notebooks()["results"]}


def notebook_table() -> list[str]:
    """The README's notebook table: its opening sentence (where the times come from: the runs of
    ``bench_notebooks.py`` they are the median of, the recording's date and load), a blank line, the header and
    one row per notebook of :data:`NOTEBOOKS` with its recorded time."""
    d = _notebooks()
    times = notebook_times()
    stems = [notebook_stem(link) for link, _ in NOTEBOOKS]
    if set(times) != set(stems):
        raise ValueError(f"notebooks.json has no time of {sorted(set(stems) - set(times))} and report.NOTEBOOKS "
                         f"no row of {sorted(set(times) - set(stems))}")
    runs = sorted({len(r["seconds"]) for r in d["results"]})
    statistic = "one run" if runs == [1] else f"the median of {'-'.join(map(str, runs))} runs"
    sentence = (f"Full-mode run times, last column: {statistic} of each notebook by "
                "`benchmarks/bench_notebooks.py`, each in a fresh kernel, on "
                f"{d['machine']['cpu_count']} cores ({_date(d)}, {_load_avg(d)}); the table is generated by "
                "`benchmarks/report.py`.")
    lines = textwrap.wrap(sentence, NOTEBOOKS_WIDTH, break_long_words=False, break_on_hyphens=False)
    return [*lines, "", "| notebook | what it shows | full mode |", "|---|---|---|",
            *(f"| {link} | {what} | {times[stem]} |" for (link, what), stem in zip(NOTEBOOKS, stems, strict=True))]


# ---------------------------------------------------------------------- "What the demo shows"
#: The demo's student levels (0 the linear output, 1 the readout group: both have the label as their event).
DEMO_LEVELS = {0: "0 (label, linear output)", 1: "1 (label, readout group)", 2: "2 (teacher level 1)",
               3: "3 (teacher level 2)"}

#: The reformulation table's columns: (heading, summary key).
DEMO_TERMS = (("F one step", "F_local"), ("F focus part", "F_local_focus"),
              ("F decorrelation part", "F_local_decorrelation"), ("G~ one step", "G_local"),
              ("G~ broadness part", "G_local_broadness"), ("G~ decorrelation part", "G_local_decorrelation"))
#: The reformulation table's arms: (row label, key under the summary's ``controls``; None: the trained students).
DEMO_ARMS = (("trained", None), ("init", "init"), ("shuffled labels", "shuffled"))


def _number(v: float) -> str:
    return f"{v:.2g}".replace("e-0", "e-")


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _term(level: dict, key: str, noise: bool = True) -> str:
    """One cell of the reformulation table, as ``smaso demo`` prints it: ``median [min..max]`` over the seeds,
    with ``(noise)`` and ``*`` (within noise) for the trained students; ``0 (identity)`` or ``= its ... part
    (identity)`` where ``smaso.student.seeds`` found an identity; ``n/a`` where the number is undefined in every
    seed (JSON null) and the count and reason where in some; ``-`` where it is not measured."""
    same = (level.get("identity") or {}).get(key)
    if same == "0":
        return "0 (identity)"
    if same:
        return f"= its {same.rsplit('_', 1)[1]} part (identity)"
    if key not in level:
        return "-"
    v, lo, hi = level[key], level.get(f"{key}_min"), level.get(f"{key}_max")
    text = "n/a" if not _finite(v) else f"{_number(v)} [{_number(lo)}..{_number(hi)}]"
    if noise and _finite(v):
        parts = [x for x in (level.get(f"{key}_floor"), level.get(f"{key}_seed_se")) if _finite(x)]
        if parts:
            text += f" ({max(parts):.0e})".replace("e-0", "e-").replace("0e+00", "0")
        text += "*" if key in level.get("within_noise", ()) else ""
    bad = (level.get("undefined") or {}).get(key)
    if bad:
        text += f" (undefined in {len(bad['seeds'])} of {bad['of']} seeds: {'; '.join(dict.fromkeys(bad['reasons']))})"
    return text


def _workers_words(wall: dict) -> str:
    """How many worker processes the demo's default ``--workers`` used (per run where the file records it)."""
    ws = wall["workers"] if isinstance(wall.get("workers"), list) else [wall["workers"]]
    n = max(ws) if min(ws) == max(ws) else f"{min(ws)}-{max(ws)}"
    return f"{n} worker process{'es' if n != 1 else ''} beside the main one"


def reformulation_rows(summary: dict) -> list[str]:
    """The README's reformulation table rows: per level, the trained students and each control the summary holds
    (``smaso.student.seeds.SeedSummary.to_dict``), each quantity of :data:`DEMO_TERMS` as :func:`_term`."""
    controls = summary.get("controls") or {}
    arms = [(label, summary if name is None else controls[name]) for label, name in DEMO_ARMS
            if name is None or name in controls]
    rows = []
    for i, lv in enumerate(summary["levels"]):
        for label, arm in arms:
            row = arm["levels"][i]
            rows.append(f"| {lv['level']} | {label} | "
                        + " | ".join(_term(row, key, noise=label == "trained") for _, key in DEMO_TERMS) + " |")
    return rows


def _linear_ceiling(acc: dict) -> str:
    """The linear top's ceiling as the demo's report holds it: the value where certified, else its proven bounds
    (the lower one rounded down, the upper up); a report recorded before the certificate (issue 36) holds the
    value alone."""
    lower, certified = acc["ceiling_linear_top"], acc.get("ceiling_linear_top_certified")
    if lower is None:
        return "not computed"
    if certified is None or certified:
        return f"{lower:.4f}"
    lo, hi = math.floor(lower * 1e4) / 1e4, math.ceil(acc["ceiling_linear_top_upper"] * 1e4) / 1e4
    return f">= {lo:.4f} (<= {hi:.4f}, not certified)"


def _matched(rows: list[dict]) -> str:
    """The event indicators matched at the alignment's threshold, over seeds: ``"1-2 of 4"``."""
    of = {a["indicators"] for a in rows}
    return f"{_span([a['matched'] for a in rows], 'd')} of {'/'.join(map(str, sorted(of)))}"


def demo_rows() -> list[str]:
    """The figures of the README's "What the demo shows", from ``results/demo.json``."""
    d = _load("demo")
    runs, summary = d["results"], d["summary"]
    acc = runs[0]["accuracy"]
    seeds = [r["seed"] for r in runs]
    held = [r["accuracy"]["held_out_accuracy"] for r in runs]
    accuracy = [
        f"| Bayes-optimal accuracy of the teacher (exact posterior of x) | {acc['bayes']:.4f} |",
        f"| class ceiling, linear top (additive over the root's two children) | {_linear_ceiling(acc)} |",
        f"| class ceiling, readout of >= {acc['readout_width_needed']} nodes | {acc['ceiling_readout']:.4f} |",
        f"| loss-optimal linear top (squared loss) | {acc['loss_optimal_linear_top']:.4f} |",
        f"| this student (readout 32), seed {runs[0]['seed']}, on {acc['held_out_rows']} held-out rows "
        f"| {acc['held_out_accuracy']:.4f} |"]
    seeds_line = (f"Over student seeds {', '.join(map(str, seeds))} the held-out accuracy is "
                  f"{', '.join(f'{a:.4f}' for a in held)} (median {statistics.median(held):.4f}).")
    wall = d["wall"]
    wall_line = (f"`smaso demo` takes {wall['median_s']:.0f} s end to end on {d['machine']['cpu_count']} cores "
                 f"(median of {len(wall['seconds'])} runs, {wall['median_cpu_s']:.0f} s of CPU, "
                 f"{_load_avg(d)}; `bench_demo.py`).")
    if "busy" in wall:  # (issue 37: quiet and beside two busy processes, interleaved)
        busy = wall["busy"]
        loads = [*wall["loadavg_before"], *busy["loadavg_before"], *wall.get("serial", {}).get("loadavg_before", [])]
        wall_line = (f"`smaso demo` takes {wall['median_s']:.0f} s end to end on {d['machine']['cpu_count']} cores "
                     f"and {busy['median_s']:.0f} s beside two busy processes ({wall['busy_over_quiet']:.2f}x; "
                     f"medians of {len(wall['seconds'])} interleaved runs each, {wall['median_cpu_s']:.0f} and "
                     f"{busy['median_cpu_s']:.0f} s of CPU, " + _workers_words(wall)
                     + (f"; {wall['serial']['median_s']:.0f} s with `--workers 0`" if "serial" in wall else "")
                     + f"; the machine is shared: 1-minute load {min(loads):.1f}-{max(loads):.1f} before the "
                     "runs; `bench_demo.py`).")
    terms = reformulation_rows(summary)
    alignment = []
    for level, name in DEMO_LEVELS.items():
        start = [r["alignment_start"][level] for r in runs]
        end = [r["alignment_end"][level] for r in runs]
        control = [r["control_end"][level] for r in runs]
        chance = _span([a["probe_chance"] for a in start])
        alignment.append(
            f"| {name} | {_span([a['eta2'] for a in start], '.3f')} -> {_span([a['eta2'] for a in end], '.3f')} "
            f"| {_span([a['eta2'] for a in control], '.3f')} "
            f"| {_span([a['spec'] for a in start])} -> {_span([a['spec'] for a in end])} "
            f"| {_matched(end)} ({_matched(control)}) "
            f"| {_span([a['kept'] for a in end])} ({_span([a['kept'] for a in control])}) "
            f"| {_span([a['probe'] for a in start])} -> {_span([a['probe'] for a in end])} ({chance}) |")
    return [*accuracy, seeds_line, wall_line, *terms, *alignment]


def demo_claims() -> dict[str, bool]:
    """The README's wordings about the demo, each checked on ``results/demo.json`` (all must be True)."""
    d = _load("demo")
    runs, levels = d["results"], d["summary"]["levels"]

    def end(level, key):
        return [r["alignment_end"][level][key] for r in runs]

    def start(level, key):
        return [r["alignment_start"][level][key] for r in runs]

    def control(level, key):
        return [r["control_end"][level][key] for r in runs]

    controls = d["summary"].get("controls") or {}
    init, shuffled = (controls.get(k, {}).get("levels") for k in ("init", "shuffled"))

    def identity(level, key):
        return (levels[level].get("identity") or {}).get(key)

    def per_seed(arm, level, key):
        return (arm[level].get("per_seed") or {}).get(key, []) if arm else []

    def above(a, b):
        """In every seed (the seeds in the same order in every arm: a paired comparison)."""
        return len(a) == len(b) > 0 and all(x is not None and y is not None and x > y
                                            for x, y in zip(a, b, strict=True))

    decor, broad = "F_local_decorrelation", "G_local_broadness"
    tr_range = (levels[1][f"{decor}_min"], levels[1][f"{decor}_max"])
    shuffled_readout = shuffled[1][decor] if shuffled else None
    return {
        "held-out accuracy >= 0.95 of Bayes in every seed":
            all(r["accuracy"]["held_out_accuracy"] >= 0.95 * r["accuracy"]["bayes"] for r in runs),
        "identity: the linear output (level 0) has no decorrelation part and one-step errors 0":
            all(identity(0, k) == "0" for k in ("F_local", "F_local_focus", decor, "G_local", broad,
                                                "G_local_decorrelation")),
        "identity: focus is 0 at level 3 and broadness at level 1; there the one-step error is the other part":
            identity(3, "F_local_focus") == "0" and identity(1, broad) == "0"
            and identity(3, "F_local") == decor and identity(1, "G_local") == "G_local_decorrelation",
        "focus is within noise at levels 1 and 2, and the split is exact in every row of every run":
            all("F_local_focus" in levels[lv]["within_noise"] for lv in (1, 2))
            and all({"F_local", "G_local"} <= set(lv.get("split_holds", ())) for lv in levels),
        "empirical: training raises the F decorrelation part above its initial value in every seed, every hidden "
        "level; the ranges are apart at levels 1 and 2 and overlap at level 3":
            all(above(per_seed(levels, lv, decor), per_seed(init, lv, decor)) for lv in (1, 2, 3))
            and all(levels[lv][f"{decor}_min"] > init[lv][f"{decor}_max"] for lv in (1, 2))
            and levels[3][f"{decor}_min"] <= init[3][f"{decor}_max"],
        "empirical: at teacher level 1 the trained F decorrelation and G~ broadness parts are above the shuffled "
        "labels' in every seed":
            all(above(per_seed(levels, 2, k), per_seed(shuffled, 2, k)) for k in (decor, broad)),
        "empirical: at the readout level shuffled labels raise the F decorrelation part above init in every seed, "
        "its median inside the trained range":
            above(per_seed(shuffled, 1, decor), per_seed(init, 1, decor))
            and shuffled_readout is not None and tr_range[0] <= shuffled_readout <= tr_range[1],
        "empirical: broadness is the larger G~ part at levels 2 and 3 and above its initial value, in every seed":
            all(above(per_seed(levels, lv, broad), per_seed(levels, lv, "G_local_decorrelation"))
                and above(per_seed(levels, lv, broad), per_seed(init, lv, broad)) for lv in (2, 3)),
        "the readout level and teacher level 1 become selective (eta2, spec, probe rise in every seed)":
            all(min(end(lv, k)) > max(start(lv, k)) for lv in (1, 2) for k in ("eta2", "spec", "probe")),
        "with shuffled labels their eta2 ends below every trained seed's, near its value at initialisation":
            all(max(control(lv, "eta2")) < min(end(lv, "eta2"))
                and max(control(lv, "eta2")) <= 1.25 * max(start(lv, "eta2")) for lv in (1, 2)),
        "teacher level 2's probe is 1 already at initialisation":
            min(start(3, "probe")) >= 0.995,
        "no indicator of the readout group or teacher level 1 has a node matched at 0.95 in any seed":
            all(m == 0 for lv in (1, 2) for m in end(lv, "matched")),
        "at the teacher's levels training keeps fewer initial best nodes than shuffled labels (medians over seeds)":
            all(statistics.median(end(lv, "kept")) < statistics.median(control(lv, "kept")) for lv in (2, 3)),
    }


def main(argv: list[str] | None = None) -> None:
    """Print the tables, the demo rows and the claims; with ``--write``, rewrite the tables in :data:`TARGETS`."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = " and ".join(str(path.relative_to(HERE.parent)) for path in TARGETS)
    p.add_argument("--write", action="store_true",
                   help=f"rewrite the tables in {names} in place, between {BEGIN} (the benchmarks) or "
                        f"{NOTEBOOKS_BEGIN} (the notebooks, once notebooks.json is recorded) and {END}")
    args = p.parse_args(argv)
    print("\n".join(table()))
    print()
    if notebooks_recorded():
        print("\n".join(notebook_table()))
    else:
        print("(no notebook table: benchmarks/results/notebooks.json is not recorded)")
    print()
    print("\n".join(demo_rows()))
    for claim, holds in demo_claims().items():
        print(f"{'holds' if holds else 'FAILS'}: {claim}")
    if args.write:
        notes: list[str] = []
        changed = write_all(notes=notes)
        print()
        for path in TARGETS:
            print(f"{path}: {'tables rewritten' if path in changed else 'tables already up to date'}")
        for note in notes:
            print(f"note: {note}")


if __name__ == "__main__":
    main()
