"""Where a dataset pass runs: in this process, or as tasks on a Dask cluster.

Every pass over a dataset that can be split (sampling a store chunk by chunk, counting events,
collecting a fixed student's statistics) is written as one *task per chunk*: a module-level function
of the chunk index whose result is small (checksums, or a mergeable state such as
:class:`~teachers.statistics.EventCounts`).  An engine runs the tasks and hands back their results in
chunk order; the caller merges them in that order.  So the bytes of a store and the statistics of a
pass do not depend on the engine, nor on how many workers it has:

- :class:`SerialEngine` (the default everywhere): the tasks one after the other in this process;
- :class:`ProcessEngine`: the tasks in a pool of worker processes on this machine, one torch thread each
  (no Dask needed; for work that is parallel by nature, such as the student seeds of ``smaso demo``);
- :class:`DaskEngine`: the tasks on a ``dask.distributed`` cluster, either an existing scheduler
  (``scheduler="tcp://host:8786"``) or a ``LocalCluster`` of ``workers`` processes started here.

The core library never imports Dask; :class:`DaskEngine` imports ``dask.distributed`` when it is
created, and says which extra to install when it is missing (``pip install 'smaso[distributed]'``).

Each Dask worker process runs ``threads_per_worker`` torch threads (default 1, with as many processes as
cores: a second thread gains little and oversubscription loses most of the sampler's throughput;
``benchmarks/bench_out_of_core.py``).  Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_``, which halves the
sampler's speed (every large tensor mapped afresh): a ``LocalCluster`` started here unsets it; for workers
started elsewhere the engine warns (:class:`EngineWarning`) and :data:`MALLOC_TRIM_CONFIG` fixes it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor
    from typing import Self

__all__ = ["CONNECT_TIMEOUT", "MALLOC_TRIM_CONFIG", "DaskEngine", "EngineError", "EngineWarning", "ProcessEngine",
           "SerialEngine", "get_engine", "make_engine"]


class EngineError(RuntimeError):
    """The requested engine cannot run here (Dask not installed, no scheduler at the address, the scheduler
    lost mid-run, workers that cannot import the library, ...)."""


#: Seconds a :class:`DaskEngine` waits for its scheduler: to connect, and to reconnect after losing it
#: before the pass is given up (Dask's own default, 30 s, leaves a user staring at a dead job).
CONNECT_TIMEOUT = 5.0


def _progress_bar(total: int, desc: str | None) -> Any:
    """A tqdm bar over ``total`` chunks titled ``desc`` (disabled when ``desc`` is None)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="chunk", disable=not desc)


class _Engine:
    """What both engines share: :meth:`map` on top of their ``fold``, and use as a context manager."""

    fold: Callable[..., Any]  # each engine's own
    close: Callable[[], None]

    def map(self, fn: Callable[..., Any], items: Sequence, *args: Any, progress: str | None = None,
            **kwargs: Any) -> list:
        """``[fn(item, *args, **kwargs) for item in items]`` (each one task), in ``items``' order, with a tqdm bar
        titled ``progress`` (None: no bar)."""
        return self.fold(fn, items, *args, merge=_append, init=[], progress=progress, **kwargs)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SerialEngine(_Engine):
    """Runs every task in this process, one after the other (the engine of ``engine=None``)."""

    workers = 1

    def fold(self, fn: Callable[..., Any], items: Sequence, *args: Any, merge: Callable[[Any, Any], Any], init: Any,
             progress: str | None = None, **kwargs: Any) -> Any:
        """``merge(... merge(merge(init, fn(items[0])), fn(items[1])) ...)``: each result is merged as soon as it
        exists and then dropped, so only the running total is kept (memory of one chunk's result)."""
        acc = init
        with _progress_bar(len(items), progress) as bar:
            for item in items:
                acc = merge(acc, fn(item, *args, **kwargs))
                bar.update(1)
        return acc

    def close(self) -> None:
        """Nothing to release."""

    def __repr__(self) -> str:
        return "SerialEngine()"


#: Tasks in flight per worker of a :class:`ProcessEngine` fold (one running, one queued, one result waiting).
AHEAD = 3


def _one_thread() -> None:
    """A :class:`ProcessEngine` worker's start: one torch thread (the workers are the parallelism; intra-op threads
    on top oversubscribe the cores and lose most of the throughput under contention, bench_out_of_core.py)."""
    import torch

    torch.set_num_threads(1)


class ProcessEngine(_Engine):
    """Runs the tasks in ``workers`` processes of this machine (a :class:`concurrent.futures.ProcessPoolExecutor`),
    one torch thread each; results come back in ``items``' order and are merged in that order, so they do not
    depend on ``workers``.  Tasks and their arguments must be picklable (module-level functions).

    The pool forks where it can (Linux, and this process at one torch thread: a fork after torch's intra-op
    thread pool has run can hang the child), else it spawns fresh interpreters (each imports torch: seconds).
    """

    def __init__(self, workers: int) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers: expected a positive integer, got {workers!r}")
        import multiprocessing

        import torch

        self.workers = workers
        fork = "fork" in multiprocessing.get_all_start_methods() and torch.get_num_threads() == 1
        self._context = multiprocessing.get_context("fork" if fork else "spawn")
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        from concurrent.futures import ProcessPoolExecutor

        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=self._context, initializer=_one_thread)
        return self._pool

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        """``fn(*args, **kwargs)`` in the pool, now: a :class:`concurrent.futures.Future` (this process goes on)."""
        return self._executor().submit(fn, *args, **kwargs)

    def fold(self, fn: Callable[..., Any], items: Sequence, *args: Any, merge: Callable[[Any, Any], Any], init: Any,
             progress: str | None = None, **kwargs: Any) -> Any:
        """As :meth:`SerialEngine.fold`, the tasks run in the pool; each result merged in ``items``' order.

        At most :data:`AHEAD` tasks per worker are in flight, and a result is dropped once merged: memory of a few
        results whatever the number of tasks (a list of every future kept every result, 40 MB per chunk of a
        jackknife's statistics, until the pass ended)."""
        from collections import deque

        pool = self._executor()
        todo = iter(items)
        pending = deque(pool.submit(fn, item, *args, **kwargs) for item in islice(todo, AHEAD * self.workers))
        acc = init
        with _progress_bar(len(items), progress) as bar:
            while pending:
                result = pending.popleft().result()
                for item in islice(todo, 1):  # the next task in, before this result is merged
                    pending.append(pool.submit(fn, item, *args, **kwargs))
                acc = merge(acc, result)
                del result
                bar.update(1)
        return acc

    def close(self) -> None:
        """Stop the worker processes."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __repr__(self) -> str:
        return f"ProcessEngine(workers={self.workers})"


class DaskEngine(_Engine):
    """Runs the tasks on a ``dask.distributed`` cluster.

    :param scheduler: address of a running scheduler (``"tcp://host:8786"``); ``None`` starts a
        ``LocalCluster`` of ``workers`` processes on this machine, closed with the engine.
    :param workers: worker processes of the local cluster (ignored with ``scheduler``).
    :param threads_per_worker: torch threads (and Dask task slots) per worker process.
    :param client: an existing ``dask.distributed.Client`` to use instead (not closed by the engine).
    :param timeout: seconds to wait for the scheduler: to connect to ``scheduler``, and to reconnect after
        losing it mid-pass (then :meth:`fold` raises :class:`EngineError`).
    :raises EngineError: Dask is not installed, or the scheduler cannot be reached.

    Use as a context manager (``with DaskEngine(workers=2) as engine: ...``) or call :meth:`close`.
    """

    def __init__(self, scheduler: str | None = None, *, workers: int | None = None, threads_per_worker: int = 1,
                 client: Any = None, timeout: float = CONNECT_TIMEOUT) -> None:
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise EngineError("the dask engine needs dask.distributed: pip install 'smaso[distributed]'") from None
        for name, v in (("workers", workers), ("threads_per_worker", threads_per_worker)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{name}: expected a positive integer, got {v!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
            raise ValueError(f"timeout: expected a positive number of seconds, got {timeout!r}")
        self.threads_per_worker = threads_per_worker
        self._cluster = None
        self._own_client = client is None
        if client is not None:
            self.client = client
        elif scheduler is not None:
            if not isinstance(scheduler, str) or not scheduler:
                raise ValueError(f"scheduler: expected an address such as 'tcp://host:8786', got {scheduler!r}")
            try:
                self.client = Client(scheduler, timeout=f"{float(timeout)}s")
            except (OSError, TimeoutError) as e:
                raise EngineError(f"scheduler: cannot reach {scheduler!r} ({e})") from None
        else:
            import dask

            n = workers or max(1, os.cpu_count() or 1)
            # unset the nanny's MALLOC_TRIM_THRESHOLD_ (module docstring) the way Dask documents; the variable
            # is still honoured when this process has it set
            with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
                # (the scheduler's HTTP server binds 8787 even without a dashboard; ":0" lets two clusters coexist)
                self._cluster = LocalCluster(n_workers=n, threads_per_worker=threads_per_worker, processes=True,
                                             dashboard_address=None, scheduler_kwargs={"dashboard_address": ":0"},
                                             silence_logs=40)
            self.client = Client(self._cluster, timeout=f"{float(timeout)}s")
        import torch

        self.client.run(torch.set_num_threads, threads_per_worker)
        if self._cluster is None:
            _warn_about_malloc_trim(self.client)

    @property
    def workers(self) -> int:
        """Worker processes the scheduler knows of now."""
        return len(self.client.scheduler_info(n_workers=-1)["workers"])

    def fold(self, fn: Callable[..., Any], items: Sequence, *args: Any, merge: Callable[[Any, Any], Any], init: Any,
             progress: str | None = None, **kwargs: Any) -> Any:
        """Like :meth:`SerialEngine.fold`, with the tasks on the cluster: results are merged in ``items``' order
        as soon as the next one in that order is done (later ones wait, then are dropped once merged), so
        the total is the same as in one process, bit for bit.  Large arguments (a ladder, a student, a dataset
        handle) are scattered once to every worker; a failed task's exception is raised here (the other tasks
        are cancelled)."""
        from dask.distributed import as_completed

        client = self.client
        address = client.scheduler.address
        futures: list = []
        acc, waiting, nxt = init, {}, 0
        with _progress_bar(len(items), progress) as bar:
            try:
                # hash=False: a random key per call.  With content keys, a second pass with the same argument
                # (the same ladder or dataset) reuses the key while the first pass's release of it is still in
                # flight, and the scheduler cancels its tasks for "lost dependencies" (or they wait forever)
                shared = [client.scatter(a, broadcast=True, hash=False) if _is_large(a) else a for a in args]
                shared_kw = {k: client.scatter(v, broadcast=True, hash=False) if _is_large(v) else v
                             for k, v in kwargs.items()}
                futures = [client.submit(fn, item, *shared, pure=False, **shared_kw) for item in items]
                index = {f.key: i for i, f in enumerate(futures)}
                for fut in as_completed(futures):
                    waiting[index[fut.key]] = fut.result()  # raises a failed task's exception
                    futures[index[fut.key]] = None  # let the cluster forget it
                    while nxt in waiting:
                        acc = merge(acc, waiting.pop(nxt))
                        nxt += 1
                    bar.update(1)
                return acc
            except Exception as e:
                lost = _scheduler_lost(e) or client.status in ("closing", "closed")
                if not lost:
                    client.cancel([f for f in futures if f is not None])
                if lost:
                    done = nxt + len(waiting)
                    raise EngineError(f"the Dask scheduler at {address} went away after {done} of {len(items)} "
                                      "chunks") from None
                if _missing_module(e):
                    raise EngineError(f"the Dask workers of {address} cannot load this library's objects "
                                      f"({_missing_module(e)}): install smaso in the workers' environment") from None
                raise
            except BaseException:
                if client.status not in ("closing", "closed"):
                    client.cancel([f for f in futures if f is not None])
                raise

    def close(self) -> None:
        """Close the client and the local cluster this engine started."""
        if self._own_client:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def __repr__(self) -> str:
        return f"DaskEngine({self.client.scheduler.address!r}, threads_per_worker={self.threads_per_worker})"


def _scheduler_lost(error: Exception) -> bool:
    """The pass failed because the client lost its scheduler: Dask cancels every future with the reason
    ``scheduler-connection-lost`` once its reconnection window (the client's timeout) has passed."""
    from distributed.client import FutureCancelledError
    from distributed.comm import CommClosedError

    return isinstance(error, CommClosedError) or (isinstance(error, FutureCancelledError)
                                                  and error.reason == "scheduler-connection-lost")


def _missing_module(error: Exception) -> str | None:
    """``"No module named 'x'"`` when a worker could not unpickle a task or an argument (Dask passes the
    worker's error on as a plain ``Exception`` of its text), else None."""
    import re

    m = re.search(r"No module named '[^']+'", str(error))
    return m.group(0) if m else None


def _append(acc: list, item: Any) -> list:
    acc.append(item)
    return acc


class EngineWarning(UserWarning):
    """The cluster runs, but in a way measured to be slow."""


#: A Dask configuration file that stops the nanny from setting ``MALLOC_TRIM_THRESHOLD_`` in the
#: workers it spawns (put it in ``~/.config/dask/`` on every worker machine, or point ``DASK_CONFIG``
#: at its folder, before ``dask worker`` starts).
MALLOC_TRIM_CONFIG = "distributed:\n  nanny:\n    pre-spawn-environ:\n      MALLOC_TRIM_THRESHOLD_: null\n"


def _warn_about_malloc_trim(client: Any) -> None:
    """Warn when workers of a cluster started elsewhere run with Dask's ``MALLOC_TRIM_THRESHOLD_``."""
    env = client.run(os.environ.get, "MALLOC_TRIM_THRESHOLD_")
    slow = sorted(addr for addr, v in env.items() if v is not None)
    if slow:
        import warnings

        warnings.warn(
            f"{len(slow)} of {len(env)} Dask workers (e.g. {slow[0]}) run with MALLOC_TRIM_THRESHOLD_ set (the "
            "nanny's default), which halves the ladder sampler's speed; start them with this Dask config "
            f"(teachers.engine.MALLOC_TRIM_CONFIG):\n{MALLOC_TRIM_CONFIG}", EngineWarning, stacklevel=3)


def _is_large(value: object) -> bool:
    """Objects worth scattering once instead of sending with every task."""
    return not isinstance(value, (str, bytes, int, float, bool, type(None), os.PathLike, tuple, list, dict))


def get_engine(engine: SerialEngine | ProcessEngine | DaskEngine | None) -> SerialEngine | ProcessEngine | DaskEngine:
    """``engine``, or a :class:`SerialEngine` for None.

    :raises TypeError: anything else.
    """
    if engine is None:
        return SerialEngine()
    if not callable(getattr(engine, "map", None)):
        raise TypeError(f"engine: expected None, a SerialEngine, a ProcessEngine or a DaskEngine, got "
                        f"{type(engine).__name__}")
    return engine


def make_engine(kind: str = "serial", *, scheduler: str | None = None, workers: int | None = None,
                threads_per_worker: int = 1, timeout: float = CONNECT_TIMEOUT) -> SerialEngine | DaskEngine:
    """An engine by name, for scripts and command lines (``--engine serial|dask``).

    :param kind: ``"serial"`` (this process) or ``"dask"`` (a :class:`DaskEngine`).
    :param scheduler, workers, threads_per_worker, timeout: as in :class:`DaskEngine`; with ``"serial"``,
        ``scheduler`` and ``workers`` must be left None.
    :raises ValueError: an unknown ``kind``, or Dask options with ``"serial"``.
    :raises EngineError: as :class:`DaskEngine`.
    """
    if kind == "serial":
        if scheduler is not None or workers is not None:
            raise ValueError("scheduler/workers: they apply to the dask engine only")
        return SerialEngine()
    if kind == "dask":
        return DaskEngine(scheduler, workers=workers, threads_per_worker=threads_per_worker, timeout=timeout)
    raise ValueError(f"engine: expected 'serial' or 'dask', got {kind!r}")
