"""``attntemp report DIR``: markdown and HTML from a sweep database and tuning evidence in DIR
(figures from :mod:`attntemp.report.figures`)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..evaluate.sweep import Store
from ..evaluate.sweep.table import BEST_NOTE, best_table
from ..utils import outputs
from .figures import (
    plot_heatmap_grid,
    plot_metric_vs_multiplier,
    plot_needle_depths,
    plot_tuning_entropy,
)
from .html import markdown_to_html

FIGURES = ("ppl_vs_multiplier.png", "passkey_logp_vs_multiplier.png", "passkey_heatmap.png", "needle_heatmap.png")
# report's own in DIR (and tunes' entropy_shift.png)
REPORT_OUTPUTS = outputs.Outputs(("report.md", "report.html", *FIGURES))


def _store_rows(folder: Path) -> tuple[list[dict[str, Any]], int | None]:
    """The sweep points of ``folder/sweep.db`` and the trained length it recorded."""
    db = folder / "sweep.db"
    if not db.is_file():
        return [], None
    store = Store(db, readonly=True)  # a damaged or foreign file: one ValueError naming it
    try:
        return store.rows(), store.trained_length()
    finally:
        store.close()


def _evidence_trained_length(folder: Path) -> int | None:
    """L0 as the first tuning run under ``folder`` recorded it."""
    for ev in sorted(folder.rglob("evidence.json")):
        return json.loads(ev.read_text()).get("trained_length")
    return None


@dataclass(frozen=True)
class ReportResult:
    """The report: its markdown (``markdown()``, as ``report.md`` holds it) and where it was written."""

    text: str
    md_path: Path
    page: Path

    def markdown(self) -> str:
        return self.text

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document: the page and the markdown."""
        return {"report": str(self.page), "markdown": self.text}


def build_report(folder: str | Path, progress: bool = False, overwrite: bool = False) -> ReportResult:
    """Write ``report.md`` and ``report.html`` (with PNGs) in ``folder``; returns the report.
    ``progress``: a bar over the figures (the slow part of a large sweep's report). An earlier
    report's files are replaced only with ``overwrite`` (the rule of :mod:`attntemp.utils.outputs`)."""
    folder = Path(folder)
    if not folder.is_dir():
        what = "is a file; expected a folder" if folder.exists() else "does not exist"
        raise FileNotFoundError(f"report folder {str(folder)!r} {what}")
    with outputs.claimed(folder, "report", name="dir"):  # one writer at a time, from the first check
        return _build(folder, progress, overwrite)


def _build(folder: Path, progress: bool, overwrite: bool) -> ReportResult:
    outputs.check_out(folder, REPORT_OUTPUTS, overwrite, name="dir")  # report.md, report.html and PNGs go here
    rows, recorded = _store_rows(folder)  # a damaged sweep.db refused before anything is removed
    if overwrite:
        outputs.clear(folder, REPORT_OUTPUTS)  # an earlier report's figures this one may not draw again
    trained = _evidence_trained_length(folder) or recorded
    parts: list[str] = [f"# attntemp report: {folder.name}", ""]
    if rows:
        parts += [
            f"Sweep: {len(rows)} points from `sweep.db`; trained length {trained}.",
            "",
            best_table(rows, trained),
            "",
            BEST_NOTE,
            "",
        ]
    drawn: list[Callable[[], Path | None]] = [
        lambda: plot_metric_vs_multiplier(rows, "perplexity", "tail_ppl", trained, folder / "ppl_vs_multiplier.png"),
        lambda: plot_metric_vs_multiplier(rows, "passkey", "logp", trained, folder / "passkey_logp_vs_multiplier.png"),
        lambda: plot_heatmap_grid(rows, "passkey", "acc", folder / "passkey_heatmap.png"),
        lambda: plot_needle_depths(rows, folder / "needle_heatmap.png"),
    ]
    for ev_path in sorted(folder.rglob("evidence.md")):
        parts += [ev_path.read_text().replace("# tuning evidence", "## tuning evidence"), ""]
        if (ev_path.parent / "entropy.json").is_file():
            drawn.append(
                functools.partial(
                    plot_tuning_entropy, ev_path.parent, ev_path.parent / "entropy_shift.png", ev_path.parent.name
                )
            )
    figs = [draw() for draw in tqdm(drawn, desc="report figures", disable=not progress, leave=False)]
    for fig in (f for f in figs if f is not None):
        parts += [f"![{fig.stem}]({fig.relative_to(folder).as_posix()})", ""]
    if len(parts) <= 2:
        raise ValueError(f"folder {str(folder)!r} holds no sweep.db and no evidence.md to report on")
    md = "\n".join(parts)
    (folder / "report.md").write_text(md)
    (folder / "report.html").write_text(markdown_to_html(md, folder.name))
    return ReportResult(md, folder / "report.md", folder / "report.html")
