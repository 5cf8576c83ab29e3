"""The sweep's headline table: per task, length and RoPE method, the headline metric at m = 1 and at
the best m on the grid, with their intervals and paired comparison (``attntemp sweep`` prints it,
``attntemp report`` writes it into ``report.md``)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ...ops.schedules import yarn_multiplier
from ...utils.tables import markdown_table
from ..tasks import TASKS

__all__ = ["BEST_NOTE", "best_table", "points"]


def points(rows: list[dict[str, Any]], task: str) -> dict[tuple[int, str], list[dict[str, Any]]]:
    """The sweep points of ``task`` by (length, rope), each group in multiplier order."""
    out: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["task"] == task:
            out[(r["length"], r["rope"])].append(r)
    return {k: sorted(v, key=lambda r: r["multiplier"]) for k, v in out.items()}


BEST_NOTE = (
    "Values with their 95% interval (bootstrap over documents; Wilson for accuracies). The best m is "
    "chosen on these same documents, so its paired comparison with m = 1 favours it: `attntemp tune` "
    "checks a tuned value on other documents and lengths."
)


def best_table(rows: list[dict[str, Any]], trained: int | None) -> str:
    """Per task, length and RoPE: the headline metric at m = 1 and at the best m on the grid, with
    95% intervals, the paired comparison of the two and its verdict, and YaRN's own m."""
    table = [
        _best_row(cls(), cls.metrics[0], name, length, rope, pts, trained)
        for name, cls in TASKS.items()
        for (length, rope), pts in sorted(points(rows, name).items())
    ]
    head = ("task", "metric", "length", "rope", "at m = 1", "best m", "best value", "best vs m = 1 (paired)", "YaRN m")
    rules = sorted({(r["task"], r["metrics"]["rule"]) for r in rows if "rule" in r["metrics"]})
    lines = [markdown_table(head, table), *([""] if rules else []), *(f"- {t} key tokens: {rule}" for t, rule in rules)]
    return "\n".join(lines)


def _best_row(
    task: Any, metric: Any, name: str, length: int, rope: str, pts: list, trained: int | None
) -> tuple[Any, ...]:
    """One row of :func:`best_table`. No best m when every m scores the same (e.g. accuracy 0 at
    every m: the first grid point would be no answer); YaRN's m only on YaRN rows."""
    values = [r["metrics"][metric.name] for r in pts]
    best = (max if metric.higher_is_better else min)(pts, key=lambda r: r["metrics"][metric.name])
    base = next((r for r in pts if abs(r["multiplier"] - 1) < 1e-9), None)
    at1 = "-" if base is None else task.describe(base["metrics"], metric.name)
    ym = f"{yarn_multiplier(length / trained):.3f}" if rope == "yarn" and trained and length > trained else "-"
    if len(values) > 1 and max(values) == min(values):
        return (name, metric.name, length, rope, at1, "none (equal at every m)", "-", "-", ym)
    vs = "-" if base is None or best is base else task.compare(best["metrics"], base["metrics"], metric.name)
    shown = task.describe(best["metrics"], metric.name)
    return (name, metric.name, length, rope, at1, f"{best['multiplier']:g}", shown, vs, ym)
