"""How a ladder's leaf events become observed inputs x.

Every leaf region r emits an observation vector x_r of size ``dim`` from its event z_r:

- :class:`OneHotEmission`: x_r = one-hot(z_r), the "delta" case of the framework paper's
  Thm 3 (P(x_r | z_r) is a point mass and z_r holds all information of its region);
- :class:`GaussianEmission`: x_r = mu[r, z_r] + sigma * eps, eps ~ N(0, I);
- a subclass of :class:`Emission` for anything else (its ``sample`` and ``log_prob``).

Shapes: leaf events ``z`` are ``(N, R)`` (R leaf regions), inputs ``x`` are ``(N, R, dim)``,
and ``log_likelihood(x)`` is ``(N, R, m)``: log p(x_r | z_r = k) for every event k.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from typing import NoReturn

    from pyro.distributions import TorchDistribution

__all__ = ["Emission", "GaussianEmission", "OneHotEmission", "OpaqueEmission", "emission_from_dict", "one_hot"]


def one_hot(z: torch.Tensor, num_events: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``one_hot(z)`` ``(*z.shape, num_events)`` built in ``dtype`` (default: torch's default dtype).

    The same values as ``F.one_hot(z.long(), num_events).to(dtype)`` without its int64 intermediate: the rows
    of an identity matrix gathered, twice as fast as zeros and a scatter on a (1024, 256) batch of 16 events (it
    is a large part of a streamed pass over one-hot leaves).  ``z`` must hold events in ``[0, num_events)``:
    the gather checks the range on the CPU (a RuntimeError naming ``z``).
    """
    m = int(num_events)
    eye = torch.eye(m, dtype=dtype or torch.get_default_dtype(), device=z.device)
    try:
        out = torch.index_select(eye, 0, z.reshape(-1).to(torch.int32 if m < 2**31 else torch.int64))
    except IndexError as e:
        raise RuntimeError(f"z: events outside [0, {m}) cannot be one-hot encoded ({e})") from None
    return out.view(*z.shape, m)


#: True while the events handed to an emission were made by the sampler itself, in range by construction: their
#: range check, a host sync per sampled block, is skipped (:func:`sampler_events`)
_SAMPLER_EVENTS: contextvars.ContextVar[bool] = contextvars.ContextVar("sampler_events", default=False)


@contextlib.contextmanager
def sampler_events() -> Iterator[None]:
    """Within this block, :meth:`Emission.sample` trusts the range of its events: the sampler's own draws, which
    lie in ``[0, m)`` by construction, so that sampling on a GPU does not wait for the host once per block.  The
    shape is still checked."""
    token = _SAMPLER_EVENTS.set(True)
    try:
        yield
    finally:
        _SAMPLER_EVENTS.reset(token)


def _check_leaf_events(z: torch.Tensor, num_regions: int, num_events: int, level: int | None = None) -> None:
    """Raise a TypeError/ValueError naming ``z`` unless it is ``(N, num_regions)`` leaf events in
    ``[0, num_events)`` (``level``: the ladder's leaf level, named in the message; the range is not read, a host
    sync, for the sampler's own events: :func:`sampler_events`)."""
    if not isinstance(z, torch.Tensor):
        raise TypeError(f"z: expected a torch.Tensor of leaf events, got {type(z).__name__}")
    if z.dim() != 2 or z.shape[1] != num_regions:
        raise ValueError(f"z: expected leaf events of shape (N, {num_regions}), got {tuple(z.shape)}")
    if not z.numel() or _SAMPLER_EVENTS.get():
        return
    lo, hi = torch.aminmax(z.long() if z.dtype == torch.bool else z)
    if lo < 0 or hi >= num_events:
        n, r = ((z < 0) | (z >= num_events)).nonzero()[0].tolist()
        where = "leaf region" if level is None else f"level {level} (the leaves), region"
        raise ValueError(f"z: {where} {r} holds event {z[n, r].item()} (row {n}), outside the allowed range "
                         f"[0, {num_events}): the events do not belong to this ladder")


class Emission:
    """Base class: the observation model of the leaf regions.

    Subclasses set ``num_regions`` (R), ``num_events`` (m), ``dim`` and implement
    :meth:`sample` and :meth:`log_likelihood`.  ``derivable`` is True when x is a
    deterministic function of z (then dataset files need not store x).
    """

    kind = "custom"
    derivable = False
    num_regions: int
    num_events: int
    dim: int

    def sample(self, z: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draw x ``(N, R, dim)`` given leaf events z ``(N, R)``, with ``generator`` (a
        ``torch.Generator``, or None for torch's global RNG) for every random number."""
        raise NotImplementedError

    def log_likelihood(self, x: torch.Tensor) -> torch.Tensor:
        """log p(x_r | z_r = k) for all k: ``(N, R, m)`` from x ``(N, R, dim)``."""
        raise NotImplementedError

    def pyro_distribution(self, z: torch.Tensor, region: torch.Tensor) -> TorchDistribution:
        """The Pyro distribution of x_r given events z (any batch shape) of leaf regions ``region``."""
        raise NotImplementedError(f"{type(self).__name__} has no Pyro distribution; override pyro_distribution")

    def to_dict(self) -> dict:
        """JSON-able description (arrays as tensors; the dataset writer stores them as arrays)."""
        return {"kind": self.kind, "name": type(self).__name__, "dim": self.dim}

    def check_input(self, x: torch.Tensor, name: str = "x") -> None:
        """Raise a TypeError/ValueError unless ``x`` is a ``(N, R, dim)`` tensor of this emission's width."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 3 or x.shape[1] != self.num_regions or x.shape[2] != self.dim:
            raise ValueError(f"{name}: expected shape (N, {self.num_regions}, {self.dim}), got {tuple(x.shape)}")


class OneHotEmission(Emission):
    """x_r = one-hot(z_r): exact, noiseless leaves (Thm 3's delta case).

    :param num_regions: number of leaf regions R.
    :param num_events: events per leaf m (= dim).
    """

    kind = "onehot"
    derivable = True

    def __init__(self, num_regions: int, num_events: int) -> None:
        self.num_regions, self.num_events, self.dim = int(num_regions), int(num_events), int(num_events)

    def sample(self, z: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        _check_leaf_events(z, self.num_regions, self.num_events)
        return one_hot(z, self.num_events)

    def log_likelihood(self, x: torch.Tensor) -> torch.Tensor:
        self.check_input(x)
        # p(x | z=k) = 1 if x is the k-th one-hot vector, else 0.
        match = (x == 1) & (x.sum(-1, keepdim=True) == 1)
        return torch.where(match, 0.0, -math.inf).to(x.dtype if x.is_floating_point() else torch.float64)

    def pyro_distribution(self, z: torch.Tensor, region: torch.Tensor) -> TorchDistribution:
        import pyro.distributions as dist

        return dist.OneHotCategorical(probs=F.one_hot(z.long(), self.num_events).double())

    def to_dict(self) -> dict:
        return {"kind": self.kind, "num_regions": self.num_regions, "num_events": self.num_events}


class GaussianEmission(Emission):
    """x_r ~ Normal(means[r, z_r], sigma^2 I).

    :param means: ``(R, m, dim)`` per-region, per-event mean vectors.
    :param sigma: noise standard deviation, > 0 (a float, or an ``(R,)`` tensor per region).
    """

    kind = "gaussian"

    def __init__(self, means: torch.Tensor, sigma: float | torch.Tensor) -> None:
        means = torch.as_tensor(means, dtype=torch.float64)
        if means.dim() != 3:
            raise ValueError(f"emission.means: expected shape (R, m, dim), got {tuple(means.shape)}")
        if 0 in means.shape:
            raise ValueError(f"emission.means: expected shape (R, m, dim) with R, m and dim >= 1 (no empty "
                             f"dimension), got {tuple(means.shape)}")
        if not torch.isfinite(means).all():
            raise ValueError("emission.means: must be finite")
        sigma = torch.as_tensor(sigma, dtype=torch.float64)
        if sigma.dim() > 1 or (sigma.dim() == 1 and sigma.shape[0] != means.shape[0]):
            raise ValueError(f"emission.sigma: expected a number or shape ({means.shape[0]},), "
                             f"got {tuple(sigma.shape)}")
        if not torch.isfinite(sigma).all() or (sigma <= 0).any():
            raise ValueError(f"emission.sigma: must be > 0 and finite, got {sigma.tolist()}")
        self.means = means
        self.sigma = sigma
        self.num_regions, self.num_events, self.dim = means.shape

    @classmethod
    def around_one_hot(cls, num_regions: int, num_events: int, sigma: float, scale: float = 1.0) -> GaussianEmission:
        """Means ``scale * one-hot(k)``: sigma -> 0 recovers :class:`OneHotEmission`."""
        means = scale * torch.eye(num_events, dtype=torch.float64).expand(num_regions, -1, -1).clone()
        return cls(means, sigma)

    @classmethod
    def random_means(cls, num_regions: int, num_events: int, dim: int, sigma: float,
                     generator: torch.Generator | None = None) -> GaussianEmission:
        """Means drawn i.i.d. N(0, I / dim) (unit expected norm)."""
        means = torch.randn(num_regions, num_events, dim, generator=generator, dtype=torch.float64) / math.sqrt(dim)
        return cls(means, sigma)

    def _sigma(self, device: torch.device | str) -> torch.Tensor:
        s = self.sigma.to(device)
        return s[:, None] if s.dim() == 1 else s

    def sample(self, z: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        _check_leaf_events(z, self.num_regions, self.num_events)
        n, r = z.shape
        means = self.means.to(device=z.device, dtype=torch.float32)
        flat = (torch.arange(r, device=z.device) * self.num_events + z.long()).reshape(-1)
        mu = means.reshape(-1, self.dim).index_select(0, flat).reshape(n, r, self.dim)
        noise = torch.randn((n, r, self.dim), generator=generator, device=z.device, dtype=torch.float32)
        return mu.add_(noise.mul_(self._sigma(z.device).to(torch.float32)))

    def log_likelihood(self, x: torch.Tensor) -> torch.Tensor:
        self.check_input(x)
        x64 = x.double()
        sq = (x64[:, :, None, :] - self.means.to(x.device)[None]).pow(2).sum(-1)  # (N, R, m)
        s2 = self._sigma(x.device).pow(2)
        return -0.5 * sq / s2 - 0.5 * self.dim * torch.log(2 * math.pi * s2)

    def pyro_distribution(self, z: torch.Tensor, region: torch.Tensor) -> TorchDistribution:
        import pyro.distributions as dist
        from pyro.ops.indexing import Vindex

        loc = Vindex(self.means.to(z.device))[region, z.long(), :]
        scale = self.sigma.to(z.device)
        if scale.dim() == 1:
            scale = scale[region][..., None]
        return dist.Normal(loc, scale).to_event(1)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "means": self.means, "sigma": self.sigma}


class OpaqueEmission(Emission):
    """Stand-in for a user-supplied emission read back from a file: it knows the shapes (the
    file stores x itself) but cannot sample or evaluate likelihoods."""

    def __init__(self, num_regions: int, num_events: int, dim: int, name: str) -> None:
        self.num_regions, self.num_events, self.dim, self.name = num_regions, num_events, dim, name

    def _unavailable(self, *args: object, **kwargs: object) -> NoReturn:
        """Refuse: the class of a custom emission is not stored with the data, so it cannot sample or score."""
        raise NotImplementedError(f"emission: the custom emission {self.name!r} was not saved with the data; "
                                  "rebuild the ladder with ladder.with_emission(your_emission)")

    sample = log_likelihood = _unavailable

    def to_dict(self) -> dict:
        return {"kind": "custom", "name": self.name, "dim": self.dim}


def emission_from_dict(d: dict, num_regions: int, num_events: int) -> Emission:
    """Inverse of ``Emission.to_dict`` for the built-in kinds; checks the sizes against the ladder."""
    if not isinstance(d, dict) or "kind" not in d:
        raise ValueError("emission: expected a table with a 'kind' field ('onehot' or 'gaussian')")
    kind = d["kind"]
    if kind == "onehot":
        for key, want in (("num_regions", num_regions), ("num_events", num_events)):
            if key in d and int(d[key]) != want:
                raise ValueError(f"emission.{key}: is {d[key]} but the ladder's leaf level has {want}")
        return OneHotEmission(num_regions, num_events)
    if kind == "gaussian":
        if "sigma" not in d:
            raise ValueError("emission.sigma: required for a gaussian emission")
        if "means" in d:
            means = torch.as_tensor(d["means"], dtype=torch.float64)
            if means.dim() != 3 or tuple(means.shape[:2]) != (num_regions, num_events):
                raise ValueError(f"emission.means: expected shape ({num_regions}, {num_events}, dim), "
                                 f"got {tuple(means.shape)}")
            return GaussianEmission(means, d["sigma"])
        return GaussianEmission.around_one_hot(num_regions, num_events, d["sigma"], float(d.get("scale", 1.0)))
    if kind == "custom":
        if "dim" not in d:
            raise ValueError("emission.dim: required for a custom emission")
        return OpaqueEmission(num_regions, num_events, int(d["dim"]), str(d.get("name", "custom")))
    raise ValueError(f"emission.kind: expected 'onehot' or 'gaussian', got {kind!r}")
