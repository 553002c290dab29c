"""``smaso sweep``: the sample-complexity sweep from the command line (:func:`smaso.sweep.sample_complexity_sweep`):
test error against the training-set size P over a grid of P and seeds, P* with its interval, JSON and a figure."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from smaso.cli_options import (
    _SPEC_REPLACES,
    _add_engine_options,
    _add_ladder_options,
    _int_list,
    _nonneg_int,
    _positive_float,
    _positive_int,
    ladder_from_args,
)
from smaso.cli_support import _engine, _quiet, _set_threads, _write_json

if TYPE_CHECKING:
    from teachers.ladder import Ladder

#: --threshold's default: smaso.sweep.DEFAULT_THRESHOLD (not imported: it would import numpy for --help)
THRESHOLD = 0.1


def add_sweep_parser(sub: Any) -> None:
    """The ``sweep`` subcommand on ``sub`` (``cli.build_parser``'s subparsers), with the shared ladder and engine
    options (:mod:`smaso.cli_options`)."""
    from smaso.student.config import StudentConfig, TrainingConfig  # (no torch, no numpy: --help stays instant)

    pos, nonneg, ints = _positive_int, _nonneg_int, _int_list
    st, tr = StudentConfig(), TrainingConfig()
    p = sub.add_parser("sweep", help="test error against the training-set size P, and P* (sample complexity)",
                       description="Train a student on P rows for every P of --P and every seed, measure its error "
                                   "on held-out rows, and estimate P*, the P at which the test error falls below "
                                   "--threshold (interpolated in log P; the median over seeds with an interval of "
                                   "order statistics; NaN with the reason when the curves do not cross inside the "
                                   "grid).  The runs of one shape are trained as one batched population; with "
                                   "--engine dask they are tasks on a cluster.  Writes to --out (default "
                                   "$SMASO_OUTPUT/sweep): sweep.json (every run, the median curve, P*), sweep.jsonl "
                                   "(the runs as they finish) and sweep.png.")
    _add_ladder_options(p)
    g = p.add_argument_group("the Random Hierarchy Model (instead of the ladder options)")
    g.add_argument("--rhm", type=ints, default=None, metavar="V,NC,M,S,L",
                   help="the teacher Ladder.rhm(v, n_classes, m, s, L, seed=--ladder-seed)")
    g = p.add_argument_group("the sweep")
    g.add_argument("--P", dest="sizes", type=ints, required=True, help="training-set sizes, e.g. 64,128,256,512")
    g.add_argument("--seeds", type=pos, default=5, help="seeds 0..K-1 per P (data, initial weights, minibatches)")
    g.add_argument("--num-test", type=pos, default=2048, help="held-out rows per seed")
    g.add_argument("--data", default="disjoint", choices=("disjoint", "independent"),
                   help="disjoint: distinct derivations, test rows never training rows (teachers.derivations); "
                        "independent: rows drawn with replacement (a test row may be a training row)")
    g.add_argument("--threshold", type=_positive_float, default=THRESHOLD,
                   help="the test error whose crossing defines P*")
    g.add_argument("--population", type=pos, default=None,
                   help="at most this many runs per task, trained as one population (default: every run of one shape)")
    g = p.add_argument_group("student and training")
    g.add_argument("--student", default="ladder",
                   help="the student kind: a name of smaso.sweep.STUDENT_KINDS (ladder: the locally connected student, "
                        "on --rhm the CNN with filter s and stride s; shallow: one hidden layer on the flattened "
                        "input)")
    g.add_argument("--student-width", type=ints, default=[st.width] if isinstance(st.width, int) else list(st.width),
                   help="ladder student: nodes per hidden region (int or one per level)")
    g.add_argument("--readout", type=nonneg, default=st.readout or 0,
                   help="ladder student: nodes of the root's readout group (0: none)")
    g.add_argument("--activation", default=st.activation, help="hidden activation")
    g.add_argument("--shared", action="store_true", help="ladder student: share weights like a convolution")
    g.add_argument("--hidden", type=pos, default=256, help="shallow student: nodes of its hidden layer")
    g.add_argument("--loss", default=tr.loss, choices=["squared", "cross_entropy"], help="training loss")
    g.add_argument("--steps", type=nonneg, default=tr.steps, help="training steps of every run")
    g.add_argument("--lr", type=float, default=tr.lr, help="learning rate")
    g.add_argument("--optimizer", default=tr.optimizer, choices=("sgd", "adam", "adamw", "rmsprop"), help="optimizer")
    g.add_argument("--batch-size", type=nonneg, default=tr.batch_size or 0, help="minibatch (0: full-batch GD)")
    g.add_argument("--weight-decay", type=float, default=tr.weight_decay, help="Frobenius regularizer lambda")
    g.add_argument("--shuffle-labels", action="store_true", help="the control: training labels permuted")
    g.add_argument("--dtype", default="float64", choices=("float32", "float64"), help="the students' dtype")
    g.add_argument("--out", default=None, help="directory for sweep.json, sweep.jsonl and sweep.png "
                                                "(default: $SMASO_OUTPUT/sweep, else smaso-output/sweep)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar over the tasks")
    g.add_argument("--device", default=None, help="torch device ('cpu', 'cuda') of the training (default: cpu)")
    _add_engine_options(p)
    p.set_defaults(func=_cmd_sweep, lr_schedule=None)


def _teacher(args: argparse.Namespace) -> Ladder:
    """``--rhm`` or the ladder options' ladder."""
    if args.rhm is None:
        return ladder_from_args(args)
    given = [d for d in ("spec", *_SPEC_REPLACES)
             if d in getattr(args, "_given", ()) or (d == "spec" and args.spec)]
    if given:
        raise ValueError(f"--rhm: the RHM is the teacher; --{given[0].replace('_', '-')} describes another ladder")
    if len(args.rhm) != 5:
        raise ValueError(f"--rhm: expected five integers V,NC,M,S,L, got {','.join(map(str, args.rhm))}")
    from teachers.ladder import Ladder

    v, nc, m, s, L = args.rhm
    return Ladder.rhm(v, nc, m, s, L, seed=args.ladder_seed)


def _cmd_sweep(args: argparse.Namespace) -> int:
    import torch

    from smaso.output import output_dir
    from smaso.student.config import TrainingConfig
    from smaso.sweep import STUDENT_KINDS, DisjointSplit, IndependentDraws, sample_complexity_sweep

    _set_threads(args, default=1)
    if min(args.sizes) < 1:
        raise ValueError(f"--P: expected positive training-set sizes, got {','.join(map(str, args.sizes))}")
    if len(set(args.sizes)) != len(args.sizes):
        raise ValueError(f"--P: expected distinct sizes, got {','.join(map(str, args.sizes))}")
    if not 0 < args.threshold < 1:
        raise ValueError(f"--threshold: expected a test error in (0, 1), got {args.threshold}")
    lad = _teacher(args)
    out = Path(args.out) if args.out else output_dir("sweep", create=False)
    kind = STUDENT_KINDS.get(args.student)
    if kind is None:
        raise ValueError(f"--student: expected one of {', '.join(sorted(STUDENT_KINDS))}, got {args.student!r}")
    width = args.student_width[0] if len(args.student_width) == 1 else args.student_width
    given = {"width": ("student_width", width), "readout": ("readout", args.readout or None),
             "activation": ("activation", args.activation), "shared": ("shared", args.shared),
             "hidden": ("hidden", args.hidden)}
    for key, (dest, _) in given.items():
        if key not in kind.defaults and dest in getattr(args, "_given", ()):
            raise ValueError(f"--{dest.replace('_', '-')}: the {kind.name} student does not take it")
    options = {key: v for key, (_, v) in given.items() if key in kind.defaults}
    rhm = getattr(lad, "rhm_params", None)
    if args.data == "disjoint" and rhm is not None and max(args.sizes) + args.num_test > rhm.num_data:
        raise ValueError(f"--P, --num-test: {max(args.sizes)} + {args.num_test} distinct rows asked, but this RHM has "
                         f"only P_max = {rhm.num_data}")
    training = TrainingConfig(steps=args.steps, lr=args.lr, batch_size=args.batch_size or None, loss=args.loss,
                              optimizer=args.optimizer, weight_decay=args.weight_decay,
                              shuffle_labels=args.shuffle_labels)
    data = (DisjointSplit if args.data == "disjoint" else IndependentDraws)(lad, args.num_test)
    out.mkdir(parents=True, exist_ok=True)
    with _engine(args) as engine:
        result = sample_complexity_sweep(lad, args.sizes, args.seeds, student=args.student, student_options=options,
                                         training=training, make_data=data, engine=engine,
                                         population=args.population, dtype=getattr(torch, args.dtype),
                                         device=args.device, stream=out / "sweep.jsonl",
                                         progress=not (args.no_progress or _quiet(args)))
    result.meta["teacher"] = repr(lad)
    star = result.p_star(args.threshold)
    _write_json(out / "sweep.json", result.to_dict(args.threshold), args)
    from smaso.plots.sweep import plot_sweep

    plot_sweep(result, out / "sweep.png", threshold=args.threshold)
    if not _quiet(args):
        median = result.median_curve()
        print(f"{result.student} student on {lad!r}: {len(result.seeds)} seeds, test error (median over seeds)")
        for P, e in zip(result.sizes, median, strict=True):
            print(f"  P = {P:>9d}  {'n/a' if math.isnan(e) else f'{e:.4f}'}")
        if math.isfinite(star.value):
            ends = (f"[{star.low:.4g}, {star.high:.4g}] ({100 * star.coverage:.1f}%)"
                    if math.isfinite(star.low) and math.isfinite(star.high) else f"n/a: {star.interval_reason}")
            print(f"P* (test error {star.threshold:g}) = {star.value:.4g}, interval {ends}")
        else:
            print(f"P* (test error {star.threshold:g}) undefined: {star.reason}")
        print(f"wrote {out / 'sweep.json'}, {out / 'sweep.jsonl'}, {out / 'sweep.png'}")
    return 0
