"""smaso: deep ReLU networks as inference.

One subpackage per body of theory (``docs/theory.md`` maps every equation to its function):

- :mod:`smaso.student`: the framework paper's locally connected student, Batch Norm as a projection,
  frequency statistics, the reformulation (Thm 4 / Eq 9) and the comparison with Thm 2's diagnosis.
- :mod:`smaso.theorems`: the framework paper's further results (Thm 1, 6-9, §5.3, §7.5.1).
- :mod:`smaso.splines`: "From Hard to Soft": max-affine splines, hard / soft / beta VQ, the beta-VQ
  activations as functions and modules, the SMASO Gaussian mixtures, orthogonality (Eq 1-11).
- :mod:`smaso.depth`: linear pieces, back-propagation written out, depth separation.
- :mod:`smaso.plots`: one function per figure; :mod:`smaso.cli`: the ``smaso`` command.

The teachers (summarization ladder, tent map) are the top-level package :mod:`teachers`, and the
inference routines (exact ladder posterior, VQ as MAP / variational inference, the factorial
mixture) the top-level package :mod:`inference`.

The names below are the entry points a user starts with; they are imported on first use, so that
``import smaso`` (and ``smaso --help``) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_submodules
from ._version import __version__

_ENTRY_POINTS = {
    "LadderStudent": "smaso.student.network",
    "collect_statistics": "smaso.student.frequency",
    "accumulate_statistics": "smaso.student.frequency",
    "FrequencyAccumulator": "smaso.student.frequency",
    "FrequencyStatistics": "smaso.student.frequency",
    "reformulate": "smaso.student.reformulation",
    "compare_student": "smaso.student.compare",
    "ComparisonResult": "smaso.student.compare",
    "StudentConfig": "smaso.student.config",
    "TrainingConfig": "smaso.student.config",
    "EvaluationConfig": "smaso.student.config",
    "errors_against_n": "smaso.student.data_size",
    "stack_statistics": "smaso.student.noise",
    "compare_population": "smaso.student.population",
    "population_supported": "smaso.student.population",
    "compare_seeds": "smaso.student.seeds",
    "MASO": "smaso.splines.maso",
    "hard_regions": "smaso.splines.maso",
    "region_probabilities": "smaso.splines.maso",
    "BetaSwish": "smaso.splines.modules",
    "count_pieces": "smaso.depth.pieces",
    "plot_comparison": "smaso.plots.comparison",
    "plot_alignment": "smaso.plots.alignment",
    "shallow_student": "smaso.student.shallow",
    "flat_ladder": "smaso.student.shallow",
    "flat_sample": "smaso.student.shallow",
    "error_rate": "smaso.student.shallow",
    "SynonymicSensitivity": "smaso.student.sensitivity",
    "synonymic_sensitivity": "smaso.student.sensitivity",
    "sample_complexity_sweep": "smaso.sweep",
    "SweepResult": "smaso.sweep",
    "PStar": "smaso.sweep",
    "DisjointSplit": "smaso.sweep",
    "IndependentDraws": "smaso.sweep",
    "read_runs": "smaso.sweep",
    "register_student": "smaso.sweep",
    "plot_sweep": "smaso.plots.sweep",
    "median_interval": "smaso.student.seeds",
    "train_ladder_student": "smaso.student.training",
    "knowledge_conditions": "smaso.theorems.conditions",
    "SweepRun": "smaso.sweep",
    "RHMMeasures": "smaso.student.rhm_measures",
}

_SUBPACKAGES = ("cli", "depth", "plots", "splines", "student", "theorems")

__all__ = [  # noqa: RUF022 (the version first, then the entry points)
    "__version__",
    "BetaSwish",
    "ComparisonResult",
    "DisjointSplit",
    "EvaluationConfig",
    "FrequencyAccumulator",
    "FrequencyStatistics",
    "IndependentDraws",
    "LadderStudent",
    "MASO",
    "PStar",
    "RHMMeasures",
    "StudentConfig",
    "SweepResult",
    "SweepRun",
    "SynonymicSensitivity",
    "TrainingConfig",
    "accumulate_statistics",
    "collect_statistics",
    "compare_population",
    "compare_seeds",
    "compare_student",
    "count_pieces",
    "error_rate",
    "errors_against_n",
    "flat_ladder",
    "flat_sample",
    "hard_regions",
    "knowledge_conditions",
    "median_interval",
    "plot_alignment",
    "plot_comparison",
    "plot_sweep",
    "population_supported",
    "read_runs",
    "reformulate",
    "region_probabilities",
    "register_student",
    "sample_complexity_sweep",
    "shallow_student",
    "stack_statistics",
    "synonymic_sensitivity",
    "train_ladder_student",
]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily
    from smaso.depth.pieces import count_pieces
    from smaso.plots.alignment import plot_alignment
    from smaso.plots.comparison import plot_comparison
    from smaso.plots.sweep import plot_sweep
    from smaso.splines.maso import MASO, hard_regions, region_probabilities
    from smaso.splines.modules import BetaSwish
    from smaso.student.compare import ComparisonResult, compare_student
    from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
    from smaso.student.data_size import errors_against_n
    from smaso.student.frequency import (
        FrequencyAccumulator,
        FrequencyStatistics,
        accumulate_statistics,
        collect_statistics,
    )
    from smaso.student.network import LadderStudent
    from smaso.student.noise import stack_statistics
    from smaso.student.population import compare_population, population_supported
    from smaso.student.reformulation import reformulate
    from smaso.student.rhm_measures import RHMMeasures
    from smaso.student.seeds import compare_seeds, median_interval
    from smaso.student.sensitivity import SynonymicSensitivity, synonymic_sensitivity
    from smaso.student.shallow import error_rate, flat_ladder, flat_sample, shallow_student
    from smaso.student.training import train_ladder_student
    from smaso.sweep import (
        DisjointSplit,
        IndependentDraws,
        PStar,
        SweepResult,
        SweepRun,
        read_runs,
        register_student,
        sample_complexity_sweep,
    )
    from smaso.theorems.conditions import knowledge_conditions


__getattr__, __dir__ = lazy_submodules(__name__, _SUBPACKAGES, globals(), _ENTRY_POINTS)
