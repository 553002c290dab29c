"""smaso.student.compiled: the one switch between the student's eager and inductor-compiled kernels (issue 39)."""

import warnings

import pytest
import torch

from smaso.student import compiled as C


@pytest.mark.parametrize("bad, err", [("fast", ValueError), ("", ValueError), (1, TypeError), (None, TypeError)])
def test_a_kernel_name_outside_the_three_is_refused_by_name(bad, err):
    with pytest.raises(err, match="kernel: expected one of 'eager', 'compiled', 'auto'"):
        C.check_kernel(bad)
    with pytest.raises(err, match="kernel"):
        C.use_compiled(bad, "cpu")


def test_eager_never_compiles_and_auto_follows_the_callers_judgement():
    assert not C.use_compiled("eager", "cpu")
    assert not C.use_compiled("auto", "cpu", worth_it=False)
    assert C.use_compiled("auto", "cpu") == C.compiler_available() == C.use_compiled("compiled", "cpu")


def test_no_compilation_off_the_cpu():
    """meta tensors have no values and inductor's GPU backend needs triton: both run the eager function."""
    assert not C.use_compiled("compiled", "meta")
    assert not C.use_compiled("compiled", torch.device("meta"))


def test_serial_runs_one_thread_inside_and_restores_the_count():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with C.serial():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def _event_sums(z: torch.Tensor, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """sum_n 1[z_n = k] x_n g_n: (N,) int64, (N, W), (N, W) -> (4, W)."""
    return torch.zeros(4, x.shape[1], dtype=x.dtype).index_add_(0, z, x * g)


@pytest.mark.slow  # (a compilation: 3-4 s with inductor's disk cache warm, ~14 s cold as on a fresh CI runner)
@pytest.mark.skipif(not C.compiler_available(), reason="inductor has no C++ compiler here")
def test_a_compiled_segment_sum_equals_the_one_hot_product_in_float64():
    gen = torch.Generator().manual_seed(3)
    z = torch.randint(0, 4, (257,), generator=gen)
    x, g = torch.randn(2, 257, 5, generator=gen, dtype=torch.float64)
    want = torch.nn.functional.one_hot(z, 4).double().T @ (x * g)
    fn = C.compiled(_event_sums)
    assert fn is C.compiled(_event_sums)  # built once per function
    torch.testing.assert_close(fn(z, x, g), want, rtol=0, atol=1e-12)


def test_a_kernel_inductor_cannot_build_runs_eager_after_one_warning_naming_it(monkeypatch):
    """A broken compiler (or warnings made errors inside inductor) must not end a long run: the eager function, the
    same arithmetic, runs from then on, and the failure is said once."""
    import torch._dynamo

    def broken(fn):
        def build(*args, **kwargs):
            raise torch._dynamo.exc.BackendCompilerFailed(lambda: None, RuntimeError("cc1: out of memory"), None)
        return build

    monkeypatch.setattr(C, "compiled", broken)
    monkeypatch.setattr(C, "_EXHAUSTED", set())
    z = torch.tensor([0, 3, 3, 1])
    x, g = torch.arange(8.0, dtype=torch.float64).view(4, 2), torch.ones(4, 2, dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match=r"_event_sums: inductor could not compile it \(RuntimeError: cc1: out of "
                                            r"memory\); running it eager"):
        got = C.run_compiled(_event_sums, z, x, g)
    torch.testing.assert_close(got, _event_sums(z, x, g), rtol=0, atol=0)
    assert C._EXHAUSTED == {_event_sums}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: the second call runs eager without a word
        torch.testing.assert_close(C.run_compiled(_event_sums, z, x, g), got, rtol=0, atol=0)
