"""The command-line block of docs/cli.md (the reference the README points to) runs top to bottom as written
(documentation that cannot rot)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

CLI_DOC = Path(__file__).parents[1] / "docs" / "cli.md"


def _cli_block() -> list[str]:
    text = CLI_DOC.read_text()
    section = text[text.index("## Command line"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_cli_block_is_what_the_cli_page_shows():
    lines = _cli_block()
    assert lines[0] == "smaso demo" and all(shlex.split(line)[0] == "smaso" for line in lines)
    assert len(lines) >= 8


@pytest.mark.slow
def test_cli_page_block_runs_as_written(tmp_path):
    env = {**os.environ, "SMASO_OUTPUT": str(tmp_path / "out"), "MPLBACKEND": "Agg"}
    smaso = str(Path(sys.executable).with_name("smaso"))
    outputs = {}
    for line in _cli_block():
        argv = shlex.split(line)
        argv[0] = smaso if Path(smaso).exists() else "smaso"
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{line}\n{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr and "Warning" not in done.stderr, f"{line}\n{done.stderr[-2000:]}"
        outputs[line] = done.stdout
    for path in ("out/demo/comparison.json", "data.zarr", "report.json", "results/comparison.json",
                 "ladder.json", "part2.zarr", "tent.npz"):
        assert (tmp_path / path).exists(), path
    assert json.loads((tmp_path / "report.json").read_text())["n"] == 200000
    tent_report = json.loads(outputs["smaso -q inspect tent.npz --json -"])  # stdout holds only the JSON
    assert tent_report["n"] == 100000
