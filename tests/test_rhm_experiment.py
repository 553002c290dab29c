"""The RHM experiment's pieces (examples/rhm_sample_complexity.py): the sweep's per-run measures hook, the built-in
RHM measures (synonymic sensitivity against a brute-force expectation from the rules), and the independent-children
twin of an RHM (same marginals, children drawn on their own: checked by sampling at 1/sqrt(N) tolerances against
exact probabilities computed from the rules)."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle

import pytest
import torch

from smaso.student.batched import classification_error
from smaso.student.config import TrainingConfig
from smaso.student.rhm_measures import RHMMeasures
from smaso.sweep import STUDENT_KINDS, IndependentDraws, SweepResult, SweepRun, sample_complexity_sweep
from teachers.derivations import train_test_split
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

TRAINING = TrainingConfig(steps=6, lr=1e-2, batch_size=16, loss="cross_entropy", optimizer="adam")


@pytest.fixture(scope="module")
def rhm() -> Ladder:
    return Ladder.rhm(4, 4, 4, 2, 2, seed=1)  # P_max = 4 * 4^3 = 256


@dataclasses.dataclass(frozen=True)
class _ErrorAgain:
    """A measure that recomputes the run's test error from the student it is given, and reports a NaN with its
    reason (what a real measure does for 0/0)."""

    def __call__(self, student, train, test, ladder):
        x, y = test.inputs(dtype=torch.float64), torch.as_tensor(test.y).long()
        return {"error_again": classification_error(student, x, y), "rows": len(train.y), "undefined": math.nan,
                "undefined_reason": "0/0 on purpose"}


def test_the_measures_hook_sees_each_trained_student_and_round_trips(rhm: Ladder) -> None:
    res = sample_complexity_sweep(rhm, [20, 40], [0, 3], student_options={"width": 4, "readout": 4},
                                  training=TRAINING, num_test=32, measure=_ErrorAgain())
    assert len(res.runs) == 4
    for r in res.runs:  # the measure got the trained student and the run's own rows
        assert r.measures["error_again"] == r.test_error and r.measures["rows"] == r.P
        assert math.isnan(r.measures["undefined"]) and r.measures["undefined_reason"] == "0/0 on purpose"
    assert res.meta["measure"] == {"name": "_ErrorAgain"}
    back = SweepResult.from_dict(json.loads(json.dumps(res.to_dict(), allow_nan=False)))
    for a, b in zip(res.runs, back.runs, strict=True):
        assert a.measures.keys() == b.measures.keys() and math.isnan(b.measures["undefined"])
        assert {k: v for k, v in a.measures.items() if k != "undefined"} == \
            {k: v for k, v in b.measures.items() if k != "undefined"}
    rows = back.measure_values("rows")
    assert rows.shape == (2, 2) and rows.tolist() == [[20, 40], [20, 40]]
    with pytest.raises(ValueError, match="no run has the measure 'nope'"):
        back.measure_values("nope")
    assert SweepRun.from_dict({k: v for k, v in dataclasses.asdict(res.runs[0]).items() if k != "measures"}
                              ).measures == {}  # records written before the hook read back


def test_the_measures_hook_refuses_what_is_not_a_measure(rhm: Ladder) -> None:
    kw = {"student_options": {"width": 2, "readout": 2}, "training": dataclasses.replace(TRAINING, steps=1),
          "num_test": 8}
    with pytest.raises(TypeError, match="measure: expected a callable"):
        sample_complexity_sweep(rhm, [10], 1, measure=3, **kw)
    with pytest.raises(TypeError, match="measure: expected a mapping"):
        sample_complexity_sweep(rhm, [10], 1, measure=lambda *a: [1.0], **kw)
    with pytest.raises(TypeError, match=r"float \(or str reason\) values"):
        sample_complexity_sweep(rhm, [10], 1, measure=lambda *a: {"a": torch.ones(2)}, **kw)


def _exchange_moments(ladder: Ladder, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the mean and variance of ||onehot(x) - onehot(x')||^2 when every s-patch is redrawn uniformly among
    its symbol's m productions (the exchange at level L - 1 = 1 of a depth-2 RHM), from the rules by enumeration:
    patch j of the row is t = its two leaves, its symbol a = level-1 region j, and 2 Hamming(t, rules[a, k']) is
    that patch's distance for each of the m equally likely redraws k' (patches independent given the symbols)."""
    rules = ladder.productions[1].rules  # (v, m, 2)
    mean = torch.zeros(z.shape[0], dtype=torch.float64)
    var = torch.zeros(z.shape[0], dtype=torch.float64)
    for j in range(2):
        t = z[:, 3 + 2 * j: 5 + 2 * j].long()  # (N, 2) the patch's leaves
        dist = 2.0 * (rules[z[:, 1 + j].long()] != t[:, None, :]).double().sum(-1)  # (N, m)
        mean += dist.mean(1)
        var += dist.var(1, unbiased=False)
    return mean, var


@pytest.mark.parametrize("kind,options", [("ladder", {"width": 6, "readout": 6, "shared": True}),
                                          ("shallow", {"hidden": 12})])
def test_rhm_measures_sensitivity_matches_the_rules_and_details_come_where_asked(rhm, kind, options) -> None:
    """S at the input layer under the exchange of the lowest synonyms: its numerator's mean and variance given the
    rows from the rules (brute force), the denominator exact from the rolled rows; the sampled value within 4 sigma
    (sigma ~ 1/sqrt(N)); an exchange at level 0 instead is caught.  Alignment and Thm 2's conditions only at the
    detail sizes, per student level, each a number or NaN with its reason."""
    train, test = train_test_split(rhm, 30, 200, seed=2)
    student = STUDENT_KINDS[kind].make(rhm, 0, torch.float64, options)
    got = RHMMeasures(detail_sizes=(30,))(student, train, test, rhm)
    cheap = RHMMeasures(detail_sizes=(31,))(student, train, test, rhm)
    d = len(student.widths) - 1
    # brute force: the numerator's exact mean and variance given the rows, the denominator exact (rolled rows)
    mean, var = _exchange_moments(rhm, test.z)
    x = test.inputs(dtype=torch.float64).reshape(len(test.y), -1)
    den = float((x - x.roll(1, 0)).pow(2).sum(1).mean())
    sigma = math.sqrt(float(var.sum())) / len(test.y) / den
    assert abs(got["sensitivity_input"] - float(mean.mean()) / den) < 4 * sigma
    assert got["exchange_level"] == 1.0
    assert {f"sensitivity_l{k}" for k in range(d)} <= got.keys()
    assert all(0 <= got[f"sensitivity_l{k}"] < 2 and got[f"sensitivity_l{k}_se"] > 0 for k in range(d))
    assert not any(k.startswith(("eta2", "focus", "spec")) for k in cheap)
    for k in range(d):
        for key in ("eta2", "spec", "probe", "decorrelation_fwd", "decorrelation_dW"):
            v = got[f"{key}_l{k}"]
            assert 0 <= v or f"{key}_l{k}_reason" in got or (key, k) == ("eta2", 0) or math.isnan(v)
    assert got["eta2_l1"] > 0 and got["probe_l1"] >= 0
    assert all(f"focus_l{k}" in got and f"broadness_l{k}" in got for k in range(1, d + 1))
    wrong = RHMMeasures(exchange_level=0, detail_sizes=())(student, train, test, rhm)["sensitivity_input"]
    assert abs(wrong - float(mean.mean()) / den) > 5 * sigma  # (the test tells the levels apart: 6.0 sigma)
    measure = RHMMeasures(detail_sizes=(30,))
    assert pickle.loads(pickle.dumps(measure)) == measure  # (sent to process and Dask workers)
    with pytest.raises(ValueError, match="exchange_level: at most depth - 1"):
        RHMMeasures(exchange_level=2)(student, train, test, rhm)
    with pytest.raises(ValueError, match="detail_sizes"):
        RHMMeasures(detail_sizes=(0,))


def test_independent_children_keeps_the_marginals_and_drops_the_productions(rhm: Ladder) -> None:
    twin = rhm.independent_children()
    assert twin.productions is None and twin.branching == rhm.branching and twin.events == rhm.events
    assert all(torch.equal(a, b) for a, b in zip(twin.tables, rhm.tables, strict=True))
    assert torch.equal(twin.prior, rhm.prior) and getattr(twin, "rhm_params", None) is None
    # P(the patch under a level-1 symbol a is one of a's productions) = sum_{(b1, b2) in prods(a)} T1[a,b1] T2[a,b2]
    rules = rhm.productions[1].rules  # (v, m, 2), shared by the level's regions
    t1, t2 = rhm.tables[1][0], rhm.tables[1][1]  # (v, v) marginals of the first and second child
    p_rhm_tuple = (t1.gather(1, rules[:, :, 0]) * t2.gather(1, rules[:, :, 1])).sum(1)  # (v,)
    N = 20000
    s = sample_ladder(twin, N, seed=4, progress=False)
    z = s.z.long()
    parent, kids = z[:, 1], z[:, 3:5]  # level-1 region 0 and its two leaves
    is_prod = (rules[parent] == kids[:, None, :]).all(-1).any(-1).double()
    expected = p_rhm_tuple[parent]
    assert abs(float(is_prod.mean() - expected.mean())) < 4 * math.sqrt(float((expected * (1 - expected)).mean()) / N)
    assert float(expected.mean()) < 0.9  # the twin writes tuples the RHM never does
    # the children's marginals are the RHM's: chi-square-sized deviation at 1/sqrt(N)
    for a in range(rhm.events[1]):
        rows = kids[parent == a, 0]
        freq = torch.bincount(rows, minlength=rhm.events[2]).double() / max(len(rows), 1)
        assert float((freq - t1[a]).abs().max()) < 4 * math.sqrt(0.25 / max(len(rows), 1))
    # and the RHM itself only writes productions
    zr = sample_ladder(rhm, 2000, seed=4, progress=False).z.long()
    assert bool((rules[zr[:, 1]] == zr[:, 3:5][:, None, :]).all(-1).any(-1).all())


def test_independent_children_refuses_a_ladder_without_productions_and_samples_by_independent_draws(rhm) -> None:
    with pytest.raises(ValueError, match="already draws every child on its own"):
        Ladder.random(2, 2, 3, seed=0).independent_children()
    twin = rhm.independent_children()
    train, test = IndependentDraws(twin, 16)(10, 0)
    assert train.z.shape == (10, twin.total_regions) and test.z.shape == (16, twin.total_regions)
    # the class is no longer a function of the input: some input has two classes in a modest sample
    s = sample_ladder(twin, 4000, seed=1, progress=False)
    keys = [tuple(r) for r in s.z[:, 3:].tolist()]
    classes: dict[tuple, set] = {}
    for k, y in zip(keys, s.y.tolist(), strict=True):
        classes.setdefault(k, set()).add(y)
    assert any(len(c) > 1 for c in classes.values())
