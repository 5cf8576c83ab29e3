"""Benchmark: one advise scoring row (one window of one spec at one length) today's way and the new
way, side by side in one run on the same machine.

* old: float32, the LM head and its log-softmax at every position (``model(ids).logits``: a
  ``[L, V]`` tensor), the kept positions read off it.
* new: what advise runs now: the dtype ``--dtype auto`` picks on this CPU (a short probe, cached),
  the decoder's hidden states, the LM head only at the positions the key-token score reads (the
  key tokens and the tail: ``head_nll(..., keep=...)``), in chunks.

One JSON line per case (model, length): seconds per row each way (median of the interleaved
repeats) and their ratio with its bootstrap interval; each path's peak extra memory (in a child
process); the new path's linear layers' GFLOP/s against ``torch.mm`` on the same shapes, threads
and dtype; the key-token perplexity each way and their relative difference against the tolerance;
the goals of issue 52 and whether each is met (row time <= 0.4x; linear layers >= 60% of the
matmul rate; peak memory of a scored forward at 16384 < 4 GiB; scores within the tolerance).

The retrieval case (``--retrieval smollm2:8192:8``, :mod:`retrieval_cost`): keys found by generation
per second of forward time, one prefill per trial against one per haystack of k keys.

    python benchmarks/advise_cost.py [--cases tiny:512,smollm2:4096] [--repeats 3] [--threads 2]
    python benchmarks/advise_cost.py --cases '' --retrieval smollm2:8192:8 --repeats 2
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass

import torch
from _harness import BenchOptions, machine, median_interval, peak_extra_in_child, report_child
from forward_breakdown import Clock, kept_positions
from retrieval_cost import retrieval_case

from attntemp.evaluate.corpus import heldout_windows, load_text
from attntemp.evaluate.lm import head_nll
from attntemp.hf.introspect import trained_length
from attntemp.hf.loading import ModelOptions, load_model
from attntemp.utils.options import from_argv, names, option, reuse

GOAL_RATIO, GOAL_MM_SHARE, GOAL_MEMORY_16K = 0.4, 0.6, 4 * 2**30
SCORE_TOLERANCE = 0.01  # relative difference of key-token perplexity, new against float32


@dataclass(frozen=True, kw_only=True)
class CostBench(BenchOptions):
    """The cases (model:length) and how often each path is timed."""

    cases: tuple[str, ...] = option(("tiny:512", "smollm2:4096"), "model:length pairs, comma list", parse=names)
    repeats: int = reuse(BenchOptions, "repeats", 3)
    threads: int | None = reuse(ModelOptions, "threads")
    retrieval: tuple[str, ...] = option(
        (), "model:length:keys retrieval cases, comma list (trials per second, both ways)", parse=names
    )
    text: str = option("stdlib", "the retrieval haystack's text")
    child: tuple[str, ...] = option((), "internal: PATH,MODEL,L: one path's peak extra memory", parse=names)


def old_row(model, ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``[K]`` NLL at the kept positions, from every position's logits (float32, ``[L, V]``)."""
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids, use_cache=False).logits[0, :-1].float(), -1)  # [L-1, V]
        nll = -logp.gather(-1, ids[0, 1:, None]).squeeze(-1)  # [L-1]
    return nll[keep]  # [K]


def new_row(model, ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``[K]`` NLL at the kept positions: the head only there (as advise scores)."""
    with torch.no_grad():
        hidden = model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state  # [1, L, d]
        return head_nll(model, hidden, ids, keep=keep)[0, keep].float()  # [K]


def mm_gflops(tokens: int, d_in: int, d_out: int, dtype: torch.dtype, repeats: int = 3) -> float:
    """``torch.mm`` GFLOP/s on a ``[tokens, d_in] x [d_in, d_out]`` product (best of ``repeats``)."""
    a, b = torch.randn(tokens, d_in).to(dtype), torch.randn(d_in, d_out).to(dtype)  # [t, in], [in, out]
    torch.mm(a, b)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * tokens * d_in * d_out / best / 1e9


def linear_gflops(model, ids: torch.Tensor) -> float:
    """The linear layers' achieved GFLOP/s in one decoder forward (module hooks)."""
    clock = Clock(model)
    with torch.no_grad():
        model.get_decoder()(input_ids=ids, use_cache=False)
    clock.close()
    seconds = clock.seconds["linear_in_attention"] + clock.seconds["linear_mlp"]
    return clock.flops["linear"] / seconds / 1e9


def load(name: str, dtype: str, threads: int | None):
    model, tok = load_model(name, dtype=dtype, threads=threads)
    return model.eval(), tok


def inputs(model, tok, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = heldout_windows(tok, length, n=1)  # [1, L]
    return ids, kept_positions(ids, trained_length(model))


def child(spec: tuple[str, ...], threads: int | None) -> None:
    """In a fresh process: one path's peak extra memory for one row."""
    path, name, length = spec
    model, tok = load(name, "float32" if path == "old" else "auto", threads)
    ids, keep = inputs(model, tok, int(length))
    report_child(lambda: lambda: (old_row if path == "old" else new_row)(model, ids, keep))


def case(name: str, length: int, args: CostBench) -> dict:
    old_m, tok = load(name, "float32", args.threads)
    new_m, _ = load(name, "auto", args.threads)
    ids, keep = inputs(old_m, tok, length)
    fns = {"old": lambda: old_row(old_m, ids, keep), "new": lambda: new_row(new_m, ids, keep)}
    scores = {k: fn() for k, fn in fns.items()}  # also the warm-up
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(args.repeats):
        for k, fn in fns.items():  # round-robin: load drifts hit both alike
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    dtype = next(new_m.parameters()).dtype
    cfg = new_m.config
    linear = linear_gflops(new_m, ids)
    mm = mm_gflops(length, cfg.hidden_size, cfg.intermediate_size, dtype)
    memory = {k: peak_extra_in_child(__file__, k, name, str(length)) for k in fns}
    ppl = {k: math.exp(float(v.mean())) for k, v in scores.items()}
    rel = abs(ppl["new"] / ppl["old"] - 1)
    ratio = median_interval([n / o for n, o in zip(times["new"], times["old"], strict=True)])
    return {
        "model": name, "length": length, "new_dtype": str(dtype).removeprefix("torch."),
        "kept_positions": int(keep.sum()),
        "seconds_per_row": {k: median_interval(v) for k, v in times.items()}, "new_over_old": ratio,
        "peak_extra_bytes": memory, "linear_gflops": linear, "mm_gflops": mm, "linear_over_mm": linear / mm,
        "key_ppl": ppl, "key_ppl_rel_diff": rel, "max_abs_nll_diff": float((scores["new"] - scores["old"]).abs().max()),
        "tolerance": SCORE_TOLERANCE,
        "goals": {"ratio_le_0.4": ratio["median"] <= GOAL_RATIO, "linear_ge_60pct_mm": linear / mm >= GOAL_MM_SHARE,
                  "scores_within_tolerance": rel <= SCORE_TOLERANCE,
                  **({"memory_16k_lt_4gib": memory["new"] < GOAL_MEMORY_16K} if length >= 16384 else {})},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = from_argv(CostBench, argv, __doc__.split("\n\n")[0])
    if args.child:
        child(args.child, args.threads)
        return
    for spec in args.cases:
        name, length = spec.rsplit(":", 1)
        row = case(name, int(length), args)
        print(json.dumps({"benchmark": "advise_cost", **row, "threads": torch.get_num_threads(), "machine": machine()}))
    for spec in args.retrieval:
        name, length, keys = spec.split(":")
        model, tok = load(name, "auto", args.threads)
        row = retrieval_case(model, tok, load_text(args.text), int(length), int(keys), args.repeats)
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        print(json.dumps({"benchmark": "advise_cost", "model": name, "dtype": dtype, **row,
                          "threads": torch.get_num_threads(), "machine": machine()}))  # fmt: skip


if __name__ == "__main__":
    main()
