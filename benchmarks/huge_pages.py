"""Benchmark: a long forward with and without transparent huge pages for torch's large tensors.

glibc maps every allocation past 32 MiB afresh and unmaps it on free, so a long forward faults its
activations in 4 KiB pages, over and over; ``THP_MEM_ALLOC_ENABLE=1`` (which the ``attntemp``
command sets, :func:`attntemp.utils.resources.prefer_huge_pages`) has torch's CPU allocator ask for 2 MiB pages.
torch reads the variable once, so each path runs in its own interpreter: per repeat one child
with it ``0`` and one with it ``1``, interleaved, each timing the model's trunk (no LM head) on
the standard library's text, a warm-up forward first. Per path the median seconds and minor page
faults of a forward with bootstrap 95% intervals; the ratio (huge pages over none) paired per
repeat. The numbers are the same both ways: only where the memory lies changes.

    python benchmarks/huge_pages.py [--model smollm2] [--length 16384] [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass

from _harness import BenchOptions, machine, median_interval

from attntemp.hf.model_options import ModelOptions
from attntemp.utils.options import from_argv, option, reuse
from attntemp.utils.resources import THP_VARIABLE as VARIABLE
from attntemp.utils.resources import kernel_setting

PATHS = {"none": "0", "huge_pages": "1"}  # path: THP_MEM_ALLOC_ENABLE


@dataclass(frozen=True, kw_only=True)
class HugePagesBench(BenchOptions):
    """The model, length and threads of the timed forward."""

    model: str = reuse(ModelOptions, "model", "smollm2")
    length: int = option(16384, "tokens per forward", parse=int)
    dtype: str = reuse(ModelOptions, "dtype", "bfloat16")
    threads: int = reuse(ModelOptions, "threads", 2)
    child: bool = option(False, "internal: time one forward in this process and print it")


def child(cfg: HugePagesBench) -> None:
    """In a fresh interpreter (the variable set by the parent): a warm-up forward, then one timed."""
    import torch
    from model_overhead import stdlib_ids

    import attntemp

    torch.set_num_threads(cfg.threads)
    model, tok = attntemp.load_model(cfg.model, dtype=cfg.dtype)
    ids = stdlib_ids(tok, cfg.length)  # [1, L]
    trunk = model.get_decoder()
    with torch.no_grad():
        trunk(ids)  # warm-up: weights touched, kernels chosen
        faults, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
        trunk(ids)
        seconds = time.perf_counter() - t0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    print(json.dumps({"seconds": seconds, "faults": faults, "tokens": int(ids.shape[1])}))


def run_child(cfg: HugePagesBench, value: str) -> dict:
    argv = [sys.executable, __file__, "--child", "--model", cfg.model, "--length", str(cfg.length)]
    argv += ["--dtype", cfg.dtype, "--threads", str(cfg.threads)]
    env = {**os.environ, VARIABLE: value, "PYTHONWARNINGS": "ignore"}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    cfg = from_argv(HugePagesBench, argv, __doc__.split("\n\n")[0])
    if cfg.child:
        return child(cfg)
    runs: dict[str, list[dict]] = {p: [] for p in PATHS}
    for _ in range(cfg.repeats):
        for path, value in PATHS.items():
            runs[path].append(run_child(cfg, value))
    secs = {p: [r["seconds"] for r in rs] for p, rs in runs.items()}
    print(json.dumps({
        "benchmark": "huge_pages", "model": cfg.model, "L": runs["none"][0]["tokens"], "dtype": cfg.dtype,
        "threads": cfg.threads, "repeats": cfg.repeats, "kernel_thp": kernel_setting(),
        "seconds": {p: median_interval(s) for p, s in secs.items()},
        "faults": {p: median_interval([float(r["faults"]) for r in rs]) for p, rs in runs.items()},
        "huge_pages_over_none": median_interval([a / b for a, b in zip(secs["huge_pages"], secs["none"], strict=True)]),
        "machine": machine(),
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
