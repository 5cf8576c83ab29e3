"""The sizes an evaluation can run at, checked before the model loads (the tokenizer alone is
enough): the shortest window each task can score and the memory its forwards would take.

- perplexity: at least :data:`PERPLEXITY_MIN` tokens (a window needs predictions in its tail);
- passkey: the prompt without filler and the longest key, plus the 10 tokens the task keeps free;
- needle: the needle sentence and the question, 8 tokens of haystack, plus those 10 tokens;
- key_tokens: more than K + n + 1 tokens (a key token's evidence lies more than K back, after its
  n-gram), K = ``key_distance`` or half the trained length;
- needles: ``needles_per_forward`` facts and questions with the longest keys, and 16 tokens of haystack
  (not given: as many as fit the shortest length, up to 8, :func:`fit_needles`).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any, TypeVar

from ..hf import preflight
from . import corpus, needles
from .task_base import NEEDLES_PER_FORWARD
from .tasks import NEEDLE, NEEDLE_QUESTION

Options = TypeVar("Options")

PERPLEXITY_MIN = 8
ANSWER_ROOM = 10  # tokens the retrieval tasks keep free after the prompt (``length - 10``)


def min_length(task: str, tok: Any, key_span: int = 0, needles_per_forward: int = 1) -> int:
    """The shortest window ``task`` can score with tokenizer ``tok`` (key_tokens: with K + n =
    ``key_span``; needles: with ``needles_per_forward`` needles)."""
    if task == "key_tokens":
        return key_span + 2
    if task == "needles":
        return needles.min_tokens(tok, needles_per_forward)
    if task == "passkey":
        return needles.passkey_min_tokens(tok) + ANSWER_ROOM
    if task == "needle":
        fixed = "\n" + NEEDLE.format(key=needles.KEY_RANGE[1]) + "\n\n" + NEEDLE_QUESTION
        return corpus.count_tokens(tok, fixed) + 8 + ANSWER_ROOM
    return PERPLEXITY_MIN


def fit_needles(opts: Options, lengths: Sequence[int], tok: Any) -> Options:
    """``opts`` with ``needles_per_forward`` set: as given (checked later against the lengths), else,
    when the needles task runs, as many as fit the shortest of ``lengths`` (at least 1, at most
    :data:`NEEDLES_PER_FORWARD`); :data:`NEEDLES_PER_FORWARD` otherwise."""
    if getattr(opts, "needles_per_forward", 0) is not None:
        return opts
    tasks = (*getattr(opts, "tasks", ()), getattr(opts, "objective", ""))
    k = NEEDLES_PER_FORWARD
    if "needles" in tasks and lengths:
        fit = [j for j in range(1, NEEDLES_PER_FORWARD + 1) if needles.min_tokens(tok, j) <= min(lengths)]
        k = max(fit, default=1)
    return dataclasses.replace(opts, needles_per_forward=k)  # type: ignore[type-var]


def say_needles(given: Any, fitted: Any, lengths: Sequence[int]) -> None:
    """One line on stderr when :func:`fit_needles` chose fewer needles than the default."""
    k = fitted.needles_per_forward
    if given.needles_per_forward is None and k < NEEDLES_PER_FORWARD:
        print(
            f"needles: {k} needle(s) per forward, the most that fit in {min(lengths)} tokens (the default is up to "
            f"{NEEDLES_PER_FORWARD}; --needles-per-forward sets it)",
            file=sys.stderr,
        )


def check_lengths(
    name: str,
    lengths: Sequence[int],
    tasks: Sequence[str],
    tok: Any,
    indexed: bool = True,
    opts: Any = None,
    trained: int | None = None,
) -> None:
    """Raise naming ``name[i]=length`` (or ``name=length``) when a length is too short for a task
    (``opts``: an EvalOptions, for key_tokens' K and n and the needles' count; ``trained``: the
    trained length, of which K's default is half)."""
    n = getattr(opts, "key_ngram", 0)
    distance = getattr(opts, "key_distance", None) or max(1, (trained or 2) // 2)
    k = getattr(opts, "needles_per_forward", None) or 1
    why = {
        "key_tokens": f" (its n-gram of key_ngram={n} tokens last occurred more than key_distance={distance} back)",
        "needles": f" with needles_per_forward={k}",
    }
    for task in tasks:
        need = min_length(task, tok, distance + n, k)
        for i, length in enumerate(lengths):
            if length < need:
                where = f"{name}[{i}]" if indexed else name
                raise ValueError(
                    f"{where}={length} is too short for {task}{why.get(task, '')}: it needs at least {need} tokens"
                )
    source = getattr(opts, "gutenberg", None)
    if source and lengths and {"needle", "needles"} & set(tasks):
        i = max(range(len(lengths)), key=lambda j: lengths[j])
        check_haystack(source, tok, lengths[i], f"{name}[{i}]" if indexed else name, tasks)


def check_haystack(source: str, tok: Any, length: int, where: str, tasks: Sequence[str]) -> None:
    """The haystack ``gutenberg`` names holds what the needle tasks take at ``length`` (the longest),
    by their own rules (:func:`attntemp.evaluate.needles.documents`, the needle task's prompts):
    read from the text and the tokenizer before the model loads, the refusal naming ``gutenberg``."""
    docs = corpus.load_text(source, name="gutenberg")
    if "needle" in tasks and not any(len(d.text) > 2 * length for d in docs):
        raise ValueError(
            f"gutenberg={source!r} is not allowed: none of its documents is long enough for {where}={length} (the "
            f"needle task takes one of more than {2 * length} characters); give a longer haystack"
        )
    if "needles" in tasks:
        held = 0
        for d in docs:  # the first document, continued with the next ones (8 characters a token at most)
            held += len(tok(d.text[: 8 * length], add_special_tokens=False)["input_ids"])
            if held >= length:
                return
        raise ValueError(
            f"gutenberg={source!r} is not allowed: its haystack holds {held} tokens; {where}={length} needs "
            f"{length}; give a longer haystack"
        )


def forward_rows(batch_size: int, n_docs: int, trials: int, k: int) -> int:
    """Rows of the largest forward a task runs: a batch of windows (or prompts) times ``k`` m."""
    return max(k, min(batch_size, max(n_docs, trials) * k))


def check_length_memory(
    name: str,
    lengths: Sequence[int],
    cfg: dict[str, Any] | None,
    rows: int,
    trials: int = 0,
    grad: bool = False,
    indexed: bool = True,
) -> None:
    """Raise naming the first length whose forward (or retrieval prompts) would not fit in memory."""
    for i, n in enumerate(lengths):
        where = f"{name}[{i}]" if indexed else name
        preflight.check_forward(where, n, cfg, rows, n, grad=grad, head_chunk=preflight.LOGIT_CHUNK)
        if trials:
            preflight.check_prompts(where, n, trials, n)


def check_evaluator(opts: Any, tok: Any) -> None:
    """With key_tokens and ``key_evaluator``: the evaluator there, with the model's tokenizer (key
    tokens are positions in the model's ids), checked from its tokenizer alone."""
    name = getattr(opts, "key_evaluator", None)
    if not name or "key_tokens" not in (*getattr(opts, "tasks", ()), getattr(opts, "objective", "")):
        return
    try:
        evaluator = preflight.load_tokenizer(name)
    except ValueError as exc:
        raise ValueError(str(exc).replace("model=", "key_evaluator=", 1)) from None
    if evaluator.get_vocab() != tok.get_vocab():
        raise ValueError(
            f"key_evaluator={name!r} has another tokenizer than the model; key tokens are positions in the "
            "model's ids: give an evaluator with the same tokenizer"
        )
