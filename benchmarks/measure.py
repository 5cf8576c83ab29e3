"""Benchmark: attention statistics for one layer shape vs one plain SDPA call of that shape.

H=9, D=64, L=16384, CPU fp32, causal (SmolLM2's head shape). Goals: stats time / SDPA time <= 2,
peak extra memory <= 1 GiB (RSS growth in a fresh process). Timings interleaved in one run; the
ratio is the median of the paired per-repeat ratios with its bootstrap 95% interval, printed with
the CPU and the load average.

    python benchmarks/measure.py [--length 16384] [--repeats 3]
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from _harness import MemoryOptions, machine, median_interval, peak_extra_in_child, report_child, times_interleaved

from attntemp.analysis.run import MeasureConfig
from attntemp.ops.attention_stats import FUSED_BYTES, attention_stats, block_size, block_stats
from attntemp.utils.options import from_argv, reuse

H, D = 9, 64


@dataclass(frozen=True, kw_only=True)
class MeasureBench(MemoryOptions):
    """The length timed (H and D fixed)."""

    length: int = reuse(MeasureConfig, "length", 16384)


def paths(length: int):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, length, D, generator=g) for _ in range(3))  # [1, H, L, D]
    m = torch.linspace(0.8, 1.2, H).reshape(1, H, 1)  # per-head multiplier
    return {
        "plain_sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "stats": lambda: attention_stats(q, k, m),
        "stats_plain_blocks": lambda: plain_blocks(q, k, m),  # the reference form, every sum its own pass
        # the fused path as it was: blocks of 4 MiB whatever the shape (7 queries at H = 9, L = 16384)
        "stats_4mib_blocks": lambda: attention_stats(q, k, m, budget_bytes=FUSED_BYTES),
    }


def plain_blocks(q, k, m):
    """attention_stats as it was before the fused block: block_stats over ~4-temporary blocks."""
    length = q.shape[2]
    blk = block_size(1, H, length)
    return [block_stats(q[:, :, a : a + blk], k, a, m) for a in range(0, length, blk)]


def main(argv: list[str] | None = None) -> None:
    args = from_argv(MeasureBench, argv, __doc__.split("\n\n")[0])
    if args.child:
        name, length = args.child
        report_child(lambda: paths(int(length))[name])
        return
    runs = times_interleaved(paths(args.length), args.repeats)
    t = {n: median_interval(v)["median"] for n, v in runs.items()}
    ratio = median_interval([a / b for a, b in zip(runs["stats"], runs["plain_sdpa"], strict=True)])
    plain = median_interval([a / b for a, b in zip(runs["stats_plain_blocks"], runs["plain_sdpa"], strict=True)])
    old = median_interval([a / b for a, b in zip(runs["stats_4mib_blocks"], runs["plain_sdpa"], strict=True)])
    gain = median_interval([a / b for a, b in zip(runs["stats"], runs["stats_4mib_blocks"], strict=True)])
    mem = {n: peak_extra_in_child(__file__, n, str(args.length)) / 2**20 for n in ("plain_sdpa", "stats")}
    print(
        json.dumps(
            {
                "benchmark": "measure",
                "device": "cpu",
                "dtype": "float32",
                "H": H,
                "D": D,
                "L": args.length,
                "threads": torch.get_num_threads(),
                "seconds": t,
                "peak_extra_MiB": mem,
                "stats_over_sdpa": ratio,
                "plain_blocks_over_sdpa": plain,
                "blocks_4mib_over_sdpa": old,
                "stats_over_4mib_blocks": gain,
                "weights_matrix_MiB": H * args.length**2 * 4 / 2**20,
                "goals": {"stats_over_sdpa": "<= 2", "stats_peak_extra_MiB": "<= 1024"},
                "goals_met": {"stats_over_sdpa": ratio["median"] <= 2, "stats_peak_extra_MiB": mem["stats"] <= 1024},
                "repeats": args.repeats,
                "machine": machine(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
