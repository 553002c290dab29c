"""The sample-complexity sweep's built-in per-run measures on a Random Hierarchy Model (:mod:`smaso.sweep`'s
``measure=`` hook): synonymic sensitivity per layer, event alignment per level, Thm 2's measured conditions.

:class:`RHMMeasures` is called on every trained student of a sweep with its training and test rows; everything it
reads is the test rows (held out, disjoint from the training rows) and their events:

- **Synonymic sensitivity** (:mod:`smaso.student.sensitivity`, Petrini et al. arXiv 2307.02129):

      S_k = E_x ||h_k(x) - h_k(P x)||^2 / E_{x, x''} ||h_k(x) - h_k(x'')||^2,

  P x the test row with its synonyms exchanged at ``exchange_level`` (default L - 1: every symbol of level L - 1
  kept, the input's s-patches redrawn among their symbol's m productions, the paper's main measure;
  :func:`teachers.derivations.exchange_synonyms`), x'' another test row (the rows rolled by one: distinct
  derivations, so the denominator has the delta-method standard error).  Keys ``sensitivity_l{k}`` and
  ``sensitivity_l{k}_se`` for every *student* level k = 0 (the class scores) .. d - 1 (the first hidden layer),
  and ``sensitivity_input`` (k = d, the inputs themselves: a property of the data, the reference).
- **Event alignment** (:func:`smaso.student.alignment.alignment_report` on the test rows and their events): per
  student level k < d, ``eta2_l{k}`` (median share of a node's variance explained by its region's event),
  ``eta2_control_l{k}`` (the same against neighbouring regions' events), ``spec_l{k}`` (median over event
  indicators of the best node's correlation), ``matched_l{k}`` (the fraction of indicators matched at 0.95),
  ``probe_l{k}`` and ``probe_chance_l{k}`` (held-out linear-probe accuracy of the event and its majority floor).
- **Thm 2's measured conditions** (:func:`smaso.student.diagnosis.diagnose` on the frequency statistics of the test
  rows, :func:`smaso.student.frequency.collect_statistics` with the sweep's loss): per student level k,
  ``focus_l{k}``, ``broadness_l{k}`` (k >= 1), ``decorrelation_fwd_l{k}``, ``decorrelation_bwd_l{k}``,
  ``decorrelation_dW_l{k}`` (k < d): each the relative size of the error term that condition's failure puts into
  the reformulation (``docs/theory.md`` §1.5).  The pairwise event statistics they read are the sample's own,
  which on an RHM are the children's marginals: that is what the conditions are stated in (Thm 2 is a statement
  about pairwise statistics), not an approximation of the productions.  A NaN comes with ``{key}_reason``.

Which student level is which RHM level.  The CNN (the ladder student on ``Ladder.rhm`` with a readout group) has
depth L + 1: level 0 the class scores, level 1 the readout group (its event the class), level k + 1 the RHM's level
k (k = 1..L - 1: its nodes see one symbol's subtree), level L + 1 the inputs.  The shallow student (the flat view
with a readout group, :mod:`smaso.student.shallow`) has depth 2: level 0 the scores, level 1 the hidden layer
(whose region's event is the class: it sees the whole input), level 2 the inputs; its events are the teacher's
rows mapped by :func:`~smaso.student.shallow.flat_sample`, so no hidden node of it has an RHM symbol below the
class to align with (said in that module).

Alignment and the conditions cost a forward-backward pass over the rows with per-event sums; ``detail_sizes``
limits them to some training-set sizes (None: every run), the sensitivity runs on every run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from smaso.student.network import LadderStudent
    from teachers.ladder import Ladder
    from teachers.sampling import LadderSample

__all__ = ["ALIGNMENT_KEYS", "CONDITION_KEYS", "RHMMeasures"]

#: The per-level alignment numbers :class:`RHMMeasures` keeps (``{key}_l{level}``).
ALIGNMENT_KEYS = ("eta2", "eta2_control", "spec", "matched", "probe", "probe_chance")
#: Thm 2's conditions :class:`RHMMeasures` keeps (``{key}_l{level}``), as
#: :func:`~smaso.student.diagnosis.diagnose` names them.
CONDITION_KEYS = ("focus", "broadness", "decorrelation_fwd", "decorrelation_bwd", "decorrelation_dW")


@dataclass(frozen=True)
class RHMMeasures:
    """The per-run measures of an RHM sweep (module docstring): ``RHMMeasures(...)(student, train, test, ladder)``.

    :param exchange_level: the level whose symbols the synonym exchange keeps (None: L - 1, the lowest).
    :param detail_sizes: the training-set sizes P (rows of ``train``) at which alignment and Thm 2's conditions are
        measured too (None: every run; empty: none).
    :param max_rows: at most this many test rows are read (the first ones).
    :param loss: the loss of the backward pass the conditions' statistics read (the sweep's).
    :param seed: the synonym exchange's seed (combined with the test sample's own).
    """

    exchange_level: int | None = None
    detail_sizes: tuple[int, ...] | None = None
    max_rows: int = 2048
    loss: str = "cross_entropy"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.exchange_level is not None and (isinstance(self.exchange_level, bool)
                                                or not isinstance(self.exchange_level, int) or self.exchange_level < 0):
            raise ValueError(f"exchange_level: expected None or a level >= 0, got {self.exchange_level!r}")
        if self.detail_sizes is not None:
            if isinstance(self.detail_sizes, (str, bytes)) or not all(
                    isinstance(P, int) and not isinstance(P, bool) and P > 0 for P in self.detail_sizes):
                raise ValueError(f"detail_sizes: expected None or positive training-set sizes, got "
                                 f"{self.detail_sizes!r}")
            object.__setattr__(self, "detail_sizes", tuple(self.detail_sizes))
        if isinstance(self.max_rows, bool) or not isinstance(self.max_rows, int) or self.max_rows < 3:
            raise ValueError(f"max_rows: expected an integer >= 3, got {self.max_rows!r}")
        if self.loss not in ("squared", "cross_entropy"):
            raise ValueError(f"loss: expected 'squared' or 'cross_entropy', got {self.loss!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed: expected a non-negative integer, got {self.seed!r}")

    def __call__(self, student: LadderStudent, train: LadderSample, test: LadderSample,
                 ladder: Ladder) -> dict[str, float | str]:
        from smaso.student.network import _check_student
        from teachers.sampling import LadderSample

        _check_student(student)
        if not isinstance(test, LadderSample) or test.ladder.fingerprint() != ladder.fingerprint():
            raise ValueError("test: expected a LadderSample of the sweep's ladder (its events are read)")
        n = min(test.z.shape[0], self.max_rows)
        if n < 3:
            raise ValueError(f"test: the measures need at least 3 test rows, got {test.z.shape[0]}")
        rows = _rows(test, n)
        out: dict[str, float | str] = dict(self._sensitivity(student, rows, ladder))
        P = int(torch.as_tensor(train.y).shape[0])
        if self.detail_sizes is None or P in self.detail_sizes:
            events = _student_rows(student, rows)
            out.update(_alignment(student, events))
            out.update(_conditions(student, events, self.loss))
        return out

    def _sensitivity(self, student: LadderStudent, rows: LadderSample, ladder: Ladder) -> dict[str, float | str]:
        from smaso.student.sensitivity import synonymic_sensitivity
        from teachers.derivations import exchange_synonyms
        from teachers.sampling import LadderSample

        level = ladder.depth - 1 if self.exchange_level is None else self.exchange_level
        if level >= ladder.depth:
            raise ValueError(f"exchange_level: at most depth - 1 = {ladder.depth - 1} (the leaves have no synonyms "
                             f"below them), got {level}")
        dtype = student.weights[0].dtype
        x = rows.inputs(dtype=dtype)
        exchanged = exchange_synonyms(ladder, rows, level, seed=_mix(self.seed, rows.seed or 0))
        assert isinstance(exchanged, LadderSample)  # (a sample in, a sample out)
        res = synonymic_sensitivity(student, x, exchanged.inputs(dtype=dtype), x.roll(1, 0))
        d = len(res.values) - 1
        out: dict[str, float | str] = {"sensitivity_input": res.values[d], "exchange_level": float(level)}
        for k in range(d):
            out[f"sensitivity_l{k}"] = res.values[k]
            out[f"sensitivity_l{k}_se"] = res.stderr[k]
            if k in res.reasons:
                out[f"sensitivity_l{k}_reason"] = res.reasons[k]
        return out


def _mix(a: int, b: int) -> int:
    """One seed from two (the measure's and the test sample's), in [0, 2^62)."""
    return (a * 0x9E3779B97F4A7C15 + b) % 2**62


def _rows(sample: LadderSample, n: int) -> LadderSample:
    """The first ``n`` rows of ``sample``."""
    from teachers.sampling import LadderSample

    if sample.z.shape[0] == n:
        return sample
    return LadderSample(sample.ladder, sample.z[:n], None if sample.x is None else sample.x[:n], sample.seed,
                        sample.start, n, dict(sample.meta))


def _student_rows(student: LadderStudent, rows: LadderSample) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x, y, z)`` of ``rows`` on the student's own ladder: the teacher's events, or on the shallow student's flat
    view the root's and the leaves' (:func:`~smaso.student.shallow.flat_sample`)."""
    from smaso.student.shallow import flat_sample

    if student.teacher.pairwise_view_of is not None:  # the shallow student: built on the flat view
        rows = flat_sample(rows, student.teacher)
    return rows.inputs(dtype=student.weights[0].dtype), torch.as_tensor(rows.y).long(), rows.z


def _alignment(student: LadderStudent, data: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
               ) -> dict[str, float | str]:
    from smaso.student.alignment import alignment_report, undefined_note

    x, _, z = data
    out: dict[str, float | str] = {}
    for row in alignment_report(student, x, z):
        k = row["level"]
        for key in ALIGNMENT_KEYS:
            if key == "matched":
                ind = row["indicators"]
                out[f"matched_l{k}"] = row["matched"] / ind if ind else math.nan
            else:
                out[f"{key}_l{k}"] = float(row[key])
        if math.isnan(float(row["eta2_control"])):
            out[f"eta2_control_l{k}_reason"] = (
                "one region at this level: no neighbouring region's event to compare with"
                if int(student.ladder.num_regions[k]) == 1 else "no node of the level is defined against a control")
        note = undefined_note(row)
        if note:
            out[f"alignment_l{k}_note"] = note
    return out



def _conditions(student: LadderStudent, data: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                loss: str) -> dict[str, float | str]:
    from smaso.student.diagnosis import diagnose
    from smaso.student.frequency import collect_statistics

    x, y, z = data
    stats = collect_statistics(student, x, y, z, loss=loss, dtype=torch.float64)
    out: dict[str, float | str] = {}
    for row in diagnose(stats, student):
        k = row["level"]
        for key in CONDITION_KEYS:
            if key in row:
                out[f"{key}_l{k}"] = float(row[key])
                why = row.get("undefined", {}).get(key)
                if why:
                    out[f"{key}_l{k}_reason"] = why
    return out
