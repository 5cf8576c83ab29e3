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
A config is read as a plain dict (``text_config`` first when there is one); both the legacy
``rope_scaling`` + ``rope_theta`` spelling and transformers 5's ``rope_parameters`` (per layer
type or not) are read. Bad values raise ``ValueError`` naming the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ..utils import checks
from . import rope
from .schedules import Llama4, yarn_mscale

# softmax scale *= mscale(s, mscale_all_dim)^2 (Mistral 4: transformers' yarn_apply_mscale)
DEEPSEEK_TYPES = ("deepseek_v2", "deepseek_v3", "mistral4")
# Kimi K2 / K2.5 name their text model kimi_k2; transformers' KimiK25Config runs it as deepseek_v3
ALIASES = {"kimi_k2": "deepseek_v3"}
SCALING_ON_FULL_ONLY = ("gemma3_text", "olmo3")  # legacy rope_scaling applies to full_attention layers only
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")
SIZES = {  # the largest a config may give (the largest released models are well inside), checked up front
    "num_hidden_layers": (1024, "layers"),
    "hidden_size": (65536, "hidden units"),
    "num_attention_heads": (1024, "heads"),
    "num_key_value_heads": (1024, "heads"),
    "head_dim": (4096, "dimensions"),
    "max_position_embeddings": (2**31 - 1, "positions"),
}
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


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The text part of a config (``text_config`` of a multimodal one), checked to be an object;
    a text ``model_type`` another architecture's code runs under its name (:data:`ALIASES`)."""
    if not isinstance(config, dict):
        raise ValueError(f"config={type(config).__name__} is not allowed; expected a JSON object")
    text = config.get("text_config", config)
    if not isinstance(text, dict):
        raise ValueError(f"config.text_config={text!r} is not allowed; expected a JSON object")
    alias = ALIASES.get(str(text.get("model_type")))
    return text if alias is None else {**text, "model_type": alias}


def _int(cfg: dict[str, Any], name: str, default: int | None = None) -> int:
    value = cfg.get(name, default)
    if value is None:
        raise ValueError(f"config has no {name!r}; expected a positive integer there")
    return checks.positive_int(f"config.{name}", value)


def check_sizes(cfg: dict[str, Any]) -> None:
    """The config's sizes, each (where given) a positive integer within :data:`SIZES`, and the
    query heads a multiple of the KV heads; before anything is built from them."""
    for name, (most, what) in SIZES.items():
        if cfg.get(name) is not None and _int(cfg, name) > most:
            raise ValueError(f"config.{name}={cfg[name]!r} is not allowed; expected at most {most} {what}")
    heads, kv = cfg.get("num_attention_heads"), cfg.get("num_key_value_heads")
    if heads is not None and kv is not None and _int(cfg, "num_attention_heads") % _int(cfg, "num_key_value_heads"):
        raise ValueError(
            f"config.num_key_value_heads={kv!r} is not allowed: it must divide num_attention_heads={heads!r} "
            "(each KV head serves a whole group of query heads)"
        )


def head_dims(cfg: dict[str, Any]) -> tuple[int, int]:
    """``(qk_dim, rotary_dim)``: the q.k dimension the softmax scale refers to, and the rotated part."""
    if cfg.get("qk_rope_head_dim") is not None and cfg.get("qk_nope_head_dim") is not None:  # MLA: [nope | rope]
        rot = _int(cfg, "qk_rope_head_dim")
        return _int(cfg, "qk_nope_head_dim") + rot, rot
    if cfg.get("qk_rope_head_dim") is not None:  # DeepSeek-V4: head_dim, its last qk_rope_head_dim rotated
        return _int(cfg, "head_dim"), _int(cfg, "qk_rope_head_dim")
    heads = _int(cfg, "num_attention_heads")
    hd = cfg["head_dim"] if cfg.get("head_dim") is not None else _int(cfg, "hidden_size") // heads
    qk = checks.positive_int("config.head_dim", hd)
    prf = _rope_dicts(cfg).get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    factor = checks.positive("config.partial_rotary_factor", prf if prf is not None else 1.0)
    return qk, int(qk * min(factor, 1.0))


def _rope_dicts(cfg: dict[str, Any]) -> dict[str, Any]:
    rp = cfg.get("rope_parameters")
    if rp is None:
        return {}
    if not isinstance(rp, dict):
        raise ValueError(f"config.rope_parameters={rp!r} is not allowed; expected an object")
    return rp


def layer_kinds(cfg: dict[str, Any]) -> list[tuple[str, bool]]:
    """``(layer_type, uses_rope)`` per layer: ``layer_types`` (or Gemma's ``sliding_window_pattern``),
    and Llama 4's ``no_rope_layers`` (0 = NoPE; default every ``no_rope_layer_interval``-th layer)."""
    n = _int(cfg, "num_hidden_layers")
    types = cfg.get("layer_types")
    if types is None and cfg.get("model_type") == "gemma3_text":
        pattern = _int(cfg, "sliding_window_pattern", 6)
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    types = types or ["full_attention"] * n
    if len(types) != n or not all(isinstance(t, str) for t in types):
        raise ValueError(f"config.layer_types has {len(types)} entries; expected {n} strings (num_hidden_layers)")
    uses = [True] * n
    if cfg.get("model_type") == "llama4_text":
        interval = _int(cfg, "no_rope_layer_interval", 4)
        uses = [bool(u) for u in (cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)])]
        if len(uses) != n:
            raise ValueError(f"config.no_rope_layers has {len(uses)} entries; expected {n} (num_hidden_layers)")
    return list(zip(types, uses, strict=True))


def rope_for(cfg: dict[str, Any], layer_type: str) -> dict[str, Any]:
    """The RoPE parameters of one layer type: ``rope_type``, ``rope_theta`` and the type's own keys."""
    rp = _rope_dicts(cfg)
    if isinstance(rp.get(layer_type), dict):
        params = dict(rp[layer_type])
    elif rp and not any(isinstance(v, dict) for v in rp.values()):
        params = dict(rp)
    else:
        scaling = cfg.get("rope_scaling") or {}
        if not isinstance(scaling, dict):
            raise ValueError(f"config.rope_scaling={scaling!r} is not allowed; expected an object or null")
        theta = cfg.get("rope_theta", 10000.0)
        if layer_type == "sliding_attention" and cfg.get("model_type") in SCALING_ON_FULL_ONLY:
            return {"rope_type": "default", "rope_theta": cfg.get("rope_local_base_freq", theta)}
        params = {"rope_theta": theta, **scaling}
    params["rope_type"] = params.pop("type", None) or params.get("rope_type") or "default"
    params.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    checks.choice("config rope_type", params["rope_type"], ROPE_TYPES)
    return params


def _source(cfg: dict[str, Any], layer_type: str) -> str:
    """Where a layer type's RoPE parameters are read from, as the config spells it."""
    rp = cfg.get("rope_parameters")
    if isinstance(rp, dict) and isinstance(rp.get(layer_type), dict):
        return f"config.rope_parameters.{layer_type}"
    return "config.rope_parameters" if rp else "config.rope_scaling"


def _l0(cfg: dict[str, Any], params: dict[str, Any]) -> int:
    """L0, the trained length: ``original_max_position_embeddings`` (at most the context,
    ``max_position_embeddings``), else ``max_position_embeddings``."""
    name = "original_max_position_embeddings"
    value = params.get(name) if params.get(name) is not None else cfg.get(name)
    if value is None:
        return _int(cfg, "max_position_embeddings")
    l0 = checks.positive_int(name, value)
    most = cfg.get("max_position_embeddings")
    if isinstance(most, int) and l0 > most:
        raise ValueError(
            f"{name}={value!r} is not allowed; expected at most max_position_embeddings={most} (the trained length "
            "cannot exceed the context the scaling extends it to)"
        )
    return l0


def base_length(cfg: dict[str, Any], params: dict[str, Any]) -> int:
    """The length a RoPE scaling starts from: L0 (:func:`_l0`), except for dynamic NTK, which
    scales from ``max_position_embeddings`` (its only base length: transformers 5's
    ``_compute_dynamic_ntk_parameters`` and its reset below ``original_max_seq_len``, vLLM's
    ``DynamicNTKScalingRotaryEmbedding``); ``original_max_position_embeddings`` is not one of its
    keys (transformers' ``_validate_dynamic_rope_parameters`` takes ``factor`` and ``rope_theta``)."""
    if params.get("rope_type") == "dynamic":
        return _int(cfg, "max_position_embeddings")
    return _l0(cfg, params)


def ignored(cfg: dict[str, Any]) -> list[str]:
    """Config values no engine reads, each as a line saying why (the audit prints them)."""
    params = rope_for(cfg, "full_attention")
    name = "original_max_position_embeddings"
    value = params.get(name) if params.get(name) is not None else cfg.get(name)
    if params["rope_type"] == "dynamic" and value is not None:
        return [
            f"config {name}={value!r} is ignored: dynamic NTK scales from max_position_embeddings="
            f"{cfg.get('max_position_embeddings')!r} (transformers and vLLM read no other base length)"
        ]
    return []


def _factor(cfg: dict[str, Any], params: dict[str, Any]) -> float:
    if params.get("factor") is not None:
        return checks.within("factor", params["factor"], 1.0, MAX_FACTOR, " (a context 10,000 times L0 at most)")
    return _int(cfg, "max_position_embeddings") / _l0(cfg, params)


def rope_arguments(cfg: dict[str, Any], params: dict[str, Any], position: int) -> dict[str, Any]:
    """The keyword arguments of ``ops.rope``'s function for these parameters at ``position``."""
    kind = params["rope_type"]
    if kind == "default":
        return {}
    if kind in ("linear", "dynamic"):
        extra = (
            {"max_position_embeddings": base_length(cfg, params), "seq_len": position + 1} if kind == "dynamic" else {}
        )
        return {"factor": _factor(cfg, params), **extra}
    keys = {
        "yarn": ("beta_fast", "beta_slow", "truncate", "mscale", "mscale_all_dim", "attention_factor"),
        "llama3": ("low_freq_factor", "high_freq_factor"),
        "longrope": ("short_factor", "long_factor", "attention_factor"),
    }[kind]
    out = {k: params[k] for k in keys if params.get(k) is not None}
    out["original_max_position_embeddings"] = _l0(cfg, params)
    out["factor"] = _factor(cfg, params)
    if kind == "longrope":
        out["seq_len"] = position + 1
    return out


def rope_at(cfg: dict[str, Any], params: dict[str, Any], rotary_dim: int, position: int) -> tuple[torch.Tensor, float]:
    """``(inv_freq [rotary_dim/2], attention_factor)`` of ``params`` at ``position``, from ``ops.rope``."""
    base = checks.positive("rope_theta", params["rope_theta"])
    try:
        return rope.compute_inv_freq(params["rope_type"], rotary_dim, base, **rope_arguments(cfg, params, position))
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
    schedule: tuple[str, dict[str, float]] | None = None
    config: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def rope_at(self, position: int) -> tuple[torch.Tensor | None, float]:
        """``(inv_freq or None for NoPE, attention factor on cos/sin)`` at ``position``."""
        if self.rope is None:
            return None, 1.0
        return rope_at(self.config, self.rope, self.rotary_dim, position)

    def schedule_at(self, position: int) -> float:
        """The position schedule's factor on q (1 without one)."""
        if self.schedule is None:
            return 1.0
        kind, p = self.schedule
        if kind == "llama4":
            pos = torch.tensor([position], dtype=torch.float64)  # [1]
            return float(Llama4(p["floor_scale"], p["attn_scale"])(0, 1, pos, pos + 1)[0, 0])
        return mistral_position_scale(position, p["beta"], int(p["original_max_position_embeddings"]))

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


def _scale(cfg: dict[str, Any], params: dict[str, Any] | None, qk_dim: int) -> tuple[float, str]:
    """The softmax scale relative to ``1/sqrt(qk_dim)``, with its rule."""
    if cfg.get("query_pre_attn_scalar") is not None:
        scalar = checks.positive("config.query_pre_attn_scalar", cfg["query_pre_attn_scalar"])
        return math.sqrt(qk_dim / scalar), f"sqrt(d_qk / query_pre_attn_scalar) = sqrt({qk_dim}/{scalar:g}) (Gemma)"
    if cfg.get("model_type") in DEEPSEEK_TYPES and params and params.get("mscale_all_dim"):
        s = _factor(cfg, params)
        all_dim = checks.positive("mscale_all_dim", params["mscale_all_dim"])
        rule = f"(0.1 * {all_dim:g} ln {s:g} + 1)^2 (DeepSeek-V2 arXiv:2405.04434 mscale_all_dim)"
        return yarn_mscale(s, all_dim) ** 2, rule
    return 1.0, "1 (softmax scale 1/sqrt(d_qk))"


def _schedule(cfg: dict[str, Any], params: dict[str, Any] | None, uses_rope: bool) -> Any:
    if cfg.get("model_type") == "llama4_text" and cfg.get("attn_temperature_tuning") and not uses_rope:
        fs = checks.positive("config.floor_scale", cfg.get("floor_scale", 8192))
        return "llama4", {
            "floor_scale": fs,
            "attn_scale": checks.positive("config.attn_scale", cfg.get("attn_scale", 0.1)),
        }
    if params and params.get("llama_4_scaling_beta") is not None:
        beta = checks.positive("llama_4_scaling_beta", params["llama_4_scaling_beta"])
        return "mistral", {"beta": beta, "original_max_position_embeddings": float(_l0(cfg, params))}
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
    cfg = text_config(config)
    if cfg.get("rope_parameters") is not None and cfg.get("rope_scaling") is not None:
        raise ValueError(
            "config has both rope_parameters and rope_scaling: which one an engine reads differs (transformers 5 "
            "reads rope_parameters, older engines rope_scaling); keep one"
        )
    check_sizes(cfg)
    qk_dim, rotary_dim = head_dims(cfg)
    if rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(f"the rotary dimension is {rotary_dim}; expected an even integer >= 2 (head_dim x partial)")
    found: dict[tuple[str, bool], list[int]] = {}
    for i, kind in enumerate(layer_kinds(cfg)):
        found.setdefault(kind, []).append(i)
    out = []
    for (layer_type, uses_rope), layers in found.items():
        params = rope_for(cfg, layer_type)
        ratio, rule = _scale(cfg, params, qk_dim)
        name = layer_type + ("" if uses_rope else " NoPE")
        group = Group(name, tuple(layers), params if uses_rope else None, qk_dim, rotary_dim, ratio, rule,
                      _schedule(cfg, params, uses_rope), cfg)  # fmt: skip
        try:
            group.rope_at(0)  # every value checked before any work
        except ValueError as exc:
            raise ValueError(f"{_source(cfg, layer_type)}.{exc}") from None
        _check_multiplier(cfg, group, _source(cfg, layer_type))
        out.append(group)
    return out


def primary(found: list[Group]) -> Group:
    """The group the top-level figures describe: a position-dependent one, else full attention."""
    for g in found:
        if g.schedule is not None:
            return g
    return next((g for g in found if g.rope is not None and g.name.startswith("full")), found[0])


def default_positions(config: dict[str, Any]) -> tuple[int, ...]:
    """Positions where the figures change: 0, 1, around L0 and 2 L0, the schedules' steps, the end."""
    cfg = text_config(config)
    found = groups(config)  # every value checked first, each error naming its field
    params = rope_for(cfg, "full_attention")
    l0 = base_length(cfg, params) if params["rope_type"] != "default" else _int(cfg, "max_position_embeddings")
    end = _int(cfg, "max_position_embeddings") - 1
    points = {0, 1, l0 - 1, l0, 2 * l0 - 1, 2 * l0, end}
    for g in found:
        if g.schedule and g.schedule[0] == "llama4":
            fs = int(g.schedule[1]["floor_scale"])
            points |= {fs - 2, fs - 1, 2 * fs - 1, 4 * fs - 1}
        elif g.schedule:
            l0s = int(g.schedule[1]["original_max_position_embeddings"])
            points |= {l0s - 1, l0s, 2 * l0s, 4 * l0s}
    return tuple(sorted(p for p in points if 0 <= p <= max(end, 1)))
