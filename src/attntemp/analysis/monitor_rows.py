"""One query row per sequence against the keys it sees, for the monitor: each row's last query and
its visible keys (located by absolute position: left padding, sliding-window caches), grouped so
that rows, and layers, seeing keys of one shape go through one call of
:func:`attntemp.ops.attention_stats.last_query_stacked` (one query row against every key it sees:
O(n) time and memory; with soft-capping :func:`~attntemp.ops.attention_stats.block_stats`, the
blockwise kernel of ``measure``, which is also its reference)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..ops.attention_stats import LAST_QUERY_STATS, block_stats, last_query_stacked
from .config import STEP_STATS

assert STEP_STATS == LAST_QUERY_STATS  # the kernel stacks its statistics in this order
STACK_BYTES = 2**18  # a layer whose seen keys are at most this size joins one stacked call


@dataclass(frozen=True)
class RowGroup:
    """The rows of one layer that see the same keys: their last queries ``q`` ``[b, H, 1, D]``, the
    keys they see ``k`` ``[b, Hkv, n, D]`` (a view of the cache), multipliers ``m`` ``[b, H, 1]``,
    the absolute position ``first`` of the first key seen; ``rows`` None means every row."""

    rows: list[int] | None
    q: torch.Tensor
    k: torch.Tensor
    m: torch.Tensor | None
    first: int
    scaling: float | None
    softcap: float | None

    def stack_key(self) -> tuple:
        """Groups with equal keys go through one kernel call, stacked along the batch."""
        shapes = (tuple(self.q.shape[1:]), tuple(self.k.shape[1:]), self.q.dtype, self.k.dtype)
        return (self.first, self.scaling, self.softcap, self.m is None, *shapes)


def row_groups(
    query: torch.Tensor,
    key: torch.Tensor,
    m: torch.Tensor | None,
    scaling: float | None,
    kwargs: dict,
    positions: list[int],
) -> list[RowGroup]:
    """Each row's last query (absolute position ``positions[b]``) and the keys it sees: the last
    ``min(position + 1, window, cached)`` of ``key`` ``[B, Hkv, Lk, D]``, grouped by that count."""
    b, h, lq, _ = query.shape
    lk, window = key.shape[2], kwargs.get("sliding_window")
    mult = None if m is None else m.float().expand(b, h, lq)[..., -1:]  # [B, H, 1]
    by_keys: dict[tuple[int, int], list[int]] = {}
    for row, p in enumerate(positions):
        n = min(p + 1, lk, int(window) if window else lk)  # keys row b sees
        by_keys.setdefault((n, p + 1 - n), []).append(row)
    out = []
    for (n, first), rows in by_keys.items():
        pick = slice(None) if len(rows) == b else torch.tensor(rows, device=query.device)
        q, k = query[pick, :, -1:], key[pick, :, lk - n :]  # [b, H, 1, D], [b, Hkv, n, D]
        mm = None if mult is None else mult[pick]
        out.append(RowGroup(None if len(rows) == b else rows, q, k, mm, first, scaling, kwargs.get("softcap")))
    return out


def group_stats(groups: list[RowGroup], sink_tokens: int, recent_tokens: int) -> list[dict]:
    """Statistics ``[b, H]`` of each group's rows, in order; groups with equal
    :meth:`RowGroup.stack_key` go through one kernel call."""
    buckets: dict[tuple, list[int]] = {}
    for i, g in enumerate(groups):
        buckets.setdefault(g.stack_key(), []).append(i)
    out: list[dict] = [{} for _ in groups]
    for idx in buckets.values():
        for i, st in zip(idx, _stacked([groups[i] for i in idx], sink_tokens, recent_tokens), strict=True):
            out[i] = st
    return out


def stacked_stats(groups: list[RowGroup], sink_tokens: int, recent_tokens: int) -> torch.Tensor:
    """One kernel call on groups of equal :meth:`RowGroup.stack_key`, their rows stacked in order,
    each query at the position of the last key it sees: ``[len(STEP_STATS), sum of rows, H]``."""
    g = groups[0]
    cat = (lambda ts: ts[0]) if len(groups) == 1 else torch.cat
    q, k = cat([x.q for x in groups]), cat([x.k for x in groups])  # [sum b, H, 1, D], [sum b, Hkv, n, D]
    m = None if g.m is None else cat([x.m for x in groups if x.m is not None])  # [sum b, H, 1]
    sink = max(0, sink_tokens - g.first)  # the sink is the sequence's first keys, not the window's
    if g.softcap is None:  # the single-query kernel: half the operations
        return last_query_stacked(q, k, m, g.scaling, sink, recent_tokens)  # [S, sum b, H]
    st = block_stats(q, k, k.shape[2] - 1, m, g.scaling, g.softcap, None, sink, recent_tokens)
    return torch.stack([st[n][..., 0] for n in STEP_STATS])  # [S, sum b, H]


@dataclass(frozen=True)
class Seen:
    """One layer's attention call on a recorded step, kept as it came (no tensor touched):
    ``query`` ``[B, H, Lq, D]``, ``key`` ``[B, Hkv, Lk, D]`` (the cache), ``m``, the scaling and
    transformers' kwargs."""

    query: torch.Tensor
    key: torch.Tensor
    m: torch.Tensor | None
    scaling: float | None
    kwargs: dict

    def whole(self, positions: list[int]) -> bool:
        """Whether every row (at absolute ``positions``) sees every cached key: each position the
        last key's, no window cutting them; and no soft-capping, small keys. Such layers go
        through :func:`whole_stats`."""
        window, lk = self.kwargs.get("sliding_window"), self.key.shape[2]
        small = self.key.nbytes <= STACK_BYTES and self.kwargs.get("softcap") is None
        return small and (not window or int(window) >= lk) and all(p + 1 == lk for p in positions)

    def groups(self, positions: list[int]) -> list[RowGroup]:
        """Its rows grouped by the keys they see (:func:`row_groups`)."""
        return row_groups(self.query, self.key, self.m, self.scaling, self.kwargs, positions)

    def stack_key(self) -> tuple:
        return (tuple(self.key.shape), tuple(self.query.shape[:2]), self.key.dtype, self.scaling, self.m is None)


def whole_stats(seen: list[Seen], sink_tokens: int, recent_tokens: int) -> torch.Tensor:
    """The usual recorded step: layers whose rows all see every cached key (:meth:`Seen.whole`,
    equal :meth:`Seen.stack_key`) in one :func:`last_query_stacked` call, their last queries and
    keys stacked along the batch (one copy of the keys, no per-layer indexing):
    ``[len(STEP_STATS), layers * B, H]``, layer-major."""
    q = torch.cat([s.query[:, :, -1:] for s in seen])  # [L*B, H, 1, D]
    k = torch.cat([s.key for s in seen])  # [L*B, Hkv, n, D]
    m = None
    if seen[0].m is not None:
        b, h, lq = seen[0].query.shape[:3]
        m = torch.cat([s.m.float().expand(b, h, lq)[..., -1:] for s in seen if s.m is not None])  # [L*B, H, 1]
    return last_query_stacked(q, k, m, seen[0].scaling, sink_tokens, recent_tokens)  # [S, L*B, H]


def _stacked(groups: list[RowGroup], sink_tokens: int, recent_tokens: int) -> list[dict]:
    st = stacked_stats(groups, sink_tokens, recent_tokens).split([x.q.shape[0] for x in groups], 1)  # [S, b, H]
    return [dict(zip(STEP_STATS, part, strict=True)) for part in st]


def assemble(groups: list[RowGroup], stats: list[dict], batch: int) -> dict[str, torch.Tensor]:
    """The per-group statistics of one layer back in row order: ``[B, H]`` each."""
    if len(groups) == 1 and groups[0].rows is None:
        return stats[0]
    out = {}
    for n in STEP_STATS:
        full = stats[0][n].new_zeros(batch, stats[0][n].shape[-1])  # [B, H]
        for g, st in zip(groups, stats, strict=True):
            full[torch.tensor(g.rows, device=full.device)] = st[n]
        out[n] = full
    return out


def last_row_stats(
    query: torch.Tensor,
    key: torch.Tensor,
    m: torch.Tensor | None,
    scaling: float | None,
    kwargs: dict,
    positions: list[int],
    sink_tokens: int = 4,
    recent_tokens: int = 64,
) -> dict[str, torch.Tensor]:
    """Statistics ``[B, H]`` of each row's last query against the keys it sees (:func:`row_groups`)."""
    groups = row_groups(query, key, m, scaling, kwargs, positions)
    return assemble(groups, group_stats(groups, sink_tokens, recent_tokens), query.shape[0])
