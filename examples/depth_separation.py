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

    python examples/depth_separation.py --Ls 1,2,3,4 --out depth_separation.png
    python examples/depth_separation.py --Ls 2,3 --optimizer adam --lr 0.01
    python examples/depth_separation.py --Ls 1,2,3,4 --seeds 0,1,2,3 --engine dask --workers 2
    python examples/depth_separation.py --Ls 1,2,3 --deep-widths 2,8 --population 256 --deep-population 256
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
    if args.out:
        plot_depth(rows, args.out)
        print(f"figure: {args.out}")
    return rows


if __name__ == "__main__":
    main()
