"""The report's figures of attention itself (the look of :mod:`attntemp.analysis.style`): what
per-head entropy matching found and what it changed, and mean entropy by query position with its
interval over documents."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib import colors
from matplotlib.lines import Line2D

from ..analysis import style
from ..analysis.measure import AttentionStats
from ..ops.intervals import Interval, mean_interval
from ..ops.spec import TemperatureSpec


def tune_multipliers(folder: Path, shape: tuple[int, int], layer_types: list[str] | None = None) -> np.ndarray | None:
    """The ``[layers, heads]`` multipliers of the spec a tuning run saved (``spec.json``), if any
    (``layer_types``: the model's, for a spec that tempers some layer types only)."""
    path = folder / "spec.json"
    if not path.is_file():
        return None
    return TemperatureSpec.load(path).heads_table(shape[0], shape[1], layer_types).numpy()  # [L, H]


def plot_entropy_shift(info: dict, path: Path, title: str, multipliers: np.ndarray | None = None) -> Path:
    """Per (layer, head) of an entropy matching (``entropy.json``): the statistic minus its target
    before tuning, the multipliers found (``[layers, heads]``, when given), and the change they
    cause (after minus before); the title says how close "after" lands on the target."""
    ref, before, after = (np.asarray(info[k], dtype=float) for k in ("reference", "before", "after"))
    what = info.get("target", "entropy")
    unit = " (nats)" if "entropy" in what else ""
    gap, change = before - ref, after - before
    span = max(float(np.nanmax(np.abs(gap))), float(np.nanmax(np.abs(change))), 1e-6)
    diverging = colors.Normalize(-span, span)
    panels: list[tuple[str, np.ndarray]] = [(f"before tuning: {what} minus its target{unit}", gap)]
    if multipliers is not None:
        panels.append(("multipliers m found", multipliers))
    panels.append((f"change tuning causes: after minus before{unit}", change))
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(len(panels) * (1.8 + 0.5 * ref.shape[1]), 2.2 + min(0.5, 7.0 / ref.shape[0]) * ref.shape[0]),
        squeeze=False,
        layout="constrained",
    )
    size = style.cell_fontsize(*ref.shape)
    for ax, (name, table) in zip(axes[0], panels, strict=True):
        is_m = table is multipliers
        norm = style.multiplier_norm(table) if is_m else diverging
        fmt = "{:.2f}" if is_m else "{:+.2f}"
        text = None if size is None else (lambda i, j, v, f=fmt: f.format(v))
        im = style.annotated_heatmap(ax, table, "RdBu_r" if is_m else "coolwarm", norm, text, size or 7)
        ax.set_title(name, fontsize=8)
        ax.set(xlabel="head", ylabel="layer")
        if is_m:
            style.multiplier_colorbar(fig, im, ax, table, "m")
        else:
            fig.colorbar(im, ax=ax, format=style.plain, fraction=0.05)
    miss = float(np.nanmax(np.abs(after - ref)))
    fig.suptitle(
        f"{title}: means over the tuning windows (no per-window values kept: no interval)\n"
        f"after tuning every head's {what} is within {miss:.1e}{' nats' if unit else ''} of its target",
        fontsize=9,
    )
    return style.save(fig, path)


def plot_tuning_entropy(folder: Path, path: Path, title: str) -> Path:
    """:func:`plot_entropy_shift` of the tuning run in ``folder`` (its ``entropy.json`` and, for the
    multipliers, its ``spec.json``)."""
    info = json.loads((folder / "entropy.json").read_text())
    return plot_entropy_shift(info, path, title, tune_multipliers(folder, np.shape(info["reference"])))


def _runs_by_rope(runs: Mapping[tuple[int, str], Any]) -> dict[tuple[int, str], list[AttentionStats]]:
    return {k: list(v) if isinstance(v, Sequence) else [v] for k, v in runs.items()}


def _position_curve(docs: list[AttentionStats]) -> tuple[np.ndarray, np.ndarray, list[Interval] | None]:
    """Bucket centres, mean entropy over layers and heads, and its 95% bootstrap interval over the
    documents per bucket (None for one document)."""
    e = np.asarray(docs[0].bucket_edges, dtype=float)
    per_doc = np.stack([np.nanmean(d.stats["entropy"], axis=(0, 1)) for d in docs])  # [docs, buckets]
    cis = None if len(docs) < 2 else [mean_interval(per_doc[:, b].tolist()) for b in range(per_doc.shape[1])]
    return (e[:-1] + e[1:]) / 2, per_doc.mean(0), cis


LENGTH_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))


def _band_words(cis: list[list[Interval]], n_docs: int) -> str:
    if n_docs < 2 or not any(cis):
        return "one document: no interval"
    half = max(c.half_width for run in cis for c in run)
    return f"bands: 95% interval over {n_docs} documents, half-width up to {half:.2g} nats"


def _length_key(lengths: list[int], trained: int) -> list[Line2D]:
    """Legend entries: one line style and marker per length, and the trained-length marker."""
    keys = [
        Line2D([], [], color="0.3", ls=ls, marker=mk, ms=3.5, label=f"L = {n}")
        for n, (ls, mk) in zip(lengths, itertools.cycle(LENGTH_STYLES))
    ]
    return [*keys, Line2D([], [], **style.TRAINED, label=f"trained length L0 = {trained}")]


def plot_entropy_by_position(runs: Mapping[tuple[int, str], Any], trained: int, path: Path) -> Path:
    """Mean entropy over layers and heads versus query position: ``runs`` maps (length, rope) to
    one :class:`AttentionStats` per document; colour is the RoPE method, line style the length, the
    band the 95% bootstrap interval over documents."""
    runs = _runs_by_rope(runs)
    lengths = sorted({k[0] for k in runs})
    fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
    bands = []
    for (length, rope), docs in sorted(runs.items()):
        ls, marker = LENGTH_STYLES[lengths.index(length) % len(LENGTH_STYLES)]
        x, y, cis = _position_curve(docs)
        c = style.rope_color(rope)
        ax.plot(x, y, color=c, ls=ls, marker=marker, ms=3.5, lw=1.3)
        if cis:
            ax.fill_between(x, [c.low for c in cis], [c.high for c in cis], color=c, alpha=0.2, lw=0)
            bands.append(cis)
    style.mark_trained(ax, trained)
    ax.set_xscale("log")
    ax.set(xlabel="query position (log scale)", ylabel="mean attention entropy (nats)")
    style.plain_ticks(ax, "x")
    words = _band_words(bands, min(len(d) for d in runs.values()))
    ax.set_title(f"attention entropy by query position, mean over layers and heads\n({words})", fontsize=9)
    handles = [
        Line2D([], [], color=style.rope_color(r), lw=2, label=f"rope {r}")
        for r in style.rope_order([k[1] for k in runs])
    ]
    handles += _length_key(lengths, trained)
    ax.legend(handles=handles, fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return style.save(fig, path)
