"""A local RNG scope for Pyro work, which samples from the global generators: library calls that take ``seed=``
run inside :func:`seeded_rng`, so that no call changes the caller's global RNG state.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

__all__ = ["check_seed", "seeded_rng"]


def check_seed(seed: object) -> None:
    """:raises ValueError: ``seed`` is neither None nor an integer in ``[0, 2**32)``."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                             or not 0 <= int(seed) < 2**32):
        raise ValueError(f"seed: expected None or an integer in [0, 2**32), got {seed!r}")


@contextmanager
def seeded_rng(seed: int | None, device: torch.device | str | None = None) -> Iterator[int]:
    """Run a block of Pyro work under ``seed`` without changing the caller's global RNG state.

    Saves Python's ``random`` state, NumPy's global state and torch's CPU generator (``torch.random.fork_rng``;
    for a CUDA ``device``, that device's generator too), seeds all of them with ``seed`` (what
    ``pyro.set_rng_seed`` seeds, minus the other CUDA devices), runs the block and restores every state,
    also when the block raises.

    :param seed: an integer in ``[0, 2**32)``, or None for a fresh seed from OS entropy (``os.urandom``: the
        caller's generators are neither read nor advanced).
    :param device: the device the block works on (e.g. ``x.device``); None or a CPU device: CPU only.
    """
    check_seed(seed)
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    seed = int(seed)
    device = torch.device("cpu") if device is None else torch.device(device)
    cuda = device.type == "cuda"
    if cuda and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    # the legacy global NumPy state is what pyro.set_rng_seed seeds, so it is the state to save and restore
    py_state, np_state = random.getstate(), np.random.get_state()  # noqa: NPY002
    try:
        with torch.random.fork_rng(devices=[device.index] if cuda else []):
            random.seed(seed)
            np.random.seed(seed)  # noqa: NPY002
            torch.default_generator.manual_seed(seed)
            if cuda:
                with torch.cuda.device(device):
                    torch.cuda.manual_seed(seed)
            yield seed
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)  # noqa: NPY002
