"""Where the model breaks without a RoPE change, and how its attention moves, head by head.

At the trained length L0 and at the serving length N, with no change: the objective (key-token
perplexity by default) and the needles on the race's first windows (the same results the race
reads, so scored once), and the attention statistics of one window per length
(:func:`attntemp.analysis.measure.measure`). A head *collapses* when its attention mass on the
last ``recent_tokens`` keys, over the queries past L0 at N, is more than 0.1 above its mass at
L0, and *diffuses* when its entropy over ln(n) is more than 0.05 above (without collapsing): the
thresholds of :meth:`AttentionStats.compare`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..analysis.measure import AttentionStats, measure
from ..evaluate.corpus import heldout_windows
from ..evaluate.score import score_key
from ..evaluate.task_base import EvalContext, get_task
from ..ops.attention_stats import STATS
from ..ops.spec import TemperatureSpec
from .race import objective_label
from .records.evidence import HeadShift


def describe(task: str, metrics: dict[str, Any]) -> dict[str, str]:
    """Each metric of ``task`` with its 95% interval, in words."""
    t = get_task(task)
    return {m.name: t.describe(metrics, m.name) for m in t.metrics}


def window_attention_stats(
    model: Any, tok: Any, ctx: EvalContext, length: int, folder: Path, model_id: str, progress: bool = False
) -> AttentionStats:
    """One window's attention statistics at ``length`` (no change), kept in ``folder`` for a rerun
    under the key of what made them (the weights ``model_id``, the windows of ``ctx``, the length:
    the scores' own key, :func:`attntemp.evaluate.score.score_key`): a file made by another model,
    text or length is measured again and replaced, never read as this run's."""
    path = folder / f"attention_{length}.json"
    key = score_key(TemperatureSpec(), "attention", length, ctx, model_id)
    cached = _cached(path, key)
    if cached is not None:
        return cached
    ids = heldout_windows(tok, length, n=1, docs=ctx.docs)  # [1, L]
    with torch.no_grad():
        stats = measure(model, ids.to(model.device), TemperatureSpec(), progress=progress)
    stats.meta["key"] = key
    tmp = path.with_name(path.name + ".tmp")
    try:
        stats.save(tmp)
        tmp.replace(path)  # whole or absent
    finally:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half-written file
    return stats


ATTENTION_FILES = re.compile(r"attention_\d+\.json")  # what window_attention_stats keeps in --out


def _read(path: Path) -> AttentionStats:
    """The statistics in ``path``; a file that is not attention statistics is named in one line
    (advise does not remove it)."""
    try:
        stats = AttentionStats.load(path)
        _check_made_by_advise(stats, int(path.stem.split("_")[1]))
    except (ValueError, KeyError, TypeError, OSError, AttributeError, IndexError, RecursionError) as exc:
        why = f"{type(exc).__name__}: {str(exc)[:80]}"
        raise ValueError(
            f"out={str(path.parent)!r} holds {path.name}, which is not advise's attention statistics ({why}); "
            "move it away, or use another folder"
        ) from None
    return stats


def _check_made_by_advise(stats: AttentionStats, length: int) -> None:
    """Raise unless ``stats`` is what :func:`window_attention_stats` writes for ``length``: the key of
    the run that made it, one ``[layers, heads, buckets]`` array per statistic."""
    if not isinstance(stats.meta, dict) or not isinstance(stats.meta.get("key"), str):
        raise ValueError("no key of the advise run that made it")
    if stats.length != length:
        raise ValueError(f"its statistics are of length {stats.length}")
    shapes = {a.shape for a in stats.stats.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 3 or set(stats.stats) != set(STATS):
        raise ValueError(f"its statistics are {sorted(stats.stats)} of shapes {sorted(shapes)}")


def check_attention_files(out: str | Path) -> None:
    """Every ``attention_<L>.json`` in ``out`` read as advise would read it, before the model loads:
    a file that is not advise's attention statistics is refused then, not after the load."""
    folder = Path(out)
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            if ATTENTION_FILES.fullmatch(path.name):
                _read(path)


def _cached(path: Path, key: str) -> AttentionStats | None:
    """The statistics in ``path`` when they carry ``key``; None when absent or made by another run."""
    if not path.is_file():
        return None
    stats = _read(path)
    return stats if stats.meta.get("key") == key else None


def head_shift(long: AttentionStats, short: AttentionStats, trained: int) -> HeadShift:
    """Per head, how attention past L0 at N (queries from position ``trained`` on) differs from
    attention at L0: the shifts of entropy / ln n and of recent-token mass, and the heads that
    collapse (recent mass up by more than 0.1) or diffuse (entropy / ln n up by more than 0.05)."""
    start = trained if long.length > trained else 0
    d_ent = long.by_head("norm_entropy", start) - short.by_head("norm_entropy")  # [layers, heads]
    d_recent = long.by_head("recent_mass", start) - short.by_head("recent_mass")  # [layers, heads]
    collapse = d_recent > 0.1
    diffuse = (d_ent > 0.05) & ~collapse

    def where(mask: np.ndarray) -> tuple[tuple[int, int], ...]:
        return tuple((int(a), int(b)) for a, b in np.argwhere(mask))

    return HeadShift(
        where(collapse), where(diffuse), where(d_recent < -0.1),  # the last: attention moves away from recent tokens
        int(d_ent.size), np.round(d_ent, 4).tolist(), np.round(d_recent, 4).tolist(),
    )  # fmt: skip


def summary(
    trained: int, length: int, objective: str, at: dict[int, dict[str, dict[str, Any]]], heads: HeadShift
) -> str:
    """One paragraph in words: how the objective moves from L0 to N, and what the heads do."""
    metric = get_task(objective).objective
    lo, hi = at[trained].get(objective, {}), at[length].get(objective, {})
    moved = (
        f"{objective_label(objective).capitalize()} is {lo.get(metric, 'not scored')} at the trained length "
        f"{trained} and "
        f"{hi.get(metric, 'not scored')} at {length} without a RoPE change"
    )
    n_c, n_d, n_l = len(heads.collapsed), len(heads.diffused), len(heads.leave_recent)
    return (
        f"{moved}. From {trained} to {length} tokens (queries past {trained}), {n_c} of {heads.heads} heads "
        f"collapse onto recent tokens (recent-token mass +0.1 or more), {n_d} diffuse (entropy / ln n +0.05 or "
        f"more) and {n_l} move their attention away from the recent tokens (recent-token mass -0.1 or more)."
    )
