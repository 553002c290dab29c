"""Benchmark: the locally connected student's training epoch, with and without frequency statistics.

What is measured, in one process, on ``Ladder.random(depth, branching, events, seed=seed)`` (341 regions,
one-hot leaves of 16 for the defaults), a ``LadderStudent(ladder, width, dtype=torch.float32)`` and
N examples drawn with ``teachers.sampling.sample_ladder`` (default N = 65536), in minibatches of
``--batch-size`` (default 1024); the squared loss throughout.  One *epoch* = one pass over the N examples
at fixed weights (no optimizer step: every contender does the same forward and backward work).

Target 1 -- frequency statistics cost at most 1.3x a plain epoch:

- ``plain``: per minibatch ``student.zero_grad(set_to_none=True)``, ``loss = student.loss(student(x), y)``,
  ``loss.backward()`` (autograd; what an ordinary training epoch costs);
- ``stats f32`` (judged) / ``stats f64``: per minibatch ``rec = student.forward_backward(x, y, stacked=buffers)``
  (the previous minibatch's ``rec.stacked``, reused as ``collect_statistics`` does) and
  ``acc.add(rec, z)`` on a ``smaso.student.frequency.FrequencyAccumulator`` with float32 (its default for a
  float32 student) or float64 (on request) accumulation, plus building the accumulator and one
  ``acc.result()`` at the end of the epoch;
- ``stats f32 compiled`` (reported, not judged): the ``stats f32`` epoch with
  ``FrequencyAccumulator(kernel="compiled")`` (the batch sums as compiled segment sums,
  :mod:`smaso.student.event_kernels`, over the record written batch-major, ``layout=acc.record_layout()``, as
  ``collect_statistics`` runs it: :mod:`smaso.student.batch_record`), compiled before the warm-up: ``compile_s``
  (the first ``add`` in the process less the second) and ``amortised_after_batches`` (``compile_s`` over the saving
  per minibatch against ``stats f32``) are recorded beside the steady state; ``stats_overhead_compiled`` /
  ``stats_compiled_over_eager`` its ratios;
- ``explicit fwd+bwd`` (reference row): ``student.forward_backward(x, y)`` alone, no accumulation;
- ``explicit stacked`` (reference row): the same into the previous minibatch's stacked buffers, as the stats rows
  run it: the stats epoch less the accumulation, so ``explicit_stacked_overhead`` is the floor under
  ``stats_overhead`` that no accumulator reaches below, and ``stats_over_explicit_stacked`` the accumulation's own
  share (both reported, not judged).

The same five rows are run for a Batch-Norm student (``batch_norm=True``); the BN float32 ratio is a
target too, against the library's own explicit BN forward+backward (``explicit fwd+bwd (BN)``), not
autograd's (``plain (BN)``, which is itself several times a plain pass; that ratio is reported only), and
its float64 ratio is reported only.

Target 3 -- the one student of every ladder is as fast on a uniform tree as the tree-only code it replaced:
``reference stats f32`` (and its BN twin) runs the same statistics epoch through today's tree code kept in
``benchmarks/reference/`` (``tree_student_network.LadderStudent`` with the same weights and
``tree_student_frequency.FrequencyAccumulator``, copies of ``smaso/student/network.py`` and ``frequency.py`` at
commit 3494c95); ``stats f32`` / ``reference stats f32`` is judged against 1.1x.  The load average at the start
and the end of the run is recorded (``machine.loadavg_start`` / ``loadavg_end``): above the number of cores the
ratios are noise.

Target 2 -- the locally connected (LC) forward+backward at most 1.5x a dense network of equal work:
the LC contender is the ``plain`` row above (``student(x)`` + backward, float32).  Level l of the student
does R_l * (b_l * n_{l+1}) * n_l = R_{l+1} * n_{l+1} * n_l multiply-adds (MACs) per example.  The dense
reference ``dense`` is a chain of ``nn.Linear(K_l, J_l)`` (with bias), one per level, with
K_l * J_l = that level's MACs and each layer's input the previous layer's output: J_0 = n_0 (classes),
K_l = MACs_l / J_l, J_{l+1} = K_l (for the defaults 256 -> 256 -> 64 -> 64 -> 16).  It uses the student's
own activation objects (hidden ``student.activation``, top ``student.top_activation``), applied as the
student's forward applies them (``Activation.apply_``: in place on the fresh layer output), the same squared
loss, the same batch size and labels, a float32 Gaussian input of width K_d drawn outside the timing, and
is timed the same way.  Equal MACs at every layer means the dense net has fewer activations than the
LC one (its input is K_d = 256 wide, the student's R_d * n_d = 4096): moving the LC layer's larger,
region-batched activations is part of what the ratio measures.

The same LC pass on one-hot inputs given by their leaf events, ``plain (leaf events)``: per minibatch
``student(z, events_checked=True)`` with z = the sample's leaf events ``(N, R_d)`` (uint8, as stored; the range is
checked once, where the data enters), so the leaf level is a gather of weight rows rather than a matmul on the
4096-wide one-hot (``smaso.student.connectivity.OneHotLeaves``; the same outputs to round-off), and on this uniform
tree every level runs batch-major (``smaso.student.batch_major``: the gather's ``(N, R, n)`` layout throughout, one
batched matmul per level forward and two backward, no transposes between levels).  The one-hot that the leaf weight
gradient's matmul reads is built inside the timed backward, from the events; the ``plain`` row's one-hot x is built
outside the timing.  ``plain (one-hot x, declared)``: ``student(x, one_hot_checked=True)`` on the same one-hot x,
declared one-hot (validated once where the data entered, as the leaf events' range is): the forward reads x as
its leaf events (one matrix-vector pass, inside the timing) and runs the events' path; its ratio to ``dense``,
``locally_connected_vs_dense_one_hot_declared``, is reported (target 1.5x, not judged).
``plain (leaf events, compiled)`` and ``plain (one-hot x, declared, compiled)``: the same two passes on a student
with the same weights built with ``kernel="compiled"`` (:mod:`smaso.student.leaf_kernels`: the leaf weight
gradient an inductor-compiled gated segment sum instead of the one-hot matmul; the library's default ``"auto"``
compiles only after ~10^9 (example, leaf edge) pairs, so the uncompiled rows are what a short run gets);
their one-off compilation is timed before the epochs (``compile_s``: the first minibatch less the second) and
``amortised_after_batches`` says how many minibatches' savings over the eager row pay it back.
``locally_connected_vs_dense_events_compiled`` (judged, target 1.5x, compilation excluded: steady state is the
target).  ``dense (torch.compile)``: the dense chain under
``torch.compile`` (its ``compile_s`` too), labelled and not judged: the dense contender is the eager chain a user
writes (``locally_connected_compiled_vs_dense_compiled`` is reported).  ``compile_s`` depends on inductor's on-disk
cache (``/tmp/torchinductor_$USER``): a process after an earlier run compiles faster (the leaf kernels took 3-5 s
warm, 20 s cold at load 3.5).
``locally_connected_vs_dense_events`` (judged, target 1.5x) is ``plain (leaf events)``
over ``dense``, beside ``locally_connected_vs_dense`` (the one-hot float input, judged as before).  The ``plain``,
``plain (BN)``, ``plain (leaf events)``, ``dense``, ``explicit`` and ``stats`` rows (not the reference's) record
``minor_faults_per_batch``, per call of the contender (the warm-up first): the pages its timed parts faulted in fresh
(glibc hands freed blocks of a few MB back to the system, and a step that allocates several pays for every page
again; the student's autograd paths and a pass into reused stacked buffers reuse theirs; a call's first stacked pass
makes its buffers: about 4,000 pages over the epoch's 64 minibatches).

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
import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from smaso.student.frequency import FrequencyAccumulator
from smaso.student.network import LadderStudent
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common beside this script, also when loaded by path
sys.path.insert(0, str(Path(__file__).resolve().parent / "reference"))  # today's tree code, the reference
import _common as common
import tree_student_frequency as reference_frequency
import tree_student_network as reference_network

DEFAULT_OUT = common.default_out("student")
QUICK_N, QUICK_REPEATS = 2048, 1
STATS_TARGET = 1.3  # instrumented epoch (float64 accumulation) over the plain epoch, at most
DENSE_TARGET = 1.5  # LC forward+backward over the equal-MACs dense forward+backward, at most
REFERENCE_TARGET = 1.1  # the one student's statistics epoch over today's tree code's, at most
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
    common.add_threads_arg(p)
    p.add_argument("--no-bn", action="store_true", help="skip the Batch-Norm rows")
    common.add_quick_out_args(p, f"smoke run: N={QUICK_N}, repeats={QUICK_REPEATS}", DEFAULT_OUT)
    args = p.parse_args(argv)
    common.fill_defaults(args, {"n": QUICK_N, "repeats": QUICK_REPEATS}, {"n": 65536, "repeats": 3})
    common.require_positive(p, args, ("n", "batch_size", "depth", "branching", "events", "width", "repeats"))
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

    def events(self, i: int) -> torch.Tensor:
        """The leaf events of minibatch ``i`` ``(n, R_d)``, as the sample stores them (a view)."""
        return self.sample.z[self.bounds(i), self.sample.ladder.level_offsets[-2]:]

    def dense_x(self, i: int) -> torch.Tensor:
        sl = self.bounds(i)
        g = torch.Generator().manual_seed(self.seed * 100_003 + i)
        return torch.randn(sl.stop - sl.start, self.dense_width, generator=g, dtype=torch.float32)


# ---------------------------------------------------------------------- contenders
# Each returns run(batch_indices) -> seconds: the summed times of the timed parts of the minibatches.

def _minor_faults() -> int:
    """This process's minor page faults so far (0 where ``resource`` is missing)."""
    try:
        import resource
    except ImportError:  # not on this platform
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def autograd_runner(model: nn.Module, loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                    inputs: Callable[[int], torch.Tensor], data: Batches, events: bool = False,
                    faults: list[float] | None = None, one_hot: bool = False) -> Callable[[list[int]], list[float]]:
    """Per minibatch ``model.zero_grad(set_to_none=True)``, ``loss(model(x), y)``, ``backward()`` (autograd),
    with ``x = inputs(i)`` built outside the timed region: the ``plain`` rows (the student on its one-hot
    inputs, or with ``events`` on its leaf events, ``model(x, events_checked=True)``) and the ``dense`` row (the
    dense chain on its Gaussian inputs; with ``one_hot`` the student on its one-hot inputs declared one-hot,
    ``model(x, one_hot_checked=True)``).  ``faults``: appended per call, the minor page faults per minibatch of
    the timed parts (freshly faulted-in pages: freed large blocks that the allocator handed back to the system)."""
    kw = {"events_checked": True} if events else {"one_hot_checked": True} if one_hot else {}

    def run(batches: list[int]) -> list[float]:
        times, count = [], 0
        for i in batches:
            x, y = inputs(i), data.y[data.bounds(i)]
            f0, t0 = _minor_faults(), time.perf_counter()
            model.zero_grad(set_to_none=True)
            value = loss(model(x, **kw), y)
            value.backward()
            times.append(time.perf_counter() - t0)
            count += _minor_faults() - f0
        if faults is not None:
            faults.append(count / max(1, len(batches)))
        assert torch.isfinite(value)
        return times
    return run


def explicit_runner(student: LadderStudent, data: Batches, stacked: bool = False,
                    faults: list[float] | None = None) -> Callable[[list[int]], list[float]]:
    """Per minibatch ``student.forward_backward(x, y)``; with ``stacked`` into the previous minibatch's stacked
    buffers as the stats rows run it (``stacked=rec.stacked``): the statistics epoch less its accumulation.
    ``faults``: as :func:`autograd_runner`'s (the first minibatch of a call makes its stacked buffers)."""
    def run(batches: list[int]) -> list[float]:
        times: list[float] = []
        buffers: bool | list[torch.Tensor] = stacked
        count = 0
        for i in batches:
            x, y = data.x(i), data.y[data.bounds(i)]
            f0, t0 = _minor_faults(), time.perf_counter()
            rec = student.forward_backward(x, y, stacked=buffers)
            times.append(time.perf_counter() - t0)
            count += _minor_faults() - f0
            buffers = rec.stacked if stacked else False
        if faults is not None:
            faults.append(count / max(1, len(batches)))
        assert np.isfinite(rec.loss)
        return times
    return run


def stats_runner(student: LadderStudent, data: Batches, dtype: torch.dtype,
                 accumulator: type = FrequencyAccumulator, faults: list[float] | None = None,
                 kernel: str | None = None) -> Callable[[list[int]], list[float]]:
    """Per-minibatch times, then one last entry: building the accumulator plus ``acc.result()`` (``accumulator``:
    the library's, or the reference tree code's with its student).  ``faults``: as :func:`autograd_runner`'s, of
    the minibatches' ``forward_backward`` + ``add`` (the first makes the stacked buffers).  ``kernel``: the
    library accumulator's ``kernel=`` (None: its default, ``"auto"``, which is eager for an accumulator that is not
    told how many rows it will see, as here)."""
    def run(batches: list[int]) -> list[float]:
        t0 = time.perf_counter()
        acc = accumulator(student, dtype) if kernel is None else accumulator(student, dtype, kernel=kernel)
        setup = time.perf_counter() - t0
        times = []
        buffers = True
        count = 0
        # as collect_statistics does: the record in the layout the accumulator reads (batch-major for the compiled
        # sums, node-major for the eager ones; the reference tree code knows only the latter)
        layout = {"layout": acc.record_layout()} if hasattr(acc, "record_layout") else {}
        for i in batches:
            sl = data.bounds(i)
            x, y, z = data.x(i), data.y[sl], data.sample.z[sl]
            f0, t0 = _minor_faults(), time.perf_counter()
            rec = student.forward_backward(x, y, stacked=buffers, **layout)
            acc.add(rec, z)
            buffers = rec.stacked
            times.append(time.perf_counter() - t0)
            count += _minor_faults() - f0
        if faults is not None:
            faults.append(count / max(1, len(batches)))
        t0 = time.perf_counter()
        stats = acc.result()
        times.append(setup + time.perf_counter() - t0)
        assert stats.num_examples == sum(data.bounds(i).stop - data.bounds(i).start for i in batches)
        return times
    return run


def compile_seconds(student: LadderStudent, data: Batches, dtype: torch.dtype, kernel: str) -> float:
    """The compilation a ``kernel="compiled"`` accumulator pays once per process: its first ``add`` of the first
    minibatch less its second ``add`` of the same minibatch (:func:`_compile_seconds`, as the LC rows are timed)."""
    acc, z = FrequencyAccumulator(student, dtype, kernel=kernel), data.sample.z[data.bounds(0)]
    rec = student.forward_backward(data.x(0), data.y[data.bounds(0)], stacked=True, layout=acc.record_layout())

    def add_once(_: list[int]) -> list[float]:
        t0 = time.perf_counter()
        acc.add(rec, z)
        return [time.perf_counter() - t0]
    return _compile_seconds(add_once)


class DenseNet(nn.Module):
    """Chain of nn.Linear layers (dims[0] -> dims[1] -> ... -> dims[-1]) with the student's activations."""

    def __init__(self, dims: list[int], student: LadderStudent, seed: int, in_place: bool = True):
        super().__init__()
        self.in_place = in_place
        with torch.random.fork_rng():  # nn.Linear's default init, seeded, without touching the global stream
            torch.manual_seed(seed)
            self.layers = nn.ModuleList([nn.Linear(dims[i], dims[i + 1]) for i in range(len(dims) - 1)])
        self.hidden, self.top = student.activation, student.top_activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            # by default the student's activation applied as the student applies it: in place on the fresh
            # layer output; in_place=False is nn.Sequential(nn.Linear, nn.ReLU())'s out-of-place style
            act = self.top if i == len(self.layers) - 1 else self.hidden
            x = act.apply_(layer(x)) if self.in_place else act(layer(x))
        return x


def _compile_seconds(run: Callable[[list[int]], list[float]]) -> float:
    """The compilation a contender pays once per process: its first minibatch's time less its second's (the
    same minibatch again, compiled code cached)."""
    first = run([0])[0]
    return max(0.0, first - run([0])[0])


def lc_compiled_contenders(student: LadderStudent, data: Batches, dims: list[int], seed: int) -> list[dict]:
    """The LC rows with the compiled leaf weight gradient (``LadderStudent(kernel="compiled")``, the same weights
    as ``student``: :mod:`smaso.student.leaf_kernels`) on leaf events (judged) and on one-hot x declared
    (reported), and the dense chain under ``torch.compile`` (labelled, not judged: the contender a user writes is
    the eager one).  Each row records ``compile_s``, the one-off compilation, measured before the timed epochs
    (steady state is the target) and ``amortised_after_batches`` is filled in once the eager rows are timed."""
    st = LadderStudent(student.ladder, width=student.widths[1], dtype=torch.float32, seed=seed, kernel="compiled")
    st.load_state_dict(student.state_dict())
    rows: list[dict] = []
    for name, kw, inputs in (("plain (leaf events, compiled)", {"events": True}, data.events),
                             ("plain (one-hot x, declared, compiled)", {"one_hot": True}, data.x)):
        # one kernel for both rows (the same student and shapes): the second row's compile_s is the first's; timed
        # by a runner of its own, so that the faults recorded start with the warm-up as in the other rows
        compile_s = _compile_seconds(autograd_runner(st, st.loss, inputs, data, **kw)) if not rows else \
            rows[0]["compile_s"]
        faults: list[float] = []
        run = autograd_runner(st, st.loss, inputs, data, faults=faults, **kw)
        rows.append({"contender": name, "description": f"as {name.replace(', compiled', '')!r} with "
                     "LadderStudent(kernel='compiled'): the leaf weight gradient an inductor-compiled segment sum",
                     "batch_norm": False, "accumulation": None, "target": True, "minor_faults_per_batch": faults,
                     "compile_s": compile_s, "run": run})
    net = DenseNet(dims, student, seed)
    run = autograd_runner(torch.compile(net, fullgraph=True, dynamic=False), student.loss, data.dense_x, data)
    rows.append({"contender": "dense (torch.compile)", "description": "the dense chain under torch.compile "
                 "(fullgraph, inductor; labelled, not judged)", "batch_norm": False, "accumulation": None,
                 "target": False, "compile_s": _compile_seconds(run), "run": run})
    return rows


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


def measure_round_robin(contenders: list[dict], num_batches: int, repeats: int, warmup_batches: int) -> None:
    """Warm up every contender, then time ``repeats`` epochs of each, round-robin; fills in the timing keys."""
    all_batches = list(range(num_batches))
    for c in contenders:
        print(f"  warm-up: {c['contender']} ({min(warmup_batches, num_batches)} minibatch(es))", flush=True)
        if warmup_batches:
            c["run"](all_batches[:warmup_batches])

    def progress(r: int, i: int, parts: list[float]) -> None:
        print(f" {contenders[i]['contender']} {sum(parts):.2f}s;", end="\n" if i == len(contenders) - 1 else "",
              flush=True)

    parts, cpu = common.round_robin([functools.partial(c["run"], all_batches) for c in contenders], repeats,
                                    lambda r: print(f"  epoch {r + 1}/{repeats}:", end="", flush=True), progress)
    for c, c_parts, c_cpu in zip(contenders, parts, cpu, strict=True):
        c["times_s"], c["process_cpu_s"], c["part_times"] = [sum(p) for p in c_parts], c_cpu, c_parts


def finish_row(c: dict, n: int, num_batches: int, batch_size: int, repeats: int) -> dict:
    best, median = common.best_median(c["times_s"])
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
def _best_cpu(r: dict) -> float:
    """Process CPU time of the best epoch."""
    return r["process_cpu_s"][r["times_s"].index(r["best_s"])]


TABLE = (common.Column("contender", 25, "contender", align="<"),
         common.Column("BN", 3, lambda r: "yes" if r["batch_norm"] else "no"),
         common.Column("accum", 7, lambda r: r["accumulation"] or "-"),
         common.Column("seconds", 8, "best_s", ".3f"),
         common.Column("median", 8, "median_s", ".3f"),
         common.Column("b-min", 8, "batch_min_sum_s", ".3f"),
         common.Column("CPU s", 7, _best_cpu, ".2f"),
         common.Column("ms/batch", 9, "ms_per_batch", ".2f"),
         common.Column("examples/s", 11, "examples_per_s", ".4g"),
         common.Column("x plain", 8, "x_plain", ".2f"))
TABLE_NOTE = ("(seconds = best epoch of the repeats; b-min = sum over the minibatches of each one's fastest time; "
              "CPU s = process CPU time of the best epoch, all threads and the untimed input building included; "
              "x plain = seconds / seconds of the plain autograd epoch with the same BN setting)")


def _eager_twin(contender: str) -> str:
    """The eager row a compiled row is set against: ``stats f32 compiled (BN)`` -> ``stats f32 (BN)``,
    ``plain (leaf events, compiled)`` -> ``plain (leaf events)``, ``dense (torch.compile)`` -> ``dense``."""
    return contender.replace(", compiled)", ")").replace(" compiled", "").replace(" (torch.compile)", "")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    wall0 = common.start(args.threads)
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
          f"sampled in {sample_s:.2f} s; {common.torch_summary()}")
    print(f"MACs per example, level 0..{args.depth}: student {macs} (total {sum(macs)}); dense chain "
          f"{' -> '.join(map(str, dims))}: {dense_macs} (total {sum(dense_macs)})")
    info = common.machine_info()

    contenders = []
    for bn, st in students.items():
        tag = " (BN)" if bn else ""
        contenders.append({"contender": "plain" + tag, "description": "student(x), student.loss, loss.backward() "
                           "(autograd), zero_grad per minibatch", "batch_norm": bn, "accumulation": None,
                           "target": True, "minor_faults_per_batch": (faults := []),
                           "run": autograd_runner(st, st.loss, data.x, data, faults=faults)})
        contenders.append({"contender": "explicit fwd+bwd" + tag, "description": "student.forward_backward(x, y) "
                           "alone (no accumulation)", "batch_norm": bn, "accumulation": None, "target": False,
                           "minor_faults_per_batch": (faults := []), "run": explicit_runner(st, data, faults=faults)})
        contenders.append({"contender": "explicit stacked" + tag, "description": "student.forward_backward(x, y, "
                           "stacked=previous buffers) alone: the stats rows' pass without the accumulation",
                           "batch_norm": bn, "accumulation": None, "target": False,
                           "minor_faults_per_batch": (faults := []),
                           "run": explicit_runner(st, data, stacked=True, faults=faults)})
        for name, short, dt in (("float64", "f64", torch.float64), ("float32", "f32", torch.float32)):
            contenders.append({"contender": f"stats {short}" + tag,
                               "description": f"forward_backward + FrequencyAccumulator({name}).add per minibatch, "
                               "result() once", "batch_norm": bn, "accumulation": name,
                               "target": name == JUDGED_ACCUMULATION, "minor_faults_per_batch": (faults := []),
                               "run": stats_runner(st, data, dt, faults=faults)})
        # the same with the compiled batch sums (smaso.student.event_kernels), compiled before the timing
        contenders.append({"contender": "stats f32 compiled" + tag,
                           "description": "forward_backward + FrequencyAccumulator(float32, kernel='compiled').add "
                           "per minibatch, result() once (compiled before the warm-up: compile_s)", "batch_norm": bn,
                           "accumulation": "float32", "target": False, "minor_faults_per_batch": (faults := []),
                           "compile_s": compile_seconds(st, data, torch.float32, "compiled"),
                           "run": stats_runner(st, data, torch.float32, faults=faults, kernel="compiled")})
        ref = reference_network.LadderStudent(ladder, width=args.width, dtype=torch.float32, batch_norm=bn,
                                              seed=args.seed)
        ref.load_state_dict(st.state_dict())  # the same weights (and the same seeded init anyway)
        contenders.append({"contender": "reference stats f32" + tag,
                           "description": "today's tree code (benchmarks/reference/tree_student_*.py): its "
                           "forward_backward + FrequencyAccumulator(float32).add per minibatch, result() once",
                           "batch_norm": bn, "accumulation": "float32", "target": False,
                           "run": stats_runner(ref, data, torch.float32, reference_frequency.FrequencyAccumulator)})
    z_all = sample.z[:, ladder.level_offsets[-2]:]
    student.check_inputs(z_all)  # the leaf events' range, once, where the data enters
    contenders.append({"contender": "plain (leaf events)", "description": "student(z, events_checked=True) on the leaf "
                       "events (a gather of weight rows), student.loss, loss.backward() (autograd), zero_grad per "
                       "minibatch", "batch_norm": False, "accumulation": None, "target": True,
                       "minor_faults_per_batch": (faults := []),
                       "run": autograd_runner(student, student.loss, data.events, data, events=True, faults=faults)})
    contenders.append({"contender": "plain (one-hot x, declared)", "description": "student(x, one_hot_checked=True) "
                       "on the one-hot x (read as their leaf events inside the timed forward, then the gather path), "
                       "student.loss, loss.backward() (autograd), zero_grad per minibatch", "batch_norm": False,
                       "accumulation": None, "target": False, "minor_faults_per_batch": (faults := []),
                       "run": autograd_runner(student, student.loss, data.x, data, faults=faults, one_hot=True)})
    contenders += lc_compiled_contenders(student, data, dims, args.seed)
    contenders.append({"contender": "dense", "description": "chain of nn.Linear with the student's per-level MACs "
                       f"({' -> '.join(map(str, dims))}), autograd", "batch_norm": False, "accumulation": None,
                       "target": True, "minor_faults_per_batch": (faults := []),
                       "run": autograd_runner(net, student.loss, data.dense_x, data, faults=faults), "dims": dims,
                       "macs_per_level": dense_macs})
    contenders.append({"contender": "dense (out-of-place act.)", "description": "the same chain with out-of-place "
                       "activations (reported, not judged)", "batch_norm": False, "accumulation": None,
                       "target": False, "run": autograd_runner(DenseNet(dims, student, args.seed, in_place=False),
                                                               student.loss, data.dense_x, data)})
    measure_round_robin(contenders, len(data), args.repeats, args.warmup_batches)
    rows = [finish_row(c, args.n, len(data), args.batch_size, args.repeats) for c in contenders]

    by_name = {r["contender"]: r for r in rows}
    for r in rows:
        base = by_name["plain (BN)" if r["batch_norm"] else "plain"]
        r["x_plain"] = r["best_s"] / base["best_s"]
    for r in rows:  # how many minibatches of the steady state repay the compilation (None: no saving)
        eager = by_name.get(_eager_twin(r["contender"]))
        if "compile_s" in r and eager is not None and eager is not r:
            saved = (eager["best_s"] - r["best_s"]) / r["batches"]
            r["amortised_after_batches"] = r["compile_s"] / saved if saved > 0 else None

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
               "explicit_backward_overhead": ratio("explicit fwd+bwd", "plain", None, False),
               # the floor of stats_overhead that the accumulation cannot go below, and the accumulation's own cost
               "explicit_stacked_overhead": ratio("explicit stacked", "plain", None, False),
               "stats_over_explicit_stacked": ratio("stats f32", "explicit stacked", None, False),
               "stats_vs_reference": ratio("stats f32", "reference stats f32", REFERENCE_TARGET, True),
               "stats_overhead_compiled": ratio("stats f32 compiled", "plain", STATS_TARGET, False),
               "stats_compiled_over_eager": ratio("stats f32 compiled", "stats f32", None, False)}
    if not args.no_bn:
        targets["stats_vs_reference_bn"] = ratio("stats f32 (BN)", "reference stats f32 (BN)", REFERENCE_TARGET, True)
        # BN's baseline is the library's own explicit BN forward+backward: autograd through BN is itself
        # several times a plain pass, so a ratio to it would flatter the statistics
        targets["stats_overhead_bn"] = ratio("stats f32 (BN)", "explicit fwd+bwd (BN)", STATS_TARGET, True)
        targets["stats_overhead_bn_float64"] = ratio("stats f64 (BN)", "explicit fwd+bwd (BN)", STATS_TARGET, False)
        targets["stats_overhead_bn_compiled"] = ratio("stats f32 compiled (BN)", "explicit fwd+bwd (BN)", STATS_TARGET,
                                                      False)
        targets["stats_overhead_bn_vs_autograd"] = ratio("stats f32 (BN)", "plain (BN)", None, False)
        targets["explicit_backward_overhead_bn"] = ratio("explicit fwd+bwd (BN)", "plain (BN)", None, False)
        targets["stats_over_explicit_stacked_bn"] = ratio("stats f32 (BN)", "explicit stacked (BN)", None, False)
        targets["explicit_stacked_over_explicit_bn"] = ratio("explicit stacked (BN)", "explicit fwd+bwd (BN)", None,
                                                             False)
    targets["locally_connected_vs_dense_events"] = ratio("plain (leaf events)", "dense", DENSE_TARGET, True)
    targets["locally_connected_vs_dense"] = ratio("plain", "dense", DENSE_TARGET, True)
    targets["locally_connected_vs_dense_one_hot_declared"] = ratio("plain (one-hot x, declared)", "dense", DENSE_TARGET,
                                                                   False)
    targets["locally_connected_vs_dense_out_of_place"] = ratio("plain", "dense (out-of-place act.)", None, False)
    targets["locally_connected_vs_dense_events_compiled"] = ratio("plain (leaf events, compiled)", "dense",
                                                                  DENSE_TARGET, True)
    targets["locally_connected_vs_dense_one_hot_declared_compiled"] = ratio("plain (one-hot x, declared, compiled)",
                                                                            "dense", DENSE_TARGET, False)
    targets["locally_connected_compiled_vs_dense_compiled"] = ratio("plain (leaf events, compiled)",
                                                                    "dense (torch.compile)", None, False)

    print()
    common.print_table(TABLE, rows, TABLE_NOTE)
    print()
    labels = {"stats_overhead": "stats (float32 accum, default) / plain",
              "stats_overhead_float64": "stats (float64 accum) / plain",
              "stats_overhead_compiled": "stats f32, compiled sums / plain",
              "stats_compiled_over_eager": "stats f32: compiled sums / eager",
              "stats_overhead_bn_compiled": "BN: stats f32, compiled sums / expl. BN",
              "explicit_backward_overhead": "explicit fwd+bwd / plain",
              "explicit_stacked_overhead": "explicit fwd+bwd, stacked / plain",
              "stats_over_explicit_stacked": "stats f32 / explicit stacked",
              "stats_over_explicit_stacked_bn": "BN: stats f32 / explicit stacked",
              "explicit_stacked_over_explicit_bn": "BN: explicit stacked / explicit",
              "stats_vs_reference": "stats f32 / today's tree code",
              "stats_vs_reference_bn": "BN: stats f32 / today's tree code",
              "stats_overhead_bn": "BN: stats (float32 accum) / explicit BN",
              "stats_overhead_bn_float64": "BN: stats (float64 accum) / explicit BN",
              "stats_overhead_bn_vs_autograd": "BN: stats (float32 accum) / autograd BN",
              "explicit_backward_overhead_bn": "BN: explicit fwd+bwd / plain",
              "locally_connected_vs_dense_events": "LC on leaf events / dense (same MACs)",
              "locally_connected_vs_dense": "LC on one-hot x / dense (same MACs)",
              "locally_connected_vs_dense_one_hot_declared": "LC on one-hot x declared / dense",
              "locally_connected_vs_dense_out_of_place": "  ... / dense with out-of-place activations",
              "locally_connected_vs_dense_events_compiled": "LC on leaf events, compiled kernel / dense",
              "locally_connected_vs_dense_one_hot_declared_compiled": "LC on one-hot x declared, compiled / dense",
              "locally_connected_compiled_vs_dense_compiled": "LC events compiled / dense torch.compile"}
    for key, t in targets.items():
        verdict = ("PASS" if t["pass"] else "FAIL") if t["judged"] else "(not judged)" if "pass" in t else ""
        tgt = f"target {t['target']}x" if "target" in t else ""
        print(f"{labels[key]:<40} {t['value']:7.2f}x  (median {t['value_median']:5.2f}x, batch-min "
              f"{t['value_batch_min']:5.2f}x)  {tgt:<14} {verdict}".rstrip())
    print(f"(judged on the best epochs; the statistics targets on {JUDGED_ACCUMULATION} accumulation, the "
          "accumulator's default; batch-min: ratio of the sums of per-minibatch minima over the repeats)")
    total_s = common.finish(info, wall0)
    print(f"load average: {info.get('loadavg_start')} at the start, {info.get('loadavg_end')} at the end "
          f"({os.cpu_count()} cores)")
    common.print_done(total_s, args.out)

    sections = {
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
    }
    result = common.record("student", argv, sections, info, rows, {"targets": targets}, total_s)
    return common.write_json(args.out, result)


if __name__ == "__main__":
    main()
