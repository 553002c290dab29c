"""Every public figure of smaso.plots fits its canvas: drawn with Agg, each legend and text artist (titles, axis
labels, tick labels, legends, figure texts) lies inside the figure (1-pixel tolerance), and every axes with data
names both its axes (its own label, or the label of the panel that labels its column / row of a shared grid, or
the figure's supxlabel / supylabel).  Exempt from the label check: colorbars, and :func:`plot_arviz`'s axes
(ArviZ's own)."""

from __future__ import annotations

import math

import arviz as az
import numpy as np
import pytest
import torch
from test_plots_comparison import _level_row  # the same synthetic sweep rows

import smaso.plots as plots
from inference.factorial import exact_posterior, factorial_gap, factorial_posterior_draws, mean_field_map
from inference.posterior import bayes_optimal_accuracy, posterior, posterior_event_draws
from smaso.depth.separation import DepthRow, PieceRecord
from smaso.depth.training import make_student
from smaso.plots._base import plt
from smaso.splines.maso import MASO, region_probabilities
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from teachers import GaussianEmission, Ladder, sample_ladder
from teachers.statistics import compare_statistics, empirical_statistics, exact_statistics
from teachers.tent import TentNetwork

F64 = torch.float64
TOL = 1.0  # pixels


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# ---------------------------------------------------------------------- small inputs, one builder per figure
def _alignment():
    def row(level, step):
        base = 0.01 * (1 + level) + 1e-4 * step
        out = {"level": level, **{k: base * (j + 1) for j, k in enumerate(
            ("eta2", "eta2_control", "mi", "mi_control", "spec", "probe"))}}
        out.update(floor_eta2=1e-3, floor_mi=5e-4, floor_spec=0.07, probe_chance=0.25)
        if level == 0:
            out["eta2_control"] = out["mi_control"] = math.nan
        return out

    return plots.plot_alignment([{"step": s, "loss": 1.0, "alignment": [row(l, s) for l in (0, 1, 2)]}
                                 for s in (0, 250, 500)], title="alignment")


def _comparison():
    from smaso.student.compare import compare_student

    lad = Ladder.fully_informative(depth=2, branching=2, leaf_events=2, seed=3)
    r = compare_student(sample_ladder(lad, 300, seed=3), student=StudentConfig(width=3),
                        training=TrainingConfig(steps=4, lr=0.2, batch_size=32, seed=1),
                        evaluation=EvaluationConfig(held_out=False, eval_every=2, eval_examples=200))
    return plots.plot_comparison(r, title="comparison")


def _sweep_rows(scale=1.0):
    return [{"sigma": s, "levels": [_level_row(l, 1e-14 if s == 0 else scale * s * (l + 1)) for l in (0, 1)],
             "leaves": {"level": 2}, "max_error": 0.0} for s in (0.0, 0.1, 0.4)]


def _noise_sweep():
    return plots.plot_noise_sweep({"no BN": _sweep_rows(), "BN": _sweep_rows(2.0)}, title="sweep")


def _errors_against_n():
    keys = ("F_local", "G_local", "dW_local", "decorrelation_fwd", "focus", "broadness")
    rows = [{"n": n, "levels": [{"level": l, **{k: (l + 1) / math.sqrt(n) for k in keys},
                                 **{f"{k}_floor": 0.1 / math.sqrt(n) for k in keys}} for l in (0, 1)]}
            for n in (1000, 2000, 4000)]
    return plots.plot_errors_against_n(rows)


def _depth_rows():
    """Rows of L = 1, 2 with the notebook's student names (long legend labels), built by hand: no training."""
    rows = []
    for L in (1, 2):
        k = L * L
        rows += [DepthRow(L, k, "narrow (width 2)", (2,) * L, 0.26, 3, 6, net=make_student((2,) * L, seed=L),
                          lower=0.03, upper=0.2, class_lower=0.03, class_upper=0.19),
                 DepthRow(L, k, "shallow", (2**L,), 0.25, 2, 5, net=make_student((2**L,), seed=L), lower=0.12,
                          upper=0.19, class_lower=0.03, class_upper=0.19),
                 DepthRow(L, L, "narrow (width 2)", (2,) * L, 0.0, 2**L, 2**L, role="control", lower=0.0, upper=0.0),
                 DepthRow(L, k, "width 8, random start, Adam", (8,) * k, 0.25, 21, 99, role="deep",
                          net=make_student((8,) * k, seed=0), lower=0.0, upper=0.0),
                 DepthRow(L, k, "exact tent", (2,) * k, 0.0, 2**k, 2**k, role="deep", net=TentNetwork(k), lower=0.0,
                          upper=0.0),
                 DepthRow(L, k, "tent x(1+0.0031N), SGD (warm start)", (2,) * k, 0.02, 19, 2**k, role="deep",
                          net=TentNetwork(k), lower=0.0, upper=0.0)]
    return rows


def _piece_records():
    return [PieceRecord((2,), "tent", 1, 2, k=1), PieceRecord((3,), "random", 1, 3),
            PieceRecord((2, 2), "trained", 1, 5), PieceRecord((2, 2, 2), "tent", 1, 8, k=3)]


def _layer2d():
    W = torch.tensor([[1.0, 0.3], [-0.4, 1.0], [0.8, -0.9]], dtype=F64)
    return MASO.from_linear_relu(W, torch.tensor([0.2, -0.3, 0.5], dtype=F64))


def _region_draws():
    layer = _layer2d()
    x = torch.tensor([[0.5, 0.5], [-1.0, 1.5]], dtype=F64)
    probs = region_probabilities(layer.A, layer.B, x, 0.5)
    t = (np.random.default_rng(0).random((2, 100, 2, 3)) < probs[..., 1].numpy()).astype(np.int64)
    idata = az.from_dict(posterior={"t": t}, dims={"t": ["example", "unit"]})
    return plots.plot_region_draws({"synthetic": idata}, probs, title="draws")


def _factorial_layer(seed, orthogonal=False):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(3, 4, generator=g, dtype=F64)
    if orthogonal:
        W = 1.5 * torch.linalg.qr(W.T)[0].T
    A = torch.zeros(3, 2, 4, dtype=F64)
    A[:, 1] = W
    B = torch.zeros(3, 2, dtype=F64)
    B[:, 1] = 0.5 * torch.randn(3, generator=g, dtype=F64)
    return A, B


def _gap_vs_defect():
    gaps = []
    for seed, ortho in ((0, True), (1, False), (2, False)):
        A, B = _factorial_layer(seed, ortho)
        gaps.append(factorial_gap(A, B, torch.randn(30, 4, dtype=F64, generator=torch.Generator().manual_seed(seed))))
    return plots.plot_gap_vs_defect(gaps, marginal_tv=[0.0, 0.01, 0.02], title="gap")


def _factorial_panel(seed, ortho=False):
    A, B = _factorial_layer(seed, ortho)
    x = torch.randn(2, 4, dtype=F64, generator=torch.Generator().manual_seed(seed))
    draws = factorial_posterior_draws(A, B, x, num_draws=50, seed=seed)
    return draws, exact_posterior(A, B, x), mean_field_map(A, B, x)


def _marginal_forest():
    (d1, e1, m1), (d2, e2, m2) = _factorial_panel(0, True), _factorial_panel(1)
    return plots.plot_marginal_forest([d1, d2], [e1.marginals, e2.marginals], [m1.probs, m2.probs],
                                      titles=["orthogonal", "free"], title="forest")


def _configuration_posterior():
    d, e, m = _factorial_panel(3)
    return plots.plot_configuration_posterior(e.configs, e.probs, m.probs, draws=d, top=5, titles=["a", "b"],
                                              title="configurations")


def _tv_convergence():
    lad = Ladder.random(depth=2, branching=2, events=3, seed=0)
    sample, exact = sample_ladder(lad, 1000, seed=3), exact_statistics(lad)
    return plots.plot_tv_convergence([compare_statistics(exact, empirical_statistics(lad, sample.z[:n]))
                                      for n in (250, 1000)], title="tv")


def _bayes_accuracy():
    base = Ladder.random(depth=2, branching=2, events=3, concentration=0.5, seed=2)
    rows = []
    for s in (0.2, 1.0):
        lad = base.with_emission(GaussianEmission.around_one_hot(4, 3, s))
        data = sample_ladder(lad, 100, seed=1)
        rows.append(bayes_optimal_accuracy(lad, data.inputs(dtype=F64), data.y))
    return plots.plot_bayes_accuracy([0.2, 1.0], {"random ladder": rows}, chance=1 / 3, title="bayes")


def _event_posterior():
    lad = Ladder.random(depth=2, branching=2, events=[3, 3, 2], concentration=0.7, seed=13, emission="gaussian",
                        sigma=0.6)
    x = sample_ladder(lad, 2, seed=0).inputs(dtype=F64)
    idata = posterior_event_draws(lad, x, num_draws=100, seed=4)
    return plots.plot_event_posterior(idata, posterior(lad, x, marginals=True).marginals, example=1, title="events")


def _arviz():
    t = np.random.default_rng(0).normal(size=(2, 50, 3))
    return plots.plot_arviz("trace", az.from_dict(posterior={"w": t}), title="trace")


def _sweep():
    from smaso.sweep import SweepResult, SweepRun

    curves = {0: [0.6, 0.2, 0.05, 0.0], 1: [0.7, 0.3, 0.08, 0.01], 2: [0.6, 0.15, 0.02, 0.0]}
    runs = [SweepRun(P, s, e, 0.0, 100, 0.1) for s, row in curves.items()
            for P, e in zip((10, 100, 1000, 10000), row, strict=True)]
    return plots.plot_sweep(SweepResult("ladder", {}, {}).merge(runs), title="sweep")


FIGURES = {
    "plot_activation_family": lambda: plots.plot_activation_family(
        MASO.from_linear_relu(torch.ones(1, 1, dtype=F64), torch.zeros(1, dtype=F64)), [1.0, 0.75, 0.5, 0.0],
        torch.linspace(-4, 4, 41, dtype=F64)[:, None], title="family"),
    "plot_alignment": _alignment,
    "plot_arviz": _arviz,
    "plot_bayes_accuracy": _bayes_accuracy,
    "plot_comparison": _comparison,
    "plot_configuration_posterior": _configuration_posterior,
    "plot_depth": lambda: plots.plot_depth(_depth_rows()),
    "plot_errors_against_n": _errors_against_n,
    "plot_event_posterior": _event_posterior,
    "plot_gap_vs_defect": _gap_vs_defect,
    "plot_ladder_tables": lambda: plots.plot_ladder_tables(Ladder.random(depth=2, branching=2, events=3, seed=1),
                                                           title="tables"),
    "plot_marginal_forest": _marginal_forest,
    "plot_nodes_needed": lambda: plots.plot_nodes_needed(range(1, 9), (1, 2, 3)),
    "plot_noise_sweep": _noise_sweep,
    "plot_piece_counts": lambda: plots.plot_piece_counts(_piece_records()),
    "plot_region_draws": _region_draws,
    "plot_sweep": _sweep,
    "plot_table1": lambda: plots.plot_table1(torch.linspace(-4, 4, 41, dtype=F64), 0.8, title="table 1"),
    "plot_tent_powers": lambda: plots.plot_tent_powers((1, 2, 3, 4, 5), n_grid=257),
    "plot_tv_convergence": _tv_convergence,
    "plot_vq_partition": lambda: plots.plot_vq_partition(_layer2d(), (0.5, 0.8), resolution=21,
                                                         points=torch.tensor([[0.0, 0.0], [1.0, 2.0]], dtype=F64),
                                                         title="partition"),
}
#: figures whose axes are drawn by another library: only the canvas check applies
NO_LABEL_CHECK = {"plot_arviz"}


def test_every_public_figure_function_is_covered():
    public = {name for name in plots.__all__ if name.startswith("plot_")}
    assert public == set(FIGURES)


# ---------------------------------------------------------------------- the checks
def _drawn_tick_labels(ax) -> list:
    """The tick labels matplotlib draws (``get_ticklabels`` also holds those of ticks outside the view)."""
    out = []
    for axis in (ax.xaxis, ax.yaxis):
        for tick in axis._update_ticks():  # the ticks Axis.draw draws
            out += [lab for lab in (tick.label1, tick.label2) if lab.get_visible()]
    return out


def _texts(fig):
    """(description, artist) of every visible legend and text artist of ``fig``."""
    out = [(f"figure text {t.get_text()!r}", t) for t in fig.texts]
    for name in ("_suptitle", "_supxlabel", "_supylabel"):
        t = getattr(fig, name, None)
        if t is not None:
            out.append((f"figure {name[1:]} {t.get_text()!r}", t))
    out += [(f"figure legend {i}", leg) for i, leg in enumerate(fig.legends)]
    for j, sub in enumerate(fig.subfigs):  # subfigures' legends and texts (their axes are fig.axes)
        out += [(f"subfigure {j} legend {i}", leg) for i, leg in enumerate(sub.legends)]
        out += [(f"subfigure {j} text {t.get_text()!r}", t) for t in sub.texts]
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        where = f"axes {i} ({ax.get_title()!r})"
        out += [(f"{where} title {t.get_text()!r}", t) for t in (ax.title, ax._left_title, ax._right_title)]
        out += [(f"{where} {a} label {t.get_text()!r}", t) for a, t in (("x", ax.xaxis.label), ("y", ax.yaxis.label))]
        out += [(f"{where} tick label {t.get_text()!r}", t) for t in _drawn_tick_labels(ax)]
        out += [(f"{where} text {t.get_text()!r}", t) for t in ax.texts]
        if ax.get_legend() is not None:
            out.append((f"{where} legend", ax.get_legend()))
    return [(d, a) for d, a in out if a.get_visible() and (not hasattr(a, "get_text") or a.get_text().strip())]


def _outside(fig) -> list[str]:
    """Legend and text artists of a drawn ``fig`` that leave its canvas."""
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    bad = []
    for desc, artist in _texts(fig):
        e = artist.get_window_extent(renderer)
        if e.x0 < box.x0 - TOL or e.y0 < box.y0 - TOL or e.x1 > box.x1 + TOL or e.y1 > box.y1 + TOL:
            bad.append(f"{desc}: {np.round(e.extents, 1).tolist()} outside {np.round(box.extents, 1).tolist()}")
    return bad


def _legends_over_titles(fig) -> list[str]:
    """Legends of a drawn ``fig`` whose box overlaps a title (an axes title or the figure's suptitle)."""
    renderer = fig.canvas.get_renderer()
    arts = _texts(fig)
    legends = [(d, a) for d, a in arts if "legend" in d]
    titles = [(d, a) for d, a in arts if " title " in d or d.startswith("figure suptitle")]
    bad = []
    for dl, leg in legends:
        el = leg.get_window_extent(renderer).expanded(1.0, 1.0).padded(-TOL)
        bad += [f"{dl} overlaps {dt}" for dt, t in titles if el.overlaps(t.get_window_extent(renderer))]
    return bad


def _has_data(ax) -> bool:
    return bool(ax.lines or ax.collections or ax.patches or ax.images)


def _unlabelled(fig) -> list[str]:
    """Axes with data missing an x or y label that neither its grid column / row nor the figure provides."""
    axes = [ax for ax in fig.axes if ax.get_visible() and not hasattr(ax, "_colorbar") and _has_data(ax)]
    sup_x = getattr(fig, "_supxlabel", None) is not None and fig._supxlabel.get_text()
    sup_y = getattr(fig, "_supylabel", None) is not None and fig._supylabel.get_text()

    def span(ax, which):
        ss = ax.get_subplotspec()
        if ss is None:
            return None
        return (ss.get_gridspec(), (ss.colspan if which == "x" else ss.rowspan))

    bad = []
    for i, ax in enumerate(axes):
        for which, sup in (("x", sup_x), ("y", sup_y)):
            if getattr(ax, f"get_{which}label")() or sup:
                continue
            mine = span(ax, which)
            if mine is not None and any(span(o, which) == mine and getattr(o, f"get_{which}label")() for o in axes):
                continue  # an outer label of its column (x) or row (y)
            bad.append(f"axes {i} ({ax.get_title()!r}): no {which} label")
    return bad


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figure_fits_its_canvas_and_labels_its_axes(name):
    fig = FIGURES[name]()
    fig.canvas.draw()
    assert _outside(fig) == []
    assert _legends_over_titles(fig) == []
    if name not in NO_LABEL_CHECK:
        assert _unlabelled(fig) == []


def test_event_posterior_ticks_count_the_regions():
    """Regions are ticked 0, 1, ... within each level (not '1.0', '1.1', which read as decimals)."""
    fig = _event_posterior()
    fig.canvas.draw()
    assert [[t.get_text() for t in ax.get_xticklabels()] for ax in fig.axes] == [["0"], ["0", "1"],
                                                                                   ["0", "1", "2", "3"]]
    assert [ax.get_xlabel() for ax in fig.axes] == [f"region (index within level {l})" for l in range(3)]
