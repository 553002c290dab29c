"""Exact, independent draws of every latent event from p(z | x), as ArviZ ``InferenceData`` (``docs/theory.md``
§1.13): forward filtering, backward sampling.

Trees (:mod:`inference.sum_product`'s upward pass; messages in the layout ``(R_l, n, M_l)``): the label is drawn
from p(y | x); then, level by level, each child from

- top-down: p(z_c = k | z_a = j, x) proportional to P(z_c = k | z_a = j) phi_c(k);
- bottom-up: the configuration of a parent's children (then split into one event per child) from
  p(config | z_a = j, x) proportional to conf_a(config) 1[lookup_a(config) = j].

Any other ladder (regions of several parents, or children drawn jointly by productions): ancestral sampling on
the junction tree of :mod:`inference.junction_tree`.  Every region of a clique's separator is eliminated after its
region v, so in reverse elimination order each v is drawn from p(z_v | separator, x) proportional to exp of the
clique's upward table (:meth:`~inference.junction_tree.JunctionTree.conditional`) at the separator's drawn events:
the MAP's traceback with a draw in place of the argmax.

Every uniform is drawn up front (one per region and draw; bottom-up trees use that of a parent's first child
for its children's configuration), so the draws depend only on the seed and the device, not on the size of
the passes (bounded by ``_CHUNK_ELEMENTS`` float64 values per temporary).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from teachers.emission import OneHotEmission
from teachers.ladder import TOPDOWN, Ladder
from teachers.sampling import _count

from ._checks import check_device, check_ladder, raise_impossible
from .junction_tree import MAX_CLIQUE, JunctionTree, _factors
from .sum_product import TreePlan, Upward, leaf_factors, tree_plan, upward

if TYPE_CHECKING:
    import arviz as az

    from teachers.elimination import _Factor

__all__ = ["posterior_event_draws"]

# float64 values of the largest temporary of one pass of draws (~256 MiB)
_CHUNK_ELEMENTS = 2**25


def posterior_event_draws(ladder: Ladder, x: torch.Tensor, num_draws: int = 500, seed: int = 0, *,
                          num_chains: int = 2, device: torch.device | str | None = None, onehot: bool = True,
                          max_clique: int = MAX_CLIQUE) -> az.InferenceData:
    """Exact, independent draws of every latent event from p(z | x) (forward filtering, backward sampling;
    module docstring), on any ladder.

    Every draw is an exact sample of the joint posterior, so the draws' frequencies converge to the marginals
    p(z_alpha | x) of :func:`inference.posterior.posterior` at rate 1/sqrt(draws), and chains are independent
    (``az.summary``'s ``r_hat`` ~ 1, ``ess`` ~ the number of draws).

    :param ladder: the ladder (a tree, or any region graph within ``max_clique``).
    :param x: one observed input ``(R_d, dim)`` or a batch ``(N, R_d, dim)``.
    :param num_draws: draws per chain (>= 1).
    :param seed: seed of a private ``torch.Generator`` on the computation's device (every global RNG state is
        untouched); the same seed gives the same draws on the same device (float32 and float64 inputs give the
        same draws).
    :param num_chains: independent chains (>= 1; ``r_hat`` needs 2).
    :param device: where to compute (default: x's device); every tensor is created there.
    :param onehot: also store the per-level one-hot indicators (below); False saves their memory
        (``draws x examples x sum_l R_l M_l`` bytes).
    :param max_clique: a ladder that is not a tree: the largest clique table allowed (:mod:`inference.junction_tree`).
    :returns: ``arviz.InferenceData`` with

        - ``posterior["z"]`` ``(chain, draw, example, region)`` int64, one entry per region in global order;
          coordinate ``region`` is the integer global index, with the non-index coordinates ``region_name`` (the
          ladder's names, ``"0.0"`` is the label y) and ``level``.  The labels are nominal, so ``z`` is a
          non-index *coordinate* of the posterior (attrs ``kind="categorical"``, ``num_events``), not a data
          variable: ``idata.posterior["z"]`` reaches it, and ``az.summary`` skips it;
        - ``posterior["z_onehot_<l>"]`` ``(chain, draw, example, region_<l>, event_<l>)`` uint8 for each level l
          that x leaves latent (when ``onehot``; ``event_<l>`` runs over the level's largest event count):
          indicators whose means, as ``az.summary`` reports them, are the per-event posterior probabilities
          ``p(z_alpha = k | x)`` with MCSE and ESS; ``region_<l>`` holds the global indices of the level's regions;
        - ``observed_data["z_onehot_<l>"]`` ``(example, region_<l>, event_<l>)`` uint8 for each level that x
          determines by construction (one-hot leaves, and bottom-up every level above
          them), when ``onehot``: the same in every draw, so they are data, not posterior draws (a constant draw
          has r_hat 0/0, which ArviZ reports as NaN with NumPy's "invalid value" ``RuntimeWarning``);
        - ``observed_data["x"]`` ``(example, leaf, feature)`` float64, ``leaf`` the integer leaf index with the
          non-index coordinate ``leaf_name``.
    :raises ValueError: bad arguments, or an example of probability 0 under the ladder.

    Summaries (``import arviz as az``)::

        az.summary(idata)                                # every z_onehot_<l>: p(z_alpha = k | x), MCSE, ESS, r_hat
        az.summary(idata, var_names=["z_onehot_0"])      # the label y's posterior p(y | x) only
        az.summary(idata, var_names=["z_onehot_"], filter_vars="like", kind="stats")   # means and HDIs only
        idata.posterior["z"].sel(region=0)               # the label's draws themselves, (chain, draw, example)

    An event that x leaves latent but whose posterior probability is 0 or 1 for this x (or is never drawn) still
    has a constant indicator, whose ``r_hat`` ArviZ reports as NaN with NumPy's "invalid value"
    ``RuntimeWarning``s; wrap the call in :func:`smaso.plots.quiet_arviz` to silence them.  With ``onehot=False``,
    or when x determines every level (bottom-up with one-hot leaves), the posterior holds no data variable to
    summarise (only the coordinate ``z``, which keeps every region's draws).
    """
    check_ladder(ladder)
    if isinstance(x, torch.Tensor) and x.dim() == 2:
        x = x[None]
    ladder.emission.check_input(x, "x")
    num_draws, num_chains = _count(num_draws, "num_draws"), _count(num_chains, "num_chains")
    seed = _count(seed, "seed", 0)
    if x.shape[0] == 0:
        raise ValueError("x: expected at least one example, got 0")
    total = num_draws * num_chains
    dev = check_device(device, x)
    x = x.detach().to(dev)
    n = x.shape[0]
    up = jt = None
    # the tree draws take each child from P(z_c | z_a) alone; jointly drawn children are drawn on the junction tree
    tree = ladder.is_tree() and ladder.productions is None
    if tree:
        plan = tree_plan(ladder, dev)
        up = upward(plan, *leaf_factors(plan, x), keep=True)
        scaled = up.log_z
        if bool(torch.isneginf(scaled).any()):  # impossible, or underflowed: the log-space draws decide
            up = None
    if up is None:
        try:
            jt = JunctionTree(ladder, max_clique)
        except ValueError:  # beyond max_clique: on a tree the scaled pass's verdict stands
            if tree:
                raise_impossible(scaled)
            raise
        psi, jt_up, _ = jt.calibrate(_factors(ladder, x, dev, jt.max_clique), n, down=False)
        raise_impossible(jt.log_z(jt_up, n))
    # every uniform is drawn up front, in one call, so the draws depend only on the seed
    gen = torch.Generator(device=dev).manual_seed(seed)
    u = torch.rand(total, n, ladder.total_regions, generator=gen, dtype=torch.float64, device=dev)
    if jt is not None:
        draws = _junction_draws(jt, psi, jt_up, u)
    else:
        assert up is not None  # no junction tree: the tree pass stood
        draws = _tree_draws(plan, up, u)
    z = draws.reshape(num_chains, num_draws, n, ladder.total_regions).cpu().numpy()
    return _event_inference_data(ladder, z, x.detach().cpu().double().numpy(), onehot)


# ---------------------------------------------------------------------- inverse-CDF draws
def _cdf(w: torch.Tensor, log: bool = False) -> torch.Tensor:
    """Normalized cumulative probabilities along the last dim (last entry exactly 1) of weights ``w`` (or of
    log-weights when ``log``).  Rows that are entirely impossible (conditioning on an event of probability 0)
    become uniform: they are never used, since such an event is never drawn."""
    if log:
        dead = torch.isneginf(w).all(-1, keepdim=True)
        w = torch.where(dead, 0.0, w)
        w = (w - w.amax(-1, keepdim=True)).exp()
    else:
        w = torch.where((w > 0).any(-1, keepdim=True), w, 1.0)
    c = w.cumsum(-1)
    return c / c[..., -1:]


def _search(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draws: ``cdf`` ``(..., m)``, uniforms ``u`` ``(...)``; an event of probability 0 has an empty
    interval of the cdf, so it is never drawn."""
    m = cdf.shape[-1]
    return torch.searchsorted(cdf.contiguous(), u[..., None].contiguous(), right=True)[..., 0].clamp_(max=m - 1)


def _step(per_draw: int) -> int:
    """Draws per pass when one draw needs ``per_draw`` values: the passes stay within ``_CHUNK_ELEMENTS``."""
    return max(1, _CHUNK_ELEMENTS // max(1, per_draw))


# ---------------------------------------------------------------------- trees
def _tree_draws(plan: TreePlan, up: Upward, u: torch.Tensor) -> torch.Tensor:
    """``z`` ``(T, n, total_regions)`` by backward sampling down the tree from the kept upward pass."""
    lad = plan.ladder
    t, n, _ = u.shape
    off = lad.level_offsets
    z = torch.empty(u.shape, dtype=torch.int64, device=u.device)
    z[:, :, 0] = _search(_cdf(up.label)[None].expand(t, -1, -1), u[:, :, 0])
    for l in range(1, plan.depth + 1):
        R, M = plan.R[l], plan.M[l]
        if plan.mode == TOPDOWN:
            # p(z_c = k | z_a = j, x) ~ P(k | j) phi_c(k): the table row of each drawn parent event times phi_c
            rows = plan.T[l].reshape(R * plan.M[l - 1], M)
            base = torch.arange(R, device=u.device) * plan.M[l - 1]
            phi = up.phi[l].transpose(0, 1)  # (n, R, M)
            zp = z[:, :, off[l - 1]: off[l]].index_select(2, plan.parent[l])  # (T, n, R)
            step = _step(n * R * M)
            for s in range(0, t, step):
                e = min(t, s + step)
                w = rows[base + zp[s:e]] * phi  # (T_pass, n, R, M)
                z[s:e, :, off[l]: off[l + 1]] = _search(_cdf(w), u[s:e, :, off[l]: off[l + 1]])
            continue
        for g, conf in zip(plan.groups[l - 1], up.conf[l - 1], strict=True):
            G, K = conf.shape[0], conf.shape[2]
            regions = torch.arange(G, device=u.device) if g.regions is None else g.regions
            kids = (torch.arange(G * len(g.sizes), device=u.device) if g.children is None else g.children
                    ).view(G, len(g.sizes)) + off[l]
            zp = z[:, :, off[l - 1]: off[l]].index_select(2, regions)  # (T, n, G)
            cw = conf.transpose(0, 1)  # (n, G, K)
            lookup = g.index[:, 0, :]  # (G, K)
            step = _step(n * G * K)
            for s in range(0, t, step):
                e = min(t, s + step)
                w = torch.where(lookup == zp[s:e, ..., None], cw, 0.0)  # (T_pass, n, G, K)
                code = _search(_cdf(w), u[s:e].index_select(2, kids[:, 0]))  # (T_pass, n, G)
                for c in range(len(g.sizes) - 1, -1, -1):  # the last child is the least significant digit
                    z[s:e].index_copy_(2, kids[:, c], code % g.sizes[c])
                    code = code // g.sizes[c]
    return z


# ---------------------------------------------------------------------- any ladder: the junction tree
def _junction_draws(jt: JunctionTree, psi: list[torch.Tensor], up: list[_Factor], u: torch.Tensor) -> torch.Tensor:
    """``z`` ``(T, n, total_regions)`` by ancestral sampling in reverse elimination order (module docstring)."""
    t, n, _ = u.shape
    z = torch.empty(u.shape, dtype=torch.int64, device=u.device)
    ar = torch.arange(n, device=u.device)
    for k in reversed(range(len(jt.cliques))):
        c = jt.cliques[k]
        m = jt.sizes[c[0]]
        tab = jt.conditional(k, psi, up, n).movedim(1, -1).reshape(n, -1, m)  # (n, separator codes, m_v)
        step = _step(n * m)
        for s in range(0, t, step):
            e = min(t, s + step)
            code = torch.zeros(e - s, n, dtype=torch.int64, device=u.device)
            for v in c[1:]:  # mixed radix, the first separator region most significant
                code = code * jt.sizes[v] + z[s:e, :, v]
            z[s:e, :, c[0]] = _search(_cdf(tab[ar, code], log=True), u[s:e, :, c[0]])
    return z


# ---------------------------------------------------------------------- ArviZ
def _levels_x_determines(ladder: Ladder) -> list[int]:
    """The levels whose events the inputs x determine by the ladder's construction, whatever its tables: with
    one-hot leaves (x_r = one-hot(z_r)) the leaves, and bottom-up, where each region above them is the lookup of
    its children's events, every level; otherwise none (Gaussian or custom leaves leave every event latent).

    :param ladder: the ladder.
    :returns: level indices in increasing order (the leaves are level ``ladder.depth``).
    """
    if not isinstance(ladder.emission, OneHotEmission):
        return []
    return [ladder.depth] if ladder.mode == TOPDOWN else list(range(ladder.depth + 1))


def _event_inference_data(ladder: Ladder, z: np.ndarray, x: np.ndarray, onehot: bool) -> az.InferenceData:
    """The ``InferenceData`` of :func:`posterior_event_draws` from ``z`` ``(chain, draw, example, region)``."""
    import arviz as az

    off = ladder.level_offsets
    names = ladder.region_names()
    n, regions = z.shape[2], z.shape[3]
    posterior = {"z": z}
    coords = {"example": np.arange(n), "region": np.arange(regions), "leaf": np.arange(regions - off[-2]),
              "feature": np.arange(x.shape[2])}
    dims = {"z": ["example", "region"], "x": ["example", "leaf", "feature"]}
    observed_data = {"x": x}
    if onehot:
        determined = _levels_x_determines(ladder)
        for l in range(ladder.depth + 1):
            m = ladder.events[l]
            indicators = (z[..., off[l]: off[l + 1], None] == np.arange(m)).astype(np.uint8)
            if l in determined:  # the same in every draw, by construction: data, not a posterior draw
                observed_data[f"z_onehot_{l}"] = indicators[0, 0]
            else:
                posterior[f"z_onehot_{l}"] = indicators
            coords[f"region_{l}"] = np.arange(off[l], off[l + 1])
            coords[f"event_{l}"] = np.arange(m)
            dims[f"z_onehot_{l}"] = ["example", f"region_{l}", f"event_{l}"]
    idata = az.from_dict(posterior=posterior, observed_data=observed_data, coords=coords, dims=dims)
    level = np.repeat(np.arange(ladder.depth + 1), ladder.num_regions)
    post = idata.posterior
    # the labels are nominal (a mean or HDI of an event index means nothing): a non-index coordinate, which
    # ``posterior["z"]`` still reaches and ``az.summary`` (over data variables only) skips
    labels = post["z"].assign_attrs(kind="categorical", num_events=list(ladder.events))
    post = post.drop_vars("z").assign_coords(z=labels)
    idata.posterior = post.assign_coords(region_name=("region", names), level=("region", level))
    idata.observed_data = idata.observed_data.assign_coords(leaf_name=("leaf", names[off[-2]:]))
    return idata
