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

    python examples/overfitting.py --ns 16,64,256,1024,4096,16384 --out overfitting.png
"""

from __future__ import annotations

import argparse
import math

from smaso.theorems.overfitting import (
    CROSSING_LADDER,
    minibatch_tv,
    overfitting_ladder,
    plot_overfitting,
    update_crossing,
    update_curve,
)
from teachers.sampling import sample_ladder


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
    p.add_argument("--out", default="overfitting.png", help="figure file (png/pdf/svg); '' = none")
    args = p.parse_args(argv)
    ns = [int(n) for n in args.ns.split(",")]
    lad = overfitting_ladder(alpha_separation=args.alpha_separation, gamma_separation=args.gamma_separation)
    rows = update_curve(ns, ladder=lad, reps=args.reps, width=args.width, init_seed=args.init_seed, seed=args.seed)
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
    if args.crossing_reps > 0:
        clad = overfitting_ladder(alpha_separation=args.crossing_alpha_separation,
                                  gamma_separation=args.crossing_gamma_separation)
        print(f"crossing: alpha {args.crossing_alpha_separation} apart (sigma 1), gamma "
              f"{args.crossing_gamma_separation} apart (sigma 0.1), init seed {args.init_seed}")
        res = update_crossing([int(n) for n in args.crossing_ns.split(",")], ladder=clad, reps=args.crossing_reps,
                              width=args.width, init_seed=args.init_seed, seed=args.seed)
        print_crossing(res)
    if args.out:
        plot_overfitting(rows, args.out, tv_rows=tv_rows or None)
        print(f"figure written to {args.out}")
    return rows, tv_rows


if __name__ == "__main__":
    main()
