"""``attntemp eval`` as a plan and a run: :func:`preflight_eval` checks everything that is cheap and
builds the tasks before the model loads (:class:`EvalPlan`); :func:`evaluate_plan` loads the model,
runs lm-eval without and with the spec (:mod:`.harness`) and writes ``out``."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...hf import preflight
from ...hf.loading import load_model, resolve
from ...ops.spec import TemperatureSpec
from ...utils import outputs
from .. import limits
from . import task_folder as lm_eval_tasks
from .config import EvalHarnessConfig
from .lookup import task_metadata
from .paired import (
    HarnessResult,
    Settings,
    both_runs,
    check_eval_out,
    finish,
    lm_eval_logging,
    prepare,
    require_lm_eval,
)

__all__ = ["EvalPlan", "evaluate_plan", "preflight_eval", "run_eval"]


@dataclass(frozen=True)
class EvalPlan:
    """What ``attntemp eval`` consumes, checked and worked out by :func:`preflight_eval`."""

    cfg: EvalHarnessConfig
    spec: TemperatureSpec
    out: Path
    staged: Path  # beside ``out``: the outputs (and the remade tasks) until they move into ``out``
    manager: Any  # lm-eval's TaskManager, every task built once
    tasks: list[str]  # the task names, globs expanded
    settings: Settings  # with the documents ``limit`` picks
    metadata: dict[str, Any]  # the user's ``--metadata`` (lm-eval's tasks also get the tokenizer)


def preflight_eval(cfg: EvalHarnessConfig) -> EvalPlan:
    """Check everything that is cheap (lm-eval, spec, --out, task names, datasets) and build the
    tasks, before the model loads; with ``lengths``, attntemp's tasks are first remade in the
    model's tokens. A failed check leaves no staging folder."""
    require_lm_eval()
    spec = TemperatureSpec.load(cfg.spec)
    preflight.source_config(cfg.model)  # a model attntemp.patch cannot temper, refused before the tasks are built
    out = Path(cfg.out)
    check_eval_out(out, cfg.overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        settings = Settings(cfg.limit, cfg.batch_size, cfg.max_length, cfg.bootstrap_iters)
        tasks_dir = _remade_tasks(cfg, staged / "lm_eval_tasks")
        user = task_metadata(cfg.metadata)
        metadata = {"tokenizer": str(resolve(cfg.model))} | user
        with lm_eval_logging(cfg.lm_eval_logs):
            manager, tasks, settings = prepare(cfg.tasks, cfg.include_path, tasks_dir, metadata, settings)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return EvalPlan(cfg, spec, out, staged, manager, tasks, settings, user)


def _remade_tasks(cfg: EvalHarnessConfig, folder: Path) -> Path | None:
    if not cfg.lengths:
        return None
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve(cfg.model))
    limits.check_lengths("lengths", cfg.lengths, ["passkey", "needle"], tok)  # the remade tasks' own minimum
    return lm_eval_tasks.write_folder(folder, tok, cfg.lengths)


def run_eval(cfg: EvalHarnessConfig) -> HarnessResult:
    """Lock ``out`` (a second eval there is refused at once), check and plan (:func:`preflight_eval`),
    then load the model and run (:func:`evaluate_plan`)."""
    with outputs.claimed(cfg.out, "eval"):
        return evaluate_plan(preflight_eval(cfg))


def evaluate_plan(plan: EvalPlan) -> HarnessResult:
    """Load the model, run the plan's tasks without and with its spec, write ``out``: a failed run
    leaves ``out`` as it was and no staging folder."""
    cfg = plan.cfg
    try:
        with lm_eval_logging(cfg.lm_eval_logs):
            model, tok = load_model(cfg.model, **cfg.load_args())
            runs = both_runs(model, tok, plan.spec, plan.tasks, plan.manager, plan.settings)
        meta: dict[str, Any] = {"model": cfg.model, "spec_file": cfg.spec, "spec": plan.spec.to_dict()}
        meta |= {"tasks": plan.tasks, "limit": cfg.limit, "max_length": cfg.max_length, "lengths": list(cfg.lengths)}
        return finish(runs, cfg.seed, plan.out, meta | {"metadata": plan.metadata}, plan.staged)
    except BaseException:
        shutil.rmtree(plan.staged, ignore_errors=True)
        raise
