"""Tempered softmax and entropy: the pure math of attention temperature.

Temperature ``T`` divides the logits; the multiplier ``m = 1/T`` multiplies them. ``T > 1`` softens
(flatter, higher entropy), ``T < 1`` sharpens; the order of the weights never changes.
"""

from __future__ import annotations

import torch

from ..utils import checks

Number = float | int
TempLike = Number | torch.Tensor


def _compute_dtype(scores: torch.Tensor) -> torch.dtype:
    """fp32 for half types (so T = 1e-3 cannot overflow them), fp64 kept as fp64."""
    return torch.promote_types(scores.dtype, torch.float32)


def _temperature(temperature: TempLike, like: torch.Tensor) -> torch.Tensor:
    """Check ``temperature`` (> 0, finite) and return it as a tensor on ``like``'s device."""
    dtype = _compute_dtype(like)
    if torch.is_tensor(temperature):
        t = temperature.to(device=like.device, dtype=dtype)
        return checks.positive_tensor("temperature", t)
    value = checks.positive("temperature", temperature)
    return torch.tensor(value, device=like.device, dtype=dtype)


def scaled_logits(scores: torch.Tensor, temperature: TempLike) -> torch.Tensor:
    """``scores / T`` in at least fp32 (so fp16/bf16 inputs cannot overflow at T = 1e-3)."""
    t = _temperature(temperature, scores)
    return scores.to(_compute_dtype(scores)) / t  # [..., n]


def tempered_softmax(scores: torch.Tensor, temperature: TempLike = 1.0, dim: int = -1) -> torch.Tensor:
    """``softmax(scores / T)`` along ``dim``; returned in the dtype of ``scores``.

    Stable for T in [1e-3, 1e4] in fp32, fp16 and bf16: the division and the max-shifted softmax
    run in fp32. ``temperature`` is a number or a tensor broadcastable to ``scores``.
    """
    checks.finite_tensor("scores", scores)
    z = scaled_logits(scores, temperature)  # [..., n]
    return torch.softmax(z, dim=dim).to(scores.dtype)


def entropy(scores: torch.Tensor, temperature: TempLike = 1.0, dim: int = -1) -> torch.Tensor:
    """Entropy in nats of ``softmax(scores / T)`` from the logits, never forming ``log(0)``.

    ``H = logsumexp(z) - sum_j softmax(z)_j z_j`` with ``z = scores / T``. Masked entries (``-inf``)
    carry zero weight and drop out of the sum. The row max is subtracted first (H is shift
    invariant) so the two terms do not cancel at large magnitude. Returned in fp32 or fp64.
    """
    checks.finite_tensor("scores", scores)
    z = scaled_logits(scores, temperature)  # [..., n]
    z = z - z.amax(dim=dim, keepdim=True).clamp_min(torch.finfo(z.dtype).min)  # [..., n], max 0
    lse = torch.logsumexp(z, dim=dim, keepdim=True)  # [..., 1]
    p = torch.exp(z - lse)  # [..., n]
    pz = torch.where(p > 0, p * z, torch.zeros_like(z))  # [..., n], 0 * -inf -> 0
    return (lse.squeeze(dim) - pz.sum(dim=dim)).clamp_min(0.0)  # [...]
