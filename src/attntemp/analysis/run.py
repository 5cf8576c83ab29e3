"""``attntemp measure`` as a run: a model on held-out windows of a text, its attention statistics
saved as ``stats.json``, three PNGs and ``summary.md``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..evaluate.corpus import heldout_windows, load_text
from ..hf import preflight
from ..hf.loading import load_model
from ..ops.attention_stats import STATS
from ..ops.spec import TemperatureSpec
from ..utils import outputs
from ..utils.tables import markdown_table
from . import plots
from .config import MeasureConfig
from .measure import AttentionStats, StatOptions, measure

MEASURE_RESULTS = ("stats.json", "summary.md", "entropy_heatmap.png", "entropy_by_position.png", "sink_recency.png")


@dataclass(frozen=True)
class MeasurePlan:
    """What :func:`run_measure` consumes: the config, its spec loaded and checked, the text's documents."""

    cfg: MeasureConfig
    spec: TemperatureSpec | None
    docs: list


@dataclass(frozen=True)
class MeasureResult:
    """What a measure found: where its files are, their plots, the mean entropy and the table per layer."""

    out: str
    plots: list[str]
    mean_entropy: float
    table: str

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document (the table left out: its numbers are in ``stats.json``)."""
        return {"out": self.out, "plots": self.plots, "mean_entropy": self.mean_entropy}

    def markdown(self) -> str:
        said = f"wrote stats.json, summary.md and {', '.join(self.plots)} to {self.out}"
        return f"{self.table}\n\nmean entropy {self.mean_entropy:.4f} nats; {said}"


def preflight_measure(cfg: MeasureConfig) -> MeasurePlan:
    """Before the model loads: ``out`` (writable, no results unless ``overwrite``), the spec
    against the model's config, the forward within the memory available, the text read; returns
    the plan."""
    outputs.check_out(cfg.out, MEASURE_RESULTS, cfg.overwrite)
    spec = TemperatureSpec.load(cfg.spec) if cfg.spec else None
    config = preflight.source_config(cfg.model)
    preflight.check_spec("spec", cfg.spec, spec, config)
    preflight.check_forward("length", cfg.length, config, cfg.n_docs, cfg.length, head_chunk=0)  # the decoder alone
    return MeasurePlan(cfg, spec, load_text(cfg.text, name="text"))


def summary_table(stats: AttentionStats) -> str:
    """Per layer, each statistic's mean over heads and positions, as a markdown table."""
    head = ("layer", "entropy (nats)", "H / ln n", "max weight", "sink mass", "recent mass", "distance")
    tables = [stats.by_head(n).mean(1) for n in STATS]
    return markdown_table(head, [(layer, *(f"{t[layer]:.3f}" for t in tables)) for layer in range(stats.shape[0])])


def run_measure(cfg: MeasureConfig) -> MeasureResult:
    """Measure, write the outputs under ``cfg.out``; returns the result. ``out`` is locked first
    (a second measure there is refused at once), then everything is checked before the model loads
    (:func:`preflight_measure`)."""
    with outputs.claimed(cfg.out, "measure"):
        return _measure(preflight_measure(cfg))


def _measure(plan: MeasurePlan) -> MeasureResult:
    cfg = plan.cfg
    model, tok = load_model(cfg.model, **cfg.load_args())
    ids = heldout_windows(tok, cfg.length, n=cfg.n_docs, docs=plan.docs, n_name="n_docs")
    stats = measure(model, ids, plan.spec, opts=StatOptions(cfg.sink_tokens, cfg.recent_tokens, cfg.buckets))
    stats.meta.update(model=cfg.model, text=cfg.text)
    with outputs.output_folder(
        cfg.out, replace=MEASURE_RESULTS if cfg.overwrite else (), writer="measure", own=MEASURE_RESULTS
    ) as out:  # none left empty
        stats.save(out / "stats.json")
        pngs = plots.save_all(stats, out)
        table = summary_table(stats)
        (out / "summary.md").write_text(f"# attention statistics: {cfg.model}, L={cfg.length}\n\n{table}\n")
    return MeasureResult(str(out), [p.name for p in pngs], float(np.mean(stats.by_head("entropy"))), table)
