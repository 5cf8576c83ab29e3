"""tempered_softmax and entropy agree on every edge case (module doc of attntemp.ops.softmax):
masked entries, fully masked rows, +inf and NaN scores, scores near a dtype's max, temperatures at
and past the ends of T_RANGE, booleans, per-row and per-key temperatures."""

import math

import pytest
import torch

from attntemp.ops.softmax import T_RANGE, entropy, tempered_softmax

NEG = float("-inf")


def entropy_of(p: torch.Tensor) -> torch.Tensor:
    """-sum p log p with 0 log 0 = 0, in float64: the definition entropy() must agree with."""
    p = p.double()
    return -torch.where(p > 0, p * torch.log(p), torch.zeros_like(p)).sum(-1)


def agree(scores: torch.Tensor, t, atol: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    p, h = tempered_softmax(scores, t), entropy(scores, t)
    assert torch.isfinite(p).all() and torch.isfinite(h).all()
    assert torch.allclose(h.double(), entropy_of(p), atol=atol), (h, entropy_of(p))
    return p, h


MAX32 = torch.finfo(torch.float32).max
ROWS = {
    "masked entries": [[1.0, 2.0, NEG, NEG]],
    "one entry left": [[NEG, 3.0, NEG]],
    "fully masked row next to a normal one": [[NEG, NEG, NEG], [0.0, 1.0, 2.0]],
    "ties": [[5.0, 5.0, 5.0, 5.0]],
    "huge spread": [[-3e38, 3e38, 0.0]],
    "near fp32 max": [[MAX32, MAX32 * 0.999, -MAX32]],
}


@pytest.mark.parametrize("t", [T_RANGE[0], 1e-3, 1.0, 1e3, T_RANGE[1]])
@pytest.mark.parametrize("name", ROWS)
def test_softmax_and_entropy_agree(name, t):
    s = torch.tensor(ROWS[name], dtype=torch.float32)
    p, _h = agree(s, t)
    live = ~torch.isneginf(s).all(-1)
    assert torch.allclose(p.sum(-1)[live], torch.ones(int(live.sum())), atol=1e-5)
    assert (p[torch.isneginf(s)] == 0).all()


def test_fully_masked_row_is_all_zero_weights_and_zero_entropy():
    s = torch.full((2, 5), NEG)
    assert (tempered_softmax(s, 0.5) == 0).all()
    assert (entropy(s, 0.5) == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("t", [1e-3, T_RANGE[0]])
def test_scores_near_the_dtype_max_with_small_t_give_no_nan(dtype, t):
    top = torch.finfo(dtype).max
    s = torch.tensor([[top, top * 0.5, -top, 0.0]], dtype=dtype)
    p = tempered_softmax(s, t)
    assert p.dtype == dtype and torch.isfinite(p).all()
    assert float(p[0, 0]) == 1.0 and float(p[0, 1:].abs().sum()) == 0.0  # the limit: one-hot
    assert float(entropy(s, t)) == 0.0


def test_half_precision_agrees_with_float32():
    s = torch.randn(4, 32, generator=torch.Generator().manual_seed(0)) * 30
    for dtype in (torch.bfloat16, torch.float16):
        low = s.to(dtype)
        assert torch.allclose(tempered_softmax(low, 0.7).float(), tempered_softmax(low.float(), 0.7), atol=1e-2)
        assert torch.allclose(entropy(low, 0.7), entropy(low.float(), 0.7), atol=1e-5)


@pytest.mark.parametrize("bad, what", [(float("inf"), r"\+inf"), (float("nan"), "NaN")])
def test_plus_inf_and_nan_scores_are_refused_by_both(bad, what):
    s = torch.tensor([[1.0, bad, 0.0]])
    for fn in (tempered_softmax, entropy):
        with pytest.raises(ValueError, match=f"scores holds {what} at 1 place"):
            fn(s, 1.0)


@pytest.mark.parametrize("t", [1e-40, 1e-7, 1e7, 1e40, True, False, float("inf"), 0.0, -1.0, "1", None])
def test_temperatures_outside_the_range_are_refused_by_both(t):
    for fn in (tempered_softmax, entropy):
        with pytest.raises(ValueError, match="temperature"):
            fn(torch.randn(3), t)


def test_boolean_and_misshaped_temperature_tensors_are_refused():
    for fn in (tempered_softmax, entropy):
        with pytest.raises(ValueError, match="boolean"):
            fn(torch.randn(2, 3), torch.tensor([True, False]))
        with pytest.raises(ValueError, match="does not broadcast"):
            fn(torch.randn(2, 3), torch.ones(4))


def test_per_row_temperature_with_masked_rows():
    s = torch.tensor([[NEG, NEG], [1.0, 2.0], [3.0, NEG]])
    t = torch.tensor([[0.5], [2.0], [1e-6]])
    p, h = agree(s, t)
    assert (p[0] == 0).all() and float(h[0]) == 0.0 and float(h[2]) == 0.0
    assert torch.allclose(p[1], torch.softmax(torch.tensor([0.5, 1.0]), -1))


def test_per_key_temperature_is_exact():
    s = torch.tensor([[1.0, 2.0, 3.0, NEG]], dtype=torch.float64)
    t = torch.tensor([0.5, 1.0, 2.0, 1.0], dtype=torch.float64)
    p, _ = agree(s, t, atol=1e-12)
    want = torch.softmax(s / t, -1)
    assert torch.allclose(p, want, atol=1e-12)


def test_uniform_limit_matches_log_n():
    s = torch.randn(7)
    assert abs(float(entropy(s, T_RANGE[1])) - math.log(7)) < 1e-4
