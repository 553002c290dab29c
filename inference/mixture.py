"""SMASO: the Gaussian mixtures behind a max-affine spline layer, as Pyro generative models
(``docs/theory.md`` §3.3 and §3.7, seed ``003``, "From Hard to Soft", state both models and the conversions):
the models that :mod:`inference.vq` and :mod:`inference.factorial` run inference in.

A layer is a MASO with slopes ``A`` ``(K, R, D)`` and offsets ``B`` ``(K, R)``.  :func:`unit_mixture_model`
is the per-unit mixture (Eq 3): each unit is its *own* model of x (an observed ``x`` ``(N, D)`` is shown to
every unit, a sampled one is ``(N, K, D)``), and with ``pi = pi_from_offsets(A, B, sigma)`` its MAP is the MASO
argmax (hard VQ).  :func:`factorial_mixture_model` is the factorial mixture (Eq 10), in a ``"plate"`` layout
(fast for sampling, ``Predictive`` and SVI) and a ``"sequential"`` one that ``TraceEnum_ELBO`` and
``infer_discrete`` can enumerate (R^K configurations).  :func:`pi_from_offsets` and :func:`offsets_from_pi`
convert between offsets and priors.  The posteriors are written in the layer's region scores
``s = <A, x> + B`` (:func:`region_scores`, Eq 1's argument) and give unit outputs ``z = sum_r t s``
(:func:`vq_outputs`); :func:`orthogonality_defect` measures how far a layer is from Eq 11, under which the
factorial mixture's joint MAP is the per-unit one.

``sigma`` is a positive scalar, or a ``(K,)`` tensor (one noise level per unit) for the per-unit
mixture and the conversions; the factorial mixture has one noise for the whole layer.

These pieces sit in :mod:`inference`, below :mod:`smaso`, so that inference never imports smaso
(``tests/test_layering.py``); :mod:`smaso.splines.mixture`, :mod:`smaso.splines.maso` and
:mod:`smaso.splines.orthogonality` re-export them under their former names.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyro
import pyro.distributions as dist
import torch
from pyro.ops.indexing import Vindex
from torch import nn

__all__ = [
    "OrthogonalityDefect",
    "check_finite",
    "check_maso",
    "check_pi",
    "check_sigma",
    "check_unit_beta",
    "check_x",
    "factorial_mixture_model",
    "log_pi_from_offsets",
    "offsets_from_pi",
    "orthogonality_defect",
    "pi_from_offsets",
    "region_scores",
    "unit_mixture_model",
    "vq_outputs",
]

_LAYOUTS = ("plate", "sequential")


# ---------------------------------------------------------------------- validation
def check_maso(A: torch.Tensor, B: torch.Tensor | None = None) -> None:
    """Raise ``ValueError`` unless ``A`` is a ``(K, R, D)`` floating tensor and ``B`` (if given) ``(K, R)``."""
    if not isinstance(A, torch.Tensor):
        raise ValueError(f"A: expected a torch.Tensor of slopes (K, R, D), got {type(A).__name__}")
    if A.dim() != 3 or min(A.shape) < 1:
        raise ValueError(f"A: expected slopes of shape (K, R, D) with K, R, D >= 1, got {tuple(A.shape)}")
    if not A.is_floating_point():
        raise ValueError(f"A: expected a floating dtype, got {A.dtype}")
    if B is not None:
        if not isinstance(B, torch.Tensor):
            raise ValueError(f"B: expected a torch.Tensor of offsets (K, R), got {type(B).__name__}")
        if tuple(B.shape) != tuple(A.shape[:2]):
            raise ValueError(f"B: expected offsets of shape (K, R) = {tuple(A.shape[:2])} to match A "
                             f"{tuple(A.shape)}, got {tuple(B.shape)}")
        if not B.is_floating_point():
            raise ValueError(f"B: expected a floating dtype, got {B.dtype}")


def check_sigma(sigma: float | torch.Tensor, num_units: int | None = None, *, scalar_only: bool = False,
                device: torch.device | str | None = None) -> torch.Tensor:
    """``sigma`` as a tensor: a positive finite scalar, or (unless ``scalar_only``) ``(K,)`` positive values.

    :param device: where a number is made a tensor (a tensor ``sigma`` stays where it is).
    :returns: a 0-d tensor, or ``(K,)``.
    """
    if isinstance(sigma, bool):
        raise ValueError(f"sigma: expected a positive number, got {sigma!r}")
    s = sigma if isinstance(sigma, torch.Tensor) else torch.as_tensor(sigma, dtype=torch.float64, device=device)
    if s.dim() > (0 if scalar_only else 1):
        what = "a positive scalar" if scalar_only else "a positive scalar or a (K,) tensor"
        raise ValueError(f"sigma: expected {what}, got shape {tuple(s.shape)}")
    if s.dim() == 1 and num_units is not None and s.shape[0] != num_units:
        raise ValueError(f"sigma: expected a scalar or shape ({num_units},) (one per unit), got {tuple(s.shape)}")
    if not bool(torch.isfinite(s).all()) or not bool((s > 0).all()):
        raise ValueError(f"sigma: the noise standard deviation must be positive and finite, got {s.tolist()}")
    return s


def check_pi(pi: torch.Tensor, A: torch.Tensor, atol: float = 1e-5) -> None:
    """Raise ``ValueError`` unless ``pi`` is ``(K, R)`` like ``A``'s first two dims with rows on the simplex."""
    if not isinstance(pi, torch.Tensor):
        raise ValueError(f"pi: expected a torch.Tensor of region priors (K, R), got {type(pi).__name__}")
    if tuple(pi.shape) != tuple(A.shape[:2]):
        raise ValueError(f"pi: expected shape (K, R) = {tuple(A.shape[:2])} to match A {tuple(A.shape)}, "
                         f"got {tuple(pi.shape)}")
    if not bool(torch.isfinite(pi).all()) or bool((pi < 0).any()):
        raise ValueError("pi: region priors must be finite and non-negative")
    dev = (pi.sum(-1) - 1).abs().max().item()
    if dev > atol:
        raise ValueError(f"pi: every row must sum to 1 (largest deviation {dev:.3g})")


def check_x(x: torch.Tensor, A: torch.Tensor, name: str = "x", *, finite: bool = False) -> None:
    """Raise ``ValueError`` unless ``x`` is ``(N, D)`` with A's D (and, with ``finite``, it and A finite).

    ``finite`` (a device sync) is for the inference routines, where a NaN score would pick region 0 silently.
    """
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor (N, D), got {type(x).__name__}")
    if x.dim() != 2 or x.shape[1] != A.shape[2]:
        raise ValueError(f"{name}: expected shape (N, D) with D = {A.shape[2]} (A is {tuple(A.shape)}), "
                         f"got {tuple(x.shape)}")
    if finite:
        check_finite(x, name)
        check_finite(A, "A")


def check_finite(t: torch.Tensor | None, name: str) -> None:
    """Raise ``ValueError`` naming the first non-finite entry of a floating tensor ``t`` (None passes)."""
    if t is not None and t.is_floating_point() and not bool(torch.isfinite(t).all()):
        bad = (~torch.isfinite(t)).nonzero()[0].tolist()
        raise ValueError(f"{name}: expected finite values, got {t[tuple(bad)].item()} at index {bad}")


def _per_unit(sigma: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """sigma ``()`` or ``(K,)`` as ``(K, 1)`` / ``()`` broadcastable against ``(K, R)``."""
    sigma = sigma.to(dtype=like.dtype, device=like.device)
    return sigma[:, None] if sigma.dim() == 1 else sigma


def check_unit_beta(beta: float | torch.Tensor, num_units: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``beta`` as a floating tensor of shape ``()`` (one for the layer) or ``(K,)`` (one per unit), in [0, 1].

    :raises ValueError: another shape, a bool, NaN or a value outside [0, 1].
    """
    if isinstance(beta, bool):
        raise ValueError(f"beta: expected a number in [0, 1], got {beta!r}")
    b = beta if isinstance(beta, torch.Tensor) else torch.as_tensor(beta, dtype=dtype)
    if b.dim() > 1 or (b.dim() == 1 and b.shape[0] != num_units):
        raise ValueError(f"beta: expected a number or a ({num_units},) tensor (one per unit), got shape "
                         f"{tuple(b.shape)}")
    if not b.is_floating_point():
        b = b.to(dtype)
    if bool(torch.isnan(b).any()) or bool((b < 0).any()) or bool((b > 1).any()):
        raise ValueError(f"beta: must lie in [0, 1] (0: uniform, 1/2: soft VQ, 1: hard VQ), got {b.tolist()}")
    return b


# ---------------------------------------------------------------------- scores and outputs (Eq 1, 2, 6, 9)
def region_scores(A: torch.Tensor, B: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The score of every region, ``s[n, k, r] = <A[k, r, :], x[n]> + B[k, r]`` ``(N, K, R)`` (Eq 1's argument).

    :param A: slopes ``(K, R, D)``.  :param B: offsets ``(K, R)``.  :param x: inputs ``(N, D)`` (cast to A's dtype).
    """
    check_maso(A, B)
    check_x(x, A)
    K, R, D = A.shape
    return (x.to(A.dtype) @ A.reshape(K * R, D).T).reshape(-1, K, R) + B


def vq_outputs(t: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Unit outputs ``z[n, k] = sum_r t[n, k, r] s[n, k, r]`` ``(N, K)`` for region weights ``t`` (Eq 2, 6, 9).

    Regions with ``t = 0`` contribute 0 even where their score is infinite.
    """
    if t.shape != scores.shape:
        raise ValueError(f"t: expected region weights of the scores' shape {tuple(scores.shape)}, "
                         f"got {tuple(t.shape)}")
    return torch.where(t == 0, torch.zeros((), dtype=scores.dtype, device=scores.device), t * scores).sum(-1)


# ---------------------------------------------------------------------- Eq 11
def _pieces(A: torch.Tensor | nn.Module) -> torch.Tensor:
    """Slopes as ``(K, R, D)`` from a MASO, a ``(K, R, D)`` tensor or a ``(K, D)`` weight (R = 1)."""
    if not isinstance(A, torch.Tensor) and isinstance(getattr(A, "A", None), torch.Tensor):
        A = A.A  # a MASO (smaso.splines.maso.MASO) by its slopes: this package does not import the one above it
    if not isinstance(A, torch.Tensor) or not A.is_floating_point():
        raise TypeError(f"A: expected a MASO or a floating-point tensor, got {type(A).__name__}")
    if A.dim() == 2:
        return A[:, None, :]
    if A.dim() != 3:
        raise ValueError(f"A: expected slopes (K, R, D) or a weight (K, D), got shape {tuple(A.shape)}")
    return A


def _cross_gram(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gram matrix of all pieces ``(K*R, K*R)`` and the mask of pairs from different units."""
    K, R, D = A.shape
    flat = A.reshape(K * R, D)
    gram = flat @ flat.T
    unit = torch.arange(K, device=A.device).repeat_interleave(R)
    return gram, unit[:, None] != unit[None, :]


@dataclass(frozen=True)
class OrthogonalityDefect:
    """Distance of a MASO layer from Eq 11.

    :ivar penalty: sum_{k != k'} sum_{r,r'} <A[k,r], A[k',r']>^2 (lambda = 1).
    :ivar relative: penalty / sum_{k != k'} sum_{r,r'} |A[k,r]|^2 |A[k',r']|^2, in [0, 1] (0 iff Eq 11).
    :ivar max_abs_cosine: max |cos(A[k,r], A[k',r'])| over k != k' (zero pieces count as orthogonal).
    """

    penalty: float
    relative: float
    max_abs_cosine: float

    @property
    def orthogonal(self) -> bool:
        """Eq 11 up to rounding (max |cosine| below 1e-6)."""
        return self.max_abs_cosine < 1e-6


def orthogonality_defect(A: torch.Tensor | nn.Module) -> OrthogonalityDefect:
    """:class:`OrthogonalityDefect` of a MASO, slopes ``(K, R, D)`` or a weight ``(K, D)`` (no gradient)."""
    with torch.no_grad():
        A = _pieces(A)
        gram, cross = _cross_gram(A)
        sq = torch.diagonal(gram)
        penalty = (gram.pow(2) * cross).sum()
        scale = (torch.outer(sq, sq) * cross).sum()
        norms = sq.clamp(min=0).sqrt()
        nonzero = norms > 0
        safe = torch.where(nonzero, norms, torch.ones_like(norms))
        cos = (gram / torch.outer(safe, safe)) * (cross & nonzero[:, None] & nonzero[None, :])
        relative = float(penalty / scale) if float(scale) > 0 else 0.0
        return OrthogonalityDefect(float(penalty), relative, float(cos.abs().max()) if cos.numel() else 0.0)


# ---------------------------------------------------------------------- conversions
def pi_from_offsets(A: torch.Tensor, B: torch.Tensor, sigma: float | torch.Tensor = 1.0) -> torch.Tensor:
    """Region priors of the SMASO whose MAP is the MASO (A, B): ``softmax((B + 1/2 ||A||^2) / sigma^2)``.

    ``A`` ``(K, R, D)``, ``B`` ``(K, R)``, ``sigma`` a positive scalar or ``(K,)``; returns ``pi`` ``(K, R)``.
    """
    check_maso(A, B)
    s2 = _per_unit(check_sigma(sigma, A.shape[0], device=A.device), A) ** 2
    return torch.softmax((B + 0.5 * A.pow(2).sum(-1)) / s2, dim=-1)


def offsets_from_pi(A: torch.Tensor, pi: torch.Tensor, sigma: float | torch.Tensor = 1.0) -> torch.Tensor:
    """Offsets of the MASO that is the MAP of the SMASO (A, pi, sigma): ``sigma^2 log pi - 1/2 ||A||^2``.

    Defined up to a per-unit constant (adding c_k to row k of B changes neither the argmax nor
    :func:`pi_from_offsets`); this is the representative with that constant 0.  ``pi = 0`` gives
    ``-inf`` (a region that is never chosen).

    ``A`` ``(K, R, D)``, ``pi`` ``(K, R)``, ``sigma`` a positive scalar or ``(K,)``; returns ``B`` ``(K, R)``.
    """
    check_maso(A)
    check_pi(pi, A)
    s2 = _per_unit(check_sigma(sigma, A.shape[0], device=A.device), A) ** 2
    return s2 * pi.to(A.dtype).log() - 0.5 * A.pow(2).sum(-1)


def log_pi_from_offsets(A: torch.Tensor, B: torch.Tensor, sigma: float | torch.Tensor = 1.0) -> torch.Tensor:
    """``log pi_from_offsets(A, B, sigma)`` computed as a log-softmax: finite where pi underflows to 0."""
    check_maso(A, B)
    s2 = _per_unit(check_sigma(sigma, A.shape[0], device=A.device), A) ** 2
    return torch.log_softmax((B + 0.5 * A.pow(2).sum(-1)) / s2, dim=-1)


# ---------------------------------------------------------------------- models
def _check_prior(pi: torch.Tensor | None, log_pi: torch.Tensor | None,
                 A: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Exactly one of pi / log_pi, validated, in A's dtype."""
    if (pi is None) == (log_pi is None):
        raise ValueError("pi: give exactly one of pi (region priors) and log_pi (their logarithms)")
    if pi is not None:
        check_pi(pi, A)
        return pi.to(A.dtype), None
    if not isinstance(log_pi, torch.Tensor) or tuple(log_pi.shape) != tuple(A.shape[:2]):
        shape = tuple(log_pi.shape) if isinstance(log_pi, torch.Tensor) else type(log_pi).__name__
        raise ValueError(f"log_pi: expected shape (K, R) = {tuple(A.shape[:2])} to match A, got {shape}")
    if bool(torch.isnan(log_pi).any()) or bool((log_pi > 1e-6).any()):
        raise ValueError("log_pi: log region priors must be <= 0 and not NaN")
    dev = (torch.logsumexp(log_pi.to(A.dtype), -1)).abs().max().item()
    if dev > 1e-5:
        raise ValueError(f"log_pi: every row must be normalized (largest |logsumexp| {dev:.3g})")
    return None, log_pi.to(A.dtype)


def _categorical(pi: torch.Tensor | None, log_pi: torch.Tensor | None) -> dist.Categorical:
    return dist.Categorical(probs=pi) if log_pi is None else dist.Categorical(logits=log_pi)


def _num_examples(num_examples: int | None, x: torch.Tensor | None, A: torch.Tensor) -> int:
    if x is not None:
        check_x(x, A)
        if num_examples is not None and num_examples != x.shape[0]:
            raise ValueError(f"num_examples: {num_examples} disagrees with x, which has {x.shape[0]} rows")
        return x.shape[0]
    if isinstance(num_examples, bool) or not isinstance(num_examples, int) or num_examples < 1:
        raise ValueError(f"num_examples: expected a positive integer when x is not given, got {num_examples!r}")
    return num_examples


def unit_mixture_model(A: torch.Tensor, pi: torch.Tensor | None, sigma: float | torch.Tensor = 1.0,
                       x: torch.Tensor | None = None,
                       num_examples: int | None = None, *,
                       log_pi: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The per-unit SMASO (Eq 3): one Gaussian mixture of x per unit, as a Pyro model.

    Plates ``"data"`` (N, dim -2) and ``"units"`` (K, dim -1); sites ``"t"`` (``Categorical(pi[k])``, batch
    ``(N, K)``) and ``"x"`` (``Normal(A[k, t_k], sigma^2 I)``, batch ``(N, K)``, event ``(D,)``).  Enumerable
    (``TraceEnum_ELBO(max_plate_nesting=2)``, ``infer_discrete(first_available_dim=-3)``); outer plates broadcast.

    :param A: slopes ``(K, R, D)`` (the means of the components).
    :param pi: region priors ``(K, R)`` (e.g. :func:`pi_from_offsets`), or None with ``log_pi``.
    :param sigma: noise standard deviation, positive scalar or ``(K,)``.
    :param x: optional observed inputs: ``(N, D)``, shown to every unit, or ``(N, K, D)`` (a sampled ``x``).
    :param num_examples: N when x is not given.
    :param log_pi: log region priors ``(K, R)`` instead of ``pi`` (:func:`log_pi_from_offsets`: finite where
        ``pi`` underflows at small sigma).
    :returns: ``{"t": ..., "x": ...}``.
    """
    check_maso(A)
    pi, log_pi = _check_prior(pi, log_pi, A)
    K = A.shape[0]
    sig = _per_unit(check_sigma(sigma, K, device=A.device), A)  # (K, 1) against the (K, D) means
    per_unit = isinstance(x, torch.Tensor) and x.dim() == 3
    if per_unit:  # one dataset per unit, the shape the model samples
        assert isinstance(x, torch.Tensor)  # per_unit says so; mypy cannot see it through the flag
        if tuple(x.shape[1:]) != (K, A.shape[2]):
            raise ValueError(f"x: expected shape (N, D) or (N, K, D) with K, D = {K}, {A.shape[2]} (A is "
                             f"{tuple(A.shape)}), got {tuple(x.shape)}")
        n = _num_examples(num_examples, x[:, 0], A)
    else:
        n = _num_examples(num_examples, x, A)
    units = torch.arange(K, device=A.device)
    obs = None if x is None else (x if per_unit else x[:, None, :])
    with pyro.plate("data", n, dim=-2), pyro.plate("units", K, dim=-1):
        t = pyro.sample("t", _categorical(pi, log_pi))
        mean = Vindex(A)[units, t, :]  # (..., N, K, D)
        xs = pyro.sample("x", dist.Normal(mean, sig).to_event(1), obs=obs)
    return {"t": t, "x": xs}


def factorial_mixture_model(A: torch.Tensor, pi: torch.Tensor | None, sigma: float | torch.Tensor = 1.0,
                            x: torch.Tensor | None = None,
                            num_examples: int | None = None, *, layout: str = "plate",
                            log_pi: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The factorial SMASO of a whole layer (Eq 10) as a Pyro model.

    ``layout="plate"``: plates ``"data"`` (N, dim -2) and ``"units"`` (K, dim -1) around site ``"t"`` (batch
    ``(N, K)``); ``"x"`` ~ ``Normal(sum_k A[k, t_k], sigma^2 I)`` under the data plate only (value ``(N, 1, D)``).
    Not enumerable (x depends on every unit of the plate).

    ``layout="sequential"``: plate ``"data"`` (N, dim -1), sites ``"t_0"``, ..., ``"t_<K-1>"`` (batch ``(N,)``)
    then ``"x"``; enumerable (``TraceEnum_ELBO(max_plate_nesting=1)``, ``infer_discrete(first_available_dim=-2)``)
    at a cost of R^K joint configurations.

    :param A: slopes ``(K, R, D)``.
    :param pi: region priors ``(K, R)``, or None with ``log_pi``.
    :param sigma: the layer's noise standard deviation, a positive scalar.
    :param x: optional observed inputs ``(N, D)``.
    :param num_examples: N when x is not given.
    :param layout: ``"plate"`` or ``"sequential"``.
    :param log_pi: log region priors ``(K, R)`` instead of ``pi``.
    :returns: ``{"t": (N, K) regions, "x": (N, D)}`` (sequential: ``"t"`` stacks the ``"t_<k>"`` values
        on the last dim).
    """
    if layout not in _LAYOUTS:
        raise ValueError(f"layout: expected one of {_LAYOUTS}, got {layout!r}")
    check_maso(A)
    pi, log_pi = _check_prior(pi, log_pi, A)
    K = A.shape[0]
    sig = check_sigma(sigma, scalar_only=True, device=A.device).to(dtype=A.dtype, device=A.device)
    n = _num_examples(num_examples, x, A)
    if layout == "plate":
        units = torch.arange(K, device=A.device)
        with pyro.plate("data", n, dim=-2):
            with pyro.plate("units", K, dim=-1):
                t = pyro.sample("t", _categorical(pi, log_pi))
            if t.shape[-1] != K:  # enumerated: one value for the whole plate, so the sum below would be wrong
                raise ValueError("layout: the 'plate' layout of the factorial mixture cannot be enumerated (x depends "
                                 "on every unit of the plate); use layout='sequential' (R^K configurations)")
            mean = Vindex(A)[units, t, :].sum(-2, keepdim=True)  # (..., N, 1, D)
            xs = pyro.sample("x", dist.Normal(mean, sig).to_event(1), obs=None if x is None else x[:, None, :])
        return {"t": t, "x": xs.squeeze(-2)}
    ts = []
    with pyro.plate("data", n, dim=-1):
        mean = 0.0
        for k in range(K):
            tk = pyro.sample(f"t_{k}", _categorical(None if pi is None else pi[k],
                                                    None if log_pi is None else log_pi[k]))
            ts.append(tk)
            mean = mean + A[k][tk]  # (..., N, D); enumerated values broadcast on the left
        xs = pyro.sample("x", dist.Normal(mean, sig).to_event(1), obs=x)
    shape = torch.broadcast_shapes(*[tk.shape for tk in ts])
    return {"t": torch.stack([tk.expand(shape) for tk in ts], dim=-1), "x": xs}

