"""Retrieval by generation, many trials per prefill: ``k`` keyed facts hidden at spread depths in a
real-text haystack (the :mod:`.needles` form; RULER's multi-key NIAH, arXiv:2404.06654), the
haystack prefilled once, then each of the ``k`` questions asked from a copy of its KV cache and
answered by greedy ``generate``, scored by exact match of the first integer with the key (the YaRN
paper's passkey protocol, arXiv:2309.00071); the answer's log-probability comes from the same
branch (:func:`attntemp.evaluate.lm.answer_and_generate` with ``prefix``).

One haystack is ``k`` correlated trials, so the intervals resample haystacks (the ``mean`` rule
over per-haystack shares) and two specs pair on the same haystacks.

The shortcut equals asking each question after a prefill of its whole prompt (the reference path,
:func:`score_one_by_one`, tested equal on the tiny model) wherever the RoPE does not depend on the
forward's length. transformers' dynamic NTK does: it grows its base with the longest position of
each forward, so a prefill of the haystack alone (P positions) and one of the whole prompt (P plus
the question) rotate with slightly different bases, and the two paths can differ there.

One prefill, two axes (:class:`MultiKeyKeys`, task ``multikey_keys``): the haystack's prefill for
its questions also scores **its own text's key tokens** (LongPPL's measure, arXiv:2410.23771, by the
n-gram rule of :mod:`.key_tokens`), the LM head at those positions only. The rule is
:func:`attntemp.evaluate.key_tokens.key_positions` itself, applied to the haystack's ids with every
fact token replaced by an id of its own that no other position holds (:func:`own_text`): a target
inside a fact is never key, nor one whose n-gram runs through a fact, nor one whose earlier
occurrence lies in one (the facts' repeated template would otherwise make most of fact 2..k's
tokens key). Distances are the prefill's positions, facts included; the questions are never in
the prefill. Only the n-gram rule: LongPPL's evaluator rule (``key_evaluator``) would need the
evaluator run on every haystack and is refused.

The task ``multikey_keys`` has :class:`MultiKey`'s metrics (``acc``, ``logp``: the same
haystacks, the same answers, tested) and :class:`~.key_tokens.KeyTokens`' ``key_ppl`` and
``key_tokens``, per haystack (intervals resample haystacks; one without key tokens adds nothing to
the perplexity). Its ``objective`` is ``key_ppl``: what ``attntemp advise --shared-prefill`` races
on. A task of its own, so ``multikey`` and ``key_tokens`` results keep their store keys.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence

from ..hf.patch import batch_multipliers
from .key_tokens import KEY_COUNT, KEY_PPL, KeyCounted, key_positions, mask_digest, ngram_rule, no_key_tokens
from .lm import answer_and_generate, first_integer, prefill, prefill_nll
from .needles import FACT, HAYSTACK_MIN, KEY_RANGE, QUERY, WORDS, answer_ids, drawn, fact_spans, hide_facts
from .task_base import EvalContext, Metric, Task, digest_of

SLACK = 2  # tokens generated past the answer's length: enough to see the integer end where the key ends


@dataclass(frozen=True)
class Haystack:
    """A prefix of real text holding ``k`` keyed facts, and per key its question and answer."""

    ids: list[int]  # [P] the haystack with the facts: prefilled once
    questions: list[list[int]]  # per key: the question's ids (with the answer's lead tokens)
    answers: list[list[int]]  # per key: the answer's ids (its first holds a digit)
    keys: list[int]
    depths: list[float]
    facts: tuple[tuple[int, int], ...] = ()  # [a, b) of each fact in ids: the rest is the haystack's own text


def _ids(tok: Any, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def room(tok: Any, k: int) -> int:
    """Tokens each branch needs past the haystack: the longest question, answer and slack."""
    key, longest = KEY_RANGE[1], max(WORDS[:k], key=len)
    lead, answer = answer_ids(tok, key)
    return len(_ids(tok, QUERY.format(word=longest))) + len(lead) + len(answer) + SLACK


def haystack_min_tokens(tok: Any, k: int) -> int:
    """The shortest length that holds ``k`` facts, their questions and :data:`HAYSTACK_MIN` of haystack."""
    key, longest = KEY_RANGE[1], max(WORDS[:k], key=len)
    return k * len(_ids(tok, FACT.format(word=longest, key=key))) + room(tok, k) + HAYSTACK_MIN


def build_haystack(tok: Any, hay: list[int], facts: list[tuple[str, int]], length: int) -> Haystack:
    """A :class:`Haystack` whose every branch (prefix, question, answer, slack) fits ``length``:
    ``hay`` cut to fit, fact i at depth (i + 1/2) / k."""
    k = len(facts)
    fact_ids = [_ids(tok, FACT.format(word=w, key=key)) for w, key in facts]
    split = [answer_ids(tok, key) for _, key in facts]
    questions = [_ids(tok, QUERY.format(word=w)) + lead for (w, _), (lead, _) in zip(facts, split, strict=True)]
    answers = [answer for _, answer in split]
    tail = max(len(q) + len(a) for q, a in zip(questions, answers, strict=True)) + SLACK
    budget = length - tail - sum(len(f) for f in fact_ids)
    if budget < HAYSTACK_MIN:
        raise ValueError(
            f"retrieval_keys={k} does not fit in length={length}: the facts and the longest question take "
            f"{length - budget} tokens; give fewer keys or a longer length (at least {haystack_min_tokens(tok, k)})"
        )
    ids, depths = hide_facts(hay, fact_ids, budget)
    return Haystack(ids, questions, answers, [key for _, key in facts], depths, fact_spans(fact_ids, budget))


def haystacks(tok: Any, length: int, ctx: EvalContext) -> list[Haystack]:
    """``ctx.n_docs`` haystacks of ``ctx.needles_k`` keys each (:func:`attntemp.evaluate.needles.drawn`)."""
    return [build_haystack(tok, hay, facts, length) for hay, facts, _ in drawn(tok, length, ctx, "retrieval_keys")]


def _found(tok: Any, gen: torch.Tensor, key: int) -> float:
    return float(first_integer(tok.decode(gen[0], skip_special_tokens=True)) == key)


def _shapes(h: Haystack) -> list[list[int]]:
    """The keys grouped by (question, answer) length: each group is asked in one batch."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (q, a) in enumerate(zip(h.questions, h.answers, strict=True)):
        groups.setdefault((len(q), len(a)), []).append(i)
    return list(groups.values())


@torch.no_grad()
def score_haystack(model: Any, tok: Any, h: Haystack) -> list[tuple[float, float]]:
    """``(found, answer log-probability)`` per key: one prefill, then the questions on copies of its
    cache, those of one shape in one batch (one row each)."""
    return answer_keys(model, tok, h, prefill(model, torch.tensor([h.ids], device=model.device)))  # cache of [1, P]


@torch.no_grad()
def answer_keys(model: Any, tok: Any, h: Haystack, prefix: tuple[Any, int]) -> list[tuple[float, float]]:
    """:func:`score_haystack` from ``prefix``, the haystack's cache already prefilled (left as it was)."""
    out: dict[int, tuple[float, float]] = {}
    for group in _shapes(h):
        prompt = torch.tensor([h.ids + h.questions[i] for i in group], device=model.device)  # [g, P + Q]
        answer = torch.tensor([h.answers[i] for i in group], device=model.device)  # [g, A]
        lp, gen = answer_and_generate(model, prompt, answer, answer.shape[1] + SLACK, prefix)  # [g], [g, <= A + 2]
        for row, i in enumerate(group):
            out[i] = (_found(tok, gen[row : row + 1], h.keys[i]), float(lp[row]))
    return [out[i] for i in range(len(h.keys))]


@torch.no_grad()
def score_one_by_one(model: Any, tok: Any, h: Haystack) -> list[tuple[float, float]]:
    """The reference path of :func:`score_haystack`: each question after a prefill of its whole prompt."""
    out = []
    for q, a, key in zip(h.questions, h.answers, h.keys, strict=True):
        prompt = torch.tensor([h.ids + q], device=model.device)  # [1, P + Q]
        lp, gen = answer_and_generate(model, prompt, torch.tensor([a], device=model.device), len(a) + SLACK)
        out.append((_found(tok, gen, key), float(lp[0])))
    return out


def score_all(model: Any, tok: Any, docs: Sequence[Haystack], multipliers: Sequence[float]) -> torch.Tensor:
    """``[k_m, n, k, 2]`` (found, answer log-probability) per multiplier, haystack and key."""
    per_m = []
    for m in multipliers:
        with batch_multipliers(model, torch.tensor([float(m)])):  # one row: m folded into q
            per_m.append([score_haystack(model, tok, h) for h in docs])
    return torch.tensor(per_m, dtype=torch.float64)


class MultiKey(Task):
    """Keys found by greedy generation, ``k`` per prefilled haystack: ``acc`` and ``logp`` per haystack."""

    name = "multikey"
    metrics: tuple[Metric, ...] = (
        # a share per haystack: its k trials are correlated, so the interval resamples haystacks
        Metric("acc", True, "share of keys found by generation", "mean", ("doc_acc",)),
        Metric("logp", True, "nats per answer token", "mean", ("doc_logp",)),
    )
    objective = "logp"
    per_window: tuple[str, ...] = ("doc_acc", "doc_logp", "key_hits", "key_logps")

    def finish(self, merged):
        merged["documents"] = len(merged["doc_acc"])
        merged["trials"] = sum(len(h) for h in merged["key_hits"])
        return merged

    def check_pair(self, a, b, metric):
        if a.get("documents_digest") != b.get("documents_digest"):
            raise ValueError("the two results were scored on different haystacks; a paired comparison needs the same")

    def evaluate(self, model, tok, length, multipliers, ctx):
        docs = list(ctx.pick(haystacks(tok, length, ctx)))
        return retrieval_results(docs, score_all(model, tok, docs, multipliers))  # [k_m, n, k, 2]


def retrieval_results(docs: Sequence[Haystack], scores: torch.Tensor) -> list[dict[str, Any]]:
    """:class:`MultiKey`'s result per multiplier from ``scores`` ``[k_m, n, k, 2]`` (found, answer
    log-probability per multiplier, haystack and key)."""
    digest = digest_of([f"{d.ids}{d.questions}{d.keys}" for d in docs])
    return [
        {
            "acc": float(per[..., 0].mean()),
            "logp": float(per[..., 1].mean()),
            "doc_acc": per[..., 0].mean(1).tolist(),
            "doc_logp": per[..., 1].mean(1).tolist(),
            "key_hits": per[..., 0].int().tolist(),
            "key_logps": per[..., 1].tolist(),
            "depths": docs[0].depths,
            "keys_per_prefill": len(docs[0].keys),
            "documents": len(docs),
            "trials": len(docs) * len(docs[0].keys),
            "documents_digest": digest,
        }
        for per in scores  # [n, k, 2]
    ]


SHARED_RULE = "; on the haystack's own text (no fact token is key, in a key's n-gram or copied)"


def own_text(h: Haystack) -> torch.Tensor:
    """``[P]`` the haystack's ids, each fact token replaced by ``-1 - position`` (held nowhere else)."""
    ids = torch.tensor(h.ids)  # [P]
    for a, b in h.facts:
        ids[a:b] = -1 - torch.arange(a, b)  # [b - a]: unique, so no n-gram through a fact repeats
    return ids


def haystack_keys(h: Haystack, ctx: EvalContext) -> torch.Tensor:
    """``[P-1]`` key predictions of the haystack's own text (column c predicts ``h.ids[c + 1]``)."""
    return key_positions(own_text(h), ctx.key_ngram, ctx.key_span)[1:]  # [P-1]


def shared_rule(ctx: EvalContext) -> str:
    return ngram_rule(ctx.key_ngram, ctx.key_span) + SHARED_RULE


@torch.no_grad()
def score_with_keys(
    model: Any, tok: Any, docs: Sequence[Haystack], masks: Sequence[torch.Tensor], multipliers: Sequence[float]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``([k_m, n, k, 2] found and answer log-probability, [k_m, n] summed key-token NLL)``: per
    multiplier and haystack one prefill (:func:`attntemp.evaluate.lm.prefill_nll`) serves both."""
    found, nll = [], []
    for m in multipliers:
        with batch_multipliers(model, torch.tensor([float(m)])):  # one row: m folded into q
            for h, keep in zip(docs, masks, strict=True):
                prefix, row = prefill_nll(model, torch.tensor([h.ids], device=model.device), keep)  # [1, P-1]
                found.append(answer_keys(model, tok, h, prefix))
                nll.append(float(row[0, keep.to(row.device)].double().sum()))
    scores = torch.tensor(found, dtype=torch.float64).reshape(len(multipliers), len(docs), -1, 2)  # [k_m, n, k, 2]
    return scores, torch.tensor(nll, dtype=torch.float64).reshape(len(multipliers), len(docs))  # [k_m, n]


def key_fields(masks: Sequence[torch.Tensor], rule: str) -> dict[str, Any]:
    """What every multiplier's result shares: the rule, its positions' digest and counts per haystack."""
    counts = [int(k.sum()) for k in masks]
    return {
        "rule": rule,
        "key_digest": mask_digest(pad_sequence(list(masks), batch_first=True), rule),  # [n, max P-1]
        "key_tokens": sum(counts) / len(counts),
        "key_tokens_total": sum(counts),
        "window_key_tokens": counts,
    }


class MultiKeyKeys(KeyCounted, MultiKey):
    """:class:`~.multikey.MultiKey` (keys found, answer log-probability) and key-token perplexity of
    the haystacks' own text, from one prefill per haystack."""

    name = "multikey_keys"
    metrics = (*MultiKey.metrics, KEY_PPL, KEY_COUNT)
    objective = "key_ppl"
    per_window = (*MultiKey.per_window, "window_key_tokens", "window_key_nll")

    def check_pair(self, a, b, metric):
        super().check_pair(a, b, metric)
        if a.get("key_digest") != b.get("key_digest"):
            raise ValueError("the two results were scored on different key tokens; a paired comparison needs the same")

    def evaluate(self, model, tok, length, multipliers, ctx):
        if ctx.key_evaluator:
            raise ValueError(
                f"key_evaluator={ctx.key_evaluator!r} is not allowed with multikey_keys: its key tokens come from "
                "the n-gram rule on the haystack's own text; leave the evaluator out"
            )
        docs = list(ctx.pick(haystacks(tok, length, ctx)))
        masks = [haystack_keys(h, ctx) for h in docs]  # each [P-1]
        common = key_fields(masks, shared_rule(ctx))
        total = common["key_tokens_total"]
        if not total and ctx.window_range is None:  # a block of a race may hold none: it adds nothing
            raise ValueError(no_key_tokens(len(docs), length, common["rule"], ctx))
        scores, nll = score_with_keys(model, tok, docs, masks, multipliers)  # [k_m, n, k, 2], [k_m, n]
        return [
            {
                **res,
                **common,
                "window_key_nll": row.tolist(),
                "key_ppl": math.exp(float(row.sum()) / total) if total else math.nan,
            }
            for res, row in zip(retrieval_results(docs, scores), nll, strict=True)  # row: [n]
        ]
