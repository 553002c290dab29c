"""SMASO: the Gaussian mixtures behind a max-affine spline layer, as Pyro generative models
(``docs/theory.md`` §3.3 and §3.7, seed ``003``, "From Hard to Soft", state both models and the conversions).

A layer is a MASO with slopes ``A`` ``(K, R, D)`` and offsets ``B`` ``(K, R)``.  :func:`unit_mixture_model`
is the per-unit mixture (Eq 3): each unit is its *own* model of x (an observed ``x`` ``(N, D)`` is shown to
every unit, a sampled one is ``(N, K, D)``), and with ``pi = pi_from_offsets(A, B, sigma)`` its MAP is the MASO
argmax (hard VQ).  :func:`factorial_mixture_model` is the factorial mixture (Eq 10), in a ``"plate"`` layout
(fast for sampling, ``Predictive`` and SVI) and a ``"sequential"`` one that ``TraceEnum_ELBO`` and
``infer_discrete`` can enumerate (R^K configurations).  :func:`pi_from_offsets` and :func:`offsets_from_pi`
convert between offsets and priors.

``sigma`` is a positive scalar, or a ``(K,)`` tensor (one noise level per unit) for the per-unit
mixture and the conversions; the factorial mixture has one noise for the whole layer.

The models live in :mod:`inference.mixture` (below smaso, so that :mod:`inference` runs inference in them without
importing smaso: ``tests/test_layering.py``); this module is the same objects under their smaso names.
"""

from inference.mixture import (
    check_finite,
    check_maso,
    check_pi,
    check_sigma,
    check_x,
    factorial_mixture_model,
    log_pi_from_offsets,
    offsets_from_pi,
    pi_from_offsets,
    unit_mixture_model,
)

__all__ = [
    "check_finite",
    "check_maso",
    "check_pi",
    "check_sigma",
    "check_x",
    "factorial_mixture_model",
    "log_pi_from_offsets",
    "offsets_from_pi",
    "pi_from_offsets",
    "unit_mixture_model",
]
