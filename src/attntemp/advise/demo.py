"""``attntemp demo``: ``attntemp advise`` on one model at a length where retrieval moves (2x the
trained length for the tiny model), told as one story:

1. where the model breaks without a RoPE change, and how its attention moves head by head;
2. what fixes it and what a temperature adds: the candidates raced on distant context and on the
   cost below the trained length, the survivors confirmed on windows the race never saw;
3. retrieval of the recommendation against no change and YaRN's default on the same passkey
   prompts (paired: Newcombe's interval for accuracy, bootstrap for the answer's log-probability);
4. what was shipped: the recommendation baked and reloaded without attntemp, only when it held on
   the evaluation pool (otherwise the report says nothing beat the baseline and bakes nothing).

Writes advise's files (``report.md``, ``report.html``, ``evidence.json``, figures, ``scores.db``)
and ``baked/`` in the output folder.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..evaluate.score import Kept
from ..evaluate.task_base import eval_context, get_task
from ..hf import preflight
from ..hf.loading import load_model, resolve
from ..hf.rope_scaling import rope_for
from ..ops.schedules import yarn_multiplier
from ..ops.spec import TemperatureSpec
from ..ship.bake import save_baked
from ..ship.remote_code import save_schedule_checkpoint
from ..tune.evidence import evaluate_specs
from ..utils import outputs
from ..utils.options import option
from ..utils.tables import markdown_table
from .config import ADVISE_RESULTS, AdviseConfig, AdvisePlan, preflight_advise
from .run import AdviseResult, advise, write_advice

BAKED_DIR = "baked"
DEMO_OUTPUTS = outputs.Outputs(ADVISE_RESULTS, {BAKED_DIR: outputs.CHECKPOINT})  # demo's own; scores.db is resumed


@dataclass(frozen=True, kw_only=True)
class DemoConfig(AdviseConfig):
    """``attntemp demo`` and :func:`run_demo` (per-model defaults in :data:`MODEL_DEFAULTS`)."""

    length: int = option(0, "the length to advise for (default: 2x the trained length, where retrieval moves)")
    out: str = option("attntemp-demo", "output folder (advise's report and files, the baked model)")
    race_windows: int = option(8, "windows of the tuning pool the race may score")
    n_docs: int = option(8, "evaluation-pool documents the survivors are confirmed on", flag="--docs")
    trials: int = option(40, "passkey prompts of the retrieval step")
    bake: bool = option(True, "bake nothing", flag="--no-bake", invert=True)

    def own_outputs(self) -> outputs.Outputs:
        return DEMO_OUTPUTS


# Per-model defaults: SmolLM2 (trained to 8192) at 12288 tokens, a forward of which takes minutes on
# a 2-core CPU, so few windows and prompts.
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "smollm2": {
        "out": "attntemp-demo-smollm2",
        "length": 12288,
        "race_windows": 4,
        "n_docs": 2,
        "trials": 4,
        "batch_size": 2,
        "key_ngram": 4,
        "key_distance": 4096,
        "text": "gutenberg",
        "tune_m": False,
        "check_length": 0,
    },
}


def default_out(model: str) -> str:
    """``attntemp-demo`` for the tiny model, else ``attntemp-demo-<name>``."""
    if model == "tiny":
        return "attntemp-demo"
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in Path(model.rstrip("/")).name)
    return f"attntemp-demo-{name.strip('.') or 'model'}"


def demo_config(model: str = "tiny", **overrides: Any) -> DemoConfig:
    """The demo's config for ``model``: its defaults, then ``overrides`` (None values ignored);
    a length left at 0 becomes twice the trained length read from the model's config."""
    given = {k: v for k, v in overrides.items() if v is not None}
    merged = {"out": default_out(model), **MODEL_DEFAULTS.get(model, {}), **given}
    if not merged.get("length"):
        trained = preflight.source_trained_length(preflight.source_config(model))
        merged["length"] = 2 * trained if trained else 0
    return DemoConfig(model=model, **merged)


def _stage(cfg: DemoConfig, text: str) -> None:
    if cfg.progress:
        print(f"demo: {text}", file=sys.stderr, flush=True)


def retrieval(plan: AdvisePlan, model: Any, result: AdviseResult) -> list[str]:
    """Passkey at the serving length: the recommendation against no change and YaRN's default."""
    cfg, trained, n = plan.cfg, plan.trained, plan.cfg.length
    rec = result.evidence["recommendation"]
    specs = {"no change": TemperatureSpec()}
    if n > trained:
        specs[f"YaRN s = {n / trained:g}, its own m"] = TemperatureSpec(
            multiplier=yarn_multiplier(n / trained), rope=rope_for("yarn", n, trained)
        )
    if rec["name"] is not None and rec["name"] not in specs:
        specs[f"recommended: {rec['name']}"] = TemperatureSpec.from_dict(rec["spec"])
    ctx = eval_context(cfg, trained)
    kept = Kept(result.store, result.model_id) if result.store is not None else None
    res = evaluate_specs(model, plan.tok, n, specs, ("passkey",), ctx, False, kept)
    task, names = get_task("passkey"), list(specs)
    lines = [
        f"## Retrieval at {n} tokens",
        "",
        f"{cfg.trials} passkey prompts (the YaRN paper's, greedy), the same for every spec. Accuracy with its Wilson "
        "95% interval; against no change, paired on the same prompts (Newcombe's interval for accuracy, bootstrap "
        "for the answer's log-probability).",
        "",
    ]
    rows = []
    for name in names:
        r, base = res[name]["passkey"], res[names[0]]["passkey"]
        vs = ("-", "-") if name == names[0] else (task.compare(r, base, "acc"), task.compare(r, base, "logp"))
        rows.append((name, task.describe(r, "acc", 2), task.describe(r, "logp", 3), *vs))
    head = ("spec", "accuracy", "answer log-prob", "accuracy - no change", "log-prob - no change")
    return [*lines, markdown_table(head, rows), ""]


def ship(cfg: DemoConfig, result: AdviseResult, out: Path) -> list[str]:
    """Bake the recommendation when it held; say why not otherwise."""
    rec = result.evidence["recommendation"]
    head = ["## Shipped", ""]
    if rec["status"] != "recommended":
        return [
            *head,
            f"Nothing baked: {rec['status'] if rec['name'] else 'undecided'} ({rec.get('evidence', '')}).",
            "",
        ]
    if not cfg.bake:
        return [*head, "Nothing baked (--no-bake).", ""]
    spec = TemperatureSpec.from_dict(rec["spec"])
    model, tok = load_model(cfg.model, **cfg.load_args(dtype="float32"))  # a fresh fp32 copy
    save = save_schedule_checkpoint if spec.position_dependent else save_baked
    res = save(model, tok, spec, out / BAKED_DIR, overwrite=True)
    return [
        *head,
        f"The recommendation ({rec['name']}) is in `{res.path}`: a checkpoint that plain transformers loads"
        + (" with trust_remote_code=True (its schedule as remote code)" if spec.position_dependent else "")
        + f". Reloaded without attntemp, its logits differ from the patched model's by at most "
        f"{res.max_abs_diff:.2e} (fp32, {res.tokens} tokens).",
        "",
    ]


@dataclass(frozen=True)
class DemoResult:
    """What the demo found: advise's result and the sections after it (retrieval, the bake, the
    time), as ``report.md`` holds them (``markdown()``); ``report.html`` in ``out``."""

    advice: AdviseResult
    extra: str
    page: Path

    def markdown(self) -> str:
        return self.advice.markdown() + self.extra

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document: the page and the report's markdown."""
        return {"report": str(self.page.resolve()), "markdown": self.markdown()}


def run_demo(cfg: DemoConfig) -> DemoResult:
    """Advise, retrieval, bake; returns the result (``report.html`` and ``report.md`` written in
    ``out``). A failed run leaves no empty ``out``."""
    t0 = time.perf_counter()
    resolve(cfg.model)  # a bad --model is one line, before any progress is printed
    plan = preflight_advise(cfg)
    _stage(cfg, f"loading {cfg.model}")
    model, _ = load_model(cfg.model, **cfg.load_args())
    with outputs.output_folder(cfg.out, replace=DEMO_OUTPUTS if cfg.overwrite else ()) as out:
        _stage(cfg, f"advising for {cfg.length} tokens (trained to {plan.trained})")
        result = advise(plan, model, out)
        _stage(cfg, f"retrieval at {cfg.length} tokens: {cfg.trials} passkey prompts")
        extra = ["", *retrieval(plan, model, result), *ship(cfg, result, out)]
        extra.append(f"Total time: {time.perf_counter() - t0:.0f} s ({torch.get_num_threads()} CPU threads).")
        text = "\n".join(extra) + "\n"
        write_advice(result, out, text)
    return DemoResult(result, text, out / "report.html")
