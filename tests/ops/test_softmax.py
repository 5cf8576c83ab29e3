"""tempered_softmax and entropy: properties (hypothesis), worked figures, stability, bad input."""

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from attntemp.ops.softmax import entropy, tempered_softmax

rows = st.lists(st.floats(-30, 30, allow_nan=False), min_size=2, max_size=24)
temps = st.floats(0.05, 50.0)


@given(rows, temps)
def test_order_preserved(xs, t):
    s = torch.tensor(xs, dtype=torch.float64)
    p = tempered_softmax(s, t)
    for i in range(len(xs)):
        for j in range(len(xs)):
            if xs[i] > xs[j]:
                assert p[i] >= p[j]


@given(rows)
def test_small_temperature_gives_argmax(xs):
    s = torch.tensor(xs, dtype=torch.float64)
    top2 = s.sort(descending=True).values[:2]
    assume(float(top2[0] - top2[1]) > 0.05)  # ties or near-ties share the mass in the limit
    p = tempered_softmax(s, 1e-3)
    assert int(p.argmax()) == int(s.argmax()) and float(p.max()) > 1 - 1e-6


@given(rows)
def test_large_temperature_gives_uniform(xs):
    s = torch.tensor(xs, dtype=torch.float64)
    n = len(xs)
    assert torch.allclose(tempered_softmax(s, 1e6), torch.full((n,), 1 / n, dtype=s.dtype), atol=1e-4)
    assert abs(float(entropy(s, 1e6)) - math.log(n)) < 1e-4


@given(rows, temps, temps)
def test_entropy_non_decreasing_in_t(xs, t1, t2):
    s = torch.tensor(xs, dtype=torch.float64)
    lo, hi = sorted((t1, t2))
    assert float(entropy(s, lo)) <= float(entropy(s, hi)) + 1e-6


@given(rows, temps, st.floats(-100, 100))
def test_shift_invariance(xs, t, c):
    s = torch.tensor(xs, dtype=torch.float64)
    assert torch.allclose(tempered_softmax(s, t), tempered_softmax(s + c, t), atol=1e-6)


@given(rows, temps, st.floats(0.1, 10))
def test_scaling_logits_equals_scaling_temperature(xs, t, c):
    s = torch.tensor(xs, dtype=torch.float64)
    assert torch.allclose(tempered_softmax(c * s, t), tempered_softmax(s, t / c), atol=1e-6)


@settings(max_examples=50)
@given(rows, temps)
def test_entropy_matches_definition(xs, t):
    s = torch.tensor(xs, dtype=torch.float64)
    p = tempered_softmax(s, t)
    h = -(p * torch.log(p.clamp_min(1e-300))).sum()
    assert abs(float(entropy(s, t)) - float(h)) < 1e-5


def test_worked_figures():
    p1 = tempered_softmax(torch.tensor([5.0, 0.0]), 1.0)
    p2 = tempered_softmax(torch.tensor([5.0, 0.0]), 2.0)
    assert float(p1[0] / p1[1]) == pytest.approx(math.exp(5), rel=1e-4)  # ~148
    assert round(float(p1[0] / p1[1])) == 148
    assert float(p2[0] / p2[1]) == pytest.approx(math.exp(2.5), rel=1e-4)  # ~12
    assert round(float(p2[0] / p2[1])) == 12


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("t", [1e-3, 1e-2, 1.0, 1e2, 1e4])
def test_stable_across_dtypes(dtype, t):
    s = (torch.randn(8, 128, generator=torch.Generator().manual_seed(1)) * 60).to(dtype)
    p = tempered_softmax(s, t)
    h = entropy(s, t)
    assert p.dtype == dtype and torch.isfinite(p).all() and torch.isfinite(h).all()
    assert torch.allclose(p.float().sum(-1), torch.ones(8), atol=2e-2)
    assert (h >= 0).all() and (h <= math.log(128) + 1e-4).all()


def test_tensor_temperature_broadcasts():
    s = torch.randn(3, 10)
    t = torch.tensor([[0.5], [1.0], [2.0]])
    p = tempered_softmax(s, t)
    for i in range(3):
        assert torch.allclose(p[i], tempered_softmax(s[i], float(t[i])))


def test_entropy_masked_entries_do_not_produce_nan():
    s = torch.tensor([1.0, 2.0, float("-inf"), float("-inf")])
    assert abs(float(entropy(s)) - float(entropy(s[:2]))) < 1e-6


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_temperature(bad):
    with pytest.raises(ValueError, match="temperature"):
        tempered_softmax(torch.randn(4), bad)
    with pytest.raises(ValueError, match="temperature"):
        entropy(torch.randn(4), torch.tensor([1.0, bad, 1.0, 1.0]))


def test_nan_scores_refused():
    with pytest.raises(ValueError, match="scores holds NaN"):
        tempered_softmax(torch.tensor([1.0, float("nan")]), 1.0)
