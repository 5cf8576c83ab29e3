"""Learnable per-frequency RoPE factors on a transformers model (LongRoPE's ``long_factor``).

:class:`LearnableRopeFactors` holds ``ln f`` for each rotary pair (``d/2`` numbers shared by every
layer, as LongRoPE, arXiv:2402.13753), each factor ``f = exp(max(ln f, 0)) >= 1`` (and ``project``
puts the stored value back on that set after a step). :func:`rope_factors` swaps each rotary embedding
module of a model for a :class:`FactorRotary` that computes cos/sin from
``inv_freq = 1 / (f * base^(2i/d))`` with gradients flowing into ``ln f``, for sequences longer than
L0 = original_max_position_embeddings, and calls the model's own module unchanged otherwise, as
transformers' longrope switches between ``long_factor`` and ``short_factor`` (1 here). On exit the
model's RoPE is put back exactly as found (``rope_state`` / ``put_rope_state``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ..ops.geometry import stated_l0
from ..ops.rope import factors as math_
from ..ops.rope import longrope_attention_factor
from ..utils import checks
from .introspect import rope_geometry, text_config, trained_length
from .rope_scaling import put_rope_state, rope_state, rotary_modules


class LearnableRopeFactors(nn.Module):
    """``log_factor`` ``[d/2]`` (ln of LongRoPE's long_factor) and what the spec needs besides it."""

    def __init__(
        self,
        init: torch.Tensor,
        factor: float,
        trained_length: int,
        attention_factor: float = 1.0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if init.dim() != 1 or bool((init < 1).any()):
            raise ValueError(f"init factors must be one number >= 1 per rotary pair; got {init.tolist()}")
        self.factor = checks.at_least("factor", factor, 1.0)
        self.trained_length = checks.positive_int("trained_length", trained_length)
        self.attention_factor = checks.positive("attention_factor", attention_factor)
        self.log_factor = nn.Parameter(init.double().log().to(dtype=dtype, device=device))  # [d/2]

    def factors(self) -> torch.Tensor:
        """``f = exp(max(ln f, 0))``: ``[d/2]``, each >= 1, differentiable."""
        return self.log_factor.clamp_min(0.0).exp()  # [d/2]

    @torch.no_grad()
    def project(self) -> None:
        """After an optimiser step: ``ln f`` back to >= 0 (no factor below 1 is stored)."""
        self.log_factor.clamp_(min=0.0)

    def to_rope(self) -> dict[str, Any]:
        """The learned factors as a ``longrope`` rope dict (short_factor 1, attention_factor stated)."""
        long = self.factors().detach().float().cpu()  # [d/2], the fp32 values the forward used
        return math_.longrope_parameters(long, self.factor, self.trained_length, self.attention_factor)


class FactorRotary(nn.Module):
    """A rotary embedding (its name does not end in ``RotaryEmbedding``: ``rope_state`` sees the module
    it wraps) whose long-context frequencies come from :class:`LearnableRopeFactors`.

    ``forward(x, position_ids) -> (cos, sin)`` as LlamaRotaryEmbedding: past L0 (``max position + 1 >
    L0``, transformers' longrope test) ``inv_freq = 1 / (f base^(2i/d))``; otherwise the wrapped
    module's own output. Both times ``attention_factor`` on cos and sin (transformers' longrope
    applies it at every length)."""

    def __init__(self, original: nn.Module, factors: LearnableRopeFactors, dim: int, base: float) -> None:
        super().__init__()
        self.original = original
        self.learned = factors
        self.dim, self.base = dim, base

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scale = self.learned.attention_factor
        if int(position_ids.max()) + 1 <= self.learned.trained_length:
            cos, sin = self.original(x, position_ids)  # [B, L, d]
            return (cos, sin) if scale == 1.0 else ((cos * scale).to(x.dtype), (sin * scale).to(x.dtype))
        f = self.learned.factors().to(x.device)  # [d/2]: fp32 as transformers, fp64 for a float64 model
        inv = math_.longrope_inv_freq(self.dim, self.base, f)  # [d/2]
        freqs = position_ids[..., None].to(f.dtype) * inv  # [B, L, d/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [B, L, d]
        return (emb.cos() * scale).to(x.dtype), (emb.sin() * scale).to(x.dtype)  # [B, L, d] each


def pair_count(model: nn.Module) -> int:
    """``d/2``: the rotary pairs of the model's RoPE."""
    return rope_geometry(text_config(model))[0] // 2


def install_factors(model: nn.Module, factors: LearnableRopeFactors) -> None:
    """Swap every rotary embedding module of ``model`` for a :class:`FactorRotary`
    (undo with ``put_rope_state`` of the state before; :func:`rope_factors` does both)."""
    dim, base, current = rope_geometry(text_config(model))
    if current.get("rope_type", "default") != "default":
        raise ValueError(
            f"the model already uses rope_type={current['rope_type']!r}; learned factors replace the model's "
            "own frequencies (allowed: a model with plain RoPE, rope_type 'default')"
        )
    if factors.log_factor.shape != (dim // 2,):
        raise ValueError(f"factors has {factors.log_factor.numel()} values; the model has {dim // 2} rotary pairs")
    found = rotary_modules(model)
    if not found:
        raise ValueError(f"model_type={text_config(model).model_type!r}: no rotary embedding module found")
    for parent, name, module in found:
        setattr(parent, name, FactorRotary(module, factors, dim, base))


@contextmanager
def rope_factors(model: nn.Module, factors: LearnableRopeFactors) -> Iterator[LearnableRopeFactors]:
    """``with rope_factors(model, f): ...``: the learnable frequencies in place; the model's RoPE
    (config entries, rotary module objects) restored exactly on exit, also on an exception."""
    state = rope_state(model)
    try:
        install_factors(model, factors)
        yield factors
    finally:
        put_rope_state(model, state)


def factors_for(
    model: nn.Module, rope: dict[str, Any] | None, length: int, longrope_scale: bool = False
) -> LearnableRopeFactors:
    """Learnable factors for ``model`` started from ``rope`` (None, linear, ntk or yarn, as
    ``rope_for`` writes them; LongRoPE initialises its search from PI, NTK and YaRN the same way),
    with s = ``rope['factor']`` (else ``length / L0``) and the cos/sin factor 1, or LongRoPE's fixed
    ``sqrt(1 + ln s / ln L0)`` when ``longrope_scale``."""
    dim, base, _ = rope_geometry(text_config(model))
    params = dict(rope or {})
    l0 = int(stated_l0(params) or trained_length(model))
    kind = params.get("rope_type", "none")
    if kind not in math_.INITS:
        raise ValueError(
            f"rope={kind!r} is not allowed with learned RoPE factors: its frequencies are no single divisor "
            f"per pair; allowed starts: {', '.join(math_.INITS)}"
        )
    s = float(params.get("factor") or max(1.0, length / l0))
    init = math_.init_factors(kind, dim, base, s, l0)  # [d/2]
    scale = longrope_attention_factor(s, l0) if longrope_scale else 1.0
    weight = next(model.parameters())
    dtype = torch.float64 if weight.dtype == torch.float64 else torch.float32
    return LearnableRopeFactors(init, s, l0, scale, dtype, weight.device)
