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

    from smaso.student.compare import ComparisonResult
    from teachers.engine import DaskEngine, SerialEngine
    from teachers.sampling import LadderSample
    from teachers.store_reader import ChunkedLadderData


def _student_kwargs(args: argparse.Namespace, held_out: int | None) -> dict:
    """:func:`~smaso.student.compare.compare_student`'s options from the command line (all but the seed)."""
    return dict(width=args.width[0] if len(args.width) == 1 else args.width, activation=args.activation,
                batch_norm=args.bn or False, bias=not args.no_bias, loss=args.loss, steps=args.steps, lr=args.lr,
                batch_size=args.batch_size or None, weight_decay=args.weight_decay, eval_every=args.eval_every,
                eval_examples=args.eval_examples, P_source=args.P_source, noise_groups=_noise_groups(args),
                device=args.device, shared=getattr(args, "shared", False), readout=args.readout or None,
                optimizer=args.optimizer, lr_schedule=args.lr_schedule, plateau=args.plateau, held_out=held_out)


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
                    engine: SerialEngine | DaskEngine | None = None, alignment: Any = None,
                    held_out: Any = None) -> ComparisonResult:
    from smaso.student.compare import compare_student

    kwargs = _student_kwargs(args, _held_out(sample, args, held_out))
    return compare_student(sample, seed=args.student_seed, engine=engine, alignment=alignment,
                           progress=_progress(args), **kwargs)


def _shuffled_control(sample: LadderSample | ChunkedLadderData, args: argparse.Namespace,
                      engine: SerialEngine | DaskEngine | None = None, held_out: Any = None,
                      alignment: Any = None) -> Any:
    """The shuffled-label control of ``--student-seed``'s run: the same student, options and evaluation rows,
    trained on permuted labels (:func:`~smaso.student.compare.compare_student` with ``shuffle_labels=True``), with
    the event alignment on ``alignment``'s rows at its checkpoints when given (its last checkpoint's is the
    alignment table's control; its best matches ranked at its own initialisation)."""
    from smaso.student.compare import compare_student

    kwargs = _student_kwargs(args, _held_out(sample, args, held_out))
    return compare_student(sample, seed=args.student_seed, engine=engine, progress=_progress(args),
                           shuffle_labels=True, alignment=alignment, **kwargs)


def _seed_summary(sample: LadderSample | ChunkedLadderData, args: argparse.Namespace, result: ComparisonResult,
                  engine: SerialEngine | DaskEngine | None = None, held_out: Any = None, control: Any = None) -> Any:
    """The summary over ``--seeds`` students (``result``: the first seed's run, ``--student-seed``; the others,
    the next seeds, run as tasks of ``engine``), with the initialisation control and, given ``control`` (the first
    seed's shuffled-label run, :func:`_shuffled_control`), the shuffled-label control of every seed; None for one
    seed without a control."""
    if args.seeds <= 1 and control is None:
        return None
    from smaso.student.seeds import compare_seeds, summarize_seeds

    seeds = [args.student_seed + i for i in range(args.seeds)]
    runs = []
    if len(seeds) > 1:
        _, runs = compare_seeds(sample, seeds[1:], engine=engine, progress=_progress(args),
                                shuffled=control is not None,
                                **_student_kwargs(args, _held_out(sample, args, held_out)))
    shuffled = None if control is None else [control, *(r["shuffled"] for r in runs)]
    return summarize_seeds([result, *runs], seeds=seeds, last=3, shuffled=shuffled)


def _noise_groups(args: argparse.Namespace) -> int | None:
    k = getattr(args, "noise_groups", 10)
    if k == 1:
        raise ValueError("--noise-groups: expected 0 (no floors) or at least 2 groups, got 1")
    return k or None


def _comparison_payload(result: ComparisonResult, args: argparse.Namespace) -> dict:
    return {"history": result.history, "seconds": result.seconds,
            "stopped_at": result.stopped_at,
            "student": {k: getattr(args, k) for k in ("width", "readout", "activation", "bn", "loss", "steps", "lr",
                                                       "optimizer", "lr_schedule", "plateau", "seeds", "evaluate",
                                                       "batch_size", "weight_decay", "P_source")}}


def _save_outputs(out_dir: str | os.PathLike, payload: dict, result: ComparisonResult, title: str) -> list[str]:
    from smaso.plots import plot_comparison

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / "comparison.json", payload)
    plot_comparison(result, out / "comparison.png", title=title)
    return [str(out / "comparison.json"), str(out / "comparison.png")]


def _cmd_demo(args: argparse.Namespace) -> int:
    from smaso.student.compare import compare_student
    from teachers.ladder import Ladder
    from teachers.sampling import sample_ladder

    t0 = time.perf_counter()
    _set_threads(args, default=1)  # (as every command: benchmarks/bench_out_of_core.py, contention)
    lad = Ladder.default(mode="bottomup" if args.teacher == "summarization" else "topdown")
    _check_width(args, lad)
    _check_memory(lad, args.n, "-n", factor=3)  # the sample, its one-hot inputs per batch, the report
    sample = sample_ladder(lad, args.n, args.seed, progress=False, device=args.device).to("cpu")
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
          f"{args.activation}{f', BN {args.bn} the gate' if args.bn else ''} ==")
    # evaluation rows never trained on: fresh rows of stream seed + 1 (those of the accuracy below), and
    # another fresh set for the alignment's probes
    evaluation = sample_ladder(lad, args.eval_examples, args.seed + 1, progress=False) \
        if args.evaluate == "held-out" else False
    held_out = sample_ladder(lad, 4096, args.seed + 2, progress=False)
    result = _run_comparison(sample, args, alignment=held_out, held_out=evaluation)
    # the shuffled-label control of every seed: the reformulation's table and the alignment both measure it
    shuffled = _shuffled_control(sample, args, held_out=evaluation, alignment=held_out)
    seeds = _seed_summary(sample, args, result, held_out=evaluation, control=shuffled)
    print(result.table(every=max(1, len(result.history) // 8)))
    print(f"\nerrors and terms of the reformulation at the end of training, trained vs controls "
          f"({seeds.evaluation} rows; student seed {args.student_seed}'s training curve above)")
    print(seeds.table())
    accuracy = accuracy_report(lad, result.student, report["bayes_optimal"], args.seed)
    print(accuracy["text"])
    control = shuffled.final()["alignment"]
    print("\n== event alignment of the hidden nodes (on 4096 held-out rows; the paper's question: do nodes become "
          "selective for the latent event of their receptive field?) ==")
    print(result.alignment_table(checkpoints=4, legend=True))
    print("control: the same student trained on shuffled labels (the same options and steps), at the end")
    print("\n".join(f"  level {r['level']}: eta2 {r['eta2']:.3f}, MI {r['mi']:.3f} bits, spec {r['spec']:.3f}, "
                    f"match {r['matched']}/{r['indicators']}, kept {r['kept']:.2f}, dead {r['dead']}/{r['nodes']}, "
                    f"probe {r['probe']:.3f}" for r in control))
    # Thm 3: on the fully informative ladder with one-hot leaves the reformulation is exact
    fi = Ladder.fully_informative(depth=2, branching=2, leaf_events=2, concentration=1.0, seed=args.seed)
    fi_sample = sample_ladder(fi, 4096, args.seed, progress=False, device=args.device).to("cpu")
    exact = compare_student(fi_sample, width=4, activation=args.activation, batch_norm=args.bn or False,
                            steps=50, lr=args.lr, eval_every=50, seed=args.student_seed, device=args.device,
                            held_out=False)
    worst = exact.max_error(("F_propagated", "G_propagated", "dW_propagated"))
    verdict = (f"undefined ({'; '.join(exact.final()['degenerate'])}): not a check of Thm 3" if math.isnan(worst)
               else f"{worst:.1e}" + (" (float64 round-off: exact)" if worst < 1e-10 else " (NOT exact)"))
    print(f"\nThm 3 check (fully informative ladder, one-hot leaves, {len(exact.history)} checkpoints): "
          f"largest relative error {verdict}")
    out_dir = args.out  # (its default, under $SMASO_OUTPUT, is set by cli_support._check_early)
    payload = {"ladder_report": report, **_comparison_payload(result, args),
               "accuracy": {k: v for k, v in accuracy.items() if k != "text"},
               "alignment_control_shuffled_labels": control,
               "seeds": seeds.to_dict(), "thm3_fully_informative_max_error": worst}
    files = _save_outputs(out_dir, payload, result, title)
    groups = _noise_groups(args)
    if groups and args.n >= 2048:
        from smaso.plots import plot_errors_against_n
        from smaso.student.compare import errors_against_n

        # the trained student's errors and floors as N doubles (on fresh rows): which terms are noise, which persist
        fresh = sample_ladder(lad, args.n, args.seed + 3, progress=False)
        by_n = errors_against_n(result.student, fresh, n_min=1024, loss=args.loss, P_source=args.P_source,
                                noise_groups=groups)
        plot_errors_against_n(by_n, Path(out_dir) / "errors_vs_n.png",
                              title=f"{title}: errors and noise floors against N")
        _write_json(Path(out_dir) / "errors_vs_n.json", by_n)
        files += [str(Path(out_dir) / "errors_vs_n.png"), str(Path(out_dir) / "errors_vs_n.json")]
    print(f"\nwrote {', '.join(files)}  ({time.perf_counter() - t0:.1f} s in all)")
    return 0


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
        seeds = _seed_summary(sample, args, result, engine=engine, held_out=held_out, control=control)
    print(result.table(every=max(1, len(result.history) // 8), last_checkpoint=seeds is None))
    if seeds is not None:
        print(f"\nerrors and terms at the end of training (student seed {args.student_seed}'s training curve above)")
        print(seeds.table())
    accuracy = accuracy_report(lad, result.student, bayes_estimate(sample, args.device),
                               int(getattr(sample, "seed", 0) or 0))
    print(accuracy["text"])
    if args.out:
        payload = {**_comparison_payload(result, args), "accuracy": {k: v for k, v in accuracy.items() if k != "text"},
                   **({"seeds": seeds.to_dict()} if seeds is not None else {})}
        files = _save_outputs(args.out, payload, result, title)
        print(f"\nwrote {', '.join(files)}")
    return 0
