"""Figures of the summarization ladder (smaso/plots/ladder.py): each figure is produced and written,
bad input is a ValueError naming the argument, and the plotted numbers match independent references
(the conftest's brute-force statistics, counts written with plain Python)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from matplotlib.collections import PathCollection

from inference.posterior import bayes_optimal_accuracy, posterior, posterior_event_draws
from smaso.plots.ladder import (
    event_frequencies,
    plot_bayes_accuracy,
    plot_event_posterior,
    plot_ladder_tables,
    plot_tv_convergence,
)
from teachers import GaussianEmission, Ladder, sample_ladder
from teachers.statistics import compare_statistics, empirical_statistics, exact_statistics


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    from smaso.plots import plt

    plt.close("all")


def _images(fig):
    return [ax.images[0].get_array() for ax in fig.axes if ax.images]


# ---------------------------------------------------------------------- tables
@pytest.mark.parametrize("name", ["td", "bu", "td-uneven"])
def test_ladder_tables_show_p_child_given_parent(name, make_ladder, brute, tmp_path):
    lad = make_ladder(name)
    out = tmp_path / "tables.png"
    fig = plot_ladder_tables(lad, path=out, max_regions=3, title="t")
    assert out.stat().st_size > 5000
    marg, joints = brute.statistics(lad)
    images = iter(_images(fig))
    for l in range(1, lad.depth + 1):
        for c in range(min(3, lad.num_regions[l])):
            j = joints[l][c]
            s = j.sum(-1, keepdims=True)
            ref = np.divide(j, s, out=np.zeros_like(j), where=s > 0)  # rows of impossible parents: 0
            np.testing.assert_allclose(np.asarray(next(images)), ref, atol=1e-12)
            if lad.mode == "topdown":
                np.testing.assert_allclose(ref[marg[l - 1][lad.parent_index(l)[c]] > 0],
                                           lad.tables[l - 1][c].numpy()[marg[l - 1][lad.parent_index(l)[c]] > 0])


def test_ladder_tables_large_events_and_bad_input():
    fig = plot_ladder_tables(Ladder.fully_informative(depth=2, branching=2, leaf_events=2))
    with_images = [ax for ax in fig.axes if ax.images]
    assert len(with_images) == 2 + 4
    # 16 x 4 tables of level 1 are too large to annotate; the 4 x 2 ones of level 2 are annotated
    assert [len(ax.texts) for ax in with_images] == [0, 0, 8, 8, 8, 8]
    with pytest.raises(ValueError, match="ladder"):
        plot_ladder_tables("not a ladder")
    with pytest.raises(ValueError, match="max_regions"):
        plot_ladder_tables(Ladder.random(depth=1), max_regions=0)


# ---------------------------------------------------------------------- TV vs N
def test_tv_convergence_plots_the_measured_distances(make_ladder, brute, tmp_path):
    lad = make_ladder("td")
    sample = sample_ladder(lad, 4000, seed=3)
    exact = exact_statistics(lad)
    ns = [250, 1000, 4000]
    reports = [compare_statistics(exact, empirical_statistics(lad, sample.z[:n])) for n in ns]
    out = tmp_path / "tv.png"
    fig = plot_tv_convergence(list(reversed(reports)), path=out)  # any order: sorted by N
    assert out.stat().st_size > 5000
    marg, joints = brute.statistics(lad)
    z = sample.z.long().numpy()
    off = lad.level_offsets
    ax_m, ax_j = fig.axes
    for l in range(lad.depth + 1):
        tv_m, tv_j = [], []
        for n in ns:
            worst_m = worst_j = 0.0
            for r in range(lad.num_regions[l]):
                counts = Counter(z[:n, off[l] + r].tolist())
                freq = np.array([counts[k] / n for k in range(lad.events[l])])
                worst_m = max(worst_m, 0.5 * np.abs(freq - marg[l][r]).sum())
                if l >= 1:
                    parent = z[:n, off[l - 1] + r // lad.branching[l - 1]]
                    pairs = Counter(zip(parent.tolist(), z[:n, off[l] + r].tolist(), strict=True))
                    fj = np.array([[pairs[(a, b)] / n for b in range(lad.events[l])]
                                   for a in range(lad.events[l - 1])])
                    worst_j = max(worst_j, 0.5 * np.abs(fj - joints[l][r]).sum())
            tv_m.append(worst_m)
            tv_j.append(worst_j)
        line = next(ln for ln in ax_m.lines if ln.get_label() == f"level {l}: measured")
        np.testing.assert_allclose(line.get_xdata(), ns)
        np.testing.assert_allclose(line.get_ydata(), tv_m, atol=1e-12)
        if l >= 1:
            line = next(ln for ln in ax_j.lines if ln.get_label() == f"level {l}: measured")
            np.testing.assert_allclose(line.get_ydata(), tv_j, atol=1e-12)
    # one bound curve per distinct number of cells, equal to Bretagnolle-Huber-Carol's
    bounds = [ln for ln in ax_j.lines if ln.get_label().startswith("bound")]
    cells = {lad.events[l - 1] * lad.events[l] for l in range(1, lad.depth + 1)}
    assert len(bounds) == len(cells)
    for ln in bounds:
        assert any(np.allclose(ln.get_ydata(), np.sqrt((k * np.log(2) + np.log(1e6)) / (2 * np.array(ns))))
                   for k in cells)


def test_tv_convergence_bad_input():
    lad = Ladder.random(depth=1, branching=2, events=2)
    exact = exact_statistics(lad)
    rep = compare_statistics(exact, empirical_statistics(lad, sample_ladder(lad, 100, seed=0).z))
    for bad in ([rep], rep, [rep, {"x": 1}], [rep, rep]):
        with pytest.raises(ValueError, match="reports"):
            plot_tv_convergence(bad)


# ---------------------------------------------------------------------- Bayes accuracy
def test_bayes_accuracy_plot(tmp_path):
    base = Ladder.random(depth=2, branching=2, events=3, concentration=0.5, seed=2)
    sigmas = [0.2, 1.0]
    rows = []
    for s in sigmas:
        lad = base.with_emission(GaussianEmission.around_one_hot(4, 3, s))
        data = sample_ladder(lad, 300, seed=1)
        rows.append(bayes_optimal_accuracy(lad, data.inputs(dtype=torch.float64), data.y))
    out = tmp_path / "bayes.png"
    fig = plot_bayes_accuracy(sigmas, {"a": rows}, path=out, chance=1 / 3, title="t")
    assert out.stat().st_size > 5000
    ax = fig.axes[0]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [r.expected for r in rows])
    markers = next(ln for ln in ax.lines if ln.get_label() == "a: fraction correct")
    np.testing.assert_allclose(markers.get_ydata(), [r.empirical for r in rows])
    plot_bayes_accuracy([0.0, 1.0], {"a": rows}, xscale="linear")
    with pytest.raises(ValueError, match="sigmas"):
        plot_bayes_accuracy([0.0, 1.0], {"a": rows})  # zero on a log axis
    with pytest.raises(ValueError, match="sigmas"):
        plot_bayes_accuracy([-1.0, 1.0], {"a": rows}, xscale="linear")
    with pytest.raises(ValueError, match="curves"):
        plot_bayes_accuracy(sigmas, {"a": rows[:1]})
    with pytest.raises(ValueError, match="curves"):
        plot_bayes_accuracy(sigmas, {})
    with pytest.raises(ValueError, match="xscale"):
        plot_bayes_accuracy(sigmas, {"a": rows}, xscale="symlog")


# ---------------------------------------------------------------------- posterior draws
def test_event_posterior_bars_are_the_draw_frequencies(tmp_path):
    lad = Ladder.random(depth=2, branching=2, events=[3, 3, 2], concentration=0.7, seed=13,
                        emission="gaussian", sigma=0.6)
    x = sample_ladder(lad, 2, seed=0).inputs(dtype=torch.float64)
    idata = posterior_event_draws(lad, x, num_draws=300, seed=4)
    post = posterior(lad, x, marginals=True)
    out = tmp_path / "draws.png"
    fig = plot_event_posterior(idata, post.marginals, path=out, example=1, title="t")
    assert out.stat().st_size > 5000
    z = idata.posterior["z"].values[:, :, 1].reshape(-1, lad.total_regions)
    events = [lad.events[l] for l in range(lad.depth + 1) for _ in range(lad.num_regions[l])]
    ref = [np.array([Counter(z[:, r].tolist())[k] / len(z) for k in range(m)]) for r, m in enumerate(events)]
    for a, b in zip(event_frequencies(z, events), ref, strict=True):
        np.testing.assert_allclose(a, b)
    heights = np.concatenate([[p.get_height() for p in ax.patches] for ax in fig.axes if ax.patches])
    np.testing.assert_allclose(heights, np.concatenate(ref))
    # the exact marginals are drawn as the markers
    offsets = np.concatenate([c.get_offsets()[:, 1] for ax in fig.axes for c in ax.collections
                              if isinstance(c, PathCollection)])
    np.testing.assert_allclose(offsets, np.concatenate([m[1].numpy().ravel() for m in post.marginals]))


def test_event_posterior_bad_input():
    lad = Ladder.random(depth=1, branching=2, events=3, seed=1, emission="gaussian", sigma=0.5)
    x = sample_ladder(lad, 1, seed=0).inputs(dtype=torch.float64)
    idata = posterior_event_draws(lad, x, num_draws=10, seed=0)
    marg = posterior(lad, x, marginals=True).marginals
    plot_event_posterior(idata, [m[0] for m in marg])  # (R_l, m_l) per level works too
    with pytest.raises(ValueError, match="idata"):
        plot_event_posterior(object(), marg)
    with pytest.raises(ValueError, match="marginals"):
        plot_event_posterior(idata, marg[:1])
    with pytest.raises(ValueError, match="marginals"):
        plot_event_posterior(idata, [])
    with pytest.raises(ValueError, match="example"):
        plot_event_posterior(idata, marg, example=1)
    with pytest.raises(ValueError, match="idata"):
        plot_event_posterior(idata, [marg[0], marg[1][:, :, :1]])  # events beyond the marginals' range
