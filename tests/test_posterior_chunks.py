"""The tree posterior's automatic chunk size (``inference.posterior._tree_chunk``): unchanged on ladders without
productions (the numbers below are main's before this change), and on a ladder of productions sized by its
production levels (R_l m_l K values per example, at least 16 examples).

Only the chosen sizes are asserted here; whether they are fast is benchmarks/bench_rhm.py's business."""

from __future__ import annotations

import pytest
import torch

import inference.posterior as posterior_module
from inference.posterior import posterior
from inference.sum_product import tree_plan
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

CPU = torch.device("cpu")

# name: (ladder, auto chunk on a CPU, on another device), the chunks computed by main before this change
ORDINARY = {
    "td": (lambda: Ladder.random(depth=2, branching=2, events=[3, 3, 2], seed=11), 21845, 2796202),
    "td-uneven": (lambda: Ladder.random(depth=2, branching=[3, 2], events=[2, 3, 2], seed=12), 14563, 1864135),
    "td-gauss": (lambda: Ladder.random(depth=2, branching=6, events=5, seed=2, emission="gaussian", sigma=0.8),
                 582, 74565),
    "bu": (lambda: Ladder.random(depth=2, branching=2, events=[3, 3, 2], mode="bottomup", seed=21), 29127, 3728270),
    "bu-uneven": (lambda: Ladder.random(depth=2, branching=[3, 2], events=[3, 2, 2], mode="bottomup", seed=22),
                  21845, 2796202),
    "td-wide": (lambda: Ladder.random(depth=4, branching=4, events=[10, 64, 64, 32, 16], seed=3), 32, 4096),
    "bu-wide": (lambda: Ladder.random(depth=3, branching=2, events=[4, 16, 16, 8], mode="bottomup", seed=4),
                512, 65536),
    "td-gauss-wide": (lambda: Ladder.random(depth=3, branching=4, events=[8, 32, 32, 32], seed=5,
                                            emission="gaussian", sigma=0.5), 8, 1024),
}


def _auto_step(lad: Ladder, monkeypatch: pytest.MonkeyPatch) -> int:
    """The chunk ``posterior(lad, x)`` passes to its chunk loop, read from the loop's own argument."""
    seen: list[int] = []
    passes = posterior_module._passes

    def spy(one_pass, x, step, dev, shapes):
        seen.append(step)
        return passes(one_pass, x, step, dev, shapes)

    monkeypatch.setattr(posterior_module, "_passes", spy)
    post = posterior(lad, sample_ladder(lad, 3, seed=0).inputs(dtype=torch.float64))
    assert post.method == "tree" and torch.isfinite(post.log_evidence).all()
    return seen[0]


@pytest.mark.parametrize("name", sorted(ORDINARY))
def test_auto_chunk_of_ladders_without_productions_is_unchanged(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    make, cpu, other = ORDINARY[name]
    lad = make()
    assert lad.productions is None
    assert _auto_step(lad, monkeypatch) == cpu
    assert posterior_module._tree_chunk(tree_plan(lad, CPU), torch.device("meta")) == other  # the device budget


@pytest.mark.parametrize(("v", "L", "chunk"), [(8, 3, 1024), (4, 4, 2048), (32, 4, 32), (16, 5, 64), (64, 5, 16)])
def test_auto_chunk_of_an_rhm_follows_its_production_levels(v: int, L: int, chunk: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """2^18 // max_l (R_l m K) examples, at least 16: main chose 4096, 4096, 512, 512 and 128 (by R_l K alone)."""
    lad = Ladder.rhm(v, v, v, 2, L, seed=0)
    plan = tree_plan(lad, CPU)
    assert plan.production_elements == max(lad.num_regions[l] * v * v for l in range(L))
    assert max(16, 2**18 // plan.production_elements) == chunk
    assert _auto_step(lad, monkeypatch) == chunk


def test_the_production_floor_never_raises_a_smaller_dense_chunk() -> None:
    """On a device whose budget leaves fewer than 16 examples to the levels without productions, those decide."""
    lad = Ladder.rhm(64, 64, 64, 2, 5, seed=0)
    plan = tree_plan(lad, CPU)
    dense = posterior_module._CHUNK_ELEMENTS_CPU // plan.per_example
    assert dense == 128 and posterior_module._tree_chunk(plan, CPU) == 16
    with pytest.MonkeyPatch.context() as m:
        m.setattr(posterior_module, "_CHUNK_ELEMENTS_CPU", 4 * plan.per_example)  # 4 examples for the dense levels
        assert posterior_module._tree_chunk(plan, CPU) == 4
