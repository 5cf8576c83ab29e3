"""LongRoPE's evolutionary search over per-frequency RoPE factors, on a budget of forwards.

The baseline for gradient-learned factors (:mod:`attntemp.tune.gradient` with ``rope_factors=
"learn"``): the same factors (``d/2``, shared by every layer), the same objective (next-token loss
of the predictions past the trained length on the same windows) and a stated number of window
forwards. Followed from microsoft/LongRoPE ``evolution/algorithms/genetic_base.py`` (the loop) and
``dim_mono.py`` (the operators, :mod:`attntemp.ops.rope.factors`), Ding et al., arXiv:2402.13753,
Sec. 3.2 / Alg. 1: the population starts from the initial factors (YaRN, PI, ...) and mutations of
them; each generation keeps the best ``parents``, adds ``mutations`` mutants of random parents and
``crossovers`` children of two parents (a failed crossover mutates its first parent instead);
factors on a 0.01 grid in ``[1, s]``, non-decreasing over the pairs. Their defaults (population 64,
40 generations of 16 + 16 children, parents 32: 1344 evaluations) are scaled to the budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..evaluate import lm
from ..hf.rope_factors import LearnableRopeFactors, rope_factors
from ..ops.rope import factors as ops
from ..utils import checks


@dataclass(frozen=True)
class Evolution:
    """The best factors found, their loss, and every evaluation as ``(factors, loss)``."""

    factors: tuple[float, ...]
    loss: float
    history: tuple[tuple[tuple[float, ...], float], ...]
    forwards: int


def _sizes(budget: int, windows: int, population: int) -> tuple[int, int, int]:
    """(population, children per generation, generations) within ``budget`` window forwards."""
    evaluations = budget // windows
    if evaluations < 4:
        raise ValueError(
            f"budget={budget} forwards over {windows} windows allows {evaluations} evaluations; expected >= 4"
        )
    population = min(population, evaluations)
    children = max(2, population // 2)  # LongRoPE: 16 mutations + 16 crossovers for a population of 64
    return population, children, (evaluations - population) // children


def evolve_rope_factors(
    model: nn.Module,
    ids: torch.Tensor,
    factors: LearnableRopeFactors,
    budget: int,
    population: int = 8,
    step: float = 0.01,
    seed: int = 0,
) -> Evolution:
    """Search ``factors``' values (started from their current ones) by LongRoPE's evolution on the
    mean next-token loss of ``ids`` ``[N, L]`` past the trained length, ``budget`` window forwards
    in all (each evaluation scores all N windows). The model must be patched (or plain) with no
    other RoPE change; ``factors`` is left at the best found."""
    checks.positive_int("budget", budget)
    checks.positive("step", step)
    rng = np.random.default_rng(seed)
    high = max(factors.factor, float(factors.factors().detach().max()))
    start = factors.trained_length
    size, children, generations = _sizes(budget, ids.shape[0], checks.positive_int("population", population))
    seen: dict[tuple[float, ...], float] = {}

    @torch.no_grad()
    def score(f: np.ndarray) -> float:
        key = tuple(round(float(v), 6) for v in f)
        if key not in seen:
            factors.log_factor.copy_(torch.as_tensor(np.log(f), dtype=factors.log_factor.dtype))
            seen[key] = float(lm.token_nll(model, ids, start).mean())
        return seen[key]

    def fresh(parent: np.ndarray) -> np.ndarray:
        for _ in range(20):  # LongRoPE retries until the child is new
            child = ops.mutate(parent, rng, high, step)
            if tuple(round(float(v), 6) for v in child) not in seen:
                return child
        return child

    with rope_factors(model, factors):
        first = ops.on_grid(factors.factors().detach().double().cpu().numpy(), high, step)
        pool = [first] + [fresh(first) for _ in range(size - 1)]
        ranked = sorted(pool, key=score)
        for _ in range(generations):
            parents = ranked[: max(2, size // 2)]
            kids = [fresh(parents[rng.integers(len(parents))]) for _ in range(children // 2)]
            for _ in range(children - children // 2):
                a, b = sorted(rng.choice(len(parents), 2, replace=False))
                child = ops.crossover(parents[a], parents[b], rng)
                kids.append(fresh(parents[a]) if child is None else child)
            ranked = sorted(parents + kids, key=score)
        best = ranked[0]
        loss = score(best)
    factors.log_factor.data.copy_(torch.as_tensor(np.log(best), dtype=factors.log_factor.dtype))
    history = tuple((k, v) for k, v in seen.items())
    return Evolution(tuple(float(v) for v in best), loss, history, len(seen) * ids.shape[0])
