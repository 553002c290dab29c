"""Reference implementation (smaso 0.2, commit 05be504): the uniform-tree sampler, which drew every block
through the tree's Pyro model (:mod:`tree_pyro_model`), kept so that ``benchmarks/bench_sampling.py`` times
today's one sampler against it in the same run.  Not part of the library; only the sampling loop is kept
(argument checks and progress bars dropped), and it gives the same bytes as ``teachers.sampling``.
"""

from __future__ import annotations

import torch
from tree_pyro_model import LadderModel

from teachers.categorical import BlockRNG
from teachers.sampling import BLOCK_SIZE, block_generator


def sample_tree(ladder, num_examples: int, seed: int = 0, *, chunk_size: int | None = None) -> torch.Tensor:
    """``z`` ``(num_examples, total_regions)`` of a uniform tree, as 0.2's ``sample_ladder`` drew it."""
    model = LadderModel(ladder)
    z = torch.empty(num_examples, ladder.total_regions, dtype=ladder.event_dtype())
    blocks_per_call = max(1, -(-(chunk_size or BLOCK_SIZE) // BLOCK_SIZE))
    last = -(-num_examples // BLOCK_SIZE)
    with torch.no_grad():
        for call_start in range(0, last, blocks_per_call):
            blocks = range(call_start, min(call_start + blocks_per_call, last))
            rng = BlockRNG([block_generator(seed, k) for k in blocks], [BLOCK_SIZE] * len(blocks))
            vals = model.model(rng.total, emit=False, generator=rng, compact=True)
            base = call_start * BLOCK_SIZE
            b = min(num_examples, base + rng.total)
            for l in range(ladder.depth + 1):
                lvl = vals[f"z_{l}"].reshape(rng.total, ladder.num_regions[l])
                z[base:b, ladder.level_offsets[l]: ladder.level_offsets[l + 1]] = lvl[: b - base]
    return z
