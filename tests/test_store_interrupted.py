"""A store write interrupted while zarr's IO thread still writes leaves nothing behind.

zarr runs every write as a task on its IO thread's event loop and the calling thread waits for it; SIGTERM (raised
as an exception by the CLI) or Ctrl-C interrupts that wait, not the write.  Before the fix the write went on after
the caller had removed the partial store, and its chunk file re-created ``.big.zarr.partial`` (seen once in the
default tier, ``test_sigterm_leaves_nothing_behind[.zarr]``).  Here the interruption is made certain: every chunk
file lands 0.3 s late (a slow disk) and one wait raises ``KeyboardInterrupt`` as a signal handler would; both tests
fail without :func:`teachers.store._settle_writes`.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import torch
from zarr.core import sync
from zarr.storage import LocalStore

import teachers.store as store
from teachers import Ladder, sample_ladder
from teachers.store import sample_to_store
from teachers.store_reader import open_dataset

LADDER = Ladder.random(depth=3, branching=3, events=5, seed=0)
LATE = 0.3  # seconds each chunk file is held back


@pytest.fixture
def slow_disk(monkeypatch):
    """Data chunk files written ``LATE`` seconds after zarr is asked to; ``interrupt(c)`` makes the wait for chunk
    c's file raise KeyboardInterrupt while that file is still being written (as a signal handler would)."""
    real_set, real_wait = LocalStore.set, sync.wait
    state = {"target": None, "in_flight": False}

    async def late_set(self, key, value):
        if key.startswith("c/"):  # (the data arrays' chunk files, keyed in each array's own folder; not the spec's)
            if key.split("/")[1] == str(state["target"]):
                state["in_flight"] = True
            await asyncio.sleep(LATE)
        return await real_set(self, key, value)

    def wait(fs, **kw):
        if state["target"] is not None:
            while not state["in_flight"] and not all(f.done() for f in fs):
                time.sleep(0.005)
            if state["in_flight"]:  # (raised even if a stalled test thread saw the write finish first)
                state["target"] = None
                raise KeyboardInterrupt("a signal while zarr writes")
        return real_wait(fs, **kw)

    monkeypatch.setattr(LocalStore, "set", late_set)
    monkeypatch.setattr(sync, "wait", wait)

    def interrupt(chunk: int) -> None:
        state["target"] = chunk

    return interrupt


def _left(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir())


@pytest.mark.parametrize("chunk", [0, 2])
def test_a_chunk_write_interrupted_in_flight_leaves_nothing(tmp_path, slow_disk, monkeypatch, chunk):
    slow_disk(chunk)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        sample_to_store(LADDER, 3 * 4096, tmp_path / "big.zarr", seed=0, chunk_rows=4096, compress=False)
    assert time.monotonic() - t0 >= LATE  # the cleanup waited for the write in flight...
    assert _left(tmp_path) == []
    time.sleep(2 * LATE)
    assert _left(tmp_path) == []  # ...so nothing lands after it
    # and the next write of the same path succeeds, with the bytes of an uninterrupted sample
    monkeypatch.undo()
    sample_to_store(LADDER, 3 * 4096, tmp_path / "big.zarr", seed=0, chunk_rows=4096, compress=False)
    assert torch.equal(open_dataset(tmp_path / "big.zarr").to_sample().z, sample_ladder(LADDER, 3 * 4096, seed=0).z)


def test_the_settle_is_a_no_op_without_writes_in_flight():
    t0 = time.monotonic()
    store._settle_writes()
    assert time.monotonic() - t0 < LATE
