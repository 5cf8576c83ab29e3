"""RoPE context extension on a loaded transformers model, restorable.

``extend_context`` writes the rope parameters into the model's config and rebuilds its rotary
embedding modules from that config with transformers' own code, so the logits are those of the
same model loaded with that rope configuration. Values are checked first by ``attntemp.rope``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from . import _validate, rope

METHODS = ("linear", "ntk", "dynamic", "yarn", "llama3", "longrope")
_SAVED = "_attntemp_rope_saved"


def text_config(model: torch.nn.Module):
    """The config holding the decoder's attention settings (text config of multimodal models)."""
    cfg = model.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def rope_geometry(config) -> tuple[int, float, dict[str, Any]]:
    """(rotary dim, rope_theta, flat rope_parameters); raise for per-layer-type rope."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    if params and all(isinstance(v, dict) for v in params.values()):
        raise ValueError(
            f"model_type={config.model_type!r} has per-layer-type RoPE parameters "
            f"({sorted(params)}); extend_context supports one RoPE for all layers"
        )
    if "rope_theta" not in params:
        raise ValueError(f"model_type={config.model_type!r} has no rope_theta: not a RoPE model")
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(head_dim * params.get("partial_rotary_factor", 1.0))
    return dim, float(params["rope_theta"]), params


def rope_parameters_for(
    config, method: str, factor: float, original_max_position_embeddings: int | None, **params: Any
) -> dict[str, Any]:
    """The transformers ``rope_parameters`` dict for ``method`` (checked by attntemp.rope)."""
    _validate.choice("method", method, METHODS)
    dim, base, current = rope_geometry(config)
    if current.get("rope_type", "default") != "default":
        raise ValueError(
            f"the model already uses rope_type={current['rope_type']!r}; restore it before extending"
        )
    l0 = original_max_position_embeddings or config.max_position_embeddings
    keep = {k: current[k] for k in ("rope_theta", "partial_rotary_factor") if k in current}
    if method == "ntk":
        rope.ntk(dim, base, factor)
        return {**keep, "rope_type": "default", "rope_theta": base * factor ** (dim / (dim - 2))}
    if method == "linear":
        rope.linear(dim, base, factor, **params)
        return {**keep, "rope_type": "linear", "factor": float(factor)}
    if method == "dynamic":
        rope.dynamic(dim, base, factor, l0, **params)
        return {**keep, "rope_type": "dynamic", "factor": float(factor)}
    rope.ROPE_FUNCTIONS[method](dim, base, factor=factor, original_max_position_embeddings=l0, **params)
    out = {**keep, "rope_type": method, "factor": float(factor), "original_max_position_embeddings": int(l0)}
    return {**out, **{k: list(v) if isinstance(v, tuple) else v for k, v in params.items()}}


def _rotary_modules(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.nn.Module]]:
    found = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if type(child).__name__.endswith("RotaryEmbedding") and hasattr(child, "inv_freq"):
                found.append((parent, name, child))
    return found


def extend_context(
    model: torch.nn.Module,
    method: str,
    factor: float,
    original_max_position_embeddings: int | None = None,
    **params: Any,
) -> dict[str, Any]:
    """Set RoPE scaling ``method`` (linear, ntk, dynamic, yarn, llama3, longrope) on ``model``.

    ``factor`` is the scale s >= 1; ``original_max_position_embeddings`` defaults to the config's
    ``max_position_embeddings`` (the trained length). Extra ``params`` go to the rope type (yarn:
    beta_fast, beta_slow, attention_factor, mscale, mscale_all_dim, truncate; llama3:
    low_freq_factor, high_freq_factor; longrope: short_factor, long_factor). Note yarn's
    attention_factor (default 0.1 ln s + 1) scales cos and sin, i.e. the logits by its square.
    Undo with :func:`restore_rope`. Returns the rope_parameters written.
    """
    config = text_config(model)
    if getattr(model, _SAVED, None) is not None:
        raise ValueError("the model's RoPE is already extended by attntemp; call restore_rope first")
    new = rope_parameters_for(config, method, factor, original_max_position_embeddings, **params)
    rotaries = _rotary_modules(model)
    if not rotaries:
        raise ValueError(f"model_type={config.model_type!r}: no rotary embedding module found")
    saved = (copy.deepcopy(config.rope_parameters), config.max_position_embeddings, rotaries)
    object.__setattr__(model, _SAVED, saved)
    try:
        config.rope_parameters = new
        if method == "dynamic" and original_max_position_embeddings:
            config.max_position_embeddings = int(original_max_position_embeddings)
        for parent, name, old in rotaries:
            fresh = type(old)(config=config).to(old.inv_freq.device)
            setattr(parent, name, fresh)
    except Exception:
        restore_rope(model)
        raise
    return new


def restore_rope(model: torch.nn.Module) -> None:
    """Put back the rope parameters and rotary modules saved by :func:`extend_context`."""
    saved = getattr(model, _SAVED, None)
    if saved is None:
        return
    params, max_pos, rotaries = saved
    config = text_config(model)
    config.rope_parameters = params
    config.max_position_embeddings = max_pos
    for parent, name, old in rotaries:
        setattr(parent, name, old)
    object.__setattr__(model, _SAVED, None)


@contextmanager
def extended(model: torch.nn.Module, method: str, factor: float, **kw: Any) -> Iterator[torch.nn.Module]:
    """``with extended(model, "yarn", 4): ...``: extend_context, restored on exit (also on error)."""
    extend_context(model, method, factor, **kw)
    try:
        yield model
    finally:
        restore_rope(model)
