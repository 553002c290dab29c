"""Over-fitting from finite samples (framework paper §5.3, Eq 14-17): weight-update magnitudes vs N.

The label equals z_alpha (Eq 14), whose observations are barely separable (means 0.1 apart,
sigma 1: Eq 16's nearly constant features); z_gamma is irrelevant but easily separable (means
2 apart, sigma 0.1: Eq 17).  For each N, the first-step updates |Delta W| into the top nodes from
alpha and from gamma are averaged over ``--reps`` samples at one fixed random initialization,
next to the spurious correlation |eps| (Eq 15).  With ``--batch-sizes`` the figure also shows the
total-variation distance between minibatch and full-data P_hat (SGD's perturbed P).

    python examples/overfitting.py --ns 16,64,256,1024,4096,16384 --out overfitting.png
"""

from __future__ import annotations

import argparse
import math

from smaso.theorems.overfitting import minibatch_tv, overfitting_ladder, plot_overfitting, update_curve
from teachers.sampling import sample_ladder


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
    p.add_argument("--out", default="overfitting.png", help="figure file (png/pdf/svg)")
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
    plot_overfitting(rows, args.out, tv_rows=tv_rows or None)
    print(f"figure written to {args.out}")
    return rows, tv_rows


if __name__ == "__main__":
    main()
