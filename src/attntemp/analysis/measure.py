"""``measure``: attention statistics per layer, head and query-position bucket, in one forward.

A probe rides on attntemp's attention function: each layer's q (after RoPE and any QK-norm), k
and multiplier go to :func:`attntemp.ops.attention_stats.attention_stats`, block by block, while the forward
itself runs through SDPA. Nothing of size L x L per layer is kept; memory is bounded by the block
budget. Inputs are one unpadded sequence per batch row.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..hf.introspect import attention_modules, model_geometry, text_config
from ..hf.patch import probing, run_decoder
from ..ops.attention_stats import STATS, attention_stats
from ..ops.spec import TemperatureSpec
from ..utils import checks


@dataclass(frozen=True)
class StatOptions:
    """What the statistics count: the first ``sink_tokens`` keys as the sink and the last
    ``recent_tokens`` as recent, over ``n_buckets`` query-position buckets; ``budget_bytes``: the
    most bytes of attention weights materialised at once (blocks of queries beyond it)."""

    sink_tokens: int = 4
    recent_tokens: int = 64
    n_buckets: int = 16
    budget_bytes: int = 64 * 2**20

    def __post_init__(self) -> None:
        checks.positive_int("sink_tokens", self.sink_tokens)
        checks.positive_int("recent_tokens", self.recent_tokens)


def bucket_edges(length: int, positions: str | Sequence[int] = "buckets", n_buckets: int = 16) -> list[int]:
    """Query-position bucket edges: ``n_buckets`` equal-width buckets, or the given edges."""
    if isinstance(positions, str):
        checks.choice("positions", positions, ("buckets", "all"))
        n = length if positions == "all" else min(checks.positive_int("n_buckets", n_buckets), length)
        return sorted({round(i * length / n) for i in range(n + 1)})
    edges = sorted({int(e) for e in positions} | {0, length})
    return [e for e in edges if 0 <= e <= length]


def _bucket_means(values: torch.Tensor, edges: list[int]) -> np.ndarray:
    """``[B, H, L]`` -> ``[H, buckets]``: nan-aware mean over batch and each bucket's queries."""
    v = values.float()
    out = [
        torch.nanmean(v[..., a:b].transpose(0, 1).reshape(v.shape[1], -1), dim=-1) for a, b in itertools.pairwise(edges)
    ]
    return torch.stack(out, dim=-1).numpy()  # [H, buckets]


@dataclass
class AttentionStats:
    """Statistics ``[layers, heads, buckets]`` per name in ``attntemp.ops.attention_stats.STATS``."""

    stats: dict[str, np.ndarray]
    bucket_edges: list[int]
    length: int
    sink_tokens: int
    recent_tokens: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.stats["entropy"].shape)

    def by_head(self, name: str = "entropy", start: int = 0) -> np.ndarray:
        """``[layers, heads]``: mean over query buckets starting at or after ``start``,
        weighted by bucket width."""
        checks.choice("name", name, STATS)
        e = np.asarray(self.bucket_edges)
        keep = e[:-1] >= start
        if not keep.any():
            raise ValueError(f"start={start} is past the last bucket (edges {self.bucket_edges})")
        w = (e[1:] - e[:-1])[keep].astype(float)
        v = self.stats[name][..., keep]
        ok = ~np.isnan(v)
        return (np.where(ok, v, 0) * w).sum(-1) / np.maximum((ok * w).sum(-1), 1e-12)

    @classmethod
    def average(cls, runs: Sequence[AttentionStats]) -> AttentionStats:
        """The mean of equal-shaped runs (e.g. one per document): what one batched ``measure`` of
        the same equal-length rows gives."""
        first = runs[0]
        if any(r.bucket_edges != first.bucket_edges or r.shape != first.shape for r in runs):
            raise ValueError("runs must share bucket edges and shape to be averaged")
        stats = {k: np.nanmean(np.stack([r.stats[k] for r in runs]), axis=0) for k in first.stats}
        meta = {**first.meta, "batch": sum(int(r.meta.get("batch", 1)) for r in runs)}
        return cls(stats, first.bucket_edges, first.length, first.sink_tokens, first.recent_tokens, meta)

    def compare(
        self, other: AttentionStats, mass_threshold: float = 0.1, entropy_threshold: float = 0.05
    ) -> StatsComparison:
        """Per-head shift of ``self`` (e.g. a long run) against ``other`` (the trained length)."""
        if self.shape[:2] != other.shape[:2]:
            raise ValueError(f"stats shapes differ: {self.shape[:2]} vs {other.shape[:2]} (layers, heads)")
        d_ent = self.by_head("norm_entropy") - other.by_head("norm_entropy")
        d_recent = self.by_head("recent_mass") - other.by_head("recent_mass")
        collapse = d_recent > mass_threshold
        diffuse = (d_ent > entropy_threshold) & ~collapse
        return StatsComparison(
            entropy_shift=self.by_head("entropy") - other.by_head("entropy"),
            norm_entropy_shift=d_ent,
            recent_mass_shift=d_recent,
            collapsed=[(int(layer), int(head)) for layer, head in np.argwhere(collapse)],
            diffused=[(int(layer), int(head)) for layer, head in np.argwhere(diffuse)],
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "attntemp.AttentionStats/1",
            "length": self.length,
            "sink_tokens": self.sink_tokens,
            "recent_tokens": self.recent_tokens,
            "bucket_edges": self.bucket_edges,
            "meta": self.meta,
            "stats": {k: np.where(np.isnan(v), np.array(None), v).tolist() for k, v in self.stats.items()},
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict()))
        return path

    @classmethod
    def load(cls, path: str | Path) -> AttentionStats:
        d = json.loads(Path(path).read_text())
        stats = {k: np.array(v, dtype=float) for k, v in d["stats"].items()}
        return cls(stats, d["bucket_edges"], d["length"], d["sink_tokens"], d["recent_tokens"], d["meta"])


@dataclass(frozen=True)
class StatsComparison:
    """Per-head ``[layers, heads]`` shifts, and the heads flagged as collapsing onto recent tokens
    (recent mass up by more than the threshold) or diffusing (normalised entropy up)."""

    entropy_shift: np.ndarray
    norm_entropy_shift: np.ndarray
    recent_mass_shift: np.ndarray
    collapsed: list[tuple[int, int]]
    diffused: list[tuple[int, int]]

    def summary(self) -> dict[str, Any]:
        return {
            "mean_entropy_shift": float(self.entropy_shift.mean()),
            "mean_norm_entropy_shift": float(self.norm_entropy_shift.mean()),
            "mean_recent_mass_shift": float(self.recent_mass_shift.mean()),
            "collapsed_heads": len(self.collapsed),
            "diffused_heads": len(self.diffused),
        }


class _Probe:
    """Collects per-layer statistics during the forward."""

    def __init__(self, edges: list[int], opts: StatOptions, bar: tqdm):
        self.edges, self.sink, self.recent = edges, opts.sink_tokens, opts.recent_tokens
        self.budget, self.bar = opts.budget_bytes, bar
        self.layers: dict[int, dict[str, np.ndarray]] = {}

    def __call__(self, module, query, key, m, scaling, kwargs):
        b, h, lq, _ = query.shape
        mult = None if m is None else m.float().expand(b, h, lq) if m.dim() > 1 else m
        out = attention_stats(
            query.detach(),
            key.detach(),
            mult,
            scaling,
            kwargs.get("softcap"),
            kwargs.get("sliding_window"),
            self.sink,
            self.recent,
            self.budget,
        )
        self.layers[module.layer_idx] = {k: _bucket_means(v, self.edges) for k, v in out.items()}
        self.bar.update(1)


@torch.no_grad()
def measure(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    spec: TemperatureSpec | None = None,
    positions: str | Sequence[int] = "buckets",
    opts: StatOptions | None = None,
    progress: bool = True,
) -> AttentionStats:
    """Attention statistics of ``model`` on ``input_ids`` ``[B, L]`` (patched with ``spec``, if any):
    entropy, normalised entropy, largest weight, sink and recent mass, mean distance, per layer,
    head and query-position bucket (``opts``: :class:`StatOptions`, its defaults without one). See
    :mod:`attntemp.ops.attention_stats` for the definitions."""
    opts = opts or StatOptions()
    length = int(input_ids.shape[-1])
    edges = bucket_edges(length, positions, opts.n_buckets)
    mods = attention_modules(model)
    with tqdm(total=len(mods), desc=f"measure L={length}", disable=not progress, leave=False) as bar:
        probe = _Probe(edges, opts, bar)
        with probing(model, spec or TemperatureSpec(), probe):
            run_decoder(model, input_ids)
    stats = {k: np.stack([probe.layers[i][k] for i in sorted(probe.layers)]) for k in STATS}
    cfg = text_config(model)
    meta = {
        "model_type": cfg.model_type,
        "trained_length": model_geometry(model).trained_length,
        "spec": None if spec is None else spec.to_dict(),
        "batch": int(input_ids.shape[0]),
    }
    return AttentionStats(stats, edges, length, opts.sink_tokens, opts.recent_tokens, meta)
