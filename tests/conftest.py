"""Shared fixtures for the ladder tests: tiny ladders of every kind and brute-force references.

The brute-force helpers enumerate *every* joint event configuration of a tiny ladder with
plain numpy loops written from the definitions in ``teachers/ladder.py``'s module docstring
(top-down: P(y) times the conditional tables; bottom-up: independent leaves, parents by the
mixed-radix lookup, first child most significant).  They share no code with the library's
statistics, posterior or Pyro models, so they are an independent reference.

Default dtype: tests run under torch's float32 default; a test that needs float64 by default
asks for the ``float64`` fixture, which restores the previous default afterwards.
"""

from __future__ import annotations

import itertools
import os
from types import SimpleNamespace

import hypothesis_profiles  # noqa: F401 (registers and loads the tiers' hypothesis profiles)
import numpy as np
import pyro
import pyro.poutine.runtime as pyro_runtime
import pytest
import torch
from scipy import stats
from scipy.special import logsumexp

from teachers import GaussianEmission, Ladder

# One torch intra-op thread for the test process (SMASO_TEST_THREADS overrides): almost every test runs tiny
# ops, where a second thread only adds synchronisation, and on a loaded 2-core machine it turns a 1.5 s test
# into 28 s (test_bracket's trained networks).  Tests of threading set their own count and restore this one.
torch.set_num_threads(int(os.environ.get("SMASO_TEST_THREADS", "1")))

# Largest number of joint configurations the brute-force helpers will enumerate.
MAX_CONFIGS = 20_000


# ---------------------------------------------------------------------- global state
@pytest.fixture(autouse=True)
def _isolate_global_state():
    """Fresh Pyro param store and RNG per test; restore torch's default dtype and Pyro's
    plate-dimension allocator afterwards (a model that raises inside manually entered plates
    leaks them; see test_ladder_sampling.py::test_model_error_does_not_leak_plates)."""
    dtype = torch.get_default_dtype()
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    yield
    torch.set_default_dtype(dtype)
    pyro_runtime._DIM_ALLOCATOR._stack.clear()
    del pyro_runtime._PYRO_STACK[:]


@pytest.fixture
def one_thread():
    """One torch intra-op thread for the test, restored after: Pyro's enumeration and SVI run many tiny
    ops, where threads on a shared machine only add waiting (``pytestmark = usefixtures("one_thread")``)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture
def float64():
    """torch's default dtype is float64 for this test only."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield torch.float64
    torch.set_default_dtype(old)


# ---------------------------------------------------------------------- tiny ladders
def _topdown_with_zeros() -> Ladder:
    """Top-down ladder whose tables contain exact zeros (impossible transitions)."""
    base = Ladder.random(depth=2, branching=2, events=[3, 3, 2], mode="topdown", concentration=1.0, seed=5)
    t1 = base.tables[0].clone()
    t1[:, 0, 2] = 0.0  # label 0 never produces event 2 at level 1
    t1[1, 2, :] = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)  # one-hot row
    t1 = t1 / t1.sum(-1, keepdim=True)
    t2 = base.tables[1].clone()
    t2[:, 1] = torch.tensor([1.0, 0.0], dtype=torch.float64)
    prior = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    return Ladder(base.branching, base.events, mode="topdown", prior=prior, tables=[t1, t2], name="td-zeros")


def _gaussian(ladder: Ladder, sigma: float = 0.6) -> Ladder:
    return ladder.with_emission(
        GaussianEmission.around_one_hot(ladder.num_regions[-1], ladder.events[-1], sigma))


TINY_LADDERS = {
    # top-down, uniform branching, label with 3 classes
    "td": lambda: Ladder.random(depth=2, branching=2, events=[3, 3, 2], mode="topdown", concentration=0.7, seed=11),
    # top-down, uneven branching and events per level
    "td-uneven": lambda: Ladder.random(depth=2, branching=[3, 2], events=[2, 3, 2], mode="topdown",
                                       concentration=0.8, seed=12),
    "td-zeros": _topdown_with_zeros,
    "td-gauss": lambda: Ladder.random(depth=2, branching=2, events=[3, 3, 2], mode="topdown", concentration=0.7,
                                      seed=13, emission="gaussian", sigma=0.6),
    "td-depth1": lambda: Ladder.random(depth=1, branching=3, events=[4, 3], mode="topdown", seed=14),
    "bu": lambda: Ladder.random(depth=2, branching=2, events=[3, 3, 2], mode="bottomup", concentration=0.7, seed=21),
    "bu-uneven": lambda: Ladder.random(depth=2, branching=[3, 2], events=[3, 2, 2], mode="bottomup",
                                       concentration=0.9, seed=22),
    "bu-gauss": lambda: _gaussian(Ladder.random(depth=2, branching=2, events=[3, 3, 3], mode="bottomup",
                                                concentration=1.0, seed=23)),
    "bu-depth1": lambda: Ladder.random(depth=1, branching=3, events=[5, 2], mode="bottomup", seed=24),
    "fully-informative": lambda: Ladder.fully_informative(depth=2, branching=2, leaf_events=2, concentration=2.0,
                                                          seed=31),
    "fully-informative-gauss": lambda: Ladder.fully_informative(depth=2, branching=2, leaf_events=2,
                                                                emission="gaussian", sigma=0.5),
    "factorized": lambda: Ladder.factorized_binary(depth=2, branching=2, factors=(1, 2, 2), seed=41),
}

TOPDOWN_NAMES = [k for k in TINY_LADDERS if k.startswith("td") or k == "factorized"]
BOTTOMUP_NAMES = [k for k in TINY_LADDERS if k not in TOPDOWN_NAMES]


@pytest.fixture(params=sorted(TINY_LADDERS))
def tiny_ladder(request) -> Ladder:
    """Every kind of tiny ladder (each small enough for brute-force enumeration)."""
    return TINY_LADDERS[request.param]()


@pytest.fixture(params=TOPDOWN_NAMES)
def tiny_topdown(request) -> Ladder:
    return TINY_LADDERS[request.param]()


@pytest.fixture(params=BOTTOMUP_NAMES)
def tiny_bottomup(request) -> Ladder:
    return TINY_LADDERS[request.param]()


@pytest.fixture
def make_ladder():
    """``make_ladder(name)``: a fresh tiny ladder by name (see ``TINY_LADDERS``)."""
    return lambda name: TINY_LADDERS[name]()


# ---------------------------------------------------------------------- brute force
def brute_force_joint(ladder: Ladder) -> tuple[np.ndarray, np.ndarray]:
    """Every joint configuration of every region's event, with its log-probability.

    :returns: ``(configs, logp)``: ``configs`` is ``(K, total_regions)`` int64 in global
        (breadth-first) order, ``logp`` is ``(K,)`` float64 (``-inf`` for impossible ones).
    """
    d, m, b, R = ladder.depth, ladder.events, ladder.branching, ladder.num_regions
    off = ladder.level_offsets
    if ladder.mode == "topdown":
        sizes = [m[l] for l in range(d + 1) for _ in range(R[l])]
        assert np.prod(sizes, dtype=np.float64) <= MAX_CONFIGS, "ladder too large for brute force"
        prior = ladder.prior.numpy()
        tables = [t.numpy() for t in ladder.tables]
        configs, logp = [], []
        with np.errstate(divide="ignore"):
            for cfg in itertools.product(*[range(s) for s in sizes]):
                lp = np.log(prior[cfg[0]])
                for l in range(1, d + 1):
                    for i in range(R[l]):
                        parent = cfg[off[l - 1] + i // b[l - 1]]
                        lp += np.log(tables[l - 1][i, parent, cfg[off[l] + i]])
                configs.append(cfg)
                logp.append(lp)
        return np.array(configs, dtype=np.int64), np.array(logp, dtype=np.float64)
    # bottom-up: enumerate the leaves, compute the parents by hand
    assert m[d] ** R[d] <= MAX_CONFIGS, "ladder too large for brute force"
    leaf_prior = ladder.leaf_prior.numpy()
    lookup = [t.numpy() for t in ladder.lookup]
    configs, logp = [], []
    with np.errstate(divide="ignore"):
        for leaves in itertools.product(range(m[d]), repeat=R[d]):
            cfg = np.zeros(ladder.total_regions, dtype=np.int64)
            cfg[off[d]:] = leaves
            for l in range(d - 1, -1, -1):
                for i in range(R[l]):
                    code = 0
                    for c in range(b[l]):  # first child most significant
                        code = code * m[l + 1] + int(cfg[off[l + 1] + i * b[l] + c])
                    cfg[off[l] + i] = lookup[l][i, code]
            configs.append(cfg)
            logp.append(sum(np.log(leaf_prior[r, k]) for r, k in enumerate(leaves)))
    return np.array(configs, dtype=np.int64), np.array(logp, dtype=np.float64)


def brute_force_statistics(ladder: Ladder) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
    """Marginals ``(R_l, m_l)`` and joints ``(R_l, m_{l-1}, m_l)`` of every level by enumeration."""
    configs, logp = brute_force_joint(ladder)
    p = np.exp(logp)
    off = ladder.level_offsets
    marg, joints = [], [None]
    for l in range(ladder.depth + 1):
        mm = np.zeros((ladder.num_regions[l], ladder.events[l]))
        for i in range(ladder.num_regions[l]):
            np.add.at(mm[i], configs[:, off[l] + i], p)
        marg.append(mm)
        if l >= 1:
            jj = np.zeros((ladder.num_regions[l], ladder.events[l - 1], ladder.events[l]))
            for i in range(ladder.num_regions[l]):
                parent = off[l - 1] + i // ladder.branching[l - 1]
                np.add.at(jj[i], (configs[:, parent], configs[:, off[l] + i]), p)
            joints.append(jj)
    return marg, joints


def leaf_log_likelihood(ladder: Ladder, x: torch.Tensor) -> np.ndarray:
    """log p(x_r | z_r = k), ``(N, R_d, m_d)``, from the definitions (scipy for the Gaussian)."""
    em = ladder.emission
    x = x.double().numpy()
    n, r_d, _ = x.shape
    m = ladder.events[-1]
    out = np.empty((n, r_d, m))
    if em.kind == "onehot":
        eye = np.eye(m)
        for k in range(m):
            out[:, :, k] = np.where(np.all(x == eye[k], axis=-1), 0.0, -np.inf)
    elif em.kind == "gaussian":
        means = em.means.numpy()
        sigma = np.broadcast_to(em.sigma.numpy(), (r_d,))
        for r in range(r_d):
            for k in range(m):
                out[:, r, k] = stats.norm.logpdf(x[:, r, :], means[r, k], sigma[r]).sum(-1)
    else:  # pragma: no cover - only built-in emissions in these tests
        raise NotImplementedError(em.kind)
    return out


def brute_force_posterior(ladder: Ladder, x: torch.Tensor) -> dict:
    """log p(x) ``(N,)``, per-level posterior marginals ``(N, R_l, m_l)``, the joint MAP
    configuration ``(N, total_regions)`` and log p(z, x) ``(N, K)`` by enumeration."""
    configs, logp = brute_force_joint(ladder)
    ll = leaf_log_likelihood(ladder, x)  # (N, R_d, m_d)
    off = ladder.level_offsets
    d = ladder.depth
    leaves = configs[:, off[d]:]  # (K, R_d)
    log_joint = logp[None, :] + ll[:, np.arange(ladder.num_regions[d])[None, :], leaves].sum(-1)  # (N, K)
    log_ev = logsumexp(log_joint, axis=1)
    with np.errstate(invalid="ignore"):
        w = np.exp(log_joint - log_ev[:, None])
    margs = []
    for l in range(d + 1):
        mm = np.zeros((x.shape[0], ladder.num_regions[l], ladder.events[l]))
        for i in range(ladder.num_regions[l]):
            for k in range(ladder.events[l]):
                mm[:, i, k] = w[:, configs[:, off[l] + i] == k].sum(-1)
        margs.append(mm)
    return {"log_evidence": log_ev, "marginals": margs, "map": configs[log_joint.argmax(1)],
            "log_joint": log_joint, "configs": configs}


@pytest.fixture
def brute():
    """The brute-force reference helpers of this conftest."""
    return SimpleNamespace(joint=brute_force_joint, statistics=brute_force_statistics,
                           posterior=brute_force_posterior, leaf_log_likelihood=leaf_log_likelihood)


# ---------------------------------------------------------------------- bounds
def tv_bound(cells: int, n: int, delta: float = 1e-6) -> float:
    """Bretagnolle-Huber-Carol: for a multinomial sample of size n over ``cells`` cells,
    P(TV(p_hat, p) >= eps) <= 2^cells exp(-2 n eps^2), so TV < this with prob >= 1 - delta."""
    return float(np.sqrt((cells * np.log(2) + np.log(1 / delta)) / (2 * n)))


@pytest.fixture
def tv():
    return tv_bound


# ---------------------------------------------------------------------- ladders of the chunked-store tests
@pytest.fixture(scope="module")
def ladder():
    """A small top-down ladder with one-hot leaves (three levels, 3/4/5 events)."""
    from teachers import Ladder

    return Ladder.random(depth=2, branching=3, events=[3, 4, 5], concentration=0.5, seed=7)


@pytest.fixture(scope="module")
def gaussian():
    """A small bottom-up ladder whose leaves emit 5-dimensional Gaussians (x is stored)."""
    from teachers import Ladder
    from teachers.emission import GaussianEmission

    return Ladder.random(depth=2, branching=2, events=[3, 3, 2], mode="bottomup", seed=1).with_emission(
        GaussianEmission.random_means(4, 2, dim=5, sigma=0.3, generator=torch.Generator().manual_seed(0)))
