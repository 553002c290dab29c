"""Per-event sums through Batch Norm's affine maps of one batch, instead of summing BN's outputs per example.

Within a batch, BN (after the gate, framework paper Eq 10) maps each node's input affinely: fbar = c1 (f - mu) / sigma
+ c0, with the batch's mean mu and standard deviation sigma; and its backward (Thm 5) maps the raw gradient
affinely too: g_f = (c1 / sigma) (g_raw - E_B[g_raw] - f~ E_B[f~ g_raw]), f~ = (f - mu) / sigma, where E_B[g_raw]
and E_B[f~ g_raw] are the batch's ``dc0`` and ``dc1`` (:class:`~smaso.student.network.StudentRecord`).  Summed over
the rows of one event a (count c_a):

- sum_a fbar = (c1 / sigma) (sum_a f - c_a mu) + c_a c0,
- sum_a g_f = (c1 / sigma) (sum_a g_raw - c_a dc0 - dc1 (sum_a f - c_a mu) / sigma),

so :class:`~smaso.student.frequency.FrequencyAccumulator` sums f per example (F) and g_raw by the edge weights (Eq 1)
and maps them here: two of a BN level's per-example sums fewer.  The batch constants are those of the whole batch
also for a row group of it (:func:`~smaso.student.mergeable.record_rows` keeps them), as BN normalized every row
with them.
"""

from __future__ import annotations

import torch

__all__ = ["bn_event_sums"]


def bn_event_sums(f_sums: torch.Tensor, graw_sums: torch.Tensor, counts: torch.Tensor, c1: torch.Tensor,
                  c0: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor, dc1: torch.Tensor, dc0: torch.Tensor,
                  dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch's per-event sums of BN's output fbar and of the gradient at its input g_f (module docstring).

    :param f_sums: ``(R, M, n)`` sums of BN's input f over each event's rows; ``graw_sums``: ``(R, M, n)`` those of
        the raw gradient at BN's output; ``counts``: ``(R, M)`` the events' rows.
    :param c1, c0, mu, sigma, dc1, dc0: ``(R, n)``: BN's scale and shift, the batch's mean and standard deviation
        of f, and E_B[f~ g_raw], E_B[g_raw].
    :param dtype: the dtype the maps are applied in (float64: the sums' own rounding, no cancellation of theirs
        against c_a mu added).
    :returns: ``(fbar_sums, gf_sums)``, each ``(R, M, n)`` in ``dtype``.
    """
    c1, c0, mu, sigma, dc1, dc0 = (t.detach().to(dtype)[:, None, :] for t in (c1, c0, mu, sigma, dc1, dc0))
    cnt = counts.to(dtype)[..., None]
    f_hat = f_sums.to(dtype) - cnt * mu  # sum over the event's rows of f - mu
    scale = c1 / sigma
    fbar = scale * f_hat + cnt * c0
    gf = scale * (graw_sums.to(dtype) - cnt * dc0 - dc1 * f_hat / sigma)
    return fbar, gf
