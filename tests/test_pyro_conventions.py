"""Pyro and ArviZ conventions of the library (issue 16): no global RNG state touched, tensors on the input's
device and in its dtype, distributions that honour ``validate_args`` with Pyro's own errors, and ArviZ
output that summarises categorical draws meaningfully without a warning flood.  The ladder model's own
conventions (flat-shape conditioning, out-of-support observations) are tested with the model, on trees and
DAGs, in ``tests/test_pyro_model.py``."""

from __future__ import annotations

import random
import warnings

import arviz as az
import numpy as np
import pyro
import pytest
import torch

from inference.factorial import (
    configurations,
    exact_joint_map,
    exact_posterior,
    factorial_posterior_draws,
    factorized_map,
    joint_map_pyro,
    mean_field_map,
)
from inference.posterior import posterior, posterior_event_draws
from smaso.plots.factorial import plot_arviz, quiet_arviz
from teachers import Ladder, sample_ladder
from teachers.categorical import CategoricalTable, IndexedCategorical
from teachers.pyro_model import EmissionDistribution

F64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")


def _layer(K=3, R=2, D=4, N=6, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(K, R, D, dtype=F64, generator=g)
    B = torch.randn(K, R, dtype=F64, generator=g)
    x = 1.5 * torch.randn(N, D, dtype=F64, generator=g)
    return A.to(dtype), B.to(dtype), x.to(dtype)


def _global_states():
    return random.getstate(), np.random.get_state(), torch.random.get_rng_state()  # noqa: NPY002


def _assert_same_states(a, b):
    assert a[0] == b[0]
    assert a[1][0] == b[1][0] and np.array_equal(a[1][1], b[1][1]) and a[1][2:] == b[1][2:]
    assert torch.equal(a[2], b[2])


def _gauss_ladder(mode="topdown"):
    return Ladder.random(depth=2, branching=2, events=[3, 3, 2], mode=mode, concentration=0.7, seed=13,
                         emission="gaussian", sigma=0.6)


# ---------------------------------------------------------------------- global RNG state
def test_seeded_calls_leave_every_global_rng_state_alone():
    A, B, x = _layer()
    lad = _gauss_ladder()
    xl = sample_ladder(lad, 2, seed=0).inputs(dtype=F64)
    random.seed(5)
    np.random.seed(5)  # noqa: NPY002 - the legacy global state is what is checked
    torch.manual_seed(5)
    before = _global_states()
    runs = [lambda s: factorial_posterior_draws(A, B, x, num_draws=20, seed=s).posterior["t"].values,
            lambda s: factorial_posterior_draws(A, B, x, num_draws=20, seed=s, method="enumeration")
            .posterior["t"].values,
            lambda s: mean_field_map(A, B, x).draws(20, seed=s).posterior["t"].values,
            lambda s: posterior_event_draws(lad, xl, num_draws=20, seed=s).posterior["z"].values]
    for run in runs:
        a, b, c = run(3), run(3), run(4)
        assert np.array_equal(a, b) and not np.array_equal(a, c)
        _assert_same_states(before, _global_states())


# ---------------------------------------------------------------------- device and dtype
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_factorial_results_follow_the_inputs_dtype_and_device(dtype):
    A, B, x = _layer(dtype=dtype)
    mf = mean_field_map(A, B, x)
    assert mf.probs.dtype == dtype and mf.elbo.dtype == dtype and mf.probs.device == A.device
    post = exact_posterior(A, B, x)
    assert post.log_probs.dtype == dtype and post.configs.device == A.device
    for t in (exact_joint_map(A, B, x), joint_map_pyro(A, B, x), factorized_map(A, B, x, check_orthogonality=False)):
        assert t.dtype == torch.int64 and t.device == A.device
    assert torch.equal(joint_map_pyro(A, B, x), exact_joint_map(A, B, x))
    assert configurations(3, 2, device="meta").device.type == "meta"


def test_ladder_draws_do_not_depend_on_the_input_dtype():
    lad = _gauss_ladder("bottomup")
    x = sample_ladder(lad, 3, seed=1).inputs(dtype=F64)
    a = posterior_event_draws(lad, x, num_draws=30, seed=2, device="cpu").posterior["z"].values
    b = posterior_event_draws(lad, x.float(), num_draws=30, seed=2).posterior["z"].values
    assert np.array_equal(a, b)


# ---------------------------------------------------------------------- validation
def test_indexed_categorical_honours_validate_args():
    table = CategoricalTable(torch.tensor([[0.2, 0.8], [0.5, 0.5]], dtype=F64))
    row = torch.tensor([0, 1, 1])
    bad = torch.tensor([0, 1, 2])
    with pyro.validation_enabled(True):
        d = IndexedCategorical(table, row)
        with pytest.raises(ValueError, match=r"Expected value argument .* within the support"):
            d.log_prob(bad)
        with pytest.raises(ValueError, match="within the support"):
            d.expand((2, 3)).log_prob(bad)
        with pytest.raises(ValueError, match="not broadcastable"):
            d.log_prob(torch.zeros(4, dtype=torch.long))
        with pytest.raises(IndexError):  # explicitly off: no check, the raw gather fails
            IndexedCategorical(table, row, validate_args=False).log_prob(bad)
        # enumerate_support's values are in the support, with enumerated rows too
        values = d.enumerate_support(expand=False)
        assert d.log_prob(values).shape == (2, 3)
    with pyro.validation_enabled(False):
        assert not IndexedCategorical(table, row)._validate_args
        with pytest.raises(ValueError, match="within the support"):
            IndexedCategorical(table, row, validate_args=True).log_prob(bad)


def test_emission_distribution_honours_validate_args():
    lad = _gauss_ladder()
    z = torch.zeros(5, lad.num_regions[-1], dtype=torch.long)
    x = torch.zeros(5, lad.num_regions[-1], lad.emission.dim, dtype=F64)
    with pyro.validation_enabled(True):
        d = EmissionDistribution(lad.emission, z)
        assert d.log_prob(x).shape == (5, lad.num_regions[-1])
        with pytest.raises(ValueError, match="within the support"):
            d.log_prob(torch.full_like(x, float("nan")))
        with pytest.raises(ValueError, match="event_shape"):
            d.log_prob(x[..., :1])


# ---------------------------------------------------------------------- ArviZ
def test_categorical_draws_summarise_as_per_category_probabilities():
    A, B, x = _layer(K=2, R=3, N=3)
    idata = factorial_posterior_draws(A, B, x, num_draws=2000, seed=0, method="enumeration")
    oh = idata.posterior["t_onehot"]
    assert oh.dims == ("chain", "draw", "example", "unit", "category")
    for dim in ("example", "unit", "category"):
        assert np.issubdtype(idata.posterior[dim].dtype, np.integer)
    with quiet_arviz():
        summary = az.summary(idata, var_names=["t_onehot"], kind="stats")
    exact = exact_posterior(A, B, x).marginals.numpy()
    means = summary["mean"].to_numpy().reshape(exact.shape)
    assert np.abs(means - exact).max() < 0.05
    mf = mean_field_map(A, B, x)
    assert "x" in mf.draws(10, seed=0).observed_data


def test_ladder_draws_have_integer_regions_and_per_level_indicators():
    lad = _gauss_ladder()
    x = sample_ladder(lad, 2, seed=0).inputs(dtype=F64)
    idata = posterior_event_draws(lad, x, num_draws=400, seed=1)
    post = idata.posterior
    assert list(post["region"].values) == list(range(lad.total_regions))
    assert list(post["region_name"].values) == lad.region_names()
    assert list(idata.observed_data["leaf"].values) == list(range(lad.num_regions[-1]))
    assert list(idata.observed_data["leaf_name"].values) == lad.region_names()[lad.level_offsets[-2]:]
    marg = posterior(lad, x, marginals=True).marginals
    for l in range(lad.depth + 1):
        oh = post[f"z_onehot_{l}"]
        assert oh.dims == ("chain", "draw", "example", f"region_{l}", f"event_{l}")
        assert oh.sum(f"event_{l}").values.min() == 1
        assert np.abs(oh.values.mean((0, 1)) - marg[l].numpy()).max() < 0.12
    assert "z_onehot_0" not in posterior_event_draws(lad, x, num_draws=4, onehot=False).posterior


def test_arviz_plots_emit_no_warnings():
    A, B, x = _layer(K=2, R=2, N=2)
    idata = factorial_posterior_draws(A, B, x, num_draws=50, seed=0, method="enumeration")
    import matplotlib.pyplot as plt

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig = plot_arviz("trace", idata, var_names=["t_onehot"], compact=True)
        plot_arviz("forest", idata, var_names=["t_onehot"], combined=True)
    plt.close("all")
    assert fig is not None
    assert [str(w.message)[:80] for w in caught] == []
    with pytest.raises(ValueError, match="plot: expected an ArviZ plotting function"):
        plot_arviz("no_such_plot", idata)
