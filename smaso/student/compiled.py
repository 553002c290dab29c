"""The student's fused CPU kernels: a function of tensors compiled once per shape by ``torch.compile`` (inductor).

Why (issue 39): a per-event sum ``S[r, k, :] = sum_n 1[z[r, n] = k] X[r, n, :]`` is a one-hot batched matmul in
eager torch (``K x N @ N x W`` per region, about 20 GMAC/s on such thin products, some 3-5x the floor of reading
``X`` once), and the eager segment sums (``index_add_``, ``scatter_add_``, ``embedding_bag``) are no faster once
their index arithmetic is counted (``benchmarks/bench_event_sums.py``).  Inductor writes the same sum as one C++
loop over the rows that reads ``X`` once, and fuses the elementwise products that make ``X`` into that loop.  On
one core, 341 regions x 1024 rows x 16 units x 6 quantities, 4 events: one-hot bmm 17.0 ms, eager ``index_add_``
31.4 ms, compiled ``index_add_`` 7.6 ms, at the memory floor (a scratch measurement; the benchmarks own the recorded
numbers).

The price is a compilation per distinct input shape and dtype (seconds, once per process), so a kernel is compiled
only where the caller asks (``kernel="compiled"``) or where the work amortises it (``kernel="auto"``, decided by the
caller from the rows it will see), and only on the CPU with inductor's C++ compiler present: everywhere else (CUDA,
``meta``, no compiler) :func:`compiled` runs the eager function, which is the same arithmetic, so results agree to
float32 round-off (the order of a sum may differ) and exactly in float64 where the sums are exact.

A compiled kernel is built and run under one thread (:func:`run_compiled`, :func:`serial`): at more threads inductor
parallelises a scatter over rows with atomic adds, whose order (and so a float sum's last bits) changes from call to
call (20 distinct results in 20 calls of the leaves' weight gradient compiled at 2 threads), and the project promises
the same bytes whatever the thread count.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Literal, TypeVar

import torch
import torch._dynamo

__all__ = ["KERNELS", "check_expected_rows", "check_kernel", "compiled", "compiler_available", "run_compiled", "serial",
           "use_compiled"]

#: The kernel choices a caller may name.
KERNELS: tuple[str, ...] = ("eager", "compiled", "auto")

Kernel = Literal["eager", "compiled", "auto"]
F = TypeVar("F", bound=Callable[..., Any])


def check_kernel(kernel: object, name: str = "kernel") -> str:
    """``kernel`` if it is one of :data:`KERNELS`, else a ``ValueError``/``TypeError`` naming ``name``."""
    if not isinstance(kernel, str):
        raise TypeError(f"{name}: expected one of {', '.join(map(repr, KERNELS))}, got {type(kernel).__name__}")
    if kernel not in KERNELS:
        raise ValueError(f"{name}: expected one of {', '.join(map(repr, KERNELS))}, got {kernel!r}")
    return kernel


def check_expected_rows(expected_rows: object) -> int | None:
    """``expected_rows`` (the rows a pass will see: ``"auto"``'s judgement) if it is a count >= 0 or None, else a
    ``ValueError`` naming it."""
    if expected_rows is not None and (isinstance(expected_rows, bool) or not isinstance(expected_rows, int)
                                      or expected_rows < 0):
        raise ValueError(f"expected_rows: expected a count >= 0 or None, got {expected_rows!r}")
    return expected_rows


@lru_cache(maxsize=1)
def compiler_available() -> bool:
    """Whether inductor can build CPU kernels here: its C++ compiler is on the PATH (checked once per process)."""
    try:
        from torch._inductor import cpp_builder
        return shutil.which(cpp_builder.get_cpp_compiler()) is not None
    except Exception:  # any failure to locate the compiler means: run eager
        return False


def use_compiled(kernel: str, device: torch.device | str, *, worth_it: bool = True) -> bool:
    """Whether a kernel choice runs compiled on ``device``.

    ``"eager"``: never.  ``"compiled"``: on the CPU, where a C++ compiler is present (elsewhere eager, the same
    arithmetic: inductor's GPU backend needs triton, and ``meta`` tensors have no values to compile for).
    ``"auto"``: as ``"compiled"`` when ``worth_it`` (the caller's judgement that the rows it will see amortise a
    compilation of a few seconds), else eager.
    """
    check_kernel(kernel)
    if kernel == "eager" or (kernel == "auto" and not worth_it):
        return False
    return torch.device(device).type == "cpu" and compiler_available()


_COMPILED: dict[Callable[..., Any], Callable[..., Any]] = {}


def compiled(fn: F) -> F:
    """``fn`` compiled by ``torch.compile(fullgraph=True, dynamic=False)``, built on first use and cached per function
    (inductor then caches one kernel per input shape and dtype).  Call it only where :func:`use_compiled` said yes;
    ``fn`` itself is the eager path and the reference the compiled one is tested against."""
    out = _COMPILED.get(fn)
    if out is None:
        out = _COMPILED[fn] = torch.compile(fn, fullgraph=True, dynamic=False)
    return out  # type: ignore[return-value]


@contextmanager
def serial() -> Iterator[None]:
    """torch's intra-op threads set to 1 inside, restored after: a kernel compiled and run there adds its rows in one
    fixed order (inductor compiles for the thread count it sees)."""
    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


#: Functions that hit torch._dynamo's recompile limit, or that inductor failed to build, in this process: eager from
#: then on.
_EXHAUSTED: set[Callable[..., Any]] = set()


def run_compiled(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` compiled (:func:`compiled`), built and run under one thread (:func:`serial`); eager
    from then on once ``fn`` has hit torch._dynamo's recompile limit in this process (8 shapes per function by
    default, shared by every caller: with ``fullgraph=True`` the next shape raises ``FailOnRecompileLimitHit`` rather
    than falling back) or once inductor failed to build it (a broken compiler, warnings turned into errors): the
    same arithmetic, so a long run finishes rather than dying on a kernel it only wanted faster.  A build failure is
    said once, as a ``RuntimeWarning`` naming the function and the cause."""
    if fn not in _EXHAUSTED:
        try:
            with serial():
                return compiled(fn)(*args, **kwargs)
        except torch._dynamo.exc.FailOnRecompileLimitHit:
            _EXHAUSTED.add(fn)
        except torch._dynamo.exc.BackendCompilerFailed as e:
            _EXHAUSTED.add(fn)
            cause = getattr(e, "inner_exception", e)
            warnings.warn(f"{getattr(fn, '__name__', fn)}: inductor could not compile it ({type(cause).__name__}: "
                          f"{str(cause).splitlines()[0] if str(cause) else ''}); running it eager, the same "
                          "arithmetic", RuntimeWarning, stacklevel=2)
    return fn(*args, **kwargs)
