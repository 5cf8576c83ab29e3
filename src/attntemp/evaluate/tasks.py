"""Registered evaluation tasks (lm-evaluation-harness style): each declares its metrics and
whether higher is better, and scores several logit multipliers m at once (one batch row per m,
folded into q by ``attntemp.hf.patch.batch_multipliers``).

Each task's metrics are the one source of their facts (name, higher-is-better, unit); the first is
the task's headline metric (tables and reports show it), ``objective`` the one tuning optimises.

- ``perplexity``: token-weighted perplexity by query-position bucket on held-out documents; the
  ``tail`` is the predictions made at positions >= the trained length (the last quarter when the
  length is within it).
- ``passkey``: the YaRN paper's passkey prompt; exact match of the greedy key, plus the mean
  log-probability of the key's tokens (a graded signal for small models).
- ``needle``: a fact hidden at several depths in real text (Gutenberg or stdlib), scored the
  same two ways, per depth.
- ``key_tokens`` (:mod:`.key_tokens`) and ``needles`` (:mod:`.needles`): perplexity on the tokens only distant context
  predicts, and many keyed facts scored in one forward.
- ``multikey`` (:mod:`.multikey`): keys found by generation, many per prefilled haystack;
  ``multikey_keys`` (:class:`.multikey.MultiKeyKeys`): the same, and the key-token perplexity of the
  haystack's own text from the same prefill.

The registry and the base classes are in :mod:`.task_base`; every name is importable from here.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import torch

from ..hf.patch import batch_multipliers
from . import corpus, needles
from .corpus import heldout_windows
from .key_tokens import KeyTokens
from .lm import answer_and_generate, first_integer, multiplier_nll, repeat_rows
from .multikey import MultiKey, MultiKeyKeys
from .needles import Needles
from .task_base import (
    TASKS,
    EvalContext,
    EvalOptions,
    EvalSettings,
    Metric,
    Task,
    eval_context,
    get_task,
    register_task,
    tail_start,
    tuning_context,
)

__all__ = [
    "NEEDLE",
    "NEEDLE_QUESTION",
    "TASKS",
    "EvalContext",
    "EvalOptions",
    "EvalSettings",
    "KeyTokens",
    "Metric",
    "MultiKey",
    "MultiKeyKeys",
    "Needle",
    "Needles",
    "Passkey",
    "Perplexity",
    "RetrievalTask",
    "Task",
    "eval_context",
    "get_task",
    "needle_prompt",
    "passkey_prompts",
    "register_task",
    "score_prompts",
    "tail_start",
    "tuning_context",
]

NEEDLE = "The special magic number is {key}."
NEEDLE_QUESTION = "What is the special magic number? The special magic number is"


@register_task
class Perplexity(Task):
    name = "perplexity"
    metrics = (
        Metric(
            "tail_ppl", False, "perplexity past the trained length", "perplexity", ("window_tail_nll", "tail_tokens")
        ),
        Metric("ppl", False, "perplexity", "perplexity", ("window_nll", "tokens")),
    )
    objective = "tail_ppl"
    per_window = ("window_nll", "window_tail_nll", "bucket_nll")

    def finish(self, merged):
        sums = [sum(w[i] for w in merged["bucket_nll"]) for i in range(len(merged["bucket_tokens"]))]
        n = len(merged["bucket_nll"])
        merged["bucket_ppl"] = [math.exp(s / (t * n)) for s, t in zip(sums, merged["bucket_tokens"], strict=True)]
        return merged

    def check_pair(self, a, b, metric):
        tok_key = metric.values[1]
        if a.get("windows_digest") != b.get("windows_digest") or a[tok_key] != b[tok_key]:
            raise ValueError("the two results were scored on different windows; a paired comparison needs the same")

    def evaluate(self, model, tok, length, multipliers, ctx):
        ids = ctx.pick(heldout_windows(tok, length, n=ctx.n_docs, docs=ctx.docs, n_name="n_docs"))  # [n, L]
        nll = multiplier_nll(model, ids, multipliers, ctx.batch_size)  # [k, n, L-1]
        start = tail_start(length, ctx.trained_length)
        edges = sorted({round(i * (length - 1) / 8) for i in range(9)})
        out = []
        digest = corpus.windows_digest(ids)
        for row in nll.double():  # [n, L-1]
            buckets = [math.exp(float(row[:, a:b].mean())) for a, b in itertools.pairwise(edges)]
            out.append(
                {
                    "ppl": math.exp(float(row.mean())),
                    "tail_ppl": math.exp(float(row[:, start:].mean())),
                    "tail_start": start,
                    "bucket_edges": edges,
                    "bucket_ppl": buckets,
                    # what the figures are made of: summed NLL per window (and per window and bucket)
                    "window_nll": row.sum(1).tolist(),
                    "window_tail_nll": row[:, start:].sum(1).tolist(),
                    "tokens": row.shape[1],
                    "tail_tokens": row.shape[1] - start,
                    "bucket_nll": [[float(w[a:b].sum()) for a, b in itertools.pairwise(edges)] for w in row],
                    "bucket_tokens": [b - a for a, b in itertools.pairwise(edges)],
                    "windows_digest": digest,
                }
            )
        return out


def _grouped(prompts: list[tuple[int, tuple[list[int], list[int], int]]]):
    """Group ``(index, (prompt ids, answer ids, key))`` by prompt and answer length (no padding)."""
    groups: dict[tuple[int, int], list] = {}
    for i, p in prompts:
        groups.setdefault((len(p[0]), len(p[1])), []).append((i, p))
    return list(groups.values())


@torch.no_grad()
def score_prompts(model, tok, prompts, multipliers, batch_size) -> list[dict[str, Any]]:
    """Exact match of the greedy key and mean log-probability of the answer tokens, per m; each
    trial's outcome (``hits``) and key log-probability (``logps``) kept, in the order of ``prompts``.

    The key is generated as a user runs the model: one prefill with a KV cache, then transformers'
    ``generate`` (greedy) for the answer's length plus 2 tokens, enough to read the first integer
    (and see that it ends where the key ends); the same prefill scores the answer teacher-forced
    (:func:`attntemp.evaluate.lm.answer_and_generate`)."""
    k = len(multipliers)
    hits, logps = torch.zeros(k, len(prompts)), torch.zeros(k, len(prompts))
    for group in _grouped(list(enumerate(prompts))):
        for a in range(0, len(group), max(1, batch_size // k)):
            order = [i for i, _ in group[a : a + max(1, batch_size // k)]]
            part = [p for _, p in group[a : a + max(1, batch_size // k)]]
            full = torch.tensor([p + ans for p, ans, _ in part])  # [n, P + A]
            rows, m = repeat_rows(full, multipliers)  # [k*n, P + A]
            plen = len(part[0][0])
            rows = rows.to(model.device)
            with batch_multipliers(model, m):  # one forward over the prompts for both scores
                ans_lp, gen = answer_and_generate(model, rows[:, :plen], rows[:, plen:], rows.shape[1] - plen + 2)
            texts = tok.batch_decode(gen, skip_special_tokens=True)
            keys = [key for _, _, key in part] * k
            ok = torch.tensor([first_integer(t) == key for t, key in zip(texts, keys, strict=True)]).float()
            hits[:, order] = ok.reshape(k, -1)  # [k, n]
            logps[:, order] = ans_lp.cpu().float().reshape(k, -1)  # [k, n]
    return [
        {"acc": float(h.mean()), "logp": float(lp.mean()), "hits": h.int().tolist(), "logps": lp.tolist()}
        for h, lp in zip(hits, logps, strict=True)
    ]


def _encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def _keyed(tok, rng: random.Random, prompt_for) -> tuple[list[int], list[int], int]:
    """A random key, its prompt's ids and the answer's ids (" {key}")."""
    key = rng.randint(*needles.KEY_RANGE)
    return _encode(tok, prompt_for(key)), _encode(tok, f" {key}"), key


class RetrievalTask(Task):
    """A task scored per trial: ``acc`` (Wilson interval) and ``logp`` (bootstrap over trials)."""

    metrics = (
        Metric("acc", True, "share of trials", "proportion", ("hits",)),
        Metric("logp", True, "nats per answer token", "mean", ("logps",)),
    )
    objective = "logp"
    per_window = ("hits", "logps")

    def finish(self, merged):
        for key in ("acc_by_depth", "logp_by_depth"):  # a block's by-depth figures are not the merged ones
            merged.pop(key, None)
        return merged


@register_task
class Passkey(RetrievalTask):
    name = "passkey"

    def evaluate(self, model, tok, length, multipliers, ctx):
        return score_prompts(model, tok, passkey_prompts(tok, length, ctx), multipliers, ctx.batch_size)


def passkey_prompts(tok, length: int, ctx: EvalContext) -> list[tuple[list[int], list[int], int]]:
    """The passkey task's ``(prompt ids, answer ids, key)`` at ``length`` on ``ctx`` (its seed and
    trials; the block :attr:`EvalContext.window_range` of them): what any other path that answers
    them (a baked checkpoint in plain transformers) must be given."""
    rng = random.Random(ctx.seed)
    prompts = [
        _keyed(tok, rng, lambda key: needles.passkey_prompt(key, length - 10, rng.random(), tok))
        for _ in range(ctx.trials)
    ]
    return list(ctx.pick(prompts))


def needle_prompt(tok, haystack: str, key: int, n_tokens: int, depth: float) -> str:
    """``haystack`` cut to fit ``n_tokens`` with the needle sentence at ``depth`` (at a line
    break near it), then the question."""
    fixed = len(_encode(tok, "\n" + NEEDLE.format(key=key) + "\n\n" + NEEDLE_QUESTION))
    budget = n_tokens - fixed
    if budget < 8:
        raise ValueError(f"n_tokens={n_tokens} is too short for a needle prompt (needs > {fixed + 8})")
    ids = _encode(tok, haystack)[:budget]
    text = tok.decode(ids)
    while len(_encode(tok, text)) > budget:  # decode/encode may not round-trip at the cut
        text = text[: int(len(text) * 0.98)]
    cut = round(depth * len(text))
    nl = text.rfind("\n", 0, cut) if 0 < cut < len(text) else cut
    cut = nl if nl > 0 else cut
    return text[:cut] + "\n" + NEEDLE.format(key=key) + "\n" + text[cut:] + "\n" + NEEDLE_QUESTION


@register_task
class Needle(RetrievalTask):
    name = "needle"

    def evaluate(self, model, tok, length, multipliers, ctx):
        hay = list(ctx.haystack) or corpus.split(list(ctx.docs), "heldout")
        hay = [d for d in hay if len(d.text) > 2 * length][: max(1, ctx.n_docs)]
        if not hay:
            raise ValueError(f"no haystack document is long enough for length={length}")
        rng = random.Random(ctx.seed)
        per_depth = []
        for depth in ctx.depths:
            prompts = [
                _keyed(
                    tok, rng, lambda key, t=t, d=depth: needle_prompt(tok, hay[t % len(hay)].text, key, length - 10, d)
                )
                for t in range(ctx.trials)
            ]
            per_depth.append(score_prompts(model, tok, list(ctx.pick(prompts)), multipliers, ctx.batch_size))
        out = []
        for i in range(len(multipliers)):
            accs = [d[i]["acc"] for d in per_depth]
            lps = [d[i]["logp"] for d in per_depth]
            out.append(
                {
                    "acc": sum(accs) / len(accs),
                    "logp": sum(lps) / len(lps),
                    "depths": list(ctx.depths),
                    "acc_by_depth": accs,
                    "logp_by_depth": lps,
                    "hits": [h for d in per_depth for h in d[i]["hits"]],  # trials of every depth, in order
                    "logps": [lp for d in per_depth for lp in d[i]["logps"]],
                }
            )
        return out


register_task(KeyTokens)  # after the tasks above: the registry lists them in this order
register_task(Needles)
register_task(MultiKey)
register_task(MultiKeyKeys)
