"""Golden-section search: the one 1-D minimiser used by calibration and tuning."""

from __future__ import annotations

import math
from collections.abc import Callable

INV_PHI = (math.sqrt(5) - 1) / 2


def golden_section(f: Callable[[float], float], lo: float, hi: float, iters: int | None = None,
                   tol: float = 1e-8) -> float:
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
