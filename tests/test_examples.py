"""Example scripts run with tiny arguments and say what they should."""

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[1] / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_noise_ceiling_bottomup(capsys):
    rows = _load("ladder_noise_ceiling").main(["--n", "400", "--sigmas", "0.05,3", "--mode", "bottomup"])
    assert [r["sigma"] for r in rows] == [0.0, 0.05, 3.0]
    # bottom-up labels are a function of the leaf events: exact leaves give a perfect ceiling
    assert rows[0]["expected"] == 1.0 and rows[0]["empirical"] == 1.0
    assert rows[1]["expected"] > 0.99  # sigma 0.05 against unit spacing: leaves still identifiable
    assert rows[2]["expected"] < 0.9   # very noisy leaves lower the ceiling
    assert "Bayes-optimal accuracy" in capsys.readouterr().out


@pytest.mark.slow  # 8 trainings of the digits table (the slow tier)
def test_digits_table2_smoke(tmp_path, capsys):
    result = _load("digits_table2").main(["--seeds", "2", "--epochs", "2", "--model", "mlp,cnn",
                                          "--activations", "relu,swish", "--orthogonality", "none,gram_schmidt",
                                          "--out", str(tmp_path / "d.json")])
    rows = {(r["model"], r["activation"], r["orthogonality"]): r for r in result["rows"]}
    assert len(rows) == 8 and (tmp_path / "d.json").exists()
    for r in rows.values():
        assert 0.5 < r["mean"] <= 1.0  # two epochs already learn the digits well above chance (0.1)
    for m in ("mlp", "cnn"):
        # Gram-Schmidt layers (conv filters flattened to rows) satisfy Eq 11 exactly; free layers do not
        assert rows[(m, "relu", "gram_schmidt")]["defect"] < 1e-10 < rows[(m, "relu", "none")]["defect"]
        assert 0 < rows[(m, "swish", "none")]["beta"] < 1  # learnable beta stays in (0, 1)
    # paired by seed: gram_schmidt vs none per activation, swish vs relu per mode, with 95% intervals
    comps = result["comparisons"]
    assert len(comps) == 2 * (2 + 2) and all(c["lo"] <= c["mean"] <= c["hi"] for c in comps)
    out = capsys.readouterr().out
    assert "test accuracy" in out and "swish minus relu" in out
