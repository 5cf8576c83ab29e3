"""Intervals on cases with a known answer: identical specs, a constant shift, simulated coverage,
Wilson against its closed form, and seeded reproducibility."""

import math

import numpy as np
import pytest

from attntemp.ops import intervals as I


def _windows(n=16, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(200, 400, n).astype(float)
    nll = tokens * rng.normal(2.0, 0.3, n)  # summed NLL per window: ~2 nats/token, varying by document
    return nll, tokens


def test_identical_specs_give_a_ratio_of_exactly_one_with_zero_width():
    nll, tokens = _windows()
    r = I.paired_ratio_interval(nll, nll, tokens)
    assert (r.value, r.low, r.high) == (1.0, 1.0, 1.0)
    assert I.verdict(r, 1.0, lower_is_better=True) == "not distinguishable"


def test_a_constant_shift_per_token_is_an_exact_ratio():
    nll, tokens = _windows()
    shifted = nll - 0.1 * tokens  # every token 0.1 nats better: ratio exp(-0.1) on every resample
    r = I.paired_ratio_interval(shifted, nll, tokens)
    assert r.value == pytest.approx(math.exp(-0.1)) and r.half_width < 1e-12
    assert I.verdict(r, 1.0, lower_is_better=True) == "better"
    assert I.verdict(I.paired_ratio_interval(nll, shifted, tokens), 1.0, lower_is_better=True) == "worse"


def test_paired_interval_is_narrower_than_the_unpaired_spread():
    nll, tokens = _windows(seed=1)
    rng = np.random.default_rng(2)
    other = nll * (1 + rng.normal(0, 0.01, nll.size))  # the same documents, a little noise
    paired = I.paired_ratio_interval(other, nll, tokens)
    a, b = I.perplexity_interval(other, tokens), I.perplexity_interval(nll, tokens)
    assert paired.half_width < 0.2 * (a.half_width / a.value + b.half_width / b.value)


def test_perplexity_interval_covers_a_known_mean_about_95_percent():
    # windows of one token each, NLL ~ N(mu, 1): the true perplexity is exp(mu)
    rng = np.random.default_rng(0)
    mu, hits, reps = 2.0, 0, 400
    for rep in range(reps):
        nll = rng.normal(mu, 1.0, 50)
        hits += I.perplexity_interval(nll, np.ones(50), resamples=1000, seed=rep).contains(math.exp(mu))
    assert 0.91 <= hits / reps <= 0.98


def test_wilson_matches_its_closed_form_and_stays_inside_zero_one():
    w = I.wilson(8, 10)
    z = 1.959963984540054
    centre = (0.8 + z * z / 20) / (1 + z * z / 10)
    half = z * math.sqrt(0.8 * 0.2 / 10 + z * z / 400) / (1 + z * z / 10)
    assert (w.low, w.high) == pytest.approx((centre - half, centre + half))
    zero, one = I.wilson(0, 50), I.wilson(50, 50)
    assert zero.low == 0.0 and 0 < zero.high < 0.08 and one.high == 1.0 and 0.92 < one.low < 1
    assert all(I.wilson(0, n).low == 0.0 and I.wilson(n, n).high == 1.0 for n in range(1, 200))  # n = 40 gave 6.9e-18


def test_bootstrap_is_seeded():
    nll, tokens = _windows()
    assert I.perplexity_interval(nll, tokens, seed=3) == I.perplexity_interval(nll, tokens, seed=3)
    assert I.perplexity_interval(nll, tokens, seed=3) != I.perplexity_interval(nll, tokens, seed=4)


def test_paired_difference_of_outcomes():
    a, b = [1, 1, 0, 1, 0, 1, 1, 1], [1, 0, 0, 1, 0, 1, 0, 1]
    d = I.paired_difference_interval(a, b)
    assert d.value == pytest.approx(0.25) and -1 <= d.low < 0.25 < d.high <= 0.75
    assert d.method == "Newcombe paired score"
    same = I.paired_difference_interval(a, a)  # every pair agrees: still not certainty of "no change"
    assert same.value == 0.0 and same.low < 0 < same.high
    x = [0.5, 1.5, 2.0]  # not 0/1: the paired bootstrap, exact for identical inputs
    assert I.paired_difference_interval(x, x).half_width == 0.0


def test_newcombe_paired_matches_the_paper_and_never_collapses():
    """Newcombe (1998), Table II, pairs 36 / 12 / 2 / 0: method 10 gives 0.0569 to 0.3404."""
    a, b = [1] * 48 + [0] * 2, [1] * 36 + [0] * 12 + [1] * 2
    d = I.paired_difference_interval(a, b)
    assert (round(d.low, 4), round(d.high, 4)) == (0.0569, 0.3404)
    all_differ = I.paired_difference_interval([1] * 4, [0] * 4)  # a bootstrap would say [1, 1]
    assert all_differ.value == 1.0 and 0.25 < all_differ.low < 0.4 and all_differ.high == 1.0


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: I.perplexity_interval([1.0, 2.0], [1.0]), "equal-length"),
        (lambda: I.perplexity_interval([1.0], [0.0]), "tokens must be positive"),
        (lambda: I.perplexity_interval([1.0], [1.0], level=1.5), r"level=1\.5"),
        (lambda: I.wilson(5, 4), "successes=5"),
        (lambda: I.paired_difference_interval([1.0], [1.0, 2.0]), "equal-length"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()
