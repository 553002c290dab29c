"""Pyro and ArviZ conventions of inference/vq.py and smaso/plots/vq.py: no global RNG side effects, tensors on the
input's device and dtype, categorical draws in a form ArviZ summarises per region, integer coordinates, observed
data, and ArviZ plots without a flood of matplotlib warnings."""

from __future__ import annotations

import random
import sys
import warnings
from pathlib import Path

import arviz as az
import numpy as np
import pyro
import pytest
import torch
from torch.overrides import TorchFunctionMode

import inference.vq as vq
from inference.vq import PARAM_NAME, posterior_region_draws, region_summary, seeded_rng, svi_vq
from smaso.plots.vq import plot_arviz, plot_region_draws, quiet_arviz
from smaso.splines.maso import region_probabilities

F64 = torch.float64
ROOT = Path(__file__).parents[1]


def _layer(dtype=F64, K=2, R=3, D=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(K, R, D, generator=g, dtype=dtype), torch.randn(K, R, generator=g, dtype=dtype)


def _global_states():
    return (random.getstate(), np.random.get_state(), torch.get_rng_state().clone())  # noqa: NPY002


def _assert_same_states(before, after):
    assert before[0] == after[0]
    assert all(np.array_equal(a, b) for a, b in zip(before[1], after[1], strict=True))
    assert torch.equal(before[2], after[2])


# ---------------------------------------------------------------------- RNG: local, reproducible
def test_no_call_changes_the_callers_global_rng_state():
    A, B = _layer()
    x = torch.randn(5, 2, dtype=F64)
    random.seed(123)
    np.random.seed(123)  # noqa: NPY002
    torch.manual_seed(123)
    calls = [
        lambda: svi_vq(A, B, x, 0.4, num_steps=3),  # default seed=0
        lambda: svi_vq(A, B, x, 0.4, num_steps=3, seed=None),
        lambda: posterior_region_draws(A, B, x, num_draws=4, seed=7),
        lambda: posterior_region_draws(A, B, x, num_draws=4),  # seed=None
        lambda: svi_vq(A, B, x, 0.4, num_steps=2).draws(num_draws=4, seed=1),
        lambda: svi_vq(A, B, x, 0.4, num_steps=2).draws(num_draws=4, categorical="one_hot"),
    ]
    for call in calls:
        before = _global_states()
        call()
        _assert_same_states(before, _global_states())
    before = _global_states()
    with pytest.raises(RuntimeError, match="boom"), seeded_rng(5):
        torch.rand(3), random.random(), np.random.rand()  # noqa: NPY002
        raise RuntimeError("boom")
    _assert_same_states(before, _global_states())  # restored on error too


def test_same_seed_same_draws_and_seed_is_local():
    A, B = _layer()
    x = torch.randn(6, 2, dtype=F64)
    a = posterior_region_draws(A, B, x, num_draws=50, seed=3).posterior["t"].values
    pyro.set_rng_seed(99)  # the caller's seeding does not matter when seed is given
    b = posterior_region_draws(A, B, x, num_draws=50, seed=3).posterior["t"].values
    c = posterior_region_draws(A, B, x, num_draws=50, seed=4).posterior["t"].values
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    # seed=None: fresh OS entropy, so two calls differ (and neither replays the caller's stream)
    d = posterior_region_draws(A, B, x, num_draws=50).posterior["t"].values
    e = posterior_region_draws(A, B, x, num_draws=50).posterior["t"].values
    assert not np.array_equal(d, e)
    fit = svi_vq(A, B, x, 0.3, num_steps=10)
    g1, g2 = fit.draws(num_draws=30, seed=2), fit.draws(num_draws=30, seed=2)
    assert np.array_equal(g1.posterior["t"].values, g2.posterior["t"].values)
    assert svi_vq(A, B, x, 0.3, num_steps=10).losses == fit.losses
    with seeded_rng(11) as s1:
        u = (torch.rand(2), random.random(), np.random.rand())  # noqa: NPY002
    with seeded_rng(11) as s2:
        v = (torch.rand(2), random.random(), np.random.rand())  # noqa: NPY002
    assert s1 == s2 == 11 and torch.equal(u[0], v[0]) and u[1:] == v[1:]
    for bad in (-1, 2**32, 1.5, True, "0"):
        with pytest.raises(ValueError, match="seed"):
            posterior_region_draws(A, B, x, num_draws=2, seed=bad)
        with pytest.raises(ValueError, match="seed"):
            svi_vq(A, B, x, num_steps=1, seed=bad)


# ---------------------------------------------------------------------- device and dtype
_FACTORIES = {"full", "zeros", "ones", "empty", "arange", "tensor", "as_tensor", "eye", "linspace", "rand", "randn",
              "randint", "full_like_missing"}
_OURS = (str(ROOT / "inference" / "vq.py"), str(ROOT / "smaso" / "splines" / "mixture.py"))


class _FactoryCalls(TorchFunctionMode):
    """Records torch factory calls made directly from inference/vq.py and smaso/splines/mixture.py."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        caller = sys._getframe(1).f_code.co_filename
        if name in _FACTORIES and caller in _OURS:
            self.calls.append((name, Path(caller).name, sys._getframe(1).f_lineno, kwargs.get("device")))
        return func(*args, **kwargs)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_tensors_follow_the_inputs_device_and_dtype(dtype):
    A, B = _layer(dtype)
    x = torch.randn(5, 2, dtype=F64)  # x in another dtype is moved to A's
    mode = _FactoryCalls()
    with mode:
        fit = svi_vq(A, B, x, torch.tensor([0.3, 0.6]), num_steps=5)
        vq.vq_map(A, B, x)
        idata = posterior_region_draws(A, B, x, num_draws=3, seed=0)
        fit.draws(num_draws=3, seed=0)
    assert mode.calls, "the factory calls were not seen"
    missing = [c for c in mode.calls if c[3] is None]
    assert missing == [], f"tensors created without device=: {missing}"
    assert all(torch.device(c[3]) == A.device for c in mode.calls)
    param = pyro.param(PARAM_NAME)
    for t in (fit.probs, fit.outputs, fit.x, param):
        assert t.dtype == dtype and t.device == A.device
    assert idata.posterior["t"].dtype == np.int64


# ---------------------------------------------------------------------- ArviZ form
def test_region_draws_in_arviz_form():
    A, B = _layer(K=2, R=3)
    x = torch.randn(4, 2, dtype=F64)
    beta = 0.5
    labels = posterior_region_draws(A, B, x, num_draws=400, seed=0, beta=beta)
    onehot = posterior_region_draws(A, B, x, num_draws=400, seed=0, beta=beta, categorical="one_hot")
    t, h = labels.posterior["t"], onehot.posterior["t"]
    assert t.dims == ("chain", "draw", "example", "unit") and t.attrs["num_categories"] == 3
    assert h.dims == ("chain", "draw", "example", "unit", "region")
    for idata in (labels, onehot):
        assert "observed_data" in idata.groups() and idata.observed_data["x"].dims == ("example", "feature")
        np.testing.assert_array_equal(idata.observed_data["x"].values, x.numpy())
        for group in (idata.posterior, idata.observed_data):
            for name, coord in group.coords.items():
                assert coord.dtype.kind in "iu", f"{name}: {coord.dtype}"  # integer coordinates, never '1.1'
    np.testing.assert_array_equal(h.values.argmax(-1), t.values)  # the same draws in both forms
    np.testing.assert_array_equal(h.values.sum(-1), 1)
    # az.summary of the one-hot form: one row per (example, unit, region), mean = per-region probability
    with warnings.catch_warnings():  # constant indicators (a region never drawn) give NaN r_hat
        warnings.simplefilter("ignore", RuntimeWarning)
        summary = az.summary(onehot)
    assert len(summary) == 4 * 2 * 3 and summary.index[5] == "t[0, 1, 2]"
    exact = region_probabilities(A, B, x, beta).numpy().reshape(-1)
    assert np.abs(summary["mean"].to_numpy() - exact).max() < 0.08  # 800 draws, ~4.5 standard errors
    assert {"mcse_mean", "ess_bulk", "r_hat"} <= set(summary.columns)
    # region_summary gives the same table from the labels
    from_labels = region_summary(labels)
    np.testing.assert_allclose(from_labels["mean"].to_numpy(), summary["mean"].to_numpy())
    assert list(from_labels.index) == list(summary.index)
    with pytest.raises(ValueError, match="categorical"):
        posterior_region_draws(A, B, x, num_draws=2, categorical="probs")
    with pytest.raises(ValueError, match="posterior"):
        region_summary(labels, var_name="z")


def test_plot_region_draws_reads_both_forms():
    A, B = _layer(K=2, R=2)
    x = torch.randn(3, 2, dtype=F64)
    probs = region_probabilities(A, B, x, 0.5)
    labels = posterior_region_draws(A, B, x, num_draws=100, seed=1)
    onehot = posterior_region_draws(A, B, x, num_draws=100, seed=1, categorical="one_hot")
    ys = [plot_region_draws({"d": d}, probs).axes[0].lines[0].get_ydata() for d in (labels, onehot)]
    np.testing.assert_array_equal(ys[0], ys[1])
    with pytest.raises(ValueError, match="regions"):
        plot_region_draws({"d": onehot}, region_probabilities(*_layer(K=2, R=3), x, 0.5))


# ---------------------------------------------------------------------- no warning flood
def _from_matplotlib_or_arviz(records):
    return [w for w in records
            if "matplotlib" in w.filename or "arviz" in w.filename or "Matplotlib" in w.category.__name__]


def test_arviz_plots_emit_no_matplotlib_warnings(tmp_path):
    idata = az.from_dict(posterior={"p": np.random.default_rng(0).random((2, 30, 3))}, dims={"p": ["category"]},
                         coords={"category": np.arange(3)})
    with warnings.catch_warnings(record=True) as raw:
        warnings.simplefilter("always")
        az.plot_trace(idata)
    with warnings.catch_warnings(record=True) as quiet:
        warnings.simplefilter("always")
        fig = plot_arviz(az.plot_trace, idata, path=tmp_path / "trace.png", title="trace")
        plot_arviz(az.plot_forest, idata)
        with quiet_arviz():
            az.plot_posterior(idata)
    assert _from_matplotlib_or_arviz(quiet) == [], [str(w.message) for w in quiet][:3]
    assert (tmp_path / "trace.png").stat().st_size > 5000 and fig._suptitle.get_text() == "trace"
    # the filter is specific: other warnings, and the same message outside the block, still show
    from matplotlib import MatplotlibDeprecationWarning

    with warnings.catch_warnings(record=True) as kept:
        warnings.simplefilter("always")
        with quiet_arviz():
            warnings.warn("another deprecation", MatplotlibDeprecationWarning, stacklevel=1)
        warnings.warn("Passing a dict or None as alias_mapping to normalize_kwargs is deprecated",
                      MatplotlibDeprecationWarning, stacklevel=1)
    assert len(kept) == 2
    with pytest.raises(ValueError, match="plot"):
        plot_arviz("plot_trace", idata)  # a name is az.plot_<name>: 'trace', not 'plot_trace'
    with pytest.raises(ValueError, match="plot"):
        plot_arviz(42, idata)
    if not _from_matplotlib_or_arviz(raw):
        pytest.skip("this matplotlib/arviz pair emits no deprecation warnings unfiltered: nothing to filter")
