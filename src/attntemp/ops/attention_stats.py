"""Attention statistics at long context, query block by query block, never forming L x L.

For each query i (absolute position, causal, optional sliding window) and head, from the final
logits ``s_ij = m * softcap(q_i . k_j * scale)``:

- entropy ``H = logsumexp(s) - sum_j p_j s_j`` (nats) and ``H / ln n`` over the n visible keys;
- the largest weight; the mass on the first ``sink_tokens`` keys; the mass on the last
  ``recent_tokens`` keys (j > i - recent_tokens); the mean distance ``sum_j p_j (i - j)``.

Memory is O(B * H * block * L): the block size is picked to fit ``budget_bytes``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .attention import reference_scores
from .softmax import entropy

STATS = ("entropy", "norm_entropy", "max_weight", "sink_mass", "recent_mass", "mean_distance")
_NEG = -1e30  # a masked logit: exp underflows to 0 and 0 * _NEG stays finite
# The fused block's one [B, H, blk, Lk'] tensor is kept near the CPU's cache: on the tiny model's
# shape (H = 8, L = 1024, one thread) blocks of 4 MiB took 0.30 s, one block of 32 MiB 1.41 s.
FUSED_BYTES = 4 * 2**20
# ...but with at least this many queries a block: each block reads every key once, and at long L a
# 4 MiB block holds few queries (7 at H = 9, L = 16384: 2,300 blocks; see docs/measure.md). At
# H = 9, L = 8192, one thread under load, 32 / 64 / 128 / 256 queries took 2.1 / 1.9 / 1.7 / 2.3x SDPA.
FUSED_MIN_QUERIES = 64


def _block_logits(q, k, m, scale, softcap, q0, k0):
    """Final logits of queries [q0, q0 + blk) against keys [k0, q0 + blk): ``[B, H, blk, Lk']``.

    Without soft-capping, m and the scale are folded into q (exact), so this is one matmul.
    """
    b, hq, blk, d = q.shape
    k = k[:, :, k0 : q0 + blk].float()  # [B, Hkv, Lk', D]: later keys are never visible
    hkv, lk = k.shape[1], k.shape[2]
    qf = q.float() * scale  # [B, H, blk, D]
    if m is not None and softcap is None:
        qf = qf * m  # m: [B|1, H|1, blk|1, 1]
    qg = qf.reshape(b, hkv, (hq // hkv) * blk, d)  # [B, Hkv, G*blk, D]: GQA without repeating k
    s = (qg @ k.transpose(-1, -2)).reshape(b, hq, blk, lk)  # [B, H, blk, Lk']
    if softcap is not None:
        s = torch.tanh(s.div_(softcap)).mul_(softcap)
        if m is not None:
            s.mul_(m)
    return s


def _mask_(s, q0, k0, window):
    """Mask invisible keys in place (causal, optional window); return the visible count ``[blk]``."""
    blk, lk = s.shape[2], s.shape[3]
    i = torch.arange(q0, q0 + blk, device=s.device).unsqueeze(1)  # [blk, 1]
    if window is None:  # only the last blk key columns can be in the future
        j = torch.arange(q0, k0 + lk, device=s.device).unsqueeze(0)  # [1, blk]
        s[..., q0 - k0 :].masked_fill_(j > i, _NEG)
        return (i.squeeze(1) + 1).float()
    j = torch.arange(k0, k0 + lk, device=s.device).unsqueeze(0)  # [1, Lk']
    visible = (j <= i) & (j > i - window)  # [blk, Lk']
    s.masked_fill_(~visible, _NEG)
    return visible.sum(-1).float()


def extended_keys(k: torch.Tensor) -> torch.Tensor:
    """``[B, Hkv, Lk, D + 2]`` fp32: each key, then its position j and a 1, so that one product
    of the weights with it gives ``sum_j e_j k_j``, ``sum_j e_j j`` and ``Z = sum_j e_j`` at once."""
    b, hkv, lk, _ = k.shape
    j = torch.arange(lk, device=k.device, dtype=torch.float32).expand(b, hkv, lk)  # [B, Hkv, Lk]
    return torch.cat([k.float(), j.unsqueeze(-1), torch.ones_like(j).unsqueeze(-1)], -1)  # [B, Hkv, Lk, D+2]


def fused_block(q, k, kx, m, scale, q0, window, sink_tokens, recent_tokens):
    """:func:`block_stats` without soft-capping: keys ``k`` ``[B, Hkv, Lk, D]`` and the same keys
    extended, ``kx`` (:func:`extended_keys`); m broadcastable to ``[B, H, blk, 1]``.

    m and the scale are folded into q, so the logits ``s = q' . k`` are one matmul, turned into
    ``e = exp(s - max s)`` in place (the one ``[B, H, blk, Lk']`` tensor), and every sum the
    statistics need but the sink and recent bands comes from one more matmul, ``e @ [k, j, 1]``
    (as attention's ``p @ v``): ``sum_j e_j s_j = q' . sum_j e_j k_j``, so with ``M = max s``,
    ``H = ln Z + M - (q' . sum_j e_j k_j) / Z``."""
    b, hq, blk, d = q.shape
    k0 = 0 if window is None else max(0, q0 - window + 1)
    hkv = kx.shape[1]
    qf = q.float() * (scale if m is None else m * scale)  # [B, H, blk, D]
    qg = qf.reshape(b, hkv, (hq // hkv) * blk, d)  # [B, Hkv, G*blk, D]: GQA without repeating k
    kv = kx[:, :, k0 : q0 + blk]  # [B, Hkv, Lk', D+2]: later keys are never visible
    lk = kv.shape[2]
    e = (qg @ k[:, :, k0 : q0 + blk].float().transpose(-1, -2)).reshape(b, hq, blk, lk)  # [B, H, blk, Lk']: s
    n = _mask_(e, q0, k0, window)  # [blk]
    top = e.amax(-1, keepdim=True)  # [B, H, blk, 1]: M
    e.sub_(top).exp_()  # [B, H, blk, Lk']: e = exp(s - M), 0 where masked
    sums = (e.reshape(b, hkv, -1, lk) @ kv).reshape(b, hq, blk, d + 2)  # [B, H, blk, D+2]
    big_z = sums[..., d + 1]  # [B, H, blk]
    es = torch.linalg.vecdot(qf, sums[..., :d])  # [B, H, blk]: sum_j e_j s_j
    ent = (big_z.log() + top.squeeze(-1) - es / big_z).clamp_min(0)  # [B, H, blk]
    return _finish(e, big_z, ent, n, q0, k0, sink_tokens, recent_tokens, sums[..., d])


def _finish(e, big_z, ent, n, q0, k0, sink_tokens, recent_tokens, ej):
    """The statistics of queries ``q0..`` from their unnormalised weights ``e`` ``[B, H, blk, Lk']``
    on keys ``k0..``, ``Z``, the entropy and ``sum_j e_j j`` ``[B, H, blk]``, the visible counts ``[blk]``."""
    blk, lk = e.shape[2], e.shape[3]
    pos = torch.arange(q0, q0 + blk, device=e.device, dtype=torch.float32)  # [blk]
    lo = max(k0, q0 - recent_tokens + 1)  # the recent band lies in keys [lo, q0 + blk)
    keys = torch.arange(lo, k0 + lk, device=e.device, dtype=torch.float32)  # [band]
    band = keys.unsqueeze(0) > pos.unsqueeze(1) - recent_tokens  # [blk, band]
    return {
        "entropy": ent,
        "norm_entropy": torch.where(n > 1, ent / n.clamp_min(2).log(), torch.nan),
        "max_weight": 1.0 / big_z,
        "sink_mass": e[..., : max(0, sink_tokens - k0)].sum(-1) / big_z,
        "recent_mass": (e[..., lo - k0 :] * band).sum(-1) / big_z,
        "mean_distance": pos - ej / big_z,
    }


def block_stats(
    q: torch.Tensor,
    k: torch.Tensor,
    q0: int,
    multiplier: torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    window: int | None = None,
    sink_tokens: int = 4,
    recent_tokens: int = 64,
) -> dict[str, torch.Tensor]:
    """Statistics of queries ``q`` ``[B, H, blk, D]`` at positions ``q0..q0+blk-1`` against keys
    ``k`` ``[B, Hkv, Lk, D]`` (position j at index j). ``multiplier`` broadcastable to
    ``[B, H, blk]``. Returns each statistic as ``[B, H, blk]`` fp32.

    With ``z = s - max s`` and ``e = exp z``, ``Z = sum e``: ``H = ln Z - sum(e z) / Z``, the
    largest weight is ``1 / Z``, and every mass is a sum of ``e`` over ``Z``: p is never formed.
    This is the plain form (every sum its own pass; soft-capping goes through it), the reference
    of the fused one :func:`attention_stats` runs without soft-capping (tested against each other).
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    m = None if multiplier is None else multiplier.float().unsqueeze(-1)
    k0 = 0 if window is None else max(0, q0 - window + 1)
    z = _block_logits(q, k, m, scale, softcap, q0, k0)  # [B, H, blk, Lk']
    n = _mask_(z, q0, k0, window)  # [blk]
    z.sub_(z.amax(-1, keepdim=True))  # [B, H, blk, Lk'], max 0
    e = torch.exp(z)  # [B, H, blk, Lk']
    big_z = e.sum(-1)  # [B, H, blk]
    ez = (e.unsqueeze(-2) @ z.unsqueeze(-1)).reshape(big_z.shape)  # [B, H, blk]: sum_j e_j z_j
    ent = (big_z.log() - ez / big_z).clamp_min(0)  # [B, H, blk]
    keys = torch.arange(k0, k0 + z.shape[-1], device=q.device, dtype=torch.float32)  # [Lk']
    return _finish(e, big_z, ent, n, q0, k0, sink_tokens, recent_tokens, e @ keys)


LAST_QUERY_STATS = ("entropy", "norm_entropy", "sink_mass", "recent_mass")  # last_query_stacked's order


def last_query_stacked(
    q: torch.Tensor,
    k: torch.Tensor,
    multiplier: torch.Tensor | None = None,
    scale: float | None = None,
    sink_tokens: int = 4,
    recent_tokens: int = 64,
) -> torch.Tensor:
    """:data:`LAST_QUERY_STATS` stacked, ``[4, B, H]``, of one query per row, ``q`` ``[B, H, 1, D]``,
    that sees every key of ``k`` ``[B, Hkv, n, D]`` (the newest token while generating; keys in
    order, the sink at index 0 when ``sink_tokens`` > 0). The formulas of :func:`block_stats` with
    ``q0 = n - 1`` (its reference) in about half its tensor operations, since the monitor runs this
    at every recorded token: m and the scale folded into q, no mask (nothing is hidden), no
    weights but the needed sums (``H = ln Z - sum_j e_j z_j / Z``, ``z = s - max s``); no
    soft-capping."""
    b, hq, _, d = q.shape
    hkv, n = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qf = q.float() * (scale if multiplier is None else multiplier.float().reshape(b, hq, 1, 1) * scale)  # [B, H, 1, D]
    s = qf.reshape(b, hkv, hq // hkv, d) @ k.float().transpose(-1, -2)  # [B, Hkv, G, n]: GQA without repeats
    z = s.sub_(s.amax(-1, keepdim=True)).reshape(b, hq, n)  # [B, H, n], max 0
    e = torch.exp(z)  # [B, H, n]
    big_z = e.sum(-1)  # [B, H]
    ent = (big_z.log() - torch.linalg.vecdot(e, z) / big_z).clamp_min(0)  # [B, H]
    norm = ent / math.log(n) if n > 1 else torch.full_like(ent, torch.nan)  # [B, H]
    sink, recent = e[..., :sink_tokens].sum(-1), e[..., max(0, n - recent_tokens) :].sum(-1)  # [B, H] each
    return torch.stack([ent, norm, sink / big_z, recent / big_z])  # [4, B, H]


def last_query_stats(q: torch.Tensor, k: torch.Tensor, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
    """:func:`last_query_stacked` (the same arguments) by name: ``entropy``, ``norm_entropy``,
    ``sink_mass`` and ``recent_mass`` ``[B, H]``."""
    return dict(zip(LAST_QUERY_STATS, last_query_stacked(q, k, *args, **kwargs), strict=True))


def block_size(b: int, h: int, lk: int, budget_bytes: int = 64 * 2**20, temporaries: int = 4) -> int:
    """Queries per block so that ``temporaries`` fp32 ``[B, H, blk, Lk]`` tensors fit ``budget_bytes``
    (the fused path keeps one, the plain one about 4)."""
    return int(max(16, min(lk, budget_bytes // max(1, 4 * temporaries * b * h * lk))))


def fused_block_size(b: int, h: int, lk: int, budget_bytes: int) -> int:
    """Queries per fused block: its one ``[B, H, blk, Lk]`` fp32 tensor near :data:`FUSED_BYTES`,
    raised to :data:`FUSED_MIN_QUERIES` queries where that holds fewer (long contexts), never past
    ``budget_bytes``."""
    cached = block_size(b, h, lk, FUSED_BYTES, 1)
    return min(max(cached, FUSED_MIN_QUERIES), block_size(b, h, lk, budget_bytes, 1))


def attention_stats(
    q: torch.Tensor,
    k: torch.Tensor,
    multiplier: torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    window: int | None = None,
    sink_tokens: int = 4,
    recent_tokens: int = 64,
    budget_bytes: int = 64 * 2**20,
) -> dict[str, torch.Tensor]:
    """Per-query statistics ``[B, H, Lq]`` of causal attention, the queries being the last Lq
    positions of the Lk keys; computed in query blocks within ``budget_bytes``."""
    b, h, lq, _ = q.shape
    lk = k.shape[2]
    off = lk - lq
    if multiplier is not None:
        multiplier = multiplier.to(q.device, torch.float32)  # m may live on the CPU (a tuner's table)
        multiplier = multiplier.expand(b, h, lq) if multiplier.dim() else multiplier.reshape(1, 1, 1)
    blk = block_size(b, h, lk, budget_bytes) if softcap else fused_block_size(b, h, lk, budget_bytes)
    kx = extended_keys(k) if softcap is None else None  # [B, Hkv, Lk, D+2]: the fused path
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    parts: dict[str, list[torch.Tensor]] = {name: [] for name in STATS}
    for start in range(0, lq, blk):
        stop = min(lq, start + blk)
        mb = None
        if multiplier is not None:
            mb = multiplier if multiplier.shape[-1] == 1 else multiplier[..., start:stop]
        if kx is None:
            out = block_stats(
                q[:, :, start:stop], k, off + start, mb, scale, softcap, window, sink_tokens, recent_tokens
            )
        else:
            m = None if mb is None else mb.unsqueeze(-1)  # [B|1, H|1, blk|1, 1]
            out = fused_block(q[:, :, start:stop], k, kx, m, scale, off + start, window, sink_tokens, recent_tokens)
        for name in STATS:
            parts[name].append(out[name])
    return {name: torch.cat(v, dim=-1) for name, v in parts.items()}


def reference_stats(
    q: torch.Tensor,
    k: torch.Tensor,
    multiplier: torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    window: int | None = None,
    sink_tokens: int = 4,
    recent_tokens: int = 64,
) -> dict[str, torch.Tensor]:
    """The same statistics from the materialised weights (tests only: O(L^2) memory)."""
    lq, lk = q.shape[2], k.shape[2]
    mask = None
    if window is not None:
        i = torch.arange(lk - lq, lk).unsqueeze(1)
        j = torch.arange(lk).unsqueeze(0)
        mask = (j <= i) & (j > i - window)
    s = reference_scores(
        q, k, multiplier, is_causal=mask is None, attn_mask=mask, scale=scale, softcap=softcap
    )  # [B, H, Lq, Lk]
    p = torch.softmax(s, -1)  # [B, H, Lq, Lk]
    pos = torch.arange(lk - lq, lk, dtype=torch.float32)  # [Lq]
    n = torch.isfinite(s[0, 0]).sum(-1).float()  # [Lq]
    j = torch.arange(lk, dtype=torch.float32)
    recent = (j.unsqueeze(0) > pos.unsqueeze(1) - recent_tokens).float()  # [Lq, Lk]
    h = entropy(s)
    return {
        "entropy": h,
        "norm_entropy": torch.where(n > 1, h / n.clamp_min(2).log(), torch.nan),
        "max_weight": p.amax(-1),
        "sink_mass": p[..., :sink_tokens].sum(-1),
        "recent_mass": (p * recent).sum(-1),
        "mean_distance": (p * (pos.unsqueeze(1) - j)).sum(-1),
    }
