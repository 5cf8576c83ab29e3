"""One-dimensional search: golden-section minimisation (calibration, global tuning) and bisection
in ln m for a decreasing function (entropy matching), vectorised over entries."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

INV_PHI = (math.sqrt(5) - 1) / 2


def golden_section(
    f: Callable[[float], float], lo: float, hi: float, iters: int | None = None, tol: float = 1e-8
) -> float:
    """Minimise a unimodal ``f`` on ``[lo, hi]``: stop after ``iters`` steps or once the bracket is
    narrower than ``tol``; return the better of the two interior points."""
    a, b = lo, hi
    c, d = b - INV_PHI * (b - a), a + INV_PHI * (b - a)
    fc, fd = f(c), f(d)
    step = 0
    while b - a > tol and (iters is None or step < iters):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - INV_PHI * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + INV_PHI * (b - a)
            fd = f(d)
        step += 1
    return c if fc <= fd else d


def bisect_log_m(
    f: Callable[[torch.Tensor], torch.Tensor],
    target: torch.Tensor,
    bounds: tuple[float, float] = (0.2, 5.0),
    iters: int = 16,
) -> torch.Tensor:
    """Per entry, the m in ``bounds`` with ``f(m) = target`` for ``f`` decreasing in m (bisection
    on ln m, 16 halvings: m to 5e-5 relative; clamped to a bound when the target lies outside
    ``f``'s range there)."""
    lo = torch.full_like(target, math.log(bounds[0]))
    hi = torch.full_like(target, math.log(bounds[1]))
    for _ in range(iters):
        mid = (lo + hi) / 2
        too_flat = f(mid.exp()) > target  # entropy too high: sharpen (raise m)
        lo = torch.where(too_flat, mid, lo)
        hi = torch.where(too_flat, hi, mid)
    return ((lo + hi) / 2).exp()
