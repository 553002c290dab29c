"""The summarization ladder (``docs/theory.md`` §1) as one Pyro generative model, for every
:class:`~teachers.ladder.Ladder`: :class:`LadderModel`.

The joint is the ladder's (module docstring of :mod:`teachers.ladder`): top-down,
p(z, x) = P(z_0) prod_{r below the top} P(z_r | code(z_parents(r))) prod_{leaves} p(x_r | z_r);
bottom-up, p(z, x) = prod_{leaves} P(z_r) p(x_r | z_r) with every region above the leaves the deterministic
z_r = lookup_r[code(z_children(r))] (codes mixed-radix, first parent / child most significant).  Two site
layouts express it:

``layout="plates"`` (the default on a uniform tree, ``ladder.is_uniform()``): one ``pyro.sample`` site per
*level* (``"z_0"`` = the label y, ..., ``"z_d"`` = the leaf events, then ``"x"``), vectorized with nested
plates that mirror the region tree::

    plate "data"    (N,   dim -(d+1))
      plate "level_1" (b_0, dim -d)        z_1: (N, b_0, 1, ..., 1)
        plate "level_2" (b_1, dim -d+1)    z_2: (N, b_0, b_1, 1, ..., 1)
          ...                              z_d, x: (N, b_0, ..., b_{d-1}[, dim])

so a level-l site has batch shape ``(N, b_0, ..., b_{l-1}) + (1,) * (d - l)`` and depends on its parent
level through ordinary plate broadcasting (``max_plate_nesting = d + 1``; ``infer_discrete`` with
``first_available_dim=-(d + 2)``).  Bottom-up, the parents are ``pyro.deterministic`` sites computed by the
lookup tables; because a parent depends on *all* of its children, which live in one plate, that form can
be sampled, traced and conditioned but not enumerated.

``layout="groups"`` (the default on any other graph: several parents, uneven branching or events)::

    plate "data" (N, dim -2)
      per level l, per group j:  plate "level_{l}_g{j}" (G_j, dim -1)    site "z_{l}_g{j}": (N, G_j)
      plate "leaves" (R_d, dim -1)                                        site "x": (N, R_d, dim)

``groups[l][j]`` holds the region indices (within level l) of site ``"z_{l}_g{j}"``: the signature groups
of :func:`teachers.sampling.signature_groups` (top-down: same parent event counts and m; bottom-up: same
child event counts), each drawn by one vectorised site; ``max_plate_nesting = 2``.  With
``group_regions=False`` every region is its own group (``"z_{l}_g{i}"`` is region ``l.i``, shape ``(N, 1)``)
and no region plates are opened: the form to *enumerate* (``config_enumerate`` +
``TraceEnum_ELBO(max_plate_nesting=2)``), because in a DAG a region reads events of several plate elements
of the level above, which Pyro's plate semantics cannot express for enumerated variables.  Bottom-up
regions above the leaves are observed float64 ``Delta`` sites
(:func:`teachers.pyro_sites.deterministic_site`), so only the leaves are enumerated.

Both layouts draw every random event with :class:`~teachers.categorical.IndexedCategorical` (alias
sampling, ``generator=`` and ``compact=`` as in the dataset sampler; ``log_prob`` and ``enumerate_support``
for ``TraceEnum_ELBO`` / ``infer_discrete``), emit x through
:class:`~teachers.pyro_sites.EmissionDistribution`, take ``x=``, ``leaves=`` and ``y=`` observations, and
share the layout-free API: :meth:`LadderModel.condition_on` (flat dataset shapes), :meth:`~LadderModel.site_names`,
:meth:`~LadderModel.regions_of`, :meth:`~LadderModel.to_z` (site values -> the ``(rows, total_regions)``
event matrix) and :meth:`~LadderModel.site_values` (the reverse, for ``poutine.condition``).
:meth:`LadderModel.plain_model` is the ladder as a Pyro user first writes it, for any graph: one
``dist.Categorical`` site per region, enumerable in both modes on small ladders (the reference of exact
inference, and the baseline of ``benchmarks/bench_ladder_sampling.py``).  Exact inference for large ladders
is :mod:`inference`.
"""

from __future__ import annotations

import contextlib
import math

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.ops.indexing import Vindex

from .categorical import BlockRNG, CategoricalTable, IndexedCategorical
from .ladder import TOPDOWN, Ladder
from .pyro_sites import (
    EmissionDistribution,
    SingleRegion,
    check_condition_data,
    check_labels,
    check_num_examples,
    deterministic_site,
    observed,
)
from .sampling import signature_groups

__all__ = ["GROUPS", "LAYOUTS", "PLATES", "EmissionDistribution", "LadderModel"]

#: Site layouts of :class:`LadderModel` (module docstring).
PLATES, GROUPS = "plates", "groups"
LAYOUTS = (PLATES, GROUPS)


class LadderModel:
    """Pyro models of any :class:`~teachers.ladder.Ladder` (see the module docstring).

    :param ladder: the ladder.
    :param device: device of the tables (and of sampled tensors).
    :param layout: ``"plates"`` (nested plates; uniform trees only) or ``"groups"`` (grouped sites; any
        ladder).  Default: ``"plates"`` on a uniform tree, else ``"groups"``.
    :param group_regions: ``"groups"`` layout only (giving it selects that layout): one vectorised site per
        signature group (True, the default) or one site per region (False: the enumerable form).
    :ivar layout: the layout in use.
    :ivar max_plate_nesting: ``depth + 1`` (plates) or 2 (groups), for ``TraceEnum_ELBO``; ``infer_discrete``
        takes ``first_available_dim=-(max_plate_nesting + 1)``.
    :ivar groups: (groups layout) ``groups[l][j]``: region indices of site ``"z_{l}_g{j}"``.
    """

    def __init__(self, ladder: Ladder, device: torch.device | str | None = None, *, layout: str | None = None,
                 group_regions: bool | None = None):
        if not isinstance(ladder, Ladder):
            raise TypeError(f"ladder: expected a teachers.ladder.Ladder, got {type(ladder).__name__}")
        if layout is None:
            layout = PLATES if ladder.is_uniform() and group_regions is None else GROUPS
        if layout not in LAYOUTS:
            raise ValueError(f"layout: expected 'plates' or 'groups', got {layout!r}")
        if layout == PLATES and not ladder.is_uniform():
            raise ValueError("layout: 'plates' (nested plates mirroring the tree) needs a uniform tree "
                             "(ladder.is_uniform()); this ladder has several parents per region or uneven "
                             "branching or events: use layout='groups'")
        if layout == PLATES and group_regions is not None:
            raise ValueError("group_regions: only for layout='groups' (grouped sites); the 'plates' layout has "
                             "one site per level")
        self.ladder = ladder
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.layout = layout
        self._plain = None  # per-region tables of plain_model, built on first use
        if layout == PLATES:
            self.max_plate_nesting = ladder.depth + 1
            self._init_plates()
        else:
            self.max_plate_nesting = 2
            self.group_regions = True if group_regions is None else bool(group_regions)
            self._init_groups()

    def _init_plates(self) -> None:
        ladder, d = self.ladder, self.ladder.depth
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

    def _init_groups(self) -> None:
        g, dev = self.ladder, self.device
        if self.group_regions:
            self.groups = [[idx for _key, idx in signature_groups(g, l)] for l in range(g.depth + 1)]
        else:
            self.groups = [[(i,) for i in range(n)] for n in g.num_regions]
        # where[l][i] = (group, column) of region i of level l
        self.where = [dict() for _ in range(g.depth + 1)]
        for l, groups in enumerate(self.groups):
            for j, idx in enumerate(groups):
                for c, i in enumerate(idx):
                    self.where[l][i] = (j, c)
        # per group: its table (topdown: CategoricalTable of the stacked (G * rows, m) rows; bottomup: the
        # leaves' CategoricalTable or the stacked (G, prod child m) lookups) and the first row of each column
        self._tables: list[list] = []
        self._base: list[list[torch.Tensor]] = []
        for l, groups in enumerate(self.groups):
            tables, bases = [], []
            for idx in groups:
                ar = torch.arange(len(idx), device=dev)
                if g.mode == TOPDOWN:
                    if l == 0:
                        stacked = g.prior.to(torch.float64)[None, None]  # (1, 1, m_0)
                    else:
                        stacked = torch.stack([g.region_tables[l][i] for i in idx]).to(torch.float64)
                    tables.append(CategoricalTable(stacked.reshape(-1, stacked.shape[-1]), device=dev))
                    bases.append(ar * stacked.shape[1])
                elif l == g.depth:
                    tables.append(CategoricalTable(torch.stack([g.leaf_priors[i] for i in idx]), device=dev))
                    bases.append(ar)
                else:
                    tables.append(torch.stack([g.lookups[l][i] for i in idx]).to(dev))  # (G, prod child m)
                    bases.append(ar)
            self._tables.append(tables)
            self._base.append(bases)

    def _require(self, layout: str, what: str) -> None:
        if self.layout != layout:
            hint = ("the nested plates of a uniform tree" if layout == PLATES else
                    "grouped sites, LadderModel(ladder, layout='groups')")
            raise ValueError(f"{what}: only for layout={layout!r} ({hint}); this LadderModel has "
                             f"layout={self.layout!r}")

    # ------------------------------------------------------------------ naming (both layouts)
    def site_name(self, level: int, group: int = 0) -> str:
        """The event site of ``level`` (and ``group``): ``"z_{level}"`` (plates) or ``"z_{level}_g{group}"``."""
        if self.layout == PLATES:
            if group != 0:
                raise ValueError(f"group: the 'plates' layout has one site per level (group 0), got {group!r}")
            return f"z_{level}"
        return f"z_{level}_g{group}"

    def site_names(self) -> list[str]:
        """Every event site, level by level (topdown order), group by group."""
        if self.layout == PLATES:
            return [f"z_{l}" for l in range(self.ladder.depth + 1)]
        return [self.site_name(l, j) for l, groups in enumerate(self.groups) for j in range(len(groups))]

    def sample_site_names(self) -> list[str]:
        """The event sites that are random (topdown: all; bottomup: the leaves; the rest are deterministic)."""
        names = self.site_names()
        if self.ladder.mode == TOPDOWN:
            return names
        d = self.ladder.depth
        return [s for s in names if self.regions_of(s)[0] == d]

    def regions_of(self, site: str) -> tuple[int, tuple[int, ...]]:
        """``(level, region indices)`` of the columns of an event site (plates: ``"z_l"`` covers level l)."""
        lad = self.ladder
        try:
            if self.layout == PLATES:
                if not site.startswith("z_") or "_g" in site:
                    raise ValueError
                l = int(site[2:])
                if not 0 <= l <= lad.depth:
                    raise IndexError
                return l, tuple(range(lad.num_regions[l]))
            lv, gr = site[2:].split("_g")
            l, j = int(lv), int(gr)
            if not site.startswith("z_") or l < 0 or j < 0:
                raise ValueError
            return l, self.groups[l][j]
        except (ValueError, IndexError, AttributeError, TypeError):
            form = "'z_<level>'" if self.layout == PLATES else "'z_<level>_g<group>'"
            raise ValueError(f"site: expected {form} of this model, got {site!r}") from None

    # ------------------------------------------------------------------ plates-layout helpers
    def plates(self, num_examples: int) -> list:
        """``[data plate, level_1 plate, ..., level_d plate]`` with the dims of the docstring (plates layout)."""
        self._require(PLATES, "plates")
        lad = self.ladder
        d = lad.depth
        return [pyro.plate("data", num_examples, dim=-(d + 1))] + [
            pyro.plate(f"level_{l}", lad.branching[l - 1], dim=-(d + 1 - l)) for l in range(1, d + 1)]

    def leaf_shape(self, n: int) -> tuple[int, ...]:
        """Shape of the leaf events of ``n`` examples in the nested-plate layout: ``(n, b_0, ..., b_{d-1})``."""
        self._require(PLATES, "leaf_shape")
        return (n, *self.ladder.branching)

    def parent_events(self, level: int, child: torch.Tensor) -> torch.Tensor:
        """Bottom-up: events of level ``level`` from its children's events ``(..., R_{l+1})``: ``(..., R_l)``
        (plates layout)."""
        self._require(PLATES, "parent_events")
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
        """The ladder as a Pyro model (sites of the module docstring, in this model's :attr:`layout`).

        :param num_examples: N (inferred from ``x``, ``leaves`` or ``y`` when they are given).
        :param x: optional observed inputs ``(N, R_d, dim)`` (site ``"x"``).
        :param leaves: optional observed leaf events ``(N, R_d)`` (the leaf sites).
        :param y: optional observed labels ``(N,)``: top-down, the observed value of the label site
            (``"z_0"`` / ``"z_0_g0"``); bottom-up (where the label is deterministic), the factor site
            ``"z_0_observed"`` = ``log 1[z_0 = y]`` under the data plate.  :meth:`condition_on` checks shapes
            first.
        :param emit: include the ``"x"`` site when x is not observed (set False to sample
            events only, e.g. for one-hot leaves whose x is a function of z_d).
        :param generator: ``torch.Generator`` (or :class:`~teachers.categorical.BlockRNG`) for
            every draw (Pyro's global RNG otherwise).
        :param compact: sampled events in the narrowest integer dtype (uint8 for m <= 256)
            instead of int64.
        :returns: the site values by name (plates: ``{"z_0": ..., ..., "z_d": ..., "x": ...}`` plate-shaped;
            groups: ``{"z_{l}_g{j}": (N, G_j), ..., "x": (N, R_d, dim)}``).
        """
        if y is not None:
            check_labels(y, None)
            if num_examples is None and x is None and leaves is None:
                num_examples = y.shape[0]
        n = check_num_examples(num_examples, x, leaves, self.ladder)
        if y is not None:
            check_labels(y, n)
        if self.layout == PLATES:
            return self._model_plates(n, x, leaves, y, emit, generator, compact)
        return self._model_groups(n, x, leaves, y, emit, generator, compact)

    __call__ = model

    def _model_plates(self, n, x, leaves, y, emit, generator, compact) -> dict[str, torch.Tensor]:
        lad = self.ladder
        d = lad.depth
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
                    z = pyro.sample("z_0", fn, obs=observed(fn, y_obs))
                    out["z_0"] = z
                    for l in range(1, d + 1):
                        enter(l)
                        row = self.region_index[l] * lad.events[l - 1] + z
                        fn = IndexedCategorical(self.level_tables[l], row, generator, compact)
                        z = pyro.sample(f"z_{l}", fn, obs=observed(fn, leaves_obs) if l == d else None)
                        out[f"z_{l}"] = z
                else:
                    for l in range(1, d + 1):
                        enter(l)
                    fn = IndexedCategorical(self.leaf_table, self.region_index[d], generator, compact)
                    out[f"z_{d}"] = pyro.sample(f"z_{d}", fn, obs=observed(fn, leaves_obs))
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
                        _label_factor(out["z_0"], y_obs)
            finally:
                # after an error, leave the plates still open so Pyro's plate dims are freed
                while open_plates:
                    open_plates.pop().__exit__(None, None, None)
        return out

    def _model_groups(self, n, x, leaves, y, emit, generator, compact) -> dict[str, torch.Tensor]:
        g = self.ladder
        d = g.depth
        out: dict[str, torch.Tensor] = {}
        vals: list[list[torch.Tensor] | None] = [None] * (d + 1)
        order = range(d + 1) if g.mode == TOPDOWN else range(d, -1, -1)
        with pyro.plate("data", n, dim=-2):
            for l in order:
                vals[l] = []
                for j, idx in enumerate(self.groups[l]):
                    name = self.site_name(l, j)
                    table, base = self._tables[l][j], self._base[l][j]
                    obs = None if l < d or leaves is None else leaves[:, list(idx)]
                    with self._group_plate(l, j, len(idx)):
                        if g.mode == TOPDOWN or l == d:
                            if g.mode == TOPDOWN and l > 0:
                                row = base + self._code(vals[l - 1], l - 1, [g.parents[l][i] for i in idx],
                                                        g.parent_sizes(l, idx[0]))
                            else:
                                row = base
                                if l == 0 and y is not None:
                                    obs = y.reshape(n, 1)
                            fn = IndexedCategorical(table, row, generator, compact)
                            z = pyro.sample(name, fn, obs=observed(fn, obs))
                        else:
                            code = self._code(vals[l + 1], l + 1, [g.children[l][i] for i in idx],
                                              g.child_sizes(l, idx[0]))
                            z = Vindex(table)[base, code]
                            deterministic_site(name, z)
                    vals[l].append(z)
                    out[name] = z
            if g.mode != TOPDOWN and y is not None:
                _label_factor(out[self.site_name(0, 0)], y.reshape(n, 1))
            if x is not None or emit:
                leaf_z = self._gather(vals[d], d, range(g.num_regions[d]))
                with pyro.plate("leaves", g.num_regions[d], dim=-1):
                    out["x"] = pyro.sample("x", EmissionDistribution(g.emission, leaf_z, generator), obs=x)
        return out

    def _group_plate(self, level: int, group: int, size: int):
        if self.group_regions:
            return pyro.plate(f"level_{level}_g{group}", size, dim=-1)
        return contextlib.nullcontext()

    def _gather(self, values: list[torch.Tensor], level: int, regions) -> torch.Tensor:
        """Events of ``regions`` of ``level`` from that level's group values ``(..., N', G_j)``: ``(..., N', len)``."""
        where = self.where[level]
        srcs = sorted({where[i][0] for i in regions})
        for j in srcs:
            if values[j].shape[-1] != len(self.groups[level][j]):
                raise ValueError(f"site {self.site_name(level, j)!r}: its value has {values[j].shape[-1]} column(s) "
                                 f"for {len(self.groups[level][j])} regions (enumerated?): a vectorised group "
                                 "cannot be enumerated when other sites read single regions of it; build the "
                                 "model with group_regions=False to enumerate")
        parts = [values[j].expand(*values[j].shape[:-1], len(self.groups[level][j])) for j in srcs]
        if len(parts) == 1:
            cat, start = parts[0], {srcs[0]: 0}
        else:
            batch = torch.broadcast_shapes(*(p.shape[:-1] for p in parts))
            cat = torch.cat([p.expand(*batch, p.shape[-1]) for p in parts], -1)
            start, pos = {}, 0
            for j, p in zip(srcs, parts, strict=True):
                start[j], pos = pos, pos + p.shape[-1]
        local = [start[where[i][0]] + where[i][1] for i in regions]
        if local == list(range(cat.shape[-1])):
            return cat
        return cat.index_select(-1, torch.tensor(local, dtype=torch.int64, device=cat.device))

    def _code(self, values: list[torch.Tensor], level: int, sources: list[tuple[int, ...]], sizes) -> torch.Tensor:
        """Mixed-radix code of the events of ``sources[c]`` (regions of ``level``) for every column c."""
        code = None
        for k, m in enumerate(sizes):
            z = self._gather(values, level, [src[k] for src in sources]).long()
            code = z if code is None else code * int(m) + z
        return code

    def condition_on(self, y: torch.Tensor | None = None, x: torch.Tensor | None = None,
                     leaves: torch.Tensor | None = None):
        """:meth:`model` conditioned on data in the flat dataset layout, ready for ``Predictive``,
        ``infer_discrete`` and ``TraceEnum_ELBO`` (both layouts).

        The sites of :meth:`model` have layout-shaped values (plates: ``"z_0"`` ``(N, 1, ..., 1)``, ``"x"``
        ``(N, b_0, ..., b_{d-1}, dim)``; groups: ``(N, G_j)`` and ``(N, R_d, dim)``); this helper takes the
        shapes a dataset holds and reshapes them, checking every shape first (a ``ValueError`` naming the
        argument and the expected shape instead of a broadcasting error deep inside Pyro).

        - top-down ladders: ``y`` is the observed value of the label site (``"z_0"`` / ``"z_0_g0"``: the same
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
        n, given, y, x, leaves = check_condition_data(self.ladder, y, x, leaves)
        y = None if y is None else y.to(device=self.device, dtype=torch.long)

        def conditioned(*, emit: bool = True, generator: torch.Generator | BlockRNG | None = None,
                        compact: bool = False) -> dict[str, torch.Tensor]:
            return self.model(n, x=x, leaves=leaves, y=y, emit=emit, generator=generator, compact=compact)

        conditioned.__doc__ = f"LadderModel.model conditioned on {given} ({n} examples)."
        return conditioned

    # ------------------------------------------------------------------ values <-> event matrix
    def flatten(self, values: dict[str, torch.Tensor]) -> torch.Tensor:
        """Stack the site values of one model call into the dataset layout ``(N, total_regions)`` (global order;
        plates: in the sites' dtype; groups: :meth:`to_z`)."""
        if self.layout == GROUPS:
            return self.to_z(values)
        lad = self.ladder
        n = values["z_0"].shape[0]
        return torch.cat([values[f"z_{l}"].reshape(n, lad.num_regions[l]) for l in range(lad.depth + 1)], dim=1)

    def to_z(self, values: dict[str, torch.Tensor]) -> torch.Tensor:
        """The event matrix from site values: ``(rows, total_regions)`` int64 in global region order.

        ``values`` maps every event site of :meth:`site_names` (topdown: the sample sites; bottomup: the leaves
        and the deterministic parents, which ``Predictive`` returns too) to its value: a model's return value
        or trace (``lead = ()``) or ``Predictive`` output (``lead = (num_samples,)``), with the layout's shape
        after ``lead`` (plates: ``(N, b_0, ..., b_{l-1}, 1, ..., 1)``; groups: ``(N, G_j)``).  Leading dims are
        flattened into rows, sample-major: ``rows = prod(lead) * N``.
        """
        g = self.ladder
        missing = [s for s in self.site_names() if s not in values]
        if missing:
            raise ValueError(f"values: missing sites {missing[:6]} (bottomup parents are deterministic sites: "
                             "keep them in Predictive's return_sites)")
        first = values[self.site_name(0, 0)]
        off = g.level_offsets
        if self.layout == PLATES:
            d = g.depth
            lead_n = first.shape[: first.dim() - d]
            parts = [values[f"z_{l}"].expand(*lead_n, *g.branching[:l], *([1] * (d - l))).reshape(-1, g.num_regions[l])
                     for l in range(d + 1)]
            return torch.cat([p.long() for p in parts], dim=1)
        lead_n = first.shape[:-1]
        z = torch.empty(math.prod(lead_n), g.total_regions, dtype=torch.int64, device=first.device)
        for l, groups in enumerate(self.groups):
            for j, idx in enumerate(groups):
                v = values[self.site_name(l, j)]
                v = v.expand(*lead_n, len(idx)).reshape(-1, len(idx))
                z[:, [off[l] + i for i in idx]] = v.long()
        return z

    def site_values(self, z: torch.Tensor, *, deterministic: bool = False) -> dict[str, torch.Tensor]:
        """Site values of an event matrix ``(N, total_regions)`` as int64 on the model's device (plates:
        ``{"z_l": (N, b_0, ..., b_{l-1}, 1, ..., 1)}``; groups: ``{"z_{l}_g{j}": (N, G_j)}``), e.g. for
        ``poutine.condition(model.model, data=...)``; the deterministic bottomup parents only when asked."""
        g = self.ladder
        if not isinstance(z, torch.Tensor) or z.dim() != 2 or z.shape[1] != g.total_regions:
            raise ValueError(f"z: expected an (N, {g.total_regions}) tensor, got "
                             f"{tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__}")
        off = g.level_offsets
        names = set(self.site_names() if deterministic else self.sample_site_names())
        if self.layout == PLATES:
            d, n = g.depth, z.shape[0]
            return {f"z_{l}": z[:, off[l]: off[l + 1]].long().to(self.device)
                    .reshape(n, *g.branching[:l], *([1] * (d - l)))
                    for l in range(d + 1) if f"z_{l}" in names}
        return {self.site_name(l, j): z[:, [off[l] + i for i in idx]].long().to(self.device)
                for l, groups in enumerate(self.groups) for j, idx in enumerate(groups)
                if self.site_name(l, j) in names}

    # ------------------------------------------------------------------ plain reference model
    def _plain_tables(self) -> dict:
        if self._plain is None:
            lad, dev = self.ladder, self.device
            if lad.mode == TOPDOWN:
                self._plain = {"prior": lad.prior.to(dev),
                               "tables": [[t.to(dev) for t in lvl] for lvl in lad.region_tables]}
            else:
                self._plain = {"leaf_priors": [p.to(dev) for p in lad.leaf_priors],
                               "lookups": [[t.to(dev) for t in lvl] for lvl in lad.lookups]}
        return self._plain

    def plain_model(self, num_examples: int | None = None, x: torch.Tensor | None = None, *,
                    emit: bool = True) -> dict[str, torch.Tensor]:
        """One ``dist.Categorical`` site ``"z_<g>"`` per region g (global order) under one data plate
        (``dim=-1``), for any ladder and either layout.

        This is the ladder as a Pyro user first writes it: no shared tables, no plates over
        regions; a region's row (top-down) or lookup entry (bottom-up) is picked by the mixed-radix code of
        its parents' (children's) events.  It is enumerable in both modes (bottom-up parents are Categorical
        with a one-hot row picked by the lookup table; ``TraceEnum_ELBO(max_plate_nesting=1)``,
        ``infer_discrete(first_available_dim=-2)``), which makes it the reference for exact inference on small
        ladders, and the baseline of the sampling benchmark.  Leaf inputs are sites ``"x_<r>"`` (leaf region r).
        """
        lad = self.ladder
        n = check_num_examples(num_examples, x, None, lad)
        tabs = self._plain_tables()
        z: dict[int, torch.Tensor] = {}
        off, ev = lad.level_offsets, lad.region_events
        d = lad.depth

        def code_of(level, links):  # mixed radix, first link most significant (one link: its event itself)
            code = None
            for c in links:
                code = z[off[level] + c] if code is None else code * ev[level][c] + z[off[level] + c]
            return code

        with pyro.plate("data", n, dim=-1):
            if lad.mode == TOPDOWN:
                z[0] = pyro.sample("z_0", dist.Categorical(probs=tabs["prior"]))
                for l in range(1, d + 1):
                    for i in range(lad.num_regions[l]):
                        probs = Vindex(tabs["tables"][l][i])[code_of(l - 1, lad.parents[l][i]), :]
                        z[off[l] + i] = pyro.sample(f"z_{off[l] + i}", dist.Categorical(probs=probs))
            else:
                for i in range(lad.num_regions[d]):
                    z[off[d] + i] = pyro.sample(f"z_{off[d] + i}", dist.Categorical(probs=tabs["leaf_priors"][i]))
                for l in range(d - 1, -1, -1):
                    for i in range(lad.num_regions[l]):
                        event = tabs["lookups"][l][i][code_of(l + 1, lad.children[l][i])]
                        z[off[l] + i] = pyro.sample(f"z_{off[l] + i}", dist.Categorical(
                            probs=F.one_hot(event, ev[l][i]).to(torch.float64)))
            if x is not None or emit:
                em = lad.emission
                for i in range(lad.num_regions[d]):
                    obs = None if x is None else x[:, i]
                    pyro.sample(f"x_{i}", EmissionDistribution(SingleRegion(em, i), z[off[d] + i]), obs=obs)
        return {f"z_{g}": v for g, v in z.items()}


def _label_factor(z0: torch.Tensor, y: torch.Tensor) -> None:
    """The factor site ``"z_0_observed"`` = log 1[z_0 = y] (0 or -inf, float64) of a bottom-up ladder."""
    zero = torch.zeros((), dtype=torch.float64, device=z0.device)
    pyro.factor("z_0_observed", torch.where(z0 == y.to(z0.device), zero, -torch.inf))
