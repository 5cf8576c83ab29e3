"""matplotlib PNGs of attention statistics (Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from .measure import AttentionStats


def heatmap(
    table: np.ndarray, path: str | Path, title: str, cbar: str, cmap: str = "viridis", center: float | None = None
) -> Path:
    """A layer x head heatmap of ``table`` ``[layers, heads]``."""
    fig, ax = plt.subplots(figsize=(1.2 + 0.45 * table.shape[1], 1.0 + 0.25 * table.shape[0]))
    kw: dict[str, Any] = {}
    if center is not None:  # diverging colours around ``center``, the bar spanning the data only
        lo, hi = float(np.nanmin(table)), float(np.nanmax(table))
        eps = 1e-6 * max(1.0, abs(center))
        kw = {"norm": matplotlib.colors.TwoSlopeNorm(center, min(lo, center - eps), max(hi, center + eps))}
    im = ax.imshow(table, aspect="auto", cmap=cmap, origin="lower", **kw)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, label=cbar)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def entropy_heatmap(stats: AttentionStats, path: str | Path) -> Path:
    return heatmap(stats.by_head("entropy"), path, f"attention entropy (nats), L={stats.length}", "nats")


def _centres(stats: AttentionStats) -> np.ndarray:
    e = np.asarray(stats.bucket_edges, dtype=float)
    return (e[:-1] + e[1:]) / 2


def by_position(
    stats: AttentionStats, path: str | Path, name: str = "entropy", trained_length: int | None = None
) -> Path:
    """``name`` versus query position, one line per layer (mean over heads)."""
    x = _centres(stats)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    cmap = plt.get_cmap("viridis")
    n_layers = stats.shape[0]
    for layer in range(n_layers):
        ax.plot(
            x,
            np.nanmean(stats.stats[name][layer], axis=0),
            color=cmap(layer / max(1, n_layers - 1)),
            lw=1.2,
            label=f"layer {layer}" if n_layers <= 12 else None,
        )
    if trained_length:
        ax.axvline(trained_length, color="red", ls="--", lw=1, label="trained length")
    ax.set_xlabel("query position")
    ax.set_ylabel(name.replace("_", " "))
    ax.set_title(f"{name.replace('_', ' ')} by position, L={stats.length}", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def sink_recency(stats: AttentionStats, path: str | Path) -> Path:
    """Mass on the first ``sink_tokens`` and the last ``recent_tokens`` keys, per layer."""
    sink, recent = stats.by_head("sink_mass").mean(1), stats.by_head("recent_mass").mean(1)
    layers = np.arange(len(sink))
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    ax.bar(layers - 0.2, sink, width=0.4, label=f"first {stats.sink_tokens} keys (sink)")
    ax.bar(layers + 0.2, recent, width=0.4, label=f"last {stats.recent_tokens} keys (recent)")
    ax.set_xlabel("layer")
    ax.set_ylabel("attention mass")
    ax.set_ylim(0, 1)
    ax.set_title(f"sink and recency profile, L={stats.length}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def save_all(stats: AttentionStats, out: str | Path) -> list[Path]:
    """The three standard plots of one measurement into ``out``."""
    out = Path(out)
    tl = stats.meta.get("trained_length")
    return [
        entropy_heatmap(stats, out / "entropy_heatmap.png"),
        by_position(stats, out / "entropy_by_position.png", "entropy", tl),
        sink_recency(stats, out / "sink_recency.png"),
    ]
