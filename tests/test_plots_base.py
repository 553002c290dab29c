"""smaso.plots.save_figure: atomic, creates missing folders, clear errors."""

import pytest

from smaso.plots import plt, save_figure


def test_save_figure_creates_folders_and_writes_by_suffix(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    png = save_figure(fig, tmp_path / "a" / "b" / "f.png")
    svg = save_figure(fig, tmp_path / "f.svg")
    plt.close(fig)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in svg.read_bytes()[:500]
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == ["f.png"]  # no temporary file left


def test_save_figure_refuses_a_directory(tmp_path):
    fig = plt.figure()
    with pytest.raises(ValueError, match=r"path: .* is a directory"):
        save_figure(fig, tmp_path)
    plt.close(fig)
