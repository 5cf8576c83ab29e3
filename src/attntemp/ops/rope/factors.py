"""Per-frequency RoPE rescale factors (LongRoPE's ``long_factor``), as plain math.

LongRoPE (Ding et al., arXiv:2402.13753; LongRoPE2, arXiv:2502.20082) divides each rotary pair's
frequency by its own factor ``f_i >= 1``: ``inv_freq_i = 1 / (f_i * base^(2i/d))``, ``d/2`` numbers
shared by every layer, used past the trained length L0 (``short_factor`` below it; 1 here, so
nothing changes within L0). Every other static extension is one such vector: PI divides every pair
by s, NTK by ``s^(2i/(d-2))``, YaRN by its ramp ``inv_orig / inv_yarn`` (arXiv:2309.00071).

The search operators follow microsoft/LongRoPE ``evolution/algorithms/dim_mono.py`` and
``genetic_base.py``: factors on a grid of ``step`` in ``[1, s]``, kept non-decreasing over the
pairs (low frequencies are interpolated at least as much as high ones).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...utils import checks
from ...utils.lazy import lazy
from . import functions as rope

if TYPE_CHECKING:
    import torch
else:
    torch = lazy("torch")


INITS = ("none", "linear", "ntk", "yarn")  # RoPE types whose frequencies are one divisor per pair


def inv_freq_shape(dim: int) -> torch.Tensor:
    """``2i / d`` for each pair, as transformers' longrope computes it: ``[d/2]`` fp32."""
    return torch.arange(0, dim, 2, dtype=torch.int64).float() / dim  # [d/2]


def longrope_inv_freq(dim: int, base: float, factors: torch.Tensor) -> torch.Tensor:
    """``1 / (f_i * base^(2i/d))``, differentiable in ``factors`` ``[d/2]`` (transformers' formula)."""
    if factors.shape != (dim // 2,):
        raise ValueError(f"factors has shape {tuple(factors.shape)}; expected ({dim // 2},) = (dim // 2,)")
    return 1.0 / (factors * base ** inv_freq_shape(dim).to(factors.device))  # [d/2]


def init_factors(
    kind: str, dim: int, base: float, factor: float, original_max_position_embeddings: int
) -> torch.Tensor:
    """The per-pair divisor of a static RoPE extension ``kind`` (none, linear, ntk, yarn) at scale s:
    ``inv_freq_default / inv_freq_kind``, ``[d/2]`` float64, each >= 1 (clamped: rounding)."""
    checks.choice("rope", kind, INITS)
    s = checks.at_least("factor", factor, 1.0)
    plain, _ = rope.default(dim, base)  # [d/2]
    if kind == "none":
        return torch.ones(dim // 2, dtype=torch.float64)
    if kind == "linear":
        other, _ = rope.linear(dim, base, s)  # [d/2]
    elif kind == "ntk":
        other, _ = rope.ntk(dim, base, s)  # [d/2]
    else:
        other, _ = rope.yarn(dim, base, s, original_max_position_embeddings, attention_factor=1.0)  # [d/2]
    return (plain.double() / other.double()).clamp_min(1.0)  # [d/2]


def longrope_parameters(
    long_factor: Any, factor: float, original_max_position_embeddings: int, attention_factor: float
) -> dict[str, Any]:
    """The ``longrope`` rope dict: ``short_factor`` 1 (nothing changes within L0), the given
    ``long_factor`` past L0, and the cos/sin ``attention_factor`` stated (never left to a default)."""
    values = [float(v) for v in (long_factor.tolist() if torch.is_tensor(long_factor) else long_factor)]
    for i, v in enumerate(values):
        checks.at_least(f"long_factor[{i}]", v, 1.0)
    return {
        "rope_type": "longrope",
        "factor": float(checks.at_least("factor", factor, 1.0)),
        "original_max_position_embeddings": checks.positive_int(
            "original_max_position_embeddings", original_max_position_embeddings
        ),
        "short_factor": [1.0] * len(values),
        "long_factor": values,
        "attention_factor": float(checks.positive("attention_factor", attention_factor)),
    }


# ----------------------------------------------------------------------------- LongRoPE's search operators
def on_grid(factors: np.ndarray, high: float, step: float) -> np.ndarray:
    """Factors rounded to the search grid ``1, 1 + step, ...``, clipped to ``[1, high]``, made
    non-decreasing (a running maximum): LongRoPE's ``dim_mono`` search space."""
    grid = 1.0 + np.round((np.asarray(factors, dtype=np.float64) - 1.0) / step) * step  # [d/2]
    return np.maximum.accumulate(np.clip(grid, 1.0, max(high, 1.0)))  # [d/2]


def mutate(factors: np.ndarray, rng: np.random.Generator, high: float, step: float, rate: float = 0.3) -> np.ndarray:
    """Each pair, with probability ``rate``, redrawn on the grid between its neighbours' values
    (the first from 1, the last up to ``high``), so the vector stays non-decreasing (dim_mono.py)."""
    out = np.array(factors, dtype=np.float64)  # [d/2]
    for i in range(out.shape[0]):
        if rng.random() >= rate:
            continue
        lo = 1.0 if i == 0 else out[i - 1]
        hi = high if i == out.shape[0] - 1 else out[i + 1]
        choices = np.arange(lo, hi + step / 2, step)
        if choices.size:
            out[i] = min(max(choices[rng.integers(choices.size)], lo), hi)
    return out


def crossover(first: np.ndarray, second: np.ndarray, rng: np.random.Generator, rate: float = 0.3) -> np.ndarray | None:
    """Each pair, with probability ``rate / 2``, taken from ``second`` (dim_mono.py draws 0.3, then
    0.5); None when the child breaks monotonicity or equals ``first``."""
    take = rng.random(first.shape[0]) < rate * 0.5  # [d/2]
    child = np.where(take, second, first)  # [d/2]
    if np.allclose(child, first) or not np.all(np.diff(child) >= 0):
        return None
    return child
