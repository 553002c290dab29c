"""Noise floors (smaso/student/noise.py): the jackknife's groups add up to one pass, its standard errors
cover quantities known exactly at the stated rate and shrink like 1/sqrt(N), and every one-step error is
bounded by its two measured parts."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from smaso.student.compare import CONTRIBUTIONS, compare_statistics_to_theory
from smaso.student.frequency import FrequencyAccumulator, accumulate_statistics, collect_statistics
from smaso.student.network import LadderStudent
from smaso.student.noise import ReplicateAccumulator, jackknife_se, norm_floor, t_quantile
from teachers import Ladder, sample_ladder
from teachers.statistics import exact_statistics


def _gaussian():
    return Ladder.random(depth=2, branching=2, events=3, mode="topdown", concentration=1.0, seed=5,
                         emission="gaussian", sigma=0.7)


def _stats(lad, n, seed, groups=10, student_seed=0, width=4):
    s = sample_ladder(lad, n, seed=seed)
    st = LadderStudent(lad, width, dtype=torch.float64, seed=student_seed)
    stats = collect_statistics(st, s.inputs(dtype=torch.float64), s.y, s.z, dtype=torch.float64, groups=groups)
    return st, stats


def test_groups_add_up_to_one_pass_and_merge_across_chunks():
    lad = _gaussian()
    s = sample_ladder(lad, 3001, seed=1)
    st = LadderStudent(lad, 3, batch_norm=True, dtype=torch.float64, seed=0)
    x = s.inputs(dtype=torch.float64)
    one = FrequencyAccumulator(st, torch.float64)
    one.add(st.forward_backward(x, s.y), s.z)
    stats = collect_statistics(st, x, s.y, s.z, dtype=torch.float64, groups=7)
    rep = stats.jackknife
    assert isinstance(rep, ReplicateAccumulator) and [p.n for p in rep.parts] == [428, 429, 429, 428, 429, 429, 429]
    assert stats.groups == 7 and stats.num_examples == 3001
    a, b = one.state_dict(), rep.total().state_dict()
    assert a["n"] == b["n"] == 3001
    for key in ("counts", "joint_counts"):
        assert all(x is None or torch.equal(x, y) for x, y in zip(a[key], b[key], strict=True))
    for key in ("own", "fc", "gp", "dW", "db"):
        for x_, y_ in zip(a[key], b[key], strict=True):
            assert x_ is None or (x_ - y_).abs().max() <= 1e-12 * max(1.0, x_.abs().max())
    # streamed in chunks of 1000 rows, batches of 500: the groups' states merge like the accumulator's
    acc, _ = accumulate_statistics(st, s, batch_size=500, dtype=torch.float64, groups=7)
    assert isinstance(acc, ReplicateAccumulator) and acc.n == 3001
    loo = list(acc.leave_one_out())
    assert len(loo) == 7 and {r.num_examples for r in loo} <= set(range(2500, 2600))
    with pytest.raises(ValueError, match="groups"):
        ReplicateAccumulator(st, groups=1)
    with pytest.raises(ValueError, match="7 groups"):
        acc.merge_(ReplicateAccumulator(st, torch.float64, groups=3))


def test_jackknife_of_a_mean_is_the_textbook_standard_error():
    # for a plain mean over equal groups the jackknife SE is the std of the group means / sqrt(K)
    g = torch.tensor([1.0, 4.0, 2.0, 8.0, 5.0], dtype=torch.float64)
    loo = [(g.sum() - v) / 4 for v in g]
    assert jackknife_se(loo).item() == pytest.approx(g.std().item() / math.sqrt(5), rel=1e-12)
    assert norm_floor([torch.tensor([1.0, 2.0]), torch.tensor([3.0, 2.0])], 2.0) == pytest.approx(0.5)  # se (1, 0)
    assert t_quantile(10) == pytest.approx(2.2622, abs=1e-4)


def test_intervals_cover_known_quantities_at_the_stated_rate():
    """95% jackknife intervals (t with K - 1 dof) of E[x | z] at the Gaussian leaves (the emission's means)
    and of the event frequencies P(z) (the ladder's exact marginals), over 120 seeded datasets."""
    lad = _gaussian()
    exact = exact_statistics(lad)
    mu = lad.emission.means  # (R_d, m_d, dim)
    t = t_quantile(10)
    hits = {"E[x|z]": [], "P(z)": []}
    for seed in range(120):
        _, stats = _stats(lad, 1500, seed)
        loo = list(stats.leave_one_out())
        d = lad.depth
        se = jackknife_se([r.Fbar[d] for r in loo])
        hits["E[x|z]"].append(((stats.Fbar[d] - mu).abs() <= t * se).double().mean().item())
        for l in range(d + 1):
            se_p = jackknife_se([r.p[l] for r in loo])
            hits["P(z)"].append(((stats.p[l] - exact.marginals[l]).abs() <= t * se_p).double().mean().item())
    for name, h in hits.items():
        rate = sum(h) / len(h)
        print(f"{name}: 95% intervals covered {rate:.3f}")
        assert 0.92 <= rate <= 0.975, (name, rate)


def test_floors_shrink_like_one_over_sqrt_n():
    lad = Ladder.default()
    floors = []
    for n in (2000, 8000, 32000):
        st, stats = _stats(lad, n, seed=3, width=6)
        report = compare_statistics_to_theory(st, stats, replicates=list(stats.leave_one_out()))
        floors.append([r[f"{k}_floor"] for r in report["levels"] for k in ("F_local", "G_propagated", "focus")
                       if f"{k}_floor" in r])
    for a, b in itertools.pairwise(floors):
        ratios = torch.tensor(a) / torch.tensor(b)
        # 4x the rows: half the floor (each floor is itself a 10-group estimate: +-25% spread)
        assert 1.3 < ratios.median().item() < 3.0, ratios


def test_one_step_errors_are_bounded_by_their_parts_and_focus_is_noise_on_the_default_ladder():
    lad = Ladder.default()
    for n in (4000, 64000):
        st, stats = _stats(lad, n, seed=1, width=8)
        report = compare_statistics_to_theory(st, stats, replicates=list(stats.leave_one_out()))
        for r in report["levels"]:
            for err, (a, b) in CONTRIBUTIONS.items():
                key_a = f"{err.split('_')[0]}_local_{a}"
                key_b = f"{err.split('_')[0]}_local_{b}"
                # pred - meas = part a + part b exactly, so the triangle inequality bounds the error
                assert r[err] <= r[key_a] + r[key_b] + 1e-12, (n, r["level"], err)
                assert r[err] >= abs(r[key_a] - r[key_b]) - 1e-12
            # on the teacher focus holds exactly (smaso.theorems.conditions): what is measured is noise
            if "focus" in r:
                assert "focus" in r["within_noise"] and r["focus"] < 3 * r["focus_floor"]
            # broadness fails by design on the summarization ladder: far above its floor
            if r["level"] >= 1:
                assert "broadness" not in r["within_noise"] and r["broadness"] > 3 * r["broadness_floor"]


def test_errors_against_n_stream_once_and_match_a_direct_comparison(tmp_path):
    from smaso.plots import plot_errors_against_n
    from smaso.student.compare import errors_against_n
    from teachers.chunked import open_dataset, sample_to_store

    lad = Ladder.default()
    data = open_dataset(sample_to_store(lad, 9000, tmp_path / "d.zarr", seed=2, chunk_rows=4096))
    st = LadderStudent(lad, 5, dtype=torch.float64, seed=0)
    rows = errors_against_n(st, data, n_min=1000, batch_size=700)
    assert [r["n"] for r in rows] == [1000, 2000, 4000, 8000] and all(r["noise_groups"] == 10 for r in rows)
    # the 4000-row point equals a comparison on the first 4000 rows in the same batches (no BN: batching
    # does not change the statistics), and its floors come from the same grouping
    head = data.read(0, 4000)
    rep = ReplicateAccumulator(st, torch.float64, 10)
    cuts = [0, 700, 1000, 1700, 2000, 2700, 3400, 4000]  # batches of 700 rows cut at the grid points
    for s, e in itertools.pairwise(cuts):
        rec = st.forward_backward(head.inputs(slice(s, e), torch.float64), head.y[s:e])
        rep.add(rec, head.z[s:e])
    direct = compare_statistics_to_theory(st, rep.result(), replicates=list(rep.leave_one_out()))
    for a, b in zip(rows[2]["levels"], direct["levels"], strict=True):
        for k in ("F_local", "dW_propagated", "F_local_floor", "G_local_floor"):
            assert a[k] == pytest.approx(b[k], rel=1e-9, abs=1e-15)
    fig = plot_errors_against_n(rows, tmp_path / "n.png")
    assert (tmp_path / "n.png").stat().st_size > 10_000 and len(fig.axes) >= 6
    with pytest.raises(ValueError, match="n_max"):
        errors_against_n(st, data, n_min=1000, n_max=20000)
    with pytest.raises(ValueError, match="rows"):
        plot_errors_against_n([])
