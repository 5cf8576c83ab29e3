"""``run_tune``: tune a TemperatureSpec for one model and length on the tuning pool of documents,
then check it on the evaluation pool against the untuned model (and YaRN's own temperature when
the RoPE method is yarn), at the tuning length and at held-out lengths (:mod:`.evidence`).

The run consumes the plan :func:`~.plan.preflight_tune` worked out (the trained length, the
held-out lengths, the second text) and returns a :class:`TuneResult`. It writes ``spec.json``
(the TemperatureSpec), ``evidence.json`` (every figure with the per-window and per-trial values it
is made of, the paired comparisons) and ``evidence.md``, and for entropy matching ``entropy.json``
(reference, before and after per head): each file from one place.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..evaluate import limits
from ..evaluate.corpus import heldout_windows
from ..evaluate.key_tokens import key_token_targets
from ..evaluate.needles import needle_targets
from ..evaluate.tasks import EvalContext, eval_context, tuning_context
from ..hf import introspect
from ..hf.loading import load_model
from ..hf.patch import only_layer_types
from ..ops.rope.scalings import rope_for
from ..ops.spec import TemperatureSpec
from ..utils import outputs
from .config import TuneConfig
from .entropy import tune_entropy
from .evidence import comparisons, evaluate_specs, evidence_markdown, evidence_specs
from .gradient import run_gradient_tuning
from .plan import TunePlan, entropy_options, gradient_options, preflight_tune, search_options
from .resume import TUNE_OUTPUTS, TUNE_RESULTS, resumable
from .search import tune_global

TARGETS_OF = {"key_tokens": key_token_targets, "needles": needle_targets}  # gradient: ([n, L] ids, [n, L-1] mask)


@dataclass(frozen=True)
class TuneResult:
    """What a tune found: the evidence (``to_dict()``, as ``evidence.json`` holds it) and its
    report (``markdown()``, as ``evidence.md`` holds it), the spec saved in ``out``."""

    evidence: dict[str, Any]
    out: str  # the output folder, as given

    @property
    def spec(self) -> TemperatureSpec:
        return TemperatureSpec.from_dict(self.evidence["spec"])

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document: where the spec is, then the evidence."""
        return {"spec_file": f"{self.out}/spec.json", **self.evidence}

    def markdown(self) -> str:
        """The evidence in words and tables, and where the spec is."""
        return evidence_markdown(self.evidence) + f"\nspec: {self.out}/spec.json"


def _tune(cfg: TuneConfig, model: Any, tok: Any, ctx: EvalContext, out: Path) -> tuple[TemperatureSpec, dict]:
    """Tune on the tuning pool (other documents than the evidence's; other passkey keys and depths)."""
    rope = rope_for(cfg.rope, cfg.length, ctx.trained_length)
    tctx = tuning_context(ctx)
    if cfg.method == "gradient":
        targets = None if cfg.objective == "perplexity" else functools.partial(TARGETS_OF[cfg.objective], tok, ctx=tctx)
        return run_gradient_tuning(model, tok, gradient_options(cfg, rope), out, list(tctx.docs), targets)
    if cfg.objective == "entropy":
        ids = heldout_windows(tok, cfg.length, n=cfg.n_docs, docs=tctx.docs, n_name="n_docs")  # [n, L]
        match = tune_entropy(model, ids, ctx.trained_length, entropy_options(cfg, rope))
        info = {
            "target": match.target,
            "passes": match.passes,
            "reference": match.reference.tolist(),
            "before": match.before.tolist(),
            "after": match.after.tolist(),
        }
        (out / "entropy.json").write_text(json.dumps(info))
        return match.spec, {"entropy_passes": match.passes}
    opts = search_options(cfg, rope)
    found = tune_global(model, tok, tctx, opts)
    if found["at_edge"]:
        lo, hi = found["grid"]
        print(
            f"tune: the best m, {found['multiplier']:.4g}, is at the edge of the searched grid [{lo:.4g}, {hi:.4g}] "
            f"(after {opts.widen} steps past --bracket): the optimum may lie beyond it",
            file=sys.stderr,
        )
    return TemperatureSpec(multiplier=found["multiplier"], rope=rope), {"search": found}


def _scored(
    model: Any,
    tok: Any,
    length: int,
    spec: TemperatureSpec,
    cfg: TuneConfig,
    ctx: EvalContext,
    tasks: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """The candidates at ``length`` (the tuned spec's own RoPE for all) and their comparisons."""
    tasks = cfg.tasks if tasks is None else tasks
    results = evaluate_specs(
        model, tok, length, evidence_specs(spec.rope.to_dict() or None, spec), tasks, ctx, cfg.progress
    )
    return {"results": results, "comparisons": comparisons(results, list(tasks))}


def _second_text(plan: TunePlan, model: Any, spec: TemperatureSpec, ctx: EvalContext) -> dict[str, Any] | None:
    """The same candidates on the second text, whole, at the tuning and the held-out lengths, on
    the tasks that read the text (passkey's prompts are filler, the same on every text)."""
    second, cfg, held_out = plan.second, plan.cfg, plan.held_out
    if second is None:
        return None
    other = replace(ctx, docs=list(second.docs), tuning_docs=())
    scored = {n: _scored(model, plan.tok, n, spec, cfg, other, second.tasks) for n in (cfg.length, *held_out)}
    length = scored[cfg.length]
    return {"text": second.source, "tasks": list(second.tasks), **length, "checks": {n: scored[n] for n in held_out}}


def run_tune(cfg: TuneConfig, model=None, tok=None) -> TuneResult:
    """Tune, save the spec and the evidence under ``cfg.out``; returns the result. Everything is
    checked and worked out before the model loads (:func:`~.plan.preflight_tune`); a failed run
    leaves no empty ``out``; ``out`` is locked first (a second tune there is refused at once)."""
    with outputs.claimed(cfg.out, "tune"):
        plan = preflight_tune(cfg, model, tok)
        limits.say_needles(cfg, plan.cfg, plan.lengths)
        return _run(plan, model)


def _run(plan: TunePlan, model: Any) -> TuneResult:
    cfg = plan.cfg
    own = TUNE_OUTPUTS if cfg.overwrite else outputs.Outputs(TUNE_RESULTS) if resumable(cfg) else ()
    with outputs.output_folder(cfg.out, replace=own, writer="tune", own=TUNE_OUTPUTS) as out:
        if model is None:
            model, _ = load_model(cfg.model, **cfg.load_args())
        if plan.trained is None:
            plan = plan.with_trained(introspect.trained_length(model))
        return write(tune(plan, model, out), out)


def tune(plan: TunePlan, model: Any, out: Path) -> TuneResult:
    """The tuned spec and its evidence for ``plan`` on the loaded ``model`` (the spec saved in
    ``out`` as soon as it is tuned; the tuners' own files there too)."""
    cfg, tok, trained = plan.cfg, plan.tok, plan.trained
    assert trained is not None  # read off the model by run_tune where the preflight could not
    ctx = eval_context(cfg, trained, tuning=True)
    t0 = time.perf_counter()
    with only_layer_types(model, cfg.layer_types or None):  # the tuner's specs temper these layers only
        spec, info = _tune(cfg, model, tok, ctx, out)
    spec = spec.with_layer_types(cfg.layer_types) if cfg.layer_types else spec
    seconds = time.perf_counter() - t0
    spec.save(out / "spec.json")
    at_length = _scored(model, tok, cfg.length, spec, cfg, ctx)
    checks_ = {n: _scored(model, tok, n, spec, cfg, ctx) for n in plan.held_out}
    second = _second_text(plan, model, spec, ctx)
    evidence = {
        "config": asdict(cfg),
        "trained_length": trained,
        "tune_seconds": seconds,
        "evidence_seconds": time.perf_counter() - t0 - seconds,
        "info": info,
        **at_length,
        "checks": checks_,
        "held_out_notes": list(plan.held_out_notes),
        **({"heldout": second} if second else {}),
        "spec": spec.to_dict(),
    }
    return TuneResult(evidence, cfg.out)


def write(result: TuneResult, out: Path) -> TuneResult:
    """``evidence.json`` and ``evidence.md``: written once, here."""
    (out / "evidence.json").write_text(json.dumps(result.evidence, indent=1, default=float))
    (out / "evidence.md").write_text(evidence_markdown(result.evidence))
    return result


__all__ = ["TuneConfig", "TunePlan", "TuneResult", "preflight_tune", "run_tune"]
