"""Inference routines: exact posteriors of the ladder teacher (sum-product on the region tree)."""

from .ladder_posterior import LadderPosterior, bayes_optimal_accuracy, ladder_posterior

__all__ = ["LadderPosterior", "bayes_optimal_accuracy", "ladder_posterior"]
