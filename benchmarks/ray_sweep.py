"""Benchmark: sweep points per minute on Ray with 1 and 2 workers, and in one process, tiny model.

The same sweep (perplexity, lengths x RoPE x multipliers, one batched forward per group) into a
fresh store each time; wall time from the call to the last point, start-up included (Ray, and one
model load per worker), the seconds until the first point was written, and the rate after the
first group (start-up excluded). Also checks that every
run wrote the same rows. One run each: on a 2-core machine the workers share the cores, so expect
little gain from the second worker; the point of Ray is one worker per GPU.

    python benchmarks/ray_sweep.py [--lengths 256,384,512,640,768,896] [--docs 4]
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from attntemp.evaluate.distributed import run_distributed
from attntemp.evaluate.sweep import SweepConfig, run_sweep
from attntemp.hf.loading import ModelOptions
from attntemp.utils import options
from attntemp.utils.options import from_argv, reuse

ROWS = "SELECT model, length, rope, mkey, task, metrics FROM points"


@dataclass(frozen=True, kw_only=True)
class RaySweepBench:
    """The sweep run three ways (its RoPE methods fixed: none and yarn)."""

    model: str = reuse(ModelOptions, "model")
    lengths: tuple[int, ...] = reuse(SweepConfig, "lengths", (256, 384, 512, 640, 768, 896))
    multipliers: tuple[float, ...] = reuse(SweepConfig, "multipliers", options.multipliers("0.8:1.2:0.1"))
    n_docs: int = reuse(SweepConfig, "n_docs", 4)


def timed(cfg: SweepConfig, on_ray: bool) -> dict:
    group = len(cfg.multipliers)  # points per group: one batched forward
    t0 = time.time()
    if on_ray:
        run_distributed(cfg).close()
    else:
        run_sweep(cfg)  # returns the points, the store closed
    seconds = time.time() - t0
    con = sqlite3.connect(Path(cfg.out) / "sweep.db")
    n, first, last = con.execute("SELECT COUNT(*), MIN(created), MAX(created) FROM points").fetchone()
    rows = sorted(con.execute(ROWS).fetchall())
    con.close()
    return {
        "points": n,
        "seconds": seconds,
        "points_per_minute": 60 * n / seconds,
        "seconds_to_first_point": first - t0,
        # after start-up: the points after the first group, over the time from its write to the last
        "points_per_minute_after_first_group": 60 * (n - group) / max(last - first, 1e-9),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> None:
    args = from_argv(RaySweepBench, argv, __doc__.split("\n\n")[0])
    base = {
        "model": args.model,
        "lengths": args.lengths,
        "rope": ("none", "yarn"),
        "multipliers": args.multipliers,
        "n_docs": args.n_docs,
        "progress": False,
        "threads": 1,
    }
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, workers, on_ray in (("one_process", 1, False), ("ray_1_worker", 1, True), ("ray_2_workers", 2, True)):
            cfg = SweepConfig(out=f"{tmp}/{name}", workers=workers, **base)
            runs[name] = timed(cfg, on_ray)
    same = len({json.dumps(r.pop("rows")) for r in runs.values()}) == 1
    print(
        json.dumps(
            {
                "benchmark": "ray_sweep",
                "model": args.model,
                "cpus": os.cpu_count(),
                "torch_threads_per_worker": 1,
                "torch": torch.__version__,
                "runs": runs,
                "same_rows": same,
                "note": "one run each, start-up included; 2 workers on 2 shared "
                "cores gain little: Ray pays off with one worker per GPU",
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
