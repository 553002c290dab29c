"""The readout (smaso.student.readout): the readout ladder is the teacher with one more level whose event is the
label; a student with a readout has an explicit backward equal to autograd (float64, every BN placement, a tree
and a DAG, both losses); Thm 3 stays exact with it; the constructed network reaches the teacher's Bayes
accuracy exactly on one-hot leaves (and, without a readout, exactly the additive ceiling), over every input."""

from __future__ import annotations

import itertools

import pytest
import torch

from smaso.student.ceiling import architecture_ceiling, constructed_student
from smaso.student.compare import compare_student
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.frequency import collect_statistics
from smaso.student.network import LadderStudent
from smaso.student.readout import readout_events, readout_ladder
from smaso.student.reformulation import reformulate
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder
from teachers.statistics import exact_statistics

F64 = torch.float64


def test_readout_ladder_is_the_teacher_with_the_label_on_top():
    for g in (Ladder.default(), Ladder.random(depth=2, branching=3, events=3, seed=1),
              Ladder.conv1d(6, [3, 4], [1, 1], [2, 3, 2], seed=1, mode="bottomup")):
        a = readout_ladder(g)
        assert a.depth == g.depth + 1 and a.num_regions == (1, *g.num_regions)
        assert a.is_uniform() == g.is_uniform() and a.is_tree() == g.is_tree()
        if g.mode == "bottomup":  # the same leaves and lookups: the same rows, with the label in front
            s, t = sample_ladder(g, 3000, 5), sample_ladder(a, 3000, 5)
            assert torch.equal(readout_events(s.z.long()), t.z.long()) and torch.equal(s.inputs(), t.inputs())
        P, Q = exact_statistics(g), exact_statistics(a)
        for l in range(g.depth + 1):
            assert torch.allclose(Q.marginals[l + 1], P.marginals[l], atol=1e-14, rtol=0)
        assert torch.allclose(Q.marginals[0], P.marginals[0], atol=1e-14, rtol=0)
    with pytest.raises(TypeError, match="ladder"):
        readout_ladder("default")
    with pytest.raises(ValueError, match="z"):
        readout_events(torch.zeros(3))


@pytest.mark.parametrize("ladder", [Ladder.default(), Ladder.conv1d(6, [3, 4], [1, 1], [2, 3, 2], seed=1)],
                         ids=["tree", "dag"])
@pytest.mark.parametrize("bn", [False, "after", "before"])
@pytest.mark.parametrize("loss", ["squared", "cross_entropy"])
def test_explicit_backward_equals_autograd(ladder, bn, loss):
    s = sample_ladder(ladder, 300, 0)
    x, y = s.inputs(dtype=F64), s.y.long()
    st = LadderStudent(ladder, 5, readout=7, batch_norm=bn, seed=1, dtype=F64)
    assert st.widths[1] == 7 and st.ladder.depth == ladder.depth + 1 and st.teacher is ladder
    rec = st.forward_backward(x, y, loss)
    params = [*st.weights, *st.biases]
    grads = torch.autograd.grad(st.loss(st(x), y, loss), params)
    for l, (gw, gb) in enumerate(zip(grads[:len(st.weights)], grads[len(st.weights):], strict=True)):
        scale = max(1.0, float(gw.abs().max()))
        assert torch.allclose(-gw, st.shared_update(rec.dW[l], l), atol=1e-10 * scale, rtol=0)
        assert torch.allclose(-gb, rec.db[l], atol=1e-10 * scale, rtol=0)
    assert rec.u[1].shape == (300, 1, 7)


def test_thm3_stays_exact_with_a_readout():
    g = Ladder.fully_informative(depth=2, branching=2, leaf_events=2)
    s = sample_ladder(g, 2000, 0)
    st = LadderStudent(g, 6, readout=5, seed=2, dtype=F64)
    stats = collect_statistics(st, s.inputs(dtype=F64), s.y, s.z, dtype=F64)
    pred = reformulate(st, stats.P, stats)
    for l in range(st.ladder.depth):
        for key, measured in (("F", stats.F), ("G_tilde", stats.G_tilde)):
            if measured[l] is not None and getattr(pred, key)[l] is not None:
                err = (getattr(pred, key)[l] - measured[l]).norm() / measured[l].norm().clamp(min=1e-300)
                assert err < 1e-10, (l, key, float(err))
        if l < st.ladder.depth:
            err = (pred.dW[l] - stats.dW[l]).norm() / stats.dW[l].norm()
            assert err < 1e-10, (l, "dW", float(err))


def _exact_accuracy(student: LadderStudent, g: Ladder) -> float:
    """Accuracy over every leaf configuration, weighted by its probability (bottom-up: y is a function of x)."""
    R, m = g.num_regions[-1], g.events[-1]
    leaves = torch.tensor(list(itertools.product(range(m), repeat=R)))  # (m^R, R)
    prob = torch.stack([g.leaf_prior[i][leaves[:, i]] for i in range(R)]).prod(0)
    z = leaves
    for l in range(g.depth - 1, -1, -1):
        b = g.branching[l]
        code = sum(z[:, j::b] * m ** (b - 1 - j) for j in range(b))  # first child most significant
        z = torch.stack([g.lookup[l][r][code[:, r]] for r in range(g.num_regions[l])], 1)
    x = torch.nn.functional.one_hot(leaves, m).to(F64)
    right = student(x).argmax(-1) == z[:, 0]
    return float((prob * right).sum())


def test_constructed_network_reaches_bayes_exactly():
    g = Ladder.default()
    with_readout = constructed_student(g, readout=True)
    assert with_readout.readout == 16 and _exact_accuracy(with_readout, g) == pytest.approx(1.0, abs=1e-12)
    without = constructed_student(g, readout=False)
    ceiling = architecture_ceiling(g)
    assert ceiling.additive.certified
    assert _exact_accuracy(without, g) == pytest.approx(ceiling.additive.value, abs=1e-12)
    assert ceiling.additive.value == pytest.approx(0.873, abs=1e-3)
    with pytest.raises(ValueError, match="bottom-up uniform tree"):
        constructed_student(Ladder.random(depth=2, seed=0))


def test_compare_student_with_a_readout():
    g = Ladder.default()
    s = sample_ladder(g, 800, 0)
    r = compare_student(s, student=StudentConfig(width=4, readout=6), training=TrainingConfig(steps=4),
                        evaluation=EvaluationConfig(held_out=False, eval_every=2, noise_groups=None))
    assert len(r.history) == 3 and len(r.final()["levels"]) == g.depth + 1
    assert r.student.ladder.depth == g.depth + 1
    with pytest.raises(ValueError, match="readout"):
        LadderStudent(g, 4, readout=0)
