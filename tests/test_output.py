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


def test_json_safe_makes_strict_json_of_nan_numpy_and_torch():
    import json

    import numpy as np
    import torch

    from smaso.output import json_safe

    obj = {"a": float("nan"), "b": (1.5, float("inf"), -float("inf")), "c": np.float32(0.25), "d": np.arange(3),
           "e": torch.tensor([1.0, float("nan")]), "f": torch.tensor(2), 3: True, "g": None}
    out = json.loads(json.dumps(json_safe(obj), allow_nan=False))
    assert out == {"a": None, "b": [1.5, None, None], "c": 0.25, "d": [0, 1, 2], "e": [1.0, None], "f": 2,
                   "3": True, "g": None}
    with pytest.raises(TypeError, match="object is not JSON serializable"):
        json_safe({"x": object()})


def test_write_strict_json_and_the_run_record(tmp_path):
    import json

    from smaso.output import RunRecord, write_strict_json

    run = RunRecord("demo", ["--x", "1"])
    record = run.finish(config={"x": 1}, value=float("nan"))
    assert list(record) == ["experiment", "timestamp", "argv", "machine", "config", "value", "wall_s", "cpu_s"]
    assert record["argv"] == ["--x", "1"] and record["wall_s"] >= 0 and record["cpu_s"] >= 0
    assert {"loadavg_start", "loadavg_end", "torch", "cpu_count"} <= set(record["machine"])
    path = write_strict_json(tmp_path / "sub" / "r.json", record)
    text = path.read_text()
    assert text.endswith("\n") and "NaN" not in text
    assert json.loads(text)["value"] is None
