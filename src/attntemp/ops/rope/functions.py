"""RoPE scaling: one function per type, each returning ``(inv_freq, attention_factor)``.

``inv_freq`` has ``dim // 2`` fp32 entries (``dim`` is the rotary dimension); ``attention_factor``
multiplies cos and sin, so it lands SQUARED on the attention logits (q and k are both rotated).
Functions take plain numbers, not a model config, and raise ``ValueError`` on bad values.
Formulas follow transformers' ``modeling_rope_utils`` (5.x), which the tests compare against.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from ...utils import checks
from ...utils.lazy import lazy
from ..schedules import yarn_mscale
from .bases import dynamic_alpha, ntk_base

if TYPE_CHECKING:
    import torch
else:
    torch = lazy("torch")


RopeResult: TypeAlias = "tuple[torch.Tensor, float]"
EXTENSIONS = ("linear", "ntk", "dynamic", "yarn", "llama3", "longrope")  # context extensions of a model


def _check_dim_base(dim: int, base: float) -> None:
    if checks.positive_int("dim", dim) < 2 or dim % 2:
        raise ValueError(f"dim={dim} is not allowed; expected an even integer >= 2")
    if checks.positive("base", base) <= 1:
        raise ValueError(f"base={base} is not allowed; expected a number > 1")


def _factor(factor: float) -> float:
    return checks.at_least("factor", factor, 1.0)


def _base_inv_freq(dim: int, base: float) -> torch.Tensor:
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim  # [dim/2]
    return 1.0 / (base**exponents)  # [dim/2]


def default(dim: int, base: float = 10000.0) -> RopeResult:
    """Plain RoPE (Su et al., arXiv:2104.09864): ``inv_freq_i = base^(-2i/dim)``."""
    _check_dim_base(dim, base)
    return _base_inv_freq(dim, base), 1.0


def linear(dim: int, base: float = 10000.0, factor: float = 1.0) -> RopeResult:
    """Position Interpolation (Chen et al., arXiv:2306.15595): every frequency divided by ``s``."""
    _check_dim_base(dim, base)
    return _base_inv_freq(dim, base) / _factor(factor), 1.0


def ntk(dim: int, base: float = 10000.0, factor: float = 1.0) -> RopeResult:
    """Static NTK-aware scaling (bloc97): ``base' = base * s^(dim / (dim - 2))``."""
    _check_dim_base(dim, base)
    s = _factor(factor)
    return _base_inv_freq(dim, ntk_base(base, s, dim)), 1.0


def dynamic(
    dim: int,
    base: float = 10000.0,
    factor: float = 1.0,
    max_position_embeddings: int = 2048,
    seq_len: int | None = None,
) -> RopeResult:
    """Dynamic NTK (emozilla): NTK base scaling grown with the current length.

    ``base' = base * (s * L / L0 - (s - 1))^(dim / (dim - 2))`` with ``L = max(seq_len, L0)``.
    """
    _check_dim_base(dim, base)
    s = _factor(factor)
    l0 = checks.positive_int("max_position_embeddings", max_position_embeddings)
    length = l0 if seq_len is None else max(checks.positive_int("seq_len", seq_len), l0)
    return _base_inv_freq(dim, ntk_base(base, dynamic_alpha(s, length, l0), dim)), 1.0


def _yarn_correction_range(
    beta_fast: float, beta_slow: float, dim: int, base: float, l0: int, truncate: bool
) -> tuple[float, float]:
    """Dimensions where the ramp starts and ends: ``dim ln(L0 / (2 pi r)) / (2 ln base)``."""

    def correction_dim(rotations: float) -> float:
        return dim * math.log(l0 / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def yarn_attention_factor(
    factor: float,
    mscale: float | None = None,
    mscale_all_dim: float | None = None,
    attention_factor: float | None = None,
) -> float:
    """YaRN's cos/sin factor: given, or ``0.1 ln s + 1``, or mscale/mscale_all_dim ratio."""
    if attention_factor is not None:
        return checks.positive("attention_factor", attention_factor)
    if mscale and mscale_all_dim:
        return float(yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim))
    return yarn_mscale(factor)


def yarn(
    dim: int,
    base: float = 10000.0,
    factor: float = 1.0,
    original_max_position_embeddings: int = 2048,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
    mscale: float | None = None,
    mscale_all_dim: float | None = None,
    attention_factor: float | None = None,
) -> RopeResult:
    """YaRN (Peng et al., arXiv:2309.00071): NTK-by-parts frequencies plus an attention factor.

    ``ramp_i = clamp((i - low) / (high - low), 0, 1)``;
    ``inv_freq = inv / s * ramp + inv * (1 - ramp)``: short wavelengths (i < low) keep their
    frequency, long ones (i > high) are interpolated by ``1/s``. ``low, high`` come from
    ``beta_fast`` (32) and ``beta_slow`` (1). The factor defaults to ``0.1 ln s + 1`` on cos and
    sin, i.e. a logit multiplier ``(0.1 ln s + 1)^2``.
    """
    _check_dim_base(dim, base)
    s = _factor(factor)
    l0 = checks.positive_int("original_max_position_embeddings", original_max_position_embeddings)
    checks.positive("beta_fast", beta_fast)
    checks.positive("beta_slow", beta_slow)
    if beta_fast <= beta_slow:
        raise ValueError(f"beta_fast={beta_fast} must be greater than beta_slow={beta_slow} (defaults 32 and 1)")
    low, high = _yarn_correction_range(beta_fast, beta_slow, dim, base, l0, truncate)
    if low == high:
        high += 0.001  # as transformers: avoid a zero-width ramp
    inv = _base_inv_freq(dim, base)  # [dim/2]
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    inv_freq = inv / s * ramp + inv * (1 - ramp)  # [dim/2]
    return inv_freq, yarn_attention_factor(s, mscale, mscale_all_dim, attention_factor)


def llama3(
    dim: int,
    base: float = 500000.0,
    factor: float = 8.0,
    original_max_position_embeddings: int = 8192,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
) -> RopeResult:
    """Llama 3.1 scaling: wavelengths above ``L0 / low_freq_factor`` divided by ``s``, those
    below ``L0 / high_freq_factor`` kept, a smooth blend between (Meta's reference code)."""
    _check_dim_base(dim, base)
    s = _factor(factor)
    l0 = checks.positive_int("original_max_position_embeddings", original_max_position_embeddings)
    lo, hi = checks.positive("low_freq_factor", low_freq_factor), high_freq_factor
    if checks.positive("high_freq_factor", hi) < lo:  # equal: a step at L0 / lo (Llama 4 Scout's 1 and 1)
        raise ValueError(f"high_freq_factor={hi} must be at least low_freq_factor={lo}")
    inv = _base_inv_freq(dim, base)  # [dim/2]
    wavelen = 2 * math.pi / inv  # [dim/2]
    scaled = torch.where(wavelen > l0 / lo, inv / s, inv)  # [dim/2]
    smooth = (l0 / wavelen - lo) / max(hi - lo, 1e-12)  # [dim/2]
    blended = (1 - smooth) * scaled / s + smooth * scaled  # [dim/2]
    medium = (wavelen >= l0 / hi) & (wavelen <= l0 / lo)  # [dim/2]
    return torch.where(medium, blended, scaled), 1.0


def longrope(
    dim: int,
    base: float = 10000.0,
    short_factor: Sequence[float] = (),
    long_factor: Sequence[float] = (),
    original_max_position_embeddings: int = 4096,
    factor: float | None = None,
    max_position_embeddings: int | None = None,
    seq_len: int | None = None,
    attention_factor: float | None = None,
) -> RopeResult:
    """LongRoPE (Ding et al., arXiv:2402.13753; Phi-3): per-frequency rescale factors.

    ``inv_freq_i = 1 / (f_i * base^(2i/dim))`` with ``f = long_factor`` past ``L0``, else
    ``short_factor``; attention factor ``sqrt(1 + ln s / ln L0)`` (on cos/sin) with
    ``s = factor`` or ``max_position_embeddings / L0``.
    """
    _check_dim_base(dim, base)
    l0 = checks.positive_int("original_max_position_embeddings", original_max_position_embeddings)
    for name, f in (("short_factor", short_factor), ("long_factor", long_factor)):
        if len(f) != dim // 2:
            raise ValueError(f"{name} has {len(f)} values; expected dim // 2 = {dim // 2}")
        for i, v in enumerate(f):
            checks.positive(f"{name}[{i}]", v)
    if factor is None:
        factor = (max_position_embeddings or l0) / l0
    attention_factor = longrope_attention_factor(factor, l0, attention_factor)
    ext = long_factor if seq_len and seq_len > l0 else short_factor
    ext_t = torch.tensor(list(ext), dtype=torch.float32)  # [dim/2]
    shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim  # [dim/2]
    return 1.0 / (ext_t * base**shape), float(attention_factor)


def longrope_attention_factor(
    factor: float, original_max_position_embeddings: int, attention_factor: float | None = None
) -> float:
    """LongRoPE's cos/sin factor: given, else ``sqrt(1 + ln s / ln L0)`` (1 for s <= 1)."""
    s = checks.positive("factor", factor)
    l0 = checks.positive_int("original_max_position_embeddings", original_max_position_embeddings)
    if attention_factor is not None:
        return checks.positive("attention_factor", attention_factor)
    return 1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(l0))


ROPE_FUNCTIONS: dict[str, Callable[..., RopeResult]] = {
    "default": default,
    "linear": linear,
    "ntk": ntk,
    "dynamic": dynamic,
    "yarn": yarn,
    "llama3": llama3,
    "longrope": longrope,
}


def compute_inv_freq(rope_type: str, dim: int, base: float = 10000.0, **params) -> RopeResult:
    """Dispatch to the registered function for ``rope_type`` (a 'did you mean' on typos)."""
    fn = ROPE_FUNCTIONS[checks.choice("rope_type", rope_type, ROPE_FUNCTIONS)]
    return fn(dim, base, **params)


def cos_sin_multiplier(attention_factor: float) -> float:
    """The logit multiplier of a cos/sin factor: ``attention_factor ** 2``."""
    return checks.positive("attention_factor", attention_factor) ** 2


def cos_sin_factor(multiplier: float) -> float:
    """The cos/sin factor that gives logit multiplier ``m``: ``sqrt(m)``."""
    return math.sqrt(checks.positive("multiplier", multiplier))
