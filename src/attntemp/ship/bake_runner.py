"""``attntemp bake`` as a run: :class:`BakeConfig` checked before the model loads, then a plain
checkpoint (:func:`attntemp.ship.bake.save_baked`) or, for a position-dependent spec on a Llama
model, one that carries its schedule (:func:`attntemp.ship.remote_code.save_schedule_checkpoint`).
The caller of both, so neither imports the other's caller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..hf import preflight
from ..hf.loading import load_model
from ..ops.spec import TemperatureSpec
from ..utils import install, outputs
from .bake import (
    BakeResult,
    check_out_dir,
    check_tokens_fit,
    refuse_baked_source,
    refuse_position_dependent,
    save_baked,
)
from .config import BakeConfig
from .remote_code import save_schedule_checkpoint, schedule_start, tokens_past_start


def run_bake(cfg: BakeConfig) -> BakeResult:
    """Check everything before the (slow) model load: the spec against the model's config, ``out``
    (writable; new, empty or ``overwrite``; not the current folder nor one holding the spec or the
    model), ``check_tokens`` against positions and memory, the source not baked already; then
    :func:`save_baked`. The folder is locked first (beside it: a checkpoint is replaced whole), so a
    second bake into it is refused at once."""
    target = install.target(cfg.out).absolute()
    with outputs.claimed(cfg.out, "bake", lock_file=target.parent / f".{target.name}{outputs.LOCK_NAME}"):
        return _bake(cfg)


def _bake(cfg: BakeConfig) -> BakeResult:
    spec = TemperatureSpec.load(cfg.spec)
    if spec.position_dependent and (preflight.source_config(cfg.model) or {}).get("model_type") != "llama":
        refuse_position_dependent(spec, why="only a Llama checkpoint can carry it (remote code: ship/remote_code.py)")
    source = preflight.source_folder(cfg.model)
    refuse_baked_source("model", source)
    install.recover(install.target(cfg.out).absolute().parent)  # D/sub/.. is D: its parent holds the staging
    keep = {"the spec file": Path(cfg.spec)} | ({"the model's own folder": source} if source else {})
    check_out_dir(Path(cfg.out), cfg.overwrite, keep, name="out")
    space = preflight.checkpoint_bytes(cfg.model)  # the checkpoint's size is known: the disk is checked first
    preflight.check_space("out", cfg.out, space, "the baked checkpoint (float32 weights and tokenizer)")
    config = preflight.source_config(cfg.model)
    preflight.check_spec("spec", cfg.spec, spec, config)
    _check_tokens_fit(cfg, config, spec)
    model, tok = load_model(cfg.model, **cfg.load_args(dtype="float32"))
    if spec.position_dependent:
        return _save_schedule(model, tok, spec, cfg)
    return save_baked(model, tok, spec, install.target(cfg.out), overwrite=cfg.overwrite, check_tokens=cfg.check_tokens)


def _check_tokens_fit(cfg: BakeConfig, config: dict[str, Any] | None, spec: TemperatureSpec) -> None:
    """The check's tokens within positions and memory: a schedule checkpoint is checked past the
    position where its schedule starts to act (its L0), ``check_tokens`` more."""
    if not spec.position_dependent:
        check_tokens_fit("check_tokens", cfg.check_tokens, config, spec)
        return
    tokens = tokens_past_start(spec, cfg.check_tokens)
    try:
        check_tokens_fit("check_tokens", tokens, config, spec)
    except ValueError as exc:
        start = schedule_start(spec)
        raise ValueError(
            f"{exc} (the check runs {start} + check_tokens: past {start}, where the schedule acts)"
        ) from None


def _save_schedule(model: torch.nn.Module, tok: Any, spec: TemperatureSpec, cfg: BakeConfig) -> BakeResult:
    """A position-dependent spec ships as a checkpoint that carries its schedule (ship/remote_code.py)."""
    return save_schedule_checkpoint(model, tok, spec, cfg.out, overwrite=cfg.overwrite, check_tokens=cfg.check_tokens)
