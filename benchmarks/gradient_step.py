"""Benchmark: what one step of per-head gradient tuning costs (`attntemp tune --method gradient
--granularity head`: forward with learnable m, next-token loss, backward into the m only, weights
frozen) against one no-grad forward of the same window, and its peak extra memory, per length.
Each length runs in a fresh interpreter (peak RSS is per process); the ratio of step to forward
is measured side by side in that process, so a slower or busier machine scales both.

    python benchmarks/gradient_step.py [--model smollm2] [--lengths 1024,2048,4096] [--threads 1]

Prints one JSON object: per length the step and forward seconds (median of --repeats), their
ratio, and the step's peak extra resident memory over the loaded model.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass

import torch
from _harness import BenchOptions, current_rss_bytes, machine, peak_rss_bytes, reset_peak_rss

import attntemp
from attntemp.evaluate.lm import next_token_loss, token_nll
from attntemp.evaluate.sweep import SweepConfig
from attntemp.hf.learnable import learnable
from attntemp.hf.loading import ModelOptions
from attntemp.utils.options import from_argv, option, reuse


@dataclass(frozen=True, kw_only=True)
class GradientBench(BenchOptions):
    """The model and the lengths of the timed steps, each length in its own process."""

    model: str = reuse(ModelOptions, "model", "smollm2")
    lengths: tuple[int, ...] = reuse(SweepConfig, "lengths", (1024, 2048, 4096))
    repeats: int = reuse(BenchOptions, "repeats", 3)
    threads: int = reuse(ModelOptions, "threads", 1)
    child: int = option(0, "internal: time this one length in this process and print its JSON")


def child(model_name: str, length: int, repeats: int, threads: int) -> dict[str, float]:
    """In a fresh process: the forward's and the step's median seconds, and the step's peak memory."""
    torch.set_num_threads(threads)
    model, _ = attntemp.load_model(model_name)
    ids = torch.randint(0, model.get_input_embeddings().num_embeddings, (1, length))  # [1, L]
    with torch.no_grad():
        token_nll(model, ids[:, :64])  # warm-up of the kernels
    fwd, step, peak = [], [], 0
    with learnable(model, granularity="head") as temps:
        opt = torch.optim.Adam(temps.parameters(), lr=1e-2)
        for _ in range(repeats):
            t0 = time.perf_counter()
            with torch.no_grad():
                token_nll(model, ids)  # [1, L-1]
            fwd.append(time.perf_counter() - t0)
            reset_peak_rss()
            base = current_rss_bytes()
            t0 = time.perf_counter()
            opt.zero_grad()
            next_token_loss(model, ids).backward()  # the loss is a scalar; grads land in temps only
            opt.step()
            if all(p.grad is None or not p.grad.any() for p in temps.parameters()):
                raise SystemExit("no gradient reached the temperatures: the step measured is not the tuner's")
            step.append(time.perf_counter() - t0)
            peak = max(peak, peak_rss_bytes() - base)
    fwd.sort(), step.sort()
    f, s = fwd[len(fwd) // 2], step[len(step) // 2]
    return {
        "forward_s": round(f, 2),
        "step_s": round(s, 2),
        "step_over_forward": round(s / f, 2),
        "step_peak_extra_gib": round(peak / 2**30, 2),
    }


def main(argv: list[str] | None = None) -> None:
    args = from_argv(GradientBench, argv, __doc__.split("\n\n")[0])
    if args.child:
        print(json.dumps(child(args.model, args.child, args.repeats, args.threads)))
        return
    out: dict[str, object] = {"model": args.model, "threads": args.threads, "machine": machine()}
    for n in args.lengths:
        child_argv = [
            sys.executable,
            __file__,
            "--model",
            args.model,
            "--repeats",
            str(args.repeats),
            "--threads",
            str(args.threads),
            "--child",
            str(n),
        ]
        got = subprocess.run(child_argv, capture_output=True, text=True, check=True).stdout
        out[str(n)] = json.loads(got.strip().splitlines()[-1])
        print(f"{n}: {out[str(n)]}", file=sys.stderr, flush=True)
    out["machine_after"] = machine()["load_average"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
