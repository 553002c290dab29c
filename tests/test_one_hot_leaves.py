"""One-hot leaves given by their events (issue 39): the leaf level as a gather of weight rows.

``LadderStudent.forward`` and ``forward_backward`` take the leaf events z ``(N, R_d)`` (integers) in place of their
one-hot inputs x ``(N, R_d, dim)``: level d - 1's pre-activation is then an embedding-bag sum of weight rows
(``smaso.student.connectivity.one_hot_pre_activation``), and autograd's weight gradient the level's own matmul on
a node-major one-hot (``OneHotLeaves``).  The reference is today's matmul path on the float one-hot (itself tested
against loops and autograd in test_student.py / test_graph_student.py) and ``torch.nn.functional`` (``one_hot``,
``embedding``): float64, to 1e-12.  Every test fails on code without the events path (integer x was refused).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest_student import (
    assert_close,
    one_torch_thread,  # noqa: F401 (fixture)
    perturb_params,
)

from smaso.student.connectivity import one_hot_node_major, one_hot_pre_activation, one_hot_rows
from smaso.student.network import PER_EXAMPLE, LadderStudent
from teachers import Ladder, sample_ladder
from teachers.emission import one_hot

TOL = 1e-12


def _tree(**kw):
    return Ladder.random(depth=3, branching=[2, 3, 2], events=[3, 3, 3, 4], seed=0, sigma=0.5, **kw)


def _conv1d_deep(**kw):
    return Ladder.conv1d(8, kernels=[3, 3, 4], strides=[1, 1, 1], events=[2, 3, 3, 2], **kw)


def _irregular(**kw):
    return Ladder.random(events=[[3], [2, 4, 3], [3, 3, 3, 3]],
                         parents=[[()], [(0,), (0,), (0,)], [(0,), (0, 1), (1, 2), (0, 1, 2)]], seed=5, **kw)


# (ladder, fast path, force the gather / index_add path of the edge list code)
CASES = {"tree fast": (_tree, True, False), "tree edge list": (_tree, False, False),
         "conv1d strided": (_conv1d_deep, False, False), "irregular strided": (_irregular, False, False),
         "irregular gather": (_irregular, False, True)}


def _student(case, **kw):
    make, fast, gather = CASES[case]
    lad = make()
    st = LadderStudent(lad, 3, dtype=torch.float64, seed=1, **kw)
    perturb_params(st, shift=0.1)
    if not fast:
        st.fast_path = False
    if gather:
        st._plans = [None] * st.ladder.depth
    s = sample_ladder(lad, 48, seed=2)
    return st, s.inputs(dtype=torch.float64), s.z[:, lad.level_offsets[-2]:], s.y


def _grads(st, x, y, loss):
    st.zero_grad(set_to_none=True)
    st.loss(st(x), y, loss).backward()
    return [p.grad.clone() for p in st.parameters()]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("kw", [{}, {"batch_norm": "after", "activation": "silu"}, {"batch_norm": "before"},
                                {"shared": True}, {"readout": 3}],
                         ids=["plain", "bn-after", "bn-before", "shared", "readout"])
def test_events_equal_the_one_hot_matmul_path(case, kw):
    if kw.get("shared") and case.startswith("irregular"):
        pytest.skip("shared weights need every parent of a level to have as many children")
    st, x, z, y = _student(case, **kw)
    assert not z.is_floating_point() and z.dtype == torch.uint8  # the sample's own event dtype, as stored
    assert_close(st(z), st(x), TOL, "forward")
    for loss in ("squared", "cross_entropy"):
        a, b = st.forward_backward(z, y, loss), st.forward_backward(x, y, loss)
        for key in (*PER_EXAMPLE, "dW", "db", "dc1", "dc0", "sigma"):
            for l, (u, v) in enumerate(zip(getattr(a, key), getattr(b, key), strict=True)):
                assert (u is None) == (v is None), (key, l)
                if u is not None:
                    assert_close(u, v, TOL, f"{key}[{l}]")
        assert torch.equal(a.fbar[-1], x)  # the leaves' record is the one-hot itself
        assert a.loss == pytest.approx(b.loss, rel=1e-13, abs=1e-13)
        for ga, gb in zip(_grads(st, z, y, loss), _grads(st, x, y, loss), strict=True):
            assert_close(ga, gb, TOL, "autograd gradient")


def test_stacked_buffers_and_int64_events():
    st, x, z, y = _student("tree fast")
    a = st.forward_backward(z.long(), y, stacked=True)
    b = st.forward_backward(x, y, stacked=True)
    for u, v in zip(a.stacked, b.stacked, strict=True):
        assert_close(u, v, TOL, "stacked")
    again = st.forward_backward(z, y, stacked=a.stacked)  # reused buffers
    assert again.stacked[0].data_ptr() == a.stacked[0].data_ptr()


def test_kernels_against_torch_functional():
    gen = torch.Generator().manual_seed(0)
    N, R, m, n, b = 7, 6, 5, 4, 3
    z = torch.randint(0, m, (N, R), generator=gen)
    # node-major one-hot: F.one_hot's values, transposed
    nm = one_hot_node_major(z.to(torch.uint8), m, torch.float64)
    assert nm.shape == (R, m, N) and nm.is_contiguous()
    assert torch.equal(nm.permute(2, 0, 1), F.one_hot(z, m).double())
    assert torch.equal(nm.permute(2, 0, 1), one_hot(z, m, torch.float64))
    # a uniform level: R / b parents of b children each; u_p = sum_c W_pc^T onehot(z_c) + bias_p
    W = torch.randn(R, m, n, generator=gen, dtype=torch.float64)
    bias = torch.randn(R // b, n, generator=gen, dtype=torch.float64)
    rows = one_hot_rows(z, m, None)
    u = one_hot_pre_activation(W, rows, bias, R // b, None)
    want = torch.einsum("xcm,cmn->xcn", F.one_hot(z, m).double(), W).reshape(N, R // b, b, n).sum(2) + bias
    assert_close(u.permute(2, 0, 1), want, TOL, "fixed bags")
    ref = F.embedding(rows, W.reshape(-1, n)).reshape(N, R // b, b, n).sum(2) + bias
    assert_close(u.permute(2, 0, 1), ref, TOL, "F.embedding")
    # bags of different sizes: parents with 1, 2 and 3 children among edges (parent, child)
    par = torch.tensor([0, 1, 1, 2, 2, 2])
    chi = torch.tensor([5, 0, 3, 1, 2, 3])
    rows = one_hot_rows(z, m, chi)
    u = one_hot_pre_activation(W, rows, None, 3, torch.tensor([0, 1, 3]))
    msg = torch.einsum("xem,emn->xen", F.one_hot(z[:, chi], m).double(), W)
    want = torch.zeros(N, 3, n, dtype=torch.float64).index_add_(1, par, msg)
    assert_close(u.permute(2, 0, 1), want, TOL, "variable bags")


def test_bad_events_are_refused():
    st, _, z, y = _student("tree fast")
    bad = z.long().clone()
    bad[3, 2] = st.widths[-1]  # out of range: would silently pick the next edge's row
    for call in (lambda t: st(t), lambda t: st.forward_backward(t, y)):
        with pytest.raises(ValueError, match=r"x: leaf events must lie in \[0, 4\), got \[0, 4\]"):
            call(bad)
        with pytest.raises(ValueError, match="x: integer inputs are leaf events"):
            call(z[:, :-1])
        with pytest.raises(ValueError, match="x: integer inputs are leaf events"):
            call(z.bool())
    neg = z.long().clone()
    neg[0, 0] = -1
    with pytest.raises(ValueError, match=r"got \[-1, "):
        st(neg)


def test_events_on_meta():
    st, _, z, y = _student("irregular strided", batch_norm=True)
    st = st.to("meta")
    rec = st.forward_backward(z.to("meta"), y.to("meta"))
    assert rec.u[-2].device.type == "meta" and rec.dW[-2].shape == st.weights[-1].shape
    assert st(z.to("meta")).shape == (z.shape[0], st.widths[0])


def test_checked_events_skip_the_host_read(monkeypatch):
    st, _, z, y = _student("tree fast")
    reads = []
    real = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: reads.append(t.shape) or real(t))
    st(z)
    assert reads == [(2,)]  # the events' one range read (aminmax's two ends)
    reads.clear()
    out = st(z, events_checked=True)
    rec = st.forward_backward(z, y, labels_checked=True)
    assert reads == [] and out.shape == (z.shape[0], st.widths[0]) and rec.loss_tensor is not None


@pytest.mark.parametrize("block_bytes", [None, 4 * 2 * 4 * 48 * 8 + 1], ids=["one block", "blocks of 4 and 2 parents"])
def test_batch_sizes_change(monkeypatch, block_bytes):
    import smaso.student.connectivity as connectivity

    if block_bytes is not None:  # the backward's one-hot in blocks of parents (the last one shorter), not at once
        monkeypatch.setattr(connectivity, "ONE_HOT_BLOCK_BYTES", block_bytes)
    st, x, z, y = _student("tree fast")
    # the backward's one-hot buffer is reused between calls: a smaller batch, then the full one again
    for n in (48, 17, 48):
        for ga, gb in zip(_grads(st, z[:n], y[:n], "squared"), _grads(st, x[:n], y[:n], "squared"), strict=True):
            assert_close(ga, gb, TOL, f"autograd gradient, batch {n}")
