"""Benchmark: OpenMP's wait policy when another job shares the cores, and when none does.

torch's CPU threads are OpenMP's (libgomp on Linux): between parallel regions they spin, waiting
for work, unless ``OMP_WAIT_POLICY=PASSIVE`` has them sleep. On a machine of its own spinning
saves the wake-up; with another job on the same cores, the spinning threads take the cores from
the threads with work. Each path runs in its own interpreter (the runtime reads the variable once)
with the policy left unset (spin) or ``PASSIVE``; per repeat, each condition times both, paired:
``idle`` (nothing else running) and ``shared`` (a competitor process running ``torch.mm`` on
``--threads`` threads with the default policy, started before and stopped after the child). Each
child times ``--forwards`` forwards of the model on the standard library's text after a warm-up.
Per condition and path the median seconds a forward with bootstrap 95% intervals, and the ratio
(PASSIVE over spin), paired per repeat.

    python benchmarks/omp_wait_policy.py [--model tiny] [--length 512] [--batch 4] [--forwards 40]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from _harness import BenchOptions, machine, median_interval

from attntemp.hf.model_options import ModelOptions
from attntemp.utils.options import from_argv, option, reuse

POLICIES = {"spin": None, "passive": "PASSIVE"}  # path: OMP_WAIT_POLICY (None: left unset)
CONDITIONS = ("idle", "shared")
COMPETITOR = "import torch,sys; torch.set_num_threads(int(sys.argv[1])); a=torch.randn(512,512)\nwhile 1: a@a"


@dataclass(frozen=True, kw_only=True)
class WaitPolicyBench(BenchOptions):
    """The model, its input and threads."""

    model: str = reuse(ModelOptions, "model", "tiny")
    length: int = option(512, "tokens per row", parse=int)
    batch: int = option(4, "rows per forward", parse=int)
    forwards: int = option(40, "timed forwards per child", parse=int)
    threads: int = reuse(ModelOptions, "threads", 2)
    repeats: int = reuse(BenchOptions, "repeats", 3)
    child: bool = option(False, "internal: time the forwards in this process and print them")


def child(cfg: WaitPolicyBench) -> None:
    """In a fresh interpreter (the policy set by the parent): a warm-up forward, then the timed ones."""
    import torch
    from model_overhead import stdlib_ids

    import attntemp

    torch.set_num_threads(cfg.threads)
    model, tok = attntemp.load_model(cfg.model)
    ids = stdlib_ids(tok, cfg.length).expand(cfg.batch, -1)  # [B, L]
    with torch.no_grad():
        model(ids)  # warm-up
        t0 = time.perf_counter()
        for _ in range(cfg.forwards):
            model(ids)
    print(json.dumps({"seconds": (time.perf_counter() - t0) / cfg.forwards}))


def run_child(cfg: WaitPolicyBench, policy: str | None, shared: bool) -> float:
    argv = [sys.executable, __file__, "--child", "--model", cfg.model, "--length", str(cfg.length)]
    argv += ["--batch", str(cfg.batch), "--forwards", str(cfg.forwards), "--threads", str(cfg.threads)]
    bare = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}  # the policy left unset: spin
    env = bare | {"PYTHONWARNINGS": "ignore"} | ({"OMP_WAIT_POLICY": policy} if policy else {})
    rival = None
    if shared:  # the other job, on the same cores, spinning by default
        rival = subprocess.Popen([sys.executable, "-c", COMPETITOR, str(cfg.threads)], env=bare)
    try:
        out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    finally:
        if rival is not None:
            rival.kill()
            rival.wait()
    return float(json.loads(out.strip().splitlines()[-1])["seconds"])


def paired(a: list[float], b: list[float]) -> dict[str, float]:
    return median_interval([x / y for x, y in zip(a, b, strict=True)])


def main(argv: list[str] | None = None) -> None:
    cfg = from_argv(WaitPolicyBench, argv, __doc__.split("\n\n")[0])
    if cfg.child:
        return child(cfg)
    secs: dict[str, dict[str, list[float]]] = {c: {p: [] for p in POLICIES} for c in CONDITIONS}
    for _ in range(cfg.repeats):
        for cond in CONDITIONS:
            for path, policy in POLICIES.items():
                secs[cond][path].append(run_child(cfg, policy, cond == "shared"))
    print(json.dumps({
        "benchmark": "omp_wait_policy", "model": cfg.model, "length": cfg.length, "batch": cfg.batch,
        "threads": cfg.threads, "repeats": cfg.repeats,
        "seconds_per_forward": {c: {p: median_interval(s) for p, s in by.items()} for c, by in secs.items()},
        "passive_over_spin": {c: paired(by["passive"], by["spin"]) for c, by in secs.items()},
        "machine": machine(),
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
