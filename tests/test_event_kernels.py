"""The statistics pass's compiled batch sums (``FrequencyAccumulator(kernel="compiled")``, issue 39).

The default-tier tests run the kernels' functions eagerly (``compiled`` patched to the identity: no compilation) and
check their arithmetic, the padding of short batches and the choice of path against the eager one-hot path in
float64; the slow ones compile for real (float64 to ~1e-12, float32 to round-off, the same bytes at 1 and 2 threads,
one compile for full and padded batches).
"""

from __future__ import annotations

import pytest
import torch

import smaso.student.batch_sums as batch_sums
from smaso.student import event_kernels
from smaso.student.compiled import compiler_available
from smaso.student.frequency import FrequencyAccumulator, accumulate_statistics, collect_statistics
from smaso.student.network import LadderStudent
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

SUMS = FrequencyAccumulator._SUMS


def _setup(dtype=torch.float64, n=40, activation="relu", seed=0, batch_norm=False):
    lad = Ladder.random(3, 2, 3, seed=seed)
    s = sample_ladder(lad, n, seed, progress=False)
    st = LadderStudent(lad, 5, activation=activation, dtype=dtype, seed=seed, batch_norm=batch_norm)
    with torch.no_grad():
        for b in st.biases:
            b.normal_(0, 0.3, generator=torch.Generator().manual_seed(seed + 10))
    return st, s.inputs(dtype=dtype), s.y, s.z


def _add_batches(acc, st, x, y, z, sizes):
    start = 0
    for size in sizes:
        r = slice(start, start + size)
        acc.add(st.forward_backward(x[r], y[r], stacked=True), z[r])
        start += size
    return acc


def _state_close(a, b, rtol):
    for key in SUMS:
        for u, v in zip(getattr(a, key), getattr(b, key), strict=True):
            if u is not None:
                torch.testing.assert_close(v, u, rtol=rtol, atol=rtol * float(u.abs().max().clamp(min=1)))
    assert a.n == b.n


@pytest.fixture
def eager_kernels(monkeypatch):
    """The kernels' functions run as written (no compilation), with the shapes of every call recorded."""
    calls = []

    def spy(fn, *args):
        calls.append((fn.__name__, args[0].shape if fn is event_kernels.tree_sums else None))
        return fn(*args)
    monkeypatch.setattr(event_kernels, "run_compiled", spy)
    monkeypatch.setattr(batch_sums, "use_compiled", lambda kernel, device, worth_it=True:
                        kernel == "compiled" or (kernel == "auto" and worth_it))
    return calls


@pytest.mark.parametrize(("activation", "batch_norm"), [("relu", False), ("swish:0.7", False), ("relu", "after"),
                                                       ("swish:0.7", "before")])
def test_kernel_sums_equal_the_one_hot_path_in_float64_with_a_padded_short_batch(eager_kernels, activation,
                                                                                 batch_norm):
    """Every per-event sum, count and pair count of the kernels' path equals the eager one-hot path's to float64
    round-off, over batches of 16, 16 and a short 8 (padded to 16 with rows in the dropped pad segments): every
    kernel call takes 16 rows.  With BN after the gate fbar is not stacked: the Fc sums read the record's own."""
    st, x, y, z = _setup(activation=activation, batch_norm=batch_norm)
    ref = _add_batches(FrequencyAccumulator(st, kernel="eager"), st, x, y, z, [16, 16, 8])
    got = _add_batches(FrequencyAccumulator(st, kernel="compiled"), st, x, y, z, [16, 16, 8])
    assert got._kernel_on and not ref._kernel_on
    sums = [shape for name, shape in eager_kernels if name == "tree_sums"]
    assert len(sums) == 3 and all(shape[1] == 16 for shape in sums)
    _state_close(ref, got, 1e-12)
    a, b = ref.result(), got.result()
    for key in ("F", "D", "G", "U", "Gf"):
        for u, v in zip(a.means[key], b.means[key], strict=True):
            if u is not None:
                torch.testing.assert_close(v, u, rtol=1e-12, atol=1e-12)


def test_a_batch_longer_than_the_first_runs_eager(eager_kernels):
    """A batch longer than the compiled shape (the first batch's rows) is not a new compile: it runs eager, and the
    sums stay the eager path's."""
    st, x, y, z = _setup()
    ref = _add_batches(FrequencyAccumulator(st, kernel="eager"), st, x, y, z, [8, 32])
    got = _add_batches(FrequencyAccumulator(st, kernel="compiled"), st, x, y, z, [8, 32])
    assert [shape[1] for name, shape in eager_kernels if name == "tree_sums"] == [8]
    _state_close(ref, got, 1e-12)


def test_the_kernels_apply_to_trees_with_one_hot_leaves_only(eager_kernels):
    """Off a uniform tree, or with Gaussian leaves, ``kernel="compiled"`` runs the eager path (the kernels' layout is
    the tree's; the leaves' own sums are E[x | z] there)."""
    lad = Ladder.random(2, 2, 3, seed=1, emission="gaussian", sigma=0.5)
    st = LadderStudent(lad, 4, dtype=torch.float64, seed=0)
    assert not FrequencyAccumulator(st, kernel="compiled")._kernel_on


def test_auto_compiles_from_the_rows_the_caller_will_see(eager_kernels):
    st = _setup()[0]
    assert not FrequencyAccumulator(st)._kernel_on  # unknown: eager
    assert not FrequencyAccumulator(st, expected_rows=batch_sums.AUTO_ROWS - 1)._kernel_on
    assert FrequencyAccumulator(st, expected_rows=batch_sums.AUTO_ROWS)._kernel_on
    assert not FrequencyAccumulator(st, kernel="eager", expected_rows=batch_sums.AUTO_ROWS)._kernel_on
    bn = _setup(batch_norm="after")[0]  # (measured no faster there: eager unless asked)
    assert not FrequencyAccumulator(bn, expected_rows=batch_sums.AUTO_ROWS)._kernel_on
    assert FrequencyAccumulator(bn, kernel="compiled")._kernel_on


def test_collect_statistics_forwards_the_kernel(eager_kernels):
    st, x, y, z = _setup()
    ref = collect_statistics(st, x, y, z, batch_size=16, kernel="eager")
    got = collect_statistics(st, x, y, z, batch_size=16, kernel="compiled")
    assert [name for name, _ in eager_kernels].count("tree_sums") == 3
    torch.testing.assert_close(got.means["G"][1], ref.means["G"][1], rtol=1e-12, atol=1e-12)


def test_accumulate_statistics_forwards_the_kernel(eager_kernels):
    st = _setup()[0]
    s = sample_ladder(st.ladder, 40, 0, progress=False)
    ref = accumulate_statistics(st, s, batch_size=16, kernel="eager")[0]
    got = accumulate_statistics(st, s, batch_size=16, kernel="compiled")[0]
    assert [name for name, _ in eager_kernels].count("tree_sums") == 3
    _state_close(ref, got, 1e-12)


def test_bad_kernel_choices_are_refused_by_name():
    st, x, y, z = _setup()
    with pytest.raises(ValueError, match="kernel"):
        FrequencyAccumulator(st, kernel="fast")
    with pytest.raises(TypeError, match="kernel"):
        FrequencyAccumulator(st, kernel=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected_rows"):
        FrequencyAccumulator(st, expected_rows=-1)
    with pytest.raises(ValueError, match="kernel"):
        collect_statistics(st, x, y, z, kernel="fast")
    with pytest.raises(ValueError, match="kernel"):
        accumulate_statistics(st, sample_ladder(st.ladder, 8, 0, progress=False), kernel="fast")


@pytest.mark.slow
@pytest.mark.skipif(not compiler_available(), reason="inductor's C++ compiler is not on the PATH")
def test_compiled_sums_equal_eager_with_one_compile_for_full_and_padded_batches():
    """Compiled for real: float64 sums equal the eager path's to ~1e-12, float32 to round-off, and a short padded
    batch reuses the full batches' two compiled graphs (the examples-major rows and the sums)."""
    from torch._dynamo.utils import counters

    for dtype, rtol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        st, x, y, z = _setup(dtype=dtype, n=72)
        ref = _add_batches(FrequencyAccumulator(st, kernel="eager"), st, x, y, z, [32, 32, 8])
        graphs = counters["stats"]["unique_graphs"]
        got = _add_batches(FrequencyAccumulator(st, kernel="compiled"), st, x, y, z, [32, 32, 8])
        assert got._kernel_on and counters["stats"]["unique_graphs"] - graphs == 2
        _state_close(ref, got, rtol)


@pytest.mark.slow
@pytest.mark.skipif(not compiler_available(), reason="inductor's C++ compiler is not on the PATH")
def test_compiled_sums_are_the_same_bytes_at_one_and_two_threads():
    """The benchmark's shape (341 regions, 16 events, 1024 rows, float32), compiled afresh at 1 and at 2 torch
    threads: every sum the same bytes.  (Without :func:`~smaso.student.compiled.serial` inductor parallelises
    the scatters over rows at 2 threads and the float32 sums differ in their last bits: checked when written.)"""
    lad = Ladder.random(4, 4, 16, seed=0)
    s = sample_ladder(lad, 1024, 0, progress=False)
    st = LadderStudent(lad, width=16, dtype=torch.float32, seed=0)
    rec = st.forward_backward(s.inputs(dtype=torch.float32), s.y, stacked=True)
    before, states = torch.get_num_threads(), []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            torch._dynamo.reset()  # (compiled afresh at this thread count)
            acc = FrequencyAccumulator(st, kernel="compiled")
            acc.add(rec, s.z)
            states.append(acc)
    finally:
        torch.set_num_threads(before)
        torch._dynamo.reset()
    assert states[0]._kernel_on
    for key in SUMS:
        for u, v in zip(getattr(states[0], key), getattr(states[1], key), strict=True):
            assert u is None or torch.equal(u, v), key
