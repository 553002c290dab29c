"""Depth separation (lecture notes, seed 001; docs/theory.md §2): tau^(L^2) against depth-L students.

For each L: the certified bracket on the best L1 error any ReLU network of depth <= L with at
most 2^L nodes can reach against tau^(L^2) (a proven lower bound from the breakpoint lemma's piece
count, and an explicit member: smaso.depth.bracket), and trained students next to it:

- theorem students (width 2; the 2^L nodes spread evenly over L layers; one hidden layer of 2^L),
  minibatch SGD (or Adam) on the squared loss plus lambda sum ||W||_F^2, x ~ U[0, 1], best of the seeds;
- controls: the same students and training on tau^L, which every one of them can represent;
- deep students of depth k: the exact tent network, a perturbed copy retrained by SGD (a warm
  start), and width-w students from a random start (Adam, one-cycle schedule, best of restarts);
- with --population R (theorem and control students) and --deep-population R (random-start deep
  students): the best of R random restarts trained as one batched network (data-dependent init,
  Adam on the L1 loss).

Every row carries its own bracket [certified lower bound for its widths, explicit network of its
widths] (smaso.depth.bracket.architecture_upper_bound) and says whether its error lies inside.

    python examples/depth_separation.py --Ls 1,2,3,4    # the figure: $SMASO_OUTPUT/figures/depth_separation.png
    python examples/depth_separation.py --Ls 2,3 --optimizer adam --lr 0.01
    python examples/depth_separation.py --Ls 1,2,3,4 --seeds 0,1,2,3 --engine dask --workers 2
    python examples/depth_separation.py --Ls 1,2,3 --deep-widths 2,8 --population 256 --deep-population 256

``--json PATH`` writes every row (its bracket, error, pieces, training), the class brackets of ``--bracket-Ls``,
the configuration, the machine and its load (strict JSON: NaN as null); ``--record`` writes the recorded
``benchmarks/results/depth_separation.json``, whose tables docs/experiments.md quotes
(:func:`bracket_table`, :func:`student_table`, :func:`deep_table`; ``tests/test_experiments_figures.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from smaso.depth.separation import LECTURE_BOUND, DepthRow, _error, depth_separation, format_table
from smaso.output import RunRecord, output_dir, write_strict_json
from smaso.plots.depth import plot_depth
from teachers.engine import make_engine

RECORDED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "depth_separation.json"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--Ls", default="1,2,3,4", help="comma-separated depths L")
    p.add_argument("--target", default="L^2", choices=("L^2", "2L"), help="k = L^2 (the theorem) or k = 2L")
    p.add_argument("--steps", type=int, default=3000, help="SGD steps per student")
    p.add_argument("--seeds", default="0,1", help="restarts per small student (the best is kept)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd", help="for theorem and control students")
    p.add_argument("--frobenius", type=float, default=1e-5, help="lambda of the Frobenius regularizer")
    p.add_argument("--no-controls", action="store_true", help="skip the controls on the representable tau^L")
    p.add_argument("--deep-widths", default="2", help="widths of the random-start deep students ('' = none)")
    p.add_argument("--deep-seeds", default="0,1,2,3", help="restarts of each random-start deep student")
    p.add_argument("--deep-steps", type=int, default=None, help="steps of the deep students (default --steps)")
    p.add_argument("--n-train", type=int, default=4096, help="training samples x ~ U[0, 1]")
    p.add_argument("--population", type=int, default=0,
                   help="R > 0: also the best of R restarts per theorem and control student, trained as one batch")
    p.add_argument("--deep-population", type=int, default=0,
                   help="R > 0: also the best of R restarts per random-start deep width, trained as one batch")
    p.add_argument("--population-lr", type=float, default=0.1, help="peak Adam lr of the populations")
    p.add_argument("--population-loss", choices=("l1", "squared"), default="l1", help="loss of the populations")
    p.add_argument("--out", default=None,
                   help="figure file (png/pdf/svg); '' = none (default: $SMASO_OUTPUT/figures/depth_separation.png)")
    p.add_argument("--engine", choices=("serial", "dask"), default="serial",
                   help="dask: every training run (student, seed) is one task on a Dask cluster")
    p.add_argument("--workers", type=int, default=None, help="worker processes of a local Dask cluster")
    p.add_argument("--scheduler", default=None, help="address of a running Dask scheduler")
    p.add_argument("--bracket-Ls", default=None, help="depths L whose class bracket the JSON records (default --Ls)")
    p.add_argument("--json", default="", help="write the rows, class brackets, config, machine and load to this "
                   "JSON file ('' = none)")
    p.add_argument("--record", dest="json", action="store_const", const=str(RECORDED),
                   help="write the recorded benchmarks/results/depth_separation.json (same as --json with that path)")
    args = p.parse_args(argv)
    if args.out is None:  # under the output root, never the source tree
        args.out = str(output_dir("figures") / "depth_separation.png")
    run = RunRecord("depth_separation", argv)
    with make_engine(args.engine, scheduler=args.scheduler, workers=args.workers) as engine:
        rows = depth_separation(
            [int(L) for L in args.Ls.split(",")],
            target=args.target,
            steps=args.steps,
            seeds=[int(s) for s in args.seeds.split(",")],
            lr=args.lr,
            optimizer=args.optimizer,
            frobenius=args.frobenius,
            controls=not args.no_controls,
            deep_random_widths=[int(w) for w in args.deep_widths.split(",") if w],
            deep_random_seeds=[int(s) for s in args.deep_seeds.split(",") if s],
            deep_steps=args.deep_steps,
            n_train=args.n_train,
            population=args.population,
            deep_population=args.deep_population,
            population_lr=args.population_lr,
            population_loss=args.population_loss,
            engine=engine,
        )
    print(format_table(rows))
    for L in sorted({r.L for r in rows}):
        theorem = [r for r in rows if r.L == L and r.role == "theorem"]
        if not theorem:
            continue
        best = min(theorem, key=lambda r: r.l1)
        r0 = theorem[0]
        print(f"L = {L}, tau^{r0.k}: the best member of the class has L1 error in [{r0.class_lower:.4f}, "
              f"{r0.class_upper:.4f}] (certified lower bound, explicit member); best trained student "
              f"{best.l1:.4f} ({best.student}); lecture bound {LECTURE_BOUND}")
    theorem = [r for r in rows if r.role == "theorem"]
    above = [f"L={r.L} {r.student} {r.l1:.4f} > {r.upper:.4f}" for r in theorem if r.l1 > r.upper + 1e-9]
    print(f"theorem students inside their own bracket: {sum(r.inside() for r in theorem)} of {len(theorem)}; "
          f"above it: {'; '.join(above) or 'none'}")
    if args.json:
        record = run.finish(config=vars(args), class_brackets=class_brackets(args.bracket_Ls or args.Ls),
                            rows=[row_record(r) for r in rows])
        record["training_s"] = sum(r.seconds for r in rows)  # summed over the restarts, in whichever process ran them
        write_strict_json(args.json, record, name="--json")
        print(f"wrote {args.json} ({record['wall_s']:.0f} s wall)")
        print(bracket_table(record), student_table(record), deep_table(record), sep="\n\n")
    if args.out:
        plot_depth(rows, args.out)
        print(f"figure: {args.out}")
    return rows


# ------------------------------------------------------------------------------------------ the record
def row_record(r: DepthRow) -> dict:
    """One row as plain values (no network): every field of :class:`DepthRow`, and whether it is inside."""
    out = {f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name != "net"}
    return {**out, "widths": list(r.widths), "inside": r.inside()}


def class_brackets(Ls: str) -> list[dict]:
    """The bracket of the theorem's class (depth <= L, at most 2^L nodes) on tau^(L^2) for every L of ``Ls``."""
    from smaso.depth.bracket import class_bracket

    out = []
    for L in (int(v) for v in Ls.split(",")):
        b = class_bracket(L)
        out.append({"L": L, "k": b.k, "nodes": b.nodes, "max_pieces": b.max_pieces, "max_widths": list(b.max_widths),
                    "lower": b.lower.value, "lower_method": b.lower.method, "teeth": b.lower.teeth,
                    "runs": b.lower.runs, "upper": b.upper.l1, "upper_widths": list(b.upper.widths)})
    return out


# ------------------------------------------------------------------------------------------ the doc's tables
def _tuple(widths) -> str:
    return str(tuple(widths))


def bracket_table(record: dict) -> str:
    """docs/experiments.md's table of the class brackets, from a record."""
    lines = ["| L | k = L^2 | max pieces T (widths) | 2^k | best error of the class: certified lower bound "
             "| ... explicit member (widths) |", "|---|---|---|---|---|---|"]
    for b in record["class_brackets"]:
        lines.append(f"| {b['L']} | {b['k']} | {b['max_pieces']} {_tuple(b['max_widths'])} | {2 ** b['k']} | "
                     f"{b['lower']:.4f} | {b['upper']:.4f} {_tuple(b['upper_widths'])} |")
    return "\n".join(lines)


def _rows(record: dict, **match) -> list[dict]:
    return [r for r in record["rows"] if all(r[k] == v for k, v in match.items())]


def student_table(record: dict) -> str:
    """docs/experiments.md's table of the theorem students (L >= 2): each one's own bracket, the best of its SGD
    restarts and its population on tau^(L^2), and the same two on the control tau^L."""
    lines = ["| L | student (widths) | its bracket | SGD | population | control on tau^L: SGD / population |",
             "|---|---|---|---|---|---|"]
    for r in _rows(record, role="theorem"):
        if r["L"] < 2 or r["student"].endswith("population"):
            continue
        pop = _rows(record, L=r["L"], role="theorem", student=r["student"] + ", population")
        ctrl = _rows(record, L=r["L"], role="control", student=r["student"])
        cpop = _rows(record, L=r["L"], role="control", student=r["student"] + ", population")
        where = "" if not pop else (" (inside)" if pop[0]["inside"] else
                                    " (above)" if pop[0]["l1"] > pop[0]["upper"] else " (BELOW)")
        lines.append(f"| {r['L']} | {r['student'].split()[0]} {_tuple(r['widths'])} | "
                     f"[{r['lower']:.4f}, {r['upper']:.4f}] | {_error(r['l1'])} | "
                     f"{_error(pop[0]['l1']) + where if pop else ''} | "
                     f"{_error(ctrl[0]['l1']) if ctrl else ''} / {_error(cpop[0]['l1']) if cpop else ''} |")
    return "\n".join(lines)


def deep_table(record: dict) -> str:
    """docs/experiments.md's table of the deep students (depth k = L^2): per random-start width the best of the
    Adam restarts / the population, and the warm start's error before -> after."""
    cfg = record["config"]
    widths = [int(w) for w in cfg["deep_widths"].split(",") if w]
    restarts = len([s for s in cfg["deep_seeds"].split(",") if s])
    head = "| L | " + " | ".join(f"width {w}: Adam, best of {restarts} / population" for w in widths)
    lines = [head + " | warm start (perturbed tent, SGD) |", "|---|" + "---|" * (len(widths) + 1)]
    for L in sorted({r["L"] for r in _rows(record, role="deep") if r["k"] > r["L"]}):
        cells = []
        for w in widths:
            name = f"deep: width {w}, random start"
            adam = _rows(record, L=L, role="deep", student=name + ", Adam")
            pop = _rows(record, L=L, role="deep", student=name + ", population")
            cells.append(f"{_error(adam[0]['l1']) if adam else ''} / {_error(pop[0]['l1']) if pop else ''}")
        warm = next(r for r in _rows(record, L=L, role="deep") if "warm start" in r["student"])
        lines.append(f"| {L} | " + " | ".join(cells) + f" | {_error(warm['l1_init'])} -> {_error(warm['l1'])} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
