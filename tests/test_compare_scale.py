"""compare_student's evaluation at scale (issue 39): the checkpoints' sums in the student's dtype (float32 batch
sums into float64 totals for a float32 student, within 1e-6 relative of float64 batch sums), and the streamed
evaluation sharded on a ProcessEngine with the same history as in one process."""

from __future__ import annotations

import math
import weakref

import pytest
import torch
from conftest_student import one_torch_thread  # noqa: F401 (fixture)

from smaso.student.compare import compare_student
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.frequency import FrequencyStatistics, accumulate_statistics, collect_statistics
from teachers import Ladder, sample_ladder
from teachers.chunked import open_dataset, sample_to_store
from teachers.engine import ProcessEngine

N, GROUPS = 3 * 1024 + 77, 4
N_STORE, CHUNK = 4096 + 77, 4096  # two chunks, the last one short


def _ladder() -> Ladder:
    return Ladder.random(depth=2, branching=3, events=5, seed=2)


def _run(data, dtype: torch.dtype, *, engine=None, eval_examples: int | None = None):
    return compare_student(data, StudentConfig(width=6, readout=None, dtype=dtype),
                           TrainingConfig(steps=3, lr=0.3, batch_size=256),
                           EvaluationConfig(eval_every=3, eval_examples=eval_examples, eval_batch_size=512,
                                            held_out=False, alignment=False, noise_groups=GROUPS), engine=engine)


def _tensors(stats: FrequencyStatistics) -> list[torch.Tensor]:
    """Every statistic (means, edge sums, dW, db, counts) as one list, in a fixed order."""
    out = [*stats.counts, *(t for k in sorted(stats.means) for t in stats.means[k] if t is not None)]
    out += [t for t in (*stats.Fc, *stats.Gp_tilde) if t is not None]
    return [*out, *stats.dW, *(stats.db or [])]


def _worst_relative(a: FrequencyStatistics, b: FrequencyStatistics) -> float:
    worst = 0.0
    for x, y in zip(_tensors(a), _tensors(b), strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype == torch.float64
        scale = y.norm().item()
        worst = max(worst, (x - y).norm().item() / scale if scale > 0 else (x - y).norm().item())
    return worst


def test_a_float32_students_checkpoint_sums_are_float32_batch_sums_within_1e6_of_float64():
    """In-memory evaluation set: the last checkpoint's statistics are those of float32 batch sums of the final
    student, within 1e-6 relative of float64 batch sums (the precision contract), jackknife replicates included;
    a float64 student's are the float64 sums, as before, bit for bit."""
    lad = _ladder()
    s = sample_ladder(lad, N, seed=4, progress=False)
    run = _run(s, torch.float32, eval_examples=N)
    net, got = run.student, run.final_stats
    # (without BN the evaluation set runs in batches of eval_batch_size)
    ref = collect_statistics(net, s.inputs(dtype=torch.float32), s.y, s.z, batch_size=512, dtype=torch.float64,
                             groups=GROUPS)
    assert 0 < _worst_relative(got, ref) <= 1e-6  # (0: the float32 path was not taken)
    for rep, rep64 in zip(got.leave_one_out(), ref.leave_one_out(), strict=True):
        assert _worst_relative(rep, rep64) <= 1e-6
    run64 = _run(s, torch.float64, eval_examples=N)
    exact = collect_statistics(run64.student, s.inputs(dtype=torch.float64), s.y, s.z, batch_size=512,
                               dtype=torch.float64, groups=GROUPS)
    assert all(torch.equal(a, b) for a, b in zip(_tensors(run64.final_stats), _tensors(exact), strict=True))


def test_the_streamed_evaluation_sharded_on_processes_is_the_one_process_run(tmp_path):
    """A store streamed chunk by chunk: on a ProcessEngine of 2 workers the history (every error, floor, the
    accuracy and the loss) is the one-process run's exactly, and the statistics are the float32 batch sums of
    accumulate_statistics."""
    data = open_dataset(sample_to_store(_ladder(), N_STORE, tmp_path / "s.zarr", seed=5, chunk_rows=CHUNK,
                                        progress=False))
    one = _run(data, torch.float32)
    with ProcessEngine(2) as engine:
        two = _run(data, torch.float32, engine=engine)
    assert one.history == two.history and len(one.history) == 2
    assert one.final()["num_examples"] == N_STORE and math.isfinite(one.final()["accuracy"])
    sums, correct = accumulate_statistics(one.student, data, batch_size=512, dtype=torch.float32, groups=GROUPS)
    assert correct / N_STORE == pytest.approx(one.final()["accuracy"], abs=0)
    assert all(torch.equal(a, b) for a, b in zip(_tensors(one.final_stats), _tensors(sums.result()), strict=True))


@pytest.mark.parametrize(("dtype", "batch_norm"), [(torch.float32, False), (torch.float64, False),
                                                   (torch.float32, True)])
def test_the_streamed_row_groups_hold_the_rows_of_batch_by_batch_groups(tmp_path, dtype, batch_norm):
    """A streamed pass with row groups (float32 sums, no BN: several batches at once, their rows reordered group by
    group) keeps in every group exactly the rows it holds batch by batch (its event counts and pair counts equal)
    and every sum within 1e-6 relative; float64 sums and BN take the batches one by one, bit for bit as before."""
    from smaso.student.frequency import ReplicateAccumulator
    from smaso.student.network import LadderStudent

    lad = _ladder()
    data = open_dataset(sample_to_store(lad, CHUNK + 77, tmp_path / "g.zarr", seed=7, chunk_rows=CHUNK, progress=False))
    net = LadderStudent(lad, 5, dtype=torch.float32, seed=1, batch_norm=batch_norm)
    bs = 300  # (batches cut across the groups' blocks and the chunks' ends)
    got, correct = accumulate_statistics(net, data, batch_size=bs, dtype=dtype, groups=GROUPS)
    ref, right = ReplicateAccumulator(net, dtype, GROUPS), 0
    for c in range(data.num_chunks):
        part = data.chunk(c)
        for lo in range(0, len(part), bs):
            r = slice(lo, min(lo + bs, len(part)))
            rec = net.forward_backward(part.inputs(r, torch.float32), part.y[r], "squared", stacked=True)
            ref.add(rec, part.z[r])
            right += int((rec.fbar[0][:, 0].argmax(-1) == part.y[r]).sum())
    assert correct == right
    regrouped = dtype == torch.float32 and not batch_norm
    for g, (a, b) in enumerate(zip(got.parts, ref.parts, strict=True)):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa["n"] == sb["n"] > 0
        for key in ("counts", "joint_counts"):
            assert all((x is None and y is None) or torch.equal(x, y) for x, y in zip(sa[key], sb[key], strict=True))
        for key in ("own", "fc", "gp", "dW", "db"):
            for x, y in zip(sa[key], sb[key], strict=True):
                if x is None:
                    continue
                if regrouped:
                    assert (x - y).norm() <= 1e-6 * y.norm(), (g, key)
                else:
                    assert torch.equal(x, y), (g, key)


def test_strided_record_rows_are_the_einsums_to_round_off():
    """record_rows(strided=True) (each Delta W by one matmul per child place on strided views of a stacked record)
    gives every field of the default's: the per-example views equal, Delta W and db within float64 round-off."""
    from smaso.student.mergeable import record_rows
    from smaso.student.network import LadderStudent

    lad = _ladder()
    assert lad.is_uniform()
    s = sample_ladder(lad, 500, seed=8, progress=False)
    net = LadderStudent(lad, 5, seed=2, dtype=torch.float64)
    rec = net.forward_backward(s.inputs(dtype=torch.float64), s.y, "squared", stacked=True)
    for rows in (slice(0, 500), slice(37, 204), slice(499, 500)):
        a, b = record_rows(rec, rows), record_rows(rec, rows, strided=True)
        assert all(torch.equal(x, y) for x, y in zip(a.fbar, b.fbar, strict=True))
        for x, y in zip([*a.dW, *a.db], [*b.dW, *b.db], strict=True):
            if x is None:  # (db of a level without biases)
                assert y is None
                continue
            assert x.shape == y.shape and (x - y).abs().max() <= 1e-14 * max(x.abs().max(), 1e-300)


class _Result:
    """A task's result that counts its live copies in this process (made here when unpickled)."""

    alive: weakref.WeakSet = weakref.WeakSet()

    def __init__(self, i: int) -> None:
        self.i = i

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        _Result.alive.add(self)


def _task(i: int) -> _Result:
    return _Result(i)


def test_a_process_fold_keeps_a_few_results_in_memory_whatever_the_tasks():
    """ProcessEngine.fold: results merged in order and dropped once merged, at most AHEAD tasks per worker in
    flight, so a pass over many chunks holds a few chunks' results (memory flat in N), not every one."""
    from teachers.engine import AHEAD

    live = []

    def merge(acc: list, r: _Result) -> list:
        live.append(len(_Result.alive))
        return [*acc, r.i]

    with ProcessEngine(2) as engine:
        assert engine.fold(_task, range(40), merge=merge, init=[]) == list(range(40))
    assert 0 < max(live) <= AHEAD * 2 + 1
