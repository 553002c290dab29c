"""``LadderDataset`` holds a sample in memory; given a chunked store it says so at construction.

Found by mypy (issue 37's type check): ``load_dataset`` returns a :class:`~teachers.chunked.ChunkedLadderData` for a
store, which has no ``z``, so ``LadderDataset(store)[i]`` raised ``AttributeError: 'ChunkedLadderData' object has no
attribute 'z'`` on the first item.
"""

from __future__ import annotations

import pytest

from teachers.chunked import StreamingLadderDataset, sample_to_store
from teachers.dataset import LadderDataset, save_dataset
from teachers.ladder import Ladder
from teachers.sampling import BLOCK_SIZE, sample_ladder


def test_a_store_is_refused_with_the_class_to_use(tmp_path):
    lad = Ladder.default()
    path = sample_to_store(lad, BLOCK_SIZE, tmp_path / "s.zarr", seed=0, chunk_rows=BLOCK_SIZE)
    with pytest.raises(ValueError, match=r"source: .*chunked store.*StreamingLadderDataset"):
        LadderDataset(path)
    # the class the message names reads the same store
    x, y, z = next(iter(StreamingLadderDataset(path, batch_size=8)))
    assert x.shape[0] == 8 and y.shape == (8,) and z.shape == (8, lad.total_regions)


def test_a_file_still_loads(tmp_path):
    lad = Ladder.default()
    sample = sample_ladder(lad, 16, seed=0)
    ds = LadderDataset(save_dataset(sample, tmp_path / "d.npz"))
    x, y, z = ds[3]
    assert x.shape == (lad.num_regions[-1], lad.emission.dim)
    assert int(y) == int(sample.y[3]) and z.tolist() == sample.z[3].long().tolist()
