"""``attntemp report DIR``: markdown and HTML from a sweep database and tuning evidence in DIR.

Plots: the tail perplexity (or any metric) versus the multiplier per length and RoPE method, with
YaRN's (0.1 ln s + 1)^2 and the sqrt variant marked; passkey accuracy over length x multiplier;
needle accuracy over depth x length; the per-head entropy shift before and after tuning.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from .schedules import yarn_multiplier, yarn_sqrt_multiplier
from .sweep import Store

METRIC = {"perplexity": ("tail_ppl", False), "passkey": ("acc", True), "needle": ("acc", True)}


def load_rows(folder: Path) -> list[dict[str, Any]]:
    db = folder / "sweep.db"
    if not db.is_file():
        return []
    store = Store(db)
    try:
        return store.rows()
    finally:
        store.close()


def curves(rows, task: str, metric: str) -> dict[tuple[int, str], list[tuple[float, float]]]:
    out: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        if r["task"] == task and metric in r["metrics"]:
            out[(r["length"], r["rope"])].append((r["multiplier"], r["metrics"][metric]))
    return {k: sorted(v) for k, v in out.items()}


def plot_metric_vs_multiplier(rows, task, metric, trained: int | None, path: Path) -> Path | None:
    data = curves(rows, task, metric)
    if not data:
        return None
    lengths = sorted({k[0] for k in data})
    fig, axes = plt.subplots(1, len(lengths), figsize=(4.2 * len(lengths), 3.6), squeeze=False)
    for ax, length in zip(axes[0], lengths, strict=True):
        for (ln, rope), pts in sorted(data.items()):
            if ln == length:
                ax.plot(*zip(*pts, strict=True), marker="o", ms=3, label=rope)
        if trained and length > trained:
            s = length / trained
            ax.axvline(yarn_multiplier(s), color="k", ls="--", lw=0.8, label="(0.1 ln s + 1)^2")
            ax.axvline(yarn_sqrt_multiplier(s), color="grey", ls=":", lw=0.8, label="sqrt variant")
        ax.set_title(f"L = {length}", fontsize=9)
        if "ppl" in metric:
            ax.set_yscale("log")
        ax.set_xlabel("logit multiplier m = 1/T")
        ax.set_ylabel(f"{task} {metric}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _panels(path: Path, panels: list[tuple[str, np.ndarray, list[str], list[str], str, str]],
            vmax: float | None) -> Path:
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
        panels.append((f"{task} {metric}, rope {rope}", grid, [f"{m:g}" for m in ms], [str(x) for x in lengths],
                       "m = 1/T", "length"))
    return _panels(path, panels, 1 if metric == "acc" else None) if panels else None


def plot_needle_depths(rows, path: Path, multiplier: float = 1.0) -> Path | None:
    """Per RoPE method: needle accuracy over depth (rows) x length (columns) at one multiplier."""
    pts = [r for r in rows if r["task"] == "needle" and abs(r["multiplier"] - multiplier) < 1e-9]
    panels = []
    for rope in sorted({r["rope"] for r in pts}):
        sel = sorted((r for r in pts if r["rope"] == rope), key=lambda r: r["length"])
        grid = np.array([r["metrics"]["acc_by_depth"] for r in sel]).T  # [depths, lengths]
        depths = [f"{d:g}" for d in sel[0]["metrics"]["depths"]]
        panels.append((f"needle accuracy, rope {rope}, m = {multiplier:g}", grid, [str(r["length"]) for r in sel],
                       depths, "length", "needle depth"))
    return _panels(path, panels, 1) if panels else None


def plot_entropy_shift(info: dict, path: Path, title: str) -> Path:
    ref = np.asarray(info["reference"])
    panels = [("before tuning", np.asarray(info["before"]) - ref), ("after tuning", np.asarray(info["after"]) - ref)]
    span = max(float(np.abs(p).max()) for _, p in panels) or 1.0
    fig, axes = plt.subplots(1, 2, figsize=(8, 0.8 + 0.35 * ref.shape[0] + 1.5))
    for ax, (name, table) in zip(axes, panels, strict=True):
        im = ax.imshow(table, aspect="auto", origin="lower", cmap="coolwarm", vmin=-span, vmax=span)
        ax.set_title(f"{name}: entropy - trained-length entropy", fontsize=8)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
    fig.colorbar(im, ax=axes, label="nats")
    fig.suptitle(title, fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def best_table(rows, trained: int | None) -> str:
    """Per task metric, length and RoPE: the value at m = 1, the best m and its value."""
    lines = ["| task | metric | length | rope | at m = 1 | best m | best value | YaRN m |",
             "|---|---|---|---|---|---|---|---|"]
    for task, (metric, higher) in METRIC.items():
        for (length, rope), pts in sorted(curves(rows, task, metric).items()):
            at1 = next((v for m, v in pts if abs(m - 1) < 1e-9), float("nan"))
            m_best, v_best = (max if higher else min)(pts, key=lambda p: p[1])
            ym = f"{yarn_multiplier(length / trained):.3f}" if trained and length > trained else "-"
            lines.append(f"| {task} | {metric} | {length} | {rope} | {at1:.4g} | {m_best:g} | {v_best:.4g} | {ym} |")
    return "\n".join(lines)


def _trained_length(folder: Path, rows) -> int | None:
    for ev in sorted(folder.rglob("evidence.json")):
        return json.loads(ev.read_text()).get("trained_length")
    for r in rows:
        if "tail_start" in r["metrics"] and r["length"] > r["metrics"]["tail_start"]:
            return r["metrics"]["tail_start"]
    return None


def build_report(folder: str | Path) -> tuple[Path, Path]:
    """Write ``report.md`` and ``report.html`` (with PNGs) in ``folder``; returns their paths."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"report folder {str(folder)!r} does not exist")
    rows = load_rows(folder)
    trained = _trained_length(folder, rows)
    parts: list[str] = [f"# attntemp report: {folder.name}", ""]
    if rows:
        parts += [f"Sweep: {len(rows)} points from `sweep.db`; trained length {trained}.", "",
                  best_table(rows, trained), ""]
    figs = [plot_metric_vs_multiplier(rows, "perplexity", "tail_ppl", trained, folder / "ppl_vs_multiplier.png"),
            plot_metric_vs_multiplier(rows, "passkey", "logp", trained, folder / "passkey_logp_vs_multiplier.png"),
            plot_heatmap_grid(rows, "passkey", "acc", folder / "passkey_heatmap.png"),
            plot_needle_depths(rows, folder / "needle_heatmap.png")]
    for ev_path in sorted(folder.rglob("evidence.md")):
        parts += [ev_path.read_text().replace("# tuning evidence", "## tuning evidence"), ""]
        ent = ev_path.parent / "entropy.json"
        if ent.is_file():
            png = ev_path.parent / "entropy_shift.png"
            figs.append(plot_entropy_shift(json.loads(ent.read_text()), png, ev_path.parent.name))
    for fig in (f for f in figs if f is not None):
        parts += [f"![{fig.stem}]({fig.relative_to(folder).as_posix()})", ""]
    if len(parts) <= 2:
        raise ValueError(f"folder {str(folder)!r} holds no sweep.db and no evidence.md to report on")
    md = "\n".join(parts)
    (folder / "report.md").write_text(md)
    (folder / "report.html").write_text(markdown_to_html(md, folder.name))
    return folder / "report.md", folder / "report.html"


def markdown_to_html(md: str, title: str) -> str:
    """The small markdown subset the report uses: headings, tables, images, paragraphs."""
    out, table = [], []

    def flush():
        if table:
            cells = [[c.strip() for c in r.strip("|").split("|")] for r in table if not set(r) <= set("|-: ")]
            head, body = cells[0], cells[1:]
            out.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in head) + "</tr>"
                       + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in body)
                       + "</table>")
            table.clear()

    for line in md.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        flush()
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{html.escape(line.lstrip('# '))}</h{level}>")
        elif line.startswith("!["):
            alt, src = line[2:].split("](", 1)
            out.append(f'<p><img src="{html.escape(src.rstrip(")"))}" alt="{html.escape(alt)}"></p>')
        elif line.strip():
            out.append(f"<p>{html.escape(line)}</p>")
    flush()
    style = "body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}" \
            "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}img{max-width:100%}"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(out) + f"\n{_IMAGE_CHECK}\n</body></html>\n")


# After load, a hidden element says how many images decoded: read by the browser test.
_IMAGE_CHECK = (
    "<script>window.addEventListener('load',()=>{const i=[...document.images];"
    "const ok=i.filter(x=>x.complete&&x.naturalWidth>0).length;const d=document.createElement('div');"
    "d.id='attntemp-images';d.hidden=true;d.textContent='images '+ok+'/'+i.length;"
    "document.body.appendChild(d);});</script>"
)
