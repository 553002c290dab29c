"""Students of one setting trained as one batched population: the seeds of
:func:`~smaso.student.seeds.compare_seeds` and their shuffled-label controls step together.

The members differ only in their seed (initial weights, minibatch order) and whether their labels are shuffled;
their architecture, optimizer and schedule are one.  A step of the population is one explicit forward and backward
pass (framework paper Eq 1-2, :meth:`~smaso.student.network.LadderStudent.forward_backward`) over every member at
once: member r's regions of level l are rows ``r R_l .. (r + 1) R_l - 1`` of one node-major level
``(R R_l, n_l, N)``, so each level's products are one batched matmul over members and regions
(:func:`~smaso.student.connectivity.tree_pre_activation`, :func:`~smaso.student.connectivity.tree_backward`), and
each member's weights take their own Eq 2 step

    W_r += lr (Delta W_r - 2 weight_decay W_r),    Delta W_r = E_{x in B_r}[fbar_child g_parent^T],

from their own minibatch B_r (drawn by that member's own stream, :func:`~smaso.student.rows._training_batches`).
No sum runs across members, and each matrix product of a member is the product the member computes alone (the
same kernel on the same shapes), so the weights are those of training the members one by one, bit for bit in
float64 (``tests/test_population.py``).

:func:`compare_population` then measures each member with :func:`~smaso.student.compare.compare_student` itself,
its checkpoints replaying the population's weights instead of training (the reformulation, the diagnosis and the
alignment are that function's); the statistics of every member at a checkpoint come from one batched pass over the
same evaluation rows (:mod:`smaso.student.member_statistics`: the same sums in another order), so the
:class:`~smaso.student.compare.ComparisonResult` of each member is the one training it alone gives, its weights bit
for bit and its numbers to float64 round-off.  Settings outside the population's step (Batch Norm, shared weights,
a non-tree ladder, full-batch GD, an optimizer other than plain SGD, a schedule, a plateau stop) run one member
after the other (:func:`population_supported` says which).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from smaso.student.connectivity import tree_backward, tree_pre_activation
from smaso.student.network import LadderStudent
from smaso.student.training import CHECK_EVERY, TrainingDiverged

if TYPE_CHECKING:
    from smaso.student.compare import ComparisonResult
    from teachers.chunked import DataSource
    from teachers.engine import DaskEngine, SerialEngine

__all__ = ["PopulationTrajectory", "compare_population", "population_batch", "population_supported",
           "train_ladder_population"]


def population_supported(student: StudentConfig, training: TrainingConfig,
                         net: LadderStudent | None = None) -> str | None:
    """Why ``(student, training)`` cannot train as a batched population (a sentence), or None when it can: the
    population's step is plain SGD (Eq 2) on the uniform-tree kernels, without Batch Norm or shared weights, on
    minibatches, without a schedule or a plateau stop."""
    if student.batch_norm:
        return "Batch Norm"
    if student.shared:
        return "shared weights"
    if training.batch_size is None:
        return "full-batch GD"
    if training.optimizer != "sgd" or training.lr_schedule not in (None, "none"):
        return "an optimizer other than plain SGD, or a learning-rate schedule"
    if training.plateau is not None:
        return "a plateau stop (members would stop at different steps)"
    if net is not None and not net.fast_path:
        return "a ladder that is not a uniform tree"
    return None


@dataclasses.dataclass
class PopulationTrajectory:
    """What :func:`train_ladder_population` returns.

    :ivar snapshots: ``snapshots[step][r]``: member r's parameters (``named_parameters`` order, clones) after
        ``step`` updates, at every step asked for.
    :ivar diverged: per member, ``(step, message)`` of the first step whose loss was not finite or exploded
        (the message :func:`~smaso.student.compare.compare_student` raises), or None.
    """

    snapshots: dict[int, list[list[torch.Tensor]]]
    diverged: list[tuple[int, str] | None]

    def replay(self, member: int) -> Callable[[LadderStudent, int], None]:
        """``replay(net, step)`` for :func:`~smaso.student.compare.compare_student`: in place of training step
        ``step``, give ``net`` member ``member``'s weights after ``step + 1`` updates where they were kept (the next
        checkpoint's), and raise :class:`TrainingDiverged` at the step where the member diverged."""
        bad = self.diverged[member]

        @torch.no_grad()
        def replay(net: LadderStudent, step: int) -> None:
            if bad is not None and step == bad[0]:
                raise TrainingDiverged(bad[1])
            snap = self.snapshots.get(step + 1)
            if snap is not None:
                for p, v in zip(net.parameters(), snap[member], strict=True):
                    p.copy_(v)
        return replay


def _check_loss(losses: torch.Tensor, start: int, stop: int, first: torch.Tensor, lr: float,
                diverged: list[tuple[int, str] | None]) -> None:
    """Read steps ``start .. stop-1``'s per-member losses ``(steps, R)`` (one host read) and record each member's
    first bad step: compare_student's check (:func:`~smaso.student.compare._loss_ok`) and message."""
    from smaso.student.compare import _diverged_message, _loss_ok

    if losses.device.type == "meta":  # no values to read (the meta tier checks shapes and devices only)
        return
    vals = losses[start:stop].tolist()
    firsts = first.tolist()
    for r, f in enumerate(firsts):
        if diverged[r] is not None:
            continue
        for step, row in enumerate(vals, start):
            v = row[r]
            if not _loss_ok(v, f):
                diverged[r] = (step, _diverged_message(step, v, f, lr))
                break


def _bias(net: LadderStudent, level: int) -> torch.Tensor:
    """The biases of ``level`` of a student that has them (detached: the population updates them itself)."""
    if net.biases is None:
        raise ValueError("nets: every member needs biases when the first has them")
    return net.biases[level].detach()


def _stacked(items: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The population's minibatch from its members' ``(x (N, R_d, dim), y (N,))``: ``x (N, R, R_d, dim)`` and
    ``y (R, N)``."""
    xs, ys = zip(*items, strict=True)
    return torch.stack(xs, 1), torch.stack(ys)


def population_batch(items: Sequence[list], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The population's minibatch from its members' rows (:func:`~smaso.student.rows._training_pieces`, one list of
    ``(chunk, row indices, labels)`` per member): ``x (N, R, R_d, dim)`` in ``dtype`` and ``y (R, N)``, the values
    of the members' own :func:`~smaso.student.rows._training_batches`.  One-hot leaves are built once for every
    member (one range check and one scatter, not R); a dataset that stores its inputs is read row by row."""
    from teachers.emission import _check_leaf_events, one_hot

    def cat(ts: list[torch.Tensor]) -> torch.Tensor:
        return ts[0] if len(ts) == 1 else torch.cat(ts)

    y = torch.stack([cat([labels[idx] for _, idx, labels in it]) for it in items])
    if any(part.x is not None for it in items for part, _, _ in it):
        return torch.stack([cat([part.inputs(idx, dtype) for part, idx, _ in it]) for it in items], 1), y
    t = items[0][0][0].teacher
    off = t.level_offsets[-2]
    leaves = torch.stack([cat([part.z[idx, off:] for part, idx, _ in it]) for it in items], 1)  # (N, R, R_d)
    _check_leaf_events(leaves.reshape(-1, leaves.shape[-1]), t.emission.num_regions, t.emission.num_events, t.depth)
    return one_hot(leaves, t.emission.num_events, dtype), y


def train_ladder_population(nets: Sequence[LadderStudent], batches: Sequence, *, steps: int, lr: float,
                            loss: str = "squared", weight_decay: float = 0.0, keep: Sequence[int] = (),
                            build: Callable[[list], tuple[torch.Tensor, torch.Tensor]] | None = None,
                            progress: bool = False) -> PopulationTrajectory:
    """Train R students of one architecture as one batched network by plain SGD (module docstring), member r on
    the minibatches ``batches[r]`` (an iterator of ``(x (N, R_d, dim), y (N,))``, every member the same N).

    The students themselves are not changed: their stacked copies train, and the parameters of every member after
    each step in ``keep`` come back as :class:`PopulationTrajectory` snapshots.  The labels are not range-checked
    (the rows come from a validated dataset); the losses are read from the device every :data:`CHECK_EVERY` steps.

    :param nets: R :class:`LadderStudent` of one architecture on the uniform-tree kernels, without Batch Norm or
        shared weights (:func:`population_supported`).
    :param steps, lr, loss, weight_decay: as :func:`~smaso.student.compare.compare_student`'s plain SGD.
    :param build: the population's ``(x (N, R, R_d, dim), y (R, N))`` from the R members' next items (default: the
        items are ``(x, y)`` pairs, stacked; :func:`population_batch` builds them from rows).
    :param progress: a tqdm bar over the steps (one for the whole population).
    """
    from tqdm.auto import tqdm

    R = len(nets)
    if R == 0:
        raise ValueError("nets: expected at least one student")
    if len(batches) != R:
        raise ValueError(f"batches: expected one minibatch stream per student ({R}), got {len(batches)}")
    net = nets[0]
    for r, m in enumerate(nets):
        if not isinstance(m, LadderStudent) or not m.fast_path or m.batch_norm or m.shared:
            raise ValueError(f"nets[{r}]: expected a LadderStudent on the uniform-tree kernels without Batch Norm or "
                             "shared weights")
        if m.widths != net.widths or m.ladder.fingerprint() != net.ladder.fingerprint() \
                or m.activation != net.activation or m.top_activation != net.top_activation \
                or (m.biases is None) != (net.biases is None) or m.weights[0].dtype != net.weights[0].dtype:
            raise ValueError(f"nets[{r}]: every member must have the architecture of nets[0]")
    lad, d = net.ladder, net.ladder.depth
    Rl = lad.num_regions
    dev, dtype = net.weights[0].device, net.weights[0].dtype

    def stack(ts: list[torch.Tensor]) -> torch.Tensor:
        # (R, ...) by copies into one buffer (torch.stack on "meta" first loads its Python decompositions: seconds)
        out = ts[0].new_empty((R, *ts[0].shape))
        for r, t in enumerate(ts):
            out[r].copy_(t)
        return out

    with torch.no_grad():
        # (R, ...) stacks; Wf[l], bf[l]: the same memory as one level of R R_l regions, member-major
        W = [stack([m.weights[l].detach() for m in nets]) for l in range(d)]
        b = None if net.biases is None else [stack([_bias(m, l) for m in nets]) for l in range(d)]
    Wf = [w.view(-1, *w.shape[2:]) for w in W]
    bf = None if b is None else [t.view(-1, t.shape[-1]) for t in b]
    keep = sorted(set(keep))
    snapshots: dict[int, list[list[torch.Tensor]]] = {}

    def snapshot(step: int) -> None:
        # in named_parameters order of a LadderStudent: weights.0..d-1, then biases.0..d-1
        if step in keep:
            snapshots[step] = [[*(W[l][r].clone() for l in range(d)),
                                *(() if b is None else (b[l][r].clone() for l in range(d)))] for r in range(R)]

    snapshot(0)
    losses = torch.empty(steps, R, dtype=dtype, device=dev)
    diverged: list[tuple[int, str] | None] = [None] * R
    first = None
    acts = [net.act(l) for l in range(d)]
    n0 = net.widths[0]
    bar = tqdm(total=steps, desc=f"training {R} students", disable=not progress)
    for step in range(steps):
        x, y = (build or _stacked)([next(it) for it in batches])
        N = x.shape[0]
        # member-major regions in one row: (N, R R_d, dim), node-major (R R_d, dim, N) as the student's leaves
        x = x.to(device=dev, dtype=dtype).view(N, -1, x.shape[-1])
        y = y.to(dev)  # (R, N)
        h = x.permute(1, 2, 0)
        inputs: dict[int, torch.Tensor] = {}  # by level, filled from the leaves up
        deriv: dict[int, torch.Tensor] = {}
        with torch.no_grad():
            for l in range(d - 1, -1, -1):
                inputs[l] = h.reshape(R * Rl[l], -1, N)  # grouped by parent (LadderStudent._grouped)
                u = tree_pre_activation(Wf[l], inputs[l], None if bf is None else bf[l])
                s = acts[l].slope(u)
                deriv[l] = s if acts[l].homogeneous else acts[l].derivative(u)
                h = torch.mul(s, u)
            out = h  # (R, n_0, N): the root of every member (R_0 = 1)
            target = F.one_hot(y.long(), n0).to(dtype).transpose(1, 2)
            g_raw = target - (out if loss == "squared" else out.softmax(1))
            if loss == "squared":
                losses[step] = 0.5 * (out - target).pow(2).sum(1).mean(-1)
            else:
                losses[step] = F.cross_entropy(out, y.long(), reduction="none").mean(-1)
            if first is None:
                first = losses[0].clone()
            for l in range(d):
                g = torch.mul(deriv[l], g_raw)
                dW, below = tree_backward(Wf[l], g, inputs[l], l + 1 < d)
                if below is not None:  # (None at the leaves: nothing below them)
                    g_raw = below
                # Eq 2 with the Frobenius regularizer, as LadderStudent.apply_update: W += lr (dW - 2 wd W)
                Wf[l].add_(dW - 2 * weight_decay * Wf[l], alpha=lr)
                if bf is not None:
                    bf[l].add_(g.mean(-1), alpha=lr)
        if (step + 1) % CHECK_EVERY == 0 or step + 1 == steps:
            _check_loss(losses, (step // CHECK_EVERY) * CHECK_EVERY, step + 1, first, lr, diverged)
        snapshot(step + 1)
        bar.update(1)
    bar.close()
    return PopulationTrajectory(snapshots, diverged)


class _MemberCheckpoints:
    """The statistics of every member at a checkpoint, in one batched pass
    (:func:`~smaso.student.member_statistics.member_statistics`) made when the first member asks for that step's
    and handed to each member as :func:`~smaso.student.frequency.accumulate_statistics` would (``member(r)``, the
    ``_statistics`` hook of :func:`~smaso.student.compare.compare_student`); a pass it does not cover is that
    function's own, member by member."""

    def __init__(self, nets: Sequence[LadderStudent], traj: PopulationTrajectory) -> None:
        self.nets, self.traj = [copy.deepcopy(n) for n in nets], traj  # (own copies: loaded with each step's)
        # step: (the members' sums, their correct counts, the members not yet served)
        self.done: dict[int, tuple[Any, list[int], set[int]]] = {}
        self.rows: Any = None  # the pass's rows (MemberRows), once asked for

    def member(self, r: int) -> Callable[..., tuple]:
        def measure(step: int, net: LadderStudent, source: Any, *, loss: str, batch_size: int,
                    dtype: torch.dtype | None, engine: Any, groups: int | None) -> tuple:
            from smaso.student.frequency import accumulate_statistics
            from smaso.student.member_statistics import MAX_ROWS, MemberRows, MemberSums, member_statistics_supported

            snap = self.traj.snapshots.get(step)
            if snap is None or member_statistics_supported(net, dtype, groups) is not None or len(source) > MAX_ROWS:
                return accumulate_statistics(net, source, loss=loss, batch_size=batch_size, dtype=dtype,
                                             engine=engine, groups=groups)
            if step not in self.done:
                with torch.no_grad():
                    for m, weights in zip(self.nets, snap, strict=True):
                        for p, v in zip(m.parameters(), weights, strict=True):
                            p.copy_(v)
                if self.rows is None:  # (every member's checkpoints read these rows: built once)
                    self.rows = MemberRows(net, source, loss=loss, batch_size=batch_size, groups=groups, dtype=dtype)
                sums = MemberSums(self.nets, self.rows)
                self.done[step] = (sums, sums.correct.tolist(), set(range(len(self.nets))))
            sums, correct, waiting = self.done[step]
            waiting.discard(r)
            if not waiting:  # every member served: free the step's sums
                del self.done[step]
            return sums.accumulator(r, net), correct[r]  # (net: the member's own student, at these weights)
        return measure


def _same_setting(trainings: Sequence[TrainingConfig]) -> str | None:
    """Why ``trainings`` cannot be one population's (a sentence), or None: members may differ in their seed and
    ``shuffle_labels`` only."""
    base = dataclasses.replace(trainings[0], seed=0, shuffle_labels=False)
    for i, t in enumerate(trainings):
        if not isinstance(t, TrainingConfig):
            raise TypeError(f"trainings[{i}]: expected a TrainingConfig, got {type(t).__name__}")
        if dataclasses.replace(t, seed=0, shuffle_labels=False) != base:
            return f"trainings[{i}] differs from trainings[0] in more than its seed and shuffle_labels"
    return None


def compare_population(sample: DataSource, student: StudentConfig | None, trainings: Sequence[TrainingConfig],
                       evaluations: EvaluationConfig | Sequence[EvaluationConfig] | None = None, *,
                       device: torch.device | str | None = None,
                       engine: SerialEngine | DaskEngine | None = None, progress: bool = False,
                       _member_options: Sequence[dict] | None = None) -> list[ComparisonResult]:
    """:func:`~smaso.student.compare.compare_student` of every ``(trainings[r], evaluations[r])``, the students
    trained as one batched population (module docstring): the same results as calling it member by member.

    :param sample, student, device, engine: as :func:`~smaso.student.compare.compare_student` (one student config
        for all: the population has one architecture).
    :param trainings: one :class:`~smaso.student.config.TrainingConfig` per member, differing in ``seed`` and
        ``shuffle_labels`` only (otherwise, or where :func:`population_supported` says no, the members run one
        after the other).
    :param evaluations: one :class:`~smaso.student.config.EvaluationConfig` for all, or one per member.
    :param progress: a tqdm bar over the training steps (the population's, or each member's run one by one).
    :param _member_options: private (``smaso demo``), per member: compare_student's ``_alignment_ends`` and
        ``_last_checkpoints`` (what the member's run measures), as keywords.
    :returns: one :class:`~smaso.student.compare.ComparisonResult` per member, in order; each ``seconds`` is its
        measurement's time plus its share (1/R) of the population's training.
    """
    import time

    from smaso.student.compare import _check_dtype_device, compare_student
    from smaso.student.config import _configs
    from smaso.student.rows import _evaluation_rows, _training_pieces
    from teachers.chunked import as_chunks

    trainings = list(trainings)
    R = len(trainings)
    if R == 0:
        raise ValueError("trainings: expected at least one member")
    # None: compare_student's defaults
    evals: list[EvaluationConfig | None] = [evaluations] * R \
        if evaluations is None or isinstance(evaluations, EvaluationConfig) else list(evaluations)
    if len(evals) != R:
        raise ValueError(f"evaluations: expected one config, or one per member ({R}), got {len(evals)}")
    cfg = [_configs(student, t, e, {}, "compare_population") for t, e in zip(trainings, evals, strict=True)]
    cfg_s, t0 = cfg[0][0], cfg[0][1]
    opts = [{}] * R if _member_options is None else [dict(o) for o in _member_options]
    if len(opts) != R or any(set(o) - {"_alignment_ends", "_last_checkpoints"} for o in opts):
        raise ValueError(f"_member_options: expected one dict per member ({R}) of _alignment_ends and "
                         f"_last_checkpoints, got {_member_options!r:.120}")

    def one_by_one() -> list[ComparisonResult]:
        return [compare_student(sample, s, t, e, device=device, engine=engine, progress=progress, **o)
                for (s, t, e), o in zip(cfg, opts, strict=True)]

    if R == 1 or population_supported(cfg_s, t0) or _same_setting([c[1] for c in cfg]):
        return one_by_one()
    dtype = torch.float64 if cfg_s.dtype is None else cfg_s.dtype
    _check_dtype_device(dtype, device)
    if not hasattr(sample, "chunk") and type(sample).__name__ != "LadderSample":
        return one_by_one()  # (compare_student names what is wrong with it)
    chunks = as_chunks(sample)
    lad = chunks.ladder
    nets = [LadderStudent(lad, cfg_s.width, activation=cfg_s.activation, batch_norm=cfg_s.batch_norm,
                          bn_eps=cfg_s.bn_eps, bias=cfg_s.bias, seed=t.seed, shared=cfg_s.shared,
                          readout=cfg_s.readout, dtype=dtype, device=device) for _, t, _ in cfg]
    bs = t0.batch_size  # (one setting: _same_setting)
    if not nets[0].fast_path or t0.steps < 0 or bs is None or bs < 1 or any(e.eval_every <= 0 for _, _, e in cfg):
        return one_by_one()
    skips = [_evaluation_rows(e.held_out, chunks, e.eval_examples, lad)[1] for _, _, e in cfg]
    rows = [_training_pieces(chunks, bs, torch.Generator().manual_seed(t.seed), skip,
                             t.seed if t.shuffle_labels else None) for (_, t, _), skip in zip(cfg, skips, strict=True)]
    steps = t0.steps
    keep = {s for _, _, e in cfg for s in (0, steps, *range(0, steps + 1, e.eval_every))}
    tic = time.perf_counter()
    traj = train_ladder_population(nets, rows, steps=steps, lr=t0.lr, loss=t0.loss, weight_decay=t0.weight_decay,
                                   keep=sorted(keep), build=lambda items: population_batch(items, dtype),
                                   progress=progress)
    share = (time.perf_counter() - tic) / R
    # the members' checkpoints measured together where they read the same rows (the alignment, the checkpoints'
    # steps and where P comes from do not change them)
    rows_of = [dataclasses.replace(e, alignment=False, eval_every=1, P_source="empirical") for _, _, e in cfg]
    measure = _MemberCheckpoints(nets, traj) if all(e == rows_of[0] for e in rows_of) else None
    out = []
    for r, (s, t, e) in enumerate(cfg):
        res = compare_student(sample, s, t, e, device=device, engine=engine, _replay=traj.replay(r),
                              _statistics=None if measure is None else measure.member(r), **opts[r])
        res.seconds += share
        out.append(res)
    return out
