"""The student's runs from the command line: ``smaso demo`` and ``smaso compare`` (their options turned into
:func:`~smaso.student.compare.compare_student` and :func:`~smaso.student.seeds.compare_seeds` calls, what they
print, and the JSON payload and figures they write)."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from smaso.cli_support import _check_memory, _check_width, _engine, _quiet, _set_threads, _write_json
from smaso.reports import accuracy_report, bayes_estimate, inspect_report, print_report

if TYPE_CHECKING:
    import argparse
    import os
    from collections.abc import Callable

    from smaso.student.compare import ComparisonResult
    from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
    from teachers.engine import DaskEngine, ProcessEngine, SerialEngine
    from teachers.sampling import LadderSample
    from teachers.store_reader import ChunkedLadderData


def _configs(args: argparse.Namespace, held_out: Any, *, alignment: bool | None = None, shuffle_labels: bool = False,
             seed: int | None = None) -> tuple[StudentConfig, TrainingConfig, EvaluationConfig]:
    """:func:`~smaso.student.compare.compare_student`'s ``(student, training, evaluation)`` configs from the
    command line (whose defaults are theirs: ``smaso.student.config``)."""
    from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig

    student = StudentConfig(width=args.width[0] if len(args.width) == 1 else tuple(args.width),
                            readout=args.readout or None, activation=args.activation, batch_norm=args.bn or False,
                            bias=not args.no_bias, shared=getattr(args, "shared", False))
    training = TrainingConfig(steps=args.steps, lr=args.lr, batch_size=args.batch_size or None, loss=args.loss,
                              optimizer=args.optimizer, lr_schedule=args.lr_schedule, weight_decay=args.weight_decay,
                              plateau=args.plateau, seed=args.student_seed if seed is None else seed,
                              shuffle_labels=shuffle_labels)
    evaluation = EvaluationConfig(eval_every=args.eval_every, eval_examples=args.eval_examples,
                                  P_source=args.P_source, noise_groups=_noise_groups(args), held_out=held_out,
                                  alignment=args.alignment if alignment is None else alignment)
    return student, training, evaluation


def _progress(args: argparse.Namespace) -> bool:
    """A progress bar over the training steps: on a terminal, unless ``--no-progress`` or ``-q``."""
    return not getattr(args, "no_progress", False) and not _quiet(args) and sys.stderr.isatty()


def _held_out(sample: LadderSample | ChunkedLadderData, args: argparse.Namespace, held_out: Any = None) -> Any:
    if held_out is None:
        held_out = args.evaluate == "held-out"
    if held_out is True and args.eval_examples >= len(sample):
        raise ValueError(f"--eval-examples: the {args.eval_examples} held-out rows leave none of the dataset's "
                         f"{len(sample)} rows to train on; lower --eval-examples or pass --evaluate training")
    return held_out


def _run_comparison(sample: LadderSample | ChunkedLadderData, args: argparse.Namespace,
                    engine: SerialEngine | DaskEngine | None = None, held_out: Any = None) -> ComparisonResult:
    """``--student-seed``'s run, with the event alignment at every checkpoint unless ``--no-alignment``."""
    from smaso.student.compare import compare_student

    return compare_student(sample, *_configs(args, _held_out(sample, args, held_out)), device=args.device,
                           engine=engine, progress=_progress(args))


def _shuffled_control(sample: LadderSample | ChunkedLadderData, args: argparse.Namespace,
                      engine: SerialEngine | DaskEngine | None = None, held_out: Any = None) -> Any:
    """The shuffled-label control of ``--student-seed``'s run: the same student, options and evaluation rows,
    trained on permuted labels (:func:`~smaso.student.compare.compare_student` with
    ``TrainingConfig(shuffle_labels=True)``), with the event alignment at its checkpoints unless ``--no-alignment``
    (its last checkpoint's is the alignment's shuffled-label control; its best matches ranked at its own
    initialisation)."""
    from smaso.student.compare import compare_student

    return compare_student(sample, *_configs(args, _held_out(sample, args, held_out), shuffle_labels=True),
                           device=args.device, engine=engine, progress=_progress(args))


def _other_seeds(sample: LadderSample | ChunkedLadderData, args: argparse.Namespace, held_out: Any, engine: Any = None,
                 control: bool = False, skip: int = 0, last: int | None = None) -> list:
    """Futures (or, without ``engine``, the results) of the seeds after ``--student-seed`` (``--seeds`` in all),
    each with its shuffled-label control when ``control``, without the alignment (only the first seed's is
    printed): trained as batched populations (:func:`~smaso.student.seeds._population_runs`; the runs one by one:
    the same weights bit for bit, the same histories to float64 round-off), here one, with a
    :class:`~teachers.engine.ProcessEngine` one per worker (its futures' results are lists of runs), with a Dask
    engine one task per seed.  A pool's tasks are submitted now, from this thread, before any work here (a fork once
    this process computes can copy a held lock), and run beside this process's own seed.  ``skip``: leave out the
    first this many of them (the demo trains them with its own seed).  ``last``: a process pool's runs measure their
    first checkpoint and their last this many only (:func:`~smaso.student.seeds._population_runs`)."""
    from smaso.student.seeds import _population_runs, _seed_run

    configs = _configs(args, _held_out(sample, args, held_out), alignment=False)
    seeds = [args.student_seed + i for i in range(1 + skip, args.seeds)]  # (the first ``skip`` run elsewhere)
    if not seeds:
        return []
    if engine is None:  # here: every seed and control as one batched population
        return _population_runs(seeds, sample, configs, control, args.device)
    if not hasattr(engine, "submit"):  # a Dask engine: one task per seed, here waited for
        return engine.map(_seed_run, seeds, sample, configs, control, args.device)
    # a process pool: one population per worker (each future's result is a list of runs)
    k = max(1, math.ceil(len(seeds) / getattr(engine, "workers", 1)))
    return [engine.submit(_population_runs, seeds[i: i + k], sample, configs, control, args.device, last)
            for i in range(0, len(seeds), k)]


#: The checkpoints of each run that the summary over seeds averages (its last this many; its first is the
#: initialisation control): all that ``smaso demo`` reads of the other seeds' runs, so all they measure.
SUMMARY_LAST = 3


def _seed_summary(args: argparse.Namespace, result: ComparisonResult, runs: list, control: Any = None) -> Any:
    """The summary over ``--seeds`` students (``result``: the first seed's run, ``--student-seed``; ``runs``: the
    next seeds', :func:`_other_seeds`), with the initialisation control and, given ``control`` (the first seed's
    shuffled-label run, :func:`_shuffled_control`), the shuffled-label control of every seed; None for one seed
    without a control."""
    if args.seeds <= 1 and control is None:
        return None
    from smaso.student.seeds import summarize_seeds

    runs = [r.result() if hasattr(r, "result") else r for r in runs]
    runs = [x for r in runs for x in (r if isinstance(r, list) else [r])]  # (a pool's populations: lists of runs)
    seeds = [args.student_seed + i for i in range(args.seeds)]
    shuffled = None if control is None else [control, *(r["shuffled"] for r in runs)]
    return summarize_seeds([result, *runs], seeds=seeds, last=SUMMARY_LAST, shuffled=shuffled)


def _noise_groups(args: argparse.Namespace) -> int | None:
    k = getattr(args, "noise_groups", 10)
    if k == 1:
        raise ValueError("--noise-groups: expected 0 (no floors) or at least 2 groups, got 1")
    return k or None


def _comparison_payload(result: ComparisonResult, args: argparse.Namespace, configs: tuple | None = None) -> dict:
    import dataclasses

    from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig

    cfg = configs or _configs(args, args.evaluate == "held-out")
    ev = dataclasses.replace(cfg[2], held_out=cfg[2].held_out is not False, alignment=bool(cfg[2].alignment))
    names = (StudentConfig, TrainingConfig, EvaluationConfig)
    return {"history": result.history, "seconds": result.seconds,
            "stopped_at": result.stopped_at,
            "config": {type(c).__name__: {k: (str(v) if k == "dtype" and v is not None else v)
                                          for k, v in dataclasses.asdict(c).items()}
                       for c in (*cfg[:2], ev) if isinstance(c, names)},
            "student": {k: getattr(args, k) for k in ("width", "readout", "activation", "bn", "loss", "steps", "lr",
                                                       "optimizer", "lr_schedule", "plateau", "seeds", "evaluate",
                                                       "batch_size", "weight_decay", "P_source", "alignment")}}


def _save_outputs(out_dir: str | os.PathLike, payload: dict, result: ComparisonResult, title: str,
                  control: Any = None) -> list[str]:
    """comparison.json and comparison.png, and with the alignment measured alignment.png (``control``: the
    shuffled-label run's last alignment rows, drawn beside)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / "comparison.json", payload)
    return [str(out / "comparison.json"), *_save_figures(out, result, title, control)]


def _save_figures(out: Path, result: ComparisonResult, title: str, control: Any = None) -> list[str]:
    """comparison.png, and with the alignment measured alignment.png, in ``out`` (made): :func:`_save_outputs`'s
    figures, which need no other seed's run."""
    from smaso.plots import plot_comparison

    out.mkdir(parents=True, exist_ok=True)
    plot_comparison(result, out / "comparison.png", title=title)
    files = [str(out / "comparison.png")]
    if result.history and "alignment" in result.history[-1]:
        from smaso.plots import plot_alignment

        plot_alignment(result, out / "alignment.png", title=f"{title}: event alignment of the hidden nodes",
                       control=control)
        files.append(str(out / "alignment.png"))
    return files


def _print_alignment(result: ComparisonResult, control: Any, rows: str) -> None:
    """The event alignment table (:meth:`~smaso.student.compare.ComparisonResult.alignment_table`) and the
    shuffled-label control's last checkpoint (``control``: its rows, or None)."""
    print(f"\n== event alignment of the hidden nodes (on {rows}; the paper's question: do nodes become "
          "selective for the latent event of their receptive field?) ==")
    print(result.alignment_table(checkpoints=4, legend=True))
    if control is None:
        return
    print("shuffled-label control: the same student trained on permuted labels (the same initialisation, options "
          "and steps), at the end\n(compare with the trained student's last step above; n/a as there)")

    def num(v: float | None, fmt: str) -> str:
        return "n/a" if v is None or v != v else format(v, fmt)

    print("\n".join(f"  level {r['level']}: eta2 {num(r['eta2'], '.3f')}, MI {num(r['mi'], '.3f')} bits, spec "
                    f"{num(r['spec'], '.3f')}, match {r['matched']}/{r['indicators']}, kept {num(r['kept'], '.2f')}, "
                    f"dead {r['dead']}/{r['nodes']}, probe {num(r['probe'], '.3f')}" for r in control))


#: What the two accuracies the demo prints are (issue 37: printed without saying how they differ).
ACCURACY_WORDS = (
    "two accuracies: the summary over seeds (above) is each seed's mean over its last 3 checkpoints on the {ev} "
    "evaluation rows,\n  median over the seeds; the table below is student seed {seed}'s final weights on 10000 "
    "other fresh rows")


def _workers(args: argparse.Namespace) -> int:
    """``--workers``: processes beside this one that train the other seeds; by default one per usable core beside
    this one, at most one per other seed.  Not fewer beside busy jobs: processes of one torch thread share the
    cores without the intra-op threads' barrier waits, so beside two busy processes the demo finished sooner with
    one worker than with none (issue 37's closing note).  The output is the same either way."""
    import os

    if args.seeds <= 1:
        return 0
    if args.seed_workers is not None:  # (its own name: `workers` is the Dask engine's, checked as such)
        return min(args.seed_workers, args.seeds - 1)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(min(cores - 1, args.seeds - 1), 0)


def _cmd_demo(args: argparse.Namespace) -> int:
    from contextlib import nullcontext

    from smaso.student.compare import compare_student
    from teachers.engine import ProcessEngine
    from teachers.ladder import Ladder
    from teachers.sampling import sample_ladder

    t0 = time.perf_counter()
    _set_threads(args, default=1)  # (as every command: benchmarks/bench_out_of_core.py, contention)
    lad = Ladder.default(mode="bottomup" if args.teacher == "summarization" else "topdown")
    _check_width(args, lad)
    _check_memory(lad, args.n, "-n", factor=3)  # the sample, its one-hot inputs per batch, the report
    sample = sample_ladder(lad, args.n, args.seed, progress=False, device=args.device).to("cpu")
    # evaluation rows never trained on: fresh rows of stream seed + 1 (the statistics, the accuracy over
    # seeds and the event alignment are measured on them)
    evaluation = sample_ladder(lad, args.eval_examples, args.seed + 1, progress=False) \
        if args.evaluate == "held-out" else False
    workers = args.seed_workers_used = _workers(args)  # (recorded in comparison.json: seed_workers)
    with ProcessEngine(workers) if workers else nullcontext() as engine:
        # the other seeds go to the worker processes first (submitted before this process computes anything:
        # a fork mid-computation could copy a held lock); this process runs seed --student-seed meanwhile
        # (this process also trains the first `here` of them beside its own seed: it has the report to write too,
        # about the work of one or two seeds (issue 39's profile), so it takes a share of one of w + 2 parts)
        here = (args.seeds - 1) // (workers + 2) if engine is not None else args.seeds - 1
        others = _other_seeds(sample, args, evaluation, engine, control=True, skip=here, last=SUMMARY_LAST) \
            if engine is not None else []
        _demo_report(args, lad, sample, evaluation, others, t0, compare_student, here=here, engine=engine)
    return 0


def _errors_figure(student: Any, lad: Any, options: dict, groups: int, out_dir: Path, title: str) -> list[str]:
    """errors_vs_n.png and .json in ``out_dir``: the trained ``student``'s errors and noise floors as N doubles,
    on fresh rows of stream ``--seed`` + 3 (:func:`~smaso.student.compare.errors_against_n`): which terms are noise,
    which persist.  ``options``: the demo's ``n``, ``seed``, ``loss`` and ``P_source`` (picklable, unlike the
    parsed arguments).  The paths written."""
    from smaso.plots import plot_errors_against_n
    from smaso.student.compare import errors_against_n
    from teachers.sampling import sample_ladder

    fresh = sample_ladder(lad, options["n"], options["seed"] + 3, progress=False)
    by_n = errors_against_n(student, fresh, n_min=1024, loss=options["loss"], P_source=options["P_source"],
                            noise_groups=groups)
    plot_errors_against_n(by_n, out_dir / "errors_vs_n.png", title=f"{title}: errors and noise floors against N")
    _write_json(out_dir / "errors_vs_n.json", by_n)
    return [str(out_dir / "errors_vs_n.png"), str(out_dir / "errors_vs_n.json")]


def _demo_report(args: argparse.Namespace, lad: Any, sample: Any, evaluation: LadderSample | bool, others: Any,
                 t0: float, compare_student: Callable[..., ComparisonResult], here: int = 0,
                 engine: ProcessEngine | None = None) -> None:
    """What ``smaso demo`` prints and writes, the other seeds' runs being the first ``here`` of them, trained here
    in one population with ``--student-seed``'s, then ``others`` (futures or runs, :func:`_other_seeds`);
    ``evaluation`` is the held-out rows, or False (``--evaluate training``).  With ``engine`` (the pool that trains
    ``others``), the errors against N (:func:`_errors_figure`) are measured and drawn there, queued after its
    seeds, while this process checks Thm 3 and draws the other figures: the same files."""
    from teachers.ladder import Ladder
    from teachers.sampling import sample_ladder

    print(f"smaso demo: {args.n} examples from the built-in ladder "
          f"({lad.depth} levels below the label, {lad.total_regions} regions, {lad.num_classes} classes)")
    if args.teacher == "summarization":
        print("teacher: the paper's summarization ladder: leaf events drawn, each parent event a fixed 16-to-4 "
              "function of its two children's events, the label the top event;\n"
              "so y is a function of x (Bayes-optimal accuracy 1), while broadness of knowledge fails by design "
              "(a child's event is not determined by its parent's)\n")
    else:
        print("teacher: the top-down stochastic ladder (--teacher topdown): events drawn from the label down, so "
              "y is not a function of x;\nbroadness of knowledge fails by construction and the Bayes-optimal "
              "accuracy is below 1\n")
    report = inspect_report(sample, bayes_n=args.bayes_n, device=args.device)
    print_report(report, lad)
    title = "default ladder: student vs reformulation"
    print(f"\n== student vs reformulation (Thm 4 / Eq 9): {args.steps} SGD steps, width {args.width}, "
          f"readout {args.readout or 'none'}, {args.activation}{f', BN {args.bn} the gate' if args.bn else ''}; "
          f"measured every {args.eval_every} steps on {args.eval_examples} "
          f"{'held-out' if evaluation is not False else 'training'} rows ==")
    # --student-seed's run and its shuffled-label control (the reformulation's table and the alignment both measure
    # it), trained as one batched population with the first `here` other seeds and their controls (without the
    # alignment): the runs of _run_comparison, _shuffled_control and _other_seeds (weights bit for bit, numbers to
    # float64 round-off: the members' statistics are summed in one batched pass, smaso.student.member_statistics);
    # the control's alignment is measured at its first and last checkpoints only, the rows read (its last, ranked at
    # its first: the same numbers; about 0.1 s a checkpoint on the main process, issue 39), and the other seeds'
    # runs at the checkpoints the summary over seeds reads only (SUMMARY_LAST)
    import dataclasses

    from smaso.student.population import compare_population
    from smaso.student.seeds import _run_dicts

    held = _held_out(sample, args, evaluation)
    (s_cfg, t_cfg, e_cfg), (_, t_ctl, e_ctl) = _configs(args, held), _configs(args, held, shuffle_labels=True)
    mine = [args.student_seed + i for i in range(1, 1 + here)]
    e_mine = dataclasses.replace(e_cfg, alignment=False)
    res = compare_population(sample, s_cfg, [t_cfg, t_ctl, *(dataclasses.replace(t_cfg, seed=s) for s in mine),
                                             *(dataclasses.replace(t_ctl, seed=s) for s in mine)],
                             [e_cfg, e_ctl, *[e_mine] * (2 * here)], device=args.device,
                             progress=_progress(args), _member_options=[
                                 {}, {"_alignment_ends": True}, *[{"_last_checkpoints": SUMMARY_LAST}] * (2 * here)])
    result, shuffled = res[0], res[1]
    student, _, _ = result._trained()
    out_dir = Path(args.out)  # (its default, under $SMASO_OUTPUT, is set by cli_support._check_early)
    groups = _noise_groups(args)
    # the trained student's errors and floors as N doubles go to the pool first: its worker has none of this
    # process's report to write and would wait idle once its seeds are done (issue 39: the demo's critical path
    # was this process; bench_demo.py)
    options = {k: getattr(args, k) for k in ("n", "seed", "loss", "P_source")}
    by_n = engine.submit(_errors_figure, student, lad, options, groups, out_dir, title) \
        if engine is not None and groups and args.n >= 2048 else None
    # first what needs no other seed's run, while the workers finish theirs (printed and listed in the order of
    # before): the accuracy, Thm 3's check, the figures and the errors against N
    accuracy = accuracy_report(lad, student, report["bayes_optimal"], args.seed)
    control = shuffled.final().get("alignment")
    # Thm 3: on the fully informative ladder with one-hot leaves the reformulation is exact
    from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig

    fi = Ladder.fully_informative(depth=2, branching=2, leaf_events=2, concentration=1.0, seed=args.seed)
    fi_sample = sample_ladder(fi, 4096, args.seed, progress=False, device=args.device).to("cpu")
    exact = compare_student(fi_sample, StudentConfig(width=4, readout=None, activation=args.activation,
                                                     batch_norm=args.bn or False),
                            TrainingConfig(steps=50, lr=args.lr, seed=args.student_seed),
                            EvaluationConfig(eval_every=50, held_out=False, alignment=False), device=args.device)
    worst = exact.max_error(("F_propagated", "G_propagated", "dW_propagated"))
    verdict = (f"undefined ({'; '.join(exact.final()['degenerate'])}): not a check of Thm 3" if math.isnan(worst)
               else f"{worst:.1e}" + (" (float64 round-off: exact)" if worst < 1e-10 else " (NOT exact)"))
    files = _save_figures(out_dir, result, title, control=control)
    if groups and args.n >= 2048:
        files += by_n.result() if by_n is not None else _errors_figure(student, lad, options, groups, out_dir, title)
    runs = [*_run_dicts(mine, res[2:], shuffled=True), *others]
    seeds = _seed_summary(args, result, runs, control=shuffled)
    print(result.table(every=max(1, len(result.history) // 8)))
    print(f"\nerrors and terms of the reformulation at the end of training, trained vs controls "
          f"({seeds.evaluation} rows; student seed {args.student_seed}'s training curve above)")
    print(seeds.table())
    print("\n" + ACCURACY_WORDS.format(ev=seeds.evaluation or "", seed=args.student_seed), end="")
    print(accuracy["text"])
    rows = f"{args.eval_examples} {'held-out' if evaluation is not False else 'training'} rows"
    if args.alignment:
        _print_alignment(result, control, rows)
    print(f"\nThm 3 check (fully informative ladder, one-hot leaves, {len(exact.history)} checkpoints): "
          f"largest relative error {verdict}")
    payload = {"ladder_report": report, **_comparison_payload(result, args),
               "accuracy": {k: v for k, v in accuracy.items() if k != "text"},
               "alignment_control_shuffled_labels": control,
               "seeds": seeds.to_dict(), "thm3_fully_informative_max_error": worst,
               "seed_workers": getattr(args, "seed_workers_used", 0)}
    _write_json(out_dir / "comparison.json", payload)
    files.insert(0, str(out_dir / "comparison.json"))
    print(f"\nwrote {', '.join(files)}  ({time.perf_counter() - t0:.1f} s in all)")


def _cmd_compare(args: argparse.Namespace) -> int:
    from teachers.dataset import load_dataset

    sample = load_dataset(args.files, partial=args.partial)
    lad = sample.ladder
    held_out = _held_out(sample, args)  # (a bad --eval-examples or --width is refused before any output)
    _check_width(args, lad)
    print(lad.describe())
    title = f"{lad.name}: student vs reformulation"
    _set_threads(args, default=1)
    with _engine(args) as engine:
        result = _run_comparison(sample, args, engine=engine, held_out=held_out)
        control = _shuffled_control(sample, args, engine=engine, held_out=held_out) if args.shuffled_control \
            else None
        runs = _other_seeds(sample, args, held_out, engine, control=control is not None) if args.seeds > 1 else []
        seeds = _seed_summary(args, result, runs, control=control)
    print(result.table(every=max(1, len(result.history) // 8), last_checkpoint=seeds is None))
    if seeds is not None:
        print(f"\nerrors and terms at the end of training (student seed {args.student_seed}'s training curve above)")
        print(seeds.table())
    accuracy = accuracy_report(lad, result._trained()[0], bayes_estimate(sample, args.device),
                               int(getattr(sample, "seed", 0) or 0))
    print(accuracy["text"])
    aligned = control.final().get("alignment") if control is not None else None
    if args.alignment:
        where = "held-out" if held_out is True else "training"
        _print_alignment(result, aligned, f"the {min(args.eval_examples, len(sample))} {where} evaluation rows")
    if args.out:
        payload = {**_comparison_payload(result, args), "accuracy": {k: v for k, v in accuracy.items() if k != "text"},
                   **({"seeds": seeds.to_dict()} if seeds is not None else {}),
                   **({"alignment_control_shuffled_labels": aligned} if aligned is not None else {})}
        files = _save_outputs(args.out, payload, result, title, control=aligned)
        print(f"\nwrote {', '.join(files)}")
    return 0
