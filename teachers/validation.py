"""What a ladder spec may hold: the library's limits, its error type, and the checks and random tables
that the constructors of :class:`~teachers.ladder.Ladder` share (no dependency on the class itself, so
that :mod:`teachers.spec_check` and :mod:`teachers.regions` can use them without an import cycle)."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .emission import Emission, GaussianEmission, OneHotEmission

__all__ = ["BOTTOMUP", "MAX_DEPTH", "MAX_EVENTS", "MAX_LOOKUP", "MAX_REGIONS", "MAX_TABLE_ENTRIES", "MODES",
           "ROW_SUM_TOL", "TOPDOWN", "Factorization", "LadderSpecError", "make_emission"]

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


def _as_int_tuple(value: Any, name: str, length: int | None = None) -> tuple[int, ...]:
    if _is_int(value):
        if length is None:
            raise LadderSpecError(f"{name}: expected a list of integers, got {_short(value)}")
        value = [int(value)] * length
    if not isinstance(value, (list, tuple, np.ndarray, torch.Tensor)):
        raise LadderSpecError(f"{name}: expected a list of integers, got {_short(value)}")
    if length is not None and len(value) != length:
        raise LadderSpecError(f"{name}: expected {length} entries, got {len(value)}")
    out = []
    for v in value:
        if not _is_integral(v):
            raise LadderSpecError(f"{name}: expected a list of integers, got {_short(list(value))}")
        out.append(int(v))
    return tuple(out)


def _is_integral(v: object) -> bool:
    """Whether ``v`` is a number (not a bool) equal to an integer: ``2`` and ``2.0``, not ``2.5`` nor ``True``."""
    exact = False
    if not isinstance(v, (bool, np.bool_)) and isinstance(v, (int, float, np.integer, np.floating, torch.Tensor)):
        with contextlib.suppress(TypeError, ValueError, OverflowError, RuntimeError):
            exact = float(v) == int(v)
    return exact


def _as_int(value: Any, name: str) -> int:
    """``value`` as an int when it is integral (:func:`_is_integral`), else a LadderSpecError naming ``name``."""
    if not _is_integral(value):
        raise LadderSpecError(f"{name}: expected an integer, got {_got(value)}")
    return int(value)


def _short(v: object, limit: int = 80) -> str:
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


def _got(v: object) -> str:
    """What ``v`` is, for the 'got ...' part of a message (JSON's names: null, a table, a list)."""
    if v is None:
        return "null"
    if isinstance(v, (bool, np.bool_)):
        return f"a boolean ({'true' if v else 'false'})"
    if isinstance(v, str):
        return f"a string ({_short(v, 40)})"
    if isinstance(v, (int, np.integer)):
        return f"an integer ({_short(int(v), 40)})"
    if isinstance(v, (float, np.floating)):
        return f"a number ({_short(float(v), 40)})"
    if isinstance(v, dict):
        return "a table"
    if isinstance(v, (list, tuple)):
        return f"a list of {len(v)} entries"
    if isinstance(v, torch.Tensor):
        return f"a tensor of dtype {v.dtype} and shape {tuple(v.shape)}"
    if isinstance(v, np.ndarray):
        return f"an array of dtype {v.dtype} and shape {v.shape}"
    return f"a {type(v).__name__}"


def _pow(m: int, b: int) -> int | None:
    """``m ** b``, or None when it has more than 64 bits (never computes a huge power)."""
    if m <= 1:
        return m
    return None if b * math.log2(m) > 64 else m**b


def _is_int(v: object) -> bool:
    """Whether ``v`` is a Python or numpy integer (not a bool)."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _level_sizes(branching: Sequence[int]) -> list[int]:
    """Regions per level (at most MAX_DEPTH levels), in Python integers; raises once the total exceeds
    MAX_REGIONS."""
    num = [1]
    for b in branching:
        num.append(num[-1] * b)
        if sum(num) > MAX_REGIONS:
            raise LadderSpecError(f"branching: {list(branching)} gives more than {MAX_REGIONS} regions "
                                  f"(level {len(num) - 1} alone has {num[-1]})")
    return num


def _lookup_size(events: Sequence[int], branching: Sequence[int], num_regions: Sequence[int], l: int) -> int:
    """Entries ``events[l+1] ** branching[l]`` of one lookup table of level l of a uniform tree, checked against
    MAX_LOOKUP and (the whole level's) MAX_TABLE_ENTRIES."""
    size = _pow(events[l + 1], branching[l])
    if size is None or size > MAX_LOOKUP:
        raise LadderSpecError(f"lookup[{l}]: events[{l + 1}]^branching[{l}] = {events[l + 1]}^{branching[l]} = "
                              f"{size or 'over 2^64'} child configurations per region exceeds {MAX_LOOKUP}; "
                              "use fewer events or a smaller branching")
    _check_entries(num_regions[l] * size, f"lookup[{l}]", f"{num_regions[l]} regions x {size} child configurations")
    return size


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
    """Ranges of a constructor's layout (of at most MAX_DEPTH levels), before anything is allocated: returns the
    regions per level."""
    if any(b < 1 for b in branching):
        raise LadderSpecError(f"branching: every entry must be >= 1, got {_short(list(branching))}")
    if any(m < 1 for m in events):
        raise LadderSpecError(f"events: every entry must be >= 1, got {_short(list(events))}")
    if events[0] < 2:
        raise LadderSpecError(f"events[0]: the label needs at least 2 classes, got {events[0]}")
    if max(events) > MAX_EVENTS:
        raise LadderSpecError(f"events: at most {MAX_EVENTS} events per region, got {_short(list(events))}")
    return _level_sizes(branching)


# The tables each mode takes (the first two required), and each spec format's names for them.
_MODE_TABLES = {TOPDOWN: ("prior", "tables", "factorization"), BOTTOMUP: ("leaf_prior", "lookup")}


def _check_mode_tables(given: dict, mode: str, tables: dict = _MODE_TABLES) -> None:
    """The tables of ``mode`` (the first two of ``tables[mode]``) among the keys of ``given``, and none of the
    other mode's."""
    other = BOTTOMUP if mode == TOPDOWN else TOPDOWN
    need = tables[mode][:2]
    for key in tables[other]:
        if key in given:
            raise LadderSpecError(f"{key}: only for mode={other!r}; a {mode} ladder takes {need[0]} and {need[1]}")
    for key in need:
        if key not in given:
            raise LadderSpecError(f"{key}: missing (a {mode} ladder needs {need[0]} and {need[1]})")


def _is_positive(v: object) -> bool:
    """Whether ``v`` is a real number (not a bool), > 0 and finite."""
    try:
        return bool(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
                    and v > 0 and math.isfinite(v))
    except OverflowError:  # an integer too large for a float
        return False


def _check_concentration(concentration: Any) -> float:
    if not _is_positive(concentration):
        raise LadderSpecError(f"concentration: must be > 0 and finite, got {_got(concentration)}")
    return float(concentration)


def _check_sigma(sigma: Any) -> float:
    if not _is_positive(sigma):
        raise LadderSpecError(f"sigma: a gaussian emission needs a finite sigma > 0, got {_got(sigma)}")
    return float(sigma)


def _check_seed(seed: Any) -> int:
    if not _is_int(seed) or seed < 0:
        raise LadderSpecError(f"seed: expected a non-negative integer, got {_got(seed)}")
    return int(seed)


def _detached(value: Any) -> Any:
    """``value`` with every tensor in it (nested in lists and tuples) detached: a table given as a tensor that
    requires grad is read as the data it holds."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (list, tuple)):
        return [_detached(v) for v in value]
    return value


def _as_float64(value: Any, name: str) -> torch.Tensor:
    try:
        try:
            arr = np.asarray(value, dtype=np.float64)
        except RuntimeError:  # a tensor that requires grad, which numpy cannot read: its values are the table
            arr = np.asarray(_detached(value), dtype=np.float64)
        t = torch.as_tensor(arr)
    except (TypeError, ValueError) as e:
        raise LadderSpecError(f"{name}: expected an array of numbers ({e})") from None
    if not torch.isfinite(t).all():
        raise LadderSpecError(f"{name}: contains NaN or infinity")
    return t


def _check_rows(p: torch.Tensor, name: str, what: str) -> torch.Tensor:
    """Rows (last dim) must be non-negative and sum to 1 (within ``ROW_SUM_TOL``); returns them
    in float64, renormalized where they are off by more than rounding."""
    def where(idx: tuple[int, ...]) -> str:
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


def make_emission(emission: Emission | dict | str | None, num_regions: int, num_events: int,
                  sigma: float | None) -> Emission | dict:
    """The leaf emission a constructor's ``emission`` / ``sigma`` options name: ``None`` or ``"onehot"``
    (one-hot leaves), ``"gaussian"`` (means one-hot, noise ``sigma``), or an Emission / dict as given."""
    if emission is None or (isinstance(emission, str) and emission == "onehot"):
        return OneHotEmission(num_regions, num_events)
    if isinstance(emission, str) and emission == "gaussian":
        sigma = _check_sigma(sigma)
        _check_entries(num_regions * num_events * num_events, "emission",
                       f"gaussian means around one-hot, {num_regions} leaf regions x {num_events} x "
                       f"{num_events}")
        return GaussianEmission.around_one_hot(num_regions, num_events, sigma)
    if isinstance(emission, (Emission, dict)):
        return emission
    raise LadderSpecError(f"emission: expected 'onehot', 'gaussian', an Emission or a dict, "
                          f"got {_short(emission)}")


def _random_layout(depth: int, branching: int | Sequence[int], events: int | Sequence[int], concentration: float,
                   seed: int) -> tuple[int, tuple[int, ...], tuple[int, ...], float, np.random.Generator, list[int]]:
    """The checked arguments of a random constructor: ``(depth, branching, events, concentration, rng,
    num_regions)``."""
    depth = _check_depth(depth)
    branching = _as_int_tuple(branching, "branching", depth)
    events = _as_int_tuple(events, "events", depth + 1)
    concentration = _check_concentration(concentration)
    return depth, branching, events, concentration, _rng(seed), _check_layout(branching, events)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(_check_seed(seed))


def _check_depth(depth: Any) -> int:
    if not _is_int(depth) or depth < 1:
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
    bad = ~(p.sum(-1) > 0)
    if bad.any():
        idx = rng.integers(0, m, size=int(bad.sum()))
        p[bad] = np.eye(m)[idx]
    return p / p.sum(-1, keepdims=True)


def _kron_vectors(rows: np.ndarray) -> np.ndarray:
    return functools.reduce(np.kron, rows)

