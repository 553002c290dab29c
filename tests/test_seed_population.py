"""Seeds and controls trained as one batched population (smaso.student.population).

The reference: each member trained alone by the explicit backward (:meth:`LadderStudent.forward_backward` then
:meth:`~LadderStudent.apply_update`, the step of ``compare_student``), and ``compare_student`` itself member by
member: the population must give the same weights and histories bit for bit in float64.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from history_compare import assert_same_history

from smaso.student.compare import compare_student
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.network import LadderStudent
from smaso.student.population import (
    compare_population,
    population_batch,
    population_supported,
    train_ladder_population,
)
from smaso.student.rows import _training_batches, _training_pieces
from smaso.student.training import TrainingDiverged
from teachers.chunked import as_chunks
from teachers.emission import GaussianEmission
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder


@pytest.fixture(scope="module")
def data():
    return sample_ladder(Ladder.default(), 1200, 3, progress=False)


def _streams(data, members, batch, skip=0):
    return [_training_batches(as_chunks(data), batch, torch.Generator().manual_seed(seed), torch.float64, skip,
                              seed if shuffled else None) for seed, shuffled in members]


@pytest.mark.parametrize("loss, activation, bias, decay", [("squared", "relu", True, 0.0),
                                                          ("cross_entropy", "silu", False, 1e-3)])
def test_population_steps_are_the_members_alone_bit_for_bit(data, loss, activation, bias, decay):
    members = [(0, False), (1, False), (0, True)]
    lad = data.ladder

    def nets():
        return [LadderStudent(lad, 6, readout=5, activation=activation, bias=bias, seed=s, dtype=torch.float64)
                for s, _ in members]

    steps = 12
    traj = train_ladder_population(nets(), _streams(data, members, 32, 100), steps=steps, lr=0.3, loss=loss,
                                   weight_decay=decay, keep=[0, 5, steps])
    assert traj.diverged == [None] * 3
    for r, (net, it) in enumerate(zip(nets(), _streams(data, members, 32, 100), strict=True)):
        assert all(torch.equal(a, b) for a, b in zip(net.parameters(), traj.snapshots[0][r], strict=True))
        for step in range(steps):
            x, y = next(it)
            net.apply_update(net.forward_backward(x, y, loss), 0.3, decay)
            if step + 1 in traj.snapshots:
                got = traj.snapshots[step + 1][r]
                assert all(torch.equal(a, b) for a, b in zip(net.parameters(), got, strict=True)), (r, step)
    # the students given are not changed: the population trains stacked copies
    assert all(torch.equal(a, b) for a, b in zip(nets()[0].parameters(), traj.snapshots[0][0], strict=True))


def test_compare_population_is_compare_student_member_by_member(data):
    student = StudentConfig(width=6, readout=5)
    trainings = [TrainingConfig(steps=16, lr=0.5, batch_size=48, seed=s, shuffle_labels=sh)
                 for s, sh in ((7, False), (7, True))]
    evaluation = EvaluationConfig(eval_every=8, eval_examples=256, noise_groups=None, alignment=False)
    pop = compare_population(data, student, trainings, evaluation)
    for res, t in zip(pop, trainings, strict=True):
        alone = compare_student(data, student, t, evaluation)
        # (the checkpoints' statistics are summed for all members at once: the same sums in another order,
        # smaso.student.member_statistics; tests/test_member_statistics.py)
        assert_same_history(res.history, alone.history) and len(res.history) == 3
        assert all(torch.equal(a, b) for a, b in zip(res.student.parameters(), alone.student.parameters(),
                                                     strict=True))
        assert res.final_prediction is not None and res.final_stats is not None


def test_a_replayed_member_reads_no_training_losses(data, monkeypatch):
    """A replayed member's compare_student writes no per-step losses (the population checked its own): reading its
    loss buffer would read uninitialized memory, and ``smaso demo`` stopped on such garbage as a diverged run. The
    buffer is poisoned with NaN here, so any read of it fails the run."""
    import smaso.student.compare as compare

    real_empty = torch.empty

    def poisoned(*args, **kwargs):
        return real_empty(*args, **kwargs).fill_(float("nan"))

    monkeypatch.setattr(compare.torch, "empty", poisoned)
    student = StudentConfig(width=6, readout=5)
    trainings = [TrainingConfig(steps=300, lr=0.5, batch_size=48, seed=s) for s in (0, 1)]
    evaluation = EvaluationConfig(eval_every=300, eval_examples=256, noise_groups=None, alignment=False)
    pop = compare_population(data, student, trainings, evaluation)
    assert [len(r.history) for r in pop] == [2, 2]


def test_the_population_shows_one_progress_bar_over_its_steps_when_asked(data, capsys):
    """``progress=True``: one tqdm bar over the population's training steps, naming how many students train (what
    ``smaso demo`` shows on a terminal); by default none.  The runs are the same either way."""
    student = StudentConfig(width=6, readout=5)
    trainings = [TrainingConfig(steps=30, lr=0.5, batch_size=48, seed=s) for s in (0, 1)]
    evaluation = EvaluationConfig(eval_every=30, eval_examples=256, noise_groups=None, alignment=False)
    quiet = compare_population(data, student, trainings, evaluation)
    assert capsys.readouterr().err == ""
    shown = compare_population(data, student, trainings, evaluation, progress=True)
    err = capsys.readouterr().err
    assert "training 2 students" in err and "30/30" in err
    for a, b in zip(quiet, shown, strict=True):
        assert_same_history(a.history, b.history)


def test_a_diverged_member_raises_what_the_run_alone_raises(data):
    student = StudentConfig(width=6, readout=5)
    trainings = [TrainingConfig(steps=40, lr=1e4, batch_size=48, seed=s) for s in (0, 1)]
    evaluation = EvaluationConfig(eval_every=20, eval_examples=256, noise_groups=None, alignment=False)
    with pytest.raises(TrainingDiverged) as alone:
        compare_student(data, student, trainings[0], evaluation)
    with pytest.raises(TrainingDiverged) as pop:
        compare_population(data, student, trainings, evaluation)
    assert str(pop.value) == str(alone.value) and "diverged" in str(pop.value)


def test_settings_outside_the_population_say_why_and_run_one_by_one(data):
    t = TrainingConfig()
    assert population_supported(StudentConfig(), t) is None
    assert population_supported(StudentConfig(batch_norm=True), t) == "Batch Norm"
    assert population_supported(StudentConfig(shared=True), t) == "shared weights"
    assert "SGD" in population_supported(StudentConfig(), dataclasses.replace(t, optimizer="adam"))
    assert "plateau" in population_supported(StudentConfig(), dataclasses.replace(t, plateau=5))
    assert population_supported(StudentConfig(), dataclasses.replace(t, batch_size=None)) == "full-batch GD"
    # different learning rates are two settings: one by one, the same results
    student = StudentConfig(width=4, readout=None)
    trainings = [TrainingConfig(steps=4, lr=lr, batch_size=32, seed=1) for lr in (0.1, 0.2)]
    evaluation = EvaluationConfig(eval_every=4, eval_examples=128, noise_groups=None, alignment=False)
    pop = compare_population(data, student, trainings, evaluation)
    assert [r.history for r in pop] == [compare_student(data, student, t, evaluation).history for t in trainings]
    with pytest.raises(ValueError, match="evaluations"):
        compare_population(data, student, trainings, [evaluation])
    with pytest.raises(ValueError, match="trainings"):
        compare_population(data, student, [], evaluation)
    with pytest.raises(ValueError, match="batches"):
        train_ladder_population([LadderStudent(data.ladder, 4)], [], steps=1, lr=0.1)


@pytest.mark.parametrize("gaussian", [False, True])
def test_population_batches_are_the_members_batches(data, gaussian):
    """Built at once from the members' rows (one one-hot for all, or the stored inputs), across chunk boundaries
    (chunks of 100 rows, minibatches of 64), the population's minibatch is the members' own stacked."""
    if gaussian:
        lad = data.ladder.with_emission(GaussianEmission.around_one_hot(8, 4, 0.3))
        data = sample_ladder(lad, 600, 1, progress=False)
    chunks = as_chunks(data, chunk_rows=100)
    members = [(0, False), (3, True)]
    pieces = [_training_pieces(chunks, 64, torch.Generator().manual_seed(s), 30, s if sh else None)
              for s, sh in members]
    batches = [_training_batches(chunks, 64, torch.Generator().manual_seed(s), torch.float64, 30, s if sh else None)
               for s, sh in members]
    for _ in range(5):
        x, y = population_batch([next(p) for p in pieces], torch.float64)
        want = [next(b) for b in batches]
        assert torch.equal(x, torch.stack([w[0] for w in want], 1)) and x.dtype == torch.float64
        assert torch.equal(y, torch.stack([w[1] for w in want]))


def test_population_step_runs_on_meta(data):
    """The population's step on device="meta": no host read and no device mismatch in the step (the rows are
    built on the CPU and moved once per step; the losses are read only at checkpoints, never on meta)."""
    lad = data.ladder
    nets = [LadderStudent(lad, 6, readout=5, seed=s, dtype=torch.float64, device="meta") for s in (0, 1)]
    traj = train_ladder_population(nets, _streams(data, [(0, False), (1, True)], 32), steps=3, lr=0.1, keep=[3])
    assert traj.diverged == [None, None]
    assert all(t.device.type == "meta" and t.shape == p.shape
               for t, p in zip(traj.snapshots[3][1], nets[1].parameters(), strict=True))


def test_the_alignment_at_the_ends_only_is_the_full_runs_there(data):
    """``_alignment_ends`` (smaso demo's shuffled-label control, whose last alignment alone is read, ranked at its
    first): the alignment at the first and the last checkpoint only, the full run's rows there exactly; a member
    without it keeps every checkpoint's; the population's flags are one per member."""
    student = StudentConfig(width=6, readout=5)
    trainings = [TrainingConfig(steps=12, lr=0.5, batch_size=48, seed=7, shuffle_labels=sh) for sh in (True, False)]
    evaluation = EvaluationConfig(eval_every=4, eval_examples=256, noise_groups=None, alignment=True)
    full = compare_student(data, student, trainings[0], evaluation)
    ends = compare_student(data, student, trainings[0], evaluation, _alignment_ends=True)
    pop = compare_population(data, student, trainings, evaluation,
                             _member_options=[{"_alignment_ends": True}, {}])
    assert [("alignment" in h) for h in full.history] == [True] * 4
    for run in (ends, pop[0]):
        assert [h["step"] for h in run.history] == [0, 4, 8, 12]
        assert [("alignment" in h) for h in run.history] == [True, False, False, True]
        for i in (0, -1):
            assert run.history[i]["alignment"] == full.history[i]["alignment"]
    assert all("alignment" in h for h in pop[1].history)
    with pytest.raises(ValueError, match="_member_options: expected one dict per member"):
        compare_population(data, student, trainings, evaluation, _member_options=[{"_alignment_ends": True}])


def test_the_last_checkpoints_only_are_the_full_runs_rows_there(data):
    """``_last_checkpoints`` (smaso demo's other seeds: the summary over seeds reads their first checkpoint and the
    last few): those checkpoints only, the full run's rows there (alone: exactly; in a population: its round-off)."""
    student = StudentConfig(width=6, readout=5)
    trainings = [TrainingConfig(steps=12, lr=0.5, batch_size=48, seed=5, shuffle_labels=sh) for sh in (False, True)]
    evaluation = EvaluationConfig(eval_every=4, eval_examples=256, noise_groups=3, alignment=False)
    full = compare_student(data, student, trainings[0], evaluation)
    alone = compare_student(data, student, trainings[0], evaluation, _last_checkpoints=2)
    pop = compare_population(data, student, trainings, evaluation,
                             _member_options=[{"_last_checkpoints": 2}, {}])
    assert [h["step"] for h in full.history] == [0, 4, 8, 12] == [h["step"] for h in pop[1].history]
    assert [h["step"] for h in alone.history] == [0, 8, 12] == [h["step"] for h in pop[0].history]
    kept = [full.history[i] for i in (0, 2, 3)]
    assert_same_history(alone.history, kept) and assert_same_history(pop[0].history, kept)
    assert all(torch.equal(a, b) for a, b in zip(full.student.parameters(), pop[0].student.parameters(),
                                                 strict=True))
    for bad in (0, -1, 1.5, True):  # (0 would slice every checkpoint, -1 all but the first)
        with pytest.raises(ValueError, match="_last_checkpoints: expected an integer >= 1"):
            compare_student(data, student, trainings[0], evaluation, _last_checkpoints=bad)
