"""Many restarts trained as one (smaso.depth.population).

The reference nobody here wrote: each member as a plain ``nn.Sequential`` trained alone by
``torch.optim`` (Adam or SGD, ``OneCycleLR``) on the same minibatches must end where the population's
member ends, to 1e-10.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from smaso.depth.population import StudentPopulation, member_seed, population_l1_error, train_population
from smaso.depth.separation import l1_error, make_student
from teachers.tent import tent_power


def _train_alone(net, k, *, steps, batch, n_train, lr, loss, optimizer, schedule, frobenius, seed):
    """One member trained by hand with torch.optim, drawing its data as train_population documents."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n_train, 1, generator=gen, dtype=torch.float64)
    y = tent_power(x, k)
    opt = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)(net.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps) if schedule == "onecycle" else None
    for _ in range(steps):
        idx = torch.randint(0, n_train, (batch,), generator=gen)
        r = net(x[idx]) - y[idx]
        value = (r.abs() if loss == "l1" else r**2).mean()
        value = value + frobenius * sum((m.weight**2).sum() for m in net if isinstance(m, nn.Linear))
        opt.zero_grad()
        value.backward()
        opt.step()
        if sched is not None:
            sched.step()
    return net


@pytest.mark.parametrize(("init", "loss", "optimizer", "schedule", "frobenius"), [
    ("data", "l1", "adam", "onecycle", 1e-3),
    ("torch", "squared", "sgd", "constant", 0.0),
    ("spread", "l1", "sgd", "onecycle", 1e-4),
])
def test_every_member_ends_where_it_would_alone(init, loss, optimizer, schedule, frobenius):
    kw = dict(steps=60, batch=32, n_train=256, lr=0.05, loss=loss, optimizer=optimizer, schedule=schedule,
              frobenius=frobenius, seed=7)
    pop = StudentPopulation((3, 2), 4, seed=11, init=init)
    alone = [_train_alone(pop.member(r), 3, **kw) for r in range(pop.size)]
    history = train_population(pop, 3, **kw)
    assert history.shape == (20, 4)
    for r, net in enumerate(alone):
        mine = pop.member(r)
        for a, b in zip(mine.parameters(), net.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    assert not torch.equal(pop.weights[0][0], pop.weights[0][1])  # the members are different networks


def test_initialisations_are_the_students_and_do_not_depend_on_the_population_size():
    state = torch.random.get_rng_state()
    for init in ("torch", "spread"):
        pop = StudentPopulation((4, 3), 3, seed=5, init=init)
        for r in range(3):
            ref = make_student((4, 3), member_seed(5, r), init=init)
            assert all(torch.equal(a, b) for a, b in zip(pop.member(r).parameters(), ref.parameters(), strict=True))
    for init in ("torch", "spread", "data"):
        small, big = StudentPopulation((2, 2), 2, seed=1, init=init), StudentPopulation((2, 2), 5, seed=1, init=init)
        assert all(torch.equal(a[1], b[1]) for a, b in zip(small.parameters(), big.parameters(), strict=True))
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG is never touched
    assert member_seed(0, 1) != member_seed(1, 0) and 0 <= member_seed(3, 4) < 2**63


def test_data_init_puts_every_kink_inside_the_data():
    pop = StudentPopulation((5, 4, 3), 16, seed=2, init="data")
    x = (torch.arange(256, dtype=torch.float64)[:, None] + 0.5) / 256
    for r in range(pop.size):
        h = x
        for m in pop.member(r)[:-1]:
            h = m(h)
            if isinstance(m, nn.Linear):
                # unit-scale pre-activations, each unit active on part of the grid and off on another part
                torch.testing.assert_close(h.std(dim=0), torch.ones(h.shape[1], dtype=torch.float64))
                assert bool(((h > 0).any(dim=0) & (h <= 0).any(dim=0)).all())
    out = pop.biases[-1].detach()
    assert torch.equal(out, torch.full_like(out, 0.5))


def test_l1_error_per_member_is_l1_error_of_each_member():
    pop = StudentPopulation((4,), 6, seed=0)
    train_population(pop, 4, steps=30, n_train=512, batch=64)
    errors = population_l1_error(pop, 4, n_grid=3000)  # a grid that does not divide into the chunks
    assert errors.shape == (6,) and errors.dtype == torch.float64
    for r in range(6):
        assert float(errors[r]) == pytest.approx(l1_error(pop.member(r), 4, n_grid=3000), abs=1e-13)
    assert float(population_l1_error(pop, 4)[0]) == pytest.approx(l1_error(pop.member(0), 4), abs=1e-13)


def test_forward_shapes_and_float32():
    pop = StudentPopulation((3,), 2, dtype=torch.float32)
    x = torch.rand(5, 1)
    out = pop(x)
    assert out.shape == (2, 5, 1) and out.dtype == torch.float32
    torch.testing.assert_close(pop(x.expand(2, 5, 1)), out)
    torch.testing.assert_close(out[1], pop.member(1)(x))
    assert "widths=(3,), size=2" in repr(pop)
    train_population(pop, 2, steps=5, n_train=64, batch=8)  # trains in its own dtype
    assert pop.weights[0].dtype == torch.float32


def test_the_best_of_a_population_fits_a_target_it_can_represent():
    """A control that could fail: 64 restarts of a (4,) student reach tau^2 (4 pieces) almost exactly,
    where the lecture's SGD from PyTorch's init stays at the constant 1/2 (error 1/4)."""
    pop = StudentPopulation((4,), 64, seed=0)
    train_population(pop, 2, steps=1500, n_train=2048)
    errors = population_l1_error(pop, 2)
    assert float(errors.min()) < 5e-3 and float(errors.median()) > 10 * float(errors.min())


def test_progress_changes_nothing_but_the_display(capsys):
    a, b = StudentPopulation((2,), 3, seed=4), StudentPopulation((2,), 3, seed=4)
    ha = train_population(a, 1, steps=40, n_train=64, batch=16)
    hb = train_population(b, 1, steps=40, n_train=64, batch=16, progress=True)
    assert torch.equal(ha, hb) and all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert capsys.readouterr().out == ""  # tqdm writes to stderr


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: StudentPopulation((), 2), ValueError, "widths: expected at least one positive hidden width"),
    (lambda: StudentPopulation((2, 0), 2), ValueError, "widths: expected positive integer hidden widths"),
    (lambda: StudentPopulation("22", 2), ValueError, "widths"),
    (lambda: StudentPopulation((2,), 0), ValueError, "size: expected an integer >= 1"),
    (lambda: StudentPopulation((2,), 2, init="xavier"), ValueError, "init: expected one of"),
    (lambda: StudentPopulation((2,), 2, seed=-1), ValueError, "seed: expected an integer >= 0"),
    (lambda: StudentPopulation((2,), 2, seed="a"), ValueError, "seed: expected an integer >= 0"),
    (lambda: member_seed(0, -1), ValueError, "member: expected an integer >= 0"),
    (lambda: train_population(StudentPopulation((2,), 1), 2, seed=1.5), ValueError, "seed: expected an integer"),
    (lambda: StudentPopulation((2,), 2, dtype=torch.int64), TypeError, "dtype: expected a floating dtype"),
    (lambda: StudentPopulation((2,), 2)(torch.zeros(3)), ValueError, r"x: expected shape \(n, 1\) or \(2, n, 1\)"),
    (lambda: StudentPopulation((2,), 2)(torch.zeros(3, 4, 1)), ValueError, "x: expected shape"),
    (lambda: StudentPopulation((2,), 2).member(2), ValueError, "r: expected a member index < 2"),
    (lambda: train_population(make_student((2,)), 2), TypeError, "pop: expected a StudentPopulation"),
    (lambda: train_population(StudentPopulation((2,), 1), 2, loss="huber"), ValueError, "loss: expected one of"),
    (lambda: train_population(StudentPopulation((2,), 1), 2, optimizer="lbfgs"), ValueError, "optimizer"),
    (lambda: train_population(StudentPopulation((2,), 1), 2, schedule="cosine"), ValueError, "schedule"),
    (lambda: train_population(StudentPopulation((2,), 1), 2, lr=float("nan")), ValueError, "lr: expected a positive"),
    (lambda: train_population(StudentPopulation((2,), 1), 2, frobenius=-1.0), ValueError, "frobenius"),
    (lambda: train_population(StudentPopulation((2,), 1), 2, steps=0), ValueError, "steps: expected an integer >= 1"),
    (lambda: train_population(StudentPopulation((2,), 1), -1), ValueError, "k: expected an integer >= 0"),
    (lambda: population_l1_error(StudentPopulation((2,), 1), 2, n_grid=0), ValueError, "n_grid"),
])
def test_bad_inputs_raise_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
