"""Example scripts run with tiny arguments and say what they should."""

import importlib.util
from pathlib import Path

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


def test_digits_table2_smoke(tmp_path, capsys):
    result = _load("digits_table2").main(["--seeds", "2", "--epochs", "2", "--activations", "relu,swish",
                                          "--orthogonality", "none,gram_schmidt", "--out", str(tmp_path / "d.json")])
    rows = {(r["activation"], r["orthogonality"]): r for r in result["rows"]}
    assert len(rows) == 4 and (tmp_path / "d.json").exists()
    for r in rows.values():
        assert 0.5 < r["mean"] <= 1.0  # two epochs already learn the digits well above chance (0.1)
    # Gram-Schmidt layers satisfy Eq 11 exactly; free layers do not
    assert rows[("relu", "gram_schmidt")]["defect"] < 1e-10 < rows[("relu", "none")]["defect"]
    assert 0 < rows[("swish", "none")]["beta"] < 1  # learnable beta stays in (0, 1)
    assert "test accuracy" in capsys.readouterr().out
