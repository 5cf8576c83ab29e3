"""Keys hidden in text. The passkey prompt (:func:`passkey_prompt`): one key in filler sentences,
the YaRN paper's format (jquesnelle/yarn, ``eval/passkey.py``). Many needles per forward: ``k``
keyed facts hidden at spread depths in real text, then ``k`` teacher-forced questions at the end,
all scored from ONE forward (no generation).

A document is ``haystack ... "The special magic number for <word> is <number>." ...`` (k distinct
words at depths (i + 1/2) / k) followed by, for each word in a shuffled order, "What is the special
magic number for <word>? The special magic number for <word> is <number>." Each answer is scored
by its tokens' mean log-probability and by whether its first digit-carrying token is the argmax
where it is predicted (greedy first token, read off the same forward): LongRoPE2's "needle-driven"
signal (arXiv:2502.20082) at k needles per forward instead of one. Needles of one document are
not independent, so intervals resample documents (one document = one forward = k needles).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..hf.patch import batch_multipliers
from ..utils import checks
from . import corpus
from .lm import position_scores, repeat_rows
from .task_base import MAX_NEEDLES, EvalContext, Metric, Task

FACT = "\nThe special magic number for {word} is {key}.\n"
QUERY = "\nWhat is the special magic number for {word}? The special magic number for {word} is"
WORDS = (
    "apple", "river", "candle", "mountain", "violin", "harbor", "pepper", "lantern", "falcon", "meadow",
    "copper", "orchid", "glacier", "saddle", "thistle", "anchor", "biscuit", "comet", "dune", "ember",
    "fern", "garnet", "hazel", "island", "juniper", "kettle", "lemon", "marble", "nutmeg", "oyster",
    "pebble", "quartz", "raven", "spruce", "tulip", "umbrella", "velvet", "walnut", "yarrow", "zephyr",
    "acorn", "badger", "cobalt", "dahlia", "eagle", "fig", "gecko", "heron", "ivory", "jasper",
    "koala", "lilac", "maple", "nectar", "otter", "parsley", "quill", "reed", "saffron", "tiger",
    "urchin", "vine", "willow", "yak",
)  # fmt: skip
HAYSTACK_MIN = 16  # tokens of haystack a document keeps at least

# The passkey prompt of the YaRN paper (jquesnelle/yarn, eval/passkey.py): one key in filler sentences
TASK = "There is a pass key hidden in this text. Find it and remember it."
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
KEY_LINE = "The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = "What is the pass key? The pass key is"
KEY_RANGE = (1, 50000)


def _assemble(key: int, filler: str, depth: float) -> str:
    cut = round(depth * len(filler))
    lines = [TASK, filler[:cut], KEY_LINE.format(key=key), filler[cut:], QUESTION]
    return "\n".join(lines)


def passkey_min_tokens(tokenizer: Any) -> int:
    """Tokens of a passkey prompt with no filler and the longest key: the least ``n_tokens``."""
    return corpus.count_tokens(tokenizer, _assemble(KEY_RANGE[1], "", 0.0))


def passkey_prompt(key: int, n_tokens: int, depth: float, tokenizer: Any) -> str:
    """A YaRN-format passkey prompt of at most ``n_tokens`` tokens (exactly, for a byte tokenizer).

    The key line sits at ``depth`` (0 = right after the task line, 1 = right before the question)
    of the filler; the filler is the repeated YaRN sentence cut at a character.
    """
    key = checks.positive_int("key", key)
    n_tokens = checks.positive_int("n_tokens", n_tokens)
    if not 0.0 <= float(depth) <= 1.0:
        raise ValueError(f"depth={depth!r} is not allowed; expected a number in [0, 1]")
    fixed = corpus.count_tokens(tokenizer, _assemble(key, "", 0.0))
    if fixed > n_tokens:
        raise ValueError(f"n_tokens={n_tokens} is not allowed; a passkey prompt needs >= {fixed}")
    sentence = FILLER + " "
    per_char = len(sentence) / corpus.count_tokens(tokenizer, sentence)
    chars = int((n_tokens - fixed) * per_char)
    filler = " ".join([FILLER] * (chars // len(sentence) + 2))
    while True:
        text = _assemble(key, filler[:chars], float(depth))
        over = corpus.count_tokens(tokenizer, text) - n_tokens
        if over <= 0:
            return text
        chars = max(0, chars - max(1, int(over * per_char)))


def draw_keys(n: int, seed: int) -> list[int]:
    """``n`` pass keys drawn uniformly from KEY_RANGE by ``random.Random(seed)``."""
    rng = random.Random(seed)
    return [rng.randint(*KEY_RANGE) for _ in range(checks.positive_int("n", n))]


def passkey_documents(n: int, tokenizer: Any, min_tokens: int, max_tokens: int, seed: int) -> Iterator[str]:
    """``n`` training texts: a passkey prompt of ``min_tokens..max_tokens`` tokens, then its answer.

    Each text is ``prompt + " {key}."``, so the whole text is at most ``max_tokens`` tokens plus the
    answer; lengths, depths and keys come from ``random.Random(seed)``.
    """
    rng = random.Random(seed)
    for _ in range(checks.positive_int("n", n)):
        key = rng.randint(*KEY_RANGE)
        length = rng.randint(min_tokens, max_tokens)
        yield passkey_prompt(key, length, rng.random(), tokenizer) + f" {key}."


@dataclass(frozen=True)
class NeedleDocument:
    """One forward's ids and, per needle, its answer's prediction columns and its depth."""

    ids: list[int]
    answers: list[list[int]]  # per needle: the columns (prediction positions) of its answer tokens
    depths: list[float]


def _ids(tok: Any, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def answer_ids(tok: Any, key: int) -> tuple[list[int], list[int]]:
    """``(lead, answer)`` ids of ``" {key}"``: tokens before the first one holding a digit (a byte
    tokenizer's space) go with the question, so the first answer token is a digit's."""
    ids = _ids(tok, f" {key}")
    first = next((i for i, t in enumerate(ids) if any(ch.isdigit() for ch in tok.decode([t]))), 0)
    return ids[:first], ids[first:]


def fixed_tokens(tok: Any, k: int) -> int:
    """Tokens of ``k`` facts and questions with the longest words and keys: all but the haystack."""
    key, longest = KEY_RANGE[1], max(WORDS[:k], key=len)
    per = len(_ids(tok, FACT.format(word=longest, key=key))) + len(_ids(tok, QUERY.format(word=longest)))
    return k * (per + len(_ids(tok, f" {key}")) + len(_ids(tok, ".")))


def min_tokens(tok: Any, k: int) -> int:
    """The shortest document that holds ``k`` needles and :data:`HAYSTACK_MIN` tokens of haystack."""
    return fixed_tokens(tok, k) + HAYSTACK_MIN


def _depths_and_cuts(k: int, budget: int) -> tuple[list[float], list[int]]:
    """Fact i's depth (i + 1/2) / k and the haystack position it is put before."""
    depths = [(i + 0.5) / k for i in range(k)]
    return depths, [round(d * budget) for d in depths]


def hide_facts(hay: list[int], fact_ids: list[list[int]], budget: int) -> tuple[list[int], list[float]]:
    """``(ids, depths)``: the first ``budget`` ids of ``hay`` with fact i at depth (i + 1/2) / k."""
    depths, cuts = _depths_and_cuts(len(fact_ids), budget)
    ids: list[int] = []
    for i, (a, b) in enumerate(zip([0, *cuts[:-1]], cuts, strict=True)):
        ids += hay[a:b] + fact_ids[i]
    return ids + hay[cuts[-1] : budget], depths


def fact_spans(fact_ids: list[list[int]], budget: int) -> tuple[tuple[int, int], ...]:
    """``[a, b)`` of each fact in :func:`hide_facts`' ids: everything else is the haystack's own text."""
    spans, before = [], 0
    for cut, fact in zip(_depths_and_cuts(len(fact_ids), budget)[1], fact_ids, strict=True):
        spans.append((cut + before, cut + before + len(fact)))
        before += len(fact)
    return tuple(spans)


def drawn(tok: Any, length: int, ctx: EvalContext, flag: str) -> Iterator[tuple[list[int], list[tuple[str, int]], Any]]:
    """``(haystack ids, facts, rng)`` for each of ``ctx.n_docs`` documents: the haystack text (else
    the held-out documents) from a seeded offset, ``ctx.needles_k`` distinct words with their keys
    (``flag``: the option that sets k, named when it is too many)."""
    hay_docs = list(ctx.haystack) or corpus.split(list(ctx.docs), "heldout")
    if not hay_docs:
        raise ValueError(f"no haystack document for length={length}: give --gutenberg or a text")
    k = ctx.needles_k
    if k > MAX_NEEDLES:
        raise ValueError(f"{flag}={k} is not allowed; expected at most {MAX_NEEDLES}")
    rng = random.Random(ctx.seed)
    for d in range(ctx.n_docs):
        hay = haystack_ids(tok, hay_docs, d, length, rng)
        yield hay, [(w, rng.randint(*KEY_RANGE)) for w in rng.sample(WORDS, k)], rng


def build_document(tok: Any, hay: list[int], facts: list[tuple[str, int]], length: int, rng: random.Random):
    """A :class:`NeedleDocument` of exactly ``length`` ids: ``hay`` (at least long enough) cut to
    fit, fact i at depth (i + 1/2) / k, then the questions in a shuffled order, each answered."""
    k = len(facts)
    fact_ids = [_ids(tok, FACT.format(word=w, key=key)) for w, key in facts]
    asked = rng.sample(range(k), k)
    tail: list[int] = []
    spans: dict[int, list[int]] = {}
    for i in asked:
        word, key = facts[i]
        lead, answer = answer_ids(tok, key)
        tail += _ids(tok, QUERY.format(word=word)) + lead
        spans[i] = list(range(len(tail), len(tail) + len(answer)))  # answer positions within the tail
        tail += answer + _ids(tok, ".")
    budget = length - len(tail) - sum(len(f) for f in fact_ids)
    if budget < HAYSTACK_MIN:
        raise ValueError(
            f"needles_per_forward={k} does not fit in length={length}: its facts and questions take "
            f"{length - budget} tokens; give fewer needles or a longer length (at least {min_tokens(tok, k)})"
        )
    ids, depths = hide_facts(hay, fact_ids, budget)
    offset = len(ids)
    ids += tail
    answers = [[offset + p - 1 for p in spans[i]] for i in range(k)]  # a token is predicted one position earlier
    return NeedleDocument(ids, answers, depths)


def documents(tok: Any, length: int, ctx: EvalContext) -> list[NeedleDocument]:
    """``ctx.n_docs`` documents of ``ctx.needles_per_forward`` needles each (:func:`drawn`)."""
    return [
        build_document(tok, hay, facts, length, rng)
        for hay, facts, rng in drawn(tok, length, ctx, "needles_per_forward")
    ]


def haystack_ids(tok: Any, docs: list[corpus.Document], d: int, length: int, rng: random.Random) -> list[int]:
    """``length`` ids of haystack for document ``d``: haystack document ``d`` (from a seeded offset
    once every one has been used), continued with the next ones when it is shorter."""
    chars = 8 * length  # enough characters for ``length`` tokens of any tokenizer; no more are read
    text = docs[d % len(docs)].text
    start = rng.randrange(max(1, len(text) - chars)) if d >= len(docs) else 0
    ids = _ids(tok, text[start : start + chars])
    for j in range(1, len(docs)):
        if len(ids) >= length:
            break
        ids += _ids(tok, docs[(d + j) % len(docs)].text[:chars])
    if len(ids) < length:
        raise ValueError(f"the haystack holds {len(ids)} tokens; length={length} needs {length}: give a longer text")
    return ids[:length]


def answer_mask(docs: list[NeedleDocument], length: int) -> torch.Tensor:
    """``[n, L-1]`` the prediction columns of every answer token (the gradient objective's mask)."""
    mask = torch.zeros(len(docs), length - 1, dtype=torch.bool)
    for row, doc in zip(mask, docs, strict=True):
        row[[c for cols in doc.answers for c in cols]] = True
    return mask


def needle_targets(tok: Any, length: int, n: int, ctx: EvalContext) -> tuple[torch.Tensor, torch.Tensor]:
    """``([n, L] documents, [n, L-1] answer tokens)``: what gradient tuning trains on."""
    docs = documents(tok, length, replace(ctx, n_docs=n))
    return torch.tensor([d.ids for d in docs]), answer_mask(docs, length)


@torch.no_grad()
def score_documents(model: Any, docs: list[NeedleDocument], multipliers, batch_size: int) -> torch.Tensor:
    """``[k_m, n, needles, 2]`` per multiplier, document and needle: answer mean log-probability and
    greedy first-token hit, from one forward per (document, m) (one batch row each)."""
    ids = torch.tensor([d.ids for d in docs])  # [n, L]
    width = max(len(c) for d in docs for c in d.answers)
    cols = torch.tensor([[(c + [c[0]] * width)[:width] for c in d.answers] for d in docs])  # [n, k, A]
    valid = torch.tensor([[[j < len(c) for j in range(width)] for c in d.answers] for d in docs])  # [n, k, A]
    rows, m = repeat_rows(ids, multipliers)  # [k_m*n, L]
    flat = cols.flatten(1).repeat(len(multipliers), 1)  # [k_m*n, k*A]
    out = []
    for a in range(0, rows.shape[0], batch_size):
        with batch_multipliers(model, m[a : a + batch_size]):
            nll, hit = position_scores(model, rows[a : a + batch_size].to(model.device), flat[a : a + batch_size])
        out.append(torch.stack([-nll.cpu().double(), hit.cpu().double()], -1))  # [b, k*A, 2]
    scores = torch.cat(out).reshape(len(multipliers), len(docs), *cols.shape[1:], 2)  # [k_m, n, k, A, 2]
    v = valid.double()  # [n, k, A]
    logp = (scores[..., 0] * v).sum(-1) / v.sum(-1)  # [k_m, n, k]: mean over the answer's tokens
    return torch.stack([logp, scores[..., 0, 1]], -1)  # [k_m, n, k, 2]: the first answer token's hit


class Needles(Task):
    """k needles per forward: ``acc`` (greedy first answer token) and ``logp`` per document."""

    name = "needles"
    metrics = (
        # acc: a share per document, so a mean over documents (not 0/1 outcomes)
        Metric("acc", True, "share of needles (first answer token greedy)", "mean", ("doc_acc",)),
        Metric("logp", True, "nats per answer token", "mean", ("doc_logp",)),
    )
    objective = "logp"
    per_window = ("doc_acc", "doc_logp", "needle_hits", "needle_logps")

    def finish(self, merged):
        merged["documents"] = len(merged["doc_acc"])
        return merged

    def check_pair(self, a, b, metric):
        if a.get("documents_digest") != b.get("documents_digest"):
            raise ValueError("the two results were scored on different documents; a paired comparison needs the same")

    def evaluate(self, model, tok, length, multipliers, ctx):
        docs = list(ctx.pick(documents(tok, length, ctx)))
        scores = score_documents(model, docs, multipliers, ctx.batch_size)  # [k_m, n, k, 2]
        digest = corpus.windows_digest(torch.tensor([d.ids for d in docs]))
        out = []
        for per in scores:  # [n, k, 2]
            out.append(
                {
                    "acc": float(per[..., 1].mean()),
                    "logp": float(per[..., 0].mean()),
                    "doc_acc": per[..., 1].mean(1).tolist(),
                    "doc_logp": per[..., 0].mean(1).tolist(),
                    "needle_hits": per[..., 1].int().tolist(),
                    "needle_logps": per[..., 0].tolist(),
                    "depths": docs[0].depths,
                    "needles_per_forward": len(docs[0].answers),
                    "documents": len(docs),
                    "documents_digest": digest,
                }
            )
        return out
