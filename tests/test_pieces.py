"""Exact linear-piece counting (``smaso.depth.pieces``, ``docs/theory.md`` §2)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from smaso.depth.pieces import Abs, breakpoint_bound, count_pieces, network_layers

DT = torch.float64


def tent_network(k: int) -> nn.Sequential:
    """tau^k by k layers of width 2: tau(x) = 2[ReLU(x) - ReLU(2x - 1)], composed k times."""
    layers: list[nn.Module] = []
    out_w = torch.tensor([[2.0, -2.0]], dtype=DT)
    for i in range(k):
        lin = nn.Linear(1 if i == 0 else 2, 2).to(DT)
        W = torch.tensor([[1.0], [2.0]], dtype=DT)
        with torch.no_grad():
            lin.weight.copy_(W if i == 0 else W @ out_w)
            lin.bias.copy_(torch.tensor([0.0, -1.0], dtype=DT))
        layers += [lin, nn.ReLU()]
    head = nn.Linear(2, 1).to(DT)
    with torch.no_grad():
        head.weight.copy_(out_w)
        head.bias.zero_()
    return nn.Sequential(*layers, head)


def tent(x: np.ndarray, k: int) -> np.ndarray:
    for _ in range(k):
        x = np.where(x <= 0.5, 2 * x, 2 - 2 * x)
    return x


def random_net(widths, gen: torch.Generator, act: nn.Module) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        lin = nn.Linear(a, b).to(DT)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(b, a, generator=gen, dtype=DT))
            lin.bias.copy_(torch.randn(b, generator=gen, dtype=DT))
        layers.append(lin)
        if i < len(widths) - 2:
            layers.append(act)
    return nn.Sequential(*layers)


def grid_count(net: nn.Module, lo: float, hi: float, n: int = 200_001) -> int:
    """Pieces from a dense float64 grid: clusters of non-zero second differences, plus one."""
    x = torch.linspace(lo, hi, n, dtype=DT)[:, None]
    with torch.no_grad():
        y = net(x).reshape(-1).numpy()
    d2 = np.abs(np.diff(y, 2))
    h = (hi - lo) / (n - 1)
    kink = d2 > 1e-6 * h  # slope change > 1e-6 (float64 noise in d2 is ~1e-15)
    starts = kink & ~np.concatenate([[False], kink[:-1]])
    return int(starts.sum()) + 1


@pytest.mark.parametrize("k", range(1, 11))
def test_tent_network_has_exactly_2_to_the_k_pieces(k):
    net = tent_network(k)
    res = count_pieces(net, 0.0, 1.0)
    assert res.count == 2**k
    assert res.widths == (2,) * k and res.bound == breakpoint_bound([2] * k) >= 2**k
    # the breakpoints are the dyadic points j / 2^k, the slopes +-2^k
    np.testing.assert_allclose(res.edges, np.arange(2**k + 1) / 2**k, atol=1e-12)
    np.testing.assert_allclose(np.abs(res.slopes), 2.0**k)
    x = np.linspace(0, 1, 4097)
    np.testing.assert_allclose(res(x), tent(x, k), atol=1e-9)


@pytest.mark.parametrize("k", [1, 3, 6])
def test_abs_tent_width_one(k):
    """tau(x) = 1 - |2x - 1|: an absolute-value network of width 1 and depth k, 2^k pieces."""
    layers: list[nn.Module] = []
    for i in range(k):
        lin = nn.Linear(1, 1).to(DT)
        with torch.no_grad():
            lin.weight.fill_(2.0 if i == 0 else -2.0)
            lin.bias.fill_(-1.0 if i == 0 else 1.0)  # 2 tau - 1 = 2 (1 - |u|) - 1 = 1 - 2|u|
        layers += [lin, Abs()]
    head = nn.Linear(1, 1).to(DT)
    with torch.no_grad():
        head.weight.fill_(-1.0)
        head.bias.fill_(1.0)
    net = nn.Sequential(*layers, head)
    res = count_pieces(net, 0.0, 1.0)
    assert res.count == 2**k and res.bound == 2 ** (k - 1) * 2
    x = np.linspace(0, 1, 1001)
    np.testing.assert_allclose(res(x), tent(x, k), atol=1e-9)


@pytest.mark.parametrize(
    "act", [nn.ReLU(), nn.LeakyReLU(0.2), Abs()], ids=["relu", "leaky", "abs"]
)
def test_random_networks_match_a_fine_grid_and_the_bound(act):
    gen = torch.Generator().manual_seed(1)
    checked = 0
    for _ in range(40):
        widths = [1, *torch.randint(1, 5, (int(torch.randint(1, 4, (1,), generator=gen)),), generator=gen).tolist(), 1]
        net = random_net(widths, gen, act)
        res = count_pieces(net, -2.0, 2.0)
        assert res.count <= res.bound == breakpoint_bound(widths[1:-1])
        # the pieces reproduce the network
        x = np.linspace(-2, 2, 2001)
        with torch.no_grad():
            y = net(torch.as_tensor(x)[:, None]).reshape(-1).numpy()
        np.testing.assert_allclose(res(x), y, atol=1e-9 * max(1, np.abs(y).max()))
        widths_of_pieces = np.diff(res.edges)
        kinks = np.abs(np.diff(res.slopes))
        if widths_of_pieces.min() < 1e-3 or (kinks.size and kinks.min() < 1e-4):
            continue  # too fine for a grid of spacing 2e-5 to resolve
        assert grid_count(net, -2.0, 2.0) == res.count, widths
        checked += 1
    assert checked >= 20


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    widths=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    lo=st.floats(-5, 4),
    span=st.floats(0.1, 10),
)
def test_bound_never_exceeded(seed, widths, lo, span):
    gen = torch.Generator().manual_seed(seed)
    net = random_net([1, *widths, 1], gen, nn.ReLU())
    res = count_pieces(net, lo, lo + span)
    assert 1 <= res.count <= res.raw_count <= breakpoint_bound(widths)
    assert res.edges[0] == lo and res.edges[-1] == lo + span and np.all(np.diff(res.edges) > 0)


def test_merging_collinear_pieces():
    # relu(x) - relu(-x) = x: two raw pieces, one maximal piece
    pairs = [(np.array([[1.0], [-1.0]]), np.zeros(2)), (np.array([[1.0, -1.0]]), np.zeros(1))]
    res = count_pieces(pairs, -1.0, 1.0)
    assert res.raw_count == 2 and res.count == 1
    np.testing.assert_allclose([res.slopes[0], res.intercepts[0]], [1.0, 0.0])
    assert res.breakpoints.size == 0


def test_list_of_pairs_with_activation_names():
    gen = torch.Generator().manual_seed(3)
    net = random_net([1, 4, 3, 1], gen, nn.LeakyReLU(0.1))
    pairs = [(m.weight.detach(), m.bias.detach()) for m in net if isinstance(m, nn.Linear)]
    a = count_pieces(net, -3, 3)
    b = count_pieces(pairs, -3, 3, activation="leaky_relu:0.1")
    assert a.count == b.count
    np.testing.assert_allclose(a.edges, b.edges)
    assert network_layers(pairs, "abs")[1][1].name == "abs"


def test_custom_container_is_flattened_and_checked():
    class Wrapped(nn.Module):
        def __init__(self, inner, skip=False):
            super().__init__()
            self.inner = inner
            self.skip = skip

        def forward(self, x):
            return self.inner(x) + (x if self.skip else 0)

    net = tent_network(3)
    assert count_pieces(Wrapped(net), 0, 1).count == 8
    with pytest.raises(ValueError, match="disagrees"):
        count_pieces(Wrapped(net, skip=True), 0, 1)


def test_float32_network_is_counted_in_float64():
    net = tent_network(8).to(torch.float32)
    assert count_pieces(net, 0, 1).count == 256


def test_bad_inputs():
    with pytest.raises(ValueError, match="input is 2-D"):
        count_pieces(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)))
    with pytest.raises(ValueError, match="output is 3-D"):
        count_pieces(nn.Sequential(nn.Linear(1, 3), nn.ReLU(), nn.Linear(3, 3)))
    with pytest.raises(ValueError, match="lo < hi"):
        count_pieces(tent_network(2), 1.0, 1.0)
    with pytest.raises(ValueError, match="lo < hi"):
        count_pieces(tent_network(2), 2.0, 1.0)
    with pytest.raises(ValueError, match="finite"):
        count_pieces(tent_network(2), 0.0, float("inf"))
    with pytest.raises(TypeError, match="unsupported layer Tanh"):
        count_pieces(nn.Sequential(nn.Linear(1, 3), nn.Tanh(), nn.Linear(3, 1)))
    with pytest.raises(ValueError, match="not piecewise linear"):
        count_pieces([(np.ones((2, 1)), np.zeros(2)), (np.ones((1, 2)), np.zeros(1))], activation="silu")
    with pytest.raises(ValueError, match="do not chain"):
        count_pieces([(np.ones((2, 1)), np.zeros(2)), (np.ones((1, 3)), np.zeros(1))])
    with pytest.raises(ValueError, match="positive"):
        breakpoint_bound([2, 0])
    assert breakpoint_bound([]) == 1 and breakpoint_bound([5]) == 6 and breakpoint_bound([3, 2, 2]) == 4 * 4 * 2 * 2


def test_activation_on_the_input_counts_as_a_layer():
    net = nn.Sequential(nn.ReLU(), nn.Linear(1, 1).double(), Abs())
    with torch.no_grad():
        net[1].weight.fill_(1.0)
        net[1].bias.fill_(-0.5)
    res = count_pieces(net, -1.0, 1.0)  # |relu(x) - 1/2|: kinks at 0 and 1/2
    assert res.widths == (1, 1) and res.count == 3 <= res.bound == 4
    np.testing.assert_allclose(res.breakpoints, [0.0, 0.5])


@pytest.mark.parametrize("k", [1, 7, 12])
def test_teacher_tent_network_if_present(k):
    tent_mod = pytest.importorskip("teachers.tent")
    res = count_pieces(tent_mod.TentNetwork(k), 0.0, 1.0)
    assert res.count == 2**k and res.widths == (2,) * k
