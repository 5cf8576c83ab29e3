"""The blocked causal attention (GEMMs with an online softmax) against the materialised reference:
GQA without repeating k and v, a cache offset (fewer queries than keys), blocks that do not divide
the length, bf16 with fp32 statistics."""

import pytest
import torch

from attntemp.ops.attention import fold_into_q, head_column, reference_attention, tempered_sdpa
from attntemp.ops.attention_blocked import blocked_causal_attention

G = torch.Generator().manual_seed(0)


def qkv(b, hq, hkv, lq, lk, d, dtype=torch.float32):
    q = torch.randn(b, hq, lq, d, generator=G).to(dtype)  # [B, Hq, Lq, D]
    k, v = (torch.randn(b, hkv, lk, d, generator=G).to(dtype) for _ in range(2))  # [B, Hkv, Lk, D]
    return q, k, v


@pytest.mark.parametrize(
    "b, hq, hkv, lq, lk, d, bq, bk",
    [
        (1, 9, 3, 300, 300, 64, 256, 512),  # SmolLM2's heads, the default blocks
        (2, 4, 1, 100, 100, 32, 32, 48),  # Gemma 3's grouping, blocks not dividing L or each other
        (1, 6, 2, 37, 90, 16, 16, 16),  # a cache offset: query i at position i + 53
        (1, 2, 2, 1, 50, 8, 256, 512),  # one decoding step
    ],
)
def test_float32_equals_the_reference(b, hq, hkv, lq, lk, d, bq, bk):
    q, k, v = qkv(b, hq, hkv, lq, lk, d)
    m = head_column(torch.linspace(0.6, 1.5, hq))  # [Hq, 1]: per-head multipliers, folded into q
    ref = reference_attention(q, k, v, m)  # [B, Hq, Lq, D]
    out = blocked_causal_attention(fold_into_q(q, m), k, v, block_q=bq, block_k=bk)  # [B, Hq, Lq, D]
    assert out.shape == ref.shape and (out - ref).abs().max() < 1e-5


def test_bfloat16_is_as_close_to_float32_as_sdpa_in_bfloat16():
    q, k, v = qkv(1, 9, 3, 600, 600, 64)
    ref = tempered_sdpa(q, k, v, enable_gqa=True)  # [1, 9, 600, 64] float32
    half = [t.bfloat16() for t in (q, k, v)]
    ours = (blocked_causal_attention(*half).float() - ref).abs().max()
    sdpa = (tempered_sdpa(*half, enable_gqa=True).float() - ref).abs().max()
    assert blocked_causal_attention(*half).dtype == torch.bfloat16
    assert ours < 0.03 and ours < 3 * sdpa  # bf16 matmuls, fp32 softmax statistics


def test_a_scale_and_bad_shapes():
    q, k, v = qkv(1, 4, 2, 20, 20, 8)
    ref = tempered_sdpa(q, k, v, scale=0.3, enable_gqa=True)
    assert (blocked_causal_attention(q, k, v, scale=0.3) - ref).abs().max() < 1e-5
    with pytest.raises(ValueError, match="multiple of Hkv"):
        blocked_causal_attention(q[:, :3], k, v)
    with pytest.raises(ValueError, match="Lk >= Lq"):
        blocked_causal_attention(q, k[:, :, :10], v[:, :, :10])
