"""Benchmark: causal attention on the CPU against the machine's matmul rate (issue 63).

Per length, dtype and GQA head shape (SmolLM2: 9 query heads, 3 kv heads, head_dim 64; Gemma 3
270M: 4, 1, 256), m (a per-head multiplier) folded into q, the candidates interleaved in one run:
torch's SDPA with ``enable_gqa`` (what the patch runs today) and with k, v repeated; SDPA under
``torch.compile``; FlexAttention compiled (inductor's CPU template); the blocked causal attention
of GEMMs with an online softmax (:mod:`attntemp.ops.attention_blocked`); and ``torch.mm`` on a
square matrix of about the same FLOPs, the machine's rate on this dtype and threads. Causal FLOPs
are counted as ``4 * Hq * L^2 / 2 * D`` (two matmuls of ``2 L^2 D`` each, half of them masked).

One JSON object: per case each candidate's GFLOP/s, its rate over ``torch.mm``'s and its time over
SDPA's (paired per repeat: medians with bootstrap 95% intervals), the largest difference to SDPA,
the fastest, and the kernel :mod:`attntemp.hf.probes.kernel` picks for the shape; the CPU, its
flags and the load average.

    python benchmarks/attention_rate.py [--lengths 4096,8192,16384] [--dtypes float32,bfloat16]
    python benchmarks/attention_rate.py --quick        # the smallest case: 256 tokens, SmolLM2, fp32
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from _harness import BenchOptions, machine, median_interval, times_interleaved

from attntemp.ops.attention import fold_into_q, head_column, repeat_kv
from attntemp.ops.attention_blocked import blocked_causal_attention
from attntemp.utils.options import from_argv, ints, names, option

SHAPES = {"smollm2": (9, 3, 64), "gemma3": (4, 1, 256)}  # name: (Hq, Hkv, D)
CANDIDATES = ("sdpa_gqa", "sdpa_repeat_kv", "sdpa_compiled", "flex_compiled", "blocked")
GOAL_MM_SHARE = 0.6  # issue 63: attention at >= 60% of torch.mm's GFLOP/s at 8192 and 16384


@dataclass(frozen=True, kw_only=True)
class RateBench(BenchOptions):
    """The lengths, dtypes, head shapes and candidates timed."""

    lengths: tuple[int, ...] = option((4096, 8192, 16384), "sequence lengths, comma list", parse=ints)
    dtypes: tuple[str, ...] = option(("float32", "bfloat16"), "compute dtypes, comma list", parse=names)
    shapes: tuple[str, ...] = option(tuple(SHAPES), "GQA head shapes, comma list of " + ", ".join(SHAPES), parse=names)
    candidates: tuple[str, ...] = option(CANDIDATES, "attention candidates, comma list", parse=names)
    quick: bool = option(False, "the smallest case: 256 tokens, SmolLM2's heads, float32, one repeat")

    def __post_init__(self) -> None:
        unknown = set(self.shapes) - set(SHAPES) | set(self.candidates) - set(CANDIDATES)
        if unknown:
            raise ValueError(f"unknown shapes or candidates: {sorted(unknown)}")


def causal_flops(hq: int, length: int, d: int) -> float:
    """``4 * Hq * L^2 / 2 * D``: QK^T and PV, each ``2 L^2 D`` per head, half of them causal."""
    return 4 * hq * length * length / 2 * d


def inputs(shape: str, length: int, dtype: torch.dtype):
    """q ``[1, Hq, L, D]``, k, v ``[1, Hkv, L, D]`` in ``dtype``, a per-head m ``[Hq, 1]``."""
    hq, hkv, d = SHAPES[shape]
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, hq, length, d, generator=g).to(dtype)  # [1, Hq, L, D]
    k, v = (torch.randn(1, hkv, length, d, generator=g).to(dtype) for _ in range(2))  # [1, Hkv, L, D]
    return q, k, v, head_column(torch.linspace(0.7, 1.4, hq))  # m: [Hq, 1]


def _flex(length: int) -> Callable:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    mask = create_block_mask(lambda b, h, i, j: i >= j, None, None, length, length, device="cpu")
    fn = torch.compile(flex_attention)
    return lambda q, k, v: fn(q, k, v, block_mask=mask, enable_gqa=True)  # [1, Hq, L, D]


def kernels(length: int, groups: int) -> dict[str, Callable]:
    """Each candidate as ``fn(q [1, Hq, L, D], k, v [1, Hkv, L, D]) -> [1, Hq, L, D]``."""
    gqa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # noqa: E731
    rep = lambda q, k, v: F.scaled_dot_product_attention(  # noqa: E731
        q, repeat_kv(k, groups), repeat_kv(v, groups), is_causal=True
    )  # [1, Hq, L, D]
    return {
        "sdpa_gqa": gqa,
        "sdpa_repeat_kv": rep,
        "sdpa_compiled": torch.compile(gqa),
        "flex_compiled": _flex(length),
        "blocked": blocked_causal_attention,
    }


def case(shape: str, length: int, dtype_name: str, cfg: RateBench) -> dict:
    """One shape, length and dtype: every candidate and ``torch.mm`` interleaved."""
    dtype = getattr(torch, dtype_name)
    q, k, v, m = inputs(shape, length, dtype)
    hq, hkv, d = SHAPES[shape]
    flops = causal_flops(hq, length, d)
    n = round((flops / 2) ** (1 / 3))  # a square matmul of about the same FLOPs: 2 n^3
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)  # [n, n]
    ks = {c: f for c, f in kernels(length, hq // hkv).items() if c in cfg.candidates}
    fns: dict[str, Callable[[], object]] = {c: (lambda f=f: f(fold_into_q(q, m), k, v)) for c, f in ks.items()}
    with torch.no_grad():
        outs = {c: fn() for c, fn in fns.items()}  # also the compile
        times = times_interleaved({**fns, "mm": lambda: torch.mm(a, b)}, cfg.repeats)
    ref = outs.get("sdpa_gqa")
    mm_rate = [2 * n**3 / t for t in times["mm"]]  # FLOP/s per repeat
    per = {c: candidate(times[c], times.get("sdpa_gqa"), mm_rate, flops, outs[c], ref) for c in fns}
    return {
        "shape": shape, "Hq": hq, "Hkv": hkv, "D": d, "L": length, "dtype": dtype_name,
        "causal_gflop": flops / 1e9, "mm_n": n, "mm_gflops": median_interval([r / 1e9 for r in mm_rate]),
        "candidates": per, "fastest": min(per, key=lambda c: per[c]["seconds"]["median"]),
        "probe_picks": probe_pick(shape, dtype),
    }  # fmt: skip


def candidate(times, sdpa_times, mm_rate, flops, out, ref) -> dict:
    """One candidate's seconds, GFLOP/s, rate over torch.mm's and time over SDPA's (paired)."""
    rates = [flops / t for t in times]
    row = {
        "seconds": median_interval(times),
        "gflops": median_interval([r / 1e9 for r in rates]),
        "over_mm": median_interval([r / mm for r, mm in zip(rates, mm_rate, strict=True)]),
    }
    if sdpa_times is not None:
        row["time_over_sdpa"] = median_interval([t / s for t, s in zip(times, sdpa_times, strict=True)])
        row["max_abs_diff_to_sdpa"] = float((out.float() - ref.float()).abs().max())
    return row


def probe_pick(shape: str, dtype: torch.dtype) -> str | None:
    """What :func:`attntemp.hf.probes.kernel.pick_kernel` chooses for this head shape and dtype (None
    before that module exists)."""
    try:
        from attntemp.hf.probes import kernel as kernel_probe
    except ImportError:
        return None
    hq, hkv, d = SHAPES[shape]
    return kernel_probe.pick_kernel(hq, hkv, d, dtype).kernel


def main(argv: list[str] | None = None) -> None:
    cfg = from_argv(RateBench, argv, __doc__.split("\n\n")[0])
    if cfg.quick:
        cfg = replace(cfg, lengths=(256,), dtypes=("float32",), shapes=("smollm2",), repeats=1)
    results = [case(s, n, dt, cfg) for n in cfg.lengths for s in cfg.shapes for dt in cfg.dtypes]
    print(
        json.dumps(
            {
                "benchmark": "attention_rate",
                "flops": "4 * Hq * L^2 / 2 * D (causal: QK^T and PV, half the L x L pairs)",
                "threads": torch.get_num_threads(),
                "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                "torch": torch.__version__,
                "repeats": cfg.repeats,
                "goal": f"attention >= {GOAL_MM_SHARE} of torch.mm's GFLOP/s at 8192 and 16384 in the faster dtype",
                "results": results,
                "machine": machine(),  # the load average at the end of the run
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
