"""Language-model scoring, one implementation each: next-token NLL (chunked through the LM head,
never the ``[B, L, V]`` logits), the loss and perplexity built on it, several multipliers in one
batched forward, and greedy decoding with a KV cache."""

from __future__ import annotations

import copy
import inspect
import math
import re
from collections.abc import Sequence
from typing import Any

import torch

from ..hf.patch import batch_multipliers
from ..hf.preflight import LOGIT_CHUNK
from ..utils import noise

_INTEGER = re.compile(r"\d+")


def _check_start(start: int, length: int) -> int:
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < length - 1:
        raise ValueError(f"start={start!r} is not allowed; expected 0 <= start < {length - 1}")
    return start


def token_nll(
    model: Any, ids: torch.Tensor, start: int = 0, chunk: int = LOGIT_CHUNK, keep: torch.Tensor | None = None
) -> torch.Tensor:
    """``[b, L-1-start]`` NLL (nats) of the next-token predictions made at positions ``>= start``.

    The decoder's hidden states go through the LM head ``chunk`` positions at a time (final logit
    soft-capping applied if the model has it), so no ``[b, L, V]`` tensor is formed; with ``keep``
    (:func:`head_nll`) only the predictions a metric reads. Gradients flow when enabled (gradient
    tuning uses it as its loss)."""
    _check_start(start, ids.shape[1])
    hidden = model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state  # [b, L, d]
    return head_nll(model, hidden, ids, start, chunk, keep)


def head_nll(
    model: Any,
    hidden: torch.Tensor,
    ids: torch.Tensor,
    start: int = 0,
    chunk: int = LOGIT_CHUNK,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[b, L-1-start]`` NLL of ``ids`` ``[b, L]`` from the decoder's hidden states ``[b, L, d]``.

    ``keep`` ``[L-1]`` bool: the LM head and the cross entropy run on the kept predictions only
    (key tokens and the tail: the head is ``2 d V`` FLOPs a position) and the others are NaN, so a
    metric that reads one it did not keep shows NaN, never a number. Kept values equal the full
    pass's (tested)."""
    length = ids.shape[1]
    cols = torch.arange(start, length - 1) if keep is None else start + keep[start:].nonzero().squeeze(1).cpu()  # [P]
    out = []
    for a in range(0, cols.shape[0], chunk):
        c = cols[a : a + chunk]  # [c]
        h = hidden[:, int(c[0]) : int(c[-1]) + 1] if keep is None else hidden[:, c.to(hidden.device)]  # [b, c, d]
        logits = _head_logits(model, h)  # [b, c, V]
        target = ids[:, c + 1].to(logits.device)  # [b, c]: the head may sit elsewhere
        out.append(torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none"))
    nll = torch.cat(out, dim=1) if out else hidden.new_zeros(ids.shape[0], 0)  # [b, P]
    if keep is None:
        return nll  # [b, L-1-start]
    full = nll.new_full((ids.shape[0], length - 1 - start), float("nan"))  # [b, L-1-start]
    full[:, (cols - start).to(full.device)] = nll
    return full


def _head_logits(model: Any, hidden: torch.Tensor) -> torch.Tensor:
    """``[b, c, V]`` logits (fp32 at least, final soft-capping applied) of hidden states ``[b, c, d]``."""
    logits = model.get_output_embeddings()(hidden)  # [b, c, V]
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # [b, c, V]
    cap = getattr(model.config, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


def position_scores(model: Any, ids: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``([b, P] NLL, [b, P] greedy hit)`` of the next-token predictions made at ``positions``
    ``[b, P]`` (each < L - 1) of ``ids`` ``[b, L]``: the NLL of ``ids[:, p + 1]`` and whether it is
    the argmax there. The LM head runs on those positions only; gradients flow when enabled. Its
    NLL equals :func:`token_nll` at the same positions (tested)."""
    hidden = model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state  # [b, L, d]
    pos = positions.to(hidden.device)  # [b, P]
    picked = hidden.gather(1, pos[..., None].expand(-1, -1, hidden.shape[-1]))  # [b, P, d]
    logits = _head_logits(model, picked)  # [b, P, V]
    target = ids.gather(1, positions.to(ids.device) + 1).to(logits.device)  # [b, P]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")  # [b, P]
    return nll, logits.argmax(-1) == target  # [b, P], [b, P]


def masked_loss(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean next-token NLL of ``ids`` [b, L] over the predictions ``mask`` [b, L-1] keeps (key
    tokens, answer tokens): the loss gradient tuning minimises for those objectives."""
    if not bool(mask.any()):
        raise ValueError("mask keeps no prediction; a masked loss needs at least one")
    nll = token_nll(model, ids)  # [b, L-1]
    return nll[mask.to(nll.device)].mean()


def next_token_loss(model: Any, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
    """Mean next-token cross entropy of the predictions at positions ``>= start`` of ``ids`` [B, L]."""
    return token_nll(model, ids, start).mean()


@torch.no_grad()
def perplexity(model: Any, ids: torch.Tensor, start: int = 0, batch_size: int = 8) -> float:
    """``exp(mean NLL)`` over the next-token predictions of ``ids`` ``[n, L]`` at positions ``>= start``."""
    _check_start(start, ids.shape[1])
    total, count = 0.0, 0
    for rows in ids.split(batch_size):  # [b, L]
        nll = token_nll(model, rows.to(model.device), start)  # [b, L-1-start]
        total += nll.double().sum().item()
        count += nll.numel()
    return math.exp(total / count)


def repeat_rows(ids: torch.Tensor, multipliers: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Every row of ``ids`` once per multiplier: ``[k*n, L]`` and the matching ``[k*n]`` m."""
    k, n = len(multipliers), ids.shape[0]
    m = torch.tensor(list(multipliers), dtype=torch.float32).repeat_interleave(n)  # [k*n]
    return ids.repeat(k, 1), m  # [k*n, L]


@torch.no_grad()
def multiplier_nll(
    model: Any, ids: torch.Tensor, multipliers: Sequence[float], batch_size: int, keep: torch.Tensor | None = None
) -> torch.Tensor:
    """``[k, n, L-1]`` next-token NLL of ``ids`` ``[n, L]`` under each multiplier (a patched model;
    one batch row per (m, window), m folded into q per row); with ``keep`` ``[L-1]`` only those
    predictions (the others NaN: :func:`head_nll`)."""
    rows, m = repeat_rows(ids, multipliers)
    out = []
    for a in range(0, rows.shape[0], batch_size):
        chunk, mc = rows[a : a + batch_size], m[a : a + batch_size]
        with batch_multipliers(model, mc):
            out.append(token_nll(model, chunk.to(model.device), keep=keep).cpu())  # [b, L-1]
    return torch.cat(out).reshape(len(multipliers), ids.shape[0], -1)


def _cache_name(model: Any) -> str:
    # transformers >= 5.2x names the KV cache ``cache``; earlier 5.x releases ``past_key_values``
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def last_logits(model: Any, ids: torch.Tensor, **kw: Any) -> tuple[torch.Tensor, Any]:
    """``[b, V]`` logits of the last position of ``ids`` ``[b, n]`` and the forward's KV cache.

    The LM head runs on that position only (``logits_to_keep=1``), so a long prompt never forms
    ``[b, n, V]`` logits (128k tokens x a 128k vocabulary would be 64 GB in fp32)."""
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    out = model(input_ids=ids, use_cache=True, **keep, **kw)
    return out.logits[:, -1], getattr(out, _cache_name(model))  # [b, V]


@torch.no_grad()
def greedy(
    model: Any, ids: torch.Tensor, new_tokens: int, first: tuple[torch.Tensor, Any] | None = None
) -> torch.Tensor:
    """``[b, new_tokens]`` greedy continuations of the equal-length prompts ``ids`` ``[b, n]``
    (``first``: the prompt's :func:`last_logits` when already computed; its cache is extended)."""
    name = _cache_name(model)
    logits, cache = first if first is not None else last_logits(model, ids)  # [b, V]
    nxt = logits.argmax(-1, keepdim=True)  # [b, 1]
    tokens = [nxt]
    for _ in range(new_tokens - 1):
        logits, cache = last_logits(model, nxt, **{name: cache})  # [b, V]
        nxt = logits.argmax(-1, keepdim=True)  # [b, 1]
        tokens.append(nxt)
    return torch.cat(tokens, dim=1)  # [b, new_tokens]


@torch.no_grad()
def answer_and_greedy(model: Any, prompt: torch.Tensor, answer: torch.Tensor, new_tokens: int):
    """``([b] mean log-probability of answer ``[b, A]`` after prompt ``[b, P]``, [b, new_tokens]
    greedy continuation)`` from one forward over the prompt: its last logits score the answer's
    first token and start the greedy run; the other answer tokens are scored on a copy of its
    cache. Equals :func:`token_nll` on ``prompt + answer`` and :func:`greedy` on ``prompt`` (tested)."""
    logits, cache = last_logits(model, prompt)  # [b, V]
    lp = [torch.log_softmax(logits.float(), -1).gather(-1, answer[:, :1].to(logits.device))]  # [b, 1]
    if answer.shape[1] > 1:
        out = model(input_ids=answer[:, :-1], use_cache=True, **{_cache_name(model): copy.deepcopy(cache)})
        rest = out.logits.float()  # [b, A-1, V]: soft-capped by the model, as token_nll does
        lp.append(torch.log_softmax(rest, -1).gather(-1, answer[:, 1:, None].to(rest.device)).squeeze(-1))
    return torch.cat(lp, 1).mean(1), greedy(model, prompt, new_tokens, (logits, cache))  # [b], [b, new]


@torch.no_grad()
def answer_and_generate(
    model: Any, prompt: torch.Tensor, answer: torch.Tensor, new_tokens: int, prefix: tuple[Any, int] | None = None
):
    """``([b] mean log-probability of answer ``[b, A]`` after prompt ``[b, P]``, [b, <= new_tokens]
    greedy continuation by transformers' ``generate``)`` from one prefill, as a user runs it: the
    first ``P - 1`` prompt tokens fill a KV cache once; a copy of it scores the answer
    teacher-forced (the last prompt token and ``answer[:, :-1]``), the cache itself continues in
    ``model.generate`` (greedy, the model's generation config otherwise), which feeds the last
    prompt token and decodes. The continuation stops early at the model's end-of-text token.
    :func:`answer_and_greedy` is the reference path (tested equal).

    ``prefix``: ``(cache, n)``, a KV cache already holding the first ``n`` positions of ``prompt``
    (a haystack prefilled once and asked many questions; a cache of one row serves every row of
    ``prompt``): a copy of it takes the rest of the prompt and the teacher-forced answer in one
    forward and is cropped back to ``P - 1`` positions for ``generate`` where every layer's cache
    can be cropped (else the copy is extended, and copied again for the answer), so the caller's
    cache is left as it was (:func:`prefill`)."""
    if prompt.shape[1] < 2:
        raise ValueError(f"prompt has {prompt.shape[1]} tokens; generation after a prefill needs at least 2")
    name = _cache_name(model)
    if prefix is not None and _croppable(prefix[0]):
        cache, ans_lp = _branch(model, prompt, answer, prefix)
    else:
        cache = _extended(model, prompt, prefix) if prefix else last_logits(model, prompt[:, :-1])[1]  # P - 1
        forced = torch.cat([prompt[:, -1:], answer[:, :-1]], dim=1)  # [b, A]
        out = model(input_ids=forced, use_cache=True, **{name: copy.deepcopy(cache)})
        ans_lp = _answer_logp(out.logits, answer)  # [b]
    with noise.quiet_libraries():  # "exceeded the model's predefined maximum length": the point here
        gen = model.generate(
            input_ids=prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=new_tokens,
            do_sample=False,
            num_beams=1,
            **{name: cache},
        )  # [b, P + new]
    return ans_lp, gen[:, prompt.shape[1] :]  # [b], [b, <= new_tokens]


@torch.no_grad()
def prefill(model: Any, ids: torch.Tensor) -> tuple[Any, int]:
    """``(KV cache of ids [b, n], n)``: a prefix prefilled once, for :func:`answer_and_generate`'s
    ``prefix`` (the LM head on the last position only)."""
    return last_logits(model, ids)[1], ids.shape[1]


@torch.no_grad()
def prefill_nll(model: Any, ids: torch.Tensor, keep: torch.Tensor) -> tuple[tuple[Any, int], torch.Tensor]:
    """``((KV cache of ids [b, n], n), [b, n-1] NLL)``: :func:`prefill` whose one decoder pass also
    scores the predictions ``keep`` ``[n-1]`` marks through the LM head (:func:`head_nll`: the
    others NaN, never the ``[b, n, V]`` logits), so a haystack prefilled for its questions yields
    its own text's key-token NLL too (RULER's haystack, arXiv:2404.06654, scored as LongPPL's key
    tokens). The NLL equals :func:`token_nll`'s at the kept predictions and the cache
    :func:`prefill`'s (tested)."""
    out = model.get_decoder()(input_ids=ids, use_cache=True)
    hidden = out.last_hidden_state  # [b, n, d]
    return (getattr(out, _cache_name(model)), ids.shape[1]), head_nll(model, hidden, ids, keep=keep)  # [b, n-1]


def _answer_logp(logits: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
    """``[b]`` mean log-probability of ``answer`` ``[b, A]`` from the logits predicting it ``[b, A, V]``."""
    logp = torch.log_softmax(logits.float(), -1)  # [b, A, V]: soft-capped by the model
    return logp.gather(-1, answer[:, :, None].to(logp.device)).squeeze(-1).mean(1)  # [b]


def _croppable(cache: Any) -> bool:
    """Whether every layer of ``cache`` can drop its last positions (transformers' full-attention
    dynamic layers: a sliding window's or a static cache's cannot be rolled back as simply)."""
    layers = getattr(cache, "layers", None) or []
    return bool(layers) and all(
        getattr(x, "is_croppable", False) and not getattr(x, "is_sliding", True) for x in layers
    )


def _forked(prompt: torch.Tensor, prefix: tuple[Any, int]) -> Any:
    """A copy of the prefix cache, one row for every row of ``prompt``."""
    held, n = prefix
    if not 0 < n < prompt.shape[1]:
        raise ValueError(
            f"prefix of {n} positions is not allowed for a prompt of {prompt.shape[1]}; expected 0 < n < P"
        )
    cache = copy.deepcopy(held)
    if prompt.shape[0] > 1:  # one prefilled row for every question of the batch
        cache.batch_repeat_interleave(prompt.shape[0])
    return cache


def _branch(
    model: Any, prompt: torch.Tensor, answer: torch.Tensor, prefix: tuple[Any, int]
) -> tuple[Any, torch.Tensor]:
    """``(cache of P - 1 positions, [b] answer log-probability)``: one forward of the question and
    ``answer[:, :-1]`` on a copy of the prefix cache, the answer scored off its last ``A`` logits,
    then the copy cropped back by ``A`` positions (what ``generate`` continues from)."""
    cache, width = _forked(prompt, prefix), answer.shape[1]
    both = torch.cat([prompt[:, prefix[1] :], answer[:, :-1]], dim=1)  # [b, Q + A - 1]
    keep = {"logits_to_keep": width} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    out = model(input_ids=both, use_cache=True, **keep, **{_cache_name(model): cache})
    ans_lp = _answer_logp(out.logits[:, -width:], answer)  # [b]: predictions at the question's last token on
    cache.crop(-width)  # the last prompt token and the answer's first A - 1 tokens out again: P - 1 positions
    return cache, ans_lp


def _extended(model: Any, prompt: torch.Tensor, prefix: tuple[Any, int]) -> Any:
    """A copy of the prefix cache extended with ``prompt[:, n:-1]`` (the question but its last token)."""
    cache, n = _forked(prompt, prefix), prefix[1]
    if prompt.shape[1] - 1 > n:
        last_logits(model, prompt[:, n:-1], **{_cache_name(model): cache})  # extends the copy in place
    return cache


def first_integer(text: str) -> int | None:
    """The first run of digits in ``text`` as an int, or None."""
    match = _INTEGER.search(text)
    return int(match.group()) if match else None
