"""The depth-separation experiment (``smaso.depth.separation``, ``examples/depth_separation.py``), tiny settings."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from smaso.depth.pieces import count_pieces
from smaso.depth.separation import (
    balanced_widths,
    depth_separation,
    format_table,
    l1_error,
    make_student,
)
from smaso.plots.depth import plot_depth
from teachers.tent import TentNetwork, tent_power

ROOT = Path(__file__).resolve().parents[1]


def test_tent_power_and_network():
    x = torch.linspace(0, 1, 1025, dtype=torch.float64)
    assert torch.equal(tent_power(x, 0), x)
    for k in (1, 2, 5):
        net = TentNetwork(k)
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
        TentNetwork(-1)
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
    for r in rows:  # every student respects its certified bound, and the class bracket is ordered
        assert r.l1 >= r.lower - 1e-9 and r.l1 >= 0
        assert r.class_lower <= r.class_upper + 1e-12
        if r.role == "theorem":
            assert r.l1 >= r.class_lower - 1e-9 and r.k == r.L**2
    controls = [r for r in rows if r.role == "control"]
    assert {(r.L, r.k) for r in controls} == {(2, 2)} and all(r.lower == 0.0 for r in controls)
    cold = [r for r in rows if "random start" in r.student]
    assert [(r.L, r.widths, r.restarts) for r in cold] == [(2, (2,) * 4, 4)]
    exact = [r for r in rows if r.student == "deep: exact tent"]
    assert all(r.l1 < 1e-12 and r.pieces == 2**r.k for r in exact)
    trained = [r for r in rows if "SGD" in r.student]
    assert all(r.l1 < r.l1_init for r in trained)
    table = format_table(rows)
    assert table.count("\n") == len(rows) + 1 and "deep: exact tent" in table
    assert all(line.count("|") == 16 for line in table.splitlines())
    for r in rows:  # every row carries its own bracket: the explicit network of its widths above
        assert r.lower - 1e-12 <= r.upper
        assert r.inside() == (r.lower - 1e-9 <= r.l1 <= r.upper + 1e-9)
    assert "[0.0312, 0.1953]" in table  # the L = 2 class bracket on tau^4
    out = tmp_path / "depth.png"
    plot_depth(rows, out)
    assert out.stat().st_size > 1000


def test_example_script_smoke(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("depth_separation_example", ROOT / "examples" / "depth_separation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "fig.svg"
    rows = mod.main(["--Ls", "2", "--target", "2L", "--steps", "100", "--seeds", "0", "--n-train", "256",
                     "--deep-widths", "2,3", "--deep-seeds", "0", "--out", str(out)])
    text = capsys.readouterr().out
    assert "| L | k |" in text and "lecture bound" in text and out.exists()
    assert "the best member of the class has L1 error in [0.0312, 0.1953]" in text
    assert {(r.role, r.k) for r in rows} == {("theorem", 4), ("control", 2), ("deep", 4)}
    assert sorted(r.widths for r in rows if "random start" in r.student) == [(2,) * 4, (3,) * 4]
    rows = mod.main(["--Ls", "2", "--steps", "20", "--seeds", "0", "--n-train", "128", "--no-controls",
                     "--deep-widths", "", "--optimizer", "adam", "--out", ""])
    assert {r.role for r in rows} == {"theorem", "deep"} and not any("random" in r.student for r in rows)
    assert all(r.training.startswith("Adam") for r in rows if r.role == "theorem")


def test_train_student_progress_and_optimizer(capsys):
    from smaso.depth.separation import train_student

    quiet = train_student(make_student([4], seed=1), 2, steps=40, n_train=128, seed=3)
    loud = train_student(make_student([4], seed=1), 2, steps=40, n_train=128, seed=3, progress=True)
    assert quiet == loud  # the bar changes nothing but the display
    assert "" == capsys.readouterr().out  # tqdm writes to stderr, never stdout
    adam = train_student(make_student([8], seed=0), 1, steps=300, lr=1e-2, n_train=256, optimizer="adam")
    assert adam[-1] < adam[0]
    with pytest.raises(ValueError, match="optimizer"):
        train_student(make_student([2]), 1, steps=1, optimizer="lbfgs")


def test_piece_survey():
    from smaso.depth.pieces import breakpoint_bound
    from smaso.depth.separation import piece_survey

    records = piece_survey([(3,), (2, 2)], seeds=[0, 1], train_k=2, steps=20, tent_ks=[1, 4], progress=True)
    kinds = [r.kind for r in records]
    assert kinds.count("random") == 4 and kinds.count("trained") == 4 and kinds.count("tent") == 2
    for r in records:
        assert r.bound == breakpoint_bound(r.widths) and 1 <= r.pieces <= r.bound
    random0 = next(r for r in records if r.kind == "random" and r.widths == (3,) and r.seed == 0)
    assert random0.pieces == count_pieces(make_student((3,), 0)).count
    tents = [r for r in records if r.kind == "tent"]
    assert [(r.pieces, r.nodes, r.depth, r.label) for r in tents] == [(2, 2, 1, "2^1"), (16, 8, 4, "2^4")]
    assert all(r.kind != "trained" for r in piece_survey([(2,)], seeds=[0], train_k=None))
    with pytest.raises(ValueError, match="architectures"):
        piece_survey([])
    with pytest.raises(ValueError, match="architectures"):
        piece_survey([(0, 2)])
    with pytest.raises(ValueError, match="tent_ks"):
        piece_survey([(2,)], tent_ks=[0])
    with pytest.raises(ValueError, match="seeds"):
        piece_survey([(2,)], seeds=[])
    with pytest.raises(ValueError, match="train_k"):
        piece_survey([(2,)], train_k=-1)


def test_min_widths_for_pieces():
    from smaso.depth.pieces import breakpoint_bound, min_widths_for_pieces

    assert min_widths_for_pieces(16, 1) == (15,)
    assert min_widths_for_pieces(1, 3) == (1, 1, 1)
    for pieces in (2, 5, 16, 33, 100):
        for depth in (1, 2, 3):
            w = min_widths_for_pieces(pieces, depth)
            assert len(w) == depth and breakpoint_bound(w) >= pieces
    with pytest.raises(ValueError, match="pieces"):
        min_widths_for_pieces(0, 2)
    with pytest.raises(ValueError, match="depth"):
        min_widths_for_pieces(4, 0)


def test_spread_init_and_one_cycle_schedule():
    import torch

    state = torch.random.get_rng_state()
    a, b = make_student((3, 3), seed=5, init="spread"), make_student((3, 3), seed=5, init="spread")
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG is left as it was
    first = a[0]
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert float(first.bias.detach().abs().max()) <= 0.5  # biases U(-1/2, 1/2): the first kinks sit near [0, 1]
    assert not torch.equal(first.weight, make_student((3, 3), seed=5)[0].weight)
    from smaso.depth.separation import train_student

    h1 = train_student(a, 2, steps=60, lr=1e-2, optimizer="adam", schedule="onecycle", n_train=128)
    h2 = train_student(b, 2, steps=60, lr=1e-2, optimizer="adam", n_train=128)
    assert h1[0] == h2[0] and h1 != h2  # the same first step's loss; the schedule changes the rest
    with pytest.raises(ValueError, match="init: expected one of"):
        make_student((2,), init="xavier")
    with pytest.raises(ValueError, match="schedule: expected 'constant' or 'onecycle'"):
        train_student(a, 2, steps=1, schedule="cosine")
    with pytest.raises(ValueError, match="optimizer: expected 'sgd' or 'adam'"):
        depth_separation([2], optimizer="lbfgs")
    with pytest.raises(ValueError, match="deep_random_widths: expected positive widths"):
        depth_separation([2], deep_random_widths=(0,))
    with pytest.raises(ValueError, match="deep_random_seeds: expected at least one seed"):
        depth_separation([2], deep_random_seeds=())


def test_make_student_is_pytorchs_default_init_without_the_global_rng():
    import itertools

    import torch
    from torch import nn

    for widths, seed in [((3,), 0), ((8, 8, 4), 7), ((2,) * 5, 3)]:
        with torch.random.fork_rng():
            torch.manual_seed(seed)  # the reference: nn.Linear's own init from the seeded global RNG
            dims = [1, *widths, 1]
            ref = [nn.Linear(a, b) for a, b in itertools.pairwise(dims)]
        state = torch.random.get_rng_state()
        net = make_student(widths, seed)
        assert torch.equal(torch.random.get_rng_state(), state)
        mine = [m for m in net if isinstance(m, nn.Linear)]
        for a, b in zip(mine, ref, strict=True):
            assert torch.equal(a.weight, b.weight.double()) and torch.equal(a.bias, b.bias.double())


def test_population_rows(tmp_path):
    from smaso.depth.bracket import architecture_upper_bound

    rows = depth_separation([2], steps=60, seeds=[0], n_train=256, deep_random_widths=(2,), deep_random_seeds=[0],
                            population=3, deep_population=2, population_lr=0.05)
    pops = [r for r in rows if r.student.endswith(", population")]
    # one population next to every theorem, control and random-start deep student
    assert sorted((r.role, r.widths) for r in pops) == [
        ("control", (2, 2)), ("control", (4,)), ("deep", (2,) * 4), ("theorem", (2, 2)), ("theorem", (4,))]
    assert all(r.restarts == (2 if r.role == "deep" else 3) for r in pops)
    assert all(r.training.startswith("population: Adam lr 0.05 one-cycle, l1 loss") for r in pops)
    for r in pops:
        assert r.upper == architecture_upper_bound(r.k, r.widths).l1 and r.l1 >= r.lower - 1e-9
        assert r.pieces == count_pieces(r.net, 0.0, 1.0).count and r.l1 == l1_error(r.net, r.k)
    assert "| population: Adam" in format_table(rows)
    plot_depth(rows, tmp_path / "p.png")
    # the same rows again: every population is seeded on its own
    again = depth_separation([2], steps=60, seeds=[0], n_train=256, deep_random_widths=(2,), deep_random_seeds=[0],
                             population=3, deep_population=2, population_lr=0.05)
    assert [r.l1 for r in again] == [r.l1 for r in rows]
    for bad, match in [(dict(population=-1), "population: expected a non-negative integer"),
                       (dict(population=True), "population"),
                       (dict(deep_population=-2), "deep_population: expected a non-negative integer"),
                       (dict(population=2, population_loss="huber"), "population_loss"),
                       (dict(population=2, population_seed=-3), "population_seed: expected a non-negative integer"),
                       (dict(population=2, population_lr=0.0), "population_lr")]:
        with pytest.raises(ValueError, match=match):
            depth_separation([2], **bad)


def test_table_shows_small_errors_and_the_bracket_verdict():
    from smaso.depth.separation import DepthRow

    rows = [DepthRow(2, 2, "a", (4,), 3e-6, 4, 5, lower=0.0, upper=0.0),
            DepthRow(2, 4, "b", (2, 2), 0.2019, 5, 12, lower=0.0312, upper=0.2031),
            DepthRow(2, 4, "c", (4,), 0.2110, 4, 5, lower=0.125, upper=0.1953),
            DepthRow(2, 4, "d", (4,), 0.1, 4, 5, lower=0.125, upper=0.1953)]
    lines = format_table(rows).splitlines()[2:]
    assert lines[0].endswith("| 3.0e-06 | above |")  # not "0.0000", which would read as an exact fit
    assert lines[1].endswith("| 0.2019 | yes |") and lines[2].endswith("| 0.2110 | above |")
    assert lines[3].endswith("| 0.1000 | BELOW |")  # below a certified bound: a bug, shouted
    assert [r.inside() for r in rows] == [False, True, False, False]
