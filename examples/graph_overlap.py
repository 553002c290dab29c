"""A tree against overlapping receptive fields: the reformulation, Thm 2's terms and §7.7.1's backward
disentanglement with one parent against several (framework paper Eq 9, Thm 2-3, Eq 115; issue 17).

Three ladders with the same 27 one-hot leaves of 3 events, the same depth and events per level (top first
``EVENTS``: 3 classes, binary level-1 regions, level-2 regions of 4 events = 2 binary factors), top-down
with Dirichlet(``--concentration``) tables:

- ``overlap``: ``Ladder.conv1d(27, kernels=[3, 3, 6], strides=[2, 2, 1])``: 27, 13, 6, 1 regions; a
  region at an even interior position of levels 2 and 3 has 2 parents;
- ``shared-input``: the graph of ``overlap`` (the same regions, fan-in 3, receptive fields and student) with the
  law of ``tree-matched`` (below): a child with two parents has a table that ignores its left parent, and its
  right parent's row is the matched tree's row (:func:`shared_input_ladder`); trained and measured on the matched
  tree's own samples.  Against ``overlap`` it changes only the table family (one parent, not two); against
  ``tree-matched`` only the graph the student is built on (overlapping fields of 3, not nested fields of 2-3):
  the same teacher law and the same data;
- ``tree-matched``: a tree with the same region counts per level (27, 13, 6, 1; contiguous children, 2 or 3 per
  parent, :meth:`Ladder.tree`); a tree with these counts cannot have fan-in 3 (13 x 3 > 27);
- ``tree``: ``Ladder.conv1d(27, kernels=[3, 3, 3], strides=[3, 3, 3])``: 27, 9, 3, 1 regions, fan-in 3.

For each of ``--seeds`` teachers per ladder, a :class:`~smaso.student.network.LadderStudent` (8 ReLU
nodes per hidden region) is trained by SGD on ``--n`` examples and measured on ``--n`` fresh ones:

1. **Reformulation** (:func:`~smaso.student.diagnosis.compare_statistics_to_theory`): per level
   the relative errors of Eq 9 (with the sum over parents), full recursion (``propagated``) and one step
   (``local``), Thm 2's condition terms (focus, broadness, decorrelation), each with its jackknife noise
   floor (8 groups).  Reported: the median over teachers, the range, and two-sided tests (:data:`COMPARISONS`):
   Mann-Whitney between ladders with independent teachers, Wilcoxon signed-rank for ``shared-input`` against
   ``tree-matched`` (the same teacher and data per seed).
2. **§7.7.1 / Eq 115, the teacher's side**: for every level-2 region b, its K parents' tables
   P(z_b | z_a) give the best Def 4 distance any choice of parent weights can reach
   (:func:`~smaso.theorems.disentangle.eq115_from_statistics`), next to equal weights and the best single
   parent; by number of parents K.
3. **§7.7.1, the student's side**: the trained student's backward signal into level 2 per parent,
   P_ab^T G~_a W_ab (one column per child node), and its sum over the parents (Eq 9), each column's Def 4
   distance to its nearest factor form (min over the two factors).  For a child with 2 parents: the
   distance of the sum against that of each single term.

Controls, where the answer is known: the same pipeline on fully informative ladders (a tree and an
overlapping DAG, Thm 3: every error is 0), and Eq 115 with 2^s - 1 generic parents (the best distance is 0).

    python examples/graph_overlap.py                 # 20 teachers per ladder, N = 20000, about 3 minutes
    python examples/graph_overlap.py --quick         # 3 teachers, N = 4000 (the test's setting)
    python examples/graph_overlap.py --out overlap.png --json overlap.json
    python examples/graph_overlap.py --record        # the recorded benchmarks/results/graph_overlap.json

docs/experiments.md quotes the recorded file's tables (:func:`errors_table`, :func:`eq115_table`).
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

import torch

from inference.posterior import bayes_optimal_accuracy
from smaso.output import RunRecord, write_strict_json
from smaso.student.diagnosis import compare_statistics_to_theory
from smaso.student.frequency import collect_statistics
from smaso.student.network import LadderStudent
from smaso.student.training import train_ladder_student
from smaso.theorems.disentangle import (
    disentangled_G_distance,
    eq115_from_statistics,
    factor_marginals,
    multi_parent_backward_demo,
)
from teachers.ladder import Ladder
from teachers.regions import conv1d_parents
from teachers.sampling import sample_ladder
from teachers.statistics import EventStatistics, exact_statistics, level_edges

RECORDED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "graph_overlap.json"
EVENTS = [3, 2, 4, 3]
LADDERS = {"tree": {"width": 27, "kernels": [3, 3, 3], "strides": [3, 3, 3]},
           "tree-matched": {"branching": [[6], [2, 2, 2, 2, 2, 3], [2] * 12 + [3]]},
           "overlap": {"width": 27, "kernels": [3, 3, 6], "strides": [2, 2, 1]},
           "shared-input": {"graph": "overlap", "law": "tree-matched"}}
# (a, b, paired): the tests of every quantity, a against b; paired: the same teacher and data per seed
COMPARISONS = (("overlap", "shared-input", False), ("shared-input", "tree-matched", True),
               ("overlap", "tree-matched", False), ("overlap", "tree", False))
PARENT_LEVEL, CHILD_LEVEL = 1, 2  # binary parents, children of 2 binary factors (Eq 115's setting, s = 2)
KEYS = ("F_propagated", "F_local", "G_propagated", "G_local", "dW_propagated", "dW_local", "focus", "broadness",
        "decorrelation_fwd", "decorrelation_bwd")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=None, help="teachers (seeds 0..k-1) per ladder (default 20; 3 quick)")
    p.add_argument("--n", type=int, default=None, help="training and evaluation examples (default 20000; 4000 quick)")
    p.add_argument("--steps", type=int, default=None, help="SGD steps (default 3000; 600 quick)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default 0.05)")
    p.add_argument("--batch-size", type=int, default=256, help="SGD batch size (default 256)")
    p.add_argument("--width", type=int, default=8, help="student nodes per hidden region (default 8)")
    p.add_argument("--concentration", type=float, default=0.5, help="Dirichlet concentration of the tables "
                   "(default 0.5)")
    p.add_argument("--groups", type=int, default=8, help="jackknife groups of the noise floors (default 8)")
    p.add_argument("--threads", type=int, default=1, help="torch threads while it runs (default 1: the same numbers "
                   "on any machine; restored afterwards)")
    p.add_argument("--quick", action="store_true", help="3 seeds, N = 4000, 600 steps")
    p.add_argument("--out", default="", help="figure file (default: none)")
    p.add_argument("--json", default="", help="write every number, the config, machine and load to this JSON file "
                   "(strict: NaN as null; default: none)")
    p.add_argument("--record", dest="json", action="store_const", const=str(RECORDED),
                   help="write the recorded benchmarks/results/graph_overlap.json (same as --json with that path)")
    args = p.parse_args(argv)
    full, quick = {"seeds": 20, "n": 20000, "steps": 3000}, {"seeds": 3, "n": 4000, "steps": 600}
    for k, v in (quick if args.quick else full).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    for k in ("seeds", "n", "steps", "batch_size", "width", "groups", "threads"):
        if getattr(args, k) < 1:
            p.error(f"--{k.replace('_', '-')}: expected a positive integer")
    return args


def ladder(name: str, seed: int, concentration: float) -> Ladder:
    """The teacher of ladder ``name`` (:data:`LADDERS`) for one seed."""
    spec = LADDERS[name]
    kw = {"mode": "topdown", "seed": seed, "concentration": concentration, "name": f"{name}-{seed}"}
    if "law" in spec:
        graph = LADDERS[spec["graph"]]
        return shared_input_ladder(ladder(spec["law"], seed, concentration),
                                   conv1d_parents(graph["width"], graph["kernels"], graph["strides"]),
                                   name=f"{name}-{seed}")
    if "branching" in spec:
        return Ladder.tree(spec["branching"], EVENTS, **kw)
    return Ladder.conv1d(spec["width"], spec["kernels"], spec["strides"], EVENTS, **kw)


def data_ladder(name: str, seed: int, concentration: float) -> Ladder:
    """The ladder whose samples ``name`` is trained and measured on: its own, or the one whose law it has."""
    return ladder(LADDERS[name].get("law", name), seed, concentration)


def shared_input_ladder(tree: Ladder, parents, name: str = "shared-input") -> Ladder:
    """The region graph ``parents`` with the law of the top-down ``tree``: every region of the graph has the same
    events and, among its graph parents, its tree parent; its table depends on that parent alone (each row is
    the tree's row of that parent's event, whatever the other parents' events), so the joint law of every z, x
    and y is the tree's.

    :param tree: a top-down tree ladder with the same regions per level.
    :param parents: ``parents[l][i]`` of the graph (top first), each holding region i's tree parent.
    :raises ValueError: the region counts differ, or a region's tree parent is not among its graph parents.
    """
    counts = tuple(len(lvl) for lvl in parents)
    if counts != tuple(tree.num_regions) or tree.mode != "topdown":
        raise ValueError(f"tree: expected a top-down tree with regions {counts} per level, got {tree.num_regions}")
    tables = []
    for l in range(1, len(parents)):
        level = []
        for i, ps in enumerate(parents[l]):
            (tp,) = tree.parents[l][i]
            if tp not in ps:
                raise ValueError(f"parents[{l}][{i}]: expected the tree parent {tp} among the graph parents {ps}")
            radices = [tree.events[l - 1]] * len(ps)
            j = ps.index(tp)
            # rows in mixed-radix order of the graph parents (first most significant): the tree parent's digit
            codes = torch.arange(math.prod(radices))
            digit = (codes // math.prod(radices[j + 1:])) % radices[j]
            level.append(tree.region_tables[l][i][digit])
        tables.append(level)
    return Ladder(parents=parents, events=list(tree.events), mode="topdown", prior=tree.prior, tables=tables,
                  emission=tree.emission, name=name)


# ------------------------------------------------------------------------------------------ §7.7.1
def _def4_nearest(u: torch.Tensor, p_factors: torch.Tensor) -> float:
    """Def 4 distance of one column u ``(4,)`` to its nearest factor form (min over the two factors)."""
    out = []
    for j in range(p_factors.shape[0]):
        G = torch.zeros(u.numel(), p_factors.shape[0], dtype=torch.float64)
        G[:, j] = u
        out.append(disentangled_G_distance(G, p_factors))
    return min(out)


def eq115_rows(g: Ladder, P: EventStatistics) -> list[dict]:
    """Per child region of CHILD_LEVEL: K parents, Eq 115's best / equal-weight / best-single distances (min over
    the child's two factors of the best, the others at that factor)."""
    edges = level_edges(g, PARENT_LEVEL)
    rows = []
    for c in range(g.num_regions[CHILD_LEVEL]):
        es = [e for e, (_, cc) in enumerate(edges) if cc == c]
        tables = [P.P_down[CHILD_LEVEL][e] for e in es]  # (2, 4) each: P(z_c | z_p)
        res = [eq115_from_statistics(tables, P.marginals[CHILD_LEVEL][c], factor=f) for f in (0, 1)]
        best = min(res, key=lambda r: r.distance)
        rows.append({"region": c, "K": len(es), "best": best.distance, "equal_weights": best.ones_distance,
                     "best_single": float(best.single_distance.min())})
    return rows


def backward_rows(student: LadderStudent, stats) -> list[dict]:
    """The student's backward signal into CHILD_LEVEL per parent term and summed: nearest-Def 4 distances."""
    g = student.ladder
    l = PARENT_LEVEL
    par, chi = (t.cpu() for t in student.edge_index(l))
    W = student.edge_weights(l).detach().double().cpu()  # (E, n_c, n_p): W_ba of every edge
    G = stats.G_tilde[l].double()  # measured G~ of the parents (R_p, 2, n_p)
    terms = torch.einsum("eab,eaj,ekj->ebk", stats.P.P_down[l + 1].double(), G.index_select(0, par), W)
    rows = []
    for c in range(g.num_regions[l + 1]):
        es = (chi == c).nonzero().flatten().tolist()
        pf = factor_marginals(stats.P.marginals[l + 1][c], 2)
        summed = terms[es].sum(0)  # (4, n_c): Eq 9's raw G~ before the gate
        for k in range(summed.shape[1]):
            if summed[:, k].norm() < 1e-12:
                continue
            rows.append({"region": c, "K": len(es), "node": k, "sum": _def4_nearest(summed[:, k], pf),
                         "terms": [_def4_nearest(terms[e][:, k], pf) for e in es if terms[e][:, k].norm() > 1e-12]})
    return rows


# ------------------------------------------------------------------------------------------ one run
def run_one(name: str, seed: int, args: argparse.Namespace) -> dict:
    g = ladder(name, seed, args.concentration)
    source = data_ladder(name, seed, args.concentration)
    train, test = sample_ladder(source, args.n, seed), sample_ladder(source, args.n, seed + 10_000)
    student = LadderStudent(g, args.width, seed=seed)
    x, y = train.inputs(), train.y
    hist = train_ladder_student(student, x, y, steps=args.steps, lr=args.lr, batch_size=args.batch_size, seed=seed)
    xe, ye, ze = test.inputs(), test.y, test.z.long()
    with torch.no_grad():
        acc = (student(xe).argmax(-1) == ye).double().mean().item()
    stats = collect_statistics(student, xe, ye, ze, dtype=torch.float64, groups=args.groups)
    res = compare_statistics_to_theory(student, stats, replicates=list(stats.leave_one_out()))
    return {"ladder": name, "seed": seed, "regions": list(g.num_regions),
            "max_parents": max(len(p) for lvl in g.parents for p in lvl), "loss_first": hist[0], "loss_last": hist[-1],
            "accuracy": acc, "bayes": bayes_optimal_accuracy(g, xe, ye).empirical, "levels": res["levels"],
            "eq115": eq115_rows(g, exact_statistics(g)), "backward": backward_rows(student, stats)}


def controls(args: argparse.Namespace) -> dict:
    """Thm 3 on fully informative ladders (every error 0) and Eq 115 with 2^s - 1 generic parents (distance 0)."""
    out = {}
    for name, g in (("tree", Ladder.fully_informative(depth=2, branching=2, leaf_events=2)),
                    ("overlap", Ladder.fully_informative_conv1d(4, [2, 2, 2], [1, 1, 1]))):
        s = sample_ladder(g, min(args.n, 4000), 0)
        student = LadderStudent(g, args.width, seed=0, dtype=torch.float64)
        train_ladder_student(student, s.inputs(dtype=torch.float64), s.y, steps=50, lr=args.lr, seed=0)
        stats = collect_statistics(student, s.inputs(dtype=torch.float64), s.y, s.z.long(), dtype=torch.float64)
        res = compare_statistics_to_theory(student, stats)
        out[f"fully_informative_{name}"] = max(v for row in res["levels"] for k, v in row.items() if k in KEYS)
    demo = multi_parent_backward_demo(2, seed=0)
    out["eq115_demo"] = {"K": list(demo.k), "best": [float(v) for v in demo.distance]}
    return out


# ------------------------------------------------------------------------------------------ report
def _median(vals):
    vals = [v for v in vals if math.isfinite(v)]
    return statistics.median(vals) if vals else math.nan


def _finite(vals) -> list[float]:
    return [v for v in vals if v is not None and math.isfinite(v)]


def _p_value(a: list[float], b: list[float], paired: bool) -> float:
    """Two-sided p-value of two samples of teachers: Mann-Whitney (independent teachers) or, ``paired``, the
    Wilcoxon signed-rank test of the differences a_i - b_i (seed i: the same teacher and data).  NaN when
    undefined: fewer than 2 finite values (pairs) or no difference at all."""
    from scipy.stats import mannwhitneyu, wilcoxon

    if paired:
        pairs = [(x, y) for x, y in zip(a, b, strict=True) if math.isfinite(x) and math.isfinite(y)]
        if len(pairs) < 2 or all(x == y for x, y in pairs):
            return math.nan
        return float(wilcoxon([x for x, _ in pairs], [y for _, y in pairs], alternative="two-sided").pvalue)
    a, b = _finite(a), _finite(b)
    if len(a) < 2 or len(b) < 2 or len(set(a) | set(b)) < 2:
        return math.nan
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def _values(runs: list[dict], name: str, level: int, key: str) -> list[float]:
    """``key`` at ``level`` of every run of ladder ``name``, in seed order (NaN where it is not measured)."""
    rs = sorted((r for r in runs if r["ladder"] == name), key=lambda r: r["seed"])
    return [math.nan if r["levels"][level].get(key) is None else r["levels"][level][key] for r in rs]


def summarize(runs: list[dict]) -> dict:
    """Per ladder and level: median over seeds (and min, max) of every key and of its floor; per comparison of
    :data:`COMPARISONS` and level, the p-value of every key (``"tests"``)."""
    out = {}
    for name in LADDERS:
        rs = [r for r in runs if r["ladder"] == name]
        if not rs:
            continue
        levels = []
        for l in range(len(EVENTS) - 1):
            row = {"level": l}
            for k in KEYS:
                vals = _finite(_values(runs, name, l, k))
                floors = [r["levels"][l].get(f"{k}_floor", math.nan) for r in rs]
                row[k] = {"median": _median(vals), "min": min(vals, default=math.nan),
                          "max": max(vals, default=math.nan), "floor": _median(_finite(floors))}
            levels.append(row)
        eq = [e for r in rs for e in r["eq115"]]
        bw = [b for r in rs for b in r["backward"]]
        by_k = {}
        for K in sorted({e["K"] for e in eq}):
            sel = [e for e in eq if e["K"] == K]
            bsel = [b for b in bw if b["K"] == K]
            by_k[K] = {"children": len(sel), "best": _median([e["best"] for e in sel]),
                       "equal_weights": _median([e["equal_weights"] for e in sel]),
                       "best_single": _median([e["best_single"] for e in sel]),
                       "student_sum": _median([b["sum"] for b in bsel]),
                       "student_terms": _median([t for b in bsel for t in b["terms"]]), "columns": len(bsel)}
        multi = [b for b in bw if b["K"] >= 2 and len(b["terms"]) >= 2]
        out[name] = {"accuracy": _median([r["accuracy"] for r in rs]), "bayes": _median([r["bayes"] for r in rs]),
                     "levels": levels, "eq115_by_parents": by_k,
                     "sum_below_every_term": sum(b["sum"] < min(b["terms"]) for b in multi),
                     "multi_columns": len(multi)}
    tests = []
    for a, b, paired in COMPARISONS:
        if a in out and b in out:
            tests.append({"a": a, "b": b, "paired": paired,
                          "levels": [{k: _p_value(_values(runs, a, l, k), _values(runs, b, l, k), paired)
                                      for k in KEYS} for l in range(len(EVENTS) - 1)]})
    return {"ladders": out, "tests": tests}


# the rows of docs/experiments.md's table: (label, key, level); the Bonferroni family is these x COMPARISONS.
# (F one step at level 2, the last hidden level, is F's recursion there: both start from the measured input)
TABLE_ROWS = (("focus", "focus", 1), ("focus", "focus", 2), ("F, one step", "F_local", 0),
              ("F, one step", "F_local", 1), ("F, recursion", "F_propagated", 2),
              ("F, recursion", "F_propagated", 1), ("G~, one step", "G_local", 1), ("G~, one step", "G_local", 2),
              ("broadness", "broadness", 1), ("broadness", "broadness", 2))


def _cell(v: dict) -> str:
    if v["median"] is None or not math.isfinite(v["median"]):
        return "-"
    return f"{v['median']:.3f} ({v['floor']:.3f})" if v["floor"] is not None else f"{v['median']:.3f}"


def _p(p) -> str:
    """A p-value as the doc prints it: 2 significant digits, down to 1e-3, then one."""
    if p is None or not math.isfinite(p):
        return "-"
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.0e}"


def bonferroni(record: dict) -> dict:
    """The Bonferroni family of the table (its rows x the comparisons) and the corrected 5% threshold."""
    n = len(TABLE_ROWS) * len(record["summary"]["tests"])
    return {"tests": n, "threshold": 0.05 / n}


def errors_table(record: dict) -> str:
    """docs/experiments.md's table: medians over teachers (noise floor) per ladder, and the p-values."""
    s, tests = record["summary"]["ladders"], record["summary"]["tests"]
    names = [n for n in ("overlap", "shared-input", "tree-matched", "tree") if n in s]
    head = ("| quantity | level | " + " | ".join(names) + " | "
            + " | ".join(f"p, {t['a']} vs {t['b']}{' (paired)' if t['paired'] else ''}" for t in tests) + " |")
    lines = [head, "|---|---|" + "---|" * (len(names) + len(tests))]
    for label, key, level in TABLE_ROWS:
        lines.append(f"| {label} | {level} | " + " | ".join(_cell(s[n]["levels"][level][key]) for n in names) + " | "
                     + " | ".join(_p(t["levels"][level][key]) for t in tests) + " |")
    return "\n".join(lines)


def eq115_table(record: dict) -> str:
    """docs/experiments.md's Eq 115 table: medians over the level-2 regions, by ladder and number of parents."""
    s = record["summary"]["ladders"]
    lines = ["| ladder | parents K | regions | best over weights | equal weights | best single parent | "
             "student: sum over parents | student: single terms |", "|---|---|---|---|---|---|---|---|"]
    for name in ("tree", "tree-matched", "shared-input", "overlap"):
        for K, e in s.get(name, {}).get("eq115_by_parents", {}).items():
            lines.append(f"| {name} | {K} | {e['children']} | {e['best']:.3f} | {e['equal_weights']:.3f} | "
                         f"{e['best_single']:.3f} | {e['student_sum']:.3f} | {e['student_terms']:.3f} |")
    return "\n".join(lines)


def print_report(record: dict) -> None:
    args, summary, ctrl = record["config"], record["summary"]["ladders"], record["controls"]
    print(f"{args['seeds']} teachers per ladder, N = {args['n']} train + {args['n']} test, {args['steps']} SGD steps; "
          f"medians over teachers, [min, max], (jackknife floor, {args['groups']} groups)")
    for name, s in summary.items():
        print(f"\n{name}: student accuracy {s['accuracy']:.3f} (Bayes {s['bayes']:.3f})")
        print("  level  " + "  ".join(f"{k:>24}" for k in ("F_propagated", "G_propagated", "focus", "broadness",
                                                              "decorrelation_fwd")))
        for row in s["levels"]:
            cells = []
            for k in ("F_propagated", "G_propagated", "focus", "broadness", "decorrelation_fwd"):
                v = row[k]
                cells.append("-" if not math.isfinite(v["median"]) else
                             f"{v['median']:.3f} [{v['min']:.2f},{v['max']:.2f}] ({v['floor']:.3f})")
            print(f"  {row['level']:5d}  " + "  ".join(f"{c:>24}" for c in cells))
        if s["multi_columns"]:
            print(f"  columns with 2 parents whose sum is closer to Def 4 than each of its terms: "
                  f"{s['sum_below_every_term']} of {s['multi_columns']}")
    b = bonferroni(record)
    print(f"\nmedians (noise floor) and two-sided p-values; Bonferroni over the table's {b['tests']} tests: "
          f"p < {b['threshold']:.2g}")
    print(errors_table(record))
    print("\nEq 115 at level 2 (teacher's P; Def 4 distance, nearest factor) and the trained student's backward")
    print(eq115_table(record))
    print(f"\ncontrols: fully informative tree, overlap: largest error {ctrl['fully_informative_tree']:.1e}, "
          f"{ctrl['fully_informative_overlap']:.1e} (Thm 3: 0)")
    print("          Eq 115 with K generic parents, s = 2: best distance " +
          ", ".join(f"K={k}: {d:.2g}" for k, d in zip(ctrl["eq115_demo"]["K"], ctrl["eq115_demo"]["best"],
                                                      strict=True)) + " (0 from K = 3)")


def plot(summary: dict, path: str) -> None:
    """Medians, ranges (bars) and noise floors (dashes) of four quantities per level, one colour per ladder."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(15, 3.6))
    for ax, key in zip(axes, ("F_propagated", "G_local", "focus", "broadness"), strict=True):
        for off, (name, s) in enumerate(summary.items()):
            lv = [r["level"] + (off - (len(summary) - 1) / 2) * 0.2 for r in s["levels"]]
            med = [r[key]["median"] for r in s["levels"]]
            lo = [r[key]["median"] - r[key]["min"] for r in s["levels"]]
            hi = [r[key]["max"] - r[key]["median"] for r in s["levels"]]
            ax.errorbar(lv, med, yerr=[lo, hi], fmt="o", capsize=3, label=name)
            ax.plot(lv, [r[key]["floor"] for r in s["levels"]], "_", ms=12, color=f"C{off}")
        ax.set_title(key)
        ax.set_xlabel("level")
        ax.set_xticks(range(len(EVENTS) - 1))
    axes[0].set_ylabel("relative error (dash: noise floor)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _recorded_run(run: dict) -> dict:
    """A run as the record keeps it: its per-column backward distances summarised per number of parents K
    (columns, medians of the sum and of the single terms, columns whose sum beats every term), the rest as is."""
    by_k = {}
    for K in sorted({b["K"] for b in run["backward"]}):
        sel = [b for b in run["backward"] if b["K"] == K]
        by_k[K] = {"columns": len(sel), "sum": _median([b["sum"] for b in sel]),
                   "terms": _median([t for b in sel for t in b["terms"]]),
                   "sum_below_every_term": sum(len(b["terms"]) >= 2 and b["sum"] < min(b["terms"]) for b in sel)}
    return {**run, "backward": by_k}


def main(argv=None) -> dict:
    args = parse_args(argv)
    run = RunRecord("graph_overlap", argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        runs = [run_one(name, seed, args) for name in LADDERS for seed in range(args.seeds)]
        summary, ctrl = summarize(runs), controls(args)
    finally:
        torch.set_num_threads(threads)
    result = run.finish(config=dict(vars(args)), ladders=LADDERS, events=EVENTS, summary=summary, controls=ctrl,
                        bonferroni=None, runs=[_recorded_run(r) for r in runs])
    result["bonferroni"] = bonferroni(result)
    print_report(result)
    if args.out:
        plot(summary["ladders"], args.out)
    if args.json:
        # 6 significant digits and compact: the runs' numbers at the size of a results file
        write_strict_json(args.json, result, name="--json", digits=6, compact=True)
        print(f"wrote {args.json} ({result['wall_s']:.0f} s wall)")
    return result


if __name__ == "__main__":
    main()
