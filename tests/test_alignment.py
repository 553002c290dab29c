"""Event alignment (smaso.student.alignment): the streamed statistics equal their definitions computed directly
on the activations (numpy), merge exactly across batches, are 1 (and the probe perfect) on a student built to
copy the events, sit at their floors for a node independent of the events, and are refused on bad input.
Streamed over chunks, stores and engines (accumulate_alignment) they equal the in-memory pass: bit for bit where
the batches and the merge order are the same, to float64 round-off where the chunking changes how the sums are
associated."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from smaso.student.alignment import (
    AlignmentAccumulator,
    LinearProbe,
    accumulate_alignment,
    alignment_report,
    alignment_rows,
    collect_alignment,
)
from smaso.student.network import LadderStudent
from teachers.chunked import as_chunks, open_dataset, sample_to_store
from teachers.engine import SerialEngine
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

F64 = torch.float64


@pytest.fixture(scope="module")
def data():
    g = Ladder.random(depth=3, branching=2, events=3, seed=2)
    s = sample_ladder(g, 3000, 1)
    return g, s.inputs(dtype=F64), s.z.long()


def test_statistics_equal_their_definitions(data):
    g, x, z = data
    st = LadderStudent(g, 5, seed=3, dtype=F64)
    rec = st.forward_backward(x, z[:, 0])
    acc = AlignmentAccumulator(st, controls=1)
    acc.add(rec, z)
    al = acc.result()
    off = g.level_offsets
    for l in range(g.depth):
        f = rec.f[l].numpy()  # (N, R, n)
        for r, j in itertools.product(range(g.num_regions[l]), range(f.shape[-1])):
            v, ev = f[:, r, j], z[:, off[l] + r].numpy()
            ks = np.unique(ev)
            between = sum((ev == k).sum() * (v[ev == k].mean() - v.mean()) ** 2 for k in ks)
            want = between / ((v - v.mean()) ** 2).sum() if v.var() > 0 else 0.0
            assert al.eta2[l][r, j].item() == pytest.approx(want, abs=1e-10)
            on = rec.slope[l][:, r, j].numpy() > 0.5
            joint = np.array([[np.mean((ev == k) & (on == o)) for o in (0, 1)] for k in ks])
            pz, po = joint.sum(1, keepdims=True), joint.sum(0, keepdims=True)
            with np.errstate(divide="ignore", invalid="ignore"):
                mi = np.nansum(joint * np.log2(joint / (pz * po)))
            if l == 0:  # the linear output level: always on, its on-state MI is not defined
                assert math.isnan(al.mi[l][r, j].item())
            else:
                assert al.mi[l][r, j].item() == pytest.approx(mi, abs=1e-10)
        for r, k in itertools.product(range(g.num_regions[l]), range(g.events[l])):
            ind = (z[:, off[l] + r].numpy() == k).astype(float)
            corrs = [np.corrcoef(f[:, r, j], ind)[0, 1] for j in range(f.shape[-1]) if f[:, r, j].std() > 0]
            assert al.spec[l][r, k].item() == pytest.approx(max(corrs), abs=1e-10)
        if g.num_regions[l] > 1:  # the control of region r is region r + 1 (mod R)
            ev = np.roll(z[:, off[l]: off[l + 1]].numpy(), -1, axis=1)
            v = f[:, 0, 0]
            between = sum((ev[:, 0] == k).sum() * (v[ev[:, 0] == k].mean() - v.mean()) ** 2 for k in range(3))
            want = between / ((v - v.mean()) ** 2).sum() if v.var() > 0 else 0.0
            assert al.eta2_control[l][0, 0].item() == pytest.approx(want, abs=1e-10)


def test_merges_across_batches(data):
    g, x, z = data
    st = LadderStudent(g, 4, seed=0, dtype=F64)
    whole = AlignmentAccumulator(st)
    whole.add(st.forward_backward(x, z[:, 0]), z)
    parts = [AlignmentAccumulator(st) for _ in range(3)]
    for p, (lo, hi) in zip(parts, ((0, 1000), (1000, 1700), (1700, 3000)), strict=True):
        p.add(st.forward_backward(x[lo:hi], z[lo:hi, 0]), z[lo:hi])
    merged = parts[0].merge_(parts[1].state_dict()).merge_(parts[2])
    a, b = whole.result(), merged.result()
    for key in ("eta2", "eta2_control", "mi", "mi_control", "spec"):
        for u, v in zip(getattr(a, key), getattr(b, key), strict=True):
            assert torch.allclose(u, v, atol=1e-10, rtol=0, equal_nan=True)


def _copy_events_student(g: Ladder) -> LadderStudent:
    """A student whose node k of region alpha is 1[z_alpha = k] on a fully informative tree with one-hot leaves:
    the event is the pattern of its children's events, so node c = ReLU(sum_b 1[z_b = c_b] - (b - 1))."""
    st = LadderStudent(g, [g.events[l] for l in range(1, g.depth)], dtype=F64, seed=0)
    with torch.no_grad():
        for l in range(1, g.depth):
            b, mc = g.branching[l], g.events[l + 1]
            w = torch.zeros(b, mc, g.events[l], dtype=F64)
            for c, code in enumerate(itertools.product(range(mc), repeat=b)):
                for pos, k in enumerate(code):
                    w[pos, k, int(g.lookups[l][0][c])] = 1.0
            st.weights[l].copy_(w.repeat(g.num_regions[l], 1, 1))
            st.biases[l].fill_(-(b - 1))
    return st


def test_a_student_that_copies_the_events_is_perfectly_aligned():
    g = Ladder.fully_informative(depth=3, branching=2, leaf_events=2)
    s = sample_ladder(g, 4000, 0)
    x, z = s.inputs(dtype=F64), s.z.long()
    st = _copy_events_student(g)
    al, probe = collect_alignment(st, x, z)
    for l in range(1, g.depth):
        assert torch.allclose(al.eta2[l], torch.ones_like(al.eta2[l]), atol=1e-12)
        seen = torch.isfinite(al.spec[l])
        assert seen.any() and torch.allclose(al.spec[l][seen], torch.ones_like(al.spec[l][seen]), atol=1e-12)
        assert torch.equal(probe[l], torch.ones_like(probe[l]))
        assert (al.eta2_control[l] < 0.05).all()  # the neighbours' events: independent leaves
        floors = al.floors(l)
        assert al.summary()[l]["eta2"] > 100 * floors["eta2"]


def test_a_node_independent_of_the_events_sits_at_its_floor(data):
    """Nodes fed by noise unrelated to z: eta2 and mi are within a few times their null expectations."""
    g, x, z = data
    st = LadderStudent(g, 6, seed=0, dtype=F64)
    gen = torch.Generator().manual_seed(0)
    rec = st.forward_backward(torch.randn(x.shape, generator=gen, dtype=F64).abs(), z[:, 0])
    acc = AlignmentAccumulator(st)
    acc.add(rec, z)
    al = acc.result()
    for l in range(1, g.depth):
        floors = al.floors(l)
        assert float(al.eta2[l].mean()) < 3 * floors["eta2"]
        assert float(al.mi[l].mean()) < 3 * floors["mi"]


def test_probe_merges_and_refuses_misuse(data):
    g, x, z = data
    st = LadderStudent(g, 4, seed=1, dtype=F64)
    a, b = LinearProbe(st), LinearProbe(st)
    a.add_fit(st.forward_backward(x[:800], z[:800, 0]), z[:800])
    b.add_fit(st.forward_backward(x[800:1500], z[800:1500, 0]), z[800:1500])
    one = LinearProbe(st)
    one.add_fit(st.forward_backward(x[:1500], z[:1500, 0]), z[:1500])
    a.merge_(b)
    held = st.forward_backward(x[1500:], z[1500:, 0])
    a.add_score(held, z[1500:])
    one.add_score(held, z[1500:])
    assert all(torch.equal(u, v) for u, v in zip(a.accuracy(), one.accuracy(), strict=True))
    chance = a.chance(z[1500:])
    assert all(((acc >= 0) & (acc <= 1)).all() and acc.shape == c.shape for acc, c in
               zip(a.accuracy(), chance, strict=True))
    with pytest.raises(RuntimeError, match="already solved"):
        a.add_fit(held, z[1500:])
    with pytest.raises(ValueError, match="no held-out"):
        LinearProbe(st).accuracy()
    with pytest.raises(ValueError, match="z: expected"):
        AlignmentAccumulator(st).add(held, z[1500:, :3])
    with pytest.raises(TypeError, match="student"):
        AlignmentAccumulator("student")
    with pytest.raises(ValueError, match="fit_rows"):
        collect_alignment(st, x, z, fit_rows=0)
    with pytest.raises(ValueError, match="at least 2"):
        AlignmentAccumulator(st).result()
    with pytest.raises(ValueError, match="controls"):
        AlignmentAccumulator(st, controls=-1)
    with pytest.raises(ValueError, match="ridge"):
        LinearProbe(st, ridge=float("nan"))
    with pytest.raises(ValueError, match="no fitting rows"):
        LinearProbe(st).add_score(held, z[1500:])


def test_compare_student_measures_alignment_on_held_out_rows():
    from smaso.student.compare import compare_student

    g = Ladder.default()
    train, held = sample_ladder(g, 1500, 0), sample_ladder(g, 600, 1)
    r = compare_student(train, held_out=False,
                        width=4, readout=8, steps=6, eval_every=3, noise_groups=None, alignment=held)
    rows = [h["alignment"] for h in r.history]
    assert len(rows) == 3 and all(len(a) == g.depth + 1 for a in rows)
    assert all(0 <= a["probe"] <= 1 and 0 < a["probe_chance"] <= 1 and a["eta2"] >= 0 for a in rows[-1])
    table = r.alignment_table(checkpoints=2)
    assert table.count("\n") == 2 * (g.depth + 1) and table.splitlines()[1].startswith("   0")
    with pytest.raises(ValueError, match="alignment"):
        compare_student(train, held_out=False, steps=1,
                        alignment=sample_ladder(Ladder.random(depth=2, seed=0), 50, 0))
    with pytest.raises(ValueError, match="no checkpoint"):
        compare_student(train, held_out=False, width=4, steps=1, noise_groups=None).alignment_table()
    # each checkpoint's rows are alignment_report's of the student then (here: the last one)
    want = alignment_report(r.student, held.inputs(dtype=torch.float64), held.z.long())
    assert str(rows[-1]) == str(want)  # (str: NaN entries compare equal)


def test_compare_student_streams_the_alignment_rows_from_a_store(tmp_path):
    from smaso.student.compare import compare_student

    g = Ladder.default()
    train = sample_ladder(g, 1500, 0)
    path = sample_to_store(g, 2 * 4096 + 100, tmp_path / "held.zarr", seed=1, chunk_rows=4096)
    kw = dict(held_out=False, width=4, readout=8, steps=4, eval_every=4, noise_groups=None)
    from_store = compare_student(train, alignment=str(path), **kw)
    in_memory = compare_student(train, alignment=open_dataset(path).to_sample(), **kw)
    for a, b in zip(from_store.history, in_memory.history, strict=True):
        for ra, rb in zip(a["alignment"], b["alignment"], strict=True):
            assert ra.keys() == rb.keys()
            for k in ra:
                assert ra[k] == pytest.approx(rb[k], rel=1e-12, abs=1e-12, nan_ok=True), k


# ---------------------------------------------------------------------- streaming (accumulate_alignment)
_FIELDS = ("eta2", "eta2_control", "mi", "mi_control", "spec", "spec_node", "events")


def _assert_same(a, b, *, rtol: float = 0.0) -> None:
    """Two (AlignmentAccumulator, LinearProbe) pairs: every float64 sum, the derived Alignment and the probe's
    accuracies; ``rtol=0``: bit for bit."""
    (acc_a, probe_a), (acc_b, probe_b) = a, b
    assert (acc_a.n, probe_a.n_fit, probe_a.n_score) == (acc_b.n, probe_b.n_fit, probe_b.n_score)
    for key in AlignmentAccumulator._SUMS:
        for u, v in zip(getattr(acc_a, key), getattr(acc_b, key), strict=True):
            torch.testing.assert_close(u, v, rtol=rtol, atol=0)
    for key in ("gram", "cross"):
        for u, v in zip(getattr(probe_a, key), getattr(probe_b, key), strict=True):
            torch.testing.assert_close(u, v, rtol=rtol, atol=rtol * float(u.abs().max()))
    for key in ("correct", "counts"):  # integers: exact whatever the association
        assert all(torch.equal(u, v) for u, v in zip(getattr(probe_a, key), getattr(probe_b, key), strict=True))
    al_a, al_b = acc_a.result(), acc_b.result()
    for key in _FIELDS:
        for u, v in zip(getattr(al_a, key), getattr(al_b, key), strict=True):
            if rtol == 0 or not u.is_floating_point():
                torch.testing.assert_close(u, v, rtol=0, atol=0, equal_nan=True)
            else:
                torch.testing.assert_close(u, v, rtol=0, atol=1e-12, equal_nan=True)
    assert all(torch.equal(u, v) for u, v in zip(probe_a.accuracy(), probe_b.accuracy(), strict=True))


def _rows(pair) -> list[dict]:
    return alignment_rows(*pair)


def _same_rows(a: list[dict], b: list[dict]) -> bool:
    """Report rows equal float for float (NaN, a level without controls, equal to NaN)."""
    return len(a) == len(b) and all(u.keys() == v.keys() and all(u[k] == v[k] or (u[k] != u[k] and v[k] != v[k])
                                                                  for k in u) for u, v in zip(a, b, strict=True))


def _in_memory(st, s, **kw):
    """collect_alignment's accumulator and probe (built the way it builds them), for the bitwise comparisons."""
    from smaso.student.alignment import _collect

    return _collect(st, s.inputs(dtype=F64), s.z.long(), **kw)


@pytest.mark.parametrize("kind", ["plain", "bn", "readout"])
def test_one_batch_per_chunk_streams_bit_for_bit_like_the_in_memory_pass(data, kind):
    """Chunks of C rows, batch_size >= C and fit_rows a multiple of C: the same batches added in the same order,
    so the same float64 sums bit for bit (with BN too: each batch is normalized by its own statistics)."""
    g = data[0]
    s = sample_ladder(g, 3000, 1)
    st = LadderStudent(g, 5, seed=3, dtype=F64, batch_norm=kind == "bn", readout=6 if kind == "readout" else None)
    want = _in_memory(st, s, fit_rows=1500, batch_size=500)
    got = accumulate_alignment(st, as_chunks(s, 500), fit_rows=1500, batch_size=512)
    _assert_same(want, got)
    assert got[0].n == 3000 and (got[1].n_fit, got[1].n_score) == (1500, 1500)
    # the numbers compare_student stores: one batch per phase (4096-row sample, default fit_rows)
    held = sample_ladder(g, 600, 4)
    want_rows = alignment_report(st, held.inputs(dtype=F64), held.z.long())
    assert _same_rows(_rows(accumulate_alignment(st, held)), want_rows)


def test_the_result_does_not_depend_on_the_chunk_size(data):
    """Chunks of 37, 700 and 3000 rows, the fit/score boundary inside a chunk: the same rows, the float64 sums
    associated differently, so equal to round-off (relative 1e-12); integer counts and accuracies exactly."""
    g = data[0]
    s = sample_ladder(g, 3000, 1)
    st = LadderStudent(g, 5, seed=3, dtype=F64)
    ref = accumulate_alignment(st, s, fit_rows=1234, batch_size=256)  # one chunk
    assert ref[1].n_fit == 1234
    for rows in (37, 700):
        _assert_same(ref, accumulate_alignment(st, as_chunks(s, rows), fit_rows=1234, batch_size=256), rtol=1e-12)
    # the in-memory pass with other batches agrees to round-off too
    _assert_same(ref, _in_memory(st, s, fit_rows=1234, batch_size=999), rtol=1e-12)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store of 3 chunks (the last short) of a Gaussian-leaf ladder (x stored), and the same rows in memory."""
    g = Ladder.random(depth=2, branching=[2, 3], events=[3, 4, 3], seed=5, emission="gaussian", sigma=0.6)
    path = sample_to_store(g, 2 * 4096 + 321, tmp_path_factory.mktemp("align") / "s.zarr", seed=7, chunk_rows=4096,
                           progress=False)
    return g, path, sample_ladder(g, 2 * 4096 + 321, 7)


def test_a_store_on_disk_gives_the_in_memory_sums_bit_for_bit(store):
    g, path, s = store
    st = LadderStudent(g, 4, seed=1, dtype=F64)
    kw = {"fit_rows": 4096, "batch_size": 4096}
    want = _in_memory(st, s, **kw)
    for source in (str(path), open_dataset(path), as_chunks(s, 4096)):
        _assert_same(want, accumulate_alignment(st, source, engine=SerialEngine(), **kw))
    rows = _rows(accumulate_alignment(st, path, **kw))
    assert _same_rows(rows, alignment_report(st, s.inputs(dtype=F64), s.z.long(), **kw))
    assert len(rows) == g.depth and all(r["probe_chance"] > 0 for r in rows)


@pytest.mark.slow
def test_two_dask_workers_give_the_serial_sums_bit_for_bit(store):
    """The chunks' tasks on 2 worker processes, merged in chunk order: the serial pass's sums, bit for bit."""
    pytest.importorskip("dask.distributed")
    from teachers.engine import DaskEngine

    g, path, s = store
    st = LadderStudent(g, 4, seed=1, dtype=F64)
    with DaskEngine(workers=2, threads_per_worker=1) as engine:
        for source, fit in ((path, 5000), (as_chunks(s, 1000), 3500)):
            _assert_same(accumulate_alignment(st, source, fit_rows=fit, batch_size=700),
                         accumulate_alignment(st, source, fit_rows=fit, batch_size=700, engine=engine))


def test_a_student_that_copies_the_events_is_perfectly_aligned_when_streamed():
    g = Ladder.fully_informative(depth=3, branching=2, leaf_events=2)
    st = _copy_events_student(g)
    acc, probe = accumulate_alignment(st, as_chunks(sample_ladder(g, 4000, 0), 900), fit_rows=1700, batch_size=400)
    al = acc.result()
    for l in range(1, g.depth):
        assert torch.allclose(al.eta2[l], torch.ones_like(al.eta2[l]), atol=1e-12)
        assert torch.equal(probe.accuracy()[l], torch.ones_like(probe.accuracy()[l]))
    assert probe.n_score == 2300


def test_streaming_refuses_bad_input(data):
    g = data[0]
    s = sample_ladder(g, 200, 0)
    st = LadderStudent(g, 4, seed=0, dtype=F64)
    with pytest.raises(TypeError, match="student"):
        accumulate_alignment("student", s)
    with pytest.raises(TypeError, match="source"):
        accumulate_alignment(st, object())
    with pytest.raises(ValueError, match="not the student's"):
        accumulate_alignment(st, sample_ladder(Ladder.random(depth=3, branching=2, events=3, seed=9), 50, 0))
    for bad in (0, 200, True, 2.5):
        with pytest.raises(ValueError, match="fit_rows"):
            accumulate_alignment(st, s, fit_rows=bad)
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="batch_size"):
            accumulate_alignment(st, s, batch_size=bad)
        with pytest.raises(ValueError, match="batch_size"):
            collect_alignment(st, s.inputs(dtype=F64), s.z.long(), batch_size=bad)
    with pytest.raises(ValueError, match="controls"):
        accumulate_alignment(st, s, controls=-1)
    with pytest.raises(TypeError, match="engine"):
        accumulate_alignment(st, s, engine="dask")
    acc, probe = accumulate_alignment(st, s)
    assert _same_rows(alignment_rows(acc, probe), alignment_rows(acc.result(), probe))
    with pytest.raises(TypeError, match="alignment"):
        alignment_rows(acc.state_dict(), probe)
    with pytest.raises(TypeError, match="probe"):
        alignment_rows(acc.result(), probe.accuracy())
    with pytest.raises(ValueError, match="no held-out"):
        LinearProbe(st).chance()
    with pytest.raises(RuntimeError, match="already solved"):
        fresh = LinearProbe(st)
        rec = st.forward_backward(s.inputs(dtype=F64), s.y)
        fresh.add_fit(rec, s.z.long())
        probe.merge_(fresh.state_dict())
    with pytest.raises(TypeError, match="other"):
        probe.merge_({"n_fit": 0})
    with pytest.raises(TypeError, match="same student"):
        probe.merge_(LinearProbe(LadderStudent(g, 4, seed=0, dtype=F64)))
    with pytest.raises(ValueError, match="other shapes"):
        probe.merge_(LinearProbe(LadderStudent(g, 3, seed=0, dtype=F64)).state_dict())
