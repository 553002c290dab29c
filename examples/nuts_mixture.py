"""Fit a per-unit SMASO mixture's region priors pi and component means A by NUTS, regions enumerated.

docs/theory.md §3 (Eq 3): unit k is its own Gaussian mixture, ``t_k ~ Categorical(pi[k])``,
``x | t_k = r ~ Normal(A[k, r], sigma^2 I)`` (:func:`smaso.splines.mixture.unit_mixture_model`).  This script
draws a small synthetic dataset from known ``pi`` and ``A`` (one dataset per unit: the ``(N, K, D)`` shape the
model samples), then samples the posterior of ``(pi, A)`` with Pyro's NUTS while the discrete regions ``t``
are summed out exactly (``config_enumerate``: ``infer={"enumerate": "parallel"}``, ``max_plate_nesting=2``).
The MCMC goes to ArviZ with ``az.from_pyro`` (integer coordinates ``unit``, ``region``, ``feature``; the
observed ``x`` in ``observed_data``); the script prints ``az.summary`` (r_hat, ESS) and checks that every
posterior mean lies within ``--tolerance`` posterior SDs of the truth.

Priors: ``pi[k] ~ Dirichlet(1)``, ``A[k, r] ~ Normal(0, 3^2 I)``; sigma is known.  The mixture's labels are
exchangeable, so the chains start at one labelling taken from the data (means of the first-coordinate
quantile bins of each unit's x, ``init_to_value``); the true components are listed in that order too and far
enough apart (several sigma) that a chain does not switch labels.

Run ``python examples/nuts_mixture.py`` (2 chains x (500 warmup + 500 draws), N = 300) or ``--quick``
(2 chains x (100 + 100), N = 150: what ``tests/test_nuts_mixture.py`` runs).  Seeded; the seed is applied inside
:func:`inference.vq.seeded_rng`, so calling :func:`main` leaves the caller's global RNG state as it was.
"""

from __future__ import annotations

import argparse
import time

import arviz as az
import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.infer import MCMC, NUTS, config_enumerate
from pyro.infer.autoguide import init_to_value

from inference.vq import seeded_rng
from smaso.splines.mixture import unit_mixture_model

F64 = torch.float64
SIGMA = 0.5
PRIOR_SCALE = 3.0

# truth: K = 2 units, R = 3 regions, D = 2 features; components ordered by their first coordinate
TRUE_PI = torch.tensor([[0.5, 0.3, 0.2], [0.2, 0.3, 0.5]], dtype=F64)
TRUE_A = torch.tensor([[[-3.0, 0.0], [0.0, 2.0], [3.0, -1.0]],
                       [[-2.5, -2.0], [0.5, 1.0], [3.5, 0.5]]], dtype=F64)


def model(x: torch.Tensor, num_regions: int, sigma: float = SIGMA):
    """Priors on (pi, A) and the library's per-unit SMASO for the data ``x`` ``(N, K, D)``."""
    _, K, D = x.shape
    with pyro.plate("unit_priors", K, dim=-1):  # the same dim as the model's "units" plate (a name is one site)
        pi = pyro.sample("pi", dist.Dirichlet(torch.ones(num_regions, dtype=x.dtype, device=x.device)))
        A = pyro.sample("A", dist.Normal(torch.zeros((), dtype=x.dtype, device=x.device), PRIOR_SCALE)
                        .expand([num_regions, D]).to_event(2))
    return unit_mixture_model(A, pi, sigma, x)


def initial_means(x: torch.Tensor, num_regions: int) -> torch.Tensor:
    """A data-driven labelling: per unit, the mean of x in each quantile bin of the first coordinate ``(K, R, D)``."""
    order = x[..., 0].argsort(0)  # (N, K)
    sorted_x = torch.take_along_dim(x, order[..., None], dim=0)  # (N, K, D)
    return torch.stack([chunk.mean(0) for chunk in sorted_x.tensor_split(num_regions, dim=0)], 1)


def synthetic_data(num_examples: int) -> torch.Tensor:
    """``num_examples`` draws of the per-unit SMASO at the truth: ``x`` ``(N, K, D)`` (one dataset per unit)."""
    with torch.no_grad():
        return unit_mixture_model(TRUE_A, TRUE_PI, SIGMA, num_examples=num_examples)["x"]


def fit(x: torch.Tensor, num_regions: int, *, num_samples: int, warmup: int) -> MCMC:
    """One NUTS chain on :func:`model` with the regions enumerated, started at :func:`initial_means`."""
    init = {"pi": torch.full((x.shape[1], num_regions), 1.0 / num_regions, dtype=x.dtype, device=x.device),
            "A": initial_means(x, num_regions)}
    kernel = NUTS(config_enumerate(model), max_plate_nesting=2, jit_compile=False,
                  init_strategy=init_to_value(values=init))
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup, num_chains=1, disable_progbar=True)
    mcmc.run(x, num_regions)
    return mcmc


def to_arviz(mcmcs: list[MCMC], x: torch.Tensor) -> az.InferenceData:
    """``az.from_pyro`` of every chain (integer coordinates; ``x`` in ``observed_data``), concatenated on ``chain``.

    The chains run one after the other in this process (Pyro's ``num_chains > 1`` would fork workers), so
    each is its own ``MCMC``; ``az.concat(..., dim="chain")`` joins them.
    """
    N, K, D = x.shape
    R = TRUE_PI.shape[1]
    coords = {"unit": np.arange(K), "region": np.arange(R), "feature": np.arange(D), "example": np.arange(N)}
    dims = {"pi": ["unit", "region"], "A": ["unit", "region", "feature"], "x": ["example", "unit", "feature"]}
    # log_likelihood=False: the pointwise log-likelihood would need draws of the enumerated site t
    parts = [az.from_pyro(m, coords=coords, dims=dims, log_likelihood=False) for m in mcmcs]
    if len(parts) == 1:
        return parts[0]
    idata = az.concat(*[part.sel(chain=[0]).assign_coords(chain=[c]) for c, part in enumerate(parts)], dim="chain")
    return idata


def check_truth(idata: az.InferenceData, tolerance: float) -> dict:
    """Standardized errors ``(posterior mean - truth) / posterior sd`` of every entry of pi and A."""
    post = idata.posterior
    out = {}
    for name, truth in (("pi", TRUE_PI), ("A", TRUE_A)):
        v = post[name]
        z = (v.mean(("chain", "draw")).values - truth.numpy()) / v.std(("chain", "draw")).values
        out[name] = z
    worst = max(float(np.abs(z).max()) for z in out.values())
    return {"z": out, "max_abs_z": worst, "covered": worst < tolerance}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 chains x (100 warmup + 100 draws), N = 150 (CI)")
    p.add_argument("--num-examples", type=int, default=None, help="N per unit (default 300, quick 150)")
    p.add_argument("--num-samples", type=int, default=None, help="draws per chain (default 500, quick 100)")
    p.add_argument("--warmup", type=int, default=None, help="warmup steps per chain (default 500, quick 100)")
    p.add_argument("--chains", type=int, default=None, help="chains, one after the other (default 2; r_hat needs 2)")
    p.add_argument("--tolerance", type=float, default=4.0,
                   help="posterior means must lie within this many posterior SDs of the truth (default 4)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads during the run (default 1: the tensors are tiny and extra threads only add "
                        "overhead, ~10x on 2 shared cores); restored afterwards")
    p.add_argument("--plot", default=None, help="save an ArviZ trace plot of pi and A to this path")
    args = p.parse_args(argv)
    quick = {"num_examples": 150, "num_samples": 100, "warmup": 100, "chains": 2}
    full = {"num_examples": 300, "num_samples": 500, "warmup": 500, "chains": 2}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)

    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        with seeded_rng(args.seed):  # az.from_pyro runs the model once too: inside the scope
            x = synthetic_data(args.num_examples)
            mcmcs = [fit(x, TRUE_PI.shape[1], num_samples=args.num_samples, warmup=args.warmup)
                     for _ in range(args.chains)]
            idata = to_arviz(mcmcs, x)
    finally:
        torch.set_num_threads(threads)
    elapsed = time.perf_counter() - start
    summary = az.summary(idata, var_names=["pi", "A"], round_to=3)
    truth = check_truth(idata, args.tolerance)
    with np.printoptions(precision=2, suppress=True):
        print(f"NUTS on the per-unit SMASO (K, R, D = {tuple(TRUE_A.shape)}, N = {args.num_examples} per unit, "
              f"regions enumerated): {args.chains} chain(s) x ({args.warmup} warmup + {args.num_samples} draws)")
        print(summary.to_string())
        for name, z in truth["z"].items():
            print(f"(posterior mean - truth) / posterior sd of {name}:\n{z}")
        verdict = "within" if truth["covered"] else "NOT within"
        print(f"every posterior mean is {verdict} {args.tolerance:g} posterior SDs of the truth "
              f"(largest |z| = {truth['max_abs_z']:.2f}); max r_hat = {summary['r_hat'].max():.3f}, "
              f"min ess_bulk = {summary['ess_bulk'].min():.0f}")
    print(f"time: {elapsed:.1f} s ({'quick' if args.quick else 'full'} mode)")
    if args.plot:
        from smaso.plots.vq import plot_arviz

        plot_arviz(az.plot_trace, idata, var_names=["pi", "A"], path=args.plot)
    return {"idata": idata, "summary": summary, "elapsed": elapsed, **truth}


if __name__ == "__main__":
    main()
