"""Joint child draws (teachers.productions) in the one ladder model, and the RHM's rules (teachers.rhm)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch

from teachers import Ladder, LadderSpecError, Productions, RHMParams, rhm_rules

DATA = Path(__file__).parent / "data" / "rhm_pcsl_rules.json"


def test_marginals_are_the_per_child_law_of_the_productions_brute_force() -> None:
    g = torch.Generator().manual_seed(0)
    rules = torch.randint(0, 3, (2, 4, 5, 3), generator=g)  # R=2 regions, m=4 events, K=5, b=3, m_child=3
    probs = torch.rand(2, 4, 5, generator=g, dtype=torch.float64)
    probs /= probs.sum(-1, keepdim=True)
    p = Productions(rules, probs)
    got = p.marginals(2, 3)
    want = torch.zeros(6, 4, 3, dtype=torch.float64)
    for r, a, k, j in itertools.product(range(2), range(4), range(5), range(3)):
        want[r * 3 + j, a, rules[r, a, k, j]] += probs[r, a, k]
    assert torch.allclose(got, want, atol=1e-15, rtol=0)
    assert torch.allclose(got.sum(-1), torch.ones(6, 4, dtype=torch.float64), atol=1e-12)


def test_shared_productions_expand_over_regions_and_default_to_uniform() -> None:
    rules = torch.tensor([[[0, 1], [1, 0]], [[0, 0], [1, 1]]])
    p = Productions(rules)
    assert p.shared and p.num_events == 2 and p.num_productions == 2 and p.arity == 2
    assert torch.equal(p.probs, torch.full((2, 2), 0.5, dtype=torch.float64))
    marg = p.marginals(3, 2)
    assert marg.shape == (6, 2, 2)
    assert torch.allclose(marg, torch.full((6, 2, 2), 0.5, dtype=torch.float64))


def test_ladder_takes_productions_and_derives_its_tables() -> None:
    rules = torch.tensor([[[0, 1], [1, 2]], [[2, 2], [0, 0]]])  # 2 classes, 2 productions of 2 children of 3 events
    probs = torch.tensor([[0.25, 0.75], [0.5, 0.5]], dtype=torch.float64)
    lad = Ladder((2,), (2, 3), prior=[0.5, 0.5], tables=[None], productions=[(rules, probs)])
    assert lad.joint_levels() == (0,)
    tab = lad.tables[0]
    assert tab is not None
    assert torch.allclose(tab[0], torch.tensor([[0.25, 0.75, 0.0], [0.5, 0.0, 0.5]], dtype=torch.float64))
    assert torch.allclose(tab[1], torch.tensor([[0.0, 0.25, 0.75], [0.5, 0.0, 0.5]], dtype=torch.float64))
    assert "drawn jointly" in lad.describe() and "productions at levels [0]" in repr(lad)
    # the productions are part of the teacher's identity
    other = Ladder((2,), (2, 3), prior=[0.5, 0.5], tables=[None], productions=[(rules.flip(-1), probs)])
    assert lad.fingerprint() != other.fingerprint()


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(tables=[torch.full((2, 3), 1 / 3)]), "give None where productions"),
    (dict(tables=[None], productions=[torch.tensor([[[0, 5]], [[1, 1]]])]), "outside [0, 3)"),
    (dict(tables=[None], productions=[torch.tensor([[[0, 1, 2]], [[1, 1, 1]]])]), "expected shape (2, 1, 2)"),
    (dict(tables=[None], productions=[(torch.tensor([[[0, 1]], [[1, 1]]]), [[0.5], [1.0]])]), "sums to 0.5"),
    (dict(tables=[None], productions=[torch.tensor([[[0, -1]], [[1, 1]]])]), ">= 0"),
    (dict(tables=[None], productions="rules"), "expected a list of 1"),
    (dict(tables=[None]), "missing (give a table, or productions[0])"),
])
def test_bad_productions_name_the_field(kwargs: dict, message: str) -> None:
    kwargs.setdefault("productions", [torch.tensor([[[0, 1]], [[1, 1]]])] if "productions" not in kwargs
                      and kwargs.get("tables") != [None] else kwargs.get("productions"))
    with pytest.raises(LadderSpecError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        Ladder((2,), (2, 3), prior=[0.5, 0.5], **kwargs)


def test_productions_only_topdown_on_a_uniform_tree() -> None:
    with pytest.raises(LadderSpecError, match="only on a uniform tree"):
        Ladder(parents=[[[]], [[0], [0]], [[0], [0, 1]]], events=[2, 2, 2], prior=[0.5, 0.5],
               tables=[None, [torch.full((2, 2), 0.5), torch.full((4, 2), 0.5)]],
               productions=[torch.tensor([[[0, 1]], [[1, 0]]]), None])


# ---------------------------------------------------------------- the RHM's rules

def test_rhm_counts_in_the_papers_notation() -> None:
    p = RHMParams(v=8, n_classes=4, m=2, s=2, L=3)
    assert p.num_positions == 8 and p.num_data == 4 * 2 ** 7 and p.p_star_scale == 4 * 2 ** 3
    assert RHMParams(64, 64, 64, 2, 5).num_data == 64 * 64 ** 31  # a Python int, past int64


@pytest.mark.parametrize("rules", ["smaso", "pcsl"])
@pytest.mark.parametrize(("v", "nc", "m", "s", "L"),
                         [(8, 2, 2, 2, 3), (4, 4, 4, 2, 3), (3, 3, 2, 3, 2), (10, 5, 3, 2, 2)])
def test_rhm_rules_are_unambiguous_and_deal_m_distinct_tuples_per_symbol(v: int, nc: int, m: int, s: int, L: int,
                                                                          rules: str) -> None:
    lad = Ladder.rhm(v, nc, m, s, L, seed=3, rules=rules)
    assert lad.rhm_params == RHMParams(v, nc, m, s, L, 3, rules)
    reach = torch.zeros(v if L > 0 else nc, dtype=torch.bool)
    reach = torch.ones(nc, dtype=torch.bool)
    for l, prod in enumerate(lad.productions or ()):
        assert prod is not None and prod.rules.shape == (nc if l == 0 else v, m, s)
        assert prod.ambiguous(v, reach) == []  # no tuple of a symbol that occurs is dealt twice
        codes = prod.codes(v)[reach]
        assert len(torch.unique(codes)) == codes.numel()  # distinct within a symbol too
        nxt = torch.zeros(v, dtype=torch.bool)
        nxt[prod.rules[reach].reshape(-1)] = True
        reach = nxt


def test_rhm_rules_match_the_authors_code_from_the_same_seed() -> None:
    """tests/data/rhm_pcsl_rules.json holds rules drawn by pcsl-epfl/hierarchy-learning's
    sample_hierarchical_rules (commit 5f27e8e), symbols in that code's dealing order."""
    data = json.loads(DATA.read_text())
    for case in data["configs"]:
        c = case["params"]
        params = RHMParams(c["v"], c["nc"], c["m"], c["s"], c["L"], c["seed"], "pcsl")
        got = rhm_rules(params)
        for l, level in enumerate(case["rules"]):
            for symbol, tuples in level.items():
                assert got[l][int(symbol)].tolist() == tuples, (c, l, symbol)
        assert params.num_data == case["P_max"]
        smaso = rhm_rules(RHMParams(c["v"], c["nc"], c["m"], c["s"], c["L"], c["seed"], "smaso"))
        assert any(not torch.equal(a, b) for a, b in zip(got, smaso, strict=True))  # a different generator


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(v=4, n_classes=4, m=5, s=2, L=2), "m \\* n_c = 20"),
    (dict(v=4, n_classes=1, m=2, s=2, L=2), "n_classes: expected an integer >= 2"),
    (dict(v=4, n_classes=2, m=2, s=1, L=2), "s: expected an integer >= 2"),
    (dict(v=4, n_classes=6, m=1, s=2, L=2), "at most v = 4"),
    (dict(v=4, n_classes=2, m=2, s=2, L=2, rules="authors"), "rules: expected one of"),
    (dict(v=4, n_classes=2, m=2.0, s=2, L=2), "m: expected an integer"),
])
def test_rhm_bad_parameters_name_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(LadderSpecError, match=message):
        Ladder.rhm(**kwargs)


def test_rhm_memory_is_in_the_productions_size() -> None:
    lad = Ladder.rhm(64, 64, 64, 2, 5)
    prods = [p for p in lad.productions or () if p is not None]
    assert sum(p.rules.numel() for p in prods) == 5 * 64 * 64 * 2
    assert all(p.shared for p in prods)


def test_a_pairwise_view_is_never_sampled_or_modelled() -> None:
    """The shallow student's flat view keeps P(z_leaf | y) per leaf, not the teacher's joint law of the leaves."""
    from inference.posterior import posterior
    from smaso.student.shallow import flat_ladder
    from teachers import LadderModel, sample_ladder

    teacher = Ladder.rhm(4, 2, 2, 2, 2)
    flat = flat_ladder(teacher)
    assert flat.pairwise_view_of == teacher.name
    x = sample_ladder(teacher, 4).inputs(dtype=torch.float64)
    for call in (lambda: sample_ladder(flat, 4), lambda: LadderModel(flat), lambda: posterior(flat, x)):
        with pytest.raises(ValueError, match="pairwise view"):
            call()
    sample_ladder(teacher, 4)  # the teacher itself samples
    loaded = Ladder.from_dict(flat.to_dict())  # and a saved view is still a view
    assert loaded.pairwise_view_of == teacher.name and loaded.fingerprint() == flat.fingerprint()
    with pytest.raises(ValueError, match="pairwise view"):
        sample_ladder(loaded, 4)
    spec = {**flat.to_dict(), "pairwise_view_of": 3}
    with pytest.raises(LadderSpecError, match="pairwise_view_of"):
        Ladder.from_dict(spec)
