"""A locally connected student network whose structure follows a ladder (framework paper §2.2).

Every non-leaf region alpha of level l has a group of n_l nodes, connected only from each child region beta to
its parent alpha through the weight matrix W_ba of their edge (n_{l+1} x n_l; one per edge, or with
``shared=True`` one per child place, like a convolution).  On any layered region graph
(:class:`~teachers.ladder.Ladder`) a region with several parents feeds each of them, so backward its gradient
is the *sum* over its parents (Eq 1).  Level by level, batched over the regions ``(N, R_l, n_l)``: the
pre-activation u_a = sum_{b in ch(a)} fbar_b W_ba + bias_a, the activation f_a = s(u_a) o u_a (s: the gate,
Eq 1) and the output fbar_a, with fbar at the leaves = the inputs x and a linear top layer of n_0 = number of
classes.  Batch Norm (hidden levels, per region) sits after the activation (``batch_norm=True`` or ``"after"``,
Eq 10) or before the gate (``"before"``, Thm 9's premise): ``docs/theory.md`` §1.0, and :class:`StudentRecord`
for every field of both placements.

:meth:`LadderStudent.forward_backward` runs the forward pass and an explicit backward pass (Eq 1-2, BN by
Thm 5) and records every per-example quantity and Delta W = E_x[fbar_child g_parent] (Eq 2), all equal to
autograd.  Gradients follow the paper's sign: g = -dLoss/du, so gradient descent adds ``lr * Delta W``.  The
level operations are :mod:`smaso.student.connectivity`'s.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from smaso.student.activations import Activation, get_activation
from smaso.student.batch_major import one_hot_events, student_forward
from smaso.student.batch_record import LAYOUTS, batch_forward_backward, supports_batch_layout
from smaso.student.batchnorm import bn_backward, bn_forward
from smaso.student.connectivity import (
    OneHotLeaves,
    graph_backward,
    graph_pre_activation,
    group_by_parent,
    level_children,
    level_edge_index,
    level_edges,
    one_hot_node_major,
    one_hot_pre_activation,
    one_hot_rows,
    one_hot_tree_weight_grad,
    strided_plan,
    tree_backward,
    tree_pre_activation,
)
from smaso.student.leaf_kernels import LeafKernel
from smaso.student.losses import LOSSES, _output_gradient, output_gradient, student_loss
from smaso.student.node_major import node_major_forward
from smaso.student.node_variables import VARIABLES, _check_variable, node_variable  # noqa: F401  (re-exported)
from smaso.student.readout import readout_events, readout_ladder
from smaso.student.record_buffers import RecordBuffers
from smaso.student.scratch import scratch_dict
from teachers.ladder import Ladder

__all__ = ["BN_PLACEMENTS", "LOSSES", "PER_EXAMPLE", "VARIABLES", "LadderStudent", "StudentRecord", "node_variable",
           "output_gradient", "student_loss"]

BN_PLACEMENTS = ("after", "before")
#: The per-example fields of a :class:`StudentRecord`.
PER_EXAMPLE = ("u", "f", "fbar", "slope", "deriv", "f_tilde", "g_raw", "g_f", "g")


def _bn_placement(batch_norm: bool | str) -> str | None:
    """``batch_norm`` of :class:`LadderStudent` as None (no BN), ``"after"`` or ``"before"``."""
    if isinstance(batch_norm, bool):
        return "after" if batch_norm else None
    if isinstance(batch_norm, str):
        if batch_norm in BN_PLACEMENTS:
            return batch_norm
        raise ValueError(f"batch_norm: expected False, True, 'after' or 'before', got {batch_norm!r}")
    raise TypeError(f"batch_norm: expected a bool or one of {BN_PLACEMENTS}, got {type(batch_norm).__name__}")


@dataclass
class StudentRecord:
    """Per-example quantities of one batch (lists indexed by level l = 0..d; level d = inputs).

    ``u[l], f[l], fbar[l], slope[l], deriv[l], g_raw[l], g_f[l], g[l]``: ``(N, R_l, n_l)``
    (None where not defined: the leaves have only ``fbar`` = x).  ``dW[l]``: ``(E_l,
    n_{l+1}, n_l)`` = E_x[fbar_child g_parent^T] per edge of level l (child -> parent weights, in
    :func:`~teachers.statistics.level_edges` order: on a uniform tree ``E_l = R_{l+1}``, one per child region;
    with shared weights still per edge, see :meth:`LadderStudent.shared_update`), ``db[l]``:
    ``(R_l, n_l)`` = E_x[g_l], ``dc1[l], dc0[l]``: BN parameter updates, ``sigma[l]``: ``(R_l, n_l)``
    BN's batch standard deviations.  ``loss``: mean loss.

    Every level is a chain u -> f -> fbar: ``u`` the linear pre-activation, ``fbar`` the node's
    output (what the parent sees), ``g`` = -N dLoss/du (the gradient of Eq 1-2 that enters
    Delta W), ``g_f`` = -N dLoss/df, ``g_raw`` = -N dLoss/dfbar.  What sits in the middle depends
    on the student's ``bn_placement``:

    - ``None`` (no BN at the level, e.g. the top): f = fbar = s(u) u, ``slope``/``deriv`` = s(u),
      f'(u), g_f = g_raw and g = f'(u) g_f;
    - ``"after"`` (Eq 10): f = s(u) u the activation, fbar = BN(f), ``f_tilde`` = standardized f,
      ``sigma`` its std; g_f = BN'(g_raw) (Thm 5), g = f'(u) g_f;
    - ``"before"``: f = BN(u) the normalized pre-activation (the gate's input), fbar = s(f) f,
      ``slope``/``deriv`` = s(f), f'(f) (the gates at the gate's input), ``f_tilde`` =
      standardized u, ``sigma`` the std of u; g_f = f'(f) g_raw, g = BN'(g_f) (Thm 5: zero batch
      mean, and orthogonal to u for bn_eps = 0).

    So :mod:`~smaso.student.frequency`'s F = E[f | z] is the BN output for ``"before"`` and
    U = E[u | z] the BN input, while G = E[g | z] is always the gradient of Delta W.

    The per-example fields are views of node-major ``(R_l, n_l, N)`` tensors (``t.permute(1, 2, 0)``
    is contiguous), the layout :meth:`LadderStudent.forward_backward` computes in.  With
    ``stacked=True`` they live in one buffer per level: ``stacked[l]`` ``(R_l, k, n_l, N)`` whose
    slots are the fields named by ``stacked_fields`` (see :meth:`LadderStudent.stacked_fields`); with
    ``layout="batch"`` ``(N, k, R_l, n_l)`` (``stacked_layout``; :mod:`~smaso.student.batch_record`).
    """

    u: list = field(default_factory=list)
    f: list = field(default_factory=list)
    fbar: list = field(default_factory=list)
    slope: list = field(default_factory=list)
    deriv: list = field(default_factory=list)
    f_tilde: list = field(default_factory=list)
    sigma: list = field(default_factory=list)
    #: per level the batch mean of BN's input ``(R_l, n_l)`` (None without BN at the level): with ``sigma`` BN's
    #: affine map of the batch, which frequency statistics apply to per-event sums instead of summing BN's output
    mu: list = field(default_factory=list)
    g_raw: list = field(default_factory=list)
    g_f: list = field(default_factory=list)
    g: list = field(default_factory=list)
    dW: list = field(default_factory=list)
    db: list = field(default_factory=list)
    dc1: list = field(default_factory=list)
    dc0: list = field(default_factory=list)
    loss: float = math.nan
    stacked: list | None = None
    stacked_fields: tuple[str, ...] | None = None
    #: the stacked buffers' layout: ``"node"`` ``(R_l, k, n_l, N)``, or ``"batch"`` ``(N, k, R_l, n_l)``
    #: (``forward_backward(layout="batch")``, :mod:`~smaso.student.batch_record`)
    stacked_layout: str = "node"
    #: which student and which parameter values made the record (:meth:`LadderStudent.params_version` at its
    #: forward pass): a reader that needs those weights (``FrequencyAccumulator``'s U and Gf) checks it
    params_version: tuple[int, ...] | None = None

    @property
    def loss_tensor(self) -> torch.Tensor | None:
        """The mean loss as the 0-dim tensor the forward computed, on the student's device (None when the record
        was given a float): reading it does not wait for the device, unlike :attr:`loss`."""
        return self.__dict__.get("_loss_t")


def _get_loss(rec: StudentRecord) -> float:
    # the float is read from the device once, on first use: a training step that never reads it never syncs
    if "_loss_v" not in rec.__dict__:
        t = rec.__dict__.get("_loss_t")
        rec.__dict__["_loss_v"] = math.nan if t is None else t.item()
    return rec.__dict__["_loss_v"]


def _set_loss(rec: StudentRecord, value: float | torch.Tensor) -> None:
    if isinstance(value, torch.Tensor):  # kept on the device until someone reads ``loss``
        rec.__dict__["_loss_t"] = value
        rec.__dict__.pop("_loss_v", None)
    else:
        rec.__dict__.pop("_loss_t", None)
        rec.__dict__["_loss_v"] = value


# ``loss`` stays a dataclass field (constructor, repr, eq) but is stored lazily: the generated __init__ assigns it
# through this property, so forward_backward can hand over the device tensor without a host read
setattr(StudentRecord, "loss", property(_get_loss, _set_loss,  # noqa: B010 (mypy reads the field as a float)
                                      doc="The mean loss as a float (read from the device once)."))


def _check_int(value: object, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")
    return int(value)


def _check_float_dtype(dtype: object) -> torch.dtype:
    """``dtype`` if it is a floating torch.dtype, else a ValueError naming ``dtype`` (the student's, its
    accumulators' and :func:`~smaso.student.compare.compare_student`'s one check)."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype: expected a floating torch.dtype (such as torch.float32 or torch.float64), "
                         f"got {dtype!r}")
    return dtype


def _check_student(student: object) -> LadderStudent:
    if not isinstance(student, LadderStudent):
        raise TypeError(f"student: expected a LadderStudent, got {type(student).__name__}")
    return student


class LadderStudent(nn.Module):
    """Locally connected student of any ladder (see the module docstring).

    :param ladder: the teacher's ladder (gives regions, edges, classes, input size): a uniform tree or any
        layered region graph.
    :param width: nodes per region at the hidden levels 1..d-1 (an int or one per level).
    :param activation: hidden activation (``"relu"``, ``"silu"``, ``"swish:0.7"``, ...).
    :param top_activation: activation of the top layer (``"linear"`` by default).
    :param batch_norm: Batch Norm at every hidden node (levels 1..d-1): ``False`` (none),
        ``True`` or ``"after"`` (after the activation, Eq 10), ``"before"`` (between the linear map
        and the gate: f = s(BN(u)) BN(u), Thm 9's premise).  Stored as :attr:`bn_placement`
        (None, ``"after"``, ``"before"``); :attr:`batch_norm` is the bool "has BN".
    :param bias: learnable biases (initialized to 0).
    :param bn_eps: BN's eps (0 reproduces Thm 5's exact projection).
    :param init_scale: weights ~ N(0, init_scale^2 / fan_in), fan_in = the parent's children's widths summed.
    :param seed: initialization seed (a local ``torch.Generator``; the global RNG is never used).
    :param shared: share weights like a convolution: every parent of a level uses one weight block per child
        *place* (the j-th of its sorted children), W_{p,c} = weights[l][place(p, c)].  Needs every parent of a
        level to have the same number of children k_l; the update of a shared block is the sum of its edges'
        Delta W (:meth:`shared_update`).
    :param readout: ``h``: give the root region a hidden group of h nodes (the hidden activation, BN like every
        hidden level) and a linear map to the classes (:mod:`smaso.student.readout`): the student is then built on
        :func:`~smaso.student.readout.readout_ladder` (``ladder`` with one more level, whose event is the label)
        and :attr:`teacher` is ``ladder``.  Without it (None) the class scores are linear in the root's
        children's groups, so additive over them (:mod:`smaso.student.ceiling`).
    :param dtype, device: parameter dtype and device.
    :param kernel: the autograd path's one-hot leaves given by their events on a uniform tree (the gather, with a
        ReLU above it and no BN, and the weight gradient: :mod:`smaso.student.leaf_kernels`): ``"eager"``
        (embedding_bag and a one-hot matmul), ``"compiled"`` (inductor-compiled loops on the CPU, the same sums,
        the gradient's in another order: equal to round-off) or ``"auto"`` (compiled once the student has run
        :data:`~smaso.student.leaf_kernels.AUTO_EDGE_ROWS` leaf rows, enough to amortise a compilation of seconds;
        short runs never compile).  ``student.leaf_kernel = LeafKernel(k)`` changes it.

    :ivar ladder: the ladder the student is built on (``teacher``, or its readout ladder).
    :ivar teacher: the teacher's ladder, as given.
    :ivar widths: ``[n_0, ..., n_d]`` (n_0 = classes, n_d = input dim; with a readout n_1 = h).
    :ivar weights: ``weights[l]`` ``(E_l, n_{l+1}, n_l)``: W_ba of every edge of level l (on a uniform tree
        ``(R_{l+1}, n_{l+1}, n_l)``, one per child region); with ``shared``, ``(k_l, n_{l+1}, n_l)``: one block
        per child place (:meth:`edge_weights` gives every edge's block).
    :ivar biases: ``biases[l]`` ``(R_l, n_l)`` (None without bias).
    """

    def __init__(self, ladder: Ladder, width: int | list[int] | tuple[int, ...] = 8, *,
                 activation: str | Activation = "relu", top_activation: str | Activation = "linear",
                 batch_norm: bool | str = False, bias: bool = True,
                 bn_eps: float = 1e-5, init_scale: float = 1.0, seed: int = 0, shared: bool = False,
                 readout: int | None = None, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None, kernel: str = "auto") -> None:
        super().__init__()
        # the one-hot leaves' weight gradient: eager, compiled or auto (smaso.student.leaf_kernels)
        self.leaf_kernel = LeafKernel(kernel)
        if not isinstance(ladder, Ladder):
            raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
        d = ladder.depth
        if isinstance(width, (list, tuple)):
            if len(width) != d - 1:
                raise ValueError(f"width: expected {d - 1} positive widths (levels 1..{d - 1}), got {list(width)}")
            width = [_check_int(w, "width", 1) for w in width]
        else:
            width = [_check_int(width, "width", 1)] * (d - 1)
        if not isinstance(bias, bool):
            raise ValueError(f"bias: expected a bool, got {bias!r}")
        if isinstance(init_scale, bool) or not isinstance(init_scale, (int, float)) or not (
                math.isfinite(init_scale) and init_scale > 0):
            raise ValueError(f"init_scale: expected a positive finite number, got {init_scale!r}")
        seed = _check_int(seed, "seed", 0)
        if not isinstance(shared, bool):
            raise ValueError(f"shared: expected a bool, got {shared!r}")
        _check_float_dtype(dtype)
        self.teacher = ladder
        self.readout = None if readout is None else _check_int(readout, "readout", 1)
        if self.readout is not None:
            ladder = readout_ladder(ladder)
            width, d = [self.readout, *width], ladder.depth
        self.ladder = ladder
        self.widths = [ladder.num_classes, *width, ladder.emission.dim]  # n_0 .. n_d
        self.activation = get_activation(activation)
        self.top_activation = get_activation(top_activation)
        self.bn_placement = _bn_placement(batch_norm)
        self.batch_norm = self.bn_placement is not None
        self.bn_eps = float(bn_eps)
        self.shared = shared
        uniform = ladder.is_uniform()
        # children per parent: a uniform tree's by arithmetic (the fast path needs no edge lists)
        kids = [[ladder.branching[l]] * ladder.num_regions[l] if uniform else  # type: ignore[index]  # uniform: a branching
                [len(ch) for ch in level_children(ladder, l)] for l in range(d)]
        self._fast = uniform
        gen = torch.Generator().manual_seed(seed)
        n = self.widths
        weights = []
        for l in range(d):
            if shared and len(set(kids[l])) != 1:
                raise ValueError(f"shared: weight sharing needs every parent of a level to have the same number "
                                 f"of children; level {l}'s parents have {sorted(set(kids[l]))}")
            par, chi = level_edge_index(ladder, l)
            self.register_buffer(f"edge_parent_{l}", par, persistent=False)
            self.register_buffer(f"edge_child_{l}", chi, persistent=False)
            # every parent's first edge (edges are parent-major): the bags of a one-hot level's gather
            first = torch.zeros(ladder.num_regions[l], dtype=torch.int64)
            first[1:] = torch.tensor(kids[l][:-1], dtype=torch.int64).cumsum(0)
            self.register_buffer(f"edge_first_{l}", first, persistent=False)
            # the place of every edge among its parent's sorted children
            place = (chi % ladder.branching[l]) if uniform else torch.tensor(  # type: ignore[index]  # uniform: a branching
                [j for k in kids[l] for j in range(k)], dtype=torch.int64)
            self.register_buffer(f"edge_place_{l}", place, persistent=False)
            # drawn child-major (blocks, n_{l+1}, n_l); fan_in of an edge = its parent's children's widths summed
            if shared:
                fan_in = torch.full((kids[l][0],), float(kids[l][0] * n[l + 1]), dtype=torch.float64)
            else:
                fan_in = torch.tensor(kids[l], dtype=torch.float64)[par] * n[l + 1]
            w = torch.randn(fan_in.numel(), n[l + 1], n[l], generator=gen, dtype=torch.float64)
            weights.append(nn.Parameter((w * init_scale / fan_in.sqrt()[:, None, None]).to(dtype)))
        self.weights = nn.ParameterList(weights)
        R = ladder.num_regions
        self.biases = nn.ParameterList([nn.Parameter(torch.zeros(R[l], n[l], dtype=dtype)) for l in range(d)]) \
            if bias else None
        if self.batch_norm:
            self.bn_scale = nn.ParameterList([nn.Parameter(torch.ones(R[l], n[l], dtype=dtype)) for l in range(1, d)])
            self.bn_shift = nn.ParameterList([nn.Parameter(torch.zeros(R[l], n[l], dtype=dtype)) for l in range(1, d)])
        if device is not None:
            self.to(device)

    # ------------------------------------------------------------------ helpers
    @functools.cached_property
    def edges(self) -> list[list[tuple[int, int]]]:
        """``edges[l]``: the ``(parent, child)`` pairs of level l (:func:`~teachers.statistics.level_edges`)."""
        return [level_edges(self.ladder, l) for l in range(self.ladder.depth)]

    @functools.cached_property
    def _plans(self) -> list:
        """Per level the strided plan of the edge-list code (:func:`~smaso.student.connectivity.strided_plan`),
        or None for the gather / index_add path; built on first use (assignable, as tests do)."""
        return [strided_plan(level_children(self.ladder, l)) for l in range(self.ladder.depth)]

    @property
    def fast_path(self) -> bool:
        """Whether levels run the uniform-tree kernels (one reshape and one batched matmul per level, the default on
        a uniform tree) rather than the edge-list code of any ladder; set it to False to force the latter (the two
        agree to round-off: tests and benchmarks compare them)."""
        return self._fast

    @fast_path.setter
    def fast_path(self, value: bool) -> None:
        if value and not self.ladder.is_uniform():
            raise ValueError("fast_path: the uniform-tree kernels need a uniform tree")
        self._fast = bool(value)

    @property
    def graph(self) -> Ladder:
        """Deprecated: :attr:`ladder` (a region graph is a Ladder)."""
        warnings.warn("LadderStudent.graph (GraphStudent.graph) is deprecated since smaso 0.3; use .ladder",
                      DeprecationWarning, stacklevel=2)
        return self.ladder

    def act(self, level: int) -> Activation:
        """Activation of ``level``: the top activation at level 0, the hidden one elsewhere."""
        return self.top_activation if level == 0 else self.activation

    def bn_params(self, level: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(c1, c0)`` of the hidden level (1..d-1), or None without BN."""
        if not self.batch_norm or level == 0 or level >= self.ladder.depth:
            return None
        return self.bn_scale[level - 1], self.bn_shift[level - 1]

    def num_edges(self, level: int) -> int:
        """E_l: the number of parent-child edges of ``level``."""
        return getattr(self, f"edge_parent_{level}").numel()

    def edge_index(self, level: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(parents, children)`` int64 ``(E_l,)``: the edges of ``level`` (parent in it, child one level below)."""
        return getattr(self, f"edge_parent_{level}"), getattr(self, f"edge_child_{level}")

    def edge_weights(self, level: int) -> torch.Tensor:
        """W_ba of every edge of ``level``: ``(E_l, n_{l+1}, n_l)`` (with ``shared``, each edge's place's block)."""
        W = self.weights[level]
        return W.index_select(0, getattr(self, f"edge_place_{level}")) if self.shared else W

    def shared_update(self, dW: torch.Tensor, level: int) -> torch.Tensor:
        """The update of ``level``'s parameter from per-edge updates ``dW`` ``(E_l, n_{l+1}, n_l)``: the updates
        themselves, or with ``shared`` their sum over the edges of each place ``(k_l, n_{l+1}, n_l)`` (Eq 2 summed
        over the edges that share a block)."""
        if not self.shared:
            return dW
        place = getattr(self, f"edge_place_{level}")
        return dW.new_zeros(self.weights[level].shape).index_add_(0, place, dW)

    def ladder_events(self, z: torch.Tensor) -> torch.Tensor:
        """The events of the student's :attr:`ladder` from a dataset's: ``z`` itself, or with a readout the
        teacher's ``(N, R)`` events with the label repeated in front (:func:`~smaso.student.readout.readout_events`;
        events already of the readout ladder pass unchanged)."""
        if self.readout is not None and isinstance(z, torch.Tensor) and z.dim() == 2 \
                and z.shape[1] == self.teacher.total_regions:
            return readout_events(z)
        return z

    def check_inputs(self, x: torch.Tensor, *, values: bool = True) -> None:
        """Raise a TypeError/ValueError unless ``x`` is ``(N, R_d, dim)`` for this student's ladder, or one-hot inputs
        given by their leaf events: integers ``(N, R_d)`` in [0, dim) (:meth:`forward`).

        The events' range check reads them on the host (one sync): ``values=False`` skips it, for loops that
        validated their data once where it entered; meta tensors carry no values and skip it too."""
        lad = self.ladder
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
        if self._events(x):
            if x.dim() != 2 or x.shape[1] != lad.num_regions[-1] or x.dtype == torch.bool:
                raise ValueError(f"x: integer inputs are leaf events: expected shape (N, {lad.num_regions[-1]}) "
                                 f"and an integer dtype, got shape {tuple(x.shape)}, dtype {x.dtype}")
            if values and x.numel() and x.device.type != "meta":
                lo, hi = torch.stack(torch.aminmax(x)).tolist()  # one host read for both ends
                if lo < 0 or hi >= self.widths[-1]:
                    raise ValueError(f"x: leaf events must lie in [0, {self.widths[-1]}), got [{lo}, {hi}]")
            return
        want = (lad.num_regions[-1], self.widths[-1])
        if x.dim() != 3 or tuple(x.shape[1:]) != want:
            raise ValueError(f"x: expected shape (N, {want[0]}, {want[1]}) for this student's ladder "
                             f"({lad!r}), got {tuple(x.shape)}")

    def _check_labels(self, x: torch.Tensor, y: torch.Tensor, loss: str, *, values: bool = True) -> None:
        """Raise a ValueError unless ``loss`` is known and ``y`` holds ``(N,)`` integer labels in [0, n_0).

        The range check reads the labels on the host (one sync): ``values=False`` skips it, for loops that
        validated the whole dataset once where it entered; meta tensors carry no values and skip it too."""
        if loss not in LOSSES:
            raise ValueError(f"loss: expected one of {LOSSES}, got {loss!r}")
        if not isinstance(y, torch.Tensor) or y.shape != (x.shape[0],):
            raise ValueError(f"y: expected shape ({x.shape[0]},), got "
                             f"{tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__}")
        if y.is_floating_point() or y.is_complex():
            raise ValueError(f"y: expected integer labels, got dtype {y.dtype}")
        if values and y.numel() and y.device.type != "meta":
            lo, hi = torch.stack(torch.aminmax(y)).tolist()  # one host read for both ends
            if lo < 0 or hi >= self.widths[0]:
                raise ValueError(f"y: labels must lie in [0, {self.widths[0]}), got [{lo}, {hi}]")

    def _grouped(self, level: int, child: torch.Tensor, owner: object = None) -> torch.Tensor:
        """The input of ``level`` from the children's outputs ``(R_{l+1}, n_{l+1}, N)``: on the fast path grouped by
        parent, ``(R_l, b n_{l+1}, N)`` (:func:`~smaso.student.connectivity.group_by_parent`: a view in the node-major
        layout; ``owner``: a copy into its scratch buffer), else the children's outputs themselves."""
        if not self._fast:
            return child
        return group_by_parent(child, self.ladder.num_regions[level], owner=owner, name=f"grouped{level}")

    def _pre_activation(self, level: int, inputs: torch.Tensor, owner: object = None) -> torch.Tensor:
        """u of ``level``, node-major ``(R_l, n_l, N)``, from :meth:`_grouped` inputs (Eq 1, forward); ``owner``: on
        the fast path written into its scratch buffer."""
        bias = None if self.biases is None else self.biases[level]
        if self._fast:
            return tree_pre_activation(self.edge_weights(level), inputs, bias, owner=owner, name=f"u{level}")
        return graph_pre_activation(self.edge_weights(level), inputs, bias, self.ladder.num_regions[level],
                                    self._plans[level], self.edge_index(level))

    @staticmethod
    def _events(x: torch.Tensor) -> bool:
        """Whether inputs ``x`` are leaf events (integers) rather than the inputs themselves."""
        return not (x.is_floating_point() or x.is_complex())

    def _one_hot_args(self, events: torch.Tensor, small: bool = False
                      ) -> tuple[int, bool, torch.Tensor, torch.Tensor | None]:
        """Level d - 1's gather of one-hot leaves given by their ``events`` ``(N, R_d)``: ``(l, fast, rows,
        first_edge)`` (:func:`~smaso.student.connectivity.one_hot_rows`, int32 with ``small`` where they fit;
        first_edge None for fixed-size bags)."""
        l = self.ladder.depth - 1
        fast = self._fast
        small = small and fast and self.num_edges(l) * self.widths[-1] < 2**31
        rows = one_hot_rows(events, self.widths[-1], None if fast else self.edge_index(l)[1],
                            dtype=torch.int32 if small else torch.int64)
        return l, fast, rows, None if fast else getattr(self, f"edge_first_{l}")

    def _one_hot_leaves(self, events: torch.Tensor, batch_major: bool = False) -> torch.Tensor:
        """u of level d - 1 node-major ``(R, n, N)`` (or ``batch_major`` flat ``(N R, n)``) from one-hot leaves given by
        their ``events``: a gather of weight rows (Eq 1 on one-hot inputs), differentiable in the weights,
        whose gradient is the level's own Delta W matmul on the node-major one-hot
        (:class:`~smaso.student.connectivity.OneHotLeaves`)."""
        l, fast, rows, first = self._one_hot_args(events, batch_major)
        scratch = scratch_dict(self)  # the backward's one-hot buffers: no two backward passes of it at once
        width = self.widths[-1]

        def weight_grad(W: torch.Tensor, g: torch.Tensor, ev: torch.Tensor) -> torch.Tensor:
            size = self.leaf_kernel.size(rows) if fast and batch_major else None
            if size is not None:  # g: a node-major view of the batch-major (N, R, n) gradient
                return self.leaf_kernel.weight_grad(size, rows, g.permute(2, 0, 1), None, W.shape[0] * width
                                                    ).view(W.shape)
            if fast:
                return one_hot_tree_weight_grad(W, g, ev, width, scratch)
            child = scratch["one_hot"] = one_hot_node_major(ev, width, g.dtype, out=scratch.get("one_hot"))
            return graph_backward(W, g, child, False, self._plans[l], self.edge_index(l), mean=False)[0]

        return OneHotLeaves.apply(self.edge_weights(l), None if self.biases is None else self.biases[l], rows, events,
                                  width, self.ladder.num_regions[l], first, weight_grad, batch_major)

    def _leaves(self, x: torch.Tensor) -> torch.Tensor:
        """The inputs ``(N, R_d, dim)`` as a node-major view ``(R_d, dim, N)`` (no copy for the student's dtype)."""
        return x.to(self.weights[0].dtype).permute(1, 2, 0)

    def _batch_norm(self, level: int, f: torch.Tensor, batch_major: bool = False, owner: object = None) -> Any:
        """Eq 10 on a node-major ``(R_l, n_l, N)`` (or ``batch_major`` ``(N, R_l, n_l)``) level (the BN input: f
        after, u before the gate), or None without BN: ``(output, standardized input, sigma, mean)``; ``owner``
        (node-major, no autograd): the outputs in its scratch buffers."""
        bn = self.bn_params(level)
        if bn is None:
            return None
        if batch_major:  # (N, R_l, n_l), or the leaves' flat (N R_l, n_l)
            fbar, f_tilde, mu, sigma = bn_forward(f.view(-1, *bn[0].shape), bn[0], bn[1], self.bn_eps)
            return fbar, f_tilde, sigma, mu
        # bn_forward normalizes over dim 0: hand it the (N, R, n) view; its outputs keep f's layout
        fbar, f_tilde, mu, sigma = bn_forward(f.permute(2, 0, 1), bn[0], bn[1], self.bn_eps, owner=owner,
                                              name=f"bn{level}")
        return fbar.permute(1, 2, 0), f_tilde.permute(1, 2, 0), sigma, mu

    # ------------------------------------------------------------------ forward
    def forward(self, x: torch.Tensor, *, events_checked: bool = False, one_hot_checked: bool = False
                ) -> torch.Tensor:
        """Outputs f_0 ``(N, n_0)`` (differentiable; BN uses the batch's statistics).  ``x``: the inputs
        ``(N, R_d, dim)``, or one-hot inputs given by their leaf events, integers ``(N, R_d)`` in [0, dim)
        (``sample.z[:, ladder.level_offsets[-2]:]``): then the leaf level is a gather of weight rows
        (:func:`~smaso.student.connectivity.one_hot_pre_activation`) rather than a matmul on the one-hot, the same
        outputs to round-off.  ``events_checked``: the caller validated the events' range once where its data
        entered: skip that check, a host read (an event out of range would silently pick another edge's row).
        ``one_hot_checked``: the caller validated once that the inputs ``x`` are one-hot (as a one-hot dataset's
        are): they run as their events (:func:`~smaso.student.batch_major.one_hot_events`, one read), unless x
        needs a gradient or a functorch transform is active.

        On a uniform tree (:attr:`fast_path`) outside vmap/grad, events run batch-major with no transposes
        (:func:`~smaso.student.batch_major.student_forward`), float inputs with ReLU and no BN through
        :func:`~smaso.student.node_major.node_major_forward` (reused backward buffers)."""
        self.check_inputs(x, values=not events_checked)
        plain = not torch._C._are_functorch_transforms_active()  # (the fast Functions: no setup_context)
        if one_hot_checked and plain and x.is_floating_point() and not x.requires_grad:
            x = one_hot_events(x)  # then the gather path: no matmul on the one-hot's zeros
        events = self._events(x)
        if self._fast and plain:
            if events:
                return student_forward(self, x)
            if not self.batch_norm and self.act(self.ladder.depth - 1).name == "relu":
                return node_major_forward(self, x)  # the path below bit for bit, with reused backward buffers
        h: torch.Tensor | None = None if events else self._leaves(x)
        before = self.bn_placement == "before"
        for l in range(self.ladder.depth - 1, -1, -1):
            h = self._one_hot_leaves(x) if h is None else self._pre_activation(l, self._grouped(l, h))
            bn = self._batch_norm(l, h) if before else None
            h = self.act(l).apply_(h if bn is None else bn[0])  # u (or BN(u)) is a fresh temporary: in place
            bn = None if before else self._batch_norm(l, h)
            h = h if bn is None else bn[0]
        return cast(torch.Tensor, h)[0].T  # the loop ran at least once (depth >= 1)

    def loss(self, out: torch.Tensor, y: torch.Tensor, kind: str = "squared") -> torch.Tensor:
        """Mean loss: ``"squared"`` 1/2 |f_0 - onehot(y)|^2 (G_omega = I - F_omega) or ``"cross_entropy"``."""
        return student_loss(out, y, kind)

    # ------------------------------------------------------------------ explicit forward + backward
    def stacked_fields(self) -> tuple[str, ...]:
        """The record fields that frequency statistics sum per example, in the order of a stacked buffer.

        ``fbar, f, slope, deriv, g, g_f`` less those that coincide with another: f = fbar
        without BN, and f' = s for activations with f(u) = f'(u) u (ReLU, leaky ReLU, abs, linear); less g_f
        unless BN is before the gate, and fbar with BN after it.  Frequency statistics average these, u, g_f and
        fbar (Eq 6); those are not stacked (not copied into the buffer) because at the hidden levels their
        per-event sums follow from the edge sums (Eq 1) and, with BN after the gate, BN's affine maps
        (:class:`~smaso.student.frequency.FrequencyAccumulator`); an unstacked fbar is also the next level's input
        without a copy.
        """
        homogeneous = self.activation.homogeneous and self.top_activation.homogeneous
        return tuple(k for k in ("fbar", "f", "slope", "deriv", "g", "g_f")
                     if not (k == "f" and not self.batch_norm) and not (k == "deriv" and homogeneous)
                     and not (k == "g_f" and self.bn_placement != "before")
                     and not (k == "fbar" and self.bn_placement == "after"))

    @torch.no_grad()
    def forward_backward(self, x: torch.Tensor, y: torch.Tensor, loss: str = "squared", *,
                         stacked: bool | list[torch.Tensor] = False, labels_checked: bool = False,
                         delta_w: bool = True, layout: str = "node") -> StudentRecord:
        """Forward and explicit backward pass on one batch, every per-example quantity recorded.

        Computed node-major (``(R_l, n_l, N)``, contiguous over the batch; see :class:`StudentRecord`).

        :param stacked: write the :meth:`stacked_fields` of every level l < d into one buffer
            ``rec.stacked[l]`` of shape ``(R_l, k, n_l, N)`` (the fields are views of its slots), so
            that per-event sums of all of them are one batched matmul
            (:class:`~smaso.student.frequency.FrequencyAccumulator` asks for this).  A previous record's
            ``rec.stacked`` is reused when its shapes fit (that record's fields are overwritten, all of them:
            :mod:`~smaso.student.record_buffers`): streaming over batches then writes into the same memory
            instead of faulting in fresh pages on every batch.
        :param x: the inputs ``(N, R_d, dim)``, or one-hot inputs given by their leaf events (integers ``(N, R_d)``,
            see :meth:`forward`): then ``rec.fbar[d]`` is their one-hot, a view of a node-major buffer.
        :param labels_checked: the caller has checked that the labels lie in [0, n_0), and leaf events in [0, dim)
            (a training loop validates its dataset once before the loop): skip those checks, the step's only host
            reads. The record's
            ``loss`` is read from the device lazily (:attr:`StudentRecord.loss_tensor` never syncs).
        :param delta_w: False: on a uniform tree's fast path leave ``rec.dW`` None, and with leaf events ``rec.fbar[d]``
            (no one-hot of them), for a caller that sums Delta W itself per row group from the events
            (:meth:`~smaso.student.frequency.ReplicateAccumulator.add` with ``bounds``).
        :param layout: ``"batch"``: where the student supports it (a uniform tree on the fast path, no BN:
            :func:`~smaso.student.batch_record.supports_batch_layout`) the pass runs batch-major and writes stacked
            buffers ``(N, k, R_l, n_l)`` (whatever ``stacked``; no transposes, the layout the compiled event sums
            read; with leaf events ``rec.fbar[d]`` None); elsewhere node-major.  ``rec.stacked_layout`` says which.
        """
        if layout not in LAYOUTS:
            raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
        self.check_inputs(x, values=not labels_checked)
        self._check_labels(x, y, loss, values=not labels_checked)
        if layout == "batch" and supports_batch_layout(self):
            return StudentRecord(**batch_forward_backward(self, x, y, loss, stacked, delta_w))
        events = self._events(x)
        lad = self.ladder
        d, n = lad.depth, x.shape[0]
        dtype, dev = self.weights[0].dtype, self.weights[0].device
        keys = self.stacked_fields()
        shapes = [(lad.num_regions[l], len(keys), self.widths[l], n) for l in range(d)]
        bufs = RecordBuffers(self, stacked, keys, shapes, dtype, dev)  # (raises TypeError on a bad ``stacked``)
        slot, put, owner = bufs.slot, bufs.put, bufs.owner  # owner: the scratch buffers' when reusing, else None
        nm: dict[str, list[Any]] = {k: [None] * (d + 1) for k in PER_EXAMPLE}  # node-major (R_l, n_l, N)
        sigma, mu, dW, db, dc1, dc0 = ([None] * (d + 1) for _ in range(6))  # type: list, list, list, list, list, list
        # one-hot leaves given by their events: node-major (Delta W reads it fastest), reused with reused buffers;
        # none without Delta W on the fast path (Delta W its only reader here; a caller summing it has the events)
        nm["fbar"][d] = self._leaves(x) if not events else None if self._fast and not delta_w else \
            one_hot_node_major(x, self.widths[-1], dtype, owner=owner)
        inputs: list[Any] = [None] * d  # level l's input: its children's outputs (grouped by parent on the fast path)
        before = self.bn_placement == "before"
        for l in range(d - 1, -1, -1):
            # a view, except for a slot of a stacked buffer on the fast path (then one copy, shared by forward and
            # Delta W)
            inputs[l] = None if nm["fbar"][l + 1] is None else self._grouped(l, nm["fbar"][l + 1], owner)
            if events and l == d - 1:
                _, _, rows, first = self._one_hot_args(x)
                u = one_hot_pre_activation(self.edge_weights(l), rows, None if self.biases is None
                                           else self.biases[l], lad.num_regions[l], first)
            else:
                u = self._pre_activation(l, inputs[l], owner)
            u = nm["u"][l] = put(l, "u", u)
            has_bn = self.bn_params(l) is not None
            gate_in = u
            if before and has_bn:  # BN between the linear map and the gate: f = BN(u) is the gate's input
                bn = self._batch_norm(l, u, owner=owner)
                gate_in = nm["f"][l] = put(l, "f", bn[0])
                nm["f_tilde"][l], sigma[l], mu[l] = bn[1], bn[2], bn[3]
            a = self.act(l)
            s = nm["slope"][l] = a.slope(gate_in, out=slot(l, "slope"))
            # (a homogeneous activation's f' is s: copied only where the other level's activation needs the slot)
            nm["deriv"][l] = put(l, "deriv", s if a.homogeneous else a.derivative(gate_in))
            if before and has_bn:
                nm["fbar"][l] = torch.mul(s, gate_in, out=slot(l, "fbar"))
                continue
            f = nm["f"][l] = torch.mul(s, u, out=slot(l, "f" if has_bn else "fbar"))
            bn = self._batch_norm(l, f, owner=owner)  # None exactly when not has_bn
            if bn is None:
                nm["fbar"][l] = f
                if "f" in keys:  # BN elsewhere in the network: F = Fbar on this level
                    put(l, "f", f)
            else:
                nm["fbar"][l] = put(l, "fbar", bn[0])
                nm["f_tilde"][l], sigma[l], mu[l] = bn[1], bn[2], bn[3]
        out = nm["fbar"][0][0]  # (n_0, N)
        g_top, loss_value = _output_gradient(out, y, loss)
        nm["g_raw"][0] = g_top[None]

        def bn_back(l: int, grad: torch.Tensor) -> torch.Tensor:
            """Thm 5: the node-major gradient at BN's output ``grad`` taken back to its input (and dc1, dc0)."""
            out, c1, c0 = bn_backward(grad.permute(2, 0, 1), nm["f_tilde"][l].permute(2, 0, 1), sigma[l],
                                      self.bn_params(l)[0],  # type: ignore[index]  # bn_back runs with BN only
                                      owner=owner, name=f"bn{l}")
            dc1[l], dc0[l] = c1 / n, c0 / n
            return out.permute(1, 2, 0)

        for l in range(d):
            has_bn = self.bn_params(l) is not None
            if has_bn and before:  # the gate first (g_f: the gradient at BN's output), then Thm 5 back to u
                gf = nm["g_f"][l] = torch.mul(nm["deriv"][l], nm["g_raw"][l], out=slot(l, "g_f"))
                g = nm["g"][l] = put(l, "g", bn_back(l, gf))
            else:  # Thm 5 back to f (with BN after the gate), then g = f' o g_f: the gated gradient (Eq 1)
                nm["g_f"][l] = put(l, "g_f", bn_back(l, nm["g_raw"][l]) if has_bn else nm["g_raw"][l])
                g = nm["g"][l] = torch.mul(nm["deriv"][l], nm["g_f"][l], out=slot(l, "g"))
            # Delta W_ba = E_x[fbar_b g_a] (Eq 2) per edge, and the raw gradient at the children's outputs:
            # W g summed over each child's parents (Eq 1; None below the leaves)
            W, need_raw = self.edge_weights(l), l + 1 < d
            if events and self._fast and not need_raw:  # the node-major one-hot: one-hot @ g^T, in W's layout
                dW[l] = (torch.bmm(inputs[l], g.transpose(1, 2)) / n).view(W.shape) if delta_w else None
            else:
                dW[l], nm["g_raw"][l + 1] = tree_backward(W, g, inputs[l], need_raw, delta_w=delta_w, owner=owner,
                                                          name=f"{l}") \
                    if self._fast else graph_backward(W, g, inputs[l], need_raw, self._plans[l], self.edge_index(l))
            db[l] = g.mean(-1)
        rec = StudentRecord(**{k: [None if t is None else t.permute(2, 0, 1) for t in v] for k, v in nm.items()},
                            sigma=sigma, mu=mu, dW=dW, db=db, dc1=dc1, dc0=dc0,
                            loss=cast(float, loss_value),  # the tensor: the property keeps it on the device
                            stacked=bufs.buffers if bufs.stacked else None,
                            stacked_fields=keys if bufs.stacked else None, stacked_layout="node",
                            params_version=self.params_version())
        rec.fbar[d] = x.to(dtype) if not events else None if nm["fbar"][d] is None else nm["fbar"][d].permute(2, 0, 1)
        return rec

    def params_version(self) -> tuple[int, ...]:
        """This student and the state of its parameters: ``id(self)`` and every parameter's version counter (bumped
        by each in-place update, :meth:`apply_update` and optimizers alike). Equal tuples mean the same values."""
        return (id(self), *(p._version for p in self.parameters()))

    # ------------------------------------------------------------------ updates
    def _updates(self, rec: StudentRecord, weight_decay: float) -> Any:
        """Every parameter with its update: Delta W - 2 weight_decay W for the weights (a shared block the sum of its
        edges', :meth:`shared_update`), db, dc1, dc0 for the biases and BN parameters."""
        for l, W in enumerate(self.weights):
            yield W, self.shared_update(rec.dW[l], l) - 2 * weight_decay * W
            if self.biases is not None:
                yield self.biases[l], rec.db[l]
        if self.batch_norm:
            for l in range(1, self.ladder.depth):
                yield self.bn_scale[l - 1], rec.dc1[l]
                yield self.bn_shift[l - 1], rec.dc0[l]

    @torch.no_grad()
    def apply_update(self, rec: StudentRecord, lr: float, weight_decay: float = 0.0) -> None:
        """Gradient descent step W += lr (Delta W - 2 weight_decay W) (Frobenius regularizer
        weight_decay * sum |W|_F^2 on the weights only); biases and BN parameters take
        their plain updates; shared blocks the sum of their edges' updates (:meth:`shared_update`)."""
        for param, update in self._updates(rec, weight_decay):
            param.add_(update, alpha=lr)

    @torch.no_grad()
    def fill_grad(self, rec: StudentRecord, weight_decay: float = 0.0) -> None:
        """Write the explicit backward's update into every parameter's ``.grad``: -(Delta W - 2 weight_decay W) for
        the weights (Eq 2; a shared block the sum of its edges'), -db, -dc1, -dc0; so any ``torch.optim``
        optimizer steps on Eq 2's gradient (``SGD(lr)`` then takes the step of :meth:`apply_update`)."""
        for param, update in self._updates(rec, weight_decay):
            param.grad = -update

    def extra_repr(self) -> str:
        bn = self.bn_placement if self.batch_norm else False
        edges = [self.num_edges(l) for l in range(self.ladder.depth)]
        return (f"widths={self.widths}, activation={self.activation.name}, top={self.top_activation.name}, "
                f"batch_norm={bn!r}, bias={self.biases is not None}, edges={edges}"
                + (", shared" if self.shared else "") + ("" if self.readout is None else f", readout={self.readout}"))

