"""A pass into a previous record's stacked buffers allocates none of its batch-sized tensors (issue 39): the
pre-activations u, the grouped copies of stacked outputs, the raw gradients and Delta W go to the student's scratch
buffers (``smaso.student.record_buffers``), with the values of a fresh pass bit for bit; a pass without reuse keeps
records of its own."""

from __future__ import annotations

import pytest
import torch

from smaso.student.network import PER_EXAMPLE, LadderStudent
from teachers import Ladder, sample_ladder

# the record's tensors that a pass allocated per batch before (u, the raw gradients, Delta W; every hidden level)
_SCRATCH = ("u", "g_raw")


def _fields(rec) -> dict[str, list[torch.Tensor | None]]:
    return {k: list(getattr(rec, k)) for k in (*PER_EXAMPLE, "dW", "db", "sigma", "mu", "dc1", "dc0")}


def _cloned(rec) -> dict[str, list[torch.Tensor | None]]:
    return {k: [None if t is None else t.clone() for t in v] for k, v in _fields(rec).items()}


def _assert_equal(got: dict, want: dict) -> None:
    for k, v in want.items():
        for l, (a, b) in enumerate(zip(got[k], v, strict=True)):
            assert (a is None) == (b is None), (k, l)
            assert a is None or torch.equal(a, b), (k, l)


@pytest.mark.parametrize(("batch_norm", "dtype", "events"), [(False, torch.float32, False),
                                                            (False, torch.float64, True),
                                                            ("after", torch.float64, False),
                                                            ("before", torch.float64, False)])
def test_reused_passes_equal_fresh_passes_bit_for_bit(batch_norm, dtype, events):
    """Three batches through one set of reused buffers: each record, cloned before the next batch overwrites it,
    equals a fresh pass (``stacked=True``) of the same batch field for field, ``torch.equal``."""
    lad = Ladder.random(depth=3, branching=3, events=4, seed=2)
    s = sample_ladder(lad, 96, seed=5)
    st = LadderStudent(lad, 5, dtype=dtype, batch_norm=batch_norm, seed=1)
    x = s.z[:, lad.level_offsets[-2]:] if events else s.inputs(dtype=dtype)
    buffers: bool | list[torch.Tensor] = True
    for lo in range(0, 96, 32):
        rec = st.forward_backward(x[lo: lo + 32], s.y[lo: lo + 32], stacked=buffers)
        got = _cloned(rec)
        _assert_equal(got, _fields(st.forward_backward(x[lo: lo + 32], s.y[lo: lo + 32], stacked=True)))
        buffers = rec.stacked


@pytest.mark.parametrize("batch_norm", [False, "after", "before"])
def test_a_reused_pass_writes_u_the_raw_gradients_and_delta_w_into_the_same_memory(batch_norm):
    """With the previous record alive, the next reused pass writes its u, raw gradients, Delta W and BN's
    standardized inputs where that record's were (no fresh batch-sized tensors: the page faults of issue 39); a
    fresh pass's record is its own, unchanged by later reused passes."""
    lad = Ladder.random(depth=3, branching=3, events=4, seed=2)
    s = sample_ladder(lad, 64, seed=5)
    st = LadderStudent(lad, 5, dtype=torch.float32, batch_norm=batch_norm, seed=1)
    x = s.inputs(dtype=torch.float32)
    start = st.forward_backward(x[:32], s.y[:32], stacked=True)
    alone = st.forward_backward(x[32:], s.y[32:], stacked=True)  # buffers of its own, never handed back
    kept = _cloned(alone)
    first = st.forward_backward(x[32:], s.y[32:], stacked=start.stacked)
    second = st.forward_backward(x[:32], s.y[:32], stacked=first.stacked)
    d = lad.depth
    for k in _SCRATCH:
        for l in range(0 if k == "u" else 1, d):  # g_raw[0] is the loss's gradient (not a scratch buffer)
            a, b = getattr(first, k)[l], getattr(second, k)[l]
            assert a.data_ptr() == b.data_ptr() and a.shape == b.shape, (k, l)
    for l in range(d):
        assert first.dW[l].data_ptr() == second.dW[l].data_ptr(), l
    bn_levels = [l for l in range(d) if first.f_tilde[l] is not None]
    assert len(bn_levels) == (d - 1 if batch_norm else 0)  # BN on every hidden level below the top
    for l in bn_levels:
        # (before the gate BN's backward lands in the stacked g slot: only its f~ is a scratch buffer)
        for k in ("f_tilde", "g_f") if batch_norm == "after" else ("f_tilde",):
            assert getattr(first, k)[l].data_ptr() == getattr(second, k)[l].data_ptr(), (k, l)
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(alone.u[:d], second.u[:d], strict=True))
    _assert_equal(_fields(alone), kept)
