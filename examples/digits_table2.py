"""The "From Hard to Soft" experiment (its Table 2), small and real: ReLU vs swish with a learnable
beta, with and without orthogonal filters, on scikit-learn's bundled digits (no download).

A 64 -> 48 -> 48 -> 10 MLP is trained with Adam on 70% of the 1797 digits and tested on the other
30%, for every combination of

- activation: ``relu`` or ``swish`` (``smaso.splines.modules.BetaSwish``, learnable beta per layer, started at
  beta = 1/2, i.e. SiLU);
- orthogonality of the hidden layers (Eq 11): ``none``, the paper's ``penalty``
  (lambda * sum_{k != k'} <W_k, W_k'>^2 added to the loss), ``gram_schmidt`` (the authors' unnormalized
  classical Gram-Schmidt reparametrization) or ``orthogonal`` (PyTorch's
  ``torch.nn.utils.parametrizations.orthogonal``, orthonormal rows);

over several seeds, and the table of test accuracy (mean +- std over seeds) is printed and written as
JSON.  Whether orthogonality helps on this tiny problem is a finding, not a foregone conclusion.

    python examples/digits_table2.py --seeds 5 --epochs 60
    python examples/digits_table2.py --seeds 20 --engine dask --workers 2   # one task per run
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from smaso.splines.modules import BetaSwish
from smaso.splines.orthogonality import (
    model_orthogonality_penalty,
    orthogonality_defect,
    register_gram_schmidt,
    register_orthogonal,
)
from teachers.engine import make_engine

ACTIVATIONS = ("relu", "swish")
ORTHOGONALITY = ("none", "penalty", "gram_schmidt", "orthogonal")


def load_digits_split(seed: int, test_fraction: float = 0.3):
    """Standardized digits ``(x_train, y_train, x_test, y_test)`` as float32/int64 tensors."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = data.data.astype(np.float32) / 16.0
    y = data.target.astype(np.int64)
    perm = np.random.default_rng(seed).permutation(len(x))
    n_test = round(test_fraction * len(x))
    test, train = perm[:n_test], perm[n_test:]
    mean, std = x[train].mean(0), x[train].std(0) + 1e-6
    x = (x - mean) / std
    return (torch.from_numpy(x[train]), torch.from_numpy(y[train]),
            torch.from_numpy(x[test]), torch.from_numpy(y[test]))


def build_mlp(activation: str, orthogonality: str, hidden: int = 48, seed: int = 0) -> nn.Sequential:
    """64 -> hidden -> hidden -> 10 with the given activation and orthogonality mode on the hidden layers."""
    torch.manual_seed(seed)
    act = (lambda: nn.ReLU()) if activation == "relu" else (lambda: BetaSwish(0.5, learnable=True))
    hidden_layers = [nn.Linear(64, hidden), nn.Linear(hidden, hidden)]
    if orthogonality == "gram_schmidt":
        for lin in hidden_layers:
            register_gram_schmidt(lin)
    elif orthogonality == "orthogonal":
        for lin in hidden_layers:
            register_orthogonal(lin)
    return nn.Sequential(hidden_layers[0], act(), hidden_layers[1], act(), nn.Linear(hidden, 10))


def train_one(activation: str, orthogonality: str, seed: int, *, epochs: int, lr: float, lam: float,
              batch_size: int = 64) -> dict:
    """Train one network; returns test accuracy, final loss, learned betas and the hidden layers' defect."""
    x_tr, y_tr, x_te, y_te = load_digits_split(seed)
    model = build_mlp(activation, orthogonality, seed=seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    loss_fn = nn.CrossEntropyLoss()
    hidden = [m for m in model if isinstance(m, nn.Linear)][:2]
    for _ in range(epochs):
        perm = torch.randperm(len(x_tr), generator=gen)
        for s in range(0, len(x_tr), batch_size):
            idx = perm[s: s + batch_size]
            loss = loss_fn(model(x_tr[idx]), y_tr[idx])
            if orthogonality == "penalty":
                loss = loss + sum(model_orthogonality_penalty(nn.Sequential(h), lam) for h in hidden)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        acc = (model(x_te).argmax(-1) == y_te).float().mean().item()
        train_loss = loss_fn(model(x_tr), y_tr).item()
        betas = [float(m.beta) for m in model if isinstance(m, BetaSwish)]
        defect = [orthogonality_defect(h.weight).relative for h in hidden]
    return {"accuracy": acc, "train_loss": train_loss, "betas": betas, "defect": defect}


def _train_item(item: tuple[str, str, int], **kwargs) -> dict:
    """:func:`train_one` of one ``(activation, orthogonality, seed)``: a task of the engine."""
    return train_one(*item, **kwargs)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5, help="seeds per configuration")
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--lam", type=float, default=1e-2, help="weight of the orthogonality penalty")
    p.add_argument("--activations", default=",".join(ACTIVATIONS))
    p.add_argument("--orthogonality", default=",".join(ORTHOGONALITY))
    p.add_argument("--out", default=None, help="JSON results file (default: print only)")
    p.add_argument("--engine", choices=("serial", "dask"), default="serial",
                   help="dask: every (activation, orthogonality, seed) run is one task on a Dask cluster")
    p.add_argument("--workers", type=int, default=None, help="worker processes of a local Dask cluster")
    p.add_argument("--scheduler", default=None, help="address of a running Dask scheduler")
    args = p.parse_args(argv)
    acts = [a for a in args.activations.split(",") if a]
    orths = [o for o in args.orthogonality.split(",") if o]
    for a in acts:
        if a not in ACTIVATIONS:
            p.error(f"--activations: unknown {a!r}; choose from {ACTIVATIONS}")
    for o in orths:
        if o not in ORTHOGONALITY:
            p.error(f"--orthogonality: unknown {o!r}; choose from {ORTHOGONALITY}")
    t0 = time.perf_counter()
    items = [(a, o, seed) for a in acts for o in orths for seed in range(args.seeds)]
    # every run is seeded on its own (weights, split, minibatches), so the table is the same on any engine
    with make_engine(args.engine, scheduler=args.scheduler, workers=args.workers) as engine:
        done = engine.map(_train_item, items, epochs=args.epochs, lr=args.lr, lam=args.lam)
    by_config = {}
    for (a, o, _), r in zip(items, done, strict=True):
        by_config.setdefault((a, o), []).append(r)
    rows = []
    for (a, o), runs in by_config.items():
        accs = [r["accuracy"] for r in runs]
        rows.append({"activation": a, "orthogonality": o, "runs": runs,
                     "mean": statistics.fmean(accs), "std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
                     "defect": statistics.fmean(statistics.fmean(r["defect"]) for r in runs),
                     "beta": statistics.fmean(statistics.fmean(r["betas"]) for r in runs) if a == "swish"
                     else None})
    print(f"digits (1797 images, 30% test), MLP 64-48-48-10, Adam lr {args.lr}, {args.epochs} epochs, "
          f"{args.seeds} seeds; penalty lambda {args.lam}")
    print("activation  orthogonality   test accuracy (mean +- std)   hidden-layer defect   learned beta")
    for r in rows:
        beta = f"{r['beta']:.3f}" if r["beta"] is not None else "-"
        print(f"{r['activation']:10s}  {r['orthogonality']:13s}   {100 * r['mean']:6.2f} +- {100 * r['std']:4.2f} %"
              f"              {r['defect']:.2e}           {beta}")
    result = {"config": vars(args), "rows": rows, "seconds": time.perf_counter() - t0}
    if args.out:
        from teachers.spec_io import atomic_write

        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out, lambda f: f.write(json.dumps(result, indent=1).encode()))
        print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
