"""Gradient tuning of temperatures: next-token loss on long text, every model weight frozen.

:func:`attntemp.tune.train.train_temperatures` trains the learnable temperatures of a model
(AdamW, warmup then cosine decay, resumable checkpoints); :func:`run_gradient_tuning` is the
experiment behind ``attntemp tune --method gradient``: train on held-out windows, score others,
its settings whole in one :class:`GradientOptions`.
With ``rope_factors="learn"`` it also learns LongRoPE's per-frequency factors (arXiv:2402.13753),
alone (``rope_temperature="none"``: m = 1; ``"longrope"``: LongRoPE's fixed cos/sin factor) or
jointly with the temperatures (``"learn"``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..analysis import plots
from ..evaluate import corpus, lm
from ..hf import patch
from ..hf.learnable import LearnableTemperatures, base_spec, learnable, trained_length_of
from ..hf.rope_factors import factors_for
from ..ops.spec import TemperatureSpec
from ..utils import checks
from .config import ROPE_FACTORS, ROPE_TEMPERATURES
from .train import TrainOptions, TrainResult, train_temperatures

Targets = Callable[[int, int], tuple[torch.Tensor, torch.Tensor]]  # (length, n) -> ([n, L] ids, [n, L-1] mask)


@dataclass(frozen=True, kw_only=True)
class GradientOptions:
    """:func:`run_gradient_tuning`'s settings: the tuning ``lengths`` (one spec for all), ``n_train``
    windows to train on and ``n_eval`` others to score at each, the loss's ``start`` (``"tail"``:
    past the trained length; ``"all"``; an int), the training itself (:class:`TrainOptions`: steps,
    lr, granularity, schedule, rope, init, ...; its own ``start`` is set from ``start`` here), and
    ``rope_factors="learn"`` to learn LongRoPE's factors from ``train.rope`` with
    ``rope_temperature`` as the module docstring says."""

    lengths: tuple[int, ...]
    train: TrainOptions
    n_train: int = 8
    n_eval: int = 8
    start: str | int = "tail"
    rope_factors: str = "off"
    rope_temperature: str = "learn"

    def __post_init__(self) -> None:
        checks.choice("rope_factors", self.rope_factors, ROPE_FACTORS)
        checks.choice("rope_temperature", self.rope_temperature, ROPE_TEMPERATURES)
        if not self.lengths:
            raise ValueError("lengths=() is not allowed; expected at least one tuning length")
        if self.rope_factors != "learn" and self.rope_temperature != "learn":
            raise ValueError(f"rope_temperature={self.rope_temperature!r} needs rope_factors='learn'")


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
    opts: GradientOptions,
    out_dir: str | Path,
    docs: list | None = None,
    targets: Targets | None = None,
) -> tuple[TemperatureSpec, dict[str, Any]]:
    """Learn temperatures on ``opts.n_train`` held-out windows (of ``docs``, default the stdlib) of
    each tuning length (one spec for all); score ``opts.n_eval`` other windows at each length.

    Writes out_dir/learned_spec.json, learned_heatmap.png, train_log.json and checkpoint.pt (a
    rerun resumes from it); returns the spec and the evidence: tail perplexity on the evaluation
    windows with the base (rope and init) before and the learned spec after, per length (the first
    length's under ``tail_ppl_before`` / ``tail_ppl_after``). ``rope_factors="learn"``: the factors
    start from the rope and replace it in the spec (a ``longrope`` rope). ``targets(length, n)``:
    ``([n, L] ids, [n, L-1] mask)`` to train on the masked predictions only (key tokens, needles'
    answers); the evidence adds their perplexity before and after (``objective_ppl_before`` /
    ``objective_ppl_after``, per length).
    """
    t, lengths, n_train = opts.train, list(opts.lengths), opts.n_train
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    device = next(model.parameters()).device
    pairs = [targets(n, n_train + opts.n_eval) for n in lengths] if targets else []  # ([n, N], [n, N-1]) per length
    windows = [p[0] for p in pairs] or [
        corpus.heldout_windows(tokenizer, n, n_train + opts.n_eval, docs=docs) for n in lengths
    ]
    masks = [p[1] for p in pairs]
    base = base_spec(t.init, t.rope)
    l0 = trained_length_of(model, base)
    first = 0 if masks else _tail_start(opts.start, min(lengths), l0)
    kept = [m[:n_train].any(1) for m in masks]  # training windows without a masked prediction add nothing
    train_ids = (
        [w[:n_train][keep].to(device) for w, keep in zip(windows, kept, strict=True)]
        if masks
        else [w[:n_train].to(device) for w in windows]
    )
    eval_ids = [w[n_train:].to(device) for w in windows]
    eval_masks = [m[n_train:] for m in masks]
    with patch.patch(model, (t.init or TemperatureSpec()).with_rope(base.rope.to_dict() or None)):
        before, masked_before = _tail_ppls(model, eval_ids, eval_masks, first, t.batch_size)
    train_masks = [m[:n_train][keep] for m, keep in zip(masks, kept, strict=True)] or None
    result, temps = learn(model, train_ids, train_masks, opts, out / "checkpoint.pt", first)
    with patch.patch(model, result.spec):
        after, masked_after = _tail_ppls(model, eval_ids, eval_masks, first, t.batch_size)
    evidence = {
        "length": lengths[0],
        "lengths": lengths,
        "trained_length": l0,
        "start": first,
        "steps": t.steps,
        "granularity": t.granularity,
        "schedule": t.schedule,
        "rope": base.rope.to_dict() or None,
        "n_train": n_train,
        "n_eval": opts.n_eval,
        "lr": t.lr,
        "rope_factors": opts.rope_factors,
        "rope_temperature": opts.rope_temperature,
        **_scores(before, after, result, temps),
        **({"objective_ppl_before": masked_before, "objective_ppl_after": masked_after} if masks else {}),
        "seconds": time.perf_counter() - t0,
        "train_windows": ",".join(corpus.windows_digest(w[:n_train]) for w in windows),
        "eval_windows": ",".join(corpus.windows_digest(w[n_train:]) for w in windows),
    }
    _write_outputs(out, result.spec, temps, result, {k: evidence[k] for k in ("lengths", "start", "steps", "lr")})
    return result.spec, evidence


def learn(
    model: nn.Module,
    ids: list[torch.Tensor],
    masks: list[torch.Tensor] | None,
    opts: GradientOptions,
    checkpoint: Path | None,
    start: int = 0,
) -> tuple[TrainResult, LearnableTemperatures]:
    """Train what ``opts`` learns (the temperatures, LongRoPE's factors from ``opts.train.rope``, or
    both) on ``ids`` (one ``[n, L]`` tensor per length; the loss on the predictions ``masks`` keeps,
    else on those past ``start``), every model weight frozen and the model restored after; resumed
    from ``checkpoint``. Returns the training's result (``.spec``: what was learned) and the module."""
    t = opts.train
    factors = None
    if opts.rope_factors == "learn":
        factors = factors_for(model, t.rope, max(opts.lengths), longrope_scale=opts.rope_temperature == "longrope")
    learn_m = opts.rope_temperature == "learn"
    rope = None if factors else t.rope
    with learnable(
        model, t.init, t.granularity, t.schedule, rope=rope, rope_factors=factors, learn_temperature=learn_m
    ) as temps:
        inside = replace(t, start=start, init=None, schedule=None, rope=None)  # the module holds them
        return train_temperatures(model, ids, inside, checkpoint, masks), temps


def _tail_ppls(
    model: nn.Module, eval_ids: list[torch.Tensor], masks: list[torch.Tensor], first: int, batch_size: int
) -> tuple[list[float], list[float]]:
    """Perplexity past ``first`` of each length's evaluation windows ``[n, L]``, and of the
    predictions each mask ``[n, L-1]`` keeps (none without masks), under the patch in force."""
    tails = [lm.perplexity(model, e, first, batch_size=batch_size) for e in eval_ids]
    return tails, [_masked_ppl(model, e, m, batch_size) for e, m in zip(eval_ids, masks, strict=False)]
