"""The report's figures (matplotlib, Agg backend, the look of :mod:`attntemp.analysis.style`): a
metric versus the multiplier per length and RoPE method, with each curve's best m and YaRN's
(0.1 ln s + 1)^2 marked, and its paired ratio to m = 1; passkey accuracy over length x multiplier;
needle accuracy over depth x length; and, from :mod:`.attention_figures`, what per-head entropy
matching found and changed and mean entropy by query position. Every estimate carries its 95%
interval where the data keeps the per-window or per-trial values it is made of."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib import colors

from ..analysis import style
from ..evaluate.sweep.table import points
from ..evaluate.tasks import get_task
from ..ops.intervals import wilson
from ..ops.schedules import yarn_multiplier, yarn_sqrt_multiplier
from .attention_figures import plot_entropy_by_position, plot_entropy_shift, plot_tuning_entropy, tune_multipliers

__all__ = [
    "curves",
    "plot_entropy_by_position",
    "plot_entropy_shift",
    "plot_heatmap_grid",
    "plot_metric_vs_multiplier",
    "plot_needle_depths",
    "plot_tuning_entropy",
    "points",
    "tune_multipliers",
]


def curves(rows: list[dict[str, Any]], task: str, metric: str) -> dict[tuple[int, str], list[tuple[float, float]]]:
    """``(m, metric)`` pairs by (length, rope), for the points that have ``metric``."""
    out = {
        k: [(r["multiplier"], r["metrics"][metric]) for r in v if metric in r["metrics"]]
        for k, v in points(rows, task).items()
    }
    return {k: v for k, v in out.items() if v}


def _band(pts: list[dict[str, Any]], task: str, metric: str, base: dict[str, Any] | None = None):
    """``(m, low, high)`` lists: the 95% interval of ``metric`` per point, or (``base`` given) of its
    paired ratio / difference to ``base``; points kept without per-window values are left out."""
    scorer = get_task(task)
    ms, lows, highs = [], [], []
    for r in pts:
        ci = scorer.interval(r["metrics"], metric) if base is None else scorer.paired(r["metrics"], base, metric)
        if ci is not None:
            ms.append(r["multiplier"])
            lows.append(ci.low)
            highs.append(ci.high)
    return ms, lows, highs


def _relative(value: float, base: float, comparison: str) -> float:
    return value / base if comparison == "ratio" else value - base


def _best(pts: list[dict[str, Any]], metric: str, higher: bool) -> dict[str, Any]:
    return (max if higher else min)(pts, key=lambda r: r["metrics"][metric])


def _star(ax, x: float, y: float, colour: str, label: str | None = None) -> None:
    """The best point of a curve: a large star in the curve's colour."""
    ax.plot(x, y, marker="*", ms=13, color=colour, mec="black", mew=0.7, ls="none", label=label, zorder=4)


def _best_label(pts: list[dict[str, Any]], best: dict[str, Any], base, task: str, metric: str, rope: str) -> str:
    """``"yarn best: 4.947 at m = 1.3; vs m = 1: 0.917 [0.898, 0.935]"`` (the paired interval)."""
    vs = None if base is None or best is base else get_task(task).paired(best["metrics"], base["metrics"], metric)
    edge = " (grid edge)" if best is pts[0] or best is pts[-1] else ""
    note = "" if vs is None else f"; vs m = 1: {vs.fixed(3)}"
    return f"{rope} best: {best['metrics'][metric]:.4g} at m = {best['multiplier']:g}{edge}{note}"


def _curve(top, bottom, pts: list[dict[str, Any]], task: str, metric: str, rope: str) -> tuple[list, list]:
    """One RoPE method's curve, band and best point (the star) on ``top``, and on ``bottom`` the
    same relative to m = 1 with the paired band; returns the relative points and band ends."""
    m_info, c = get_task(task).metric(metric), style.rope_color(rope)
    xs, ys = [r["multiplier"] for r in pts], [r["metrics"][metric] for r in pts]
    best = _best(pts, metric, m_info.higher_is_better)
    base = next((r for r in pts if abs(r["multiplier"] - 1) < 1e-9), None)
    top.plot(xs, ys, color=c, marker="o", ms=3, lw=1.4, label=rope)
    ms, lows, highs = _band(pts, task, metric)
    top.fill_between(ms, lows, highs, color=c, alpha=0.18, lw=0)
    _star(top, best["multiplier"], best["metrics"][metric], c, _best_label(pts, best, base, task, metric, rope))
    if base is None:
        return [], []
    rel = [_relative(y, base["metrics"][metric], m_info.comparison) for y in ys]
    bottom.plot(xs, rel, color=c, marker="o", ms=3, lw=1.4)
    ms, lows, highs = _band(pts, task, metric, base["metrics"])
    bottom.fill_between(ms, lows, highs, color=c, alpha=0.18, lw=0)
    _star(bottom, best["multiplier"], rel[pts.index(best)], c)
    return rel, [*lows, *highs]


def _mark_yarn(axes: Sequence[Any], length: int, trained: int | None) -> None:
    """YaRN's own m, (0.1 ln s + 1)^2, and the sqrt variant, in YaRN's colour, on each axes."""
    if not trained or length <= trained:
        return
    s = length / trained
    for ax in axes:
        ax.axvline(
            yarn_multiplier(s),
            color=style.rope_color("yarn"),
            ls="-.",
            lw=1.1,
            label=f"YaRN's m = (0.1 ln s + 1)^2 = {yarn_multiplier(s):.3f}",
        )
        ax.axvline(
            yarn_sqrt_multiplier(s),
            color=style.rope_color("yarn"),
            ls=":",
            lw=1.1,
            label=f"sqrt variant = {yarn_sqrt_multiplier(s):.3f}",
        )


def _focus(ax, rel: list[float], bands: list[float], null: float, higher: bool) -> None:
    """Draw the relative panel around the best points when some m beats m = 1 (``rel``: the
    points): their bands whole, the losing side up to 2.5 times the best gain (curves past it
    leave the axes; the top panel shows them whole)."""
    if not rel:
        return
    gain = (max(rel) - null) if higher else (null - min(rel))
    if gain <= 0:
        return
    if higher:
        lo, hi = max(null - 2.5 * gain, min(rel)), max(rel + bands)
    else:
        lo, hi = min(rel + bands), min(null + 2.5 * gain, max(rel))
    pad = 0.06 * (hi - lo)
    ax.set_ylim(lo - pad, hi + pad)


def plot_metric_vs_multiplier(rows, task, metric, trained: int | None, path: Path) -> Path | None:
    """``metric`` against m per length (one column each) and RoPE (one colour each, the 95% interval
    as a band, the best m starred); below, the same relative to m = 1 on the same windows (paired
    ratio or difference, with its paired band), its axis drawn around the best points."""
    data = {k: [r for r in v if metric in r["metrics"]] for k, v in points(rows, task).items()}
    data = {k: v for k, v in data.items() if v}
    if not data:
        return None
    m_info = get_task(task).metric(metric)
    lengths = sorted({k[0] for k in data})
    fig, axes = plt.subplots(
        2,
        len(lengths),
        figsize=(5.2 * len(lengths), 7.4),
        squeeze=False,
        sharex="col",
        gridspec_kw={"height_ratios": [3, 2]},
        layout="constrained",
    )
    for col, length in enumerate(lengths):
        top, bottom = axes[0][col], axes[1][col]
        rel: list[float] = []
        bands: list[float] = []
        for rope in style.rope_order([k[1] for k in data if k[0] == length]):
            points_, ends = _curve(top, bottom, data[(length, rope)], task, metric, rope)
            rel, bands = rel + points_, bands + ends
        _mark_yarn((top, bottom), length, trained)
        bottom.axhline(m_info.null, **style.NULL)
        _focus(bottom, rel, bands, m_info.null, m_info.higher_is_better)
        _dress(top, bottom, length, trained, task, metric, m_info.comparison)
        style.legend_outside(
            bottom, where="below", bbox_to_anchor=(0.5, -0.28), handles=top.get_legend_handles_labels()[0]
        )
    fig.suptitle(f"{task} {metric} versus the logit multiplier m ({_band_note(data, task, metric)})", fontsize=10)
    return style.save(fig, path)


def _band_note(data: dict[tuple[int, str], list[dict[str, Any]]], task: str, metric: str) -> str:
    """What the bands are: "bands: 95% intervals, bootstrap over windows", or that there are none."""
    scorer = get_task(task)
    ci = next((c for v in data.values() for r in v if (c := scorer.interval(r["metrics"], metric))), None)
    return "no per-window values kept: no intervals" if ci is None else f"bands: {ci.level:.0%} intervals, {ci.method}"


def _dress(top, bottom, length: int, trained: int | None, task: str, metric: str, comparison: str) -> None:
    scale = f" ({length / trained:g}x the trained length)" if trained else ""
    top.set_title(f"L = {length}{scale}", fontsize=9)
    if "ppl" in metric:
        top.set_yscale("log")
    unit = get_task(task).metric(metric).unit
    top.set_ylabel(f"{metric}\n({unit})" if unit else f"{task} {metric}")
    style.plain_ticks(top, "y")
    word = "/" if comparison == "ratio" else "-"
    bottom.set_ylabel(f"{metric} {word} its value at m = 1\n(paired, same windows)", fontsize=8)
    bottom.set_xlabel("logit multiplier m = 1/T")
    style.plain_ticks(bottom, "x")
    style.plain_ticks(bottom, "y")


def _wilson_text(hits: Sequence[float] | None, value: float) -> str:
    """``"85\\n64-95"``: an accuracy in percent over its 95% Wilson interval (the value alone
    without per-trial outcomes)."""
    if not hits or len(hits) < 2:
        return f"{100 * value:.0f}"
    ci = wilson(int(sum(hits)), len(hits))
    return f"{100 * ci.value:.0f}\n{100 * ci.low:.0f}-{100 * ci.high:.0f}"


def _accuracy_text(hits: list[list[Any]]) -> Callable[[int, int, float], str]:
    """A cell's label from its value in percent and its trials ``hits[row][col]``."""
    return lambda i, j, v: _wilson_text(hits[i][j], v / 100)


def _accuracy_panels(path: Path, panels: list[dict[str, Any]], what: str) -> Path:
    """One accuracy heatmap per panel (``title, grid [rows, cols], hits per cell, xticks, yticks,
    xlabel, ylabel``), cells in percent with their Wilson interval, one shared colour bar."""
    width = max(p["grid"].shape[1] for p in panels)
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(len(panels) * (1.6 + 0.62 * width) + 1.2, 1.9 + 0.6 * max(p["grid"].shape[0] for p in panels)),
        squeeze=False,
        layout="constrained",
    )
    norm = colors.Normalize(0, 100)
    for ax, p in zip(axes[0], panels, strict=True):
        grid = 100 * p["grid"]
        size = style.cell_fontsize(*grid.shape) or 5
        im = style.annotated_heatmap(ax, grid, "YlGnBu", norm, _accuracy_text(p["hits"]), size)
        ax.set_xticks(range(len(p["xticks"])), p["xticks"], fontsize=7, rotation=0 if width <= 8 else 90)
        ax.set_yticks(range(len(p["yticks"])), p["yticks"], fontsize=7)
        ax.set(xlabel=p["xlabel"], ylabel=p["ylabel"])
        ax.set_title(p["title"], fontsize=9, color=p.get("color", "black"))
    fig.colorbar(im, ax=list(axes[0]), label=f"{what} (%)", fraction=0.04)
    fig.suptitle(f"{what}: % of trials, and its 95% Wilson interval below where trials were kept", fontsize=9)
    return style.save(fig, path)


def plot_heatmap_grid(rows, task, metric, path: Path) -> Path | None:
    """Per RoPE method: ``metric`` (an accuracy) over length (rows) x multiplier (columns)."""
    data = {k: [r for r in v if metric in r["metrics"]] for k, v in points(rows, task).items()}
    data = {k: v for k, v in data.items() if v}
    panels = []
    for rope in style.rope_order([k[1] for k in data]):
        lengths = sorted({k[0] for k in data if k[1] == rope})
        ms = sorted({r["multiplier"] for k, v in data.items() if k[1] == rope for r in v})
        grid = np.full((len(lengths), len(ms)), np.nan)
        hits: list[list[Any]] = [[None] * len(ms) for _ in lengths]
        for (length, r), pts in data.items():
            for pt in pts if r == rope else ():
                i, j = lengths.index(length), ms.index(pt["multiplier"])
                grid[i, j], hits[i][j] = pt["metrics"][metric], pt["metrics"].get("hits")
        xt, yt = [f"{m:g}" for m in ms], [str(x) for x in lengths]
        panels.append(
            {
                "title": f"rope {rope}",
                "color": style.rope_color(rope),
                "grid": grid,
                "hits": hits,
                "xticks": xt,
                "yticks": yt,
                "xlabel": "m = 1/T",
                "ylabel": "length",
            }
        )
    return _accuracy_panels(path, panels, f"{task} accuracy") if panels else None


def plot_needle_depths(rows, path: Path, multiplier: float = 1.0) -> Path | None:
    """Per RoPE method: needle accuracy over depth (rows) x length (columns) at one multiplier."""
    pts = [r for r in rows if r["task"] == "needle" and abs(r["multiplier"] - multiplier) < 1e-9]
    panels = []
    for rope in style.rope_order([r["rope"] for r in pts]):
        sel = sorted((r for r in pts if r["rope"] == rope), key=lambda r: r["length"])
        grid = np.array([r["metrics"]["acc_by_depth"] for r in sel], dtype=float).T  # [depths, lengths]
        hits = [[_depth_hits(r["metrics"], d) for r in sel] for d in range(grid.shape[0])]
        depths = [f"{d:g}" for d in sel[0]["metrics"]["depths"]]
        panels.append(
            {
                "title": f"rope {rope}, m = {multiplier:g}",
                "color": style.rope_color(rope),
                "grid": grid,
                "hits": hits,
                "xticks": [str(r["length"]) for r in sel],
                "yticks": depths,
                "xlabel": "length",
                "ylabel": "needle depth (0 = start)",
            }
        )
    return _accuracy_panels(path, panels, "needle accuracy") if panels else None


def _depth_hits(metrics: dict[str, Any], depth: int) -> list[float] | None:
    """The trials of one depth: ``hits`` holds every depth's trials in order, equally many each."""
    hits, n = metrics.get("hits"), len(metrics["depths"])
    if not hits or len(hits) % n:
        return None
    k = len(hits) // n
    return hits[depth * k : (depth + 1) * k]
