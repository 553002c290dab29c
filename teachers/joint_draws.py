"""Drawing a level whose parents draw their children jointly (:mod:`teachers.productions`), for the sampler.

On such a level every parent region r draws one production index k from its event's row of the production
probabilities, and its b children are the rule ``rules[r, z_r, k]``:

    k_r ~ probs[r, z_r, :],    z_children(r) = rules[r, z_r, k_r]                          (productions)

Vectorised over examples and over all the parent regions of the level: the rows ``probs[r, a, :]`` are stacked
into one :class:`~teachers.categorical.AliasTable` (row ``r * m + a``, or ``a`` when the level's productions are
shared), so each parent costs one uniform and one alias draw, whatever K is; the children come from one
gather of the flattened rules.  Children are numbered breadth-first (child j of parent r is ``r * b + j``), as
the ladder numbers its regions, so a level's children fill its columns in place.

:class:`JointLevel` is the step the block-seeded sampler (:mod:`teachers.sampling`) runs for such a level: it
draws one ``(n, R_parent)`` uniform array per level from the block generators, which keeps the sampler's
guarantee (a row depends only on (ladder, seed, row), whatever the chunk size or shard).  :func:`production_children`
expands given production indices (the derivations of :mod:`teachers.derivations`).
"""

from __future__ import annotations

import torch

from .categorical import AliasTable, AliasWork, BlockRNG
from .productions import Productions

__all__ = ["JointLevel", "production_children"]


class JointLevel:
    """One joint level of a sampling plan: parents in columns ``[parent_lo, parent_lo + R)`` of the event
    buffer, their ``R * b`` children in ``[lo, hi)``.

    :param prod: the level's productions (``rules`` ``(m, K, b)`` shared or ``(R, m, K, b)``).
    :param parent_lo: the parents' first column (their level's offset).
    :param num_parents: R, the regions of the parent level.
    :param dtype: the event buffer's dtype (the ladder's ``event_dtype()``).
    """

    draw = True  # the sampler's _Level flag: this level consumes random numbers

    def __init__(self, prod: Productions, parent_lo: int, num_parents: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        self.prod = prod
        self.m, self.num_productions, self.b = prod.num_events, prod.num_productions, prod.arity
        self.parent_lo, self.num_parents = parent_lo, num_parents
        self.lo = parent_lo + num_parents
        self.hi = self.lo + num_parents * self.b
        self.table = AliasTable(prod.probs.reshape(-1, self.num_productions), device=device)
        # row-major (rows * K, b): production k of row q is entry q * K + k
        self.rules = prod.rules.reshape(-1, self.b).to(device=device, dtype=dtype)
        self.region_offset = (None if prod.shared else
                              (torch.arange(num_parents, dtype=torch.int32, device=device) * self.m)[None])

    def rows(self, parents: torch.Tensor) -> torch.Tensor:
        """The probability row ``(n, R)`` int32 of every parent: its event (plus ``r * m`` per region)."""
        row = parents.to(torch.int32)
        return row if self.region_offset is None else row + self.region_offset

    def children(self, row: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """The children ``(n, R * b)`` (rules' dtype) of parents in probability rows ``row`` ``(n, R)`` that chose
        productions ``k`` ``(n, R)``."""
        flat = row.to(torch.int64).mul_(self.num_productions).add_(k.to(torch.int64))
        return self.rules.index_select(0, flat.reshape(-1)).reshape(row.shape[0], -1)

    def sample(self, buf: torch.Tensor, rng: BlockRNG | torch.Generator, work: AliasWork | None = None) -> None:
        """Draw every parent's production and write the children into ``buf`` ``(n, total_regions)`` (temporaries
        from ``work`` when given)."""
        row = self.rows(buf[:, self.parent_lo: self.lo])
        if work is None:
            k = self.table.sample(row, rng)
        else:
            k = self.table.sample_into(work.get("production", row.numel(), self.table.event_dtype).view(row.shape),
                                       row, rng, work)
        buf[:, self.lo: self.hi] = self.children(row, k)


def production_children(prod: Productions, parents: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The children ``(n, R * b)`` int64 of parents' events ``parents`` ``(n, R)`` that chose productions ``k``
    ``(n, R)`` (each in ``[0, K)``): ``rules[r, parents[:, r], k[:, r]]``, breadth-first."""
    n, r = parents.shape
    rules = prod.region_rules(r)  # (R, m, K, b), a view when shared
    region = torch.arange(r, device=parents.device).expand(n, r)
    return rules[region, parents.long(), k.long()].reshape(n, r * prod.arity)
