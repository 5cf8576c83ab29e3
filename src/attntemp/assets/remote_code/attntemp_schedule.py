"""Position-dependent attention temperature written by attntemp (needs torch only).

A schedule ``{"name": ..., "params": {...}}`` gives m = 1/T per query, multiplied into each head's
q rows (the static part of the temperature is already in q_proj's weights):
  logn       m = log_L0(p) for 1-indexed position p > L0, else 1 (Qwen v1 use_logn_attn)
  sqrt_logn  m = sqrt(log_L0(p)) for p > L0, else 1
  llama4     m = 1 + attn_scale * log1p(floor((pos + 1) / floor_scale)) (Llama 4)
  ssmax      m = s * ln n over the n visible keys, floored at 1e-6 (arXiv:2501.19399)
  log_length ln m = a + b ln(max(1, n / L0)), a and b a number, one per layer or per (layer, head)
  gated_constant  m = multiplier for a query that sees more than L0 keys, else 1
Each formula is the one of attntemp.ops.schedules (attntemp's tests compare them).
"""

from __future__ import annotations

import math
from typing import Any

import torch


def _coefficient(c: Any, layer: int, device: torch.device) -> torch.Tensor:
    """A number, one per layer, or one per (layer, head) as [H or 1, 1]."""
    if isinstance(c, (int, float)):
        return torch.tensor([[float(c)]], device=device)
    row = c[layer]
    if isinstance(row, (list, tuple)):
        return torch.tensor(row, dtype=torch.float32, device=device).reshape(-1, 1)
    return torch.tensor([[float(row)]], device=device)


def schedule(
    name: str, params: dict[str, Any], layer: int, positions: torch.Tensor, n_keys: torch.Tensor
) -> torch.Tensor:
    """m for each query: [H or 1, Lq] from 0-indexed positions and visible keys [Lq]."""
    p = positions.to(torch.float32)  # [Lq]
    if name in ("logn", "sqrt_logn"):
        l0 = params.get("trained_len", 2048)
        q = p + 1.0  # [Lq]
        m = torch.where(q > l0, torch.log(q) / math.log(l0), torch.ones_like(q))  # [Lq]
        return (m.sqrt() if name == "sqrt_logn" else m).unsqueeze(0)  # [1, Lq]
    if name == "llama4":
        floor_scale, attn_scale = params.get("floor_scale", 8192.0), params.get("attn_scale", 0.1)
        return (1.0 + attn_scale * torch.log1p(torch.floor((p + 1.0) / floor_scale))).unsqueeze(0)  # [1, Lq]
    if name == "ssmax":
        return (params.get("s", 0.43) * torch.log(n_keys.to(torch.float32))).clamp_min(1e-6).unsqueeze(0)  # [1, Lq]
    if name == "log_length":
        x = (n_keys.to(torch.float32) / params.get("trained_len", 2048)).clamp_min(1.0).log().unsqueeze(0)  # [1, Lq]
        a = _coefficient(params.get("a", 0.0), layer, n_keys.device)  # [H or 1, 1]
        b = _coefficient(params.get("b", 0.0), layer, n_keys.device)  # [H or 1, 1]
        return (a + b * x).exp()  # [H or 1, Lq]
    if name == "gated_constant":
        past = n_keys.to(torch.float32) > params.get("trained_len", 2048)  # [Lq]
        return torch.where(past, float(params.get("multiplier", 1.0)), 1.0).to(torch.float32).unsqueeze(0)  # [1, Lq]
    raise ValueError(
        f"attntemp_schedule name={name!r} is not one of logn, sqrt_logn, llama4, ssmax, log_length, gated_constant"
    )
