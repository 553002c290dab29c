"""The comparison of a fixed student with the reformulation as the data grows (:func:`errors_against_n`): which
one-step errors are noise, falling with their jackknife floors like 1/sqrt(N), and which persist."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from smaso.student.diagnosis import compare_statistics_to_theory
from smaso.student.frequency import ReplicateAccumulator, _check_label_range
from smaso.student.network import LadderStudent

if TYPE_CHECKING:
    from teachers.chunked import DataSource

__all__ = ["errors_against_n"]


def errors_against_n(student: LadderStudent, source: DataSource, *, n_min: int = 2048, n_max: int | None = None,
                     batch_size: int = 4096, loss: str = "squared", P_source: str = "empirical",
                     noise_groups: int = 10, progress: bool = False) -> list[dict]:
    """The comparison of a fixed student and its noise floors on the first N examples, N doubling.

    One streaming pass over ``source`` (batches of at most ``batch_size`` rows cut at the grid points): at
    N = n_min, 2 n_min, 4 n_min, ... <= n_max the statistics of the rows so far are compared with the
    reformulation (:func:`compare_statistics_to_theory` with the jackknife's replicates).  A term whose
    condition holds falls with its floor like 1/sqrt(N); one that fails levels off at its population value.

    :param student: the (trained) student, fixed during the pass.
    :param source: a :class:`~teachers.sampling.LadderSample`, a chunked dataset or dataset path(s).
    :param n_max: the largest N (default: every example; the last grid point is the largest
        n_min 2^k not above it).
    :returns: one dict per N: ``n`` and the report (``levels``, ``leaves``, ... with ``*_floor``).
    """
    from tqdm.auto import tqdm

    from teachers.chunked import as_chunks

    chunks = as_chunks(source)
    total = len(chunks) if n_max is None else int(n_max)
    for name, v in (("n_min", n_min), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected a positive integer, got {v!r}")
    if not n_min <= total <= len(chunks):
        raise ValueError(f"n_max: expected n_min <= n_max <= {len(chunks)} examples, got n_min={n_min}, "
                         f"n_max={total}")
    grid = [n_min * 2**k for k in range(int(math.log2(total / n_min)) + 1)]
    acc = ReplicateAccumulator(student, torch.float64, noise_groups)
    dev, wdt = student.weights[0].device, student.weights[0].dtype
    rows, nxt = [], 0
    bar = tqdm(total=grid[-1], desc="errors against N", unit="ex", unit_scale=True, disable=not progress)
    with torch.no_grad():
        for c in range(chunks.num_chunks):
            part = chunks.chunk(c)
            _check_label_range(student, part.y, loss)  # once per chunk, on the host: none per batch
            s = 0
            while s < len(part) and nxt < len(grid):
                e = min(len(part), s + batch_size, s + grid[nxt] - acc.n)
                sl = slice(s, e)
                rec = student.forward_backward(part.inputs(sl, wdt).to(dev, non_blocking=True),
                                               part.y[sl].to(dev, non_blocking=True), loss, labels_checked=True)
                acc.add(rec, part.z[sl])
                bar.update(e - s)
                s = e
                if acc.n == grid[nxt]:
                    report = compare_statistics_to_theory(student, acc.result(), P_source=P_source, loss=loss,
                                                          replicates=list(acc.leave_one_out()))
                    rows.append({"n": acc.n, **report})
                    nxt += 1
            if nxt == len(grid):
                break
    bar.close()
    return rows
