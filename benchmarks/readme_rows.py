"""The README's rows for the one-ladder benchmarks, written from the recorded JSON (never typed by hand).

``python benchmarks/readme_rows.py`` prints them; ``tests/test_readme_figures.py`` checks that README.md holds
exactly these rows, so a re-recorded result must be carried into the README (run this and paste).
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def _load(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def _load_avg(d: dict) -> str:
    a, b = d["machine"]["loadavg_start"][0], d["machine"]["loadavg_end"][0]
    return f"load {a:.1f}-{b:.1f}"


def rows() -> list[str]:
    """The README table rows, in order."""
    s = _load("sampling")
    t = s["targets"]
    sampling = (
        "| the one sampler (`sample_ladder`) per draw vs 0.2's tree sampler (`benchmarks/reference/`), 341-region "
        "ladder, and on the conv1d DAG (769 regions), 1 thread, N = 1e5, medians of "
        f"{s['config']['repeats']} interleaved rounds | tree: topdown "
        f"{t['tree_per_draw_vs_reference_topdown']['value']:.2f}x, bottom-up "
        f"{t['tree_per_draw_vs_reference_bottomup']['value']:.2f}x; DAG: "
        f"{t['dag_per_draw_vs_reference_topdown']['value']:.2f}x / "
        f"{t['dag_per_draw_vs_reference_bottomup']['value']:.2f}x (`bench_sampling.py`, {_load_avg(s)}) "
        "| tree <= 1.1x, DAG <= 1.5x |")
    p = _load("posterior")
    t = p["targets"]
    posterior = (
        "| exact posterior p(y, z given x) (`inference.posterior`), 341-region top-down ladder, one-hot leaves, vs a "
        "plain 15-line scaled-product sum-product, 1 thread, medians | 4096 queries: "
        f"{t['posterior_vs_plain_topdown-onehot_batched']['value']:.2f}x, one at a time: "
        f"{t['posterior_vs_plain_topdown-onehot_single']['value']:.2f}x; "
        f"{t['speedup_vs_reference_topdown-onehot_batched']['value']:.1f}x faster than 0.2's tree posterior "
        f"(`bench_posterior.py`, {_load_avg(p)}) | <= 2x; about 15x faster |")
    g = _load("graph_statistics")
    t = g["targets"]
    statistics = (
        "| the one student's statistics pass (forward, explicit backward, frequency statistics) on uniform trees vs "
        "0.2's tree code (`benchmarks/reference/`), 1 thread, N = 65536, best (median) | 511 regions "
        f"{t['one_vs_reference_tree']['value']:.2f}x ({t['one_vs_reference_tree']['value_median']:.2f}x), "
        f"341 regions {t['one_vs_reference_tree341']['value']:.2f}x "
        f"({t['one_vs_reference_tree341']['value_median']:.2f}x), `Ladder.default()` "
        f"{t['one_vs_reference_default']['value']:.2f}x ({t['one_vs_reference_default']['value_median']:.2f}x); "
        f"on the DAG per MAC {t['dag_per_mac_vs_tree']['value']:.2f}x "
        f"({t['dag_per_mac_vs_tree']['value_median']:.2f}x) (`bench_graph_statistics.py`, {_load_avg(g)}) "
        "| trees <= 1.1x, DAG <= 1.5x |")
    return [sampling, posterior, statistics]


if __name__ == "__main__":
    print("\n".join(rows()))
