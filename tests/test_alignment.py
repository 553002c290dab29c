"""Event alignment (smaso.student.alignment): the streamed statistics equal their definitions computed directly
on the activations (numpy), merge exactly across batches, are 1 (and the probe perfect) on a student built to
copy the events, sit at their floors for a node independent of the events, and are refused on bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from smaso.student.alignment import AlignmentAccumulator, LinearProbe, collect_alignment
from smaso.student.network import LadderStudent
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
    r = compare_student(train, width=4, readout=8, steps=6, eval_every=3, noise_groups=None, alignment=held)
    rows = [h["alignment"] for h in r.history]
    assert len(rows) == 3 and all(len(a) == g.depth + 1 for a in rows)
    assert all(0 <= a["probe"] <= 1 and 0 < a["probe_chance"] <= 1 and a["eta2"] >= 0 for a in rows[-1])
    table = r.alignment_table(checkpoints=2)
    assert table.count("\n") == 2 * (g.depth + 1) and table.splitlines()[1].startswith("   0")
    with pytest.raises(ValueError, match="alignment"):
        compare_student(train, steps=1, alignment=sample_ladder(Ladder.random(depth=2, seed=0), 50, 0))
    with pytest.raises(ValueError, match="no checkpoint"):
        compare_student(train, width=4, steps=1, noise_groups=None).alignment_table()
