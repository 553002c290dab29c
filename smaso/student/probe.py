"""The linear probe of event alignment: how well a region's node group encodes its event z_alpha linearly.

:class:`LinearProbe` fits, per region, least squares of one-hot(z_alpha) on the group's node variables
(:func:`~smaso.student.network.node_variable`) and scores the argmax on other rows; its sums merge across
batches, chunks and workers like every :class:`~smaso.student.mergeable.MergeableSums`.
:mod:`smaso.student.alignment` reports it beside the per-node measures.
"""

from __future__ import annotations

import math

import torch

from smaso.student.frequency import _one_hot_events, _student_events
from smaso.student.mergeable import MergeableSums, event_counts
from smaso.student.network import LadderStudent, StudentRecord, _check_student, _check_variable, node_variable

__all__ = ["LinearProbe"]


class LinearProbe(MergeableSums):
    """Each region's linear-probe accuracy for its event z_alpha from its node group (level 0: the outputs).

    Fit: least squares of one-hot(z_alpha) on [f_alpha, 1] over the rows given to :meth:`add_fit` (ridge
    ``ridge`` times the mean diagonal of the Gram matrix, for groups with dead or copied nodes); score: the
    fraction of the rows given to :meth:`add_score` (held-out rows) whose argmax is z_alpha.  Both phases are
    sums over rows (the Gram sums, then the correct predictions and the scored rows' event counts), so chunks
    merge (:meth:`merge_`, also from a :meth:`state_dict` sent by another process).  f_alpha is the node
    variable ``variable`` (:data:`VARIABLES`, default the output: what the parent reads).
    """

    _SUMS = ("gram", "cross", "correct", "counts")
    _COUNTS = {"n_fit": int, "n_score": int}
    _META = ("variable",)

    def __init__(self, student: LadderStudent, ridge: float = 1e-8, *, variable: str = "output") -> None:
        _check_student(student)
        if not (isinstance(ridge, (int, float)) and math.isfinite(ridge) and ridge >= 0):
            raise ValueError(f"ridge: expected a finite number >= 0, got {ridge!r}")
        self.variable = _check_variable(variable)
        self.student, self.ladder, self.ridge = student, student.ladder, float(ridge)
        lad, w, dev = self.ladder, student.widths, student.weights[0].device
        z64 = {"dtype": torch.float64, "device": dev}
        self.gram = [torch.zeros(lad.num_regions[l], w[l] + 1, w[l] + 1, **z64) for l in range(lad.depth)]
        self.cross = [torch.zeros(lad.num_regions[l], w[l] + 1, lad.events[l], **z64) for l in range(lad.depth)]
        self.correct = [torch.zeros(lad.num_regions[l], **z64) for l in range(lad.depth)]
        self.counts = [torch.zeros(lad.num_regions[l], lad.events[l], **z64) for l in range(lad.depth)]
        self.n_fit, self.n_score = 0, 0
        self.coef: list[torch.Tensor] | None = None

    def _design(self, rec: StudentRecord, l: int) -> torch.Tensor:
        f = node_variable(self.student, rec, l, self.variable).to(torch.float64).transpose(0, 1)  # (R, N, n)
        return torch.cat([f, torch.ones(*f.shape[:2], 1, dtype=f.dtype, device=f.device)], -1)

    def add_fit(self, rec: StudentRecord, z: torch.Tensor) -> None:
        """Add fitting rows."""
        if self.coef is not None:
            raise RuntimeError("LinearProbe: already solved; add fitting rows before the first add_score")
        z = _student_events(self.student, z, rec)
        off = self.ladder.level_offsets
        for l in range(self.ladder.depth):
            x = self._design(rec, l)
            # (R, N, M_l) targets by a scatter on the device: one_hot reads the events' range back off CUDA
            ev = z[:, off[l]: off[l + 1]].to(x.device, torch.int64)
            target = _one_hot_events(ev, self.ladder.events[l], x.dtype).transpose(1, 2).contiguous()
            self.gram[l] += x.transpose(1, 2) @ x
            self.cross[l] += x.transpose(1, 2) @ target
        self.n_fit += z.shape[0]

    def _solve(self) -> None:
        if self.n_fit == 0:
            raise ValueError("LinearProbe: no fitting rows (call add_fit first)")
        self.coef = []
        for a, b in zip(self.gram, self.cross, strict=True):
            scale = a.diagonal(dim1=1, dim2=2).mean(-1).clamp(min=1e-300)[:, None, None]
            eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
            self.coef.append(torch.linalg.solve(a + self.ridge * scale * eye, b))

    def add_score(self, rec: StudentRecord, z: torch.Tensor) -> None:
        """Score held-out rows (solves the fit on the first call)."""
        z = _student_events(self.student, z, rec)
        if self.coef is None:
            self._solve()
        off = self.ladder.level_offsets
        for l in range(self.ladder.depth):
            ev = z[:, off[l]: off[l + 1]].long().to(self.counts[l].device)
            pred = (self._design(rec, l) @ self.coef[l]).argmax(-1)  # type: ignore[index]  # (R, N); solved above
            self.correct[l] += (pred == ev.T.to(pred)).sum(-1).to(torch.float64)
            r_l, m = ev.shape[1], self.ladder.events[l]
            self.counts[l] += event_counts(ev + torch.arange(r_l, device=ev.device) * m, r_l * m).view(r_l, m)
        self.n_score += z.shape[0]

    def merge_(self, other: LinearProbe | dict) -> LinearProbe:
        """Add another probe's sums (or its :meth:`state_dict`: the sums and the row counts ``n_fit``, ``n_score``,
        what a chunk's task sends back) of the same phase (fits before solving, scores after), in place; returns
        self.

        :raises TypeError: ``other`` is neither a probe of the same student nor a probe's state.
        :raises ValueError: the state's sums have other shapes or dtypes (another student or ladder).
        :raises RuntimeError: fitting rows merged into a probe already solved.
        """
        if isinstance(other, LinearProbe):
            if other.student is not self.student:
                raise TypeError("other: expected a LinearProbe of the same student")
            other = other.state_dict()
        if self.coef is not None and isinstance(other, dict) and other.get("n_fit"):
            raise RuntimeError("LinearProbe: already solved; merge fitting rows before the first add_score")
        return super().merge_(other)

    def accuracy(self) -> list[torch.Tensor]:
        """Held-out accuracy ``(R_l,)`` per level."""
        if self.n_score == 0:
            raise ValueError("LinearProbe: no held-out rows scored (call add_score)")
        return [c / self.n_score for c in self.correct]

    def chance(self, z: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The majority-event rate ``(R_l,)`` per level on events ``z`` ``(N, total_regions)``, by default on the
        rows scored so far: the probe's floor."""
        if z is None:
            if self.n_score == 0:
                raise ValueError("LinearProbe: no held-out rows scored (call add_score)")
            return [c.max(-1).values / self.n_score for c in self.counts]
        off, z = self.ladder.level_offsets, self.student.ladder_events(z)
        return [torch.nn.functional.one_hot(z[:, off[l]: off[l + 1]].long(), self.ladder.events[l]).double()
                .mean(0).max(-1).values for l in range(self.ladder.depth)]
