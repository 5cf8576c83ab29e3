"""Learnable temperatures: per-(layer, head) log-multipliers tuned by gradient, every weight frozen.

``learnable(model)`` patches the model (``attntemp.apply``) with a base spec (identity, or only a
RoPE extension) and sets each attention module's ``LayerState.extra`` to a
:class:`LearnableTemperatures`, whose ``log_m`` (one per head, layer or model) are then the only
trainable parameters: a few hundred numbers for a long-context adaptation that touches no weight.

Position dependence (``schedule="log_position"``), after SSMax (arXiv:2501.19399, m = s ln n) and
Llama 4's NoPE-layer temperature (m = 1 + 0.1 log1p(floor((pos+1)/8192))), adds a slope b:

    ln m(l, h, pos) = a[l, h] + b[l, h] * ln(max(1, (pos + 1) / L0))

with L0 the trained length: m = exp(a) exactly at positions < L0, and m = exp(a) ((pos+1)/L0)^b
beyond. A TemperatureSpec cannot hold per-head slopes, so ``to_spec`` refuses a nonzero slope
unless ``constant_part=True`` (then it returns exp(a), exact only below L0).
"""

from __future__ import annotations

import inspect
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
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from . import _validate, patching, tiny_eval
from .extend import text_config
from .spec import TemperatureSpec

GRANULARITIES = ("head", "layer", "global")
SCHEDULES = ("log_position",)
_LEARN = "_attntemp_learnable"


def _init_table(init: TemperatureSpec | None, layers: int, heads: int, granularity: str) -> torch.Tensor:
    """ln m of ``init``'s static multipliers, reduced to the granularity: [L, H], [L, 1] or [1, 1]."""
    shape = {"head": (layers, heads), "layer": (layers, 1), "global": (1, 1)}[granularity]
    if init is None:
        return torch.zeros(shape, dtype=torch.float64)
    if init.position_dependent:
        raise ValueError(f"init has schedule={init.schedule!r}, which depends on position; a learnable "
                         "init must be constant (schedules allowed: 'constant')")
    init.check_model(layers, heads)
    table = init.heads_table(layers, heads).double().log()  # [L, H]
    reduced = table.mean(dim=1, keepdim=True) if shape[1] == 1 else table  # [L, H|1]
    reduced = reduced.mean(dim=0, keepdim=True) if shape[0] == 1 else reduced  # [L|1, H|1]
    if not torch.allclose(reduced.expand(layers, heads), table, rtol=0.0, atol=1e-9):
        raise ValueError(f"granularity={granularity!r} holds one multiplier per {granularity}, but init "
                         "varies within it; allowed: an init constant at that granularity, or 'head'")
    return reduced


class LearnableTemperatures(nn.Module):
    """``log_m`` ([L, H], [L, 1] or [1, 1] by granularity) and an optional log-position slope.

    Called as ``LayerState.extra``: ``(layer, positions [B|1, Lq], n_keys) -> m`` broadcastable to
    ``[B, H, Lq]`` (``n_keys`` is unused). See the module docstring for the formula.
    """

    def __init__(self, num_layers: int, num_heads: int, granularity: str = "head",
                 init: TemperatureSpec | None = None, schedule: str | None = None,
                 trained_length: int | None = None, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        self.num_layers = _validate.positive_int("num_layers", num_layers)
        self.num_heads = _validate.positive_int("num_heads", num_heads)
        self.granularity = _validate.choice("granularity", granularity, GRANULARITIES)
        self.schedule = None if schedule is None else _validate.choice("schedule", schedule, SCHEDULES)
        self.trained_length = None
        if schedule is not None:
            self.trained_length = _validate.positive_int("trained_length", trained_length)
        table = _init_table(init, num_layers, num_heads, granularity).to(dtype=dtype, device=device)
        self.log_m = nn.Parameter(table)
        self.slope = nn.Parameter(torch.zeros_like(table)) if schedule else None
        self.base = TemperatureSpec()  # the spec applied under it (set by apply_learnable)

    def forward(self, layer: int, positions: torch.Tensor, n_keys: torch.Tensor) -> torch.Tensor:
        """m: ``[1, H|1, 1]`` (constant) or ``[B|1, H|1, Lq]`` (log_position)."""
        row = layer if self.log_m.shape[0] > 1 else 0
        ln_m = self.log_m[row].reshape(1, -1, 1)  # [1, H|1, 1]
        if self.slope is None:
            return ln_m.exp()
        x = ((positions.to(ln_m.dtype) + 1) / self.trained_length).clamp_min(1.0).log()  # [B|1, Lq]
        return (ln_m + self.slope[row].reshape(1, -1, 1) * x.unsqueeze(1)).exp()  # [B|1, H|1, Lq]

    def table(self) -> torch.Tensor:
        """The constant multipliers exp(log_m) as a detached ``[L, H]`` float64 table."""
        return self.log_m.detach().double().exp().expand(self.num_layers, self.num_heads).cpu()

    def to_spec(self, base_spec: TemperatureSpec | None = None, constant_part: bool = False
                ) -> TemperatureSpec:
        """A per-head spec: exp(log_m) times ``base_spec``'s static multipliers (default: ``self.base``).

        The base's rope and position schedule are kept. A nonzero log-position slope raises unless
        ``constant_part=True`` (the spec is then exp(a): exact at positions < trained_length only).
        """
        base = self.base if base_spec is None else base_spec
        if self.slope is not None and not constant_part and bool((self.slope != 0).any()):
            raise ValueError(f"schedule={self.schedule!r} learned a position slope, which a TemperatureSpec "
                             f"cannot hold; pass constant_part=True for exp(a) (exact below "
                             f"trained_length={self.trained_length}) or keep the module")
        base.check_model(self.num_layers, self.num_heads)
        heads = base.heads_table(self.num_layers, self.num_heads).double() * self.table()  # [L, H]
        kw: dict[str, Any] = {}
        if base.position_dependent:
            kw = {"schedule": base.schedule, "schedule_params": base.schedule_params}
        return TemperatureSpec.per_head(heads, rope=base.rope, **kw)


# ----------------------------------------------------------------------------- patching
def _base_spec(init: TemperatureSpec | None, rope: dict[str, Any] | None) -> TemperatureSpec:
    """The identity spec carrying ``rope`` (or ``init``'s rope); the init multipliers are learned."""
    base = TemperatureSpec(rope=rope)
    if init is not None and init.rope and base.rope and init.rope != base.rope:
        raise ValueError(f"rope={dict(base.rope)} differs from init.rope={dict(init.rope)}; give one")
    return base if base.rope or init is None else TemperatureSpec(rope=init.rope)


def trained_length_of(model: nn.Module, base: TemperatureSpec) -> int:
    """L0: the rope's original_max_position_embeddings, else the config's max_position_embeddings."""
    rope = dict(base.rope)
    return int(rope.get("original_max_position_embeddings") or text_config(model).max_position_embeddings)


def learnable_of(model: nn.Module) -> LearnableTemperatures | None:
    """The LearnableTemperatures applied to ``model`` by ``apply_learnable``, or None."""
    saved = getattr(model, _LEARN, None)
    return None if saved is None else saved[0]


def apply_learnable(model: nn.Module, init: TemperatureSpec | None = None, granularity: str = "head",
                    schedule: str | None = None, trained_length: int | None = None,
                    rope: dict[str, Any] | None = None) -> LearnableTemperatures:
    """Patch ``model`` with learnable temperatures and freeze every weight; undo with restore_learnable.

    ``trained_length`` (L0 of log_position) defaults to ``trained_length_of(model, base)``."""
    if learnable_of(model) is not None:
        raise ValueError("the model already has learnable temperatures; call restore_learnable(model) first")
    base = _base_spec(init, rope)
    l0 = (trained_length or trained_length_of(model, base)) if schedule else None
    weight = next(model.parameters())
    dtype = torch.float64 if weight.dtype == torch.float64 else torch.float32
    heads = text_config(model).num_attention_heads
    temps = LearnableTemperatures(len(patching.attention_modules(model)), heads, granularity, init, schedule,
                                  l0, dtype, weight.device)
    temps.base = base
    patching.apply(model, base)
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    object.__setattr__(model, _LEARN, (temps, flags))
    for p in model.parameters():
        p.requires_grad_(False)
    for mod in patching.attention_modules(model):
        getattr(mod, patching.STATE).extra = temps
    return temps


def restore_learnable(model: nn.Module) -> nn.Module:
    """Undo ``apply_learnable``: patch removed, the original requires_grad flags put back."""
    saved = getattr(model, _LEARN, None)
    if saved is None:
        return model
    patching.restore(model)
    flags = saved[1]
    for name, p in model.named_parameters():
        if name in flags:
            p.requires_grad_(flags[name])
    object.__setattr__(model, _LEARN, None)
    return model


@contextmanager
def learnable(model: nn.Module, init: TemperatureSpec | None = None, granularity: str = "head",
              schedule: str | None = None, trained_length: int | None = None,
              rope: dict[str, Any] | None = None) -> Iterator[LearnableTemperatures]:
    """``with learnable(model) as temps: ...``: restored on exit, also on an exception."""
    temps = apply_learnable(model, init, granularity, schedule, trained_length, rope)
    try:
        yield temps
    finally:
        restore_learnable(model)


# ----------------------------------------------------------------------------- training
def next_token_loss(model: nn.Module, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
    """Mean next-token cross entropy of the predictions made at positions ``>= start`` of ``ids`` [B, L]."""
    if not 0 <= start < ids.shape[1] - 1:
        raise ValueError(f"start={start!r} is not allowed; expected 0 <= start < {ids.shape[1] - 1}")
    keep = "logits_to_keep" in inspect.signature(model.forward).parameters
    kw = {"logits_to_keep": ids.shape[1] - start} if keep else {}
    logits = model(input_ids=ids, use_cache=False, **kw).logits[:, -(ids.shape[1] - start) : -1]
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # [B, L-1-start, V]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, start + 1 :].reshape(-1))


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

    modes = {m: m.training for m in model.modules()}
    was = any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())
    had_hooks = bool(getattr(model, "_require_grads_hooks", None))
    model.eval()
    if checkpointing:
        on = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
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
            (off or model.gradient_checkpointing_disable)()
        if checkpointing and not had_hooks:
            model.disable_input_require_grads()


def _save(path: Path, payload: dict[str, Any]) -> None:
    """torch.save to a temporary file, then os.replace: a reader never sees half a checkpoint."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def _resume(path: Path, temps: LearnableTemperatures, opt: torch.optim.Optimizer,
            meta: dict[str, Any]) -> dict[str, Any]:
    saved = torch.load(path, weights_only=True)
    for key, value in meta.items():
        if saved["meta"].get(key) != value:
            raise ValueError(f"checkpoint {str(path)!r} was written with {key}={saved['meta'].get(key)!r}; "
                             f"this run has {key}={value!r}; delete it or pass resume=False")
    temps.load_state_dict(saved["params"])
    opt.load_state_dict(saved["optimizer"])
    return saved


def train_temperatures(
    model: nn.Module, ids: torch.Tensor, steps: int, lr: float = 0.05, start: int = 0, batch_size: int = 1,
    checkpoint: str | Path | None = None, resume: bool = True, warmup: int | None = None,
    progress: bool = True, gradient_checkpointing: bool = False, checkpoint_every: int = 10,
    init: TemperatureSpec | None = None, granularity: str = "head", schedule: str | None = None,
    rope: dict[str, Any] | None = None, callback: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Tune the temperatures on next-token loss of ``ids`` [N, L] (predictions at positions >= start).

    AdamW (no weight decay) on the log-multipliers only, linear warmup (default 10% of steps) then
    cosine decay; step s uses rows ``s*batch_size ...`` of ``ids`` (cyclic). Inside ``learnable(model)``
    its module is trained; otherwise one is made from init/granularity/schedule/rope and the model is
    restored after. ``checkpoint``: saved every ``checkpoint_every`` steps and at the end, resumed from
    when ``resume``. ``callback(step, loss)`` runs after each step (after its checkpoint).
    """
    steps = _validate.positive_int("steps", steps)
    _validate.positive("lr", lr)
    _validate.positive_int("batch_size", batch_size)
    _validate.positive_int("checkpoint_every", checkpoint_every)
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
        plan = {"steps": steps, "lr": float(lr), "start": int(start), "batch_size": int(batch_size),
                "warmup": warmup, "granularity": temps.granularity, "schedule": temps.schedule,
                "ids": tiny_eval.windows_digest(ids.cpu())}
        path = None if checkpoint is None else Path(checkpoint)
        return _loop(model, temps, ids, plan, path, resume, checkpoint_every, progress, callback)


def _loop(model: nn.Module, temps: LearnableTemperatures, ids: torch.Tensor, plan: dict[str, Any],
          checkpoint: Path | None, resume: bool, every: int, progress: bool,
          callback: Callable[[int, float], None] | None) -> TrainResult:
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
            loss = next_token_loss(model, batch, plan["start"])
            loss.backward()
            opt.step()
            step, value = step + 1, float(loss.detach())
            losses.append(value)
            lrs.append(rate)
            if checkpoint is not None and (step % every == 0 or step == plan["steps"]):
                _save(checkpoint, {"step": step, "params": temps.state_dict(), "optimizer": opt.state_dict(),
                                   "losses": losses, "lrs": lrs, "meta": plan})
            bar.update(1)
            bar.set_postfix(loss=f"{value:.4f}")
            if callback is not None:
                callback(step, value)
    state = {k: v.detach().clone() for k, v in temps.state_dict().items()}
    spec = None if temps.slope is not None and bool((temps.slope != 0).any()) else temps.to_spec()
    return TrainResult(tuple(losses), tuple(lrs), plan["steps"], first, time.perf_counter() - t0, state, spec)


# ----------------------------------------------------------------------------- experiment
def _tail_start(start: str | int, length: int, trained_length: int) -> int:
    """``"tail"``: predictions past the trained length; ``"all"``: 0; an int: itself."""
    if start == "all":
        return 0
    if start == "tail":
        if length <= trained_length + 1:
            raise ValueError(f"start='tail' is not allowed at length={length} <= trained length "
                             f"{trained_length} + 1; pass start='all' or an int")
        return trained_length
    if isinstance(start, int) and not isinstance(start, bool) and 0 <= start < length - 1:
        return start
    raise ValueError(f"start={start!r} is not allowed; expected 'tail', 'all' or an int in [0, {length - 1})")


def _write_outputs(out: Path, spec: TemperatureSpec, temps: LearnableTemperatures, result: TrainResult,
                   log: dict[str, Any]) -> None:
    from . import plots

    spec.save(out / "learned_spec.json")
    plots.heatmap(temps.table().numpy(), out / "learned_heatmap.png", "learned multiplier m = 1/T",
                  "m", cmap="RdBu_r", center=1.0)
    state = {k: v.double().tolist() for k, v in result.state.items()}
    log = {**log, "losses": list(result.losses), "lrs": list(result.lrs), "resumed_from": result.resumed_from,
           "seconds": result.seconds, "state": state}
    (out / "train_log.json").write_text(json.dumps(log, indent=2) + "\n")


def run_gradient_tuning(
    model: nn.Module, tokenizer: Any, length: int, steps: int, out_dir: str | Path, granularity: str = "head",
    rope: dict[str, Any] | None = None, docs: list | None = None, n_train: int = 8, n_eval: int = 8,
    start: str | int = "tail", lr: float = 0.05, batch_size: int = 1, schedule: str | None = None,
    init: TemperatureSpec | None = None, progress: bool = True, gradient_checkpointing: bool = False,
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
    windows = tiny_eval.heldout_windows(tokenizer, length, n_train + n_eval, docs=docs)  # [n_train+n_eval, N]
    digests = {"train_windows": tiny_eval.windows_digest(windows[:n_train]),
               "eval_windows": tiny_eval.windows_digest(windows[n_train:])}
    windows = windows.to(next(model.parameters()).device)
    train_ids, eval_ids = windows[:n_train], windows[n_train:]
    base = _base_spec(init, rope)
    l0 = trained_length_of(model, base)
    first = _tail_start(start, length, l0)
    with patching.patch(model, (init or TemperatureSpec()).with_rope(dict(base.rope) or None)):
        before = tiny_eval.perplexity(model, eval_ids, first, batch_size=batch_size)
    evidence: dict[str, Any] = {}
    with learnable(model, init, granularity, schedule, rope=rope) as temps:
        result = train_temperatures(model, train_ids, steps, lr, first, batch_size, out / "checkpoint.pt",
                                    progress=progress, gradient_checkpointing=gradient_checkpointing,
                                    checkpoint_every=checkpoint_every)
        spec = temps.to_spec(constant_part=True)
        if result.spec is None:
            evidence["tail_ppl_after_learnable"] = tiny_eval.perplexity(model, eval_ids, first, batch_size)
    with patching.patch(model, spec):
        after = tiny_eval.perplexity(model, eval_ids, first, batch_size=batch_size)
    table = temps.table()
    evidence = {"length": length, "trained_length": l0, "start": first, "steps": steps,
                "granularity": granularity, "schedule": schedule, "rope": dict(base.rope) or None,
                "n_train": n_train, "n_eval": n_eval, "lr": lr, "tail_ppl_before": before,
                "tail_ppl_after": after, **evidence, "spec_is_constant_part": result.spec is None,
                "resumed_from": result.resumed_from, "loss_first": result.losses[0],
                "loss_last": result.losses[-1],
                "m_min": float(table.min()), "m_max": float(table.max()), "seconds_train": result.seconds,
                "seconds": time.perf_counter() - t0, **digests}
    _write_outputs(out, spec, temps, result, {k: evidence[k] for k in ("length", "start", "steps", "lr")})
    (out / "evidence.json").write_text(json.dumps(evidence, indent=2) + "\n")
    return spec, evidence
