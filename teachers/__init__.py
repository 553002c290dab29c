"""Teachers with known hidden structure: the summarization ladder (framework paper §3) and the
tent map tau^k (a deep 1-D target with exactly 2^k linear pieces, ``docs/theory.md`` §2)."""

from .categorical import AliasTable, BlockRNG, CategoricalTable, IndexedCategorical
from .chunked import ChunkDataset, ChunkedLadderData, StreamingLadderDataset, open_dataset, sample_to_store
from .emission import Emission, GaussianEmission, OneHotEmission
from .ladder import Factorization, Ladder, LadderSpecError
from .pyro_model import EmissionDistribution, LadderModel
from .sampling import BLOCK_SIZE, LadderSample, sample_ladder, sample_rows
from .tent import TentNetwork, TentSample, sample_tent, tent, tent_power

__all__ = [
    "BLOCK_SIZE",
    "AliasTable",
    "BlockRNG",
    "CategoricalTable",
    "ChunkDataset",
    "ChunkedLadderData",
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
    "StreamingLadderDataset",
    "TentNetwork",
    "TentSample",
    "open_dataset",
    "sample_ladder",
    "sample_rows",
    "sample_tent",
    "sample_to_store",
    "tent",
    "tent_power",
]
