"""Eq 11 for a convolution's matrix (``smaso.splines.orthogonality.conv_orthogonality_*``): every (filter,
output position) is a unit; the correlation-based penalty and defect against the explicitly built matrix."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from smaso.splines.orthogonality import (
    conv_orthogonality_defect,
    conv_orthogonality_penalty,
    orthogonality_defect,
    orthogonality_penalty,
    register_conv_orthogonal,
)

DT = torch.float64


def conv_matrix(W: torch.Tensor, size: tuple[int, ...], **conv_kwargs) -> torch.Tensor:
    """The convolution's matrix ``(K*prod(out), C*prod(size))``: the identity basis pushed through torch's conv
    (row order (k, position), column order (c, pixel)); differentiable in ``W``."""
    C = W.shape[1]
    D = C * torch.Size(size).numel()
    basis = torch.eye(D, dtype=W.dtype).reshape(D, C, *size)
    out = (F.conv1d if W.dim() == 3 else F.conv2d)(basis, W, **conv_kwargs)  # (D, K, *out): column j of M
    return out.reshape(D, -1).T


def _weight(K, C, kernel, seed):
    return torch.randn(K, C, *kernel, generator=torch.Generator().manual_seed(seed), dtype=DT)


CASES_1D = [((s, p, d)) for s, p, d in itertools.product((1, 2, 3), (0, 1, 2), (1, 2))]
CASES_2D = [((1, 1), (0, 0), (1, 1)), ((1, 1), (1, 1), (1, 1)), ((2, 1), (1, 0), (1, 1)), ((2, 3), (2, 1), (1, 2)),
            ((3, 3), (0, 0), (1, 1)), ((3, 2), (1, 2), (2, 1)), ((1, 2), (0, 1), (2, 2))]


def _assert_matches_explicit(W, size, **kw):
    M = conv_matrix(W, size, **kw)
    ref_pen = orthogonality_penalty(M).item()
    pen = conv_orthogonality_penalty(W, size, **kw).item()
    assert pen == pytest.approx(ref_pen, rel=1e-12, abs=1e-12)
    got, ref = conv_orthogonality_defect(W, size, **kw), orthogonality_defect(M)
    assert got.penalty == pytest.approx(ref.penalty, rel=1e-12, abs=1e-12)
    assert got.relative == pytest.approx(ref.relative, abs=1e-12)
    assert got.max_abs_cosine == pytest.approx(ref.max_abs_cosine, abs=1e-12)
    return M


@pytest.mark.parametrize("stride, padding, dilation", CASES_1D)
def test_conv1d_penalty_and_defect_equal_the_explicit_matrix(stride, padding, dilation):
    W = _weight(3, 2, (3,), seed=stride * 10 + padding * 3 + dilation)
    M = _assert_matches_explicit(W, (9,), stride=stride, padding=padding, dilation=dilation)
    assert M.shape[1] == 2 * 9 and orthogonality_defect(M).relative > 1e-3  # random filters: far from Eq 11


@pytest.mark.parametrize("stride, padding, dilation", CASES_2D)
def test_conv2d_penalty_and_defect_equal_the_explicit_matrix(stride, padding, dilation):
    W = _weight(3, 2, (3, 2), seed=sum(stride) + 5 * sum(padding) + 11 * sum(dilation))
    _assert_matches_explicit(W, (7, 6), stride=stride, padding=padding, dilation=dilation)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")  # torch's own note on the module
def test_modules_rows_cut_to_nothing_and_same_padding():
    g = torch.Generator().manual_seed(3)
    # padding wider than the kernel: the outermost rows lie in the padding (zero rows, orthogonal to all)
    W = _weight(2, 1, (2, 2), seed=4)
    M = _assert_matches_explicit(W, (4, 3), padding=(3, 2), stride=(2, 1))
    assert (M.abs().sum(1) == 0).any()
    for conv, size in [(nn.Conv2d(2, 3, (2, 3), padding="same", dilation=(2, 1), dtype=DT), (6, 5)),
                       (nn.Conv1d(2, 4, 4, padding="same", dtype=DT), (7,)),
                       (nn.Conv2d(1, 5, 3, stride=2, padding=1, dtype=DT), (8, 8)),
                       (nn.Conv1d(3, 2, 3, padding="valid", dtype=DT), (5,))]:
        with torch.no_grad():
            conv.weight.copy_(torch.randn(conv.weight.shape, generator=g, dtype=DT))
        # the explicit matrix through the module itself (its own padding rules, 'same' included), bias removed
        D = conv.in_channels * torch.Size(size).numel()
        with torch.no_grad():
            basis = torch.eye(D, dtype=DT).reshape(D, conv.in_channels, *size)
            M = (conv(basis) - conv(torch.zeros_like(basis[:1]))).reshape(D, -1).T
        assert conv_orthogonality_penalty(conv, size).item() == pytest.approx(orthogonality_penalty(M).item(),
                                                                                rel=1e-12)
        got, ref = conv_orthogonality_defect(conv, size), orthogonality_defect(M)
        assert got.relative == pytest.approx(ref.relative, abs=1e-12)
        assert got.max_abs_cosine == pytest.approx(ref.max_abs_cosine, abs=1e-12)


@pytest.mark.parametrize("W, size, kw", [
    (_weight(2, 2, (3,), 7), (6,), {"stride": 2, "padding": 1}),
    (_weight(2, 1, (2, 3), 8), (4, 5), {"stride": (1, 2), "padding": (1, 0), "dilation": (2, 1)})])
def test_penalty_gradient_matches_autograd_through_the_explicit_matrix(W, size, kw):
    W = W.clone().requires_grad_(True)
    got, = torch.autograd.grad(conv_orthogonality_penalty(W, size, lam=0.7, **kw), W)
    ref, = torch.autograd.grad(0.7 * orthogonality_penalty(conv_matrix(W, size, **kw)), W)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda w: conv_orthogonality_penalty(w, size, **kw), (W,))


def _orthogonal_filters(K, C, kernel, seed):
    D = C * torch.Size(kernel).numel()
    q, _ = torch.linalg.qr(torch.randn(D, K, generator=torch.Generator().manual_seed(seed), dtype=DT))
    return (q.T * torch.linspace(0.5, 2, K, dtype=DT)[:, None]).reshape(K, C, *kernel)  # unequal norms


def test_non_overlapping_orthogonal_filters_satisfy_eq11_overlapping_do_not():
    W = _orthogonal_filters(4, 1, (2, 2), seed=1)
    good = conv_orthogonality_defect(W, (8, 8), stride=2)  # 4 filters x 16 positions = 64 rows in R^64
    assert good.penalty < 1e-24 and good.relative < 1e-12 and good.orthogonal
    M = conv_matrix(W, (8, 8), stride=2)
    torch.testing.assert_close(M @ M.T, torch.diag((M * M).sum(1)), rtol=0, atol=1e-12)  # rows orthogonal
    W1 = _orthogonal_filters(3, 2, (3,), seed=2)
    assert conv_orthogonality_defect(W1, (12,), stride=4, dilation=1).relative < 1e-12  # stride > kernel: gaps
    # controls: the same orthogonal filters at stride 1, or cut by padding, are not orthogonal rows
    assert conv_orthogonality_defect(W, (8, 8), stride=1).relative > 1e-3
    assert conv_orthogonality_defect(W, (8, 8), stride=2, padding=1).max_abs_cosine > 1e-3


def test_non_overlapping_penalty_is_positions_times_the_flattened_penalty():
    # disjoint supports: only the K filters at one position interact, once per position (4 x 3, then 3 positions)
    W = _weight(3, 2, (2, 2), seed=5)
    assert conv_orthogonality_penalty(W, (8, 9), stride=(2, 3)).item() == pytest.approx(
        4 * 3 * orthogonality_penalty(W.flatten(1)).item(), rel=1e-12)
    W1 = _weight(2, 3, (3,), seed=6)
    assert conv_orthogonality_penalty(W1, (10,), stride=3).item() == pytest.approx(
        3 * orthogonality_penalty(W1.flatten(1)).item(), rel=1e-12)


@pytest.mark.parametrize("method", ["orthogonal", "gram_schmidt"])
def test_register_conv_orthogonal_gives_eq11(method):
    torch.manual_seed(0)  # orthogonal's own initialization draws from the global RNG; fixed for the test
    for conv, size in [(nn.Conv2d(1, 4, 2, stride=2, dtype=DT), (8, 8)), (nn.Conv2d(4, 16, 2, stride=2, dtype=DT), 4),
                       (nn.Conv1d(2, 3, 2, stride=3, dilation=2, dtype=DT), (10,))]:
        before = conv_orthogonality_defect(conv, size).relative
        register_conv_orthogonal(conv, size, method=method)
        after = conv_orthogonality_defect(conv.weight, size, stride=conv.stride, padding=conv.padding,
                                          dilation=conv.dilation)
        assert before > 1e-4 and after.relative < 1e-12 and after.max_abs_cosine < 1e-6


def test_impossible_and_unsupported_convolutions_are_refused():
    # the digits CNN's first layer: 8 filters x 64 positions = 512 rows in a 64-dim input
    with pytest.raises(ValueError, match=r"impossible.*8 filters x 64 output positions.*512 rows > 1 channels.*64"):
        register_conv_orthogonal(nn.Conv2d(1, 8, 3, padding=1), (8, 8))
    with pytest.raises(ValueError, match="overlapping rows"):
        register_conv_orthogonal(nn.Conv2d(1, 2, 3, stride=2), (8, 8))
    with pytest.raises(ValueError, match="cuts filters"):
        register_conv_orthogonal(nn.Conv1d(1, 1, 2, stride=3, padding=1), 8)
    with pytest.raises(ValueError, match="at most 4"):  # non-overlapping, 45 rows in R^64, but 5 filters in R^4
        register_conv_orthogonal(nn.Conv2d(1, 5, 2, stride=3), (8, 8))
    with pytest.raises(ValueError, match="method"):
        register_conv_orthogonal(nn.Conv2d(1, 2, 2, stride=2), 8, method="householder")


def test_bad_inputs_raise_clear_errors():
    W = _weight(2, 1, (3, 3), 0)
    with pytest.raises(ValueError, match="groups = 1"):
        conv_orthogonality_penalty(nn.Conv2d(2, 2, 3, groups=2), 8)
    with pytest.raises(ValueError, match="padding_mode 'zeros'"):
        conv_orthogonality_defect(nn.Conv2d(1, 2, 3, padding=1, padding_mode="circular"), 8)
    with pytest.raises(TypeError, match=r"nn\.Conv1d, nn\.Conv2d"):
        conv_orthogonality_penalty(nn.ConvTranspose2d(1, 2, 3), 8)
    with pytest.raises(TypeError, match=r"nn\.Conv1d, nn\.Conv2d"):
        conv_orthogonality_penalty(nn.Conv3d(1, 2, 3), 8)
    with pytest.raises(ValueError, match="read from it"):
        conv_orthogonality_penalty(nn.Conv2d(1, 2, 3), 8, stride=2)
    with pytest.raises(TypeError, match="input_size: expected an int or 2 ints"):
        conv_orthogonality_penalty(W, (8, 8, 8))
    with pytest.raises(ValueError, match="stride: expected values >= 1"):
        conv_orthogonality_penalty(W, 8, stride=0)
    with pytest.raises(ValueError, match="no output position"):
        conv_orthogonality_penalty(W, 2)
    with pytest.raises(ValueError, match="'same' needs stride 1"):
        conv_orthogonality_penalty(W, 8, stride=2, padding="same")
    with pytest.raises(ValueError, match="lam"):
        conv_orthogonality_penalty(W, 8, lam=-1.0)
    with pytest.raises(ValueError, match=r"\(K, C, k\)"):
        conv_orthogonality_defect(torch.randn(2, 3, dtype=DT), 8)
    with pytest.raises(TypeError, match="floating-point"):
        conv_orthogonality_defect(torch.ones(2, 1, 3, dtype=torch.int64), 8)
