"""Batch Norm before the gate (``LadderStudent(batch_norm="before")``) and the predicted
cross-entropy top gradient (``reformulate(..., top=...)``, :func:`eq7_signs`): issue 13.

References, all in float64:

- the explicit backward with BN before the gate against a loop-based re-implementation built from
  ``torch.nn.BatchNorm1d`` modules (training mode, affine, the student's eps) and torch autograd
  (per-example gradients, ``retain_grad``), and against autograd of the student's own ``forward``;
- Thm 3: on ``Ladder.fully_informative`` with one-hot leaves every number that
  ``compare_statistics_to_theory`` reports as an error of the reformulation (Eq 9, Eq 12 before or
  after the gate, squared or cross-entropy top) is round-off, for every placement;
- Thm 9's premise 1^T G~_a = 0: supplied by BN before the gate (measured and predicted), not by BN
  after it nor without BN; Thm 9 itself on a factorized binary ladder with the BN-before backward
  of the reformulation (Eq 12 on the pre-activation, applied to the gated gradient);
- §7.5.1: with BN right after the linear map E_x[u_j g_j] = 0 (bn_eps = 0) for any activation, so
  the rows' energy has no first-order change;
- Eq 7: the measured softmax cross-entropy top gradient has g_j(y = j) > 0 > g_j(y != j).
"""

from __future__ import annotations

import pytest
import torch
from conftest_student import (
    assert_close,
    fi_sample,
    one_torch_thread,  # noqa: F401 (fixture)
    perturb_params,
    ref_activation,
    reference_loss,
    rel,
    torch_bn_eps,
)

from smaso.student.compare import compare_statistics_to_theory, compare_student
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.frequency import collect_statistics
from smaso.student.network import LadderStudent
from smaso.student.reformulation import _weighted_bn, _weighted_bn_backward, eq7_signs, reformulate, top_gradient
from smaso.theorems.disentangle import (
    disentangled_F_distance,
    disentangled_G_distance,
    factor_marginals,
    forward_region,
    random_disentangled_F,
    random_disentangled_G,
    random_separable_W,
    region_marginals,
    separability_distance,
    weight_update,
)
from smaso.theorems.energy import energy_rates, ug_correlation
from teachers import Ladder, sample_ladder

PLACEMENTS = [False, "after", "before"]
ERROR_KEYS = ("F_propagated", "G_propagated", "dW_propagated", "F_local", "G_local", "dW_local")


def _td_ladder(emission=None):
    return Ladder.random(depth=3, branching=[2, 2, 2], events=[3, 3, 3, 2], mode="topdown", concentration=0.8,
                         seed=7, emission=emission, sigma=0.5 if emission == "gaussian" else None)


def _train(student, x, y, steps=6, lr=0.3, loss="squared"):
    for _ in range(steps):
        student.apply_update(student.forward_backward(x, y, loss), lr)


# ====================================================================== API
def test_batch_norm_argument():
    lad = _td_ladder()
    for arg, placement in ((False, None), (True, "after"), ("after", "after"), ("before", "before")):
        st = LadderStudent(lad, 3, batch_norm=arg)
        assert st.bn_placement == placement and st.batch_norm is (placement is not None)
        assert hasattr(st, "bn_scale") is (placement is not None)
        assert f"batch_norm={placement!r}" in repr(st) if placement else "batch_norm=False" in repr(st)
    for bad, exc in (("middle", ValueError), ("BEFORE", ValueError), (1, TypeError), (None, TypeError),
                     (0.0, TypeError)):
        with pytest.raises(exc, match="batch_norm"):
            LadderStudent(lad, 3, batch_norm=bad)


def test_reformulate_top_argument():
    lad, s = fi_sample(2, 2, 2, n=60, seed=0)
    st = LadderStudent(lad, 3, dtype=torch.float64)
    stats = collect_statistics(st, s.inputs(dtype=torch.float64), s.y, s.z)
    with pytest.raises(ValueError, match="top"):
        reformulate(st, stats.P, stats, top="exact")
    with pytest.raises(ValueError, match="loss"):
        top_gradient(stats.Fbar[0], "hinge")


# ====================================================================== explicit backward vs references
def _bn1d_reference(st: LadderStudent, x: torch.Tensor, y: torch.Tensor, loss: str) -> dict:
    """Loop over regions and children, ``torch.nn.BatchNorm1d`` between the linear map and the gate
    (hidden levels), torch's own activations; autograd gives per-example gradients (paper's sign,
    g = -N dL/d.) and parameter updates (-dL/dparam)."""
    lad = st.ladder
    d, n = lad.depth, x.shape[0]
    h = x.to(torch.float64)
    keep = {k: [None] * d for k in ("u", "f", "fbar")}
    bns = {}
    for l in range(d - 1, -1, -1):
        b = lad.branching[l]
        cols = []
        for i in range(lad.num_regions[l]):
            u_i = sum(h[:, i * b + c, :] @ st.weights[l][i * b + c] for c in range(b))
            if st.biases is not None:
                u_i = u_i + st.biases[l][i]
            cols.append(u_i)
        u = torch.stack(cols, 1)
        u.retain_grad()
        f = u
        if 1 <= l < d:
            bn = torch.nn.BatchNorm1d(u.shape[1] * u.shape[2], eps=torch_bn_eps(st.bn_eps), affine=True,
                                      momentum=0.5, dtype=torch.float64)
            bn.train()
            with torch.no_grad():
                bn.weight.copy_(st.bn_scale[l - 1].reshape(-1))
                bn.bias.copy_(st.bn_shift[l - 1].reshape(-1))
            bns[l] = bn
            f = bn(u.reshape(n, -1)).reshape(u.shape)
            f.retain_grad()
        fbar = ref_activation(st.act(l), f)
        if fbar is f:
            fbar = f * 1.0
        fbar.retain_grad()
        keep["u"][l], keep["f"][l], keep["fbar"][l] = u, (fbar if l == 0 else f), fbar
        h = fbar
    out = h[:, 0]
    st.zero_grad(set_to_none=True)
    L = reference_loss(out, y, loss)
    L.backward()
    ref = {"loss": L.item(), "out": out.detach()}
    for k in ("u", "f", "fbar"):
        ref[k] = [t.detach() for t in keep[k]]
    ref["g"] = [-n * t.grad for t in keep["u"]]
    ref["g_f"] = [-n * t.grad for t in keep["f"]]
    ref["g_raw"] = [-n * t.grad for t in keep["fbar"]]
    ref["dW"] = [-w.grad.clone() for w in st.weights]
    ref["db"] = None if st.biases is None else [-b.grad.clone() for b in st.biases]
    ref["dc1"] = {l: -bn.weight.grad.reshape(lad.num_regions[l], -1) for l, bn in bns.items()}
    ref["dc0"] = {l: -bn.bias.grad.reshape(lad.num_regions[l], -1) for l, bn in bns.items()}
    st.zero_grad(set_to_none=True)
    return ref


def _autograd_updates(st: LadderStudent, x, y, loss) -> dict:
    """-dL/dparam by autograd of the student's own differentiable ``forward``."""
    st.zero_grad(set_to_none=True)
    st.loss(st(x), y, loss).backward()
    out = {"dW": [-w.grad.clone() for w in st.weights],
           "db": None if st.biases is None else [-b.grad.clone() for b in st.biases],
           "dc1": [-c.grad.clone() for c in st.bn_scale], "dc0": [-c.grad.clone() for c in st.bn_shift]}
    st.zero_grad(set_to_none=True)
    return out


CASES = [("relu", True, "squared", None, 1e-5), ("relu", False, "cross_entropy", "gaussian", 1e-5),
         ("swish:0.7", True, "cross_entropy", "gaussian", 0.0), ("abs", True, "squared", "gaussian", 0.3),
         ("leaky_relu:0.2", False, "squared", None, 0.0)]


@pytest.mark.parametrize("activation, bias, loss, emission, eps", CASES,
                         ids=["-".join(str(v) for v in c) for c in CASES])
def test_bn_before_backward_equals_batchnorm1d_and_autograd(activation, bias, loss, emission, eps):
    lad = _td_ladder(emission)
    s = sample_ladder(lad, 48, seed=1)
    x, y = s.inputs(dtype=torch.float64), s.y
    st = LadderStudent(lad, [4, 5], activation=activation, batch_norm="before", bias=bias, bn_eps=eps,
                       dtype=torch.float64, seed=2)
    perturb_params(st)
    rec = st.forward_backward(x, y, loss)
    ref = _bn1d_reference(st, x, y, loss)
    auto = _autograd_updates(st, x, y, loss)
    d = lad.depth
    assert rec.loss == pytest.approx(ref["loss"], rel=1e-12)
    with torch.no_grad():
        assert_close(st(x), ref["out"], 1e-12, "forward")
    for l in range(d):
        for k in ("u", "f", "fbar"):
            assert_close(getattr(rec, k)[l], ref[k][l], 1e-12, f"{k}[{l}]")
        for k in ("g", "g_f", "g_raw", "dW") + (("db",) if bias else ()):
            assert_close(getattr(rec, k)[l], ref[k][l], 1e-10, f"{k}[{l}] vs BatchNorm1d")
        for k in ("dW",) + (("db",) if bias else ()):
            assert_close(getattr(rec, k)[l], auto[k][l], 1e-10, f"{k}[{l}] vs autograd")
        # the gates are those of the gate's input f = BN(u) (= u at the top, which has no BN)
        a = st.act(l)
        assert_close(rec.slope[l], a.slope(rec.f[l] if l else rec.u[l]), 0, f"slope[{l}]")
        assert_close(rec.deriv[l], a.derivative(rec.f[l] if l else rec.u[l]), 0, f"deriv[{l}]")
    for l in range(1, d):
        for k in ("dc1", "dc0"):
            assert_close(getattr(rec, k)[l], ref[k][l], 1e-10, f"{k}[{l}] vs BatchNorm1d")
            assert_close(getattr(rec, k)[l], auto[k][l - 1], 1e-10, f"{k}[{l}] vs autograd")
        # Thm 5 at the pre-activation: g is zero-mean over the batch (and orthogonal to u for eps = 0)
        scale = rec.g[l].abs().max().item()
        assert rec.g[l].mean(0).abs().max().item() < 1e-13 * scale
        if eps == 0:
            assert (rec.u[l] * rec.g[l]).mean(0).abs().max().item() < 1e-12 * scale * rec.u[l].abs().max().item()
    assert all(rec.dW[l].abs().max() > 1e-6 for l in range(d))
    # the stacked layout that FrequencyAccumulator asks for holds the same record
    rs = st.forward_backward(x, y, loss, stacked=True)
    assert rs.stacked_fields == st.stacked_fields() and "f" in rs.stacked_fields
    for k in ("u", "f", "fbar", "slope", "deriv", "g", "g_f", "g_raw", "dW", "dc1"):
        for l in range(d):
            if getattr(rec, k)[l] is not None:
                assert torch.equal(getattr(rs, k)[l], getattr(rec, k)[l]), (k, l)


def test_after_placement_record_unchanged_by_the_option():
    """``True`` and ``"after"`` are the same student; ``"before"`` is another network."""
    lad = _td_ladder("gaussian")
    s = sample_ladder(lad, 40, seed=2)
    x, y = s.inputs(dtype=torch.float64), s.y
    recs = {}
    for arg in (True, "after", "before"):
        st = LadderStudent(lad, [4, 5], batch_norm=arg, dtype=torch.float64, seed=1)
        perturb_params(st)
        recs[arg] = st.forward_backward(x, y)
    for l in range(lad.depth):
        for k in ("u", "f", "fbar", "g", "g_f", "dW"):
            assert torch.equal(getattr(recs[True], k)[l], getattr(recs["after"], k)[l])
    assert (recs["before"].fbar[0] - recs["after"].fbar[0]).abs().max() > 1e-3


@pytest.mark.parametrize("bias", [True, False])
def test_bn_before_apply_update_is_one_sgd_step(bias):
    lad = _td_ladder()
    s = sample_ladder(lad, 48, seed=1)
    x, y = s.inputs(dtype=torch.float64), s.y
    st = LadderStudent(lad, [4, 5], activation="swish:0.7", batch_norm="before", bias=bias, dtype=torch.float64)
    perturb_params(st)
    ref = LadderStudent(lad, [4, 5], activation="swish:0.7", batch_norm="before", bias=bias, dtype=torch.float64)
    ref.load_state_dict(st.state_dict())
    lr, wd = 0.3, 0.05
    opt = torch.optim.SGD(ref.parameters(), lr=lr)
    opt.zero_grad()
    (ref.loss(ref(x), y) + wd * sum(w.pow(2).sum() for w in ref.weights)).backward()
    opt.step()
    st.apply_update(st.forward_backward(x, y), lr, wd)
    for k, v in st.state_dict().items():
        assert_close(v, ref.state_dict()[k], 1e-12, k)


# ====================================================================== Thm 3 for every placement
@pytest.mark.parametrize("loss", ["squared", "cross_entropy"])
@pytest.mark.parametrize("batch_norm", PLACEMENTS)
def test_thm3_exact_for_every_placement(batch_norm, loss):
    """Fully informative ladder, one-hot leaves, empirical P: every error of the reformulation that
    ``compare_statistics_to_theory`` reports is round-off (measured max ~1e-15), after training."""
    lad, s = fi_sample(2, 2, 2, n=400, seed=1, concentration=2.0)
    x = s.inputs(dtype=torch.float64)
    st = LadderStudent(lad, 5, activation="relu", batch_norm=batch_norm, dtype=torch.float64, seed=3)
    perturb_params(st)
    _train(st, x, s.y, loss=loss)
    stats = collect_statistics(st, x, s.y, s.z, loss=loss)
    report = compare_statistics_to_theory(st, stats, loss=loss)
    worst = max(row[k] for row in report["levels"] for k in ERROR_KEYS)
    assert worst < 1e-12, report["levels"]
    # the same directly, and for Delta bias: the default (predicted) cross-entropy top included
    for propagate in (True, False):
        pred = reformulate(st, stats.P, stats, propagate=propagate, loss=loss)
        for l in range(lad.depth):
            seen = stats.counts[l] > 0
            assert rel(pred.F[l], stats.F[l], seen) < 1e-12, (propagate, l)
            assert rel(pred.U[l], stats.U[l], seen) < 1e-12, (propagate, l)
            assert rel(pred.db[l], stats.db[l]) < 1e-12 or stats.db[l].abs().max() < 1e-14
    assert all(stats.G_tilde[l].abs().max() > 1e-6 and stats.dW[l].abs().max() > 1e-6 for l in range(lad.depth))


def test_thm3_exact_through_compare_student_bn_before():
    """The end-to-end path (SGD on minibatches, then full-batch statistics) with BN before the gate."""
    _, s = fi_sample(depth=2, branching=2, leaf_events=2, n=300, seed=3)
    res = compare_student(s, student=StudentConfig(width=4, activation="relu", batch_norm="before"),
                          training=TrainingConfig(steps=4, lr=0.2, batch_size=32, seed=1, loss="cross_entropy"),
                          evaluation=EvaluationConfig(eval_every=2, eval_examples=200))
    assert res.student.bn_placement == "before"
    for h in res.history:
        for row in h["levels"]:
            for k in ERROR_KEYS:
                assert row[k] < 1e-12, (h["step"], row["level"], k, row[k])


# ====================================================================== Thm 9's premise and Thm 9
@pytest.mark.parametrize("ladder", ["fully_informative", "factorized"])
@pytest.mark.parametrize("batch_norm", PLACEMENTS)
def test_bn_before_centres_the_gradient(ladder, batch_norm):
    """1^T G~_a = sum_a P(a) E[g | a] = E_x[g]: zero to round-off at every BN level with BN before
    the gate (measured and predicted, propagated and one-step), in general not otherwise (measured
    max |1^T G~| / max |G~| ~ 0.1 .. 1 for these seeds)."""
    if ladder == "fully_informative":
        lad, s = fi_sample(3, [2, 1, 2], 2, n=400, seed=4)
    else:
        lad = Ladder.factorized_binary(depth=2, branching=2, factors=(1, 2, 4), seed=2)
        s = sample_ladder(lad, 800, seed=0)
    x = s.inputs(dtype=torch.float64)
    st = LadderStudent(lad, 4, activation="relu", batch_norm=batch_norm, dtype=torch.float64, seed=2)
    perturb_params(st)
    _train(st, x, s.y, steps=3)
    stats = collect_statistics(st, x, s.y, s.z)
    preds = [reformulate(st, stats.P, stats, propagate=pr) for pr in (True, False)]
    for l in range(1, lad.depth):
        scale = stats.G_tilde[l].abs().max().item()
        assert scale > 1e-6
        sums = [stats.G_tilde[l].sum(1)] + [pr.G_tilde[l].sum(1) for pr in preds]
        worst = max(t.abs().max().item() for t in sums) / scale
        if batch_norm == "before":
            assert worst < 1e-12, (l, worst)
            assert stats.db[l].abs().max().item() < 1e-13 * scale  # Delta bias = E_x[g] = 0
        else:
            assert sums[0].abs().max().item() / scale > 1e-3, (l, sums[0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_thm9_separable_update_with_bn_before_backward(seed):
    """Thm 9 at a factorized region (2 parent factors, 4 child factors): child activations F_b of
    Def 3, separable W_ba, so U_a = P_ab F_b W_ba + bias is Def 3 (Thm 8); the gated gradient
    D'_a o G~raw_a of Def 4 (D'_a: the ReLU gates of BN_p(U_a), Def 3).  The BN-before backward of
    :func:`reformulate` (Eq 12's projection with the statistics of U_a) centres it: 1^T G~_a = 0, it
    stays Def 4, and Delta W_ba = (P_ab F_b)^T G~_a is separable.  Without BN (or with BN after the
    gate, whose projection acts before the gate) the same gradient gives a non-separable update.

    Side finding (cf. ``test_disentangle.test_thm9_centering_supplied_by_bn_backward``): with one node
    per factor a Def 4 column lives in a 2-dim space that the projection removes entirely (the
    P-weighted mean and U~ directions), so G~_a is only what eps > 0 leaves of the U~ component (the
    fraction eps / (var + eps)): with bn_eps = 0 it is round-off (|G~_a| / |D' o G~raw| ~ 1e-16), with
    1e-6 ~ 1e-3; bn_eps = 0.05 keeps it O(1) (measured ratio 2 .. 5)."""
    lad = Ladder.factorized_binary(depth=1, branching=2, factors=(2, 4), seed=seed)
    gen = torch.Generator().manual_seed(seed)
    p = region_marginals(lad)[0][0]
    pa = factor_marginals(p, 2)
    groups = lad.factorization.groups(1)
    P_ab = list(lad.tables[0])
    F_b = [random_disentangled_F(4, gen) for _ in P_ab]
    W = [random_separable_W(groups, gen, 4) for _ in P_ab]
    bias = torch.randn(2, generator=gen, dtype=torch.float64)
    U = forward_region(P_ab, F_b, W, bias=bias, relu=False)
    assert disentangled_F_distance(U, 2) < 1e-12  # Thm 8 (the linear part)
    c1 = torch.rand(1, 2, generator=gen, dtype=torch.float64) + 0.5
    c0 = torch.zeros(1, 2, dtype=torch.float64)  # BN output of p-mean 0: each gate is on for one value of its bit
    eps = 0.05
    Fa, U_tilde, sigma = _weighted_bn(U[None], p[None], c1, c0, eps)  # BN before the gate
    D = (Fa[0] > 0).double()
    assert disentangled_F_distance(D, 2) < 1e-12 and D.sum(0).min() > 0  # Lemma 1: gates of a Def 3 column
    gated = D * random_disentangled_G(pa, gen, centered=False)
    assert disentangled_G_distance(gated, pa) < 1e-12 and gated.sum(0).abs().min() > 1e-3
    G_a = _weighted_bn_backward(gated[None], U_tilde, p[None], sigma, c1)[0]
    assert G_a.sum(0).abs().max() < 1e-14 * G_a.abs().max()  # Thm 9's premise
    assert disentangled_G_distance(G_a, pa) < 1e-10
    assert torch.linalg.norm(G_a) > 1e-3 * torch.linalg.norm(gated)  # the eps remainder is not vacuous
    for c, (P, Fb) in enumerate(zip(P_ab, F_b, strict=True)):
        assert separability_distance(weight_update(P, Fb, G_a), groups) < 1e-10, c
        assert separability_distance(weight_update(P, Fb, gated), groups) > 1e-3, c  # uncentred: not separable


def test_bn_before_conserves_row_energy_to_first_order():
    """§7.5.1 with BN right after the linear layer: E_x[u_j g_j] = 0 (bn_eps = 0) for any activation,
    so sum_k w_jk Delta w_jk = E_x[u_j g_j] - b_j Delta b_j = 0 (Delta b_j = E_x[g_j] = 0 too); with
    BN after a non-homogeneous gate (swish) or without BN it is not."""
    lad = _td_ladder("gaussian")
    s = sample_ladder(lad, 64, seed=3)
    x, y = s.inputs(dtype=torch.float64), s.y
    out = {}
    for bn in PLACEMENTS:
        st = LadderStudent(lad, [4, 5], activation="swish:0.7", batch_norm=bn, bn_eps=0.0, dtype=torch.float64)
        perturb_params(st)
        rec = st.forward_backward(x, y)
        levels = range(1, lad.depth)
        ug = ug_correlation(rec, levels)
        rates = energy_rates(st, rec, include_bias=False, levels=levels)
        scale = {l: (rec.u[l].abs().max() * rec.g[l].abs().max()).item() for l in levels}
        out[bn] = max(max(ug[l].abs().max().item(), rates[l].abs().max().item()) / scale[l] for l in levels)
    assert out["before"] < 1e-13, out
    assert out["after"] > 1e-4 and out[False] > 1e-4, out


# ====================================================================== the cross-entropy top
@pytest.mark.parametrize("batch_norm", PLACEMENTS)
def test_predicted_cross_entropy_top_is_exact_on_the_fully_informative_ladder(batch_norm):
    """Thm 3: the output is a function of y, so E[softmax(f) | y] = softmax(E[f | y]): the
    predicted G_omega = I - softmax(F_omega) equals the measured top gradient (measured ~1e-16)."""
    lad, s = fi_sample(2, 2, 2, n=400, seed=1, concentration=2.0)
    x = s.inputs(dtype=torch.float64)
    st = LadderStudent(lad, 5, batch_norm=batch_norm, dtype=torch.float64, seed=3)
    _train(st, x, s.y, loss="cross_entropy")
    stats = collect_statistics(st, x, s.y, s.z, loss="cross_entropy")
    seen = stats.counts[0] > 0
    assert rel(top_gradient(stats.Fbar[0], "cross_entropy"), stats.Gf[0], seen) < 1e-12
    meas = reformulate(st, stats.P, stats, loss="cross_entropy", top="measured")
    for propagate in (True, False):
        pred = reformulate(st, stats.P, stats, propagate=propagate, loss="cross_entropy", top="predicted")
        assert rel(pred.G_tilde[0], meas.G_tilde[0], seen) < 1e-12
        assert rel(pred.G_tilde[0], stats.G_tilde[0], seen) < 1e-12
        for l in range(lad.depth):
            assert rel(pred.dW[l], stats.dW[l]) < 1e-12
    signs = eq7_signs(stats)
    assert signs["holds"] and signs["worst_margin"] > 0


def test_predicted_cross_entropy_top_differs_on_noisy_leaves():
    """Gaussian leaves (sigma = 0.6): the output varies within a label, so the predicted top differs
    from the measured one: by the Jensen gap E[softmax(f) | y] - softmax(E[f | y]) alone when F_omega
    is the measured one (measured 2.8e-2 relative, P-weighted), and by more when F_omega is itself
    predicted (full recursion, 0.14).  Eq 7's signs hold for the measured gradients all the same."""
    lad = Ladder.fully_informative(depth=2, branching=2, leaf_events=2, concentration=2.0, emission="gaussian",
                                   sigma=0.6)
    s = sample_ladder(lad, 2000, seed=0)
    x = s.inputs(dtype=torch.float64)
    st = LadderStudent(lad, 5, batch_norm="before", dtype=torch.float64, seed=3)
    _train(st, x, s.y, loss="cross_entropy", steps=10, lr=0.5)
    stats = collect_statistics(st, x, s.y, s.z, loss="cross_entropy")
    seen = stats.counts[0] > 0
    w = stats.p[0][..., None]  # compare the P-weighted G~_omega, as the reformulation does
    jensen = rel(w * top_gradient(stats.Fbar[0], "cross_entropy"), w * stats.Gf[0], seen)
    meas = reformulate(st, stats.P, stats, loss="cross_entropy", top="measured")
    local = reformulate(st, stats.P, stats, propagate=False, loss="cross_entropy", top="predicted")
    full = reformulate(st, stats.P, stats, loss="cross_entropy")  # default: predicted
    assert rel(meas.G_tilde[0], stats.G_tilde[0], seen) < 1e-12  # the measured top is the measurement
    assert rel(local.G_tilde[0], stats.G_tilde[0], seen) == pytest.approx(jensen, rel=1e-9)
    assert 1e-4 < jensen < 0.1, jensen
    assert rel(full.G_tilde[0], stats.G_tilde[0], seen) > 1e-3
    print(f"noisy top: Jensen gap {jensen:.3g}, full recursion {rel(full.G_tilde[0], stats.G_tilde[0], seen):.3g}, "
          f"full recursion with the measured top {rel(meas.G_tilde[0], stats.G_tilde[0], seen):.3g}")
    signs = eq7_signs(stats)
    assert signs["holds"] and signs["worst_margin"] > 0, signs
    assert bool(signs["positive"].all() and signs["negative"].all())
    # the per-class values are the diagonal / off-diagonal of the measured E[g | y]
    G = stats.Gf[0][0]
    assert torch.equal(signs["diagonal"], G.diagonal())
    j = signs["worst_class"]
    others = torch.cat([G[:j, j], G[j + 1:, j]])
    assert signs["worst_margin"] == pytest.approx(min(G[j, j].item(), -others.max().item()))


def test_eq7_signs_can_fail_for_the_squared_loss():
    """g_j = [y = j] - f_j: an output above 1 on its own class or below 0 on another flips a sign,
    which eq7_signs reports (here a fresh student with a large initialization)."""
    lad, s = fi_sample(2, 2, 2, n=400, seed=1)
    x = s.inputs(dtype=torch.float64)
    st = LadderStudent(lad, 5, init_scale=3.0, dtype=torch.float64, seed=0)
    stats = collect_statistics(st, x, s.y, s.z, loss="squared")
    signs = eq7_signs(stats)
    assert not signs["holds"] and signs["worst_margin"] < 0
    assert torch.equal(signs["margin"] > 0, signs["positive"] & signs["negative"])
    # with the softmax cross-entropy the same student satisfies Eq 7
    assert eq7_signs(collect_statistics(st, x, s.y, s.z, loss="cross_entropy"))["holds"]


def test_eq7_signs_unobserved_label():
    lad = Ladder.fully_informative(depth=1, branching=2, leaf_events=2)
    s = sample_ladder(lad, 400, seed=0)
    keep = s.y != 3
    x, y, z = s.inputs(dtype=torch.float64)[keep], s.y[keep], s.z[keep]
    st = LadderStudent(lad, [], dtype=torch.float64)
    signs = eq7_signs(collect_statistics(st, x, y, z, loss="cross_entropy"))
    assert torch.isnan(signs["diagonal"][3]) and not signs["positive"][3] and not signs["holds"]
    assert signs["worst_class"] == 3 and bool(signs["positive"][:3].all() and signs["negative"].all())
