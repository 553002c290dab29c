"""Building blocks of the ladder's Pyro model (:mod:`teachers.pyro_model`): the leaves' emission p(x_r | z_r) as
a Pyro distribution, the point-mass sites of a bottom-up ladder's regions above the leaves, and the argument checks
the model's entry points share (a ``ValueError`` naming the argument before Pyro sees the data).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import TorchDistribution, constraints

from .categorical import BlockRNG, IndexedCategorical
from .emission import Emission
from .ladder import Ladder
from .sampling import _count

__all__ = ["EmissionDistribution", "PointMassCategorical", "SingleRegion", "check_condition_data", "check_labels",
           "check_num_examples", "deterministic_site", "observed"]


class EmissionDistribution(TorchDistribution):
    """p(x_r | z_r) for the leaves of a ladder, as a Pyro distribution over ``(..., dim)``.

    ``z`` has the leaf site's batch shape ``(..., N, b_0, ..., b_{d-1})`` (possibly with
    enumeration dims on the left).  ``sample`` calls the emission's own sampler (with
    ``generator``), ``log_prob(x)`` gathers ``emission.log_likelihood`` at ``z``, so any
    :class:`~teachers.emission.Emission`, custom ones included, works in the model.
    ``validate_args`` follows ``torch.distributions`` (None: the global default, see
    ``pyro.enable_validation``); when on, ``log_prob`` raises torch's own ``ValueError`` for a value
    of the wrong event shape, a non-broadcastable batch shape or NaN entries.
    """

    arg_constraints = {}
    support = constraints.real_vector

    def __init__(self, emission: Emission, z: torch.Tensor, generator: torch.Generator | BlockRNG | None = None,
                 validate_args: bool | None = None) -> None:
        self.emission, self.z, self.generator = emission, z, generator
        super().__init__(batch_shape=z.shape, event_shape=torch.Size([emission.dim]), validate_args=validate_args)

    def expand(self, batch_shape: Sequence[int], _instance: EmissionDistribution | None = None) -> EmissionDistribution:
        new = self._get_checked_instance(EmissionDistribution, _instance)
        new.emission, new.z, new.generator = self.emission, self.z.expand(batch_shape), self.generator
        super(EmissionDistribution, new).__init__(batch_shape=torch.Size(batch_shape), event_shape=self.event_shape,
                                                  validate_args=False)
        new._validate_args = self._validate_args
        return new

    def sample(self, sample_shape: Sequence[int] = torch.Size()) -> torch.Tensor:
        shape = torch.Size(sample_shape) + self.batch_shape
        z = self.z.expand(shape).reshape(-1, self.emission.num_regions)
        with torch.no_grad():
            if isinstance(self.generator, BlockRNG):
                # each block's own generator, so an Emission only ever sees a torch.Generator
                x = torch.cat([self.emission.sample(zb, g) for zb, g in self.generator.split(z)])
            else:
                x = self.emission.sample(z, self.generator)
        return x.reshape(*shape, self.emission.dim)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        r, m = self.emission.num_regions, self.emission.num_events
        ll = self.emission.log_likelihood(value.reshape(-1, r, self.emission.dim)).reshape(*value.shape[:-1], m)
        shape = torch.broadcast_shapes(ll.shape[:-1], self.z.shape)
        return ll.expand(*shape, m).gather(-1, self.z.long().expand(shape).unsqueeze(-1)).squeeze(-1)


class SingleRegion(Emission):
    """View of one leaf region of an emission (for the per-region plain model)."""

    def __init__(self, base: Emission, region: int) -> None:
        self.base, self.region = base, region
        self.num_regions, self.num_events, self.dim = 1, base.num_events, base.dim
        self.kind = base.kind

    def sample(self, z: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        full = torch.zeros(z.shape[0], self.base.num_regions, dtype=z.dtype, device=z.device)
        full[:, self.region] = z[:, 0]
        return self.base.sample(full, generator)[:, self.region: self.region + 1]

    def log_likelihood(self, x: torch.Tensor) -> torch.Tensor:
        full = x.new_zeros(x.shape[0], self.base.num_regions, self.base.dim)
        full[:, self.region] = x[:, 0]
        return self.base.log_likelihood(full)[:, self.region: self.region + 1]


class PointMassCategorical(TorchDistribution):
    """The event of a bottom-up region above the leaves, z_r = lookup_r[code(z_children(r))], as a latent
    categorical site with all its mass on that event (``teachers/ladder.py``'s module docstring).

    Not a ``pyro.deterministic`` site: Pyro's tools treat those as observed and leave them out of the dependency
    graph (``pyro.infer.inspect.get_model_relations`` lists a deterministic site as observed and its consumers as
    depending on the sites upstream of it), while this site is the region's latent event and depends on its
    children's sites exactly.  ``sample`` returns ``value`` itself (no random number is drawn, so the model's
    draws stay byte for byte those of a deterministic site); ``log_prob`` is ``log 1[z = value]`` (0 or
    ``-inf``, float64, as every factor of the ladder's enumeration); ``enumerate_support`` runs over the
    ``num_events`` events, so ``TraceEnum_ELBO`` / ``infer_discrete`` enumerate the region like any other.

    :param value: the region's event, an integer tensor; its shape is the batch shape (it may carry
        enumeration dims of the children on the left).
    :param num_events: m, the region's number of events (the support is ``{0, ..., m - 1}``).
    """

    arg_constraints = {}
    has_enumerate_support = True

    def __new__(cls, value: torch.Tensor | None = None, num_events: int | None = None,
                validate_args: bool | None = None, *, logits: torch.Tensor | None = None,
                probs: torch.Tensor | None = None) -> Any:
        # Pyro rebuilds enumerated distributions as ``type(d)(logits=...)`` (TraceEnum_ELBO.compute_marginals):
        # those are ordinary dense categoricals, as for teachers.categorical.IndexedCategorical
        if logits is not None or probs is not None:
            return dist.Categorical(logits=logits, probs=probs, validate_args=validate_args)
        return super().__new__(cls)

    def __init__(self, value: torch.Tensor, num_events: int, validate_args: bool | None = None, **_dense: Any) -> None:
        self.value, self.num_events = value, int(num_events)
        super().__init__(batch_shape=value.shape, event_shape=torch.Size(), validate_args=validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self) -> constraints.Constraint:
        return constraints.integer_interval(0, self.num_events - 1)

    def expand(self, batch_shape: torch.Size | list[int] | tuple[int, ...],
               _instance: PointMassCategorical | None = None) -> PointMassCategorical:
        new = self._get_checked_instance(PointMassCategorical, _instance)
        new.value, new.num_events = self.value.expand(batch_shape), self.num_events
        super(PointMassCategorical, new).__init__(batch_shape=torch.Size(batch_shape), event_shape=torch.Size(),
                                                  validate_args=False)
        new._validate_args = self._validate_args
        return new

    def sample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = torch.Size()) -> torch.Tensor:
        shape = torch.Size(sample_shape) + self.batch_shape
        return self.value if shape == self.value.shape else self.value.expand(shape)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        zero = torch.zeros((), dtype=torch.float64, device=self.value.device)
        return torch.where(value.long() == self.value.long(), zero, -torch.inf)

    def enumerate_support(self, expand: bool = True) -> torch.Tensor:
        m = self.num_events
        values = torch.arange(m, device=self.value.device).reshape((m,) + (1,) * len(self.batch_shape))
        return values.expand((m, *self.batch_shape)) if expand else values

    @property
    def mean(self) -> torch.Tensor:
        raise NotImplementedError("PointMassCategorical has no mean: events are labels, not numbers")


def deterministic_site(name: str, value: torch.Tensor) -> torch.Tensor:
    """``pyro.deterministic(name, value, event_dim=0)`` with the value as float64: exactly the site Pyro builds
    (a ``Delta`` masked off, flagged ``_deterministic``), so Pyro's tools (``get_model_relations``,
    ``render_model``, ``Predictive``) read it as their own deterministic site.  The ladder's model no longer uses
    it: a bottom-up region is a latent :class:`PointMassCategorical` site, which Pyro does not list as observed.

    :param name: the site's name.
    :param value: the recorded value, any shape (all batch dims).
    :returns: the value as float64.
    """
    return pyro.deterministic(name, value.to(torch.float64), event_dim=0)


def observed(fn: IndexedCategorical | PointMassCategorical, value: torch.Tensor | None) -> torch.Tensor | None:
    """An observed event tensor as int64, checked first by ``fn``'s own validation when it is on (torch's
    ``ValueError`` for values outside the support, instead of an ``IndexError`` in the tables later)."""
    if value is None:
        return None
    if fn._validate_args:
        fn._validate_sample(value)
    return value.long()


def _tensor(value: object, name: str) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")


def _num_leaf_rows(leaves: torch.Tensor, ladder: Ladder) -> int:
    """N of leaf events ``(N, R_d)``, checked."""
    _tensor(leaves, "leaves")
    if leaves.dim() != 2 or leaves.shape[1] != ladder.num_regions[-1]:
        raise ValueError(f"leaves: expected shape (N, {ladder.num_regions[-1]}), got {tuple(leaves.shape)}")
    return leaves.shape[0]


def _agreed_size(sizes: dict[str, int], who: str, options: str, what: str) -> int:
    """The one size of ``sizes`` (argument -> N), or a ``ValueError`` from ``who``."""
    if not sizes:
        raise ValueError(f"{who}: give {options}")
    if len(set(sizes.values())) > 1:
        raise ValueError(f"{who}: inconsistent {what} {sizes}")
    return next(iter(sizes.values()))


def check_num_examples(num_examples: int | None, x: torch.Tensor | None, leaves: torch.Tensor | None,
                       ladder: Ladder) -> int:
    """N from ``num_examples``, ``x`` ``(N, R_d, dim)`` and ``leaves`` ``(N, R_d)``, whichever are given (they
    must agree)."""
    sizes = {}
    if num_examples is not None:
        sizes["num_examples"] = _count(num_examples, "num_examples")
    if x is not None:
        _tensor(x, "x")
        ladder.emission.check_input(x)
        sizes["x"] = x.shape[0]
    if leaves is not None:
        sizes["leaves"] = _num_leaf_rows(leaves, ladder)
    return _agreed_size(sizes, "num_examples", "num_examples, x or leaves", "sizes")


def check_labels(y: torch.Tensor, n: int | None) -> None:
    """``y`` must be a ``(N,)`` tensor (of ``n`` entries when ``n`` is known)."""
    if not isinstance(y, torch.Tensor) or y.dim() != 1:
        raise ValueError(f"y: expected labels of shape (N,), got "
                         f"{tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__}")
    if n is not None and y.shape[0] != n:
        raise ValueError(f"y: expected labels of shape (N,) = ({n},), got {tuple(y.shape)}")


def check_condition_data(ladder: Ladder, y: torch.Tensor | None, x: torch.Tensor | None,
                         leaves: torch.Tensor | None) -> tuple[int, list[str], torch.Tensor | None,
                                                                torch.Tensor | None, torch.Tensor | None]:
    """The data of ``LadderModel.condition_on`` checked and reshaped: ``(N, names given, y, x, leaves)`` with
    ``y`` ``(N,)`` int64 labels in ``[0, m_0)``, ``x`` ``(N, R_d, dim)`` (from ``(N, R_d * dim)`` or ``(N, R_d, dim)``)
    and ``leaves`` ``(N, R_d)``."""
    r_d, dim = ladder.num_regions[-1], ladder.emission.dim
    sizes = {}
    if y is not None:
        _tensor(y, "y")
        check_labels(y, None)
        if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
            raise ValueError(f"y: expected integer labels in [0, {ladder.num_classes}), got dtype {y.dtype}")
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= ladder.num_classes):
            raise ValueError(f"y: expected integer labels in [0, {ladder.num_classes}), got values in "
                             f"[{int(y.min())}, {int(y.max())}]")
        sizes["y"] = y.shape[0]
    if x is not None:
        _tensor(x, "x")
        if x.dim() == 2 and x.shape[1] == r_d * dim:
            x = x.reshape(x.shape[0], r_d, dim)
        elif not (x.dim() == 3 and tuple(x.shape[1:]) == (r_d, dim)):
            raise ValueError(f"x: expected shape (N, {r_d * dim}) ({r_d} leaf regions x {dim} features, flat) "
                             f"or (N, {r_d}, {dim}), got {tuple(x.shape)}")
        sizes["x"] = x.shape[0]
    if leaves is not None:
        sizes["leaves"] = _num_leaf_rows(leaves, ladder)
    n = _agreed_size(sizes, "condition_on", "y, x or leaves", "numbers of examples")
    if n == 0:
        raise ValueError("condition_on: expected at least one example, got 0")
    return n, sorted(sizes), y, x, leaves
