"""``assert_same_history``: two comparison histories (``ComparisonResult.history``) equal up to float64 round-off.

The population's members are measured in one batched pass (:mod:`smaso.student.member_statistics`): the same sums
added in another order, so every number agrees with the one-by-one run's to round-off, not bit for bit.
"""

from __future__ import annotations

import math
from typing import Any

#: Absolute tolerance, relative to max(1, |value|): the histories' numbers are errors and ratios of order 1
#: (a number at round-off, such as a local error of 1e-16, agrees to within it too).
TOL = 1e-12


def _walk(a: Any, b: Any, path: tuple, out: list) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), path
        for k in a:
            _walk(a[k], b[k], (*path, k), out)
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), path
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            _walk(u, v, (*path, i), out)
    elif isinstance(a, float) and isinstance(b, float):
        if not (math.isnan(a) and math.isnan(b)) and not abs(a - b) <= TOL * max(1.0, abs(b)):
            out.append((path, a, b))
    else:
        assert type(a) is type(b) and a == b, (path, a, b)


def assert_same_history(got: list[dict], want: list[dict]) -> bool:
    """Assert the two histories have the same rows, keys, strings and integers, and floats within :data:`TOL`
    (NaN where the other is NaN); returns True."""
    bad: list = []
    _walk(got, want, (), bad)
    assert not bad, f"{len(bad)} numbers differ, e.g. {bad[:3]}"
    return True
