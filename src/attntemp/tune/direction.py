"""Which way each head wants its temperature: the gradient of the key-token loss with respect to
each head's log-multiplier ln m, taken at a spec (no change by default), one value per window.

    g[l, h] = d/d ln m[l, h]  (mean NLL over the window's key tokens)

A head whose g is below 0 on every resample of the windows (its interval below 0) lowers the loss
as its m grows: it wants sharpening (m > 1, T < 1); above 0 it wants softening (m < 1, T > 1). This
is the first step of the per-head gradient tuning of :mod:`.train` (AdamW on ln m) taken where it
starts, kept window by window so each head's direction has an interval, and cheap enough for long
windows (one forward and one backward with each decoder layer checkpointed).

Set beside the attention diagnosis (:func:`attntemp.advise.diagnose.head_shift`), it tests the
two stories of what goes wrong past the trained length: heads that *collapse* onto recent tokens
should want softening; heads that *diffuse* should want sharpening (log-n scaling, Chiang and
Cholak 2022, "Overcoming a theoretical limitation of self-attention"; Scalable-Softmax,
Nakanishi 2025).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ..evaluate.lm import token_nll
from ..hf.learnable import learnable, learnable_of
from ..ops.intervals import mean_interval
from ..ops.spec import TemperatureSpec
from .train import training_mode

DIRECTIONS = ("sharper", "softer", "not distinguishable")


def window_gradient(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> tuple[np.ndarray, float]:
    """``(g [layers, heads], loss)`` of one window ``ids`` ``[L]`` on the predictions ``mask``
    ``[L-1]`` keeps, inside ``learnable(model)`` (its ``log_m`` per head is the only leaf)."""
    if not bool(mask.any()):
        raise ValueError("mask keeps no prediction; a window needs at least one key token")
    temps = learnable_of(model)
    if temps is None:
        raise ValueError("window_gradient runs inside learnable(model); use head_gradients")
    temps.zero_grad(set_to_none=True)
    nll = token_nll(model, ids[None].to(next(model.parameters()).device), keep=mask)  # [1, L-1], NaN where not kept
    loss = nll[0][mask.to(nll.device)].mean()  # scalar: mean NLL over the key tokens
    loss.backward()
    if temps.log_m.grad is None:
        raise ValueError("the loss does not depend on the heads' multipliers: no gradient reached log_m")
    grad = temps.log_m.grad.detach().double().cpu()  # [layers, heads]
    return grad.numpy().copy(), float(loss.detach())


def head_gradients(
    model: nn.Module,
    ids: torch.Tensor,
    masks: torch.Tensor,
    at: TemperatureSpec | None = None,
    checkpointing: bool = True,
    done: Callable[[int, np.ndarray, float], None] | None = None,
    skip: Sequence[int] = (),
) -> list[np.ndarray]:
    """Per window of ``ids`` ``[n, L]`` (its key tokens ``masks`` ``[n, L-1]``), the per-head
    gradient ``[layers, heads]`` at the spec ``at``; ``done(i, g, loss)`` after each window (a
    caller stores it: the run resumes), windows in ``skip`` left out. The model is restored after."""
    out = []
    with learnable(model, at, "head"), training_mode(model, checkpointing):
        for i in range(ids.shape[0]):
            if i in skip:
                continue
            g, loss = window_gradient(model, ids[i], masks[i])
            out.append(g)
            if done is not None:
                done(i, g, loss)
    return out


def direction(grads: Sequence[np.ndarray], seed: int = 0) -> dict[str, Any]:
    """Each head's mean gradient over the windows with its 95% interval (bootstrap over windows),
    and its direction: "sharper" (interval below 0), "softer" (above 0), else not distinguishable."""
    if len(grads) < 2:
        raise ValueError(f"{len(grads)} windows: a direction's interval needs at least 2")
    g = np.stack(grads)  # [n, layers, heads]
    mean = g.mean(0)  # [layers, heads]
    low, high = np.empty_like(mean), np.empty_like(mean)
    for idx in np.ndindex(mean.shape):
        ci = mean_interval(g[(slice(None), *idx)].tolist(), seed=seed)
        low[idx], high[idx] = ci.low, ci.high
    label = np.where(high < 0, DIRECTIONS[0], np.where(low > 0, DIRECTIONS[1], DIRECTIONS[2]))  # [layers, heads]
    return {"windows": len(grads), "mean": mean, "low": low, "high": high, "direction": label}


def sign_flip_null(grads: Sequence[np.ndarray], most: int = 256, seed: int = 0) -> dict[str, Any]:
    """How many heads :func:`direction` labels when each window's gradient has its sign flipped at
    random, all heads of a window together (so the heads stay as correlated as they are): the count
    the labels reach by chance with this few windows. Every pattern when 2^n <= ``most``, else
    ``most`` random ones; ``found`` is the count on the gradients as they are."""
    g = np.stack(grads)  # [n, layers, heads]
    n = len(g)
    if 2**n <= most:
        patterns = np.array(list(itertools.product((1.0, -1.0), repeat=n)))  # [2^n, n]
    else:
        patterns = np.random.default_rng(seed).choice([1.0, -1.0], (most, n))  # [most, n]

    def labelled(x: np.ndarray) -> int:
        return int((direction(list(x), seed)["direction"] != DIRECTIONS[2]).sum())

    counts = np.array([labelled(g * p[:, None, None]) for p in patterns])  # [patterns]
    return {"found": labelled(g), "null_mean": float(counts.mean()), "null_95": float(np.percentile(counts, 95)),
            "patterns": len(patterns)}  # fmt: skip


def predicted(shift: dict[str, Any], layers: int, heads: int) -> np.ndarray:
    """The direction the diagnosis predicts per head ``[layers, heads]``: "softer" for a head that
    collapses onto recent tokens, "sharper" for one that diffuses, "" for the others."""
    out = np.full((layers, heads), "", dtype=object)
    for layer, head in shift["collapsed"]:
        out[layer, head] = "softer"
    for layer, head in shift["diffused"]:
        out[layer, head] = "sharper"
    return out


def agreement(
    found: dict[str, Any], shift: dict[str, Any], grads: Sequence[np.ndarray], resamples: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """How the diagnosis' prediction meets the gradient's direction: counts by (predicted, found),
    and the rank correlation over heads of each shift (recent-token mass, entropy / ln n) with the
    mean gradient, its 95% interval from resampling the windows ``grads`` (a positive one for the
    recent mass: the more a head collapses, the more it wants softening)."""
    label = found["direction"]
    guess = predicted(shift, *label.shape)
    counts: dict[str, dict[str, int]] = {}
    for p in ("softer", "sharper", ""):
        row = label[guess == p]
        counts[p or "no prediction"] = {d: int((row == d).sum()) for d in DIRECTIONS}
    out: dict[str, Any] = {"counts": counts}
    for key, name in (("recent_mass_shift", "spearman_recent"), ("norm_entropy_shift", "spearman_entropy")):
        out[name] = rank_correlation(np.asarray(shift[key], dtype=float), grads, resamples, seed)
    return out


def rank_correlation(
    x: np.ndarray, grads: Sequence[np.ndarray], resamples: int = 1000, seed: int = 0
) -> dict[str, float]:
    """Spearman's rank correlation over heads of ``x`` ``[layers, heads]`` with the windows' mean
    gradient, and its 95% interval from resampling the windows ``grads`` (``{"value", "low", "high"}``)."""
    g = np.stack(grads).reshape(len(grads), -1)  # [n, layers * heads]
    flat = np.asarray(x, dtype=float).ravel()  # [layers * heads]
    picks = np.random.default_rng(seed).integers(0, len(g), (resamples, len(g)))  # [resamples, n]
    boot = [_spearman(flat, g[rows].mean(0)) for rows in picks]
    low, high = np.nanpercentile(boot, [2.5, 97.5])
    return {"value": _spearman(flat, g.mean(0)), "low": float(low), "high": float(high)}


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    ra, rb = _ranks(a), _ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=float)
    for v in np.unique(x):  # ties share their mean rank
        tie = x == v
        ranks[tie] = ranks[tie].mean()
    return ranks
