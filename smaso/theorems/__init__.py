"""The framework paper's further results, each measured on the student of :mod:`smaso.student` (or on the teacher).

- :mod:`smaso.theorems.conditions`: Thm 2's focus and broadness of knowledge on the teacher (§3.2).
- :mod:`smaso.theorems.marginalized`: marginalized gradients and their recursion (§2.3, Eq 3, Thm 1).
- :mod:`smaso.theorems.relu_vs_linear`: ReLU versus linear networks, vert(P) (§5.1, Thm 6-7).
- :mod:`smaso.theorems.factors`: factorized binary events and the distances from Defs 3-5 (§5.2).
- :mod:`smaso.theorems.disentangle`: disentangled F and G~, separable updates, the backward (Thm 8-9, Eq 111-115).
- :mod:`smaso.theorems.overfitting`: over-fitting from finite samples (§5.3, Eq 14-17).
- :mod:`smaso.theorems.energy`: the row energy conserved by Batch Norm (§7.5.1, Eq 80-81).

``docs/theory.md`` maps every equation to its function.
"""

from smaso._lazy import lazy_submodules

__all__ = ["conditions", "disentangle", "energy", "factors", "marginalized", "overfitting", "relu_vs_linear"]
__getattr__, __dir__ = lazy_submodules(__name__, __all__, globals())
