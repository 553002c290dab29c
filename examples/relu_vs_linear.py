"""ReLU versus linear (Thm 6): the loss ||F_omega - I||_F^2 of the explicit ReLU construction (0)
against the best linear network and its Eckart-Young lower bound, as the region size m grows.

A parent region with m events and n = m nodes reads ``--children`` one-hot children of
``--child-events`` events each, through all-vert P_ab (rows on a sphere in the simplex).  A linear
network's output has rank <= sum of the children's ranks + 1, so its loss grows like m; the ReLU
construction of Thm 6 is exact at every m.

    python examples/relu_vs_linear.py --ms 4,8,16,32,64,128    # the figure: $SMASO_OUTPUT/figures/relu_vs_linear.png
"""

from __future__ import annotations

import argparse

from smaso.output import output_dir
from smaso.theorems.relu_vs_linear import plot_relu_vs_linear


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ms", default="4,8,16,32,64,128", help="comma-separated region sizes m")
    p.add_argument("--children", type=int, default=2)
    p.add_argument("--child-events", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None,
                   help="figure file (png/pdf/svg) (default: $SMASO_OUTPUT/figures/relu_vs_linear.png)")
    args = p.parse_args(argv)
    if args.out is None:  # under the output root, never the source tree
        args.out = str(output_dir("figures") / "relu_vs_linear.png")
    ms = [int(m) for m in args.ms.split(",")]
    _, rows = plot_relu_vs_linear(ms, args.out, children=args.children, child_events=args.child_events,
                                  seed=args.seed)
    print("    m   ReLU loss (Thm 6)   best linear loss   Eckart-Young bound")
    for r in rows:
        print(f"{r['m']:5d}   {r['relu_loss']:17.3g}   {r['linear_loss']:16.6g}   {r['lower_bound']:18.6g}")
    print(f"figure written to {args.out}")
    return rows


if __name__ == "__main__":
    main()
