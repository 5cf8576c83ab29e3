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

``--attention probe,blocked`` also times the new row on the model patched with an identity spec,
its attention kernel chosen by :mod:`attntemp.hf.probes.kernel` (``probe``) or forced (``sdpa``,
``blocked``), each against the new row (today's: SDPA) paired per repeat, with its key-token
perplexity (issue 63: a row at 16384 <= 0.5x today's); ``--no-old`` leaves out the float32 row.

The retrieval case (``--retrieval smollm2:8192:8``, :mod:`retrieval_cost`): keys found by generation
per second of forward time, one prefill per trial against one per haystack of k keys.

The shared-prefill case (``--shared tiny:512:4``, the default; :mod:`shared_prefill_cost`): seconds of
one ``multikey_keys`` row (advise ``--shared-prefill``) over a ``key_tokens`` row and a ``multikey``
row (what the race scores without it), paired per repeat; ``--shared ''`` leaves it out.

    python benchmarks/advise_cost.py [--cases tiny:512,smollm2:4096] [--repeats 3] [--threads 2]
    python benchmarks/advise_cost.py --cases '' --retrieval smollm2:8192:8 --repeats 2
    python benchmarks/advise_cost.py --cases smollm2:16384 --no-old --attention probe,blocked
    python benchmarks/advise_cost.py --cases '' --shared tiny:512:4,smollm2:8192:8 --repeats 5
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass

import torch
from _harness import BenchOptions, machine, median_interval, peak_extra_in_child, report_child
from forward_breakdown import Clock, kept_positions
from retrieval_cost import retrieval_case
from shared_prefill_cost import shared_case

from attntemp.evaluate.corpus import heldout_windows, load_text
from attntemp.evaluate.lm import head_nll
from attntemp.hf.introspect import trained_length
from attntemp.hf.loading import ModelOptions, load_model
from attntemp.hf.patch import patch
from attntemp.hf.probes import kernel as kernel_probe
from attntemp.ops.spec import TemperatureSpec
from attntemp.utils.options import from_argv, names, option, reuse

GOAL_RATIO, GOAL_MM_SHARE, GOAL_MEMORY_16K, GOAL_ATTENTION_16K = 0.4, 0.6, 4 * 2**30, 0.5
KERNELS = ("probe", *kernel_probe.KERNELS)  # --attention: by probe, or one forced
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
    shared: tuple[str, ...] = option(
        ("tiny:512:4",),
        "model:length:keys shared-prefill cases, comma list (one multikey_keys row against a key_tokens and a "
        "multikey row; '' for none)",
        parse=names,
    )
    text: str = option("stdlib", "the retrieval haystack's text")
    child: tuple[str, ...] = option((), "internal: PATH,MODEL,L: one path's peak extra memory", parse=names)
    attention: tuple[str, ...] = option(
        (), "also the new row patched, its attention kernel by probe or forced: " + ", ".join(KERNELS), parse=names
    )
    old: bool = option(True, "leave out today's float32 row", flag="--no-old", invert=True)

    def __post_init__(self) -> None:
        if set(self.attention) - set(KERNELS):
            raise ValueError(f"attention={list(self.attention)}: expected some of {', '.join(KERNELS)}")


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


def kernel_row(model, ids: torch.Tensor, keep: torch.Tensor, kernel: str) -> torch.Tensor:
    """:func:`new_row` on ``model`` patched with an identity spec, its attention kernel ``kernel``
    (``probe``: what :func:`attntemp.hf.probes.kernel.pick_kernel` chooses; else forced)."""
    before = os.environ.pop(kernel_probe.ENV, None)
    if kernel != "probe":
        os.environ[kernel_probe.ENV] = kernel
    try:
        with patch(model, TemperatureSpec()):
            return new_row(model, ids, keep)
    finally:
        os.environ.pop(kernel_probe.ENV, None)
        if before is not None:
            os.environ[kernel_probe.ENV] = before


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


def rows(name: str, length: int, args: CostBench):
    """The models, the inputs and each path's row function (``old`` unless ``--no-old``, ``new``,
    ``new_KERNEL`` per ``--attention``)."""
    new_m, tok = load(name, "auto", args.threads)
    old_m = load(name, "float32", args.threads)[0] if args.old else None
    ids, keep = inputs(new_m, tok, length)
    fns = {"old": lambda: old_row(old_m, ids, keep)} if args.old else {}
    fns["new"] = lambda: new_row(new_m, ids, keep)
    for kernel in args.attention:
        fns[f"new_{kernel}"] = lambda kernel=kernel: kernel_row(new_m, ids, keep, kernel)
    return new_m, ids, keep, fns


def interleaved(fns: dict, repeats: int) -> tuple[dict[str, torch.Tensor], dict[str, list[float]]]:
    """Each path's scores (also the warm-up) and seconds per repeat, round-robin: load drifts hit all alike."""
    scores = {k: fn() for k, fn in fns.items()}
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return scores, times


def paired(times: dict[str, list[float]], path: str, base: str) -> dict[str, float]:
    return median_interval([n / o for n, o in zip(times[path], times[base], strict=True)])


def case(name: str, length: int, args: CostBench) -> dict:
    new_m, ids, keep, fns = rows(name, length, args)
    scores, times = interleaved(fns, args.repeats)
    dtype = next(new_m.parameters()).dtype
    cfg = new_m.config
    linear = linear_gflops(new_m, ids)
    mm = mm_gflops(length, cfg.hidden_size, cfg.intermediate_size, dtype)
    memory = {k: peak_extra_in_child(__file__, k, name, str(length)) for k in ("old", "new") if k in fns}
    ppl = {k: math.exp(float(v.mean())) for k, v in scores.items()}
    row = {
        "model": name, "length": length, "new_dtype": str(dtype).removeprefix("torch."),
        "kept_positions": int(keep.sum()), "seconds_per_row": {k: median_interval(v) for k, v in times.items()},
        "peak_extra_bytes": memory, "linear_gflops": linear, "mm_gflops": mm, "linear_over_mm": linear / mm,
        "key_ppl": ppl, "tolerance": SCORE_TOLERANCE, "goals": {"linear_ge_60pct_mm": linear / mm >= GOAL_MM_SHARE},
    }  # fmt: skip
    for extra in (
        old_against_new(scores, times, ppl, memory, length) if args.old else {},
        kernels_against_new(scores, times, ppl, args.attention, length) if args.attention else {},
    ):
        row["goals"].update(extra.pop("goals", {}))
        row.update(extra)
    return row


def old_against_new(scores, times, ppl, memory, length: int) -> dict:
    """Today's float32 row against the new: the ratio, the scores' agreement, the goals of issue 52."""
    rel = abs(ppl["new"] / ppl["old"] - 1)
    ratio = paired(times, "new", "old")
    goals = {"ratio_le_0.4": ratio["median"] <= GOAL_RATIO, "scores_within_tolerance": rel <= SCORE_TOLERANCE}
    if length >= 16384:
        goals["memory_16k_lt_4gib"] = memory["new"] < GOAL_MEMORY_16K
    return {
        "new_over_old": ratio, "key_ppl_rel_diff": rel,
        "max_abs_nll_diff": float((scores["new"] - scores["old"]).abs().max()), "goals": goals,
    }  # fmt: skip


def kernels_against_new(scores, times, ppl, kernels, length: int) -> dict:
    """Each ``new_KERNEL`` row against the new row (SDPA, today's): time ratio, key-token perplexity."""
    out: dict = {"attention_kernel": {}}
    for kernel in kernels:
        path = f"new_{kernel}"
        rel = abs(ppl[path] / ppl["new"] - 1)
        out["attention_kernel"][kernel] = {
            "over_new": paired(times, path, "new"), "key_ppl_rel_diff": rel,
            "max_abs_nll_diff": float((scores[path] - scores["new"]).abs().max()),
            "scores_within_tolerance": rel <= SCORE_TOLERANCE,
        }  # fmt: skip
    if length >= 16384:
        best = min(v["over_new"]["median"] for v in out["attention_kernel"].values())
        out["goals"] = {"attention_row_le_0.5_at_16k": best <= GOAL_ATTENTION_16K}
    return out


def main(argv: list[str] | None = None) -> None:
    args = from_argv(CostBench, argv, __doc__.split("\n\n")[0])
    if args.child:
        child(args.child, args.threads)
        return
    for spec in args.cases:
        name, length = spec.rsplit(":", 1)
        row = case(name, int(length), args)
        print(json.dumps({"benchmark": "advise_cost", **row, "threads": torch.get_num_threads(), "machine": machine()}))
    for spec, run in [(s, retrieval_case) for s in args.retrieval] + [(s, shared_case) for s in args.shared]:
        name, length, keys = spec.split(":")
        model, tok = load(name, "auto", args.threads)
        row = run(model, tok, load_text(args.text), int(length), int(keys), args.repeats)
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        print(json.dumps({"benchmark": "advise_cost", "model": name, "dtype": dtype, **row,
                          "threads": torch.get_num_threads(), "machine": machine()}))  # fmt: skip


if __name__ == "__main__":
    main()
