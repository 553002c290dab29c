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
``first_available_dim=-(d + 2)``).  Where the regions of level l draw their children jointly
(:mod:`teachers.productions`), a site ``"prod_l"`` under the plates of level l draws each region's production
(an :class:`~teachers.categorical.IndexedCategorical` over its event's row of probabilities) and ``"z_{l+1}"``
is a latent :class:`~teachers.pyro_sites.PointMassCategorical` at ``Vindex(rules)[region, z_l, prod_l, place]``
(place = the child's index in plate ``level_{l+1}``): ``get_model_relations`` gives ``z_{l+1}`` the parents
``z_l`` and ``prod_l``, and the whole model enumerates (the production over its K entries, each child over its
events with a factor of 0 or -inf).  The ``"groups"`` layout refuses productions (a ``ValueError``).
Bottom-up, each level above the leaves is a latent
:class:`~teachers.pyro_sites.PointMassCategorical` site at the lookup of the level below; because a parent
depends on *all* of its children, which live in one plate, that form can be sampled, traced, conditioned and
inspected (``pyro.infer.inspect.get_model_relations``, ``pyro.render_model``) but not enumerated: enumeration
raises a ``ValueError`` naming the form that enumerates, ``LadderModel(ladder, group_regions=False)``.

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
regions above the leaves are latent :class:`~teachers.pyro_sites.PointMassCategorical` sites (all the mass on
the lookup of the children's events; no random number drawn), enumerated like the leaves, each adding a factor
of 0 or -inf.

In every layout, Pyro's provenance tracking sees the ladder's own structure: ``get_model_relations`` gives each
event site the sites of its regions' parents (top-down) or children (bottom-up), ``"x"`` every leaf site, and
lists only data given to the model as observed (``tests/test_pyro_tools.py``).

Both layouts draw every random event with :class:`~teachers.categorical.IndexedCategorical` (alias
sampling; ``log_prob`` and ``enumerate_support`` for ``TraceEnum_ELBO`` / ``infer_discrete``), emit x through
:class:`~teachers.pyro_sites.EmissionDistribution` and share one layout-free API (:meth:`LadderModel.condition_on`,
``site_names``, ``regions_of``, ``to_z``, ``site_values``).  :meth:`LadderModel.plain_model` is the ladder as a
Pyro user first writes it (one ``dist.Categorical`` site per region: the reference of exact inference on small
ladders); exact inference for large ladders is :mod:`inference`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.ops.indexing import Vindex

from .categorical import BlockRNG, CategoricalTable, IndexedCategorical
from .ladder import TOPDOWN, Ladder, _check_ladder, _joint_law, _known
from .pyro_sites import (
    EmissionDistribution,
    PointMassCategorical,
    SingleRegion,
    check_condition_data,
    check_labels,
    check_num_examples,
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
    :ivar groups: ``groups[l][j]``: region indices of site ``"z_{l}_g{j}"`` (plates: one group per level).
    """

    # plates layout, top-down: level_tables[l] for l >= 1 (None at level 0, whose table is root_table)
    level_tables: list[CategoricalTable | None]
    # plain_model's tables on the device, built on first use: the prior (m_0,) top-down or the leaves' priors
    # bottom-up, and the regions' tables or lookups per level, and per level (rules, probs) (R_l, m_l, K[, b]) where
    # its regions draw their children jointly
    _plain: tuple[torch.Tensor | list[torch.Tensor], list[list[torch.Tensor]],
                  list[tuple[torch.Tensor, torch.Tensor] | None]] | None

    def __init__(self, ladder: Ladder, device: torch.device | str | None = None, *, layout: str | None = None,
                 group_regions: bool | None = None) -> None:
        _joint_law(_check_ladder(ladder), "LadderModel")
        if layout is None:
            layout = PLATES if ladder.is_uniform() and group_regions is None else GROUPS
        if layout not in LAYOUTS:
            raise ValueError(f"layout: expected 'plates' or 'groups', got {layout!r}")
        if layout == PLATES and not ladder.is_uniform():
            raise ValueError("layout: 'plates' (nested plates mirroring the tree) needs a uniform tree "
                             "(ladder.is_uniform()); this ladder has several parents per region or uneven "
                             "branching or events: use layout='groups'")
        if layout == GROUPS and ladder.productions is not None:
            raise ValueError(f"layout: 'groups' does not take productions yet (this ladder draws the children of "
                             f"levels {list(ladder.joint_levels())} jointly); use layout='plates' (the default on "
                             "its uniform tree) or plain_model")
        if layout == PLATES and group_regions is not None:
            raise ValueError("group_regions: only for layout='groups' (grouped sites); the 'plates' layout has "
                             "one site per level")
        self.ladder = ladder
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.layout = layout
        self._plain = None  # the tables of plain_model, built on first use
        if layout == PLATES:
            self.max_plate_nesting = ladder.depth + 1
            self._init_plates()
        else:
            self.max_plate_nesting = 2
            self.group_regions = True if group_regions is None else bool(group_regions)
            self._init_groups()

    def _init_plates(self) -> None:
        ladder, d = self.ladder, self.ladder.depth
        self.groups = [[tuple(range(n))] for n in ladder.num_regions]  # one site per level
        # region_index[l]: index within level l, shaped like the level's plates (mixed radix
        # over (b_0, ..., b_{l-1}) equals the breadth-first numbering).
        self.region_index = [torch.arange(n, device=self.device, dtype=torch.int32).reshape(self._site_shape(l, ()))
                             for l, n in enumerate(ladder.num_regions)]
        if ladder.mode == TOPDOWN:
            self.root_table = CategoricalTable(_known(ladder.prior, "prior", "a top-down ladder")[None],
                                               device=self.device)
            tables = _known(ladder.tables, "tables", "a top-down ladder")
            self.level_tables = [None, *(CategoricalTable(_known(t, f"tables[{l - 1}]", "a uniform tree")
                                                          .reshape(-1, ladder.events[l]), device=self.device)
                                         for l, t in enumerate(tables, start=1))]
            # level_prods[l]: where the regions of level l draw their children jointly, (the CategoricalTable of
            # the (R_l * m_l, K) production probabilities, the (R_l, m_l, K, b) rules, the places of the children
            # shaped for plate level_{l+1}), else None
            self.level_prods = [None if p is None else (
                CategoricalTable(p.region_probs(ladder.num_regions[l]).reshape(-1, p.num_productions),
                                 device=self.device),
                p.region_rules(ladder.num_regions[l]).to(self.device),
                torch.arange(p.arity, device=self.device).reshape(-1, *([1] * (d - l - 1))))
                for l, p in enumerate(ladder.productions or [None] * d)]
        else:
            self.leaf_table = CategoricalTable(_known(ladder.leaf_prior, "leaf_prior", "a bottom-up ladder"),
                                               device=self.device)
            self.lookup = [_known(t, f"lookup[{l}]", "a uniform tree").to(self.device)
                           for l, t in enumerate(_known(ladder.lookup, "lookup", "a bottom-up ladder"))]
            m, b = ladder.events, self._tree_branching
            self.radix = [m[l + 1] ** torch.arange(b[l] - 1, -1, -1, device=self.device) for l in range(d)]

    def _init_groups(self) -> None:
        g = self.ladder
        if self.group_regions:
            self.groups = [[idx for _key, idx in signature_groups(g, l)] for l in range(g.depth + 1)]
        else:
            self.groups = [[(i,) for i in range(n)] for n in g.num_regions]
        # where[l][i] = (group, column) of region i of level l
        self.where = [{i: (j, c) for j, idx in enumerate(groups) for c, i in enumerate(idx)} for groups in self.groups]
        self._tables = [[self._group_table(l, idx) for idx in groups] for l, groups in enumerate(self.groups)]

    def _group_table(self, l: int, idx: tuple[int, ...]) -> tuple:
        """``(table, first row of each column)`` of the group ``idx`` of level ``l``: topdown the
        CategoricalTable of the stacked ``(G * rows, m)`` rows; bottomup the leaves' CategoricalTable or the
        stacked ``(G, prod child m)`` lookups."""
        g, dev = self.ladder, self.device
        ar = torch.arange(len(idx), device=dev)
        if g.mode != TOPDOWN:
            if l == g.depth:
                leaf_priors = _known(g.leaf_priors, "leaf_priors", "a bottom-up ladder")
                return CategoricalTable(torch.stack([leaf_priors[i] for i in idx]), device=dev), ar
            lookups = _known(g.lookups, "lookups", "a bottom-up ladder")[l]
            return torch.stack([lookups[i] for i in idx]).to(dev), ar
        rows = ([_known(g.prior, "prior", "a top-down ladder")[None]] if l == 0
                else [_known(g.region_tables, "region_tables", "a top-down ladder")[l][i] for i in idx])
        stacked = torch.stack(rows).to(torch.float64)  # (G, rows, m)
        return CategoricalTable(stacked.reshape(-1, stacked.shape[-1]), device=dev), ar * stacked.shape[1]

    @property
    def _tree_branching(self) -> tuple[int, ...]:
        """The ladder's branching, which the plates layout (checked in ``__init__``) has: a uniform tree."""
        return _known(self.ladder.branching, "branching", "a uniform tree")

    def _require_plates(self, what: str) -> None:
        if self.layout != PLATES:
            raise ValueError(f"{what}: only for layout='plates' (the nested plates of a uniform tree); this "
                             f"LadderModel has layout={self.layout!r}")

    # ------------------------------------------------------------------ naming (both layouts)
    def site_name(self, level: int, group: int = 0) -> str:
        """The event site of ``level`` (and ``group``): ``"z_{level}"`` (plates) or ``"z_{level}_g{group}"``."""
        if self.layout == GROUPS:
            return f"z_{level}_g{group}"
        if group != 0:
            raise ValueError(f"group: the 'plates' layout has one site per level (group 0), got {group!r}")
        return f"z_{level}"

    def _sites(self) -> list[Any]:
        """``(site name, level, region indices)`` of every event site, in :meth:`site_names` order."""
        return [(self.site_name(l, j), l, idx) for l, groups in enumerate(self.groups) for j, idx in enumerate(groups)]

    def site_names(self) -> list[str]:
        """Every event site, level by level (topdown order), group by group."""
        return [name for name, _l, _idx in self._sites()]

    def sample_site_names(self) -> list[str]:
        """The event sites that are random (topdown: all but the children of regions that draw them jointly,
        which are point masses at their place in their parent's production; bottomup: the leaves; the regions
        above them are point masses at the lookup of their children's events)."""
        d, joint = self.ladder.depth, self.ladder.joint_levels()
        return [name for name, l, _idx in self._sites()
                if (self.ladder.mode == TOPDOWN and l - 1 not in joint) or (l == d and self.ladder.mode != TOPDOWN)]

    def production_site(self, level: int) -> str:
        """The site of the productions that the regions of ``level`` draw (their children jointly;
        :mod:`teachers.productions`): ``"prod_{level}"``, under the plates of ``level`` (plates layout)."""
        self._require_plates("production_site")
        return f"prod_{level}"

    def production_site_names(self) -> list[str]:
        """The production sites of :meth:`model` (one per level whose regions draw their children jointly)."""
        return [self.production_site(l) for l in self.ladder.joint_levels()] if self.layout == PLATES else []

    def regions_of(self, site: str) -> tuple[int, tuple[int, ...]]:
        """``(level, region indices)`` of the columns of an event site (plates: ``"z_l"`` covers level l)."""
        for name, l, idx in self._sites():
            if name == site:
                return l, idx
        form = "'z_<level>'" if self.layout == PLATES else "'z_<level>_g<group>'"
        raise ValueError(f"site: expected {form} of this model, got {site!r}")

    def _site_shape(self, level: int, idx: tuple[int, ...]) -> tuple[int, ...]:
        """A site's value shape after ``(..., N)``: plates ``(b_0, ..., b_{l-1}, 1, ..., 1)``, groups ``(G_j,)``."""
        if self.layout == GROUPS:
            return (len(idx),)
        return (*self._tree_branching[:level], *([1] * (self.ladder.depth - level)))

    def _columns(self, level: int, idx: tuple[int, ...]) -> slice | list[int]:
        """Global event-matrix columns of regions ``idx`` of ``level`` (a slice for a plates level)."""
        off = self.ladder.level_offsets
        return slice(off[level], off[level + 1]) if self.layout == PLATES else [off[level] + i for i in idx]

    # ------------------------------------------------------------------ plates-layout helpers
    def plates(self, num_examples: int) -> list:
        """``[data plate, level_1 plate, ..., level_d plate]`` with the dims of the docstring (plates layout)."""
        self._require_plates("plates")
        d = self.ladder.depth
        return [pyro.plate("data", num_examples, dim=-(d + 1))] + [
            pyro.plate(f"level_{l}", self._tree_branching[l - 1], dim=-(d + 1 - l)) for l in range(1, d + 1)]

    def leaf_shape(self, n: int) -> tuple[int, ...]:
        """Shape of the leaf events of ``n`` examples in the nested-plate layout: ``(n, b_0, ..., b_{d-1})``."""
        self._require_plates("leaf_shape")
        return (n, *self._tree_branching)

    def parent_events(self, level: int, child: torch.Tensor) -> torch.Tensor:
        """Bottom-up: events of level ``level`` from its children's events ``(..., R_{l+1})``: ``(..., R_l)``
        (plates layout)."""
        self._require_plates("parent_events")
        lad = self.ladder
        lead = child.shape[:-1]
        b = self._tree_branching[level]
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

    def _model_plates(self, n: int, x: torch.Tensor | None, leaves: torch.Tensor | None, y: torch.Tensor | None,
                      emit: bool, generator: torch.Generator | BlockRNG | None,
                      compact: bool) -> dict[str, torch.Tensor]:
        lad = self.ladder
        d = lad.depth
        leaves_obs = None if leaves is None else leaves.reshape(self.leaf_shape(n))
        x_obs = None if x is None else x.reshape(*self.leaf_shape(n), lad.emission.dim)
        y_obs = None if y is None else y.reshape(n, *([1] * d))
        plates = self.plates(n)
        out: dict[str, torch.Tensor] = {}
        with plates[0]:
            with contextlib.ExitStack() as level_plates:
                if lad.mode == TOPDOWN:
                    fn = IndexedCategorical(self.root_table, torch.zeros((), dtype=torch.int32, device=self.device),
                                            generator, compact)
                    out["z_0"] = pyro.sample("z_0", fn, obs=observed(fn, y_obs))
                for l in range(1, d + 1):
                    joint = self.level_prods[l - 1] if lad.mode == TOPDOWN else None
                    if joint is not None:  # the parents' productions, under the parents' plates
                        prod_table, rules, place = joint
                        parent = out[f"z_{l - 1}"].long()
                        fn = IndexedCategorical(prod_table, self.region_index[l - 1] * lad.events[l - 1] + parent,
                                                generator, compact)
                        k = out[self.production_site(l - 1)] = pyro.sample(self.production_site(l - 1), fn)
                    level_plates.enter_context(plates[l])
                    if joint is not None:  # each child: its place in its parent's production, a point mass
                        value = Vindex(rules)[self.region_index[l - 1].long(), parent, k.long(), place]
                        narrow = torch.uint8 if lad.events[l] <= 256 else torch.int32  # as IndexedCategorical's
                        fn = PointMassCategorical(value.to(narrow) if compact else value, lad.events[l])
                        out[f"z_{l}"] = pyro.sample(f"z_{l}", fn, obs=observed(fn, leaves_obs) if l == d else None)
                    elif lad.mode == TOPDOWN:
                        row = self.region_index[l] * lad.events[l - 1] + out[f"z_{l - 1}"]
                        table = self.level_tables[l]
                        assert table is not None  # l >= 1
                        fn = IndexedCategorical(table, row, generator, compact)
                        out[f"z_{l}"] = pyro.sample(f"z_{l}", fn, obs=observed(fn, leaves_obs) if l == d else None)
                if lad.mode != TOPDOWN:
                    fn = _PlatedLeaves(self.leaf_table, self.region_index[d], generator, compact)
                    out[f"z_{d}"] = pyro.sample(f"z_{d}", fn, obs=observed(fn, leaves_obs))
                if x_obs is not None or emit:
                    out["x"] = pyro.sample("x", EmissionDistribution(lad.emission, out[f"z_{d}"], generator),
                                           obs=x_obs)
            if lad.mode != TOPDOWN:  # the parents, each under the plates of its level
                leaf = out[f"z_{d}"]
                lead = leaf.shape[: leaf.dim() - (d + 1)]  # e.g. Predictive's sample dims
                for l in range(d - 1, -1, -1):
                    # read the children from their own site's value, so that Pyro's provenance tracking
                    # (get_model_relations, render_model) sees z_l depend on z_{l+1}
                    flat = self.parent_events(l, out[f"z_{l + 1}"].reshape(*lead, n, -1))
                    with contextlib.ExitStack() as level_plates:
                        for plate in plates[1: l + 1]:
                            level_plates.enter_context(plate)
                        fn = _PlatedPointMass(flat.reshape(*lead, n, *self._site_shape(l, ())), lad.events[l])
                        out[f"z_{l}"] = pyro.sample(f"z_{l}", fn)
                if y_obs is not None:
                    _label_factor(out["z_0"], y_obs)
        return out

    def _model_groups(self, n: int, x: torch.Tensor | None, leaves: torch.Tensor | None, y: torch.Tensor | None,
                      emit: bool, generator: torch.Generator | BlockRNG | None,
                      compact: bool) -> dict[str, torch.Tensor]:
        g = self.ladder
        d = g.depth
        out: dict[str, torch.Tensor] = {}
        vals: dict[int, list[torch.Tensor]] = {}  # per level, once its sites are drawn
        order = range(d + 1) if g.mode == TOPDOWN else range(d, -1, -1)
        with pyro.plate("data", n, dim=-2):
            for l in order:
                vals[l] = []
                for j, idx in enumerate(self.groups[l]):
                    name = self.site_name(l, j)
                    table, base = self._tables[l][j]
                    obs = None if l < d or leaves is None else leaves[:, list(idx)]
                    with (pyro.plate(f"level_{l}_g{j}", len(idx), dim=-1) if self.group_regions
                          else contextlib.nullcontext()):
                        if g.mode != TOPDOWN and l < d:  # a point mass: the lookup of the children's code
                            code = self._code(vals[l + 1], l + 1, [g.children[l][i] for i in idx],
                                              g.child_sizes(l, idx[0]))
                            m = max(g.region_events[l][i] for i in idx)
                            z = pyro.sample(name, PointMassCategorical(Vindex(table)[base, code], m))
                        else:
                            row = base
                            if g.mode == TOPDOWN and l > 0:
                                row = base + self._code(vals[l - 1], l - 1, [g.parents[l][i] for i in idx],
                                                        g.parent_sizes(l, idx[0]))
                            elif l == 0 and y is not None:
                                obs = y.reshape(n, 1)
                            fn = IndexedCategorical(table, row, generator, compact)
                            z = pyro.sample(name, fn, obs=observed(fn, obs))
                    vals[l].append(z)
                    out[name] = z
            if g.mode != TOPDOWN and y is not None:
                _label_factor(out[self.site_name(0, 0)], y.reshape(n, 1))
            if x is not None or emit:
                leaf_z = self._gather(vals[d], d, range(g.num_regions[d]))
                with pyro.plate("leaves", g.num_regions[d], dim=-1):
                    out["x"] = pyro.sample("x", EmissionDistribution(g.emission, leaf_z, generator), obs=x)
        return out

    def _gather(self, values: list[torch.Tensor], level: int, regions: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """Events of ``regions`` of ``level`` from that level's group values ``(..., N', G_j)``: ``(..., N', len)``."""
        where = self.where[level]
        srcs = sorted({where[i][0] for i in regions})
        for j in srcs:
            if values[j].shape[-1] != len(self.groups[level][j]):
                raise ValueError(f"site {self.site_name(level, j)!r}: its value has {values[j].shape[-1]} column(s) "
                                 f"for {len(self.groups[level][j])} regions (enumerated?): a vectorised group "
                                 "cannot be enumerated when other sites read single regions of it; build the "
                                 "model with group_regions=False to enumerate")
        batch = torch.broadcast_shapes(*(values[j].shape[:-1] for j in srcs))
        parts = [values[j].expand(*batch, len(self.groups[level][j])) for j in srcs]
        cat = parts[0] if len(parts) == 1 else torch.cat(parts, -1)
        start = {j: sum(p.shape[-1] for p in parts[:k]) for k, j in enumerate(srcs)}
        local = [start[where[i][0]] + where[i][1] for i in regions]
        if local == list(range(cat.shape[-1])):
            return cat
        return cat.index_select(-1, torch.tensor(local, dtype=torch.int64, device=cat.device))

    def _code(self, values: list[torch.Tensor], level: int, sources: list[tuple[int, ...]],
              sizes: Sequence[int]) -> torch.Tensor:
        """Mixed-radix code of the events of ``sources[c]`` (regions of ``level``) for every column c."""
        code: torch.Tensor | None = None
        for k, m in enumerate(sizes):
            z = self._gather(values, level, [src[k] for src in sources]).long()
            code = z if code is None else code * int(m) + z
        assert code is not None  # every region links at least one parent or child (sizes is not empty)
        return code

    def condition_on(self, y: torch.Tensor | None = None, x: torch.Tensor | None = None,
                     leaves: torch.Tensor | None = None) -> Callable[..., dict[str, torch.Tensor]]:
        """:meth:`model` conditioned on data in the flat dataset layout, ready for ``Predictive``,
        ``infer_discrete`` and ``TraceEnum_ELBO`` (both layouts).

        The sites of :meth:`model` have layout-shaped values; this helper takes the shapes a dataset holds,
        checks them (a ``ValueError`` naming the argument and the expected shape instead of a broadcasting
        error deep inside Pyro) and reshapes them.  ``y`` is observed as in :meth:`model` (top-down: the label
        site's value, not enumerated; bottom-up: the factor ``"z_0_observed"``, which sampling from the
        conditioned model does not enforce: use the log-density, e.g. importance weights).

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
        n = values["z_0"].shape[0]
        return torch.cat([values[name].reshape(n, len(idx)) for name, _l, idx in self._sites()], dim=1)

    def to_z(self, values: dict[str, torch.Tensor]) -> torch.Tensor:
        """The event matrix from site values: ``(rows, total_regions)`` int64 in global region order.

        ``values`` maps every event site of :meth:`site_names` (topdown: the sample sites; bottomup: the leaves
        and the point-mass parents, which ``Predictive`` returns too) to its value: a model's return value
        or trace (``lead = ()``) or ``Predictive`` output (``lead = (num_samples,)``), with the layout's shape
        after ``lead`` (plates: ``(N, b_0, ..., b_{l-1}, 1, ..., 1)``; groups: ``(N, G_j)``).  Leading dims are
        flattened into rows, sample-major: ``rows = prod(lead) * N``.
        """
        missing = [s for s in self.site_names() if s not in values]
        if missing:
            raise ValueError(f"values: missing sites {missing[:6]} (every event site is needed, bottomup parents "
                             "included: keep them in Predictive's return_sites)")
        first = values[self.site_name(0, 0)]
        lead_n = first.shape[: first.dim() - (self.max_plate_nesting - 1)]
        z = torch.empty(math.prod(lead_n), self.ladder.total_regions, dtype=torch.int64, device=first.device)
        for name, l, idx in self._sites():
            v = values[name].expand(*lead_n, *self._site_shape(l, idx))
            z[:, self._columns(l, idx)] = v.reshape(-1, len(idx)).long()
        return z

    def site_values(self, z: torch.Tensor, *, deterministic: bool = False) -> dict[str, torch.Tensor]:
        """Site values of an event matrix ``(N, total_regions)`` as int64 on the model's device (plates:
        ``{"z_l": (N, b_0, ..., b_{l-1}, 1, ..., 1)}``; groups: ``{"z_{l}_g{j}": (N, G_j)}``), e.g. for
        ``poutine.condition(model.model, data=...)``; the deterministic bottomup parents only when asked."""
        g = self.ladder
        if not isinstance(z, torch.Tensor) or z.dim() != 2 or z.shape[1] != g.total_regions:
            raise ValueError(f"z: expected an (N, {g.total_regions}) tensor, got "
                             f"{tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__}")
        names = set(self.site_names() if deterministic else self.sample_site_names())
        return {name: z[:, self._columns(l, idx)].long().to(self.device).reshape(z.shape[0], *self._site_shape(l, idx))
                for name, l, idx in self._sites() if name in names}

    # ------------------------------------------------------------------ plain reference model
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
        A region g whose children are drawn jointly (:mod:`teachers.productions`) draws its production at the site
        ``"prod_<g>"`` (Categorical over its event's row of probabilities) and each child is a Categorical with a
        one-hot row at its place in that production.
        """
        lad = self.ladder
        n = check_num_examples(num_examples, x, None, lad)
        if self._plain is None:  # the tables on the device, built on first use
            dev, top = self.device, lad.mode == TOPDOWN
            self._plain = (_known(lad.prior, "prior", "a top-down ladder").to(dev) if top
                           else [p.to(dev) for p in _known(lad.leaf_priors, "leaf_priors", "a bottom-up ladder")],
                           [[t.to(dev) for t in lvl]
                            for lvl in (_known(lad.region_tables, "region_tables", "a top-down ladder") if top
                                        else _known(lad.lookups, "lookups", "a bottom-up ladder"))],
                           [None if p is None else (p.region_rules(r).to(dev), p.region_probs(r).to(dev))
                            for p, r in zip(lad.productions or [None] * lad.depth, lad.num_regions, strict=False)])
        first, tables, prods = self._plain
        z: dict[int, torch.Tensor] = {}
        off, ev = lad.level_offsets, lad.region_events
        d = lad.depth

        # mixed radix, first link most significant (one link: its event itself)
        def code_of(level: int, links: Sequence[int]) -> torch.Tensor:
            code: torch.Tensor | None = None
            for c in links:
                code = z[off[level] + c] if code is None else code * ev[level][c] + z[off[level] + c]
            assert code is not None  # every region links at least one parent or child
            return code

        with pyro.plate("data", n, dim=-1):
            if lad.mode == TOPDOWN:
                assert isinstance(first, torch.Tensor)  # top-down: the prior
                z[0] = pyro.sample("z_0", dist.Categorical(probs=first))
                for l in range(1, d + 1):
                    joint = prods[l - 1]
                    for a in range(lad.num_regions[l - 1]) if joint is not None else ():
                        assert joint is not None  # the loop runs only on a level of productions
                        rules, probs = joint[0][a], joint[1][a]  # (m, K, b), (m, K)
                        za = z[off[l - 1] + a]
                        k = pyro.sample(f"prod_{off[l - 1] + a}", dist.Categorical(probs=Vindex(probs)[za, :]))
                        for j, c in enumerate(lad.children[l - 1][a]):
                            event = Vindex(rules[..., j])[za, k]
                            z[off[l] + c] = pyro.sample(f"z_{off[l] + c}", dist.Categorical(
                                probs=F.one_hot(event, ev[l][c]).to(torch.float64)))
                    for i in range(lad.num_regions[l]) if joint is None else ():
                        probs = Vindex(tables[l][i])[code_of(l - 1, lad.parents[l][i]), :]
                        z[off[l] + i] = pyro.sample(f"z_{off[l] + i}", dist.Categorical(probs=probs))
            else:
                for i in range(lad.num_regions[d]):
                    z[off[d] + i] = pyro.sample(f"z_{off[d] + i}", dist.Categorical(probs=first[i]))
                for l in range(d - 1, -1, -1):
                    for i in range(lad.num_regions[l]):
                        event = tables[l][i][code_of(l + 1, lad.children[l][i])]
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


def _refuse_plates_enumeration() -> NoReturn:
    raise ValueError("LadderModel: a bottom-up ladder in layout='plates' cannot be enumerated (each parent is "
                     "the lookup of all its children, which share one plate, and Pyro's plates are independent); "
                     "to enumerate, use LadderModel(ladder, group_regions=False) (layout='groups', one site per "
                     "region, max_plate_nesting=2)")


class _PlatedLeaves(IndexedCategorical):
    """The leaf site of a bottom-up ladder in the ``"plates"`` layout: an :class:`IndexedCategorical` that refuses
    enumeration with a message naming the form that enumerates.

    Each parent is the lookup of *all* its children, which are elements of one plate; Pyro's plates declare
    their elements independent, so enumerating the leaves there would sum over a wrong joint (or fail on a
    reshape deep in the model).  ``enumerate_support`` is what ``TraceEnum_ELBO`` and ``infer_discrete`` call on
    a site configured for enumeration, so refusing there catches every enumeration and nothing else."""

    def enumerate_support(self, expand: bool = True) -> torch.Tensor:
        _refuse_plates_enumeration()


class _PlatedPointMass(PointMassCategorical):
    """A bottom-up parent level in the ``"plates"`` layout: refuses enumeration as :class:`_PlatedLeaves` does
    (with the leaves observed, the next level would otherwise read an enumerated level across its plate)."""

    def enumerate_support(self, expand: bool = True) -> torch.Tensor:
        _refuse_plates_enumeration()
