"""Issue 39: the block-seeded sampler runs end to end on ``device="meta"`` (no values: a host sync or a tensor made
on another device fails here, as it would stall or fail on a GPU), and the range check it skips is only its own."""

from __future__ import annotations

import pytest
import torch

from teachers import Ladder, sample_ladder
from teachers.emission import GaussianEmission, sampler_events

LADDERS = {
    "topdown": lambda: Ladder.random(depth=2, branching=2, events=3, seed=0),
    "bottomup": Ladder.default,
    "rhm": lambda: Ladder.rhm(4, 2, 2, 2, 2),
    "dag": lambda: Ladder.conv1d(6, [2, 5], [1, 1], [3, 3, 2], seed=0),
    "gaussian": lambda: Ladder.random(depth=2, branching=2, events=3, seed=1, emission="gaussian", sigma=0.5),
}


@pytest.mark.parametrize("name", sorted(LADDERS))
def test_sampler_on_meta(name: str) -> None:
    lad = LADDERS[name]()
    s = sample_ladder(lad, 300, seed=0, device="meta", chunk_size=128)  # several calls of the sampler
    assert s.z.device.type == "meta" and s.z.shape == (300, lad.total_regions)
    if s.x is not None:
        assert s.x.device.type == "meta" and s.x.shape == (300, lad.num_regions[-1], lad.emission.dim)


def test_the_emission_still_checks_events_given_to_it() -> None:
    """The sampler's own events skip the range check (a host sync per block); events a user passes do not."""
    em = GaussianEmission.around_one_hot(2, 3, sigma=0.5)
    bad = torch.tensor([[0, 3]])
    with pytest.raises(ValueError, match="outside the allowed range"):
        em.sample(bad)
    with sampler_events():
        assert em.sample(torch.tensor([[0, 2]])).shape == (1, 2, 3)
    with pytest.raises(ValueError, match="outside the allowed range"):
        em.sample(bad)  # the context is over
