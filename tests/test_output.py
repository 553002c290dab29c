"""Where notebooks, examples and benchmarks write (smaso.output): never the source tree by default."""

from __future__ import annotations

import pytest

from smaso.output import ENV, output_dir


def test_default_root_is_smaso_output_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    path = output_dir("figures", "05_depth")
    assert path == tmp_path.joinpath("smaso-output", "figures", "05_depth").relative_to(tmp_path) and path.is_dir()
    assert not output_dir("benchmarks", create=False).exists()  # create=False only names it


def test_the_environment_moves_it(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path / "out"))
    assert output_dir("specs") == tmp_path / "out" / "specs" and (tmp_path / "out" / "specs").is_dir()


@pytest.mark.parametrize("part", ["/abs", "../up", "a/../b", ""])
def test_parts_must_stay_inside(part, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path))
    with pytest.raises(ValueError, match="parts: expected relative folder names"):
        output_dir(part)


def test_a_file_as_the_root_is_refused(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("")
    monkeypatch.setenv(ENV, str(tmp_path / "f"))
    with pytest.raises(ValueError, match=f"{ENV}: .* is a file, expected a folder"):
        output_dir("figures")
