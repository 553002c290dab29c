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
