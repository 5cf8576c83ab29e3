"""One look for every figure attntemp draws, defined once: a fixed colour per RoPE method, the
reference markers (trained length, m = 1), plain-number ticks, integer ticks for layers and heads,
annotated heatmaps with a visible "no data", a log colour scale centred at m = 1, and legends
placed off the data. Colours: Okabe & Ito's colour-blind-safe set (2008), plus Paul Tol's wine."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib import colors, ticker
from matplotlib.patches import Rectangle

# One colour per RoPE method, in every figure; a method not listed gets a fixed one of OTHER_COLORS.
ROPE_COLORS: dict[str, str] = {
    "none": "#d55e00",  # vermillion
    "linear": "#0072b2",  # blue
    "yarn": "#009e73",  # bluish green
    "dynamic": "#e69f00",  # orange
    "ntk": "#cc79a7",  # reddish purple
    "longrope": "#882255",  # wine
    "llama3": "#56b4e9",  # sky blue
}
OTHER_COLORS = ("#999933", "#44aa99", "#332288", "#aa4499")
TRAINED: dict[str, Any] = {"color": "black", "ls": "--", "lw": 1.0}  # the trained-length marker
NULL: dict[str, Any] = {"color": "0.4", "ls": "-", "lw": 0.8}  # m = 1 / "no change"
MISSING = "#e6e6e6"  # a heatmap cell without data (hatched, "no data")
DPI = 120


def rope_color(rope: str) -> str:
    """The fixed colour of RoPE method ``rope`` (``"yarn"`` -> bluish green)."""
    if rope in ROPE_COLORS:
        return ROPE_COLORS[rope]
    return OTHER_COLORS[sum(map(ord, rope)) % len(OTHER_COLORS)]


def rope_order(ropes: Sequence[str]) -> list[str]:
    """``ropes`` in the palette's order (none, linear, yarn, ...), unknown ones last."""
    known = list(ROPE_COLORS)
    return sorted(set(ropes), key=lambda r: (known.index(r) if r in known else len(known), r))


def mark_trained(ax: Any, trained: int) -> None:
    """The trained length as a labelled black dashed vertical line."""
    ax.axvline(trained, **TRAINED, label=f"trained length L0 = {trained}")


def integer_ticks(ax: Any, x: bool = True, y: bool = True) -> None:
    """Ticks only at whole numbers (layers, heads) on the chosen axes."""
    for on, axis in ((x, ax.xaxis), (y, ax.yaxis)):
        if on:
            axis.set_major_locator(ticker.MaxNLocator(integer=True, min_n_ticks=1))


def plain(value: float, _pos: Any = None) -> str:
    """A tick label as a plain number: ``20``, ``0.5``, ``1.3`` (never ``2x10^1``)."""
    return f"{value:.4g}"


def log_ticks(lo: float, hi: float) -> list[float]:
    """Ticks for a log axis over ``[lo, hi]`` (> 0): 1-2-5 per decade, finer when fewer than three
    would show, round evenly spaced numbers over a narrow range."""
    if not 0 < lo < hi:
        raise ValueError(f"log axis range [{lo}, {hi}] is not allowed; expected 0 < lo < hi")
    decades = range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
    for subs in ((1, 2, 5), (1, 1.5, 2, 3, 5, 7)):
        found = [float(f"{s * 10.0**d:.6g}") for d in decades for s in subs]
        found = [t for t in found if lo <= t <= hi]
        if len(found) >= 3:
            return found
    even = ticker.MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
    return [float(f"{t:.6g}") for t in even if lo <= t <= hi]


def plain_ticks(ax: Any, axis: str = "y") -> None:
    """Plain-number tick labels on ``axis`` ("x" or "y"); on a log axis, ticks from :func:`log_ticks`
    over the current limits (call after the limits are final)."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    if target.get_scale() == "log":
        lo, hi = sorted(ax.get_ylim() if axis == "y" else ax.get_xlim())
        target.set_major_locator(ticker.FixedLocator(log_ticks(lo, hi)))
        target.set_minor_locator(ticker.NullLocator())
    target.set_major_formatter(ticker.FuncFormatter(plain))


def legend_outside(ax: Any, where: str = "right", **kw: Any) -> Any:
    """The axes' legend outside the plotting area (``"right"`` or ``"below"``), off every curve."""
    if where == "right":
        place = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0)}
    else:
        place = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.22)}
    return ax.legend(**{"fontsize": 7, "frameon": False, **place, **kw})


def multiplier_norm(values: np.ndarray) -> colors.LogNorm:
    """A log colour scale centred at m = 1 and symmetric in ln m (m = 2 and m = 0.5 equally
    strong), spanning the data's largest factor away from 1."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    r = float(np.exp(np.abs(np.log(v)).max())) if v.size else 1.0
    r = max(r, 1.05)
    return colors.LogNorm(1 / r, r)


def multiplier_ticks(lo: float, hi: float, data: Sequence[float] = ()) -> list[float]:
    """Colour-bar ticks for multipliers on ``[lo, hi]``: its ends, the ``data``'s smallest and largest
    value, 1, and round values between, none crowding another (closer than 12% in m)."""
    marks = [lo, hi, *([min(data), max(data)] if len(data) else []), 1.0]
    marks = [m for m in marks if lo <= m <= hi]
    nice = [0.1, 0.2, 0.3, 0.5, 0.7, 1.5, 2.0, 3.0, 5.0, 10.0]
    found: list[float] = []
    for t in [*marks, *(t for t in nice if lo < t < hi)]:
        if all(abs(math.log(t / f)) > 0.12 for f in found):
            found.append(t)
    return sorted(found)


def luminance(rgba: Sequence[float]) -> float:
    """Relative luminance of a colour (ITU-R BT.709 weights), to pick black or white text on it."""
    r, g, b = rgba[:3]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def annotated_heatmap(
    ax: Any,
    table: np.ndarray,
    cmap: str,
    norm: colors.Normalize,
    text: Callable[[int, int, float], str] | None = None,
    fontsize: float = 7,
) -> Any:
    """``table`` ``[rows, cols]`` as coloured cells with their value written in each (``text(i, j,
    value)``; None writes nothing), rows upwards; NaN cells light grey, hatched, "no data"."""
    cm = plt.get_cmap(cmap).with_extremes(bad=MISSING)
    im = ax.imshow(np.ma.masked_invalid(table), aspect="auto", origin="lower", cmap=cm, norm=norm)
    for i, j in np.ndindex(*table.shape):
        v = float(table[i, j])
        if not np.isfinite(v):
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", ec="0.6", lw=0))
            ax.text(j, i, "no data", ha="center", va="center", fontsize=fontsize * 0.8, color="0.3")
        elif text is not None:
            ink = "white" if luminance(cm(norm(v))) < 0.45 else "black"
            ax.text(j, i, text(i, j, v), ha="center", va="center", fontsize=fontsize, color=ink)
    integer_ticks(ax)
    return im


def cell_fontsize(rows: int, cols: int) -> float | None:
    """A font size for cell labels, or None when the cells are too many to label legibly."""
    return None if rows * cols > 160 else 7.0 if rows * cols <= 48 else 6.0


def save(fig: Any, path: str | Path) -> Path:
    """Write ``fig`` as a PNG (tight box, :data:`DPI`) and close it."""
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return Path(path)


def multiplier_colorbar(fig: Any, im: Any, ax: Any, values: np.ndarray, label: str = "m = 1/T") -> Any:
    """A colour bar for multipliers drawn with :func:`multiplier_norm`: it spans the data and 1,
    with ticks at the data's smallest and largest m and at 1."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    lo, hi = (min(float(v.min()), 1.0), max(float(v.max()), 1.0)) if v.size else (1.0, 1.0)
    if hi / lo < 1.01:
        lo, hi = lo / 1.01, hi * 1.01
    cb = fig.colorbar(
        im,
        ax=ax,
        boundaries=np.geomspace(lo, hi, 257),
        ticks=multiplier_ticks(lo, hi, [float(v.min()), float(v.max())] if v.size else ()),
        format=ticker.FuncFormatter(lambda v, _pos: f"{v:.3g}"),
        label=f"{label} (log scale, centred at 1)",
    )
    cb.ax.minorticks_off()
    return cb
