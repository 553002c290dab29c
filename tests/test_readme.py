"""The README's quick start runs as written (documentation that cannot rot silently)."""

import re
from pathlib import Path


def test_readme_quick_start_runs():
    text = (Path(__file__).parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has no python quick start"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    assert namespace["report"]["within_bound"]
    assert namespace["post"].label.shape == (1000, 4)
    assert set(namespace["draws"]) >= {"z_0", "z_1", "z_2", "z_3", "x"}
