"""The event-alignment figure (smaso/plots/alignment.py): its panels and lines, plotted data equal to the
history's numbers, the control run's markers, and refusals of bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from smaso.plots import plot_alignment
from smaso.plots._base import plt
from smaso.plots.alignment import CONTROL_LABEL, PANELS
from smaso.student.config import EvaluationConfig, StudentConfig, TrainingConfig

STEPS = (0, 250, 500)
LEVELS = (0, 1, 2)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def _row(level: int, step: int) -> dict:
    """Distinct numbers per key, level and step (so a line drawn from the wrong key or level is caught); level 0
    has one region, hence NaN controls, as alignment_report gives."""
    base = 0.01 * (1 + level) + 1e-4 * step
    out = {"level": level}
    for j, key in enumerate(("eta2", "eta2_control", "mi", "mi_control", "spec", "probe")):
        out[key] = base * (j + 1)
    out.update(floor_eta2=1e-3 * (level + 1), floor_mi=5e-4 * (level + 1), floor_spec=0.07 + 0.01 * level,
               probe_chance=0.25 + 0.01 * level)
    if level == 0:
        out["eta2_control"] = out["mi_control"] = math.nan
    return out


def _history() -> list[dict]:
    hist = [{"step": s, "loss": 1.0, "alignment": [_row(l, s) for l in LEVELS]} for s in STEPS]
    hist.insert(1, {"step": 100, "loss": 0.5})  # a checkpoint without alignment rows is skipped
    return hist


def _lines(ax) -> dict:
    return {ln.get_label(): ln for ln in ax.get_lines()}


def test_panels_lines_and_data_equal_the_history():
    hist = _history()
    fig = plot_alignment(hist, title="alignment")
    axes = np.array(fig.axes).reshape(len(LEVELS), len(PANELS))
    assert fig._suptitle.get_text() == "alignment"
    for i, level in enumerate(LEVELS):
        for ax, (_, _, lines, _) in zip(axes[i], PANELS, strict=True):
            assert ax.get_title().startswith(f"level {level}")
            drawn = _lines(ax)
            want = [(k, lab, st) for k, lab, st in lines if not (level == 0 and k.endswith("_control"))]
            assert sorted(drawn) == sorted(lab for _, lab, _ in want)
            for key, label, style in want:
                ln = drawn[label]
                assert ln.get_linestyle() == style
                assert list(ln.get_xdata()) == list(STEPS)
                assert list(ln.get_ydata()) == [h["alignment"][i][key] for h in hist if "alignment" in h]
    assert [ax.get_xlabel() for ax in axes[-1]] == ["training step"] * len(PANELS)
    # one legend per column, naming all its lines: level 0 has no controls, so eta2's and MI's sit at level 1
    legends = [[i for i in range(len(LEVELS)) if axes[i, j].get_legend() is not None] for j in range(len(PANELS))]
    assert legends == [[1], [1], [0], [0]]
    for j, (_, _, lines, _) in enumerate(PANELS):
        texts = [t.get_text() for t in axes[legends[j][0], j].get_legend().get_texts()]
        assert texts == [lab for _, lab, _ in lines]


def test_a_measure_that_is_zero_throughout_is_drawn_and_named():
    hist = _history()
    for h in hist:
        if "alignment" in h:
            h["alignment"][0]["mi"] = 0.0  # the linear outputs: no gate, always on
    fig = plot_alignment(hist)
    texts = [[t.get_text() for t in ax.texts] for ax in fig.axes]
    assert texts[1] == ["exactly 0 at every checkpoint"] and sum(map(len, texts)) == 1
    assert list(_lines(fig.axes[1])["own event z_α"].get_ydata()) == [0.0] * len(STEPS)


def test_control_run_is_a_horizontal_line_per_panel(tmp_path):
    control = [_row(l, 9999) for l in LEVELS]
    fig = plot_alignment(_history(), tmp_path / "a" / "align.png", control=control)
    assert (tmp_path / "a" / "align.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    axes = np.array(fig.axes).reshape(len(LEVELS), len(PANELS))
    for i in range(len(LEVELS)):
        for ax, (_, _, _, key) in zip(axes[i], PANELS, strict=True):
            ln = _lines(ax)[CONTROL_LABEL]
            assert list(ln.get_ydata()) == [control[i][key]] * 2 and ln.get_linestyle() == "-."


def test_a_comparison_result_plots_its_history():
    from smaso.student.compare import compare_student
    from teachers.ladder import Ladder
    from teachers.sampling import sample_ladder

    g = Ladder.random(depth=2, branching=2, events=3, seed=0)
    r = compare_student(sample_ladder(g, 400, 0), student=StudentConfig(width=3), training=TrainingConfig(steps=4),
                        evaluation=EvaluationConfig(held_out=False, eval_every=2, noise_groups=None,
                                                    alignment=sample_ladder(g, 200, 1)))
    fig = plot_alignment(r)
    rows = [h["alignment"] for h in r.history]
    assert len(fig.axes) == len(rows[0]) * len(PANELS)
    probe = _lines(fig.axes[len(PANELS) * (len(rows[0]) - 1) + 3])["probe accuracy"]
    assert list(probe.get_ydata()) == [a[-1]["probe"] for a in rows]
    assert list(probe.get_xdata()) == [h["step"] for h in r.history]


def test_bad_input_is_refused_naming_the_argument():
    with pytest.raises(TypeError, match="result_or_history"):
        plot_alignment(42)
    with pytest.raises(TypeError, match="result_or_history"):
        plot_alignment("history")
    with pytest.raises(ValueError, match="result_or_history: no checkpoint"):
        plot_alignment([{"step": 0, "loss": 1.0}])
    hist = _history()
    del hist[0]["alignment"][1]["probe"]
    with pytest.raises(ValueError, match=r"result_or_history.*missing probe"):
        plot_alignment(hist)
    hist = _history()
    hist[-1]["alignment"] = hist[-1]["alignment"][:2]
    with pytest.raises(ValueError, match="result_or_history: the checkpoints do not all report the same levels"):
        plot_alignment(hist)
    hist = _history()
    hist[0]["alignment"][0]["eta2"] = "high"
    with pytest.raises(ValueError, match=r"result_or_history.*eta2 must be numbers"):
        plot_alignment(hist)
    hist = _history()
    hist[0]["step"] = None
    with pytest.raises(ValueError, match="step"):
        plot_alignment(hist)
    with pytest.raises(TypeError, match="control"):
        plot_alignment(_history(), control=_row(0, 0))
    with pytest.raises(ValueError, match=r"control: expected rows of levels \[0, 1, 2\]"):
        plot_alignment(_history(), control=[_row(0, 0), _row(1, 0)])
    with pytest.raises(ValueError, match=r"control.*missing spec"):
        plot_alignment(_history(), control=[{k: v for k, v in _row(l, 0).items() if k != "spec"} for l in LEVELS])
