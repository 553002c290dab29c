"""The one set of defaults of a student's run: what :func:`~smaso.student.compare.compare_student`, ``smaso demo``
and ``smaso compare`` train and measure when told nothing.

Three small frozen dataclasses, each checked when built (a bad field is a ``ValueError`` or ``TypeError`` naming
it):

- :class:`StudentConfig`: the network (width, readout group, activation, BN, ...);
- :class:`TrainingConfig`: how it is trained (steps, lr, minibatch, optimizer, seed, ...);
- :class:`EvaluationConfig`: what is measured and where (every how many steps, on how many held-out rows, the
  noise floors, the event alignment of the hidden nodes).

The command line reads its option defaults from these classes (``smaso/cli.py``'s ``_student_options``), so the
library and both commands agree by construction; ``tests/test_config.py`` checks it.  The defaults are those with
which the student learns its teacher: a readout group of 32 nodes at the root (without it the class scores are
additive over the root's children, a class capped below the Bayes-optimal accuracy, ``smaso.student.ceiling``),
width 16, 3000 SGD steps at lr 0.5 on minibatches of 256 (``benchmarks/results/demo.json``: held-out accuracy
0.99 on the built-in ladder).
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (torch is imported only where used: `smaso --help` reads these defaults without it)
    import torch

__all__ = ["LEGACY_FIELDS", "EvaluationConfig", "StudentConfig", "TrainingConfig"]


def _positive_int(name: str, v: object, *, none: bool = False) -> None:
    if v is None and none:
        return
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise ValueError(f"{name}: expected {'None or ' if none else ''}a positive integer, got {v!r}")


def _finite(name: str, v: object, *, positive: bool) -> None:
    """As :func:`smaso.student.training.check_hyper` (its messages), without importing torch."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise ValueError(f"{name}: expected {'a finite number > 0' if positive else 'a finite number >= 0'}, got {v!r}")


def _bool(name: str, v: object) -> None:
    if not isinstance(v, bool):
        raise TypeError(f"{name}: expected a bool, got {type(v).__name__}")


def _is_dataset(v: object) -> bool:
    """A dataset of rows (a sample, a chunked dataset, or path(s) to one): checked against the ladder later."""
    return (hasattr(v, "chunk") or hasattr(v, "__fspath__") or isinstance(v, (str, bytes, list))
            or type(v).__name__ == "LadderSample")


@dataclass(frozen=True)
class StudentConfig:
    """The student network (:class:`~smaso.student.network.LadderStudent`).

    :param width: nodes per hidden region, one int or one per hidden level (a list is stored as a tuple).
    :param readout: a readout group of this many nodes at the root region before the linear map to the classes
        (:mod:`smaso.student.readout`); ``None`` or 0: none, the class scores then additive over the root's
        children (a class capped below Bayes, :mod:`smaso.student.ceiling`).
    :param activation: ``relu``, ``silu``, ``swish:BETA``, ``leaky_relu:NU``, ``abs``, ``linear``.
    :param batch_norm: ``False``, ``True``/``"after"`` (BN after the gate) or ``"before"`` (Thm 9's premise).
    :param bn_eps: BN's eps (0: Thm 5's exact projection).
    :param bias: biases on the linear maps.
    :param shared: one weight block per child place (a convolution).
    :param dtype: the student's floating dtype (None: torch.float64).
    """

    width: int | tuple[int, ...] = 16
    readout: int | None = 32
    activation: str = "relu"
    batch_norm: bool | str = False
    bn_eps: float = 1e-5
    bias: bool = True
    shared: bool = False
    dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        w = self.width
        if isinstance(w, (list, tuple)):
            if not w:
                raise ValueError("width: expected a positive integer or one per hidden level, got an empty list")
            for v in w:
                _positive_int("width", v)
            object.__setattr__(self, "width", w[0] if len(w) == 1 else tuple(int(v) for v in w))
        else:
            _positive_int("width", w)
        if self.readout == 0:  # 0 is the command line's "none"
            object.__setattr__(self, "readout", None)
        _positive_int("readout", self.readout, none=True)
        if not isinstance(self.activation, str):
            raise TypeError(f"activation: expected a name such as 'relu', got {type(self.activation).__name__}")
        if self.batch_norm not in (False, True, "after", "before"):
            raise ValueError(f"batch_norm: expected False, True, 'after' or 'before', got {self.batch_norm!r}")
        _finite("bn_eps", self.bn_eps, positive=False)
        _bool("bias", self.bias)
        _bool("shared", self.shared)
        if self.dtype is None:
            return
        from smaso.student.network import _check_float_dtype

        _check_float_dtype(self.dtype)


@dataclass(frozen=True)
class TrainingConfig:
    """How the student is trained: (S)GD with the explicit backward (Eq 2), or a torch optimizer on its gradient.

    :param steps: training steps (>= 0).
    :param lr: learning rate (> 0).
    :param batch_size: SGD minibatch; ``None``: full-batch GD (an in-memory sample only).
    :param loss: ``"squared"`` or ``"cross_entropy"``.
    :param optimizer: ``"sgd"`` (W += lr Delta W, Eq 2), ``"adam"``, ``"adamw"``, ``"rmsprop"``, or a callable
        ``params -> torch.optim.Optimizer``.
    :param lr_schedule: ``None``, ``"cosine"`` or ``"step:N:GAMMA"``.
    :param weight_decay: the Frobenius regularizer lambda (>= 0).
    :param plateau: stop once the smoothed training loss has not improved for this many steps (None: never).
    :param seed: the student's initial weights and minibatch order.
    :param shuffle_labels: the shuffled-label control (training rows' labels permuted).
    """

    steps: int = 3000
    lr: float = 0.5
    batch_size: int | None = 256
    loss: str = "squared"
    optimizer: str | Callable = "sgd"
    lr_schedule: str | None = None
    weight_decay: float = 0.0
    plateau: int | None = None
    seed: int = 0
    shuffle_labels: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.steps, bool) or not isinstance(self.steps, numbers.Integral) or self.steps < 0:
            raise ValueError(f"steps: expected an integer >= 0, got {self.steps!r}")
        _finite("lr", self.lr, positive=True)
        _finite("weight_decay", self.weight_decay, positive=False)
        _positive_int("batch_size", self.batch_size, none=True)
        if self.loss not in ("squared", "cross_entropy"):
            raise ValueError(f"loss: expected 'squared' or 'cross_entropy', got {self.loss!r}")
        _positive_int("plateau", self.plateau, none=True)
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or self.seed < 0:
            raise ValueError(f"seed: expected a non-negative integer, got {self.seed!r}")
        _bool("shuffle_labels", self.shuffle_labels)


@dataclass(frozen=True)
class EvaluationConfig:
    """What is measured at the checkpoints, and on which rows.

    :param eval_every: compare every this many steps (and at steps 0 and the last).
    :param eval_examples: the evaluation set: the first this many evaluation rows (``None``: all of them).
    :param eval_batch_size: rows per batch of the streamed evaluation (memory only).
    :param held_out: ``True``: the sample's first ``eval_examples`` rows, never trained on; ``False``: training
        rows; or a dataset of the same ladder (its rows; every row of the sample is then trained on).
    :param P_source: ``"empirical"`` (the evaluation set's event frequencies) or ``"exact"`` (the ladder's tables).
    :param noise_groups: row groups of the jackknife behind every number's noise floor (None: no floors).
    :param alignment: the event alignment of the hidden nodes at every checkpoint
        (:mod:`smaso.student.alignment`): ``True`` on the evaluation rows (held out unless ``held_out=False``),
        ``False`` off, or a dataset of the same ladder, never trained on, to measure it on.
    """

    eval_every: int = 250
    eval_examples: int | None = 8192
    eval_batch_size: int = 1024
    held_out: object = True
    P_source: str = "empirical"
    noise_groups: int | None = 10
    alignment: object = True

    def __post_init__(self) -> None:
        _positive_int("eval_every", self.eval_every)
        _positive_int("eval_examples", self.eval_examples, none=True)
        _positive_int("eval_batch_size", self.eval_batch_size)
        if not isinstance(self.held_out, bool) and not _is_dataset(self.held_out):
            raise TypeError(f"held_out: expected True, False or a dataset of the sample's ladder, got "
                            f"{type(self.held_out).__name__}")
        if self.P_source not in ("empirical", "exact"):
            raise ValueError(f"P_source: expected 'empirical' or 'exact', got {self.P_source!r}")
        if self.noise_groups is not None and (isinstance(self.noise_groups, bool)
                                              or not isinstance(self.noise_groups, numbers.Integral)
                                              or self.noise_groups < 2):
            raise ValueError(f"noise_groups: expected None or an integer >= 2, got {self.noise_groups!r}")
        if self.alignment is None:  # (the keyword form's "off")
            object.__setattr__(self, "alignment", False)
        if not isinstance(self.alignment, bool) and not _is_dataset(self.alignment):
            raise TypeError(f"alignment: expected True, False or a dataset of the sample's ladder, got "
                            f"{type(self.alignment).__name__}")


#: The keyword arguments :func:`~smaso.student.compare.compare_student` took before its configs, each with the
#: config that now holds it: ``{name: config class}`` (deprecated: mapped onto the config with a warning).
LEGACY_FIELDS: dict[str, type] = {f.name: cls for cls in (StudentConfig, TrainingConfig, EvaluationConfig)
                                  for f in fields(cls)}


def _configs(student: StudentConfig | None, training: TrainingConfig | None, evaluation: EvaluationConfig | None,
             legacy: dict[str, Any], where: str = "compare_student"
             ) -> tuple[StudentConfig, TrainingConfig, EvaluationConfig]:
    """The three configs of a run, the deprecated keyword form (``width=16, steps=300, ...``) mapped onto them
    with a :class:`DeprecationWarning` (a keyword of a config also given is a TypeError: which one would win?)."""
    given = {"student": student, "training": training, "evaluation": evaluation}
    kinds = {StudentConfig: "student", TrainingConfig: "training", EvaluationConfig: "evaluation"}
    for name, cfg in given.items():
        want = next(c for c, k in kinds.items() if k == name)
        if cfg is not None and not isinstance(cfg, want):
            raise TypeError(f"{name}: expected a {want.__name__}, got {type(cfg).__name__}")
    unknown = [k for k in legacy if k not in LEGACY_FIELDS]
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r} (its options are the "
                        "fields of student=StudentConfig(...), training=TrainingConfig(...), "
                        "evaluation=EvaluationConfig(...))")
    split: dict[str, dict] = {"student": {}, "training": {}, "evaluation": {}}
    for k, v in legacy.items():
        split[kinds[LEGACY_FIELDS[k]]][k] = v
    if legacy:
        hint = ", ".join(f"{kinds[LEGACY_FIELDS[k]]}={LEGACY_FIELDS[k].__name__}({k}=...)" for k in legacy)
        for name, kw in split.items():
            if kw and given[name] is not None:
                raise TypeError(f"{where}: {', '.join(kw)} given both as a keyword and in {name}=; set it in "
                                f"{name}={type(given[name]).__name__}(...) only")
        warnings.warn(f"{where}: keyword options are deprecated; pass {hint}", DeprecationWarning, stacklevel=3)
    return (StudentConfig(**split["student"]) if student is None else student,
            TrainingConfig(**split["training"]) if training is None else training,
            EvaluationConfig(**split["evaluation"]) if evaluation is None else evaluation)
