"""The options several ``smaso`` commands share (:mod:`smaso.cli`, :mod:`smaso.cli_sweep`): the argparse types,
the ladder options with the builder of their :class:`~teachers.ladder.Ladder`, and the engine options.

A module of its own so that every command module imports them from here, never from :mod:`smaso.cli` (which
imports the command modules: importing it back would be a cycle).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from smaso.cli_support import _named_as

if TYPE_CHECKING:
    from teachers.ladder import Ladder


def _add_engine_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine")
    g.add_argument("--engine", choices=("serial", "dask"), default="serial",
                   help="serial: this process (default); dask: one task per chunk on a Dask cluster "
                        "(needs the 'distributed' extra)")
    g.add_argument("--scheduler", default=None, help="address of a running Dask scheduler (tcp://host:8786)")
    g.add_argument("--scheduler-timeout", type=float, default=None, metavar="SECONDS",
                   help="seconds to wait for the Dask scheduler, to connect and after losing it mid-run (default 5)")
    g.add_argument("--workers", type=_positive_int, default=None,
                   help="worker processes of the local Dask cluster started without --scheduler (default: cores)")
    g.add_argument("--threads", type=_positive_int, default=None,
                   help="torch threads of this process and of each Dask worker (default 1: a second thread gains "
                        "about a fifth on a quiet machine and loses most of the throughput beside other jobs)")


def _int_at_least(low: int, what: str) -> Callable[[str], int]:
    """An argparse type: an integer (``1e6`` too) of at least ``low``, named ``what`` in the error."""

    def parse(text: str) -> int:
        try:
            v = int(float(text)) if "e" in text.lower() and float(text).is_integer() else int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"expected a {what} integer, got {text!r}")
        return v

    return parse


_positive_int = _int_at_least(1, "positive")
_nonneg_int = _int_at_least(0, "non-negative")


def _float_in(what: str, ok: Callable[[float], bool]) -> Callable[[str], float]:
    """An argparse type: a finite number for which ``ok`` holds, ``what`` in the error ("> 0")."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (math.isfinite(v) and ok(v)):
            raise argparse.ArgumentTypeError(f"expected a finite number {what}, got {text!r}")
        return v

    return parse


_positive_float = _float_in("> 0", lambda v: v > 0)
_nonneg_float = _float_in(">= 0", lambda v: v >= 0)


class _StoreGiven(argparse._StoreAction):
    """argparse's ``store``, recording the option as given (``args._given``): ``--spec`` refuses an option it makes
    meaningless even when its value is the default (``--depth 3``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        namespace._given = {*getattr(namespace, "_given", ()), self.dest}


# The ladder options a spec file replaces (--emission and --sigma apply to it: they replace its leaves).
_SPEC_REPLACES = ("kind", "mode", "depth", "branching", "events", "factors", "concentration", "ladder_seed", "graph",
                  "width", "height", "kernels", "strides")


def _add_ladder_options(p: argparse.ArgumentParser) -> None:
    """The tree ladder's options, then the graph ladder's (``--graph``)."""
    p.register("action", None, _StoreGiven)
    g = p.add_argument_group("ladder (with --spec, only --emission and --sigma apply: they replace the file's leaves)")
    g.add_argument("--spec", help="ladder spec file (.json, or .toml for TOML), a tree or a graph ladder; its fields: "
                                  "docs/spec-format.md")
    g.add_argument("--kind", default="random", choices=["random", "fully_informative", "factorized_binary", "default"],
                   help="ladder constructor")
    g.add_argument("--mode", default="topdown", choices=["topdown", "bottomup"],
                   help="random ladders: generative top-down tables or bottom-up lookup tables")
    g.add_argument("--depth", type=_positive_int, default=3, help="levels below the root")
    g.add_argument("--branching", type=_int_list, default=[2], help="children per region: one int or a list 'b0,b1,..'")
    g.add_argument("--events", type=_int_list, default=[4],
                   help="random: events per region (int or 'm0,...,md'); fully_informative: leaf events")
    g.add_argument("--factors", type=_int_list, default=None,
                   help="factorized_binary: binary factors per level 'n0,...,nd' (default 1,2,..)")
    g.add_argument("--concentration", type=_positive_float, default=None,
                   help="Dirichlet concentration of the tables (default: 1; fully_informative: uniform tables)")
    g.add_argument("--ladder-seed", type=_nonneg_int, default=0, help="seed of the random tables (not of the data)")
    g.add_argument("--emission", default="onehot", choices=["onehot", "gaussian"], help="leaf observations")
    g.add_argument("--sigma", type=_positive_float, default=None,
                   help="gaussian emission: noise standard deviation (> 0)")
    g = p.add_argument_group("graph ladder (--graph; the tree options --kind, --depth, --branching and --factors are "
                             "then ignored; --mode, --events, --concentration, --ladder-seed, --emission and --sigma "
                             "apply)")
    g.add_argument("--graph", default=None, choices=["conv1d", "conv2d"],
                   help="build a convolution-like region graph instead of a tree: level by level from the leaves up, "
                        "region j covers regions [j*stride, j*stride + kernel) of the level below (several parents "
                        "per region when stride < kernel); --events is then per level, top first (default: a tree "
                        "ladder)")
    g.add_argument("--width", type=_positive_int, default=None, help="--graph: leaves (conv1d), or grid columns "
                                                                       "(conv2d)")
    g.add_argument("--height", type=_positive_int, default=None, help="--graph conv2d: grid rows (default: --width)")
    g.add_argument("--kernels", type=_int_list, default=None,
                   help="--graph: kernel per level, from the leaves up 'k1,k2,..' (the last must cover its level)")
    g.add_argument("--strides", type=_int_list, default=None,
                   help="--graph: stride per level, from the leaves up (default: 1 at every level)")


def _int_list(text: str) -> list[int]:
    """An argparse type: one positive integer or a comma-separated list of them (argparse names the option)."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or a comma-separated list of integers, got {text!r}") \
            from None
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _one_or_list(values: list[int]) -> int | list[int]:
    return values[0] if len(values) == 1 else values


def ladder_from_args(args: argparse.Namespace) -> Ladder:
    """Build the :class:`~teachers.ladder.Ladder` described by the CLI options (a tree, a spec file of any
    version, or ``--graph conv1d|conv2d``)."""
    from teachers.spec_io import load_spec

    if args.spec:
        for dest in _SPEC_REPLACES:
            if dest in getattr(args, "_given", ()):
                option = "--" + dest.replace("_", "-")
                raise ValueError(f"{option} cannot be used with --spec (the spec file defines the ladder: edit the "
                                 "file, or drop --spec)")
    if args.sigma is not None and args.emission != "gaussian":
        raise ValueError("--sigma: only applies with --emission gaussian")
    if args.emission == "gaussian" and args.sigma is None:
        raise ValueError("--sigma: required with --emission gaussian (the leaves' noise standard deviation, > 0)")
    graph = getattr(args, "graph", None)
    if not graph:
        for opt in ("width", "height", "kernels", "strides"):
            if getattr(args, opt, None) is not None:
                raise ValueError(f"--{opt}: only applies with --graph conv1d|conv2d")
    if args.spec:
        lad = load_spec(args.spec)
        if args.emission == "gaussian":
            return lad.with_emission({"kind": "gaussian", "sigma": args.sigma})
        return lad.with_emission({"kind": "onehot"}) if "emission" in getattr(args, "_given", ()) else lad
    if graph:
        return _graph_from_args(args)
    # the constructors name their arguments; a tree's are the options of the same names
    with _named_as({"depth": "--depth", "branching": "--branching", "events": "--events", "leaf_events": "--events",
                    "factors": "--factors", "concentration": "--concentration", "seed": "--ladder-seed",
                    "sigma": "--sigma"}):
        return _tree_from_args(args)


def _tree_from_args(args: argparse.Namespace) -> Ladder:
    """The tree ladder of the options (:meth:`Ladder.random`, ``fully_informative``, ``factorized_binary``,
    ``default``)."""
    from teachers.ladder import Ladder

    common = {"emission": args.emission, "sigma": args.sigma}
    if args.kind == "default":
        return Ladder.default(**common)
    if args.kind == "fully_informative":
        return Ladder.fully_informative(args.depth, _one_or_list(args.branching), args.events[0],
                                        concentration=args.concentration, seed=args.ladder_seed, **common)
    if args.kind == "factorized_binary":
        factors = args.factors or [2**0] + [2] * args.depth
        return Ladder.factorized_binary(args.depth, _one_or_list(args.branching), factors,
                                        concentration=args.concentration or 1.0, seed=args.ladder_seed, **common)
    return Ladder.random(args.depth, _one_or_list(args.branching), _one_or_list(args.events), mode=args.mode,
                         concentration=args.concentration or 1.0, seed=args.ladder_seed, **common)


def _graph_from_args(args: argparse.Namespace) -> Ladder:
    """The ``--graph conv1d|conv2d`` ladder of the options (:meth:`Ladder.conv1d` / ``conv2d``)."""
    from teachers.ladder import Ladder, LadderSpecError

    if args.width is None:
        raise ValueError(f"--width: required with --graph {args.graph} (" +
                         ("leaves)" if args.graph == "conv1d" else "grid columns)"))
    if args.kernels is None:
        raise ValueError("--kernels: required with --graph (kernel per level, from the leaves up, e.g. 3,2,3)")
    if args.height is not None and args.graph != "conv2d":
        raise ValueError("--height: only applies with --graph conv2d")
    levels = len(args.kernels)
    strides = [1] * levels if args.strides is None else args.strides
    if len(strides) != levels:
        raise ValueError(f"--strides: expected {levels} values (one per --kernels value), got {len(strides)}")
    if len(args.events) not in (1, levels + 1):
        raise ValueError(f"--events: expected one value or {levels + 1} (one per level, top first: len(--kernels) + "
                         f"1), got {len(args.events)}")
    events = args.events * (levels + 1) if len(args.events) == 1 else args.events
    for name, values in (("--kernels", args.kernels), ("--strides", strides)):
        if min(values) < 1:
            raise ValueError(f"{name}: expected positive integers, got {','.join(map(str, values))}")
    kwargs = {"mode": args.mode, "concentration": 1.0 if args.concentration is None else args.concentration,
              "seed": args.ladder_seed, "sigma": args.sigma}
    try:
        if args.graph == "conv1d":
            return Ladder.conv1d(args.width, args.kernels, strides, events, **kwargs)
        shape = (args.width if args.height is None else args.height, args.width)
        return Ladder.conv2d(shape, args.kernels, strides, events, **kwargs)
    except LadderSpecError as e:  # name the options: the constructor names its own arguments
        raise LadderSpecError(f"--graph {args.graph} (--width/--height, --kernels, --strides, --events): {e}") from None
