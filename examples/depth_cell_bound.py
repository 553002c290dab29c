"""The cell bound on the depth-separation brackets (docs/theory.md §2.3, "The cell bound"; docs/experiments.md,
"A tighter lower end"): how far a certified bound built on the piece count alone narrows the brackets.

For every L of ``--Ls`` (the theorem's class: depth <= L, at most 2^L nodes, target tau^(L^2)):

- the old certified lower bound (teeth and runs, :func:`smaso.depth.bracket.l1_lower_bound`) for the class's
  largest piece count T, the cell bound at c = ``--cells`` cells per piece of tau^k
  (:func:`smaso.depth.pwl_bound.cell_lower_bound`), the least exact error of a continuous T-piece function the
  call found (its upper end, polished by ``--polish`` evaluations of Powell's method), and the class's explicit
  member (:func:`smaso.depth.bracket.class_upper_bound`);  for k above ``--max-k`` the cell bound is out of reach
  (2^k c cells) and recorded as null with that reason;
- the same lower ends for the widths of the students of ``examples/depth_separation.py`` (their own brackets);
- the small cases k = ``--small-k``, T = ``--small-T``: old bound, cell bound, polished T-piece function;
- the brute-force cases ``--brute`` (k:T pairs): the least error :func:`smaso.depth.bracket.brute_force_min` finds
  (an upper estimate of the minimum, close to it there) against the old certified bound.

    python examples/depth_cell_bound.py --record     # c = 8: the recorded benchmarks/results/depth_cell_bound.json
    python examples/depth_cell_bound.py --quick      # c = 2, L = 2, the small cases, no brute force: seconds
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from smaso.depth.bracket import (
    architecture_upper_bound,
    brute_force_min,
    class_max_pieces,
    class_upper_bound,
    l1_lower_bound,
)
from smaso.depth.pieces import breakpoint_bound
from smaso.depth.pwl_bound import cell_lower_bound
from smaso.depth.separation import _students
from smaso.output import RunRecord, write_strict_json

RECORDED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "depth_cell_bound.json"


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--Ls", default=None, help="depths L of the classes (default 2,3,4; quick 2)")
    p.add_argument("--cells", type=int, default=None, help="c, cells per piece of tau^k (default 8; quick 2)")
    p.add_argument("--polish", type=int, default=None, help="Powell evaluations polishing each class's and small "
                   "case's T-piece function (default 20000; quick 200)")
    p.add_argument("--max-k", type=int, default=9, help="largest k the cell bound is run for (default 9)")
    p.add_argument("--small-k", type=int, default=3, help="k of the small cases (default 3)")
    p.add_argument("--small-T", default="2,3,4,5", help="piece counts T of the small cases (default 2,3,4,5)")
    p.add_argument("--brute", default=None, help="k:T pairs brute-forced (default 2:2,2:3,3:2,3:3; quick none; "
                   "minutes each for T = 3)")
    p.add_argument("--quick", action="store_true", help="c = 2, L = 2, little polish, no brute force: seconds")
    p.add_argument("--json", default="", help="write every number, the config, machine and load to this JSON file")
    p.add_argument("--record", dest="json", action="store_const", const=str(RECORDED),
                   help="write the recorded benchmarks/results/depth_cell_bound.json")
    args = p.parse_args(argv)
    if args.Ls is None:
        args.Ls = "2" if args.quick else "2,3,4"
    if args.cells is None:
        args.cells = 2 if args.quick else 8
    if args.brute is None:
        args.brute = "" if args.quick else "2:2,2:3,3:2,3:3"
    if args.polish is None:
        args.polish = 200 if args.quick else 20000
    return args


def _bounds(k: int, T: int, c: int, polish: int) -> dict:
    """Old bound, cell bound and the polished T-piece function's error for E*(k, T); seconds of the cell bound."""
    old = l1_lower_bound(k, T)
    t0 = time.perf_counter()
    cb = cell_lower_bound(k, T, cells=min(2, c), max_cells=c, time_budget=float("inf"), polish=polish)
    return {"k": k, "T": T, "old": old.value, "old_method": old.method, "cell": cb.lower,
            "lower": max(old.value, cb.lower), "found": cb.upper, "levels": [list(v) for v in cb.levels],
            "seconds": time.perf_counter() - t0}


def main(argv=None) -> dict:
    args = parse_args(argv)
    run = RunRecord("depth_cell_bound", argv)
    c = args.cells
    classes, architectures = [], []
    for L in _ints(args.Ls):
        k = L * L
        T, widths = class_max_pieces(L, 2**L)
        explicit = class_upper_bound(k, L, 2**L)
        row = {"L": L, "k": k, "T": T, "max_widths": list(widths), "explicit": explicit.l1,
               "explicit_widths": list(explicit.widths)}
        if k > args.max_k:
            old = l1_lower_bound(k, T)
            row.update(old=old.value, old_method=old.method, cell=None, lower=old.value, found=None,
                       reason=f"out of reach: 2^{k} c cells")
        else:
            row.update(_bounds(k, T, c, args.polish))
            for name, w in _students(L).items():
                Tw = breakpoint_bound(w)
                arch = {"L": L, "student": name, "widths": list(w), "explicit": architecture_upper_bound(k, w).l1}
                architectures.append({**arch, **_bounds(k, Tw, c, 0)})
        classes.append(row)
        print(f"L = {L}: {row}")
    small = [_bounds(args.small_k, T, c, args.polish) for T in _ints(args.small_T)]
    brute = []
    for pair in filter(None, args.brute.split(",")):
        k, T = (int(v) for v in pair.split(":"))
        t0 = time.perf_counter()
        found = brute_force_min(k, T)
        brute.append({"k": k, "T": T, "found": found, "old": l1_lower_bound(k, T).value,
                      "seconds": time.perf_counter() - t0})
    record = run.finish(config=vars(args), classes=classes, architectures=architectures, small=small, brute=brute)
    print(cell_table(record), "", small_cases_text(record), limits_text(record), architectures_text(record),
          brute_text(record), sep="\n")
    if args.json:
        write_strict_json(args.json, record, name="--json")
        print(f"wrote {args.json} ({record['wall_s']:.0f} s wall)")
    return record


# ------------------------------------------------------------------------------------------ the doc's text
def cell_table(record: dict) -> str:
    """docs/experiments.md's table of the class brackets with the cell bound, from a record."""
    c = record["config"]["cells"]
    lines = [f"| L | k | T | old certified lower | cell bound (c = {c}) | a T-piece function reaches | explicit member "
             "| width old -> new |", "|---|---|---|---|---|---|---|---|"]
    for r in record["classes"]:
        old_w = r["explicit"] - r["old"]
        if r["cell"] is None:
            lines.append(f"| {r['L']} | {r['k']} | {r['T']} | {r['old']:.4f} | out of reach (2^{r['k']} c cells) | "
                         f"| {r['explicit']:.4f} | {old_w:.4f} |")
            continue
        new_w = r["explicit"] - r["lower"]
        lines.append(f"| {r['L']} | {r['k']} | {r['T']} | {r['old']:.4f} | {r['cell']:.4f} | {r['found']:.4f} | "
                     f"{r['explicit']:.4f} | {old_w:.4f} -> {new_w:.4f} ({old_w / new_w:.2f}x narrower) |")
    return "\n".join(lines)


def small_cases_text(record: dict) -> str:
    """The small cases' sentence: old lower ends, cell bounds and polished T-piece functions."""
    s = record["small"]
    Ts = f"{s[0]['T']}-{s[-1]['T']}"
    return (f"(k = {s[0]['k']}, T = {Ts}) the certified lower end goes from "
            + " / ".join(f"{r['old']:.3f}" for r in s) + " to " + " / ".join(f"{r['lower']:.3f}" for r in s)
            + ". Continuous T-piece functions found by polishing reach "
            + " / ".join(f"{r['found']:.3f}" for r in s) + ".")


def limits(record: dict) -> list[dict]:
    """Per class with a cell bound: the lower end halving the old bracket needs, and the narrowing factor no
    bound on the piece count alone can pass (its lower end cannot pass the found T-piece function's error)."""
    out = []
    for r in record["classes"]:
        if r["cell"] is None:
            continue
        old_w = r["explicit"] - r["old"]
        out.append({"L": r["L"], "halving_needs": r["explicit"] - old_w / 2, "found": r["found"],
                    "best_factor": old_w / (r["explicit"] - r["found"]),
                    "cell_short_of_found": r["found"] - r["lower"]})
    return out


def limits_text(record: dict) -> str:
    """The sentences on why no piece-count bound can halve the class brackets."""
    lim = limits(record)
    last = lim[-1]
    return ("Halving needs lower ends of at least " + " and ".join(f"{v['halving_needs']:.4f} (L = {v['L']})"
                                                                for v in lim)
            + ", and continuous functions with that many pieces already reach "
            + " and ".join(f"{v['found']:.4f}" for v in lim) + ", below both. So any such bound narrows the brackets "
            + "by at most " + " and ".join(f"{v['best_factor']:.2f}x (L = {v['L']})" for v in lim)
            + f". At L = {last['L']} the cell bound is within {last['cell_short_of_found']:.4f} of that limit.")


def brute_text(record: dict) -> str:
    """The range of the brute-force errors against the range of the old bound on the same cases."""
    b = record["brute"]
    if not b:
        return ""
    found, old = [v["found"] for v in b], [v["old"] for v in b]
    return (f"brute force finds T-piece functions with errors {min(found):.3f}-{max(found):.3f} where the bound "
            f"gives {min(old):.3f}-{max(old):.3f}")


def architectures_text(record: dict) -> str:
    """The students' own lower ends, old -> with the cell bound (L >= 3)."""
    return ", ".join(f"{tuple(a['widths'])} {a['old']:.4f} -> {a['lower']:.4f}" for a in record["architectures"]
                     if a["L"] >= 3)


if __name__ == "__main__":
    main()
