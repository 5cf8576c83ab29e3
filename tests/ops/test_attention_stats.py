"""Block-wise attention statistics equal the materialised reference."""

import pytest
import torch

from attntemp.ops.attention_stats import FUSED_MIN_QUERIES, STATS, attention_stats, fused_block_size, reference_stats


def qk(b=1, hq=6, hkv=2, lq=150, lk=150, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, hq, lq, d, generator=g) * 2, torch.randn(b, hkv, lk, d, generator=g) * 2)


@pytest.mark.parametrize("kind", ["none", "scalar", "per_head", "per_row"])
@pytest.mark.parametrize("window, softcap", [(None, None), (37, None), (None, 3.0)])
def test_blockwise_equals_reference(kind, window, softcap):
    q, k = qk()
    m = {
        "none": None,
        "scalar": torch.tensor(1.4),
        "per_head": torch.linspace(0.5, 2, 6).reshape(1, 6, 1),
        "per_row": 0.5 + torch.rand(1, 6, 150, generator=torch.Generator().manual_seed(1)),
    }[kind]
    # a tiny budget forces many blocks of 16 queries (the fused path keeps one temporary, the plain 4)
    ours = attention_stats(
        q,
        k,
        m,
        softcap=softcap,
        window=window,
        sink_tokens=3,
        recent_tokens=10,
        budget_bytes=4 * 6 * 150 * 16 * (4 if softcap else 1),
    )
    ref = reference_stats(q, k, m, softcap=softcap, window=window, sink_tokens=3, recent_tokens=10)
    for name in STATS:
        a, b = ours[name], ref[name]
        both = torch.isfinite(a) & torch.isfinite(b)
        assert torch.equal(torch.isnan(a), torch.isnan(b)), name
        # 1e-4, relative for the distance (tokens, up to L)
        assert ((a[both] - b[both]).abs() / b[both].abs().clamp_min(1)).max() < 1e-4, name


def test_decode_queries_against_longer_keys():
    q, k = qk(lq=20, lk=90)
    ours = attention_stats(q, k, None, budget_bytes=1)
    ref = reference_stats(q, k, None)
    for name in STATS:
        assert ((ours[name] - ref[name]).abs() / ref[name].abs().clamp_min(1)).max() < 1e-4


def test_statistics_move_the_right_way_with_temperature():
    q, k = qk(lq=200, lk=200)
    sharp = attention_stats(q, k, torch.tensor(2.0))
    soft = attention_stats(q, k, torch.tensor(0.5))
    assert (sharp["entropy"][..., 1:] <= soft["entropy"][..., 1:] + 1e-5).all()
    assert (sharp["max_weight"] >= soft["max_weight"] - 1e-6).all()
    flat = attention_stats(q, k, torch.tensor(1e-6))  # T -> inf: uniform over visible keys
    assert torch.allclose(flat["norm_entropy"][..., 1:], torch.ones(1, 6, 199), atol=1e-4)
    assert torch.allclose(flat["mean_distance"][0, 0], torch.arange(200) / 2, atol=1e-2)


@pytest.mark.parametrize("hq, hkv", [(8, 8), (8, 2), (9, 3)])
@pytest.mark.parametrize("n", [1, 2, 5, 300])
@pytest.mark.parametrize("with_m", [False, True])
def test_single_query_kernel_equals_the_blockwise_one_and_the_reference(hq, hkv, n, with_m):
    """The monitor's kernel: the newest query of each row against all its keys, as block_stats
    (q0 = n - 1) and the materialised reference compute it, sink and recent windows cut short too."""
    from attntemp.ops.attention_stats import block_stats, last_query_stats

    g = torch.Generator().manual_seed(n * 31 + hq)
    q, k = torch.randn(3, hq, 1, 16, generator=g) * 2, torch.randn(3, hkv, n, 16, generator=g)
    m = torch.rand(3, hq, 1, generator=g) + 0.5 if with_m else None
    got = last_query_stats(q, k, m, 0.3, sink_tokens=4, recent_tokens=64)
    blocked = block_stats(q, k, n - 1, m, 0.3, None, None, 4, 64)
    ref = reference_stats(q, k, m, 0.3, None, None, 4, 64)
    for name in ("entropy", "norm_entropy", "sink_mass", "recent_mass"):
        assert got[name].shape == (3, hq)
        torch.testing.assert_close(got[name], blocked[name][..., 0], atol=2e-5, rtol=1e-5, equal_nan=True)
        torch.testing.assert_close(got[name], ref[name][..., -1], atol=2e-5, rtol=1e-5, equal_nan=True)
    assert torch.isnan(got["norm_entropy"]).all() == (n == 1)


@pytest.mark.parametrize("hq, hkv", [(6, 6), (6, 2)])
@pytest.mark.parametrize("window", [None, 29])
@pytest.mark.parametrize("q0, blk", [(0, 16), (70, 16), (133, 17)])
def test_fused_block_equals_the_plain_one(hq, hkv, window, q0, blk):
    """attention_stats' fused block (e @ [k, j, 1], exp in place) against block_stats' plain form,
    with large logits (the entropy is ln Z + M - q' . sum e k / Z: no cancellation past 1e-4)."""
    from attntemp.ops.attention_stats import block_stats, extended_keys, fused_block

    g = torch.Generator().manual_seed(q0 + hkv)
    q, k = torch.randn(2, hq, blk, 16, generator=g) * 4, torch.randn(2, hkv, 160, 16, generator=g) * 4
    m = torch.rand(2, hq, blk, generator=g) + 0.5
    plain = block_stats(q, k, q0, m, 0.25, None, window, 4, 20)
    fused = fused_block(q, k, extended_keys(k), m.unsqueeze(-1), 0.25, q0, window, 4, 20)
    assert float(plain["entropy"].std()) > 0.2  # sharp and flat rows alike
    for name in STATS:
        torch.testing.assert_close(fused[name], plain[name], atol=1e-4, rtol=1e-5, equal_nan=True)


def test_fused_blocks_stay_cache_sized_but_hold_enough_queries_within_the_budget():
    mib = 2**20
    # tiny's shape: 4 MiB / (4 bytes x 8 heads x 1024 keys) = 128 queries
    assert fused_block_size(1, 8, 1024, 64 * mib) == 128
    # SmolLM2's at 16384: 4 MiB holds 7 queries (block_size's floor: 16); raised to 64 (36 MiB)
    assert fused_block_size(1, 9, 16384, 64 * mib) == FUSED_MIN_QUERIES == 64
    # a budget of 8 MiB holds 14 (floor 16): the budget wins over the minimum
    assert fused_block_size(1, 9, 16384, 8 * mib) == 16
