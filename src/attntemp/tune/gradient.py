"""Gradient tuning of temperatures: next-token loss on long text, every model weight frozen.

``train_temperatures`` trains the :class:`attntemp.hf.learnable.LearnableTemperatures` of a model
(AdamW, warmup then cosine decay, resumable checkpoints); ``run_gradient_tuning`` is the
experiment behind ``attntemp tune --method gradient``: train on held-out windows, score others.
With ``rope_factors="learn"`` it also learns LongRoPE's per-frequency factors (arXiv:2402.13753),
alone (``rope_temperature="none"``: m = 1; ``"longrope"``: LongRoPE's fixed cos/sin factor) or
jointly with the temperatures (``"learn"``).
"""

from __future__ import annotations

import json
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

from ..analysis import plots
from ..evaluate import corpus, lm
from ..hf import patch
from ..hf.learnable import LearnableTemperatures, base_spec, learnable, learnable_of, trained_length_of
from ..hf.rope_factors import factors_for
from ..ops.spec import TemperatureSpec
from ..utils import checks

ROPE_FACTORS = ("off", "learn")  # learn: LongRoPE's long_factor, one per rotary pair, by gradient
ROPE_TEMPERATURES = ("learn", "none", "longrope")  # with learned factors: m learned, m = 1, LongRoPE's scale


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
    ids: torch.Tensor | Sequence[torch.Tensor],
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
    masks: torch.Tensor | Sequence[torch.Tensor] | None = None,
    settings: dict[str, Any] | None = None,
) -> TrainResult:
    """Tune the temperatures on next-token loss of ``ids`` [N, L] (predictions at positions >= start),
    or of several such tensors of different lengths (step s trains on tensor ``s % k``: one spec
    learned from several lengths at once).

    AdamW (no weight decay) on the log-multipliers only, linear warmup (default 10% of steps) then
    cosine decay; step s uses rows ``s*batch_size ...`` of ``ids`` (cyclic). Inside ``learnable(model)``
    its module is trained; otherwise one is made from init/granularity/schedule/rope and the model is
    restored after. ``checkpoint``: saved every ``checkpoint_every`` steps and at the end, resumed from
    when ``resume``. ``callback(step, loss)`` runs after each step (after its checkpoint).
    ``masks``: ``[N, L-1]`` per tensor of ``ids``, the predictions the loss counts (key tokens,
    answer tokens: :func:`attntemp.evaluate.lm.masked_loss`) instead of those at positions >= start.
    ``settings``: recorded in the checkpoint (a caller's options), a resume must have the same.
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
            **({"rope_factors": temps.rope_factors.log_factor.numel()} if temps.rope_factors is not None else {}),
            "ids": ",".join(corpus.windows_digest(t.cpu()) for t in _groups(ids)),
            **(
                {"masks": ",".join(corpus.windows_digest(m.cpu()) for m in _groups(masks))} if masks is not None else {}
            ),
            **({"settings": _plain(settings)} if settings is not None else {}),
        }
        path = None if checkpoint is None else Path(checkpoint)
        return _loop(model, temps, ids, plan, path, resume, checkpoint_every, progress, callback, masks)


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
    ids: torch.Tensor | Sequence[torch.Tensor],
    plan: dict[str, Any],
    checkpoint: Path | None,
    resume: bool,
    every: int,
    progress: bool,
    callback: Callable[[int, float], None] | None,
    masks: torch.Tensor | Sequence[torch.Tensor] | None = None,
) -> TrainResult:
    opt = torch.optim.AdamW(temps.parameters(), lr=plan["lr"], weight_decay=0.0)
    step, losses, lrs, first = 0, [], [], 0
    if checkpoint is not None and resume and checkpoint.is_file():
        saved = _resume(checkpoint, temps, opt, plan)
        step, losses, lrs, first = saved["step"], list(saved["losses"]), list(saved["lrs"]), saved["step"]
    groups = _groups(ids)
    t0 = time.perf_counter()
    with tqdm(total=plan["steps"], initial=step, disable=not progress, desc="temperatures") as bar:
        while step < plan["steps"]:
            rate = lr_at(step, plan["steps"], plan["lr"], plan["warmup"])
            for group in opt.param_groups:
                group["lr"] = rate
            batch = _batch(groups, step, plan["batch_size"]).to(temps.log_m.device)  # [b, L]
            opt.zero_grad(set_to_none=True)
            if masks is None:
                loss = lm.next_token_loss(model, batch, plan["start"])
            else:  # the same rows of the masks: [b, L-1]
                loss = lm.masked_loss(model, batch, _batch(_groups(masks), step, plan["batch_size"]))
            loss.backward()
            opt.step()
            if temps.rope_factors is not None:
                temps.rope_factors.project()  # every factor stays >= 1
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
    return TrainResult(
        tuple(losses), tuple(lrs), plan["steps"], first, time.perf_counter() - t0, state, temps.to_spec()
    )


@torch.no_grad()
def _masked_ppl(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, batch_size: int) -> float:
    """``exp(mean NLL)`` of the predictions ``mask`` [n, L-1] keeps in ``ids`` [n, L]."""
    total, count = 0.0, 0
    for rows, keep in zip(ids.split(batch_size), mask.split(batch_size), strict=True):
        nll = lm.token_nll(model, rows)  # [b, L-1]
        total += float(nll[keep.to(nll.device)].double().sum())
        count += int(keep.sum())
    return math.exp(total / max(count, 1))


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
    if temps.slope is None:
        plots.multiplier_heatmap(temps.table().numpy(), out / "learned_heatmap.png", "learned multiplier m = 1/T")
    else:  # a length schedule: its slopes are the learning (m up to L0 is 1 for log_length_slope)
        slopes = temps.slope.detach().double().expand(temps.num_layers, temps.num_heads).cpu().numpy()  # [L, H]
        title = f"learned {temps.schedule}: ln m = a + b ln(max(1, n / L0)), L0 = {temps.trained_length}"
        plots.slope_heatmap(temps.table().numpy(), slopes, out / "learned_heatmap.png", title)
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


def _scores(
    before: list[float], after: list[float], result: TrainResult, temps: LearnableTemperatures
) -> dict[str, Any]:
    """The evidence's figures: tail perplexity before and after per length, the loss, the m range."""
    table = temps.table()
    return {
        "tail_ppl_before": before[0],
        "tail_ppl_after": after[0],
        "tail_ppl_before_by_length": before,
        "tail_ppl_after_by_length": after,
        "resumed_from": result.resumed_from,
        "loss_first": result.losses[0],
        "loss_last": result.losses[-1],
        "m_min": float(table.min()),
        "m_max": float(table.max()),
        "seconds_train": result.seconds,
    }


def run_gradient_tuning(
    model: nn.Module,
    tokenizer: Any,
    length: int | Sequence[int],
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
    rope_factors: str = "off",
    rope_temperature: str = "learn",
    targets: Callable[[int, int], tuple[torch.Tensor, torch.Tensor]] | None = None,
    settings: dict[str, Any] | None = None,
) -> tuple[TemperatureSpec, dict[str, Any]]:
    """Learn temperatures on ``n_train`` held-out windows of ``length`` tokens (or of each of
    several lengths, one spec for all); score ``n_eval`` other windows at each length.

    Writes out_dir/learned_spec.json, learned_heatmap.png, train_log.json, evidence.json and
    checkpoint.pt (a rerun resumes from it). Evidence: tail perplexity on the evaluation windows with
    the base (rope and init) before and the learned spec after, per length (the first length's
    under ``tail_ppl_before`` / ``tail_ppl_after``). ``rope_factors="learn"``: the factors start from
    ``rope`` and replace it in the spec (a ``longrope`` rope); ``rope_temperature`` as above.
    ``targets(length, n)``: ``([n, L] ids, [n, L-1] mask)`` to train on the masked predictions only
    (key tokens, needles' answers); the evidence adds their perplexity before and after
    (``objective_ppl_before`` / ``objective_ppl_after``, per length).
    """
    checks.choice("rope_factors", rope_factors, ROPE_FACTORS)
    checks.choice("rope_temperature", rope_temperature, ROPE_TEMPERATURES)
    lengths = [length] if isinstance(length, int) else list(length)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    device = next(model.parameters()).device
    pairs = [targets(n, n_train + n_eval) for n in lengths] if targets else []  # ([n, N], [n, N-1]) per length
    windows = [p[0] for p in pairs] or [
        corpus.heldout_windows(tokenizer, n, n_train + n_eval, docs=docs) for n in lengths
    ]
    masks = [p[1] for p in pairs]
    base = base_spec(init, rope)
    l0 = trained_length_of(model, base)
    first = 0 if masks else _tail_start(start, min(lengths), l0)
    kept = [m[:n_train].any(1) for m in masks]  # training windows without a masked prediction add nothing
    train_ids = (
        [w[:n_train][keep].to(device) for w, keep in zip(windows, kept, strict=True)]
        if masks
        else [w[:n_train].to(device) for w in windows]
    )
    eval_ids = [w[n_train:].to(device) for w in windows]
    with patch.patch(model, (init or TemperatureSpec()).with_rope(dict(base.rope) or None)):
        before = [lm.perplexity(model, e, first, batch_size=batch_size) for e in eval_ids]
        masked_before = [_masked_ppl(model, e, m[n_train:], batch_size) for e, m in zip(eval_ids, masks, strict=False)]
    factors = None
    if rope_factors == "learn":
        factors = factors_for(model, rope, max(lengths), longrope_scale=rope_temperature == "longrope")
    elif rope_temperature != "learn":
        raise ValueError(f"rope_temperature={rope_temperature!r} needs rope_factors='learn'")
    learn_m = rope_temperature == "learn"
    with learnable(
        model,
        init,
        granularity,
        schedule,
        rope=None if factors else rope,
        rope_factors=factors,
        learn_temperature=learn_m,
    ) as temps:
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
            masks=[m[:n_train][keep] for m, keep in zip(masks, kept, strict=True)] or None,
            settings=settings,
        )
    with patch.patch(model, result.spec):
        after = [lm.perplexity(model, e, first, batch_size=batch_size) for e in eval_ids]
        masked_after = [_masked_ppl(model, e, m[n_train:], batch_size) for e, m in zip(eval_ids, masks, strict=False)]
    evidence = {
        "length": lengths[0],
        "lengths": lengths,
        "trained_length": l0,
        "start": first,
        "steps": steps,
        "granularity": granularity,
        "schedule": schedule,
        "rope": dict(base.rope) or None,
        "n_train": n_train,
        "n_eval": n_eval,
        "lr": lr,
        "rope_factors": rope_factors,
        "rope_temperature": rope_temperature,
        **_scores(before, after, result, temps),
        **({"objective_ppl_before": masked_before, "objective_ppl_after": masked_after} if masks else {}),
        "seconds": time.perf_counter() - t0,
        "train_windows": ",".join(corpus.windows_digest(w[:n_train]) for w in windows),
        "eval_windows": ",".join(corpus.windows_digest(w[n_train:]) for w in windows),
    }
    _write_outputs(out, result.spec, temps, result, {k: evidence[k] for k in ("lengths", "start", "steps", "lr")})
    (out / "evidence.json").write_text(json.dumps(evidence, indent=2) + "\n")
    return result.spec, evidence
