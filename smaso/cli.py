"""The ``smaso`` command line.

::

    smaso demo                                   # sample -> train a student -> compare with the theory
    smaso compare data.npz --width 16 --bn --steps 1000 --out results/
    smaso sample ladder -n 1000000 --seed 0 --out data.zarr [--depth 4 --branching 4 --events 16]
    smaso sample ladder -n 100000000 --out big.zarr --engine dask --workers 2   # one task per chunk
    smaso sample ladder --spec ladder.json -n 100000 --shard 0/4 --out part0.zarr
    smaso sample tent --k 6 -n 100000 --seed 0 --out tent.npz [--shard 0/4] [--noise 0.01]
    smaso inspect data.npz [part1.npz ...]       # counts, statistics vs exact, Bayes-optimal accuracy
    smaso inspect tent.npz                       # tent data: k, N, x range and histogram, max |y - tau^k(x)|
    smaso spec --depth 3 --events 8 --out ladder.json   # write an editable spec file
    smaso spec --graph conv1d --width 8 --kernels 3,2,3 --strides 1,2,1 --events 2,3,3,2 --out graph.json
    smaso sample ladder --spec graph.json -n 100000 --out graph.zarr  # a graph ladder (overlapping regions)
    smaso sweep --rhm 8,8,8,2,2 --P 128,256,512,1024 --num-test 1024 --out sweep/   # test error against P, P*

Every subcommand has ``--help`` (which shows each option's default).  Bad input ends with
``smaso: error: <what and where>`` and exit status 2; nothing half-written is left on disk.

Conventions: ``-q``/``--quiet`` (before or after the command) prints nothing but errors, warnings and
data asked for on standard output; ``-`` as a text output path (``inspect --json -``, ``spec --out -``)
means standard output, which then holds only that text; ``--device`` wherever tensors are made;
third-party warnings (ArviZ's notice at import, tqdm's) are not shown, except with ``--debug``.
The command imports torch and the library only once a command runs, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import errno
import re
import signal
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from smaso._version import __version__
from smaso.cli_options import (
    _add_engine_options,
    _add_ladder_options,
    _int_list,
    _nonneg_float,
    _nonneg_int,
    _positive_int,
    ladder_from_args,
)
from smaso.cli_student import _cmd_compare, _cmd_demo
from smaso.cli_support import (
    STDOUT,
    _check_early,
    _check_memory,
    _check_store_target,
    _check_tent_memory,
    _cli_warnings,
    _engine,
    _free_disk,
    _quiet,
    _set_threads,
    _streams,
    _terminate_as_interrupt,
    _Terminated,
    _write_json,
    _write_text,
)
from smaso.cli_sweep import add_sweep_parser
from smaso.reports import (
    _pieces,
    inspect_report,
    print_report,
    print_tent_report,
    tent_report,
)
from smaso.student._activation_names import activation_choices

if TYPE_CHECKING:
    from typing import NoReturn


__all__ = ["inspect_report", "main"]


def _cmd_sample_ladder(args: argparse.Namespace) -> int:
    from teachers.sampling import parse_shard

    _check_store_target(args.out)
    lad = ladder_from_args(args)
    # one thread unless asked: a second one gains a few percent on a quiet machine and loses most of the
    # throughput when other processes compete for the cores (benchmarks/bench_out_of_core.py, contention)
    _set_threads(args, default=1)
    t0 = time.perf_counter()
    progress = False if args.no_progress or _quiet(args) else None
    i, k = parse_shard(args.shard)
    lo, hi = i * args.n // k, (i + 1) * args.n // k
    if str(args.out).endswith(".npz"):  # format 1: one file, sampled in memory
        from teachers.dataset import save_dataset
        from teachers.sampling import sample_ladder

        _check_memory(lad, hi - lo, "-n", factor=2)  # the sample and the file's buffers
        if args.engine != "serial":
            raise ValueError("--engine: a .npz file (format 1) is written by one process; give a .zarr store")
        sample = sample_ladder(lad, args.n, args.seed, shard=args.shard, chunk_size=args.chunk_size,
                               device=args.device, progress=progress)
        path = save_dataset(sample.to("cpu"), args.out, compress=bool(args.compress))
    else:  # format 2: a chunked store, written chunk by chunk
        from teachers.chunked import row_bytes, sample_to_store

        # zstd keeps at least a quarter of the raw bytes on every ladder measured: a lower bound
        need = (hi - lo) * row_bytes(lad) * (1.0 if args.compress in (False, "none") else 0.25)
        free = _free_disk(args.out)
        if free is not None and need > free:
            raise ValueError(f"-n: {hi - lo:,} examples need at least {need / 1e9:.3g} GB on disk, and "
                             f"{free / 1e9:.3g} GB are free where --out points; sample fewer, or in shards "
                             "(--shard i/k) on a cluster's shared storage")

        from teachers.engine import EngineError

        with _engine(args) as engine:
            try:
                path = sample_to_store(lad, args.n, args.out, args.seed, shard=args.shard, chunk_rows=args.chunk_rows,
                                       compress=True if args.compress is None else args.compress,
                                       device=args.device, progress=progress, engine=engine)
            except EngineError as e:  # the store writer has removed what it wrote (teachers.store)
                raise EngineError(f"{e}; nothing was written to {args.out}") from None
    t1 = time.perf_counter()
    print(lad.describe())
    print(f"sampled {hi - lo} examples (rows {lo}..{hi} of {args.n}, shard {i}/{k}, seed {args.seed}) and wrote "
          f"{path} in {t1 - t0:.2f} s ({(hi - lo) / max(t1 - t0, 1e-9):,.0f} examples/s)")
    return 0


def _cmd_sample_tent(args: argparse.Namespace) -> int:
    from teachers.tent import sample_tent, save_tent_dataset

    _check_tent_memory(args.n, args.shard)
    t0 = time.perf_counter()
    sample = sample_tent(args.n, args.k, args.seed, shard=args.shard, chunk_size=args.chunk_size, noise=args.noise)
    t1 = time.perf_counter()
    path = save_tent_dataset(sample, args.out, compress=args.compress)
    t2 = time.perf_counter()
    i, n_shards = sample.meta["shard"]
    noise = f", Gaussian label noise sigma={args.noise:g}" if args.noise else ""
    print(f"tent teacher: y = tau^{args.k}(x), x ~ U[0, 1), {_pieces(args.k)} linear pieces{noise}")
    print(f"sampled {len(sample)} examples (rows {sample.start}..{sample.start + len(sample)} of {args.n}, "
          f"shard {i}/{n_shards}, seed {args.seed}) in {t1 - t0:.2f} s; wrote {path} in {t2 - t1:.2f} s")
    return 0


def _cmd_spec(args: argparse.Namespace) -> int:
    from teachers.spec_io import save_spec, spec_to_jsonable
    from teachers.spec_text import spec_text

    lad = ladder_from_args(args)
    if args.out == STDOUT:
        _write_text(args, STDOUT, spec_text(spec_to_jsonable(lad.to_dict())))
        return 0
    path = save_spec(lad, args.out)
    print(f"{lad.describe()}\nwrote {path}")
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from teachers.dataset import load_dataset
    from teachers.tent import FORMAT as TENT_FORMAT
    from teachers.tent import dataset_format, load_tent_dataset

    if dataset_format(args.files[0]) == TENT_FORMAT:
        report = tent_report(load_tent_dataset(args.files, partial=args.partial))
        print_tent_report(report)
    else:
        source = load_dataset(args.files, partial=args.partial)
        _set_threads(args, default=1)
        with _engine(args) as engine:
            report = inspect_report(source, bayes_n=args.bayes_n, engine=engine, device=args.device,
                                    progress=not args.no_progress and not _quiet(args) and sys.stderr.isatty())
        print_report(report, source.ladder)
    if args.json:
        _write_json(args.json, report, args)
        print(f"\nwrote {args.json}")
    return 0


def _student_options(p: argparse.ArgumentParser, *, out_default: str | None = None, seeds: int = 1,
                     outputs: str = "comparison.json and comparison.png") -> None:
    # every default is the library's (smaso.student.config: one set for demo, compare and compare_student)
    from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig

    st, tr, ev = StudentConfig(), TrainingConfig(), EvaluationConfig()
    g = p.add_argument_group("student and training")
    g.add_argument("--width", type=_int_list, default=list(st.width) if isinstance(st.width, tuple) else [st.width],
                   help="nodes per hidden region (int or one per level)")
    g.add_argument("--readout", type=_nonneg_int, default=st.readout or 0,
                   help="nodes of a hidden group at the root region before the linear map to the classes (0: none, "
                        "the class scores are then additive over the root's children)")
    g.add_argument("--activation", default=st.activation, help=activation_choices())
    g.add_argument("--bn", nargs="?", const="after", default=None, choices=("after", "before"),
                   help="Batch Norm at every hidden level: after the activation (--bn, --bn after) or right after "
                        "the linear map, before the gate (--bn before: Thm 9's premise); default: none")
    g.add_argument("--no-bias", action="store_true", help="no biases")
    g.add_argument("--shared", action="store_true",
                   help="share weights like a convolution, one block per child place")
    g.add_argument("--loss", default=tr.loss, choices=["squared", "cross_entropy"], help="training loss")
    g.add_argument("--steps", type=_nonneg_int, default=tr.steps, help="training steps")
    g.add_argument("--lr", type=float, default=tr.lr, help="learning rate")
    g.add_argument("--optimizer", default=tr.optimizer, choices=("sgd", "adam", "adamw", "rmsprop"),
                   help="what steps on the explicit backward's gradient (sgd: W += lr Delta W, Eq 2)")
    g.add_argument("--lr-schedule", default=None, help="none, cosine, or step:N:GAMMA (lr times GAMMA every N steps)")
    g.add_argument("--plateau", type=_positive_int, default=None,
                   help="stop once the smoothed training loss has not improved for this many steps (default: never)")
    g.add_argument("--batch-size", type=_nonneg_int, default=tr.batch_size or 0,
                   help="SGD minibatch (0: full-batch GD)")
    g.add_argument("--weight-decay", type=float, default=tr.weight_decay, help="Frobenius regularizer lambda")
    g.add_argument("--eval-every", type=_positive_int, default=ev.eval_every,
                   help="compare every this many steps")
    g.add_argument("--eval-examples", type=_positive_int, default=ev.eval_examples,
                   help="examples measured at each comparison")
    g.add_argument("--evaluate", default="held-out", choices=("held-out", "training"),
                   help="measure on rows never trained on (compare: the dataset's first --eval-examples rows, kept out "
                        "of training; demo: fresh rows), or on training rows")
    g.add_argument("--no-alignment", dest="alignment", action="store_false", default=ev.alignment,
                   help="do not measure the event alignment of the hidden nodes (default: measured at every "
                        "checkpoint on the evaluation rows, printed as a table, in the JSON and a figure)")
    g.add_argument("--P", dest="P_source", default=ev.P_source, choices=["empirical", "exact"],
                   help="event frequencies of the evaluation set, or the ladder's exact tables")
    g.add_argument("--student-seed", type=_nonneg_int, default=tr.seed, help="initialization and minibatch seed")
    g.add_argument("--seeds", type=_positive_int, default=seeds,
                   help="students trained as replicates (seeds --student-seed, +1, ...; tasks of the engine): every "
                        "error and term is then also reported with one value per seed (its last 3 checkpoints "
                        "averaged), as the median and range over the seeds, beside the same seeds at initialisation, "
                        "within noise against the larger of the jackknife floor and the seeds' standard error")
    g.add_argument("--noise-groups", type=_noise_groups, default=ev.noise_groups or 0,
                   help="row groups of the jackknife behind every number's noise floor (0: no floors)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar over the training steps")
    g.add_argument("--out", default=None,
                   help=f"directory for {outputs}"
                        + (f" (default: {out_default})" if out_default else " (default: none written)"))
    _add_device(g, "the student's training and evaluation, the exact posteriors")


def _add_device(g: argparse._ActionsContainer, what: str) -> None:
    g.add_argument("--device", default=None,
                   help=f"torch device ('cpu', 'cuda', 'cuda:1') of {what} (default: cpu)")


def build_parser() -> argparse.ArgumentParser:
    """The ``smaso`` argument parser (subcommands demo, compare, sample ladder|tent, inspect, spec)."""
    parser = _Parser(
        prog="smaso",
        description="Sample summarization-ladder datasets, train locally connected students on them and compare "
                    "their per-event statistics with the framework's reformulation.",
        epilog="examples:" + __doc__.split("::")[1].split("Every subcommand")[0].rstrip())
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = sub.add_parser("demo", help="sample -> train a student -> compare with the reformulation",
                          description="The main job on the built-in ladder (Ladder.default()): sample a dataset, "
                                      "print its event statistics and Bayes-optimal accuracy, train a locally "
                                      "connected student, compare its per-event statistics with the reformulation "
                                      "(Thm 4 / Eq 9) during training, check Thm 3 on a fully informative ladder, "
                                      "and write to --out (default $SMASO_OUTPUT/demo): comparison.json (the report, "
                                      "the training history, the accuracy), comparison.png (the errors "
                                      "during training) and alignment.png (the event alignment of the hidden "
                                      "nodes, unless --no-alignment), and, unless --noise-groups 0 or -n < 2048, "
                                      "errors_vs_n.json and errors_vs_n.png (the trained student's errors and "
                                      "noise floors as N doubles).")
    demo.add_argument("-n", type=_positive_int, default=50_000, help="examples")
    demo.add_argument("--seed", type=_nonneg_int, default=0, help="data seed")
    demo.add_argument("--bayes-n", type=_positive_int, default=2000, help="examples for the Bayes-optimal accuracy")
    demo.add_argument("--threads", type=_positive_int, default=None,
                      help="torch threads of this process (default 1: survives other jobs on the machine)")
    demo.add_argument("--workers", dest="seed_workers", type=_nonneg_int, default=None,
                      help="processes beside this one that train the other student seeds, one torch thread each "
                           "(0: every seed in this process; default: one per core beside this one, at most one per "
                           "other seed); the output is the same bytes whatever the number")
    demo.add_argument("--teacher", choices=("summarization", "topdown"), default="summarization",
                      help="the built-in ladder: the paper's summarization ladder or the top-down one")
    _student_options(demo, out_default="$SMASO_OUTPUT/demo, else smaso-output/demo", seeds=5,
                     outputs="comparison.* and errors_vs_n.*")
    demo.set_defaults(func=_cmd_demo)

    cmp_ = sub.add_parser("compare", help="train a student on a dataset file and compare it with the reformulation",
                          description="Train a locally connected student on a ladder dataset file (or shards) and "
                                      "compare its per-event statistics with the reformulation during training.")
    cmp_.add_argument("files", nargs="+", help="dataset file(s) or store(s) from `smaso sample ladder`")
    cmp_.add_argument("--partial", action="store_true",
                      help="accept an incomplete set of shards (some leading or trailing shards missing)")
    _student_options(cmp_)
    cmp_.add_argument("--shuffled-control", action="store_true",
                      help="also train each seed's shuffled-label control (the same student on permuted labels) and "
                           "report every error and term beside it (and beside the seeds at initialisation)")
    _add_engine_options(cmp_)
    cmp_.set_defaults(func=_cmd_compare)

    sample = sub.add_parser("sample", help="sample a dataset from a teacher",
                            description="Sample a synthetic dataset from a teacher and write it to a file.")
    teachers = sample.add_subparsers(dest="teacher", metavar="TEACHER", required=True)
    lad = teachers.add_parser("ladder", help="the summarization ladder",
                              description="Sample N examples (x, y and every latent event) from a summarization "
                                          "ladder into a versioned dataset: a chunked store (format 2, e.g. "
                                          "data.zarr; any --out not ending in .npz), or a .npz file (format 1) "
                                          "when --out ends in .npz (see teachers/chunked.py and "
                                          "teachers/dataset.py).")
    _add_ladder_options(lad)
    lad.add_argument("-n", type=_positive_int, required=True, help="examples in the full stream")
    lad.add_argument("--seed", type=_nonneg_int, default=0, help="data seed")
    lad.add_argument("--out", required=True,
                     help="output: a chunked store (format 2, e.g. data.zarr; written chunk by chunk, memory bounded "
                          "whatever N) or a .npz file (format 1, sampled in memory); written atomically")
    lad.add_argument("--shard", default=None, help="'i/n': write only shard i of n (same rows as one full run)")
    lad.add_argument("--chunk-size", type=_positive_int, default=None,
                     help="examples per model call of a .npz run (memory only)")
    lad.add_argument("--chunk-rows", type=_positive_int, default=None,
                     help="rows per chunk of a store, a multiple of 4096 (default 65536, fewer when a chunk "
                          "would pass 32 MiB)")
    _add_device(lad, "the sampling (the file is written from the CPU)")
    lad.add_argument("--compress", nargs="?", const=True, default=None,
                     help="a .npz: deflate its members; a store: its codec (default zstd level 1; 'none' for raw)")
    lad.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_engine_options(lad)
    lad.set_defaults(func=_cmd_sample_ladder)
    tent = teachers.add_parser("tent", help="the tent map tau^k (a deep 1-D regression target)",
                               description="Sample N examples (x, tau^k(x)), x ~ U[0, 1), of the tent map composed "
                                           "k times (2^k linear pieces; see teachers/tent.py) into a versioned .npz "
                                           "dataset file, with the ladder's seeding and sharding scheme.")
    tent.add_argument("--k", type=_nonneg_int, required=True, help="compositions of the tent map (>= 0)")
    tent.add_argument("-n", type=_positive_int, required=True, help="examples in the full stream")
    tent.add_argument("--seed", type=_nonneg_int, default=0, help="data seed")
    tent.add_argument("--out", required=True, help="output file (.npz), written atomically")
    tent.add_argument("--shard", default=None, help="'i/n': write only shard i of n (same rows as one full run)")
    tent.add_argument("--noise", type=_nonneg_float, default=0.0, help="standard deviation of Gaussian label noise")
    tent.add_argument("--chunk-size", type=_positive_int, default=None, help="examples per step (memory only)")
    tent.add_argument("--compress", action="store_true", help="deflate the file's members")
    tent.set_defaults(func=_cmd_sample_tent)

    spec = sub.add_parser("spec", help="write a ladder spec file to edit",
                          description="Build a ladder from the options (or read one with --spec) and write it as a "
                                      "spec file: TOML for a .toml name, JSON for any other, one table row per line "
                                      "(the fields: docs/spec-format.md).")
    _add_ladder_options(spec)
    spec.add_argument("--out", required=True, help="output .json or .toml file ('-': JSON on standard output)")
    spec.set_defaults(func=_cmd_spec)

    insp = sub.add_parser("inspect", help="statistics of a dataset file",
                          description="Print counts, sampled-vs-exact event statistics and the Bayes-optimal "
                                      "accuracy of a dataset file (or of several shards of one stream); for a tent "
                                      "dataset: k, N, the x range and histogram, and max |y - tau^k(x)|.")
    insp.add_argument("files", nargs="+", help="dataset file(s); shards of one stream are joined")
    insp.add_argument("--partial", action="store_true",
                      help="accept an incomplete set of shards (some leading or trailing shards missing)")
    insp.add_argument("--bayes-n", type=_nonneg_int, default=2000,
                      help="examples for the Bayes-optimal accuracy (0: skip)")
    insp.add_argument("--json", help="also write the report as JSON here ('-': standard output, instead of the "
                                     "printed report)")
    insp.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_device(insp, "the exact posteriors behind the Bayes-optimal accuracy")
    _add_engine_options(insp)
    insp.set_defaults(func=_cmd_inspect)
    add_sweep_parser(sub)
    _add_global_options(parser)
    for child in _subcommand_parsers(parser):
        child.strict = True
    return parser


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written, and every option's default appended to its help ("(default: ...)"),
    except where there is none to show (None, a flag's False) or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        d = action.default
        if (d is None or d is False or d is True or d == argparse.SUPPRESS or "default" in text
                or (not action.option_strings and action.nargs not in ("?", "*"))):
            return text
        shown = ",".join(map(str, d)) if isinstance(d, (list, tuple)) else str(d)
        return f"{text} (default: {shown.replace('%', '%%')})".lstrip()


class _Parser(argparse.ArgumentParser):
    """An argument parser whose help shows the defaults (its subcommands' parsers are of this class too).

    A subcommand's parser (``strict``, set by :func:`build_parser`) reports an unknown option itself, with its
    own usage line (``smaso compare --widht 3``), where argparse would hand it up to the top-level parser."""

    strict = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """One ``smaso: error:`` line naming the option as typed (``--width: ...``, where argparse writes
        ``argument --width: ...``), with the nearest option or choice for a misspelt one, and no usage (``--help``
        shows it); argparse would also name the subcommand (``smaso compare: error:``)."""
        message = re.sub(r"^argument (\S+): ", r"\1: ", message)
        self.exit(2, f"smaso: error: {message}{self._did_you_mean(message)}\n")

    def _did_you_mean(self, message: str) -> str:
        """`` (did you mean --width?)`` for an unknown option or an invalid choice close to a known one."""
        import difflib

        pairs = []
        if message.startswith("unrecognized arguments: "):
            known = [o for o in self._option_string_actions if o.startswith("--")]
            pairs = [(word.split("=")[0], known) for word in message.split(": ", 1)[1].split()
                     if word.startswith("--")]
        elif m := re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message):
            pairs = [(m[1], re.findall(r"'([^']*)'", m[2]))]
        for word, known in pairs:
            if close := difflib.get_close_matches(word, known, n=1):
                return f" (did you mean {close[0]}?)"
        return ""

    def parse_known_args(  # type: ignore[override]  # typeshed's overloads on namespace's type; ours takes one
            self, args: Sequence[str] | None = None,
            namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and self.strict:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras  # type: ignore[return-value]  # typeshed: None only when namespace=None is passed on


def _subcommand_parsers(parser: argparse.ArgumentParser) -> list[_Parser]:
    """Every subcommand's parser below ``parser``, at any depth (``sample``, ``sample ladder``, ...)."""
    found = []
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        for child in getattr(action, "choices", {}).values():
            found += [child, *_subcommand_parsers(child)]
    return found


def _add_global_options(parser: argparse.ArgumentParser, **default: Any) -> None:
    """``--debug`` and ``-q``, and after any subcommand too (``smaso demo -q``), there without overriding the
    top-level ones (``default=SUPPRESS``)."""
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error, and third-party "
                                                              "warnings", **default)
    parser.add_argument("-q", "--quiet", action="store_true", **default,
                        help="print only errors, warnings and data asked for on stdout"
                             + ("" if default else ": no progress bars, no reports"))
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        for child in getattr(action, "choices", {}).values():
            _add_global_options(child, default=argparse.SUPPRESS)


def _noise_groups(text: str) -> int:
    """An argparse type: ``--noise-groups``, 0 (no noise floors) or at least 2 row groups (a jackknife)."""
    k = _nonneg_int(text)
    if k == 1:
        raise argparse.ArgumentTypeError("expected 0 (no floors) or at least 2 groups, got 1")
    return k


def _describe_error(e: BaseException) -> str:
    """One line for a failure the user can cause (the CLI's error boundary)."""
    if isinstance(e, MemoryError):
        return ("out of memory: the request does not fit in this machine's memory; use fewer examples, or a "
                ".zarr store (written and read chunk by chunk)")
    if isinstance(e, OSError):
        where = f" {e.filename!r}" if getattr(e, "filename", None) else ""
        if getattr(e, "errno", None) in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            return f"cannot write{where}: the disk or the file-size limit is full ({e.strerror})"
        return f"cannot access{where}: {e.strerror or e}"
    return str(e)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``smaso`` console script; returns the exit status.

    Every failure a user can cause (a bad argument or field, an unreadable or unwritable path, a full
    disk, too little memory, an unavailable device, a diverging run) ends in one ``smaso: error:`` line
    and exit status 2, or with ``--debug`` its traceback; warnings and ``-q``: :mod:`smaso.cli_support`.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    import torch  # noqa: F401 (before SIGTERM raises: raised in torch's C++ module init it aborts the process)
    previous = _terminate_as_interrupt()
    try:
        with _cli_warnings(debug=getattr(args, "debug", False)), _streams(args):
            _check_early(args)
            return args.func(args)
    except KeyboardInterrupt:
        parser.exit(130, "smaso: interrupted\n")
    except _Terminated:
        parser.exit(143, "smaso: terminated\n")
    except (ValueError, TypeError, NotImplementedError, OSError, MemoryError, RuntimeError) as e:
        if _Terminated.received:
            # SIGTERM arrived, and while the stack unwound a context manager raised its own error in place of
            # ours (Pyro's handler stack, interrupted between its bookkeeping steps, does): still a termination
            parser.exit(143, "smaso: terminated\n")
        if getattr(args, "debug", False):
            raise
        parser.exit(2, f"smaso: error: {_describe_error(e)}\n")
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
