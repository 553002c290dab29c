"""The demo's two uses of scipy.stats, now through scipy.special (issue 39: importing scipy.stats cost about 0.4 s
in each of ``smaso demo``'s processes): the same bits as scipy.stats, and scipy.stats not imported at all."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from scipy import stats

from smaso.student.noise import t_quantile
from teachers.statistics import chisquare_pvalue


@pytest.mark.parametrize("k", [2, 4, 16, 256])
def test_chisquare_pvalue_is_scipy_stats_chisquare_bit_for_bit(k):
    rng = np.random.default_rng(k)
    for _ in range(20):
        expected = rng.dirichlet(np.ones(k)) * 4096.0
        observed = rng.multinomial(4096, expected / expected.sum()).astype(np.float64)
        expected *= observed.sum() / expected.sum()  # (as compare_statistics scales them: equal totals)
        assert chisquare_pvalue(observed, expected) == float(stats.chisquare(observed, expected).pvalue)
    # far in the tail and at a perfect fit, too
    assert chisquare_pvalue(np.array([100.0, 0.0]), np.array([50.0, 50.0])) == stats.chisquare([100.0, 0.0]).pvalue
    assert chisquare_pvalue(np.array([7.0, 9.0]), np.array([7.0, 9.0])) == 1.0


@pytest.mark.parametrize("groups", [2, 3, 5, 10, 11, 40, 1000])
@pytest.mark.parametrize("level", [0.975, 0.5, 0.995])
def test_t_quantile_is_scipy_stats_t_ppf_bit_for_bit(groups, level):
    assert t_quantile(groups, level) == float(stats.t.ppf(level, groups - 1))


class _NoScipyStats:
    """A meta-path finder that refuses to import scipy.stats."""

    def find_spec(self, name, path, target=None):
        if name == "scipy.stats":
            raise ImportError("scipy.stats imported")
        return None


def test_the_ladder_report_and_the_noise_floors_do_not_import_scipy_stats(monkeypatch):
    """The demo's ladder report (the chi-square p-values) and the jackknife's t factor with scipy.stats unloaded and
    its import refused (before: both imported it)."""
    import scipy

    from teachers.ladder import Ladder
    from teachers.sampling import sample_ladder
    from teachers.statistics import compare_statistics, count_events, exact_statistics

    lad = Ladder.default()
    exact, counts = exact_statistics(lad), count_events(sample_ladder(lad, 2000, 0, progress=False)).statistics()
    monkeypatch.delitem(sys.modules, "scipy.stats")
    monkeypatch.delattr(scipy, "stats", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_NoScipyStats(), *sys.meta_path])
    with pytest.raises(ImportError, match=r"scipy\.stats imported"):  # (the refusal works)
        from scipy.stats import t  # noqa: F401
    report = compare_statistics(exact, counts)
    assert 0 < report["min_chi2_pvalue"] <= 1 and t_quantile(10) == pytest.approx(2.2622, abs=1e-4)
