"""The fastest CPU dtype for a model's linear layers on this machine, measured, not guessed.

bfloat16 halves the bytes a CPU matmul streams and, with ``avx512_bf16`` or AMX, runs native
dot products; without them torch emulates it, slower than float32. Which wins differs per machine
(docs/scale.md: SmolLM2's linear layers 2.4x as fast in bf16 on an AMD EPYC with
``avx512_bf16``, the whole forward 0.76x on an Intel Xeon with it), so ``--dtype auto`` decides by
a short probe: ``torch.nn.functional.linear`` on the model's own ``(tokens, hidden) x
(intermediate, hidden)`` shape, float32 against bfloat16, the median of a few runs each at the
threads the run will use. The decision is cached per (CPU model, its bf16 flags, torch version,
threads, shape) in ``$ATTNTEMP_CACHE/dtype_probe.json`` and said in one line on stderr.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...utils.lazy import lazy
from .machine import CPU_FLAGS, cpu_identity, load_cache, read_cpuinfo, save_cache

if TYPE_CHECKING:
    import torch
else:
    torch = lazy("torch")


BF16_WINS = 0.9  # bfloat16 is chosen when its time is at most this share of float32's
DTYPE_PROBE_FILE = "dtype_probe.json"


@dataclass(frozen=True)
class DtypeProbe:
    """What a probe measured and chose: seconds per linear call in each dtype and their ratio."""

    dtype: str
    float32_s: float
    bfloat16_s: float
    cpu: str
    flags: tuple[str, ...]
    threads: int
    shape: tuple[int, int, int]  # tokens, in, out
    torch: str
    cached: bool = False

    @property
    def ratio(self) -> float:
        """bfloat16's time over float32's (below 1: bfloat16 is faster)."""
        return self.bfloat16_s / self.float32_s

    def line(self) -> str:
        """The decision in one line, with what it rests on."""
        how, (n, d_in, d_out) = ("cached probe" if self.cached else "probe"), self.shape
        flags = " ".join(self.flags) or "none of " + " ".join(CPU_FLAGS)
        return (
            f"dtype auto: {self.dtype} (a {n}x{d_in} by {d_out}x{d_in} linear takes {self.ratio:.2f}x float32's "
            f"time in bfloat16 on {self.cpu} [{flags}], {self.threads} threads, torch {self.torch}; {how})"
        )


def time_linear(dtype: torch.dtype, tokens: int, d_in: int, d_out: int, repeats: int = 3) -> float:
    """Median seconds of ``linear(x [tokens, d_in], w [d_out, d_in])`` in ``dtype`` (after a warm-up)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, d_in, generator=gen).to(dtype)  # [tokens, d_in]
    w = torch.randn(d_out, d_in, generator=gen).to(dtype)  # [d_out, d_in]
    torch.nn.functional.linear(x, w)  # warm-up: kernel selection, page faults
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.nn.functional.linear(x, w)  # [tokens, d_out]
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _key(cpu: str, flags: tuple[str, ...], threads: int, shape: tuple[int, int, int]) -> str:
    what = json.dumps([cpu, flags, torch.__version__, threads, shape])
    return hashlib.sha256(what.encode()).hexdigest()[:16]


def probe_cpu_dtype(
    d_in: int, d_out: int, tokens: int = 1024, cache: Path | None = None, cpuinfo: str | None = None
) -> DtypeProbe:
    """float32 or bfloat16 for a model whose linear layers are ``d_in -> d_out`` on this CPU at
    torch's current threads: read from ``cache`` (a JSON file) when this machine probed the same
    shape before, else measured and written there."""
    cpu, flags = cpu_identity(read_cpuinfo() if cpuinfo is None else cpuinfo)
    threads, shape = torch.get_num_threads(), (int(tokens), int(d_in), int(d_out))
    key = _key(cpu, flags, threads, shape)
    known = load_cache(cache)
    if key in known:
        return DtypeProbe(**{**known[key], "flags": tuple(known[key]["flags"]), "shape": shape, "cached": True})
    fp32, bf16 = (time_linear(dt, *shape) for dt in (torch.float32, torch.bfloat16))
    chosen = "bfloat16" if bf16 <= BF16_WINS * fp32 else "float32"
    found = DtypeProbe(chosen, fp32, bf16, cpu, flags, threads, shape, torch.__version__)
    if cache is not None:
        save_cache(cache, {**known, key: {k: v for k, v in asdict(found).items() if k != "cached"}})
    return found


def linear_shape(config: dict[str, Any] | None) -> tuple[int, int] | None:
    """``(hidden, intermediate)`` of a ``config.json`` dict (its text part), or None when unknown."""
    text = (config or {}).get("text_config") or config or {}
    hidden, inter = text.get("hidden_size"), text.get("intermediate_size")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (hidden, inter)):
        return None
    return int(hidden), int(inter)  # type: ignore[arg-type]
