"""How noisy leaves lower the ceiling: Bayes-optimal accuracy of a ladder against leaf noise sigma.

The summarization ladder's label is a (stochastic) function of its leaf events; with one-hot
leaves (Thm 3's delta case) the leaf events are observed exactly, with Gaussian leaves of
growing sigma they are not.  For each sigma this script samples the ladder, computes the exact
posterior p(y | x) by sum-product (``inference.posterior``) and prints the accuracy of
the Bayes-optimal classifier: the best any student network can do on that data.

    python examples/ladder_noise_ceiling.py --n 5000 --sigmas 0.1,0.3,0.5,1,2
"""

from __future__ import annotations

import argparse

import torch

from inference.posterior import bayes_optimal_accuracy
from teachers import GaussianEmission, Ladder, sample_ladder


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=5000, help="examples per sigma")
    p.add_argument("--sigmas", default="0.1,0.3,0.5,1,2", help="comma-separated leaf noise levels")
    p.add_argument("--mode", default="topdown", choices=["topdown", "bottomup"])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    base = Ladder.random(depth=3, branching=2, events=4, mode=args.mode, concentration=0.3, seed=args.seed)
    rows = []
    onehot = sample_ladder(base, args.n, seed=args.seed)
    acc = bayes_optimal_accuracy(base, onehot.inputs(dtype=torch.float64), onehot.y)
    rows.append({"sigma": 0.0, **acc.as_dict()})
    for sigma in (float(s) for s in args.sigmas.split(",")):
        lad = base.with_emission(GaussianEmission.around_one_hot(base.num_regions[-1], base.events[-1], sigma))
        s = sample_ladder(lad, args.n, seed=args.seed)
        rows.append({"sigma": sigma, **bayes_optimal_accuracy(lad, s.inputs(dtype=torch.float64), s.y).as_dict()})
    print(base.describe())
    print("\nleaf sigma   Bayes-optimal accuracy (exact posterior)   fraction correct")
    for r in rows:
        label = "one-hot" if r["sigma"] == 0 else f"{r['sigma']:7.2f}"
        print(f"{label:>10}   {r['expected']:.4f} +- {r['stderr']:.4f}{'':22}{r['empirical']:.4f}")
    return rows


if __name__ == "__main__":
    main()
