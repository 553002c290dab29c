"""The notebooks' run times: every ``examples/*.ipynb`` executed top to bottom in a fresh kernel, in full mode.

Each notebook runs as ``tests/test_notebooks.py`` runs it (``nbclient.NotebookClient``, kernel ``python3``,
``MPLBACKEND=Agg``, ``$SMASO_OUTPUT`` and the working directory in a temporary directory, ``OMP_NUM_THREADS``
as set, else 2), but in **full mode**: the notebooks shrink their sizes when ``CI`` is in the kernel's
environment at all (``QUICK = "CI" in os.environ``), so ``CI`` is removed from it; ``--quick`` sets
``CI=true`` instead (the small sizes: a smoke run, whose times are not the full mode's).  A notebook's time is
the wall time of ``NotebookClient.execute``: the kernel's start, every cell, the kernel's shutdown.
``--repeats`` rounds run every notebook once per round, in order; each row keeps every time and their median.
A notebook that fails raises.

``benchmarks/report.py`` writes the README's notebook table (section "Notebooks") from
``results/notebooks.json``.

    python benchmarks/bench_notebooks.py --record    # the recorded results (about 4 minutes on 2 cores)
    python benchmarks/bench_notebooks.py --quick --only 02_factorial_mixture    # a smoke run of one notebook
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

EXAMPLES = _common.REPO_ROOT / "examples"
KERNEL = "python3"
CELL_TIMEOUT_S = 600  # nbclient's limit per cell, as in tests/test_notebooks.py


def notebooks() -> list[Path]:
    """``examples/*.ipynb``, sorted."""
    return sorted(EXAMPLES.glob("*.ipynb"))


@contextlib.contextmanager
def _kernel_environment(quick: bool, output: Path) -> Iterator[dict]:
    """The environment a kernel started inside inherits (``os.environ``, restored on exit): ``CI=true`` when
    ``quick``, no ``CI`` at all otherwise; ``MPLBACKEND=Agg``; ``SMASO_OUTPUT=output``; ``OMP_NUM_THREADS``
    kept, else 2.  Yields the variables set (``CI`` absent in full mode)."""
    env = {"MPLBACKEND": "Agg", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
           "SMASO_OUTPUT": str(output)}
    if quick:
        env["CI"] = "true"
    saved = {name: os.environ.get(name) for name in [*env, "CI"]}
    try:
        os.environ.pop("CI", None)
        os.environ.update(env)
        yield env
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_notebook(path: Path, quick: bool) -> float:
    """Execute the notebook ``path`` top to bottom in a fresh kernel (outputs into a temporary directory,
    the file itself untouched) and return the wall time of the execution; raise when a cell fails."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="bench_notebooks.") as tmp:
        run_dir = Path(tmp) / "cwd"
        run_dir.mkdir()
        with _kernel_environment(quick, Path(tmp) / "out"):
            client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL,
                                    resources={"metadata": {"path": str(run_dir)}})
            t0 = time.perf_counter()
            try:
                client.execute()
            except CellExecutionError as e:
                raise RuntimeError(f"notebook {path.name} failed ({'CI' if quick else 'full'} mode):\n{e}") from e
            seconds = time.perf_counter() - t0
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    if errors:
        raise RuntimeError(f"notebook {path.name} failed: {errors[0].get('ename')}: {errors[0].get('evalue')}")
    return seconds


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=None,
                   help="rounds, every notebook once per round (default 1; --quick: 1)")
    p.add_argument("--only", metavar="STEM", default=None,
                   help="run only the notebook examples/STEM.ipynb (not with --record)")
    _common.add_quick_out_args(p, "a smoke run: the notebooks in CI mode (CI=true, their small sizes)",
                               _common.default_out("notebooks"))
    args = p.parse_args(argv)
    _common.fill_defaults(args, quick={"repeats": 1}, full={"repeats": 1})
    _common.require_positive(p, args, ["repeats"])
    paths = notebooks()
    if args.only is not None:
        paths = [path for path in paths if path.stem == args.only]
        if not paths:
            p.error(f"--only {args.only}: no examples/{args.only}.ipynb (stems: "
                    f"{', '.join(path.stem for path in notebooks())})")
    recorded = _common.recorded_out("notebooks")
    if Path(args.out).resolve() == recorded.resolve() and (args.quick or args.only is not None):
        p.error(f"{recorded.name} records every notebook in full mode: --record takes neither --quick nor --only")
    mode = "ci" if args.quick else "full"
    wall0 = _common.start(None)
    machine = _common.machine_info(omp_num_threads=os.environ.get("OMP_NUM_THREADS", "2"))
    print(f"bench_notebooks: {len(paths)} notebook(s) in {mode} mode, {args.repeats} round(s); "
          f"{_common.torch_summary()} here, OMP_NUM_THREADS={machine['omp_num_threads']} in the kernels")

    seconds: dict[str, list[float]] = {path.stem: [] for path in paths}
    for r in range(args.repeats):
        for path in paths:
            seconds[path.stem].append(run_notebook(path, args.quick))
            print(f"  round {r + 1}/{args.repeats}: {path.stem} {seconds[path.stem][-1]:.1f} s", flush=True)
    results = [{"notebook": stem, "mode": mode, "seconds": times, "median_s": statistics.median(times)}
               for stem, times in seconds.items()]
    print()
    _common.print_table([
        _common.Column("notebook", 34, "notebook", align="<"),
        _common.Column("mode", 4, "mode", align="<"),
        _common.Column("median s", 9, "median_s", ".1f"),
        _common.Column("runs (s)", 8, lambda row: ", ".join(f"{s:.1f}" for s in row["seconds"]), align="<"),
    ], results)
    total = _common.finish(machine, wall0)
    import nbclient

    config = {"quick": args.quick, "mode": mode, "repeats": args.repeats, "only": args.only,
              "notebooks": [path.stem for path in paths], "kernel": KERNEL, "nbclient": nbclient.__version__,
              "cell_timeout_s": CELL_TIMEOUT_S}
    data = _common.record("notebooks", argv, {"config": config}, machine, results, {}, total)
    _common.write_json(args.out, data)
    _common.print_done(total, args.out)
    return data


if __name__ == "__main__":
    main()
