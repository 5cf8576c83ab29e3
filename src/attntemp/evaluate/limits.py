"""The sizes an evaluation can run at, checked before the model loads (the tokenizer alone is
enough): the shortest window each task can score and the memory its forwards would take.

- perplexity: at least :data:`PERPLEXITY_MIN` tokens (a window needs predictions in its tail);
- passkey: the prompt without filler and the longest key, plus the 10 tokens the task keeps free;
- needle: the needle sentence and the question, 8 tokens of haystack, plus those 10 tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..hf import preflight
from . import corpus
from .tasks import NEEDLE, NEEDLE_QUESTION

PERPLEXITY_MIN = 8
ANSWER_ROOM = 10  # tokens the retrieval tasks keep free after the prompt (``length - 10``)


def min_length(task: str, tok: Any) -> int:
    """The shortest window ``task`` can score with tokenizer ``tok``."""
    if task == "passkey":
        return corpus.passkey_min_tokens(tok) + ANSWER_ROOM
    if task == "needle":
        fixed = "\n" + NEEDLE.format(key=corpus.KEY_RANGE[1]) + "\n\n" + NEEDLE_QUESTION
        return corpus.count_tokens(tok, fixed) + 8 + ANSWER_ROOM
    return PERPLEXITY_MIN


def check_lengths(name: str, lengths: Sequence[int], tasks: Sequence[str], tok: Any, indexed: bool = True) -> None:
    """Raise naming ``name[i]=length`` (or ``name=length``) when a length is too short for a task."""
    for task in tasks:
        need = min_length(task, tok)
        for i, n in enumerate(lengths):
            if n < need:
                where = f"{name}[{i}]" if indexed else name
                raise ValueError(f"{where}={n} is too short for {task}: it needs at least {need} tokens")


def forward_rows(batch_size: int, n_docs: int, trials: int, k: int) -> int:
    """Rows of the largest forward a task runs: a batch of windows (or prompts) times ``k`` m."""
    return max(k, min(batch_size, max(n_docs, trials) * k))


def check_memory(
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
        preflight.check_forward(where, n, cfg, rows, n, grad=grad)
        if trials:
            preflight.check_prompts(where, n, trials, n)
