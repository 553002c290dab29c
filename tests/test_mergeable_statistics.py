"""Mergeable statistics: event counts and the student's per-event sums are explicit states that partial
results over disjoint rows add up to exactly (counts) or to round-off (float64 sums)."""

from __future__ import annotations

import functools
import itertools
import operator

import pytest
import torch

from smaso.student.config import EvaluationConfig, TrainingConfig
from smaso.student.frequency import FrequencyAccumulator
from smaso.student.network import LadderStudent
from teachers import Ladder, sample_ladder
from teachers.statistics import EventCounts, empirical_statistics


def _ladder(emission="gaussian"):
    return Ladder.random(depth=2, branching=[2, 3], events=[3, 4, 2], mode="topdown", concentration=0.6, seed=3,
                         emission=emission, sigma=0.5)


SPLITS = [0, 37, 500, 501, 1200, 2000]  # uneven parts, one of a single row


def test_event_counts_merge_exactly_in_any_order():
    lad = _ladder()
    z = sample_ladder(lad, 2000, seed=1).z
    whole = EventCounts.zeros(lad).update(z)
    parts = [EventCounts.zeros(lad).update(z[a:b]) for a, b in itertools.pairwise(SPLITS)]
    for order in (parts, parts[::-1], parts[2:] + parts[:2]):
        merged = functools.reduce(operator.add, order)
        assert merged.num_examples == 2000
        for a, b in zip(merged.counts + merged.pairs[1:], whole.counts + whole.pairs[1:], strict=True):
            assert a.dtype == torch.int64 and torch.equal(a, b)
    assert parts[0].num_examples == 37  # merging made new states
    # the normalized state is empirical_statistics, which is built on it
    ref = empirical_statistics(lad, z, chunk_size=333)
    got = whole.statistics()
    for a, b in zip(got.marginals + got.joints[1:], ref.marginals + ref.joints[1:], strict=True):
        assert torch.equal(a, b)
    # brute force on a few cells
    off = lad.level_offsets
    assert whole.counts[1][1, 3] == int((z[:, off[1] + 1] == 3).sum())
    par = lad.parent_index(2)[4]
    assert whole.pairs[2][4, 1, 0] == int(((z[:, off[1] + par] == 1) & (z[:, off[2] + 4] == 0)).sum())


def test_event_counts_refuse_bad_input_and_foreign_states():
    lad = _ladder()
    st = EventCounts.zeros(lad)
    with pytest.raises(ValueError, match="z: expected an"):
        st.update(torch.zeros(3, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="integer events"):
        st.update(torch.zeros(3, lad.total_regions))
    bad = torch.zeros(2, lad.total_regions, dtype=torch.int64)
    bad[0, -1] = 2
    with pytest.raises(ValueError, match="level 2 has events outside"):
        st.update(bad)
    other = EventCounts.zeros(Ladder.random(depth=2, branching=2, events=3, seed=0))
    with pytest.raises(ValueError, match="different ladder"):
        st.merge(other)
    with pytest.raises(ValueError, match="empty"):
        st.statistics()


def _student(lad, batch_norm):
    st = LadderStudent(lad, [4], activation="swish:0.7", batch_norm=batch_norm, dtype=torch.float64, seed=0)
    with torch.no_grad():
        for b in st.biases:
            b.normal_(0, 0.3, generator=torch.Generator().manual_seed(10))
    return st


def _accumulate(st, sample, rows, batch):
    acc = FrequencyAccumulator(st, torch.float64)
    a, b = rows
    for s in range(a, b, batch):
        e = min(s + batch, b)
        rec = st.forward_backward(sample.inputs(slice(s, e), torch.float64), sample.y[s:e])
        acc.add(rec, sample.z[s:e])
    return acc


@pytest.mark.parametrize("emission", ["gaussian", "onehot"])
@pytest.mark.parametrize("batch_norm", [False, True])
def test_frequency_sums_merge_to_one_pass(emission, batch_norm):
    lad = _ladder(emission)
    sample = sample_ladder(lad, 2000, seed=2)
    st = _student(lad, batch_norm)
    batch = 100  # every part is a whole number of batches, so BN sees the same batches either way
    splits = [0, 300, 1100, 2000]
    whole = _accumulate(st, sample, (0, 2000), batch)
    parts = [_accumulate(st, sample, (a, b), batch) for a, b in itertools.pairwise(splits)]
    merged = FrequencyAccumulator(st, torch.float64)
    for p in parts[::-1]:
        merged.merge_(p.state_dict())  # states, as they come back from other processes
    r1, r2 = whole.result(), merged.result()
    assert r1.num_examples == r2.num_examples == 2000
    for a, b in zip(r1.counts, r2.counts, strict=True):
        assert torch.equal(a, b)
    for key, levels in r1.means.items():
        for a, b in zip(levels, r2.means[key], strict=True):
            if a is not None:
                torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-13, msg=key)
    for a, b in zip(r1.dW + r1.Fc[1:] + r1.Gp_tilde[1:], r2.dW + r2.Fc[1:] + r2.Gp_tilde[1:], strict=True):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-13)
    assert r2.loss == pytest.approx(r1.loss, rel=1e-13)


def test_frequency_merge_refuses_another_student():
    lad = _ladder()
    acc = FrequencyAccumulator(_student(lad, False), torch.float64)
    wider = LadderStudent(lad, [5], dtype=torch.float64, seed=0)
    with pytest.raises(ValueError, match="other shapes"):
        acc.merge_(FrequencyAccumulator(wider, torch.float64))
    # float32 batch sums land in float64 totals too: the same state layout, so the merge is the plain sum
    f32 = FrequencyAccumulator(_student(lad, False), torch.float32)
    assert all(t.dtype == torch.float64 for t in f32.own + f32.dW)
    acc.merge_(f32)
    with pytest.raises(TypeError, match="state_dict"):
        acc.merge_({"n": 1})


def test_ladder_fingerprint_names_the_teacher():
    a, b = _ladder(), _ladder()
    assert a.fingerprint() == b.fingerprint() and len(a.fingerprint()) == 64
    assert a.fingerprint() != _ladder("onehot").fingerprint()  # another emission
    tables = [t.clone() for t in a.tables]
    tables[0][0, 0, [0, 1]] = tables[0][0, 0, [1, 0]]  # one row's entries swapped: another teacher
    c = Ladder(a.branching, a.events, mode=a.mode, prior=a.prior, tables=tables, emission=a.emission, name=a.name)
    assert c.fingerprint() != a.fingerprint()


def test_streaming_functions_refuse_bad_arguments(tmp_path):
    from inference.posterior import bayes_optimal_accuracy
    from smaso.student.compare import compare_student
    from smaso.student.frequency import accumulate_statistics
    from teachers.chunked import sample_to_store
    from teachers.dataset import load_dataset
    from teachers.statistics import count_events

    lad = _ladder("onehot")
    sample = sample_ladder(lad, 300, seed=0)
    st = _student(lad, False)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="batch_size"):
            accumulate_statistics(st, sample, batch_size=bad)
        with pytest.raises(ValueError, match="eval_batch_size"):
            compare_student(sample, training=TrainingConfig(steps=1), evaluation=EvaluationConfig(eval_batch_size=bad))
        with pytest.raises(ValueError, match="batch_size"):
            bayes_optimal_accuracy(lad, sample.inputs(slice(0, 10), torch.float64), batch_size=bad)
    with pytest.raises(TypeError, match="source"):
        count_events(object())
    with pytest.raises(TypeError, match="sample"):
        compare_student(object(), training=TrainingConfig(steps=1))
    with pytest.raises(ValueError, match="not the student's"):
        accumulate_statistics(_student(_ladder(), False), sample)
    store = load_dataset(sample_to_store(lad, 300, tmp_path / "s.zarr"))
    with pytest.raises(ValueError, match="full-batch GD"):
        compare_student(store, training=TrainingConfig(steps=1, batch_size=None))


_STATS_SETUP = """
    import sys
    import torch
    from smaso.student.frequency import accumulate_statistics, collect_statistics
    from smaso.student.network import LadderStudent
    from teachers.chunked import open_dataset
    from teachers.statistics import count_events
    torch.set_num_threads(1)
    data = open_dataset(sys.argv[1])
    student = LadderStudent(data.ladder, 4, seed=0)
    accumulate_statistics(student, data.read(0, 8192), batch_size=4096, dtype=torch.float64)  # warm-up
    count_events(data.read(0, 8192))

    def stream():  # the statistics pass and inspect's counts, chunk by chunk
        accumulate_statistics(student, data, batch_size=4096, dtype=torch.float64)
        count_events(data)

    def in_memory():  # the same on the whole file loaded first (the path before chunked stores)
        s = data.to_sample()
        collect_statistics(student, s.inputs(), s.y, s.z, batch_size=4096, dtype=torch.float64)
        count_events(s)
"""


@pytest.mark.slow
def test_statistics_pass_memory_does_not_grow_with_n(tmp_path):
    """A fixed student's statistics and the event counts over a store: 4x the rows, the same resident
    growth (within 40 MiB, under 120 MiB in all), while loading the file first costs its 534 B a row."""
    import _memory

    from teachers.chunked import row_bytes, sample_to_store

    lad = Ladder.random(depth=2, branching=4, events=8, seed=0, emission="gaussian", sigma=0.5)  # x stored
    assert row_bytes(lad) == 22 + 16 * 8 * 4  # 21 events and the label, 16 leaves x 8 float32
    growth = {}
    for n in (250_000, 1_000_000):
        path = sample_to_store(lad, n, tmp_path / f"s{n}.zarr", seed=0, progress=False)
        for call in ("stream()", "in_memory()"):
            growth[call, n] = _memory.growth(_STATS_SETUP, call, path)
    print("\nresident growth (MiB): " + ", ".join(f"{c} N={n}: {v / 2**20:.0f}" for (c, n), v in growth.items()))
    assert abs(growth["stream()", 1_000_000] - growth["stream()", 250_000]) < 40 * 2**20
    assert growth["stream()", 1_000_000] < 120 * 2**20
    loaded = 1_000_000 * row_bytes(lad)  # 534 MB: what the streaming pass never holds
    # 0.9: resident pages the allocator already held are reused, so loading may show a little less than its bytes
    assert growth["in_memory()", 1_000_000] >= 0.9 * loaded > 4 * growth["stream()", 1_000_000]


@pytest.mark.slow
def test_compare_resident_memory_is_flat_in_n(tmp_path):
    """``smaso compare`` with default options in a fresh process (its peak resident set): 10x the rows, the
    same peak (within 64 MiB), and under 1 GiB in all (issue 26).  The child reads ``VmHWM`` of
    ``/proc/self/status`` (its own address space's high-water mark): ``resource``'s ``ru_maxrss`` would carry
    the forking test process's peak over into the child on Linux (it read 1.6 GiB at both sizes inside the
    slow tier)."""
    import subprocess
    import sys

    from teachers.chunked import sample_to_store

    lad = Ladder.random(depth=3, branching=4, events=8, seed=0)  # 85 regions, one-hot leaves of 8
    code = ("import sys; from smaso.cli import main; rc = main(sys.argv[1:]); "
            "hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM:')); "
            "print('PEAK', hwm.split()[1]); sys.exit(rc)")
    peak = {}
    for n in (40_000, 400_000):
        path = sample_to_store(lad, n, tmp_path / f"s{n}.zarr", seed=0, progress=False)
        r = subprocess.run([sys.executable, "-c", code, "compare", str(path), "--steps", "40", "--eval-every", "20",
                            "--out", str(tmp_path / f"c{n}"), "-q"], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        peak[n] = int(r.stdout.split("PEAK")[-1].split()[0]) * 1024  # VmHWM is in kB
    print("\npeak resident (MiB): " + ", ".join(f"N={n}: {v / 2**20:.0f}" for n, v in peak.items()))
    assert abs(peak[400_000] - peak[40_000]) < 64 * 2**20
    assert max(peak.values()) < 2**30
