"""The package as a user gets it: sdist -> wheel -> a fresh virtual environment, away from the source tree.

The editable install that the rest of the suite runs under cannot see a subpackage or data file
missing from the wheel (the source tree is on its path).  These tests build the sdist and, from it,
the wheel (so both are checked), compare the wheel's packages with every package of the source
tree, then install the wheel into a new virtual environment (no system site-packages, so nothing
from this checkout can leak in) and, from another directory, import every public module, ask
``smaso --version`` and run ``smaso demo``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("smaso", "teachers", "inference")

pytestmark = pytest.mark.slow


def _source_packages() -> set[str]:
    """Every package directory (holding an ``__init__.py``) of the three import packages."""
    return {".".join(p.parent.relative_to(ROOT).parts) for top in PACKAGES for p in (ROOT / top).rglob("__init__.py")}


def _source_version() -> str:
    namespace: dict = {}
    exec((ROOT / "smaso" / "_version.py").read_text(), namespace)
    return namespace["__version__"]


def _run(cmd: list[str], cwd: Path, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {proc.returncode}\n{proc.stdout[-4000:]}\n"
                             f"{proc.stderr[-4000:]}")
    return proc


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """sdist and wheel, built from a copy of the tree (the build writes ``*.egg-info`` where it runs)."""
    work = tmp_path_factory.mktemp("build")
    src = work / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__",
                                                             ".pytest_cache", ".ruff_cache", "smaso-output", "*.npz"))
    out = work / "dist"
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(src)], cwd=work)
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist, "work": work}


def test_wheel_holds_every_package_and_the_metadata(built):
    with zipfile.ZipFile(built["wheel"]) as zf:
        names = zf.namelist()
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = zf.read(f"{dist_info}/METADATA").decode()
    in_wheel = {str(Path(n).parent).replace("/", ".") for n in names if n.endswith("/__init__.py")}
    assert in_wheel == _source_packages(), f"missing from the wheel: {sorted(_source_packages() - in_wheel)}"
    for top in PACKAGES:
        assert f"{top}/py.typed" in names
    assert "teachers/ladder_spec.schema.json" in names  # package data: the spec files' JSON Schema
    assert f"{dist_info}/licenses/LICENSE" in names
    assert f"Version: {_source_version()}" in metadata.splitlines()
    assert "License-Expression: MIT" in metadata.splitlines()  # PEP 639, not the deprecated classifier/table
    assert not any(line.startswith("License:") for line in metadata.splitlines())


def test_sdist_holds_the_sources_docs_and_tests(built):
    import tarfile

    with tarfile.open(built["sdist"]) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for pkg in _source_packages():
        assert f"{pkg.replace('.', '/')}/__init__.py" in names
    docs = [p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")]  # every page the README links
    for must in ("LICENSE", "README.md", "pyproject.toml", "docs/theory.md", "tests/test_install.py", *docs):
        assert must in names, must


@pytest.fixture(scope="module")
def venv(built) -> Path:
    """A fresh virtual environment with the built wheel installed (torch pinned to the running version,
    so pip takes the same build instead of resolving a new one)."""
    env_dir = built["work"] / "venv"
    _run([sys.executable, "-m", "venv", str(env_dir)], cwd=built["work"])
    python = env_dir / "bin" / "python"
    torch_version = importlib.metadata.version("torch").split("+")[0]
    _run([str(python), "-m", "pip", "install", "-q", f"torch=={torch_version}"], cwd=built["work"])
    _run([str(python), "-m", "pip", "install", "-q", str(built["wheel"])], cwd=built["work"])
    return env_dir


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env["MPLBACKEND"] = "Agg"
    return env


def test_every_public_module_imports_from_the_installed_wheel(venv, tmp_path):
    script = f"""
import importlib, json, pkgutil, sys
site = sys.argv[1]
found, outside = [], []
for top in {PACKAGES!r}:
    pkg = importlib.import_module(top)
    names = [top] + [m.name for m in pkgutil.walk_packages(pkg.__path__, top + ".")]
    for name in names:
        if any(part.startswith("_") for part in name.split(".")):
            continue
        mod = importlib.import_module(name)
        found.append(name)
        if not mod.__file__.startswith(site):
            outside.append((name, mod.__file__))
import smaso
print(json.dumps({{"found": found, "outside": outside, "version": smaso.__version__,
                  "entry": [getattr(smaso, n).__module__ for n in smaso.__all__ if n != "__version__"]}}))
"""
    python = venv / "bin" / "python"
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path,
                env=_clean_env()).stdout.strip()
    out = json.loads(_run([str(python), "-c", script, site], cwd=tmp_path, env=_clean_env()).stdout)
    assert out["outside"] == [], "imported from outside the virtual environment"
    expected = {name for name in _source_packages() if not any(p.startswith("_") for p in name.split("."))}
    assert expected <= set(out["found"])
    assert {"smaso.plots", "smaso.student.compare", "smaso.splines.modules", "smaso.depth.pieces",
            "smaso.theorems.energy", "teachers.ladder", "inference.vq"} <= set(out["found"])
    assert out["version"] == _source_version()
    assert out["entry"] and all(m.startswith("smaso.") for m in out["entry"])  # the lazy surface resolves


def test_installed_cli_reports_its_version_and_runs_the_demo(venv, tmp_path):
    smaso = str(venv / "bin" / "smaso")
    version = _run([smaso, "--version"], cwd=tmp_path, env=_clean_env()).stdout.strip()
    assert version == f"smaso {_source_version()}"
    run = _run([smaso, "demo", "--out", "results"], cwd=tmp_path, env=_clean_env())
    assert "Thm 3 check" in run.stdout
    payload = json.loads((tmp_path / "results" / "comparison.json").read_text())
    assert payload and isinstance(payload, dict)
    png = (tmp_path / "results" / "comparison.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
