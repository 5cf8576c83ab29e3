"""Benchmark: tempered_sdpa (per-head multiplier folded into q) vs plain SDPA vs the reference.

CPU fp32, B=1, H=8, D=64, L in {1024, 4096, 8192}, causal. Prints JSON: median seconds, the
ratios measured side by side in one run (goal: tempered / plain <= 1.05 at L=4096), and each
path's peak extra memory (RSS growth in a fresh process; the fused path allocates nothing L x L).

    python benchmarks/attention.py [--lengths 1024,4096,8192] [--repeats 5]
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from _harness import MemoryOptions, peak_extra_in_child, report_child, time_interleaved

from attntemp.evaluate.sweep import SweepConfig
from attntemp.ops.attention import head_column, reference_attention, tempered_sdpa
from attntemp.utils.options import from_argv, reuse

H, D = 8, 64


@dataclass(frozen=True, kw_only=True)
class AttentionBench(MemoryOptions):
    """The lengths timed (B, H and D fixed)."""

    lengths: tuple[int, ...] = reuse(SweepConfig, "lengths", (1024, 4096, 8192))


def inputs(length: int):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, length, D, generator=g) for _ in range(3))  # [1, H, L, D]
    m = head_column(torch.linspace(0.7, 1.4, H))  # [H, 1]
    return q, k, v, m


def paths(length: int):
    q, k, v, m = inputs(length)
    return {
        "plain_sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "tempered_sdpa": lambda: tempered_sdpa(q, k, v, m),
        "reference": lambda: reference_attention(q, k, v, m),
    }


def main(argv: list[str] | None = None) -> None:
    cfg = from_argv(AttentionBench, argv, __doc__.split("\n\n")[0])
    if cfg.child:
        name, length = cfg.child
        report_child(lambda: paths(int(length))[name])
        return
    results = []
    for length in cfg.lengths:
        t = time_interleaved(paths(length), cfg.repeats)
        mem = {n: peak_extra_in_child(__file__, n, str(length)) for n in t}
        results.append(
            {
                "L": length,
                "seconds": t,
                "peak_extra_MiB": {n: b / 2**20 for n, b in mem.items()},
                "tempered_over_plain": t["tempered_sdpa"] / t["plain_sdpa"],
                "reference_over_tempered": t["reference"] / t["tempered_sdpa"],
                "scores_matrix_MiB": H * length * length * 4 / 2**20,
            }
        )
    print(
        json.dumps(
            {
                "benchmark": "attention",
                "device": "cpu",
                "dtype": "float32",
                "B": 1,
                "H": H,
                "D": D,
                "threads": torch.get_num_threads(),
                "results": results,
                "goal": "tempered_over_plain <= 1.05 at L=4096",
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
