"""Reference copy of ``smaso/student/network.py`` as of commit 3494c95 (before the one student of every
ladder), kept for ``benchmarks/bench_student.py`` and ``benchmarks/bench_graph_statistics.py``: the
uniform-tree code the one student is timed against.  Only imports changed.  Not part of the
library; uniform trees only.

A locally connected student network whose structure follows a ladder (framework paper §2.2).

Every non-leaf region alpha of level l has a group of n_l nodes; node groups are connected
only from each child region beta to its parent alpha, through its own weight matrix
W_ba (n_{l+1} x n_l; no weight sharing).  Level by level, batched over the regions:

    u_a    = sum_{b in ch(a)} fbar_b W_ba + bias_a        (N, R_l, n_l)
    f_a    = act(u_a) = s(u_a) o u_a                     (s: the gate, Eq 1)
    fbar_a = BN(f_a)  (optional, hidden levels, Eq 10)   else f_a

with fbar at the leaves = the inputs x (one-hot or Gaussian, n_d = input dim) and a linear
top layer of n_0 = number of classes (its activation is configurable).  That is Batch Norm
*after* the activation (``batch_norm=True`` or ``"after"``).  With ``batch_norm="before"`` BN
sits between the linear map and the gate, the premise of Thm 9 and the setting of §7.5.1:

    u_a    = sum_{b in ch(a)} fbar_b W_ba + bias_a        (the BN input)
    f_a    = BN(u_a) = c1 (u_a - mu) / sigma + c0        (the normalized pre-activation: the gate's input)
    fbar_a = act(f_a) = s(f_a) o f_a                     (the node's output)

Backward the gradient at fbar goes through the gate first, g_f = f'(f) o g_raw, and then
through BN (Thm 5), g = (c1 / sigma) P_perp_{u,1} g_f, so the gradient that enters Delta W is
zero-mean over the batch (1^T G~ = 0, Thm 9) and orthogonal to u (E_x[u g] = 0 for bn_eps = 0,
§7.5.1).  In both placements the record's ``f`` is the middle of a node's chain
u -> f -> fbar, ``g_f`` the gradient at it, ``g`` the gradient at u and ``g_raw`` the one at fbar.

:meth:`LadderStudent.forward_backward` runs the forward pass and an explicit backward pass
(Eq 1, back-propagation written out level by level; BN by Thm 5) and records, per example and
per node, u, f, fbar, the gates s(u) and f'(u), the raw gradient at fbar, the gradient g after
BN and gating, and the batch's weight update Delta W = E_x[fbar_child g_parent] (Eq 2), all
of which equal autograd.  Gradients follow the paper's sign: g = -dLoss/du, so gradient
descent adds ``lr * Delta W``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from smaso.student.activations import Activation, get_activation
from smaso.student.batchnorm import bn_backward, bn_forward
from teachers.ladder import Ladder

__all__ = ["LadderStudent", "StudentRecord", "output_gradient", "student_loss"]

LOSSES = ("squared", "cross_entropy")
BN_PLACEMENTS = ("after", "before")


def _bn_placement(batch_norm) -> str | None:
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
    (None where not defined: the leaves have only ``fbar`` = x).  ``dW[l]``: ``(R_{l+1},
    n_{l+1}, n_l)`` = E_x[fbar_{l+1} g_l] (child -> parent weights of level l), ``db[l]``:
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
    slots are the fields named by ``stacked_fields`` (see :meth:`LadderStudent.stacked_fields`).
    """

    u: list = field(default_factory=list)
    f: list = field(default_factory=list)
    fbar: list = field(default_factory=list)
    slope: list = field(default_factory=list)
    deriv: list = field(default_factory=list)
    f_tilde: list = field(default_factory=list)
    sigma: list = field(default_factory=list)
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


def student_loss(out: torch.Tensor, y: torch.Tensor, kind: str = "squared") -> torch.Tensor:
    """Mean loss of outputs ``out`` ``(N, m_0)`` against labels ``y`` ``(N,)``: ``"squared"``
    1/2 |f_0 - onehot(y)|^2 (G_omega = I - F_omega) or ``"cross_entropy"`` (softmax)."""
    if kind == "squared":
        return 0.5 * (out - F.one_hot(y.long(), out.shape[-1]).to(out.dtype)).pow(2).sum(-1).mean()
    if kind == "cross_entropy":
        return F.cross_entropy(out, y.long())
    raise ValueError(f"loss: expected one of {LOSSES}, got {kind!r}")


def output_gradient(out: torch.Tensor, y: torch.Tensor, loss: str) -> tuple[torch.Tensor, float]:
    """The backward signal at the top, ``-N dLoss/df_0``, and the loss, for outputs ``out`` ``(n_0, N)``.

    ``"squared"``: ``onehot(y) - f_0`` (G_omega = I - F_omega); ``"cross_entropy"``: ``onehot(y) - softmax(f_0)``.
    :returns: ``((n_0, N) gradient, the mean loss as a float)``.
    """
    target = F.one_hot(y.long(), out.shape[0]).to(out.dtype).T
    if loss == "squared":
        return target - out, (0.5 * (out - target).pow(2).sum(0).mean()).item()
    return target - out.softmax(0), F.cross_entropy(out.T, y.long()).item()


class LadderStudent(nn.Module):
    """Locally connected student of a ladder (see the module docstring).

    :param ladder: the teacher's ladder (gives regions, branching, classes, input size).
    :param width: nodes per region at the hidden levels 1..d-1 (an int or one per level).
    :param activation: hidden activation (``"relu"``, ``"silu"``, ``"swish:0.7"``, ...).
    :param top_activation: activation of the top layer (``"linear"`` by default).
    :param batch_norm: Batch Norm at every hidden node (levels 1..d-1): ``False`` (none),
        ``True`` or ``"after"`` (after the activation, Eq 10), ``"before"`` (between the linear map
        and the gate: f = s(BN(u)) BN(u), Thm 9's premise).  Stored as :attr:`bn_placement`
        (None, ``"after"``, ``"before"``); :attr:`batch_norm` is the bool "has BN".
    :param bias: learnable biases.
    :param bn_eps: BN's eps (0 reproduces Thm 5's exact projection).
    :param init_scale: weights ~ N(0, init_scale^2 / fan_in).
    :param seed: initialization seed.
    :param dtype, device: parameter dtype and device.
    """

    def __init__(self, ladder: Ladder, width: int | list[int] = 8, *, activation: str | Activation = "relu",
                 top_activation: str | Activation = "linear", batch_norm: bool | str = False, bias: bool = True,
                 bn_eps: float = 1e-5, init_scale: float = 1.0, seed: int = 0,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None):
        super().__init__()
        if not isinstance(ladder, Ladder):
            raise TypeError(f"ladder: expected a Ladder, got {type(ladder).__name__}")
        d = ladder.depth
        if isinstance(width, int):
            width = [width] * (d - 1)
        width = [int(w) for w in width]
        if len(width) != d - 1 or any(w < 1 for w in width):
            raise ValueError(f"width: expected {d - 1} positive widths (levels 1..{d - 1}), got {width}")
        self.ladder = ladder
        self.widths = [ladder.num_classes, *width, ladder.emission.dim]  # n_0 .. n_d
        self.activation = get_activation(activation)
        self.top_activation = get_activation(top_activation)
        self.bn_placement = _bn_placement(batch_norm)
        self.batch_norm = self.bn_placement is not None
        self.bn_eps = float(bn_eps)
        g = torch.Generator().manual_seed(seed)
        R, n = ladder.num_regions, self.widths
        self.weights = nn.ParameterList([
            nn.Parameter((torch.randn(R[l + 1], n[l + 1], n[l], generator=g, dtype=torch.float64)
                          * init_scale / math.sqrt(ladder.branching[l] * n[l + 1])).to(dtype))
            for l in range(d)])
        self.biases = nn.ParameterList([nn.Parameter(torch.zeros(R[l], n[l], dtype=dtype)) for l in range(d)]) \
            if bias else None
        if self.batch_norm:
            self.bn_scale = nn.ParameterList([nn.Parameter(torch.ones(R[l], n[l], dtype=dtype)) for l in range(1, d)])
            self.bn_shift = nn.ParameterList([nn.Parameter(torch.zeros(R[l], n[l], dtype=dtype)) for l in range(1, d)])
        if device is not None:
            self.to(device)

    # ------------------------------------------------------------------ helpers
    def act(self, level: int) -> Activation:
        """Activation of ``level``: the top activation at level 0, the hidden one elsewhere."""
        return self.top_activation if level == 0 else self.activation

    def bn_params(self, level: int):
        """``(c1, c0)`` of the hidden level (1..d-1), or None without BN."""
        if not self.batch_norm or level == 0 or level >= self.ladder.depth:
            return None
        return self.bn_scale[level - 1], self.bn_shift[level - 1]

    def check_inputs(self, x: torch.Tensor) -> None:
        """Raise a TypeError/ValueError unless ``x`` is ``(N, R_d, dim)`` for this student's ladder."""
        lad = self.ladder
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
        want = (lad.num_regions[-1], self.widths[-1])
        if x.dim() != 3 or tuple(x.shape[1:]) != want:
            raise ValueError(f"x: expected shape (N, {want[0]}, {want[1]}) for this student's ladder "
                             f"({lad!r}), got {tuple(x.shape)}")

    def _pre_activation(self, level: int, child: torch.Tensor) -> torch.Tensor:
        """u of ``level``, node-major: ``(R_l, n_l, N)`` from the children's outputs ``(R_{l+1}, n_{l+1}, N)``.

        The b children of parent region r are regions rb .. rb+b-1, so in the node-major layout
        the rows of parent r's input are one contiguous block: the reshape below is a view and a
        level is one batched matmul (the bias added by the same call) with no copies.
        """
        R, n = self.ladder.num_regions[level], child.shape[-1]
        h = child.reshape(R, -1, n)  # (R_l, b n_{l+1}, N)
        Wt = self.weights[level].reshape(R, -1, self.widths[level]).transpose(1, 2)  # (R_l, n_l, b n_{l+1})
        if self.biases is None:
            return torch.bmm(Wt, h)
        return torch.baddbmm(self.biases[level].unsqueeze(-1), Wt, h)

    def _leaves(self, x: torch.Tensor) -> torch.Tensor:
        """The inputs ``(N, R_d, dim)`` as a node-major view ``(R_d, dim, N)`` (no copy for the student's dtype)."""
        return x.to(self.weights[0].dtype).permute(1, 2, 0)

    def _batch_norm(self, level: int, f: torch.Tensor):
        """Eq 10 on a node-major ``(R_l, n_l, N)`` level (the BN input: f after, u before the gate), or
        None without BN: ``(output, standardized input, sigma)``."""
        bn = self.bn_params(level)
        if bn is None:
            return None
        # bn_forward normalizes over dim 0: hand it the (N, R, n) view; its outputs keep f's layout
        fbar, f_tilde, _, sigma = bn_forward(f.permute(2, 0, 1), bn[0], bn[1], self.bn_eps)
        return fbar.permute(1, 2, 0), f_tilde.permute(1, 2, 0), sigma

    # ------------------------------------------------------------------ forward
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Outputs f_0 ``(N, n_0)`` (differentiable; BN uses the batch's statistics)."""
        self.check_inputs(x)
        h = self._leaves(x)
        before = self.bn_placement == "before"
        for l in range(self.ladder.depth - 1, -1, -1):
            h = self._pre_activation(l, h)
            bn = self._batch_norm(l, h) if before else None
            if bn is not None:
                h = bn[0]
            h = self.act(l).apply_(h)  # u (or BN(u)) is a fresh temporary: activate in place
            bn = None if before else self._batch_norm(l, h)
            if bn is not None:
                h = bn[0]
        return h[0].T

    def loss(self, out: torch.Tensor, y: torch.Tensor, kind: str = "squared") -> torch.Tensor:
        """Mean loss: ``"squared"`` 1/2 |f_0 - onehot(y)|^2 (G_omega = I - F_omega) or ``"cross_entropy"``."""
        return student_loss(out, y, kind)

    # ------------------------------------------------------------------ explicit forward + backward
    def stacked_fields(self) -> tuple[str, ...]:
        """The record fields that differ per example and per node, in the order of a stacked buffer.

        ``fbar, f, slope, deriv, u, g, g_f`` less those that coincide with another: f = fbar
        without BN, and f' = s for activations with f(u) = f'(u) u (ReLU, leaky ReLU, abs, linear).
        These are what frequency statistics average (Eq 6).
        """
        homogeneous = self.activation.homogeneous and self.top_activation.homogeneous
        return tuple(k for k in ("fbar", "f", "slope", "deriv", "u", "g", "g_f")
                     if not (k == "f" and not self.batch_norm) and not (k == "deriv" and homogeneous))

    @torch.no_grad()
    def forward_backward(self, x: torch.Tensor, y: torch.Tensor, loss: str = "squared", *,
                         stacked: bool | list[torch.Tensor] = False) -> StudentRecord:
        """Forward and explicit backward pass on one batch, every per-example quantity recorded.

        Computed node-major (every level's tensors are ``(R_l, n_l, N)``, contiguous over the
        batch, so that a level is one batched matmul, Delta W contracts over the batch and BN
        reduces along memory); the record's fields are ``(N, R_l, n_l)`` views of them.

        :param stacked: write the :meth:`stacked_fields` of every level l < d into one buffer
            ``rec.stacked[l]`` of shape ``(R_l, k, n_l, N)`` (the fields are views of its slots), so
            that per-event sums of all of them are one batched matmul
            (:class:`~smaso.student.frequency.FrequencyAccumulator` asks for this).  A previous record's
            ``rec.stacked`` is reused when its shapes fit (that record's fields are overwritten):
            streaming over batches then writes into the same memory instead of faulting in fresh
            pages on every batch.
        """
        self.check_inputs(x)
        if loss not in LOSSES:
            raise ValueError(f"loss: expected one of {LOSSES}, got {loss!r}")
        if y.shape != (x.shape[0],):
            raise ValueError(f"y: expected shape ({x.shape[0]},), got {tuple(y.shape)}")
        if y.numel() and (y.min() < 0 or y.max() >= self.widths[0]):
            raise ValueError(f"y: labels must lie in [0, {self.widths[0]}), got [{y.min().item()}, {y.max().item()}]")
        lad = self.ladder
        d, n = lad.depth, x.shape[0]
        dtype, dev = self.weights[0].dtype, self.weights[0].device
        keys = self.stacked_fields()
        shapes = [(lad.num_regions[l], len(keys), self.widths[l], n) for l in range(d)]
        if not isinstance(stacked, (bool, list, tuple)):
            raise TypeError(f"stacked: expected a bool or a previous record's buffers, got {type(stacked).__name__}")
        reuse = not isinstance(stacked, bool) and len(stacked) == d and all(
            isinstance(b, torch.Tensor) and tuple(b.shape) == shape and b.dtype == dtype and b.device == dev
            and b.is_contiguous() for b, shape in zip(stacked, shapes, strict=False))
        stacked_given, stacked = stacked, stacked is not False  # buffers to reuse also mean "stacked"
        buffers = list(stacked_given) if reuse else [torch.empty(shape, dtype=dtype, device=dev) if stacked else None
                                                     for shape in shapes]

        def slot(l: int, key: str) -> torch.Tensor | None:
            """Where field ``key`` of level ``l`` is written: a slot of the stacked buffer, or None (new tensor)."""
            return buffers[l][:, keys.index(key)] if stacked and key in keys else None

        def put(l: int, key: str, value: torch.Tensor) -> torch.Tensor:
            out = slot(l, key)
            return value if out is None else out.copy_(value)

        names = ("u", "f", "fbar", "slope", "deriv", "f_tilde", "g_raw", "g_f", "g")
        nm = {k: [None] * (d + 1) for k in names}  # node-major (R_l, n_l, N)
        sigma, dW, db, dc1, dc0 = ([None] * (d + 1) for _ in range(5))
        nm["fbar"][d] = self._leaves(x)
        inputs = [None] * d  # (R_l, b n_{l+1}, N): level l's input, its children's outputs grouped by parent
        before = self.bn_placement == "before"
        for l in range(d - 1, -1, -1):
            # a view, except for a slot of a stacked buffer (then one copy, shared by forward and Delta W)
            inputs[l] = nm["fbar"][l + 1].reshape(lad.num_regions[l], -1, n)
            u = nm["u"][l] = put(l, "u", self._pre_activation(l, inputs[l]))
            has_bn = self.bn_params(l) is not None
            gate_in = u
            if before and has_bn:  # BN between the linear map and the gate: f = BN(u) is the gate's input
                bn = self._batch_norm(l, u)
                gate_in = nm["f"][l] = put(l, "f", bn[0])
                nm["f_tilde"][l], sigma[l] = bn[1], bn[2]
            a = self.act(l)
            s = nm["slope"][l] = a.slope(gate_in, out=slot(l, "slope"))
            nm["deriv"][l] = s if a.homogeneous else put(l, "deriv", a.derivative(gate_in))
            if "deriv" in keys and a.homogeneous:  # the other level's activation needs its own slot
                put(l, "deriv", s)
            if before and has_bn:
                nm["fbar"][l] = torch.mul(s, gate_in, out=slot(l, "fbar"))
                continue
            f = nm["f"][l] = torch.mul(s, u, out=slot(l, "f" if has_bn else "fbar"))
            bn = self._batch_norm(l, f)  # None exactly when not has_bn
            if bn is None:
                nm["fbar"][l] = f
                if "f" in keys:  # BN elsewhere in the network: F = Fbar on this level
                    put(l, "f", f)
            else:
                nm["fbar"][l] = put(l, "fbar", bn[0])
                nm["f_tilde"][l], sigma[l] = bn[1], bn[2]
        out = nm["fbar"][0][0]  # (n_0, N)
        g_top, loss_value = output_gradient(out, y, loss)
        nm["g_raw"][0] = g_top[None]
        for l in range(d):
            bn = self.bn_params(l)
            if bn is None:
                nm["g_f"][l] = put(l, "g_f", nm["g_raw"][l])
            elif before:
                # the gate first (g_f: the gradient at BN's output), then Thm 5 back to u
                gf = nm["g_f"][l] = torch.mul(nm["deriv"][l], nm["g_raw"][l], out=slot(l, "g_f"))
                gu, c1, c0 = bn_backward(gf.permute(2, 0, 1), nm["f_tilde"][l].permute(2, 0, 1), sigma[l], bn[0])
                dc1[l], dc0[l] = c1 / n, c0 / n
                g = nm["g"][l] = put(l, "g", gu.permute(1, 2, 0))
            else:
                gf, c1, c0 = bn_backward(nm["g_raw"][l].permute(2, 0, 1), nm["f_tilde"][l].permute(2, 0, 1),
                                         sigma[l], bn[0])
                nm["g_f"][l] = put(l, "g_f", gf.permute(1, 2, 0))
                dc1[l], dc0[l] = c1 / n, c0 / n
            if bn is None or not before:
                # g = f' o g_f: the paper's gated gradient (Eq 1)
                g = nm["g"][l] = torch.mul(nm["deriv"][l], nm["g_f"][l], out=slot(l, "g"))
            # Delta W_ba = E_x[fbar_b g_a] (Eq 2): per parent region, g times its children's grouped
            # outputs (R_l, b n_{l+1}, N) transposed, a contraction over the batch (in this order the
            # leaf view of x is read row by row: ~1.5x faster than child @ g^T)
            R, n_l = lad.num_regions[l], self.widths[l]
            dW[l] = (torch.bmm(g, inputs[l].transpose(1, 2)).transpose(1, 2) / n).reshape(self.weights[l].shape)
            db[l] = g.mean(-1)
            if l + 1 < d:  # raw gradient at the children's outputs: W g, one block per parent
                W = self.weights[l].reshape(R, -1, n_l)
                nm["g_raw"][l + 1] = torch.bmm(W, g).reshape(lad.num_regions[l + 1], self.widths[l + 1], n)
        rec = StudentRecord(**{k: [None if t is None else t.permute(2, 0, 1) for t in v] for k, v in nm.items()},
                            sigma=sigma, dW=dW, db=db, dc1=dc1, dc0=dc0, loss=loss_value,
                            stacked=buffers if stacked else None, stacked_fields=keys if stacked else None)
        rec.fbar[d] = x.to(dtype)
        return rec

    # ------------------------------------------------------------------ updates
    @torch.no_grad()
    def apply_update(self, rec: StudentRecord, lr: float, weight_decay: float = 0.0) -> None:
        """Gradient descent step W += lr (Delta W - 2 weight_decay W) (Frobenius regularizer
        weight_decay * sum |W|_F^2 on the weights only); biases and BN parameters take
        their plain updates."""
        for l, W in enumerate(self.weights):
            W.add_(rec.dW[l] - 2 * weight_decay * W, alpha=lr)
            if self.biases is not None:
                self.biases[l].add_(rec.db[l], alpha=lr)
        if self.batch_norm:
            for l in range(1, self.ladder.depth):
                self.bn_scale[l - 1].add_(rec.dc1[l], alpha=lr)
                self.bn_shift[l - 1].add_(rec.dc0[l], alpha=lr)

    def extra_repr(self) -> str:
        bn = self.bn_placement if self.batch_norm else False
        return (f"widths={self.widths}, activation={self.activation.name}, top={self.top_activation.name}, "
                f"batch_norm={bn!r}, bias={self.biases is not None}")
