"""Learnable temperatures: per-(layer, head) log-multipliers tuned by gradient, every weight frozen.

``learnable(model)`` patches the model (``attntemp.apply``) with a base spec (identity, or only a
RoPE extension) and sets each attention module's ``LayerState.extra`` to a
:class:`LearnableTemperatures`, whose ``log_m`` (one per head, layer or model) are then the only
trainable parameters: a few hundred numbers for a long-context adaptation that touches no weight.

Length dependence (``schedule="log_length"``, the schedule :class:`attntemp.ops.schedules.LogLength`)
adds a slope b per parameter, over the n keys a query sees:

    ln m(l, h, n) = a[l, h] + b[l, h] * ln(max(1, n / L0))

with L0 the trained length: m = exp(a) up to L0 and exp(a) (n / L0)^b beyond, after SSMax
(arXiv:2501.19399, m = s ln n) and Llama 4's NoPE-layer temperature. ``to_spec`` returns it as a
``log_length`` TemperatureSpec: exact at every length, bakeable nowhere, patchable everywhere.
``schedule="log_length_slope"`` learns b alone with a held at its init (0 without one): nothing
changes up to the trained length.

``rope_factors`` (a :class:`attntemp.hf.rope_factors.LearnableRopeFactors`) learns LongRoPE's
per-frequency factors (arXiv:2402.13753) in the same run, alone (``learn_temperature=False``) or
with the temperatures; ``to_spec`` then carries them as a ``longrope`` rope.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ..ops.schedules import LEARNED_SCHEDULES
from ..ops.spec import GRANULARITIES, TemperatureSpec
from ..utils import checks
from . import patch
from .introspect import attention_modules, model_geometry, trained_length
from .rope_factors import LearnableRopeFactors, install_factors

_LEARN = "_attntemp_learnable"


def _init_table(init: TemperatureSpec | None, layers: int, heads: int, granularity: str) -> torch.Tensor:
    """ln m of ``init``'s static multipliers, reduced to the granularity: [L, H], [L, 1] or [1, 1]."""
    shape = {"head": (layers, heads), "layer": (layers, 1), "global": (1, 1)}[granularity]
    if init is None:
        return torch.zeros(shape, dtype=torch.float64)
    if init.position_dependent:
        raise ValueError(
            f"init has schedule={init.schedule!r}, which depends on position; a learnable "
            "init must be constant (schedules allowed: 'constant')"
        )
    init.check_model(layers, heads)
    table = init.heads_table(layers, heads).double().log()  # [L, H]
    reduced = table.mean(dim=1, keepdim=True) if shape[1] == 1 else table  # [L, H|1]
    reduced = reduced.mean(dim=0, keepdim=True) if shape[0] == 1 else reduced  # [L|1, H|1]
    if not torch.allclose(reduced.expand(layers, heads), table, rtol=0.0, atol=1e-9):
        raise ValueError(
            f"granularity={granularity!r} holds one multiplier per {granularity}, but init "
            "varies within it; allowed: an init constant at that granularity, or 'head'"
        )
    return reduced


class LearnableTemperatures(nn.Module):
    """``log_m`` ([L, H], [L, 1] or [1, 1] by granularity) and an optional log-length slope.

    Called as ``LayerState.extra``: ``(layer, positions [B|1, Lq], n_keys [B|1, Lq]) -> m``
    broadcastable to ``[B, H, Lq]``. See the module docstring for the formula.
    """

    def __init__(
        self,
        num_layers: int,
        num_heads: int,
        granularity: str = "head",
        init: TemperatureSpec | None = None,
        schedule: str | None = None,
        trained_length: int | None = None,
        dtype: torch.dtype = torch.float32,
        learn_temperature: bool = True,
    ) -> None:
        super().__init__()
        if schedule is not None and not learn_temperature:
            raise ValueError(f"schedule={schedule!r} is a learned temperature; it needs learn_temperature=True")
        self.num_layers = checks.positive_int("num_layers", num_layers)
        self.num_heads = checks.positive_int("num_heads", num_heads)
        self.granularity = checks.choice("granularity", granularity, GRANULARITIES)
        self.schedule = None if schedule is None else checks.choice("schedule", schedule, LEARNED_SCHEDULES)
        self.trained_length = None
        if schedule is not None:
            self.trained_length = checks.positive_int("trained_length", trained_length)
        table = _init_table(init, num_layers, num_heads, granularity).to(dtype)  # on the CPU: .to(device) moves it
        self.log_m = nn.Parameter(table, requires_grad=learn_temperature and schedule != "log_length_slope")
        self.slope = nn.Parameter(torch.zeros_like(table)) if schedule else None
        self.base = TemperatureSpec()  # the spec applied under it (set by apply_learnable)
        self.rope_factors: LearnableRopeFactors | None = None  # learned RoPE factors (set by apply_learnable)

    def forward(self, layer: int, positions: torch.Tensor, n_keys: torch.Tensor) -> torch.Tensor:
        """m: ``[1, H|1, 1]`` (constant) or ``[B|1, H|1, Lq]`` (log_length)."""
        row = layer if self.log_m.shape[0] > 1 else 0
        ln_m = self.log_m[row].reshape(1, -1, 1)  # [1, H|1, 1]
        if self.slope is None:
            return ln_m.exp()
        assert self.trained_length is not None  # set with a schedule, as slope is
        x = (n_keys.to(ln_m.dtype) / self.trained_length).clamp_min(1.0).log()  # [B|1, Lq]
        return (ln_m + self.slope[row].reshape(1, -1, 1) * x.unsqueeze(1)).exp()  # [B|1, H|1, Lq]

    def table(self) -> torch.Tensor:
        """The constant multipliers exp(log_m) as a detached ``[L, H]`` float64 table."""
        return self.log_m.detach().double().exp().expand(self.num_layers, self.num_heads).cpu()

    def to_spec(self, base_spec: TemperatureSpec | None = None) -> TemperatureSpec:
        """The learned function as a spec, exact: ``base_spec``'s static multipliers (default:
        ``self.base``) times exp(log_m) per head, and with a slope the ``log_length`` schedule with
        a = ln of that and b = the slope. The base's rope (and a position schedule without a slope)
        are kept; learned RoPE factors replace the base's rope with their ``longrope`` dict."""
        base = self.base if base_spec is None else base_spec
        base.check_model(self.num_layers, self.num_heads)
        if self.rope_factors is not None:
            base = base.with_rope(self.rope_factors.to_rope())
        heads = base.heads_table(self.num_layers, self.num_heads).double() * self.table()  # [L, H]
        if self.slope is None:
            kw: dict[str, Any] = {}
            if base.position_dependent:
                kw = {"schedule": base.schedule, "schedule_params": base.schedule_params}
            return TemperatureSpec.per_head(heads, rope=base.rope, **kw)
        if base.position_dependent:
            raise ValueError(
                f"the base spec has schedule={base.schedule!r}; a learned log_length slope cannot "
                "be combined with another position schedule in one spec"
            )
        slope = self.slope.detach().double().expand(self.num_layers, self.num_heads).cpu()  # [L, H]
        params = {"trained_len": self.trained_length, "a": heads.log().tolist(), "b": slope.tolist()}
        return TemperatureSpec(schedule="log_length", schedule_params=params, rope=base.rope)


def base_spec(init: TemperatureSpec | None, rope: dict[str, Any] | None) -> TemperatureSpec:
    """The identity spec carrying ``rope`` (or ``init``'s rope); the init multipliers are learned."""
    base = TemperatureSpec(rope=rope)
    if init is not None and init.rope and base.rope and init.rope != base.rope:
        raise ValueError(f"rope={base.rope.to_dict()} differs from init.rope={init.rope.to_dict()}; give one")
    return base if base.rope or init is None else TemperatureSpec(rope=init.rope)


def trained_length_of(model: nn.Module, base: TemperatureSpec) -> int:
    """L0: the one the spec's rope states, else the model's trained length."""
    return int(base.rope.l0 or trained_length(model))


def learnable_of(model: nn.Module) -> LearnableTemperatures | None:
    """The LearnableTemperatures applied to ``model`` by ``apply_learnable``, or None."""
    saved = getattr(model, _LEARN, None)
    return None if saved is None else saved[0]


def apply_learnable(
    model: nn.Module,
    init: TemperatureSpec | None = None,
    granularity: str = "head",
    schedule: str | None = None,
    trained_length: int | None = None,
    rope: dict[str, Any] | None = None,
    rope_factors: LearnableRopeFactors | None = None,
    learn_temperature: bool = True,
) -> LearnableTemperatures:
    """Patch ``model`` with learnable temperatures and freeze every weight; undo with restore_learnable.

    ``trained_length`` (L0 of log_length) defaults to ``trained_length_of(model, base)``.
    ``rope_factors``: learnable RoPE factors put in place of the model's rotary frequencies (no
    ``rope`` then: the factors are the extension); ``learn_temperature=False`` freezes the m."""
    if learnable_of(model) is not None:
        raise ValueError("the model already has learnable temperatures; call restore_learnable(model) first")
    base = base_spec(init, rope)
    if rope_factors is not None and base.rope:
        raise ValueError(
            f"rope={base.rope.to_dict()} together with learned RoPE factors: the factors are the extension "
            "(start them from that rope with attntemp.ops.rope.factors.init_factors and pass rope=None)"
        )
    l0 = (trained_length or trained_length_of(model, base)) if schedule else None
    weight = next(model.parameters())
    dtype = torch.float64 if weight.dtype == torch.float64 else torch.float32
    heads = model_geometry(model).num_heads
    temps = LearnableTemperatures(
        len(attention_modules(model)), heads, granularity, init, schedule, l0, dtype, learn_temperature
    ).to(weight.device)
    temps.base = base
    patch.apply(model, base)  # restore puts back the RoPE found here: the rotary modules swapped below too
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    object.__setattr__(model, _LEARN, (temps, flags))
    for p in model.parameters():
        p.requires_grad_(False)
    patch.set_extra(model, temps)
    if rope_factors is not None:
        try:
            install_factors(model, rope_factors)
        except Exception:
            restore_learnable(model)
            raise
        temps.rope_factors = rope_factors
    return temps


def restore_learnable(model: nn.Module) -> nn.Module:
    """Undo ``apply_learnable``: patch removed, the original requires_grad flags put back."""
    saved = getattr(model, _LEARN, None)
    if saved is None:
        return model
    patch.restore(model)
    flags = saved[1]
    for name, p in model.named_parameters():
        if name in flags:
            p.requires_grad_(flags[name])
    object.__setattr__(model, _LEARN, None)
    return model


@contextmanager
def learnable(
    model: nn.Module,
    init: TemperatureSpec | None = None,
    granularity: str = "head",
    schedule: str | None = None,
    trained_length: int | None = None,
    rope: dict[str, Any] | None = None,
    rope_factors: LearnableRopeFactors | None = None,
    learn_temperature: bool = True,
) -> Iterator[LearnableTemperatures]:
    """``with learnable(model) as temps: ...``: restored on exit, also on an exception."""
    temps = apply_learnable(model, init, granularity, schedule, trained_length, rope, rope_factors, learn_temperature)
    try:
        yield temps
    finally:
        restore_learnable(model)
