"""A tiny proxy of a model from its ``config.json`` alone, and what transformers does to its logits.

:func:`build_proxy` keeps everything that shapes the attention logits (RoPE parameters, head_dim,
partial rotary factor, the softmax-scale fields, layer types, NoPE layers, Llama 4's temperature
tuning) and shrinks the rest: two heads, one layer per kind of layer, small MLPs and experts, a
small vocabulary, random weights, float64, built offline with ``from_config``.

:func:`measure_proxy` reads, per proxy layer and query position p, what transformers itself applies:

* the rotary module's output at p: the attention factor ``af(p) = sqrt(cos^2 + sin^2)`` and the
  inverse frequencies ``atan2(sin, cos)`` at position 1 (in the regime of a sequence reaching p);
* one query token at p through the layer's attention module, over a cache that says p tokens came
  before (Llama 4 counts positions from the cache, Mistral 3 from ``position_ids``), recording the
  ``query``, ``key`` and ``scaling`` its attention function receives. q and k at the same position
  rotate alike, so ``logit(p) / logit(0)`` holds what changes with p (``af(p)^2 / af(0)^2`` and any
  schedule on q) and ``scaling * sqrt(d_qk)`` the softmax-scale rule.

The effective multiplier is ``m(p) = af(0)^2 * scaling * sqrt(d_qk) * logit(p) / logit(0)`` (without
``af(0)^2`` on a layer whose q does not rotate). Schedules are 1 at position 0 by their definitions.
"""

from __future__ import annotations

import copy
import difflib
import inspect
import math
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from ..ops import geometry
from ..utils import checks

AUDIT_PROBE = "attntemp_audit_probe"
DROP = ("_source", "architectures", "auto_map", "quantization_config", "text_config", "torch_dtype", "dtype")
SMALL = {  # sizes that do not touch the logits' scale or rotation
    "intermediate_size": 32,
    "intermediate_size_mlp": 32,
    "moe_intermediate_size": 16,
    "num_local_experts": 2,
    "n_routed_experts": 2,
    "n_shared_experts": 1,
    "num_experts_per_tok": 1,
    "experts_per_token": 1,
    "n_group": 1,
    "topk_group": 1,
    "kv_lora_rank": 32,
    "first_k_dense_replace": 0,
}


def proxy_config(
    config: dict[str, Any], vocab_size: int = 128, initializer_range: float | None = None, full_depth: bool = False
) -> tuple[dict[str, Any], list[int]]:
    """The shrunk text config's fields and the original index of each kept layer: the first of each
    kind, or with ``full_depth`` the model's first layers up to the first of its last kind (the start
    of its layer pattern, which engines such as llama.cpp's Gemma 3 hard-code rather than read; a
    deeper random proxy amplifies float32 rounding into the logits). ``hidden_size /
    num_attention_heads`` keeps the model's ratio where it is an integer."""
    cfg = geometry.config_dict(config)
    kinds = geometry.layer_kinds(cfg)
    check_layer_types(kinds)
    keep = [i for i, k in enumerate(kinds) if k not in kinds[:i]]
    keep = list(range(keep[-1] + 1)) if full_depth else keep
    qk_dim, _ = geometry.head_dims(cfg)
    fields = {k: copy.deepcopy(v) for k, v in cfg.items() if k not in DROP}
    fields.update({k: v for k, v in SMALL.items() if k in cfg})  # the rest: build_proxy, where the class has them
    if cfg.get("q_lora_rank"):
        fields["q_lora_rank"] = 32
    heads = 2
    fields.update(num_attention_heads=heads, num_key_value_heads=heads if "qk_rope_head_dim" in cfg else 1)
    if "qk_rope_head_dim" not in cfg:
        fields["head_dim"] = qk_dim
    ratio = cfg.get("hidden_size", 0) // cfg.get("num_attention_heads", 1)
    exact = ratio and ratio * cfg["num_attention_heads"] == cfg["hidden_size"] and ratio % 8 == 0  # aligned rows
    fields.update(hidden_size=heads * (ratio if exact else qk_dim), num_hidden_layers=len(keep), vocab_size=vocab_size)
    fields.update(layer_types=[kinds[i][0] for i in keep], tie_word_embeddings=False)
    if cfg.get("model_type") == "llama4_text":
        fields.update(no_rope_layers=[int(kinds[i][1]) for i in keep])
    for token in ("pad_token_id", "bos_token_id", "eos_token_id"):
        fields[token] = 0 if token != "eos_token_id" else 1
    if initializer_range is not None:
        fields["initializer_range"] = checks.positive("initializer_range", initializer_range)
    return fields, keep


def check_layer_types(kinds: list[tuple[str, bool]]) -> None:
    """Each layer type one transformers knows (its ``ALLOWED_LAYER_TYPES`` and legacy names)."""
    import transformers
    from transformers import configuration_utils as cu

    known = (*cu.ALLOWED_LAYER_TYPES, *getattr(cu, "_LEGACY_LAYER_TYPE_REMAP", {}))
    for i, (kind, _) in enumerate(kinds):
        if kind not in known:
            close = difflib.get_close_matches(kind, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"config.layer_types[{i}]={kind!r} is not allowed: not a layer type transformers "
                f"{transformers.__version__} knows ({', '.join(cu.ALLOWED_ATTN_LAYER_TYPES[:3])}, ...){hint}"
            )


def build_proxy(
    config: dict[str, Any],
    vocab_size: int = 128,
    seed: int = 0,
    initializer_range: float | None = None,
    full_depth: bool = False,
) -> tuple[Any, list[int]]:
    """The proxy model (float64, random weights, eval mode) and the original index of each of its layers."""
    import transformers

    fields, keep = proxy_config(config, vocab_size, initializer_range, full_depth)
    model_type = str(fields.get("model_type"))
    if model_type not in transformers.CONFIG_MAPPING or causal_lm_name(model_type) is None:
        mapping = transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        known = sorted(k for k in mapping if k in transformers.CONFIG_MAPPING)
        close = difflib.get_close_matches(str(model_type), known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"config.model_type={model_type!r} is not a causal LM architecture transformers "
            f"{transformers.__version__} has offline ({len(known)} are{hint}), so no proxy can be built"
        )
    _register_probe()
    cls = transformers.CONFIG_MAPPING[model_type]
    defaults = cls()  # sizes the class has but the config.json left to its defaults (DeepSeek's experts)
    fields.update({k: v for k, v in SMALL.items() if k not in fields and hasattr(defaults, k)})
    named = "layer_types" in geometry.config_dict(config)
    hf_config = class_config(cls, {k: v for k, v in fields.items() if k != "model_type"}, named)
    torch.manual_seed(seed)
    model = causal_lm_class(model_type)._from_config(hf_config, attn_implementation="eager", dtype=torch.float64)
    return model.eval(), keep


def causal_lm_name(model_type: str) -> str | None:
    """The name of transformers' causal LM class of ``model_type``: the one its causal LM auto mapping
    names, else a ``...ForCausalLM`` another auto mapping names (Mistral 4's sits only in the
    pretraining and multimodal ones), else None."""
    import transformers
    from transformers.models.auto import modeling_auto

    name = modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    for other in ("MODEL_FOR_PRETRAINING_MAPPING_NAMES", "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES"):
        found = getattr(modeling_auto, other, {}).get(model_type)
        name = name or (found if isinstance(found, str) and found.endswith("ForCausalLM") else None)
    return name if name and hasattr(transformers, name) else None


def causal_lm_class(model_type: str) -> Any:
    """transformers' causal LM class of ``model_type`` (see :func:`causal_lm_name`)."""
    import transformers

    return getattr(transformers, str(causal_lm_name(model_type)))


def class_config(cls: Any, fields: dict[str, Any], named: bool) -> Any:
    """``cls(**fields)``. Where the config names no ``layer_types`` (attntemp reads each layer as
    ``full_attention``) and the class refuses that type (DeepSeek-V4 allows only its own), the layer
    types the class gives a model of that depth stand, as they would for the config.json itself."""
    from huggingface_hub.errors import StrictDataclassError  # a transformers config class refusing a field

    try:
        return cls(**fields)
    except StrictDataclassError:
        if named or "layer_types" not in fields:
            raise
        return cls(**{k: v for k, v in fields.items() if k != "layer_types"})


# ----------------------------------------------------------------------------- the probe
_SEEN: list[dict[str, Any]] = []


def _probe(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """An attention function that records q, k and the scale it is given; returns plain attention."""
    _SEEN.append({"query": query.detach(), "key": key.detach(), "scaling": float(scaling)})
    groups = query.shape[1] // key.shape[1]
    k = key.repeat_interleave(groups, dim=1)  # [B, Hq, S, D]
    v = value.repeat_interleave(query.shape[1] // value.shape[1], dim=1)  # [B, Hq, S, Dv]
    weights = torch.softmax(query @ k.transpose(-1, -2) * scaling, dim=-1)  # [B, Hq, L, S]
    return (weights @ v).transpose(1, 2).contiguous(), weights  # [B, L, Hq, Dv]


def _register_probe() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(AUDIT_PROBE, _probe)
    AttentionMaskInterface.register(AUDIT_PROBE, eager_mask)


class OffsetCache:
    """A cache that says ``offset`` tokens came before and keeps nothing (one query, one key); it has
    no layer states (``layers[i]`` is None), so a compressor that keeps one (DeepSeek-V4's) runs
    stateless, over the query token alone."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.layers: defaultdict[int, None] = defaultdict(lambda: None)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.offset

    def update(self, key_states, value_states, layer_idx=0, *args, **kwargs):
        return key_states, value_states


@contextmanager
def probing_proxy(model: Any) -> Iterator[list[dict[str, Any]]]:
    """Every attention call inside goes through the probe; the calls' records are yielded."""
    config = model.config
    saved = config._attn_implementation
    config._attn_implementation = AUDIT_PROBE
    _SEEN.clear()
    try:
        yield _SEEN
    finally:
        config._attn_implementation = saved


# ----------------------------------------------------------------------------- measuring
def _rotary(model: Any, rope_key: str, position_ids: torch.Tensor) -> Any:
    rot = model.model.rotary_emb
    x = torch.zeros(1, dtype=torch.float64)
    if "layer_type" in inspect.signature(rot.forward).parameters:
        return rot(x, position_ids, rope_key)
    return rot(x, position_ids)


def _rope_key(model: Any, j: int) -> str:
    """The key of layer j's RoPE in the rotary module: the one its attention names (DeepSeek-V4's
    ``rope_layer_type``: ``main`` or ``compress``), else its layer type."""
    return getattr(model.model.layers[j].self_attn, "rope_layer_type", None) or _layer_type(model, j)


def cos_sin(out: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A rotary output (``(cos, sin)`` ``[1, L, d or d/2]`` or complex ``[1, L, d/2]``) as ``[L, d/2]`` twice."""
    if torch.is_tensor(out) and out.is_complex():
        return out[0].real.double(), out[0].imag.double()  # [L, d/2]
    cos, sin = (t[0].double() for t in out)  # [L, d or d/2]
    half = cos.shape[-1] // 2
    if cos.shape[-1] % 2 == 0 and torch.equal(cos[..., :half], cos[..., half:]):
        cos, sin = cos[..., :half], sin[..., :half]  # [L, d/2]
    return cos, sin


@dataclass(frozen=True)
class LayerMeasure:
    """What transformers applies in one proxy layer, per position of ``positions``."""

    layer: int  # the original model's layer index
    layer_type: str
    rotated: bool
    scale_ratio: float  # scaling * sqrt(d_qk)
    attention_factor: tuple[float, ...]
    multiplier: tuple[float, ...]
    inv_freq: tuple[tuple[float, ...], ...]


def _layer_type(model: Any, j: int) -> str:
    types = getattr(model.config, "layer_types", None)
    return types[j] if types else "full_attention"


def _attend(model, j: int, hidden: torch.Tensor, position: int) -> dict[str, Any]:
    """One query token at ``position`` through layer j's attention; the probe's record."""
    attn = model.model.layers[j].self_attn
    pos = torch.tensor([[position]])
    key = _rope_key(model, j)
    rotary = _rotary(model, key, pos)
    if getattr(attn, "rope_layer_type", None):  # it picks its RoPE by name from the model's, as DeepSeek-V4 does
        rotary = {key: rotary}
    kwargs: dict[str, Any] = {"position_embeddings": rotary, "position_ids": pos}
    params = inspect.signature(attn.forward).parameters
    kwargs["cache" if "cache" in params else "past_key_values"] = OffsetCache(position)
    with probing_proxy(model) as seen:
        attn(hidden_states=hidden, attention_mask=None, **kwargs)
    return seen[-1]


def _logit(record: dict[str, Any], head: int) -> float:
    q, k = record["query"][0, :, -1], record["key"][0, :, -1]  # [Hq, D], [Hkv, D]
    return float(q[head] @ k[head * k.shape[0] // q.shape[0]]) * record["scaling"]


@torch.no_grad()
def measure_layer(model: Any, j: int, layer: int, positions: tuple[int, ...]) -> LayerMeasure:
    """The figures of proxy layer ``j`` (original layer ``layer``) at ``positions``."""
    g = torch.Generator().manual_seed(1234)
    hidden = torch.randn(1, 1, model.config.hidden_size, generator=g, dtype=torch.float64)  # [1, 1, H]
    first, second = _attend(model, j, hidden, 0), _attend(model, j, hidden, 1)
    q0, q1 = first["query"][0, :, -1].flatten(), second["query"][0, :, -1].flatten()  # [Hq*D]
    rotated = float(torch.nn.functional.cosine_similarity(q0, q1, dim=0)) < 1 - 1e-9
    scale_ratio = first["scaling"] * math.sqrt(first["query"].shape[-1])
    head = max(range(first["query"].shape[1]), key=lambda h: abs(_logit(first, h)))
    base = _logit(first, head)
    key = _rope_key(model, j)
    af0 = _attention_factor(model, key, 0)
    factors, mults, freqs = [], [], []
    for p in positions:
        ratio = _logit(_attend(model, j, hidden, p), head) / base
        factors.append(_attention_factor(model, key, p) if rotated else 1.0)
        mults.append((af0**2 if rotated else 1.0) * scale_ratio * ratio)
        freqs.append(_inv_freq(model, key, p) if rotated else ())
    return LayerMeasure(layer, _layer_type(model, j), rotated, scale_ratio, tuple(factors), tuple(mults), tuple(freqs))


def _attention_factor(model, rope_key: str, position: int) -> float:
    cos, sin = cos_sin(_rotary(model, rope_key, torch.tensor([[position]])))  # [1, d/2]
    return float((cos**2 + sin**2).sqrt().mean())


def _inv_freq(model, rope_key: str, position: int) -> tuple[float, ...]:
    cos, sin = cos_sin(_rotary(model, rope_key, torch.tensor([[1, max(position, 1)]])))  # [2, d/2]
    return tuple(float(x) for x in torch.atan2(sin[0], cos[0]))


def measure_proxy(config: dict[str, Any], positions: tuple[int, ...]) -> list[LayerMeasure]:
    """Build the proxy of ``config`` and measure every one of its layers at ``positions``."""
    model, keep = build_proxy(config)
    return [measure_layer(model, j, layer, positions) for j, layer in enumerate(keep)]
