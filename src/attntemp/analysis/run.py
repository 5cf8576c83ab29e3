"""``attntemp measure`` as a run: a model on held-out windows of a text, its attention statistics
saved as ``stats.json``, three PNGs and ``summary.md``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..evaluate.corpus import heldout_windows, load_text
from ..hf import preflight
from ..hf.loading import ModelOptions, load_model
from ..ops.attention_stats import STATS
from ..ops.spec import TemperatureSpec
from ..utils import checks, outputs
from ..utils.options import option
from . import plots
from .measure import AttentionStats, StatOptions, measure


@dataclass(frozen=True, kw_only=True)
class MeasureConfig(ModelOptions):
    """``attntemp measure`` and :func:`run_measure`."""

    out: str = option(help="output folder (stats.json, PNGs, summary.md)")
    length: int = option(help="tokens per sequence")
    text: str = option("stdlib", "held-out text: stdlib, gutenberg:<book>, a file or a folder")
    n_docs: int = option(1, "held-out documents (batch rows)", flag="--docs")
    spec: str | None = option(None, "a TemperatureSpec JSON file (temperatures and RoPE extension)")
    buckets: int = option(16, "query-position buckets")
    sink_tokens: int = option(4, "the first keys counted as the attention sink")
    recent_tokens: int = option(64, "the last keys counted as recent")
    overwrite: bool = option(False, "replace the results already in --out")

    def __post_init__(self) -> None:
        for name in ("length", "n_docs", "buckets", "sink_tokens", "recent_tokens"):
            checks.positive_int(name, getattr(self, name))
        for name in ("buckets", "sink_tokens", "recent_tokens"):
            checks.at_most(name, getattr(self, name), self.length, f"length={self.length} tokens has no more")


RESULTS = ("stats.json", "summary.md", "entropy_heatmap.png", "entropy_by_position.png", "sink_recency.png")


def preflight_measure(cfg: MeasureConfig) -> TemperatureSpec | None:
    """Before the model loads: ``out`` (writable, no results unless ``overwrite``), the spec
    against the model's config, the forward within the memory available; returns the spec."""
    outputs.check_out(cfg.out, RESULTS, cfg.overwrite)
    spec = TemperatureSpec.load(cfg.spec) if cfg.spec else None
    config = preflight.source_config(cfg.model)
    preflight.check_spec("spec", cfg.spec, spec, config)
    preflight.check_forward("length", cfg.length, config, cfg.n_docs, cfg.length)
    return spec


def summary_table(stats: AttentionStats) -> str:
    """Per layer, each statistic's mean over heads and positions, as a markdown table."""
    rows = [
        "| layer | entropy (nats) | H / ln n | max weight | sink mass | recent mass | distance |",
        "|---|---|---|---|---|---|---|",
    ]
    tables = [stats.by_head(n).mean(1) for n in STATS]
    for layer in range(stats.shape[0]):
        rows.append(f"| {layer} | " + " | ".join(f"{t[layer]:.3f}" for t in tables) + " |")
    return "\n".join(rows)


def run_measure(cfg: MeasureConfig) -> dict[str, Any]:
    """Measure, write the outputs under ``cfg.out``; returns a summary (and the markdown table).
    Everything is checked before the model loads (:func:`preflight_measure`)."""
    spec = preflight_measure(cfg)
    docs = load_text(cfg.text, name="text")
    model, tok = load_model(cfg.model, **cfg.load_args())
    ids = heldout_windows(tok, cfg.length, n=cfg.n_docs, docs=docs, n_name="n_docs")
    stats = measure(model, ids, spec, opts=StatOptions(cfg.sink_tokens, cfg.recent_tokens, cfg.buckets))
    stats.meta.update(model=cfg.model, text=cfg.text)
    with outputs.output_folder(cfg.out, replace=RESULTS if cfg.overwrite else ()) as out:  # none left empty
        stats.save(out / "stats.json")
        pngs = plots.save_all(stats, out)
        table = summary_table(stats)
        (out / "summary.md").write_text(f"# attention statistics: {cfg.model}, L={cfg.length}\n\n{table}\n")
    return {
        "out": str(out),
        "plots": [p.name for p in pngs],
        "mean_entropy": float(np.mean(stats.by_head("entropy"))),
        "table": table,
    }
