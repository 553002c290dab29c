"""smaso: deep ReLU networks as inference.

Student side of the framework paper (locally connected student, frequency statistics, the
reformulation of Thm 4 / Eq 9 and Batch Norm as a projection) and, from "From Hard to Soft",
activations as spline / vector-quantization inference.  See README.md for a tour.
"""

from .activations import Activation, get_activation
from .compare import ComparisonResult, compare_student, diagnose
from .frequency import FrequencyStatistics, collect_statistics
from .reformulation import Reformulation, reformulate
from .student import LadderStudent, StudentRecord

__all__ = [
    "Activation",
    "ComparisonResult",
    "FrequencyStatistics",
    "LadderStudent",
    "Reformulation",
    "StudentRecord",
    "collect_statistics",
    "compare_student",
    "diagnose",
    "get_activation",
    "reformulate",
]
