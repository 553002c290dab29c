"""Figures of hard / soft / beta-VQ (smaso.plots.vq): files written, numbers against independent closed forms."""

from __future__ import annotations

import math

import arviz as az
import numpy as np
import pytest
import torch

from smaso.plots.vq import (
    plot_activation_family,
    plot_region_draws,
    plot_table1,
    plot_vq_partition,
    table1_curves,
    vq_partition,
)
from smaso.splines.maso import MASO, region_probabilities

F64 = torch.float64


def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def _relu_unit():
    return MASO.from_linear_relu(torch.ones(1, 1, dtype=F64), torch.zeros(1, dtype=F64))


def _layer2d():
    W = torch.tensor([[1.0, 0.3], [-0.4, 1.0], [0.8, -0.9]], dtype=F64)
    b = torch.tensor([0.2, -0.3, 0.5], dtype=F64)
    return MASO.from_linear_relu(W, b), W.numpy(), b.numpy()


# ---------------------------------------------------------------------- activation family
def test_activation_family_draws_relu_silu_swish_and_linear(tmp_path):
    x = torch.linspace(-4, 4, 41, dtype=F64)[:, None]
    betas = [1.0, 0.75, 0.5, 0.0]
    xp = torch.linspace(-3, 3, 7, dtype=F64)[:, None]
    tp = torch.stack([1 - torch.sigmoid(xp), torch.sigmoid(xp)], -1)  # (7, 1, 2): the soft VQ
    path = tmp_path / "family.png"
    fig = plot_activation_family(_relu_unit(), betas, x, points={0.5: (xp, tp)}, path=path)
    assert path.exists() and path.stat().st_size > 5000
    u = x[:, 0].numpy()
    ax_z, ax_t = fig.axes
    # lines are drawn in decreasing beta: ReLU, swish eta = 3, SiLU, u / 2
    refs = [np.maximum(u, 0), u * _sig(3 * u), u * _sig(u), u / 2]
    probs = [(u > 0).astype(float), _sig(3 * u), _sig(u), np.full_like(u, 0.5)]
    for line, ref in zip(ax_z.lines, refs, strict=True):
        np.testing.assert_allclose(line.get_ydata(), ref, atol=1e-12)
    for line, ref in zip(ax_t.lines, probs, strict=True):
        np.testing.assert_allclose(line.get_ydata(), ref, atol=1e-12)
    # the inference points: outputs sum_r t_r s_r computed by the plot = SiLU at those inputs
    offsets = ax_z.collections[0].get_offsets()
    up = xp[:, 0].numpy()
    np.testing.assert_allclose(offsets[:, 1], up * _sig(up), atol=1e-12)


def test_activation_family_bad_input():
    x = torch.linspace(-1, 1, 5, dtype=F64)[:, None]
    two = MASO.from_linear_relu(torch.ones(2, 1, dtype=F64))
    with pytest.raises(ValueError, match="layer"):
        plot_activation_family(two, [0.5], x)
    with pytest.raises(TypeError, match="layer"):
        plot_activation_family("relu", [0.5], x)
    with pytest.raises(ValueError, match="betas"):
        plot_activation_family(_relu_unit(), [1.5], x)
    with pytest.raises(ValueError, match="betas"):
        plot_activation_family(_relu_unit(), [], x)
    with pytest.raises(ValueError, match="x"):
        plot_activation_family(_relu_unit(), [0.5], x[:, 0])
    with pytest.raises(ValueError, match="points"):
        plot_activation_family(_relu_unit(), [0.5], x, points={0.5: (x, torch.ones(5, 1, 3, dtype=F64))})


# ---------------------------------------------------------------------- Table 1
def test_table1_curves_are_the_closed_forms_of_table1(tmp_path):
    u = torch.linspace(-5, 5, 101, dtype=F64)
    un = u.numpy()
    beta, nu, c = 0.8, 0.1, 1.0
    eta = beta / (1 - beta)
    curves = table1_curves(u, beta, nu=nu, pool_with=c)
    relu, leaky, absv, maxp, avgp = (curves[k] for k in curves)
    for col, e in (("soft", 1.0), ("beta", eta)):
        np.testing.assert_allclose(relu[col]["z"], un * _sig(e * un), atol=1e-12)
        np.testing.assert_allclose(relu[col]["t"], _sig(e * un), atol=1e-12)
        np.testing.assert_allclose(leaky[col]["z"], un * (nu + (1 - nu) * _sig(e * (1 - nu) * un)), atol=1e-12)
        np.testing.assert_allclose(leaky[col]["t"], _sig(e * (1 - nu) * un), atol=1e-12)
        np.testing.assert_allclose(absv[col]["z"], un * np.tanh(e * un), atol=1e-12)
        np.testing.assert_allclose(absv[col]["t"], np.tanh(e * un), atol=1e-12)
        w = np.exp(e * un) / (np.exp(e * un) + np.exp(e * c))
        np.testing.assert_allclose(maxp[col]["z"], w * un + (1 - w) * c, atol=1e-12)
        np.testing.assert_allclose(maxp[col]["t"], w, atol=1e-12)
    np.testing.assert_allclose(relu["hard"]["z"], np.maximum(un, 0), atol=0)
    np.testing.assert_allclose(leaky["hard"]["z"], np.maximum(un, nu * un), atol=1e-15)
    np.testing.assert_allclose(absv["hard"]["z"], np.abs(un), atol=0)
    np.testing.assert_allclose(maxp["hard"]["z"], np.maximum(un, c), atol=0)
    # beta -> 0 limits (Table 1's last line)
    np.testing.assert_allclose(relu["linear"]["z"], un / 2, atol=1e-15)
    np.testing.assert_allclose(leaky["linear"]["z"], (1 + nu) * un / 2, atol=1e-15)
    np.testing.assert_allclose(absv["linear"]["z"], 0 * un, atol=1e-15)
    np.testing.assert_allclose(maxp["linear"]["z"], (un + c) / 2, atol=1e-15)
    for col in ("hard", "soft", "beta", "linear"):  # average pool: R = 1, no VQ at all
        np.testing.assert_allclose(avgp[col]["z"], (un + c) / 2, atol=1e-15)
        np.testing.assert_allclose(avgp[col]["t"], 1.0)
    path = tmp_path / "t1.png"
    fig = plot_table1(u, beta, nu=nu, pool_with=c, path=path)
    assert path.exists() and path.stat().st_size > 5000
    assert len(fig.axes) == 5 * 4
    swish = fig.axes[2].lines[2]  # after the hard reference (dashed) and the beta -> 0 limit (dotted)
    np.testing.assert_allclose(swish.get_ydata(), un * _sig(eta * un), atol=1e-12)


def test_table1_bad_input():
    u = torch.linspace(-1, 1, 5, dtype=F64)
    for beta in (0.0, 1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="beta"):
            table1_curves(u, beta)
    with pytest.raises(ValueError, match="nu"):
        table1_curves(u, 0.5, nu=1.0)
    with pytest.raises(ValueError, match="u"):
        plot_table1(u[:, None], 0.5)
    with pytest.raises(ValueError, match="pool_with"):
        table1_curves(u, 0.5, pool_with=math.inf)


# ---------------------------------------------------------------------- partition of a 2-D layer
def test_vq_partition_grid_against_numpy(tmp_path):
    layer, W, b = _layer2d()
    data = vq_partition(layer, (0.5, 0.8), extent=(-2, 2, -1, 3), resolution=31)
    gx, gy = np.meshgrid(np.linspace(-2, 2, 31), np.linspace(-1, 3, 31))  # row = x2, column = x1
    u = gx[..., None] * W[:, 0] + gy[..., None] * W[:, 1] + b  # (H, W, K)
    active = (u > 0).astype(int)
    clear = (np.abs(u) > 1e-9).all(-1)  # grid points on a boundary (u = 0 up to rounding) may go either way
    np.testing.assert_array_equal(data["regions"][clear], active[clear])
    code = active[..., 0] + 2 * active[..., 1] + 4 * active[..., 2]
    np.testing.assert_array_equal(data["code"][clear], code[clear])
    for beta in (0.5, 0.8):
        p_on = _sig(beta / (1 - beta) * u)  # ReLU MASO: softmax over the scores (0, u)
        np.testing.assert_allclose(data["probs"][beta][..., 1], p_on, atol=1e-12)
        np.testing.assert_allclose(data["probs"][beta][..., 0], 1 - p_on, atol=1e-12)
        np.testing.assert_allclose(data["hard_region_prob"][beta], np.where(active, p_on, 1 - p_on).prod(-1),
                                   atol=1e-12)
    path = tmp_path / "partition.png"
    pts = torch.tensor([[0.0, 0.0], [1.0, 2.0]], dtype=F64)
    fig = plot_vq_partition(layer, (0.5, 0.8), extent=(-2, 2, -1, 3), resolution=31, points=pts, path=path)
    assert path.exists() and path.stat().st_size > 5000
    axes = fig.axes
    # row 1, unit 0 image: P(unit 0 active) at beta = 1/2; row 2, last column: P(hard region) at beta = 0.8
    np.testing.assert_allclose(np.asarray(axes[4].images[0].get_array()), _sig(u[..., 0]), atol=1e-12)
    p8 = _sig(4 * u)
    np.testing.assert_allclose(np.asarray(axes[11].images[0].get_array()),
                               np.where(active, p8, 1 - p8).prod(-1), atol=1e-12)


def test_vq_partition_general_maso_and_bad_input():
    g = torch.Generator().manual_seed(0)
    layer = MASO(torch.randn(2, 3, 2, generator=g, dtype=F64), torch.randn(2, 3, generator=g, dtype=F64))
    data = vq_partition(layer, (0.3,), resolution=9)
    assert data["code"].max() < 9 and data["probs"][0.3].shape == (9, 9, 2, 3)
    np.testing.assert_allclose(data["probs"][0.3].sum(-1), 1.0, atol=1e-12)
    fig = plot_vq_partition(layer, (0.3,), resolution=9)
    assert len(fig.axes) >= 6
    one_d = MASO.from_linear_relu(torch.ones(2, 1, dtype=F64))
    with pytest.raises(ValueError, match="layer"):
        vq_partition(one_d)
    with pytest.raises(ValueError, match="extent"):
        vq_partition(layer, extent=(1, -1, 0, 1))
    with pytest.raises(ValueError, match="resolution"):
        vq_partition(layer, resolution=1)
    with pytest.raises(ValueError, match="betas"):
        vq_partition(layer, (2.0,))
    with pytest.raises(ValueError, match="points"):
        plot_vq_partition(layer, points=torch.zeros(3, 3, dtype=F64), resolution=5)


# ---------------------------------------------------------------------- region draws (ArviZ)
def _idata(t):
    return az.from_dict(posterior={"t": t}, dims={"t": ["example", "unit"]})


def test_region_draws_frequencies_and_file(tmp_path):
    layer, _, _ = _layer2d()
    x = torch.tensor([[0.5, 0.5], [-1.0, 1.5]], dtype=F64)
    probs = region_probabilities(layer.A, layer.B, x, 0.5)  # (2, 3, 2)
    rng = np.random.default_rng(0)
    t = (rng.random((2, 400, 2, 3)) < probs[..., 1].numpy()).astype(np.int64)
    path = tmp_path / "draws.png"
    fig = plot_region_draws({"synthetic": _idata(t)}, probs, path=path)
    assert path.exists() and path.stat().st_size > 5000
    ax = fig.axes[0]
    # the errorbar's data points are the draw frequencies of region 1 per (example, unit)
    ys = ax.lines[0].get_ydata()
    np.testing.assert_allclose(ys, t.mean((0, 1)).reshape(-1), atol=1e-12)


def test_region_draws_bad_input():
    probs = torch.full((2, 3, 2), 0.5, dtype=F64)
    t = np.zeros((2, 10, 2, 3), dtype=np.int64)
    with pytest.raises(ValueError, match="draws"):
        plot_region_draws({}, probs)
    with pytest.raises(ValueError, match="probs"):
        plot_region_draws({"a": _idata(t)}, probs[0])
    with pytest.raises(ValueError, match="region"):
        plot_region_draws({"a": _idata(t)}, probs, region=2)
    with pytest.raises(ValueError, match="draws"):
        plot_region_draws({"a": _idata(t[:, :, :1])}, probs)
