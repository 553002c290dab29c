"""``examples/digits_table2.py``: the paper's Table 2 at small scale (MLP and CNN on scikit-learn's digits)."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("sklearn")
stats = pytest.importorskip("scipy.stats")

SCRIPT = Path(__file__).parents[1] / "examples" / "digits_table2.py"


@pytest.fixture(scope="module")
def digits():
    spec = importlib.util.spec_from_file_location("digits_table2", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def quick(digits, tmp_path_factory):
    out = tmp_path_factory.mktemp("digits") / "quick.json"
    result = digits.main(["--quick", "--no-progress", "--out", str(out)])
    return result, out


@pytest.mark.slow  # the example's whole --quick table (the slow tier)
def test_quick_mode_runs_the_table(quick):
    result, out = quick
    rows = result["rows"]
    keys = {(r["model"], r["activation"], r["orthogonality"]) for r in rows}
    # both networks, both activations, every orthogonality mode
    assert keys == {(m, a, o) for m in ("mlp", "cnn") for a in ("relu", "swish")
                    for o in ("none", "penalty", "gram_schmidt", "orthogonal")}
    for r in rows:
        assert len(r["accuracies"]) == 2
        assert all(0.5 < a <= 1.0 for a in r["accuracies"]), r["label"]  # chance is 0.1
        if r["orthogonality"] in ("gram_schmidt", "orthogonal"):
            assert r["defect"] < 1e-10  # exactly orthogonal filters / rows
        if r["orthogonality"] == "none":
            assert r["defect"] > 1e-3
        if r["activation"] == "swish":
            assert 0 < r["beta"] < 1
        else:
            assert r["beta"] is None
    # every mode is compared with none, and swish with relu, paired by seed
    kinds = [(c["kind"], c["model"], c["orthogonality"]) for c in result["comparisons"]]
    assert len(kinds) == 2 * (2 * 3 + 4) and len(set(kinds)) == 2 * (3 + 4)
    on_disk = json.loads(out.read_text())
    assert on_disk["table"] == result["table"] and "| penalty lam=1 |" in on_disk["table"]
    assert on_disk["rows"][0]["accuracies"] == rows[0]["accuracies"]


def test_paired_difference_matches_scipy(digits):
    a = [0.97, 0.96, 0.98, 0.95, 0.97]
    b = [0.96, 0.96, 0.97, 0.93, 0.98]
    c = digits.paired_difference(a, b)
    d = np.subtract(a, b)
    ci = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert c["mean"] == pytest.approx(d.mean()) and c["sd"] == pytest.approx(d.std(ddof=1))
    assert (c["lo"], c["hi"]) == pytest.approx((ci.low, ci.high), rel=1e-9)
    # by hand: t_{0.975, 4} = 2.7764451...
    assert c["hi"] - c["mean"] == pytest.approx(2.7764451052 * d.std(ddof=1) / np.sqrt(5), rel=1e-9)
    assert (c["better"], c["worse"], c["ties"], c["n"]) == (3, 1, 1, 5)
    c90 = digits.paired_difference(a, b, confidence=0.9)
    assert c["lo"] < c90["lo"] < c90["hi"] < c["hi"]
    with pytest.raises(ValueError, match="equally long"):
        digits.paired_difference([1.0, 2.0], [1.0])


def test_same_seed_same_run_and_global_rng_untouched(digits):
    torch.manual_seed(123)
    random.seed(5)
    np.random.seed(7)  # noqa: NPY002 -- the global state a run must leave alone
    before = torch.random.get_rng_state().clone(), random.getstate(), np.random.get_state()[1].copy()  # noqa: NPY002
    threads = torch.get_num_threads()
    kw = {"epochs": 1, "lr": 3e-3}
    for model in ("mlp", "cnn"):
        for orth in ("orthogonal", "gram_schmidt"):
            first = digits.train_one(model, "swish", orth, 0.0, 3, **kw)
            second = digits.train_one(model, "swish", orth, 0.0, 3, **kw)
            first.pop("seconds"), second.pop("seconds")
            assert first == second
    penalty = digits.train_one("cnn", "relu", "penalty", 1.0, 3, **kw)
    assert penalty["train_loss"] != digits.train_one("cnn", "relu", "penalty", 1.0, 4, **kw)["train_loss"]
    assert torch.equal(torch.random.get_rng_state(), before[0])  # orthogonal's own randn included
    assert random.getstate() == before[1] and np.array_equal(np.random.get_state()[1], before[2])  # noqa: NPY002
    assert torch.get_num_threads() == threads


def test_same_initial_weights_for_every_mode_of_a_seed(digits):
    free = digits.hidden_layers_of(digits.build_model("cnn", "relu", "none", seed=2))
    gs = digits.hidden_layers_of(digits.build_model("cnn", "swish", "gram_schmidt", seed=2))
    assert [type(m).__name__ for m in free] == ["Conv2d", "Conv2d"]
    for a, b in zip(free, gs, strict=True):
        torch.testing.assert_close(b.parametrizations.weight.original, a.weight)
    other = digits.hidden_layers_of(digits.build_model("cnn", "relu", "none", seed=3))
    assert not torch.equal(free[0].weight, other[0].weight)


@pytest.mark.parametrize("argv, message", [
    (["--model", "resnet"], "--model: unknown 'resnet'"),
    (["--activations", "relu,tanh"], "--activations: unknown 'tanh'"),
    (["--orthogonality", "none,householder"], "--orthogonality: unknown 'householder'"),
    (["--orthogonality", ","], "--orthogonality: expected a comma-separated list"),
    (["--lams", "1,abc"], "--lams: expected comma-separated numbers"),
    (["--lams", "-1"], "--lams: expected penalty weights > 0"),
    (["--seeds", "1"], "--seeds: expected >= 2"),
    (["--epochs", "0"], "--epochs: expected >= 1"),
    (["--lr", "0"], "--lr: expected a learning rate > 0"),
    (["--workers", "2"], "apply to --engine dask only"),
])
def test_bad_options_give_clear_errors(digits, capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        digits.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
