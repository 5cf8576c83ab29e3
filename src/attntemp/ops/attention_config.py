"""What a model's ``config.json`` means for its attention logits, from attntemp's own math: the
reference ``attntemp audit`` holds every engine to.

The layers of a model fall into groups that share one treatment (layer type, RoPE or NoPE). For
each group and query position p (0-indexed):

* the RoPE inverse frequencies and the attention factor ``af`` on cos and sin (:mod:`.rope`: plain
  RoPE arXiv:2104.09864, PI arXiv:2306.15595, YaRN arXiv:2309.00071, Llama 3.1, LongRoPE
  arXiv:2402.13753); q and k are both rotated, so ``af`` lands squared on the logits;
* the softmax scale relative to ``1/sqrt(d_qk)``: Gemma's ``query_pre_attn_scalar^-1/2``
  (Gemma 2 arXiv:2408.00118, Gemma 3 arXiv:2503.19786), DeepSeek's ``mscale_all_dim`` correction
  ``(0.1 mscale_all_dim ln s + 1)^2`` (DeepSeek-V2 arXiv:2405.04434, its released code);
* a position schedule on q: Llama 4's temperature tuning on NoPE layers
  ``1 + attn_scale ln(1 + floor((p + 1) / floor_scale))`` (Llama 4 release; the log-length
  scaling of SSMax arXiv:2501.19399), Mistral 3's ``1 + beta ln(1 + floor(p / L0))``.

The effective pre-softmax logit multiplier is ``m(p) = af(p)^2 * scale_ratio * schedule(p)``.
The config's geometry (layer types, head dimensions, each layer type's RoPE parameters, L0) is its
:class:`~attntemp.ops.geometry.ModelGeometry`, which reads both the legacy ``rope_scaling`` +
``rope_theta`` spelling and transformers 5's ``rope_parameters`` (per layer type or not); the
softmax-scale and schedule fields are read here. Bad values raise ``ValueError`` naming the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..utils import checks
from ..utils.lazy import lazy
from . import rope
from .geometry import FULL, ModelGeometry, config_dict, rope_source, stated_l0
from .schedules import Llama4, yarn_mscale

if TYPE_CHECKING:
    import torch
else:
    torch = lazy("torch")


# softmax scale *= mscale(s, mscale_all_dim)^2 (Mistral 4: transformers' yarn_apply_mscale)
DEEPSEEK_TYPES = ("deepseek_v2", "deepseek_v3", "mistral4")
MAX_FACTOR = 1e4  # RoPE factor: a context 10,000 times the trained one
MULTIPLIERS = (1e-3, 1e3)  # the logit multiplier a config may mean: attention is uniform or one-hot outside
PAPERS = {
    "default": "RoPE (Su et al., arXiv:2104.09864)",
    "linear": "Position Interpolation (Chen et al., arXiv:2306.15595)",
    "dynamic": "dynamic NTK (emozilla, 2023)",
    "yarn": "YaRN (Peng et al., arXiv:2309.00071)",
    "llama3": "Llama 3.1 RoPE scaling (Llama 3 herd, arXiv:2407.21783)",
    "longrope": "LongRoPE (Ding et al., arXiv:2402.13753)",
}


def ignored(geometry: ModelGeometry) -> list[str]:
    """Config values no engine reads, each as a line saying why (the audit prints them)."""
    value = geometry.ignored_l0()
    if value is None:
        return []
    return [
        f"config original_max_position_embeddings={value!r} is ignored: dynamic NTK scales from "
        f"max_position_embeddings={geometry.max_positions!r} (transformers and vLLM read no other base length)"
    ]


def _factor(geometry: ModelGeometry, params: dict[str, Any]) -> float:
    if params.get("factor") is not None:
        return checks.within("factor", params["factor"], 1.0, MAX_FACTOR, " (a context 10,000 times L0 at most)")
    return geometry.positions() / geometry.l0(params)


def rope_arguments(geometry: ModelGeometry, params: dict[str, Any], position: int) -> dict[str, Any]:
    """The keyword arguments of ``ops.rope``'s function for these parameters at ``position``."""
    kind = params["rope_type"]
    if kind == "default":
        return {}
    if kind in ("linear", "dynamic"):
        extra = (
            {"max_position_embeddings": geometry.base_length(params), "seq_len": position + 1}
            if kind == "dynamic"
            else {}
        )
        return {"factor": _factor(geometry, params), **extra}
    keys = {
        "yarn": ("beta_fast", "beta_slow", "truncate", "mscale", "mscale_all_dim", "attention_factor"),
        "llama3": ("low_freq_factor", "high_freq_factor"),
        "longrope": ("short_factor", "long_factor", "attention_factor"),
    }[kind]
    out = {k: params[k] for k in keys if params.get(k) is not None}
    if not isinstance(out.get("truncate", True), bool):  # "yes" or 0 would be read by truthiness
        raise ValueError(f"truncate={out['truncate']!r} is not allowed; expected true or false")
    out["original_max_position_embeddings"] = geometry.l0(params)
    out["factor"] = _factor(geometry, params)
    if kind == "longrope":
        out["seq_len"] = position + 1
    return out


def rope_at(
    geometry: ModelGeometry, params: dict[str, Any], rotary_dim: int, position: int
) -> tuple[torch.Tensor, float]:
    """``(inv_freq [rotary_dim/2], attention_factor)`` of ``params`` at ``position``, from ``ops.rope``."""
    base = checks.positive("rope_theta", params["rope_theta"])
    try:
        kw = rope_arguments(geometry, params, position)
        return rope.compute_inv_freq(params["rope_type"], rotary_dim, base, **kw)
    except TypeError as exc:  # a key the type does not take
        raise ValueError(f"rope parameters {params!r}: {exc}") from None


def mistral_position_scale(position: int, beta: float, original_max_position_embeddings: int) -> float:
    """Mistral 3's q scale ``1 + beta ln(1 + floor(p / L0))`` (``llama_4_scaling_beta``; transformers'
    ministral3 ``get_llama_4_attn_scale``), 0-indexed position p, L0 the original context."""
    l0 = checks.positive_int("original_max_position_embeddings", original_max_position_embeddings)
    return 1.0 + checks.positive("llama_4_scaling_beta", beta) * math.log1p(position // l0)


@dataclass(frozen=True)
class Group:
    """Layers that share one treatment of the logits, with what the config means for them."""

    name: str
    layers: tuple[int, ...]
    rope: dict[str, Any] | None  # None: NoPE layers
    qk_dim: int
    rotary_dim: int
    scale_ratio: float  # softmax scale * sqrt(qk_dim)
    scale_rule: str
    geometry: ModelGeometry = field(repr=False, compare=False)
    schedule: tuple[str, dict[str, float]] | None = None

    def rope_at(self, position: int) -> tuple[torch.Tensor | None, float]:
        """``(inv_freq or None for NoPE, attention factor on cos/sin)`` at ``position``."""
        if self.rope is None:
            return None, 1.0
        return rope_at(self.geometry, self.rope, self.rotary_dim, position)

    def schedule_at(self, position: int) -> float:
        """The position schedule's factor on q (1 without one)."""
        if self.schedule is None:
            return 1.0
        kind, p = self.schedule
        if kind == "llama4":
            pos = torch.tensor([position], dtype=torch.float64)  # [1]
            return float(Llama4(p["floor_scale"], p["attn_scale"])(0, 1, pos, pos + 1)[0, 0])
        return mistral_position_scale(position, p["beta"], int(stated_l0(p)))

    def multiplier_at(self, position: int) -> float:
        """``af(p)^2 * scale_ratio * schedule(p)``: the effective pre-softmax logit multiplier."""
        _, af = self.rope_at(position)
        return af**2 * self.scale_ratio * self.schedule_at(position)

    def formula(self) -> str:
        kind = self.rope["rope_type"] if self.rope else None
        parts = [f"m(p) = af^2 * scale_ratio * schedule(p) on {self.name} layers"]
        parts.append(f"RoPE: {PAPERS[kind]}" if kind else "RoPE: none (NoPE layers)")
        if kind == "yarn":
            parts.append("af = attention_factor, else mscale(s, mscale)/mscale(s, mscale_all_dim), else 0.1 ln s + 1")
        elif kind == "longrope":
            parts.append("af = attention_factor, else sqrt(1 + ln s / ln L0)")
        parts.append(f"scale_ratio = {self.scale_rule}")
        if self.schedule:
            parts.append(
                "schedule = 1 + attn_scale ln(1 + floor((p + 1) / floor_scale)) (Llama 4, arXiv:2501.19399)"
                if self.schedule[0] == "llama4"
                else "schedule = 1 + beta ln(1 + floor(p / L0)) (Mistral 3 llama_4_scaling_beta)"
            )
        return "; ".join(parts)


def _scale(cfg: dict[str, Any], geometry: ModelGeometry, params: dict[str, Any] | None) -> tuple[float, str]:
    """The softmax scale relative to ``1/sqrt(qk_dim)``, with its rule."""
    qk_dim = geometry.head_dim
    if cfg.get("query_pre_attn_scalar") is not None:
        scalar = checks.positive("config.query_pre_attn_scalar", cfg["query_pre_attn_scalar"])
        return math.sqrt(qk_dim / scalar), f"sqrt(d_qk / query_pre_attn_scalar) = sqrt({qk_dim}/{scalar:g}) (Gemma)"
    if cfg.get("model_type") in DEEPSEEK_TYPES and params and params.get("mscale_all_dim"):
        s = _factor(geometry, params)
        all_dim = checks.positive("mscale_all_dim", params["mscale_all_dim"])
        rule = f"(0.1 * {all_dim:g} ln {s:g} + 1)^2 (DeepSeek-V2 arXiv:2405.04434 mscale_all_dim)"
        return yarn_mscale(s, all_dim) ** 2, rule
    return 1.0, "1 (softmax scale 1/sqrt(d_qk))"


def _schedule(cfg: dict[str, Any], geometry: ModelGeometry, params: dict[str, Any] | None, uses_rope: bool) -> Any:
    if cfg.get("model_type") == "llama4_text" and cfg.get("attn_temperature_tuning") and not uses_rope:
        fs = checks.positive("config.floor_scale", cfg.get("floor_scale", 8192))
        return "llama4", {
            "floor_scale": fs,
            "attn_scale": checks.positive("config.attn_scale", cfg.get("attn_scale", 0.1)),
        }
    if params and params.get("llama_4_scaling_beta") is not None:
        beta = checks.positive("llama_4_scaling_beta", params["llama_4_scaling_beta"])
        return "mistral", {"beta": beta, "original_max_position_embeddings": float(geometry.l0(params))}
    return None


def _check_multiplier(cfg: dict[str, Any], group: Group, source: str) -> None:
    """The group's ``af^2``, scale ratio and their product (the logit multiplier at position 0)
    each within :data:`MULTIPLIERS`, naming the field that sets it (``attention_factor``,
    ``mscale``, ``mscale_all_dim``, ``factor``, ``query_pre_attn_scalar``)."""
    params = group.rope or {}
    try:
        af2 = group.rope_at(0)[1] ** 2
    except OverflowError:
        af2 = math.inf
    lo, hi = MULTIPLIERS
    for what, value in (("attention factor squared", af2), ("scale ratio", group.scale_ratio),
                        ("logit multiplier", af2 * group.scale_ratio)):  # fmt: skip
        if lo <= value <= hi:
            continue
        keys = [k for k in ("attention_factor", "mscale_all_dim", "mscale", "factor") if params.get(k) is not None]
        where = f"{source}.{keys[0]}={params[keys[0]]!r}" if keys else "config"
        if what == "scale ratio" and cfg.get("query_pre_attn_scalar") is not None:
            where = f"config.query_pre_attn_scalar={cfg['query_pre_attn_scalar']!r}"
        raise ValueError(
            f"{where} is not allowed: the {what} it gives is {value:.3g}; expected one in [{lo:g}, {hi:g}] "
            "(attention is uniform or one-hot outside)"
        )


def groups(config: dict[str, Any]) -> list[Group]:
    """The config's layer groups, in the order of their first layer."""
    cfg = config_dict(config)
    if cfg.get("rope_parameters") is not None and cfg.get("rope_scaling") is not None:
        raise ValueError(
            "config has both rope_parameters and rope_scaling: which one an engine reads differs (transformers 5 "
            "reads rope_parameters, older engines rope_scaling); keep one"
        )
    geometry = ModelGeometry.from_config(cfg)  # sizes, head dims, layer types, RoPE types and L0 checked
    if geometry.rotary_dim < 2 or geometry.rotary_dim % 2:
        raise ValueError(
            f"the rotary dimension is {geometry.rotary_dim}; expected an even integer >= 2 (head_dim x partial)"
        )
    found: dict[tuple[str, bool], list[int]] = {}
    for i, kind in enumerate(zip(geometry.layer_types, geometry.rope_layers, strict=True)):
        found.setdefault(kind, []).append(i)
    return [_group(cfg, geometry, layer_type, uses_rope, layers) for (layer_type, uses_rope), layers in found.items()]


def _group(cfg: dict[str, Any], geometry: ModelGeometry, layer_type: str, uses_rope: bool, layers: list[int]) -> Group:
    """One group, every value checked before any work (each error naming its field)."""
    params = geometry.rope_of(layer_type)
    ratio, rule = _scale(cfg, geometry, params)
    name = layer_type + ("" if uses_rope else " NoPE")
    group = Group(name, tuple(layers), params if uses_rope else None, geometry.head_dim, geometry.rotary_dim,
                  ratio, rule, geometry, _schedule(cfg, geometry, params, uses_rope))  # fmt: skip
    try:
        group.rope_at(0)
    except ValueError as exc:
        raise ValueError(f"{rope_source(cfg, layer_type)}.{exc}") from None
    _check_multiplier(cfg, group, rope_source(cfg, layer_type))
    return group


def primary(found: list[Group]) -> Group:
    """The group the top-level figures describe: a position-dependent one, else full attention."""
    for g in found:
        if g.schedule is not None:
            return g
    return next((g for g in found if g.rope is not None and g.name.startswith("full")), found[0])


def default_positions(config: dict[str, Any]) -> tuple[int, ...]:
    """Positions where the figures change: 0, 1, around L0 and 2 L0, the schedules' steps, the end."""
    found = groups(config)  # every value checked first, each error naming its field
    geometry = found[0].geometry
    params = geometry.rope_of(FULL)
    l0 = geometry.base_length(params) if params["rope_type"] != "default" else geometry.positions()
    end = geometry.positions() - 1
    points = {0, 1, l0 - 1, l0, 2 * l0 - 1, 2 * l0, end}
    for g in found:
        if g.schedule and g.schedule[0] == "llama4":
            fs = int(g.schedule[1]["floor_scale"])
            points |= {fs - 2, fs - 1, 2 * fs - 1, 4 * fs - 1}
        elif g.schedule:
            l0s = int(stated_l0(g.schedule[1]))
            points |= {l0s - 1, l0s, 2 * l0s, 4 * l0s}
    return tuple(sorted(p for p in points if 0 <= p <= max(end, 1)))
