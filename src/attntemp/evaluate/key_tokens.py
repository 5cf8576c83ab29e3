"""Key-token perplexity: perplexity on the tokens whose prediction needs distant context only.

Tail perplexity averages over every token past the trained length, and most of those the last
few hundred tokens already predict. LongPPL (Fang et al., ICLR 2025, arXiv:2410.23771) scores
*key tokens* only, and that correlates -0.96 with LongBench / RULER. Which tokens are key never
depends on the spec under test (the rule sees the text, or an evaluator model run without the
spec), so two specs are compared on the same tokens; a digest of the key positions is stored
beside ``windows_digest`` and a paired comparison of different ones is refused.

Two rules, each stated in the results (``rule``):

- the n-gram rule (default, model-free): ``x_t`` is key when the ``n`` tokens before it last
  occurred more than ``K`` tokens back in the window and were followed there by ``x_t`` too: a
  copy only distant context makes possible (:func:`key_positions`);
- LongPPL's rule (``key_evaluator``): ``x_t`` is key when the evaluator's
  ``log p(x_t | window) - log p(x_t | last K..K+S-1 tokens) > alpha`` and
  ``log p(x_t | window) > beta`` (the package's defaults: alpha 2, beta -2, K 4096, S 1024 =
  K / 4); computed once per window and cached as JSON under ``$ATTNTEMP_CACHE/key_tokens``.

K defaults to half the trained length: key tokens exist at the trained length itself (a baseline
to compare longer windows with) and their evidence lies further back than a local copy reaches.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import torch

from ..hf import preflight
from ..hf.loading import cache_dir, load_model
from . import corpus
from .corpus import heldout_windows
from .lm import multiplier_nll, token_nll
from .task_base import EvalContext, Metric, Task, tail_start


def key_positions(ids: torch.Tensor, n: int, distance: int) -> torch.Tensor:
    """``[L]`` bool: ``x_t`` is key when ``ids[t-n:t]`` last occurred (before ``t``) with its
    next token more than ``distance`` back, and that next token was ``x_t`` too.

    Vectorised: ``n`` stable sorts put equal n-grams next to each other in position order, so each
    one's predecessor in the sorted order is its most recent earlier occurrence. O(n L log L) time,
    O(n L) memory; :func:`key_positions_loop` is the plain reference."""
    length = ids.shape[0]
    out = torch.zeros(length, dtype=torch.bool)  # [L]
    if length <= n:
        return out
    grams = ids.unfold(0, n, 1)[: length - n]  # [L-n, n]: row i is the context of target i + n
    order = torch.arange(length - n)  # [L-n]
    for col in reversed(range(n)):  # least significant column first: a lexicographic sort
        order = order[torch.sort(grams[order, col], stable=True).indices]  # [L-n]
    ranked = grams[order]  # [L-n, n]
    same = (ranked[1:] == ranked[:-1]).all(1)  # [L-n-1]: equal to the row before it in sorted order
    prev = torch.full((length - n,), -1, dtype=torch.long)  # [L-n]
    prev[order[1:][same]] = order[:-1][same]
    target = torch.arange(length - n) + n  # [L-n]
    earlier = prev + n  # [L-n]: the token that followed the previous occurrence
    found = prev >= 0  # [L-n]
    out[n:] = found & (target - earlier > distance) & (ids[earlier.clamp(min=0)] == ids[target])
    return out


def key_positions_loop(ids: list[int], n: int, distance: int) -> list[bool]:
    """The reference of :func:`key_positions`: one pass with a dict of each n-gram's last position."""
    last: dict[tuple[int, ...], int] = {}
    out = [False] * len(ids)
    for t in range(n, len(ids)):
        gram = tuple(ids[t - n : t])
        if gram in last:
            j = last[gram]
            out[t] = t - j > distance and ids[j] == ids[t]
        last[gram] = t
    return out


def ngram_rule(n: int, distance: int) -> str:
    return (
        f"n-gram rule: x_t is key when x_(t-{n})..x_(t-1) last occurred more than {distance} tokens back, "
        "followed there by x_t"
    )


def evaluator_rule(evaluator: str, distance: int, alpha: float, beta: float) -> str:
    return (
        f"LongPPL rule (arXiv:2410.23771), evaluator {evaluator}: log p(x_t | window) - log p(x_t | last "
        f"{distance}..{distance + short_stride(distance) - 1} tokens) > {alpha:g} and log p(x_t | window) > {beta:g}"
    )


def short_stride(distance: int) -> int:
    """S: predictions that share one short context (LongPPL's 1024 for K = 4096: K / 4)."""
    return max(1, distance // 4)


@torch.no_grad()
def short_context_nll(model: Any, ids: torch.Tensor, context: int, stride: int, batch_size: int = 8) -> torch.Tensor:
    """``[n, L-1]`` NLL of ``ids`` ``[n, L]`` when each prediction sees its last ``context`` to
    ``context + stride - 1`` tokens only (all of them before ``context``): forwards of
    ``context + stride`` tokens every ``stride`` tokens (LongPPL's short context)."""
    length = ids.shape[1]
    span = context + stride

    def scored(a: int, first: int) -> torch.Tensor:  # [n, c]: predictions at a + first ... of ids[a : a + span]
        window = ids[:, a : a + span]  # [n, <= span]
        return torch.cat([token_nll(model, w.to(model.device), first).cpu() for w in window.split(batch_size)])

    cols = [scored(0, 0)]  # the first window scores every prediction in it (each sees all before it)
    covered, a = min(span, length) - 1, stride  # targets 1..covered done
    while covered < length - 1:
        cols.append(scored(a, context - 1))  # targets a + context ... a + span - 1
        covered, a = min(a + span, length) - 1, a + stride
    return torch.cat(cols, dim=1)  # [n, L-1]


def _cache_file(ids: torch.Tensor, ctx: EvalContext) -> Any:
    name = json.dumps(
        [
            corpus.windows_digest(ids),
            ctx.key_evaluator,
            preflight.fingerprint(ctx.key_evaluator or ""),
            ctx.key_span,
            ctx.key_alpha,
            ctx.key_beta,
        ]
    )
    return cache_dir() / "key_tokens" / (hashlib.sha256(name.encode()).hexdigest()[:24] + ".json")


def evaluator_mask(evaluator: Any, ids: torch.Tensor, ctx: EvalContext) -> torch.Tensor:
    """``[n, L-1]`` key predictions by LongPPL's rule under ``evaluator`` (a model without any spec)."""
    k = ctx.key_span
    full = -token_nll_rows(evaluator, ids, ctx.batch_size)  # [n, L-1]: log p with the whole window
    short = -short_context_nll(evaluator, ids, k, short_stride(k), ctx.batch_size)  # [n, L-1]
    mask = (full - short > ctx.key_alpha) & (full > ctx.key_beta)  # [n, L-1]
    mask[:, : k - 1] = False  # the first K targets see no more than K tokens either way
    return mask


@torch.no_grad()
def token_nll_rows(model: Any, ids: torch.Tensor, batch_size: int) -> torch.Tensor:
    """``[n, L-1]`` NLL of ``ids`` ``[n, L]``, ``batch_size`` rows per forward."""
    return torch.cat([token_nll(model, rows.to(model.device)).cpu() for rows in ids.split(batch_size)])


def _evaluated(ids: torch.Tensor, tok: Any, ctx: EvalContext) -> torch.Tensor:
    """LongPPL key predictions from the JSON cache, or the evaluator run once and cached."""
    path = _cache_file(ids, ctx)
    if path.is_file():
        cols = json.loads(path.read_text())["columns"]
        mask = torch.zeros(ids.shape[0], ids.shape[1] - 1, dtype=torch.bool)
        for row, c in zip(mask, cols, strict=True):
            row[c] = True
        return mask
    evaluator, etok = load_model(str(ctx.key_evaluator))
    if etok.get_vocab() != tok.get_vocab():
        raise ValueError(
            f"key_evaluator={ctx.key_evaluator!r} has another tokenizer than the model; key tokens are "
            "positions in the model's ids: give an evaluator with the same tokenizer"
        )
    mask = evaluator_mask(evaluator, ids, ctx)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"columns": [row.nonzero().flatten().tolist() for row in mask]}))
    tmp.replace(path)
    return mask


def key_mask(ids: torch.Tensor, tok: Any, ctx: EvalContext) -> tuple[torch.Tensor, str]:
    """``([n, L-1] key predictions, rule)`` of windows ``ids`` ``[n, L]``: column c predicts ``ids[:, c+1]``."""
    k = ctx.key_span
    if ctx.key_evaluator:
        return _evaluated(ids, tok, ctx), evaluator_rule(ctx.key_evaluator, k, ctx.key_alpha, ctx.key_beta)
    mask = torch.stack([key_positions(row, ctx.key_ngram, k)[1:] for row in ids])  # [n, L-1]
    return mask, ngram_rule(ctx.key_ngram, k)


def mask_digest(mask: torch.Tensor, rule: str) -> str:
    """sha256 of the rule and the key positions: two results paired only when it is the same."""
    h = hashlib.sha256(rule.encode())
    for row in mask:
        h.update(row.nonzero().flatten().to(torch.int64).numpy().tobytes() + b";")
    return h.hexdigest()


def key_token_targets(tok: Any, length: int, n: int, ctx: EvalContext) -> tuple[torch.Tensor, torch.Tensor]:
    """``([n, L] windows, [n, L-1] key predictions)`` of ``ctx.docs``: what gradient tuning trains on."""
    ids = heldout_windows(tok, length, n=n, docs=ctx.docs)  # [n, L]
    mask, rule = key_mask(ids, tok, ctx)
    if not bool(mask.any()):
        raise ValueError(no_key_tokens(n, length, rule, ctx))
    return ids, mask


def no_key_tokens(n: int, length: int, rule: str, ctx: EvalContext) -> str:
    """The refusal when no window holds a key token, naming the options that decide them."""
    knobs = (
        f"a smaller key_distance={ctx.key_span} or key_alpha={ctx.key_alpha:g}"
        if ctx.key_evaluator
        else f"a smaller key_distance={ctx.key_span} or key_ngram={ctx.key_ngram}"
    )
    return f"no key tokens in {n} windows of {length} tokens ({rule}): give longer windows, {knobs}, or another text"


KEY_PPL = Metric("key_ppl", False, "perplexity on key tokens", "perplexity", ("window_key_nll", "window_key_tokens"))
KEY_COUNT = Metric("key_tokens", True, "key tokens per window (one set for every spec)", "mean", ("window_key_tokens",))


def windows_with_keys(values: list[Any], tokens: list[Any]) -> tuple[list[Any], list[Any]]:
    """A perplexity's summed NLL and token count of the windows that hold any of its tokens
    (windows without key tokens add nothing to either sum)."""
    kept = [(a, t) for a, t in zip(values, tokens, strict=True) if t > 0]
    return [a for a, _ in kept], [t for _, t in kept]


class KeyCounted(Task):
    """What a task that scores key tokens per window shares: the merged result's total of key tokens,
    and a perplexity's values from the windows that hold any (:func:`windows_with_keys`)."""

    def finish(self, merged):
        merged = super().finish(merged)
        merged["key_tokens_total"] = int(sum(merged["window_key_tokens"]))
        return merged

    def values_of(self, result, metric):
        values, tokens = super().values_of(result, metric)
        return (values, None) if tokens is None else windows_with_keys(values, tokens)


class KeyTokens(KeyCounted):
    """Perplexity on key tokens (headline), their count per window, and all-token tail perplexity."""

    name = "key_tokens"
    metrics = (
        KEY_PPL,
        Metric(
            "tail_ppl", False, "perplexity past the trained length", "perplexity", ("window_tail_nll", "window_tail")
        ),
        KEY_COUNT,
    )
    objective = "key_ppl"
    per_window = ("window_key_tokens", "window_tail", "window_key_nll", "window_tail_nll")

    def check_pair(self, a, b, metric):
        for key in ("windows_digest", "key_digest"):
            if a.get(key) != b.get(key):
                raise ValueError(
                    f"the two results were scored on different windows or key tokens ({key} differs); "
                    "a paired comparison needs the same"
                )

    def evaluate(self, model, tok, length, multipliers, ctx):
        ids = ctx.pick(heldout_windows(tok, length, n=ctx.n_docs, docs=ctx.docs, n_name="n_docs"))  # [n, L]
        mask, rule = key_mask(ids, tok, ctx)  # [n, L-1]
        if not bool(mask.any()) and ctx.window_range is None:  # a block of a race may hold none: it adds nothing
            raise ValueError(no_key_tokens(ids.shape[0], length, rule, ctx))
        start = tail_start(length, ctx.trained_length)
        keep = mask.any(0)  # [L-1]: the LM head runs where a metric reads, key tokens and the tail
        keep[start:] = True
        nll = multiplier_nll(model, ids, multipliers, ctx.batch_size, keep).double()  # [k, n, L-1], NaN elsewhere
        counts = mask.sum(1)  # [n]
        common = {
            "rule": rule,
            "key_digest": mask_digest(mask, rule),
            "windows_digest": corpus.windows_digest(ids),
            "key_tokens": float(counts.double().mean()),
            "key_tokens_total": int(counts.sum()),
            "window_key_tokens": counts.tolist(),
            "window_tail": [length - 1 - start] * ids.shape[0],
            "tail_start": start,
        }
        out = []
        for row in nll:  # [n, L-1]
            key_nll = torch.where(mask, row, 0.0).sum(1)  # [n]
            out.append(
                {
                    **common,
                    "key_ppl": math.exp(float(key_nll.sum()) / int(counts.sum())) if counts.sum() else math.nan,
                    "tail_ppl": math.exp(float(row[:, start:].mean())),
                    "window_key_nll": key_nll.tolist(),
                    "window_tail_nll": row[:, start:].sum(1).tolist(),
                }
            )
        return out
