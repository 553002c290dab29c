"""Per-event frequency statistics (smaso/student/frequency.py, framework paper Eq 6).

Reference: plain Python loops over examples, regions and events on the per-example record
of one batch (which test_student.py checks against autograd), and
``teachers.statistics.empirical_statistics`` for P.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest_student import assert_close, fi_sample, one_torch_thread, perturb_params  # noqa: F401 (fixture)

from smaso.student.frequency import FrequencyAccumulator, collect_statistics
from smaso.student.network import LadderStudent
from teachers import Ladder, LadderSample, sample_ladder
from teachers.statistics import empirical_statistics, exact_statistics

PER_EVENT = {"Fbar": "fbar", "F": "f", "D": "slope", "Dp": "deriv", "U": "u", "G": "g", "Gf": "g_f"}


def _ladder():
    return Ladder.random(depth=2, branching=[2, 3], events=[3, 4, 2], mode="topdown", concentration=0.6, seed=3,
                         emission="gaussian", sigma=0.5)


def _student(lad, batch_norm=False, activation="swish:0.7", seed=0):
    st = LadderStudent(lad, [4], activation=activation, batch_norm=batch_norm, dtype=torch.float64, seed=seed)
    with torch.no_grad():
        for b in st.biases:
            b.normal_(0, 0.3, generator=torch.Generator().manual_seed(seed + 10))
    return st


def _brute_force(lad, rec, z):
    """Every statistic by loops over examples (n), regions (r) and events (e)."""
    d, off, N = lad.depth, lad.level_offsets, z.shape[0]
    z = z.long()
    out = {"counts": [], "means": {k: [None] * (d + 1) for k in PER_EVENT}, "Fc": [None] * (d + 1),
           "Gp_tilde": [None] * (d + 1)}
    for l in range(d + 1):
        R, m = lad.num_regions[l], lad.events[l]
        counts = torch.zeros(R, m, dtype=torch.float64)
        keys = PER_EVENT if l < d else {"Fbar": "fbar"}
        sums = {k: torch.zeros(R, m, rec.fbar[l].shape[-1], dtype=torch.float64) for k in keys}
        for n in range(N):
            for r in range(R):
                e = z[n, off[l] + r].item()
                counts[r, e] += 1
                for k, attr in keys.items():
                    sums[k][r, e] += getattr(rec, attr)[l][n, r]
        out["counts"].append(counts)
        for k in keys:
            out["means"][k][l] = torch.where(counts[..., None] > 0, sums[k] / counts.clamp(min=1)[..., None], 0.0)
        if l >= 1:
            b, mp = lad.branching[l - 1], lad.events[l - 1]
            fc = torch.zeros(R, mp, rec.fbar[l].shape[-1], dtype=torch.float64)
            pc = torch.zeros(R, mp, dtype=torch.float64)
            gp = torch.zeros(R, m, rec.g[l - 1].shape[-1], dtype=torch.float64)
            for n in range(N):
                for r in range(R):
                    a = z[n, off[l - 1] + r // b].item()
                    fc[r, a] += rec.fbar[l][n, r]
                    pc[r, a] += 1
                    gp[r, z[n, off[l] + r].item()] += rec.g[l - 1][n, r // b]
            out["Fc"][l] = torch.where(pc[..., None] > 0, fc / pc.clamp(min=1)[..., None], 0.0)
            out["Gp_tilde"][l] = gp / N
    dW = []
    for l in range(d):
        b = lad.branching[l]
        acc = torch.zeros_like(rec.dW[l])
        for n in range(N):
            for c in range(lad.num_regions[l + 1]):
                acc[c] += torch.outer(rec.fbar[l + 1][n, c], rec.g[l][n, c // b])
        dW.append(acc / N)
    out["dW"] = dW
    return out


@pytest.mark.parametrize("activation", ["swish:0.7", "relu"])
@pytest.mark.parametrize("batch_norm", [False, True])
def test_statistics_equal_brute_force_loops(batch_norm, activation):
    lad = _ladder()
    s = sample_ladder(lad, 40, seed=2)
    x = s.inputs(dtype=torch.float64)
    st = _student(lad, batch_norm, activation)
    stats = collect_statistics(st, x, s.y, s.z)
    rec = st.forward_backward(x, s.y)
    ref = _brute_force(lad, rec, s.z)
    d = lad.depth
    assert stats.num_examples == 40
    assert stats.loss == pytest.approx(rec.loss, rel=1e-14)
    for l in range(d + 1):
        assert torch.equal(stats.counts[l], ref["counts"][l])
        assert_close(stats.p[l], ref["counts"][l] / 40, 1e-15, f"p[{l}]")
        for k in PER_EVENT:
            if ref["means"][k][l] is None:
                assert stats.means[k][l] is None, (k, l)
            else:
                assert_close(stats.means[k][l], ref["means"][k][l], 1e-12, f"{k}[{l}]")
                assert_close(getattr(stats, k)[l], ref["means"][k][l], 1e-12, f"attribute {k}[{l}]")
        if l < d:
            assert_close(stats.G_tilde[l], ref["means"]["G"][l] * ref["counts"][l][..., None] / 40, 1e-12, "G~")
        if l >= 1:
            assert_close(stats.Fc[l], ref["Fc"][l], 1e-12, f"Fc[{l}]")
            assert_close(stats.Gp_tilde[l], ref["Gp_tilde"][l], 1e-12, f"Gp_tilde[{l}]")
    for l in range(d):
        assert_close(stats.dW[l], ref["dW"][l], 1e-12, f"dW[{l}]")
        assert_close(stats.dW[l], rec.dW[l], 1e-12, f"dW[{l}] vs record")
        assert_close(stats.db[l], rec.g[l].mean(0), 1e-12, f"db[{l}]")
    # leaves: E[x | z] of a Gaussian emission around one-hot means is the one-hot mean + noise
    assert stats.Fbar[d].shape == (lad.num_regions[d], lad.events[d], lad.emission.dim)
    with pytest.raises(AttributeError):
        _ = stats.not_a_statistic


@pytest.mark.parametrize(("activation", "top", "batch_norm"), [
    ("relu", "linear", False), ("relu", "linear", True), ("swish:0.7", "linear", False), ("swish:0.7", "relu", True),
    ("leaky_relu:0.2", "swish:0.3", False)])
def test_stacked_record_is_the_same_record(activation, top, batch_norm):
    """``stacked=True`` only changes where the fields live: the same values, views of one buffer per level
    whose slots are ``stacked_fields``; and the accumulator's one-matmul path equals its per-field path."""
    lad = _ladder()
    s = sample_ladder(lad, 50, seed=6)
    x = s.inputs(dtype=torch.float64)
    st = LadderStudent(lad, [4], activation=activation, top_activation=top, batch_norm=batch_norm,
                       dtype=torch.float64, seed=1)
    plain, stacked = st.forward_backward(x, s.y), st.forward_backward(x, s.y, stacked=True)
    assert plain.stacked is None and stacked.stacked_fields == st.stacked_fields()
    for name in ("u", "f", "fbar", "slope", "deriv", "f_tilde", "g_raw", "g_f", "g", "dW", "db", "dc1", "dc0"):
        for a, b in zip(getattr(plain, name), getattr(stacked, name), strict=True):
            assert (a is None) == (b is None), name
            if a is not None:
                assert torch.equal(a, b), name
    for l in range(lad.depth):
        buf = stacked.stacked[l]
        assert buf.shape == (lad.num_regions[l], len(st.stacked_fields()), st.widths[l], 50)
        for i, name in enumerate(st.stacked_fields()):
            assert torch.equal(buf[:, i].permute(2, 0, 1), getattr(plain, name)[l]), (l, name)
    acc_plain, acc_stacked = FrequencyAccumulator(st), FrequencyAccumulator(st)
    acc_plain.add(plain, s.z)
    acc_stacked.add(stacked, s.z)
    a, b = acc_plain.result(), acc_stacked.result()
    for k in PER_EVENT:
        for l in range(lad.depth):
            assert_close(a.means[k][l], b.means[k][l], 1e-13, f"{k}[{l}]")


@pytest.mark.parametrize("emission", ["gaussian", "onehot"])
def test_regions_with_many_events_take_the_index_add_path(emission, monkeypatch):
    """Regions with more than 256 events get no one-hot scatter matrix: their sums go through
    index_add_ and their counts through bincounts (root) or the margins of the pair counts.  Forcing
    that path on every level must give the brute-force loops' numbers."""
    import smaso.student.batch_sums as batch_sums
    import smaso.student.frequency as frequency

    for module in (frequency, batch_sums):  # (add's choice of path, and scatter_sums' own)
        monkeypatch.setattr(module, "_ONE_HOT_MAX_EVENTS", 0)
    lad = Ladder.random(depth=2, branching=[2, 3], events=[3, 4, 2], mode="topdown", concentration=0.6, seed=3,
                        emission=emission, sigma=0.5 if emission == "gaussian" else None)
    s = sample_ladder(lad, 40, seed=2)
    x = s.inputs(dtype=torch.float64)
    st = _student(lad)
    stats = collect_statistics(st, x, s.y, s.z, batch_size=16)
    ref = _brute_force(lad, st.forward_backward(x, s.y), s.z)
    for l in range(lad.depth + 1):
        assert torch.equal(stats.counts[l], ref["counts"][l])
        for k in PER_EVENT:
            if ref["means"][k][l] is not None and stats.means[k][l] is not None and l < lad.depth:
                assert_close(stats.means[k][l], ref["means"][k][l], 1e-12, f"{k}[{l}]")
        if l >= 1:
            assert_close(stats.Fc[l], ref["Fc"][l], 1e-12, f"Fc[{l}]")
            assert_close(stats.Gp_tilde[l], ref["Gp_tilde"][l], 1e-12, f"Gp_tilde[{l}]")


@pytest.mark.parametrize("emission", ["gaussian", "onehot"])
def test_empirical_P_equals_empirical_statistics(emission):
    """Counts come from the one-hot scatter matrices, from bincounts, and (one-hot leaves) from the
    margins of the (parent, child) counts: all must equal a plain recount of z."""
    lad = Ladder.random(depth=2, branching=[2, 3], events=[3, 4, 2], mode="topdown", concentration=0.6, seed=3,
                        emission=emission, sigma=0.5 if emission == "gaussian" else None)
    s = sample_ladder(lad, 300, seed=4)
    stats = collect_statistics(_student(lad), s.inputs(dtype=torch.float64), s.y, s.z, batch_size=64)
    ref = empirical_statistics(lad, s.z)
    assert stats.P.num_examples == ref.num_examples == 300
    for l in range(lad.depth + 1):
        assert torch.equal(stats.P.marginals[l], ref.marginals[l])
        if l >= 1:
            assert torch.equal(stats.P.joints[l], ref.joints[l])
            assert torch.equal(stats.P.P_down[l], ref.P_down[l])


def test_streaming_batches_equal_one_batch_without_bn():
    lad = _ladder()
    s = sample_ladder(lad, 61, seed=5)  # 61 = 8 * 7 + 5: a ragged last batch
    x = s.inputs(dtype=torch.float64)
    st = _student(lad)
    one = collect_statistics(st, x, s.y, s.z)
    many = collect_statistics(st, x, s.y, s.z, batch_size=7)
    assert many.num_examples == one.num_examples == 61
    assert many.loss == pytest.approx(one.loss, rel=1e-13)
    for l in range(lad.depth + 1):
        assert torch.equal(many.counts[l], one.counts[l])
        for k, v in one.means.items():
            if v[l] is not None:
                assert_close(many.means[k][l], v[l], 1e-13, f"{k}[{l}]")
        if l >= 1:
            assert_close(many.Fc[l], one.Fc[l], 1e-13)
            assert_close(many.Gp_tilde[l], one.Gp_tilde[l], 1e-13)
    for l in range(lad.depth):
        assert_close(many.dW[l], one.dW[l], 1e-13)
        assert_close(many.db[l], one.db[l], 1e-13)
    # the accumulator used by hand gives the same result
    acc = FrequencyAccumulator(st)
    for a in range(0, 61, 20):
        acc.add(st.forward_backward(x[a: a + 20], s.y[a: a + 20]), s.z[a: a + 20])
    res = acc.result()
    assert_close(res.dW[0], one.dW[0], 1e-13)
    assert_close(res.means["G"][1], one.means["G"][1], 1e-13)


def test_streaming_with_bn_differs():
    """With BN each batch is normalized with its own statistics: batches of 7 are another network."""
    lad = _ladder()
    s = sample_ladder(lad, 61, seed=5)
    x = s.inputs(dtype=torch.float64)
    st = _student(lad, batch_norm=True)
    one = collect_statistics(st, x, s.y, s.z)
    many = collect_statistics(st, x, s.y, s.z, batch_size=7)
    assert (many.Fbar[1] - one.Fbar[1]).abs().max().item() > 1e-3
    assert torch.equal(many.counts[1], one.counts[1])


def test_empty_events_small_sample():
    """N = 5 on a ladder with 16 classes: most events never occur; their rows are 0, never NaN."""
    lad, s = fi_sample(depth=2, branching=2, leaf_events=2, n=5, seed=0)
    st = LadderStudent(lad, 3, batch_norm=True, dtype=torch.float64)
    stats = collect_statistics(st, s.inputs(dtype=torch.float64), s.y, s.z)
    z = s.z.long()
    for l in range(lad.depth + 1):
        off = lad.level_offsets
        seen = {(r, int(z[n, off[l] + r])) for n in range(5) for r in range(lad.num_regions[l])}
        want = sorted((r, e) for r in range(lad.num_regions[l]) for e in range(lad.events[l]) if (r, e) not in seen)
        assert sorted(stats.empty_events[l]) == want, l
        empty = stats.counts[l] == 0
        assert empty.sum().item() == len(want)
        for k, v in stats.means.items():
            if v[l] is not None:
                assert torch.isfinite(v[l]).all(), (k, l)
                assert bool((v[l][empty] == 0).all()), (k, l)
        if l < lad.depth:
            assert bool((stats.G_tilde[l][empty] == 0).all())
        if l >= 1:
            assert torch.isfinite(stats.Fc[l]).all() and torch.isfinite(stats.Gp_tilde[l]).all()
            parent_empty = stats.counts[l - 1][lad.parent_index(l)] == 0
            assert bool((stats.Fc[l][parent_empty] == 0).all())
            assert bool((stats.Gp_tilde[l][empty] == 0).all())
    assert len(stats.empty_events[0]) >= 11  # at most 5 of the 16 labels occur


def test_zero_probability_event():
    """A label of probability 0 never occurs, however large N is; rows 0, exact P row 0 too."""
    lad = Ladder([2], [3, 2], mode="topdown", prior=[0.6, 0.4, 0.0],
                 tables=[[[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]]])
    s = sample_ladder(lad, 500, seed=1)
    st = LadderStudent(lad, [], dtype=torch.float64)
    stats = collect_statistics(st, s.inputs(dtype=torch.float64), s.y, s.z, batch_size=128)
    assert stats.empty_events[0] == [(0, 2)]
    assert stats.empty_events[1] == []
    assert stats.counts[0][0, 2].item() == 0
    for k in ("F", "Fbar", "D", "Dp", "U", "G", "Gf"):
        assert torch.isfinite(stats.means[k][0]).all()
        assert stats.means[k][0][0, 2].abs().max().item() == 0.0
    assert torch.isfinite(stats.Fc[1]).all() and stats.Fc[1][:, 2].abs().max().item() == 0.0
    ex = exact_statistics(lad)
    assert ex.P_down[1][:, 2].abs().max().item() == 0.0 and torch.isfinite(ex.P_down[1]).all()


def test_bad_inputs():
    lad = _ladder()
    s = sample_ladder(lad, 20, seed=0)
    x, y, z = s.inputs(dtype=torch.float64), s.y, s.z
    st = _student(lad)
    # a dataset missing latents: only the label and the leaves
    keep = [0, *range(lad.level_offsets[-2], lad.total_regions)]
    with pytest.raises(ValueError, match=rf"z: expected the \(N, {lad.total_regions}\) events"):
        collect_statistics(st, x, y, z[:, keep])
    with pytest.raises(ValueError, match="z: expected"):
        collect_statistics(st, x, y, z[:, 0])  # 1-D
    with pytest.raises(ValueError, match="z: expected"):
        collect_statistics(st, x, y, z.numpy())
    with pytest.raises(ValueError, match=r"same number of examples.*20, 20, 19"):
        collect_statistics(st, x, y, z[:19])
    with pytest.raises(ValueError, match=r"same number of examples.*20, 18, 20"):
        collect_statistics(st, x, y[:18], z)
    with pytest.raises(ValueError, match="empty"):
        collect_statistics(st, x[:0], y[:0], z[:0])
    with pytest.raises(ValueError, match="batch_size"):
        collect_statistics(st, x, y, z, batch_size=0)
    with pytest.raises(ValueError, match="x: expected shape"):
        collect_statistics(st, x[:, :3], y, z)
    bad = z.long().clone()
    bad[3, lad.level_offsets[1]] = lad.events[1]  # an event index the student's ladder does not have
    with pytest.raises(ValueError, match=r"z: level 1 holds events outside \[0, 4\)"):
        collect_statistics(st, x, y, bad)
    with pytest.raises(ValueError, match="no examples"):
        FrequencyAccumulator(st).result()
    # a sample of another ladder with the same input layout but another region tree
    other = Ladder.random(depth=1, branching=6, events=[3, 2], seed=0, emission="gaussian", sigma=0.5)
    so = sample_ladder(other, 20, seed=0)
    with pytest.raises(ValueError, match="z: expected"):
        collect_statistics(st, so.inputs(dtype=torch.float64), so.y, so.z)
    assert isinstance(s, LadderSample)


def test_stacked_buffers_are_reused_when_they_fit():
    """Passing a previous record's buffers writes into the same memory (same values as fresh buffers);
    a batch of another size gets new ones; anything else is refused."""
    lad = _ladder()
    s = sample_ladder(lad, 70, seed=8)
    x = s.inputs(dtype=torch.float64)
    st = _student(lad, batch_norm=True)
    first = st.forward_backward(x[:32], s.y[:32], stacked=True)
    buffers = first.stacked
    second = st.forward_backward(x[32:64], s.y[32:64], stacked=buffers)
    assert all(a is b for a, b in zip(second.stacked, buffers, strict=True))
    fresh = st.forward_backward(x[32:64], s.y[32:64], stacked=True)
    for name in st.stacked_fields():
        for a, b in zip(getattr(second, name)[: lad.depth], getattr(fresh, name)[: lad.depth], strict=True):
            assert torch.equal(a, b), name
    last = st.forward_backward(x[64:], s.y[64:], stacked=buffers)  # 6 examples: other shapes
    assert not any(a is b for a, b in zip(last.stacked, buffers, strict=True))
    with pytest.raises(TypeError, match="stacked"):
        st.forward_backward(x[:4], s.y[:4], stacked=3)
    # collect_statistics streams with reuse: equal to one accumulator fed fresh records
    acc = FrequencyAccumulator(st)
    for lo in range(0, 70, 32):
        acc.add(st.forward_backward(x[lo: lo + 32], s.y[lo: lo + 32]), s.z[lo: lo + 32])
    ref, got = acc.result(), collect_statistics(st, x, s.y, s.z, batch_size=32)
    for k in PER_EVENT:
        for l in range(lad.depth):
            assert_close(got.means[k][l], ref.means[k][l], 1e-13, f"{k}[{l}]")


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b||_F / ||b||_F (0 when both are 0)."""
    a, b = a.double(), b.double()
    scale = b.norm().item()
    return (a - b).norm().item() / scale if scale > 0 else (a - b).norm().item()


@pytest.mark.parametrize("batch_norm", [False, True])
def test_float32_batch_sums_agree_with_float64_to_1e6(batch_norm):
    """The precision contract (FrequencyAccumulator): a float32 student's float32 batch sums, added into
    float64 totals, give every statistic and every error of the comparison within 1e-6 relative of float64
    batch sums of the same records, over 64 batches (the rounding is one batch's, not N rows')."""
    from smaso.student.diagnosis import compare_statistics_to_theory

    lad = Ladder.random(depth=3, branching=3, events=6, seed=3)
    s = sample_ladder(lad, 64 * 512, seed=1)
    st = LadderStudent(lad, 12, batch_norm=batch_norm, dtype=torch.float32, seed=0)
    x = s.inputs(dtype=torch.float32)
    stats = {dt: collect_statistics(st, x, s.y, s.z, batch_size=512, dtype=dt) for dt in (torch.float32,
                                                                                          torch.float64)}
    f32, f64 = stats[torch.float32], stats[torch.float64]
    assert f32.loss == pytest.approx(f64.loss, rel=1e-6)
    worst = 0.0
    for l in range(lad.depth + 1):
        assert torch.equal(f32.counts[l], f64.counts[l])
        for k, v in f64.means.items():
            if v[l] is not None:
                assert f32.means[k][l].dtype == torch.float64
                worst = max(worst, _relative(f32.means[k][l], v[l]))
        if l >= 1:
            worst = max(worst, _relative(f32.Fc[l], f64.Fc[l]), _relative(f32.Gp_tilde[l], f64.Gp_tilde[l]))
    for l in range(lad.depth):
        worst = max(worst, _relative(f32.dW[l], f64.dW[l]), _relative(f32.db[l], f64.db[l]))
    assert 0 < worst <= 1e-6  # (0 would mean the float32 path was not taken)
    # the errors are relative (dimensionless) already: they agree to 1e-6 times max(1, error); an error that
    # is 0 in exact arithmetic reads ~1e-8 on float32 records in both paths
    reports = [compare_statistics_to_theory(st, r) for r in (f32, f64)]
    compared = 0
    for a, b in zip(reports[0]["levels"], reports[1]["levels"], strict=True):
        for key, value in b.items():
            if isinstance(value, float) and math.isfinite(value):
                assert abs(a[key] - value) <= 1e-6 * max(1.0, value), (b["level"], key, a[key], value)
                compared += 1
    assert compared >= 20


def _irregular_dag() -> Ladder:
    """Regions of different event counts and 1-3 parents (the gather / index_add path of the edge sums)."""
    return Ladder.random(events=[[3], [2, 4, 3], [3, 3, 3, 3]],
                         parents=[[()], [(0,), (0,), (0,)], [(0,), (0, 1), (1, 2), (0, 1, 2)]], seed=5, sigma=0.6)


@pytest.mark.parametrize("case", ["tree-onehot", "tree-onehot-bn", "tree-gauss-bn-before", "bottomup-shared",
                                  "conv1d", "irregular", "many-events"])
def test_u_and_gf_from_the_edge_sums_equal_their_per_example_sums(case):
    """U and (without BN at the level) Gf are not summed per example but mapped from the same batch's edge sums
    by the weights (u = W^T fbar_children + b, g_f = g_raw = W g_parents, Eq 1): on every path of the edge sums
    (uniform tree with one-hot or Gaussian leaves, strided plan, gather path, regions with > 256 events), with
    biases, shared weights and BN, they must equal plain per-example sums of the record's u and g_f to
    float64 round-off, batch after batch."""
    kw: dict = {}
    if case.startswith("tree-onehot"):
        lad = Ladder.random(depth=3, branching=3, events=6, seed=3)
        kw["batch_norm"] = case.endswith("bn")
    elif case == "tree-gauss-bn-before":
        lad, kw["batch_norm"] = _ladder(), "before"
    elif case == "bottomup-shared":
        lad, kw["shared"] = Ladder.random(depth=3, branching=2, events=3, seed=1, mode="bottomup"), True
    elif case == "conv1d":
        lad = Ladder.conv1d(6, [3, 2, 3], [1, 1, 1], [3, 3, 2, 2], sigma=0.5, seed=10)
    elif case == "irregular":
        lad = _irregular_dag()
    else:
        lad = Ladder.random(depth=2, branching=2, events=[300, 260, 5], seed=2)
    st = LadderStudent(lad, 3, activation="swish:0.7", dtype=torch.float64, seed=1, **kw)
    perturb_params(st)
    s = sample_ladder(lad, 90, seed=4)
    x = s.inputs(dtype=torch.float64)
    acc = FrequencyAccumulator(st)
    derived = acc._derived  # which quantities take the edge sums' route (the test checks they do)
    assert all("U" in derived[l] for l in range(lad.depth))
    assert ("Gf" in derived[1]) == (not st.batch_norm)
    d, off, M = lad.depth, lad.level_offsets, lad.events
    sums = {k: [torch.zeros(lad.num_regions[l], M[l], st.widths[l], dtype=torch.float64) for l in range(d)]
            for k in ("u", "g_f")}
    for rows in (slice(0, 50), slice(50, 90)):
        rec = st.forward_backward(x[rows], s.y[rows])
        acc.add(rec, s.z[rows])
        for l in range(d):
            zl = s.z[rows, off[l]: off[l + 1]].long()
            regions = torch.arange(lad.num_regions[l]).expand_as(zl)
            for k in sums:
                sums[k][l].index_put_((regions, zl), getattr(rec, k)[l], accumulate=True)
    stats = acc.result()
    for l in range(d):
        for key, k in (("U", "u"), ("Gf", "g_f")):
            ref = sums[k][l] / stats.counts[l].clamp(min=1)[..., None]
            assert stats.means[key][l].dtype == torch.float64
            assert_close(stats.means[key][l], ref, 1e-12, f"{key}[{l}] ({case})")


def test_a_record_of_other_weights_is_refused():
    """U and Gf come from the edge sums times the accumulator's student's weights: a record made before an update,
    or by another student, would get a wrong U without a word; it is refused instead."""
    from smaso.student.frequency import FrequencyAccumulator
    from smaso.student.network import LadderStudent
    from teachers.ladder import Ladder
    from teachers.sampling import sample_ladder

    lad = Ladder.random(depth=2, branching=2, events=3, seed=0)
    s = sample_ladder(lad, 64, 0, progress=False)
    x, y, z = s.inputs(dtype=torch.float64), s.y, s.z
    student = LadderStudent(lad, 4, dtype=torch.float64, seed=0)
    acc = FrequencyAccumulator(student)
    rec = student.forward_backward(x, y)
    acc.add(rec, z)  # the same weights: accepted
    student.apply_update(rec, 0.1)
    with pytest.raises(ValueError, match="before the student's weights changed"):
        acc.add(rec, z)
    other = LadderStudent(lad, 4, dtype=torch.float64, seed=0)
    with pytest.raises(ValueError, match="another student"):
        acc.add(other.forward_backward(x, y), z)


def test_scatter_matrices_are_written_whole_each_batch():
    """The kept (R, M, N) scatter matrices are rebuilt whole from each batch's events (a comparison, not ones set on
    a zeroed buffer and reset after the batch): whatever a buffer held before, a batch's sums are a fresh
    accumulator's, bit for bit, and every matrix is the one-hot of its level's events."""
    lad = _ladder()
    s = sample_ladder(lad, 40, seed=6)
    x = s.inputs(dtype=torch.float64)
    st = _student(lad)
    acc = FrequencyAccumulator(st)
    acc.add(st.forward_backward(x[:20], s.y[:20]), s.z[:20])
    assert acc._one_hot_buffers  # the levels' scatter matrices are kept between batches
    for buf in acc._one_hot_buffers.values():
        buf.fill_(math.nan)  # what a buffer holds must not reach the next batch
    acc.add(st.forward_backward(x[20:], s.y[20:]), s.z[20:])
    fresh = FrequencyAccumulator(st)
    fresh.add(st.forward_backward(x[:20], s.y[:20]), s.z[:20])
    fresh.add(st.forward_backward(x[20:], s.y[20:]), s.z[20:])
    for name in ("counts", "joint_counts", "own", "fc", "gp"):
        for a, b in zip(getattr(acc, name), getattr(fresh, name), strict=True):
            assert (a is None and b is None) or torch.equal(a, b), name
    off = lad.level_offsets
    for (level, n), buf in acc._one_hot_buffers.items():
        ev = s.z[20:, off[level]: off[level + 1]].long()
        expected = torch.zeros(ev.shape[1], lad.events[level], n, dtype=buf.dtype).scatter_(1, ev.T.unsqueeze(1), 1.0)
        assert torch.equal(buf, expected)


@pytest.mark.parametrize("batch_norm", [False, True, "before"])
def test_u_gf_and_fbar_are_not_stacked_and_their_sums_equal_the_per_example_sums(batch_norm):
    """The stacked buffer holds only what the accumulator sums per example: never u (U is mapped from the edge
    sums), g_f only with BN before the gate (elsewhere the edge sums and BN's affine maps give Gf, and the top
    level's Gf is summed from the record's own tensor), fbar not with BN after it (BN's map of F); U, Gf and Fbar
    still equal their per-example sums."""
    lad = _ladder()
    s = sample_ladder(lad, 60, seed=8)
    st = _student(lad, batch_norm=batch_norm)
    fields = st.stacked_fields()
    assert "u" not in fields and ("g_f" in fields) == (batch_norm == "before")
    assert ("fbar" in fields) == (batch_norm is not True)
    rec = st.forward_backward(s.inputs(dtype=torch.float64), s.y, stacked=True)
    acc = FrequencyAccumulator(st)
    acc.add(rec, s.z)
    res = acc.result()
    off = lad.level_offsets
    for l in range(lad.depth):
        assert rec.stacked[l].shape[1] == len(fields)
        one_hot = torch.nn.functional.one_hot(s.z[:, off[l]: off[l + 1]].long(), lad.events[l]).to(torch.float64)
        counts = one_hot.sum(0).clamp(min=1)[..., None]
        for key, field in (("U", "u"), ("Gf", "g_f"), ("Fbar", "fbar")):
            want = torch.einsum("nra,nrj->raj", one_hot, getattr(rec, field)[l]) / counts
            assert_close(res.means[key][l], want, 1e-12, f"{key}[{l}]")
