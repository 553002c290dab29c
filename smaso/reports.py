"""What ``smaso inspect`` reports: a ladder dataset's counts, its sample frequencies against the ladder's exact
statistics, and the Bayes-optimal accuracy; a tent dataset's k, x range and fit.  And what ``smaso demo`` and
``compare`` report beside the comparison: Bayes, the student class's ceilings and the student's held-out
accuracy (:func:`accuracy_report`).  Heavy imports happen inside the functions, so that ``smaso --help`` stays
instant."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from smaso.student.network import LadderStudent
    from teachers.chunked import DataSource
    from teachers.engine import DaskEngine, SerialEngine
    from teachers.ladder import Ladder
    from teachers.sampling import LadderSample
    from teachers.store_reader import ChunkedLadderData
    from teachers.tent import TentSample

__all__ = ["accuracy_report", "bayes_estimate", "inspect_report", "print_report",
           "print_tent_report", "tent_report"]


def inspect_report(source: DataSource, *, bayes_n: int = 2000, engine: SerialEngine | DaskEngine | None = None,
                   progress: bool = False, device: torch.device | str | None = None) -> dict:
    """Counts, exact-vs-empirical statistics and Bayes-optimal accuracy of a dataset of any ladder, streamed
    chunk by chunk (memory does not grow with N; ``engine`` runs one task per chunk; ``device``: where the exact
    posteriors behind the Bayes-optimal accuracy are computed, None for the CPU).

    Every region's marginal and every parent-child edge's joint P(z_parent, z_child) is compared with the
    exact statistics (:func:`teachers.statistics.compare_statistics`: total-variation distance against the
    multinomial bound); the Bayes-optimal accuracy is the exact posterior's on the first ``bayes_n`` rows
    (:func:`inference.posterior.bayes_optimal_accuracy`: sum-product on a tree, a junction tree otherwise)."""
    import torch

    from inference.posterior import MAX_CLIQUE, bayes_optimal_accuracy, treewidth_cost
    from smaso.student.compare import _head
    from teachers.chunked import as_chunks
    from teachers.statistics import compare_statistics, count_events, exact_statistics

    chunks = as_chunks(source)
    lad = chunks.ladder
    counts = count_events(chunks, engine=engine, progress=progress)
    exact = exact_statistics(lad)
    cmp = compare_statistics(exact, counts.statistics())
    for lv in cmp["per_level"]:
        lv["regions"] = lad.num_regions[lv["level"]]
        if lv["level"]:
            lv["edges"] = sum(len(ps) for ps in lad.parents[lv["level"]])
    first = chunks.chunk(0)
    report = {"teacher": "ladder", "n": len(chunks), "start": first.start, "total": first.total, "seed": first.seed,
              "ladder": repr(lad), "mode": lad.mode, "regions_per_level": list(lad.num_regions),
              "edges": sum(len(ps) for lvl in lad.parents[1:] for ps in lvl),
              "label_counts": counts.counts[0][0][: lad.num_classes].tolist(),
              "label_prior_exact": exact.marginals[0][0][: lad.num_classes].tolist(), "statistics": cmp}
    if bayes_n > 0:
        head = _head(chunks, min(bayes_n, len(chunks)))
        cost = None if lad.is_tree() else treewidth_cost(lad)
        if cost is not None and cost.clique_entries > MAX_CLIQUE:
            report["bayes_optimal"] = {"unavailable": f"exact inference needs induced width {cost.width} (largest "
                                                      f"clique {cost.clique_entries} entries > {MAX_CLIQUE})"}
            return report
        try:
            report["bayes_optimal"] = bayes_optimal_accuracy(lad, head.inputs(dtype=torch.float64), head.y,
                                                             device=device).as_dict()
        except NotImplementedError as e:  # a custom emission without a likelihood
            report["bayes_optimal"] = {"unavailable": " ".join(str(e).split())}
    return report


def print_report(report: dict, ladder: Ladder) -> None:
    """Print ``smaso inspect``'s report of a ladder dataset: counts and label frequencies against the exact P(y),
    sampled vs exact statistics, the Bayes-optimal accuracy (or why it is unavailable)."""
    print(ladder.describe())
    n = report["n"]
    print(f"\n{n} examples (rows {report['start']}..{report['start'] + n} of {report['total']}, "
          f"seed {report['seed']}); {sum(report['regions_per_level'])} regions, {report['edges']} parent-child edges")
    print("\nlabel   count      frequency   exact P(y)")
    for c, (k, p) in enumerate(zip(report["label_counts"], report["label_prior_exact"], strict=True)):
        print(f"{c:5d} {k:9d}   {k / max(n, 1):10.5f}   {p:10.5f}")
    st = report["statistics"]
    print("\nsample frequencies vs the ladder's exact event statistics")
    print("(TV = total-variation distance, max over the regions / edges of a level; bound = multinomial bound at "
          f"confidence {st['confidence']:g})")
    print("level  regions   max TV P(z)   bound     edges   max TV P(z_parent, z)   bound")
    for lv in st["per_level"]:
        tj = (f"{lv['edges']:7d}   {lv['max_tv_joint']:10.5f}            {lv['bound_joint']:8.5f}"
              if "max_tv_joint" in lv else "      -")
        print(f"{lv['level']:5d}  {lv['regions']:7d}   {lv['max_tv_marginal']:10.5f}  {lv['bound_marginal']:8.5f}  "
              f"{tj}")
    print(f"all within bounds: {st['within_bound']}   (smallest chi-square p-value over regions: "
          f"{st['min_chi2_pvalue']:.3g})")
    b = report.get("bayes_optimal")
    if b and "expected" in b:
        emp = f", fraction correct {b['empirical']:.4f}" if "empirical" in b else ""
        print(f"\nBayes-optimal accuracy (exact posterior p(y|x) on {b['n']} examples): "
              f"{b['expected']:.4f} +- {b['stderr']:.4f}{emp}\n(an upper bound on any classifier of x; a student "
              "class can be capped lower: demo and compare print its ceiling)")
    elif b:
        print(f"\nBayes-optimal accuracy: {b['unavailable']}")


def _pieces(k: int) -> int | str:
    """2^k, written "2^k" when too long to print."""
    return 2**k if k <= 60 else f"2^{k}"


def tent_report(sample: TentSample) -> dict:
    """k, N, x range, a 10-bin histogram of x on [0, 1] and max |y - tau^k(x)| of a tent sample."""
    import numpy as np

    x = sample.x.reshape(-1).cpu().numpy()
    counts, edges = np.histogram(x, bins=10, range=(0.0, 1.0))
    dev = (sample.y - sample.clean_y).abs().max().item() if len(sample) else 0.0
    return {"teacher": "tent", "k": sample.k, "pieces": _pieces(sample.k), "n": len(sample), "start": sample.start,
            "total": sample.total, "seed": sample.seed, "noise": sample.noise,
            "x_min": float(x.min()), "x_max": float(x.max()),
            "x_histogram": {"edges": edges.tolist(), "counts": counts.tolist()}, "max_abs_y_minus_target": dev}


def print_tent_report(report: dict) -> None:
    """Print ``smaso inspect``'s report of a tent dataset: tau^k, its pieces, label noise, fit of the file."""
    n = report["n"]
    print(f"tent teacher: y = tau^{report['k']}(x) ({report['pieces']} linear pieces), label noise sigma "
          f"{report['noise']:g}")
    print(f"{n} examples (rows {report['start']}..{report['start'] + n} of {report['total']}, seed {report['seed']})")
    print(f"x range: [{report['x_min']:.6f}, {report['x_max']:.6f}]")
    print("\nx bin           count      frequency")
    h = report["x_histogram"]
    for lo, hi, c in zip(h["edges"][:-1], h["edges"][1:], h["counts"], strict=True):
        print(f"[{lo:.1f}, {hi:.1f})  {c:9d}   {c / n:10.5f}")
    print(f"\nmax |y - tau^{report['k']}(x)| = {report['max_abs_y_minus_target']:.6g}"
          + (" (exact labels)" if report["noise"] == 0 else ""))


#: Rows per forward pass of :func:`accuracy_report`.
ACCURACY_BATCH = 2048


def _bayes_text(bayes: dict | None) -> str:
    """The Bayes-optimal accuracy as the report prints it: a mean of the exact posterior's max over sampled rows,
    with its 95% interval (none when every row's posterior is certain), or why it is not computed."""
    if bayes is None:
        return "not computed"
    if "unavailable" in bayes:
        return f"not computed ({bayes['unavailable']})"
    v, se, n = bayes["expected"], bayes.get("stderr"), bayes.get("n")
    if se is None or not se == se or se == 0:  # no spread over the rows (or unknown): the mean is all there is
        return f"{v:.4f}"
    return f"{v:.4f} (Monte Carlo over {n} rows, 95% interval [{v - 1.96 * se:.4f}, {v + 1.96 * se:.4f}])"


def accuracy_report(lad: Ladder, student: LadderStudent, bayes: float | dict | None, seed: int,
                    held_out: int = 10_000, *,
                    ceiling: Any = None) -> dict:
    """Bayes, the student class's ceilings and the trained student's accuracy on fresh (held-out) rows: the
    stream of seed ``seed + 1``, rows never trained on.

    :param bayes: the Bayes-optimal accuracy: a number, ``bayes_optimal_accuracy(...).as_dict()``
        (:func:`inference.posterior.bayes_optimal_accuracy`; its ``"stderr"`` gives the interval),
        ``{"unavailable": why}`` or None.
    :param ceiling: the ladder's :class:`~smaso.student.ceiling.Ceiling` (None: computed here by
        :func:`~smaso.student.ceiling.architecture_ceiling`).  Each ceiling is printed as what it is: a value where
        exact or certified, ``lower <= ceiling <= upper`` where only bounds are proven, a Monte Carlo estimate with
        its interval, or "not computed" with the reason.
    """
    import torch

    from smaso.student.ceiling import architecture_ceiling
    from teachers.sampling import sample_ladder

    ceiling = architecture_ceiling(lad) if ceiling is None else ceiling
    bayes_info = {"expected": float(bayes)} if isinstance(bayes, (int, float)) else bayes
    bayes = None if bayes_info is None else bayes_info.get("expected")
    fresh = sample_ladder(lad, held_out, seed + 1, progress=False)
    w = student.weights[0]
    correct = 0
    with torch.no_grad():  # in batches: one-hot inputs of 10^4 rows of a wide ladder are hundreds of MB
        for lo in range(0, len(fresh), ACCURACY_BATCH):
            batch = slice(lo, lo + ACCURACY_BATCH)
            out = student(fresh.inputs(batch, dtype=w.dtype).to(w.device))
            correct += int((out.argmax(-1).cpu() == fresh.y[batch].long()).sum())
    acc = correct / len(fresh)
    readout = student.readout
    # a proven upper bound of the class (the certified or exact ceiling, else the proven upper bound)
    own = ceiling.for_student(bool(readout)) if not readout or readout >= ceiling.readout_width else None
    if own is not None and bayes is not None:
        own = min(own, bayes)  # both bound this student: Bayes any classifier of x, the ceiling its class
    kind = f"readout {readout}" if readout else "linear top"
    add = ceiling.additive
    why = ceiling.not_computed
    rows = [("Bayes-optimal accuracy of the teacher (exact posterior of x)", _bayes_text(bayes_info)),
            ("class ceiling given the root's children's events: linear top (additive)",
             f"not computed ({why['additive']})" if add is None else f"{add:.4f}"),
            (f"class ceiling given the root's children's events: readout >= {ceiling.readout_width} nodes",
             f"{ceiling.readout:.4f}"),
            ("loss-optimal linear top given the children's events (squared loss)",
             f"not computed ({why['loss_optimal']})" if ceiling.loss_optimal is None
             else f"{ceiling.loss_optimal:.4f}"),
            (f"upper bound for this student ({kind}): min(Bayes, its class ceiling)",
             "n/a" if own is None else f"{own:.4f}"),
            (f"this student ({kind}), accuracy on {held_out} held-out rows", f"{acc:.4f}")]
    linear = "not computed" if add is None else "certified" if add.certified else "bounds only"
    notes = f"linear top {linear}, readout {'exact' if ceiling.readout.exact else 'Monte Carlo'}" + (
        "; on a tree they bound every weight setting" if ceiling.is_bound else "")
    text = "\n".join(["", f"accuracy (class ceilings: {notes})"]
                      + [f"  {name:<76} {v}" for name, v in rows]
                      + [f"  held-out accuracy / Bayes: {acc / bayes:.3f}" if bayes else ""])
    return {"text": text, "bayes": bayes, "bayes_estimate": bayes_info,
            # the certified ceiling, or the proven lower bound where only bounds are known
            "ceiling_linear_top": None if add is None else add.lower,
            "ceiling_linear_top_certified": None if add is None else add.certified,
            "ceiling_linear_top_upper": None if add is None else add.upper,
            "ceiling_linear_top_certificate": {"not_computed": why["additive"]} if add is None else add.to_dict(),
            "ceiling_readout": ceiling.readout.value, "ceiling_readout_estimate": ceiling.readout.to_dict(),
            "readout_width_needed": ceiling.readout_width, "readout_width_counted": ceiling.readout_width_counted,
            "loss_optimal_linear_top": ceiling.loss_optimal, "not_computed": dict(why),
            "ceiling_of_this_student": own, "held_out_accuracy": acc, "held_out_rows": held_out}


def bayes_estimate(sample: LadderSample | ChunkedLadderData, device: torch.device | str | None = None,
                   n: int = 2000) -> dict:
    """The exact posterior's Bayes-optimal accuracy on the first ``n`` rows of the first chunk of ``sample`` (an
    in-memory sample or a chunked dataset): :func:`inference.posterior.bayes_optimal_accuracy` as a dict, or
    ``{"unavailable": why}`` where the exact posterior cannot be had (a junction tree too large, an emission
    without a likelihood), so that a report degrades instead of failing after training."""
    import torch

    from inference.posterior import bayes_optimal_accuracy
    from teachers.chunked import as_chunks

    try:
        x = as_chunks(sample).chunk(0).inputs(slice(0, n), dtype=torch.float64)
        return bayes_optimal_accuracy(sample.ladder, x, device=device).as_dict()
    except (ValueError, NotImplementedError) as e:  # no exact posterior: say why
        return {"unavailable": " ".join(str(e).split())}
