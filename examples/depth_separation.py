"""Depth separation (lecture notes, seed 001; docs/theory.md §2): tau^(L^2) against depth-L students.

For each L, ReLU students of depth L with at most 2^L hidden nodes (width 2; the 2^L nodes spread
evenly over L layers; one hidden layer of 2^L) are trained by minibatch SGD on the squared loss
plus lambda sum ||W||_F^2 from x ~ U[0, 1], and compared in L1 error with the lecture's lower
bound 1/8 (loose; claimed for L >= 2 — at L = 1 tau itself is a 2-node network). Their linear
pieces are counted exactly next to the breakpoint bound. The deep student (depth k = L^2, width
2) is the exact tent network, and the same network perturbed and retrained by SGD.

    python examples/depth_separation.py --Ls 1,2,3,4 --out depth_separation.png
    python examples/depth_separation.py --Ls 1,2,3,4 --seeds 0,1,2,3 --engine dask --workers 2
"""

from __future__ import annotations

import argparse

from smaso.depth.separation import LECTURE_BOUND, depth_separation, format_table
from smaso.plots.depth import plot_depth
from teachers.engine import make_engine


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--Ls", default="1,2,3,4", help="comma-separated depths L")
    p.add_argument("--target", default="L^2", choices=("L^2", "2L"), help="k = L^2 (the theorem) or k = 2L")
    p.add_argument("--steps", type=int, default=3000, help="SGD steps per student")
    p.add_argument("--seeds", default="0,1", help="restarts per small student (the best is kept)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--frobenius", type=float, default=1e-5, help="lambda of the Frobenius regularizer")
    p.add_argument("--n-train", type=int, default=4096, help="training samples x ~ U[0, 1]")
    p.add_argument("--out", default="depth_separation.png", help="figure file (png/pdf/svg); '' = none")
    p.add_argument("--engine", choices=("serial", "dask"), default="serial",
                   help="dask: every training run (student, seed) is one task on a Dask cluster")
    p.add_argument("--workers", type=int, default=None, help="worker processes of a local Dask cluster")
    p.add_argument("--scheduler", default=None, help="address of a running Dask scheduler")
    args = p.parse_args(argv)
    with make_engine(args.engine, scheduler=args.scheduler, workers=args.workers) as engine:
        rows = depth_separation(
            [int(L) for L in args.Ls.split(",")],
            target=args.target,
            steps=args.steps,
            seeds=[int(s) for s in args.seeds.split(",")],
            lr=args.lr,
            frobenius=args.frobenius,
            n_train=args.n_train,
            engine=engine,
        )
    print(format_table(rows))
    small = [r for r in rows if r.in_theorem and r.L >= 2]
    if small:
        best = min(small, key=lambda r: r.l1)
        print(f"\nsmallest L1 error of a depth-L student with <= 2^L nodes (L >= 2): {best.l1:.4f} "
              f"({best.student}, L = {best.L}); lecture bound {LECTURE_BOUND}")
    if args.out:
        plot_depth(rows, args.out)
        print(f"figure: {args.out}")
    return rows


if __name__ == "__main__":
    main()
