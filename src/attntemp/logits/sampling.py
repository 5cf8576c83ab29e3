"""Temperature, top-k and top-p sampling as one transformers ``LogitsProcessor``.

The temperature ``T`` divides the next-token scores (the multiplier ``m = 1/T`` multiplies them).
The filters reproduce transformers' ``TemperatureLogitsWarper -> TopKLogitsWarper ->
TopPLogitsWarper`` chain exactly, in the dtype of the scores, ties included: every token tied with
the k-th largest score survives top-k, and top-p (nucleus sampling) drops the tokens whose
ascending cumulative probability is ``<= 1 - top_p``, keeping at least ``min_tokens_to_keep``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from transformers import LogitsProcessor

from ..ops import tensor_checks
from ..utils import checks


def _temperature_or_zero(value: float) -> float:
    """T >= 0 as a float; 0 is the greedy case, negative or NaN T is refused."""
    try:
        t = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"temperature={value!r} is not a number; expected a finite number >= 0 (0 = greedy)") from None
    if not math.isfinite(t) or t < 0:
        raise ValueError(f"temperature={value!r} is not allowed; expected a finite number >= 0 (0 = greedy)")
    return t


def greedy_filter(scores: torch.Tensor, filter_value: float = -math.inf) -> torch.Tensor:
    """Keep only the argmax of each row (the first one on ties, as ``torch.argmax``)."""
    best = scores.argmax(dim=-1, keepdim=True)  # [B, 1]
    out = torch.full_like(scores, filter_value)  # [B, V]
    return out.scatter(-1, best, scores.gather(-1, best))  # [B, V]


def top_k_filter(scores: torch.Tensor, top_k: int, filter_value: float = -math.inf) -> torch.Tensor:
    """Set every score below the k-th largest of its row to ``filter_value`` (ties kept)."""
    k = min(top_k, scores.size(-1))
    kth = torch.topk(scores, k)[0][..., -1, None]  # [B, 1]
    return scores.masked_fill(scores < kth, filter_value)  # [B, V]


def top_p_filter(
    scores: torch.Tensor,
    top_p: float,
    min_tokens_to_keep: int = 1,
    filter_value: float = -math.inf,
) -> torch.Tensor:
    """Nucleus filter: drop the least likely tokens whose total probability is ``<= 1 - top_p``."""
    sorted_scores, sorted_idx = torch.sort(scores, descending=False)  # [B, V], [B, V]
    cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)  # [B, V]
    remove_sorted = cumulative <= (1 - top_p)  # [B, V]
    remove_sorted[..., -min_tokens_to_keep:] = False
    remove = remove_sorted.scatter(1, sorted_idx, remove_sorted)  # [B, V]
    return scores.masked_fill(remove, filter_value)  # [B, V]


@dataclass(frozen=True)
class TemperatureTopKTopP(LogitsProcessor):
    """Temperature, then top-k, then top-p, on next-token ``scores`` [B, V].

    ``temperature`` is T (divides the scores); ``temperature=0`` means greedy: every score but the
    row's argmax (first on ties) becomes ``filter_value``, the argmax keeps its raw score, and
    top-k/top-p are not applied. ``top_k=0`` and ``top_p=1.0`` switch those filters off, as in
    ``transformers.generate``. ``top_k`` is raised to ``min_tokens_to_keep`` like
    ``TopKLogitsWarper`` does.
    """

    temperature: float
    top_k: int = 0
    top_p: float = 1.0
    min_tokens_to_keep: int = 1
    filter_value: float = -math.inf

    def __post_init__(self) -> None:
        object.__setattr__(self, "temperature", _temperature_or_zero(self.temperature))
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k={self.top_k!r} is not allowed; expected an integer >= 0 (0 = off)")
        top_p = checks.at_least("top_p", self.top_p, 0.0)
        if top_p > 1.0:
            raise ValueError(f"top_p={self.top_p!r} is not allowed; expected a number in [0, 1] (1 = off)")
        object.__setattr__(self, "top_p", top_p)
        keep = checks.positive_int("min_tokens_to_keep", self.min_tokens_to_keep)
        object.__setattr__(self, "min_tokens_to_keep", keep)

    def __call__(self, input_ids: torch.LongTensor | None, scores: torch.Tensor) -> torch.Tensor:
        """Filtered scores [B, V]; ``input_ids`` is unused (the LogitsProcessor signature)."""
        if not torch.is_tensor(scores) or not scores.is_floating_point() or scores.dim() != 2:
            got = tuple(scores.shape) if torch.is_tensor(scores) else type(scores).__name__
            raise ValueError(f"scores must be a float tensor [B, V], got {got}")
        tensor_checks.finite_tensor("scores", scores)
        if self.temperature == 0:
            return greedy_filter(scores, self.filter_value)  # [B, V]
        out = scores / self.temperature  # [B, V]
        if self.top_k != 0:
            out = top_k_filter(out, max(self.top_k, self.min_tokens_to_keep), self.filter_value)
        if self.top_p < 1.0:
            out = top_p_filter(out, self.top_p, self.min_tokens_to_keep, self.filter_value)
        return out  # [B, V]


def sample(
    logits: torch.Tensor,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Draw one token id per row of ``logits`` [..., V] -> [...] after temperature/top-k/top-p.

    ``temperature`` is T (divides the logits); T = 0 returns the argmax without drawing. The draw
    is ``torch.multinomial(softmax(filtered), 1, generator=generator)``, as in ``generate``.
    """
    proc = TemperatureTopKTopP(temperature, top_k, top_p)
    if not torch.is_tensor(logits) or logits.dim() < 1 or logits.shape[-1] == 0:
        got = tuple(logits.shape) if torch.is_tensor(logits) else type(logits).__name__
        raise ValueError(f"logits must be a tensor [..., V] with V >= 1, got {got}")
    flat = logits.reshape(-1, logits.shape[-1])  # [N, V]
    scores = proc(None, flat)  # [N, V]
    if proc.temperature == 0:
        return scores.argmax(dim=-1).reshape(logits.shape[:-1])  # [...]
    if scores.dtype in (torch.float16, torch.bfloat16):
        scores = scores.float()  # [N, V]
    probs = torch.softmax(scores, dim=-1)  # [N, V]
    tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # [N]
    return tokens.reshape(logits.shape[:-1])  # [...]
