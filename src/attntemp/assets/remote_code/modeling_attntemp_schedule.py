"""Position-dependent attention temperature written by attntemp (needs torch and transformers only).

``config.attntemp_schedule = {"name": ..., "params": {...}}`` gives m = 1/T per query
(:mod:`.attntemp_schedule`), multiplied into each head's q rows on every forward; the static part
of the temperature is already in q_proj's weights. Positions come from ``position_ids``
(absolute), so generation with a KV cache is scheduled correctly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from .attntemp_schedule import schedule


def _positions(kwargs: dict[str, Any], hidden: torch.Tensor) -> torch.Tensor:
    """The absolute positions ``[B or 1, Lq]`` of the queries in ``hidden`` ``[B, Lq, hidden]``."""
    pos = kwargs.get("position_ids")
    if pos is None:
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        start = cache.get_seq_length() if cache is not None else 0
        pos = torch.arange(start, start + hidden.shape[1], device=hidden.device).unsqueeze(0)  # [1, Lq]
    return pos.reshape(-1, hidden.shape[1])


class AttntempScheduleLlamaConfig(LlamaConfig):
    """A Llama config with its own model_type: without trust_remote_code=True transformers refuses
    the folder instead of loading it as a plain Llama, without the schedule."""

    model_type = "attntemp_schedule_llama"


class AttntempScheduleLlamaForCausalLM(LlamaForCausalLM):
    """LlamaForCausalLM whose q rows are multiplied by the schedule's m(position, visible keys)."""

    config_class = AttntempScheduleLlamaConfig

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        spec = config.attntemp_schedule
        window = getattr(config, "sliding_window", None)
        for layer in self.model.layers:
            attn: Any = layer.self_attn
            attn.register_forward_pre_hook(self._pre_hook(spec, attn.layer_idx, window), with_kwargs=True)
            attn.q_proj.register_forward_hook(self._q_hook(attn))

    @staticmethod
    def _pre_hook(spec: dict[str, Any], layer: int, window: int | None) -> Callable[..., None]:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            hidden = args[0] if args else kwargs["hidden_states"]  # [B, Lq, hidden]
            pos = _positions(kwargs, hidden)  # [B or 1, Lq]
            n = pos + 1  # visible keys
            n = n.clamp_max(int(window)) if window else n
            b, lq = pos.shape
            m = schedule(spec["name"], spec.get("params", {}), layer, pos.reshape(-1), n.reshape(-1))  # [H or 1, B*Lq]
            module._attntemp_m = m.reshape(m.shape[0], b, lq).transpose(0, 1)  # [B, H or 1, Lq]

        return hook

    @staticmethod
    def _q_hook(attn: Any) -> Callable[..., torch.Tensor]:
        def hook(module: Any, inputs: Any, out: torch.Tensor) -> torch.Tensor:
            m = attn._attntemp_m  # [B, H or 1, Lq]
            b, lq = out.shape[0], out.shape[1]
            q = out.view(b, lq, -1, attn.head_dim)  # [B, Lq, H, D]
            return (q * m.transpose(1, 2).unsqueeze(-1).to(q.dtype)).reshape(out.shape)

        return hook
