"""Tempered attention: the multiplier ``m = 1/T`` folded into q before the fused SDPA kernel.

``(m q) . k = m (q . k)`` holds exactly for any m per (batch, head, query row), so
``tempered_sdpa`` keeps PyTorch's fused kernels (flash, memory-efficient, or the CPU flash kernel)
and never forms the L x L score matrix. It is never folded into k: a KV cache would carry it.
``reference_attention`` materialises the scores; it is the ground truth in tests and the only
path for what cannot be folded exactly: an additive float bias (ALiBi, T5) or logit soft-capping
(Gemma 2), where the temperature must divide the final logits ``softcap(q.k * scale) + bias``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..utils import checks
from . import tensor_checks

MultiplierLike = float | torch.Tensor | None


def as_multiplier(multiplier: MultiplierLike, shape: tuple[int, int, int]) -> torch.Tensor | None:
    """Validate ``multiplier`` (> 0, finite, broadcastable to ``shape`` = [B, Hq, Lq]).

    Returns None when it is a plain 1 (nothing to fold). A per-head vector must be shaped
    ``[Hq, 1]`` (or ``[1, Hq, 1]``); see :func:`head_column`.
    """
    if multiplier is None:
        return None
    if not torch.is_tensor(multiplier):
        m = checks.positive("multiplier", multiplier)
        return None if m == 1.0 else torch.tensor(m)
    tensor_checks.positive_tensor("multiplier", multiplier)
    try:
        out = torch.broadcast_shapes(multiplier.shape, shape)
    except RuntimeError:
        out = None
    if out != torch.Size(shape):
        raise ValueError(
            f"multiplier has shape {tuple(multiplier.shape)}; expected a shape broadcastable to "
            f"[B, Hq, Lq] = {list(shape)} (a per-head vector as [Hq, 1])"
        )
    return multiplier


def head_column(multiplier: torch.Tensor | list[float]) -> torch.Tensor:
    """A per-head multiplier ``[Hq]`` reshaped to ``[Hq, 1]`` so it broadcasts over queries."""
    return torch.as_tensor(multiplier, dtype=torch.float32).reshape(-1, 1)  # [Hq, 1]


def fold_into_q(q: torch.Tensor, multiplier: torch.Tensor | None) -> torch.Tensor:
    """``q * m`` with m [.., Hq, Lq] broadcast over the head dimension D (computed in fp32)."""
    if multiplier is None:
        return q
    dtype = torch.promote_types(q.dtype, torch.float32)  # fp32 for half types, fp64 kept
    m = multiplier.to(device=q.device, dtype=dtype).unsqueeze(-1)  # [B?, Hq?, Lq?, 1]
    return (q.to(dtype) * m).to(q.dtype)  # [B, Hq, Lq, D]


def _is_fold_safe_mask(mask: torch.Tensor) -> bool:
    """A float mask of only 0 and -inf (or the dtype's min) is a mask, not a bias."""
    if mask.dtype == torch.bool:
        return True
    low = torch.finfo(mask.dtype).min
    return bool(((mask == 0) | (mask == float("-inf")) | (mask <= low)).all())


def foldable(attn_mask: torch.Tensor | None = None, softcap: float | None = None) -> bool:
    """Whether m folds into q exactly: no logit soft-capping, and no mask or a true mask (boolean,
    or float of only 0 / -inf), not an additive bias. Otherwise m must multiply the materialised
    final logits (:func:`reference_scores`)."""
    return softcap is None and (attn_mask is None or _is_fold_safe_mask(attn_mask))


def causal_mask(lq: int, lk: int, device: torch.device | None = None) -> torch.Tensor:
    """Boolean ``[Lq, Lk]`` mask, bottom-right aligned: query i sees keys ``j <= i + Lk - Lq``."""
    ones = torch.ones(lq, lk, dtype=torch.bool, device=device)  # [Lq, Lk]
    return ones.tril(diagonal=lk - lq)  # [Lq, Lk]


def tempered_sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    multiplier: MultiplierLike = None,
    is_causal: bool = True,
    attn_mask: torch.Tensor | None = None,
    enable_gqa: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """SDPA with logits multiplied by ``multiplier`` (m = 1/T), folded into q.

    q ``[B, Hq, Lq, D]``, k/v ``[B, Hkv, Lk, D]``; returns ``[B, Hq, Lq, D]``. Causal masking is
    bottom-right aligned, so decoding against a cache (Lq < Lk) is right. A boolean mask or a
    float mask of 0/-inf folds exactly; an additive float bias raises ValueError (use
    :func:`reference_attention`, which applies m to ``scores + bias``).
    """
    b, hq, lq, _ = q.shape
    m = as_multiplier(multiplier, (b, hq, lq))
    if m is not None and not foldable(attn_mask):
        raise ValueError(
            "attn_mask is an additive float bias (values other than 0 and -inf): a temperature "
            "cannot be folded into q exactly; use attntemp.ops.attention.reference_attention"
        )
    lk = k.shape[-2]
    if is_causal and lq != lk and attn_mask is None:
        attn_mask, is_causal = causal_mask(lq, lk, q.device), False
    elif is_causal and attn_mask is not None:
        attn_mask = _merge_causal(attn_mask, lq, lk)
        is_causal = False
    qm = fold_into_q(q, m)  # [B, Hq, Lq, D]
    return F.scaled_dot_product_attention(
        qm, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa
    )  # [B, Hq, Lq, D]


def windowed_sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    scale: float | None = None,
    block: int = 0,
    dropout: float = 0.0,
) -> torch.Tensor:
    """Causal sliding-window SDPA without an ``[Lq, Lk]`` mask: query i, at absolute position
    ``p = i + Lk - Lq`` (bottom-right aligned, as with a cache), sees keys ``p - window < j <= p``
    (transformers' ``sliding_window``), over query blocks of ``block`` rows (default: the window),
    each against its at most ``block + window - 1`` keys with a mask of that many columns.

    q ``[B, Hq, Lq, D]`` (any temperature already folded in), k/v ``[B, Hkv, Lk, D]`` with Hq a
    multiple of Hkv; returns ``[B, Hq, Lq, D]``. Memory O(L D + block (block + window)), not O(Lq Lk).
    """
    lq, off, win = q.shape[2], k.shape[2] - q.shape[2], checks.positive_int("window", window)
    blk = block or win
    out = torch.empty_like(q)  # [B, Hq, Lq, D]
    gqa = q.shape[1] != k.shape[1]
    for start in range(0, lq, blk):
        stop = min(lq, start + blk)
        k0, k1 = max(0, start + off - win + 1), stop + off
        p = torch.arange(start + off, k1, device=q.device).unsqueeze(1)  # [blk, 1]
        j = torch.arange(k0, k1, device=q.device).unsqueeze(0)  # [1, <= blk + win - 1]
        out[:, :, start:stop] = F.scaled_dot_product_attention(
            q[:, :, start:stop],
            k[:, :, k0:k1],
            v[:, :, k0:k1],
            attn_mask=(j <= p) & (j > p - win),
            scale=scale,
            enable_gqa=gqa,
            dropout_p=dropout,
        )  # [B, Hq, blk, D]
    return out


def _merge_causal(mask: torch.Tensor, lq: int, lk: int) -> torch.Tensor:
    causal = causal_mask(lq, lk, mask.device)  # [Lq, Lk]
    if mask.dtype == torch.bool:
        return mask & causal
    return mask.masked_fill(~causal, float("-inf"))


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """``[B, Hkv, L, D]`` -> ``[B, Hkv * groups, L, D]`` (each kv head serves ``groups`` q heads)."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def reference_scores(
    q: torch.Tensor,
    k: torch.Tensor,
    multiplier: MultiplierLike = None,
    is_causal: bool = True,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Materialised final logits ``m * (softcap(q.k * scale) + bias)``, masked with -inf (fp32)."""
    b, hq, lq, d = q.shape
    m = as_multiplier(multiplier, (b, hq, lq))
    k = repeat_kv(k, hq // k.shape[1])  # [B, Hq, Lk, D]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    s = (q.float() @ k.float().transpose(-1, -2)) * scale  # [B, Hq, Lq, Lk]
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap  # [B, Hq, Lq, Lk]
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        s = s.masked_fill(~attn_mask, float("-inf"))
    elif attn_mask is not None:
        s = s + attn_mask.float()  # [B, Hq, Lq, Lk]
    if is_causal:
        s = s.masked_fill(~causal_mask(lq, k.shape[-2], q.device), float("-inf"))
    if m is not None:
        s = s * m.to(s.device, torch.float32).unsqueeze(-1)  # [B, Hq, Lq, Lk]
    return s


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    multiplier: MultiplierLike = None,
    is_causal: bool = True,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """The manual path: softmax over materialised tempered logits, then ``@ v`` ``[B, Hq, Lq, D]``.

    Memory O(B * Hq * Lq * Lk). GQA is handled by repeating k and v.
    """
    s = reference_scores(q, k, multiplier, is_causal, attn_mask, scale, softcap)  # [B,Hq,Lq,Lk]
    p = torch.softmax(s, dim=-1)  # [B, Hq, Lq, Lk]
    v = repeat_kv(v, q.shape[1] // v.shape[1])  # [B, Hq, Lk, D]
    return (p @ v.float()).to(q.dtype)  # [B, Hq, Lq, D]
