"""Hypothesis profiles for the two test tiers.

- ``dev`` (loaded by default): the README's test command, the default tier.  Property tests whose full run
  is long ask for :func:`examples` and get a twentieth of it (at least 25 examples).
- ``ci`` (hypothesis's own: derandomized, no deadline, no example database): the slow tier,
  ``python3 -m pytest -q -m "slow or hypothesis" --hypothesis-profile=ci``, which ``.ci/run`` runs after the
  default tier: every property test again, with its full example count.

``dev`` has no deadline (a 2-core machine under load makes per-example deadlines flaky); under ``CI`` it is
derandomized too, like ``ci``, so a CI run of either tier draws the same examples every time.
"""

from __future__ import annotations

import os

from hypothesis import settings

CI, DEV = "ci", "dev"
settings.register_profile(DEV, parent=settings.get_profile(CI if os.environ.get("CI") else "default"),
                          deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", DEV))

#: The default tier runs a long property test at ``1 / DEV_SHARE`` of its examples, and at least ``DEV_MINIMUM``.
DEV_SHARE, DEV_MINIMUM = 20, 25


def examples(full: int) -> int:
    """``max_examples`` for a long property test: ``full`` under the ``ci`` profile (the slow tier), else
    ``full // 20`` (at least 25, at most ``full``).  Read at import, after ``--hypothesis-profile`` is applied."""
    if settings.get_current_profile_name() == CI:
        return full
    return min(full, max(DEV_MINIMUM, full // DEV_SHARE))
