"""The Random Hierarchy Model (RHM) of Petrini, Cagnetta, Tomasini, Favero and Wyart ("How deep neural networks
learn compositional data: the random hierarchy model", Phys. Rev. X 14, 031001, 2024; arXiv 2307.02129) as a
summarization ladder whose children are drawn jointly (:mod:`teachers.productions`).

The paper's notation: v symbols at every level below the root, n_c classes (the root's symbols), m synonyms (the
productions of each symbol), patch size s (children per node), depth L; the input has s^L positions.  At level
l = 1..L every symbol of level l - 1 gets m distinct s-tuples of level-l symbols, and no tuple is dealt to two
symbols, so the rules are unambiguous and the class is a function of the input.  A datum is a uniform class
expanded top-down by a uniform choice among the m productions at every node, so there are

    P_max = n_c * m^((s^L - 1) / (s - 1))                                  (distinct data; one choice per node)

of them, each equally likely.  The paper finds deep CNNs learn from P* ~ n_c m^L examples and shallow networks
need about P_max.

Two sources of rules, both dealing as the authors' code does (per level, the v^s tuples in lexicographic order,
shuffled; the symbols of level l - 1 that occur take m tuples each, in turn):

``"smaso"``
    a ``torch.Generator`` seeded with ``seed`` shuffles (platform independent, and fast for large v^s); the
    symbols that occur are dealt in increasing order.
``"pcsl"``
    the authors' public code (pcsl-epfl/hierarchy-learning, ``sample_hierarchical_rules``): Python's
    ``random.Random(seed)`` shuffles a list of the v^s tuples once per level, and the symbols are dealt in the
    order of ``list(set(...))`` over the symbols that occur, as that code does; the same seed gives the same
    rules (checked against rules that code drew, ``tests/data/rhm_pcsl_rules.json``).

A symbol that never occurs at a level (possible when n_c m < v, or m v > v^s) gets placeholder rules: the
next undealt tuples when there are enough, else the first ones; it has probability 0, so no datum uses them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .validation import LadderSpecError, _short

if TYPE_CHECKING:
    pass

__all__ = ["RHM_RULE_SOURCES", "RHMParams", "rhm_rules"]

#: the sources of rules :func:`rhm_rules` knows (module docstring)
RHM_RULE_SOURCES = ("smaso", "pcsl")
#: the most tuples (v^s) a level's shuffle holds in memory
MAX_TUPLES = 2**28


@dataclass(frozen=True)
class RHMParams:
    """An RHM's parameters in the paper's notation (module docstring), and the counts they fix.

    :param v: vocabulary: events of every level below the root.
    :param n_classes: n_c, the classes (the root's events).
    :param m: synonyms: productions per symbol.
    :param s: patch size: children per node.
    :param L: depth: levels below the root (s^L input positions).
    :param seed: the rules' seed.
    :param rules: the source of the rules, ``"smaso"`` or ``"pcsl"`` (module docstring).
    """

    v: int
    n_classes: int
    m: int
    s: int
    L: int
    seed: int = 0
    rules: str = "smaso"

    def __post_init__(self) -> None:
        for name, low in (("v", 1), ("n_classes", 2), ("m", 1), ("s", 2), ("L", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise LadderSpecError(f"{name}: expected an integer >= {low}, got {_short(value)}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise LadderSpecError(f"seed: expected a non-negative integer, got {_short(self.seed)}")
        if self.rules not in RHM_RULE_SOURCES:
            raise LadderSpecError(f"rules: expected one of {list(RHM_RULE_SOURCES)}, got {_short(self.rules)}")
        if self.n_classes > self.v:
            raise LadderSpecError(f"n_classes: at most v = {self.v} (a class is a symbol), got {self.n_classes}")
        if self.m * self.n_classes > self.v ** self.s:
            raise LadderSpecError(f"m: the n_c = {self.n_classes} classes need m * n_c = {self.m * self.n_classes} "
                                  f"distinct {self.s}-tuples, but only v^s = {self.v ** self.s} exist")
        if self.v ** self.s > MAX_TUPLES:
            raise LadderSpecError(f"v, s: v^s = {self.v ** self.s} tuples per level is more than {MAX_TUPLES}")

    @property
    def num_positions(self) -> int:
        """s^L: the input's positions (the ladder's leaves)."""
        return self.s ** self.L

    @property
    def num_data(self) -> int:
        """P_max = n_c m^((s^L - 1)/(s - 1)): the distinct data (a Python int: it overflows int64 soon)."""
        return self.n_classes * self.m ** ((self.s ** self.L - 1) // (self.s - 1))

    @property
    def p_star_scale(self) -> int:
        """n_c m^L: the paper's scale of the deep CNN's sample complexity P*."""
        return self.n_classes * self.m ** self.L


def _digits(codes: torch.Tensor, base: int, width: int) -> torch.Tensor:
    """Base-``base`` digits of ``codes`` ``(n,)``, most significant first: ``(n, width)`` int64."""
    powers = base ** torch.arange(width - 1, -1, -1, dtype=torch.int64)
    return (codes[:, None] // powers) % base


def _shuffled_codes(p: RHMParams, rng: torch.Generator | random.Random) -> torch.Tensor:
    """One level's v^s tuple codes (lexicographic order, first child most significant), shuffled."""
    n = p.v ** p.s
    if isinstance(rng, random.Random):  # the authors' shuffle: it depends only on the list's length
        order = list(range(n))
        rng.shuffle(order)
        return torch.tensor(order, dtype=torch.int64)
    return torch.randperm(n, generator=rng)


def _set_order(first_seen: list[int]) -> list[int]:
    """``list(set(values))`` as CPython orders it, for ``values`` whose distinct elements first occur in the
    order ``first_seen``: repeats leave a set unchanged, so this is the authors' ``list(set(paths))``."""
    return list(set(first_seen))


def rhm_rules(params: RHMParams) -> list[torch.Tensor]:
    """The RHM's rules, level by level top-down: ``rules[l - 1]`` ``(m_{l-1}, m, s)`` int64, row a the m
    productions of symbol a of level l - 1 (m_0 = n_c, else v), each an s-tuple of level-l symbols.

    Every symbol that occurs at level l - 1 gets m distinct tuples no other symbol gets (module docstring);
    one that never occurs gets placeholder tuples (it has probability 0)."""
    p = params
    rng: torch.Generator | random.Random
    if p.rules == "pcsl":
        rng = random.Random(p.seed)
    else:
        rng = torch.Generator().manual_seed(p.seed)
    out = []
    seen = list(range(p.n_classes))  # the symbols of the level above, in order of first occurrence
    for l in range(1, p.L + 1):
        parents = p.n_classes if l == 1 else p.v
        present = _set_order(seen) if p.rules == "pcsl" else sorted(seen)
        codes = _shuffled_codes(p, rng)
        need = p.m * len(present)
        if need > codes.numel():
            raise LadderSpecError(f"m: level {l} has {len(present)} symbols that occur, which need "
                                  f"{need} distinct {p.s}-tuples; only v^s = {codes.numel()} exist")
        tuples = _digits(codes, p.v, p.s)
        rules = torch.empty(parents, p.m, p.s, dtype=torch.int64)
        rules[torch.tensor(present)] = tuples[:need].reshape(len(present), p.m, p.s)
        absent = sorted(set(range(parents)) - set(present))
        spare = tuples[need:]
        for i, a in enumerate(absent):  # never used by a datum; distinct while undealt tuples last
            rows = spare[i * p.m: (i + 1) * p.m] if (i + 1) * p.m <= len(spare) else tuples[:p.m]
            rules[a] = rows
        out.append(rules)
        # first occurrences at level l: each symbol's tuples in the order its first occurrence is met
        nxt: dict[int, None] = {}
        for a in seen:
            nxt.update(dict.fromkeys(rules[a].reshape(-1).tolist()))
        seen = list(nxt)
    return out
