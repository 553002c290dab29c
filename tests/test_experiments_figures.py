"""The experiment figures quoted in docs/experiments.md and the README are those of the recorded JSON in
``benchmarks/results/`` (``digits_table2``, ``overfitting``, ``overfitting_crossing``, ``depth_separation``,
``depth_cell_bound``, ``deep_width2_sweep``, ``graph_overlap``, ``rhm_sweep``), not typed by hand.

The depth-separation, cell-bound, restart-sweep, overlap and over-fitting tables are rendered from the JSON by the
functions of the scripts that record them (``examples/*.py``) and must stand in the doc as rendered; the prose's
numbers are recomputed here from the same files.  Only JSON is read: nothing is rerun.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import shlex
import statistics
from functools import cache
from pathlib import Path

import pytest
import scipy.stats as sps

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = (ROOT / "docs" / "experiments.md").read_text()
README = (ROOT / "README.md").read_text()
RECORDED = ("depth_separation", "depth_cell_bound", "deep_width2_sweep", "graph_overlap", "overfitting_crossing",
            "rhm_sweep")


def _json(name: str) -> dict:
    return json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text())


@cache
def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_example", ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _interval(row: dict, key: str, sign: str = "") -> str:
    return f"{row[key]:{sign}.3f} [{row[key + '_lo']:{sign}.3f}, {row[key + '_hi']:{sign}.3f}]"


def _in_doc(text: str, doc: str = EXPERIMENTS) -> None:
    """``text`` stands in ``doc`` with its line breaks free (the doc wraps its prose at any space)."""
    flat = re.sub(r"\s+", " ", doc)
    assert re.sub(r"\s+", " ", text) in flat, f"not in the doc (rerun the script and paste its output):\n{text}"


def _load(record: dict) -> str:
    """The load average at both ends of a recorded run, as the doc quotes it: 'min-max'."""
    load = [*record["machine"]["loadavg_start"], *record["machine"]["loadavg_end"]]
    return f"{min(load):.1f}-{max(load):.1f}"


def test_the_digits_tables_are_the_recorded_ones():
    assert _json("digits_table2")["table"].strip() in EXPERIMENTS


# ------------------------------------------------------------------------------------------ over-fitting (§5.3)
def test_the_overfitting_table_and_headline_follow_the_json():
    d = _json("overfitting")
    _in_doc(_example("overfitting").training_table(d["training"]["main"]))
    for r in d["training"]["control"]["rows"][:4]:
        assert _interval(r, "harm", "+") in EXPERIMENTS, r["N"]
    n32 = d["training"]["main"]["rows"][1]
    assert n32["N"] == 32 and _interval(n32, "harm", "+") in README
    c = d["crossing_over_inits"]
    assert (f"{c['crosses']} of {c['inits']} inits cross, {c['crosses_frac']:.2f} [{c['crosses_lo']:.2f}, "
            f"{c['crosses_hi']:.2f}]") in EXPERIMENTS
    assert f"{c['crosses']} of {c['inits']} initialisations cross" in README


def test_the_crossing_table_and_sentences_are_the_recorded_ones():
    """The first over-fitting table and the crossings under it, rendered from overfitting_crossing.json; the
    record's intervals are 95% Wilson intervals of its counts (scipy's), and its crossings lie where its rows
    say."""
    mod, d = _example("overfitting"), _json("overfitting_crossing")
    _in_doc(mod.crossing_table(d))
    _in_doc(mod.crossing_text(d))
    cfg, c = d["config"], d["crossing"]
    lad = cfg["ladder"]
    _in_doc(f"measures it with {cfg['reps']} seeded repeats per N, each on its own slice of data. The relevant "
            f"region alpha has its events {lad['alpha_separation']:g} apart (sigma {lad['alpha_sigma']:g}); the "
            f"irrelevant region gamma has them {lad['gamma_separation']:.1f} apart (sigma {lad['gamma_sigma']:g})")
    assert cfg["z"] == 1.96
    _in_doc("with 95% Wilson intervals")
    assert len(d["seeds"]["stream_seeds"]) == len(set(d["seeds"]["stream_seeds"])) == cfg["reps"]
    for r in c["rows"]:
        assert r["reps"] == cfg["reps"]
        ci = sps.binomtest(r["gamma_wins"], r["reps"]).proportion_ci(0.95, method="wilson")
        assert (r["frac_lo"], r["frac_hi"]) == pytest.approx((ci.low, ci.high), abs=1e-5)
    frac = {r["N"]: r["frac"] for r in c["rows"]}
    first_below = next(n for n in cfg["ns"] if frac[n] < 0.5)
    before = cfg["ns"][cfg["ns"].index(first_below) - 1]
    assert frac[before] >= 0.5 and before < c["crossing_N"] < first_below  # the log-N interpolation's bracket
    load = _load(d)
    _in_doc(f"the recorded run took {d['wall_s']:.1f} s wall and {d['cpu_s']:.1f} s of CPU, load average {load}")
    _in_doc("python3 examples/overfitting.py " + " ".join(a or "''" for a in d["argv"]))
    # "the table above is one of the inits that cross": the same ladder and init in the over-inits run
    o = _json("overfitting")
    assert (o["config"]["crossing_alpha_separation"], o["config"]["crossing_gamma_separation"]) == (
        lad["alpha_separation"], lad["gamma_separation"])
    assert o["crossing_over_inits"]["per_init"][cfg["init_seed"]]["crosses"]


def test_the_first_step_over_inits_follows_the_json():
    d = _json("overfitting")
    c, cfg = d["crossing_over_inits"], d["config"]
    _in_doc(f"the same ladder, {cfg['inits']} init seeds x {cfg['inits_reps']} repeats per N")
    crossed = [p for p in c["per_init"] if p["crosses"]]
    never = [p for p in c["per_init"] if p["gamma_never"]]
    assert len(crossed) == c["crosses"] and len(never) == c["gamma_never"] == c["inits"] - c["crosses"]
    _in_doc(f"In the other {c['gamma_never']}, {c['gamma_never_frac']:.2f} [{c['gamma_never_lo']:.2f}, "
            f"{c['gamma_never_hi']:.2f}], gamma is never ahead")
    predicted = [p["predicted_crossing_N"] for p in never]
    _in_doc(f"the moments predict an RMS crossing at N* = {min(predicted):.0f}-{max(predicted):.0f} for them")
    at = [p["crossing_N"] for p in crossed]
    _in_doc(f"it crosses between N = {min(at):.0f} and {max(at):.0f} (median about "
            f"{round(statistics.median(at), -1):.0f})")


def test_the_over_training_prose_follows_the_json():
    d = _json("overfitting")
    cfg, t = d["config"], d["training"]
    main, ctrl, sgd = t["main"], t["control"], t[f"sgd_b{cfg['sgd_batch']}"]
    lad = main["ladder"]
    held_out = f"{cfg['test_examples']:,}".replace(",", " ")  # the doc's thousands separator
    _in_doc(f"with alpha's events {lad['alpha_separation']:g} apart at sigma {lad['alpha_sigma']:g} (Bayes error "
            f"{main['bayes_err']:.3f}; {main['bayes_err_test']:.3f} on the {held_out} held-out examples)")
    _in_doc(f"A width-{cfg['width']} student is trained with cross-entropy for {cfg['train_steps']} full-batch "
            f"steps at lr {cfg['train_lr']:g}. There are {cfg['train_seeds']} runs per N")
    assert [r["N"] for r in main["rows"]] == [8, 32, 128, 512, 2048] == [r["N"] for r in sgd["rows"]]
    # N = 32 along the run: |W_gamma| from 0, flat to step ~160, then growing; the test error's minimum and end
    ck, n32 = main["checkpoints"], main["rows"][1]["curve"]
    w, err = n32["w_gamma"], n32["test_err"]
    early = [i for i, step in enumerate(ck) if 0 < step < 200]
    _in_doc(f"At N = 32 (means over the {cfg['train_seeds']} runs), |W_gamma| starts at {w[0]:.0f}")
    _in_doc(f"stays at {min(w[i] for i in early):.2f}-{max(w[i] for i in early):.2f} from step {ck[early[0]]} to "
            f"step {ck[early[-1]]}, then grows to {w[ck.index(700)]:.2f} at step 700 and {w[-1]:.2f} at step {ck[-1]}")
    assert all(w[i] > max(w[j] for j in early) for i in range(early[-1] + 1, len(ck)))  # it grows after
    low = min(range(len(ck)), key=err.__getitem__)
    _in_doc(f"the test error rises from {err[low]:.3f} (step {ck[low]}) to {err[-1]:.3f}")
    harm = {r["N"]: r for r in main["rows"]}
    _in_doc(f"(the harm) is {harm[32]['harm']:+.3f} at N = 32 and {harm[128]['harm']:+.3f} at N = 128; from "
            "N = 512 it is zero within +-0.001")
    assert all(max(abs(harm[n]["harm_lo"]), abs(harm[n]["harm_hi"])) < 0.0015 for n in (512, 2048))
    # the control: its harm at 2048, its weight ratios, and every interval overlapping the main arm's
    _in_doc(f"{_interval(ctrl['rows'][3], 'harm', '+')} at N = 512 and {ctrl['rows'][4]['harm']:+.3f} at N = 2048")
    ratios = [f"{r['ratio']:.2f}" for r in ctrl["rows"]]
    _in_doc(f"Its weight ratio is {', '.join(ratios[:-1])} and {ratios[-1]}.")
    assert all(m["harm_lo"] <= c["harm_hi"] and c["harm_lo"] <= m["harm_hi"]
               for m, c in zip(main["rows"], ctrl["rows"], strict=True))  # "the intervals overlap at every N"
    # SGD
    s32, s128 = sgd["rows"][1], sgd["rows"][2]
    _in_doc(f"**SGD** (batch {cfg['sgd_batch']}, the runs otherwise the same). Harm is "
            f"{_interval(s32, 'harm', '+')} at N = 32 and {_interval(s128, 'harm', '+')} at N = 128")
    _in_doc(f"gamma's weight ratio is {harm[32]['ratio'] / s32['ratio']:.1f}x and "
            f"{harm[128]['ratio'] / s128['ratio']:.1f}x smaller than with full batches ({s32['ratio']:.2f} and "
            f"{s128['ratio']:.2f} against {harm[32]['ratio']:.2f} and {harm[128]['ratio']:.2f})")
    tv = [r["tv_batch"] for r in sgd["rows"] if r["tv_batch"] is not None]
    assert len(tv) == 4  # N = 8 is one batch of 8: no minibatch distance (null)
    _in_doc(f"a minibatch's P lies {min(tv):.2f}-{max(tv):.2f} from the training set's in total variation, while "
            f"the training set lies {harm[32]['tv_data']:.2f} (N = 32) down to {harm[2048]['tv_data']:.3f} "
            "(N = 2048) from the population's")
    late = [r for r in sgd["rows"] if r["N"] >= 512]
    fin, best = [r["test_err_final"] for r in late], [r["test_err_best"] for r in late]
    _in_doc(f"SGD's final error at N >= 512 is {min(fin):.3f}-{max(fin):.3f}, and its best along the run "
            f"{min(best):.3f}-{max(best):.3f}")
    # the second explanation: Spearman of llr with harm within each N, recomputed from the runs, against the
    # two-sided 5% critical value for 20 runs
    for r in main["rows"]:
        runs = [x for x in main["runs"] if x["N"] == r["N"]]
        rho = sps.spearmanr([x["llr"] for x in runs],
                            [x["test_err"][-1] - x["test_err_ablated"][-1] for x in runs]).statistic
        assert rho == pytest.approx(r["spearman_llr_harm"], abs=1e-5), r["N"]
    n = cfg["train_seeds"]
    q = sps.t.ppf(0.975, n - 2)
    critical = q / math.sqrt(n - 2 + q * q)
    rhos = [r["spearman_llr_harm"] for r in main["rows"]]
    assert max(abs(v) for v in rhos) < critical
    _in_doc(f"the harm is {' / '.join(f'{v:+.2f}' for v in rhos)}, all below the two-sided 5% critical value for "
            f"{n} runs, about {critical:.2f} (t approximation)")
    _in_doc(f"Reproduce ({d['cpu_seconds']:.0f} s of CPU;")
    block = re.search(r"\n    python3 examples/overfitting\.py --reps 0 --crossing-reps 0 (.*?)\n\n", EXPERIMENTS, re.S)
    assert block and shlex.split(block.group(0).replace("\\\n", " "))[2:] == d["argv"]


@pytest.mark.parametrize("name", RECORDED)
def test_the_recorded_files_are_strict_json_with_their_run(name):
    """NaN and infinities are null (a strict reader refuses bare NaN), and each file says how it was run: the
    command-line arguments, the configuration, the machine, its load at both ends and the wall time."""
    text = (ROOT / "benchmarks" / "results" / f"{name}.json").read_text()
    d = json.loads(text, parse_constant=lambda c: pytest.fail(f"{name}.json holds a bare {c}"))
    assert d["experiment"] == name and isinstance(d["argv"], list) and d["config"]
    assert len(d["machine"]["loadavg_start"]) == 3 and len(d["machine"]["loadavg_end"]) == 3
    assert d["wall_s"] > 0 and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", d["timestamp"])


# ------------------------------------------------------------------------------------------ depth separation
def test_the_depth_separation_tables_are_the_recorded_ones():
    mod, d = _example("depth_separation"), _json("depth_separation")
    for table in (mod.bracket_table(d), mod.student_table(d), mod.deep_table(d)):
        _in_doc(table)
    cfg = d["config"]
    assert (cfg["Ls"], cfg["population"], cfg["deep_population"], cfg["deep_widths"]) == ("1,2,3", 256, 256, "2,8")
    _in_doc(f"the lecture's (squared loss, lr {cfg['lr']:g}, {cfg['steps']} steps, best of "
            f"{len(cfg['seeds'].split(','))} restarts)")
    _in_doc(f"the best of {cfg['population']} random restarts trained together")
    _in_doc(f"(peak lr {cfg['population_lr']:g}, one-cycle, {cfg['steps']} steps) on the L1 loss")
    speed = [t["value"] for t in _json("population")["targets"].values() if t["r"] == cfg["population"]]
    _in_doc(f"Batching {cfg['population']} restarts is {min(speed):.0f}-{max(speed):.0f}x faster per restart")


def _row(d: dict, **match) -> dict:
    (row,) = [r for r in d["rows"] if all(r[k] == v for k, v in match.items())]
    return row


def test_the_depth_separation_prose_follows_the_json():
    d = _json("depth_separation")
    brackets = {b["L"]: b for b in d["class_brackets"]}
    _in_doc(f"proves the lecture's 1/8 at L = 3 and 4 ({brackets[3]['lower']:.4f}, {brackets[4]['lower']:.4f})",
            README)
    assert brackets[3]["lower"] > 1 / 8 and brackets[4]["lower"] > 1 / 8 > brackets[2]["lower"]
    theorem = [r for r in d["rows"] if r["role"] == "theorem"]
    assert all(r["l1"] >= r["lower"] - 1e-9 for r in theorem)  # "every student lies at or above its bound"
    sgd = [r["l1"] for r in d["rows"] if r["role"] in ("theorem", "control") and r["L"] >= 2
           and not r["student"].endswith("population")]
    assert all(abs(v - 0.25) < 2e-3 for v in sgd)  # "SGD ends at the constant 1/2 (error 1/4)"
    pop = {(r["L"], r["role"], r["student"].split(",")[0].split()[0]): r for r in d["rows"]
           if r["student"].endswith("population")}
    c2 = [pop[(2, "control", s)]["l1"] for s in ("narrow", "shallow")]
    c3 = [r["l1"] for (L, role, _), r in pop.items() if L == 3 and role == "control"]
    _in_doc(f"It fits the L = 2 controls ({min(c2):.0e} to {max(c2):.0e})")
    _in_doc(f"brings the L = 3 controls to {min(c3):.3f}-{max(c3):.3f}")
    narrow, shallow = pop[(2, "theorem", "narrow")], pop[(2, "theorem", "shallow")]
    assert narrow["inside"] and not shallow["inside"]
    _in_doc(f"narrow student ({narrow['l1']:.4f}) lies inside its own bracket, below the explicit (2, 2) network's "
            f"{narrow['upper']:.4f}, but above the class's best explicit member ({brackets[2]['upper']:.4f}")
    _in_doc(f"Its shallow student ({shallow['l1']:.4f}) does not reach the (4,) network.")
    _in_doc(f"gets inside its bracket once ({narrow['l1']:.4f})", README)
    above = [r["l1"] - r["upper"] for (L, role, _), r in pop.items() if L == 3 and role == "theorem"]
    assert all(not r["inside"] for (L, role, _), r in pop.items() if L == 3 and role == "theorem")
    _in_doc(f"{min(above):.3f}-{max(above):.3f} above the explicit network of its widths")
    _in_doc(f"gets within {min(c3):.3f}-{max(c3):.3f} of tau^3")
    w8 = _row(d, L=2, role="deep", student="deep: width 8, random start, population")
    w2 = _row(d, L=2, role="deep", student="deep: width 2, random start, population")
    _in_doc(f"the width-8 population finds a depth-4 fit of tau^4 ({w8['l1']:.1e}); width 2 does not "
            f"({w2['l1']:.3f})")
    end = d["machine"]["loadavg_end"]
    _in_doc(f"the recorded run took {d['wall_s']:.0f} s wall on two Dask workers of the shared 2-core machine, with "
            f"other jobs running: load average {min(end):.1f}-{max(end):.1f} at its end, and {d['training_s']:.0f} s "
            "of training summed over the workers")


def test_the_cell_bound_table_and_sentences_are_the_recorded_ones():
    mod, d = _example("depth_cell_bound"), _json("depth_cell_bound")
    for text in (mod.cell_table(d), mod.small_cases_text(d), mod.limits_text(d), mod.architectures_text(d),
                 mod.brute_text(d)):
        _in_doc(text)
    lim = {v["L"]: v for v in mod.limits(d)}
    classes = {r["L"]: r for r in d["classes"]}
    factors = {L: (r["explicit"] - r["old"]) / (r["explicit"] - r["lower"]) for L, r in classes.items() if r["cell"]}
    _in_doc(f"narrows the brackets {factors[2]:.2f}x (L = 2) and {factors[3]:.2f}x (L = 3); no bound on the piece "
            f"count alone can do better than {lim[2]['best_factor']:.2f}x and {lim[3]['best_factor']:.2f}x", README)
    assert classes[4]["cell"] is None and "out of reach" in classes[4]["reason"]
    seconds = {L: r["seconds"] for L, r in classes.items() if r["cell"]}
    _in_doc(f"{seconds[2]:.0f} s at L = 2 and {seconds[3]:.0f} s at L = 3")
    for r in [*d["classes"], *d["architectures"], *d["small"]]:  # each interval is an interval
        assert r["cell"] is None or r["lower"] <= r["found"] + 1e-12
    assert all(b["old"] <= b["found"] + 1e-12 for b in d["brute"])
    load = [*d["machine"]["loadavg_start"], *d["machine"]["loadavg_end"]]
    _in_doc(f"the recorded run took {d['wall_s']:.0f} s wall and {d['cpu_s']:.0f} s of CPU, most of it the brute "
            f"force at T = 3, load average {min(load):.1f}-{max(load):.1f}")


def test_the_width2_restart_sentence_is_the_recorded_sweep():
    mod, d = _example("deep_width2_sweep"), _json("deep_width2_sweep")
    _in_doc(mod.sweep_text(d))
    assert sum(len(c["errors"]) for c in d["configs"]) == sum(b["restarts"] for b in d["best"])
    assert all(b["best"] == min(min(c["errors"]) for c in d["configs"] if c["depth"] == b["depth"])
               for b in d["best"])
    cfg = d["config"]
    assert (cfg["inits"], cfg["lrs"], cfg["schedules"], cfg["steps"], cfg["depths"], cfg["width"]) == (
        "torch,spread", "0.003,0.01,0.03", "constant,onecycle", "3000,12000", "3,4", 2)
    _in_doc(f"Adam on the squared loss at lr {cfg['lrs'].replace(',', ' / ')} (constant or one-cycle) and "
            f"{cfg['steps'].replace(',', ' or ')} steps, {cfg['restarts']} restarts of each")
    median = statistics.median(e for c in d["configs"] for e in c["errors"])
    _in_doc(f"the median restart ends at the constant ({median:.3f})")
    assert abs(median - 0.25) < 1e-3
    load = [*d["machine"]["loadavg_start"], *d["machine"]["loadavg_end"]]
    _in_doc(f"the recorded run took {d['wall_s']:.0f} s wall and {d['cpu_s']:.0f} s of CPU on one thread, load "
            f"average {min(load):.1f}-{max(load):.1f}")


def test_notebook_05_time_is_the_recorded_one_or_none():
    quoted = re.findall(r"[Nn]otebook[^.]*?takes (\d+) s", EXPERIMENTS)
    recorded = {r["notebook"]: r["median_s"] for r in _json("notebooks")["results"]}
    assert all(int(q) == round(recorded["05_depth"]) for q in quoted), quoted


# ------------------------------------------------------------------------------------------ overlap
def test_the_overlap_tables_are_the_recorded_ones():
    mod, d = _example("graph_overlap"), _json("graph_overlap")
    _in_doc(mod.errors_table(d))
    _in_doc(mod.eq115_table(d))
    cfg = d["config"]
    assert (cfg["seeds"], cfg["n"], cfg["steps"]) == (20, 20000, 3000)
    b = mod.bonferroni(d)
    _in_doc(f"Bonferroni correction over the table's {b['tests']} tests (p < {b['threshold']:.4f})")
    ctrl = d["controls"]
    _in_doc(f"largest error is {ctrl['fully_informative_tree']:.1e} and {ctrl['fully_informative_overlap']:.1e}")
    acc = " / ".join(f"{d['summary']['ladders'][n]['accuracy']:.3f}" for n in ("overlap", "shared-input",
                                                                                 "tree-matched", "tree"))
    bayes = " / ".join(f"{d['summary']['ladders'][n]['bayes']:.3f}" for n in ("overlap", "shared-input",
                                                                                "tree-matched", "tree"))
    _in_doc(f"student accuracy {acc}; Bayes {bayes}")


def _overlap() -> tuple:
    """The example module, the record, its per-ladder summary and a lookup of p-values by (a, b, level, key)."""
    mod, d = _example("graph_overlap"), _json("graph_overlap")
    p = {(t["a"], t["b"], level, key): row[key] for t in d["summary"]["tests"]
         for level, row in enumerate(t["levels"]) for key in row}
    return mod, d, d["summary"]["ladders"], p


def _median(s: dict, name: str, level: int, key: str) -> float:
    return s[name]["levels"][level][key]["median"]


def test_the_overlap_prose_follows_the_json():
    mod, d, s, p = _overlap()
    fmt, cut = mod._p, mod.bonferroni(d)["threshold"]
    ratios = [v["median"] / v["floor"] for n in s for level in (1, 2) for k in ("F_propagated", "F_local",
              "G_propagated", "G_local", "dW_propagated", "dW_local") if (v := s[n]["levels"][level][k])["median"]]
    _in_doc(f"is {math.floor(min(ratios))}-{round(max(ratios))} times its noise floor, on every ladder")
    broad = [_median(s, n, level, "broadness") for n in s for level in (1, 2)]
    decor = [_median(s, n, level, "decorrelation_fwd") for n in s for level in (1, 2)]
    _in_doc(f"broadness {min(broad):.1f}-{max(broad):.1f} and forward decorrelation {min(decor):.1f}-{max(decor):.1f}")
    # focus: the matched tree at its floor, the shared-input control (same teacher and data) and overlap above it
    tm, si, ov = ([_median(s, n, level, "focus") for level in (1, 2)] for n in ("tree-matched", "shared-input",
                                                                               "overlap"))
    _in_doc(f"at its noise floor ({tm[0]:.3f} and {tm[1]:.3f} at levels 1 and 2)")
    fl = [s["shared-input"]["levels"][level]["focus"] for level in (1, 2)]
    lo, hi = (min(v["median"] / v["floor"] for v in fl), max(v["median"] / v["floor"] for v in fl))
    _in_doc(f"its focus term is {si[0]:.3f} and {si[1]:.3f}, {math.floor(lo)}-{math.ceil(hi)} times its floor")
    for level in (1, 2):
        assert all(a > b for a, b in zip(mod._values(d["runs"], "shared-input", level, "focus"),
                                         mod._values(d["runs"], "tree-matched", level, "focus"), strict=True))
    pairs = {fmt(p[("shared-input", "tree-matched", level, "focus")]) for level in (1, 2)}
    assert pairs == {fmt(2 / 2**20)}  # every one of 20 pairs the same way: the exact two-sided minimum
    _in_doc(f"at both levels (p = {fmt(2 / 2**20)}, the least 20 pairs can give)")
    po = [fmt(p[("overlap", "shared-input", level, "focus")]) for level in (1, 2)]
    _in_doc(f"has the same {ov[0]:.3f} and {ov[1]:.3f} (against shared-input: p = {po[0]} and {po[1]})")
    top = {n: _median(s, n, 0, "F_local") for n in s}
    pt = (fmt(p[("shared-input", "tree-matched", 0, "F_local")]), fmt(p[("overlap", "shared-input", 0, "F_local")]))
    _in_doc(f"{top['shared-input']:.3f} with shared input and {top['overlap']:.3f} with overlap, against "
            f"{top['tree-matched']:.3f} on the matched tree (p = {pt[0]}; overlap against shared-input p = {pt[1]})")
    held = [p[("shared-input", "tree-matched", level, "focus")] for level in (1, 2)] + [
        p[("overlap", "tree-matched", level, "focus")] for level in (1, 2)] + [
        p[("shared-input", "tree-matched", 0, "F_local")], p[("overlap", "tree-matched", 0, "F_local")]]
    assert max(held) < cut  # "all of these hold after a Bonferroni correction"
    tree = [_median(s, "tree", level, "focus") for level in (1, 2)]
    _in_doc(f"has its focus at the floor too ({tree[0]:.3f} and {tree[1]:.3f})")
    # the backward
    g = {n: _median(s, n, 1, "G_local") for n in s}
    pg = (p[("overlap", "shared-input", 1, "G_local")], p[("overlap", "tree-matched", 1, "G_local")])
    _in_doc(f"lower with overlap ({g['overlap']:.3f}) than with shared input ({g['shared-input']:.3f}, "
            f"p = {fmt(pg[0])}) or on the matched tree ({g['tree-matched']:.3f}, p = {fmt(pg[1])})")
    assert min(v for (a, b, level, k), v in p.items() if k in ("G_local", "broadness") and b != "tree"
               and v is not None) > cut
    # region count
    pr = [fmt(p[("overlap", t, 1, k)]) for t in ("tree", "tree-matched") for k in ("F_propagated", "F_local")]
    _in_doc(f"(recursion p = {pr[0]}, one step p = {pr[1]}) differs, but not against the matched tree (p = "
            f"{pr[2]} and {pr[3]})")
    f2 = p[("overlap", "tree-matched", 2, "F_propagated")]
    assert f2 > cut
    _in_doc(f"at level 2 ({_median(s, 'overlap', 2, 'F_propagated'):.3f} against "
            f"{_median(s, 'tree-matched', 2, 'F_propagated'):.3f} on the matched tree, p = {fmt(f2)}) does not "
            f"survive the correction, and with shared input it is {_median(s, 'shared-input', 2, 'F_propagated'):.3f}"
            f" (against the matched tree p = {fmt(p[('shared-input', 'tree-matched', 2, 'F_propagated')])})")
    # not in the table
    g2 = [_median(s, n, 2, "G_propagated") for n in s]
    local = [_median(s, n, level, "dW_local") for n in s for level in range(3)]
    prop = [_median(s, n, level, "dW_propagated") for n in s for level in range(3)]
    _in_doc(f"median is {min(g2):.1f}-{max(g2):.1f} at level 2")
    _in_doc(f"their medians are {min(local):.1f}-{max(local):.1f} for one step and {min(prop):.1f}-{max(prop):.1f} "
            "for the recursion")
    # Eq 115
    ov2, si2 = s["overlap"]["eq115_by_parents"]["2"], s["shared-input"]["eq115_by_parents"]["2"]
    _in_doc(f"reachable distance from {ov2['best_single']:.3f} (the better parent alone) to {ov2['best']:.3f}")
    demo = d["controls"]["eq115_demo"]
    _in_doc("random tables: " + ", ".join(f"{v:.2f}" for v in demo["best"][:2])
            + f", {demo['best'][2]:.0e} for K = 1, 2, 3")
    _in_doc(f"it lowers the distance from {si2['best_single']:.3f} to {si2['best']:.3f}")
    _in_doc(f"summed signal ({ov2['student_sum']:.3f}) is no closer to Def 4 than its single terms "
            f"({ov2['student_terms']:.3f})")
    _in_doc(f"in only {s['overlap']['sum_below_every_term']} of {s['overlap']['multi_columns']} columns")
    m = d["machine"]
    load = [*m["loadavg_start"], *m["loadavg_end"]]
    _in_doc(f"took {d['wall_s']:.0f} s wall and {d['cpu_s']:.0f} s of CPU on one thread of the shared 2-core machine, "
            f"load average {min(load):.1f}-{max(load):.1f}")


def test_the_overlap_headline_follows_the_json():
    mod, _, s, p = _overlap()
    focus = {n: _median(s, n, 1, "focus") for n in s}
    paired = mod._p(p[("shared-input", "tree-matched", 1, "focus")])
    _in_doc(f"focus at level 1: {focus['overlap']:.3f} (overlap), {focus['shared-input']:.3f} (shared input), "
            f"{focus['tree-matched']:.3f} (matched tree), paired p = {paired}", README)
    ov2 = s["overlap"]["eq115_by_parents"]["2"]
    _in_doc(f"distance from {ov2['best_single']:.3f} to {ov2['best']:.3f}, but SGD does not use it", README)


# ------------------------------------------------------------------------------------------ the scripts, rerun small
def _strict(path: Path) -> dict:
    return json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"{path.name} holds a bare {c}"))


@pytest.mark.slow
def test_depth_separation_records_what_its_tables_render(tmp_path):
    mod = _example("depth_separation")
    out = tmp_path / "d.json"
    rows = mod.main(["--Ls", "2", "--steps", "40", "--seeds", "0", "--n-train", "256", "--deep-widths", "2",
                     "--deep-seeds", "0", "--population", "4", "--deep-population", "4", "--bracket-Ls", "2,3",
                     "--out", "", "--json", str(out)])
    d = _strict(out)
    assert len(d["rows"]) == len(rows) and [b["L"] for b in d["class_brackets"]] == [2, 3]
    for r, row in zip(rows, d["rows"], strict=True):
        assert (row["student"], row["l1"], row["inside"]) == (r.student, r.l1, r.inside())
    assert "| 3 | 9 | 108 (2, 3, 3) | 512 | 0.1602 | 0.2432 (2, 2, 4) |" in mod.bracket_table(d)
    assert mod.student_table(d).count("\n") == 3 and mod.deep_table(d).count("\n") == 2  # 2 students; L = 2


@pytest.mark.slow
def test_depth_cell_bound_quick_record(tmp_path):
    mod = _example("depth_cell_bound")
    out = tmp_path / "c.json"
    mod.main(["--quick", "--Ls", "2,4", "--json", str(out)])
    d = _strict(out)
    two, four = d["classes"]
    assert two["old"] <= two["lower"] <= two["found"] <= two["explicit"] + 1e-12
    assert four["cell"] is None and four["reason"].startswith("out of reach") and four["lower"] == four["old"]
    assert "out of reach (2^16 c cells)" in mod.cell_table(d) and mod.brute_text(d) == ""
    assert all(s["old"] - 1e-12 <= s["lower"] <= s["found"] + 1e-12 for s in d["small"])


@pytest.mark.slow
def test_deep_width2_sweep_quick_record(tmp_path):
    mod = _example("deep_width2_sweep")
    out = tmp_path / "s.json"
    mod.main(["--quick", "--json", str(out)])
    d = _strict(out)
    assert len(d["configs"]) == 4 and all(len(c["errors"]) == 2 for c in d["configs"])  # 2 depths x 2 schedules
    assert [b["restarts"] for b in d["best"]] == [4, 4]
    assert all(0 <= e <= 1 for c in d["configs"] for e in c["errors"])  # an L1 error against tau^k in [0, 1]
    assert mod.sweep_text(d).startswith("In 8 restarts their best errors were")


# ------------------------------------------------------------------------------------------ Table 2 (digits)
def _digits() -> tuple[dict, dict, dict]:
    """The record, its rows by (model, activation, orthogonality, lam) and its comparisons by (kind, model,
    activation, orthogonality, lam)."""
    d = _json("digits_table2")
    rows = {(r["model"], r["activation"], r["orthogonality"], r["lam"]): r for r in d["rows"]}
    comp = {(c["kind"], c["model"], c["activation"], c["orthogonality"], c["lam"]): c for c in d["comparisons"]}
    return d, rows, comp


def _pts(c: dict, interval: bool = True) -> str:
    """A paired difference in accuracy points as the doc writes it: '+0.58 [+0.24, +0.91]' (or '+0.58')."""
    return f"{100 * c['mean']:+.2f}" + (f" [{100 * c['lo']:+.2f}, {100 * c['hi']:+.2f}]" if interval else "")


def _e(x: float, digits: int = 0) -> str:
    """'8.3e-3' for 8.3e-03: the doc's exponent without its zero padding."""
    mantissa, exponent = f"{x:.{digits}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _noise(c: dict) -> bool:
    return c["lo"] <= 0 <= c["hi"]


def test_the_digits_prose_follows_the_json():
    d, rows, comp = _digits()
    cfg = d["config"]
    assert (cfg["lr"], cfg["batch_size"], cfg["epochs"], cfg["seeds"], cfg["lams"]) == (3e-3, 64, 40, 10,
                                                                                           [0.1, 1.0, 10.0])
    _in_doc(f"Each run is Adam (lr 3e-3, batch {cfg['batch_size']}) for {cfg['epochs']} epochs. There are "
            f"{cfg['seeds']} seeds")
    accs = [a for r in d["rows"] for a in r["accuracies"]]
    assert all(abs(a * 539 - round(a * 539)) < 1e-3 for a in accs)  # 539 test images: steps of 1/539
    _in_doc(f"steps of 1/539 = {100 / 539:.2f} points")

    def vs(model, act, orth, lam=None):
        return comp[("vs none", model, act, orth, lam)]

    def both(model, orth, lam=None, interval=True, sep=" / "):
        return sep.join(_pts(vs(model, a, orth, lam), interval) for a in ("relu", "swish"))

    first = ("mlp", "cnn")  # the first two tables
    # the paper's penalty at lambda = 1, lambda = 10 and 0.1
    assert all(_noise(vs(m, a, "penalty", 1.0)) for m in first for a in ("relu", "swish"))
    _in_doc(f"(MLP {both('mlp', 'penalty', 1.0, False)}, CNN {both('cnn', 'penalty', 1.0, False)} points)")
    pen1 = [statistics.fmean(rows[(m, a, "penalty", 1.0)]["defect"] for a in ("relu", "swish")) for m in first]
    _in_doc(f"orthogonal to a relative defect of {_e(min(pen1))} to {_e(max(pen1))}")
    ten = [vs("mlp", a, "penalty", 10.0) for a in ("relu", "swish")]
    assert all(c["hi"] < 0 for c in ten)
    _in_doc(f"it costs accuracy on the MLP ({_pts(ten[0])} with ReLU, {_pts(ten[1])} with swish), and lambda = 0.1 "
            "makes no difference either")
    assert all(_noise(c) for k, c in comp.items() if k[0] == "vs none" and k[4] == 0.1)
    assert all(_noise(c) for k, c in comp.items() if k[0] == "vs none" and k[3] == "gram_schmidt")  # "everywhere"
    # the one clear gain: the orthonormal parametrization on the CNN
    gains = {k for k, c in comp.items() if k[0] == "vs none" and k[1] in first and c["lo"] > 0}
    assert gains == {("vs none", "cnn", a, "orthogonal", None) for a in ("relu", "swish")}
    orth = [vs("cnn", a, "orthogonal") for a in ("relu", "swish")]
    assert {(c["better"], c["n"]) for c in orth} == {(9, 10)}
    _in_doc(f"the CNN: {_pts(orth[0])} points with ReLU and {_pts(orth[1])} with swish, better on 9 of 10 seeds each")
    mlp = [vs("mlp", a, "orthogonal") for a in ("relu", "swish")]
    assert all(-0.001 < c["lo"] <= 0 for c in mlp)  # "intervals that just include 0"
    _in_doc(f"On the MLP the same parametrization gives {both('mlp', 'orthogonal', interval=False)}, with intervals "
            "that just include 0.")
    cnn_defect = [statistics.fmean(rows[("cnn", a, o, lam)]["defect"] for a in ("relu", "swish"))
                  for o, lam in (("penalty", 1.0), ("gram_schmidt", None))]
    _in_doc(f"make the CNN's filters orthogonal too (defects {_e(cnn_defect[0])} and {_e(cnn_defect[1])}) without "
            "that gain")
    # swish against ReLU in the first two tables
    sr = [c for k, c in comp.items() if k[0] == "swish vs relu" and k[1] in first]
    off = [c for c in sr if not _noise(c)]
    assert {(c["model"], c["orthogonality"], c["lam"]) for c in off} == {("cnn", "penalty", 1.0),
                                                                      ("cnn", "conv_penalty", 1.0)}
    _in_doc(f"Swish against ReLU is within noise in {len(sr) - len(off)} of the {len(sr)} comparisons of the first "
            f"two tables; the exceptions are the CNN with the penalty at lambda = 1 "
            f"({_pts(comp[('swish vs relu', 'cnn', 'swish', 'penalty', 1.0)])}) and with `conv_penalty` "
            f"({_pts(comp[('swish vs relu', 'cnn', 'swish', 'conv_penalty', 1.0)])}, below)")
    plain = [c for k, c in comp.items() if k[1] in first and k[3] != "conv_penalty"]
    _in_doc(f"Outside `conv_penalty` the first two tables hold {len(plain)} intervals, and one or two of them "
            f"excluding 0 by chance is expected (5% of {len(plain)} is {0.05 * len(plain):.1f})")
    betas = {k: r["beta"] for k, r in rows.items() if k[1] == "swish"}
    assert all(r["beta"] is None for k, r in rows.items() if k[1] == "relu")
    top = {m: max((k for k in betas if k[0] == m and k[2] != "conv_penalty"), key=betas.get) for m in first}
    assert {k[2:] for k in top.values()} == {("penalty", max(cfg["lams"]))}  # "the strongest penalty"
    most = max(betas, key=betas.get)
    assert most[2] == "conv_penalty"
    _in_doc(f"The learned beta rises from 0.5 to {min(betas.values()):.2f}-{max(betas.values()):.2f}. Among the "
            f"filter penalties and parametrizations it is highest under the strongest penalty (lambda = 10: "
            f"{betas[top['mlp']]:.2f} on the MLP, {betas[top['cnn']]:.2f} on the CNN); the conv-matrix penalty raises "
            f"it most ({betas[most]:.2f})")


def test_the_digits_eq11_prose_and_runs_follow_the_json():
    d, rows, comp = _digits()

    def mean2(model, orth, lam, key):
        return statistics.fmean(rows[(model, a, orth, lam)][key] for a in ("relu", "swish"))

    ortho = (("penalty", 1.0), ("gram_schmidt", None), ("orthogonal", None))
    flat = [mean2("cnn", o, lam, "defect") for o, lam in ortho]
    conv = [mean2("cnn", o, lam, "conv_defect") for o, lam in ortho]
    _in_doc(f"Its rows with a defect of {_e(min(flat))} to {_e(max(flat))} have")
    none = mean2("cnn", "none", None, "conv_defect")
    _in_doc(f"stays at {_e(min(conv), 1)} to {_e(max(conv), 1)} (none: {_e(none, 1)})")
    cp = [comp[("vs none", "cnn", a, "conv_penalty", 1.0)] for a in ("relu", "swish")]
    assert all(c["better"] == 0 for c in cp)
    _in_doc(f"{_pts(cp[0])} points with ReLU and {_pts(cp[1])} with swish, better on 0 of 10 seeds")
    _in_doc(f"leaves the defect at {_e(mean2('cnn', 'conv_penalty', 1.0, 'conv_defect'), 1)}")
    # the filter norms are not in the file: the doc quotes the slow test that reruns them
    assert all("filter_norm" not in run for r in d["rows"] for run in r["runs"])
    source = (ROOT / "tests" / "test_digits_table2.py").read_text()
    norms = {m: re.search(rf'runs\["{m}"\]\["filter_norm"\]\] == \[([\d., ]+)\]', source).group(1).split(", ")
             for m in ("conv_penalty", "none")}
    _in_doc(f"gives mean norms {' / '.join(norms['conv_penalty'])} against {' / '.join(norms['none'])} without the "
            "penalty")
    # the non-overlapping CNN
    patch = {o: mean2("cnn_patch", o, None, "conv_defect") for o in ("gram_schmidt", "orthogonal")}
    _in_doc(f"(conv-matrix defect {_e(patch['gram_schmidt'])} and {_e(patch['orthogonal'])})")

    def pair(orth, lam=None):
        return [comp[("vs none", "cnn_patch", a, orth, lam)] for a in ("relu", "swish")]

    o, p = pair("orthogonal"), pair("penalty", 1.0)
    none = {100 * rows[("cnn_patch", a, "none", None)]["mean"] for a in ("relu", "swish")}
    assert len({f"{v:.2f}" for v in none}) == 1
    _in_doc(f"gains {_pts(o[0])} / {_pts(o[1])} points over none ({min(none):.2f}%), and the filter penalty at "
            f"lambda = 1 gains {_pts(p[0])} / {_pts(p[1])} (8 of 10 seeds)")
    assert {c["better"] for c in p} == {8} and all(c["lo"] > 0 for c in o + p)
    g, c = pair("gram_schmidt"), pair("conv_penalty", 1.0)
    assert all(_noise(x) for x in g + c)
    _in_doc(f"Gram-Schmidt ({_pts(g[0], False)} / {_pts(g[1], False)}) and `conv_penalty` ({_pts(c[0], False)} / "
            f"{_pts(c[1], False)};")
    # which rows lack the conv-matrix column, and which were run at lambda = 1 only
    before = {("cnn", a, "penalty", lam) for a in ("relu", "swish") for lam in (0.1, 10.0)}
    assert {k for k, r in rows.items() if k[0] != "mlp" and "conv_defect" not in r} == before
    assert {k[3] for k in rows if k[2] == "conv_penalty" or k[0] == "cnn_patch"} <= {1.0, None}
    # the runs: the first (240) and the three updates, their wall times and the training time the file holds
    cfg = d["config"]
    assert (cfg["model"], cfg["orthogonality"]) == ("mlp,cnn", "none,penalty,gram_schmidt,orthogonal")
    first_runs = cfg["seeds"] * len([k for k in rows if k[0] in ("mlp", "cnn") and k[2] != "conv_penalty"])
    updates = d["updates"]
    sizes = [cfg["seeds"] * (len(u["added"]) + len(u["replaced"])) for u in updates]
    _in_doc(f"The recorded table is the {first_runs} runs of the first two tables ({d['seconds'] / 60:.1f} min wall), "
            f"then {['no', 'one', 'two', 'three'][len(updates)]} `--update` runs")
    _in_doc(f"`conv_penalty` rows ({sizes[0]} runs, {updates[0]['seconds']:.0f} s wall), the `cnn_patch` table "
            f"({sizes[1]} runs, {updates[1]['seconds']:.0f} s) and the CNN's none,")
    _in_doc(f"rerun to add the conv-matrix defect ({sizes[2]} runs, {updates[2]['seconds']:.0f} s)")
    assert {tuple(k) for k in updates[2]["replaced"]} == {("cnn", a, o, lam) for a in ("relu", "swish")
                                                          for o, lam in (("none", None), *ortho)}
    kept = [run for r in d["rows"] for run in r["runs"]]
    assert len(kept) == first_runs + sizes[0] + sizes[1]  # the rerun replaced 80 of the first 240
    _in_doc(f"the {len(kept)} runs it keeps sum to {sum(run['seconds'] for run in kept):.0f} s")
    slow = rows[("cnn", "relu", "penalty", 0.1)]["seconds_per_run"], rows[("cnn", "relu", "penalty", 1.0)][
        "seconds_per_run"]
    _in_doc(f"the CNN's ReLU penalty runs took {slow[0]:.1f} s each at lambda = 0.1 (first run) and {slow[1]:.1f} s "
            "at lambda = 1 (last update)")
    for argv in (["--model", cfg["model"], "--orthogonality", cfg["orthogonality"], *d["argv"]],
                 *(u["argv"] for u in updates)):
        _in_doc("python3 examples/digits_table2.py " + " ".join(a for a in argv if a != "--no-progress"))
    mod = _example("digits_table2")
    full = mod.FULL
    per_model = {m: sum(len(full["lams"].split(",")) if o in ("penalty", "conv_penalty") else 1
                        for o in full["orthogonality"].split(",") if not (m == "mlp" and o == "conv_penalty"))
                 for m in full["model"].split(",")}
    total = full["seeds"] * len(full["activations"].split(",")) * sum(per_model.values())
    _in_doc(f"The full default (`--out` alone) is {total} runs")


def test_the_readme_digits_headline_follows_the_json():
    d = _json("digits_table2")

    def gain(model: str) -> str:
        (c,) = [c for c in d["comparisons"] if c["kind"] == "vs none" and c["model"] == model
                and c["activation"] == "relu" and c["orthogonality"] == "orthogonal"]
        return f"{100 * c['mean']:+.2f} [{100 * c['lo']:+.2f}, {100 * c['hi']:+.2f}]"

    _in_doc(f"orthonormal filters gain {gain('cnn')} points on the 3x3 CNN", README)
    _in_doc(f"and {gain('cnn_patch')} on a CNN of non-overlapping filters", README)


# ------------------------------------------------------------------------------------------ the RHM (issue 38)
#: the configurations (m, L) whose alignment and Thm 2 conditions the doc shows
RHM_DETAIL = ((8, 2), (4, 3))


def _rhm_configs(d: dict) -> dict:
    return {(c["m"], c["L"]): c for c in d["configs"]}


def test_the_rhm_tables_are_the_recorded_ones():
    """Every RHM table of the doc is the script's rendering of rhm_sweep.json."""
    mod, d = _example("rhm_sample_complexity"), _json("rhm_sweep")
    for text in (mod.pstar_table(d), mod.fit_text(d), mod.sensitivity_table(d), mod.controls_table(d),
                 mod.train_error_text(d), *(mod.detail_table(d, m, L) for m, L in RHM_DETAIL)):
        _in_doc(text)


def test_the_rhm_prose_follows_the_json():
    """The sentences of the RHM section are the script's rendering of the record, and what the prose says of them
    holds: the exponent's interval excludes 1 over all configurations and at L = 2, contains it at L = 3; the
    shallow student's P* is above the CNN's everywhere; the settings quoted are the recorded ones."""
    mod, d = _example("rhm_sample_complexity"), _json("rhm_sweep")
    for text in (mod.ratio_text(d), mod.shallow_text(d), mod.sensitivity_text(d), mod.halving_table(d)):
        _in_doc(text)
    for text in (mod.conditions_text(d), mod.controls_text(d)):  # (each opens a bullet, capitalised there)
        _in_doc(text[1:])
    fit = d["fit"]
    assert fit["all"]["low"] > 1 and fit["L2"]["low"] > 1 and fit["L3"]["low"] <= 1 <= fit["L3"]["high"]
    for c in d["configs"]:
        sh, cnn = c["sweeps"]["shallow"]["p_star"], c["sweeps"]["cnn"]["p_star"]
        assert cnn["value"] is not None and (sh["value"] is None or sh["value"] > 2 * cnn["value"])
        if c["L"] == 2:  # "at L = 2 it lies above the largest P of the grid"
            assert sh["value"] is None and min(c["sweeps"]["shallow"]["median_test_error"]) > 0.1
    cfg = d["config"]
    assert (cfg["configs"], cfg["steps"], cfg["width"], cfg["readout"], cfg["hidden"]) == (
        "8x2,10x2,12x2,3x3,4x3,5x3", 2000, 64, 64, 1024)
    _in_doc(f"{cfg['width']} ReLU nodes per region and a readout group of {cfg['readout']} nodes at the root")
    _in_doc(f"Adam on the cross-entropy, {cfg['steps']} steps, minibatch {cfg['batch']} (full batch below it), "
            f"float32, lr {cfg['lr']:g} for the CNN and {cfg['shallow_lr']:g} for the shallow student")
    _in_doc(f"The CNN has {cfg['seeds']} seeds per P and the shallow student {cfg['shallow_seeds']}")
    cov = {kind: {c["sweeps"][kind]["p_star"]["coverage"] for c in d["configs"]} for kind in ("cnn", "shallow")}
    assert cov == {"cnn": {0.9375}, "shallow": {0.75}}
    _in_doc("exact coverage 93.75% for the CNN's 5 seeds, 75% for the shallow student's 3")
    _in_doc(f"the recorded run took {d['wall_s']:.0f} s wall and {d['cpu_s']:.0f} s of CPU on one thread, load "
            f"average {_load(d)}")
    assert all(r["measures"] for c in d["configs"] for sw in c["sweeps"].values() for r in sw["runs"])


def test_the_rhm_p_star_and_exponent_follow_the_runs():
    """P* of every sweep is SweepResult.p_star of its own runs; the grids stay inside P_max minus the test set; the
    slope is the least-squares fit of log P* on log n_c m^L over the defined P*, inside its bootstrap interval."""
    from smaso.sweep import SweepResult

    d = _json("rhm_sweep")
    for c in d["configs"]:
        assert c["scale"] == c["n_c"] * c["m"] ** c["L"] and c["P_max"] == c["n_c"] * c["m"] ** (2 ** c["L"] - 1)
        for kind, sw in c["sweeps"].items():
            assert max(sw["sizes"]) + c["num_test"] <= c["P_max"], (c["m"], c["L"], kind)
            ps, rec = SweepResult.from_dict(sw).p_star(d["threshold"]), sw["p_star"]
            for key in ("value", "low", "high"):
                got, want = getattr(ps, key), rec[key]
                assert (want is None and math.isnan(got)) or abs(got - want) <= 1e-5 * want, (c["m"], c["L"], kind)
    pts = [(math.log(c["scale"]), math.log(c["sweeps"]["cnn"]["p_star"]["value"])) for c in d["configs"]
           if c["sweeps"]["cnn"]["p_star"]["value"] is not None]
    n = len(pts)
    mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    fit = d["fit"]["all"]
    assert fit["configs"] == n and abs(slope - fit["slope"]) < 1e-4
    assert fit["low"] <= fit["slope"] <= fit["high"]


def test_the_readme_rhm_headline_follows_the_json():
    """The README's RHM bullet: the exponent with its interval, the ratio range, the shallow student's crossings,
    the sensitivity's range and the controls, each from rhm_sweep.json."""
    mod, d = _example("rhm_sample_complexity"), _json("rhm_sweep")
    fit, cfg = d["fit"]["all"], d["config"]
    _in_doc(f"the CNN's P* grows as (n_c m^L)^{fit['slope']:.2f} [{fit['low']:.2f}, {fit['high']:.2f}] (bootstrap "
            f"over {cfg['seeds']} seeds)", README)
    ratios = [c["sweeps"]["cnn"]["p_star"]["value"] / c["scale"] for c in d["configs"]]
    _in_doc(f"at {min(ratios):.2f}-{max(ratios):.2f} n_c m^L", README)
    crossed = sum(c["sweeps"]["shallow"]["p_star"]["value"] is not None for c in d["configs"])
    _in_doc(f"The shallow network reaches 10% test error on {crossed} of the\n  {len(d['configs'])}", README)
    assert "P_S / P* lies between 0.84 and 1.28" in mod.sensitivity_text(d)
    _in_doc("insensitive to exchanged synonyms at 0.84-1.28 P*", README)
    c = d["controls"]
    twin = [e for kind in ("cnn", "shallow") for e in c["twin"][kind]["median_test_error"]]
    shuffled = c["shuffled"]["cnn"]["median_test_error"]
    _in_doc(f"Controls at ({c['m']}, {c['L']})", README)
    _in_doc(f"test error stays at\n  {min(twin):.3f}-{max(twin):.3f} at every P (its Bayes error "
            f"{c['twin_bayes_error']:.3f}, chance {1 - 1 / c['m']:.3f}); with shuffled labels the CNN's is "
            f"{min(shuffled):.3f}-{max(shuffled):.3f}", README)


@pytest.mark.slow
def test_rhm_sample_complexity_quick_record(tmp_path):
    mod = _example("rhm_sample_complexity")
    out = tmp_path / "r.json"
    mod.main(["--quick", "--json", str(out), "--figures", str(tmp_path / "fig")])
    d = _strict(out)
    assert [(c["m"], c["L"]) for c in d["configs"]] == [(4, 2), (3, 3)]
    assert all(len(c["sweeps"]["cnn"]["seeds"]) == 3 for c in d["configs"])
    assert all("sensitivity_l0" in r["measures"] for c in d["configs"] for r in c["sweeps"]["cnn"]["runs"])
    assert sorted(p.name for p in (tmp_path / "fig").iterdir()) == sorted(d["figures"])
    assert "| 4 | 2 | 64 | 256 | 64 |" in mod.pstar_table(d)
    assert d["controls"]["twin"]["cnn"]["meta"]["make_data"] == "IndependentDraws"
    assert d["controls"]["shuffled"]["cnn"]["training"]["shuffle_labels"] is True
