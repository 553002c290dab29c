"""How much data a deep network needs to learn the Random Hierarchy Model (docs/experiments.md, "The Random
Hierarchy Model"): test error against the training-set size P for the CNN and the shallow student, P* against
n_c m^L, synonymic sensitivity, event alignment and Thm 2's conditions on the same runs, and the controls.

For each (m, L) of ``--configs`` the teacher is ``Ladder.rhm(v=m, n_c=m, m, s=2, L, seed=0)`` (Petrini et al.,
arXiv 2307.02129).  Two students, each trained by :func:`smaso.sweep.sample_complexity_sweep` on distinct
derivations with a disjoint test set (``teachers.derivations.train_test_split``), every run of one shape trained
as one batched population:

- **cnn**: the ladder student on the RHM, filter s and stride s with *shared* filters (a convolution, as in the
  paper), ``--width`` nodes per region, a readout group of ``--readout`` nodes at the root;
- **shallow**: one hidden layer of ``--hidden`` nodes on the flattened one-hot input.

Both train with Adam on the cross-entropy for ``--steps`` steps, minibatch ``--batch`` (full batch below it), in
float32.  The grid of P is log-spaced: for the CNN ratio sqrt(2) from n_c m^L / 2 to 8 n_c m^L, for the shallow
student ratio 2 from n_c m^L / 2 to 16 n_c m^L, both capped at P_max minus the test set (the last point is the
cap).  P* is, per seed, where the test error crosses 10% (interpolated in log P); reported is the median over
seeds with its order-statistics interval (:meth:`smaso.sweep.SweepResult.p_star`).  The exponent is the
least-squares slope of log P* against log n_c m^L over the configurations whose P* is defined; its interval
is a percentile bootstrap over seeds (:func:`fit_exponent`: each configuration's seeds resampled with
replacement, its P* the median of the resampled per-seed P*, the slope refitted; a resample whose median falls
on a censored seed is dropped and counted).  It covers the variation over training seeds (data draw, initial
weights, minibatch order) at one RHM per configuration (rules seed 0), not the variation over rules.

Per run, :class:`smaso.student.rhm_measures.RHMMeasures`: synonymic sensitivity per layer (synonyms exchanged at
level L - 1) on every run, event alignment and Thm 2's conditions at three P per configuration (the first grid
point, the one nearest 2 n_c m^L and the last).  Controls on ``--control`` (default m = 8, L = 2): the same
students on the RHM's independent-children twin (:meth:`teachers.ladder.Ladder.independent_children`: the same marginal
tables, children drawn independently; data with replacement by :class:`smaso.sweep.IndependentDraws`; its Bayes
error from the exact posterior), and the CNN with the training labels shuffled.

    python examples/rhm_sample_complexity.py --record   # the recorded benchmarks/results/rhm_sweep.json
    python examples/rhm_sample_complexity.py --quick    # two small configurations, few steps: a minute
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch

from smaso.output import RunRecord, output_dir, write_strict_json

RECORDED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "rhm_sweep.json"
STUDENTS = ("cnn", "shallow")
THRESHOLD = 0.1


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", default="8x2,10x2,12x2,3x3,4x3,5x3",
                   help="m x L per configuration (v = n_c = m, s = 2)")
    p.add_argument("--seeds", type=int, default=5, help="seeds of the CNN's runs (default 5)")
    p.add_argument("--shallow-seeds", type=int, default=3, help="seeds of the shallow student's runs (default 3)")
    p.add_argument("--steps", type=int, default=2000, help="training steps (default 2000)")
    p.add_argument("--batch", type=int, default=128, help="minibatch (default 128)")
    p.add_argument("--lr", type=float, default=3e-3, help="the CNN's Adam learning rate (default 3e-3)")
    p.add_argument("--shallow-lr", type=float, default=1e-2, help="the shallow student's Adam lr (default 1e-2)")
    p.add_argument("--width", type=int, default=64, help="the CNN's nodes per region (default 64)")
    p.add_argument("--readout", type=int, default=64, help="the CNN's readout group (default 64)")
    p.add_argument("--hidden", type=int, default=1024, help="the shallow student's hidden nodes (default 1024)")
    p.add_argument("--num-test", type=int, default=2048, help="test rows (at most P_max / 4; default 2048)")
    p.add_argument("--control", default="8x2", help="the configuration of the controls ('' for none)")
    p.add_argument("--bayes-rows", type=int, default=8192, help="rows of the twin's Bayes error (default 8192)")
    p.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples of the exponent's interval")
    p.add_argument("--quick", action="store_true", help="configs 4x2,3x3, 300 steps, small students, 3 seeds")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--figures", default=None,
                   help="folder of the figures (default <output root>/rhm_sample_complexity; '' for none)")
    p.add_argument("--from-json", default="",
                   help="train nothing: print the tables and draw the figures of this record")
    p.add_argument("--json", default="", help="write the record here")
    p.add_argument("--record", dest="json", action="store_const", const=str(RECORDED),
                   help="write the recorded benchmarks/results/rhm_sweep.json")
    args = p.parse_args(argv)
    if args.quick:
        args.configs, args.steps, args.width, args.readout, args.hidden = "4x2,3x3", 300, 16, 16, 64
        args.seeds = args.shallow_seeds = 3
        args.control = "4x2"
        args.bootstrap = 200
    for name in ("seeds", "shallow_seeds", "bayes_rows", "steps", "batch", "width", "readout", "hidden", "num_test",
                 "threads", "bootstrap"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: expected a positive integer")
    return args


def _configs(text: str) -> list[tuple[int, int]]:
    out = []
    for part in filter(None, text.split(",")):
        m, L = (int(v) for v in part.split("x"))
        out.append((m, L))
    return out


def _grid(scale: int, cap: int, ratio: float, lo: float, hi: float) -> list[int]:
    """``round(scale * ratio^j)`` from ``lo * scale`` to ``hi * scale``, capped at ``cap`` (the cap itself the last
    point when it cuts the grid)."""
    j0, j1 = round(math.log(lo) / math.log(ratio)), round(math.log(hi) / math.log(ratio))
    pts = sorted({max(2, round(scale * ratio**j)) for j in range(j0, j1 + 1)})
    keep = [P for P in pts if P <= cap]
    if len(keep) < len(pts) and (not keep or keep[-1] < cap):
        keep.append(cap)
    return keep


def _detail(grid: list[int], scale: int) -> tuple[int, ...]:
    """The P at which alignment and Thm 2's conditions are measured: the first, the nearest 2 n_c m^L, the last."""
    mid = min(grid, key=lambda P: abs(math.log(P / (2 * scale))))
    return tuple(sorted({grid[0], mid, grid[-1]}))


def _sweep(ladder, sizes, seeds, kind, args, *, num_test, measure, make_data=None, shuffle=False):
    from smaso.student.config import TrainingConfig
    from smaso.sweep import sample_complexity_sweep

    cnn = kind == "cnn"
    training = TrainingConfig(steps=args.steps, lr=args.lr if cnn else args.shallow_lr, batch_size=args.batch,
                              loss="cross_entropy", optimizer="adam", shuffle_labels=shuffle)
    options = ({"width": args.width, "readout": args.readout, "shared": True} if cnn else {"hidden": args.hidden})
    t0 = time.perf_counter()
    res = sample_complexity_sweep(ladder, sizes, seeds, student="ladder" if cnn else "shallow",
                                  student_options=options, training=training, make_data=make_data,
                                  num_test=num_test, dtype=torch.float32, measure=measure)
    d = res.to_dict(THRESHOLD)
    d["seconds"] = time.perf_counter() - t0
    return d


def run_config(m: int, L: int, args: argparse.Namespace) -> dict:
    from smaso.student.rhm_measures import RHMMeasures
    from teachers.ladder import Ladder

    lad = Ladder.rhm(m, m, m, 2, L, seed=0)
    prm = lad.rhm_params
    num_test = min(args.num_test, prm.num_data // 4)
    cap = prm.num_data - num_test
    grids = {"cnn": _grid(prm.p_star_scale, cap, math.sqrt(2), 0.5, 8),
             "shallow": _grid(prm.p_star_scale, cap, 2.0, 0.5, 16)}
    out = {"m": m, "L": L, "v": m, "n_c": m, "s": 2, "P_max": prm.num_data, "scale": prm.p_star_scale,
           "num_test": num_test, "sweeps": {}}
    for kind in STUDENTS:
        seeds = args.seeds if kind == "cnn" else args.shallow_seeds
        measure = RHMMeasures(detail_sizes=_detail(grids[kind], prm.p_star_scale))
        out["sweeps"][kind] = _sweep(lad, grids[kind], seeds, kind, args, num_test=num_test, measure=measure)
        ps = out["sweeps"][kind]["p_star"]
        print(f"m = {m}, L = {L}, n_c m^L = {prm.p_star_scale}, {kind}: P* = {_fmt_p(ps['value'])} "
              f"[{_fmt_p(ps['low'])}, {_fmt_p(ps['high'])}] ({out['sweeps'][kind]['seconds']:.0f} s)", flush=True)
    return out


def run_controls(m: int, L: int, args: argparse.Namespace) -> dict:
    from inference.posterior import bayes_optimal_accuracy
    from smaso.student.rhm_measures import RHMMeasures
    from smaso.sweep import IndependentDraws
    from teachers.ladder import Ladder

    lad = Ladder.rhm(m, m, m, 2, L, seed=0)
    prm = lad.rhm_params
    twin = lad.independent_children()
    num_test = min(args.num_test, prm.num_data // 4)
    cap = prm.num_data - num_test
    grids = {"cnn": _grid(prm.p_star_scale, cap, math.sqrt(2), 0.5, 8),
             "shallow": _grid(prm.p_star_scale, cap, 2.0, 0.5, 16)}
    measure = RHMMeasures(detail_sizes=())
    _, rows = IndependentDraws(twin, args.bayes_rows)(1, 0)
    bayes = bayes_optimal_accuracy(twin, rows.inputs(dtype=torch.float64), torch.as_tensor(rows.y).long())
    out = {"m": m, "L": L, "num_test": num_test,
           "twin_bayes_error": 1 - bayes.expected, "twin_bayes_error_se": bayes.stderr, "twin_bayes_rows": bayes.n,
           "twin": {}, "shuffled": {}}
    for kind in STUDENTS:
        seeds = args.seeds if kind == "cnn" else args.shallow_seeds
        out["twin"][kind] = _sweep(twin, grids[kind], seeds, kind, args, num_test=num_test, measure=measure,
                                   make_data=IndependentDraws(twin, num_test))
        print(f"control, twin of m = {m}, L = {L}, {kind}: final median error "
              f"{out['twin'][kind]['median_test_error'][-1]:.3f}", flush=True)
    shuffled_grid = grids["cnn"][::2]
    out["shuffled"]["cnn"] = _sweep(lad, shuffled_grid, args.seeds, "cnn", args, num_test=num_test, measure=measure,
                                    shuffle=True)
    print(f"control, shuffled labels, cnn: median errors {out['shuffled']['cnn']['median_test_error']}", flush=True)
    return out


# ------------------------------------------------------------------------------------------ the fit
def _per_seed(sweep: dict) -> list[float]:
    """Per seed P*, censored seeds as -inf (below the grid) and +inf (above), seeds with no crossing left out."""
    ps = sweep["p_star"]
    out = []
    for s in map(str, sweep["seeds"]):
        c = ps["censored"].get(s)
        v = ps["per_seed"].get(s)
        out.append(-math.inf if c == "below" else math.inf if c == "above" else v)
    return [v for v in out if v is not None]


def _median(values: list[float]) -> float:
    x = sorted(values)
    k = len(x)
    mid = x[(k - 1) // 2: k // 2 + 1]
    return math.exp(sum(math.log(v) for v in mid) / len(mid)) if all(math.isfinite(v) for v in mid) else math.nan


def fit_exponent(configs: list[dict], student: str = "cnn", reps: int = 2000, seed: int = 0,
                 L: int | None = None) -> dict:
    """The slope of log P* against log n_c m^L (least squares over the configurations with a defined P*), and its
    percentile bootstrap interval over seeds (module docstring).  ``L``: only the configurations of that depth."""
    use = [c for c in configs if (L is None or c["L"] == L)]
    pts = [(c["scale"], c["sweeps"][student]["p_star"]["value"]) for c in use]
    pts = [(s, p) for s, p in pts if p is not None and math.isfinite(p)]
    out: dict = {"student": student, "L": L, "configs": len(pts), "reps": reps}
    if len(pts) < 2:
        return {**out, "slope": math.nan, "intercept": math.nan, "low": math.nan, "high": math.nan, "dropped": 0,
                "reason": f"{len(pts)} configuration(s) with a defined P*: no slope"}
    X = np.log([s for s, _ in pts])
    slope, intercept = np.polyfit(X, np.log([p for _, p in pts]), 1)
    rng = np.random.default_rng(seed)
    seeds = [_per_seed(c["sweeps"][student]) for c in use
             if c["sweeps"][student]["p_star"]["value"] is not None]
    Xs = np.log([c["scale"] for c in use if c["sweeps"][student]["p_star"]["value"] is not None])
    slopes, dropped = [], 0
    for _ in range(reps):
        med = [_median(list(rng.choice(s, size=len(s), replace=True))) for s in seeds]
        if not all(math.isfinite(v) for v in med):
            dropped += 1
            continue
        slopes.append(np.polyfit(Xs, np.log(med), 1)[0])
    lo, hi = (np.percentile(slopes, [2.5, 97.5]).tolist() if slopes else (math.nan, math.nan))
    return {**out, "slope": float(slope), "intercept": float(intercept), "low": lo, "high": hi, "dropped": dropped}


# ------------------------------------------------------------------------------------------ rendering
def _fmt_p(v) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.0f}"


def _p_star_cell(ps: dict) -> str:
    if ps["value"] is None:
        cens = sorted(set(ps["censored"].values()))
        return f"undefined ({'/'.join(cens) or 'no crossing'} the grid)"
    lo, hi = _fmt_p(ps["low"]), _fmt_p(ps["high"])
    return f"{ps['value']:.0f} [{lo}, {hi}]"


def pstar_table(record: dict) -> str:
    """P* against n_c m^L, both students (docs/experiments.md)."""
    head = ("| m | L | n_c m^L | P_max | test rows | CNN: P* [interval] | P* / n_c m^L | shallow: P* [interval] | "
            "shallow: error at its largest P |\n|---|---|---|---|---|---|---|---|---|")
    rows = []
    for c in record["configs"]:
        cnn, sh = c["sweeps"]["cnn"], c["sweeps"]["shallow"]
        v = cnn["p_star"]["value"]
        ratio = "-" if v is None else f"{v / c['scale']:.2f}"
        last = sh["median_test_error"][-1]
        rows.append(f"| {c['m']} | {c['L']} | {c['scale']} | {c['P_max']} | {c['num_test']} | "
                    f"{_p_star_cell(cnn['p_star'])} | {ratio} | {_p_star_cell(sh['p_star'])} | "
                    f"{last:.3f} (P = {sh['sizes'][-1]}) |")
    return "\n".join([head, *rows])


def fit_text(record: dict) -> str:
    """The fitted exponent, as docs/experiments.md quotes it."""
    f = record["fit"]["all"]
    parts = [f"slope {f['slope']:.2f} [{f['low']:.2f}, {f['high']:.2f}] over {f['configs']} configurations"]
    for key in ("L2", "L3"):
        g = record["fit"].get(key)
        if g and math.isfinite(g["slope"]):
            parts.append(f"L = {g['L']} alone: {g['slope']:.2f} [{g['low']:.2f}, {g['high']:.2f}]")
    return "; ".join(parts)


def _layer_names(L: int) -> list[tuple[int, str]]:
    """The CNN's student levels from the input up (level d = L + 1 the inputs): (level, name)."""
    return [(L + 1 - j, f"S layer {j}") for j in range(1, L + 1)] + [(0, "S out")]


def sensitivity_table(record: dict) -> str:
    """The CNN's test error and synonymic sensitivity per layer (medians over seeds) at the detail P of every
    configuration; layer 1 reads the s-patches, layer L is the readout group, 'in' the inputs themselves."""
    head = ("| m | L | P | P / n_c m^L | test error | S layer 1 | S layer 2 | S layer 3 | S out | S in |\n"
            "|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for c in record["configs"]:
        sw = c["sweeps"]["cnn"]
        for P in sw["meta"]["measure"]["fields"]["detail_sizes"]:
            runs = [r for r in sw["runs"] if r["P"] == P]
            med = {k: _nanmedian([r["measures"].get(k) for r in runs]) for k in
                   ["sensitivity_input", *(f"sensitivity_l{k}" for k in range(c["L"] + 1))]}
            err = _nanmedian([r["test_error"] for r in runs])
            cells = [f"{med[f'sensitivity_l{k}']:.3f}" for k, _ in _layer_names(c["L"])[:-1]]
            cells += ["-"] * (3 - len(cells))
            rows.append(f"| {c['m']} | {c['L']} | {P} | {P / c['scale']:.2f} | {err:.3f} | {' | '.join(cells)} | "
                        f"{med['sensitivity_l0']:.3f} | {med['sensitivity_input']:.3f} |")
    return "\n".join([head, *rows])


def _nanmedian(values) -> float:
    v = [x for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return float(np.median(v)) if v else math.nan


def _level_name(level: int, L: int) -> str:
    if level == 0:
        return "0 (scores, class)"
    if level == 1:
        return "1 (readout, class)"
    return f"{level} (RHM level {level - 1})"


def detail_table(record: dict, m: int, L: int) -> str:
    """The CNN's event alignment and Thm 2's conditions per level at the detail P of configuration (m, L)
    (medians over seeds)."""
    (c,) = [c for c in record["configs"] if (c["m"], c["L"]) == (m, L)]
    sw = c["sweeps"]["cnn"]
    head = ("| P | test error | level | eta2 [control] | spec | probe [chance] | focus | broadness | "
            "decorrelation fwd | decorrelation bwd |\n|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for P in sw["meta"]["measure"]["fields"]["detail_sizes"]:
        runs = [r for r in sw["runs"] if r["P"] == P]
        err = _nanmedian([r["test_error"] for r in runs])

        def med(key: str, runs=runs) -> str:
            v = _nanmedian([r["measures"].get(key) for r in runs])
            return "-" if math.isnan(v) else f"{v:.2f}"

        for k in range(L + 1):
            rows.append(f"| {P} | {err:.3f} | {_level_name(k, L)} | {med(f'eta2_l{k}')} "
                        f"[{med(f'eta2_control_l{k}')}] | {med(f'spec_l{k}')} | {med(f'probe_l{k}')} "
                        f"[{med(f'probe_chance_l{k}')}] | "
                        f"{med(f'focus_l{k}')} | {med(f'broadness_l{k}')} | {med(f'decorrelation_fwd_l{k}')} | "
                        f"{med(f'decorrelation_bwd_l{k}')} |")
    return "\n".join([head, *rows])


def controls_table(record: dict) -> str:
    """The controls: median test error against P on the RHM, on its independent-children twin, and with shuffled
    labels."""
    ctl = record["controls"]
    (c,) = [c for c in record["configs"] if (c["m"], c["L"]) == (ctl["m"], ctl["L"])]
    head = ("| student | data | P | median test error | median train error |\n|---|---|---|---|---|")
    rows = []
    for kind in STUDENTS:
        for name, sw in (("RHM", c["sweeps"][kind]), ("independent-children twin", ctl["twin"][kind]),
                         ("RHM, shuffled labels", ctl["shuffled"].get(kind))):
            if sw is None:
                continue
            train = [_nanmedian([r["train_error"] for r in sw["runs"] if r["P"] == P]) for P in sw["sizes"]]
            for P, e, t in zip(sw["sizes"], sw["median_test_error"], train, strict=True):
                rows.append(f"| {kind} | {name} | {P} | {e:.3f} | {t:.3f} |")
    return "\n".join([head, *rows])


def _span(values, digits: int = 2) -> str:
    v = [x for x in values if x is not None and math.isfinite(x)]
    return f"{min(v):.{digits}f}-{max(v):.{digits}f}"


def controls_text(record: dict) -> str:
    """The controls in words: the twin's Bayes error, the students' errors on it and with shuffled labels."""
    ctl = record["controls"]
    twin = [e for kind in STUDENTS for e in ctl["twin"][kind]["median_test_error"]]
    shuffled = [e for sw in ctl["shuffled"].values() for e in sw["median_test_error"]]
    cnn_train = [_nanmedian([r["train_error"] for r in ctl["twin"]["cnn"]["runs"] if r["P"] == P])
                 for P in ctl["twin"]["cnn"]["sizes"]]
    n_c = ctl["m"]
    return (f"the twin's Bayes error, from the exact posterior on {ctl['twin_bayes_rows']} of its rows, is "
            f"{ctl['twin_bayes_error']:.3f} (standard error {ctl['twin_bayes_error_se']:.3f}); on the twin both "
            f"students' median test error is {_span(twin, 3)} at every P (chance {1 - 1 / n_c:.3f}), and the CNN "
            f"no longer fits its training rows (median training error up to {max(cnn_train):.3f}); with shuffled "
            f"labels the CNN's test error is {_span(shuffled, 3)}")


def ratio_text(record: dict) -> str:
    """P* / n_c m^L over the configurations."""
    r = [c["sweeps"]["cnn"]["p_star"]["value"] / c["scale"] for c in record["configs"]
         if c["sweeps"]["cnn"]["p_star"]["value"] is not None]
    return f"P* / n_c m^L lies between {min(r):.2f} and {max(r):.2f} on the {len(r)} configurations"


def shallow_text(record: dict) -> str:
    """Where the shallow student reaches the threshold, and how far it is from it elsewhere."""
    crossed = [c for c in record["configs"] if c["sweeps"]["shallow"]["p_star"]["value"] is not None]
    rest = [c for c in record["configs"] if c["sweeps"]["shallow"]["p_star"]["value"] is None]
    parts = [f"The shallow student reaches a test error of {THRESHOLD:.0%} on {len(crossed)} of "
             f"{len(record['configs'])} configurations"]
    for c in crossed:
        v, cnn = c["sweeps"]["shallow"]["p_star"]["value"], c["sweeps"]["cnn"]["p_star"]["value"]
        parts.append(f"(m = {c['m']}, L = {c['L']}: P* = {v:.0f}, {v / cnn:.1f} times the CNN's and "
                     f"P_max / {c['P_max'] / v:.1f})")
    if rest:
        last = [c["sweeps"]["shallow"]["median_test_error"][-1] for c in rest]
        frac = [c["sweeps"]["shallow"]["sizes"][-1] / c["P_max"] for c in rest if c["L"] == 2]
        parts.append(f"; on the others its median test error at its largest P is {_span(last, 2)}"
                     + (f", with P up to {_span(frac, 2)} P_max at L = 2" if frac else ""))
    return " ".join(parts).replace(" ;", ";")


def sensitivity_text(record: dict) -> str:
    """The halving of the layer-2 sensitivity against P*, and the first layer's sensitivity at the largest P."""
    ratios, first, inputs = [], [], []
    for c in record["configs"]:
        sw = c["sweeps"]["cnn"]
        per = _seed_crossings(sw, f"sensitivity_l{c['L'] - 1}")
        if all(math.isfinite(v) for v in per) and sw["p_star"]["value"] is not None:
            ratios.append(float(np.median(per)) / sw["p_star"]["value"])
        last = [r for r in sw["runs"] if r["P"] == sw["sizes"][-1]]
        first.append(_nanmedian([r["measures"].get(f"sensitivity_l{c['L']}") for r in last]))
        inputs.append(_nanmedian([r["measures"].get("sensitivity_input") for r in last]))
    return (f"P_S / P* lies between {min(ratios):.2f} and {max(ratios):.2f}; at the largest P the first layer's S "
            f"is still {_span(first)}, against {_span(inputs)} for the inputs themselves")


def conditions_text(record: dict) -> str:
    """Thm 2's conditions and the alignment at the RHM's levels (student levels >= 2), CNN, every detail P: the
    ranges of the medians over seeds."""
    vals: dict[str, list[float]] = {k: [] for k in ("focus", "broadness", "decorrelation_fwd", "decorrelation_bwd",
                                                     "spec", "matched")}
    for c in record["configs"]:
        sw = c["sweeps"]["cnn"]
        for P in sw["meta"]["measure"]["fields"]["detail_sizes"]:
            runs = [r for r in sw["runs"] if r["P"] == P]
            for k in range(2, c["L"] + 1):
                for key in vals:
                    vals[key].append(_nanmedian([r["measures"].get(f"{key}_l{k}") for r in runs]))
    return (f"at the RHM's levels, over every configuration and detail P: focus {_span(vals['focus'])}, broadness "
            f"{_span(vals['broadness'])}, forward decorrelation {_span(vals['decorrelation_fwd'])}, backward "
            f"decorrelation {_span(vals['decorrelation_bwd'])}; the best node's correlation with an event "
            f"indicator (spec) {_span(vals['spec'])}, and "
            + ("no indicator has a node at 0.95 or more" if max(vals["matched"]) == 0 else
               f"the share of indicators matched at 0.95 at most {max(vals['matched']):.2f}"))


def train_error_text(record: dict) -> str:
    """The largest median training error of any grid point, per student (whether the runs interpolate)."""
    parts = []
    for kind in STUDENTS:
        worst = max((_nanmedian([r["train_error"] for r in c["sweeps"][kind]["runs"] if r["P"] == P]), P, c["m"],
                     c["L"]) for c in record["configs"] for P in c["sweeps"][kind]["sizes"])
        parts.append(f"{kind}: {worst[0]:.4f} (m = {worst[2]}, L = {worst[3]}, P = {worst[1]})")
    return "largest median training error at the end: " + "; ".join(parts)


# ------------------------------------------------------------------------------------------ figures
def _ratio_ticks(ax) -> None:
    """Ticks at the powers of 2 of P / n_c m^L (the default log ticks crowd their labels here)."""
    lo, hi = ax.get_xlim()
    ticks = [2.0**j for j in range(-3, 8) if lo <= 2.0**j <= hi]
    ax.minorticks_off()
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])


def figures(record: dict, folder: Path) -> list[str]:
    from smaso.plots._base import finish_figure, plt

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    # 1. test error against P / n_c m^L, both students
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, kind in zip(axes, STUDENTS, strict=True):
        for i, c in enumerate(record["configs"]):
            sw = c["sweeps"][kind]
            x = np.asarray(sw["sizes"], dtype=float) / c["scale"]
            y = np.asarray([np.nan if v is None else v for v in sw["median_test_error"]])
            ax.plot(x, y, marker="o", ms=3, color=f"C{i}", ls="-" if c["L"] == 2 else "--",
                    label=f"m = {c['m']}, L = {c['L']}")
        ax.axhline(THRESHOLD, color="0.5", lw=0.8, ls=":")
        ax.set(xscale="log", xlabel="P / (n_c m^L)", title=f"{kind} (median over seeds)")
        _ratio_ticks(ax)
    axes[0].set_ylabel("test error")
    axes[0].legend(fontsize=7)
    finish_figure(fig, folder / "rhm_test_error.png", "RHM: test error against P")
    paths.append("rhm_test_error.png")
    # 2. P* against n_c m^L
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    for kind, marker in (("cnn", "o"), ("shallow", "s")):
        for c in record["configs"]:
            ps = c["sweeps"][kind]["p_star"]
            if ps["value"] is None:
                continue
            lo = ps["low"] if ps["low"] is not None else ps["value"]
            hi = ps["high"] if ps["high"] is not None else ps["value"]
            ax.errorbar(c["scale"], ps["value"], yerr=[[ps["value"] - lo], [hi - ps["value"]]], fmt=marker,
                        color="C0" if kind == "cnn" else "C1", ms=5, capsize=3)
        ax.plot([], [], marker, color="C0" if kind == "cnn" else "C1", label=f"{kind}: P* [interval]")
    f = record["fit"]["all"]
    if math.isfinite(f["slope"]):
        xs = np.geomspace(min(c["scale"] for c in record["configs"]), max(c["scale"] for c in record["configs"]))
        ax.plot(xs, np.exp(f["intercept"]) * xs ** f["slope"], color="C0", lw=1,
                label=f"fit: slope {f['slope']:.2f} [{f['low']:.2f}, {f['high']:.2f}]")
    for c in record["configs"]:
        ax.annotate(f"({c['m']},{c['L']})", (c["scale"], c["sweeps"]["cnn"]["p_star"]["value"] or c["scale"]),
                    fontsize=7, xytext=(4, -10), textcoords="offset points")
    ax.set(xscale="log", yscale="log", xlabel="n_c m^L", ylabel="P* (test error 10%)")
    ax.legend(fontsize=7)
    finish_figure(fig, folder / "rhm_p_star.png", "RHM: P* against n_c m^L")
    paths.append("rhm_p_star.png")
    # 3. synonymic sensitivity beside test error (CNN)
    n = len(record["configs"])
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.8 * cols, 3.3 * rows), squeeze=False)
    for ax, c in zip(axes.flat, record["configs"], strict=False):
        sw = c["sweeps"]["cnn"]
        x = np.asarray(sw["sizes"], dtype=float) / c["scale"]
        ax.plot(x, [np.nan if v is None else v for v in sw["median_test_error"]], "-o", ms=3, color="k",
                label="test error")
        for j, (k, name) in enumerate(_layer_names(c["L"])):
            med = [_nanmedian([r["measures"].get(f"sensitivity_l{k}") for r in sw["runs"] if r["P"] == P])
                   for P in sw["sizes"]]
            ax.plot(x, med, "-", color=f"C{j}", label=name)
        ax.set(xscale="log", xlabel="P / n_c m^L", title=f"m = {c['m']}, L = {c['L']}", ylim=(0, 1.05))
        _ratio_ticks(ax)
        star = sw["p_star"]["value"]
        if star is not None:
            ax.axvline(star / c["scale"], color="0.5", lw=0.8, ls=":")
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    finish_figure(fig, folder / "rhm_sensitivity.png", "CNN: synonymic sensitivity (exchange at level L-1) and test "
                  "error against P / n_c m^L (dotted: P*)")
    paths.append("rhm_sensitivity.png")
    # 4. controls
    if record.get("controls"):
        ctl = record["controls"]
        (c,) = [c for c in record["configs"] if (c["m"], c["L"]) == (ctl["m"], ctl["L"])]
        fig, ax = plt.subplots(figsize=(6, 4.2))
        for kind, ls in (("cnn", "-"), ("shallow", "--")):
            for name, sw, col in (("RHM", c["sweeps"][kind], "C0"), ("twin", ctl["twin"][kind], "C1"),
                                  ("shuffled", ctl["shuffled"].get(kind), "C2")):
                if sw is None:
                    continue
                ax.plot(sw["sizes"], [np.nan if v is None else v for v in sw["median_test_error"]], ls, marker="o",
                        ms=3, color=col, label=f"{kind}, {name}")
        ax.axhline(ctl["twin_bayes_error"], color="C1", lw=0.8, ls=":", label="twin's Bayes error")
        ax.set(xscale="log", xlabel="P", ylabel="test error", title=f"controls, m = {ctl['m']}, L = {ctl['L']}")
        ax.legend(fontsize=7)
        finish_figure(fig, folder / "rhm_controls.png", "RHM controls")
        paths.append("rhm_controls.png")
    plt.close("all")
    return paths


def _seed_crossings(sweep: dict, key: str) -> list[float]:
    """Per seed, where the measure ``key`` first falls to half its value at the smallest P (interpolated in log P,
    as P*: :func:`smaso.sweep.p_star_of_curve`); NaN where it does not inside the grid."""
    from smaso.sweep import SweepResult, p_star_of_curve

    res = SweepResult.from_dict(sweep)
    return [p_star_of_curve(res.sizes, row, row[0] / 2)[0] if math.isfinite(row[0]) else math.nan
            for row in res.measure_values(key)]


def halving_table(record: dict) -> str:
    """Where the CNN's layer-2 representation (the first that combines patches: student level L - 1) loses half
    its synonymic sensitivity, against P*: per seed the crossing, the median over seeds with its order-statistics
    interval (:func:`smaso.student.seeds.median_interval`; a seed that does not cross inside the grid: none)."""
    from smaso.student.seeds import median_interval

    head = ("| m | L | P* | P_S: S layer 2 at half its value at the smallest P [interval] | P_S / P* |\n"
            "|---|---|---|---|---|")
    rows = []
    for c in record["configs"]:
        sw = c["sweeps"]["cnn"]
        per = _seed_crossings(sw, f"sensitivity_l{c['L'] - 1}")
        star = sw["p_star"]["value"]
        if not all(math.isfinite(v) for v in per):
            rows.append(f"| {c['m']} | {c['L']} | {_fmt_p(star)} | undefined: {sum(not math.isfinite(v) for v in per)} "
                        f"of {len(per)} seeds do not cross inside the grid | - |")
            continue
        med = float(np.median(per))
        iv = median_interval(per)
        cell = f"{med:.0f}" + ("" if iv is None else f" [{iv[0]:.0f}, {iv[1]:.0f}]")
        ratio = "-" if star is None else f"{med / star:.2f}"
        rows.append(f"| {c['m']} | {c['L']} | {_fmt_p(star)} | {cell} | {ratio} |")
    return "\n".join([head, *rows])


# ------------------------------------------------------------------------------------------ main
def report(record: dict, figures_folder: Path | None) -> None:
    """Print the tables docs/experiments.md shows and draw the figures."""
    print(pstar_table(record))
    print(fit_text(record))
    print(train_error_text(record))
    print(halving_table(record))
    for text in (ratio_text, shallow_text, sensitivity_text, conditions_text):
        print(text(record))
    if record.get("controls"):
        print(controls_text(record))
    if figures_folder is not None:
        record["figures"] = figures(record, figures_folder)
        print(f"figures in {figures_folder}")


def main(argv=None) -> dict:
    args = parse_args(argv)
    folder = output_dir("rhm_sample_complexity") if args.figures is None else (
        Path(args.figures) if args.figures else None)
    if args.from_json:
        import json

        record = json.loads(Path(args.from_json).read_text())
        report(record, folder)
        return record
    run = RunRecord("rhm_sweep", argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        configs = [run_config(m, L, args) for m, L in _configs(args.configs)]
        controls = None
        if args.control:
            (cm, cL), = _configs(args.control)
            if (cm, cL) not in _configs(args.configs):
                raise SystemExit(f"--control: {args.control} is not one of --configs")
            controls = run_controls(cm, cL, args)
    finally:
        torch.set_num_threads(threads)
    fit = {"all": fit_exponent(configs, "cnn", args.bootstrap),
           "L2": fit_exponent(configs, "cnn", args.bootstrap, L=2),
           "L3": fit_exponent(configs, "cnn", args.bootstrap, L=3)}
    config = {k: v for k, v in vars(args).items() if k not in ("json", "figures", "from_json")}
    record = run.finish(config=config, threshold=THRESHOLD, configs=configs, controls=controls, fit=fit)
    report(record, folder)
    if args.json:
        write_strict_json(args.json, record, name="--json", digits=6)
        print(f"wrote {args.json} ({record['wall_s']:.0f} s wall)")
    return record


if __name__ == "__main__":
    main()
