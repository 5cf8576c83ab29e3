"""The report's figures (matplotlib, Agg backend): a metric versus the multiplier per length and
RoPE method with YaRN's (0.1 ln s + 1)^2 and the sqrt variant marked; passkey accuracy over length
x multiplier; needle accuracy over depth x length; the per-head entropy shift before and after
tuning; mean entropy by query position."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from ..analysis.measure import AttentionStats
from ..evaluate.tasks import get_task
from ..ops.schedules import yarn_multiplier, yarn_sqrt_multiplier


def points(rows: list[dict[str, Any]], task: str) -> dict[tuple[int, str], list[dict[str, Any]]]:
    """The sweep points of ``task`` by (length, rope), each group in multiplier order."""
    out: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["task"] == task:
            out[(r["length"], r["rope"])].append(r)
    return {k: sorted(v, key=lambda r: r["multiplier"]) for k, v in out.items()}


def curves(rows: list[dict[str, Any]], task: str, metric: str) -> dict[tuple[int, str], list[tuple[float, float]]]:
    """``(m, metric)`` pairs by (length, rope), for the points that have ``metric``."""
    out = {
        k: [(r["multiplier"], r["metrics"][metric]) for r in v if metric in r["metrics"]]
        for k, v in points(rows, task).items()
    }
    return {k: v for k, v in out.items() if v}


def _band(rows, task: str, metric: str, length: int, rope: str) -> tuple[list[float], list[float], list[float]]:
    """The 95% interval of ``metric`` per multiplier (points without per-window values left out)."""
    scorer = get_task(task)
    ms, lows, highs = [], [], []
    for r in points(rows, task).get((length, rope), []):
        ci = scorer.interval(r["metrics"], metric)
        if ci is not None:
            ms.append(r["multiplier"])
            lows.append(ci.low)
            highs.append(ci.high)
    return ms, lows, highs


def plot_metric_vs_multiplier(rows, task, metric, trained: int | None, path: Path) -> Path | None:
    """``metric`` against m per length (one panel each) and RoPE (one line each), with its 95%
    interval as a band where the points keep their per-window values."""
    data = curves(rows, task, metric)
    if not data:
        return None
    lengths = sorted({k[0] for k in data})
    fig, axes = plt.subplots(1, len(lengths), figsize=(4.2 * len(lengths), 3.6), squeeze=False)
    for ax, length in zip(axes[0], lengths, strict=True):
        for (ln, rope), pts in sorted(data.items()):
            if ln == length:
                (line,) = ax.plot(*zip(*pts, strict=True), marker="o", ms=3, label=rope)
                ms, lows, highs = _band(rows, task, metric, length, rope)
                if ms:
                    ax.fill_between(ms, lows, highs, color=line.get_color(), alpha=0.2, lw=0)
        if trained and length > trained:
            s = length / trained
            ax.axvline(yarn_multiplier(s), color="k", ls="--", lw=0.8, label="(0.1 ln s + 1)^2")
            ax.axvline(yarn_sqrt_multiplier(s), color="grey", ls=":", lw=0.8, label="sqrt variant")
        ax.set_title(f"L = {length}", fontsize=9)
        if "ppl" in metric:
            ax.set_yscale("log")
        ax.set_xlabel("logit multiplier m = 1/T")
        ax.set_ylabel(f"{task} {metric} (band: 95% interval)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _panels(
    path: Path, panels: list[tuple[str, np.ndarray, list[str], list[str], str, str]], vmax: float | None
) -> Path:
    """One heatmap per panel ``(title, grid [rows, cols], col labels, row labels, xlabel, ylabel)``."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.2), squeeze=False)
    for ax, (title, grid, xt, yt, xlabel, ylabel) in zip(axes[0], panels, strict=True):
        im = ax.imshow(grid, aspect="auto", origin="lower", cmap="magma", vmin=0, vmax=vmax)
        ax.set_xticks(range(len(xt)), xt, fontsize=6, rotation=90)
        ax.set_yticks(range(len(yt)), yt, fontsize=7)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_heatmap_grid(rows, task, metric, path: Path) -> Path | None:
    """Per RoPE method: metric over length (rows) x multiplier (columns)."""
    data = curves(rows, task, metric)
    panels = []
    for rope in sorted({k[1] for k in data}):
        lengths = sorted({k[0] for k in data if k[1] == rope})
        ms = sorted({m for k, v in data.items() if k[1] == rope for m, _ in v})
        grid = np.full((len(lengths), len(ms)), np.nan)
        for (length, r), pts in data.items():
            for m, v in pts if r == rope else ():
                grid[lengths.index(length), ms.index(m)] = v
        panels.append(
            (
                f"{task} {metric}, rope {rope}",
                grid,
                [f"{m:g}" for m in ms],
                [str(x) for x in lengths],
                "m = 1/T",
                "length",
            )
        )
    return _panels(path, panels, 1 if metric == "acc" else None) if panels else None


def plot_needle_depths(rows, path: Path, multiplier: float = 1.0) -> Path | None:
    """Per RoPE method: needle accuracy over depth (rows) x length (columns) at one multiplier."""
    pts = [r for r in rows if r["task"] == "needle" and abs(r["multiplier"] - multiplier) < 1e-9]
    panels = []
    for rope in sorted({r["rope"] for r in pts}):
        sel = sorted((r for r in pts if r["rope"] == rope), key=lambda r: r["length"])
        grid = np.array([r["metrics"]["acc_by_depth"] for r in sel]).T  # [depths, lengths]
        depths = [f"{d:g}" for d in sel[0]["metrics"]["depths"]]
        panels.append(
            (
                f"needle accuracy, rope {rope}, m = {multiplier:g}",
                grid,
                [str(r["length"]) for r in sel],
                depths,
                "length",
                "needle depth",
            )
        )
    return _panels(path, panels, 1) if panels else None


def plot_entropy_shift(info: dict, path: Path, title: str) -> Path:
    """Per (layer, head): the matched statistic minus its target, before and after matching."""
    ref = np.asarray(info["reference"])
    what = info.get("target", "entropy")
    panels = [("before tuning", np.asarray(info["before"]) - ref), ("after tuning", np.asarray(info["after"]) - ref)]
    span = max(float(np.abs(p).max()) for _, p in panels) or 1.0
    fig, axes = plt.subplots(1, 2, figsize=(8, 0.8 + 0.35 * ref.shape[0] + 1.5))
    for ax, (name, table) in zip(axes, panels, strict=True):
        im = ax.imshow(table, aspect="auto", origin="lower", cmap="coolwarm", vmin=-span, vmax=span)
        ax.set_xticks(range(table.shape[1]))
        ax.set_yticks(range(table.shape[0]))
        ax.set_title(f"{name}: {what} - its target", fontsize=8)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
    fig.colorbar(im, ax=axes, label="nats" if "entropy" in what else what)
    fig.suptitle(title, fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_entropy_by_position(runs: dict[str, AttentionStats], trained: int, path: Path) -> Path:
    """Mean entropy over layers and heads versus query position, one line per run."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, st in runs.items():
        e = np.asarray(st.bucket_edges, dtype=float)
        ax.plot((e[:-1] + e[1:]) / 2, np.nanmean(st.stats["entropy"], axis=(0, 1)), marker="o", ms=3, label=name)
    ax.axvline(trained, color="red", ls="--", lw=1, label="trained length")
    ax.set_xscale("log")
    ax.set_xlabel("query position")
    ax.set_ylabel("mean attention entropy (nats)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
