"""The conventions every ``smaso`` command shares (:mod:`smaso.cli`): warnings as one line, ``--quiet``,
standard output as a data stream, SIGTERM as an interrupt, and the checks made before any output (free disk,
memory, writable paths)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from smaso.output import json_safe, output_dir

if TYPE_CHECKING:
    import argparse
    from types import FrameType
    from typing import NoReturn, TextIO

    from teachers.engine import DaskEngine, SerialEngine
    from teachers.ladder import Ladder

__all__ = ["STDOUT"]

#: A text output path meaning standard output.
STDOUT = "-"

#: Third-party warnings a normal run does not show (``--debug`` does): (category, message regex, module
#: regex) as for :func:`warnings.filterwarnings`.  Specific on purpose: a new warning still shows.
THIRD_PARTY_WARNINGS: tuple[tuple[type[Warning], str, str], ...] = (
    # ArviZ's once-a-day notice of its coming refactor, issued when arviz is imported
    (FutureWarning, r"\s*ArviZ is undergoing a major refactor", r"arviz(\.|$)"),
    # tqdm.auto: "IProgress not found" (a notebook kernel without ipywidgets), its experimental modules
    (Warning, r".*(IProgress not found|tqdm\.rich is experimental|tqdm\.tk is experimental)", r"tqdm(\.|$)"),
    # Dask's local cluster when its dashboard port is taken (it picks another one)
    (UserWarning, r"Port \d+ is already in use", r"distributed(\.|$)"),
)

_OWN_PACKAGES = tuple(str(Path(__file__).resolve().parents[1] / pkg) + os.sep
                      for pkg in ("smaso", "teachers", "inference"))


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """A warning as one ``smaso: warning:`` line (the library's own without a file and line number; any
    other with its category and origin, so that an unexpected one is recognisable)."""
    text = str(message).strip().replace("\n", " ")
    if not str(Path(filename).resolve()).startswith(_OWN_PACKAGES):
        text += f" ({category.__name__} from {filename}:{lineno})"
    print(f"smaso: warning: {text}", file=file or sys.stderr)


@contextlib.contextmanager
def _cli_warnings(*, debug: bool) -> Iterator[None]:
    """The CLI's warnings for the duration of a command: :data:`THIRD_PARTY_WARNINGS` ignored, the others as
    ``smaso: warning:`` lines and log records off (the library logs nothing), or, with ``--debug``, Python's own
    filters, format and logging.  The previous settings are restored on exit (a program calling :func:`main`
    keeps its own)."""
    import logging

    disabled = logging.root.manager.disable
    with warnings.catch_warnings():
        if not debug:
            for category, message, module in THIRD_PARTY_WARNINGS:
                warnings.filterwarnings("ignore", message=message, category=category, module=module)
            warnings.showwarning = _show_warning
            # Dask's client logs each failed reconnection (with a traceback) through handlers of its own loggers,
            # which a level on the parent logger does not stop; the CLI's one error line says what happened
            logging.disable(logging.CRITICAL)
        try:
            yield
        finally:
            logging.disable(disabled)


def _quiet(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "quiet", False))


def _stdout_is_data(args: argparse.Namespace) -> bool:
    """A text output goes to standard output (``--json -``, ``spec --out -``)."""
    return STDOUT in (getattr(args, "json", None), getattr(args, "out", None) if args.command == "spec" else None)


@contextlib.contextmanager
def _streams(args: argparse.Namespace) -> Iterator[None]:
    """Keep the standard output the command started with for data (``args._stdout``), and send the
    informational prints nowhere under ``-q``, or when standard output carries data (``--json -``)."""
    args._stdout = sys.stdout
    if not (_quiet(args) or _stdout_is_data(args)):
        yield
        return
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        yield


class _Terminated(BaseException):
    """SIGTERM, raised where the process was, so that every writer's cleanup runs (no half-written files).

    ``received`` records that the signal came, for when the stack's unwinding replaces this exception."""

    received = False


def _terminate_as_interrupt() -> Any:
    """Turn SIGTERM into :class:`_Terminated` for the duration of a command (main thread only); returns the
    previous handler, or None where no handler could be installed."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: FrameType | None) -> NoReturn:
        _Terminated.received = True
        raise _Terminated()

    _Terminated.received = False

    return signal.signal(signal.SIGTERM, handler)


def _free_disk(out: str) -> int | None:
    import shutil

    p = Path(out).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def _check_memory(ladder: Ladder, n: int, arg: str, factor: float = 1.0) -> None:
    """Refuse an in-memory job whose rows alone would not fit (before allocating them)."""
    from teachers.chunked import row_bytes
    from teachers.sampling import available_memory

    need, have = n * row_bytes(ladder) * factor, available_memory()
    if have is not None and need > have:
        raise ValueError(f"{arg}: {n:,} examples held in memory need about {need / 1e9:.3g} GB and "
                         f"{have / 1e9:.3g} GB are available; write a .zarr store instead (sampled, read and "
                         "compared chunk by chunk: `smaso sample ladder --out data.zarr`, then `smaso compare "
                         "data.zarr`)")


def _check_tent_memory(total: int, shard: str | None) -> None:
    """Refuse a ``sample tent`` whose rows (``-n``, or its ``--shard``'s) would not fit in memory, before allocating
    them (:func:`teachers.tent.check_tent_memory`, named as the CLI's options)."""
    from teachers.sampling import parse_shard
    from teachers.tent import check_tent_memory

    i, k = parse_shard(shard)
    check_tent_memory((i + 1) * total // k - i * total // k, "-n", "--shard i/k")


def _check_store_target(out: str) -> None:
    """Refuse a store's ``--out`` that writing would damage, before any work (:func:`teachers.store.
    check_store_target`; an existing empty directory too: the user named something that exists); an ``--out``
    ending in ``.npz`` is a file, not checked here."""
    from teachers.store import check_store_target

    if not str(out).endswith(".npz"):
        check_store_target(out, arg="--out", allow_empty=False)


def _engine(args: argparse.Namespace) -> SerialEngine | DaskEngine:
    """The engine of ``--engine`` (a context manager): this process, or a Dask cluster (options checked by
    :func:`_check_engine_options`)."""
    from teachers.engine import CONNECT_TIMEOUT, EngineError, make_engine

    try:
        return make_engine(getattr(args, "engine", "serial"), scheduler=getattr(args, "scheduler", None),
                           workers=getattr(args, "workers", None),
                           threads_per_worker=getattr(args, "threads", None) or 1,
                           timeout=getattr(args, "scheduler_timeout", None) or CONNECT_TIMEOUT)
    except EngineError as e:
        raise ValueError(str(e)) from None


def _check_early(args: argparse.Namespace) -> None:
    """What can be checked before any work: ``--out -`` (standard output) only for a text output (a binary one,
    a dataset or a figure, refuses it rather than write a file named ``-``; ``./-`` names such a file), the
    student's ``--lr`` and ``--weight-decay``, the device, and that the outputs can be written.  Sets the
    demo's default ``--out``: ``demo`` under the output root (:func:`smaso.output.output_root`)."""
    if args.command == "demo" and args.out is None:
        args.out = str(output_dir("demo", create=False))
    if getattr(args, "out", None) == STDOUT and args.command in ("demo", "compare", "sweep"):
        raise ValueError("--out: '-' (standard output) cannot take a directory of results (a JSON file and a "
                         "figure); give a directory")
    if getattr(args, "out", None) == STDOUT and args.command != "spec":
        raise ValueError("--out: '-' (standard output) takes text only, and a dataset file or store is binary; give "
                         "a file name (./- for a file named '-')")
    _check_student_numbers(args)
    _check_student_options(args)
    _check_sampling_options(args)
    _check_engine_options(args)
    if getattr(args, "files", None):
        _check_not_a_spec(args.files)
    device = getattr(args, "device", None)
    if device is not None:
        import torch

        try:
            dev = torch.device(device)
        except (RuntimeError, ValueError, TypeError):
            raise ValueError(f"--device: expected a torch device such as 'cpu' or 'cuda:0', got {device!r}") from None
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"--device {device}: this torch build or machine has no CUDA device "
                             "(torch.cuda.is_available() is False)")
        if dev.type not in ("cpu", "cuda"):
            raise ValueError(f"--device: expected 'cpu' or 'cuda[:i]', got {device!r}")
    for opt in ("out", "json"):
        out = getattr(args, opt, None)
        if out and out != STDOUT:
            _check_writable(out, directory=opt == "out" and args.command in ("demo", "compare", "sweep"),
                            option=opt)


def _check_engine_options(args: argparse.Namespace) -> None:
    """The Dask options go with ``--engine dask``, and the scheduler's timeout is a positive number."""
    timeout = getattr(args, "scheduler_timeout", None)
    if getattr(args, "engine", "serial") != "dask" and (getattr(args, "scheduler", None) or
                                                        getattr(args, "workers", None) or timeout is not None):
        raise ValueError("--scheduler/--scheduler-timeout/--workers: they apply to --engine dask only")
    if timeout is not None and not 0 < timeout < math.inf:
        raise ValueError(f"--scheduler-timeout: expected a positive number of seconds, got {timeout}")


def _check_student_numbers(args: argparse.Namespace) -> None:
    """``--lr`` (finite, > 0) and ``--weight-decay`` (finite, >= 0) of ``demo`` and ``compare``, checked before the
    command prints anything (the trainer checks them again, but only once the ladder has been described)."""
    for option, positive in (("lr", True), ("weight_decay", False)):
        value = getattr(args, option, None)
        if value is not None and (not math.isfinite(value) or value < 0 or (positive and value == 0)):
            want = "a finite number > 0" if positive else "a finite number >= 0"
            raise ValueError(f"--{option.replace('_', '-')}: expected {want}, got {value!r}")


#: A library error's leading argument name: ``name: ...``, ``name[i]: ...`` or ``name 'value': ...``.
_LIBRARY_NAME = re.compile(r"(?P<name>[A-Za-z_]+)(?:\[(?P<index>\d+)\])?(?P<value> '[^']*')?: ")


@contextlib.contextmanager
def _named_as(options: dict[str, str]) -> Iterator[None]:
    """Name a library ``ValueError`` after the option the user typed: ``events[0]: ...`` -> ``--events (entry
    0): ...`` for ``options={"events": "--events"}``; another error (naming none of ``options``) passes as is."""
    try:
        yield
    except ValueError as e:
        m = _LIBRARY_NAME.match(str(e))
        if m is None or m["name"] not in options:
            raise
        where = options[m["name"]] + (f" (entry {m['index']})" if m["index"] else "") + (m["value"] or "")
        raise type(e)(f"{where}: {str(e)[m.end():]}") from None


def _check_student_options(args: argparse.Namespace) -> None:
    """``demo``'s and ``compare``'s ``--activation`` and ``--lr-schedule``, read by the trainer's own parsers before
    any work (the trainer reads them only once the data are loaded and described)."""
    if not hasattr(args, "activation"):
        return
    from smaso.student.activations import get_activation

    with _named_as({"activation": "--activation"}):
        get_activation(args.activation)
    from smaso.student.compare import _read_lr_schedule

    with _named_as({"lr_schedule": "--lr-schedule"}):
        _read_lr_schedule(args.lr_schedule)


def _check_sampling_options(args: argparse.Namespace) -> None:
    """``sample``'s ``--shard``, ``--chunk-rows`` and a store's ``--compress``, read by the samplers' own parsers
    before any work, and named as the options."""
    if args.command != "sample":
        return
    from teachers.sampling import parse_shard

    with _named_as({"shard": "--shard"}):
        parse_shard(args.shard)
    if args.teacher != "ladder" or str(args.out).endswith(".npz"):
        return
    from teachers.store import _check_chunk_rows, _compression

    with _named_as({"chunk_rows": "--chunk-rows", "compress": "--compress"}):
        if args.chunk_rows is not None:
            _check_chunk_rows(args.chunk_rows)
        _compression(True if args.compress is None else args.compress)


def _check_width(args: argparse.Namespace, ladder: Ladder) -> None:
    """``--width``: one value, or one per hidden level of ``ladder`` (a dataset's: checked once it is opened,
    before anything is printed)."""
    levels = ladder.depth - 1
    if len(args.width) not in (1, levels):
        raise ValueError(f"--width: expected one value or {levels} (one per hidden level 1..{levels} of the "
                         f"ladder), got {len(args.width)}: {','.join(map(str, args.width))}")


#: A spec format named on a line of its own in a spec file's text (``"format": "smaso-ladder"`` in JSON,
#: ``format = "smaso-ladder"`` in TOML; ``smaso-graph-ladder``: graph spec files of version 1).
_SPEC_FORMAT = re.compile(r'^\s*[{]?\s*"?format"?\s*[:=]\s*"smaso-(graph-)?ladder"', re.MULTILINE)
_SPEC_HEAD = 1 << 16


def _text_head(path: Path) -> tuple[str, bool] | None:
    """The first 64 KiB of ``path`` as text and whether that is the whole file, or None for a file that is
    not UTF-8 text there (a dataset file: an .npz starts with a zip header, its members with bytes >= 0x80)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SPEC_HEAD + 1)
    except OSError:
        return None  # the loader says what is wrong
    whole = len(head) <= _SPEC_HEAD
    head = head[:_SPEC_HEAD]
    for cut in range(1 if whole else 4):  # (a character cut at 64 KiB)
        try:
            text = head[:len(head) - cut].decode()
        except UnicodeDecodeError:
            continue
        return (text, whole) if "\0" not in text else None
    return None


def _is_ladder_spec(path: str) -> bool:
    """Whether ``path`` is a ladder spec file (teachers/spec_io.py) rather than a dataset: a ``.json`` or
    ``.toml`` file, or a text file whose first bytes name a spec format, or a small one that parses as a spec
    (a JSON object or TOML table with a spec ``format`` or a generator's ``kind``)."""
    import tomllib

    p = Path(path)
    if not p.is_file():
        return False
    if p.suffix.lower() in (".json", ".toml"):
        return True
    head = _text_head(p)
    if head is None:
        return False
    text, whole = head
    if _SPEC_FORMAT.search(text):
        return True
    if not whole:
        return False
    try:
        data = json.loads(text) if text.lstrip().startswith("{") else tomllib.loads(text)
    except (ValueError, RecursionError):  # not JSON, not TOML
        return False
    return isinstance(data, dict) and ("kind" in data or data.get("format") in ("smaso-ladder",
                                                                                  "smaso-graph-ladder"))


def _check_not_a_spec(paths: Sequence[str]) -> None:
    """Refuse a ladder spec file given where a dataset belongs, saying how to sample from it."""
    import shlex

    from teachers.formats import DatasetFormatError

    for path in paths:
        if _is_ladder_spec(path):
            raise DatasetFormatError(f"{path} is a ladder spec, not a dataset; sample from it with: smaso sample "
                                     f"ladder --spec {shlex.quote(str(path))} -n 100000 --out data.zarr")


def _check_writable(out: str, *, directory: bool, option: str = "out") -> None:
    """Refuse an ``--out`` (or ``--json``) that cannot be created, before sampling or training for minutes."""
    path = Path(out)
    if directory and path.exists() and not path.is_dir():
        raise ValueError(f"--{option}: {out!r} exists and is not a directory")
    parent = path if directory and path.is_dir() else path.parent
    while not parent.exists() and parent != parent.parent:  # a directory still to create: check its ancestor
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"--{option}: {str(parent)!r} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"--{option}: cannot write into {str(parent)!r} (permission denied)")


def _set_threads(args: argparse.Namespace, default: int | None = None) -> None:
    """Apply ``--threads`` (else ``default``; None leaves torch's own choice)."""
    threads = getattr(args, "threads", None) or default
    if threads:
        import torch

        torch.set_num_threads(threads)


def _write_text(args: argparse.Namespace | None, path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically, or to standard output when ``path`` is ``-`` (the stream the
    command started with: informational prints never reach it then, see :func:`_streams`)."""
    if str(path) == STDOUT:
        out = getattr(args, "_stdout", None) or sys.stdout
        out.write(text)
        out.flush()
        return
    from teachers.spec_io import atomic_write

    atomic_write(path, lambda f: f.write(text.encode()))


def _write_json(path: str | os.PathLike, obj: Any, args: argparse.Namespace | None = None) -> None:
    """``obj`` as JSON (non-finite floats as null) to ``path``, or to standard output for ``-``."""
    _write_text(args, path, json.dumps(json_safe(obj), indent=1, allow_nan=False)
                + ("\n" if str(path) == STDOUT else ""))
