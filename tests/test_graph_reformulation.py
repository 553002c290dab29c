"""Frequency statistics and the reformulation on region graphs (smaso/student/frequency.py, reformulation.py,
diagnosis.py: one code for every ladder since issue 24; the graph modules of issue 17).

References written independently of the code under test:

- on uniform trees, the fast path (the tree layout, with its own tests against brute force) against the
  edge-list code of any ladder;
- per-edge statistics recomputed here by plain masked means over the per-example record;
- Thm 3 on a fully informative DAG (every region's event is its leaf pattern): Eq 9 with the sum over
  parents is exact, in float64, to ~1e-10;
- the exact event statistics of the junction tree (:func:`inference.posterior.graph_statistics`)
  for the sampled frequencies (tolerances ~ 1/sqrt(N)).
"""

from __future__ import annotations

import math

import pytest
import torch

from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.diagnosis import compare_statistics_to_theory, diagnose
from smaso.student.frequency import FrequencyAccumulator, collect_statistics
from smaso.student.network import LadderStudent
from smaso.student.reformulation import reformulate
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder
from teachers.statistics import exact_statistics

F64 = torch.float64


def _data(sample, dtype=F64):
    return sample.inputs(dtype=dtype), sample.y, sample.z.long()


def _graph_data(g: Ladder, n: int, seed: int = 0):
    return _data(sample_ladder(g, n, seed))


# ------------------------------------------------------------------------------------ trees
TREES = {
    "bottomup-onehot": lambda: Ladder.random(depth=3, branching=2, events=3, seed=1, mode="bottomup"),
    "topdown-gauss": lambda: Ladder.random(depth=2, branching=[2, 3], events=[3, 4, 3], seed=2, mode="topdown",
                                           sigma=0.5),
}


@pytest.mark.parametrize("name", sorted(TREES))
@pytest.mark.parametrize("activation", ["relu", "silu"])
@pytest.mark.parametrize("batch_norm", [False, "after", "before"])
def test_tree_statistics_and_reformulation_equal_the_tree_code(name, activation, batch_norm):
    """On a uniform tree the edge-list code (strided views, per-edge sums) gives the fast path's numbers."""
    lad = TREES[name]()
    x, y, z = _data(sample_ladder(lad, 1500, seed=3))
    st = LadderStudent(lad, 5, activation=activation, batch_norm=batch_norm, seed=4, dtype=F64)
    gs = LadderStudent(lad, 5, activation=activation, batch_norm=batch_norm, seed=4, dtype=F64)
    gs.fast_path = False
    bs = None if batch_norm else 700  # BN normalizes per batch: the same batches for both
    A = collect_statistics(st, x, y, z, dtype=F64)
    B = collect_statistics(gs, x, y, z, dtype=F64, batch_size=bs)
    d = lad.depth
    for key in ("Fbar", "F", "D", "Dp", "U", "G", "Gf"):
        for l in range(d):
            torch.testing.assert_close(B.means[key][l], A.means[key][l], rtol=0, atol=1e-12)
    torch.testing.assert_close(B.Fbar[d], A.Fbar[d].to(F64), rtol=0, atol=1e-12)
    for l in range(1, d + 1):  # tree edges in edge order are the child regions
        torch.testing.assert_close(B.Fc[l], A.Fc[l].to(F64), rtol=0, atol=1e-12)
        torch.testing.assert_close(B.Gp_tilde[l], A.Gp_tilde[l].to(F64), rtol=0, atol=1e-12)
        torch.testing.assert_close(B.P.P_down[l], A.P.P_down[l].to(F64), rtol=0, atol=1e-15)
    for l in range(d):
        torch.testing.assert_close(B.dW[l], A.dW[l], rtol=0, atol=1e-12)
    for propagate in (True, False):
        ra, rb = reformulate(st, A.P, A, propagate=propagate), reformulate(gs, B.P, B, propagate=propagate)
        for l in range(d):
            torch.testing.assert_close(rb.Fbar[l], ra.Fbar[l], rtol=0, atol=1e-12)
            torch.testing.assert_close(rb.G_tilde[l], ra.G_tilde[l], rtol=0, atol=1e-12)
            torch.testing.assert_close(rb.dW[l], ra.dW[l], rtol=0, atol=1e-12)
    ca, cb = compare_statistics_to_theory(st, A), compare_statistics_to_theory(gs, B)
    for ra_, rb_ in zip(ca["levels"], cb["levels"], strict=True):
        shared = [k for k, v in ra_.items() if isinstance(v, float) and k in rb_]
        assert len(shared) >= 11
        for k in shared:
            assert rb_[k] == pytest.approx(ra_[k], rel=1e-9, abs=1e-12), (ra_["level"], k)


@pytest.mark.parametrize("mode", ["topdown", "bottomup"])
def test_exact_statistics_on_a_tree_equal_the_junction_tree(mode):
    """The closed form of a uniform tree and the junction tree of any region graph give the same numbers."""
    from teachers.statistics import _graph_exact

    lad = TREES["topdown-gauss"]() if mode == "topdown" else TREES["bottomup-onehot"]()
    et, ex = exact_statistics(lad), _graph_exact(lad, None)
    for l in range(lad.depth + 1):
        torch.testing.assert_close(ex.marginals[l], et.marginals[l].to(F64), rtol=0, atol=1e-14)
    for l in range(1, lad.depth + 1):
        torch.testing.assert_close(ex.joints[l], et.joints[l].to(F64), rtol=0, atol=1e-14)
        torch.testing.assert_close(ex.P_down[l], et.P_down[l].to(F64), rtol=0, atol=1e-14)


# ------------------------------------------------------------------------------------ per-edge definitions
def _irregular_dag() -> Ladder:
    """Regions of different event counts and 1-3 parents (not a convolution)."""
    events = [[3], [2, 4, 3], [3, 3, 3, 3]]
    parents = [[()], [(0,), (0,), (0,)], [(0,), (0, 1), (1, 2), (0, 1, 2)]]
    return Ladder.random(events=events, parents=parents, seed=5, sigma=0.6)


@pytest.mark.parametrize("which", ["irregular", "conv1d"])
def test_per_edge_statistics_match_masked_means(which):
    g = _irregular_dag() if which == "irregular" else Ladder.conv1d(6, [3, 2, 3], [1, 1, 1], [3, 3, 2, 2],
                                                                         sigma=0.6, seed=6)
    x, y, z = _graph_data(g, 900, seed=1)
    gs = LadderStudent(g, 4, activation="silu", seed=2, dtype=F64)
    stats = collect_statistics(gs, x, y, z, dtype=F64)
    rec = gs.forward_backward(x, y)
    off = g.level_offsets
    for l in range(g.depth):
        for r in range(g.num_regions[l]):
            zr = z[:, off[l] + r]
            for a in range(g.region_events[l][r]):
                sel = zr == a
                assert stats.counts[l][r, a] == sel.sum()
                if sel.any():
                    torch.testing.assert_close(stats.U[l][r, a], rec.u[l][sel, r].mean(0), rtol=0, atol=1e-12)
                    torch.testing.assert_close(stats.G[l][r, a], rec.g[l][sel, r].mean(0), rtol=0, atol=1e-12)
                    torch.testing.assert_close(stats.Dp[l][r, a], rec.deriv[l][sel, r].mean(0), rtol=0, atol=1e-12)
            # padding rows are zero
            m = g.region_events[l][r]
            assert m == g.events[l] or stats.U[l][r, m:].abs().max().item() == 0
    for l in range(1, g.depth + 1):
        for e, (p, c) in enumerate(gs.edges[l - 1]):
            zp, zc = z[:, off[l - 1] + p], z[:, off[l] + c]
            for a in range(g.region_events[l - 1][p]):
                sel = zp == a
                if sel.any():
                    torch.testing.assert_close(stats.Fc[l][e, a], rec.fbar[l][sel, c].mean(0), rtol=0, atol=1e-12)
                for b in range(g.region_events[l][c]):
                    joint = ((zp == a) & (zc == b)).double().mean()
                    assert stats.P.joints[l][e, a, b].item() == pytest.approx(joint.item(), abs=1e-15)
            for b in range(g.region_events[l][c]):
                sel = (zc == b).double()[:, None]
                torch.testing.assert_close(stats.Gp_tilde[l][e, b], (sel * rec.g[l - 1][:, p]).mean(0),
                                           rtol=0, atol=1e-12)


def test_strided_and_gather_paths_agree():
    """The strided-run plan (trees, convolutions) and the gather / index_add fallback give the same numbers."""
    g = Ladder.conv2d((5, 5), [3, 2, 2], [1, 1, 1], [3, 2, 2, 3], sigma=0.5, seed=7)
    x, y, z = _graph_data(g, 400, seed=2)
    gs = LadderStudent(g, 3, seed=1, dtype=F64)
    assert all(p is not None for p in gs._plans)
    rec_s = gs.forward_backward(x, y)
    st_s = collect_statistics(gs, x, y, z, dtype=F64)
    gs._plans = [None] * g.depth
    rec_g = gs.forward_backward(x, y)
    st_g = collect_statistics(gs, x, y, z, dtype=F64)
    for l in range(g.depth):
        torch.testing.assert_close(rec_s.g[l], rec_g.g[l], rtol=0, atol=1e-13)
        torch.testing.assert_close(rec_s.dW[l], rec_g.dW[l], rtol=0, atol=1e-13)
    for l in range(1, g.depth + 1):
        torch.testing.assert_close(st_s.Fc[l], st_g.Fc[l], rtol=0, atol=1e-13)
        torch.testing.assert_close(st_s.Gp_tilde[l], st_g.Gp_tilde[l], rtol=0, atol=1e-13)
        torch.testing.assert_close(st_s.P.joints[l], st_g.P.joints[l], rtol=0, atol=0)


def test_batches_and_merges_add_up():
    g = _irregular_dag()
    x, y, z = _graph_data(g, 1000, seed=4)
    gs = LadderStudent(g, 4, seed=3, dtype=F64)
    one = FrequencyAccumulator(gs, F64)
    one.add(gs.forward_backward(x, y), z)
    parts = [FrequencyAccumulator(gs, F64) for _ in range(3)]
    for part, rows in zip(parts, (slice(0, 300), slice(300, 301), slice(301, 1000)), strict=True):
        part.add(gs.forward_backward(x[rows], y[rows]), z[rows])
    merged = FrequencyAccumulator(gs, F64)
    for part in parts:
        merged += part.state_dict()
    a, b = one.result(), merged.result()
    assert a.num_examples == b.num_examples == 1000 and a.loss == pytest.approx(b.loss, rel=1e-12)
    for l in range(g.depth):
        for key in ("U", "G", "D"):
            torch.testing.assert_close(a.means[key][l], b.means[key][l], rtol=0, atol=1e-12)
        torch.testing.assert_close(a.dW[l], b.dW[l], rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="other shapes"):
        merged.merge_(FrequencyAccumulator(LadderStudent(g, 5, dtype=F64), F64))
    with pytest.raises(TypeError, match="state_dict"):
        merged.merge_({"n": 1})


def test_sampled_frequencies_match_exact_statistics():
    g = Ladder.conv1d(6, [3, 2, 3], [1, 1, 1], [3, 3, 2, 2], seed=8, mode="topdown")
    n = 20000
    x, y, z = _graph_data(g, n, seed=9)
    stats = collect_statistics(LadderStudent(g, 2, seed=0), x, y, z, batch_size=8192)
    ex = exact_statistics(g)
    tol = 5 / math.sqrt(n)  # 5 standard deviations of a frequency (sd <= 1/(2 sqrt N))
    for l in range(g.depth + 1):
        assert (stats.P.marginals[l] - ex.marginals[l]).abs().max().item() < tol
    for l in range(1, g.depth + 1):
        assert (stats.P.joints[l] - ex.joints[l]).abs().max().item() < tol


# ------------------------------------------------------------------------------------ Thm 3 on a DAG
FI = {
    "conv1d-overlap": lambda: Ladder.fully_informative_conv1d(4, [2, 2, 2], [1, 1, 1]),
    "conv1d-k3": lambda: Ladder.fully_informative_conv1d(5, [3, 2, 2], [1, 1, 1], concentration=2.0, seed=1),
}


@pytest.mark.parametrize("name", sorted(FI))
@pytest.mark.parametrize("activation", ["relu", "silu"])
@pytest.mark.parametrize("loss", ["squared", "cross_entropy"])
def test_thm3_reformulation_exact_on_a_fully_informative_dag(name, activation, loss):
    g = FI[name]()
    assert not g.is_tree() and max(len(p) for p in g.parents[-1]) >= 2  # overlapping fields: several parents
    x, y, z = _graph_data(g, 3000, seed=2)
    gs = LadderStudent(g, 5, activation=activation, seed=3, dtype=F64)
    stats = collect_statistics(gs, x, y, z, dtype=F64, loss=loss)
    res = compare_statistics_to_theory(gs, stats, loss=loss)
    worst = max(v for row in res["levels"] for k, v in row.items() if isinstance(v, float) and k != "level")
    assert worst < 1e-10, res["levels"]
    assert max(v for k, v in res["leaves"].items() if k != "level") < 1e-12
    for row in diagnose(stats):
        assert all(v < 1e-12 for k, v in row.items() if k != "level"), row


def test_reformulation_is_not_exact_on_an_ordinary_dag():
    """Control: the same comparison on a topdown conv DAG (events do not hold their fields' information)
    shows errors far above round-off, and the one-step error stays within the sum of its two parts."""
    g = Ladder.conv1d(6, [3, 2, 3], [1, 1, 1], [3, 3, 2, 2], sigma=0.5, seed=10)
    x, y, z = _graph_data(g, 4000, seed=1)
    gs = LadderStudent(g, 4, seed=0, dtype=F64)
    res = compare_statistics_to_theory(gs, collect_statistics(gs, x, y, z, dtype=F64))
    assert max(row["F_propagated"] for row in res["levels"]) > 1e-3
    assert max(row["broadness"] for row in res["levels"][1:]) > 1e-3
    for row in res["levels"]:
        for q, parts in (("F", ("focus", "decorrelation")), ("G", ("broadness", "decorrelation")),
                         ("dW", ("focus", "decorrelation"))):
            total = row[f"{q}_local_{parts[0]}"] + row[f"{q}_local_{parts[1]}"]
            assert row[f"{q}_local"] <= total * (1 + 1e-9) + 1e-15, (row["level"], q)


def test_sum_over_parents_is_needed():
    """Dropping all but the first parent of each child in Eq 9's backward breaks Thm 3's exactness."""
    g = FI["conv1d-overlap"]()
    x, y, z = _graph_data(g, 2000, seed=5)
    gs = LadderStudent(g, 4, seed=1, dtype=F64)
    stats = collect_statistics(gs, x, y, z, dtype=F64)
    full = reformulate(gs, stats.P, stats, propagate=False)
    l = 1  # level 2's regions have up to 2 parents in level 1
    par, chi = (t.cpu() for t in gs.edge_index(l))
    first = torch.tensor([list(chi.tolist()).index(c) == e for e, c in enumerate(chi.tolist())])
    back = torch.einsum("eab,eaj,ekj->ebk", stats.P.P_down[l + 1], stats.G_tilde[l].index_select(0, par),
                        gs.edge_weights(l).detach())
    one = torch.zeros_like(full.G_tilde[l + 1]).index_add_(0, chi[first], back[first]) * stats.Dp[l + 1]
    allp = torch.zeros_like(full.G_tilde[l + 1]).index_add_(0, chi, back) * stats.Dp[l + 1]
    torch.testing.assert_close(allp, full.G_tilde[l + 1], rtol=0, atol=1e-14)
    meas = stats.G_tilde[l + 1]
    assert (allp - meas).norm() / meas.norm() < 1e-10
    assert (one - meas).norm() / meas.norm() > 1e-2


def test_streaming_over_a_store_equals_one_pass_in_memory(tmp_path):
    from smaso.student.frequency import accumulate_statistics
    from teachers.chunked import open_dataset, sample_to_store

    g = _irregular_dag()
    n = 2 * 4096 + 77
    data = open_dataset(sample_to_store(g, n, tmp_path / "g.zarr", seed=3, chunk_rows=4096))
    mem = sample_ladder(g, n, 3)
    gs = LadderStudent(g, 4, activation="silu", seed=1, dtype=F64)
    acc, correct = accumulate_statistics(gs, data, batch_size=1000, dtype=F64)
    ref = collect_statistics(gs, *_data(mem), dtype=F64)
    got = acc.result()
    assert got.num_examples == n
    with torch.no_grad():
        assert correct == int((gs(mem.inputs(dtype=F64)).argmax(-1) == mem.y).sum())
    for l in range(g.depth):
        for key in ("U", "G", "Dp"):
            torch.testing.assert_close(got.means[key][l], ref.means[key][l], rtol=0, atol=1e-12)
        torch.testing.assert_close(got.dW[l], ref.dW[l], rtol=0, atol=1e-12)
    for l in range(1, g.depth + 1):
        torch.testing.assert_close(got.P.joints[l], ref.P.joints[l], rtol=0, atol=0)
    reps, _ = accumulate_statistics(gs, mem, batch_size=1000, dtype=F64, groups=4)
    assert len(list(reps.leave_one_out())) == 4
    torch.testing.assert_close(reps.result().dW[0], ref.dW[0], rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="not the student's"):
        accumulate_statistics(LadderStudent(Ladder.conv1d(6, [3, 2, 3], [1, 1, 1], [3, 3, 2, 2]), 2),
                                    data)
    with pytest.raises(ValueError, match="batch_size"):
        accumulate_statistics(gs, data, batch_size=0)
    with pytest.raises(TypeError, match="LadderStudent"):
        accumulate_statistics(object(), data)
    with pytest.raises(ValueError, match="groups: expected an integer >= 2"):
        accumulate_statistics(gs, data, groups=1)
    with pytest.raises(ValueError, match=r"dtype: expected a floating torch\.dtype"):
        FrequencyAccumulator(gs, torch.int64)


def test_compare_student_runs_the_one_student_on_a_dag(tmp_path):
    """The main job on a graph dataset: in memory and streamed from a store give the same history, and on
    a fully informative DAG every error of every checkpoint is round-off (Thm 3), with shared weights and with
    Batch Norm too."""
    from smaso.student.compare import compare_student
    from teachers.chunked import open_dataset, sample_to_store

    g = FI["conv1d-overlap"]()
    mem = sample_ladder(g, 3000, 0)
    res = compare_student(mem, student=StudentConfig(width=4),
                          training=TrainingConfig(steps=20, lr=0.05, batch_size=64),
                          evaluation=EvaluationConfig(held_out=False, eval_every=10, noise_groups=4))
    assert type(res.student).__name__ == "LadderStudent" and [h["step"] for h in res.history] == [0, 10, 20]
    for h in res.history:
        for row in h["levels"]:
            assert max(v for k, v in row.items() if k.endswith(("_propagated", "_local"))) < 1e-10, row
    assert "recursion" in res.table()
    store = open_dataset(sample_to_store(g, 3000, tmp_path / "g.zarr", seed=0))
    res2 = compare_student(store, student=StudentConfig(width=4),
                           training=TrainingConfig(steps=20, lr=0.05, batch_size=64),
                           evaluation=EvaluationConfig(held_out=False, eval_every=10, noise_groups=4))
    assert [h["accuracy"] for h in res2.history] == [h["accuracy"] for h in res.history]
    shared = compare_student(mem, student=StudentConfig(width=4, shared=True),
                             training=TrainingConfig(steps=20, lr=0.05, batch_size=64),
                             evaluation=EvaluationConfig(held_out=False, eval_every=20, noise_groups=None))
    assert shared.student.shared  # Thm 3 holds whatever the weights: shared ones too
    for placement in ("after", "before"):
        bn = compare_student(mem, student=StudentConfig(width=4, batch_norm=placement),
                             training=TrainingConfig(steps=20, lr=0.05, batch_size=64),
                             evaluation=EvaluationConfig(held_out=False, eval_every=20, noise_groups=None))
        assert bn.student.bn_placement == placement
        for h in bn.history:
            for row in h["levels"]:
                assert max(v for k, v in row.items() if k.endswith(("_propagated", "_local"))) < 1e-10, row
    for h in shared.history:
        for row in h["levels"]:
            assert max(v for k, v in row.items() if k.endswith(("_propagated", "_local"))) < 1e-10, row
    tree = compare_student(sample_ladder(Ladder.fully_informative(depth=2), 300, 0), student=StudentConfig(shared=True),
                           training=TrainingConfig(steps=2),
                           evaluation=EvaluationConfig(held_out=False, eval_every=2, noise_groups=None))
    assert tree.student.shared and tree.student.fast_path  # weight sharing on a uniform tree: the fast path too


@pytest.mark.parametrize("name", sorted(FI))
@pytest.mark.parametrize("placement", ["after", "before"])
@pytest.mark.parametrize("activation, loss", [("relu", "squared"), ("silu", "cross_entropy")])
def test_thm3_exact_on_a_fully_informative_dag_with_batch_norm(name, placement, activation, loss):
    """Thm 3 with BN (Eq 12 per region, after or before the gate) on a DAG: with the sample's own frequencies
    every predicted F, G~ and Delta W equals the measured one to round-off, full recursion and one step."""
    g = FI[name]()
    x, y, z = _graph_data(g, 3000, seed=2)
    gs = LadderStudent(g, 5, activation=activation, batch_norm=placement, seed=3, dtype=F64)
    with torch.no_grad():  # non-trivial BN parameters
        gen = torch.Generator().manual_seed(0)
        for c1, c0 in zip(gs.bn_scale, gs.bn_shift, strict=True):
            c1.copy_(1 + 0.3 * torch.randn(c1.shape, generator=gen, dtype=F64))
            c0.copy_(0.5 + 0.3 * torch.randn(c0.shape, generator=gen, dtype=F64))
    stats = collect_statistics(gs, x, y, z, dtype=F64, loss=loss)
    res = compare_statistics_to_theory(gs, stats, loss=loss)
    for row in res["levels"]:
        worst = max(v for k, v in row.items() if k.endswith(("_propagated", "_local")))
        assert worst < 1e-10, row
    assert max(v for k, v in res["leaves"].items() if k != "level") < 1e-12
    for row in diagnose(stats, gs):
        assert all(v < 1e-12 for k, v in row.items() if k != "level"), row
    if placement == "before":  # Thm 9's premise: 1^T G~ = 0 at every BN level
        for l in range(1, g.depth):
            assert stats.G_tilde[l].sum(1).abs().max().item() < 1e-12


# ------------------------------------------------------------------------------------ noise floors
def test_jackknife_floors_shrink_like_one_over_sqrt_n():
    g = Ladder.conv1d(6, [3, 2, 3], [1, 1, 1], [3, 3, 2, 2], sigma=0.5, seed=10)
    gs = LadderStudent(g, 4, seed=0, dtype=F64)
    floors = []
    for n in (2000, 8000):
        x, y, z = _graph_data(g, n, seed=11)
        stats = collect_statistics(gs, x, y, z, dtype=F64, groups=8)
        res = compare_statistics_to_theory(gs, stats, replicates=list(stats.leave_one_out()))
        assert res["noise_groups"] == 8
        floors.append(res["levels"][1]["F_propagated_floor"])
        assert all(math.isfinite(row["F_local_floor"]) and row["F_local_floor"] > 0 for row in res["levels"])
    ratio = floors[0] / floors[1]
    assert 1.3 < ratio < 3.0, ratio  # sqrt(4) = 2, with the jackknife's own ~25% spread


def test_fully_informative_numbers_are_within_noise():
    g = FI["conv1d-overlap"]()
    x, y, z = _graph_data(g, 1200, seed=5)
    gs = LadderStudent(g, 4, seed=1, dtype=F64)
    stats = collect_statistics(gs, x, y, z, dtype=F64, groups=4)
    res = compare_statistics_to_theory(gs, stats, replicates=list(stats.leave_one_out()))
    for row in res["levels"]:
        assert "F_propagated" in row["within_noise"] and "G_propagated" in row["within_noise"]


# ------------------------------------------------------------------------------------ bad input
def test_bad_input_is_refused():
    g = _irregular_dag()
    x, y, z = _graph_data(g, 50)
    gs = LadderStudent(g, 3, dtype=F64)
    acc = FrequencyAccumulator(gs)
    with pytest.raises(ValueError, match=r"z: expected the \(N, 8\)"):
        acc.add(gs.forward_backward(x, y), z[:, :5])
    bad = z.clone()
    bad[0, 1] = 2  # region 1.0 has 2 events
    with pytest.raises(ValueError, match="level 1 holds events outside"):
        acc.add(gs.forward_backward(x, y), bad)
    with pytest.raises(ValueError, match="rows for a record"):
        acc.add(gs.forward_backward(x[:10], y[:10]), z)
    with pytest.raises(ValueError, match="no examples"):
        acc.result()
    with pytest.raises(TypeError, match="LadderStudent"):
        FrequencyAccumulator(object())
    with pytest.raises(ValueError, match="empty"):
        collect_statistics(gs, x[:0], y[:0], z[:0])
    with pytest.raises(ValueError, match="batch_size"):
        collect_statistics(gs, x, y, z, batch_size=0)
    with pytest.raises(ValueError, match="groups"):
        collect_statistics(gs, x, y, z, groups=1)
    stats = collect_statistics(gs, x, y, z)
    other = Ladder.conv1d(6, [3, 2, 3], [1, 1, 1], [3, 3, 2, 2], seed=1)
    with pytest.raises(ValueError, match="another ladder"):
        reformulate(gs, exact_statistics(other), stats)
    with pytest.raises(TypeError, match="EventStatistics"):
        reformulate(gs, stats, stats)
    with pytest.raises(ValueError, match="loss"):
        reformulate(gs, stats.P, stats, loss="hinge")
    with pytest.raises(ValueError, match="top"):
        reformulate(gs, stats.P, stats, top="guess")
    with pytest.raises(ValueError, match="P_source"):
        compare_statistics_to_theory(gs, stats, P_source="prior")
    with pytest.raises(ValueError, match="other widths"):
        reformulate(LadderStudent(g, 4, dtype=F64), stats.P, stats)
