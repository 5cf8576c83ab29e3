"""Benchmark: the exponential SDPA's CPU kernel computes, against the one ``softmax_ceiling`` times (issue 63).

``benchmarks/attention_rate.py`` bounds any attention kernel by the softmax's exponentials, timed
as ``torch.exp`` (Sleef's ``expf`` with 1 ULP). torch's CPU flash attention
(``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp``, ``_exp_reduce_sum_fusion_kernel``) computes
its exponentials with ``at::vec::Vectorized<float>::exp_u20`` instead, a polynomial with 20 ULP. If
that one were much faster, the ceiling would be stricter than what SDPA's own exponentials allow.
This builds a C++ loop of each (``torch.utils.cpp_extension.load_inline``: a C++ compiler and
``ninja``; the CPU's widest ``Vectorized<float>`` that torch was built for, named by its lanes)
and times them beside ``torch.exp`` on the same cache-resident fp32 tile, interleaved, one thread:
nanoseconds per element, medians with bootstrap 95% intervals, and the largest relative error of
``exp_u20`` against ``torch.exp``.

    python benchmarks/exp_rate.py [--repeats 9] [--calls 64]
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

import torch
from _harness import BenchOptions, machine, median_interval, times_interleaved

from attntemp.utils.options import from_argv, option, reuse

TILE = (256, 512)  # as attention_rate.EXP_TILE: one query block's scores, resident in a core's L2
SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cpu/vec/vec.h>
using Vec = at::vec::Vectorized<float>;
int64_t lanes() { return Vec::size(); }
template <bool u20> void run(const torch::Tensor& z, torch::Tensor& out, int64_t calls) {
  const float* a = z.data_ptr<float>(); float* o = out.data_ptr<float>(); int64_t n = z.numel();
  for (int64_t c = 0; c < calls; c++)
    for (int64_t i = 0; i + Vec::size() <= n; i += Vec::size()) {
      Vec x = Vec::loadu(a + i);
      (u20 ? x.exp_u20() : x.exp()).store(o + i);
    }
}
void exp_u20(torch::Tensor z, torch::Tensor out, int64_t calls) { run<true>(z, out, calls); }
void exp_u10(torch::Tensor z, torch::Tensor out, int64_t calls) { run<false>(z, out, calls); }
"""
AVX512 = ["-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mfma", "-DCPU_CAPABILITY_AVX512"]
AVX2 = ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2"]


@dataclass(frozen=True, kw_only=True)
class ExpBench(BenchOptions):
    """How often, and how many tile exponentials a timed call makes."""

    repeats: int = reuse(BenchOptions, "repeats", 9)
    calls: int = option(64, "exponentials of one 256 x 512 fp32 tile per timed call", parse=int)


def build():
    """The C++ loops, compiled for the widest vector ISA torch's CPU build and this CPU share."""
    from torch.utils.cpp_extension import load_inline

    flags = AVX512 if machine()["avx512f"] else AVX2
    return load_inline("attntemp_exp_rate", cpp_sources=SOURCE, functions=["exp_u20", "exp_u10", "lanes"],
                       extra_cflags=["-O3", *flags])  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = from_argv(ExpBench, argv, __doc__.split("\n\n")[0])
    torch.set_num_threads(1)
    try:
        ext = build()
    except (RuntimeError, OSError, ImportError) as exc:  # no compiler or no ninja: said, not guessed
        print(json.dumps({"benchmark": "exp_rate", "skipped": f"could not build the C++ loops: {exc}"[:400]}))
        return
    z = -torch.rand(TILE) * 8  # [256, 512]: scores below 0, as after the softmax's max is taken off
    out = torch.empty_like(z)
    fns = {
        "torch_exp": lambda: [torch.exp(z, out=out) for _ in range(args.calls)],
        "vec_exp_u10": lambda: ext.exp_u10(z, out, args.calls),
        "vec_exp_u20": lambda: ext.exp_u20(z, out, args.calls),
    }
    times = times_interleaved(fns, args.repeats)
    per = args.calls * z.numel()
    ns = {k: median_interval([t / per * 1e9 for t in v]) for k, v in times.items()}
    ratio = median_interval([a / b for a, b in zip(times["vec_exp_u20"], times["torch_exp"], strict=True)])
    ext.exp_u20(z, out, 1)
    err = float(((out - torch.exp(z)).abs() / torch.exp(z)).max())
    doc = {"benchmark": "exp_rate", "threads": 1, "lanes": int(ext.lanes()), "tile": list(TILE),
           "ns_per_element": ns, "u20_over_torch_exp": ratio, "u20_max_rel_error": err,
           "repeats": args.repeats, "machine": machine(), "torch": torch.__version__}  # fmt: skip
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
