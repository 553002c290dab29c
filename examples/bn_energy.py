"""The conserved row energy of BN (framework paper §7.5.1): energy over training, with and without BN.

Trains the ladder student by full-batch gradient descent with BN after every hidden ReLU (bn_eps
= 0, no biases, as in the paper) and without BN, plots the total hidden-level row energy
1/2 sum |W_j.|^2 relative to its start, and prints the drift exponents p (drift ~ lr^p) of the
log-log fits: at a fixed number of steps (BN ~2, no BN ~1) and at a fixed training time (BN ~1,
no BN ~0); see ``smaso/theorems/energy.py`` for why.

    python examples/bn_energy.py    # the figure: $SMASO_OUTPUT/figures/bn_energy.png
"""

from __future__ import annotations

import argparse

import torch

from smaso.output import output_dir
from smaso.theorems.energy import drift_exponent, plot_energy
from teachers import Ladder, sample_ladder


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=256, help="examples (one full batch)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--out", default=None,
                   help="figure path (default: $SMASO_OUTPUT/figures/bn_energy.png)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.out is None:  # under the output root, never the source tree
        args.out = str(output_dir("figures") / "bn_energy.png")
    lad = Ladder.random(depth=3, branching=2, events=4, seed=args.seed, emission="gaussian", sigma=0.5)
    sample = sample_ladder(lad, args.n, seed=args.seed + 1)
    fig, runs = plot_energy(sample, lr=args.lr, steps=args.steps, path=args.out, seed=args.seed)
    lrs = [0.004, 0.002, 0.001, 0.0005]
    result = {"max_relative_drift": {k: r.max_relative_drift for k, r in runs.items()}, "exponents": {}}
    for hold, kw, grid in (("steps", {"steps": 4}, lrs), ("time", {"time": 0.5}, [0.02, 0.01, 0.005, 0.0025])):
        for bn in (True, False):
            p_, drifts = drift_exponent(sample, grid, bn, seed=args.seed, **kw)
            result["exponents"][(hold, bn)] = (p_, drifts)
    print(f"max relative row-energy drift at lr={args.lr:g}, {args.steps} steps: "
          f"with BN {runs['bn'].max_relative_drift:.3g}, without BN {runs['no_bn'].max_relative_drift:.3g}")
    for (hold, bn), (p_, drifts) in result["exponents"].items():
        print(f"fixed {hold:5s} {'BN   ' if bn else 'no BN'}  exponent {p_:.3f}  drifts "
              + ", ".join(f"{d:.3g}" for d in drifts))
    print(f"figure written to {args.out}")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return result


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
