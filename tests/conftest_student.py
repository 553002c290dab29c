"""Helpers for the student / frequency / reformulation tests (imported explicitly, not a pytest conftest).

The references here share no code with ``smaso``:

- :func:`reference_forward` recomputes the student's forward pass with Python loops over
  regions and children, torch's own pointwise functions (``torch.relu``, ``F.silu``, ...) and
  ``torch.nn.functional.batch_norm`` in training mode, on the student's parameters, so torch
  autograd gives the reference gradients;
- :func:`autograd_reference` turns those into the paper's sign convention
  (g = -N dLoss/du per example, Delta W = -dLoss/dW).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from teachers import Ladder, sample_ladder


def perturb_params(student, seed: int = 3, shift: float = 0.0) -> None:
    """Non-trivial biases and BN parameters (their initial values are 0 / 1 / 0): biases 0.3 N(0, 1),
    BN scales 1 + 0.3 N(0, 1), BN shifts ``shift`` + 0.3 N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        if student.biases is not None:
            for b in student.biases:
                b.copy_(0.3 * torch.randn(b.shape, generator=g, dtype=b.dtype))
        if student.batch_norm:
            for c in student.bn_scale:
                c.copy_(1 + 0.3 * torch.randn(c.shape, generator=g, dtype=c.dtype))
            for c in student.bn_shift:
                c.copy_(shift + 0.3 * torch.randn(c.shape, generator=g, dtype=c.dtype))


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """These tests use tiny tensors: one intra-op thread is ~10x faster than two on a loaded 2-core
    machine (OpenMP workers spin).  Imported by each test module; restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def ref_activation(act, u: torch.Tensor) -> torch.Tensor:
    """f(u) from torch's own functions, read off the activation's name and parameters."""
    if act.name == "relu":
        return torch.relu(u)
    if act.name == "linear":
        return u
    if act.name == "leaky_relu":
        return F.leaky_relu(u, act.nu)
    if act.name == "abs":
        return torch.abs(u)
    assert act.name == "swish"
    if act.beta == 1.0:
        return torch.relu(u)
    if act.beta == 0.5:
        return F.silu(u)
    eta = act.beta / (1.0 - act.beta)
    return u * torch.sigmoid(eta * u)


def torch_bn_eps(eps: float) -> float:
    """torch >= 2.x refuses eps = 0 in training mode; 1e-300 is a positive stand-in that leaves
    var + eps == var bit for bit in float64 (for any var > 1e-284)."""
    return eps if eps > 0 else 1e-300


def reference_forward(student, x: torch.Tensor) -> dict:
    """Loop-based forward pass; ``u``, ``f``, ``fbar`` per level keep their ``.grad`` (retain_grad)."""
    lad = student.ladder
    d, n = lad.depth, x.shape[0]
    h = x.to(student.weights[0].dtype)
    out = {"u": [None] * (d + 1), "f": [None] * (d + 1), "fbar": [None] * (d + 1)}
    for l in range(d - 1, -1, -1):
        b = lad.branching[l]
        cols = []
        for i in range(lad.num_regions[l]):
            u_i = 0
            for c in range(b):
                child = i * b + c
                u_i = u_i + h[:, child, :] @ student.weights[l][child]
            if student.biases is not None:
                u_i = u_i + student.biases[l][i]
            cols.append(u_i)
        u = torch.stack(cols, 1)
        if u.requires_grad:
            u.retain_grad()
        f = ref_activation(student.act(l), u)
        if f is u:
            f = u * 1.0
        if f.requires_grad:
            f.retain_grad()
        fbar = f
        if student.batch_norm and 1 <= l < d:
            c1, c0 = student.bn_scale[l - 1], student.bn_shift[l - 1]
            fbar = F.batch_norm(f.reshape(n, -1), None, None, weight=c1.reshape(-1), bias=c0.reshape(-1),
                                training=True, eps=torch_bn_eps(student.bn_eps)).reshape(f.shape)
            if fbar.requires_grad:
                fbar.retain_grad()
        out["u"][l], out["f"][l], out["fbar"][l] = u, f, fbar
        h = fbar
    out["out"] = h[:, 0]
    return out


def reference_loss(out: torch.Tensor, y: torch.Tensor, loss: str) -> torch.Tensor:
    if loss == "squared":
        target = F.one_hot(y.long(), out.shape[-1]).to(out.dtype)
        return 0.5 * ((out - target) ** 2).sum(-1).mean()
    return F.cross_entropy(out, y.long())


def autograd_reference(student, x: torch.Tensor, y: torch.Tensor, loss: str = "squared") -> dict:
    """Reference per-example gradients (g = -N dL/du, g_f = -N dL/df, g_raw = -N dL/dfbar) and
    parameter updates (dW = -dL/dW, ...) by torch autograd on :func:`reference_forward`."""
    student.zero_grad(set_to_none=True)
    fw = reference_forward(student, x)
    L = reference_loss(fw["out"], y, loss)
    L.backward()
    n = x.shape[0]
    d = student.ladder.depth
    ref = {"loss": L.item(), "out": fw["out"].detach(), "u": [None] * (d + 1), "f": [None] * (d + 1),
           "fbar": [None] * (d + 1), "g": [None] * (d + 1), "g_f": [None] * (d + 1), "g_raw": [None] * (d + 1)}
    for l in range(d):
        ref["u"][l] = fw["u"][l].detach()
        ref["f"][l] = fw["f"][l].detach()
        ref["fbar"][l] = fw["fbar"][l].detach()
        ref["g"][l] = -n * fw["u"][l].grad
        ref["g_f"][l] = -n * fw["f"][l].grad
        ref["g_raw"][l] = -n * fw["fbar"][l].grad
    ref["dW"] = [-w.grad.clone() for w in student.weights]
    ref["db"] = None if student.biases is None else [-b.grad.clone() for b in student.biases]
    if student.batch_norm:
        ref["dc1"] = [-c.grad.clone() for c in student.bn_scale]
        ref["dc0"] = [-c.grad.clone() for c in student.bn_shift]
    student.zero_grad(set_to_none=True)
    return ref


def assert_close(actual: torch.Tensor, expected: torch.Tensor, tol: float = 1e-10, what: str = "") -> None:
    """max |actual - expected| <= tol * max(1, max |expected|) (float64 identities)."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    scale = max(1.0, expected.abs().max().item() if expected.numel() else 0.0)
    err = (actual.double() - expected.double()).abs().max().item() if expected.numel() else 0.0
    assert err <= tol * scale, f"{what}: max abs error {err:.3g} > {tol:g} * {scale:.3g}"


def rel(pred: torch.Tensor, meas: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """||pred - meas||_F / ||meas||_F over the masked rows (written here, independent of compare._rel)."""
    if mask is not None:
        pred, meas = pred[mask], meas[mask]
    den = meas.norm().item()
    num = (pred - meas).norm().item()
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


def fi_sample(depth: int = 2, branching=2, leaf_events: int = 2, n: int = 600, seed: int = 0, **kw):
    """A fully informative ladder and a sample from it."""
    lad = Ladder.fully_informative(depth=depth, branching=branching, leaf_events=leaf_events, **kw)
    return lad, sample_ladder(lad, n, seed=seed)


def index_rows(chunks):
    """A chunked source with the chunk layout of ``chunks`` whose every row's input and label are its row index:
    what the SGD minibatch stream does with rows is then read off the batches."""
    idx = torch.arange(len(chunks))

    class Part:
        def __init__(self, lo: int, hi: int):
            self.lo, self.hi, self.y = lo, hi, idx[lo:hi]

        def __len__(self):
            return self.hi - self.lo

        def inputs(self, i, dtype):
            return self.y[i].to(dtype)[:, None]

    class Rows:
        num_chunks = chunks.num_chunks
        chunk_bounds = staticmethod(chunks.chunk_bounds)

        @staticmethod
        def chunk(c):
            return Part(*chunks.chunk_bounds(c))

    return Rows
