"""Brute-force references of the posterior tests (``tests/test_posterior*.py``) on any ladder, tree or DAG.

Every joint configuration of every region's event is enumerated with numpy, from the definitions in
``teachers/ladder.py``'s module docstring (top-down: the prior times each region's table row at the
mixed-radix code of its parents, first parent most significant; bottom-up: independent leaves, each region
the lookup of the code of its children); it shares no code with :mod:`inference`.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from scipy.special import logsumexp

from teachers.ladder import Ladder

MAX_CONFIGS = 200_000


def inputs(g: Ladder, n: int, seed: int) -> torch.Tensor:
    """Inputs from uniformly random leaf events (every leaf configuration is possible in these ladders)."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.randint(0, g.leaf_events, (n, g.num_regions[-1]), generator=gen)
    return g.emission.sample(z, generator=gen).double()


def sizes(g: Ladder) -> list[int]:
    return [m for lvl in g.region_events for m in lvl]


def joint(g: Ladder, x: torch.Tensor | None):
    """Every joint configuration ``(C, V)`` and its log weight ``(C,)`` / log joint with x ``(N, C)``."""
    assert math.prod(sizes(g)) <= MAX_CONFIGS, "ladder too large for brute force"
    off, ev = g.level_offsets, g.region_events
    conf = np.array(list(itertools.product(*[range(m) for m in sizes(g)])), dtype=np.int64)
    with np.errstate(divide="ignore"):
        if g.mode == "topdown":
            logw = np.log(g.prior.numpy())[conf[:, 0]]
            for l in range(1, g.depth + 1):
                for i, ps in enumerate(g.parents[l]):
                    code = np.zeros(len(conf), dtype=np.int64)
                    for p in ps:
                        code = code * ev[l - 1][p] + conf[:, off[l - 1] + p]
                    logw = logw + np.log(g.region_tables[l][i].numpy()[code, conf[:, off[l] + i]])
        else:
            logw = np.zeros(len(conf))
            for i, pr in enumerate(g.leaf_priors):
                logw = logw + np.log(pr.numpy())[conf[:, off[-2] + i]]
            for l in range(g.depth):
                for i, cs in enumerate(g.children[l]):
                    code = np.zeros(len(conf), dtype=np.int64)
                    for c in cs:
                        code = code * ev[l + 1][c] + conf[:, off[l + 1] + c]
                    ok = g.lookups[l][i].numpy()[code] == conf[:, off[l] + i]
                    logw = np.where(ok, logw, -np.inf)
    if x is None:
        return conf, logw
    ll = g.emission.log_likelihood(x).numpy()  # (N, R, m)
    out = np.broadcast_to(logw, (x.shape[0], len(conf))).copy()
    for j in range(g.num_regions[-1]):
        out = out + ll[:, j, conf[:, off[-2] + j]]
    return conf, out


def posterior(g: Ladder, x: torch.Tensor):
    """``(log p(x) (N,), marg[l][i] (N, m_{l,i}), the joint MAP (N, V), log p(z, x) (N, C), configs (C, V))``."""
    conf, lj = joint(g, x)
    log_z = logsumexp(lj, axis=1)
    with np.errstate(invalid="ignore"):
        post = np.exp(lj - log_z[:, None])  # (N, C)
    off = g.level_offsets
    marg = [[np.stack([post[:, conf[:, off[l] + i] == k].sum(1) for k in range(g.region_events[l][i])], 1)
             for i in range(g.num_regions[l])] for l in range(g.depth + 1)]
    return log_z, marg, conf[lj.argmax(1)], lj, conf


def statistics(g: Ladder):
    """``p[l][i]``, ``pair[(l, a, i)]`` and ``parents_joint[l][i]`` by enumeration (no evidence)."""
    conf, logw = joint(g, None)
    w = np.exp(logw)
    off, ev = g.level_offsets, g.region_events
    p = [[np.bincount(conf[:, off[l] + i], weights=w, minlength=ev[l][i]) for i in range(g.num_regions[l])]
         for l in range(g.depth + 1)]
    pair = {}
    for (l, a, i) in g.edges():
        t = np.zeros((ev[l - 1][a], ev[l][i]))
        np.add.at(t, (conf[:, off[l - 1] + a], conf[:, off[l] + i]), w)
        pair[(l, a, i)] = t
    pj = [[np.ones(1)]]
    for l in range(1, g.depth + 1):
        row = []
        for ps in g.parents[l]:
            code = np.zeros(len(conf), dtype=np.int64)
            for q in ps:
                code = code * ev[l - 1][q] + conf[:, off[l - 1] + q]
            row.append(np.bincount(code, weights=w, minlength=math.prod(ev[l - 1][q] for q in ps)))
        pj.append(row)
    return p, pair, pj


def close(a, b, tol: float) -> None:
    """Same shape and max |a - b| <= tol."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert np.abs(a - b).max() <= tol, np.abs(a - b).max()
