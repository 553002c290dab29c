"""A locally connected student whose nodes follow a layered region graph (issue 17; framework paper §2.2).

The graph version of :class:`smaso.student.network.LadderStudent`: every region r of level l < d of a
:class:`~teachers.graph_ladder.GraphLadder` has a group of n_l nodes computed from *all* its children
(level l + 1; the leaves carry the inputs x_c of size ``dim``), through one weight block per
parent-child edge (no weight sharing):

    u_r = sum_{c in ch(r)} W_{r,c} f_c + b_r       W_{r,c}: (n_l, n_{l+1})
    f_r = act(u_r) = s(u_r) o u_r                   (Eq 1, forward; s the gate)

with a linear top by default (n_0 = number of classes; ``top_activation`` as in LadderStudent).  A
child with several parents (overlapping receptive fields) feeds each of them, so backward its
gradient is the *sum* over its parents (Eq 1, backward):

    g_c = f'(u_c) o sum_{p in pa(c)} W_{p,c}^T g_p,     Delta W_{p,c} = E_x[g_p f_c^T]   (Eq 2)

Gradients follow the paper's sign: g = -N dLoss/du per example, Delta W = -dLoss/dW, so gradient
descent adds ``lr * Delta W`` (:meth:`GraphStudent.apply_update`).

Vectorised per level: the edges of level l (parent in l, child in l + 1) all have the shape
(n_l, n_{l+1}).  Where the level's children are strided slices of the level below (trees, 1-D
convolutions; a 2-D convolution is one run per row; :func:`_strided_plan`), each child place is one
batched matmul on a strided *view* of the children and one strided add backward, with no gather and no
scatter; other levels take one gather of the children, one batched matmul over the edges and one
``index_add`` into the parents (backward: the same with W^T, added into the children).
No Batch Norm (use :class:`~smaso.student.network.LadderStudent` for BN on trees).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from smaso.student.activations import Activation, get_activation
from smaso.student.network import LOSSES, LadderStudent, output_gradient, student_loss
from teachers.graph_ladder import GraphLadder

__all__ = ["GraphStudent", "GraphStudentRecord", "level_edge_index", "level_edges", "train_graph_student"]


@dataclass
class GraphStudentRecord:
    """Per-example quantities of one batch (lists indexed by level l = 0..d; level d = the inputs).

    Field names mirror :class:`~smaso.student.network.StudentRecord` (without BN, so f = fbar and
    g_f = g_raw):

    - ``u[l], f[l], fbar[l], slope[l], deriv[l], g_raw[l], g_f[l], g[l]``: ``(N, R_l, n_l)`` (None at
      the leaves except ``fbar[d]`` = x).  ``slope`` = s(u) (forward gate), ``deriv`` = f'(u) (backward
      gate), ``g_raw`` = -N dLoss/df (the sum over parents of W^T g), ``g`` = f'(u) o g_raw = -N dLoss/du.
    - ``dW[l]``: ``(E_l, n_l, n_{l+1})`` = E_x[g_parent f_child^T] for the edges of level l (in
      :attr:`GraphStudent.edges` order), ``db[l]``: ``(R_l, n_l)`` = E_x[g_l].
    - ``loss``: the batch's mean loss.
    """

    u: list = field(default_factory=list)
    f: list = field(default_factory=list)
    fbar: list = field(default_factory=list)
    slope: list = field(default_factory=list)
    deriv: list = field(default_factory=list)
    g_raw: list = field(default_factory=list)
    g_f: list = field(default_factory=list)
    g: list = field(default_factory=list)
    dW: list = field(default_factory=list)
    db: list = field(default_factory=list)
    loss: float = math.nan


def level_edges(g: GraphLadder, level: int) -> list[tuple[int, int]]:
    """The edges of ``level``: ``(parent in it, child in level + 1)``, parent-major, each parent's children in
    increasing order (the edge order of every per-edge tensor: weights, Delta W, focus and broadness sums)."""
    return [(r, c) for r in range(g.num_regions[level]) for c in g.children[level][r]]


def level_edge_index(g: GraphLadder, level: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`level_edges` as ``(parents, children)`` int64 ``(E_l,)`` tensors."""
    e = torch.tensor(level_edges(g, level), dtype=torch.int64).reshape(-1, 2)
    return e[:, 0].contiguous(), e[:, 1].contiguous()


def _check_int(value, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")
    return int(value)


#: A level split into more strided runs than this takes the gather / index_add path instead.
MAX_RUNS = 64


def _take(t: torch.Tensor, a: int, step: int, q: int) -> torch.Tensor:
    """Rows ``a, a + step, ..., a + (q - 1) step`` of ``t`` as a view (``step = 0``: row a, q times)."""
    if step == 0:
        return t[a: a + 1].expand(q, *t.shape[1:])
    return t[a: a + (q - 1) * step + 1: step]


def _strided_plan(children: tuple[tuple[int, ...], ...]):
    """A level's edges as strided runs (:func:`teachers.graph_sampling.strided_runs` of the parents' children), or
    None when that takes more than :data:`MAX_RUNS` runs.

    Each entry ``(parents, [(edges, (a, step, q)), ...])``: the parent slice, and per child place j the slice
    of the edge list (parent-major) and the children ``a + step * t`` (t < q) of those parents, in order.
    """
    from teachers.graph_sampling import strided_runs

    runs = strided_runs(children)
    if sum(rep for _, _, rep, _ in runs) > MAX_RUNS:
        return None
    first_edge = [0]
    for ch in children:
        first_edge.append(first_edge[-1] + len(ch))
    plan = []
    for i0, q, rep, places in runs:
        k = len(places)
        for r in range(rep):
            ps = slice(i0 + r, i0 + r + (q - 1) * rep + 1, rep)
            e0 = first_edge[i0 + r]
            plan.append((ps, [(slice(e0 + j, e0 + j + (q - 1) * rep * k + 1, rep * k), (a, s if q > 1 else 1, q))
                              for j, (a, s) in enumerate(places)]))
    return plan


class GraphStudent(nn.Module):
    """Locally connected student of a :class:`~teachers.graph_ladder.GraphLadder` (module docstring).

    :param g: the teacher's region graph (regions, edges, classes, input size).
    :param width: nodes per region at the hidden levels 1..d-1 (an int or one per level).
    :param activation: hidden activation (``"relu"``, ``"silu"``, ``"swish:0.7"``, ...).
    :param top_activation: activation of the top layer (``"linear"``, as LadderStudent).
    :param bias: learnable biases (initialised to 0).
    :param init_scale: weights ~ N(0, init_scale^2 / fan_in), fan_in = sum of the parent's children's widths.
    :param seed: initialisation seed (a local ``torch.Generator``; the global RNG is never used).
    :param shared: share weights like a convolution: every parent of a level uses one weight block per child
        *place* (the j-th of its sorted children), W_{r,c} = W_l[place(r, c)].  Needs every parent of a level
        to have the same number of children k_l (convolution-like ladders and uniform trees); the update of a
        shared block is the sum of its edges' Delta W (Eq 2 summed over the edges that share it).
    :param dtype, device: parameter dtype and device.

    :ivar widths: ``[n_0, ..., n_d]`` (n_0 = classes, n_d = input dim).
    :ivar weights: ``weights[l]`` ``(E_l, n_l, n_{l+1})``: W_{r,c} for the edges of level l; with ``shared``,
        ``(k_l, n_l, n_{l+1})``: one block per child place (:meth:`edge_weights` gives every edge's block).
    :ivar biases: ``biases[l]`` ``(R_l, n_l)`` (None without bias).

    With the same seed, on ``GraphLadder.from_ladder(tree)`` the initial weights are LadderStudent's
    (transposed per edge), so the two networks compute the same function (:meth:`from_ladder_student`).
    """

    def __init__(self, g: GraphLadder, width: int | list[int] = 8, *, activation: str | Activation = "relu",
                 top_activation: str | Activation = "linear", bias: bool = True, init_scale: float = 1.0,
                 seed: int = 0, shared: bool = False, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None):
        super().__init__()
        if not isinstance(g, GraphLadder):
            raise TypeError(f"g: expected a GraphLadder, got {type(g).__name__}")
        d = g.depth
        if isinstance(width, (list, tuple)):
            if len(width) != d - 1:
                raise ValueError(f"width: expected {d - 1} widths (levels 1..{d - 1}), got {list(width)}")
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
        if shared:
            for l in range(d):
                ks = sorted({len(ch) for ch in g.children[l]})
                if len(ks) != 1:
                    raise ValueError(f"shared: weight sharing needs every parent of a level to have the same number "
                                     f"of children; level {l}'s parents have {ks}")
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"dtype: expected a floating torch.dtype, got {dtype!r}")
        self.graph = g
        self.widths = [g.num_classes, *width, g.emission.dim]
        self.activation = get_activation(activation)
        self.top_activation = get_activation(top_activation)
        self.edges = [level_edges(g, l) for l in range(d)]
        for l in range(d):
            par, chi = level_edge_index(g, l)
            self.register_buffer(f"edge_parent_{l}", par, persistent=False)
            self.register_buffer(f"edge_child_{l}", chi, persistent=False)
        self._plans = [_strided_plan(g.children[l]) for l in range(d)]
        self.shared = shared
        for l in range(d):  # the place of every edge among its parent's sorted children
            place = torch.tensor([j for ch in g.children[l] for j in range(len(ch))], dtype=torch.int64)
            self.register_buffer(f"edge_place_{l}", place, persistent=False)
        gen = torch.Generator().manual_seed(seed)
        n = self.widths
        weights = []
        for l in range(d):
            if shared:
                k = len(g.children[l][0])
                w = torch.randn(k, n[l + 1], n[l], generator=gen, dtype=torch.float64) * (init_scale / math.sqrt(
                    k * n[l + 1]))
                weights.append(nn.Parameter(w.transpose(1, 2).contiguous().to(dtype)))
                continue
            fan_in = torch.tensor([len(g.children[l][r]) * n[l + 1] for r, _ in self.edges[l]], dtype=torch.float64)
            # drawn child-major (E, n_c, n_r) as LadderStudent's (R_{l+1}, n_{l+1}, n_l): on a tree the same seed
            # gives the same weights
            w = torch.randn(len(self.edges[l]), n[l + 1], n[l], generator=gen, dtype=torch.float64)
            w = w * init_scale / fan_in.sqrt()[:, None, None]
            weights.append(nn.Parameter(w.transpose(1, 2).contiguous().to(dtype)))
        self.weights = nn.ParameterList(weights)
        self.biases = nn.ParameterList([nn.Parameter(torch.zeros(g.num_regions[l], n[l], dtype=dtype))
                                        for l in range(d)]) if bias else None
        if device is not None:
            self.to(device)

    # ------------------------------------------------------------------ helpers
    def edge_index(self, level: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(parents, children)`` int64 ``(E_l,)``: the edges of ``level`` (parent in it, child one level below)."""
        return getattr(self, f"edge_parent_{level}"), getattr(self, f"edge_child_{level}")

    def edge_weights(self, level: int) -> torch.Tensor:
        """W_{r,c} of every edge of ``level``: ``(E_l, n_l, n_{l+1})`` (with ``shared``, each edge's place's block)."""
        W = self.weights[level]
        return W.index_select(0, getattr(self, f"edge_place_{level}")) if self.shared else W

    def shared_update(self, dW: torch.Tensor, level: int) -> torch.Tensor:
        """The update of ``level``'s parameter from per-edge updates ``dW`` ``(E_l, n_l, n_{l+1})``: the updates
        themselves, or with ``shared`` their sum over the edges of each place ``(k_l, n_l, n_{l+1})``."""
        if not self.shared:
            return dW
        place = getattr(self, f"edge_place_{level}")
        return dW.new_zeros(self.weights[level].shape).index_add_(0, place, dW)

    def act(self, level: int) -> Activation:
        """Activation of ``level``: the top activation at level 0, the hidden one elsewhere."""
        return self.top_activation if level == 0 else self.activation

    def check_inputs(self, x: torch.Tensor) -> None:
        """Raise a TypeError/ValueError unless ``x`` is ``(N, leaves, dim)`` for this student's graph."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
        want = (self.graph.num_regions[-1], self.widths[-1])
        if x.dim() != 3 or tuple(x.shape[1:]) != want:
            raise ValueError(f"x: expected shape (N, {want[0]}, {want[1]}) for this student's graph, "
                             f"got {tuple(x.shape)}")

    def _check_labels(self, x: torch.Tensor, y: torch.Tensor, loss: str) -> None:
        if loss not in LOSSES:
            raise ValueError(f"loss: expected one of {LOSSES}, got {loss!r}")
        if not isinstance(y, torch.Tensor) or y.shape != (x.shape[0],):
            raise ValueError(f"y: expected a tensor of shape ({x.shape[0]},), got "
                             f"{tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__}")
        if y.is_floating_point() or y.is_complex():
            raise ValueError(f"y: expected integer labels, got dtype {y.dtype}")
        if y.numel() and (y.min() < 0 or y.max() >= self.widths[0]):
            raise ValueError(f"y: labels must lie in [0, {self.widths[0]}), got [{y.min().item()}, {y.max().item()}]")

    def _leaves(self, x: torch.Tensor) -> torch.Tensor:
        """The inputs ``(N, leaves, dim)`` as a node-major view ``(leaves, dim, N)``."""
        return x.to(self.weights[0].dtype).permute(1, 2, 0)

    def _pre_activation(self, level: int, child: torch.Tensor) -> torch.Tensor:
        """u of ``level`` node-major ``(R_l, n_l, N)`` from the children's outputs ``(R_{l+1}, n_{l+1}, N)``."""
        W = self.edge_weights(level)
        R, N = self.graph.num_regions[level], child.shape[-1]
        plan = self._plans[level]
        if plan is None:  # irregular level: one gather, one batched matmul, one index_add
            par, chi = self.edge_index(level)
            msg = torch.bmm(W, child.index_select(0, chi))  # (E, n_l, N)
            u = msg.new_zeros(R, self.widths[level], N).index_add_(0, par, msg)
        else:  # strided runs (trees, convolutions): views of the children, no gather or scatter
            u = child.new_empty(R, self.widths[level], N)
            for ps, places in plan:
                acc = None
                for es, (a, st, q) in places:
                    m = torch.bmm(W[es], _take(child, a, st, q))
                    acc = m if acc is None else acc.add_(m)
                u[ps] = acc
        if self.biases is not None:
            u = u + self.biases[level].unsqueeze(-1)
        return u

    def _backward_level(self, level: int, g: torch.Tensor, child: torch.Tensor, need_raw: bool
                        ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Delta W of ``level``'s edges ``(E_l, n_l, n_{l+1})`` = E_x[g_p f_c^T] (Eq 2) and, if ``need_raw``, the
        children's raw gradient ``(R_{l+1}, n_{l+1}, N)`` = sum over each child's parents of W_pc^T g_p (Eq 1)."""
        W = self.edge_weights(level)
        N = g.shape[-1]
        plan = self._plans[level]
        shape = (self.graph.num_regions[level + 1], self.widths[level + 1], N)
        if plan is None:
            par, chi = self.edge_index(level)
            ge = g.index_select(0, par)  # (E, n_l, N)
            dW = torch.bmm(ge, child.index_select(0, chi).transpose(1, 2)) / N
            raw = g.new_zeros(shape).index_add_(0, chi, torch.bmm(W.transpose(1, 2), ge)) if need_raw else None
            return dW, raw
        dW = torch.empty_like(W)
        raw = g.new_zeros(shape) if need_raw else None
        for ps, places in plan:
            gp = g[ps]
            for es, (a, st, q) in places:
                dW[es] = torch.bmm(gp, _take(child, a, st, q).transpose(1, 2)) / N
                if need_raw:
                    back = torch.bmm(W[es].transpose(1, 2), gp)  # (q, n_c, N)
                    if st == 0:
                        raw[a] += back.sum(0)
                    else:
                        raw[a: a + (q - 1) * st + 1: st] += back
        return dW, raw

    # ------------------------------------------------------------------ forward
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Outputs f_0 ``(N, n_0)`` (differentiable)."""
        self.check_inputs(x)
        h = self._leaves(x)
        for l in range(self.graph.depth - 1, -1, -1):
            h = self.act(l)(self._pre_activation(l, h))
        return h[0].T

    def loss(self, out: torch.Tensor, y: torch.Tensor, kind: str = "squared") -> torch.Tensor:
        """Mean loss: ``"squared"`` 1/2 |f_0 - onehot(y)|^2 or ``"cross_entropy"`` (as LadderStudent)."""
        return student_loss(out, y, kind)

    # ------------------------------------------------------------------ explicit forward + backward
    @torch.no_grad()
    def forward_backward(self, x: torch.Tensor, y: torch.Tensor, loss: str = "squared") -> GraphStudentRecord:
        """Forward and explicit backward pass on one batch (Eq 1-2), every per-example quantity recorded.

        Backward, level by level from the top: g_l = f'(u_l) o g_raw_l, Delta W_{p,c} = E_x[g_p f_c^T],
        Delta b = E_x[g], and the raw gradient at level l + 1 is the sum over each child's parents of
        W_{p,c}^T g_p (one batched matmul over the edges, ``index_add`` into the children).  Equal to
        autograd on :meth:`forward` (tests/test_graph_student.py).
        """
        self.check_inputs(x)
        self._check_labels(x, y, loss)
        d = self.graph.depth
        keys = ("u", "f", "slope", "deriv", "g_raw", "g")
        nm = {k: [None] * (d + 1) for k in keys}  # node-major (R_l, n_l, N)
        h = leaves = self._leaves(x)
        for l in range(d - 1, -1, -1):
            u = self._pre_activation(l, h)
            a = self.act(l)
            s = a.slope(u)
            nm["u"][l], nm["slope"][l] = u, s
            nm["deriv"][l] = s if a.homogeneous else a.derivative(u)
            h = nm["f"][l] = s * u
        out = h[0]  # (n_0, N)
        g_top, loss_value = output_gradient(out, y, loss)
        nm["g_raw"][0] = g_top[None]
        dW, db = [None] * d, [None] * d
        for l in range(d):
            g = nm["g"][l] = nm["deriv"][l] * nm["g_raw"][l]
            child = leaves if l + 1 == d else nm["f"][l + 1]
            dW[l], raw = self._backward_level(l, g, child, l + 1 < d)
            db[l] = g.mean(-1)
            if raw is not None:
                nm["g_raw"][l + 1] = raw
        per = {k: [None if t is None else t.permute(2, 0, 1) for t in v] for k, v in nm.items()}
        fbar = list(per["f"])
        fbar[d] = x.to(self.weights[0].dtype)
        return GraphStudentRecord(u=per["u"], f=per["f"], fbar=fbar, slope=per["slope"], deriv=per["deriv"],
                                  g_raw=per["g_raw"], g_f=list(per["g_raw"]), g=per["g"], dW=dW, db=db,
                                  loss=loss_value)

    # ------------------------------------------------------------------ updates
    @torch.no_grad()
    def apply_update(self, rec: GraphStudentRecord, lr: float, weight_decay: float = 0.0) -> None:
        """Gradient descent step W += lr (Delta W - 2 weight_decay W) (Frobenius regularizer on the
        weights only); biases take their plain update, as LadderStudent.apply_update.  Shared blocks take the
        sum of their edges' updates (:meth:`shared_update`)."""
        for l, W in enumerate(self.weights):
            W.add_(self.shared_update(rec.dW[l], l) - 2 * weight_decay * W, alpha=lr)
            if self.biases is not None:
                self.biases[l].add_(rec.db[l], alpha=lr)

    # ------------------------------------------------------------------ trees
    @classmethod
    def from_ladder_student(cls, student: LadderStudent) -> GraphStudent:
        """The same network on ``GraphLadder.from_ladder(student.ladder)``: LadderStudent's child-major block
        ``weights[l][c]`` ``(n_{l+1}, n_l)`` becomes edge (c // b, c)'s ``W`` = its transpose; biases,
        activations, dtype and device copied.  Students with Batch Norm are refused (no BN here)."""
        if not isinstance(student, LadderStudent):
            raise TypeError(f"student: expected a LadderStudent, got {type(student).__name__}")
        if student.batch_norm:
            raise ValueError("student: a LadderStudent with Batch Norm has no GraphStudent equivalent")
        lad = student.ladder
        W0 = student.weights[0]
        out = cls(GraphLadder.from_ladder(lad), list(student.widths[1:-1]), activation=student.activation,
                  top_activation=student.top_activation, bias=student.biases is not None, dtype=W0.dtype,
                  device=W0.device)
        with torch.no_grad():
            for l in range(lad.depth):
                # tree edges, parent-major, are child-ordered: edge e joins child e to parent e // b
                out.weights[l].copy_(student.weights[l].transpose(1, 2))
                if out.biases is not None:
                    out.biases[l].copy_(student.biases[l])
        return out

    def extra_repr(self) -> str:
        """Widths, activations, bias and the edge count per level."""
        return (f"widths={self.widths}, activation={self.activation.name}, top={self.top_activation.name}, "
                f"bias={self.biases is not None}, edges={[len(e) for e in self.edges]}"
                + (", shared" if self.shared else ""))


def train_graph_student(student: GraphStudent, x: torch.Tensor, y: torch.Tensor, *, steps: int, lr: float,
                        batch_size: int | None = None, loss: str = "squared", weight_decay: float = 0.0,
                        seed: int = 0) -> list[float]:
    """Minibatch SGD on ``(x, y)`` with the explicit backward pass (:meth:`GraphStudent.forward_backward`,
    then :meth:`~GraphStudent.apply_update`).

    Each epoch visits the rows in a random order drawn from a local ``torch.Generator`` seeded with ``seed``
    (the global RNG is untouched); ``batch_size=None`` is full-batch gradient descent.

    :param x: ``(N, leaves, dim)`` inputs; ``y``: ``(N,)`` labels.
    :returns: the loss of every step (the batch's mean loss before that step's update).
    :raises smaso.student.compare.TrainingDiverged: a non-finite loss or weight (the message names the step).
    """
    from smaso.student.compare import TrainingDiverged, _check_hyper

    steps = _check_int(steps, "steps", 0)
    _check_hyper("lr", lr, positive=True)
    _check_hyper("weight_decay", weight_decay, positive=False)
    student.check_inputs(x)
    n = x.shape[0]
    if n == 0:
        raise ValueError("x: the dataset is empty")
    bs = n if batch_size is None else _check_int(batch_size, "batch_size", 1)
    bs = min(bs, n)
    gen = torch.Generator().manual_seed(_check_int(seed, "seed", 0))
    dev = student.weights[0].device
    history: list[float] = []
    order, pos = torch.arange(n), n
    for step in range(steps):
        if bs < n:
            if pos + bs > n:
                order, pos = torch.randperm(n, generator=gen), 0
            idx = order[pos: pos + bs]
            pos += bs
            xb, yb = x[idx], y[idx]
        else:
            xb, yb = x, y
        rec = student.forward_backward(xb.to(dev), yb.to(dev), loss)
        if not math.isfinite(rec.loss):
            raise TrainingDiverged(f"step {step}: the loss is {rec.loss}")
        history.append(rec.loss)
        student.apply_update(rec, lr, weight_decay)
        if not all(bool(torch.isfinite(w).all()) for w in student.weights):
            raise TrainingDiverged(f"step {step}: a weight is no longer finite")
    return history
