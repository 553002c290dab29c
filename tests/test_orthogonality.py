"""Orthogonality (``smaso.splines.orthogonality``): the paper's penalty, the Eq 11 defect, Gram-Schmidt and
``orthogonal``."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from smaso.splines.maso import MASO
from smaso.splines.orthogonality import (
    GramSchmidt,
    gram_schmidt,
    model_orthogonality_penalty,
    orthogonality_defect,
    orthogonality_penalty,
    register_gram_schmidt,
    register_orthogonal,
)

DT = torch.float64


def _brute_penalty(A: torch.Tensor) -> float:
    K, R, _ = A.shape
    return sum(float(A[k, r] @ A[k2, r2]) ** 2
               for k, k2 in itertools.permutations(range(K), 2) for r in range(R) for r2 in range(R))


def _orthogonal_rows(K, D, seed=0):
    q, _ = torch.linalg.qr(torch.randn(D, K, generator=torch.Generator().manual_seed(seed), dtype=DT))
    return q.T * torch.linspace(0.5, 3, K, dtype=DT)[:, None]  # orthogonal, unequal norms


def test_penalty_matches_definition():
    g = torch.Generator().manual_seed(0)
    A = torch.randn(4, 3, 6, generator=g, dtype=DT)
    assert orthogonality_penalty(A).item() == pytest.approx(_brute_penalty(A), rel=1e-12)
    assert orthogonality_penalty(MASO(A, torch.zeros(4, 3, dtype=DT)), lam=0.5).item() == pytest.approx(
        0.5 * _brute_penalty(A), rel=1e-12)
    for K, D in ((5, 8), (9, 4)):  # both Gram orders for a weight
        W = torch.randn(K, D, generator=g, dtype=DT)
        assert orthogonality_penalty(W).item() == pytest.approx(_brute_penalty(W[:, None]), rel=1e-10)
        # linear + ReLU: the zero piece adds nothing, so the MASO's penalty is the rows' penalty
        relu = MASO.from_linear_relu(W, torch.randn(K, generator=g, dtype=DT))
        assert orthogonality_penalty(relu).item() == pytest.approx(orthogonality_penalty(W).item(), rel=1e-10)


def test_penalty_zero_iff_orthogonal_and_differentiable():
    W = _orthogonal_rows(5, 8)
    assert orthogonality_penalty(W).item() == pytest.approx(0.0, abs=1e-20)
    d = orthogonality_defect(W)
    assert d.penalty < 1e-20 and d.relative < 1e-20 and d.max_abs_cosine < 1e-12 and d.orthogonal
    assert orthogonality_penalty(MASO.from_linear_abs(W, torch.ones(5, dtype=DT))).item() < 1e-20
    bent = W.clone()
    bent[1] += 0.1 * W[0]
    assert orthogonality_penalty(bent).item() > 1e-4
    d = orthogonality_defect(bent)
    assert 0 < d.relative < 1 and 0 < d.max_abs_cosine < 1 and not d.orthogonal
    parallel = torch.randn(1, 6, dtype=DT).repeat(3, 1) * torch.tensor([[1.0], [-2.0], [3.0]], dtype=DT)
    d = orthogonality_defect(parallel)
    assert d.relative == pytest.approx(1.0) and d.max_abs_cosine == pytest.approx(1.0)
    Wg = torch.randn(4, 6, dtype=DT, requires_grad=True)
    assert torch.autograd.gradcheck(orthogonality_penalty, (Wg,))
    # descending the penalty makes a layer orthogonal
    w = nn.Parameter(torch.randn(4, 10, dtype=DT))
    opt = torch.optim.Adam([w], lr=0.05)
    for _ in range(300):
        opt.zero_grad()
        orthogonality_penalty(w).backward()
        opt.step()
    assert orthogonality_defect(w).max_abs_cosine < 1e-2


def test_gram_schmidt_rows_are_orthogonal():
    g = torch.Generator().manual_seed(1)
    for K, D in ((1, 3), (4, 4), (6, 10)):
        W = torch.randn(K, D, generator=g, dtype=DT)
        V = gram_schmidt(W)
        assert V.shape == W.shape
        assert orthogonality_defect(V).max_abs_cosine < 1e-10
        torch.testing.assert_close(V[0], W[0])  # unnormalized: the first row is untouched
        # classical GS: v_k = w_k minus its projection on span(w_1..w_{k-1})
        for k in range(1, K):
            Q, _ = torch.linalg.qr(W[:k].T)
            torch.testing.assert_close(V[k], W[k] - Q @ (Q.T @ W[k]))
    already = _orthogonal_rows(3, 7)
    torch.testing.assert_close(gram_schmidt(already), already)
    dependent = torch.tensor([[1.0, 0, 0], [2.0, 0, 0], [0, 1.0, 0]], dtype=DT)
    V = gram_schmidt(dependent)
    assert torch.isfinite(V).all() and V[1].abs().max() < 1e-15
    Wg = torch.randn(3, 5, generator=g, dtype=DT, requires_grad=True)
    assert torch.autograd.gradcheck(gram_schmidt, (Wg,))


def test_parametrizations_on_linear():
    torch.manual_seed(0)
    lin = register_gram_schmidt(nn.Linear(12, 5).double())
    assert isinstance(lin.parametrizations.weight[0], GramSchmidt)
    assert orthogonality_defect(lin.weight).max_abs_cosine < 1e-10
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    x = torch.randn(32, 12, dtype=DT)
    for _ in range(5):
        opt.zero_grad()
        lin(x).pow(2).sum().backward()
        opt.step()
    assert orthogonality_defect(lin.weight).max_abs_cosine < 1e-10  # stays orthogonal while training
    assert lin.parametrizations.weight.original.grad is not None
    orth = register_orthogonal(nn.Linear(12, 5).double())
    W = orth.weight
    torch.testing.assert_close(W @ W.T, torch.eye(5, dtype=DT))
    assert orthogonality_defect(orth.weight).orthogonal
    model = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 3))
    expected = orthogonality_penalty(model[0].weight) + orthogonality_penalty(model[2].weight)
    torch.testing.assert_close(model_orthogonality_penalty(model), expected)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="out_features <= in_features"):
        gram_schmidt(torch.randn(5, 3))
    with pytest.raises(ValueError, match="out_features <= in_features"):
        register_gram_schmidt(nn.Linear(3, 5))
    with pytest.raises(ValueError, match="out_features <= in_features"):
        register_orthogonal(nn.Linear(3, 5))
    with pytest.raises(ValueError, match="2-D weight"):
        register_gram_schmidt(nn.Linear(3, 2), name="bias")
    with pytest.raises(ValueError, match="lam"):
        orthogonality_penalty(torch.randn(3, 4), lam=-1.0)
    with pytest.raises(ValueError, match="shape"):
        orthogonality_penalty(torch.randn(2, 3, 4, 5))
    with pytest.raises(TypeError, match="floating-point"):
        orthogonality_defect(torch.ones(3, 4, dtype=torch.long))


def test_conv_filters_flattened_to_rows():
    """Convolutions: the filters ``(K, C*kh*kw)`` are the rows of Eq 11 (penalty, Gram-Schmidt, orthogonal)."""
    torch.manual_seed(0)
    orth = register_orthogonal(nn.Conv2d(3, 12, 3).double())  # 12 filters in R^27
    F = orth.weight.flatten(1)
    assert orth.weight.shape == (12, 3, 3, 3) and orth.parametrizations.weight.original.shape == (12, 27)
    assert (F @ F.T - torch.eye(12, dtype=DT)).abs().max() < 1e-6  # orthonormal filters
    x = torch.randn(2, 3, 6, 6, dtype=DT)
    opt = torch.optim.SGD(orth.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        orth(x).pow(2).sum().backward()
        opt.step()
    F = orth.weight.flatten(1)
    assert (F @ F.T - torch.eye(12, dtype=DT)).abs().max() < 1e-6  # and stays so while training
    gs = register_gram_schmidt(nn.Conv1d(2, 4, 3).double())
    assert gs.parametrizations.weight.original.shape == (4, 2, 3)
    assert orthogonality_defect(gs.weight.flatten(1)).max_abs_cosine < 1e-10
    torch.testing.assert_close(gs.weight[0], gs.parametrizations.weight.original[0])  # unnormalized: row 0 kept
    # penalty on a small conv by hand: filters f0 = [1, 0, 1, 0], f1 = [1, 1, 0, 0], f2 = [0, 0, 2, 1]
    conv = nn.Conv2d(1, 3, 2, bias=False)
    with torch.no_grad():
        conv.weight.copy_(torch.tensor([[1.0, 0, 1, 0], [1, 1, 0, 0], [0, 0, 2, 1]]).reshape(3, 1, 2, 2))
    # <f0,f1> = 1, <f0,f2> = 2, <f1,f2> = 0; both orders: 2 * (1 + 4 + 0) = 10
    assert model_orthogonality_penalty(nn.Sequential(conv, nn.ReLU())).item() == pytest.approx(10.0)
    assert model_orthogonality_penalty(nn.Sequential(conv), lam=0.5).item() == pytest.approx(5.0)
    lin = nn.Linear(4, 2)
    both = nn.Sequential(conv, nn.Flatten(), lin)
    torch.testing.assert_close(model_orthogonality_penalty(both), 10.0 + orthogonality_penalty(lin.weight))
    # transposed convolutions (weight (in, out, ...)) are not filters-as-rows: left out of the sum
    assert model_orthogonality_penalty(nn.Sequential(nn.ConvTranspose2d(1, 3, 2))).item() == 0.0


def test_conv_with_more_filters_than_filter_entries_raises():
    for register in (register_gram_schmidt, register_orthogonal):
        with pytest.raises(ValueError, match=r"out_channels = 16 > 9"):
            register(nn.Conv2d(1, 16, 3))  # 16 filters in R^9 cannot be mutually orthogonal
