"""Reference copy of ``inference/ladder_posterior.py`` as of commit 3494c95 (before the one posterior of
``inference.posterior``), kept for ``benchmarks/bench_posterior.py``: only ``ladder.parents(l)`` became
``ladder.parent_index(l)`` (the tree method's new name).  Not part of the library; uniform trees only.

Exact inference in a summarization ladder given its leaves: sum-product on the region tree.

Upward pass (log-space, batched over examples and over the regions of a level):

top-down ladder
    lambda_r(k) = log p(x_r | z_r = k) at the leaves, and for a parent a of level l-1
    lambda_a(j) = sum_{children c} logsumexp_k [ log P(z_c = k | z_a = j) + lambda_c(k) ],
    log p(x) = logsumexp_y [ log P(y) + lambda_root(y) ];
bottom-up ladder
    lambda_r(k) = log P(z_r = k) + log p(x_r | z_r = k) at the leaves, and
    lambda_a(j) = logsumexp over child configurations c with lookup(c) = j of sum_i lambda_{c_i},
    log p(x) = logsumexp_y lambda_root(y).

The downward pass turns the messages into the posterior marginals p(z_alpha | x) of every
region.  Both are exact (no sampling, no variational gap); they are checked against brute-force
enumeration and against Pyro's ``TraceEnum_ELBO`` on the Pyro models of the ladder.  The
posterior of the label gives the Bayes-optimal classifier, whose accuracy is the ceiling of
any student trained on the ladder (:func:`bayes_optimal_accuracy`).

:func:`posterior_event_draws` samples whole configurations of latent events exactly from
p(z | x) by forward filtering, backward sampling: the upward messages above, then the label
from p(y | x) and every child from p(z_child | z_parent, x_below_child), down the tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from teachers.ladder import TOPDOWN, Ladder

if TYPE_CHECKING:
    import arviz as az

__all__ = ["LadderPosterior", "bayes_optimal_accuracy", "ladder_posterior", "posterior_event_draws", "raise_impossible"]

# elements of the largest temporary per chunk of examples (float64): ~256 MiB
_CHUNK_ELEMENTS = 2**25


@dataclass
class LadderPosterior:
    """Result of :func:`ladder_posterior`.

    :ivar log_evidence: ``(N,)`` log p(x).
    :ivar label: ``(N, m_0)`` p(y | x).
    :ivar marginals: ``marginals[l]`` = ``(N, R_l, m_l)`` p(z_alpha | x) (when requested).
    """

    log_evidence: torch.Tensor
    label: torch.Tensor
    marginals: list[torch.Tensor] | None = None

    def predict(self) -> torch.Tensor:
        """Bayes-optimal labels ``(N,)``: argmax_y p(y | x)."""
        return self.label.argmax(-1)


def raise_impossible(log_z: torch.Tensor, start: int, teacher: str) -> None:
    """Raise a ValueError naming the examples (rows ``start + i``) whose log evidence ``log_z`` ``(B,)`` is -inf:
    impossible under ``teacher`` (e.g. a leaf input that is not one-hot for a one-hot emission)."""
    bad = torch.isneginf(log_z).nonzero().flatten()
    if len(bad):
        first = (bad[:5] + start).tolist()
        raise ValueError(f"x: example(s) {first}{' ...' if len(bad) > 5 else ''} have probability 0 under "
                         f"{teacher} (e.g. a leaf input that is not one-hot for a one-hot emission); their "
                         "posterior is undefined")


def ladder_posterior(ladder: Ladder, x: torch.Tensor, *, marginals: bool = False,
                     chunk_size: int | None = None, device: torch.device | str | None = None) -> LadderPosterior:
    """Exact p(y | x), log p(x) and (optionally) p(z_alpha | x) for every region, in float64.

    :param ladder: the ladder.
    :param x: ``(N, R_d, dim)`` observed inputs (``LadderSample.inputs()``).
    :param marginals: also return the posterior marginal of every region.
    :param chunk_size: examples per pass (default: sized to ~256 MiB of temporaries).
    :param device: where to compute (default: x's device).
    """
    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
    ladder.emission.check_input(x, "x")
    device = torch.device(device) if device is not None else x.device
    n = x.shape[0]
    if chunk_size is None:
        chunk_size = max(1, _CHUNK_ELEMENTS // max(1, _per_example_elements(ladder)))
    elif isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size <= 0:
        raise ValueError(f"chunk_size: expected a positive integer, got {chunk_size!r}")
    logs, labels, margs = [], [], []
    params = _Params(ladder, device)
    for s in range(0, n, chunk_size):
        xc = x[s: s + chunk_size].to(device)
        lam, msgs, joint = _upward(ladder, params, xc)
        log_z = torch.logsumexp(joint, -1)
        raise_impossible(log_z, s, "the ladder")
        post = (joint - log_z[:, None]).exp()
        logs.append(log_z)
        labels.append(post)
        if marginals:
            down = _downward_topdown if ladder.mode == TOPDOWN else _downward_bottomup
            margs.append(down(params, lam, msgs, joint - log_z[:, None]))
    out = LadderPosterior(torch.cat(logs), torch.cat(labels))
    if marginals:
        out.marginals = [torch.cat([m[l] for m in margs]) for l in range(ladder.depth + 1)]
    return out


def bayes_optimal_accuracy(ladder: Ladder, x: torch.Tensor, y: torch.Tensor | None = None, *,
                           batch_size: int | None = 256, **kwargs) -> dict:
    """Accuracy of the Bayes-optimal classifier argmax_y p(y | x) on a sample.

    :param batch_size: examples per posterior pass (memory only: the sum-product messages of a wide
        ladder take far more memory per example than x); None: all at once.

    :returns: a dict with

        - ``"expected"``: mean over the inputs of max_y p(y|x), the exact accuracy the Bayes
          classifier has on average on these inputs (lower variance than counting);
        - ``"stderr"``: its standard error as an estimate of the ladder's accuracy (the spread
          of max_y p(y|x) over inputs, / sqrt(N));
        - ``"empirical"`` (when ``y`` is given): the fraction of argmax_y p(y|x) equal to y;
        - ``"stderr_empirical"``: the standard deviation of ``"empirical"`` around
          ``"expected"`` given these inputs, sqrt(sum_i q_i (1 - q_i)) / N with q_i = max p;
        - ``"n"``.
    """
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size: expected a positive integer or None, got {batch_size!r}")
    if y is not None and y.shape != (x.shape[0],):
        raise ValueError(f"y: expected shape ({x.shape[0]},), got {tuple(y.shape)}")
    step = x.shape[0] if batch_size is None else batch_size
    best_parts, pred_parts = [], []
    for s in range(0, max(x.shape[0], 1), max(step, 1)):
        post = ladder_posterior(ladder, x[s: s + step], **kwargs)
        best_parts.append(post.label.max(-1).values)
        pred_parts.append(post.predict().cpu())
    best = torch.cat(best_parts)
    n = best.numel()
    out = {"expected": best.mean().item(), "stderr": (best.std() / n**0.5).item() if n > 1 else float("nan"),
           "stderr_empirical": ((best * (1 - best)).sum().sqrt() / n).item(), "n": n}
    if y is not None:
        out["empirical"] = (torch.cat(pred_parts) == y.long().cpu()).double().mean().item()
    return out


def posterior_event_draws(ladder: Ladder, x: torch.Tensor, num_draws: int = 500, seed: int = 0, *,
                          num_chains: int = 2, device: torch.device | str | None = None,
                          onehot: bool = True) -> az.InferenceData:
    """Exact, independent draws of every latent event from p(z | x) (forward filtering, backward sampling).

    The upward pass of :func:`ladder_posterior` gives, for every region c, the message
    lambda_c = log p(x_below_c | z_c) (bottom-up ladders: log p(x_below_c, z_c)).  The label is
    drawn from p(y | x); then, level by level, each child from

    - top-down: p(z_c = k | z_a = j, x) proportional to P(z_c = k | z_a = j) exp(lambda_c(k));
    - bottom-up: the configuration of a parent's children (then split into one event per child)
      from p(config | z_a = j, x) proportional to exp(sum_i lambda_{c_i}) 1[lookup(config) = j].

    Every draw is an exact sample of the joint posterior, so the draws' frequencies converge to
    the marginals p(z_alpha | x) of :func:`ladder_posterior` at rate 1/sqrt(draws), and chains
    are independent (``az.summary``'s ``r_hat`` ~ 1, ``ess`` ~ the number of draws).

    :param ladder: the ladder.
    :param x: one observed input ``(R_d, dim)`` or a batch ``(N, R_d, dim)``.
    :param num_draws: draws per chain (>= 1).
    :param seed: seed of a private ``torch.Generator`` on the computation's device (every global
        RNG state is untouched); the same seed gives the same draws on the same device (float32 and
        float64 inputs give the same draws).
    :param num_chains: independent chains (>= 1; ``r_hat`` needs 2).
    :param device: where to compute (default: x's device); every tensor is created there.
    :param onehot: also store the per-level one-hot indicators (below); False saves their memory
        (``draws x examples x sum_l R_l m_l`` bytes).
    :returns: ``arviz.InferenceData`` with

        - ``posterior["z"]`` ``(chain, draw, example, region)`` int64, one entry per region in
          global (breadth-first) order; coordinate ``region`` is the integer global index, with
          the non-index coordinates ``region_name`` (the ladder's names, ``"0.0"`` is the label y)
          and ``level``;
        - ``posterior["z_onehot_<l>"]`` ``(chain, draw, example, region_<l>, event_<l>)`` uint8 for
          each level l (when ``onehot``): indicators whose means, as ``az.summary`` reports them,
          are the per-event posterior probabilities ``p(z_alpha = k | x)`` with MCSE and ESS (the
          mean and HDI of an integer event label mean nothing); ``region_<l>`` holds the global
          indices of the level's regions;
        - ``observed_data["x"]`` ``(example, leaf, feature)`` float64, ``leaf`` the integer leaf
          index with the non-index coordinate ``leaf_name``.

    Memory: the conditional tables are ``(N, R_l, m_{l-1}, m_l)`` per level (bottom-up:
    ``(N, R_l, m_l, m_{l+1}^b_l)``), the draws are taken in passes of bounded size.
    """
    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
    if isinstance(x, torch.Tensor) and x.dim() == 2:
        x = x[None]
    ladder.emission.check_input(x, "x")
    for name, v in (("num_draws", num_draws), ("num_chains", num_chains)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name}: expected a positive integer, got {v!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer, got {seed!r}")
    if x.shape[0] == 0:
        raise ValueError("x: expected at least one example, got 0")
    total = int(num_draws) * int(num_chains)
    device = torch.device(device) if device is not None else x.device
    x = x.detach().to(device)
    n = x.shape[0]
    params = _Params(ladder, device)
    lam, _, joint = _upward(ladder, params, x)
    impossible = torch.isneginf(torch.logsumexp(joint, -1)).nonzero().flatten()
    if len(impossible):
        raise ValueError(f"x: example(s) {impossible[:5].tolist()} have probability 0 under the ladder; "
                         "their posterior is undefined")
    # every uniform is drawn up front, in one call, so the draws depend only on the seed
    gen = torch.Generator(device=device).manual_seed(int(seed))
    u = torch.rand(total, n, ladder.total_regions, generator=gen, dtype=torch.float64, device=device)
    z = torch.empty(total, n, ladder.total_regions, dtype=torch.int64, device=device)
    off = ladder.level_offsets
    z[:, :, :1] = _draw(_cdf(joint)[:, None], u[:, :, :1])
    for l in range(1, ladder.depth + 1):
        parent = z[:, :, off[l - 1]: off[l]]  # (T, n, R_{l-1})
        if ladder.mode == TOPDOWN:
            # cdf[i, c, j, :] of p(z_c | z_parent = j, x): (n, R_l, m_{l-1}, m_l)
            cdf = _cdf(params.log_tables[l][None] + lam[l][:, :, None, :])
            z[:, :, off[l]: off[l + 1]] = _draw(cdf, u[:, :, off[l]: off[l + 1]], parent[:, :, ladder.parent_index(l)])
        else:
            R, b, mc, mp = ladder.num_regions[l - 1], ladder.branching[l - 1], ladder.events[l], ladder.events[l - 1]
            conf = _child_configs(lam[l], R, b)  # (n, R, mc^b)
            events = torch.arange(mp, device=device)
            allowed = params.lookup[l - 1][:, None, :] == events[None, :, None]  # (R, mp, mc^b)
            cdf = _cdf(torch.where(allowed[None], conf[:, :, None, :], -torch.inf))  # (n, R, mp, mc^b)
            # one uniform per parent (that of its first child) picks the children's configuration
            code = _draw(cdf, u[:, :, off[l]: off[l + 1]: b], parent)  # (T, n, R)
            for c in range(b):
                z[:, :, off[l] + c: off[l + 1]: b] = (code // mc ** (b - 1 - c)) % mc
    z = z.reshape(int(num_chains), int(num_draws), n, ladder.total_regions).cpu().numpy()
    return _event_inference_data(ladder, z, x.detach().cpu().double().numpy(), onehot)


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
    if onehot:
        for l in range(ladder.depth + 1):
            m = ladder.events[l]
            posterior[f"z_onehot_{l}"] = (z[..., off[l]: off[l + 1], None] == np.arange(m)).astype(np.uint8)
            coords[f"region_{l}"] = np.arange(off[l], off[l + 1])
            coords[f"event_{l}"] = np.arange(m)
            dims[f"z_onehot_{l}"] = ["example", f"region_{l}", f"event_{l}"]
    idata = az.from_dict(posterior=posterior, observed_data={"x": x}, coords=coords, dims=dims)
    level = np.repeat(np.arange(ladder.depth + 1), ladder.num_regions)
    idata.posterior = idata.posterior.assign_coords(region_name=("region", names), level=("region", level))
    idata.observed_data = idata.observed_data.assign_coords(leaf_name=("leaf", names[off[-2]:]))
    return idata


def _cdf(logits: torch.Tensor) -> torch.Tensor:
    """Normalized cumulative probabilities along the last dim (last entry exactly 1).

    Rows that are entirely impossible (conditioning on a parent event of probability 0) become
    uniform: they are never used, since such a parent event is never drawn."""
    dead = torch.isneginf(logits).all(-1, keepdim=True)
    logits = torch.where(dead, 0.0, logits)
    c = (logits - logits.max(-1, keepdim=True).values).exp().cumsum(-1)
    return c / c[..., -1:]


def _draw(cdf: torch.Tensor, u: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Inverse-CDF draws: ``cdf`` ``(n, R, [rows,] m)``, uniforms ``u`` ``(T, n, R)``, ``rows``
    ``(T, n, R)`` selecting the conditioning row; returns ``(T, n, R)`` indices.  An event of
    probability 0 has an empty interval of the cdf, so it is never drawn."""
    t, n, r = u.shape
    m = cdf.shape[-1]
    out = torch.empty(t, n, r, dtype=torch.int64, device=cdf.device)
    step = max(1, _CHUNK_ELEMENTS // max(1, n * r * m))  # draws per pass: bounded temporaries
    for s in range(0, t, step):
        uc = u[s: s + step]
        tc = uc.shape[0]
        if rows is not None:
            idx = rows[s: s + step, ..., None, None].expand(tc, n, r, 1, m)
            c = cdf[None].expand(tc, -1, -1, -1, -1).gather(3, idx)[:, :, :, 0]
        else:
            c = cdf.expand(tc, n, r, m)
        out[s: s + step] = torch.searchsorted(c.contiguous(), uc[..., None].contiguous(), right=True)[..., 0]
    return out.clamp_(max=m - 1)


# ---------------------------------------------------------------------- internals
class _Params:
    def __init__(self, ladder: Ladder, device):
        self.ladder = ladder
        self.device = device
        if ladder.mode == TOPDOWN:
            self.log_prior = ladder.prior.to(device).log()
            self.log_tables = [None] + [t.to(device).log() for t in ladder.tables]
        else:
            self.log_leaf_prior = ladder.leaf_prior.to(device).log()
            self.lookup = [t.to(device) for t in ladder.lookup]


def _per_example_elements(ladder: Ladder) -> int:
    m, R, b = ladder.events, ladder.num_regions, ladder.branching
    if ladder.mode == TOPDOWN:
        return max(R[l] * m[l - 1] * m[l] for l in range(1, ladder.depth + 1))
    return max(R[l] * m[l + 1] ** b[l] * max(2, b[l]) for l in range(ladder.depth))


def _safe_sub(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a - b with -inf - (-inf) := -inf (an impossible event stays impossible)."""
    return torch.where(torch.isneginf(a), a, a - torch.where(torch.isneginf(b), 0.0, b))


def _upward_topdown(p: _Params, ll: torch.Tensor):
    lad = p.ladder
    n = ll.shape[0]
    lam = [None] * (lad.depth + 1)
    msgs = [None] * (lad.depth + 1)
    lam[lad.depth] = ll
    for l in range(lad.depth, 0, -1):
        # msg[c, j] = logsumexp_k log P(z_c = k | z_parent = j) + lambda_c(k): (n, R_l, m_{l-1})
        msgs[l] = torch.logsumexp(p.log_tables[l][None] + lam[l][:, :, None, :], -1)
        lam[l - 1] = msgs[l].reshape(n, lad.num_regions[l - 1], lad.branching[l - 1], -1).sum(2)
    return lam, msgs


def _downward_topdown(p: _Params, lam, msgs, log_root):
    lad = p.ladder
    out = [log_root[:, None, :].exp()]
    log_q = log_root[:, None, :]
    for l in range(1, lad.depth + 1):
        parent = log_q[:, lad.parent_index(l)]  # (n, R_l, m_{l-1})
        # q_c(k) = sum_j q_a(j) P(k | j) exp(lambda_c(k) - msg_c(j))
        w = _safe_sub(parent, msgs[l])
        log_q = torch.logsumexp(w[:, :, :, None] + p.log_tables[l][None], 2) + lam[l]
        log_q = log_q - torch.logsumexp(log_q, -1, keepdim=True)  # exact already; removes rounding
        out.append(log_q.exp())
    return out


def _child_configs(lam_child: torch.Tensor, R: int, b: int) -> torch.Tensor:
    """Sum of children's log-messages for every child configuration: ``(n, R, mc^b)``."""
    n, _, mc = lam_child.shape
    lc = lam_child.reshape(n, R, b, mc)
    conf = lc[:, :, 0]
    for c in range(1, b):
        conf = (conf[:, :, :, None] + lc[:, :, c, None, :]).reshape(n, R, -1)
    return conf


def _scatter_logsumexp(values: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """out[..., j] = logsumexp of values[..., i] over i with index[..., i] = j (``-inf`` if none)."""
    shape = (*values.shape[:-1], size)
    mx = torch.full(shape, -torch.inf, dtype=values.dtype, device=values.device)
    mx = mx.scatter_reduce(-1, index, values, reduce="amax", include_self=True)
    mx_safe = torch.where(torch.isneginf(mx), 0.0, mx)
    e = (values - mx_safe.gather(-1, index)).exp()
    s = torch.zeros(shape, dtype=values.dtype, device=values.device).scatter_add_(-1, index, e)
    return s.log() + mx_safe


def _upward_bottomup(p: _Params, ll: torch.Tensor):
    lad = p.ladder
    n = ll.shape[0]
    lam = [None] * (lad.depth + 1)
    lam[lad.depth] = ll + p.log_leaf_prior[None]
    for l in range(lad.depth - 1, -1, -1):
        conf = _child_configs(lam[l + 1], lad.num_regions[l], lad.branching[l])
        index = p.lookup[l][None].expand(n, -1, -1)
        lam[l] = _scatter_logsumexp(conf, index, lad.events[l])
    return lam, None



def _upward(ladder: Ladder, params: _Params, x: torch.Tensor):
    """Upward pass on inputs ``x`` ``(n, R_d, dim)``: ``(lam, msgs, joint)`` with ``joint`` ``(n, m_0)`` =
    log p(x, y) (top-down: the label's prior times its subtree's likelihood)."""
    ll = ladder.emission.log_likelihood(x).double()  # (n, R_d, m_d)
    if ladder.mode == TOPDOWN:
        lam, msgs = _upward_topdown(params, ll)
        return lam, msgs, params.log_prior + lam[0][:, 0]
    lam, msgs = _upward_bottomup(params, ll)
    return lam, msgs, lam[0][:, 0]

def _downward_bottomup(p: _Params, lam, msgs, log_root):
    lad = p.ladder
    n = log_root.shape[0]
    out = [log_root[:, None, :].exp()]
    log_q = log_root[:, None, :]
    for l in range(lad.depth):
        R, b, mc = lad.num_regions[l], lad.branching[l], lad.events[l + 1]
        conf = _child_configs(lam[l + 1], R, b)  # (n, R, mc^b)
        index = p.lookup[l][None].expand(n, -1, -1)
        # posterior weight of each configuration: q_a(lookup(c)) * exp(conf(c) - lambda_a(lookup(c)))
        w = _safe_sub(log_q.gather(-1, index), lam[l].gather(-1, index))
        w = torch.where(torch.isneginf(w), w, w + conf).exp()  # (n, R, mc^b)
        codes = torch.arange(mc**b, device=w.device)
        child = torch.zeros(n, R, b, mc, dtype=w.dtype, device=w.device)
        for c in range(b):
            digit = ((codes // mc ** (b - 1 - c)) % mc).expand(n, R, -1)
            child[:, :, c].scatter_add_(-1, digit, w)
        q = child.reshape(n, R * b, mc)
        q = q / q.sum(-1, keepdim=True)
        out.append(q)
        log_q = q.log()
    return out
