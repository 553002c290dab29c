"""The README's quick start runs as written (documentation that cannot rot silently)."""

import re
from pathlib import Path

import torch


def test_readme_quick_start_runs(tmp_path, monkeypatch):
    text = (Path(__file__).parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 3, "README lost a python quick start"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:  # the blocks build on each other, as a reader runs them
        exec(compile(block, "README.md", "exec"), namespace)
    assert (tmp_path / "comparison.png").stat().st_size > 10_000
    # twenty-line quick start: 300 steps compared every 100, its figure written, hard VQ one-hot per unit
    assert [h["step"] for h in namespace["run"].history] == [0, 100, 200, 300]
    assert (tmp_path / "quick_start.png").stat().st_size > 10_000
    assert len(namespace["result"].history) == 3
    # SMASO block: SVI on the tempered mixture reproduces swish (300 Adam steps: within 0.05)
    u, fit = namespace["u"], namespace["fit"]
    assert (fit.outputs - u * torch.sigmoid((0.7 / 0.3) * u)).abs().max() < 0.05
    assert namespace["report"]["within_bound"]
    assert namespace["post"].label.shape == (1000, 4)
    assert set(namespace["draws"]) >= {"z_0", "z_1", "z_2", "z_3", "x"}
    # Pyro block: TraceEnum_ELBO's evidence and infer_discrete's MAP against exact inference (asserted there)
    assert namespace["z_map"].shape == (6, namespace["small"].total_regions)
    assert namespace["evidence"] < 0 and namespace["prior"]["z_2"].shape == (2, 6, 2, 2)
    # graph block: the main job on an overlapping ladder trains the one student
    assert type(namespace["graph_run"].student).__name__ == "LadderStudent"
    assert [h["step"] for h in namespace["graph_run"].history] == [0, 50, 100]
    # dataset block: a chunked store written and streamed through a DataLoader with two workers
    assert len(namespace["data"]) == 100_000
    assert namespace["z"].shape == (1024, namespace["data"].ladder.total_regions)
    assert namespace["x"].shape[0] == 1024 and torch.equal(namespace["y"], namespace["z"][:, 0])
