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


def head_entropy(seen: dict, m: torch.Tensor, start: int) -> torch.Tensor:
    """Mean entropy ``[H]`` of queries at positions >= ``start`` under per-head multipliers m."""
    q = seen["q"][:, :, start:]  # [B, H, Lq', D]
    st = attention_stats(q, seen["k"], m.reshape(1, -1, 1), seen["scaling"], seen["softcap"], seen["window"])
    return st["entropy"].mean(dim=(0, 2)).float().cpu()  # [H], on the CPU beside the tuner's tables


@dataclass(frozen=True)
class EntropyMatch:
    spec: TemperatureSpec
    reference: np.ndarray  # [L, H] entropy at the trained length
    before: np.ndarray  # [L, H] entropy at length N, multipliers 1 (with the rope)
    after: np.ndarray  # [L, H] entropy at length N with the tuned multipliers
    passes: int


@torch.no_grad()
def tune_entropy(
    model,
    ids: torch.Tensor,
    trained_length: int,
    granularity: str = "head",
    rope: dict | None = None,
    max_passes: int = 3,
    tol: float = 1e-3,
    progress: bool = True,
) -> EntropyMatch:
    """Per-head (or per-layer, or global) multipliers matching tail entropy at ``ids``' length to
    the entropy at the trained length. ``ids`` ``[B, N]`` with N > trained length."""
    checks.choice("granularity", granularity, GRANULARITIES)
    n_layers = len(attention_modules(model))
    ref_stats = measure(model, ids[:, :trained_length], positions=[trained_length // 2], progress=False)
    ref = torch.tensor(ref_stats.by_head("entropy", start=trained_length // 2), dtype=torch.float32)
    table = torch.ones(n_layers, ref.shape[1])  # [layers, H]
    after = torch.full_like(table, float("nan"))  # [layers, H] tail entropy at the matched m, set by the pass
    passes = 0
    for passes in range(1, max_passes + 1):
        old = table.clone()
        with tqdm(total=n_layers, desc=f"entropy match pass {passes}", disable=not progress, leave=False) as bar:
            _match_pass(model, ids, rope, ref, table, after, trained_length, granularity, bar)
        if granularity != "global":
            break  # exact after one ordered pass: layer l saw the matched layers below it
        table[:] = table.mean()  # one value: the mean of the per-layer matches, the next pass's m
        if (table.log() - old.log()).abs().max() < tol:
            break
    spec = TemperatureSpec(heads=table.tolist(), rope=rope)
    before = measure(model, ids, TemperatureSpec(rope=rope), positions=[trained_length], progress=False)
    after_heads: torch.Tensor | np.ndarray = after  # [layers, H]
    if granularity == "global":  # the last pass ran at the previous m: measure at the final one
        after_heads = measure(model, ids, spec, positions=[trained_length], progress=False).by_head(
            "entropy", start=trained_length
        )
    return EntropyMatch(
        spec,
        ref.numpy(),
        before.by_head("entropy", start=trained_length),
        np.asarray(after_heads, dtype=np.float64),
        passes,
    )


def _match_layer(seen: dict, ref: torch.Tensor, start: int, granularity: str) -> torch.Tensor:
    h = ref.shape[0]
    if granularity == "head":
        return bisect_log_m(lambda m: head_entropy(seen, m, start), ref)
    target = ref.mean().reshape(1)
    m = bisect_log_m(lambda m: head_entropy(seen, m.expand(h), start).mean().reshape(1), target)
    return m.expand(h)


def _match_pass(
    model,
    ids: torch.Tensor,
    rope: dict | None,
    ref: torch.Tensor,
    table: torch.Tensor,
    after: torch.Tensor,
    start: int,
    granularity: str,
    bar: tqdm,
) -> None:
    """One forward: each layer's probe writes its matched multipliers into ``table`` ``[layers, H]``
    and its tail entropy at them into ``after``, and runs its own attention with them, so every
    layer sees the matched layers below it. For the global match every layer runs at the current
    global m (the mean of ``table``) instead, and ``after`` is left to the caller."""
    glob = granularity == "global"

    def probe(module, query, key, m, scaling, kwargs):
        i = module.layer_idx
        seen = _seen(query, key, scaling, kwargs)
        table[i] = _match_layer(seen, ref[i], start, granularity)  # [H]
        if not glob:  # the global pass runs at the previous m: its entropy is measured afterwards
            after[i] = head_entropy(seen, table[i], start)  # [H]
        bar.update(1)
        return None if glob else table[i].to(query.device).reshape(-1, 1)  # [H, 1]

    with probing(model, TemperatureSpec(multiplier=float(table.mean()) if glob else 1.0, rope=rope), probe):
        run_decoder(model, ids)
