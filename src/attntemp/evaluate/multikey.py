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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..hf.patch import batch_multipliers
from .lm import answer_and_generate, first_integer, prefill
from .needles import FACT, HAYSTACK_MIN, KEY_RANGE, QUERY, WORDS, answer_ids, drawn, hide_facts
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
    return Haystack(ids, questions, answers, [key for _, key in facts], depths)


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
    prefix = prefill(model, torch.tensor([h.ids], device=model.device))  # cache of [1, P]
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
    metrics = (
        # a share per haystack: its k trials are correlated, so the interval resamples haystacks
        Metric("acc", True, "share of keys found by generation", "mean", ("doc_acc",)),
        Metric("logp", True, "nats per answer token", "mean", ("doc_logp",)),
    )
    objective = "logp"
    per_window = ("doc_acc", "doc_logp", "key_hits", "key_logps")

    def finish(self, merged):
        merged["documents"] = len(merged["doc_acc"])
        merged["trials"] = sum(len(h) for h in merged["key_hits"])
        return merged

    def check_pair(self, a, b, metric):
        if a.get("documents_digest") != b.get("documents_digest"):
            raise ValueError("the two results were scored on different haystacks; a paired comparison needs the same")

    def evaluate(self, model, tok, length, multipliers, ctx):
        docs = list(ctx.pick(haystacks(tok, length, ctx)))
        scores = score_all(model, tok, docs, multipliers)  # [k_m, n, k, 2]
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
