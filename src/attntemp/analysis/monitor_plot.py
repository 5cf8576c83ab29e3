"""The monitor's figure: attention entropy per layer against the generated token, the reference's
range at the trained length, and the steps each flag was raised at (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from .config import FLAGS
from .monitor import Step
from .reference_profile import Reference
from .style import DPI

FLAG_COLOURS = {"collapse": "tab:red", "diffusion": "tab:blue", "sharpening": "tab:purple", "sink_loss": "tab:orange"}


def _xs(steps: Sequence[Step]) -> np.ndarray:
    return np.array([s.index + 1 for s in steps])  # generated token k = step k-1's prediction


def _layer_lines(ax: Any, steps: Sequence[Step], reference: Reference | None, legend: bool) -> None:
    """Entropy per layer (mean over heads and rows), their mean with the central 95% of the rows'
    means when there are several, and the reference's central 95% of single queries."""
    x = _xs(steps)
    ent = np.stack([np.nanmean(s.stats["entropy"], axis=(0, 2)) for s in steps])  # [steps, layers]
    cmap, n = plt.get_cmap("viridis"), ent.shape[1]
    for layer in range(n):
        label = f"layer {layer}" if legend and n <= 8 else None
        colour = cmap(0.85 * layer / max(1, n - 1))  # viridis without its pale yellow end
        ax.plot(x, ent[:, layer], color=colour, lw=1, alpha=0.8, label=label, marker=".", ms=3)
    ax.plot(x, ent.mean(1), color="black", lw=2, label="mean over layers" if legend else None)
    rows = np.stack([np.nanmean(s.stats["entropy"], axis=(1, 2)) for s in steps])  # [steps, rows]
    if rows.shape[1] > 1:  # several sequences: the central 95% of their means over layers
        lo, hi = np.nanquantile(rows, [0.025, 0.975], axis=1)
        ax.fill_between(x, lo, hi, color="black", alpha=0.15, lw=0, label="rows: central 95%" if legend else None)
    if reference is not None:
        lo, hi = reference.band("entropy")
        label = "reference: central 95% of its queries" if legend else None
        ax.axhspan(lo, hi, color="#56b4e9", alpha=0.22, lw=0, label=label)
    ax.set_ylabel("entropy (nats)")
    ax.grid(alpha=0.3)


def _flag_strip(ax: Any, steps: Sequence[Step]) -> None:
    """One row per flag; a marker at each step it was raised, its size the share of rows."""
    x = _xs(steps)
    names = list(FLAGS)
    for i, flag in enumerate(names):
        share = np.array([s.flags[flag].mean() if s.flags else 0.0 for s in steps])  # [steps]
        hit = share > 0
        ax.scatter(x[hit], np.full(hit.sum(), i), s=10 + 50 * share[hit], color=FLAG_COLOURS[flag], marker="s")
    if not any(s.flags and any(v.any() for v in s.flags.values()) for s in steps):
        ax.text(0.5, 0.5, "no flag raised", transform=ax.transAxes, ha="center", va="center", color="0.35", fontsize=8)
    ax.set_yticks(range(len(names)), [n.replace("_", " ") for n in names], fontsize=7)
    ax.set_ylim(-0.7, len(names) - 0.3)
    ax.grid(axis="x", alpha=0.3)


def plot_runs(runs: dict[str, Sequence[Step]], reference: Reference | None, path: str | Path) -> Path:
    """One panel per run of steps: entropy per layer, and under it the flag strip when there is
    a reference; the legend above the panels, off the data."""
    rows = [(title, steps) for title, steps in runs.items() if steps]
    if not rows:
        raise ValueError("runs holds no recorded steps to plot")
    fig = plt.figure(figsize=(8.5, 0.6 + (3.2 if reference is not None else 2.4) * len(rows)), layout="constrained")
    subs = fig.subfigures(len(rows), 1, squeeze=False)[:, 0]
    for i, (sub, (title, steps)) in enumerate(zip(subs, rows, strict=True)):
        if reference is None:
            main = last = sub.subplots(1, 1)
        else:
            main, last = sub.subplots(2, 1, sharex=True, height_ratios=[3, 1.1], gridspec_kw={"hspace": 0.04})
            _flag_strip(last, steps)
            main.tick_params(labelbottom=False)
        _layer_lines(main, steps, reference, legend=i == 0)
        main.set_title(title, fontsize=9)
        last.set_xlabel("generated token")
        last.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.legend(loc="outside upper center", ncol=3, fontsize=7, frameon=False)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return Path(path)


def plot_monitor(steps: Sequence[Step], reference: Reference | None, path: str | Path, title: str = "") -> Path:
    """``monitor.png``: one run of steps."""
    return plot_runs({title or "attention entropy per layer while generating": steps}, reference, path)
