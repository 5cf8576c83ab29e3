"""Training a model's learnable temperatures (:class:`attntemp.hf.learnable.LearnableTemperatures`)
on next-token loss, every model weight frozen: AdamW on the log-multipliers (and any learned RoPE
factors), linear warmup then cosine decay, resumable checkpoints. :func:`train_temperatures` takes
its settings whole, as one :class:`TrainOptions`; :mod:`.gradient` is the experiment around it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from ..evaluate import corpus, lm
from ..hf.learnable import LearnableTemperatures, learnable, learnable_of
from ..ops.spec import TemperatureSpec
from ..utils import checks


@dataclass(frozen=True, kw_only=True)
class TrainOptions:
    """How :func:`train_temperatures` trains: ``steps`` of AdamW (no weight decay) at ``lr``, linear
    warmup (default 10% of the steps) then cosine decay; step s takes rows ``s*batch_size ...`` of
    the windows (cyclic); the loss counts predictions at positions >= ``start``. A checkpoint is
    saved every ``checkpoint_every`` steps and at the end, resumed from when ``resume``.
    ``init``, ``granularity``, ``schedule``, ``rope``: the learnable module made when the model is
    not inside ``learnable()`` already. ``settings``: a caller's options, recorded in the checkpoint
    (a resume must have the same)."""

    steps: int
    lr: float = 0.05
    start: int = 0
    batch_size: int = 1
    warmup: int | None = None
    checkpoint_every: int = 10
    gradient_checkpointing: bool = False
    progress: bool = True
    resume: bool = True
    init: TemperatureSpec | None = None
    granularity: str = "head"
    schedule: str | None = None
    rope: dict[str, Any] | None = None
    settings: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        checks.positive_int("steps", self.steps)
        checks.positive("lr", self.lr)
        checks.positive_int("batch_size", self.batch_size)
        checks.positive_int("checkpoint_every", self.checkpoint_every)
        if not 0 <= self.warmup_steps < self.steps:
            raise ValueError(f"warmup={self.warmup_steps!r} is not allowed; expected 0 <= warmup < steps={self.steps}")

    @property
    def warmup_steps(self) -> int:
        """``warmup``, or 10% of the steps."""
        return round(0.1 * self.steps) if self.warmup is None else int(self.warmup)


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warmup over ``warmup`` steps, then cosine decay towards 0 at ``steps`` (0-indexed step)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    return lr * 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


@dataclass(frozen=True)
class TrainResult:
    """Loss and lr per step (all steps, across resumes), state, and the learned spec (exact)."""

    losses: tuple[float, ...]
    lrs: tuple[float, ...]
    steps: int
    resumed_from: int
    seconds: float
    state: dict[str, torch.Tensor]
    spec: TemperatureSpec


@contextmanager
def training_mode(model: nn.Module, checkpointing: bool) -> Iterator[None]:
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
    ids: torch.Tensor | Sequence[torch.Tensor],
    opts: TrainOptions,
    checkpoint: str | Path | None = None,
    masks: torch.Tensor | Sequence[torch.Tensor] | None = None,
    callback: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Tune the temperatures on next-token loss of ``ids`` [N, L] (predictions at positions >=
    ``opts.start``), or of several such tensors of different lengths (step s trains on tensor
    ``s % k``: one spec learned from several lengths at once), as :class:`TrainOptions` says.

    Inside ``learnable(model)`` its module is trained; otherwise one is made from the options'
    init/granularity/schedule/rope and the model is restored after. ``checkpoint``: saved and
    resumed from (:class:`TrainOptions`). ``masks``: ``[N, L-1]`` per tensor of ``ids``, the
    predictions the loss counts (key tokens, answer tokens: :func:`attntemp.evaluate.lm.masked_loss`)
    instead of those at positions >= start. ``callback(step, loss)`` runs after each step (after
    its checkpoint).
    """
    with ExitStack() as stack:
        temps = learnable_of(model)
        if temps is None:
            temps = stack.enter_context(learnable(model, opts.init, opts.granularity, opts.schedule, rope=opts.rope))
        elif opts.init is not None or opts.rope is not None or opts.schedule is not None:
            raise ValueError("init, schedule and rope are not allowed inside learnable(); pass them to it")
        stack.enter_context(training_mode(model, opts.gradient_checkpointing))
        meta = _meta(opts, temps, ids, masks)
        path = None if checkpoint is None else Path(checkpoint)
        return _loop(model, temps, Windows(ids, masks), opts, meta, path, callback)


def _meta(
    opts: TrainOptions,
    temps: LearnableTemperatures,
    ids: torch.Tensor | Sequence[torch.Tensor],
    masks: torch.Tensor | Sequence[torch.Tensor] | None,
) -> dict[str, Any]:
    """What a checkpoint records and a resume must match: the options and digests of the windows."""
    return {
        "steps": opts.steps,
        "lr": float(opts.lr),
        "start": int(opts.start),
        "batch_size": int(opts.batch_size),
        "warmup": opts.warmup_steps,
        "granularity": temps.granularity,
        "schedule": temps.schedule,
        **({"rope_factors": temps.rope_factors.log_factor.numel()} if temps.rope_factors is not None else {}),
        "ids": ",".join(corpus.windows_digest(t.cpu()) for t in _groups(ids)),
        **({"masks": ",".join(corpus.windows_digest(m.cpu()) for m in _groups(masks))} if masks is not None else {}),
        **({"settings": _plain(opts.settings)} if opts.settings is not None else {}),
    }


@dataclass(frozen=True)
class Windows:
    """The training windows: ``ids`` (``[N, L]`` or one such tensor per length) and, for a masked
    loss, the ``[N, L-1]`` masks beside them."""

    ids: torch.Tensor | Sequence[torch.Tensor]
    masks: torch.Tensor | Sequence[torch.Tensor] | None = None

    def batch(self, step: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Step ``step``'s rows of the windows ``[b, L]`` and of their masks ``[b, L-1]`` (or None)."""
        rows = _batch(_groups(self.ids), step, batch_size)  # [b, L]
        return rows, None if self.masks is None else _batch(_groups(self.masks), step, batch_size)


def _plain(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with tuples as lists: what ``torch.load`` gives back, compared on resume."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()}


def _groups(ids: torch.Tensor | Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The training windows as a list of ``[N, L]`` tensors, one per length."""
    groups = [ids] if isinstance(ids, torch.Tensor) else list(ids)
    if not groups or any(g.dim() != 2 for g in groups):
        raise ValueError("ids must be a [N, L] tensor of token ids or a non-empty list of them")
    return groups


def _batch(groups: list[torch.Tensor], step: int, batch_size: int) -> torch.Tensor:
    """Step ``step``'s rows: tensor ``step % k``, rows ``(step // k) * batch_size ...`` (cyclic)."""
    g = groups[step % len(groups)]
    rows = torch.arange(batch_size) + (step // len(groups)) * batch_size
    return g[rows % g.shape[0]]  # [b, L]


def _loop(
    model: nn.Module,
    temps: LearnableTemperatures,
    windows: Windows,
    opts: TrainOptions,
    meta: dict[str, Any],
    checkpoint: Path | None,
    callback: Callable[[int, float], None] | None,
) -> TrainResult:
    opt = torch.optim.AdamW(temps.parameters(), lr=opts.lr, weight_decay=0.0)
    step, losses, lrs, first = 0, [], [], 0
    if checkpoint is not None and opts.resume and checkpoint.is_file():
        saved = _resume(checkpoint, temps, opt, meta)
        step, losses, lrs, first = saved["step"], list(saved["losses"]), list(saved["lrs"]), saved["step"]
    t0 = time.perf_counter()
    with tqdm(total=opts.steps, initial=step, disable=not opts.progress, desc="temperatures") as bar:
        while step < opts.steps:
            rate = lr_at(step, opts.steps, opts.lr, opts.warmup_steps)
            for group in opt.param_groups:
                group["lr"] = rate
            rows, mask = windows.batch(step, opts.batch_size)  # [b, L], [b, L-1] or None
            batch = rows.to(temps.log_m.device)  # [b, L]
            opt.zero_grad(set_to_none=True)
            if mask is None:
                loss = lm.next_token_loss(model, batch, opts.start)
            else:
                loss = lm.masked_loss(model, batch, mask)
            loss.backward()
            opt.step()
            if temps.rope_factors is not None:
                temps.rope_factors.project()  # every factor stays >= 1
            step, value = step + 1, float(loss.detach())
            losses.append(value)
            lrs.append(rate)
            if checkpoint is not None and (step % opts.checkpoint_every == 0 or step == opts.steps):
                _save(
                    checkpoint,
                    {
                        "step": step,
                        "params": temps.state_dict(),
                        "optimizer": opt.state_dict(),
                        "losses": losses,
                        "lrs": lrs,
                        "meta": meta,
                    },
                )
            bar.update(1)
            bar.set_postfix(loss=f"{value:.4f}")
            if callback is not None:
                callback(step, value)
    state = {k: v.detach().clone() for k, v in temps.state_dict().items()}
    return TrainResult(tuple(losses), tuple(lrs), opts.steps, first, time.perf_counter() - t0, state, temps.to_spec())
