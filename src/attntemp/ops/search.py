"""One-dimensional search: a grid that follows its best point past the bracket's edge, golden-section
minimisation (calibration, global tuning) and bisection in ln m for a decreasing function (entropy
matching), vectorised over entries."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

INV_PHI = (math.sqrt(5) - 1) / 2


def best_at_edge(ys: Sequence[float]) -> bool:
    """Whether a grid's lowest value is at one of its ends, strictly below every interior point
    (the optimum may lie outside the grid; a flat grid is not at its edge)."""
    return min(ys[0], ys[-1]) < min(ys[1:-1], default=math.inf)


def widen_grid(
    f: Callable[[list[float]], list[float]], xs: Sequence[float], ys: Sequence[float], steps: int
) -> tuple[list[float], list[float]]:
    """Follow a grid's best point past its edge: while the lowest value is at an end point
    (:func:`best_at_edge`), evaluate ``f`` one grid step beyond that end, at most ``steps`` times.
    ``xs`` ascending and evenly spaced (ln m for a multiplier), at least 2 points; ``f`` maps points
    to values. A golden-section search bracketed by the best point's neighbours then brackets an
    interior minimum, unless the budget ran out (``best_at_edge`` of the result says so)."""
    xs, ys = list(xs), list(ys)
    step = xs[1] - xs[0]
    for _ in range(steps):
        if not best_at_edge(ys):
            break
        if ys[0] <= ys[-1]:  # the low end is the best: one step below it
            x = xs[0] - step
            xs, ys = [x, *xs], [f([x])[0], *ys]
        else:
            x = xs[-1] + step
            xs, ys = [*xs, x], [*ys, f([x])[0]]
    return xs, ys


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


def grid_then_golden(
    f: Callable[[list[float]], list[float]], lo: float, hi: float, grid: int, iters: int, widen: int = 0
) -> tuple[float, list[float], list[float]]:
    """Minimise ``f`` from an even grid of ``grid`` points over ``[lo, hi]`` (one call, so a batched
    ``f`` fills its batches), followed past an edge by :func:`widen_grid`, then refined by
    :func:`golden_section` between the best grid point's neighbours; the grid point is kept when
    the refinement found nothing lower. ``f`` maps points to values. Returns the best point, the
    grid's points and their values (Kiefer 1953)."""
    xs = np.linspace(lo, hi, grid).tolist()
    xs, ys = widen_grid(f, xs, f(xs), widen)
    i = min(range(len(ys)), key=ys.__getitem__)
    best = golden_section(lambda x: f([x])[0], xs[max(0, i - 1)], xs[min(len(xs) - 1, i + 1)], iters)
    return (best if f([best])[0] <= ys[i] else xs[i]), xs, ys


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
