"""Gradient tuning of temperatures: next-token loss on long text, every model weight frozen.

``train_temperatures`` trains the :class:`attntemp.hf.learnable.LearnableTemperatures` of a model
(AdamW, warmup then cosine decay, resumable checkpoints); ``run_gradient_tuning`` is the
experiment behind ``attntemp tune --method gradient``: train on held-out windows, score others.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from ..analysis import plots
from ..evaluate import corpus, lm
from ..hf import patch
from ..hf.learnable import LearnableTemperatures, base_spec, learnable, learnable_of, trained_length_of
from ..ops.spec import TemperatureSpec
from ..utils import checks


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warmup over ``warmup`` steps, then cosine decay towards 0 at ``steps`` (0-indexed step)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    return lr * 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


@dataclass(frozen=True)
class TrainResult:
    """Loss and lr per step (all steps, across resumes), state; spec None if a slope was learned."""

    losses: tuple[float, ...]
    lrs: tuple[float, ...]
    steps: int
    resumed_from: int
    seconds: float
    state: dict[str, torch.Tensor]
    spec: TemperatureSpec | None


@contextmanager
def _training_mode(model: nn.Module, checkpointing: bool) -> Iterator[None]:
    """Eval mode (no dropout), optionally with each decoder layer checkpointed; all restored after.

    Checkpointing uses use_reentrant=False (frozen weights: the inputs need no grad) and turns on only
    the decoder layers' own training flag, which is what transformers checks; their children stay eval.
    """
    from transformers.modeling_layers import GradientCheckpointingLayer

    hf_model: Any = model  # a transformers model: gradient checkpointing and input-grad hooks
    modes = {m: m.training for m in model.modules()}
    was = any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())
    had_hooks = bool(getattr(model, "_require_grads_hooks", None))
    model.eval()
    if checkpointing:
        on = getattr(model, "activation_checkpointing_enable", None) or hf_model.gradient_checkpointing_enable
        on({"use_reentrant": False})
        for m in model.modules():
            m.training = m.training or isinstance(m, GradientCheckpointingLayer)
    try:
        yield
    finally:
        for m, mode in modes.items():
            m.training = mode
        if checkpointing and not was:
            off = getattr(model, "activation_checkpointing_disable", None)
            (off or hf_model.gradient_checkpointing_disable)()
        if checkpointing and not had_hooks:
            hf_model.disable_input_require_grads()


def _save(path: Path, payload: dict[str, Any]) -> None:
    """torch.save to a temporary file, then os.replace: a reader never sees half a checkpoint."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def _resume(
    path: Path, temps: LearnableTemperatures, opt: torch.optim.Optimizer, meta: dict[str, Any]
) -> dict[str, Any]:
    saved = torch.load(path, weights_only=True)
    for key, value in meta.items():
        if saved["meta"].get(key) != value:
            raise ValueError(
                f"checkpoint {str(path)!r} was written with {key}={saved['meta'].get(key)!r}; "
                f"this run has {key}={value!r}; delete it or pass resume=False"
            )
    temps.load_state_dict(saved["params"])
    opt.load_state_dict(saved["optimizer"])
    return saved


def train_temperatures(
    model: nn.Module,
    ids: torch.Tensor,
    steps: int,
    lr: float = 0.05,
    start: int = 0,
    batch_size: int = 1,
    checkpoint: str | Path | None = None,
    resume: bool = True,
    warmup: int | None = None,
    progress: bool = True,
    gradient_checkpointing: bool = False,
    checkpoint_every: int = 10,
    init: TemperatureSpec | None = None,
    granularity: str = "head",
    schedule: str | None = None,
    rope: dict[str, Any] | None = None,
    callback: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Tune the temperatures on next-token loss of ``ids`` [N, L] (predictions at positions >= start).

    AdamW (no weight decay) on the log-multipliers only, linear warmup (default 10% of steps) then
    cosine decay; step s uses rows ``s*batch_size ...`` of ``ids`` (cyclic). Inside ``learnable(model)``
    its module is trained; otherwise one is made from init/granularity/schedule/rope and the model is
    restored after. ``checkpoint``: saved every ``checkpoint_every`` steps and at the end, resumed from
    when ``resume``. ``callback(step, loss)`` runs after each step (after its checkpoint).
    """
    steps = checks.positive_int("steps", steps)
    checks.positive("lr", lr)
    checks.positive_int("batch_size", batch_size)
    checks.positive_int("checkpoint_every", checkpoint_every)
    warmup = round(0.1 * steps) if warmup is None else int(warmup)
    if not 0 <= warmup < steps:
        raise ValueError(f"warmup={warmup!r} is not allowed; expected 0 <= warmup < steps={steps}")
    with ExitStack() as stack:
        temps = learnable_of(model)
        if temps is None:
            temps = stack.enter_context(learnable(model, init, granularity, schedule, rope=rope))
        elif init is not None or rope is not None or schedule is not None:
            raise ValueError("init, schedule and rope are not allowed inside learnable(); pass them to it")
        stack.enter_context(_training_mode(model, gradient_checkpointing))
        plan = {
            "steps": steps,
            "lr": float(lr),
            "start": int(start),
            "batch_size": int(batch_size),
            "warmup": warmup,
            "granularity": temps.granularity,
            "schedule": temps.schedule,
            "ids": corpus.windows_digest(ids.cpu()),
        }
        path = None if checkpoint is None else Path(checkpoint)
        return _loop(model, temps, ids, plan, path, resume, checkpoint_every, progress, callback)


def _loop(
    model: nn.Module,
    temps: LearnableTemperatures,
    ids: torch.Tensor,
    plan: dict[str, Any],
    checkpoint: Path | None,
    resume: bool,
    every: int,
    progress: bool,
    callback: Callable[[int, float], None] | None,
) -> TrainResult:
    opt = torch.optim.AdamW(temps.parameters(), lr=plan["lr"], weight_decay=0.0)
    step, losses, lrs, first = 0, [], [], 0
    if checkpoint is not None and resume and checkpoint.is_file():
        saved = _resume(checkpoint, temps, opt, plan)
        step, losses, lrs, first = saved["step"], list(saved["losses"]), list(saved["lrs"]), saved["step"]
    rows = torch.arange(plan["batch_size"])
    t0 = time.perf_counter()
    with tqdm(total=plan["steps"], initial=step, disable=not progress, desc="temperatures") as bar:
        while step < plan["steps"]:
            rate = lr_at(step, plan["steps"], plan["lr"], plan["warmup"])
            for group in opt.param_groups:
                group["lr"] = rate
            batch = ids[(rows + step * plan["batch_size"]) % ids.shape[0]].to(temps.log_m.device)  # [b, L]
            opt.zero_grad(set_to_none=True)
            loss = lm.next_token_loss(model, batch, plan["start"])
            loss.backward()
            opt.step()
            step, value = step + 1, float(loss.detach())
            losses.append(value)
            lrs.append(rate)
            if checkpoint is not None and (step % every == 0 or step == plan["steps"]):
                _save(
                    checkpoint,
                    {
                        "step": step,
                        "params": temps.state_dict(),
                        "optimizer": opt.state_dict(),
                        "losses": losses,
                        "lrs": lrs,
                        "meta": plan,
                    },
                )
            bar.update(1)
            bar.set_postfix(loss=f"{value:.4f}")
            if callback is not None:
                callback(step, value)
    state = {k: v.detach().clone() for k, v in temps.state_dict().items()}
    spec = None if temps.slope is not None and bool((temps.slope != 0).any()) else temps.to_spec()
    return TrainResult(tuple(losses), tuple(lrs), plan["steps"], first, time.perf_counter() - t0, state, spec)


def _tail_start(start: str | int, length: int, trained_length: int) -> int:
    """``"tail"``: predictions past the trained length; ``"all"``: 0; an int: itself."""
    if start == "all":
        return 0
    if start == "tail":
        if length <= trained_length + 1:
            raise ValueError(
                f"start='tail' is not allowed at length={length} <= trained length "
                f"{trained_length} + 1; pass start='all' or an int"
            )
        return trained_length
    if isinstance(start, int) and not isinstance(start, bool) and 0 <= start < length - 1:
        return start
    raise ValueError(f"start={start!r} is not allowed; expected 'tail', 'all' or an int in [0, {length - 1})")


def _write_outputs(
    out: Path, spec: TemperatureSpec, temps: LearnableTemperatures, result: TrainResult, log: dict[str, Any]
) -> None:
    spec.save(out / "learned_spec.json")
    plots.heatmap(
        temps.table().numpy(), out / "learned_heatmap.png", "learned multiplier m = 1/T", "m", cmap="RdBu_r", center=1.0
    )
    state = {k: v.double().tolist() for k, v in result.state.items()}
    log = {
        **log,
        "losses": list(result.losses),
        "lrs": list(result.lrs),
        "resumed_from": result.resumed_from,
        "seconds": result.seconds,
        "state": state,
    }
    (out / "train_log.json").write_text(json.dumps(log, indent=2) + "\n")


def run_gradient_tuning(
    model: nn.Module,
    tokenizer: Any,
    length: int,
    steps: int,
    out_dir: str | Path,
    granularity: str = "head",
    rope: dict[str, Any] | None = None,
    docs: list | None = None,
    n_train: int = 8,
    n_eval: int = 8,
    start: str | int = "tail",
    lr: float = 0.05,
    batch_size: int = 1,
    schedule: str | None = None,
    init: TemperatureSpec | None = None,
    progress: bool = True,
    gradient_checkpointing: bool = False,
    checkpoint_every: int = 10,
) -> tuple[TemperatureSpec, dict[str, Any]]:
    """Learn temperatures on ``n_train`` held-out windows of ``length`` tokens; score ``n_eval`` others.

    Writes out_dir/learned_spec.json, learned_heatmap.png, train_log.json, evidence.json and
    checkpoint.pt (a rerun resumes from it). Evidence: tail perplexity on the evaluation windows with
    the base (rope and init) before and the learned spec after. With a log-position slope the spec
    is the constant part and ``tail_ppl_after_learnable`` scores the exact learned function.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    windows = corpus.heldout_windows(tokenizer, length, n_train + n_eval, docs=docs)  # [n_train+n_eval, N]
    digests = {
        "train_windows": corpus.windows_digest(windows[:n_train]),
        "eval_windows": corpus.windows_digest(windows[n_train:]),
    }
    windows = windows.to(next(model.parameters()).device)
    train_ids, eval_ids = windows[:n_train], windows[n_train:]
    base = base_spec(init, rope)
    l0 = trained_length_of(model, base)
    first = _tail_start(start, length, l0)
    with patch.patch(model, (init or TemperatureSpec()).with_rope(dict(base.rope) or None)):
        before = lm.perplexity(model, eval_ids, first, batch_size=batch_size)
    evidence: dict[str, Any] = {}
    with learnable(model, init, granularity, schedule, rope=rope) as temps:
        result = train_temperatures(
            model,
            train_ids,
            steps,
            lr,
            first,
            batch_size,
            out / "checkpoint.pt",
            progress=progress,
            gradient_checkpointing=gradient_checkpointing,
            checkpoint_every=checkpoint_every,
        )
        spec = temps.to_spec(constant_part=True)
        if result.spec is None:
            evidence["tail_ppl_after_learnable"] = lm.perplexity(model, eval_ids, first, batch_size)
    with patch.patch(model, spec):
        after = lm.perplexity(model, eval_ids, first, batch_size=batch_size)
    table = temps.table()
    evidence = {
        "length": length,
        "trained_length": l0,
        "start": first,
        "steps": steps,
        "granularity": granularity,
        "schedule": schedule,
        "rope": dict(base.rope) or None,
        "n_train": n_train,
        "n_eval": n_eval,
        "lr": lr,
        "tail_ppl_before": before,
        "tail_ppl_after": after,
        **evidence,
        "spec_is_constant_part": result.spec is None,
        "resumed_from": result.resumed_from,
        "loss_first": result.losses[0],
        "loss_last": result.losses[-1],
        "m_min": float(table.min()),
        "m_max": float(table.max()),
        "seconds_train": result.seconds,
        "seconds": time.perf_counter() - t0,
        **digests,
    }
    _write_outputs(out, spec, temps, result, {k: evidence[k] for k in ("length", "start", "steps", "lr")})
    (out / "evidence.json").write_text(json.dumps(evidence, indent=2) + "\n")
    return spec, evidence
