"""The batch-major autograd forward of a uniform-tree student on leaf events (issue 39, smaso/student/batch_major.py).

``LadderStudent.forward`` on leaf events and a uniform tree runs every level on ``(N, R, n)`` tensors: the leaf
gather's sums as they come (``OneHotLeaves`` with ``batch_major=True``), then one ``TreeLevel`` autograd Function
per level with a hand-written backward.  References that share no code with it: the loop forward of
``conftest_student.reference_forward`` on the one-hot inputs (torch autograd for the gradients), ``torch.einsum``,
and ``torch.autograd.gradcheck`` (finite differences).  Float64 to 1e-12.  Every test fails on code without
``smaso.student.batch_major`` (the import below).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest_student import (
    assert_close,
    one_torch_thread,  # noqa: F401 (fixture)
    perturb_params,
    reference_forward,
)

from smaso.student import batch_major
from smaso.student.batch_major import TreeLevel, tree_level
from smaso.student.connectivity import OneHotLeaves, one_hot_pre_activation, one_hot_rows
from smaso.student.network import LadderStudent
from teachers import Ladder, sample_ladder

TOL = 1e-12
CONFIGS = {"relu": {}, "silu, no bias": {"activation": "silu", "bias": False},
           "leaky relu, bn after": {"activation": "leaky_relu:0.1", "batch_norm": "after"},
           "bn before": {"batch_norm": "before"}, "abs, linear top": {"activation": "abs"}}


def _setup(depth=3, **kw):
    lad = Ladder.random(depth=depth, branching=[2, 3, 2][:depth], events=[3, 3, 3, 4][-depth - 1:], seed=0, sigma=0.5)
    st = LadderStudent(lad, 3, dtype=torch.float64, seed=1, **kw)
    perturb_params(st, shift=0.1)
    s = sample_ladder(lad, 40, seed=2)
    return st, s.inputs(dtype=torch.float64), s.z[:, lad.level_offsets[-2]:], s.y


def _grads(st, inputs, y):
    st.zero_grad(set_to_none=True)
    out = st(inputs)
    st.loss(out, y).backward()
    return out.detach(), [p.grad.clone() for p in st.parameters()]


@pytest.mark.parametrize("config", list(CONFIGS))
def test_events_equal_the_loop_reference(config):
    st, x, z, y = _setup(**CONFIGS[config])
    out, grads = _grads(st, z, y)
    if st.bn_placement == "before":  # the loop reference places BN after the gate: the node-major path on x
        ref, want = _grads(st, x, y)  # (tested against loops in test_bn_placement.py)
    else:
        st.zero_grad(set_to_none=True)
        ref = reference_forward(st, x)["fbar"][0][:, 0]
        st.loss(ref, y).backward()
        ref, want = ref.detach(), [p.grad for p in st.parameters()]
    assert_close(out, ref, TOL, "outputs")
    for (name, _), g, w in zip(st.named_parameters(), grads, want, strict=True):
        assert_close(g, w, TOL, f"gradient of {name}")


def test_events_run_batch_major_and_float_inputs_node_major(monkeypatch):
    calls = []
    real = batch_major.student_forward
    monkeypatch.setattr("smaso.student.network.student_forward", lambda st, ev: calls.append(ev.shape) or real(st, ev))
    st, x, z, _ = _setup()
    st(z)
    assert calls == [z.shape]
    st(x)  # float inputs: the node-major path (its leaf matmul reads the inputs fastest)
    st.fast_path = False  # the edge-list code of any ladder: node-major too
    st(z)
    assert calls == [z.shape]


def test_depth_one_events():
    st, x, z, y = _setup(depth=1)
    out, grads = _grads(st, z, y)
    ref, want = _grads(st, x, y)
    assert out.shape == (z.shape[0], st.widths[0])
    assert_close(out, ref, TOL, "outputs")
    for g, w in zip(grads, want, strict=True):
        assert_close(g, w, TOL, "gradient")


@pytest.mark.parametrize("with_bias", [True, False])
def test_tree_level_against_einsum_and_finite_differences(with_bias):
    gen = torch.Generator().manual_seed(0)
    N, R, b, nc, n = 5, 3, 2, 4, 3
    x = torch.randn(N, R * b, nc, generator=gen, dtype=torch.float64, requires_grad=True)
    W = torch.randn(R * b, nc, n, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(R, n, generator=gen, dtype=torch.float64, requires_grad=True) if with_bias else None
    grouped = x.reshape(N, R, b * nc)
    u = tree_level(grouped, W, bias)
    want = torch.einsum("xrbc,rbcn->xrn", x.view(N, R, b, nc), W.view(R, b, nc, n))
    want = want + bias if with_bias else want
    assert u.shape == (N, R, n) and u.is_contiguous()
    assert_close(u, want, TOL, "u")
    # a non-contiguous incoming gradient, as a transposed view hands it on
    g = torch.randn(R, N, n, generator=gen, dtype=torch.float64).transpose(0, 1)
    params = [x, W] + ([bias] if with_bias else [])
    got = torch.autograd.grad(u, params, g)
    ref = torch.autograd.grad(want, params, g)
    for a, r, name in zip(got, ref, ("x", "W", "bias"), strict=False):
        assert_close(a, r, TOL, f"d{name}")
    assert torch.autograd.gradcheck(lambda *t: TreeLevel.apply(t[0].reshape(N, R, b * nc), *t[1:], *(
        [] if with_bias else [None])), tuple(params))


def test_tree_level_without_input_gradient():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 2, 6, generator=gen, dtype=torch.float64)  # the leaves' inputs: no gradient wanted
    W = torch.randn(4, 3, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    u = tree_level(x, W, None)
    (dW,) = torch.autograd.grad(u.pow(2).sum(), [W])
    Wr = W.detach().clone().requires_grad_()
    (want,) = torch.autograd.grad(torch.einsum("xrk,rkn->xrn", x, Wr.view(2, 6, 2)).pow(2).sum(), [Wr])
    assert_close(dW, want, TOL, "dW")


def test_batch_major_gather_and_its_gradients():
    gen = torch.Generator().manual_seed(2)
    N, R, m, n, b = 9, 8, 5, 3, 2
    z = torch.randint(0, m, (N, R), generator=gen).to(torch.uint8)
    W = torch.randn(R, m, n, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(R // b, n, generator=gen, dtype=torch.float64, requires_grad=True)
    rows32, rows64 = one_hot_rows(z, m, None, dtype=torch.int32), one_hot_rows(z, m, None)
    assert rows32.dtype == torch.int32 and torch.equal(rows32.long(), rows64)
    flat = one_hot_pre_activation(W.detach(), rows32, bias.detach(), R // b, None, batch_major=True)
    node = one_hot_pre_activation(W.detach(), rows64, bias.detach(), R // b, None)
    assert flat.shape == (N * R // b, n) and flat._base is None  # no view: a custom Function may return it
    assert torch.equal(flat.view(N, R // b, n), node.permute(2, 0, 1))  # the same sums, bit for bit

    def wg(W_, g, ev):  # Delta W summed over the batch: child c's one-hot times its parent c // b's gradient
        full = torch.einsum("xcm,rnx->crmn", F.one_hot(ev.long(), m).double(), g)
        return full[torch.arange(R), torch.arange(R) // b]

    out = OneHotLeaves.apply(W, bias, rows32, z, m, R // b, None, wg, True)
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    dW, db = torch.autograd.grad(out, [W, bias], g)
    Wr, br = W.detach().clone().requires_grad_(), bias.detach().clone().requires_grad_()
    ref = F.embedding(rows64, Wr.reshape(-1, n)).view(N, R // b, b, n).sum(2) + br
    want_W, want_b = torch.autograd.grad(ref.reshape(-1, n), [Wr, br], g)
    assert_close(dW, want_W, TOL, "dW")
    assert_close(db, want_b, TOL, "db (from dW: every one-hot sums to 1)")


def _autograd_forward(st, x):
    """The node-major loop of ``LadderStudent.forward`` through plain autograd (the path before the reused buffers)."""
    h = st._leaves(x)
    for l in range(st.ladder.depth - 1, -1, -1):
        h = st.act(l).apply_(st._pre_activation(l, st._grouped(l, h)))
    return h[0].T


@pytest.mark.parametrize("bias", [True, False])
def test_float_inputs_equal_plain_autograd_bit_for_bit(monkeypatch, bias):
    calls = []
    from smaso.student import node_major

    real = node_major.node_major_forward
    monkeypatch.setattr("smaso.student.network.node_major_forward", lambda st, x: calls.append(1) or real(st, x))
    st, x, _, y = _setup(bias=bias)
    x = x.clone().requires_grad_()  # an input gradient too (saliency), fresh rather than a reused buffer
    for batch in (40, 17, 40):  # the reused buffers across batch sizes
        got, grads = _grads(st, x[:batch], y[:batch])
        (dx,) = torch.autograd.grad(st.loss(st(x[:batch]), y[:batch]), [x])
        st.zero_grad(set_to_none=True)
        ref = _autograd_forward(st, x[:batch])
        st.loss(ref, y[:batch]).backward()
        want = [p.grad.clone() for p in st.parameters()]
        (want_dx,) = torch.autograd.grad(st.loss(_autograd_forward(st, x[:batch]), y[:batch]), [x])
        assert torch.equal(got, ref.detach())
        assert all(torch.equal(g, w) for g, w in zip(grads, want, strict=True))
        assert torch.equal(dx, want_dx)
    assert len(calls) == 6


@pytest.mark.parametrize("inputs", ["events", "float"])
def test_two_graphs_alive_at_once(inputs):
    """Forward A, forward B, backward A, backward B: the buffers reused between backward passes hold nothing that
    a graph saved, so each graph's gradients are its own."""
    st, x, z, y = _setup()
    data = z if inputs == "events" else x
    alone = [_grads(st, data[s], y[s])[1] for s in (slice(0, 25), slice(25, 40))]
    st.zero_grad(set_to_none=True)
    losses = [st.loss(st(data[s]), y[s]) for s in (slice(0, 25), slice(25, 40))]
    for loss, want in zip(losses, alone, strict=True):
        got = torch.autograd.grad(loss, list(st.parameters()))
        for g, w in zip(got, want, strict=True):
            assert_close(g, w, TOL, "gradient")


@pytest.mark.parametrize("inputs", ["events", "floats"])
def test_reused_buffers_stay_beside_the_student_not_in_it(inputs):
    """The backward's reused buffers are kept beside the student (``smaso.student.scratch``): a copy of a trained
    student carries none of them (tens of MB at batch 1024), and its gradients are the original's."""
    import copy

    from smaso.student.scratch import scratch_dict

    st, x, z, y = _setup()
    data = z if inputs == "events" else x
    _, want = _grads(st, data, y)
    assert scratch_dict(st), "the backward kept no buffer: nothing to check"
    twin = copy.deepcopy(st)
    assert scratch_dict(twin) == {}
    for g, w in zip(_grads(twin, data, y)[1], want, strict=True):
        assert torch.equal(g, w)


@pytest.mark.parametrize("depth", [1, 2])
def test_a_relu_top_over_the_leaves(depth):
    """With a ReLU top, the level above the leaves may be the top itself (depth 1): its fused gate and the output
    view, on events and floats, against the edge-list code of any ladder."""
    st, x, z, y = _setup(depth=depth, top_activation="relu")
    got = [_grads(st, inputs, y) for inputs in (x, z)]
    st.fast_path = False
    ref, want = _grads(st, x, y)
    for out, grads in got:
        assert_close(out, ref, TOL, "outputs")
        for g, w in zip(grads, want, strict=True):
            assert_close(g, w, TOL, "gradient")


@pytest.mark.parametrize("config", ["relu", "bn before", "silu, no bias"])
@pytest.mark.parametrize("fast", [True, False])
def test_declared_one_hot_inputs_run_as_their_leaf_events(monkeypatch, config, fast):
    """``student(x, one_hot_checked=True)``: one-hot float inputs read as their leaf events (one pass) and run
    through the events' gather path, the events path's numbers exactly and the float path's to 1e-12."""
    calls = []
    real = batch_major.student_forward
    monkeypatch.setattr("smaso.student.network.student_forward", lambda st, ev: calls.append(ev) or real(st, ev))
    st, x, z, y = _setup(**CONFIGS[config])
    st.fast_path = fast
    want_out, want = _grads(st, z, y)
    got_out, got = _grads(st, x, y)  # undeclared: the float path
    assert_close(got_out, want_out, TOL, "float outputs")
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, TOL, "float gradients")
    calls.clear()
    st.zero_grad(set_to_none=True)
    o = st(x, one_hot_checked=True)
    st.loss(o, y).backward()
    assert torch.equal(o.detach(), want_out)
    for (name, _), p, w in zip(st.named_parameters(), st.parameters(), want, strict=True):
        assert torch.equal(p.grad, w), name
    assert len(calls) == (1 if fast else 0)
    if fast:
        assert torch.equal(calls[0].long(), z.long())


def test_declared_one_hot_inputs_needing_a_gradient_take_the_float_path(monkeypatch):
    """An input gradient (saliency) needs the float path: the declaration is then not used."""
    calls = []
    monkeypatch.setattr("smaso.student.network.student_forward", lambda st, ev: calls.append(1))
    st, x, _, y = _setup()
    x = x.clone().requires_grad_()
    (got,) = torch.autograd.grad(st.loss(st(x, one_hot_checked=True), y), [x])
    (want,) = torch.autograd.grad(st.loss(st(x), y), [x])
    assert calls == [] and torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [3, 16, 300])
def test_one_hot_events_reads_the_events_back(dtype, dim):
    """:func:`batch_major.one_hot_events` against ``F.one_hot``: the events exactly, uint8 where they fit."""
    z = torch.randint(0, dim, (7, 5), generator=torch.Generator().manual_seed(dim))
    ev = batch_major.one_hot_events(F.one_hot(z, dim).to(dtype))
    assert ev.dtype == (torch.uint8 if dim <= 256 else torch.int64)
    assert torch.equal(ev.long(), z)


def test_the_leaf_gate_runs_in_place_in_the_level_above_reused_gradient():
    """The leaves' ReLU gate is applied in place on dLoss/df where that is the level above's reused buffer (no
    second 4 MB buffer at batch 1024), with the loop reference's gradients (test_events_equal_the_loop_reference)."""
    from smaso.student.scratch import scratch_dict

    st, x, z, y = _setup()
    _, grads = _grads(st, z, y)
    assert "level_grad" in scratch_dict(st) and "leaf_gate_batch_major" not in scratch_dict(st)
    st.zero_grad(set_to_none=True)
    st.loss(reference_forward(st, x)["fbar"][0][:, 0], y).backward()
    for g, p in zip(grads, st.parameters(), strict=True):
        assert_close(g, p.grad, TOL, "gradient")
