"""Deprecation helpers of the student package's shims (the ``graph_*`` modules of smaso 0.2)."""

from __future__ import annotations

import warnings

SINCE = "smaso 0.3"
UNTIL = "0.4"


def warn(old: str, new: str, stacklevel: int = 3) -> None:
    """A DeprecationWarning: ``old`` is deprecated, use ``new`` (one student and one code for every ladder)."""
    warnings.warn(f"{old} is deprecated since {SINCE} and will be removed in {UNTIL}; use {new} (one student and one "
                  "code path for every ladder, trees and region graphs alike)", DeprecationWarning,
                  stacklevel=stacklevel)


class AliasMeta(type):
    """Metaclass of a deprecated alias class: ``isinstance(x, Alias)`` is ``isinstance(x, Alias._target)``."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, cls._target)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, cls._target)
