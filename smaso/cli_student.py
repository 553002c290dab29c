"""The student's runs from the command line: ``smaso demo`` and ``smaso compare``'s options turned into
:func:`~smaso.student.compare.compare_student` and :func:`~smaso.student.seeds.compare_seeds` calls, and the
JSON payload of their results."""

from __future__ import annotations

import sys

from smaso.cli_support import _quiet


def _student_kwargs(args, held_out) -> dict:
    """:func:`~smaso.student.compare.compare_student`'s options from the command line (all but the seed)."""
    return dict(width=args.width[0] if len(args.width) == 1 else args.width, activation=args.activation,
                batch_norm=args.bn or False, bias=not args.no_bias, loss=args.loss, steps=args.steps, lr=args.lr,
                batch_size=args.batch_size or None, weight_decay=args.weight_decay, eval_every=args.eval_every,
                eval_examples=args.eval_examples, P_source=args.P_source, noise_groups=_noise_groups(args),
                device=args.device, shared=getattr(args, "shared", False), readout=args.readout or None,
                optimizer=args.optimizer, lr_schedule=args.lr_schedule, plateau=args.plateau, held_out=held_out)


def _progress(args) -> bool:
    """A progress bar over the training steps: on a terminal, unless ``--no-progress`` or ``-q``."""
    return not getattr(args, "no_progress", False) and not _quiet(args) and sys.stderr.isatty()


def _held_out(sample, args, held_out=None):
    if held_out is None:
        held_out = args.evaluate == "held-out"
    if held_out is True and args.eval_examples >= len(sample):
        raise ValueError(f"--eval-examples: the {args.eval_examples} held-out rows leave none of the dataset's "
                         f"{len(sample)} rows to train on; lower --eval-examples or pass --evaluate training")
    return held_out


def _run_comparison(sample, args, engine=None, alignment=None, held_out=None):
    from smaso.student.compare import compare_student

    kwargs = _student_kwargs(args, _held_out(sample, args, held_out))
    return compare_student(sample, seed=args.student_seed, engine=engine, alignment=alignment,
                           progress=_progress(args), **kwargs)


def _shuffled_control(sample, args, engine=None, held_out=None, alignment=None):
    """The shuffled-label control of ``--student-seed``'s run: the same student, options and evaluation rows,
    trained on permuted labels (:func:`~smaso.student.compare.compare_student` with ``shuffle_labels=True``), with
    the event alignment on ``alignment``'s rows at its checkpoints when given (its last checkpoint's is the
    alignment table's control; its best matches ranked at its own initialisation)."""
    from smaso.student.compare import compare_student

    kwargs = _student_kwargs(args, _held_out(sample, args, held_out))
    return compare_student(sample, seed=args.student_seed, engine=engine, progress=_progress(args),
                           shuffle_labels=True, alignment=alignment, **kwargs)


def _seed_summary(sample, args, result, engine=None, held_out=None, control=None):
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


def _noise_groups(args) -> int | None:
    k = getattr(args, "noise_groups", 10)
    if k == 1:
        raise ValueError("--noise-groups: expected 0 (no floors) or at least 2 groups, got 1")
    return k or None


def _comparison_payload(result, args) -> dict:
    return {"history": result.history, "seconds": result.seconds,
            "stopped_at": result.stopped_at,
            "student": {k: getattr(args, k) for k in ("width", "readout", "activation", "bn", "loss", "steps", "lr",
                                                       "optimizer", "lr_schedule", "plateau", "seeds", "evaluate",
                                                       "batch_size", "weight_decay", "P_source")}}
