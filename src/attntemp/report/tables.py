"""The reference tables printed by ``attntemp tables``: YaRN's factors and what T does to weights."""

from __future__ import annotations

import math

import torch

from ..ops.schedules import yarn_mscale, yarn_multiplier, yarn_sqrt_multiplier
from ..ops.softmax import entropy, tempered_softmax
from ..utils.tables import markdown_table
from .config import TablesConfig as TablesConfig  # read here before its config module

YARN_SCALES = (2, 4, 8, 16, 32, 64, 128)
TEMPERATURES = (0.25, 0.5, 0.8, 1.0, 1.25, 2.0, 4.0)


def yarn_table(scales: tuple[float, ...] = YARN_SCALES) -> list[dict[str, float]]:
    """Per scale factor s: t = 0.1 ln s + 1 (on cos/sin), m = t^2, T = 1/m, sqrt(t) variant."""
    rows = []
    for s in scales:
        t = yarn_mscale(s)
        m = yarn_multiplier(s)
        rows.append(
            {
                "s": s,
                "attention_factor": t,
                "multiplier": m,
                "temperature": 1 / m,
                "sqrt_variant": yarn_sqrt_multiplier(s),
            }
        )
    return rows


def temperature_table(
    temperatures: tuple[float, ...] = TEMPERATURES, gap: float = 5.0, n: int = 64
) -> list[dict[str, float]]:
    """Per T: the weight ratio of two logits ``gap`` apart (e^(gap/T)), and the entropy of a
    fixed random logit row of length ``n`` relative to ln n."""
    scores = torch.randn(n, generator=torch.Generator().manual_seed(0)) * 2.0  # [n]
    rows = []
    for t in temperatures:
        pair = tempered_softmax(torch.tensor([gap, 0.0]), t)  # [2]
        rows.append(
            {
                "temperature": t,
                "multiplier": 1 / t,
                "ratio": float(pair[0] / pair[1]),
                "entropy_over_ln_n": float(entropy(scores, t)) / math.log(n),
            }
        )
    return rows


def markdown(rows: list[dict[str, float]], digits: int = 4) -> str:
    """A markdown table of ``rows`` (same keys in each)."""
    keys = list(rows[0])
    cells = [[f"{r[k]:.{digits + 1}g}" if isinstance(r[k], float) else r[k] for k in keys] for r in rows]
    return markdown_table(keys, cells)
