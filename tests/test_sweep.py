"""The sample-complexity sweep (smaso.sweep, smaso.student.batched, smaso sweep): batched populations against the
one-at-a-time trainers, P* against hand-computed crossings, censoring named, results that merge and stream."""

from __future__ import annotations

import copy
import json
import math
import sys
import types

import numpy as np
import pytest
import torch
from torch import nn

from smaso.cli import main
from smaso.student.batched import Minibatches, classification_error, train_student_population
from smaso.student.config import TrainingConfig
from smaso.student.network import LadderStudent, student_loss
from smaso.student.training import train_ladder_student
from smaso.sweep import (
    DEFAULT_THRESHOLD,
    STUDENT_KINDS,
    DisjointSplit,
    IndependentDraws,
    StudentKind,
    SweepResult,
    SweepRun,
    p_star_of_curve,
    read_runs,
    register_student,
    sample_complexity_sweep,
)
from teachers.engine import ProcessEngine
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder


@pytest.fixture(scope="module")
def ladder() -> Ladder:
    return Ladder.random(2, 2, 4, seed=0, concentration=0.2)


def _data(ladder: Ladder, sizes: list[int]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    samples = [sample_ladder(ladder, P, seed=10 + i, progress=False) for i, P in enumerate(sizes)]
    return [s.inputs(dtype=torch.float64) for s in samples], [s.y.long() for s in samples]


def test_population_members_take_the_steps_of_train_ladder_student(ladder: Ladder) -> None:
    """Members of different P, seeds and initial weights, stepped together, end where the explicit backward (Eq 2),
    trained one at a time, ends; batched=False (one after the other) too."""
    xs, ys = _data(ladder, [40, 70, 100])
    nets = [LadderStudent(ladder, 6, readout=8, seed=r, dtype=torch.float64) for r in range(3)]
    kw = {"steps": 25, "lr": 0.5, "batch_size": 16, "weight_decay": 1e-3}
    fit = train_student_population(nets, xs, ys, seeds=[5, 6, 7], **kw)
    alone = train_student_population(nets, xs, ys, seeds=[5, 6, 7], batched=False, **kw)
    assert fit.batched and not alone.batched and fit.diverged == [None] * 3
    for r in range(3):
        ref = copy.deepcopy(nets[r])
        history = train_ladder_student(ref, xs[r], ys[r], seed=5 + r, **kw)
        for a, b, c in zip(ref.parameters(), fit.students[r].parameters(), alone.students[r].parameters(),
                           strict=True):
            assert torch.allclose(a, b, rtol=0, atol=1e-10) and torch.allclose(b, c, rtol=0, atol=1e-12)
        assert np.allclose(history, fit.losses[:, r].numpy(), rtol=0, atol=1e-10)
    assert all(not torch.equal(a, b) for a, b in zip(nets[0].parameters(), fit.students[0].parameters(),
                                                       strict=True))  # trained copies; the inputs untouched


@pytest.mark.slow  # torch.optim's first step imports torch._dynamo: seconds
def test_population_with_adam_matches_torch_optim_on_one_module(ladder: Ladder) -> None:
    """Adam on the stacked parameters is Adam on each member alone (torch.optim on the module's own forward)."""
    xs, ys = _data(ladder, [30, 50])
    nets = [LadderStudent(ladder, 4, readout=6, seed=r, dtype=torch.float64) for r in range(2)]
    fit = train_student_population(nets, xs, ys, seeds=[1, 2], steps=15, lr=0.01, batch_size=8, optimizer="adam",
                           loss="cross_entropy")
    for r in range(2):
        net = copy.deepcopy(nets[r])
        opt, order = torch.optim.Adam(net.parameters(), lr=0.01), Minibatches(xs[r].shape[0], 8, 1 + r)
        for _ in range(15):
            idx = order.next()
            opt.zero_grad()
            student_loss(net(xs[r][idx]), ys[r][idx], "cross_entropy").backward()
            opt.step()
        for a, b in zip(net.parameters(), fit.students[r].parameters(), strict=True):
            assert torch.allclose(a, b, rtol=0, atol=1e-10)


def test_population_refuses_mixed_minibatches_and_architectures(ladder: Ladder) -> None:
    xs, ys = _data(ladder, [8, 40])
    nets = [LadderStudent(ladder, 4, seed=r, dtype=torch.float64) for r in range(2)]
    with pytest.raises(ValueError, match="one minibatch size"):
        train_student_population(nets, xs, ys, seeds=[0, 1], steps=1, lr=0.1, batch_size=16)
    with pytest.raises(ValueError, match=r"students\[1\]: .*architecture"):
        train_student_population([nets[0], LadderStudent(ladder, 5, dtype=torch.float64)], xs, ys, seeds=[0, 1],
                                 steps=1,
                                 lr=0.1)
    with pytest.raises(ValueError, match="optimizer"):
        train_student_population(nets[:1], xs[:1], ys[:1], seeds=[0], steps=1, lr=0.1, optimizer="lbfgs")


def test_classification_error_counts_wrong_rows() -> None:
    net = nn.Linear(2, 2, bias=False, dtype=torch.float64)
    with torch.no_grad():
        net.weight.copy_(torch.eye(2, dtype=torch.float64))
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0], [0.0, 3.0]], dtype=torch.float64)
    assert classification_error(net, x, torch.tensor([0, 0, 0, 0]), chunk=3) == 0.5
    with torch.no_grad():
        net.weight.fill_(math.nan)
    assert math.isnan(classification_error(net, x, torch.tensor([0, 1, 0, 1])))


def test_p_star_of_curve_interpolates_in_log_p_and_names_censoring() -> None:
    v, cens, why = p_star_of_curve([1000, 10, 100], [0.05, 0.5, 0.2], 0.1)  # unsorted on purpose
    assert cens is None and why is None
    assert v == pytest.approx(100 * 10 ** (2 / 3), rel=1e-12)  # (0.2 - 0.1) / (0.2 - 0.05) = 2/3 of a decade
    v, cens, why = p_star_of_curve([10, 100], [0.3, 0.2], 0.1)
    assert math.isnan(v) and cens == "above" and "above the grid" in why
    v, cens, why = p_star_of_curve([10, 100], [0.05, 0.01], 0.1)
    assert math.isnan(v) and cens == "below" and "below the grid" in why
    v, cens, why = p_star_of_curve([10, 100, 1000], [0.5, math.nan, 0.1], 0.1)  # a diverged run is left out
    assert v == pytest.approx(1000.0, rel=1e-12) and cens is None
    v, cens, why = p_star_of_curve([10], [math.nan], 0.1)
    assert math.isnan(v) and "no defined test error" in why


def _result(curves: dict[int, list[float]], sizes: list[int]) -> SweepResult:
    runs = [SweepRun(P, s, e, 0.0, 100, 0.1) for s, row in curves.items() for P, e in zip(sizes, row, strict=True)]
    return SweepResult("ladder", {}, {}).merge(runs)


def test_p_star_is_the_median_over_seeds_with_order_statistics() -> None:
    sizes = [10, 100, 1000]
    # seed s crosses at 0.1 between 10 and 100 a fraction f_s of the decade: P*_s = 10 * 10^f_s
    fs = [0.1, 0.3, 0.5, 0.7, 0.9]
    res = _result({s: [0.5, 0.5 - 0.4 / f, 0.0] for s, f in enumerate(fs)}, sizes)
    star = res.p_star(0.1)
    expect = [10 * 10**f for f in fs]
    assert [star.per_seed[s] for s in range(5)] == pytest.approx(expect, rel=1e-12)
    assert star.value == pytest.approx(expect[2], rel=1e-12) and star.reason is None
    assert (star.low, star.high, star.coverage) == (pytest.approx(expect[0]), pytest.approx(expect[4]), 0.9375)
    # one seed never crosses: ordered above all, the median is still a crossing, the upper end is not a number
    res = _result({**{s: [0.5, 0.5 - 0.4 / f, 0.0] for s, f in enumerate(fs[:4])}, 4: [0.5, 0.4, 0.3]}, sizes)
    star = res.p_star(0.1)
    assert star.value == pytest.approx(expect[2]) and star.censored == {4: "above"}
    assert star.low == pytest.approx(expect[0]) and math.isnan(star.high) and "above the grid" in star.interval_reason
    # three of five never cross: the median itself is censored
    res = _result({0: [0.5, 0.0, 0.0], 1: [0.5, 0.05, 0.0], **{s: [0.5, 0.4, 0.3] for s in (2, 3, 4)}}, sizes)
    star = res.p_star(0.1)
    assert math.isnan(star.value) and "censored" in star.reason and "3 above" in star.reason
    # two seeds, an even count: the geometric mean of the middle two
    star = _result({0: [0.5, 0.1, 0.0], 1: [0.5, 0.5, 0.1]}, sizes).p_star(0.1)
    assert star.value == pytest.approx(math.sqrt(100 * 1000), rel=1e-12)
    with pytest.raises(ValueError, match="threshold"):
        res.p_star(1.5)


def test_results_merge_in_order_refuse_duplicates_and_round_trip() -> None:
    a = _result({0: [0.5, 0.2]}, [10, 100])
    b = _result({1: [0.4, 0.05]}, [10, 100])
    ab, ba = a.merge(b), b.merge(a)
    assert ab.runs == ba.runs and [(r.P, r.seed) for r in ab.runs] == [(10, 0), (10, 1), (100, 0), (100, 1)]
    with pytest.raises(ValueError, match=r"\(10, 0\)"):
        ab.merge(a)
    with pytest.raises(ValueError, match="another student"):
        a.merge(SweepResult("shallow", {}, {}))
    d = json.loads(json.dumps(ab.to_dict(), allow_nan=False))
    assert SweepResult.from_dict(d).runs == ab.runs and d["median_test_error"] == [0.45, 0.125]


def _make_data(ladder: Ladder) -> IndependentDraws:
    return IndependentDraws(ladder, 300)


def test_sweep_end_to_end_same_runs_whatever_the_population_and_engine(ladder: Ladder, tmp_path) -> None:
    """Runs trained as one population, one at a time, or on worker processes: the same errors; the stream holds
    every run."""
    tr = TrainingConfig(steps=20, lr=0.5, batch_size=16)
    kw = {"student_options": {"width": 4, "readout": 6}, "training": tr, "make_data": _make_data(ladder)}
    res = sample_complexity_sweep(ladder, [8, 32, 64], 2, stream=tmp_path / "runs.jsonl", **kw)
    assert [(r.P, r.seed, r.population) for r in res.runs] == [(8, 0, 2), (8, 1, 2), (32, 0, 4), (32, 1, 4),
                                                                (64, 0, 4), (64, 1, 4)]
    assert all(0 <= r.test_error <= 1 and r.num_test == 300 and r.reason is None for r in res.runs)
    assert sorted(read_runs(tmp_path / "runs.jsonl"), key=lambda r: (r.P, r.seed)) == res.runs
    alone = sample_complexity_sweep(ladder, [64, 8, 32], [0, 1], population=1, **kw)
    with ProcessEngine(2) as engine:
        spread = sample_complexity_sweep(ladder, [8, 32, 64], 2, population=2, engine=engine, **kw)
    for other in (alone, spread):
        assert [(r.test_error, r.train_error) for r in other.runs] == [(r.test_error, r.train_error) for r in res.runs]
        assert np.allclose([r.final_loss for r in other.runs], [r.final_loss for r in res.runs], rtol=0, atol=1e-10)
    # the run (P, s) is the one of a sweep of that cell alone
    one = sample_complexity_sweep(ladder, [32], [1], **kw)
    assert one.runs[0].test_error == res.runs[3].test_error


class _Flat(nn.Module):
    """A one-hidden-layer network on the flattened input: another student kind joins the registry."""

    def __init__(self, ladder: Ladder, seed: int, dtype: torch.dtype, hidden: int = 8) -> None:
        super().__init__()
        torch.manual_seed(seed)  # (a test student; the library's students take a local generator)
        d = ladder.num_regions[-1] * ladder.emission.dim
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, ladder.num_classes))
        self.to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_another_student_kind_joins_the_registry(ladder: Ladder) -> None:
    kind = register_student(StudentKind("test_flat", _Flat, defaults={"hidden": 8}), replace=True)
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_student(kind)
        res = sample_complexity_sweep(ladder, [16, 32], 2, student="test_flat", student_options={"hidden": 5},
                                      training=TrainingConfig(steps=10, lr=0.1, batch_size=8),
                                      make_data=_make_data(ladder))
        assert res.student == "test_flat" and res.options == {"hidden": 5} and len(res.runs) == 4
        with pytest.raises(ValueError, match=r"takes \['hidden'\], not \['width'\]"):
            sample_complexity_sweep(ladder, [16], 1, student="test_flat", student_options={"width": 3},
                                    make_data=_make_data(ladder))
    finally:
        STUDENT_KINDS.pop("test_flat")


def test_the_shallow_student_kind_trains_as_a_population(ladder: Ladder) -> None:
    """The shallow fully connected student (smaso.student.shallow, rstudent's) is a registered kind, batched."""
    pytest.importorskip("smaso.student.shallow")
    res = sample_complexity_sweep(ladder, [16, 24], 2, student="shallow", student_options={"hidden": 6},
                                  training=TrainingConfig(steps=5, lr=0.2, batch_size=8), make_data=_make_data(ladder))
    assert res.student == "shallow" and res.options["hidden"] == 6
    assert [r.population for r in res.runs] == [4] * 4 and all(0 <= r.test_error <= 1 for r in res.runs)


def test_sweep_refuses_bad_input(ladder: Ladder) -> None:
    data = _make_data(ladder)
    for kw, match in [({"sizes": []}, "sizes"), ({"sizes": [8, 8]}, "distinct"), ({"sizes": [0]}, "sizes"),
                      ({"seeds": 0}, "seeds"), ({"seeds": [1, 1]}, "seeds"), ({"student": "nope"}, "student"),
                      ({"training": TrainingConfig(lr_schedule="cosine")}, "lr_schedule"),
                      ({"training": TrainingConfig(optimizer="lbfgs")}, "optimizer"),
                      ({"population": 0}, "population")]:
        args = {"sizes": [8], "seeds": 1, "make_data": data, **kw}
        with pytest.raises(ValueError, match=match):
            sample_complexity_sweep(ladder, args.pop("sizes"), args.pop("seeds"), **args)

    def short(P: int, seed: int) -> tuple:
        return sample_ladder(ladder, P + 1, seed=seed, progress=False), sample_ladder(ladder, 5, seed=9, progress=False)

    with pytest.raises(ValueError, match="make_data: asked for P = 8"):
        sample_complexity_sweep(ladder, [8], 1, make_data=short, training=TrainingConfig(steps=1))


def test_disjoint_split_is_the_default_and_calls_train_test_split(ladder: Ladder, monkeypatch) -> None:
    calls = []
    fake = types.ModuleType("teachers.derivations")

    def train_test_split(lad: Ladder, num_train: int, num_test: int, seed: int) -> tuple:
        calls.append((lad, num_train, num_test, seed))
        return (sample_ladder(lad, num_train, seed=seed, progress=False),
                sample_ladder(lad, num_test, seed=seed + 100, progress=False))

    fake.train_test_split = train_test_split
    monkeypatch.setitem(sys.modules, "teachers.derivations", fake)
    res = sample_complexity_sweep(ladder, [8], [3], num_test=20, training=TrainingConfig(steps=2, batch_size=4))
    assert calls == [(ladder, 8, 20, 3)] and res.meta["make_data"] == "DisjointSplit" and res.runs[0].num_test == 20
    monkeypatch.setitem(sys.modules, "teachers.derivations", None)  # not there: a clear error, no traceback
    with pytest.raises(ValueError, match=r"make_data: the disjoint split needs teachers\.derivations"):
        DisjointSplit(ladder, 10)(8, 0)


def test_plot_sweep_draws_p_star_or_says_why_not() -> None:
    from smaso.plots import plot_sweep

    res = _result({s: [0.5, 0.5 - 0.4 / f, 0.0] for s, f in enumerate([0.2, 0.5, 0.8])}, [10, 100, 1000])
    fig = plot_sweep(res)
    assert any(t.get_text().startswith("P* = ") for t in fig.axes[0].get_legend().get_texts())
    fig = plot_sweep(_result({0: [0.5, 0.4]}, [10, 100]))
    assert any("P* undefined" in t.get_text() for t in fig.axes[0].texts)
    with pytest.raises(ValueError, match="no runs"):
        plot_sweep(SweepResult("ladder", {}, {}))


def test_cli_sweep_writes_json_stream_and_figure(tmp_path, capsys) -> None:
    out = tmp_path / "sweep"
    rc = main(["sweep", "--depth", "2", "--events", "4", "--concentration", "0.2", "--data", "independent",
               "--P", "8,32", "--seeds", "2", "--steps", "10", "--batch-size", "8", "--student-width", "4",
               "--readout", "4", "--num-test", "50", "--threshold", "0.3", "--out", str(out), "--no-progress"])
    assert rc == 0
    d = json.loads((out / "sweep.json").read_text())
    assert d["sizes"] == [8, 32] and d["seeds"] == [0, 1] and len(d["runs"]) == 4 and d["p_star"]["threshold"] == 0.3
    assert len(read_runs(out / "sweep.jsonl")) == 4 and (out / "sweep.png").stat().st_size > 0
    assert "P* (test error 0.3)" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "match"), [
    (["--P", "8,8"], "--P: expected distinct sizes"),
    (["--P", "8", "--rhm", "4,4,2,2"], "--rhm: expected five integers"),
    (["--P", "8", "--rhm", "4,4,2,2,2", "--depth", "3"], "--rhm: .*--depth"),
    (["--P", "8", "--student", "nope"], "student: expected one of"),
    (["--P", "8", "--threshold", "2"], "--threshold"),
    (["--P", "8", "--hidden", "4"], "--hidden: the ladder student does not take it"),
    (["--P", "8", "--student", "shallow", "--student-width", "4"], "--student-width: the shallow student does not"),
    (["--P", "600", "--rhm", "8,8,8,2,2", "--num-test", "4000", "--data", "disjoint"],
     r"--P, --num-test: 600 \+ 4000 distinct rows asked, but this RHM has only P_max = 4096"),
])
def test_cli_sweep_errors_are_one_line(argv: list[str], match: str, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["sweep", "--out", str(tmp_path / "o"), "--data", "independent", "--steps", "1", *argv])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("smaso: error:")
    import re

    assert re.search(match, err), err


def test_threshold_default_is_the_library_s() -> None:
    from smaso.cli_sweep import THRESHOLD

    assert THRESHOLD == DEFAULT_THRESHOLD


@pytest.mark.slow  # a local Dask cluster (seconds to start)
def test_sweep_on_dask_gives_the_serial_runs(ladder: Ladder) -> None:
    pytest.importorskip("dask.distributed")
    from teachers.engine import DaskEngine

    kw = {"student_options": {"width": 4, "readout": 6}, "training": TrainingConfig(steps=10, lr=0.5, batch_size=8),
          "make_data": _make_data(ladder)}
    serial = sample_complexity_sweep(ladder, [8, 16], 2, **kw)
    with DaskEngine(workers=2, threads_per_worker=1) as engine:
        spread = sample_complexity_sweep(ladder, [8, 16], 2, engine=engine, population=2, **kw)
    assert [(r.P, r.seed, r.test_error, r.train_error) for r in spread.runs] == \
        [(r.P, r.seed, r.test_error, r.train_error) for r in serial.runs]
