"""A locally connected student network whose structure follows a ladder (framework paper §2.2).

Every non-leaf region alpha of level l has a group of n_l nodes; node groups are connected
only from each child region beta to its parent alpha, through its own weight matrix
W_ba (n_{l+1} x n_l; no weight sharing).  Level by level, batched over the regions:

    u_a    = sum_{b in ch(a)} fbar_b W_ba + bias_a        (N, R_l, n_l)
    f_a    = act(u_a) = s(u_a) o u_a                     (s: the gate, Eq 1)
    fbar_a = BN(f_a)  (optional, hidden levels, Eq 10)   else f_a

with fbar at the leaves = the inputs x (one-hot or Gaussian, n_d = input dim) and a linear
top layer of n_0 = number of classes (its activation is configurable).

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

from teachers.ladder import Ladder

from .activations import Activation, get_activation
from .batchnorm import bn_backward, bn_forward

__all__ = ["LadderStudent", "StudentRecord"]

LOSSES = ("squared", "cross_entropy")


@dataclass
class StudentRecord:
    """Per-example quantities of one batch (lists indexed by level l = 0..d; level d = inputs).

    ``u[l], f[l], fbar[l], slope[l], deriv[l], g_raw[l], g_f[l], g[l]``: ``(N, R_l, n_l)``
    (None where not defined: the leaves have only ``fbar`` = x).  ``dW[l]``: ``(R_{l+1},
    n_{l+1}, n_l)`` = E_x[fbar_{l+1} g_l] (child -> parent weights of level l), ``db[l]``:
    ``(R_l, n_l)`` = E_x[g_l], ``dc1[l], dc0[l]``: BN parameter updates.  ``loss``: mean loss.
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


class LadderStudent(nn.Module):
    """Locally connected student of a ladder (see the module docstring).

    :param ladder: the teacher's ladder (gives regions, branching, classes, input size).
    :param width: nodes per region at the hidden levels 1..d-1 (an int or one per level).
    :param activation: hidden activation (``"relu"``, ``"silu"``, ``"swish:0.7"``, ...).
    :param top_activation: activation of the top layer (``"linear"`` by default).
    :param batch_norm: BN after the activation of every hidden node (Eq 10).
    :param bias: learnable biases.
    :param bn_eps: BN's eps (0 reproduces Thm 5's exact projection).
    :param init_scale: weights ~ N(0, init_scale^2 / fan_in).
    :param seed: initialization seed.
    :param dtype, device: parameter dtype and device.
    """

    def __init__(self, ladder: Ladder, width: int | list[int] = 8, *, activation: str | Activation = "relu",
                 top_activation: str | Activation = "linear", batch_norm: bool = False, bias: bool = True,
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
        self.batch_norm = bool(batch_norm)
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
        return self.top_activation if level == 0 else self.activation

    def bn_params(self, level: int):
        """``(c1, c0)`` of the hidden level (1..d-1), or None without BN."""
        if not self.batch_norm or level == 0 or level >= self.ladder.depth:
            return None
        return self.bn_scale[level - 1], self.bn_shift[level - 1]

    def check_inputs(self, x: torch.Tensor) -> None:
        lad = self.ladder
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
        want = (lad.num_regions[-1], self.widths[-1])
        if x.dim() != 3 or tuple(x.shape[1:]) != want:
            raise ValueError(f"x: expected shape (N, {want[0]}, {want[1]}) for this student's ladder "
                             f"({lad!r}), got {tuple(x.shape)}")

    def _pre_activation(self, level: int, child: torch.Tensor) -> torch.Tensor:
        """u of ``level`` from the children's outputs ``(N, R_{l+1}, n_{l+1})``: ``(N, R_l, n_l)``."""
        lad = self.ladder
        n = child.shape[0]
        b, n_child = lad.branching[level], self.widths[level + 1]
        W = self.weights[level].reshape(lad.num_regions[level], b * n_child, self.widths[level])
        u = torch.einsum("nrk,rkj->nrj", child.reshape(n, lad.num_regions[level], b * n_child), W)
        if self.biases is not None:
            u = u + self.biases[level]
        return u

    # ------------------------------------------------------------------ forward
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Outputs f_0 ``(N, n_0)`` (differentiable; BN uses the batch's statistics)."""
        self.check_inputs(x)
        h = x.to(self.weights[0].dtype)
        for l in range(self.ladder.depth - 1, -1, -1):
            u = self._pre_activation(l, h)
            h = self.act(l)(u)
            bn = self.bn_params(l)
            if bn is not None:
                shape = h.shape
                h = bn_forward(h.reshape(shape[0], -1), bn[0].reshape(-1), bn[1].reshape(-1), self.bn_eps)[0]
                h = h.reshape(shape)
        return h[:, 0]

    def loss(self, out: torch.Tensor, y: torch.Tensor, kind: str = "squared") -> torch.Tensor:
        """Mean loss: ``"squared"`` 1/2 |f_0 - onehot(y)|^2 (G_omega = I - F_omega) or ``"cross_entropy"``."""
        if kind == "squared":
            return 0.5 * (out - F.one_hot(y.long(), out.shape[-1]).to(out.dtype)).pow(2).sum(-1).mean()
        if kind == "cross_entropy":
            return F.cross_entropy(out, y.long())
        raise ValueError(f"loss: expected one of {LOSSES}, got {kind!r}")

    # ------------------------------------------------------------------ explicit forward + backward
    @torch.no_grad()
    def forward_backward(self, x: torch.Tensor, y: torch.Tensor, loss: str = "squared") -> StudentRecord:
        """Forward and explicit backward pass on one batch, every per-example quantity recorded."""
        self.check_inputs(x)
        if loss not in LOSSES:
            raise ValueError(f"loss: expected one of {LOSSES}, got {loss!r}")
        if y.shape != (x.shape[0],):
            raise ValueError(f"y: expected shape ({x.shape[0]},), got {tuple(y.shape)}")
        if y.numel() and (y.min() < 0 or y.max() >= self.widths[0]):
            raise ValueError(f"y: labels must lie in [0, {self.widths[0]}), got [{y.min().item()}, {y.max().item()}]")
        lad = self.ladder
        d, n = lad.depth, x.shape[0]
        rec = StudentRecord()
        for name in ("u", "f", "fbar", "slope", "deriv", "f_tilde", "sigma", "g_raw", "g_f", "g", "dW", "db",
                     "dc1", "dc0"):
            setattr(rec, name, [None] * (d + 1))
        rec.fbar[d] = x.to(self.weights[0].dtype)
        for l in range(d - 1, -1, -1):
            u = self._pre_activation(l, rec.fbar[l + 1])
            a = self.act(l)
            rec.u[l], rec.slope[l] = u, a.slope(u)
            rec.deriv[l] = rec.slope[l] if a.homogeneous else a.derivative(u)
            rec.f[l] = rec.slope[l] * u
            bn = self.bn_params(l)
            if bn is None:
                rec.fbar[l] = rec.f[l]
            else:
                fb, ft, _, sig = bn_forward(rec.f[l].reshape(n, -1), bn[0].reshape(-1), bn[1].reshape(-1), self.bn_eps)
                rec.fbar[l], rec.f_tilde[l], rec.sigma[l] = fb.reshape(u.shape), ft.reshape(u.shape), sig
        out = rec.fbar[0][:, 0]
        target = F.one_hot(y.long(), out.shape[-1]).to(out.dtype)
        if loss == "squared":
            rec.g_raw[0] = (target - out)[:, None]
            rec.loss = (0.5 * (out - target).pow(2).sum(-1).mean()).item()
        else:
            rec.g_raw[0] = (target - out.softmax(-1))[:, None]
            rec.loss = F.cross_entropy(out, y.long()).item()
        for l in range(d):
            bn = self.bn_params(l)
            if bn is None:
                rec.g_f[l] = rec.g_raw[l]
            else:
                gf, dc1, dc0 = bn_backward(rec.g_raw[l].reshape(n, -1), rec.f_tilde[l].reshape(n, -1), rec.sigma[l],
                                           bn[0].reshape(-1))
                rec.g_f[l] = gf.reshape(rec.g_raw[l].shape)
                rec.dc1[l], rec.dc0[l] = dc1.reshape(bn[0].shape) / n, dc0.reshape(bn[0].shape) / n
            rec.g[l] = rec.deriv[l] * rec.g_f[l]  # g = f' o g_f: the paper's gated gradient (Eq 1)
            # Delta W_ba = E_x[fbar_b g_a] (Eq 2), one matrix per child region b, computed per
            # parent region on its children's stacked outputs (as autograd does: no copies)
            R, b, n_child = lad.num_regions[l], lad.branching[l], self.widths[l + 1]
            child = rec.fbar[l + 1].reshape(n, R, b * n_child)
            rec.dW[l] = (torch.einsum("nrk,nrj->rkj", child, rec.g[l]) / n).reshape(self.weights[l].shape)
            rec.db[l] = rec.g[l].mean(0)
            if l + 1 < d:  # raw gradient at the children's outputs: sum over parents of W g
                W = self.weights[l].reshape(R, b * n_child, self.widths[l])
                rec.g_raw[l + 1] = torch.einsum("nrj,rkj->nrk", rec.g[l], W).reshape(n, R * b, n_child)
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
        return (f"widths={self.widths}, activation={self.activation.name}, top={self.top_activation.name}, "
                f"batch_norm={self.batch_norm}, bias={self.biases is not None}")
