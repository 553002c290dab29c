"""SMASO: the Gaussian mixtures behind a max-affine spline layer (Eq 3, the per-unit mixture; Eq 10, the factorial
mixture), as Pyro generative models, under their smaso names.

The models live in :mod:`inference.mixture`, which documents them (below smaso, so that :mod:`inference` runs
inference in them without importing smaso: ``tests/test_layering.py``); this module re-exports the same objects.
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
