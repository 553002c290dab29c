"""The constructors of :class:`teachers.ladder.Ladder` (a mixin, so that the class's own module stays about the
model): random tables on a uniform tree or on a given graph, the paper's summarization ladder, the fully
informative ladders of Thm 3 (on trees and on any graph), the factorized binary ladders of Thm 8/9, any tree,
and the convolution-like graphs with overlapping receptive fields."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .regions import (
    _conv1d_name,
    _conv_shapes,
    _parse_parents,
    _pattern_lookup,
    children_of,
    conv1d_parents,
    conv2d_parents,
)
from .validation import (
    BOTTOMUP,
    MAX_EVENTS,
    MAX_LOOKUP,
    MAX_REGIONS,
    MAX_TABLE_ENTRIES,
    MODES,
    TOPDOWN,
    Factorization,
    LadderSpecError,
    _as_int,
    _as_int_tuple,
    _check_concentration,
    _check_dense_sizes,
    _check_depth,
    _check_layout,
    _dirichlet,
    _is_int,
    _kron_vectors,
    _lookup_size,
    _pow,
    _random_layout,
    _rng,
    _short,
    make_emission,
)

if TYPE_CHECKING:
    from teachers.emission import Emission

    from .ladder import Ladder

__all__ = ["LadderConstructors"]


class LadderConstructors:
    """The classmethods that build a :class:`~teachers.ladder.Ladder` (each returns ``cls(...)``)."""

    @classmethod
    def random(cls: type[Any], depth: int = 3, branching: int | Sequence[int] = 2, events: int | Sequence = 4, *,
               parents: Sequence | None = None, mode: str = TOPDOWN, concentration: float = 1.0, seed: int = 0,
               emission: Emission | dict | str | None = None, sigma: float | None = None,
               name: str | None = None) -> Ladder:
        """A ladder with random tables, on a uniform tree or, with ``parents``, on that region graph.

        Top-down: P(y) and every row of every table ~ Dirichlet(concentration); small concentrations give
        peaked rows (events that carry the label), large ones near-uniform rows.  Bottom-up: leaf priors ~
        Dirichlet(concentration) and each region's lookup table a uniformly random map onto its events (on a
        tree, every event reachable).

        :param depth: levels below the root (>= 1); ignored with ``parents``.
        :param branching: children per region (an int, or one per level); ignored with ``parents``.
        :param events: events per region (an int, or ``depth + 1`` values, root first; with ``parents`` one
            entry per level, each an int or a list with one count per region).
        :param parents: a region graph (:class:`Ladder`'s ``parents``); its tables are drawn in region order.
        :param concentration: Dirichlet concentration, > 0.
        :param seed: seed of the tables (numpy's PCG64, platform independent).
        :param emission: ``"onehot"`` (default), ``"gaussian"`` (means one-hot, noise ``sigma``)
            or an :class:`~teachers.emission.Emission`.
        """
        if not isinstance(mode, str) or mode not in MODES:
            raise LadderSpecError(f"mode: expected 'topdown' or 'bottomup', got {_short(mode)}")
        if parents is not None:
            return cls._random_graph(events, parents, mode=mode, concentration=_check_concentration(concentration),
                                     seed=seed, sigma=sigma, emission=emission, name=name or "random-graph")
        depth, branching, events, concentration, rng, num_regions = _random_layout(depth, branching, events,
                                                                                    concentration, seed)
        _check_dense_sizes(num_regions, events, mode)
        emission = make_emission(emission, num_regions[-1], events[-1], sigma)
        name = name or f"random-{mode}-d{depth}"
        if mode == TOPDOWN:
            prior = _dirichlet(rng, concentration, (), events[0])
            tables = [_dirichlet(rng, concentration, (num_regions[l], events[l - 1]), events[l])
                      for l in range(1, depth + 1)]
            return cls(branching, events, mode=mode, prior=prior, tables=tables, emission=emission, name=name)
        leaf_prior = _dirichlet(rng, concentration, (num_regions[-1],), events[-1])
        lookup = []
        for l in range(depth):
            size = _reachable_lookup_size(events, branching, num_regions, l)
            tabs = np.empty((num_regions[l], size), dtype=np.int64)
            for r in range(num_regions[l]):
                vals = np.concatenate([np.arange(events[l]), rng.integers(0, events[l], size - events[l])])
                tabs[r] = rng.permutation(vals)
            lookup.append(tabs)
        return cls(branching, events, mode=mode, leaf_prior=leaf_prior, lookup=lookup, emission=emission, name=name)

    @classmethod
    def _random_graph(cls: type[Any], events: int | Sequence[int], parents: Sequence, *, mode: str,
                      concentration: float,
                      seed: int, sigma: float | None, emission: Emission | dict | str | None,
                      name: str | None) -> Ladder:
        """:meth:`random` on a given graph (the stream of ``GraphLadder.random`` before 0.3: same tables)."""
        layout = cls._layout_only(events, parents, mode)  # validates the graph and sizes before any table is drawn
        ev, parents = layout.region_events, layout.parents
        rng = _rng(seed)
        emission = make_emission(emission if emission is not None else None if sigma is None else "gaussian",
                                 layout.num_regions[-1], ev[-1][0], sigma)
        if mode == TOPDOWN:
            prior = rng.dirichlet([concentration] * ev[0][0])
            tables = [[torch.as_tensor(rng.dirichlet([concentration] * ev[l][i],
                                                     size=math.prod(ev[l - 1][p] for p in parents[l][i])))
                       for i in range(len(ev[l]))] for l in range(1, len(ev))]
            return cls(events=ev, parents=parents, mode=mode, prior=torch.as_tensor(prior), tables=tables,
                       emission=emission, name=name)
        children = children_of(parents, layout.num_regions)
        leaf_prior = [torch.as_tensor(rng.dirichlet([concentration] * m)) for m in ev[-1]]
        lookup = [[torch.as_tensor(rng.integers(0, ev[l][j], math.prod(ev[l + 1][c] for c in children[l][j])))
                   for j in range(len(ev[l]))] for l in range(len(ev) - 1)]
        return cls(events=ev, parents=parents, mode=mode, leaf_prior=leaf_prior, lookup=lookup, emission=emission,
                   name=name)

    @classmethod
    def fully_informative(cls: type[Any], depth: int = 2, branching: int | Sequence[int] = 2, leaf_events: int = 2, *,
                          parents: Sequence | None = None, concentration: float | None = None, seed: int = 0,
                          emission: Emission | dict | str | None = None, sigma: float | None = None,
                          name: str | None = None) -> Ladder:
        """The ladder whose every region holds all the information of its receptive field (Thm 3:
        P(x_rf(r) | z_r) is a delta for every region r), on a uniform tree or, with ``parents``, on any graph.

        Bottom-up.  On a tree each parent's event is the mixed-radix code of its children's tuple
        (``lookup`` the identity), so m_l = m_{l+1}^b_l.  On a graph the receptive field ``rf(r)`` of a region
        is the sorted tuple of the leaves below it, and its event is the joint pattern of the leaf events on
        ``rf(r)`` (mixed-radix over those leaves, first most significant): ``m_r = leaf_events ** len(rf(r))``.
        When children overlap (a leaf below two of them), configurations in which they disagree on a shared
        leaf cannot occur; their lookup entries are set to 0 and never matter.  Leaf priors are uniform, or
        Dirichlet(concentration) when ``concentration`` is given.

        :raises LadderSpecError: a bad argument, or a region whose event count exceeds ``MAX_EVENTS`` or whose
            lookup exceeds ``MAX_LOOKUP`` entries (the message names the region and the size).
        """
        if not _is_int(leaf_events) or not 2 <= leaf_events <= MAX_EVENTS:
            raise LadderSpecError(f"leaf_events: expected an integer in 2..{MAX_EVENTS} (the label needs >= 2 "
                                  f"classes), got {_short(leaf_events)}")
        if parents is not None:
            return cls._fully_informative_graph(parents, int(leaf_events), concentration=concentration, seed=seed,
                                                sigma=sigma, name=name)
        depth = _check_depth(depth)
        branching = _as_int_tuple(branching, "branching", depth)
        events = [int(leaf_events)]
        _check_layout(branching, [2] * (depth + 1))
        for l in reversed(range(depth)):
            events.insert(0, _pow(events[0], branching[l]))  # type: ignore[arg-type]  # None refused just below
            if events[0] is None or events[0] > MAX_EVENTS:
                raise LadderSpecError(
                    f"fully informative ladder: level {l} would need {events[1]}^{branching[l]} events "
                    f"(> {MAX_EVENTS}); lower depth, branching or leaf_events")
        num_regions = _check_layout(branching, events)
        _check_dense_sizes(num_regions, events, BOTTOMUP)
        rng = _rng(seed)
        if concentration is None:
            leaf_prior = np.full(events[-1], 1.0 / events[-1])
        else:
            leaf_prior = _dirichlet(rng, _check_concentration(concentration), (num_regions[-1],), events[-1])
        lookup = [np.arange(events[l]) for l in range(depth)]  # code -> itself: the tuple is the event
        return cls(branching, events, mode=BOTTOMUP, leaf_prior=leaf_prior, lookup=lookup,
                   emission=make_emission(emission, num_regions[-1], events[-1], sigma),
                   name=name or f"fully-informative-d{depth}")

    @classmethod
    def _fully_informative_graph(cls: type[Any], parents: Sequence, leaf_events: int, *, concentration: float | None,
                                 seed: int,
                                 sigma: float | None, name: str | None) -> Ladder:
        parents, num_regions = _parse_parents(parents)
        m_leaf, depth = leaf_events, len(parents) - 1
        children = children_of(parents, num_regions)
        rf: list[list[tuple[int, ...]]] = [[] for _ in range(depth)] + [[(i,) for i in range(num_regions[-1])]]
        events: list[list[int]] = [[] for _ in range(depth)] + [[m_leaf] * num_regions[-1]]
        lookups: list[list[torch.Tensor]] = [[] for _ in range(depth)]
        log_m = math.log2(m_leaf)
        for l in reversed(range(depth)):
            for i, cs in enumerate(children[l]):
                field_ = tuple(sorted({leaf for c in cs for leaf in rf[l + 1][c]}))
                if len(field_) * log_m > math.log2(MAX_EVENTS) + 1e-9:
                    raise LadderSpecError(
                        f"events[{l}][{i}]: region {l}.{i} sees {len(field_)} leaves, so a fully informative "
                        f"ladder needs {m_leaf}^{len(field_)} events (more than {MAX_EVENTS}); use fewer leaves "
                        "below it or fewer leaf_events")
                n_conf = sum(len(rf[l + 1][c]) for c in cs)  # the lookup has m_leaf ** n_conf entries
                if n_conf * log_m > math.log2(MAX_LOOKUP) + 1e-9:
                    raise LadderSpecError(
                        f"lookups[{l}][{i}]: region {l}.{i} has {len(cs)} children seeing {n_conf} leaves in all "
                        f"(with repeats), so its lookup needs {m_leaf}^{n_conf} entries (more than {MAX_LOOKUP}); "
                        "use less overlap, fewer leaves or fewer leaf_events")
                rf[l].append(field_)
                events[l].append(m_leaf ** len(field_))
                lookups[l].append(torch.from_numpy(_pattern_lookup(field_, [rf[l + 1][c] for c in cs], m_leaf)))
        rng = _rng(seed)
        if concentration is None:
            leaf_prior = torch.full((num_regions[-1], m_leaf), 1.0 / m_leaf, dtype=torch.float64)
        else:
            leaf_prior = torch.as_tensor(_dirichlet(rng, _check_concentration(concentration),
                                                    (num_regions[-1],), m_leaf))
        emission = make_emission(None if sigma is None else "gaussian", num_regions[-1], m_leaf, sigma)
        return cls(events=events, parents=parents, mode=BOTTOMUP, leaf_prior=leaf_prior, lookup=lookups,
                   emission=emission, name=name or f"fully-informative-graph-d{depth}")

    @classmethod
    def factorized_binary(cls: type[Any], depth: int = 2, branching: int | Sequence[int] = 2,
                          factors: Sequence[int] = (1, 2, 2), *, concentration: float = 1.0, seed: int = 0,
                          emission: Emission | dict | str | None = None, sigma: float | None = None,
                          name: str | None = None) -> Ladder:
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
            tables.append(np.stack([_kron_vectors(ft[r]) for r in range(num_regions[l])]))
        fac = Factorization(tuple(factors), torch.as_tensor(root_f), tuple(factor_tables))
        return cls(branching, events, mode=TOPDOWN, prior=prior, tables=tables,
                   emission=make_emission(emission, num_regions[-1], events[-1], sigma),
                   name=name or f"factorized-binary-d{depth}", factorization=fac)

    @classmethod
    def summarization(cls: type[Any], depth: int = 3, branching: int | Sequence[int] = 2,
                      events: int | Sequence[int] = 4, *,
                      concentration: float = 2.0, seed: int = 0, emission: Emission | dict | str | None = None,
                      sigma: float | None = None,
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
            size = _reachable_lookup_size(events, branching, num_regions, l)
            balanced = np.arange(size) % events[l]  # each event size // m or size // m + 1 times
            lookup.append(np.stack([rng.permutation(balanced) for _ in range(num_regions[l])]))
        return cls(branching, events, mode=BOTTOMUP, leaf_prior=leaf_prior, lookup=lookup,
                   emission=make_emission(emission, num_regions[-1], events[-1], sigma),
                   name=name or f"summarization-d{depth}")

    @classmethod
    def rhm(cls: type[Any], v: int, n_classes: int, m: int, s: int, L: int, seed: int = 0, *, rules: str = "smaso",
            emission: Emission | dict | str | None = None, sigma: float | None = None,
            name: str | None = None) -> Ladder:
        """The Random Hierarchy Model of Petrini et al. (2024; :mod:`teachers.rhm`): a top-down uniform tree of
        depth ``L`` and branching ``s``, the class uniform over ``n_classes``, and every region drawing its ``s``
        children jointly, uniformly among its symbol's ``m`` productions (:mod:`teachers.productions`).  The
        input is s^L one-hot positions of ``v`` symbols (or noisy ones: ``emission`` / ``sigma``).

        Memory is in the productions' size: ``m_{l-1} * m * s`` rules per level (shared by its regions), plus the
        children's marginal tables ``R_l * v * v`` that the pairwise statistics read.

        :param v, n_classes, m, s, L: the paper's vocabulary, classes n_c, synonyms, patch size and depth.
        :param seed: the rules' seed.
        :param rules: ``"smaso"`` (a torch generator deals them) or ``"pcsl"`` (the same rules, from the same
            seed, as the authors' public code).
        :returns: the ladder; ``ladder.rhm_params`` holds the parameters (and P_max, n_c m^L).
        """
        from .rhm import RHMParams, rhm_rules

        params = RHMParams(v, n_classes, m, s, L, seed, rules)
        branching, events = (s,) * L, (n_classes, *(v,) * L)
        _check_layout(branching, events)
        ladder = cls(branching, events, prior=np.full(n_classes, 1.0 / n_classes), tables=[None] * L,
                     productions=rhm_rules(params),
                     emission=make_emission(emission, s**L, v, sigma),
                     name=name or f"rhm(v={v}, n_c={n_classes}, m={m}, s={s}, L={L}, seed={seed})")
        ladder.rhm_params = params
        return ladder

    @classmethod
    def leaky(cls: type[Any], eps: float, *, depth: int = 2, branching: int | Sequence[int] = 2,
              events: int | Sequence[int] = 3,
              concentration: float = 1.0, seed: int = 0, emission: Emission | dict | str | None = None,
              sigma: float | None = None,
              name: str | None = None) -> Ladder:
        """A top-down ladder whose focus of knowledge (Thm 2) fails on one edge by an amount set by ``eps``.

        The tables are :meth:`random`'s with the same ``depth``, ``branching``, ``events``, ``concentration`` and
        ``seed`` (the same stream), on the uniform tree's region graph with one extra edge: leaf
        ``k = branching[-1] - 1`` (the last child of region 0 of level d-1, ``c``) has a second parent, region 1
        of level d-1 (``c'``, c's sibling under region 0 of level d-2, ``a``), and its table is

            P(z_k | z_c, z_c') = (1 - eps) p0(z_k) + eps [z_k = z_c' mod m_d],

        p0 the law of ``z_c' mod m_d`` (so P(z_k) does not depend on eps): with probability eps the leaf shows
        its uncle's event, otherwise it is noise independent of every event.  Then x_c depends on z_a beyond z_c,
        through z_c', and focus fails on the edge a -> c (level d-1, parent 0, child 0) only:
        I(x_c; z_a | z_c) = I(x_k; z_a | z_c) is 0 at eps = 0, grows with eps (the eps-channel is the
        eps'-channel followed by a garbling for eps < eps', so it cannot decrease) and reaches
        I(z_c' mod m_d; z_a | z_c) at eps = 1; :func:`teachers.leak.focus_by_edge` computes it exactly.  Every
        other edge keeps I_focus = 0 at every eps: x_k depends on z_c' alone, so the field of c' meets a only
        through z_c', and every other field is the tree's.  At eps = 0 the ladder is a tree ladder in
        distribution (leaf k a noise leaf under c) on the same graph, so a student's architecture and the
        sample's random draws are the same at every eps (``sample_ladder`` with one seed couples the samples).

        Why noise and not (1 - eps) P0(z_k | z_c) + eps Q(z_k | z_c'): x_k is in the field of c' too, and through
        z_c it would depend on z_a beyond z_c' at every eps < 1 -- a reverse leak on the edge a -> c', nonzero at
        eps = 0.  Why a copy of z_c' and not a random table Q: the leak is then as large as c' and c allow
        (0.03-0.4 nats at eps = 1 over seeds, against 0-0.1 with the leaf's random table; 0.273 nats with the
        defaults, ``tests/test_leak_teacher.py``).

        :param eps: the leak, a number in [0, 1].
        :param depth: levels below the root (>= 2).
        :param branching: as in :meth:`random`; level d-2's regions need >= 2 children (c and c').
        :param events: as in :meth:`random`.
        :param concentration: Dirichlet concentration of the prior and of every table, > 0.
        :param seed: seed of the tables (numpy's PCG64, platform independent).
        :param emission: ``"onehot"`` (default), ``"gaussian"`` (noise ``sigma``) or an
            :class:`~teachers.emission.Emission`.
        :raises LadderSpecError: (a ValueError) ``eps`` not a number in [0, 1], a bad layout, ``depth < 2``, or
            fewer than 2 children per region at level d-2; the message names the argument.
        """
        if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, (int, float, np.integer, np.floating)) or not (
                0.0 <= float(eps) <= 1.0):
            raise LadderSpecError(f"eps: expected a number in [0, 1] (the leak of focus), got {_short(eps)}")
        eps = float(eps)
        base = cls.random(depth, branching, events, mode=TOPDOWN, concentration=concentration, seed=seed)
        d, b, m = base.depth, base.branching, base.events
        if d < 2:
            raise LadderSpecError(f"depth: a leaky ladder needs depth >= 2 (the leaf's second parent is its parent's "
                                  f"sibling), got {d}")
        if b[d - 2] < 2:
            raise LadderSpecError(f"branching[{d - 2}]: a leaky ladder needs >= 2 children per region of level {d - 2} "
                                  f"(the leaky leaf's parent and its sibling), got {b[d - 2]}")
        k = b[d - 1] - 1
        parents = [list(lvl) for lvl in base.parents]
        parents[d][k] = (0, 1)
        # base is Ladder.random's: its children are drawn independently (no productions), so its tables are the law
        marg = base.prior  # P(z_c') down the path root -> c' (region 1 of level d-1)
        for l in range(1, d):
            marg = marg @ base.tables[l - 1][(1 if l == d - 1 else 0)]
        copy = torch.zeros(m[d - 1], m[d], dtype=torch.float64)
        copy[torch.arange(m[d - 1]), torch.arange(m[d - 1]) % m[d]] = 1.0  # z_c' -> the leaf event it shows
        p0 = marg @ copy
        leak = (1.0 - eps) * p0[None, None] + eps * copy[None, :, :]  # [z_c, z_c', z_k]
        tables = [list(t.unbind(0)) for t in base.tables]
        tables[d - 1][k] = leak.expand(m[d - 1], -1, -1).reshape(m[d - 1] ** 2, m[d]).clone()
        num_leaves = base.num_regions[-1]
        return cls(events=list(m), parents=parents, mode=TOPDOWN, prior=base.prior, tables=tables,
                   emission=make_emission(emission, num_leaves, m[d], sigma), name=name or f"leaky-d{d}-eps{eps:g}")

    @classmethod
    def default(cls: type[Any], emission: Emission | dict | str | None = None, sigma: float | None = None,
                mode: str = BOTTOMUP) -> Ladder:
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

    # ------------------------------------------------------------------ constructors (region graphs)
    @classmethod
    def tree(cls: type[Any], branching: Sequence[Sequence[int]], events: Sequence[int | Sequence[int]],
             **kwargs: Any) -> Ladder:
        """Any tree: ``branching[l][i]`` children for region i of level l (top first; level 0 is the one root),
        the children of a level numbered in their parents' order.  ``events[l]``: one event count for every
        region of level l, or a list with one per region (the leaves share one count, as every leaf emission
        does).

        :param kwargs: :meth:`random`'s ``mode``, ``concentration``, ``seed``, ``sigma``, ``name``.
        :raises LadderSpecError: a branching below 1, a level whose region count disagrees with the level above's
            branching, or ``events`` of the wrong length.
        """
        if isinstance(branching, (str, bytes)) or not isinstance(branching, Sequence) or not branching:
            raise LadderSpecError(f"branching: expected one list of children counts per level above the leaves, "
                                  f"got {branching!r}")
        sizes = [1]
        parents: list[tuple[tuple[int, ...], ...]] = [((),)]
        for l, lvl in enumerate(branching):
            if isinstance(lvl, (str, bytes)) or not isinstance(lvl, Sequence) or len(lvl) != sizes[-1]:
                raise LadderSpecError(f"branching[{l}]: expected {sizes[-1]} children counts (one per region of "
                                      f"level {l}), got {lvl!r}")
            counts = []
            for i, b in enumerate(lvl):
                if not _is_int(b) or b < 1:
                    raise LadderSpecError(f"branching[{l}][{i}]: expected an integer >= 1, got {b!r}")
                counts.append(int(b))
            if sum(sizes) + sum(counts) > MAX_REGIONS:
                raise LadderSpecError(f"branching: more than {MAX_REGIONS} regions")
            parents.append(tuple((i,) for i, b in enumerate(counts) for _ in range(b)))
            sizes.append(sum(counts))
        if isinstance(events, (str, bytes)) or not isinstance(events, Sequence) or len(events) != len(sizes):
            raise LadderSpecError(f"events: expected {len(sizes)} entries (levels 0..{len(sizes) - 1}), got {events!r}")
        kwargs.setdefault("name", "tree")
        return cls.random(events=list(events), parents=parents, **kwargs)

    @classmethod
    def conv1d(cls: type[Any], width: int, kernels: Sequence[int], strides: Sequence[int], events: Sequence[int],
               **kwargs: Any) -> Ladder:
        """A 1-D convolution-like ladder: ``width`` leaves; level by level upwards, region j covers regions
        ``[j s, j s + k)`` of the level below (``kernels[t]``, ``strides[t]`` from the leaves up), so regions
        below have several parents when ``s < k``.  The top level must come out as one region.

        :param events: events per level, top first (``len(kernels) + 1`` entries).
        :param kwargs: :meth:`random`'s ``mode``, ``concentration``, ``seed``, ``sigma``, ``name``.
        """
        kernels, strides, events = _conv_sizes(kernels, strides, events)
        if len(kernels) != len(strides) or len(events) != len(kernels) + 1:
            raise LadderSpecError(f"conv1d: expected len(kernels) == len(strides) == len(events) - 1, got "
                                  f"{len(kernels)}, {len(strides)}, {len(events)}")
        _check_conv_tables(_conv_shapes((_as_int(width, "width"),), kernels, strides, "conv1d"), kernels, strides,
                           events, kwargs.get("mode", TOPDOWN))
        parents = conv1d_parents(width, kernels, strides)
        kwargs.setdefault("name", _conv1d_name(int(width), kernels, strides))
        return cls.random(events=list(events), parents=parents, **kwargs)

    @classmethod
    def conv2d(cls: type[Any], shape: tuple[int, int], kernels: Sequence[int], strides: Sequence[int],
               events: Sequence[int],
               **kwargs: Any) -> Ladder:
        """A 2-D convolution-like ladder on an ``(H, W)`` grid of leaves (row-major region order): square
        ``k x k`` windows with stride ``s`` per level, from the leaves up; the top must be one region."""
        kernels, strides, events = _conv_sizes(kernels, strides, events)
        if len(kernels) != len(strides) or len(events) != len(kernels) + 1:
            raise LadderSpecError("conv2d: expected len(kernels) == len(strides) == len(events) - 1")
        _check_conv_tables(_conv_shapes(_as_int_tuple(shape, "shape", 2), kernels, strides, "conv2d"), kernels,
                           strides, events, kwargs.get("mode", TOPDOWN))
        parents = conv2d_parents(shape, kernels, strides)
        kwargs.setdefault("name", f"conv2d-{int(shape[0])}x{int(shape[1])}")
        return cls.random(events=list(events), parents=parents, **kwargs)

    @classmethod
    def fully_informative_conv1d(cls: type[Any], width: int, kernels: Sequence[int], strides: Sequence[int],
                                 leaf_events: int = 2, **kwargs: Any) -> Ladder:
        """:meth:`fully_informative` on :meth:`conv1d`'s graph (same ``width``, ``kernels``, ``strides``).

        :param kwargs: :meth:`fully_informative`'s ``concentration``, ``seed``, ``sigma``, ``name``.
        """
        kwargs.setdefault("name", "fully-informative-" + _conv1d_name(width, kernels, strides))
        return cls.fully_informative(parents=conv1d_parents(width, kernels, strides), leaf_events=leaf_events,
                                     **kwargs)

    @classmethod
    def fully_informative_conv2d(cls: type[Any], shape: tuple[int, int], kernels: Sequence[int], strides: Sequence[int],
                                 leaf_events: int = 2, **kwargs: Any) -> Ladder:
        """:meth:`fully_informative` on :meth:`conv2d`'s graph (an ``(H, W)`` grid of leaves, row-major).

        :param kwargs: :meth:`fully_informative`'s ``concentration``, ``seed``, ``sigma``, ``name``.
        """
        kwargs.setdefault("name", f"fully-informative-conv2d-{shape[0]}x{shape[1]}")
        return cls.fully_informative(parents=conv2d_parents(shape, kernels, strides), leaf_events=leaf_events,
                                     **kwargs)


def _conv_sizes(kernels: Sequence[int], strides: Sequence[int], events: Sequence[int]) -> tuple[tuple[int, ...],
                tuple[int, ...], tuple[int, ...]]:
    """:meth:`~LadderConstructors.conv1d`'s and ``conv2d``'s ``kernels``, ``strides`` and ``events`` as integers
    (integral floats accepted; 2.5 or a bool a LadderSpecError naming the argument)."""
    return _as_int_tuple(kernels, "kernels"), _as_int_tuple(strides, "strides"), _as_int_tuple(events, "events")


def _check_conv_tables(shapes: list[tuple[int, ...]], kernels: tuple[int, ...], strides: tuple[int, ...],
                       events: tuple[int, ...], mode: str) -> None:
    """The largest table (top-down) or lookup (bottom-up) of a convolution-like graph, computed from its
    arguments before its parent lists are built: ``shapes`` from :func:`~teachers.regions._conv_shapes` (leaves
    first), ``kernels`` and ``strides`` from the leaves up, ``events`` top first.  Limits as on a uniform tree."""
    depth = len(kernels)
    for t, (k, s) in enumerate(zip(kernels, strides, strict=True)):
        below, above = depth - t, depth - t - 1  # level indices, top first
        m_above, m_below = events[above], events[below]
        if mode == TOPDOWN:  # a region below has up to ceil(k / s) parents per dimension
            p = math.prod(min(-(-k // s), n) for n in shapes[t + 1])
            rows = _pow(m_above, p)
            if rows is None or rows * m_below > MAX_TABLE_ENTRIES:
                raise LadderSpecError(
                    f"tables[{below - 1}]: events[{above}]^(parents per region) x events[{below}] = {m_above}^{p} x "
                    f"{m_below} = {rows * m_below if rows is not None else 'over 2^64'} entries per region exceeds "
                    f"{MAX_TABLE_ENTRIES}; use fewer events, a smaller kernel or a larger stride")
        elif mode == BOTTOMUP:  # a region above has k children per dimension
            c = k ** len(shapes[t])
            size = _pow(m_below, c)
            if size is None or size > MAX_LOOKUP:
                raise LadderSpecError(
                    f"lookup[{above}]: events[{below}]^(children per region) = {m_below}^{c} = "
                    f"{size or 'over 2^64'} child configurations per region exceeds {MAX_LOOKUP}; use fewer events "
                    "or a smaller kernel")


def _reachable_lookup_size(events: Sequence[int], branching: Sequence[int], num_regions: Sequence[int], l: int) -> int:
    """:func:`~teachers.validation._lookup_size`, which must also reach every event of level l."""
    size = _lookup_size(events, branching, num_regions, l)
    if size < events[l]:
        raise LadderSpecError(f"events[{l}]: {events[l]} parent events cannot all be reached from "
                              f"{events[l + 1]}^{branching[l]} = {size} child configurations")
    return size
