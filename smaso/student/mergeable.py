"""Mergeable per-event sums: the state protocol of the frequency accumulators (:class:`MergeableSums`,
:func:`negated_state`: the jackknife's leave-one-out states), and row groups of a record (:func:`record_rows`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import torch

from smaso.student.network import PER_EXAMPLE, StudentRecord

if TYPE_CHECKING:
    from typing import Self

    from teachers.ladder import Ladder

__all__ = ["MergeableSums", "check_record_weights", "event_counts", "event_error", "event_flags", "negated_state",
           "record_rows", "tree_pair_index"]


def event_error(level: int, bound: int, *, narrow: bool = False) -> str:
    """The message of events of ``level`` outside [0, ``bound``) (``narrow``: outside their regions' own ranges)."""
    if narrow:
        return (f"z: level {level} holds events outside its regions' ranges [0, m_r): the dataset's ladder does not "
                "match the student's")
    return f"z: level {level} holds events outside [0, {bound}): the dataset's ladder does not match the student's"


def event_flags(levels: Sequence[torch.Tensor], bounds: Sequence[int],
                sizes: Sequence[torch.Tensor | None]) -> torch.Tensor | None:
    """Check a batch's events where they are, with no host sync off the CPU.

    On the CPU (where reading a comparison back costs nothing) raise at once the ValueError of the first level whose
    events fall outside [0, M_l) or, where ``sizes[l]`` gives the regions' own counts m_r ``(R_l,)``, outside
    [0, m_r); elsewhere return the ``(levels, 2)`` bool flags of those two failures, on the events' device, for
    :meth:`MergeableSums._raise_event_flags` to read once.

    :param levels: per level the ``(N, R_l)`` integer events; ``bounds``: M_l per level.
    """
    if levels and levels[0].device.type != "cpu":
        false = torch.zeros((), dtype=torch.bool, device=levels[0].device)
        return torch.stack([torch.stack([((ev < 0) | (ev >= m)).any(),
                                         false if size is None else (ev >= size).any()])
                            for ev, m, size in zip(levels, bounds, sizes, strict=True)])
    for l, (ev, m, size) in enumerate(zip(levels, bounds, sizes, strict=True)):
        if not ev.numel():
            continue
        lo, hi = torch.aminmax(ev)
        if lo < 0 or hi >= m:
            raise ValueError(event_error(l, m))
        if size is not None and bool((ev >= size).any()):
            raise ValueError(event_error(l, m, narrow=True))
    return None


def event_counts(index: torch.Tensor, size: int) -> torch.Tensor:
    """``(size,)`` float64 counts of the flat indices ``index`` (any shape, int32 or int64, in [0, size)):
    ``torch.bincount``'s, by ``index_add_`` on the indices' device (bincount reads its input's maximum back to the
    host and has no meta kernel).  Integers, exact up to 2^53 whatever the order of the adds."""
    flat = index.reshape(-1)
    if flat.device.type == "cpu":  # where reading the maximum back costs nothing: ~1.5x faster than index_add_
        counts = torch.bincount(flat, minlength=size)
        if counts.shape[0] > size:
            raise ValueError(f"index: expected flat indices in [0, {size}), got {int(flat.max())}")
        return counts.to(torch.float64)
    ones = torch.ones((), dtype=torch.float64, device=flat.device).expand(flat.shape[0])
    return torch.zeros(size, dtype=torch.float64, device=flat.device).index_add_(0, flat, ones)


def check_record_weights(student: Any, rec: StudentRecord, derived: bool) -> None:
    """Refuse ``rec`` when ``derived`` sums (U, Gf: mapped from the edge sums by the student's weights now) would
    read other weights than those that made it (:attr:`StudentRecord.params_version`): a record of another student,
    or one made before an update of the weights."""
    if derived and rec.params_version is not None and rec.params_version != student.params_version():
        raise ValueError("rec: made by another student, or before the student's weights changed (an update "
                         "between forward_backward and add); add each record before updating the weights")


def with_leaves(rec: StudentRecord, z: torch.Tensor, student: Any) -> StudentRecord:
    """``rec``, its leaves' one-hot ``rec.fbar[d]`` ``(N, R_d, m)`` built from the events ``z`` ``(N, total_regions)``
    where ``forward_backward(delta_w=False)`` left it out (given leaf events, Delta W was its only reader); a record
    that has it is returned as it is."""
    if rec.fbar[-1] is not None:
        return rec
    from smaso.student.connectivity import one_hot_node_major

    leaves = z[:, student.ladder.level_offsets[-2]:]
    fbar = [*rec.fbar[:-1], one_hot_node_major(leaves, student.widths[-1], rec.g[0].dtype).permute(2, 0, 1)]
    return dataclasses.replace(rec, fbar=fbar, loss=cast(float, rec.loss if rec.loss_tensor is None
                                                         else rec.loss_tensor))  # (replace would read loss: a sync)


def check_record_delta_w(rec: StudentRecord, depth: int) -> None:
    """Refuse ``rec`` where its whole batch's Delta W is read and it has none (made by
    :meth:`~smaso.student.network.LadderStudent.forward_backward` with ``delta_w=False``)."""
    if any(w is None for w in rec.dW[:depth]):
        raise ValueError("rec: made with forward_backward(delta_w=False), without the batch's Delta W; add it in row "
                         "groups (ReplicateAccumulator.add with bounds, or rows=), which sum each group's own, or "
                         "make it with delta_w=True")


def tree_pair_index(parents: torch.Tensor, children: torch.Tensor, m: int, edge_base: torch.Tensor) -> torch.Tensor:
    """The flat count index ``(e M_p + a_p) M + a`` of every (parent, child) event pair of a uniform tree's level,
    whose edge e is child region e (parent e // b): ``parents`` ``(N, R_p)`` and ``children`` ``(N, R_p b)`` integer
    events, ``m`` = M the children's event count, ``edge_base`` ``(R_p b,)`` = e M_p M.  Returns ``(N, R_p, b)``,
    no gathers (the children grouped by parent are a view)."""
    n, rp = parents.shape
    return (parents[:, :, None] * m + edge_base.view(rp, -1)) + children.view(n, rp, -1)


def batch_loss_sum(rec: StudentRecord, n: int) -> float | torch.Tensor:
    """``rec.loss * n`` (a batch's mean loss times its example count) without reading a device loss back: a
    float64 0-dim tensor on the record's device when it holds :attr:`~StudentRecord.loss_tensor`, else a float.
    Bit for bit the float's product (a float32 loss widens to float64 exactly)."""
    t = rec.loss_tensor
    return rec.loss * n if t is None else t.to(torch.float64) * n


def record_rows(rec: StudentRecord, rows: slice, edges: list | None = None, *, strided: bool = False) -> StudentRecord:
    """The rows ``rows`` of a batch's record, as a record of its own.

    Per-example fields (``(N, R_l, n_l)``) and the stacked buffers (``(R_l, k, n_l, N)``, or batch-major
    ``(N, k, R_l, n_l)``) are sliced (views); ``dW`` and ``db`` are recomputed as the means over these rows
    (Eq 2: E[fbar_b g_a] per edge and E[g_a]).  Batch-level quantities stay those of the whole batch: BN's
    ``sigma`` and the parameter updates ``dc1``/``dc0`` (the rows were normalized with the batch's statistics),
    and ``loss`` (the batch mean; the record keeps no per-example loss).

    :param edges: per level the ``(parents, children)`` edge index of the student
        (:meth:`~smaso.student.network.LadderStudent.edge_index`); None for a uniform tree (a parent's
        children are one contiguous block).
    :param strided: on a uniform tree, each ``dW`` as one batched matmul per child place on strided views of the
        rows (no copies of the record; a stacked record's fields are node-major views): the same sums in
        another order, equal to the default's to the record dtype's round-off, at a fraction of its cost
        (the copies einsum makes of a strided record were most of a row group's cost).
    """
    if not isinstance(rows, slice) or rows.step not in (None, 1):
        raise TypeError(f"rows: expected a slice with step 1, got {rows!r}")
    n_all = rec.fbar[0].shape[0]
    lo, hi, _ = rows.indices(n_all)
    if hi <= lo:
        raise ValueError(f"rows: expected a non-empty range of the batch's {n_all} rows, got {rows!r}")
    if rec.fbar[-1] is None:
        raise ValueError("rec: made with forward_backward(delta_w=False) on leaf events, without their one-hot; "
                         "complete it first (with_leaves)")
    sl = slice(lo, hi)
    per: dict[str, Any] = {k: [None if t is None else t[sl] for t in getattr(rec, k)] for k in PER_EXAMPLE}
    d = len(rec.fbar) - 1
    dW, db = [None] * len(rec.dW), [None] * len(rec.db)  # type: list, list
    for l in range(d):
        g, child = per["g"][l], per["fbar"][l + 1]  # (n, R_l, n_l), (n, R_{l+1}, n_{l+1})
        if edges is None and strided:
            r, b = g.shape[1], child.shape[1] // g.shape[1]
            out = g.new_empty(r, b, child.shape[2], g.shape[2])
            rows_g = g.permute(1, 0, 2)  # (R_l, n, n_l)
            for c in range(b):  # child c of parent p is region p b + c
                out[:, c] = torch.bmm(child[:, c::b].permute(1, 2, 0), rows_g)
            dW[l] = (out / (hi - lo)).reshape(-1, child.shape[2], g.shape[2])  # (E, n_{l+1}, n_l)
        elif edges is None:
            grouped = child.reshape(hi - lo, g.shape[1], -1)  # children grouped by parent
            dW[l] = (torch.einsum("nrk,nrj->rkj", grouped, g) / (hi - lo)).reshape(-1, child.shape[2], g.shape[2])
        else:
            par, chi = edges[l]
            dW[l] = torch.einsum("nek,nej->ekj", child.index_select(1, chi), g.index_select(1, par)) / (hi - lo)
        db[l] = g.mean(0)
    stacked = None if rec.stacked is None else [buf[sl] if rec.stacked_layout == "batch" else buf[..., sl]
                                                for buf in rec.stacked]
    # the loss handed over as the device tensor when the record holds one: replace() would read ``loss`` (a sync)
    loss = rec.loss if rec.loss_tensor is None else rec.loss_tensor
    return dataclasses.replace(rec, **per, dW=dW, db=db, stacked=stacked,
                               loss=cast(float, loss))  # (a tensor: the property keeps it on the device)


class MergeableSums:
    """The mergeable state of an accumulator (torchmetrics-style): the totals named in ``_COUNTS`` (an example
    count ``n`` and a ``loss_sum``, unless a subclass names others) and the lists of per-level tensors named in
    ``_SUMS`` (None where a level has none).

    Two partial states over disjoint rows add up (:meth:`merge_`) to the state of one pass over all of
    them; :meth:`state_dict` is what moves between processes.
    """

    _SUMS: tuple[str, ...] = ()
    #: the scalar totals of the state, each with the type it is added as
    _COUNTS: dict[str, type] = {"n": int, "loss_sum": float}
    #: settings that are part of the state and must be equal in two states that merge (never added)
    _META: tuple[str, ...] = ()
    n: int
    ladder: Ladder  # (set by the subclasses that check events)
    #: events checked on the device, not yet on the host: ``(levels, 2)`` bool, True where a batch's events of that
    #: level fell outside [0, M_l) (column 0) or outside its regions' own ranges [0, m_r) (column 1); None: none
    #: pending (every batch so far was checked at once on the CPU)
    _event_flags: torch.Tensor | None = None
    #: the loss total: a Python float, or a float64 0-dim tensor on the device once a batch's loss was added there
    #: (:meth:`_add_loss`), read back by :attr:`loss_sum` only when the sums leave the device
    _loss_total: float | torch.Tensor = 0.0

    @property
    def loss_sum(self) -> float:
        """The sum over the examples added of the loss (each batch's mean loss times its example count), as a
        float: a host read of the device total, made when asked for (by :meth:`state_dict` and ``result``),
        never per batch."""
        return float(self._loss_total)

    @loss_sum.setter
    def loss_sum(self, value: float | torch.Tensor) -> None:
        self._loss_total = value

    def _add_loss(self, rec: StudentRecord, n: int) -> None:
        """Add a record's batch-mean loss times ``n`` (its example count) to the total, on the device when the
        record holds its loss there (:attr:`~smaso.student.network.StudentRecord.loss_tensor`): no host read, and
        the same float64 operations as on the float (a float32 loss widens exactly), so the same total bit for
        bit."""
        self._merge_loss(batch_loss_sum(rec, n))

    def _merge_loss(self, loss_sum: float | torch.Tensor) -> None:
        """Add a loss total (a state's float, or a batch's device tensor of :func:`batch_loss_sum`) to this one's,
        without a host read."""
        self._loss_total = self._loss_total + (loss_sum if isinstance(loss_sum, torch.Tensor) else float(loss_sum))

    def _defer_event_check(self, flags: torch.Tensor | None) -> None:
        """Keep a batch's device-side event flags (:func:`event_flags`) for :meth:`_raise_event_flags`: an OR on the
        device, no host sync per batch."""
        if flags is not None:
            self._event_flags = flags if self._event_flags is None else self._event_flags | flags

    def _raise_event_flags(self) -> None:
        """Raise the ValueError of the first level whose deferred events were out of range (one host sync, when the
        sums leave the device: :meth:`state_dict` and the accumulators' ``result``)."""
        if self._event_flags is not None:
            for level, (wide, narrow) in enumerate(self._event_flags.cpu().tolist()):
                if wide or narrow:
                    raise ValueError(event_error(level, self.ladder.events[level], narrow=not wide))

    def state_dict(self) -> dict:
        """The accumulated state: the totals (example count, loss sum), the settings named in ``_META`` and every
        per-event sum (cloned).

        :raises ValueError: events added on another device than the CPU were out of range (checked here, once).
        """
        self._raise_event_flags()
        return {**{k: getattr(self, k) for k in (*self._COUNTS, *self._META)},
                **{k: [None if t is None else t.clone() for t in getattr(self, k)] for k in self._SUMS}}

    def _checked_state(self, other: Self | dict) -> dict:
        """``other`` (an accumulator of this type or its :meth:`state_dict`) as a state that can merge into this
        one; the checks of :meth:`merge_`."""
        state = other.state_dict() if isinstance(other, type(self)) else other
        if not isinstance(state, dict) or set(state) != {*self._COUNTS, *self._META, *self._SUMS}:
            raise TypeError(f"other: expected a {type(self).__name__} or its state_dict()")
        for key in self._META:
            if state[key] != getattr(self, key):
                raise ValueError(f"other: accumulated with {key}={state[key]!r}, this one with "
                                 f"{key}={getattr(self, key)!r}")
        for key in self._SUMS:
            shapes = [None if t is None else (tuple(t.shape), t.dtype) for t in getattr(self, key)]
            if shapes != [None if t is None else (tuple(t.shape), t.dtype) for t in state[key]]:
                raise ValueError(f"other: its {key!r} sums have other shapes or dtypes (another student, teacher "
                                 "or accumulation dtype)")
        return state

    def merge_(self, other: Self | dict) -> Self:
        """Add another accumulator's state (or its :meth:`state_dict`) to this one, in place; returns self.

        Exact for the counts; the sums are added in the accumulation dtype (use float64 for sums that
        agree with one pass to round-off).

        :raises TypeError: ``other`` is neither such an accumulator nor its state.
        :raises ValueError: the other state was accumulated for a student of other widths, another teacher or
            another accumulation dtype (or with other ``_META`` settings).
        """
        state = self._checked_state(other)
        for key in self._SUMS:
            for mine, theirs in zip(getattr(self, key), state[key], strict=True):
                if mine is not None:
                    mine += theirs.to(mine.device)
        for key, kind in self._COUNTS.items():
            if key == "loss_sum":  # (kept where it is: a device total is not read back here)
                self._merge_loss(state[key])
            else:
                setattr(self, key, getattr(self, key) + kind(state[key]))
        return self

    def __iadd__(self, other: Self | dict) -> Self:
        return self.merge_(other)  # (a subclass's merge_, with its own checks)


def negated_state(state: dict) -> dict:
    """``-state`` of a :meth:`MergeableSums.state_dict` (merging it subtracts those rows: the jackknife's
    leave-one-out states)."""
    return {k: (-v if k in ("n", "loss_sum") else [None if t is None else -t for t in v]) for k, v in state.items()}
