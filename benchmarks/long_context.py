"""Benchmark: one forward's time and peak memory at long contexts, under the patch (m = 1), the
way attntemp scores a window: the decoder, then the LM head in chunks (``evaluate.lm.token_nll``).
Sliding-window layers run in window blocks (no [L, L] mask), global layers through SDPA's causal
kernel. Each length runs in a fresh interpreter (peak RSS is per process).

    python benchmarks/long_context.py [--model gemma3-270m] [--lengths 32768,49152,65536] [--threads 1] [--out F]

Prints one JSON object: the machine, and per length the forward's seconds (wall clock, and the
process's CPU seconds: with one thread, what the forward costs a core even when other jobs share
the machine), the process's peak resident memory, and its peak above the loaded model.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from _harness import current_rss_bytes, machine, peak_rss_bytes, reset_peak_rss

import attntemp
from attntemp.evaluate.lm import token_nll
from attntemp.evaluate.sweep import SweepConfig
from attntemp.hf.loading import ModelOptions
from attntemp.hf.patch import patch
from attntemp.utils import checks
from attntemp.utils.options import from_argv, option, reuse


@dataclass(frozen=True, kw_only=True)
class LongContextBench:
    """The model and the lengths of its timed forwards, each length in its own process."""

    model: str = reuse(ModelOptions, "model", "gemma3-270m")
    lengths: tuple[int, ...] = reuse(SweepConfig, "lengths", (32768, 49152, 65536))
    threads: int = reuse(ModelOptions, "threads", 1)
    dtype: str = option("float32", "the weights' and activations' dtype: float32 or bfloat16")
    out: str = option("", "also write the JSON to this file, after each length")
    child: int = option(0, "internal: time this one length in this process and print its JSON")

    def __post_init__(self) -> None:
        checks.choice("dtype", self.dtype, ("float32", "bfloat16"))


def child(model_name: str, length: int, threads: int, dtype: str) -> dict[str, float]:
    """In a fresh process: one patched forward of ``length`` random tokens, its seconds and memory."""
    torch.set_num_threads(threads)
    model, _ = attntemp.load_model(model_name, dtype=dtype)
    ids = torch.randint(3, model.get_input_embeddings().num_embeddings, (1, length))  # [1, L]
    with torch.no_grad(), patch(model, attntemp.TemperatureSpec()):
        token_nll(model, ids[:, :1100])  # warm-up: kernels, and the sliding layers' windowed path
        reset_peak_rss()
        base = current_rss_bytes()
        t0, c0 = time.perf_counter(), time.process_time()
        nll = token_nll(model, ids)  # [1, L-1]
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    if not bool(torch.isfinite(nll).all()):
        raise SystemExit(f"a non-finite loss at {length}: the forward measured is broken")
    return {
        "forward_s": round(seconds, 1),
        "cpu_s": round(cpu, 1),
        "peak_rss_gib": round(peak_rss_bytes() / 2**30, 2),
        "peak_extra_gib": round((peak_rss_bytes() - base) / 2**30, 2),
    }


def earlier(args: LongContextBench) -> dict[str, object]:
    """The lengths an earlier run of the same model and threads wrote to ``--out`` (resumed, never
    overwritten); a file from another model or thread count is refused, not replaced."""
    fresh: dict[str, object] = {"model": args.model, "threads": args.threads, "dtype": args.dtype, "machine": machine()}
    if not args.out or not Path(args.out).is_file():
        return fresh
    done = {"dtype": "float32", **json.loads(Path(args.out).read_text())}  # files from before the dtype: fp32
    if (done.get("model"), done.get("threads"), done["dtype"]) != (args.model, args.threads, args.dtype):
        print(
            f"--out={args.out!r} holds a run of {done.get('model')} with {done.get('threads')} threads in "
            f"{done['dtype']}; give another file for this model, thread count and dtype",
            file=sys.stderr,
        )
        sys.exit(2)
    return done


def main(argv: list[str] | None = None) -> None:
    args = from_argv(LongContextBench, argv, __doc__.split("\n\n")[0])
    if args.child:
        print(json.dumps(child(args.model, args.child, args.threads, args.dtype)))
        return
    out = earlier(args)
    for n in args.lengths:
        if str(n) in out:
            print(f"{n}: {out[str(n)]} (measured earlier, kept from {args.out})", file=sys.stderr, flush=True)
            continue
        cmd = [sys.executable, __file__, "--model", args.model, "--threads", str(args.threads), "--dtype", args.dtype,
               "--child", str(n)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        out[str(n)] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{n}: {out[str(n)]}", file=sys.stderr, flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    out["load_average_after"] = machine()["load_average"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
