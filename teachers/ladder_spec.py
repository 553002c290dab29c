"""Spec documents of :class:`teachers.ladder.Ladder` (a mixin): :meth:`~LadderSpecIO.to_dict` (format
``smaso-ladder`` version 2), :meth:`~LadderSpecIO.from_dict` (every spec version, and generator descriptions)
and :meth:`~LadderSpecIO.fingerprint`."""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .regions import parse_region_tree
from .rhm import RHMParams, rhm_rules
from .spec_check import RHM_FIELDS, check_spec
from .validation import TOPDOWN, Factorization, LadderSpecError, _as_float64

if TYPE_CHECKING:
    from .ladder import Ladder

__all__ = ["FORMAT", "GRAPH_FORMAT_V1", "RHM_FIELDS", "SPEC_VERSION", "LadderSpecIO", "rhm_from_dict", "rhm_to_dict"]

FORMAT = "smaso-ladder"
#: Version of the spec :meth:`LadderSpecIO.to_dict` writes: 2 holds trees (``branching``) and region graphs
#: (``parents``) alike; version 1 (trees) and ``smaso-graph-ladder`` version 1 (graphs) still load.
SPEC_VERSION = 2
GRAPH_FORMAT_V1 = "smaso-graph-ladder"


class LadderSpecIO:
    """Serialization of a ladder (see the module docstring)."""

    def fingerprint(self: Any) -> str:
        """SHA-256 of the whole specification (structure, mode, emission and every table's dtype, shape and
        bytes): equal for two ladders exactly when they define the same teacher, the check used before
        counts or statistics of two samples are merged."""
        key = self.state_key()  # (an in-place edit of a table changes the fingerprint)
        cached = self._cache.get("fingerprint")
        if cached is not None and cached[0] == key:
            return cached[1]
        h = hashlib.sha256()

        def feed(obj: Any) -> None:
            if isinstance(obj, torch.Tensor | np.ndarray):
                a = np.ascontiguousarray(obj.detach().cpu().numpy() if isinstance(obj, torch.Tensor) else obj)
                h.update(f"<array {a.dtype.str} {a.shape}>".encode())
                h.update(a.tobytes())
            elif isinstance(obj, dict):
                h.update(b"{")
                for k in sorted(obj):
                    h.update(json.dumps(k).encode() + b":")
                    feed(obj[k])
                h.update(b"}")
            elif isinstance(obj, list | tuple):
                h.update(b"[")
                for v in obj:
                    feed(v)
                    h.update(b",")
                h.update(b"]")
            else:
                h.update(json.dumps(obj).encode())

        feed(self.to_dict())
        self._cache["fingerprint"] = key, h.hexdigest()
        return h.hexdigest()

    def to_dict(self: Any) -> dict:
        """The spec (format ``smaso-ladder``, version 2): lists, ints and strings plus tensors (see
        :mod:`teachers.spec_io`).  A uniform tree is written by its ``branching`` and stacked tables (the
        fields of version 1); any other graph by its ``parents``, ``events`` per region where a level's
        differ, and per-region tables where their shapes differ."""
        d = {"format": FORMAT, "version": SPEC_VERSION, "name": self.name, "mode": self.mode}
        if self.is_uniform():
            d["branching"], d["events"] = list(self._branching), list(self.events)
        else:
            d["parents"] = [[list(ps) for ps in lvl] for lvl in self.parents]
            d["events"] = [lvl[0] if len(set(lvl)) == 1 else list(lvl) for lvl in self.region_events]
        d["emission"] = self.emission.to_dict()
        if self.mode == TOPDOWN:
            d["prior"] = self.prior
            joint = self._productions or (None,) * self.depth
            # a level drawn jointly has its productions and an empty table ([], its marginals are derived); one
            # drawn independently its table and empty productions ({}): no null, which TOML cannot write
            d["tables"] = [[] if p is not None else t if isinstance(t, torch.Tensor) else list(t)
                           for t, p in zip(self._tables, joint, strict=True)]
            if self._productions is not None:
                d["productions"] = [{} if p is None else {"rules": p.rules, "probs": p.probs} for p in joint]
        else:
            d["leaf_prior"] = self._leaf_prior
            d["lookup"] = [t if isinstance(t, torch.Tensor) else list(t) for t in self._lookup]
        if self._region_names is not None:
            d["region_names"] = list(self._region_names)
        if self.rhm_params is not None:
            d["rhm"] = rhm_to_dict(self.rhm_params)
        if self.pairwise_view_of is not None:  # so that a loaded view still refuses to be sampled
            d["pairwise_view_of"] = self.pairwise_view_of
        if self.factorization is not None:
            f = self.factorization
            d["factorization"] = {"factors": list(f.factors), "root_factor_priors": f.root_factor_priors,
                                  "factor_tables": list(f.factor_tables)}
        return d

    @classmethod
    def from_dict(cls: type[Any], d: dict) -> Ladder:
        """Inverse of :meth:`to_dict`, for every spec version: ``smaso-ladder`` version 2 and version 1 (trees,
        also as a region tree ``regions``), ``smaso-graph-ladder`` version 1 (region graphs), and
        ``{"kind": "random" | "fully_informative" | "factorized_binary" | "summarization" | "default", ...}``
        generator descriptions (the keyword arguments of the constructor of that name)."""
        check_spec(d)  # every field's type and range, unknown keys, options that do not apply
        if d.get("format") == GRAPH_FORMAT_V1:
            return cls._from_graph_v1(d)
        if "parents" in d and "kind" not in d:
            return cls(events=d["events"], parents=d["parents"], mode=d["mode"], prior=d.get("prior"),
                       tables=d.get("tables"), leaf_prior=d.get("leaf_prior"), lookup=d.get("lookup"),
                       emission=d["emission"], name=d.get("name") or "ladder")
        if "kind" in d:  # check_spec allows only the names of the generator classmethods
            return getattr(cls, d["kind"])(**{k: v for k, v in d.items() if k not in ("kind", "format", "version")})
        names = d.get("region_names")  # (check_spec refuses it beside a region tree)
        if "regions" in d:
            d = dict(d)
            d["branching"], d["events"], names = parse_region_tree(d.pop("regions"))
        fac = None
        if d.get("factorization") is not None:
            f = d["factorization"]
            fac = Factorization(tuple(int(v) for v in f["factors"]),
                                _as_float64(f["root_factor_priors"], "factorization.root_factor_priors"),
                                tuple(_as_float64(t, f"factorization.factor_tables[{i}]")
                                      for i, t in enumerate(f["factor_tables"])))
        tables, joint = d.get("tables"), d.get("productions")
        if joint is not None:  # the placeholders of to_dict (check_spec: where one is, the other is not)
            tables = [None if _empty(t) else t for t in tables or ()]
            joint = [None if _empty(p) else p for p in joint]
        lad = cls(d["branching"], d["events"], mode=d["mode"], prior=d.get("prior"), tables=tables,
                  leaf_prior=d.get("leaf_prior"), lookup=d.get("lookup"), emission=d.get("emission"),
                  name=d.get("name") or "ladder", factorization=fac, region_names=names,
                  productions=joint)
        if fac is not None:
            _check_factorization(fac, lad)
        if d.get("rhm") is not None:
            lad.rhm_params = rhm_from_dict(d["rhm"], lad)
        if d.get("pairwise_view_of") is not None:
            lad.pairwise_view_of = d["pairwise_view_of"]
        return lad

    @classmethod
    def _from_graph_v1(cls: type[Any], spec: dict) -> Ladder:
        """A ``smaso-graph-ladder`` version 1 spec (``tables[l][i]`` with ``tables[0] = []``, ``leaf_priors``,
        ``lookups``): the format of ``GraphLadder.to_dict`` before the two ladders became one."""
        mode = spec["mode"]
        if mode == TOPDOWN:
            tables = spec["tables"]
            if not isinstance(tables, list) or not tables:
                raise LadderSpecError("tables: expected one entry per level (tables[0] = [])")
            kw = {"prior": spec["prior"], "tables": tables[1:]}
        else:
            kw = {"leaf_prior": spec["leaf_priors"], "lookup": spec["lookups"]}
        try:
            return cls(events=spec["events"], parents=spec["parents"], mode=mode, emission=spec["emission"],
                       name=spec.get("name") or "graph-ladder", **kw)
        except LadderSpecError as e:  # name the field as this file spells it
            raise LadderSpecError(_graph_v1_field(str(e))) from None


def _empty(v: Any) -> bool:
    """Whether ``v`` is a spec's placeholder for a level's absent table or productions: null, [] or {}."""
    if isinstance(v, list | tuple | dict):
        return len(v) == 0
    if isinstance(v, torch.Tensor):
        return v.numel() == 0
    return v is None or (isinstance(v, np.ndarray) and v.size == 0)


def rhm_to_dict(params: RHMParams) -> dict:
    """The spec's ``rhm`` table: the Random Hierarchy Model's parameters (:class:`~teachers.rhm.RHMParams`)."""
    return {k: getattr(params, k) for k in RHM_FIELDS}


def rhm_from_dict(d: dict, ladder: Ladder) -> RHMParams:
    """The parameters of a spec's ``rhm`` table (fields checked by :func:`~teachers.spec_check.check_spec`),
    checked against the ``ladder`` the spec built: the layout (branching s, events n_c then v), the uniform
    class prior, and every level's productions equal bit for bit to the rules :func:`~teachers.rhm.rhm_rules`
    deals from the seed, uniform over the m synonyms.  So a loaded RHM knows its parameters (P_max, n_c m^L)
    only when they are the ones that made it; the check costs what :meth:`Ladder.rhm` costs (one shuffle of
    the v^s tuples per level)."""
    params = RHMParams(**{k: d[k] for k in RHM_FIELDS if k in d})
    p = params
    if ladder.mode != TOPDOWN or not ladder.is_uniform() or ladder.branching != (p.s,) * p.L or \
            tuple(ladder.events) != (p.n_classes, *(p.v,) * p.L):
        raise LadderSpecError(f"rhm: an RHM with s = {p.s}, L = {p.L}, n_c = {p.n_classes}, v = {p.v} is a top-down "
                              f"tree of branching {[p.s] * p.L} and events {[p.n_classes, *[p.v] * p.L]}; this spec "
                              f"has {ladder!r}")
    uniform = torch.full((p.n_classes,), 1.0 / p.n_classes, dtype=torch.float64)
    if ladder.prior is None or not torch.equal(ladder.prior, uniform):
        raise LadderSpecError(f"rhm: an RHM's classes are uniform, but prior is not 1/{p.n_classes} everywhere")
    joint = ladder.productions or (None,) * ladder.depth
    for l, (want, got) in enumerate(zip(rhm_rules(params), joint, strict=True)):
        if got is None or not got.shared or not torch.equal(got.rules, want) or \
                not torch.equal(got.probs, torch.full(want.shape[:-1], 1.0 / p.m, dtype=torch.float64)):
            raise LadderSpecError(f"productions[{l}]: not the rules the rhm table deals ({params}): rules "
                                  f"{tuple(want.shape)} from seed {p.seed} by {p.rules!r}, each of the m = {p.m} "
                                  f"uniformly likely; drop the rhm table to keep these productions")
    return params


def _graph_v1_field(message: str) -> str:
    """An error of a ``smaso-graph-ladder`` version 1 spec with the field named as that format spells it:
    ``tables[l]`` (level l, ``tables[0] = []``) for this class's ``tables[l-1]``, ``leaf_priors``, ``lookups``."""
    message = re.sub(r"^tables\[(\d+)\]", lambda m: f"tables[{int(m.group(1)) + 1}]", message)
    message = re.sub(r"^leaf_prior\b", "leaf_priors", message)
    return re.sub(r"^lookup\b", "lookups", message)


def _check_factorization(f: Factorization, lad: Ladder) -> None:
    """A spec's factorization must describe its ladder: 2^n_l events, and factor tables of the right shapes."""
    n = f.factors
    if len(n) != lad.depth + 1:
        raise LadderSpecError(f"factorization.factors: expected {lad.depth + 1} entries (one per level), got {len(n)}")
    for l, (nl, m) in enumerate(zip(n, lad.events, strict=True)):
        if 2**nl != m:
            raise LadderSpecError(f"factorization.factors[{l}]: 2^{nl} binary-factor events, but events[{l}] = {m}")
        if l and nl % n[l - 1]:
            raise LadderSpecError(f"factorization.factors[{l}]: {nl} child factors cannot be split into "
                                  f"{n[l - 1]} equal groups")
    if tuple(f.root_factor_priors.shape) != (n[0], 2):
        raise LadderSpecError(f"factorization.root_factor_priors: expected shape ({n[0]}, 2), "
                              f"got {tuple(f.root_factor_priors.shape)}")
    if len(f.factor_tables) != lad.depth:
        raise LadderSpecError(f"factorization.factor_tables: expected {lad.depth} tables, got {len(f.factor_tables)}")
    for l in range(1, lad.depth + 1):
        want = (lad.num_regions[l], n[l - 1], 2, 2 ** (n[l] // n[l - 1]))
        if tuple(f.factor_tables[l - 1].shape) != want:
            raise LadderSpecError(f"factorization.factor_tables[{l - 1}]: expected shape {want}, "
                                  f"got {tuple(f.factor_tables[l - 1].shape)}")
