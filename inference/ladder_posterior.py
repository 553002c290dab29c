"""Deprecated since 0.3: the exact posterior of every ladder is :mod:`inference.posterior`.

``ladder_posterior(ladder, x, ...)`` is :func:`inference.posterior.posterior` (same arguments; default
``marginals=False`` as before); ``bayes_optimal_accuracy``, ``posterior_event_draws`` and ``raise_impossible``
are :mod:`inference.posterior`'s, and ``LadderPosterior`` is :class:`inference.posterior.Posterior`.  Every
function here warns a :class:`DeprecationWarning` naming the new one when it is called (the module itself
imports silently); removed in 0.4.
"""

from __future__ import annotations

from teachers._deprecation import deprecated

from . import posterior as _new

__all__ = ["LadderPosterior", "bayes_optimal_accuracy", "ladder_posterior", "posterior_event_draws",
           "raise_impossible"]

#: :class:`inference.posterior.Posterior` (``marginals[l]`` ``(N, R_l, events[l])`` as before).
LadderPosterior = _new.Posterior

ladder_posterior = deprecated(_new.posterior, "inference.ladder_posterior.ladder_posterior",
                              "inference.posterior.posterior(ladder, x, marginals=..., chunk_size=..., device=...)")
bayes_optimal_accuracy = deprecated(_new.bayes_optimal_accuracy, "inference.ladder_posterior.bayes_optimal_accuracy",
                                    "inference.posterior.bayes_optimal_accuracy")
posterior_event_draws = deprecated(_new.posterior_event_draws, "inference.ladder_posterior.posterior_event_draws",
                                   "inference.posterior.posterior_event_draws")
raise_impossible = deprecated(_new.raise_impossible, "inference.ladder_posterior.raise_impossible",
                              "inference.posterior.raise_impossible")
