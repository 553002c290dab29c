"""Batch Norm as a projection (smaso/student/batchnorm.py; framework paper Eq 10-12, Thm 5).

Reference: ``torch.nn.BatchNorm1d`` in training mode (affine weight = c1, bias = c0) and torch
autograd, in float64.  torch refuses eps = 0 in training mode, so "eps = 0" uses eps = 1e-300,
which leaves var + eps == var bit for bit in float64 (see ``conftest_student.torch_bn_eps``).
"""

from __future__ import annotations

import pytest
import torch
from conftest_student import assert_close, one_torch_thread, torch_bn_eps  # noqa: F401 (fixture)

from smaso.student.batchnorm import (
    bn_backward,
    bn_backward_weighted,
    bn_forward,
    bn_forward_weighted,
    projection_matrix,
)


def _batch(n=37, c=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    f = torch.randn(n, c, generator=g, dtype=torch.float64) * torch.linspace(0.5, 3, c, dtype=torch.float64) + 1.5
    f[:, 0] = torch.relu(f[:, 0] - 1.5)  # a ReLU-like column with many exact zeros
    grad = torch.randn(n, c, generator=g, dtype=torch.float64)
    c1 = 0.5 + torch.rand(c, generator=g, dtype=torch.float64)
    c0 = torch.randn(c, generator=g, dtype=torch.float64)
    return f, grad, c1, c0


def _torch_bn(f, grad, c1, c0, eps):
    bn = torch.nn.BatchNorm1d(f.shape[1], eps=torch_bn_eps(eps), dtype=torch.float64)
    bn.train()
    with torch.no_grad():
        bn.weight.copy_(c1)
        bn.bias.copy_(c0)
    x = f.clone().requires_grad_(True)
    out = bn(x)
    out.backward(grad)
    return out.detach(), x.grad, bn.weight.grad, bn.bias.grad


@pytest.mark.parametrize("eps", [0.0, 1e-5, 0.3])
@pytest.mark.parametrize("n", [2, 3, 37])
def test_bn_forward_backward_equal_torch_batchnorm1d(eps, n):
    f, grad, c1, c0 = _batch(n=n)
    out, g_f_ref, g_c1_ref, g_c0_ref = _torch_bn(f, grad, c1, c0, eps)
    fbar, f_tilde, mu, sigma = bn_forward(f, c1, c0, eps)
    assert_close(fbar, out, 1e-10, "fbar")
    assert_close(mu, f.mean(0), 1e-13, "mu")
    assert_close(sigma, (f.var(0, unbiased=False) + eps).sqrt(), 1e-12, "sigma (population std)")
    g_f, g_c1, g_c0 = bn_backward(grad, f_tilde, sigma, c1)
    assert_close(g_f, g_f_ref, 1e-10, "g_f")
    assert_close(g_c1, g_c1_ref, 1e-10, "g_c1")
    assert_close(g_c0, g_c0_ref, 1e-10, "g_c0")


def test_bn_on_3d_tensors_acts_per_column():
    """(N, R, n) tensors: every (region, node) column is normalized on its own (as the student uses it)."""
    g = torch.Generator().manual_seed(1)
    f = torch.randn(20, 3, 4, generator=g, dtype=torch.float64)
    grad = torch.randn(20, 3, 4, generator=g, dtype=torch.float64)
    c1 = torch.rand(3, 4, generator=g, dtype=torch.float64) + 0.5
    c0 = torch.randn(3, 4, generator=g, dtype=torch.float64)
    out, g_f_ref, g_c1_ref, g_c0_ref = _torch_bn(f.reshape(20, 12), grad.reshape(20, 12), c1.reshape(-1),
                                                 c0.reshape(-1), 1e-5)
    fbar, ft, _, sigma = bn_forward(f, c1, c0, 1e-5)
    assert_close(fbar.reshape(20, 12), out, 1e-10)
    g_f, g_c1, g_c0 = bn_backward(grad, ft, sigma, c1)
    assert_close(g_f.reshape(20, 12), g_f_ref, 1e-10)
    assert_close(g_c1.reshape(-1), g_c1_ref, 1e-10)
    assert_close(g_c0.reshape(-1), g_c0_ref, 1e-10)


def test_thm5_projection_form_eps0():
    """Thm 5: g_f = (c1 / sigma) P_perp_{f,1} g, and g_f is orthogonal to f and to 1."""
    f, grad, c1, c0 = _batch()
    _, ft, _, sigma = bn_forward(f, c1, c0, 0.0)
    g_f, _, _ = bn_backward(grad, ft, sigma, c1)
    for j in range(f.shape[1]):
        P = projection_matrix(f[:, j])
        assert_close(g_f[:, j], (c1[j] / sigma[j]) * (P @ grad[:, j]), 1e-12, f"column {j}")
        scale = grad[:, j].norm().item() * f[:, j].norm().item()
        assert abs(g_f[:, j] @ f[:, j]).item() <= 1e-12 * scale * c1[j] / sigma[j]
        assert abs(g_f[:, j].sum()).item() <= 1e-12 * scale
    # eps > 0: still zero-mean, but no longer exactly orthogonal to f (var / (var + eps) < 1)
    _, ft, _, sigma = bn_forward(f, c1, c0, 0.5)
    g_f, _, _ = bn_backward(grad, ft, sigma, c1)
    assert g_f.sum(0).abs().max().item() < 1e-12
    assert (g_f * f).sum(0).abs().max().item() > 1e-3


def test_projection_matrix_properties():
    f, _, _, _ = _batch(n=23)
    for j in range(f.shape[1]):
        P = projection_matrix(f[:, j])
        assert_close(P @ P, P, 1e-12, "idempotent")
        assert_close(P, P.T, 0, "symmetric")
        assert P @ f[:, j] @ P @ f[:, j] < 1e-20 * f[:, j].norm() ** 2  # f is in the kernel
        assert_close(P @ torch.ones(23, dtype=torch.float64), torch.zeros(23, dtype=torch.float64), 1e-13, "P 1")
        # rank N - 2: trace of a projection = its rank
        assert torch.trace(P).item() == pytest.approx(21, abs=1e-10)
        # same kernel as the textbook projector onto span{f, 1}^perp built from a QR basis
        S = torch.stack([f[:, j], torch.ones(23, dtype=torch.float64)], 1)
        Q, _ = torch.linalg.qr(S)
        assert_close(P, torch.eye(23, dtype=torch.float64) - Q @ Q.T, 1e-12, "vs QR projector")


def _repeat_dataset(seed=0, m=6, n=3):
    """Event-level F, G and integer counts (one event never occurs); the dataset that repeats event
    a's row counts[a] times."""
    g = torch.Generator().manual_seed(seed)
    F_ = torch.randn(m, n, generator=g, dtype=torch.float64)
    G = torch.randn(m, n, generator=g, dtype=torch.float64)
    counts = torch.tensor([3, 1, 0, 7, 2, 5][:m])
    rows = torch.repeat_interleave(torch.arange(m), counts)
    return F_, G, counts, rows


@pytest.mark.parametrize("eps", [0.0, 1e-5])
def test_weighted_bn_equals_batch_bn_on_repeated_rows(eps):
    """Eq 12: with p = counts / N the weighted forms are the batch forms on the repeated dataset."""
    F_, G, counts, rows = _repeat_dataset()
    N = counts.sum().item()
    p = counts.double() / N
    c1 = torch.tensor([0.7, 1.3, 2.0], dtype=torch.float64)
    c0 = torch.tensor([0.1, -0.4, 0.0], dtype=torch.float64)
    Fbar_w, Ft_w, mu_w, sig_w = bn_forward_weighted(F_, p, c1, c0, eps)
    # reference: torch's BatchNorm1d on the repeated dataset, gradient g[i] = G[event of i]
    out, g_f_ref, _, _ = _torch_bn(F_[rows], G[rows], c1, c0, eps)
    _, _, mu_b, sig_b = bn_forward(F_[rows], c1, c0, eps)
    assert_close(mu_w, mu_b, 1e-13)
    assert_close(sig_w, sig_b, 1e-13)
    assert_close(Fbar_w[rows], out, 1e-12, "weighted forward")
    # backward on P-weighted gradients: G~_f[a] = p_a * (batch g_f of any row of event a)
    G_tilde = p[:, None] * G
    Gf_w = bn_backward_weighted(G_tilde, Ft_w, p, sig_w, c1)
    assert_close(Gf_w[rows], p[rows, None] * g_f_ref, 1e-12, "weighted backward")
    assert Gf_w[2].abs().max().item() == 0.0  # the empty event
    # 1^T G~_f = 0 (centred gradient of Thm 9), and with eps = 0 also F~^T G~_f / p-orthogonality to F
    assert Gf_w.sum(0).abs().max().item() < 1e-13
    if eps == 0:
        assert (F_ * Gf_w).sum(0).abs().max().item() < 1e-13


def test_weighted_bn_on_3d_and_1_t_G_zero_for_random_weights():
    g = torch.Generator().manual_seed(5)
    F_ = torch.randn(2, 7, 3, generator=g, dtype=torch.float64).transpose(0, 1)  # (m=7, R=2, n=3)
    G = torch.randn(7, 2, 3, generator=g, dtype=torch.float64)
    p = torch.rand(7, generator=g, dtype=torch.float64)
    p = p / p.sum()
    c1, c0 = torch.full((2, 3), 1.5, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.float64)
    Fbar, Ft, _, sigma = bn_forward_weighted(F_, p, c1, c0, 1e-5)
    assert_close((p[:, None, None] * Ft).sum(0), torch.zeros(2, 3, dtype=torch.float64), 1e-13, "p-mean of F~")
    for r in range(2):  # each column equals the 2-D call on that column
        Fb2, _, _, _ = bn_forward_weighted(F_[:, r], p, c1[r], c0[r], 1e-5)
        assert_close(Fbar[:, r], Fb2, 1e-14)
    Gf = bn_backward_weighted(p[:, None, None] * G, Ft, p, sigma, c1)
    assert Gf.sum(0).abs().max().item() < 1e-13
