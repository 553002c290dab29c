"""Brute force over every derivation of a small top-down uniform-tree ladder, productions included: the
reference the RHM tests compare the library's statistics against.  Written from the definition (a region's
children are drawn jointly by one production, or one by one from their tables), with no library code but the
ladder's fields."""

from __future__ import annotations

import itertools

import torch

from teachers import Ladder


def enumerate_derivations(ladder: Ladder) -> tuple[torch.Tensor, torch.Tensor]:
    """Every derivation: ``z`` ``(N, total_regions)`` int64 events level by level, and their probabilities ``(N,)``
    float64 (summing to 1; a derivation of probability 0 is dropped).  Exponential: small ladders only."""
    z = torch.arange(ladder.events[0]).reshape(-1, 1)
    p = ladder.prior.clone()
    levels = [z]
    for l in range(ladder.depth):
        parent = levels[-1]  # (N, R_l)
        r_l, b = parent.shape[1], ladder.branching[l]
        joint = ladder.productions[l] if ladder.productions is not None else None
        rows, probs = [], []
        if joint is not None:
            rules, pr = joint.region_rules(r_l), joint.region_probs(r_l)  # (R, m, K, b), (R, m, K)
            choices = itertools.product(range(joint.num_productions), repeat=r_l)
            for ks in choices:
                kk = torch.tensor(ks)
                regions = torch.arange(r_l)
                child = rules[regions, parent, kk]  # (N, R, b)
                rows.append(child.reshape(len(parent), r_l * b))
                probs.append(pr[regions, parent, kk].prod(-1))
        else:
            table = ladder.tables[l]  # (R_{l+1}, m_l, m_{l+1})
            m_child = ladder.events[l + 1]
            for cs in itertools.product(range(m_child), repeat=r_l * b):
                c = torch.tensor(cs)
                own = parent.repeat_interleave(b, dim=1)  # each child's parent event
                rows.append(c.expand(len(parent), -1))
                probs.append(table[torch.arange(r_l * b), own, c].prod(-1))
        new = torch.cat(rows)
        keep_p = torch.cat(probs) * p.repeat(len(rows))
        levels = [lv.repeat(len(rows), 1) for lv in levels] + [new]
        keep = keep_p > 0
        levels, p = [lv[keep] for lv in levels], keep_p[keep]
    return torch.cat(levels, dim=1), p
