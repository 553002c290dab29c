"""Over-fitting from finite samples (framework paper §5.3, Eq 14-17): weight-update magnitudes vs N.

The label equals z_alpha (Eq 14), whose observations are barely separable (means 0.1 apart,
sigma 1: Eq 16's nearly constant features); z_gamma is irrelevant but easily separable (means
2 apart, sigma 0.1: Eq 17).  For each N, the first-step updates |Delta W| into the top nodes from
alpha and from gamma are averaged over ``--reps`` samples at one fixed random initialization,
next to the spurious correlation |eps| (Eq 15).  With ``--batch-sizes`` the figure also shows the
total-variation distance between minibatch and full-data P_hat (SGD's perturbed P).

The crossing table (``--crossing-reps`` > 0, :func:`smaso.theorems.overfitting.update_crossing`):
per N, in how many seeded repeats gamma's update beats alpha's (with a 95% Wilson interval), the
geometric-mean ratio with a 95% interval, the RMS ratio and the predicted one, and where the
fraction crosses 1/2, next to the predicted crossing N*.  Its ladder defaults to the regime
``CROSSING_LADDER`` (alpha 0.3 apart, gamma 4 apart).

The training table (``--train-seeds`` > 0, :func:`smaso.theorems.overfitting.overfitting_curve`): §5.3 over
training, not the first step.  Per N, ``--train-seeds`` runs (each its own dataset and initialization) are trained
to the end (full-batch GD, cross entropy) on ``TRAINING_LADDER`` (alpha 1 apart at sigma 1, gamma irrelevant and
4 apart at sigma 0.1), on the control ``CONTROL_LADDER`` (gamma irrelevant but as hard to separate as alpha), and
with minibatch SGD (``--sgd-batch``) on the first.  The table gives the final and best test error, the harm of
gamma's use (test error minus that with gamma's contribution replaced by its training mean), the top-weight
ratio |W_gamma| / |W_alpha|, and the paper's second explanation (the share of training sets whose labels a
one-factor logistic model on gamma fits better than one on alpha), all with 95% intervals.  ``--inits`` > 0 adds
the first-step crossing over initialization seeds (:func:`smaso.theorems.overfitting.crossing_over_inits`).
``--json`` writes everything measured.  ``--crossing-json`` writes the crossing table alone with its run (the
configuration, every stream seed, the machine and its load: strict JSON), and ``--record-crossing`` writes the
recorded ``benchmarks/results/overfitting_crossing.json``; :func:`crossing_table` and :func:`crossing_text` render
from it what docs/experiments.md quotes.

    python examples/overfitting.py --ns 16,64,256,1024,4096,16384    # the figure: $SMASO_OUTPUT/figures/overfitting.png
    python examples/overfitting.py --reps 0 --batch-sizes '' --out '' --record-crossing    # seconds
    python examples/overfitting.py --reps 0 --crossing-reps 0 --batch-sizes '' --out '' --inits 20 \\
        --train-seeds 20 --json benchmarks/results/overfitting.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from smaso.output import RunRecord, output_dir, write_strict_json
from smaso.theorems.overfitting import (
    CONTROL_LADDER,
    CROSSING_LADDER,
    TRAINING_LADDER,
    crossing_over_inits,
    minibatch_tv,
    overfitting_curve,
    overfitting_ladder,
    plot_overfitting,
    update_crossing,
    update_curve,
)
from teachers.sampling import sample_ladder

RECORDED_CROSSING = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "overfitting_crossing.json"
#: the crossing's Wilson intervals (95%) and the examples its second moments are estimated on
CROSSING_Z, MOMENT_EXAMPLES = 1.96, 2 ** 17


def print_crossing(res: dict) -> None:
    """Print :func:`update_crossing`'s table and only what it shows."""
    print("      N   gamma wins  [95% Wilson]   gmean ratio  [95% CI]       rms ratio   predicted"
          "   |eps_sym|   E|eps_sym|")
    for r in res["rows"]:
        print(f"{r['N']:7d}   {r['gamma_wins']:4d}/{r['reps']:<4d}  [{r['frac_lo']:.2f}, {r['frac_hi']:.2f}]"
              f"   {r['ratio_gmean']:11.2f}  [{r['ratio_lo']:.2f}, {r['ratio_hi']:.2f}]"
              f"   {r['rms_ratio']:9.2f}   {r['predicted_ratio']:9.2f}   {r['abs_eps_sym']:9.4f}"
              f"   {r['expected_eps_sym']:10.4f}")
    above, below = res["bracket"]
    if above is not None:
        print(f"gamma's update is larger in more than half of the repeats (interval above 1/2) up to N = {above}")
    else:
        print("at no N is gamma's update larger in more than half of the repeats (interval above 1/2)")
    if below is not None:
        print(f"and in fewer than half (interval below 1/2) from N = {below} on")
    if math.isfinite(res["crossing_N"]):
        print(f"the fraction first drops below 1/2 at N ~ {res['crossing_N']:.0f} (log-N interpolation)")
    else:
        print("the fraction does not drop from >= 1/2 to below 1/2 on this grid")
    if math.isfinite(res["predicted_crossing_N"]):
        print(f"predicted crossing of the RMS ratio through 1: N* = {res['predicted_crossing_N']:.0f} "
              f"(measured RMS crossing: {res['crossing_N_rms']:.0f})")
    else:
        print("predicted: no crossing (nu_gamma <= nu_alpha - |mu_alpha|^2: alpha's update is larger at every N)")


def print_training(name: str, res: dict) -> None:
    """Print one arm of :func:`overfitting_curve` (95% intervals in brackets)."""
    print(f"{name}: Bayes error {res['bayes_err']:.3f} (on the held-out sample {res['bayes_err_test']:.3f})")
    print("      N   test err final       test err best        harm of gamma         |W_g|/|W_a|          "
          "2nd expl. share     rho(llr, harm)")
    for r in res["rows"]:
        print(f"{r['N']:7d}   {r['test_err_final']:.3f} [{r['test_err_final_lo']:.3f}, {r['test_err_final_hi']:.3f}]"
              f"   {r['test_err_best']:.3f} [{r['test_err_best_lo']:.3f}, {r['test_err_best_hi']:.3f}]"
              f"   {r['harm']:+.3f} [{r['harm_lo']:+.3f}, {r['harm_hi']:+.3f}]"
              f"   {r['ratio']:6.3f} [{r['ratio_lo']:.3f}, {r['ratio_hi']:.3f}]"
              f"   {r['frac_second']:.2f} [{r['frac_second_lo']:.2f}, {r['frac_second_hi']:.2f}]"
              f"   {r['spearman_llr_harm']:+.2f}")


def main(argv=None) -> tuple[list[dict], list[dict]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ns", default="16,64,256,1024,4096,16384", help="comma-separated sample sizes N")
    p.add_argument("--reps", type=int, default=40, help="independent samples per N")
    p.add_argument("--alpha-separation", type=float, default=0.1)
    p.add_argument("--gamma-separation", type=float, default=2.0)
    p.add_argument("--width", type=int, default=8, help="hidden nodes per region")
    p.add_argument("--init-seed", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-sizes", default="8,32,128,512,2048", help="minibatch sizes for the TV panel ('' = none)")
    p.add_argument("--crossing-ns", default=",".join(str(2 ** k) for k in range(3, 13)),
                   help="comma-separated, increasing sample sizes N of the crossing table")
    p.add_argument("--crossing-reps", type=int, default=100,
                   help="seeded repeats per N of the crossing table (0 = none)")
    p.add_argument("--crossing-alpha-separation", type=float, default=CROSSING_LADDER["alpha_separation"])
    p.add_argument("--crossing-gamma-separation", type=float, default=CROSSING_LADDER["gamma_separation"])
    p.add_argument("--train-ns", default="8,32,128,512,2048", help="comma-separated N of the training table")
    p.add_argument("--train-seeds", type=int, default=0, help="runs per N of the training table (0 = none)")
    p.add_argument("--train-steps", type=int, default=3000, help="GD steps per training run")
    p.add_argument("--train-lr", type=float, default=0.5)
    p.add_argument("--test-examples", type=int, default=20000, help="held-out examples of the training table")
    p.add_argument("--sgd-batch", type=int, default=8, help="minibatch size of the SGD arm (0 = no SGD arm)")
    p.add_argument("--inits", type=int, default=0, help="initialization seeds of the first-step crossing (0 = none)")
    p.add_argument("--inits-reps", type=int, default=40, help="repeats per N and init of the first-step crossing")
    p.add_argument("--json", default="", help="write every measured number to this JSON file ('' = none)")
    p.add_argument("--crossing-json", default="",
                   help="write the crossing table with its configuration, seeds, machine and load here ('' = none)")
    p.add_argument("--record-crossing", dest="crossing_json", action="store_const", const=str(RECORDED_CROSSING),
                   help="write the recorded benchmarks/results/overfitting_crossing.json")
    p.add_argument("--out", default=None,
                   help="figure file (png/pdf/svg); '' = none (default: $SMASO_OUTPUT/figures/overfitting.png)")
    args = p.parse_args(argv)
    if args.out is None:  # under the output root, never the source tree
        args.out = str(output_dir("figures") / "overfitting.png")
    if args.crossing_json and args.crossing_reps < 1:
        p.error("--crossing-json/--record-crossing: expected --crossing-reps >= 1 (there is no table to record)")
    ns = [int(n) for n in args.ns.split(",")]
    lad = overfitting_ladder(alpha_separation=args.alpha_separation, gamma_separation=args.gamma_separation)
    t0, c0 = time.perf_counter(), time.process_time()
    result = {"argv": list(sys.argv[1:] if argv is None else argv), "config": vars(args)}
    rows = update_curve(ns, ladder=lad, reps=args.reps, width=args.width, init_seed=args.init_seed,
                        seed=args.seed) if args.reps > 0 else []
    if rows:
        print("      N   |eps|   E|eps| exact   sqrt(N)|eps|   |dW_alpha|   |dW_gamma|   gamma/alpha")
    for r in rows:
        print(f"{r['N']:7d}   {r['abs_eps']:.4f}   {r['expected_eps']:12.4f}   {math.sqrt(r['N']) * r['abs_eps']:12.3f}"
              f"   {r['dW_alpha']:10.4f}   {r['dW_gamma']:10.4f}   {r['ratio']:11.3f}")
    tv_rows = []
    if args.batch_sizes:
        bss = [int(b) for b in args.batch_sizes.split(",")]
        s = sample_ladder(lad, max(2**15, 4 * max(bss)), args.seed + 1)
        tv_rows = minibatch_tv(s, bss, num_batches=200, seed=args.seed)
        print("      B   TV(minibatch P_hat, full P_hat)   predicted   sqrt(B) TV")
        for r in tv_rows:
            print(f"{r['batch_size']:7d}   {r['tv']:31.4f}   {r['predicted']:9.4f}   "
                  f"{math.sqrt(r['batch_size']) * r['tv']:10.3f}")
    crossing_params = {**CROSSING_LADDER, "alpha_separation": args.crossing_alpha_separation,
                       "gamma_separation": args.crossing_gamma_separation}
    clad = overfitting_ladder(**crossing_params)
    if args.crossing_reps > 0:
        run = RunRecord("overfitting_crossing", argv)
        print(f"crossing: alpha {args.crossing_alpha_separation} apart (sigma {crossing_params['alpha_sigma']}), "
              f"gamma {args.crossing_gamma_separation} apart (sigma {crossing_params['gamma_sigma']}), init seed "
              f"{args.init_seed}")
        config = {"ns": [int(n) for n in args.crossing_ns.split(",")], "reps": args.crossing_reps,
                  "ladder": crossing_params, "width": args.width, "init_seed": args.init_seed, "seed": args.seed,
                  "z": CROSSING_Z, "moment_examples": MOMENT_EXAMPLES}
        res = update_crossing(config["ns"], ladder=clad, reps=args.crossing_reps, width=args.width,
                              init_seed=args.init_seed, seed=args.seed, z=CROSSING_Z, moment_examples=MOMENT_EXAMPLES)
        print_crossing(res)
        result["crossing"] = res
        if args.crossing_json:
            seeds = {"init_seed": args.init_seed, "stream_seeds": res["stream_seeds"],
                     "moment_seed": res["moment_seed"]}
            record = run.finish(config=config, seeds=seeds, crossing=res)
            write_strict_json(args.crossing_json, record, name="--crossing-json")
            print(f"wrote {args.crossing_json} ({record['wall_s']:.1f} s wall, {record['cpu_s']:.1f} s of CPU)")
    if args.inits > 0:
        inits = crossing_over_inits(args.inits, [int(n) for n in args.crossing_ns.split(",")], ladder=clad,
                                    reps=args.inits_reps, width=args.width, seed=args.seed)
        print(f"first-step crossing over {inits['inits']} init seeds ({args.inits_reps} repeats per N): crosses in "
              f"{inits['crosses']} ({inits['crosses_frac']:.2f} [{inits['crosses_lo']:.2f}, {inits['crosses_hi']:.2f}]"
              f" 95% Wilson); gamma never ahead in {inits['gamma_never']} ({inits['gamma_never_frac']:.2f} "
              f"[{inits['gamma_never_lo']:.2f}, {inits['gamma_never_hi']:.2f}]); moments predict a crossing in "
              f"{inits['predicted']}")
        result["crossing_over_inits"] = inits
    if args.train_seeds > 0:
        train_ns = [int(n) for n in args.train_ns.split(",")]
        arms = [("main", TRAINING_LADDER, None), ("control", CONTROL_LADDER, None)]
        if args.sgd_batch > 0:
            arms.append((f"sgd_b{args.sgd_batch}", TRAINING_LADDER, args.sgd_batch))
        result["training"] = {}
        for name, params, bs in arms:
            res = overfitting_curve(train_ns, seeds=args.train_seeds, steps=args.train_steps, lr=args.train_lr,
                                    width=args.width, batch_size=bs, ladder=overfitting_ladder(**params),
                                    test_examples=args.test_examples, seed=args.seed)
            print_training(f"{name} ({params}, batch {bs or 'full'})", res)
            result["training"][name] = {"ladder": params, "batch_size": bs, **res}
    result["seconds"] = time.perf_counter() - t0
    result["cpu_seconds"] = time.process_time() - c0  # the machine is shared: CPU time is the cost
    if args.json:
        from teachers.spec_io import atomic_write

        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(_rounded(result), separators=(",", ":"), default=_jsonable,  # compact: ~250 kB, not 540
                          allow_nan=False)
        atomic_write(out, lambda f: f.write(text.encode()), name="--json")
        print(f"wrote {out}")
    if args.out and rows:
        plot_overfitting(rows, args.out, tv_rows=tv_rows or None)
        print(f"figure written to {args.out}")
    return rows, tv_rows


def crossing_table(record: dict) -> str:
    """The crossing table of docs/experiments.md from a ``--crossing-json`` record: per N (columns), the repeats
    in which gamma's first-step update is the larger, their Wilson interval, and the RMS ratio with its
    second-moment prediction in parentheses."""
    rows = record["crossing"]["rows"]
    level = round(100 * math.erf(record["config"]["z"] / math.sqrt(2)))
    lines = [["N", *(str(r["N"]) for r in rows)],
             ["gamma's update larger", *(f"{r['gamma_wins']}/{r['reps']}" for r in rows)],
             [f"{level}% interval", *(f"{r['frac_lo']:.2f}-{r['frac_hi']:.2f}" for r in rows)],
             ["RMS ratio gamma / alpha (predicted)",
              *(f"{r['rms_ratio']:.2f} ({r['predicted_ratio']:.2f})" for r in rows)]]
    out = ["| " + " | ".join(lines[0]) + " |", "|" + "---|" * len(lines[0])]
    return "\n".join(out + ["| " + " | ".join(line) + " |" for line in lines[1:]])


def crossing_text(record: dict) -> str:
    """The sentences under the crossing table: where the fraction crosses 1/2 (and the N at which its interval
    lies wholly above and wholly below 1/2), where the RMS ratio crosses 1, and the predicted N* (a crossing that
    does not happen on the grid is said so; the JSON holds it as null)."""
    c = record["crossing"]
    above, below = c["bracket"]
    fin = [v is not None and math.isfinite(v) for v in (c["crossing_N"], c["crossing_N_rms"],
                                                        c["predicted_crossing_N"])]
    frac = (f"The fraction crosses 1/2 at N ~ {c['crossing_N']:.0f} (log-N interpolation)" if fin[0]
            else "The fraction does not drop from >= 1/2 to below 1/2 on this grid")
    if above is not None and below is not None:
        frac += f"; its interval lies wholly above 1/2 up to N = {above} and wholly below from N = {below} on"
    rms = (f"The RMS ratio crosses 1 at N ~ {c['crossing_N_rms']:.0f}" if fin[1]
           else "The RMS ratio does not cross 1 on this grid")
    pred = (f"N* = {c['predicted_crossing_N']:.0f}" if fin[2]
            else "no crossing (alpha's update larger at every N)")
    return (f"- {frac}.\n- {rms}; the prediction from the update's second moments (estimated on "
            f"{record['config']['moment_examples']} fresh examples) is {pred}.")


def training_table(arm: dict) -> str:
    """The over-training table of docs/experiments.md from one arm of ``--json``'s ``training`` (e.g. ``main``):
    per N, the final and best test error, the harm of gamma (t-intervals), the weight ratio |W_gamma| / |W_alpha|
    (geometric mean, interval from the log) and the second explanation's share (Wilson interval)."""
    def iv(r: dict, key: str, fmt: str) -> str:
        return f"{r[key]:{fmt}} [{r[key + '_lo']:{fmt}}, {r[key + '_hi']:{fmt}}]"

    out = ["| N | test error, final | test error, best along the run | harm of gamma | \\|W_gamma\\| / \\|W_alpha\\| | "
           "2nd expl. |", "|---:|---|---|---|---|---|"]
    out += [f"| {r['N']} | {iv(r, 'test_err_final', '.3f')} | {iv(r, 'test_err_best', '.3f')} | "
            f"{iv(r, 'harm', '+.3f')} | {iv(r, 'ratio', '.2f')} | {iv(r, 'frac_second', '.2f')} |" for r in arm["rows"]]
    return "\n".join(out)


def _rounded(obj, digits: int = 6):
    """``obj`` with every finite float rounded to ``digits`` significant digits (the JSON's size), and every
    non-finite one (NaN: not measured, e.g. a full-batch run's minibatch distance) as None, JSON's null:
    ``NaN`` is not JSON, and strict readers refuse it."""
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        if not math.isfinite(v):
            return None
        return v if v == 0 else float(f"{v:.{digits}g}")
    if isinstance(obj, dict):
        return {k: _rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_rounded(v, digits) for v in obj]
    return obj


def _jsonable(v):
    """Plain Python values for numpy scalars (the floats among them are rounded by :func:`_rounded` first)."""
    if isinstance(v, (np.integer, np.floating, np.bool_)):
        return v.item()
    raise TypeError(f"not JSON serializable: {type(v).__name__}")


if __name__ == "__main__":
    main()
