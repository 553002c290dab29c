"""examples/nuts_mixture.py: NUTS fits a per-unit SMASO's pi and A with the regions enumerated, handed to ArviZ."""

from __future__ import annotations

import importlib.util
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

EXAMPLE = Path(__file__).parents[1] / "examples" / "nuts_mixture.py"


def _load():
    spec = importlib.util.spec_from_file_location("nuts_mixture", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow  # the example end to end with NUTS (the slow tier)
def test_nuts_mixture_quick_recovers_pi_and_A(tmp_path, capsys):
    mod = _load()
    threads = torch.get_num_threads()
    states = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state().clone())  # noqa: NPY002
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = mod.main(["--quick", "--plot", str(tmp_path / "trace.png")])
    noisy = [w for w in caught if "matplotlib" in w.filename or "arviz" in w.filename
             or "Matplotlib" in w.category.__name__]
    assert noisy == [], [str(w.message) for w in noisy][:3]
    # the caller's RNG and thread count are as they were
    assert random.getstate() == states[0] and np.array_equal(np.random.get_state()[1], states[1])  # noqa: NPY002
    assert torch.equal(torch.get_rng_state(), states[2]) and torch.get_num_threads() == threads
    # with the fixed seed both checks hold: 2 chains agree (r_hat) and the truth is covered
    summary = result["summary"]
    assert len(summary) == 2 * 3 + 2 * 3 * 2 and summary.index[0] == "pi[0, 0]"
    assert summary["r_hat"].max() < 1.1 and summary["ess_bulk"].min() > 30
    assert result["covered"] and result["max_abs_z"] < 4.0
    # ArviZ form: integer coordinates, observed x, the two chains
    idata = result["idata"]
    assert idata.posterior.sizes["chain"] == 2 and idata.posterior.sizes["draw"] == 100
    assert idata.posterior["A"].dims == ("chain", "draw", "unit", "region", "feature")
    assert idata.observed_data["x"].dims == ("example", "unit", "feature")
    for name, coord in idata.posterior.coords.items():
        assert coord.dtype.kind in "iu", name
    assert (tmp_path / "trace.png").stat().st_size > 5000
    out = capsys.readouterr().out
    assert "r_hat" in out and "within 4 posterior SDs" in out and "time:" in out
    # the posterior of pi is on the simplex, draw by draw
    np.testing.assert_allclose(idata.posterior["pi"].sum("region").values, 1.0, atol=1e-9)
