"""Benchmark: seconds per scored needle, ``needles`` (k needles per forward, no generation) against
``passkey`` (one prompt forward and a greedy decode per trial), same model and length, one run,
interleaved timings (median with its bootstrap 95% interval over the repeats).

    python benchmarks/needles_cost.py [--model tiny] [--length 1024] [--k 8] [--docs 4] [--trials 8]
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch
from _harness import BenchOptions, machine, median_interval, times_interleaved

import attntemp
from attntemp.analysis.run import MeasureConfig
from attntemp.evaluate import corpus
from attntemp.evaluate.tasks import EvalContext, EvalOptions, get_task
from attntemp.hf import introspect
from attntemp.hf.loading import ModelOptions
from attntemp.utils.options import from_argv, reuse


@dataclass(frozen=True, kw_only=True)
class NeedlesCostBench(BenchOptions):
    """The model, the length, and how many needles and passkey trials are scored."""

    model: str = reuse(ModelOptions, "model")
    length: int = reuse(MeasureConfig, "length", 1024)
    k: int = reuse(EvalOptions, "needles_per_forward", 8)
    docs: int = reuse(EvalOptions, "n_docs", 4)
    trials: int = reuse(EvalOptions, "trials", 8)
    repeats: int = reuse(BenchOptions, "repeats", 3)
    text: str = reuse(EvalOptions, "text")
    threads: int = reuse(ModelOptions, "threads", 1)


def main(argv: list[str] | None = None) -> None:
    args = from_argv(NeedlesCostBench, argv, __doc__.split("\n\n")[0])
    torch.set_num_threads(args.threads)
    model, tok = attntemp.load_model(args.model)
    trained = introspect.trained_length(model)
    docs = corpus.load_text(args.text)
    ctx = EvalContext(trained, docs, n_docs=args.docs, trials=args.trials, batch_size=1, needles_per_forward=args.k)
    out = {}

    def run(name: str):
        return lambda: out.__setitem__(name, get_task(name).evaluate(model, tok, args.length, [1.0], ctx)[0])

    with attntemp.patch(model, attntemp.TemperatureSpec()):
        times = times_interleaved({"needles": run("needles"), "passkey": run("passkey")}, args.repeats)
    scored = {"needles": args.docs * args.k, "passkey": args.trials}
    per = {name: median_interval([t / scored[name] for t in ts]) for name, ts in times.items()}
    print(
        json.dumps(
            {
                "benchmark": "needles_cost",
                "model": args.model,
                "length": args.length,
                "needles_per_forward": args.k,
                "needles_documents": args.docs,
                "passkey_trials": args.trials,
                "threads": args.threads,
                "batch_size": 1,
                "seconds_per_scored_needle": per,
                "passkey_over_needles": per["passkey"]["median"] / per["needles"]["median"],
                "accuracy": {"needles": out["needles"]["acc"], "passkey": out["passkey"]["acc"]},
                "machine": machine(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
