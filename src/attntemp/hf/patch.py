"""Apply a TemperatureSpec to a transformers model through its attention function.

``apply`` registers an attention function (``attntemp_sdpa``, ``attntemp_flex_attention`` or
``attntemp_eager``) with transformers' ``AttentionInterface`` and the matching mask function with
``AttentionMaskInterface`` (without it the causal mask would be silently dropped), stores each
layer's multipliers on its attention module, and switches the model to it. The function folds
m = 1/T into q and calls the model's own SDPA, flex or eager function: masks, GQA and sliding
windows stay transformers' own. Flash-attention implementations are refused (transformers keys
its flash set-up on the implementation's name); SDPA runs PyTorch's flash kernel on a GPU. With
logit soft-capping (Gemma 2) m must multiply the capped logits, so those layers take a
materialised path (exact, O(L^2) memory). Positions come from ``position_ids`` (absolute), so
generation with a KV cache applies position schedules correctly. A long causal prefill on the CPU
runs the attention kernel :mod:`.probes.kernel` measures fastest for the model's heads and dtype
(torch's SDPA, or the blocked GEMMs of :mod:`attntemp.ops.attention_blocked`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.flex_attention import flex_attention_forward
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, flex_attention_mask, sdpa_mask

from ..ops.attention import fold_into_q, foldable, reference_scores, repeat_kv, windowed_sdpa
from ..ops.attention_blocked import blocked_causal_attention
from ..ops.geometry import ModelGeometry
from ..ops.spec import TemperatureSpec
from .flex_check import flex_problem
from .introspect import attention_modules, model_geometry, text_config
from .probes import kernel as kernel_probe
from .rope_scaling import extend_with, put_rope_state, rope_state

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3", "gpt_neox")
WRAPPED = ("sdpa", "flex_attention", "eager")  # attn_implementation values apply can wrap
STATE = "_attntemp_state"
_ONLY = "_attntemp_only_layer_types"  # set by only_layer_types: what a spec without layer_types tempers
PROBE = "_attntemp_probe"  # callable(module, query, key, m, scaling, kwargs) -> new m or None
_SAVED = "_attntemp_saved"


@dataclass
class LayerState:
    """What one attention module needs: the spec, its layer index, head count and layer type
    (``full_attention`` / ``sliding_attention``: a spec may temper one type only), cached m."""

    spec: TemperatureSpec
    layer: int
    num_heads: int
    layer_type: str | None = None
    batch_multiplier: torch.Tensor | None = None  # [B]: one extra m per batch row (sweeps)
    # extra(layer, positions [B|1, Lq], n_keys [B|1, Lq]) -> m broadcastable to [B, H, Lq];
    # multiplied in (e.g. learnable temperatures; gradients flow through it)
    extra: Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    _static: torch.Tensor | None = field(default=None, repr=False)

    def multiplier(self, query: torch.Tensor, key: torch.Tensor, kwargs: dict) -> torch.Tensor | None:
        """m broadcastable to query's ``[B, H, Lq]``, or None when it is exactly 1: always on a layer
        whose type the spec does not target (nor do a sweep's or a learner's multipliers reach it)."""
        if self.extra is None and self.batch_multiplier is None and self.spec.is_identity:
            return None  # the usual decode step of an unpatched model under a probe: nothing to compute
        if not self.spec.targets(self.layer_type):
            return None
        m = self._spec_and_batch(query, key, kwargs)
        if self.extra is None:
            return m
        pos = query_positions(query, key, kwargs)  # [B|1, Lq]
        e = self.extra(self.layer, pos, visible_keys(pos, kwargs)).to(query.device)  # layers may sit on other devices
        return e if m is None else m * e

    def _spec_and_batch(self, query, key, kwargs) -> torch.Tensor | None:
        if self.spec.is_identity and self.batch_multiplier is None:
            return None
        if self.spec.position_dependent:
            pos = query_positions(query, key, kwargs)  # [B or 1, Lq]
            m = self.spec.multipliers(self.layer, self.num_heads, pos, visible_keys(pos, kwargs), self.layer_type)
        else:
            if self._static is None or self._static.device != query.device:
                self._static = self.spec.static_multipliers(self.layer, self.num_heads, self.layer_type)
                self._static = self._static.to(query.device)  # [H]
            m = self._static.unsqueeze(-1)  # [H, 1]
        if self.batch_multiplier is not None:
            m = m * self.batch_multiplier.to(query.device).reshape(-1, 1, 1)  # [B, H, Lq or 1]
        return m


def query_positions(query: torch.Tensor, key: torch.Tensor, kwargs: dict) -> torch.Tensor:
    """Absolute 0-indexed query positions ``[B or 1, Lq]``: position_ids, else the cache tail."""
    pos = kwargs.get("position_ids")
    lq = query.shape[2]
    if pos is not None and pos.shape[-1] == lq:
        return pos.reshape(-1, lq)
    return (torch.arange(lq, device=query.device) + key.shape[2] - lq).unsqueeze(0)  # [1, Lq]


def visible_keys(pos: torch.Tensor, kwargs: dict) -> torch.Tensor:
    """Keys a causal query at ``pos`` sees: ``pos + 1``, capped by a sliding window."""
    n = pos + 1
    window = kwargs.get("sliding_window")
    return n.clamp_max(int(window)) if window else n


def _model_eager(module: torch.nn.Module):
    return sys.modules[type(module).__module__].eager_attention_forward


def _softcap_attention(module, query, key, value, mask, scaling, m, **kwargs):
    """Eager attention with m applied to the soft-capped logits (Gemma 2): exact, O(L^2); the soft
    cap and the dropout from transformers' ``kwargs``.

    transformers' mask (or, when it is None, a causal one) is applied by ``reference_scores``."""
    softcap = kwargs.get("softcap")
    s = reference_scores(
        query, key, m, is_causal=mask is None, attn_mask=mask, scale=scaling, softcap=softcap
    )  # [B, H, Lq, Lk]
    v = repeat_kv(value, query.shape[1] // value.shape[1])  # [B, H, Lk, D]
    p = torch.softmax(s, dim=-1).to(query.dtype)  # [B, H, Lq, Lk]
    p = torch.nn.functional.dropout(p, p=kwargs.get("dropout", 0.0), training=module.training)
    return (p @ v).transpose(1, 2).contiguous(), p  # [B, Lq, H, D]


_KERNELS = {"sdpa": sdpa_attention_forward, "flex_attention": flex_attention_forward}


def _make(base: str):
    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        fn = _KERNELS[base] if base in _KERNELS else _model_eager(module)
        state: LayerState | None = getattr(module, STATE, None)
        m = None if state is None else state.multiplier(query, key, kwargs)
        probe = getattr(module, PROBE, None)
        if probe is not None:
            replaced = probe(module, query, key, m, scaling, kwargs)
            m = m if replaced is None else replaced  # a probe may set this call's multiplier
        if m is not None and not foldable(softcap=kwargs.get("softcap")):
            return _softcap_attention(module, query, key, value, attention_mask, scaling, m, dropout=dropout, **kwargs)
        q = fold_into_q(query, m)  # [B, H, Lq, D]
        window = kwargs.get("sliding_window")
        if base == "sdpa" and attention_mask is None and window and q.shape[2] > window:
            # a long prefill of a sliding layer, its mask left out by _windowed_mask: computed in window blocks
            p = dropout if module.training else 0.0
            out = windowed_sdpa(q, key, value, int(window), scale=scaling, dropout=p)  # [B, H, Lq, D]
            return out.transpose(1, 2).contiguous(), None  # [B, Lq, H, D]
        if base == "sdpa" and _plain_causal(module, q, key, attention_mask, window, dropout, kwargs):
            if kernel_probe.kernel_for(q, key) == "blocked":  # faster than SDPA on this CPU, by probe
                out = blocked_causal_attention(q, key, value, scale=scaling)  # [B, H, Lq, D]
                return out.transpose(1, 2).contiguous(), None  # [B, Lq, H, D]
        return fn(module, q, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)

    attention.__name__ = f"attntemp_{base}"
    return attention


def _plain_causal(module, q, key, mask, window, dropout: float, kwargs: dict) -> bool:
    """Whether this call is what SDPA runs as plain causal attention, which another exact kernel
    may compute (:mod:`.probes.kernel`): no mask, no window reached, no dropout, no position bias,
    a causal module, a prefill (as many queries as keys)."""
    if not q.shape[2] == key.shape[2] > 1:
        return False  # a decode step or a cached prefix: SDPA's own path
    causal = kwargs.get("is_causal")
    causal = getattr(module, "is_causal", True) if causal is None else causal
    no_window = not window or q.shape[2] <= window
    quiet = not (dropout and module.training) and kwargs.get("position_bias") is None
    return mask is None and causal and no_window and quiet


def _windowed_mask(*args, **kwargs):
    """transformers' SDPA mask, except for the sliding window of a long prefill without padding
    (no cache offset, more queries than the window): None there, and the attention function
    computes the window in blocks (:func:`attntemp.ops.attention.windowed_sdpa`) instead of an
    ``[L, L]`` mask (4 GiB of booleans at 65536 tokens)."""
    window, pad = kwargs.get("local_size"), kwargs.get("attention_mask")
    if window is None:
        return sdpa_mask(*args, **kwargs)
    q_len, kv_len = kwargs.get("q_length", 0), kwargs.get("kv_length") or 0
    long = q_len > window and kwargs.get("allow_is_causal_skip", True)
    offsets = (kwargs.get("q_offset"), kwargs.get("kv_offset"), kv_len - q_len)
    at_start = not any(isinstance(x, torch.Tensor) or x for x in offsets)
    if long and at_start and not args and (pad is None or bool(pad.all())):
        return None
    return sdpa_mask(*args, **kwargs)


for _base, _mask in (("sdpa", _windowed_mask), ("flex_attention", flex_attention_mask), ("eager", eager_mask)):
    AttentionInterface.register(f"attntemp_{_base}", _make(_base))
    AttentionMaskInterface.register(f"attntemp_{_base}", _mask)


def check_supported(model: torch.nn.Module) -> None:
    """Raise ValueError naming the model type unless the patch is known to be exact for it."""
    cfg = text_config(model)
    mt = getattr(cfg, "model_type", type(model).__name__)
    if mt not in SUPPORTED:
        raise ValueError(f"model_type={mt!r} is not supported by attntemp.patch; supported: {list(SUPPORTED)}")
    if not attention_modules(model):
        raise ValueError(f"model_type={mt!r}: no attention modules with a layer_idx were found")
    impl = cfg._attn_implementation
    if impl not in WRAPPED:
        raise ValueError(
            f"model_type={mt!r} runs attn_implementation={impl!r}; attntemp wraps {list(WRAPPED)} "
            "(load with attn_implementation='sdpa': on a GPU it runs PyTorch's flash kernel)"
        )


def apply(model: torch.nn.Module, spec: TemperatureSpec) -> torch.nn.Module:
    """Patch ``model`` in place with ``spec`` (and its RoPE extension, if any); see ``restore``."""
    if getattr(model, _SAVED, None) is not None:
        raise ValueError("the model is already patched by attntemp; call attntemp.restore(model) first")
    check_supported(model)
    only = getattr(model, _ONLY, None)
    if only is not None and spec.layer_types is None:
        spec = spec.with_layer_types(only)
    hf_model: Any = model  # a transformers model: set_attn_implementation
    cfg = text_config(model)
    geometry = model_geometry(model)
    mods = attention_modules(model)
    spec.check_model(len(mods), geometry.num_heads)
    impl = cfg._attn_implementation
    softcap = getattr(cfg, "attn_logit_softcapping", None)
    target = "attntemp_eager" if impl == "eager" or softcap else f"attntemp_{impl}"
    if target == "attntemp_flex_attention" and not _flex_right(model, geometry):
        target = "attntemp_sdpa"
    object.__setattr__(model, _SAVED, (impl, rope_state(model)))  # restore puts back exactly this
    try:
        if spec.rope:
            extend_with(model, spec.rope)
        for mod in mods:
            state = LayerState(spec, mod.layer_idx, geometry.num_heads, geometry.layer_types[mod.layer_idx])
            setattr(mod, STATE, state)
        hf_model.set_attn_implementation(target)
    except Exception:
        restore(model)
        raise
    return model


def _flex_right(model: torch.nn.Module, geometry: ModelGeometry) -> bool:
    """Whether the compiled flex kernel agrees with SDPA for this model's heads on its device
    (:mod:`.flex_check`, once per shape); where not, say so in one line: apply then uses SDPA."""
    p = next(model.parameters())
    problem = flex_problem(geometry.num_heads, geometry.head_dim, str(p.device), p.dtype)
    if problem is None:
        return True
    print(
        f"attntemp: flex_attention is not used: {problem} (torch's compiled CPU kernel, see "
        "docs/concepts.md); the patched model runs SDPA instead",
        file=sys.stderr,
    )
    return False


def is_patched(model: torch.nn.Module) -> bool:
    """True between ``apply`` and ``restore``."""
    return getattr(model, _SAVED, None) is not None


def restore(model: torch.nn.Module) -> torch.nn.Module:
    """Undo ``apply``: the attention implementation, rotary modules and RoPE config exactly as
    ``apply`` found them. A RoPE extension made before ``apply`` (``extend_context``) stays; one
    made by the spec, or inside the ``with patch(...)`` block, is undone."""
    saved = getattr(model, _SAVED, None)
    for mod in attention_modules(model):
        if hasattr(mod, STATE):
            delattr(mod, STATE)
    if saved is None:
        return model
    impl, rope_at_entry = saved
    put_rope_state(model, rope_at_entry)
    if text_config(model)._attn_implementation != impl:
        hf_model: Any = model  # a transformers model: set_attn_implementation
        hf_model.set_attn_implementation(impl)
    object.__setattr__(model, _SAVED, None)
    return model


@contextmanager
def only_layer_types(model: torch.nn.Module, layer_types: Sequence[str] | None) -> Iterator[torch.nn.Module]:
    """Inside this block every spec patched onto ``model`` without layer types of its own tempers
    ``layer_types`` only (a tuner's candidates, its sweeps and its learner; None: no change)."""
    old = getattr(model, _ONLY, None)
    object.__setattr__(model, _ONLY, None if layer_types is None else tuple(layer_types))
    try:
        yield model
    finally:
        object.__setattr__(model, _ONLY, old)


@contextmanager
def patch(model: torch.nn.Module, spec: TemperatureSpec) -> Iterator[torch.nn.Module]:
    """``with attntemp.patch(model, spec): ...``: restored on exit, also on an exception."""
    apply(model, spec)
    try:
        yield model
    finally:
        restore(model)


def set_extra(model: torch.nn.Module, extra: Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor] | None) -> None:
    """On a patched model: multiply every layer's m by ``extra(layer, positions, n_keys)`` (None
    removes it); learnable temperatures ride on this."""
    mods = [m for m in attention_modules(model) if hasattr(m, STATE)]
    if not mods:
        raise ValueError("set_extra needs a model patched by attntemp.apply/patch")
    for mod in mods:
        getattr(mod, STATE).extra = extra


@contextmanager
def batch_multipliers(model: torch.nn.Module, multipliers: torch.Tensor) -> Iterator[None]:
    """Inside ``patch``: one more multiplier per batch row ``[B]`` (several m in one forward)."""
    mods = [m for m in attention_modules(model) if hasattr(m, STATE)]
    if not mods:
        raise ValueError("batch_multipliers needs a model patched by attntemp.apply/patch")
    for mod in mods:
        getattr(mod, STATE).batch_multiplier = multipliers
    try:
        yield
    finally:
        for mod in mods:
            getattr(mod, STATE).batch_multiplier = None


@contextmanager
def probing(model: torch.nn.Module, spec: TemperatureSpec, probe: Callable) -> Iterator[torch.nn.Module]:
    """``patch(model, spec)`` with ``probe(module, query, key, m, scaling, kwargs)`` called by every
    attention module before its kernel; a tensor it returns replaces that call's m (broadcastable
    to ``[B, H, Lq]``). Probes and patch are removed on exit, also on an exception."""
    with patch(model, spec), probes(model, probe):
        yield model


@contextmanager
def probes(model: torch.nn.Module, probe: Callable) -> Iterator[torch.nn.Module]:
    """``probe`` (as in :func:`probing`) on a model already patched by ``apply``/``patch``, whose
    spec stays; removed on exit, also on an exception."""
    mods = attention_modules(model)
    if not is_patched(model) or any(hasattr(mod, PROBE) for mod in mods):
        raise ValueError("probes needs a model patched by attntemp.apply/patch and not probed already")
    for mod in mods:
        setattr(mod, PROBE, probe)
    try:
        yield model
    finally:
        for mod in mods:
            if hasattr(mod, PROBE):
                delattr(mod, PROBE)


def run_decoder(model: torch.nn.Module, input_ids: torch.Tensor) -> None:
    """One forward of the decoder stack without the LM head (no ``[L, vocab]`` logits), no cache."""
    base = getattr(model, "base_model", model)
    device: Any = model.device  # a transformers model's device
    base(input_ids=input_ids.to(device), use_cache=False)
