"""Issue 39: every exact-inference method runs end to end on ``device="meta"``: torch's meta tensors hold no values,
so a host sync inside the passes (``.item()``, ``bool(t)``, ``nonzero``) or a tensor made on the CPU and met with
the inputs' device (the junction tree's empty cliques did this) fails here, as it would stall or fail on a GPU.
``posterior_event_draws`` is left out: it returns ArviZ data, on the host by design."""

from __future__ import annotations

import pytest
import torch

from inference.posterior import map_events, posterior
from teachers import Ladder, sample_ladder

LADDERS = {
    "topdown": lambda: Ladder.random(depth=2, branching=2, events=3, seed=0),
    "bottomup": Ladder.default,  # three cliques of its junction tree hold no factor
    "rhm": lambda: Ladder.rhm(4, 2, 2, 2, 2),  # productions: the tree pass over them, and their dense factors
    "dag": lambda: Ladder.conv1d(6, [2, 5], [1, 1], [3, 3, 2], seed=0),
    "gaussian": lambda: Ladder.random(depth=2, branching=2, events=3, seed=1, emission="gaussian", sigma=0.5),
}


@pytest.fixture(scope="module", params=sorted(LADDERS))
def case(request: pytest.FixtureRequest) -> tuple[Ladder, torch.Tensor]:
    lad = LADDERS[request.param]()
    return lad, sample_ladder(lad, 8, seed=0).inputs(dtype=torch.float64).to("meta")


@pytest.mark.parametrize("method", ["auto", "junction-tree"])
def test_posterior_on_meta(case: tuple[Ladder, torch.Tensor], method: str) -> None:
    lad, x = case
    post = posterior(lad, x, marginals=True, method=method, chunk_size=3)  # several chunks
    assert post.label.device.type == "meta" and post.label.shape == (8, lad.num_classes)
    assert post.log_evidence.shape == (8,)
    assert [m.shape for m in post.marginals] == [(8, r, m) for r, m in zip(lad.num_regions, lad.events,
                                                                            strict=True)]
    assert all(m.device.type == "meta" for m in post.marginals)


def test_map_events_on_meta(case: tuple[Ladder, torch.Tensor]) -> None:
    lad, x = case
    best = map_events(lad, x)
    assert best.z.device.type == "meta" and best.z.shape == (8, lad.total_regions)

