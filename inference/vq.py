"""Hard, soft and beta-VQ of a max-affine spline layer as inference in its Pyro mixture model (``docs/theory.md``
§3, seed ``003``).

A layer with slopes ``A`` ``(K, R, D)`` and offsets ``B`` ``(K, R)`` scores the regions, ``s[n, k, r] = <A[k, r, :],
x[n]> + B[k, r]``; region probabilities ``t[n, k, :]`` on the simplex give the unit outputs ``z[n, k] = sum_r t s``.
Hard VQ (Eq 2) is ``t = one_hot(argmax_r s)``, soft VQ (Eq 5-6) ``t = softmax_r(s)`` and beta-VQ (Eq 7-9)
``t = softmax_r(eta s)``, ``eta = beta / (1 - beta)``, the maximizer of ``beta <t, s> + (1 - beta) H(t)`` (beta =
1/2 soft, 1 hard, 0 uniform); for the ReLU MASO the outputs are ReLU, SiLU and swish (Table 1).  Their closed
forms are :mod:`smaso.splines.maso`'s; here they are inference on the per-unit SMASO (Eq 3,
:func:`smaso.splines.mixture.unit_mixture_model` with ``pi = pi_from_offsets(A, B, sigma)``, whose posterior is
``softmax(s / sigma^2)``): :func:`vq_map` (MAP), :func:`svi_vq` (tempered SVI), :func:`posterior_region_draws` and
:meth:`VQFit.draws` (draws as ArviZ ``InferenceData``; :func:`region_summary` gives per-region probabilities).
``beta`` is a number in [0, 1] or a ``(K,)`` tensor.

No call changes the caller's global RNG state (``seed=`` runs inside :func:`inference.rng.seeded_rng`); every
tensor created here is on ``A``'s device in ``A``'s dtype (``x`` is moved there).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import arviz as az
import numpy as np
import pyro
import pyro.distributions as dist
import torch
import xarray as xr
from pyro import poutine
from pyro.infer import SVI, TraceEnum_ELBO, config_enumerate, infer_discrete
from torch.distributions import constraints

from inference.factorial import _check_layer, _check_positive, _guide_draws
from inference.mixture import check_unit_beta, log_pi_from_offsets, region_scores, unit_mixture_model, vq_outputs
from inference.rng import check_seed, seeded_rng

if TYPE_CHECKING:
    import pandas as pd

# seeded_rng lives in inference.rng; it stays importable from here
__all__ = ["VQFit", "posterior_region_draws", "region_summary", "seeded_rng", "svi_vq", "vq_map"]

PARAM_NAME = "vq_region_probs"  # the guide's pyro.param
_CATEGORICAL = ("labels", "one_hot")


def _check_categorical(categorical: object) -> None:
    if categorical not in _CATEGORICAL:
        raise ValueError(f"categorical: expected one of {_CATEGORICAL}, got {categorical!r}")


# ---------------------------------------------------------------------- inference on the Pyro model
def vq_map(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, sigma: float | torch.Tensor = 1.0) -> torch.Tensor:
    """Hard VQ as MAP inference: ``infer_discrete(temperature=0)`` on the per-unit SMASO.

    The model is :func:`~smaso.splines.mixture.unit_mixture_model` with ``pi = pi_from_offsets(A, B, sigma)``;
    its MAP does not depend on sigma.

    :returns: one-hot region assignments ``(N, K, R)`` (equal to :func:`~smaso.splines.maso.hard_regions` except at ties
        within rounding, where either region gives the same output).
    """
    _check_layer(A, B, x)
    log_pi = log_pi_from_offsets(A, B, sigma)
    model = infer_discrete(config_enumerate(unit_mixture_model), first_available_dim=-3, temperature=0)
    with torch.no_grad():
        t = model(A, None, sigma, x.to(device=A.device, dtype=A.dtype), log_pi=log_pi)["t"]
    return torch.nn.functional.one_hot(t, A.shape[1]).to(A.dtype)


def _tempered_sigma(A: torch.Tensor, beta: float | torch.Tensor) -> torch.Tensor:
    """sigma with sigma^2 = 1/eta per unit, for 0 < beta < 1."""
    b = check_unit_beta(beta, A.shape[0], A.dtype).to(device=A.device, dtype=A.dtype)
    if bool((b <= 0).any()) or bool((b >= 1).any()):
        raise ValueError(f"beta: posterior draws need 0 < beta < 1 (beta = 1 is the deterministic hard VQ, "
                         f"see vq_map; beta = 0 is uniform), got {b.tolist()}")
    return ((1 - b) / b).sqrt()


def posterior_region_draws(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, num_draws: int = 500,
                           num_chains: int = 2, beta: float | torch.Tensor = 0.5, seed: int | None = None, *,
                           categorical: str = "labels") -> az.InferenceData:
    """Exact draws of the region variables from p(t | x) at ``sigma^2 = 1/eta`` (``infer_discrete(temperature=1)``).

    The per-unit SMASO with ``pi = pi_from_offsets(A, B, sigma)`` and ``sigma^2 = 1/eta`` has the
    posterior ``softmax(eta s)``: beta-VQ draws (soft VQ at beta = 1/2), from one model call under a
    ``"particles"`` plate (dim -3).

    :param num_draws: draws per chain.
    :param num_chains: independent chains (``az.summary``'s r_hat needs at least 2).
    :param beta: in (0, 1), a number or ``(K,)``.
    :param seed: the draws' seed (:func:`~inference.rng.seeded_rng`); None: a fresh seed from OS entropy.
    :param categorical: ``"labels"``: ``posterior["t"]`` ``(chain, draw, example, unit)`` int64;
        ``"one_hot"``: ``posterior["t"]`` ``(chain, draw, example, unit, region)`` indicators (``az.summary``
        means = per-region probabilities).
    :returns: ``InferenceData`` with ``posterior["t"]`` and ``observed_data["x"]`` ``(example, feature)``;
        integer coordinates.
    """
    _check_layer(A, B, x)
    _check_positive(num_draws=num_draws, num_chains=num_chains)
    _check_categorical(categorical)
    check_seed(seed)
    sigma = _tempered_sigma(A, beta)
    log_pi = log_pi_from_offsets(A, B, sigma)
    total = num_draws * num_chains
    xx = x.to(device=A.device, dtype=A.dtype)

    def particles(xx: torch.Tensor) -> dict[str, torch.Tensor]:
        with pyro.plate("particles", total, dim=-3):
            return unit_mixture_model(A, None, sigma, xx, log_pi=log_pi)

    sampler = infer_discrete(config_enumerate(particles), first_available_dim=-4, temperature=1)
    with seeded_rng(seed, A.device), torch.no_grad():
        t = sampler(xx)["t"]  # (total, N, K)
    t = t.expand(total, x.shape[0], A.shape[0]).reshape(num_chains, num_draws, x.shape[0], A.shape[0])
    return _inference_data(t, x, A.shape[1], categorical)


def _inference_data(t: torch.Tensor, x: torch.Tensor, num_regions: int, categorical: str) -> az.InferenceData:
    """``InferenceData`` of region draws ``t`` ``(chain, draw, example, unit)``: integer coordinates, the
    categorical variable as labels or one-hot, ``observed_data["x"]``."""
    n, k = t.shape[2], t.shape[3]
    coords = {"example": np.arange(n), "unit": np.arange(k), "feature": np.arange(x.shape[1])}
    dims = {"t": ["example", "unit"], "x": ["example", "feature"]}
    values = t.cpu().numpy()
    if categorical == "one_hot":
        values = np.eye(num_regions, dtype=np.int8)[values]  # (chain, draw, example, unit, region)
        coords["region"] = np.arange(num_regions)
        dims["t"] = ["example", "unit", "region"]
    idata = az.from_dict(posterior={"t": values}, observed_data={"x": x.detach().cpu().numpy()},
                         coords=coords, dims=dims)
    idata.posterior["t"].attrs.update(num_categories=int(num_regions), categorical=categorical)
    return idata


def region_summary(idata: az.InferenceData, var_name: str = "t", num_categories: int | None = None,
                   **summary_kwargs: Any) -> pd.DataFrame:
    """``az.summary`` of a categorical posterior variable as per-category probabilities.

    The labels ``(chain, draw, ...)`` (or one-hot indicators with a ``region`` dim) become indicators
    ``1[t == r]`` with a named ``region`` dimension (integer coordinates ``0..R-1``); their summary rows
    ``t[example, unit, region]`` give the posterior probability of each region (``mean``), ``mcse_mean``,
    ``ess_bulk`` / ``ess_tail`` and ``r_hat`` (pass ``kind="diagnostics"`` / ``"stats"`` for less).  Constant
    indicators (a region drawn always or never) get NaN r_hat, without NumPy's RuntimeWarnings.

    :param idata: ``InferenceData`` from :func:`posterior_region_draws` or :meth:`VQFit.draws`.
    :param num_categories: R; default ``attrs["num_categories"]`` of the variable, else ``max + 1``.
    :returns: the ``pandas.DataFrame`` of ``az.summary``.
    """
    post = getattr(idata, "posterior", None)
    if post is None or var_name not in post:
        raise ValueError(f"idata: expected InferenceData with posterior[{var_name!r}]")
    t = post[var_name]
    if "region" not in t.dims:
        if t.dtype.kind not in "iu":
            raise ValueError(f"posterior[{var_name!r}]: expected integer labels or one-hot with a 'region' dim, "
                             f"got dtype {t.dtype}")
        R = num_categories or int(t.attrs.get("num_categories", int(t.max()) + 1))
        values = np.eye(R, dtype=np.int8)[t.values]
        dims = [*t.dims, "region"]
        coords = {d: t[d].values for d in t.dims if d in t.coords}
        coords["region"] = np.arange(R)
        t = xr.DataArray(values, dims=dims, coords=coords, name=var_name)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning, module="numpy")  # NaN r_hat of constants
        warnings.filterwarnings("ignore", category=RuntimeWarning, module="arviz")
        return az.summary(t.astype(np.float64).to_dataset(name=var_name), **summary_kwargs)


@dataclass
class VQFit:
    """Result of :func:`svi_vq`.

    :ivar probs: fitted region probabilities q ``(N, K, R)`` (the guide's ``pyro.param``).
    :ivar outputs: unit outputs ``sum_r q s`` ``(N, K)``.
    :ivar losses: the tempered loss ``-E_q[eta log p(t, x)] - H(q)`` per step.
    :ivar eta: the tempering (number or ``(K,)``).
    """

    probs: torch.Tensor
    outputs: torch.Tensor
    losses: list[float]
    eta: float | torch.Tensor
    x: torch.Tensor = field(repr=False)

    def draws(self, num_draws: int = 500, num_chains: int = 2, seed: int | None = None, *,
              categorical: str = "labels") -> az.InferenceData:
        """Region draws from the fitted mean-field guide (``Predictive`` over the guide), as ``InferenceData``.

        :param seed: the draws' seed (:func:`~inference.rng.seeded_rng`); None: a fresh seed from OS entropy.
        :param categorical: ``"labels"`` or ``"one_hot"``, as in :func:`posterior_region_draws`.
        :returns: ``posterior["t"]`` ``(chain, draw, example, unit)`` (one-hot: ``..., region``) and
            ``observed_data["x"]``.
        """
        _check_positive(num_draws=num_draws, num_chains=num_chains)
        _check_categorical(categorical)
        check_seed(seed)
        t = _guide_draws(self.probs, num_draws, num_chains, seed)
        return _inference_data(t, self.x, self.probs.shape[-1], categorical)


def svi_vq(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor, beta: float | torch.Tensor = 0.5, *,
           num_steps: int = 300, lr: float = 0.1,
           tempering: str = "scale", seed: int | None = 0, progress: bool = False) -> VQFit:
    """Soft / beta-VQ as variational inference: SVI on the per-unit SMASO with a mean-field categorical guide.

    Guide: ``q = pyro.param("vq_region_probs", uniform (N, K, R), constraint=simplex)``, site ``"t"`` ~
    ``Categorical(q)`` under the model's plates, enumerated (``TraceEnum_ELBO(max_plate_nesting=2)``
    computes the expectation over q exactly: no score-function noise).  Objective, with eta = beta/(1-beta):

    - ``tempering="scale"``: the model at sigma = 1 (``pi = pi_from_offsets(A, B, 1)``) under
      ``poutine.scale(scale=eta)``: maximizes ``E_q[eta log p(t, x)] + H(q)``, optimum ``q = softmax(eta s)``;
    - ``tempering="likelihood"``: the unscaled model at ``sigma^2 = 1/eta`` with ``pi = pi_from_offsets(A, B,
      sigma)``: the ordinary ELBO, whose optimum is the posterior ``softmax(eta s)`` too.

    Adam (``lr``) for ``num_steps`` steps from the uniform q.  Any previous value of the guide's param is
    replaced; the rest of Pyro's param store is left alone.

    :param beta: in [0, 1), a number or ``(K,)`` (beta = 1 is hard VQ: use :func:`vq_map`; the
        likelihood tempering needs beta > 0).
    :param seed: applied inside :func:`~inference.rng.seeded_rng` around the fit (itself deterministic: the guide
        is enumerated and starts uniform).
    :param progress: show a tqdm bar over the SVI steps (off by default, so notebooks and logs stay clean).
    """
    _check_layer(A, B, x)
    if tempering not in ("scale", "likelihood"):
        raise ValueError(f"tempering: expected 'scale' or 'likelihood', got {tempering!r}")
    _check_positive(num_steps=num_steps)
    if not lr > 0:
        raise ValueError(f"lr: expected a positive learning rate, got {lr!r}")
    check_seed(seed)
    b = check_unit_beta(beta, A.shape[0], A.dtype).to(device=A.device, dtype=A.dtype)
    if bool((b >= 1).any()):
        raise ValueError("beta: SVI needs beta < 1 (eta = beta/(1-beta) is infinite at 1; beta = 1 is the hard VQ, "
                         "computed exactly by vq_map)")
    eta = b / (1 - b)
    x = x.to(device=A.device, dtype=A.dtype)
    n, (K, R, _) = x.shape[0], A.shape
    sigma = 1.0 if tempering == "scale" else _tempered_sigma(A, b)
    log_pi = log_pi_from_offsets(A, B, sigma)
    model = poutine.scale(lambda xx: unit_mixture_model(A, None, sigma, xx, log_pi=log_pi),
                          scale=eta if tempering == "scale" else 1.0)

    def guide(xx: torch.Tensor) -> None:
        q = pyro.param(PARAM_NAME, lambda: torch.full((n, K, R), 1.0 / R, dtype=A.dtype, device=A.device),
                       constraint=constraints.simplex)
        with pyro.plate("data", n, dim=-2), pyro.plate("units", K, dim=-1):
            pyro.sample("t", dist.Categorical(probs=q), infer={"enumerate": "parallel"})

    store = pyro.get_param_store()
    if PARAM_NAME in store:
        del store[PARAM_NAME]
    steps = range(num_steps)
    if progress:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc="SVI (beta-VQ)")
    with seeded_rng(seed, A.device):
        # pyro.optim builds its torch.optim wrappers at import, so mypy sees no Adam
        svi = SVI(model, guide, pyro.optim.Adam({"lr": lr}), TraceEnum_ELBO(max_plate_nesting=2))  # type: ignore[attr-defined]
        losses = [svi.step(x) for _ in steps]
    probs = pyro.param(PARAM_NAME).detach().clone()
    return VQFit(probs=probs, outputs=vq_outputs(probs, region_scores(A, B, x)), losses=losses,
                 eta=float(eta) if eta.dim() == 0 else eta, x=x)
