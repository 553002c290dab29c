"""Reference implementation (smaso 0.2, commit 05be504): the uniform-tree Pyro model that was also the
tree sampler, kept verbatim (imports made absolute) so that ``benchmarks/bench_sampling.py`` can time
today's one sampler against it in the same run.  Not part of the library.

The summarization ladder as Pyro generative models.

:class:`LadderModel` is the model a user runs: one ``pyro.sample`` site per *level*
(``"z_0"`` = the label y, ..., ``"z_d"`` = the leaf events, then ``"x"``), vectorized with
nested plates that mirror the region tree::

    plate "data"    (N,   dim -(d+1))
      plate "level_1" (b_0, dim -d)        z_1: (N, b_0, 1, ..., 1)
        plate "level_2" (b_1, dim -d+1)    z_2: (N, b_0, b_1, 1, ..., 1)
          ...                              z_d, x: (N, b_0, ..., b_{d-1}[, dim])

so a level-l site has batch shape ``(N, b_0, ..., b_{l-1}) + (1,) * (d - l)`` and depends on
its parent level through ordinary plate broadcasting.  Top-down ladders draw every level with
:class:`~teachers.categorical.IndexedCategorical` (the fast alias sampler; ``log_prob`` and
``enumerate_support`` for ``TraceEnum_ELBO`` / ``infer_discrete``).  Bottom-up ladders draw
the leaves and record each parent event as a ``pyro.deterministic`` site computed by the
lookup tables; because a parent depends on *all* of its children, which live in one plate,
that model can be sampled, traced and conditioned but not enumerated (a site outside a plate
cannot depend on enumerated values inside it).  Exact inference for both modes is
:mod:`inference.ladder_posterior`, checked against :meth:`LadderModel.plain_model`: one
``dist.Categorical`` site per region, the model a Pyro user writes first, enumerable in both
modes on small ladders and the baseline of ``benchmarks/bench_ladder_sampling.py``.
"""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.distributions import TorchDistribution, constraints
from pyro.ops.indexing import Vindex

from teachers.categorical import BlockRNG, CategoricalTable, IndexedCategorical
from teachers.emission import Emission
from teachers.ladder import TOPDOWN, Ladder

__all__ = ["EmissionDistribution", "LadderModel"]


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

    def __init__(self, emission: Emission, z: torch.Tensor, generator: torch.Generator | None = None,
                 validate_args=None):
        self.emission, self.z, self.generator = emission, z, generator
        super().__init__(batch_shape=z.shape, event_shape=torch.Size([emission.dim]), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(EmissionDistribution, _instance)
        new.emission, new.z, new.generator = self.emission, self.z.expand(batch_shape), self.generator
        super(EmissionDistribution, new).__init__(batch_shape=torch.Size(batch_shape), event_shape=self.event_shape,
                                                  validate_args=False)
        new._validate_args = self._validate_args
        return new

    def sample(self, sample_shape=torch.Size()):
        shape = torch.Size(sample_shape) + self.batch_shape
        z = self.z.expand(shape)
        r = self.emission.num_regions
        z = z.reshape(-1, r)
        with torch.no_grad():
            if isinstance(self.generator, BlockRNG):
                # each block's own generator, so an Emission only ever sees a torch.Generator
                x = torch.cat([self.emission.sample(zb, g) for zb, g in self.generator.split(z)])
            else:
                x = self.emission.sample(z, self.generator)
        return x.reshape(*shape, self.emission.dim)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        r, m = self.emission.num_regions, self.emission.num_events
        ll = self.emission.log_likelihood(value.reshape(-1, r, self.emission.dim))  # (N', R, m)
        ll = ll.reshape(*value.shape[:-1], m)
        shape = torch.broadcast_shapes(ll.shape[:-1], self.z.shape)
        return ll.expand(*shape, m).gather(-1, self.z.long().expand(shape).unsqueeze(-1)).squeeze(-1)


class LadderModel:
    """Pyro models of a :class:`~teachers.ladder.Ladder` (see the module docstring).

    :param ladder: the ladder.
    :param device: device of the tables (and of sampled tensors).
    """

    def __init__(self, ladder: Ladder, device: torch.device | str | None = None):
        self.ladder = ladder
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        d = ladder.depth
        # region_index[l]: index within level l, shaped like the level's plates (mixed radix
        # over (b_0, ..., b_{l-1}) equals the breadth-first numbering).
        self.region_index = [
            torch.arange(ladder.num_regions[l], device=self.device, dtype=torch.int32)
            .reshape(*ladder.branching[:l], *([1] * (d - l)))
            for l in range(d + 1)]
        if ladder.mode == TOPDOWN:
            self.root_table = CategoricalTable(ladder.prior[None], device=self.device)
            self.level_tables = [None] + [CategoricalTable(t.reshape(-1, ladder.events[l]), device=self.device)
                                          for l, t in enumerate(ladder.tables, start=1)]
        else:
            self.leaf_table = CategoricalTable(ladder.leaf_prior, device=self.device)
            self.lookup = [t.to(self.device) for t in ladder.lookup]
            m, b = ladder.events, ladder.branching
            self.radix = [m[l + 1] ** torch.arange(b[l] - 1, -1, -1, device=self.device) for l in range(d)]

    # ------------------------------------------------------------------ helpers
    def plates(self, num_examples: int) -> list:
        """``[data plate, level_1 plate, ..., level_d plate]`` with the dims of the docstring."""
        lad = self.ladder
        d = lad.depth
        return [pyro.plate("data", num_examples, dim=-(d + 1))] + [
            pyro.plate(f"level_{l}", lad.branching[l - 1], dim=-(d + 1 - l)) for l in range(1, d + 1)]

    def leaf_shape(self, n: int) -> tuple[int, ...]:
        """Shape of the leaf events of ``n`` examples in the nested-plate layout: ``(n, b_0, ..., b_{d-1})``."""
        return (n, *self.ladder.branching)

    def parent_events(self, level: int, child: torch.Tensor) -> torch.Tensor:
        """Bottom-up: events of level ``level`` from its children's events ``(..., R_{l+1})``: ``(..., R_l)``."""
        lad = self.ladder
        lead = child.shape[:-1]
        b = lad.branching[level]
        code = (child.reshape(*lead, lad.num_regions[level], b).long() * self.radix[level]).sum(-1)
        size = lad.events[level + 1] ** b
        flat = code + torch.arange(lad.num_regions[level], device=child.device) * size
        return self.lookup[level].reshape(-1).index_select(0, flat.reshape(-1)).reshape(*lead, -1)

    # ------------------------------------------------------------------ the model
    def model(self, num_examples: int | None = None, x: torch.Tensor | None = None,
              leaves: torch.Tensor | None = None, *, y: torch.Tensor | None = None, emit: bool = True,
              generator: torch.Generator | BlockRNG | None = None, compact: bool = False) -> dict[str, torch.Tensor]:
        """The ladder as a Pyro model with one sample site per level.

        :param num_examples: N (inferred from ``x`` or ``leaves`` when they are given).
        :param x: optional observed inputs ``(N, R_d, dim)`` (site ``"x"``).
        :param leaves: optional observed leaf events ``(N, R_d)`` (site ``"z_d"``).
        :param y: optional observed labels ``(N,)``: top-down, the observed value of site ``"z_0"``;
            bottom-up (where ``"z_0"`` is deterministic), the factor site ``"z_0_observed"`` =
            ``log 1[z_0 = y]`` under the data plate.  :meth:`condition_on` checks shapes first.
        :param emit: include the ``"x"`` site when x is not observed (set False to sample
            events only, e.g. for one-hot leaves whose x is a function of z_d).
        :param generator: ``torch.Generator`` (or :class:`~teachers.categorical.BlockRNG`) for
            every draw (Pyro's global RNG otherwise).
        :param compact: sampled events in the narrowest integer dtype (uint8 for m <= 256)
            instead of int64: the dataset sampler's fast path.
        :returns: ``{"z_0": ..., ..., "z_d": ..., "x": ...}`` with the plate-shaped values.
        """
        lad = self.ladder
        d = lad.depth
        if y is not None:
            if not isinstance(y, torch.Tensor) or y.dim() != 1:
                raise ValueError(f"y: expected labels of shape (N,), got "
                                 f"{tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__}")
            if num_examples is None and x is None and leaves is None:
                num_examples = y.shape[0]
        n = _num_examples(num_examples, x, leaves, lad)
        if y is not None and y.shape[0] != n:
            raise ValueError(f"y: expected labels of shape (N,) = ({n},), got {tuple(y.shape)}")
        leaves_obs = None if leaves is None else leaves.reshape(self.leaf_shape(n))
        x_obs = None if x is None else x.reshape(*self.leaf_shape(n), lad.emission.dim)
        y_obs = None if y is None else y.reshape(n, *([1] * d))
        plates = self.plates(n)
        out: dict[str, torch.Tensor] = {}
        open_plates = []  # level plates are left one at a time (bottom-up parents live outside them)

        def enter(level):
            plates[level].__enter__()
            open_plates.append(plates[level])

        def leave():
            open_plates.pop().__exit__(None, None, None)

        with plates[0]:
            try:
                if lad.mode == TOPDOWN:
                    fn = IndexedCategorical(self.root_table, torch.zeros((), dtype=torch.int32, device=self.device),
                                            generator, compact)
                    z = pyro.sample("z_0", fn, obs=_observed(fn, y_obs))
                    out["z_0"] = z
                    for l in range(1, d + 1):
                        enter(l)
                        row = self.region_index[l] * lad.events[l - 1] + z
                        fn = IndexedCategorical(self.level_tables[l], row, generator, compact)
                        z = pyro.sample(f"z_{l}", fn, obs=_observed(fn, leaves_obs) if l == d else None)
                        out[f"z_{l}"] = z
                else:
                    for l in range(1, d + 1):
                        enter(l)
                    fn = IndexedCategorical(self.leaf_table, self.region_index[d], generator, compact)
                    out[f"z_{d}"] = pyro.sample(f"z_{d}", fn, obs=_observed(fn, leaves_obs))
                if x_obs is not None or emit:
                    out["x"] = pyro.sample("x", EmissionDistribution(lad.emission, out[f"z_{d}"], generator),
                                           obs=x_obs)
                if lad.mode == TOPDOWN:
                    while open_plates:
                        leave()
                else:
                    leaf = out[f"z_{d}"]
                    lead = leaf.shape[: leaf.dim() - (d + 1)]  # e.g. Predictive's sample dims
                    flat = leaf.reshape(*lead, n, -1)
                    for l in range(d - 1, -1, -1):
                        leave()
                        flat = self.parent_events(l, flat)
                        shape = (*lead, n, *lad.branching[:l], *([1] * (d - l)))
                        out[f"z_{l}"] = pyro.deterministic(f"z_{l}", flat.reshape(shape))
                    if y_obs is not None:
                        zero = torch.zeros((), dtype=torch.float64, device=out["z_0"].device)
                        pyro.factor("z_0_observed", torch.where(out["z_0"] == y_obs.to(out["z_0"].device), zero,
                                                                -torch.inf))
            finally:
                # after an error, leave the plates still open so Pyro's plate dims are freed
                while open_plates:
                    open_plates.pop().__exit__(None, None, None)
        return out

    __call__ = model

    def condition_on(self, y: torch.Tensor | None = None, x: torch.Tensor | None = None,
                     leaves: torch.Tensor | None = None):
        """:meth:`model` conditioned on data in the flat dataset layout, ready for ``Predictive``,
        ``infer_discrete`` and ``TraceEnum_ELBO``.

        The sites of :meth:`model` have plate-shaped values (``"z_0"``: ``(N, 1, ..., 1)``, ``"x"``:
        ``(N, b_0, ..., b_{d-1}, dim)``); this helper takes the shapes a dataset holds and reshapes them,
        checking every shape first (a ``ValueError`` naming the argument and the expected shape instead
        of a broadcasting error deep inside Pyro).

        - top-down ladders: ``y`` is the observed value of the label site ``"z_0"`` (the same
          log-density as ``poutine.condition(model, data={"z_0": y.reshape(N, 1, ..., 1)})``), so it is
          observed, not enumerated;
        - bottom-up ladders: the label is a deterministic function of the leaves, so ``y`` adds the
          factor site ``"z_0_observed"`` = ``log 1[z_0 = y]`` (0 or -inf) under the data plate; sampling
          from the conditioned model does not enforce it (use the log-density, e.g. importance weights).

        :param y: labels ``(N,)``, integers in ``[0, m_0)``.
        :param x: inputs ``(N, R_d * dim)`` (flat, leaf regions in order, each ``dim`` features) or
            ``(N, R_d, dim)``.
        :param leaves: leaf events ``(N, R_d)``.
        :returns: a model function ``conditioned(*, emit=True, generator=None, compact=False)`` (the
            keywords of :meth:`model`) returning the site values of :meth:`model`.
        """
        lad = self.ladder
        r_d, dim = lad.num_regions[-1], lad.emission.dim
        sizes = {}
        if y is not None:
            if not isinstance(y, torch.Tensor):
                raise TypeError(f"y: expected a torch.Tensor, got {type(y).__name__}")
            if y.dim() != 1:
                raise ValueError(f"y: expected labels of shape (N,), got {tuple(y.shape)}")
            if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
                raise ValueError(f"y: expected integer labels in [0, {lad.num_classes}), got dtype {y.dtype}")
            if y.numel() and (int(y.min()) < 0 or int(y.max()) >= lad.num_classes):
                raise ValueError(f"y: expected integer labels in [0, {lad.num_classes}), got values in "
                                 f"[{int(y.min())}, {int(y.max())}]")
            sizes["y"] = y.shape[0]
        if x is not None:
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
            if x.dim() == 2 and x.shape[1] == r_d * dim:
                x = x.reshape(x.shape[0], r_d, dim)
            elif not (x.dim() == 3 and tuple(x.shape[1:]) == (r_d, dim)):
                raise ValueError(f"x: expected shape (N, {r_d * dim}) ({r_d} leaf regions x {dim} features, flat) "
                                 f"or (N, {r_d}, {dim}), got {tuple(x.shape)}")
            sizes["x"] = x.shape[0]
        if leaves is not None:
            if not isinstance(leaves, torch.Tensor):
                raise TypeError(f"leaves: expected a torch.Tensor, got {type(leaves).__name__}")
            if leaves.dim() != 2 or leaves.shape[1] != r_d:
                raise ValueError(f"leaves: expected shape (N, {r_d}), got {tuple(leaves.shape)}")
            sizes["leaves"] = leaves.shape[0]
        if not sizes:
            raise ValueError("condition_on: give y, x or leaves")
        if len(set(sizes.values())) > 1:
            raise ValueError(f"condition_on: inconsistent numbers of examples {sizes}")
        n = next(iter(sizes.values()))
        if n == 0:
            raise ValueError("condition_on: expected at least one example, got 0")
        y = None if y is None else y.to(device=self.device, dtype=torch.long)

        def conditioned(*, emit: bool = True, generator: torch.Generator | BlockRNG | None = None,
                        compact: bool = False) -> dict[str, torch.Tensor]:
            return self.model(n, x=x, leaves=leaves, y=y, emit=emit, generator=generator, compact=compact)

        conditioned.__doc__ = f"LadderModel.model conditioned on {sorted(sizes)} ({n} examples)."
        return conditioned

    def flatten(self, values: dict[str, torch.Tensor]) -> torch.Tensor:
        """Stack per-level site values into the dataset layout ``(N, total_regions)`` (global order)."""
        lad = self.ladder
        n = values["z_0"].shape[0]
        return torch.cat([values[f"z_{l}"].reshape(n, lad.num_regions[l]) for l in range(lad.depth + 1)], dim=1)

    # ------------------------------------------------------------------ plain reference model
    def plain_model(self, num_examples: int | None = None, x: torch.Tensor | None = None, *,
                    emit: bool = True) -> dict[str, torch.Tensor]:
        """One ``dist.Categorical`` site ``"z_<g>"`` per region g (global order) under one data plate.

        This is the ladder as a Pyro user first writes it: no shared tables, no plates over
        regions.  It is enumerable in both modes (bottom-up parents are Categorical with a
        one-hot row picked by the lookup table), which makes it the reference for exact
        inference on small ladders, and the baseline of the sampling benchmark.  Leaf inputs
        are sites ``"x_<r>"`` (leaf region r).
        """
        lad = self.ladder
        n = _num_examples(num_examples, x, None, lad)
        z: dict[int, torch.Tensor] = {}
        off = lad.level_offsets
        with pyro.plate("data", n, dim=-1):
            if lad.mode == TOPDOWN:
                z[0] = pyro.sample("z_0", dist.Categorical(probs=lad.prior.to(self.device)))
                for l in range(1, lad.depth + 1):
                    table = lad.tables[l - 1].to(self.device)
                    for i in range(lad.num_regions[l]):
                        parent = off[l - 1] + i // lad.branching[l - 1]
                        z[off[l] + i] = pyro.sample(f"z_{off[l] + i}",
                                                    dist.Categorical(probs=Vindex(table)[i, z[parent], :]))
            else:
                d = lad.depth
                for i in range(lad.num_regions[d]):
                    z[off[d] + i] = pyro.sample(f"z_{off[d] + i}",
                                                dist.Categorical(probs=lad.leaf_prior[i].to(self.device)))
                for l in range(d - 1, -1, -1):
                    b, mc = lad.branching[l], lad.events[l + 1]
                    for i in range(lad.num_regions[l]):
                        code = 0
                        for c in range(b):
                            code = code * mc + z[off[l + 1] + i * b + c]
                        event = self.lookup[l][i][code]
                        z[off[l] + i] = pyro.sample(f"z_{off[l] + i}", dist.Categorical(
                            probs=F.one_hot(event, lad.events[l]).to(torch.float64)))
            if x is not None or emit:
                d = lad.depth
                em = lad.emission
                for i in range(lad.num_regions[d]):
                    obs = None if x is None else x[:, i]
                    one = _SingleRegion(em, i)
                    pyro.sample(f"x_{i}", EmissionDistribution(one, z[off[d] + i]), obs=obs)
        return {f"z_{g}": v for g, v in z.items()}


def _observed(fn: IndexedCategorical, value: torch.Tensor | None) -> torch.Tensor | None:
    """An observed event tensor as int64, checked first by ``fn``'s own validation when it is on (torch's
    ``ValueError`` for values outside the support, instead of an ``IndexError`` in the tables later)."""
    if value is None:
        return None
    if fn._validate_args:
        fn._validate_sample(value)
    return value.long()


class _SingleRegion(Emission):
    """View of one leaf region of an emission (for the per-region plain model)."""

    def __init__(self, base: Emission, region: int):
        self.base, self.region = base, region
        self.num_regions, self.num_events, self.dim = 1, base.num_events, base.dim
        self.kind = base.kind

    def sample(self, z, generator=None):
        full = torch.zeros(z.shape[0], self.base.num_regions, dtype=z.dtype, device=z.device)
        full[:, self.region] = z[:, 0]
        return self.base.sample(full, generator)[:, self.region: self.region + 1]

    def log_likelihood(self, x):
        full = x.new_zeros(x.shape[0], self.base.num_regions, self.base.dim)
        full[:, self.region] = x[:, 0]
        return self.base.log_likelihood(full)[:, self.region: self.region + 1]


def _num_examples(num_examples, x, leaves, ladder: Ladder) -> int:
    sizes = {}
    if num_examples is not None:
        if isinstance(num_examples, bool) or not isinstance(num_examples, (int, np.integer)) or num_examples <= 0:
            raise ValueError(f"num_examples: expected a positive integer, got {num_examples!r}")
        sizes["num_examples"] = int(num_examples)
    if x is not None:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
        ladder.emission.check_input(x)
        sizes["x"] = x.shape[0]
    if leaves is not None:
        if not isinstance(leaves, torch.Tensor):
            raise TypeError(f"leaves: expected a torch.Tensor, got {type(leaves).__name__}")
        if leaves.dim() != 2 or leaves.shape[1] != ladder.num_regions[-1]:
            raise ValueError(f"leaves: expected shape (N, {ladder.num_regions[-1]}), got {tuple(leaves.shape)}")
        sizes["leaves"] = leaves.shape[0]
    if not sizes:
        raise ValueError("num_examples: give num_examples, x or leaves")
    if len(set(sizes.values())) > 1:
        raise ValueError(f"num_examples: inconsistent sizes {sizes}")
    return next(iter(sizes.values()))
