"""Benchmark: several multipliers in one batched forward (one batch row per m) vs one forward each.

Tiny model, perplexity task on 4 held-out documents, k multipliers; interleaved timings in one
run; also checks that both give the same perplexities.

    python benchmarks/sweep_batching.py [--length 1024] [--k 6] [--repeats 3]
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch
from _harness import BenchOptions, time_interleaved

import attntemp
from attntemp.analysis.run import MeasureConfig
from attntemp.evaluate import corpus
from attntemp.evaluate.tasks import EvalContext, get_task
from attntemp.hf.loading import ModelOptions
from attntemp.utils.options import from_argv, option, reuse


@dataclass(frozen=True, kw_only=True)
class BatchingBench(BenchOptions):
    """The model, the length and how many multipliers share one forward."""

    model: str = reuse(ModelOptions, "model")
    length: int = reuse(MeasureConfig, "length", 1024)
    k: int = option(6, "multipliers, from 0.8 to 1.3")
    repeats: int = reuse(BenchOptions, "repeats", 3)


def main(argv: list[str] | None = None) -> None:
    args = from_argv(BatchingBench, argv, __doc__.split("\n\n")[0])
    model, tok = attntemp.load_model(args.model)
    ctx = EvalContext(model.config.max_position_embeddings, corpus.load_text("stdlib"), n_docs=4)
    ms = torch.linspace(0.8, 1.3, args.k).tolist()
    task = get_task("perplexity")
    out = {}

    def batched():
        out["batched"] = task.evaluate(model, tok, args.length, ms, ctx)

    def sequential():
        out["sequential"] = [task.evaluate(model, tok, args.length, [m], ctx)[0] for m in ms]

    with attntemp.patch(model, attntemp.TemperatureSpec()):
        t = time_interleaved({"batched": batched, "sequential": sequential}, args.repeats)
    diff = max(abs(a["tail_ppl"] - b["tail_ppl"]) for a, b in zip(out["batched"], out["sequential"], strict=True))
    print(
        json.dumps(
            {
                "benchmark": "sweep_batching",
                "model": args.model,
                "length": args.length,
                "k": args.k,
                "docs": 4,
                "threads": torch.get_num_threads(),
                "seconds": t,
                "sequential_over_batched": t["sequential"] / t["batched"],
                "max_abs_tail_ppl_diff": diff,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
