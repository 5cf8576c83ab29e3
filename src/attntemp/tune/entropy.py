"""Label-free tuning by entropy matching.

Entropy matching: attention entropy falls monotonically as m = 1/T grows, so for each head the m
that brings its mean entropy over the tail queries [L0, N) at length N back to its mean entropy
over queries [L0/2, L0) at the trained length L0 is found by bisection on ln m. Layers are done
in order, each from q and k captured with the layers below already tuned (a layer's inputs depend
only on the layers below it). That order needs one forward per pass: each layer's probe matches
its heads on the q and k it receives and hands the matched m to that layer's own kernel, so the
layers above see the tuned layers below. Per head and per layer one pass is the answer (a second
would reproduce it). The global match is a fixed point: run every layer at m, match each layer,
set m to the mean of the matches, and repeat until m moves by less than ``tol`` (in ln m).

What is matched (``target``, :data:`TARGETS`), each a per-head mean over the tail queries held at
its value over queries [L0/2, L0) at the trained length:

- ``entropy``: the entropy itself (attention should stay as spread as it was trained);
- ``norm_entropy``: H / ln n over the n visible keys (as spread relative to what it could be);
- ``entropy_growth``: the entropy plus the ln n that a uniform spread of the extra keys adds,
  ``E_tail[ln n] - E_ref[ln n]`` (attention may widen with the context, no more);
- ``max_weight``: the largest weight, the maximum-probability alignment of Chi et al. 2023
  (arXiv:2311.00684), whose entropy alignment is ``entropy`` here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from ..analysis.measure import measure
from ..hf.introspect import attention_modules
from ..hf.patch import probing, run_decoder
from ..ops.attention_stats import attention_stats
from ..ops.search import bisect_log_m
from ..ops.spec import GRANULARITIES, TemperatureSpec
from ..utils import checks


class _Stop(Exception):
    pass


@torch.no_grad()
def capture_qk(model, ids: torch.Tensor, spec: TemperatureSpec, layer: int):
    """q, k, scaling and kwargs reaching ``layer``'s attention under ``spec`` (forward stopped there).

    The slow reference path: matching layer by layer on these is what the one-forward pass
    (:func:`_match_pass`) must reproduce, and the tests hold it to that."""
    seen = {}

    def probe(module, query, key, m, scaling, kwargs):
        if module.layer_idx == layer:
            seen.update(_seen(query, key, scaling, kwargs))
            raise _Stop

    with probing(model, spec, probe):
        try:
            run_decoder(model, ids)
        except _Stop:
            pass
    return seen


def _seen(query: torch.Tensor, key: torch.Tensor, scaling: float, kwargs: dict) -> dict:
    return {
        "q": query,
        "k": key,
        "scaling": scaling,
        "softcap": kwargs.get("softcap"),
        "window": kwargs.get("sliding_window"),
    }


@dataclass(frozen=True)
class Target:
    """A matching target: the statistic, its direction in m, and how far it may move from the
    reference at length N (``shift(start, N, L0)``, 0 for most)."""

    name: str
    stat: str
    sign: float  # +1 when the statistic falls as m grows (entropies), -1 when it rises (max weight)
    grows: bool = False  # entropy_growth: the reference plus E_tail[ln n] - E_ref[ln n]

    def shift(self, start: int, length: int, trained: int) -> float:
        if not self.grows:
            return 0.0
        tail = np.log(np.arange(start + 1, length + 1)).mean()  # n = position + 1 in the tail
        ref = np.log(np.arange(trained // 2 + 1, trained + 1)).mean()
        return float(tail - ref)


TARGETS = {
    t.name: t
    for t in (
        Target("entropy", "entropy", 1.0),
        Target("norm_entropy", "norm_entropy", 1.0),
        Target("entropy_growth", "entropy", 1.0, grows=True),
        Target("max_weight", "max_weight", -1.0),
    )
}


def head_stat(seen: dict, m: torch.Tensor, start: int, stat: str = "entropy") -> torch.Tensor:
    """Mean ``stat`` ``[H]`` of queries at positions >= ``start`` under per-head multipliers m."""
    q = seen["q"][:, :, start:]  # [B, H, Lq', D]
    st = attention_stats(q, seen["k"], m.reshape(1, -1, 1), seen["scaling"], seen["softcap"], seen["window"])
    return st[stat].nanmean(dim=(0, 2)).float().cpu()  # [H], on the CPU beside the tuner's tables


@dataclass(frozen=True)
class EntropyMatch:
    spec: TemperatureSpec
    reference: np.ndarray  # [L, H] entropy at the trained length
    before: np.ndarray  # [L, H] entropy at length N, multipliers 1 (with the rope)
    after: np.ndarray  # [L, H] entropy at length N with the tuned multipliers
    passes: int
    target: str = "entropy"  # reference, before and after hold this target's statistic


@dataclass(frozen=True, kw_only=True)
class EntropyOptions:
    """How :func:`tune_entropy` matches: per ``granularity`` (head, layer or global), with ``rope``
    applied, holding ``target`` (:data:`TARGETS`); the global fixed point stops after
    ``max_passes`` or when m moves by less than ``tol`` in ln m."""

    granularity: str = "head"
    rope: dict | None = None
    target: str = "entropy"
    max_passes: int = 3
    tol: float = 1e-3
    progress: bool = True

    def __post_init__(self) -> None:
        checks.choice("granularity", self.granularity, GRANULARITIES)
        checks.choice("target", self.target, TARGETS)

    @property
    def goal(self) -> Target:
        return TARGETS[self.target]


@dataclass
class _Tables:
    """The matching's tables ``[layers, H]``: the reference to hit, the matched m, the statistic after."""

    ref: torch.Tensor
    m: torch.Tensor
    after: torch.Tensor


@torch.no_grad()
def tune_entropy(model, ids: torch.Tensor, trained_length: int, opts: EntropyOptions | None = None) -> EntropyMatch:
    """Per-head (or per-layer, or global) multipliers matching the tail's ``target`` statistic at
    ``ids``' length to its value at the trained length (see :data:`TARGETS`). ``ids`` ``[B, N]``
    with N > trained length; :class:`EntropyOptions` says how (default: per head, entropy)."""
    opts = opts or EntropyOptions()
    goal, granularity, rope = opts.goal, opts.granularity, opts.rope
    n_layers = len(attention_modules(model))
    ref_stats = measure(model, ids[:, :trained_length], positions=[trained_length // 2], progress=False)
    ref_stat = torch.tensor(ref_stats.by_head(goal.stat, start=trained_length // 2), dtype=torch.float32)
    ref = ref_stat + goal.shift(trained_length, ids.shape[1], trained_length)  # [layers, H], what the tail must hit
    table = torch.ones(n_layers, ref.shape[1])  # [layers, H]
    after = torch.full_like(table, float("nan"))  # [layers, H] tail entropy at the matched m, set by the pass
    tables = _Tables(ref, table, after)
    passes = 0
    for passes in range(1, opts.max_passes + 1):
        old = table.clone()
        with tqdm(total=n_layers, desc=f"entropy match pass {passes}", disable=not opts.progress, leave=False) as bar:
            _match_pass(model, ids, opts, tables, trained_length, bar)
        if granularity != "global":
            break  # exact after one ordered pass: layer l saw the matched layers below it
        table[:] = table.mean()  # one value: the mean of the per-layer matches, the next pass's m
        if (table.log() - old.log()).abs().max() < opts.tol:
            break
    spec = TemperatureSpec(heads=table.tolist(), rope=rope)
    before = measure(model, ids, TemperatureSpec(rope=rope), positions=[trained_length], progress=False)
    after_heads: torch.Tensor | np.ndarray = after  # [layers, H]
    if granularity == "global":  # the last pass ran at the previous m: measure at the final one
        after_heads = measure(model, ids, spec, positions=[trained_length], progress=False).by_head(
            goal.stat, start=trained_length
        )
    return EntropyMatch(
        spec,
        ref.numpy(),
        before.by_head(goal.stat, start=trained_length),
        np.asarray(after_heads, dtype=np.float64),
        passes,
        opts.target,
    )


def _match_layer(
    seen: dict, ref: torch.Tensor, start: int, granularity: str, goal: Target = TARGETS["entropy"]
) -> torch.Tensor:
    """The m per head (or one for the layer) whose tail statistic hits ``ref`` ``[H]``."""
    h = ref.shape[0]

    def f(m: torch.Tensor) -> torch.Tensor:  # decreasing in m: bisection's convention
        return goal.sign * head_stat(seen, m.expand(h), start, goal.stat)  # [H]

    if granularity == "head":
        return bisect_log_m(f, goal.sign * ref)
    m = bisect_log_m(lambda m: f(m).mean().reshape(1), goal.sign * ref.mean().reshape(1))
    return m.expand(h)


def _match_pass(model, ids: torch.Tensor, opts: EntropyOptions, tables: _Tables, start: int, bar: tqdm) -> None:
    """One forward: each layer's probe writes its matched multipliers into ``tables.m`` ``[layers, H]``
    and its tail entropy at them into ``tables.after``, and runs its own attention with them, so every
    layer sees the matched layers below it. For the global match every layer runs at the current
    global m (the mean of ``table``) instead, and ``after`` is left to the caller."""
    glob, goal, table = opts.granularity == "global", opts.goal, tables.m

    def probe(module, query, key, m, scaling, kwargs):
        i = module.layer_idx
        seen = _seen(query, key, scaling, kwargs)
        table[i] = _match_layer(seen, tables.ref[i], start, opts.granularity, goal)  # [H]
        if not glob:  # the global pass runs at the previous m: its statistic is measured afterwards
            tables.after[i] = head_stat(seen, table[i], start, goal.stat)  # [H]
        bar.update(1)
        return None if glob else table[i].to(query.device).reshape(-1, 1)  # [H, 1]

    with probing(model, TemperatureSpec(multiplier=float(table.mean()) if glob else 1.0, rope=opts.rope), probe):
        run_decoder(model, ids)
