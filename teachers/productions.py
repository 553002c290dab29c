"""Joint child draws: a region that draws its b children together, from a sparse table of *productions*.

On a summarization ladder built top-down every child draws its event from P(z_child | z_parent) on its own,
so siblings are independent given their parent.  A grammar draws them together: the Random Hierarchy Model
(Petrini et al. 2024; :mod:`teachers.rhm`) rewrites a symbol a into one of m s-tuples of lower symbols.  Here
such a level is stored sparsely, in the productions' size, not in m_child^b:

    P(z_children(r) = t | z_r = a) = sum_k probs[r, a, k] * [rules[r, a, k] == t]            (productions)

``rules[r, a, k]`` is the k-th production of event a of region r: a tuple of b child events, the first child
first; ``probs[r, a, k]`` its probability (each row of ``probs`` sums to 1; padding productions have
probability 0).  A level's productions are either shared by its regions (``rules`` ``(m, K, b)``, as in the
RHM, whose rules belong to a level) or per region (``(R, m, K, b)``).

What a pairwise statistic reads is unchanged: the child at place j of region r has the marginal table
``marginals()[r * b + j, a, c] = sum_k probs[r, a, k] [rules[r, a, k, j] == c]`` (its P(z_child | z_parent)),
which is what :attr:`teachers.ladder.Ladder.tables` holds on such a level.  What depends on the siblings'
joint law -- sampling, the Pyro model, the exact posterior, joints of several regions -- reads the productions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .validation import MAX_TABLE_ENTRIES, LadderSpecError, _as_float64, _check_rows, _short

__all__ = ["Productions"]


def _as_rules(value: Any, name: str) -> torch.Tensor:
    """``value`` as an int64 tensor of event indices, or a LadderSpecError naming ``name``."""
    try:
        arr = np.asarray(value.detach().cpu() if isinstance(value, torch.Tensor) else value)
    except (TypeError, ValueError) as e:
        raise LadderSpecError(f"{name}: expected an integer array of child events ({e})") from None
    if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and np.all(np.isfinite(arr))
                                           and np.all(np.mod(arr, 1) == 0)):
        raise LadderSpecError(f"{name}: expected integer child events, got dtype {arr.dtype}")
    return torch.as_tensor(arr.astype(np.int64))


class Productions:
    """One level's joint child draws (the module docstring): ``rules`` ``(m, K, b)`` shared by the level's
    regions or ``(R, m, K, b)`` per region, int64 child events; ``probs`` of the same shape without the last
    dimension, float64 rows summing to 1 (None: each event's K productions equally likely).

    :param rules: the productions: ``rules[..., a, k, j]`` is the event of child j in production k of event a.
    :param probs: their probabilities (None: uniform over the K productions).
    :param name: how errors name this level (for instance ``"productions[1]"``).
    """

    rules: torch.Tensor
    probs: torch.Tensor

    def __init__(self, rules: Any, probs: Any = None, *, name: str = "productions") -> None:
        self.name = name
        rules = _as_rules(rules, f"{name}.rules")
        if rules.dim() not in (3, 4):
            raise LadderSpecError(f"{name}.rules: expected shape (events, productions, children) or (regions, "
                                  f"events, productions, children), got {tuple(rules.shape)}")
        if rules.numel() == 0:
            raise LadderSpecError(f"{name}.rules: empty (shape {tuple(rules.shape)})")
        if rules.numel() > MAX_TABLE_ENTRIES:
            raise LadderSpecError(f"{name}.rules: {rules.numel()} entries is more than {MAX_TABLE_ENTRIES}")
        if (rules < 0).any():
            raise LadderSpecError(f"{name}.rules: child events must be >= 0, got {int(rules.min())}")
        if probs is None:
            probs = torch.full(rules.shape[:-1], 1.0 / rules.shape[-2], dtype=torch.float64)
        else:
            probs = _as_float64(probs, f"{name}.probs")
            if tuple(probs.shape) != tuple(rules.shape[:-1]):
                raise LadderSpecError(f"{name}.probs: expected shape {tuple(rules.shape[:-1])} (the rules' without "
                                      f"the children), got {tuple(probs.shape)}")
            probs = _check_rows(probs, f"{name}.probs", "index = [region,] event; one row over its productions")
        self.rules, self.probs = rules, probs

    # ------------------------------------------------------------------ sizes
    @property
    def shared(self) -> bool:
        """Whether one set of productions serves every region of the level."""
        return self.rules.dim() == 3

    @property
    def num_events(self) -> int:
        """m: events of the parent region (rows of ``probs``)."""
        return int(self.rules.shape[-3])

    @property
    def num_productions(self) -> int:
        """K: productions per event (padding included)."""
        return int(self.rules.shape[-2])

    @property
    def arity(self) -> int:
        """b: children per region."""
        return int(self.rules.shape[-1])

    def region_rules(self, num_regions: int) -> torch.Tensor:
        """``(R, m, K, b)``: every region's rules (a view when shared)."""
        return self.rules.expand(num_regions, *self.rules.shape[-3:]) if self.shared else self.rules

    def region_probs(self, num_regions: int) -> torch.Tensor:
        """``(R, m, K)``: every region's production probabilities (a view when shared)."""
        return self.probs.expand(num_regions, *self.probs.shape[-2:]) if self.shared else self.probs

    def check(self, num_regions: int, events: int, arity: int, child_events: int) -> Productions:
        """``self``, checked against the level it serves: R regions of ``events`` events, ``arity`` children
        each, of ``child_events`` events; a LadderSpecError naming what differs."""
        want = (events, self.num_productions, arity)
        if tuple(self.rules.shape[-3:]) != want or (not self.shared and self.rules.shape[0] != num_regions):
            raise LadderSpecError(
                f"{self.name}.rules: expected shape {want} (events, productions, children) or "
                f"{(num_regions, *want)} (one per region), got {tuple(self.rules.shape)}")
        hi = int(self.rules.max())
        if hi >= child_events:
            where = tuple((self.rules == hi).nonzero()[0].tolist())
            raise LadderSpecError(f"{self.name}.rules{list(where)}: child event {hi} outside [0, {child_events})")
        return self

    # ------------------------------------------------------------------ laws
    def marginals(self, num_regions: int, child_events: int) -> torch.Tensor:
        """Each child's table P(z_child | z_parent): ``(R * b, m, m_child)`` float64, child ``r * b + j`` the
        j-th of region r (breadth-first, as the ladder numbers them).  Shared productions give each place j
        one table, expanded over the regions."""
        rules, probs = self.rules, self.probs
        lead = rules.shape[:-3]  # () shared, (R,) per region
        out = torch.zeros(*lead, self.num_events, self.arity, child_events, dtype=torch.float64)
        src = probs.unsqueeze(-1).expand(*probs.shape, self.arity)  # (..., m, K, b)
        out.scatter_add_(-1, rules.transpose(-1, -2), src.transpose(-1, -2))  # (..., m, b, m_child)
        out = out.transpose(-2, -3)  # (..., b, m, m_child)
        if self.shared:
            out = out.expand(num_regions, *out.shape)
        return out.reshape(num_regions * self.arity, self.num_events, child_events)

    def codes(self, child_events: int) -> torch.Tensor:
        """Each production as one mixed-radix code of its b child events (first child most significant):
        ``rules``' shape without the last dimension, int64.  A ValueError when m_child^b overflows int64."""
        if child_events ** self.arity >= 2**62:
            raise ValueError(f"{self.name}: {child_events}^{self.arity} child configurations overflow int64 codes")
        weights = child_events ** torch.arange(self.arity - 1, -1, -1, dtype=torch.int64)
        return (self.rules * weights).sum(-1)

    def ambiguous(self, child_events: int, reachable: torch.Tensor | None = None) -> list[tuple[int, ...]]:
        """Where the productions are ambiguous: ``(region, tuple code)`` of every child tuple that two (event,
        production) pairs of positive probability produce (``region`` -1 when shared).  ``reachable``
        ``(m,)`` or ``(R, m)`` bool limits the check to parent events that occur (an event that never occurs
        may hold placeholder rules).  Empty when every tuple names its parent event and production, as an
        RHM's rules must (then p(y | x) is one-hot on one-hot inputs)."""
        codes = self.codes(child_events)
        live = self.probs > 0
        if reachable is not None:
            live = live & reachable.to(torch.bool).unsqueeze(-1)
        out: list[tuple[int, ...]] = []
        regions = [codes] if self.shared else list(codes)
        for r, (c, ok) in enumerate(zip(regions, [live] if self.shared else list(live), strict=True)):
            vals, counts = torch.unique(c[ok], return_counts=True)
            out += [(-1 if self.shared else r, int(v)) for v in vals[counts > 1]]
        return out

    def to(self, device: torch.device | str) -> Productions:
        """The same productions with ``rules`` and ``probs`` on ``device``."""
        new = object.__new__(Productions)
        new.name, new.rules, new.probs = self.name, self.rules.to(device), self.probs.to(device)
        return new

    def __repr__(self) -> str:
        where = "shared by the level" if self.shared else f"{self.rules.shape[0]} regions"
        return (f"Productions({self.num_events} events x {self.num_productions} productions of "
                f"{self.arity} children, {where})")


def as_productions(value: Any, name: str) -> Productions:
    """A level's productions from a :class:`Productions`, a ``(rules, probs)`` pair, a dict with ``rules``
    (and ``probs``), or the rules alone (uniform probabilities)."""
    if isinstance(value, Productions):
        return value
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"rules", "probs"})
        if unknown or "rules" not in value:
            raise LadderSpecError(f"{name}: expected keys 'rules' (and 'probs'), got {_short(sorted(value))}")
        return Productions(value["rules"], value.get("probs"), name=name)
    if isinstance(value, tuple) and len(value) == 2:
        return Productions(value[0], value[1], name=name)
    return Productions(value, name=name)


def level_productions(given: Sequence | None, depth: int) -> list[Productions | None] | None:
    """``given`` (one entry per level above the leaves, None where children are drawn on their own) read into
    :class:`Productions`; None when no level has any."""
    if given is None:
        return None
    if isinstance(given, (str, bytes, dict)) or not isinstance(given, Sequence) or len(given) != depth:
        raise LadderSpecError(f"productions: expected a list of {depth} entries (one per level above the leaves, "
                              f"None where the children are drawn independently), got {_short(given)}")
    out = [None if p is None else as_productions(p, f"productions[{l}]") for l, p in enumerate(given)]
    return out if any(p is not None for p in out) else None
