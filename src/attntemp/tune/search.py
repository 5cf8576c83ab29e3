"""Tuning a global multiplier m = 1/T against a task's metric: a log grid brackets the optimum in
one batched pass, then golden-section search in ln m refines it (Kiefer 1953)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..evaluate.score import Kept, score_many
from ..evaluate.tasks import EvalContext, get_task
from ..ops.search import best_at_edge, grid_then_golden
from ..ops.spec import TemperatureSpec
from ..utils import checks
from .config import SEARCH_OBJECTIVES


@dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """What :func:`tune_global` searches: m for ``objective``'s metric at ``length`` tokens with
    ``rope``, a log grid of ``grid`` points over ``bracket``, up to ``widen`` more grid steps past
    its edge while the best point is there, then ``iters`` golden-section steps."""

    length: int
    objective: str
    rope: dict | None = None
    bracket: tuple[float, float] = (0.5, 2.5)
    grid: int = 9
    iters: int = 8
    widen: int = 2
    progress: bool = False

    @property
    def most_points(self) -> int:
        """The most multipliers :func:`tune_global` evaluates: the grid, its widening, golden section."""
        return self.grid + self.widen + self.iters + 2

    def __post_init__(self) -> None:
        checks.choice("objective", self.objective, SEARCH_OBJECTIVES)
        if isinstance(self.widen, bool) or not isinstance(self.widen, int) or self.widen < 0:
            raise ValueError(
                f"widen={self.widen!r} is not allowed; expected an integer >= 0 (grid steps past the bracket)"
            )


def tune_global(
    model,
    tok,
    ctx: EvalContext,
    opts: SearchOptions,
    cache: dict[float, float] | None = None,
    kept: Kept | None = None,
) -> dict[str, Any]:
    """Best global m for the objective's metric (:class:`SearchOptions`): a log-spaced grid (in
    full batches) brackets the optimum, followed past the bracket's edge by up to ``widen`` grid
    steps while its best point is an end point (``at_edge`` in the result: still there when they
    ran out), then golden-section search in ln m refines it between the best point's neighbours (at
    most :attr:`SearchOptions.most_points` multipliers evaluated; a bar counts them). ``cache`` (m
    rounded to 6 places -> the objective, minimised: negated where higher is better) is read before
    a multiplier is evaluated and written after; ``kept`` keeps every scored multiplier (a rerun
    with the same store resumes without scoring again)."""
    task = get_task(opts.objective)
    length, rope, grid = opts.length, opts.rope, opts.grid
    store, model_id = (kept.store, kept.model_id) if kept else (None, "")
    sign = -1.0 if task.higher_is_better(task.objective) else 1.0
    cache = {} if cache is None else cache

    bar = tqdm(total=opts.most_points, desc=f"search m at L={length}", disable=not opts.progress, leave=False)

    def loss(ms: Sequence[float]) -> list[float]:
        todo = [m for m in ms if round(m, 6) not in cache]
        per = max(1, ctx.batch_size // ctx.n_docs)  # multipliers whose windows fill one batch
        for chunk in (todo[i : i + per] for i in range(0, len(todo), per)):
            specs = [TemperatureSpec(multiplier=m, rope=rope) for m in chunk]
            for m, r in zip(chunk, score_many(model, tok, specs, task.name, length, ctx, store, model_id), strict=True):
                cache[round(m, 6)] = sign * r.metrics[task.objective]
            bar.update(len(chunk))
            bar.set_postfix(m=f"{chunk[-1]:.4g}", **{task.objective: f"{sign * cache[round(chunk[-1], 6)]:.4g}"})
        return [cache[round(m, 6)] for m in ms]

    def loss_ln(xs: Sequence[float]) -> list[float]:  # the loss at ln m
        return loss(np.exp(np.asarray(xs)).tolist())

    lo, hi = (math.log(m) for m in opts.bracket)
    x, xs, ys = grid_then_golden(loss_ln, lo, hi, grid, opts.iters, opts.widen)
    best = math.exp(x)
    bar.close()
    curve = sorted((m, sign * v) for m, v in cache.items())
    edge = best_at_edge(ys)  # the widening's budget ran out with the best m still at the grid's end
    grid_ms = (math.exp(xs[0]), math.exp(xs[-1]))
    value = sign * loss([best])[0]
    return {
        "multiplier": best,
        "metric": task.objective,
        "value": value,
        "curve": curve,
        "grid": grid_ms,
        "at_edge": edge,
    }
