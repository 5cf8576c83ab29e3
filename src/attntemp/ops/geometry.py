"""A model's attention geometry, read once from its config: :meth:`ModelGeometry.from_config`.

This module is the one reader of the config fields below (``tests/test_rules.py`` holds that for
``max_position_embeddings`` and ``original_max_position_embeddings``); the rest of attntemp asks a
:class:`ModelGeometry`, computed once and handed down. A config is a ``config.json`` dict (its
``text_config`` first, for a multimodal model such as Gemma 3) or a transformers config object (its
``get_text_config()``, each field read as an attribute, so aliases such as GPT-2's ``n_positions``
count). Fields read, by the geometry field they make:

* ``model_type``: ``model_type`` (Kimi K2's ``kimi_k2`` as ``deepseek_v3``, :data:`ALIASES`);
* ``num_layers``, ``num_heads``, ``num_kv_heads``: ``num_hidden_layers``, ``num_attention_heads``,
  ``num_key_value_heads`` (default: one per query head);
* ``head_dim``, ``rotary_dim``, ``rotary_fraction``: ``head_dim`` (else ``hidden_size /
  num_attention_heads``), ``partial_rotary_factor`` (in ``rope_parameters``, else at the top level;
  at most 1); MLA's ``qk_nope_head_dim + qk_rope_head_dim`` (DeepSeek-V2/V3), DeepSeek-V4's
  ``qk_rope_head_dim`` rotated out of ``head_dim``;
* ``max_positions``: ``max_position_embeddings``;
* ``trained_length`` (L0): ``original_max_position_embeddings`` of the full-attention layers' RoPE
  parameters, else the top-level one (Phi-3), for a scaled RoPE; ``max_position_embeddings`` for
  plain RoPE (a top-level ``original_max_position_embeddings`` beside it means nothing to engines);
* ``layer_types``, ``rope_layers``, ``sliding_window``: ``layer_types`` (else Gemma 3's
  ``sliding_window_pattern`` or DeepSeek-V4's ``compress_ratios``, else every layer full), Llama 4's
  ``no_rope_layers`` / ``no_rope_layer_interval`` (NoPE layers), ``sliding_window``;
* ``rope``, ``rope_theta``, ``local_rope_theta``: ``rope_parameters`` (per layer type or not) or the
  legacy ``rope_scaling`` + ``rope_theta`` (which Gemma 3 and OLMo 3 apply to full-attention layers
  only; their sliding layers keep plain RoPE at ``rope_local_base_freq``; DeepSeek-V4 applies it at
  ``compress_rope_theta``, default 160000, and its sliding-only layers keep plain RoPE at ``rope_theta``).

Bad values raise ``ValueError`` naming the field, the value and what is allowed, before any work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..utils import checks

# Kimi K2 / K2.5 name their text model kimi_k2; transformers' KimiK25Config runs it as deepseek_v3
ALIASES = {"kimi_k2": "deepseek_v3"}
SCALING_ON_FULL_ONLY = ("gemma3_text", "olmo3")  # legacy rope_scaling applies to full_attention layers only
# DeepSeek-V4 (DeepSeek's inference code, transformers' DeepseekV4Config): its legacy rope_scaling runs on
# the compressing layers at compress_rope_theta; its sliding-only layers keep plain RoPE at rope_theta
COMPRESS_THETA = {"deepseek_v4": ("compress_rope_theta", 160000.0)}  # model_type -> (field, its default)
# and its older configs give each layer's type as compress_ratios: 0 none (sliding only), 4 CSA, 128 HCA
COMPRESS_RATIO_TYPES = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")
FULL = "full_attention"
L0_KEY = "original_max_position_embeddings"  # the trained length a RoPE dict states (rope_params names it)
CONTEXT_KEY = "max_position_embeddings"  # the context a config (or longrope's dict) states
MAX_ROPE_THETA = 1e12  # the largest RoPE base a config may give (as the spec bounds its factors)
SIZES = {  # the largest a config may give (the largest released models are well inside), checked up front
    "num_hidden_layers": (1024, "layers"),
    "hidden_size": (65536, "hidden units"),
    "num_attention_heads": (1024, "heads"),
    "num_key_value_heads": (1024, "heads"),
    "head_dim": (4096, "dimensions"),
    "max_position_embeddings": (2**31 - 1, "positions"),
}
CONFIG_FIELDS = (  # what is read off a config object, by attribute (transformers' attribute_map applies)
    "model_type",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_size",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "partial_rotary_factor",
    "max_position_embeddings",
    "original_max_position_embeddings",
    "layer_types",
    "sliding_window",
    "sliding_window_pattern",
    "no_rope_layers",
    "no_rope_layer_interval",
    "rope_parameters",
    "rope_theta",
    "rope_local_base_freq",
)


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The text part of a config dict (``text_config`` of a multimodal one), checked to be an
    object; a text ``model_type`` another architecture's code runs under its name (:data:`ALIASES`)."""
    if not isinstance(config, dict):
        raise ValueError(f"config={type(config).__name__} is not allowed; expected a JSON object")
    text = config.get("text_config", config)
    if not isinstance(text, dict):
        raise ValueError(f"config.text_config={text!r} is not allowed; expected a JSON object")
    alias = ALIASES.get(str(text.get("model_type")))
    return text if alias is None else {**text, "model_type": alias}


def config_dict(config: Any) -> dict[str, Any]:
    """The text config as a dict: of a ``config.json`` dict, or of a transformers config object
    (its text config's :data:`CONFIG_FIELDS`; ``rope_scaling`` only where it has no ``rope_parameters``,
    of which transformers 5 makes it an alias)."""
    if isinstance(config, Mapping):
        return _text_config(dict(config))
    if not hasattr(config, "model_type"):  # neither a dict nor a transformers config
        return _text_config(config)
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    fields = CONFIG_FIELDS if getattr(cfg, "rope_parameters", None) is not None else (*CONFIG_FIELDS, "rope_scaling")
    return _text_config({k: getattr(cfg, k) for k in fields if getattr(cfg, k, None) is not None})


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


def _rope_dicts(cfg: dict[str, Any]) -> dict[str, Any]:
    rp = cfg.get("rope_parameters")
    if rp is None:
        return {}
    if not isinstance(rp, dict):
        raise ValueError(f"config.rope_parameters={rp!r} is not allowed; expected an object")
    return rp


def _rotary_fraction(cfg: dict[str, Any]) -> float:
    prf = _rope_dicts(cfg).get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    return min(checks.positive("config.partial_rotary_factor", prf if prf is not None else 1.0), 1.0)


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
    return qk, int(qk * _rotary_fraction(cfg))


def layer_kinds(cfg: dict[str, Any]) -> list[tuple[str, bool]]:
    """``(layer_type, uses_rope)`` per layer: ``layer_types`` (or Gemma's ``sliding_window_pattern``),
    and Llama 4's ``no_rope_layers`` (0 = NoPE; default every ``no_rope_layer_interval``-th layer)."""
    n = _int(cfg, "num_hidden_layers")
    types = cfg.get("layer_types")
    if types is None and cfg.get("model_type") == "gemma3_text":
        pattern = _int(cfg, "sliding_window_pattern", 6)
        types = ["sliding_attention" if (i + 1) % pattern else FULL for i in range(n)]
    if types is None and cfg.get("model_type") in COMPRESS_THETA and cfg.get("compress_ratios") is not None:
        types = _compress_types(cfg["compress_ratios"])
    if types is not None and not isinstance(types, (list, tuple)):  # a string would count its characters
        raise ValueError(f"config.layer_types={types!r} is not allowed; expected a list of {n} strings (one a layer)")
    types = types or [FULL] * n
    if len(types) != n or not all(isinstance(t, str) for t in types):
        raise ValueError(f"config.layer_types has {len(types)} entries; expected {n} strings (num_hidden_layers)")
    uses = [True] * n
    if cfg.get("model_type") == "llama4_text":
        interval = _int(cfg, "no_rope_layer_interval", 4)
        uses = [bool(u) for u in (cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)])]
        if len(uses) != n:
            raise ValueError(f"config.no_rope_layers has {len(uses)} entries; expected {n} (num_hidden_layers)")
    return list(zip(types, uses, strict=True))


def _compress_types(ratios: Any) -> list[str]:
    """DeepSeek-V4's ``compress_ratios`` as layer types (:data:`COMPRESS_RATIO_TYPES`)."""
    if not isinstance(ratios, (list, tuple)) or any(r not in COMPRESS_RATIO_TYPES for r in ratios):
        allowed = ", ".join(map(str, COMPRESS_RATIO_TYPES))
        raise ValueError(
            f"config.compress_ratios={ratios!r} is not allowed; expected a list of {allowed} (one a layer)"
        )
    return [COMPRESS_RATIO_TYPES[r] for r in ratios]


def layer_rope(cfg: dict[str, Any], layer_type: str) -> dict[str, Any]:
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
        theta, model_type = cfg.get("rope_theta", 10000.0), cfg.get("model_type")
        if layer_type == "sliding_attention" and model_type in (*SCALING_ON_FULL_ONLY, *COMPRESS_THETA):
            return {"rope_type": "default", "rope_theta": cfg.get("rope_local_base_freq", theta)}
        field, default = COMPRESS_THETA.get(str(model_type), ("rope_theta", theta))
        params = {"rope_theta": cfg.get(field, default), **scaling}
    params["rope_type"] = params.pop("type", None) or params.get("rope_type") or "default"
    params.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    checks.choice("config rope_type", params["rope_type"], ROPE_TYPES)
    return params


def check_theta(value: Any, name: str = "rope_theta") -> float:
    """A RoPE base: a finite number in (1, :data:`MAX_ROPE_THETA`] (released models use 1e4 to 1e8;
    at 1 or below every frequency is 1 or grows, past the bound positions no longer turn)."""
    theta = checks.positive(name, value)
    if not 1.0 < theta <= MAX_ROPE_THETA:
        raise ValueError(f"{name}={value!r} is not allowed; expected a number in (1, {MAX_ROPE_THETA:g}]")
    return theta


def _theta_source(cfg: dict[str, Any], layer_type: str) -> str:
    """The field a layer type's ``rope_theta`` is read from, as the config spells it."""
    rp = _rope_dicts(cfg)
    inner = rp.get(layer_type)
    stated = inner if isinstance(inner, dict) else rp if rp else cfg.get("rope_scaling")
    if isinstance(stated, dict) and "rope_theta" in stated:
        return f"{rope_source(cfg, layer_type)}.rope_theta"
    model_type = cfg.get("model_type")
    if layer_type == "sliding_attention" and model_type in (*SCALING_ON_FULL_ONLY, *COMPRESS_THETA):
        return "config.rope_local_base_freq" if "rope_local_base_freq" in cfg else "config.rope_theta"
    legacy = COMPRESS_THETA.get(str(model_type), ("rope_theta",)) if not rp else ("rope_theta",)
    return f"config.{legacy[0]}"


def rope_source(cfg: dict[str, Any], layer_type: str) -> str:
    """Where a layer type's RoPE parameters are read from, as the config spells it."""
    rp = cfg.get("rope_parameters")
    if isinstance(rp, dict) and isinstance(rp.get(layer_type), dict):
        return f"config.rope_parameters.{layer_type}"
    return "config.rope_parameters" if rp else "config.rope_scaling"


def stated_l0(params: Mapping[str, Any] | None) -> Any:
    """The trained length a RoPE parameters dict (a config's, a spec's ``rope``) or a position
    schedule's parameters state: their ``original_max_position_embeddings`` as given (unchecked),
    or None."""
    return None if params is None else params.get("original_max_position_embeddings")


def stated_context(params: Mapping[str, Any] | None) -> Any:
    """A config dict's (or vLLM ``--hf-overrides``') ``max_position_embeddings`` as given (unchecked), or None."""
    return None if params is None else params.get("max_position_embeddings")


def stated_positions(config: Any) -> Any:
    """A transformers config object's ``max_position_embeddings`` as it stands (None where it has
    none), unchecked: what a caller saves in order to put it back."""
    return getattr(config, "max_position_embeddings", None)


@dataclass(frozen=True)
class ModelGeometry:
    """What a config says about a model's attention (the module doc lists the fields read)."""

    model_type: str | None
    num_layers: int
    num_heads: int  # query heads
    num_kv_heads: int
    head_dim: int  # the q.k dimension the softmax scale refers to
    rotary_dim: int  # the rotated part of it
    rotary_fraction: float  # partial_rotary_factor
    max_positions: int | None  # max_position_embeddings (None: the config does not say)
    trained_length: int | None  # L0 of the full-attention layers (None: the config does not say)
    layer_types: tuple[str, ...]  # per layer: full_attention, sliding_attention, ...
    rope_layers: tuple[bool, ...]  # per layer: False for NoPE layers (Llama 4)
    sliding_window: int | None
    rope: Mapping[str, Mapping[str, Any]]  # layer type -> its RoPE parameters (rope_type, rope_theta, ...)
    top_l0: int | None = None  # a top-level original_max_position_embeddings (Phi-3), checked

    @classmethod
    def from_config(cls, config: Any) -> ModelGeometry:
        """The geometry of ``config`` (a ``config.json`` dict or a transformers config object)."""
        cfg = config_dict(config)
        check_sizes(cfg)
        heads = _int(cfg, "num_attention_heads")
        qk_dim, rotary_dim = head_dims(cfg)
        kinds = layer_kinds(cfg)
        types = tuple(t for t, _ in kinds)
        rope = {t: layer_rope(cfg, t) for t in dict.fromkeys((FULL, *types))}
        top, window = cfg.get("original_max_position_embeddings"), cfg.get("sliding_window")
        geometry = cls(
            model_type=cfg.get("model_type"),
            num_layers=len(kinds),
            num_heads=heads,
            num_kv_heads=_int(cfg, "num_key_value_heads", heads),
            head_dim=qk_dim,
            rotary_dim=rotary_dim,
            rotary_fraction=_rotary_fraction(cfg),
            max_positions=None if cfg.get("max_position_embeddings") is None else _int(cfg, "max_position_embeddings"),
            trained_length=None,
            layer_types=types,
            rope_layers=tuple(u for _, u in kinds),
            sliding_window=None if window is None else checks.positive_int("config.sliding_window", window),
            rope=rope,
            top_l0=None if top is None else checks.positive_int("config.original_max_position_embeddings", top),
        )
        for layer_type, params in rope.items():  # errors name where the config gives the value
            check_theta(params["rope_theta"], _theta_source(cfg, layer_type))
            try:
                trained = geometry.max_positions if params["rope_type"] == "default" else geometry.l0(params)
            except ValueError as exc:
                raise ValueError(f"{rope_source(cfg, layer_type)}.{exc}") from None
            geometry = replace(geometry, trained_length=trained) if layer_type == FULL else geometry
        return geometry

    @property
    def rope_theta(self) -> float:
        """The full-attention layers' RoPE base (the engines' default 10000 where the config states none)."""
        return float(self.rope[FULL]["rope_theta"])

    @property
    def local_rope_theta(self) -> float | None:
        """The sliding-window layers' RoPE base (Gemma 3's local base), None without such layers."""
        local = self.rope.get("sliding_attention")
        return None if local is None else float(local["rope_theta"])

    def rope_of(self, layer_type: str = FULL) -> dict[str, Any]:
        """A copy of ``layer_type``'s RoPE parameters (``rope_type``, ``rope_theta``, the type's own keys)."""
        return dict(self.rope[layer_type])

    def positions(self) -> int:
        """``max_positions``, raising where the config does not say."""
        if self.max_positions is None:
            raise ValueError("config has no 'max_position_embeddings'; expected a positive integer there")
        return self.max_positions

    def l0(self, params: Mapping[str, Any]) -> int:
        """L0 of a layer type's RoPE ``params``: their ``original_max_position_embeddings``, else the
        top-level one, at most the context (``max_position_embeddings``); else the context."""
        name = "original_max_position_embeddings"
        value = stated_l0(params) if stated_l0(params) is not None else self.top_l0
        if value is None:
            return self.positions()
        l0 = checks.positive_int(name, value)
        if self.max_positions is not None and l0 > self.max_positions:
            raise ValueError(
                f"{name}={value!r} is not allowed; expected at most max_position_embeddings={self.max_positions} "
                "(the trained length cannot exceed the context the scaling extends it to)"
            )
        return l0

    def base_length(self, params: Mapping[str, Any]) -> int:
        """The length a RoPE scaling starts from: L0 (:meth:`l0`), except for dynamic NTK, which
        scales from ``max_position_embeddings`` (its only base length: transformers 5's
        ``_compute_dynamic_ntk_parameters`` and its reset below ``original_max_seq_len``, vLLM's
        ``DynamicNTKScalingRotaryEmbedding``); ``original_max_position_embeddings`` is not one of its
        keys (transformers' ``_validate_dynamic_rope_parameters`` takes ``factor`` and ``rope_theta``)."""
        if params.get("rope_type") == "dynamic":
            return self.positions()
        return self.l0(params)

    def ignored_l0(self) -> Any:
        """The ``original_max_position_embeddings`` the full-attention RoPE states where no engine
        reads it (dynamic NTK), else None."""
        params = self.rope[FULL]
        value = stated_l0(params) if stated_l0(params) is not None else self.top_l0
        return value if params["rope_type"] == "dynamic" else None
