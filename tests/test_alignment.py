"""Event alignment (smaso.student.alignment): the streamed statistics equal their definitions computed directly
on the activations (numpy, two passes, float64, written here from the definitions) on random students, biases
shifted by 1e6, dead regions, float32 students, BN after and before the gate, and batches merged against one pass;
they agree with the paper authors' own correlation measure (luckmatters ``act2corrMat`` on the node outputs,
rewritten here from its definition), merge exactly across batches, are 1 (and the probe perfect) on a student
built to copy the events, sit at their floors for a node independent of the events, mark dead and constant nodes
instead of scoring them, and are refused on bad input.  Streamed over chunks, stores and engines
(accumulate_alignment) they equal the in-memory pass: bit for bit where the batches and the merge order are the
same, to float64 round-off where the chunking changes how the moments are merged."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch

from smaso.student.alignment import (
    VARIABLES,
    AlignmentAccumulator,
    LinearProbe,
    accumulate_alignment,
    alignment_report,
    alignment_rows,
    best_match_ranks,
    collect_alignment,
    node_variable,
)
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
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


# ---------------------------------------------------------------------- the reference, from the definitions
def _reference(v: np.ndarray, ev: np.ndarray, on: np.ndarray | None, m: int) -> dict:
    """Alignment of a region's nodes from their values ``v`` ``(N, n)`` (float64), the region's events ``ev``
    ``(N,)`` and the gates ``on`` ``(N, n)`` bool (None: linear nodes), two passes over the rows (the second on the
    deviations from the first's mean: at an offset of 1e6, mean_k - mean formed as v[ev == k].mean() - mean would
    lose 1e-9 of eta2 to rounding): eta2 = sum_k n_k (mean_k - mean)^2 / sum (v - mean)^2; corr[k] the Pearson
    correlation with 1[ev = k]; mi = I(on; ev) in bits; NaN where a ratio is 0/0 (a constant v, an event never or
    always seen, a constant gate)."""
    n_rows = v.shape[0]
    dev = v - v.sum(0) / n_rows
    total = (dev * dev).sum(0)
    constant = v.min(0) == v.max(0)
    between = sum((ev == k).sum() * dev[ev == k].mean(0) ** 2 for k in np.unique(ev))
    with np.errstate(invalid="ignore", divide="ignore"):
        eta2 = np.where(constant, np.nan, between / total)
        corr = np.full((m, v.shape[1]), np.nan)
        for k in range(m):
            ind = (ev == k).astype(float)
            di = ind - ind.mean()
            if 0 < ind.sum() < n_rows:
                corr[k] = np.where(constant, np.nan, (dev * di[:, None]).sum(0) / np.sqrt(total * (di * di).sum()))
        mi = np.full(v.shape[1], np.nan)
        if on is not None:
            ks = np.unique(ev)
            joint = np.stack([np.stack([((ev == k)[:, None] & (on == o)).mean(0) for o in (0, 1)], -1) for k in ks])
            pz, po = joint.sum(-1, keepdims=True), joint.sum(0, keepdims=True)  # (K, n, 2)
            plugin = np.nansum(joint * np.log2(joint / (pz * po)), axis=(0, 2))
            p_on = on.mean(0)
            mi = np.where((p_on > 0) & (p_on < 1), plugin, np.nan)
    return {"eta2": eta2, "corr": corr, "mi": mi, "constant": constant}


def _check_against_reference(acc: AlignmentAccumulator, values: list[np.ndarray], gates: list, z: np.ndarray,
                             g: Ladder, tol: float) -> None:
    """Every statistic of ``acc.result()`` against :func:`_reference` on the same values (per level ``(N, R, n)``),
    gates and events ``z`` ``(N, total_regions)``, and its control regions (mean over regions alpha + c)."""
    al, off = acc.result(), g.level_offsets
    for l in range(g.depth):
        v, R, m = values[l], g.num_regions[l], g.events[l]
        for r in range(R):
            on = None if gates[l] is None else gates[l][:, r]
            want = _reference(v[:, r], z[:, off[l] + r], on, m)
            assert np.array_equal(al.constant[l][r].numpy(), want["constant"])
            for key in ("eta2", "mi"):
                np.testing.assert_allclose(getattr(al, key)[l][r].numpy(), want[key], rtol=0, atol=tol,
                                           err_msg=f"{key} level {l} region {r}")
            np.testing.assert_allclose(al.corr[l][r].numpy(), want["corr"], rtol=0, atol=tol)
            ctrl = [_reference(v[:, r], z[:, off[l] + (r + c) % R], on, m) for c in range(1, acc.controls[l] + 1)]
            for key in ("eta2", "mi") if ctrl else ():
                np.testing.assert_allclose(getattr(al, f"{key}_control")[l][r].numpy(),
                                           np.mean([c[key] for c in ctrl], 0), rtol=0, atol=tol)
        corr = al.corr[l].numpy()  # (R, M, n), checked above
        defined = ~np.isnan(corr).all(-1)
        filled = np.where(np.isnan(corr), -np.inf, corr)
        np.testing.assert_array_equal(al.spec[l].numpy(), np.where(defined, filled.max(-1), np.nan))
        assert np.array_equal(al.spec_node[l].numpy(), np.where(defined, filled.argmax(-1), -1))
        if gates[l] is not None:
            assert np.array_equal(al.on_rows[l].numpy(), gates[l].sum(0))


def _run(st: LadderStudent, x: torch.Tensor, z: torch.Tensor, batches, variable: str = "output", transform=None):
    """The accumulator over ``batches`` (row slices) and, for the reference, the values of ``variable`` and the
    gates of every batch concatenated; ``transform`` maps each record's outputs ``fbar`` before they are added."""
    acc = AlignmentAccumulator(st, controls=2, variable=variable)
    values, gates = [[] for _ in range(st.ladder.depth)], [[] for _ in range(st.ladder.depth)]
    for sl in batches:
        rec = st.forward_backward(x[sl], z[sl, 0])
        if transform is not None:
            rec = dataclasses.replace(rec, fbar=[transform(t) for t in rec.fbar])
        acc.add(rec, z[sl])
        for l in range(st.ladder.depth):
            values[l].append(node_variable(st, rec, l, variable).to(F64).numpy())
            gates[l].append(None if l == 0 else (rec.slope[l] > 0.5).numpy())
    return acc, [np.concatenate(v) for v in values], [None if g[0] is None else np.concatenate(g) for g in gates]


_BATCHES = {"one pass": [slice(0, 3000)], "batches of 97": [slice(i, min(i + 97, 3000)) for i in range(0, 3000, 97)]}


@pytest.mark.parametrize("case", ["random", "offset 1e6", "dead region", "float32", "bn after", "bn before"])
@pytest.mark.parametrize("batches", list(_BATCHES))
def test_statistics_equal_their_definitions(data, case, batches):
    """The Alignment of the rows, however batched, against the two-pass reference on the very values it saw: to
    1e-9 (float64 round-off of moments that never subtract large sums)."""
    g, x, z = data
    dtype = torch.float32 if case == "float32" else F64
    bn = {"bn after": "after", "bn before": "before"}.get(case, False)
    st = LadderStudent(g, 5, seed=3, dtype=dtype, batch_norm=bn)
    if case in ("offset 1e6", "dead region"):
        with torch.no_grad():
            st.biases[1] += 1e6 if case == "offset 1e6" else -100.0
    acc, values, gates = _run(st, x.to(dtype), z, _BATCHES[batches])
    _check_against_reference(acc, values, gates, z.numpy(), g, 1e-9)
    al = acc.result()
    if case == "dead region":
        assert al.dead[1].all() and al.constant[1].all() and torch.isnan(al.eta2[1]).all()
    else:
        assert not al.constant[1].any() and torch.isfinite(al.eta2[1]).all()


def test_eta2_and_spec_do_not_depend_on_an_offset_of_1e6():
    """Issue 36: biases of a region shifted by 1e6 took eta2 from 0.22 to exactly 0.0 (sums of squares minus
    squared sums).  Shifted biases shift the pre-activation (and, every gate then on, the output) by 1e6: eta2,
    corr and spec are those of the unshifted student to 1e-9 (float64; the shifted values themselves are rounded
    to 1.2e-10)."""
    g = Ladder.default()
    s = sample_ladder(g, 3000, 0)
    x, z = s.inputs(dtype=F64), s.z.long()
    plain = LadderStudent(g, 8, seed=0, dtype=F64)
    shifted = LadderStudent(g, 8, seed=0, dtype=F64)
    with torch.no_grad():
        shifted.biases[1] += 1e6
    want = collect_alignment(plain, x, z, variable="preactivation", batch_size=700)[0]
    for variable in ("preactivation", "output"):  # every gate of level 1 on: the output is u + 1e6
        got = collect_alignment(shifted, x, z, variable=variable, batch_size=700)[0]
        assert float(want.eta2[1].max()) > 0.05
        for key in ("eta2", "corr", "spec"):
            torch.testing.assert_close(getattr(got, key)[1], getattr(want, key)[1], rtol=0, atol=1e-9)


def test_float32_inputs_at_an_offset_of_1e6():
    """Float32 values near 1e6 (a float32 student's outputs plus 1e6, rounded to float32 as such a student rounds
    them, to 1/16): the statistics equal the reference on those values to 1e-9, and those of the same values shifted
    back by exactly 1e6 to 1e-12, in one pass or in batches of 7 rows then one of 700 (what the module docstring
    claims for float32 inputs: an error of a few log2(N) * 2^-53, whatever the offset)."""
    g = Ladder.random(depth=3, branching=2, events=3, seed=2)
    s = sample_ladder(g, 1400, 1)
    x, z = s.inputs(dtype=torch.float32), s.z.long()
    st = LadderStudent(g, 5, seed=3, dtype=torch.float32)

    def far(t):
        return (t + 1e6).to(torch.float32)

    def back(t):  # float32 values in [2^19, 2^21) minus 1e6: exact in float64
        return far(t).to(F64) - 1e6

    assert all(torch.equal(back(t) + 1e6, far(t).to(F64)) for t in st.forward_backward(x, z[:, 0]).fbar)
    base, _, _ = _run(st, x, z, [slice(0, 1400)], transform=back)
    assert torch.isfinite(base.result().eta2[1]).all() and float(base.result().eta2[1].max()) > 0.01
    for batches in ([slice(0, 1400)], [slice(i, i + 7) for i in range(0, 700, 7)] + [slice(700, 1400)]):
        got, values, gates = _run(st, x, z, batches, transform=far)
        _check_against_reference(got, values, gates, z.numpy(), g, 1e-9)
        a, b = got.result(), base.result()
        for key in ("eta2", "eta2_control", "corr", "mi"):
            for u, v in zip(getattr(a, key), getattr(b, key), strict=True):
                torch.testing.assert_close(u, v, rtol=0, atol=1e-12, equal_nan=True)


def test_a_dead_network_is_marked_not_scored():
    """Issue 36: levels 1 and 2 of the default student with biases -100 gave eta2 0.0 and spec_node 0 (a real node
    index).  Now every hidden node is dead (gate never on), the outputs are constant: eta2, corr, spec NaN,
    spec_node -1, and the summary and the reasons say so."""
    g = Ladder.default()
    s = sample_ladder(g, 2000, 0)
    st = LadderStudent(g, 8, seed=0, dtype=F64)
    with torch.no_grad():
        st.biases[1].fill_(-100.0)
        st.biases[2].fill_(-100.0)
    al, _ = collect_alignment(st, s.inputs(dtype=F64), s.z.long())
    for l in range(g.depth):
        assert torch.isnan(al.eta2[l]).all() and torch.isnan(al.spec[l]).all()
        assert (al.spec_node[l] == -1).all() and al.constant[l].all()
    rows = al.summary()
    assert [r["dead"] for r in rows] == [0, 16, 32]  # the output level has no gate: constant, not dead
    assert [r["constant"] for r in rows] == [4, 16, 32]
    assert all(r["indicators"] == 0 and r["matched"] == 0 and math.isnan(r["eta2"]) for r in rows)
    assert rows[1]["eta2_nan"] == 16 and rows[1]["mi_nan"] == 16
    assert al.reasons(1)[0] == ("level 1: 16 of 16 nodes dead (gate never on over 2000 rows); 16 of 16 with a "
                                "constant output: eta2, corr and MI NaN, left out of the medians")
    assert al.reasons(0)[0] == "level 0: 4 of 4 with a constant output: eta2 and corr NaN, left out of the medians"
    assert "spec_node -1" in al.reasons(2)[1]


def test_summary_medians_are_the_usual_medians_without_nan():
    """Issue 36: summary() took torch's lower median (the smaller middle value for an even count).  Now the mean of
    the two middle values of the defined entries, and how many were left out."""
    g = Ladder.default()
    s = sample_ladder(g, 2000, 0)
    st = LadderStudent(g, 8, seed=0, dtype=F64)
    with torch.no_grad():
        st.biases[2][0, :2] = -100.0  # two dead nodes in region 0 of level 2
    al, _ = collect_alignment(st, s.inputs(dtype=F64), s.z.long())
    for row in al.summary():
        l = row["level"]
        for key in ("eta2", "mi", "spec"):
            v = getattr(al, key)[l].flatten().numpy()
            want = np.median(v[~np.isnan(v)]) if (~np.isnan(v)).any() else math.nan
            assert row[key] == pytest.approx(want, abs=1e-15, nan_ok=True)
            assert row[f"{key}_nan"] == int(np.isnan(v).sum())
    assert al.summary()[2]["dead"] == 2 and al.summary()[2]["eta2_nan"] == 2
    v = al.eta2[2][~torch.isnan(al.eta2[2])]  # 30 values: torch's lower median is below the median
    assert float(v.median()) < al.summary()[2]["eta2"]


# ---------------------------------------------------------------------- the paper authors' measure
def _authors_corr(teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    """luckmatters ``student_specialization/utils_corrs.py`` ``act2corrMat(src, dst)`` from its definition:
    ``(K1, K2)`` correlations of the columns of ``src`` ``(N, K1)`` and ``dst`` ``(N, K2)``: centred inner products
    over sqrt(squared norm + 1e-10) each."""
    a, b = teacher - teacher.mean(0, keepdim=True), student - student.mean(0, keepdim=True)
    return (a.T @ b) * a.square().sum(0).add(1e-10).rsqrt()[:, None] * b.square().sum(0).add(1e-10).rsqrt()[None]


def _authors_table(st: LadderStudent, z: torch.Tensor, l: int, r: int, nodes) -> torch.Tensor:
    """The authors' correlations of region r's event indicators (teacher nodes) with ``nodes`` ``(N, n)``."""
    ev = st.ladder_events(z)[:, st.ladder.level_offsets[l] + r]
    return _authors_corr(torch.nn.functional.one_hot(ev, st.ladder.events[l]).to(F64), nodes.to(F64))


@pytest.fixture(scope="module")
def bn_before():
    g = Ladder.default()
    s = sample_ladder(g, 4096, 2)
    st = LadderStudent(g, 16, batch_norm="before", seed=0, dtype=F64, readout=32)
    x, z = s.inputs(dtype=F64), s.z.long()
    return st, z, st.forward_backward(x, z[:, 0])


def test_the_default_is_the_authors_measure_on_the_node_outputs(bn_before):
    """With BN before the gate the node's output is s(BN(u)) BN(u): the default variable.  corr, spec and the ranked
    nodes equal the authors' act2corrMat on the outputs and its descending sort (corrMat2corrIdx), to 1e-9."""
    st, z, rec = bn_before
    acc = AlignmentAccumulator(st)
    acc.add(rec, z)
    al = acc.result()
    for l in range(st.ladder.depth):
        for r in range(st.ladder.num_regions[l]):
            want = _authors_table(st, z, l, r, rec.fbar[l][:, r])  # (M, n)
            ok = ~al.constant[l][r]
            torch.testing.assert_close(al.corr[l][r][:, ok], want[:, ok], rtol=0, atol=1e-9)
            assert (want[:, ~ok].abs() < 1e-12).all()  # the authors read 0 for a constant node; here NaN
            torch.testing.assert_close(al.spec[l][r], want[:, ok].max(1).values, rtol=0, atol=1e-9)
            values, nodes = al.ranked(l)
            sorted_want, idx_want = want[:, ok].sort(1, descending=True)
            torch.testing.assert_close(values[r][:, : int(ok.sum())], sorted_want, rtol=0, atol=1e-9)
            assert torch.equal(nodes[r][:, : int(ok.sum())], ok.nonzero()[:, 0][idx_want])


def test_the_old_variable_gave_the_discrepancy_the_issue_names(bn_before):
    """Issue 36: the record's f, BN(u) before the gate, is not the node's output: its spec differs from the authors'
    measure on the outputs by up to 0.26 on this student at initialisation (the issue saw up to 0.29).  It is kept as
    variable="gate_input", and equals the authors' measure applied to BN(u)."""
    st, z, rec = bn_before
    old, new = AlignmentAccumulator(st, variable="gate_input"), AlignmentAccumulator(st)
    old.add(rec, z)
    new.add(rec, z)
    a, b = old.result(), new.result()
    gap = max(float((u - v).abs().nan_to_num(0).max()) for u, v in zip(a.spec, b.spec, strict=True))
    assert gap > 0.25
    for l in range(1, st.ladder.depth):
        want = _authors_table(st, z, l, 0, rec.f[l][:, 0])
        torch.testing.assert_close(a.corr[l][0], want, rtol=0, atol=1e-9)


def test_ranked_matches_thresholds_and_ranks_at_initialisation(data):
    """Per indicator the nodes ranked, per node its best event, the indicators matched at a threshold, the
    authors' MatchCnt, and compareCorrIndices' rank at initialisation of each later best match (two students of
    one architecture standing for the start and the end), all against plain numpy on the correlation table."""
    g, x, z = data
    start, _ = collect_alignment(LadderStudent(g, 5, seed=3, dtype=F64), x, z)
    end, _ = collect_alignment(LadderStudent(g, 5, seed=4, dtype=F64), x, z)
    ranks = best_match_ranks(start, end)
    undefined = 0
    for l in range(g.depth):
        c0, c1 = start.corr[l].numpy(), end.corr[l].numpy()  # (R, M, n), NaN for a dead node
        f0, f1 = np.nan_to_num(c0, nan=-np.inf), np.nan_to_num(c1, nan=-np.inf)
        undefined += int(np.isnan(c0).any() or np.isnan(c1).any())
        order = np.argsort(-f0, axis=-1, kind="stable")
        best = np.where(np.isnan(c1).all(-1), -1, f1.argmax(-1))
        want_rank = np.array([[list(order[r, k]).index(best[r, k]) if best[r, k] >= 0
                               and not np.isnan(c0[r, k, best[r, k]]) else -1 for k in range(c1.shape[1])]
                              for r in range(c1.shape[0])])
        ranked = want_rank[want_rank >= 0]
        assert np.array_equal(ranks[l]["node"].numpy(), best)
        assert np.array_equal(ranks[l]["rank"].numpy(), want_rank)
        assert ranks[l]["kept"] == int((ranked == 0).sum()) and ranks[l]["indicators"] == ranked.size
        assert ranks[l]["kept_fraction"] == pytest.approx((ranked == 0).mean())
        assert ranks[l]["median_rank"] == np.median(ranked)
        values, event = end.best_event(l)
        dead = np.isnan(c1).all(-2)
        assert np.array_equal(event.numpy(), np.where(dead, -1, f1.argmax(-2)))
        np.testing.assert_array_equal(values.numpy(), np.where(dead, np.nan, f1.max(-2)))
        for t in (0.1, 0.3, 0.95):
            assert end.matched(l, t) == int((f1.max(-1) >= t).sum())
            assert np.array_equal(end.match_counts(l, t).numpy(), (f1 >= t).sum(-1))
        values, nodes = start.ranked(l)
        assert np.array_equal(nodes.numpy(), np.where(np.isnan(np.take_along_axis(c0, order, -1)), -1, order))
        np.testing.assert_array_equal(values.numpy(), np.take_along_axis(c0, order, -1))
    assert undefined  # (a dead node at some level: the -1 paths are exercised)
    same = best_match_ranks(end, end)
    assert all(r["kept_fraction"] == 1.0 and r["median_rank"] == 0 for r in same)
    with pytest.raises(ValueError, match="init, end"):
        best_match_ranks(start, collect_alignment(LadderStudent(g, 4, seed=3, dtype=F64), x, z)[0])
    with pytest.raises(TypeError, match="init, end"):
        best_match_ranks(start, end.corr)
    with pytest.raises(ValueError, match="threshold"):
        end.matched(1, 1.5)


def test_variables_are_the_record_fields_they_name():
    g = Ladder.default()
    s = sample_ladder(g, 300, 0)
    for bn in (False, "after", "before"):
        st = LadderStudent(g, 4, seed=0, dtype=F64, batch_norm=bn)
        rec = st.forward_backward(s.inputs(dtype=F64), s.y)
        for l in range(g.depth):
            out = node_variable(st, rec, l)
            assert out is rec.fbar[l] and node_variable(st, rec, l, "preactivation") is rec.u[l]
            act = node_variable(st, rec, l, "activation")  # the gate's output, before any BN after it
            gate_in = node_variable(st, rec, l, "gate_input")
            torch.testing.assert_close(act, rec.slope[l] * gate_in)
            if bn == "before" and l:
                assert gate_in is rec.f[l] and act is rec.fbar[l]
    with pytest.raises(ValueError, match="variable: expected one of"):
        AlignmentAccumulator(st, variable="fbar")
    with pytest.raises(ValueError, match="variable"):
        collect_alignment(st, s.inputs(dtype=F64), s.z.long(), variable=None)
    a, b = AlignmentAccumulator(st), AlignmentAccumulator(st, variable="preactivation")
    b.add(rec, s.z.long())
    with pytest.raises(ValueError, match="variable"):
        a.merge_(b.state_dict())
    assert set(VARIABLES) == {"output", "activation", "preactivation", "gate_input"}


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
        assert float(al.eta2[l].nanmean()) < 3 * floors["eta2"]  # (a dead node: NaN, not 0)
        assert float(al.mi[l].nanmean()) < 3 * floors["mi"]  # (a gate always on: no on-state MI, NaN)


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
    r = compare_student(train, student=StudentConfig(width=4, readout=8), training=TrainingConfig(steps=6),
                        evaluation=EvaluationConfig(held_out=False, eval_every=3, noise_groups=None, alignment=held))
    rows = [h["alignment"] for h in r.history]
    assert len(rows) == 3 and all(len(a) == g.depth + 1 for a in rows)
    assert all(0 <= a["probe"] <= 1 and 0 < a["probe_chance"] <= 1 and a["eta2"] >= 0 for a in rows[-1])
    # at the first checkpoint every best match is the one at initialisation
    assert all(a["kept"] == 1.0 and a["init_rank"] == 0 and a["kept_of"] == a["indicators"] for a in rows[0])
    assert all(0 <= a["matched"] <= a["indicators"] <= 16 and a["threshold"] == 0.95  # (4 regions x 4 events)
               for a in rows[-1])
    table = r.alignment_table(checkpoints=2)
    lines = table.splitlines()
    assert "match |  kept |  dead |" in lines[0] and lines[1].startswith("   0")
    assert len([ln for ln in lines if ln[:4].strip().isdigit()]) == 2 * (g.depth + 1)
    assert all(ln.startswith(("  step 6, level ", "  n/a: ")) for ln in lines[1 + 2 * (g.depth + 1):])
    with pytest.raises(ValueError, match="alignment"):
        compare_student(train, training=TrainingConfig(steps=1),
                        evaluation=EvaluationConfig(held_out=False,
                                                    alignment=sample_ladder(Ladder.random(depth=2, seed=0), 50, 0)))
    with pytest.raises(ValueError, match="no checkpoint"):
        compare_student(train, student=StudentConfig(width=4), training=TrainingConfig(steps=1),
                        evaluation=EvaluationConfig(held_out=False, noise_groups=None,
                                                    alignment=False)).alignment_table()
    # each checkpoint's rows are alignment_report's of the student then, its best matches ranked at initialisation
    x, z = held.inputs(dtype=torch.float64), held.z.long()
    init, _ = collect_alignment(LadderStudent(g, 4, readout=8, seed=0, dtype=F64), x, z)
    want = alignment_report(r.student, x, z, init=init)
    assert str(rows[-1]) == str(want)  # (str: NaN entries compare equal)


def test_compare_student_streams_the_alignment_rows_from_a_store(tmp_path):
    from smaso.student.compare import compare_student

    g = Ladder.default()
    train = sample_ladder(g, 1500, 0)
    path = sample_to_store(g, 2 * 4096 + 100, tmp_path / "held.zarr", seed=1, chunk_rows=4096)
    student, training = StudentConfig(width=4, readout=8), TrainingConfig(steps=4)
    evaluation = EvaluationConfig(held_out=False, eval_every=4, noise_groups=None)
    from_store = compare_student(train, student, training, dataclasses.replace(evaluation, alignment=str(path)))
    in_memory = compare_student(train, student, training,
                                dataclasses.replace(evaluation, alignment=open_dataset(path).to_sample()))
    for a, b in zip(from_store.history, in_memory.history, strict=True):
        for ra, rb in zip(a["alignment"], b["alignment"], strict=True):
            assert ra.keys() == rb.keys()
            for k in ra:
                assert ra[k] == pytest.approx(rb[k], rel=1e-12, abs=1e-12, nan_ok=True), k


# ---------------------------------------------------------------------- streaming (accumulate_alignment)
_FIELDS = ("eta2", "eta2_control", "mi", "mi_control", "spec", "spec_node", "events")


def _assert_same(a, b, *, rtol: float = 0.0) -> None:
    """Two (AlignmentAccumulator, LinearProbe) pairs: every float64 moment and sum, the derived Alignment and the
    probe's accuracies; ``rtol=0``: bit for bit."""
    (acc_a, probe_a), (acc_b, probe_b) = a, b
    assert (acc_a.n, probe_a.n_fit, probe_a.n_score) == (acc_b.n, probe_b.n_fit, probe_b.n_score)
    for key in AlignmentAccumulator._SUMS:  # (means about the same shift, row 0's value, whatever the chunking)
        for u, v in zip(getattr(acc_a, key), getattr(acc_b, key), strict=True):
            scale = float(u[torch.isfinite(u)].abs().max()) if torch.isfinite(u).any() else 0.0
            torch.testing.assert_close(u, v, rtol=rtol, atol=rtol * scale)
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
    """Chunks of 37, 700 and 3000 rows, the fit/score boundary inside a chunk: the same rows, the float64 moments
    merged differently, so equal to round-off (relative 1e-12); integer counts and accuracies exactly."""
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
