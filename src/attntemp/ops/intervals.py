"""Uncertainty of the figures attntemp reports, from the values they are made of.

- Perplexity over windows: ``exp(sum NLL / sum tokens)``; its 95% interval is the percentile
  bootstrap over windows (Efron 1979; resampling documents, the unit that varies).
- Two specs scored on the same windows: the paired bootstrap of the perplexity ratio
  ``ppl_a / ppl_b`` (the same resampled windows for both, so the document-to-document spread
  cancels). Identical values give a ratio of exactly 1 with zero width.
- Accuracies: the Wilson score interval (Wilson 1927), right at 0 and 1 where the normal one is not;
  paired outcome differences (accuracy, key log-probability) by the paired bootstrap of the mean.

Which of these a metric gets is its :class:`IntervalRule`, named in :data:`RULES` and declared once
on the metric (``attntemp.evaluate.task_base.Metric.rule``, as lm-eval's ``stderr_for_metric``
answers per metric): nothing else decides it.

Every bootstrap takes a seed (default 0), so a rerun prints the same interval. Pure numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING

from ..utils import checks
from ..utils.lazy import lazy

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy("numpy")

LEVEL = 0.95
RESAMPLES = 2000


@dataclass(frozen=True)
class Interval:
    """A figure with its interval: ``value`` in ``[low, high]`` at ``level`` (e.g. 0.95)."""

    value: float
    low: float
    high: float
    level: float = LEVEL
    method: str = "bootstrap"

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    def format(self, digits: int = 4) -> str:
        """``"6.06 [5.87, 6.25]"``."""
        return f"{self.value:.{digits}g} [{self.low:.{digits}g}, {self.high:.{digits}g}]"

    def fixed(self, decimals: int = 4) -> str:
        """``"0.9931 [0.9802, 1.0062]"``: fixed decimals, for ratios and differences near 1 or 0."""
        return f"{self.value:.{decimals}f} [{self.low:.{decimals}f}, {self.high:.{decimals}f}]"

    def to_dict(self) -> dict[str, float | str]:
        return {"value": self.value, "low": self.low, "high": self.high, "level": self.level, "method": self.method}


def _check(level: float, resamples: int) -> None:
    if not 0 < float(level) < 1:
        raise ValueError(f"level={level!r} is not allowed; expected a number in (0, 1)")
    checks.positive_int("resamples", resamples)


def _indices(n: int, resamples: int, seed: int) -> np.ndarray:
    """``[R, n]`` window indices drawn with replacement (row 0 is never special: all random)."""
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def _percentile(samples: np.ndarray, value: float, level: float, method: str) -> Interval:
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail])
    return Interval(float(value), float(low), float(high), level, method)


def _arrays(nll: Sequence[float], tokens: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    a, t = np.asarray(nll, dtype=np.float64), np.asarray(tokens, dtype=np.float64)
    if a.ndim != 1 or a.shape != t.shape or a.size == 0:
        raise ValueError(f"nll and tokens must be equal-length non-empty lists; got {a.shape} and {t.shape}")
    if (t <= 0).any():
        raise ValueError("tokens must be positive for every window")
    return a, t


def perplexity_interval(
    nll: Sequence[float], tokens: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0
) -> Interval:
    """Perplexity ``exp(sum nll / sum tokens)`` of windows (summed NLL and token count per window),
    with the percentile bootstrap interval over windows."""
    _check(level, resamples)
    a, t = _arrays(nll, tokens)
    idx = _indices(a.size, resamples, seed)  # [R, n]
    samples = np.exp(a[idx].sum(1) / t[idx].sum(1))  # [R]
    return _percentile(samples, math.exp(a.sum() / t.sum()), level, "bootstrap over windows")


def paired_ratio_interval(
    nll_a: Sequence[float],
    nll_b: Sequence[float],
    tokens: Sequence[float],
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Interval:
    """``ppl_a / ppl_b`` on the same windows, with the paired bootstrap interval (both resampled with
    the same window indices)."""
    _check(level, resamples)
    a, t = _arrays(nll_a, tokens)
    b, _ = _arrays(nll_b, tokens)
    idx = _indices(a.size, resamples, seed)  # [R, n]
    d = a - b  # [n]: a window's NLL difference; the ratio is exp(sum d / sum t)
    samples = np.exp(d[idx].sum(1) / t[idx].sum(1))  # [R]
    return _percentile(samples, math.exp(d.sum() / t.sum()), level, "paired bootstrap over windows")


def paired_difference_interval(
    x_a: Sequence[float], x_b: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0
) -> Interval:
    """``mean(x_a) - mean(x_b)`` over paired outcomes (the same trials), paired bootstrap interval."""
    _check(level, resamples)
    a, b = np.asarray(x_a, dtype=np.float64), np.asarray(x_b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"x_a and x_b must be equal-length non-empty lists; got {a.shape} and {b.shape}")
    if np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all():
        return newcombe_paired(a.astype(bool), b.astype(bool), level)  # a bootstrap of few 0/1 pairs collapses
    d = a - b  # [n]
    samples = d[_indices(d.size, resamples, seed)].mean(1)  # [R]
    return _percentile(samples, float(d.mean()), level, "paired bootstrap over trials")


def newcombe_paired(a: np.ndarray, b: np.ndarray, level: float = LEVEL) -> Interval:
    """``mean(a) - mean(b)`` for paired 0/1 outcomes ``a``, ``b`` [n]: Newcombe's score interval
    (Statistics in Medicine 17, 1998, method 10), built from each proportion's Wilson interval and
    the phi correlation of the pairs. Unlike a bootstrap, it does not shrink to a point when every
    pair agrees or every pair differs the same way (4 of 4 against 0 of 4: [0.31, 1], not [1, 1])."""
    n = a.size
    e, f, g, h = (int((a & b).sum()), int((a & ~b).sum()), int((~a & b).sum()), int((~a & ~b).sum()))
    p1, p2 = (e + f) / n, (e + g) / n
    w1, w2 = wilson(e + f, n, level), wilson(e + g, n, level)
    denom = (e + f) * (g + h) * (e + g) * (f + h)
    phi = (e * h - f * g) / math.sqrt(denom) if denom else 0.0
    low = (p1 - w1.low) ** 2 - 2 * phi * (p1 - w1.low) * (w2.high - p2) + (w2.high - p2) ** 2
    high = (w1.high - p1) ** 2 - 2 * phi * (w1.high - p1) * (p2 - w2.low) + (p2 - w2.low) ** 2
    d = p1 - p2
    return Interval(
        d,
        max(-1.0, d - math.sqrt(max(low, 0.0))),
        min(1.0, d + math.sqrt(max(high, 0.0))),
        level,
        "Newcombe paired score",
    )


def mean_interval(x: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0) -> Interval:
    """``mean(x)`` with its percentile bootstrap interval (e.g. the mean key log-probability)."""
    _check(level, resamples)
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"x must be a non-empty list; got shape {a.shape}")
    return _percentile(a[_indices(a.size, resamples, seed)].mean(1), float(a.mean()), level, "bootstrap over trials")


def wilson(successes: int, n: int, level: float = LEVEL) -> Interval:
    """The Wilson score interval of a proportion ``successes / n`` (Wilson 1927)."""
    n = checks.positive_int("n", n)
    if not 0 <= successes <= n:
        raise ValueError(f"successes={successes!r} is not allowed; expected 0 <= successes <= n={n}")
    _check(level, 1)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact at the ends: no 6.9e-18 of rounding
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(p, low, high, level, "Wilson")


def verdict(interval: Interval, null: float, lower_is_better: bool) -> str:
    """In words, against ``null`` (1 for a ratio, 0 for a difference): "better", "worse", or "not
    distinguishable" when the interval contains ``null``."""
    if interval.contains(null):
        return "not distinguishable"
    below = interval.high < null
    return "better" if below == lower_is_better else "worse"


# ----------------------------------------------------------------------------- rules per metric
@dataclass(frozen=True)
class IntervalRule:
    """How a metric's interval and the paired comparison of two specs on it are made from its
    values per unit (window, trial or document): ``own(values, tokens, seed)`` and ``pair(a, b,
    tokens, seed)``, ``tokens`` a perplexity's token count per window (None for the others)."""

    name: str
    comparison: str  # "ratio" (a / b) or "difference" (a - b)
    own: Callable[[Sequence[float], Sequence[float] | None, int], Interval]
    pair: Callable[[Sequence[float], Sequence[float], Sequence[float] | None, int], Interval]

    @property
    def null(self) -> float:
        """The comparison's value for "no change": 1 for a ratio, 0 for a difference."""
        return 1.0 if self.comparison == "ratio" else 0.0

    def interval(self, values: Sequence[float], tokens: Sequence[float] | None = None, seed: int = 0) -> Interval:
        return self.own(values, tokens, seed)

    def paired(
        self, a: Sequence[float], b: Sequence[float], tokens: Sequence[float] | None = None, seed: int = 0
    ) -> Interval:
        """``a`` against ``b`` on the same units: their ratio or difference with its interval."""
        return self.pair(a, b, tokens, seed)


def _tokens(tokens: Sequence[float] | None) -> Sequence[float]:
    if tokens is None:
        raise ValueError("a perplexity's interval needs the token count of each window")
    return tokens


def _proportion(values: Sequence[float], tokens: Sequence[float] | None, seed: int) -> Interval:
    """Wilson for 0/1 outcomes; the bootstrap of the mean for graded ones (lm-eval's other means)."""
    a = np.asarray(values, dtype=np.float64)
    if np.isin(a, (0.0, 1.0)).all():
        return wilson(int(a.sum()), int(a.size))
    return mean_interval(values, seed=seed)


RULES: dict[str, IntervalRule] = {
    r.name: r
    for r in (
        # exp(sum NLL / sum tokens) over windows; two specs by the paired bootstrap of their ratio
        IntervalRule(
            "perplexity",
            "ratio",
            lambda v, t, seed: perplexity_interval(v, _tokens(t), seed=seed),
            lambda a, b, t, seed: paired_ratio_interval(a, b, _tokens(t), seed=seed),
        ),
        # a share of 0/1 outcomes: Wilson; two specs by Newcombe's paired score interval
        IntervalRule(
            "proportion",
            "difference",
            _proportion,
            lambda a, b, t, seed: paired_difference_interval(a, b, seed=seed),
        ),
        # a mean of graded values: the bootstrap; two specs by the paired bootstrap of the difference
        IntervalRule(
            "mean",
            "difference",
            lambda v, t, seed: mean_interval(v, seed=seed),
            lambda a, b, t, seed: paired_difference_interval(a, b, seed=seed),
        ),
    )
}
