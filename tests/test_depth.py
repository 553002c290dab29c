"""The depth-separation experiment (``smaso.depth``, ``examples/depth_separation.py``), tiny settings."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from smaso.depth import (
    balanced_widths,
    depth_separation,
    format_table,
    l1_error,
    make_student,
    plot_depth,
    tent_network,
    tent_power,
)
from smaso.pieces import count_pieces

ROOT = Path(__file__).resolve().parents[1]


def test_tent_power_and_network():
    x = torch.linspace(0, 1, 1025, dtype=torch.float64)
    assert torch.equal(tent_power(x, 0), x)
    for k in (1, 2, 5):
        net = tent_network(k)
        with torch.no_grad():
            torch.testing.assert_close(net(x[:, None]).reshape(-1), tent_power(x, k), rtol=0, atol=1e-12)
        assert l1_error(net, k) < 1e-12
        assert count_pieces(net, 0, 1).count == 2**k
    assert l1_error(make_student([3]), 2) > 0
    # the constant 1/2 has L1 error exactly 1/4 against every tau^k, k >= 1
    half = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.ReLU(), torch.nn.Linear(1, 1)).double()
    with torch.no_grad():
        for p in half.parameters():
            p.zero_()
        half[2].bias.fill_(0.5)
    assert l1_error(half, 6) == pytest.approx(0.25, abs=1e-6)


def test_bad_inputs():
    with pytest.raises(ValueError, match="k: expected a non-negative integer"):
        tent_power(torch.zeros(3), -1)
    with pytest.raises(ValueError, match="k: expected a non-negative integer"):
        tent_network(-1)
    with pytest.raises(ValueError, match="positive hidden width"):
        make_student([])
    with pytest.raises(ValueError, match="nodes >= depth"):
        balanced_widths(3, 2)
    with pytest.raises(ValueError, match="target"):
        depth_separation([2], target="L")
    with pytest.raises(ValueError, match="depths >= 1"):
        depth_separation([0])
    assert balanced_widths(3, 8) == (3, 3, 2)


def test_experiment_smoke(tmp_path):
    rows = depth_separation([1, 2], steps=200, seeds=[0], n_train=512)
    assert {r.L for r in rows} == {1, 2}
    for r in rows:
        assert r.pieces <= r.bound
        if r.in_theorem:
            assert r.depth <= r.L and r.nodes <= 2**r.L
        if r.L == 2 and r.in_theorem:  # at most 12 < 16 pieces: tau^4 is out of reach
            assert r.pieces < 2**r.k and r.l1 > 1e-3
    exact = [r for r in rows if r.student == "deep: exact tent"]
    assert all(r.l1 < 1e-12 and r.pieces == 2**r.k for r in exact)
    trained = [r for r in rows if "SGD" in r.student]
    assert all(r.l1 < r.l1_init for r in trained)
    table = format_table(rows)
    assert table.count("\n") == len(rows) + 1 and "deep: exact tent" in table
    out = tmp_path / "depth.png"
    plot_depth(rows, out)
    assert out.stat().st_size > 1000


def test_example_script_smoke(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("depth_separation_example", ROOT / "examples" / "depth_separation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "fig.svg"
    rows = mod.main(["--Ls", "2", "--target", "2L", "--steps", "100", "--seeds", "0", "--n-train", "256",
                     "--out", str(out)])
    text = capsys.readouterr().out
    assert "| L | k |" in text and "lecture bound" in text and out.exists()
    assert {r.k for r in rows} == {4}
