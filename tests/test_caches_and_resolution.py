"""Caches that neither leak nor go stale, and the categorical sampler's stated resolution (issue 36).

- The tree plans of :mod:`inference.sum_product` are cached per ladder in a weak-key dictionary; a plan that held
  its ladder kept every ladder alive, with its device tables.
- The fingerprint and the tree plans are keyed by the same :meth:`~teachers.ladder.Ladder.state_key`, so an
  in-place edit of a table is seen by both (the fingerprint's cache used to ignore it).
- :class:`teachers.categorical.AliasTable` is exact only to its :attr:`~AliasTable.resolution`: checked on its
  exact distribution, enumerated over every float32 uniform.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

from inference.posterior import posterior
from inference.sum_product import _PLANS, tree_plan
from teachers import Ladder, sample_ladder
from teachers.categorical import AliasTable


def test_a_cached_tree_plan_does_not_keep_its_ladder_alive():
    lad = Ladder.random(depth=2, branching=2, events=3, concentration=0.5, seed=0)
    s = sample_ladder(lad, 8, seed=0)
    posterior(lad, s.inputs(dtype=torch.float64))  # builds and caches the plan
    assert lad in _PLANS and _PLANS[lad][torch.device("cpu")].ladder is lad
    ref = weakref.ref(lad)
    del lad, s
    gc.collect()
    assert ref() is None  # the plan held its ladder: every ladder stayed alive


def test_an_in_place_table_edit_reaches_the_fingerprint_and_the_plan():
    lad = Ladder.random(depth=2, branching=2, events=3, concentration=0.5, seed=1)
    before, plan = lad.fingerprint(), tree_plan(lad, torch.device("cpu"))
    with torch.no_grad():
        lad.tables[0][0, 0] = lad.tables[0][0, 0].flip(0)  # still a probability row
    after = lad.fingerprint()
    assert after != before  # the cached fingerprint used to be served unchanged
    assert after == Ladder.from_dict(lad.to_dict()).fingerprint()  # the fingerprint of what the ladder now is
    new_plan = tree_plan(lad, torch.device("cpu"))
    assert new_plan is not plan and torch.equal(new_plan.T[1][0, 0], lad.tables[0][0, 0])
    assert lad.fingerprint() == after and tree_plan(lad, torch.device("cpu")) is new_plan  # cached while unchanged


def test_an_emission_put_in_place_changes_the_fingerprint():
    lad = Ladder.random(depth=1, branching=2, events=2, concentration=1.0, seed=2, emission="gaussian", sigma=0.5)
    before = lad.fingerprint()
    with torch.no_grad():
        lad.emission.means.mul_(2.0)
    assert lad.fingerprint() != before


def _exact_distribution(table: AliasTable, row: int) -> np.ndarray:
    """The float32 sampler's distribution of ``row``: its draw at every uniform ``i 2^-24`` of torch's grid."""
    n = 2**24
    u = torch.arange(n, dtype=torch.float32) / n
    draws = table.sample_from_uniforms(u, torch.full((n,), row, dtype=torch.long))
    return torch.bincount(draws.long(), minlength=table.num_events).double().numpy() / n


@pytest.mark.parametrize("m", [3, 256, *(pytest.param(m, marks=pytest.mark.slow) for m in (2, 4, 5, 7, 16, 100))])
def test_the_alias_sampler_is_exact_to_its_resolution(m):
    p = np.random.default_rng(m).dirichlet(np.full(m, 0.3), size=2)
    table = AliasTable(torch.as_tensor(p))
    assert table.uniform_dtype == torch.float32 and table.resolution == m * 2.0**-23
    assert np.abs(_exact_distribution(table, 1) - p[1]).max() <= table.resolution


def test_a_probability_below_the_resolution_is_not_drawn_at_its_value():
    # the stated resolution is real: 1e-9 is drawn with probability 2^-24 (about 6e-8), not 1e-9
    p = torch.tensor([[1e-9, 0.5 - 1e-9, 0.25, 0.25]], dtype=torch.float64)
    table = AliasTable(p)
    realized = _exact_distribution(table, 0)
    assert realized[0] == 2.0**-24 and abs(realized[0] - 1e-9) <= table.resolution
    assert AliasTable(torch.full((1, 300), 1 / 300, dtype=torch.float64)).resolution == 300 * 2.0**-52
