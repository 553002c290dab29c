"""The explicit pass written batch-major (``forward_backward(layout="batch")``, ``smaso.student.batch_record``).

Reference: the node-major pass of the same student on the same batch (itself tested against autograd and loops in
test_student.py and test_one_hot_leaves.py): every per-example field, Delta W, the bias sums and the loss agree in
float64 to 1e-12; the buffers have the batch-major shape, are reused, and :func:`as_node_major` gives back the
node-major record's buffers exactly (a copy).  Every test fails on code without the batch layout.
"""

from __future__ import annotations

import pytest
import torch
from conftest_student import assert_close, perturb_params

import smaso.student.batch_sums as batch_sums
from smaso.student import event_kernels, leaf_kernels
from smaso.student.batch_record import as_node_major, supports_batch_layout
from smaso.student.frequency import FrequencyAccumulator, ReplicateAccumulator
from smaso.student.network import PER_EXAMPLE, LadderStudent
from teachers import Ladder, sample_ladder

TOL = 1e-12


def _case(activation="relu", bias=True, emission="onehot", n=40, **kw):
    lad = Ladder.random(depth=3, branching=[2, 3, 2], events=[3, 3, 3, 4], seed=0, sigma=0.5, emission=emission)
    st = LadderStudent(lad, 3, dtype=torch.float64, seed=1, activation=activation, bias=bias, **kw)
    perturb_params(st, shift=0.1)
    s = sample_ladder(lad, n, seed=2)
    return st, s


def _compare(st, x, y, loss="squared", delta_w=True):
    node = st.forward_backward(x, y, loss, stacked=True, delta_w=delta_w)
    batch = st.forward_backward(x, y, loss, stacked=True, delta_w=delta_w, layout="batch")
    d = st.ladder.depth
    assert node.stacked_layout == "node" and batch.stacked_layout == "batch"
    assert batch.stacked_fields == node.stacked_fields
    for l in range(d):
        k = len(node.stacked_fields)
        assert tuple(batch.stacked[l].shape) == (x.shape[0], k, st.ladder.num_regions[l], st.widths[l])
    for key in PER_EXAMPLE:
        for l in range(d + 1):
            a, b = getattr(batch, key)[l], getattr(node, key)[l]
            if l == d and key == "fbar" and not x.is_floating_point():
                assert a is None  # leaf events: no one-hot (with_leaves builds it for a reader that needs it)
                continue
            assert (a is None) == (b is None), (key, l)
            if a is not None:
                assert_close(a, b, TOL, f"{key}[{l}]")
    for l in range(d):
        if delta_w:
            assert_close(batch.dW[l], node.dW[l], TOL, f"dW[{l}]")
        else:
            assert batch.dW[l] is None
        assert_close(batch.db[l], node.db[l], TOL, f"db[{l}]")
    assert abs(batch.loss - node.loss) <= TOL * max(1.0, abs(node.loss))
    return node, batch


@pytest.mark.parametrize("activation", ["relu", "leaky_relu:0.1", "silu", "swish:0.7", "abs"])
@pytest.mark.parametrize("inputs", ["float one-hot", "leaf events", "gaussian"])
def test_batch_layout_equals_the_node_major_pass(activation, inputs):
    st, s = _case(activation, emission="gaussian" if inputs == "gaussian" else "onehot")
    x = s.z[:, st.ladder.level_offsets[-2]:] if inputs == "leaf events" else s.inputs(dtype=torch.float64)
    _compare(st, x, s.y)


@pytest.mark.parametrize("loss", ["squared", "cross_entropy"])
@pytest.mark.parametrize("delta_w", [True, False])
def test_batch_layout_without_bias_and_delta_w(loss, delta_w):
    st, s = _case(bias=False)
    _compare(st, s.z[:, st.ladder.level_offsets[-2]:], s.y, loss, delta_w)


def test_batch_layout_shared_weights_and_leaf_kernel_compiled():
    st, s = _case(shared=True)
    _compare(st, s.inputs(dtype=torch.float64), s.y)
    st, s = _case(kernel="compiled")  # the leaves' Delta W from the compiled segment sum (eager without a compiler)
    _compare(st, s.z[:, st.ladder.level_offsets[-2]:], s.y)


def test_batch_buffers_are_reused_and_convert_to_node_major():
    st, s = _case()
    z = s.z[:, st.ladder.level_offsets[-2]:]
    first = st.forward_backward(z[:20], s.y[:20], stacked=True, layout="batch")
    second = st.forward_backward(z[20:], s.y[20:], stacked=first.stacked, layout="batch")
    assert all(a.data_ptr() == b.data_ptr() for a, b in zip(first.stacked, second.stacked, strict=True))
    node = st.forward_backward(z[20:], s.y[20:], stacked=True)
    again = as_node_major(second)
    assert again.stacked_layout == "node" and again.stacked_fields == node.stacked_fields
    for a, b in zip(again.stacked, node.stacked, strict=True):
        assert a.shape == b.shape and a.is_contiguous()
        assert_close(a, b, TOL, "stacked")
    for key in ("fbar", "slope", "deriv", "g", "f"):
        for l in range(st.ladder.depth):
            got = getattr(again, key)[l]
            assert_close(got, getattr(node, key)[l], TOL, f"{key}[{l}]")
            assert got.data_ptr() >= again.stacked[l].data_ptr()  # a view of the node-major copy
    assert as_node_major(node) is node  # a node-major record as it is


def test_batch_layout_falls_back_to_node_major_where_unsupported():
    st, s = _case(batch_norm=True)
    assert not supports_batch_layout(st)
    rec = st.forward_backward(s.inputs(dtype=torch.float64), s.y, stacked=True, layout="batch")
    assert rec.stacked_layout == "node" and rec.stacked[0].shape[-1] == s.y.shape[0]
    st, s = _case()
    st.fast_path = False
    assert not supports_batch_layout(st)
    assert st.forward_backward(s.inputs(dtype=torch.float64), s.y, layout="batch").stacked_layout == "node"


def test_a_bad_layout_is_refused():
    st, s = _case()
    with pytest.raises(ValueError, match="layout: expected one of"):
        st.forward_backward(s.inputs(dtype=torch.float64), s.y, layout="rows")


def _stub_kernels(monkeypatch):
    """The compiled kernels' functions run as written (no compilation: the same arithmetic), their names recorded."""
    calls = []

    def stub(fn, *args):
        calls.append(fn.__name__)
        return fn(*args)

    on = lambda kernel, device, worth_it=True: kernel == "compiled"  # noqa: E731
    for module in (leaf_kernels, batch_sums):
        monkeypatch.setattr(module, "use_compiled", on)
    for module in (leaf_kernels, event_kernels):
        monkeypatch.setattr(module, "run_compiled", stub)
    return calls


def _sums_close(a, b, tol=1e-12):
    for key in FrequencyAccumulator._SUMS:
        for u, v in zip(a[key], b[key], strict=True):
            assert (u is None) == (v is None), key
            if u is not None:
                torch.testing.assert_close(u, v, rtol=0, atol=tol * float(v.abs().max().clamp(min=1)))
    assert a["n"] == b["n"]


def test_the_compiled_sums_of_batch_records_equal_the_eager_sums(monkeypatch):
    """The statistics accumulator's compiled sums read a batch-major record as it is (no examples-major copy), a
    short batch padded to the compiled size; the sums equal the eager one-hot path's on node-major records to
    float64 round-off, and an eager accumulator takes a batch-major record too (copied node-major)."""
    calls = _stub_kernels(monkeypatch)
    st, s = _case(n=150)
    z = s.z[:, st.ladder.level_offsets[-2]:]
    ref, got, eager_batch = (FrequencyAccumulator(st, kernel=k) for k in ("eager", "compiled", "eager"))
    assert (got.record_layout(), ref.record_layout()) == ("batch", "node")
    for r in (slice(0, 64), slice(64, 128), slice(128, 150)):  # the last one short: padded
        ref.add(st.forward_backward(z[r], s.y[r], stacked=True), s.z[r])
        rec = st.forward_backward(z[r], s.y[r], stacked=True, layout="batch")
        got.add(rec, s.z[r])
        eager_batch.add(rec, s.z[r])
    assert "tree_sums" in calls and "examples_major" not in calls
    _sums_close(got.state_dict(), ref.state_dict())
    _sums_close(eager_batch.state_dict(), ref.state_dict())


@pytest.mark.parametrize("kernel", ["compiled", "eager"])
def test_row_groups_of_batch_records_equal_those_of_node_major_records(monkeypatch, kernel):
    """Every row group's sums (the jackknife's grouped pass) from batch-major records equal those from node-major
    records to float64 round-off: compiled (the group sums and the leaves' Delta W read the record as it is, g
    included) and eager (the record copied node-major)."""
    calls = _stub_kernels(monkeypatch)
    st, s = _case(n=150)
    z = s.z[:, st.ladder.level_offsets[-2]:]
    states = {}
    for layout in ("node", "batch"):
        acc = ReplicateAccumulator(st, torch.float64, 4, kernel=kernel)
        assert acc.record_layout() == ("batch" if kernel == "compiled" else "node")
        for r in (slice(0, 64), slice(64, 128), slice(128, 150)):
            rec = st.forward_backward(z[r], s.y[r], stacked=True, delta_w=False, layout=layout)
            n = r.stop - r.start
            acc.add(rec, s.z[r], [k * n // 4 for k in range(5)])
        states[layout] = acc.state_dict()["groups"]
    assert ("tree_sums" in calls) == (kernel == "compiled")
    for a, b in zip(states["batch"], states["node"], strict=True):
        _sums_close(a, b)


@pytest.mark.parametrize("inputs", ["leaf events", "float one-hot"])
def test_the_batch_major_pass_and_its_readers_run_on_meta(inputs):
    """No host read and no device mismatch on the batch-major path (a meta tensor has no values: any sync raises):
    the pass, with Delta W, and the accumulators taking its record (copied node-major for the eager sums) run on the
    meta device with the CPU's shapes and dtypes."""
    st, s = _case(n=48)
    meta = LadderStudent(st.ladder, 3, dtype=torch.float64, seed=1, device="meta")
    x = s.z[:, st.ladder.level_offsets[-2]:] if inputs == "leaf events" else s.inputs(dtype=torch.float64)
    cpu = st.forward_backward(x, s.y, stacked=True, layout="batch")
    rec = meta.forward_backward(x.to("meta"), s.y.to("meta"), stacked=True, labels_checked=True, layout="batch")
    assert rec.stacked_layout == "batch"
    for key in (*PER_EXAMPLE, "dW", "db", "stacked"):
        for m, c in zip(getattr(rec, key), getattr(cpu, key), strict=True):
            assert (m is None) == (c is None), key
            if m is not None:
                assert m.device.type == "meta" and m.shape == c.shape and m.dtype == c.dtype, key
    acc, rep = FrequencyAccumulator(meta), ReplicateAccumulator(meta, groups=3)
    acc.add(rec, s.z.to("meta"))
    rep.add(meta.forward_backward(x.to("meta"), s.y.to("meta"), stacked=True, labels_checked=True, delta_w=False,
                                  layout="batch"), s.z.to("meta"), [0, 16, 32, 48])
    assert acc.n == rep.n == 48 and acc.own[0].device.type == "meta"


def test_replicates_of_a_batch_record_cut_into_blocks_equal_those_of_a_node_major_one():
    """A replicate accumulator given no bounds cuts each batch into row blocks (``record_rows``, which slices a
    batch-major record's buffers along their first axis): the same sums as from the node-major record."""
    st, s = _case(n=90)
    x = s.inputs(dtype=torch.float64)
    states = {}
    for layout in ("node", "batch"):
        acc = ReplicateAccumulator(st, torch.float64, 3)
        for r in (slice(0, 45), slice(45, 90)):
            acc.add(st.forward_backward(x[r], s.y[r], stacked=True, layout=layout), s.z[r])
        states[layout] = acc.state_dict()["groups"]
    for a, b in zip(states["batch"], states["node"], strict=True):
        _sums_close(a, b)


def test_the_replicates_ask_for_the_batch_layout_only_where_their_compiled_sums_read_it(monkeypatch):
    """``ReplicateAccumulator.record_layout``: "batch" for grouped batches with a compiled leaf kernel on a uniform
    tree on the fast path; "node" without groups, without compilation, or on the edge-list path."""
    _stub_kernels(monkeypatch)
    st, _ = _case()
    assert ReplicateAccumulator(st, torch.float64, 3, kernel="compiled").record_layout() == "batch"
    assert ReplicateAccumulator(st, torch.float64, 3, kernel="compiled").record_layout(grouped=False) == "node"
    assert ReplicateAccumulator(st, torch.float64, 3, kernel="eager").record_layout() == "node"
    st.fast_path = False
    assert ReplicateAccumulator(st, torch.float64, 3, kernel="compiled").record_layout() == "node"
