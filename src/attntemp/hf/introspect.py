"""What attntemp reads off a transformers model: its text config, attention modules in layer
order, its geometry (:class:`~attntemp.ops.geometry.ModelGeometry`: RoPE, layer types, trained
context length). Reads only; changes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..ops.geometry import ModelGeometry
from ..utils.lazy import lazy

if TYPE_CHECKING:
    import torch
else:
    torch = lazy("torch")


def text_config(model: torch.nn.Module) -> Any:
    """The config holding the decoder's attention settings (text config of multimodal models)."""
    cfg: Any = model.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def attention_modules(model: torch.nn.Module) -> list[Any]:
    """The self-attention modules, in layer order (they carry ``layer_idx``); transformers modules,
    typed Any since torch types their attributes as ``Tensor | Module``."""
    mods: list[Any] = [m for m in model.modules() if type(m).__name__.endswith("Attention") and hasattr(m, "layer_idx")]
    return sorted(mods, key=lambda m: m.layer_idx)


def model_geometry(model: torch.nn.Module) -> ModelGeometry:
    """The model's attention geometry, from its (text) config: :class:`~attntemp.ops.geometry.ModelGeometry`."""
    return ModelGeometry.from_config(model.config)


def trained_length(model: torch.nn.Module) -> int:
    """L0, the context the model was trained at (:attr:`ModelGeometry.trained_length`: the context,
    or the L0 of a RoPE extension already in its config)."""
    geometry = model_geometry(model)
    return geometry.positions() if geometry.trained_length is None else geometry.trained_length


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
    return ModelGeometry.from_config(config).rotary_dim, float(params["rope_theta"]), params


def layer_types(model: torch.nn.Module) -> list[str]:
    """Each decoder layer's attention type as the config names it (``full_attention``,
    ``sliding_attention``), as :attr:`ModelGeometry.layer_types` reads them."""
    return list(model_geometry(model).layer_types)
