"""tempered_sdpa (fused, folded into q) against the materialised reference path."""

import pytest
import torch

from attntemp.ops.attention import (
    causal_mask,
    head_column,
    reference_attention,
    reference_scores,
    tempered_sdpa,
    windowed_sdpa,
)
from attntemp.ops.softmax import tempered_softmax


def qkv(b=2, hq=8, hkv=8, lq=33, lk=33, d=32, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, lq, d, generator=g).to(dtype)
    k = torch.randn(b, hkv, lk, d, generator=g).to(dtype)
    v = torch.randn(b, hkv, lk, d, generator=g).to(dtype)
    return q, k, v


def multipliers(b, hq, lq):
    g = torch.Generator().manual_seed(3)
    return {
        "none": None,
        "scalar": 1.7,
        "scalar_tensor": torch.tensor(0.6),
        "per_head": head_column(0.5 + torch.rand(hq, generator=g)),
        "per_row": 0.5 + torch.rand(b, hq, lq, generator=g),
    }


@pytest.mark.parametrize("kind", ["none", "scalar", "scalar_tensor", "per_head", "per_row"])
@pytest.mark.parametrize("hkv, lq, lk", [(8, 33, 33), (2, 33, 33), (2, 5, 40), (4, 1, 17)])
def test_fused_equals_reference_fp32(kind, hkv, lq, lk):
    q, k, v = qkv(hkv=hkv, lq=lq, lk=lk)
    m = multipliers(2, 8, lq)[kind]
    fused = tempered_sdpa(q, k, v, m, enable_gqa=hkv != 8)
    ref = reference_attention(q, k, v, m)
    assert (fused - ref).abs().max() < 1e-5


def test_fused_equals_reference_bf16():
    q, k, v = qkv(dtype=torch.bfloat16)
    m = head_column(torch.linspace(0.5, 2.0, 8))
    fused = tempered_sdpa(q, k, v, m).float()
    ref = reference_attention(q.float(), k.float(), v.float(), m)
    # bf16 carries ~3 significant digits; outputs are O(1) averages of v
    assert (fused - ref).abs().max() < 3e-2


def test_multiplier_really_changes_the_weights():
    q, k, v = qkv(lq=16, lk=16)
    base = tempered_sdpa(q, k, v)
    assert (tempered_sdpa(q, k, v, 2.0) - base).abs().max() > 1e-2
    # and equals a hand-written softmax(m * q.k / sqrt(d)) @ v
    s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    s = s.masked_fill(~causal_mask(16, 16), float("-inf"))
    hand = tempered_softmax(s, 1 / 2.0) @ v
    assert (tempered_sdpa(q, k, v, 2.0) - hand).abs().max() < 1e-5


def test_decoding_against_a_cache_is_bottom_right_causal():
    q, k, v = qkv(lq=40, lk=40)
    m = head_column(torch.linspace(0.7, 1.4, 8))
    full = tempered_sdpa(q, k, v, m)
    last = tempered_sdpa(q[:, :, -3:], k, v, m)  # 3 new tokens against 40 cached keys
    assert (full[:, :, -3:] - last).abs().max() < 1e-5


def test_boolean_and_minus_inf_masks_fold_exactly():
    q, k, v = qkv(lq=12, lk=12)
    keep = torch.rand(12, 12, generator=torch.Generator().manual_seed(5)) > 0.3
    keep |= torch.eye(12, dtype=torch.bool)
    floatmask = torch.zeros(12, 12).masked_fill(~keep, float("-inf"))
    m = head_column(torch.linspace(0.5, 2, 8))
    a = tempered_sdpa(q, k, v, m, is_causal=False, attn_mask=keep)
    b = tempered_sdpa(q, k, v, m, is_causal=False, attn_mask=floatmask)
    ref = reference_attention(q, k, v, m, is_causal=False, attn_mask=keep)
    assert (a - ref).abs().max() < 1e-5 and (b - ref).abs().max() < 1e-5


def test_additive_bias_refused_and_reference_handles_it():
    q, k, v = qkv(lq=6, lk=6)
    bias = torch.randn(6, 6)  # ALiBi-like
    with pytest.raises(ValueError, match="additive float bias"):
        tempered_sdpa(q, k, v, 1.5, attn_mask=bias)
    assert torch.allclose(
        tempered_sdpa(q, k, v, None, attn_mask=bias, is_causal=False),
        reference_attention(q, k, v, None, attn_mask=bias, is_causal=False),
        atol=1e-5,
    )
    s = reference_scores(q, k, 1.5, attn_mask=bias, is_causal=False)
    plain = reference_scores(q, k, None, attn_mask=bias, is_causal=False)
    assert torch.allclose(s, 1.5 * plain)  # m multiplies scores + bias


def test_softcap_reference_applies_temperature_after_capping():
    q, k, _ = qkv(lq=6, lk=6)
    s = reference_scores(q * 10, k, 0.5, softcap=5.0)
    capped = reference_scores(q * 10, k, None, softcap=5.0)
    finite = torch.isfinite(capped)
    assert torch.allclose(s[finite], 0.5 * capped[finite])
    assert capped[finite].abs().max() <= 5.0


@pytest.mark.parametrize(
    "m, match",
    [
        (0.0, "multiplier=0.0"),
        (-1.0, "multiplier=-1.0"),
        (float("nan"), "multiplier=nan"),
        (float("inf"), "multiplier=inf"),
        (torch.tensor([1.0, 2.0, 3.0]).reshape(3, 1), r"shape \(3, 1\)"),
        (torch.tensor([[1.0], [float("nan")]] * 4), "multiplier has a value nan"),
    ],
)
def test_bad_multiplier(m, match):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=match):
        tempered_sdpa(q, k, v, m)


@pytest.mark.parametrize("hkv, lq, lk, window, block", [(8, 70, 70, 16, 0), (2, 70, 70, 16, 7), (2, 20, 50, 9, 0),
                                                        (4, 33, 33, 40, 0), (1, 64, 64, 1, 5)])  # fmt: skip
def test_windowed_sdpa_equals_the_masked_reference(hkv, lq, lk, window, block):
    q, k, v = qkv(hkv=hkv, lq=lq, lk=lk)
    p = torch.arange(lq).unsqueeze(1) + lk - lq  # [Lq, 1]: absolute positions, bottom-right aligned
    j = torch.arange(lk).unsqueeze(0)  # [1, Lk]
    mask = (j <= p) & (j > p - window)  # [Lq, Lk]
    ref = reference_attention(q, k, v, None, is_causal=False, attn_mask=mask, scale=0.3)  # [B, Hq, Lq, D]
    got = windowed_sdpa(q, k, v, window, scale=0.3, block=block)
    assert got.shape == ref.shape and (got - ref).abs().max() < 1e-5
    wider = windowed_sdpa(q, k, v, window + 3, scale=0.3, block=block)
    assert lq <= window or (wider - ref).abs().max() > 1e-3  # the window is really applied
