"""Benchmark: the library's hot paths on an accelerator, against the CPU, with every host sync counted (issue 39).

What is run, on ``--device`` (default ``cuda`` when one is there, else the CPU alone) and on the CPU, in one
process, each section timed best-of ``--repeats`` (a device section synchronizes before each clock read):

1. ``sampling``: ``teachers.sampling.sample_ladder`` of ``--n-sample`` rows of the 341-region tree
   ``Ladder.random(4, 4, 16)`` (bottom-up: leaves drawn, parents looked up). A device draws with its own RNG
   streams, so the bytes differ from the CPU's; the label frequencies are compared instead (within 5 sigma).
2. ``posterior``: ``inference.posterior.posterior`` (float64) of ``--n-posterior`` rows of ``Ladder.default()``
   (``method="junction-tree"``) and of the top-down tree ``Ladder.random(4, 4, 16, mode="topdown")`` (the tree
   path); log p(x) and p(y | x) against the CPU's.
3. ``training_step``: ``--steps`` SGD steps, ``LadderStudent.forward_backward(..., labels_checked=True)`` and
   ``apply_update``, float32, width 16, batch ``--batch-size``, the minibatches already on the device; once on
   the one-hot inputs and once on the leaves' events (``*_events``: the leaf level as a gather), the final
   weights of each against the CPU's one-hot run.
4. ``statistics_pass``: the same student, one epoch of ``forward_backward(stacked=...)`` and
   ``FrequencyAccumulator(float32).add`` per minibatch (what ``collect_statistics`` does), ``result()`` after the
   loop; the statistics against the CPU's.
5. ``train_ladder_student``: the library's training loop on the whole data (checkpoint reads every
   ``smaso.student.training.CHECK_EVERY`` steps are its only intended syncs).
6. ``compare_student``: the demo's pipeline (``smaso demo``'s configs: one student trained and compared with the
   reformulation at every checkpoint, float64) on ``--n-demo`` rows of ``Ladder.default()``; the final history
   row's errors against the CPU's.

Host syncs: on CUDA the hot loops of 3 and 4 run under ``torch.cuda.set_sync_debug_mode("error")`` (``sync_error``
holds the error and the library line it came from, ``None`` when the loop ran without one), and every section is
run once more under ``"warn"`` to count the syncs of the whole call (``syncs``, with the library lines that
issued them in ``sync_sites``). On the CPU there is nothing to count (``null``). All numbers and the machine go
to ``--out`` (JSON, written atomically); ``--record`` writes ``benchmarks/results/device.json``, which is only
ever recorded from a run on a GPU.

Run it with::

    python benchmarks/bench_device.py                  # on the GPU when there is one, about a minute
    python benchmarks/bench_device.py --quick          # smoke run (small sizes, 1 repeat; the CPU in CI)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common beside this script, also when loaded by path
import _common as common

DEFAULT_OUT = common.default_out("device")
SECTIONS = ("sampling", "posterior", "training_step", "statistics_pass", "train_ladder_student", "compare_student")
QUICK = {"n_sample": 8192, "n_posterior": 256, "n_train": 4096, "steps": 8, "n_demo": 4096, "demo_steps": 20,
         "repeats": 1}
FULL = {"n_sample": 1_000_000, "n_posterior": 16384, "n_train": 65536, "steps": 256, "n_demo": 50_000,
        "demo_steps": None, "repeats": 3}
PACKAGES = ("teachers", "inference", "smaso")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default=None, help="the accelerator (default: cuda when available, else none)")
    p.add_argument("--n-sample", type=int, default=None, help="rows sampled (default 1e6; 8192 with --quick)")
    p.add_argument("--n-posterior", type=int, default=None, help="rows of the posterior (default 16384)")
    p.add_argument("--n-train", type=int, default=None, help="rows of the training and statistics sections")
    p.add_argument("--steps", type=int, default=None, help="SGD steps of the training sections (default 256)")
    p.add_argument("--batch-size", type=int, default=1024, help="minibatch (default 1024)")
    p.add_argument("--n-demo", type=int, default=None, help="rows of the demo pipeline (default 50,000)")
    p.add_argument("--demo-steps", type=int, default=None, help="the demo's steps (default: the demo's own)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per side and section (default 3)")
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="what to run")
    common.add_threads_arg(p)
    common.add_quick_out_args(p, "smoke run: small sizes, 1 repeat", DEFAULT_OUT)
    args = p.parse_args(argv)
    common.fill_defaults(args, QUICK, FULL)
    common.require_positive(p, args, ("n_sample", "n_posterior", "n_train", "steps", "batch_size", "n_demo",
                                      "repeats"))
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    return args


# ---------------------------------------------------------------------- syncs and clocks
def _library_site(frames: list[traceback.FrameSummary]) -> str | None:
    """The innermost frame in one of the library's packages, as ``package/module.py:line``."""
    for f in reversed(frames):
        parts = Path(f.filename).parts
        for pkg in PACKAGES:
            if pkg in parts:
                i = len(parts) - 1 - parts[::-1].index(pkg)
                return f"{'/'.join(parts[i:])}:{f.lineno} ({f.name})"
    return None


@contextmanager
def count_syncs(device: torch.device, box: dict):
    """Count the host syncs of the block on CUDA (``set_sync_debug_mode("warn")``) into ``box["syncs"]``, and
    the library lines that issued them into ``box["sync_sites"]``; on any other device both stay ``None``."""
    if device.type != "cuda":
        box["syncs"], box["sync_sites"] = None, None
        yield
        return
    sites: Counter[str] = Counter()
    original = warnings.showwarning

    def record(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        if "synchroniz" in str(message):
            sites[_library_site(traceback.extract_stack()[:-1]) or f"{filename}:{lineno}"] += 1
        else:
            original(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(0)
            warnings.showwarning = original
    box["syncs"] = sum(sites.values())
    box["sync_sites"] = dict(sites.most_common(12))


def sync_error(device: torch.device, fn: Callable[[], Any]) -> str | None:
    """Run ``fn`` under ``set_sync_debug_mode("error")`` on CUDA: ``None`` if it never synced, else the error and
    the library line that issued the sync. Not applicable elsewhere (``"n/a"``)."""
    if device.type != "cuda":
        return "n/a: not a CUDA device"
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
    except RuntimeError as e:
        site = _library_site(traceback.extract_tb(e.__traceback__))
        return f"{str(e).splitlines()[0]} at {site}"
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return None


def clock(device: torch.device, fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and its wall time, the device drained before each clock read."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - t0


def best_of(device: torch.device, fn: Callable[[], Any], repeats: int) -> tuple[Any, list[float]]:
    """A warm-up call, then ``repeats`` timed ones: the last result and the times."""
    fn()
    times, out = [], None
    for _ in range(repeats):
        out, t = clock(device, fn)
        times.append(t)
    return out, times


def _sides(dev: torch.device) -> tuple[torch.device, ...]:
    """The CPU, then ``dev`` when it is another device: where every section runs."""
    return (torch.device("cpu"), dev) if dev.type != "cpu" else (torch.device("cpu"),)


def timed_side(row: dict, d: torch.device, run: Callable[[], Any], repeats: int, *, tag: str = "",
               count: bool = True) -> Any:
    """``run`` timed on ``d`` (:func:`best_of`) into ``row[f"{d.type}{tag}_s"]`` and ``..._times_s``; off the
    CPU (with ``count``) one more call under :func:`count_syncs` into ``row["syncs"]`` and ``row["sync_sites"]``.
    Returns the last timed call's result."""
    out, times = best_of(d, run, repeats)
    row[f"{d.type}{tag}_s"], row[f"{d.type}{tag}_times_s"] = min(times), times
    if count and d.type != "cpu":
        with count_syncs(d, row):
            run()
    return out


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest |a - b| over the largest |b| (both moved to the CPU, float64)."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    scale = b.abs().max().item() if b.numel() else 0.0
    return (a - b).abs().max().item() / scale if scale > 0 else float((a - b).abs().max().item())


# ---------------------------------------------------------------------- sections
def _tree(mode: str = "bottomup") -> Any:
    from teachers.ladder import Ladder

    return Ladder.random(depth=4, branching=4, events=16, seed=0, mode=mode)


def section_sampling(dev: torch.device, args: argparse.Namespace) -> dict:
    from teachers.sampling import sample_ladder

    lad = _tree()
    row: dict = {}
    samples = {}
    for d in _sides(dev):
        samples[d.type] = timed_side(row, d, lambda d=d: sample_ladder(lad, args.n_sample, 0, device=d, progress=False),
                                     args.repeats)
    # the device's rows follow the same law as the CPU's: the label's frequencies agree within sampling noise
    labels = {side: torch.bincount(smp.y.cpu().long(), minlength=lad.num_classes).double() / args.n_sample
              for side, smp in samples.items()}
    if len(labels) == 2:
        row["label_freq_max_abs_diff"] = float((labels["cpu"] - labels[dev.type]).abs().max())
        row["label_freq_tolerance"] = 5 * math.sqrt(0.5 / args.n_sample)  # 5 sigma of a difference of two
    row["rows"] = args.n_sample
    return row


def section_posterior(dev: torch.device, args: argparse.Namespace) -> dict:
    from inference.posterior import posterior
    from teachers.ladder import Ladder
    from teachers.sampling import sample_ladder

    out: dict = {}
    cases = (("junction_tree", Ladder.default(), "junction-tree"), ("tree", _tree("topdown"), "tree"))
    for name, lad, method in cases:
        x = sample_ladder(lad, args.n_posterior, 1, progress=False).inputs(dtype=torch.float64)
        row: dict = {"rows": args.n_posterior, "method": method}
        got = {}
        for d in _sides(dev):
            xd = x.to(d)

            def run(lad: Any = lad, xd: torch.Tensor = xd, d: torch.device = d, method: str = method) -> Any:
                return posterior(lad, xd, device=d, method=method)

            got[d.type] = timed_side(row, d, run, args.repeats)
        if dev.type != "cpu":
            a, b = got[dev.type], got["cpu"]
            row["log_px_max_abs_diff"] = float((a.log_evidence.cpu() - b.log_evidence).abs().max())
            row["p_y_max_abs_diff"] = float((a.label.cpu() - b.label).abs().max())
        out[name] = row
    return out


def _student_data(dev: torch.device, args: argparse.Namespace) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    from teachers.sampling import sample_ladder

    lad = _tree()
    sample = sample_ladder(lad, args.n_train, 2, progress=False)
    return lad, sample.inputs(dtype=torch.float32), sample.y, sample.z


def _student(lad: Any, dev: torch.device) -> Any:
    from smaso.student.network import LadderStudent

    return LadderStudent(lad, 16, dtype=torch.float32, seed=0, device=dev)


def section_training_step(dev: torch.device, args: argparse.Namespace) -> dict:
    lad, x, y, z = _student_data(dev, args)
    leaves = z[:, lad.level_offsets[-2]:].long()  # the leaves' events: the one-hot leaf level as a gather
    bs = args.batch_size
    row: dict = {"steps": args.steps, "batch_size": bs}
    finals = {}
    sides = _sides(dev)
    for d, (inputs, tag) in ((d, v) for d in sides for v in ((x, ""), (leaves, "_events"))):
        xd, yd = inputs.to(d), y.to(d)
        batches = [(xd[i:i + bs], yd[i:i + bs]) for i in range(0, len(xd) - bs + 1, bs)]
        student = _student(lad, d)

        def steps(student: Any = student, batches: list = batches) -> None:
            for s in range(args.steps):
                xb, yb = batches[s % len(batches)]
                rec = student.forward_backward(xb, yb, labels_checked=True)
                student.apply_update(rec, 0.05)

        timed_side(row, d, steps, args.repeats, tag=tag, count=False)
        row[f"{d.type}{tag}_ms_per_step"] = 1e3 * row[f"{d.type}{tag}_s"] / args.steps
        if d.type != "cpu":
            row[f"sync_error{tag}"] = sync_error(d, steps)
        fresh = _student(lad, d)
        steps(fresh)
        finals[d.type + tag] = torch.cat([w.detach().reshape(-1).cpu() for w in fresh.weights])
    row["events_weights_rel_diff"] = _rel(finals["cpu_events"], finals["cpu"])  # the gather vs the one-hot matmul
    if dev.type != "cpu":
        row["weights_rel_diff"] = _rel(finals[dev.type], finals["cpu"])
        row["events_weights_rel_diff_device"] = _rel(finals[dev.type + "_events"], finals["cpu"])
    return row


def section_statistics_pass(dev: torch.device, args: argparse.Namespace) -> dict:
    from smaso.student.frequency import FrequencyAccumulator

    lad, x, y, z = _student_data(dev, args)
    bs = args.batch_size
    row: dict = {"rows": len(x), "batch_size": bs, "accumulation": "float32"}
    results = {}
    for d in _sides(dev):
        xd, yd, zd = x.to(d), y.to(d), z.to(d)
        student = _student(lad, d)
        box: dict = {}

        def loop(student: Any = student, xd: torch.Tensor = xd, yd: torch.Tensor = yd, zd: torch.Tensor = zd,
                 box: dict = box) -> None:
            acc, buffers = FrequencyAccumulator(student, torch.float32), True
            for i in range(0, len(xd), bs):
                rec = student.forward_backward(xd[i:i + bs], yd[i:i + bs], stacked=buffers, labels_checked=True)
                acc.add(rec, zd[i:i + bs])
                buffers = rec.stacked
            box["acc"] = acc

        timed_side(row, d, loop, args.repeats, count=False)
        if d.type != "cpu":
            row["sync_error"] = sync_error(d, loop)
        results[d.type] = box["acc"].result()
    if dev.type != "cpu":
        a, b = results[dev.type], results["cpu"]
        row["F_rel_diff"] = max(_rel(p, q) for p, q in zip(a.F, b.F, strict=True) if q is not None)
        row["counts_equal"] = all(torch.equal(p.cpu(), q) for p, q in zip(a.p, b.p, strict=True) if q is not None)
    return row


def section_train_ladder_student(dev: torch.device, args: argparse.Namespace) -> dict:
    from smaso.student.training import CHECK_EVERY, train_ladder_student

    lad, x, y, _ = _student_data(dev, args)
    row: dict = {"steps": args.steps, "batch_size": args.batch_size, "check_every": CHECK_EVERY}
    for d in _sides(dev):
        xd, yd = x.to(d), y.to(d)

        def run(xd: torch.Tensor = xd, yd: torch.Tensor = yd, d: torch.device = d) -> list[float]:
            return train_ladder_student(_student(lad, d), xd, yd, steps=args.steps, lr=0.05,
                                        batch_size=args.batch_size, seed=0)

        timed_side(row, d, run, args.repeats)
        if d.type != "cpu":
            row["syncs_per_step"] = row["syncs"] / args.steps
    return row


def section_compare_student(dev: torch.device, args: argparse.Namespace) -> dict:
    from smaso.student.compare import compare_student
    from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
    from teachers.ladder import Ladder
    from teachers.sampling import sample_ladder

    lad = Ladder.default()
    sample = sample_ladder(lad, args.n_demo, 0, progress=False)
    held = sample_ladder(lad, EvaluationConfig().eval_examples or 4096, 1, progress=False)
    training = TrainingConfig() if args.demo_steps is None else TrainingConfig(steps=args.demo_steps)
    evaluation = EvaluationConfig(held_out=held)
    row: dict = {"rows": args.n_demo, "steps": training.steps, "eval_every": evaluation.eval_every}
    finals = {}
    for d in _sides(dev):
        def run(d: torch.device = d) -> Any:
            return compare_student(sample, StudentConfig(), training, evaluation, device=d)

        finals[d.type] = timed_side(row, d, run, args.repeats).final()
        if d.type != "cpu":
            row["syncs_per_step"] = row["syncs"] / training.steps
    if dev.type != "cpu":
        a, b = finals[dev.type], finals["cpu"]
        diffs = [abs(a[k] - b[k]) for k in ("loss", "accuracy") if isinstance(a.get(k), float)]
        row["final_loss_accuracy_max_abs_diff"] = max(diffs) if diffs else None
    return row


def _commit() -> str | None:
    """The checkout's commit (``git rev-parse --short HEAD``), or None outside a git checkout: which code a
    recording measured."""
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=common.REPO_ROOT, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


RUNNERS: dict[str, Callable[[torch.device, argparse.Namespace], dict]] = {
    "sampling": section_sampling, "posterior": section_posterior, "training_step": section_training_step,
    "statistics_pass": section_statistics_pass, "train_ladder_student": section_train_ladder_student,
    "compare_student": section_compare_student}


def _speedups(row: dict, dev: str) -> None:
    """``x_cpu`` = CPU seconds / device seconds, in ``row`` and its sub-rows."""
    if f"{dev}_s" in row and "cpu_s" in row:
        row["x_cpu"] = row["cpu_s"] / row[f"{dev}_s"]
    for v in row.values():
        if isinstance(v, dict) and "cpu_s" in v:
            _speedups(v, dev)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    wall0 = common.start(args.threads)
    dev = torch.device(args.device)
    extra: dict = {"device": str(dev)}
    if dev.type == "cuda":
        extra.update(gpu=torch.cuda.get_device_name(dev), cuda=torch.version.cuda)
    info = common.machine_info(**extra)
    print(f"bench_device: {common.torch_summary()}, device {dev}"
          + (f" ({extra['gpu']})" if "gpu" in extra else " (no accelerator: the CPU side alone)"), flush=True)
    results = []
    for name in args.sections:
        t0 = time.perf_counter()
        try:
            row = RUNNERS[name](dev, args)
            row["error"] = None
        except Exception as e:  # a section that breaks on the device is itself the finding: recorded, not fatal
            row = {"error": f"{type(e).__name__}: {e}", "where": _library_site(traceback.extract_tb(e.__traceback__))}
        _speedups(row, dev.type)
        row["section"], row["wall_s"] = name, time.perf_counter() - t0
        results.append(row)
        shown = {k: v for k, v in row.items() if not k.endswith("times_s")}
        print(f"{name}: {shown}", flush=True)
    total = common.finish(info, wall0)
    cfg = {k: getattr(args, k) for k in ("device", "n_sample", "n_posterior", "n_train", "steps", "batch_size",
                                         "n_demo", "demo_steps", "repeats", "quick", "threads")}
    clean = [r["section"] for r in results if r.get("sync_error") is None and "sync_error" in r]
    summary = {"accelerator": dev.type != "cpu",
               "note": None if dev.type != "cpu" else "no accelerator in this run: only the CPU side was measured",
               "sync_free_hot_loops": clean,
               "errors": {r["section"]: r["error"] for r in results if r["error"]}}
    data = common.record("device", argv, {"config": cfg, "commit": _commit()}, info, results, {"summary": summary},
                         total)
    common.write_json(args.out, data)
    common.print_done(total, args.out)
    if any(math.isnan(v) for r in results for v in r.values() if isinstance(v, float)):
        print("warning: a NaN in the results", flush=True)
    return data


if __name__ == "__main__":
    main()
