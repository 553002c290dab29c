"""MASO (``smaso.splines.maso``): Eq 1-2 and the layers of ``docs/theory.md`` §3 written exactly as max-affine
splines."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from smaso.splines.maso import MASO, channel_pool_windows, pool_windows_1d

DT = torch.float64


@pytest.fixture
def layer():
    g = torch.Generator().manual_seed(0)
    W = torch.randn(7, 5, generator=g, dtype=DT)
    b = torch.randn(7, generator=g, dtype=DT)
    x = 3 * torch.randn(200, 5, generator=g, dtype=DT)
    return W, b, x


def test_forward_scores_and_hard_vq_follow_eq1_eq2(layer):
    x = layer[2]
    g = torch.Generator().manual_seed(1)
    A, B = torch.randn(4, 3, 5, generator=g, dtype=DT), torch.randn(4, 3, generator=g, dtype=DT)
    m = MASO(A, B)
    assert (m.K, m.R, m.D) == (4, 3, 5) and "K=4" in repr(m)
    scores = m.region_scores(x)
    assert scores.shape == (200, 4, 3)
    ref = torch.einsum("krd,nd->nkr", A, x) + B  # Eq 1 term by term
    torch.testing.assert_close(scores, ref)
    torch.testing.assert_close(m(x), ref.amax(-1))
    t = m.hard_regions(x)
    assert t.shape == (200, 4, 3) and t.dtype == DT
    assert torch.equal(t.sum(-1), torch.ones(200, 4, dtype=DT))
    assert torch.equal(t.argmax(-1), ref.argmax(-1))
    torch.testing.assert_close(m.vq_outputs(x, t), m(x))  # Eq 2: z = sum_r t_r (<A,x> + B)


def test_layers_reproduced_exactly(layer):
    W, b, x = layer
    u = x @ W.T + b
    relu = MASO.from_linear_relu(W, b)
    assert relu.R == 2 and torch.equal(relu.A[:, 0], torch.zeros_like(W)) and torch.equal(relu.A[:, 1], W)
    assert relu.reproduction_error(lambda v: torch.relu(v @ W.T + b), x) <= 1e-12
    assert relu.reproduction_error(lambda v: torch.relu(F.linear(v, W, b)), x) <= 1e-12
    for nu in (0.01, 0.2, -0.3):
        assert MASO.from_linear_leaky_relu(W, b, nu).reproduction_error(
            lambda v, nu=nu: F.leaky_relu(F.linear(v, W, b), nu), x) <= 1e-12
    assert MASO.from_linear_abs(W, b).reproduction_error(lambda v: F.linear(v, W, b).abs(), x) <= 1e-12
    nob = MASO.from_linear_relu(W)
    assert nob.reproduction_error(lambda v: torch.relu(v @ W.T), x) <= 1e-12
    # the hard VQ of the ReLU MASO is the ReLU's gate
    assert torch.equal(relu.hard_regions(x)[..., 1], (u > 0).to(DT))
    # a layer the MASO does not write is caught
    assert relu.reproduction_error(lambda v: F.silu(F.linear(v, W, b)), x) > 0.1


def test_float32_layers_to_rounding():
    g = torch.Generator().manual_seed(2)
    W, b = torch.randn(16, 32, generator=g), torch.randn(16, generator=g)
    x = torch.randn(64, 32, generator=g)
    assert MASO.from_linear_relu(W, b).reproduction_error(lambda v: torch.relu(F.linear(v, W, b)), x) < 1e-5


@pytest.mark.parametrize(("C", "L", "k", "s"), [(1, 10, 2, 2), (3, 11, 3, 2), (2, 8, 4, 1), (4, 5, 5, None)])
def test_pooling_reproduced_exactly(C, L, k, s):
    g = torch.Generator().manual_seed(3)
    maps = torch.randn(40, C, L, generator=g, dtype=DT)
    x = maps.reshape(40, C * L)
    windows = pool_windows_1d(C, L, k, s)

    def unflat(fn):
        return lambda v: fn(v.reshape(-1, C, L), k, s)

    mx = MASO.max_pool(C * L, windows)
    assert mx.R == k and mx.reproduction_error(unflat(F.max_pool1d), x) == 0.0
    avg = MASO.avg_pool(C * L, windows)
    assert avg.R == 1 and avg.reproduction_error(unflat(F.avg_pool1d), x) <= 1e-14
    # max pooling's hard VQ picks the max's position in each window
    t = mx.hard_regions(x)
    idx = torch.tensor(windows)[None].expand(40, -1, -1)
    assert torch.equal(torch.gather(x[:, None, :].expand(-1, len(windows), -1), 2, idx).argmax(-1), t.argmax(-1))


def test_channel_pooling_and_ragged_windows():
    g = torch.Generator().manual_seed(4)
    maps = torch.randn(30, 6, 4, generator=g, dtype=DT)
    x = maps.reshape(30, -1)
    for group in (2, 3):
        m = MASO.max_pool(24, channel_pool_windows(6, 4, group))
        assert m.reproduction_error(lambda v, gr=group: v.reshape(-1, 6 // gr, gr, 4).amax(2), x) == 0.0
        a = MASO.avg_pool(24, channel_pool_windows(6, 4, group))
        assert a.reproduction_error(lambda v, gr=group: v.reshape(-1, 6 // gr, gr, 4).mean(2), x) <= 1e-14
    ragged = [[0], [1, 2, 3], [4, 7]]
    m = MASO.max_pool(8, ragged)
    ref = torch.stack([x[:, w].amax(1) for w in ragged], 1)
    assert m.R == 3 and torch.equal(m(x[:, :8]), ref[:, :])


def test_bad_inputs_raise_clear_errors(layer):
    W, b, x = layer
    A, B = torch.randn(4, 3, 5, dtype=DT), torch.randn(4, 3, dtype=DT)
    with pytest.raises(ValueError, match="A/B shape mismatch"):
        MASO(A, torch.randn(4, 2, dtype=DT))
    with pytest.raises(ValueError, match="A/B shape mismatch"):
        MASO(A, torch.randn(3, 3, dtype=DT))
    with pytest.raises(ValueError, match=r"\(K, R, D\)"):
        MASO(torch.randn(4, 5, dtype=DT), B)
    with pytest.raises(ValueError, match=r"B: expected offsets"):
        MASO(A, torch.randn(12, dtype=DT))
    with pytest.raises(TypeError, match="dtype mismatch"):
        MASO(A, B.float())
    with pytest.raises(TypeError, match="floating-point"):
        MASO(A.long(), B)
    with pytest.raises(ValueError, match="finite"):
        MASO(A, B.clone().fill_(float("nan")))
    m = MASO(A, B)
    with pytest.raises(ValueError, match=r"x: expected shape \(N, D\) with D = 5"):
        m(torch.randn(3, 4, dtype=DT))
    with pytest.raises(TypeError, match="x: expected dtype"):
        m(torch.randn(3, 5))
    with pytest.raises(ValueError, match="t: expected region weights"):
        m.vq_outputs(x, torch.ones(200, 4, 2, dtype=DT))
    with pytest.raises(ValueError, match=r"b: expected a bias of shape \(7,\)"):
        MASO.from_linear_relu(W, b[:3])
    with pytest.raises(ValueError, match="nu"):
        MASO.from_linear_leaky_relu(W, b, 2.0)
    with pytest.raises(ValueError, match="windows"):
        MASO.max_pool(5, [[0, 7]])
    with pytest.raises(ValueError, match="empty"):
        MASO.avg_pool(5, [[]])
    with pytest.raises(ValueError, match="kernel_size"):
        pool_windows_1d(2, 3, 4)
    with pytest.raises(ValueError, match="group"):
        channel_pool_windows(5, 2, 2)
    with pytest.raises(ValueError, match="N \\* K"):
        MASO.from_linear_relu(W, b).reproduction_error(lambda v: v, x)


def test_region_probabilities_limits_ties_and_per_unit_beta():
    """One beta-VQ function (Eq 5-9): the method and the function agree; beta = 1 shares ties equally (the limit
    of softmax(eta s)), hard_regions breaks them to the first region; a per-unit beta of 1 is exact in float32."""
    from smaso.splines.functional import eta_from_beta
    from smaso.splines.maso import hard_regions, region_probabilities, region_scores, vq_outputs

    W = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=DT)
    relu = MASO.from_linear_relu(W, torch.zeros(3, dtype=DT))
    x = torch.tensor([[0.0, 2.0], [3.0, -1.0], [-2.0, 2.0]], dtype=DT)  # u has exact zeros: ties of the two pieces
    t1 = region_probabilities(relu.A, relu.B, x, 1.0)
    u = x @ W.T
    assert torch.equal(t1[..., 1], (torch.sign(u) + 1) / 2)  # 1/2 at every tie u = 0, else the one-hot
    assert torch.equal(hard_regions(relu.A, relu.B, x)[..., 1], (u > 0).to(DT))
    s = region_scores(relu.A, relu.B, x)
    torch.testing.assert_close(vq_outputs(t1, s), torch.relu(u), rtol=0, atol=0)  # same outputs either way
    for beta in (0.0, 0.3, 0.5, 0.8, 1.0):
        torch.testing.assert_close(relu.region_probabilities(x, beta), region_probabilities(relu.A, relu.B, x, beta),
                                   rtol=0, atol=0)
        torch.testing.assert_close(relu.beta_vq_outputs(x, beta), vq_outputs(relu.region_probabilities(x, beta), s),
                                   rtol=1e-15, atol=1e-15)
    # per-unit beta, float32, scores far above 1: the hard units are exact one-hots (no clamped-eta softmax)
    A32, B32 = (relu.A * 50).float(), relu.B.float()
    x32 = torch.tensor([[3.0, 2.0], [4.0, 5.0]])
    betas = torch.tensor([1.0, 0.5, 1.0])
    t = region_probabilities(A32, B32, x32, betas)
    s32 = region_scores(A32, B32, x32)
    hard = torch.nn.functional.one_hot(s32.argmax(-1), 2).float()
    assert torch.equal(t[:, [0, 2]], hard[:, [0, 2]])
    torch.testing.assert_close(t[:, 1], torch.softmax(s32[:, 1], -1), rtol=0, atol=0)
    # eta of a tensor beta: exact inf at 1, a zero gradient there
    b = torch.tensor([0.0, 0.5, 0.75, 1.0], dtype=DT, requires_grad=True)
    eta = eta_from_beta(b)
    assert eta.tolist() == [0.0, 1.0, 3.0, float("inf")]
    eta[:3].sum().backward()
    assert b.grad.tolist() == [1.0, 4.0, 16.0, 0.0]


def test_beta_vq_outputs_take_one_beta_per_unit():
    g = torch.Generator().manual_seed(5)
    for K in (2, 3):  # K == R and K != R (a per-unit beta must not be read as one per region)
        W, b = torch.randn(K, 4, generator=g, dtype=DT), torch.randn(K, generator=g, dtype=DT)
        m = MASO.from_linear_relu(W, b)
        x = torch.randn(30, 4, generator=g, dtype=DT)
        betas = torch.linspace(0.2, 0.9, K, dtype=DT)
        u = x @ W.T + b
        expected = u * torch.sigmoid(betas / (1 - betas) * u)
        torch.testing.assert_close(m.beta_vq_outputs(x, betas), expected, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(m.beta_vq_outputs(x, betas), m.vq_outputs(x, m.region_probabilities(x, betas)),
                                   rtol=1e-12, atol=1e-12)
