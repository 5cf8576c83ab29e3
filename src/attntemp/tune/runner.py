"""``run_tune``: tune a TemperatureSpec for one model and length, then check it on held-out
documents against the untuned model (and YaRN's own temperature when the RoPE method is yarn).

Writes ``spec.json`` (the TemperatureSpec), ``evidence.json`` and ``evidence.md`` (before/after per
task), and for entropy matching ``entropy.json`` (reference, before and after per head).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..evaluate.corpus import split_windows
from ..evaluate.tasks import TASKS, EvalOptions, eval_context, get_task
from ..hf import introspect
from ..hf.loading import load_model
from ..hf.patch import patch
from ..hf.rope_scaling import SCALINGS, rope_for
from ..ops.schedules import yarn_multiplier
from ..ops.spec import GRANULARITIES, TemperatureSpec
from ..utils import checks, options
from ..utils.options import option
from .entropy import tune_entropy
from .gradient import run_gradient_tuning
from .search import SEARCH_OBJECTIVES, tune_global

TUNE_METHODS = ("search", "gradient")
OBJECTIVES = (*SEARCH_OBJECTIVES, "entropy")


@dataclass(frozen=True, kw_only=True)
class TuneConfig(EvalOptions):
    """``attntemp tune`` and :func:`run_tune`: a TemperatureSpec for one model and length."""

    out: str = option(help="output folder (spec.json, evidence.md, evidence.json)")
    length: int = option(1024, "tokens per window to tune at")
    granularity: str = option("global", f"one m for the model, per layer or per head: {', '.join(GRANULARITIES)}")
    objective: str = option(
        "perplexity",
        f"what to optimise: {', '.join(OBJECTIVES)} (entropy is label-free matching to the trained length)",
    )
    rope: str = option("none", f"RoPE extension: {', '.join(SCALINGS)} (s = length / trained length)")
    method: str = option(
        "search", "search (1-D search, or entropy matching) or gradient (per-head m by next-token loss, weights frozen)"
    )
    tasks: tuple[str, ...] = option(("perplexity", "passkey"), "evidence tasks, comma list", parse=options.names)
    steps: int = option(60, "gradient steps (--method gradient)")

    def __post_init__(self) -> None:
        super().__post_init__()
        checks.positive_int("length", self.length)
        checks.choice("granularity", self.granularity, GRANULARITIES)
        checks.choice("objective", self.objective, OBJECTIVES)
        checks.choice("rope", self.rope, SCALINGS)
        checks.choice("method", self.method, TUNE_METHODS)
        checks.positive_int("steps", self.steps)
        for t in self.tasks:
            checks.choice("task", t, TASKS)
        if self.method == "search" and self.granularity != "global" and self.objective != "entropy":
            raise ValueError(
                f"granularity={self.granularity!r} with method='search' tunes by entropy "
                f"matching; use objective='entropy' (got {self.objective!r}) or method='gradient'"
            )


def candidates(
    rope_method: str, length: int, trained: int, tuned: TemperatureSpec | None
) -> dict[str, TemperatureSpec]:
    """The specs compared in the evidence: untuned (m = 1), YaRN's temperature, the tuned one."""
    rope = rope_for(rope_method, length, trained)
    out = {"m=1": TemperatureSpec(rope=rope)}
    if rope_method == "yarn" and rope and rope["factor"] > 1:
        out["yarn (0.1 ln s + 1)^2"] = TemperatureSpec(multiplier=yarn_multiplier(rope["factor"]), rope=rope)
    if tuned is not None:
        out["tuned"] = tuned
    return out


def evaluate_specs(
    model, tok, length: int, specs: dict[str, TemperatureSpec], tasks, ctx, progress: bool = False
) -> dict:
    """``{spec name: {task: metrics}}`` on the evaluation documents."""
    result: dict[str, dict[str, Any]] = {}
    with tqdm(total=len(specs) * len(tasks), desc=f"evaluate L={length}", disable=not progress, leave=False) as bar:
        for name, spec in specs.items():
            result[name] = {}
            with patch(model, spec):
                for t in tasks:
                    bar.set_postfix(spec=name, task=t)
                    result[name][t] = get_task(t).evaluate(model, tok, length, [1.0], ctx)[0]
                    bar.update(1)
    return result


def _tune(cfg: TuneConfig, model, tok, trained: int, ctx, out: Path) -> tuple[TemperatureSpec, dict]:
    rope = rope_for(cfg.rope, cfg.length, trained)
    if cfg.method == "gradient":
        return run_gradient_tuning(
            model, tok, cfg.length, cfg.steps, out, granularity=cfg.granularity, rope=rope, docs=ctx.docs
        )
    if cfg.objective == "entropy":
        tun, _ = split_windows(tok, cfg.length, cfg.n_docs, ctx.docs)
        match = tune_entropy(model, tun, trained, cfg.granularity, rope, progress=cfg.progress)
        info = {
            "passes": match.passes,
            "reference": match.reference.tolist(),
            "before": match.before.tolist(),
            "after": match.after.tolist(),
        }
        (out / "entropy.json").write_text(json.dumps(info))
        return match.spec, {"entropy_passes": match.passes}
    tctx = replace(ctx, skip_docs=ctx.n_docs, seed=ctx.seed + 1000)  # other documents, keys, depths
    found = tune_global(model, tok, cfg.length, cfg.objective, tctx, rope)
    return TemperatureSpec(multiplier=found["multiplier"], rope=rope), {"search": found}


def run_tune(cfg: TuneConfig, model=None, tok=None) -> dict[str, Any]:
    """Tune, save the spec and the evidence under ``cfg.out``; returns the evidence."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if model is None:
        model, tok = load_model(cfg.model)
    trained = introspect.trained_length(model)
    ctx = eval_context(cfg, trained)
    t0 = time.perf_counter()
    spec, info = _tune(cfg, model, tok, trained, ctx, out)
    seconds = time.perf_counter() - t0
    spec.save(out / "spec.json")
    results = evaluate_specs(
        model, tok, cfg.length, candidates(cfg.rope, cfg.length, trained, spec), cfg.tasks, ctx, cfg.progress
    )
    evidence = {
        "config": asdict(cfg),
        "trained_length": trained,
        "tune_seconds": seconds,
        "info": info,
        "results": results,
        "spec": spec.to_dict(),
    }
    (out / "evidence.json").write_text(json.dumps(evidence, indent=1, default=float))
    (out / "evidence.md").write_text(evidence_markdown(evidence))
    return evidence


def evidence_markdown(ev: dict[str, Any]) -> str:
    """A before/after table of the evidence."""
    cfg = ev["config"]
    cols = [(t, m.name) for t in cfg["tasks"] for m in get_task(t).metrics]
    lines = [
        f"# tuning evidence: {cfg['model']}, length {cfg['length']}, rope {cfg['rope']}, "
        f"{cfg['granularity']} by {cfg['method']} ({cfg['objective']})",
        "",
        "| spec | " + " | ".join(f"{t} {m}" for t, m in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for name, res in ev["results"].items():
        lines.append(f"| {name} | " + " | ".join(f"{res[t][m]:.4g}" for t, m in cols) + " |")
    spec = TemperatureSpec.from_dict(ev["spec"])
    if spec.heads:
        table = np.asarray(spec.heads)
        lines += ["", f"tuned multipliers: mean {table.mean():.3f}, min {table.min():.3f}, max {table.max():.3f}"]
    elif spec.multiplier != 1.0:
        lines += ["", f"tuned global multiplier m = {spec.multiplier:.4f} (T = {1 / spec.multiplier:.4f})"]
    return "\n".join(lines) + "\n"
