"""RoPE context extension on a loaded transformers model, restorable.

``extend_context`` writes the rope parameters into the model's config and rebuilds its rotary
embedding modules from that config with transformers' own code, so the logits are those of the
same model loaded with that rope configuration. Values are checked first by ``attntemp.ops.rope``.
``rope_for`` names the extension a sweep or tune uses at a length (scale s = length / L0).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..ops import rope
from ..ops.geometry import stated_positions
from ..ops.rope import EXTENSIONS
from ..ops.rope.bases import ntk_base
from ..ops.rope.params import Rope
from ..ops.rope.scalings import SCALINGS as SCALINGS  # read here before its own module
from ..ops.rope.scalings import rope_at_scale as rope_at_scale
from ..ops.rope.scalings import rope_for as rope_for
from ..utils import checks
from ..utils.lazy import lazy
from .introspect import per_type_rope, rope_geometry, text_config, trained_length

if TYPE_CHECKING:
    import torch
else:
    torch = lazy("torch")


_SAVED = "_attntemp_rope_saved"


def rope_parameters_for(
    config, method: str, factor: float, l0: int, layer_type: str | None = None, **params: Any
) -> dict[str, Any]:
    """The transformers ``rope_parameters`` dict for ``method`` (checked by attntemp.ops.rope) from the
    trained length ``l0``, of ``layer_type``'s layers where the RoPE is per layer type."""
    checks.choice("method", method, EXTENSIONS)
    dim, base, current = rope_geometry(config, layer_type)
    if current.get("rope_type", "default") != "default":
        raise ValueError(f"the model already uses rope_type={current['rope_type']!r}; restore it before extending")
    keep: dict[str, Any] = {k: current[k] for k in ("rope_theta", "partial_rotary_factor") if k in current}
    if method == "ntk":
        rope.ntk(dim, base, factor)
        return {**keep, "rope_type": "default", "rope_theta": ntk_base(base, factor, dim)}
    if method == "linear":
        rope.linear(dim, base, factor, **params)
        return {**keep, "rope_type": "linear", "factor": float(factor)}
    if method == "dynamic":
        rope.dynamic(dim, base, factor, l0, **params)
        return {**keep, "rope_type": "dynamic", "factor": float(factor)}
    rope.ROPE_FUNCTIONS[method](dim, base, factor=factor, original_max_position_embeddings=l0, **params)
    out = {**keep, "rope_type": method, "factor": float(factor), "original_max_position_embeddings": int(l0)}
    return {**out, **{k: list(v) if isinstance(v, tuple) else v for k, v in params.items()}}


def _rotary_modules(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, Any]]:
    found: list[tuple[torch.nn.Module, str, Any]] = []
    for parent in model.modules():
        for name, child in parent.named_children():
            buffers = [b for b, _ in child.named_buffers(recurse=False) if b.endswith("inv_freq")]
            if type(child).__name__.endswith("RotaryEmbedding") and buffers:  # Gemma 3: one per layer type
                found.append((parent, name, child))
    return found


def rotary_modules(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, Any]]:
    """``(parent, attribute name, module)`` of each rotary embedding module of ``model``."""
    return _rotary_modules(model)


def extend_with(model: torch.nn.Module, rope: Rope) -> dict[str, Any]:
    """:func:`extend_context` with a spec's typed :class:`~attntemp.ops.rope.params.Rope`."""
    return extend_context(model, rope.kind, rope.factor, rope.l0, **rope.params)


def extend_context(
    model: torch.nn.Module,
    method: str,
    factor: float,
    original_max_position_embeddings: int | None = None,
    **params: Any,
) -> dict[str, Any]:
    """Set RoPE scaling ``method`` (linear, ntk, dynamic, yarn, llama3, longrope) on ``model``.

    ``factor`` is the scale s >= 1; ``original_max_position_embeddings`` defaults to the model's
    trained length (its ``max_position_embeddings``: the RoPE must be plain). Extra ``params`` go
    to the rope type (yarn: beta_fast, beta_slow, attention_factor, mscale, mscale_all_dim,
    truncate; llama3: low_freq_factor, high_freq_factor; longrope: short_factor, long_factor). Note yarn's
    attention_factor (default 0.1 ln s + 1) scales cos and sin, i.e. the logits by its square.
    Undo with :func:`restore_rope`. Returns the rope_parameters written.

    Where the RoPE is per layer type (Gemma 3), only the global (``full_attention``) layers are
    extended, as Gemma 3's larger models ship their linear scaling: a sliding-window layer never
    sees a distance past its window, so its RoPE stays as trained.
    """
    config = text_config(model)
    if getattr(model, _SAVED, None) is not None:
        raise ValueError("the model's RoPE is already extended by attntemp; call restore_rope first")
    per_type = per_type_rope(config)
    layer_type = None if per_type is None else "full_attention"
    l0 = original_max_position_embeddings or trained_length(model)
    new = rope_parameters_for(config, method, factor, l0, layer_type, **params)
    if per_type is not None:
        new = {**copy.deepcopy(per_type), "full_attention": new}
    rotaries = _rotary_modules(model)
    if not rotaries:
        raise ValueError(f"model_type={config.model_type!r}: no rotary embedding module found")
    saved = (copy.deepcopy(config.rope_parameters), stated_positions(config), rotaries)
    object.__setattr__(model, _SAVED, saved)
    try:
        config.rope_parameters = new
        if method == "dynamic" and original_max_position_embeddings:
            config.max_position_embeddings = int(original_max_position_embeddings)
        for parent, name, old in rotaries:
            fresh = type(old)(config=config).to(next(old.buffers()).device)
            setattr(parent, name, fresh)
    except Exception:
        restore_rope(model)
        raise
    return new


def is_extended(model: torch.nn.Module) -> bool:
    """True while an :func:`extend_context` made by attntemp is in place (undone by restore_rope)."""
    return getattr(model, _SAVED, None) is not None


def make_permanent(model: torch.nn.Module) -> None:
    """Forget the saved rope: the extension becomes the model's own (baking writes it to the config)."""
    object.__setattr__(model, _SAVED, None)


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


@dataclass(frozen=True)
class RopeState:
    """Everything RoPE of a model at one moment: its config entries, its rotary modules (the objects
    themselves, with their buffers) and what :func:`restore_rope` would put back."""

    parameters: Any
    max_positions: Any  # the config's max_position_embeddings
    rotaries: tuple[tuple[torch.nn.Module, str, Any], ...]
    saved: Any


def rope_state(model: torch.nn.Module) -> RopeState:
    """The model's RoPE as it is now (see :func:`put_rope_state`)."""
    config = text_config(model)
    return RopeState(
        copy.deepcopy(getattr(config, "rope_parameters", None)),
        stated_positions(config),
        tuple(_rotary_modules(model)),
        getattr(model, _SAVED, None),
    )


def put_rope_state(model: torch.nn.Module, state: RopeState) -> None:
    """Put ``state`` back exactly: config entries, rotary module objects, restore_rope's record."""
    config = text_config(model)
    if state.parameters is not None:
        config.rope_parameters = copy.deepcopy(state.parameters)
    if state.max_positions is not None:
        config.max_position_embeddings = state.max_positions
    for parent, name, module in state.rotaries:
        setattr(parent, name, module)
    object.__setattr__(model, _SAVED, state.saved)


@contextmanager
def extended(model: torch.nn.Module, method: str, factor: float, **kw: Any) -> Iterator[torch.nn.Module]:
    """``with extended(model, "yarn", 4): ...``: extend_context, restored on exit (also on error)."""
    extend_context(model, method, factor, **kw)
    try:
        yield model
    finally:
        restore_rope(model)
