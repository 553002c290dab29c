"""smaso.student.einsum_paths.einsum: torch.einsum bit for bit, its contraction path asked of opt_einsum once per
equation and shapes (issue 39: the path search was a third of the demo's diagnosis time)."""

from __future__ import annotations

import pytest
import torch

from smaso.student import einsum_paths
from smaso.student.einsum_paths import einsum

#: The reformulation's three per-edge products (smaso.student.reformulation), with and without a replicate axis.
CASES = [("...eab,...ebk,...ekj->...eaj", [(10, 8, 4, 4), (10, 8, 4, 16), (8, 16, 16)]),
         ("...eab,...ebk,...eaj->...ekj", [(8, 4, 4), (8, 4, 16), (8, 4, 32)]),
         ("...eab,...eaj,...ekj->...ebk", [(3, 8, 4, 5), (3, 8, 4, 7), (8, 6, 7)]),
         ("ij,jk,kl,lm->im", [(3, 40), (40, 2), (2, 30), (30, 5)])]


@pytest.mark.parametrize(("equation", "shapes"), CASES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_einsum_is_torch_einsum_bit_for_bit_values_and_gradients(equation, shapes, dtype):
    g = torch.Generator().manual_seed(len(equation))
    ops = [torch.randn(s, generator=g, dtype=dtype, requires_grad=True) for s in shapes]
    a, b = torch.einsum(equation, *ops), einsum(equation, *ops)
    assert torch.equal(a, b)
    w = torch.randn(a.shape, generator=g, dtype=dtype)
    ga = torch.autograd.grad((a * w).sum(), ops)
    gb = torch.autograd.grad((b * w).sum(), ops)
    assert all(torch.equal(x, y) for x, y in zip(ga, gb, strict=True))


def _spy_on_paths(monkeypatch) -> list:
    """The equations opt_einsum is asked a contraction path for, from now on (opt_einsum itself answers)."""
    from torch.backends import opt_einsum

    real = opt_einsum.get_opt_einsum()
    asked = []

    class Spy:
        @staticmethod
        def contract_path(*args, **kwargs):
            asked.append(args[0])
            return real.contract_path(*args, **kwargs)

    monkeypatch.setattr(opt_einsum, "get_opt_einsum", lambda: Spy)
    return asked


def test_the_path_is_asked_once_per_equation_and_shapes(monkeypatch):
    asked = _spy_on_paths(monkeypatch)
    einsum_paths._path.cache_clear()
    eq, shapes = CASES[0]
    ops = [torch.ones(s, dtype=torch.float64) for s in shapes]
    for _ in range(3):
        einsum(eq, *ops)
    assert asked == [eq]
    einsum(eq, *(o[:1] if i == 0 else o for i, o in enumerate(ops)))  # other shapes: asked again
    assert asked == [eq, eq]
    # two operands: torch.einsum itself, which asks nothing
    assert torch.equal(einsum("ij,jk->ik", ops[2][0], ops[2][1]), torch.einsum("ij,jk->ik", ops[2][0], ops[2][1]))
    assert asked == [eq, eq]


def test_the_reformulation_asks_for_no_path_once_its_shapes_are_known(monkeypatch):
    """A second reformulation of the same shapes asks opt_einsum nothing (torch.einsum asked on every product)."""
    from smaso.student.frequency import accumulate_statistics
    from smaso.student.network import LadderStudent
    from smaso.student.reformulation import reformulate
    from teachers.ladder import Ladder
    from teachers.sampling import sample_ladder

    lad = Ladder.default()
    net = LadderStudent(lad, 8, readout=None, seed=0, dtype=torch.float64)
    stats = accumulate_statistics(net, sample_ladder(lad, 512, 0, progress=False), batch_size=512)[0].result()
    first = reformulate(net, stats.P, stats)
    asked = _spy_on_paths(monkeypatch)
    again = reformulate(net, stats.P, stats)
    assert asked == []
    for key in ("Fbar", "G_tilde", "dW"):
        assert all(torch.equal(a, b) for a, b in zip(getattr(first, key), getattr(again, key), strict=True)
                   if a is not None)
