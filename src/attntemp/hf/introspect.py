"""What attntemp reads off a transformers model: its text config, attention modules in layer
order, RoPE geometry and trained context length. Reads only; changes nothing."""

from __future__ import annotations

from typing import Any

import torch


def text_config(model: torch.nn.Module) -> Any:
    """The config holding the decoder's attention settings (text config of multimodal models)."""
    cfg: Any = model.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def attention_modules(model: torch.nn.Module) -> list[Any]:
    """The self-attention modules, in layer order (they carry ``layer_idx``); transformers modules,
    typed Any since torch types their attributes as ``Tensor | Module``."""
    mods: list[Any] = [m for m in model.modules() if type(m).__name__.endswith("Attention") and hasattr(m, "layer_idx")]
    return sorted(mods, key=lambda m: m.layer_idx)


def trained_length(model: torch.nn.Module) -> int:
    """L0, the context the model was trained at: the config's ``max_position_embeddings``, or the
    ``original_max_position_embeddings`` of a RoPE extension already in its config."""
    cfg = text_config(model)
    params = getattr(cfg, "rope_parameters", None) or {}
    original = params.get("original_max_position_embeddings") if isinstance(params, dict) else None
    return int(original or cfg.max_position_embeddings)


def per_type_rope(config: Any) -> dict[str, Any] | None:
    """``rope_parameters`` when they are given per layer type (Gemma 3: full and sliding), else None."""
    params = getattr(config, "rope_parameters", None) or {}
    return params if params and all(isinstance(v, dict) for v in params.values()) else None


def rope_geometry(config: Any, layer_type: str | None = None) -> tuple[int, float, dict[str, Any]]:
    """(rotary dim, rope_theta, flat rope_parameters) of the model, or of ``layer_type``'s layers
    where the RoPE is per layer type (raise for such a model without a ``layer_type``)."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    if per_type_rope(config) is not None and layer_type in params:
        params = dict(params[layer_type])
    elif per_type_rope(config) is not None:
        raise ValueError(
            f"model_type={config.model_type!r} has per-layer-type RoPE parameters "
            f"({sorted(params)}); name the layer type whose RoPE is meant"
        )
    if "rope_theta" not in params:
        raise ValueError(f"model_type={config.model_type!r} has no rope_theta: not a RoPE model")
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(head_dim * params.get("partial_rotary_factor", 1.0))
    return dim, float(params["rope_theta"]), params


def layer_types(model: torch.nn.Module) -> list[str]:
    """Each decoder layer's attention type as the config names it (``full_attention``,
    ``sliding_attention``): ``config.layer_types``, or every layer full where there is none."""
    cfg = text_config(model)
    types = getattr(cfg, "layer_types", None)
    return list(types) if types else ["full_attention"] * int(cfg.num_hidden_layers)
