"""Figures of the student-versus-reformulation comparison (smaso/plots/comparison.py)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest_student import fi_sample, one_torch_thread  # noqa: F401 (fixture)

from smaso.plots._base import plt
from smaso.plots.comparison import plot_comparison, plot_noise_sweep
from smaso.student.compare import ComparisonResult, compare_student, noise_sweep
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig
from teachers import Ladder

FLOOR = 1e-17


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def result():
    _, s = fi_sample(depth=2, branching=2, leaf_events=2, n=300, seed=3)
    return compare_student(s, student=StudentConfig(width=3),
                           training=TrainingConfig(steps=4, lr=0.2, batch_size=32, seed=1),
                           evaluation=EvaluationConfig(held_out=False, eval_every=2, eval_examples=200))


def _level_row(level: int, base: float) -> dict:
    row = {"level": level, "F_propagated": base, "G_propagated": 2 * base, "dW_propagated": 3 * base,
           "F_local": base / 2, "G_local": base / 3, "dW_local": base / 4,
           "decorrelation_fwd": 0.0 if level == 0 else base, "decorrelation_bwd": 0.0 if level == 0 else base / 5}
    if level >= 1:
        row["focus"], row["broadness"] = base / 7, 1e-15
    return row


def _rows(sigmas=(0.0, 0.1, 0.4), scale: float = 1.0) -> list[dict]:
    """Hand-made noise_sweep rows: error base(sigma) = 1e-14 at 0, else scale * sigma * (level + 1)."""
    out = []
    for s in sigmas:
        out.append({"sigma": s, "levels": [_level_row(l, 1e-14 if s == 0 else scale * s * (l + 1)) for l in (0, 1)],
                    "leaves": {"level": 2}, "max_error": 0.0})
    return out


# ----------------------------------------------------------------------------- plot_comparison
def test_plot_comparison_writes_and_plots_the_statistics(result, tmp_path):
    path = tmp_path / "comparison.png"
    fig = plot_comparison(result, path, title="fully informative")
    assert path.exists() and path.stat().st_size > 5000
    axes = fig.axes
    assert len(axes) == 6 and fig._suptitle.get_text() == "fully informative"
    # top left: F_propagated of level 0 over the checkpoints (first line drawn)
    line = axes[0].lines[0]
    assert list(line.get_xdata()) == [h["step"] for h in result.history]
    np.testing.assert_allclose(line.get_ydata(), [max(h["levels"][0]["F_propagated"], FLOOR) for h in result.history])
    # bottom left: the scatter of level 0 holds the measured (x) and predicted (y) Fbar of the seen events
    seen = result.final_stats.counts[0] > 0
    offsets = axes[3].collections[0].get_offsets()
    np.testing.assert_allclose(offsets[:, 0], result.final_stats.Fbar[0][seen].flatten().numpy())
    np.testing.assert_allclose(offsets[:, 1], result.final_prediction.Fbar[0][seen].flatten().numpy())


def test_plot_comparison_bad_input():
    with pytest.raises(ValueError, match="result"):
        plot_comparison(ComparisonResult())


def test_plot_comparison_of_a_history_without_statistics_names_them(result):
    # a result holding only the history (built by hand, as from a saved JSON) has no statistics to scatter: a
    # ValueError naming them, not an AttributeError on None once the figure is half drawn
    open_before = plt.get_fignums()
    with pytest.raises(ValueError, match=r"^result: final_stats and final_prediction are None \(set by "
                                         r"compare_student"):
        plot_comparison(ComparisonResult(history=result.history, student=result.student))
    assert plt.get_fignums() == open_before  # refused before any figure is made


# ----------------------------------------------------------------------------- plot_noise_sweep
def test_plot_noise_sweep_lines_are_the_rows(tmp_path):
    rows = _rows()
    path = tmp_path / "sweep.png"
    fig = plot_noise_sweep(list(reversed(rows)), path, title="sweep")  # the plot sorts by sigma
    assert path.exists() and path.stat().st_size > 5000
    axes = fig.axes
    assert len(axes) == 6
    # top row: lines in order (kind, level): propagated level 0, level 1, local level 0, level 1
    for ax, q in zip(axes[:3], ("F", "G", "dW"), strict=True):
        assert len(ax.lines) == 4
        for j, kind in enumerate(("propagated", "local")):
            for i in (0, 1):
                line = ax.lines[2 * j + i]
                np.testing.assert_allclose(line.get_xdata(), [0.0, 0.1, 0.4])
                np.testing.assert_allclose(line.get_ydata(), [r["levels"][i][f"{q}_{kind}"] for r in rows])
        assert ax.get_yscale() == "log" and ax.get_xscale() == "symlog"
    # bottom row: level 0 has no gate terms (exactly 0): not drawn, and the panel says so
    for ax in axes[3:5]:
        assert len(ax.lines) == 1
        assert any("exactly 0 at level 0" in t.get_text() for t in ax.texts)
    np.testing.assert_allclose(axes[3].lines[0].get_ydata(), [r["levels"][1]["decorrelation_fwd"] for r in rows])
    focus, broad = axes[5].lines
    np.testing.assert_allclose(focus.get_ydata(), [r["levels"][1]["focus"] for r in rows])
    np.testing.assert_allclose(broad.get_ydata(), [1e-15] * 3)
    labels = [t.get_text() for t in axes[3].get_xticklabels()]
    assert labels[0].startswith("0") and "one-hot" in labels[0] and labels[1:] == ["0.1", "0.4"]


def test_plot_noise_sweep_two_series_and_floor(tmp_path):
    rows_a, rows_b = _rows(), _rows(scale=2.0)
    rows_b[0]["levels"][1]["F_propagated"] = 0.0  # one exact zero among non-zeros: drawn at the floor
    fig = plot_noise_sweep({"no BN": rows_a, "BN": rows_b}, tmp_path / "bn.pdf", kinds=("propagated",))
    assert (tmp_path / "bn.pdf").exists()
    ax = fig.axes[0]
    assert len(ax.lines) == 4  # (series) x (level)
    assert [line.get_linestyle() for line in ax.lines] == ["-", "-", "--", "--"]
    np.testing.assert_allclose(ax.lines[3].get_ydata(), [FLOOR, 0.4, 1.6])  # 2 * sigma * (level + 1)
    legend_texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "no BN / recursion" in legend_texts and "BN / recursion" in legend_texts


def test_plot_noise_sweep_of_a_real_sweep(tmp_path):
    lad = Ladder.fully_informative(depth=2, branching=2, leaf_events=2, concentration=1.0, seed=0)
    rows = noise_sweep(lad, [0.0, 0.3], 200, student=StudentConfig(width=3), training=TrainingConfig(steps=2),
                       evaluation=EvaluationConfig(eval_every=2))
    fig = plot_noise_sweep(rows, tmp_path / "real.png")
    assert (tmp_path / "real.png").stat().st_size > 5000
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(),
                               [max(r["levels"][0]["F_propagated"], FLOOR) for r in rows])


@pytest.mark.parametrize("rows, match", [
    ([], "rows"),
    ("rows", "rows"),
    ({}, "rows"),
    ([{"levels": []}], "sigma"),
    ([{"sigma": -0.1, "levels": [{"level": 0}]}], "sigma"),
    ([{"sigma": float("nan"), "levels": [{"level": 0}]}], "sigma"),
    ([{"sigma": 0.0, "levels": [{"level": 0}]}, {"sigma": 0.1, "levels": [{"level": 1}]}], "same levels"),
    ({"a": []}, r"rows\['a'\]"),
])
def test_plot_noise_sweep_bad_rows(rows, match):
    with pytest.raises(ValueError, match=match):
        plot_noise_sweep(rows)


def test_plot_noise_sweep_bad_kinds():
    for kinds in ((), ("bogus",), "propagated", ("local", "local")):
        with pytest.raises(ValueError, match="kinds"):
            plot_noise_sweep(_rows(), kinds=kinds)
    many = {str(i): _rows() for i in range(3)}
    with pytest.raises(ValueError, match="line styles"):
        plot_noise_sweep(many)  # 3 series x 2 kinds > 4 styles
