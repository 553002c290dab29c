"""The depth-separation experiment of the lecture notes (``docs/theory.md`` §2.3, seed ``001``: the theorem,
the students :func:`depth_separation` puts side by side, the departures and the recorded results).

L1 errors are measured on a fine grid (:func:`l1_error`) and pieces counted exactly
(:func:`smaso.depth.pieces.count_pieces`); :func:`piece_survey` counts the pieces of random, trained and
tent networks; the figures live in :mod:`smaso.plots.depth`.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn

from smaso.depth.pieces import count_pieces
from smaso.depth.training import DT, make_student, optimise
from teachers.tent import TentNetwork, tent_power

if TYPE_CHECKING:
    from teachers.engine import DaskEngine, SerialEngine

__all__ = [
    "DepthRow",
    "PieceRecord",
    "balanced_widths",
    "depth_separation",
    "format_table",
    "l1_error",
    "make_student",
    "optimise",
    "piece_survey",
    "train_student",
]

LECTURE_BOUND = 1 / 8


def balanced_widths(depth: int, nodes: int) -> tuple[int, ...]:
    """``nodes`` hidden units spread over ``depth`` layers as evenly as possible (first layers wider)."""
    if depth < 1 or nodes < depth:
        raise ValueError(f"need depth >= 1 and nodes >= depth, got depth={depth}, nodes={nodes}")
    base, extra = divmod(nodes, depth)
    return tuple(base + (i < extra) for i in range(depth))


def l1_error(net: nn.Module, k: int, n_grid: int | None = None) -> float:
    """integral_0^1 |tau^k - net| by the midpoint rule on a grid fine against the 2^k pieces."""
    if n_grid is None:
        n_grid = min(2**22, max(2**16, 64 * 2**k))
    x = (torch.arange(n_grid, dtype=DT) + 0.5) / n_grid
    with torch.no_grad():
        h = net.to(DT)(x[:, None]).reshape(-1)
    return float((h - tent_power(x, k)).abs().mean())


def train_student(net: nn.Module, k: int, *, steps: int = 3000, batch: int = 128, n_train: int = 4096, lr: float = 0.05,
                  frobenius: float = 1e-5, seed: int = 0, progress: bool = False, desc: str | None = None,
                  optimizer: str = "sgd", schedule: str = "constant") -> list[float]:
    """Minibatch SGD on mean (h(x) - tau^k(x))^2 + lambda sum ||W||_F^2, x ~ U[0, 1] (a fixed sample).

    :param progress: show a tqdm bar over the steps.
    :param desc: the bar's label (default: the target).
    :param optimizer: ``"sgd"`` (the lecture's, default) or ``"adam"`` (same ``lr``).
    :param schedule: ``"constant"`` (default) or ``"onecycle"`` (PyTorch's ``OneCycleLR`` with
        peak ``lr``: warm-up, then cosine decay to ~0).
    :returns: the training loss every ``steps // 20`` steps.
    """
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n_train, 1, generator=gen, dtype=DT)
    y = tent_power(x, k)
    weights = [m.weight for m in net.modules() if isinstance(m, nn.Linear)]

    def objective() -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.randint(0, n_train, (batch,), generator=gen)
        loss = ((net(x[idx]) - y[idx]) ** 2).mean()
        reg = frobenius * sum((W**2).sum() for W in weights) if frobenius else 0.0
        return loss + reg, loss

    history = optimise(net.parameters(), objective, steps=steps, lr=lr, optimizer=optimizer, schedule=schedule,
                       progress=progress, desc=desc or f"SGD on tau^{k}", summary=lambda h: f"loss={float(h):.3g}")
    return [float(h) for h in history]


class _Widths:
    """Depth and node count of a network described by its hidden ``widths``."""

    widths: tuple[int, ...]

    @property
    def depth(self) -> int:
        """Number of hidden layers."""
        return len(self.widths)

    @property
    def nodes(self) -> int:
        """Number of hidden nodes (the sum of the widths)."""
        return sum(self.widths)


@dataclass
class DepthRow(_Widths):
    """One student of the experiment.

    :ivar role: ``"theorem"`` (a depth-L student with <= 2^L nodes on tau^(L^2)), ``"control"``
        (the same student and training on the representable tau^L) or ``"deep"`` (depth k).
    :ivar k: the target tau^k of this row (L for controls).
    :ivar lower: the certified lower bound on the error of *any* network with at most ``bound``
        pieces against tau^k (:func:`smaso.depth.bracket.l1_lower_bound`; 0 when 2^k is reachable).
    :ivar class_lower, class_upper: the bracket on the best error of the theorem's class for this L
        (depth <= L, <= 2^L nodes) against this row's target (:func:`smaso.depth.bracket.class_bracket`).
    :ivar upper: the exact error of the explicit network with this row's widths
        (:func:`smaso.depth.bracket.architecture_upper_bound`): with ``lower``, the row's own bracket
        on the best error any network of its widths can reach against tau^k.
    :ivar restarts: the seeds tried, or the population's size (the row is the best of them).
    """

    L: int
    k: int
    student: str
    widths: tuple[int, ...]
    l1: float
    pieces: int
    bound: int
    l1_init: float = math.nan
    seconds: float = 0.0
    in_theorem: bool = True  # depth <= L and at most 2^L nodes
    net: nn.Module | None = field(default=None, repr=False, compare=False)
    role: str = "theorem"
    lower: float = math.nan
    class_lower: float = math.nan
    class_upper: float = math.nan
    restarts: int = 1
    training: str = ""
    upper: float = math.nan

    def inside(self, tol: float = 1e-9) -> bool:
        """Whether the error lies in the row's own bracket [``lower``, ``upper``]: at or above the
        certified bound (which every network of its widths obeys) and at or below the explicit
        member (which a good enough optimiser would match)."""
        return self.lower - tol <= self.l1 <= self.upper + tol


def _students(L: int) -> dict[str, tuple[int, ...]]:
    nodes = 2**L
    out = {"narrow (width 2)": (2,) * L, "balanced": balanced_widths(L, nodes), "shallow": (nodes,)}
    first: dict[tuple[int, ...], str] = {}
    for name, w in out.items():
        first.setdefault(w, name)  # the first name of a repeated widths tuple wins
    return {name: w for w, name in first.items()}


def _fit_restart(item: tuple, *, steps: int, frobenius: float, n_train: int,
                 bars: bool) -> tuple[float, nn.Module, float]:
    """One student from one seed (a task: any process): ``(l1 error, trained net, seconds)``.

    ``item = (L, k, name, widths, seed, optimizer, lr, init, schedule)``.
    """
    L, k, name, widths, seed, optimizer, lr, init, schedule = item
    t0 = time.perf_counter()
    net = make_student(widths, seed, init=init)
    train_student(net, k, steps=steps, lr=lr, frobenius=frobenius, seed=seed, n_train=max(n_train, 8 * 2**k),
                  progress=bars, desc=f"L={L} {name} seed {seed}", optimizer=optimizer, schedule=schedule)
    return l1_error(net, k), net, time.perf_counter() - t0


def _fit_population(item: tuple, *, steps: int, frobenius: float, n_train: int,
                    bars: bool) -> tuple[float, nn.Module, float]:
    """The best member of one population (a task: any process): ``(l1 error, its net, seconds)``.

    ``item = (L, k, name, widths, size, seed, lr, loss)``; Adam with a one-cycle schedule from the
    data-dependent init (:mod:`smaso.depth.population`).
    """
    from smaso.depth.population import StudentPopulation, population_l1_error, train_population

    L, k, name, widths, size, seed, lr, loss = item
    t0 = time.perf_counter()
    pop = StudentPopulation(widths, size, seed=seed, init="data")
    train_population(pop, k, steps=steps, lr=lr, loss=loss, frobenius=frobenius, seed=seed,
                     n_train=max(n_train, 8 * 2**k), progress=bars, desc=f"L={L} {name}: {size} restarts")
    best = pop.member(int(population_l1_error(pop, k).argmin()))
    return l1_error(best, k), best, time.perf_counter() - t0  # measured as every other row is


def _fit_deep(item: tuple, *, steps: int, deep_noise: float, deep_lr: float, n_train: int,
              bars: bool) -> DepthRow:
    """The perturbed deep tent student of :func:`depth_separation` for one L (a task: any process)."""
    L, k = item
    t0 = time.perf_counter()
    deep = TentNetwork(k, dtype=DT)
    gen = torch.Generator().manual_seed(1234 + L)
    noise = deep_noise / 2**k
    with torch.no_grad():
        for p in deep.parameters():
            p.mul_(1 + noise * torch.randn(p.shape, generator=gen, dtype=DT))
    init = l1_error(deep, k)
    train_student(deep, k, steps=steps, lr=deep_lr / 4**k, frobenius=0.0, seed=L, n_train=max(n_train, 8 * 2**k),
                  progress=bars, desc=f"L={L} deep tent")
    pc = count_pieces(deep, 0.0, 1.0)
    return DepthRow(L, k, f"deep: tent x(1+{noise:.2g}N), SGD (warm start)", (2,) * k, l1_error(deep, k), pc.count,
                    pc.bound, l1_init=init, seconds=time.perf_counter() - t0, in_theorem=False, net=deep,
                    role="deep", training=f"SGD lr {deep_lr:g}/4^k, {steps} steps")


def depth_separation(Ls: Sequence[int] = (1, 2, 3, 4), *, target: str = "L^2", steps: int = 3000,
                     seeds: Sequence[int] = (0, 1), lr: float = 0.05, frobenius: float = 1e-5, optimizer: str = "sgd",
                     controls: bool = True, deep_noise: float = 0.05, deep_steps: int | None = None,
                     deep_lr: float = 0.25, deep_random_widths: Sequence[int] = (2,),
                     deep_random_seeds: Sequence[int] = (0, 1, 2, 3), deep_random_lr: float = 1e-2,
                     n_train: int = 4096, population: int = 0, deep_population: int = 0, population_lr: float = 0.1,
                     population_loss: str = "l1", population_seed: int = 0, progress: bool = False,
                     engine: SerialEngine | DaskEngine | None = None) -> list[DepthRow]:
    """Run the experiment for each L (``docs/theory.md`` §2.3): theorem students with their certified
    bracket, controls on the representable tau^L, and deep students.

    :param target: ``"L^2"`` (the theorem: k = L^2) or ``"2L"`` (k = 2L, a cheaper deep target).
    :param seeds: restarts of every theorem and control student (the best is kept).
    :param optimizer: ``"sgd"`` (the lecture's, default) or ``"adam"``, with ``lr``, for the theorem
        and control students.
    :param controls: also train every theorem student, the same way, on tau^L (which each can represent).
    :param deep_noise: the warm-start deep student starts from the exact tent network with every weight
        and bias multiplied by (1 + deep_noise 2^-k N(0, 1)) (an error in layer j is amplified by up to
        2^(k - j) downstream); its SGD step is ``deep_lr`` 4^-k (the curvature scales like 4^k).
    :param deep_random_widths: widths w of the random-start deep students (depth k, width w), each
        trained by Adam (peak lr ``deep_random_lr``, one-cycle schedule) from the ``"spread"``
        initialisation for ``deep_steps`` steps, the best of ``deep_random_seeds``; ``()`` for none.
    :param population: R > 0 adds, for every theorem and control student, a row that is the best of
        R random restarts trained together (:class:`~smaso.depth.population.StudentPopulation`: the
        data-dependent init, Adam with peak lr ``population_lr`` and a one-cycle schedule,
        ``population_loss`` = ``"l1"`` or ``"squared"``, the same ``steps``, ``frobenius`` and
        ``n_train``); 0 (default) for none.  ``deep_population``: the same for every random-start deep
        width (``deep_steps`` steps); ``population_seed``: the populations' seed
        (:func:`~smaso.depth.population.member_seed`).
    :param progress: tqdm bars: one per training run here, or one over the runs on an engine.
    :param engine: ``None`` (every run here) or a :class:`~teachers.engine.SerialEngine` /
        :class:`~teachers.engine.DaskEngine`: every training run is one task, seeded on its own, so the
        rows are the same on any engine.  A row's ``seconds`` is the sum over its restarts.
    """
    from smaso.depth.bracket import architecture_upper_bound, class_bracket, l1_lower_bound

    if target not in ("L^2", "2L"):
        raise ValueError(f"target: expected 'L^2' or '2L', got {target!r}")
    if any(int(L) < 1 for L in Ls):
        raise ValueError(f"Ls: expected depths >= 1, got {list(Ls)}")
    if not seeds:
        raise ValueError("seeds: expected at least one seed")
    if optimizer not in ("sgd", "adam"):
        raise ValueError(f"optimizer: expected 'sgd' or 'adam', got {optimizer!r}")
    if any(isinstance(w, bool) or int(w) < 1 for w in deep_random_widths):
        raise ValueError(f"deep_random_widths: expected positive widths, got {list(deep_random_widths)}")
    if deep_random_widths and not deep_random_seeds:
        raise ValueError("deep_random_seeds: expected at least one seed for the random-start deep students")
    for name, value in (("population", population), ("deep_population", deep_population)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}: expected a non-negative integer (0: no population rows), got {value!r}")
    if isinstance(population_seed, bool) or not isinstance(population_seed, int) or population_seed < 0:
        raise ValueError(f"population_seed: expected a non-negative integer, got {population_seed!r}")
    if population_loss not in ("l1", "squared"):
        raise ValueError(f"population_loss: expected 'l1' or 'squared', got {population_loss!r}")
    if not (math.isfinite(population_lr) and population_lr > 0):
        raise ValueError(f"population_lr: expected a positive finite learning rate, got {population_lr!r}")
    from teachers.engine import get_engine

    run = get_engine(engine)
    inner = progress and engine is None
    bar = "depth separation" if progress and engine is not None else None
    deep_steps = deep_steps or steps
    ks = {int(L): int(L) ** 2 if target == "L^2" else 2 * int(L) for L in Ls}
    # (L, role, name, k, widths) -> the restarts: (L, k, name, widths, seed, optimizer, lr, init, schedule)
    groups: dict[tuple, list[tuple]] = {}
    for L, k in ks.items():
        for name, widths in _students(L).items():
            roles = [("theorem", k)] + ([("control", L)] if controls and L != k else [])
            for role, kk in roles:
                groups[(L, role, name, kk, widths)] = [(L, kk, name, widths, int(s), optimizer, lr, "torch",
                                                        "constant") for s in seeds]
        for w in deep_random_widths if k > L else ():
            name = f"deep: width {int(w)}, random start, Adam"
            groups[(L, "deep", name, k, (int(w),) * k)] = [
                (L, k, name, (int(w),) * k, int(s), "adam", deep_random_lr, "spread", "onecycle")
                for s in deep_random_seeds]
    small_keys = [key for key in groups if key[1] != "deep"]
    deep_keys = [key for key in groups if key[1] == "deep"]
    # one population per student: (L, role, name + ", population", k, widths) -> one item
    pop_items: dict[tuple, tuple] = {}
    for L, role, name, kk, widths in [*small_keys, *deep_keys]:
        size = deep_population if role == "deep" else population
        if size:
            pname = name.replace(", Adam", "") + ", population"
            pop_items[(L, role, pname, kk, widths)] = (L, kk, pname, widths, size, population_seed,
                                                       population_lr, population_loss)
    pop_small = [key for key in pop_items if key[1] != "deep"]
    pop_deep = [key for key in pop_items if key[1] == "deep"]
    small_fits = run.map(_fit_restart, [it for key in small_keys for it in groups[key]], steps=steps,
                         frobenius=frobenius, n_train=n_train, bars=inner, progress=bar)
    deep_fits = run.map(_fit_restart, [it for key in deep_keys for it in groups[key]], steps=deep_steps,
                        frobenius=frobenius, n_train=n_train, bars=inner, progress=bar)
    pop_fits = [*run.map(_fit_population, [pop_items[key] for key in pop_small], steps=steps, frobenius=frobenius,
                         n_train=n_train, bars=inner, progress=bar),
                *run.map(_fit_population, [pop_items[key] for key in pop_deep], steps=deep_steps,
                         frobenius=frobenius, n_train=n_train, bars=inner, progress=bar)]
    warm_rows = run.map(_fit_deep, [(L, ks[L]) for L in ks], steps=deep_steps, deep_noise=deep_noise,
                        deep_lr=deep_lr, n_train=n_train, bars=inner, progress=bar)
    best: dict[tuple, list] = {}
    fits = iter([*small_fits, *deep_fits])
    for key in [*small_keys, *deep_keys]:
        for _ in groups[key]:
            err, net, sec = next(fits)
            b = best.setdefault(key, [math.inf, None, 0.0])
            if err < b[0]:  # the first seed wins ties, as in a loop over the seeds
                b[0], b[1] = err, net
            b[2] += sec
    for key, (err, net, sec) in zip([*pop_small, *pop_deep], pop_fits, strict=True):
        best[key] = [err, net, sec]
    uppers = functools.cache(lambda kk, widths: architecture_upper_bound(kk, widths).l1)
    brackets = {(L, kk): class_bracket(L, kk) for (L, _, _, kk, _) in groups}
    brackets.update({(L, ks[L]): class_bracket(L, ks[L]) for L in ks})
    train_desc = f"{ {'sgd': 'SGD', 'adam': 'Adam'}[optimizer]} lr {lr:g}, {steps} steps"
    rows: list[DepthRow] = []
    for L, warm in zip(ks, warm_rows, strict=True):
        k = ks[L]
        for key, (err, net, sec) in best.items():
            if key[0] != L:
                continue
            _, role, name, kk, widths = key
            pc = count_pieces(net, 0.0, 1.0)
            bk = brackets[(L, kk)]
            if key in pop_items:
                training = (f"population: Adam lr {population_lr:g} one-cycle, {population_loss} loss, "
                            f"{deep_steps if role == 'deep' else steps} steps, data init")
                restarts = pop_items[key][4]
            else:
                training = (f"Adam lr {deep_random_lr:g} one-cycle, {deep_steps} steps, spread init"
                            if role == "deep" else train_desc)
                restarts = len(groups[key])
            rows.append(DepthRow(L, kk, name, widths, err, pc.count, pc.bound, seconds=sec, net=net,
                                 in_theorem=role != "deep", role=role,
                                 lower=l1_lower_bound(kk, pc.bound).value,
                                 class_lower=bk.lower.value, class_upper=bk.upper.l1,
                                 restarts=restarts, training=training, upper=uppers(kk, widths)))
        exact = TentNetwork(k, dtype=DT)
        pc = count_pieces(exact, 0.0, 1.0)
        bk = brackets[(L, k)]
        rows.append(DepthRow(L, k, "deep: exact tent", (2,) * k, l1_error(exact, k), pc.count, pc.bound,
                             in_theorem=False, net=exact, role="deep", lower=0.0, class_lower=bk.lower.value,
                             class_upper=bk.upper.l1, training="exact weights", upper=0.0))
        warm.lower, warm.class_lower, warm.class_upper, warm.upper = 0.0, bk.lower.value, bk.upper.l1, 0.0
        rows.append(warm)
    order = {"theorem": 0, "control": 1, "deep": 2}
    rows.sort(key=lambda r: (r.L, order[r.role]))
    return rows


@dataclass
class PieceRecord(_Widths):
    """The exact linear pieces of one network on [lo, hi] next to the breakpoint bound of its widths.

    :ivar kind: ``"random"`` (PyTorch's default init), ``"trained"`` (that init after SGD on tau^k)
        or ``"tent"`` (the exact depth-k width-2 tent network).
    """

    widths: tuple[int, ...]
    kind: str
    pieces: int
    bound: int
    seed: int | None = None
    k: int | None = None

    @property
    def label(self) -> str:
        """The widths as a short label: ``"2^3"`` for equal widths, ``"4x2"`` otherwise."""
        return _widths_label(self.widths)


def piece_survey(architectures: Sequence[Sequence[int]], seeds: Sequence[int] = (0, 1, 2), *, train_k: int | None = 6,
                 steps: int = 1000, lr: float = 0.05, frobenius: float = 0.0, optimizer: str = "sgd",
                 tent_ks: Sequence[int] = (), lo: float = 0.0, hi: float = 1.0, progress: bool = False,
                 engine: SerialEngine | DaskEngine | None = None) -> list[PieceRecord]:
    """Exact piece counts (:func:`smaso.depth.pieces.count_pieces`) of random, trained and tent networks.

    For every hidden-width tuple in ``architectures`` and every seed: the network at PyTorch's
    default init (``"random"``) and, unless ``train_k`` is None, the same network after ``steps``
    of :func:`train_student` (``optimizer``, ``lr``, ``frobenius``) on tau^train_k (``"trained"``).
    For every k in ``tent_ks``: the exact tent network (``"tent"``, 2^k pieces with depth k and width 2).

    :param architectures: hidden widths m_1..m_L of each network, e.g. ``[(8,), (4, 4), (2,) * 6]``.
    :param lo, hi: the interval the pieces are counted on.
    :param progress: a tqdm bar over the networks.
    :param engine: ``None`` (here) or a :class:`~teachers.engine.SerialEngine` /
        :class:`~teachers.engine.DaskEngine`: one task per (widths, seed), the records the same.
    """
    archs = [tuple(int(m) for m in w) for w in architectures]
    if not archs and not tent_ks:
        raise ValueError("architectures: expected at least one width tuple (or some tent_ks)")
    if any(not w or min(w) < 1 for w in archs):
        raise ValueError(f"architectures: every entry needs at least one positive width, got {archs}")
    if any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in tent_ks):
        raise ValueError(f"tent_ks: expected integers >= 1, got {list(tent_ks)}")
    if archs and not seeds:
        raise ValueError("seeds: expected at least one seed")
    if train_k is not None and (isinstance(train_k, bool) or not isinstance(train_k, int) or train_k < 0):
        raise ValueError(f"train_k: expected a non-negative integer or None, got {train_k!r}")
    from teachers.engine import get_engine

    items = [(widths, int(seed)) for widths in archs for seed in seeds]
    per_net = get_engine(engine).map(_survey_one, items, train_k=train_k, steps=steps, lr=lr, frobenius=frobenius,
                                     optimizer=optimizer, lo=lo, hi=hi,
                                     progress="counting pieces" if progress else None)
    records = [r for recs in per_net for r in recs]
    for k in tent_ks:
        pc = count_pieces(TentNetwork(int(k), dtype=DT), lo, hi)
        records.append(PieceRecord((2,) * int(k), "tent", pc.count, pc.bound, k=int(k)))
    return records


def _survey_one(item: tuple, *, train_k: int | None, steps: int, lr: float, frobenius: float, optimizer: str,
                lo: float, hi: float) -> list[PieceRecord]:
    """One network of :func:`piece_survey` at init and after training (a task: any process)."""
    widths, seed = item
    net = make_student(widths, seed)
    pc = count_pieces(net, lo, hi)
    out = [PieceRecord(widths, "random", pc.count, pc.bound, seed=seed)]
    if train_k is not None:
        train_student(net, train_k, steps=steps, lr=lr, frobenius=frobenius, seed=seed, optimizer=optimizer)
        pc = count_pieces(net, lo, hi)
        out.append(PieceRecord(widths, "trained", pc.count, pc.bound, seed=seed, k=train_k))
    return out


def _widths_label(widths: Sequence[int]) -> str:
    return f"{widths[0]}^{len(widths)}" if len(set(widths)) == 1 else "x".join(map(str, widths))


def _error(value: float) -> str:
    """An L1 error to 4 decimals, or to 2 significant digits below 1e-3 (so that 0.0000 means 0)."""
    return f"{value:.4f}" if value == 0 or value >= 1e-3 else f"{value:.1e}"


def format_table(rows: Sequence[DepthRow]) -> str:
    """A markdown table of the rows: each student's error next to its own bracket [certified lower
    bound, explicit member] for its widths, whether it lies inside, and the bracket of the theorem's
    class for the row's target."""
    head = ("| L | k | role | student | widths | nodes | exact pieces | bound | training | restarts | "
            "its bracket | class bracket | L1 error (init) | L1 error | inside its bracket |")
    lines = [head, "|" + "---|" * 15]
    for r in rows:
        init = "" if math.isnan(r.l1_init) else f"{r.l1_init:.4f}"
        bracket = "" if math.isnan(r.class_lower) else f"[{r.class_lower:.4f}, {r.class_upper:.4f}]"
        own = "" if math.isnan(r.lower) or math.isnan(r.upper) else f"[{r.lower:.4f}, {r.upper:.4f}]"
        inside = "" if not own else ("yes" if r.inside() else "above" if r.l1 > r.upper else "BELOW")
        lines.append(
            f"| {r.L} | {r.k} | {r.role} | {r.student} | {_widths_label(r.widths)} | {r.nodes} | {r.pieces} | "
            f"{r.bound} | {r.training} | {r.restarts} | {own} | {bracket} | {init} | {_error(r.l1)} | {inside} |"
        )
    return "\n".join(lines)
