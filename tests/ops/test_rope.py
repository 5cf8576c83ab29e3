"""attntemp.ops.rope against transformers' own implementation, and the attention_factor convention."""

import itertools
import math

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from attntemp.ops import rope

DIMS = (32, 64, 128)
BASES = (10000.0, 100000.0, 500000.0)
FACTORS = (1.0, 2.0, 4.0, 8.0, 32.0)
L0S = (256, 2048, 8192)


def hf(rope_type, dim, base, l0, seq_len=None, **params):
    cfg = LlamaConfig(
        hidden_size=dim * 2,
        num_attention_heads=2,
        head_dim=dim,
        max_position_embeddings=l0,
        rope_parameters={"rope_type": rope_type, "rope_theta": base, **params},
    )
    return ROPE_INIT_FUNCTIONS[rope_type](cfg, None, seq_len=seq_len)


def close(a, b):
    (ia, fa), (ib, fb) = a, b
    assert torch.allclose(ia.float(), ib.float(), rtol=1e-6, atol=0)
    assert fa == pytest.approx(fb, rel=1e-6)


GRID = list(itertools.product(DIMS, BASES, FACTORS, L0S))


@pytest.mark.parametrize("dim, base, s, l0", GRID)
def test_linear_dynamic_yarn_match_transformers(dim, base, s, l0):
    close(rope.compute_inv_freq("linear", dim, base, factor=s), hf("linear", dim, base, l0, factor=s))
    for seq in (None, l0 * 3):
        close(
            rope.compute_inv_freq("dynamic", dim, base, factor=s, max_position_embeddings=l0, seq_len=seq),
            hf("dynamic", dim, base, l0, seq_len=seq, factor=s),
        )
    for truncate in (True, False):
        close(
            rope.compute_inv_freq("yarn", dim, base, factor=s, original_max_position_embeddings=l0, truncate=truncate),
            hf("yarn", dim, base, l0 * int(s), factor=s, original_max_position_embeddings=l0, truncate=truncate),
        )


@pytest.mark.parametrize("dim, base, s, l0", GRID[::3])
def test_yarn_mscale_and_betas_match_transformers(dim, base, s, l0):
    kw = dict(
        factor=s, original_max_position_embeddings=l0, beta_fast=16, beta_slow=2, mscale=0.707, mscale_all_dim=1.0
    )
    close(rope.compute_inv_freq("yarn", dim, base, **kw), hf("yarn", dim, base, l0, **kw))


@pytest.mark.parametrize("dim, base, s, l0", [g for g in GRID if g[2] > 1][::2])
def test_llama3_matches_transformers(dim, base, s, l0):
    kw = dict(factor=s, original_max_position_embeddings=l0, low_freq_factor=1.0, high_freq_factor=4.0)
    close(rope.compute_inv_freq("llama3", dim, base, **kw), hf("llama3", dim, base, l0, **kw))


@pytest.mark.parametrize("dim, base, l0", list(itertools.product(DIMS, BASES, L0S)))
def test_longrope_matches_transformers(dim, base, l0):
    g = torch.Generator().manual_seed(dim)
    short = (1 + torch.rand(dim // 2, generator=g)).tolist()
    long = (1 + 10 * torch.rand(dim // 2, generator=g)).tolist()
    for seq in (None, l0 * 4):
        kw = dict(short_factor=short, long_factor=long, original_max_position_embeddings=l0)
        ours = rope.compute_inv_freq("longrope", dim, base, max_position_embeddings=l0 * 8, seq_len=seq, **kw)
        cfg = LlamaConfig(
            hidden_size=dim * 2,
            num_attention_heads=2,
            head_dim=dim,
            max_position_embeddings=l0 * 8,
            rope_parameters={"rope_type": "longrope", "rope_theta": base, **kw},
        )
        close(ours, ROPE_INIT_FUNCTIONS["longrope"](cfg, None, seq_len=seq))
        assert ours[1] == pytest.approx(math.sqrt(1 + math.log(8) / math.log(l0)))


def test_ntk_and_default():
    inv, f = rope.compute_inv_freq("ntk", 64, 10000.0, factor=4.0)
    assert f == 1.0
    expect = 1.0 / (10000.0 * 4 ** (64 / 62)) ** (torch.arange(0, 64, 2).float() / 64)
    assert torch.allclose(inv, expect, rtol=1e-6)
    inv0, _ = rope.compute_inv_freq("default", 64, 10000.0)
    assert torch.allclose(inv, inv0) is False and inv[0] == inv0[0] == 1.0


def test_yarn_keeps_high_and_interpolates_low_frequencies():
    inv0, _ = rope.default(64, 10000.0)
    inv, f = rope.yarn(64, 10000.0, factor=8.0, original_max_position_embeddings=2048)
    assert torch.allclose(inv[:4], inv0[:4])  # short wavelengths: extrapolated (unchanged)
    assert torch.allclose(inv[-4:], inv0[-4:] / 8)  # long wavelengths: interpolated by 1/s
    assert f == pytest.approx(0.1 * math.log(8) + 1)


def test_attention_factor_convention():
    # transformers' attention_factor scales cos and sin; the logits get its square.
    assert rope.cos_sin_multiplier(1.1386) == pytest.approx(1.2964, abs=1e-4)
    assert rope.cos_sin_factor(rope.cos_sin_multiplier(1.25)) == pytest.approx(1.25)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: rope.compute_inv_freq("yarnn", 64), "Did you mean 'yarn'"),
        (lambda: rope.linear(64, factor=0.5), "factor=0.5"),
        (lambda: rope.yarn(64, factor=2, beta_fast=1, beta_slow=32), "beta_fast=1"),
        (lambda: rope.default(63), "dim=63"),
        (lambda: rope.default(64, base=-3), "base=-3"),
        (lambda: rope.longrope(8, short_factor=[1.0], long_factor=[1.0] * 4), "short_factor"),
        (lambda: rope.dynamic(64, factor=2, max_position_embeddings=0), "max_position_embeddings"),
    ],
)
def test_bad_values(call, match):
    with pytest.raises(ValueError, match=match):
        call()
