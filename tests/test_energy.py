"""§7.5.1 conserved row energy under BN (smaso/theorems/energy.py).

Exact identities in float64 (1e-12 relative): Eq 80 (sum of W o Delta W over the incoming weights
= E_x[u g]), E_x[u g] = 0 at BN levels (bn_eps = 0), and the per-step energy change
lr^2/2 |Delta W_j.|^2 under BN.  Drift exponents from log-log fits over four step sizes, with
ranges around the values the module docstring derives (2 / 1 at fixed steps, 1 / 0 at fixed time).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import matplotlib
import pytest
import torch
from conftest_student import assert_close, one_torch_thread  # noqa: F401 (fixture)

from smaso.student.network import LadderStudent
from smaso.theorems.energy import (
    EnergyTrajectory,
    drift_exponent,
    energy_drift,
    energy_rates,
    plot_energy,
    row_energies,
    ug_correlation,
)
from teachers import Ladder, sample_ladder

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def sample():
    lad = Ladder.random(depth=3, branching=2, events=4, seed=0, emission="gaussian", sigma=0.5)
    return sample_ladder(lad, 256, seed=1)


def _student(sample, bn: bool, bias: bool = False, seed: int = 0):
    return LadderStudent(sample.ladder, 4, batch_norm=bn, bias=bias, bn_eps=0.0, seed=seed, dtype=torch.float64)


def _train(student, sample, lr=0.05, steps=5):
    x, y = sample.inputs(dtype=torch.float64), sample.y
    for _ in range(steps):
        student.apply_update(student.forward_backward(x, y), lr)
    return student.forward_backward(x, y)


def test_row_energies_match_a_loop(sample):
    st = _student(sample, True, bias=True)
    _train(st, sample)
    e = row_energies(st)
    eb = row_energies(st, include_bias=True)
    assert sorted(e) == [1, 2]  # hidden levels of a depth-3 ladder
    lad = st.ladder
    for l in (1, 2):
        for r in range(lad.num_regions[l]):
            for j in range(st.widths[l]):
                w = torch.cat([st.weights[l][r * lad.branching[l] + c, :, j] for c in range(lad.branching[l])])
                assert abs(e[l][r, j].item() - 0.5 * w.pow(2).sum().item()) < 1e-14
                assert abs(eb[l][r, j].item() - 0.5 * (w.pow(2).sum() + st.biases[l][r, j] ** 2).item()) < 1e-14
    assert row_energies(st, levels=[0])[0].shape == (1, lad.num_classes)
    with pytest.raises(ValueError, match="levels"):
        row_energies(st, levels=[3])


@pytest.mark.parametrize("bn", [True, False])
def test_eq80_first_order_identity(sample, bn):
    """sum_k w_jk Delta w_jk = E_x[u_j g_j] for every node (no bias), with or without BN;
    with BN (eps = 0) both are 0 at the hidden levels, to rounding."""
    st = _student(sample, bn)
    rec = _train(st, sample)
    rates = energy_rates(st, rec)
    ug = ug_correlation(rec, rates)
    for l in rates:
        assert_close(rates[l], ug[l], 1e-12, f"Eq 80 level {l}")
        # E[u g] = E[f g_f] for ReLU (u f'(u) = f(u))
        assert_close(ug[l], (rec.f[l] * rec.g_f[l]).mean(0), 1e-12, f"E[f g_f] level {l}")
        scale = (rec.u[l].abs() * rec.g[l].abs()).mean(0).max().item()
        if bn:
            assert rates[l].abs().max().item() <= 1e-12 * scale, f"level {l}: energy rate not 0 under BN"
        else:
            assert rates[l].abs().max().item() > 1e-3 * scale, f"level {l}: no-BN rate unexpectedly 0"
    # the top level has no BN: its energy is not conserved even with BN
    top = energy_rates(st, rec, levels=[0])[0]
    assert top.abs().max().item() > 1e-4


def test_bias_enters_the_conserved_energy(sample):
    """With biases, sum W Delta W = E[u g] - b Delta b = -b Delta b != 0 under BN; the augmented
    energy 1/2(|W_j.|^2 + b_j^2) is the conserved one."""
    st = _student(sample, True, bias=True)
    rec = _train(st, sample)  # biases become nonzero
    w_only = energy_rates(st, rec)
    aug = energy_rates(st, rec, include_bias=True)
    for l in w_only:
        assert_close(w_only[l], -st.biases[l] * rec.db[l], 1e-12, f"level {l}")
        assert w_only[l].abs().max().item() > 1e-6
        assert aug[l].abs().max().item() <= 1e-13


@pytest.mark.parametrize("activation, conserved", [("leaky_relu:0.1", True), ("abs", True), ("silu", False)])
def test_conservation_needs_a_homogeneous_activation(sample, activation, conserved):
    """E[u g] = E[f g_f] needs u f'(u) = f(u): leaky ReLU and abs conserve the energy under BN,
    SiLU (swish beta = 1/2) does not."""
    st = LadderStudent(sample.ladder, 4, activation=activation, batch_norm=True, bias=False, bn_eps=0.0,
                       dtype=torch.float64)
    rec = _train(st, sample)
    worst = max(r.abs().max().item() for r in energy_rates(st, rec).values())
    assert (worst < 1e-14) == conserved, worst


def test_eps_breaks_exactness(sample):
    """bn_eps > 0: E[f~^2] = var / (var + eps) < 1, so E[f g_f] is only approximately 0."""
    st = LadderStudent(sample.ladder, 4, batch_norm=True, bias=False, bn_eps=1e-2, seed=0, dtype=torch.float64)
    rec = _train(st, sample)
    assert max(r.abs().max().item() for r in energy_rates(st, rec).values()) > 1e-8


@pytest.mark.parametrize("bias", [False, True])
def test_discrete_step_changes_energy_only_at_second_order(sample, bias):
    """Under BN each GD step changes E_j by exactly lr^2/2 (|Delta W_j.|^2 + Delta b_j^2)."""
    tr = energy_drift(sample, 0.1, 15, True, bias=bias)
    assert tr.include_bias == bias
    for l, e in tr.energies.items():
        step = e[1:] - e[:-1]
        assert_close(step, tr.predicted_increments[l], 1e-12, f"level {l}")
        assert bool((step >= -1e-15).all())  # energy never decreases under BN + GD
        assert tr.first_order[l].abs().max().item() < 1e-14
    assert tr.max_relative_drift == pytest.approx(tr.relative_drift[-1].item())
    assert tr.losses[-1] < tr.losses[0]


def test_drift_exponent_fixed_steps(sample):
    """Same number of steps, lr halved: BN drift /4 (exponent ~2), no-BN drift /2 (exponent ~1)."""
    lrs = [0.004, 0.002, 0.001, 0.0005]
    p_bn, d_bn = drift_exponent(sample, lrs, True, steps=4)
    p_no, d_no = drift_exponent(sample, lrs, False, steps=4)
    assert 1.7 <= p_bn <= 2.3, (p_bn, d_bn)
    assert 0.7 <= p_no <= 1.3, (p_no, d_no)
    assert min(a / b for a, b in zip(d_no, d_bn, strict=True)) > 20


def test_drift_exponent_fixed_time(sample):
    """Same training time lr * steps = 0.5: the BN drift is sum lr^2/2 |Delta W|^2 ~ lr/2 int |Delta W|^2
    (exponent ~1); without BN it tends to the gradient-flow energy change (exponent ~0)."""
    lrs = [0.02, 0.01, 0.005, 0.0025]
    p_bn, d_bn = drift_exponent(sample, lrs, True, time=0.5)
    p_no, d_no = drift_exponent(sample, lrs, False, time=0.5)
    assert 0.8 <= p_bn <= 1.2, (p_bn, d_bn)
    assert -0.2 <= p_no <= 0.2, (p_no, d_no)
    assert d_no[-1] > 50 * d_bn[-1]


def test_bad_input(sample):
    with pytest.raises(ValueError, match="lr"):
        energy_drift(sample, -1.0, 3, True)
    with pytest.raises(ValueError, match="steps"):
        energy_drift(sample, 0.1, 0, True)
    with pytest.raises(TypeError, match="LadderSample"):
        energy_drift("x", 0.1, 3, True)
    with pytest.raises(ValueError, match="float64"):
        energy_drift(sample, 0.1, 3, True, student=LadderStudent(sample.ladder, 4, batch_norm=True))
    with pytest.raises(ValueError, match="ladder"):
        other = Ladder.random(depth=3, branching=2, events=4, seed=5, emission="gaussian", sigma=0.5)
        energy_drift(sample, 0.1, 3, True, student=LadderStudent(other, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="exactly one"):
        drift_exponent(sample, [0.1, 0.05], True)
    with pytest.raises(TypeError, match="LadderStudent"):
        row_energies(None)


def test_total_energy_is_a_tensor_without_levels():
    # the documented (steps + 1,) tensor, zeros when no level is reported (the bare sum gave the int 0)
    empty = torch.zeros(3, dtype=torch.float64)
    run = EnergyTrajectory(0.1, 2, False, False, {}, empty, 0.0, {}, {}, empty)
    total = run.total_energy()
    assert isinstance(total, torch.Tensor) and total.shape == (3,) and not total.any()


def test_plot_energy(sample, tmp_path):
    path = tmp_path / "energy.png"
    fig, runs = plot_energy(sample, lr=0.05, steps=30, path=path)
    assert path.stat().st_size > 1000
    assert runs["bn"].max_relative_drift < runs["no_bn"].max_relative_drift / 5
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_example_script(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bn_energy", Path(__file__).parents[1] / "examples" / "bn_energy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "e.png"
    result = mod.main(["--n", "128", "--steps", "20", "--out", str(out)])
    assert out.stat().st_size > 1000
    assert 1.7 <= result["exponents"][("steps", True)][0] <= 2.3
    assert 0.7 <= result["exponents"][("steps", False)][0] <= 1.3
    assert "exponent" in capsys.readouterr().out


def test_progress_bar_changes_nothing_but_stderr(sample, capsys):
    quiet = energy_drift(sample, 0.05, 4, True)
    loud = energy_drift(sample, 0.05, 4, True, progress=True)
    assert "gradient descent (BN)" in capsys.readouterr().err
    assert torch.equal(quiet.losses, loud.losses) and quiet.max_relative_drift == loud.max_relative_drift
