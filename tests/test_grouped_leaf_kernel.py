"""The row groups' Delta W above one-hot leaves as one compiled segment sum (issue 39, the main job's evaluation:
smaso.student.leaf_kernels.GroupedLeafKernel, used by row_groups.add_row_groups).

The eager reference (:func:`grouped_segment_sum`) is checked against a one-hot product nobody here wrote
(``F.one_hot`` and ``torch.einsum``); the replicate accumulator's sums with the compiled kernel against the eager
one-hot matmuls (float64 to 1e-12, float32 to round-off), a short batch padded to the compiled size (no second
compilation), the same bytes at 1 and 2 threads, and ``kernel="auto"`` reaching the grouped pass from
``accumulate_statistics`` and compiling only from its threshold of (row, leaf edge) pairs."""

from __future__ import annotations

import pickle

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

from smaso.student import event_kernels, leaf_kernels
from smaso.student.compiled import compiler_available
from smaso.student.frequency import FrequencyAccumulator, ReplicateAccumulator, accumulate_statistics
from smaso.student.leaf_kernels import GroupedLeafKernel, grouped_segment_sum, grouped_segment_sum_batch, region_major
from smaso.student.network import LadderStudent
from teachers import Ladder, sample_ladder

needs_compiler = pytest.mark.skipif(not compiler_available(), reason="inductor has no C++ compiler here")


def test_the_grouped_segment_sum_is_the_one_hot_product():
    gen = torch.Generator().manual_seed(0)
    N, R, b, m, n, G = 41, 3, 2, 4, 5, 3
    z = torch.randint(0, m, (N, R * b), generator=gen, dtype=torch.int32)
    group = torch.randint(0, G, (N,), generator=gen)
    g = torch.randn(R, n, N, generator=gen, dtype=torch.float64)  # node-major, as the record holds it
    want = torch.einsum("xs,xev,xen->sevn", F.one_hot(group, G).double(), F.one_hot(z.long(), m).double(),
                        g.permute(2, 0, 1).repeat_interleave(b, 1)).reshape(G * R * b * m, n)
    got = grouped_segment_sum(z.T, group, region_major(g), m, G)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_the_batch_major_grouped_segment_sum_is_the_region_major_one_bit_for_bit():
    gen = torch.Generator().manual_seed(1)
    N, R, b, m, n, G, k = 37, 3, 2, 4, 5, 3, 2
    z = torch.randint(0, m, (N, R * b), generator=gen, dtype=torch.int32)
    group = torch.randint(0, G, (N,), generator=gen)
    record = torch.randn(N, k, R, n, generator=gen, dtype=torch.float32)  # a batch-major record: g its slot 1
    g = record[:, 1]
    want = grouped_segment_sum(z.T, group, g.transpose(0, 1).contiguous(), m, G)
    got = grouped_segment_sum_batch(z, group, g, m, G)
    assert torch.equal(got, want)  # every row adds its examples in the same order
    ref = torch.einsum("xs,xev,xen->sevn", F.one_hot(group, G).double(), F.one_hot(z.long(), m).double(),
                       g.double().repeat_interleave(b, 1)).reshape(G * R * b * m, n)
    torch.testing.assert_close(got.double(), ref, rtol=0, atol=1e-5)


def _tree(dtype, n=150):
    lad = Ladder.random(depth=3, branching=[2, 3, 2], events=[3, 3, 3, 4], seed=0, emission="onehot")
    st = LadderStudent(lad, 3, dtype=dtype, seed=1)
    s = sample_ladder(lad, n, seed=2)
    return st, s


def _states(st, s, kernel, batches, groups=4, leaf_kernel=None, layout="node"):
    """The replicate accumulator's group states after ``batches`` (row slices, each cut into ``groups`` blocks), from
    records of ``layout`` (``forward_backward``'s)."""
    acc = ReplicateAccumulator(st, st.weights[0].dtype, groups, kernel=kernel)
    if leaf_kernel is not None:
        acc._leaf_kernel = leaf_kernel
    x = s.z[:, s.ladder.level_offsets[-2]:]
    for r in batches:
        rec = st.forward_backward(x[r], s.y[r], stacked=True, delta_w=False, layout=layout)
        n = rec.g[0].shape[0]
        acc.add(rec, s.z[r], [k * n // groups for k in range(groups + 1)])
    return acc, acc.state_dict()["groups"]


def _assert_states(a, b, **tol):
    for p, q in zip(a, b, strict=True):
        assert p["n"] == q["n"]
        for key in FrequencyAccumulator._SUMS:
            for x, y in zip(p[key], q[key], strict=True):
                if x is not None or y is not None:
                    torch.testing.assert_close(x, y, **tol)


@needs_compiler
@pytest.mark.slow  # two inductor compilations per dtype: ~2-4 s with its disk cache warm, ~15 s cold
@pytest.mark.parametrize("layout", ["node", "batch"])  # (batch: summed as it lies, smaso.student.batch_record)
def test_compiled_group_sums_equal_eager_pad_a_short_batch_and_do_not_depend_on_threads(layout):
    st, s = _tree(torch.float64)
    batches = [slice(0, 64), slice(64, 128), slice(128, 150)]  # two full batches, then a short one (padded)
    graphs = counters["stats"]["unique_graphs"]
    acc, got = _states(st, s, "compiled", batches, layout=layout)
    assert acc._leaf_kernel.sizes == [64]  # the short batch ran padded to the compiled size: one compilation
    # (the leaves' transpose and sum, the record's examples-major copy and the levels' sums: no recompilation)
    assert counters["stats"]["unique_graphs"] - graphs <= 4
    _, want = _states(st, s, "eager", batches)
    _assert_states(got, want, rtol=0, atol=1e-12)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        _, two = _states(st, s, "compiled", batches, layout=layout)
        assert torch.get_num_threads() == 2  # the kernel's one thread is restored after it
    finally:
        torch.set_num_threads(before)
    _assert_states(two, got, rtol=0, atol=0)  # the same bytes
    st32, s32 = _tree(torch.float32)
    _assert_states(_states(st32, s32, "compiled", batches[:1], layout=layout)[1],
                   _states(st32, s32, "eager", batches[:1])[1], rtol=1e-5, atol=1e-5)


def test_auto_reaches_the_grouped_pass_and_compiles_only_from_its_threshold(monkeypatch):
    """accumulate_statistics(groups=, kernel="auto") hands the pass's rows to the groups' leaf kernel: a small pass
    stays eager; past the threshold (here lowered; the compilation stubbed by the eager functions) it runs the
    segment sums, and the statistics are the eager ones to float64 round-off."""
    st, s = _tree(torch.float64)
    calls = []

    def stub(fn, *args):
        calls.append(fn.__name__)
        return fn(*args)

    monkeypatch.setattr(leaf_kernels, "use_compiled", lambda kernel, device, worth_it: kernel != "eager" and worth_it)
    monkeypatch.setattr(leaf_kernels, "run_compiled", stub)
    monkeypatch.setattr(event_kernels, "run_compiled", stub)
    eager = accumulate_statistics(st, s, batch_size=50, groups=4, dtype=torch.float32)[0]
    assert calls == []
    leaf_edges = st.num_edges(st.ladder.depth - 1)
    monkeypatch.setattr(leaf_kernels, "AUTO_EDGE_ROWS", 150 * leaf_edges)
    auto = accumulate_statistics(st, s, batch_size=50, groups=4, dtype=torch.float32)[0]
    # the record written batch-major for the compiled sums: no examples-major copy, the leaves' sum reading its g
    assert calls and set(calls) == {"grouped_segment_sum_batch", "tree_sums"}
    _assert_states(auto.state_dict()["groups"], eager.state_dict()["groups"], rtol=1e-6, atol=1e-6)
    calls.clear()
    accumulate_statistics(st, s, batch_size=50, groups=4, dtype=torch.float32, kernel="eager")
    assert calls == []


def test_the_grouped_kernel_choice_is_checked_and_pickles():
    with pytest.raises(ValueError, match="kernel: expected one of"):
        GroupedLeafKernel("fast")
    st, _ = _tree(torch.float64)
    with pytest.raises(ValueError, match="kernel: expected one of"):
        ReplicateAccumulator(st, groups=2, kernel="fast")
    for bad in (-1, 2.5, True, "10"):  # a row count the pass will see, as FrequencyAccumulator checks it
        with pytest.raises(ValueError, match="expected_rows: expected a count >= 0 or None"):
            ReplicateAccumulator(st, groups=2, expected_rows=bad)
    assert not GroupedLeafKernel("auto")._worth_it() and GroupedLeafKernel("auto", 10**10)._worth_it()
    k = GroupedLeafKernel("compiled", 7)
    k.sizes = [3]
    back = pickle.loads(pickle.dumps(k))
    assert (back.kernel, back.expected, back.sizes) == ("compiled", 7, [])
