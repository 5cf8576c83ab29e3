"""The figures of the embedded tiny model, shared by ``scripts/train_tiny.py`` and the tests.

* Held-out perplexity at a length ``L``: the first ``L`` tokens of each of the first ``n`` held-out
  stdlib documents (name order) with at least ``min_tokens`` tokens; ``exp`` of the mean negative
  log-likelihood of every next-token prediction inside the windows (``n * (L - 1)`` of them, or only
  those predicting positions ``> start`` when ``start`` is given: the tail).
* Passkey accuracy at a length ``L``: ``trials`` YaRN-format prompts of at most ``L - new_tokens``
  tokens (so prompt plus answer fit in ``L``), keys and depths from ``random.Random(seed)``,
  ``new_tokens`` greedy tokens; a trial passes when the first integer in them equals the key.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import random
import re
from collections.abc import Sequence
from typing import Any

import torch

from . import _validate, data

REFERENCE_TEXT = "def main():\n    return 0\n"
_INTEGER = re.compile(r"\d+")


def heldout_windows(
    tokenizer: Any,
    length: int,
    n: int = 32,
    min_tokens: int | None = None,
    docs: Sequence[data.Document] | None = None,
) -> torch.Tensor:
    """``[n, length]`` token ids: the start of each selected held-out document (see module doc)."""
    length = _validate.positive_int("length", length)
    docs = data.load_text("stdlib") if docs is None else docs
    chosen = data.select_documents(docs, tokenizer, min_tokens or length, n, part="heldout")
    rows = [tokenizer(d.text, add_special_tokens=False)["input_ids"][:length] for d in chosen]
    return torch.tensor(rows, dtype=torch.long)  # [n, length]


@torch.no_grad()
def perplexity(model: Any, ids: torch.Tensor, start: int = 0, batch_size: int = 8) -> float:
    """``exp(mean NLL)`` over the next-token predictions of ``ids`` for positions ``> start``."""
    if not 0 <= start < ids.shape[1] - 1:
        limit = ids.shape[1] - 1
        raise ValueError(f"start={start!r} is not allowed; expected 0 <= start < {limit}")
    total, count = 0.0, 0
    for chunk in ids.split(batch_size):  # [b, n]
        logits = model(input_ids=chunk).logits[:, start:-1].float()  # [b, n-1-start, V]
        logp = torch.log_softmax(logits, dim=-1)  # [b, n-1-start, V]
        target = chunk[:, start + 1 :, None]  # [b, n-1-start, 1]
        total -= logp.gather(-1, target).double().sum().item()
        count += target.numel()
    return math.exp(total / count)


def passkey_trials(
    tokenizer: Any, length: int, trials: int = 100, seed: int = 0, new_tokens: int = 10
) -> list[tuple[str, int]]:
    """``(prompt, key)`` pairs: prompts of at most ``length - new_tokens`` tokens, random depths."""
    rng = random.Random(seed)
    budget = _validate.positive_int("length", length) - new_tokens
    out = []
    for _ in range(_validate.positive_int("trials", trials)):
        key = rng.randint(*data.KEY_RANGE)
        out.append((data.passkey_prompt(key, budget, rng.random(), tokenizer), key))
    return out


@torch.no_grad()
def greedy(model: Any, ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """``[b, new_tokens]`` greedy continuations of the equal-length prompts ``ids`` ``[b, n]``."""
    # transformers >= 5.2x names the KV cache ``cache``; earlier 5.x releases ``past_key_values``
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out = model(input_ids=ids, use_cache=True)
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)  # [b, 1]
    tokens = [nxt]
    for _ in range(new_tokens - 1):
        out = model(input_ids=nxt, use_cache=True, **{name: getattr(out, name)})
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)  # [b, 1]
        tokens.append(nxt)
    return torch.cat(tokens, dim=1)  # [b, new_tokens]


def first_integer(text: str) -> int | None:
    """The first run of digits in ``text`` as an int, or None."""
    match = _INTEGER.search(text)
    return int(match.group()) if match else None


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


def windows_digest(ids: torch.Tensor) -> str:
    """sha256 of the token ids: tells whether two runs scored the very same windows."""
    return hashlib.sha256(ids.to(torch.int64).numpy().tobytes()).hexdigest()
