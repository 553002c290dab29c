"""Teachers with known hidden structure: the summarization ladder (framework paper §3)."""

from .categorical import AliasTable, BlockRNG, CategoricalTable, IndexedCategorical
from .emission import Emission, GaussianEmission, OneHotEmission
from .ladder import Factorization, Ladder, LadderSpecError
from .pyro_model import EmissionDistribution, LadderModel
from .sampling import BLOCK_SIZE, LadderSample, sample_ladder

__all__ = [
    "BLOCK_SIZE",
    "AliasTable",
    "BlockRNG",
    "CategoricalTable",
    "Emission",
    "EmissionDistribution",
    "Factorization",
    "GaussianEmission",
    "IndexedCategorical",
    "Ladder",
    "LadderModel",
    "LadderSample",
    "LadderSpecError",
    "OneHotEmission",
    "sample_ladder",
]
