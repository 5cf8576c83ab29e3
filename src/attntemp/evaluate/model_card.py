"""The figures of the embedded tiny model's card, shared by ``scripts/train_tiny.py`` and the tests.

* Held-out perplexity at a length ``L``: the first ``L`` tokens of each of the first ``n`` held-out
  stdlib documents (name order) with at least ``min_tokens`` tokens
  (:func:`attntemp.evaluate.text.heldout_windows`); ``exp`` of the mean negative log-likelihood of
  every next-token prediction inside the windows (:func:`attntemp.evaluate.lm.perplexity`).
* Passkey accuracy at a length ``L``: ``trials`` YaRN-format prompts of at most ``L - new_tokens``
  tokens (so prompt plus answer fit in ``L``), keys and depths from ``random.Random(seed)``,
  ``new_tokens`` greedy tokens; a trial passes when the first integer in them equals the key.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from ..utils import checks
from . import needles
from .lm import first_integer, greedy

REFERENCE_TEXT = "def main():\n    return 0\n"


def passkey_trials(
    tokenizer: Any, length: int, trials: int = 100, seed: int = 0, new_tokens: int = 10
) -> list[tuple[str, int]]:
    """``(prompt, key)`` pairs: prompts of at most ``length - new_tokens`` tokens, random depths."""
    rng = random.Random(seed)
    budget = checks.positive_int("length", length) - new_tokens
    out = []
    for _ in range(checks.positive_int("trials", trials)):
        key = rng.randint(*needles.KEY_RANGE)
        out.append((needles.passkey_prompt(key, budget, rng.random(), tokenizer), key))
    return out


def passkey_accuracy(
    model: Any,
    tokenizer: Any,
    length: int,
    trials: int = 100,
    seed: int = 0,
    new_tokens: int = 10,
    batch_size: int = 50,
) -> float:
    """Share of passed trials (see module doc); prompts are batched by equal token length."""
    groups: dict[int, list[tuple[list[int], int]]] = {}
    for prompt, key in passkey_trials(tokenizer, length, trials, seed, new_tokens):
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        groups.setdefault(len(ids), []).append((ids, key))
    passed = 0
    for group in groups.values():
        for i in range(0, len(group), batch_size):
            part = group[i : i + batch_size]
            ids = torch.tensor([p for p, _ in part], dtype=torch.long)  # [b, n]
            answers = greedy(model, ids, new_tokens)  # [b, new_tokens]
            texts = tokenizer.batch_decode(answers, skip_special_tokens=True)
            passed += sum(first_integer(t) == key for t, (_, key) in zip(texts, part, strict=True))
    return passed / trials


@torch.no_grad()
def reference_logits(
    model: Any, tokenizer: Any, text: str = REFERENCE_TEXT, rows: int = 4, cols: int = 8
) -> list[list[float]]:
    """``logits[0, :rows, :cols]`` of ``text`` as nested lists: a fingerprint of the weights."""
    ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])  # [1, n]
    logits = model(input_ids=ids).logits[0, :rows, :cols].float()  # [rows, cols]
    return logits.tolist()
