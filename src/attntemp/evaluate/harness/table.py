"""Two lm-eval results (the same tasks without and with a spec) as paired rows and one table.

Per task and metric (lm-eval's ``"metric,filter"`` keys): each run's value and lm-eval's own
stderr, attntemp's 95% interval from the per-document outcomes lm-eval logs (``log_samples``),
and the paired comparison on the documents both runs scored:

- a metric lm-eval aggregates by the mean (``exact_match``, ``acc``): the ``proportion`` rule of
  :data:`attntemp.ops.intervals.RULES` (each run's Wilson score interval for 0/1 outcomes, else the
  bootstrap of the mean; the paired difference, with spec minus without);
- lm-eval's ``perplexity`` of ``loglikelihood`` tasks (``exp(-mean log p(answer))``, per answer,
  not per token): the ``perplexity`` rule over documents of one unit each (each run's bootstrap
  interval and the paired bootstrap of the ratio, with spec / without);
- any other aggregate (corpus-level scores, weighted perplexities): the two values and their
  difference, without an interval (the per-document values do not make it by a mean).

Each row's :class:`~attntemp.evaluate.task_base.Metric` carries that rule (:func:`lm_eval_metric`),
as a registered task's metrics do; nothing here decides an interval itself.

RULER's metrics (lm-eval's ``ruler`` tasks, arXiv:2404.06654) are named by a length in tokens
(``"4096"``): each document scores at its own length and logs -1 for the others, so a length's row
pairs the documents made at that length, and a length no document was made at has no row.

Pure Python and numpy: no lm-eval import.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...ops import intervals
from ...ops.intervals import Interval
from ...utils.tables import markdown_table
from ..task_base import Metric

RTOL = 1e-6  # a per-document mean must give lm-eval's own value to count as "mean-aggregated"
NOT_THIS_LENGTH = -1.0  # RULER's score of a document under another length's metric


def is_length_metric(metric: str) -> bool:
    """RULER's per-length metrics are named by the length: ``"4096"``."""
    return metric.isdigit()


def metric_keys(results: dict[str, Any], task: str) -> list[tuple[str, str]]:
    """``(metric, filter)`` of a task's results, in lm-eval's order (stderr keys left out)."""
    keys = []
    for key in results["results"][task]:
        metric, sep, filt = key.partition(",")
        if sep and not metric.endswith("_stderr"):
            keys.append((metric, filt))
    return keys


def per_document(results: dict[str, Any], task: str, metric: str, filt: str) -> dict[int, Any]:
    """``doc_id -> value`` of one metric under one filter, from lm-eval's logged samples (for a
    RULER length, the documents made at that length only)."""
    out = {}
    for s in results.get("samples", {}).get(task, []):
        if s.get("filter", "none") == filt and metric in s:
            if is_length_metric(metric) and s[metric] == NOT_THIS_LENGTH:
                continue
            out[int(s["doc_id"])] = s[metric]
    return out


def _scalars(values: Sequence[Any]) -> np.ndarray | None:
    """The values as floats, or None when any is not a plain number (tuples, strings)."""
    try:
        arr = np.asarray([float(v) for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return arr if np.isfinite(arr).all() else None


@dataclass(frozen=True)
class Aggregation:
    """How lm-eval makes a metric's figure from its per-document values, and the interval rule
    (:data:`attntemp.ops.intervals.RULES`) that figure gets."""

    figure: Callable[[np.ndarray], float]  # lm-eval's figure from the per-document values
    rule: str
    units: Callable[[np.ndarray], np.ndarray]  # the per-document values the rule reads


# "mean" for any metric; the others by the metric's name: lm-eval's perplexity of loglikelihood
# tasks logs log p(answer) per document, its rule reads the NLL (-log p) of one unit per document
AGGREGATIONS = {
    "mean": Aggregation(lambda x: float(x.mean()), "proportion", lambda x: x),
    "perplexity": Aggregation(lambda x: math.exp(-float(x.mean())), "perplexity", lambda x: -x),
}


def kind(metric: str, values: np.ndarray | None, reported: float) -> str:
    """How lm-eval aggregated ``values`` into ``reported``: "mean", the metric's own aggregation
    (:data:`AGGREGATIONS`: "perplexity") or "other"."""
    if values is None or values.size == 0 or not math.isfinite(reported):
        return "other"
    for how in ("mean", metric):
        agg = AGGREGATIONS.get(how)
        if agg is not None and math.isclose(agg.figure(values), reported, rel_tol=RTOL, abs_tol=1e-12):
            return how
    return "other"


def lm_eval_metric(metric: str, how: str, higher_is_better: bool) -> Metric | None:
    """lm-eval's ``metric`` as a :class:`Metric`, its interval rule the one its aggregation ``how``
    gets; None for "other" (no interval)."""
    agg = AGGREGATIONS.get(how)
    return None if agg is None else Metric(metric, higher_is_better, rule=agg.rule)


def _intervals(
    m: Metric | None, how: str, xs: Sequence[np.ndarray | None], seed: int
) -> tuple[Interval | None, Interval | None, Interval | None]:
    """Each run's interval over documents and with spec (second) against without (first), by
    ``m``'s rule; None for "other" or fewer than two documents."""
    xa, xb = xs
    if m is None or xa is None or xb is None or xa.size < 2:
        return None, None, None
    a, b = AGGREGATIONS[how].units(xa).tolist(), AGGREGATIONS[how].units(xb).tolist()
    ones, rule = [1.0] * len(a), m.interval_rule
    return rule.interval(a, ones, seed), rule.interval(b, ones, seed), rule.paired(b, a, ones, seed)


def _stderr(results: dict[str, Any], task: str, key: str) -> float | None:
    metric, _, filt = key.partition(",")
    value = results["results"][task].get(f"{metric}_stderr,{filt}")
    try:
        return float(value) if value is not None and math.isfinite(float(value)) else None
    except (TypeError, ValueError):  # lm-eval writes "N/A" when it has none
        return None


def _side(results: dict[str, Any], task: str, key: str, iv: Interval | None) -> dict[str, Any]:
    return {
        "value": float(results["results"][task][key]),
        "stderr": _stderr(results, task, key),
        "interval": iv.to_dict() if iv else None,
    }


def _outcomes(runs: Sequence[dict[str, Any]], task: str, metric: str, filt: str) -> list[dict[int, Any]]:
    """Each run's ``doc_id -> value``; the runs must have scored the same documents."""
    per = [per_document(r, task, metric, filt) for r in runs]
    if set(per[0]) != set(per[1]):
        raise ValueError(f"task {task!r}: the two runs scored different documents ({len(per[0])} and {len(per[1])})")
    return per


def row(without: dict[str, Any], with_: dict[str, Any], task: str, metric: str, filt: str, seed: int = 0) -> dict:
    """One task and metric: both runs (value, lm-eval stderr, interval) and the paired comparison
    (``with - without``, or ``with / without`` for perplexity) with its verdict."""
    key = f"{metric},{filt}"
    per = _outcomes((without, with_), task, metric, filt)
    docs = sorted(per[0])
    xs = [_scalars([p[d] for d in docs]) for p in per]
    hows = {kind(metric, x, float(r["results"][task][key])) for x, r in zip(xs, (without, with_), strict=True)}
    how = hows.pop() if len(hows) == 1 else "other"
    higher = bool(without.get("higher_is_better", {}).get(task, {}).get(metric, True))
    m = lm_eval_metric(metric, how, higher)
    va, vb = float(without["results"][task][key]), float(with_["results"][task][key])
    ratio = m is not None and m.comparison == "ratio"
    own_a, own_b, iv = _intervals(m, how, xs, seed)
    return {
        "task": task,
        "metric": metric,
        "filter": filt,
        "n": len(docs),
        "higher_is_better": higher,
        "aggregation": how,
        "without_spec": _side(without, task, key, own_a),
        "with_spec": _side(with_, task, key, own_b),
        "comparison": {
            "kind": "ratio" if ratio else "difference",
            "value": (vb / va if va else math.nan) if ratio else vb - va,
            "interval": iv.to_dict() if iv else None,
            "verdict": intervals.verdict(iv, m.null, lower_is_better=not higher) if m and iv else "no interval",
        },
    }


def compare(without: dict[str, Any], with_: dict[str, Any], seed: int = 0) -> list[dict[str, Any]]:
    """One :func:`row` per task (both runs have) and metric, tasks in name order; a RULER length
    no document was made at is left out."""
    tasks = sorted(set(without["results"]) & set(with_["results"]))
    return [
        row(without, with_, t, m, f, seed)
        for t in tasks
        for m, f in metric_keys(without, t)
        if not is_length_metric(m) or per_document(without, t, m, f)
    ]


# ----------------------------------------------------------------------------- markdown
def _cell(side: dict[str, Any], how: str) -> str:
    value, stderr, iv = side["value"], side["stderr"], side["interval"]
    text = f"{value:.4g}" if how == "perplexity" or how == "other" else f"{value:.4f}"
    text += f" ± {stderr:.4g}" if stderr is not None else " ± n/a"
    if iv:
        text += (
            f" [{iv['low']:.4g}, {iv['high']:.4g}]" if how == "perplexity" else f" [{iv['low']:.4f}, {iv['high']:.4f}]"
        )
    return text


def _comparison_cell(c: dict[str, Any]) -> str:
    iv = c["interval"]
    if c["kind"] == "ratio":  # ratios of perplexities span many decades: significant digits
        return f"×{c['value']:.4g}" + (f" [{iv['low']:.4g}, {iv['high']:.4g}]" if iv else "")
    return f"{c['value']:+.4f}" + (f" [{iv['low']:+.4f}, {iv['high']:+.4f}]" if iv else "")


def paired_table(rows: Sequence[dict[str, Any]]) -> str:
    """The side-by-side table: value ± lm-eval's stderr [attntemp's 95% interval] per run, and the
    paired comparison with its interval and verdict."""
    return markdown_table(
        ("task", "metric", "n", "without spec", "with spec", "with vs without (paired)", "verdict"),
        [_table_row(r) for r in rows],
    )


def _table_row(r: dict[str, Any]) -> tuple[Any, ...]:
    metric = r["metric"] + (" tokens" if is_length_metric(r["metric"]) else "")
    metric += "" if r["filter"] == "none" else f" ({r['filter']})"
    arrow = "↑" if r["higher_is_better"] else "↓"
    return (
        r["task"],
        f"{metric} {arrow}",
        r["n"],
        _cell(r["without_spec"], r["aggregation"]),
        _cell(r["with_spec"], r["aggregation"]),
        _comparison_cell(r["comparison"]),
        r["comparison"]["verdict"],
    )


LEGEND = (
    "Each run: value ± lm-eval's stderr [attntemp's 95% interval over documents: Wilson for 0/1 outcomes, "
    "bootstrap otherwise]. Paired: with − without (difference), or with / without (× ratio, perplexity), "
    "on the same documents, paired 95% interval (Newcombe's score interval for 0/1 outcomes, bootstrap "
    "otherwise); the verdict says whether it excludes no change. "
    "↑ higher is better, ↓ lower is better."
)


def page(table: str, meta: dict[str, Any]) -> str:
    """``comparison.md``: a title naming the model and spec, the table and its legend."""
    title = f"# lm-eval: {meta.get('model', 'model')} without and with {meta.get('spec_file', 'the spec')}"
    limit = meta.get("limit")
    sizes = f"limit {limit} documents per task" if limit else "every document of each task"
    return f"{title}\n\n{table}\n\n{LEGEND} lm-eval, {sizes}, max_length {meta.get('max_length')}."
