"""vLLM's Llama with attntemp's position schedule on q (written by attntemp; needs vLLM and torch).

Its attention layers multiply q by m(position, position + 1) (:mod:`.attntemp_schedule`) after
vLLM's rotary embedding: RoPE is linear, so scaling after it is scaling before it.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.model_executor.models.llama import LlamaForCausalLM

from .attntemp_schedule import schedule


class Scheduled(torch.nn.Module):
    """vLLM's rotary embedding, then q [tokens, H * D] times m(position, position + 1) per head."""

    def __init__(self, rope: Any, spec: dict[str, Any], layer: int, head_dim: int) -> None:
        super().__init__()
        self.rope, self.spec, self.layer, self.head_dim = rope, spec, layer, head_dim

    def forward(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        q, k = self.rope(positions, q, k, *args, **kwargs)  # [T, H * D], [T, Hkv * D]
        pos = positions.reshape(-1)  # [T]
        m = schedule(self.spec["name"], self.spec.get("params", {}), self.layer, pos, pos + 1)  # [H or 1, T]
        qh = q.view(q.shape[0], -1, self.head_dim)  # [T, H, D]
        return (qh * m.t().unsqueeze(-1).to(q.dtype)).reshape(q.shape), k


class AttntempScheduleLlamaForCausalLM(LlamaForCausalLM):
    """vLLM's Llama with the attntemp schedule of config.attntemp_schedule on q."""

    def __init__(self, *, vllm_config: Any, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        spec = vllm_config.model_config.hf_config.attntemp_schedule
        for i, layer in enumerate(self.model.layers):
            attn = layer.self_attn
            attn.rotary_emb = Scheduled(attn.rotary_emb, spec, i, attn.head_dim)
