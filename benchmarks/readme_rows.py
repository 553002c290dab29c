"""The README's figures, written from the recorded JSON (never typed by hand).

- :func:`rows`: the one-ladder benchmark rows (``sampling``, ``posterior``, ``graph_statistics``);
- :func:`demo_rows`: "Reading ``smaso demo``" (``demo.json`` of ``bench_demo.py``): the accuracy table, the
  seeds' sentence, the reformulation table, the alignment table and the wall time;
- :func:`demo_claims`: the README's sentences about the demo that carry no number, as checks on the same JSON.

``python benchmarks/readme_rows.py`` prints the rows; ``tests/test_readme_figures.py`` checks that README.md holds
exactly these rows and that every claim holds, so a re-recorded result must be carried into the README (run this
and paste).
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


def _span(values: list[float], fmt: str = ".2f") -> str:
    lo, hi = min(values), max(values)
    return f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}-{hi:{fmt}}"


#: The demo's student levels (0 the linear output, 1 the readout group: both have the label as their event).
DEMO_LEVELS = {0: "0 (label, linear output)", 1: "1 (label, readout group)", 2: "2 (teacher level 1)",
               3: "3 (teacher level 2)"}

#: The reformulation table's columns: (heading, summary key).
DEMO_TERMS = (("F one step", "F_local"), ("F focus part", "F_local_focus"),
              ("F decorrelation part", "F_local_decorrelation"), ("G~ one step", "G_local"),
              ("G~ broadness part", "G_local_broadness"), ("G~ decorrelation part", "G_local_decorrelation"))


def _term(level: dict, key: str) -> str:
    """``median [min..max] (noise)`` with ``*`` when within noise, as ``smaso demo`` prints it."""
    noise = max(level[f"{key}_floor"], level[f"{key}_seed_se"])
    star = "*" if key in level["within_noise"] else ""
    return (f"{level[key]:.2g} [{level[f'{key}_min']:.2g}..{level[f'{key}_max']:.2g}] "
            f"({noise:.0e}){star}").replace("e-0", "e-").replace("0e+00", "0")


def demo_rows() -> list[str]:
    """The figures of the README's "Reading ``smaso demo``", from ``results/demo.json``."""
    d = _load("demo")
    runs, summary = d["results"], d["summary"]
    acc = runs[0]["accuracy"]
    seeds = [r["seed"] for r in runs]
    held = [r["accuracy"]["held_out_accuracy"] for r in runs]
    accuracy = [
        f"| Bayes-optimal accuracy of the teacher (exact posterior of x) | {acc['bayes']:.4f} |",
        f"| class ceiling, linear top (additive over the root's two children) | {acc['ceiling_linear_top']:.4f} |",
        f"| class ceiling, readout of >= {acc['readout_width_needed']} nodes | {acc['ceiling_readout']:.4f} |",
        f"| loss-optimal linear top (squared loss) | {acc['loss_optimal_linear_top']:.4f} |",
        f"| this student (readout 32), seed {runs[0]['seed']}, on {acc['held_out_rows']} held-out rows "
        f"| {acc['held_out_accuracy']:.4f} |"]
    seeds_line = (f"Over student seeds {', '.join(map(str, seeds))} the held-out accuracy is "
                  f"{', '.join(f'{a:.4f}' for a in held)} (median {sorted(held)[len(held) // 2]:.4f}).")
    wall = d["wall"]
    wall_line = (f"`smaso demo` takes {wall['median_s']:.0f} s end to end on {d['machine']['cpu_count']} cores "
                 f"(median of {len(wall['seconds'])} runs, {wall['median_cpu_s']:.0f} s of CPU, "
                 f"{_load_avg(d)}; `bench_demo.py`).")
    terms = [f"| {lv['level']} | " + " | ".join(_term(lv, key) for _, key in DEMO_TERMS) + " |"
             for lv in summary["levels"]]
    alignment = []
    for level, name in DEMO_LEVELS.items():
        start = [r["alignment_start"][level] for r in runs]
        end = [r["alignment_end"][level] for r in runs]
        control = [r["control_end"][level] for r in runs]
        chance = _span([a["probe_chance"] for a in start])
        alignment.append(
            f"| {name} | {_span([a['eta2'] for a in start], '.3f')} -> {_span([a['eta2'] for a in end], '.3f')} "
            f"| {_span([a['eta2'] for a in control], '.3f')} "
            f"| {_span([a['spec'] for a in start])} -> {_span([a['spec'] for a in end])} "
            f"| {_span([a['probe'] for a in start])} -> {_span([a['probe'] for a in end])} ({chance}) |")
    return [*accuracy, seeds_line, wall_line, *terms, *alignment]


def demo_claims() -> dict[str, bool]:
    """The README's wordings about the demo, each checked on ``results/demo.json`` (all must be True)."""
    d = _load("demo")
    runs, levels = d["results"], d["summary"]["levels"]

    def end(level, key):
        return [r["alignment_end"][level][key] for r in runs]

    def start(level, key):
        return [r["alignment_start"][level][key] for r in runs]

    def control(level, key):
        return [r["control_end"][level][key] for r in runs]

    hidden = [lv for lv in levels if lv["level"] >= 1]
    return {
        "held-out accuracy >= 0.95 of Bayes in every seed":
            all(r["accuracy"]["held_out_accuracy"] >= 0.95 * r["accuracy"]["bayes"] for r in runs),
        "the focus part of F is within noise at every level":
            all("F_local_focus" in lv["within_noise"] for lv in levels),
        "the F one-step error of each hidden level is its decorrelation part, not within noise":
            all("F_local_decorrelation" not in lv["within_noise"]
                and abs(lv["F_local_decorrelation"] - lv["F_local"]) <= 0.01 * lv["F_local"] for lv in hidden),
        "broadness is within noise at the readout level and the larger G~ part at the two lowest hidden levels":
            "G_local_broadness" in levels[1]["within_noise"]
            and all(lv["G_local_broadness"] > lv["G_local_decorrelation"] for lv in levels[2:]),
        "the readout level and teacher level 1 become selective (eta2, spec, probe rise in every seed)":
            all(min(end(lv, k)) > max(start(lv, k)) for lv in (1, 2) for k in ("eta2", "spec", "probe")),
        "with shuffled labels their eta2 ends below every trained seed's, near its value at initialisation":
            all(max(control(lv, "eta2")) < min(end(lv, "eta2"))
                and max(control(lv, "eta2")) <= 1.25 * max(start(lv, "eta2")) for lv in (1, 2)),
        "teacher level 2's probe is 1 already at initialisation":
            min(start(3, "probe")) >= 0.995,
    }


if __name__ == "__main__":
    print("\n".join(rows() + demo_rows()))
    for claim, holds in demo_claims().items():
        print(f"{'holds' if holds else 'FAILS'}: {claim}")
