"""The students the RHM literature compares (issue 38): the CNN that follows the RHM's levels (the ladder student,
shared or not), the shallow fully connected student (smaso.student.shallow), and the synonymic sensitivity
(smaso.student.sensitivity).  RHM data is drawn here by hand from ``ladder.productions`` (the sampler does not
take productions yet), and synonym exchange by brute force: keep every symbol at levels <= l, redraw below."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from smaso.student.compare import compare_student
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.network import LadderStudent
from smaso.student.sensitivity import SynonymicSensitivity, student_layers, synonymic_sensitivity
from smaso.student.shallow import error_rate, flat_ladder, flat_sample, shallow_student
from smaso.student.training import train_ladder_student
from teachers import Ladder
from teachers.sampling import LadderSample


# ---------------------------------------------------------------------- RHM data by hand
def _redraw(ladder: Ladder, z: torch.Tensor, level: int, gen: torch.Generator) -> torch.Tensor:
    """``z`` ``(N, total_regions)`` with every level below ``level`` redrawn top-down from the productions."""
    z = z.clone()
    off = [0, *itertools.accumulate(ladder.num_regions)]
    for l in range(level, ladder.depth):
        prod, R = ladder.productions[l], ladder.num_regions[l]
        rules, probs = prod.region_rules(R), prod.region_probs(R)  # (R, m, K, b), (R, m, K)
        par = z[:, off[l]:off[l + 1]]  # (N, R)
        region = torch.arange(R).expand_as(par)
        k = torch.multinomial(probs[region, par].reshape(-1, probs.shape[-1]), 1, generator=gen).reshape(par.shape)
        z[:, off[l + 1]:off[l + 2]] = rules[region, par, k].reshape(z.shape[0], -1)
    return z


def draw_rhm(ladder: Ladder, n: int, seed: int) -> torch.Tensor:
    """``n`` RHM derivations ``(n, total_regions)`` int64: a class from the prior, then a production per node."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.zeros(n, ladder.total_regions, dtype=torch.int64)
    z[:, 0] = torch.multinomial(ladder.prior.double(), n, replacement=True, generator=gen)
    return _redraw(ladder, z, 0, gen)


def exchange(ladder: Ladder, z: torch.Tensor, level: int, seed: int) -> torch.Tensor:
    """Synonym exchange at ``level``: the symbols at levels <= level kept, everything below redrawn."""
    return _redraw(ladder, z, level, torch.Generator().manual_seed(seed))


def leaves_one_hot(ladder: Ladder, z: torch.Tensor) -> torch.Tensor:
    R = ladder.num_regions[-1]
    return F.one_hot(z[:, -R:], ladder.emission.dim).double()


def as_sample(ladder: Ladder, z: torch.Tensor) -> LadderSample:
    return LadderSample(ladder, z.to(ladder.event_dtype()))


def enumerate_rhm(ladder: Ladder) -> tuple[torch.Tensor, torch.Tensor]:
    """Every derivation ``(P, total_regions)`` with its probability ``(P,)``, by brute force over productions."""
    rows = [([c], float(ladder.prior[c])) for c in range(ladder.num_classes)]
    for l in range(ladder.depth):
        prod, R = ladder.productions[l], ladder.num_regions[l]
        rules, probs = prod.region_rules(R), prod.region_probs(R)
        new = []
        for z, p in rows:
            par = z[-R:]
            for ks in itertools.product(range(rules.shape[2]), repeat=R):
                q = math.prod(float(probs[r, par[r], k]) for r, k in enumerate(ks))
                if q > 0:
                    new.append((z + [int(c) for r, k in enumerate(ks) for c in rules[r, par[r], k]], p * q))
        rows = new
    return torch.tensor([z for z, _ in rows]), torch.tensor([p for _, p in rows], dtype=torch.float64)


# ---------------------------------------------------------------------- the CNN of the RHM's levels
def _conv_reference(student: LadderStudent, x: torch.Tensor) -> list[torch.Tensor]:
    """The authors' CNN (filter s, stride s, ReLU, per-position biases; then a linear readout) with torch's conv1d
    on the student's weights: the hidden representations top (the readout group) first, and the outputs."""
    s = student.ladder.branching[-1]
    h = x.permute(0, 2, 1)  # (N, channels, positions)
    hidden = []
    for l in range(student.ladder.depth - 1, 0, -1):  # the conv levels (level 0 the readout's linear map)
        w = student.weights[l]  # (s, n_in, n_out): one block per place
        h = F.conv1d(h, w.permute(2, 1, 0), stride=s)
        if student.biases is not None:
            h = h + student.biases[l].T[None]
        h = h.relu()
        hidden.append(h)
    top = h[:, :, 0] @ student.weights[0][0] + (0 if student.biases is None else student.biases[0][0])
    return [top, *hidden[::-1]]


@pytest.fixture(scope="module")
def rhm() -> Ladder:
    return Ladder.rhm(4, 2, 2, 2, 3, seed=1)


def test_shared_ladder_student_on_rhm_is_the_cnn_filter_s_stride_s(rhm: Ladder) -> None:
    st = LadderStudent(rhm, 5, readout=6, shared=True, dtype=torch.float64, seed=3)
    with torch.no_grad():  # untied per-position biases, as the authors' NonOverlappingConv1d has
        for b in st.biases:
            b.normal_(generator=torch.Generator().manual_seed(4))
    # one layer per RHM level plus the readout; one block (n_in, n_out) per child place: filter size s
    assert st.widths == [2, 6, 5, 5, 4]
    assert [tuple(w.shape) for w in st.weights] == [(1, 6, 2), (2, 5, 6), (2, 5, 5), (2, 4, 5)]
    x = leaves_one_hot(rhm, draw_rhm(rhm, 64, 0))
    ref = _conv_reference(st, x)
    layers = student_layers(st, x)
    assert torch.allclose(st(x), ref[0], atol=1e-12, rtol=0)
    for l in range(1, rhm.depth + 1):  # the student's level l: readout group (1), then the conv levels
        assert torch.allclose(layers[l], ref[l].permute(0, 2, 1).reshape(64, -1), atol=1e-12, rtol=0)
    assert torch.equal(layers[-1], x.reshape(64, -1))


def test_shared_update_is_the_conv_gradient(rhm: Ladder) -> None:
    st = LadderStudent(rhm, 4, readout=5, shared=True, dtype=torch.float64, seed=0)
    z = draw_rhm(rhm, 40, 1)
    x, y = leaves_one_hot(rhm, z), z[:, 0]
    rec = st.forward_backward(x, y)
    loss = 0.5 * (_conv_reference(st, x)[0] - F.one_hot(y, 2).double()).pow(2).sum(-1).mean()
    grads = torch.autograd.grad(loss, list(st.weights))
    for l, g in enumerate(grads):  # Eq 2 summed over the edges of each place = -dLoss/dW of the shared filter
        assert torch.allclose(st.shared_update(rec.dW[l], l), -g, atol=1e-12, rtol=0)


def test_unshared_student_is_the_locally_connected_net_and_equals_the_cnn_with_tied_blocks(rhm: Ladder) -> None:
    cnn = LadderStudent(rhm, 5, readout=6, shared=True, dtype=torch.float64, seed=2)
    lcn = LadderStudent(rhm, 5, readout=6, shared=False, dtype=torch.float64, seed=2)
    assert [tuple(w.shape) for w in lcn.weights] == [(1, 6, 2), (2, 5, 6), (4, 5, 5), (8, 4, 5)]
    with torch.no_grad():
        for l, w in enumerate(lcn.weights):  # every edge's block = its place's shared block
            w.copy_(cnn.weights[l][torch.arange(w.shape[0]) % cnn.weights[l].shape[0]])
    x = leaves_one_hot(rhm, draw_rhm(rhm, 32, 5))
    assert torch.allclose(lcn(x), cnn(x), atol=1e-12, rtol=0)
    with torch.no_grad():  # untie one block: the outputs move (the blocks are free per position)
        lcn.weights[3][5].add_(1.0)
    assert not torch.allclose(lcn(x), cnn(x), atol=1e-6)


def test_compare_student_builds_the_cnn_on_rhm_rows(rhm: Ladder) -> None:
    sample = as_sample(rhm, draw_rhm(rhm, 600, 2))
    res = compare_student(sample, StudentConfig(width=6, readout=8, shared=True), TrainingConfig(steps=5, lr=0.1),
                          EvaluationConfig(eval_every=5, eval_examples=200, noise_groups=None, alignment=False))
    st = res.student
    assert st.shared and st.readout == 8 and [tuple(w.shape) for w in st.weights] == [
        (1, 8, 2), (2, 6, 8), (2, 6, 6), (2, 4, 6)]
    assert math.isfinite(res.final()["accuracy"])


# ---------------------------------------------------------------------- the shallow student
def test_flat_ladder_tables_are_the_pairwise_law_of_leaf_and_class_brute_force(rhm: Ladder) -> None:
    z, p = enumerate_rhm(rhm)
    assert len(z) == rhm.rhm_params.num_data  # every derivation, each once
    flat = flat_ladder(rhm)
    assert flat.depth == 1 and flat.num_regions == (1, 8) and torch.equal(flat.prior, rhm.prior)
    R, v = 8, 4
    want = torch.zeros(R, 2, v, dtype=torch.float64)
    for j in range(R):
        want[j].index_put_((z[:, 0], z[:, -R + j]), p, accumulate=True)
    want /= want.sum(-1, keepdim=True)
    assert torch.allclose(flat.tables[0], want, atol=1e-12, rtol=0)


def test_shallow_student_is_one_hidden_layer_on_the_flattened_input(rhm: Ladder) -> None:
    st = shallow_student(rhm, 7, dtype=torch.float64, seed=1)
    assert st.widths == [2, 7, 4] and [tuple(w.shape) for w in st.weights] == [(1, 7, 2), (8, 4, 7)]
    with torch.no_grad():
        for b in st.biases:
            b.normal_(generator=torch.Generator().manual_seed(0))
    z = draw_rhm(rhm, 50, 3)
    x, y = leaves_one_hot(rhm, z), z[:, 0]
    W1, W2 = st.weights[1].reshape(8 * 4, 7), st.weights[0][0]
    ref = (x.reshape(50, -1) @ W1 + st.biases[1][0]).relu() @ W2 + st.biases[0][0]
    assert torch.allclose(st(x), ref, atol=1e-12, rtol=0)
    rec = st.forward_backward(x, y)  # Eq 2's update is -dLoss/dW of the FC network
    loss = 0.5 * (ref - F.one_hot(y, 2).double()).pow(2).sum(-1).mean()
    g1, g2 = torch.autograd.grad(loss, [st.weights[1], st.weights[0]])
    assert torch.allclose(rec.dW[1], -g1, atol=1e-12) and torch.allclose(rec.dW[0], -g2, atol=1e-12)
    assert error_rate(st, x, y, batch_size=7) == pytest.approx((ref.argmax(-1) != y).double().mean().item(), abs=0)
    with torch.no_grad():
        st.weights[0][0, 0, 0] = float("nan")  # scores no longer finite: no error rate, not a count of NaN argmaxes
    assert math.isnan(error_rate(st, x, y, batch_size=7))


def test_flat_sample_runs_the_comparison_and_alignment_with_the_class_as_the_hidden_event(rhm: Ladder) -> None:
    z = draw_rhm(rhm, 600, 4)
    flat = flat_sample(as_sample(rhm, z))
    assert flat.z.shape == (600, 9) and torch.equal(flat.y, z[:, 0]) and torch.equal(flat.inputs(), as_sample(
        rhm, z).inputs())
    res = compare_student(flat, StudentConfig(width=1, readout=8), TrainingConfig(steps=5, lr=0.1),
                          EvaluationConfig(eval_every=5, eval_examples=300, noise_groups=None, P_source="exact"))
    row = res.final()
    # the outputs (level 0) and the hidden group (level 1), whose region is the top: its event is y
    assert [r["level"] for r in row["alignment"]] == [0, 1]
    assert math.isfinite(row["levels"][0]["F_propagated"])


def test_flat_ladder_refuses_a_region_graph_and_bad_arguments() -> None:
    with pytest.raises(ValueError, match="tree"):
        flat_ladder(Ladder.leaky(0.5))
    with pytest.raises(TypeError, match="ladder"):
        flat_ladder("rhm")
    with pytest.raises(ValueError, match="hidden"):
        shallow_student(Ladder.rhm(4, 2, 2, 2, 2), 0)


# ---------------------------------------------------------------------- synonymic sensitivity
def _exact_input_sensitivity(ladder: Ladder, level: int) -> float:
    """S at the one-hot input for exchange at ``level``, from the tables: per leaf j with ancestor a at ``level``,
    E|x_j - x'_j|^2 = 2 (1 - sum_c P(a = c) sum_k P(z_j = k | a = c)^2), and 2 (1 - sum_k P(z_j = k)^2) for an
    independent x''."""
    z, p = enumerate_rhm(ladder)
    off = [0, *itertools.accumulate(ladder.num_regions)]
    R, d = ladder.num_regions[-1], ladder.depth
    num = den = 0.0
    for j in range(R):
        leaf = z[:, -R + j]
        anc = z[:, off[level] + j // (R // ladder.num_regions[level])]
        joint = torch.zeros(ladder.region_events[level][0], ladder.emission.dim, dtype=torch.float64)
        joint.index_put_((anc, leaf), p, accumulate=True)
        pa = joint.sum(1)
        cond = joint[pa > 0] / pa[pa > 0, None]
        num += 2 * (1 - (pa[pa > 0] * cond.pow(2).sum(1)).sum().item())
        den += 2 * (1 - joint.sum(0).pow(2).sum().item())
    assert d >= level
    return num / den


@pytest.mark.parametrize("level", [0, 1, 2])
def test_input_sensitivity_matches_the_exact_value_within_its_standard_error(rhm: Ladder, level: int) -> None:
    n = 8000
    z = draw_rhm(rhm, n, 10 + level)
    x = leaves_one_hot(rhm, z).reshape(n, -1)
    xp = leaves_one_hot(rhm, exchange(rhm, z, level, 20 + level)).reshape(n, -1)
    xpp = leaves_one_hot(rhm, draw_rhm(rhm, n, 30 + level)).reshape(n, -1)
    half = n // 3  # two updates, merged: the standard error's sums merge too
    res = SynonymicSensitivity(1).update([x[:half]], [xp[:half]], [xpp[:half]]).merge_(
        SynonymicSensitivity(1).update([x[half:]], [xp[half:]], [xpp[half:]])).compute()
    got, se = res.values[0], res.stderr[0]
    a, b = (x - xp).pow(2).sum(1), (x - xpp).pow(2).sum(1)  # per-row terms: the ratio's delta-method error
    ratio = a.mean() / b.mean()
    assert got == pytest.approx(ratio.item(), abs=1e-12)
    assert se == pytest.approx(((a - ratio * b).std() / b.mean() / math.sqrt(n)).item(), rel=1e-9)
    assert res.stderr_reason is None
    assert abs(got - _exact_input_sensitivity(rhm, level)) < 4 * se
    assert 0 < got < 1


def test_sensitivity_merges_to_one_pass_and_in_batch_pairs_are_every_pair() -> None:
    g = torch.Generator().manual_seed(0)
    h = [torch.randn(30, 5, generator=g, dtype=torch.float64), torch.randn(30, 2, 3, generator=g) * 1e3 + 1e6]
    hp = [t + 0.1 * torch.randn(t.shape, generator=g, dtype=t.dtype) for t in h]
    hpp = [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in h]
    one = SynonymicSensitivity(2).update(h, hp, hpp).compute()
    a = SynonymicSensitivity(2).update([t[:11] for t in h], [t[:11] for t in hp], [t[:11] for t in hpp])
    b = SynonymicSensitivity(2).update([t[11:] for t in h], [t[11:] for t in hp], [t[11:] for t in hpp])
    merged = a.merge_(b.state_dict()).compute()
    assert merged.num_rows == 30 and merged.values == pytest.approx(one.values, rel=1e-12)
    # x'' omitted: every ordered pair i != j of the batch (brute force over cdist)
    pairs = SynonymicSensitivity(2).update(h, hp).compute()
    for k, t in enumerate(h):
        flat = t.reshape(30, -1).double()
        d2 = torch.cdist(flat, flat).pow(2).sum() / (30 * 29)
        assert pairs.independent[k] == pytest.approx(d2.item(), rel=1e-9)
    assert pairs.num_pairs == 30 * 29
    assert all(math.isnan(e) for e in pairs.stderr) and "not independent" in pairs.stderr_reason


def test_sensitivity_nan_with_reasons_and_bad_input() -> None:
    acc = SynonymicSensitivity(2)
    res = acc.compute()
    assert all(math.isnan(v) for v in res.values) and "no rows" in res.reasons[0]
    const = torch.ones(6, 3)
    res = acc.update([const, torch.arange(6.0)[:, None]], [const, torch.zeros(6, 1)]).compute()
    assert math.isnan(res.values[0]) and "0/0" in res.reasons[0] and 1 not in res.reasons
    assert math.isnan(SynonymicSensitivity(1).update([torch.ones(1, 2)], [torch.ones(1, 2)]).compute().values[0])
    with pytest.raises(ValueError, match="h_exchanged"):
        SynonymicSensitivity(1).update([const], [const[:3]])
    with pytest.raises(ValueError, match="num_layers"):
        SynonymicSensitivity(0)
    with pytest.raises(ValueError, match="other"):
        SynonymicSensitivity(1).merge_(SynonymicSensitivity(2).state_dict())


def test_student_sensitivity_exchanging_nothing_is_zero_and_layers_are_the_students(rhm: Ladder) -> None:
    st = LadderStudent(rhm, 4, readout=5, shared=True, dtype=torch.float64)
    z = draw_rhm(rhm, 100, 6)
    x = leaves_one_hot(rhm, z)
    same = synonymic_sensitivity(st, x, x.clone(), batch_size=40)
    # (0 up to the round-off of one row's matmul at another place in the batch)
    assert max(same.values) < 1e-25 and same.num_pairs == 40 * 39 * 2 + 20 * 19
    # exchange at level 0 keeps only the class: the output layer of a random net still moves
    xp = leaves_one_hot(rhm, exchange(rhm, z, 0, 1))
    res = synonymic_sensitivity(st, x, xp, leaves_one_hot(rhm, draw_rhm(rhm, 100, 7)))
    assert all(0 < v < 3 for v in res.values) and not res.reasons


# ---------------------------------------------------------------------- learning (slow tier)
def _split(ladder: Ladder, n_train: int, n_test: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Training and test derivations with no test input among the training inputs."""
    z = draw_rhm(ladder, n_train + 2 * n_test, seed)
    R = ladder.num_regions[-1]
    train = z[:n_train]
    seen = {tuple(r) for r in train[:, -R:].tolist()}
    test = torch.stack([r for r in z[n_train:] if tuple(r[-R:].tolist()) not in seen])[:n_test]
    return train, test


@pytest.mark.slow
def test_cnn_learns_a_small_rhm_becomes_insensitive_to_synonyms_and_the_shallow_student_does_not_learn() -> None:
    lad = Ladder.rhm(8, 8, 4, 2, 3, seed=0)  # n_c m^L = 512, P_max = 8 * 4^7 = 131072
    train, test = _split(lad, 3000, 500, 0)
    x, y = leaves_one_hot(lad, train), train[:, 0]
    xt, yt = leaves_one_hot(lad, test), test[:, 0]
    xp = leaves_one_hot(lad, exchange(lad, test, 2, 0))  # synonyms exchanged at the level above the leaves
    cnn = LadderStudent(lad, 64, readout=64, shared=True, seed=0)
    before = synonymic_sensitivity(cnn, xt, xp)
    train_ladder_student(cnn, x, y, steps=2000, lr=0.5, batch_size=128, loss="cross_entropy", seed=0)
    assert error_rate(cnn, xt, yt) < 0.03  # measured 0.006 (3 of 500)
    after = synonymic_sensitivity(cnn, xt, xp)
    # the readout group and the level below stop telling synonyms apart (measured 0.83 -> 0.06, 0.79 -> 0.18); the
    # inputs' own S (level d) is the data's and does not move
    assert after.values[1] < 0.15 < 0.7 < before.values[1] and after.values[2] < 0.3
    assert after.values[-1] == before.values[-1]
    # the shallow student on the same rows: P = 3000 is far below P_max, it does not generalize
    fc = shallow_student(lad, 256, seed=0)
    train_ladder_student(fc, x, y, steps=2000, lr=0.5, batch_size=128, loss="cross_entropy", seed=0)
    assert error_rate(fc, x, y) < 0.01 and error_rate(fc, xt, yt) > 0.5
