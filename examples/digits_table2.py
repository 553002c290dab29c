"""The "From Hard to Soft" experiment (its Table 2), small and real: ReLU vs swish with a learnable
beta, with and without orthogonal filters, on scikit-learn's bundled digits (8x8 images, no download).

Two networks, each trained with Adam (minibatches of 64) on 70% of the 1797 digits and tested on the
other 30% (539 images; the split is drawn from the seed):

- ``mlp``: 64 -> 48 -> 48 -> 10, fully connected;
- ``cnn``: 1x8x8 -> conv 3x3 (8 filters, pad 1) -> act -> conv 3x3 (32 filters, pad 1) -> act ->
  max-pool 2x2 -> linear 512 -> 10.  The paper uses CNNs (its largeCNN on SVHN / CIFAR); this is the
  smallest one that fits 8x8 inputs.  The first convolution has 8 filters, not 16: its 3x3x1 filters
  live in R^9, which holds at most 9 mutually orthogonal filters, so orthogonal filters (Gram-Schmidt,
  orthonormal rows) need at most 9.  PyTorch's ``orthogonal`` given 16 filters of 9 entries would make
  the *columns* orthonormal instead (a semi-orthogonal matrix whose filters are not orthogonal), which
  is not what the paper asks; ``smaso.splines.orthogonality`` refuses that case rather than doing it.
  Eq 11 proper, on the rows of the convolution matrix (every filter at every shift), cannot hold here:
  the first convolution has 8 x 64 = 512 rows in R^64, the second 32 x 64 = 2048 in R^512.
- ``cnn_patch``: 1x8x8 -> conv 2x2 stride 2 (4 filters) -> act -> conv 2x2 stride 2 (16 filters) ->
  act -> linear 64 -> 10.  Non-overlapping filters (stride = kernel, no padding): the convolution
  matrices are 64 x 64 (4 x 16 rows in R^64, then 16 x 4 rows in R^64), and orthogonal filters make
  their rows orthogonal, i.e. Eq 11 proper holds (the paper's Appendix E.4 case).

For every combination of

- activation: ``relu`` or ``swish`` (``smaso.splines.modules.BetaSwish``, one learnable beta per layer,
  started at beta = 1/2, i.e. SiLU);
- orthogonality of the hidden layers (Eq 11; the layers that feed a nonlinearity, not the output layer),
  a convolution's filters flattened to rows ``(out_channels, in_channels*kh*kw)`` except for
  ``conv_penalty``:

  - ``none``;
  - ``penalty``: the paper's lambda * sum_{k != k'} <W_k, W_k'>^2 over the filters / rows of every hidden
    layer, added to the cross-entropy, lambda = 1 as in the paper, and each value of ``--lams`` its own
    configuration (default the sweep 0.1, 1, 10);
  - ``gram_schmidt``: the authors' unnormalized classical Gram-Schmidt reparametrization of the filters;
  - ``orthogonal``: PyTorch's ``torch.nn.utils.parametrizations.orthogonal`` (orthonormal filters), the
    well-kept alternative;
  - ``conv_penalty`` (CNNs only; for the MLP it is ``penalty``): the same penalty on the rows of each
    convolution's *matrix*, every filter at every output position (Eq 11 proper,
    ``smaso.splines.orthogonality.conv_orthogonality_penalty``), each ``--lams`` value its own configuration;

over several seeds.  Seed s fixes the split, the initial weights (the same for every configuration of
one network) and the minibatch order, so two configurations are compared *paired by seed*: the table
gives, per network and activation, the test accuracy (mean +- std over seeds), and the paired
differences of every orthogonality configuration vs ``none`` and of swish vs ReLU, with their 95%
t-intervals and how many seeds gained.  Whether orthogonality helps on this tiny problem is a finding,
not a foregone conclusion.  Two defects (relative, in [0, 1], 0 iff orthogonal; mean over hidden layers
and seeds) are reported: of the filters flattened to rows, and, for the CNNs, of the convolution
matrix's rows (Eq 11 proper).

Every run is seeded on its own (a ``torch.Generator`` for the minibatches, ``torch.random.fork_rng``
around the weights' initialization), so the table is the same on any engine, and a run leaves torch's
global RNG as it found it.

    python examples/digits_table2.py                         # the full table: 480 runs (each run's seconds recorded)
    python examples/digits_table2.py --quick                 # 2 seeds, 3 epochs, lambda = 1 only (CI)
    python examples/digits_table2.py --model cnn --lams 0.01,0.1,1,10 --orthogonality none,penalty
    python examples/digits_table2.py --seeds 20 --engine dask --workers 2   # one task per run
    python examples/digits_table2.py --model cnn --orthogonality conv_penalty --lams 1 \
        --out benchmarks/results/digits_table2.json --update     # merge these rows into the recorded table
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from smaso.splines.modules import BetaSwish
from smaso.splines.orthogonality import (
    conv_orthogonality_defect,
    conv_orthogonality_penalty,
    model_orthogonality_penalty,
    orthogonality_defect,
    orthogonality_penalty,
    register_gram_schmidt,
    register_orthogonal,
)
from teachers.engine import make_engine

MODELS = ("mlp", "cnn", "cnn_patch")
ACTIVATIONS = ("relu", "swish")
ORTHOGONALITY = ("none", "penalty", "gram_schmidt", "orthogonal", "conv_penalty")
MODEL_NAMES = {"mlp": "MLP 64-48-48-10", "cnn": "CNN conv3x3(8)-conv3x3(32)-maxpool2-linear(512->10)",
               "cnn_patch": "CNN conv2x2/2(4)-conv2x2/2(16)-linear(64->10), non-overlapping filters"}
FULL = {"seeds": 10, "epochs": 40, "lams": "0.1,1,10", "model": ",".join(MODELS),
        "activations": ",".join(ACTIVATIONS), "orthogonality": ",".join(ORTHOGONALITY)}
QUICK = {"seeds": 2, "epochs": 3, "lams": "1", "model": ",".join(MODELS),
         "activations": ",".join(ACTIVATIONS), "orthogonality": ",".join(ORTHOGONALITY)}


def load_digits_split(seed: int, test_fraction: float = 0.3):
    """Standardized digits ``(x_train, y_train, x_test, y_test)`` as float32/int64 tensors, ``x`` ``(N, 64)``.

    The split is a permutation drawn from ``seed`` (numpy's own generator, no global state); the
    pixels are standardized with the training part's mean and std.
    """
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


def _activation(activation: str) -> nn.Module:
    return nn.ReLU() if activation == "relu" else BetaSwish(0.5, learnable=True)


def build_model(model: str, activation: str, orthogonality: str, seed: int = 0, hidden: int = 48) -> nn.Sequential:
    """The ``mlp`` or ``cnn`` with the activation and orthogonality mode on its hidden layers.

    The initial weights depend on ``seed`` only (not on the mode); they are drawn inside
    ``torch.random.fork_rng``, so torch's global RNG is left as it was (``orthogonal`` also draws there).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if model == "mlp":
            hidden_layers = [nn.Linear(64, hidden), nn.Linear(hidden, hidden)]
            head = [nn.Linear(hidden, 10)]
            body: list[nn.Module] = []
        elif model == "cnn":
            hidden_layers = [nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 32, 3, padding=1)]
            head = [nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 10)]
            body = [nn.Unflatten(1, (1, 8, 8))]
        elif model == "cnn_patch":
            hidden_layers = [nn.Conv2d(1, 4, 2, stride=2), nn.Conv2d(4, 16, 2, stride=2)]
            head = [nn.Flatten(), nn.Linear(16 * 2 * 2, 10)]
            body = [nn.Unflatten(1, (1, 8, 8))]
        else:
            raise ValueError(f"model: expected one of {MODELS}, got {model!r}")
        if orthogonality == "gram_schmidt":
            for layer in hidden_layers:
                register_gram_schmidt(layer)
        elif orthogonality == "orthogonal":
            for layer in hidden_layers:
                register_orthogonal(layer)
        elif orthogonality not in ("none", "penalty", "conv_penalty"):
            raise ValueError(f"orthogonality: expected one of {ORTHOGONALITY}, got {orthogonality!r}")
        for layer in hidden_layers:
            body += [layer, _activation(activation)]
        return nn.Sequential(*body, *head)


def hidden_layers_of(model: nn.Sequential) -> list[nn.Module]:
    """The layers whose filters are orthogonalized: every Linear / Conv2d except the output layer."""
    return [m for m in model if isinstance(m, nn.Linear | nn.Conv2d)][:-1]


def hidden_input_sizes(model: nn.Sequential) -> list[tuple[int, ...] | None]:
    """The spatial input size of every hidden layer (None for a Linear), from one forward pass of a dummy
    digit; a convolution's matrix, hence Eq 11 for it, depends on it."""
    hidden = hidden_layers_of(model)
    sizes: dict[int, tuple[int, ...]] = {}
    hooks = [h.register_forward_pre_hook(lambda m, args, i=i: sizes.__setitem__(i, tuple(args[0].shape[2:])))
             for i, h in enumerate(hidden)]
    try:
        with torch.no_grad():
            model(torch.zeros(1, 64))
    finally:
        for hook in hooks:
            hook.remove()
    return [sizes[i] if isinstance(h, nn.Conv2d) else None for i, h in enumerate(hidden)]


def conv_matrix_penalty(hidden: list[nn.Module], sizes: list, lam: float) -> torch.Tensor:
    """Eq 11's penalty on the rows of every hidden layer's matrix: a convolution's every filter at every
    output position (input ``sizes``), a Linear's rows."""
    terms = [conv_orthogonality_penalty(h, size, lam=lam) if size is not None else orthogonality_penalty(h.weight, lam)
             for h, size in zip(hidden, sizes, strict=True)]
    return sum(terms[1:], terms[0])


def conv_matrix_defect(hidden: list[nn.Module], sizes: list) -> list[float]:
    """Relative Eq 11 defect of every hidden layer's matrix rows (a convolution's every filter at every shift)."""
    return [conv_orthogonality_defect(h, size).relative if size is not None
            else orthogonality_defect(h.weight).relative for h, size in zip(hidden, sizes, strict=True)]


def train_one(model: str, activation: str, orthogonality: str, lam: float, seed: int, *, epochs: int,
              lr: float, batch_size: int = 64, threads: int = 1) -> dict:
    """Train one network; returns test accuracy, final training loss, learned betas and the hidden layers'
    orthogonality defects (relative): ``defect`` of the filters flattened to rows, ``conv_defect`` of the
    rows of each layer's matrix (every filter at every shift; a Linear's rows).  ``lam`` is used by
    ``penalty`` and ``conv_penalty`` only.

    The run uses ``threads`` torch threads (restored afterwards): the float sums of a matmul depend on the
    thread count, and one thread is also the fastest for these tiny networks on a busy machine.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _train(model, activation, orthogonality, lam, seed, epochs=epochs, lr=lr, batch_size=batch_size)
    finally:
        torch.set_num_threads(before)


def _train(model: str, activation: str, orthogonality: str, lam: float, seed: int, *, epochs: int, lr: float,
           batch_size: int) -> dict:
    x_tr, y_tr, x_te, y_te = load_digits_split(seed)
    net = build_model(model, activation, orthogonality, seed=seed)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    loss_fn = nn.CrossEntropyLoss()
    hidden = nn.ModuleList(hidden_layers_of(net))
    sizes = hidden_input_sizes(net)
    t0 = time.perf_counter()
    net.train()
    for _ in range(epochs):
        perm = torch.randperm(len(x_tr), generator=gen)
        for s in range(0, len(x_tr), batch_size):
            idx = perm[s: s + batch_size]
            loss = loss_fn(net(x_tr[idx]), y_tr[idx])
            if orthogonality == "penalty":
                loss = loss + model_orthogonality_penalty(hidden, lam)
            elif orthogonality == "conv_penalty":
                loss = loss + conv_matrix_penalty(list(hidden), sizes, lam)
            opt.zero_grad()
            loss.backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        acc = (net(x_te).argmax(-1) == y_te).float().mean().item()
        train_loss = loss_fn(net(x_tr), y_tr).item()
        betas = [float(m.beta) for m in net if isinstance(m, BetaSwish)]
        defect = [orthogonality_defect(h.weight.flatten(1)).relative for h in hidden]
        conv_defect = conv_matrix_defect(list(hidden), sizes)
        # how a penalty lowers itself: orthogonal rows, or smaller ones (conv_penalty where Eq 11 cannot hold)
        filter_norm = [float(h.weight.flatten(1).norm(dim=1).mean()) for h in hidden]
    return {"seed": seed, "accuracy": acc, "train_loss": train_loss, "betas": betas, "defect": defect,
            "conv_defect": conv_defect, "filter_norm": filter_norm, "seconds": time.perf_counter() - t0}


def _train_item(item: tuple[str, str, str, float, int], **kwargs) -> dict:
    """:func:`train_one` of one ``(model, activation, orthogonality, lam, seed)``: a task of the engine."""
    return train_one(*item, **kwargs)


def paired_difference(a, b, confidence: float = 0.95) -> dict:
    """Paired comparison of ``a`` against ``b`` (one value per seed, in the same seed order).

    Returns ``n``, ``mean`` (of d = a - b), ``sd`` (of d), the two-sided ``confidence`` t-interval
    ``lo, hi`` = mean -+ t_{(1+confidence)/2, n-1} sd / sqrt(n) (scipy's Student t; None when n < 2),
    and ``better`` / ``worse`` / ``ties``: how many seeds have d > 0, d < 0, d = 0.
    """
    from scipy import stats

    a, b = [float(v) for v in a], [float(v) for v in b]
    if len(a) != len(b) or not a:
        raise ValueError(f"paired_difference: expected two equally long non-empty lists, got {len(a)} and {len(b)}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: expected a level in (0, 1), got {confidence}")
    d = [x - y for x, y in zip(a, b, strict=True)]
    n, mean = len(d), statistics.fmean(d)
    sd = statistics.stdev(d) if n > 1 else float("nan")
    if n > 1:
        half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * sd / math.sqrt(n)
        lo, hi = mean - half, mean + half
    else:
        lo = hi = None
    return {"n": n, "mean": mean, "sd": sd, "lo": lo, "hi": hi, "confidence": confidence,
            "better": sum(x > 0 for x in d), "worse": sum(x < 0 for x in d), "ties": sum(x == 0 for x in d)}


def _label(orthogonality: str, lam: float | None) -> str:
    return f"{orthogonality} lam={lam:g}" if orthogonality in ("penalty", "conv_penalty") else orthogonality


def _fmt_diff(c: dict) -> str:
    """'+0.48 [+0.10, +0.86] 5/5' in accuracy points; '(1 tie)' when some seeds tie."""
    ci = f" [{100 * c['lo']:+.2f}, {100 * c['hi']:+.2f}]" if c["lo"] is not None else ""
    ties = f" ({c['ties']} tie{'s' if c['ties'] > 1 else ''})" if c["ties"] else ""
    return f"{100 * c['mean']:+.2f}{ci} {c['better']}/{c['n']}{ties}"


def _within_noise(c: dict) -> bool:
    return c["lo"] is not None and c["lo"] <= 0 <= c["hi"]


def summarize(rows: list[dict]) -> list[dict]:
    """Paired-by-seed comparisons: every orthogonality configuration vs ``none`` (same model, activation),
    and swish vs relu (same model, orthogonality configuration)."""
    by = {(r["model"], r["activation"], r["orthogonality"], r["lam"]): r for r in rows}
    comparisons = []
    for (m, a, o, lam), r in by.items():
        base = by.get((m, a, "none", None))
        if o != "none" and base is not None:
            comparisons.append({"kind": "vs none", "model": m, "activation": a, "orthogonality": o, "lam": lam,
                                **paired_difference(r["accuracies"], base["accuracies"])})
    for (m, a, o, lam), r in by.items():
        relu = by.get((m, "relu", o, lam))
        if a == "swish" and relu is not None:
            comparisons.append({"kind": "swish vs relu", "model": m, "activation": "swish", "orthogonality": o,
                                "lam": lam, **paired_difference(r["accuracies"], relu["accuracies"])})
    return comparisons


def markdown_table(rows: list[dict], comparisons: list[dict], *, epochs: int, seeds: int) -> str:
    """One markdown table per network: accuracy (mean +- std) per activation, the paired difference vs
    ``none`` and swish - ReLU (accuracy points, 95% t-interval, seeds better of n), the defect of the
    flattened filters and, for a CNN, of the convolution matrix's rows (Eq 11 proper; '-' for a row recorded
    before that column existed)."""
    comp = {(c["kind"], c["model"], c["activation"], c["orthogonality"], c["lam"]): c for c in comparisons}
    rows_by = {(r["model"], r["activation"], r["orthogonality"], r["lam"]): r for r in rows}
    out = []
    for m in dict.fromkeys(r["model"] for r in rows):
        acts = [a for a in ACTIVATIONS if any(r["model"] == m and r["activation"] == a for r in rows)]
        configs = list(dict.fromkeys((r["orthogonality"], r["lam"]) for r in rows if r["model"] == m))
        head = ["orthogonality"]
        for a in acts:
            head += [f"{a} acc. %", f"{a}: minus none"]
        if len(acts) == 2:
            head.append("swish minus relu")
        conv = m != "mlp"  # a Linear's matrix rows are its rows: the two defects coincide
        head += ["defect (flattened filters)", "defect (conv matrix, Eq 11)"] if conv else ["defect"]
        out += [f"**{MODEL_NAMES[m]}**, {epochs} epochs, {seeds} seeds; test accuracy % (mean +- std), "
                "paired differences in points [95% t-interval] and seeds better/n", "",
                "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for o, lam in configs:
            cells = [_label(o, lam)]
            defects, conv_defects = [], []
            for a in acts:
                r = rows_by.get((m, a, o, lam))
                if r is None:
                    cells += ["-", "-"]
                    continue
                beta = f" (beta {r['beta']:.2f})" if r["beta"] is not None else ""
                cells.append(f"{100 * r['mean']:.2f} +- {100 * r['std']:.2f}{beta}")
                c = comp.get(("vs none", m, a, o, lam))
                cells.append(_fmt_diff(c) if c else "-")
                defects.append(r["defect"])
                conv_defects.append(r.get("conv_defect"))
            if len(acts) == 2:
                c = comp.get(("swish vs relu", m, "swish", o, lam))
                cells.append(_fmt_diff(c) if c else "-")
            cells.append(f"{statistics.fmean(defects):.1e}")
            if conv:
                known = None not in conv_defects
                cells.append(f"{statistics.fmean(conv_defects):.1e}" if known and conv_defects else "-")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def merge_results(previous: dict, rows: list[dict], *, argv: list[str], seconds: float, epochs: int,
                  seeds: int) -> dict:
    """``previous`` (a results JSON of :func:`main`) with ``rows`` merged in: a row of the same (model,
    activation, orthogonality, lambda) is replaced in place, others appended; comparisons and table are
    recomputed from the merged rows, and the run is recorded in ``updates`` (argv, seconds, rows replaced
    and added).  ``previous`` is not modified."""
    def key(r):
        return r["model"], r["activation"], r["orthogonality"], r["lam"]

    merged = list(previous["rows"])
    index = {key(r): i for i, r in enumerate(merged)}
    replaced, added = [], []
    for r in rows:
        if key(r) in index:
            merged[index[key(r)]] = r
            replaced.append(list(key(r)))
        else:
            index[key(r)] = len(merged)
            merged.append(r)
            added.append(list(key(r)))
    comparisons = summarize(merged)
    update = {"argv": argv, "torch": torch.__version__, "seconds": seconds, "replaced": replaced, "added": added}
    return {**previous, "rows": merged, "comparisons": comparisons,
            "table": markdown_table(merged, comparisons, epochs=epochs, seeds=seeds),
            "updates": [*previous.get("updates", []), update]}


def _parse_list(p: argparse.ArgumentParser, name: str, text: str, allowed: tuple[str, ...]) -> list[str]:
    vals = [v.strip() for v in text.split(",") if v.strip()]
    if not vals:
        p.error(f"--{name}: expected a comma-separated list from {allowed}, got {text!r}")
    for v in vals:
        if v not in allowed:
            p.error(f"--{name}: unknown {v!r}; choose from {allowed}")
    if len(set(vals)) != len(vals):
        p.error(f"--{name}: repeated entries in {text!r}")
    return vals


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help=f"CI mode: {QUICK['seeds']} seeds, {QUICK['epochs']} epochs, orthogonality "
                        f"{QUICK['orthogonality']} with lambda {QUICK['lams']} (explicit options still win)")
    p.add_argument("--model", default=None, help=f"comma-separated from {MODELS} (default both)")
    p.add_argument("--seeds", type=int, default=None, help=f"seeds per configuration (default {FULL['seeds']})")
    p.add_argument("--epochs", type=int, default=None, help=f"epochs per run (default {FULL['epochs']})")
    p.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lams", "--lam", default=None,
                   help=f"penalty weights, each its own configuration (default {FULL['lams']}; the paper: 1)")
    p.add_argument("--activations", default=None, help=f"comma-separated from {ACTIVATIONS}")
    p.add_argument("--orthogonality", default=None, help=f"comma-separated from {ORTHOGONALITY}")
    p.add_argument("--out", default=None, help="JSON results file (default: print only)")
    p.add_argument("--update", action="store_true",
                   help="merge into the existing --out file: rows of the same (model, activation, orthogonality, "
                        "lambda) are replaced, new rows appended, comparisons and table recomputed (same seeds, "
                        "epochs, lr and batch size needed)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--engine", choices=("serial", "dask"), default="serial",
                   help="dask: every (model, activation, orthogonality, seed) run is one task on a Dask cluster")
    p.add_argument("--workers", type=int, default=None, help="worker processes of a local Dask cluster")
    p.add_argument("--scheduler", default=None, help="address of a running Dask scheduler")
    args = p.parse_args(argv)
    defaults = QUICK if args.quick else FULL
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    models = _parse_list(p, "model", args.model, MODELS)
    acts = _parse_list(p, "activations", args.activations, ACTIVATIONS)
    orths = _parse_list(p, "orthogonality", args.orthogonality, ORTHOGONALITY)
    try:
        lams = [float(v) for v in str(args.lams).split(",") if v.strip()]
    except ValueError:
        p.error(f"--lams: expected comma-separated numbers, got {args.lams!r}")
    penalized = "penalty" in orths or "conv_penalty" in orths
    if penalized and (not lams or any(not (math.isfinite(v) and v > 0) for v in lams)):
        p.error(f"--lams: expected penalty weights > 0, got {args.lams!r}")
    if len(set(lams)) != len(lams):
        p.error(f"--lams: repeated values in {args.lams!r}")
    if args.seeds < 2:
        p.error(f"--seeds: expected >= 2 (the paired intervals need two seeds), got {args.seeds}")
    if args.epochs < 1:
        p.error(f"--epochs: expected >= 1, got {args.epochs}")
    if args.batch_size < 1:
        p.error(f"--batch-size: expected >= 1, got {args.batch_size}")
    if not (math.isfinite(args.lr) and args.lr > 0):
        p.error(f"--lr: expected a learning rate > 0, got {args.lr}")
    if args.engine == "serial" and (args.workers is not None or args.scheduler is not None):
        p.error("--workers/--scheduler: they apply to --engine dask only")
    if args.workers is not None and args.workers < 1:
        p.error(f"--workers: expected >= 1, got {args.workers}")
    previous = None
    if args.update:
        if not args.out or not Path(args.out).is_file():
            p.error(f"--update: expected an existing --out results file, got {args.out!r}")
        previous = json.loads(Path(args.out).read_text())
        old = previous.get("config", {})
        for key in ("seeds", "epochs", "lr", "batch_size"):
            if old.get(key) != getattr(args, key):
                p.error(f"--update: {args.out} has {key} = {old.get(key)!r}, this run {getattr(args, key)!r}; "
                        "the paired comparisons need the same setting")

    t0 = time.perf_counter()
    # the MLP's conv_penalty would be its penalty: not run twice
    configs = [(m, a, o, lam) for m in models for a in acts for o in orths
               for lam in (lams if o in ("penalty", "conv_penalty") else [None])
               if not (m == "mlp" and o == "conv_penalty")]
    if not configs:
        p.error("--orthogonality: conv_penalty applies to the CNNs only (for the MLP it is penalty)")
    items = [(m, a, o, lam if lam is not None else 0.0, seed) for (m, a, o, lam) in configs
             for seed in range(args.seeds)]
    from tqdm.auto import tqdm

    print(f"digits (1797 images, 30% test, split by seed), {', '.join(MODEL_NAMES[m] for m in models)}; "
          f"Adam lr {args.lr}, batch {args.batch_size}, {args.epochs} epochs, {args.seeds} seeds; "
          f"{len(configs)} configurations, {len(items)} runs, engine {args.engine}", flush=True)
    pending: dict[int, list[dict]] = {}
    rows: list[dict] = []

    def merge(acc: list, result: dict) -> list:
        # results come in items' order: a configuration is done when its last seed is merged
        acc.append(result)
        i = (len(acc) - 1) // args.seeds
        pending.setdefault(i, []).append(result)
        if len(pending[i]) == args.seeds:
            m, a, o, lam = configs[i]
            runs = pending.pop(i)
            accs = [r["accuracy"] for r in runs]
            row = {"model": m, "activation": a, "orthogonality": o, "lam": lam, "label": _label(o, lam),
                   "accuracies": accs, "mean": statistics.fmean(accs), "std": statistics.stdev(accs),
                   "defect": statistics.fmean(statistics.fmean(r["defect"]) for r in runs),
                   "conv_defect": statistics.fmean(statistics.fmean(r["conv_defect"]) for r in runs),
                   "beta": statistics.fmean(statistics.fmean(r["betas"]) for r in runs) if a == "swish" else None,
                   "seconds_per_run": statistics.fmean(r["seconds"] for r in runs), "runs": runs}
            rows.append(row)
            beta = f", beta {row['beta']:.2f}" if row["beta"] is not None else ""
            tqdm.write(f"  {m} {a:5s} {row['label']:23s} {100 * row['mean']:6.2f} +- {100 * row['std']:4.2f} %  "
                       f"(defect {row['defect']:.1e}, conv matrix {row['conv_defect']:.1e}{beta}; "
                       f"{row['seconds_per_run']:.1f} s/run)")
        return acc

    # every run is seeded on its own (weights, split, minibatches), so the table is the same on any engine
    with make_engine(args.engine, scheduler=args.scheduler, workers=args.workers) as engine:
        engine.fold(_train_item, items, merge=merge, init=[], progress=None if args.no_progress else "digits runs",
                    epochs=args.epochs, lr=args.lr, batch_size=args.batch_size)
    seconds = time.perf_counter() - t0
    run_argv = list(sys.argv[1:] if argv is None else argv)
    if previous is not None:
        result = merge_results(previous, rows, argv=run_argv, seconds=seconds, epochs=args.epochs,
                               seeds=args.seeds)
    else:
        comparisons = summarize(rows)
        table = markdown_table(rows, comparisons, epochs=args.epochs, seeds=args.seeds)
        result = {"argv": run_argv, "config": {**vars(args), "lams": lams}, "torch": torch.__version__,
                  "rows": rows, "comparisons": comparisons, "table": table, "seconds": seconds}
    print()
    print(result["table"])
    print(f"test accuracy of {len(items)} runs in {seconds:.0f} s")
    if args.out:
        from teachers.spec_io import atomic_write

        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out, lambda f: f.write(json.dumps(result, indent=1).encode()), name="--out")
        print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
