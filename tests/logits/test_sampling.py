"""Temperature / top-k / top-p: identical to transformers' warper chain, ties and draws included."""

import itertools

import pytest
import torch
from transformers import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from attntemp.logits.sampling import TemperatureTopKTopP, sample

V = 12


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def transformers_chain(temperature, top_k, top_p, min_tokens_to_keep=1):
    """The warpers ``generate`` builds for these settings, in its order."""
    chain = LogitsProcessorList()
    if temperature != 1.0:
        chain.append(TemperatureLogitsWarper(float(temperature)))
    if top_k != 0:
        chain.append(TopKLogitsWarper(top_k, min_tokens_to_keep=min_tokens_to_keep))
    if top_p < 1.0:
        chain.append(TopPLogitsWarper(top_p, min_tokens_to_keep=min_tokens_to_keep))
    return chain


def tied_logits(seed, rows=6):
    """Random logits rounded to halves, so most rows hold ties (also at the k-th value)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, V, generator=g) * 2).mul(2).round().div(2)  # [B, V]


GRID = list(itertools.product([0.3, 1.0, 1.7], [0, 1, 3, 5, 50], [1.0, 0.9, 0.5, 0.0], [1, 2]))


@pytest.mark.parametrize("temperature,top_k,top_p,keep", GRID)
def test_equal_to_the_transformers_chain(temperature, top_k, top_p, keep):
    ids = torch.zeros(6, 1, dtype=torch.long)
    ours = TemperatureTopKTopP(temperature, top_k, top_p, min_tokens_to_keep=keep)
    for seed in range(2):
        scores = tied_logits(seed)
        expected = transformers_chain(temperature, top_k, top_p, keep)(ids, scores.clone())
        assert torch.equal(ours(ids, scores.clone()), expected)


def test_ties_at_the_kth_value_are_all_kept():
    scores = torch.tensor([[3.0, 2.0, 2.0, 2.0, 1.0]])
    out = TemperatureTopKTopP(1.0, top_k=2)(None, scores)
    assert torch.isfinite(out).tolist() == [[True, True, True, True, False]]


def test_draws_match_sampling_from_the_transformers_chain():
    g = torch.Generator().manual_seed(7)
    steps = [torch.randn(4, V, generator=g) * 3 for _ in range(25)]  # [B, V] per step
    chain = transformers_chain(0.8, 5, 0.9)
    ours_gen, ref_gen = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    ids = torch.zeros(4, 1, dtype=torch.long)
    for logits in steps:
        ours = sample(logits, 0.8, top_k=5, top_p=0.9, generator=ours_gen)  # [B]
        probs = torch.softmax(chain(ids, logits.clone()), dim=-1)  # [B, V]
        ref = torch.multinomial(probs, 1, generator=ref_gen).squeeze(-1)  # [B]
        assert torch.equal(ours, ref)
        kept = torch.isfinite(TemperatureTopKTopP(0.8, 5, 0.9)(None, logits))  # [B, V]
        assert kept.gather(-1, ours[:, None]).all()


def test_temperature_zero_is_greedy():
    scores = torch.tensor([[0.5, 2.0, 2.0, -1.0], [4.0, 1.0, 0.0, 3.9]])
    out = TemperatureTopKTopP(0, top_k=3, top_p=0.5)(None, scores)
    assert torch.isfinite(out).tolist() == [[False, True, False, False], [True, False, False, False]]
    assert out[0, 1] == 2.0 and out[1, 0] == 4.0  # the argmax keeps its raw score
    assert sample(scores, 0.0).tolist() == [1, 0]
    many = torch.randn(3, 5, V)  # [..., V] shapes are kept
    assert torch.equal(sample(many, 0.0), many.argmax(-1))
    assert sample(many, 1.0, generator=torch.Generator().manual_seed(0)).shape == (3, 5)


def test_usable_in_a_logits_processor_list():
    scores = tied_logits(3)
    chain = LogitsProcessorList([TemperatureTopKTopP(1.7, 3, 0.9)])
    assert torch.equal(
        chain(torch.zeros(6, 1, dtype=torch.long), scores.clone()),
        transformers_chain(1.7, 3, 0.9)(None, scores.clone()),
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"temperature": -0.5}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 1.0, "top_k": -1}, "top_k"),
        ({"temperature": 1.0, "top_k": 2.5}, "top_k"),
        ({"temperature": 1.0, "top_p": 1.5}, "top_p"),
        ({"temperature": 1.0, "top_p": -0.1}, "top_p"),
        ({"temperature": 1.0, "min_tokens_to_keep": 0}, "min_tokens_to_keep"),
    ],
)
def test_bad_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TemperatureTopKTopP(**kwargs)


def test_bad_scores_are_refused():
    proc = TemperatureTopKTopP(1.0, 3)
    nan = torch.randn(2, V)
    nan[1, 4] = float("nan")
    with pytest.raises(ValueError, match="scores holds NaN"):
        proc(None, nan)
    with pytest.raises(ValueError, match=r"\[B, V\]"):
        proc(None, torch.randn(V))
    with pytest.raises(ValueError, match="logits"):
        sample(torch.empty(2, 0), 1.0)
