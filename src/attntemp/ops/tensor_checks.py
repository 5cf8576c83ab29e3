"""Checks on tensors (the number checks, torch-free, are :mod:`attntemp.utils.checks`)."""

from __future__ import annotations

import torch


def positive_tensor(name: str, value: torch.Tensor) -> torch.Tensor:
    """Raise unless every entry of ``value`` is finite and > 0."""
    if not torch.is_tensor(value):
        raise ValueError(f"{name} must be a tensor or a number, got {type(value).__name__}")
    bad = ~torch.isfinite(value) | (value <= 0)
    if bool(bad.any()):
        first = value[bad].flatten()[0].item()
        raise ValueError(f"{name} has a value {first!r} at {int(bad.sum())} place(s); expected finite numbers > 0")
    return value


def finite_tensor(name: str, value: torch.Tensor) -> torch.Tensor:
    """Raise if ``value`` holds NaN (inf is allowed: -inf is a masked logit)."""
    if bool(torch.isnan(value).any()):
        raise ValueError(f"{name} holds NaN at {int(torch.isnan(value).sum())} place(s)")
    return value
