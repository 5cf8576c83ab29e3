"""Benchmark: generate() with the attention monitor (every token, every 8th) against without it.

The tiny model with a 512-token prompt and SmolLM2 with a 4096-token prompt, greedy, N new tokens.
Each timed call resumes from a copy of the prompt's KV cache (filled once, copied outside the
timer), so the times are the decoding the monitor rides on, not the prefill that would hide it;
the monitor compares every recorded step with a reference (shifts, flags, worst head).
Paths run round-robin (plain, every=1, every=8, plain, ...) so load drifts hit all alike; per
path the median seconds with a bootstrap 95% interval over repeats, and per ratio the median of
the paired per-repeat ratios with its bootstrap interval. Goals: <= 1.3 (every=1), <= 1.05
(every=8). SmolLM2 comes from its PyPI wheel (``load_model("smollm2")``); when that fails the
JSON says so and skips it.

    python benchmarks/monitor.py [--models tiny,smollm2] [--new-tokens N] [--repeats 7] [--threads N]
"""

from __future__ import annotations

import copy
import inspect
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from _harness import BenchOptions, machine
from model_overhead import stdlib_ids

import attntemp
from attntemp.hf.loading import ModelOptions
from attntemp.utils.options import from_argv, names, option, reuse

CONTEXT = {"tiny": 512, "smollm2": 4096}
NEW_TOKENS = {"tiny": 128, "smollm2": 32}  # per model unless --new-tokens
GOALS = {"every_1_over_plain": 1.3, "every_8_over_plain": 1.05}


@dataclass(frozen=True, kw_only=True)
class MonitorBench(BenchOptions):
    """The models and how many tokens each generates."""

    models: tuple[str, ...] = option(("tiny", "smollm2"), "models, comma list", parse=names)
    new_tokens: int | None = option(None, "tokens to generate (default: 128 for tiny, 32 for smollm2)", parse=int)
    repeats: int = reuse(BenchOptions, "repeats", 7)
    threads: int | None = reuse(ModelOptions, "threads")


def median_interval(x: list[float], resamples: int = 2000, seed: int = 0) -> dict[str, float]:
    """The median with its percentile bootstrap 95% interval."""
    a = np.asarray(x)
    idx = np.random.default_rng(seed).integers(0, len(a), (resamples, len(a)))
    lo, hi = np.quantile(np.median(a[idx], axis=1), [0.025, 0.975])
    return {"median": float(np.median(a)), "low": float(lo), "high": float(hi)}


def paths(model, ids: torch.Tensor, new_tokens: int, ref) -> dict[str, Callable[[], float]]:
    """Each path returns its own decoding time: the filled cache is copied before the timer starts.
    The monitor runs with a reference, so every step also computes its shifts and flags."""
    # transformers >= 5.2x names the KV cache ``cache``; earlier 5.x releases ``past_key_values``
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():
        cache = getattr(model(ids[:, :-1], use_cache=True), name)  # the prompt but its last token

    def run(every: int | None) -> float:
        kw = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False, "pad_token_id": 0}
        kw[name] = copy.deepcopy(cache)
        t0 = time.perf_counter()
        if every is None:
            model.generate(ids, **kw)
        else:
            with attntemp.monitor(model, ref, every=every):
                model.generate(ids, **kw)
        return time.perf_counter() - t0

    return {"plain": lambda: run(None), "every_1": lambda: run(1), "every_8": lambda: run(8)}


def interleaved(fns: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    for fn in fns.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(fn())
    return times


def bench(name: str, new_tokens: int, repeats: int) -> dict:
    try:
        model, tok = attntemp.load_model(name)
    except (OSError, ValueError) as exc:
        return {"model": name, "skipped": f"could not load {name}: {exc}"}
    ids = stdlib_ids(tok, CONTEXT[name])  # [1, L]
    # the reference's length changes nothing of the per-step cost: 4 rows of 256 tokens keep it quick
    ref = attntemp.monitor.reference(model, "stdlib", 256, tokenizer=tok, n_docs=4)
    times = interleaved(paths(model, ids, new_tokens, ref), repeats)
    ratios = {
        f"{p}_over_plain": median_interval([a / b for a, b in zip(times[p], times["plain"], strict=True)])
        for p in ("every_1", "every_8")
    }
    return {
        "model": name,
        "context": int(ids.shape[1]),
        "new_tokens": new_tokens,
        "seconds": {k: median_interval(v) for k, v in times.items()},
        "ms_per_token": {k: 1000 * statistics.median(v) / new_tokens for k, v in times.items()},
        "ratios": ratios,
        "goals_met": {k: ratios[k]["median"] <= g for k, g in GOALS.items()},
    }


def main(argv: list[str] | None = None) -> None:
    args = from_argv(MonitorBench, argv, __doc__.split("\n\n")[0])
    if args.threads:
        torch.set_num_threads(args.threads)
    results = [bench(m, args.new_tokens or NEW_TOKENS.get(m, 32), args.repeats) for m in args.models]
    print(json.dumps({"benchmark": "monitor", "device": "cpu", "threads": torch.get_num_threads(),
                      "repeats": args.repeats, "goals": {k: f"<= {g}" for k, g in GOALS.items()}, "machine": machine(),
                      "results": results}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
