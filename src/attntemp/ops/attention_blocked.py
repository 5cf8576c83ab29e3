"""Blocked causal attention of GEMMs with an online softmax, in pure torch.

The FlashAttention recurrence (Dao et al. 2022, "FlashAttention: Fast and Memory-Efficient Exact
Attention with IO-Awareness", Algorithm 1): queries in blocks of ``block_q`` rows, each against its
visible keys in blocks of ``block_k``, the blocks wholly above the causal diagonal never computed.
Per query row it keeps the running maximum ``mx``, the running sum ``total`` of ``exp(s - mx)`` and
the unnormalised output ``acc``; a new key block with scores ``s`` updates them as

    mx' = max(mx, rowmax(s));  c = exp(mx - mx');  total' = c total + rowsum(exp(s - mx'));
    acc' = c acc + exp(s - mx') @ v

and the output is ``acc / total``. The two matmuls run in the compute dtype (bf16 where the inputs are
bf16: AMX or ``avx512_bf16`` tiles); the scores, ``mx``, ``total`` and ``acc`` are float32. GQA puts a
kv head's ``G = Hq / Hkv`` query heads in one matmul (``[G * block_q, D]`` rows), so k and v are
never repeated.

It is a candidate for :mod:`attntemp.hf.probes.kernel`, which times it against torch's SDPA on the
model's head shape and dtype and uses whichever is faster; ``benchmarks/attention_rate.py`` has
the figures (on an Intel Xeon with AMX torch's fused CPU kernel is faster, docs/scale.md).
"""

from __future__ import annotations

import math

import torch

BLOCK_Q = 256  # query rows per block (per query head)
BLOCK_K = 512  # keys per block


def _grouped_queries(q: torch.Tensor, hkv: int, i0: int, i1: int, scale: float) -> torch.Tensor:
    """Queries ``[i0, i1)`` of ``q [B, Hq, Lq, D]``, scaled, as ``[B, Hkv, G * n, D]`` (row g * n + r)."""
    b, hq, _, d = q.shape
    qb = q[:, :, i0:i1] * scale  # [B, Hq, n, D]
    return qb.reshape(b, hkv, (hq // hkv) * (i1 - i0), d)  # [B, Hkv, G * n, D]


def _block_scores(qb: torch.Tensor, k: torch.Tensor, j0: int, j1: int, rows: torch.Tensor | None) -> torch.Tensor:
    """float32 scores of ``qb [B, Hkv, R, D]`` against keys ``[j0, j1)`` of ``k [B, Hkv, Lk, D]``,
    ``-inf`` where key j is past row r's last visible key ``rows[r]`` (None: every key visible)."""
    s = torch.matmul(qb, k[:, :, j0:j1].transpose(-1, -2)).float()  # [B, Hkv, R, bk]
    if rows is not None:
        j = torch.arange(j0, j1, device=s.device)  # [bk]
        s.masked_fill_(j.unsqueeze(0) > rows.unsqueeze(1), -math.inf)  # mask [R, bk]
    return s


def _online_update(
    state: tuple[torch.Tensor, torch.Tensor, torch.Tensor], s: torch.Tensor, vb: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One key block into the running (max, sum, output): ``s [B, Hkv, R, bk]`` float32 (consumed),
    ``vb [B, Hkv, bk, D]`` in the compute dtype; state ``([B, Hkv, R, 1], [B, Hkv, R, 1],
    [B, Hkv, R, D])`` float32."""
    mx, total, acc = state
    new_mx = torch.maximum(mx, s.amax(-1, keepdim=True))  # [B, Hkv, R, 1]
    p = s.sub_(new_mx).exp_()  # [B, Hkv, R, bk]: exp(s - mx'), in place
    c = (mx - new_mx).exp_()  # [B, Hkv, R, 1]: the old terms' rescale
    total = total.mul_(c).add_(p.sum(-1, keepdim=True))  # [B, Hkv, R, 1]
    acc = acc.mul_(c).add_(torch.matmul(p.to(vb.dtype), vb))  # [B, Hkv, R, D]
    return new_mx, total, acc


def _query_block(q, k, v, i0: int, i1: int, off: int, scale: float, block_k: int) -> torch.Tensor:
    """Causal attention of queries ``[i0, i1)`` (absolute positions ``i + off``): ``[B, Hkv, G * n, D]``."""
    b, hkv, d = k.shape[0], k.shape[1], k.shape[3]
    qb = _grouped_queries(q, hkv, i0, i1, scale)  # [B, Hkv, R, D], R = G * n
    r = qb.shape[2]
    last = (torch.arange(i0, i1, device=q.device) + off).repeat(r // (i1 - i0))  # [R]: last visible key
    state = (
        torch.full((b, hkv, r, 1), -math.inf, device=q.device),  # [B, Hkv, R, 1] running max
        torch.zeros(b, hkv, r, 1, device=q.device),  # [B, Hkv, R, 1] running sum
        torch.zeros(b, hkv, r, d, device=q.device),  # [B, Hkv, R, D] unnormalised output
    )
    for j0 in range(0, i1 + off, block_k):  # key blocks past the diagonal are skipped
        j1 = min(i1 + off, j0 + block_k)
        s = _block_scores(qb, k, j0, j1, last if j1 - 1 > i0 + off else None)  # [B, Hkv, R, bk]
        state = _online_update(state, s, v[:, :, j0:j1])
    _, total, acc = state
    return acc.div_(total)  # [B, Hkv, R, D]


def blocked_causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None = None,
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
) -> torch.Tensor:
    """Causal attention, bottom-right aligned (query i sees keys ``j <= i + Lk - Lq``), as query x
    key blocks of GEMMs with an online softmax (FlashAttention, Dao et al. 2022; see the module).

    q ``[B, Hq, Lq, D]`` (any temperature already folded in), k/v ``[B, Hkv, Lk, D]`` with Hq a
    multiple of Hkv and Lk >= Lq; returns ``[B, Hq, Lq, D]`` in q's dtype. Memory
    O(Hq * block_q * block_k) beyond the inputs, never ``[Lq, Lk]``.
    """
    b, hq, lq, d = q.shape
    hkv, off = k.shape[1], k.shape[2] - lq
    if hq % hkv or off < 0:
        raise ValueError(f"blocked_causal_attention: Hq={hq} must be a multiple of Hkv={hkv}, Lk >= Lq={lq}")
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = torch.empty(b, hkv, hq // hkv, lq, d, dtype=q.dtype, device=q.device)  # [B, Hkv, G, Lq, D]
    for i0 in range(0, lq, block_q):
        i1 = min(lq, i0 + block_q)
        blk = _query_block(q, k, v, i0, i1, off, scale, block_k)  # [B, Hkv, G * n, D]
        out[:, :, :, i0:i1] = blk.reshape(b, hkv, hq // hkv, i1 - i0, d)  # [B, Hkv, G, n, D]
    return out.reshape(b, hq, lq, d)  # [B, Hq, Lq, D]
