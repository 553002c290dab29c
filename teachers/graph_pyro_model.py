"""A :class:`~teachers.graph_ladder.GraphLadder` as a Pyro model (issue 17).

Sites and plates of :meth:`GraphLadderModel.model`::

    plate "data" (N, dim -2)
      per level l, per group j:  plate "level_{l}_g{j}" (G_j, dim -1)    site "z_{l}_g{j}": (N, G_j)
      plate "leaves" (R_d, dim -1)                                        site "x": (N, R_d, dim)

**Groups.**  ``model.groups[l][j]`` is the tuple of region indices (within level ``l``) of group ``j``;
column ``c`` of site ``"z_{l}_g{j}"`` is region ``groups[l][j][c]``, i.e. global region
``level_offsets[l] + groups[l][j][c]``.  By default the groups are the signature groups of
:func:`teachers.graph_sampling.signature_groups` (topdown: same parent event counts and m; bottomup:
same child event counts), each sampled with one vectorised site.  With ``group_regions=False`` every
region is its own group (``groups[l][i] == (i,)``, so ``"z_{l}_g{i}"`` is region ``l.i``, shape
``(N, 1)``) and no region plates are opened: that is the form to *enumerate* (``config_enumerate`` +
``TraceEnum_ELBO(max_plate_nesting=2)``), because in a DAG a region reads events of *several* plate
elements of the level above, which Pyro's plate semantics cannot express for enumerated variables (it
refuses such a model with a plate-nesting ``ValueError``).  Either form samples, traces and conditions.
:meth:`GraphLadderModel.to_z` maps site values (a model's return value or ``Predictive`` output) back to
the ``(N, total_regions)`` event matrix and :meth:`GraphLadderModel.site_values` does the reverse (for
``poutine.condition``).

**Modes.**  topdown: ``"z_0_g0"`` ~ prior, then each group draws ``Categorical(Vindex(T)[g, code, :])``
from its stacked tables ``T`` ``(G, rows, m)`` at the mixed-radix code of its parents' events (first
parent most significant).  bottomup: the leaves are sample sites (their priors); every region above is
deterministic (the lookup of its children's code; ``pyro.deterministic``'s form: an observed ``Delta``
site flagged ``_deterministic``), so it adds nothing to the log-density; those sites record float64 values
(exact integers: an int64 or masked ``Delta`` breaks ``TraceEnum_ELBO``), while the model's return value
holds them as int64.  The
leaves emit ``"x"`` through :class:`teachers.pyro_model.EmissionDistribution` (any emission).
"""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import torch
from pyro.ops.indexing import Vindex

from .graph_ladder import GraphLadder
from .graph_sampling import signature_groups
from .ladder import TOPDOWN
from .pyro_model import EmissionDistribution

__all__ = ["GraphLadderModel"]


class GraphLadderModel:
    """Pyro models of a :class:`~teachers.graph_ladder.GraphLadder` (module docstring).

    :param g: the graph ladder.
    :param device: device of the tables (and of sampled values).
    :param group_regions: one vectorised site per signature group (default), or one site per region
        (``False``: the enumerable form).
    :ivar groups: ``groups[l][j]``: region indices of site ``"z_{l}_g{j}"``.
    :ivar max_plate_nesting: 2 (data and region plates), for ``TraceEnum_ELBO`` and ``infer_discrete``.
    """

    max_plate_nesting = 2

    def __init__(self, g: GraphLadder, device: torch.device | str | None = None, *, group_regions: bool = True):
        if not isinstance(g, GraphLadder):
            raise TypeError(f"g: expected a GraphLadder, got {type(g).__name__}")
        self.graph = g
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.group_regions = bool(group_regions)
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
        dev = self.device
        self._tables: list[list[torch.Tensor]] = []
        for l, groups in enumerate(self.groups):
            row = []
            for idx in groups:
                if g.mode == TOPDOWN:
                    if l == 0:
                        row.append(g.prior.to(dev, torch.float64)[None, None])  # (1, 1, m_0)
                    else:
                        row.append(torch.stack([g.tables[l][i] for i in idx]).to(dev, torch.float64))
                elif l == g.depth:
                    row.append(torch.stack([g.leaf_priors[i] for i in idx]).to(dev, torch.float64))  # (G, m)
                else:
                    row.append(torch.stack([g.lookups[l][i] for i in idx]).to(dev))  # (G, prod child m)
            self._tables.append(row)

    # ------------------------------------------------------------------ naming
    @staticmethod
    def site_name(level: int, group: int) -> str:
        """``"z_{level}_g{group}"``."""
        return f"z_{level}_g{group}"

    def site_names(self) -> list[str]:
        """Every event site, level by level (topdown order), group by group."""
        return [self.site_name(l, j) for l, groups in enumerate(self.groups) for j in range(len(groups))]

    def sample_site_names(self) -> list[str]:
        """The event sites that are random (topdown: all; bottomup: the leaves; the rest are deterministic)."""
        if self.graph.mode == TOPDOWN:
            return self.site_names()
        d = self.graph.depth
        return [self.site_name(d, j) for j in range(len(self.groups[d]))]

    def regions_of(self, site: str) -> tuple[int, tuple[int, ...]]:
        """``(level, region indices)`` of the columns of an event site."""
        try:
            lv, gr = site[2:].split("_g")
            l, j = int(lv), int(gr)
            return l, self.groups[l][j]
        except (ValueError, IndexError):
            raise ValueError(f"site: expected 'z_<level>_g<group>' of this model, got {site!r}") from None

    # ------------------------------------------------------------------ layout helpers
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

    # ------------------------------------------------------------------ the model
    def model(self, num_examples: int | None = None, x: torch.Tensor | None = None, *,
              emit: bool = True) -> dict[str, torch.Tensor]:
        """The graph ladder as a Pyro model (sites in the module docstring).

        :param num_examples: N (inferred from ``x`` when given).
        :param x: optional observed inputs ``(N, R_d, dim)`` (site ``"x"``).
        :param emit: include the ``"x"`` site when x is not observed.
        :returns: ``{"z_{l}_g{j}": (N, G_j) values, ..., "x": ...}``.
        """
        g = self.graph
        sizes = {}
        if num_examples is not None:
            if isinstance(num_examples, bool) or not isinstance(num_examples, int) or num_examples <= 0:
                raise ValueError(f"num_examples: expected a positive integer, got {num_examples!r}")
            sizes["num_examples"] = num_examples
        if x is not None:
            g.emission.check_input(x)
            sizes["x"] = x.shape[0]
        if not sizes:
            raise ValueError("num_examples: give num_examples or x")
        if len(set(sizes.values())) > 1:
            raise ValueError(f"num_examples: inconsistent sizes {sizes}")
        n = next(iter(sizes.values()))
        d = g.depth
        out: dict[str, torch.Tensor] = {}
        vals: list[list[torch.Tensor] | None] = [None] * (d + 1)
        order = range(d + 1) if g.mode == TOPDOWN else range(d, -1, -1)
        with pyro.plate("data", n, dim=-2):
            for l in order:
                vals[l] = []
                for j, idx in enumerate(self.groups[l]):
                    name = self.site_name(l, j)
                    gsize = len(idx)
                    ar = torch.arange(gsize, device=self.device)
                    table = self._tables[l][j]
                    with self._group_plate(l, j, gsize):
                        if g.mode == TOPDOWN:
                            if l == 0:
                                probs = table[0]  # (1, m_0)
                            else:
                                psizes = g.parent_sizes(l, idx[0])
                                code = self._code(vals[l - 1], l - 1, [g.parents[l][i] for i in idx], psizes)
                                probs = Vindex(table)[ar, code, :]
                            z = pyro.sample(name, dist.Categorical(probs=probs))
                        elif l == d:
                            z = pyro.sample(name, dist.Categorical(probs=table))
                        else:
                            csizes = g.child_sizes(l, idx[0])
                            code = self._code(vals[l + 1], l + 1, [g.children[l][i] for i in idx], csizes)
                            z = Vindex(table)[ar, code]
                            _deterministic(name, z)
                    vals[l].append(z)
                    out[name] = z
            if x is not None or emit:
                leaves = self._gather(vals[d], d, range(g.num_regions[d]))
                with pyro.plate("leaves", g.num_regions[d], dim=-1):
                    out["x"] = pyro.sample("x", EmissionDistribution(g.emission, leaves), obs=x)
        return out

    __call__ = model

    def _group_plate(self, level: int, group: int, size: int):
        if self.group_regions:
            return pyro.plate(f"level_{level}_g{group}", size, dim=-1)
        return _NullContext()

    # ------------------------------------------------------------------ values <-> event matrix
    def to_z(self, values: dict[str, torch.Tensor]) -> torch.Tensor:
        """The event matrix from site values: ``(rows, total_regions)`` int64 in global region order.

        ``values`` maps every ``"z_{l}_g{j}"`` site (topdown: the sample sites; bottomup: the leaves and
        the deterministic parents, which ``Predictive`` returns too) to ``(*lead, N, G_j)`` tensors: a
        model's return value (``lead = ()``) or ``Predictive`` output (``lead = (num_samples,)``).  Leading
        dims are flattened into rows, sample-major: ``rows = prod(lead) * N``.
        """
        g = self.graph
        missing = [s for s in self.site_names() if s not in values]
        if missing:
            raise ValueError(f"values: missing sites {missing[:6]} (bottomup parents are deterministic sites: "
                             "keep them in Predictive's return_sites)")
        first = values[self.site_name(0, 0)]
        lead_n = first.shape[:-1]
        off = g.level_offsets
        z = torch.empty(math.prod(lead_n), g.total_regions, dtype=torch.int64, device=first.device)
        for l, groups in enumerate(self.groups):
            for j, idx in enumerate(groups):
                v = values[self.site_name(l, j)]
                v = v.expand(*lead_n, len(idx)).reshape(-1, len(idx))
                z[:, [off[l] + i for i in idx]] = v.long()
        return z

    def site_values(self, z: torch.Tensor, *, deterministic: bool = False) -> dict[str, torch.Tensor]:
        """Site values ``{"z_{l}_g{j}": (N, G_j) int64}`` of an event matrix ``(N, total_regions)``, e.g.
        for ``poutine.condition(model.model, data=...)``; the deterministic bottomup parents only when asked."""
        g = self.graph
        if not isinstance(z, torch.Tensor) or z.dim() != 2 or z.shape[1] != g.total_regions:
            raise ValueError(f"z: expected an (N, {g.total_regions}) tensor, got "
                             f"{tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__}")
        off = g.level_offsets
        names = set(self.site_names() if deterministic else self.sample_site_names())
        return {self.site_name(l, j): z[:, [off[l] + i for i in idx]].long().to(self.device)
                for l, groups in enumerate(self.groups) for j, idx in enumerate(groups)
                if self.site_name(l, j) in names}


def _deterministic(name: str, value: torch.Tensor) -> torch.Tensor:
    """``pyro.deterministic(name, value)`` recorded as float64 and without its mask: the site's
    log-density is an exact float64 zero (``pyro.deterministic``'s mask gives a default-dtype zero and an
    int64 value an int64 one, which ``TraceEnum_ELBO`` cannot contract with float64 probabilities)."""
    v = value.to(torch.float64)
    return pyro.sample(name, dist.Delta(v, event_dim=0), obs=v, infer={"_deterministic": True})


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
