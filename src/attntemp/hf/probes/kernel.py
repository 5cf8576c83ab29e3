"""The fastest causal-attention kernel for a head shape and dtype on this CPU, measured, not guessed.

Two exact kernels compute a long prefill's causal attention: torch's fused SDPA (on the CPU its
flash kernel, ``_scaled_dot_product_flash_attention_for_cpu``) and the blocked attention of GEMMs
with an online softmax (:func:`attntemp.ops.attention_blocked.blocked_causal_attention`). Which is
faster depends on the CPU, the dtype and the heads, so the patched model asks :func:`pick_kernel`: a short
probe (:data:`PROBE_LENGTH` tokens of random q, k, v with the model's ``(Hq, Hkv, D)``, both
kernels interleaved, the median of :data:`REPEATS`), cached per (CPU model, its flags, torch
version, threads, shape, dtype) in ``$ATTNTEMP_CACHE/attention_probe.json`` and, once per process
and shape, said in one line on stderr, as ``--dtype auto`` does (:mod:`.dtype`). SDPA stays
unless the other kernel takes at most :data:`WINS` of its time. ``ATTNTEMP_ATTENTION=sdpa`` or
``=blocked`` forces one (no probe): the reference path is always there to compare against.

``benchmarks/attention_rate.py`` measures the candidates at 4096-16384 tokens (with compiled SDPA
and FlexAttention, left out here: they compile per shape and were not faster, docs/scale.md).
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ...ops.attention_blocked import blocked_causal_attention
from .machine import cpu_identity, load_cache, read_cpuinfo, save_cache

KERNELS = ("sdpa", "blocked")
ENV = "ATTNTEMP_ATTENTION"  # force a kernel: sdpa or blocked
KERNEL_PROBE_FILE = "attention_probe.json"
# tokens the probe times: the L^2 work dominates, a few seconds once per machine and shape. At 2048
# the blocked kernel measured 0.90x SDPA's time in float32 on SmolLM2's heads (Xeon with AMX), at
# 4096-16384 1.4-1.9x (benchmarks/attention_rate.py): the probe's length is the scored rows' kind.
PROBE_LENGTH = 4096
REPEATS = 3
WINS = 0.9  # the blocked kernel is chosen when its time is at most this share of SDPA's
MIN_LENGTH = 1024  # shorter prefills always run SDPA (the probe would cost more than it saves)


@dataclass(frozen=True)
class KernelProbe:
    """What a probe measured and chose: the kernel, each kernel's median seconds at the probe's length."""

    kernel: str
    sdpa_s: float
    blocked_s: float
    cpu: str
    flags: tuple[str, ...]
    threads: int
    shape: tuple[int, int, int]  # Hq, Hkv, D
    dtype: str
    length: int
    torch: str
    cached: bool = False
    forced: bool = False

    @property
    def ratio(self) -> float:
        """The blocked kernel's time over SDPA's (below 1: blocked is faster)."""
        return self.blocked_s / self.sdpa_s if self.sdpa_s > 0 else float("nan")

    def line(self) -> str:
        """The decision in one line, with what it rests on."""
        if self.forced:
            return f"attention kernel: {self.kernel} (forced by {ENV})"
        hq, hkv, d = self.shape
        how = "cached probe" if self.cached else "probe"
        return (
            f"attention kernel: {self.kernel} for {hq} q / {hkv} kv heads of {d} in {self.dtype} (blocked GEMMs "
            f"take {self.ratio:.2f}x SDPA's time at {self.length} tokens on {self.cpu} [{' '.join(self.flags)}], "
            f"{self.threads} threads, torch {self.torch}; {how})"
        )


def _kernel(name: str):
    if name == "blocked":
        return blocked_causal_attention
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def time_kernels(shape: tuple[int, int, int], dtype: torch.dtype, length: int, repeats: int = REPEATS) -> dict:
    """Median seconds of each of :data:`KERNELS` on random ``q [1, Hq, L, D]``, ``k, v [1, Hkv, L, D]``,
    interleaved (after a warm-up each)."""
    hq, hkv, d = shape
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, hq, length, d, generator=g).to(dtype)  # [1, Hq, L, D]
    k, v = (torch.randn(1, hkv, length, d, generator=g).to(dtype) for _ in range(2))  # [1, Hkv, L, D]
    times: dict[str, list[float]] = {name: [] for name in KERNELS}
    with torch.no_grad():
        for name in KERNELS:
            _kernel(name)(q, k, v)  # warm-up
        for _ in range(repeats):
            for name in KERNELS:
                t0 = time.perf_counter()
                _kernel(name)(q, k, v)  # [1, Hq, L, D]
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def _key(cpu: str, flags: tuple[str, ...], threads: int, shape: tuple[int, int, int], dtype: str) -> str:
    return json.dumps([cpu, list(flags), torch.__version__, threads, list(shape), dtype, PROBE_LENGTH])


def probe(
    shape: tuple[int, int, int], dtype: torch.dtype, cache: Path | None = None, cpuinfo: str | None = None
) -> KernelProbe:
    """The faster kernel for ``shape = (Hq, Hkv, D)`` in ``dtype`` at torch's current threads: read
    from ``cache`` (a JSON file) when this machine probed the same before, else measured and written there."""
    cpu, flags = cpu_identity(read_cpuinfo() if cpuinfo is None else cpuinfo)
    threads, name = torch.get_num_threads(), str(dtype).removeprefix("torch.")
    key = _key(cpu, flags, threads, shape, name)
    known = load_cache(cache)
    if key in known:
        found = known[key]
        return KernelProbe(**{**found, "flags": tuple(found["flags"]), "shape": tuple(shape), "cached": True})
    t = time_kernels(shape, dtype, PROBE_LENGTH)
    kernel = "blocked" if t["blocked"] <= WINS * t["sdpa"] else "sdpa"
    made = KernelProbe(
        kernel, t["sdpa"], t["blocked"], cpu, flags, threads, shape, name, PROBE_LENGTH, torch.__version__
    )
    if cache is not None:
        save_cache(cache, {**known, key: {k: v for k, v in asdict(made).items() if k not in ("cached", "forced")}})
    return made


def forced() -> str | None:
    """The kernel ``ATTNTEMP_ATTENTION`` forces, or None (a value not in :data:`KERNELS` is refused)."""
    value = os.environ.get(ENV, "").strip()
    if value and value not in KERNELS:
        raise ValueError(f"{ENV}={value!r}: expected one of {', '.join(KERNELS)}")
    return value or None


def pick_kernel(hq: int, hkv: int, d: int, dtype: torch.dtype) -> KernelProbe:
    """The kernel for this head shape and dtype: forced, else probed once per process (from the
    disk cache where this machine probed before), said in one line on stderr the first time."""
    name = forced()
    if name is not None:
        return KernelProbe(name, 0.0, 0.0, "", (), 0, (hq, hkv, d), str(dtype), 0, torch.__version__, forced=True)
    return _picked(hq, hkv, d, dtype, torch.get_num_threads())


@functools.cache
def _picked(hq: int, hkv: int, d: int, dtype: torch.dtype, threads: int) -> KernelProbe:
    from ..loading import cache_dir

    found = probe((hq, hkv, d), dtype, cache=cache_dir() / KERNEL_PROBE_FILE)
    print(f"attntemp: {found.line()}", file=sys.stderr)
    return found


def kernel_for(query: torch.Tensor, key: torch.Tensor) -> str:
    """Which kernel a causal prefill of ``query [B, Hq, L, D]`` against ``key [B, Hkv, L, D]`` runs:
    ``sdpa`` off the CPU, below :data:`MIN_LENGTH` or for a cache step; else :func:`pick_kernel`'s."""
    lq, lk = query.shape[2], key.shape[2]
    if query.device.type != "cpu" or lq != lk or lq < MIN_LENGTH or query.requires_grad:
        return "sdpa"
    return pick_kernel(query.shape[1], key.shape[1], query.shape[3], query.dtype).kernel
