"""From Hard to Soft (Balestriero & Baraniuk): max-affine splines, their vector quantization, and the
Gaussian mixtures whose inference they are.

- :mod:`smaso.splines.maso`: MASO layers (Eq 1) and their hard, soft and beta VQ (Eq 2, 5-9): region
  scores, region probabilities, unit outputs; the layers (ReLU, leaky ReLU, abs, pooling) written
  exactly as MASOs.
- :mod:`smaso.splines.functional`: Table 1 in closed form, per unit type (swish, beta-VQ leaky ReLU and
  abs, softmax pooling, the VQ probabilities), with exact beta = 0 / 1 limits.
- :mod:`smaso.splines.modules`: the same as ``nn.Module`` s with a fixed or learnable beta.
- :mod:`smaso.splines.mixture`: the SMASO Gaussian mixtures (Eq 3 per unit, Eq 10 factorial) as Pyro
  models, and the map (A, B, sigma) <-> pi.
- :mod:`smaso.splines.orthogonality`: orthogonal layers (Eq 11): penalty, defect, Gram-Schmidt.

Inference in these mixtures (MAP, SVI, enumeration, posterior draws) is in the top-level
:mod:`inference` package; ``docs/theory.md`` maps every equation to its function.
"""

from smaso._lazy import lazy_submodules

__all__ = ["functional", "maso", "mixture", "modules", "orthogonality"]
__getattr__, __dir__ = lazy_submodules(__name__, __all__, globals())
