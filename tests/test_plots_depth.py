"""The depth figures (``smaso.plots.depth``): files written, bad input refused, drawn numbers checked
against independent references (a plain-Python tent map; brute force over width tuples)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from smaso.depth.pieces import count_pieces
from smaso.depth.separation import PieceRecord, depth_separation, make_student, piece_survey
from smaso.plots.depth import nodes_needed, plot_depth, plot_nodes_needed, plot_piece_counts, plot_tent_powers


def _tent_reference(x: np.ndarray, k: int) -> np.ndarray:
    """tau^k by its definition (2x for x <= 1/2, 2 - 2x above), independent of teachers.tent."""
    y = np.array(x, dtype=np.float64)
    for _ in range(k):
        y = np.where(y <= 0.5, 2 * y, 2 - 2 * y)
    return y


def _min_nodes_brute(pieces: int, depth: int, cap: int) -> int:
    """Fewest nodes over all width tuples with entries <= cap whose lemma bound reaches ``pieces``."""
    best = math.inf
    for widths in itertools.product(range(1, cap + 1), repeat=depth):
        bound = 2 ** (depth - 1) * (widths[0] + 1) * math.prod(widths[1:])
        if bound >= pieces:
            best = min(best, sum(widths))
    return best


def test_plot_tent_powers(tmp_path):
    out = tmp_path / "tent.png"
    fig = plot_tent_powers((1, 2, 3, 5), n_grid=1025, path=out)
    assert out.stat().st_size > 5000
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 4
    for ax, k in zip(axes, (1, 2, 3, 5), strict=True):
        target, net = ax.lines[0], ax.lines[1]
        x = np.asarray(target.get_xdata(), dtype=np.float64)
        np.testing.assert_allclose(target.get_ydata(), _tent_reference(x, k), rtol=0, atol=1e-12)
        np.testing.assert_allclose(net.get_ydata(), _tent_reference(x, k), rtol=0, atol=1e-12)
        assert f"network {2**k} pieces" in ax.get_title()


def test_plot_tent_powers_other_network(tmp_path):
    student = make_student((3,), seed=0)
    fig = plot_tent_powers([2], {2: student}, path=tmp_path / "s.png")
    ax = fig.axes[0]
    x = torch.as_tensor(np.asarray(ax.lines[1].get_xdata()), dtype=torch.float64)
    with torch.no_grad():
        want = student(x[:, None]).reshape(-1).numpy()
    np.testing.assert_allclose(ax.lines[1].get_ydata(), want, rtol=0, atol=1e-12)
    assert f"network {count_pieces(student).count} pieces" in ax.get_title()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"ks": []}, "ks"), ({"ks": [0]}, "ks"), ({"ks": [2], "networks": {1: None}}, "networks"),
     ({"ks": [2], "networks": [1]}, "networks"), ({"ks": [2], "n_grid": 1}, "n_grid")],
)
def test_plot_tent_powers_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        plot_tent_powers(**kwargs)


def test_plot_piece_counts(tmp_path):
    records = piece_survey([(3,), (2, 2)], seeds=[0], train_k=2, steps=20, tent_ks=[1, 3])
    out = tmp_path / "pieces.png"
    fig = plot_piece_counts(records, path=out)
    assert out.stat().st_size > 5000
    ax, ax2 = fig.axes[:2]
    # the black bars are the lemma's bounds 2^(L-1) (m_1 + 1) m_2 ... m_L, ordered by depth then nodes:
    # (2,) [tent k=1]: 3, (3,): 4, (2, 2): 2*3*2 = 12, (2, 2, 2) [tent k=3]: 4*3*2*2 = 48
    bars = np.asarray(ax.collections[0].get_offsets())
    assert bars[:, 1].tolist() == [3, 4, 12, 48]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2^1", "3^1", "2^2", "2^3"]
    tent = next(c for c in ax2.collections if c.get_label() == "tent network")
    assert np.asarray(tent.get_offsets()).tolist() == [[2, 2], [6, 8]]  # (nodes, pieces) = (2k, 2^k)


def test_plot_piece_counts_bad_input():
    with pytest.raises(ValueError, match="records"):
        plot_piece_counts([])
    with pytest.raises(ValueError, match="records"):
        plot_piece_counts([("not", "a", "record")])
    with pytest.raises(ValueError, match="records: unknown kind"):
        plot_piece_counts([PieceRecord((2,), "other", 1, 3)])


def test_nodes_needed_matches_brute_force(tmp_path):
    ks, depths = list(range(1, 7)), [1, 2, 3]
    got = nodes_needed(ks, depths)
    for L in depths:
        for k, n in zip(ks, got[L], strict=True):
            assert n == _min_nodes_brute(2**k, L, cap=2**k), (k, L)
    assert got[1] == [2**k - 1 for k in ks]
    out = tmp_path / "nodes.png"
    fig = plot_nodes_needed(ks, depths, path=out)
    assert out.stat().st_size > 5000
    lines = fig.axes[0].lines
    assert list(lines[0].get_ydata()) == got[1]
    assert list(lines[-1].get_ydata()) == [2 * k for k in ks]  # the tent network: depth k, width 2


def test_plot_nodes_needed_bad_input():
    with pytest.raises(ValueError, match="depths"):
        plot_nodes_needed([1, 2], [0])
    with pytest.raises(ValueError, match="ks"):
        plot_nodes_needed([], [1])


def test_plot_depth(tmp_path):
    rows = depth_separation([1], steps=50, seeds=[0], n_train=256)
    out = tmp_path / "depth.png"
    plot_depth(rows, path=out)
    assert out.stat().st_size > 5000
    with pytest.raises(ValueError, match="rows"):
        plot_depth([])
    with pytest.raises(ValueError, match="rows"):
        plot_depth([object()])
