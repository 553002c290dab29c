"""The one-hot leaf level's gather and weight gradient as compiled loops (issue 39: the LC layer's target).

On one-hot children given by their events, Delta W of the level above the leaves summed over the batch (Eq 2,
autograd's weight gradient) is a segment sum: the row of the flattened edge weights that example x's child of edge e
picks, ``rows[x, e] = e m + z_{x, child(e)}`` (:func:`~smaso.student.connectivity.one_hot_rows`), receives the
parent's gated gradient g_p(x) = dLoss/df_p(x) 1[f_p(x) > 0].  The eager student forms it as a one-hot matmul per
block of parents (:class:`~smaso.student.batch_major.ReluOneHotLeaves`): m times the additions of the sum, because
every eager segment sum (``index_add_``, ``index_put_``, ``embedding_bag``'s backward, CSR) ran slower still.
Inductor writes :func:`gated_segment_sum` as one C++ loop that reads the gradient and the gate once and adds each
row where it lands.

Its forward, the gather of the picked weight rows summed per parent and gated (:func:`gather_relu`), compiles to one
loop too (about half the time of ``embedding_bag`` and an in-place ReLU; the same sums in the same order).  Both
compiled, the default benchmark's autograd step on leaf events went from 7.9 to 4.5 ms (``bench_student.py``, 1
thread, load ~2, best of 5 epochs: 1.64x to 0.93x the dense chain of equal MACs).

Rules kept (:mod:`smaso.student.compiled`): :func:`gather_relu` and :func:`gated_segment_sum` are the references
and the fallbacks; the compiled kernels are built and run under one thread, so their additions run in one fixed
order (at more threads inductor parallelises a scatter with atomic adds: 20 distinct results in 20 calls here; the
same bytes whatever the thread count, tests/test_leaf_kernels.py); a batch shorter than a size already compiled is
padded to it with rows whose gate is shut and whose gradient is 0 (they add nothing; the gather's extra outputs are
dropped), so an epoch's short last batch does not compile again; ``kernel="auto"`` compiles only once the student
has run enough leaf rows through this level (:data:`AUTO_EDGE_ROWS`) that a compilation costs less than what the
eager kernels already spent (the ski-rental rule: at most twice the best choice in hindsight).
"""

from __future__ import annotations

import torch
import torch._dynamo

from smaso.student.compiled import check_kernel, run_compiled, use_compiled

__all__ = ["AUTO_EDGE_ROWS", "MAX_SIZES", "GroupedLeafKernel", "LeafKernel", "gated_segment_sum", "gather_relu",
           "grouped_segment_sum", "region_major"]

#: ``kernel="auto"`` compiles after this many (example, leaf edge) pairs have run through the eager kernels (the
#: ski-rental rule: compile once the eager kernels have cost what a compilation does).  Compiling both kernels took
#: 3.2-5.2 s in a process with inductor's on-disk cache warm and 20 s with it cold (a fresh
#: ``TORCHINDUCTOR_CACHE_DIR``, load 3.5: gcc runs for each kernel); the compiled kernels saved 3.4-4 ms per batch of
#: 1024 examples x 256 leaf edges (``bench_student.py``, 1 thread, rows ``plain (leaf events)`` eager and compiled):
#: ~15 ns per pair, so ~15 s is ~10^9 pairs (~3,800 such batches).  The demo and the default test tier stay far below.
AUTO_EDGE_ROWS = 10**9

#: The most batch sizes compiled per student (torch._dynamo recompiles a function at most 8 times by default).
MAX_SIZES = 4


def gated_segment_sum(rows: torch.Tensor, grad: torch.Tensor, f: torch.Tensor | None, num_rows: int
                      ) -> torch.Tensor:
    """dW[k] = sum over (x, e) with rows[x, e] = k of 1[f_p(x) > 0] grad_p(x), p = e // b (Eq 2 summed over the
    batch, on one-hot children; the ReLU's gate f' = 1[f > 0] as autograd's ``threshold_backward`` applies it;
    ``f`` None: no gate, ``grad`` is dLoss/du already).

    ``rows`` ``(N, R b)`` int32/int64 in [0, num_rows), ``grad`` = dLoss/df and ``f`` ``(N, R, n)``; returns
    ``(num_rows, n)``, the flattened edge weights' layout ``(R b m, n)``."""
    g = grad if f is None else torch.where(f > 0, grad, 0)
    N, R, n = g.shape
    per_edge = g.unsqueeze(2).expand(N, R, rows.shape[1] // R, n).reshape(-1, n)
    return g.new_zeros(num_rows, n).index_add_(0, rows.reshape(-1), per_edge)


def gather_relu(table: torch.Tensor, rows: torch.Tensor, num_parents: int) -> torch.Tensor:
    """f = ReLU(u), u_p(x) = sum_c table[rows[x, p b + c]] (Eq 1 on one-hot children: the sum of the weight rows
    they pick, the bias folded into the table by the caller), batch-major flat ``(N R, n)``.

    ``table`` ``(E m, n)`` (the flattened edge weights), ``rows`` ``(N, E)`` int32/int64, E = R b in bags of b
    consecutive edges (:func:`~smaso.student.connectivity.one_hot_rows`)."""
    N, E = rows.shape
    picked = table.index_select(0, rows.reshape(-1)).view(N, num_parents, E // num_parents, -1)
    return picked.sum(2).relu().view(N * num_parents, -1)


class LeafKernel:
    """A student's choice of its one-hot leaf level's kernels (``"eager"``, ``"compiled"``, ``"auto"``:
    :func:`~smaso.student.compiled.use_compiled`) and what it decides from: the (example, edge) pairs seen so far
    and the batch sizes compiled (at most :data:`MAX_SIZES`; a larger batch than any compiled, past that, runs
    eager)."""

    def __init__(self, kernel: str = "auto") -> None:
        self.kernel = check_kernel(kernel)
        self.edge_rows = 0
        self.sizes: list[int] = []

    def __getstate__(self) -> dict:
        return {"kernel": self.kernel}  # what was seen belongs to this process's compilations

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["kernel"])  # type: ignore[misc]

    def _worth_it(self) -> bool:
        """``"auto"``'s judgement: enough (example, edge) pairs ran eager to pay a compilation."""
        return self.edge_rows >= AUTO_EDGE_ROWS

    def size(self, rows: torch.Tensor) -> int | None:
        """The compiled batch size for these rows ``(N, E)`` (N itself, or a larger size already compiled to pad
        to), or None to run eager; counts the rows seen."""
        worth_it = self._worth_it()
        self.edge_rows += rows.numel()
        if not use_compiled(self.kernel, rows.device, worth_it=worth_it):
            return None
        N = rows.shape[0]
        fits = [s for s in self.sizes if s >= N]
        if fits:
            return min(fits)
        if len(self.sizes) >= MAX_SIZES:
            return None
        self.sizes.append(N)
        return N

    def forward(self, size: int, table: torch.Tensor, rows: torch.Tensor, num_parents: int) -> torch.Tensor:
        """:func:`gather_relu` compiled, at one thread, on the batch padded to ``size`` rows (from :meth:`size`),
        the padding's outputs dropped."""
        N = rows.shape[0]
        if size > N:
            rows = torch.cat([rows, rows.new_zeros(size - N, rows.shape[1])])
        f = run_compiled(gather_relu, table, rows, num_parents)
        return f if size == N else f[: N * num_parents]

    def weight_grad(self, size: int, rows: torch.Tensor, grad: torch.Tensor, f: torch.Tensor | None, num_rows: int
                    ) -> torch.Tensor:
        """:func:`gated_segment_sum` compiled, at one thread, on the batch padded to ``size`` rows (from
        :meth:`size`) with shut gates and zero gradients."""
        N = rows.shape[0]
        if size > N:
            pad = size - N
            rows = torch.cat([rows, rows.new_zeros(pad, rows.shape[1])])
            grad = torch.cat([grad, grad.new_zeros(pad, *grad.shape[1:])])
            f = None if f is None else torch.cat([f, f.new_zeros(pad, *f.shape[1:])])
        return run_compiled(gated_segment_sum, rows, grad, f, num_rows)


def region_major(g: torch.Tensor) -> torch.Tensor:
    """A node-major gradient ``(R, n, N)`` (any strides) copied region-major ``(R, N, n)``, contiguous: each example's
    n units side by side, the layout :func:`grouped_segment_sum` reads in whole vectors (compiled: a tiled transpose,
    ~2 ms for 64 x 16 x 4096 floats where torch's 3-D copy took ~5)."""
    return g.transpose(1, 2).contiguous()


def grouped_segment_sum(events_t: torch.Tensor, group: torch.Tensor, grad: torch.Tensor, width: int, groups: int
                        ) -> torch.Tensor:
    """Every row group's Delta W of the level above one-hot leaves, summed over its rows (Eq 2 on one-hot children):
    ``dW[s, e m + k, :] = sum over x with group[x] = s and z[x, e] = k of grad[e // b, x, :]`` (m = ``width``,
    b = E / R children per parent).

    ``events_t`` ``(E, N)`` integer leaf events (a transposed view is read as it is), ``group`` ``(N,)`` each row's
    group in [0, ``groups``), ``grad`` the parents' gated gradient region-major ``(R, N, n)``
    (:func:`region_major`); returns ``(groups E m, n)``: group by group the flattened edge weights' layout.  The loop
    runs edge by edge over the rows, so the rows it adds into (``groups m`` of them per edge) stay in the L1 cache."""
    E, N = events_t.shape
    R, n = grad.shape[0], grad.shape[2]
    idt = torch.int32 if groups * E * width < 2**31 else torch.int64
    rows = events_t.to(idt) + (torch.arange(0, E * width, width, dtype=idt, device=grad.device)[:, None]
                               + group.to(idt) * (E * width))
    per_edge = grad.unsqueeze(1).expand(R, E // R, N, n).reshape(-1, n)
    return grad.new_zeros(groups * E * width, n).index_add_(0, rows.reshape(-1), per_edge)


def grouped_segment_sum_batch(events: torch.Tensor, group: torch.Tensor, grad: torch.Tensor, width: int,
                              groups: int) -> torch.Tensor:
    """:func:`grouped_segment_sum` from a batch-major gradient: ``events`` ``(N, E)`` (any strides), ``grad`` the
    parents' gated gradient ``(N, R, n)`` (a slot of a batch-major record, any strides,
    :mod:`~smaso.student.batch_record`); the same ``(groups E m, n)``, bit for bit (every row of the result adds
    its examples in the same order).  The loop runs example by example, reading the gradient as it lies; the rows
    it adds into are one group's ``E m`` (a few hundred KB, in the L2 cache while a group's examples pass): 6.4 ms
    against 9.7 for the region-major sum and 1.3 more for the transpose that feeds it (4096 rows, 256 leaf edges,
    m = n = 16, 10 groups, float32, median, 1 thread).  The student's own :func:`gated_segment_sum` (ungated) over
    the edge rows with the group as one more digit."""
    E = events.shape[1]
    idt = torch.int32 if groups * E * width < 2**31 else torch.int64
    rows = events.to(idt) + (torch.arange(0, E * width, width, dtype=idt, device=grad.device)[None, :]
                             + group.to(idt)[:, None] * (E * width))
    return gated_segment_sum(rows, grad, None, groups * E * width)


class GroupedLeafKernel(LeafKernel):
    """The row groups' Delta W above one-hot leaves (:func:`~smaso.student.row_groups.add_row_groups`) compiled or
    eager: ``"auto"`` compiles when the pass will run at least :data:`AUTO_EDGE_ROWS` (example, leaf edge) pairs
    (``expected_edge_rows``; None: unknown, eager).  Compiled, :func:`region_major` and :func:`grouped_segment_sum`
    ran 6.8 ms where the eager one-hot matmuls took 18.2 (median, 4096 rows in 10 groups, 256 leaf edges, m = n =
    16, float32, 1 thread, load ~1.9); a grouped float32 pass of 10^6 rows on one process went from 26.5 to 23.0 CPU
    s (``bench_out_of_core.py``'s eval_pass, load ~2): ~13 ns per pair saved, so 10^9 pairs repay a compilation of
    both kernels (10.5 s with inductor's disk cache cold, ~3 s warm) as they do the student's leaf kernels; the main
    job's 10^7 rows are 2.6 x 10^9 pairs per evaluation.  Its choice also runs the groups' per-event and edge sums
    compiled (:func:`~smaso.student.row_groups.add_row_groups`), whose examples-major record then hands the leaf sum
    its gradient region-major (``grad_rows``): no transpose of its own."""

    def __init__(self, kernel: str = "auto", expected_edge_rows: int | None = None) -> None:
        super().__init__(kernel)
        self.expected = expected_edge_rows

    def __getstate__(self) -> dict:
        return {"kernel": self.kernel, "expected": self.expected}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["kernel"], state["expected"])  # type: ignore[misc]

    def _worth_it(self) -> bool:
        return self.expected is not None and self.expected >= AUTO_EDGE_ROWS

    def compiles(self, device: torch.device | str) -> bool:
        """Whether its batches on ``device`` run compiled (up to :data:`MAX_SIZES` batch sizes): what the pass's
        record layout is chosen by (:meth:`~smaso.student.frequency.ReplicateAccumulator.record_layout`)."""
        return use_compiled(self.kernel, device, worth_it=self._worth_it())

    def weight_grads(self, size: int, events: torch.Tensor, group: torch.Tensor, grad: torch.Tensor, width: int,
                     groups: int, grad_rows: torch.Tensor | None = None,
                     grad_batch: torch.Tensor | None = None) -> torch.Tensor:
        """Every group's Delta W compiled (:func:`grouped_segment_sum`, at one thread) ``(groups, E m, n)``, on the
        batch padded to ``size`` rows (from :meth:`size`, which said whether to run compiled).  ``events`` ``(N, E)``
        the leaf events (a column slice of the batch's events is read as it is), ``group`` ``(N,)``, ``grad`` the
        node-major gated gradient ``(R, n, N)``, or ``grad_rows``: the same already region-major and padded,
        ``(R, size, n)`` with zero pad rows (the g slot of the examples-major record the group sums read, any
        strides: no transpose of its own), or ``grad_batch``: batch-major and padded, ``(size, R, n)`` (the g slot of
        a batch-major record, summed example by example: :func:`grouped_segment_sum_batch`).  A batch shorter than
        the compiled size is padded with rows of an extra group, dropped (events 0, gradient 0), laid out as the
        full batches are, so that it runs the same compilation."""
        N, E = events.shape
        if size > N:  # (the same strides as a full batch: a column slice of as wide a block of events)
            full = events.new_zeros(size, events.stride(0))[:, :E]
            full[:N] = events
            group = torch.cat([group, group.new_full((size - N,), groups)])
            events = full
        if grad_batch is not None:
            out = run_compiled(grouped_segment_sum_batch, events, group, grad_batch, width, groups + 1)
            return out.view(groups + 1, E * width, -1)[:groups]
        if grad_rows is not None:
            grm = grad_rows
        elif size > N:
            grm = grad.new_zeros(grad.shape[0], size, grad.shape[1])
            grm[:, :N] = grad.transpose(1, 2)  # (a copy: exact, as the compiled transpose)
        else:
            grm = run_compiled(region_major, grad)
        out = run_compiled(grouped_segment_sum, events.T, group, grm, width, groups + 1)
        return out.view(groups + 1, E * width, -1)[:groups]
