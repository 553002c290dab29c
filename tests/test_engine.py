"""The Dask engine: a LocalCluster of 2 worker processes gives the same store bytes, counts and student
statistics as one process; the core library never imports Dask."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from smaso.student.compare import compare_student
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.frequency import accumulate_statistics
from smaso.student.network import LadderStudent
from teachers import Ladder
from teachers.chunked import open_dataset, sample_to_store
from teachers.engine import MALLOC_TRIM_CONFIG, DaskEngine, EngineError, EngineWarning, SerialEngine, get_engine
from teachers.statistics import count_events

pytest.importorskip("dask.distributed")
pytestmark = pytest.mark.slow

N, CHUNK = 5 * 4096 + 123, 4096  # six chunks, the last one short


@pytest.fixture(scope="module")
def dask_engine():
    with DaskEngine(workers=2, threads_per_worker=1) as engine:
        yield engine


def _ladder(emission="onehot"):
    return Ladder.random(depth=2, branching=[3, 2], events=[3, 4, 3], concentration=0.7, seed=4,
                         emission=emission, sigma=0.4)


@pytest.mark.parametrize("emission", ["onehot", "gaussian"])
def test_two_workers_write_the_same_store_as_one_process(tmp_path, dask_engine, emission):
    lad = _ladder(emission)
    serial = sample_to_store(lad, N, tmp_path / "serial.zarr", seed=3, chunk_rows=CHUNK)
    dask = sample_to_store(lad, N, tmp_path / "dask.zarr", seed=3, chunk_rows=CHUNK, engine=dask_engine)
    a, b = open_dataset(serial), open_dataset(dask)
    assert dask_engine.workers == 2
    sa, sb = a.to_sample(), b.to_sample()
    assert torch.equal(sa.z, sb.z)
    if emission == "gaussian":
        assert torch.equal(sa.x, sb.x)
    assert a.verify()["chunks"] == b.verify()["chunks"] == 6


def test_counts_and_statistics_on_two_workers_equal_one_process_bit_for_bit(tmp_path, dask_engine):
    lad = _ladder("gaussian")
    data = open_dataset(sample_to_store(lad, N, tmp_path / "d.zarr", seed=5, chunk_rows=CHUNK))
    c1, c2 = count_events(data), count_events(data, engine=dask_engine)
    for x, y in zip(c1.counts + c1.pairs[1:], c2.counts + c2.pairs[1:], strict=True):
        assert torch.equal(x, y)
    assert c1.num_examples == c2.num_examples == N
    st = LadderStudent(lad, [4], activation="relu", batch_norm=True, dtype=torch.float64, seed=1)
    (a1, r1), (a2, r2) = (accumulate_statistics(st, data, batch_size=1000, dtype=torch.float64, engine=e)
                          for e in (None, dask_engine))
    assert r1 == r2
    s1, s2 = a1.state_dict(), a2.state_dict()
    for key in ("counts", "own", "fc", "gp", "dW", "db"):
        for x, y in zip(s1[key], s2[key], strict=True):
            assert (x is None and y is None) or torch.equal(x, y), key
    assert s1["loss_sum"] == s2["loss_sum"]


def test_graph_store_and_graph_statistics_on_two_workers_equal_one_process(tmp_path, dask_engine):
    from teachers.ladder import Ladder

    g = Ladder.conv1d(6, [3, 2, 3], [1, 1, 1], [3, 3, 2, 2], sigma=0.5, seed=2)
    serial = open_dataset(sample_to_store(g, N, tmp_path / "s.zarr", seed=1, chunk_rows=CHUNK))
    dask = open_dataset(sample_to_store(g, N, tmp_path / "d.zarr", seed=1, chunk_rows=CHUNK, engine=dask_engine))
    assert torch.equal(serial.to_sample().z, dask.to_sample().z) and torch.equal(serial.to_sample().x,
                                                                                 dask.to_sample().x)
    st = LadderStudent(g, 3, activation="silu", dtype=torch.float64, seed=1)
    (a1, r1), (a2, r2) = (accumulate_statistics(st, serial, batch_size=1000, dtype=torch.float64, engine=e)
                          for e in (None, dask_engine))
    assert r1 == r2
    s1, s2 = a1.state_dict(), a2.state_dict()
    for key in ("counts", "joint_counts", "own", "fc", "gp", "dW", "db"):
        for x, y in zip(s1[key], s2[key], strict=True):
            assert (x is None and y is None) or torch.equal(x, y), key


def test_streamed_comparison_is_the_same_on_the_engine(tmp_path, dask_engine):
    lad = _ladder()
    data = open_dataset(sample_to_store(lad, N, tmp_path / "c.zarr", seed=6, chunk_rows=CHUNK))
    runs = [compare_student(data, engine=e, student=StudentConfig(width=4),
                            training=TrainingConfig(steps=20, lr=0.3, batch_size=64),
                            evaluation=EvaluationConfig(held_out=False, eval_every=10, eval_examples=None,
                                                        eval_batch_size=2048)) for e in (None, dask_engine)]
    assert runs[0].history == runs[1].history
    assert runs[0].final()["num_examples"] == N


def test_own_cluster_unsets_the_nannys_malloc_trim_and_a_foreign_one_is_warned_about(dask_engine):
    # (the variable freezes glibc's mmap threshold: measured half speed for the sampler)
    import os

    import dask
    from dask.distributed import Client, LocalCluster

    env = dask_engine.client.run(os.environ.get, "MALLOC_TRIM_THRESHOLD_")
    assert len(env) == 2 and set(env.values()) == {None}
    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                           scheduler_kwargs={"dashboard_address": ":0"}, silence_logs=40)
    with cluster, Client(cluster) as client:
        assert set(client.run(os.environ.get, "MALLOC_TRIM_THRESHOLD_").values()) == {"65536"}
        with pytest.warns(EngineWarning, match="MALLOC_TRIM_THRESHOLD_"):
            DaskEngine(client=client).close()
    # the documented fix is a Dask config that removes the variable
    import yaml

    cfg = yaml.safe_load(MALLOC_TRIM_CONFIG)
    with dask.config.set(cfg):
        from distributed.nanny import _get_env_variables

        assert "MALLOC_TRIM_THRESHOLD_" not in _get_env_variables("distributed.nanny.pre-spawn-environ")


def _chunk_index(c: int, ladder: Ladder) -> int:
    return c + ladder.depth


def test_back_to_back_passes_with_the_same_argument(dask_engine):
    # regression: content-hashed scatter keys made the second pass lose its (just released) dependency
    lad = _ladder()
    for _ in range(4):
        assert dask_engine.map(_chunk_index, list(range(6)), lad) == [c + 2 for c in range(6)]
        assert dask_engine.fold(_chunk_index, list(range(3)), lad, merge=lambda a, b: a * 10 + b, init=0) == 234


def test_engine_arguments():
    assert isinstance(get_engine(None), SerialEngine)
    with pytest.raises(TypeError, match="engine"):
        get_engine("dask")
    with pytest.raises(ValueError, match="workers"):
        DaskEngine(workers=0)
    with pytest.raises(EngineError, match="cannot reach"):
        DaskEngine("tcp://127.0.0.1:9", timeout=1.0)
    for bad in (0, -1.0, float("inf"), float("nan"), "5", True):
        with pytest.raises(ValueError, match="timeout: expected a positive number of seconds"):
            DaskEngine("tcp://127.0.0.1:9", timeout=bad)


def test_a_worker_without_the_library_is_named():
    """Dask hands a worker's failure to unpickle an argument back as a plain ``Exception`` of its text."""
    from teachers.engine import _missing_module

    assert _missing_module(Exception('ModuleNotFoundError("No module named \'teachers\'")')) == \
        "No module named 'teachers'"
    assert _missing_module(ValueError("x: expected ...")) is None


def test_the_core_library_does_not_import_dask():
    code = ("import sys, smaso, teachers, inference, teachers.chunked, teachers.engine, teachers.statistics, "
            "smaso.student.compare, smaso.cli; smaso.compare_student; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_noise_sweep_on_two_workers_equals_one_process(dask_engine):
    from smaso.student.compare import noise_sweep

    kw = dict(student=StudentConfig(width=4, dtype=torch.float64), training=TrainingConfig(steps=12, lr=0.3),
              evaluation=EvaluationConfig(eval_every=6, held_out=False))
    lad = Ladder.random(depth=2, branching=2, events=3, mode="bottomup", seed=2)
    here = noise_sweep(lad, [0.0, 0.3, 1.0], 600, seed=1, **kw)
    there = noise_sweep(lad, [0.0, 0.3, 1.0], 600, seed=1, engine=dask_engine, **kw)
    assert [r["sigma"] for r in there] == [0.0, 0.3, 1.0]
    for a, b in zip(here, there, strict=True):
        assert a["accuracy"] == b["accuracy"] and a["step"] == b["step"]
        # float64 runs of one seed: the same to round-off whatever process (and thread count) runs them
        assert b["max_error"] == pytest.approx(a["max_error"], rel=1e-9, abs=1e-13)
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-12)
    with pytest.raises(TypeError, match="sample"):
        noise_sweep(lad, [0.0], 100, sample=None)


def test_depth_experiments_on_two_workers_equal_one_process(dask_engine):
    from smaso.depth.separation import depth_separation, piece_survey

    kw = dict(steps=40, seeds=(0, 1), n_train=256)
    here, there = depth_separation((1, 2), **kw), depth_separation((1, 2), engine=dask_engine, **kw)
    key = [(r.L, r.student, r.widths, r.pieces, r.bound) for r in here]
    assert key == [(r.L, r.student, r.widths, r.pieces, r.bound) for r in there]
    assert [r.l1 for r in there] == pytest.approx([r.l1 for r in here], rel=1e-12)
    archs = [(3,), (2, 2)]
    a = piece_survey(archs, seeds=(0, 1), train_k=3, steps=30, tent_ks=(2,))
    b = piece_survey(archs, seeds=(0, 1), train_k=3, steps=30, tent_ks=(2,), engine=dask_engine)
    assert a == b and len(a) == 9


def test_digits_example_on_a_local_cluster_equals_one_process(tmp_path):
    pytest.importorskip("sklearn")
    import json
    import os
    from pathlib import Path

    root = Path(__file__).parents[1]
    script = root / "examples" / "digits_table2.py"
    common = ["--seeds", "2", "--epochs", "1", "--model", "mlp,cnn", "--activations", "relu",
              "--orthogonality", "none,penalty,orthogonal", "--lams", "1", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}
    outs = []
    for extra, name in (([], "serial.json"), (["--engine", "dask", "--workers", "2"], "dask.json")):
        subprocess.run([sys.executable, str(script), *common, *extra, "--out", str(tmp_path / name)], check=True,
                       capture_output=True, text=True, timeout=300, env=env)
        outs.append(json.loads((tmp_path / name).read_text()))
    assert [(r["model"], r["orthogonality"]) for r in outs[1]["rows"]] == [
        (m, o) for m in ("mlp", "cnn") for o in ("none", "penalty", "orthogonal")]
    for a, b in zip(outs[0]["rows"], outs[1]["rows"], strict=True):
        assert [r["accuracy"] for r in a["runs"]] == [r["accuracy"] for r in b["runs"]]
        assert [r["train_loss"] for r in a["runs"]] == [r["train_loss"] for r in b["runs"]]
    assert outs[0]["comparisons"] == outs[1]["comparisons"]


def test_student_seeds_on_two_workers_equal_one_process(dask_engine):
    from smaso.student.seeds import compare_seeds

    kw = dict(width=4, steps=8, lr=0.3, eval_every=4, eval_examples=300, noise_groups=4, dtype=torch.float64)
    from teachers import sample_ladder

    data = sample_ladder(_ladder(), 900, 2)
    here, runs_here = compare_seeds(data, 3, **kw)
    there, runs_there = compare_seeds(data, 3, engine=dask_engine, **kw)
    assert [r["seed"] for r in runs_there] == [0, 1, 2]
    for a, b in zip(runs_here, runs_there, strict=True):
        assert [h["accuracy"] for h in a["history"]] == [h["accuracy"] for h in b["history"]]
        for ha, hb in zip(a["history"], b["history"], strict=True):
            for ra, rb in zip(ha["levels"], hb["levels"], strict=True):
                assert rb["F_propagated"] == pytest.approx(ra["F_propagated"], rel=1e-9, abs=1e-13)
    assert there.seeds == here.seeds and there.steps == here.steps
