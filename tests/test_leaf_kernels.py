"""smaso.student.leaf_kernels: the one-hot leaves' gather and weight gradient compiled (issue 39, the LC layer).

The eager references (:func:`gather_relu`, :func:`gated_segment_sum`) are checked against a one-hot product nobody
here wrote (``F.one_hot`` and ``torch.einsum``); the compiled student's outputs and gradients against the eager
student's (float64 to 1e-12, float32 to round-off), a short last batch padded to the compiled size (no second
compilation), the same bytes at 1 and 2 threads, and ``kernel="auto"`` compiling only past its threshold."""

from __future__ import annotations

import pickle

import pytest
import torch
import torch.nn.functional as F
from conftest_student import perturb_params

from smaso.student import compiled as compiled_mod
from smaso.student import leaf_kernels
from smaso.student.compiled import compiler_available
from smaso.student.leaf_kernels import LeafKernel, gated_segment_sum, gather_relu
from smaso.student.network import LadderStudent
from teachers import Ladder, sample_ladder

needs_compiler = pytest.mark.skipif(not compiler_available(), reason="inductor has no C++ compiler here")


def test_the_gated_segment_sum_is_the_one_hot_product():
    gen = torch.Generator().manual_seed(0)
    N, R, b, m, n = 37, 3, 2, 4, 5
    z = torch.randint(0, m, (N, R * b), generator=gen)
    rows = torch.arange(R * b) * m + z
    grad = torch.randn(N, R, n, generator=gen, dtype=torch.float64)
    f = torch.randn(N, R, n, generator=gen, dtype=torch.float64).relu()
    g = grad * (f > 0)
    want = torch.einsum("xev,xen->evn", F.one_hot(z, m).double(), g.repeat_interleave(b, 1)).reshape(-1, n)
    torch.testing.assert_close(gated_segment_sum(rows, grad, f, R * b * m), want, rtol=0, atol=1e-12)
    torch.testing.assert_close(gated_segment_sum(rows.int(), grad, f, R * b * m), want, rtol=0, atol=1e-12)


def test_the_gather_is_the_one_hot_product():
    gen = torch.Generator().manual_seed(1)
    N, R, b, m, n = 37, 3, 2, 4, 5
    z = torch.randint(0, m, (N, R * b), generator=gen)
    table = torch.randn(R * b * m, n, generator=gen, dtype=torch.float64)
    u = torch.einsum("xev,evn->xen", F.one_hot(z, m).double(), table.view(R * b, m, n)).view(N, R, b, n).sum(2)
    got = gather_relu(table, (torch.arange(R * b) * m + z).int(), R)
    torch.testing.assert_close(got, u.relu().view(N * R, n), rtol=0, atol=1e-12)


def _setup(dtype=torch.float64, n=21, **kw):
    lad = Ladder.random(depth=3, branching=[2, 3, 2], events=[3, 3, 3, 4], seed=0, sigma=0.5)
    students = {k: LadderStudent(lad, 3, dtype=dtype, seed=1, kernel=k, **kw) for k in ("eager", "compiled")}
    for st in students.values():
        perturb_params(st, shift=0.1, seed=0)
    s = sample_ladder(lad, n, seed=2)
    return students, s.z[:, lad.level_offsets[-2]:], s.y


def _grads(st, z, y):
    """The outputs and every parameter's gradient."""
    st.zero_grad(set_to_none=True)
    out = st(z, events_checked=True)
    st.loss(out, y).backward()
    return [out.detach(), *(p.grad.clone() for p in st.parameters())]


@needs_compiler
@pytest.mark.slow  # two inductor compilations: ~3.5 s with its disk cache warm, 16 s cold (a fresh CI runner)
def test_compiled_gradients_equal_eager_pad_short_batches_and_do_not_depend_on_threads():
    students, z, y = _setup()
    ev, co = students["eager"], students["compiled"]
    for rows in (slice(0, 16), slice(16, 21)):  # a full batch, then a short last one
        want, got = _grads(ev, z[rows], y[rows]), _grads(co, z[rows], y[rows])
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    assert co.leaf_kernel.sizes == [16]  # the short batch ran padded to the compiled size: one compilation
    # the explicit forward_backward's Delta W (Eq 2, the batch mean) is minus the compiled autograd gradient
    rec = co.forward_backward(z[:16], y[:16])
    _grads(co, z[:16], y[:16])
    for l, w in enumerate(co.weights):
        torch.testing.assert_close(rec.dW[l].reshape(w.shape), -w.grad, rtol=0, atol=1e-12)
    one = _grads(co, z[:16], y[:16])
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = _grads(co, z[:16], y[:16])
        assert torch.get_num_threads() == 2  # the kernel's one thread is restored after it
    finally:
        torch.set_num_threads(before)
    for a, b in zip(one, two, strict=True):
        assert torch.equal(a, b)


@needs_compiler
@pytest.mark.slow
def test_compiled_gradients_equal_eager_in_float32_to_round_off():
    students, z, y = _setup(torch.float32, n=64)
    for a, b in zip(_grads(students["compiled"], z, y), _grads(students["eager"], z, y), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@needs_compiler
@pytest.mark.slow
@pytest.mark.parametrize("config", [{"batch_norm": "before"}, {"batch_norm": "after"}, {"activation": "silu"},
                                    {"activation": "abs", "bias": False}])
def test_the_ungated_leaves_compiled_equal_eager(config):
    """Leaves without the fused ReLU (BN, other activations: connectivity.OneHotLeaves): the same sum ungated."""
    students, z, y = _setup(**config)
    for rows in (slice(0, 16), slice(16, 21)):
        want, got = _grads(students["eager"], z[rows], y[rows]), _grads(students["compiled"], z[rows], y[rows])
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    assert students["compiled"].leaf_kernel.sizes == [16]


def test_auto_compiles_only_past_its_threshold(monkeypatch):
    """A short run never compiles; one past the threshold does (here lowered; the compilation itself stubbed)."""
    students, z, y = _setup()
    st = students["eager"]
    st.leaf_kernel = LeafKernel("auto")
    _grads(st, z[:16], y[:16])
    assert st.leaf_kernel.sizes == [] and st.leaf_kernel.edge_rows == 16 * z.shape[1]
    monkeypatch.setattr(leaf_kernels, "AUTO_EDGE_ROWS", 16 * z.shape[1])
    monkeypatch.setattr(leaf_kernels, "use_compiled", lambda kernel, device, worth_it: worth_it)
    monkeypatch.setattr(leaf_kernels, "run_compiled", lambda fn, *a: fn(*a))  # the eager function stands in
    _grads(st, z[:16], y[:16])
    assert st.leaf_kernel.sizes == [16]


def test_the_eager_kernel_and_meta_tensors_never_compile():
    assert LeafKernel("eager").size(torch.zeros(4, 2, dtype=torch.int32)) is None
    assert LeafKernel("compiled").size(torch.zeros(4, 2, dtype=torch.int32, device="meta")) is None


def test_a_bad_kernel_is_refused_by_name_and_the_choice_pickles_without_its_history():
    lad = Ladder.random(depth=2, branching=[2, 2], events=[2, 2, 3], seed=0)
    with pytest.raises(ValueError, match="kernel: expected one of"):
        LadderStudent(lad, 2, kernel="fast")
    k = LeafKernel("compiled")
    k.edge_rows, k.sizes = 5, [3]
    back = pickle.loads(pickle.dumps(k))
    assert (back.kernel, back.edge_rows, back.sizes) == ("compiled", 0, [])


_SCRIPT = """
import sys, torch
torch.set_num_threads(int(sys.argv[1]))
sys.path.insert(0, sys.argv[3])
from test_leaf_kernels import _grads, _setup
students, z, y = _setup(torch.float32, n=64)
torch.save(_grads(students["compiled"], z, y), sys.argv[2])
"""


@needs_compiler
@pytest.mark.slow
def test_the_same_bytes_when_a_fresh_process_compiles_at_one_or_two_threads(tmp_path):
    """Each process compiles afresh at the thread count it starts with: the kernel's additions keep one order."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = str(Path(__file__).resolve().parent)
    out = {}
    for threads in (1, 2):
        out[threads] = tmp_path / f"grads{threads}.pt"
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor{threads}")}  # none shared on disk
        subprocess.run([sys.executable, "-c", _SCRIPT, str(threads), str(out[threads]), here], check=True, env=env,
                       timeout=300)
    for a, b in zip(torch.load(out[1]), torch.load(out[2]), strict=True):
        assert torch.equal(a, b)


@needs_compiler
@pytest.mark.slow
def test_past_dynamo_s_recompile_limit_the_kernel_runs_eager(monkeypatch):
    """With fullgraph=True a compilation past torch._dynamo's limit raises; the kernel then runs eager instead."""
    import torch._dynamo

    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 1)
    monkeypatch.setattr(compiled_mod, "_EXHAUSTED", set())
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(2)
    try:
        for n in (5, 6, 7):  # three shapes: the second and third past the limit of 1
            rows = torch.randint(0, 8, (n, 4), generator=gen, dtype=torch.int32)
            grad, f = torch.randn(2, n, 2, 3, generator=gen, dtype=torch.float64)
            got = LeafKernel("compiled").weight_grad(n, rows, grad, f, 8)
            torch.testing.assert_close(got, gated_segment_sum(rows, grad, f, 8), rtol=0, atol=1e-12)
        assert compiled_mod._EXHAUSTED == {gated_segment_sum}
    finally:
        torch._dynamo.reset()  # no kernel compiled under the lowered limit outlives the test
