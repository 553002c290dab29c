"""Synonymic sensitivity (Petrini et al., "How deep neural networks learn compositional data: the random hierarchy
model", arXiv 2307.02129, §"synonymic sensitivity"), as a mergeable statistic.

For a layer k with representation h_k(x) (flattened) and the operator P_l that exchanges synonyms at level l
(keeps every symbol at levels <= l and redraws every production below it, the authors' ``seed_reset_layer``):

    S_{k,l} = E_x ||h_k(x) - h_k(P_l x)||^2 / E_{x, x''} ||h_k(x) - h_k(x'')||^2,

x'' independent of x.  S near 1: layer k tells synonyms apart as it tells any two inputs apart; S near 0: it is
invariant to the exchange.  The statistic takes the inputs as tensors: x, its exchanged x' = P_l x (made by the
caller, e.g. with the library's synonym exchange) and, optionally, independent x''; one accumulator is one l.

The denominator's estimate.  With ``x_independent`` given, the mean over rows of ||h(x_i) - h(x''_i)||^2.  Without
it, the mean over the ordered pairs i != j of one batch, ||h(x_i) - h(x_j)||^2 (both unbiased).  The authors'
code (``observables/stability.py``, ``measure_stability``) averages over all n^2 pairs of a batch of n = 100
including the n pairs i = j, whose distance is 0: its denominator is (n - 1)/n times this one (S larger by
n/(n - 1), 1% at n = 100).

Two accumulators over disjoint rows merge (:meth:`SynonymicSensitivity.merge_`) into the state of one pass; a
0/0 (a layer constant over the independent pairs, or no rows) is NaN with its reason.

Standard error (rows with their own x'' only): the terms a_i = ||h(x_i) - h(x'_i)||^2 and b_i = ||h(x_i) -
h(x''_i)||^2 are i.i.d. pairs, so S = mean(a) / mean(b) has the delta-method error
sqrt(sum_i (a_i - S b_i)^2 / ((n - 1) n)) / mean(b).  The pairs within a batch are not independent terms: with them
the error is NaN with its reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from smaso.student.mergeable import MergeableSums
from smaso.student.network import LadderStudent, _check_student, _check_variable, node_variable

if TYPE_CHECKING:
    from typing import Self

__all__ = ["SensitivityResult", "SynonymicSensitivity", "student_layers", "synonymic_sensitivity"]


@torch.no_grad()
def student_layers(student: LadderStudent, x: torch.Tensor, variable: str = "output") -> list[torch.Tensor]:
    """The representation of every level of ``student`` on ``x`` ``(N, R_d, dim)``: ``out[l]`` ``(N, R_l n_l)``
    (float64), l = 0 (the outputs) .. d (the inputs themselves), the node variable ``variable``
    (:data:`~smaso.student.network.VARIABLES`) flattened over regions and nodes.  With BN, the rows are one batch
    (BN's statistics are the batch's)."""
    _check_student(student)
    _check_variable(variable)
    student.check_inputs(x)
    dev = student.weights[0].device
    # the recorded forward (labels only enter the backward, which is not read)
    rec = student.forward_backward(x.to(dev), torch.zeros(x.shape[0], dtype=torch.int64, device=dev))
    d = student.ladder.depth
    return [(rec.fbar[l] if l == d else node_variable(student, rec, l, variable)).reshape(x.shape[0], -1)
            .to(torch.float64) for l in range(d + 1)]


@dataclass
class SensitivityResult:
    """S per layer (:mod:`smaso.student.sensitivity`).

    :ivar values: S_k per layer (NaN where undefined: :attr:`reasons` says why).
    :ivar exchanged: E||h(x) - h(x')||^2 per layer; ``independent``: E||h(x) - h(x'')||^2 per layer.
    :ivar num_rows: rows x (with their x'); ``num_pairs``: independent pairs behind the denominator.
    :ivar stderr: the delta-method standard error of S per layer (module docstring; NaN where undefined, with its
        reason in :attr:`stderr_reason`).
    :ivar reasons: ``{layer: why S is NaN}``.
    """

    values: list[float]
    exchanged: list[float]
    independent: list[float]
    num_rows: int
    num_pairs: int
    reasons: dict[int, str] = field(default_factory=dict)
    stderr: list[float] = field(default_factory=list)
    stderr_reason: str | None = None


class SynonymicSensitivity(MergeableSums):
    """Streaming sums of S_k (module docstring) for ``num_layers`` layers: update with batches, merge states of
    disjoint rows, :meth:`compute` the ratio.

    State: per layer the sums of ||h(x) - h(x')||^2 over rows and of ||h(x) - h(x'')||^2 over independent pairs
    (float64 0-dim tensors), and over rows given with their own x'' the sums of a^2, b^2 and a b (the standard
    error's); the row count ``n``, the pair count ``pairs`` and ``paired``, the rows given with their own x''.
    """

    _SUMS = ("exchanged_sum", "independent_sum", "aa_sum", "bb_sum", "ab_sum")
    _COUNTS = {"n": int, "pairs": int, "paired": int}
    exchanged_sum: list[torch.Tensor]
    independent_sum: list[torch.Tensor]
    aa_sum: list[torch.Tensor]
    bb_sum: list[torch.Tensor]
    ab_sum: list[torch.Tensor]
    pairs: int
    paired: int
    _META = ("num_layers",)

    def __init__(self, num_layers: int) -> None:
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"num_layers: expected a positive integer, got {num_layers!r}")
        self.num_layers = num_layers
        for key in self._SUMS:
            setattr(self, key, [torch.zeros((), dtype=torch.float64) for _ in range(num_layers)])
        self.n = self.pairs = self.paired = 0

    def _layers(self, h: Sequence[torch.Tensor], name: str, rows: int | None) -> list[torch.Tensor]:
        if not isinstance(h, (list, tuple)) or len(h) != self.num_layers:
            raise ValueError(f"{name}: expected a list of {self.num_layers} per-layer tensors (N, ...), got "
                             f"{len(h) if isinstance(h, (list, tuple)) else type(h).__name__}")
        out = []
        for k, t in enumerate(h):
            if not isinstance(t, torch.Tensor) or t.dim() < 1 or t.is_complex():
                raise ValueError(f"{name}[{k}]: expected a real tensor (N, ...), got "
                                 f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
            if rows is not None and t.shape[0] != rows:
                raise ValueError(f"{name}[{k}]: expected {rows} rows (those of h[0]), got {t.shape[0]}")
            out.append(t.reshape(t.shape[0], -1).to(torch.float64))
        return out

    def update(self, h: Sequence[torch.Tensor], h_exchanged: Sequence[torch.Tensor],
               h_independent: Sequence[torch.Tensor] | None = None) -> Self:
        """Add one batch: per layer k, ``h[k]`` ``(N, ...)`` the representation of x, ``h_exchanged[k]`` that of
        x' = P_l x (row i of x), ``h_independent[k]`` that of an independent x'' (row i, N rows), or None: the
        pairs i != j of this batch (N >= 2 for any pair).  Shapes must agree per layer."""
        a = self._layers(h, "h", None)
        n = a[0].shape[0]
        b = self._layers(h_exchanged, "h_exchanged", n)
        c = None if h_independent is None else self._layers(h_independent, "h_independent", n)
        for k in range(self.num_layers):
            if b[k].shape != a[k].shape or (c is not None and c[k].shape != a[k].shape):
                raise ValueError(f"layer {k}: the representations of x, x' and x'' must have one shape, got "
                                 f"{tuple(a[k].shape)}, {tuple(b[k].shape)}"
                                 + ("" if c is None else f", {tuple(c[k].shape)}"))
            near = (a[k] - b[k]).pow(2).sum(1)
            self.exchanged_sum[k] += near.sum()
            if c is not None:
                far = (a[k] - c[k]).pow(2).sum(1)
                self.independent_sum[k] += far.sum()
                self.aa_sum[k] += near.pow(2).sum()
                self.bb_sum[k] += far.pow(2).sum()
                self.ab_sum[k] += (near * far).sum()
            else:  # sum_{i != j} |a_i - a_j|^2 = 2 N sum_i |a_i - mean|^2 (centred: no cancellation of large means)
                self.independent_sum[k] += 2 * n * (a[k] - a[k].mean(0)).pow(2).sum() if n else 0.0
        self.n += n
        self.pairs += n if c is not None else n * (n - 1)
        self.paired += n if c is not None else 0
        return self

    def update_student(self, student: LadderStudent, x: torch.Tensor, x_exchanged: torch.Tensor,
                       x_independent: torch.Tensor | None = None, *, variable: str = "output") -> Self:
        """:meth:`update` with the student's levels (:func:`student_layers`; layer k = level k, the last the inputs)
        on ``x``, ``x_exchanged`` and ``x_independent`` (each ``(N, R_d, dim)``), run as one batch so that BN
        normalizes all three alike."""
        _check_student(student)
        parts = [x, x_exchanged] + ([] if x_independent is None else [x_independent])
        for name, t in zip(("x", "x_exchanged", "x_independent"), parts, strict=False):
            if not isinstance(t, torch.Tensor) or t.shape != x.shape:
                raise ValueError(f"{name}: expected a tensor of x's shape {tuple(x.shape)}, got "
                                 f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
        if len(student.widths) != self.num_layers:
            raise ValueError(f"student: has {len(student.widths)} levels, this accumulator {self.num_layers} layers")
        n = x.shape[0]
        layers = student_layers(student, torch.cat(parts), variable)
        split = [t.split(n) for t in layers]
        return self.update([s[0] for s in split], [s[1] for s in split],
                           None if x_independent is None else [s[2] for s in split])

    def compute(self) -> SensitivityResult:
        """S_k per layer, NaN with a reason where the ratio is 0/0 or x/0."""
        values, exch, indep, reasons, err = [], [], [], {}, []
        why = (None if self.paired == self.n >= 2 else
               "fewer than 2 rows" if self.n < 2 else
               "some rows were compared with the other rows of their batch (no x_independent): those pairs are not "
               "independent terms")
        for k in range(self.num_layers):
            num = self.exchanged_sum[k].item() / self.n if self.n else math.nan
            den = self.independent_sum[k].item() / self.pairs if self.pairs else math.nan
            exch.append(num)
            indep.append(den)
            if not self.n or not self.pairs:
                reasons[k] = ("no rows accumulated" if not self.n else
                              "no independent pairs (one row per batch and no x_independent)")
                values.append(math.nan)
            elif den == 0:
                reasons[k] = (f"{'0/0' if num == 0 else 'x/0'}: layer {k} is the same on every independent pair "
                              "(a constant or dead layer), so it tells no inputs apart")
                values.append(math.nan)
            else:
                values.append(num / den)
            if why is not None or math.isnan(values[-1]):
                err.append(math.nan)
                continue
            r = values[-1]  # sum_i (a_i - r b_i)^2 from the sums; its mean term is 0 by r's definition
            ss = (self.aa_sum[k] - 2 * r * self.ab_sum[k] + r * r * self.bb_sum[k]).item()
            err.append(math.sqrt(max(ss, 0.0) / ((self.n - 1) * self.n)) / den)
        return SensitivityResult(values, exch, indep, self.n, self.pairs, reasons, err,
                                 why if why is not None else None)


def synonymic_sensitivity(student: LadderStudent, x: torch.Tensor, x_exchanged: torch.Tensor,
                          x_independent: torch.Tensor | None = None, *, batch_size: int | None = None,
                          variable: str = "output") -> SensitivityResult:
    """S_k of every level of ``student`` (level 0 the outputs .. d the inputs) on rows ``x`` and their exchanged
    ``x_exchanged`` (and independent ``x_independent``, else the pairs within each batch), in batches of
    ``batch_size`` rows (None: one batch; with BN, one batch is what BN normalizes)."""
    _check_student(student)
    acc = SynonymicSensitivity(len(student.widths))
    n = x.shape[0]
    bs = n if batch_size is None else batch_size
    if isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
        raise ValueError(f"batch_size: expected None or a positive integer, got {batch_size!r}")
    for i in range(0, n, bs):
        acc.update_student(student, x[i:i + bs], x_exchanged[i:i + bs],
                           None if x_independent is None else x_independent[i:i + bs], variable=variable)
    return acc.compute()
