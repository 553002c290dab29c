"""The summarization ladder: the framework paper's teacher (§3.1; ``docs/theory.md`` §1).

Every receptive field (region) alpha of the input carries a discrete latent event z_alpha
with m_alpha values; the root region omega is the whole input and its event is the label
y = z_omega; the leaf regions emit the observed input x.  A :class:`Ladder` is *layered*,
like the layers of a CNN: all regions at depth l have the same number of events m_l and the
same number of children b_l, so level l has R_l = b_0 b_1 ... b_{l-1} regions.  Regions are
numbered breadth-first: region i of level l has children i*b_l, ..., i*b_l + b_l - 1 of
level l+1, and global index ``level_offsets[l] + i``.

Two ways to relate events across levels, both exact and both sampled by the same code:

``mode="topdown"`` (generative)
    y ~ P(y) = ``prior``; every child region c of level l draws z_c from the row z_parent of
    ``tables[l-1][c]`` = P(z_c | z_parent), shape ``(R_l, m_{l-1}, m_l)``.
``mode="bottomup"`` (summarization, as in the paper)
    leaf events are drawn independently from ``leaf_prior`` ``(R_d, m_d)``, and each parent
    event is a deterministic function of its children's events: ``lookup[l][i, code]`` with
    ``code = sum_c z_{child c} * m_{l+1}^(b_l - 1 - c)`` (first child most significant),
    shape ``(R_l, m_{l+1}^b_l)``.

Constructors: :meth:`Ladder.random` (uniform branching and depth, Dirichlet tables with a
concentration knob), :meth:`Ladder.fully_informative` (parent event = tuple of its children's
events, so P(x_alpha | z_alpha) is a delta and Thm 3 holds), :meth:`Ladder.factorized_binary`
(P_ab a Kronecker product of per-factor tables, for Thm 8/9) and :meth:`Ladder.default`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .emission import Emission, GaussianEmission, OneHotEmission, emission_from_dict

__all__ = ["MAX_DEPTH", "MAX_EVENTS", "MAX_LOOKUP", "MAX_REGIONS", "MAX_TABLE_ENTRIES", "Factorization", "Ladder",
           "LadderSpecError"]

TOPDOWN, BOTTOMUP = "topdown", "bottomup"
MODES = (TOPDOWN, BOTTOMUP)
# Largest number of events one region may have: tables and statistics are dense in m.
MAX_EVENTS = 2**16
# Largest bottom-up lookup table per region (m_child ** branching entries).
MAX_LOOKUP = 2**22
# Most levels below the root, and most regions over all levels (the width of an event matrix z).
MAX_DEPTH = 64
MAX_REGIONS = 2**24
# Most entries of one dense table (a level's P(z_child | z_parent), lookup, leaf prior or Gaussian means):
# 2^27 float64 values are 1 GiB.  Checked before anything of that size is allocated.
MAX_TABLE_ENTRIES = 2**27
ROW_SUM_TOL = 1e-6


class LadderSpecError(ValueError):
    """A ladder specification is inconsistent; the message names the offending field."""


@dataclass(frozen=True)
class Factorization:
    """Binary-factor structure of a :meth:`Ladder.factorized_binary` ladder (Thm 8/9).

    ``factors[l]`` = n_l binary factors per region of level l (m_l = 2^n_l).  Factor i of a
    parent drives the contiguous group ``S_i = [i*s_l, (i+1)*s_l)`` of each child's factors,
    ``s_l = n_l / n_{l-1}``, through ``factor_tables[l-1][c, i]`` of shape ``(2, 2^s_l)``, so
    that ``tables[l-1][c] = kron_i factor_tables[l-1][c, i]``.  ``root_factor_priors`` is
    ``(n_0, 2)``: the label's factors are independent.
    """

    factors: tuple[int, ...]
    root_factor_priors: torch.Tensor
    factor_tables: tuple[torch.Tensor, ...]

    def groups(self, level: int) -> list[list[int]]:
        """The disjoint sets S_i (child factor indices) for parent factors of ``level - 1``."""
        n_parent, n_child = self.factors[level - 1], self.factors[level]
        s = n_child // n_parent
        return [list(range(i * s, (i + 1) * s)) for i in range(n_parent)]


def _as_int_tuple(value, name: str, length: int | None = None) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        if length is None:
            raise LadderSpecError(f"{name}: expected a list of integers, got {_short(value)}")
        value = [int(value)] * length
    if isinstance(value, (str, bytes)):
        raise LadderSpecError(f"{name}: expected a list of integers, got the string {_short(value)}")
    if not isinstance(value, (list, tuple, np.ndarray, torch.Tensor)):
        raise LadderSpecError(f"{name}: expected a list of integers, got {_short(value)}")
    if length is not None and len(value) != length:
        raise LadderSpecError(f"{name}: expected {length} entries, got {len(value)}")
    out = []
    for v in value:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating, torch.Tensor)):
            raise LadderSpecError(f"{name}: expected a list of integers, got {_short(list(value))}")
        try:
            o = int(v)
            exact = float(v) == o
        except (TypeError, ValueError, OverflowError, RuntimeError):
            exact = False
        if not exact:
            raise LadderSpecError(f"{name}: expected integers, got {_short(list(value))}")
        out.append(o)
    return tuple(out)


def _short(v, limit: int = 80) -> str:
    """``repr(v)``, cut to ``limit`` characters (and never the digits of a huge integer)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return f"<a {v.bit_length()}-bit integer>"
    if isinstance(v, list) and len(v) > 16:
        v = [*v[:16], ...]
    try:
        r = repr(v)
    except ValueError:  # an integer too long to print
        r = f"<{type(v).__name__}>"
    return r if len(r) <= limit else r[:limit - 3] + "..."


def _pow(m: int, b: int) -> int | None:
    """``m ** b``, or None when it has more than 64 bits (never computes a huge power)."""
    if m <= 1:
        return m
    return None if b * math.log2(m) > 64 else m**b


def _level_sizes(branching: Sequence[int]) -> list[int]:
    """Regions per level, in Python integers; raises once the total exceeds MAX_REGIONS."""
    num = [1]
    for b in branching:
        num.append(num[-1] * b)
        if sum(num) > MAX_REGIONS:
            raise LadderSpecError(f"branching: {_short(list(branching))} gives more than {MAX_REGIONS} regions "
                                  f"(level {len(num) - 1} alone has {num[-1]})")
    return num


def _check_entries(n: int, name: str, what: str) -> None:
    if n > MAX_TABLE_ENTRIES:
        raise LadderSpecError(f"{name}: {what} = {n} entries exceeds {MAX_TABLE_ENTRIES}; "
                              "use fewer regions or events")


def _check_dense_sizes(num_regions: Sequence[int], events: Sequence[int], mode: str) -> None:
    """The dense tables a ladder of this layout allocates, before they are allocated."""
    if mode == TOPDOWN:
        for l in range(1, len(events)):
            _check_entries(num_regions[l] * events[l - 1] * events[l], f"tables[{l - 1}]",
                           f"{num_regions[l]} regions x {events[l - 1]} x {events[l]} events")
    else:
        _check_entries(num_regions[-1] * events[-1], "leaf_prior",
                       f"{num_regions[-1]} leaf regions x {events[-1]} events")


def _check_layout(branching: Sequence[int], events: Sequence[int]) -> list[int]:
    """Ranges of a constructor's layout, before anything is allocated: returns the regions per level."""
    if len(branching) > MAX_DEPTH:
        raise LadderSpecError(f"branching: at most {MAX_DEPTH} levels below the root, got {len(branching)}")
    if any(b < 1 for b in branching):
        raise LadderSpecError(f"branching: every entry must be >= 1, got {_short(list(branching))}")
    if any(m < 1 for m in events):
        raise LadderSpecError(f"events: every entry must be >= 1, got {_short(list(events))}")
    if events[0] < 2:
        raise LadderSpecError(f"events[0]: the label needs at least 2 classes, got {events[0]}")
    if max(events) > MAX_EVENTS:
        raise LadderSpecError(f"events: at most {MAX_EVENTS} events per region, got {_short(list(events))}")
    return _level_sizes(branching)


def _check_concentration(concentration) -> float:
    try:
        ok = (not isinstance(concentration, (bool, np.bool_)) and isinstance(concentration, (int, float, np.number))
              and concentration > 0 and math.isfinite(concentration))
    except OverflowError:
        ok = False
    if not ok:
        raise LadderSpecError(f"concentration: must be > 0 and finite, got {_short(concentration)}")
    return float(concentration)


def _as_float64(value, name: str) -> torch.Tensor:
    try:
        t = torch.as_tensor(np.asarray(value, dtype=np.float64))
    except (TypeError, ValueError) as e:
        raise LadderSpecError(f"{name}: expected an array of numbers ({e})") from None
    if not torch.isfinite(t).all():
        raise LadderSpecError(f"{name}: contains NaN or infinity")
    return t


def _check_rows(p: torch.Tensor, name: str, what: str) -> torch.Tensor:
    """Rows (last dim) must be non-negative and sum to 1 (within ``ROW_SUM_TOL``); returns them
    in float64, renormalized where they are off by more than rounding."""
    def where(idx):
        return f"{name}{list(idx)}" if idx else name

    neg = (p < 0).nonzero()
    if len(neg):
        idx = tuple(neg[0].tolist())
        raise LadderSpecError(f"{where(idx)}: probability {p[idx].item():.6g} is negative ({what})")
    s = p.sum(-1)
    bad = ((s - 1).abs() > ROW_SUM_TOL).nonzero()
    if len(bad):
        idx = tuple(bad[0].tolist())
        raise LadderSpecError(
            f"{where(idx)}: row sums to {s[idx].item():.9g}, expected 1 (tolerance {ROW_SUM_TOL:g}) ({what})")
    # Renormalize only rows that are off by more than rounding, so that saving and loading a
    # ladder reproduces its tables bit for bit.
    return torch.where((s - 1).abs()[..., None] > 1e-12, p / s[..., None], p)


def _per_region(t: torch.Tensor, want: tuple[int, ...], name: str, meaning: str) -> torch.Tensor:
    """``t`` of shape ``want``, or of ``want[1:]`` (one table shared by every region of the level)."""
    if t.shape == want[1:]:
        t = t.expand(want).clone()
    if t.shape != want:
        raise LadderSpecError(f"{name}: expected shape {want} ({meaning}) or {want[1:]}, got {tuple(t.shape)}")
    return t


class Ladder:
    """A layered summarization ladder (see the module docstring for the conventions).

    :param branching: ``(b_0, ..., b_{d-1})`` children per region at each non-leaf level.
    :param events: ``(m_0, ..., m_d)`` events per region at each level; ``m_0`` = classes.
    :param mode: ``"topdown"`` or ``"bottomup"``.
    :param prior: top-down: P(y), shape ``(m_0,)``.
    :param tables: top-down: ``d`` arrays, ``tables[l-1]`` = P(z_child | z_parent) of shape
        ``(R_l, m_{l-1}, m_l)``, or ``(m_{l-1}, m_l)`` shared by the whole level.
    :param leaf_prior: bottom-up: ``(R_d, m_d)`` or ``(m_d,)`` shared.
    :param lookup: bottom-up: ``d`` integer arrays, ``lookup[l]`` of shape
        ``(R_l, m_{l+1}^b_l)`` or ``(m_{l+1}^b_l,)`` shared.
    :param emission: leaf observation model (default: one-hot, Thm 3's delta case).
    :param name: free-form label kept in dataset files.
    """

    def __init__(self, branching: Sequence[int], events: Sequence[int], *, mode: str = TOPDOWN,
                 prior=None, tables=None, leaf_prior=None, lookup=None, emission: Emission | dict | None = None,
                 name: str = "ladder", factorization: Factorization | None = None,
                 region_names: Sequence[str] | None = None):
        if mode not in MODES:
            raise LadderSpecError(f"mode: expected 'topdown' or 'bottomup', got {mode!r}")
        self.mode = mode
        self.name = str(name)
        self.branching = _as_int_tuple(branching, "branching")
        d = len(self.branching)
        if d < 1:
            raise LadderSpecError("branching: a ladder needs at least one level below the root (depth >= 1)")
        if d > MAX_DEPTH:
            raise LadderSpecError(f"branching: at most {MAX_DEPTH} levels below the root, got {d}")
        if any(b < 1 for b in self.branching):
            raise LadderSpecError(f"branching: every entry must be >= 1, got {list(self.branching)}")
        self.events = _as_int_tuple(events, "events", d + 1)
        if any(m < 1 for m in self.events):
            raise LadderSpecError(f"events: every entry must be >= 1, got {list(self.events)}")
        if self.events[0] < 2:
            raise LadderSpecError(f"events[0]: the label needs at least 2 classes, got {self.events[0]}")
        if max(self.events) > MAX_EVENTS:
            raise LadderSpecError(f"events: at most {MAX_EVENTS} events per region, got {list(self.events)}")
        self.num_regions = tuple(_level_sizes(self.branching))
        _check_dense_sizes(self.num_regions, self.events, mode if mode in MODES else TOPDOWN)
        self.level_offsets = tuple(int(v) for v in np.concatenate([[0], np.cumsum(self.num_regions)]))
        self.factorization = factorization
        if region_names is not None:
            if isinstance(region_names, (str, bytes)) or not isinstance(region_names, Sequence):
                raise LadderSpecError(f"region_names: expected a list of {self.total_regions} names, "
                                      f"got {type(region_names).__name__}")
            region_names = [str(v) for v in region_names]
            if len(region_names) != self.total_regions or len(set(region_names)) != len(region_names):
                raise LadderSpecError(f"region_names: expected {self.total_regions} distinct names")
        self._region_names = region_names
        if mode == TOPDOWN:
            if leaf_prior is not None or lookup is not None:
                raise LadderSpecError("leaf_prior/lookup: only for mode='bottomup'; a top-down ladder takes "
                                      "prior and tables")
            self._init_topdown(prior, tables)
        else:
            if prior is not None or tables is not None:
                raise LadderSpecError("prior/tables: only for mode='topdown'; a bottom-up ladder takes "
                                      "leaf_prior and lookup")
            self._init_bottomup(leaf_prior, lookup)
        if emission is None or isinstance(emission, str):
            emission = self._emission(emission, self.num_regions[-1], self.events[-1], None)
        elif isinstance(emission, dict):
            emission = _emission_from_dict(emission, self.num_regions[-1], self.events[-1])
        if not isinstance(emission, Emission):
            raise LadderSpecError(f"emission: expected an Emission or a dict, got {type(emission).__name__}")
        if (emission.num_regions, emission.num_events) != (self.num_regions[-1], self.events[-1]):
            raise LadderSpecError(
                f"emission: covers {emission.num_regions} regions x {emission.num_events} events, but the "
                f"ladder's leaf level has {self.num_regions[-1]} regions x {self.events[-1]} events")
        self.emission = emission

    # ------------------------------------------------------------------ validation
    def _init_topdown(self, prior, tables):
        d, m = self.depth, self.events
        if prior is None or tables is None:
            raise LadderSpecError("prior/tables: a top-down ladder needs prior (P(y)) and tables "
                                  "(P(z_child | z_parent))")
        prior = _as_float64(prior, "prior")
        if prior.shape != (m[0],):
            raise LadderSpecError(f"prior: expected shape ({m[0]},) (events[0]), got {tuple(prior.shape)}")
        self.prior = _check_rows(prior, "prior", "P(y)")
        if not isinstance(tables, (list, tuple)) or len(tables) != d:
            raise LadderSpecError(f"tables: expected a list of {d} tables (one per level below the root)")
        out = []
        for l in range(1, d + 1):
            t = _as_float64(tables[l - 1], f"tables[{l - 1}]")
            t = _per_region(t, (self.num_regions[l], m[l - 1], m[l]), f"tables[{l - 1}]",
                            f"regions of level {l}, events of level {l - 1}, events of level {l}")
            out.append(_check_rows(t, f"tables[{l - 1}]", "index = [region, parent event]"))
        self.tables = tuple(out)
        self.leaf_prior = None
        self.lookup = None

    def _init_bottomup(self, leaf_prior, lookup):
        d, m = self.depth, self.events
        if leaf_prior is None or lookup is None:
            raise LadderSpecError("leaf_prior/lookup: a bottom-up ladder needs leaf_prior and lookup tables")
        p = _per_region(_as_float64(leaf_prior, "leaf_prior"), (self.num_regions[d], m[d]), "leaf_prior",
                        "leaf regions, leaf events")
        self.leaf_prior = _check_rows(p, "leaf_prior", "index = [leaf region]")
        if not isinstance(lookup, (list, tuple)) or len(lookup) != d:
            raise LadderSpecError(f"lookup: expected a list of {d} tables (one per non-leaf level)")
        out = []
        for l in range(d):
            size = _pow(m[l + 1], self.branching[l])
            if size is None or size > MAX_LOOKUP:
                raise LadderSpecError(
                    f"lookup[{l}]: {m[l + 1]}^{self.branching[l]} = {size or 'over 2^64'} child configurations "
                    f"per region exceeds {MAX_LOOKUP}; use fewer events or a smaller branching")
            _check_entries(self.num_regions[l] * size, f"lookup[{l}]",
                           f"{self.num_regions[l]} regions x {size} child configurations")
            arr = np.asarray(lookup[l])
            if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and np.all(np.mod(arr, 1) == 0)):
                raise LadderSpecError(f"lookup[{l}]: expected integer event indices, got dtype {arr.dtype}")
            t = _per_region(torch.as_tensor(arr.astype(np.int64)), (self.num_regions[l], size), f"lookup[{l}]",
                            f"regions of level {l}, events[{l + 1}]^branching[{l}]")
            bad = ((t < 0) | (t >= m[l])).nonzero()
            if len(bad):
                r, c = bad[0].tolist()
                raise LadderSpecError(f"lookup[{l}][{r}, {c}]: event {t[r, c].item()} outside [0, {m[l]}) "
                                      f"(events[{l}] = {m[l]})")
            out.append(t)
        self.lookup = tuple(out)
        self.prior = None
        self.tables = None

    # ------------------------------------------------------------------ structure
    @property
    def depth(self) -> int:
        """Number of levels below the root (leaves are at level ``depth``)."""
        return len(self.branching)

    @property
    def total_regions(self) -> int:
        """Number of regions over all levels (the width of an event matrix z)."""
        return self.level_offsets[-1]

    @property
    def num_classes(self) -> int:
        """Number of labels: the events of the top region (z_omega = y)."""
        return self.events[0]

    def parents(self, level: int) -> torch.Tensor:
        """Index (within level ``level - 1``) of the parent of each region of ``level``: ``(R_l,)``."""
        if not 1 <= level <= self.depth:
            raise ValueError(f"level: expected 1..{self.depth}, got {level}")
        return torch.arange(self.num_regions[level]) // self.branching[level - 1]

    def region_level(self) -> torch.Tensor:
        """Level of every region, in global (breadth-first) order: ``(total_regions,)``."""
        return torch.repeat_interleave(torch.arange(self.depth + 1), torch.tensor(self.num_regions))

    def region_names(self) -> list[str]:
        """Region names in global order: those of the spec's region tree, else ``"l.i"`` for
        region i of level l (``"0.0"`` is the root / label)."""
        if self._region_names is not None:
            return list(self._region_names)
        return [f"{l}.{i}" for l in range(self.depth + 1) for i in range(self.num_regions[l])]

    def leaves_under(self, level: int) -> int:
        """How many leaf regions lie under one region of ``level``."""
        return int(np.prod(self.branching[level:], dtype=np.int64))

    def event_dtype(self) -> torch.dtype:
        """Smallest integer dtype that holds every event index (storage dtype of samples)."""
        top = max(self.events)
        return torch.uint8 if top <= 256 else torch.int16 if top <= 2**15 else torch.int32

    def describe(self) -> str:
        """A few lines for people: mode, depth, regions, events and branching per level, emission."""
        lines = [f"Ladder {self.name!r}: mode={self.mode}, depth={self.depth}, "
                 f"{self.total_regions} regions, {self.num_classes} classes, emission={self.emission.kind}"]
        for l in range(self.depth + 1):
            b = f", {self.branching[l]} children each" if l < self.depth else " (leaves)"
            lines.append(f"  level {l}: {self.num_regions[l]} regions x {self.events[l]} events{b}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"Ladder(mode={self.mode!r}, branching={list(self.branching)}, events={list(self.events)}, "
                f"emission={self.emission.kind!r})")

    def with_emission(self, emission: Emission | dict) -> Ladder:
        """The same events with another leaf observation model."""
        new = object.__new__(Ladder)
        new.__dict__.update(self.__dict__)
        if isinstance(emission, dict):
            emission = _emission_from_dict(emission, self.num_regions[-1], self.events[-1])
        if not isinstance(emission, Emission):
            raise LadderSpecError(f"emission: expected an Emission or a dict, got {type(emission).__name__}")
        if (emission.num_regions, emission.num_events) != (self.num_regions[-1], self.events[-1]):
            raise LadderSpecError(f"emission: covers {emission.num_regions} x {emission.num_events}, the leaves are "
                                  f"{self.num_regions[-1]} x {self.events[-1]}")
        new.emission = emission
        return new

    # ------------------------------------------------------------------ serialization
    def fingerprint(self) -> str:
        """SHA-256 of the whole specification (structure, mode, emission and every table's dtype, shape and
        bytes): equal for two ladders exactly when they define the same teacher, the check used before
        counts or statistics of two samples are merged."""
        h = hashlib.sha256()

        def feed(obj) -> None:
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
        return h.hexdigest()

    def to_dict(self) -> dict:
        """Plain description: lists/ints/strings plus tensors (see :mod:`teachers.spec_io`)."""
        d = {"format": "smaso-ladder", "version": 1, "name": self.name, "mode": self.mode,
             "branching": list(self.branching), "events": list(self.events), "emission": self.emission.to_dict()}
        if self.mode == TOPDOWN:
            d["prior"] = self.prior
            d["tables"] = list(self.tables)
        else:
            d["leaf_prior"] = self.leaf_prior
            d["lookup"] = list(self.lookup)
        if self._region_names is not None:
            d["region_names"] = list(self._region_names)
        if self.factorization is not None:
            f = self.factorization
            d["factorization"] = {"factors": list(f.factors), "root_factor_priors": f.root_factor_priors,
                                  "factor_tables": list(f.factor_tables)}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Ladder:
        """Inverse of :meth:`to_dict`; also accepts ``{"kind": "random" | "fully_informative" |
        "factorized_binary" | "summarization" | "default", ...}`` generator descriptions (the keyword arguments of the
        constructor of that name)."""
        from .spec_check import check_spec

        check_spec(d)  # every field's type and range, unknown keys, options that do not apply
        if "kind" in d:
            kind = d["kind"]
            builders = {"random": cls.random, "fully_informative": cls.fully_informative,
                        "factorized_binary": cls.factorized_binary, "summarization": cls.summarization,
                        "default": cls.default}
            kwargs = {k: v for k, v in d.items() if k not in ("kind", "format", "version")}
            return builders[kind](**kwargs)
        names = None
        if "regions" in d:
            d = dict(d)
            d["branching"], d["events"], names = _parse_region_tree(d.pop("regions"))
        elif "region_names" in d:
            names = d["region_names"]
        fac = None
        if d.get("factorization") is not None:
            f = d["factorization"]
            fac = Factorization(tuple(int(v) for v in f["factors"]),
                                _as_float64(f["root_factor_priors"], "factorization.root_factor_priors"),
                                tuple(_as_float64(t, f"factorization.factor_tables[{i}]")
                                      for i, t in enumerate(f["factor_tables"])))
        lad = cls(d["branching"], d["events"], mode=d["mode"], prior=d.get("prior"), tables=d.get("tables"),
                  leaf_prior=d.get("leaf_prior"), lookup=d.get("lookup"), emission=d.get("emission"),
                  name=d.get("name") or "ladder", factorization=fac, region_names=names)
        if fac is not None:
            _check_factorization(fac, lad)
        return lad

    # ------------------------------------------------------------------ constructors
    @staticmethod
    def _emission(emission, num_regions, num_events, sigma):
        if emission is None or (isinstance(emission, str) and emission == "onehot"):
            return OneHotEmission(num_regions, num_events)
        if isinstance(emission, str) and emission == "gaussian":
            try:
                ok = (isinstance(sigma, (int, float, np.number)) and not isinstance(sigma, (bool, np.bool_))
                      and sigma > 0 and math.isfinite(sigma))
            except OverflowError:
                ok = False
            if not ok:
                raise LadderSpecError(f"sigma: a gaussian emission needs a finite sigma > 0, got {_short(sigma)}")
            _check_entries(num_regions * num_events * num_events, "emission",
                           f"gaussian means around one-hot, {num_regions} leaf regions x {num_events} x "
                           f"{num_events}")
            return GaussianEmission.around_one_hot(num_regions, num_events, float(sigma))
        if isinstance(emission, (Emission, dict)):
            return emission
        raise LadderSpecError(f"emission: expected 'onehot', 'gaussian', an Emission or a dict, "
                              f"got {_short(emission)}")

    @classmethod
    def random(cls, depth: int = 3, branching: int | Sequence[int] = 2, events: int | Sequence[int] = 4, *,
               mode: str = TOPDOWN, concentration: float = 1.0, seed: int = 0, emission=None,
               sigma: float | None = None, name: str | None = None) -> Ladder:
        """A ladder with uniform branching and random tables.

        Top-down: P(y) and every row of every P(z_child | z_parent) ~ Dirichlet(concentration);
        small concentrations give peaked rows (events that carry the label), large ones
        near-uniform rows.  Bottom-up: leaf priors ~ Dirichlet(concentration) and each parent's
        lookup table is a uniformly random map onto all m_l events (every event reachable).

        :param depth: levels below the root (>= 1).
        :param branching: children per region (an int, or one per level).
        :param events: events per region (an int, or ``depth + 1`` values, root first).
        :param concentration: Dirichlet concentration, > 0.
        :param seed: seed of the tables (numpy's PCG64, platform independent).
        :param emission: ``"onehot"`` (default), ``"gaussian"`` (means one-hot, noise ``sigma``)
            or an :class:`~teachers.emission.Emission`.
        """
        depth, branching, events, concentration, rng, num_regions = _random_layout(depth, branching, events,
                                                                                    concentration, seed)
        if mode not in MODES:
            raise LadderSpecError(f"mode: expected 'topdown' or 'bottomup', got {_short(mode)}")
        _check_dense_sizes(num_regions, events, mode)
        emission = cls._emission(emission, num_regions[-1], events[-1], sigma)
        name = name or f"random-{mode}-d{depth}"
        if mode == TOPDOWN:
            prior = _dirichlet(rng, concentration, (), events[0])
            tables = [_dirichlet(rng, concentration, (num_regions[l], events[l - 1]), events[l])
                      for l in range(1, depth + 1)]
            return cls(branching, events, mode=mode, prior=prior, tables=tables, emission=emission, name=name)
        if mode != BOTTOMUP:
            raise LadderSpecError(f"mode: expected 'topdown' or 'bottomup', got {mode!r}")
        leaf_prior = _dirichlet(rng, concentration, (num_regions[-1],), events[-1])
        lookup = []
        for l in range(depth):
            size = _pow(events[l + 1], branching[l])
            if size is not None and size < events[l]:
                raise LadderSpecError(
                    f"events[{l}]: {events[l]} parent events cannot all be reached from "
                    f"{events[l + 1]}^{branching[l]} = {size} child configurations")
            if size is None or size > MAX_LOOKUP:
                raise LadderSpecError(f"events[{l + 1}]^branching[{l}] = {size or 'over 2^64'} exceeds {MAX_LOOKUP} "
                                      "entries per table")
            _check_entries(num_regions[l] * size, f"lookup[{l}]", f"{num_regions[l]} regions x {size} configurations")
            tabs = np.empty((num_regions[l], size), dtype=np.int64)
            for r in range(num_regions[l]):
                vals = np.concatenate([np.arange(events[l]), rng.integers(0, events[l], size - events[l])])
                tabs[r] = rng.permutation(vals)
            lookup.append(tabs)
        return cls(branching, events, mode=mode, leaf_prior=leaf_prior, lookup=lookup, emission=emission, name=name)

    @classmethod
    def fully_informative(cls, depth: int = 2, branching: int | Sequence[int] = 2, leaf_events: int = 2, *,
                          concentration: float | None = None, seed: int = 0, emission=None,
                          sigma: float | None = None, name: str | None = None) -> Ladder:
        """The ladder where each parent event is the tuple of its children's events.

        Bottom-up with ``lookup`` the mixed-radix code of the children tuple, so
        m_l = m_{l+1}^b_l and z_alpha determines every leaf event under alpha: with one-hot
        leaves, P(x_alpha | z_alpha) is a delta for every region (Thm 3).  Leaf priors are
        uniform, or Dirichlet(concentration) when ``concentration`` is given.
        """
        depth = _check_depth(depth)
        branching = _as_int_tuple(branching, "branching", depth)
        if isinstance(leaf_events, (bool, np.bool_)) or not isinstance(leaf_events, (int, np.integer)):
            raise LadderSpecError(f"leaf_events: expected an integer >= 1, got {_short(leaf_events)}")
        events = [int(leaf_events)]
        if events[0] < 1:
            raise LadderSpecError(f"leaf_events: must be >= 1, got {leaf_events}")
        if events[0] > MAX_EVENTS:
            raise LadderSpecError(f"leaf_events: at most {MAX_EVENTS} events per region, got {_short(events[0])}")
        _check_layout(branching, [2] * (depth + 1))
        for l in reversed(range(depth)):
            events.insert(0, _pow(events[0], branching[l]))
            if events[0] is None or events[0] > MAX_EVENTS:
                raise LadderSpecError(
                    f"fully informative ladder: level {l} would need {events[1]}^{branching[l]} events "
                    f"(> {MAX_EVENTS}); lower depth, branching or leaf_events")
        if events[0] < 2:
            raise LadderSpecError("leaf_events: the label needs >= 2 classes; use leaf_events >= 2")
        num_regions = _check_layout(branching, events)
        _check_dense_sizes(num_regions, events, BOTTOMUP)
        rng = _rng(seed)
        if concentration is None:
            leaf_prior = np.full(events[-1], 1.0 / events[-1])
        else:
            leaf_prior = _dirichlet(rng, _check_concentration(concentration), (num_regions[-1],), events[-1])
        lookup = [np.arange(events[l]) for l in range(depth)]  # code -> itself: the tuple is the event
        return cls(branching, events, mode=BOTTOMUP, leaf_prior=leaf_prior, lookup=lookup,
                   emission=cls._emission(emission, num_regions[-1], events[-1], sigma),
                   name=name or f"fully-informative-d{depth}")

    @classmethod
    def factorized_binary(cls, depth: int = 2, branching: int | Sequence[int] = 2,
                          factors: Sequence[int] = (1, 2, 2), *, concentration: float = 1.0, seed: int = 0,
                          emission=None, sigma: float | None = None, name: str | None = None) -> Ladder:
        """Top-down ladder of binary factors with P_ab a Kronecker product (Thm 8/9).

        A region of level l carries n_l = ``factors[l]`` binary factors (m_l = 2^n_l, factor 0
        the most significant bit).  Factor i of a parent drives the i-th contiguous group S_i of
        s_l = n_l / n_{l-1} factors of each child through its own (2, 2^s_l) table, so
        P(z_child | z_parent) = kron_i P_{parent[i], child[S_i]}.  The label's factors are
        independent Bernoulli variables.  All small tables are Dirichlet(concentration).
        """
        depth = _check_depth(depth)
        branching = _as_int_tuple(branching, "branching", depth)
        factors = _as_int_tuple(factors, "factors", depth + 1)
        if any(n < 1 for n in factors):
            raise LadderSpecError(f"factors: every level needs >= 1 binary factor, got {list(factors)}")
        for l in range(1, depth + 1):
            if factors[l] % factors[l - 1]:
                raise LadderSpecError(f"factors[{l}]: {factors[l]} child factors cannot be split into "
                                      f"{factors[l - 1]} equal groups (factors[{l - 1}] = {factors[l - 1]})")
        if max(factors) > 16:
            raise LadderSpecError(f"factors: 2^{max(factors)} events per region exceeds {MAX_EVENTS}")
        events = [2**n for n in factors]
        if max(events) > MAX_EVENTS:
            raise LadderSpecError(f"factors: 2^{max(factors)} events per region exceeds {MAX_EVENTS}")
        concentration = _check_concentration(concentration)
        rng = _rng(seed)
        num_regions = _check_layout(branching, events)
        _check_dense_sizes(num_regions, events, TOPDOWN)
        root_f = _dirichlet(rng, concentration, (factors[0],), 2)
        prior = _kron_vectors(root_f)
        factor_tables, tables = [], []
        for l in range(1, depth + 1):
            s = factors[l] // factors[l - 1]
            ft = _dirichlet(rng, concentration, (num_regions[l], factors[l - 1], 2), 2**s)
            factor_tables.append(torch.as_tensor(ft))
            t = np.empty((num_regions[l], events[l - 1], events[l]))
            for r in range(num_regions[l]):
                k = ft[r, 0]
                for i in range(1, factors[l - 1]):
                    k = np.kron(k, ft[r, i])
                t[r] = k
            tables.append(t)
        fac = Factorization(tuple(factors), torch.as_tensor(root_f), tuple(factor_tables))
        return cls(branching, events, mode=TOPDOWN, prior=prior, tables=tables,
                   emission=cls._emission(emission, num_regions[-1], events[-1], sigma),
                   name=name or f"factorized-binary-d{depth}", factorization=fac)

    @classmethod
    def summarization(cls, depth: int = 3, branching: int | Sequence[int] = 2, events: int | Sequence[int] = 4, *,
                      concentration: float = 2.0, seed: int = 0, emission=None, sigma: float | None = None,
                      name: str | None = None) -> Ladder:
        """A summarization ladder in the paper's sense (§2.1, §3): leaf events drawn, every parent
        event a deterministic function of its children's events, the label the root's event.

        Leaf priors ~ Dirichlet(``concentration``); each region's lookup table is a random *balanced*
        map from the m^b child configurations onto its m events (every event the image of
        floor(m^b / m) or one more configurations), so with near-uniform leaves every level's events
        are near-uniform too (no class is rare).  The map is not injective when m^b > m: a child's
        event is then not determined by its parent's, so broadness of knowledge fails while focus
        holds, and y is a function of x (Bayes-optimal accuracy 1 with one-hot leaves).

        :param depth, branching, events: as in :meth:`random` (m^b >= m at every level).
        :param concentration: Dirichlet concentration of the leaf priors, > 0.
        :param seed: seed of the priors and maps (numpy's PCG64, platform independent).
        """
        depth, branching, events, concentration, rng, num_regions = _random_layout(depth, branching, events,
                                                                                    concentration, seed)
        _check_dense_sizes(num_regions, events, BOTTOMUP)
        leaf_prior = _dirichlet(rng, concentration, (num_regions[-1],), events[-1])
        lookup = []
        for l in range(depth):
            size = _pow(events[l + 1], branching[l])
            if size is not None and size < events[l]:
                raise LadderSpecError(f"events[{l}]: {events[l]} parent events cannot all be reached from "
                                      f"{events[l + 1]}^{branching[l]} = {size} child configurations")
            if size is None or size > MAX_LOOKUP:
                raise LadderSpecError(f"events[{l + 1}]^branching[{l}] = {size or 'over 2^64'} exceeds {MAX_LOOKUP} "
                                      "entries per table")
            _check_entries(num_regions[l] * size, f"lookup[{l}]", f"{num_regions[l]} regions x {size} configurations")
            balanced = np.arange(size) % events[l]  # each event size // m or size // m + 1 times
            lookup.append(np.stack([rng.permutation(balanced) for _ in range(num_regions[l])]))
        return cls(branching, events, mode=BOTTOMUP, leaf_prior=leaf_prior, lookup=lookup,
                   emission=cls._emission(emission, num_regions[-1], events[-1], sigma),
                   name=name or f"summarization-d{depth}")

    @classmethod
    def default(cls, emission=None, sigma: float | None = None, mode: str = BOTTOMUP) -> Ladder:
        """The built-in ladder of ``smaso demo``.

        ``mode="bottomup"`` (the default, name ``"default"``): the summarization ladder of the
        framework paper, :meth:`summarization` with depth 3, branching 2, 4 events per region
        (4 classes), Dirichlet(2) leaf priors, seed 2 (of seeds 0-9 the one with the most even
        classes: P(y) = 0.259, 0.273, 0.242, 0.227): y is a function of x, and each parent event
        summarizes 4 of its 16 child configurations, so broadness of knowledge fails by design.

        ``mode="topdown"`` (name ``"default-topdown"``, the default before version 0.3): a top-down
        stochastic ladder, depth 3, branching 2, 4 events, Dirichlet(0.5) tables, seed 0; y is not a
        function of x (Bayes-optimal accuracy about 0.56).
        """
        if mode == BOTTOMUP:
            return cls.summarization(depth=3, branching=2, events=4, concentration=2.0, seed=2, emission=emission,
                                     sigma=sigma, name="default")
        if mode == TOPDOWN:
            return cls.random(depth=3, branching=2, events=4, mode=TOPDOWN, concentration=0.5, seed=0,
                              emission=emission, sigma=sigma, name="default-topdown")
        raise LadderSpecError(f"mode: expected 'topdown' or 'bottomup', got {mode!r}")


def _parse_region_tree(regions) -> tuple[list[int], list[int], list[str]]:
    """An explicit region tree -> (branching, events, names in breadth-first order).

    ``regions`` is a list of ``{"name": str, "events": int, "children": [names]}`` (leaves
    have no or empty ``children``); the root is the one region that is nobody's child.
    The tree must be layered: every region of a level has the same number of events and of
    children, and all leaves are at the same depth.  Tables are then given in the
    breadth-first order of this tree (children in the order listed).
    """
    if not isinstance(regions, list) or not regions:
        raise LadderSpecError("regions: expected a non-empty list of {name, events, children} tables")
    by_name: dict[str, dict] = {}
    for i, r in enumerate(regions):
        if not isinstance(r, dict) or "name" not in r or "events" not in r:
            raise LadderSpecError(f"regions[{i}]: expected a table with 'name', 'events' and optional 'children'")
        name = str(r["name"])
        if name in by_name:
            raise LadderSpecError(f"regions[{i}]: region name {name!r} is used twice")
        by_name[name] = r
    parent: dict[str, str] = {}
    for name, r in by_name.items():
        for c in r.get("children") or []:
            c = str(c)
            if c not in by_name:
                raise LadderSpecError(f"regions: region {name!r} has a child {c!r} that is not a defined region")
            if c in parent:
                raise LadderSpecError(f"regions: region {c!r} is a child of both {parent[c]!r} and {name!r}")
            parent[c] = name
    roots = [n for n in by_name if n not in parent]
    if len(roots) != 1:
        raise LadderSpecError(f"regions: expected exactly one root (a region that is nobody's child), found {roots}")
    order, level, depth_of = [], [roots[0]], {roots[0]: 0}
    branching, events = [], []
    while level:
        ev = {int(by_name[n]["events"]) for n in level}
        if len(ev) != 1:
            raise LadderSpecError(f"regions: regions at depth {len(events)} have different event counts {sorted(ev)}; "
                                  "a ladder needs the same m at every region of a level")
        events.append(ev.pop())
        if len(events) > MAX_DEPTH + 1:
            raise LadderSpecError(f"regions: the tree is more than {MAX_DEPTH} levels deep below the root "
                                  f"{roots[0]!r}")
        order += level
        kids = [len(by_name[n].get("children") or []) for n in level]
        if len(set(kids)) != 1:
            raise LadderSpecError(f"regions: regions at depth {len(events) - 1} have {sorted(set(kids))} children; "
                                  "a ladder needs the same branching at every region of a level "
                                  "(and all leaves at the same depth)")
        nxt = [str(c) for n in level for c in by_name[n].get("children") or []]
        for c in nxt:
            depth_of[c] = len(events)
        if kids[0]:
            branching.append(kids[0])
        level = nxt
    unreachable = [n for n in by_name if n not in depth_of]
    if unreachable:  # only possible through a cycle that avoids the root
        raise LadderSpecError(f"regions: region(s) {unreachable} cannot be reached from the root {roots[0]!r}")
    return branching, events, order


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


def _emission_from_dict(d, num_regions, num_events) -> Emission:
    from .spec_check import check_emission_dict

    check_emission_dict(d)
    if d["kind"] == "gaussian" and "means" not in d:
        _check_entries(num_regions * num_events * num_events, "emission",
                       f"gaussian means around one-hot, {num_regions} leaf regions x {num_events} x {num_events}")
    try:
        return emission_from_dict(d, num_regions, num_events)
    except LadderSpecError:
        raise
    except (ValueError, TypeError) as e:
        raise LadderSpecError(str(e)) from None


def _random_layout(depth, branching, events, concentration, seed):
    """The checked arguments of a random constructor: ``(depth, branching, events, concentration, rng,
    num_regions)``."""
    depth = _check_depth(depth)
    branching = _as_int_tuple(branching, "branching", depth)
    events = _as_int_tuple(events, "events", depth + 1)
    concentration = _check_concentration(concentration)
    return depth, branching, events, concentration, _rng(seed), _check_layout(branching, events)


def _rng(seed) -> np.random.Generator:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise LadderSpecError(f"seed: expected a non-negative integer, got {_short(seed)}")
    return np.random.default_rng(int(seed))


def _check_depth(depth) -> int:
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
        raise LadderSpecError(f"depth: expected an integer >= 1, got {_short(depth)}")
    if depth > MAX_DEPTH:
        raise LadderSpecError(f"depth: at most {MAX_DEPTH} levels, got {_short(int(depth))}")
    return int(depth)


def _dirichlet(rng: np.random.Generator, concentration: float, shape: tuple, m: int) -> np.ndarray:
    """Dirichlet rows of length m; tiny concentrations can underflow to an all-zero row in
    numpy, which is replaced by a one-hot row at a random event (the limit of the distribution)."""
    if m == 1:
        return np.ones((*shape, 1))
    p = rng.dirichlet(np.full(m, float(concentration)), size=shape if shape else None)
    p = np.asarray(p, dtype=np.float64).reshape(*shape, m)
    s = p.sum(-1)
    bad = ~(s > 0)
    if bad.any():
        idx = rng.integers(0, m, size=int(bad.sum()))
        p[bad] = np.eye(m)[idx]
    return p / p.sum(-1, keepdims=True)


def _kron_vectors(rows: np.ndarray) -> np.ndarray:
    out = rows[0]
    for r in rows[1:]:
        out = np.kron(out, r)
    return out
