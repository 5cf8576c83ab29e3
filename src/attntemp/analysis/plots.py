"""matplotlib PNGs of attention statistics (Agg backend: no display needed), in the shared look of
:mod:`attntemp.analysis.style`."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib import colors, ticker

from . import style
from .measure import AttentionStats


def _heatmap_figure(table: np.ndarray, panels: int = 1) -> tuple[plt.Figure, np.ndarray]:
    rows, cols = table.shape
    height = 1.3 + min(0.42, 6.0 / rows) * rows
    return plt.subplots(1, panels, figsize=(panels * (1.9 + 0.55 * cols), height), squeeze=False, layout="constrained")


def heatmap(
    table: np.ndarray, path: str | Path, title: str, cbar: str, cmap: str = "viridis", center: float | None = None
) -> Path:
    """A layer x head heatmap of ``table`` ``[layers, heads]``, each cell labelled with its value
    (when there are few enough cells); ``center``: diverging colours around it."""
    fig, axes = _heatmap_figure(table)
    ax = axes[0][0]
    lo, hi = float(np.nanmin(table)), float(np.nanmax(table))
    if center is not None:  # diverging colours around ``center``, the bar spanning the data only
        eps = 1e-6 * max(1.0, abs(center))
        norm: colors.Normalize = colors.TwoSlopeNorm(center, min(lo, center - eps), max(hi, center + eps))
    else:
        norm = colors.Normalize(lo, hi if hi > lo else lo + 1e-6)
    size = style.cell_fontsize(*table.shape)
    text = None if size is None else (lambda i, j, v: f"{v:.2f}")
    im = style.annotated_heatmap(ax, table, cmap, norm, text, size or 7)
    ax.set(xlabel="head", ylabel="layer")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, label=cbar, format=style.plain)
    return style.save(fig, path)


def multiplier_heatmap(table: np.ndarray, path: str | Path, title: str) -> Path:
    """Per (layer, head) multipliers m ``[layers, heads]`` on a log colour scale centred at m = 1
    (red sharpens, blue softens), each cell labelled, the colour bar marked with the data's range."""
    fig, axes = _heatmap_figure(table)
    ax = axes[0][0]
    size = style.cell_fontsize(*table.shape)
    text = None if size is None else (lambda i, j, v: f"{v:.2f}")
    im = style.annotated_heatmap(ax, table, "RdBu_r", style.multiplier_norm(table), text, size or 7)
    ax.set(xlabel="head", ylabel="layer")
    ax.set_title(f"{title}\nm > 1 sharpens (red), m < 1 softens (blue)", fontsize=9)
    style.multiplier_colorbar(fig, im, ax, table)
    return style.save(fig, path)


def slope_heatmap(multipliers: np.ndarray, slopes: np.ndarray, path: str | Path, title: str) -> Path:
    """A learned length schedule ln m = a + b ln(max(1, n / L0)) per (layer, head) ``[layers,
    heads]``: m up to L0 (exp a, multiplier colours) beside the slope b (diverging at 0, its own
    colour bar), each cell labelled; m past L0 is exp(a) times (n / L0)^b."""
    fig, axes = _heatmap_figure(multipliers, panels=2)
    left, right = axes[0]
    size = style.cell_fontsize(*multipliers.shape)
    text = None if size is None else (lambda i, j, v: f"{v:.2f}")
    im = style.annotated_heatmap(left, multipliers, "RdBu_r", style.multiplier_norm(multipliers), text, size or 7)
    left.set_title("m up to the trained length L0 (exp a)", fontsize=9)
    style.multiplier_colorbar(fig, im, left, multipliers)
    reach = max(float(np.nanmax(np.abs(slopes))), 1e-6)
    im = style.annotated_heatmap(right, slopes, "PuOr_r", colors.Normalize(-reach, reach), text, size or 7)
    right.set_title("slope b: m x (n / L0)^b past L0\nb > 0 sharpens with length, b < 0 softens", fontsize=9)
    fig.colorbar(im, ax=right, label="slope b of ln m per ln(n / L0)", format=style.plain)
    for ax in (left, right):
        ax.set(xlabel="head", ylabel="layer")
    fig.suptitle(title, fontsize=9)
    return style.save(fig, path)


def entropy_heatmap(stats: AttentionStats, path: str | Path) -> Path:
    title = f"attention entropy per head (nats), mean over queries, L={stats.length}"
    return heatmap(stats.by_head("entropy"), path, title, "nats")


def _centres(stats: AttentionStats) -> np.ndarray:
    e = np.asarray(stats.bucket_edges, dtype=float)
    return (e[:-1] + e[1:]) / 2


def _layer_key(ax, fig, n_layers: int, cmap) -> None:
    """Layers by colour: a legend beside the axes for a few, an integer colour bar for many."""
    if n_layers <= 8:
        style.legend_outside(ax)
        return
    sm = plt.cm.ScalarMappable(norm=colors.BoundaryNorm(np.arange(n_layers + 1) - 0.5, cmap.N), cmap=cmap)
    cb = fig.colorbar(sm, ax=ax, label="layer")
    cb.set_ticks([t for t in ticker.MaxNLocator(8, integer=True).tick_values(0, n_layers - 1) if 0 <= t < n_layers])
    if ax.get_legend_handles_labels()[0]:  # the trained-length line, when drawn: else matplotlib warns
        style.legend_outside(ax, where="below")


def by_position(
    stats: AttentionStats, path: str | Path, name: str = "entropy", trained_length: int | None = None
) -> Path:
    """``name`` versus query position, one line per layer (mean over heads; the heads themselves are
    in :func:`heatmap`)."""
    x = _centres(stats)
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    cmap = plt.get_cmap("viridis")
    n_layers = stats.shape[0]
    for layer in range(n_layers):
        c = cmap(layer / max(1, n_layers - 1))
        label = f"layer {layer}" if n_layers <= 8 else None
        ax.plot(x, np.nanmean(stats.stats[name][layer], axis=0), color=c, lw=1.4, label=label)  # [buckets]
    if trained_length and trained_length < stats.length:
        style.mark_trained(ax, trained_length)
    label = name.replace("_", " ")
    unit = " (nats)" if name == "entropy" else ""
    ax.set(xlabel="query position", ylabel=f"{label}{unit}, mean over heads")
    ax.set_title(f"{label} by query position, L={stats.length} ({_docs(stats)})", fontsize=9)
    _layer_key(ax, fig, n_layers, cmap)
    return style.save(fig, path)


def _docs(stats: AttentionStats) -> str:
    n = int(stats.meta.get("batch", 1))
    return f"mean over {n} documents" if n > 1 else "one document"


def sink_recency(stats: AttentionStats, path: str | Path) -> Path:
    """Mass on the first ``sink_tokens`` and the last ``recent_tokens`` keys per layer: bars the
    mean over heads, dots each head."""
    sink, recent = stats.by_head("sink_mass"), stats.by_head("recent_mass")  # [layers, heads]
    layers = np.arange(sink.shape[0])
    fig, ax = plt.subplots(figsize=(min(12.0, 1.5 + 0.7 * len(layers)), 3.6), layout="constrained")
    for off, table, colour, label in (
        (-0.2, sink, "0.35", f"first {stats.sink_tokens} keys (sink)"),
        (0.2, recent, "0.7", f"last {stats.recent_tokens} keys (recent)"),
    ):
        ax.bar(layers + off, table.mean(1), width=0.38, color=colour, label=f"{label}: mean over heads")
        jitter = np.linspace(-0.12, 0.12, table.shape[1])
        ax.scatter((layers + off)[:, None] + jitter, table, s=7, color="black", zorder=3, lw=0)
    ax.scatter([], [], s=7, color="black", label="one head")
    ax.set(xlabel="layer", ylabel="attention mass", ylim=(0, 1))
    style.integer_ticks(ax, y=False)
    ax.set_title(f"sink and recency profile, L={stats.length} ({_docs(stats)})", fontsize=9)
    style.legend_outside(ax)
    return style.save(fig, path)


def save_all(stats: AttentionStats, out: str | Path) -> list[Path]:
    """The three standard plots of one measurement into ``out``."""
    out = Path(out)
    tl = stats.meta.get("trained_length")
    return [
        entropy_heatmap(stats, out / "entropy_heatmap.png"),
        by_position(stats, out / "entropy_by_position.png", "entropy", tl),
        sink_recency(stats, out / "sink_recency.png"),
    ]
