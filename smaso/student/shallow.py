"""The shallow fully connected student (the RHM paper's shallow baseline) as a ladder student, and test error.

Petrini et al. (arXiv 2307.02129) compare deep CNNs with a network of one hidden layer on the flattened one-hot
input.  Here that network is the one student class of the project (:class:`~smaso.student.network.LadderStudent`)
on the teacher's *flat view* (:func:`flat_ladder`): a ladder of depth 1 whose root is the teacher's root and whose
children are all of the teacher's leaves.  With a readout group of ``hidden`` nodes
(:mod:`smaso.student.readout`) the student is then exactly

    f_0(x) = W_2^T s(u) u + b_2,   u = W_1^T vec(x) + b_1,   W_1: (R_d dim, hidden),  W_2: (hidden, n_c),

one hidden layer seeing the whole input (a region's block W_{leaf, root} of the flat ladder is the rows of W_1
that read that leaf), a linear map to the classes.  So its training (Eq 2's explicit backward,
:func:`~smaso.student.training.train_ladder_student` or :func:`~smaso.student.compare.compare_student` with its
:class:`~smaso.student.config.TrainingConfig`), its frequency statistics (Eq 6), the reformulation (Eq 9), Thm 2's
measured conditions and the event alignment are the ladder student's, on the flat view: the hidden group is the
top region, whose event is the class (the readout ladder's z_0 = z_1 = y).

Where the framework's reformulation does not apply, and why (also in ``docs/library.md``):

- The flat view keeps the teacher's *pairwise* laws exactly: its table of leaf j is P(z_j | y), the product of
  the teacher's tables along the path from the root to j (right also where the teacher draws children jointly:
  the tables then hold the children's marginals, and a path's product is the pairwise law).  What it does not keep
  is the joint law of the leaves given y (in the teacher they are correlated through the intermediate events; in
  the flat view they would be independent given y).  The sampler and the Pyro model refuse the flat ladder
  (``Ladder.pairwise_view_of``): sample the teacher and map its rows with :func:`flat_sample`.  Everything the
  reformulation reads is pairwise (P(z_alpha, z_beta) along an edge), so it reads the flat view correctly; the
  teacher's intermediate events have no region in it.
- The hidden nodes have no latent event of their own below the class: their receptive field is the whole input,
  whose summary is y.  The question "do hidden nodes align with the RHM's symbols of level l" has no meaning for
  them (their alignment is with the class only); Thm 2's focus holds trivially at the leaves (x_j is a function of
  z_j) and the decorrelation conditions are measured, not assumed.
"""

from __future__ import annotations

import math

import torch

from smaso.student.batched import classification_error
from smaso.student.network import LadderStudent, _check_int, _check_student
from teachers.ladder import Ladder, _check_ladder
from teachers.sampling import LadderSample

__all__ = ["error_rate", "flat_ladder", "flat_sample", "shallow_student"]


def _leaf_ancestors(ladder: Ladder) -> list[torch.Tensor]:
    """``anc[l]`` ``(R_d,)``: the region of level l above each leaf (l = 1..d; ``anc[d]`` the leaves themselves);
    a ValueError where a region has several parents (a region graph has no unique path to the root)."""
    d = ladder.depth
    anc = [torch.zeros(0, dtype=torch.int64)] * (d + 1)
    anc[d] = torch.arange(ladder.num_regions[d])
    for l in range(d, 1, -1):
        parents = ladder.parents[l]
        if any(len(p) != 1 for p in parents):
            raise ValueError(f"ladder: the flat view needs a tree (one parent per region); level {l} has regions "
                             "with several parents (a region graph)")
        parent = torch.tensor([p[0] for p in parents], dtype=torch.int64)
        anc[l - 1] = parent[anc[l]]
    return anc


def flat_ladder(ladder: Ladder) -> Ladder:
    """The teacher's flat view: depth 1, the root (its events and prior) over every leaf of ``ladder`` (its events
    and emission), leaf j's table the exact pairwise law P(z_j | z_0) ``(m_0, m_d)`` (module docstring).

    Its leaves are independent given the root, the teacher's are not: it carries the teacher's pairwise statistics
    for the student built on it, never its data (map the teacher's rows with :func:`flat_sample`).

    :param ladder: a top-down tree (one parent per region); a region graph or a bottom-up ladder is a ValueError.
    :returns: the flat ladder (named ``flat(<teacher's name>)``).
    """
    _check_ladder(ladder)
    if ladder.region_tables is None:
        raise ValueError("ladder: the flat view needs a top-down ladder (tables P(child | parent)); this one is "
                         "bottom-up")
    d = ladder.depth
    anc = _leaf_ancestors(ladder)
    m = [ladder.region_events[l][0] for l in range(d + 1)]
    if any(len(set(ev)) != 1 for ev in ladder.region_events):
        raise ValueError("ladder: the flat view needs every region of a level to have the same number of events")
    # P(z_j | z_0) = T_1[a_1(j)] T_2[a_2(j)] ... T_d[j]: a batched product over the leaves (float64, exact)
    path = torch.eye(m[0], dtype=torch.float64).expand(ladder.num_regions[d], m[0], m[0])
    for l in range(1, d + 1):
        tables = torch.stack([t.to(torch.float64) for t in ladder.region_tables[l]])  # (R_l, m_{l-1}, m_l)
        path = torch.bmm(path, tables[anc[l]])
    R = ladder.num_regions[d]
    flat = Ladder(events=[[m[0]], [m[d]] * R], parents=[[()], [(0,)] * R], prior=ladder.prior,
                  tables=[[path[j] for j in range(R)]], emission=ladder.emission, name=f"flat({ladder.name})")
    flat.pairwise_view_of = ladder.name  # its leaves are independent given y, the teacher's are not: never sampled
    return flat


def flat_sample(sample: LadderSample, flat: Ladder | None = None) -> LadderSample:
    """A teacher's sample as rows of its flat view: the same inputs and labels, the events of the root and the
    leaves only (``z`` ``(N, 1 + R_d)``).

    :param flat: the teacher's :func:`flat_ladder` (built when None; pass it to share one across samples).
    """
    if not isinstance(sample, LadderSample):
        raise TypeError(f"sample: expected a LadderSample, got {type(sample).__name__}")
    teacher = sample.ladder
    flat = flat_ladder(teacher) if flat is None else _check_ladder(flat)
    d, R = teacher.depth, teacher.num_regions[teacher.depth]
    if flat.depth != 1 or flat.num_regions[1] != R or flat.emission.dim != teacher.emission.dim:
        raise ValueError(f"flat: expected the flat view of the sample's ladder (depth 1, {R} leaves), got a ladder "
                         f"of depth {flat.depth} with {flat.num_regions[-1]} leaves")
    off = teacher.total_regions - R  # the leaves are the last R regions in global order
    z = torch.cat([sample.z[:, :1], sample.z[:, off:]], 1).to(flat.event_dtype())
    return LadderSample(flat, z, sample.x, seed=sample.seed, start=sample.start, total=sample.total,
                        meta={**sample.meta, "flat_of": teacher.name, "teacher_depth": d})


def shallow_student(ladder: Ladder, hidden: int, *, activation: str = "relu", bias: bool = True,
                    batch_norm: bool | str = False, init_scale: float = 1.0, seed: int = 0,
                    dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> LadderStudent:
    """One hidden layer of ``hidden`` nodes on the flattened input of ``ladder``, then a linear map to the classes:
    :class:`LadderStudent` on :func:`flat_ladder` with a readout group of ``hidden`` (module docstring).

    It takes the teacher's inputs ``(N, R_d, dim)`` as they are; its weights are ``weights[1]`` ``(R_d, dim,
    hidden)`` (W_1 cut by leaf) and ``weights[0]`` ``(1, hidden, n_c)``.  A ladder that is already flat (depth 1)
    is used as it is.
    """
    _check_ladder(ladder)
    _check_int(hidden, "hidden", 1)
    flat = ladder if ladder.depth == 1 else flat_ladder(ladder)
    return LadderStudent(flat, 1, activation=activation, batch_norm=batch_norm, bias=bias, init_scale=init_scale,
                         seed=seed, readout=hidden, dtype=dtype, device=device)


@torch.no_grad()
def error_rate(student: LadderStudent, x: torch.Tensor, y: torch.Tensor, *, batch_size: int = 4096) -> float:
    """The error rate (the test error on held-out rows): the fraction of rows whose largest output is not the
    label, ``x`` ``(N, R_d, dim)``, ``y`` ``(N,)``; ties go to the first class (``argmax``).  Without BN the rows
    run in batches of ``batch_size`` (memory only); with BN in one batch (BN normalizes by the batch's statistics).
    NaN for no rows, and for a student whose scores are not finite on some row
    (:func:`smaso.student.batched.classification_error` counts).

    Works for any :class:`LadderStudent` (the CNN of the RHM's levels and the shallow student alike).
    """
    _check_student(student)
    student.check_inputs(x)
    if not isinstance(y, torch.Tensor) or y.shape != (x.shape[0],):
        raise ValueError(f"y: expected shape ({x.shape[0]},), got "
                         f"{tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__}")
    n = x.shape[0]
    if n == 0:
        return math.nan
    bs = n if student.batch_norm else _check_int(batch_size, "batch_size", 1)
    return classification_error(student, x, y, chunk=bs)
