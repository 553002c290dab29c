"""Benchmark: formulations of the statistics pass's per-event sums, on one batch of ``bench_student``'s configuration.

Why: the statistics pass (``bench_student``'s ``stats f32``) is about 1.9x a plain forward+backward against a target
of 1.3x, and most of ``FrequencyAccumulator.add`` is per-event sums ``out[r, a, :] = sum_n [z[n, r] = a] q[n, r, :]``
computed as batched matmuls with the events' one-hot matrices (M rows of 0/1 per region: M = 16 multiply-adds per
value summed).  This script measures what other formulations of the same sums cost, so that a claim about where the
floor lies rests on numbers.

The sums of one batch (``Ladder.random(depth, branching, events, seed)``, ``LadderStudent(width, float32)`` without
BN, one record of ``forward_backward(x, y, stacked=True)`` on ``--batch-size`` examples), every hidden level l < d:

- ``own`` l: the level's stacked quantities (``rec.stacked[l]``, ``(R_l, k n_l, N)`` node-major) by the level's events;
- ``fc`` l (1 <= l < d): the children's fbar ``(R_l, n_l, N)`` by their parent's events (Fc);
- ``gp`` l (1 <= l < d): the parent's gradient g ``(R_l, n_{l-1}, N)`` by each child's events (Gp~).

(The one-hot leaves' sums follow from the counts and Delta W: none is computed.)  Each problem's inputs are built
outside the timing, in both layouts: node-major values ``(R, K, N)`` (what the explicit pass writes today) with the
events ``(R, N)`` uint8, and examples-major rows ``(N R, K)`` with the events ``(N, R)`` uint8 (as a store holds them).
Contenders, each timed over every problem of the batch (its own index or one-hot construction included):

- ``one-hot bmm``: the accumulator's formulation (node-major) problem by problem: the one-hot written by one uint8
  comparison into a reused buffer, then ``bmm(one_hot (R, M, N), q^T)`` (``accumulator sums`` below shares a
  level's one-hot between problems, as the accumulator does);
- ``scatter_add`` (node-major): ``zeros(R, K, M).scatter_add_(2, events, q)``;
- ``index_add rows`` (examples-major): ``zeros(R M, K).index_add_(0, r M + z, rows)``;
- ``embedding_bag sorted`` (examples-major): the rows' stable order by ``r M + z``, the counts as offsets, and
  ``F.embedding_bag(order, rows, offsets, mode="sum")`` (a segment sum of gathered rows);
- ``transpose`` (not a sum): node-major values copied to examples-major rows, what using the examples-major
  formulations costs on today's record;
- ``read floor`` (not a sum): one read of every value (``q.sum()``), the memory floor of any formulation that reads
  the values once after the explicit pass wrote them.

Two more contenders compute every problem of the batch at once, as an accumulator would on a record whose rows are
examples-major (the tables built outside the timing, as such an explicit pass would write them):

- ``segment sums (batch-major)`` / ``(region-major)``: per hidden level one stable sort of its rows by
  ``r M + z[n, r]`` (int16 keys; the bincount of the keys is the level's counts), then ``F.embedding_bag`` sums: the
  level's own rows in that order, each child's parent rows in the child's order (gp), each child's rows in its
  parent's order (fc).  Rows ``n R + r`` (``(N, R, k n)``, the layout of a batch-major pass) or ``r N + n``
  (``(R, N, k n)``).

Every contender's sums are checked against float64 sums of the same values (``max_rel_err``, the largest error over
the largest sum of each problem).  Context rows on the same batch: ``plain`` (autograd forward+backward on one-hot x,
as ``bench_student``'s ``plain``), ``explicit stacked`` (``forward_backward`` into the previous buffers),
``accumulator add`` (``FrequencyAccumulator(float32).add`` of that record), ``accumulator add (compiled)`` (the same
with ``kernel="compiled"``: :mod:`smaso.student.event_kernels`; its first add, the compilation, is timed apart as
``compile_s``, with ``compile_amortised_after_batches`` = ``compile_s`` over its saving per batch; its two kernels
timed apart as ``compiled transpose`` (the stacked record into examples-major rows) and ``compiled sums from rows``)
and
``accumulator sums`` (the part of
``add`` that computes these sums, as it computes them on a uniform tree: one one-hot per level shared by the own, fc
and gp sums, the stacked runs' bmm, ``_edge_matmuls``' strided and grouped bmm; nothing else of ``add``).  Rounds are
round-robin over all contenders (``--repeats`` rounds of ``--inner`` calls each, a round's time the mean per call);
best and median over the rounds are recorded with the load average.  ``estimates`` derives, from the best times, the
statistics pass over plain now (``explicit stacked`` + ``accumulator add``) and with ``accumulator sums`` replaced by
another formulation's total (scatter_add; the fastest per-problem examples-major one, with and without the transpose;
the faster segment sums; the read floor), the statistics pass with the compiled add
(``stats_over_plain_compiled``) and without its transposition (``stats_over_plain_compiled_examples_major_record``:
an explicit pass that wrote its record examples-major), and the accumulation budget the 1.3x target leaves
(1.3 ``plain`` - ``explicit stacked``): arithmetic on measured parts, not measured passes.

What a native segment-sum kernel would buy (issue 39: whether to ship one), where numba is installed (it is not a
dependency of the library; ``pip install numba``; without it these rows are left out and ``estimates["native"]``
says why).  ``explicit stacked (batch-major)``: ``forward_backward(layout="batch")`` into the previous buffers, the
record ``(N, k, R_l, n_l)`` in which one example's k n values of a region lie together.  The native sums
(:func:`_native_kernels`: numba-compiled loops, per level one call), each computing every hidden level's own, fc and
gp sums and pair counts and the leaves' pair counts, no one-hot:

- ``native sums (batch-major, float32 batch sums)``: from the batch-major record, each example's row added as one
  vector into its event's row of the sums; float32 sums of the batch, zeroed inside the timing (the accumulator's
  precision contract);
- ``native sums (batch-major, float64 totals)``: the same added straight into float64 totals (no batch sums);
- ``native sums (node-major, float32 batch sums)``: from today's node-major record ``(R_l, k, n_l, N)``, each value's
  row over the batch scattered into M per-event accumulators.

``estimates["native"]``: ``compile_s`` (the kernels' first calls), and per layout the statistics pass with these sums
in place of the accumulator's, ``stats_over_plain_native_<layout>`` = (that layout's explicit pass + its native sums
+ ``accumulator_other_ms``) / ``plain`` (conservative: ``accumulator_other_ms`` still holds pair counts and totals
that the native loops do themselves) and ``stats_over_plain_native_<layout>_floor`` without
``accumulator_other_ms`` (no checks, maps or totals at all: the floor of this formulation), beside each explicit
pass over ``plain`` and ``native_sums_budget_ms_at_target`` (the accumulation budget above).

Run it with::

    python benchmarks/bench_event_sums.py --threads 1   # about 45 s on 2 cores (1 thread: the stats target's setting)
    python benchmarks/bench_event_sums.py --quick    # smoke run (batch 256, 1 round)
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from smaso.student.compiled import compiled, serial
from smaso.student.event_kernels import examples_major, tree_sums
from smaso.student.frequency import FrequencyAccumulator
from smaso.student.network import LadderStudent
from smaso.student.rows import evaluation_inputs
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common beside this script, also when loaded by path
import _common as common

DEFAULT_OUT = common.default_out("event_sums")
SUMS = ("one-hot bmm", "scatter_add", "index_add rows", "embedding_bag sorted")
EXAMPLES_MAJOR = ("index_add rows", "embedding_bag sorted")
STATS_TARGET = 1.3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=int, default=None,
                   help="examples in the batch (default 1024; 256 with --quick)")
    p.add_argument("--depth", type=int, default=4, help="levels below the root (default 4)")
    p.add_argument("--branching", type=int, default=4, help="children per region (default 4)")
    p.add_argument("--events", type=int, default=16, help="events per region (default 16)")
    p.add_argument("--width", type=int, default=16, help="student nodes per hidden region (default 16)")
    p.add_argument("--seed", type=int, default=0, help="seed of the ladder, the sample and the weights (default 0)")
    p.add_argument("--repeats", type=int, default=None, help="round-robin rounds (default 7; 1 with --quick)")
    p.add_argument("--inner", type=int, default=None, help="calls per contender and round (default 5; 1 with --quick)")
    common.add_threads_arg(p)
    common.add_quick_out_args(p, "smoke run: batch 256, 1 round of 1 call", DEFAULT_OUT)
    args = p.parse_args(argv)
    common.fill_defaults(args, {"batch_size": 256, "repeats": 1, "inner": 1},
                         {"batch_size": 1024, "repeats": 7, "inner": 5})
    common.require_positive(p, args, ("batch_size", "depth", "branching", "events", "width", "repeats", "inner"))
    if args.depth < 2:
        p.error("--depth must be >= 2 (the student needs a hidden level)")
    return args


def problems(student: LadderStudent, rec, z: torch.Tensor) -> list[dict]:
    """The per-event sum problems of one batch (module docstring), each in both layouts, with its float64 sums."""
    lad, out = student.ladder, []
    off, M = lad.level_offsets, lad.events
    for l in range(lad.depth):
        R, N = lad.num_regions[l], z.shape[0]
        ev = z[:, off[l]: off[l + 1]]
        stacked = rec.stacked[l]  # (R, k, n, N)
        out.append(("own", l, ev, stacked.reshape(R, -1, N)))
        if l > 0:
            par = student.edge_index(l - 1)[0]  # the parent region of each child region (edge = child)
            fbar = stacked[:, rec.stacked_fields.index("fbar")]
            g_par = rec.stacked[l - 1][:, rec.stacked_fields.index("g")].index_select(0, par)
            out.append(("fc", l, z[:, off[l - 1]: off[l]].index_select(1, par), fbar))
            out.append(("gp", l, ev, g_par))
    result = []
    for kind, l, ev, vals in out:
        m = M[l - 1] if kind == "fc" else M[l]
        vals = vals.contiguous()  # (R, K, N) node-major
        R, K, N = vals.shape
        one_hot = (ev.T.long()[:, None, :] == torch.arange(m)[:, None]).double()
        result.append({"name": f"{kind} {l}", "m": m, "ev_nm": ev.T.contiguous().to(torch.uint8),
                       "ev_em": ev.contiguous().to(torch.uint8), "vals": vals,
                       "rows": vals.permute(2, 0, 1).contiguous().view(N * R, K),
                       "ref": torch.bmm(one_hot, vals.double().transpose(1, 2)),
                       "values_summed": R * K * N, "one_hot_macs": R * m * K * N})
    return result


def sum_functions(probs: list[dict]) -> dict[str, Callable[[dict], torch.Tensor]]:
    """Each contender: a problem -> its ``(R, M, K)`` sums (float32)."""
    buffers: dict[str, torch.Tensor] = {}
    values = {m: torch.arange(m, dtype=torch.uint8)[:, None] for m in {p["m"] for p in probs}}

    def one_hot_bmm(p: dict) -> torch.Tensor:
        ev, vals = p["ev_nm"], p["vals"]
        buf = buffers.get(p["name"])
        if buf is None:
            buf = buffers[p["name"]] = torch.empty(ev.shape[0], p["m"], ev.shape[1])
        torch.eq(ev[:, None, :], values[p["m"]], out=buf)
        return torch.bmm(buf, vals.transpose(1, 2))

    def scatter_add(p: dict) -> torch.Tensor:
        vals = p["vals"]
        idx = p["ev_nm"].long()[:, None, :].expand(vals.shape)
        return vals.new_zeros(vals.shape[0], vals.shape[1], p["m"]).scatter_add_(2, idx, vals).transpose(1, 2)

    def keys(p: dict) -> torch.Tensor:
        ev = p["ev_em"]
        return (ev.long() + torch.arange(ev.shape[1]) * p["m"]).view(-1)

    def index_add_rows(p: dict) -> torch.Tensor:
        R, K = p["vals"].shape[:2]
        return p["rows"].new_zeros(R * p["m"], K).index_add_(0, keys(p), p["rows"]).view(R, p["m"], K)

    def bag_sorted(p: dict) -> torch.Tensor:
        R, K = p["vals"].shape[:2]
        key = keys(p)
        counts = torch.bincount(key, minlength=R * p["m"])
        offsets = torch.cumsum(counts, 0) - counts
        order = torch.argsort(key, stable=True)
        return F.embedding_bag(order, p["rows"], offsets, mode="sum").view(R, p["m"], K)

    return dict(zip(SUMS, (one_hot_bmm, scatter_add, index_add_rows, bag_sorted), strict=True))


def accumulator_sums(student: LadderStudent, rec, z: torch.Tensor) -> Callable[[], None]:
    """The own, fc and gp sums of one batch as ``FrequencyAccumulator.add`` computes them on a uniform tree (its
    ``_set_one_hot``, the stacked runs' bmm and ``_edge_matmuls``): one one-hot per level shared by all three, the
    fc sums by the parent's one-hot with each child place's strided view, the gp sums by the children's one-hots
    grouped by parent.  Nothing else of ``add`` (counts, pair counts, maps, totals)."""
    lad, d = student.ladder, student.ladder.depth
    off, M, R = lad.level_offsets, lad.events, lad.num_regions
    ev8 = z[:, :off[d]].T.contiguous()
    i_fbar, i_g = rec.stacked_fields.index("fbar"), rec.stacked_fields.index("g")
    bufs = [torch.empty(R[l], M[l], z.shape[0]) for l in range(d)]
    values = [torch.arange(M[l], dtype=torch.uint8)[:, None] for l in range(d)]

    def run() -> None:
        one_hot = [torch.eq(ev8[off[l]: off[l + 1], None, :], values[l], out=bufs[l]) for l in range(d)]
        n = z.shape[0]
        for l in range(d):
            torch.bmm(one_hot[l], rec.stacked[l].reshape(R[l], -1, n).transpose(1, 2))
            if l > 0:
                b = R[l] // R[l - 1]
                child, g_par = rec.stacked[l][:, i_fbar], rec.stacked[l - 1][:, i_g]
                torch.stack([torch.bmm(one_hot[l - 1], child[c::b].transpose(1, 2)) for c in range(b)], 1)
                torch.bmm(one_hot[l].reshape(R[l - 1], b * M[l], n), g_par.transpose(1, 2))
    return run


def segment_sums(student: LadderStudent, rec, z: torch.Tensor, layout: str) -> Callable[[], dict[str, torch.Tensor]]:
    """Every problem's sums from a record whose rows are examples-major (module docstring: ``segment sums``): per
    hidden level one stable sort of the level's rows by ``r M + z[n, r]`` (int16 keys), whose counts are the level's
    event counts, then ``F.embedding_bag`` sums of rows in that order: the own sums of the level's ``(N R, k n)``
    rows, the gp sums of each child's parent rows (the child's order mapped to its parent's rows), the fc sums of each
    child's rows in its parent's order.  ``layout``: ``"batch"`` (row ``n R + r``, the ``(N, R, k n)`` layout of a
    batch-major pass: a region's rows are ``R k n`` values apart) or ``"region"`` (row ``r N + n``, ``(R, N, k n)``:
    a region's rows are one block).  The tables are built outside the timing (what such an explicit pass would
    write); keys, sorts, offsets and index maps inside."""
    lad, d, N = student.ladder, student.ladder.depth, z.shape[0]
    off, M, R = lad.level_offsets, lad.events, lad.num_regions
    if (lad.total_regions + 1) * max(M) >= 2**15:
        raise ValueError("segment sums: int16 keys need (regions + 1) * events < 2^15")
    k, region = len(rec.stacked_fields), layout == "region"
    perm = (0, 3, 1, 2) if region else (3, 0, 1, 2)
    tables = [rec.stacked[l].permute(*perm).reshape(N * R[l], -1).contiguous() for l in range(d)]
    n = [t.shape[1] // k for t in tables]
    # fbar and g as tables of their own (a strided column view would be copied by every embedding_bag call)
    fbar = [t.view(-1, k, n[l])[:, rec.stacked_fields.index("fbar")].contiguous() for l, t in enumerate(tables)]
    g = [t.view(-1, k, n[l])[:, rec.stacked_fields.index("g")].contiguous() for l, t in enumerate(tables)]
    bases = [(torch.arange(R[l]) * M[l]).to(torch.int16)[:, None] for l in range(d)]
    ev = z[:, :off[d]].T.contiguous() if region else z

    def row_parts(row: torch.Tensor, r: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(example, region) of rows of a level of ``r`` regions."""
        if region:
            return row % N, torch.div(row, N, rounding_mode="floor")
        return torch.div(row, r, rounding_mode="floor"), row % r

    def row_of(ex: torch.Tensor, reg: torch.Tensor | int, r: int) -> torch.Tensor:
        return reg * N + ex if region else ex * r + reg

    def run() -> dict[str, torch.Tensor]:
        out, orders, starts = {}, [], []
        for l in range(d):
            lev = ev[off[l]: off[l + 1]] if region else ev[:, off[l]: off[l + 1]].T
            key = (lev.to(torch.int16) + bases[l]) if region else (lev.to(torch.int16) + bases[l]).T
            key = key.reshape(-1)
            orders.append(torch.sort(key, stable=True).indices)
            counts = torch.bincount(key, minlength=R[l] * M[l])
            starts.append(torch.cumsum(counts, 0) - counts)
            out[f"own {l}"] = F.embedding_bag(orders[l], tables[l], starts[l], mode="sum").view(R[l], M[l], -1)
            if l == 0:
                continue
            b, Rp = R[l] // R[l - 1], R[l - 1]
            ex, c = row_parts(orders[l], R[l])  # in (c, z_c) order: the parent rows of the same examples
            out[f"gp {l}"] = F.embedding_bag(row_of(ex, torch.div(c, b, rounding_mode="floor"), Rp), g[l - 1],
                                             starts[l], mode="sum").view(R[l], M[l], -1)
            # each parent's rows in (p, z_p) order, N per parent; child c = p b + j takes its own rows in that order
            ex_p = row_parts(orders[l - 1], Rp)[0].view(Rp, 1, N)
            idx = row_of(ex_p, (torch.arange(Rp) * b)[:, None, None] + torch.arange(b)[None, :, None], R[l])
            within = (starts[l - 1].view(Rp, M[l - 1]) - (torch.arange(Rp) * N)[:, None]).repeat_interleave(b, 0)
            out[f"fc {l}"] = F.embedding_bag(idx.reshape(-1), fbar[l], (within + (torch.arange(R[l]) * N)[:, None])
                                             .view(-1), mode="sum").view(R[l], M[l - 1], -1)
        return out
    return run


NATIVE = {"batch": "native sums (batch-major, float32 batch sums)",
          "node": "native sums (node-major, float32 batch sums)",
          "totals": "native sums (batch-major, float64 totals)"}


def _native_kernels() -> dict[str, Callable[..., None]] | str:
    """The numba-compiled loops of the native sums (module docstring), or why there are none (numba missing):
    ``"batch"`` and ``"node"``, one level's sums from a record of that layout, and ``"leaf_pairs"``."""
    try:
        import numba
    except ImportError as err:
        return f"numba is not installed ({err}); pip install numba to measure the native sums"

    @numba.njit(boundscheck=False, nogil=True, cache=False)
    def batch_level(X, Xp, z, zp, b, i_fbar, i_g, own, fc, gp, pairs):  # pragma: no cover (compiled)
        # X (N, k, R, n) the level's batch-major record, Xp (N, k, R_p, n_p) its parents' (R_p = 0 at the root);
        # z (N, R), zp (N, R_p) events; own (R, M, k n), fc (R, M_p, n), gp (R, M, n_p), pairs (R, M_p, M).  Each
        # example's k n values of a region added as one vector into its event's row (the own sums in a loop of their
        # own: 10-15% faster than one loop for all four, which LLVM vectorises less well)
        N, k, R, n = X.shape
        n_p = Xp.shape[3]
        for i in range(N):
            for r in range(R):
                row = own[r, z[i, r]]
                for kk in range(k):
                    x = X[i, kk, r]
                    for j in range(n):
                        row[kk * n + j] += x[j]
        if Xp.shape[2] == 0:  # the root: no parent
            return
        for i in range(N):
            for r in range(R):
                p, e = r // b, z[i, r]
                ep = zp[i, p]
                pairs[r, ep, e] += 1.0
                f, x = fc[r, ep], X[i, i_fbar, r]
                for j in range(n):
                    f[j] += x[j]
                g, xp = gp[r, e], Xp[i, i_g, p]
                for j in range(n_p):
                    g[j] += xp[j]

    @numba.njit(boundscheck=False, nogil=True, cache=False)
    def scatter_row(x, e, acc):  # pragma: no cover (compiled)
        # acc[a] = sum_i [e[i] = a] x[i]: one value's row over the batch by its events
        acc[:] = 0
        for i in range(x.shape[0]):
            acc[e[i]] += x[i]

    @numba.njit(boundscheck=False, nogil=True, cache=False)
    def node_level(X, Xp, z, zp, b, i_fbar, i_g, own, fc, gp, pairs):  # pragma: no cover (compiled)
        # X (R, k, n, N) node-major, Xp (R_p, k, n_p, N) (R_p = 0 at the root); z (R, N), zp (R_p, N) region-major
        # events.  Each value's row over the batch scattered into M per-event accumulators, then added
        R, k, n, N = X.shape
        acc, acc_p = np.zeros(own.shape[1], own.dtype), np.zeros(fc.shape[1], own.dtype)
        for r in range(R):
            for kk in range(k):
                for j in range(n):
                    scatter_row(X[r, kk, j], z[r], acc)
                    own[r, :, kk * n + j] += acc
        if Xp.shape[0] == 0:  # the root: no parent
            return
        for r in range(R):
            p = r // b
            for i in range(N):
                pairs[r, zp[p, i], z[r, i]] += 1.0
            for j in range(n):
                scatter_row(X[r, i_fbar, j], zp[p], acc_p)
                fc[r, :, j] += acc_p
            for j in range(Xp.shape[2]):
                scatter_row(Xp[p, i_g, j], z[r], acc)
                gp[r, :, j] += acc

    @numba.njit(boundscheck=False, nogil=True, cache=False)
    def leaf_pairs(zt, zpt, b, pairs):  # pragma: no cover (compiled)
        # region-major leaf events zt (R, N) and their parents' zpt (R_p, N)
        R, N = zt.shape
        for r in range(R):
            p = r // b
            for i in range(N):
                pairs[r, zpt[p, i], zt[r, i]] += 1.0

    return {"batch": batch_level, "node": node_level, "leaf_pairs": leaf_pairs}


def native_sums(student: LadderStudent, rec, z: torch.Tensor, dtype: torch.dtype,
                kernels: dict[str, Callable[..., None]]) -> tuple[Callable[[], None], dict]:
    """The native sums of one record ``rec`` of ``forward_backward(stacked=True)`` (batch-major with
    ``layout="batch"``, else node-major: the kernel of its layout) with events ``z`` ``(N, regions)``, into sums of
    ``dtype`` (float64: totals added to across calls; float32: one batch's, zeroed by each call): ``(run, sums)``,
    ``sums`` the numpy arrays ``{"own l": (R, M, k n), "fc l": (R, M_p, n), "gp l": (R, M, n_p), "pairs l": (R, M_p,
    M)}`` that ``run`` adds to (views of torch tensors)."""
    lad, d = student.ladder, student.ladder.depth
    off, M, R, w = lad.level_offsets, lad.events, lad.num_regions, student.widths
    fields, batch = rec.stacked_fields, rec.stacked_layout == "batch"
    level_sums, leaf_pairs = kernels["batch" if batch else "node"], kernels["leaf_pairs"]
    k, i_fbar, i_g = len(fields), fields.index("fbar"), fields.index("g")
    zero = dtype == torch.float32
    sums = {}
    for l in range(d + 1):
        if l < d:
            sums[f"own {l}"] = torch.zeros(R[l], M[l], k * w[l], dtype=dtype)
            sums[f"fc {l}"] = torch.zeros(R[l], M[l - 1] if l else 1, w[l], dtype=dtype)
            sums[f"gp {l}"] = torch.zeros(R[l], M[l], w[l - 1] if l else 1, dtype=dtype)
        sums[f"pairs {l}"] = torch.zeros(R[l], M[l - 1] if l else 1, M[l], dtype=dtype)
    arrays = {key: t.numpy() for key, t in sums.items()}
    stacked = [t.numpy() for t in rec.stacked[:d]]
    no_parent = torch.zeros((1, 1, 0, 1) if batch else (0, 1, 1, 1), dtype=rec.stacked[0].dtype).numpy()
    no_events = torch.zeros((1, 0) if batch else (0, 1), dtype=torch.uint8).numpy()

    def run() -> None:
        if zero:
            for t in sums.values():
                t.zero_()
        ev = z.to(torch.uint8)
        region_major = ev.T.contiguous()
        # each level's events in the record's order: (N, R_l) batch-major, (R_l, N) region-major
        levels = [ev[:, off[l]: off[l + 1]].contiguous().numpy() if batch
                  else region_major[off[l]: off[l + 1]].numpy() for l in range(d)]
        for l in range(d):
            a = {key: arrays[f"{key} {l}"] for key in ("own", "fc", "gp", "pairs")}
            parent = (no_parent, no_events, 1) if l == 0 else (stacked[l - 1], levels[l - 1], R[l] // R[l - 1])
            level_sums(stacked[l], parent[0], levels[l], parent[1], parent[2], i_fbar, i_g, a["own"], a["fc"],
                       a["gp"], a["pairs"])
        leaves = region_major[off[d - 1]: off[d + 1]].numpy()  # (R_{d-1} + R_d, N)
        leaf_pairs(leaves[R[d - 1]:], leaves[:R[d - 1]], R[d] // R[d - 1], arrays[f"pairs {d}"])
    return run, arrays


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    wall0 = common.start(args.threads)
    ladder = Ladder.random(args.depth, args.branching, args.events, seed=args.seed)
    sample = sample_ladder(ladder, 2 * args.batch_size, args.seed, progress=False)
    student = LadderStudent(ladder, width=args.width, dtype=torch.float32, seed=args.seed)
    rows_ = slice(0, args.batch_size)
    x, y, z = evaluation_inputs(sample, rows_, torch.float32, False), sample.y[rows_], sample.z[rows_]
    rec = student.forward_backward(x, y, stacked=True)
    probs = problems(student, rec, z)
    info = common.machine_info()
    print(f"ladder: depth {args.depth}, branching {args.branching}, {args.events} events, {ladder.total_regions} "
          f"regions; batch {args.batch_size}; {len(probs)} per-event sum problems; {common.torch_summary()}")

    sums = sum_functions(probs)
    errors = {}
    for name, fn in sums.items():
        errors[name] = max(float((fn(p).double() - p["ref"]).abs().max() / p["ref"].abs().max().clamp(min=1e-300))
                           for p in probs)
    segments = {f"segment sums ({layout}-major)": segment_sums(student, rec, z, layout)
                for layout in ("batch", "region")}
    for name, fn in segments.items():
        got = fn()
        errors[name] = max(float((got[p["name"]].double() - p["ref"]).abs().max()
                                 / p["ref"].abs().max().clamp(min=1e-300)) for p in probs)
    acc = FrequencyAccumulator(student)
    # the compiled batch sums (kernel="compiled"): the first add compiles (once per process and shape), timed apart
    acc_compiled = FrequencyAccumulator(student, kernel="compiled")
    t0 = time.perf_counter()
    acc_compiled.add(rec, z)
    compile_s = time.perf_counter() - t0
    acc.add(rec, z)  # (the eager sums of the same batch: the compiled ones' error against them)
    errors["accumulator add (compiled)"] = max(
        float((v - u).abs().max() / u.abs().max().clamp(min=1e-300))
        for key in FrequencyAccumulator._SUMS for u, v in zip(getattr(acc, key), getattr(acc_compiled, key),
                                                                 strict=True) if u is not None)
    buffers = [rec.stacked]
    # the batch-major record the native sums read, and the same pass into the previous buffers (a record of its own)
    rec_batch = student.forward_backward(x, y, stacked=True, layout="batch")
    buffers_batch = [student.forward_backward(x, y, stacked=True, layout="batch").stacked]
    kernels = _native_kernels()
    native: dict[str, Callable[[], None]] = {}
    native_info: dict = {"reason": kernels} if isinstance(kernels, str) else {}
    if not isinstance(kernels, str):
        import numba

        native_info["numba"] = numba.__version__
        native_info["compile_s"] = 0.0
        for key, record, dt in (("totals", rec_batch, torch.float64), ("batch", rec_batch, torch.float32),
                                ("node", rec, torch.float32)):
            run, got = native_sums(student, record, z, dt, kernels)
            t0 = time.perf_counter()
            run()  # (a kernel's first call compiles it; float64 totals after one call: this batch's sums)
            native_info["compile_s"] += time.perf_counter() - t0
            name = NATIVE[key]
            native[name] = run
            errors[name] = max(max(float((torch.from_numpy(got[p["name"]]).double() - p["ref"]).abs().max()
                                         / p["ref"].abs().max().clamp(min=1e-300)) for p in probs),
                               max(float((torch.from_numpy(got[f"pairs {l}"]).double() - acc.joint_counts[l]).abs()
                                         .max()) for l in range(1, ladder.depth + 1)))
    # the compiled add's two kernels apart, on the same batch: the transposition of the stacked record into
    # examples-major rows, and every sum from those rows (what the add would cost on an examples-major record)
    d, fields = ladder.depth, rec.stacked_fields
    rows_em = [torch.empty(v.shape[0], v.shape[-1], v.shape[1] * v.shape[2]) for v in rec.stacked[:d]]
    ev_all = z.to(torch.uint8).T.contiguous()

    def compiled_transpose() -> None:
        with serial():
            compiled(examples_major)(rec.stacked[:d], rows_em)

    def compiled_sums_from_rows() -> None:
        with serial():
            compiled(tree_sums)(ev_all, rows_em, [None] * d, tuple(ladder.events), tuple(ladder.level_offsets),
                                len(fields), fields.index("fbar"), fields.index("g"))

    def plain() -> None:
        student.zero_grad(set_to_none=True)
        student.loss(student(x), y).backward()

    def explicit() -> None:
        buffers[0] = student.forward_backward(x, y, stacked=buffers[0]).stacked

    per_problem: dict[str, dict[str, list[float]]] = {name: {p["name"]: [] for p in probs} for name in SUMS}

    def over_problems(name: str, fn: Callable[[dict], object]) -> Callable[[], None]:
        def run() -> None:
            for p in probs:
                t0 = time.perf_counter()
                fn(p)
                per_problem[name][p["name"]].append(time.perf_counter() - t0)
        return run

    def explicit_batch() -> None:
        buffers_batch[0] = student.forward_backward(x, y, stacked=buffers_batch[0], layout="batch").stacked

    runs = {"plain": plain, "explicit stacked": explicit, "explicit stacked (batch-major)": explicit_batch,
            **native, "accumulator add": lambda: acc.add(rec, z),
            "accumulator add (compiled)": lambda: acc_compiled.add(rec, z),
            "compiled transpose": compiled_transpose, "compiled sums from rows": compiled_sums_from_rows,
            "accumulator sums": accumulator_sums(student, rec, z), **segments,
            **{name: over_problems(name, fn) for name, fn in sums.items()},
            "transpose": over_problems("transpose", lambda p: p["vals"].permute(2, 0, 1).contiguous()),
            "read floor": over_problems("read floor", lambda p: p["vals"].sum())}
    per_problem.update({k: {p["name"]: [] for p in probs} for k in ("transpose", "read floor")})
    for run in runs.values():  # warm-up
        run()
    for times in per_problem.values():
        for t in times.values():
            t.clear()

    def timed_run(run: Callable[[], None]) -> Callable[[], float]:
        def go() -> float:
            t0 = time.perf_counter()
            for _ in range(args.inner):
                run()
            return (time.perf_counter() - t0) / args.inner
        return go

    times, cpu = common.round_robin([timed_run(r) for r in runs.values()], args.repeats)
    results = []
    for (name, _), t, c in zip(runs.items(), times, cpu, strict=True):
        best, median = common.best_median(t)
        row = {"contender": name, "times_s": t, "process_cpu_s": c, "best_ms": best * 1e3, "median_ms": median * 1e3}
        if name in per_problem:
            row["per_problem_best_ms"] = {k: min(v) * 1e3 for k, v in per_problem[name].items()}
        if name in errors:
            row["max_rel_err"] = errors[name]
        results.append(row)
    by = {r["contender"]: r["best_ms"] for r in results}
    fastest = min(EXAMPLES_MAJOR, key=by.__getitem__)
    rest = by["explicit stacked"] + by["accumulator add"] - by["accumulator sums"]
    estimates = {
        "stats_over_plain_now": (by["explicit stacked"] + by["accumulator add"]) / by["plain"],
        "accumulator_sums_share_of_add": by["accumulator sums"] / by["accumulator add"],
        "accumulator_other_ms": by["accumulator add"] - by["accumulator sums"],
        "stats_over_plain_scatter_add": (rest + by["scatter_add"]) / by["plain"],
        "stats_over_plain_read_floor": (rest + by["read floor"]) / by["plain"],
        "stats_over_plain_segment_sums": min(rest + by[k] for k in segments) / by["plain"],
        "fastest_examples_major": fastest,
        "stats_over_plain_examples_major_record": (rest + by[fastest]) / by["plain"],
        "stats_over_plain_examples_major_with_transpose": (rest + by[fastest] + by["transpose"]) / by["plain"],
        "accumulation_budget_ms_at_target": STATS_TARGET * by["plain"] - by["explicit stacked"],
        "stats_over_plain_compiled": (by["explicit stacked"] + by["accumulator add (compiled)"]) / by["plain"],
        "compiled_add_over_eager_add": by["accumulator add (compiled)"] / by["accumulator add"],
        "compile_s": compile_s,
        # the lead: an explicit pass writing its stacked record examples-major would spare the transposition
        "stats_over_plain_compiled_examples_major_record": (by["explicit stacked"] + by["accumulator add (compiled)"]
                                                            - by["compiled transpose"]) / by["plain"],
        "compiled": bool(acc_compiled._kernel_on),
        "compile_amortised_after_batches": (compile_s / saved if (saved := (by["accumulator add"]
                                            - by["accumulator add (compiled)"]) / 1e3) > 0 else None),
        "target": STATS_TARGET,
        "note": "arithmetic on the best times of measured parts (module docstring), not a measured pass",
    }
    if native:
        other = estimates["accumulator_other_ms"]
        for key, explicit_row in (("batch", "explicit stacked (batch-major)"), ("node", "explicit stacked")):
            native_info[f"stats_over_plain_native_{key}"] = (by[explicit_row] + by[NATIVE[key]] + other) / by["plain"]
            native_info[f"stats_over_plain_native_{key}_floor"] = (by[explicit_row] + by[NATIVE[key]]) / by["plain"]
            native_info[f"native_{key}_over_accumulator_sums"] = by[NATIVE[key]] / by["accumulator sums"]
        native_info["explicit_batch_major_over_plain"] = by["explicit stacked (batch-major)"] / by["plain"]
        native_info["explicit_node_major_over_plain"] = by["explicit stacked"] / by["plain"]
        native_info["native_sums_budget_ms_at_target"] = estimates["accumulation_budget_ms_at_target"]
    estimates["native"] = native_info
    total_s = common.finish(info, wall0)
    config = {"batch_size": args.batch_size, "depth": args.depth, "branching": args.branching, "events": args.events,
              "width": args.width, "seed": args.seed, "repeats": args.repeats, "inner": args.inner,
              "quick": args.quick, "time_statistic": "best of the rounds (median recorded)"}
    problem_info = [{k: p[k] for k in ("name", "m", "values_summed", "one_hot_macs")} for p in probs]
    data = common.record("event_sums", argv, {"config": config, "problems": problem_info}, info, results,
                         {"estimates": estimates}, total_s)
    common.print_table([common.Column("contender", 28, "contender", align="<"),
                        common.Column("best ms", 9, "best_ms", ".3f"),
                        common.Column("median ms", 10, "median_ms", ".3f"),
                        common.Column("max rel err", 12, lambda r: r.get("max_rel_err"), ".1e")], results,
                       note=f"load {info['loadavg_start']} -> {info['loadavg_end']}; "
                            + "; ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                        for k, v in estimates.items() if k not in ("note", "native"))
                            + "; native: " + "; ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                                       for k, v in native_info.items()))
    common.write_json(args.out, data)
    common.print_done(total_s, args.out)
    return data


if __name__ == "__main__":
    main()
