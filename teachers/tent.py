"""The tent-map teacher: a deep target whose complexity is known exactly (``docs/theory.md`` §2).

The tent map on [0, 1] is ``tau(x) = 2 [ReLU(x) - ReLU(2x - 1)]`` (``2x`` for ``x <= 1/2``,
``2 - 2x`` above).  Its k-fold composition ``tau^k`` has ``2^(k-1)`` teeth and ``2^k`` linear
pieces, with breakpoints ``i / 2^k``, and is computed exactly by a ReLU network of depth k and
width 2 (:class:`TentNetwork`).  In float64 (or float32) every operation involved -- doubling,
subtracting from a power of two, the network's power-of-two weights -- is exact on [0, 1], so
the network and :func:`tent_power` agree bit for bit.

Datasets ``(x, tau^k(x))`` are sampled with the ladder's stream scheme (:mod:`teachers.sampling`: block b
draws x, then its label noise, from ``block_generator(seed, b)``), so example i depends only on
(seed, i, k, noise), never on the chunk size, and ``shard="i/n"`` returns rows ``[i*N//n, (i+1)*N//n)``.

Dataset files (format ``smaso-tent-dataset`` version 1) follow :mod:`teachers.dataset`'s conventions
(checksummed ``.npz`` without pickles, atomic writes, every field validated on load, incomplete shard sets
refused unless ``partial=True``, :class:`~teachers.dataset.DatasetFormatError`): members ``meta`` (JSON:
``format``, ``version``, ``n``, ``start``, ``total``, ``seed``, ``k``, ``noise``, ``distribution``, ``shard``,
``block_size``, ``stream_version``, ``sha256`` of ``x`` and ``y``, ``metadata_sha256``), ``x`` and ``y``
``(n, 1)`` float64.  Read them with :func:`load_tent_dataset` (:func:`teachers.dataset.load_dataset` rejects them).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .dataset import _join_shards, _read, _write
from .formats import (
    DatasetFormatError,
    _check_int,
    _field_int,
    _sha256,
    check_load_args,
    check_stream_fields,
)
from .sampling import BLOCK_SIZE, STREAM_VERSION, available_memory, block_generator, parse_shard

__all__ = ["FORMAT", "TENT_BYTES_PER_ROW", "VERSION", "TentNetwork", "TentSample", "check_tent_memory",
           "dataset_format", "load_tent_dataset", "sample_tent", "save_tent_dataset", "tent", "tent_breakpoints",
           "tent_power"]

FORMAT = "smaso-tent-dataset"
VERSION = 1
DISTRIBUTIONS = ("uniform",)
#: largest k accepted by :func:`tent_breakpoints` (2^k + 1 points must fit in memory)
MAX_BREAKPOINT_K = 30
#: largest k of :func:`sample_tent`: its x ~ U[0, 1) in float64 are multiples of 2^-53, and each
#: tent map doubles away one bit (exactly: dyadic arithmetic), so tau^k(x) takes at most 2^(53 - k) + 1
#: values (measured on 10^5 draws: 8193 at k = 40, 9 at k = 50, 2 at k = 53)
MAX_SAMPLE_K = 40
#: Peak bytes per example of :func:`sample_tent` (x, y, the noise buffer and the tent map's temporaries, all
#: float64: 48.7 B measured at 10^7 rows); the .npz file is written from the same arrays.
TENT_BYTES_PER_ROW = 56


def check_tent_memory(rows: int, arg: str = "num_examples", shard_arg: str = "shard='i/k'") -> None:
    """Refuse, before allocating them, ``rows`` tent examples that would not fit in the memory available now
    (``arg`` and ``shard_arg`` name the size and the sharding arguments in the message)."""
    need, have = rows * TENT_BYTES_PER_ROW, available_memory()
    if have is not None and need > have:
        raise ValueError(f"{arg}: {rows:,} tent examples held in memory need about {need / 1e9:.3g} GB and "
                         f"{have / 1e9:.3g} GB are available (about {have // TENT_BYTES_PER_ROW:,} examples fit); "
                         f"sample fewer, or in shards ({shard_arg}), one file each")


def tent(x: torch.Tensor) -> torch.Tensor:
    """The tent map ``tau(x) = 2 [ReLU(x) - ReLU(2x - 1)]``, elementwise and exact.

    :param x: a tensor (result: a tensor of the same dtype and device), a NumPy array or a
        Python number (result: a float64 array, or a float for a scalar).
    """
    if isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            x = x.to(torch.get_default_dtype())
        return 2 * (torch.relu(x) - torch.relu(2 * x - 1))
    a = np.asarray(x)
    if not np.issubdtype(a.dtype, np.floating):
        a = a.astype(np.float64)
    out = 2 * (np.maximum(a, 0) - np.maximum(2 * a - 1, 0))
    return float(out) if np.ndim(x) == 0 and not isinstance(x, np.ndarray) else out


def tent_power(x: torch.Tensor, k: int) -> torch.Tensor:
    """``tau^k(x)``: the tent map composed k times (k = 0 is the identity).

    :raises ValueError: k negative or not an integer.
    """
    k = _check_int(k, "k")
    for _ in range(k):
        x = tent(x)
    if k == 0 and not isinstance(x, torch.Tensor):
        a = np.asarray(x, dtype=np.float64)
        return float(a) if np.ndim(x) == 0 and not isinstance(x, np.ndarray) else a
    return x


def tent_breakpoints(k: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The ``2^k + 1`` points ``i / 2^k`` (i = 0..2^k) that cut [0, 1] into the ``2^k`` linear
    pieces of ``tau^k`` (the ends 0 and 1 included; the slope changes at the ``2^k - 1``
    interior ones).  ``tau^k`` is 0 at even i and 1 at odd i.  Exact in float64."""
    k = _check_int(k, "k")
    if k > MAX_BREAKPOINT_K:
        raise ValueError(f"k: tent_breakpoints supports k <= {MAX_BREAKPOINT_K} (2^k + 1 points), got {k}")
    return torch.arange(2**k + 1, dtype=torch.float64).div_(2**k).to(dtype)


class TentNetwork(nn.Sequential):
    """The depth-k, width-2 ReLU network that computes ``tau^k`` exactly.

    A plain ``nn.Sequential`` of ``nn.Linear`` layers with ``nn.ReLU`` between them, so generic tools for
    Linear+ReLU MLPs (piece counting, back-propagation) apply.  With ``u`` the composition so far (x at the
    input), every hidden layer computes h1 = ReLU(u), h2 = ReLU(2u - 1), and the next u = tau(u) = 2 h1 - 2 h2
    is folded into the next layer (the weights: ``docs/theory.md`` §2.1); k = 0 is a ``Linear(1, 1)``
    identity.  On [0, 1] the output equals :func:`tent_power` bit for bit.

    Takes ``(N, 1)`` inputs (or ``(N,)``, returned as ``(N,)``).

    :param k: depth (number of compositions), >= 0.
    :param dtype: parameter dtype (default float64).
    """

    def __init__(self, k: int, *, dtype: torch.dtype = torch.float64) -> None:
        k = _check_int(k, "k")
        layers: list[nn.Module] = []
        if k == 0:
            layers.append(_linear([[1.0]], [0.0], dtype))
        else:
            layers += [_linear([[1.0], [2.0]], [0.0, -1.0], dtype), nn.ReLU()]
            for _ in range(k - 1):
                layers += [_linear([[2.0, -2.0], [4.0, -4.0]], [0.0, -1.0], dtype), nn.ReLU()]
            layers.append(_linear([[2.0, -2.0]], [0.0], dtype))
        super().__init__(*layers)
        self.k = k

    @property
    def depth(self) -> int:
        """Number of hidden (ReLU) layers: k."""
        return self.k

    @property
    def width(self) -> int:
        """Units per hidden layer: 2 (1 for the k = 0 identity, which has none)."""
        return 2 if self.k > 0 else 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 1:
            return super().forward(x.unsqueeze(-1)).squeeze(-1)
        return super().forward(x)

    def extra_repr(self) -> str:
        return f"k={self.k}"


def _linear(weight: Sequence[Sequence[float]], bias: Sequence[float], dtype: torch.dtype) -> nn.Linear:
    w = torch.tensor(weight, dtype=dtype)
    # built on the meta device, so that its default init does not draw from the global RNG
    lin = nn.Linear(w.shape[1], w.shape[0], dtype=dtype, device="meta").to_empty(device="cpu")
    with torch.no_grad():
        lin.weight.copy_(w)
        lin.bias.copy_(torch.tensor(bias, dtype=dtype))
    return lin


@dataclass
class TentSample:
    """Examples ``(x, y)`` of the tent teacher ``y = tau^k(x)`` (+ Gaussian label noise).

    :ivar x: ``(N, 1)`` float64 inputs in [0, 1).
    :ivar y: ``(N, 1)`` float64 labels.
    :ivar start: index of the first example in the full (unsharded) stream.
    :ivar total: N of the full stream.
    """

    x: torch.Tensor
    y: torch.Tensor
    k: int
    seed: int | None = None
    start: int = 0
    total: int | None = None
    noise: float = 0.0
    distribution: str = "uniform"
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return self.x.shape[0]

    @property
    def clean_y(self) -> torch.Tensor:
        """``tau^k(x)`` without noise, ``(N, 1)``."""
        return tent_power(self.x, self.k)

    @property
    def pieces(self) -> int:
        """Linear pieces of the target on [0, 1]: ``2^k``."""
        return 2**self.k


def sample_tent(num_examples: int, k: int, seed: int = 0, *, shard: str | tuple[int, int] | None = None,
                chunk_size: int | None = None, distribution: str = "uniform", noise: float = 0.0) -> TentSample:
    """Sample ``num_examples`` examples ``(x, tau^k(x) + noise)`` (or one shard of them).

    :param num_examples: N of the full stream (> 0).
    :param k: compositions of the tent map (>= 0).
    :param seed: stream seed (a non-negative integer).
    :param shard: ``"i/n"``: return only rows ``[i*N//n, (i+1)*N//n)`` of the full stream.
    :param chunk_size: validated as in :func:`~teachers.sampling.sample_ladder`; blocks are generated one
        at a time, so it never changes the bytes (nor, here, the memory).
    :param distribution: law of x; ``"uniform"`` on [0, 1) (the only one so far).
    :param noise: standard deviation of Gaussian label noise (>= 0; 0: exact labels).  x does
        not depend on it: each block draws its x before its noise.
    """
    k = _check_int(k, "k")
    if k > MAX_SAMPLE_K:
        raise ValueError(f"k: at most {MAX_SAMPLE_K} for sampled data, got {k}: x ~ U[0, 1) in float64 has 53 "
                         f"random bits and tau^k keeps 53 - k of them (at most 2^(53 - k) + 1 label values)")
    # the stream arguments, validated as sample_ladder's; this shard holds rows [lo, hi)
    num_examples, seed = _check_int(num_examples, "num_examples", minimum=1), _check_int(seed, "seed")
    if chunk_size is not None:
        _check_int(chunk_size, "chunk_size", minimum=1)
    i, n_shards = parse_shard(shard)
    lo, hi = i * num_examples // n_shards, (i + 1) * num_examples // n_shards
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution: expected one of {', '.join(map(repr, DISTRIBUTIONS))}, got {distribution!r}")
    if isinstance(noise, bool) or not isinstance(noise, (int, float, np.integer, np.floating)) \
            or not math.isfinite(noise) or noise < 0:
        raise ValueError(f"noise: expected a finite standard deviation >= 0, got {noise!r}")
    noise = float(noise)
    check_tent_memory(hi - lo)
    x = torch.empty(hi - lo, 1, dtype=torch.float64)
    eps = torch.zeros(hi - lo, 1, dtype=torch.float64)
    for b in range(lo // BLOCK_SIZE, -(-hi // BLOCK_SIZE)):  # one block at a time: its rows of [lo, hi)
        g = block_generator(seed, b)
        base = b * BLOCK_SIZE
        a, c = max(lo, base), min(hi, base + BLOCK_SIZE)
        x[a - lo: c - lo, 0] = torch.rand(BLOCK_SIZE, generator=g, dtype=torch.float64)[a - base: c - base]
        if noise > 0:
            eps[a - lo: c - lo, 0] = torch.randn(BLOCK_SIZE, generator=g, dtype=torch.float64)[a - base: c - base]
    y = tent_power(x, k)
    if noise > 0:
        y = y + noise * eps
    return TentSample(x, y, k, seed=seed, start=lo, total=num_examples, noise=noise, distribution=distribution,
                      meta={"shard": [i, n_shards], "block_size": BLOCK_SIZE, "stream_version": STREAM_VERSION})


_STREAM_KEYS = ("k", "seed", "total", "noise", "distribution", "block_size", "stream_version")


def save_tent_dataset(sample: TentSample, path: str | os.PathLike, *, compress: bool = False) -> Path:
    """Write ``sample`` to ``path`` atomically (format ``smaso-tent-dataset`` version 1).

    :param compress: deflate the members (smaller, slower); default stores them raw.
    :returns: the path written.
    """
    if not isinstance(sample, TentSample):
        raise TypeError(f"sample: expected a TentSample, got {type(sample).__name__}")
    data = {"x": sample.x.detach().cpu().to(torch.float64).reshape(-1, 1).numpy(),
            "y": sample.y.detach().cpu().to(torch.float64).reshape(-1, 1).numpy()}
    if data["x"].shape != data["y"].shape:
        raise ValueError(f"sample: x {tuple(data['x'].shape)} and y {tuple(data['y'].shape)} differ in length")
    meta = {"format": FORMAT, "version": VERSION, "n": len(data["x"]), "start": sample.start,
            "total": sample.total if sample.total is not None else len(data["x"]), "seed": sample.seed,
            "k": sample.k, "noise": sample.noise, "distribution": sample.distribution,
            "shard": sample.meta.get("shard", [0, 1]), "block_size": sample.meta.get("block_size", BLOCK_SIZE),
            "stream_version": sample.meta.get("stream_version", STREAM_VERSION),
            "sha256": {k: _sha256(v) for k, v in data.items()}}
    return _write(path, meta, data, compress)


def dataset_format(path: str | os.PathLike) -> str | None:
    """The ``format`` named by a dataset file's meta, or ``None`` when it cannot be read
    (missing, corrupted, no meta): lets a caller pick the loader; the loader reports errors."""
    try:
        with open(Path(path), "rb") as fh, np.load(fh, allow_pickle=False) as npz:
            if "meta" not in npz.files:
                return None
            meta = json.loads(str(npz["meta"][()]))
    except Exception:  # anything unreadable: the loader will say what is wrong
        return None
    return meta.get("format") if isinstance(meta, dict) else None


def _read_tent(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    meta, arrays = _read(path, FORMAT, VERSION)
    where = f"dataset: {str(path)!r}"
    n, _, _ = check_stream_fields(meta, where)
    _field_int(meta, "k", where)
    if "noise" not in meta:
        raise DatasetFormatError(f"{where}: metadata lacks field 'noise'")
    noise = meta["noise"]
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not math.isfinite(noise) or noise < 0:
        raise DatasetFormatError(f"{where}: metadata field 'noise' is {noise!r}, expected a finite number >= 0")
    if meta.get("distribution", "uniform") not in DISTRIBUTIONS:
        raise DatasetFormatError(f"{where}: metadata field 'distribution' is {meta.get('distribution')!r}, "
                                 f"expected one of {list(DISTRIBUTIONS)}")
    sums = meta.get("sha256")
    if not isinstance(sums, dict):
        raise DatasetFormatError(f"{where}: metadata field 'sha256' is missing or malformed")
    for key in ("x", "y"):
        if key not in arrays:
            raise DatasetFormatError(f"{where} lacks member {key!r}")
        if sums.get(key) != _sha256(arrays[key]):
            raise DatasetFormatError(f"{where}: member {key!r} fails its SHA-256 check (corrupted)")
        if arrays[key].shape != (n, 1) or arrays[key].dtype != np.float64:
            raise DatasetFormatError(f"{where}: {key} is {arrays[key].dtype} {arrays[key].shape}, "
                                     f"expected float64 ({n}, 1)")
        if not np.isfinite(arrays[key]).all():
            raise DatasetFormatError(f"{where}: {key} holds non-finite values")
    x = arrays["x"]
    if n and not (x.min() >= 0 and x.max() < 1):
        raise DatasetFormatError(f"{where}: x holds values outside [0, 1)")
    return meta, arrays


def load_tent_dataset(paths: str | os.PathLike | Sequence[str | os.PathLike], *,
                      partial: bool = False) -> TentSample:
    """Load one tent dataset file, or several shards of one stream (joined in stream order).

    :param partial: as for :func:`~teachers.dataset.load_dataset`.
    :raises DatasetFormatError: corrupted/truncated/foreign/edited file, wrong version, shards
        that do not belong together (other k, seed, noise or total; gaps or overlaps), or an
        incomplete set of shards.
    """
    paths = check_load_args(paths, partial, "dataset file")
    parts = [(*_read_tent(Path(p)), Path(p)) for p in paths]
    extra = _join_shards(parts, lambda meta, _: {key: meta.get(key) for key in _STREAM_KEYS}, partial)
    meta0 = parts[0][0]
    x = torch.as_tensor(np.concatenate([a["x"] for _, a, _ in parts]))
    y = torch.as_tensor(np.concatenate([a["y"] for _, a, _ in parts]))
    return TentSample(x, y, int(meta0["k"]), seed=meta0["seed"], start=meta0["start"], total=meta0["total"],
                      noise=float(meta0["noise"]), distribution=meta0.get("distribution", "uniform"), meta=extra)
